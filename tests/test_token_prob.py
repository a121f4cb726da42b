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


def test_k_lowest_mean_takes_the_floor_of_the_decimal_product():
    values = np.arange(90, dtype=float)  # 90 * 0.7 is 62.99999999999999 in binary floating point
    assert k_lowest_mean(values, 0.7) == pytest.approx(np.arange(63).mean())
    assert k_lowest_mean(values, 0.2) == pytest.approx(np.arange(18).mean())
    assert k_lowest_mean(np.arange(3, dtype=float), 0.1) == 0.0  # at least one value


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


def test_min_k_plus_plus_sigma_matches_a_float64_reference_where_the_moments_nearly_cancel():
    """sigma^2 = E z^2 - mu^2 in float32 cancels where |mu| >> sigma: a near-uniform distribution over a
    262k vocabulary (mu = -12.48) gave sigma 0.0055 for 0.0010, one split between two tokens 0 for 3.0e-5.
    sigma is sqrt(E (z - mu)^2), within 1e-5 of the float64 value (relative), as it was already for ordinary rows."""
    import torch

    from memaudit.models.token_stats import next_token_stats

    torch.manual_seed(0)
    vocab = 262_144
    two = torch.full((vocab,), -40.0)
    two[:2] = 0.0
    thousand = torch.full((vocab,), -25.0)
    thousand[:1000] = 1e-3 * torch.randn(1000)
    certain = torch.full((vocab,), -60.0)
    certain[0] = 0.0
    logits = torch.stack([1e-3 * torch.randn(vocab), 1e-2 * torch.randn(vocab), two, thousand, certain,
                          3 * torch.randn(vocab)])
    lp, mu, sigma = next_token_stats(logits, torch.zeros(6, dtype=torch.long))
    logp = torch.log_softmax(logits.double(), -1)
    want_mu = (logp.exp() * logp).sum(-1)
    want_sigma = (logp.exp() * (logp - want_mu[:, None]) ** 2).sum(-1).sqrt().numpy()
    np.testing.assert_allclose(want_sigma[:3], [1.0005e-3, 1.0009e-2, 2.9849e-5], rtol=1e-4)
    np.testing.assert_allclose(sigma, want_sigma, rtol=1e-5)
    np.testing.assert_allclose(mu, want_mu.numpy(), rtol=1e-6)


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


