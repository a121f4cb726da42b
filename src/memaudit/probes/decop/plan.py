"""DE-COP's part of the job list: which (benchmark, model, mode) runs, what its figures read."""

from __future__ import annotations

from memaudit.backends.base import is_api_model
from memaudit.jobs import probe_runs


def has_published_items(bench: dict) -> bool:
    """Whether a benchmark's DE-COP questions come ready-made (BookTection/arXivTection): no paraphraser."""
    return (bench.get("published") or {}).get("format") in ("booktection", "arxivtection")


def needs_paraphraser(config: dict, wildcards) -> bool:
    """Whether a job's benchmark (``wildcards.benchmark``) has its questions built here, by the paraphraser."""
    return not has_published_items(config["benchmarks"][wildcards.benchmark])


def plan_inputs(config: dict, benchmark: str, mode: str) -> list[str] | str:
    """What the cost estimate's DE-COP planner reads: the benchmark's items -- unless an API paraphraser
    would have to be paid to make them (rule decop_items), which an estimate must not do."""
    from memaudit.probes.registry import role_model

    paraphraser = role_model(config, "decop", "paraphraser")
    if not has_published_items(config["benchmarks"][benchmark]) and is_api_model(config["models"][paraphraser]):
        return (f"its items are paraphrased by API model {paraphraser!r} first (rule decop_items); "
                f"estimate after building them, or with a local paraphraser")
    return ["decop_items.jsonl"]


def benchmarks(config: dict) -> list[str]:
    return sorted({b for b, _, _ in probe_runs(config, "decop")})


def figure_inputs(config: dict, benchmark: str) -> dict[str, list[str]]:
    runs = [(m, mode) for b, m, mode in probe_runs(config, "decop") if b == benchmark]
    scores = f"results/scores/{benchmark}"
    return {
        "decop_items": f"results/datasets/{benchmark}/decop_items.jsonl",  # the blind longest-option rows
        "tables": [f"{scores}/{m}/decop_{mode}_table.csv" for m, mode in runs],
        "answers": [f"{scores}/{m}/decop_{mode}_answers.csv" for m, mode in runs],
        "documents": [f"{scores}/{m}/decop_{mode}_documents.csv" for m, mode in runs],
        "calibrations": [f"{scores}/{m}/decop_{mode}_calibration.json" for m, mode in runs],
        "models": sorted({f"results/models/{m}" for m, _ in runs if not is_api_model(config["models"][m])}),
    }


FIGURES = ("auc_by_model_size", "auc_by_length", "accuracy_calibration", "accuracy_by_position", "label_probabilities")


def outputs(config: dict) -> list[str]:
    return [
        *[f"results/figures/{b}/decop/{fig}.png" for b in benchmarks(config) for fig in FIGURES],
        *[f"results/summary/decop_{b}.csv" for b in benchmarks(config)],
        *[f"results/scores/{b}/{m}/decop_{mode}_table.csv" for b, m, mode in probe_runs(config, "decop")],
    ]
