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
import yaml

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
                                   "and the boats were gone 0.", None, {"index": 0, "line": 2, "n_records": 12})
    assert items[2].meta == {"index": 8, "line": 44, "source": "fiction", "n_records": 12} and items[2].label is None
    assert _rejects(rejects) == [
        (14, "reference", "missing key"),
        (19, "input", "expected a string, got a number"),
        (25, "input", "empty or whitespace-only text"),
        (31, "reference", "contains a NUL character at position 100"),
        (37, "id", "duplicate id, first on line 8, element 1"),
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


def test_an_id_only_a_rejected_record_held_before_is_no_duplicate(tmp_path):
    """The first record of an id was rejected (an empty title) and the second, valid, was rejected too, as that
    one's duplicate: the only usable copy was lost, its reason pointing at a record that never loaded."""
    path = _write(tmp_path, "data.literal.json", [_literal(0, title=""), _literal(0), _literal(1), _literal(1)],
                  indent=None)
    items, rejects = load_literal(path)
    assert [(it.item_id, it.meta["index"]) for it in items] == [("bookmia.07.0", 1), ("bookmia.07.1", 2)]
    assert [r.message() for r in rejects] == [
        f"{path}, line 1, element 0, key title: empty or whitespace-only text",
        f"{path}, line 1, element 3, key id: duplicate id, first on line 1, element 2"]


def test_a_one_line_array_names_each_rejected_records_element(tmp_path):
    """``json.dump(records, f)`` without an indent, or ``DataFrame.to_json(orient="records")``, puts every record
    on line 1: each reject names its element (0-based), as BookMIA's and WikiMIA's arrays do; the line alone
    pointed nowhere ("duplicate id, first on line 1")."""
    path = tmp_path / "data.literal.json"
    path.write_text(json.dumps([_literal(0), _literal(1, input=""), _literal(0), "stray"]), encoding="utf-8")
    items, rejects = load_literal(path)
    assert [it.item_id for it in items] == ["bookmia.07.0"]
    assert [r.message() for r in rejects] == [
        f"{path}, line 1, element 1, key input: empty or whitespace-only text",
        f"{path}, line 1, element 2, key id: duplicate id, first on line 1, element 0",
        f"{path}, line 1, element 3, key (record): expected an object, got a string"]
    with pytest.raises(InputError) as err:
        load_literal(path, strict=True)
    assert str(err.value) == f"{path}, line 1, element 1, key input: empty or whitespace-only text"
    write_rejects(tmp_path / "rejects.csv", rejects)
    table = pd.read_csv(tmp_path / "rejects.csv", keep_default_na=False)
    assert list(table["element"]) == [1, 2, 3]


def test_a_literal_reference_without_an_ascii_word_is_rejected(tmp_path):
    path = _write(tmp_path, "data.literal.json", [
        {"id": "ru.0", "title": "Voina i mir", "input": "Glava pervaya.",
         "reference": "Наташа вошла в комнату."},
        {"id": "ru.1", "title": "Voina i mir", "input": "Glava vtoraya.", "reference": "В 1812 году."}])
    items, rejects = load_literal(path)
    assert [it.item_id for it in items] == ["ru.1"]
    assert _rejects(rejects) == [(2, "reference", "no ASCII letter or digit: ROUGE-L (rouge-score's tokenizer) "
                                                  "would score every output 0")]


def test_strict_mode_turns_the_first_reject_into_a_one_line_input_error(tmp_path):
    path = _literal_file(tmp_path)
    with pytest.raises(InputError) as err:
        load_literal(path, strict=True)
    assert str(err.value) == f"{path}, line 14, element 2, key reference: missing key"
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
    with pytest.raises(InputError, match=re.escape(f"{path}, line 30, element 2, key reference_events: "
                                                   "empty events list")):
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
        (23, "id", "duplicate id, first on line 2, element 0"),
        (29, "title", "missing key"),
        (34, "reference", "expected a string, got null"),
    ]
    assert rejects[0].value == "['old Pell', 'Pell']" and rejects[3].value == "None"


def test_rejects_are_written_as_a_csv(tmp_path):
    _, rejects = load_literal(_literal_file(tmp_path))
    write_rejects(tmp_path / "rejects.csv", rejects)
    table = pd.read_csv(tmp_path / "rejects.csv", keep_default_na=False)
    assert list(table.columns) == ["file", "line", "element", "key", "value", "reason", "action"]
    assert table.to_dict("records") == [r.to_dict() for r in rejects]
    assert list(table["element"]) == [2, 3, 4, 5, 6, 7, 9, 10, 11]
    write_rejects(tmp_path / "none.csv", [])
    assert (tmp_path / "none.csv").read_text() == "file,line,element,key,value,reason,action\n"


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
    # nesting past the decoder's recursion limit was a RecursionError traceback
    (b'[\n  {"id": "a"},\n  ' + b"[" * 200_000, "{p}, line 3, column 3: not valid JSON (element 1 is nested too deeply)"),
    (b" " + b'{"a": ' * 200_000, "{p}, line 1, column 2: not valid JSON (nested too deeply)"),
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


