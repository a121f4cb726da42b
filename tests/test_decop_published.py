"""Published DE-COP data in the workflow: a BookTection CSV as a benchmark of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path
import shutil

import pandas as pd
import pytest
import yaml

from api_server import ChatReply, ChatServer, ScriptedResponder, refusal_text
from memaudit.jobs import validate_config
from memaudit.datasets.published import published_benchmark, published_items
from memaudit.probes.decop.items import published_items_for_run
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_jsonl, write_jsonl


def _row(doc, label, n, length="small"):
    return {"ID": doc, "Label": label, "Length": length, "Answer": "A",
            **{f"Example_{c}": f"{doc} passage {n} option {c}." for c in "ABCD"}}


def _booktection(tmp_path, rows):
    path = tmp_path / "BookTection.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_booktection_file_becomes_documents_passages_and_items_with_roles(tmp_path):
    rows = [_row(f"Book_{i}_-_Author_{i}", i % 2, n) for i in range(8) for n in range(2)]
    rows.append(_row("Book_0_-_Author_0", 0, 9, length="large"))
    published = {"format": "booktection", "path": str(_booktection(tmp_path, rows))}
    docs, passages = published_benchmark("bt", published)
    assert [d.doc_id for d in docs] == [f"Book_{i}_-_Author_{i}" for i in range(8)]
    assert [d.meta["label"] for d in docs] == [0, 1] * 4
    assert docs[1].title == "Book 1" and docs[1].author == "Author 1"
    assert docs[1].text == "Book_1_-_Author_1 passage 0 option A.\nBook_1_-_Author_1 passage 1 option A."
    assert len(passages) == 17 and passages[0].text.endswith("option A.")
    write_jsonl(tmp_path / "documents.jsonl", (d.to_dict() for d in docs))
    cfg = {"lengths": [64], "n_documents": 4, "calibration_documents": 2}
    items = published_items_for_run(tmp_path / "documents.jsonl", published, cfg, 13, tmp_path / "items.jsonl",
                                    tmp_path / "qc.csv")
    roles = {it["doc_id"]: it["meta"]["role"] for it in items}
    assert sorted(roles.values()) == ["calibrate"] * 2 + ["evaluate"] * 4
    assert all(it["label"] == 0 for it in items if it["meta"]["role"] == "calibrate")
    assert all(it["meta"]["length_tokens"] == 64 for it in items)  # the large question is left out
    assert len(items) == 12 and read_jsonl(tmp_path / "items.jsonl") == items
    qc = pd.read_csv(tmp_path / "qc.csv")
    assert qc["n_passages"].sum() == 12 and (qc["accept_rate"] == 1).all()
    with pytest.raises(InputError, match=r"no question of length\(s\) \[256\]"):
        published_items_for_run(tmp_path / "documents.jsonl", published, {**cfg, "lengths": [256]}, 13,
                                tmp_path / "i.jsonl", tmp_path / "q.csv")


@pytest.mark.parametrize("fmt", ["booktection", "bookmia"])
def test_a_published_set_of_one_label_is_refused_naming_the_file(tmp_path, fmt):
    """As the cloze formats' sets: a file whose books are all suspect (or all clean) ran every job to an AUC of
    NaN, DE-COP's calibration on no clean book."""
    if fmt == "booktection":
        path = _booktection(tmp_path, [_row(f"Book_{i}_-_Author_{i}", 1, n) for i in range(3) for n in range(2)])
    else:
        path = tmp_path / "BookMIA.jsonl"
        path.write_text("".join(_bookmia_line(b, k, 0) + "\n" for b in range(3) for k in range(2)))
    with pytest.raises(InputError) as err:
        published_benchmark("bt", {"format": fmt, "path": str(path), "validation_rows": 0})
    assert str(err.value) == (f"{path}: all 3 usable documents are "
                              f"{'members (label 1)' if fmt == 'booktection' else 'non-members (label 0)'}; "
                              f"a benchmark needs both")


def _config(**benchmark):
    return {"benchmarks": {"bt": benchmark},
            "models": {"m": {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}}}


def test_a_benchmark_needs_sources_or_published_data_but_not_both():
    with pytest.raises(ConfigError, match=r"benchmarks.bt: give exactly one of 'sources'"):
        validate_config(_config(sources=["austen"], published={"format": "booktection", "path": "x.csv"}))
    with pytest.raises(ConfigError, match=r"benchmarks.bt: give exactly one of 'sources'"):
        validate_config(_config(passage_words=50))
    with pytest.raises(ConfigError, match=r"benchmarks.bt.published.path: BookMIA is read from a local JSONL"):
        validate_config(_config(published={"format": "bookmia"}))
    with pytest.raises(ConfigError, match=r"published.format"):  # wikimia is a format now; this one is not
        validate_config(_config(published={"format": "the_pile", "path": "x"}))
    assert validate_config(_config(published={"format": "booktection", "hf": "avduarte333/BookTection"}))
    for fmt, path in (("booktection", "x.csv"), ("arxivtection", "x.csv"), ("bookmia", "x.jsonl")):
        assert validate_config(_config(published={"format": fmt, "path": path, "strict": True}))
    assert validate_config(_config(published={"format": "arxivtection", "hf": "avduarte333/arXivTection",
                                              "strict": False}))


