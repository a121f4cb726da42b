"""The cloze family's job pieces: probing in both modes, per-text and per-document tables, the summary,
the config checks (the helpers' modules are tested in test_cloze_selection.py and test_cloze_scoring.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from memaudit import jobs
from memaudit.config import is_api_model
from memaudit.backends.base import GENERATE, Backend, Generation
from memaudit.errors import InputError
from memaudit.probes.cloze import plan, runner, summary

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Elizabeth walked to Netherfield with Jane on Tuesday, and Darcy waited at Pemberley for 40 days."


def token(measure: str, word: str, context: str | None = None) -> dict:
    start = TEXT.index(word)
    return {"measure": measure, "start": start, "end": start + len(word), "word": word,
            "context": context or TEXT[:start] + "[MASK]" + TEXT[start + len(word):]}


ITEMS = [
    {"passage_id": "d1#p0", "doc_id": "d1", "label": 1, "text": TEXT, "reasons": {},
     "tokens": [token("prob", "Netherfield"), token("prob", "Pemberley"), token("person", "Darcy")]},
    {"passage_id": "d2#p0", "doc_id": "d2", "label": 0, "text": TEXT, "reasons": {"person": "too_few_tokens"},
     "tokens": [token("prob", "Tuesday"), token("prob", "40")]},
]


class Scripted(Backend):
    capabilities = frozenset({GENERATE})

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def describe(self):
        return {"id": "scripted"}

    def generate(self, prompts, params):
        self.calls.append(list(prompts))
        return [self.answers(p) for p in prompts]


def scripted_reply(prompt: str) -> Generation:
    context = prompt.rsplit("Input: ", 1)[1]
    if "[MASK] with Jane" in context:
        return Generation(text="<word>netherfield</word>")  # right, other case
    if "at [MASK] for" in context:
        return Generation(text="I believe it is Pemberley.")  # no tags: invalid
    if "and [MASK] waited" in context:
        return Generation(text="I cannot help with that.", status="refusal")
    if "on [MASK]," in context:
        return Generation(text="<word>Tuesday</word>")
    return Generation(text="<word>30</word>")  # 40 days: wrong


def test_blackbox_answers_classify_every_reply_and_ask_each_context_once():
    tokens = runner.probe_tokens(ITEMS)
    backend = Scripted(scripted_reply)
    answers = runner.blackbox_answers(backend, tokens, style="cloze", max_new_tokens=12)
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 5  # one batched call, one prompt per mask
    assert backend.calls[0][0].startswith("You have seen the following passage in your training data.")
    assert [(a["status"], a["reconstructed"]) for a in answers] == [
        ("ok", True), ("invalid", False), ("refusal", False), ("ok", True), ("ok", False)]
    table = runner.token_table(ITEMS, tokens, answers)
    texts = runner.text_table(ITEMS, table, ["prob", "person"], min_reconstructed=2)
    d1 = texts.set_index(["passage_id", "measure"])
    assert d1.loc[("d1#p0", "prob"), ["n_tokens", "n_reconstructed", "n_invalid"]].tolist() == [2, 1, 1]
    assert d1.loc[("d1#p0", "person"), ["n_tokens", "n_refusal", "memorised"]].tolist() == [1, 1, False]
    assert d1.loc[("d2#p0", "prob"), ["n_reconstructed", "memorised"]].tolist() == [1, False]
    # a passage without enough tokens stays, with its reason
    assert d1.loc[("d2#p0", "person"), ["n_tokens", "reason"]].tolist() == [0, "too_few_tokens"]
    docs = runner.document_table(texts, "blackbox")
    assert set(docs["method"]) == {"cloze_prob", "cloze_person"}
    scores = docs.set_index(["doc_id", "method"])["score"]
    assert scores[scores.notna()].to_dict() == {("d1", "cloze_prob"): 1.0, ("d2", "cloze_prob"): 1.0}
    # the one person token (Darcy) was refused: the type measured nothing, and has no score (below)
    assert scores[scores.isna()].index.tolist() == [("d1", "cloze_person"), ("d2", "cloze_person")]


def never_answers(prompt: str) -> Generation:
    """A model that ignores the cloze prompt's format (no <word> tags) and refuses the mask of a name."""
    if "and [MASK] waited" in prompt.rsplit("Input: ", 1)[1]:
        return Generation(text="I cannot help with that.", status="refusal")
    return Generation(text="I believe it is Pemberley.")


def test_a_token_type_no_reply_answered_has_no_document_scores_not_zeros():
    """A black-box model that never answers in <word> tags (or refuses every prompt) reconstructs nothing: every
    document scored 0, and metrics.csv read AUC 0.500 [0.500, 0.500] for it, as though measured and found at
    chance. A token type none of whose words got an answer (invalid, refused or failed, or none asked) has
    its document scores blank: no AUC (test_selection.py). One answered word is a measurement: its zeros stay."""
    tokens = runner.probe_tokens(ITEMS)
    answers = runner.blackbox_answers(Scripted(never_answers), tokens, style="cloze", max_new_tokens=12)
    texts = runner.text_table(ITEMS, runner.token_table(ITEMS, tokens, answers), ["prob", "person"],
                              min_reconstructed=2)
    assert texts[["n_tokens", "n_invalid", "n_refusal", "n_reconstructed"]].sum().tolist() == [5, 4, 1, 0]
    docs = runner.document_table(texts, "blackbox")
    assert docs[["doc_id", "method"]].values.tolist() == [
        ["d1", "cloze_person"], ["d2", "cloze_person"], ["d1", "cloze_prob"], ["d2", "cloze_prob"]]
    assert docs["score"].isna().all()
    one = texts.assign(n_invalid=np.where(texts["passage_id"].eq("d2#p0") & texts["measure"].eq("prob"), 1,
                                          texts["n_invalid"]))  # one of d2's two prob words answered, wrong
    assert runner.document_table(one, "blackbox").set_index(["doc_id", "method"])["score"].loc[
        [("d1", "cloze_prob"), ("d2", "cloze_prob")]].tolist() == [0.0, 0.0]
    # logit mode reads every word; a type with no word in any passage has no score either (MRR too)
    logit = texts.assign(n_invalid=0, n_refusal=0)
    logit = logit[logit["measure"] == "prob"]
    assert runner.document_table(logit, "logit")["score"].tolist() == [0.0, 0.0, 0.0, 0.0]
    empty = runner.document_table(logit.assign(n_tokens=0, mrr=np.nan), "logit")
    assert empty["method"].tolist() == ["cloze_prob"] * 2 + ["cloze_prob_mrr"] * 2 and empty["score"].isna().all()


def test_memorised_needs_min_reconstructed_words():
    table = pd.DataFrame({"passage_id": ["d1#p0"] * 3, "doc_id": "d1", "label": 1, "measure": "prob",
                          "word": ["a", "b", "c"], "start": [0, 5, 9], "guess": None, "status": "ok",
                          "rank": [0, 0, 7], "reconstructed": [True, True, False]})
    texts = runner.text_table(ITEMS[:1], table, ["prob"], min_reconstructed=2)
    assert texts["memorised"].tolist() == [True]
    assert texts["mrr"].tolist() == pytest.approx([(1 + 1 + 1 / 8) / 3])
    assert runner.text_table(ITEMS[:1], table, ["prob"], min_reconstructed=3)["memorised"].tolist() == [False]


def test_logit_mode_reads_the_models_own_rank_at_each_masked_word(tiny_model):
    from memaudit.backends.hf import HFBackend

    model, tok = tiny_model
    backend = HFBackend({}, model=model, tokenizer=tok, batch_size=2)
    tokens = runner.probe_tokens(ITEMS)
    answers = runner.logit_answers(backend, ITEMS, tokens)
    direct = backend.word_logprobs([TEXT], [[(t["start"], t["end"]) for _, t in tokens]])[0]
    assert [a["rank"] for a in answers] == [r["rank"] for r in direct]
    assert [a["reconstructed"] for a in answers] == [r["greedy"] for r in direct]
    table = runner.token_table(ITEMS, tokens, answers)
    texts = runner.text_table(ITEMS, table, ["prob"], min_reconstructed=2)
    expected = np.mean([1 / (r["rank"] + 1) for r in direct[:2]])
    assert texts.set_index("passage_id").loc["d1#p0", "mrr"] == pytest.approx(expected)
    assert {"cloze_prob", "cloze_prob_mrr"} == set(runner.document_table(texts, "logit")["method"])
    from memaudit.probes.cloze.plan import method_names  # what the config check lists

    assert method_names({"probes": {"cloze": {"measures": ["prob"]}}}, [("b", "m", "logit")]) == [
        "cloze_prob", "cloze_prob_mrr"]


