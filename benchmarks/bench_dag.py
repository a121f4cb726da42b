"""Benchmark: a dry run (``snakemake -n all``) of a large configuration builds its job graph in seconds.

The configuration is generated in a scratch copy of the workflow: ``--models``
models (half of them hub models with pinned revisions, half LoRA fine-tunes of
those on one benchmark each), ``--benchmarks`` benchmarks drawn from the demo
sources, and the token-probability probe with eight methods (loss, zlib,
lowercase, Min-K% and Min-K%++ at two ratios, and a reference model). Nothing
is fetched: the hub ids are never resolved in a dry run.

``ours_seconds`` is the fastest of ``--repeats`` dry runs, timed from starting
the ``snakemake`` process to its exit (interpreter start, imports, config
validation, parsing the rules, building and printing the DAG); ``cpu_seconds``
is that run's user + system CPU time, which other work on a shared machine
inflates far less than the wall time (compare them, and the load average). Each run goes
through an audit hook that records every socket connection or name lookup and
which heavy modules got imported: a dry run must touch no network and load no
model (neither ``torch`` nor ``transformers`` imported).

Targets (issue): at least 20 models x 6 benchmarks x 8 methods, ``ours_seconds``
under 30 s, no network, no model library imported.

There is no baseline (``baseline_seconds`` is null): the target is absolute.

Usage::

    .venv/bin/python benchmarks/bench_dag.py [--models 20] [--benchmarks 6] [--repeats 3] [--out results/bench/dag.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import yaml

NAME = "dag"
ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"seconds_max": 30.0, "models_min": 20, "benchmarks_min": 6, "methods_min": 8}
SOURCES = ("austen", "reuters", "tidytext", "user_books")
# Real hub ids; revisions are placeholders of the right shape, never resolved by a dry run.
HUB_MODELS = ("EleutherAI/pythia-70m", "EleutherAI/pythia-160m", "EleutherAI/pythia-410m", "EleutherAI/pythia-1b",
              "EleutherAI/pythia-1.4b", "EleutherAI/pythia-2.8b", "EleutherAI/pythia-6.9b", "EleutherAI/pythia-12b",
              "meta-llama/Llama-2-7b-hf", "mistralai/Mistral-7B-v0.1")
HEAVY_MODULES = ("torch", "transformers", "peft", "openai", "anthropic", "sklearn", "scipy")

# Runs inside the snakemake process: records network use and heavy imports, then reports them.
AUDITED_SNAKEMAKE = r"""
import json, sys, time
t0 = time.perf_counter()
network = []
def hook(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
        network.append(event + " " + repr(args)[:200])
sys.addaudithook(hook)
from snakemake.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code or 0
report = {"exit": code, "in_process_seconds": time.perf_counter() - t0, "network": network,
          "modules": sorted(m for m in HEAVY if m in sys.modules)}
sys.stderr.write("\nBENCH_DAG " + json.dumps(report) + "\n")
"""


def large_config(n_models: int, n_benchmarks: int) -> dict:
    """``n_benchmarks`` benchmarks and ``n_models`` models: hub base models and a LoRA fine-tune of each."""
    benchmarks = {
        f"bench{i:02d}": {"sources": [SOURCES[i % len(SOURCES)]], "n_documents": 200, "passage_words": 64 + 16 * i,
                          "passages_per_document": 2}
        for i in range(n_benchmarks)
    }
    bench_names = sorted(benchmarks)
    models: dict[str, dict] = {}
    n_base = (n_models + 1) // 2
    for i in range(n_base):
        hub_id = HUB_MODELS[i % len(HUB_MODELS)]
        name = f"{hub_id.split('/')[1].lower()}-{i:02d}"
        models[name] = {"family": hub_id.split("/")[0].lower(), "dtype": "bfloat16", "device": "cuda",
                        "source": {"hub_id": hub_id, "revision": f"{i:040x}"}}
        if len(models) < n_models:
            models[f"{name}-contaminated"] = {
                "family": hub_id.split("/")[0].lower(), "dtype": "bfloat16", "device": "cuda", "base": name,
                "finetune": {"members_of": [bench_names[i % n_benchmarks]], "method": "lora", "epochs": 3},
            }
    reference = sorted(models)[0]
    return {
        "seed": 13,
        "benchmarks": benchmarks,
        "pretrain": {"sources": []},
        "models": models,
        "probes": {"token_prob": {"methods": ["loss", "zlib", "lowercase", "min_k", "min_k_plus_plus", "reference"],
                                  "min_k_ratios": [0.1, 0.2], "reference_models": [reference]}},
    }


def n_methods(config: dict) -> int:
    """Score columns the token-probability probe writes per (benchmark, model) (reference: one per reference model)."""
    tp = config["probes"]["token_prob"]
    per_ratio = sum(m in ("min_k", "min_k_plus_plus") for m in tp["methods"]) * len(tp["min_k_ratios"])
    plain = sum(m in ("loss", "zlib", "lowercase") for m in tp["methods"])
    return plain + per_ratio + ("reference" in tp["methods"]) * len(tp["reference_models"])


def scratch_workflow(dest: Path) -> Path:
    for name in ("Snakefile", "workflow", "config", "envs"):
        src = ROOT / name
        if src.exists():
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    return dest


def dry_run(workdir: Path, configfile: Path, extra: Sequence[str] = ()) -> dict:
    """One audited ``snakemake -n all``: wall seconds, job count, network events, heavy modules imported."""
    # Offline settings as a second guard; the audit hook is what proves nothing was attempted.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    code = f"HEAVY = {HEAVY_MODULES!r}\n" + AUDITED_SNAKEMAKE
    cmd = [sys.executable, "-c", code, "-n", "all", "--configfile", str(configfile), *extra]
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    marker = re.search(r"^BENCH_DAG (.*)$", proc.stderr, re.M)
    if proc.returncode != 0 or marker is None:
        raise RuntimeError(f"dry run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    report = json.loads(marker.group(1))
    if report["exit"] != 0:
        raise RuntimeError(f"snakemake exited {report['exit']}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    total = re.search(r"^total\s+(\d+)\s*$", proc.stdout, re.M)
    if total is None:
        raise RuntimeError(f"no job count in the dry run's output:\n{proc.stdout[-2000:]}")
    jobs_by_rule = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", proc.stdout, re.M) if m[1] != "total"}
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "in_process_seconds": report["in_process_seconds"],
            "n_jobs": int(total.group(1)),
            "jobs_by_rule": jobs_by_rule, "network": report["network"], "modules": report["modules"]}


def run(args) -> dict:
    from memaudit.machine import machine_report

    config = large_config(args.models, args.benchmarks)
    with tempfile.TemporaryDirectory(prefix="bench-dag-") as tmp:
        workdir = scratch_workflow(Path(tmp))
        configfile = workdir / "config" / "large.yaml"
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
        load_before = os.getloadavg()
        runs = [dry_run(workdir, configfile) for _ in range(args.repeats)]
        load_after = os.getloadavg()
        profile = None
        if args.profile:
            prof = Path(args.profile).resolve()
            dry_run(workdir, configfile)  # warm, then profiled
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "snakemake", "-n", "all",
                            "--configfile", str(configfile)], cwd=workdir, capture_output=True, check=True)
            profile = str(prof)
    best = min(runs, key=lambda r: r["seconds"])
    network = sorted({e for r in runs for e in r["network"]})
    modules = sorted({m for r in runs for m in r["modules"]})
    counts = {"models": len(config["models"]), "benchmarks": len(config["benchmarks"]), "methods": n_methods(config)}
    return {
        "name": NAME,
        "n_items": best["n_jobs"],
        "n_jobs": best["n_jobs"],
        "jobs_by_rule": best["jobs_by_rule"],
        "n_models": counts["models"],
        "n_benchmarks": counts["benchmarks"],
        "n_methods": counts["methods"],
        "ours_seconds": best["seconds"],
        "in_process_seconds": best["in_process_seconds"],
        "cpu_seconds": best["cpu_seconds"],
        "seconds_all_repeats": [r["seconds"] for r in runs],
        "baseline_seconds": None,
        "speedup": None,
        "target_seconds": TARGETS["seconds_max"],
        "network_events": network,
        "heavy_modules_imported": modules,
        "meets_targets": {
            "seconds": best["seconds"] < TARGETS["seconds_max"],
            "size": (counts["models"] >= TARGETS["models_min"] and counts["benchmarks"] >= TARGETS["benchmarks_min"]
                     and counts["methods"] >= TARGETS["methods_min"]),
            "no_network": not network,
            "no_model_library": not {"torch", "transformers"} & set(modules),
        },
        "profile": profile,
        "machine": machine_report(dtype=None),
        "load_average_1_5_15min": {"before": load_before, "after": load_after},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", type=int, default=20)
    p.add_argument("--benchmarks", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", help="also write a cProfile of one dry run to this file")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    args = p.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['n_jobs']} jobs ({result['n_models']} models x {result['n_benchmarks']} benchmarks x "
          f"{result['n_methods']} methods) in {result['ours_seconds']:.1f}s; targets {result['meets_targets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
