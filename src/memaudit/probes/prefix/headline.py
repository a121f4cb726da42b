"""Prefix probing's section of ``memaudit headline``: the models that refused or answered out of format."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memaudit.io import read_json
from memaudit.stats.headline import scored_files, section

HEADER = ("Prefix probing, refusals and invalid replies (each scored on its text: a refusal reproduces "
          "nothing, so where many are, the AUC says more about the refusals than about the text)")


def headline(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """The registry's ``headline`` hook: :func:`replies` over the ``prefix_outcomes.json`` of every
    (benchmark, model) with prefix scores in ``metrics.csv`` (:func:`~memaudit.stats.headline.scored_files`)."""
    from memaudit.probes.prefix.plan import METHODS

    files = scored_files(summary_dir, dict.fromkeys(METHODS, "prefix_outcomes.json"))
    return [section(HEADER, replies({(b, m): read_json(p) for (b, m, _), p in files.items()}))]


def replies(outcomes: dict[tuple[str, str], dict]) -> pd.DataFrame:
    """One row per (benchmark, model) with a refusal or an invalid reply: the continuations asked, how many
    were refused or invalid, and from the cache. Reported, not checked; a run whose every reply was a
    continuation prints nothing."""
    rows = [{"benchmark": b, "model": m, "items": int(o["n_items"]), "refused": int(o.get("refusal", 0)),
             "invalid": int(o.get("invalid", 0)), "from_cache": int(o.get("n_from_cache", 0))}
            for (b, m), o in outcomes.items() if o.get("refusal", 0) or o.get("invalid", 0)]
    return pd.DataFrame(rows)
