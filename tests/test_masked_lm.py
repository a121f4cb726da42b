"""A masked LM (the information-guided probes' BERT) as the cloze probes' reference model.

A randomly initialised 2-layer BERT with its own WordPiece vocabulary stands in for
``bert-base-uncased``: the same classes (``BertForMaskedLM``, ``BertTokenizerFast``) and files a
hub download gives, loaded through the same code.
"""

from __future__ import annotations

import re

import pytest

from conftest import TINY_TEXTS
from memaudit.errors import ConfigError

TEXT = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "
        "I thought I would sail about a little and see the watery part of the world.")


def _spans(text: str, words: list[str]) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for w in words for m in [re.search(rf"\b{re.escape(w)}\b", text)]]


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    import torch
    from tokenizers.implementations import BertWordPieceTokenizer
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    out = tmp_path_factory.mktemp("tiny-bert")
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator([*TINY_TEXTS, TEXT], vocab_size=300, min_frequency=1, show_progress=False)
    wp.save_model(str(out))
    tok = BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                        architectures=["BertForMaskedLM"])
    BertForMaskedLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bert_backend(tiny_bert_dir):
    from memaudit.backends.hf import HFBackend

    return HFBackend({"path": str(tiny_bert_dir)}, name="bert", device="cpu", batch_size=3)


def test_a_masked_lm_checkpoint_loads_as_the_masked_lm_it_is_not_as_a_causal_head(tiny_bert_dir, bert_backend):
    from transformers import BertForMaskedLM

    from memaudit.models.loading import inspect_model, load_causal_lm, load_model

    # transformers would build a BertLMHeadModel from it as a causal LM (with a warning), whose
    # predictions mean nothing: loading reads the checkpoint's architectures first
    model, _ = load_model({"path": str(tiny_bert_dir)}, device="cpu")
    assert type(model) is BertForMaskedLM
    n_params, architecture = inspect_model({"path": str(tiny_bert_dir)})
    assert (n_params, architecture) == (sum(p.numel() for p in model.parameters()), "masked")
    assert bert_backend.describe()["architecture"] == "masked"
    assert bert_backend.capabilities == frozenset({"word_logprobs"})
    with pytest.raises(ConfigError, match=re.escape(
            f"model {str(tiny_bert_dir)!r} is a masked LM (bert): memaudit fine-tunes and probes causal LMs; "
            "it can serve only as the cloze probes' reference model (probes.cloze.reference.model)")):
        load_causal_lm({"path": str(tiny_bert_dir)}, device="cpu")


def test_what_a_masked_lm_cannot_serve_is_a_one_line_error(bert_backend):
    from memaudit.backends.base import GenerationParams

    say = ("model 'bert' is a masked LM (bert): it serves only as the cloze probes' reference model "
           "(word log-probabilities); {} needs a causal LM")
    with pytest.raises(ConfigError, match=re.escape(say.format("token statistics"))):
        bert_backend.token_stats(["a text"])
    with pytest.raises(ConfigError, match=re.escape(say.format("option log-probabilities"))):
        bert_backend.option_logprobs(["a prompt"], [["A", "B"]])
    with pytest.raises(ConfigError, match=re.escape(say.format("gradient norms"))):
        bert_backend.gradient_norms(["a text"])
    for generate in (bert_backend.generate, bert_backend.generate_batched):
        with pytest.raises(ConfigError, match=re.escape(say.format("generation"))):
            generate(["a prompt"], GenerationParams(max_new_tokens=2, temperature=0.0))


