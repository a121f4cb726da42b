"""DE-COP's part of the job list: which (benchmark, model, mode) runs, what its figures read."""

from __future__ import annotations

from typing import Sequence

from memaudit.backends.base import is_api_model
from memaudit.config import for_benchmark, per_benchmark_problems
from memaudit.errors import InputError
from memaudit.jobs import job_settings, probe_runs
from memaudit.probes.registry import FAMILIES

# Keys of probes.decop.paraphrase that only a local paraphraser's sampling reads (beside min_length)
LOCAL_SAMPLING_KEYS = ("top_k", "top_p", "prefix")

# Algorithm 1's 30 unseen books (Section 4.1): the default where the config names no number
DEFAULT_CALIBRATION_DOCUMENTS = 30


def calibration_documents(cfg: dict, benchmark: str) -> int:
    """``probes.decop.calibration_documents`` for one benchmark: a number for every benchmark, or a
    mapping of benchmark names (and ``default``) to numbers. arXivTection has 25 clean papers, so
    BookTection's 30 cannot apply to it; 0 computes no calibrated variant (the paper calibrates on
    books only, Section 6.5)."""
    return int(for_benchmark(cfg.get("calibration_documents"), benchmark, DEFAULT_CALIBRATION_DOCUMENTS))


def method_name(mode: str, length: int, lengths: Sequence[int], variant: str = "") -> str:
    """``decop-<mode>[-calibrated|-prob]``, with ``-<n>tok`` for every length but the first configured one."""
    name = f"decop-{mode}" + (f"-{variant}" if variant else "")
    return name if length == lengths[0] else f"{name}-{length}tok"


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: the names :func:`method_name` gives what the runs'
    (``(benchmark, model, mode)``) jobs score at every configured length: the accuracy; in logit mode
    the calibrated accuracy where the benchmark's ``calibration_documents`` is not 0
    (:func:`memaudit.probes.decop.runner.run_decop` skips it, with a line, where quality control left
    no clean calibration document); and, in the modes with option probabilities (logit, likelihood;
    :func:`memaudit.probes.decop.analysis.verbatim_probability`), the verbatim option's probability."""
    cfg = config["probes"]["decop"]
    lengths = cfg["lengths"]
    names: dict[str, None] = {}
    for benchmark, _, mode in runs:
        variants = [""]
        if mode == "logit" and calibration_documents(cfg, benchmark):
            variants.append("calibrated")
        if mode in ("logit", "likelihood"):
            variants.append("prob")
        names.update(dict.fromkeys(method_name(mode, n, lengths, v) for n in lengths for v in variants))
    return list(names)


def settings(config: dict, benchmark: str) -> dict:
    """``probes.decop`` as one benchmark's jobs see it (less ``models``/``benchmarks``, which choose jobs):
    ``calibration_documents`` resolved to that benchmark's number, so changing another benchmark's
    number reruns nothing here."""
    cfg = job_settings(config, "decop")
    cfg["calibration_documents"] = calibration_documents(cfg, benchmark)
    return cfg


# What decop_items reads of probes.decop (build_items and published_items_for_run, memaudit.probes.decop.runner):
# its params hold these keys only, so that changing how the probe jobs ask (orderings, batch_size,
# max_answer_tokens, fdr) reruns the probes and leaves the paraphrases, KTD's pool and its probes alone.
# A key the items builder comes to read must join the list (its settings lack any other: a KeyError).
ITEMS_KEYS = ("calibration_documents", "lengths", "n_documents", "paraphrase", "passages_per_document")


def item_settings(config: dict, benchmark: str) -> dict:
    """:func:`settings` of one benchmark, cut to :data:`ITEMS_KEYS`: what its decop_items job reads."""
    cfg = settings(config, benchmark)
    return {k: cfg[k] for k in ITEMS_KEYS if k in cfg}


