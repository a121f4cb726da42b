"""MemFree decoding (memaudit.probes.copybench.memfree) and greedy decoding with a repetition penalty
in the continuous-batching sampler and HFBackend.generate_batched, against transformers' generate()."""

from __future__ import annotations

import pytest
import torch

from memaudit.probes.copybench.memfree import MemFreeLogitsProcessor, NGramIndex, text_ngram_overlap

PENALTY = 1.1  # CopyBench App. B.1

# prompts of different lengths (left padding and joins of caches are exercised)
TEXTS = ["It is a truth universally", "Call me Ishmael. Some years ago, never mind",
         "The crude oil price rose sharply on Monday after the cartel announced new", "Emma"]


# -- the index, on hand-made sequences ---------------------------------------------------------

def test_ngram_index_blocked_sets_and_positions_by_hand():
    index = NGramIndex.build([[1, 2, 3, 4, 5], [2, 3, 4, 9], [7, 1, 2, 3]], 3)
    # trigrams: 123 234 345 | 234 349 | 712 123 -> prefixes 12:{3} 23:{4} 34:{5,9} 71:{2}
    assert len(index) == 5
    assert index.describe()["n_prefixes"] == 4 and index.describe()["bytes"] > 0
    assert index.blocked([0, 3, 4]) == {5, 9}
    assert index.blocked([5, 7, 1]) == {2}
    assert index.blocked([2, 3]) == {4}
    assert index.blocked([4, 9]) == set()  # n-grams do not cross sequences (349 then 712)
    assert index.blocked([3]) == set()  # shorter than n-1
    assert index.blocked([3, 2]) == set()
    assert index.contains_ngram([0, 1, 2, 3, 4, 9, 3, 4]) == [1, 2, 3]
    assert index.contains_ngram([4, 9, 7, 1]) == []
    assert index.contains_ngram([1, 2]) == []

    unigrams = NGramIndex.build([[5, 6], [6]], 1)
    assert len(unigrams) == 2 and unigrams.blocked([]) == {5, 6} and unigrams.blocked([1, 2]) == {5, 6}
    assert unigrams.contains_ngram([6, 7, 5]) == [0, 2]
    with pytest.raises(ValueError):
        NGramIndex(0)


def test_blocked_tokens_get_minus_infinity_per_row():
    index = NGramIndex.build([[1, 2, 3, 4, 5], [2, 3, 4, 9], [7, 1, 2, 3]], 3)
    logits = torch.zeros(3, 10)
    out = index.mask_logits([[0, 3, 4], [9], [6, 1, 2]], logits)
    expected = torch.zeros(3, 10)
    expected[0, [5, 9]] = float("-inf")
    expected[2, 3] = float("-inf")
    assert torch.equal(out, expected)
    # the logits processor reads each row's last n-1 input ids, the prompt included
    scores = MemFreeLogitsProcessor(index)(torch.tensor([[8, 8, 3, 4], [5, 7, 1, 2]]), torch.zeros(2, 10))
    assert torch.isinf(scores).nonzero().tolist() == [[0, 5], [0, 9], [1, 3]]


def test_text_overlap_reads_the_tokenizers_own_split(tiny_model):
    _, tok = tiny_model
    index = NGramIndex.build([tok("never mind how long precisely", add_special_tokens=False)["input_ids"]], 3)
    text = "Call me Ishmael. Some years ago, never mind how long precisely, having"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    overlap = text_ngram_overlap(text, index, tok)
    assert overlap.positions == tuple(index.contains_ngram(ids)) and len(overlap.positions) >= 2
    assert overlap.n_windows == len(ids) - 2 and overlap.fraction == len(overlap.positions) / (len(ids) - 2)
    assert all(g in text for g in overlap.ngrams)
    # the same text spelt one character a token: no corpus n-gram among those ids, yet its text has them
    spelt = [i for c in text for i in tok(c, add_special_tokens=False)["input_ids"]]
    assert tok.decode(spelt) == text and len(spelt) > len(ids)
    assert index.contains_ngram(spelt) == []
    assert text_ngram_overlap(tok.decode(spelt), index, tok).positions == overlap.positions


