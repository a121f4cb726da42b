"""Benchmark: DE-COP paraphrasing with the local model, ours vs. ``generate()``.

``ours`` (``ours_seconds``)
    :meth:`memaudit.probes.decop.paraphrase.LocalParaphraser.candidates`: one prefill per passage shared
    by its three samples, and each sample leaves the batch at its end token or once it is as
    long as the passage at a sentence end (:mod:`memaudit.models.sampling`).
``ours_concat_cache_seconds``
    the same sampler with transformers' ``DynamicCache``, which copies the whole key/value cache
    (``torch.cat``) at every decoding step, where ours writes the step's column into spare room
    (:func:`memaudit.models.sampling._growing_cache`); ``cache_speedup`` is the ratio and
    ``same_samples_both_caches`` checks that both ways sample the same paraphrases.
``baseline`` (``baseline_seconds``)
    ``model.generate(do_sample=True, top_k=50)`` over the same requests (three copies of each
    prompt, left padded, the same token limit, the same number of rows per batch), which runs
    every row of a batch until the longest one ends; its texts are trimmed the same way afterwards.

``ours_min_length_seconds``
    ours with ``probes.decop.paraphrase.min_length`` 0.9 (no end, nor a line break in a one-paragraph
    passage, before 0.9 of the passage's tokens): reported beside ours, with each way's median
    ``length_ratio_*`` (candidate words over passage words) and ``verbatim_longest_*`` (the share
    of passages whose verbatim text has more words than every candidate: DE-COP's length cue;
    chance is about 1/4). No target: the docs weigh it (docs/probes/decop.md).

Both sample at temperature 0.7 from SmolLM2-135M-Instruct (``dtype: auto``, one thread, as in the
workflow) over 64-token Austen passages. ``accept_rate_*`` is the share of candidates that pass
the demo's quality control, so a speedup bought with worse paraphrases would show.
``max_abs_diff`` is the number of greedy-decoded requests (float32) on which the two ways
disagree: 0 means the same tokens.

Usage::

    .venv/bin/python benchmarks/bench_paraphrase.py [--n-passages 32] [--batch-rows 48] [--out results/bench/paraphrase.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from memaudit.io import write_json
from memaudit.machine import machine_report

NAME = "paraphrase"
ROOT = Path(__file__).resolve().parents[1]


def demo_passages(n: int, assets_dir: Path) -> list[str]:
    from memaudit.datasets.sources import load_source
    from memaudit.probes.decop.construct import passages_of

    out = []
    for doc in load_source("austen", assets_dir):
        out += passages_of(doc.text, 64, 1, seed=0, doc_id=doc.doc_id)
        if len(out) >= n:
            return out[:n]
    raise SystemExit("not enough Austen chapters: run `make assets`")


def generate_way(model, tok, texts, *, temperature: float, top_k: int, seed: int, batch_rows: int,
                 greedy: bool = False, copies: int = 3):
    """The previous way: ``generate()`` over ``copies`` copies of every prompt, ``batch_rows`` rows
    at a time (requests sorted by length, as the previous LocalParaphraser did)."""
    import torch

    from memaudit.probes.decop.paraphrase import clean_candidate, trim_commentary, trim_to_length
    from memaudit.probes.decop.prompts import PARAPHRASE_PROMPT_SINGLE

    tok.padding_side = "left"
    requests = sorted((t for t in texts for _ in range(copies)), key=len)
    out: dict[str, list[str]] = {t: [] for t in texts}
    seqs_all = []
    torch.manual_seed(seed)
    for start in range(0, len(requests), batch_rows):
        chunk = requests[start:start + batch_rows]
        prompts = [tok.apply_chat_template([{"role": "user", "content": PARAPHRASE_PROMPT_SINGLE.format(ref_text=t)}],
                                           tokenize=False, add_generation_prompt=True) for t in chunk]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        n_words = max(len(t.split()) for t in chunk)
        with torch.inference_mode():
            gen = model.generate(**enc, max_new_tokens=int(n_words * 1.4 * 1.3) + 8, do_sample=not greedy,
                                 temperature=temperature if not greedy else None,
                                 top_k=top_k if not greedy else None, top_p=None, pad_token_id=tok.eos_token_id)
        seqs = gen[:, enc["input_ids"].shape[1]:]
        seqs_all += [(t, s) for t, s in zip(chunk, seqs)]
        for t, s in zip(chunk, seqs):
            out[t].append(trim_to_length(trim_commentary(clean_candidate(tok.decode(s, skip_special_tokens=True)), t), t))
    return [out[t] for t in texts], seqs_all


def accept_rate(texts, candidates, encoder) -> float:
    from memaudit.probes.decop.paraphrase import QCSettings, check_paraphrase

    qc = QCSettings.from_config({"length_ratio": [0.4, 1.6]})
    flat = [(t, c) for t, cs in zip(texts, candidates) for c in cs]
    cos = encoder.cosine([t for t, _ in flat], [c or " " for _, c in flat])
    return sum(check_paraphrase(t, c, [], float(x), qc) is None for (t, c), x in zip(flat, cos)) / len(flat)


def length_stats(texts, candidates) -> tuple[float, float]:
    """The median candidate/passage word ratio, and the share of passages longer than all their
    candidates (DE-COP's own count of the length cue, over each passage as a question)."""
    import numpy as np

    from memaudit.probes.decop.analysis import longest_option_rate

    ratios = [len(c.split()) / len(t.split()) for t, cs in zip(texts, candidates) for c in cs]
    hits, n, _ = longest_option_rate([{"options": [t, *cs], "answer": 0} for t, cs in zip(texts, candidates) if cs])
    return float(np.median(ratios)), hits / n


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-passages", type=int, default=32)
    ap.add_argument("--batch-rows", type=int, default=48, help="samples decoded together (both ways)")
    ap.add_argument("--n-greedy", type=int, default=3)
    ap.add_argument("--assets-dir", type=Path, default=ROOT / "resources/demo")
    ap.add_argument("--cache-dir", type=Path, default=ROOT / "resources/cache")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/paraphrase.json")
    args = ap.parse_args(argv)

    import torch

    from memaudit.models.encoder import MiniLMEncoder
    from memaudit.probes.decop.paraphrase import LocalParaphraser
    from memaudit.probes.decop.prompts import PARAPHRASE_PROMPT_SINGLE
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.builtin import ensure_builtin

    path = str(ensure_builtin("smollm2-135m-instruct", args.cache_dir))
    texts = demo_passages(args.n_passages, args.assets_dir)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    from memaudit.models.loading import resolve_dtype

    dtype = resolve_dtype("auto", "cpu")  # as the demo: bfloat16 only where the CPU computes it natively
    model, tok = load_causal_lm({"path": path}, device="cpu", dtype=dtype)
    ours_way = LocalParaphraser(model, tok, name="smollm2-135m", temperature=0.7, batch_size=args.batch_rows, seed=0)
    # warm-up, both ways (each seeds its own sampling): ours, timed first, was timed cold
    ours_way.candidates(texts[:1], [64], 0)
    generate_way(model, tok, texts[:1], temperature=0.7, top_k=50, seed=0, batch_rows=args.batch_rows)
    t0 = time.perf_counter()
    ours = ours_way.candidates(texts, [64] * len(texts), 0)
    ours_s = time.perf_counter() - t0
    import memaudit.models.sampling as sampling
    from transformers import DynamicCache

    growing, sampling._growing_cache = sampling._growing_cache, DynamicCache
    try:
        t0 = time.perf_counter()
        ours_concat = ours_way.candidates(texts, [64] * len(texts), 0)
        concat_s = time.perf_counter() - t0
    finally:
        sampling._growing_cache = growing
    held_way = LocalParaphraser(model, tok, name="smollm2-135m", temperature=0.7, batch_size=args.batch_rows, seed=0,
                                min_length=0.9)
    t0 = time.perf_counter()
    held = held_way.candidates(texts, [64] * len(texts), 0)
    held_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    base, _ = generate_way(model, tok, texts, temperature=0.7, top_k=50, seed=0, batch_rows=args.batch_rows)
    base_s = time.perf_counter() - t0
    load_after = os.getloadavg()

    # same tokens when greedy (float32, so batch shape cannot flip a near-tie)
    from memaudit.models.sampling import sample

    model32, tok32 = load_causal_lm({"path": path}, device="cpu", dtype="float32")
    few = texts[:args.n_greedy]
    # one request per passage, alone in its batch: no padding in the reference
    ref_seqs = [generate_way(model32, tok32, [t], temperature=0.0, top_k=1, seed=0, batch_rows=1,
                             greedy=True, copies=1)[1][0][1] for t in few]
    prompts = [tok32(tok32.apply_chat_template(
        [{"role": "user", "content": PARAPHRASE_PROMPT_SINGLE.format(ref_text=t)}], tokenize=False,
        add_generation_prompt=True), add_special_tokens=False)["input_ids"] for t in few]
    limits = [len(r) for r in ref_seqs]
    greedy = sample(model32, prompts, [1] * len(few), limits, eos_ids=[tok32.eos_token_id],
                    pad_id=tok32.eos_token_id, temperature=0.0)
    mismatches = 0
    for i, row in enumerate(greedy):
        ref = ref_seqs[i].tolist()
        ref = ref[:ref.index(tok32.eos_token_id)] if tok32.eos_token_id in ref else ref
        mismatches += int(row[0] != ref)

    encoder = MiniLMEncoder()
    result = {
        "name": NAME, "n_items": 3 * len(texts), "n_passages": len(texts), "ours_seconds": ours_s,
        "baseline_seconds": base_s, "speedup": base_s / ours_s, "ours_concat_cache_seconds": concat_s,
        "cache_speedup": concat_s / ours_s, "same_samples_both_caches": ours_concat == ours,
        "max_abs_diff": float(mismatches),
        "n_greedy_checked": len(few), "accept_rate_ours": accept_rate(texts, ours, encoder),
        "accept_rate_baseline": accept_rate(texts, base, encoder),
        "ours_min_length_seconds": held_s, "accept_rate_min_length": accept_rate(texts, held, encoder),
        **dict(zip(("length_ratio_ours", "verbatim_longest_ours"), length_stats(texts, ours))),
        **dict(zip(("length_ratio_min_length", "verbatim_longest_min_length"), length_stats(texts, held))),
        "model": f"smollm2-135m-instruct ({dtype})",
        "threads": 1, "load_average_1_5_15min": [load_before[:3], load_after[:3]],
        "machine": machine_report(dtype=dtype),
        "cpus": os.cpu_count(), "python": sys.version.split()[0], "torch": torch.__version__,
    }
    result["meets_targets"] = {"speedup": result["speedup"] >= 2, "same_greedy_tokens": mismatches == 0,
                               "same_samples_both_caches": ours_concat == ours,
                               "acceptance_not_worse": result["accept_rate_ours"] >= result["accept_rate_baseline"] - 0.1}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, result)
    print(f"{NAME}: {3 * len(texts)} paraphrases; ours {ours_s:.1f}s, generate() {base_s:.1f}s "
          f"(speedup {result['speedup']:.2f}x; concatenating cache {concat_s:.1f}s, {result['cache_speedup']:.2f}x); "
          f"accepted {result['accept_rate_ours']:.2f} vs "
          f"{result['accept_rate_baseline']:.2f}; greedy mismatches {mismatches}/{len(few)}; min_length 0.9: "
          f"{held_s:.1f}s, median length {result['length_ratio_ours']:.2f} -> {result['length_ratio_min_length']:.2f}, "
          f"verbatim longest {result['verbatim_longest_ours']:.2f} -> {result['verbatim_longest_min_length']:.2f}, "
          f"accepted {result['accept_rate_min_length']:.2f} -> {args.out}")
    return result


if __name__ == "__main__":
    main()
