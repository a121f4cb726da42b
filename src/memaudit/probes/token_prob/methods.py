"""The token-probability family of membership-inference scores.

All scores follow the package-wide convention **higher = more likely a member**.
With ``lp_t = log p(x_t | x_<t)`` over the T scored tokens of a passage and
``L = -(1/T) sum_t lp_t`` its mean negative log-likelihood (log-perplexity):

=====================  ==========================================================  =========================
method                 score                                                       source
=====================  ==========================================================  =========================
``loss``               ``-L``  (perplexity = exp(L))                               Yeom et al. 2018
``zlib``               ``-L / zlib_bytes(x)``                                      Carlini et al. 2021
``lowercase``          ``L(lower(x)) / L(x)`` (ratio of log-perplexities)           Carlini et al. 2021
``min_k_<k>pct``       mean of the k% lowest ``lp_t``                              Shi et al. 2024 (Min-K%)
``min_k_plus_plus_..`` mean of the k% lowest ``(lp_t - mu_t) / sigma_t``           Zhang et al. 2024 (Min-K%++)
``ref_<model>``        ``L_ref(x) - L(x)``                                         Carlini et al. 2021; Mireshghallah et al. 2022
=====================  ==========================================================  =========================

``mu_t``/``sigma_t`` are the mean and standard deviation of ``log p(z|x_<t)``
under ``z ~ p(.|x_<t)`` (see :mod:`memaudit.models.token_stats`). Each model
computes L on its own tokenisation; the reference score is a difference of
per-token means, so tokenisers may differ. ``zlib_bytes(x)`` compresses the UTF-8 bytes of the
text the model scored: a passage cut at the model's ``max_tokens`` as far as its scored tokens
reach (``TokenStats.chars``). The "k% lowest" keeps
``max(1, floor(k*T))`` tokens: the Min-K% reference code and MIMIR take
``int(len * k)``, with no floor of one (the mean of nothing for a short text).

``lowercase`` and ``ref_<model>`` compare two forward passes, each cut at its own ``max_tokens``
(a reference model's own; the lowercased text's own tokenisation). Where the two cover different
characters of a passage, both L are taken over the same characters: the longest prefix of the
passage at which a token of each pass ends (:func:`shared_span`, from ``TokenStats.ends``). Where
the statistics do not record where their tokens end, such a passage is left out of that method's
scores and counted in the job's log.
"""

from __future__ import annotations

import abc
import math
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.models.token_stats import TokenStats
from memaudit.probes.token_prob.plan import method_name, method_specs


@dataclass(frozen=True)
class SharedSpan:
    """Each passage's mean NLL under two forward passes over the same characters (:func:`shared_span`)."""

    nll: np.ndarray  # the model's
    other: np.ndarray  # the other pass's: a reference model's, or the model's on the lowercased passage
    cut: np.ndarray  # bool: the passes scored different characters (each cut at its own max_tokens)
    left_out: np.ndarray  # bool, within cut: no shared span found (NaN in nll and other)
    chars: np.ndarray  # the characters compared (the passage's scored characters where not cut)
    no_ends: bool  # the statistics of a pass do not record where their tokens end
    no_chars: bool  # the statistics of a pass do not record which characters they scored

    def note(self, method: str) -> str | None:
        """One line for the job's log: how many passages the two passes cut differently, how many of those
        were compared on the characters both scored and how many were left out, and why; None if nothing
        to say."""
        parts = []
        n_cut, n_left = int(self.cut.sum()), int(self.left_out.sum())
        if n_cut:
            shared = self.cut & ~self.left_out
            parts.append(f"{n_cut} of {len(self.cut)} passages scored to different lengths by the two passes (each "
                         f"cut at its own max_tokens): {n_cut - n_left} compared on the characters both scored"
                         + (f" (median {int(np.median(self.chars[shared]))} characters)" if shared.any() else ""))
        if n_left:
            why = ("their token statistics do not record where each token ends (written before they did, or a "
                   "tokenizer without character offsets; rerun them: snakemake -R token_stats, and "
                   "token_stats_lowercase for the lowercase score)"
                   if self.no_ends else "no token of the two passes ends at the same character")
            parts.append(f"{n_left} left out of its scores: {why}")
        if self.no_chars:
            parts.append("token statistics that do not record which characters of each passage they scored "
                         "(written before they did) are taken as covering the whole passage, which a pass cut at "
                         "its max_tokens does not; rerun them (snakemake -R token_stats, and token_stats_lowercase for "
                         "the lowercase score) to compare the same characters")
        return f"{method}: " + "; ".join(parts) if parts else None


