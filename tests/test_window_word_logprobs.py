"""A causal reference model reading both sides of a word: candidate fills scored by the whole window's
likelihood (memaudit.models.window_word_logprobs), against a one-at-a-time loop and hand computations."""

from __future__ import annotations

import math
import re

import pytest

from memaudit.errors import ConfigError

ISHMAEL = "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse."
CRUDE = "The crude oil price rose sharply on Monday after the cartel announced new production limits."
EMMA = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition."
TOL = 1e-4


def words_of(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"[A-Za-z]{3,}", text)]


def total_logprob(model, ids: list[int]) -> float:
    """``log p(ids[1:] | ids[0])`` by hand: one pass, every row read with log_softmax."""
    import torch

    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    return sum(float(logp[t, ids[t + 1]]) for t in range(len(ids) - 1))


def test_batched_equals_the_one_at_a_time_loop(tiny_model):
    from memaudit.models.window_word_logprobs import compute_window_word_logprobs, window_word_logprobs_loop

    model, tok = tiny_model
    texts = [ISHMAEL, CRUDE, EMMA]
    spans = [words_of(t) for t in texts]
    bounds = [[(max(0, s - 30), min(len(t), e + 30)) for s, e in sp] for t, sp in zip(texts, spans)]
    batched = compute_window_word_logprobs(model, tok, texts, spans, fills=6, bounds=bounds, batch_size=5)
    loop = window_word_logprobs_loop(model, tok, texts, spans, fills=6, bounds=bounds)
    assert sum(map(len, batched)) == sum(map(len, spans)) > 30
    for a, b in zip(batched, loop):
        for x, y in zip(a, b):
            assert (x["start"], x["end"]) == (y["start"], y["end"])
            assert x["logprob"] == pytest.approx(y["logprob"], abs=TOL)
            assert x["first_logprob"] == x["logprob"]
            assert (x["rank"], x["n_fills"], x["best_fill"]) == (y["rank"], len(y["fills"]), y["best_fill"])
            assert x["scoring"] == "window" and x["aligned"] and not x["truncated"]
    assert {x["n_fills"] for r in batched for x in r} == {6}  # the tiny vocabulary still proposes 6 words
    assert len({x["rank"] for r in batched for x in r}) > 2  # ranks spread over 0..6


def test_the_word_and_its_fills_share_the_window_likelihood_as_a_softmax(tiny_model):
    """By hand: the window with each candidate through the model whole; logprob is the word's share."""
    from memaudit.models.token_stats import context_token_id
    from memaudit.models.window_word_logprobs import compute_window_word_logprobs, fill_words

    model, tok = tiny_model
    s, e = CRUDE.index("cartel"), CRUDE.index("cartel") + len("cartel")
    rec = compute_window_word_logprobs(model, tok, [CRUDE], [[(s, e)]], fills=4)[0][0]
    ctx = context_token_id(tok)
    import torch

    prefix = [ctx] + tok(CRUDE[:s].rstrip(), add_special_tokens=False)["input_ids"]
    first = tok(CRUDE[:e], add_special_tokens=False)["input_ids"][len(prefix) - 1]
    with torch.no_grad():
        ranked = torch.argsort(model(torch.tensor([prefix])).logits[0, -1], descending=True).tolist()
    fills = fill_words(tok, ranked, "cartel", first, 4)
    lls = [total_logprob(model, [ctx] + tok(CRUDE[:s] + x + CRUDE[e:], add_special_tokens=False)["input_ids"])
           for x in ["cartel", *fills]]
    norm = math.log(sum(math.exp(v) for v in lls))
    assert len(fills) == 4 and rec["n_fills"] == 4
    assert rec["logprob"] == pytest.approx(lls[0] - norm, abs=TOL)
    assert rec["rank"] == sum(v > lls[0] for v in lls[1:])
    assert rec["best_fill"] == ["cartel", *fills][max(range(5), key=lambda i: lls[i])]
    # the left-context numbers, as the causal reference reads them from the same window
    from memaudit.models.word_logprobs import compute_word_logprobs

    left = compute_word_logprobs(model, tok, [CRUDE], [[(s, e)]])[0][0]
    assert (rec["left_first_logprob"], rec["left_rank"]) == (pytest.approx(left["first_logprob"], abs=TOL),
                                                             left["rank"])


