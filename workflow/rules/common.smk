# Helpers, config validation and wildcard constraints shared by every rule file.
import re
from types import SimpleNamespace

from snakemake.utils import validate

from memaudit.backends.base import API_BACKENDS
from memaudit.backends.planning import planned_inputs
from memaudit.backends.settings import api_settings, api_slots
from memaudit.config import (
    check_config,
    contaminated_on,
    has_published_items,
    model_build_settings,
    model_scoring_settings,
)
from memaudit.probes.registry import probes_for_model
from memaudit.versions import code_version


validate(config, "../schemas/config.schema.yaml")
check_config(config)

BENCHMARKS = sorted(config["benchmarks"])
MODELS = sorted(config["models"])
ASSETS = config["assets_dir"]
TOKEN_PROB = config["probes"]["token_prob"]
PREFIX = config["probes"].get("prefix", {})
API_CACHE = api_settings(config)["cache"]


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    benchmark=_alternatives(BENCHMARKS),
    model=_alternatives(MODELS),


def canonical(obj):
    """A copy with every mapping's keys sorted.

    Snakemake reruns a job when the text of its params changes, and a dict's text
    depends on key order: reordering keys in the YAML (or writing it with another
    tool) must not rerun anything.
    """
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def stats_settings(*keys):
    """The ``stats`` settings a rule uses (blind_folds is no concern of the per-model metrics)."""
    return {k: config["stats"][k] for k in sorted(keys)}


def job_threads(default):
    """A model job's threads: the config's threads_per_job, else the rule's default."""
    return config["threads_per_job"] or default


def model_priority(wildcards):
    """Scheduling order of model jobs, ahead of every other job (priority 0).

    A converted or referenced model (30) is quick and unblocks its fine-tunes and DE-COP
    paraphrasing; a fine-tune (20) heads the run's longest chain (fine-tune, probing,
    statistics); training a model from scratch (10) is cheap enough to fill the gaps. On the
    demo's 2 cores, equal priorities let the tiny models' jobs take both cores first and the
    SmolLM2 LoRA start last, 3 minutes late.
    """
    entry = config["models"][wildcards.model]
    if "finetune" in entry:
        return 20
    return 10 if "tiny_gpt2" in (entry.get("source") or {}) else 30


def model_entry(wildcards):
    """Only this model's own config entry (adding a model leaves other jobs untouched), less scheduling keys."""
    return canonical(model_scoring_settings(config["models"][wildcards.model]))


def model_build_entry(wildcards):
    """What decides this model's prepared weights: scoring settings (max_tokens, batch_size) re-score, never re-train."""
    return canonical(model_build_settings(config["models"][wildcards.model]))


# Versions of the package code behind the numbers of each job (params code_version, see memaudit.versions).
DATASET_VERSION = code_version("memaudit.datasets.build", "DATASET_VERSION")
SCORING_VERSION = code_version("memaudit.probes.token_prob", "SCORING_VERSION")
STATS_VERSION = code_version("memaudit.stats.metrics", "STATS_VERSION")


def benchmark_entry(wildcards):
    return canonical(config["benchmarks"][wildcards.benchmark])


def model_inputs(wildcards):
    """What preparing a model needs: its base and the members it is fine-tuned on, or the pretraining pool."""
    entry = config["models"][wildcards.model]
    if "base" in entry:
        return {
            "base": f"results/models/{entry['base']}",
            "members": [
                f"results/datasets/{b}/documents.jsonl" for b in entry["finetune"]["members_of"]
            ],
        }
    if "tiny_gpt2" in entry["source"]:
        return {"pretrain": "results/pretrain/documents.jsonl"}
    return {}


def reference_stats(wildcards):
    """Token statistics of the reference models (never the model itself) on this benchmark."""
    if "reference" not in TOKEN_PROB["methods"]:
        return []
    return [
        f"results/scores/{wildcards.benchmark}/{ref}/token_stats.npz"
        for ref in TOKEN_PROB["reference_models"]
        if ref != wildcards.model
    ]


def is_contaminated(wildcards):
    return wildcards.benchmark in contaminated_on(config["models"][wildcards.model])