def test_a_key_given_twice_rejects_its_record_not_the_first_value_silently(tmp_path):
    """JSON allows a repeated key and the decoder keeps the last value; the first one was dropped unseen."""
    path = tmp_path / "data.literal.json"
    path.write_text('[\n  {"id": "a", "title": "T", "input": "first", "input": "second", "reference": "r"},\n'
                    '  {"id": "b", "title": "T", "input": "kept", "reference": "r"}\n]', encoding="utf-8")
    items, rejects = load_literal(path)
    assert [it.item_id for it in items] == ["b"]
    assert [(r.line, r.key, r.value, r.reason) for r in rejects] == [
        (2, "input", "['first', 'second']",
         "given 2 times in one record ('first', then 'second'): which value is meant is unknown")]
    prompt = json.dumps(QA_PROMPT)
    for text, key, given in ((prompt[:-1] + ', "tag": "again"}', "tag", f"{QA_PROMPT['tag']!r}, then 'again'"),
                             (prompt.replace('"output": ', '"output": "x", "output": ', 1), "demos[0].output",
                              f"'x', then {QA_PROMPT['demos'][0]['output']!r}")):
        path = tmp_path / "prompts.qa.format1.json"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError) as err:
            load_prompt_file(path)
        assert str(err.value) == (f"{path}, key {key}: given 2 times in one record ({given}): which value is meant "
                                  f"is unknown")


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
            # the built-in templates are the files' text, character for character (demonstrations apart)
            from memaudit.probes.copybench.prompts import templates

            builtin = templates(task, [n])[0]
            for key in ("instruction", "demo_prompt", "task_prompt", "system", "demo_sep", "enable_system"):
                assert getattr(builtin, key) == getattr(template, key), (name, key)


# ---------------------------------------------------------------- the published files as a benchmark

BOOKS = {"Stormy Harbour": 1, "Glass Orchard": 1, "Salt Meridian": 0, "Paper Lantern": 0}
CHARACTERS = {"Stormy Harbour": [["Ada Quill", "Ada"], ["Bram Tolley", "Bram"], ["Cora Vane"], ["Dunstan"]],
              "Glass Orchard": [["Elsie Marsh"], ["Felix Orde", "Felix"], ["Gwen"], ["Hob Carrow"]],
              "Salt Meridian": [["Ivo Brandt"], ["Jessa Lunn"], ["Kit"], ["Lorne Daw"]],
              "Paper Lantern": [["Mabry Finch"], ["Nell Oster"], ["Otto"], ["Pim Rask"]]}
VERBS = ["sails", "hides", "burns", "finds", "loses", "buries", "mends"]


def _events(title):
    people = [c[0] for c in CHARACTERS[title]]
    return [f"{people[i % 4]} {VERBS[i]} the {title.split()[1].lower()} relic number {i} at dawn." for i in range(7)]


def _published_folder(root: Path) -> Path:
    """Invented books in the published files' shape: two snippets, two beginnings, one question per
    book, plus one unusable record in each copying file."""
    literal, stories, qa = [], [], []
    for b, title in enumerate(BOOKS):
        word = title.split()[0].lower()
        for s in range(2):
            literal.append({"id": f"bookmia.{b}.{s}", "title": title,
                            "input": f"The {word} story begins in chapter {s} where the keeper counts {b + s} bells.",
                            "reference": f"Then {word} keepers {s} walked past the quay humming tune {b} softly."})
        events = _events(title)
        for k in range(2):
            stories.append({"id": f"cliffsnotes.{b}.{k}", "title": title, "input": events[k],
                            "reference_events": [e for j, e in enumerate(events) if j != k],
                            "reference_characters": CHARACTERS[title]})
        qa.append({"id": f"qa.{b}", "title": title, "input": f"In {title}, who keeps the bells?",
                   "reference": CHARACTERS[title][0][0]})
    literal.append({"id": "bookmia.9.0", "title": "Stormy Harbour", "input": "   ", "reference": "x"})
    stories.append({"id": "cliffsnotes.9.0", "title": "Paper Lantern", "input": "A start.", "reference_events": [],
                    "reference_characters": []})
    folder = root / "copy-bench-data"
    folder.mkdir()
    _write(folder, DATA_FILES["literal"], literal)
    _write(folder, DATA_FILES["nonliteral"], stories)
    _write(folder, DATA_FILES["qa"], qa)
    return folder


