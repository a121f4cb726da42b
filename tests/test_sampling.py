"""Batched sampling with early-leaving rows (memaudit.models.sampling) against transformers' generate()."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def model_and_prompts(tiny_model):
    model, tok = tiny_model
    texts = ["It is a truth universally acknowledged", "Call me Ishmael. Some years ago",
             "The crude oil price rose sharply on Monday after the cartel announced"]
    return model, tok, [tok(t)["input_ids"] for t in texts]


def _generate_greedy(model, tok, prompt_ids, max_new):
    ids = torch.tensor([prompt_ids])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                         pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    return new[:new.index(tok.eos_token_id)] if tok.eos_token_id in new else new


@pytest.mark.filterwarnings("error:.*past_key_values.*")  # the cache under its current name
def test_greedy_rows_of_a_left_padded_batch_equal_generate_one_at_a_time(model_and_prompts, monkeypatch):
    import memaudit.models.sampling as sampling
    from memaudit.models.sampling import sample

    joins = []
    real_join = sampling._join
    monkeypatch.setattr(sampling, "_join", lambda cache, mask, new_cache, new_mask: joins.append(
        (mask.shape[1], new_mask.shape[1])) or real_join(cache, mask, new_cache, new_mask))
    model, tok, prompts = model_and_prompts
    assert len({len(p) for p in prompts}) == 3  # left padding is exercised
    limits = [12, 20, 7]
    references = [_generate_greedy(model, tok, prompt, limit) for prompt, limit in zip(prompts, limits)]
    assert all(len(r) > 0 for r in references)
    # max_rows 64: one batch. max_rows 2, one sample each: prompt 2 joins the running row of
    # prompt 1 when prompt 0's row leaves (step 12), so their caches are aligned by left padding
    # and the padding-only columns cropped
    for max_rows, n in ((64, [2, 1, 3]), (2, [1, 1, 1])):
        ours = sample(model, prompts, n, limits, eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id,
                      temperature=0.0, max_rows=max_rows)
        assert [len(s) for s in ours] == n
        for reference, samples in zip(references, ours):
            for s in samples:  # rows leave the batch at different steps; the rest must be unaffected
                assert s == reference
    assert len(joins) == 1 and joins[0][0] != joins[0][1]  # a join of caches of different lengths


@pytest.mark.filterwarnings("error:.*past_key_values.*")  # the cache under its current name
def test_sampling_is_seeded_and_done_stops_a_row_early(model_and_prompts):
    from memaudit.models.sampling import sample

    model, tok, prompts = model_and_prompts
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=1.0, top_k=50)
    a = sample(model, prompts, [3, 3, 3], [15, 15, 15], seed=5, **kwargs)
    b = sample(model, prompts, [3, 3, 3], [15, 15, 15], seed=5, **kwargs)
    c = sample(model, prompts, [3, 3, 3], [15, 15, 15], seed=6, **kwargs)
    assert a == b and a != c
    assert len({tuple(s) for s in a[2]}) > 1  # three different samples from one shared prefill
    assert all(len(s) <= 15 for row in a for s in row)
    vocab = model.get_output_embeddings().weight.shape[0]
    assert all(0 <= t < vocab and t != tok.eos_token_id for row in a for s in row for t in s)
    stopped = sample(model, prompts, [2, 2, 2], [15, 15, 15], seed=5, check_every=1,
                     done=lambda i, ids: i == 1 and len(ids) >= 4, **kwargs)
    assert [len(s) for s in stopped[1]] == [4, 4]
    assert any(len(s) > 4 for s in stopped[0] + stopped[2])
    assert sample(model, prompts, [0, 0, 0], [5, 5, 5], **kwargs) == [[], [], []]
    with pytest.raises(ValueError, match="differ in length"):
        sample(model, prompts, [1], [5, 5, 5], **kwargs)
