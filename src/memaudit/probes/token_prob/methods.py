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
"""

from __future__ import annotations

import abc
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.models.token_stats import TokenStats
from memaudit.probes.token_prob.plan import method_name, method_specs


@dataclass
class ScoringContext:
    texts: Sequence[str]
    stats: TokenStats
    lowercase: TokenStats | None = None
    references: dict[str, TokenStats] = field(default_factory=dict)


def k_lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``max(1, floor(k*len))`` smallest values (NaN for an empty passage)."""
    if len(values) == 0:
        return float("nan")
    n = max(1, int(len(values) * k))
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

    def score(self, ctx):
        return ctx.lowercase.mean_nll() / ctx.stats.mean_nll()


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

    def score(self, ctx):
        return ctx.references[self.reference].mean_nll() - ctx.stats.mean_nll()


_CLASSES = {"loss": Loss, "zlib": Zlib, "lowercase": Lowercase, "min_k": MinK, "min_k_plus_plus": MinKPlusPlus,
            "reference": Reference}


def build_methods(methods: Sequence[str], min_k_ratios: Sequence[float],
                  reference_models: Sequence[str], model: str) -> list[Method]:
    """Instantiate the configured methods for ``model`` (:func:`memaudit.probes.token_prob.plan.method_specs`:
    a model is never its own reference)."""
    return [_CLASSES[m]() if arg is None else _CLASSES[m](arg)
            for m, arg in method_specs(methods, min_k_ratios, reference_models, model)]


def score_passages(ctx: ScoringContext, methods: Sequence[Method], passages: pd.DataFrame) -> pd.DataFrame:
    """Long table (passage_id, doc_id, label, method, score) for every method."""
    frames = []
    for m in methods:
        frames.append(pd.DataFrame({"passage_id": passages["passage_id"].to_numpy(),
                                    "doc_id": passages["doc_id"].to_numpy(),
                                    "label": passages["label"].to_numpy(),
                                    "method": m.name, "score": m.score(ctx)}))
    return pd.concat(frames, ignore_index=True)


def aggregate_documents(passage_scores: pd.DataFrame, how: str = "mean") -> pd.DataFrame:
    """Document scores: aggregate each document's passage scores (mean by default)."""
    grouped = passage_scores.groupby(["method", "doc_id", "label"], sort=True)["score"]
    doc = grouped.agg(how).reset_index()
    doc["n_passages"] = grouped.size().to_numpy()
    return doc[["doc_id", "label", "method", "score", "n_passages"]]
