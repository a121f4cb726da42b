"""Near-duplicate documents stay on one side of a member/non-member split (memaudit.datasets.near_duplicates)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memaudit.config import validate_config
from memaudit.datasets.build import build_benchmark
from memaudit.datasets.near_duplicates import keep_together, near_duplicate_groups
from memaudit.datasets.qa import load_qa_jsonl
from memaudit.errors import ConfigError, InputError

ASSETS = Path(__file__).resolve().parents[1] / "resources" / "demo"
RUN_A = "the oil ministers of the gulf states agreed on a new quota for the second quarter"  # 16 words
RUN_B = "shares of the company rose sharply after the board accepted the offer from its rival today"


def _grams(text: str, n: int = 13) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def test_units_sharing_a_run_are_grouped_transitively_and_only_from_n_words():
    texts = {
        "a": [f"Intro one. {RUN_A.upper()}, then more."],  # case and punctuation do not matter
        "b": [f"Other words. {RUN_A}", f"and {RUN_B}"],      # shares RUN_A with a, RUN_B with c
        "c": [RUN_B],
        "d": [" ".join(RUN_A.split()[:12]) + " unrelated ending here"],  # only 12 words of RUN_A
        "e": ["nothing shared at all"],
    }
    groups = near_duplicate_groups(texts, 13)
    assert groups == {"a": ("a", "b", "c"), "b": ("a", "b", "c"), "c": ("a", "b", "c")}
    assert near_duplicate_groups(texts, 12)["d"] == ("a", "b", "c", "d")
    with pytest.raises(InputError, match="near_duplicate_ngram must be a positive integer, got 0"):
        near_duplicate_groups(texts, 0)


def test_a_group_goes_to_the_side_of_its_first_unit_and_no_group_changes_nothing():
    groups = {"b": ("b", "d"), "d": ("b", "d"), "e": ("e", "f"), "f": ("e", "f")}
    # b is a member: d joins it; e is a non-member: f leaves the members
    assert keep_together({"a", "b", "f"}, groups) == {"a", "b", "d"}
    assert keep_together({"a", "c"}, {}) == {"a", "c"}


NEWS = {"sources": ["reuters"], "n_documents": None, "member_fraction": 0.5, "passage_words": 100,
        "passages_per_document": 2, "min_passages": 1, "source_options": {}}


def _labels_and_leaks(docs) -> tuple[dict[str, int], list[str]]:
    members = set().union(*(_grams(d.text) for d in docs if d.meta["label"] == 1))
    return ({d.doc_id: d.meta["label"] for d in docs},
            sorted(d.doc_id for d in docs if d.meta["label"] == 0 and _grams(d.text) & members))


def test_the_demo_news_split_has_no_non_member_repeating_a_member():
    # Reuters-21578 repeats stories: split without the check, the demo's news put two articles
    # that share a 13-word run on opposite sides (the fine-tuned model had seen both "non-members").
    plain, plain_passages = build_benchmark("news", dict(NEWS, near_duplicate_ngram=None), ASSETS, seed=13)
    plain_labels, plain_leaks = _labels_and_leaks(plain)
    assert plain_leaks == ["reuters/crude/248", "reuters/crude/502"]
    docs, passages = build_benchmark("news", NEWS, ASSETS, seed=13)
    labels, leaks = _labels_and_leaks(docs)
    assert leaks == []
    grouped = {d.doc_id: d.meta["near_duplicates"] for d in docs if "near_duplicates" in d.meta}
    assert grouped["reuters/crude/502"] == ["reuters/crude/489"]
    assert grouped["reuters/crude/489"] == ["reuters/crude/502"]
    for doc_id, others in grouped.items():  # each group on one side
        assert {labels[o] for o in others} == {labels[doc_id]}
    # only grouped documents moved, and the passages follow their documents
    moved = sorted(k for k in labels if labels[k] != plain_labels[k])
    assert moved == ["reuters/crude/352", "reuters/crude/502"] and set(moved) <= set(grouped)
    assert {p.doc_id: p.label for p in passages} == {d: labels[d] for d in {p.doc_id for p in passages}}
    assert len(passages) == len(plain_passages)


def test_a_split_that_keeps_every_unit_in_one_group_names_the_option():
    texts = [f"Story {i}. {RUN_A}. Part {i}." for i in range(4)]
    with pytest.raises(InputError, match=r"benchmark 'dup': no (members|non-members) are left once units sharing "
                                         r"a 13-word run are kept on one side of the split "
                                         r"\(near_duplicate_ngram: 13\)"):
        _build_from_texts("dup", texts)


def _build_from_texts(name: str, texts: list[str]):
    from unittest import mock

    from memaudit.datasets.types import Document

    docs = [Document(f"user/{i}", "user_books", f"t{i}", "a", "book", t, {}) for i, t in enumerate(texts)]
    with mock.patch("memaudit.datasets.build.load_documents", return_value=docs):
        return build_benchmark(name, dict(NEWS, sources=["user_books"], passage_words=40, passages_per_document=1), ASSETS, seed=0)


def test_two_demo_qa_questions_on_one_sentence_land_in_one_half_whichever_words_they_blank():
    """Two articles repeat a 21-word sentence; their questions blank its 2nd and its 15th word, so every
    13-word run of either question holds a blank and none is shared, while the member question shows the
    non-member's answer in place. The answered sentence is what the near-duplicate test compares."""
    from unittest import mock

    from memaudit.datasets.qa import BLANK, render_qa
    from memaudit.datasets.types import Document

    sentence = ("Saudi Arabia told the other members of the cartel on Monday that it would cut output by "
                "300,000 barrels a day").split()

    def question(article: str, words: list[str], blank: int, others: list[str]) -> Document:
        asked = " ".join([*words[:blank], BLANK, *words[blank + 1:]])
        return Document(f"demo_qa/{article}/s000", "demo_qa", "t", "a", "qa",
                        render_qa(asked, [words[blank], *others], words[blank]),
                        {"question": asked, "choices": [words[blank], *others], "answer": words[blank],
                         "answer_index": 0, "book": article})

    docs = [question("reuters/crude/1", sentence, 1, ["Kuwait", "Iran", "Iraq"]),
            question("reuters/crude/2", sentence, 14, ["200,000", "100,000", "50"])]
    docs += [question(f"reuters/acq/{i}", [f"w{i}x{j}" for j in range(20)], 3, ["a", "b", "c"]) for i in range(3, 11)]
    cfg = {"sources": ["demo_qa"], "split_by": "book", "member_fraction": 0.5, "passage_words": 100,
           "passages_per_document": 1, "min_passages": 1}
    with mock.patch("memaudit.datasets.build.load_documents", return_value=docs):
        plain = {d.doc_id: d.meta["label"] for d in build_benchmark("qa", dict(cfg, near_duplicate_ngram=None),
                                                                     ASSETS, seed=1)[0]}
        built = {d.doc_id: d for d in build_benchmark("qa", cfg, ASSETS, seed=1)[0]}
    one, two = "demo_qa/reuters/crude/1/s000", "demo_qa/reuters/crude/2/s000"
    assert (plain[one], plain[two]) == (1, 0)  # seed 1 splits the pair without the check
    assert built[one].meta["label"] == built[two].meta["label"] == 1  # crude/1 sorts first: crude/2 follows it
    assert built[one].meta["near_duplicates"] == ["demo_qa/reuters/crude/2"]
    assert built[two].meta["near_duplicates"] == ["demo_qa/reuters/crude/1"]
    assert {k for k, d in built.items() if d.meta["label"] != plain[k]} == {two}


