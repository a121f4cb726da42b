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

The speed is only worth having if the step it times computes the same thing: before timing, the
last-N model's adapters are set to the all-layers model's adapters of those layers, and one
forward and backward pass of each on the batch must give the same loss and the same gradient for
every adapter the last-N model trains (``correctness``; a LoRA ``B`` starts at zero, so the adapters
below N change neither the forward pass nor the gradients above them).

Targets: ``speedup`` >= 1.25 at N = 15 (half the layers); the gradients agree within
``TARGET_GRAD_REL_DIFF`` of the largest gradient entry.

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
TARGET_GRAD_REL_DIFF = 1e-5


def same_step(models: dict, ids) -> dict:
    """The loss and the trained adapters' gradients of the last-N model against the all-layers
    model's, on the same batch and the same adapter weights (the last-N model's adapters are set
    to the all-layers model's first). Gradients are left zeroed."""
    import torch

    full = dict(models["all"].named_parameters())
    trained = [(name, p) for name, p in models["last"].named_parameters() if p.requires_grad]
    with torch.no_grad():
        for name, p in trained:
            p.copy_(full[name])
    losses = {}
    for key, model in models.items():
        torch.manual_seed(0)  # a model with dropout draws the same masks in both passes
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        losses[key] = out.loss.item()
    grad_diff = max(float((p.grad - full[name].grad).abs().max()) for name, p in trained)
    grad_max = max(float(p.grad.abs().max()) for _, p in trained)
    for model in models.values():
        model.zero_grad(set_to_none=True)
    return {"loss": losses, "loss_abs_diff": abs(losses["all"] - losses["last"]), "n_compared": len(trained),
            "max_abs_grad_diff": grad_diff, "max_abs_grad": grad_max,
            "max_rel_grad_diff": grad_diff / grad_max if grad_max > 0 else float("inf")}


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

    correctness = same_step(models, ids)  # also the warm-up of the forward and backward passes
    for key in setups:  # warm-up: first-call allocations, kernel choices and the optimizer's state
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
        "correctness": correctness, "seconds_total": time.perf_counter() - t_start,
        "threads": args.threads, "load_average_1_5_15min": [load_before[:3], load_after[:3]],
        "machine": machine_report(dtype="float32"), "cpus": os.cpu_count(),
        "env": {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
                if k in os.environ},
        "python": sys.version.split()[0], "torch": torch.__version__,
    }
    result["meets_targets"] = {f"speedup>={TARGET_SPEEDUP}": speedup >= TARGET_SPEEDUP,
                               f"grad_rel_diff<={TARGET_GRAD_REL_DIFF}":
                                   correctness["max_rel_grad_diff"] <= TARGET_GRAD_REL_DIFF}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: LoRA step, all {n_layers} layers {best['all']:.2f}s, last {args.layers} {best['last']:.2f}s "
          f"({speedup:.2f}x); same gradients within {correctness['max_rel_grad_diff']:.1e} of the largest "
          f"over {correctness['n_compared']} adapter tensors -> {args.out}")
    return result


if __name__ == "__main__":
    main()