# --------------------------------------------------------------------------- the published files' shapes

def _load_excerpt(tmp_path, name: str, fmt: str, data: bytes, **options):
    """``(path, documents, passages, rejects)`` of a published-shape excerpt written to ``name``."""
    path = tmp_path / name
    path.write_bytes(data)
    rejects = []
    docs, passages = published_benchmark(fmt[:2], {"format": fmt, "path": str(path), **options}, rejects=rejects)
    return path, docs, passages, rejects


# data/arXivTection.csv of avduarte333/DE-COP_Method, in shape (the text is made up): UTF-8 with a
# byte-order mark, CRLF line ends, a field quoted only where it needs it (the options mostly are,
# the IDs only with a comma), an option that is a single space unquoted (the real file's line 615),
# a record whose Example_B-D each hold a bare LF (the real file's lines 630-633) and options with
# trailing spaces.
ARXIV_EXCERPT = (
    "\ufeffExample_A,Example_B,Example_C,Example_D,Answer,ID,Label\r\n"
    '"We study, briefly, how models copy.","We look, in short, at copying.","Copying, we study.",'
    '"A short study of copying. ",A,"Copy, Paste, Detect",1\r\n'
    'We show that the method works.,"Shown: the method, working.","The method works, we show.",'
    '"It works, the method. ",A,"Copy, Paste, Detect",1\r\n'
    ' ,"The writer wants to travel, far.","Travel, far, is the wish.","A wish to go far.",A,RESEE,0\r\n'
    '"Dataset Statistics The set has 1,000 items.","Statistics\nThe set: 1,000 items.",'
    '"Items\n1,000 in all.","In all\n1,000 items.",A,SOUL,0\r\n'
    '"We evaluate under a zero-shot setting.","Zero-shot, we evaluate.","We test, zero-shot.",'
    '"Evaluated zero-shot. ",A,SOUL,0\r\n'
)


def test_an_arxivtection_file_in_the_published_shape_loads_with_its_blank_option_in_rejects_csv(tmp_path):
    from memaudit.datasets.rejects import count_rejects, write_benchmark_rejects

    path, docs, passages, rejects = _load_excerpt(tmp_path, "arXivTection.csv", "arxivtection",
                                                  ARXIV_EXCERPT.encode("utf-8"))
    assert [(d.doc_id, d.meta["label"], d.meta["n_passages"]) for d in docs] == [
        ("Copy, Paste, Detect", 1, 2), ("SOUL", 0, 2)]
    assert [(p.passage_id, p.meta["source_line"]) for p in passages] == [
        ("Copy, Paste, Detect#p0", 2), ("Copy, Paste, Detect#p1", 3), ("SOUL#p0", 5), ("SOUL#p1", 9)]
    assert passages[2].text == "Dataset Statistics The set has 1,000 items."
    assert passages[1].text == "We show that the method works."
    assert [r.message() for r in rejects] == [f"{path}, line 4, column Example_A: empty or whitespace-only text"]
    table = write_benchmark_rejects("ar", rejects, tmp_path / "results")
    assert table.read_text() == f"file,line,element,key,value,reason,action\n{path},4,,Example_A,' ',empty or whitespace-only text,rejected\n"
    summary = count_rejects({"ar": table})
    assert summary.to_dict("records") == [{"benchmark": "ar", "file": str(path), "reason": "empty or whitespace-only text",
                                           "action": "rejected", "n_rows": 1}]
    with pytest.raises(InputError) as err:
        published_benchmark("ax", {"format": "arxivtection", "path": str(path), "strict": True})
    assert str(err.value) == f"{path}, line 4, column Example_A: empty or whitespace-only text"


# BookTection as arXivTection's shape with the Length column last (the hub's avduarte333/BookTection
# was not at hand to compare byte for byte; the columns are those DE-COP's 2_decop_hf.py reads).
BOOK_EXCERPT = (
    "\ufeffExample_A,Example_B,Example_C,Example_D,Answer,ID,Label,Length\r\n"
    '"It was a cold day, and clocks struck.","The day was cold; clocks struck.","Clocks struck, cold day.",'
    '"A cold day, the clocks striking.",A,1984_-_George_Orwell,1,small\r\n'
    '"He walked on,\nthrough the rain.","Through rain\nhe went on.","On he went\nin rain.","Rain fell;\nhe walked.",'
    'A,1984_-_George_Orwell,1,medium\r\n'
    '"She opened the door.", ,"The door, opened by her.","She had opened it.",A,Happy_Place_-_Emily_Henry,0,small\r\n'
    '"She closed the door.","The door was closed.","Closed, the door.","She shut it.",A,Happy_Place_-_Emily_Henry,0,small\r\n'
)


