"""The information-guided probes' datasets: the NYT Exhibit J set, an auditor's article folder,
QA contamination sets and the demo QA source, under the published-data policy."""

from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memaudit.config import validate_config
from memaudit.datasets.articles import build_articles
from memaudit.datasets.build import build_benchmark
from memaudit.datasets.nyt import load_nyt, nyt_doc_id
from memaudit.datasets.prefix import prefix_items
from memaudit.datasets.published import published_benchmark
from memaudit.datasets.qa import contamination_split, load_qa_jsonl, read_qa_jsonl, render_qa
from memaudit.datasets.rejects import (REJECT_COLUMNS, benchmark_rejects_path, count_rejects, write_benchmark_rejects,
                                      write_rejects)
from memaudit.datasets.sources import load_source
from file_helpers import run_cases, write_file
from memaudit.errors import ConfigError, InputError

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "resources" / "demo"

# ----------------------------------------------------------------------------- the NYT excerpt

# Three made-up articles in the shape of lasha-nlp/NYT_Memorization (snippet = prefix + " " +
# completion; label 1 = Exhibit J, 0 = a later article from another outlet).
NYT_ROWS = [
    {"snippet": "The city\u2019s transit agency said on Monday that it would run trains 24/7 on the Harbor "
                "line.\n\nRiders, who had waited two years for the change, called it \u201clong overdue.\u201d",
     "prefix": "The city\u2019s transit agency said on Monday",
     "completion": "that it would run trains 24/7 on the Harbor line.\n\nRiders, who had waited two years for "
                   "the change, called it \u201clong overdue.\u201d",
     "label": 1},
    {"snippet": "A small museum in Vermont has returned a painting seized in 1942 to the heirs of its owner.",
     "prefix": "A small museum in Vermont",
     "completion": "has returned a painting seized in 1942 to the heirs of its owner.",
     "label": 1},
    {"snippet": "Storms knocked out power to 40,000 homes, officials said, and schools \"will stay closed.\"",
     "prefix": "Storms knocked out power to 40,000 homes,",
     "completion": "officials said, and schools \"will stay closed.\"",
     "label": 0},
]

# DataFrame.to_json(orient="records", lines=True) (what Dataset.to_json writes): compact objects,
# "\/" and "\uXXXX" escapes, newlines in articles as "\n", a newline after every record.
NYT_JSONL = (
    '{"snippet":"The city\\u2019s transit agency said on Monday that it would run trains 24\\/7 on the Harbor '
    'line.\\n\\nRiders, who had waited two years for the change, called it \\u201clong overdue.\\u201d",'
    '"prefix":"The city\\u2019s transit agency said on Monday","completion":"that it would run trains 24\\/7 '
    'on the Harbor line.\\n\\nRiders, who had waited two years for the change, called it \\u201clong '
    'overdue.\\u201d","label":1}\n'
    '{"snippet":"A small museum in Vermont has returned a painting seized in 1942 to the heirs of its owner.",'
    '"prefix":"A small museum in Vermont","completion":"has returned a painting seized in 1942 to the heirs of '
    'its owner.","label":1}\n'
    '{"snippet":"Storms knocked out power to 40,000 homes, officials said, and schools \\"will stay closed.\\"",'
    '"prefix":"Storms knocked out power to 40,000 homes,","completion":"officials said, and schools \\"will stay '
    'closed.\\"","label":0}\n'
)

# DataFrame.to_csv(index=False) (what Dataset.to_csv writes): a header, fields with commas,
# quotes or newlines quoted (quotes doubled), UTF-8 unescaped; the first record spans lines 2-6.
NYT_CSV = (
    'snippet,prefix,completion,label\n'
    '"The city\u2019s transit agency said on Monday that it would run trains 24/7 on the Harbor line.\n'
    '\n'
    'Riders, who had waited two years for the change, called it \u201clong overdue.\u201d",'
    'The city\u2019s transit agency said on Monday,"that it would run trains 24/7 on the Harbor line.\n'
    '\n'
    'Riders, who had waited two years for the change, called it \u201clong overdue.\u201d",1\n'
    'A small museum in Vermont has returned a painting seized in 1942 to the heirs of its owner.,'
    'A small museum in Vermont,has returned a painting seized in 1942 to the heirs of its owner.,1\n'
    '"Storms knocked out power to 40,000 homes, officials said, and schools ""will stay closed.""",'
    '"Storms knocked out power to 40,000 homes,","officials said, and schools ""will stay closed.""",0\n'
)


_write = write_file


def test_the_excerpts_are_what_pandas_writes_for_the_set():
    frame = pd.DataFrame(NYT_ROWS)
    assert frame.to_json(orient="records", lines=True) == NYT_JSONL
    assert frame.to_csv(index=False) == NYT_CSV


@pytest.mark.parametrize("name, text, lines", [("nyt.jsonl", NYT_JSONL, [1, 2, 3]),
                                                ("nyt.csv", NYT_CSV, [2, 7, 8])])
def test_the_nyt_excerpt_loads_its_fields_labels_and_lines(tmp_path, name, text, lines):
    path = _write(tmp_path / name, text)
    docs, passages, rejected = load_nyt(path)
    assert rejected == []
    assert [p.text for p in passages] == [r["snippet"] for r in NYT_ROWS]
    assert [p.label for p in passages] == [1, 1, 0]
    assert [p.meta["prefix"] for p in passages] == [r["prefix"] for r in NYT_ROWS]
    assert [p.meta["completion"] for p in passages] == [r["completion"] for r in NYT_ROWS]
    assert [p.meta["line"] for p in passages] == lines
    assert passages[0].text.count("\n") == 2 and "\u201clong overdue.\u201d" in passages[0].text
    assert [p.doc_id for p in passages] == [nyt_doc_id(r["snippet"]) for r in NYT_ROWS]
    assert passages[2].passage_id == nyt_doc_id(NYT_ROWS[2]["snippet"]) + "#p0"
    assert sorted(d.doc_id for d in docs) == [d.doc_id for d in docs] == sorted(p.doc_id for p in passages)
    by_id = {d.doc_id: d for d in docs}
    doc = by_id[passages[2].doc_id]
    assert (doc.kind, doc.title, doc.author, doc.meta["label"], doc.text) == ("news", "", "", 0, NYT_ROWS[2]["snippet"])


def test_the_readme_column_names_and_extra_columns_load_too(tmp_path):
    frame = pd.DataFrame(NYT_ROWS).rename(columns=str.capitalize)
    frame.insert(0, "url", ["a", "b", "c"])
    docs, passages, rejected = load_nyt(_write(tmp_path / "nyt.csv", frame.to_csv(index=False)))
    assert [p.meta["extra"] for p in passages] == [{"url": "a"}, {"url": "b"}, {"url": "c"}]
    assert [p.label for p in passages] == [1, 1, 0] and rejected == []
    # a JSON array of the same records, each element at the line where it starts
    array = json.dumps(NYT_ROWS, indent=2)
    _, passages, _ = load_nyt(_write(tmp_path / "nyt.json", array))
    assert [p.meta["line"] for p in passages] == [2, 8, 14]


