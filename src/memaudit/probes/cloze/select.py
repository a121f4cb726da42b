"""Surprisal tokens: which candidates of a text the cloze probe masks (Ravichander et al. §3, §4.1, App. A).

Three token types, each selected per text from its candidates
(:mod:`memaudit.probes.cloze.candidates`):

- **Prob** (Eq. 2, ``-log P(w | h_c)``): candidates whose log-probability under a reference
  model is below ``prob_threshold`` (default -12), lowest first;
- **Rank** (Eq. 3, ``|{x : P(x | h_c) > P(w | h_c)}|``): candidates whose rank is above
  ``rank_threshold`` (default 2000), highest first;
- **Person**: candidates inside a PERSON entity (character names, §4.1), in text order; no
  reference model needed. A title that spaCy's NER puts inside the name (``Mrs`` of ``Mrs
  Elton``, ``Monsieur``, ``Lady``: :data:`TITLES`) is no name: any reader fills ``[MASK] Elton``.

Each keeps at most ``k`` (default 10) per text: "We select surprisal tokens which have a log
likelihood < -12, or a rank > 2000 ... we cutoff at 10 tokens for text where more than 10
high-surprisal tokens are available (selecting the lowest probability or highest rank tokens
that pass the threshold)" (Appendix A). Ties keep text order.

The reference model's numbers come from :meth:`memaudit.backends.base.Backend.word_logprobs`
(:mod:`memaudit.models.word_logprobs`), one record per candidate. As the authors' code reads the
first word piece, the log-probability compared is the word's first token's (``logprob_of=
"first_token"``; ``"word"`` compares the whole word's) and the rank is always the first token's.
Candidates whose tokens reach outside the word (``aligned`` false) are never selected by Prob or
Rank: their numbers describe more than the word.

**Departure from the paper.** The paper's reference model is BERT (``bert-base-uncased``), a
masked LM: the word is scored with the context on *both* sides. The reference model here is a
causal LM, which scores the word from the text to its *left* only (nothing ships offline that
scores both sides). A word that the right context gives away (a name introduced just after)
can therefore look surprising here and not to BERT, and the log-probabilities sit on another
scale than BERT's, which is why the thresholds are parameters and :func:`tune_threshold` fits
them, without labels, on the benchmark's own texts (its validation passages where it has a fixed
split, as BookMIA has: :func:`memaudit.probes.cloze.items.thresholds_for`) rather than taking -12
and 2000 as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from memaudit.models import word_logprobs  # noqa: F401 -- computes the numbers selected on: in the cloze fingerprint
from memaudit.probes.cloze.candidates import Candidate

PROB, RANK, PERSON = "prob", "rank", "person"
MEASURES = (PROB, RANK, PERSON)
PROB_THRESHOLD = -12.0
RANK_THRESHOLD = 2000
TOP_K = 10
LOGPROB_KEYS = {"first_token": "first_logprob", "word": "logprob"}
# Titles and honorifics that en_core_web_sm puts inside a PERSON span (casefolded); never Person tokens.
# Words that are also common names or surnames (King, Prince, Don, Major) are left out.
TITLES = frozenset("""
    mr mrs ms miss mx mister missus madam madame dr doctor sir dame lady lord rev reverend prof professor
    captain colonel lieutenant sergeant admiral inspector detective aunt auntie uncle saint duchess countess
    monsieur mademoiselle mme mlle herr frau fraulein señor señora señorita signor signora signorina
""".split())
PROB_THRESHOLD_STEP = 0.01  # tuned log-probability thresholds are multiples of this (they go into configs)


@dataclass(frozen=True)
class SurprisalToken:
    """A selected candidate, with the reference model's numbers for it (``None`` where not scored)."""

    candidate: Candidate
    measure: str
    logprob: float | None
    rank: int | None


def _logprob_key(logprob_of: str) -> str:
    if logprob_of not in LOGPROB_KEYS:
        raise ValueError(f"logprob_of {logprob_of!r}: expected one of {', '.join(LOGPROB_KEYS)}")
    return LOGPROB_KEYS[logprob_of]


def _check_measure(measure: str) -> None:
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: expected one of {', '.join(MEASURES)}")


def _check_scores(candidates: Sequence[Candidate], scores: Sequence[Mapping]) -> None:
    if len(scores) != len(candidates):
        raise ValueError(f"{len(candidates)} candidates but {len(scores)} score records")
    for c, s in zip(candidates, scores):
        if (s["start"], s["end"]) != c.span:
            raise ValueError(f"score record for span ({s['start']}, {s['end']}) given for candidate {c.span} "
                             f"{c.word!r}: scores must follow the candidates' order")


def measure_value(score: Mapping, measure: str, logprob_of: str = "first_token") -> float | None:
    """What ``measure`` compares for one scored candidate (``None``: never selected by it).

    Prob: the log-probability (``logprob_of``); Rank: the first token's rank. Unaligned or
    unscored (NaN) candidates have none.
    """
    if not score.get("aligned", True):
        return None
    value = score[_logprob_key(logprob_of)] if measure == PROB else score["rank"]
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def passes(value: float, measure: str, threshold: float) -> bool:
    """Prob keeps ``value < threshold``, Rank ``value > threshold`` (Appendix A)."""
    return value < threshold if measure == PROB else value > threshold