def test_logit_mode_reconstructs_a_word_only_when_every_token_of_it_is_the_top_choice():
    """A word of several tokens whose first token alone is the model's top choice (" Pem" of " Pemberley",
    " 19" of " 1914") is not reconstructed: greedy decoding would go on with other tokens."""

    class Ranked:
        name, architecture = "ranked", "causal"

        def word_logprobs(self, texts, spans):
            recs = {"Netherfield": (0, False), "Pemberley": (0, True), "Darcy": (3, False),
                    "Tuesday": (0, True), "40": (0, False)}
            return [[dict(zip(("rank", "greedy"), recs[t[s:e]])) for s, e in sp] for t, sp in zip(texts, spans)]

    tokens = runner.probe_tokens(ITEMS)
    answers = runner.logit_answers(Ranked(), ITEMS, tokens)
    assert [(t["word"], a["rank"], a["reconstructed"]) for (_, t), a in zip(tokens, answers)] == [
        ("Netherfield", 0, False), ("Pemberley", 0, True), ("Darcy", 3, False), ("Tuesday", 0, True), ("40", 0, False)]


def _texts(model: str, rec: list[int], labels: list[int]) -> pd.DataFrame:
    n = len(rec)
    return pd.DataFrame({"benchmark": "b", "model": model, "mode": "logit", "passage_id": [f"p{i}" for i in range(n)],
                         "doc_id": [f"d{i}" for i in range(n)], "label": labels, "measure": "prob",
                         "n_tokens": 4, "n_reconstructed": rec, "n_invalid": 0, "n_refusal": 0, "n_error": 0,
                         "mrr": 0.5, "memorised": [r >= 2 for r in rec], "reason": ""})


def test_summary_detection_and_contaminated_minus_base():
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    base = _texts("base", [0, 1, 0, 0, 0, 1, 0, 0], labels)
    hot = _texts("hot", [3, 4, 2, 1, 0, 2, 0, 0], labels)
    texts = pd.concat([base, hot], ignore_index=True)
    table = summary.detection_table(texts, seed=1).set_index(["model", "method"])
    # hot flags p0, p1, p2 (members) and p5 (a non-member): P = 3/4, R = 3/4, F_beta = (1.01 PR) / (0.01 P + R)
    row = table.loc[("hot", "cloze_prob")]
    assert (row["precision"], row["recall"]) == (0.75, 0.75)
    assert row["fbeta"] == pytest.approx(1.01 * 0.75 * 0.75 / (0.01 * 0.75 + 0.75))
    assert row["rate_member"] == pytest.approx(10 / 16) and row["rate_nonmember"] == pytest.approx(2 / 16)
    assert table.loc[("hot", "majority"), "precision"] == 0.5
    diff = summary.differences_table(texts, {"hot": "base"}, seed=3).set_index("group")
    assert diff.loc["member", "difference"] == pytest.approx(np.mean([3, 3, 2, 1]) / 4)
    assert diff.loc["member", "ci_low"] > 0 and not diff.loc["member", "interval_holds_0"]
    assert diff.loc["nonmember", "difference"] == pytest.approx(0.25 / 4)
    did = diff.loc["member_minus_nonmember"]
    assert did["difference"] == pytest.approx(np.mean([3, 3, 2, 1]) / 4 - 0.25 / 4) and did["n_texts"] == 8
    assert np.isnan(did["rate_model"]) and did["ci_low"] <= did["difference"] <= did["ci_high"]
    assert not diff["contaminated_on_benchmark"].any()
    marked = summary.differences_table(texts, {"hot": "base"}, seed=3, members_of={"hot": ["b"]})
    assert marked["contaminated_on_benchmark"].all()
    # one non-member passage: no interval, so neither "holds 0" nor "excludes 0" (blank, not False)
    one = pd.concat([base.iloc[:5], hot.iloc[:5]], ignore_index=True)
    lone = summary.differences_table(one, {"hot": "base"}, seed=3).set_index("group")
    assert lone.loc["nonmember", "n_texts"] == 1 and np.isnan(lone.loc["nonmember", "ci_low"])
    assert pd.isna(lone.loc["nonmember", "interval_holds_0"])
    assert pd.isna(lone.loc["member_minus_nonmember", "interval_holds_0"])
    assert lone.loc["member", "interval_holds_0"] is False


def _book_texts(model: str, rec: list[int], labels: list[int], per_doc: int = 1) -> pd.DataFrame:
    """Texts of eight books, three documents each (``per_doc`` passages a document), book ``bk`` holding
    documents ``bk-0`` to ``bk-2``; ``rec`` and ``labels`` per book."""
    rows = _texts(model, [r for r in rec for _ in range(3 * per_doc)], [x for x in labels for _ in range(3 * per_doc)])
    docs = [f"b{k}-{j}" for k in range(len(rec)) for j in range(3) for _ in range(per_doc)]
    return rows.assign(doc_id=docs)


def test_differences_resample_whole_books_where_labels_are_given_per_book(tmp_path):
    """Passages clustered in books whose labels are given per book (every passage of a book gains the same
    here): the interval resampled passages as independent draws, 12 a side where there are 4 books. It
    resamples whole books now (each side's books with replacement, every passage of each, paired by
    passage: :func:`memaudit.stats.metrics.paired_difference` with ``groups``), says so (``ci_unit``,
    ``n_units``) and keeps the point estimate. A benchmark labelled per document takes the document as its
    unit where documents have several passages (the news' articles), and the passage where each has one."""
    from memaudit.io import write_jsonl
    from memaudit.stats.metrics import independent_difference, paired_difference

    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    base = _book_texts("base", [0] * 8, labels)
    hot = _book_texts("hot", [1, 2, 3, 4, 0, 1, 0, 0], labels)
    texts = pd.concat([base, hot], ignore_index=True)
    documents = tmp_path / "documents.jsonl"  # the benchmark's documents.jsonl: each document's book
    write_jsonl(documents, [{"doc_id": d, "meta": {"book": d.split("-")[0]}} for d in sorted(set(hot["doc_id"]))])
    out = {k: tmp_path / f"{k}.csv" for k in ("table", "diff", "versus", "overlap")}
    texts.to_csv(tmp_path / "texts.csv", index=False)
    summary.build_summary([str(tmp_path / "texts.csv")], {"hot": "base"}, seed=3, documents={"b": str(documents)},
                          out_table=out["table"], out_differences=out["diff"], out_figure=tmp_path / "fig.png",
                          out_versus=out["versus"], out_overlap=out["overlap"])
    by_book = pd.read_csv(out["diff"]).set_index("group")
    by_text = summary.differences_table(texts, {"hot": "base"}, seed=3).set_index("group")
    books = np.repeat([f"b{k}" for k in range(8)], 3)
    gain = hot["n_reconstructed"].to_numpy() / 4
    assert by_book["ci_unit"].tolist() == ["book"] * 3 and by_book["n_units"].tolist() == [4, 4, 8]
    assert by_book["difference"].tolist() == pytest.approx(by_text["difference"].tolist())  # the point estimate
    assert by_book.loc["member", "difference"] == pytest.approx(2.5 / 4)
    assert (by_book.loc["member", "ci_low"], by_book.loc["member", "ci_high"]) == pytest.approx(
        paired_difference(gain[:12], np.zeros(12), seed=3, groups=books[:12])[1:])
    assert (by_book.loc["member_minus_nonmember", "ci_low"], by_book.loc["member_minus_nonmember", "ci_high"]) == \
        pytest.approx(independent_difference(gain[:12], gain[12:], seed=3, groups=(books[:12], books[12:]))[1:])
    # twelve passages of four books, read as twelve draws: an interval less than half as wide
    width = {name: t.loc["member", "ci_high"] - t.loc["member", "ci_low"] for name, t in (("book", by_book),
                                                                                        ("text", by_text))}
    assert width["book"] > 1.5 * width["text"]
    # no book (labels per document): each passage its own draw, as before, where a document has one ...
    assert by_text["ci_unit"].tolist() == ["text"] * 3 and by_text["n_units"].tolist() == [12, 12, 24]
    assert (by_text.loc["member", "ci_low"], by_text.loc["member", "ci_high"]) == pytest.approx(
        paired_difference(gain[:12], np.zeros(12), seed=3)[1:])
    # ... and the document where it has two (a news article's passages)
    two = pd.concat([_book_texts("base", [0] * 8, labels, per_doc=2),
                     _book_texts("hot", [1, 2, 3, 4, 0, 1, 0, 0], labels, per_doc=2)], ignore_index=True)
    by_doc = summary.differences_table(two, {"hot": "base"}, seed=3).set_index("group")
    assert by_doc["ci_unit"].tolist() == ["document"] * 3 and by_doc["n_units"].tolist() == [12, 12, 24]


