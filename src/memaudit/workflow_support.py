"""Support for the thin Snakemake scripts: logging to the rule's log, thread limits, progress."""

from __future__ import annotations

import logging
import os
import sys
import warnings


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
    # Before anything touches CUDA: the job sees only the GPUs it claimed (resources: gpu=N).
    from memaudit.devices import bind_job_devices

    bind_job_devices(_claimed_gpus(snakemake), progress=logger.info)
    threads = max(1, min(int(getattr(snakemake, "threads", 1) or 1), os.cpu_count() or 1))
    if "torch" in sys.modules or name != "light":
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            pass
    return logger


def _wildcards(snakemake) -> str:
    items = dict(snakemake.wildcards.items()) if hasattr(snakemake.wildcards, "items") else {}
    return " ".join(f"{k}={v}" for k, v in items.items())

def _claimed_gpus(snakemake) -> int:
    """The job's ``gpu`` resource (0 when the rule declares none)."""
    resources = getattr(snakemake, "resources", None)
    return int(resources.get("gpu", 0) or 0) if resources is not None else 0
