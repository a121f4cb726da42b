"""Benchmark: a LoRA step with adapters in every layer against adapters in the last N (``finetune.lora_layers``).

SmolLM2-135M-Instruct (the demo model, 30 layers) in float32, LoRA set up as
:func:`memaudit.models.finetune.finetune` sets it up (r=16, alpha 32, all linear layers,
AdamW, gradient clipping), once with adapters in all layers and once in the last ``--layers``
(:func:`memaudit.models.finetune.lora_layer_settings`). Below the lowest adapter no gradient is
needed, so backpropagation stops there: a step costs the forward pass plus ``N / 30`` of the
backward one. The two run side by side, alternating (the order flips every round), each keeping
its fastest round, on one ``--batch`` x ``--tokens`` batch of random token ids (default 4 x 256,
the demo's batch of member chunks). ``ours_seconds`` is a step with the last N layers,
``baseline_seconds`` with all, ``speedup`` their ratio.

Target: ``speedup`` >= 1.25 at N = 15 (half the layers).

Usage::

    .venv/bin/python benchmarks/bench_lora_layers.py [--layers 15] [--repeats 3] [--out results/bench/lora_layers.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "lora_layers"
ROOT = Path(__file__).resolve().parents[1]
TARGET_SPEEDUP = 1.25


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=15)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    # one thread, as the demo runs model jobs (threads_per_job: 1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/lora_layers.json")
    args = ap.parse_args(argv)

    import torch
    from peft import LoraConfig, get_peft_model

    from memaudit.models.finetune import lora_layer_settings
    from memaudit.models.loading import load_causal_lm

    torch.set_num_threads(args.threads)
    spec = {"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)}
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    setups = {"all": None, "last": args.layers}
    models, optimizers, params = {}, {}, {}
    for key, layers in setups.items():
        base, _ = load_causal_lm(spec, dtype="float32", device="cpu")
        model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                **lora_layer_settings(base, "all-linear", layers)))
        model.train()
        params[key] = [p for p in model.parameters() if p.requires_grad]
        models[key], optimizers[key] = model, torch.optim.AdamW(params[key], lr=1e-4, weight_decay=0.0)
    n_layers = models["all"].config.num_hidden_layers
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, models["all"].config.vocab_size, (args.batch, args.tokens), generator=gen)

    def step(key: str) -> None:
        out = models[key](input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params[key], 1.0)
        optimizers[key].step()
        optimizers[key].zero_grad(set_to_none=True)

    for key in setups:  # warm-up: first-call allocations and kernel choices
        step(key)
    best = {key: float("inf") for key in setups}
    for r in range(args.repeats):
        for key in (list(setups) if r % 2 == 0 else list(setups)[::-1]):
            t0 = time.perf_counter()
            step(key)
            best[key] = min(best[key], time.perf_counter() - t0)
    load_after = os.getloadavg()
    tokens = args.batch * args.tokens
    speedup = best["all"] / best["last"]
    result = {
        "name": NAME, "n_items": args.repeats, "model": "smollm2-135m-instruct", "dtype": "float32",
        "n_layers": n_layers, "lora_layers": args.layers, "batch": [args.batch, args.tokens],
        "trainable_params": {k: int(sum(p.numel() for p in v)) for k, v in params.items()},
        "step_seconds": best, "tokens_per_s": {k: tokens / s for k, s in best.items()},
        "ours_seconds": best["last"], "baseline_seconds": best["all"], "speedup": speedup,
        "seconds_total": time.perf_counter() - t_start,
        "threads": args.threads, "load_average_1_5_15min": [load_before[:3], load_after[:3]],
        "machine": machine_report(dtype="float32"), "cpus": os.cpu_count(),
        "env": {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
                if k in os.environ},
        "python": sys.version.split()[0], "torch": torch.__version__,
    }
    result["meets_targets"] = {f"speedup>={TARGET_SPEEDUP}": speedup >= TARGET_SPEEDUP}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: LoRA step, all {n_layers} layers {best['all']:.2f}s, last {args.layers} {best['last']:.2f}s "
          f"({speedup:.2f}x) -> {args.out}")
    return result


if __name__ == "__main__":
    main()