def select_surprisal_tokens(candidates: Sequence[Candidate], scores: Sequence[Mapping] | None, measure: str, *,
                            prob_threshold: float = PROB_THRESHOLD, rank_threshold: float = RANK_THRESHOLD,
                            k: int = TOP_K, logprob_of: str = "first_token") -> list[SurprisalToken]:
    """One text's surprisal tokens of one type, most surprising first (module docstring).

    ``scores`` are the reference model's records for ``candidates`` in the same order
    (:meth:`~memaudit.backends.base.Backend.word_logprobs` over their spans); ``None`` is
    allowed for ``person``, which needs none.
    """
    _check_measure(measure)
    key = _logprob_key(logprob_of)
    if scores is not None:
        _check_scores(candidates, scores)

    def token(i: int) -> SurprisalToken:
        s = scores[i] if scores is not None else {}
        return SurprisalToken(candidates[i], measure, s.get(key), s.get("rank"))

    if measure == PERSON:
        return [token(i) for i, c in enumerate(candidates) if c.is_person and c.word.casefold() not in TITLES][:k]
    if scores is None:
        raise ValueError(f"measure {measure!r} needs the reference model's scores")
    threshold = prob_threshold if measure == PROB else rank_threshold
    kept = [(v, i) for i, s in enumerate(scores)
            if (v := measure_value(s, measure, logprob_of)) is not None and passes(v, measure, threshold)]
    sign = 1 if measure == PROB else -1  # Prob: lowest log-probability first; Rank: highest rank first
    kept.sort(key=lambda vi: (sign * vi[0], candidates[vi[1]].start))
    return [token(i) for _, i in kept[:k]]


def select_many(candidates: Sequence[Sequence[Candidate]], scores: Sequence[Sequence[Mapping]] | None,
                measure: str, **params) -> list[list[SurprisalToken]]:
    """:func:`select_surprisal_tokens` for every text (``params``: thresholds, ``k``, ``logprob_of``)."""
    if scores is not None and len(scores) != len(candidates):
        raise ValueError(f"{len(candidates)} texts of candidates but {len(scores)} of scores")
    return [select_surprisal_tokens(c, scores[i] if scores is not None else None, measure, **params)
            for i, c in enumerate(candidates)]


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold tuned by :func:`tune_threshold`, and what it gives on the texts it was tuned on."""

    measure: str
    threshold: float
    min_tokens: int
    target_coverage: float
    coverage: float  # share of the texts with at least min_tokens candidates passing the threshold
    mean_passing: float  # candidates passing per text (before the top-k cut)
    n_texts: int
    reached: bool  # coverage >= target_coverage


def tune_threshold(scores: Sequence[Sequence[Mapping]], measure: str, *, target_coverage: float = 0.5,
                   min_tokens: int = 2, logprob_of: str = "first_token") -> ThresholdChoice:
    """The strictest threshold at which ``target_coverage`` of the texts keep ``min_tokens`` tokens.

    ``scores``: per validation text, the reference model's records for its candidates. The paper
    tunes its thresholds on a held-out split (the first 1870 BookMIA rows, §4 and App. A) without
    saying on what; here the criterion needs no labels, so it cannot fit the member/non-member
    split it is later tested on, and the caller passes the validation texts where the benchmark has
    a fixed split (BookMIA's), every text where it has none. Its reasoning: a reconstructed word is
    evidence of memorisation only as far as it was hard to guess, so the threshold should be as
    strict as possible; but a text is flagged only when at least two of its tokens are
    reconstructed (§4.1), so a text with fewer than ``min_tokens`` selected tokens can never be
    flagged. The tuned threshold keeps
    ``min_tokens`` tokens in ``target_coverage`` of the texts (default: half, the median text),
    and it transfers to any reference model (a causal LM's log-probabilities are not on BERT's
    scale, module docstring).

    Per text let ``v`` be its ``min_tokens``-th most surprising value (``min_tokens``-th lowest
    log-probability, or highest rank); the text qualifies when ``v`` passes the threshold. With
    ``m = ceil(target_coverage * n)``, the threshold is the strictest that passes the ``m``-th most
    surprising ``v``: for Rank ``v_m - 1`` (ranks are integers, kept when ``> threshold``); for Prob
    the smallest multiple of :data:`PROB_THRESHOLD_STEP` above ``v_m``. When fewer than ``m`` texts
    have ``min_tokens`` scored candidates at all, the threshold is the loosest that still
    separates (every text that can qualify does) and ``reached`` is false.
    """
    if measure not in (PROB, RANK):
        raise ValueError(f"only {PROB} and {RANK} have thresholds, not {measure!r}")
    if not 0 < target_coverage <= 1 or min_tokens < 1:
        raise ValueError("target_coverage must be in (0, 1] and min_tokens at least 1")
    sign = 1 if measure == PROB else -1
    per_text = [sorted((v for s in text if (v := measure_value(s, measure, logprob_of)) is not None),
                       key=lambda v: sign * v) for text in scores]
    qualifying = sorted((vals[min_tokens - 1] for vals in per_text if len(vals) >= min_tokens),
                        key=lambda v: sign * v)
    if not qualifying:
        raise ValueError(f"no text has {min_tokens} scored candidates: nothing to tune {measure} on")
    m = math.ceil(target_coverage * len(per_text))
    v = qualifying[min(m, len(qualifying)) - 1]
    threshold = int(v) - 1 if measure == RANK else _step_above(v)
    counts = [sum(passes(x, measure, threshold) for x in vals) for vals in per_text]
    coverage = sum(c >= min_tokens for c in counts) / len(per_text)
    return ThresholdChoice(measure, threshold, min_tokens, target_coverage, coverage,
                           sum(counts) / len(per_text), len(per_text), coverage >= target_coverage)


def _step_above(v: float) -> float:
    """The smallest multiple of :data:`PROB_THRESHOLD_STEP` strictly above ``v`` (float rounding checked)."""
    t = round((math.floor(v / PROB_THRESHOLD_STEP) + 1) * PROB_THRESHOLD_STEP, 10)
    while not v < t:
        t = round(t + PROB_THRESHOLD_STEP, 10)
    return t