def test_a_group_whose_fills_retokenise_the_left_side_is_summed_whole_with_the_same_numbers(tiny_model, monkeypatch):
    """The rare path (a fill that changes the tokens left of it): the windows through the model whole, from
    the first token at which they differ; forced here on every word, it gives the cached path's numbers."""
    import memaudit.models.window_word_logprobs as window

    model, tok = tiny_model
    texts, spans = [ISHMAEL, EMMA], [words_of(ISHMAEL)[:5], words_of(EMMA)[:5]]
    cached = window.compute_window_word_logprobs(model, tok, texts, spans, fills=4, batch_size=3)
    assert window.shares_prefix([[1, 2, 3], [1, 2, 4]], 2) and not window.shares_prefix([[1, 2, 3], [1, 5, 3]], 2)
    monkeypatch.setattr(window, "shares_prefix", lambda group, n: False)
    whole = window.compute_window_word_logprobs(model, tok, texts, spans, fills=4, batch_size=3)
    for a, b in zip(sum(cached, []), sum(whole, [])):
        assert a["logprob"] == pytest.approx(b["logprob"], abs=TOL)
        assert (a["rank"], a["best_fill"], a["n_fills"], a["left_rank"]) == (b["rank"], b["best_fill"], b["n_fills"],
                                                                             b["left_rank"])


def test_fill_words_take_whole_words_in_rank_order_without_case_duplicates(tiny_model):
    from memaudit.models.window_word_logprobs import fill_words, starts_word

    _, tok = tiny_model
    vocab = tok.get_vocab()
    spaced = sorted(i for t, i in vocab.items() if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 3)
    pieces = sorted(i for t, i in vocab.items() if t.isalpha() and len(t) > 2)
    punct = vocab["\u0120,"] if "\u0120," in vocab else vocab[","]
    a, b, c = spaced[:3]
    word_a, word_b, word_c = (tok.decode([i]).strip() for i in (a, b, c))
    assert starts_word(tok, a) and not starts_word(tok, pieces[0]) and len(spaced) > 10
    ranked = [punct, pieces[0], a, c, a, b]
    # punctuation, a piece that does not start a word, a repeat and the word itself (without case) are passed over
    assert fill_words(tok, ranked, word_c.upper(), a, 5) == [word_a, word_b]
    assert fill_words(tok, ranked, "cartel", a, 2) == [word_a, word_c]
    # where the word starts without a space (its first token is a piece), only pieces are fills
    assert fill_words(tok, ranked, "cartel", pieces[1], 5) == [tok.decode([pieces[0]])]


def test_a_window_longer_than_max_tokens_is_cut_around_the_word(tiny_model):
    from memaudit.models.window_word_logprobs import compute_window_word_logprobs, window_word_logprobs_loop

    model, tok = tiny_model
    text = " ".join([ISHMAEL, CRUDE, EMMA])
    s = text.index("cartel")
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    rec = compute_window_word_logprobs(model, tok, [text], [[(s, s + 6)]], fills=3, max_tokens=16)[0][0]
    assert n > 16 and rec["truncated"] and rec["left_tokens"] < 16
    # the same numbers as the loop over the characters the cut kept: the tokens around the word
    ids = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    hits = [i for i, (a, b) in enumerate(ids["offset_mapping"]) if a < s + 6 and b > s]
    lo = hits[0] - (16 - len(hits)) // 2  # half the room the word leaves goes left of it
    left, right = ids["offset_mapping"][lo][0], ids["offset_mapping"][lo + 15][1]
    expected = window_word_logprobs_loop(model, tok, [text], [[(s, s + 6)]], fills=3, bounds=[[(left, right)]])[0][0]
    assert rec["logprob"] == pytest.approx(expected["logprob"], abs=TOL) and rec["rank"] == expected["rank"]
    # every cut holds the word and at most max_tokens tokens after the context token
    from memaudit.models.token_stats import context_token_id
    from memaudit.models.window_word_logprobs import _slot

    for m in (6, 9, 12, 17, 23):
        for word in ("cartel", "Woodhouse", "Ishmael", "purse"):
            at = text.index(word)
            slot = _slot(tok, context_token_id(tok), 0, 0, text, at, at + len(word), (0, len(text)), m)
            assert slot.truncated and len(slot.ids) - 1 <= m and slot.left <= at < at + len(word) <= slot.right
            assert tok.decode(slot.ids[1 + slot.word.first:1 + slot.word.last]).strip() == word and slot.word.aligned
    with pytest.raises(ValueError, match="at least one candidate fill"):
        compute_window_word_logprobs(model, tok, [text], [[(s, s + 6)]], fills=0)


