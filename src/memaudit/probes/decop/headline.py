"""DE-COP's sections of ``memaudit headline``: the length cue its tables carry beside the models' accuracies,
and the models whose answers favour one letter."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd


LETTERS = "ABCD"
POSITION_HEADER = ("DE-COP answers that favour one letter (share of each letter among the evaluated questions; "
                   "the orderings put the verbatim passage at each letter equally often, so a model that "
                   "answers one letter scores chance whatever it saw; logit mode's -calibrated variant "
                   "corrects for it)")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`length_cue` over ``decop_<benchmark>.csv`` of the benchmarks
    the run probed with DE-COP (another config's stay in the folder) and :func:`letter_bias` over the answers
    of every (benchmark, model, mode) in ``metrics.csv``."""
    from memaudit.stats.headline import family_benchmarks

    summary_dir = Path(summary_dir)
    ran = family_benchmarks(summary_dir, "decop")
    tables = [p for p in sorted(summary_dir.glob("decop_*.csv")) if ran is None or p.stem.removeprefix("decop_") in ran]
    return [length_cue(tables), letter_bias_section(summary_dir)]


def letter_bias_section(summary_dir: Path, min_share: float = 0.5) -> str:
    """:func:`letter_bias` over ``results/scores/<benchmark>/<model>/decop_<mode>_answers.csv`` for every
    (benchmark, model, mode) with a ``decop-<mode>`` row in ``metrics.csv`` (found from the names); the
    rows whose most frequent letter reaches ``min_share``; "" where none does."""
    from memaudit.probes.registry import modes_of
    from memaudit.stats.headline import read_table, scored_files, section

    # likelihood mode scores each option's text on its own: no letter is asked, so none can be favoured
    lettered = {f"decop-{mode}": mode for mode in modes_of("decop") if mode != "likelihood"}
    files = scored_files(summary_dir, {method: f"decop_{mode}_answers.csv" for method, mode in lettered.items()})
    rows = [{"benchmark": b, "model": m, "mode": lettered[method], **letter_bias(read_table(path))}
            for (b, m, method), path in files.items()]
    biased = pd.DataFrame([r for r in rows if max(r[c] for c in LETTERS) >= min_share])
    return section(POSITION_HEADER, biased) if not biased.empty else ""


def letter_bias(answers: pd.DataFrame) -> dict:
    """The share of each letter among the answers to the evaluated questions (``role`` evaluate, status
    ok; ``pred`` is the answered position), their number and the accuracy."""
    rows = answers[(answers["role"] == "evaluate") & (answers["status"] == "ok")]
    n = len(rows)
    shares = {letter: round(float((rows["pred"] == i).mean()), 2) if n else 0.0 for i, letter in enumerate(LETTERS)}
    return {**shares, "answers": n, "accuracy": round(float((rows["pred"] == rows["correct"]).mean()), 2) if n else 0.0}


STRONG_CUE = 0.5  # twice chance: the length reader's accuracy at which the headline points to min_length


def length_cue(paths: Sequence[Path]) -> str:
    """A line per benchmark of the DE-COP tables' blind longest-option rows
    (:func:`memaudit.probes.decop.analysis.longest_option_rows`), or "" where there are none; where
    an accuracy is :data:`STRONG_CUE` or more, a last line naming the key that removes the cue at its
    source."""
    from memaudit.probes.decop.analysis import BLIND_MODEL, LONGEST
    from memaudit.stats.headline import read_table

    lines, strong = [], False
    for path in paths:
        table = read_table(path)
        if not {"model", "method"} <= set(table.columns):
            continue
        blind = table[(table["model"] == BLIND_MODEL) & (table["method"] == LONGEST)]
        for r in blind.itertuples():
            lines.append(f"  {path.stem.removeprefix('decop_')} ({r.length} tokens): members {r.accuracy_members:.2f}, "
                         f"non-members {r.accuracy_nonmembers:.2f}, AUC {r.auc:.2f} ({r.n_documents} documents)")
            strong |= max(r.accuracy_members, r.accuracy_nonmembers) >= STRONG_CUE
    if not lines:
        return ""
    if strong:
        lines.append(f"  At {STRONG_CUE:.2f} or more, most paraphrases are shorter than their passages; where a local "
                     f"paraphraser made them, probes.decop.paraphrase.min_length holds it to the passage's length "
                     f"(what that costs: docs/probes/decop.md).")
    return "\n".join(["DE-COP's length cue (a reader that sees only the options' word counts picks the longest; "
                      "chance 0.25). Read the models' accuracies in results/summary/decop_<benchmark>.csv "
                      "against it:", *lines])
