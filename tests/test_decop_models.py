"""DE-COP with real models: logit mode against the generate() reference, likelihood mode, black-box
mode through the real OpenAI SDK against the loopback server, and a whole probe run."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from memaudit.backends.scripted import ScriptedResponder
from memaudit.backends.server import ChatReply, ChatServer
from memaudit.errors import MemauditError
from memaudit.probes.decop.prompts import LETTERS, orderings

ITEM = {"item_id": "emma#p0", "passage_id": "emma#p0", "doc_id": "emma", "label": 1, "answer": 0,
        "options": ["Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
                    "Emma Woodhouse was clever, rich and good-looking, with a pleasant home and a cheerful mood.",
                    "Handsome, smart and wealthy, Emma Woodhouse had a comfy house and a happy temperament.",
                    "Rich, clever and handsome, Emma Woodhouse enjoyed a happy nature and a comfortable home."],
        "meta": {"title": "Emma", "author": "Jane Austen", "kind": "book", "role": "evaluate", "length_tokens": 64}}


def _items(n):
    return [{**ITEM, "item_id": f"d{i}#p0", "passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": i % 2,
             "meta": {**ITEM["meta"], "role": "calibrate" if i >= n - 2 else "evaluate"}} for i in range(n)]


@pytest.fixture(scope="module")
def long_tiny_model(tiny_model_dir):
    """The conftest tiny GPT-2's tokenizer with room for a whole DE-COP prompt (1024 positions)."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    return GPT2LMHeadModel(cfg).eval(), tok


def _backend_probabilities(backend, items_perms, batch_size=24):
    from memaudit.probes.decop.scoring import letter_probabilities, question_params, question_prompts

    prompts = [question_prompts(item, [perm])[0] for item, perm in items_perms]
    logprobs = backend.option_logprobs(prompts, [LETTERS] * len(prompts), params=question_params(),
                                       batch_size=batch_size)
    return letter_probabilities(logprobs)


def test_logit_mode_equals_the_generate_reference_on_a_tiny_model(long_tiny_model, tiny_model):
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.decop.scoring import reference_probabilities, render_question

    model, tok = long_tiny_model
    short = {**ITEM, "options": [o[:40] for o in ITEM["options"]]}
    pairs = [(it, p) for it in (ITEM, short) for p in orderings("permutations")[:3]]
    prompts = [render_question(tok, it, p) for it, p in pairs]
    # uneven batches, left padding after the shared prefix
    ours, mass = _backend_probabilities(HFBackend({}, model=model, tokenizer=tok), pairs, batch_size=4)
    ref, ref_mass = reference_probabilities(model, tok, prompts)
    assert ours.shape == (6, 4)
    np.testing.assert_allclose(ours.sum(1), 1.0, atol=1e-9)
    assert np.abs(ours - ref).max() <= 1e-4 and np.abs(mass - ref_mass).max() <= 1e-4
    assert len({len(tok(p)["input_ids"]) for p in prompts}) > 1  # the padding path was exercised
    short_model, _ = tiny_model  # 128 positions: a clear error, not an index error deep in torch
    with pytest.raises(ValueError, match="longer than the 128 positions") as too_long:
        _backend_probabilities(HFBackend({}, model=short_model, tokenizer=tok), pairs)
    assert isinstance(too_long.value, MemauditError)  # a job's one-line error, not a traceback


def test_the_generate_reference_encodes_plain_text_with_the_one_prompt_rule(long_tiny_model, monkeypatch):
    """The reference reads a plain-text prompt through memaudit.models.token_stats.encode (the rule the
    HF backend's generate() and every probe's scoring use), not a copy of it; a chat prompt it does not."""
    from memaudit.models import token_stats
    from memaudit.probes.decop.scoring import reference_probabilities

    model, tok = long_tiny_model
    seen = []
    real = token_stats.encode
    monkeypatch.setattr(token_stats, "encode", lambda t, text, max_tokens: seen.append(text) or real(t, text, max_tokens))
    prompts = ["Question: which one?\nAnswer:", "Another question\nAnswer:"]
    plain, _ = reference_probabilities(model, tok, prompts, chat=False)
    assert seen == prompts
    monkeypatch.setattr(tok, "chat_template", "{{ messages[0]['content'] }}", raising=False)
    templated, _ = reference_probabilities(model, tok, prompts, chat=True)
    assert seen == prompts and not np.allclose(plain, templated)  # no context token before a chat prompt


