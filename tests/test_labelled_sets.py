"""WikiMIA and XSum/BBC-style member/non-member sets (KTD's datasets) under the published-data policy:
the one labelled-text reader of :mod:`memaudit.datasets.labelled`, its wiring and its config keys."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memaudit.config import validate_config
from memaudit.datasets.build import build_benchmark
from memaudit.datasets.labelled import WIKIMIA, load_labelled, member_texts_set
from file_helpers import run_cases, write_file
from memaudit.errors import ConfigError, InputError

ASSETS = Path("resources/demo")

# WikiMIA as `Dataset.to_json` writes a split (the Hub's WikiMIA_length32.jsonl has this shape: one
# compact object per line, "input" then "label", int labels, non-ASCII as \u escapes)
WIKIMIA_JSONL = (
    '{"input":"The 2010 Haiti earthquake was a catastrophic magnitude 7.0 Mw earthquake, with an epicenter","label":1}\n'
    '{"input":"The Battle of Bakhmut is an ongoing military engagement between the Armed Forces of Ukraine","label":0}\n'
    '{"input":"Caf\\u00e9 Society was a nightclub in Greenwich Village, New York City, that opened in 1938","label":1}\n'
    '{"input":"The 2023 Turkey\\u2013Syria earthquakes struck southern and central Turkey and northern Syria","label":0}\n'
)


_write = write_file


def test_a_wikimia_split_loads_its_texts_labels_and_lines(tmp_path):
    path = _write(tmp_path / "WikiMIA_length32.jsonl", WIKIMIA_JSONL)
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert rejected == []
    assert [p.label for p in passages] == [1, 0, 1, 0]
    assert passages[2].text.startswith("Café Society") and "\u2013" in passages[3].text
    assert [p.meta["line"] for p in passages] == [1, 2, 3, 4]
    assert all(p.passage_id == f"{p.doc_id}#p0" and p.doc_id.startswith("wikimia/") for p in passages)
    assert {d.doc_id: d.meta["label"] for d in docs} == {p.doc_id: p.label for p in passages}
    # the same rows as CSV (DataFrame.to_csv) and as a JSON array: the same documents
    rows = [json.loads(line) for line in WIKIMIA_JSONL.splitlines()]
    pd.DataFrame(rows).to_csv(tmp_path / "w.csv", index=False)
    _write(tmp_path / "w.json", json.dumps(rows, indent=1))
    for other in ("w.csv", "w.json"):
        again, _, none = load_labelled(tmp_path / other, WIKIMIA, source="wikimia")
        assert none == [] and [(d.doc_id, d.text) for d in again] == [(d.doc_id, d.text) for d in docs]


def test_bad_rows_are_rejected_with_line_key_and_reason_and_strict_raises(tmp_path):
    lines = [
        {"document": "A member summary of a BBC article.", "label": 1},
        {"document": "   ", "label": 0},  # line 2: empty text
        {"document": "A non-member summary.", "label": 2},  # line 3: not a 0/1 label
        {"document": "A non-member summary, again.", "label": 1.0},  # line 4: 1.0 is not exactly 1
        {"document": "A member summary of a BBC article.", "label": 1},  # line 5: duplicate of line 1
        {"document": "Told both ways.", "label": 1},  # lines 6, 7: conflicting labels
        {"document": "Told  both ways.", "label": 0},
        {"text": "the wrong field", "label": 0},  # line 8: no document field
        {"document": "A clean non-member.", "label": 0, "id": 7},
    ]
    path = _write(tmp_path / "xsum.jsonl", "".join(json.dumps(r) + "\n" for r in lines) + "{broken\n")
    spec = member_texts_set("Document")  # field names match in any case
    docs, passages, rejected = load_labelled(path, spec, source="member_texts")
    assert [(p.text, p.label) for p in passages] == [("A member summary of a BBC article.", 1),
                                                     ("A clean non-member.", 0)]
    assert passages[1].meta["extra"] == {"id": 7}
    assert [(r.line, r.key) for r in rejected] == [(2, "document"), (3, "label"), (4, "label"), (5, "document"),
                                                   (6, "label"), (7, "label"), (8, "document"), (10, "(record)")]
    reasons = [r.reason for r in rejected]
    assert reasons[0] == "empty or whitespace-only text"
    assert reasons[1] == "not exactly 0 (non-member) or 1 (member): got a number 2"
    assert reasons[2] == "not exactly 0 (non-member) or 1 (member): got a number 1.0"
    assert reasons[3] == "duplicate document, first on line 1"
    assert reasons[4] == "the same document is on line 7 (label 0): conflicting labels, every copy rejected"
    assert reasons[6] == "missing key" and reasons[7].startswith("not valid JSON (")
    with pytest.raises(InputError) as info:
        load_labelled(path, spec, source="member_texts", strict=True)
    assert str(info.value) == f"{path}, line 2, key document: empty or whitespace-only text (8 rows rejected in all)"


def test_a_parquet_float_label_that_is_exactly_0_or_1_is_that_label(tmp_path):
    """pandas stores a label column with a missing value as float64, and its parquet file gives 1.0 for 1: every
    row was rejected ("got a number 1.0"). 0.5 and the missing value stay rejected, never rounded."""
    path = tmp_path / "set.parquet"
    pd.DataFrame({"text": ["A member text.", "A non-member text.", "Half a label.", "No label."],
                  "label": [1.0, 0.0, 0.5, None]}).to_parquet(path, index=False)
    docs, passages, rejected = load_labelled(path, member_texts_set(), source="member_texts")
    assert [(p.text, p.label) for p in passages] == [("A member text.", 1), ("A non-member text.", 0)]
    assert [d.meta["label"] for d in docs if d.text == "A member text."] == [1]
    assert [r.message() for r in rejected] == [
        f"{path}, line 3, key label: not exactly 0 (non-member) or 1 (member): got a number 0.5",
        f"{path}, line 4, key label: not exactly 0 (non-member) or 1 (member): got null"]


def test_a_csv_label_with_a_space_is_rejected_in_one_line_naming_file_line_and_column(tmp_path):
    """" 1" is no label of a CSV set (the cell is not the text 0 or 1): rejected, and under strict the one-line
    error names the file, the line and the column."""
    path = _write(tmp_path / "set.csv", "text,label\nA member text.,1\nA padded label., 1\nA non-member.,0\n")
    _, passages, rejected = load_labelled(path, member_texts_set(), source="member_texts")
    assert [p.label for p in passages] == [1, 0]
    assert [r.message() for r in rejected] == [
        f"{path}, line 3, key label: not exactly 0 (non-member) or 1 (member): got the text ' 1'"]
    with pytest.raises(InputError) as info:
        load_labelled(path, member_texts_set(), source="member_texts", strict=True)
    assert str(info.value) == rejected[0].message() and "\n" not in str(info.value)


def test_a_key_given_twice_in_one_record_rejects_the_row_in_json_lines_and_arrays(tmp_path):
    # json.loads keeps the last of a repeated key and drops the others without a word: the file
    # says label 0 and label 1 for one text, and which one it means is unknown
    rows = ['{"input": "An event before 2017.", "label": 1}',
            '{"input": "An event after 2023.", "label": 0}',
            '{"input": "Labelled both ways.", "label": 0, "label": 1}',
            '{"input": "First text.", "input": "Second text.", "label": 1}']
    expected = [(3, "label", "[0, 1]", "given 2 times in one record (0, then 1): which value is meant is unknown"),
                (4, "input", "['First text.', 'Second text.']",
                 "given 2 times in one record ('First text.', then 'Second text.'): which value is meant is unknown")]
    for name, content in (("w.jsonl", "\n".join(rows) + "\n"), ("w.json", "[" + ",\n".join(rows) + "]\n")):
        docs, passages, rejected = load_labelled(_write(tmp_path / name, content), WIKIMIA, source="wikimia")
        assert [(p.text, p.label) for p in passages] == [("An event before 2017.", 1), ("An event after 2023.", 0)]
        assert [(r.line, r.key, r.value, r.reason) for r in rejected] == expected


def test_the_rows_of_a_one_line_json_array_are_named_by_their_element(tmp_path):
    """to_json(orient="records") puts every element on line 1: a repeat or a bad row is named by its
    element (0-based), and each passage says which element it is; every message said "line 1"."""
    from memaudit.datasets.nyt import load_nyt

    rows = [{"input": "An event before 2017.", "label": 1}, {"input": "An event after 2023.", "label": 0},
            {"input": "An  event before 2017.", "label": 1}, {"input": "", "label": 0}]
    path = _write(tmp_path / "w.json", json.dumps(rows))
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert [(p.text, p.meta["line"], p.meta["element"]) for p in passages] == [
        ("An event before 2017.", 1, 0), ("An event after 2023.", 1, 1)]
    assert [r.message() for r in rejected] == [
        f"{path}, line 1, element 2, key input: duplicate input, first on element 0",
        f"{path}, line 1, element 3, key input: empty or whitespace-only text"]
    nyt = [{"snippet": "A Times article.", "prefix": "A", "completion": "Times article.", "label": 1},
           {"snippet": "A later article.", "prefix": "", "completion": "", "label": 0},
           {"snippet": "A Times article.", "prefix": "A", "completion": "Times article.", "label": 0}]
    path = _write(tmp_path / "n.json", json.dumps(nyt))
    docs, passages, rejected = load_nyt(path)
    assert [(p.meta["line"], p.meta["element"]) for p in passages] == [(1, 1)]
    assert [(r.element, r.key, r.reason, r.action) for r in rejected] == [
        (0, "label", "the same snippet is on element 2 (label 0): conflicting labels, every copy rejected", "rejected"),
        (1, "prefix", "empty prefix: kept for the cloze probe; the prefix probe has no prefix for it", "kept"),
        (1, "completion", "empty completion: kept for the cloze probe; the prefix probe has no completion for it",
         "kept"),
        (2, "label", "the same snippet is on element 0 (label 1): conflicting labels, every copy rejected", "rejected")]


def test_a_truncated_csv_whose_last_row_leaves_a_quote_open_rejects_that_row(tmp_path):
    """A file cut inside a quoted field: the lenient re-split gave the right field count, and the
    cut row loaded (here with label 1, the text cut mid-sentence) without a word."""
    path = _write(tmp_path / "w.csv", 'input,label\nAn event before 2017.,1\nAn event after 2023.,0\n'
                                      '"A third event, cut off mid-sen,1')
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert [(p.text, p.meta["line"]) for p in passages] == [("An event before 2017.", 2), ("An event after 2023.", 3)]
    assert [r.message() for r in rejected] == [
        f"{path}, line 4, key (record): unclosed quote: the file ends inside this row"]
    path = _write(tmp_path / "h.csv", 'input,"label')
    with pytest.raises(InputError, match=r"h\.csv, line 1: not valid CSV \(unclosed quote: the file ends inside "
                                         r"this row\)$"):
        load_labelled(path, WIKIMIA, source="wikimia")


def test_json_nested_past_the_recursion_limit_is_that_rows_parse_error(tmp_path):
    """200,000 '[' raised RecursionError with a traceback: a JSON line so nested is one rejected row
    (in the QA sets too), an array element so nested a one-line error, as other broken JSON is."""
    from memaudit.datasets.qa import read_qa_jsonl

    deep = "[" * 200_000
    path = _write(tmp_path / "w.jsonl", WIKIMIA_JSONL + deep + "\n")
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert len(passages) == 4
    assert [(r.line, r.key, r.reason) for r in rejected] == [(5, "(record)", "not valid JSON (nested too deeply)")]
    path = _write(tmp_path / "q.jsonl", '{"question": "Q1?", "answer": "x"}\n' + deep + "\n")
    questions, rejected = read_qa_jsonl(path)
    assert [q.question for q in questions] == ["Q1?"] and [(r.line, r.reason) for r in rejected] == [
        (2, "not valid JSON (nested too deeply)")]
    path = _write(tmp_path / "w.json", '[{"input": "a", "label": 1},\n ' + deep)
    with pytest.raises(InputError, match=r"w\.json, line 2, column 2: not valid JSON \(element 1 is nested too "
                                         r"deeply\)$"):
        load_labelled(path, WIKIMIA, source="wikimia")


def test_a_multi_line_field_of_a_crlf_csv_has_the_texts_of_the_same_set_in_json(tmp_path):
    """The text kept the file's CRLF ('line one\\r\\nline two'); the set as JSON gives '\\n'."""
    text = "line one\nline two\nthree"
    rows = [{"input": text, "label": 1}, {"input": "second row", "label": 0}]
    csv_path = _write(tmp_path / "w.csv", 'input,label\r\n"line one\r\nline two\rthree",1\r\nsecond row,0\r\n')
    json_path = _write(tmp_path / "w.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    from_csv = load_labelled(csv_path, WIKIMIA, source="wikimia")[1]
    assert [(p.text, p.meta["line"]) for p in from_csv] == [(text, 2), ("second row", 5)]
    assert [(p.passage_id, p.text) for p in from_csv] == [
        (p.passage_id, p.text) for p in load_labelled(json_path, WIKIMIA, source="wikimia")[1]]


def test_a_csv_row_of_empty_fields_is_rejected_with_its_line_and_a_blank_line_is_skipped(tmp_path):
    # DataFrame.to_csv(index=False) writes a row of missing values as ",": a row of the set, not a blank line
    path = _write(tmp_path / "w.csv", 'input,label\nAn event before 2017.,1\n,\n\n" ",\nAn event after 2023.,0\n')
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert [(p.text, p.label, p.meta["line"]) for p in passages] == [("An event before 2017.", 1, 2),
                                                                     ("An event after 2023.", 0, 6)]
    assert [r.message() for r in rejected] == [f"{path}, line 3, key input: empty or whitespace-only text",
                                               f"{path}, line 5, key input: empty or whitespace-only text"]


@pytest.mark.parametrize("content, message", [
    (b"", r"w\.jsonl: empty file$"),
    (b'{"input": "only members", "label": 1}\n', r"w\.jsonl: every usable row has label 1; a benchmark needs "
                                                 r"members and non-members$"),
    (b'{"input": "", "label": 1}\n', r"w\.jsonl: no usable text \(1 rejected; first: .*line 1, key input: "
                                     r"empty or whitespace-only text\)$"),
    (b'{"input": "caf\xe9", "label": 1}\n', r"w\.jsonl, line 1: invalid UTF-8 at byte offset 14 \(byte 0xe9\)"),
])
def test_unusable_files_are_one_line_input_errors(tmp_path, content, message):
    with pytest.raises(InputError, match=message) as info:
        load_labelled(_write(tmp_path / "w.jsonl", content), WIKIMIA, source="wikimia")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match=r"is a directory, expected WikiMIA$"):
        load_labelled(tmp_path, WIKIMIA, source="wikimia")
    csv_path = _write(tmp_path / "w.csv", "text,label\nA,1\n")
    with pytest.raises(InputError, match=r"w\.csv, line 1: missing column\(s\) input \(expected input, label, any "
                                         r"case; found text, label\)$"):
        load_labelled(csv_path, WIKIMIA, source="wikimia")


