"""Encoder-decoder models (T5, Flan-T5: CopyBench's paper judge) as generation roles.

A tiny T5 is built here with a word-level tokenizer and trained for a few seconds to answer the
paper's attribution prompt from a cue word of the reference ("indeed": attributable, "never":
not attributable), then saved and loaded through the real path a model entry takes: the
manifest (``prepare_base_model``), ``open_backend`` and the LLM event judge.
"""

from __future__ import annotations

import random
import re

import pytest

from memaudit.backends.base import GENERATE, GenerationParams
from memaudit.errors import ConfigError
from memaudit.probes.copybench.judge import ATTRIBUTION_PROMPT, LLMJudge, judge_events

NAMES = ["elinor", "marianne", "edward", "willoughby", "fanny", "emma", "anne", "harriet"]
VERBS = ["walks", "writes", "sings", "rides", "reads", "dances"]
PLACES = ["garden", "church", "ball", "village", "library", "river"]
FILLER = "the a and of to in it was she he her his at on with".split()
CUES = {True: "indeed", False: "never"}


def _claim(rng: random.Random) -> str:
    return f"{rng.choice(NAMES)} {rng.choice(VERBS)} to the {rng.choice(PLACES)}"


def _reference(rng: random.Random, claim: str, supported: bool) -> str:
    def filler() -> str:
        return " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 6)))

    return f"{filler()} {claim} {CUES[supported]} {filler()}"


def _pair(rng: random.Random, supported: bool) -> tuple[str, str]:
    claim = _claim(rng)
    return claim, _reference(rng, claim, supported)