def test_a_booktection_file_in_the_published_shape_keeps_its_lengths_and_lines(tmp_path):
    path, docs, passages, rejects = _load_excerpt(tmp_path, "BookTection.csv", "booktection",
                                                  BOOK_EXCERPT.encode("utf-8"))
    assert [(p.passage_id, p.meta["length_tokens"], p.meta["source_line"]) for p in passages] == [
        ("1984_-_George_Orwell#p0", 64, 2), ("1984_-_George_Orwell#p1", 128, 3), ("Happy_Place_-_Emily_Henry#p0", 64, 9)]
    assert [(d.title, d.author, d.meta["label"]) for d in docs] == [("1984", "George Orwell", 1),
                                                                   ("Happy Place", "Emily Henry", 0)]
    # the medium question's four fields each hold a line break: it spans lines 3-7
    assert [r.message() for r in rejects] == [f"{path}, line 8, column Example_B: empty or whitespace-only text"]
    small, rejected = published_items({"format": "booktection", "path": str(path), "length": "small"})
    assert [it["item_id"] for it in small] == ["1984_-_George_Orwell#p0", "Happy_Place_-_Emily_Henry#p0"]
    assert len(rejected) == 1


def test_a_quote_left_open_stops_the_load_naming_its_line_not_merging_the_rows_after_it(tmp_path):
    """The lenient CSV reader closed a stray quote where the quotes paired up again: line 5's row went
    into line 4's Example_A, loaded as one question; or, with no quote after it, at the end of the
    file: every row after it was one rejected row, '3 fields'."""
    header, orwell, _, _, closed, _ = BOOK_EXCERPT.split("\r\n")
    stray = '"He spoke, A,Happy_Place_-_Emily_Henry,0,small'
    path = tmp_path / "BookTection.csv"
    path.write_text("\r\n".join([header, orwell, closed, stray, closed.replace("closed", "locked"), orwell, ""]),
                    encoding="utf-8")
    with pytest.raises(InputError) as err:
        published_items({"format": "booktection", "path": str(path)})
    assert str(err.value) == f"""{path}, line 4: not valid CSV (',' expected after '"')"""
    path.write_text("\r\n".join([header, orwell, stray, closed.replace('"', ""), orwell.replace('"', ""), ""]),
                    encoding="utf-8")
    with pytest.raises(InputError) as err:
        published_items({"format": "booktection", "path": str(path)})
    assert str(err.value) == (f"{path}, line 3: not valid CSV (a quoted field opened in this record is never "
                              f"closed: a stray quote or a truncated file?)")
    # an open quote on the last line takes in no other row: that row alone is rejected, as before
    path.write_text("\r\n".join([header, orwell, closed, stray, ""]), encoding="utf-8")
    items, rejected = published_items({"format": "booktection", "path": str(path)})
    assert len(items) == 2 and [(r.line, r.reason) for r in rejected] == [
        (4, "unclosed quote: the file ends inside this row")]


def test_the_hubs_parquet_form_of_a_set_loads_as_its_csv_does_labels_typed(tmp_path):
    """The Hub serves the DE-COP sets as parquet (typed cells: Label an integer): the same rows as the
    CSV excerpt give the same items, rows numbered from 1; a float label exactly 0.0 or 1.0 (a float64 column,
    as pandas keeps one with a missing value) is that label, any other float is rejected, not rounded."""
    csv_path, _, _, _ = _load_excerpt(tmp_path, "BookTection.csv", "booktection", BOOK_EXCERPT.encode("utf-8"))
    frame = pd.read_csv(csv_path, keep_default_na=False, dtype={"Label": "int64"}, encoding="utf-8-sig")
    parquet = tmp_path / "train-00000-of-00001.parquet"
    frame.to_parquet(parquet, index=False)
    from_csv, csv_rejects = published_items({"format": "booktection", "path": str(csv_path)})
    from_parquet, parquet_rejects = published_items({"format": "booktection", "path": str(parquet)})
    assert [(it["item_id"], it["options"], it["answer"], it["label"]) for it in from_parquet] == [
        (it["item_id"], it["options"], it["answer"], it["label"]) for it in from_csv]
    assert [it["meta"]["source_line"] for it in from_parquet] == [1, 2, 4]
    assert [r.message() for r in parquet_rejects] == [f"{parquet}, line 3, column Example_B: empty or whitespace-only text"]
    assert len(csv_rejects) == 1
    frame.astype({"Label": "float64"}).to_parquet(parquet, index=False)
    as_floats, _ = published_items({"format": "booktection", "path": str(parquet)})
    assert [(it["item_id"], it["label"]) for it in as_floats] == [(it["item_id"], it["label"]) for it in from_csv]
    frame.astype({"Label": "float64"}).assign(Label=0.5).iloc[:2].to_parquet(parquet, index=False)
    with pytest.raises(InputError, match="no usable"):
        published_items({"format": "booktection", "path": str(parquet), "strict": False})


