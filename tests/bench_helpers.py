"""Loading a script of benchmarks/ as a module, for the benchmark tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(stem: str):
    """``benchmarks/<stem>.py`` as a module (``bench_dag``, ``run_all``...); the scripts import one another,
    as run from benchmarks/, so that folder is on ``sys.path`` while it loads."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(stem, BENCHMARKS / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module