@pytest.mark.parametrize("prefix, reference, text", [
    # data.literal.json's own cuts (bookmia.00.11, 00.31, 01.41, 01.62, 01.76, 10.25, 13.54, 14.81, 01.10)
    ("They are a form", "of pressure", "They are a form of pressure"),
    ("'May I see your papers, comrade", "? What are you doing here?",
     "'May I see your papers, comrade? What are you doing here?"),
    ("Was there no end to Robert", "'s folly?", "Was there no end to Robert's folly?"),
    ('"The boys are not at fault,', '" he told the king.', '"The boys are not at fault," he told the king.'),
    ("the woman said shrilly.", '"So he did," the man said.', 'the woman said shrilly. "So he did," the man said.'),
    ('one of mine," she said. "', "I can make do", 'one of mine," she said. "I can make do'),
    ("He chuckles. \u201c", "That it does", "He chuckles. \u201cThat it does"),
    ("They passed the well", "-shaft not guessing", "They passed the well-shaft not guessing"),
    ("the best of them, my uncle .", ". . but Brynden", "the best of them, my uncle . . . but Brynden"),
    ("The tide came in.\n", "And went out.", "The tide came in.\nAnd went out."),  # whitespace: as written
])
def test_a_published_snippet_is_its_prefix_and_reference_rejoined_where_they_were_cut(prefix, reference, text):
    """The published literal items cut BookMIA's snippets between tokens and lost the whitespace at the cut
    (510 of 758 prefixes end a word whose reference starts the next; 41 references start with "."). The
    passage and the book's text joined them with a space: "comrade ? What", "Robert 's folly". A space goes
    back only where the reference starts a new word."""
    from memaudit.datasets.copybench_published import continuation

    assert continuation(prefix, reference) == text


def test_the_published_passages_and_book_texts_rejoin_each_snippet(tmp_path):
    from memaudit.datasets.copybench_published import book_texts, copybench_sets
    from memaudit.datasets.published import published_benchmark

    folder = tmp_path / "cb"
    folder.mkdir()
    _write(folder, DATA_FILES["literal"], [
        {"id": "bookmia.00.31", "title": "1984", "input": "The patrols might stop you. 'May I see your papers, comrade",
         "reference": "? What are you doing here?'"},
        {"id": "bookmia.01.41", "title": "1984", "input": "Was there no end to Robert", "reference": "'s folly? And"}])
    published = {"format": "copybench", "path": str(folder)}
    snippets = ["The patrols might stop you. 'May I see your papers, comrade? What are you doing here?'",
                "Was there no end to Robert's folly? And"]
    assert book_texts(copybench_sets(published)) == {"copybench/1984": "\n".join(snippets)}
    _, passages = published_benchmark("cb", published, rejects=[])
    assert [p.text for p in passages] == snippets


def _labels(root: Path, rows: str) -> Path:
    path = root / "labels.csv"
    path.write_text(rows, encoding="utf-8")
    return path


