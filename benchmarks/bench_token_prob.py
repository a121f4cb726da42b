"""Benchmark: every token-probability method from shared passes vs. the reference implementations' way.

Three timings over the same passages, in one run:

``floor`` (``forward_seconds``)
    the bare batched, length-bucketed forward passes the methods cannot avoid:
    the demo model over the passages, again over their lowercased copies, and
    the reference model over the passages -- ``model(input_ids, attention_mask).logits``
    and nothing after it.
``ours`` (``ours_seconds``)
    :func:`memaudit.models.token_stats.compute_token_stats` for the same three
    passes (``mu``/``sigma`` only on the first), then every method of
    :mod:`memaudit.probes.token_prob.methods` scored from those statistics
    (``build_methods`` + ``score_passages``).
``baseline`` (``baseline_seconds``)
    the way the MIMIR / Min-K% / Min-K%++ reference code runs: one passage at a
    time, each method family running its own forward pass and its own
    log-softmax (loss 1, zlib 1, lowercase 2, min_k 1 for its whole k sweep,
    min_k_plus_plus 1 with its own softmax, reference 1 target + 1 reference).
    ``--baseline-way per-score`` reruns min_k and min_k_plus_plus per k, as a
    k sweep with MIMIR (k is an attack setting there) does.

Timing on a shared machine: the passages are cut into the length buckets of
``compute_token_stats`` (``batch_size`` passages of similar length), and each
bucket runs floor, ours and baseline back to back, so load from other work hits
the three alike instead of one whole phase. Floor and ours run ``--repeats``
rounds and each bucket keeps its fastest; the baseline runs once (load can only
understate the speedup). Before each bucket the script waits (``--wait-quiet``
seconds in all) for other work to leave the CPUs idle; the JSON says how long it
waited and how many buckets were timed on a busy machine anyway.

The baseline uses the definitions of :mod:`memaudit.probes.token_prob.methods` (context
token from :func:`~memaudit.models.token_stats.encode`, ``max(1, int(k*T))``
lowest tokens), so both paths must give the same scores: ``max_abs_diff`` is the
largest difference over all methods and passages.

Targets (issue): ``ours_over_floor <= 1.2``, ``speedup >= 5``, ``max_abs_diff <= 1e-4``.

Usage::

    .venv/bin/python benchmarks/bench_token_prob.py [--n-passages 120] [--out results/bench/token_prob.json]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.io import write_json
from memaudit.machine import machine_report
from memaudit.probes.token_prob.methods import ScoringContext, build_methods, score_passages
from memaudit.models.token_stats import TokenStats, compute_token_stats, encode, length_buckets

log = logging.getLogger("bench_token_prob")

NAME = "token_prob"
ROOT = Path(__file__).resolve().parents[1]
METHODS = ["loss", "zlib", "lowercase", "min_k", "min_k_plus_plus", "reference"]
K_SWEEP = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
TARGET_MODEL = "smollm2-135m"
REFERENCE_MODEL = "random-gpt2-2x128"
# The demo benchmark the script builds itself when the workflow has not written one yet.
DEMO_BENCHMARK = "novels"
DEMO_CFG = {"sources": ["austen"], "n_documents": 60, "passage_words": 100, "passages_per_document": 2,
            "min_passages": 1, "member_fraction": 0.5, "source_options": {}}
# How the reference code treats the k sweep: the Min-K% and Min-K%++ scripts score
# every k from one pass ("per-family", 8 passes per passage); in MIMIR k is an
# attack setting, so a sweep reruns the attack per k ("per-score", 20 passes).
BASELINE_WAYS = {
    "per-family": "one passage at a time; loss 1, zlib 1, lowercase 2, min_k 1 (whole k sweep), "
                  "min_k_plus_plus 1 (own softmax, whole k sweep), reference 1 target + 1 reference "
                  "forward pass",
    "per-score": "one passage at a time; loss 1, zlib 1, lowercase 2, min_k 1 per k, "
                 "min_k_plus_plus 1 per k (own softmax), reference 1 target + 1 reference forward pass",
}
TARGETS = {"ours_over_floor_max": 1.2, "speedup_min": 5.0, "max_abs_diff_max": 1e-4}
PASSES = ("original", "lowercase", "reference")


# --------------------------------------------------------------------------- inputs

def load_demo_passages(passages_path: Path, assets_dir: Path, seed: int) -> tuple[pd.DataFrame, str]:
    """The workflow's passages if it has written them, else the demo benchmark built here."""
    if passages_path.exists():
        from memaudit.probes.token_prob.runner import load_passages

        return load_passages(passages_path), str(passages_path)
    from memaudit.assets import fetch_demo_assets
    from memaudit.datasets.build import build_benchmark

    fetch_demo_assets(assets_dir)
    _, passages = build_benchmark(DEMO_BENCHMARK, DEMO_CFG, assets_dir, seed)
    frame = pd.DataFrame([{"passage_id": p.passage_id, "doc_id": p.doc_id, "label": p.label, "text": p.text}
                          for p in passages])
    return frame, f"build_benchmark({DEMO_BENCHMARK!r}, {DEMO_CFG}, {assets_dir}, seed={seed})"


