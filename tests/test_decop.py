"""DE-COP: prompts, orderings, parsing, calibration, statistics, loaders, construction, QC (fast, no models)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from memaudit.probes.decop import analysis
from memaudit.datasets.readers import read_pdf
from memaudit.probes.decop.construct import passages_of, select_documents, words_for_tokens
from memaudit.datasets.published import load_bookmia, load_tection_file
from memaudit.probes.decop.paraphrase import QCSettings, check_paraphrase, clean_candidate, trim_commentary
from memaudit.probes.decop.prompts import (PARAPHRASE_PROMPT_LONG, SYSTEM_PROMPT, correct_position, orderings,
                                           paraphrase_prompt, parse_answer, parse_paraphrases, question,
                                           system_prompt, user_prompt)
from memaudit.errors import InputError

# ----------------------------------------------------------------------------- orderings and prompts


def test_24_permutations_and_the_latin_square():
    perms = orderings("permutations")
    assert len(perms) == 24 and len(set(perms)) == 24 and all(sorted(p) == [0, 1, 2, 3] for p in perms)
    square = orderings("latin_square")
    assert square == [(0, 1, 2, 3), (1, 2, 3, 0), (2, 3, 0, 1), (3, 0, 1, 2)]
    for position in range(4):  # each option exactly once in each position
        assert sorted(p[position] for p in square) == [0, 1, 2, 3]
    # the verbatim option (0) sits at a different letter in each rotation: A, D, C, B
    assert [correct_position(p) for p in square] == [0, 3, 2, 1]
    # over all 24 orderings the verbatim passage is in each position 6 times
    assert np.bincount([correct_position(p) for p in perms]).tolist() == [6, 6, 6, 6]
    with pytest.raises(ValueError, match="latin_square"):
        orderings("random")


def test_paper_prompts():
    assert paraphrase_prompt("TXT", 128).startswith("Generate always 3 possible paraphrases")
    assert paraphrase_prompt("TXT", 128).endswith("-Example A: TXT")
    assert paraphrase_prompt("TXT", 256) == PARAPHRASE_PROMPT_LONG.format(ref_text="TXT")
    assert question("Emma", "Jane Austen", "book") == \
        'Which of the following passages is verbatim from the "Emma" book by Jane Austen?'
    assert question("Attention Is All You Need", "", "paper") == \
        'Which of the following passages is verbatim from the arXiv paper "Attention Is All You Need"?'
    assert question("Notes", "unknown", "book") == 'Which of the following passages is verbatim from the "Notes" document?'
    prompt = user_prompt("Emma", "Jane Austen", "book", ["w", "x", "y", "z"])
    # the reference code's layout (2_decop_hf.py): options one per line, a blank line, "Answer:"
    assert prompt.endswith("Options:\nA. w\nB. x\nC. y\nD. z\n\nAnswer:")
    assert system_prompt() == SYSTEM_PROMPT + "\n\nFormat your answer as '<put correct answer here>'."


def test_api_models_are_asked_the_closed_model_prompt_of_table_9_and_local_models_table_10():
    """Appendix C.1 (Table 9): one prompt, the instruction then the question, no format hint; it went to API
    models as C.2's system prompt with Table 10's "Format your answer as '<put correct answer here>'"."""
    from memaudit.backends.api import OptionScores
    from memaudit.backends.base import Generation
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.probes.decop.scoring import score_blackbox, score_logit

    item = {"item_id": "d#0", "passage_id": "d#0", "doc_id": "d", "label": 1, "answer": 0,
            "options": ["w", "x", "y", "z"], "meta": {"title": "Emma", "author": "Jane Austen", "kind": "book",
                                                       "role": "evaluate", "length_tokens": 64}}
    asked = []

    class Recorder:
        def generate(self, prompts, params):
            asked.extend((p, params.system_prompt) for p in prompts)
            return [Generation(text="A") for _ in prompts]

        def option_logprobs(self, prompts, options, *, params, batch_size):
            asked.extend((p, params.system_prompt) for p in prompts)
            return [{"A": -0.1, "B": -3.0, "C": -3.0, "D": -3.0} for _ in prompts]

    class API(Recorder, OpenAIBackend):
        def option_scores(self, prompts, options, *, params):
            return [OptionScores(lp, (), [], None, "ok") for lp in
                    self.option_logprobs(prompts, options, params=params, batch_size=None)]

    question = ('Question: Which of the following passages is verbatim from the "Emma" book by Jane Austen?\n'
                "Options:\nA. w\nB. x\nC. y\nD. z\n\nAnswer:")
    table_9 = (SYSTEM_PROMPT + "\n\n" + question, None)
    table_10 = (question, SYSTEM_PROMPT + "\n\nFormat your answer as '<put correct answer here>'.")
    api = API("gpt-test", base_url="http://127.0.0.1:9/v1", require_key=False)
    for backend, expected in ((api, table_9), (Recorder(), table_10)):
        asked.clear()
        assert score_blackbox(backend, [item], [(0, 1, 2, 3)])["pred"].tolist() == [0]
        assert score_logit(backend, [item], [(0, 1, 2, 3)])["pred"].tolist() == [0]
        assert asked == [expected, expected]
    assert "Format your answer" not in table_9[0]


def _logit_rows_through_loopback(tmp_path, monkeypatch, replies) -> pd.DataFrame:
    """score_logit of an OpenAI model behind the loopback server (the real SDK, on_error: record) on one
    passage asked in three orderings, each question answered by its reply of ``replies``, in order."""
    from api_server import loopback
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.probes.decop.scoring import question_prompts, score_logit

    item = {"item_id": "d#0", "passage_id": "d#0", "doc_id": "d", "label": 1, "answer": 0,
            "options": ["w", "x", "y", "z"], "meta": {"title": "Emma", "author": "Jane Austen", "kind": "book",
                                                       "role": "evaluate", "length_tokens": 64}}
    perms = [(0, 1, 2, 3), (1, 0, 2, 3), (2, 1, 0, 3)]
    monkeypatch.setenv("DECOP_TEST_KEY", "sk-test-decop-logit")
    with loopback() as server:
        for reply, prompt in zip(replies, question_prompts(item, perms, closed=True), strict=True):
            server.responder.queue(reply, prompt=prompt)
        backend = OpenAIBackend("gpt-test", base_url=server.openai_base_url, api_key_env="DECOP_TEST_KEY",
                                cache=tmp_path / "c.sqlite", on_error="record")
        return score_logit(backend, [item], perms)


def test_a_failed_api_request_in_logit_mode_is_an_error_not_an_invalid_answer(tmp_path, monkeypatch):
    """With api.on_error: record, a logit-mode question whose request failed after its retries was counted
    ``invalid`` (its letters read as nan, a letter mass of 0), as though the model had answered without a
    letter: the outcome table's n_invalid held the API's failures and n_error none (black-box mode counted
    them right). Through the real openai SDK against the loopback server."""
    from api_server import bad_request, reply_with_top

    rows = _logit_rows_through_loopback(tmp_path, monkeypatch, [
        bad_request("Invalid value for 'top_logprobs'"),  # failed
        reply_with_top("B", [("B", -0.1), (" A", -2.5)]),  # answered
        reply_with_top("The", [("The", -0.2), (" the", -1.9)])])  # no letter
    assert rows["status"].tolist() == ["error", "ok", "invalid"]
    assert rows["pred"].tolist() == [-1, 1, -1]


def test_a_provider_flagged_refusal_in_logit_mode_is_a_refusal(tmp_path, monkeypatch):
    """A logit-mode question the provider refused (finish_reason content_filter) was scored from its top list
    as an ok answer; one refused through message.refusal (no top list) as invalid. Both are refusals, as
    black-box mode counts them. Through the real openai SDK against the loopback server."""
    from api_server import ChatReply, provider_refusal, reply_with_top

    rows = _logit_rows_through_loopback(tmp_path, monkeypatch, [
        ChatReply("A", finish_reason="content_filter", tokens=[("A", -0.1)],
                  top_logprobs=[[("A", -0.1), (" B", -2.5)]]),  # filtered
        provider_refusal(),  # refused
        reply_with_top("B", [("B", -0.1), (" A", -2.5)])])  # answered
    assert rows["status"].tolist() == ["refusal", "refusal", "ok"]
    assert rows["pred"].tolist() == [-1, -1, 1]
    assert rows["letter_mass"].tolist()[:2] == [0.0, 0.0]


def test_parse_paraphrases_in_the_paper_format():
    reply = ("Example B: First rewrite.\n\nExample C: Second rewrite.\nExample D: Third one.\n"
             "Example A: the original")
    assert parse_paraphrases(reply) == ["First rewrite.", "Second rewrite.", "Third one."]
    assert parse_paraphrases("**Example B:** only one") == ["only one", "", ""]
    assert parse_paraphrases("no format at all") == ["", "", ""]
    # "example" in a paraphrase's own words is no marker: "example d)" split C and dropped the real D
    reply = ("Example B: Known, for example a. k. a. the fox.\nExample C: It would (see example d) fail.\n"
             "Example D: Third one.")
    assert parse_paraphrases(reply) == ["Known, for example a. k. a. the fox.", "It would (see example d) fail.",
                                        "Third one."]
    assert parse_paraphrases("EXAMPLE B: one\nEXAMPLE C: two\nEXAMPLE D: three") == ["one", "two", "three"]


@pytest.mark.parametrize("text, expected", [
    ("B", ("ok", "B", "strict")),
    ("(C).", ("ok", "C", "strict")),
    ("'D'", ("ok", "D", "strict")),
    ("<A>", ("ok", "A", "strict")),  # the format the system prompt asks for: '<put correct answer here>'
    ("'<C>'", ("ok", "C", "strict")),
    ("a", ("ok", "A", "lenient")),
    ("The answer is D because it reads like the book.", ("ok", "D", "lenient")),
    ("B. The verbatim passage", ("ok", "B", "lenient")),
    ("A passage from the book is the second one", ("invalid", None, "invalid")),
    ("", ("invalid", None, "invalid")),
    ("Either A or C", ("invalid", None, "invalid")),
    ("I'm sorry, but I can't help with identifying copyrighted text.", ("refusal", None, "refusal")),
    # forms that were counted invalid: the passage named, a dash after the letter, an apology that declines
    ("The verbatim passage is D.", ("ok", "D", "lenient")),
    ("Passage A", ("ok", "A", "lenient")),
    ("D - the one with the owl", ("ok", "D", "lenient")),
    ("I apologize, but I cannot determine which passage is verbatim.", ("refusal", None, "refusal")),
    # still no single letter
    ("Passage A or passage B", ("invalid", None, "invalid")),
    ("The passage a friend wrote", ("invalid", None, "invalid")),
    ("A-list authors wrote it", ("invalid", None, "invalid")),
    ("I apologize for the delay, either A or B.", ("invalid", None, "invalid")),
])
def test_answer_parsing_strict_then_lenient(text, expected):
    assert parse_answer(text) == expected


# ----------------------------------------------------------------------------- calibration and statistics


def _answers(rows):
    return pd.DataFrame(rows, columns=["doc_id", "label", "role", "passage_id", "correct", "pred",
                                       "p_A", "p_B", "p_C", "p_D"])


def test_label_adjustments_follow_algorithm_1_by_hand():
    a = _answers([
        # clean document c1: two questions
        ("c1", 0, "calibrate", "c1#0", 0, 0, 0.7, 0.1, 0.1, 0.1),
        ("c1", 0, "calibrate", "c1#0", 1, 0, 0.5, 0.3, 0.1, 0.1),
        # clean document c2: one question (each document weighs the same)
        ("c2", 0, "calibrate", "c2#0", 2, 1, 0.2, 0.4, 0.2, 0.2),
    ])
    delta = analysis.label_adjustments(a)
    # p̄_c1 = (0.6, 0.2, 0.1, 0.1); p̄_c2 = (0.2, 0.4, 0.2, 0.2); P̄ = (0.4, 0.3, 0.15, 0.15)
    np.testing.assert_allclose(delta, [0.25 - 0.4, 0.25 - 0.3, 0.25 - 0.15, 0.25 - 0.15])
    assert delta.sum() == pytest.approx(0.0)
    # calibration moves a 0.40/0.34 A-vs-C preference to C: 0.40-0.15=0.25 < 0.34+0.10=0.44
    probs = np.array([[0.40, 0.16, 0.34, 0.10]])
    assert analysis.predict(probs).tolist() == [0]
    assert analysis.predict(probs, delta).tolist() == [2]
    # a question an API listed no letter for has no probabilities: no answer (-1), never "A"
    unlisted = np.array([[np.nan] * 4, [0.40, 0.16, 0.34, 0.10]])
    assert analysis.predict(unlisted).tolist() == [-1, 0]
    assert analysis.predict(unlisted, delta).tolist() == [-1, 2]
    with pytest.raises(ValueError, match="clean calibration document"):
        analysis.label_adjustments(a.iloc[0:0])


def test_document_accuracy_counts_invalid_answers_as_wrong():
    a = _answers([
        ("d1", 1, "evaluate", "d1#0", 0, 0, *[np.nan] * 4),
        ("d1", 1, "evaluate", "d1#0", 3, -1, *[np.nan] * 4),  # invalid
        ("d1", 1, "evaluate", "d1#1", 2, 2, *[np.nan] * 4),
        ("d1", 1, "evaluate", "d1#1", 1, 0, *[np.nan] * 4),
        ("d2", 0, "evaluate", "d2#0", 1, -1, *[np.nan] * 4),  # nothing valid
    ])
    t = analysis.document_accuracy(a).set_index("doc_id")
    assert t.loc["d1", ["n_passages", "n_questions", "n_valid", "n_correct"]].tolist() == [2, 4, 3, 2]
    assert t.loc["d1", "accuracy"] == pytest.approx(0.5)
    assert t.loc["d1", "accuracy_valid"] == pytest.approx(2 / 3)
    assert t.loc["d2", "accuracy"] == 0.0 and np.isnan(t.loc["d2", "accuracy_valid"])


def test_likelihood_mode_scores_accuracy_and_the_verbatim_probability_by_hand():
    """decop-likelihood-prob: softmax of the four mean token log-likelihoods, at the verbatim option,
    averaged over a document's passages; decop-likelihood: the argmax's accuracy."""
    from memaudit.probes.decop.runner import _evaluate

    ln = np.log
    rows = [  # doc, label, role, passage, correct, ll_A..ll_D
        ("m", 1, "evaluate", "m#0", 0, ln(0.5), ln(0.25), ln(0.125), ln(0.125)),  # P(verbatim) = 0.5, right
        ("m", 1, "evaluate", "m#1", 3, ln(0.1), ln(0.1), ln(0.4), ln(0.4)),        # 0.4, a tie the argmax gives C
        ("n", 0, "evaluate", "n#0", 1, ln(0.7), ln(0.1), ln(0.1), ln(0.1)),        # 0.1, wrong
        ("c", 0, "calibrate", "c#0", 3, 0.0, 0.0, 0.0, 0.0),                       # 0.25, argmax A: wrong
    ]
    answers = pd.DataFrame([{"doc_id": d, "label": lab, "role": role, "passage_id": pid, "item_id": pid,
                             "length": 64, "ordering": "0123", "correct": c,
                             **dict(zip(("ll_A", "ll_B", "ll_C", "ll_D"), ll))}
                            for d, lab, role, pid, c, *ll in rows])
    answers["pred"] = answers[["ll_A", "ll_B", "ll_C", "ll_D"]].to_numpy().argmax(axis=1)
    p = analysis.verbatim_probability(answers, "likelihood")
    np.testing.assert_allclose(p, [0.5, 0.4, 0.1, 0.25])
    assert analysis.verbatim_probability(answers, "blackbox") is None
    docs, table, _ = _evaluate(answers, "likelihood", [64], fdr=0.1)
    scores = {(r.method, r.doc_id): r.score for r in docs.itertuples()}
    assert scores == pytest.approx({("decop-likelihood", "m"): 0.5, ("decop-likelihood", "n"): 0.0,
                                    ("decop-likelihood-prob", "m"): 0.45, ("decop-likelihood-prob", "n"): 0.1})
    prob = table[table["method"] == "decop-likelihood-prob"].set_index("doc_id")
    assert prob.loc["c", "score"] == pytest.approx(0.25) and prob["suspect"].isna().all()
    acc = table[(table["method"] == "decop-likelihood") & (table["role"] == "evaluate")]
    assert acc["suspect"].notna().all() and (acc["clean_rate"] == 0.0).all() and (acc["test"] == "conformal").all()


def test_the_longest_option_rows_score_a_reader_that_sees_only_lengths_by_hand(tmp_path):
    """The blind row of the DE-COP table: per document, the share of its evaluated passages whose
    verbatim option has the most words (a tie shared among the tied); calibration passages left out."""
    def item(doc, label, lengths, answer=0, role="evaluate"):
        return {"doc_id": doc, "label": label, "answer": answer, "options": [" ".join(["w"] * n) for n in lengths],
                "meta": {"role": role, "length_tokens": 64}}

    items = [item("m1", 1, [9, 5, 6, 7]), item("m1", 1, [5, 9, 6, 7]),       # 1, 0
             item("m2", 1, [9, 9, 6, 7]),                                   # tie of two: 1/2
             item("n1", 0, [4, 9, 6, 7]), item("n1", 0, [4, 5, 6, 7], answer=3),  # 0, 1
             item("n2", 0, [3, 5, 6, 7]),                                   # 0
             item("c1", 0, [9, 1, 1, 1], role="calibrate")]
    (row,) = analysis.longest_option_rows(items).to_dict("records")
    assert (row["model"], row["method"], row["length"], row["n_documents"]) == ("(none)", "decop-longest-option", 64, 4)
    assert row["accuracy_members"] == pytest.approx((0.5 + 0.5) / 2)
    assert row["accuracy_nonmembers"] == pytest.approx((0.5 + 0.0) / 2)
    # members' shares 0.5, 0.5 against non-members' 0.5, 0: two wins and two ties of four pairs
    assert row["auc"] == pytest.approx((2 + 0.5 * 2) / 4)
    hits, n, p = analysis.longest_option_rate(items)
    assert (hits, n) == (2, 6)  # strictly the longest: m1's first and n1's second
    assert p == pytest.approx(scipy_stats.binomtest(2, 6, 0.25, alternative="greater").pvalue)
    assert analysis.longest_option_rows([items[-1]]).empty


def test_suspect_list_is_conformal_bh_over_documents_by_hand():
    """p = (1 + #{clean accuracy >= the document's}) / (n_clean + 1), ties counted, then BH; without
    clean documents no test (chance is no null rate) and empty columns."""
    table = pd.DataFrame({"doc_id": ["a", "b", "c", "d"], "label": [1, 1, 0, 0], "role": "evaluate",
                          "n_correct": [24, 12, 6, 0], "n_questions": 24})
    table["accuracy"] = table["n_correct"] / table["n_questions"]
    clean = [0.25, 0.5, 0.25, 0.125, 0.0, 0.25, 0.375, 0.25, 0.125]  # nine clean documents
    out = analysis.suspect_list(table, fdr=0.1, clean_accuracy=clean).set_index("doc_id")
    np.testing.assert_allclose(out["p_value"], [1 / 10, 2 / 10, 7 / 10, 10 / 10])
    np.testing.assert_array_equal(out["p_value"], analysis.selection.conformal_pvalues(table["accuracy"], clean))
    # BH over m = 4: 0.1 * 4 / 1 = 0.4, 0.2 * 4 / 2 = 0.4, 0.7 * 4 / 3, 1.0 -> q 0.4, 0.4, 0.933, 1.0
    np.testing.assert_allclose(out["q_value"], [0.4, 0.4, 2.8 / 3, 1.0])
    assert out["suspect"].tolist() == [False, False, False, False]
    assert out.loc["a", "clean_rate"] == pytest.approx(np.mean(clean)) and (out["n_clean"] == 9).all()
    assert analysis.suspect_list(table, fdr=0.5, clean_accuracy=clean)["suspect"].tolist() == [True, True, False, False]
    none = analysis.suspect_list(table, fdr=0.1, clean_accuracy=[])
    assert (none["test"] == "none").all() and none[["p_value", "q_value", "suspect"]].isna().all().all()
    assert (none["n_clean"] == 0).all()


def test_a_suspect_list_that_can_name_nothing_says_why_in_the_log(caplog):
    """Too few clean documents for any conformal p-value to reach fdr (the smallest is 1/(n_clean + 1)),
    or none at all, gave a suspect column of False (or empty) everywhere and no word in the job's log:
    a reader took it for "no document stands out". The log now says the list cannot name anything,
    and how many clean documents it needs."""
    from memaudit.probes.decop.runner import _evaluate

    assert analysis.suspect_list_note(0, 0.1) == (
        "no clean reference document (probes.decop.calibration_documents is 0, or quality control rejected them "
        "all): no suspect list (test none)")
    assert analysis.suspect_list_note(4, 0.1) == (
        "4 clean reference document(s): the smallest conformal p-value, 1/(4 + 1) = 0.2, is above fdr 0.1, so the "
        "suspect list names no document whatever its accuracy (at least 9 are needed: raise "
        "probes.decop.calibration_documents)")
    assert analysis.suspect_list_note(2, 0.3).endswith("(at least 3 are needed: raise "
                                                       "probes.decop.calibration_documents)")
    assert analysis.suspect_list_note(9, 0.1) is None and analysis.suspect_list_note(3, 0.3) is None

    rows = [("m", 1, "evaluate", 0), ("n", 0, "evaluate", 1), ("c", 0, "calibrate", 0)]  # (doc, label, role, pred)
    answers = pd.DataFrame([{"doc_id": d, "label": lab, "role": role, "passage_id": f"{d}#0", "item_id": f"{d}#0",
                             "length": 64, "ordering": "0123", "correct": 0, "pred": pred}
                            for d, lab, role, pred in rows])
    with caplog.at_level("WARNING", logger="memaudit.probes.decop.runner"):
        _, table, _ = _evaluate(answers, "blackbox", [64], fdr=0.1)
    assert caplog.messages == [f"64-token passages: {analysis.suspect_list_note(1, 0.1)}"]
    assert table.loc[table["role"] == "evaluate", "suspect"].tolist() == [False, False]
    caplog.clear()
    with caplog.at_level("WARNING", logger="memaudit.probes.decop.runner"):
        _evaluate(answers[answers["role"] == "evaluate"], "blackbox", [64], fdr=0.1)
    assert caplog.messages == [f"64-token passages: {analysis.suspect_list_note(0, 0.1)}"]


def test_suspect_list_holds_its_fdr_where_a_passages_orderings_are_one_trial():
    """Clean documents whose passages each have their own chance of being answered right, asked in
    24 orderings: the list names a clean document in at most about fdr of the runs where every
    document is clean (FDR = P(any named) then). The per-question Fisher test it replaces named one
    in nearly every run (47 of 200 documents at once in a review's simulation)."""
    from scipy.stats import fisher_exact

    rng = np.random.default_rng(5)

    def accuracy(n_docs):
        rate = rng.beta(1, 2, size=(n_docs, 34))  # a chance per passage
        return rng.binomial(24, rate).sum(axis=1) / (34 * 24), rng.binomial(24, rate).sum(axis=1)

    runs, named, fisher_named = 200, 0, 0
    for run in range(runs):
        clean, _ = accuracy(30)
        test, correct = accuracy(40)
        table = pd.DataFrame({"doc_id": range(40), "label": 0, "role": "evaluate", "accuracy": test})
        named += analysis.suspect_list(table, fdr=0.1, clean_accuracy=clean)["suspect"].any()
        if run < 20:
            kc = int(round(clean.sum() * 34 * 24))
            p = [fisher_exact([[k, 816 - k], [kc, 30 * 816 - kc]], alternative="greater")[1] for k in correct]
            fisher_named += analysis.selection.benjamini_hochberg(p, 0.1).any()
    assert named / runs <= 0.14  # 0.1 and the binomial spread of 200 runs (0 of 200 here)
    assert fisher_named >= 15  # of 20 runs (all 20 here, 8 of 40 clean documents a run): why the test changed
    # and it names documents read far more often than clean ones: 20 members, 20 clean
    clean, _ = accuracy(30)
    rate = rng.beta(4, 1, size=(20, 34))
    members = rng.binomial(24, rate).sum(axis=1) / (34 * 24)
    table = pd.DataFrame({"doc_id": range(40), "label": [1] * 20 + [0] * 20, "role": "evaluate",
                          "accuracy": np.r_[members, accuracy(20)[0]]})
    out = analysis.suspect_list(table, fdr=0.1, clean_accuracy=clean)
    assert out.loc[out["label"] == 1, "suspect"].sum() >= 18 and out.loc[out["label"] == 0, "suspect"].sum() <= 2


def test_benjamini_hochberg_q_values_are_scipys_and_by_hand():
    # m = 6; sorted 0.01, 0.03, 0.04, 0.5, 0.9, 1.0 -> m p / rank = 0.06, 0.09, 0.08, 0.75, 1.08, 1.0
    # -> running minimum from the top: 0.06, 0.08, 0.08, 0.75, 1.0, 1.0.
    p = [0.01, 0.04, 0.03, 0.5, 0.9, 1.0]
    q = analysis.selection.bh_adjusted_pvalues(p)
    np.testing.assert_array_equal(q, scipy_stats.false_discovery_control(p, method="bh"))
    np.testing.assert_allclose(q, [0.06, 0.08, 0.08, 0.75, 1.0, 1.0])
    assert analysis.selection.bh_adjusted_pvalues([]).size == 0


# ----------------------------------------------------------------------------- loaders

GOOD_ROW = {"Example_A": "Verbatim text.", "Example_B": "Para one.", "Example_C": "Para two.",
            "Example_D": "Para three.", "Answer": "A", "ID": "The_Hobbit_-_J._R._R._Tolkien", "Label": 1,
            "Length": "medium"}
CLEAN_ROW = {**GOOD_ROW, "Example_A": "Fresh verbatim.", "ID": "Recent_Book_-_New_Author", "Label": 0}


def _csv(tmp_path, rows, drop=()):
    frame = pd.DataFrame(rows).drop(columns=list(drop))
    path = tmp_path / "booktection.csv"
    frame.to_csv(path, index=False)
    return path


def _rows(rejected):
    return [(r.line, r.key, r.value, r.reason, r.action) for r in rejected]


def test_booktection_csv_is_loaded_with_title_and_author(tmp_path):
    rows = [GOOD_ROW, {**GOOD_ROW, "Example_A": "Another verbatim.", "Answer": "c"},
            {**GOOD_ROW, "ID": "Recent_Book_-_New_Author", "Label": 0, "Length": "small"}]
    items, rejected = load_tection_file(_csv(tmp_path, rows))
    assert rejected == []
    assert [it["answer"] for it in items] == [0, 2, 0]
    assert items[0]["meta"]["title"] == "The Hobbit" and items[0]["meta"]["author"] == "J. R. R. Tolkien"
    assert [it["meta"]["length_tokens"] for it in items] == [128, 128, 64]
    assert [it["meta"]["source_line"] for it in items] == [2, 3, 4]
    assert [it["item_id"] for it in items] == ["The_Hobbit_-_J._R._R._Tolkien#p0", "The_Hobbit_-_J._R._R._Tolkien#p1",
                                               "Recent_Book_-_New_Author#p0"]
    assert [it["item_id"] for it in load_tection_file(_csv(tmp_path, rows), length="small")[0]] == [
        "Recent_Book_-_New_Author#p0"]


HOBBIT = "'The_Hobbit_-_J._R._R._Tolkien'"


@pytest.mark.parametrize("change, rejected", [
    ({"Answer": "E"}, [(3, "Answer", "'E'", "'E' is not one of A, B, C, D", "rejected")]),
    ({"Example_C": " "}, [(3, "Example_C", "' '", "empty or whitespace-only text", "rejected")]),
    ({"Example_C": ""}, [(3, "Example_C", "''", "empty or whitespace-only text", "rejected")]),
    # two options alike: no single verbatim option to find, or three choices where chance is a quarter
    ({"Example_D": "Para one."}, [(3, "Example_D", "'Para one.'", "the same text as Example_B (up to whitespace): "
                                   "a question needs four different options", "rejected")]),
    ({"Example_C": " Other \t verbatim. "},
     [(3, "Example_C", "' Other \\t verbatim. '", "the same text as Example_A (up to whitespace): a question "
       "needs four different options", "rejected")]),
    ({"Label": "yes"}, [(3, "Label", "'yes'", "not exactly 0 (clean) or 1 (suspect): got the text 'yes'", "rejected")]),
    ({"Label": "0.7"}, [(3, "Label", "'0.7'", "not exactly 0 (clean) or 1 (suspect): got the text '0.7'", "rejected")]),
    ({"Label": "1.5"}, [(3, "Label", "'1.5'", "not exactly 0 (clean) or 1 (suspect): got the text '1.5'", "rejected")]),
    ({"Length": "huge"}, [(3, "Length", "'huge'", "'huge' is not small, medium or large", "rejected")]),
    ({"Example_A": "Verbatim  text. "},
     [(3, "Example_A", "'Verbatim  text. '", "duplicate question: same ID and Example_A as line 2", "rejected")]),
    ({"Label": 0}, [(line, "Label", str(label), f"ID {HOBBIT} has Label 0 on 1 row(s) (first line 3) and 1 on 1 row(s) "
                     f"(first line 2): conflicting labels, every row of it rejected", "rejected")
                    for line, label in ((2, 1), (3, 0))]),
])
def test_booktection_bad_input_names_file_row_and_column(tmp_path, change, rejected):
    """A bad row is rejected with its line and column and the rest loads; strict: true makes the
    first rejected row (in line order) the error, with the count."""
    second = {**GOOD_ROW, "Example_A": "Other verbatim.", **change}
    path = _csv(tmp_path, [GOOD_ROW, second, CLEAN_ROW])
    items, got = load_tection_file(path)
    assert _rows(got) == rejected
    rejected_lines = {r[0] for r in rejected}
    assert [it["meta"]["source_line"] for it in items] == [n for n in (2, 3, 4) if n not in rejected_lines]
    first = rejected[0]
    more = f" ({len(rejected)} rows rejected in all)" if len(rejected) > 1 else ""
    with pytest.raises(InputError) as err:
        load_tection_file(path, strict=True)
    assert str(err.value) == f"{path}, line {first[0]}, column {first[1]}: {first[3]}{more}"


def test_booktection_nul_in_an_id_is_removed_as_in_the_text_and_noted(tmp_path):
    second = {**GOOD_ROW, "Example_A": "Other\x00 verbatim.", "ID": "The_Hobbit\x00_-_J._R._R._Tolkien"}
    items, rejected = load_tection_file(_csv(tmp_path, [GOOD_ROW, second]))
    assert [(it["doc_id"], it["item_id"], it["options"][0]) for it in items] == [
        ("The_Hobbit_-_J._R._R._Tolkien", "The_Hobbit_-_J._R._R._Tolkien#p0", "Verbatim text."),
        ("The_Hobbit_-_J._R._R._Tolkien", "The_Hobbit_-_J._R._R._Tolkien#p1", "Other verbatim.")]
    note = "1 NUL character(s) removed (IDs and text are cleaned alike)"
    assert _rows(rejected) == [(3, "Example_A", "'Other\\x00 verbatim.'", note, "kept"),
                               (3, "ID", "'The_Hobbit\\x00_-_J._R._R._Tolkien'", note, "kept")]
    assert load_tection_file(_csv(tmp_path, [GOOD_ROW, second]), strict=True)[0] == items  # a note is no error


def test_booktection_lines_are_physical_after_a_multiline_field(tmp_path):
    path = tmp_path / "booktection.csv"
    path.write_text('Example_A,Example_B,Example_C,Example_D,Answer,ID,Label\r\n'
                    '"Two\nlines.",B,C,D,A,P1,1\r\n'
                    ' ,B,C,D,A,P1,1\r\n'
                    'Third.,B,C,D,A,P2,0\r\n', newline="")
    items, rejected = load_tection_file(path, kind="paper")
    assert [(it["options"][0], it["meta"]["source_line"]) for it in items] == [("Two\nlines.", 2), ("Third.", 5)]
    assert [r.message() for r in rejected] == [f"{path}, line 4, column Example_A: empty or whitespace-only text"]


def test_booktection_missing_column_and_length_without_column_are_file_errors(tmp_path):
    with pytest.raises(InputError) as err:
        load_tection_file(_csv(tmp_path, [GOOD_ROW], drop=["Answer"]))
    assert str(err.value) == (f"{tmp_path / 'booktection.csv'}, line 1: missing column(s) Answer (expected Example_A, "
                              "Example_B, Example_C, Example_D, Answer, ID, Label, any case; found Example_A, "
                              "Example_B, Example_C, Example_D, ID, Label, Length)")
    with pytest.raises(InputError) as err:
        load_tection_file(_csv(tmp_path, [GOOD_ROW], drop=["Length"]), length="small")
    assert str(err.value) == (f"{tmp_path / 'booktection.csv'}: no column Length to select length='small' "
                              "(BookTection has it)")


@pytest.mark.parametrize("data, message", [
    (b"", "{p}: empty file"),
    ("Example_A,ID\n".encode("utf-16"), "{p}: UTF-16 text (little-endian byte-order mark), expected a "
                                        "BookTection/arXivTection CSV file in UTF-8; convert the file to UTF-8"),
    (b"Example_A,ID\ncaf\xe9,x\n", "{p}, line 2: invalid UTF-8 at byte offset 16 (byte 0xe9); convert the file to UTF-8"),
    (b"PK\x03\x04\x14\x00\x00\x00", "{p}: a ZIP archive (an Excel .xlsx workbook?), expected a BookTection/arXivTection "
                                    "CSV file in UTF-8; export it as CSV (UTF-8)"),
    (b"Example_A,Example_B,Example_C,Example_D,Answer,ID,Label\n\"Cut off", "{p}: no usable question (1 rejected; first: "
                                                                           "{p}, line 2: unclosed quote: the file ends "
                                                                           "inside this row)"),
])
def test_booktection_unreadable_files_are_one_line_errors(tmp_path, data, message):
    path = tmp_path / "booktection.csv"
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_tection_file(path)
    assert str(err.value) == message.format(p=path)
    with pytest.raises(InputError) as err:
        load_tection_file(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a directory, expected a BookTection/arXivTection CSV or parquet file"


def test_arxivtection_ids_are_paper_titles(tmp_path):
    row = {k: v for k, v in GOOD_ROW.items() if k != "Length"}
    row["ID"] = "Attention Is All You Need"
    items, rejected = load_tection_file(_csv(tmp_path, [row]), kind="paper")
    assert items[0]["meta"]["title"] == "Attention Is All You Need" and items[0]["meta"]["kind"] == "paper"
    assert items[0]["meta"]["length_tokens"] == 128 and rejected == []


BOOKMIA = [{"book_id": 7, "book": "Some Book", "snippet_id": 0, "snippet": "First\x00 snippet.", "label": 1},
           {"book_id": 7, "book": "Some Book", "snippet_id": 1, "snippet": "Second snippet.", "label": 1},
           {"book_id": 9, "book": "New Book", "snippet_id": 0, "snippet": "Fresh text.", "label": 0}]


def test_bookmia_jsonl_with_nul_bytes(tmp_path):
    path = tmp_path / "bookmia.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in BOOKMIA) + "\n")
    docs, passages, rejected = load_bookmia(path)
    assert [d.doc_id for d in docs] == ["7", "9"] and [d.meta["label"] for d in docs] == [1, 0]
    assert [(p.passage_id, p.text, p.meta["source_line"]) for p in passages] == [
        ("7#0", "First snippet.", 1), ("7#1", "Second snippet.", 2), ("9#0", "Fresh text.", 3)]
    assert _rows(rejected) == [(1, "snippet", "'First\\x00 snippet.'",
                                "1 NUL character(s) removed (IDs and text are cleaned alike)", "kept")]


@pytest.mark.parametrize("change, rejected", [
    ({"label": 0.7}, [(2, "label", "0.7", "not exactly 0 (non-member) or 1 (member): got a number 0.7")]),
    ({"label": True}, [(2, "label", "True", "not exactly 0 (non-member) or 1 (member): got a boolean True")]),
    ({"snippet": "  "}, [(2, "snippet", "'  '", "empty or whitespace-only text")]),
    ({"snippet_id": 0}, [(2, "snippet_id", "0", "duplicate snippet: same book_id and snippet_id as line 1")]),
    ({"book_id": "7\x00"}, []),  # the same book once its NUL is removed, noted below
    ({"label": 0}, [(line, "label", str(label), "book_id '7' has label 0 on 1 row(s) (first line 2) and 1 on 1 "
                     "row(s) (first line 1): conflicting labels, every row of it rejected") for line, label in ((1, 1), (2, 0))]),
])
def test_bookmia_bad_rows_are_rejected_with_their_line(tmp_path, change, rejected):
    path = tmp_path / "bookmia.jsonl"
    recs = [BOOKMIA[0] | {"snippet": "First snippet."}, {**BOOKMIA[1], **change}, BOOKMIA[2]]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    docs, passages, got = load_bookmia(path)
    assert [(r.line, r.key, r.value, r.reason) for r in got if r.action == "rejected"] == rejected
    assert len(passages) + len(rejected) == 3
    assert [d.doc_id for d in docs] == (["9"] if change == {"label": 0} else ["7", "9"])
    if rejected:
        more = f" ({len(rejected)} rows rejected in all)" if len(rejected) > 1 else ""
        with pytest.raises(InputError) as err:
            load_bookmia(path, strict=True)
        assert str(err.value) == f"{path}, line {rejected[0][0]}, key {rejected[0][1]}: {rejected[0][3]}{more}"


def test_bookmia_unreadable_files_are_one_line_errors(tmp_path):
    path = tmp_path / "bookmia.jsonl"
    path.write_bytes(json.dumps(BOOKMIA[2]).encode() + b'\n{"book": "caf\xe9"}\n')
    with pytest.raises(InputError) as err:
        load_bookmia(path)
    assert str(err.value) == f"{path}, line 2: invalid UTF-8 at byte offset 103 (byte 0xe9); convert the file to UTF-8"
    path.write_text('{"book_id": 7}\nnot json\n')
    with pytest.raises(InputError) as err:
        load_bookmia(path)
    assert str(err.value) == (f"{path}: no usable snippet (2 rejected; first: {path}, line 1, key book: missing key)")


# ----------------------------------------------------------------------------- construction


TEXT = " ".join(f"Sentence number {i} has exactly seven words." for i in range(200))


def test_passages_are_sentence_aligned_sized_and_deterministic():
    for tokens in (64, 128, 256):
        ps = passages_of(TEXT, tokens, 5, seed=1, doc_id="d")
        assert len(ps) == 5
        for p in ps:
            assert p.endswith(".")
            assert words_for_tokens(tokens) <= len(p.split()) < words_for_tokens(tokens) + 7
        assert ps == passages_of(TEXT, tokens, 5, seed=1, doc_id="d")
    assert passages_of(TEXT, 64, 5, seed=1, doc_id="d") != passages_of(TEXT, 64, 5, seed=2, doc_id="d")
    assert words_for_tokens(64) == 48 and words_for_tokens(256) == 192


def test_pdf_text_is_extracted(tmp_path):
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    path = tmp_path / "paper.pdf"
    fig = Figure()
    fig.text(0.05, 0.5, "Transformers replace recurrence with attention.", fontsize=10)
    with PdfPages(path) as pdf:
        pdf.savefig(fig)
    assert "Transformers replace recurrence with attention." in read_pdf(path)
    (tmp_path / "bad.pdf").write_bytes(b"not a pdf")
    with pytest.raises(InputError, match="bad.pdf"):
        read_pdf(tmp_path / "bad.pdf")


def test_calibration_documents_are_clean_and_disjoint_from_evaluated():
    docs = [{"doc_id": f"d{i:02d}", "meta": {"label": int(i < 10)}} for i in range(30)]
    roles = select_documents(docs, n_documents=8, calibration_documents=5, seed=3)
    calib = [d for d, r in roles.items() if r == "calibrate"]
    evaluated = [d for d, r in roles.items() if r == "evaluate"]
    assert len(calib) == 5 and all(int(d[1:]) >= 10 for d in calib)  # clean only
    assert len(evaluated) == 8 and not set(calib) & set(evaluated)
    assert sum(int(d[1:]) < 10 for d in evaluated) == 4  # balanced
    with pytest.raises(InputError, match="calibration_documents=20"):
        select_documents(docs, n_documents=None, calibration_documents=20, seed=3)


def test_a_mode_can_probe_only_the_first_passages_of_each_document_and_length():
    from memaudit.probes.decop.runner import first_passages

    items = [{"item_id": f"{d}#L{n}p{k}", "doc_id": d, "meta": {"length_tokens": n}}
             for d in ("a", "b") for n in (64, 128) for k in range(3)]
    items.append({"item_id": "c#p0", "doc_id": "c", "meta": {}})  # a published item without a length
    kept = [i["item_id"] for i in first_passages(items, 2)]
    assert kept == ["a#L64p0", "a#L64p1", "a#L128p0", "a#L128p1", "b#L64p0", "b#L64p1", "b#L128p0", "b#L128p1",
                    "c#p0"]
    assert [i["item_id"] for i in first_passages(items, 1)][:2] == ["a#L64p0", "a#L128p0"]
    assert first_passages(items, None) == items


# ----------------------------------------------------------------------------- paraphrase QC


def test_quality_control_reasons():
    qc = QCSettings(min_cosine=0.5, length_ratio=(0.6, 1.6), max_similarity=0.9)
    orig = "The quick brown fox jumps over the lazy dog near the quiet river bank."
    good = "A fast brown fox leaps over a sleepy dog close to the calm riverside."
    assert check_paraphrase(orig, good, [], 0.8, qc) is None
    assert check_paraphrase(orig, "", [], 0.8, qc) == "empty"
    assert check_paraphrase(orig, orig.upper() + "!", [], 0.99, qc) == "near_identical"
    assert check_paraphrase(orig, good, [good], 0.8, qc) == "duplicate"
    assert check_paraphrase(orig, "A fox jumps.", [], 0.8, qc) == "length"
    assert check_paraphrase(orig, good + " " + good, [], 0.8, qc) == "length"
    assert check_paraphrase(orig, good, [], 0.2, qc) == "unrelated"
    assert clean_candidate('Here is the rewritten text:\n"A fast fox."') == "A fast fox."
    assert trim_commentary("A fast fox.\n\nThis version keeps the meaning.", orig) == "A fast fox."
    assert trim_commentary("One.\n\nTwo.\n\nComment.", "First.\n\nSecond.") == "One.\n\nTwo."
    # commentary SmolLM2-135M-Instruct wrote in the demo's distractors: dropped wherever it stands, so a
    # two-paragraph passage no longer keeps it as its second paragraph
    two = "First paragraph.\n\nSecond paragraph."
    assert trim_commentary("A fast fox.\n\nThis rewritten text maintains the original meaning.\n\nMore.", two) \
        == "A fast fox.\n\nMore."
    assert trim_commentary("The rewritten text is:\n\nA fast fox.", orig) == "A fast fox."
    assert trim_commentary("I'm sorry for the error. Here's the rewritten text with some minor improvements:"
                           "\n\nA fast fox.", orig) == "A fast fox."
    assert trim_commentary("Rewrite: A fast fox leaps.", orig) == "A fast fox leaps."
    for comment in ("The original text is: \"The quick brown fox.\"", "Explanation: In Python, a module has types.",
                    "The above text can be rewritten using the following alternative approach:",
                    "While rewriting the text, you can modify the original as follows:",
                    "Original text: The quick brown fox.", "Your text is a well-crafted example.",
                    "The text uses different words to convey the same information."):
        assert trim_commentary(f"{comment}\n\nA fast fox.", orig) == "A fast fox.", comment
    # prose that only looks like it stays
    for prose in ("This morning Emma walked to Hartfield.", "The house stood high. Here is the garden they liked.",
                  "Note the date: Monday."):
        assert trim_commentary(prose, orig) == prose


@pytest.mark.parametrize("reply, expected", [
    ('Here is the rewritten text:\n"A fast fox."', "A fast fox."),
    ("Sure! Here are three paraphrases of the text:\nA fast fox.", "A fast fox."),
    ('Sure, here is the paraphrased passage:\n\n"A fast fox."', "A fast fox."),
    ("Here's my version: A fast fox.", "A fast fox."),
    ("Here’s the rephrased text: A fast fox.", "A fast fox."),
    ("Rewritten text: A fast fox.", "A fast fox."),
    # a passage's own first sentence with a colon is no preamble: the lead cut it to "to run away." before
    ("Surely, he thought, there was only one answer: to run away.",
     "Surely, he thought, there was only one answer: to run away."),
    ("Sure enough, the storm arrived at dawn: the bridge was gone.",
     "Sure enough, the storm arrived at dawn: the bridge was gone."),
    ("Here is the garden they liked: roses and thyme.", "Here is the garden they liked: roses and thyme."),
    ("Here is the text. It was rewritten: twice.", "Here is the text. It was rewritten: twice."),
])
def test_clean_candidate_strips_a_preamble_and_never_the_passages_first_sentence(reply, expected):
    assert clean_candidate(reply) == expected


@pytest.mark.parametrize("paragraph, commentary", [
    ("The passage of time had dulled her grief.", False),
    ("This version of events was never told to the court.", False),
    ("My version of the story starts in Kent.", False),
    ("The passage was narrow and dark.", False),
    ("The new version of the library adds a cache.", False),
    ("This paraphrase keeps every sentence of the original.", True),
    ("Note: I changed the tense.", True),
    ("The above is a paraphrase of the text.", True),
    ("The text conveys the same meaning in other words.", True),
    ("This version keeps the original meaning.", True),
    ("My rewrite follows the passage closely.", True),
    ("The passage has been rewritten in plain words.", True),
])
def test_commentary_is_a_paragraph_about_the_rewriting_not_one_that_opens_with_the_passage(paragraph, commentary):
    orig = "First paragraph.\n\nSecond paragraph."
    kept = trim_commentary(f"A fast fox.\n\n{paragraph}", orig)
    assert kept == ("A fast fox." if commentary else f"A fast fox.\n\n{paragraph}")


@pytest.fixture(scope="module")
def encoder():
    from memaudit.models.encoder import MiniLMEncoder

    return MiniLMEncoder()


def test_minilm_cosine_separates_paraphrases_from_unrelated_text(encoder):
    enc = encoder
    orig = "The committee postponed the vote on the budget until next week."
    cos = enc.cosine([orig, orig], ["The vote on the budget was delayed by the committee to next week.",
                                    "Whales migrate thousands of miles through cold oceans."])
    assert cos[0] > 0.6 and cos[1] < 0.3


# ----------------------------------------------------------------------------- config


def test_a_decop_mode_on_a_backend_that_cannot_serve_it_fails_validation():
    from memaudit.probes.registry import check_capabilities, probes_for_model

    config = {"benchmarks": {"novels": {}, "news": {}},
              "models": {"claude": {"backend": "anthropic"}, "local": {"backend": "hf"}},
              "probes": {"decop": {}, "decop_logit": {"models": ["claude", "local"], "benchmarks": ["novels"]},
                         "decop_blackbox": {"models": ["claude"]}}}
    problems = check_capabilities(config)
    assert len(problems) == 1 and "decop_logit" in problems[0] and "claude" in problems[0]
    assert probes_for_model(config, "local", "novels") == ["decop_logit"]
    assert probes_for_model(config, "local", "news") == []
    assert probes_for_model(config, "claude", "news") == ["decop_blackbox"]
    config["probes"]["decop_logit"]["benchmarks"] = ["poems"]
    assert any("probes.decop_logit.benchmarks.0: unknown benchmark 'poems'" in p for p in check_capabilities(config))


def test_paraphrases_from_an_api_model_with_the_paper_prompt_are_checked_and_asked_again(encoder, tmp_path,
                                                                                          monkeypatch):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.probes.decop.paraphrase import BackendParaphraser, paraphrase_with_qc

    orig = "The committee postponed the vote on the new budget until next week because members wanted more time."
    good = ["The vote on the new budget was delayed by the committee to next week, as members asked for more time.",
            "Members wanted more time, so the committee moved the vote on the new budget to the following week.",
            "Because its members needed more time, the committee put off the budget vote until next week."]
    responder = ScriptedResponder()
    responder.queue(f"Example B: {good[0]}\nExample C: {orig}\nExample D: Vote delayed.\nExample A: {orig}",
                    f"Example B: {good[0]}\n\nExample C: {good[1]}\n\nExample D: {good[2]}")
    monkeypatch.setenv("DECOP_TEST_KEY", "sk-test-decop")
    with ChatServer(responder) as server:
        backend = OpenAIBackend("claude-like", name="para", base_url=server.openai_base_url,
                                api_key_env="DECOP_TEST_KEY", cache=tmp_path / "c.sqlite", concurrency=1,
                                retry_policy=RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01))
        para = BackendParaphraser(backend, name="para")
        [res] = paraphrase_with_qc([orig], [128], para, encoder, QCSettings(max_attempts=3))
        first, second = [r.request for r in server.records]
    assert first.prompt.startswith("Generate always 3 possible paraphrases") and first.prompt.endswith(orig)
    assert first.temperature == pytest.approx(0.1)
    # round 1: B accepted, C near-identical, D too short; round 2 (a new sample): B duplicate, C and D accepted
    assert res.attempts == 2 and res.n_candidates == 6
    assert {k: v for k, v in res.rejected.items() if v} == {"near_identical": 1, "length": 1, "duplicate": 1}
    assert res.paraphrases == good


def test_a_retry_asks_only_for_the_paraphrases_still_missing(encoder):
    from memaudit.probes.decop.paraphrase import paraphrase_with_qc

    orig = "The committee postponed the vote on the new budget until next week because members wanted more time."
    good = ["The vote on the new budget was delayed by the committee to next week, as members asked for more time.",
            "Members wanted more time, so the committee moved the vote on the new budget to the following week.",
            "Because its members needed more time, the committee put off the budget vote until next week."]

    class Recorder:
        def __init__(self):
            self.wanted, self.replies = [], [[good[0], orig, "Too short."], [good[1], good[2]]]

        def candidates(self, texts, lengths, attempt, wanted=None):
            self.wanted.append(list(wanted))
            return [self.replies[attempt]]

    para = Recorder()
    [res] = paraphrase_with_qc([orig], [128], para, encoder, QCSettings(max_attempts=3))
    assert para.wanted == [[3], [2]] and res.paraphrases == good and res.n_candidates == 5


# 54 words, and a "paraphrase" that holds all of them verbatim plus one invented sentence: a character
# similarity of 0.84 (under max_similarity's 0.9) and 1.35 times the length, so nothing but the verbatim
# run tells it from a paraphrase; as a distractor it gave the question two verbatim options
LIBRARY = ("The committee met on a Tuesday morning to decide the fate of the old library. Some members wanted to "
           "sell the building to a developer, while others argued that the town would lose its last quiet place "
           "to read. After three hours of debate they agreed to keep it open for one more year.")
LIBRARY_PLUS = LIBRARY + (" Nobody noticed that the mayor had quietly slipped out of the room long before the vote "
                          "was finally taken.")
LIBRARY_PARAPHRASES = [
    "On Tuesday morning the committee gathered to settle what would become of the old library. A few members "
    "hoped to sell the building to a developer; others said the town would lose its last quiet place to read. "
    "Three hours of argument later, they agreed it would stay open for another year.",
    "The old library's future was debated by the committee on a Tuesday morning. Some wished to hand the "
    "building over to a developer, while the rest warned that the town would be left without a calm spot for "
    "reading. After a long debate, they chose to keep it running for a further year.",
    "Meeting on Tuesday, the committee weighed whether to keep the old library. Selling it to a developer had "
    "supporters, but others feared losing the town's only quiet reading place. They finally agreed, after three "
    "hours, to leave it open one more year."]


def test_a_paraphrase_holding_a_long_verbatim_run_of_the_passage_is_rejected():
    from memaudit.probes.decop.paraphrase import similarity

    qc = QCSettings()
    assert len(LIBRARY.split()) == 54 and round(similarity(LIBRARY, LIBRARY_PLUS), 2) == 0.84
    assert check_paraphrase(LIBRARY, LIBRARY_PLUS, [], 0.95, qc) == "verbatim_run"
    # paraphrases that share phrases with it ("sell the building to a developer", 6 words; "the town would
    # lose its last quiet place to read", 10 words: under a fifth of the passage) are kept
    assert [check_paraphrase(LIBRARY, p, [], 0.9, qc) for p in LIBRARY_PARAPHRASES] == [None, None, None]
    # the run is counted on lower-cased words, punctuation aside, as a share of the passage's words:
    # 27 of 54 (the first half, then the second half rewritten) is rejected at the default 0.5, 26 kept
    words = LIBRARY.split()
    rest = "Hours of arguing later, members settled on keeping it going for a single extra year."
    half = " ".join(words[:27]).upper() + " it would be lost; the town said so, and its quiet place too. " + rest
    assert check_paraphrase(LIBRARY, half, [], 0.9, qc) == "verbatim_run"
    less = " ".join(words[:26]) + " builder, and some said the town would be lost without it as a quiet place. " + rest
    assert check_paraphrase(LIBRARY, less, [], 0.9, qc) is None
    # configurable: probes.decop.paraphrase.max_verbatim_run (absent: 0.5; at 1 only a whole copy is rejected)
    assert QCSettings.from_config({}).max_verbatim_run == 0.5
    assert check_paraphrase(LIBRARY, half, [], 0.9, QCSettings.from_config({"max_verbatim_run": 0.6})) is None
    whole = QCSettings.from_config({"max_verbatim_run": 1.0})
    assert [check_paraphrase(LIBRARY, c, [], 0.95, whole) for c in (LIBRARY_PLUS, half)] == ["verbatim_run", None]


def test_a_verbatim_run_is_asked_again_and_counted_in_the_qc_table(encoder):
    from memaudit.probes.decop.paraphrase import paraphrase_with_qc, quality_table

    class Scripted:
        def __init__(self):
            self.wanted = []
            self.replies = [[LIBRARY_PARAPHRASES[0], LIBRARY_PLUS, LIBRARY_PARAPHRASES[1]], [LIBRARY_PARAPHRASES[2]]]

        def candidates(self, texts, lengths, attempt, wanted=None):
            self.wanted.append(list(wanted))
            return [self.replies[attempt]]

    para = Scripted()
    [res] = paraphrase_with_qc([LIBRARY], [64], para, encoder, QCSettings(max_attempts=3))
    assert para.wanted == [[3], [1]] and res.attempts == 2 and res.n_candidates == 4
    assert {k: v for k, v in res.rejected.items() if v} == {"verbatim_run": 1}
    assert res.paraphrases == LIBRARY_PARAPHRASES
    table = quality_table([("library", 1, "evaluate")], [res], paraphraser="scripted", per_passage=3)
    assert table.loc[0, ["n_candidates", "n_verbatim_run", "verbatim_run_rate", "accept_rate"]].tolist() == \
        [4, 1, 0.25, 0.75]


def test_local_paraphrases_are_trimmed_to_the_passage_length_at_sentence_ends():
    from memaudit.probes.decop.paraphrase import trim_to_length

    original = " ".join(f"w{i}" for i in range(20)) + "."
    long = ("A b c d e f g h i j. K l m n o p q r s. T u v w x y z aa bb cc. "
            "Then the model goes on with a comment")
    # 10 + 9 words reach 0.9 x 20: the third sentence and the unfinished tail are cut
    assert trim_to_length(long, original) == "A b c d e f g h i j. K l m n o p q r s."
    assert trim_to_length("One two.\n\nThree four five. Unfinished", original) == "One two.\n\nThree four five."
    assert trim_to_length("no sentence end at all", original) == "no sentence end at all"


@pytest.mark.parametrize("comment", [
    "This rewriting of the original text is a variation of the original sentence.",
    "The text conveys both a joyous emotion and a melancholic one.",
    "I have made multiple changes to this sentence.",
    "In this rewriting, I kept the meaning.",
    "It uses different words while keeping its meaning and length.",
])
def test_a_sentence_about_the_rewriting_ends_a_local_paraphrase(comment):
    """What SmolLM2 writes about its paraphrase inside the paragraph, once it may not stop early:
    cut there (a distractor that talks about rewriting tells a reader it is not the original)."""
    from memaudit.probes.decop.paraphrase import trim_to_length

    original = " ".join(f"w{i}" for i in range(30)) + "."
    candidate = f"Emma was happy at home. She had lived there long. {comment} More text."
    assert trim_to_length(candidate, original, cut_commentary=True) == "Emma was happy at home. She had lived there long."
    assert trim_to_length(candidate, original) == candidate  # without min_length it is left alone
    # nothing before it: rejected as empty
    assert trim_to_length(f"{comment} Emma was happy.", original, cut_commentary=True) == ""
    # a passage that itself speaks of "the original text" keeps the sentence that quotes it
    quoting = "Nobody read the original text of the will. It was lost."
    assert trim_to_length("The original text of the will was unread. It was lost.", quoting, cut_commentary=True) == \
        "The original text of the will was unread. It was lost."


def test_calibration_documents_per_benchmark_resolve_validate_and_zero_skips_calibration():
    """config/paper.yaml's arXivTection has 25 clean papers: BookTection's 30 calibration books would
    stop its decop_items job, so the number can be given per benchmark, and 0 means no calibration."""
    import copy
    from pathlib import Path

    import yaml

    from memaudit.errors import ConfigError
    from memaudit.jobs import validate_config
    from memaudit.probes.decop import plan
    from memaudit.probes.decop.runner import _evaluate

    ci = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "ci.yaml").read_text())
    cfg = copy.deepcopy(ci)
    benches = sorted(cfg["benchmarks"])
    cfg["probes"]["decop"]["calibration_documents"] = {"default": 3, benches[0]: 0}
    done = validate_config(cfg)
    assert plan.calibration_documents(done["probes"]["decop"], benches[0]) == 0
    assert plan.calibration_documents(done["probes"]["decop"], benches[1]) == 3
    assert plan.calibration_documents({"calibration_documents": {benches[0]: 2}}, benches[1]) == 30  # the paper's
    assert plan.calibration_documents({}, benches[0]) == 30
    first, second = plan.settings(done, benches[0]), plan.settings(done, benches[1])
    assert first["calibration_documents"] == 0 and second["calibration_documents"] == 3
    assert {k: v for k, v in first.items() if k != "calibration_documents"} == \
        {k: v for k, v in second.items() if k != "calibration_documents"}
    assert "models" not in first and "benchmarks" not in first
    # a one-number config is every benchmark's number: the demo's job parameters do not change
    assert plan.settings(validate_config(ci), benches[0])["calibration_documents"] == ci["probes"]["decop"][
        "calibration_documents"]

    cfg["probes"]["decop"]["calibration_documents"] = {"default": 3, "arxivtecton": 0}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value).splitlines() == [
        f"config key probes.decop.calibration_documents.arxivtecton: not a configured benchmark (benchmarks: "
        f"{', '.join(benches)}; or `default`)"]
    cfg["probes"]["decop"]["calibration_documents"] = {"default": -1}
    with pytest.raises(ConfigError, match="probes.decop.calibration_documents"):
        validate_config(cfg)

    docs = [{"doc_id": f"d{i:02d}", "meta": {"label": int(i < 10)}} for i in range(25)]
    roles = select_documents(docs, n_documents=None, calibration_documents=0, seed=3)
    assert set(roles.values()) == {"evaluate"} and len(roles) == 25
    with pytest.raises(InputError) as err:
        select_documents(docs, n_documents=None, calibration_documents=30, seed=3, where="arxiv/documents.jsonl")
    assert str(err.value).startswith("arxiv/documents.jsonl: probes.decop.calibration_documents=30 leaves no "
                                     "clean document to evaluate (only 15 clean documents)")

    # logit mode with 0 calibration documents: the uncalibrated variant only, and the reason recorded
    answers = pd.DataFrame([{"doc_id": d, "label": lab, "role": "evaluate", "passage_id": f"{d}#0",
                             "item_id": f"{d}#0", "length": 64, "ordering": "0123", "correct": 0, "pred": pred,
                             "p_A": pa, "p_B": (1 - pa) / 3, "p_C": (1 - pa) / 3, "p_D": (1 - pa) / 3}
                            for d, lab, pred, pa in [("m", 1, 0, 0.7), ("n", 0, 1, 0.1)]])
    scored, table, calibration = _evaluate(answers, "logit", [64], fdr=0.1, calibration_documents=0)
    assert calibration == {"64": {"skipped": "probes.decop.calibration_documents is 0 for this benchmark",
                                  "n_calibration_documents": 0}}
    assert not scored["method"].str.contains("calibrated").any()
    assert dict(zip(scored.loc[scored["method"] == "decop-logit", "doc_id"],
                    scored.loc[scored["method"] == "decop-logit", "score"])) == {"m": 1.0, "n": 0.0}


