# Helpers, config validation and wildcard constraints shared by every rule file. What the run
# computes (which model is scored where, by which probe, with which auxiliary model) is decided
# in memaudit.jobs and memaudit.probes.registry, unit-tested there; these wrap it for Snakemake.
import os
import re
import sys

# Every job inherits this before it loads torch: OpenMP threads waiting at a barrier sleep instead of
# spinning. Two jobs running torch side by side on the same cores (make run's two on 2 cores) lost the
# core each spinning waiter took from the thread it waited for: SmolLM2's token statistics of 24 passages
# took 57-71 s for two such processes at once, 4.3 s with PASSIVE (3.5 s alone either way; the results
# are the same bits). An environment that sets OMP_WAIT_POLICY keeps its own.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from memaudit import jobs
from memaudit.errors import ConfigError, InputError
from memaudit.backends.planning import planned_inputs
from memaudit.backends.settings import api_settings, api_slots
from memaudit.config import contaminated_on, model_build_settings, model_scoring_settings
from memaudit.datasets.sources import user_books_inputs
from memaudit.jobs import canonical
from memaudit.probes.registry import FAMILIES, family_version, role_model
from memaudit.versions import dataset_code_version, step_version
from snakemake.resources import Resources

# memaudit validates the config itself, before anything reads or prints it (snakemake.utils.validate
# would print the offending config section, a pasted API key with it): one line per problem,
# `config key <dotted.key>: <what is wrong>`, all at once, and nothing else (no traceback).
try:
    _completed = jobs.check_workflow_config(config, workflow.overwrite_configfiles, workflow.configfiles)
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
config.clear()
config.update(_completed)
if workflow.is_main_process:  # not again in every job's own Snakemake (SLURM, groups)
    from memaudit.workflow_support import config_warnings

    for _line in config_warnings(config):
        print(_line, file=sys.stderr)


# An API model whose key variable is not set stops the run before any job, where its probe job stopped
# only when it started, after the jobs before it. Only jobs that claim API slots ask: not the cost estimate's.
# So does one whose concurrency is above --resources api_<backend>=N (Snakemake ran its jobs with N slots).
# Submitted to a cluster, a `device: auto` model claims the GPUs of the host Snakemake runs on: a login node's
# none, so its jobs ask for none. Said, not silent.
onstart:
    from memaudit.workflow_support import check_api_jobs, cpu_bound_auto_models, declared_resource

    if not workflow.touch:  # --touch runs no job
        check_api_jobs(config, workflow.global_resources, workflow.dag.needrun_jobs())
        if not workflow.local_exec:
            _runs = [
                (list(filter(None, [job.wildcards_dict.get("model")])), declared_resource(job, "gpu"))
                for job in workflow.dag.needrun_jobs()
            ]
            for _line in cpu_bound_auto_models(config, _runs):
                print(_line, file=sys.stderr)


BENCHMARKS = sorted(config["benchmarks"])
MODELS = sorted(config["models"])
LOCAL_MODELS = jobs.local_models(config)
ASSETS = config["assets_dir"]
API_CACHE = api_settings(config)["cache"]
SCORED = jobs.scored(config)


def _alternatives(names):
    return "|".join(re.escape(n) for n in names) or "(?!)"


wildcard_constraints:
    benchmark=_alternatives(BENCHMARKS),
    model=_alternatives(MODELS),


# Every rule that computes a result carries the version of the package code behind it (params
# code_version): a probe family's or its stage's (family_version, its registry entry), or a step of
# no family's (step_version: datasets, models, stats, figures; memaudit.versions.STEPS).


def mode_constraint(family):
    """The ``{mode}`` wildcard's values for a family's rules: its registry entry's modes."""
    return _alternatives(FAMILIES[family].modes)


# Final outputs beyond the core ones: each family's rule file registers its own.
FAMILY_OUTPUTS = []


def register_outputs(paths):
    FAMILY_OUTPUTS.extend(paths)


def final_outputs():
    return jobs.final_outputs(config) + FAMILY_OUTPUTS


# ----------------------------------------------------------------------------- per-job settings


def stats_settings(*keys):
    """The ``stats`` settings a rule uses (blind_folds is no concern of the per-model metrics)."""
    return {k: config["stats"][k] for k in sorted(keys)}


def bh_settings():
    """What the conformal BH columns of a metrics table depend on (not the figures' q grid)."""
    return {k: config["stats"]["selection"][k] for k in ("calibration_fraction", "n_splits", "q")}


def metrics_selection_settings():
    """What a metrics job's selection tables depend on: the BH columns' settings and the q grid, not
    the methods the summary's figure draws (``figure_methods``, rule summary's)."""
    return bh_settings() | {"qs": config["stats"]["selection"]["qs"]}


def probe_settings(probe):
    """A probe's config less its ``models`` and ``benchmarks`` lists: they choose which jobs run, not what a
    job computes, so adding a model or a benchmark to them runs the probe there alone."""
    return jobs.job_settings(config, probe)