def api_openai_slots(wildcards):
    """Slots of the global ``api_openai`` resource a job for ``{model}`` claims (0 for other backends).

    Each job that sends requests claims them through ``resources: api_openai=api_openai_slots,
    api_anthropic=api_anthropic_slots``; ``--resources api_openai=N`` then caps the
    requests in flight across all parallel jobs.
    """
    return api_slots(config, wildcards.model, "openai")


def api_anthropic_slots(wildcards):
    return api_slots(config, wildcards.model, "anthropic")


def probe_settings(block):
    """A probe's config less its ``models`` list: adding a model to it runs the probe on that model alone."""
    return canonical({k: v for k, v in block.items() if k != "models"})


def local_model_dir(wildcards):
    """The prepared model a probe job loads: local models only (an API model needs no input)."""
    if config["models"][wildcards.model].get("backend", "hf") in API_BACKENDS:
        return {}
    return {"model": f"results/models/{wildcards.model}"}


def api_probe_outputs():
    """Every probe output of an API model: the ledger is written after the last request."""
    return [
        f"results/scores/{benchmark}/{model}/{probe}_documents.csv"
        for benchmark in BENCHMARKS
        for model in MODELS
        if config["models"][model].get("backend", "hf") in API_BACKENDS
        for probe in probes_for_model(config, model, benchmark)
    ]


# Models scored by at least one configured probe (an API model gets no white-box probe), and the
# (benchmark, model) pairs some probe scores: a probe's `benchmarks:` list can leave a model
# unscored on a benchmark (the demo's techdocs is DE-COP's, probed on fewer models).
SCORED_MODELS = [m for m in MODELS if probes_for_model(config, m)]
SCORED = {b: [m for m in SCORED_MODELS if probes_for_model(config, m, b)] for b in BENCHMARKS}
LOCAL_MODELS = [m for m in MODELS if config["models"][m]["backend"] == "hf"]


def probe_documents(wildcards):
    """Per-document score tables of every probe run for (benchmark, model)."""
    return [
        f"results/scores/{wildcards.benchmark}/{wildcards.model}/{probe}_documents.csv"
        for probe in probes_for_model(config, wildcards.model, wildcards.benchmark)
    ]


def metrics_tables():
    tables = [f"results/metrics/{b}/{m}.csv" for b in BENCHMARKS for m in SCORED[b]]
    if config["stats"]["blind_baseline"]:
        tables += expand("results/metrics/{benchmark}/blind_baseline.csv", benchmark=BENCHMARKS)
    return tables


def benchmark_metrics_tables(wildcards):
    """The metric tables of one benchmark's models (not the summary, which every new benchmark rewrites)."""
    return [f"results/metrics/{wildcards.benchmark}/{m}.csv" for m in SCORED[wildcards.benchmark]]


def figure_methods(model):
    """What a per-model figure shows: the headline methods, then each reference model's method."""
    refs = TOKEN_PROB["reference_models"] if "reference" in TOKEN_PROB["methods"] else []
    return config["figures"]["headline_methods"] + [f"ref_{r}" for r in refs if r != model]


def figure_labels(wildcards):
    """Report labels of a per-(benchmark, model) figure."""
    methods = ", ".join(figure_methods(wildcards.model))
    return {"benchmark": wildcards.benchmark, "model": wildcards.model, "methods": methods}


def metrics_labels(wildcards):
    return {"benchmark": wildcards.benchmark, "model": wildcards.model, "methods": "all"}


def auc_vs_size_labels(wildcards):
    methods = ", ".join(config["figures"]["headline_methods"])
    return {"benchmark": wildcards.benchmark, "model": "all local models", "methods": methods}


def final_outputs():
    return [
        "results/summary/metrics.csv",
        "results/summary/metrics.md",
        "results/summary/models.csv",
        "results/api/ledger.csv",
        *[f"results/figures/{b}/{m}/{fig}.png" for b in BENCHMARKS for m in SCORED[b]
          for fig in ("roc", "score_distributions")],
        *[f"results/figures/{b}/auc_vs_size.png" for b in BENCHMARKS if SCORED[b]],
        *decop_outputs(),
    ]


def gpu_slots(wildcards):
    """GPUs a probing job of ``{model}`` claims (``resources: gpu``).

    ``gpus`` from the model's entry, else 1 for ``device: cuda``, 0 for ``cpu``, and for
    ``auto`` 1 when this machine has a GPU (see ``memaudit.devices.model_gpus``). Locally
    ``--resources gpu=N`` caps the GPUs in use and each job locks its own; under SLURM it
    becomes ``--gpus=N``.
    """
    from memaudit.devices import model_gpus

    return model_gpus(config["models"][wildcards.model], model=wildcards.model)


