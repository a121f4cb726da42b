"""GPUs for workflow jobs: how many a job claims, and which ones it gets.

Snakemake's ``--resources gpu=N`` bounds how many GPUs the running jobs claim together, but
it does not say *which* device each job uses: two jobs started at once would both pick
``cuda:0``. Here a job claims its GPUs with a file lock per device (``flock``: the kernel
drops the lock when the process ends, however it ends, so a killed job never leaves a device
taken) and then sees only those devices through ``CUDA_VISIBLE_DEVICES``; inside the job
``cuda``/``cuda:0`` is its own first GPU. A job that claims no GPU sees none, as on a SLURM
node with device constraints, so a local run and a cluster run place work alike.

Under SLURM (``SLURM_JOB_ID`` set) the scheduler has already given the job its GPUs and set
``CUDA_VISIBLE_DEVICES``; the jobs of one allocation (the local profile run inside ``salloc`` or
one ``sbatch``) still lock those devices among themselves, in a folder of the SLURM job's own:
SLURM numbers each job's devices from 0, so another job's ``0`` on the node is another GPU.

With no GPU visible a job runs on the CPU (the tests and CI have none).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Callable, Sequence

from memaudit.config import is_api_model
from memaudit.errors import ConfigError

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "MEMAUDIT_GPU_LOCK_DIR"
NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")

# Locks held for the rest of the process (a job claims its devices once, at start).
_held: list = []


class DeviceError(RuntimeError):
    """A job asked for more GPUs than are visible, or timed out waiting for free ones."""


def visible_gpus() -> list[str]:
    """Ids of the CUDA devices this process may use, without initialising CUDA.

    ``CUDA_VISIBLE_DEVICES`` when it is set (SLURM sets it to the job's GPUs; ``""`` or ``-1``
    hide every device), otherwise one id per GPU the NVIDIA driver lists -- except inside a SLURM
    job: SLURM sets the variable for a job it gave GPUs, so a job without it was given none, and
    the driver's list (every GPU of the node, /proc is not confined) are other jobs' devices. Read
    there, a ``device: auto`` job submitted with no GPU (the login node has none) claimed one on a GPU
    node when its own Snakemake evaluated the rule again, and ran on device 0 of someone else.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [d.strip() for d in env.split(",") if d.strip()]
        # CUDA stops at the first invalid entry; -1 is the usual way to say "none".
        return [] if not ids or ids[0] == "-1" else ids
    try:
        listed = [str(i) for i in range(len(list(NVIDIA_PROC.iterdir())))]
    except OSError:
        listed = []
    if os.environ.get("SLURM_JOB_ID"):
        if listed and not _warned_unassigned:
            _warned_unassigned.append(True)
            log.warning("SLURM job %s has no CUDA_VISIBLE_DEVICES: its %d listed GPU(s) are taken as other "
                        "jobs' and not used (ask SLURM for GPUs, --gpus=N, or set CUDA_VISIBLE_DEVICES "
                        "where the node's GPUs are the job's own)", os.environ["SLURM_JOB_ID"], len(listed))
        return []
    return listed


_warned_unassigned: list = []  # the warning above, once per process


def model_gpus(entry: dict, *, model: str = "?", visible: int | None = None) -> int:
    """GPUs each GPU job of a model claims (the ``gpu`` resource of its fine-tuning and probing jobs).

    ``gpus`` in the model's entry if given; else 1 for ``device: cuda``/``cuda:N``, 0 for
    ``device: cpu``, and for ``device: auto`` (the default) 1 if the machine that builds the
    job graph has a GPU, else 0. On a cluster the submitting machine usually has none: give the
    model ``device: cuda`` (or ``gpus: N``) to request GPUs there.
    """
    if is_api_model(entry):
        return 0
    if "gpus" in entry:
        return int(entry["gpus"])
    device = str(entry.get("device", "auto"))
    if device.startswith("cuda"):
        return 1
    if device == "cpu":
        return 0
    if device != "auto":
        raise ConfigError(f"config key models.{model}.device: {device!r} is not auto, cpu, cuda or cuda:N")
    return min(1, len(visible_gpus()) if visible is None else visible)


def lock_dir() -> Path:
    """Where the per-device locks live: ``$MEMAUDIT_GPU_LOCK_DIR`` or one folder per machine,
    ``/tmp/memaudit-gpu-locks``. Not under ``$TMPDIR``: jobs whose ``TMPDIR`` differs (a per-user or per-job
    one, two users on one machine) locked in different folders and took the same GPU."""
    path = Path(os.environ.get(LOCK_DIR_ENV) or "/tmp/memaudit-gpu-locks")
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        try:
            path.chmod(0o1777)  # shared by every user of the machine, like /tmp
        except OSError:
            pass
    return path


