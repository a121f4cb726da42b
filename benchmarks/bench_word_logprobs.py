"""Benchmark: word log-probabilities for surprisal-token selection, one forward pass per text vs one per word.

``ours`` (``ours_seconds``)
    :func:`memaudit.models.word_logprobs.compute_word_logprobs` (what ``HFBackend.word_logprobs``
    runs): each text once through the model, up to its last candidate, texts right-padded in
    length-bucketed batches of ``--batch-size``, every candidate's rows read from that pass and only
    those rows through the output layer.
``baseline`` (``baseline_seconds``)
    :func:`memaudit.models.word_logprobs.word_logprobs_loop`: the naive way, one pass per candidate
    over the text cut after it (re-tokenised), the word's rows read at the end; only those rows go
    through the output layer here too, so the speedup is the passes saved, not the output layer.

``max_abs_diff`` is the largest ``|ours - baseline|`` over every candidate's word and first-token
log-probability; ``rank_mismatches`` counts candidates whose ranks differ (a tie broken by float
rounding could make one). Workload (the issue's): ``--n-texts`` passages of ``--words`` words of
Austen's novels (the demo source) with up to ``--per-text`` candidates each, spread evenly over
the text's candidates (:func:`memaudit.probes.cloze.candidates.extract_candidates`: nouns and
numbers, spaCy). Models, a row of ``models`` each:

- ``tiny-gpt2``: the demo's tiny GPT-2 shape (4 layers, width 128), randomly initialised, with a
  4096-token BPE tokenizer trained on Austen's chapters (as ``bench_grad_norms.py``);
- ``smollm2-135m``: the demo's SmolLM2-135M-Instruct, float32.

Timing on a shared machine: the texts are cut into the length buckets of the batched path; per
bucket ours runs ``--repeats`` times and keeps its fastest, then the baseline runs once, side by
side in one process (load can only understate the speedup).

Targets (issue): ``speedup >= 5`` for every model, ``max_abs_diff <= 1e-4``.

Usage::

    .venv/bin/python benchmarks/bench_word_logprobs.py [--n-texts 20] [--words 120] [--per-text 10]
        [--threads 1] [--out results/bench/word_logprobs.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "word_logprobs"
ROOT = Path(__file__).resolve().parents[1]
TARGET_SPEEDUP = 5.0
TARGET_ABS_DIFF = 1e-4


def spread(items: list, k: int) -> list:
    """Up to ``k`` of ``items``, evenly spaced from the first to the last."""
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else items[:1]


def workload(n_texts: int, words: int, per_text: int,
             assets_dir: Path) -> tuple[list[str], list[list[tuple[int, int]]]]:
    """Austen passages and the character spans of up to ``per_text`` candidates in each."""
    from bench_grad_norms import demo_passages

    from memaudit.probes.cloze.candidates import extract_candidates_many, spans

    texts = demo_passages(n_texts, words, assets_dir)
    return texts, [spans(spread(c, per_text)) for c in extract_candidates_many(texts)]


def measure(model, tok, texts: list[str], text_spans: list, batch_size: int, repeats: int, max_tokens: int) -> dict:
    """Ours and the loop over the same length buckets, alternating per bucket."""
    from memaudit.models.token_stats import length_buckets
    from memaudit.models.word_logprobs import compute_word_logprobs, encode_with_offsets, word_logprobs_loop

    lengths = [len(encode_with_offsets(tok, t)[0]) + 1 for t in texts]
    assert max(lengths) <= max_tokens + 1, "the texts must fit: the loop and the windows would differ"
    ours: list = [None] * len(texts)
    base: list = [None] * len(texts)
    ours_s = base_s = 0.0
    compute_word_logprobs(model, tok, texts[:2], text_spans[:2], batch_size=2, max_tokens=max_tokens)  # warm-up
    word_logprobs_loop(model, tok, texts[:1], text_spans[:1], max_tokens=max_tokens)
    for batch in length_buckets(lengths, batch_size):
        chunk, chunk_spans = [texts[i] for i in batch], [text_spans[i] for i in batch]
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = compute_word_logprobs(model, tok, chunk, chunk_spans, batch_size=len(chunk), max_tokens=max_tokens)
            best = min(best, time.perf_counter() - t0)
        ours_s += best
        t0 = time.perf_counter()
        ref = word_logprobs_loop(model, tok, chunk, chunk_spans, max_tokens=max_tokens)
        base_s += time.perf_counter() - t0
        for j, i in enumerate(batch):
            ours[i], base[i] = got[j], ref[j]
    pairs = [(a, b) for x, y in zip(ours, base) for a, b in zip(x, y)]
    diff = max(max(abs(a["logprob"] - b["logprob"]), abs(a["first_logprob"] - b["first_logprob"])) for a, b in pairs)
    return {"n_items": len(texts), "n_candidates": len(pairs), "tokens": int(sum(lengths)),
            "batch_size": batch_size, "forward_passes_ours": len(texts), "forward_passes_baseline": len(pairs),
            "ours_seconds": ours_s, "baseline_seconds": base_s, "speedup": base_s / ours_s,
            "max_abs_diff": float(diff), "rank_mismatches": sum(a["rank"] != b["rank"] for a, b in pairs),
            "multi_token_words": sum(a["n_tokens"] > 1 for a, _ in pairs),
            "unaligned_words": sum(not a["aligned"] for a, _ in pairs)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-texts", type=int, default=20)
    ap.add_argument("--words", type=int, default=120)
    ap.add_argument("--per-text", type=int, default=10, help="candidates scored per text")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the demo runs model jobs on one)")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/word_logprobs.json")
    args = ap.parse_args(argv)

    import torch

    from bench_grad_norms import tiny_gpt2

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    texts, text_spans = workload(args.n_texts, args.words, args.per_text, args.assets_dir)
    rows = {}
    model, tok = tiny_gpt2(texts, args.assets_dir)
    rows["tiny-gpt2"] = measure(model, tok, texts, text_spans, args.batch_size, args.repeats, 255)
    if not args.skip_smollm2:
        from memaudit.models.loading import load_causal_lm

        model, tok = load_causal_lm({"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)},
                                    dtype="float32", device="cpu")
        rows["smollm2-135m"] = measure(model, tok, texts, text_spans, args.batch_size, args.repeats, 512)
    for name, row in rows.items():
        print(f"{name}: {row['n_items']} texts, {row['n_candidates']} candidates: ours {row['ours_seconds']:.2f}s, "
              f"loop {row['baseline_seconds']:.2f}s (speedup {row['speedup']:.2f}x), "
              f"max abs diff {row['max_abs_diff']:.1e}, rank mismatches {row['rank_mismatches']}", flush=True)
    ours_s = sum(r["ours_seconds"] for r in rows.values())
    base_s = sum(r["baseline_seconds"] for r in rows.values())
    result = {
        "name": NAME, "n_items": args.n_texts, "n_candidates": sum(map(len, text_spans)),
        "words": args.words, "per_text": args.per_text, "ours_seconds": ours_s, "baseline_seconds": base_s,
        "speedup": base_s / ours_s, "min_speedup": min(r["speedup"] for r in rows.values()),
        "max_abs_diff": max(r["max_abs_diff"] for r in rows.values()),
        "rank_mismatches": sum(r["rank_mismatches"] for r in rows.values()),
        "method": "one forward pass per text, all candidates read from it", "models": rows,
        "targets": {"speedup_min": TARGET_SPEEDUP, "max_abs_diff_max": TARGET_ABS_DIFF},
        "device": "cpu", "threads": args.threads, "load_average_1_5_15min": [list(load_before), list(os.getloadavg())],
        "machine": machine_report(dtype="float32"), "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "torch": torch.__version__,
    }
    result["meets_targets"] = {**{f"speedup_{name}": r["speedup"] >= TARGET_SPEEDUP for name, r in rows.items()},
                               "max_abs_diff": result["max_abs_diff"] <= TARGET_ABS_DIFF}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: {args.n_texts} texts; ours {ours_s:.1f}s, baseline {base_s:.1f}s "
          f"(speedup {result['speedup']:.2f}x, worst model {result['min_speedup']:.2f}x), "
          f"max abs diff {result['max_abs_diff']:.1e} -> {args.out}")
    return result


if __name__ == "__main__":
    main()