def test_a_cut_inside_a_character_keeps_none_of_its_byte_tokens(tmp_path):
    """Byte-level BPE gives each byte token of a CJK character the character's end: a cut among them
    scored part of it while claiming all of it, so a model compared with itself at another cut (the
    reference method) differed. The cut keeps whole characters: the same model gives 0."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from memaudit.models.tiny import train_bpe_tokenizer
    from memaudit.models.token_stats import encode_scored
    from memaudit.probes.token_prob.methods import shared_span

    tok = train_bpe_tokenizer(["hello world"] * 5, 260, tmp_path)
    text = "ab 日本"
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert [end for _, end in offsets] == [1, 2, 3, 4, 4, 4, 5, 5, 5]  # 日 and 本: three byte tokens each

    def kept(max_tokens):  # text tokens kept (after the context token) and the characters they cover
        ids, chars, _ = encode_scored(tok, text, max_tokens)
        return len(ids) - 1, chars

    assert [kept(n) for n in (3, 4, 5, 6, 7, 9)] == [(3, 3), (3, 3), (3, 3), (6, 4), (6, 4), (9, 5)]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)).eval()
    cut, whole = (compute_token_stats(model, tok, [text], max_tokens=n) for n in (5, None))
    span = shared_span(cut, whole, [text])
    assert cut.chars.tolist() == [3] and bool(span.cut[0]) and span.chars[0] == 3
    assert span.nll[0] == pytest.approx(span.other[0], abs=1e-6)


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


def stats_with(rows, ends, chars):
    """stats_of(rows) with where each token ends in its text (``ends``, per passage) and ``chars``."""
    stats = stats_of(rows)
    stats.ends = None if ends is None else np.array([e for es in ends for e in es], dtype=np.int32)
    stats.chars = np.array(chars, dtype=np.int64)
    return stats


# "aa bb cc dd" scored whole; "İs ab" ('İ'.lower() is two characters: "i̇s ab"); "xy zw"
CUT_TEXTS = ["aa bb cc dd", "\u0130s ab", "xy zw"]
CUT_MODEL = stats_with([[(-1.0, 0, 1), (-2.0, 0, 1), (-3.0, 0, 1), (-4.0, 0, 1)],
                        [(-1.0, 0, 1), (-3.0, 0, 1), (-5.0, 0, 1)], [(-1.0, 0, 1), (-1.0, 0, 1)]],
                       [[2, 5, 8, 11], [1, 2, 5], [2, 5]], [11, 5, 5])


def test_reference_compares_the_characters_both_models_scored():
    """A reference model cut at its own max_tokens scored "aa bb" of "aa bb cc dd" (3 tokens of its own):
    the model's loss is read over its tokens of "aa bb" too (the first 2), not over the whole passage.
    The reference's cut of "xy zw" ends where no token of the model ends: left out, not compared."""
    ref = stats_with([[(-1.0, 0, 1), (-2.0, 0, 1), (-6.0, 0, 1)], [(-2.0, 0, 1), (-2.0, 0, 1)], [(-4.0, 0, 1)]],
                     [[1, 4, 5], [2, 5], [1]], [5, 5, 1])
    ctx = ScoringContext(CUT_TEXTS, CUT_MODEL, references={"big": ref})
    got = Reference("big").score(ctx)
    # (1 + 2 + 6) / 3 - (1 + 2) / 2; the whole passage's loss, 2.5, gave 3.0 - 2.5 = 0.5
    np.testing.assert_allclose(got[:2], [3.0 - 1.5, 2.0 - 3.0])
    assert np.isnan(got[2])
    span = ctx.spans["ref_big"]
    assert span.cut.tolist() == [True, False, True] and span.left_out.tolist() == [False, False, True]
    assert span.chars[:2].tolist() == [5, 5]
    assert span.note("ref_big") == (
        "ref_big: 2 of 3 passages scored to different lengths by the two passes (each cut at its own max_tokens): "
        "1 compared on the characters both scored (median 5 characters); 1 left out of its scores: no token of "
        "the two passes ends at the same character")
    passages = pd.DataFrame({"passage_id": ["a", "b", "c"], "doc_id": ["d1", "d1", "d2"], "label": [1, 1, 0]})
    table = score_passages(ctx, [Loss(), Reference("big")], passages)
    assert table[table.method == "ref_big"]["passage_id"].tolist() == ["a", "b"]
    assert table[table.method == "loss"]["passage_id"].tolist() == ["a", "b", "c"]


def test_the_passages_table_says_which_characters_each_score_covers_and_whether_the_passage_was_cut():
    """A passage cut at max_tokens is scored on its first part: the passages table says so per row
    (``scored_chars``, ``truncated``), not only the job's log; a two-pass method's row counts the
    characters both passes scored (:func:`shared_span`)."""
    ref = stats_with([[(-1.0, 0, 1), (-2.0, 0, 1), (-6.0, 0, 1)], [(-2.0, 0, 1), (-2.0, 0, 1)], [(-1.0, 0, 1)] * 2],
                     [[1, 4, 5], [2, 5], [2, 5]], [5, 5, 5])
    model = stats_with([[(-1.0, 0, 1)] * 4, [(-1.0, 0, 1)] * 3, [(-1.0, 0, 1)]], [[2, 5, 8, 11], [1, 2, 5], [2]],
                       [11, 5, 2])
    ctx = ScoringContext(CUT_TEXTS, model, references={"big": ref})
    passages = pd.DataFrame({"passage_id": ["a", "b", "c"], "doc_id": ["d1", "d1", "d2"], "label": [1, 1, 0]})
    table = score_passages(ctx, [Loss(), Zlib(), Reference("big")], passages).set_index(["method", "passage_id"])
    assert table["scored_chars"].to_dict() == {
        ("loss", "a"): 11, ("loss", "b"): 5, ("loss", "c"): 2, ("zlib", "a"): 11, ("zlib", "b"): 5, ("zlib", "c"): 2,
        ("ref_big", "a"): 5, ("ref_big", "b"): 5, ("ref_big", "c"): 2}
    assert table["truncated"].to_dict() == {
        ("loss", "a"): False, ("loss", "b"): False, ("loss", "c"): True, ("zlib", "a"): False,
        ("zlib", "b"): False, ("zlib", "c"): True, ("ref_big", "a"): True, ("ref_big", "b"): False,
        ("ref_big", "c"): True}
    # statistics that do not record which characters they scored: the whole passage, as zlib takes it
    model.chars = None
    table = score_passages(ScoringContext(CUT_TEXTS, model), [Loss()], passages)
    assert table["scored_chars"].tolist() == [11, 5, 5] and not table["truncated"].any()