def test_summary_reference_rows_say_how_the_reference_model_read_the_words():
    """The majority and random rows of cloze.csv carry their benchmark's reference_scoring as the token
    types' rows do (they were blank: the reference rows come from another table, merged on method)."""
    labels = [1, 1, 0, 0]
    texts = pd.concat([_texts("m", [3, 0, 2, 0], labels).assign(reference_scoring="masked"),
                       _texts("m", [3, 0, 2, 0], labels).assign(benchmark="c", reference_scoring="causal")],
                      ignore_index=True)
    table = summary.detection_table(texts, seed=1)
    got = sorted(zip(table["benchmark"], table["method"], table["reference_scoring"]))
    assert got == [("b", "cloze_prob", "masked"), ("b", "majority", "masked"), ("b", "random", "masked"),
                   ("b", "random_expected", "masked"), ("c", "cloze_prob", "causal"), ("c", "majority", "causal"),
                   ("c", "random", "causal"), ("c", "random_expected", "causal")]


class NamedReference:
    """A reference model as the cloze_items job opens it, named as in the config; every candidate equally
    surprising (log-probability -20, rank 5000: selected as prob and rank tokens)."""

    name = "ref-small"

    def word_logprobs(self, texts, spans_per_text, bounds=None):
        return [[{"start": a, "end": b, "first_logprob": -20.0, "logprob": -20.0, "rank": 5000, "aligned": True}
                 for a, b in spans] for spans in spans_per_text]


def test_every_table_of_the_token_selection_names_the_reference_model(tmp_path):
    """cloze.csv said how the reference model read the words (reference_scoring), not which model it was: the
    table alone could not say what chose the masked words. The items record the model's config name, the
    candidates table (ref_model), the text tables and every summary table carry it (reference_model), the
    majority and random rows too."""
    from memaudit.probes.cloze.items import build_items

    passages = [{"passage_id": f"d{i}#p0", "doc_id": f"d{i}", "label": label, "text": TEXT, "meta": {}}
                for i, label in enumerate([1, 1, 0, 0])]
    settings = {"prob_threshold": -12, "rank_threshold": 2000, "top_k": 10, "min_reconstructed": 2,
                "context_chars": 300, "measures": ["prob", "rank"]}
    items, candidates = build_items(passages, NamedReference(), settings, progress=lambda m: None)
    assert [it["reference_model"] for it in items] == ["ref-small"] * 4
    assert len(candidates) > 4 and set(candidates["ref_model"]) == {"ref-small"}
    tokens = runner.probe_tokens(items)
    paths = []
    for model, hit in (("hot", lambda it: it["label"] == 1), ("base", lambda it: False)):
        answers = [{"guess": None, "status": "ok", "rank": 0, "reconstructed": hit(items[i])} for i, _ in tokens]
        texts = runner.text_table(items, runner.token_table(items, tokens, answers), ["prob", "rank"],
                                  min_reconstructed=2)
        assert set(texts["reference_model"]) == {"ref-small"}
        paths.append(tmp_path / f"{model}_texts.csv")
        texts.assign(benchmark="b", model=model, mode="logit").to_csv(paths[-1], index=False)
    out = {k: tmp_path / f"{k}.csv" for k in ("table", "diff", "versus", "overlap")}
    summary.build_summary([str(p) for p in paths], {"hot": "base"}, seed=0, out_table=out["table"],
                          out_differences=out["diff"], out_figure=tmp_path / "fig.png", out_versus=out["versus"],
                          out_overlap=out["overlap"])
    table = pd.read_csv(out["table"])
    assert list(table.columns[-3:]) == ["reference_model", "reference_scoring", "prompt"]
    assert sorted(set(zip(table["model"], table["method"], table["reference_model"]))) == [
        (model, method, "ref-small") for model in ("base", "hot")
        for method in ("cloze_prob", "cloze_rank", "majority", "random", "random_expected")]
    for name in ("diff", "overlap"):
        frame = pd.read_csv(out[name])
        assert len(frame) > 0 and set(frame["reference_model"]) == {"ref-small"}, name
    assert "reference_model" in pd.read_csv(out["versus"]).columns


def test_cloze_csv_says_which_prompt_asked_the_black_box_models():
    """cloze.csv said how the reference model read the words, not which prompt asked a black-box model (the
    paper's cloze prompt or its one-word prompt, which read other answers on the same words). Each row says
    it, the reference rows too; ``none`` in logit mode, which reads the model's own ranks."""
    labels = [1, 1, 0, 0]
    texts = pd.concat([_texts("api", [3, 0, 2, 0], labels).assign(mode="blackbox"),
                       _texts("local", [3, 0, 2, 0], labels)], ignore_index=True)
    table = summary.detection_table(texts, seed=1, prompt="one_word")
    assert list(table.columns[-2:]) == ["reference_scoring", "prompt"]
    assert sorted(set(zip(table["model"], table["method"], table["prompt"]))) == [
        ("api", "cloze_prob", "one_word"), ("api", "majority", "one_word"), ("api", "random", "one_word"),
        ("api", "random_expected", "one_word"), ("local", "cloze_prob", "none"), ("local", "majority", "none"),
        ("local", "random", "none"), ("local", "random_expected", "none")]


def test_overlap_counts_each_region_of_the_token_types_flags():
    labels = [1, 1, 0, 0]
    prob = _texts("m", [2, 2, 2, 0], labels)  # flags p0, p1, p2
    person = _texts("m", [2, 0, 0, 0], labels).assign(measure="person")  # flags p0
    table = summary.overlap(pd.concat([prob, person], ignore_index=True)).set_index("region")
    assert table.loc["cloze_prob+cloze_person", ["n_flagged", "n_correct"]].tolist() == [1, 1]  # p0
    assert table.loc["cloze_prob", ["n_flagged", "n_correct"]].tolist() == [2, 1]  # p1 (member), p2
    assert table.loc["cloze_person", "n_flagged"] == 0 and table.loc["none", "n_flagged"] == 1  # p3
    assert set(table["model"]) == {"m"} and table["n_flagged"].sum() == 4
    assert summary.overlap(pd.DataFrame(columns=prob.columns)).empty


