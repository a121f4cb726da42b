"""A benchmark times each way warm: the first call of every way it compares (first-use allocations,
kernel choices, lazy set-up) runs before the clock, or the way timed cold first looks slower.

Each way's first call is made to cost an extra ``COLD`` seconds of the benchmarks' clock
(``time.perf_counter``, advanced during that call, not slept); none of that may reach a timing."""

from __future__ import annotations

import time
from pathlib import Path
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
# far above any warm call of the tiny model's (milliseconds). Slept (0.75 s) until session 76, a warm call taking
# 1.6 s on a busy machine read as a leaked cold one; advanced on the clock the benchmarks read, it costs no time
# and no load on the machine can reach it.
COLD = 1000.0
TEXTS = ["It is a truth universally acknowledged, that a single man in possession of a good fortune must be "
         "in want of a wife.",
         "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed "
         "to unite some of the best blessings of existence."]


def script(name: str):
    return load_benchmark(f"bench_{name}")


def _virtual_clock(monkeypatch) -> list[float]:
    """``time.perf_counter`` (the benchmarks' clock) plus an offset the test may advance; the offset (a list of one
    float), shared by the calls of one test."""
    offset = getattr(time.perf_counter, "offset", None)
    if offset is None:
        offset, real = [0.0], time.perf_counter

        def clock() -> float:
            return real() + offset[0]

        clock.offset = offset
        monkeypatch.setattr(time, "perf_counter", clock)
    return offset


def cold_first(monkeypatch, module, name: str) -> list:
    """``module.name`` with its first call ``COLD`` seconds slower on the benchmarks' clock; returns the list of
    its calls."""
    fn, calls, offset = getattr(module, name), [], _virtual_clock(monkeypatch)

    def wrapped(*args, **kwargs):
        calls.append(name)
        if len(calls) == 1:
            offset[0] += COLD  # within the call: a timing around it would take it in
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def test_grad_norms_times_both_ways_warm(tiny_model, monkeypatch):
    import memaudit.models.grad_norms as grad_norms

    ours = cold_first(monkeypatch, grad_norms, "per_sample_grad_norms")
    loop = cold_first(monkeypatch, grad_norms, "per_sample_grad_norms_loop")
    model, tok = tiny_model
    got = script("grad_norms").measure(model, tok, TEXTS, "all", batch_size=2, repeats=1, max_tokens=64)
    assert (len(ours), len(loop)) == (2, 2)  # a warm-up and the one bucket each
    assert got["ours_seconds"] < COLD and got["baseline_seconds"] < COLD, got


def test_window_word_logprobs_times_all_three_ways_warm(tiny_model, monkeypatch):
    import memaudit.models.window_word_logprobs as window
    import memaudit.models.word_logprobs as word

    from memaudit.probes.cloze.candidates import context_bounds

    calls = [cold_first(monkeypatch, window, "compute_window_word_logprobs"),
             cold_first(monkeypatch, window, "window_word_logprobs_loop"),
             cold_first(monkeypatch, word, "compute_word_logprobs")]
    spans = [[(t.index(w), t.index(w) + len(w))] for t, w in zip(TEXTS, ("fortune", "disposition"))]
    bounds = [[context_bounds(t, s, e, 60) for s, e in sp] for t, sp in zip(TEXTS, spans)]
    model, tok = tiny_model
    got = script("window_word_logprobs").measure(model, tok, TEXTS, spans, bounds, fills=2, batch_size=2)
    assert [len(c) for c in calls] == [3, 3, 3]  # a warm-up and one call per text each
    assert max(got["ours_seconds"], got["baseline_seconds"], got["causal_seconds"]) < COLD, got