def check_config(config: dict) -> list[str]:
    """DE-COP's config problems (dotted key: message): a per-benchmark ``calibration_documents`` names
    configured benchmarks (or ``default``) only; ``paraphrase.length_ratio`` is a range, its lower
    bound first (reversed, quality control rejected every paraphrase, after paying for them all); a
    mode's ``passages_per_document`` is at most the items' on benchmarks whose items are built here
    (above it, the mode quietly probed fewer passages than it said); ``paraphrase.min_length``,
    ``top_k``, ``top_p`` and ``prefix`` are set only for a local paraphraser (an API one is asked for
    the length by the paper's prompt, samples as its API does and never reads these keys)."""
    from memaudit.probes.registry import role_model

    problems = per_benchmark_problems(config, "decop", "calibration_documents")
    low, high = config["probes"]["decop"]["paraphrase"]["length_ratio"]
    if low > high:
        problems.append(f"probes.decop.paraphrase.length_ratio: [{low}, {high}] is no range (the lower bound "
                        f"first): every paraphrase would be rejected for its length")
    floor = config["probes"]["decop"]["paraphrase"].get("min_length", 0)  # the schema's default
    paraphraser = role_model(config, "decop", "paraphraser")
    if floor and paraphraser in config["models"] and is_api_model(config["models"][paraphraser]):
        problems.append(f"probes.decop.paraphrase.min_length: {floor}, but the paraphraser {paraphraser!r} is an "
                        f"API model, which only a local paraphraser's sampling reads (the paper's prompt asks an "
                        f"API model for the length); remove the key or paraphrase with a local model")
    if paraphraser in config["models"] and is_api_model(config["models"][paraphraser]):
        for key in LOCAL_SAMPLING_KEYS:  # no schema default: present only where the config sets them
            value = config["probes"]["decop"]["paraphrase"].get(key)
            if value is not None:
                problems.append(f"probes.decop.paraphrase.{key}: {value!r}, but the paraphraser {paraphraser!r} is "
                                f"an API model, which samples as its API does (only a local paraphraser reads "
                                f"{key}); remove the key or paraphrase with a local model")
    made = config["probes"]["decop"]["passages_per_document"]
    for mode in FAMILIES["decop"].modes:
        wanted = (config["probes"].get(f"decop_{mode}") or {}).get("passages_per_document")
        built_here = sorted({b for b, _, m in probe_runs(config, "decop")
                             if m == mode and not has_published_items(config["benchmarks"][b])})
        if wanted is not None and wanted > made and built_here:
            # first_passages takes the first `wanted` of each document's items: there are only `made`
            problems.append(f"probes.decop_{mode}.passages_per_document: {wanted}, but the items of "
                            f"{', '.join(map(repr, built_here))} have probes.decop.passages_per_document = {made} "
                            f"per document; raise that one or lower this one")
    return problems


def has_published_items(bench: dict) -> bool:
    """Whether a benchmark's DE-COP questions come ready-made (BookTection/arXivTection): no paraphraser."""
    return (bench.get("published") or {}).get("format") in ("booktection", "arxivtection")


def needs_paraphraser(config: dict, wildcards) -> bool:
    """Whether a job's benchmark (``wildcards.benchmark``) has its questions built here, by the paraphraser."""
    return not has_published_items(config["benchmarks"][wildcards.benchmark])


def plan_inputs(config: dict, benchmark: str, mode: str) -> list[str] | str:
    """What the cost estimate's DE-COP planner reads: the benchmark's items -- unless an API paraphraser
    would have to be paid to make them (rule decop_items), which an estimate must not do."""
    from memaudit.backends.planning import BuiltByRole
    from memaudit.probes.registry import role_model

    paraphraser = role_model(config, "decop", "paraphraser")
    if not has_published_items(config["benchmarks"][benchmark]) and is_api_model(config["models"][paraphraser]):
        return BuiltByRole(f"its items are paraphrased by API model {paraphraser!r} first (rule decop_items); "
                           f"build them (snakemake results/datasets/{benchmark}/decop_items.jsonl) and estimate "
                           f"again, or estimate with a local paraphraser")
    return ["decop_items.jsonl"]


def benchmarks(config: dict) -> list[str]:
    return sorted({b for b, _, _ in probe_runs(config, "decop")})


def figure_models(config: dict, benchmark: str) -> list[str]:
    """The local models DE-COP probes on ``benchmark``: the figure by model size draws them (an API model has no
    size), from their manifests and their families (:func:`memaudit.jobs.families`, the job's param)."""
    return sorted({m for b, m, _ in probe_runs(config, "decop") if b == benchmark
                   and not is_api_model(config["models"][m])})


def figure_inputs(config: dict, benchmark: str) -> dict[str, list[str]]:
    runs = [(m, mode) for b, m, mode in probe_runs(config, "decop") if b == benchmark]
    if not runs:  # a target asked for by name (results/summary/decop_news.csv): minutes of paraphrasing, then no table
        raise InputError(f"no DE-COP probe of the config runs on benchmark {benchmark!r}, so it has no DE-COP tables "
                         f"or figures; add it to a decop_* probe's benchmarks list")
    scores = f"results/scores/{benchmark}"
    return {
        "decop_items": f"results/datasets/{benchmark}/decop_items.jsonl",  # the blind longest-option rows
        "tables": [f"{scores}/{m}/decop_{mode}_table.csv" for m, mode in runs],
        "answers": [f"{scores}/{m}/decop_{mode}_answers.csv" for m, mode in runs],
        "documents": [f"{scores}/{m}/decop_{mode}_documents.csv" for m, mode in runs],
        "calibrations": [f"{scores}/{m}/decop_{mode}_calibration.json" for m, mode in runs],
        "models": [f"results/models/{m}" for m in figure_models(config, benchmark)],
    }


FIGURES = ("auc_by_model_size", "auc_by_length", "accuracy_calibration", "accuracy_by_position", "label_probabilities")


def outputs(config: dict) -> list[str]:
    return [
        *[f"results/figures/{b}/decop/{fig}.png" for b in benchmarks(config) for fig in FIGURES],
        *[f"results/summary/decop_{b}.csv" for b in benchmarks(config)],
        *[f"results/scores/{b}/{m}/decop_{mode}_table.csv" for b, m, mode in probe_runs(config, "decop")],
    ]