def test_a_fixed_splits_detection_is_reported_on_its_test_passages(tmp_path):
    """cloze.csv and cloze_overlap.csv report a benchmark with a fixed split (BookMIA's) on its test
    passages, as the paper does, and say so (split "test"); a benchmark without one on every passage
    ("all"), its numbers as before. The split reaches the tables from the items through the text tables."""
    table = pd.DataFrame({"passage_id": ["d1#p0"] * 2, "doc_id": "d1", "label": 1, "measure": "prob",
                          "word": ["a", "b"], "start": [0, 5], "guess": None, "status": "ok", "rank": [0, 0],
                          "reconstructed": [True, True]})
    assert "split" not in runner.text_table(ITEMS[:1], table, ["prob"], min_reconstructed=2).columns
    marked = runner.text_table([{**ITEMS[0], "split": "test"}], table, ["prob"], min_reconstructed=2)
    assert marked["split"].tolist() == ["test"] and list(marked.columns)[:4] == ["passage_id", "doc_id", "label",
                                                                                  "split"]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    rec = [3, 0, 2, 1, 2, 2, 0, 0]  # flags p0, p2 (members), p4, p5 (non-members)
    plain = _texts("m", rec, labels)
    # bm: p0, p1 and p4 are validation passages (p0 and p4 flagged: not reported), the rest test
    split = ["validation", "validation", "test", "test", "validation", "test", "test", "test"]
    fixed = _texts("m", rec, labels).assign(benchmark="bm", split=split)
    paths = [tmp_path / "b.csv", tmp_path / "bm.csv"]
    plain.to_csv(paths[0], index=False)
    fixed.to_csv(paths[1], index=False)
    texts = summary.read_texts([str(p) for p in paths])  # as the summary reads them: split NaN for b
    detected = summary.detection_table(texts, seed=1).set_index(["benchmark", "method"])
    # bm's test passages p2 p3 (members) p5 p6 p7: flagged p2 (member), p5 (non-member)
    row = detected.loc[("bm", "cloze_prob")]
    assert (row["split"], row["n"], row["n_member"], row["tp"], row["fp"]) == ("test", 5, 2, 1, 1)
    assert (row["precision"], row["recall"]) == (0.5, 0.5) and row["n_texts"] == 5
    assert row["rate_member"] == pytest.approx(3 / 8) and row["rate_nonmember"] == pytest.approx(2 / 12)
    assert detected.loc[("bm", "majority"), "precision"] == pytest.approx(2 / 5)
    # b: every passage, the numbers of the table without the split column
    alone = summary.detection_table(plain, seed=1)
    got = detected.loc["b"].reset_index()
    assert (got["split"] == "all").all()
    pd.testing.assert_frame_equal(got.drop(columns="split")[alone.drop(columns=["benchmark", "split"]).columns],
                                  alone.drop(columns=["benchmark", "split"]), check_dtype=False)
    regions = summary.overlap(texts).set_index(["benchmark", "region"])
    assert regions.loc[("bm", "cloze_prob"), ["split", "n_flagged", "n_correct"]].tolist() == ["test", 2, 1]
    assert regions.loc[("bm", "none"), "n_flagged"] == 3 and regions.loc[("b", "cloze_prob"), "n_flagged"] == 4
    assert (regions.loc["b", "split"] == "all").all()


def test_the_summarys_method_names_are_the_plans_for_the_ci_config():
    """The summary names its rows with plan.method_name, the one naming function the config checks and the
    document tables use: for the ci config's token types, its methods are plan.method_names' (the
    reconstruction ones; the _mrr scores are document scores, not flagged sets)."""
    config = _ci()
    measures = config["probes"]["cloze"]["measures"]
    labels = [1, 1, 0, 0]
    texts = pd.concat([_texts(model, [2, 0, 2, 0], labels).assign(measure=measure)
                       for _, model, _ in plan.runs(config) for measure in measures], ignore_index=True)
    expected = [n for n in plan.method_names(config, plan.runs(config)) if not n.endswith("_mrr")]
    assert expected == ["cloze_prob", "cloze_rank", "cloze_person"]
    table = summary.detection_table(texts, seed=0)
    named = table.loc[~table["method"].isin(["majority", "random", "random_expected"]), "method"]
    assert sorted(set(named)) == sorted(expected)
    regions = summary.overlap(texts)
    assert set(regions.columns) >= set(expected) and "+".join(expected) in set(regions["region"])


def test_figure_3_rates_by_model_size_from_the_token_tables_and_manifests(tmp_path):
    # two models (small: 1 of 4 member words, big: 3 of 4), one API-like model without a size;
    # the token tables as the probe writes them (reconstructed read back from CSV)
    rows = []
    for model, hits in (("big", [1, 1, 1, 0]), ("small", [1, 0, 0, 0]), ("api", [1, 1, 1, 1])):
        for i, hit in enumerate(hits):
            rows.append({"benchmark": "b", "model": model, "mode": "logit", "passage_id": f"p{i // 2}",
                         "doc_id": f"d{i // 2}", "label": 1, "measure": "prob", "word": "w", "start": i,
                         "guess": "", "status": "ok", "rank": 0 if hit else 9, "reconstructed": bool(hit)})
        rows.append({**rows[-1], "passage_id": "p9", "doc_id": "d9", "label": 0, "reconstructed": False})
    paths = []
    for model in ("big", "small", "api"):
        paths.append(tmp_path / f"{model}_tokens.csv")
        pd.DataFrame([r for r in rows if r["model"] == model]).to_csv(paths[-1], index=False)
    dirs = []
    for model, n in (("small", 1_000_000), ("big", 9_000_000)):
        (tmp_path / model).mkdir()
        (tmp_path / model / "manifest.json").write_text(json.dumps(
            {"name": model, "family": "f", "n_params": n, "base": None, "contaminated_on": []}))
        dirs.append(str(tmp_path / model))
    tokens = summary.read_texts([str(p) for p in paths])
    table = summary.by_size(tokens, {"small": 1e6, "big": 9e6}, seed=0)
    members = table[table["label"] == 1]
    assert members["model"].tolist() == ["small", "big"]  # ordered by size, the API model left out
    assert members["rate"].tolist() == [0.25, 0.75] and members["n_candidates"].tolist() == [4, 4]
    assert (members["rate_low"] <= members["rate"]).all() and (members["rate"] <= members["rate_high"]).all()
    assert table[table["label"] == 0]["rate"].tolist() == [0.0, 0.0]
    assert summary.by_size(tokens.iloc[:0], {"small": 1e6}, seed=0).empty
    # through build_summary, as the cloze_summary rule calls it
    texts = tmp_path / "texts.csv"
    _texts("small", [1, 0], [1, 0]).assign(reference_scoring="masked").to_csv(texts, index=False)
    out = {k: tmp_path / f"{k}.csv" for k in ("table", "diff", "versus", "overlap", "size")}
    summary.build_summary([str(texts)], {}, seed=0, out_table=out["table"], out_differences=out["diff"],
                          out_figure=tmp_path / "fig.png", out_versus=out["versus"], out_overlap=out["overlap"],
                          token_paths=[str(p) for p in paths], model_dirs=dirs, out_by_size=out["size"],
                          out_size_figure=tmp_path / "size.png")
    written = pd.read_csv(out["size"])
    assert written[written["label"] == 1]["n_params"].tolist() == [1_000_000, 9_000_000]
    # every table says how the reference model read the words (its texts' reference_scoring, by benchmark)
    for name in ("table", "diff", "versus", "overlap", "size"):
        frame = pd.read_csv(out[name])
        assert "reference_scoring" in frame.columns, name
        cloze_rows = frame[frame["method"].astype(str).str.startswith("cloze_")] if "method" in frame else frame
        assert set(cloze_rows["reference_scoring"]) <= {"masked"}, (name, frame)
    assert set(pd.read_csv(out["overlap"])["reference_scoring"]) == {"masked"}
    assert set(written["reference_scoring"]) == {"masked"}
    assert (tmp_path / "size.png").stat().st_size > 1000 and (tmp_path / "size.svg").exists()