def test_the_published_folder_becomes_items_unlabelled_or_labelled_by_title(tmp_path):
    from memaudit.datasets.copybench_published import UNLABELLED, book_texts, copybench_sets
    from memaudit.datasets.published import published_benchmark

    folder = _published_folder(tmp_path)
    sets = copybench_sets({"format": "copybench", "path": str(folder)})
    assert (len(sets.literal), len(sets.nonliteral), len(sets.qa)) == (8, 8, 4) and not sets.labelled
    assert {it["label"] for items in (sets.literal, sets.nonliteral, sets.qa) for it in items} == {UNLABELLED}
    assert sets.literal[0] == {
        "item_id": "bookmia.0.0", "doc_id": "copybench/Stormy Harbour", "book": "copybench/Stormy Harbour",
        "title": "Stormy Harbour", "label": -1, "prefix": "The stormy story begins in chapter 0 where the keeper "
        "counts 0 bells.", "reference": "Then stormy keepers 0 walked past the quay humming tune 0 softly.",
        "meta": {"source": "published", "index": 0, "line": 2, "n_records": 9}}
    story = sets.nonliteral[1]
    assert (story["beginning"], story["reference_events"][0], story["meta"]["event_source"]) == (
        _events("Stormy Harbour")[1], _events("Stormy Harbour")[0], "published")
    assert sets.qa[3]["answers"] == ["Mabry Finch"] and sets.qa[3]["qa_source"] == "published"
    # the line of the "{" opening each bad record: the one above its "id" line (1-based)
    start = (folder / DATA_FILES["nonliteral"]).read_text().split("\n").index('    "id": "cliffsnotes.9.0",')
    assert [(Path(r.file).name, r.line, r.key, r.reason) for r in sets.rejected] == [
        ("data.literal.json", 50, "input", "empty or whitespace-only text"),
        ("data.nonliteral.json", start, "reference_events", "empty events list")]
    # what the files say of a book, each event once: its document text and MemFree's story corpus
    text = book_texts(sets)["copybench/Glass Orchard"].split("\n")
    assert text[:2] == [f"{it['prefix']} {it['reference']}" for it in sets.literal[2:4]]
    assert text[2:9] == _events("Glass Orchard") and text[9] == "In Glass Orchard, who keeps the bells? Elsie Marsh"

    labels = _labels(tmp_path, "title,label\nStormy Harbour,1\nGlass Orchard,1\nSalt Meridian,0\nElsewhere,0\n")
    sets = copybench_sets({"format": "copybench", "path": str(folder), "labels": str(labels)})
    assert sets.labelled and sets.unused_labels == ["Elsewhere"]
    assert {it["book"]: it["label"] for it in sets.literal} == {
        "copybench/Stormy Harbour": 1, "copybench/Glass Orchard": 1, "copybench/Salt Meridian": 0}
    unlabelled = [(Path(r.file).name, r.key, r.reason) for r in sets.rejected if r.key == "title"]
    assert unlabelled == [(name, "title", f"no label for this title in {labels}")
                          for name in ["data.literal.json"] * 2 + ["data.nonliteral.json"] * 2 + ["data.qa.json"]]
    with pytest.raises(InputError, match=r"data.literal.json, line 38, element 6, key title: no label for this "
                                         r"title .* \(7 records rejected in all\)$"):
        copybench_sets({"format": "copybench", "path": str(folder), "labels": str(labels), "strict": True})

    # labels that leave one side empty: refused, as the other published formats' (an AUC of NaN at the end)
    one_side = _labels(tmp_path, "title,label\nStormy Harbour,1\nGlass Orchard,1\nSalt Meridian,1\n"
                                 "Paper Lantern,1\n")
    with pytest.raises(InputError) as err:
        published_benchmark("cb", {"format": "copybench", "path": str(folder), "labels": str(one_side)})
    assert str(err.value) == f"{one_side}: all 4 usable books are members (label 1); a benchmark needs both"

    docs, passages, rejects = [], [], []
    docs, passages = published_benchmark("cb", {"format": "copybench", "path": str(folder)}, rejects=rejects)
    assert [(d.doc_id, d.meta["label"], d.meta["n_passages"]) for d in docs] == [
        ("copybench/Glass Orchard", -1, 2), ("copybench/Paper Lantern", -1, 2), ("copybench/Salt Meridian", -1, 2),
        ("copybench/Stormy Harbour", -1, 2)]
    assert passages[0].text == f"{sets.literal[0]['prefix']} {sets.literal[0]['reference']}" and len(rejects) == 2


def test_a_labels_title_differing_only_in_case_and_spacing_labels_the_book_with_a_note(tmp_path):
    """The published titles are lower-case ("a game of thrones"); a labels file written as titles are
    printed labels them, with one kept note per book, unless two labels titles fold to the same."""
    from memaudit.datasets.copybench_published import copybench_sets

    folder = _published_folder(tmp_path)
    labels = _labels(tmp_path, "title,label\nSTORMY  harbour,1\nGlass Orchard,1\nsalt meridian,0\n"
                               "SALT MERIDIAN,1\n")
    sets = copybench_sets({"format": "copybench", "path": str(folder), "labels": str(labels)})
    assert {it["book"]: it["label"] for it in sets.literal} == {
        "copybench/Stormy Harbour": 1, "copybench/Glass Orchard": 1}
    assert sets.literal[0]["title"] == "Stormy Harbour"  # the book keeps its published title
    kept = [(Path(r.file).name, r.value, r.reason) for r in sets.rejected if r.action == "kept"]
    assert kept == [("data.literal.json", "'Stormy Harbour'",
                     f"labelled by 'STORMY  harbour' of {labels} (the same title but for case and spacing)")]
    # two labels titles that fold to one form are ambiguous: Salt Meridian's records stay rejected
    salt = [r for r in sets.rejected if r.value == "'Salt Meridian'"]
    assert salt and {r.action for r in salt} == {"rejected"}
    assert {r.reason for r in salt} == {  # not "no label for this title", which the file has, twice
        f"matches 'salt meridian' and 'SALT MERIDIAN' of {labels} but for case and spacing, which cannot say "
        f"which: keep one"}
    assert sorted(sets.unused_labels) == ["SALT MERIDIAN", "salt meridian"]


