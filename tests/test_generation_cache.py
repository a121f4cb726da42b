"""Greedy generations of local models cached by content (memaudit.backends.generation_cache): shared
across backend instances (jobs) and probes, never across weights, settings or MemFree decodings."""

from __future__ import annotations

import shutil
import sqlite3

from memaudit.backends import open_backend
from memaudit.backends.base import GenerationParams
from memaudit.io import read_jsonl, write_json

PROMPTS = ["The whale rose from the sea", "Mr Darcy bowed to her", "The oil price fell again"]


def _model_dir(tiny_model_dir, path):
    shutil.copytree(tiny_model_dir, path)
    write_json(path / "manifest.json", {"load": {"path": str(path)}})
    return path


def _open(model_dir, cache):
    config = {"generation_cache": str(cache) if cache else None,
              "models": {"tiny": {"dtype": "float32", "device": "cpu", "batch_size": 2}}}
    return open_backend(config, "tiny", model_dir=model_dir)


def _counting(backend) -> list[int]:
    """Rows each call of the backend's decoder decoded."""
    rows, decode = [], backend._decode_greedy

    def counted(encoded, params, **kw):
        rows.append(len(encoded))
        return decode(encoded, params, **kw)

    backend._decode_greedy = counted
    return rows


def _entries(cache) -> int:
    with sqlite3.connect(cache) as db:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def test_a_second_backend_reads_what_the_first_decoded_and_nothing_else(tiny_model_dir, tmp_path):
    cache = tmp_path / "generations.sqlite"
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    params = GenerationParams(max_new_tokens=12, repetition_penalty=1.1, chat=False)
    plain = _open(model_dir, None).generate_batched(PROMPTS, params)

    first = _open(model_dir, cache)
    decoded = _counting(first)
    out = first.generate_batched([*PROMPTS, PROMPTS[0]], params)
    assert decoded == [3] and _entries(cache) == 3  # the repeated prompt decoded once
    assert [g.text for g in out] == [g.text for g in plain] + [plain[0].text]
    assert not any(g.from_cache for g in out)
    first.close()

    second = _open(model_dir, cache)  # another job: a new process would open the same file
    decoded = _counting(second)
    again = second.generate_batched(PROMPTS, params)
    assert decoded == [] and all(g.from_cache for g in again)
    for a, b in zip(again, plain):
        assert (a.text, a.meta["token_ids"], a.input_tokens, a.output_tokens, a.status) == (
            b.text, b.meta["token_ids"], b.input_tokens, b.output_tokens, b.status)
        assert a.requested_at is not None

    # another token limit, repetition penalty or stop string is another request
    second.generate_batched(PROMPTS[:1], GenerationParams(max_new_tokens=13, repetition_penalty=1.1, chat=False))
    second.generate_batched(PROMPTS[:1], GenerationParams(max_new_tokens=12, chat=False))
    second.generate_batched(PROMPTS[:1], GenerationParams(max_new_tokens=12, repetition_penalty=1.1, chat=False,
                                                          stop=("\n\n\n",)))
    assert decoded == [1, 1, 1] and _entries(cache) == 6

    # MemFree decodings are never cached: their rejection corpus is part of the decoding
    from memaudit.probes.copybench.memfree import NGramIndex

    index = NGramIndex.build([[1, 2, 3, 4]], 3)
    second.generate_batched(PROMPTS, params, memfree=index)
    assert decoded == [1, 1, 1, 3] and _entries(cache) == 6
    second.close()


def test_each_chunk_of_prompts_is_stored_as_soon_as_it_is_decoded(tiny_model_dir, tmp_path, monkeypatch):
    """Every uncached prompt was decoded in one call and stored after it: a job killed an hour into 2,000 prompts
    kept none, and its rerun decoded them all again. Chunks of CHUNK_PROMPTS are decoded and stored in turn: a
    kill after the first keeps the first's, which the rerun reads back, with the same texts as in one call."""
    from memaudit.backends import generation_cache

    monkeypatch.setattr(generation_cache, "CHUNK_PROMPTS", 2)
    cache = tmp_path / "generations.sqlite"
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    params = GenerationParams(max_new_tokens=12, repetition_penalty=1.1, chat=False)
    plain = _open(model_dir, None).generate_batched(PROMPTS, params)

    class Killed(Exception):
        pass

    first = _open(model_dir, cache)
    decoded, decode = [], first._decode_greedy

    def killed_after_one_chunk(encoded, params, **kw):
        if decoded:
            raise Killed
        decoded.append(len(encoded))
        return decode(encoded, params, **kw)

    first._decode_greedy = killed_after_one_chunk
    try:
        first.generate_batched(PROMPTS, params)
    except Killed:
        pass
    else:
        raise AssertionError("the second chunk was not decoded")
    first.close()
    assert decoded == [2] and _entries(cache) == 2  # the first chunk's, kept
    rerun = _open(model_dir, cache)
    rows = _counting(rerun)
    out = rerun.generate_batched(PROMPTS, params)
    assert rows == [1] and [g.from_cache for g in out] == [True, True, False]
    assert [g.text for g in out] == [g.text for g in plain]
    rerun.close()