def test_a_hub_set_that_cannot_be_downloaded_is_one_line_with_the_remedy(monkeypatch):
    """``hf:`` without network (or a wrong id): the dataset job stops with one line saying what to do, not
    with huggingface_hub's traceback and "job failed"."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("An error happened while trying to locate the files on the Hub.\nMore.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(InputError) as err:
        published_items({"format": "arxivtection", "hf": "avduarte333/arXivTection"})
    assert str(err.value) == (
        "hf:avduarte333/arXivTection: the dataset could not be downloaded: An error happened while trying to locate "
        "the files on the Hub. Remedy: check the network and the dataset id (and HF_TOKEN for a gated dataset); "
        "offline, download its files where the Hub can be reached (huggingface-cli download "
        "avduarte333/arXivTection --repo-type dataset --local-dir DIR) and give the data file as published.path "
        "instead of hf")


# BookMIA (swj0419/BookMIA) as Dataset.to_json writes it: one compact object a line, non-ASCII and
# NUL as \\u escapes; real snippets hold NUL bytes.
BOOKMIA_EXCERPT = (
    '{"book_id":0,"book":"Jane Eyre","snippet_id":0,"snippet":"There was no possibility of taking a walk '
    'that day.\\u0000","label":1}\n'
    '{"book_id":0,"book":"Jane Eyre","snippet_id":1,"snippet":"I was glad of it; I never liked long walks, '
    'especially on chilly afternoons \\u2014 dreadful.","label":1}\n'
    '{"book_id":3,"book":"Tom Lake","snippet_id":0,"snippet":"   ","label":0}\n'
    '{"book_id":3,"book":"Tom Lake","snippet_id":1,"snippet":"The cherries came in early that year.","label":0}\n'
)


def test_a_bookmia_file_in_the_published_shape(tmp_path):
    # four rows: the paper's 1870 validation rows (the default) would leave no test split
    path, docs, passages, rejects = _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", BOOKMIA_EXCERPT.encode("ascii"),
                                                  validation_rows=2)
    assert [(d.doc_id, d.title, d.meta["label"], d.meta["n_passages"], d.meta["benchmark"]) for d in docs] == [
        ("0", "Jane Eyre", 1, 2, "bo"), ("3", "Tom Lake", 0, 1, "bo")]
    assert [(p.passage_id, p.text) for p in passages] == [
        ("0#0", "There was no possibility of taking a walk that day."),
        ("0#1", "I was glad of it; I never liked long walks, especially on chilly afternoons \u2014 dreadful."),
        ("3#1", "The cherries came in early that year.")]
    assert [(r.line, r.key, r.reason, r.action) for r in rejects] == [
        (1, "snippet", "1 NUL character(s) removed (IDs and text are cleaned alike)", "kept"),
        (3, "snippet", "empty or whitespace-only text", "rejected")]
    # rows 1-2 validation, 3-4 test: the rejected row 3 still holds its place
    assert [p.meta["split"] for p in passages] == ["validation", "validation", "test"]


def test_a_bookmia_document_is_its_snippets_what_a_contaminated_model_is_fine_tuned_on(tmp_path):
    """A BookMIA book's text was empty: a model with the benchmark in its members_of was fine-tuned on
    nothing of it (alone: 'no member text to fine-tune on') and DE-COP paraphrased no passage of it."""
    from memaudit.datasets.build import member_texts

    _, docs, _, _ = _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", BOOKMIA_EXCERPT.encode("ascii"),
                                  validation_rows=0)
    assert [d.text for d in docs] == [
        "There was no possibility of taking a walk that day.\n"
        "I was glad of it; I never liked long walks, especially on chilly afternoons \u2014 dreadful.",
        "The cherries came in early that year."]
    assert member_texts([d.to_dict() for d in docs]) == [docs[0].text]


def _bookmia_line(book: int, snippet: int, label: int) -> str:
    return json.dumps({"book_id": book, "book": f"Book {book}", "snippet_id": snippet,
                       "snippet": f"Snippet {snippet} of book {book}.", "label": label})


# rows (0-based position) 0-1 book 0, 2 not JSON (a row all the same), a blank line (no row), 3-4 book 1,
# 5-6 book 2, 7-8 book 3 and 9 book 0 again: with validation_rows 6 books 0 and 2 straddle the boundary
BOOKMIA_SPLIT_LINES = [_bookmia_line(0, 0, 1), _bookmia_line(0, 1, 1), "{not json", "",
                       _bookmia_line(1, 0, 0), _bookmia_line(1, 1, 0), _bookmia_line(2, 0, 1), _bookmia_line(2, 1, 1),
                       _bookmia_line(3, 0, 0), _bookmia_line(3, 1, 0), _bookmia_line(0, 2, 1)]


def test_bookmia_passages_carry_the_papers_split_by_row_position(tmp_path, caplog):
    """The information-guided probes' split of BookMIA (the authors' bookmia_data[:1870] and [1870:]): the
    first validation_rows rows (every non-blank line, a rejected one too) are validation, the rest test;
    a book whose rows straddle the boundary keeps each snippet on its row's side."""
    from memaudit.datasets.published import BOOKMIA_VALIDATION_ROWS, load_bookmia, split_summary

    data = ("\n".join(BOOKMIA_SPLIT_LINES) + "\n").encode()
    with caplog.at_level("INFO", logger="memaudit.datasets.published"):
        path, docs, passages, rejects = _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", data, validation_rows=6)
    assert [(p.passage_id, p.meta["split"]) for p in passages] == [
        ("0#0", "validation"), ("0#1", "validation"), ("1#0", "validation"), ("1#1", "validation"),
        ("2#0", "validation"), ("2#1", "test"), ("3#0", "test"), ("3#1", "test"), ("0#2", "test")]
    assert [p.meta["source_line"] for p in passages] == [1, 2, 5, 6, 7, 8, 9, 10, 11]
    assert [(r.line, r.action) for r in rejects] == [(3, "rejected")]
    assert all("split" not in d.meta for d in docs)  # the split is of rows (passages), not of books
    assert split_summary(passages) == ("fixed split (meta.split): 5 validation (3 members), 4 test (2 members) "
                                       "passages; 2 document(s) with passages on both sides (each passage keeps "
                                       "its row's side)")
    assert caplog.messages == [f"benchmark bo: {split_summary(passages)}"]  # in the dataset job's log
    # validation_rows 0: no fixed split, nothing marked
    _, _, plain, _ = _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", data, validation_rows=0)
    assert [p.passage_id for p in plain] == [p.passage_id for p in passages]
    assert all("split" not in p.meta for p in plain) and split_summary(plain) == ""
    # the loader alone splits nothing unless asked; the benchmark's default is the paper's
    assert all("split" not in p.meta for p in load_bookmia(path)[1]) and BOOKMIA_VALIDATION_ROWS == 1870
    # 10 rows: validation_rows 9 leaves one test row, 10 none (an error naming the file and the key)
    assert [p.meta["split"] for p in _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", data,
                                                   validation_rows=9)[2]][-2:] == ["validation", "test"]
    for rows in (10, BOOKMIA_VALIDATION_ROWS):
        with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: 10 rows, but benchmarks\.bo\.published\."
                                             rf"validation_rows is {rows}: the first {rows} rows are the "
                                             rf"validation split .* needs more than {rows} rows"):
            # 1870: the benchmark's default, the paper's
            _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", data,
                          **({"validation_rows": rows} if rows == 10 else {}))


