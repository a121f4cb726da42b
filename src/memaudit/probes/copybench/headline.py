"""CopyBench's section of ``memaudit headline``: its ground-truth checks on the paired differences."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.stats.headline import (CHECK_GROUPS, CONTROL_READING, NOT_EVALUATED, by_group, interval_check,
                                     interval_reading, missing_groups, read_table, section, split_pairings)

# What is copied from a passage: the mean ROUGE-L's excess over chance (the same output scored against
# other books' references taken off), and the characters a story names. Reported beside them without a
# verdict: the mean ROUGE-L itself, which also rises with the author's style on books the model never
# saw (fine-tuned on three of Austen's novels, it writes her English on the other three), and the
# paper's literal copying (the share of outputs at ROUGE-L >= 0.8), which a small model fine-tuned
# on a few books reaches on a handful of prompts or none.
CHECKED = ("copybench_rougeL_excess", "copybench_characters")
REPORTED = ("copybench_rougeL", "copybench_rougeL_copy")
HEADER = ("CopyBench ground truth (contaminated minus base, paired; member books: above 0, "
          "non-member books: interval holds 0; member minus non-member gain: above 0)")
REPORTED_HEADER = ("CopyBench, reported without a verdict: the mean ROUGE-L (it also rises with the author's "
                   "style on books never seen) and literal copying as the paper counts it (ROUGE-L >= 0.8)")
CONTROL_HEADER = f"CopyBench, each model minus its declared control (models.<name>.control; paired by item; {CONTROL_READING})"


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`expectations` over ``copybench_differences.csv``, and
    the mean ROUGE-L's differences (:data:`REPORTED`) below them."""
    path = Path(summary_dir) / "copybench_differences.csv"
    if not path.exists():
        return []
    differences = read_table(path)
    if differences.empty:
        return []
    return [section(HEADER, expectations(differences)), section(REPORTED_HEADER, reported(differences)),
            section(CONTROL_HEADER, against_control(differences))]


def _greedy(differences: pd.DataFrame, scores: Sequence[str], decoding: str) -> pd.DataFrame:
    return differences[differences["score"].isin(scores) & (differences["decoding"] == decoding)]


def expectations(differences: pd.DataFrame, scores: Sequence[str] = CHECKED,
                 decoding: str = "greedy") -> pd.DataFrame:
    """CopyBench's ground-truth checks: a model fine-tuned on the member books copies more of them
    than its base (the paired interval of the difference lies above 0); on books it never saw the
    interval holds 0; its member gain exceeds its non-member gain (``member_minus_nonmember``, the
    difference in differences). The mean ROUGE-L's excess over chance (the same output against other
    books' references: a base that writes almost nothing scores 0 on both, a model that writes the
    author's English ~0.1 on any passage) and character counts, greedy decoding. A row with no item of
    the base to pair (``n_items`` 0) is not evaluated, as is a group with no row
    (:func:`~memaudit.stats.headline.missing_groups`: none of its books gave an item)."""
    differences = split_pairings(differences)[0]  # a declared control's rows: against_control
    if "contaminated_on_benchmark" in differences.columns:  # a model fine-tuned on other texts: no ground truth here
        differences = differences[differences["contaminated_on_benchmark"].astype(bool)]
    rows = []
    checked = _greedy(differences, scores, decoding)
    for r in checked.itertuples():
        expect, ok = interval_check(r.group, r.ci_low, r.ci_high, n_paired=getattr(r, "n_items", None), base=r.base,
                                    unit="item")  # a table without n_items predates unpaired rows
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "score": r.score,
                     "books": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": ok})
    for benchmark, model, base, score, group in missing_groups(checked, ["benchmark", "model", "base", "score"]):
        rows.append({"benchmark": benchmark, "model": model, "base": base, "score": score, "books": group,
                     "difference": float("nan"), "ci": "",
                     "expected": f"{NOT_EVALUATED}: no {group} row (a group without items)", "ok": False})
    rows += _unchecked_scores(differences, checked, scores, decoding)
    return pd.DataFrame(rows)


# the mode each checked score is measured in
SCORE_MODES = {"copybench_rougeL_excess": "literal", "copybench_characters": "nonliteral"}


def _unchecked_scores(differences: pd.DataFrame, checked: pd.DataFrame, scores: Sequence[str],
                      decoding: str) -> list[dict]:
    """A not-evaluated row per checked score a model's mode has no row of: a run without ``greedy`` decoding
    (``decodings: [memfree]``), or the excess over chance with nothing to measure chance against. Their checks
    dropped out of the headline and its tally unseen (a 6-check tally read as a clean 3)."""
    if "mode" not in differences.columns:
        return []
    have = set(zip(checked["benchmark"], checked["model"], checked["base"], checked["score"]))
    rows = []
    for (benchmark, model, base, mode), run in differences.groupby(["benchmark", "model", "base", "mode"], sort=True):
        for score in (s for s in scores if SCORE_MODES.get(s) == mode and (benchmark, model, base, s) not in have):
            why = (f"no {decoding} decoding in this run (probes.copybench.decodings)"
                   if not (run["decoding"] == decoding).any() else
                   f"no {score} row (no other book's references to measure chance with: chance_references 0, or "
                   f"every item of one book)" if score == "copybench_rougeL_excess" else f"no {score} row")
            rows += [{"benchmark": benchmark, "model": model, "base": base, "score": score, "books": group,
                      "difference": float("nan"), "ci": "", "expected": f"{NOT_EVALUATED}: {why}", "ok": False}
                     for group in CHECK_GROUPS]
    return rows


def reported(differences: pd.DataFrame, scores: Sequence[str] = REPORTED, decoding: str = "greedy") -> pd.DataFrame:
    """The differences of :data:`REPORTED` scores of the fine-tuned models, without a verdict."""
    rows = [{"benchmark": r.benchmark, "model": r.model, "base": r.base, "score": r.score, "books": r.group,
             "difference": round(r.difference, 3), "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"}
            for r in _greedy(split_pairings(differences)[0], scores, decoding).itertuples()]
    return pd.DataFrame(rows)


def against_control(differences: pd.DataFrame, scores: Sequence[str] = CHECKED + REPORTED,
                    decoding: str = "greedy") -> pd.DataFrame:
    """The rows of models paired with a declared ``control`` (an audit's two checkpoints): every score of
    :data:`CHECKED` and :data:`REPORTED`, with where the interval lies and no verdict."""
    declared = by_group(split_pairings(differences)[1], "benchmark", "model", "score")
    rows = [{"benchmark": r.benchmark, "model": r.model, "control": r.base, "score": r.score, "books": r.group,
             "items": int(r.n_items), "difference": round(r.difference, 3), "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
             "interval": interval_reading(r.ci_low, r.ci_high)}
            for r in _greedy(declared, scores, decoding).itertuples()]
    return pd.DataFrame(rows)
