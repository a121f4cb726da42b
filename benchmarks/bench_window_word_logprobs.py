"""Benchmark: a causal reference reading both sides of a word (candidate fills by whole-window likelihood).

``ours`` (``ours_seconds``)
    :func:`memaudit.models.window_word_logprobs.compute_window_word_logprobs` (what
    ``HFBackend.word_logprobs(fills=K)`` runs): every word's left window in length-bucketed batches
    (the proposals), then the word's and its ``K`` fills' windows in batches, only the rows from the
    first token at which they differ through the output layer.
``baseline`` (``baseline_seconds``)
    :func:`memaudit.models.window_word_logprobs.window_word_logprobs_loop`: one sequence at a time,
    every token of every window summed.
``causal_seconds``
    :func:`memaudit.models.word_logprobs.compute_word_logprobs` on the same words: the left-context
    scoring the window mode replaces; ``cost_vs_causal`` = ``ours / causal`` is what the mode costs.

``max_abs_diff`` is the largest ``|ours - baseline|`` of a word's log-probability; ``rank_mismatches``
counts words whose ranks differ. What the mode changes (no target): ``spearman_vs_causal``, the
rank correlation of the window and the causal log-probabilities over the words, and
``given_away_by_the_right``, the words whose first token the causal reference ranks 100th or lower
that no fill beats in the window (the right context makes them the best fill).

Timing on a shared machine: text by text, the causal scoring, ours and the loop run one after the
other, so that load falls on all three alike.

Workload: ``--n-texts`` Austen passages of ``--words`` words, up to ``--per-text`` candidates each
(as ``bench_word_logprobs.py``), each word's window ``context_chars`` (the demo's 300) either side,
``--fills`` fills. Models: the tiny GPT-2 shape and SmolLM2-135M-Instruct (float32), as there.

Targets: ``speedup >= 1.5`` on SmolLM2-135M, whose forward passes are the cost (the tiny GPT-2's passes
are framework overhead, a few milliseconds each whatever their length: its speedup is reported, not a
target). On a CPU a pass costs in proportion to its tokens, and the saving is the left part of the
``K + 1`` windows, which the cache reads once: per word the loop runs about ``0.5 + (K + 1)`` window
lengths and ours ``0.5 + (K + 1) / 2``, 1.9 times fewer at ``K = 10``; batching adds little on a CPU.
``max_abs_diff <= 5e-4``: a word's number is a difference of sums over about 70 tokens of
float32 log-probabilities, summed in another order by each way.

Usage::

    .venv/bin/python benchmarks/bench_window_word_logprobs.py [--n-texts 6] [--per-text 6] [--fills 10]
        [--threads 1] [--out results/bench/window_word_logprobs.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "window_word_logprobs"
ROOT = Path(__file__).resolve().parents[1]
TARGET_SPEEDUP = 1.5
TARGET_ABS_DIFF = 5e-4
TARGET_MODEL = "smollm2-135m"
FAR_RANK = 100


def measure(model, tok, texts: list[str], text_spans: list, bounds: list, fills: int, batch_size: int) -> dict:
    """The three ways text by text, alternating (a shared machine's load falls on each alike)."""
    from scipy.stats import spearmanr

    from memaudit.models.window_word_logprobs import compute_window_word_logprobs, window_word_logprobs_loop
    from memaudit.models.word_logprobs import compute_word_logprobs

    # warm-up, all three ways: the way first timed cold would carry first-use costs
    compute_window_word_logprobs(model, tok, texts[:1], [text_spans[0][:1]], fills=2, bounds=[bounds[0][:1]])
    window_word_logprobs_loop(model, tok, texts[:1], [text_spans[0][:1]], fills=2, bounds=[bounds[0][:1]])
    compute_word_logprobs(model, tok, texts[:1], [text_spans[0][:1]], batch_size=batch_size)
    ours, base, causal = [], [], []
    ours_s = base_s = causal_s = 0.0
    for i in range(len(texts)):
        one, spans, where = texts[i:i + 1], text_spans[i:i + 1], bounds[i:i + 1]
        t0 = time.perf_counter()
        causal += compute_word_logprobs(model, tok, one, spans, batch_size=batch_size)
        t1 = time.perf_counter()
        ours += compute_window_word_logprobs(model, tok, one, spans, fills=fills, bounds=where, batch_size=batch_size)
        t2 = time.perf_counter()
        base += window_word_logprobs_loop(model, tok, one, spans, fills=fills, bounds=where)
        t3 = time.perf_counter()
        causal_s, ours_s, base_s = causal_s + t1 - t0, ours_s + t2 - t1, base_s + t3 - t2
    pairs = [(a, b, c) for x, y, z in zip(ours, base, causal) for a, b, c in zip(x, y, z)]
    far = [a for a, _, c in pairs if c["rank"] >= FAR_RANK]
    return {"n_items": len(texts), "n_candidates": len(pairs), "fills": fills, "batch_size": batch_size,
            "ours_seconds": ours_s, "baseline_seconds": base_s, "causal_seconds": causal_s,
            "speedup": base_s / ours_s, "cost_vs_causal": ours_s / causal_s,
            "max_abs_diff": float(max(abs(a["logprob"] - b["logprob"]) for a, b, _ in pairs)),
            "rank_mismatches": sum(a["rank"] != b["rank"] for a, b, _ in pairs),
            "mean_fills": sum(a["n_fills"] for a, _, _ in pairs) / len(pairs),
            "spearman_vs_causal": float(spearmanr([a["logprob"] for a, _, _ in pairs],
                                                  [c["first_logprob"] for _, _, c in pairs]).statistic),
            "far_in_causal": len(far), "given_away_by_the_right": sum(a["rank"] == 0 for a in far)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-texts", type=int, default=6)
    ap.add_argument("--words", type=int, default=120)
    ap.add_argument("--per-text", type=int, default=6, help="candidates scored per text")
    ap.add_argument("--fills", type=int, default=10)
    ap.add_argument("--context-chars", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the demo runs model jobs on one)")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/window_word_logprobs.json")
    args = ap.parse_args(argv)

    import torch

    from bench_grad_norms import tiny_gpt2
    from bench_word_logprobs import workload

    from memaudit.probes.cloze.candidates import context_bounds

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    texts, text_spans = workload(args.n_texts, args.words, args.per_text, args.assets_dir)
    bounds = [[context_bounds(t, s, e, args.context_chars) for s, e in sp] for t, sp in zip(texts, text_spans)]
    rows = {}
    model, tok = tiny_gpt2(texts, args.assets_dir)
    rows["tiny-gpt2"] = measure(model, tok, texts, text_spans, bounds, args.fills, args.batch_size)
    if not args.skip_smollm2:
        from memaudit.models.loading import load_causal_lm

        model, tok = load_causal_lm({"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)},
                                    dtype="float32", device="cpu")
        rows["smollm2-135m"] = measure(model, tok, texts, text_spans, bounds, args.fills, args.batch_size)
    for name, row in rows.items():
        print(f"{name}: {row['n_candidates']} words, {args.fills} fills: ours {row['ours_seconds']:.2f}s, "
              f"loop {row['baseline_seconds']:.2f}s (speedup {row['speedup']:.2f}x), causal "
              f"{row['causal_seconds']:.2f}s (cost {row['cost_vs_causal']:.1f}x), max abs diff "
              f"{row['max_abs_diff']:.1e}, rank mismatches {row['rank_mismatches']}, spearman vs causal "
              f"{row['spearman_vs_causal']:.2f}, given away by the right {row['given_away_by_the_right']} of "
              f"{row['far_in_causal']}", flush=True)
    result = {
        "name": NAME, "n_items": args.n_texts, "n_candidates": sum(map(len, text_spans)), "fills": args.fills,
        "ours_seconds": sum(r["ours_seconds"] for r in rows.values()),
        "baseline_seconds": sum(r["baseline_seconds"] for r in rows.values()),
        "min_speedup": min(r["speedup"] for r in rows.values()),
        "max_abs_diff": max(r["max_abs_diff"] for r in rows.values()),
        "rank_mismatches": sum(r["rank_mismatches"] for r in rows.values()),
        "method": "proposals and fills batched by length, shared prefix left out", "models": rows,
        "targets": {"speedup_min": TARGET_SPEEDUP, "speedup_model": TARGET_MODEL, "max_abs_diff_max": TARGET_ABS_DIFF},
        "device": "cpu", "threads": args.threads, "load_average_1_5_15min": [list(load_before), list(os.getloadavg())],
        "machine": machine_report(dtype="float32"), "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "torch": torch.__version__,
    }
    result["speedup"] = result["baseline_seconds"] / result["ours_seconds"]
    result["meets_targets"] = {**{f"speedup_{name}": r["speedup"] >= TARGET_SPEEDUP for name, r in rows.items()
                                  if name == TARGET_MODEL},
                               "max_abs_diff": result["max_abs_diff"] <= TARGET_ABS_DIFF}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: speedup {result['speedup']:.2f}x (worst model {result['min_speedup']:.2f}x), "
          f"max abs diff {result['max_abs_diff']:.1e} -> {args.out}")
    return result


if __name__ == "__main__":
    main()
