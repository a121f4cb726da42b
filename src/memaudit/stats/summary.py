"""Per-method metric tables, their merge across runs, and the written summary.

``doc_scores`` frames are long format, one row per (document, method):
``doc_id, label, method, score`` with label 1 = member, 0 = non-member and
score higher = more likely member.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from memaudit.errors import InputError
from memaudit.io import write_csv, write_text
from memaudit.stats import selection
from memaudit.stats.metrics import METRIC_COLUMNS, compute_metrics, label_groups

SUMMARY_COLUMNS = ["benchmark", "model", "contaminated", "method"] + METRIC_COLUMNS + selection.METRIC_COLUMNS
DOC_SCORE_COLUMNS = ["doc_id", "label", "method", "score"]

_COUNT_COLUMNS = {"n_member", "n_nonmember", "ci_books"}  # ci_books reads back as a float where a row is blank
_PVALUE_COLUMNS = {"t_pvalue", "books_pvalue"}

_MARKDOWN_HEADER = (
    "Detector scores are oriented so that higher = more likely a member of the "
    "training data (label 1 = member, 0 = non-member); AUC 0.5 is chance. "
    "`auc`: ROC AUC; `auc_binarized`: AUC of 0/1 predictions at the in-sample "
    "Youden threshold (DE-COP reference code, optimistic); `auc_boot_mean` ± "
    "`auc_boot_std`: ROC AUC over stratified bootstrap resamples of the documents; "
    "`auc_binarized_boot_mean` ± `auc_binarized_boot_std`: binarized AUC over the same "
    "resamples (DE-COP's Table 2 protocol, 10 resamples); "
    "`auc_ci_low`–`auc_ci_high`: 95% percentile bootstrap interval (of whole books where the labels "
    "are given per book: `ci_books` says how many; blank where it resampled documents); "
    "`books_pvalue`: one-sided Mann-Whitney test that the member books' mean scores are higher; "
    "`tpr_at_1pct_fpr`, `tpr_at_01pct_fpr`: TPR at FPR <= 1% / 0.1% (the TPR at "
    "FPR = 0 when there are fewer than 1/FPR non-members); `t_pvalue`: two-sided "
    "Welch t-test of equal mean score (of the books' means where `ci_books` is set); "
    "`bh_fdr`, `bh_power`: empirical FDR and power of the "
    "documents named by conformal p-values with Benjamini-Hochberg at level `bh_q` (a random "
    "`stats.selection.calibration_fraction` of the non-members as calibration, 0.5 by default; mean over "
    "random splits; results/summary/selection.csv has every q; n/a where q is below 1/(calibration "
    "non-members + 1), the smallest conformal p-value, so that nothing can be named)."
)


def require_columns(frame: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    """Raise :class:`InputError` naming ``source`` and the first missing column."""
    for column in columns:
        if column not in frame.columns:
            raise InputError(
                f"{source}: missing column {column!r} (columns present: {', '.join(map(str, frame.columns))})"
            )


def metrics_table(
    doc_scores: pd.DataFrame,
    *,
    benchmark: str,
    model: str,
    contaminated: bool,
    seed: int = 0,
    n_boot_small: int = 10,
    n_boot_ci: int = 1000,
    selection_settings: dict | None = None,
    books: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row of :data:`SUMMARY_COLUMNS` per method, sorted by method name.

    ``books`` (``{doc_id: book}``, from the benchmark's ``documents.jsonl``): where a method's
    documents are labelled per book (:func:`memaudit.stats.metrics.label_groups`), its AUC interval
    and t-test take the book as their unit (:func:`memaudit.stats.metrics.compute_metrics`).

    ``selection_settings`` (``q``, ``n_splits``, ``calibration_fraction``: the config's
    ``stats.selection``; defaults if None) fill the conformal BH columns
    (:func:`memaudit.stats.selection.selection_metrics`).

    A method whose every score is missing measured nothing: its row has the counts and no statistic.

    A ``cv_fold`` column (out-of-fold scores of models fitted apart: the blind baseline's) makes the AUC and
    its intervals within-fold ones (:func:`memaudit.stats.metrics.fold_auc`).

    Each method's documents go through
    :func:`memaudit.stats.metrics.compute_metrics` with the same ``seed``, in ``doc_id`` order, so
    the bootstrap resamples the same documents for every method (paired): it draws positions, so
    two methods' rows in different orders were resampled apart (the workflow's tables are written
    in ``doc_id`` order, so its numbers are the same).  A document listed twice under one method
    raises :class:`InputError`, since it would be counted twice in every statistic.
    """
    require_columns(doc_scores, DOC_SCORE_COLUMNS, "document scores")
    duplicated = doc_scores.duplicated(subset=["method", "doc_id"])
    if duplicated.any():
        first = doc_scores.loc[duplicated].iloc[0]
        raise InputError(
            f"document scores: doc_id {first['doc_id']!r} appears more than once "
            f"for method {first['method']!r}"
        )
    rows = []
    for method, group in doc_scores.groupby("method", sort=True):
        group = group.sort_values("doc_id", kind="stable")
        if group["score"].isna().all():
            # no document scored (a probe that measured nothing: a cloze token type no reply answered): no
            # statistic, where every document scoring 0 read AUC 0.5, as if measured and found at chance
            labels = group["label"].to_numpy()
            rows.append({"benchmark": benchmark, "model": model, "contaminated": bool(contaminated), "method": method,
                         "n_member": int((labels == 1).sum()), "n_nonmember": int((labels == 0).sum())})
            continue
        try:
            units = None if books is None else label_groups(
                [books.get(str(d), str(d)) for d in group["doc_id"]], group["label"].to_numpy())
            metrics = compute_metrics(
                group["score"].to_numpy(),
                group["label"].to_numpy(),
                n_boot_small=n_boot_small,
                n_boot_ci=n_boot_ci,
                seed=seed,
                groups=units,
                folds=group["cv_fold"].to_numpy() if "cv_fold" in group else None,
            )
            metrics.update(selection.selection_metrics(group["score"].to_numpy(), group["label"].to_numpy(),
                                                       group["doc_id"].to_numpy(), seed=seed,
                                                       **_bh_settings(selection_settings)))
        except InputError as exc:
            raise InputError(f"document scores, method {method!r}: {exc}") from None
        rows.append(
            {"benchmark": benchmark, "model": model, "contaminated": bool(contaminated),
             "method": method, **metrics}
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _bh_settings(settings: dict | None) -> dict:
    settings = settings or {}
    return {key: settings[key] for key in ("q", "n_splits", "calibration_fraction") if key in settings}


def merge_metrics(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate per-(benchmark, model) metric CSVs, sorted by benchmark, model, method.

    Every file must have all of :data:`SUMMARY_COLUMNS`; extra columns are
    dropped so the result has exactly those columns in that order.
    """
    frames = []
    for path in paths:
        path = Path(path)
        try:
            frame = pd.read_csv(path)
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        except pd.errors.EmptyDataError:
            raise InputError(f"{path}: file is empty") from None
        require_columns(frame, SUMMARY_COLUMNS, str(path))
        frame = frame[SUMMARY_COLUMNS].copy()
        frame["contaminated"] = _bool_column(frame, "contaminated", path)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    merged = pd.concat(frames, ignore_index=True)
    return merged.sort_values(["benchmark", "model", "method"], kind="stable").reset_index(drop=True)


_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no"}


def _bool_column(frame: pd.DataFrame, column: str, path) -> list[bool]:
    """:func:`as_bool` of each cell of ``column``, an error naming the file, line and column."""
    out = []
    for i, value in enumerate(frame[column]):
        try:
            out.append(as_bool(value))
        except InputError as exc:
            raise InputError(f"{path}, line {i + 2}, column {column}: {exc}") from None
    return out


def as_bool(value) -> bool:
    """Read a boolean cell: True/False, "True"/"False", "yes"/"no" or 1/0. Anything else (a blank cell, "t") is
    an InputError: ``bool(nan)`` read a blank ``contaminated`` cell as True, and an unknown spelling as False."""
    # CSV round trips turn booleans into "True"/"False" strings or 0/1.
    text = value.strip().lower() if isinstance(value, str) else value
    if isinstance(text, str) and text in _TRUE | _FALSE:
        return text in _TRUE
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, float, np.integer, np.floating))
                                                 and value in (0, 1)):
        return bool(value)
    raise InputError(f"{value!r} is not true or false (True/False, yes/no or 1/0)")


def _format_cell(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if column in _COUNT_COLUMNS:
        return str(int(value))
    if column in _PVALUE_COLUMNS:
        return f"{float(value):.2e}"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.3f}"
    return str(value).replace("|", "\\|")


def summary_markdown(frame: pd.DataFrame) -> str:
    """Markdown table of ``frame``: floats to 3 decimals, p-values as ``1.23e-04``."""
    columns = list(frame.columns)
    lines = [
        _MARKDOWN_HEADER,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" if c in {"benchmark", "model", "method"} else "---:" for c in columns) + "|",
    ]
    for record in frame.to_dict(orient="records"):
        lines.append("| " + " | ".join(_format_cell(c, record[c]) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_summary(frame: pd.DataFrame, csv_path: str | os.PathLike, md_path: str | os.PathLike) -> None:
    """Write ``frame`` as CSV (full precision) and as a Markdown table, each atomically."""
    write_csv(csv_path, frame)
    write_text(md_path, summary_markdown(frame))
