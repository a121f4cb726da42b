"""Token-probability scores against values computed by hand."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from memaudit.probes.token_prob.methods import (Loss, Lowercase, MinK, MinKPlusPlus, Reference, ScoringContext,
                                        Zlib, aggregate_documents, build_methods, k_lowest_mean, score_passages)
from memaudit.models.token_stats import TokenStats, compute_token_stats, encode, length_buckets


def stats_of(rows):
    """TokenStats from per-passage lists of (logprob, mu, sigma)."""
    offsets = np.cumsum([0] + [len(r) for r in rows])
    flat = [t for r in rows for t in r] or [(0, 0, 1)]
    arr = np.array(flat, dtype=np.float32).reshape(-1, 3)
    return TokenStats(offsets.astype(np.int64), arr[:, 0], arr[:, 1], arr[:, 2])


HAND = stats_of([
    [(-1.0, -2.0, 1.0), (-2.0, -2.0, 0.5), (-3.0, -1.0, 2.0), (-4.0, -3.0, 1.0)],
    [(-0.5, -1.0, 0.25), (-1.5, -1.0, 0.5)],
])
TEXTS = ["Abc def ghi.", "Xy z."]


def test_loss_is_negative_mean_nll():
    ctx = ScoringContext(TEXTS, HAND)
    np.testing.assert_allclose(Loss().score(ctx), [-2.5, -1.0])


def test_a_passage_without_tokens_has_no_mean_nll_rather_than_its_neighbours():
    """np.add.reduceat gives an empty segment the next segment's first value, and a trailing one
    fails: a passage without a scored token is NaN, its neighbours keep their own means."""
    stats = stats_of([[(-1.0, 0, 1), (-3.0, 0, 1)], [], [(-5.0, 0, 1)], []])
    got = stats.mean_nll()
    assert got[0] == 2.0 and np.isnan(got[1]) and got[2] == 5.0 and np.isnan(got[3])
    assert np.isnan(stats_of([[]]).mean_nll()).all()


def test_zlib_divides_loss_by_compressed_bytes():
    ctx = ScoringContext(TEXTS, HAND)
    z = [len(zlib.compress(t.encode())) for t in TEXTS]
    np.testing.assert_allclose(Zlib().score(ctx), [-2.5 / z[0], -1.0 / z[1]])


def test_lowercase_ratio_of_log_perplexities():
    lower = stats_of([[(-2.0, 0, 1)] * 4, [(-3.0, 0, 1)] * 2])
    ctx = ScoringContext(TEXTS, HAND, lowercase=lower)
    np.testing.assert_allclose(Lowercase().score(ctx), [2.0 / 2.5, 3.0 / 1.0])


def test_min_k_keeps_floor_k_times_length_lowest_tokens():
    ctx = ScoringContext(TEXTS, HAND)
    # 50% of 4 tokens -> the 2 lowest (-4, -3); 50% of 2 tokens -> 1 token (-1.5)
    np.testing.assert_allclose(MinK(0.5).score(ctx), [-3.5, -1.5])
    # 10% of 4 -> max(1, 0) = 1 token
    np.testing.assert_allclose(MinK(0.1).score(ctx), [-4.0, -1.5])
    assert MinK(0.2).name == "min_k_20pct" and MinK(0.05).name == "min_k_5pct"


def test_min_k_plus_plus_standardises_by_the_next_token_distribution():
    ctx = ScoringContext(TEXTS, HAND)
    # z = (lp - mu) / sigma: passage 0 -> [1, 0, -1, -1]; passage 1 -> [2, -1]
    np.testing.assert_allclose(MinKPlusPlus(0.5).score(ctx), [-1.0, -1.0])
    np.testing.assert_allclose(MinKPlusPlus(1.0).score(ctx), [-0.25, 0.5])
    assert MinKPlusPlus(0.2).name == "min_k_plus_plus_20pct"


def test_reference_is_reference_loss_minus_target_loss():
    ref = stats_of([[(-3.0, 0, 1)] * 2, [(-0.5, 0, 1)] * 3])
    ctx = ScoringContext(TEXTS, HAND, references={"big": ref})
    np.testing.assert_allclose(Reference("big").score(ctx), [3.0 - 2.5, 0.5 - 1.0])


def test_build_methods_expands_sweeps_and_skips_self_reference():
    names = [m.name for m in build_methods(["loss", "min_k", "reference"], [0.1, 0.2], ["a", "b"], "a")]
    assert names == ["loss", "min_k_10pct", "min_k_20pct", "ref_b"]
    with pytest.raises(ValueError, match="unknown"):
        build_methods(["loss", "nope"], [0.1], [], "a")


def test_k_lowest_mean_of_empty_is_nan():
    assert np.isnan(k_lowest_mean(np.zeros(0), 0.2))


def test_documents_aggregate_passages_by_mean():
    passages = pd.DataFrame({"passage_id": ["d1#p0", "d1#p1"], "doc_id": ["d1", "d1"], "label": [1, 1]})
    scores = score_passages(ScoringContext(TEXTS, HAND), [Loss()], passages)
    doc = aggregate_documents(scores, "mean")
    assert doc.to_dict("records") == [{"doc_id": "d1", "label": 1, "method": "loss", "score": -1.75,
                                        "n_passages": 2}]
    assert aggregate_documents(scores, "max")["score"].item() == -1.0


def hand_token_stats(model, tok, text):
    """Per-token (logprob, mu, sigma) for one text, computed directly from the logits."""
    import torch

    ids = encode(tok, text, None)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
    logp = torch.log_softmax(logits, -1)
    lp = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
    p = logp.exp()
    mu = (p * logp).sum(-1)
    sigma = ((p * (logp - mu[:, None]) ** 2).sum(-1)).sqrt()
    return lp, mu.numpy(), sigma.numpy()


def test_batched_statistics_equal_one_text_at_a_time(tiny_model):
    model, tok = tiny_model
    texts = ["The sea.", "Call me Ishmael, said the sailor to the whale.", "A", "Crude oil rose on Monday."]
    stats = compute_token_stats(model, tok, texts, batch_size=3, max_tokens=None)
    for i, text in enumerate(texts):
        lp, mu, sd = hand_token_stats(model, tok, text)
        got = stats.passage(i)
        # the first text token is scored too (context token in front)
        assert len(got[0]) == len(tok(text, add_special_tokens=False)["input_ids"])
        np.testing.assert_allclose(got[0], lp, atol=1e-4)
        np.testing.assert_allclose(got[1], mu, atol=1e-4)
        np.testing.assert_allclose(got[2], sd, atol=1e-4)


def test_truncation_to_max_tokens(tiny_model):
    model, tok = tiny_model
    stats = compute_token_stats(model, tok, ["one two three four five six seven eight nine ten"], max_tokens=3)
    assert len(stats.passage(0)[0]) == 3


def test_length_buckets_group_similar_lengths():
    batches = length_buckets([5, 50, 7, 48, 6], batch_size=2)
    assert batches == [[1, 3], [2, 4], [0]]


def test_a_token_with_logit_minus_inf_adds_nothing_to_min_k_plus_plus_moments():
    """0 log 0 = 0 (the paper's expectation over p): a ruled-out token leaves mu and sigma those of the rest."""
    import torch

    from memaudit.models.token_stats import next_token_stats

    torch.manual_seed(0)
    finite = torch.randn(11, 40)  # more rows than one chunk
    logits = torch.cat([finite, torch.full((11, 3), float("-inf"))], dim=1)
    targets = torch.arange(11)
    got = next_token_stats(logits, targets)
    want = next_token_stats(finite, targets)
    assert np.isfinite(got[1]).all() and np.isfinite(got[2]).all()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    logp = torch.log_softmax(finite.double(), -1)
    mu = (logp.exp() * logp).sum(-1)
    np.testing.assert_allclose(got[1], mu.numpy(), atol=1e-5)
    np.testing.assert_allclose(got[2], ((logp.exp() * logp ** 2).sum(-1) - mu ** 2).sqrt().numpy(), atol=1e-5)


def test_statistics_record_how_much_of_a_cut_text_was_scored(tiny_model, tmp_path):
    from memaudit.models.token_stats import concat_stats, load_many, save_many

    model, tok = tiny_model
    long_text, short = "one two three four five six seven eight nine ten", "A"
    stats = compute_token_stats(model, tok, [long_text, short], max_tokens=3)
    kept = tok.decode(tok(long_text, add_special_tokens=False)["input_ids"][:3])
    assert 0 < len(kept) < len(long_text) and long_text.startswith(kept)
    assert stats.chars.tolist() == [len(kept), len(short)]
    # through a shard's file, the concatenation of shards and the job's npz
    stats.save(tmp_path / "shard.npz")
    both = concat_stats([TokenStats.load(tmp_path / "shard.npz"), stats])
    save_many(tmp_path / "s.npz", original=both)
    assert load_many(tmp_path / "s.npz", "original").chars.tolist() == [len(kept), len(short)] * 2


def test_zlib_compresses_the_scored_part_of_a_cut_text():
    texts = ["Abc def ghi. " * 20, "Xy z."]
    stats = stats_of([[(-1.0, -2.0, 1.0), (-2.0, -2.0, 0.5)], [(-0.5, -1.0, 0.25)]])
    stats.chars = np.array([12, 5])
    got = Zlib().score(ScoringContext(texts, stats))
    np.testing.assert_allclose(got, [-1.5 / len(zlib.compress(b"Abc def ghi.")), -0.5 / len(zlib.compress(b"Xy z."))])
    # statistics that do not record it: the whole text
    stats.chars = None
    np.testing.assert_allclose(Zlib().score(ScoringContext(texts, stats))[0],
                               -1.5 / len(zlib.compress(texts[0].encode("utf-8"))))


def test_a_checkpointed_shard_without_its_scored_parts_is_recomputed(tmp_path):
    from memaudit.probes.token_prob.forward import _load_shard

    shard = stats_of([[(-1.0, -2.0, 1.0)], [(-0.5, -1.0, 0.25)]])
    shard.save(tmp_path / "old.npz")  # as a shard written before `chars` was recorded
    messages = []
    assert _load_shard(tmp_path / "old.npz", 2, messages.append) is None and "recomputing" in messages[0]
    shard.chars = np.array([3, 4])
    shard.save(tmp_path / "new.npz")
    assert _load_shard(tmp_path / "new.npz", 2, messages.append).chars.tolist() == [3, 4]
