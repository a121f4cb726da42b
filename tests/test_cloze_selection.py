"""Surprisal-token selection of the information-guided cloze probes: word log-probabilities (one pass
per text) against hand computations, candidate rules, Prob/Rank/Person selection, threshold tuning."""

from __future__ import annotations

import math

import pytest

from memaudit.errors import ConfigError
from memaudit.probes.cloze.candidates import (CANDIDATE_POS, Candidate, cloze_context, extract_candidates,
                                              extract_candidates_many, spacy_pipeline, spans)
from memaudit.probes.cloze.select import (PERSON, PROB, RANK, select_many, select_surprisal_tokens,
                                          tune_threshold)

ISHMAEL = "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse."
CRUDE = "The crude oil price rose sharply on Monday after the cartel announced new production limits."
EMMA = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition."
TOL = 1e-4


def span_of(text: str, word: str) -> tuple[int, int]:
    start = text.index(word)
    return start, start + len(word)


def token_range(tok, ids: list[int], word: str) -> tuple[int, int]:
    """Where ``word`` (with or without its leading space) is in ``ids``, found by decoding, not by offsets."""
    for a in range(len(ids)):
        for b in range(a + 1, len(ids) + 1):
            if tok.decode(ids[a:b]) in (word, " " + word):
                return a, b
    raise AssertionError(f"{word!r} not in the tokens")


def hand_scores(model, tok, text: str, word: str, window_start: int = 0) -> tuple[float, float, int, int]:
    """(word log-prob, first-token log-prob, rank by counting, n_tokens): one pass over the context token and
    ``ids[window_start:]``, read with ``torch.log_softmax`` on the same ids."""
    import torch

    ids = tok(text, add_special_tokens=False)["input_ids"]
    a, b = token_range(tok, ids, word)
    seq = [tok.bos_token_id] + ids[window_start:b]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), dim=-1)
    # row r predicts seq[r + 1] = ids[window_start + r]
    lps = [float(logp[j - window_start, ids[j]]) for j in range(a, b)]
    row = logp[a - window_start].tolist()
    rank = sum(1 for v in row if v > row[ids[a]])  # brute force: tokens strictly more probable (Eq. 3)
    return sum(lps), lps[0], rank, b - a


def hand_greedy(model, tok, text: str, word: str) -> bool:
    """Whether every token of ``word`` is the top choice given the ones before it (brute-force argmax)."""
    import torch

    ids = tok(text, add_special_tokens=False)["input_ids"]
    a, b = token_range(tok, ids, word)
    with torch.no_grad():
        logits = model(torch.tensor([[tok.bos_token_id] + ids[:b]])).logits[0]
    return all(int(logits[j].argmax()) == ids[j] for j in range(a, b))  # row j predicts ids[j]


@pytest.fixture(scope="module")
def backend(tiny_model):
    from memaudit.backends.hf import HFBackend

    model, tok = tiny_model
    return HFBackend({}, model=model, tokenizer=tok, batch_size=3)


# ----------------------------------------------------------------------------- word log-probabilities

def test_word_logprobs_equal_a_hand_computation(tiny_model, backend):
    model, tok = tiny_model
    words = ["Call", "Ishmael", "money", "purse"]  # start of text; 3 tokens; one token; one token, last word
    out = backend.word_logprobs([ISHMAEL], [[span_of(ISHMAEL, w) for w in words]])
    assert [r["word"] for r in out[0]] == words
    n_tokens = {}
    for rec, word in zip(out[0], words):
        lp, first, rank, n = hand_scores(model, tok, ISHMAEL, word)
        assert rec["logprob"] == pytest.approx(lp, abs=TOL)
        assert rec["first_logprob"] == pytest.approx(first, abs=TOL)
        assert (rec["rank"], rec["n_tokens"]) == (rank, n)
        assert rec["aligned"] and not rec["truncated"]
        n_tokens[word] = n
    assert n_tokens["money"] == 1 and n_tokens["Ishmael"] == 3  # both cases are covered
    assert out[0][0]["left_tokens"] == 0  # "Call" is predicted from the context token alone
    assert out[0][1]["logprob"] < out[0][1]["first_logprob"]  # a sum of three negative terms


def test_padding_in_a_batch_of_texts_of_different_lengths(tiny_model, backend):
    model, tok = tiny_model
    texts = [ISHMAEL, "Call me Ishmael.", CRUDE, EMMA]
    words = [["Ishmael", "purse"], ["Ishmael"], ["oil", "Monday", "cartel"], ["Emma", "home"]]
    batched = backend.word_logprobs(texts, [[span_of(t, w) for w in ws] for t, ws in zip(texts, words)],
                                    batch_size=4)
    alone = [backend.word_logprobs([t], [[span_of(t, w) for w in ws]], batch_size=1)[0]
             for t, ws in zip(texts, words)]
    for text, ws, recs, solo in zip(texts, words, batched, alone):
        for word, rec, rec1 in zip(ws, recs, solo):
            lp, first, rank, _ = hand_scores(model, tok, text, word)
            assert rec["logprob"] == pytest.approx(lp, abs=TOL) and rec1["logprob"] == pytest.approx(lp, abs=TOL)
            assert rec["first_logprob"] == pytest.approx(first, abs=TOL)
            assert rec["rank"] == rank == rec1["rank"]