def make_random_gpt2(texts: Sequence[str], out_dir: Path, *, seed: int, n_layer: int = 2, n_embd: int = 128,
                     n_head: int = 4, vocab_size: int = 4096, initializer_range: float = 0.02) -> Path:
    """A randomly initialised GPT-2 with a byte-level BPE tokenizer trained on ``texts``, saved in ``out_dir``.

    It stands in for a reference model: a different architecture and tokenizer
    from the target, as a real reference model would have.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.models.tiny import train_bpe_tokenizer

    tok = train_bpe_tokenizer(texts, vocab_size, out_dir)
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     initializer_range=initializer_range)
    GPT2LMHeadModel(cfg).save_pretrained(out_dir)
    return out_dir


def _device(model):
    return next(model.parameters()).device


def timed(fn: Callable, device) -> tuple[float, object]:
    """Wall-clock seconds of ``fn()`` (CUDA work included) and its result."""
    import torch

    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, out


# --------------------------------------------------------------------------- floor and ours

def bare_forward(model, tokenizer, texts: Sequence[str], *, batch_size: int, max_tokens: int | None) -> int:
    """The batched, length-bucketed forward passes of ``compute_token_stats`` with no post-processing.

    Tokenisation, bucketing and padding are the same as there (the same functions); the
    logits are computed and dropped. Returns the number of scored tokens.
    """
    import torch

    from memaudit.models.forward import right_padded

    encoded = [encode(tokenizer, t, max_tokens) for t in texts]
    lengths = [len(e) for e in encoded]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = _device(model)
    with torch.inference_mode():
        for batch in length_buckets(lengths, batch_size):
            ids, mask = right_padded(encoded, batch, pad)
            model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    return sum(lengths) - len(lengths)


def pass_plan(target, reference, texts: Sequence[str]) -> dict[str, tuple]:
    """``(model, tokenizer, texts, with_distribution)`` of each pass the methods cannot avoid."""
    (model, tok), (ref_model, ref_tok) = target, reference
    return {"original": (model, tok, list(texts), True),
            "lowercase": (model, tok, [t.lower() for t in texts], False),
            "reference": (ref_model, ref_tok, list(texts), False)}


def buckets_of(tokenizer, texts: Sequence[str], *, batch_size: int, max_tokens: int | None) -> list[list[int]]:
    """The batches ``compute_token_stats`` forms over ``texts`` (indices, longest first)."""
    return length_buckets([len(encode(tokenizer, t, max_tokens)) for t in texts], batch_size)


def merge_stats(n: int, parts: Sequence[tuple[Sequence[int], TokenStats]]) -> TokenStats:
    """One TokenStats over ``n`` passages from per-bucket TokenStats (``indices`` -> passages)."""
    per = [None] * n
    for indices, ts in parts:
        for j, i in enumerate(indices):
            per[i] = ts.passage(j)
    if any(p is None for p in per):
        raise ValueError("buckets do not cover every passage")
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p[0]) for p in per])
    return TokenStats(offsets, *(np.concatenate([p[k] for p in per]) for k in range(3)))


def score_all(passages: pd.DataFrame, stats: dict[str, TokenStats], ks: Sequence[float]) -> dict[str, np.ndarray]:
    """Every method from the three passes' statistics, through ``build_methods`` + ``score_passages``."""
    ctx = ScoringContext(passages["text"].tolist(), stats["original"], lowercase=stats["lowercase"],
                         references={REFERENCE_MODEL: stats["reference"]})
    methods = build_methods(METHODS, ks, [REFERENCE_MODEL], TARGET_MODEL)
    table = score_passages(ctx, methods, passages)
    return {m: g["score"].to_numpy(np.float64) for m, g in table.groupby("method", sort=False)}


