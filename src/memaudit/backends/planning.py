"""The cost of a run's planned API work, readable before any request is sent.

Each probe family that can run on an API model may declare a planner in its registry
entry (:mod:`memaudit.probes.registry`): the requests one job (model, benchmark, mode)
would send, built from the benchmark's records with the runner's own prompt functions,
without calling anything; ``plan_inputs`` names what else it reads, or why it cannot plan
before paid work (records an API role model makes first are never built for an estimate).
``snakemake results/api/estimate.txt`` runs them over every API model and prices the
plan: cached requests are free, every other one costs its estimated prompt tokens
plus its full ``max_new_tokens``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from memaudit.config import is_api_model
from memaudit.io import read_jsonl, write_jsonl


class BuiltByRole(str):
    """Why a probe cannot be planned before paid work, where its records are made by an API role model (a
    paraphraser, a knowledge filter, an extractor): once a run has built them, the estimate prices the probe
    from them (:func:`built_records`). Any other reason (no planner for a mode) stays a reason."""


def plan_requests(model: str, prompts: Sequence[str], params, *, kind: str = "generate") -> list[dict]:
    """Plan records (``memaudit estimate-cost --plan``) of ``prompts`` sent with ``params``
    (:class:`~memaudit.backends.base.GenerationParams`): every field that goes into the request's cache key."""
    return [{"model": model, "prompt": prompt, "system_prompt": params.system_prompt,
             "max_new_tokens": params.max_new_tokens, "temperature": params.temperature, "top_p": params.top_p,
             "stop": list(params.stop), "seed": params.seed, "repetition_penalty": params.repetition_penalty,
             "kind": kind} for prompt in prompts]


def _planned(config: dict) -> list[tuple[str, str, str]]:
    """``(model, benchmark, probe)`` of every job whose family declares a planner and may send API requests:
    the model under test is an API model, or one of the family's auxiliary models (roles) is."""
    from memaudit.probes.registry import family_of, probes_for_model, role_model

    def api_roles(family) -> bool:
        return any((m := role_model(config, family.name, r)) in config["models"] and is_api_model(config["models"][m])
                   for r in family.roles)

    return [(m, b, p) for m in sorted(config["models"]) for b in sorted(config["benchmarks"])
            for p in probes_for_model(config, m, b) if family_of(p).planner
            and (is_api_model(config["models"][m]) or api_roles(family_of(p)))]


def plan_inputs(config: dict, benchmark: str, probe: str) -> list[str | Path] | str:
    """The files under ``results/datasets/<benchmark>/`` a probe's planner reads (the first: its records;
    a ``Path``: a file elsewhere, as the workflow names it), or why it cannot plan before paid work (its
    records are made by an API model: the estimate must not send that model's requests to exist)."""
    from memaudit.probes.registry import PROBES, family_of, load_callable

    family = family_of(probe)
    if family.plan_inputs is None:
        return [PROBES[probe].reads]
    return load_callable(family.plan_inputs)(config, benchmark, PROBES[probe].mode)


def _role_planned(config: dict) -> list[tuple[object, str, list[str]]]:
    """``(family, benchmark, files)`` where a family's item-building roles send API requests before its
    probe jobs (CopyBench's extractor and QA writer), with the files their planner reads."""
    from memaudit.jobs import probe_runs
    from memaudit.probes.registry import FAMILIES, load_callable

    out = []
    for family in FAMILIES.values():
        if family.role_planner is None:
            continue
        for benchmark in sorted({b for b, _, _ in probe_runs(config, family.name)}):
            files = load_callable(family.role_plan_inputs)(config, benchmark)
            if files:
                out.append((family, benchmark, files))
    return out


def planned_inputs(config: dict) -> list[str]:
    """The files the plan reads: per (benchmark, planned probe), its records (and what else its planner reads:
    a :class:`~pathlib.Path` is a file outside the benchmark's datasets folder, such as CopyBench's prompt
    files), and what the item-building roles' planners read."""
    return sorted({str(f) if isinstance(f, Path) else f"results/datasets/{b}/{f}"
                   for _, b, p in _planned(config) if not isinstance(files := plan_inputs(config, b, p), str)
                   for f in files}
                  | {f"results/datasets/{b}/{f}" for _, b, files in _role_planned(config) for f in files})


def built_records(config: dict, benchmark: str, probe: str, datasets_dir: str | Path | None) -> Path | None:
    """The records of a probe that cannot be planned before paid work (:func:`plan_inputs` says why), where a
    run has built them already (``snakemake results/datasets/<benchmark>/decop_items.jsonl``): the estimate
    prices the probe from them. They are read where they are, never a dependency of the estimate: as one,
    records the config no longer matches would be rebuilt, the API role model paid, for the estimate."""
    from memaudit.probes.registry import PROBES

    if datasets_dir is None or not isinstance(plan_inputs(config, benchmark, probe), BuiltByRole):
        return None
    path = Path(datasets_dir) / benchmark / PROBES[probe].reads
    return path if path.is_file() else None


def plan_run(config: dict, datasets_dir: str | Path = "results/datasets") -> list[dict]:
    """Every request the configured API models will be sent by the planned probes (those it can plan, and
    those whose records an API role model made in an earlier run: :func:`built_records`), the item-building
    roles' first."""
    from memaudit.probes.registry import PROBES, family_of, load_callable

    records = []
    for family, benchmark, _ in _role_planned(config):
        records += load_callable(family.role_planner)(config, benchmark, Path(datasets_dir) / benchmark)
    for model, benchmark, probe in _planned(config):
        files = plan_inputs(config, benchmark, probe)
        if isinstance(files, str):
            built = built_records(config, benchmark, probe, datasets_dir)
            if built is None:
                continue
            files = [built.name]
        planner = load_callable(family_of(probe).planner)
        records += planner(config, model, read_jsonl(Path(datasets_dir) / benchmark / files[0]),
                           mode=PROBES[probe].mode, datasets=Path(datasets_dir) / benchmark)
    return records


def not_planned(config: dict, datasets_dir: str | Path | None = None) -> list[str]:
    """``probe on benchmark: why`` for planned jobs whose requests cannot be foreseen before paid work (and
    whose records no earlier run built under ``datasets_dir``)."""
    return sorted({f"{p} on {b}: {why}" for _, b, p in _planned(config)
                   if isinstance(why := plan_inputs(config, b, p), str)
                   and built_records(config, b, p, datasets_dir) is None})


def priced_from_built(config: dict, datasets_dir: str | Path | None) -> list[str]:
    """``probe on benchmark: file`` for the probes :func:`plan_run` priced from records built before."""
    return sorted({f"{p} on {b}: {built} (as built; a config change that rebuilds them changes the estimate)"
                   for _, b, p in _planned(config) if (built := built_records(config, b, p, datasets_dir))})


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
    for line in not_planned(config, datasets_dir):
        text += f"\nnot included: {line}"
    for line in priced_from_built(config, datasets_dir):
        text += f"\npriced from records an API role model made in an earlier run: {line}"
    with atomic_path(out_text) as tmp:
        Path(tmp).write_text(text + "\n", encoding="utf-8")
    return text


def probes_without_planner(config: dict) -> Sequence[str]:
    """Probes configured on API models whose requests this estimate cannot foresee (listed in the output)."""
    from memaudit.probes.registry import family_of, probes_for_model

    return sorted({p for m, e in config["models"].items() if is_api_model(e)
                   for p in probes_for_model(config, m) if not family_of(p).planner})