def test_the_backend_serves_window_scoring_and_records_it(tiny_backend):
    recs = tiny_backend.word_logprobs([CRUDE], [words_of(CRUDE)[:3]], fills=2)[0]
    assert [r["scoring"] for r in recs] == ["window"] * 3 and all(r["n_fills"] == 2 for r in recs)
    assert [r["scoring"] for r in tiny_backend.word_logprobs([CRUDE], [words_of(CRUDE)[:1]])[0]] == ["causal"]


def test_build_items_records_window_scoring(tiny_backend):
    from memaudit.probes.cloze.items import build_items

    settings = {"context_chars": 60, "prob_threshold": -1.0, "rank_threshold": 1, "tune_coverage": 0.5,
                "min_reconstructed": 1, "measures": ["prob", "rank"], "top_k": 10, "reference": {"fills": 3}}
    passages = [{"passage_id": f"p{i}", "doc_id": f"d{i}", "label": i % 2, "text": t}
                for i, t in enumerate([ISHMAEL, CRUDE])]
    lines = []
    items, table = build_items(passages, tiny_backend, settings, progress=lines.append)
    assert {it["reference_scoring"] for it in items} == {"window"} and set(table["ref_scoring"]) == {"window"}
    assert any(line.endswith("the words scored among 3 candidate fills by the likelihood of the whole context "
                             "window, both sides (a causal LM)") for line in lines)
    assert table["ref_rank"].between(0, 3).all() and (table["ref_n_fills"] == 3).all()
    assert (table["ref_left_rank"] >= 0).all() and table["ref_left_logprob"].lt(0).all()
    assert ((table["ref_best_fill"] == table["word"]) == (table["ref_rank"] == 0)).all()


def test_config_refuses_a_rank_threshold_no_window_rank_can_pass():
    import copy
    from pathlib import Path

    import yaml

    from memaudit import jobs
    from memaudit.probes.cloze import plan

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "ci.yaml").read_text())
    windowed = copy.deepcopy(raw)
    windowed["probes"]["cloze"].setdefault("reference", {})["fills"] = 20
    windowed["probes"]["cloze"]["rank_threshold"] = 2000  # the paper's (ci.yaml tunes it)
    with pytest.raises(ConfigError) as err:
        jobs.validate_config(windowed)
    assert str(err.value) == (
        "config key probes.cloze.rank_threshold: 2000 selects no word, because with probes.cloze.reference.fills 20 a word's "
        "rank counts the fills scored above it (0 to 20); set it below 20, or tune, or drop rank from "
        "probes.cloze.measures")
    for ok in ({"rank_threshold": 5}, {"rank_threshold": "tune"}, {"measures": ["prob", "person"]}):
        config = copy.deepcopy(windowed)
        config["probes"]["cloze"].update(ok)
        assert plan.check_config(jobs.validate_config(config)) == []
    windowed["probes"]["cloze"]["reference"]["fills"] = 0
    with pytest.raises(ConfigError, match="probes.cloze.reference.fills"):
        jobs.validate_config(windowed)
    # absent: the reference block is what it was (no default), so adding the option reran nothing
    assert "fills" not in jobs.validate_config(raw)["probes"]["cloze"]["reference"]