def machine_busy_fraction(interval: float = 0.5) -> float:
    """Share of all CPUs busy over ``interval`` seconds (Linux ``/proc/stat``; 0 where unavailable)."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle
    try:
        total0, idle0 = read()
        time.sleep(interval)
        total1, idle1 = read()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


class QuietGate:
    """Before each timed bucket, wait (up to ``budget_s`` in all) until other work leaves the CPUs idle.

    On a shared machine another job taking one of two cores slows a two-thread
    forward pass several-fold; timing only when the machine is quiet keeps the
    ratios meaningful. Buckets timed while busy (budget spent) are counted.
    """

    def __init__(self, budget_s: float, threshold: float = 0.15, progress: Callable[[str], None] | None = None):
        self.budget_s, self.threshold, self.progress = budget_s, threshold, progress
        self.waited_s, self.busy_buckets = 0.0, 0

    def wait(self) -> None:
        busy = machine_busy_fraction()
        while busy > self.threshold and self.waited_s < self.budget_s:
            if self.progress and self.waited_s == 0:
                self.progress(f"machine {busy:.0%} busy with other work; waiting for it to go quiet")
            time.sleep(5)
            self.waited_s += 5 + 0.5
            busy = machine_busy_fraction()
        if busy > self.threshold:
            self.busy_buckets += 1


def measure(target, reference, passages: pd.DataFrame, *, ks: Sequence[float], batch_size: int,
            max_tokens: int | None, repeats: int = 1, baseline_way: str | None = "per-family",
            quiet: QuietGate | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Floor, ours and baseline over ``passages``, bucket by bucket (see the module docstring).

    Ours for a bucket is ``compute_token_stats`` on that bucket's texts for each
    of the three passes -- exactly the batch it forms over all passages, since a
    bucket is one of its length buckets -- and the bucket's floor is the bare
    forward of the same batches. Returns the scores of both ways and the
    seconds: per round and bucket, and the sums of each bucket's fastest round.
    """
    texts = passages["text"].tolist()
    dev = _device(target[0])
    buckets = buckets_of(target[1], texts, batch_size=batch_size, max_tokens=max_tokens)
    floor_s = np.zeros((repeats, len(buckets), len(PASSES)))
    ours_s = np.zeros((repeats, len(buckets), len(PASSES)))
    baseline_s = np.zeros(len(buckets))
    parts: dict[str, list] = {p: [] for p in PASSES}
    baseline_parts, n_forward = [], 0
    for r in range(repeats):
        for b, bucket in enumerate(buckets):
            if quiet is not None:
                quiet.wait()
            plan = pass_plan(target, reference, [texts[i] for i in bucket])
            for p, name in enumerate(PASSES):
                model, tok, pass_texts, with_distribution = plan[name]
                floor_s[r, b, p], _ = timed(lambda: bare_forward(
                    model, tok, pass_texts, batch_size=batch_size, max_tokens=max_tokens), dev)
                ours_s[r, b, p], ts = timed(lambda: compute_token_stats(
                    model, tok, pass_texts, batch_size=batch_size, max_tokens=max_tokens,
                    with_distribution=with_distribution), dev)
                if r == 0:
                    parts[name].append((bucket, ts))
            if r == 0 and baseline_way:
                scorer = ReferenceWayScorer(target, reference, max_tokens=max_tokens, way=baseline_way)
                baseline_s[b], scores = timed(lambda: scorer.score(plan["original"][2], ks), dev)
                baseline_parts.append((bucket, scores))
                n_forward += scorer.forward_passes
            if progress and (b % 5 == 0 or b == len(buckets) - 1):
                progress(f"round {r + 1}/{repeats}, bucket {b + 1}/{len(buckets)}")
    stats = {name: merge_stats(len(texts), parts[name]) for name in PASSES}
    scoring_s, ours = timed(lambda: score_all(passages, stats, ks), dev)
    out = {"ours_scores": ours, "n_buckets": len(buckets),
           "floor_by_pass": dict(zip(PASSES, floor_s.min(axis=0).sum(axis=0))),
           "ours_by_stage": dict(zip(PASSES, ours_s.min(axis=0).sum(axis=0)), scoring=scoring_s),
           "floor_rounds": floor_s.sum(axis=1).tolist(), "ours_rounds": ours_s.sum(axis=1).tolist()}
    out["forward_seconds"] = float(sum(out["floor_by_pass"].values()))
    out["ours_seconds"] = float(sum(out["ours_by_stage"].values()))
    if baseline_way:
        baseline = {}
        for name in baseline_parts[0][1]:
            baseline[name] = np.full(len(texts), np.nan)
            for bucket, scores in baseline_parts:
                baseline[name][bucket] = scores[name]
        out.update(baseline_scores=baseline, baseline_seconds=float(baseline_s.sum()),
                   baseline_forward_passes=n_forward)
    return out


