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


@pytest.mark.filterwarnings("error:.*past_key_values.*")
def test_prompts_sharing_a_prefix_prefill_it_once_and_sample_what_each_would_alone(model_and_prompts, monkeypatch):
    """A chat template's system turn and an instruction lead every paraphrase prompt: the prompts
    prefilled together run that prefix once (a batch of one), then only their own rest; each row
    still decodes what ``generate()`` gives for its prompt alone, and sampling draws the same
    tokens as without the sharing."""
    import memaudit.models.sampling as sampling
    from memaudit.models.forward import common_prefix_length

    model, tok, _ = model_and_prompts
    head = "Rewrite the following text using different words. Text:"
    prompts = [tok(head + t)["input_ids"] for t in (" It is a truth universally acknowledged",
                                                    " Call me Ishmael.", " The crude oil price rose sharply")]
    n = common_prefix_length(prompts)
    assert n >= 8 and len({len(p) for p in prompts}) == 3
    shapes, head_positions = [], []
    hooks = [model.register_forward_pre_hook(lambda module, args, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                             with_kwargs=True),
             model.get_output_embeddings().register_forward_pre_hook(
                 lambda module, args: head_positions.append(args[0].shape[1]))]
    try:
        limits = [9, 14, 6]
        greedy = sampling.sample(model, prompts, [2, 1, 1], limits, eos_ids=[tok.eos_token_id],
                                 pad_id=tok.eos_token_id, temperature=0.0)
    finally:
        for hook in hooks:
            hook.remove()
    # the prefix once, then each prompt's rest left-padded to the longest rest, then one token a step
    assert shapes[:2] == [(1, n), (3, max(len(p) for p in prompts) - n)]
    assert all(shape[1] == 1 for shape in shapes[2:])
    # only the last position of a prefill goes through the output layer (logits_to_keep=1)
    assert head_positions == [1] * len(shapes)
    for prompt, limit, samples in zip(prompts, limits, greedy):
        reference = _generate_greedy(model, tok, prompt, limit)
        assert reference and all(s == reference for s in samples)
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=1.0, top_k=50, seed=3, max_rows=3)
    shared = sampling.sample(model, prompts, [2, 2, 2], [12, 12, 12], **kwargs)
    monkeypatch.setattr(sampling, "common_prefix_length", lambda *a, **k: 0)
    assert sampling.sample(model, prompts, [2, 2, 2], [12, 12, 12], **kwargs) == shared


@pytest.mark.filterwarnings("error:.*past_key_values.*")
def test_growing_cache_writes_steps_in_place_and_samples_what_a_dynamic_cache_samples(model_and_prompts, monkeypatch):
    """The sampler's cache (spare columns, a step's key/value written in place) against
    transformers' DynamicCache (a torch.cat of the whole cache each step): the same tokens,
    through rows leaving, a join and padding crops; and far fewer buffers than steps."""
    from transformers import DynamicCache

    import memaudit.models.sampling as sampling

    model, tok, prompts = model_and_prompts
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=1.0, top_k=50, seed=11,
                  max_rows=4, done=lambda i, ids: len(ids) >= 6 + 5 * i)
    layer_class = sampling._growing_layer_class
    allocations, updates = [], []

    def counting_class():
        cls = layer_class()

        class Counting(cls):
            def update(self, key_states, value_states, *args, **kw):
                before = self._kbuf
                out = super().update(key_states, value_states, *args, **kw)
                updates.append(1)
                if self._kbuf is not before:
                    allocations.append(self._kbuf.shape[-2])
                assert out[0].shape[-2] == out[1].shape[-2] and torch.equal(out[0], self.keys)
                return out

        return Counting

    monkeypatch.setattr(sampling, "_growing_layer_class", counting_class)
    ours = sampling.sample(model, prompts, [2, 3, 2], [25, 25, 25], **kwargs)
    monkeypatch.setattr(sampling, "_growing_cache", DynamicCache)
    theirs = sampling.sample(model, prompts, [2, 3, 2], [25, 25, 25], **kwargs)
    assert ours == theirs
    assert sum(len(s) for samples in ours for s in samples) > 40
    n_layers = model.config.num_hidden_layers
    steps = len(updates) // n_layers
    assert steps > 25 and len(updates) % n_layers == 0
    # a layer's buffer is rebuilt at a prefill, a join, a crop or when full; never at most steps
    assert len(allocations) / n_layers < steps / 3, (len(allocations) / n_layers, steps)


def test_growing_layer_keeps_exactly_what_a_dynamic_layer_keeps():
    """update, a row selection and an outside replacement of keys (the sampler's join and crop)."""
    from transformers.cache_utils import DynamicLayer

    from memaudit.models.sampling import _growing_layer_class

    ours, theirs = _growing_layer_class()(), DynamicLayer()
    g = torch.Generator().manual_seed(0)
    for step, q in enumerate([5, 1, 1, 30, 1, 1]):
        k, v = torch.randn(3, 2, q, 4, generator=g), torch.randn(3, 2, q, 4, generator=g)
        a, b = ours.update(k, v), theirs.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        if step == 2:
            for layer in (ours, theirs):
                layer.batch_select_indices(torch.tensor([0, 2, 1]))
        if step == 3:
            for layer in (ours, theirs):
                layer.keys, layer.values = layer.keys[:, :, 2:], layer.values[:, :, 2:]
    assert ours.get_seq_length() == theirs.get_seq_length() == 37
    assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)


