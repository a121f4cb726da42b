"""Benchmark: float32 against bfloat16 on this machine, and whether ``dtype: auto`` picks the faster.

``forward``
    SmolLM2-135M-Instruct (the demo model) loaded in each dtype through
    :func:`memaudit.models.loading.load_causal_lm`, as the probes load it; one forward pass with
    logits over a batch of ``--batch`` x ``--tokens`` tokens (default 8 x 128), under
    ``torch.inference_mode``.
``lora``
    One LoRA training step (r=16, alpha 32, all linear layers, AdamW, gradient clipping, as
    :func:`memaudit.models.finetune.finetune` takes them) on a ``--lora-batch`` x ``--lora-tokens``
    batch (default 2 x 64: emulated bfloat16 is slow). bfloat16 means what the workflow does for a
    half-precision entry: float32 weights and optimizer, products under ``torch.autocast(bfloat16)``.

The two dtypes run side by side, alternating (the order flips every round), and each keeps the
fastest of its rounds, so load from other work on the machine colours both alike. Token ids are
random (timings do not depend on the text). ``ratio_*`` is bfloat16 tokens/s over float32
tokens/s (above 1: bfloat16 is faster). ``auto_choice`` is ``resolve_dtype("auto", "cpu")`` on this
machine, from the CPU flags in ``cpu_flags`` and the environment; ``auto_is_fastest`` whether it
is the faster dtype for LoRA training (``auto_is_fastest_forward`` for the forward pass).
For the summary table ``ours_seconds`` is a LoRA step in auto's dtype, ``baseline_seconds`` in the
other one, ``speedup`` their ratio (at least 1 when auto chose well).

Target: ``auto_is_fastest``.

Usage::

    .venv/bin/python benchmarks/bench_dtype.py [--forward-repeats 2] [--lora-repeats 2] [--out results/bench/dtype.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memaudit.io import write_json
from memaudit.machine import cpu_report, machine_report

NAME = "dtype"
ROOT = Path(__file__).resolve().parents[1]
DTYPES = ("float32", "bfloat16")


def alternate(run, repeats: int) -> dict[str, float]:
    """Fastest seconds of ``run(dtype)`` per dtype over ``repeats`` alternating rounds."""
    best = {d: float("inf") for d in DTYPES}
    for r in range(repeats):
        for dtype in (DTYPES if r % 2 == 0 else DTYPES[::-1]):
            t0 = time.perf_counter()
            run(dtype)
            best[dtype] = min(best[dtype], time.perf_counter() - t0)
    return best


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--lora-batch", type=int, default=2)
    ap.add_argument("--lora-tokens", type=int, default=64)
    ap.add_argument("--forward-repeats", type=int, default=2)
    ap.add_argument("--lora-repeats", type=int, default=2)
    # one thread, as the demo runs model jobs (threads_per_job: 1); two thrash when others share the cores
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/dtype.json")
    args = ap.parse_args(argv)

    import contextlib

    import torch
    from peft import LoraConfig, get_peft_model

    from memaudit.models.loading import bf16_emulation_forced, cpu_has_native_bf16, load_causal_lm, resolve_dtype

    torch.set_num_threads(args.threads)
    auto = resolve_dtype("auto", "cpu")
    spec = {"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)}
    load_before = os.getloadavg()
    t_start = time.perf_counter()

    models = {d: load_causal_lm(spec, dtype=d, device="cpu")[0] for d in DTYPES}
    vocab = models["float32"].config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (args.batch, args.tokens), generator=gen)

    def forward(dtype: str) -> None:
        with torch.inference_mode():
            models[dtype](input_ids=ids)

    forward_s = alternate(forward, args.forward_repeats)
    base = models.pop("float32")
    del models

    # LoRA as memaudit.models.finetune sets it up; bfloat16 = float32 weights under autocast
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                            task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    lora_ids = torch.randint(0, vocab, (args.lora_batch, args.lora_tokens), generator=gen)

    def lora_step(dtype: str) -> None:
        with (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()):
            out = model(input_ids=lora_ids, labels=lora_ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    lora_s = alternate(lora_step, args.lora_repeats)
    load_after = os.getloadavg()

    fwd_tokens, lora_tokens = args.batch * args.tokens, args.lora_batch * args.lora_tokens
    forward_tps = {d: fwd_tokens / s for d, s in forward_s.items()}
    lora_tps = {d: lora_tokens / s for d, s in lora_s.items()}
    fastest_lora = max(DTYPES, key=lambda d: lora_tps[d])
    fastest_forward = max(DTYPES, key=lambda d: forward_tps[d])
    other = "bfloat16" if auto == "float32" else "float32"
    result = {
        "name": NAME, "n_items": args.lora_repeats,
        "model": "smollm2-135m-instruct", "device": "cpu",
        "auto_choice": auto, "native_bf16_cpu": cpu_has_native_bf16(),
        "emulation_forced_by": bf16_emulation_forced(os.environ),
        "env": {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ},
        **cpu_report(),
        "forward_batch": [args.batch, args.tokens], "forward_repeats": args.forward_repeats,
        "forward_seconds_by_dtype": forward_s, "forward_tokens_per_s": forward_tps,
        "ratio_bf16_over_fp32_forward": forward_tps["bfloat16"] / forward_tps["float32"],
        "lora_batch": [args.lora_batch, args.lora_tokens], "lora_repeats": args.lora_repeats,
        "lora_setup": "r=16, alpha 32, all-linear, AdamW; bfloat16 = float32 weights + bfloat16 autocast",
        "lora_step_seconds_by_dtype": lora_s, "lora_tokens_per_s": lora_tps,
        "ratio_bf16_over_fp32_lora": lora_tps["bfloat16"] / lora_tps["float32"],
        "fastest_lora": fastest_lora, "fastest_forward": fastest_forward,
        "auto_is_fastest": auto == fastest_lora, "auto_is_fastest_forward": auto == fastest_forward,
        "ours_seconds": lora_s[auto], "baseline_seconds": lora_s[other], "speedup": lora_s[other] / lora_s[auto],
        "seconds_total": time.perf_counter() - t_start,
        "threads": args.threads, "load_average_1_5_15min": [load_before[:3], load_after[:3]],
        "machine": machine_report(dtype=list(DTYPES)), "cpus": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
        "python": sys.version.split()[0], "torch": torch.__version__,
    }
    result["meets_targets"] = {"auto_is_fastest": result["auto_is_fastest"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: auto -> {auto} (CPU flags {result.get('cpu_flags')}); forward {forward_tps['float32']:.0f} vs "
          f"{forward_tps['bfloat16']:.0f} tok/s (bf16/fp32 {result['ratio_bf16_over_fp32_forward']:.2f}); "
          f"LoRA {lora_tps['float32']:.0f} vs {lora_tps['bfloat16']:.1f} tok/s "
          f"(bf16/fp32 {result['ratio_bf16_over_fp32_lora']:.3f}); auto is fastest: {result['auto_is_fastest']} "
          f"-> {args.out}")
    return result


if __name__ == "__main__":
    main()