@pytest.mark.parametrize("rows, message", [
    ("book,label\nA,1\n", "line 1: the header must be 'title,label', got 'book,label'"),
    ("title,label\nA,1\nB,yes\n", "line 3, column label: 'yes' is not 0 or 1 (1 = member)"),
    ("title,label\nA,1\nA,0\n", "line 3, column title: 'A' again (first on line 2)"),
    ("title,label\n,1\n", "line 2, column title: empty title"),
    ("title,label\nA,1,x\n", "line 2: 3 columns, expected 2 (title,label)"),
    ("title,label\n", ": no title,label rows after the header"),
])
def test_a_labels_file_problem_is_one_line_naming_file_line_and_column(tmp_path, rows, message):
    from memaudit.datasets.copybench_published import load_title_labels

    path = _labels(tmp_path, rows)
    with pytest.raises(InputError) as err:
        load_title_labels(path)
    assert str(err.value) == f"{path}{'' if message.startswith(':') else ', '}{message}"


def _workflow_config(labels: str | None = None, **copybench) -> dict:
    published = {"format": "copybench", "path": "copy-bench-data"} | ({"labels": labels} if labels else {})
    api = {"api_key_env": "MEMAUDIT_TEST_CB_KEY", "concurrency": 4, "base_url": "http://127.0.0.1:9/v1", "model_id": "reader-v1",
           "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}
    return {
        "seed": 7, "assets_dir": "resources/demo", "cache_dir": "resources/cache",
        "benchmarks": {"cb": {"published": published}},
        "models": {"reader": {"family": "reader", "backend": "openai", "api": api}},
        "probes": {"copybench": {"formats": [1], "demonstrations": 0, "event_judge": {"model": "reader"},
                                 **copybench},
                   "copybench_literal": {}, "copybench_nonliteral": {}, "copybench_qa": {}},
        "stats": {"n_boot_ci": 200, "blind_folds": 2},
    }


def test_the_config_says_what_an_unlabelled_published_benchmark_cannot_do():
    from memaudit.errors import ConfigError
    from memaudit.jobs import metrics_tables, probe_runs, validate_config

    config = validate_config(_workflow_config())
    assert [m for _, _, m in probe_runs(config, "copybench")] == ["literal", "nonliteral", "qa"]
    assert metrics_tables(config) == []  # no AUC, selection or blind baseline without members
    # token_prob on every benchmark (no list) leaves the unlabelled one out; naming it is an error
    assert probe_runs(validate_config(_workflow_config() | {"probes": {"token_prob": {}}}), "token_prob") == []
    assert metrics_tables(validate_config(_workflow_config("labels.csv"))) == [
        "results/metrics/cb/reader.csv", "results/metrics/cb/blind_baseline.csv"]
    bad = _workflow_config()
    bad["probes"]["copybench"].pop("event_judge")
    bad["probes"]["token_prob"] = {"benchmarks": ["cb"]}
    bad["models"]["tuned"] = {"family": "t", "base": "reader", "finetune": {"members_of": ["cb"]}}
    with pytest.raises(ConfigError) as err:
        validate_config(bad)
    for problem in ("models.tuned.finetune.members_of.0: benchmark 'cb' is unlabelled",
                    "probes.token_prob.benchmarks.0: benchmark 'cb' is unlabelled",
                    "probes.copybench.event_judge.model: benchmark 'cb' is CopyBench's published files"):
        assert problem in str(err.value)


def test_a_mode_run_on_a_published_folder_without_its_data_file_is_a_config_error(tmp_path):
    """The items jobs built no item for a mode whose file is not in the folder, and its probe job stopped after
    the others had run ("no qa items on benchmark 'cb' (a published folder without its data file, or ...)"),
    naming neither the file nor the key. The config check names both before any job runs."""
    from memaudit.errors import ConfigError
    from memaudit.jobs import probe_runs, validate_config

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / DATA_FILES["literal"]).write_text("[]")
    config = _workflow_config()
    config["benchmarks"]["cb"]["published"]["path"] = str(folder)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert str(err.value).splitlines() == [
        f"config key probes.copybench_nonliteral: benchmark 'cb' is a published CopyBench folder without "
        f"data.nonliteral.json ({folder}); put the file there or leave 'cb' out of "
        f"probes.copybench_nonliteral.benchmarks",
        f"config key probes.copybench_qa: benchmark 'cb' is a published CopyBench folder without data.qa.json "
        f"({folder}); put the file there or leave 'cb' out of probes.copybench_qa.benchmarks"]
    for mode in ("nonliteral", "qa"):
        config["probes"].pop(f"copybench_{mode}")
    assert [m for _, _, m in probe_runs(validate_config(config), "copybench")] == ["literal"]