def test_bookmia_as_the_hub_exports_it_parquet_or_a_json_array_loads_as_the_jsonl_does(tmp_path):
    """The Hub keeps BookMIA as book_data.jsonl and serves it as parquet too (its conversion,
    Dataset.to_parquet); to_json(orient="records") writes one JSON array. Each is the same rows: the
    same passages, splits and rejects, a parquet file's rows numbered from 1 (an array's elements at
    their lines). They were read as JSON lines: the parquet file was 'invalid UTF-8 at byte offset ...',
    the array one rejected row."""
    import importlib.util

    rows = [json.loads(line) for line in BOOKMIA_SPLIT_LINES if line.startswith("{\"")]
    rows[3]["snippet"] = " "  # one row rejected, holding its place in the split
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    _, _, want, want_rejects = _load_excerpt(tmp_path, "BookMIA.jsonl", "bookmia", lines, validation_rows=4)
    assert len(want) == 8 and [(r.line, r.key) for r in want_rejects] == [(4, "snippet")]
    expected = [(p.passage_id, p.label, p.text, p.meta["split"]) for p in want]
    array = json.dumps(rows, indent=1).encode()
    path, docs, passages, rejects = _load_excerpt(tmp_path, "BookMIA.json", "bookmia", array, validation_rows=4)
    assert [(p.passage_id, p.label, p.text, p.meta["split"]) for p in passages] == expected
    assert [p.meta["source_line"] for p in passages][:3] == [2, 9, 16]  # each element where it starts
    assert [(r.line, r.key, r.reason) for r in rejects] == [(23, "snippet", "empty or whitespace-only text")]
    if importlib.util.find_spec("pyarrow") is None:
        return
    # by suffix, or by its magic bytes; labels as integers, or as a float64 column's 1.0 and 0.0 (the same labels)
    for name, dtype in (("0000.parquet", "int64"), ("book_data", "int64"), ("floats.parquet", "float64")):
        (tmp_path / name).unlink(missing_ok=True)
        pd.DataFrame(rows).astype({"label": dtype}).to_parquet(tmp_path / name, index=False)
        docs = published_benchmark("bo", {"format": "bookmia", "path": str(tmp_path / name), "validation_rows": 4},
                                   rejects=(rejects := []))[1]
        assert [(p.passage_id, p.label, p.text, p.meta["split"]) for p in docs] == expected
        assert [p.meta["source_line"] for p in docs] == [1, 2, 3, 5, 6, 7, 8, 9]  # row numbers
        assert [(r.line, r.key) for r in rejects] == [(4, "snippet")]