def ours_scores(target, reference, passages: pd.DataFrame, *, ks: Sequence[float], batch_size: int,
                max_tokens: int | None) -> dict[str, np.ndarray]:
    """The package path alone, over all passages at once (as the workflow runs it): scores per method."""
    texts = passages["text"].tolist()
    stats = {name: compute_token_stats(model, tok, pass_texts, batch_size=batch_size, max_tokens=max_tokens,
                                       with_distribution=with_distribution)
             for name, (model, tok, pass_texts, with_distribution)
             in pass_plan(target, reference, texts).items()}
    return score_all(passages, stats, ks)


# --------------------------------------------------------------------------- baseline

class ReferenceWayScorer:
    """Per-passage scoring as the reference implementations do it: every method runs its own forward pass.

    Straightforward per-text code (``model(input_ids).logits``, ``log_softmax``,
    ``gather``), mirroring MIMIR's attacks and the Min-K% / Min-K%++ scripts,
    with the definitions of :mod:`memaudit.probes.token_prob.methods`.
    """

    def __init__(self, target, reference, *, max_tokens: int | None, way: str = "per-family"):
        if way not in BASELINE_WAYS:
            raise ValueError(f"baseline way {way!r}: one of {', '.join(BASELINE_WAYS)}")
        self.model, self.tok = target
        self.ref_model, self.ref_tok = reference
        self.max_tokens = max_tokens
        self.way = way
        self.forward_passes = 0

    def _logits(self, model, ids: list[int]):
        """Logits at positions 0..T-1, predicting text tokens 1..T (one forward pass)."""
        import torch

        self.forward_passes += 1
        input_ids = torch.tensor([ids], device=_device(model))
        return model(input_ids=input_ids).logits[0, :-1].float()

    def _token_logprobs(self, model, tokenizer, text: str):
        import torch

        ids = encode(tokenizer, text, self.max_tokens)
        logp = torch.log_softmax(self._logits(model, ids), dim=-1)
        target = torch.tensor(ids[1:], device=logp.device).unsqueeze(-1)
        return logp.gather(-1, target).squeeze(-1)

    def _nll(self, model, tokenizer, text: str) -> float:
        """Mean negative log-likelihood of ``text`` (nats per token)."""
        return -float(self._token_logprobs(model, tokenizer, text).double().mean())

    @staticmethod
    def _k_lowest_mean(values: np.ndarray, k: float) -> float:
        n = max(1, int(len(values) * k))
        return float(np.sort(values.astype(np.float64))[:n].mean())

    def loss(self, text: str) -> float:
        return -self._nll(self.model, self.tok, text)

    def zlib(self, text: str) -> float:
        return -self._nll(self.model, self.tok, text) / len(zlib.compress(text.encode("utf-8")))

    def lowercase(self, text: str) -> float:
        return self._nll(self.model, self.tok, text.lower()) / self._nll(self.model, self.tok, text)

    def min_k(self, text: str, ks: Sequence[float]) -> list[float]:
        lp = self._token_logprobs(self.model, self.tok, text).cpu().numpy()
        return [self._k_lowest_mean(lp, k) for k in ks]

    def min_k_plus_plus(self, text: str, ks: Sequence[float]) -> list[float]:
        import torch

        ids = encode(self.tok, text, self.max_tokens)
        logits = self._logits(self.model, ids)
        probs = torch.softmax(logits, dim=-1)
        log_probs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(ids[1:], device=logits.device).unsqueeze(-1)
        token_log_probs = log_probs.gather(-1, target).squeeze(-1)
        mu = (probs * log_probs).sum(-1)
        sigma = ((probs * log_probs.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
        z = ((token_log_probs.double() - mu.double()) / sigma.double().clamp_min(1e-12)).cpu().numpy()
        return [self._k_lowest_mean(z, k) for k in ks]

    def reference(self, text: str) -> float:
        return self._nll(self.ref_model, self.ref_tok, text) - self._nll(self.model, self.tok, text)

    def score(self, texts: Sequence[str], ks: Sequence[float]) -> dict[str, np.ndarray]:
        """Scores per method, named as :func:`~memaudit.probes.token_prob.build_methods` names them."""
        import torch

        names = [m.name for m in build_methods(METHODS, ks, [REFERENCE_MODEL], TARGET_MODEL)]
        rows: dict[str, list[float]] = {n: [] for n in names}
        min_k_names = [n for n in names if n.startswith("min_k_") and not n.startswith("min_k_plus_plus_")]
        mkpp_names = [n for n in names if n.startswith("min_k_plus_plus_")]
        with torch.inference_mode():
            for text in texts:
                rows["loss"].append(self.loss(text))
                rows["zlib"].append(self.zlib(text))
                rows["lowercase"].append(self.lowercase(text))
                if self.way == "per-family":  # the Min-K% / Min-K%++ scripts: one pass, every k
                    min_k = self.min_k(text, ks)
                    mkpp = self.min_k_plus_plus(text, ks)
                else:  # MIMIR: k is an attack setting, each k a run of its own
                    min_k = [self.min_k(text, [k])[0] for k in ks]
                    mkpp = [self.min_k_plus_plus(text, [k])[0] for k in ks]
                for n, v in zip(min_k_names, min_k):
                    rows[n].append(v)
                for n, v in zip(mkpp_names, mkpp):
                    rows[n].append(v)
                rows[f"ref_{REFERENCE_MODEL}"].append(self.reference(text))
        return {n: np.asarray(v, dtype=np.float64) for n, v in rows.items()}


def baseline_scores(target, reference, texts: Sequence[str], *, ks: Sequence[float], max_tokens: int | None,
                    way: str = "per-family") -> tuple[dict[str, np.ndarray], int]:
    """Scores of the reference way and the number of forward passes it ran."""
    scorer = ReferenceWayScorer(target, reference, max_tokens=max_tokens, way=way)
    scores = scorer.score(texts, ks)
    return scores, scorer.forward_passes


def max_abs_diffs(ours: dict[str, np.ndarray], baseline: dict[str, np.ndarray]) -> dict[str, float]:
    """Largest |ours - baseline| per method; a method missing on one side or a NaN mismatch counts as inf."""
    out = {}
    for name in sorted(set(ours) | set(baseline)):
        a, b = ours.get(name), baseline.get(name)
        if a is None or b is None or a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
            out[name] = float("inf")
            continue
        both = ~np.isnan(a)
        out[name] = float(np.max(np.abs(a[both] - b[both]), initial=0.0))
    return out


# --------------------------------------------------------------------------- main

def warm_up(target, reference, texts: Sequence[str], *, batch_size: int, max_tokens: int | None) -> None:
    """One small batch per model, so one-off costs (allocator, kernels) fall outside the timings."""
    for model, tok in (target, reference):
        bare_forward(model, tok, list(texts[:batch_size]), batch_size=batch_size, max_tokens=max_tokens)


def run(args) -> dict:
    import torch

    from memaudit.models.loading import count_parameters, load_causal_lm, resolve_device
    from memaudit.models.builtin import ensure_builtin

    torch.set_num_threads(args.threads or os.cpu_count())
    device = resolve_device(args.device)
    passages, passages_source = load_demo_passages(args.passages, args.assets_dir, args.seed)
    passages = passages.sort_values("passage_id", kind="stable").reset_index(drop=True)
    if args.n_passages is not None:
        passages = passages.head(args.n_passages).reset_index(drop=True)
    texts = passages["text"].tolist()
    log.info("%d passages from %s", len(texts), passages_source)

    model_dir = ensure_builtin("smollm2-135m-instruct", args.cache_dir)
    target = load_causal_lm({"path": str(model_dir)}, device=device)
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as tmp:
        make_random_gpt2(texts, Path(tmp), seed=args.seed)
        reference = load_causal_lm({"path": tmp}, device=device)

    kw = {"batch_size": args.batch_size, "max_tokens": args.max_tokens}
    warm_up(target, reference, texts, **kw)
    # Other work on the machine inflates every timing; the load average shows it.
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    quiet = QuietGate(args.wait_quiet, progress=log.info)
    m = measure(target, reference, passages, ks=args.ks, repeats=args.repeats, baseline_way=args.baseline_way,
                quiet=quiet, progress=log.info, **kw)
    load_after = os.getloadavg()
    log.info("measured in %.0fs", time.perf_counter() - t0)

    ours, baseline = m["ours_scores"], m["baseline_scores"]
    diffs = max_abs_diffs(ours, baseline)
    max_diff = max(diffs.values())
    ours_s, floor_s, base_s = m["ours_seconds"], m["forward_seconds"], m["baseline_seconds"]
    n = len(texts)
    return {
        "name": NAME,
        "n_items": n,
        "items": "passages; floor, ours and baseline are all timed on these same passages",
        "ours_seconds": ours_s,
        "baseline_seconds": base_s,
        "forward_seconds": floor_s,
        "speedup": base_s / ours_s,
        "ours_over_floor": ours_s / floor_s,
        # The speedup if everything after the forward passes were free: the ceiling of `speedup`.
        "baseline_over_floor": base_s / floor_s,
        "max_abs_diff": max_diff,
        "max_abs_diff_by_method": diffs,
        "worst_method": max(diffs, key=diffs.get),
        "seconds_per_item": {"ours": ours_s / n, "baseline": base_s / n, "floor": floor_s / n},
        "ours_seconds_by_stage": m["ours_by_stage"],
        "forward_seconds_by_pass": m["floor_by_pass"],
        "ours_over_floor_by_pass": {k: m["ours_by_stage"][k] / v for k, v in m["floor_by_pass"].items()},
        "rounds_seconds_by_pass": {"ours": m["ours_rounds"], "floor": m["floor_rounds"], "passes": list(PASSES)},
        "repeats": args.repeats,
        "n_buckets": m["n_buckets"],
        "timing_rule": ("per length bucket of batch_size passages: floor, ours, baseline back to back; "
                        "floor and ours keep each bucket's fastest of --repeats rounds, the baseline runs once; "
                        "scoring (build_methods + score_passages over all passages) is timed once"),
        "baseline_way": args.baseline_way,
        "baseline_way_description": BASELINE_WAYS[args.baseline_way],
        "baseline_forward_passes": m["baseline_forward_passes"],
        "ours_forward_passes": 3,
        "n_methods": len(ours),
        "methods": sorted(ours),
        "k_sweep": list(args.ks),
        "n_tokens_target": int(sum(len(encode(target[1], t, args.max_tokens)) - 1 for t in texts)),
        "target_model": {"name": TARGET_MODEL, "path": str(model_dir), "n_params": count_parameters(target[0])},
        "reference_model": {"name": REFERENCE_MODEL, "n_params": count_parameters(reference[0]),
                            "what": "random-initialised GPT-2 (2 layers, n_embd 128) with a BPE tokenizer "
                                    "trained on the passages"},
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "passages_source": passages_source,
        "targets": TARGETS,
        "meets_targets": {
            "ours_over_floor": ours_s / floor_s <= TARGETS["ours_over_floor_max"],
            "speedup": base_s / ours_s >= TARGETS["speedup_min"],
            "max_abs_diff": max_diff <= TARGETS["max_abs_diff_max"],
        },
        "machine": machine_report(dtype=str(next(target[0].parameters()).dtype).removeprefix("torch."),
                                  device=device),
        "load_average_1_5_15min": {"before": load_before, "after": load_after},
        "waited_for_quiet_seconds": quiet.waited_s,
        # Buckets timed while other work kept the CPUs busy (--wait-quiet spent): their timings are inflated.
        "buckets_timed_while_busy": quiet.busy_buckets,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def parse_args(argv: Sequence[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-passages", type=int, default=None,
                   help="score only the first N passages (by passage_id); default: all")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / f"{NAME}.json")
    p.add_argument("--passages", type=Path,
                   default=ROOT / "results" / "datasets" / DEMO_BENCHMARK / "passages.jsonl",
                   help="passages JSONL (built from the demo assets if missing)")
    p.add_argument("--assets-dir", type=Path, default=ROOT / "resources" / "demo")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "resources" / "cache")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--ks", type=float, nargs="+", default=K_SWEEP)
    p.add_argument("--repeats", type=int, default=2, help="rounds of floor and ours (fastest kept per bucket)")
    p.add_argument("--baseline-way", choices=sorted(BASELINE_WAYS), default="per-family",
                   help="per-family: one pass per method family (8 per passage); "
                        "per-score: one per method and k (20 per passage)")
    p.add_argument("--wait-quiet", type=float, default=600,
                   help="seconds in all the run may wait for other work to leave the CPUs before a bucket")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all CPUs)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)
    result = run(args)
    write_json(args.out, result)
    print(f"{NAME}: {result['n_items']} passages; ours {result['ours_seconds']:.1f}s, "
          f"floor {result['forward_seconds']:.1f}s (ours/floor {result['ours_over_floor']:.3f}), "
          f"baseline {result['baseline_seconds']:.1f}s (speedup {result['speedup']:.2f}x), "
          f"max |diff| {result['max_abs_diff']:.2e} ({result['worst_method']}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