def test_calibration_deltas_leave_out_skipped_calibrations(tmp_path):
    """A benchmark with calibration_documents 0 (arXivTection in paper.yaml), or whose clean passages all
    failed quality control, has calibration files without a Δ: the figures job reads past them."""
    from memaudit.io import write_json
    from memaudit.probes.decop.figures import calibration_deltas

    delta = {"A": 0.1, "B": -0.05, "C": -0.05, "D": 0.0}
    write_json(tmp_path / "a.json", {"model": "m1", "mode": "logit", "calibration": {
        "64": {"skipped": "probes.decop.calibration_documents is 0 for this benchmark", "n_calibration_documents": 0}}})
    write_json(tmp_path / "b.json", {"model": "m2", "mode": "logit", "calibration": {
        "64": {"skipped": "no clean calibration document survived quality control", "n_calibration_documents": 0},
        "256": {"delta": {**delta, "A": 0.2}, "n_calibration_documents": 3},
        "128": {"delta": delta, "n_calibration_documents": 3}}})
    write_json(tmp_path / "c.json", {"model": "m3", "mode": "likelihood", "calibration": {}})
    assert calibration_deltas([tmp_path / f"{k}.json" for k in "abc"]) == {"m2 (logit)": (128, delta)}


def test_label_probability_figure_is_the_evaluated_documents_before_and_after_the_calibration_sets_delta(
        tmp_path, monkeypatch):
    """Figure 9: Δ from the clean calibration documents, added to the evaluated documents' mean P(A-D), at the
    length Δ is for. The figure added Δ to the calibration documents it came from (after = 0.25 always), at
    the shortest length of all (here 64, whose calibration was skipped)."""
    from memaudit.io import write_json
    from memaudit.probes.decop import figures

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [("c1", "calibrate", 128, 0.55, 0.15, 0.15, 0.15), ("c2", "calibrate", 128, 0.55, 0.15, 0.15, 0.15),
            ("e1", "evaluate", 128, 0.4, 0.2, 0.2, 0.2), ("e1", "evaluate", 128, 0.4, 0.1, 0.3, 0.2),
            ("e2", "evaluate", 128, 0.5, 0.1, 0.2, 0.2), ("e1", "evaluate", 64, 0.9, 0.0, 0.0, 0.1)]
    answers = pd.DataFrame(rows, columns=["doc_id", "role", "length", "p_A", "p_B", "p_C", "p_D"])
    delta = dict(zip("ABCD", map(float, analysis.label_adjustments(answers[answers["role"] == "calibrate"]))))
    assert delta == pytest.approx({"A": -0.3, "B": 0.1, "C": 0.1, "D": 0.1})
    write_json(tmp_path / "m.json", {"model": "m", "mode": "logit", "calibration": {
        "64": {"skipped": "no clean calibration document survived quality control", "n_calibration_documents": 0},
        "128": {"delta": delta, "n_calibration_documents": 2}}})
    figures.plot_decop_label_probabilities({"m (logit)": answers}, figures.calibration_deltas([tmp_path / "m.json"]),
                                           tmp_path / "probabilities", "t")
    before, after = drawn[0].axes[0].containers
    # e1's mean (0.4, 0.15, 0.25, 0.2) and e2's (0.5, 0.1, 0.2, 0.2), averaged; after = before + Δ
    assert [b.get_height() for b in before] == pytest.approx([0.45, 0.125, 0.225, 0.2])
    assert [b.get_height() for b in after] == pytest.approx([0.15, 0.225, 0.325, 0.3])


