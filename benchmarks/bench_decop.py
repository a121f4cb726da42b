"""Benchmark: DE-COP logit mode, ours vs. the reference implementation's way.

``ours`` (``ours_seconds``)
    what DE-COP's logit mode runs on a CPU: ``HFBackend.option_logprobs`` (the ``Backend``
    interface) with :func:`memaudit.probes.decop.scoring.letter_probabilities`: the orderings of a
    passage walked as a token trie, each prefix that orderings share computed once, only the
    answer position through the output layer (:func:`memaudit.models.forward.tree_next_token_logprobs`).
``batch`` (``batch_seconds``)
    what it ran before (and runs on a GPU): all orderings in one left-padded batch, only the prefix
    they all share computed once (``share_prefix="batch"``).
``baseline`` (``baseline_seconds``)
    the DE-COP reference code's way: one ``generate(max_new_tokens=2, output_scores=True)``
    per prompt, reading the scores of the first generated step
    (:func:`memaudit.probes.decop.scoring.reference_probabilities`).

Both return the four option-letter probabilities (variants "A"/" A" summed, renormalised
over A-D); ``max_abs_diff`` is their largest difference. The model is the demo's
SmolLM2-135M-Instruct, the prompts the paper's Appendix C chat prompt over ~64-token
Austen passages. The three wrong options are neighbouring passages of the same chapter
(paraphrasing costs minutes and does not change the timing: same lengths, same prompts).

Timing on a shared machine: each way runs once untimed first (warm-up), then passages alternate ours /
batch / baseline, ours and batch keep the fastest of ``--repeats`` rounds per passage, the baseline runs
once (load can only understate the speedup).

Targets (issue): ``speedup >= 4``, ``max_abs_diff <= 1e-4``.

Usage::

    .venv/bin/python benchmarks/bench_decop.py [--n-passages 2] [--orderings permutations]
        [--out results/bench/decop.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "decop"
ROOT = Path(__file__).resolve().parents[1]


def demo_items(n: int, assets_dir: Path) -> list[dict]:
    from memaudit.datasets.sources import load_source
    from memaudit.probes.decop.construct import passages_of

    items = []
    for doc in load_source("austen", assets_dir):
        ps = passages_of(doc.text, 64, None, seed=0, doc_id=doc.doc_id)
        if len(ps) >= 4:
            items.append({"item_id": doc.doc_id, "passage_id": doc.doc_id, "doc_id": doc.doc_id, "label": 1,
                          "answer": 0, "options": ps[:4],
                          "meta": {"title": doc.title, "author": doc.author, "kind": "book"}})
        if len(items) == n:
            return items
    raise SystemExit("not enough Austen chapters: run `make assets`")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-passages", type=int, default=2)
    ap.add_argument("--orderings", choices=["permutations", "latin_square"], default="permutations")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "auto"], default="float32",
                    help="both ways in this dtype (auto: bfloat16 where the CPU computes it natively)")
    ap.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/decop.json")
    args = ap.parse_args(argv)

    import torch

    from memaudit.probes.decop.prompts import LETTERS, orderings
    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import cpu_has_native_bf16
    from memaudit.probes.decop.scoring import (letter_probabilities, question_params, question_prompts,
                                               reference_probabilities, render_question)

    torch.set_num_threads(args.threads)
    backend = HFBackend({"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)}, dtype=args.dtype,
                        device="cpu")
    model, tok = backend.model, backend.tokenizer
    perms = orderings(args.orderings)
    params = question_params()

    def ours_way(item, batch_size, share_prefix="tree"):
        prompts = question_prompts(item, perms)
        return letter_probabilities(backend.option_logprobs(prompts, [LETTERS] * len(prompts), params=params,
                                                            batch_size=batch_size, share_prefix=share_prefix))

    def fastest(way, *way_args):
        best, result = float("inf"), None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = way(*way_args)
            best = min(best, time.perf_counter() - t0)
        return best, result

    ours_s = batch_s = base_s = 0.0
    diffs, n_prompts, n_tokens = [], 0, 0
    load_before = os.getloadavg()
    # warm-up, all three ways: the way first timed cold would carry first-use costs
    warm = demo_items(1, args.assets_dir)[0]
    ours_way(warm, len(perms))
    ours_way(warm, len(perms), "batch")
    reference_probabilities(model, tok, [render_question(tok, warm, perms[0])])
    for item in demo_items(args.n_passages, args.assets_dir):
        prompts = [render_question(tok, item, p) for p in perms]
        n_prompts += len(prompts)
        n_tokens += sum(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts)
        seconds, (ours, _) = fastest(ours_way, item, len(prompts))
        ours_s += seconds
        seconds, (flat, _) = fastest(ours_way, item, len(prompts), "batch")
        batch_s += seconds
        t0 = time.perf_counter()
        ref, _ = reference_probabilities(model, tok, prompts)
        base_s += time.perf_counter() - t0
        diffs += [float(np.abs(ours - ref).max()), float(np.abs(flat - ref).max())]
    result = {
        "name": NAME, "n_items": n_prompts, "n_passages": args.n_passages, "orderings": args.orderings,
        "prompt_tokens": n_tokens, "ours_seconds": ours_s, "batch_seconds": batch_s, "baseline_seconds": base_s,
        "speedup": base_s / ours_s, "speedup_batch": base_s / batch_s, "tree_over_batch": batch_s / ours_s,
        "max_abs_diff": max(diffs), "model": "smollm2-135m-instruct",
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "threads": args.threads, "load_average_1_5_15min": [load_before[:3], os.getloadavg()[:3]],
        "python": sys.version.split()[0], "torch": torch.__version__,
    }
    result["machine"] = machine_report(dtype=result["dtype"])
    result["meets_targets"] = {"speedup": result["speedup"] >= 4, "max_abs_diff": result["max_abs_diff"] <= 1e-4}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: {n_prompts} prompts ({n_tokens} tokens); ours (trie) {ours_s:.1f}s, one batch {batch_s:.1f}s, "
          f"baseline {base_s:.1f}s (speedup {result['speedup']:.2f}x, one batch {result['speedup_batch']:.2f}x), "
          f"max |diff| {result['max_abs_diff']:.2e} -> {args.out}")
    return result


if __name__ == "__main__":
    main()