def test_min_new_tokens_holds_back_the_end_tokens_as_generate_does(model_and_prompts):
    """Greedy with an end token the model picks early: ``min_new_tokens`` keeps a row going as
    transformers' ``min_new_tokens`` does (the same tokens), and without it the row ends there."""
    from memaudit.models.sampling import sample

    model, tok, prompts = model_and_prompts
    reference = _generate_greedy(model, tok, prompts[0], 12)
    end = reference[2]  # greedy picks it third: as an end token it ends the sample after two
    assert end not in reference[:2]
    kwargs = dict(eos_ids=[end], pad_id=tok.eos_token_id, temperature=0.0)
    free = sample(model, prompts[:2], [1, 1], [12, 12], **kwargs)
    assert free[0][0] == reference[:2]
    held = sample(model, prompts[:2], [1, 1], [12, 12], min_new_tokens=[6, 0], **kwargs)
    ids = torch.tensor([prompts[0]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, min_new_tokens=6,
                         do_sample=False, pad_token_id=tok.eos_token_id, eos_token_id=end)
    expected = out[0, ids.shape[1]:].tolist()
    expected = expected[:expected.index(end)] if end in expected else expected
    assert len(expected) >= 6 and held[0][0] == expected
    assert end not in held[0][0][:6]
    assert held[1] == free[1]  # a floor of 0 changes nothing


def test_barred_ids_are_held_back_until_the_floor_and_only_for_their_prompt(model_and_prompts):
    """Greedy with the token the model repeats barred for 8 steps: what generate() gives with a
    logits processor that bars it as long, and the other prompt's row is untouched."""
    from transformers import LogitsProcessor, LogitsProcessorList

    from memaudit.models.sampling import sample

    model, tok, prompts = model_and_prompts
    reference = _generate_greedy(model, tok, prompts[1], 12)
    barred = reference[0]

    class Bar(LogitsProcessor):
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] - len(prompts[1]) < 8:
                scores[:, barred] = float("-inf")
            return scores

    ids = torch.tensor([prompts[1]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                         pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                         logits_processor=LogitsProcessorList([Bar()]))
    expected = out[0, ids.shape[1]:].tolist()
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=0.0)
    ours = sample(model, prompts[1:], [1, 1], [12, 12], min_new_tokens=[8, 8], barred_ids=[[barred], []], **kwargs)
    assert ours[0][0] == expected[:len(ours[0][0])] and len(ours[0][0]) == 12
    assert barred not in ours[0][0][:8] and ours[0][0] != reference
    assert ours[1][0] == _generate_greedy(model, tok, prompts[2], 12)
    with pytest.raises(ValueError, match="give both"):
        sample(model, prompts[1:], [1, 1], [12, 12], barred_ids=[[barred], []], **kwargs)


def test_top_p_draws_from_the_nucleus_generate_would_keep():
    """``_next_tokens`` with top-p against transformers' warpers in generate()'s order (temperature,
    top-k, top-p): the same tokens possible, each as often (20,000 draws a row); top-p 1.0 is off."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from memaudit.models.sampling import _next_tokens

    logits = torch.randn(4, 40, generator=torch.Generator().manual_seed(0)) * 2
    n = 20000
    for temperature, top_k, top_p in ((1.0, 50, 0.5), (1.9, 10, 0.95), (0.7, 0, 0.8), (1.9, 50, 0.95)):
        warped = TemperatureLogitsWarper(temperature)(None, logits.clone())
        if top_k:
            warped = TopKLogitsWarper(top_k)(None, warped)
        reference = torch.softmax(TopPLogitsWarper(top_p)(None, warped), -1)
        drawn = _next_tokens(logits.repeat_interleave(n, 0), temperature, top_k,
                             torch.Generator().manual_seed(1), top_p).view(4, n)
        freq = torch.stack([torch.bincount(row, minlength=40) for row in drawn]).double() / n
        assert not ((freq > 0) & (reference == 0)).any()  # nothing outside the nucleus
        assert (freq - reference).abs().max() < 0.015, (temperature, top_k, top_p)
        assert (reference > 0).sum(1).max() > 1  # a nucleus of several tokens was sampled from
    off = _next_tokens(logits, 1.0, 50, torch.Generator().manual_seed(2))
    assert torch.equal(_next_tokens(logits, 1.0, 50, torch.Generator().manual_seed(2), 1.0), off)


def test_top_p_reaches_the_sampler_and_a_tiny_nucleus_is_greedy(model_and_prompts):
    from memaudit.models.sampling import sample

    model, tok, prompts = model_and_prompts
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=1.0, top_k=50, seed=5)
    greedy = [_generate_greedy(model, tok, p, 10) for p in prompts]
    assert sample(model, prompts, [2, 2, 2], [10, 10, 10], top_p=1e-6, **kwargs) == [[g, g] for g in greedy]
    wide = sample(model, prompts, [2, 2, 2], [10, 10, 10], **kwargs)
    assert sample(model, prompts, [2, 2, 2], [10, 10, 10], top_p=1.0, **kwargs) == wide
    assert sample(model, prompts, [2, 2, 2], [10, 10, 10], top_p=0.5, **kwargs) != wide


def test_a_token_limit_below_one_is_refused_not_given_a_token(model_and_prompts):
    """A row's first token was appended before its limit was compared: ``max_new_tokens`` 0 returned one
    token. Configs (the schema's minimum 1), ``memaudit serve`` and the paraphrasers never ask for fewer
    than 1, and ``generate()`` refuses 0 too, so a limit below 1 is a caller's bug: a ValueError naming it."""
    from memaudit.models.sampling import sample

    model, tok, prompts = model_and_prompts
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=0.0)
    for limit in (0, -2):
        with pytest.raises(ValueError) as err:
            sample(model, prompts, [1, 1, 1], [5, limit, 5], **kwargs)
        assert str(err.value) == f"max_new_tokens must be at least 1: prompt 1 asks for {limit}"
    assert [len(s[0]) for s in sample(model, prompts, [1, 1, 1], [1, 1, 1], **kwargs)] == [1, 1, 1]
