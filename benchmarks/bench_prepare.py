"""Benchmark: a base model's preparation reads its checkpoint without its weights in memory.

``prepare_model`` for a base model (a local path or a hub id) writes the manifest: the parameter count,
whether it is an encoder-decoder, the tokenizer checked. It loaded the whole model on the CPU in its
``dtype`` to count the parameters; it now builds it on PyTorch's ``meta`` device
(:func:`memaudit.models.loading.inspect_model`). A 70B checkpoint in float32 (``dtype: auto`` on a CPU
without native bfloat16) was 280 GB on the node that prepares it.

A random GPT-2 of ``--layers`` layers of width ``--width`` (about 100M parameters by default) is saved in
bfloat16 safetensors with a trained byte-level BPE tokenizer, then prepared in a fresh process each way,
float32 as ``dtype: auto`` gives on a CPU without native bfloat16:

- ``ours``: :func:`memaudit.models.prepare.prepare_base_model`;
- ``baseline``: what it did before, :func:`memaudit.models.loading.load_model` on the CPU and the count.

A third process imports the same modules and loads nothing (``floor``). ``ours_mb`` and ``baseline_mb`` are
each process's peak resident memory above the floor's (``ru_maxrss``); ``memory_ratio`` is baseline over
ours. Both count the same parameters (``max_abs_diff`` is their difference).

Targets: the same parameter count, and ``ours_mb`` at most a quarter of ``baseline_mb`` (the weights in
float32 are 4 bytes per parameter; what is left above the floor is the checkpoint's header and the
meta model's Python objects).

Usage::

    .venv/bin/python benchmarks/bench_prepare.py [--layers 12] [--width 768] [--out results/bench/prepare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NAME = "prepare"
TARGETS = {"memory_ratio_min": 4.0}

# Run in a fresh process per way: the peak resident memory of one never colours another's.
CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
import torch, transformers  # noqa: F401 -- the floor imports what both ways import
from memaudit.models.loading import count_parameters, load_model
from memaudit.models.prepare import prepare_base_model
way, path, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
t0 = time.perf_counter()
n = None
if way == "ours":
    n = prepare_base_model("bench", {{"source": {{"path": path}}, "dtype": "float32"}}, out,
                           cache_dir=out / "cache")["n_params"]
elif way == "baseline":
    model, _ = load_model({{"path": path}}, dtype="float32", device="cpu")
    n = count_parameters(model)
print(json.dumps({{"n_params": n, "seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def make_checkpoint(path: Path, layers: int, width: int) -> int:
    """A random GPT-2 saved in bfloat16 with a byte-level BPE tokenizer; returns its parameter count."""
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.models.tiny import train_bpe_tokenizer

    texts = [f"The {w} of the sea rose over the {v} harbour at dawn, number {i}." for i, (w, v) in
             enumerate(zip(["wind", "light", "salt", "fog"] * 50, ["old", "grey", "quiet", "far"] * 50))]
    tok = train_bpe_tokenizer(texts, 2000, path)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=width, n_layer=layers, n_head=12,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = GPT2LMHeadModel(config).to(torch.bfloat16)
    model.save_pretrained(path)
    return int(sum(p.numel() for p in model.parameters()))


def run_child(way: str, checkpoint: Path, out: Path) -> dict:
    code = CHILD.format(src=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-c", code, way, str(checkpoint), str(out)], capture_output=True,
                          text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode != 0:
        raise RuntimeError(f"{way}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(args) -> dict:
    from memaudit.machine import machine_report

    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        n_params = make_checkpoint(checkpoint, args.layers, args.width)
        load_before = os.getloadavg()
        runs = {way: run_child(way, checkpoint, Path(tmp) / way) for way in ("floor", "ours", "baseline")}
        load_after = os.getloadavg()
    floor = runs["floor"]["peak_mb"]
    ours_mb, baseline_mb = runs["ours"]["peak_mb"] - floor, runs["baseline"]["peak_mb"] - floor
    ratio = baseline_mb / max(ours_mb, 1.0)
    return {
        "name": NAME,
        "n_items": n_params,
        "ours_seconds": runs["ours"]["seconds"],
        "baseline_seconds": runs["baseline"]["seconds"],
        "speedup": runs["baseline"]["seconds"] / runs["ours"]["seconds"],
        "ours_mb": ours_mb,
        "baseline_mb": baseline_mb,
        "floor_peak_mb": floor,
        "memory_ratio": ratio,
        "float32_weights_mb": n_params * 4 / 2**20,
        "max_abs_diff": abs(runs["ours"]["n_params"] - runs["baseline"]["n_params"]),
        "target_memory_ratio_min": TARGETS["memory_ratio_min"],
        "meets_targets": {
            "same_count": runs["ours"]["n_params"] == runs["baseline"]["n_params"] == n_params,
            "memory": ratio >= TARGETS["memory_ratio_min"],
        },
        "machine": machine_report(dtype="float32"),
        "load_average_1_5_15min": {"before": load_before, "after": load_after},
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    args = p.parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['n_items']:,} parameters: preparing took {result['ours_mb']:.0f} MB above the floor, the full "
          f"load {result['baseline_mb']:.0f} MB (x{result['memory_ratio']:.1f}); targets {result['meets_targets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
