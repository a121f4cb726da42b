"""pytest plugin of ``benchmarks/suite_cpu.py``: the machine's busy CPU-seconds and the wall time of each test.

Loaded with ``-p suite_cpu_plugin`` (``benchmarks/`` on ``PYTHONPATH``); it writes one JSON line per test
to the file ``MEMAUDIT_SUITE_CPU_LOG`` names. The CPU is the whole machine's (``/proc/stat``:
:func:`busy_cpu_seconds`), not the pytest process's: a test's workflow jobs, Snakemake's own processes and
the SLURM daemons running its jobs are not children pytest waits for, and ``resource.getrusage`` misses
them. So the attribution holds only where one test runs at a time (``pytest -n 0``) on an otherwise idle
machine; a session fixture's cost (the shared ``config/ci.yaml`` run) goes to the first test that needs it.
"""

from __future__ import annotations

import json
import os
import time

import pytest

LOG_ENV = "MEMAUDIT_SUITE_CPU_LOG"
_started: dict[str, tuple[float, float]] = {}


def busy_cpu_seconds(stat_line: str | None = None) -> float:
    """CPU-seconds all cores have spent busy since boot, from ``/proc/stat``'s first line: user, nice, system,
    irq and softirq (guest time is inside user; idle, iowait and the time a hypervisor stole are not work)."""
    if stat_line is None:
        with open("/proc/stat") as f:
            stat_line = f.readline()
    fields = [int(x) for x in stat_line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(tryfirst=True)  # before pytest's own setup: the test's fixtures are the test's
def pytest_runtest_setup(item):
    _started[item.nodeid] = (time.time(), busy_cpu_seconds())


def pytest_runtest_logfinish(nodeid, location):  # after teardown: a module's fixtures end with its last test
    if nodeid not in _started or not os.environ.get(LOG_ENV):
        return
    start, busy = _started.pop(nodeid)
    row = {"test": nodeid, "start": start, "wall_seconds": time.time() - start,
           "cpu_seconds": busy_cpu_seconds() - busy}
    with open(os.environ[LOG_ENV], "a") as f:
        f.write(json.dumps(row) + "\n")