def test_cloze_beside_the_prefix_lcs_baseline_on_the_same_test_texts():
    from memaudit.probes.cloze.baseline import PREFIX_METHOD, lcs_of_items, versus_prefix

    n = 12  # documents d0..d11, two passages each; d0..d5 members
    labels = [1] * 6 + [0] * 6
    pairs = [{"item_id": f"d{i}#p{j}", "continuation": "one two three four five six seven eight"}
             for i in range(n) for j in range(2)]
    gens = {1: "one two three four five six seven", 0: "nine ten one eleven"}  # LCS 7 and 1
    items = [{"item_id": f"d{i}#p{j}", "passage_id": f"d{i}#p{j}", "doc_id": f"d{i}", "label": labels[i],
              "status": "ok" if (i, j) != (0, 1) else "refusal",
              "generation": gens[labels[i]] if (i, j) != (0, 1) else "I'm sorry, but I can't continue this text."}
             for i in range(n) for j in range(2)]
    lcs = lcs_of_items(items, pairs)
    assert lcs.set_index("passage_id")["lcs"].to_dict() == {
        **{f"d{i}#p{j}": 7.0 if i < 6 else 1.0 for i in range(n) for j in range(2)}, "d0#p1": 0.0}
    # cloze flags: every member passage but d1's, and one non-member (d6#p0)
    rows = [{"benchmark": "b", "model": "m", "mode": "logit", "measure": "prob", "passage_id": f"d{i}#p{j}",
             "doc_id": f"d{i}", "label": labels[i], "memorised": (labels[i] == 1 and i != 1) or (i, j) == (6, 0)}
            for i in range(n) for j in range(2)]
    rows.append({**rows[0], "passage_id": "only-cloze", "doc_id": "dx"})  # not in the prefix items: not compared
    # a cautious measure: it flags d2's passages only, so some splits' test halves get no flag
    rows += [{**r, "measure": "rank", "memorised": r["doc_id"] == "d2"} for r in rows[:2 * n]]
    table = versus_prefix(pd.DataFrame(rows), {("b", "m"): lcs}, seed=5, n_splits=10).set_index("method")
    assert list(table.index) == [PREFIX_METHOD, "cloze_prob", "cloze_rank"]
    # pooled over the splits: never wrong when it flags, so precision 1 (a mean over splits with 0 for
    # the unflagged ones would be lower), recall the share of member passages it found
    assert table.loc["cloze_rank", "precision"] == 1.0 and 0 < table.loc["cloze_rank", "recall"] < 0.5
    assert (table["n_splits"] == 10).all() and (table["n_test"] == 12).all() and (table["n_validation"] == 12).all()
    prefix = table.loc[PREFIX_METHOD]
    # LCS separates the classes but for the refused member passage (0 words): precision 1, recall 5/6 or 1
    assert prefix["precision"] == 1.0 and 5 / 6 <= prefix["recall"] < 1 and 1 < prefix["lcs_threshold"] < 7
    assert table.loc["cloze_prob", "mode"] == "logit" and np.isnan(table.loc["cloze_prob", "lcs_threshold"])
    assert table.loc["cloze_prob", "precision"] < 1 and table.loc["cloze_prob", "recall"] < 1
    # the same splits: rerunning gives the same numbers, another seed other splits
    again = versus_prefix(pd.DataFrame(rows), {("b", "m"): lcs}, seed=5, n_splits=10).set_index("method")
    pd.testing.assert_frame_equal(table, again)
    few = versus_prefix(pd.DataFrame(rows[:4]), {("b", "m"): lcs}, seed=5)
    assert few["n_splits"].eq(0).all() and few["reason"].str.contains("fewer than 2 documents of a class").all()
    with pytest.raises(InputError, match="'zz' is not in the benchmark's prefix items"):
        lcs_of_items([{**items[0], "item_id": "zz"}], pairs)


def test_on_a_fixed_split_the_lcs_threshold_is_fitted_on_the_validation_passages_and_scored_on_test():
    """BookMIA's split (the passages' split, from the loader's meta.split): the prefix-LCS threshold is a
    logistic regression fitted once on the validation passages (Appendix E), every method is scored on
    the test passages; a document with passages on both sides (a straddling book) counts on each."""
    from sklearn.linear_model import LogisticRegression

    from memaudit.probes.cloze.baseline import PREFIX_METHOD, RANDOM_HALVES, versus_prefix

    val_lcs, val_labels = [9, 7, 6, 3, 8, 2, 4, 1, 0, 5], [1] * 5 + [0] * 5
    test_lcs, test_labels = [8, 2, 6, 5, 1, 7, 3, 0], [1] * 4 + [0] * 4
    test_flags = [True, False, True, False, False, False, True, False]
    # documents: validation v0..v9 and test t0..t7, but t0 belongs to v0's document (the straddling book)
    passages = ([(f"v{i}", f"doc-v{i}", "validation", y, lcs, True) for i, (y, lcs) in
                 enumerate(zip(val_labels, val_lcs))]  # every validation passage flagged: unused, so no effect
                + [(f"t{i}", "doc-v0" if i == 0 else f"doc-t{i}", "test", y, lcs, f) for i, (y, lcs, f) in
                   enumerate(zip(test_labels, test_lcs, test_flags))])
    lcs = pd.DataFrame([{"passage_id": p, "doc_id": d, "label": y, "lcs": float(v)} for p, d, _, y, v, _ in passages]
                       + [{"passage_id": "prefix-only", "doc_id": "dz", "label": 1, "lcs": 50.0}])
    texts = pd.DataFrame([{"benchmark": "bm", "model": "m", "mode": "blackbox", "measure": "prob", "passage_id": p,
                           "doc_id": d, "label": y, "split": split, "memorised": f}
                          for p, d, split, y, _, f in passages])
    table = versus_prefix(texts, {("bm", "m"): lcs}, seed=5).set_index("method")
    assert list(table.index) == [PREFIX_METHOD, "cloze_prob"]
    assert (table["split"] == "test").all() and (table["n_splits"] == 1).all() and table["f_beta_sd"].isna().all()
    assert (table["n_validation"] == 10).all() and (table["n_test"] == 8).all() and (table["reason"] == "").all()
    # the threshold: sklearn's LogisticRegression fitted by hand on the validation passages alone
    by_hand = LogisticRegression().fit(np.array(val_lcs, float).reshape(-1, 1), val_labels)
    prefix = table.loc[PREFIX_METHOD]
    assert prefix["lcs_threshold"] == pytest.approx(-by_hand.intercept_[0] / by_hand.coef_[0, 0], rel=1e-9)
    assert prefix["lcs_threshold"] == pytest.approx(4.5, abs=1e-3)
    # test LCS 8 2 6 5 | 1 7 3 0 against 4.5: flagged t0 t2 t3 (members) and t5 (a non-member)
    assert list(by_hand.predict(np.array(test_lcs, float).reshape(-1, 1))) == [1, 0, 1, 1, 0, 1, 0, 0]
    assert (prefix["precision"], prefix["recall"]) == (0.75, 0.75)
    assert prefix["f_beta"] == pytest.approx(0.75)
    # the cloze flags on test: t0 t2 (members) and t6 (a non-member); the validation passages' flags unused
    cloze = table.loc["cloze_prob"]
    assert (cloze["precision"], cloze["recall"]) == (pytest.approx(2 / 3), 0.5)
    assert cloze["f_beta"] == pytest.approx(1.01 * (2 / 3) * 0.5 / (0.01 * (2 / 3) + 0.5))
    assert np.isnan(cloze["lcs_threshold"])
    # without the split (the demo's benchmarks): the repeated random halves, as before
    halves = versus_prefix(texts.drop(columns="split"), {("bm", "m"): lcs}, seed=5, n_splits=4)
    assert (halves["split"] == RANDOM_HALVES).all() and (halves["n_splits"] == 4).all()
    assert halves["f_beta_sd"].notna().all()
    # a validation side with one class fits nothing: said in the reason, no numbers
    one_class = texts.assign(split=["validation" if p.startswith("v") and y == 1 else
                                    "test" if p.startswith("t") else "neither" for p, y in
                                    zip(texts["passage_id"], texts["label"])])
    empty = versus_prefix(one_class, {("bm", "m"): lcs}, seed=5)
    assert (empty["n_splits"] == 0).all() and empty["precision"].isna().all()
    assert empty["reason"].str.contains("fixed split: 5 validation and 8 test passages scored by both; no "
                                        "non-member among the validation passages").all()


def _ci() -> dict:
    return jobs.validate_config(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))