def job_threads(default):
    """A model job's threads: the config's threads_per_job, else the rule's default."""
    return config["threads_per_job"] or default


def model_priority(wildcards):
    return jobs.model_priority(config["models"][wildcards.model])


def model_entry(wildcards):
    """Only this model's own config entry (adding a model leaves other jobs untouched), less scheduling keys."""
    return canonical(model_scoring_settings(config["models"][wildcards.model]))


def model_build_entry(wildcards):
    """What decides this model's prepared weights: scoring settings (max_tokens, batch_size) re-score, never re-train."""
    return canonical(model_build_settings(config["models"][wildcards.model]))


def benchmark_entry(wildcards):
    return canonical(config["benchmarks"][wildcards.benchmark])


def dataset_version(wildcards):
    """The datasets step's version, with the benchmark's published format's or source's own where it has one."""
    return dataset_code_version(config["benchmarks"][wildcards.benchmark])


def model_inputs(wildcards):
    return jobs.model_inputs(config, wildcards.model)


def local_model_dir(wildcards):
    """The prepared model a probe job loads: local models only (an API model needs no input)."""
    return jobs.model_dir(config, wildcards.model)


def is_contaminated(wildcards):
    return wildcards.benchmark in contaminated_on(config["models"][wildcards.model])


def published_file(wildcards):
    """A benchmark read from a local published file reruns when the file changes (CopyBench's: each data
    file in its folder, and the labels file; an article folder: each file in it, and the folder for a file
    added or removed), as does one built from sources with the user's labels."""
    from memaudit.datasets.articles import article_files
    from memaudit.probes.copybench.plan import published_inputs

    bench = config["benchmarks"][wildcards.benchmark]
    published = bench.get("published", {})
    if published.get("format") == "copybench":
        return published_inputs(config, wildcards)
    if published.get("format") == "articles":  # the folder (a file added or removed) and each file (one edited)
        return {"published": [published["path"], *article_files(published["path"])]}
    if bench.get("labels"):
        return {"labels": bench["labels"]}
    return {"published": published["path"]} if published.get("path") else {}


def labels_per_book_param(wildcards):
    """Whether the benchmark's labels are given per book (memaudit.config.labels_per_book): then its
    statistics take books as their draws."""
    from memaudit.config import labels_per_book

    return labels_per_book(config["benchmarks"][wildcards.benchmark])


def user_books(wildcards):
    """A benchmark built from the user's books reruns when one is added, changed or removed."""
    return user_books_inputs(config["benchmarks"][wildcards.benchmark])


def probe_documents(wildcards):
    documents = jobs.probe_documents(config, wildcards.benchmark, wildcards.model)
    if not documents:  # a target asked for by name: its job would find no score table (a traceback)
        raise InputError(jobs.unprobed_pair(config, wildcards.benchmark, wildcards.model))
    return documents


def benchmark_metrics_tables(wildcards):
    """The metric tables of one benchmark's models (not the summary, which every new benchmark rewrites)."""
    return [f"results/metrics/{wildcards.benchmark}/{m}.csv" for m in SCORED[wildcards.benchmark]]


def benchmark_local_models(wildcards):
    """The prepared local models scored on one benchmark, whose sizes its AUC-against-size figure draws: a model
    added, or re-trained, that is scored elsewhere only leaves the figure alone."""
    return [f"results/models/{m}" for m in SCORED[wildcards.benchmark] if m in LOCAL_MODELS]


def benchmark_local_families(wildcards):
    """The families of those models, which group the figure's lines (not prepare_model's param: renaming one
    redraws the figures that show it alone)."""
    return jobs.families(config, [m for m in SCORED[wildcards.benchmark] if m in LOCAL_MODELS])


# ----------------------------------------------------------------------------- resources: GPUs and API slots


def _model_gpus(model):
    """GPUs a job running ``model`` claims: ``gpus``, else 1 for ``device: cuda``, 0 for ``cpu``, and for ``auto``
    1 when this machine has a GPU (memaudit.devices.model_gpus); none for an API model. Locally
    ``--resources gpu=N`` caps the GPUs in use and each job locks its own; under SLURM it becomes ``--gpus=N``."""
    from memaudit.devices import model_gpus

    return model_gpus(config["models"][model], model=model)


def _model_mem_mb(model):
    """Host memory (MB) a job loading ``model`` needs by the config: its ``mem_mb``, else its base's (a
    fine-tuned model loads its base's weights), else 0 (the rule's own default then holds)."""
    entry = config["models"][model]
    if entry.get("mem_mb"):
        return int(entry["mem_mb"])
    return _model_mem_mb(entry["base"]) if entry.get("base") in config["models"] else 0


def _model_runtime(model):
    """Time limit (minutes) a job loading ``model`` needs by the config: its ``runtime``, else its base's
    (a fine-tuned model is as big), else 0 (the rule's or the profile's own then holds)."""
    entry = config["models"][model]
    if entry.get("runtime"):
        return int(entry["runtime"])
    return _model_runtime(entry["base"]) if entry.get("base") in config["models"] else 0