def test_published_qa_questions_sharing_a_run_land_in_one_half(tmp_path):
    lines = [{"id": f"q{i}", "question": f"Question {i}: what follows in {RUN_A if i in (1, 6) else 'text'}?",
              "choices": ["x", "y"], "answer": "x"} for i in range(10)]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    plain = {d.doc_id: d.meta["label"] for d in load_qa_jsonl(path, seed=13, near_duplicate_ngram=None)[0]}
    docs = load_qa_jsonl(path, seed=13)[0]
    labels = {d.doc_id: d.meta["label"] for d in docs}
    assert plain["qa/q1"] != plain["qa/q6"]  # seed 13 splits the pair without the check
    assert labels["qa/q1"] == labels["qa/q6"] == plain["qa/q1"]  # q1 sorts first: q6 follows it
    assert {k for k in labels if labels[k] != plain[k]} == {"qa/q6"}
    meta = {d.doc_id: d.meta.get("near_duplicates") for d in docs}
    assert meta["qa/q1"] == ["qa/q6"] and meta["qa/q6"] == ["qa/q1"] and meta["qa/q2"] is None


def test_texts_shorter_than_n_words_are_grouped_with_the_same_words_only():
    """A text of fewer than n words has no n-word run, so the same short text under two ids was in no group."""
    texts = {"a": ["Who wrote Emma?"], "b": ["who wrote 'Emma'"], "c": ["Who wrote Persuasion?"],
             "d": [f"{RUN_A}: who wrote Emma"], "e": [""]}
    assert near_duplicate_groups(texts, 13) == {"a": ("a", "b"), "b": ("a", "b")}
    assert near_duplicate_groups(texts, 3) == {u: ("a", "b", "d") for u in "abd"}