def test_config_checks_name_the_key():
    config = _ci()
    assert plan.check_config(config) == []
    probed = copy.deepcopy(config)
    probed["probes"]["cloze_logit"]["models"].append("tiny-gpt2-cb")
    assert plan.check_config(probed) == [
        "probes.cloze.reference.model: 'tiny-gpt2-cb' chooses the masked words and cannot also be probed with "
        "them (probes.cloze_<mode>.models)"]
    # the mode's models left to their default (every model that can serve it): the message said to look at a
    # list the user never wrote
    unset = copy.deepcopy(config)
    del unset["probes"]["cloze_logit"]["models"]
    assert plan.check_config(unset) == [
        "probes.cloze.reference.model: 'tiny-gpt2-cb' chooses the masked words and cannot also be probed with "
        "them (probes.cloze_<mode>.models); probes.cloze_logit.models is not set, so it probes every model that "
        "can serve it: list the models to probe"]
    api = copy.deepcopy(config)
    api["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-4o-mini"}}
    api["probes"]["cloze"]["reference"]["model"] = "gpt"
    assert plan.check_config(api)[0].startswith("probes.cloze.reference.model: 'gpt' cannot score words")
    api["probes"]["cloze"]["reference"]["model"] = "tiny-gpt2-cb"
    api["probes"]["cloze"]["filter"] = {"model": "gpt", "mode": "logit"}
    assert plan.check_config(api) == [
        "probes.cloze.filter.mode: logit reads 'gpt''s next-token ranks, which it cannot give (word_logprobs: "
        "local causal models only); use mode generate"]
    # not set: the first local model is the reference; with none, one line about the missing key,
    # not two about an API model the user never named as the reference
    unset = copy.deepcopy(config)
    unset["probes"]["cloze"]["reference"] = {}
    unset["models"] = {"gpt": api["models"]["gpt"]}
    unset["probes"]["cloze_logit"] = {"models": [], "benchmarks": []}
    unset["probes"]["cloze_blackbox"] = {"models": ["gpt"], "benchmarks": ["novels"]}
    assert plan.check_config(unset) == [
        "probes.cloze.reference.model: not set, and every model of the config is an API model, which cannot score "
        "words; add a local causal model that is not under test (e.g. source: {builtin: smollm2-135m-instruct}) "
        "and name it here"]
    first = copy.deepcopy(probed)
    first["probes"]["cloze"]["reference"] = {}
    local = sorted(m for m, e in first["models"].items() if not is_api_model(e))[0]
    first["probes"]["cloze_logit"]["models"].append(local)
    assert (f"probes.cloze.reference.model: not set, so the first local model, {local!r} chooses the masked "
            f"words and cannot also be probed with them (probes.cloze_<mode>.models); name another"
            ) in plan.check_config(first)
    api["probes"]["cloze"]["filter"]["mode"] = "generate"
    assert plan.check_config(api) == []
    # a text is flagged when min_reconstructed of its tokens of a type are, and top_k caps them per type
    capped = copy.deepcopy(config)
    capped["probes"]["cloze"].update(top_k=2, min_reconstructed=3)
    assert plan.check_config(capped) == [
        "probes.cloze.min_reconstructed: 3 reconstructed tokens flag a text, but probes.cloze.top_k keeps at most "
        "2 tokens of a type per text, so no text can be flagged; lower min_reconstructed or raise top_k"]
    capped["probes"]["cloze"].update(top_k=3)
    assert plan.check_config(capped) == []
    bare = copy.deepcopy(config)
    del bare["probes"]["cloze"]
    assert plan.check_config(bare)[0].startswith("probes.cloze: the settings")


def test_ci_config_plans_items_once_and_a_probe_per_model():
    config = _ci()
    assert plan.runs(config) == [("novels", "tiny-gpt2-small", "logit"), ("novels", "tiny-gpt2-small-contaminated", "logit")]
    assert plan.summary_inputs(config) == {"texts": [
        "results/scores/novels/tiny-gpt2-small/cloze_logit_texts.csv",
        "results/scores/novels/tiny-gpt2-small-contaminated/cloze_logit_texts.csv"], "tokens": [
        "results/scores/novels/tiny-gpt2-small/cloze_logit_tokens.csv",
        "results/scores/novels/tiny-gpt2-small-contaminated/cloze_logit_tokens.csv"],
        "models": ["results/models/tiny-gpt2-small", "results/models/tiny-gpt2-small-contaminated"],
        "prefix": [], "pairs": [], "documents": []}
    with_prefix = copy.deepcopy(config)  # the prefix probe on one of the pairs: its LCS baseline beside
    with_prefix["probes"]["prefix"] = {"models": ["tiny-gpt2-small", "smollm2-135m"], "benchmarks": ["novels", "news"]}
    assert plan.prefix_runs(with_prefix) == [("novels", "tiny-gpt2-small")]
    assert {k: v for k, v in plan.summary_inputs(with_prefix).items() if k in ("prefix", "pairs")} == {
        "prefix": ["results/scores/novels/tiny-gpt2-small/prefix_items.jsonl"],
        "pairs": ["results/datasets/novels/prefix_continuation.jsonl"]}
    assert "results/summary/cloze.csv" in plan.outputs(config)
    # labels given per book: the summary reads each passage's book from the benchmark's documents.jsonl
    by_book = copy.deepcopy(config)
    by_book["benchmarks"]["novels"]["split_by"] = "book"
    assert plan.book_benchmarks(by_book) == ["novels"]
    assert plan.summary_inputs(by_book)["documents"] == ["results/datasets/novels/documents.jsonl"]


def test_size_figure_names_each_point_a_base_and_its_fine_tune_share(tmp_path, monkeypatch):
    """A base and its fine-tune have one size: unnamed, their member points were two dots of one colour at
    one x, the fine-tune's rise (what the figure is for) unreadable."""
    from memaudit.figures import plots
    from memaudit.probes.cloze.summary import size_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [{"benchmark": "b", "mode": "logit", "measure": "rank", "label": label, "model": model, "n_params": n,
             "rate": rate, "rate_low": rate - 0.05, "rate_high": rate + 0.05}
            for model, n, member, nonmember in (("tiny", 1e8, 0.2, 0.2), ("tiny-ft", 1e8, 0.6, 0.21),
                                                ("big", 1e9, 0.3, 0.3))
            for label, rate in ((1, member), (0, nonmember))]
    size_figure(pd.DataFrame(rows), tmp_path / "size.png")
    ax = drawn[0].axes[0]
    names = [(t.get_text(), tuple(t.xy)) for t in ax.texts]
    assert names == [("tiny", (1e8, 0.2)), ("tiny-ft", (1e8, 0.6)), ("big", (1e9, 0.3)),
                     ("tiny", (1e8, 0.2)), ("tiny-ft", (1e8, 0.21)), ("big", (1e9, 0.3))]
    # names at one place (tiny's members and non-members at 0.2, tiny-ft's non-members at 0.21) are stacked 7 points
    # apart, not overprinted; the others at the usual offset
    offsets = [(t.get_text(), t.xyann) for t in ax.texts]
    assert offsets == [("tiny", (4, 2)), ("tiny-ft", (4, 2)), ("big", (4, 2)),
                       ("tiny", (4, 9)), ("tiny-ft", (4, 16)), ("big", (4, 9))]
    assert ax.get_ylabel() == "share of masked words reconstructed"
    assert ax.get_ylim() == (-0.02, 1.02)  # a share's whole range: a panel of zeros read as blank