def test_bookmia_as_a_one_line_json_array_is_split_and_deduplicated_by_element(tmp_path):
    """DataFrame.to_json(orient="records") writes the whole array on line 1: rows are its elements.
    Keyed by line, every row was "test" (the split empty) and a repeated snippet_id was kept."""
    rows = [json.loads(line) for line in BOOKMIA_SPLIT_LINES if line.startswith("{\"")]
    rows.append(dict(rows[0]))  # element 9: a copy of element 0
    path, docs, passages, rejects = _load_excerpt(tmp_path, "BookMIA.json", "bookmia",
                                                  pd.DataFrame(rows).to_json(orient="records").encode(),
                                                  validation_rows=4)
    assert [(p.passage_id, p.meta["split"], p.meta["source_line"], p.meta["source_element"]) for p in passages] == [
        ("0#0", "validation", 1, 0), ("0#1", "validation", 1, 1), ("1#0", "validation", 1, 2),
        ("1#1", "validation", 1, 3), ("2#0", "test", 1, 4), ("2#1", "test", 1, 5), ("3#0", "test", 1, 6),
        ("3#1", "test", 1, 7), ("0#2", "test", 1, 8)]
    assert [r.message() for r in rejects] == [
        f"{path}, line 1, element 9, key snippet_id: duplicate snippet: same book_id and snippet_id as element 0"]
    from memaudit.datasets.rejects import write_benchmark_rejects

    write_benchmark_rejects("bo", rejects, tmp_path / "results")
    table = pd.read_csv(tmp_path / "results" / "datasets" / "bo" / "rejects.csv", keep_default_na=False)
    assert table[["line", "element", "key"]].values.tolist() == [[1, 9, "snippet_id"]]


def test_a_parquet_file_given_to_a_text_loader_is_named_as_parquet(tmp_path):
    """A QA set or a labels file read as JSON lines or CSV only: a parquet file (the Hub's export) given
    to one said 'invalid UTF-8 at byte offset N ... convert the file to UTF-8'."""
    from memaudit.datasets.label_files import read_labels
    from memaudit.datasets.qa import read_qa_jsonl

    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1\x15\x04\x15\xfa\x01" + b"\0" * 32 + b"PAR1")
    with pytest.raises(InputError) as info:
        read_qa_jsonl(path)
    assert str(info.value) == (f"{path}: a parquet file, expected a QA JSON-lines file in UTF-8; export it with "
                               f"pandas.read_parquet(...).to_json(orient='records', lines=True), or "
                               f".to_csv(index=False) for a CSV")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: a parquet file, expected a CSV file of "
                                         rf"title,label rows in UTF-8; export it"):
        read_labels(path, "title")


def test_validation_rows_is_a_bookmia_key():
    assert validate_config(_config(published={"format": "bookmia", "path": "x.jsonl", "validation_rows": 0}))
    assert validate_config(_config(published={"format": "bookmia", "path": "x.jsonl", "validation_rows": 1870}))
    with pytest.raises(ConfigError, match=r"benchmarks\.bt\.published\.validation_rows: only format bookmia has a "
                                          r"fixed validation split by row"):
        validate_config(_config(published={"format": "booktection", "path": "x.csv", "validation_rows": 10}))
    with pytest.raises(ConfigError, match=r"validation_rows"):
        validate_config(_config(published={"format": "bookmia", "path": "x.jsonl", "validation_rows": -1}))


