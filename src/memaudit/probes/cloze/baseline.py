"""The prefix-probing baseline of the information-guided probes (Section 4, Appendix E).

A model gets the first 50 words of a passage (the prefix probe's ``prefix_words``; on the NYT set
the set's own Exhibit J prefix, whole, from its passages' ``meta``, and the LCS is counted against
the first ``continuation_words`` words of its completion, as :mod:`memaudit.datasets.prefix` cuts
them) after an instruction and continues it; the continuation is compared with the original by
the number of words in their longest common *subsequence* (LCS, Karamolegkou et al. 2023a, as
Appendix E describes it), on lowercased alphanumeric words. A logistic regression fitted on the
validation split's LCS values (label: memorised, i.e. member) predicts memorised texts on the
test split (:func:`versus_prefix`: BookMIA's fixed split, else repeated random halves).

Prompts (Appendix E): ``Please complete the following text with more than 150 words:``
(fiction; the instruction the existing prefix probe already uses,
:data:`memaudit.probes.prefix.runner.INSTRUCTION`) and ``Complete exactly and don't
hallucinate`` (news), each put before the prefix as the prefix probe does
(:func:`memaudit.probes.prefix.runner.prompts_for`: instruction, blank line, prefix). The
paper prints the news instruction in quotes without a final full stop, and typesets the
apostrophe as ``’`` (LaTeX's rendering of a typed ``'``); we send the ASCII apostrophe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from memaudit.datasets.types import TEST, VALIDATION
from memaudit.errors import InputError
from memaudit.probes.cloze.plan import method_name
from memaudit.probes.overlap import lcs_length
from memaudit.probes.prefix.runner import INSTRUCTION as FICTION_INSTRUCTION
from memaudit.probes.prefix.runner import prompts_for, words

NEWS_INSTRUCTION = "Complete exactly and don't hallucinate"  # Appendix E
PREFIX_INSTRUCTIONS = {"fiction": FICTION_INSTRUCTION, "news": NEWS_INSTRUCTION}
PREFIX_WORDS = 50  # Section 4.1, Appendix E
_TOKEN = re.compile(r"\S+")


def split_prefix(text: str, n_words: int = PREFIX_WORDS) -> tuple[str, str]:
    """``(prefix, continuation)``: the first ``n_words`` whitespace-separated words and the rest,
    both as they stand in ``text`` (spacing kept). A text of at most ``n_words`` words has no
    continuation and is an :class:`InputError` (nothing to compare with)."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    if len(spans) <= n_words:
        raise InputError(f"a text of {len(spans)} words has no continuation after a {n_words}-word prefix")
    end = spans[n_words - 1][1]
    return text[:end], text[end:].strip()


def prefix_prompt(prefix: str, domain: str = "fiction", *, chat: bool = True) -> str:
    """The prefix probe's prompt: Appendix E's instruction for ``domain`` (``fiction`` or
    ``news``) before the prefix for chat models, the bare prefix for plain-text models."""
    if domain not in PREFIX_INSTRUCTIONS:
        raise ValueError(f"unknown prefix-probe domain {domain!r} (known: {', '.join(PREFIX_INSTRUCTIONS)})")
    return prompts_for([{"prefix": prefix}], instruction=PREFIX_INSTRUCTIONS[domain], chat=chat)[0]


def lcs_words(generation: str, reference: str) -> int:
    """Words in the longest common subsequence of a continuation and the original (Appendix E)."""
    return lcs_length(words(generation), words(reference))


@dataclass(frozen=True)
class LcsThreshold:
    """A logistic regression of memorised on LCS, as its coefficients.

    ``P(memorised | lcs) = sigmoid(coef * lcs + intercept)``; predicted memorised where that is
    above 1/2, i.e. ``lcs > threshold = -intercept / coef`` when ``coef > 0`` (below it when
    ``coef < 0``, a validation set where LCS runs the wrong way; nothing or everything when 0).
    """

    coef: float
    intercept: float

    @property
    def threshold(self) -> float:
        return -self.intercept / self.coef if self.coef else float("nan")

    def predict(self, lcs: Sequence[float]) -> np.ndarray:
        """Predicted memorised (bool) for LCS values (sklearn's rule: decision function > 0)."""
        return self.coef * np.asarray(lcs, dtype=float) + self.intercept > 0


def fit_lcs_threshold(lcs: Sequence[float], memorised: Sequence[int | bool]) -> LcsThreshold:
    """Fit ``sklearn.linear_model.LogisticRegression`` (defaults: L2, C = 1) on validation LCS
    values (Appendix E). Both classes must occur."""
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(lcs, dtype=float).reshape(-1, 1)
    y = np.asarray(memorised).astype(int).ravel()
    if x.shape[0] != y.shape[0]:
        raise InputError(f"{x.shape[0]} LCS values but {y.shape[0]} labels")
    if not np.isfinite(x).all():
        raise InputError("LCS values must be finite")
    if len(set(y.tolist())) < 2:
        raise InputError("the validation split needs memorised and non-memorised texts to fit the LCS threshold")
    model = LogisticRegression().fit(x, y)
    return LcsThreshold(coef=float(model.coef_[0, 0]), intercept=float(model.intercept_[0]))