def probe_gpu_slots(wildcards):
    """GPUs a probe job claims: a local model's (see ``gpu_slots``), none for an API model."""
    if config["models"][wildcards.model].get("backend", "hf") in API_BACKENDS:
        return 0
    return gpu_slots(wildcards)


def training_gpu_slots(wildcards):
    """GPUs a ``prepare_model`` job claims: a fine-tune trains on the GPU, a conversion needs none."""
    return gpu_slots(wildcards) if "base" in config["models"][wildcards.model] else 0


# DE-COP (workflow/rules/decop.smk): which (benchmark, model, mode) runs, who paraphrases.
DECOP = config["probes"].get("decop", {})
DECOP_MODES = [m for m in ("logit", "blackbox", "likelihood") if f"decop_{m}" in config["probes"]]


def decop_runs():
    return [
        (b, m, mode)
        for mode in DECOP_MODES
        for b in BENCHMARKS
        for m in MODELS
        if f"decop_{mode}" in probes_for_model(config, m, b)
    ]


DECOP_BENCHMARKS = sorted({b for b, _, _ in decop_runs()})
DECOP_PARAPHRASER = (DECOP.get("paraphrase", {}).get("model") or (LOCAL_MODELS or MODELS)[0]) if DECOP_MODES else None


def decop_paraphraser_input(wildcards):
    """The local paraphrasing model, or the published file whose questions come ready-made."""
    bench = config["benchmarks"][wildcards.benchmark]
    if has_published_items(bench):
        return published_file(wildcards)
    entry = config["models"][DECOP_PARAPHRASER]
    return {"paraphraser": f"results/models/{DECOP_PARAPHRASER}"} if entry["backend"] == "hf" else {}


def decop_paraphraser_slots(backend):
    def slots(wildcards):
        if has_published_items(config["benchmarks"][wildcards.benchmark]):
            return 0
        return api_slots(config, DECOP_PARAPHRASER, backend)

    return slots


def decop_paraphraser_gpus(wildcards):
    """GPUs of the local paraphrasing model (none for an API paraphraser or published questions)."""
    if has_published_items(config["benchmarks"][wildcards.benchmark]):
        return 0
    return probe_gpu_slots(SimpleNamespace(model=DECOP_PARAPHRASER))


def published_file(wildcards):
    """A benchmark read from a local published file reruns when the file changes."""
    path = config["benchmarks"][wildcards.benchmark].get("published", {}).get("path")
    return {"published": path} if path else {}


def decop_model_input(wildcards):
    """The prepared model a DE-COP job loads (an API model needs none)."""
    entry = config["models"][wildcards.model]
    return {"model": f"results/models/{wildcards.model}"} if entry["backend"] == "hf" else {}


def decop_figure_inputs(wildcards):
    runs = [(m, mode) for b, m, mode in decop_runs() if b == wildcards.benchmark]
    return {
        "tables": [f"results/scores/{wildcards.benchmark}/{m}/decop_{mode}_table.csv" for m, mode in runs],
        "answers": [f"results/scores/{wildcards.benchmark}/{m}/decop_{mode}_answers.csv" for m, mode in runs],
        "documents": [f"results/scores/{wildcards.benchmark}/{m}/decop_{mode}_documents.csv" for m, mode in runs],
        "calibrations": [
            f"results/scores/{wildcards.benchmark}/{m}/decop_{mode}_calibration.json" for m, mode in runs
        ],
        "models": sorted({f"results/models/{m}" for m, _ in runs if config["models"][m]["backend"] == "hf"}),
    }


def decop_outputs():
    figures = ["auc_by_model_size", "auc_by_length", "accuracy_calibration", "accuracy_by_position", "label_probabilities"]
    return [
        *expand("results/figures/{benchmark}/decop/{figure}.png", benchmark=DECOP_BENCHMARKS, figure=figures),
        *expand("results/summary/decop_{benchmark}.csv", benchmark=DECOP_BENCHMARKS),
        *[f"results/scores/{b}/{m}/decop_{mode}_table.csv" for b, m, mode in decop_runs()],
    ]