def test_auc_by_size_lines_follow_the_manifests_not_the_names(tmp_path, monkeypatch):
    """A fine-tune is contaminated by its manifest's contaminated_on, whatever its name; each family is its
    own line (the figure read '-contaminated' off the names and joined the families into one line)."""
    from memaudit.probes.decop import figures

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [("pythia-160m", 1.6e8, 0.50), ("pythia-160m-ft", 1.6e8, 0.90), ("pythia-410m", 4.1e8, 0.55),
            ("opt-125m", 1.25e8, 0.45), ("opt-125m-contaminated", 1.25e8, 0.60), ("opt-350m", 3.5e8, 0.52)]
    summary = pd.DataFrame([{"model": m, "method": "decop-likelihood-prob", "length": 64, "n_params": n, "auc": a}
                            for m, n, a in rows])
    models = {m: {"family": m.split("-")[0], "contaminated": m == "pythia-160m-ft"} for m, _, _ in rows}
    figures.plot_decop_auc_by_size(summary, tmp_path / "size", "t", models)
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle())
             for line in drawn[0].axes[0].get_lines() if not line.get_label().startswith("_")}
    assert lines == {
        "decop-likelihood-prob, opt (not contaminated)": ([1.25e8, 1.25e8, 3.5e8], [0.45, 0.60, 0.52], "--"),
        "decop-likelihood-prob, pythia (contaminated)": ([1.6e8], [0.90], "-"),
        "decop-likelihood-prob, pythia (not contaminated)": ([1.6e8, 4.1e8], [0.50, 0.55], "--"),
    }