# -- greedy decoding with a repetition penalty ---------------------------------------------------

def _generate_one(model, tok, prompt_ids, max_new, **kwargs) -> list[int]:
    """generate() on one prompt (no padding), end token dropped."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                             pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, **kwargs)
    new = out[0, ids.shape[1]:].tolist()
    return new[:new.index(tok.eos_token_id)] if tok.eos_token_id in new else new


@pytest.fixture(scope="module")
def setup(tiny_model):
    model, tok = tiny_model
    assert next(model.parameters()).dtype == torch.float32
    from memaudit.models.token_stats import encode

    # as HFBackend tokenises a plain-text prompt: after the context token (token_stats.encode)
    prompts = [encode(tok, t, max_tokens=None) for t in TEXTS]
    assert len({len(p) for p in prompts}) == len(prompts)
    return model, tok, prompts


def test_greedy_sample_with_repetition_penalty_equals_generate(setup):
    from memaudit.models.sampling import sample

    model, tok, prompts = setup
    limits = [30, 12, 25, 30]
    references = [_generate_one(model, tok, p, m, repetition_penalty=PENALTY) for p, m in zip(prompts, limits)]
    plain = [_generate_one(model, tok, p, m) for p, m in zip(prompts, limits)]
    assert references != plain  # the penalty changes tokens here, so the comparison below can fail
    kwargs = dict(eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id, temperature=0.0, repetition_penalty=PENALTY)
    for max_rows in (64, 2):  # one batch; rows joining a running batch
        ours = sample(model, prompts, [1] * len(prompts), limits, max_rows=max_rows, **kwargs)
        assert [s[0] for s in ours] == references
    # the default (no penalty) is untouched
    assert [s[0] for s in sample(model, prompts, [1] * 4, limits, eos_ids=[tok.eos_token_id],
                                 pad_id=tok.eos_token_id, temperature=0.0)] == plain


def test_the_processor_sees_each_rows_prompt_and_generated_tokens(setup):
    from memaudit.models.sampling import sample

    model, tok, prompts = setup
    seen: list[tuple[int, ...]] = []

    def record(histories, logits):
        assert len(histories) == logits.shape[0]
        seen.extend(tuple(h) for h in histories)
        return logits

    out = sample(model, prompts, [1] * 4, [6] * 4, eos_ids=[tok.eos_token_id], pad_id=tok.eos_token_id,
                 temperature=0.0, max_rows=2, processor=record)
    expected = {tuple(p) + tuple(o[0][:t]) for p, o in zip(prompts, out) for t in range(len(o[0]))}
    assert set(seen) == expected and len(seen) == len(expected)


@pytest.fixture(scope="module")
def backend(tiny_model_dir, setup):
    from memaudit.backends.hf import HFBackend

    model, tok, _ = setup
    return HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok)


def test_generate_batched_equals_generate(backend):
    from memaudit.backends.base import GenerationParams

    params = GenerationParams(max_new_tokens=24, repetition_penalty=PENALTY, chat=False)
    reference = backend.generate(TEXTS, params)
    ours = backend.generate_batched(TEXTS, params, max_rows=2)
    assert [g.text for g in ours] == [g.text for g in reference]
    assert all(g.text for g in ours)
    for a, b in zip(ours, reference):
        # generate_batched also returns the emitted token ids (end token excluded), which MemFree's check reads
        meta = {k: v for k, v in a.meta.items() if k != "token_ids"}
        assert (a.input_tokens, a.output_tokens, meta, a.status) == (b.input_tokens, b.output_tokens, b.meta, b.status)
        assert a.output_tokens - len(a.meta["token_ids"]) in (0, 1)

    # a stop string: the same text, cut at it; the row stopped there instead of running on
    text = reference[2].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    stopped_params = GenerationParams(max_new_tokens=24, repetition_penalty=PENALTY, chat=False, stop=(stop,))
    reference = backend.generate(TEXTS, stopped_params)
    ours = backend.generate_batched(TEXTS, stopped_params)
    assert [g.text for g in ours] == [g.text for g in reference]
    assert stop not in ours[2].text and len(ours[2].text) < len(text)
    assert ours[2].output_tokens < reference[2].output_tokens and ours[2].meta["finish_reason"] == "stop"
    with pytest.raises(ValueError, match="temperature"):
        backend.generate_batched(TEXTS, GenerationParams(temperature=0.7))


def test_a_row_cut_at_a_stop_string_counts_the_tokens_up_to_it_not_up_to_the_check(tiny_backend):
    """A stop string is looked for every 4 steps, so a row ran up to 3 tokens past it: they were counted in
    ``output_tokens`` and kept in ``token_ids`` (which MemFree's check reads). The tiny GPT-2 repeats its
    second token from then on; a stop string that is that token ends the row after 2 tokens, not 4."""
    from memaudit.backends.base import GenerationParams

    free = tiny_backend.generate_batched(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False))[0]
    ids = free.meta["token_ids"]
    assert ids[1] == ids[2] == ids[3] != ids[0]
    head, word = (tiny_backend.tokenizer.decode(ids[i:i + 1]) for i in (0, 1))
    for stop, n in ((word, 2), (word * 2, 3)):
        g = tiny_backend.generate_batched(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False, stop=(stop,)))[0]
        assert (g.text, g.output_tokens, g.meta["token_ids"], g.meta["finish_reason"]) == (head, n, ids[:n], "stop")


def test_one_prompt_at_a_time_cut_at_a_stop_string_counts_every_token_decoded_and_no_stop_position(
        tiny_backend, monkeypatch):
    """One prompt at a time decodes to its token limit and is cut afterwards: ``output_tokens`` counts every
    token decoded (the docs' contract), so where the stop string ends among them is not looked for (that
    count, a binary search of decodes, was computed and thrown away)."""
    from memaudit.backends import hf
    from memaudit.backends.base import GenerationParams

    free = tiny_backend.generate_batched(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False))[0]
    ids = free.meta["token_ids"]
    head, word = (tiny_backend.tokenizer.decode(ids[i:i + 1]) for i in (0, 1))

    def no_count(*args):
        raise AssertionError("the stop string's token count was computed")

    monkeypatch.setattr(hf, "_first_stop_end", no_count)
    g = tiny_backend.generate(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False, stop=(word,)))[0]
    assert (g.text, g.output_tokens, g.meta) == (head, 12, {"finish_reason": "stop", "stop_sequence": word})
    assert hf.cut_answer(tiny_backend.tokenizer, ids, [word], count=False) == (head, word, None)


def test_a_stop_string_that_is_a_special_token_stops_at_that_token(tiny_backend):
    """A stop string that is one of the tokenizer's special tokens (a config's ``"<|im_end|>"``) never
    matched: answers are decoded without their special tokens, so it was never in the text and the answer
    ran to its token limit. The tiny GPT-2 repeats its second token from then on; marked special, that
    token as a stop string ends the answer there, both ways (one prompt at a time decodes on and is cut)."""
    from tokenizers import AddedToken

    from memaudit.backends.base import GenerationParams

    tok = tiny_backend.tokenizer
    ids = tiny_backend.generate_batched(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False))[0].meta["token_ids"]
    assert ids[1] == ids[2] == ids[3] != ids[0]
    piece = tok.convert_ids_to_tokens(ids[1])
    tok.add_special_tokens({"additional_special_tokens": [AddedToken(piece, special=True)]})
    assert tok.convert_tokens_to_ids(piece) == ids[1] and tok.decode(ids[:4], skip_special_tokens=True) == tok.decode(
        ids[:1])
    params = GenerationParams(max_new_tokens=12, chat=False, stop=("\n\n\n", piece))
    batched = tiny_backend.generate_batched(TEXTS[:1], params)[0]
    assert (batched.text, batched.output_tokens, batched.meta) == (
        tok.decode(ids[:1]), 2, {"finish_reason": "stop", "stop_sequence": piece, "token_ids": ids[:2]})
    one = tiny_backend.generate(TEXTS[:1], params)[0]
    assert (one.text, one.output_tokens, one.meta) == (
        tok.decode(ids[:1]), 12, {"finish_reason": "stop", "stop_sequence": piece})


def test_an_end_token_at_the_token_limit_finishes_with_stop_not_length(tiny_backend):
    """An answer whose end token is the last token ``max_new_tokens`` allows ended by itself:
    ``finish_reason`` is ``stop`` (as OpenAI and vLLM say it), both ways; it used to be ``length``.
    The tiny GPT-2 never ends, so a token it emits greedily is made its end token."""
    from memaudit.backends.base import GenerationParams

    backend = tiny_backend
    free = backend.generate_batched(TEXTS[:1], GenerationParams(max_new_tokens=12, chat=False))[0].meta["token_ids"]
    k = next(i for i in range(1, len(free)) if free[i] not in free[:i])  # its first emission
    backend.model.generation_config.eos_token_id = free[k]
    for limit, reason in ((k + 1, "stop"), (k + 2, "stop"), (k, "length")):
        params = GenerationParams(max_new_tokens=limit, chat=False)
        for g in (backend.generate(TEXTS[:1], params)[0], backend.generate_batched(TEXTS[:1], params)[0]):
            assert (g.output_tokens, g.meta["finish_reason"]) == (min(limit, k + 1), reason)
            # the end token (not a special token here) is no part of the text: generate() decoded it too
            assert g.text == backend.tokenizer.decode(free[:min(limit, k)])


def test_a_sampled_answer_takes_any_64_bit_seed(tiny_backend):
    """``memaudit serve`` passes a request's seed on: one of 2**50 used to overflow ``torch.manual_seed``
    (a ValueError, HTTP 400 "Overflow when unpacking long long"); the seeds that worked draw as before."""
    import torch

    from memaudit.backends.base import GenerationParams

    def answer(seed: int) -> str:
        return tiny_backend.generate(TEXTS[:1], GenerationParams(max_new_tokens=8, chat=False, temperature=1.0,
                                                                 seed=seed))[0].text

    assert answer(2**50) == answer(2**50) != answer(2**50 + 1)
    torch.manual_seed(-5 * 1000003)  # a negative seed as it was drawn before: torch's own reading of it
    ids = tiny_backend.model.generate(torch.tensor([tiny_backend._prompt_ids(TEXTS[0], GenerationParams(chat=False))]),
                                      max_new_tokens=8, do_sample=True, temperature=1.0, top_p=1.0,
                                      pad_token_id=tiny_backend.tokenizer.pad_token_id)
    assert answer(-5) == tiny_backend.tokenizer.decode(ids[0, -8:], skip_special_tokens=True)


# -- MemFree -----------------------------------------------------------------------------------

def _windows_ending_in_output(index: NGramIndex, prompt: list[int], out: list[int]) -> list[int]:
    """Corpus n-grams of prompt + output that end in an output token (those MemFree can prevent)."""
    first = len(prompt) - index.n + 1
    return [i for i in index.contains_ngram(prompt + out) if i >= first]


def test_memfree_output_contains_no_corpus_ngram(setup, backend):
    from memaudit.backends.base import GenerationParams
    from memaudit.models.sampling import sample
    from transformers import LogitsProcessorList

    model, tok, prompts = setup
    limit = 30
    # rejection corpus: the model's own greedy continuations, so that plain decoding copies it
    plain = [_generate_one(model, tok, p, limit, repetition_penalty=PENALTY) for p in prompts]
    index = NGramIndex.build(plain, 4)
    assert all(len(index.contains_ngram(o)) == len(o) - 3 > 0 for o in plain)

    ours = [s[0] for s in sample(model, prompts, [1] * 4, [limit] * 4, eos_ids=[tok.eos_token_id],
                                 pad_id=tok.eos_token_id, temperature=0.0, max_rows=2,
                                 repetition_penalty=PENALTY, processor=index.mask_logits)]
    processor = LogitsProcessorList([MemFreeLogitsProcessor(index)])
    reference = [_generate_one(model, tok, p, limit, repetition_penalty=PENALTY, logits_processor=processor)
                 for p in prompts]
    assert ours == reference
    for p, out, before in zip(prompts, ours, plain):
        assert out != before and len(out) >= 10
        # exhaustive: every window of the generated tokens, and of the prompt's tail followed by them
        assert index.contains_ngram(out) == []
        assert _windows_ending_in_output(index, p, out) == []

    params = GenerationParams(max_new_tokens=limit, repetition_penalty=PENALTY, chat=False)
    texts = [g.text for g in backend.generate_batched(TEXTS, params, memfree=index, max_rows=3)]
    assert texts == [tok.decode(o, skip_special_tokens=True) for o in ours]


def test_memfree_counts_the_prompt(setup):
    from memaudit.models.sampling import sample
    from transformers import LogitsProcessorList

    model, tok, prompts = setup
    prompts = [p for p in prompts if len(p) >= 4]
    assert len(prompts) == 3
    plain = [_generate_one(model, tok, p, 5, repetition_penalty=PENALTY) for p in prompts]
    # the corpus holds each prompt's last three tokens followed by the model's first greedy token
    index = NGramIndex.build([p[-3:] + o[:1] for p, o in zip(prompts, plain)], 4)
    ours = [s[0] for s in sample(model, prompts, [1] * 3, [5] * 3, eos_ids=[tok.eos_token_id],
                                 pad_id=tok.eos_token_id, temperature=0.0, repetition_penalty=PENALTY,
                                 processor=index.mask_logits)]
    processor = LogitsProcessorList([MemFreeLogitsProcessor(index)])
    reference = [_generate_one(model, tok, p, 5, repetition_penalty=PENALTY, logits_processor=processor)
                 for p in prompts]
    assert ours == reference
    assert all(o[0] != b[0] for o, b in zip(ours, plain))


def test_memfree_index_refuses_a_verbatim_continuation_from_its_first_ngram(tiny_backend):
    """A literal reference is the text after the prompt's prefix: the model writes its first word after
    a space. Tokenised alone (the reference code's way) the index never holds that first n-gram."""
    from memaudit.probes.copybench.runner import memfree_index

    tok = tiny_backend.tokenizer
    prefix, reference = "Call me Ishmael. Some years ago,", "never mind how long precisely, having little"
    whole = tok(prefix + " " + reference, add_special_tokens=False)["input_ids"]
    head = tok(prefix, add_special_tokens=False)["input_ids"]
    assert whole[:len(head)] == head
    written = whole[len(head):]  # the verbatim continuation's tokens, as a model emits them
    alone = NGramIndex.build([tok(reference, add_special_tokens=False)["input_ids"]], 3)
    assert written[0] != tok(reference, add_special_tokens=False)["input_ids"][0]  # " never" is not "never"
    assert 0 not in alone.contains_ngram(written)  # the old index let the first n-gram through
    index = memfree_index(tiny_backend, [reference], 3)
    assert index.contains_ngram(written) == list(range(len(written) - 2))  # every window, the first included
    assert index.blocked(written[:2]) == frozenset({written[2]})
    assert set(alone.contains_ngram(written)) < set(index.contains_ngram(written))
    # a text that already starts with a space is indexed once
    assert len(memfree_index(tiny_backend, [" " + reference], 3)) == len(NGramIndex.build(
        [tok(" " + reference, add_special_tokens=False)["input_ids"]], 3))
