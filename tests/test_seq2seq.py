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
                   relative_attention_num_buckets=16, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
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
    assert batched[1].meta["token_ids"] == direct[0, 1:].tolist()


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
