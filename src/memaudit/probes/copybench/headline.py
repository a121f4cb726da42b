"""CopyBench's section of ``memaudit headline``: its ground-truth checks on the paired differences."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from memaudit.stats.headline import interval_check, table_section

CHECKED = ("copybench_rougeL", "copybench_rougeL_excess", "copybench_characters")
HEADER = ("CopyBench ground truth (contaminated minus base, paired; member books: above 0, "
          "non-member books: interval holds 0; member minus non-member gain: above 0)")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`expectations` over ``copybench_differences.csv``."""
    return [table_section(Path(summary_dir) / "copybench_differences.csv", HEADER, expectations)]


def expectations(differences: pd.DataFrame, scores: Sequence[str] = CHECKED,
                 decoding: str = "greedy") -> pd.DataFrame:
    """CopyBench's ground-truth checks: a model fine-tuned on the member books copies more of them
    than its base (the paired interval of the difference lies above 0); on books it never saw the
    interval holds 0; its member gain exceeds its non-member gain (``member_minus_nonmember``, the
    difference in differences: above 0 even where fine-tuning on an author's books also raised the
    scores on that author's other books). Literal ROUGE-L, its excess over chance (the same output
    against other books' references: a base that writes almost nothing scores 0 on both, a model
    that writes the author's English ~0.1 on any passage) and character counts, greedy decoding."""
    rows = []
    chosen = differences[differences["score"].isin(scores) & (differences["decoding"] == decoding)]
    for r in chosen.itertuples():
        expect, ok = interval_check(r.group, r.ci_low, r.ci_high)
        rows.append({"benchmark": r.benchmark, "model": r.model, "base": r.base, "score": r.score,
                     "books": r.group, "difference": round(r.difference, 3),
                     "ci": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]", "expected": expect, "ok": ok})
    return pd.DataFrame(rows)
