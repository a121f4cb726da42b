"""Loaders for CopyBench's published files under the published-data policy.

The excerpts are invented text written the way the published files are: ``json.dumps(records,
indent=2)`` (ASCII escapes, no trailing newline) for the data files and the literal/QA prompt
files, ``indent=4`` for the non-literal prompt files. Line numbers are those of the written text.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from memaudit.datasets.copybench_published import (
    DATA_FILES, PROMPT_FILES, LiteralItem, Rejected, load_literal, load_nonliteral, load_prompt_file, load_qa,
    reference_demo_indices, write_rejects,
)
from memaudit.errors import InputError


def _write(tmp_path: Path, name: str, records, indent: int = 2) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records, indent=indent).replace("<NUL>", "\x00"), encoding="utf-8")
    return path


def _rejects(rejects: list[Rejected]) -> list[tuple[int, str, str]]:
    return [(r.line, r.key, r.reason) for r in rejects]


def test_excerpts_are_written_like_the_published_files():
    # The first bytes of data.literal.json, with invented values: two-space indent, \u escapes.
    text = json.dumps([{"id": "bookmia.00.1", "title": "Caf\u00e9", "input": "a \u201cb\u201d", "reference": "c"}],
                      indent=2)
    assert text == ('[\n  {\n    "id": "bookmia.00.1",\n    "title": "Caf\\u00e9",\n'
                    '    "input": "a \\u201cb\\u201d",\n    "reference": "c"\n  }\n]')


def _literal(i, **fields):
    return {"id": f"bookmia.07.{i}", "title": "Stormy Harbour", "input": f"The tide came in at dusk {i}.",
            "reference": f"and the boats were gone {i}.", **fields}


def _literal_file(tmp_path):
    rows = [
        _literal(0, title="Caf\u00e9 Noir"),                         # lines 2-7
        _literal(1),                                                   # 8-13
        {k: v for k, v in _literal(2).items() if k != "reference"},   # 14-18
        _literal(3, input=42),                                         # 19-24
        _literal(4, input="  \n\t "),                                 # 25-30
        _literal(5, reference="x" * 100 + "\x00"),                    # 31-36, escaped as \u0000
        _literal(1, title="Another"),                                  # 37-42
        "stray string",                                                # 43
        {**_literal(8), "source": "fiction"},                          # 44-50
        _literal(9, input="Dark water<NUL> rises."),                   # 51-56, a raw NUL byte
        _literal(10, title=""),                                        # 57-62
        {**_literal(11), "id": 11},                                    # 63-68
    ]
    return _write(tmp_path, "data.literal.json", rows)


def test_literal_rows_it_cannot_use_are_rejected_with_their_start_line(tmp_path):
    path = _literal_file(tmp_path)
    assert "\x00" in path.read_text(encoding="utf-8") and "\\u0000" in path.read_text(encoding="utf-8")
    items, rejects = load_literal(path)
    assert [it.item_id for it in items] == ["bookmia.07.0", "bookmia.07.1", "bookmia.07.8"]
    assert items[0] == LiteralItem("bookmia.07.0", "Caf\u00e9 Noir", "The tide came in at dusk 0.",
                                   "and the boats were gone 0.", None, {"index": 0, "line": 2})
    assert items[2].meta == {"index": 8, "line": 44, "source": "fiction"} and items[2].label is None
    assert _rejects(rejects) == [
        (14, "reference", "missing key"),
        (19, "input", "expected a string, got a number"),
        (25, "input", "empty or whitespace-only text"),
        (31, "reference", "contains a NUL character at position 100"),
        (37, "id", "duplicate id, first on line 8"),
        (43, "(record)", "expected an object, got a string"),
        (51, "input", "contains a NUL character at position 10"),
        (57, "title", "empty or whitespace-only text"),
        (63, "id", "expected a string, got a number"),
    ]
    assert [r.value for r in rejects[:3]] == ["", "42", "'  \\n\\t '"]
    assert rejects[3].value == "'" + "x" * 56 + "..." and len(rejects[3].value) == 60
    assert rejects[4].value == "'bookmia.07.1'" and rejects[0].file == str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert all(lines[r.line - 1].strip().startswith(("{", '"')) for r in rejects)


def test_strict_mode_turns_the_first_reject_into_a_one_line_input_error(tmp_path):
    path = _literal_file(tmp_path)
    with pytest.raises(InputError) as err:
        load_literal(path, strict=True)
    assert str(err.value) == f"{path}, line 14, key reference: missing key"
    good = _write(tmp_path, "good.json", [_literal(0), _literal(1)])
    assert [it.item_id for it in load_literal(good, strict=True)[0]] == ["bookmia.07.0", "bookmia.07.1"]


def _story(i, **fields):
    return {"id": f"stories.0001.{i}", "title": "Stormy Harbour",
            "reference_events": ["Ana leaves home.", "Ana returns."],
            "reference_characters": [["Ana", "Ana Ruiz"], ["Bo"]], "input": "Ana finds a map.", **fields}


def test_nonliteral_rows_it_cannot_use_are_rejected_with_their_start_line(tmp_path):
    rows = [
        _story(0, title="Caf\u00e9 Noir"),                                          # lines 2-19
        _story(1, reference_characters=[]),                                          # 20-29
        _story(2, reference_events=[]),                                              # 30-44
        _story(3, reference_events=["Ana leaves home.", " \t"]),                    # 45-62
        _story(4, reference_characters=[["Ana"], []]),                              # 63-77
        _story(5, reference_characters=[["Jo", "Jo March"], ["Jo"]]),               # 78-95
        _story(6, reference_characters=[["Amy March"], ["amy  MARCH"]]),            # 96-112
        _story(7, reference_characters=[["Meg", "Meg"]]),                           # 113-127
        _story(8, reference_characters=["Ana"]),                                    # 128-139
        {k: v for k, v in _story(9).items() if k != "input"},                       # 140-156
        _story(10, reference_characters=[["Ana"], None]),                           # 157-171
        _story(11, reference_characters=[["Ana", "Ana Ruiz"], ["jo march"], ["Jo-March"]]),  # 172-192
        _story(12, reference_characters=[["Ana", "\u2014"]]),                      # 193-207
    ]
    path = _write(tmp_path, "data.nonliteral.json", rows)
    items, rejects = load_nonliteral(path)
    # A shared alias keeps its record (the published file has 34 such: see _characters), noted.
    assert [(it.item_id, it.meta["line"]) for it in items] == [
        ("stories.0001.0", 2), ("stories.0001.1", 20), ("stories.0001.5", 78), ("stories.0001.6", 96),
        ("stories.0001.7", 113), ("stories.0001.11", 172)]
    first = items[0]
    assert (first.title, first.beginning) == ("Caf\u00e9 Noir", "Ana finds a map.")
    assert first.reference_events == ["Ana leaves home.", "Ana returns."]
    assert first.reference_characters == [["Ana", "Ana Ruiz"], ["Bo"]]
    assert items[1].reference_characters == [] and items[4].reference_characters == [["Meg", "Meg"]]
    assert items[2].reference_characters == [["Jo", "Jo March"], ["Jo"]]
    kept = " also belongs to reference_characters[{}]: kept as published (the reference scorer counts it for both characters)"
    assert [(r.line, r.key, r.reason, r.action) for r in rejects] == [
        (30, "reference_events", "empty events list", "rejected"),
        (45, "reference_events[1]", "empty or whitespace-only text", "rejected"),
        (63, "reference_characters[1]", "character with no aliases", "rejected"),
        (78, "reference_characters[1]", "alias 'Jo'" + kept.format(0), "kept"),
        (96, "reference_characters[1]", "alias 'amy  MARCH'" + kept.format(0), "kept"),
        (128, "reference_characters[0]", "expected an array, got a string", "rejected"),
        (140, "input", "missing key", "rejected"),
        (157, "reference_characters[1]", "expected an array, got null", "rejected"),
        (172, "reference_characters[2]", "alias 'Jo-March'" + kept.format(1), "kept"),
        (193, "reference_characters[0]", "alias '\u2014' has no word characters", "rejected"),
    ]
    assert [r.value for r in rejects] == ["[]", "' \\t'", "[]", "'Jo'", "'amy  MARCH'", "'Ana'", "", "None",
                                          "'Jo-March'", "'\u2014'"]
    with pytest.raises(InputError, match=re.escape(f"{path}, line 30, key reference_events: empty events list")):
        load_nonliteral(path, strict=True)


def test_qa_answers_are_the_one_reference_string(tmp_path):
    def qa(i, **fields):
        return {"id": f"bookmia_qa.7.{i}", "title": "Stormy Harbour",
                "input": "According to Stormy Harbour, who keeps the lighthouse?", "reference": "old Pell", **fields}
    rows = [
        qa(1),                                                       # lines 2-7
        qa(2, reference=["old Pell", "Pell"]),                      # 8-16
        qa(3, reference="Se\u00f1ora Vale"),                        # 17-22
        qa(1, reference="Pell"),                                     # 23-28
        {k: v for k, v in qa(5).items() if k != "title"},           # 29-33
        qa(6, reference=None),                                       # 34-39
    ]
    path = _write(tmp_path, "data.qa.json", rows)
    items, rejects = load_qa(path)
    assert [(it.item_id, it.answers, it.meta["line"]) for it in items] == [
        ("bookmia_qa.7.1", ["old Pell"], 2), ("bookmia_qa.7.3", ["Se\u00f1ora Vale"], 17)]
    assert items[0].question == "According to Stormy Harbour, who keeps the lighthouse?"
    assert _rejects(rejects) == [
        (8, "reference", "expected a string, got an array"),
        (23, "id", "duplicate id, first on line 2"),
        (29, "title", "missing key"),
        (34, "reference", "expected a string, got null"),
    ]
    assert rejects[0].value == "['old Pell', 'Pell']" and rejects[3].value == "None"


def test_rejects_are_written_as_a_csv(tmp_path):
    _, rejects = load_literal(_literal_file(tmp_path))
    write_rejects(tmp_path / "rejects.csv", rejects)
    table = pd.read_csv(tmp_path / "rejects.csv", keep_default_na=False)
    assert list(table.columns) == ["file", "line", "key", "value", "reason", "action"]
    assert table.to_dict("records") == [r.to_dict() for r in rejects]
    write_rejects(tmp_path / "none.csv", [])
    assert (tmp_path / "none.csv").read_text() == "file,line,key,value,reason,action\n"


@pytest.mark.parametrize("content, message", [
    (b"", "{p}: empty file"),
    (b" \n\n", "{p}: empty file"),
    (b'[\n  {\n    "id": "a\xff"\n  }\n]', "{p}, line 3: invalid UTF-8 at byte offset 18 (byte 0xff)"),
    (b'{"id": "a"}', "{p}: the top level is an object, expected an array of records"),
    (b"hello", "{p}, line 1, column 1: not valid JSON (Expecting value)"),
    (b'[\n  {\n    "id": "a",\n  }\n]',
     "{p}, line 4, column 3: not valid JSON (Expecting property name enclosed in double quotes)"),
    (b'[\n  {"id": "a"}\n  {"id": "b"}\n]',
     "{p}, line 3, column 3: not valid JSON (expected ',' or ']' after an array element)"),
    (b'[\n  {"id": "a"},\n', "{p}, line 3, column 1: not valid JSON (Expecting value)"),
    (b"[]\n]", "{p}, line 2, column 1: not valid JSON (extra data after the top-level array)"),
])
def test_whole_file_problems_are_one_line_input_errors(tmp_path, content, message):
    path = tmp_path / "data.literal.json"
    path.write_bytes(content)
    for load in (load_literal, load_nonliteral, load_qa):
        with pytest.raises(InputError) as err:
            load(path)
        assert str(err.value) == message.format(p=path)


def test_a_missing_file_or_a_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'nope.json'}: file not found")):
        load_qa(tmp_path / "nope.json")
    with pytest.raises(InputError, match=re.escape(f"{tmp_path}: is a directory, expected a JSON file")):
        load_nonliteral(tmp_path)
    with pytest.raises(InputError, match="file not found"):
        load_prompt_file(tmp_path / "prompts.qa.format1.json")
    assert load_literal(_write(tmp_path, "empty.json", [])) == ([], [])


QA_PROMPT = {
    "tag": "qa.format9",
    "system": "Be careful.",
    "enable_system": False,
    "instruction": "Answer briefly.",
    "demo_sep": "\n\n\n",
    "demo_prompt": "Question: ${input}\nAnswer: [Output_Start] ${output} [Output_End]",
    "task_prompt": "Question: ${input}\nAnswer:",
    "demos": [{"input": "Who sails?", "output": "Mara"}, {"input": "What burns?", "output": "the old pier"},
              {"input": "Where to?", "output": "north"}],
}


def test_a_prompt_renders_like_the_reference_generator(tmp_path):
    template = load_prompt_file(_write(tmp_path, "prompts.qa.format9.json", QA_PROMPT))
    assert (template.tag, len(template.demos), template.demos[1]) == (
        "qa.format9", 3, {"input": "What burns?", "output": "the old pier"})
    question = "Who keeps the light?"
    assert template.render(question, 0) == (None, "Answer briefly.\n\n\n\n\n\nQuestion: Who keeps the light?\nAnswer:")
    assert template.render(question, 1) == (None, (
        "Answer briefly.\n\n\n"
        "Question: Who sails?\nAnswer: [Output_Start] Mara [Output_End]\n\n\n"
        "Question: Who keeps the light?\nAnswer:"))
    assert template.render(question, 2) == (None, (
        "Answer briefly.\n\n\n"
        "Question: Who sails?\nAnswer: [Output_Start] Mara [Output_End]\n\n\n"
        "Question: What burns?\nAnswer: [Output_Start] the old pier [Output_End]\n\n\n"
        "Question: Who keeps the light?\nAnswer:"))
    assert template.render(question, 2, demo_indices=[2, 0])[1] == (
        "Answer briefly.\n\n\n"
        "Question: Where to?\nAnswer: [Output_Start] north [Output_End]\n\n\n"
        "Question: Who sails?\nAnswer: [Output_Start] Mara [Output_End]\n\n\n"
        "Question: Who keeps the light?\nAnswer:")
    template.enable_system = True
    assert template.render(question, 0)[0] == "Be careful."
    with pytest.raises(ValueError, match=r"prompt qa.format9: k=4 demonstrations asked, the file has 3"):
        template.render(question, 4)
    with pytest.raises(ValueError, match=r"demo_indices \[0\] are not 2 indices below 3"):
        template.render(question, 2, demo_indices=[0])


def test_the_literal_prompts_trailing_space_is_stripped_as_in_the_reference(tmp_path):
    prompt = {**QA_PROMPT, "tag": "literal.format9", "instruction": "Continue the passage.",
              "demo_prompt": "Complete the prefix:\n${input} ${output}",
              "task_prompt": "Complete the prefix:\n${input} "}
    template = load_prompt_file(_write(tmp_path, "prompts.literal.format9.json", prompt, indent=4))
    assert template.render("The tide came in", 1) == (None, (
        "Continue the passage.\n\n\nComplete the prefix:\nWho sails? Mara\n\n\nComplete the prefix:\nThe tide came in"))


def test_reference_demo_draws_follow_the_seeded_generator():
    # scripts/generate.py: random.seed(42), then random.sample(demos, k) per record in file order.
    assert reference_demo_indices(3, 42, 1) == [[40], [7], [1]]
    assert reference_demo_indices(2, 5, 0) == [[], []]
    draws = reference_demo_indices(4, 49, 4)
    assert all(len(set(d)) == 4 and all(0 <= i < 49 for i in d) for d in draws) and draws[0] != draws[1]


@pytest.mark.parametrize("change, message", [
    ({"instruction": None}, "key instruction: missing key"),
    ({"enable_system": "false"}, "key enable_system: expected a boolean, got a string"),
    ({"demo_sep": 3}, "key demo_sep: expected a string, got a number"),
    ({"task_prompt": "Question:\nAnswer:"}, "key task_prompt: no ${input} placeholder"),
    ({"demo_prompt": "Question: ${input}"},
     "key demo_prompt: needs ${input} and ${output} placeholders to show the 3 demonstrations"),
    ({"task_prompt": "From ${title}: ${input}"},
     "key task_prompt: placeholder ${title} is not filled (only ${input} and ${output} are)"),
    ({"task_prompt": "Cost: $5 ${input}"}, "key task_prompt: a '$' that is neither a placeholder nor '$$'"),
    ({"demos": [{"input": "Who sails?", "output": "Mara"}, {"input": "What burns?"}]},
     "key demos[1].output: missing key"),
    ({"demos": [{"input": " ", "output": "Mara"}]}, "key demos[0].input: empty or whitespace-only text"),
    ({"task_instruction": "Now answer."}, "key task_instruction: not supported (no published prompt file uses it)"),
])
def test_prompt_file_problems_name_the_file_and_key(tmp_path, change, message):
    prompt = {k: v for k, v in {**QA_PROMPT, **change}.items() if v is not None}
    path = _write(tmp_path, "prompts.qa.format9.json", prompt)
    with pytest.raises(InputError) as err:
        load_prompt_file(path)
    assert str(err.value) == f"{path}, {message}"


def test_a_demo_prompt_without_output_is_fine_when_there_are_no_demos(tmp_path):
    path = _write(tmp_path, "p.json", {**QA_PROMPT, "demo_prompt": "Question: ${input}", "demos": []})
    assert load_prompt_file(path).render("Why?", 0)[1] == "Answer briefly.\n\n\n\n\n\nQuestion: Why?\nAnswer:"
    with pytest.raises(InputError, match=re.escape(f"{path}: the top level is an array, expected an object")):
        load_prompt_file(_write(tmp_path, "p.json", [QA_PROMPT]))


COPYBENCH_DIR = os.environ.get("MEMAUDIT_COPYBENCH_DIR")


@pytest.mark.skipif(not COPYBENCH_DIR, reason="MEMAUDIT_COPYBENCH_DIR does not name a folder with the published files")
def test_the_published_files_load():
    root = Path(COPYBENCH_DIR)
    literal, literal_rejects = load_literal(root / DATA_FILES["literal"], strict=True)
    qa, qa_rejects = load_qa(root / DATA_FILES["qa"], strict=True)
    assert (len(literal), len(literal_rejects), len({it.title for it in literal})) == (758, 0, 16)
    assert (len(qa), len(qa_rejects), len({it.title for it in qa})) == (589, 0, 16)
    # 34 of the 590 records give one alias to two characters (every beginning of six books, four
    # of All the Pretty Horses'), e.g. "Jason Compson" for both Mr. Compson and Jason in Absalom,
    # Absalom!: kept as published, each noted.
    stories, story_notes = load_nonliteral(root / DATA_FILES["nonliteral"], strict=True)
    assert (len(stories), len(story_notes)) == (590, 34)
    assert all(r.action == "kept" and " also belongs to reference_characters[" in r.reason for r in story_notes)
    assert len({it.title for it in stories}) == 118
    assert all(len(it.reference_events) in (15, 19) for it in stories)
    demos = {"literal": 49, "nonliteral": 50, "qa": 42}
    for task, names in PROMPT_FILES.items():
        for n, name in enumerate(names, 1):
            template = load_prompt_file(root / name)
            assert (template.tag, len(template.demos), template.enable_system) == (
                f"{task}.format{n}", demos[task], False)
