"""The token-probability benchmark compares like with like: its per-text baseline and the package path agree.

Timings are not asserted (they depend on the machine); only that the two ways
of scoring give the same number for every method and passage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memaudit.probes.token_prob.methods import build_methods
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "Call me Ishmael.",
    "The crude oil price rose sharply on Monday after the cartel announced new production limits, "
    "and traders said supplies would stay tight until the spring.",
    "Emma Woodhouse, handsome, clever, and rich.",
    "Mr. Darcy soon drew the attention of the room by his fine, tall person, handsome features, noble mien.",
]
KS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_token_prob")


@pytest.fixture(scope="module")
def models(bench, tmp_path_factory):
    """Target and reference: two random GPT-2s with different tokenizers and sizes."""
    from memaudit.models.loading import load_causal_lm

    # A wider initialisation gives peaked next-token distributions like a trained
    # model's; the default (0.02) is near-uniform, where sigma is tiny and the
    # Min-K%++ z-scores would compare float32 rounding noise.
    target_dir = bench.make_random_gpt2(TEXTS, tmp_path_factory.mktemp("target"), seed=1, n_embd=64,
                                        vocab_size=300, initializer_range=0.3)
    ref_dir = bench.make_random_gpt2(TEXTS, tmp_path_factory.mktemp("reference"), seed=2, n_embd=32,
                                     vocab_size=500)
    return (load_causal_lm({"path": str(target_dir)}, device="cpu"),
            load_causal_lm({"path": str(ref_dir)}, device="cpu"))


def test_baseline_matches_package_scores_for_every_method(bench, models):
    target, reference = models
    passages = pd.DataFrame({"passage_id": [f"d{i}#p0" for i in range(len(TEXTS))],
                             "doc_id": [f"d{i}" for i in range(len(TEXTS))],
                             "label": [1, 0, 1, 0, 1], "text": TEXTS})
    # batch_size 2 puts passages of different lengths in one padded batch.
    m = bench.measure(target, reference, passages, ks=KS, batch_size=2, max_tokens=512, repeats=2)
    ours, baseline = m["ours_scores"], m["baseline_scores"]
    whole = bench.ours_scores(target, reference, passages, ks=KS, batch_size=2, max_tokens=512)

    expected = {m.name for m in build_methods(bench.METHODS, KS, [bench.REFERENCE_MODEL], bench.TARGET_MODEL)}
    assert set(ours) == set(baseline) == set(whole) == expected
    assert len(expected) == 3 + 2 * len(KS) + 1
    # loss, zlib, min_k, min_k++ one pass each, lowercase two, reference two: 8 per text.
    assert m["baseline_forward_passes"] == 8 * len(TEXTS)
    assert m["n_buckets"] == 3
    assert set(m["ours_by_stage"]) == {"original", "lowercase", "reference", "scoring"}
    assert np.array(m["floor_rounds"]).shape == (2, 3)
    assert m["ours_seconds"] > 0 and m["forward_seconds"] > 0 and m["baseline_seconds"] > 0

    for other in (baseline, whole):  # bucket by bucket, and all passages in one call as the workflow runs
        diffs = bench.max_abs_diffs(ours, other)
        for name in expected:
            assert np.all(np.isfinite(ours[name])), name
            assert diffs[name] <= 1e-4, (name, diffs[name], ours[name], other[name])
    # The scores are not degenerate: methods differ and passages differ.
    assert np.ptp(ours["loss"]) > 0.01
    assert not np.allclose(ours["min_k_5pct"], ours["min_k_plus_plus_5pct"])


def test_per_score_baseline_reruns_each_k_with_the_same_scores(bench, models):
    target, reference = models
    family, n_family = bench.baseline_scores(target, reference, TEXTS[:2], ks=KS, max_tokens=512)
    per_score, n_score = bench.baseline_scores(target, reference, TEXTS[:2], ks=KS, max_tokens=512,
                                               way="per-score")
    # loss, zlib 1 each, lowercase 2, reference 2, min_k and min_k++ 1 per k.
    assert (n_family, n_score) == (8 * 2, (6 + 2 * len(KS)) * 2)
    assert max(bench.max_abs_diffs(family, per_score).values()) == 0.0


def test_max_abs_diffs_flags_missing_methods_and_nan_mismatch(bench):
    a = {"loss": np.array([1.0, np.nan]), "zlib": np.array([0.5, 0.25])}
    b = {"loss": np.array([1.5, np.nan]), "zlib": np.array([0.5, np.nan]), "extra": np.array([0.0, 0.0])}
    diffs = bench.max_abs_diffs(a, b)
    assert diffs == {"loss": 0.5, "zlib": float("inf"), "extra": float("inf")}


def test_bare_forward_counts_scored_tokens(bench, models):
    (model, tok), _ = models
    n = bench.bare_forward(model, tok, TEXTS, batch_size=2, max_tokens=512)
    assert n == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