def test_random_or_truncated_files_load_with_every_row_accounted_for_or_fail_in_one_line(tmp_path):
    @settings(max_examples=120, deadline=None)
    @given(data=st.binary(max_size=400), cut=st.integers(min_value=0, max_value=len(WIKIMIA_JSONL)),
           suffix=st.sampled_from([".jsonl", ".csv", ".json"]))
    def check(data, cut, suffix):
        path = _write(tmp_path / f"f{suffix}", WIKIMIA_JSONL.encode()[:cut] + data)
        try:
            docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
        except InputError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))
            return
        assert {p.label for p in passages} == {0, 1} and len(docs) == len(passages)
        assert all(r.file == str(path) and r.line >= 1 and r.reason for r in rejected)
        # every loaded text is a row of the file, unchanged but for surrounding whitespace
        raw = path.read_bytes().decode("utf-8", errors="replace")
        assert all(p.text in raw or json.dumps(p.text)[1:-1] in raw for p in passages)

    assert run_cases(check, "WikiMIA files") >= 100


def test_published_blocks_build_wikimia_and_member_texts_benchmarks(tmp_path):
    wikimia = _write(tmp_path / "WikiMIA_length32.jsonl", WIKIMIA_JSONL + '{"input":"","label":1}\n')
    rejects: list = []
    docs, passages = build_benchmark("wiki", {"published": {"format": "wikimia", "path": str(wikimia)}}, ASSETS, 13,
                                     rejects=rejects)
    assert len(docs) == len(passages) == 4 and {d.meta["benchmark"] for d in docs} == {"wiki"}
    assert [(r.line, r.key, r.reason) for r in rejects] == [(5, "input", "empty or whitespace-only text")]
    xsum = _write(tmp_path / "bbc.jsonl", "".join(json.dumps({"summary": f"Summary {i} of a story.", "label": i % 2})
                                                  + "\n" for i in range(6)))
    docs, passages = build_benchmark("bbc", {"published": {"format": "member_texts", "path": str(xsum),
                                                           "text_key": "summary"}}, ASSETS, 13, rejects=[])
    assert sorted(p.label for p in passages) == [0, 0, 0, 1, 1, 1]


