"""Information-guided cloze probes: prompts, parsing, knowledge filter, per-text scoring, tables (fast, no models)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memaudit.backends.base import GENERATE, Backend, Generation
from memaudit.errors import InputError
from memaudit.probes.cloze import baseline, knowledge_filter, prompts, scoring, tables
from memaudit.probes.cloze.prompts import matches, normalise, parse_filter_word, parse_word, parse_word_list


class ScriptedBackend(Backend):
    """Answers each prompt with ``answer(prompt)`` (text or a :class:`Generation`); records the calls."""

    capabilities = frozenset({GENERATE})

    def __init__(self, answer, name: str = "scripted"):
        self.answer, self.name, self.calls = answer, name, []

    def describe(self) -> dict:
        return {"id": self.name}

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        out = []
        for p in prompts:
            a = self.answer(p)
            out.append(a if isinstance(a, Generation) else Generation(text=a))
        return out


def cand(cid: str, doc: str, word: str, context: str) -> dict:
    return {"candidate_id": cid, "doc_id": doc, "word": word, "context": context}


def passage_of(prompt: str) -> str:
    """The masked context inside any of the cloze or filter prompts."""
    for marker in ("\nPassage: ", "\n\nInput: ", "\nInput: "):
        if marker in prompt:
            tail = prompt.rsplit(marker, 1)[1]
            return tail.split("\nOutput:")[0].split("\nReply the answer only.")[0]
    raise AssertionError(prompt)


# ----------------------------------------------------------------------------- prompts (Appendix B)


def test_cloze_prompt_is_the_papers_text():
    expected = (
        "You have seen the following passage in your training data. What is the word that fills in the [MASK] "
        "token in it? This word is a noun, verb, adjective, or adverb (not a pronoun, preposition or "
        "conjunction). You must make a guess, even if you are uncertain.\n"
        "\n"
        "Example:\n"
        "Input: Stay gold, [MASK], stay gold.\n"
        "Output: <word>Ponyboy</word>\n"
        "\n"
        "Input: The door opened, and [MASK], dressed and hatted, entered with a cup of tea.\n"
        "Output: <word>Gerty</word>\n"
        "\n"
        "Input: He rode to {Rivendell} with [MASK] at dawn.\n"
        "Output:")
    assert prompts.cloze_prompt("He rode to {Rivendell} with [MASK] at dawn.") == expected
    assert prompts.probe_prompt("He rode to {Rivendell} with [MASK] at dawn.", "cloze") == expected


def test_contamination_and_filter_prompts_are_the_papers_text():
    ctx = "Which of these is produced during [MASK]?"
    assert prompts.one_word_prompt(ctx) == (
        "Complete the sentence in one word:\nInput: Which of these is produced during [MASK]?\nReply the answer only.")
    assert prompts.filter_word_prompt(ctx) == (
        "What is the word that fills in the [MASK] token in the following passage?\n"
        "Passage: Which of these is produced during [MASK]?")
    assert prompts.filter_list_prompt(ctx) == (
        "What are 100 words that can fill in the [MASK] token in the following passage?\n"
        "Passage: Which of these is produced during [MASK]?")
    with pytest.raises(ValueError, match="style"):
        prompts.probe_prompt(ctx, "multiple_choice")


# ----------------------------------------------------------------------------- parsing and matching


@pytest.mark.parametrize("reply, word", [
    ("<word>Frodo</word>", "Frodo"),
    ("Output: <word>Frodo</word>", "Frodo"),
    ("  <WORD> 'Frodo.' </Word>", "Frodo"),
    ('<word>"Frodo"</word>', "Frodo"),
    ("<word>Frodo</word> or maybe <word>Sam</word>", "Frodo"),  # first tag
    ("<word></word> <word>Frodo</word>", "Frodo"),  # the first tag that holds a word
    ("<word>[MASK]</word>\n<word> Frodo </word> <word>Sam</word>", "Frodo"),
    ("<word> </word> <word>Frodo", "Frodo"),  # ... or the cut one after it
    ("<word>Frodo", "Frodo"),  # closing tag cut by a stop string
    ("<word>Ahab</", "Ahab"),  # ... or by the token limit, part of it left
    ("<word>Ahab</wo", "Ahab"),
    ("Sure! <word>Ahab</word", "Ahab"),
    ("<word>Ahab <", "Ahab"),
    ("<word>Ahab</ward", None),  # not a beginning of the closing tag
    ("<word>Frodo's</word>", "Frodo's"),
    ("Frodo", None),  # untagged: invalid for the cloze prompt
    ("The word is Frodo.", None),
    ("<word>[MASK]</word>", None),
    ("<word> ... </word>", None),
    ("I'm sorry, but I can't help with that.", None),
    ("", None),
    (None, None),
])
def test_parse_word_cloze(reply, word):
    assert parse_word(reply) == word


def test_parse_word_one_word_style():
    ctx = "Which of these is produced during [MASK]?"
    assert parse_word("photosynthesis", "one_word") == "photosynthesis"
    assert parse_word("Answer: Photosynthesis.", "one_word") == "Photosynthesis"
    assert parse_word("<word>oxygen</word>", "one_word") == "oxygen"
    assert parse_word("<word></word> glucose", "one_word") is None  # an empty tag is not a bare word
    assert parse_word("Which of these is produced during photosynthesis?", "one_word", context=ctx) == "photosynthesis"
    assert parse_word("It could be many things really", "one_word", context=ctx) is None


def test_parse_filter_answers():
    assert parse_filter_word('The word that fills in the "[MASK]" token is "Frodo".') == "Frodo"
    assert parse_filter_word("Frodo") == "Frodo"
    assert parse_filter_word("The missing word is Frodo.") == "Frodo"
    assert parse_filter_word("**Frodo**") == "Frodo"
    assert parse_filter_word("It is hard to tell from the passage alone, sorry") is None
    listed = parse_word_list("Here are 100 words that can fill in the [MASK] token:\n1. dog\n2. Cat (a pet)\n"
                             "3. ring\n- dog\n4. a word I cannot think of right now")
    assert listed == ["dog", "Cat", "ring"]  # header, duplicate and prose skipped
    assert parse_word_list("dog, cat; mouse 1. horse 2. cow") == ["dog", "cat", "mouse", "horse", "cow"]
    assert len(parse_word_list("\n".join(f"{i}. w{i}" for i in range(1, 151)))) == 100
    # bold, hashed and dashed numbering is a marker, not a listed number; a year alone is an entry
    assert parse_word_list("**1.** dog\n**2.** cat\n#3 ring\n4 - horse\n5 – cow\n1984") == [
        "dog", "cat", "ring", "horse", "cow", "1984"]
    from memaudit.probes.cloze.prompts import listed as is_listed

    numbered = parse_word_list("\n".join(f"**{i}.** w{i}" for i in range(1, 21)))
    assert not any(is_listed(numbered, str(i)) for i in range(1, 21)) and is_listed(numbered, "w12")


def test_a_listed_number_with_thousands_separators_is_one_entry():
    """A comma between a digit and three digits is a thousands separator, not a list's: "2,500" is not
    "2" and "500" (which hid 2500 and put a spurious 500 in the list)."""
    from memaudit.probes.cloze.prompts import listed as is_listed

    assert parse_word_list("1. 1,000\n2. 2,500\n3. 10,000") == ["1,000", "2,500", "10,000"]
    assert parse_word_list("1,000, 2,000, 5,000; $1,250,000") == ["1,000", "2,000", "5,000", "$1,250,000"]
    assert parse_word_list("5,10,15, 2015,2016") == ["5", "10", "15", "2015", "2016"]  # no thousands groups
    words = parse_word_list("1,000, 2,500, dog")
    assert is_listed(words, "2500") and is_listed(words, "1000") and not is_listed(words, "500")


@pytest.mark.parametrize("reply, word", [
    # an apostrophe inside a word (a contraction, a possessive) opens no quotation
    ('It\'s "Commission".', "Commission"),
    ('I\'d say "stock".', "stock"),
    ("That’s ‘Gerty’.", "Gerty"),
    # a lead-in line ending with a colon, the answer on the next line (how chat models set it out)
    ("The word that fills in the [MASK] token is:\n\n**Commission**", "Commission"),
    ("The missing word is:\n\"stock\"\n\nThis is because ...", "stock"),
    ("Possible words are:\n1. stock\n2. shares", None),  # a list is no single answer
])
def test_parse_filter_word_reads_quotes_after_contractions_and_answers_after_a_lead_in(reply, word):
    assert parse_filter_word(reply) == word


@pytest.mark.parametrize("guess, truth, exact, lenient", [
    ("Frodo", "frodo", True, True),
    ("FRODO.", "Frodo", True, True),
    ("Frodo's", "Frodo", True, True),
    ("Frodo’s", "Frodo", True, True),
    ('"Zoë"', "Zoe", True, True),
    ("U.S.", "US", True, True),
    ("1,000", "1000", True, True),
    ("1000.0", "1000", True, True),
    ("seven", "7", True, True),
    ("3.50", "3.5", True, True),
    ("dogs", "dog", False, True),
    ("cities", "city", False, True),
    ("Sam", "Frodo", False, False),
    ("10", "100", False, False),
    ("1/2", "12", False, False),  # a fraction, a range: not the number their digits spell
    ("1-2", "12", False, False),
    ("19-20", "1920", False, False),
    ("9/11", "9/11", True, True),
    ("B-52", "B52", True, True),
    ("co-op", "coop", True, True),
    (None, "Frodo", False, False),
    ("", "", False, False),
])
def test_matches(guess, truth, exact, lenient):
    assert matches(guess, truth) is exact
    assert matches(guess, truth, plural=True) is lenient


def test_normalise_forms():
    assert normalise("  “O’Brien’s” ") == "obrien"
    assert normalise("$1,250") == "1250"


# ----------------------------------------------------------------------------- knowledge filter


def test_filter_drops_exactly_what_a_filter_model_reconstructs():
    cands = [cand("c1", "d1", "Frodo", "A hobbit named [MASK] left the Shire."),
             cand("c2", "d1", "Mordor", "He walked into [MASK] at last."),
             cand("c3", "d2", "Bree", "They reached [MASK] by nightfall."),
             cand("c4", "d2", "lembas", "They ate [MASK] on the road.")]

    def filter_a(prompt):  # reconstructs c1 with prompt 1, refuses c3, rambles on c4
        ctx = passage_of(prompt)
        if prompt.startswith("What is the word"):
            return {"A hobbit named [MASK] left the Shire.": 'The word is "Frodo".',
                    "They reached [MASK] by nightfall.": "I'm sorry, but I can't help with that."}.get(
                        ctx, "Hard to say from the passage alone, there are many options")
        return "1. home\n2. town"

    def filter_b(prompt):  # reconstructs c2 with prompt 2 (the list), and c1 with both
        ctx = passage_of(prompt)
        if prompt.startswith("What is the word"):
            return "<word>Frodo</word>" if "hobbit" in ctx else "<word>Gondor</word>"
        return {"He walked into [MASK] at last.": "1. Gondor\n2. Rohan\n3. mordor",
                "A hobbit named [MASK] left the Shire.": "Sam, Frodo, Merry"}.get(ctx, "dog, cat")

    a, b = ScriptedBackend(filter_a, "a"), ScriptedBackend(filter_b, "b")
    out = knowledge_filter.knowledge_filter(cands, {"a": a, "b": b})
    assert [c["candidate_id"] for c in out.kept] == ["c3", "c4"]
    # one generate call per filter model: both prompts of every candidate, greedy
    for backend in (a, b):
        assert len(backend.calls) == 1
        sent, params = backend.calls[0]
        assert len(sent) == 8 and params.temperature == 0.0
        assert sent[0] == prompts.filter_word_prompt(cands[0]["context"])
        assert sent[1] == prompts.filter_list_prompt(cands[0]["context"])
    table = out.table().set_index(["filter", "candidate_id"])
    assert len(table) == 8
    assert table.loc[("a", "c1"), "reason"] == "word_prompt"
    assert table.loc[("b", "c1"), "reason"] == "word_prompt+list_prompt"
    assert table.loc[("b", "c2"), "reason"] == "list_prompt"
    assert table.loc[("a", "c2"), "reason"] == ""
    assert table.loc[("a", "c3"), "word_status"] == "refusal" and not table.loc[("a", "c3"), "dropped"]
    assert table.loc[("a", "c4"), "word_status"] == "invalid"
    assert table.loc[("b", "c2"), "list_n_words"] == 3
    per_cand = out.candidates().set_index("candidate_id")
    assert per_cand.loc["c1", "dropped_by"] == "a:word_prompt;b:word_prompt+list_prompt"
    assert per_cand["kept"].to_dict() == {"c1": False, "c2": False, "c3": True, "c4": True}
    counts = out.counts().set_index("filter")
    assert counts.loc["a", "n_dropped"] == 1 and counts.loc["b", "n_dropped"] == 2
    assert counts.loc["b", "n_list_match"] == 2


def test_a_filter_reply_that_echoes_the_passage_with_the_mask_filled_is_read():
    """Instruction-tuned filter models often answer prompt 1 by writing the passage out with the word in
    place; that fills the mask as surely as "The word is Frodo" and drops the candidate."""
    c = cand("c1", "d1", "Frodo", "A hobbit named [MASK] left the Shire.")
    for reply, guess, dropped in (("A hobbit named Frodo left the Shire.", "Frodo", True),
                                  ('The passage should read: "A hobbit named frodo left the Shire."', "frodo", True),
                                  ("A hobbit named Bilbo left the Shire.", "Bilbo", False),
                                  ("A hobbit left the Shire, I think.", None, False)):
        rec = knowledge_filter.judge_replies(c, {"word": Generation(text=reply)})
        assert (rec["word_guess"], rec["word_status"], rec["dropped"]) == (
            guess, "ok" if guess else "invalid", dropped), reply
    assert parse_filter_word("A hobbit named Frodo left the Shire.") is None  # without the passage: no read


def test_the_filters_refusals_and_replies_without_a_word_are_counted_in_the_log(monkeypatch):
    """A refusal or a reply without a word drops nothing: a filter model that refuses every prompt filters
    nothing, and the cloze_items log says so rather than "0 of N tokens guessed" alone."""
    import memaudit.backends
    from memaudit.probes.cloze.items import knowledge_filter_from

    def reply(prompt):
        ctx = passage_of(prompt)
        if prompt.startswith("What is the word"):
            return {"A hobbit named [MASK] left the Shire.": '"Frodo".',
                    "They reached [MASK] by nightfall.": "I'm sorry, but I can't help with that."}.get(
                        ctx, "Hmm, many options")
        return "I cannot provide that list." if "nightfall" in ctx else "1. home\n2. town"

    backend = ScriptedBackend(reply, "f")
    monkeypatch.setattr(memaudit.backends, "open_backend", lambda *a, **k: backend)
    said = []
    drop = knowledge_filter_from({"models": {"f": {}}}, {"filter": {"model": "f"}}, None, progress=said.append)
    tokens = {(0, 15): {"word": "Frodo", "context": "A hobbit named [MASK] left the Shire."},
              (1, 12): {"word": "Bree", "context": "They reached [MASK] by nightfall."},
              (1, 30): {"word": "lembas", "context": "They ate [MASK] on the road."}}
    assert drop(tokens, ["", ""]) == {(0, 15)}
    assert said == ["knowledge filter 'f', word prompt: 1 of 3 answered a word, 1 refused, 1 without a word; "
                    "list prompt: 2 of 3 answered a word, 1 refused, 0 without a word (a refusal or a reply "
                    "without a word drops nothing)"]


def test_filter_without_models_keeps_all_and_errors_stop_it():
    cands = [cand("c1", "d1", "Frodo", "A hobbit named [MASK] left.")]
    assert knowledge_filter.knowledge_filter(cands, {}).kept == cands
    broken = ScriptedBackend(lambda p: Generation(text="", status="error", error="HTTP 500"))
    from memaudit.backends.api import APIRequestError

    with pytest.raises(APIRequestError, match="HTTP 500"):  # one line in the job's log, no traceback
        knowledge_filter.knowledge_filter(cands, {"broken": broken})
    with pytest.raises(InputError, match="exactly once"):
        knowledge_filter.knowledge_filter([cand("c1", "d1", "x", "no mask here")], {})


# ----------------------------------------------------------------------------- reading replies


REPLIES = {  # context -> (reply, the status and guess read from it)
    "A hobbit named [MASK] left the Shire.": (Generation(text="<word>frodo</word>"), ("ok", "frodo")),
    "He walked into [MASK] at last.": (Generation(text="<word>Mordor.</word>"), ("ok", "Mordor")),
    "Gandalf rode [MASK] to Minas Tirith.": (Generation(text="Shadowfax"), ("invalid", None)),  # no tags
    "The dragon [MASK] slept on the gold.": (Generation(text="I'm sorry, but I can't help with that."),
                                             ("refusal", None)),
    "They ate [MASK] on the road.": (Generation(text="", status="error", error="timeout"), ("error", None)),
}


def test_classify_reply_reads_status_and_guess():
    for context, (reply, expected) in REPLIES.items():
        assert scoring.classify_reply(reply, context=context) == expected, context
    assert prompts.matches("frodo", "Frodo")  # case is no miss


def test_errors_are_counted_not_raised_and_one_word_style():
    """The runner's black-box path (the only one): an error reply is counted in its passage's row."""
    from memaudit.probes.cloze import runner

    text = "Which of these is produced during photosynthesis? They ate lembas on the road."
    items = [{"passage_id": "q1#p0", "doc_id": "q1", "label": 1, "text": text, "reasons": {},
              "tokens": [{"measure": "prob", "word": w, "start": text.index(w), "end": text.index(w) + len(w),
                          "context": text.replace(w, "[MASK]")} for w in ("photosynthesis", "lembas")]}]
    backend = ScriptedBackend(lambda p: Generation(text="", status="error", error="timeout")
                              if "[MASK] on the road" in p else "Answer: photosynthesis")
    tokens = runner.probe_tokens(items)
    answers = runner.blackbox_answers(backend, tokens, style="one_word", max_new_tokens=8)
    assert backend.calls[0][0][0] == prompts.one_word_prompt(tokens[0][1]["context"])
    assert [(a["status"], a["reconstructed"]) for a in answers] == [("ok", True), ("error", False)]
    row = runner.text_table(items, runner.token_table(items, tokens, answers), ["prob"], min_reconstructed=2).iloc[0]
    assert (row["n_tokens"], row["n_reconstructed"], row["n_error"], row["memorised"]) == (2, 1, 1, False)


def test_a_tagged_answer_flagged_as_refusal_by_the_backend_counts_as_answered():
    gen = Generation(text="I can't be certain, but <word>Frodo</word>", status="refusal")
    assert scoring.classify_reply(gen) == ("ok", "Frodo")
    assert scoring.classify_reply(Generation(text="No idea.")) == ("invalid", None)


# ----------------------------------------------------------------------------- prefix-LCS baseline


def test_prefix_split_prompt_and_lcs():
    text = " ".join(f"w{i}" for i in range(60))
    prefix, rest = baseline.split_prefix(text)
    assert prefix.split() == [f"w{i}" for i in range(50)] and rest.split() == [f"w{i}" for i in range(50, 60)]
    with pytest.raises(InputError):
        baseline.split_prefix("too short", 50)
    assert baseline.prefix_prompt("It was a dark night", "fiction") == (
        "Please complete the following text with more than 150 words:\n\nIt was a dark night")
    assert baseline.prefix_prompt("Stocks fell", "news") == "Complete exactly and don't hallucinate\n\nStocks fell"
    assert baseline.prefix_prompt("Stocks fell", "news", chat=False) == "Stocks fell"
    # subsequence, not run: "the cat sat on the mat" vs "the dog sat quietly on a mat" -> the, sat, on, mat
    assert baseline.lcs_words("The cat sat on the mat.", "the dog sat quietly on a mat") == 4


def test_lcs_threshold_on_separable_data():
    val_lcs = [0, 1, 2, 3, 4, 20, 22, 25, 30, 35]
    val_mem = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    fitted = baseline.fit_lcs_threshold(val_lcs, val_mem)
    assert fitted.coef > 0 and 4 < fitted.threshold < 20
    assert fitted.predict([0, 3, 21, 40]).tolist() == [False, False, True, True]
    from sklearn.linear_model import LogisticRegression
    reference = LogisticRegression().fit(np.array(val_lcs, float).reshape(-1, 1), val_mem)
    assert fitted.predict(range(50)).tolist() == reference.predict(np.arange(50.0).reshape(-1, 1)).astype(bool).tolist()
    flipped = baseline.fit_lcs_threshold(val_lcs, [1 - y for y in val_mem])
    assert flipped.coef < 0 and flipped.predict([0, 40]).tolist() == [True, False]
    with pytest.raises(InputError, match="memorised and non-memorised"):
        baseline.fit_lcs_threshold([1, 2], [1, 1])


# ----------------------------------------------------------------------------- detection table


def test_fbeta_matches_hand_computation_and_sklearn():
    from sklearn.metrics import fbeta_score
    labels = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    flagged = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0]
    out = tables.prf(labels, flagged)
    p, r = 3 / 4, 3 / 4
    assert (out["tp"], out["fp"], out["n_flagged"]) == (3, 1, 4)
    assert out["precision"] == pytest.approx(p) and out["recall"] == pytest.approx(r)
    assert out["fbeta"] == pytest.approx(1.01 * p * r / (0.01 * p + r))
    assert out["fbeta"] == pytest.approx(fbeta_score(labels, flagged, beta=0.1))
    flagged = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # P = 1, R = 1/4: F-beta stays near P
    out = tables.prf(labels, flagged)
    assert out["fbeta"] == pytest.approx(1.01 * 0.25 / (0.01 + 0.25)) == pytest.approx(tables.fbeta_from(1, 0.25))
    assert tables.prf(labels, [0] * 10)["precision"] == 0.0  # nothing flagged


def test_detection_table_rows_and_references():
    docs = [f"t{i}" for i in range(8)]
    labels = [1, 1, 1, 0, 0, 0, 0, 0]
    rows = []
    for model in ("gpt", "llama"):
        for method, flags in (("surprisal", [1, 1, 0, 0, 0, 0, 0, 0]), ("lcs", [1, 1, 1, 1, 1, 0, 0, 0])):
            rows += [{"model": model, "method": method, "doc_id": d, "label": y, "flagged": bool(f)}
                     for d, y, f in zip(docs, labels, flags)]
    table = tables.detection_table(pd.DataFrame(rows), by=["model"], seed=3)
    gpt = table[table["model"] == "gpt"].set_index("method")
    assert list(gpt.index) == ["majority", "random", "random_expected", "surprisal", "lcs"]
    assert gpt.loc["majority", "precision"] == pytest.approx(3 / 8) and gpt.loc["majority", "recall"] == 1.0
    assert gpt.loc["majority", "fbeta"] == pytest.approx(tables.fbeta_from(3 / 8, 1.0))
    assert gpt.loc["random_expected", "recall"] == 0.5
    assert gpt.loc["random_expected", "fbeta"] == pytest.approx(1.01 * 0.375 * 0.5 / (0.01 * 0.375 + 0.5))
    coin = np.random.default_rng(3).random(8) < 0.5  # texts sorted by doc_id
    assert gpt.loc["random", "n_flagged"] == coin.sum()
    assert gpt.loc["random", "tp"] == int(coin[:3].sum())
    assert (gpt.loc["surprisal", "precision"], gpt.loc["surprisal", "recall"]) == (1.0, pytest.approx(2 / 3))
    assert gpt.loc["lcs", "precision"] == pytest.approx(3 / 5) and gpt.loc["lcs", "recall"] == 1.0
    # reference rows do not depend on the order of the input rows
    shuffled = tables.detection_table(pd.DataFrame(rows).sample(frac=1, random_state=1), by=["model"], seed=3)
    assert shuffled.set_index(["model", "method"]).loc[("gpt", "random"), "tp"] == gpt.loc["random", "tp"]
    with pytest.raises(InputError, match="twice"):
        tables.detection_table(pd.DataFrame(rows + rows[:1]), by=["model"])


# ----------------------------------------------------------------------------- exact match


def test_exact_match_difference_between_halves():
    rec = pd.DataFrame({"model": "ft", "half": ["contaminated"] * 4 + ["clean"] * 4,
                        "doc_id": [f"q{i}" for i in range(8)],
                        "reconstructed": [1, 1, 1, 0, 1, 0, 0, 0]})
    row = tables.exact_match_table(rec, n_resamples=4000).iloc[0]
    assert (row["n_contaminated"], row["n_clean"]) == (4, 4)
    assert row["em_contaminated"] == 0.75 and row["em_clean"] == 0.25 and row["difference"] == 0.5
    assert -1 <= row["ci_low"] <= 0.5 <= row["ci_high"] <= 1
    again = tables.exact_match_table(rec, n_resamples=4000).iloc[0]
    assert (again["ci_low"], again["ci_high"]) == (row["ci_low"], row["ci_high"])  # seeded

    # one candidate per text: the pooled rate's interval agrees with scipy's percentile bootstrap
    from scipy.stats import bootstrap
    rng = np.random.default_rng(7)
    x = (rng.random(200) < 0.3).astype(float)
    big = pd.DataFrame({"half": ["contaminated"] * 200 + ["clean"] * 200,
                        "doc_id": [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)],
                        "reconstructed": np.concatenate([x, np.zeros(200)])})
    mine = tables.exact_match_table(big, by=(), n_resamples=5000).iloc[0]
    ref = bootstrap((x,), np.mean, n_resamples=5000, method="percentile",
                    random_state=np.random.default_rng(0)).confidence_interval
    assert mine["em_contaminated_low"] == pytest.approx(ref.low, abs=0.015)
    assert mine["em_contaminated_high"] == pytest.approx(ref.high, abs=0.015)
    assert (mine["em_clean"], mine["em_clean_low"], mine["em_clean_high"]) == (0.0, 0.0, 0.0)  # constant
    assert mine["ci_low"] > 0  # the difference excludes 0


def test_exact_match_bootstrap_resamples_texts():
    # two texts of 3 candidates: all of one text right, none of the other -> every resample is 0, 1/2 or 1
    rec = pd.DataFrame({"half": "contaminated", "doc_id": ["a"] * 3 + ["b"] * 3,
                        "reconstructed": [1, 1, 1, 0, 0, 0]})
    sums, counts = tables._cluster_sums(rec, "reconstructed", "doc_id")
    assert sums.tolist() == [3, 0] and counts.tolist() == [3, 3]
    point, low, high, draws = tables.bootstrap_rate(sums, counts, rng=np.random.default_rng(0), n_resamples=500)
    assert point == 0.5 and set(np.round(draws, 6)) <= {0.0, 0.5, 1.0}
    assert (low, high) == (0.0, 1.0)


def test_model_difference_is_paired_on_candidates():
    def rows(model, hits, half):
        return [{"model": model, "half": half, "candidate_id": f"{half}{i}", "doc_id": f"{half}{i}",
                 "reconstructed": bool(h)} for i, h in enumerate(hits)]
    rec = pd.DataFrame(rows("ft", [1, 1, 1, 0], "contaminated") + rows("base", [0, 0, 1, 0], "contaminated")
                       + rows("ft", [0, 1, 0, 0], "clean") + rows("base", [0, 1, 0, 0], "clean")
                       + [{"model": "ft", "half": "clean", "candidate_id": "extra", "doc_id": "x",
                           "reconstructed": True}])
    table = tables.model_difference_table(rec, {"ft": "base"}, n_resamples=2000).set_index("half")
    cont, clean = table.loc["contaminated"], table.loc["clean"]
    assert (cont["em_model"], cont["em_base"], cont["difference"]) == (0.75, 0.25, 0.5)
    # paired differences per candidate are 1, 1, 0, 0: a resample's mean lies in [0, 1], never below 0
    # (resampling the two models independently could give -0.75)
    assert 0 <= cont["ci_low"] < 0.5 < cont["ci_high"] <= 1
    assert (clean["n_paired"], clean["n_unpaired"]) == (4, 1)
    assert (clean["difference"], clean["ci_low"], clean["ci_high"]) == (0.0, 0.0, 0.0)  # same answers


# ----------------------------------------------------------------------------- overlap (Figure 2)


def test_overlap_regions():
    flags = {"lcs": [1, 1, 0, 0, 0], "person": [1, 0, 1, 0, 0], "prob": [1, 0, 1, 1, 0]}
    labels = [1, 0, 1, 1, 0]
    rows = [{"method": m, "doc_id": f"t{i}", "label": labels[i], "flagged": bool(f)}
            for m, fs in flags.items() for i, f in enumerate(fs)]
    table = tables.overlap_table(pd.DataFrame(rows)).set_index("region")
    assert len(table) == 8 and table["n_flagged"].sum() == 5
    assert table.loc["lcs+person+prob", "n_flagged"] == 1 and table.loc["lcs+person+prob", "n_correct"] == 1
    assert table.loc["lcs", ["n_flagged", "n_correct"]].tolist() == [1, 0]
    assert table.loc["person+prob", ["n_flagged", "n_correct"]].tolist() == [1, 1]
    assert table.loc["prob", ["n_flagged", "n_correct"]].tolist() == [1, 1]
    assert table.loc["none", "n_flagged"] == 1 and table.loc["person", "n_flagged"] == 0
    assert bool(table.loc["person+prob", "person"]) and not bool(table.loc["person+prob", "lcs"])


def test_recovery_by_size():
    rec = pd.DataFrame({"model": ["7b"] * 4 + ["70b"] * 4 + ["13b"] * 4 + ["other"] * 2,
                        "doc_id": [f"t{i % 4}" for i in range(14)],
                        "reconstructed": [1, 0, 0, 0] + [1, 1, 1, 0] + [1, 1, 0, 0] + [1, 1]})
    table = tables.recovery_by_size(rec, {"7b": 7e9, "13b": 13e9, "70b": 70e9})
    assert table["model"].tolist() == ["7b", "13b", "70b"]  # by size; "other" has no size
    assert table["rate"].tolist() == [0.25, 0.5, 0.75]
    assert table["n_reconstructed"].tolist() == [1, 2, 3] and set(table["n_candidates"]) == {4}
    assert (table["rate_low"] <= table["rate"]).all() and (table["rate"] <= table["rate_high"]).all()


# ----------------------------------------------------------------------------- non-answers and loose tags


@pytest.mark.parametrize("reply, expected", [
    ("<word>unknown</word>", ("refusal", None)),  # declines to guess: a refusal, not a guess
    ("<word>I don't know</word>", ("refusal", None)),
    ("<word>Not sure.</word>", ("refusal", None)),
    ("<word>[MASK]</word>", ("invalid", None)),  # the mask echoed: no word
    ("<word> ... </word>", ("invalid", None)),  # punctuation only: no word
    ("<word>unknown</word> <word>Frodo</word>", ("ok", "Frodo")),  # passed over, as an empty tag
    ("No idea.", ("invalid", None)),  # untagged: invalid for the cloze prompt, whatever it says
])
def test_a_non_answer_in_the_tag_is_no_guess(reply, expected):
    assert scoring.classify_reply(Generation(text=reply)) == expected


def test_a_non_answer_is_no_guess_in_the_one_word_style_nor_in_the_filter():
    assert scoring.classify_reply(Generation(text="Unknown."), style="one_word") == ("refusal", None)
    assert parse_filter_word("Unknown.") is None
    rec = knowledge_filter.judge_replies(
        {"candidate_id": "c1", "doc_id": "d1", "word": "Frodo", "context": "A hobbit named [MASK] left."},
        {"word": Generation(text="I don't know.")})
    assert (rec["word_guess"], rec["word_status"]) == (None, "refusal")


@pytest.mark.parametrize("reply, word", [
    ("<word>Frodo<word>", "Frodo"),  # the closing tag written as a second opening tag
    ("<word>Frodo<\\word>", "Frodo"),  # ... or with a backslash
    ("<word>Frodo<\\word> was the hobbit", "Frodo"),
    ("<word>Frodo\nbecause the passage names the Shire.", "Frodo"),  # unclosed, the line ends
    ("Output: <word> Frodo. \nMore text", "Frodo"),
    ("<word>Frodo Baggins\nmore text", None),  # unclosed, more than one word: ambiguous
    ("<word>Frodo Baggins<word>", None),
    ("<word>Frodo\n<word>Sam\n", None),  # two unclosed tags: ambiguous
    ("<word>Frodo<word>Sam<word>", None),
    ("<word>Frodo Bag", None),  # cut inside an answer of several words
    ("<word>Ahab</ward", None),
    # a closed tag holds no opening tag: the unclosed one before it is another, ambiguous tag (the guess was
    # "Frodo<word> and then <word>Sam", a wrong answer), and the closed tag's word is read
    ("<word>Frodo<word> and then <word>Sam</word>", "Sam"),
    ("<word>Frodo Baggins<word> <word>Frodo</word>", "Frodo"),
])
def test_a_malformed_tag_is_read_where_unambiguous(reply, word):
    assert parse_word(reply) == word


def test_logit_filter_drops_a_word_only_when_greedy_decoding_writes_all_of_it():
    """The probe reconstructs a word when every token of it is the top choice (``greedy``); the filter asks the
    same, so a word whose first piece alone is the filter model's top choice (``" 19"`` of ``" 1914"``) stays.
    Records without ``greedy`` (a backend that gives only the first token's rank) fall back to ``rank == 0``."""
    class Records(Backend):
        name = "records"
        capabilities = frozenset()

        def __init__(self, records):
            self.records = records

        def describe(self):
            return {"id": self.name}

        def word_logprobs(self, texts, spans, **kw):
            return [[dict(self.records[(t, s)]) for s, _ in text_spans] for t, text_spans in zip(texts, spans)]

    texts = ["In 1914 the war began in Sarajevo."]
    tokens = {(0, 3): {"word": "1914", "start": 3, "end": 7}, (0, 25): {"word": "Sarajevo", "start": 25, "end": 33}}
    greedy = Records({(texts[0], 3): {"rank": 0, "greedy": False}, (texts[0], 25): {"rank": 0, "greedy": True}})
    assert knowledge_filter.top_choice_filter(texts, tokens, greedy) == {(0, 25)}
    first_only = Records({(texts[0], 3): {"rank": 0}, (texts[0], 25): {"rank": 1}})
    assert knowledge_filter.top_choice_filter(texts, tokens, first_only) == {(0, 3)}
