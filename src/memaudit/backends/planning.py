"""The cost of a run's planned API work, readable before any request is sent.

Each probe family that can run on an API model may declare a planner in its registry
entry (:mod:`memaudit.probes.registry`): the requests it would send for one (model,
benchmark), built from the benchmark's records without calling anything.
``snakemake results/api/estimate.txt`` runs them over every API model and prices the
plan: cached requests are free, every other one costs its estimated prompt tokens
plus its full ``max_new_tokens``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memaudit.config import is_api_model
from memaudit.io import read_jsonl, write_jsonl


def _planned(config: dict) -> list[tuple[str, str, str]]:
    """``(model, benchmark, probe)`` of every planned API job whose family declares a planner."""
    from memaudit.probes.registry import family_of, probes_for_model

    return [(m, b, p) for m in sorted(config["models"]) if is_api_model(config["models"][m])
            for b in sorted(config["benchmarks"]) for p in probes_for_model(config, m, b) if family_of(p).planner]


def planned_inputs(config: dict) -> list[str]:
    """The record files the plan reads: one per (benchmark, planned probe) with an API model on it."""
    from memaudit.probes.registry import PROBES

    return sorted({f"results/datasets/{b}/{PROBES[p].reads}" for _, b, p in _planned(config)})


def plan_run(config: dict, datasets_dir: str | Path = "results/datasets") -> list[dict]:
    """Every request the configured API models will be sent by the planned probes."""
    from memaudit.probes.registry import PROBES, family_of, load_callable

    records = []
    for model, benchmark, probe in _planned(config):
        planner = load_callable(family_of(probe).planner)
        records += planner(config, model, read_jsonl(Path(datasets_dir) / benchmark / PROBES[probe].reads))
    return records


def write_estimate(config: dict, out_text: str | Path, out_plan: str | Path,
                   datasets_dir: str | Path = "results/datasets") -> str:
    """Write the plan (JSONL) and its priced table; returns the table."""
    from memaudit.backends.ledger import estimate_plan
    from memaudit.io import atomic_path

    records = plan_run(config, datasets_dir)
    write_jsonl(out_plan, records)
    text = estimate_plan(config, records).format() if records else "no API work planned"
    unplanned = probes_without_planner(config)
    if unplanned:
        text += f"\nnot included (no planner yet): {', '.join(unplanned)}"
    with atomic_path(out_text) as tmp:
        Path(tmp).write_text(text + "\n", encoding="utf-8")
    return text


def probes_without_planner(config: dict) -> Sequence[str]:
    """Probes configured on API models whose requests this estimate cannot foresee (listed in the output)."""
    from memaudit.probes.registry import family_of, probes_for_model

    return sorted({p for m, e in config["models"].items() if is_api_model(e)
                   for p in probes_for_model(config, m) if not family_of(p).planner})