def test_masked_word_scores_match_the_authors_masked_string_one_word_at_a_time(tiny_bert_dir, bert_backend):
    """The batched reading (one sequence per word, pieces masked in the window's own tokenisation) gives
    what the authors' get_surprisal.py computes: the window's string with one [MASK] per piece of the
    word tokenised on its own, the first mask's row, log-probability and rank of the first piece."""
    import torch

    from memaudit.models.masked_word_logprobs import masked_word_logprobs_loop

    words = ["Ishmael", "years", "precisely", "money", "purse", "sail", "watery", "world"]
    spans = _spans(TEXT, words)
    assert len(spans) == len(words)
    windows = [(max(0, s - 40), min(len(TEXT), e + 40)) for s, e in spans]
    windows = [(TEXT.rfind(" ", 0, a) + 1 if a else 0, TEXT.find(" ", b) if TEXT.find(" ", b) > 0 else len(TEXT))
               for a, b in windows]  # cut at spaces, as the cloze context is
    got = bert_backend.word_logprobs([TEXT], [spans], bounds=[windows])[0]
    want = masked_word_logprobs_loop(bert_backend.model, bert_backend.tokenizer, [TEXT], [spans], bounds=[windows])[0]
    assert [r["word"] for r in got] == words
    assert all(r["scoring"] == "masked" and r["aligned"] and not r["truncated"] for r in got)
    for g, w in zip(got, want):
        assert g["first_logprob"] == pytest.approx(w["first_logprob"], abs=1e-5), g["word"]
        assert g["rank"] == w["rank"], g["word"]
    # and by hand for one word: its pieces masked, the first piece read at the first mask
    tok, model = bert_backend.tokenizer, bert_backend.model
    s, e = spans[1]
    a, b = windows[1]
    pieces = tok.tokenize(TEXT[s:e])
    ids = tok(TEXT[a:s] + " ".join([tok.mask_token] * len(pieces)) + TEXT[e:b], return_tensors="pt")["input_ids"]
    at = int((ids[0] == tok.mask_token_id).nonzero()[0, 0])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, at], dim=-1)
    target = tok.convert_tokens_to_ids(pieces[0])
    assert got[1]["first_logprob"] == pytest.approx(float(logp[target]), abs=1e-5)
    assert got[1]["rank"] == int((logp > logp[target]).sum())
    assert got[1]["n_tokens"] == len(pieces)
    # the right side is read: a change after the word moves its score (a causal reference's would not move)
    changed = TEXT[:e] + " wildly different words follow here" + TEXT[e:]
    moved = bert_backend.word_logprobs([changed], [[(s, e)]], bounds=[[(a, b + 35)]])[0][0]
    assert abs(moved["first_logprob"] - got[1]["first_logprob"]) > 1e-5  # the random model's is small, not nil


def test_the_output_layer_reads_only_the_masked_positions_and_gives_the_full_logits_numbers(bert_backend,
                                                                                            monkeypatch):
    """The vocabulary projection runs on the masked positions' hidden states only (was every position of
    every sequence: [B, T, V], 60 MB a 512-token BERT window), and the records are those the full logits
    give (the model's own forward, as a masked LM whose head is not found is read)."""
    from memaudit.models import masked_word_logprobs as masked

    model, tok = bert_backend.model, bert_backend.tokenizer
    words = ["Ishmael", "years", "precisely", "money", "purse", "sail", "watery", "world"]
    spans = _spans(TEXT, words)
    seen = []
    projection = model.get_output_embeddings()  # the hidden size -> vocabulary layer
    hook = projection.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        got = masked.compute_masked_word_logprobs(model, tok, [TEXT], [spans], batch_size=3)[0]
    finally:
        hook.remove()
    n_masked = sum(r["n_tokens"] for r in got)
    assert all(len(shape) == 2 for shape in seen) and sum(shape[0] for shape in seen) == n_masked
    monkeypatch.setattr(masked, "_masked_lm_head", lambda model: None)
    full = masked.compute_masked_word_logprobs(model, tok, [TEXT], [spans], batch_size=3)[0]
    assert [r["rank"] for r in got] == [r["rank"] for r in full]
    for g, f in zip(got, full):
        assert g["first_logprob"] == pytest.approx(f["first_logprob"], abs=1e-6), g["word"]
        assert g["logprob"] == pytest.approx(f["logprob"], abs=1e-6), g["word"]


@pytest.mark.parametrize(("architecture", "head"), [("BertForMaskedLM", "cls"), ("RobertaForMaskedLM", "lm_head"),
                                                    ("AlbertForMaskedLM", "predictions"),
                                                    ("DistilBertForMaskedLM", None),
                                                    ("DebertaV2ForMaskedLM", "cls"),
                                                    ("DebertaV2ForMaskedLM/new", None)])