# ----------------------------------------------------------------------------- beside the cloze probes

PREFIX_METHOD = "prefix_lcs"
# split: the passages scored, "test" (a fixed split's test passages, the threshold fitted on its
# validation passages) or "random_halves" (the seeded stratified halves of the documents)
RANDOM_HALVES = "random_halves"
VERSUS_COLUMNS = ["benchmark", "model", "method", "mode", "split", "n_splits", "n_validation", "n_test", "precision",
                  "recall", "f_beta", "f_beta_sd", "lcs_threshold", "reason"]


def lcs_of_items(items: Sequence[dict], pairs: Sequence[dict]) -> pd.DataFrame:
    """Per prefix-probe item (the prefix probe's ``prefix_items.jsonl`` against the benchmark's
    ``prefix_continuation.jsonl``): ``passage_id``, ``doc_id``, ``label`` and ``lcs``, the words in
    the longest common subsequence of the generation and the original continuation. Every answer
    is scored on its text, as the prefix probe scores it: a real refusal reproduces nothing, and
    one the detector misreads (dialogue opening a continuation) keeps its copy; an answer without
    text scores 0."""
    continuation = {p["item_id"]: p["continuation"] for p in pairs}
    rows = []
    for it in items:
        if it["item_id"] not in continuation:
            raise InputError(f"prefix item {it['item_id']!r} is not in the benchmark's prefix items "
                             "(prefix_continuation.jsonl): rerun the prefix probe")
        text = it.get("generation") if it["status"] != "error" else None
        rows.append({"passage_id": it["passage_id"], "doc_id": it["doc_id"], "label": int(it["label"]),
                     "lcs": float(lcs_words(text, continuation[it["item_id"]])) if text else 0.0})
    return pd.DataFrame(rows, columns=["passage_id", "doc_id", "label", "lcs"])


def versus_prefix(texts: pd.DataFrame, lcs: Mapping[tuple[str, str], pd.DataFrame], *, seed: int,
                  n_splits: int = 20, validation_fraction: float = 0.5, beta: float = 0.1) -> pd.DataFrame:
    """The cloze probes' detection beside the prefix-LCS baseline's, on the same test texts.

    ``texts``: the cloze text tables (``benchmark``, ``model``, ``mode``, ``measure``,
    ``passage_id``, ``doc_id``, ``label``, ``memorised``; ``split`` where the benchmark has a fixed
    one); ``lcs``: per (benchmark, model) the prefix probe's :func:`lcs_of_items`.

    Where the passages carry a fixed split (BookMIA's: its first 1870 rows are validation, the
    rest test, ``published.validation_rows``), the paper's protocol: the LCS threshold is fitted
    once (:func:`fit_lcs_threshold`, Appendix E) on the validation passages both probes scored,
    and both are scored on the test passages (``split`` "test", ``n_splits`` 1, ``f_beta_sd``
    NaN). Otherwise, on the passages both probes scored, documents are split ``n_splits`` times
    (seeded, stratified by label: ``sklearn.model_selection.StratifiedShuffleSplit``) into a
    validation part, on which the LCS threshold is fitted, and a test part, on which both are
    scored (``split`` "random_halves"): precision, recall and F-beta (beta = 0.1) pool the
    splits' test passages (counts summed), and ``f_beta_sd`` is the spread of the per-split
    F-beta. A benchmark without a fixed split (the demo's: tens of documents, where one split's
    F-beta is a lottery) gets the repeated splits. The cloze flag needs no fitting (at least
    ``min_reconstructed`` tokens), so its validation part goes unused.
    """
    from sklearn.model_selection import StratifiedShuffleSplit

    from memaudit.probes.cloze.tables import prf

    rows = []
    for (benchmark, model), prefix in sorted(lcs.items()):
        mine = texts[(texts["benchmark"] == benchmark) & (texts["model"] == model)]
        if mine.empty:
            continue
        common = sorted(set(prefix["passage_id"]) & set(mine["passage_id"]))
        prefix = prefix.set_index("passage_id").loc[common]
        docs = prefix.groupby("doc_id")["label"].first()
        lead = {"benchmark": benchmark, "model": model}
        cloze_keys = sorted(set(zip(mine["mode"], mine["measure"])))
        methods = [(PREFIX_METHOD, "generation")] + [(method_name(measure), mode) for mode, measure in cloze_keys]
        flags = {key: block.set_index("passage_id")["memorised"].reindex(common).fillna(False).astype(bool)
                 for key, block in mine.groupby(["mode", "measure"])}
        split = fixed_split(mine)
        if split is not None:
            rows += _on_fixed_split(lead, methods, prefix, flags, split.reindex(common), beta=beta)
            continue
        lead["split"] = RANDOM_HALVES
        if docs.value_counts().reindex([0, 1], fill_value=0).min() < 2:
            rows += [{**lead, "method": method, "mode": mode, "n_splits": 0,
                      "reason": f"{len(common)} passages of {len(docs)} documents scored by both: fewer than "
                                "2 documents of a class to split"} for method, mode in methods]
            continue
        splitter = StratifiedShuffleSplit(n_splits=n_splits, test_size=1 - validation_fraction, random_state=seed)
        # per method, each split's (labels, flags) of its test passages
        tests: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {m: [] for m in methods}
        thresholds, sizes = [], []
        for fit_idx, test_idx in splitter.split(np.zeros(len(docs)), docs.to_numpy()):
            fit = prefix[prefix["doc_id"].isin(docs.index[fit_idx])]
            test = prefix[prefix["doc_id"].isin(docs.index[test_idx])]
            model_fit = fit_lcs_threshold(fit["lcs"], fit["label"])
            thresholds.append(model_fit.threshold)
            sizes.append((len(fit), len(test)))
            y = test["label"].to_numpy(dtype=int)
            tests[(PREFIX_METHOD, "generation")].append((y, np.asarray(model_fit.predict(test["lcs"]), dtype=bool)))
            for mode, measure in cloze_keys:
                tests[(method_name(measure), mode)].append((y, flags[(mode, measure)].loc[test.index].to_numpy()))
        for method, mode in methods:
            # pooled over the splits (true and false positives summed): a split in whose test half a
            # method flags nothing adds nothing to its precision, where a mean of per-split
            # precisions would count it as 0 and penalise the cautious probe
            pooled = prf(np.concatenate([y for y, _ in tests[(method, mode)]]),
                         np.concatenate([f for _, f in tests[(method, mode)]]), beta=beta)
            per_split = [prf(y, f, beta=beta)["fbeta"] for y, f in tests[(method, mode)]]
            rows.append({**lead, "method": method, "mode": mode, "n_splits": len(per_split),
                         "n_validation": float(np.mean([s[0] for s in sizes])),
                         "n_test": float(np.mean([s[1] for s in sizes])),
                         "precision": pooled["precision"], "recall": pooled["recall"],
                         "f_beta": pooled["fbeta"], "f_beta_sd": float(np.std(per_split, ddof=1)),
                         "lcs_threshold": _median_finite(thresholds) if method == PREFIX_METHOD else np.nan,
                         "reason": ""})
    return pd.DataFrame(rows, columns=VERSUS_COLUMNS)


