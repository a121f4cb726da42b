"""Shared fixtures: a tiny random GPT-2 with its own BPE tokenizer (no hub, seconds to build)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Before any torch is loaded, here and in every Snakemake job the tests start (they inherit it): OpenMP
# threads waiting at a barrier sleep instead of spinning. Two pytest workers and their jobs run torch
# side by side on 2 cores, where spinning threads take the core the thread they wait for needs: SmolLM2's
# token statistics took 57 s instead of 4 s with two such processes at once (bfloat16; float32 14 to 71 s).
# A process alone on the cores runs within a few percent of spinning; the results are the same bits.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TINY_TEXTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse.",
    "The crude oil price rose sharply on Monday after the cartel announced new production limits.",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
] * 3


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer GPT-2 saved with a trained byte-level BPE tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.models.tiny import train_bpe_tokenizer

    out = tmp_path_factory.mktemp("tiny-gpt2")
    tok = train_bpe_tokenizer(TINY_TEXTS, 400, out)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    GPT2LMHeadModel(cfg).save_pretrained(out)
    return out


@pytest.fixture()
def tiny_backend(tiny_model_dir, tmp_path):
    """The tiny GPT-2 behind the HF backend (float32, CPU), from a per-test copy of its directory."""
    from memaudit.backends import open_backend
    from memaudit.io import write_json

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    write_json(model_dir / "manifest.json", {"load": {"path": str(model_dir)}})
    return open_backend({"models": {"tiny": {"dtype": "float32", "device": "cpu"}}}, "tiny", model_dir=model_dir)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from memaudit.models.loading import load_causal_lm

    return load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory, worker_id):
    """The whole workflow run once on config/ci.yaml in a scratch copy (shared by the slow tests).

    Under pytest-xdist (``make test`` runs two workers) the run is shared by the workers too: the
    first to need it runs it under a file lock in the session's common temporary folder, the
    others wait for the lock and read the same tree. Tests treat it as read-only (they copy it
    to change it).
    """
    from filelock import FileLock

    from workflow_helpers import make_workdir, snakemake

    if worker_id == "master":
        workdir = make_workdir(tmp_path_factory.mktemp("ci-run"))
        snakemake(workdir, "--cores", "2", "all", "--configfile", "config/ci.yaml")
        return workdir
    shared = tmp_path_factory.getbasetemp().parent
    workdir, done = shared / "ci-run", shared / "ci-run.done"
    with FileLock(str(shared / "ci-run.lock")):
        if not done.exists():
            if workdir.exists():  # a worker that failed half-way: start again
                shutil.rmtree(workdir)
            workdir.mkdir()
            make_workdir(workdir)
            snakemake(workdir, "--cores", "2", "all", "--configfile", "config/ci.yaml")
            done.touch()
    return workdir


def _uses_ci_run(items) -> set[str]:
    # a fixture argument, or a parametrized request.getfixturevalue("ci_run") (test_incremental)
    return {str(item.path) for item in items
            if "ci_run" in getattr(item, "fixturenames", ()) or "[ci_run]" in item.name}


# The longest files of their rank (make test, 2 cores: test_incremental 136 s of dry runs one after
# another, test_decop_published 48 s), started before the rank's others: the run then ends on short
# files on both workers. Last in its rank, test_incremental ended the run alone for 90 s.
LONGEST_FIRST = ("test_incremental.py", "test_decop_published.py")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Which test runs now, for the check that a test running Snakemake is marked so
    (:func:`snakemake_forkserver.check_marked`)."""
    import snakemake_forkserver

    snakemake_forkserver.current_test = item
    try:
        yield
    finally:
        snakemake_forkserver.current_test = None


def pytest_collection_modifyitems(config, items):
    """Order for two xdist workers (``--dist loadfile``: a file's tests stay on one worker): the
    SLURM test first (the local ci run, then the same workflow through SLURM: the longest chain,
    mostly waiting), then the files that do not read the shared ci run, then those that do (by
    then it is there, so no worker waits for it); within a rank the LONGEST_FIRST files first."""
    shared = _uses_ci_run(items)

    def rank(item) -> tuple[int, int]:
        path, name = str(item.path), item.path.name
        group = 0 if name == "test_slurm.py" else 2 if path in shared else 1
        return group, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items[:] = sorted(items, key=rank)  # stable: the order within each rank is otherwise pytest's