def test_a_masked_lms_own_head_is_found_where_it_is_one_module_beside_the_encoder(architecture, head):
    """BERT, RoBERTa, ALBERT and a legacy DeBERTa-v2: the encoder and one head module holding the output
    embeddings, applied to the encoder's last hidden states as the model's forward applies it. DistilBERT's
    head is four modules the forward chains, a new DeBERTa-v2's takes the word embeddings too: unknown, so
    the full logits are read."""
    import transformers

    from memaudit.models.masked_word_logprobs import _masked_lm_head

    architecture, _, new = architecture.partition("/")
    cls = getattr(transformers, architecture)
    kind = {"DebertaV2": "deberta-v2"}.get(name := architecture.removesuffix("ForMaskedLM"), name.lower())
    config = transformers.AutoConfig.for_model(kind, vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=32, embedding_size=16,
                                               dim=16, n_layers=1, n_heads=2, hidden_dim=32, legacy=not new)
    model = cls(config)
    assert _masked_lm_head(model) is (None if head is None else getattr(model, head))


def test_a_window_longer_than_the_model_is_cut_around_the_word(bert_backend):
    """64 positions: a word near the end of a long window keeps itself and the tokens around it."""
    text = " ".join([TEXT] * 3)
    s = text.rfind("watery")
    rec = bert_backend.word_logprobs([text], [[(s, s + 6)]])[0][0]
    assert rec["truncated"] and rec["word"] == "watery"
    n_ids = len(bert_backend.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert n_ids > bert_backend.max_tokens
    assert 0 < rec["left_tokens"] < n_ids


def test_the_cloze_items_record_a_masked_reference_and_cloze_logit_refuses_one(bert_backend):
    from memaudit.probes.cloze.items import build_items
    from memaudit.probes.cloze.runner import logit_answers

    passages = [{"passage_id": f"p{i}", "doc_id": f"d{i}", "label": i % 2, "text": t}
                for i, t in enumerate([TEXT, *TINY_TEXTS[:4]])]
    settings = {"context_chars": 60, "qa_scope": "question", "prob_threshold": -1.0, "rank_threshold": 5,
                "top_k": 3, "measures": ["prob", "rank"], "min_reconstructed": 2}
    lines = []
    items, table = build_items(passages, bert_backend, settings, progress=lines.append)
    assert {it["reference_scoring"] for it in items} == {"masked"}
    assert set(table["ref_scoring"]) == {"masked"} and len(table) > 10
    assert any("the words scored masked, with the context on both sides" in line for line in lines), lines
    # the numbers selected on are the masked LM's, each word in its context window
    from memaudit.probes.cloze.candidates import context_bounds

    row = table.iloc[0]
    text = passages[0]["text"]
    direct = bert_backend.word_logprobs([text], [[(int(row["start"]), int(row["end"]))]],
                                        bounds=[[context_bounds(text, int(row["start"]), int(row["end"]), 60)]])
    assert row["ref_logprob"] == pytest.approx(direct[0][0]["first_logprob"], abs=1e-6)
    tokens = [(0, t) for t in items[0]["tokens"]][:1] or [(0, {"start": 0, "end": 4})]
    with pytest.raises(ConfigError, match=re.escape(
            "model 'bert' is a masked LM: cloze_logit reads a causal LM's next-token choice; a masked LM "
            "serves only as probes.cloze.reference.model")):
        logit_answers(bert_backend, items, tokens)


def test_which_checkpoint_configs_are_masked_lms_not_only_those_listing_one_masked_head():
    """A BERT checkpoint listing several heads, a pre-training head, or none loads as a masked LM: as a causal LM
    transformers builds BertLMHeadModel from it (its config is no decoder), whose predictions mean nothing."""
    from transformers import BertConfig, DistilBertConfig, GPT2Config, LlamaConfig, T5Config

    from memaudit.models.loading import is_masked_lm_config

    cases = {
        "one masked head": (BertConfig(architectures=["BertForMaskedLM"]), True),
        "several heads": (BertConfig(architectures=["BertForMaskedLM", "BertForNextSentencePrediction"]), True),
        "pre-training heads": (BertConfig(architectures=["BertForPreTraining"]), True),
        "no architectures": (BertConfig(), True),
        "a masked-only type": (DistilBertConfig(), True),
        "a BERT decoder": (BertConfig(is_decoder=True, architectures=["BertLMHeadModel"]), False),
        "a BERT decoder, unnamed": (BertConfig(is_decoder=True), False),
        "GPT-2": (GPT2Config(architectures=["GPT2LMHeadModel"]), False),
        "GPT-2, unnamed": (GPT2Config(), False),
        "Llama": (LlamaConfig(architectures=["LlamaForCausalLM"]), False),
        "T5": (T5Config(architectures=["T5ForConditionalGeneration"]), False),
    }
    assert {k: is_masked_lm_config(c) for k, (c, _) in cases.items()} == {k: want for k, (_, want) in cases.items()}


def test_a_checkpoint_listing_several_heads_loads_as_its_masked_lm(tiny_bert_dir, tmp_path):
    import json
    import shutil

    from transformers import BertForMaskedLM

    from memaudit.models.loading import load_model

    copy = tmp_path / "bert-pretraining"
    shutil.copytree(tiny_bert_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM",
                                                                              "BertForNextSentencePrediction"]}))
    assert type(load_model({"path": str(copy)}, device="cpu")[0]) is BertForMaskedLM