def test_passages_cut_differently_are_left_out_where_the_statistics_do_not_say_where_tokens_end():
    ref = stats_with([[(-1.0, 0, 1), (-2.0, 0, 1), (-6.0, 0, 1)], [(-2.0, 0, 1), (-2.0, 0, 1)], [(-4.0, 0, 1)]],
                     None, [5, 5, 1])
    ctx = ScoringContext(CUT_TEXTS, CUT_MODEL, references={"big": ref})
    got = Reference("big").score(ctx)
    assert np.isnan(got[0]) and got[1] == 2.0 - 3.0 and np.isnan(got[2])
    assert ctx.spans["ref_big"].note("ref_big").endswith(
        "0 compared on the characters both scored; 2 left out of its scores: their token statistics do not record "
        "where each token ends (written before they did, or a tokenizer without character offsets; rerun them: "
        "snakemake -R token_stats, and token_stats_lowercase for the lowercase score)")
    # statistics that do not record which characters they scored: taken as whole passages, and said so
    ref.chars = None
    uniform = stats_with([[(-1.0, 0, 1)] * 4, [(-1.0, 0, 1)] * 3, [(-1.0, 0, 1)] * 2], None, [11, 5, 5])
    ctx = ScoringContext(CUT_TEXTS, uniform, references={"big": ref})
    np.testing.assert_allclose(Reference("big").score(ctx), ref.mean_nll() - 1.0)
    assert "taken as covering the whole passage" in ctx.spans["ref_big"].note("ref_big")


def test_lowercase_compares_the_characters_both_passes_scored():
    """The lowercased "İs ab" ("i̇s ab": 'İ' lowercases to two characters) was cut after "i̇s": the
    model's loss is read over its tokens of "İs"; the passages neither pass cut keep their whole losses."""
    lower = stats_with([[(-2.0, 0, 1)] * 4, [(-4.0, 0, 1), (-2.0, 0, 1)], [(-1.0, 0, 1), (-3.0, 0, 1)]],
                       [[2, 5, 8, 11], [2, 3], [2, 5]], [11, 3, 5])
    assert len(CUT_TEXTS[1].lower()) == 6
    ctx = ScoringContext(CUT_TEXTS, CUT_MODEL, lowercase=lower)
    # passage 1: (4 + 2) / 2 over (1 + 3) / 2; over the whole passage's loss, 3.0, it was 1.0
    np.testing.assert_allclose(Lowercase().score(ctx), [2.0 / 2.5, 3.0 / 2.0, 2.0 / 1.0])
    assert ctx.spans["lowercase"].cut.tolist() == [False, True, False]


