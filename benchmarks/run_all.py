"""Run every ``benchmarks/bench_*.py`` in turn and print a table of their ``results/bench/<name>.json``.

Each script runs in its own process (``python bench_<name>.py --out <dir>/<name>.json``),
so one benchmark's threads, caches and memory never colour another's timings.
The table is also written to ``<dir>/summary.csv``.

The benchmarks: ``api``, ``dag``, ``decop``, ``dtype``
(float32 against bfloat16 on this machine, and whether ``dtype: auto`` picks the faster; its
``ours_seconds``/``baseline_seconds`` are a LoRA step in auto's dtype and in the other one),
``lora_layers`` (a SmolLM2 LoRA step with adapters in the last 15 of 30 layers against all 30),
``loaders`` (the published DE-COP CSV loader on 10k and 40k synthetic arXivTection rows: linear time),
``grad_norms`` (KTD's per-sample gradient norms, batched ghost norms against one backward per
text; one row per model under ``models``, its ``speedup`` over all models together),
``prepare`` (a base model's preparation on the meta device against a full load: peak memory),
``memfree`` (MemFree against plain greedy decoding per generated token; its
``ours_seconds``/``baseline_seconds`` are batched story generation and one prompt at a time),
``paraphrase``, ``serve`` (``memaudit serve`` decoding the greedy requests waiting at once together,
against one request at a time), ``throughput`` (the demo model's token statistics and generation in tokens/s on
every device the machine has, batched and one at a time), ``token_prob``, ``word_logprobs`` (the
cloze probes' word log-probabilities and ranks, one forward pass per text against one per
candidate word; one row per model under ``models``), ``window_word_logprobs`` (a causal reference
reading both sides of a word: its fills' windows after one cached left part, against each window
whole).

Extra options go to the benchmarks whose parser declares them (``--n-passages 40`` to those with
``--n-passages``); one that none of them declares is an error before any runs.

Exit status: 1 if a script failed or wrote no JSON; with ``--strict`` also if a
benchmark missed one of its targets (``meets_targets``), which are named on stderr either way.
"""

from __future__ import annotations

import argparse
import ast
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COLUMNS = ["name", "n_items", "ours_seconds", "forward_seconds", "ours_over_floor", "baseline_seconds",
           "speedup", "max_abs_diff", "targets"]


def discover(only: Sequence[str] | None = None) -> list[Path]:
    scripts = sorted(HERE.glob("bench_*.py"))
    if only:
        scripts = [s for s in scripts if bench_name(s) in set(only)]
    return scripts


def bench_name(script: Path) -> str:
    return script.stem.removeprefix("bench_")


def script_options(script: Path) -> set[str]:
    """The long options a benchmark's parser declares (``add_argument("--name", ...)`` in its source)."""
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    return {arg.value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            for arg in node.args if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")}


def route_options(scripts: Sequence[Path], extra: Sequence[str]) -> dict[Path, list[str]]:
    """Each script's share of ``extra``: the options (with their values) its parser declares, so that one
    benchmark's option does not make the others exit with argparse's "unrecognized arguments".
    ValueError for an argument that is no option, or an option none of ``scripts`` declares (a typo)."""
    groups: list[list[str]] = []
    for arg in extra:
        if arg.startswith("--"):
            groups.append([arg])
        elif groups:
            groups[-1].append(arg)
        else:
            raise ValueError(f"{arg}: not an option (--name value)")
    declared = {s: script_options(s) for s in scripts}
    routed: dict[Path, list[str]] = {s: [] for s in scripts}
    for group in groups:
        name = group[0].split("=", 1)[0]
        if name == "--out":
            raise ValueError("--out: run_all.py writes each benchmark's JSON to --out-dir/<name>.json")
        takers = [s for s in scripts if name in declared[s]]
        if not takers:
            raise ValueError(f"{name}: an option of none of the benchmarks run here "
                             f"({', '.join(s.name for s in scripts)})")
        for s in takers:
            routed[s] += group
    return routed


def run_script(script: Path, out: Path, extra: Sequence[str]) -> tuple[int, float]:
    print(f"== {script.name} -> {out}", flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, str(script), "--out", str(out), *extra], cwd=ROOT).returncode
    return rc, time.perf_counter() - t0


def summary_row(result: dict) -> dict:
    row = {c: result.get(c) for c in COLUMNS if c != "targets"}
    met = result.get("meets_targets")
    row["targets"] = "n/a" if not met else ("met" if all(met.values()) else
                                             "MISSED: " + ",".join(k for k, v in met.items() if not v))
    return row


def format_table(rows: Sequence[dict]) -> str:
    def cell(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            if math.isinf(v) or math.isnan(v):
                return str(v)
            return f"{v:.2e}" if (v != 0 and abs(v) < 1e-2) else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[cell(r.get(c)) for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    # prog: the messages name this script however it is run; no abbreviations: "--out" is not "--out-dir"
    p = argparse.ArgumentParser(prog="run_all.py", description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--out-dir", type=Path, default=ROOT / "results" / "bench",
                   help="where each benchmark's JSON and summary.csv go (relative: to the current directory; "
                        "default: results/bench of the repository)")
    p.add_argument("--only", nargs="+", help="benchmark names (bench_<name>.py) to run")
    p.add_argument("--summary-only", action="store_true", help="only tabulate the JSONs already there")
    p.add_argument("--strict", action="store_true", help="exit 1 when a benchmark misses a target")
    args, extra = p.parse_known_args(argv)
    # the scripts run in ROOT: a relative --out-dir given from elsewhere (benchmarks/) was written under ROOT and
    # looked for here, and every benchmark was reported FAILED
    args.out_dir = args.out_dir.resolve()
    if args.summary_only and extra:  # no benchmark runs to take them: a typo (--stirct) must not pass unseen
        p.error(f"unrecognized arguments: {' '.join(extra)} (--summary-only runs no benchmark to pass them to)")

    sys.path.insert(0, str(ROOT / "src"))
    import pandas as pd

    from memaudit.io import read_json, write_csv

    unknown = sorted(set(args.only or ()) - {bench_name(s) for s in discover()})
    if unknown:
        p.error(f"--only {' '.join(unknown)}: no such benchmark ({', '.join(map(bench_name, discover()))})")
    scripts = discover(args.only)
    if not scripts:
        print("no benchmarks/bench_*.py", file=sys.stderr)
        return 1
    try:
        routed = route_options(scripts, extra) if not args.summary_only else {}
    except ValueError as err:
        p.error(str(err))
    failed, rows = [], []
    for script in scripts:
        out = args.out_dir / f"{bench_name(script)}.json"
        if not args.summary_only:
            rc, seconds = run_script(script, out, routed[script])
            print(f"== {script.name}: exit {rc} after {seconds:.0f}s", flush=True)
            if rc != 0:
                failed.append(f"{script.name} (exit {rc})")
                continue
        if not out.exists():
            failed.append(f"{script.name} (no {out})")
            continue
        rows.append(summary_row(read_json(out)))

    if rows:
        print()
        print(format_table(rows))
        write_csv(args.out_dir / "summary.csv", pd.DataFrame(rows, columns=COLUMNS))
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    missed = [f"{r['name']} ({r['targets'].removeprefix('MISSED: ')})" for r in rows
              if str(r["targets"]).startswith("MISSED")]
    if missed:  # the table's column is easy to miss at the end of an hour's output
        print(f"MISSED TARGETS: {'; '.join(missed)}" + ("" if args.strict else "; --strict makes this an error"),
              file=sys.stderr)
    if failed or (args.strict and missed):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