def _lowered_positions(text: str) -> np.ndarray | None:
    """Where each prefix of ``text`` ends in ``text.lower()`` (``None``: at the same place, as for every text
    whose characters each lowercase to one; a few, such as U+0130, lowercase to two)."""
    if len(text.lower()) == len(text):
        return None
    return np.concatenate([[0], np.cumsum([len(c.lower()) for c in text])])


def shared_span(stats: TokenStats, other: TokenStats, texts: Sequence[str], *, lowercased: bool = False) -> SharedSpan:
    """The mean NLL of each passage under ``stats`` and under ``other`` over the same characters.

    Each pass is cut at its own ``max_tokens`` (``TokenStats.chars``: how many leading characters its
    tokens cover; ``other`` over ``text.lower()`` when ``lowercased``). Where the two cover the same
    characters, each is its whole mean (:meth:`TokenStats.mean_nll`); where not, each is the mean over its
    tokens that end at or before ``p``, the last character at which a token of each pass ends
    (``TokenStats.ends``: both then read ``x[:p]``, the other ``x[:p].lower()``). Without ``ends``, or
    without such a ``p``, the passage is ``left_out`` (NaN). Statistics that do not record ``chars`` are
    taken as covering each whole passage (``no_chars``), as :func:`scored_texts` takes them.
    """
    nll, oth = stats.mean_nll(), other.mean_nll()
    n = len(texts)
    cut, left_out = np.zeros(n, bool), np.zeros(n, bool)
    chars = np.array([len(t) for t in texts], dtype=np.int64) if stats.chars is None else stats.chars.astype(np.int64)
    no_ends = stats.ends is None or other.ends is None
    for i, text in enumerate(texts):
        to_other = _lowered_positions(text) if lowercased else None
        other_chars = int(other.chars[i]) if other.chars is not None else len(text.lower() if lowercased else text)
        if (chars[i] if to_other is None else to_other[chars[i]]) == other_chars:
            continue
        cut[i] = True
        if no_ends:
            left_out[i], nll[i], oth[i] = True, np.nan, np.nan
            continue
        ends, other_ends = stats.passage_ends(i), other.passage_ends(i)
        ends_there = ends if to_other is None else to_other[ends]  # in the other pass's text
        common = np.intersect1d(ends_there, other_ends)
        if not len(common):
            left_out[i], nll[i], oth[i] = True, np.nan, np.nan
            continue
        k, k_other = np.searchsorted(ends_there, common[-1], "right"), np.searchsorted(other_ends, common[-1], "right")
        nll[i] = -stats.passage(i)[0][:k].astype(np.float64).mean()
        oth[i] = -other.passage(i)[0][:k_other].astype(np.float64).mean()
        chars[i] = ends[k - 1]
    return SharedSpan(nll, oth, cut, left_out, chars, no_ends, stats.chars is None or other.chars is None)


@dataclass
class ScoringContext:
    texts: Sequence[str]
    stats: TokenStats
    lowercase: TokenStats | None = None
    references: dict[str, TokenStats] = field(default_factory=dict)
    # each two-pass method's SharedSpan, by method name (computed once: its scores, and the job's log)
    spans: dict[str, SharedSpan] = field(default_factory=dict)

    def shared_span(self, method: str, other: TokenStats, *, lowercased: bool = False) -> SharedSpan:
        if method not in self.spans:
            self.spans[method] = shared_span(self.stats, other, self.texts, lowercased=lowercased)
        return self.spans[method]