def test_statistics_record_where_each_scored_token_ends(tiny_model, tmp_path):
    from memaudit.models.token_stats import concat_stats, load_many, save_many

    model, tok = tiny_model
    texts = ["one two three four five six seven eight nine ten", "A"]
    stats = compute_token_stats(model, tok, texts, max_tokens=3)
    offsets = tok(texts[0], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert stats.passage_ends(0).tolist() == list(np.maximum.accumulate([e for _, e in offsets[:3]]))
    assert stats.passage_ends(0)[-1] == stats.chars[0] < len(texts[0]) and stats.passage_ends(1).tolist() == [1]
    save_many(tmp_path / "s.npz", original=concat_stats([stats, stats.take([1, 0])]))
    back = load_many(tmp_path / "s.npz", "original")
    assert back.ends.tolist() == stats.ends.tolist() + [1] + stats.passage_ends(0).tolist()
    assert back.chars.tolist() == [stats.chars[0], 1, 1, stats.chars[0]]
    np.testing.assert_array_equal(back.passage(3)[0], stats.passage(0)[0])


def test_a_model_as_its_own_reference_at_fewer_tokens_scores_zero(tiny_model_dir, tmp_path):
    """The same model as a reference cut at 16 tokens, the model at 64: compared on the same characters
    the two losses are equal, and ref_<model> is 0 on every passage (the losses of what each pass scored
    differed by up to 0.01 nats on this random model); the job's log counts the passages cut differently,
    naming benchmark and model."""
    import json

    from memaudit.io import write_jsonl
    from memaudit.models.token_stats import load_many
    from memaudit.probes.token_prob.forward import run_token_stats
    from memaudit.probes.token_prob.runner import run_token_prob_scores

    passages = [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2,
                 "text": f"Passage number {i} about the sea and the whale, " * (2 + i % 2)} for i in range(6)]
    write_jsonl(tmp_path / "passages.jsonl", passages)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_model_dir)}}))
    config = {"models": {name: {"device": "cpu", "dtype": "float32", "batch_size": 4, "max_tokens": n}
                         for name, n in (("m", 64), ("r", 16))}}
    for name in ("m", "r"):
        run_token_stats(config, name, tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / f"{name}.npz")
    run_token_stats(config, "m", tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / "m_lower.npz", lowercased=True)
    model, ref = load_many(tmp_path / "m.npz", "original"), load_many(tmp_path / "r.npz", "original")
    texts = [p["text"] for p in passages]
    assert (ref.chars < [len(t) for t in texts]).all() and (model.chars > ref.chars).all()
    assert np.abs(ref.mean_nll() - model.mean_nll()).max() > 5e-3  # what ref_r was (the model is random)
    messages = []
    cfg = {"methods": ["loss", "lowercase", "reference"], "min_k_ratios": [0.5], "aggregate": "mean"}
    run_token_prob_scores("m", tmp_path / "m.npz", {"r": tmp_path / "r.npz"}, tmp_path / "passages.jsonl", cfg,
                          tmp_path / "p.csv", tmp_path / "d.csv", progress=messages.append, benchmark="novels",
                          lowercase_path=tmp_path / "m_lower.npz")
    got = pd.read_csv(tmp_path / "p.csv")
    assert len(got[got.method == "ref_r"]) == 6
    np.testing.assert_allclose(got[got.method == "ref_r"]["score"], 0, atol=1e-5)
    assert ("novels, m: ref_r: 6 of 6 passages scored to different lengths by the two passes (each cut at its "
            "own max_tokens): 6 compared on the characters both scored") in "\n".join(messages)


def test_every_score_of_a_batch_of_mixed_lengths_equals_one_passage_at_a_time(tiny_model_dir, tmp_path):
    """Padding and truncation do not leak into the scores: passages of 6 to 180 words (the longest cut at
    max_tokens, the reference cut shorter) scored in one batch of 6 give every method's scores and scored
    characters of the passages scored one at a time."""
    import json

    from memaudit.io import write_jsonl
    from memaudit.probes.token_prob.forward import run_token_stats
    from memaudit.probes.token_prob.runner import run_token_prob_scores

    passages = [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2,
                 "text": " ".join(["The Whale said Call me Ishmael"] * n)} for i, n in enumerate([1, 9, 3, 17, 2, 30])]
    write_jsonl(tmp_path / "passages.jsonl", passages)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_model_dir)}}))
    cfg = {"methods": ["loss", "zlib", "lowercase", "min_k", "min_k_plus_plus", "reference"],
           "min_k_ratios": [0.2, 0.5], "aggregate": "mean"}
    tables = []
    for batch in (6, 1):
        config = {"models": {name: {"device": "cpu", "dtype": "float32", "batch_size": batch, "max_tokens": n}
                             for name, n in (("m", 100), ("r", 40))}}
        for name in ("m", "r"):
            run_token_stats(config, name, tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / f"{name}{batch}.npz")
        run_token_stats(config, "m", tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / f"m_lower{batch}.npz",
                        lowercased=True)
        run_token_prob_scores("m", tmp_path / f"m{batch}.npz", {"r": tmp_path / f"r{batch}.npz"},
                              tmp_path / "passages.jsonl", cfg, tmp_path / f"p{batch}.csv", tmp_path / f"d{batch}.csv",
                              lowercase_path=tmp_path / f"m_lower{batch}.npz")
        tables.append(pd.read_csv(tmp_path / f"p{batch}.csv"))
    batched, single = tables
    assert len(batched) == 6 * 8 and batched["truncated"].sum() > 0
    pd.testing.assert_frame_equal(batched.drop(columns=["score", "perplexity"]),
                                  single.drop(columns=["score", "perplexity"]))
    np.testing.assert_allclose(batched["score"], single["score"], rtol=1e-5, atol=1e-6)