def test_the_config_accepts_the_formats_and_names_wrong_keys():
    def config(published: dict) -> dict:
        return {"benchmarks": {"wiki": {"published": published}},
                "models": {"m": {"family": "f", "source": {"path": "/m"}}}}

    validate_config(config({"format": "wikimia", "path": "w.jsonl", "strict": True}))
    validate_config(config({"format": "member_texts", "path": "x.jsonl", "text_key": "document"}))
    # a QA set that labels its own questions (label_key) is not split
    validate_config(config({"format": "qa", "path": "q.jsonl", "label_key": "seen", "group_key": "passage"}))
    wrong = [
        ({"format": "wikimia", "path": "w.jsonl", "text_key": "input"},
         r"benchmarks\.wiki\.published\.text_key: only format member_texts names its text field"),
        ({"format": "member_texts", "path": "x.jsonl", "text_key": " Label"},
         r"benchmarks\.wiki\.published\.text_key: ' Label' is the field that holds each row's label \(1 = member\); "
         r"name the field that holds the text$"),
        ({"format": "wikimia"}, r"benchmarks\.wiki\.published\.path: the wikimia set is read from a local file"),
        ({"format": "wikimia", "path": "w.jsonl", "group_key": "passage"},
         r"benchmarks\.wiki\.published\.group_key: only format qa groups its questions by a field"),
        ({"format": "wikimia", "path": "w.jsonl", "label_key": "seen"},
         r"benchmarks\.wiki\.published\.label_key: only format qa reads each question's label from a field"),
        ({"format": "qa", "path": "q.jsonl", "label_key": "seen", "member_fraction": 0.3},
         r"benchmarks\.wiki\.published\.member_fraction: the QA set labels its own questions \(label_key 'seen'\); "
         r"memaudit splits only an unlabelled set"),
    ]
    for published, message in wrong:
        with pytest.raises(ConfigError, match=message):
            validate_config(config(published))