def _local(tmp_path, tiny_bert_dir, name="bert"):
    """A config naming the tiny BERT ``name``, and its prepared directory (a manifest loading it)."""
    import json

    model_dir = tmp_path / "models" / name
    model_dir.mkdir(parents=True)
    (model_dir / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_bert_dir)},
                                                         "architecture": "masked"}))
    return {"models": {name: {"source": {"path": str(tiny_bert_dir)}, "device": "cpu"}}}, model_dir


NOT_CAUSAL = ("model 'bert' is a masked LM (bert), which cannot serve {}; it can serve only as the cloze probes' "
              "reference model (probes.cloze.reference.model)")


def test_a_masked_lm_in_a_causal_role_is_refused_at_the_jobs_start_naming_model_and_role(tiny_bert_dir, tmp_path):
    from memaudit.probes.decop.items import make_paraphraser
    from memaudit.probes.job import ProbeJob
    from memaudit.probes.token_prob.forward import run_token_stats

    config, model_dir = _local(tmp_path, tiny_bert_dir)
    config["probes"] = {"decop": {"paraphrase": {"model": "bert"}}, "token_prob": {}}
    job = ProbeJob("token_prob", "", "bert", "b", config, {"model": str(model_dir)}, {})
    with pytest.raises(ConfigError, match=re.escape("probe 'token_prob' on 'b': " + NOT_CAUSAL.format("token_logprobs"))):
        job.backend()
    with pytest.raises(ConfigError, match=re.escape("probes.decop.paraphrase.model: " + NOT_CAUSAL.format("generate"))):
        make_paraphraser(config, "bert", model_dir=model_dir)
    passages = tmp_path / "passages.jsonl"
    passages.write_text('{"passage_id": "p0", "doc_id": "d0", "label": 1, "text": "Call me Ishmael."}\n')
    with pytest.raises(ConfigError, match=re.escape(
            "token statistics (probes.token_prob, its reference_models): " + NOT_CAUSAL.format("token_logprobs"))):
        run_token_stats(config, "bert", model_dir, passages, tmp_path / "stats.npz")


def test_a_masked_qa_writer_is_refused_naming_its_key_before_any_document_is_read(bert_backend, tmp_path):
    from memaudit.probes.copybench.items import build_qa_items

    with pytest.raises(ConfigError, match=re.escape(
            "probes.copybench.qa_writer.model: " + NOT_CAUSAL.format("generate"))):
        build_qa_items(tmp_path / "absent.jsonl", {}, seed=0, writer=bert_backend, out_items=tmp_path / "qa.jsonl",
                       out_rejects=tmp_path / "rejects.csv")
    assert not (tmp_path / "qa.jsonl").exists()


