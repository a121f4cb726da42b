"""The cloze probes' section of ``memaudit headline``: their ground-truth checks on the paired differences."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memaudit.stats.headline import interval_check, table_section

HEADER = ("Cloze probes ground truth (fine-tuned on the benchmark minus base, reconstruction rate, paired; "
          "members: above 0, non-members: interval holds 0; member minus non-member gain: above 0)")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`expectations` over ``cloze_differences.csv``."""
    return [table_section(Path(summary_dir) / "cloze_differences.csv", HEADER, expectations)]


def expectations(differences: pd.DataFrame) -> pd.DataFrame:
    """The cloze probes' ground-truth checks (the issue's "what must hold"): a model fine-tuned on a
    benchmark's members reconstructs more of their masked words than its base (paired interval above
    0); on the non-members the interval holds 0. Rows of models fine-tuned on other texts
    (``contaminated_on_benchmark`` false) are comparisons, not checked."""
    rows = []
    for r in differences[differences["contaminated_on_benchmark"].astype(bool)].itertuples():
        expect, ok = interval_check(r.group, r.ci_low, r.ci_high)
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "mode": r.mode,
                     "tokens": r.measure, "texts": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": ok})
    return pd.DataFrame(rows)
