"""Every benchmark's JSON says what it ran on (CPU model and flags, ISA settings, threads, dtype, versions),
as benchmarks/README.md promises: the docs quote ratios "on the Zen 5 EPYC" or "with AVX2 imitated"."""

from __future__ import annotations

import ast
import json
import platform
from pathlib import Path

import pytest

from memaudit.machine import cpu_report, machine_report
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("bench_*.py"))

# /proc/cpuinfo of a two-CPU AMD EPYC with AVX512-BF16 (Zen 5), trimmed
ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B45
flags\t\t: fpu sse2 avx avx2 avx512f avx512_vnni avx512_bf16 sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B45
flags\t\t: fpu sse2 avx avx2 avx512f avx512_vnni avx512_bf16 sha_ni
"""


def test_cpu_report_reads_the_model_and_the_flags_that_decide_speed():
    assert cpu_report(ZEN5) == {"cpu_model": "AMD EPYC 9B45",
                                "cpu_flags": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"]}
    assert cpu_report("") == {"cpu_model": None, "cpu_flags": None}


def test_machine_report_names_the_isa_caps_and_the_dtype():
    import torch  # imported by the benchmark: its threads are reported

    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "HOME": "/root"}
    got = machine_report(dtype="bfloat16", cpuinfo=ZEN5, env=env)
    assert {k: got[k] for k in ("cpu_model", "isa_env", "bf16_emulation_forced_by", "dtype", "device", "python")} == {
        "cpu_model": "AMD EPYC 9B45", "isa_env": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
        "bf16_emulation_forced_by": "ONEDNN_MAX_CPU_ISA=AVX2", "dtype": "bfloat16", "device": "cpu",
        "python": platform.python_version()}
    assert (got["torch_threads"], got["versions"]["torch"]) == (torch.get_num_threads(), torch.__version__)


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            for node in ast.walk(tree) if isinstance(node, ast.Call)}


def _strings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_each_benchmark_records_the_machine_and_the_load(path):
    """The keys benchmarks/README.md lists for every JSON: ``machine`` (from machine_report) and
    ``load_average_1_5_15min`` (before and after timing)."""
    assert "machine_report" in _calls(path), f"{path.name} does not record memaudit.machine.machine_report()"
    assert "load_average_1_5_15min" in _strings(path), f"{path.name} writes no load_average_1_5_15min"


def test_a_benchmark_run_writes_the_machine(tmp_path):
    """bench_loaders.py end to end on a small file (a second): its JSON holds this machine's report."""
    module = load_benchmark("bench_loaders")
    out = tmp_path / "loaders.json"
    assert module.main(["--rows", "40", "--repeats", "1", "--out", str(out)]) == 0
    machine = json.loads(out.read_text())["machine"]
    here = machine_report(dtype=None)
    assert {k: machine[k] for k in ("cpu_model", "cpu_flags", "isa_env", "cpu_count", "dtype")} == {
        k: here[k] for k in ("cpu_model", "cpu_flags", "isa_env", "cpu_count", "dtype")}