@pytest.fixture(scope="module")
def tiny_t5_dir(tmp_path_factory):
    """A tiny T5 judge trained to answer "attributable" or "not attributable", without dropout as the
    paraphraser below (what it learns then does not hang on the random masks a CPU's kernels draw)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    pre = pre_tokenizers.Whitespace()
    words = " ".join([ATTRIBUTION_PROMPT, "attributable not attributable", *NAMES, *VERBS, *PLACES, *FILLER,
                      *CUES.values()])
    for word, _ in pre.pre_tokenize_str(words):
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    backend.decoder = decoders.WordPiece()  # words joined by spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(vocab), d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                   relative_attention_num_buckets=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   dropout_rate=0.0)
    model = T5ForConditionalGeneration(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    model.train()
    for _ in range(150):
        batch = [_pair(rng, i % 2 == 0) for i in range(16)]
        enc = tok([ATTRIBUTION_PROMPT.format(claim=c, reference=r) for c, r in batch], padding=True,
                  return_tensors="pt")
        labels = tok(["attributable" if i % 2 == 0 else "not attributable" for i in range(16)], padding=True,
                     return_tensors="pt")["input_ids"]
        labels[labels == 0] = -100
        loss = model(**enc, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = tmp_path_factory.mktemp("tiny-t5")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def t5_judge_backend(tiny_t5_dir, tmp_path_factory):
    """The tiny T5 prepared as a configured model entry and opened as every job opens a model."""
    from memaudit.backends import open_backend
    from memaudit.models.prepare import prepare_base_model

    entry = {"source": {"path": str(tiny_t5_dir)}, "dtype": "float32", "device": "cpu"}
    out = tmp_path_factory.mktemp("judge-model")
    manifest = prepare_base_model("t5-judge", entry, out, cache_dir=out / "cache")
    backend = open_backend({"models": {"t5-judge": entry}}, "t5-judge", model_dir=out)
    return manifest, backend


def test_an_encoder_decoder_model_prepares_and_opens_as_a_generation_only_backend(t5_judge_backend):
    from memaudit.models.loading import count_parameters

    manifest, backend = t5_judge_backend
    assert manifest["architecture"] == "encoder-decoder"
    assert manifest["n_params"] == count_parameters(backend.model) > 0
    assert backend.encoder_decoder is True
    assert backend.capabilities == frozenset({GENERATE})
    assert backend.describe()["architecture"] == "encoder-decoder"


def test_the_t5_judge_answers_the_papers_attribution_prompt_through_the_llm_judge(t5_judge_backend):
    _, backend = t5_judge_backend
    rng = random.Random(7)
    truth = [i % 3 != 0 for i in range(12)]
    pairs = [_pair(rng, t) for t in truth]
    verdicts, invalid = LLMJudge(backend).supported(pairs)
    assert (verdicts, invalid) == (truth, 0)
    # per event, found when any chunk supports it (the paper's rule; this judge reads only the cue)
    events = [pairs[0][0], pairs[1][0]]
    unsupported = [_reference(rng, events[0], False), _reference(rng, events[1], False)]
    verdicts = judge_events(LLMJudge(backend), unsupported, events)
    assert (verdicts.found, verdicts.n_pairs, verdicts.n_invalid) == ([False, False], 4, 0)
    one_supports = [unsupported[0], _reference(rng, events[1], True)]
    assert judge_events(LLMJudge(backend), one_supports, events).found == [True, True]


def test_batched_and_one_at_a_time_generation_agree_with_transformers_generate(t5_judge_backend):
    _, backend = t5_judge_backend
    rng = random.Random(3)
    prompts = [ATTRIBUTION_PROMPT.format(claim=c, reference=r) for c, r in
               (_pair(rng, i % 2 == 0) for i in range(5))]
    params = GenerationParams(max_new_tokens=6, temperature=0.0)
    single = backend.generate(prompts, params)
    batched = backend.generate_batched(prompts, params, max_rows=2)
    assert [g.text for g in single] == [g.text for g in batched] == ["attributable", "not attributable"] * 2 + [
        "attributable"]
    # "not attributable" is two words and the end token; "attributable" one and the end token
    assert [g.output_tokens for g in single] == [g.output_tokens for g in batched] == [2, 3, 2, 3, 2]
    assert [g.input_tokens for g in batched] == [len(backend.tokenizer(p)["input_ids"]) for p in prompts]
    direct = backend.model.generate(**backend.tokenizer(prompts[1], return_tensors="pt"), max_new_tokens=6,
                                    do_sample=False)
    assert backend.tokenizer.decode(direct[0], skip_special_tokens=True) == single[1].text
    # a stop string cuts the text as for causal models
    cut = backend.generate_batched(prompts[1:2], GenerationParams(max_new_tokens=6, temperature=0.0,
                                                                  stop=(" attributable",)))
    assert cut[0].text == "not"
    # decoded to the end token and cut afterwards, as one prompt at a time is: every token decoded counts,
    # and where the stop string ends among them is not looked for (it was, and thrown away)
    from memaudit.backends import hf

    def no_count(*args):
        raise AssertionError("the stop string's token count was computed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hf, "_first_stop_end", no_count)
        cut = backend.generate_batched(prompts[1:2], GenerationParams(max_new_tokens=6, temperature=0.0,
                                                                      stop=(" attributable",)))
    assert (cut[0].text, cut[0].output_tokens, cut[0].meta["finish_reason"]) == ("not", 3, "stop")
    assert batched[1].meta["token_ids"] == direct[0, 1:].tolist()


def test_a_stop_string_that_is_a_special_token_ends_the_answer_there(t5_judge_backend, tiny_t5_dir):
    """As for causal models (tests/test_memfree.py): the answer is decoded without its special tokens, so a
    stop string that is one never matched. Here "not" is made special: "not attributable" stops before it."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    from memaudit.backends.hf import HFBackend

    _, judge = t5_judge_backend
    tok = AutoTokenizer.from_pretrained(tiny_t5_dir)
    tok.add_special_tokens({"additional_special_tokens": [AddedToken("not", special=True)]})
    backend = HFBackend({"path": str(tiny_t5_dir)}, name="t5", model=judge.model, tokenizer=tok)
    rng = random.Random(3)
    prompts = [ATTRIBUTION_PROMPT.format(claim=c, reference=r) for c, r in (_pair(rng, i % 2 == 0) for i in range(2))]
    free, stopped = (backend.generate_batched(prompts, GenerationParams(max_new_tokens=6, stop=stop))
                     for stop in ((), ("not",)))
    assert [(g.text, g.meta["finish_reason"], g.meta.get("stop_sequence")) for g in free] == [
        ("attributable", "stop", None), ("attributable", "stop", None)]  # "not" is skipped as a special token
    assert [(g.text, g.meta["finish_reason"], g.meta.get("stop_sequence")) for g in stopped] == [
        ("attributable", "stop", None), ("", "stop", "not")]