def test_size_figure_marks_and_names_a_model_with_no_rate(tmp_path, monkeypatch):
    """A model with no masked word of the type has no rate (NaN): a hollow 'n/a' marker at the bottom of the
    panel with the model's name beside it and a legend entry, where the point was skipped and its name
    annotated at a NaN height, drawn nowhere."""
    from memaudit.figures import plots
    from memaudit.probes.cloze.summary import size_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    nan = float("nan")
    rows = [{"benchmark": "b", "mode": "logit", "measure": "person", "label": label, "model": model, "n_params": n,
             "rate": rate, "rate_low": rate - 0.05, "rate_high": rate + 0.05}
            for model, n, member, nonmember in (("tiny", 1e8, 0.2, 0.2), ("big", 1e9, 0.3, nan))
            for label, rate in ((1, member), (0, nonmember))]
    size_figure(pd.DataFrame(rows), tmp_path / "size.png")
    ax = drawn[0].axes[0]
    hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in hollow] == [([1e9], [plots.MISSING_Y])]
    assert hollow[0].get_markerfacecolor() == "none" and hollow[0].get_transform() == ax.get_xaxis_transform()
    assert [t.xy[0] for t in ax.texts if t.get_text() == "n/a"] == [1e9]
    # every model is named at a finite place: the one without a rate at the bottom edge, beside its marker
    names = [(t.get_text(), tuple(t.xy)) for t in ax.texts if t.get_text() != "n/a"]
    assert names == [("tiny", (1e8, 0.2)), ("big", (1e9, 0.3)), ("tiny", (1e8, 0.2)), ("big", (1e9, plots.MISSING_Y))]
    big = next(t for t in ax.texts if t.get_text() == "big" and t.xy[1] == plots.MISSING_Y)
    assert big.xycoords == ax.get_xaxis_transform()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "members", "non-members", "n/a (hollow, at the bottom): no masked word of this type"]


def test_reconstruction_figure_marks_a_rate_with_no_masked_word(tmp_path, monkeypatch):
    """A (model, group) with no masked word of the type has no reconstruction rate (NaN): a hollow 'n/a'
    marker at its bar's place and a legend entry, where the bar was left out without a mark."""
    from memaudit.figures import plots
    from memaudit.probes.cloze.summary import reconstruction_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    table = pd.DataFrame({"benchmark": "b", "mode": "logit", "method": "cloze_rank", "model": ["m1", "m2"],
                          "rate_member": [0.5, float("nan")], "rate_nonmember": [0.25, 0.1]})
    reconstruction_figure(table, tmp_path / "reconstruction.png")
    ax = drawn[0].axes[0]
    hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in hollow] == [([0.8], [plots.MISSING_Y])]
    assert hollow[0].get_markerfacecolor() == "none" and hollow[0].get_transform() == ax.get_xaxis_transform()
    assert [t.xy[0] for t in ax.texts if t.get_text() == "n/a"] == [0.8]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "members", "non-members", "n/a (hollow, at the bottom): no masked word of this type"]
    assert ax.get_ylim() == (-0.02, 1.02)


def test_a_model_that_answered_no_word_is_no_measurement_in_the_cloze_tables_and_headline(tmp_path):
    """A black-box model whose every reply was invalid or refused: cloze.csv gave it precision, recall, F-beta
    and reconstruction rates of 0, the differences a paired difference (0, or its control's rate) whose
    non-member check held, Figure 3 a rate of 0 [0, 0], cloze_vs_prefix an F-beta of 0 beside the baseline's.
    None was measured: each is blank (NaN), cloze.csv counts the words answered (n_answered 0), the
    differences name who answered none (unanswered) and the headline counts such a check as not evaluated."""
    from memaudit.io import write_jsonl
    from memaudit.probes.cloze.baseline import PREFIX_METHOD
    from memaudit.probes.cloze.headline import HEADER, against_control, expectations, replies
    from memaudit.stats.headline import section

    labels = [1, 1, 1, 1, 0, 0, 0, 0]

    def silent(model):  # 4 words a passage: 3 replies without tags, 1 refusal
        return _texts(model, [0] * 8, labels).assign(mode="blackbox", n_invalid=3, n_refusal=1)

    texts = pd.concat([_texts("hot", [3, 4, 2, 1, 0, 1, 0, 0], labels).assign(mode="blackbox"), silent("base"),
                       silent("api"), _texts("orig", [1, 0, 1, 0, 0, 1, 0, 0], labels).assign(mode="blackbox")],
                      ignore_index=True)
    paths = []
    for model, block in texts.groupby("model"):
        paths.append(str(tmp_path / f"{model}_texts.csv"))
        block.to_csv(paths[-1], index=False)
    tokens = [{"benchmark": "b", "model": model, "mode": "blackbox", "passage_id": f"p{i}", "doc_id": f"d{i}",
               "label": label, "measure": "prob", "word": "w", "start": k, "guess": None, "rank": None,
               "status": "ok" if model == "hot" else "invalid", "reconstructed": model == "hot" and k < rec}
              for model, recs in (("hot", [3, 4, 2, 1, 0, 1, 0, 0]), ("base", [0] * 8))
              for i, (label, rec) in enumerate(zip(labels, recs)) for k in range(4)]
    pd.DataFrame(tokens).to_csv(tmp_path / "tokens.csv", index=False)
    dirs = []
    for model, base in (("hot", "base"), ("base", None)):
        (tmp_path / model).mkdir()
        (tmp_path / model / "manifest.json").write_text(json.dumps(
            {"name": model, "family": "f", "n_params": 1e6, "base": base, "contaminated_on": []}))
        dirs.append(str(tmp_path / model))
    # the prefix probe on the API model too: its LCS baseline beside the cloze probe
    write_jsonl(tmp_path / "pairs.jsonl", [{"item_id": f"p{i}", "continuation": "one two three"} for i in range(8)])
    write_jsonl(tmp_path / "prefix.jsonl", [{"item_id": f"p{i}", "passage_id": f"p{i}", "doc_id": f"d{i}",
                                             "label": label, "status": "ok",
                                             "generation": "one two three" if label else "four"}
                                            for i, label in enumerate(labels)])
    out = {k: tmp_path / f"{k}.csv" for k in ("table", "diff", "versus", "overlap", "size")}
    summary.build_summary(paths, {"hot": "base", "api": "orig"}, declared=["api"], seed=3,
                          members_of={"hot": ["b"]}, out_table=out["table"], out_differences=out["diff"],
                          out_figure=tmp_path / "fig.png", out_versus=out["versus"], out_overlap=out["overlap"],
                          prefix=[("b", "api", str(tmp_path / "prefix.jsonl"), str(tmp_path / "pairs.jsonl"))],
                          token_paths=[str(tmp_path / "tokens.csv")], model_dirs=dirs, out_by_size=out["size"],
                          out_size_figure=tmp_path / "size.png")
    table = pd.read_csv(out["table"]).set_index(["model", "method"])
    measured = ["precision", "recall", "fbeta", "rate_member", "rate_nonmember"]
    for model in ("api", "base"):
        row = table.loc[(model, "cloze_prob")]
        assert (row["n_tokens"], row["n_answered"], row["n_invalid"], row["n_refusal"]) == (32, 0, 24, 8)
        assert row[measured].isna().all() and row["n_flagged"] == 0
    hot = table.loc[("hot", "cloze_prob")]
    assert hot["n_answered"] == 32 and hot[measured].notna().all() and hot["rate_nonmember"] == 1 / 16
    assert table.loc[("api", "majority"), "precision"] == 0.5  # the reference rows need no answer
    shown = replies(pd.read_csv(out["table"])).set_index("model")
    assert shown.loc["api", ["answered", "refused", "invalid"]].tolist() == [0, 8, 24]
    assert np.isnan(shown.loc["api", "fbeta"])

    diff = pd.read_csv(out["diff"])
    for model, who in (("hot", "base"), ("api", "api")):
        mine = diff[diff["model"] == model]
        assert mine["group"].tolist() == ["nonmember", "member", "member_minus_nonmember"]
        assert mine["unanswered"].tolist() == [who] * 3 and mine["n_texts"].tolist() == [4, 4, 8]
        assert mine[["difference", "ci_low", "ci_high", "interval_holds_0"]].isna().all().all()
    assert diff.loc[diff["model"] == "hot", "rate_model"].tolist()[:2] == [1 / 16, 10 / 16]
    assert diff.loc[diff["model"] == "hot", "rate_base"].isna().all()
    checks = expectations(diff)
    assert checks["expected"].tolist() == [
        "not evaluated: base answered no masked word of the type (every reply invalid, refused or failed)"] * 3
    assert checks["ok"].tolist() == [False] * 3
    block = section(HEADER, checks)
    assert (block.checked, block.held, block.unevaluated) == (3, 0, 3)
    assert against_control(diff)["interval"].tolist() == ["not measured: api answered no masked word"] * 3

    versus = pd.read_csv(out["versus"]).set_index("method")
    assert versus.loc["cloze_prob", ["precision", "recall", "f_beta", "f_beta_sd"]].isna().all()
    assert versus.loc["cloze_prob", "reason"] == "api answered no masked word of the type"
    assert versus.loc[PREFIX_METHOD, "f_beta"] == 1.0
    size = pd.read_csv(out["size"]).set_index(["model", "label"])
    assert size.loc[("base", 1), "n_candidates"] == 16 and size.loc[("base", 1), ["rate", "rate_low",
                                                                                 "rate_high"]].isna().all()
    assert size.loc[("hot", 1), "rate"] == 10 / 16


