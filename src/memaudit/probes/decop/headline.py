"""DE-COP's section of ``memaudit headline``: the length cue its tables carry beside the models' accuracies."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`length_cue` over ``decop_<benchmark>.csv``."""
    return [length_cue(sorted(Path(summary_dir).glob("decop_*.csv")))]


def length_cue(paths: Sequence[Path]) -> str:
    """A line per benchmark of the DE-COP tables' blind longest-option rows
    (:func:`memaudit.probes.decop.analysis.longest_option_rows`), or "" where there are none."""
    from memaudit.probes.decop.analysis import BLIND_MODEL, LONGEST

    lines = []
    for path in paths:
        table = pd.read_csv(path)
        if not {"model", "method"} <= set(table.columns):
            continue
        blind = table[(table["model"] == BLIND_MODEL) & (table["method"] == LONGEST)]
        for r in blind.itertuples():
            lines.append(f"  {path.stem.removeprefix('decop_')} ({r.length} tokens): members {r.accuracy_members:.2f}, "
                         f"non-members {r.accuracy_nonmembers:.2f}, AUC {r.auc:.2f} ({r.n_documents} documents)")
    if not lines:
        return ""
    return "\n".join(["DE-COP's length cue (a reader that sees only the options' word counts picks the longest; "
                      "chance 0.25). Read the models' accuracies in results/summary/decop_<benchmark>.csv "
                      "against it:", *lines])
