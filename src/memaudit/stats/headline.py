"""The few numbers a user reads first after a run, and where everything else is."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.errors import InputError


def headline_table(summary: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """AUC [95% CI] per (benchmark, model) for the headline methods, plus the blind baseline."""
    rows = summary[summary["method"].isin(methods) | summary["method"].str.startswith("ref_")
                   | (summary["model"] == "(none)")]
    cell = rows.apply(lambda r: f"{r['auc']:.3f} [{r['auc_ci_low']:.2f}, {r['auc_ci_high']:.2f}]", axis=1)
    table = rows.assign(cell=cell).pivot_table(index=["benchmark", "model", "contaminated"],
                                               columns="method", values="cell", aggfunc="first")
    return table.fillna("")


def print_headline(summary_path: Path, methods: Sequence[str]) -> None:
    summary_path = Path(summary_path)
    if not summary_path.exists():
        raise InputError(f"{summary_path}: not found (did the run finish?)")
    summary = pd.read_csv(summary_path)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 22):
        print("\nROC-AUC [bootstrap 95% CI] of document scores (higher score = member):\n")
        print(headline_table(summary, methods).to_string())
    root = summary_path.parent.parent
    print(f"\nTables:  {summary_path} (every method), {summary_path.with_suffix('.md')}")
    print(f"Figures: {root / 'figures'}/<benchmark>/<model>/roc.png, score_distributions.png, "
          f"{root / 'figures'}/<benchmark>/auc_vs_size.png")
    report = root / "report.html"
    print(f"Report:  {report}" + ("" if report.exists() else " (make it with: snakemake --report "
                                                        f"{report})"))