def test_auc_by_size_lines_take_each_models_family_from_the_config(tmp_path, monkeypatch):
    """The family a model's line is drawn under is the config's (the job's param), not its manifest's:
    renaming a family reruns the figures alone, so a manifest prepared before the rename still holds the old
    name (and one prepared since holds none). Contamination is still the manifest's."""
    from memaudit.io import write_json
    from memaudit.probes.decop import figures

    drawn = {}
    monkeypatch.setattr(figures, "plot_decop_auc_by_size",
                        lambda summary, out, title, models, benchmark: drawn.update(models))
    for name in ("plot_decop_auc_by_length", "plot_decop_calibration_accuracy", "plot_decop_accuracy_by_position",
                 "plot_decop_label_probabilities"):
        monkeypatch.setattr(figures, name, lambda *args: None)
    write_json(tmp_path / "ft" / "manifest.json", {"name": "ft", "family": "tiny-gpt2", "n_params": 10,
                                                   "contaminated_on": ["novels"]})
    write_json(tmp_path / "base" / "manifest.json", {"name": "base", "n_params": 10, "contaminated_on": []})
    figures.make_decop_figures("novels", [], [], [], [str(tmp_path / "ft"), str(tmp_path / "base")],
                               {k: tmp_path / f"{k}.png" for k in ("auc_by_size", "auc_by_length", "calibration",
                                                                   "position", "probabilities")}
                               | {"summary": tmp_path / "decop_novels.csv"},
                               families={"ft": "tiny-gpt2-tuned", "base": "tiny-gpt2"})
    assert drawn == {"ft": {"family": "tiny-gpt2-tuned", "contaminated": True, "fine_tuned_on": "novels"},
                     "base": {"family": "tiny-gpt2", "contaminated": False, "fine_tuned_on": ""}}