def test_memfree_on_an_api_model_is_a_config_error_not_a_failed_job():
    """MemFree needs control of decoding: an API model's job stopped at its start with a ConfigError (its
    greedy and system outputs unwritten), after the config check had passed it. The check now names it."""
    from memaudit.errors import ConfigError
    from memaudit.jobs import validate_config

    with pytest.raises(ConfigError) as err:
        validate_config(_workflow_config(decodings=["greedy", "memfree"]))
    assert str(err.value) == (
        "config key probes.copybench.decodings: memfree needs control of decoding, which API model 'reader' "
        "does not give (it runs copybench_literal, copybench_nonliteral, copybench_qa); leave memfree out of the "
        "decodings, or 'reader' out of those modes' models")
    config = _workflow_config(decodings=["greedy", "memfree"])
    config["models"]["open"] = {"source": {"tiny_gpt2": {}}}
    for mode in ("literal", "nonliteral", "qa"):
        config["probes"][f"copybench_{mode}"] = {"models": ["open"]}
    assert validate_config(config)["probes"]["copybench"]["decodings"] == ["greedy", "memfree"]


class _Reader:
    """An API model that has read two of the four books: it continues their snippets word for word,
    retells their events with their characters and answers their questions; of the other two it knows
    nothing. As the event judge, a claim is attributable when its words run unbroken in the reference."""

    def __init__(self, folder: Path):
        self.literal = {r["input"]: r["reference"] for r in json.loads((folder / DATA_FILES["literal"]).read_text())}
        self.stories = {r["input"]: r for r in json.loads((folder / DATA_FILES["nonliteral"]).read_text())}
        self.qa = {r["input"]: r["reference"] for r in json.loads((folder / DATA_FILES["qa"]).read_text())}
        self.read = {"Stormy Harbour", "Glass Orchard"}

    @staticmethod
    def _words(text):
        return re.findall(r"\w+", text.lower())

    def __call__(self, request):
        from api_server import ChatReply

        prompt = request.prompt
        if prompt.startswith("### Instruction:\nPlease solely verify"):
            claim, reference = prompt.split("Claim: ", 1)[1].split("\n\nReference: ", 1)
            c, r = " ".join(self._words(claim)), " ".join(self._words(reference))
            return ChatReply(text="attributable" if f" {c} " in f" {r} " else "not attributable", input_tokens=90,
                             output_tokens=3)
        task = prompt.rsplit("\n\n\n", 1)[-1]
        text = "Nothing comes to mind."
        for prefix, reference in self.literal.items():
            if prefix in task and any(f" {w.split()[0].lower()} " in f" {prefix} " for w in self.read):
                text = reference
        for beginning, story in self.stories.items():
            if beginning in task and story["title"] in self.read:
                text = " ".join(story["reference_events"])
        for question, answer in self.qa.items():
            if question in task and any(t in question for t in self.read):
                text = f"[Output_Start] {answer} [Output_End]"
        return ChatReply(text=text, input_tokens=120, output_tokens=len(text.split()))


