"""The cost of a run's planned API work, readable before any request is sent.

Each black-box probe that can run on an API model offers a planner: the
requests it would send for one (model, benchmark), built from the benchmark's
records without calling anything. ``snakemake results/api/estimate.txt`` runs
them over every API model and prices the plan: cached requests are free, every
other one costs its estimated prompt tokens plus its full ``max_new_tokens``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Sequence

from memaudit.backends.base import API_BACKENDS
from memaudit.io import read_jsonl, write_jsonl

# probe -> (module, planner, dataset file under results/datasets/<benchmark>/)
PLANNERS = {
    "prefix": ("memaudit.probes.prefix.runner", "plan_records", "prefix_continuation.jsonl"),
}


def planned_inputs(config: dict) -> list[str]:
    """The dataset files the plan reads: one per (benchmark, planned probe) with an API model on it."""
    from memaudit.probes.registry import probes_for_model

    paths = set()
    for model, entry in config["models"].items():
        if entry.get("backend", "hf") not in API_BACKENDS:
            continue
        for probe in probes_for_model(config, model):
            if probe in PLANNERS:
                paths.update(f"results/datasets/{b}/{PLANNERS[probe][2]}" for b in config["benchmarks"])
    return sorted(paths)


def plan_run(config: dict, datasets_dir: str | Path = "results/datasets") -> list[dict]:
    """Every request the configured API models will be sent by the planned probes."""
    from memaudit.probes.registry import probes_for_model

    records = []
    for model in sorted(config["models"]):
        if config["models"][model].get("backend", "hf") not in API_BACKENDS:
            continue
        for probe in probes_for_model(config, model):
            if probe not in PLANNERS:
                continue
            module, fn, filename = PLANNERS[probe]
            planner = getattr(importlib.import_module(module), fn)
            for benchmark in sorted(config["benchmarks"]):
                records += planner(config, model, read_jsonl(Path(datasets_dir) / benchmark / filename))
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
    from memaudit.probes.registry import probes_for_model

    return sorted({p for m, e in config["models"].items() if e.get("backend", "hf") in API_BACKENDS
                   for p in probes_for_model(config, m) if p not in PLANNERS})
