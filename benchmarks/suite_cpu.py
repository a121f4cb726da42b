"""Where the test suite's CPU goes: each test file's share of the machine's busy CPU-seconds.

``make test`` runs two pytest workers on two cores and keeps both busy (96% in session 73), so its wall
time is about the suite's CPU-seconds over the cores: a test that costs CPU costs wall time, wherever
it runs. Per-test wall times (``--durations``) cannot say which: a test waiting on the other worker's
load looks slow, and a test whose work runs in processes pytest does not wait for (workflow jobs,
SLURM's) looks cheap to ``resource.getrusage``. This script runs the suite with one worker
(``pytest -n 0``) and the plugin :mod:`suite_cpu_plugin`, which reads the whole machine's busy time
before and after each test, then writes ``results/bench/suite_cpu.json``:

- ``cpu_seconds`` and ``wall_seconds`` of the run (collection included), ``cpu_count``, and
  ``floor_seconds`` = ``cpu_seconds / cpu_count``: what ``make test``'s pytest would take with every core
  busy all the time (set-up not included);
- ``files``: per test file, its tests, wall and CPU-seconds and its share of the run's CPU, most first;
- ``tests``: the ``--top`` tests that cost most CPU;
- ``unattributed_cpu_seconds``: the run's CPU outside any test (collection, session teardown).

A session fixture's cost goes to the first test that needs it (the shared run of ``config/ci.yaml`` to
``test_slurm.py``'s test, which the suite orders first). Run it on an otherwise idle machine: anything
beside it is counted too. It is not part of ``make bench`` (it takes as long as the suite run on one
worker, 20–23 minutes on the Xeon of docs/timings.md) and has no target: ``make test``'s 20 minutes
are measured by running it (docs/timings.md).

Usage::

    make test-profile                                   # the whole suite
    .venv/bin/python benchmarks/suite_cpu.py [--out results/bench/suite_cpu.json] [--top 25] [-- tests/test_x.py ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from suite_cpu_plugin import LOG_ENV, busy_cpu_seconds  # run from benchmarks/, as the bench_* scripts

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

NAME = "suite_cpu"


def summarize(rows: Iterable[dict], *, cpu_seconds: float, wall_seconds: float, cpu_count: int,
              top: int = 25) -> dict:
    """The run's totals, each test file's tests, wall and CPU-seconds (most CPU first) and the ``top``
    costliest tests, from the plugin's rows (``test``, ``wall_seconds``, ``cpu_seconds``)."""
    rows = list(rows)
    files: dict[str, dict] = defaultdict(lambda: {"tests": 0, "wall_seconds": 0.0, "cpu_seconds": 0.0})
    for row in rows:
        entry = files[row["test"].split("::", 1)[0]]
        entry["tests"] += 1
        entry["wall_seconds"] += row["wall_seconds"]
        entry["cpu_seconds"] += row["cpu_seconds"]
    by_cpu = sorted(files.items(), key=lambda kv: (-kv[1]["cpu_seconds"], kv[0]))
    attributed = sum(row["cpu_seconds"] for row in rows)
    return {
        "name": NAME,
        "n_items": len(rows),
        "cpu_seconds": round(cpu_seconds, 1),
        "wall_seconds": round(wall_seconds, 1),
        "cpu_count": cpu_count,
        "floor_seconds": round(cpu_seconds / cpu_count, 1),
        "unattributed_cpu_seconds": round(cpu_seconds - attributed, 1),
        "files": [{"file": name, "tests": e["tests"], "wall_seconds": round(e["wall_seconds"], 1),
                   "cpu_seconds": round(e["cpu_seconds"], 1),
                   "cpu_share": round(e["cpu_seconds"] / cpu_seconds, 4) if cpu_seconds else None}
                  for name, e in by_cpu],
        "tests": [{"test": r["test"], "wall_seconds": round(r["wall_seconds"], 1),
                   "cpu_seconds": round(r["cpu_seconds"], 1)}
                  for r in sorted(rows, key=lambda r: (-r["cpu_seconds"], r["test"]))[:top]],
    }


def table(summary: dict, n_files: int = 20) -> str:
    lines = [f"{summary['n_items']} tests: {summary['cpu_seconds']:.0f} CPU-s in {summary['wall_seconds']:.0f} s "
             f"on {summary['cpu_count']} cores (floor {summary['floor_seconds']:.0f} s; "
             f"{summary['unattributed_cpu_seconds']:.0f} CPU-s outside tests)",
             f"{'file':48s} {'tests':>5s} {'wall':>7s} {'CPU':>7s} {'share':>6s}"]
    for f in summary["files"][:n_files]:
        lines.append(f"{f['file']:48s} {f['tests']:5d} {f['wall_seconds']:7.1f} {f['cpu_seconds']:7.1f} "
                     f"{100 * (f['cpu_share'] or 0):5.1f}%")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    parser.add_argument("--top", type=int, default=25, help="the costliest tests listed (default 25)")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: tests)")
    args = parser.parse_args(argv)

    from memaudit.io import write_json
    from memaudit.machine import machine_report

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as make test (Makefile: TEST_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        env[LOG_ENV] = log = str(Path(tmp) / "tests.jsonl")
        cpu0, wall0 = busy_cpu_seconds(), time.monotonic()
        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "suite_cpu_plugin",
                              *(args.pytest_args or ["tests"])], cwd=ROOT, env=env)
        cpu, wall = busy_cpu_seconds() - cpu0, time.monotonic() - wall0
        rows = [json.loads(line) for line in Path(log).read_text().splitlines()] if Path(log).exists() else []
    summary = summarize(rows, cpu_seconds=cpu, wall_seconds=wall, cpu_count=os.cpu_count() or 1, top=args.top)
    summary["pytest_exit"] = rc
    summary["machine"] = machine_report(dtype=None)
    write_json(args.out, summary)
    print(table(summary))
    print(f"wrote {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
