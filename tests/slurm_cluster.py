"""A real single-node SLURM cluster on this machine, for the tests: munge, slurmctld and slurmd.

Debian's ``slurm-wlm`` and ``munge`` are installed with apt when missing (root only). The
controller and the node daemon run as root with their state, spool, pid and log files in a
scratch folder; ``/etc/slurm/slurm.conf`` is written because ``srun`` inside a batch job reads
it from there (``SLURM_CONF`` alone does not reach the job step). There is no accounting
database, so ``sacct`` has nothing to say: the executor must query ``squeue``, which sees
finished jobs because ``MinJobAge`` is a day. Only the daemons started here are stopped, by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PARTITION = "memaudit-test"
SLURM_CONF = Path("/etc/slurm/slurm.conf")
MUNGE_KEY = Path("/etc/munge/munge.key")
DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "srun", "sinfo", "scontrol", "munge", "munged", "runuser")


class SlurmUnavailable(RuntimeError):
    """SLURM cannot be installed or started here (not root, no apt): the test skips with this."""


def _which(cmd: str) -> str | None:
    """The command's absolute path; the daemons live in /usr/sbin, which a non-login PATH may lack."""
    return shutil.which(cmd, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def ensure_installed() -> None:
    """Install slurm-wlm and munge with apt if a command is missing; SlurmUnavailable if that cannot be done."""
    if all(_which(cmd) for cmd in DAEMONS):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurm-wlm/munge are not installed and installing them needs root")
    if not shutil.which("apt-get"):
        raise SlurmUnavailable("slurm-wlm/munge are not installed and there is no apt-get to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        proc = _run(cmd, env=env, timeout=600)
        if proc.returncode != 0:
            raise SlurmUnavailable(f"{' '.join(cmd)} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    missing = [cmd for cmd in DAEMONS if not _which(cmd)]
    if missing:
        raise SlurmUnavailable(f"after installing slurm-wlm and munge, still missing: {missing}")


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


CONF_MARKER = "# Written by memaudit's tests (tests/slurm_cluster.py): a single-node test cluster."


def conf_to_restore(existing: str | None) -> str | None:
    """What :meth:`SlurmCluster.stop` puts back in ``/etc/slurm/slurm.conf``: the machine's own file,
    never one an earlier test run wrote and could not remove (killed before ``stop``). Such a file
    names a controller that is gone, and while it stays every ``snakemake`` start waits 9 s: the SLURM
    executor plugin runs ``scontrol show config`` when it is imported, and that times out."""
    if existing is None or existing.startswith(CONF_MARKER):
        return None
    return existing


def slurm_conf(scratch: Path, *, host: str, cpus: int, memory_mb: int) -> str:
    return f"""\
{CONF_MARKER}
ClusterName=memaudit-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
# Keep finished jobs visible to squeue for a day: without accounting that is the executor's only source.
MinJobAge=86400
StateSaveLocation={scratch}/state
SlurmdSpoolDir={scratch}/spool
SlurmctldPidFile={scratch}/slurmctld.pid
SlurmdPidFile={scratch}/slurmd.pid
SlurmctldLogFile={scratch}/slurmctld.log
SlurmdLogFile={scratch}/slurmd.log
NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (only the daemons this object started)."""

    def __init__(self, scratch: Path):
        self.scratch = Path(scratch)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        # Leave room for the OS; a job asking for more than RealMemory is rejected at submission.
        self.memory_mb = max(1000, int(_memory_mb() * 0.8))
        self._procs: dict[str, subprocess.Popen] = {}
        self._saved_conf: str | None = None

    def start(self, timeout: float = 60) -> None:
        ensure_installed()
        if os.geteuid() != 0:
            raise SlurmUnavailable("running slurmctld/slurmd as SlurmUser=root needs root")
        running = _run(["pgrep", "-x", "slurmctld"]).stdout.split()
        if running:
            raise SlurmUnavailable(f"a slurmctld is already running here (pid {running}); not touching it")
        for sub in ("state", "spool"):
            (self.scratch / sub).mkdir(parents=True, exist_ok=True)
        self._start_munge()
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        self._saved_conf = conf_to_restore(SLURM_CONF.read_text() if SLURM_CONF.exists() else None)
        SLURM_CONF.write_text(slurm_conf(self.scratch, host=self.host, cpus=self.cpus, memory_mb=self.memory_mb))
        # -c: a clean state (no jobs from an earlier test run); -D: stay in the foreground, so the pid is ours.
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(SLURM_CONF)])
        self._wait(lambda: _run(["scontrol", "ping"]).stdout.count("UP") > 0, timeout, "slurmctld to answer")
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(SLURM_CONF)])
        self._wait(self._node_idle, timeout, f"node {self.host} to be idle in sinfo")

    def _start_munge(self) -> None:
        if _run(["munge", "-n"]).returncode == 0:
            return  # a munged is already running and answering; use it
        if not MUNGE_KEY.exists():
            MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
            MUNGE_KEY.write_bytes(os.urandom(1024))
            shutil.chown(MUNGE_KEY, "munge", "munge")
            MUNGE_KEY.chmod(0o400)
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        # munged runs as the munge user when started with -F under runuser; --force ignores a stale socket.
        self._spawn("munged", [_which("runuser"), "-u", "munge", "--", _which("munged"), "-F", "--force"])
        self._wait(lambda: _run(["munge", "-n"]).returncode == 0, 30, "munged to answer")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.scratch / f"{name}.out", "w") as log:
            self._procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _node_idle(self) -> bool:
        out = _run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
        return out[:2] == [self.host, "idle"]

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                       f"{self.logs()}")
            time.sleep(0.5)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted(self.scratch.glob("*.log")) + sorted(self.scratch.glob("*.out")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop the daemons this object started (slurmd, slurmctld, munged), by pid; restore slurm.conf."""
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._saved_conf is not None:
            SLURM_CONF.write_text(self._saved_conf)
        elif SLURM_CONF.exists():
            SLURM_CONF.unlink()