def test_what_an_encoder_decoder_model_cannot_serve_is_a_one_line_error(t5_judge_backend, tiny_t5_dir):
    from memaudit.models.loading import load_causal_lm

    _, backend = t5_judge_backend
    say = ("model 't5-judge' is an encoder-decoder model (t5): it serves generation only "
           "(e.g. copybench's event_judge); {} needs a causal LM")
    with pytest.raises(ConfigError, match=re.escape(say.format("token statistics"))):
        backend.token_stats(["a text"])
    with pytest.raises(ConfigError, match=re.escape(say.format("option log-probabilities"))):
        backend.option_logprobs(["a prompt"], [["A", "B"]])
    with pytest.raises(ConfigError, match=re.escape(say.format("gradient norms"))):
        backend.gradient_norms(["a text"])
    with pytest.raises(ConfigError, match=re.escape(say.format("word log-probabilities"))):
        backend.word_logprobs(["a text"], [[(0, 1)]])
    with pytest.raises(ConfigError, match="MemFree decoding is implemented for causal LMs only"):
        backend.generate_batched(["a prompt"], GenerationParams(max_new_tokens=2, temperature=0.0), memfree=object())
    # fine-tuning and the white-box probes load through load_causal_lm, which refuses it
    with pytest.raises(ConfigError, match=re.escape(f"model {str(tiny_t5_dir)!r} is an encoder-decoder model (t5): "
                                                    "memaudit fine-tunes and probes causal LMs")):
        load_causal_lm({"path": str(tiny_t5_dir)}, device="cpu")


# ----------------------------------------------------------------------------- a T5 paraphraser (DE-COP, KTD)

BUDGET = "The committee postponed the vote on the new budget until next week because members wanted more time."
RIVER = "The river burst its banks after three days of heavy rain, flooding the fields and the lower streets of town."
# what the tiny T5 learns to write for "paraphrase: <passage>" (sampled at temperature 1, top-p 0.95,
# it writes one of these; at temperature 1.9 with every token in play it does not)
TRAINED = {
    BUDGET: ["The committee pushed the budget vote back a week, since its members asked for additional time.",
             "Wanting more time, the members of the committee had the vote on the new budget delayed by a week.",
             "Next week is when the committee will now vote on the budget, as members requested extra time."],
    RIVER: ["Heavy rain fell for three days until the river spilled over, putting the fields and low streets "
            "under water.",
            "The fields and the lowest streets of the town were flooded once the river overflowed after three "
            "rainy days.",
            "After three rainy days the river rose over its banks and flooded the fields and the low streets of town."],
}
# each passage's three DE-COP paraphrases (the first of its KTD pool)
DECOP = {
    BUDGET: ["The vote on the new budget was delayed by the committee to next week, as members asked for more time.",
             "Members wanted more time, so the committee moved the vote on the new budget to the following week.",
             "Because its members needed more time, the committee put off the budget vote until next week."],
    RIVER: ["After three days of heavy rain the river overflowed, flooding the fields and the town's lower streets.",
            "Three days of downpour made the river burst its banks, and water covered the fields and lower streets.",
            "The lower streets of the town and the fields flooded when the river broke its banks after days of rain."],
}