def fixed_split(texts: pd.DataFrame) -> pd.Series | None:
    """Each passage's side of its benchmark's fixed split (``validation`` or ``test``, by
    ``passage_id``; the cloze items' ``split``, from the loader's ``meta.split``), or ``None``
    where the passages carry none."""
    if "split" not in texts.columns:
        return None
    marked = texts.dropna(subset=["split"])
    marked = marked[marked["split"].astype(str) != ""]
    if marked.empty:
        return None
    return marked.groupby("passage_id")["split"].first()


def _on_fixed_split(lead: dict, methods: Sequence[tuple[str, str]], prefix: pd.DataFrame,
                    flags: Mapping[tuple[str, str], pd.Series], split: pd.Series, *, beta: float) -> list[dict]:
    """:func:`versus_prefix`'s rows on a fixed split: the LCS threshold fitted once on the validation
    passages, every method scored on the test passages (the paper's protocol, Appendix E)."""
    from memaudit.probes.cloze.tables import prf

    lead = {**lead, "split": TEST}
    fit = prefix[(split == VALIDATION).to_numpy()]
    test = prefix[(split == TEST).to_numpy()]
    sizes = {"n_validation": float(len(fit)), "n_test": float(len(test))}
    classes = fit["label"].value_counts().reindex([0, 1], fill_value=0)
    if test.empty or classes.min() == 0:
        missing = ("no test passage to score" if test.empty else
                   f"no {'member' if classes[1] == 0 else 'non-member'} among the validation passages to fit "
                   "the LCS threshold on")
        return [{**lead, "method": method, "mode": mode, "n_splits": 0, **sizes,
                 "reason": f"fixed split: {len(fit)} validation and {len(test)} test passages scored by both; "
                           f"{missing}"} for method, mode in methods]
    threshold = fit_lcs_threshold(fit["lcs"], fit["label"])
    y = test["label"].to_numpy(dtype=int)
    predicted = {(PREFIX_METHOD, "generation"): np.asarray(threshold.predict(test["lcs"]), dtype=bool)}
    for (mode, measure), flag in flags.items():
        predicted[(method_name(measure), mode)] = flag.loc[test.index].to_numpy()
    rows = []
    for method, mode in methods:
        scored = prf(y, predicted[(method, mode)], beta=beta)
        rows.append({**lead, "method": method, "mode": mode, "n_splits": 1, **sizes,
                     "precision": scored["precision"], "recall": scored["recall"], "f_beta": scored["fbeta"],
                     "f_beta_sd": np.nan, "lcs_threshold": threshold.threshold if method == PREFIX_METHOD else np.nan,
                     "reason": ""})
    return rows


def _median_finite(values: Sequence[float]) -> float:
    """The median of the finite thresholds (a validation part whose LCS is constant fits none)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.median(finite)) if finite else float("nan")