def _jsonl(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


BAD_NYT = _jsonl(
    {"snippet": "Good one.", "prefix": "Good", "completion": "one.", "label": 1},       # 1 kept
    {"snippet": "  ", "prefix": "", "completion": "", "label": 1},                         # 2 empty snippet
    {"snippet": "Two.", "prefix": "T", "completion": "wo.", "label": 2},                  # 3 label 2
    {"snippet": "Three.", "prefix": "T", "completion": "hree.", "label": "1"},            # 4 label as text
    {"snippet": "Four.", "prefix": "F", "completion": "our.", "label": True},             # 5 label boolean
    {"snippet": "Fi\u0000ve.", "prefix": "F", "completion": "ive.", "label": 0},          # 6 NUL
    '{"snippet": "broken", ',                                                              # 7 not JSON
    {"snippet": "Good one.", "prefix": "Good", "completion": "one.", "label": 1},        # 8 duplicate
    {"snippet": "Clash.", "prefix": "C", "completion": "lash.", "label": 1},              # 9 conflict
    {"snippet": "Clash. ", "prefix": "C", "completion": "lash.", "label": 0},             # 10 conflict
    [1, 2],                                                                                # 11 not an object
    {"snippet": "No label.", "prefix": "N", "completion": "o label."},                    # 12 missing label
    {"snippet": "Other.", "prefix": "", "completion": "Other.", "label": 0},              # 13 kept, note
)


def test_bad_nyt_rows_are_rejected_with_file_line_key_and_reason(tmp_path):
    path = _write(tmp_path / "nyt.jsonl", BAD_NYT)
    docs, passages, rejected = load_nyt(path)
    assert [p.text for p in passages] == ["Good one.", "Other."]
    assert [p.label for p in passages] == [1, 0]
    assert {r.file for r in rejected} == {str(path)}
    assert [(r.line, r.key, r.action) for r in rejected] == [
        (2, "snippet", "rejected"), (3, "label", "rejected"), (4, "label", "rejected"), (5, "label", "rejected"),
        (6, "snippet", "rejected"), (7, "(record)", "rejected"), (8, "snippet", "rejected"),
        (9, "label", "rejected"), (10, "label", "rejected"), (11, "(record)", "rejected"),
        (12, "label", "rejected"), (13, "prefix", "kept")]
    reasons = [r.reason for r in rejected]
    assert reasons[0] == "empty or whitespace-only text"
    assert reasons[1] == "not exactly 0 (other outlet, after the cutoff) or 1 (Exhibit J): got a number 2"
    assert reasons[2].endswith("got a string '1'") and reasons[3].endswith("got a boolean True")
    assert reasons[4] == "contains a NUL character at position 2"
    assert reasons[5].startswith("not valid JSON (")
    assert reasons[6] == "duplicate snippet, first on line 1"
    assert reasons[7] == "the same snippet is on line 10 (label 0): conflicting labels, every copy rejected"
    assert reasons[8] == "the same snippet is on line 9 (label 1): conflicting labels, every copy rejected"
    assert reasons[9] == "expected an object, got an array" and reasons[10] == "missing key"
    assert rejected[1].value == "2" and rejected[4].value == "'Fi\\x00ve.'"
    assert rejected[0].message() == f"{path}, line 2, key snippet: empty or whitespace-only text"


def test_the_summary_counts_each_benchmarks_rejects_by_file_and_reason(tmp_path):
    from memaudit.stats.headline import rejects_summary

    path = _write(tmp_path / "nyt.jsonl", BAD_NYT)
    rejected = load_nyt(path)[2]
    write_rejects(tmp_path / "nyt_rejects.csv", rejected)
    write_rejects(tmp_path / "clean_rejects.csv", [])
    table = count_rejects({"nyt": tmp_path / "nyt_rejects.csv", "clean": tmp_path / "clean_rejects.csv"})
    assert list(table.columns) == ["benchmark", "file", "reason", "action", "n_rows"]
    # a clean benchmark keeps its row (checked, nothing left out); every rejected row is counted once
    assert table.iloc[0].to_dict() == {"benchmark": "clean", "file": "", "reason": "", "action": "", "n_rows": 0}
    nyt = table[table["benchmark"] == "nyt"]
    assert nyt["n_rows"].sum() == len(rejected) == 12
    assert set(nyt["file"]) == {str(path)}
    assert nyt.set_index(["reason", "action"])["n_rows"].to_dict()[("missing key", "rejected")] == 1
    assert int(nyt.loc[nyt["action"] == "kept", "n_rows"].sum()) == 1
    assert int(nyt.loc[nyt["reason"].str.startswith("not valid JSON"), "n_rows"].sum()) == 1
    text = rejects_summary(table)
    # the kept row is no row left out: it was counted among them ("left out by the loaders (12;")
    assert text.splitlines()[0] == ("Input rows left out by the loaders (11; 1 more kept with a note; each row "
                                    "with its line in results/datasets/<benchmark>/rejects.csv):")
    assert f"  nyt: 1 kept in {path}: " + nyt.loc[nyt["action"] == "kept", "reason"].iloc[0] in text.splitlines()
    kept_only = rejects_summary(table[table["action"] != "rejected"])
    assert kept_only.splitlines()[0] == ("Input rows left out by the loaders: none; 1 kept with a note (each row "
                                         "with its line in results/datasets/<benchmark>/rejects.csv):")
    assert f"  nyt: 1 rejected in {path}: missing key" in text.splitlines()
    assert rejects_summary(table[table["benchmark"] == "clean"]) == (
        "Input rows left out by the loaders: none (1 benchmark checked).")
    (tmp_path / "not_rejects.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match=r"not_rejects.csv: not a rejects table \(no column 'file'\)"):
        count_rejects({"x": tmp_path / "not_rejects.csv"})


def test_strict_mode_makes_the_first_rejected_row_an_input_error(tmp_path):
    path = _write(tmp_path / "nyt.jsonl", BAD_NYT)
    with pytest.raises(InputError) as info:
        load_nyt(path, strict=True)
    assert str(info.value) == (f"{path}, line 2, key snippet: empty or whitespace-only text "
                               f"(11 rows rejected in all)")
    ok = _write(tmp_path / "ok.jsonl", NYT_JSONL)
    assert len(load_nyt(ok, strict=True)[1]) == 3  # a note-free file loads under strict too


@pytest.mark.parametrize("content, message", [
    (b"", r"nyt\.jsonl: empty file$"),
    (b"  \n\n", r"nyt\.jsonl: empty file$"),
    (NYT_JSONL.encode() + b'{"snippet": "caf\xe9"}\n', r"nyt\.jsonl, line 4: invalid UTF-8 at byte offset \d+ "
                                                       r"\(byte 0xe9\); convert the file to UTF-8$"),
    (_jsonl({"snippet": "", "label": 1}).encode(), r"nyt\.jsonl: no usable article \(1 rejected; first: .*line 1, "
                                                   r"key snippet: empty or whitespace-only text\)$"),
])
def test_unreadable_nyt_files_are_one_line_input_errors(tmp_path, content, message):
    with pytest.raises(InputError, match=message) as info:
        load_nyt(_write(tmp_path / "nyt.jsonl", content))
    assert "\n" not in str(info.value)


def test_nyt_paths_that_are_no_file_are_input_errors(tmp_path, monkeypatch):
    with pytest.raises(InputError, match=r"is a directory, expected the NYT Exhibit J set$"):
        load_nyt(tmp_path)
    with pytest.raises(InputError, match=r"missing\.jsonl: file not found$"):
        load_nyt(tmp_path / "missing.jsonl")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^lasha-nlp/NYT_Memorization: looks like a Hugging Face Hub id, and the "
                                         r"NYT Exhibit J set is read from a local file"):
        load_nyt("lasha-nlp/NYT_Memorization")
    csv_path = _write(tmp_path / "nyt.csv", "snippet,prefix,label\nA,B,1\n")
    with pytest.raises(InputError, match=r"nyt\.csv, line 1: missing column\(s\) completion \(expected snippet, "
                                         r"prefix, completion, label, any case; found snippet, prefix, label\)$"):
        load_nyt(csv_path)
    # a last row whose quote is never closed (a truncated file) is one rejected row, whatever its field count
    _, passages, rejected = load_nyt(_write(tmp_path / "q.csv", NYT_CSV + '"Unclosed,quote,1\n'))
    assert len(passages) == 3 and [(r.line, r.reason) for r in rejected] == [
        (9, "unclosed quote: the file ends inside this row")]
    _, passages, rejected = load_nyt(_write(tmp_path / "q.csv", NYT_CSV + 'Cut off,a,"b,0'))
    assert len(passages) == 3 and [(r.line, r.reason) for r in rejected] == [
        (9, "unclosed quote: the file ends inside this row")]


def test_a_parquet_file_needs_pyarrow_or_loads_like_the_jsonl(tmp_path, monkeypatch):
    path = tmp_path / "0000.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        _write(path, b"PAR1" + b"\0" * 16 + b"PAR1")
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        with pytest.raises(InputError, match=r"0000\.parquet: reading parquet needs pyarrow \(pip install "
                                             r"pyarrow\), or convert the file to JSON lines"):
            load_nyt(path)
        return
    pd.DataFrame(NYT_ROWS).to_parquet(path, index=False)
    _, passages, rejected = load_nyt(path)
    assert [p.text for p in passages] == [r["snippet"] for r in NYT_ROWS] and rejected == []
    assert [p.meta["line"] for p in passages] == [1, 2, 3]  # row numbers


def test_a_null_prefix_or_completion_is_kept_as_empty_as_an_empty_csv_cell_is(tmp_path):
    """The same set, a row without prefix and completion: null in parquet and JSON lines (what
    Dataset.to_parquet / to_json write for a missing value), an empty cell in CSV. Each loads all three
    rows, the row kept with the same two notes; a null snippet or label is still rejected."""
    rows = [dict(r) for r in NYT_ROWS]
    rows[2].update(prefix=None, completion=None)
    frame = pd.DataFrame(rows)
    paths = [tmp_path / "nyt.jsonl", tmp_path / "nyt.csv"]
    frame.to_json(paths[0], orient="records", lines=True)
    frame.to_csv(paths[1], index=False)
    if importlib.util.find_spec("pyarrow") is not None:
        paths.append(tmp_path / "nyt.parquet")
        frame.to_parquet(paths[-1], index=False)
    assert '"prefix":null,"completion":null' in paths[0].read_text()
    for path in paths:
        _, passages, rejected = load_nyt(path)
        assert [p.label for p in passages] == [1, 1, 0], path
        assert (passages[2].meta["prefix"], passages[2].meta["completion"]) == ("", ""), path
        assert [(r.key, r.action) for r in rejected] == [("prefix", "kept"), ("completion", "kept")], path
        assert rejected[0].reason.startswith("empty prefix: kept for the cloze probe"), path
    bad = _write(tmp_path / "bad.jsonl", _jsonl({"snippet": None, "prefix": None, "completion": None, "label": 1},
                                                 {"snippet": "S.", "prefix": None, "completion": "x", "label": None},
                                                 *NYT_ROWS))
    _, passages, rejected = load_nyt(bad)
    assert len(passages) == 3
    assert [(r.line, r.key, r.reason) for r in rejected if r.action == "rejected"] == [
        (1, "snippet", "expected a string, got null"), (2, "label", "not exactly 0 (other outlet, after the cutoff) "
                                                                    "or 1 (Exhibit J): got null")]


def test_a_published_prefix_is_shown_as_published_its_breaks_and_spacing_kept(tmp_path):
    """The prefix probe shows a model the set's Exhibit J prefix as published: its paragraph break and its
    spacing kept, only the trailing newline the loader strips gone (its words were joined by single spaces,
    so the model never saw the prefix the lawsuit's evidence gave). The completion is the reference, scored
    on its words. JSON lines and CSV (CRLF inside its quoted field) give the same prefix."""
    prefix = "TRANSIT\n\nThe city\u2019s  transit agency said on Monday\n"
    rows = [dict(NYT_ROWS[0], prefix=prefix), *NYT_ROWS[1:]]
    jsonl = _write(tmp_path / "nyt.jsonl", _jsonl(*rows))
    csv_path = tmp_path / "nyt.csv"
    csv_path.write_bytes(pd.DataFrame(rows).to_csv(index=False, lineterminator="\r\n").encode("utf-8"))
    for path in (jsonl, csv_path):
        _, passages, rejected = load_nyt(path)
        assert rejected == [], path
        assert passages[0].meta["prefix"] == "TRANSIT\n\nThe city\u2019s  transit agency said on Monday", path
        items = prefix_items(passages, prefix_words=50, continuation_words=6, min_continuation_words=3)
        assert [(it.prefix, it.continuation, it.meta["prefix_words"]) for it in items] == [
            ("TRANSIT\n\nThe city\u2019s  transit agency said on Monday", "that it would run trains 24/7", 8),
            ("A small museum in Vermont", "has returned a painting seized in", 5),
            ("Storms knocked out power to 40,000 homes,", "officials said, and schools \"will stay", 7)], path


def test_random_and_truncated_nyt_files_load_with_rejects_or_fail_in_one_line(tmp_path):
    @settings(max_examples=60, deadline=None)
    @given(data=st.one_of(st.binary(max_size=300),
                          st.integers(0, len(NYT_JSONL.encode())).map(lambda n: NYT_JSONL.encode()[:n]),
                          st.integers(0, len(NYT_CSV.encode())).map(lambda n: NYT_CSV.encode()[:n])),
           suffix=st.sampled_from([".jsonl", ".csv", ".json", ".txt"]))
    def check(data, suffix):
        path = _write(tmp_path / f"nyt{suffix}", data)
        try:
            docs, passages, rejected = load_nyt(path)
        except InputError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
        else:
            assert len(docs) == len(passages) >= 1 and all(p.label in (0, 1) for p in passages)
            assert all(r.file == str(path) and r.line >= 1 for r in rejected)

    assert run_cases(check, "NYT files") >= 50


# ----------------------------------------------------------------------------- articles

ARTICLE = ("The city council voted 7 to 2 on Tuesday to approve the Riverside rezoning plan, clearing the way "
           "for 1,200 apartments on the old rail yard. Supporters said the \u201cplan\u201d would ease rents "
           "across the east side within five years. Critics warned that the site floods every spring and that "
           "the developer had not paid for new drainage. The mayor, who backed the plan, said the city would "
           "hold the developer to its promises and publish an annual report on the project.")


def _pdf(path: Path, text: str | None, width: int = 70) -> Path:
    """A one- or two-page PDF with ``text`` wrapped in lines; ``None``: a page with a drawing only."""
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    pdf = canvas.Canvas(str(path), invariant=1)
    if text is None:
        pdf.rect(72, 600, 200, 100, fill=1)  # a scan has images and no text layer either
    else:
        lines = textwrap.wrap(text, width)
        for page in (lines[:4], lines[4:]):
            y = 750
            for line in page:
                pdf.drawString(72, y, line)
                y -= 14
            pdf.showPage()
    pdf.save()
    return path


def test_a_pdf_and_a_txt_of_an_article_become_records_of_the_same_words(tmp_path):
    """A .txt keeps its paragraph breaks; a PDF without blank lines in its text layer has its lines and pages
    joined (a typesetter's line breaks): the same words, the same near-duplicate, the same prefix words."""
    folder = tmp_path / "archive"
    _pdf(folder / "riverside.pdf", ARTICLE)
    _write(folder / "riverside-copy.txt", "Date: 2023-03-01\n" + ARTICLE.replace(". ", ".\n\n", 2) + "\n")
    _write(folder / "dates.csv", "file,date,title\nriverside.pdf,2022-05-01,Council approves Riverside plan\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    # the same text on both sides of the cutoff: kept with the labels the dates give, and said so
    assert [(r.file, r.value, r.action, r.reason) for r in rejected] == [
        (str(folder / "riverside-copy.txt"), "riverside-copy.txt", "kept",
         "a non-member that shares a 13-word run with member(s) riverside.pdf: kept with the label its date gives")]
    pdf, txt = passages  # by passage id: articles/riverside, articles/riverside-copy
    assert (pdf.doc_id, txt.doc_id) == ("articles/riverside", "articles/riverside-copy")
    assert pdf.text == " ".join(ARTICLE.split())
    assert txt.text == ARTICLE.replace(". ", ".\n\n", 2)
    assert pdf.meta["n_words"] == txt.meta["n_words"] == len(ARTICLE.split()) == 82
    # no published prefix: the prefix probe cuts an article at prefix_words, as any passage (it took the
    # first 50 words whatever probes.prefix.prefix_words said, labelled published)
    assert "prefix" not in pdf.meta and "completion" not in pdf.meta
    words = ARTICLE.split()
    assert words[49] == "that"
    for n in (50, 60):
        items = prefix_items([pdf, txt], prefix_words=n, continuation_words=50)
        assert [(it.prefix, it.continuation) for it in items] == [
            (" ".join(words[:n]), " ".join(words[n:n + 50])),
            (" ".join(words[:n]).replace(". ", ".\n\n", 2), " ".join(words[n:n + 50]))]  # the text as written
        assert {it.meta["prefix_source"] for it in items} == {"passage"}
    assert (pdf.label, txt.label) == (1, 0)  # before the cutoff / after it
    assert (pdf.meta["date"], txt.meta["date"]) == ("2022-05-01", "2023-03-01")
    assert (pdf.title, txt.title) == ("Council approves Riverside plan", "riverside-copy")
    assert [d.kind for d in docs] == ["news", "news"] and docs[0].meta["label"] == 1


def test_an_article_given_twice_on_one_side_of_the_cutoff_is_rejected_once(tmp_path):
    """Two copies of one article (a .txt and a .pdf of it, say) with the same label were two documents, the
    article counted twice in every statistic without a word; the later file in name order is rejected, as the
    NYT set rejects a repeated snippet. Across the cutoff both stay (the test above)."""
    folder = tmp_path / "archive"
    _pdf(folder / "riverside.pdf", ARTICLE)
    _write(folder / "riverside-copy.txt", "Date: 2022-06-01\n" + ARTICLE.replace(". ", ".\n\n", 2) + "\n")
    _write(folder / "other.txt", "Date: 2023-02-01\nA different story about the harbor ferry and its new timetable.\n")
    _write(folder / "dates.csv", "file,date\nriverside.pdf,2022-05-01\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert [(p.doc_id, p.label) for p in passages] == [("articles/other", 0), ("articles/riverside-copy", 1)]
    assert [(Path(r.file).name, r.line, r.key, r.value, r.reason, r.action) for r in rejected] == [
        ("riverside.pdf", 0, "(file)", "'riverside.pdf'", "duplicate text, first in riverside-copy.txt (label 1 "
         "too): rejected so that the article counts once", "rejected")]
    with pytest.raises(InputError, match=r"riverside\.pdf, line 0, key \(file\): duplicate text, first in "
                                         r"riverside-copy\.txt \(label 1 too\)"):
        build_articles(folder, "2023-01-01", strict=True)


def test_a_txt_articles_paragraph_breaks_are_kept(tmp_path):
    """Blank lines separate a .txt article's paragraphs (its lines joined by a space, runs of spaces collapsed),
    and a .txt without any blank line (a news export) has one paragraph per line; paragraphs are joined by a
    blank line, as the demo's Reuters articles are. The whole text was one line: the prefix probe, which shows a
    model the prefix as written, showed each paragraph break as a space."""
    folder = tmp_path / "archive"
    _write(folder / "wrapped.txt", "Date: 2022-01-01\nThe city council voted 7 to 2\non Tuesday  to approve the "
                                   "plan.\n \n\nCritics warned\tthat the site floods every spring.  \n")
    _write(folder / "export.txt", "Date: 2024-01-01\n\nThe mayor backed the plan.\r\nShe said the city would hold "
                                  "the developer to its promises.\r\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert rejected == []
    assert [(p.doc_id, p.label, p.text) for p in passages] == [
        ("articles/export", 0, "The mayor backed the plan.\n\nShe said the city would hold the developer to its "
                               "promises."),
        ("articles/wrapped", 1, "The city council voted 7 to 2 on Tuesday to approve the plan.\n\nCritics warned "
                                "that the site floods every spring.")]
    assert [d.text for d in docs] == [p.text for p in passages]
    assert [p.meta["n_words"] for p in passages] == [16, 21]  # words as before: whitespace-separated
    (item,) = prefix_items(passages[1:], prefix_words=14, continuation_words=6)
    assert (item.prefix, item.continuation) == (
        "The city council voted 7 to 2 on Tuesday to approve the plan.\n\nCritics", "warned that the site floods every")


def test_a_pdf_articles_blank_lines_are_paragraph_breaks_and_its_page_breaks_are_not(tmp_path):
    """pypdf gives a blank line where a PDF draws an empty line between paragraphs (a word processor's export):
    a paragraph break, kept. Its other line breaks are the typesetter's, joined as before, and so is a page
    break, which pypdf's page texts joined by a line break made a blank line: a paragraph break in mid-sentence
    in a user_books paper (and in an article, now that its paragraphs are kept)."""
    from reportlab.pdfgen import canvas

    from memaudit.datasets.readers import read_pdf

    folder = tmp_path / "archive"
    folder.mkdir()
    pdf = canvas.Canvas(str(folder / "plan.pdf"), invariant=1)
    for page in (["The city council voted 7 to 2 on Tuesday to approve", "the Riverside plan.", " ",
                  "Supporters said the plan would ease rents"], ["across the east side within five years."]):
        for y, line in zip(range(750, 0, -14), page):
            pdf.drawString(72, y, line)
        pdf.showPage()
    pdf.save()
    _write(folder / "dates.csv", "file,date\nplan.pdf,2022-05-01\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    plain = ("The city council voted 7 to 2 on Tuesday to approve the Riverside plan.\n\nSupporters said the plan "
             "would ease rents across the east side within five years.")
    assert [(p.doc_id, p.text, p.meta["n_words"]) for p in passages] == [("articles/plan", plain, 28)]
    assert read_pdf(folder / "plan.pdf") == plain  # a user_books paper: "rents\n\nacross"


def test_articles_named_in_another_script_keep_distinct_ids(tmp_path):
    """A file name without ASCII letters or digits (an archive in Chinese or Russian) gets ``article-`` and
    8 hex digits of its name's SHA-256, where all such files took the id ``articles/article`` and all but
    one were rejected as its duplicates; an ASCII name keeps its id."""
    folder = tmp_path / "archive"
    for name in ("東京", "北京", "Москва", "rates 2022"):  # each its own text: a copy on one side is rejected
        _write(folder / f"{name}.txt", f"Date: 2022-01-01\n{ARTICLE} {name}")
    _write(folder / "late.txt", "Date: 2024-01-01\n" + ARTICLE)
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert [(r.value, r.action) for r in rejected] == [("late.txt", "kept")]  # the same text as the members'
    assert rejected[0].reason.endswith("with member(s) 東京.txt, 北京.txt, Москва.txt, rates 2022.txt: kept with the "
                                       "label its date gives")
    assert sorted((d.doc_id, d.title) for d in docs) == [
        ("articles/article-130016b2", "東京"), ("articles/article-68c77e15", "北京"),
        ("articles/article-eb63f79a", "Москва"), ("articles/late", "late"), ("articles/rates-2022", "rates 2022")]


def test_an_article_named_in_nfd_is_found_by_its_dates_row_in_nfc_and_keeps_its_id(tmp_path):
    """A file name decomposed on disk (NFD, a Mac's HFS+), composed in dates.csv (NFC): one file, dated by its
    row, with the id its composed name gives; the row was "no such article" and the article undated."""
    import unicodedata

    folder = tmp_path / "archive"
    _write(folder / unicodedata.normalize("NFD", "Zoë's garden.txt"), ARTICLE)
    _write(folder / "later.txt", "A later article about the harbour, the ferry timetable and the winter storms.")
    _write(folder / "dates.csv", "file,date\nZoë's garden.txt,2020-01-01\nlater.txt,2024-01-01\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert rejected == []
    assert [(d.doc_id, d.meta["date"], d.meta["label"]) for d in docs] == [
        ("articles/later", "2024-01-01", 0), ("articles/zo-s-garden", "2020-01-01", 1)]


def test_unusable_articles_are_rejected_rows_with_their_reasons(tmp_path):
    folder = tmp_path / "archive"
    _pdf(folder / "scan.pdf", None)
    _write(folder / "broken.pdf", b"%PDF-1.4\nnot really a pdf")
    _write(folder / "undated.txt", ARTICLE)
    _write(folder / "latin1.txt", "Date: 2022-01-01\ncaf\xe9".encode("latin-1"))
    _write(folder / "clash.txt", "Date: 2022-02-02\n" + ARTICLE)
    _write(folder / "bad-date.txt", "Date: 2022-02-30\n" + ARTICLE)
    _write(folder / "notes.docx", b"PK\x03\x04")
    _write(folder / "on-cutoff.txt", "Date: 2023-01-01\n" + ARTICLE)
    _write(folder / "pathed.txt", ARTICLE)  # listed by a path, as find prints it: "no such article" and "no date"
    _write(folder / "dates.csv", "file,date\nscan.pdf,2022-01-01\nclash.txt,2022-03-03\nghost.pdf,2022-01-01\n"
                                 "scan.pdf,2022-01-02\non-cutoff.txt,January 1\n./pathed.txt,2022-01-01\n")
    docs, passages, rejected = build_articles(folder, dt.date(2023, 1, 1))
    assert [(p.doc_id, p.label) for p in passages] == [("articles/on-cutoff", 0)]  # on the cutoff: not before it
    got = [(Path(r.file).name, r.line, r.key, r.reason) for r in rejected]
    assert got == [
        ("bad-date.txt", 1, "Date", "first line: '2022-02-30' is not a valid date"),
        ("broken.pdf", 0, "(file)", got[1][3]),
        ("clash.txt", 1, "Date", "dates.csv line 3 says 2022-03-03, the file's Date: line says 2022-02-02"),
        ("dates.csv", 4, "file", f"no such article in {folder}"),
        ("dates.csv", 5, "file", "listed again (first on line 2)"),
        ("dates.csv", 6, "date", "'January 1' is not a date YYYY-MM-DD"),
        ("dates.csv", 7, "file", f"a path: give the file name alone ('pathed.txt'), as it is in {folder}"),
        ("latin1.txt", 0, "(file)", "not valid UTF-8 on line 2, at byte offset 20 (byte 0xe9); convert the file to "
                                    "UTF-8"),
        ("notes.docx", 0, "(file)", "not a .txt or .pdf file (.docx)"),
        ("pathed.txt", 0, "date", "no date: its dates.csv row, line 7, was rejected"),
        ("scan.pdf", 0, "(file)", "no text layer in its 1 page(s) (a scanned PDF? run OCR first)"),
        ("undated.txt", 0, "date", "no date: list it in dates.csv (file,date) or start the file with a line "
                                   "'Date: YYYY-MM-DD'; its first line is 'The city council voted 7 to 2 on Tuesday'"),
    ]
    assert got[1][3].startswith("not a readable PDF (")
    with pytest.raises(InputError, match=r"bad-date\.txt, line 1, key Date: first line: '2022-02-30' is not a "
                                         r"valid date \(12 rows rejected in all\)$"):
        build_articles(folder, "2023-01-01", strict=True)


def test_a_nul_in_a_txt_article_is_a_rejected_row_naming_its_line_and_column(tmp_path):
    """A NUL in a .txt article was dropped by clean_text without a word (a user_books book stops on one): the
    user's own file is rejected naming where it is, as a byte that is not UTF-8 is, and strict stops on it."""
    folder = tmp_path / "archive"
    _write(folder / "nul.txt", "Date: 2022-01-01\r\nThe council\r\nvoted\x00 on Tuesday.\x00\n")
    _write(folder / "good.txt", "Date: 2022-01-01\n" + ARTICLE)
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert [d.doc_id for d in docs] == ["articles/good"]
    reason = ("a NUL character at column 6 (2 in the file); an article is read as UTF-8 text: is it UTF-16 or a "
              "binary file? convert it to UTF-8")
    assert [(Path(r.file).name, r.line, r.key, r.value, r.reason) for r in rejected] == [
        ("nul.txt", 3, "(file)", "'nul.txt'", reason)]
    with pytest.raises(InputError) as info:
        build_articles(folder, "2023-01-01", strict=True)
    assert str(info.value) == f"{folder / 'nul.txt'}, line 3, key (file): {reason}"


def test_an_undated_article_says_where_its_date_was_looked_for(tmp_path):
    """Only the first line is read for a date: a blank one, or a Date: line further down, is said."""
    folder = tmp_path / "archive"
    _write(folder / "blank.txt", "\nDate: 2022-01-01\n" + ARTICLE)
    _write(folder / "headline.txt", "Council votes\n\nDate: 2022-01-01\n" + ARTICLE)
    _write(folder / "empty-first.txt", "   \n" + ARTICLE)
    _write(folder / "dated.txt", "Date: 2022-01-01\n" + ARTICLE)
    _write(folder / "later.txt", "Date: 2024-01-01\nA different text altogether about the harbour and its boats.")
    _, _, rejected = build_articles(folder, "2023-01-01")
    reasons = {Path(r.file).name: r.reason.split("'Date: YYYY-MM-DD'")[1] for r in rejected if r.action == "rejected"}
    assert reasons == {"blank.txt": "; its line 2 is a Date: line, but only the first line is read",
                       "headline.txt": "; its line 3 is a Date: line, but only the first line is read",
                       "empty-first.txt": "; its first line is blank"}


def test_an_article_whose_dates_row_is_rejected_says_so_not_to_list_it(tmp_path):
    """An article listed in dates.csv on a row with an impossible date was told to "list it in dates.csv"."""
    folder = tmp_path / "archive"
    _write(folder / "undated.txt", ARTICLE)
    _pdf(folder / "plan.pdf", "A different story about the harbor ferry and its new timetable.")
    _write(folder / "dated.txt", "Date: 2024-01-01\nA third story, about the library and its late opening hours.")
    _write(folder / "dates.csv", "file,date\nundated.txt,2022-02-30\nplan.pdf,\n")
    _, _, rejected = build_articles(folder, "2023-01-01")
    assert [(Path(r.file).name, r.line, r.key, r.reason) for r in rejected] == [
        ("dates.csv", 2, "date", "'2022-02-30' is not a valid date"),
        ("dates.csv", 3, "date", "'' is not a date YYYY-MM-DD"),
        ("plan.pdf", 0, "date", "no date: its dates.csv row, line 3, was rejected"),
        ("undated.txt", 0, "date", "no date: its dates.csv row, line 2, was rejected"),
    ]


def test_a_dates_row_with_more_fields_than_its_header_is_rejected_not_cut(tmp_path):
    """An unquoted title with a comma: the cells past the header were dropped, the title cut unseen."""
    folder = tmp_path / "archive"
    for name in ("budget", "vote", "later"):
        _write(folder / f"{name}.txt", ARTICLE)
    _write(folder / "dates.csv", 'file,date,title\nbudget.txt,2022-05-01,Budget passes, senate says\n'
                                 'vote.txt,2022-06-01,"Vote held, count delayed",\nlater.txt,2024-01-01\n')
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    assert [(p.doc_id, p.title, p.label) for p in passages] == [
        ("articles/later", "later", 0), ("articles/vote", "Vote held, count delayed", 1)]
    assert [(Path(r.file).name, r.line, r.key, r.value, r.reason) for r in rejected if r.action == "rejected"] == [
        ("budget.txt", 0, "date", "''", "no date: list it in dates.csv (file,date) or start the file with a line "
                                        "'Date: YYYY-MM-DD'; its first line is 'The city council voted 7 to 2 on "
                                        "Tuesday'"),
        ("dates.csv", 2, "(record)", "'budget.txt,2022-05-01,Budget passes, senate says'",
         "4 fields, the header has 3 (quote a title that holds a comma)")]


def test_article_folders_that_cannot_be_used_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"nowhere: no such folder \(expected a folder of \.txt/\.pdf articles\)$"):
        build_articles(tmp_path / "nowhere", "2023-01-01")
    _write(tmp_path / "empty" / "readme.md", "hello")
    with pytest.raises(InputError, match=r"empty: no \.txt or \.pdf articles$"):
        build_articles(tmp_path / "empty", "2023-01-01")
    _pdf(tmp_path / "scans" / "a.pdf", None)
    with pytest.raises(InputError, match=r"scans: no usable article \(1 rejected; first: .*a\.pdf, line 0, key "
                                         r"\(file\): no text layer"):
        build_articles(tmp_path / "scans", "2023-01-01")
    _write(tmp_path / "dated" / "a.txt", "Date: 2022-01-01\nText.")
    _write(tmp_path / "dated" / "dates.csv", "name,when\n")
    with pytest.raises(InputError, match=r"dates\.csv, line 1: missing column\(s\) file, date"):
        build_articles(tmp_path / "dated", "2023-01-01")
    with pytest.raises(ConfigError, match=r"^cutoff: '2023-13-01' is not a valid date$"):
        build_articles(tmp_path / "dated", "2023-13-01")


@functools.lru_cache(maxsize=1)
def _pdf_bytes() -> bytes:
    import io

    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, invariant=1)
    pdf.drawString(72, 750, ARTICLE[:80])
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def _ligature_pdf(lines: list[str]) -> bytes:
    """A one-page PDF whose font draws codes 1-5 as the glyphs fi, fl, ffi, ff and ffl, as a typeset PDF's
    font does (pypdf reads them as U+FB01, U+FB02, U+FB03, U+FB00 and U+FB04)."""
    content = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({line}) '" for line in lines) + " ET"
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               "/Resources << /Font << /F1 5 0 R >> >> >>",
               f"<< /Length {len(content)} >>\nstream\n{content}\nendstream",
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Type /Encoding "
               "/BaseEncoding /WinAnsiEncoding /Differences [1 /fi /fl /ffi /ff /ffl] >> >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    return out + f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


def test_a_typeset_pdfs_ligatures_are_read_as_their_letters(tmp_path):
    from memaudit.datasets.readers import read_pdf

    plain = ("The finance office said the first efficient plan for the staff would start in May, after the "
             "waffle shop had filed its final offer to the council.")
    drawn = ["The \x01nance o\x03ce said the \x01rst e\x03cient plan for the sta\x04 would start",
             "in May, after the wa\x05e shop had \x01led its \x01nal o\x04er to the council."]
    folder = tmp_path / "archive"
    _write(folder / "budget.pdf", _ligature_pdf(drawn))
    _write(folder / "budget-copy.txt", "Date: 2023-03-01\n" + plain + "\n")
    _write(folder / "dates.csv", "file,date\nbudget.pdf,2022-05-01\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    pdf, txt = passages
    assert pdf.text == txt.text == plain  # was "The \ufb01nance o\ufb03ce said the \ufb01rst ..."
    assert pdf.meta["n_words"] == 27
    # the same text across the cutoff: the kept row a reprint gets (none while the ligatures hid it)
    assert [(r.value, r.action) for r in rejected] == [("budget-copy.txt", "kept")]
    assert read_pdf(folder / "budget.pdf") == plain  # a user_books paper


def test_a_pdfs_words_hyphenated_at_line_ends_are_joined_and_its_compounds_kept(tmp_path):
    """A word the typesetter broke at a line's end ("transfor-" / "mation") is one word again, where the article
    had "transfor- mation" (and a user_books paper "COVID19", "AngloSaxon"); a soft hyphen and a no-break
    space in the .txt copy are no text and a space: the two give the same record."""
    from reportlab.pdfgen import canvas

    from memaudit.datasets.readers import read_pdf

    plain = ("The council backed a transformation of the old rail yard for COVID-19 care and an Anglo-Saxon "
             "garden, a so-called plan that the mayor said would open in the spring.")
    folder = tmp_path / "archive"
    folder.mkdir()
    pdf = canvas.Canvas(str(folder / "plan.pdf"), invariant=1)
    lines = ["The council backed a transfor-", "mation of the old rail yard for COVID-", "19 care and an Anglo-",
             "Saxon garden, a so-called plan that the", "mayor said would open in the spring."]
    for y, line in zip(range(750, 0, -14), lines):
        pdf.drawString(72, y, line)
    pdf.showPage()
    pdf.save()
    copy = plain.replace("transformation", "trans\u00adfor\u00ad\nmation").replace("19 care", "19\u00a0care")
    _write(folder / "plan-copy.txt", "Date: 2023-03-01\n" + copy + "\n")
    _write(folder / "dates.csv", "file,date\nplan.pdf,2022-05-01\n")
    docs, passages, rejected = build_articles(folder, "2023-01-01")
    pdf_record, txt_record = passages
    assert pdf_record.text == txt_record.text == plain
    assert [(r.value, r.action) for r in rejected] == [("plan-copy.txt", "kept")]  # the reprint is found
    assert read_pdf(folder / "plan.pdf") == plain  # a user_books paper


def test_random_truncated_or_corrupted_article_files_are_rejected_rows_or_records(tmp_path):
    @settings(max_examples=40, deadline=None)
    @given(data=st.one_of(st.binary(max_size=400), st.integers(0, 2000).map(lambda n: _pdf_bytes()[:n]),
                          st.tuples(st.integers(0, 2000), st.binary(min_size=1, max_size=20)).map(
                              lambda cut: _pdf_bytes()[:cut[0]] + cut[1] + _pdf_bytes()[cut[0] + len(cut[1]):])),
           suffix=st.sampled_from([".pdf", ".txt"]))
    def check(data, suffix):
        folder = tmp_path / f"random{suffix[1:]}"
        _write(folder / f"a{suffix}", data)
        _write(folder / "good.txt", "Date: 2022-01-01\n" + ARTICLE)
        _write(folder / "dates.csv", "file,date\na.pdf,2022-01-01\n" if suffix == ".pdf" else "file,date\n")
        docs, passages, rejected = build_articles(folder, "2023-01-01")
        assert "articles/good" in [d.doc_id for d in docs]
        assert len(docs) + sum(r.action == "rejected" and r.file.endswith(f"a{suffix}") for r in rejected) == 2

    assert run_cases(check, "article files") >= 30


# ----------------------------------------------------------------------------- QA sets

QA_LINES = [
    {"id": "gpqa-1", "question": "Which gas do plants release during photosynthesis?",
     "choices": ["Nitrogen", "Oxygen", "Argon", "Helium"], "answer": "Oxygen", "subject": "biology"},
    {"question": "What is added to zinc to produce hydrogen gas?",
     "choices": ["HCl", "NaCl", "Water", "Sand"], "answer": 0},
    {"question": "How many legs does a spider have?", "answer": 8},
    {"question": "Name the closest star to Earth.", "choices": None, "answer": " The Sun "},
] + [{"question": f"Filler question number {i}?", "choices": ["yes", "no"], "answer": i % 2} for i in range(6)]


def test_qa_answers_as_text_or_index_and_short_answers_load(tmp_path):
    path = _write(tmp_path / "qa.jsonl", _jsonl(*QA_LINES))
    questions, rejected = read_qa_jsonl(path)
    assert rejected == [] and len(questions) == 10
    q1, q2, q3, q4 = questions[:4]
    assert (q1.qid, q1.answer, q1.answer_index, q1.extra) == ("gpqa-1", "Oxygen", 1, {"subject": "biology"})
    assert (q2.answer, q2.answer_index, q2.line) == ("HCl", 0, 2)
    assert (q3.choices, q3.answer, q3.answer_index) == ([], "8", None)
    assert (q4.answer, q4.qid[:1], len(q4.qid)) == ("The Sun", "q", 13)
    assert render_qa(q1.question, q1.choices, q1.answer) == (
        "Which gas do plants release during photosynthesis?\nA. Nitrogen\nB. Oxygen\nC. Argon\nD. Helium\n"
        "Answer: B. Oxygen")
    assert render_qa(q3.question, q3.choices, q3.answer) == "How many legs does a spider have?\nAnswer: 8"


def test_a_qa_answer_matches_its_choice_in_either_unicode_form(tmp_path):
    """An answer written decomposed ("Cafe\u0301": e + combining accent) against a composed choice was rejected
    as "not one of the choices"; the answer taken is the choice as the file writes it, which render_qa shows."""
    path = _write(tmp_path / "qa.jsonl", _jsonl(
        {"question": "Where did they meet?", "choices": ["Caf\u00e9", "Library"], "answer": "Cafe\u0301"},
        {"question": "Which dish?", "choices": ["Cre\u0300me", "Soup"], "answer": "Cr\u00e8me"}))
    questions, rejected = read_qa_jsonl(path)
    assert rejected == []
    assert [(q.answer, q.answer_index) for q in questions] == [("Caf\u00e9", 0), ("Cre\u0300me", 0)]
    assert render_qa(questions[0].question, questions[0].choices, questions[0].answer).endswith("Answer: A. Caf\u00e9")


def test_the_qa_split_is_seeded_half_and_half_and_independent_of_file_order(tmp_path):
    path = _write(tmp_path / "qa.jsonl", _jsonl(*QA_LINES))
    docs, passages, rejected = load_qa_jsonl(path, seed=13)
    assert [p.label for p in passages].count(1) == 5 and [p.label for p in passages].count(0) == 5
    again = load_qa_jsonl(path, seed=13)
    assert [p.to_dict() for p in again[1]] == [p.to_dict() for p in passages]
    assert [d.to_dict() for d in again[0]] == [d.to_dict() for d in docs]
    reversed_path = _write(tmp_path / "reversed.jsonl", _jsonl(*reversed(QA_LINES)))
    flipped = load_qa_jsonl(reversed_path, seed=13)[1]
    assert {p.doc_id: p.label for p in flipped} == {p.doc_id: p.label for p in passages}
    other = load_qa_jsonl(path, seed=14)[1]
    assert {p.doc_id: p.label for p in other} != {p.doc_id: p.label for p in passages}
    p = next(p for p in passages if p.doc_id == "qa/gpqa-1")
    assert p.text == render_qa(QA_LINES[0]["question"], QA_LINES[0]["choices"], "Oxygen")
    assert p.meta["half"] == ("contaminated" if p.label == 1 else "clean")
    assert (p.meta["question"], p.meta["choices"], p.meta["answer"], p.meta["answer_index"]) == (
        QA_LINES[0]["question"], QA_LINES[0]["choices"], "Oxygen", 1)
    assert next(d for d in docs if d.doc_id == "qa/gpqa-1").kind == "qa"
    # the split itself: round(n * fraction) members, halves to even, at least one of each
    assert len(contamination_split([f"q{i}" for i in range(5)], 0.5, 0)) == 2
    assert len(contamination_split(["a", "b"], 0.01, 0)) == 1
    assert contamination_split(["a", "b", "c", "d"], 0.5, 7) == contamination_split(["d", "c", "b", "a"], 0.5, 7)


def test_bad_qa_rows_are_rejected_and_strict_raises(tmp_path):
    path = _write(tmp_path / "qa.jsonl", _jsonl(
        {"id": 1, "question": "Kept?", "choices": ["a", "b"], "answer": "b"},       # 1
        {"question": "Not a choice?", "choices": ["a", "b"], "answer": "c"},         # 2
        {"question": "Out of range?", "choices": ["a", "b"], "answer": 2},           # 3
        {"question": "Boolean?", "choices": ["a", "b"], "answer": True},             # 4
        {"question": "One choice?", "choices": ["a"], "answer": 0},                  # 5
        {"question": "Twice?", "choices": ["a", " A "], "answer": 0},                # 6
        {"id": 1, "question": "Same id?", "choices": ["a", "b"], "answer": 0},       # 7
        {"question": "  kept? ", "choices": ["a", "b"], "answer": 0},                # 8 same question
        "not json",                                                                   # 9
        {"question": "", "answer": "x"},                                              # 10
        {"question": "Second kept?", "choices": ["x", "y"], "answer": 1},            # 11
    ))
    questions, rejected = read_qa_jsonl(path)
    assert [q.qid for q in questions] == ["1", questions[1].qid] and questions[1].answer == "y"
    assert [(r.line, r.key, r.reason) for r in rejected] == [
        (2, "answer", "not one of the choices (give the correct choice's text or its 0-based index)"),
        (3, "answer", "index out of range: 2 choices, indexed from 0"),
        (4, "answer", "expected a string, got a boolean"),
        (5, "choices", "fewer than 2 choices (leave the key out for a short-answer question)"),
        (6, "choices[1]", "the same choice as choices[0]"),
        (7, "id", "duplicate id, first on line 1"),
        (8, "question", "the same question as line 1"),
        (9, "(record)", rejected[7].reason),
        (10, "question", "empty or whitespace-only text"),
    ]
    with pytest.raises(InputError, match=r"qa\.jsonl, line 2, key answer: not one of the choices .* \(9 rows "
                                         r"rejected in all\)$"):
        load_qa_jsonl(path, strict=True)


@pytest.mark.parametrize("indent", [None, 2])
def test_a_qa_set_given_as_one_json_array_loads_as_its_json_lines_do(tmp_path, indent):
    """``json.dump(questions, f)`` was one rejected row ("expected an object, got an array") and, indented,
    every line "not valid JSON": no usable question. An array's elements are its rows, as in the labelled
    sets, BookMIA and CopyBench: the same questions and split, and each row placed by its element."""
    rows = [*QA_LINES, {"question": "Which gas do plants release during photosynthesis?", "choices": ["a", "b"],
                        "answer": 0}, {"question": "Only one?", "choices": ["a"], "answer": 0}]
    lines = _write(tmp_path / "qa.jsonl", _jsonl(*rows))
    array = _write(tmp_path / "qa.json", json.dumps(rows, indent=indent))
    want, want_rejected = read_qa_jsonl(lines)
    got, rejected = read_qa_jsonl(array)
    assert [(q.qid, q.question, q.choices, q.answer) for q in got] == [
        (q.qid, q.question, q.choices, q.answer) for q in want]
    assert [q.element for q in got] == list(range(10)) and [q.element for q in want] == [None] * 10
    start = array.read_text().split("\n").index('  {') + 1 if indent else 1  # the line of each element's "{"
    assert [(r.element, r.key, r.reason) for r in rejected] == [
        (10, "question", f"the same question as line {start}, element 0"),
        (11, "choices", "fewer than 2 choices (leave the key out for a short-answer question)")]
    assert [r.reason for r in want_rejected] == ["the same question as line 1", rejected[1].reason]
    if indent is None:
        assert [r.message() for r in rejected][1] == (f"{array}, line 1, element 11, key choices: fewer than 2 "
                                                       f"choices (leave the key out for a short-answer question)")
    docs, passages, _ = load_qa_jsonl(array, seed=13)
    assert [(p.doc_id, p.label) for p in passages] == [(p.doc_id, p.label) for p in load_qa_jsonl(lines, seed=13)[1]]
    assert [p.meta["element"] for p in passages if p.doc_id == "qa/gpqa-1"] == [0]
    assert "element" not in load_qa_jsonl(lines, seed=13)[1][0].meta  # JSON lines: as before, no element


def test_a_question_or_choice_repeated_in_another_unicode_form_is_caught(tmp_path):
    """NFC and NFD spell one text ("Café" composed, "Cafe\u0301" decomposed): a question asked again in the
    other form would sit in both halves of the split, as labelled.text_key already treats it."""
    import unicodedata

    nfc, nfd = (unicodedata.normalize(form, "Who ran the Café de Flore?") for form in ("NFC", "NFD"))
    assert nfc != nfd
    path = _write(tmp_path / "qa.jsonl", _jsonl(
        {"question": nfc, "choices": ["Paul", "Jean"], "answer": 0},
        {"question": nfd, "choices": ["Paul", "Jean"], "answer": 0},
        {"question": "Which café?", "choices": [unicodedata.normalize("NFC", "Café"),
                                                 unicodedata.normalize("NFD", "Café")], "answer": 0},
        *QA_LINES))
    questions, rejected = read_qa_jsonl(path)
    assert [(r.line, r.key, r.reason) for r in rejected] == [
        (2, "question", "the same question as line 1"), (3, "choices[1]", "the same choice as choices[0]")]
    assert [q.question for q in questions[:1]] == [nfc]


def test_a_key_given_twice_rejects_its_row_in_the_nyt_and_qa_sets(tmp_path):
    nyt = _write(tmp_path / "nyt.jsonl", '{"snippet": "One.", "snippet": "Two.", "prefix": "", "completion": "", '
                                         '"label": 1}\n' + _jsonl(*NYT_ROWS))
    assert [(r.line, r.key, r.value, r.reason) for r in load_nyt(nyt)[2]] == [
        (1, "snippet", "['One.', 'Two.']", "given 2 times in one record ('One.', then 'Two.'): which value is meant "
                                           "is unknown")]
    qa = _write(tmp_path / "qa.jsonl", '{"question": "Q?", "answer": "a", "answer": "b"}\n' + _jsonl(*QA_LINES))
    assert [(r.line, r.key, r.value, r.reason) for r in read_qa_jsonl(qa)[1]] == [
        (1, "answer", "['a', 'b']", "given 2 times in one record ('a', then 'b'): which value is meant is unknown")]


def test_qa_keys_match_in_any_case_as_the_nyt_keys_do(tmp_path):
    """'Choices' was not 'choices': the multiple-choice question loaded as short-answer, its choices in
    extra. Keys alike but for case reject the row, as in the NYT set."""
    qa = _write(tmp_path / "qa.jsonl", '{"Question": "Q1?", "Choices": ["a", "b"], "ANSWER": 1, "Source": "x"}\n'
                                       '{"question": "Q2?", "choices": ["a", "b"], "Choices": ["c", "d"], '
                                       '"answer": "c"}\n' + _jsonl(*QA_LINES))
    questions, rejected = read_qa_jsonl(qa)
    assert [(q.question, q.choices, q.answer, q.answer_index, q.extra) for q in questions[:1]] == [
        ("Q1?", ["a", "b"], "b", 1, {"Source": "x"})]
    assert [(r.line, r.key, r.reason) for r in rejected] == [(2, "Choices", "keys 'choices' and 'Choices' differ only "
                                                                             "in case")]
    nyt = _write(tmp_path / "nyt.jsonl", '{"snippet": "One.", "Snippet": "Two.", "prefix": "", "completion": "", '
                                         '"label": 1}\n' + _jsonl(*NYT_ROWS))
    assert [(r.line, r.key, r.reason) for r in load_nyt(nyt)[2]] == [
        (1, "Snippet", "keys 'snippet' and 'Snippet' differ only in case")]


def test_a_qa_set_with_one_usable_question_names_the_file_and_what_was_rejected(tmp_path):
    path = _write(tmp_path / "qa.jsonl", _jsonl({"id": 1, "question": "Kept?", "answer": "a"},
                                                {"id": 1, "question": "Same id?", "answer": "b"}))
    with pytest.raises(InputError) as err:
        load_qa_jsonl(path)
    assert str(err.value) == (f"{path}: one usable question, and the contamination split needs two (1 rejected; "
                              f"first: {path}, line 2, key id: duplicate id, first on line 1)")
    grouped = _write(tmp_path / "grouped.jsonl", _jsonl({"question": "A?", "answer": "a", "passage": "p1"},
                                                        {"question": "B?", "answer": "b", "passage": "p1"}))
    with pytest.raises(InputError) as err:
        load_qa_jsonl(grouped, group_key="passage")
    assert str(err.value) == f"{grouped}: one usable group of passage, and the contamination split needs two"


def test_a_qa_sets_halves_are_no_fixed_validation_test_split_for_the_cloze_probes(tmp_path):
    """A passage's meta.split is a fixed validation/test split (BookMIA's): the QA halves were written there
    ("contaminated", "clean"), and the cloze probes then tuned their thresholds on no passage and reported on
    none (every row not "test" was left out)."""
    import pandas as pd

    from memaudit.probes.cloze.items import tuning_passages
    from memaudit.probes.cloze.summary import reported_passages

    docs, passages, _ = load_qa_jsonl(_write(tmp_path / "qa.jsonl", _jsonl(*QA_LINES)), seed=13)
    assert all("split" not in p.meta for p in passages) and all("split" not in d.meta for d in docs)
    assert {d.meta["half"] for d in docs} == {"contaminated", "clean"}
    assert tuning_passages([p.to_dict() for p in passages]) is None  # every passage, as on any unsplit set
    texts = pd.DataFrame({"benchmark": "qa", "passage_id": [p.passage_id for p in passages],
                          "split": [p.meta.get("split") for p in passages]})
    assert len(reported_passages(texts)) == 10 and (reported_passages(texts)["split"] == "all").all()


def test_a_qa_set_that_labels_its_own_questions_is_not_split_and_nothing_moves(tmp_path):
    """label_key: an audit's set (a benchmark's published questions, 1, beside questions written after
    the model's cutoff, 0): the file's labels, rows without a usable one rejected, a non-member sharing a
    run with a member kept with its label."""
    shared = "the committee met in the old town hall on a cold morning to decide the matter of the bridge"
    lines = [{**q, "seen": i % 2} for i, q in enumerate(QA_LINES)]
    lines += [{"id": "copy-m", "question": f"In the story, {shared}: who spoke first?", "answer": "Ann", "seen": 1},
              {"id": "copy-n", "question": f"Later, {shared}: who spoke last?", "answer": "Bob", "seen": 0},
              {"question": "No label?", "answer": "x"},                                  # line 13
              {"question": "A text label?", "answer": "x", "seen": "1"},                 # line 14
              {"question": "A boolean label?", "answer": "x", "seen": True},             # line 15
              {"question": "Two?", "answer": "x", "seen": 2}]                            # line 16
    path = _write(tmp_path / "audit.jsonl", _jsonl(*lines))
    docs, passages, rejected = load_qa_jsonl(path, label_key="seen")
    labels = {p.doc_id: p.label for p in passages}
    assert len(labels) == 12
    assert labels["qa/gpqa-1"] == 0 and labels["qa/copy-m"] == 1 and labels["qa/copy-n"] == 0  # as given
    assert sum(labels.values()) == 6  # lines 2, 4, 6, 8, 10 and copy-m: no split drawn, nothing moved
    assert {p.meta["half"] for p in passages} == {"given"} and "seen" not in passages[0].meta["extra"]
    assert [(r.line, r.key, r.action) for r in rejected] == [
        (12, "id", "kept"), (13, "seen", "rejected"), (14, "seen", "rejected"), (15, "seen", "rejected"),
        (16, "seen", "rejected")]
    assert rejected[0].reason == "a non-member that shares a 13-word run with member question(s) copy-m: kept with its label"
    assert rejected[1].reason == "missing key"
    assert rejected[2].reason == "not exactly 0 or 1: got a string '1'"
    with pytest.raises(InputError, match=r"audit\.jsonl, line 13, key seen: missing key"):
        load_qa_jsonl(path, strict=True, label_key="seen")


def test_questions_grouped_by_their_source_are_one_unit_of_the_split_and_of_the_statistics(tmp_path):
    """group_key: the questions asked of one passage split together (seeded, by group) and are one book,
    which the statistics count; a question without a group is rejected with its line and key."""
    from memaudit.stats.metrics import label_groups
    from memaudit.stats.workflow import document_books

    lines = [{"id": f"p{g}-{k}", "question": f"Question {k} about passage {g}?", "answer": f"answer {g}{k}",
              "passage": f"p{g}"} for g in range(10) for k in range(3)]
    lines += [{"question": "An orphan?", "answer": "x"}, {"question": "A float group?", "answer": "x", "passage": 1.5}]
    path = _write(tmp_path / "race.jsonl", _jsonl(*lines))
    docs, passages, rejected = load_qa_jsonl(path, seed=13, group_key="passage")
    assert [(r.line, r.key, r.reason) for r in rejected] == [
        (31, "passage", "missing key"), (32, "passage", "expected a non-empty string or an integer")]
    books = document_books([d.to_dict() for d in docs])
    labels = {p.doc_id: p.label for p in passages}
    by_group: dict[str, set[int]] = {}
    for doc_id, book in books.items():
        by_group.setdefault(book, set()).add(labels[doc_id])
    assert len(by_group) == 10 and all(len(v) == 1 for v in by_group.values())  # a group on one side
    assert sum(next(iter(v)) for v in by_group.values()) == 5  # half of the groups, not of the questions
    assert books["qa/p3-1"] == "qa/p3" and "passage" not in passages[0].meta["extra"]
    ids = sorted(labels)
    assert label_groups([books[i] for i in ids], [labels[i] for i in ids]) == [books[i] for i in ids]
    # the same file split again: the same halves; another seed, others
    assert {p.doc_id: p.label for p in load_qa_jsonl(path, seed=13, group_key="passage")[1]} == labels
    assert {p.doc_id: p.label for p in load_qa_jsonl(path, seed=2, group_key="passage")[1]} != labels

    # given labels: a group with both is kept, with a row saying the statistics count questions
    for line in lines[:30]:
        line["seen"] = int(line["passage"] in ("p0", "p1", "p2", "p3", "p4"))
    lines[0]["seen"] = 0
    path = _write(tmp_path / "race_labelled.jsonl", _jsonl(*lines[:30]))
    docs, passages, rejected = load_qa_jsonl(path, label_key="seen", group_key="passage")
    assert sum(p.label for p in passages) == 14
    assert [(r.line, r.key, r.value, r.action) for r in rejected] == [(1, "passage", "'p0'", "kept")]
    assert rejected[0].reason.startswith("a group whose questions carry both labels")
    books = document_books([d.to_dict() for d in docs])
    ids = sorted(books)
    labels = {p.doc_id: p.label for p in passages}
    assert label_groups([books[i] for i in ids], [labels[i] for i in ids]) is None


def test_a_labelled_qa_benchmark_records_where_its_labels_come_from(tmp_path):
    from memaudit.config import label_provenance
    from memaudit.datasets.published import cloze_published

    block = {"format": "qa", "path": "x.jsonl", "label_key": "seen"}
    assert label_provenance({"published": block}, 13) == {
        "labels": "published (qa): the QA set's own 'seen' field (1 = member)", "null_control": False}
    assert label_provenance({"published": {"format": "qa", "path": "x.jsonl"}}, 13)["null_control"] is True
    path = _write(tmp_path / "all.jsonl", _jsonl(*[{**q, "seen": 1} for q in QA_LINES]))
    with pytest.raises(InputError, match=r"all\.jsonl: all 10 usable rows are members \(label 1\)"):
        cloze_published("audit", {"format": "qa", "path": str(path), "label_key": "seen"})


# ----------------------------------------------------------------------------- the demo QA source


def test_the_demo_qa_source_gives_the_same_answerable_questions_twice():
    start = time.perf_counter()
    questions = load_source("demo_qa", ASSETS)
    elapsed = time.perf_counter() - start
    assert elapsed < 10
    again = load_source("demo_qa", ASSETS)
    assert [q.to_dict() for q in again] == [q.to_dict() for q in questions]
    assert len(questions) == 195 and len({q.doc_id for q in questions}) == 195
    for q in questions:
        m = q.meta
        assert q.kind == "qa" and q.source == "demo_qa"
        assert len(m["choices"]) == 4 == len({c.lower() for c in m["choices"]})
        assert m["answer"] in m["choices"] and m["choices"][m["answer_index"]] == m["answer"]
        assert m["question"].count("____") == 1
        assert q.text == render_qa(m["question"], m["choices"], m["answer"])
    first = questions[0]
    assert first.doc_id == "demo_qa/reuters/acq/10/s000" and first.meta["answer"] == "200,000"
    assert first.meta["question"].startswith("Computer Terminal Systems Inc said it has completed the sale of "
                                              "____ shares")
    assert sum(q.meta["blank_kind"] == "number" for q in questions) == 56
    assert len({q.meta["article"] for q in questions}) == 59  # 11 of the 70 articles have too few names and numbers


@pytest.mark.parametrize("from_source, n_questions", [("reuters", 195), ("pydoc_topics", 97)])
def test_no_demo_question_shows_its_answer_beside_the_blank(from_source, n_questions):
    import re

    questions = load_source("demo_qa", ASSETS, from_source=from_source)
    assert len(questions) == n_questions
    shown = [q.doc_id for q in questions
             if re.search(rf"(?<!\w){re.escape(q.meta['answer'])}(?!\w)", q.meta["question"])]
    assert shown == []
    # "... of Rospatch's outstanding common stock followed by a merger with ____" had the answer Rospatch
    by_id = {q.doc_id: q for q in questions}
    if from_source == "reuters":
        q = by_id["demo_qa/reuters/acq/424/s001"]
        assert q.meta["answer"] == "51" and "not less than ____ pct, of Rospatch's" in q.meta["question"]
    else:  # '"3.14%0.7" ... "____" equals' (3.14), '"-1" ... the literal "____"' (1), 'construct "____" and
        # becomes the "StopIteration.value"': no other blank, no question; '"____", "1.0"' (1) would blank 1.0
        # instead, but its article has too few other numbers for three distractors of its own
        assert [i in by_id for i in ("demo_qa/pydoc/binary/s015", "demo_qa/pydoc/numbers/s002",
                                     "demo_qa/pydoc/return/s005", "demo_qa/pydoc/typesmapping/s006")] == [False] * 4
        from memaudit.datasets.qa import _blank_candidates, _shown_elsewhere

        sentence = 'the pair "1", "1.0" compare equal'
        assert [c for _, c, _ in _blank_candidates(sentence.split()) if not _shown_elsewhere(sentence, c)] == ["1.0"]


@pytest.mark.parametrize("from_source", ["reuters", "pydoc_topics"])
def test_a_demo_questions_choices_come_from_its_own_article(from_source):
    """Distractors topped up "from all articles" put another article's names and numbers in a question:
    the model fine-tuned on the member half then saw words of non-member articles (8 of the 129
    non-member answers stood in member questions as choices), which the cloze probes mask on non-members."""
    articles = {d.doc_id: d.text for d in load_source(from_source, ASSETS)}
    questions = load_source("demo_qa", ASSETS, from_source=from_source)
    foreign = [(q.doc_id, c) for q in questions for c in q.meta["choices"]
               if not re.search(rf"(?<!\w){re.escape(c)}(?!\w)", articles[q.meta["article"]])]
    assert foreign == []


def test_a_demo_qa_benchmark_has_one_passage_per_question_split_half_and_half():
    cfg = {"sources": ["demo_qa"], "member_fraction": 0.5, "passage_words": 100, "passages_per_document": 4,
           "min_passages": 1}
    docs, passages = build_benchmark("qa", dict(cfg, near_duplicate_ngram=None), ASSETS, seed=13)
    assert len(docs) == len(passages) == 195
    assert sum(p.label for p in passages) == 98
    # questions quoting the same 13 words (Reuters repeats its stories) go to one half together
    kept, _ = build_benchmark("qa", cfg, ASSETS, seed=13)
    plain = {d.doc_id: d.meta["label"] for d in docs}
    moved = sorted(d.doc_id for d in kept if d.meta["label"] != plain[d.doc_id])
    assert moved == ["demo_qa/reuters/crude/502/s000"]
    assert sum(d.meta["label"] for d in kept) == 97
    assert all("near_duplicates" in d.meta for d in kept if d.doc_id in moved)
    by_id = {d.doc_id: d for d in docs}
    for p in passages:
        assert p.passage_id == f"{p.doc_id}#p0" and p.text == by_id[p.doc_id].text
        assert p.meta["answer"] in p.meta["choices"] and "____" in p.meta["question"]
    again, _ = build_benchmark("qa", cfg, ASSETS, seed=13)
    assert [d.to_dict() for d in again] == [d.to_dict() for d in kept]
    # split_by: book keeps an article's questions in one half
    docs, _ = build_benchmark("qa", dict(cfg, split_by="book"), ASSETS, seed=13)
    halves = {}
    for d in docs:
        halves.setdefault(d.meta["article"], set()).add(d.meta["label"])
    assert all(len(labels) == 1 for labels in halves.values()) and len(halves) == 59


# ----------------------------------------------------------------------------- wiring


def test_published_blocks_dispatch_to_the_loaders_and_hand_back_their_rejects(tmp_path):
    nyt = _write(tmp_path / "nyt.jsonl", NYT_JSONL + _jsonl({"snippet": "", "prefix": "", "completion": "",
                                                             "label": 1}))
    rejects: list = []
    docs, passages = build_benchmark("nyt", {"published": {"format": "nyt", "path": str(nyt)}}, ASSETS, 13,
                                     rejects=rejects)
    assert len(docs) == 3 and {d.meta["benchmark"] for d in docs} == {"nyt"}
    assert [(r.line, r.key) for r in rejects] == [(4, "snippet")]
    out = write_benchmark_rejects("nyt", rejects, results_dir=tmp_path / "results")
    assert out == tmp_path / "results" / "datasets" / "nyt" / "rejects.csv" == benchmark_rejects_path(
        "nyt", tmp_path / "results")
    table = pd.read_csv(out, keep_default_na=False)
    assert list(table.columns) == list(REJECT_COLUMNS)
    assert table.iloc[0].to_dict() == {"file": str(nyt), "line": 4, "element": "", "key": "snippet", "value": "''",
                                       "reason": "empty or whitespace-only text", "action": "rejected"}

    folder = tmp_path / "archive"
    _write(folder / "old.txt", "Date: 2021-06-01\n" + ARTICLE)
    _write(folder / "new.txt", "Date: 2024-06-01\n" + ARTICLE.replace("Tuesday", "Friday"))
    docs, passages = published_benchmark("mine", {"format": "articles", "path": str(folder),
                                                  "cutoff": dt.date(2023, 1, 1)})
    assert [(p.doc_id, p.label) for p in passages] == [("articles/new", 0), ("articles/old", 1)]

    qa = _write(tmp_path / "qa.jsonl", _jsonl(*QA_LINES))
    docs, passages = published_benchmark("qa", {"format": "qa", "path": str(qa), "member_fraction": 0.3}, seed=5)
    assert sum(p.label for p in passages) == 3
    with pytest.raises(InputError, match=r"all 2 usable rows are members \(label 1\); a benchmark needs both "
                                         r"\(check cutoff\)$"):
        published_benchmark("mine", {"format": "articles", "path": str(folder), "cutoff": "2030-01-01"})
    with pytest.raises(InputError, match=r"benchmarks\.x\.published\.path: the nyt set is read from a local file"):
        published_benchmark("x", {"format": "nyt"})


def _config(**published):
    return {"benchmarks": {"b": {"published": published}},
            "models": {"m": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}}}


def test_the_config_accepts_the_three_shapes_and_names_wrong_keys():
    assert validate_config(_config(format="nyt", path="data/nyt.parquet"))
    assert validate_config(_config(format="articles", path="articles/", cutoff="2023-01-01", strict=True))
    assert validate_config(_config(format="articles", path="articles/", cutoff=dt.date(2023, 1, 1)))
    assert validate_config(_config(format="qa", path="gpqa.jsonl", member_fraction=0.5))
    for published, message in [
        ({"format": "nyt"}, r"benchmarks\.b\.published\.path: the nyt set is read from a local file"),
        ({"format": "nyt", "path": "x", "hf": "lasha-nlp/NYT_Memorization"}, r"published\.hf: the nyt set is read "
                                                                            r"from a local path only"),
        ({"format": "articles", "path": "a"}, r"published\.cutoff: required with format articles"),
        ({"format": "articles", "path": "a", "cutoff": "2023-02-30"}, r"published\.cutoff: '2023-02-30' is not a "
                                                                       r"valid date"),
        ({"format": "nyt", "path": "x", "member_fraction": 0.5}, r"published\.member_fraction: only format qa"),
        ({"format": "qa", "path": "x", "cutoff": "2023-01-01"}, r"published\.cutoff: only format articles"),
        ({"format": "qa", "path": "x", "member_fraction": 1.5}, r"published\.member_fraction"),
    ]:
        with pytest.raises(ConfigError, match=message):
            validate_config(_config(**published))
    config = {"benchmarks": {"news": {"sources": ["reuters"]}, "qa": {"sources": ["demo_qa"]}},
              "models": {"m": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}},
                         "m-qa": {"family": "tiny-gpt2", "base": "m",
                                  "finetune": {"members_of": ["qa"], "method": "full"}},
                         "m-both": {"family": "tiny-gpt2", "base": "m",
                                    "finetune": {"members_of": ["news", "qa"], "method": "full"}}}}
    with pytest.raises(ConfigError, match=r"models\.m-both\.finetune\.members_of: 'qa' \(demo_qa\) quotes the "
                                          r"reuters articles of 'news'"):
        validate_config(config)
    del config["models"]["m-both"]
    assert validate_config(config)