def test_auc_by_size_draws_a_model_fine_tuned_on_another_benchmark_as_its_own_line(tmp_path, monkeypatch):
    """On the novels, a fine-tune on the news is neither the base nor contaminated: it was a point on its base's
    line at the same size, a vertical stroke from the base's AUC to its own that read as a size trend."""
    from memaudit.probes.decop import figures

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [("p-160m", 1.6e8, 0.50), ("p-160m-news", 1.6e8, 0.58), ("p-410m", 4.1e8, 0.55),
            ("p-410m-news", 4.1e8, 0.52), ("p-410m-novels", 4.1e8, 0.95)]
    summary = pd.DataFrame([{"model": m, "method": "decop-likelihood-prob", "length": 64, "n_params": n, "auc": a}
                            for m, n, a in rows])
    tuned = {"p-160m-news": ["news"], "p-410m-news": ["news"], "p-410m-novels": ["novels", "news"]}
    models = {m: {"family": "p", "contaminated": "novels" in tuned.get(m, []),
                  "fine_tuned_on": figures.fine_tuning(tuned.get(m, []))} for m, _, _ in rows}
    figures.plot_decop_auc_by_size(summary, tmp_path / "size", "t", models, benchmark="novels")
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle())
             for line in drawn[0].axes[0].get_lines() if not line.get_label().startswith("_")}
    assert lines == {
        "decop-likelihood-prob, p (not contaminated)": ([1.6e8, 4.1e8], [0.50, 0.55], "--"),
        "decop-likelihood-prob, p (fine-tuned on news, not this benchmark)": ([1.6e8, 4.1e8], [0.58, 0.52], "-."),
        "decop-likelihood-prob, p (contaminated: fine-tuned on news, novels)": ([4.1e8], [0.95], "-"),
    }


