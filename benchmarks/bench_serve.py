"""Benchmark: ``memaudit serve`` answering concurrent greedy requests together, against one at a time.

N chat requests of the probes' kind (greedy, no log-probabilities: a cloze question, a passage to
continue) to SmolLM2-135M-Instruct behind :class:`memaudit.backends.server.ChatServer`, through the
real ``openai`` SDK client (:class:`memaudit.backends.openai_backend.OpenAIBackend`, no cache):

``ours`` (``ours_seconds``)
    the client sends ``--concurrency`` requests at once (the probes' default is 4 per job, and two
    jobs may share a server); the server decodes the requests waiting at once together
    (:class:`memaudit.backends.server.HFResponder`, continuous batching);
``baseline`` (``baseline_seconds``)
    the same server and requests, the client sending one at a time: each request decoded alone,
    which is what the server did with concurrent requests before it batched them (one generation
    at a time behind a lock).

``same_text_fraction`` is the share of requests whose answer is the same text both ways (batched
decoding pads the prompts, and float32 rounding may pick the other token at a near tie; the
target allows one request in eight to differ). ``batches`` lists the size of each batched decoding.

Targets: ``speedup`` at least 2 at concurrency 8 on a CPU (measured on 2 cores: 2.3x at 8, 1.7x at
4, 3.1x at 16), and ``same_text_fraction`` at least 0.875 (measured: 1.0).

Usage::

    .venv/bin/python benchmarks/bench_serve.py [--n-requests 32] [--concurrency 8] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from memaudit.backends.base import GenerationParams
from memaudit.backends.openai_backend import OpenAIBackend
from memaudit.backends.server import ChatServer, HFResponder
from memaudit.backends.settings import Pricing
from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "serve"
ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"speedup_min": 2.0, "same_text_fraction_min": 0.875}


def prompts_for(n: int, assets_dir: Path) -> list[str]:
    """Cloze questions and continuation requests over the demo's news passages (alternating)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grad_norms import demo_passages

    out = []
    for i, passage in enumerate(demo_passages(n, 60, assets_dir)):
        words = passage.split()
        if i % 2:
            out.append("Please complete the following text with more than 150 words: " + " ".join(words[:40]))
        else:
            k = len(words) // 2
            masked = " ".join(words[:k] + ["[MASK]"] + words[k + 1:])
            out.append("What is the word that fills in the [MASK] token in the following passage? Answer with "
                       f"<word>the word</word>.\n\n{masked}")
    return out


def answer_all(server: ChatServer, prompts: Sequence[str], params: GenerationParams, concurrency: int):
    api = OpenAIBackend("bench", base_url=server.openai_base_url, cache=None, concurrency=concurrency,
                        pricing=Pricing(0.0, 0.0), rule="bench_serve", timeout=600)
    t0 = time.perf_counter()
    out = api.generate(list(prompts), params)
    seconds = time.perf_counter() - t0
    api.close()
    return out, seconds


def run(args) -> dict:
    import torch

    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import load_model

    torch.set_num_threads(args.threads)
    spec = {"builtin": "smollm2-135m-instruct", "cache_dir": str(args.cache_dir)}
    model, tok = load_model(spec, dtype="float32", device="cpu")
    hf = HFBackend(spec, model=model, tokenizer=tok)
    prompts = prompts_for(args.n_requests, args.assets_dir)
    params = GenerationParams(max_new_tokens=args.new_tokens)
    load_before = os.getloadavg()
    responder = HFResponder(hf, max_rows=args.max_rows)
    with ChatServer(responder, model_name="bench") as server:
        answer_all(server, prompts[:2], params, 2)  # warm-up: imports, first connection, first decode
        responder.batches.clear()
        ours, ours_seconds = answer_all(server, prompts, params, args.concurrency)
        batches = list(responder.batches)
        base, baseline_seconds = answer_all(server, prompts, params, 1)
        baseline_batches = len(responder.batches) - len(batches)
    load_after = os.getloadavg()
    same = sum(a.text == b.text for a, b in zip(ours, base, strict=True)) / len(prompts)
    tokens = sum(g.output_tokens for g in ours)
    speedup = baseline_seconds / ours_seconds
    return {
        "name": NAME,
        "n_items": len(prompts),
        "items": f"greedy chat requests, at most {args.new_tokens} new tokens (cloze questions, continuations)",
        "model": "smollm2-135m-instruct (float32, CPU)",
        "ours_seconds": ours_seconds,
        "baseline_seconds": baseline_seconds,
        "speedup": speedup,
        "ours_tokens_per_second": tokens / ours_seconds,
        "baseline_tokens_per_second": sum(g.output_tokens for g in base) / baseline_seconds,
        "same_text_fraction": same,
        "concurrency": args.concurrency,
        "max_rows": args.max_rows,
        "batches": batches,
        "baseline_batches": baseline_batches,
        "errors": sum(g.status == "error" for g in ours) + sum(g.status == "error" for g in base),
        "targets": TARGETS,
        "meets_targets": {"speedup": speedup >= TARGETS["speedup_min"],
                          "same_text_fraction": same >= TARGETS["same_text_fraction_min"]},
        "machine": machine_report(dtype="float32"),
        "load_average_1_5_15min": {"before": load_before, "after": load_after},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def parse_args(argv: Sequence[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--max-rows", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the server's CPU threads")
    p.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    result = run(args)
    write_json(args.out, result)
    print(f"{NAME}: {result['n_items']} requests; concurrency {args.concurrency}, batched {result['ours_seconds']:.1f}s "
          f"({result['ours_tokens_per_second']:.0f} tokens/s), one at a time {result['baseline_seconds']:.1f}s "
          f"(speedup {result['speedup']:.2f}x); same text {result['same_text_fraction']:.3f}; "
          f"batches {result['batches']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
