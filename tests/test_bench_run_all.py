"""``benchmarks/run_all.py`` (``make bench``): which extra options reach which benchmark, and what it says
when a benchmark misses a target. Two stand-in benchmarks replace the real ones (minutes each)."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]

# A stand-in benchmark: strict argparse as the real scripts; it writes what it was given.
SCRIPT = textwrap.dedent("""
    import argparse, json, pathlib
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--repeats", type=int, default=1)
    {extra_option}
    args = p.parse_args()
    result = {{"name": {name!r}, "n_items": getattr(args, "n_passages", None), "ours_seconds": float(args.repeats),
              "meets_targets": {targets!r}}}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result))
""")


@pytest.fixture
def run_all(tmp_path, monkeypatch):
    module = load_benchmark("run_all")
    bench_dir = tmp_path / "benchmarks"
    bench_dir.mkdir()
    (bench_dir / "bench_alpha.py").write_text(SCRIPT.format(
        name="alpha", extra_option='p.add_argument("--n-passages", type=int, default=None)',
        targets={"speedup": True}))
    (bench_dir / "bench_beta.py").write_text(SCRIPT.format(name="beta", extra_option="",
                                                           targets={"speedup": False, "max_abs_diff": True}))
    monkeypatch.setattr(module, "HERE", bench_dir)
    return module


def results(out_dir: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}


def test_an_extra_option_reaches_only_the_benchmarks_that_take_it(run_all, tmp_path):
    """README: `run_all.py --n-passages 40` passes it on; a benchmark without that option used to exit 2."""
    out = tmp_path / "out"
    assert run_all.main(["--out-dir", str(out), "--n-passages", "40", "--repeats", "3"]) == 0
    got = results(out)
    assert (got["alpha"]["n_items"], got["alpha"]["ours_seconds"]) == (40, 3.0)
    assert (got["beta"]["n_items"], got["beta"]["ours_seconds"]) == (None, 3.0)


def test_an_option_no_benchmark_takes_is_an_error_before_any_runs(run_all, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--out-dir", str(out), "--n-pasages", "40"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "run_all.py: error: --n-pasages: an option of none of the benchmarks run here (bench_alpha.py, bench_beta.py)")
    assert results(out) == {} if out.exists() else True


def test_out_is_run_alls_to_set(run_all, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--out-dir", str(tmp_path / "out"), "--out", str(tmp_path / "x.json")])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "run_all.py: error: --out: run_all.py writes each benchmark's JSON to --out-dir/<name>.json")


def test_only_with_an_unknown_name_is_an_error(run_all, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--out-dir", str(tmp_path / "out"), "--only", "alpha", "gamma"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "run_all.py: error: --only gamma: no such benchmark (alpha, beta)")


def test_a_missed_target_is_named_on_stderr_and_fails_the_run_only_with_strict(run_all, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_all.main(["--out-dir", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "MISSED TARGETS: beta (speedup); --strict makes this an error"
    assert run_all.main(["--out-dir", str(out), "--summary-only", "--strict"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == "MISSED TARGETS: beta (speedup)"


def test_summary_only_refuses_an_option_it_does_not_know(run_all, tmp_path, capsys):
    """`run_all.py --summary-only --stirct` exited 0: its leftovers went to no benchmark and were never checked."""
    out = tmp_path / "out"
    assert run_all.main(["--out-dir", str(out)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_all.main(["--out-dir", str(out), "--summary-only", "--stirct"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "run_all.py: error: unrecognized arguments: --stirct (--summary-only runs no benchmark to pass them to)")


def test_a_relative_out_dir_is_the_current_directorys(run_all, tmp_path, monkeypatch, capsys):
    """`cd benchmarks && python run_all.py --out-dir x`: the scripts (run in the repository root) wrote to
    <root>/x, the table looked for ./x, and every benchmark was reported FAILED."""
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    assert run_all.main(["--out-dir", "x"]) == 0
    assert sorted(p.name for p in (here / "x").iterdir()) == ["alpha.json", "beta.json", "summary.csv"]
    assert "FAILED" not in capsys.readouterr().err
    assert not (ROOT / "x").exists()


def test_the_real_benchmarks_take_out_and_share_options_as_routed():
    """Every benchmark declares --out (run_all.py passes it), and --n-passages reaches just those that have it."""
    spec = importlib.util.spec_from_file_location("run_all_real", ROOT / "benchmarks" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scripts = module.discover()
    assert len(scripts) == 15 and all("--out" in module.script_options(s) for s in scripts)
    routed = module.route_options(scripts, ["--n-passages", "4", "--threads", "1"])
    assert sorted(module.bench_name(s) for s, args in routed.items() if "--n-passages" in args) == [
        "decop", "grad_norms", "paraphrase", "throughput", "token_prob"]
    assert routed[ROOT / "benchmarks" / "bench_decop.py"] == ["--n-passages", "4", "--threads", "1"]
    assert routed[ROOT / "benchmarks" / "bench_dag.py"] == []