def k_lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``max(1, floor(k*len))`` smallest values (NaN for an empty passage). The floor of the
    decimal product: ``int(90 * 0.7)`` is 62 in binary floating point (mimir's expression), 63 here."""
    if len(values) == 0:
        return float("nan")
    n = max(1, math.floor(len(values) * k + 1e-9))
    return float(np.mean(np.partition(values.astype(np.float64), n - 1)[:n]))


class Method(abc.ABC):
    """One score; subclasses set ``name`` and implement :meth:`score` (one value per passage)."""

    name: str
    needs_lowercase = False
    needs_distribution = False
    reference: str | None = None

    @abc.abstractmethod
    def score(self, ctx: ScoringContext) -> np.ndarray:
        """One score per passage, higher = more likely a member."""

    def span(self, ctx: ScoringContext) -> SharedSpan | None:
        """A method comparing two forward passes: the characters each passage is compared on (its
        ``left_out`` passages are NaN in :meth:`score` and left out of the tables); None for the others."""
        return None


class Loss(Method):
    name = "loss"

    def score(self, ctx):
        return -ctx.stats.mean_nll()


def zlib_lengths(texts) -> np.ndarray:
    """Each text's zlib-compressed length in bytes (UTF-8): the zlib attack's denominator."""
    return np.array([len(zlib.compress(t.encode("utf-8"))) for t in texts], dtype=np.float64)


def scored_texts(ctx: ScoringContext) -> list[str]:
    """Each text as far as its scored tokens reach (``TokenStats.chars``: a text cut at ``max_tokens``
    was scored on its first part only); the whole text for statistics that do not record it."""
    if ctx.stats.chars is None:
        return list(ctx.texts)
    return [t[:int(n)] for t, n in zip(ctx.texts, ctx.stats.chars)]


class Zlib(Method):
    name = "zlib"

    def score(self, ctx):
        # the zlib entropy of the text the model scored: a text cut at max_tokens compressed whole
        # divided the loss of its first tokens by the bytes of all of it
        return -ctx.stats.mean_nll() / zlib_lengths(scored_texts(ctx))


class Lowercase(Method):
    name = "lowercase"
    needs_lowercase = True

    def span(self, ctx):
        return ctx.shared_span(self.name, ctx.lowercase, lowercased=True)

    def score(self, ctx):
        span = self.span(ctx)
        return span.other / span.nll


class MinK(Method):
    def __init__(self, k: float):
        self.k = k
        self.name = method_name("min_k", k)

    def score(self, ctx):
        return np.array([k_lowest_mean(ctx.stats.passage(i)[0], self.k) for i in range(len(ctx.stats))])


class MinKPlusPlus(Method):
    needs_distribution = True

    def __init__(self, k: float):
        self.k = k
        self.name = method_name("min_k_plus_plus", k)

    def score(self, ctx):
        out = np.empty(len(ctx.stats))
        for i in range(len(ctx.stats)):
            lp, mu, sd = ctx.stats.passage(i)
            z = (lp.astype(np.float64) - mu) / np.maximum(sd.astype(np.float64), 1e-12)
            out[i] = k_lowest_mean(z, self.k)
        return out


class Reference(Method):
    def __init__(self, reference: str):
        self.reference = reference
        self.name = method_name("reference", reference)

    def span(self, ctx):
        return ctx.shared_span(self.name, ctx.references[self.reference])

    def score(self, ctx):
        span = self.span(ctx)
        return span.other - span.nll


_CLASSES = {"loss": Loss, "zlib": Zlib, "lowercase": Lowercase, "min_k": MinK, "min_k_plus_plus": MinKPlusPlus,
            "reference": Reference}


def build_methods(methods: Sequence[str], min_k_ratios: Sequence[float],
                  reference_models: Sequence[str], model: str) -> list[Method]:
    """Instantiate the configured methods for ``model`` (:func:`memaudit.probes.token_prob.plan.method_specs`:
    a model is never its own reference)."""
    return [_CLASSES[m]() if arg is None else _CLASSES[m](arg)
            for m, arg in method_specs(methods, min_k_ratios, reference_models, model)]


def score_passages(ctx: ScoringContext, methods: Sequence[Method], passages: pd.DataFrame) -> pd.DataFrame:
    """Long table (passage_id, doc_id, label, method, score, scored_chars, truncated) for every method, without
    the passages a two-pass method leaves out (:meth:`Method.span`; ``ctx.spans`` holds them, for the job's log).

    ``scored_chars``: how many leading characters of the passage the score covers (a passage cut at
    ``max_tokens`` is scored on its first part; a two-pass method's, the characters both passes scored);
    ``truncated``: fewer than the whole passage. Without them the table gave a cut passage's score as
    the whole passage's, and only the job's log counted the cuts."""
    lengths = np.array([len(t) for t in ctx.texts], dtype=np.int64)
    whole = lengths if ctx.stats.chars is None else ctx.stats.chars.astype(np.int64)
    frames = []
    for m in methods:
        scores, span = m.score(ctx), m.span(ctx)
        keep = slice(None) if span is None else ~span.left_out
        chars = whole if span is None else span.chars
        frames.append(pd.DataFrame({"passage_id": passages["passage_id"].to_numpy()[keep],
                                    "doc_id": passages["doc_id"].to_numpy()[keep],
                                    "label": passages["label"].to_numpy()[keep],
                                    "method": m.name, "score": scores[keep], "scored_chars": chars[keep],
                                    "truncated": chars[keep] < lengths[keep]}))
    return pd.concat(frames, ignore_index=True)


def aggregate_documents(passage_scores: pd.DataFrame, how: str = "mean") -> pd.DataFrame:
    """Document scores: aggregate each document's passage scores (mean by default)."""
    grouped = passage_scores.groupby(["method", "doc_id", "label"], sort=True)["score"]
    doc = grouped.agg(how).reset_index()
    doc["n_passages"] = grouped.size().to_numpy()
    return doc[["doc_id", "label", "method", "score", "n_passages"]]