def test_one_pass_equals_the_per_candidate_loop(tiny_model):
    from memaudit.models.word_logprobs import compute_word_logprobs, word_logprobs_loop

    model, tok = tiny_model
    texts = [ISHMAEL, CRUDE, EMMA]
    every_word = [[(m.start(), m.end()) for m in __import__("re").finditer(r"\w+", t)] for t in texts]
    one_pass = compute_word_logprobs(model, tok, texts, every_word, batch_size=2)
    loop = word_logprobs_loop(model, tok, texts, every_word)
    assert sum(map(len, one_pass)) == sum(map(len, every_word)) > 40
    for a, b in zip(one_pass, loop):
        for x, y in zip(a, b):
            assert x["logprob"] == pytest.approx(y["logprob"], abs=TOL)
            assert x["first_logprob"] == pytest.approx(y["first_logprob"], abs=TOL)
            assert (x["rank"], x["greedy"], x["n_tokens"], x["start"], x["end"]) == (
                y["rank"], y["greedy"], y["n_tokens"], y["start"], y["end"])


def test_a_text_longer_than_the_window_is_read_in_overlapping_windows(tiny_model):
    from memaudit.models.word_logprobs import compute_word_logprobs

    model, tok = tiny_model
    ids = tok(ISHMAEL, add_special_tokens=False)["input_ids"]
    window, stride = 8, 4
    recs = compute_word_logprobs(model, tok, [ISHMAEL], [[span_of(ISHMAEL, "me"), span_of(ISHMAEL, "purse")]],
                                 max_tokens=window)[0]
    assert len(ids) > window
    me, purse = recs
    assert not me["truncated"] and me["logprob"] == pytest.approx(hand_scores(model, tok, ISHMAEL, "me")[0], abs=TOL)
    a, b = token_range(tok, ids, "purse")
    w0 = next(w for w in range(0, b, stride) if w + window >= b)  # the first window holding the word
    lp, first, rank, _ = hand_scores(model, tok, ISHMAEL, "purse", window_start=w0)
    assert purse["truncated"] and purse["left_tokens"] == a - w0 >= window // 2 - 1
    assert (purse["logprob"], purse["rank"]) == (pytest.approx(lp, abs=TOL), rank)


def test_a_word_longer_than_half_the_window_is_read_from_a_window_holding_its_first_token(tiny_model):
    """The grid of windows every ``max_tokens // 2`` tokens put a word of more than about half a window
    in one starting after its first token (negative offsets into the keep mask): such a word gets a
    window ending at its last token, the left context the loop gives it."""
    from memaudit.models.word_logprobs import WordTokens, compute_word_logprobs, plan_windows, word_logprobs_loop

    assert plan_windows(20, [WordTokens(3, 10, True)], 8) == [(2, [0])]  # the grid's window would start at 4
    assert plan_windows(20, [WordTokens(4, 10, True), WordTokens(3, 10, True)], 8) == [(2, [1]), (4, [0])]
    with pytest.raises(ValueError, match="^a word of 9 tokens does not fit in 8 tokens$"):
        plan_windows(20, [WordTokens(1, 10, True)], 8)
    model, tok = tiny_model
    text = "Call me Ishmael, said Xqzvbwkjyp to the crew."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    a, b = token_range(tok, ids, "Xqzvbwkjyp")
    assert (len(ids), a, b) == (31, 11, 22)  # " " "X" "q" ... "p": 11 tokens, the space its own
    rec, crew = compute_word_logprobs(model, tok, [text], [[span_of(text, "Xqzvbwkjyp"), span_of(text, "crew")]],
                                      max_tokens=14)[0]
    # the word's tokens are "X" ... "p" (12 to 22; the space token stays in its left context), read from a
    # window of tokens 8 to 22, as the loop reads it (the grid's window would start at 14)
    assert (rec["n_tokens"], rec["left_tokens"], rec["truncated"]) == (10, 12 - 8, True)
    loop = word_logprobs_loop(model, tok, [text], [[span_of(text, "Xqzvbwkjyp")]], max_tokens=14)[0][0]
    assert (rec["logprob"], rec["first_logprob"], rec["rank"], rec["left_tokens"]) == (
        pytest.approx(loop["logprob"], abs=TOL), pytest.approx(loop["first_logprob"], abs=TOL), loop["rank"],
        loop["left_tokens"])
    assert crew["left_tokens"] == 26 - 21  # the grid's window (21) for a short word, as before


