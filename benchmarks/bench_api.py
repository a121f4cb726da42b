"""Benchmark: black-box API requests with the configured concurrency vs one at a time, and a cached rerun.

N option-score requests (DE-COP's use: one greedy token with the top-20
log-probabilities, the four option letters read from them) against the loopback
server of :mod:`memaudit.backends.server` with a fixed per-request latency,
through the real ``openai`` SDK client:

``ours`` (``ours_seconds``)
    :meth:`memaudit.backends.openai_backend.OpenAIBackend.option_scores` with
    ``--concurrency`` requests in flight and an empty cache (every request sent,
    every response committed to the SQLite cache as it arrives);
``baseline`` (``baseline_seconds``)
    the plain SDK, one request at a time, the same request bodies, option scores
    computed from each response by the same definition written out here;
``ours_sequential``
    the backend with concurrency 1: the cost of cache, ledger and parsing over the plain SDK;
``cached``
    a new backend on the same cache asking again: requests reaching the server
    (``cached_requests``, target 0) and milliseconds per cached request (target < 1),
    timed from building the backend (SDK client, cache connection) to the last answer.

``max_abs_diff`` is the largest difference between ours and the baseline's option
log-probabilities (a letter missing from the top list is ``nan`` in both, and
counts as equal); both read the same JSON, so only floating-point rounding may
differ (target: at most 1e-12).

Targets (issue): ``speedup`` close to the concurrency (here: at least 80% of it),
zero requests and under 1 ms per request on the cached rerun.

Usage::

    .venv/bin/python benchmarks/bench_api.py [--n-requests 96] [--latency 0.1] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from memaudit.backends.base import GenerationParams
from memaudit.backends.openai_backend import OpenAIBackend
from memaudit.backends.scripted import ScriptedResponder
from memaudit.backends.server import ChatServer
from memaudit.backends.settings import Pricing
from memaudit.io import write_json
from memaudit.machine import machine_report

log = logging.getLogger("bench_api")

NAME = "api"
ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ("A", "B", "C", "D")
# max_abs_diff: both sides read the same JSON numbers; only the order of floating-point
# operations in the log-sum-exp over "X" and " X" differs.
TARGETS = {"speedup_min_fraction_of_concurrency": 0.8, "cached_requests_max": 0, "cached_ms_per_request_max": 1.0,
           "max_abs_diff_max": 1e-12}


def prompts_for(n: int) -> list[str]:
    return [f"Passage {i}: which of the options A, B, C or D is the verbatim excerpt? Answer with the letter."
            for i in range(n)]


def baseline_scores(base_url: str, prompts: Sequence[str], top_logprobs: int) -> list[dict[str, float]]:
    """One request at a time through the plain SDK; option scores by logsumexp over "X" and " X"."""
    import openai

    client = openai.OpenAI(api_key="none", base_url=base_url, max_retries=0, timeout=60)
    rows = []
    for prompt in prompts:
        resp = client.chat.completions.create(model="bench", messages=[{"role": "user", "content": prompt}],
                                              max_tokens=1, temperature=0.0, seed=0, logprobs=True,
                                              top_logprobs=top_logprobs)
        top = resp.choices[0].logprobs.content[0].top_logprobs
        row = {}
        for opt in OPTIONS:
            vals = [t.logprob for t in top if t.token in (opt, " " + opt)]
            row[opt] = math.log(sum(math.exp(v) for v in vals)) if vals else math.nan
        rows.append(row)
    return rows


def max_abs_diff(ours: Sequence[dict[str, float]], baseline: Sequence[dict[str, float]]) -> float:
    worst = 0.0
    for a, b in zip(ours, baseline, strict=True):
        for opt in OPTIONS:
            x, y = a[opt], b[opt]
            if math.isnan(x) and math.isnan(y):
                continue
            worst = max(worst, abs(x - y) if not (math.isnan(x) or math.isnan(y)) else math.inf)
    return worst


def backend(server: ChatServer, cache: Path, concurrency: int) -> OpenAIBackend:
    return OpenAIBackend("bench", base_url=server.openai_base_url, cache=cache, concurrency=concurrency,
                         pricing=Pricing(0.0, 0.0), rule="bench_api")


def run(args) -> dict:
    prompts = prompts_for(args.n_requests)
    params = GenerationParams()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, \
            ChatServer(ScriptedResponder(), latency=args.latency, model_name="bench") as server:
        tmp = Path(tmp)
        # Warm-up: imports, the first connection, the SQLite file; outside every timing.
        backend(server, tmp / "warm.sqlite", 1).option_scores(["warm-up"], [OPTIONS], params=params)
        server.reset()

        t0 = time.perf_counter()
        b = backend(server, tmp / "ours.sqlite", args.concurrency)
        ours = b.option_logprobs(prompts, [OPTIONS] * len(prompts), params=params)
        ours_seconds = time.perf_counter() - t0
        ours_requests, max_in_flight = server.count(), server.max_in_flight
        b.close()
        log.info("ours (concurrency %d): %.2fs, %d requests, %d in flight at most", args.concurrency,
                 ours_seconds, ours_requests, max_in_flight)

        server.reset()
        t0 = time.perf_counter()
        base = baseline_scores(server.openai_base_url, prompts, b.top_logprobs)
        baseline_seconds = time.perf_counter() - t0
        baseline_requests = server.count()
        log.info("baseline (plain SDK, one at a time): %.2fs, %d requests", baseline_seconds, baseline_requests)

        server.reset()
        t0 = time.perf_counter()
        seq = backend(server, tmp / "sequential.sqlite", 1)
        seq.option_logprobs(prompts, [OPTIONS] * len(prompts), params=params)
        sequential_seconds = time.perf_counter() - t0
        seq.close()
        log.info("ours with concurrency 1: %.2fs", sequential_seconds)

        server.reset()
        t0 = time.perf_counter()
        again = backend(server, tmp / "ours.sqlite", args.concurrency)
        cached = again.option_scores(prompts, [OPTIONS] * len(prompts), params=params)
        cached_seconds = time.perf_counter() - t0
        cached_requests = server.count()
        n_from_cache = sum(s.from_cache for s in cached)
        again.close()
        log.info("cached rerun: %.4fs, %d requests, %d from cache", cached_seconds, cached_requests, n_from_cache)
    load_after = os.getloadavg()

    diff = max(max_abs_diff(ours, base), max_abs_diff([s.logprobs for s in cached], base))
    n = len(prompts)
    n_missing = sum(math.isnan(v) for row in ours for v in row.values())
    speedup = baseline_seconds / ours_seconds
    cached_ms = cached_seconds / n * 1000
    return {
        "name": NAME,
        "n_items": n,
        "items": "option-score requests (1 token, top-20 log-probabilities, options A-D)",
        "ours_seconds": ours_seconds,
        "baseline_seconds": baseline_seconds,
        "speedup": speedup,
        "max_abs_diff": diff,
        "concurrency": args.concurrency,
        "latency_seconds": args.latency,
        "ideal_seconds": math.ceil(n / args.concurrency) * args.latency,
        "speedup_over_concurrency": speedup / args.concurrency,
        "ours_sequential_seconds": sequential_seconds,
        "ours_sequential_over_baseline": sequential_seconds / baseline_seconds,
        "cached_seconds": cached_seconds,
        "cached_ms_per_request": cached_ms,
        "cached_requests": cached_requests,
        "cached_from_cache": n_from_cache,
        "server_requests": {"ours": ours_requests, "baseline": baseline_requests, "cached": cached_requests},
        "max_in_flight": max_in_flight,
        "options_missing_from_top_list": n_missing,
        "targets": TARGETS,
        "meets_targets": {
            "speedup": speedup >= TARGETS["speedup_min_fraction_of_concurrency"] * args.concurrency,
            "cached_requests": cached_requests <= TARGETS["cached_requests_max"],
            "cached_ms_per_request": cached_ms < TARGETS["cached_ms_per_request_max"],
            "max_abs_diff": diff <= TARGETS["max_abs_diff_max"],
        },
        "machine": machine_report(dtype=None),
        "load_average_1_5_15min": {"before": load_before, "after": load_after},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def parse_args(argv: Sequence[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-requests", type=int, default=96)
    p.add_argument("--latency", type=float, default=0.1, help="seconds the server adds to every answer")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("memaudit.backends.api").setLevel(logging.WARNING)
    args = parse_args(argv)
    result = run(args)
    write_json(args.out, result)
    print(f"{NAME}: {result['n_items']} requests, {args.latency:g}s latency; ours {result['ours_seconds']:.2f}s "
          f"at concurrency {args.concurrency}, baseline {result['baseline_seconds']:.2f}s one at a time "
          f"(speedup {result['speedup']:.2f}x); cached rerun {result['cached_requests']} requests, "
          f"{result['cached_ms_per_request']:.3f} ms each; max |diff| {result['max_abs_diff']:.1e} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