def _try_lock(path: Path):
    """An exclusive lock on ``path`` (a file descriptor), or None while another process holds it. The file is
    every user's to lock: made writable by all (the umask left it 0644, so a second user's job stopped on the
    first one's leftover file with a PermissionError), and one another user made without that is locked
    through a read-only descriptor (``flock`` needs no write access)."""
    writable = True
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        writable = False
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise DeviceError(f"{path}: cannot open the GPU lock ({exc.strerror}); remove the file, or set "
                              f"{LOCK_DIR_ENV} to a folder this user can write") from None
    except OSError as exc:
        raise DeviceError(f"{path}: cannot open the GPU lock ({exc.strerror}); set {LOCK_DIR_ENV} to a folder "
                          f"this user can write") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    if writable:
        try:
            os.fchmod(fd, 0o666)  # only the owner may; another user's file is theirs to keep
        except OSError:
            pass
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def claim_gpus(n: int, devices: Sequence[str], *, locks: Path | None = None, timeout: float | None = None,
               poll: float = 0.2, progress: Callable[[str], None] = log.info) -> list[str]:
    """Lock ``n`` of ``devices`` for this process and return their ids (first free ones first).

    Blocks until ``n`` are free at once (or ``timeout`` seconds, then DeviceError). Never holds
    part of a claim while waiting, so two jobs wanting two GPUs each cannot deadlock. The locks
    are released by :func:`release_gpus` or when the process exits.
    """
    if n <= 0:
        return []
    if n > len(devices):
        raise DeviceError(f"a job claims {n} GPU(s) but only {len(devices)} are visible ({list(devices)})")
    locks = Path(locks) if locks is not None else lock_dir()
    start = time.monotonic()
    next_note = start + 30
    while True:
        got: list[tuple[str, int]] = []
        for dev in devices:
            fd = _try_lock(locks / f"gpu-{dev}.lock")
            if fd is not None:
                got.append((dev, fd))
                if len(got) == n:
                    _held.extend(fd for _, fd in got)
                    return [d for d, _ in got]
        for _, fd in got:
            os.close(fd)  # closing the descriptor drops its flock
        now = time.monotonic()
        if timeout is not None and now - start >= timeout:
            raise DeviceError(f"no {n} free GPU(s) among {list(devices)} after {timeout:.0f}s "
                              f"(locks in {locks})")
        if now >= next_note:
            progress(f"waiting for {n} free GPU(s) among {list(devices)} (locks in {locks})")
            next_note = now + 60
        time.sleep(poll)


def release_gpus() -> None:
    """Drop every device lock this process holds."""
    while _held:
        os.close(_held.pop())


def _unassigned_slurm_job() -> bool:
    """A SLURM job SLURM gave no GPU: it set no ``CUDA_VISIBLE_DEVICES`` (:func:`visible_gpus`)."""
    return bool(os.environ.get("SLURM_JOB_ID")) and os.environ.get("CUDA_VISIBLE_DEVICES") is None


def bind_job_devices(gpus: int, *, progress: Callable[[str], None] = log.info) -> list[str]:
    """Give the current job its own ``gpus`` devices (or none) through ``CUDA_VISIBLE_DEVICES``.

    Call before anything initialises CUDA. Returns the device ids the job now sees (empty:
    the job runs on the CPU).
    """
    gpus = int(gpus or 0)
    visible = visible_gpus()
    if gpus == 0:
        # claimed none, so it uses none; in a SLURM job given no GPU (no CUDA_VISIBLE_DEVICES) torch still sees
        # every GPU of a node without device cgroups, and `device: auto` took device 0, another job's
        if visible or _unassigned_slurm_job():
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return []
    if not visible:
        if _unassigned_slurm_job():  # on the CPU, as it says, not on the node's GPUs torch would see
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        progress(f"the job claims {gpus} GPU(s) but none is visible: running on the CPU")
        return []
    slurm_job = os.environ.get("SLURM_JOB_ID")
    if slurm_job and len(visible) < gpus:
        raise DeviceError(f"SLURM gave this job {len(visible)} GPU(s) ({visible}); it claims {gpus}")
    # Inside one SLURM allocation several jobs may run at once (they all took visible[:gpus], the same
    # device, before): they lock its devices, in a folder of that allocation's alone (see above).
    locks = lock_dir() / f"slurm-job-{slurm_job}" if slurm_job else None
    if locks is not None:
        locks.mkdir(exist_ok=True)
    chosen = claim_gpus(gpus, visible, locks=locks, progress=progress)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    progress(f"using GPU(s) {','.join(chosen)}")
    return chosen