def test_a_text_in_nfc_and_in_nfd_is_one_text_repeated_or_labelled_both_ways(tmp_path):
    """"Café" composed (NFC, U+00E9) and decomposed (NFD, e + U+0301) are the same text to a reader: a copy
    in the other form is a duplicate, and given the other label it is a conflict, not two texts."""
    import unicodedata

    nfc = "Café Society was a nightclub in Greenwich Village, New York City, that opened in 1938"
    nfd = unicodedata.normalize("NFD", nfc)
    rows = [{"input": nfc, "label": 1}, {"input": "The Battle of Bakhmut is an ongoing engagement.", "label": 0},
            {"input": nfd, "label": 1}, {"input": "Another event before 2017.", "label": 1},
            {"input": unicodedata.normalize("NFD", "Zoë was born in 1990."), "label": 0},
            {"input": "Zoë was born in 1990.", "label": 1}]
    path = _write(tmp_path / "w.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    docs, passages, rejected = load_labelled(path, WIKIMIA, source="wikimia")
    assert [(p.meta["line"], p.label) for p in passages] == [(1, 1), (2, 0), (4, 1)]
    assert [(r.line, r.key, r.reason) for r in rejected] == [
        (3, "input", "duplicate input, first on line 1"),
        (5, "label", "the same input is on line 6 (label 1): conflicting labels, every copy rejected"),
        (6, "label", "the same input is on line 5 (label 0): conflicting labels, every copy rejected")]
    # the id is the text's whichever form it comes in
    nfd_only = _write(tmp_path / "d.jsonl", "".join(json.dumps(r) + "\n" for r in [rows[2], rows[1]]))
    assert load_labelled(nfd_only, WIKIMIA, source="wikimia")[1][0].doc_id == passages[0].doc_id


def test_a_non_member_sharing_a_run_with_a_member_keeps_its_label_with_a_row_saying_so(tmp_path):
    """Labels given by the set are never moved, but a non-member that repeats a member's 13-word run (a
    reprint, a quoted paragraph; in either Unicode form) was seen in training: a ``kept`` row says so,
    as the articles and labels-file loaders write one (it went unmentioned)."""
    from memaudit.datasets.nyt import load_nyt
    import unicodedata

    # no 13-word run of it is free of "café": in NFD (e + U+0301) that was the word "cafe" and a break
    story = "the council voted on tuesday to close the old café by the river for repairs until next spring"
    rows = [{"text": "Résumé: " + story, "label": 1},
            {"text": "An unrelated member text about a football match.", "label": 1},
            {"text": unicodedata.normalize("NFD", "Reprinted résumé: " + story + " said the mayor."), "label": 0},
            {"text": "An unrelated non-member text about the weather.", "label": 0},
            {"text": "The council voted on Tuesday to close the old café by the river, a member again.",
             "label": 1}]
    path = _write(tmp_path / "x.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    docs, passages, rejected = load_labelled(path, member_texts_set(), source="member_texts")
    assert sorted(p.label for p in passages) == [0, 0, 1, 1, 1]
    assert [(r.line, r.key, r.action, r.reason) for r in rejected] == [
        (3, "text", "kept", "a non-member that shares a 13-word run with the member(s) on line 1, line 5: "
                            "kept with its label")]
    nyt = [{"snippet": "Times: " + story, "prefix": "Times:", "completion": story, "label": 1},
           {"snippet": "A later article repeats it: " + story, "prefix": "A", "completion": "later", "label": 0},
           {"snippet": "A later article of its own.", "prefix": "A", "completion": "later", "label": 0}]
    path = _write(tmp_path / "n.json", json.dumps(nyt))
    assert [(r.element, r.key, r.action, r.reason) for r in load_nyt(path)[2]] == [
        (1, "snippet", "kept", "a non-member that shares a 13-word run with the member(s) on element 0: "
                               "kept with its label")]