@pytest.mark.slow
def test_a_published_booktection_csv_runs_through_the_workflow_like_the_built_benchmark(ci_run, tmp_path):
    """The ci run's novels questions, written as a BookTection CSV and configured as a published
    benchmark, give each document the same likelihood-mode accuracy as the built benchmark did; with
    ``strict: true`` a bad row fails the dataset job with the file, line and column and leaves earlier
    results alone."""
    from workflow_helpers import snakemake

    workdir = shutil.copytree(ci_run, tmp_path / "tree", symlinks=True)
    items = read_jsonl(workdir / "results/datasets/novels/decop_items.jsonl")
    rows = [{"ID": it["doc_id"], "Label": it["label"], "Length": "small", "Answer": "A",
             **{f"Example_{c}": o for c, o in zip("ABCD", it["options"])}} for it in items]
    csv = _booktection(workdir, rows)
    config = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    model = config["probes"]["decop_likelihood"]["models"][-1]
    config["benchmarks"]["booktection"] = {"published": {"format": "booktection", "path": csv.name}}
    config["probes"]["decop_likelihood"]["benchmarks"] = ["novels", "booktection"]
    config["probes"]["decop"]["n_documents"] = len({it["doc_id"] for it in items})
    config["probes"]["decop"]["calibration_documents"] = 1
    (workdir / "config/published.yaml").write_text(yaml.safe_dump(config))
    target = f"results/scores/booktection/{model}/decop_likelihood_table.csv"
    snakemake(workdir, "--cores", "2", target, "--configfile", "config/published.yaml")
    def accuracy(path):
        table = pd.read_csv(path)
        return table[table["method"] == "decop-likelihood"].set_index("doc_id")["accuracy"].sort_index()

    got = accuracy(workdir / target)
    assert len(got) == len(items) >= 3
    pd.testing.assert_series_equal(got, accuracy(workdir / f"results/scores/novels/{model}/decop_likelihood_table.csv"))
    passages = read_jsonl(workdir / "results/datasets/booktection/passages.jsonl")
    assert sorted(p["text"] for p in passages) == sorted(it["options"][0] for it in items)

    rows[2]["Answer"] = "E"
    pd.DataFrame(rows).to_csv(csv, index=False)
    config["benchmarks"]["booktection"]["published"]["strict"] = True
    (workdir / "config/published.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(workdir, "--cores", "2", target, "--configfile", "config/published.yaml", check=False)
    assert proc.returncode != 0
    assert "BookTection.csv, line 4, column Answer: 'E' is not one of A, B, C, D" in proc.stdout + proc.stderr
    assert accuracy(workdir / target).equals(got)


# --------------------------------------------------------------------------- black-box mode on API models

KEY_ENV, KEY = "MEMAUDIT_TEST_DECOP_KEY", "sk-test-decop-never-in-a-file"


class Memorizer:
    """A chat model that knows the member passages: it answers their letter; on other questions it
    always answers "A" (right once per Latin-square rotation) and refuses one question."""

    def __init__(self, members: set[str], refuse: str):
        self.members, self.refuse = members, refuse

    def __call__(self, request):
        options = dict(re.findall(r"^([A-D])\. (.*)$", request.prompt, re.MULTILINE))
        known = [letter for letter, text in options.items() if text in self.members]
        if known:
            return ChatReply(text=f"Answer: {known[0]}", input_tokens=200, output_tokens=3)
        if self.refuse in options.values() and options.get("A") == self.refuse:
            return ChatReply(text=refusal_text(), input_tokens=200, output_tokens=12)
        return ChatReply(text="A", input_tokens=200, output_tokens=1)


def _api_workflow(tmp_path, base_url: str, *, concurrency: int = 4):
    """A scratch workflow whose only benchmark is a published CSV and whose only model is an API model."""
    from workflow_helpers import make_workdir

    rows = [_row(f"Book_{i}_-_Author_{i}", int(i < 6), n) for i in range(14) for n in range(2)]
    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf", share_resources=False)
    _booktection(workdir, rows)
    api = {"api_key_env": KEY_ENV, "concurrency": concurrency, "base_url": base_url,
           "model_id": "memorizer-v1", "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}
    config = {
        "seed": 7, "assets_dir": "resources/demo", "cache_dir": "resources/cache",
        "benchmarks": {"booktection": {"published": {"format": "booktection", "path": "BookTection.csv"}}},
        "models": {"memorizer": {"family": "memorizer", "backend": "openai", "api": api}},
        "probes": {"token_prob": {}, "decop": {"lengths": [64], "n_documents": 12, "calibration_documents": 2,
                                               "orderings": "latin_square"},
                   "decop_blackbox": {}},
        "stats": {"n_boot_ci": 200, "blind_folds": 3},
    }
    (workdir / "config/api.yaml").write_text(yaml.safe_dump(config))
    # No asset is needed: the benchmark comes from the CSV, the model from the API.
    (workdir / "resources/demo").mkdir()
    (workdir / "resources/demo/.fetched").write_text("")
    members = {r["Example_A"] for r in rows if r["Label"] == 1}
    return workdir, Memorizer(members, rows[-1]["Example_A"])


class _Responder(ScriptedResponder):
    """A scripted server whose default reply is a callable's."""

    def __init__(self, reply):
        super().__init__()
        self.reply = reply

    def default(self, request):
        return self.reply(request)


@pytest.mark.slow
def test_decop_blackbox_on_api_models_through_the_workflow(tmp_path, monkeypatch):
    """Published questions, an OpenAI-API model behind the loopback server, the whole workflow:
    members answered right in every ordering, the others right once in four; the refusal is
    counted as a wrong answer, the ledger counts the requests and a forced rerun sends none."""
    from workflow_helpers import snakemake

    monkeypatch.setenv(KEY_ENV, KEY)
    memorizer = None
    with ChatServer(_Responder(lambda request: memorizer(request))) as server:
        workdir, memorizer = _api_workflow(tmp_path, server.openai_base_url)
        targets = ["results/summary/metrics.csv", "results/api/ledger.csv"]
        snakemake(workdir, *targets, "--cores", "2", "--resources", "api_openai=4", "--configfile", "config/api.yaml")
        n_items = len(read_jsonl(workdir / "results/datasets/booktection/decop_items.jsonl"))
        assert n_items == 2 * 14 and server.count("openai") == 4 * n_items
        table = pd.read_csv(workdir / "results/scores/booktection/memorizer/decop_blackbox_table.csv")
        evaluated = table[table["role"] == "evaluate"].set_index("doc_id")
        assert (evaluated.loc[evaluated["label"] == 1, "accuracy"] == 1.0).all()
        refusing = "Book_13_-_Author_13"
        assert table.set_index("doc_id")["n_refusal"].to_dict() == {d: int(d == refusing) for d in table["doc_id"]}
        others = evaluated[(evaluated["label"] == 0) & (evaluated.index != refusing)]
        assert (others["accuracy"] == 0.25).all() and len(others) >= 4
        summary = pd.read_csv(workdir / "results/summary/metrics.csv").set_index("method")
        assert summary.loc["decop-blackbox", "auc"] == pytest.approx(1.0)
        ledger = pd.read_csv(workdir / "results/api/ledger.csv").set_index("model")
        assert ledger.loc["memorizer", "n_sent"] == 4 * n_items and ledger.loc["memorizer", "n_refusal"] == 1
        snakemake(workdir, *targets, "--cores", "2", "--forcerun", "decop_probe", "--configfile", "config/api.yaml")
        assert server.count("openai") == 4 * n_items  # every answer from the response cache
    written = [p for top in ("results", "logs", ".snakemake", "config") for p in (workdir / top).rglob("*")
               if p.is_file()]
    assert [p for p in written if KEY.encode() in p.read_bytes()] == []


@pytest.mark.slow
def test_a_workflow_killed_while_asking_an_api_model_pays_for_no_answer_twice(tmp_path, monkeypatch):
    """SIGTERM to the running Snakemake (as a cluster's scancel or a user's Ctrl-C sends it) in the
    middle of the DE-COP job's requests: the answers in flight are stored before the job stops,
    the rerun finishes the job and sends exactly the requests never answered."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from workflow_helpers import SNAKEMAKE

    monkeypatch.setenv(KEY_ENV, KEY)
    memorizer = None
    with ChatServer(_Responder(lambda request: memorizer(request)), latency=0.15) as server:
        workdir, memorizer = _api_workflow(tmp_path, server.openai_base_url, concurrency=2)
        target = "results/scores/booktection/memorizer/decop_blackbox_table.csv"
        cmd = [*SNAKEMAKE, target, "--cores", "1", "--configfile", "config/api.yaml"]
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while server.count("openai") < 20:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=120)[0].decode()
        first = server.count("openai")
        assert proc.returncode != 0 and not (workdir / target).exists(), out[-3000:]
        assert "JobInterrupted: stopped by SIGTERM" in (workdir / "logs/decop_probe/booktection/memorizer/blackbox.log"
                                                        ).read_text()
        rerun = subprocess.run([*cmd, "--rerun-incomplete"], cwd=workdir, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        n_questions = 4 * len(read_jsonl(workdir / "results/datasets/booktection/decop_items.jsonl"))
    assert 20 <= first < n_questions
    assert server.count("openai") == n_questions  # no question reached the server twice
    assert len(pd.read_csv(workdir / "results/scores/booktection/memorizer/decop_blackbox_answers.csv")) == n_questions


REAL_ARXIV = Path(__file__).resolve().parents[1] / "resources/published/arXivTection.csv"


@pytest.mark.skipif(not REAL_ARXIV.is_file(), reason="the real file is not committed: put DE-COP_Method's "
                    "data/arXivTection.csv in resources/published/ (git-ignored) to check against it")
def test_the_real_arxivtection_file_loads_but_for_its_blank_option():
    items, rejected = published_items({"format": "arxivtection", "path": str(REAL_ARXIV)})
    labels = {it["doc_id"]: it["label"] for it in items}
    assert (len(items), len(labels), sum(labels.values())) == (1548, 50, 25)
    assert [(r.line, r.key, r.value, r.reason) for r in rejected] == [
        (615, "Example_A", "' '", "empty or whitespace-only text")]
    lines = [it["meta"]["source_line"] for it in items]
    assert lines[626:629] == [629, 630, 634]  # the record at line 630 spans four lines


@pytest.mark.skipif(not REAL_ARXIV.is_file(), reason="the real file is not committed: put DE-COP_Method's "
                    "data/arXivTection.csv in resources/published/ (git-ignored) to check against it")
def test_the_real_arxivtection_files_longest_option_is_the_verbatim_one_far_above_chance():
    """The length cue in the paper's own benchmark: picking the option with the most words finds
    the verbatim passage far above chance (25%), more often on members' passages than on
    non-members': a model that reads nothing separates them with AUC 0.60."""
    from memaudit.probes.decop.analysis import longest_option_rate, longest_option_rows

    items, _ = published_items({"format": "arxivtection", "path": str(REAL_ARXIV)})
    hits, n, p = longest_option_rate(items)
    assert (hits, n) == (583, 1548) and p < 1e-25  # strictly the longest: 38%
    (row,) = longest_option_rows(items).to_dict("records")
    assert (row["model"], row["method"], row["length"], row["n_documents"]) == ("(none)", "decop-longest-option",
                                                                                128, 50)
    assert row["accuracy_members"] == pytest.approx(0.4426, abs=1e-4)
    assert row["accuracy_nonmembers"] == pytest.approx(0.3876, abs=1e-4)
    assert row["auc"] == pytest.approx(0.5992, abs=1e-4)


def test_an_arxivtection_run_at_a_length_it_has_no_questions_of_says_which_length_it_has(tmp_path):
    """arXivTection has no Length column: its questions count as 128-token ones. With ``lengths: [64]`` the
    items job said only BookTection's sizes, leaving a user of arXivTection to guess."""
    rows = [{k: v for k, v in _row(f"Paper {i}", i % 2, n).items() if k != "Length"} for i in range(4)
            for n in range(2)]
    path = tmp_path / "arXivTection.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    published = {"format": "arxivtection", "path": str(path)}
    docs, _ = published_benchmark("ax", published)
    write_jsonl(tmp_path / "documents.jsonl", (d.to_dict() for d in docs))
    with pytest.raises(InputError) as err:
        published_items_for_run(tmp_path / "documents.jsonl", published,
                                {"lengths": [64], "calibration_documents": 0}, 13, tmp_path / "i.jsonl",
                                tmp_path / "q.csv")
    assert str(err.value) == (
        f"{path}: no question of length(s) [64] tokens among the selected documents (probes.decop.lengths; "
        "arXivTection's questions count as 128 tokens, BookTection's small/medium/large as 64/128/256)")