def test_auc_figures_mark_an_auc_that_could_not_be_computed(tmp_path, monkeypatch):
    """A NaN AUC (a model whose evaluated documents are one class) is a hollow 'n/a' marker at the bottom edge
    of the AUC-by-size and AUC-by-length figures, explained in the legend; both figures dropped it without a mark."""
    from memaudit.figures.plots import MISSING_LABEL, MISSING_Y
    from memaudit.probes.decop import figures

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [("m-small", 1e8, 64, 0.6), ("m-big", 1e9, 64, float("nan")), ("m-small", 1e8, 128, float("nan")),
            ("m-big", 1e9, 128, 0.7)]
    summary = pd.DataFrame([{"model": m, "method": f"decop-logit-{n}tok", "length": n, "n_params": p, "auc": a}
                            for m, p, n, a in rows])
    models = {m: {"family": "m", "contaminated": False} for m in ("m-small", "m-big")}
    figures.plot_decop_auc_by_size(summary, tmp_path / "size", "t", models)
    figures.plot_decop_auc_by_length(summary, tmp_path / "length", "t")
    marked = []
    for fig in drawn:
        ax = fig.axes[0]
        hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
        assert all(line.get_markerfacecolor() == "none" and line.get_transform() == ax.get_xaxis_transform()
                   for line in hollow)
        marked.append(sorted((float(x), float(y)) for line in hollow for x, y in zip(*line.get_data())))
        assert sorted(t.xy[0] for t in ax.texts if t.get_text() == "n/a") == [x for x, _ in marked[-1]]
        assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == MISSING_LABEL
    # by size: the shortest length only (m-big's NaN at 64 tokens); by length: m-big at 64, m-small at 128
    assert marked == [[(1e9, MISSING_Y)], [(64.0, MISSING_Y), (128.0, MISSING_Y)]]


