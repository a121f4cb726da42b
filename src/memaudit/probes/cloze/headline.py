"""The cloze probes' sections of ``memaudit headline``: their ground-truth checks on the paired differences,
and how many of a black-box model's replies could be read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memaudit.probes.cloze.scoring import UNANSWERED
from memaudit.stats.headline import (CONTROL_READING, NOT_EVALUATED, by_group, interval_check, interval_reading,
                                     missing_groups, read_table, section, split_pairings, table_section)

REPLIES = ("Cloze probes, black-box replies (per masked word; a reply without <word> tags is invalid; only "
           "answered words can be reconstructed: where few are, the AUC says little; where none is, there is "
           "no AUC, precision, recall or F-beta: nothing was measured)")

HEADER = ("Cloze probes ground truth (fine-tuned on the benchmark minus base, reconstruction rate, paired; "
          "members: above 0, non-members: interval holds 0; member minus non-member gain: above 0)")


CONTROL_HEADER = (f"Cloze probes, each model minus its declared control (models.<name>.control; reconstruction "
                  f"rate, paired by text; {CONTROL_READING})")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`replies` over ``cloze.csv``, :func:`expectations` over
    ``cloze_differences.csv`` and :func:`against_control` over its rows of declared controls."""
    blocks = [table_section(Path(summary_dir) / "cloze.csv", REPLIES, replies)]
    path = Path(summary_dir) / "cloze_differences.csv"
    differences = read_table(path) if path.exists() else pd.DataFrame()
    if not differences.empty:
        blocks += [section(HEADER, expectations(differences)), section(CONTROL_HEADER, against_control(differences))]
    return blocks


def replies(table: pd.DataFrame) -> pd.DataFrame:
    """Per black-box (benchmark, model, token selection): the masked words asked, how many replies were
    answers, refusals, invalid or errors, and the detection's precision, recall and F-beta beside them.
    Reported, not checked: it says whether the model followed the cloze prompt at all."""
    rows = table[(table["mode"] == "blackbox") & table["n_tokens"].notna()]
    out = []
    for r in rows.itertuples():
        asked = int(r.n_tokens)
        unusable = int(r.n_invalid) + int(r.n_refusal) + int(r.n_error)
        out.append({"benchmark": r.benchmark, "model": r.model, "tokens": r.method, "texts": int(r.n_texts),
                    "words": asked, "answered": asked - unusable, "refused": int(r.n_refusal),
                    "invalid": int(r.n_invalid), "errors": int(r.n_error), "precision": round(r.precision, 3),
                    "recall": round(r.recall, 3), "fbeta": round(r.fbeta, 3)})
    return pd.DataFrame(out)


def expectations(differences: pd.DataFrame) -> pd.DataFrame:
    """The cloze probes' ground-truth checks (the issue's "what must hold"): a model fine-tuned on a
    benchmark's members reconstructs more of their masked words than its base (paired interval above
    0); on the non-members the interval holds 0. A row with no text of the base to pair (``n_texts``
    0) is not evaluated, as is a group with no row (:func:`~memaudit.stats.headline.missing_groups`: none of its
    texts has a masked word of the type). Rows of models fine-tuned on other texts
    (``contaminated_on_benchmark`` false) are comparisons, not checked."""
    rows = []
    differences = split_pairings(differences)[0]
    checked = differences[differences["contaminated_on_benchmark"].astype(bool)]
    for r in checked.itertuples():
        expect, ok = interval_check(r.group, r.ci_low, r.ci_high, n_paired=getattr(r, "n_texts", None),
                                    base=r.base)
        if silent(r):  # a reconstruction rate of 0 from no answer: the check would be made on nothing
            expect, ok = f"{NOT_EVALUATED}: {silent(r)} {UNANSWERED} (every reply invalid, refused or failed)", False
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "mode": r.mode,
                     "tokens": r.measure, "texts": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": ok})
    for benchmark, model, base, mode, measure, group in missing_groups(
            checked, ["benchmark", "model", "base", "mode", "measure"]):
        rows.append({"benchmark": benchmark, "model": model, "base": base, "mode": mode, "tokens": measure,
                     "texts": group, "difference": float("nan"), "ci": "",
                     "expected": f"{NOT_EVALUATED}: no {group} row (a group without masked words)", "ok": False})
    return pd.DataFrame(rows)


def against_control(differences: pd.DataFrame) -> pd.DataFrame:
    """The rows of models paired with a declared ``control`` (an audit's two checkpoints), with where the
    interval lies and no verdict."""
    declared = by_group(split_pairings(differences)[1], "benchmark", "model", "mode", "measure")
    rows = [{"benchmark": r.benchmark, "model": r.model, "control": r.base, "mode": r.mode, "tokens": r.measure,
             "texts": r.group, "n": int(r.n_texts), "difference": round(r.difference, 3),
             "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
             "interval": (f"not measured: {silent(r)} {UNANSWERED.removesuffix(' of the type')}" if silent(r)
                          else interval_reading(r.ci_low, r.ci_high))}
            for r in declared.itertuples()]
    return pd.DataFrame(rows)


def silent(row) -> str:
    """The models of a differences row that answered no masked word of its type (``unanswered``), joined by
    "and"; "" where both answered (or the table is of before the column)."""
    names = getattr(row, "unanswered", None)
    return " and ".join(str(names).split(";")) if isinstance(names, str) and names else ""