def test_the_lowercase_pass_of_its_own_job_equals_the_one_computed_beside_the_original(tiny_model_dir, tmp_path):
    """The pass over the lowercased passages was part of token_stats (adding or dropping ``lowercase`` reran
    every forward pass); token_stats_lowercase computes it alone now. Its file holds, bit for bit, what one
    backend computed right after the original pass in the same shards (the old job's ``lowercase`` arrays:
    a cut passage, a character that lowercases to two, sharded and checkpointed), the original pass's file no
    lowercased arrays, and the lowercase score read from the two files is the combined statistics' exactly."""
    import json

    from memaudit.backends import open_backend
    from memaudit.backends.base import TOKEN_LOGPROBS
    from memaudit.io import write_jsonl
    from memaudit.models.token_stats import concat_stats, load_many
    from memaudit.probes.token_prob.forward import run_token_stats
    from memaudit.probes.token_prob.runner import run_token_prob_scores

    texts = [f"Passage Number {i} About THE Sea and İstanbul's Whale, Captain Ahab. " * (1 + i % 3) for i in range(7)]
    write_jsonl(tmp_path / "passages.jsonl", [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2,
                                              "text": t} for i, t in enumerate(texts)])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_model_dir)}}))
    config = {"models": {"m": {"device": "cpu", "dtype": "float32", "batch_size": 3, "max_tokens": 40}}}
    for name, lowercased in (("ts", False), ("ts_lower", True)):
        run_token_stats(config, "m", tmp_path / "m", tmp_path / "passages.jsonl", tmp_path / f"{name}.npz",
                        lowercased=lowercased, shard_passages=3, checkpoint_dir=tmp_path / f"ckpt_{name}")
    # the combined job: one backend, the original shards, then the lowercased ones
    backend = open_backend(config, "m", model_dir=tmp_path / "m", needs={TOKEN_LOGPROBS})
    shards = [(0, 3), (3, 6), (6, 7)]
    combined = {name: concat_stats([backend.token_stats(variant[a:b], with_distribution=name == "original")
                                    for a, b in shards])
                for name, variant in (("original", texts), ("lowercase", [t.lower() for t in texts]))}
    with np.load(tmp_path / "ts.npz") as z:
        assert sorted(z.files) == ["__provenance__"] + [f"original__{k}" for k in
                                                        ("chars", "ends", "logprob", "mu", "offsets", "sigma")]
    split = {"original": load_many(tmp_path / "ts.npz", "original"),
             "lowercase": load_many(tmp_path / "ts_lower.npz", "lowercase")}
    for name in ("original", "lowercase"):
        for field in ("offsets", "logprob", "mu", "sigma", "chars", "ends"):
            np.testing.assert_array_equal(getattr(split[name], field), getattr(combined[name], field),
                                          err_msg=f"{name} {field}")
    assert (split["lowercase"].chars < [len(t.lower()) for t in texts]).any()  # some passage cut at max_tokens
    assert np.isnan(split["lowercase"].mu).all()

    cfg = {"methods": ["loss", "lowercase"], "min_k_ratios": [0.5], "aggregate": "mean"}
    run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg, tmp_path / "p.csv",
                          tmp_path / "d.csv", lowercase_path=tmp_path / "ts_lower.npz")
    got = pd.read_csv(tmp_path / "p.csv")
    lower = got[got.method == "lowercase"].set_index("passage_id")
    ctx = ScoringContext(texts, combined["original"], lowercase=combined["lowercase"])
    want = pd.Series(Lowercase().score(ctx), index=[f"d{i}#p0" for i in range(7)])
    assert len(lower) == 7
    # through the CSV's text: the score's repr, which a float64 round-trips exactly
    np.testing.assert_array_equal(lower["score"].to_numpy(), want[lower.index].to_numpy())
    # without the lowercased pass there is no lowercase score; with one of other passages, a one-line error
    run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg, tmp_path / "p2.csv",
                          tmp_path / "d2.csv")
    assert set(pd.read_csv(tmp_path / "p2.csv")["method"]) == {"loss"}
    write_jsonl(tmp_path / "five.jsonl", [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2, "text": t}
                                          for i, t in enumerate(texts[:5])])
    run_token_stats(config, "m", tmp_path / "m", tmp_path / "five.jsonl", tmp_path / "five_lower.npz", lowercased=True)
    with pytest.raises(ValueError) as err:
        run_token_prob_scores("m", tmp_path / "ts.npz", {}, tmp_path / "passages.jsonl", cfg, tmp_path / "p3.csv",
                              tmp_path / "d3.csv", lowercase_path=tmp_path / "five_lower.npz")
    assert str(err.value) == (f"token statistics of m on the lowercased passages cover 5 passages, "
                              f"{tmp_path / 'passages.jsonl'} has 7: rerun its token_stats_lowercase job")