def test_a_masked_knowledge_filter_is_refused_naming_its_key(tiny_bert_dir, tmp_path):
    from memaudit.probes.cloze.items import knowledge_filter_from

    config, model_dir = _local(tmp_path, tiny_bert_dir)
    with pytest.raises(ConfigError, match=re.escape("probes.cloze.filter.model: " + NOT_CAUSAL.format("generate"))):
        knowledge_filter_from(config, {"filter": {"model": "bert"}}, model_dir)
    # logit mode reads the word's rank as a causal LM's next-token choice, as cloze_logit
    with pytest.raises(ConfigError, match=re.escape(
            "probes.cloze.filter.model: model 'bert' is a masked LM: the logit filter reads a causal LM's next-token "
            "choice; a masked LM serves only as probes.cloze.reference.model")):
        knowledge_filter_from(config, {"filter": {"model": "bert", "mode": "logit"}}, model_dir)


def test_a_masked_reference_whose_tokenizer_has_no_mask_token_is_one_line(tiny_bert_dir, tmp_path):
    import json
    import shutil

    from memaudit.backends import open_backend
    from memaudit.backends.base import WORD_LOGPROBS

    copy = tmp_path / "bert-no-mask"
    shutil.copytree(tiny_bert_dir, copy)
    path = copy / "tokenizer_config.json"  # BertTokenizerFast's default [MASK] set to none
    path.write_text(json.dumps({**json.loads(path.read_text()), "mask_token": None}))
    config, model_dir = _local(tmp_path, copy)
    with pytest.raises(ConfigError, match=re.escape(
            "probes.cloze.reference.model: model 'bert' is a masked LM (bert) whose tokenizer has no mask token: "
            "the word cannot be masked")):
        open_backend(config, "bert", model_dir=model_dir, role="probes.cloze.reference.model",
                     needs={WORD_LOGPROBS})


def test_fine_tuning_a_masked_lm_is_refused_naming_the_base_key(tmp_path):
    import json

    from memaudit.models.prepare import prepare_finetuned_model

    base = tmp_path / "manifest.json"
    base.write_text(json.dumps({"load": {"path": "/nowhere"}, "architecture": "masked"}))
    entry = {"base": "bert", "finetune": {"members_of": ["b"], "method": "lora"}}
    with pytest.raises(ConfigError, match=re.escape(
            "models.ft.base: model 'bert' is a masked LM: fine-tuning needs a causal LM; it can serve only as "
            "the cloze probes' reference model (probes.cloze.reference.model)")):
        prepare_finetuned_model("ft", entry, base, ["a member text"], tmp_path / "out", device="cpu")


def test_serve_refuses_a_masked_lm_at_start(tiny_bert_dir):
    from memaudit.backends.serve import make_server

    with pytest.raises(ConfigError, match=re.escape(
            "memaudit serve: model 'tiny-bert' is a masked LM (bert), which cannot serve generate; it can serve "
            "only as the cloze probes' reference model (probes.cloze.reference.model)")):
        make_server(["--path", str(tiny_bert_dir), "--name", "tiny-bert", "--port", "0", "--device", "cpu"])


def test_a_masked_lm_prepares_as_one_and_opens_as_the_cloze_reference(tiny_bert_dir, bert_backend, tmp_path):
    """The way a job meets it: prepare_model writes its manifest (``architecture: masked``), and the
    cloze_items job opens it in the reference role; its numbers are the directly loaded model's."""
    from memaudit.backends import open_backend
    from memaudit.backends.base import WORD_LOGPROBS
    from memaudit.models.prepare import prepare_base_model

    entry = {"source": {"path": str(tiny_bert_dir)}, "dtype": "float32", "device": "cpu"}
    manifest = prepare_base_model("bert", entry, tmp_path, cache_dir=tmp_path / "cache")
    assert manifest["architecture"] == "masked"
    assert manifest["n_params"] == sum(p.numel() for p in bert_backend.model.parameters())
    reference = open_backend({"models": {"bert": entry}}, "bert", model_dir=tmp_path,
                             role="probes.cloze.reference.model", needs={WORD_LOGPROBS})
    spans = _spans(TEXT, ["precisely", "purse"])
    assert ([r["first_logprob"] for r in reference.word_logprobs([TEXT], [spans])[0]]
            == pytest.approx([r["first_logprob"] for r in bert_backend.word_logprobs([TEXT], [spans])[0]], abs=1e-6))