def test_calibration_figure_marks_a_model_without_calibrated_rows(tmp_path, monkeypatch):
    """A model whose calibration was skipped has raw rows only: its calibrated bars are hollow 'n/a' markers
    (the bars were left out without a mark)."""
    from memaudit.figures.plots import MISSING_Y
    from memaudit.probes.decop import figures

    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    def table(methods):
        return pd.DataFrame([{"role": "evaluate", "method": method, "length": 64, "label": label, "accuracy": acc}
                             for method in methods for label, acc in ((1, 0.75), (0, 0.25))])

    figures.plot_decop_calibration_accuracy(
        {"a": table(["decop-logit-64tok", "decop-logit-calibrated-64tok"]), "b": table(["decop-logit-64tok"])},
        tmp_path / "calibration", "t")
    ax = drawn[0].axes[0]
    hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
    # bars: (a, members), (a, non-members), (b, members), (b, non-members); calibrated bars sit at x + 0.19
    assert [pytest.approx(list(line.get_xdata())) for line in hollow] == [[2.19, 3.19]]
    assert list(hollow[0].get_ydata()) == [MISSING_Y, MISSING_Y]
    assert len([t for t in ax.texts if t.get_text() == "n/a"]) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == (
        "n/a (hollow, at the bottom): no documents (calibration skipped)")