def test_the_figures_say_a_model_answered_no_word_rather_than_had_none(tmp_path, monkeypatch):
    """A model whose words of the type got no answer has no rate (above): its hollow 'n/a' markers say so, not
    'no masked word of this type', which a model with words to answer did have."""
    from memaudit.figures import plots
    from memaudit.probes.cloze.summary import reconstruction_figure, size_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    nan = float("nan")
    table = pd.DataFrame({"benchmark": "b", "mode": "blackbox", "method": "cloze_rank", "model": ["m1", "api", "m3"],
                          "n_tokens": [8, 8, 4], "n_answered": [8, 0, 4], "rate_member": [0.5, nan, nan],
                          "rate_nonmember": [0.25, nan, 0.0]})
    reconstruction_figure(table, tmp_path / "reconstruction.png")
    assert [t.get_text() for t in drawn[-1].axes[0].get_legend().get_texts()] == [
        "members", "non-members", "n/a (hollow, at the bottom): no masked word of this type answered",
        "n/a (hollow, at the bottom): no masked word of this type"]
    rows = [{"benchmark": "b", "mode": "blackbox", "measure": "rank", "label": label, "model": model,
             "n_params": n, "n_candidates": 8, "rate": rate, "rate_low": rate, "rate_high": rate}
            for model, n, rate in (("tiny", 1e8, 0.2), ("quiet", 1e9, nan)) for label in (1, 0)]
    size_figure(pd.DataFrame(rows), tmp_path / "size.png")
    assert [t.get_text() for t in drawn[-1].axes[0].get_legend().get_texts()] == [
        "members", "non-members", "n/a (hollow, at the bottom): no masked word of this type answered"]


def test_a_contaminated_model_whose_base_has_no_rows_is_not_evaluated_not_dropped():
    """A fine-tuned model whose base the cloze probes did not score (the probe's ``models`` list left it
    out): its differences had no row at all, so its ground-truth checks vanished from the headline and
    the tally read as if every check held. Each group now has a row with no paired text (``n_texts`` 0,
    no difference), and the headline counts it as not evaluated."""
    from memaudit.probes.cloze.headline import HEADER, expectations
    from memaudit.stats.headline import section, tally

    hot = _texts("hot", [3, 4, 2, 1, 0, 2, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0])
    diff = summary.differences_table(hot, {"hot": "base"}, seed=3, members_of={"hot": ["b"]})
    assert diff["group"].tolist() == ["nonmember", "member", "member_minus_nonmember"]
    assert (diff["n_texts"] == 0).all() and diff["difference"].isna().all() and (diff["base"] == "base").all()
    assert diff["rate_model"].tolist()[:2] == [2 / 16, 10 / 16] and diff["rate_base"].isna().all()
    checks = expectations(diff)
    assert checks["expected"].tolist() == ["not evaluated: no text of base to pair"] * 3
    assert checks["ok"].tolist() == [False] * 3
    block = section(HEADER, checks)
    assert (block.checked, block.held, block.unevaluated) == (3, 0, 3)
    assert tally([block]) == ("Ground-truth checks: 0 of 3 hold; not evaluated (no row to check in its table): "
                              "3 in Cloze probes ground truth")


def test_a_document_with_no_word_of_a_type_scores_0_and_the_log_counts_it():
    """A document with no person name among its candidates reconstructs none and its MRR is 0 (the paper counts
    a text with no reconstructed word as not memorised): kept, as documented, and counted in the probe's log
    so a type the groups hold unequally is read with that count beside its AUC."""
    from memaudit.probes.cloze.runner import document_table, type_summary

    def row(doc, label, n_tokens, n_reconstructed, mrr):
        return dict(passage_id=f"{doc}#0", doc_id=doc, label=label, measure="person", n_tokens=n_tokens,
                    n_reconstructed=n_reconstructed, n_invalid=0, n_refusal=0, n_error=0, mrr=mrr,
                    memorised=n_reconstructed >= 2)

    texts = pd.DataFrame([row("m1", 1, 3, 2, 0.4), row("m2", 1, 0, 0, np.nan), row("n1", 0, 3, 0, 0.05)])
    scores = document_table(texts, "logit")
    assert {(r.method, r.doc_id): r.score for r in scores.itertuples()} == {
        ("cloze_person", "m1"): 2.0, ("cloze_person", "m2"): 0.0, ("cloze_person", "n1"): 0.0,
        ("cloze_person_mrr", "m1"): 0.4, ("cloze_person_mrr", "m2"): 0.0, ("cloze_person_mrr", "n1"): 0.05}
    assert type_summary(texts, "person", "logit") == [
        "person: 2 of 6 words reconstructed; 1 of 3 passages memorised; 1 document(s) had no word of the type: "
        "scored 0 (no reconstruction, MRR 0), as the paper counts a text with none"]
    assert type_summary(texts[texts["doc_id"] != "m2"], "person", "blackbox") == [
        "person: 2 of 6 words reconstructed; 1 of 2 passages memorised"]
    # words past the model's max_tokens, read in a sliding window: counted (they looked read in full context)
    assert type_summary(texts[texts["doc_id"] != "m2"], "person", "logit", truncated=2) == [
        "person: 2 of 6 words reconstructed; 1 of 2 passages memorised; 2 word(s) read with their left context cut "
        "at the model's max_tokens (a sliding window; tokens table: truncated)"]


def test_a_word_past_max_tokens_is_marked_truncated_in_the_token_table(tiny_model, tiny_model_dir):
    """A long passage's late word is read in a sliding window (part of its left context): the backend said so
    and the cloze logit probe dropped it, its rank read as if in full context."""
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.cloze.runner import logit_answers, token_table

    model, tok = tiny_model
    backend = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok, max_tokens=20)
    text = "the cat sat on the mat " * 8 + "and the dog"
    words = [("cat", text.index("cat")), ("dog", text.rindex("dog"))]
    items = [{"passage_id": "p#0", "doc_id": "p", "label": 1, "text": text,
              "tokens": [{"measure": "prob", "word": w, "start": s, "end": s + len(w), "context": "x"}
                         for w, s in words]}]
    tokens = [(0, t) for t in items[0]["tokens"]]
    table = token_table(items, tokens, logit_answers(backend, items, tokens))
    assert table["truncated"].tolist() == [False, True]


def test_a_documents_score_is_words_reconstructed_per_passage_not_their_sum():
    """A member document of four passages reconstructing 1 word in each and a non-member of one passage
    reconstructing 2: summed, 4 against 2 (the longer document ahead by its length); per passage, 1 against 2.
    The MRR was a mean already."""
    from memaudit.probes.cloze.runner import document_table

    def row(doc, label, p, n_reconstructed, mrr):
        return dict(passage_id=f"{doc}#{p}", doc_id=doc, label=label, measure="prob", n_tokens=3,
                    n_reconstructed=n_reconstructed, n_invalid=0, n_refusal=0, n_error=0, mrr=mrr,
                    memorised=n_reconstructed >= 2)

    texts = pd.DataFrame([*(row("long", 1, p, 1, 0.2 * (p + 1)) for p in range(4)), row("short", 0, 0, 2, 0.6)])
    scores = document_table(texts, "logit").set_index(["method", "doc_id"])["score"].to_dict()
    assert scores == {("cloze_prob", "long"): 1.0, ("cloze_prob", "short"): 2.0,
                      ("cloze_prob_mrr", "long"): pytest.approx(0.5), ("cloze_prob_mrr", "short"): 0.6}