def test_other_weights_never_read_an_entry(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    cache = tmp_path / "generations.sqlite"
    params = GenerationParams(max_new_tokens=8, chat=False)
    same_path = _model_dir(tiny_model_dir, tmp_path / "m")
    _open(same_path, cache).generate_batched(PROMPTS, params)
    # the same directory re-trained in place (a fine-tune rerun): one weight changed
    model = AutoModelForCausalLM.from_pretrained(same_path)
    with torch.no_grad():
        next(model.parameters())[0, 0] += 0.5
    model.save_pretrained(same_path)
    retrained = _open(same_path, cache)
    decoded = _counting(retrained)
    assert not any(g.from_cache for g in retrained.generate_batched(PROMPTS, params))
    assert decoded == [3] and _entries(cache) == 6


def test_other_end_tokens_never_read_an_entry(tiny_model_dir, tmp_path):
    """The end tokens come from the model directory's generation_config.json, not its weights: a model
    whose end tokens changed decodes again and stops at its new one; unchanged end tokens read the entries."""
    import json

    cache = tmp_path / "generations.sqlite"
    params = GenerationParams(max_new_tokens=8, chat=False)
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    before = _open(model_dir, cache).generate_batched(PROMPTS, params)
    ids = before[0].meta["token_ids"]
    assert len(ids) == 8 and before[0].output_tokens == 8  # ran to its limit: no end token on the way
    # the third token generated becomes an end token too (a model's generation config naming another)
    config_path = model_dir / "generation_config.json"
    generation_config = json.loads(config_path.read_text())
    generation_config["eos_token_id"] = [generation_config["eos_token_id"], ids[2]]
    config_path.write_text(json.dumps(generation_config))
    ended = _open(model_dir, cache)
    decoded = _counting(ended)
    after = ended.generate_batched(PROMPTS, params)
    assert decoded == [3] and not any(g.from_cache for g in after) and _entries(cache) == 6
    # the new end token ends the row where it first comes (counted among the output tokens, as generate()
    # counts it)
    first = ids.index(ids[2])
    assert after[0].meta["token_ids"] == ids[:first] and after[0].output_tokens == first + 1
    assert after[0].meta["finish_reason"] == "stop"
    # unchanged end tokens: every entry is read back
    again = _open(model_dir, cache)
    decoded = _counting(again)
    assert all(g.from_cache for g in again.generate_batched(PROMPTS, params)) and decoded == []


def test_a_tokenizer_edited_at_the_same_size_never_reads_an_entry(tiny_model_dir, tmp_path):
    """The cached texts are decoded ids: a tokenizer.json whose decoder changed (same vocabulary size, same
    prompt ids) decodes again and its texts follow the new decoder, where the key held only the class and size."""
    import json

    cache = tmp_path / "generations.sqlite"
    params = GenerationParams(max_new_tokens=8, chat=False)
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    before = _open(model_dir, cache).generate_batched(PROMPTS, params)
    assert any("e" in g.text for g in before)
    path = model_dir / "tokenizer.json"
    definition = json.loads(path.read_text())
    definition["decoder"] = {"type": "Sequence", "decoders": [
        definition["decoder"], {"type": "Replace", "pattern": {"String": "e"}, "content": "E"}]}
    path.write_text(json.dumps(definition))
    edited = _open(model_dir, cache)
    decoded = _counting(edited)
    after = edited.generate_batched(PROMPTS, params)
    assert decoded == [3] and not any(g.from_cache for g in after) and _entries(cache) == 6
    assert [g.meta["token_ids"] for g in after] == [g.meta["token_ids"] for g in before]
    assert [g.text for g in after] == [g.text.replace("e", "E") for g in before]


def test_the_prefix_probe_and_copybench_literal_share_a_decoding(tiny_model_dir, tmp_path):
    """With CopyBench's decoding settings on the prefix probe, the bare prefix both show a local model
    is decoded once: the literal mode reads the prefix probe's continuation. Both builders cut the text as
    written, so a document's first passage gives the same prompt, paragraph break and all (a built literal
    item joined its words with spaces: no decoding was shared where the prefix held a line break)."""
    from memaudit.datasets.prefix import prefix_items
    from memaudit.datasets.types import Passage
    from memaudit.probes.copybench.build import literal_items
    from memaudit.probes.copybench.runner import _params as copybench_params
    from memaudit.probes.copybench.runner import generate as copybench_generate
    from memaudit.probes.prefix.runner import run_prefix_probe

    cache = tmp_path / "generations.sqlite"
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    first = [f"{p}.\n\nThen the story went on, and on, for a while" for p in PROMPTS[:2]]
    first.append(f"{PROMPTS[2]} and then the story went on for a while")
    # a benchmark's document is its passages joined by a line break (memaudit.datasets.build)
    documents = [{"doc_id": f"d{i}", "source": "s", "title": f"T{i}", "kind": "book", "meta": {"label": i % 2},
                  "text": f"{p}\nA second passage follows here."} for i, p in enumerate(first)]
    literal, _ = literal_items(documents, prefix_words=8, reference_words=4)
    items = [vars(it) for it in prefix_items([Passage(f"d{i}#p0", f"d{i}", i % 2, p) for i, p in enumerate(first)],
                                             prefix_words=8, continuation_words=4)]
    assert [it["prefix"] for it in literal] == [it["prefix"] for it in items] == [
        "The whale rose from the sea.\n\nThen the", "Mr Darcy bowed to her.\n\nThen the story",
        "The oil price fell again and then the"]
    copybench = {"literal_max_new_tokens": 16, "repetition_penalty": 1.1}
    prefix = {"max_new_tokens": 16, "repetition_penalty": 1.1, "stop": ["\n\n\n"],
              "instruction": "Please complete the following text with more than 150 words:"}
    probe = _open(model_dir, cache)
    run_prefix_probe(probe, items, prefix, chat=False, out_items=tmp_path / "items.jsonl",
                     out_documents=tmp_path / "docs.csv", out_outcomes=tmp_path / "outcomes.json")
    probe.close()
    written = read_jsonl(tmp_path / "items.jsonl")
    assert not any(r["from_cache"] for r in written)

    literal_backend = _open(model_dir, cache)
    decoded = _counting(literal_backend)
    generations = copybench_generate(literal_backend, [it["prefix"] for it in literal],
                                     copybench_params(copybench, "literal", chat=False, system=None))
    assert decoded == [] and all(g.from_cache for g in generations)
    assert [g.text for g in generations] == [r["generation"] for r in written]
    literal_backend.close()


def test_no_cache_configured_writes_nothing(tiny_model_dir, tmp_path):
    backend = _open(_model_dir(tiny_model_dir, tmp_path / "m"), None)
    backend.generate_batched(PROMPTS[:1], GenerationParams(max_new_tokens=4, chat=False))
    assert backend._generation_cache is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_cached_texts_refusal_status_follows_the_refusal_patterns_of_today(tiny_model_dir, tmp_path, monkeypatch):
    """The status is read from the text again, never from the cache: a text cached as 'ok' that today's
    patterns (memaudit.backends.refusal) call a refusal is a refusal, as the API cache's parse has it."""
    import re

    from memaudit.backends import refusal

    cache = tmp_path / "generations.sqlite"
    model_dir = _model_dir(tiny_model_dir, tmp_path / "m")
    params = GenerationParams(max_new_tokens=8, chat=False)
    first = _open(model_dir, cache)
    decoded = first.generate_batched(PROMPTS, params)
    first.close()
    assert [g.status for g in decoded] == ["ok"] * 3 and _entries(cache) == 3 and decoded[0].text[:12].strip()
    # today's patterns call the first text a refusal (a pattern added after it was cached)
    monkeypatch.setattr(refusal, "_REFUSAL_RE", re.compile(re.escape(decoded[0].text[:12]), re.IGNORECASE))
    read = _open(model_dir, cache).generate_batched(PROMPTS, params)
    assert all(g.from_cache for g in read) and [g.text for g in read] == [g.text for g in decoded]
    assert read[0].status == "refusal" and [g.status for g in read[1:]] == [
        "refusal" if decoded[0].text[:12].lower() in g.text.lower() else "ok" for g in decoded[1:]]
