"""Support for the thin Snakemake scripts: logging to the rule's log, thread limits, progress."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any, Mapping


def start(snakemake, name: str | None = None) -> logging.Logger:
    """Configure a script run by Snakemake: log to its ``log:`` file and to the console.

    Progress messages go to both, so long steps show progress in the terminal
    while the log keeps the full record. Torch uses at most the job's threads
    (and never more than the machine's cores, which would only add contention).
    """
    logger = logging.getLogger(name or "memaudit")
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    fmt = logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s", "%H:%M:%S")
    if len(snakemake.log):
        os.makedirs(os.path.dirname(str(snakemake.log[0])) or ".", exist_ok=True)
        fh = logging.FileHandler(str(snakemake.log[0]), mode="w", encoding="utf-8")
        fh.setFormatter(fmt)
        logger.addHandler(fh)
        logging.captureWarnings(True)
        logging.getLogger("py.warnings").addHandler(fh)
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(logging.Formatter(f"[{snakemake.rule} {_wildcards(snakemake)}] %(message)s"))
    logger.addHandler(sh)
    for lib in ("memaudit",):
        if lib != logger.name:
            logging.getLogger(lib).handlers = logger.handlers
            logging.getLogger(lib).setLevel(logging.INFO)
    warnings.filterwarnings("ignore", message=".*TRANSFORMERS_CACHE.*")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # transformers' "Loading weights" bar (every model load, 60 in make run) is a tqdm bar: in a job's
    # log and in the run's output it is carriage-return noise; the jobs log their own progress.
    # Read by huggingface_hub when first imported, which no script does before this call (tested).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # Before anything touches CUDA: the job sees only the GPUs it claimed (resources: gpu=N).
    from memaudit.devices import bind_job_devices

    bind_job_devices(_claimed_gpus(snakemake), progress=logger.info)
    stop_on_sigterm()
    log_uncaught_errors(logger)
    threads = max(1, min(int(getattr(snakemake, "threads", 1) or 1), os.cpu_count() or 1))
    if "torch" in sys.modules or name != "light":
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            pass
    return logger


def stop_on_sigterm() -> None:
    """Make SIGTERM raise :class:`~memaudit.errors.JobInterrupted` in the main thread instead of killing.

    Python's default dies on the spot; as an exception, cleanup runs: atomic
    writes remove their temporaries, and API requests already in flight finish
    and are stored in the response cache before the job exits (their cost is
    spent; the rerun must not pay it again). Training loops catch SIGTERM
    themselves to save a checkpoint first (:class:`memaudit.checkpoints.GracefulStop`).
    """
    import signal
    import threading

    from memaudit.errors import JobInterrupted

    def _raise(signum, frame):
        raise JobInterrupted(f"stopped by {signal.Signals(signum).name}; rerun to resume")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def log_uncaught_errors(logger: logging.Logger) -> None:
    """Write the error that ends a job into its log too (Python prints it only to stderr).

    A :class:`~memaudit.errors.MemauditError` -- bad input naming its file, line and
    key, a full disk, a permission, an interrupted job -- is that one line, in the log
    and on the console (the logger's two handlers), and no traceback: the line says
    what to fix, and a traceback under it buried it. Anything else keeps its
    traceback. The job still exits with status 1.
    """
    from memaudit.errors import MemauditError

    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if isinstance(exc, MemauditError):
            logger.error("%s: %s", exc_type.__name__, exc)
            return
        if previous is not sys.__excepthook__:
            if not isinstance(exc, KeyboardInterrupt):
                logger.error("job failed", exc_info=(exc_type, exc, tb))
            previous(exc_type, exc, tb)
            return
        import traceback

        from memaudit.backends.secrets import redact

        # Redacted, in the log and as Python's own hook prints it: stderr is a file too on a cluster (SLURM's log,
        # a DVC output), and a key an exception quotes must show in neither
        text = redact("".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n"))
        if not isinstance(exc, KeyboardInterrupt):
            logger.error("job failed\n%s", text)
        sys.stderr.write(text + "\n")

    sys.excepthook = hook


def checkpoint_root(snakemake):
    """Where a job keeps its resumable state: ``checkpoints.dir`` (not an output, so it survives a failed job).

    Read from the config rather than from ``params`` on purpose: moving the
    checkpoints or changing how often they are saved changes no result, so it
    must not rerun any job.
    """
    from pathlib import Path

    return Path(snakemake.config.get("checkpoints", {}).get("dir", "results/checkpoints"))


def _wildcards(snakemake) -> str:
    items = dict(snakemake.wildcards.items()) if hasattr(snakemake.wildcards, "items") else {}
    return " ".join(f"{k}={v}" for k, v in items.items())


def _claimed_gpus(snakemake) -> int:
    """The job's ``gpu`` resource (0 when the rule declares none)."""
    resources = getattr(snakemake, "resources", None)
    return int(resources.get("gpu", 0) or 0) if resources is not None else 0


def config_warnings(config: dict) -> list[str]:
    """Every warning about a completed config, one line each (``warning: config key <dotted.key>: ...``): a
    benchmark or model nothing runs on, a role left to its default, CopyBench story items too short for the
    event threshold. The workflow prints them once (common.smk) and ``memaudit check-config`` too, so a config
    checked before a long run shows them. Here, not in memaudit.jobs: no family's fingerprint reads this module."""
    from memaudit import jobs
    from memaudit.probes.copybench.plan import config_warnings as copybench_warnings

    lines = jobs.idle_entries(config) + jobs.defaulted_roles(config) + copybench_warnings(config)
    return [f"warning: config key {line}" for line in lines]


def _api_models_asked(config: dict, model: str | None, resources: Mapping[str, Any] | None) -> dict[str, set[str]]:
    """The API models, by backend, that a job of ``{model}`` (None without one) claiming ``resources`` sends
    requests to: its own model where that is an API model of a backend it claims slots of, and a role's (a
    filter, paraphraser, judge) of the backend where it claims more slots than its own model's."""
    from memaudit.backends.settings import api_slots
    from memaudit.config import is_api_model
    from memaudit.probes.registry import FAMILIES, role_model

    models = config["models"]
    roles = {role_model(config, fam.name, role) for fam in FAMILIES.values() for role in fam.roles}
    own = model if model in models and is_api_model(models[model]) else None
    asked: dict[str, set[str]] = {}
    for backend in ("openai", "anthropic"):
        claimed, of_own = (resources or {}).get(f"api_{backend}", 0), api_slots(config, own, backend) if own else 0
        names = {own} if claimed and of_own else set()
        if claimed > of_own:
            names |= {r for r in roles if r in models and models[r].get("backend") == backend}
        asked[backend] = names
    return asked


def api_key_problems(config: dict, runs) -> list[str]:
    """One line for each API model whose key variable is not set that the jobs about to run send requests to.
    ``runs``: each job's ``{model}`` wildcard (None without one) and the API slots its rule claims
    (:func:`_api_models_asked`).

    Such a model's job stopped at its start (its backend reads the key when it is made, also for a rerun the
    response cache would serve), after every job before it: a reference model prepared, items built, minutes
    to hours of an audit."""
    from memaudit.backends.api import api_backend_from_config

    asked = set()
    for model, resources in runs:
        for names in _api_models_asked(config, model, resources).values():
            asked |= names
    lines = []
    for name in sorted(asked):
        api = api_backend_from_config(config, name, cache=False, require_key=False)
        if api.key_problem:  # a key the variable holds that no request could carry
            lines.append(f"config key models.{name}.api.api_key_env: {api.key_problem}")
        elif not api.key_present:
            lines.append(f"config key models.{name}.api.api_key_env: environment variable {api.api_key_env} is not "
                         "set; export the API key in it before the run (the config names the variable, never the key)")
    return lines


def api_slot_problems(config: dict, limits: Mapping[str, Any], runs) -> list[str]:
    """One line for each API model whose ``concurrency`` is above ``--resources api_<backend>=N`` that the jobs
    about to run send requests to (``runs`` as :func:`api_key_problems`'s; ``limits``: the ``--resources``
    values, None or absent where none is given).

    Snakemake lowers a job's claim above the limit to the limit and runs it, and such a model's backend still
    sent ``concurrency`` requests at once: the cap across parallel jobs did not hold. (A CopyBench job claims
    its model's and its judges' slots together, but asks them one after the other: their sum above the limit
    is no concern.)"""
    from memaudit.backends.settings import api_slots

    too_many: dict[str, tuple[str, int, int]] = {}
    for model, resources in runs:
        for backend, names in _api_models_asked(config, model, resources).items():
            limit = limits.get(f"api_{backend}")
            limit = getattr(limit, "value", limit)  # Snakemake's Resource, or a plain number
            for name in names:
                concurrency = api_slots(config, name, backend)
                if isinstance(limit, int) and concurrency > limit:
                    too_many[name] = (backend, concurrency, limit)
    return [f"config key models.{name}.api.concurrency: {concurrency} requests at once, more than --resources "
            f"api_{backend}={limit} lets a job claim (Snakemake would run its jobs with {limit} "
            f"slot{'s' * (limit != 1)}, and they would still send {concurrency}); lower the concurrency or raise "
            f"api_{backend}"
            for name, (backend, concurrency, limit) in sorted(too_many.items())]


def gpu_slot_problems(config: dict, limits: Mapping[str, Any], runs) -> list[str]:
    """One line for each local model claiming more GPUs a job (``gpus``, or 1 for ``device: cuda``) than
    ``--resources gpu=N`` lets a job claim, among the jobs about to run (``runs``: each job's ``{model}``, None
    without one, and the GPUs its rule claims).

    Snakemake lowers such a claim to the limit and runs the job on fewer GPUs: a model placed on ``cuda:2``
    then stopped in the job ("this job sees 1 GPU(s) … give the model gpus: N", which it had), or spread over
    fewer devices than it needs. ``profiles/local`` sets ``gpu`` to the machine's count."""
    from memaudit.config import is_api_model
    from memaudit.devices import model_gpus

    limit = limits.get("gpu")
    limit = getattr(limit, "value", limit)
    if not isinstance(limit, int):
        return []
    claims = {name: model_gpus(entry, model=name) for name, entry in config["models"].items()
              if not is_api_model(entry)}
    over = {name: n for name, n in claims.items() if n > limit}
    named: set[str] = set()
    for model, claimed in runs:
        if claimed > limit:  # a job of no {model} (a role's, a reference's): every model over the limit
            named |= {model} if model in over else set(over)
    return [f"config key models.{name}.gpus: {over[name]} GPUs a job, more than --resources gpu={limit} lets a job "
            f"claim (Snakemake would run its jobs on {limit}); lower its gpus (a cuda:N device claims 1 unless gpus "
            f"says more; its index stays below its gpus) or raise gpu"
            for name in sorted(named)]


def cpu_bound_auto_models(config: dict, runs) -> list[str]:
    """One warning line per local model with ``device: auto`` (and no ``gpus``) among the jobs about to be
    submitted to a cluster (``runs``: each job's models and the GPUs its rule claims) whose jobs claim no GPU:
    ``auto`` counts the GPUs of the host Snakemake runs on, and a login node has none, so such a model's jobs
    asked SLURM for none and ran on the CPU of a GPU node, or its time limits ran out, without a word."""
    from memaudit.config import is_api_model

    models = sorted({m for used, claimed in runs if not claimed for m in used
                     if m in config["models"] and not is_api_model(config["models"][m])
                     and str(config["models"][m].get("device", "auto")) == "auto"
                     and "gpus" not in config["models"][m]})
    return [f"warning: models.{m}.device is auto and this host sees no GPU, so its jobs ask the cluster for none and "
            f"run on the CPU; set device: cuda (or gpus: N) where the model is meant for a GPU, device: cpu to "
            f"silence this" for m in models]


def declared_resource(job, name: str) -> int:
    """The amount of resource ``name`` a DAG job's rule claims, evaluated for its wildcards (0 where the rule
    claims none): the job's own ``resources`` hold it already lowered to ``--resources``."""
    resource = job.rule.resources.get(name)
    value = resource.evaluate(job.wildcards).value if resource is not None else 0
    return value if isinstance(value, int) else 0


def declared_api_resources(job) -> dict[str, int]:
    """The ``api_openai``/``api_anthropic`` slots a DAG job's rule claims, evaluated for its wildcards: the job's
    own ``resources`` hold them already lowered to ``--resources``."""
    return {name: declared_resource(job, name) for name in ("api_openai", "api_anthropic")}


def check_api_jobs(config: dict, global_resources: Mapping[str, Any], dag_jobs) -> None:
    """The workflow's ``onstart`` (a run, not a dry run): every :func:`api_slot_problems`,
    :func:`api_key_problems` and :func:`gpu_slot_problems` line of the jobs about to run on stderr, and an exit
    before any job. The cost
    estimate's jobs claim no API slots: no key needed."""
    dag_jobs = list(dag_jobs)
    runs = [(job.wildcards_dict.get("model"), declared_api_resources(job)) for job in dag_jobs]
    lines = api_slot_problems(config, global_resources, runs) + api_key_problems(config, runs)
    lines += gpu_slot_problems(config, global_resources,
                               [(job.wildcards_dict.get("model"), declared_resource(job, "gpu")) for job in dag_jobs])
    for line in lines:
        print(line, file=sys.stderr)
    if lines:
        sys.exit(1)


def check_config_file(path: str) -> None:
    """Exit with one line on stderr naming the file, line and column where ``path`` is no readable
    config (:func:`memaudit.config.read_config_file`). The Snakefile runs it before its
    ``configfile:`` directive reads the demo config: Snakemake's own message for a YAML error there
    is "Config file is not valid JSON or YAML", at the Snakefile's line."""
    from memaudit.config import read_config_file
    from memaudit.errors import ConfigError

    try:
        read_config_file(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