@pytest.mark.slow
def test_the_published_files_run_through_the_workflow_unlabelled_then_labelled(tmp_path, monkeypatch):
    """CopyBench's published files as a benchmark, an API model behind the loopback server: without labels
    the run gives the paper's rates over all books and no membership statistics; with a labels file the
    same (cached) answers give member/non-member rates and an AUC."""
    import base64

    from api_server import ChatServer, ScriptedResponder
    from workflow_helpers import make_workdir, report_data, snakemake

    class Responder(ScriptedResponder):
        def default(self, request):
            return reader(request)

    monkeypatch.setenv("MEMAUDIT_TEST_CB_KEY", "sk-test-copybench")
    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf")  # the demo assets: the pretraining pool's documents
    folder = _published_folder(workdir)
    reader = _Reader(folder)
    with ChatServer(Responder()) as server:
        config = _workflow_config()
        config["models"]["reader"]["api"]["base_url"] = server.openai_base_url
        (workdir / "config/cb.yaml").write_text(yaml.safe_dump(config))
        snakemake(workdir, "--cores", "2", "--resources", "api_openai=4", "--configfile", "config/cb.yaml")
        sent = server.count("openai")
        # 8 snippets, 8 beginnings and 4 questions asked once each, and the judge's (event, chunk) pairs
        assert sent > 20 and (workdir / "results/api/cache.sqlite").is_file()
        rates = pd.read_csv(workdir / "results/summary/copybench.csv")
        assert set(rates["group"]) == {"all"}
        value = rates.set_index(["mode", "statistic"])["value"]
        assert value["literal", "rate_rougeL>=0.8"] == 0.5 and value["literal", "mean_copybench_rougeL"] == 0.5
        assert value["nonliteral", "rate_characters>=3"] == 0.5 and value["nonliteral", "rate_events>=5"] == 0.5
        assert value["qa", "mean_copybench_qa_f1"] == 0.5
        assert not (workdir / "results/metrics/cb").exists()
        assert pd.read_csv(workdir / "results/summary/metrics.csv").empty
        rejects = pd.read_csv(workdir / "results/datasets/cb/rejects.csv")
        assert list(rejects["key"]) == ["input", "reference_events"]
        # the report of a run with no metric tables: CopyBench's rates, the empty tables and the figure's note
        snakemake(workdir, "--report", "results/report.html", "all", "--configfile", "config/cb.yaml")
        report = report_data((workdir / "results/report.html").read_text(), "results")
        assert {"results/summary/copybench.csv", "results/summary/copybench_differences.csv",
                "results/figures/copybench/distributions.png", "results/summary/metrics.csv",
                "results/summary/selection.csv", "results/figures/selection_fdr_power.png",
                "results/summary/rejects.csv"} <= set(report)
        note = report["results/figures/selection_fdr_power.png"]["data_uri"].partition(";base64,")[2]
        assert base64.b64decode(note) == (workdir / "results/figures/selection_fdr_power.png").read_bytes()
        assert not [p for p in report if p.startswith("results/metrics/") or p.endswith("roc.png")]

        config["benchmarks"]["cb"]["published"]["labels"] = "labels.csv"
        _labels(workdir, "title,label\n" + "".join(f"{t},{label}\n" for t, label in BOOKS.items()))
        (workdir / "config/cb.yaml").write_text(yaml.safe_dump(config))
        snakemake(workdir, "--cores", "2", "--resources", "api_openai=4", "--configfile", "config/cb.yaml")
        assert server.count("openai") == sent  # the same prompts: every answer from the response cache
    rates = pd.read_csv(workdir / "results/summary/copybench.csv")
    member = rates[(rates["group"] == "member") & (rates["statistic"] == "rate_rougeL>=0.8")]
    nonmember = rates[(rates["group"] == "nonmember") & (rates["statistic"] == "rate_rougeL>=0.8")]
    assert (member["value"].tolist(), nonmember["value"].tolist()) == ([1.0], [0.0])
    metrics = pd.read_csv(workdir / "results/summary/metrics.csv").set_index("method")
    for method in ("copybench_rougeL", "copybench_characters", "copybench_events", "copybench_qa_f1"):
        assert metrics.loc[method, "auc"] == 1.0


def test_a_rejection_corpus_loads_as_the_reference_reads_it_and_bad_elements_are_named(tmp_path):
    """``--memfree_rejection_file``: a JSON array of texts; blank texts left out and returned by
    index, anything else that is not a string an error naming the file, line and element."""
    from memaudit.datasets.copybench_published import load_rejection_corpus

    path = _write(tmp_path, "non-literal-rejection-corpus.json", ["It was a dark night.", "  ", "The end."])
    assert load_rejection_corpus(path) == (["It was a dark night.", "The end."], [1])
    bad = _write(tmp_path, "bad.json", ["a text", {"text": "b"}])
    with pytest.raises(InputError, match=r"bad\.json, line 3: element 1 is an object, expected a string"):
        load_rejection_corpus(bad)
    with pytest.raises(InputError, match=r"obj\.json: the top level is an object, expected an array"):
        load_rejection_corpus(_write(tmp_path, "obj.json", {"texts": ["a"]}))
    with pytest.raises(InputError, match=r"blank\.json: no text in the rejection corpus"):
        load_rejection_corpus(_write(tmp_path, "blank.json", ["", " \n"]))
    with pytest.raises(InputError, match=r"broken\.json, line 2, column \d+: not valid JSON"):
        (tmp_path / "broken.json").write_text('[\n  "a",,\n]')
        load_rejection_corpus(tmp_path / "broken.json")