class _Boosted:
    """The tiny GPT-2 with one token's logit raised by 1e4 at every position: the model's top choice is always
    that token (a stand-in for a model that predicts a word's first piece and nothing after it)."""

    def __new__(cls, base, token_id):
        import torch

        class Boosted(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.base = base

            def forward(self, input_ids, attention_mask=None):
                logits = self.base(input_ids=input_ids, attention_mask=attention_mask).logits.clone()
                logits[..., token_id] += 1e4
                return type("Out", (), {"logits": logits})()

        return Boosted()


def test_greedy_says_whether_every_token_of_the_word_is_the_models_top_choice(tiny_model):
    """``rank`` is the first token's; ``greedy`` needs each of the word's tokens to be the top choice given
    the ones before it, which is what greedy decoding from the left context would write."""
    from memaudit.models.word_logprobs import compute_word_logprobs, word_logprobs_loop

    model, tok = tiny_model
    ids = tok(ISHMAEL, add_special_tokens=False)["input_ids"]
    a, b = token_range(tok, ids, "Ishmael")
    m = token_range(tok, ids, "money")
    assert b - a == 3 and m[1] - m[0] == 1
    spans = [[span_of(ISHMAEL, "Ishmael"), span_of(ISHMAEL, "money")]]
    for boosted, expected in ((ids[a], [(0, False), (1, False)]), (ids[m[0]], [(1, False), (0, True)])):
        boosted_model = _Boosted(model, boosted)
        for recs in (compute_word_logprobs(boosted_model, tok, [ISHMAEL], spans)[0],
                     word_logprobs_loop(boosted_model, tok, [ISHMAEL], spans)[0]):
            assert [(min(r["rank"], 1), r["greedy"]) for r in recs] == expected
    # the unboosted random model: greedy is its first token's rank 0 and every later token's, by hand
    rec = compute_word_logprobs(model, tok, [ISHMAEL], [[span_of(ISHMAEL, "Ishmael")]])[0][0]
    assert rec["greedy"] is False and rec["rank"] > 0


def test_a_span_inside_a_token_is_flagged_unaligned(backend):
    # "Ishmael" is " Is" "hma" "el": "shmael" starts inside " Is"
    rec = backend.word_logprobs([ISHMAEL], [[(9, 15)]])[0][0]
    assert rec["word"] == "shmael" and not rec["aligned"] and rec["n_tokens"] == 3
    with pytest.raises(ValueError, match="not a non-empty span"):
        backend.word_logprobs([ISHMAEL], [[(5, 5)]])


def test_capability_is_declared_for_hf_only(backend):
    from memaudit.backends.anthropic_backend import AnthropicBackend
    from memaudit.backends.base import WORD_LOGPROBS, backend_capabilities, check_probe_support
    from memaudit.backends.hf import HFBackend
    from memaudit.backends.openai_backend import OpenAIBackend

    assert WORD_LOGPROBS == "word_logprobs"
    assert WORD_LOGPROBS in HFBackend.capabilities and WORD_LOGPROBS in backend_capabilities("hf")
    for cls, name in ((OpenAIBackend, "openai"), (AnthropicBackend, "anthropic")):
        assert WORD_LOGPROBS not in cls.capabilities and WORD_LOGPROBS not in backend_capabilities(name)
        with pytest.raises(ConfigError, match=f"{cls.__name__} cannot serve word_logprobs"):
            cls.word_logprobs(object.__new__(cls), [ISHMAEL], [[(8, 15)]])
        with pytest.raises(ConfigError, match=f"needs word_logprobs, which model 'api' \\(backend '{name}'\\)"):
            check_probe_support("cloze", {WORD_LOGPROBS}, "api", name)
    assert backend.word_logprobs([], []) == [] and backend.word_logprobs([ISHMAEL], [[]]) == [[]]


# ----------------------------------------------------------------------------- candidates

def words_of(candidates) -> list[str]:
    return [c.word for c in candidates]


def test_persons_are_flagged():
    cands = extract_candidates("Elizabeth Bennet smiled at Darcy.")
    assert [(c.word, c.pos, c.is_person) for c in cands] == [
        ("Elizabeth", "PROPN", True), ("Bennet", "PROPN", True), ("Darcy", "PROPN", True)]
    assert [c.span for c in cands] == [(0, 9), (10, 16), (27, 32)]


def test_candidate_rules():
    filler = " ".join(["and then they walked on"] * 12)  # 60 words without a noun or number
    text = (f"The captain counted 1813 coins and took vitamin C daily. The captain smiled. The storm came. {filler} "
            "The storm passed and the crew met Wickham")
    cands = extract_candidates(text)
    words = words_of(cands)
    assert "captain" not in words  # twice within 50 words
    # twice, more than 50 words and 300 characters apart: a word is probed once per text, at its first
    assert [c.start for c in cands if c.word == "storm"] == [text.index("storm")]
    assert "1813" in words  # numbers are candidates
    assert "Wickham" not in words  # the text's last token
    assert "crew" in words
    doc = spacy_pipeline()(text)
    assert any(t.text == "C" and t.pos_ in CANDIDATE_POS for t in doc)  # a one-letter noun ...
    assert "C" not in words  # ... is never a candidate
    for c in cands:
        assert text[c.start:c.end] == c.word and c.pos in CANDIDATE_POS
    assert extract_candidates_many([text, "Elizabeth Bennet smiled at Darcy."]) == [
        cands, extract_candidates("Elizabeth Bennet smiled at Darcy.")]
    assert spans(cands) == [c.span for c in cands]


def test_a_word_whose_context_holds_it_again_is_not_a_candidate():
    """Short words put more than 50 words in 300 characters: a name 60 words away is then inside
    the cloze context, which would show the answer; neither occurrence is probed. With a context
    that stops short of the other occurrence, the first is (and only the first)."""
    filler = " ".join(["and so it was"] * 15)  # 60 short words, about 200 characters
    text = f"Then Kowalski came in. {filler} Then Kowalski sat down by the fire with a book."
    first, second = text.index("Kowalski"), text.rindex("Kowalski")
    assert len(text[first:second].split()) > 60 and second - first < 300
    cands = extract_candidates(text)
    assert "Kowalski" not in words_of(cands) and "fire" in words_of(cands)
    narrow = extract_candidates(text, context_chars=100)
    assert [c.start for c in narrow if c.word == "Kowalski"] == [first]
    for c in narrow:  # no candidate's own context holds its word again
        assert c.word.casefold() not in cloze_context(text, c.start, c.end, width=100).casefold().split()


def test_words_glued_to_letters_or_digits_are_not_candidates():
    words = words_of(extract_candidates("The train left at 5pm from the station near Bath, they said."))
    assert "5" not in words and "pm" not in words and "station" in words


@pytest.mark.parametrize("text, expected", [
    # spaCy splits these at the hyphen; NLTK (the authors') keeps each whole and drops it as not alphanumeric
    ("The co-op sold twenty-five sea-captain hats at the well-to-do market in Port-au-Prince today.",
     ["hats", "market", "today"]),
    # slash, a number range, underscores, two joined names
    ("The miles/hour limit, the 1914-1918 war, the __init__ method and the Texaco-Pennzoil talks ended in court.",
     ["limit", "war", "method", "talks", "court"]),
    # a double hyphen or an em dash is a dash, not a joiner; 10-Q and x-ray are joined; 1850s is one word
    ("The captain--a tall man--and the mate\u2014a sailor\u2014stood on deck with the 10-Q and a x-ray in 1850s "
     "clothes.", ["captain", "man", "mate", "sailor", "deck", "1850s", "clothes"]),
    # inner apostrophes are single spaCy tokens (not alphanumeric); a possessive 's is split off
    ("At five o'clock the O'Brien boys met at O\u2019Brien\u2019s farm near the rock'n'roll club and Smith's 3rd "
     "barn.", ["five", "boys", "farm", "club", "Smith", "barn"]),
])
def test_pieces_of_hyphenated_and_joined_words_are_not_candidates(text, expected):
    assert words_of(extract_candidates(text)) == expected


def test_part_of_larger_word():
    from memaudit.probes.cloze.candidates import part_of_larger_word

    text = "a co-op, the sea--side, 5pm and x_y or a/b"
    assert [part_of_larger_word(text, *span_of(text, w)) for w in ("co", "op", "sea", "side", "5", "x", "b")] == [
        True, True, False, False, True, True, True]
    assert not part_of_larger_word("co-op", 0, 5) and part_of_larger_word("pre-war", 4, 7)


def test_the_uniqueness_window_counts_a_hyphenated_compound_as_one_word():
    """36 whole words (75 word pieces) and 321 characters apart: a second Kowalski within a window of
    36 words hides the first, as it does in the authors' NLTK tokens; the pieces once counted 75."""
    filler = " ".join(["the well-to-do mother-in-law"] * 10)
    text = f"Then Kowalski came in with {filler} and then Kowalski sat down by the fire."
    first, second = text.index("Kowalski"), text.rindex("Kowalski")
    assert len(text[first:second].split()) == 36 and second - first == 321 > 300
    assert words_of(extract_candidates(text)) == ["fire"]
    assert words_of(extract_candidates(text, window_words=36)) == ["fire"]
    assert words_of(extract_candidates(text, window_words=35)) == ["Kowalski", "fire"]
    # a piece still counts as an occurrence: sea-captain would show captain in its context
    assert words_of(extract_candidates("The captain of the sea-captain's ship sailed.")) == ["ship"]


def test_cloze_context_cuts_at_word_boundaries():
    text = "alpha bravo charlie delta echo foxtrot golf"
    start, end = span_of(text, "delta")
    assert cloze_context(text, start, end, width=10) == "charlie [MASK] echo"  # cut in bravo and foxtrot
    assert cloze_context(text, start, end, width=100) == "alpha bravo charlie [MASK] echo foxtrot golf"
    assert cloze_context(text, 0, 5, width=6) == "[MASK] bravo"
    assert cloze_context(text, start, end, width=0) == "[MASK]"


# ----------------------------------------------------------------------------- selection

def make(words: list[str], persons: set[str] = frozenset()) -> list[Candidate]:
    out, at = [], 0
    for w in words:
        out.append(Candidate(at, at + len(w), w, "NOUN", w in persons))
        at += len(w) + 1
    return out


def score(c: Candidate, first: float, rank: int, word: float | None = None, aligned: bool = True) -> dict:
    return {"start": c.start, "end": c.end, "first_logprob": first, "logprob": first if word is None else word,
            "rank": rank, "aligned": aligned}


def test_prob_keeps_log_probabilities_below_the_threshold_lowest_first():
    cands = make(["a1", "b2", "c3", "d4", "e5", "f6", "g7"])
    firsts = [-5.0, -13.0, -20.0, -12.0, -15.0, -30.0, -13.0]
    scores = [score(c, v, 0, aligned=(c.word != "f6")) for c, v in zip(cands, firsts)]
    picked = select_surprisal_tokens(cands, scores, PROB)
    # -12 is not < -12; f6 is unaligned; the tie at -13 keeps text order
    assert [(t.candidate.word, t.logprob) for t in picked] == [("c3", -20.0), ("e5", -15.0), ("b2", -13.0),
                                                               ("g7", -13.0)]
    assert words_of(t.candidate for t in select_surprisal_tokens(cands, scores, PROB, k=2)) == ["c3", "e5"]
    assert words_of(t.candidate for t in select_surprisal_tokens(cands, scores, PROB, prob_threshold=-14)) == [
        "c3", "e5"]


def test_prob_on_the_whole_word():
    cands = make(["a1", "b2"])
    scores = [score(cands[0], -3.0, 0, word=-25.0), score(cands[1], -14.0, 0, word=-14.0)]
    assert words_of(t.candidate for t in select_surprisal_tokens(cands, scores, PROB)) == ["b2"]
    picked = select_surprisal_tokens(cands, scores, PROB, logprob_of="word")
    assert [(t.candidate.word, t.logprob) for t in picked] == [("a1", -25.0), ("b2", -14.0)]


def test_rank_keeps_ranks_above_the_threshold_highest_first():
    cands = make(["a1", "b2", "c3", "d4", "e5"])
    ranks = [10, 2001, 2000, 50000, 3000]
    scores = [score(c, -1.0, r) for c, r in zip(cands, ranks)]
    picked = select_surprisal_tokens(cands, scores, RANK)
    assert [(t.candidate.word, t.rank) for t in picked] == [("d4", 50000), ("e5", 3000), ("b2", 2001)]
    assert [t.rank for t in select_surprisal_tokens(cands, scores, RANK, rank_threshold=5, k=2)] == [50000, 3000]


def test_top_k_cuts_at_ten_by_default():
    cands = make([f"w{i}" for i in range(14)])
    scores = [score(c, -20.0 - i, 5000 + i) for i, c in enumerate(cands)]
    assert [t.candidate.word for t in select_surprisal_tokens(cands, scores, PROB)] == [
        f"w{i}" for i in range(13, 3, -1)]
    assert len(select_surprisal_tokens(cands, scores, RANK)) == 10


def test_person_takes_ner_persons_in_text_order_up_to_k():
    cands = make(["Emma", "house", "Harriet", "Knightley", "tea"], persons={"Emma", "Harriet", "Knightley"})
    assert [t.candidate.word for t in select_surprisal_tokens(cands, None, PERSON)] == ["Emma", "Harriet",
                                                                                        "Knightley"]
    assert [t.candidate.word for t in select_surprisal_tokens(cands, None, PERSON, k=2)] == ["Emma", "Harriet"]
    with pytest.raises(ValueError, match="needs the reference model's scores"):
        select_surprisal_tokens(cands, None, PROB)
    bad = [score(c, -20.0, 0) for c in reversed(cands)]
    with pytest.raises(ValueError, match="must follow the candidates' order"):
        select_surprisal_tokens(cands, bad, PROB)
    assert [len(x) for x in select_many([cands, cands[:2]], None, PERSON, k=5)] == [3, 1]


def test_person_tokens_are_names_not_the_titles_ner_puts_in_the_name():
    """spaCy's PERSON span of "Miss Bates" or "Monsieur Poirot" holds the title; "[MASK] Bates" is
    filled from context by any reader, so the title is no character name to probe (§4.1)."""
    text = "Then Mrs Elton spoke to Miss Bates, and Monsieur Poirot bowed to Lady Catherine in the garden yesterday."
    cands = extract_candidates(text)
    assert [c.word for c in cands if c.is_person] == ["Mrs", "Elton", "Bates", "Monsieur", "Poirot", "Lady",
                                                      "Catherine"]  # what NER gives
    picked = [t.candidate.word for t in select_surprisal_tokens(cands, None, PERSON)]
    assert picked == ["Elton", "Bates", "Poirot", "Catherine"]


def test_selection_on_real_candidates_and_scores(backend):
    text = "Elizabeth Bennet smiled at Darcy. The captain counted 1813 coins near Meryton, they said."
    cands = extract_candidates(text)
    scores = backend.word_logprobs([text], [spans(cands)])[0]
    picked = select_surprisal_tokens(cands, scores, PROB, prob_threshold=0.0, k=3)
    lowest = sorted(s["first_logprob"] for s in scores if s["aligned"])[:3]
    assert [t.logprob for t in picked] == lowest


def test_tune_threshold_takes_the_strictest_with_the_target_coverage():
    def text(*firsts):
        cs = make([f"w{i}" for i in range(len(firsts))])
        return [score(c, v, int(-100 * v)) for c, v in zip(cs, firsts)]

    # second-lowest log-probability per text: -14, -10, -8, -25, (a text with one candidate), (none)
    val = [text(-3.0, -14.0, -15.0), text(-10.0, -2.0, -11.0), text(-8.0, -9.0), text(-20.0, -25.0, -30.0),
           text(-40.0), text()]
    half = tune_threshold(val, PROB, target_coverage=0.5)
    # m = 3 of 6 texts: the 3rd lowest second-lowest value is -10, so the threshold is just above it
    assert half.threshold == pytest.approx(-9.99) and half.coverage == 0.5 and half.reached
    assert half.mean_passing == pytest.approx((2 + 2 + 0 + 3 + 1 + 0) / 6)
    strict = tune_threshold(val, PROB, target_coverage=1 / 6)
    assert strict.threshold == pytest.approx(-24.99) and strict.coverage == pytest.approx(1 / 6)
    unreachable = tune_threshold(val, PROB, target_coverage=1.0)
    assert not unreachable.reached and unreachable.coverage == pytest.approx(4 / 6)
    assert unreachable.threshold == pytest.approx(-7.99)
    # rank = -100 x log-prob: second-highest ranks 1400, 1000, 800, 2500; m = 2 -> threshold 1400 - 1 = 1399
    by_rank = tune_threshold(val, RANK, target_coverage=2 / 6)
    assert by_rank.threshold == 1399 and by_rank.coverage == pytest.approx(2 / 6)
    exact = tune_threshold([text(-12.5, -12.5)], PROB, target_coverage=1.0)
    assert exact.threshold == pytest.approx(-12.49) and exact.coverage == 1.0
    with pytest.raises(ValueError, match="only prob and rank"):
        tune_threshold(val, PERSON)
    with pytest.raises(ValueError, match="no text has 2 scored candidates"):
        tune_threshold([text(-3.0)], PROB)
    assert math.isfinite(half.threshold)


class FixedScores:
    """A reference model that gives every candidate of a text the same log-probability (rank -100 x it)."""

    def __init__(self, values: dict[str, float]):
        self.values = values

    def word_logprobs(self, texts, spans_per_text, bounds=None):
        return [[{"start": a, "end": b, "first_logprob": self.values[t], "logprob": self.values[t],
                  "rank": int(-100 * self.values[t]), "aligned": True} for a, b in spans]
                for t, spans in zip(texts, spans_per_text)]


def test_tuned_thresholds_are_fitted_on_the_validation_passages_of_a_fixed_split():
    """BookMIA's passages carry the paper's split (meta.split): "tune" fits on the validation passages only,
    as the paper tunes on its 1870 held-out rows; without a split, on every passage (the demo's way)."""
    from memaudit.errors import InputError
    from memaudit.probes.cloze.items import build_items, thresholds_for, tuning_passages

    texts = [ISHMAEL, CRUDE, EMMA, "The captain sailed the schooner from Boston to Halifax in November.",
             "The engineer repaired the turbine at the Denver plant during the storm."]
    values = dict(zip(texts, [-20.0, -3.0, -22.0, -4.0, -5.0]))
    splits = ["validation", "test", "validation", "test", "test"]
    passages = [{"passage_id": f"p{i}", "doc_id": f"d{i}", "label": i % 2, "text": t, "meta": {"split": s}}
                for i, (t, s) in enumerate(zip(texts, splits))]
    settings = {"prob_threshold": "tune", "rank_threshold": "tune", "tune_coverage": 0.5, "top_k": 10,
                "min_reconstructed": 2, "context_chars": 300, "measures": ["prob", "rank", "person"]}
    reference = FixedScores(values)
    assert tuning_passages(passages) == [0, 2]
    logs: list[str] = []
    items, table = build_items(passages, reference, settings, progress=logs.append)
    assert all(it["n_candidates"] >= 2 for it in items)
    # validation values -20 and -22: m = ceil(0.5 x 2) = 1, the lowest second value -22, so just above it;
    # ranks 2000 and 2200: the highest, 2200 - 1
    assert all(it["thresholds"] == {"prob": pytest.approx(-21.99), "rank": 2199.0} for it in items)
    validation = [p["text"] for p in passages if p["meta"]["split"] == "validation"]
    spans = [[(r.start, r.end) for r in table[table.passage_id == p["passage_id"]].itertuples()]
             for p in passages if p["meta"]["split"] == "validation"]
    by_hand = reference.word_logprobs(validation, spans)
    assert tune_threshold(by_hand, PROB).threshold == pytest.approx(items[0]["thresholds"]["prob"])
    assert tune_threshold(by_hand, RANK).threshold == items[0]["thresholds"]["rank"]
    assert [it["split"] for it in items] == splits
    assert "(tuned on the 2 validation passages of the fixed split)" in logs[1]
    # half the validation passages (p2, at -22) keep their tokens; no test passage (-3, -4, -5) does
    for measure in (PROB, RANK):
        assert [any(t["measure"] == measure for t in it["tokens"]) for it in items] == [False, False, True, False,
                                                                                      False]
    # no split (the demo): every passage, m = 3 of 5 -> the third lowest, -5; rank 500 - 1
    unsplit = [{**p, "meta": {}} for p in passages]
    assert tuning_passages(unsplit) is None
    plain, _ = build_items(unsplit, reference, settings, progress=logs.append)
    assert plain[0]["thresholds"] == {"prob": pytest.approx(-4.99), "rank": 499.0}
    assert all("split" not in it for it in plain) and "tuned on" not in logs[-1]
    # numbers given are used as given, split or not; "tune" with no validation passage is an error
    fixed = {**settings, "prob_threshold": -12, "rank_threshold": 2000}
    assert thresholds_for(fixed, [], []) == {"prob": -12.0, "rank": 2000.0}
    with pytest.raises(InputError, match="no validation passage to tune on"):
        build_items([{**p, "meta": {"split": "test"}} for p in passages], reference, settings, progress=logs.append)


# ----------------------------------------------------------------------------- question-answer scope

def test_question_answer_texts_mask_the_question_only(backend):
    from memaudit.datasets.qa import render_qa
    from memaudit.probes.cloze.items import build_items, mask_limit

    question = "Texaco sold its refinery in Toledo to Sun Company for 1.2 billion dollars in March."
    choices = ["Exxon", "Chevron", "Mobil", "Texaco"]
    qa = {"passage_id": "q#p0", "doc_id": "q", "label": 1, "text": render_qa(question, choices, "Texaco"),
          "meta": {"question": question, "choices": choices, "answer": "Texaco", "answer_index": 3}}
    prose = {"passage_id": "n#p0", "doc_id": "n", "label": 0, "text": CRUDE, "meta": {}}
    assert mask_limit(qa) == (len(question), "question")
    assert mask_limit(qa, "all") == (len(qa["text"]), "text")
    assert mask_limit(prose) == (len(CRUDE), "text")
    # a question that does not open the text (another format) is not a QA text
    assert mask_limit({**qa, "meta": {"question": "Who sold it?"}}) == (len(qa["text"]), "text")
    with pytest.raises(ValueError, match="qa_scope: 'choices' is not one of question, all"):
        mask_limit(qa, "choices")

    settings = {"prob_threshold": 0.0, "rank_threshold": 0, "tune_coverage": 0.5, "top_k": 50,
                "min_reconstructed": 1, "context_chars": 300, "measures": ["prob", "rank", "person"]}
    everywhere = extract_candidates(qa["text"])
    outside = [c for c in everywhere if c.end > len(question)]
    # the choices and the answer line hold candidates ("Answer" among them: NER calls it a name),
    # and "Texaco" recurs in the choices and the answer line, so it is no candidate anywhere
    assert {"Exxon", "Chevron", "Mobil"} <= set(words_of(outside))
    assert "Texaco" not in words_of(everywhere)
    logs: list[str] = []
    items, table = build_items([qa, prose], backend, settings, progress=logs.append)
    inside = [c for c in everywhere if c.end <= len(question)]
    assert items[0]["mask_scope"] == "question" and items[0]["n_candidates"] == len(inside) > 0
    assert items[0]["n_out_of_scope"] == len(outside)
    assert items[1]["mask_scope"] == "text" and items[1]["n_out_of_scope"] == 0
    assert {t["word"] for t in items[0]["tokens"]} == set(words_of(inside))
    assert all(t["end"] <= len(question) for t in items[0]["tokens"])
    assert sorted(table[table.doc_id == "q"].word) == sorted(words_of(inside))
    assert f"({len(outside)} more in question-answer texts' choices and answer lines left out" in logs[0]
    items_all, table_all = build_items([qa, prose], backend, {**settings, "qa_scope": "all"}, progress=logs.append)
    assert items_all[0]["mask_scope"] == "text" and items_all[0]["n_candidates"] == len(everywhere)
    assert sorted(table_all[table_all.doc_id == "q"].word) == sorted(words_of(everywhere))
    assert items_all[1] == items[1]


# ----------------------------------------------------------------------------- the logit knowledge filter

def test_logit_filter_drops_exactly_the_words_the_filter_model_ranks_first(tiny_model_dir, tmp_path):
    """``filter.mode: logit``: a token is dropped when greedy decoding by the filter model from the text to its
    left writes the whole word (every token of it the top choice, the logit probe's rule) -- checked against
    brute-force argmaxes at each of the word's tokens, on a filter model that memorised one of the two texts
    (so both outcomes occur)."""
    from memaudit.backends.hf import HFBackend
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import load_causal_lm
    from memaudit.probes.cloze.knowledge_filter import top_choice_filter

    model, tok = load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")
    finetune(model, tok, [CRUDE], tmp_path / "weights", method="full", epochs=20, lr=5e-3, duplication=1,
             batch_size=1, max_length=64, seed=0)
    model, tok = load_causal_lm({"path": str(tmp_path / "weights")}, device="cpu")
    texts = [ISHMAEL, CRUDE]
    words = {0: ["years", "money", "purse"], 1: ["crude", "price", "Monday", "cartel", "production"]}
    spans = {(i, w): span_of(texts[i], w) for i, ws in words.items() for w in ws}
    tokens = {(i, a): {"word": w, "start": a, "end": b} for (i, w), (a, b) in spans.items()}
    dropped = top_choice_filter(texts, tokens, HFBackend({}, model=model, tokenizer=tok, batch_size=2))
    expected = {key for key, t in tokens.items() if hand_greedy(model, tok, texts[key[0]], t["word"])}
    assert dropped == expected
    assert {i for i, _ in dropped} == {1}  # the memorised text's words, none of the other's
    assert len(dropped) >= 3
    assert top_choice_filter(texts, {}, None) == set()
    # through the config (probes.cloze.filter: {model, mode: logit}) into build_items: the same tokens are
    # dropped, counted per item and marked in the candidates table
    from memaudit.io import write_json
    from memaudit.probes.cloze.items import build_items, knowledge_filter_from

    write_json(tmp_path / "filter" / "manifest.json", {"load": {"path": str(tmp_path / "weights")}})
    settings = {"prob_threshold": 0.0, "rank_threshold": 0, "tune_coverage": 0.5, "top_k": 50,
                "min_reconstructed": 1, "context_chars": 300, "measures": ["rank"],
                "filter": {"model": "f", "mode": "logit"}}
    drop = knowledge_filter_from({"models": {"f": {"family": "tiny-gpt2", "dtype": "float32"}}}, settings,
                                 str(tmp_path / "filter"))
    passages = [{"passage_id": f"p{i}", "doc_id": f"d{i}", "label": i, "text": t, "meta": {}}
                for i, t in enumerate(texts)]
    reference = HFBackend({}, model=load_causal_lm({"path": str(tiny_model_dir)}, device="cpu")[0], tokenizer=tok)
    plain, _ = build_items(passages, reference, {k: v for k, v in settings.items() if k != "filter"},
                           progress=lambda m: None)
    items, table = build_items(passages, reference, settings, knowledge_filter=drop, progress=lambda m: None)
    selected = {(i, t["start"]): t for i, it in enumerate(plain) for t in it["tokens"]}
    gone = {key for key, t in selected.items() if hand_greedy(model, tok, texts[key[0]], t["word"])}
    assert gone and {i for i, _ in gone} == {1}
    assert [it["n_filtered"] for it in items] == [sum(j == k for j, _ in gone) for k in range(2)]
    assert {(i, t["start"]) for i, it in enumerate(items) for t in it["tokens"]} == set(selected) - gone
    assert {(int(r.doc_id[1:]), r.start) for r in table[table.filtered].itertuples()} == gone