@pytest.mark.parametrize("share_prefix", ["tree", "batch"])
def test_logit_mode_without_a_chat_template_reads_the_prompt_after_the_context_token(long_tiny_model,
                                                                                   share_prefix):
    """A model without a chat template gets DE-COP's question as plain text. generate() (and every
    probe's scoring) puts the context token before it; option_logprobs did not, so logit mode asked
    the model a question it never sees in that position. Each option's log-probability is now that
    of a naive forward pass over context token + rendered prompt + the option's letter, with the
    orderings' shared prefix still batched."""
    import torch

    from memaudit.backends.base import option_token_ids
    from memaudit.backends.hf import HFBackend
    from memaudit.models.token_stats import context_token_id
    from memaudit.probes.decop.scoring import question_params, question_prompts, render_question

    model, tok = long_tiny_model
    assert not getattr(tok, "chat_template", None)
    perms = orderings("permutations")[:5]
    prompts = question_prompts(ITEM, perms)
    backend = HFBackend({}, model=model, tokenizer=tok)
    ours = backend.option_logprobs(prompts, [LETTERS] * len(prompts), params=question_params(), batch_size=3,
                                   share_prefix=share_prefix)
    worst = 0.0
    for perm, got in zip(perms, ours):
        text = render_question(tok, ITEM, perm)
        assert text == backend._render(prompts[perms.index(perm)], question_params())
        ids = [context_token_id(tok)] + tok(text, add_special_tokens=False)["input_ids"]
        for letter in LETTERS:
            variants = []
            for v in option_token_ids(tok, letter):
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([ids + [v]])).logits[0, -2].double()
                variants.append(torch.log_softmax(logits, -1)[v])
            worst = max(worst, abs(got[letter] - float(torch.logsumexp(torch.stack(variants), 0))))
    assert worst <= 1e-4
    # without the context token the numbers differ: what option_logprobs read before
    ids = tok(render_question(tok, ITEM, perms[0]), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        bare = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
    assert abs(ours[0]["A"] - float(torch.logsumexp(bare[option_token_ids(tok, "A")], 0))) > 1e-3


# the cache goes in under its current name (transformers drops ``past_key_values`` in 5.40)
@pytest.mark.filterwarnings("error:.*past_key_values.*")
def test_prompt_trie_gives_the_flat_batch_numbers_and_runs_each_shared_prefix_once(long_tiny_model):
    """``share_prefix="tree"`` (what a CPU backend runs) against the flat batch and against no sharing,
    on DE-COP's 24 orderings plus the trie's corner cases; and the tokens it runs: each distinct
    prefix of the orderings exactly once, a third fewer than the flat batch."""
    import torch

    from memaudit.models.forward import common_prefix_length, next_token_logprobs
    from memaudit.probes.decop.scoring import render_question

    model, tok = long_tiny_model
    pad = tok.eos_token_id
    decop = [tok(render_question(tok, ITEM, p), add_special_tokens=False)["input_ids"]
             for p in orderings("permutations")]
    corner = [decop[0], decop[0][:-5], [decop[3][0] + 1] + decop[3][1:], decop[0][:1], decop[5][:40]]
    ran = []

    def count(module, args, kwargs):  # real (unpadded) tokens of each pass
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")
        ran.append(int(mask[:, -ids.shape[1]:].sum()) if mask is not None else ids.numel())

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        runs = {}
        for mode, bs in (("tree", 24), ("tree", 5), (True, 7), (False, 24)):
            ran.clear()
            runs[mode, bs] = (torch.cat(list(next_token_logprobs(model, decop + corner, pad_id=pad, batch_size=bs,
                                                               share_prefix=mode))), sum(ran))
        ran.clear()
        (tree_decop,) = next_token_logprobs(model, decop, pad_id=pad, share_prefix="tree")
        tree_tokens = sum(ran)
        ran.clear()
        flat_decop = torch.cat(list(next_token_logprobs(model, decop, pad_id=pad, batch_size=24)))
        flat_tokens = sum(ran)
    finally:
        hook.remove()
    reference = runs[False, 24][0]
    assert reference.shape == (29, len(tok))
    for key, (logp, _) in runs.items():
        assert (logp - reference).abs().max() <= 1e-4, key
    assert (tree_decop - flat_decop).abs().max() <= 1e-4
    distinct = {tuple(s[:k]) for s in decop for k in range(1, len(s) + 1)}
    assert tree_tokens == len(distinct)
    shared = common_prefix_length(decop)
    assert flat_tokens == shared + sum(len(s) - shared for s in decop)
    assert tree_tokens < 0.75 * flat_tokens


def test_logit_mode_equals_the_generate_reference_on_smollm2_chat():
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.decop.scoring import reference_probabilities, render_question
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.builtin import ensure_builtin

    model, tok = load_causal_lm({"path": str(ensure_builtin("smollm2-135m-instruct", "resources/cache"))},
                                device="cpu")
    pairs = [(ITEM, p) for p in orderings("latin_square")[:2]]
    prompts = [render_question(tok, it, p) for it, p in pairs]
    assert prompts[0].startswith("<|im_start|>system\nYou are entering a multiple choice questions exam.")
    assert prompts[0].endswith("Answer:<|im_end|>\n<|im_start|>assistant\n")
    assert all(len({tok(v, add_special_tokens=False)["input_ids"][0] for v in (x, " " + x)}) == 2
               for x in LETTERS)  # "A" and " A" are different tokens
    # each a single token, so reading the last token of each (option_token_ids) is reading the first
    from memaudit.backends.base import option_token_ids

    assert [option_token_ids(tok, x) for x in LETTERS] == [
        sorted({tok(v, add_special_tokens=False)["input_ids"][0] for v in (x, " " + x)}) for x in LETTERS]
    ours, _ = _backend_probabilities(HFBackend({}, model=model, tokenizer=tok), pairs)
    ref, _ = reference_probabilities(model, tok, prompts)
    assert np.abs(ours - ref).max() <= 1e-4


def _sentencepiece_like_tokenizer():
    """A tokenizer with Llama 2's normalizer (▁ prepended, spaces as ▁): " A" encodes as ▁, ▁A."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "▁": 1, **{f"▁{x}": 2 + i for i, x in enumerate(LETTERS)}, "▁Answer:": 6}
    t = Tokenizer(models.WordPiece(vocab, unk_token="<unk>", max_input_chars_per_word=100))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>")


def test_option_tokens_are_the_letters_not_the_space_a_sentencepiece_tokenizer_puts_first():
    """The reference reads tokenizer("A").input_ids[-1]; the first token of " A" is a bare ▁ that
    all four letters share, which would add one probability to each and squeeze them to 0.25."""
    from memaudit.backends.base import option_token_ids

    tok = _sentencepiece_like_tokenizer()
    assert tok.convert_ids_to_tokens(tok(" A", add_special_tokens=False)["input_ids"]) == ["▁", "▁A"]
    assert [option_token_ids(tok, x) for x in LETTERS] == [[2], [3], [4], [5]]
    with pytest.raises(ValueError, match="no single token of this tokenizer answers option 'E'"):
        option_token_ids(tok, "E")


def test_local_paraphrases_from_smollm2_are_seeded_sized_and_only_as_many_as_asked(monkeypatch):
    from memaudit.probes.decop.paraphrase import LocalParaphraser
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.builtin import ensure_builtin

    model, tok = load_causal_lm({"path": str(ensure_builtin("smollm2-135m-instruct", "resources/cache"))},
                                device="cpu", dtype="float32")
    passages = [ITEM["options"][0], "The crude oil price rose sharply on Monday after the cartel announced new "
                "production limits. Traders said the cut was larger than expected."]
    way = LocalParaphraser(model, tok, name="smollm2-135m", temperature=0.7, batch_size=2, seed=3)
    first = way.candidates(passages, [64, 64], attempt=0, wanted=[2, 1])  # batch_size 2: two batches
    assert [len(c) for c in first] == [2, 1]
    assert first == way.candidates(passages, [64, 64], attempt=0, wanted=[2, 1])
    assert first != way.candidates(passages, [64, 64], attempt=1, wanted=[2, 1])
    for passage, cands in zip(passages, first):
        for cand in cands:
            assert cand.strip()  # (a copy of the passage is possible: quality control rejects it)
            # stopped at the passage's length (a sentence end past 0.9 of its words) or earlier
            assert len(cand.split()) <= 1.4 * 1.3 * len(passage.split()) + 8
    assert way.candidates(passages, [64, 64], attempt=0, wanted=[0, 0]) == [[], []]

    # probes.decop.paraphrase.min_length: 0 (off) unless set, as the demo and ci configs leave it
    from pathlib import Path

    import yaml

    from memaudit.jobs import validate_config

    ci = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "ci.yaml").read_text())
    settings = validate_config(ci)["probes"]["decop"]["paraphrase"]
    assert settings["min_length"] == 0
    assert LocalParaphraser.from_settings(model, tok, name="smollm2-135m", settings=settings, seed=0).min_length == 0
    ci["probes"]["decop"]["paraphrase"]["min_length"] = 0.9
    held = LocalParaphraser.from_settings(model, tok, name="smollm2-135m", seed=3,
                                          settings={**validate_config(ci)["probes"]["decop"]["paraphrase"],
                                                    "batch_size": 4})
    assert (held.min_length, held.temperature, held.batch_size, held.seed) == (0.9, 0.7, 4, 3)
    assert held.describe()["min_length"] == 0.9 and "min_length" not in way.describe()
    # what each item records (meta) is as before: top-p only where it is on
    assert way.describe() == {"paraphraser": "smollm2-135m", "prompt": "single", "temperature": 0.7, "top_k": 50}
    assert (held.top_k, held.top_p) == (50, 1.0) and "top_p" not in held.describe()
    assert set(held.newline_ids()) >= {tok.convert_tokens_to_ids("Ċ"), tok.convert_tokens_to_ids("ĊĊ")}
    # min_length 0.9: no end token (nor, the passages being one paragraph, a line break) before 0.9 of
    # each passage's tokens; a sentence about the rewriting may still cut a candidate shorter (and QC
    # rejects it if too short), so the floor is checked on the raw samples
    import memaudit.models.sampling as sampling

    raw = []
    real_sample = sampling.sample

    def recording(*args, **kwargs):
        out = real_sample(*args, **kwargs)
        raw.append((kwargs["min_new_tokens"], kwargs["barred_ids"], out))
        return out

    monkeypatch.setattr(sampling, "sample", recording)
    longer = held.candidates(passages, [64, 64], attempt=0, wanted=[3, 3])
    [(floors, barred, out)] = raw
    n_tokens = sorted(len(tok(p, add_special_tokens=False)["input_ids"]) for p in passages)
    assert sorted(floors) == [int(0.9 * n) for n in n_tokens] and all(b == held.newline_ids() for b in barred)
    words = {int(0.9 * len(tok(p, add_special_tokens=False)["input_ids"])): len(p.split()) for p in passages}
    for floor, samples in zip(floors, out):
        for ids in samples:
            text = tok.decode(ids, skip_special_tokens=True)
            assert "\n" not in tok.decode(ids[:floor])
            # at the floor, or stopped earlier by the sampler's own length check (0.9 of the words, at a
            # sentence end), never by an end token
            assert len(ids) >= floor or len(text.split()) >= 0.9 * words[floor], (floor, text)
    ratios = [len(c.split()) / len(p.split()) for p, cands in zip(passages, longer) for c in cands]
    shorter = [len(c.split()) / len(p.split()) for p, cands in zip(passages, first) for c in cands]
    assert np.median(ratios) >= 0.8 and np.median(ratios) > np.median(shorter), (ratios, shorter)


def test_likelihood_mode_picks_the_highest_mean_log_likelihood(tiny_model):
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.decop.scoring import score_likelihood

    model, tok = tiny_model
    backend = HFBackend({}, model=model, tokenizer=tok)
    answers = score_likelihood(backend, [ITEM])
    stats = backend.token_stats(ITEM["options"], with_distribution=False)
    expected = [float(np.mean(stats.passage(i)[0])) for i in range(4)]
    got = answers.loc[0, [f"ll_{x}" for x in LETTERS]].to_numpy(dtype=float)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert answers.loc[0, "pred"] == int(np.argmax(expected)) and answers.loc[0, "correct"] == 0


class QuizResponder(ScriptedResponder):
    """Answers DE-COP questions like a model that knows the verbatim text, with a few bad replies."""

    def __init__(self, verbatim: str):
        super().__init__()
        self.verbatim, self.n = verbatim, 0

    def default(self, request):
        self.n += 1
        options = dict(re.findall(r"^([A-D])\. (.*)$", request.prompt, re.MULTILINE))
        letter = next(k for k, v in options.items() if v == self.verbatim)
        replies = {1: "I'm sorry, but I can't help with that request.", 2: "Both options look plausible to me.",
                   3: f"The answer is {letter}."}
        return ChatReply(text=replies.get(self.n, letter), input_tokens=50, output_tokens=1)


def test_blackbox_mode_through_the_openai_sdk_counts_refusals_and_invalid_answers(tmp_path, monkeypatch):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.probes.decop.scoring import score_blackbox

    monkeypatch.setenv("DECOP_TEST_KEY", "sk-test-decop")
    with ChatServer(QuizResponder(ITEM["options"][0])) as server:
        backend = OpenAIBackend("gpt-test", name="gpt-test", base_url=server.openai_base_url,
                                api_key_env="DECOP_TEST_KEY", cache=tmp_path / "cache.sqlite", concurrency=1,
                                retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02))
        answers = score_blackbox(backend, [ITEM], orderings("latin_square"))
        sent = server.records[0].request
    # Appendix C.1 (Table 9): one user turn opening with the instruction, no format hint
    (message,) = sent.messages
    assert message["role"] == "user" and message["content"].startswith("You are entering a multiple choice")
    assert "Format your answer" not in message["content"]
    assert sent.temperature == 0.0
    assert answers["status"].tolist() == ["refusal", "invalid", "ok", "ok"]
    assert answers["parse"].tolist() == ["refusal", "invalid", "lenient", "strict"]
    assert answers["pred"].tolist()[:2] == [-1, -1]
    assert (answers["pred"] == answers["correct"]).tolist() == [False, False, True, True]


def _logit_run(model_and_tok, items, tmp_path):
    """``run_decop("logit", ...)`` on ``items`` with the model saved under ``tmp_path`` and opened as the
    workflow opens it (:func:`memaudit.backends.open_backend`): (documents, output paths)."""
    from memaudit.backends import open_backend
    from memaudit.probes.decop.runner import run_decop
    from memaudit.io import write_json, write_jsonl

    write_jsonl(tmp_path / "items.jsonl", items)
    model, tok = model_and_tok
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    write_json(tmp_path / "m" / "manifest.json", {"load": {"path": str(tmp_path / "m")}})
    cfg = {"lengths": [64], "orderings": "latin_square", "fdr": 0.1, "batch_size": 4}
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in
           [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
    config = {"models": {"tiny": {"dtype": "float32", "device": "cpu"}}}
    backend = open_backend(config, "tiny", model_dir=tmp_path / "m")
    docs = run_decop("logit", backend, tmp_path / "items.jsonl", cfg, **{f"out_{k}": v for k, v in out.items()})
    assert set(docs["model"]) == {"tiny"}
    return docs, out


def test_a_whole_logit_run_writes_calibrated_scores_and_the_suspect_list(long_tiny_model, tmp_path):
    from memaudit.io import read_json

    docs, out = _logit_run(long_tiny_model, _items(6), tmp_path)
    answers = pd.read_csv(out["answers"])
    assert len(answers) == 6 * 4 and set(docs["method"]) == {"decop-logit", "decop-logit-calibrated", "decop-logit-prob"}
    assert sorted(docs["doc_id"].unique()) == ["d0", "d1", "d2", "d3"]  # calibration documents are not scored
    cal = read_json(out["calibration"])["calibration"]["64"]
    calib = answers[answers["role"] == "calibrate"]
    by_doc = calib.groupby("doc_id")[["p_A", "p_B", "p_C", "p_D"]].mean().mean()
    np.testing.assert_allclose([cal["delta"][x] for x in "ABCD"], 0.25 - by_doc.to_numpy(), atol=1e-9)
    letters = ["p_A", "p_B", "p_C", "p_D"]
    evaluated = answers[answers["role"] == "evaluate"]
    probs = evaluated[letters].to_numpy() + np.array([cal["delta"][x] for x in "ABCD"])
    assert (evaluated["pred_calibrated"].to_numpy() == probs.argmax(1)).all()
    # a clean reference document's own answers are calibrated by the others' Δ (leave one out)
    for doc, mine in calib.groupby("doc_id"):
        others = calib[calib["doc_id"] != doc].groupby("doc_id")[letters].mean().mean()
        assert (mine["pred_calibrated"].to_numpy() == (mine[letters].to_numpy() + 0.25 - others.to_numpy()).argmax(1)).all()
    table = pd.read_csv(out["table"])
    assert {"p_value", "q_value", "suspect", "clean_rate", "n_clean"} <= set(table.columns)
    # the suspect list: each evaluated document's accuracy against the clean documents' (conformal p-values)
    for method in ("decop-logit", "decop-logit-calibrated"):
        rows = table[table["method"] == method]
        clean = rows.loc[rows["role"] == "calibrate", "accuracy"].to_numpy()
        ev_rows = rows[rows["role"] == "evaluate"]
        expected_p = [(1 + (clean >= a).sum()) / (len(clean) + 1) for a in ev_rows["accuracy"]]
        np.testing.assert_allclose(ev_rows["p_value"], expected_p)
        assert (ev_rows["test"] == "conformal").all() and len(clean) == 2 and (ev_rows["n_clean"] == 2).all()
    raw = table[(table["method"] == "decop-logit") & (table["role"] == "evaluate")].set_index("doc_id")
    hits = answers[answers["role"] == "evaluate"].assign(hit=lambda a: a["pred"] == a["correct"])
    np.testing.assert_allclose(raw["accuracy"].sort_index(), hits.groupby("doc_id")["hit"].mean().sort_index())
    # decop-logit-prob: the mean probability of the verbatim option's letter
    ev = answers[answers["role"] == "evaluate"]
    p_verbatim = ev[["p_A", "p_B", "p_C", "p_D"]].to_numpy()[np.arange(len(ev)), ev["correct"].to_numpy()]
    expected = pd.Series(p_verbatim, index=ev.index).groupby(ev["doc_id"]).mean().sort_index()
    prob = docs[docs["method"] == "decop-logit-prob"].set_index("doc_id")["score"].sort_index()
    np.testing.assert_allclose(prob, expected)
    assert table.loc[table["method"] == "decop-logit-prob", "suspect"].isna().all()  # no test for a probability


@pytest.mark.slow
def test_the_ci_workflow_writes_decop_rows_tables_and_figures(ci_run):
    import yaml

    cfg = yaml.safe_load((ci_run / "config/ci.yaml").read_text())["probes"]
    summary = pd.read_csv(ci_run / "results/summary/metrics.csv")
    decop = summary[summary["method"].str.startswith("decop-")]
    got = {(r.benchmark, r.model, r.method) for r in decop.itertuples()}
    expected = {("novels", m, "decop-logit") for m in cfg["decop_logit"]["models"]}
    expected |= {("novels", m, "decop-logit-calibrated") for m in cfg["decop_logit"]["models"]}
    expected |= {("novels", m, "decop-logit-prob") for m in cfg["decop_logit"]["models"]}
    expected |= {("novels", m, "decop-likelihood") for m in cfg["decop_likelihood"]["models"]}
    expected |= {("novels", m, "decop-likelihood-prob") for m in cfg["decop_likelihood"]["models"]}
    assert got == expected
    n_eval = cfg["decop"]["n_documents"]
    assert (decop["n_member"] + decop["n_nonmember"] <= n_eval).all()
    qc = pd.read_csv(ci_run / "results/datasets/novels/decop_qc.csv")
    # Documents too short for a passage of the configured length have none, hence no QC row.
    assert 1 <= qc["role"].value_counts()["calibrate"] <= cfg["decop"]["calibration_documents"]
    assert {"accept_rate", "unrelated_rate", "length_rate", "paraphraser"} <= set(qc.columns)
    table = pd.read_csv(ci_run / "results/scores/novels/smollm2-135m-contaminated/decop_logit_table.csv")
    assert set(table["method"]) == {"decop-logit", "decop-logit-calibrated", "decop-logit-prob"}
    tested = table[(table["role"] == "evaluate") & (table["method"] != "decop-logit-prob")]
    assert tested["q_value"].between(0, 1).all()
    for name in ("auc_by_model_size", "auc_by_length", "accuracy_calibration", "accuracy_by_position",
                 "label_probabilities"):
        assert (ci_run / f"results/figures/novels/decop/{name}.png").stat().st_size > 1000
    # the blind row: what picking the longest option scores on the same items
    from memaudit.io import read_jsonl
    from memaudit.probes.decop.analysis import longest_option_rows

    table = pd.read_csv(ci_run / "results/summary/decop_novels.csv")
    blind = table[table["model"] == "(none)"].reset_index(drop=True)
    expected = longest_option_rows(read_jsonl(ci_run / "results/datasets/novels/decop_items.jsonl"))
    assert list(blind["method"]) == ["decop-longest-option"] and blind["n_params"].isna().all()
    pd.testing.assert_frame_equal(blind[["length", "n_documents", "auc", "accuracy_members", "accuracy_nonmembers"]],
                                  expected[["length", "n_documents", "auc", "accuracy_members", "accuracy_nonmembers"]],
                                  check_dtype=False)
    assert set(table.loc[table["model"] != "(none)", "model"]) == set(cfg["decop_logit"]["models"]) | set(
        cfg["decop_likelihood"]["models"])


def test_a_logit_run_without_surviving_calibration_documents_skips_only_the_calibrated_variant(
        long_tiny_model, tmp_path):
    """Quality control may reject every clean calibration passage: the run still ends, uncalibrated."""
    from memaudit.io import read_json

    docs, out = _logit_run(long_tiny_model, [it for it in _items(6) if it["meta"]["role"] == "evaluate"], tmp_path)
    assert set(docs["method"]) == {"decop-logit", "decop-logit-prob"}
    assert sorted(docs["doc_id"].unique()) == ["d0", "d1", "d2", "d3"]
    cal = read_json(out["calibration"])["calibration"]["64"]
    assert cal["n_calibration_documents"] == 0 and "quality control" in cal["skipped"]


def test_logit_mode_on_an_openai_compatible_model_reads_the_letters_from_top_logprobs(tmp_path, monkeypatch):
    """decop_logit on an API model, opened as the workflow opens it, through the real SDK and the loopback
    server: each letter's probability is read from the first token's top_logprobs (variants summed),
    a letter outside the list counts as 0, and one with no letter listed is an invalid answer."""
    from api_server import loopback, reply_with_top

    from memaudit.backends import open_backend
    from memaudit.io import read_json, write_jsonl
    from memaudit.jobs import validate_config
    from memaudit.probes.decop.runner import run_decop

    monkeypatch.setenv("SERVED_KEY", "sk-test-not-a-secret")
    # 2 evaluated documents, 2 for calibration; distinct texts, so no request is answered from the cache
    items = [{**it, "options": [f"{it['doc_id']}: {o}" for o in it["options"]]} for it in _items(4)]
    write_jsonl(tmp_path / "items.jsonl", items)
    cfg = {"lengths": [64], "orderings": "latin_square", "fdr": 0.1, "batch_size": 4}
    n = len(items) * 4
    # per request: " A" and "A" listed (summed), "C" listed, "B" not, "D" listed; the last request lists no letter
    top = [(" A", -0.7), ("A", -2.0), ("The", -2.2), ("C", -1.5), (" D", -3.0)]
    with loopback() as server:
        server.responder.queue(*[reply_with_top("A", top) for _ in range(n - 1)],
                               reply_with_top("The", [("The", -0.1), (" of", -2.5)]))
        config = validate_config({
            "benchmarks": {"b": {"sources": ["austen"]}},
            "models": {"served": {"backend": "openai", "api": {
                "model_id": "served-model", "base_url": server.openai_base_url, "api_key_env": "SERVED_KEY",
                "pricing": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}}}},
            "probes": {"decop": {}, "decop_logit": {"models": ["served"]}},
            "api": {"cache": str(tmp_path / "cache.sqlite")}})
        backend = open_backend(config, "served", rule="decop_probe")
        out = {k: tmp_path / f"{k}.{ext}" for k, ext in
               [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
        docs = run_decop("logit", backend, tmp_path / "items.jsonl", cfg, **{f"out_{k}": v for k, v in out.items()})
        assert server.count("openai") == n
    answers = pd.read_csv(out["answers"])
    raw = np.exp([np.logaddexp(-0.7, -2.0), 0.0, -1.5, -3.0]) * [1, 0, 1, 1]
    expected = raw / raw.sum()
    invalid = answers[answers["status"] == "invalid"]  # requests run concurrently: any one got the last reply
    assert len(invalid) == 1 and invalid["pred"].tolist() == [-1] and invalid["p_A"].isna().all()
    ok = answers[answers["status"] != "invalid"]
    np.testing.assert_allclose(ok[["p_A", "p_B", "p_C", "p_D"]].to_numpy(), np.tile(expected, (n - 1, 1)), atol=1e-6)
    np.testing.assert_allclose(ok["letter_mass"], raw.sum(), rtol=1e-6)
    assert (ok["pred"] == 0).all() and (ok["status"] == "ok").all()
    assert set(docs["model"]) == {"served"} and set(docs["dtype"]) == {"api"}
    assert read_json(out["calibration"])["model"] == "served"
    # accuracy = how often the verbatim option's letter (A in the ordering "0123") was picked
    hits = answers[answers["role"] == "evaluate"].assign(hit=lambda a: a["pred"] == a["correct"])
    by_doc = docs[docs["method"] == "decop-logit"].set_index("doc_id")["score"].sort_index()
    np.testing.assert_allclose(by_doc, hits.groupby("doc_id")["hit"].mean().sort_index())


def test_a_probe_job_reads_its_benchmarks_calibration_documents(long_tiny_model, tmp_path):
    """run_job resolves probes.decop.calibration_documents for its own benchmark: 0 there means no
    calibrated variant (and says so), while the default still calibrates another benchmark's items."""
    from memaudit.io import read_json, read_jsonl, write_json, write_jsonl
    from memaudit.probes.decop.plan import method_names
    from memaudit.probes.decop.runner import run_job
    from memaudit.probes.job import ProbeJob

    model_dir = tmp_path / "m"
    for part in long_tiny_model:
        part.save_pretrained(model_dir)
    write_json(model_dir / "manifest.json", {"load": {"path": str(model_dir)}})
    short = {**ITEM, "options": [o[:40] for o in ITEM["options"]]}
    items = [{**short, "item_id": f"d{i}#p0", "passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": int(i < 2),
              "meta": {**short["meta"], "role": "calibrate" if i == 4 else "evaluate"}} for i in range(5)]
    write_jsonl(tmp_path / "items.jsonl", items)
    config = {"models": {"tiny": {"dtype": "float32", "device": "cpu"}},
              "probes": {"decop": {"lengths": [64], "orderings": "latin_square", "fdr": 0.1, "batch_size": 4,
                                   "calibration_documents": {"default": 1, "arxiv": 0}},
                         "decop_logit": {}}}
    calibration = {}
    for bench in ("arxiv", "books"):
        outs = {k: str(tmp_path / f"{bench}_{k}.{ext}") for k, ext in
                [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
        job = ProbeJob(family="decop", mode="logit", model="tiny", benchmark=bench, config=config,
                       inputs={"model": str(model_dir), "mcq": str(tmp_path / "items.jsonl")}, outputs=outs)
        run_job(job)
        calibration[bench] = read_json(outs["calibration"])["calibration"]["64"]
        methods = set(pd.read_csv(outs["documents"])["method"])
        assert methods == ({"decop-logit", "decop-logit-prob"} if bench == "arxiv" else
                           {"decop-logit", "decop-logit-prob", "decop-logit-calibrated"}), bench
        assert set(method_names(config, [(bench, "tiny", "logit")])) == methods  # what the config check lists
    assert calibration["arxiv"] == {"skipped": "probes.decop.calibration_documents is 0 for this benchmark",
                                    "n_calibration_documents": 0}
    assert calibration["books"]["n_calibration_documents"] == 1
    assert sum(calibration["books"]["delta"].values()) == pytest.approx(0.0, abs=1e-9)
    assert len(read_jsonl(tmp_path / "items.jsonl")) == 5


def test_a_local_paraphraser_ends_at_the_end_tokens_of_the_models_generation_config():
    """generate() ends at the generation config's end tokens (Gemma's <end_of_turn>, Phi-3's <|end|>),
    which need not be the tokenizer's nor ChatML's <|im_end|>: the paraphraser did not, and wrote on
    past the end of its turn. Here a token SmolLM2 writes greedily is made one of them."""
    from memaudit.probes.decop.paraphrase import LocalParaphraser
    from memaudit.models.loading import load_causal_lm
    from memaudit.models.builtin import ensure_builtin

    model, tok = load_causal_lm({"path": str(ensure_builtin("smollm2-135m-instruct", "resources/cache"))},
                                device="cpu", dtype="float32")
    passage = ("The crude oil price rose sharply on Monday after the cartel announced new production limits. "
               "Traders said the cut was larger than expected.")
    way = LocalParaphraser(model, tok, name="smollm2-135m", temperature=0.0, batch_size=2, seed=3)
    [[free]] = way.candidates([passage], [64], attempt=0, wanted=[1])
    assert free == passage  # greedy SmolLM2 copies it: the sentence after the first is written
    model.generation_config.eos_token_id = [model.generation_config.eos_token_id,
                                            tok(" Traders", add_special_tokens=False)["input_ids"][0]]
    assert way.candidates([passage], [64], attempt=0, wanted=[1]) == [[passage[:passage.index(" Traders")]]]