def test_published_items_with_the_published_prompt_files_get_the_references_demonstrations(tmp_path):
    """generate.py seeds Python's generator with 42 and draws random.sample(demos, k) once per record
    in file order; a published item (its index among the file's records, rejected ones included)
    gets that draw, a built item a draw seeded by itself."""
    import random

    from memaudit.datasets.copybench_published import copybench_sets, reference_demo_indices
    from memaudit.probes.copybench.runner import prompts_for

    demos = [{"input": f"Who is number {i}?", "output": f"Person {i}"} for i in range(6)]
    folder = tmp_path / "cb"
    folder.mkdir()
    _write(folder, "prompts.qa.format1.json", {**QA_PROMPT, "tag": "qa.format1", "demos": demos})
    records = [{"id": f"q{i}", "title": "Salt Meridian", "input": f"Question {i}?", "reference": f"Answer {i}"}
               for i in range(5)]
    records[1]["reference"] = "  "  # rejected: the reference still drew for it
    _write(folder, "data.qa.json", records)
    sets = copybench_sets({"format": "copybench", "path": str(folder)})
    assert [it["meta"]["index"] for it in sets.qa] == [0, 2, 3, 4]
    assert {it["meta"]["n_records"] for it in sets.qa} == {5}
    cfg = {"prompt": "paper", "demonstrations": 2, "prompt_dir": str(folder)}
    draws = reference_demo_indices(5, 6, 2)
    rng = random.Random(42)
    assert draws == [rng.sample(range(6), 2) for _ in range(5)]
    for (item, _fmt, user, *_), i in zip(prompts_for(sets.qa, "qa", cfg, {}), [0, 2, 3, 4]):
        shown = [q for q in (d["input"] for d in demos) if q in user]
        assert sorted(shown, key=user.index) == [demos[j]["input"] for j in draws[i]], (item["item_id"], user)
    # a built item (no published index) keeps the draw seeded by itself
    built = [{**sets.qa[0], "meta": {"source": "demo"}}]
    (_, _, user, *_), = prompts_for(built, "qa", cfg, {})
    seeded = random.Random(f"qa.format1:{built[0]['item_id']}").sample(range(6), 2)
    assert sorted((d["input"] for d in demos if d["input"] in user), key=user.index) == [demos[j]["input"]
                                                                                           for j in seeded]


def test_text_with_an_unpaired_surrogate_is_rejected_not_a_crash_when_the_items_are_written(tmp_path):
    """JSON's ``\\ud800`` escape decodes to a lone surrogate, which no UTF-8 writer or tokenizer takes:
    the items rule's JSONL and MemFree's tokenizer stopped with a traceback. Such a record is a reject."""
    from memaudit.datasets.copybench_published import copybench_sets, load_rejection_corpus
    from memaudit.io import write_jsonl

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "data.literal.json").write_text(json.dumps([
        _literal(0), _literal(1, input="Dark water \ud83d rises."),          # lines 2-7, 8-13
        {**_literal(2), "note": ["a", "b\udc00"]},                          # 14-23: a key outside the record's own
    ], indent=2), encoding="utf-8")
    (folder / "data.nonliteral.json").write_text(json.dumps([
        _story(0), _story(1, reference_characters=[["Ana"], ["Bo\ud800"]])], indent=2), encoding="utf-8")  # lines 2, 20
    sets = copybench_sets({"format": "copybench", "path": str(folder)})
    assert [it["item_id"] for it in sets.literal] == ["bookmia.07.0"]
    assert [it["item_id"] for it in sets.nonliteral] == ["stories.0001.0"]
    assert [(Path(r.file).name, r.line, r.key, r.reason) for r in sets.rejected] == [
        ("data.literal.json", 8, "input", "contains an unpaired surrogate \\ud83d at position 11 (not UTF-8 text)"),
        ("data.literal.json", 14, "note", "contains an unpaired surrogate \\udc00 (not UTF-8 text)"),
        ("data.nonliteral.json", 20, "reference_characters[1][0]",
         "contains an unpaired surrogate \\ud800 at position 2 (not UTF-8 text)"),
    ]
    assert write_jsonl(tmp_path / "literal.jsonl", sets.literal) == 1
    corpus = _write(tmp_path, "corpus.json", ["It was a dark night.", "The \udfff end."])
    with pytest.raises(InputError) as err:
        load_rejection_corpus(corpus)
    assert str(err.value) == (f"{corpus}, line 3: element 1 contains an unpaired surrogate \\udfff at position 4 "
                              "(not UTF-8 text)")


def test_a_qa_answer_with_nothing_left_after_squad_normalisation_is_rejected(tmp_path):
    """Normalised to nothing ("The", "--"), an answer scores F1 0 against every output and exact match 1
    against an empty one (the reference's eval_qa.py alike): a refusal would count as recall."""
    from memaudit.probes.copybench.metrics import qa_scores

    assert qa_scores("", ["The."]) == {"f1": 0.0, "em": 1.0}
    rows = [{"id": f"qa.{i}", "title": "Stormy Harbour", "input": "According to Stormy Harbour, who?",
             "reference": answer} for i, answer in enumerate(["old Pell", "The.", "-- !"])]
    items, rejects = load_qa(_write(tmp_path, "data.qa.json", rows))
    assert [it.answers for it in items] == [["old Pell"]]
    reason = ("nothing left after SQuAD normalisation (articles and punctuation only): F1 would be 0 for every "
              "output, exact match 1 for an empty one")
    assert _rejects(rejects) == [(8, "reference", reason), (14, "reference", reason)]
