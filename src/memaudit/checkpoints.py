"""Checkpoints that let a killed long job resume instead of starting over.

A checkpoint lives in ``<root>/<rule>/<name>/<key>/`` (root default
``results/checkpoints``), outside every Snakemake output: Snakemake deletes the
outputs of a failed or killed job, and the checkpoint must survive exactly that.
``key`` hashes everything the result depends on (inputs, settings, seed, a code
version), so a changed config never resumes from a stale state; opening a
checkpoint removes the stale siblings of other keys. The job removes its
checkpoint once its output is written.

Two kinds:

- :class:`TrainingCheckpoint` for fine-tuning and tiny-model pretraining: one
  ``state.pt`` holding the trainable weights, optimizer, scheduler, every RNG and
  the data order with the position in it, written atomically every N steps, at
  an epoch end (at most once a minute in the workflow) and when SIGTERM/SIGINT
  arrives (:class:`GracefulStop`), so the resumed run takes the very same steps an
  uninterrupted one would.
- shard files for probing (see :func:`memaudit.probes.token_prob.forward.run_token_stats`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from memaudit.io import atomic_path

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1  # bump when what a checkpoint holds, or how it is used, changes
STATE_FILE = "state.pt"


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def texts_digest(texts) -> str:
    """SHA-256 of a sequence of texts (order matters)."""
    h = hashlib.sha256()
    for t in texts:
        data = t.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def checkpoint_key(settings: dict) -> str:
    """A short hash of everything a job's result depends on (canonical JSON, sorted keys)."""
    text = json.dumps({"checkpoint_version": CHECKPOINT_VERSION, **settings}, sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def keyed_dir(base: str | os.PathLike, key: str, *, progress: Callable[[str], None] = log.info) -> Path:
    """``base/key``. Checkpoints of other keys under ``base`` (the config, the device or the code changed) are
    never resumed, and kept until this job succeeds (:func:`remove_checkpoint` with ``stale_keys``): removed
    here, one stray run with other settings (a node without a GPU under ``device: auto``, a config run by
    mistake) destroyed a resumable GPU fine-tune before it trained a step."""
    base = Path(base)
    if base.is_dir():
        for other in sorted(base.iterdir()):
            if other.name != key and other.is_dir():
                progress(f"keeping checkpoint {other} of other inputs or settings until this job succeeds "
                         f"(not resumed)")
    return base / key


def remove_checkpoint(directory: str | os.PathLike | None, root: str | os.PathLike | None = None, *,
                      stale_keys: bool = False, progress: Callable[[str], None] = log.info) -> None:
    """Remove a finished job's checkpoint, then its parents up to ``root`` (inclusive) that are left empty;
    with ``stale_keys`` (a :func:`keyed_dir`), first the checkpoints of the job's other keys beside it."""
    if directory is None:
        return
    directory = Path(directory)
    if stale_keys and directory.parent.is_dir():
        for other in sorted(directory.parent.iterdir()):
            if other.name != directory.name and other.is_dir():
                progress(f"discarding stale checkpoint {other} (inputs or settings changed)")
                shutil.rmtree(other, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    if root is None:
        return
    root = Path(root)
    for parent in directory.parents:
        if root not in (parent, *parent.parents):
            break
        try:
            parent.rmdir()
        except OSError:  # not empty (another job's checkpoint) or already gone
            break
        if parent == root:
            break


class GracefulStop:
    """Within the block, SIGTERM and SIGINT set :attr:`requested` instead of killing the process.

    A training loop checks the flag after each step, saves a checkpoint and
    raises :class:`~memaudit.errors.JobInterrupted`. SLURM sends SIGTERM before
    it kills a job at its time limit; Snakemake's jobs get it when the run's
    process group is terminated. A second signal kills at once (previous handler).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.requested is not None:  # asked twice: stop now
            previous = self._previous.get(signum)
            signal.signal(signum, previous if callable(previous) else signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.requested = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.requested).name if self.requested else ""

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def rng_state(python_rng: random.Random | None = None) -> dict:
    """Every RNG a training step may draw from (Python's, torch CPU and CUDA)."""
    import torch

    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if python_rng is not None:
        version, internal, gauss = python_rng.getstate()
        state["python"] = [version, list(internal), gauss]
    return state


def restore_rng_state(state: dict, python_rng: random.Random | None = None) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if python_rng is not None and "python" in state:
        version, internal, gauss = state["python"]
        python_rng.setstate((version, tuple(internal), gauss))


def trainable_state(model) -> dict:
    """The parameters being trained (the LoRA adapter, or every weight in full fine-tuning), on CPU."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model, state: dict) -> None:
    import torch

    params = dict(model.named_parameters())
    unknown = sorted(set(state) - set(params))
    if unknown:
        raise ValueError(f"checkpoint holds parameters the model lacks, e.g. {unknown[0]}")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value.to(params[name].device))


class TrainingCheckpoint:
    """The resumable state of one training job, in ``directory/state.pt``.

    ``every_steps`` > 0 saves every that many optimizer steps; a checkpoint is
    also saved on a graceful stop, and at an epoch end unless the last save (or
    the first step) was less than ``epoch_min_seconds`` ago (for many short
    epochs: ``memaudit.models.prepare.EPOCH_CHECKPOINT_MIN_SECONDS``). Where a save
    falls never changes the result: a resumed run takes the uninterrupted run's steps.
    ``directory=None`` disables checkpointing (library use, tests of the bare loop).
    """

    def __init__(self, directory: str | os.PathLike | None, *, every_steps: int = 0,
                 epoch_min_seconds: float = 0.0, max_seconds: float | None = None,
                 root: str | os.PathLike | None = None,
                 progress: Callable[[str], None] = log.info, clock: Callable[[], float] = time.monotonic,
                 keyed: bool = False):
        self.directory = Path(directory) if directory is not None else None
        self.root = root
        self.keyed = keyed  # a keyed_dir: its other keys beside it go when the job succeeds
        self.every_steps = int(every_steps or 0)
        self.epoch_min_seconds = float(epoch_min_seconds or 0.0)
        self.max_seconds = float(max_seconds) if max_seconds else None
        self.progress = progress
        self.clock = clock
        self.saved_at: int | None = None
        self._since: float | None = None  # the clock at the last save, or at the first step

    @property
    def path(self) -> Path | None:
        return self.directory / STATE_FILE if self.directory is not None else None

    def due(self, step: int, *, epoch_end: bool) -> bool:
        if self.directory is None:
            return False
        if self.every_steps > 0 and step % self.every_steps == 0:
            return True
        if self._since is None:
            self._since = self.clock()
        elapsed = self.clock() - self._since
        # max_seconds: mid-epoch too; a job of one epoch (or in its last part of one) had no epoch end to save at
        # before its last step, and a SIGKILL (the OOM killer, a lost node) lost all of its training
        return (epoch_end and elapsed >= self.epoch_min_seconds) or (
            self.max_seconds is not None and elapsed >= self.max_seconds)

    def load(self) -> dict | None:
        """The saved state, or None (no checkpoint, or an unreadable one, which is then ignored)."""
        import torch

        path = self.path
        if path is None or not path.exists():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 -- any unreadable checkpoint means: start over
            self.progress(f"ignoring unreadable checkpoint {path} ({type(exc).__name__}: {exc}); starting over")
            return None
        if state.get("checkpoint_version") != CHECKPOINT_VERSION:
            self.progress(f"ignoring checkpoint {path} of another version; starting over")
            return None
        return state

    def save(self, state: dict) -> None:
        import torch

        if self.path is None:
            return
        with atomic_path(self.path) as tmp:
            torch.save({"checkpoint_version": CHECKPOINT_VERSION, **state}, tmp)
        self.saved_at = int(state["step"])
        self._since = self.clock()
        self.progress(f"checkpoint saved at step {state['step']} (epoch {state['epoch']}) in {self.directory}")

    def remove(self) -> None:
        """Remove the checkpoint (the job's output is written), the job's checkpoints of other keys where it is
        keyed (:func:`keyed_dir`), and the folders up to ``root`` left empty."""
        remove_checkpoint(self.directory, self.root, stale_keys=self.keyed, progress=self.progress)

    def after_step(self, stop: GracefulStop, *, step: int, total: int, epoch_end: bool, what: str,
                   state: Callable[[], dict]) -> None:
        """Save ``state()`` if a checkpoint is due or a stop was requested; on a stop, then raise.

        Nothing happens after the last step: the finished output is written instead.
        """
        from memaudit.errors import JobInterrupted

        if step >= total:
            return
        if stop.requested or self.due(step, epoch_end=epoch_end):
            self.save(state())
        if stop.requested:
            where = f"checkpoint in {self.directory}" if self.directory is not None else "no checkpoint"
            raise JobInterrupted(f"{what} stopped by {stop.name} at step {step}/{total} ({where}); rerun to resume")


def optimizer_state(model, optimizer, scheduler) -> dict:
    """The part of a training state every loop shares: trainable weights, optimizer, scheduler."""
    return {"model": trainable_state(model), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}


def restore_optimizer_state(state: dict, model, optimizer, scheduler) -> None:
    load_trainable_state(model, state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