def job_models(family=None, roles=(), model=True, extra=None):
    """The models a job loads, as a function of its wildcards: ``{model}`` (with ``model``), each
    ``(role, needed)`` of ``family``'s roles that the job uses (``needed(config, wildcards)``, or always
    where it is None), and ``extra(wildcards)``. Its GPUs (:func:`models_gpus`), memory
    (:func:`models_mem_mb`) and time limit (:func:`models_runtime`) are read from these, so a judge,
    reference or filter loaded beside the model under test counts as much as the model."""

    def models(wildcards):
        names = [wildcards.model] if model else []
        names += [role_model(config, family, role) for role, needed in roles if not needed or needed(config, wildcards)]
        return names + (list(extra(wildcards)) if extra else [])

    return models


def models_gpus(models):
    """GPUs a job claims: the most any of its models needs, as they share the job's devices (inside it
    `cuda` is its first one), so a local judge on a GPU beside an API model under test still gets one."""

    def gpus(wildcards):
        return max([0] + [_model_gpus(m) for m in models(wildcards)])

    return gpus


def models_mem_mb(default, models):
    """A job's ``mem_mb``: the rule's ``default``, raised to the largest ``mem_mb`` of its models
    (``models.<name>.mem_mb``: a 7B model's job needs far more than a tiny one's, and raising the
    rule's memory under SLURM's ``set-resources`` would raise it for every model's job)."""

    def mem(wildcards):
        return max([default] + [_model_mem_mb(m) for m in models(wildcards)])

    return mem


def models_runtime(models, default=None):
    """A job's ``runtime`` (minutes; ``--time`` under SLURM): ``default`` (the rule's own; None: the
    profile's ``default-resources`` runtime, which declaring the resource would otherwise replace),
    raised to the largest ``runtime`` of its models (``models.<name>.runtime``: a 7B model's probes take
    hours, and a rule's runtime under ``set-resources`` would hold for every model's job)."""

    def runtime(wildcards, input, threads, attempt, rulename, async_run):
        profile = None
        if default is None:  # evaluated as Snakemake does for a rule without it (an expression over attempt, say)
            setting = Resources.from_mapping(workflow.resource_settings.default_resources or {}).get("runtime")
            profile = setting.evaluate(
                wildcards, input=input, threads=threads, attempt=attempt, rulename=rulename, async_run=async_run
            ).value
        return jobs.job_runtime(default, [_model_runtime(m) for m in models(wildcards)], attempt, profile=profile)

    return runtime


PROBED_MODEL = job_models()  # a job of {model} alone


def gpu_slots(wildcards):
    return _model_gpus(wildcards.model)


def training_gpu_slots(wildcards):
    """GPUs a ``prepare_model`` job claims: a fine-tune trains on the GPU, a conversion needs none."""
    return gpu_slots(wildcards) if "base" in config["models"][wildcards.model] else 0


def api_openai_slots(wildcards):
    """Slots of the global ``api_openai`` resource a job for ``{model}`` claims (0 for other backends).

    ``--resources api_openai=N`` then caps the requests in flight across all parallel jobs.
    """
    return api_slots(config, wildcards.model, "openai")


def api_anthropic_slots(wildcards):
    return api_slots(config, wildcards.model, "anthropic")


# ----------------------------------------------------------------------------- auxiliary models by role
# A family declares its roles in the registry (DE-COP: paraphraser); its rules depend on the
# role's prepared model, claim its GPUs or API slots and schedule it through these. `needed` is
# an optional function of (config, wildcards) telling whether the job uses the role at all.


def role_input(family, role, needed=None):
    def inputs(wildcards):
        return {} if needed and not needed(config, wildcards) else jobs.role_input(config, family, role)

    return inputs


def role_api_slots(family, role, backend, needed=None):
    def slots(wildcards):
        return (
            0
            if needed and not needed(config, wildcards)
            else api_slots(config, role_model(config, family, role), backend)
        )

    return slots


def probe_api_slots(family, roles, backend):
    """API slots a probe job claims: its model's concurrency plus each API judge's it talks to."""

    def slots(wildcards):
        return api_slots(config, wildcards.model, backend) + sum(
            role_api_slots(family, r, backend, needed=n)(wildcards) for r, n in roles
        )

    return slots


# ----------------------------------------------------------------------------- report labels


def figure_labels(wildcards):
    """Report labels of a per-(benchmark, model) figure: the methods it draws."""
    return jobs.figure_labels(config, wildcards.benchmark, wildcards.model)


def metrics_labels(wildcards):
    return {"benchmark": wildcards.benchmark, "model": wildcards.model, "methods": "all"}


def auc_vs_size_labels(wildcards):
    return jobs.size_figure_labels(config, wildcards.benchmark)