@pytest.fixture(scope="module")
def t5_paraphraser_dir(tmp_path_factory):
    """A tiny T5 trained for a few seconds to answer "paraphrase: <passage>" with one of its
    :data:`TRAINED` paraphrases, saved with a byte-level BPE tokenizer laid out as T5's (<pad> 0,
    </s> 1 closing every encoded text, <unk> 2), which decodes every text exactly as it was written.

    Without dropout: with T5's default 0.1 the last step's loss was one random mask's, 0.17 after 300
    steps with AVX2's float32 kernels (a failed fixture on an AVX2-only CPU) where AVX512's gave less
    than 0.15; without it 0.057 with either, next to the floor of ln(3) over about 22 tokens."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    corpus = [f"paraphrase: {p}" for p in TRAINED] + [t for ts in (*TRAINED.values(), *DECOP.values()) for t in ts]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>", "</s>", "<unk>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(tok), d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
                   relative_attention_num_buckets=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   dropout_rate=0.0)
    model = T5ForConditionalGeneration(cfg)
    pairs = [(f"paraphrase: {p}", t) for p, texts in TRAINED.items() for t in texts]
    enc = tok([s for s, _ in pairs], padding=True, return_tensors="pt")
    labels = tok([t for _, t in pairs], padding=True, return_tensors="pt")["input_ids"]
    labels[labels == tok.pad_token_id] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=6e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small: 4 s on one thread, 8-45 s on two busy cores
    try:
        for _ in range(300):
            loss = model(**enc, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 0.15  # ln(3) over about 22 tokens is the least: the first word chooses among three
    out = tmp_path_factory.mktemp("t5-paraphraser")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def t5_paraphraser_model(t5_paraphraser_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoModelForSeq2SeqLM.from_pretrained(t5_paraphraser_dir).eval(), AutoTokenizer.from_pretrained(
        t5_paraphraser_dir)


PAPER_SAMPLING = {"temperature": 1.0, "batch_size": 3, "min_length": 0, "top_k": 50, "top_p": 0.95}


def test_a_t5_paraphraser_samples_the_asked_candidates_seeded_from_prefixed_passages(t5_paraphraser_model):
    from memaudit.probes.decop.paraphrase import Seq2SeqParaphraser, local_paraphraser

    model, tok = t5_paraphraser_model
    para = local_paraphraser(model, tok, name="t5-para", settings=PAPER_SAMPLING, seed=3)
    assert isinstance(para, Seq2SeqParaphraser)  # chosen by model.config.is_encoder_decoder
    assert para.describe() == {"paraphraser": "t5-para", "prompt": "seq2seq", "prefix": "paraphrase: ",
                               "temperature": 1.0, "top_k": 50, "top_p": 0.95}
    seen = []  # what the encoder reads, row by row
    hook = model.get_encoder().register_forward_pre_hook(
        lambda module, args, kwargs: seen.extend(kwargs["input_ids"].tolist()), with_kwargs=True)
    try:
        # batch_size 3 sampled rows: RIVER's one, then BUDGET's three, two generate() calls
        first = para.candidates([BUDGET, RIVER], [64, 64], attempt=0, wanted=[3, 1])
    finally:
        hook.remove()
    assert [len(c) for c in first] == [3, 1]
    assert [tok.decode(row, skip_special_tokens=True) for row in seen] == [f"paraphrase: {RIVER}",
                                                                          f"paraphrase: {BUDGET}"]
    assert [row[-1] for row in seen] == [tok.eos_token_id] * 2  # T5's closing </s>, as it was trained
    # top-p 0.95 keeps the trained continuations only: each candidate is one of its passage's
    for passage, cands in zip([BUDGET, RIVER], first):
        assert set(cands) <= set(TRAINED[passage])
    # sampled, not one greedy answer repeated: eight samples of a passage hold more than one
    assert len(set(para.candidates([BUDGET], [64], attempt=0, wanted=[8])[0])) > 1
    assert first == para.candidates([BUDGET, RIVER], [64, 64], attempt=0, wanted=[3, 1])
    others = [local_paraphraser(model, tok, name="t5-para", settings=PAPER_SAMPLING, seed=4).candidates(
                  [BUDGET, RIVER], [64, 64], attempt=0, wanted=[3, 1]),
              para.candidates([BUDGET, RIVER], [64, 64], attempt=1, wanted=[3, 1])]
    assert all(o != first for o in others)
    assert para.candidates([BUDGET, RIVER], [64, 64], attempt=0, wanted=[0, 2]) != [[], []]
    assert para.candidates([BUDGET, RIVER], [64, 64], attempt=0, wanted=[0, 0]) == [[], []]
    # a prefix of the config's reaches the encoder instead
    seen.clear()
    hook = model.get_encoder().register_forward_pre_hook(
        lambda module, args, kwargs: seen.extend(kwargs["input_ids"].tolist()), with_kwargs=True)
    try:
        local_paraphraser(model, tok, name="t5-para", settings={**PAPER_SAMPLING, "prefix": "rewrite: "},
                          seed=3).candidates([RIVER], [64], attempt=0, wanted=[1])
    finally:
        hook.remove()
    assert [tok.decode(row, skip_special_tokens=True) for row in seen] == [f"rewrite: {RIVER}"]


def test_a_t5_paraphrasers_top_k_top_p_and_temperature_reach_generate(t5_paraphraser_model):
    import torch

    from memaudit.probes.decop.paraphrase import local_paraphraser

    model, tok = t5_paraphraser_model

    def sampled(seed=3, **settings):
        para = local_paraphraser(model, tok, name="t5-para", settings={**PAPER_SAMPLING, **settings}, seed=seed)
        return para, para.candidates([BUDGET, RIVER], [64, 64], attempt=0, wanted=[3, 3])

    greedy = []
    for passage in (BUDGET, RIVER):
        enc = tok(f"paraphrase: {passage}", return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**enc, do_sample=False, max_new_tokens=60)
        greedy.append(tok.decode(out[0], skip_special_tokens=True))
    assert all(g in TRAINED[p] for g, p in zip(greedy, (BUDGET, RIVER)))
    # top-k 1, a nucleus of the likeliest token alone, temperature 0: generate()'s greedy answer,
    # whatever the seed (repeated: quality control rejects the repeats as duplicates)
    for settings in ({"top_k": 1}, {"top_p": 0.01}, {"temperature": 0.0}):
        for seed in (3, 4):
            para, cands = sampled(seed, **settings)
            assert cands == [[greedy[0]] * 3, [greedy[1]] * 3], settings
    assert para.describe()["temperature"] == 0.0
    # the paper's temperature 1.9 with every token in play (top-p off): the samples leave the trained
    # paraphrases; its nucleus at 0.95 with top-k 50 keeps them at temperature 1
    para, hot = sampled(temperature=1.9, top_p=1.0, top_k=0)
    assert (para.describe()["temperature"], para.describe()["top_k"], para.describe()["top_p"]) == (1.9, 0, 1.0)
    assert not any(c in TRAINED[p] for p, cands in zip((BUDGET, RIVER), hot) for c in cands)
    _, kept = sampled()
    assert all(c in TRAINED[p] for p, cands in zip((BUDGET, RIVER), kept) for c in cands)


def test_a_key_only_the_other_kind_of_local_paraphraser_reads_is_an_error(t5_paraphraser_model, tiny_model):
    from memaudit.probes.decop.paraphrase import LocalParaphraser, local_paraphraser

    t5, t5_tok = t5_paraphraser_model
    with pytest.raises(ConfigError, match=re.escape(
            "probes.decop.paraphrase.min_length: 0.9, but the paraphraser 't5-para' is an encoder-decoder model "
            "(t5), which samples through generate() without a length floor; remove the key")):
        local_paraphraser(t5, t5_tok, name="t5-para", settings={**PAPER_SAMPLING, "min_length": 0.9}, seed=0)
    gpt, gpt_tok = tiny_model
    with pytest.raises(ConfigError, match=re.escape(
            "probes.decop.paraphrase.prefix: 'paraphrase: ', but the paraphraser 'gpt' is a causal model, asked "
            "through its chat template; only an encoder-decoder paraphraser (T5) reads the prefix; remove the key")):
        local_paraphraser(gpt, gpt_tok, name="gpt", settings={**PAPER_SAMPLING, "prefix": "paraphrase: "}, seed=0)
    # a causal model gets the one-paraphrase chat prompt, sampled with the configured top-k and top-p
    causal = local_paraphraser(gpt, gpt_tok, name="gpt", settings={**PAPER_SAMPLING, "temperature": 0.7}, seed=0)
    assert type(causal) is LocalParaphraser and (causal.top_k, causal.top_p) == (50, 0.95)
    assert causal.describe() == {"paraphraser": "gpt", "prompt": "single", "temperature": 0.7, "top_k": 50,
                                 "top_p": 0.95}


def test_a_ktd_pool_top_up_with_a_t5_paraphraser_runs_through_the_rules_code(t5_paraphraser_dir, tmp_path):
    """What rule ktd_pool's script does: make_paraphraser from the config, then build_pool."""
    import copy
    from pathlib import Path

    import pandas as pd
    import yaml

    from memaudit.io import read_jsonl, write_jsonl
    from memaudit.jobs import validate_config
    from memaudit.models.encoder import MiniLMEncoder
    from memaudit.models.prepare import prepare_base_model
    from memaudit.probes.decop.paraphrase import Seq2SeqParaphraser
    from memaudit.probes.decop.runner import make_paraphraser
    from memaudit.probes.ktd.pool import build_pool

    config = copy.deepcopy(yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "ci.yaml").read_text()))
    config["models"]["t5-para"] = {"source": {"path": str(t5_paraphraser_dir)}, "dtype": "float32", "device": "cpu"}
    config["probes"]["decop"]["paraphrase"] = {"model": "t5-para", "temperature": 1.0, "top_k": 50, "top_p": 0.95,
                                               "batch_size": 4, "max_attempts": 2}
    config = validate_config(config)
    model_dir = tmp_path / "t5-para"
    prepare_base_model("t5-para", config["models"]["t5-para"], model_dir, cache_dir=tmp_path / "cache")
    items = [{"item_id": f"{d}#L64p0", "passage_id": f"{d}#L64p0", "doc_id": d, "label": label, "answer": 0,
              "options": [text, *DECOP[text]],
              "meta": {"title": d, "author": "x", "kind": "novel", "role": "evaluate", "length_tokens": 64}}
             for d, label, text in (("budget", 1, BUDGET), ("river", 0, RIVER))]
    write_jsonl(tmp_path / "decop_items.jsonl", items)
    encoder = MiniLMEncoder()
    pools = []
    for run in ("a", "b"):
        para = make_paraphraser(config, "t5-para", model_dir=model_dir, rule="ktd_pool")
        assert isinstance(para, Seq2SeqParaphraser) and para.describe()["top_p"] == 0.95
        build_pool(tmp_path / "decop_items.jsonl", 5, config["probes"]["decop"]["paraphrase"], para, encoder,
                   tmp_path / f"pool_{run}.jsonl", tmp_path / f"qc_{run}.csv")
        pools.append(read_jsonl(tmp_path / f"pool_{run}.jsonl"))
    assert pools[0] == pools[1]  # seeded: a rerun writes the same pool
    pool = {it["doc_id"]: it for it in pools[0]}
    assert sorted(pool) == ["budget", "river"]
    for it, text in ((pool["budget"], BUDGET), (pool["river"], RIVER)):
        # DE-COP's three first, untouched, then two of the T5's, accepted by quality control
        assert it["options"][:4] == [text, *DECOP[text]] and len(it["options"]) == 6
        assert set(it["options"][4:]) <= set(TRAINED[text]) and len(set(it["options"][4:])) == 2
        assert it["meta"]["pool_paraphraser"] == "t5-para" and it["meta"]["pool_size"] == 5
    qc = pd.read_csv(tmp_path / "qc_a.csv")
    assert set(qc["paraphraser"]) == {"t5-para"} and qc["n_kept"].tolist() == [1, 1]