def test_blackbox_outcome_counts_are_per_passage_length(tmp_path):
    """A document's n_invalid/n_refusal/n_error count the answers of the row's own length: with two
    lengths configured they summed both lengths into every row (4 invalid 128-token answers showed as
    4 in the 64-token row too, where every answer was valid)."""
    from memaudit.backends.base import Generation
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.runner import run_decop

    def item(doc, label, role, length):
        pid = f"{doc}#L{length}p0"
        return {"item_id": pid, "passage_id": pid, "doc_id": doc, "label": label, "answer": 0,
                "options": [f"{doc} {length} {k}" for k in "wxyz"],
                "meta": {"title": doc, "author": "An Author", "kind": "book", "role": role, "length_tokens": length}}

    items = [item(d, lab, role, n) for d, lab, role in (("m", 1, "evaluate"), ("c", 0, "calibrate"))
             for n in (64, 128)]
    write_jsonl(tmp_path / "items.jsonl", items)

    class Replies:  # a valid letter to every 64-token question, "no idea" (invalid) to every 128-token one
        name = "fake"

        def describe(self):
            return {}

        def generate(self, prompts, params):
            return [Generation(text="no idea" if " 128 " in p else "A") for p in prompts]

    out = {k: tmp_path / f"{k}.{ext}" for k, ext in
           [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
    run_decop("blackbox", Replies(), tmp_path / "items.jsonl",
              {"lengths": [64, 128], "orderings": "latin_square", "fdr": 0.1, "calibration_documents": 1},
              **{f"out_{k}": v for k, v in out.items()})
    table = pd.read_csv(out["table"]).set_index(["doc_id", "length"])
    assert table.loc[("m", 64), ["n_questions", "n_valid", "n_invalid"]].tolist() == [4, 4, 0]
    assert table.loc[("m", 128), ["n_questions", "n_valid", "n_invalid"]].tolist() == [4, 0, 4]
    assert table.loc[("c", 128), "n_invalid"] == 4 and table.loc[("c", 64), "n_invalid"] == 0


def test_logit_mode_tables_count_an_api_models_refusals_and_letterless_answers(tmp_path):
    """Logit mode on an API model: a question the provider refused and one whose top list held no letter
    are counted in the table's n_refusal and n_invalid, as black-box mode counts them (the table had no
    such columns in logit mode: they showed only as statuses in answers.csv)."""
    from memaudit.backends.api import OptionScores
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.runner import run_decop

    items = [{"item_id": f"{d}#p0", "passage_id": f"{d}#p0", "doc_id": d, "label": lab, "answer": 0,
              "options": [f"{d} {k}" for k in "wxyz"],
              "meta": {"title": d, "author": "An Author", "kind": "book", "role": role, "length_tokens": 64}}
             for d, lab, role in (("m", 1, "evaluate"), ("c", 0, "calibrate"))]
    write_jsonl(tmp_path / "items.jsonl", items)
    nan = float("nan")

    class API:  # document m: one refusal, one answer listing no letter, two answers "A"
        name = "api"

        def describe(self):
            return {}

        def option_scores(self, prompts, options, *, params):
            letters = {"A": -0.1, "B": -3.0, "C": -3.0, "D": -3.0}
            out = [OptionScores(letters, (), [], None, "ok") for _ in prompts]
            if "m w" in prompts[0]:
                out[0] = OptionScores(dict.fromkeys("ABCD", nan), tuple("ABCD"), [], None, "refusal")
                out[1] = OptionScores(dict.fromkeys("ABCD", nan), tuple("ABCD"), [], None, "ok")
            return out

    out = {k: tmp_path / f"{k}.{ext}" for k, ext in
           [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
    run_decop("logit", API(), tmp_path / "items.jsonl",
              {"lengths": [64], "orderings": "latin_square", "fdr": 0.1, "calibration_documents": 1},
              **{f"out_{k}": v for k, v in out.items()})
    table = pd.read_csv(out["table"]).query("method == 'decop-logit'").set_index("doc_id")
    assert table.loc["m", ["n_questions", "n_refusal", "n_invalid", "n_error"]].tolist() == [4, 1, 1, 0]
    assert table.loc["c", ["n_questions", "n_refusal", "n_invalid", "n_error"]].tolist() == [4, 0, 0, 0]


# ----------------------------------------------------------------------------- on_error: record


def _errored_run(tmp_path, mode, backend):
    """``run_decop`` on a member "m" and a clean "c" document (one 64-token passage each, the 4 Latin-square
    orderings), the per-document table and the answers back."""
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.runner import run_decop

    items = [{"item_id": f"{d}#p0", "passage_id": f"{d}#p0", "doc_id": d, "label": lab, "answer": 0,
              "options": [f"{d} verbatim", f"{d} one", f"{d} two", f"{d} three"],
              "meta": {"title": d, "author": "An Author", "kind": "book", "role": role, "length_tokens": 64}}
             for d, lab, role in (("m", 1, "evaluate"), ("c", 0, "calibrate"))]
    write_jsonl(tmp_path / "items.jsonl", items)
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in
           [("answers", "csv"), ("documents", "csv"), ("table", "csv"), ("calibration", "json")]}
    run_decop(mode, backend, tmp_path / "items.jsonl",
              {"lengths": [64], "orderings": "latin_square", "fdr": 0.1, "calibration_documents": 1},
              **{f"out_{k}": v for k, v in out.items()})
    return pd.read_csv(out["table"]), pd.read_csv(out["answers"]), pd.read_csv(out["documents"])


def _verbatim_letter(prompt: str) -> str:
    """The letter the verbatim option is shown at in a question's prompt."""
    return next(line[0] for line in prompt.splitlines() if line.endswith(" verbatim"))


class _FailingAPI:
    """A model whose requests for document "m" fail in the orderings that show its verbatim option at A or B
    (``on_error: record``: status error, no text), and that answers every other question correctly."""
    name = "fake"

    def describe(self):
        return {}

    @staticmethod
    def fails(prompt):
        return "m verbatim" in prompt and _verbatim_letter(prompt) in "AB"

    def generate(self, prompts, params):
        from memaudit.backends.base import Generation

        return [Generation("", status="error", error="HTTP 500: boom") if self.fails(p)
                else Generation(_verbatim_letter(p)) for p in prompts]

    def option_scores(self, prompts, options, *, params):
        from memaudit.backends.api import OptionScores

        out = []
        for p, opts in zip(prompts, options):
            if self.fails(p):  # as OpenAIBackend.option_scores answers a failed request
                out.append(OptionScores(dict.fromkeys(opts, np.nan), tuple(opts), [], None, "error", error="boom"))
            else:
                out.append(OptionScores({o: (-0.1 if o == _verbatim_letter(p) else -5.0) for o in opts}, (), [],
                                        None, "ok"))
        return out

    def option_logprobs(self, prompts, options, *, params, batch_size=None):
        return [s.logprobs for s in self.option_scores(prompts, options, params=params)]


@pytest.mark.parametrize("mode", ["blackbox", "logit"])
def test_failed_requests_are_errors_left_out_of_the_accuracy(tmp_path, mode):
    """Under ``on_error: record`` a request that got no answer is counted as an error (``n_error``) and left
    out of the accuracy's denominator: m answered its 2 answered questions right, accuracy 1. Before, black-box
    mode counted the 2 failures as wrong answers (accuracy 0.5) and logit mode as ``invalid`` ones (no
    ``n_error`` at all), so a document whose requests failed looked less memorised."""
    table, answers, documents = _errored_run(tmp_path, mode, _FailingAPI())
    m = table[(table["doc_id"] == "m") & (table["method"] == f"decop-{mode}")].iloc[0]
    assert m[["n_questions", "n_error", "n_valid", "n_correct"]].tolist() == [4, 2, 2, 2]
    assert m["accuracy"] == 1.0 and m["accuracy_valid"] == 1.0
    assert sorted(answers.loc[answers["doc_id"] == "m", "status"]) == ["error", "error", "ok", "ok"]
    assert documents.set_index(["doc_id", "method"]).loc[("m", f"decop-{mode}"), "score"] == 1.0


def test_a_document_whose_every_request_failed_is_a_one_line_error(tmp_path):
    """A document with no answered question has no accuracy (0 of 0): the job stops naming it, as the prefix
    and CopyBench jobs stop on failed requests, where it scored 0 (every failure a wrong answer)."""
    class AllFail(_FailingAPI):
        @staticmethod
        def fails(prompt):
            return "m verbatim" in prompt

    from memaudit.backends.api import APIRequestError

    with pytest.raises(APIRequestError) as err:  # one line in the job's log, no traceback
        _errored_run(tmp_path, "blackbox", AllFail())
    assert str(err.value) == ("DE-COP blackbox: every request for 1 document (passage length) failed, e.g. 'm' "
                              "(64 tokens): no accuracy to score it by (on_error: record; the answered ones are "
                              "cached: a rerun sends only what failed)")


def test_accuracy_by_position_leaves_failed_requests_out():
    a = _answers([("d1", 1, "evaluate", "d1#0", 0, 0, *[np.nan] * 4),
                  ("d1", 1, "evaluate", "d1#0", 0, -1, *[np.nan] * 4)]).assign(status=["ok", "error"])
    assert analysis.accuracy_by_position(a)["accuracy"].tolist() == [1.0]


def test_documents_too_short_for_any_passage_are_one_line_naming_the_lengths_key(tmp_path):
    """WikiMIA's 32-word texts (docs/probes/ktd.md's example) give no 64-token passage: the items job crashed
    on an empty quality table (KeyError 'n_kept') after paraphrasing nothing."""
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.items import build_items

    docs = tmp_path / "documents.jsonl"
    write_jsonl(docs, ({"doc_id": f"w/{i}", "title": "", "author": "", "kind": "text", "meta": {"label": i % 2},
                        "text": " ".join(f"word{i}x{j}" for j in range(30 + i)) + "."} for i in range(6)))
    cfg = {"lengths": [128, 64], "passages_per_document": 1, "n_documents": None, "calibration_documents": 1}
    with pytest.raises(InputError) as err:
        build_items(docs, cfg, 13, None, None, tmp_path / "items.jsonl", tmp_path / "qc.csv", progress=lambda m: None)
    assert str(err.value) == (
        f"{docs}: no document is long enough for a DE-COP passage of 64 tokens (at least 48 words, ending a "
        f"sentence); the longest of the 6 has 35 words: give longer texts, or a shorter probes.decop.lengths "
        f"(64, 128 or 256 tokens)")


def test_documents_too_short_for_a_passage_are_named_in_the_items_log(tmp_path):
    """A text shorter than every length gave no item and no word in the log: DE-COP and KTD left it out silently."""
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.items import build_items

    class Paraphraser:  # three paraphrases of other words, which the quality control accepts
        def candidates(self, texts, lengths, attempt, wanted=None):
            return [[" ".join(f"{w}{i}." for i in range(len(t.split()))) for w in ("alpha", "bravo", "charlie")][:n]
                    for t, n in zip(texts, wanted or [3] * len(texts))]

        def describe(self):
            return {"paraphraser": "stub"}

    class Encoder:
        def cosine(self, a, b):
            return [1.0] * len(a)

    docs = tmp_path / "documents.jsonl"
    sizes = {"w/a": 60, "w/b": 60, "w/c": 60, "w/d": 60, "w/e": 20, "w/f": 30}  # e, f: under 48 words
    write_jsonl(docs, ({"doc_id": d, "title": "", "author": "", "kind": "text", "meta": {"label": i % 2},
                        "text": " ".join(f"word{i}x{j}" for j in range(n)) + "."}
                       for i, (d, n) in enumerate(sizes.items())))
    cfg = {"lengths": [64], "passages_per_document": 1, "n_documents": None, "calibration_documents": 1,
           "paraphrase": {"length_ratio": [0.1, 10.0], "min_cosine": 0.0}}
    said = []
    items = build_items(docs, cfg, 13, Paraphraser(), Encoder(), tmp_path / "items.jsonl", tmp_path / "qc.csv",
                        progress=said.append)
    assert sorted(it["doc_id"] for it in items) == ["w/a", "w/b", "w/c", "w/d"]
    assert said[1] == ("2 of the 6 documents give no passage of 64 tokens (at least 48 words, ending a "
                       "sentence) and have no item: w/e (20 words), w/f (30 words)")


def test_a_document_without_a_passage_of_the_length_has_its_row_in_the_qc_table(encoder, tmp_path):
    """A document too short for a passage of any configured length (a user's short chapter) was left out of
    decop_qc.csv and named nowhere: the log's "9 documents ..., 8 passages" was all that showed it. It is a
    row with ``n_passages`` 0, and the log names it."""
    from memaudit.io import write_jsonl
    from memaudit.probes.decop.items import build_items

    class Scripted:
        def candidates(self, texts, lengths, attempt, wanted=None):
            return [LIBRARY_PARAPHRASES for _ in texts]

        def describe(self):
            return {"paraphraser": "scripted"}

    docs = [{"doc_id": "long", "title": "Long", "author": "A", "kind": "book", "text": LIBRARY, "meta": {"label": 1}},
            {"doc_id": "short", "title": "Short", "author": "B", "kind": "book", "text": "It rained. We stayed in.",
             "meta": {"label": 0}}]
    write_jsonl(tmp_path / "documents.jsonl", docs)
    logs = []
    cfg = {"lengths": [64], "passages_per_document": 1, "calibration_documents": 0, "paraphrase": {}}
    items = build_items(tmp_path / "documents.jsonl", cfg, 0, Scripted(), encoder, tmp_path / "items.jsonl",
                        tmp_path / "qc.csv", progress=logs.append)
    assert [it["doc_id"] for it in items] == ["long"]
    qc = pd.read_csv(tmp_path / "qc.csv")
    assert qc[["doc_id", "label", "role", "n_passages", "n_kept", "n_candidates"]].values.tolist() == [
        ["long", 1, "evaluate", 1, 1, 3], ["short", 0, "evaluate", 0, 0, 0]]
    # no candidate, so no rate: empty (not measured), not 0 (every candidate rejected)
    assert qc["accept_rate"].iloc[0] == 1.0 and qc.filter(like="_rate").iloc[1].isna().all()
    assert ("1 of the 2 documents give no passage of 64 tokens (at least 48 words, ending a sentence) and have no "
            "item: short (5 words)") in logs


def test_the_prob_score_counts_a_reply_with_no_letter_as_0_as_the_accuracy_counts_it_wrong():
    """An API model's reply that listed no option letter (invalid) has no probability: the mean skipped it, so
    a member document answered on 1 of its 4 questions scored that one answer's 0.9 against a non-member's 0.6
    while its accuracy was 0.25 against 1.0. It counts 0; a request with no reply at all (error) stays out."""
    from memaudit.probes.decop.runner import _evaluate

    nan = np.nan
    rows = []

    def question(doc, label, ordering, correct, probs, status):
        rows.append({"item_id": f"{doc}#{ordering}", "passage_id": f"{doc}#0", "doc_id": doc, "label": label,
                     "role": "evaluate", "length": 64, "ordering": ordering, "correct": correct,
                     **dict(zip(["p_A", "p_B", "p_C", "p_D"], probs)), "letter_mass": 1.0,
                     "pred": int(np.nanargmax(probs)) if status == "ok" else -1, "status": status})

    question("m", 1, "0123", 0, [0.9, 0.05, 0.03, 0.02], "ok")
    for ordering, correct in (("1230", 3), ("2301", 2)):
        question("m", 1, ordering, correct, [nan] * 4, "invalid")
    question("m", 1, "3012", 1, [nan] * 4, "error")  # no reply: out of the accuracy and the prob alike
    for ordering, correct in (("0123", 0), ("1230", 3), ("2301", 2), ("3012", 1)):
        probs = [0.4 / 3] * 4
        probs[correct] = 0.6
        question("n", 0, ordering, correct, probs, "ok")
    scored, _, _ = _evaluate(pd.DataFrame(rows), "logit", [64], fdr=0.1, calibration_documents=0)
    score = {(r.method, r.doc_id): r.score for r in scored.itertuples()}
    assert score[("decop-logit", "m")] == pytest.approx(1 / 3) and score[("decop-logit", "n")] == 1.0
    assert score[("decop-logit-prob", "m")] == pytest.approx(0.9 / 3)  # (0.9 + 0 + 0) / 3 answered-or-not
    assert score[("decop-logit-prob", "n")] == pytest.approx(0.6)


def test_a_decop_figure_with_nothing_to_draw_says_why(tmp_path, monkeypatch):
    """The demo runs DE-COP in likelihood mode only: the calibration, position and label-probability figures
    were blank axes (the calibration one with a raw/calibrated legend), saying nothing of why."""
    from unittest.mock import Mock

    from memaudit.figures import plots
    from memaudit.probes.decop import figures as decop_figures

    note = Mock(wraps=plots.plot_note)  # draws the note, and keeps what it was asked to say
    monkeypatch.setattr(decop_figures, "plot_note", note)
    answers = {"m (likelihood)": pd.DataFrame({"doc_id": ["d"], "label": [1], "role": ["evaluate"], "length": [64],
                                               "ordering": ["0123"], "correct": [0], "pred": [0]})}
    tables = {"m": pd.DataFrame({"role": ["evaluate"], "method": ["decop-likelihood"], "length": [64], "label": [1],
                                 "accuracy": [1.0]})}
    paths = [decop_figures.plot_decop_calibration_accuracy(tables, tmp_path / "calibration", "novels"),
             decop_figures.plot_decop_accuracy_by_position(answers, tmp_path / "position", "novels"),
             decop_figures.plot_decop_label_probabilities(answers, {}, tmp_path / "probabilities", "novels")]
    assert all(p.exists() for pair in paths for p in pair)
    assert [call.args[1] for call in note.call_args_list] == [
        "novels: no logit-mode table in this run (the calibration, Algorithm 1, is logit mode's: "
        "probes.decop_logit.models)",
        "novels: no mode of this run shows the options in more than one order (likelihood mode scores them "
        "order-free; logit and black-box modes rotate them)",
        "novels: no label adjustment Δ in this run (logit mode with clean calibration documents: "
        "probes.decop_logit.models, probes.decop.calibration_documents)"]
