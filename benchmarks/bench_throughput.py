"""Benchmark: token statistics and generation throughput (tokens/s) of the demo model, per device.

What the token-probability, KTD and cloze probes spend their time on (a forward pass that keeps
every token's log-probability) and what prefix probing, DE-COP paraphrasing and CopyBench spend
theirs on (greedy generation), timed on every device this machine has: the CPU always, the GPU
when one is visible (``--devices`` narrows it). Per device and dtype, each row is one of:

``token_stats``
    :meth:`memaudit.backends.hf.HFBackend.token_stats` over ``--n-passages`` demo passages of
    ``--words`` words (Austen's novels, as the demo), length-bucketed batches of ``--batch-size``;
    ``tokens_per_second`` counts the passage tokens.
``token_stats_one``
    the same passages one at a time (batch 1): what batching buys on that device.
``generate``
    :meth:`~memaudit.backends.hf.HFBackend.generate_batched`, greedy, ``--new-tokens`` tokens after
    the first 30 words of each passage (plain text, no chat template, so every row generates the
    same number of tokens unless it emits the end token), up to ``--max-rows`` rows decoded together;
    ``tokens_per_second`` counts generated tokens.
``generate_one``
    :meth:`~memaudit.backends.hf.HFBackend.generate` on the first ``--one-prompts`` prompts, one
    at a time (transformers' ``generate``): the unbatched way.

``ours_seconds``/``baseline_seconds`` are the batched and one-at-a-time token statistics plus
generation on the fastest device (per token, the rows' seconds are scaled to the same tokens), so
``speedup`` is what batching buys there. With a GPU, ``gpu_over_cpu`` gives each operation's
tokens/s on the GPU over the CPU's (float32 on both, and the GPU's bfloat16 beside it), and
``max_abs_diff`` the largest difference of a token log-probability between the CPU and the GPU in
float32 (``greedy_agreement`` the share of generated tokens that agree). On a CPU-only machine the
file holds the CPU rows alone and says so.

Each pair of ways must compute the same thing for its ratio to mean anything: ``agreement`` holds,
per device and dtype, the largest difference of a token log-probability between the batched and
the one-at-a-time token statistics (``max_abs_diff_batched``; the target, ``TARGET_ABS_DIFF``, holds
for float32) and how many of the one-at-a-time generations the batched sampler wrote word for word
(``same_texts`` of ``n_compared``).

Usage::

    .venv/bin/python benchmarks/bench_throughput.py [--n-passages 32] [--new-tokens 48]
        [--devices cpu,cuda] [--out results/bench/throughput.json]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "throughput"
ROOT = Path(__file__).resolve().parents[1]
PROMPT_WORDS = 30
TARGET_ABS_DIFF = 1e-4  # float32: padding and batch shape change the sums' order, nothing else


def measure_device(spec: dict, device: str, dtype: str, passages: list[str], args) -> tuple[list[dict], dict]:
    """The four rows for one device and dtype, and the raw outputs (for the CPU/GPU comparison)."""
    from memaudit.backends.base import GenerationParams
    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.token_stats import encode

    from bench_token_prob import timed  # wall-clock seconds with the GPU's queue drained

    model, tok = load_causal_lm(spec, dtype=dtype, device=device)
    backend = HFBackend(spec, name="smollm2-135m", model=model, tokenizer=tok, batch_size=args.batch_size,
                        max_tokens=512)
    n_tokens = sum(len(encode(tok, t, backend.max_tokens)) for t in passages)
    prompts = [" ".join(p.split()[:PROMPT_WORDS]) for p in passages]
    params = GenerationParams(max_new_tokens=args.new_tokens, chat=False)
    backend.token_stats(passages[:2])  # warm-up (kernels, allocator)
    backend.generate_batched(prompts[:2], GenerationParams(max_new_tokens=4, chat=False))
    rows = []

    def row(op, seconds, tokens, **extra):
        rows.append({"device": device, "dtype": dtype, "op": op, "seconds": seconds, "tokens": int(tokens),
                     "tokens_per_second": tokens / seconds, **extra})

    best, stats = float("inf"), None
    for _ in range(args.repeats):
        s, stats = timed(lambda: backend.token_stats(passages), device)
        best = min(best, s)
    row("token_stats", best, n_tokens, batch_size=args.batch_size)
    backend.batch_size = 1
    s, stats_one = timed(lambda: backend.token_stats(passages), device)
    row("token_stats_one", s, n_tokens, batch_size=1)
    backend.batch_size = args.batch_size
    best, gens = float("inf"), None
    for _ in range(args.repeats):
        s, gens = timed(lambda: backend.generate_batched(prompts, params, max_rows=args.max_rows), device)
        best = min(best, s)
    row("generate", best, sum(len(g.meta["token_ids"]) for g in gens), max_rows=args.max_rows)
    few = prompts[:args.one_prompts]
    s, ones = timed(lambda: backend.generate(few, params), device)
    row("generate_one", s, sum(g.output_tokens for g in ones), n_prompts=len(few))
    agree = {"device": device, "dtype": dtype,
             "max_abs_diff_batched": float(np.abs(stats.logprob - stats_one.logprob).max()),
             "same_texts": sum(a.text == b.text for a, b in zip(ones, gens)), "n_compared": len(ones)}
    del model, backend
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    return rows, {"stats": stats, "token_ids": [g.meta["token_ids"] for g in gens], "agreement": agree}


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of generated positions where two greedy runs chose the same token (up to the first split)."""
    same = total = 0
    for x, y in zip(a, b):
        n = max(len(x), len(y))
        k = 0
        while k < min(len(x), len(y)) and x[k] == y[k]:
            k += 1
        same, total = same + k, total + n
    return same / max(1, total)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-passages", type=int, default=32)
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--max-rows", type=int, default=16)
    ap.add_argument("--one-prompts", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--devices", default=None, help="comma-separated; default cpu, and cuda when visible")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/throughput.json")
    args = ap.parse_args(argv)

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grad_norms import demo_passages

    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    passages = demo_passages(args.n_passages, args.words, args.assets_dir)
    spec = {"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)}
    rows, raw = [], {}
    load_before = os.getloadavg()
    for device in devices:
        for dtype in ["float32"] + (["bfloat16"] if device.startswith("cuda") else []):
            got, raw[(device, dtype)] = measure_device(spec, device, dtype, passages, args)
            rows.extend(got)
            for r in got:
                print(f"{device} {dtype} {r['op']}: {r['tokens']} tokens in {r['seconds']:.2f}s "
                      f"= {r['tokens_per_second']:.0f} tokens/s", flush=True)
    rate = {(r["device"], r["dtype"], r["op"]): r["tokens_per_second"] for r in rows}
    fastest = max({(r["device"], r["dtype"]) for r in rows}, key=lambda k: rate[(*k, "token_stats")])
    per_token = lambda op: 1.0 / rate[(*fastest, op)]  # noqa: E731 -- seconds per token
    n_stat = next(r["tokens"] for r in rows if r["op"] == "token_stats")
    n_gen = next(r["tokens"] for r in rows if r["op"] == "generate")
    ours = n_stat * per_token("token_stats") + n_gen * per_token("generate")
    base = n_stat * per_token("token_stats_one") + n_gen * per_token("generate_one")
    result = {"name": NAME, "n_items": len(passages), "model": "smollm2-135m-instruct", "rows": rows,
              "fastest": {"device": fastest[0], "dtype": fastest[1]}, "ours_seconds": ours,
              "baseline_seconds": base, "speedup": base / ours, "devices": devices,
              "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
              "load_average_1_5_15min": [load_before[:3], os.getloadavg()[:3]],
              "python": sys.version.split()[0], "torch": torch.__version__,
              "agreement": [r["agreement"] for r in raw.values()]}
    result["meets_targets"] = {
        f"{a['device']}_{a['dtype']}_{key}": ok for a in result["agreement"] if a["dtype"] == "float32"
        for key, ok in ((f"max_abs_diff_batched<={TARGET_ABS_DIFF}", a["max_abs_diff_batched"] <= TARGET_ABS_DIFF),
                        ("same_texts", a["same_texts"] == a["n_compared"]))}
    gpu = next((d for d in devices if d.startswith("cuda")), None)
    result["machine"] = machine_report(dtype=sorted({r["dtype"] for r in rows}), device=gpu or "cpu")
    if gpu and "cpu" in devices:
        result["gpu"] = torch.cuda.get_device_name(0)
        result["gpu_over_cpu"] = {f"{op}_{dtype}": rate[(gpu, dtype, op)] / rate[("cpu", "float32", op)]
                                  for op in ("token_stats", "token_stats_one", "generate", "generate_one")
                                  for dtype in ("float32", "bfloat16")}
        cpu_s, gpu_s = raw[("cpu", "float32")]["stats"], raw[(gpu, "float32")]["stats"]
        result["max_abs_diff"] = float(np.abs(cpu_s.logprob - gpu_s.logprob).max())
        result["greedy_agreement"] = {
            dtype: agreement(raw[("cpu", "float32")]["token_ids"], raw[(gpu, dtype)]["token_ids"])
            for dtype in ("float32", "bfloat16")}
    else:
        result["note"] = "no GPU visible: CPU rows only (batched against one at a time)"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: fastest {fastest[0]} {fastest[1]}; batched {ours:.1f}s vs one at a time {base:.1f}s "
          f"(speedup {result['speedup']:.2f}x)"
          + "".join(f"; {a['device']} {a['dtype']}: batched and one at a time differ by at most "
                    f"{a['max_abs_diff_batched']:.1e}, {a['same_texts']} of {a['n_compared']} texts the same"
                    for a in result["agreement"])
          + (f"; GPU over CPU {result['gpu_over_cpu']}" if "gpu_over_cpu" in result else "") + f" -> {args.out}")
    return result


if __name__ == "__main__":
    main()