def test_a_short_question_asked_again_with_other_punctuation_lands_in_one_half(tmp_path):
    """Short-answer questions render to a few words: with seed 1, "Who wrote Emma?" was a member and "Who wrote
    'Emma'?" (the same words, other punctuation, not the same text) a non-member the model had been trained on."""
    questions = [("Who wrote Emma?", "Jane Austen"), ("Which river flows through Paris?", "the Seine"),
                 ("What is the capital of Peru?", "Lima"), ("How many legs has a spider?", "eight"),
                 ("Who painted the Mona Lisa?", "Leonardo"), ("Who wrote 'Emma'?", "Jane Austen"),
                 ("What gas do plants absorb?", "carbon dioxide"), ("Which planet is largest?", "Jupiter")]
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": a}) + "\n"
                            for i, (q, a) in enumerate(questions)))
    plain = {d.doc_id: d.meta["label"] for d in load_qa_jsonl(path, seed=1, near_duplicate_ngram=None)[0]}
    assert (plain["qa/q0"], plain["qa/q5"]) == (1, 0)
    docs = {d.doc_id: d for d in load_qa_jsonl(path, seed=1)[0]}
    assert docs["qa/q5"].text == "Who wrote 'Emma'?\nAnswer: Jane Austen"
    assert docs["qa/q0"].meta["label"] == docs["qa/q5"].meta["label"] == 1
    assert docs["qa/q0"].meta["near_duplicates"] == ["qa/q5"] and docs["qa/q5"].meta["near_duplicates"] == ["qa/q0"]


def test_the_config_takes_the_option_per_benchmark_and_for_published_qa_only():
    models = {"m": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}}
    assert validate_config({"benchmarks": {"news": {"sources": ["reuters"], "near_duplicate_ngram": None}},
                            "models": models})
    assert validate_config({"benchmarks": {"b": {"published": {"format": "qa", "path": "q.jsonl",
                                                               "near_duplicate_ngram": 20}}}, "models": models})
    with pytest.raises(ConfigError, match=r"benchmarks\.b\.published\.near_duplicate_ngram: only format qa"):
        validate_config({"benchmarks": {"b": {"published": {"format": "nyt", "path": "x",
                                                            "near_duplicate_ngram": 13}}}, "models": models})
    with pytest.raises(ConfigError, match=r"benchmarks\.news\.near_duplicate_ngram"):
        validate_config({"benchmarks": {"news": {"sources": ["reuters"], "near_duplicate_ngram": 3}},
                         "models": models})
