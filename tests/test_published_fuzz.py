"""Fuzzed published files (issue 14): BookTection/arXivTection CSVs, BookMIA JSON lines, labelled QA sets and
CopyBench's JSON arrays, from rows drawn with blank, duplicated, NUL-holding, mistyped and huge
fields, then written in another encoding, truncated or spliced with random bytes.

Each input either loads with every row accounted for (rows loaded + rows rejected = rows in the
file, counted here with the standard library, not the loader) and every loaded row equal to its
cells (NULs removed, which is then noted for that line, and surrounding whitespace stripped), or
fails with one line naming the file. Nothing else may be raised. Each test prints how many cases ran.
"""

from __future__ import annotations

import csv
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from file_helpers import run_cases, write_file
from memaudit.datasets.copybench_published import load_literal
from memaudit.datasets.published import TECTION_COLUMNS, load_bookmia, load_tection_file
from memaudit.errors import InputError

CELL = st.text(alphabet=st.sampled_from(["a", "b", " ", ",", '"', "\n", "\r", "\x00", "\u00e9", "\u2028"]),
               max_size=8)
HUGE = st.integers(100_000, 300_000).map(lambda n: "w " * n)
TECTION_ROW = st.fixed_dictionaries({
    **{c: st.one_of(st.sampled_from(["Verbatim text.", "Other.", " ", ""]), CELL) for c in TECTION_COLUMNS[:4]},
    "Answer": st.sampled_from(["A", "b", "E", "", " A"]),
    "ID": st.sampled_from(["P0", "P\x000", "Q, R", " ", "P0 "]),
    "Label": st.sampled_from(["0", "1", "0.7", "1.5", " 1", "", "yes"]),
})


def _mutate(data: bytes, how: tuple[str, int, bytes]) -> bytes:
    kind, at, extra = how
    at = at % (len(data) + 1)
    if kind == "truncate":
        return data[:at]
    if kind == "splice":
        return data[:at] + extra + data[at + len(extra):]
    return data


MUTATION = st.tuples(st.sampled_from(["none", "truncate", "splice"]), st.integers(0, 10**6),
                     st.binary(min_size=1, max_size=12))
ENCODING = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1"])


# What every fuzzed file varies besides its records: a huge field, the encoding, a truncation or
# splice, or random bytes in place of the file.
FILE_VARIANTS = {"huge": st.one_of(st.none(), HUGE), "encoding": ENCODING, "mutation": MUTATION,
                 "raw": st.one_of(st.none(), st.binary(max_size=200))}


def _one_line_error(exc: InputError, path) -> None:
    assert "\n" not in str(exc) and str(exc).startswith(str(path)), str(exc)


def _load_variant(load, path, data: bytes, mutation, raw):
    """Write the file (``raw`` bytes instead, or ``data`` mutated) and load it: the loader's result, or
    None after checking that its error is one line naming the file."""
    write_file(path, raw if raw is not None else _mutate(data, mutation))
    try:
        return load(path)
    except InputError as exc:
        _one_line_error(exc, path)
        return None


def _every_line_accounted_for(path, passages, rejected) -> dict[int, str]:
    """The file's non-blank JSON lines by number, after checking that each is a loaded passage or a
    rejected row (a ``kept`` row notes a loaded one)."""
    text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
    in_file = {n: line for n, line in enumerate(text.split("\n"), 1) if line.strip()}
    rejected_lines = {r.line for r in rejected if r.action == "rejected"}
    assert len(passages) + len(rejected_lines) == len(in_file)
    return in_file


def _csv_records(text: str) -> dict[int, list[str]]:
    """The file's non-blank CSV records by start line, read by the csv module on its own."""
    reader, records = csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline="")), {}
    old_limit = csv.field_size_limit(1 << 27)  # the huge fields
    try:
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return records
            # a row of blank cells (",," or " , ,") is a record the loader rejects (an empty text); a blank
            # line is none
            if any(cell.strip() for cell in row) or len(row) > 1:
                # a quoted field's line ends read as "\n", as text mode reads a file (universal newlines)
                records[start] = [cell.replace("\r\n", "\n").replace("\r", "\n") for cell in row]
    finally:
        csv.field_size_limit(old_limit)


def _cleaned(cell: str) -> str:
    return cell.replace("\x00", "").strip()


def test_fuzzed_booktection_files_load_with_every_row_accounted_for_or_fail_in_one_line(tmp_path):
    path = tmp_path / "arXivTection.csv"

    @settings(max_examples=150, deadline=None)
    @given(rows=st.lists(TECTION_ROW, max_size=6), **FILE_VARIANTS)
    def check(rows, huge, encoding, mutation, raw):
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(TECTION_COLUMNS)
        writer.writerows([[r[c] for c in TECTION_COLUMNS] for r in rows])
        if huge:
            writer.writerow([huge, "b", "c", "d", "A", "P0", "1"])
        loaded = _load_variant(lambda f: load_tection_file(f, kind="paper"), path,
                               buffer.getvalue().encode(encoding, errors="replace"), mutation, raw)
        if loaded is None:
            return
        items, rejected = loaded
        records = _csv_records(path.read_bytes().decode("utf-8"))
        header = min(records)
        rows_in_file = {line: cells for line, cells in records.items() if line != header}
        rejected_lines = {r.line for r in rejected if r.action == "rejected"}
        assert len(items) + len(rejected_lines) == len(rows_in_file)
        assert all(r.file == str(path) and r.line in rows_in_file for r in rejected)
        noted = {r.line for r in rejected if r.action == "kept"}
        for it in items:
            cells = dict(zip([c.strip() for c in records[header]], rows_in_file[it["meta"]["source_line"]]))
            assert it["options"] == [_cleaned(cells[c]) for c in TECTION_COLUMNS[:4]]
            assert (it["doc_id"], it["label"]) == (_cleaned(cells["ID"]), int(cells["Label"]))
            assert "ABCD"[it["answer"]] == cells["Answer"].strip().upper()
            if any("\x00" in cells[c] for c in ("ID", *TECTION_COLUMNS[:4])):
                assert it["meta"]["source_line"] in noted

    assert run_cases(check, "BookTection/arXivTection") >= 100


BOOKMIA_VALUE = st.one_of(st.integers(-1, 2), st.booleans(), st.none(), st.floats(allow_nan=False, max_value=2),
                          CELL, st.sampled_from(["7", "7\x00", "A snippet.", " "]))
BOOKMIA_RECORD = st.dictionaries(st.sampled_from(["book_id", "book", "snippet_id", "snippet", "label", "Label"]),
                                 BOOKMIA_VALUE, min_size=4, max_size=6)


def test_fuzzed_bookmia_files_load_with_every_line_accounted_for_or_fail_in_one_line(tmp_path):
    path = tmp_path / "BookMIA.jsonl"

    @settings(max_examples=150, deadline=None)
    @given(records=st.lists(BOOKMIA_RECORD, max_size=6), **FILE_VARIANTS)
    def check(records, huge, encoding, mutation, raw):
        lines = [json.dumps(r, ensure_ascii=encoding != "utf-8") for r in records]
        if huge:
            lines.append(json.dumps({"book_id": 1, "book": "B", "snippet_id": 0, "snippet": huge, "label": 1}))
        loaded = _load_variant(load_bookmia, path, ("\n".join(lines) + "\n").encode(encoding), mutation, raw)
        if loaded is None:
            return
        docs, passages, rejected = loaded
        in_file = _every_line_accounted_for(path, passages, rejected)
        noted = {r.line for r in rejected if r.action == "kept"}
        for p in passages:
            record = json.loads(in_file[p.meta["source_line"]], strict=False)
            assert p.text == _cleaned(record["snippet"]) and p.label == record["label"] in (0, 1)
            assert p.doc_id == (str(record["book_id"]) if isinstance(record["book_id"], int)
                                else _cleaned(record["book_id"]))
            if any(isinstance(v, str) and "\x00" in v for v in record.values()):
                assert p.meta["source_line"] in noted

    assert run_cases(check, "BookMIA") >= 100


COPYBENCH_RECORD = st.one_of(
    st.fixed_dictionaries({"id": st.sampled_from(["1", "2", "1 ", ""]), "title": st.sampled_from(["Emma", " ", "E\x00"]),
                           "input": st.one_of(CELL, st.sampled_from(["It was a cold day."])),
                           "reference": st.one_of(CELL, st.integers(), st.none())}),
    st.integers(), st.lists(st.integers(), max_size=2))


def test_fuzzed_copybench_literal_files_load_with_every_record_accounted_for_or_fail_in_one_line(tmp_path):
    path = tmp_path / "data.literal.json"

    @settings(max_examples=150, deadline=None)
    @given(records=st.lists(COPYBENCH_RECORD, max_size=6), **FILE_VARIANTS)
    def check(records, huge, encoding, mutation, raw):
        if huge:
            records = [*records, {"id": "h", "title": "Emma", "input": huge, "reference": "end"}]
        loaded = _load_variant(load_literal, path, json.dumps(records, indent=2).encode(encoding, errors="replace"),
                               mutation, raw)
        if loaded is None:
            return
        items, rejected = loaded
        published = json.loads(path.read_bytes().decode("utf-8").removeprefix("\ufeff"), strict=False)
        rejected_lines = {r.line for r in rejected if r.action == "rejected"}
        assert len(items) + len(rejected_lines) == len(published)
        for it in items:
            record = published[it.meta["index"]]
            assert (it.item_id, it.title, it.prefix, it.reference) == (record["id"], record["title"], record["input"],
                                                                       record["reference"])

    assert run_cases(check, "CopyBench data.literal.json") >= 100


USABLE_QA = st.fixed_dictionaries({"question": st.integers(0, 99).map(lambda i: f"Which year, {i}?"),
                                   "answer": st.integers(1900, 2000), "seen": st.sampled_from([0, 1])})
QA_RECORD = st.one_of(
    USABLE_QA,
    st.fixed_dictionaries(
        {"question": st.one_of(st.integers(0, 99).map(lambda i: f"Which river, {i}?"),
                               st.sampled_from(["Which river, 1? ", ""]), CELL),
         "choices": st.one_of(st.none(), st.none(), st.lists(st.sampled_from(["Nile", "Rhine", " ", "nile"]),
                                                                max_size=3)),
         "answer": st.one_of(st.integers(-1, 3), st.sampled_from(["Nile", "Rhine", ""]), st.booleans())},
        # mostly a usable label, and every kind of unusable one (a string, 2, 1.0, null, a boolean)
        optional={"seen": st.sampled_from([0, 1, 0, 1, 0, 1, "1", 2, 1.0, None, True]),
                  "id": st.one_of(st.integers(0, 3), st.sampled_from(["a", " ", ""]))}),
    st.integers(), st.lists(st.integers(), max_size=2))


def test_fuzzed_labelled_qa_files_load_with_every_line_accounted_for_or_fail_in_one_line(tmp_path):
    """A QA set that labels its own questions (``label_key``): each loaded question carries exactly the
    file's 0 or 1, and every other non-blank line is a rejected row."""
    from memaudit.datasets.qa import load_qa_jsonl

    path = tmp_path / "audit.jsonl"
    labels_loaded: list[int] = []

    @settings(max_examples=150, deadline=None)
    @given(records=st.lists(QA_RECORD, max_size=8), **FILE_VARIANTS)
    def check(records, huge, encoding, mutation, raw):
        lines = [json.dumps(r, ensure_ascii=encoding != "utf-8") for r in records]
        if huge:
            lines.append(json.dumps({"question": huge, "answer": "x", "seen": 1}))
        loaded = _load_variant(lambda p: load_qa_jsonl(p, label_key="seen"), path,
                               ("\n".join(lines) + "\n").encode(encoding), mutation, raw)
        if loaded is None:
            return
        docs, passages, rejected = loaded
        in_file = _every_line_accounted_for(path, passages, rejected)
        for p in passages:
            record = json.loads(in_file[p.meta["line"]], strict=False)
            # keys match in any case (qa 2): a mutation can make "seen" "Seen"
            seen = [v for k, v in record.items() if k.strip().lower() == "seen"]
            assert len(seen) == 1 and type(seen[0]) is int and p.label == seen[0] in (0, 1), record
            assert p.meta["half"] == "given"
            labels_loaded.append(p.label)

    assert run_cases(check, "labelled QA") >= 100
    assert set(labels_loaded) == {0, 1}  # the cases load questions of both labels, not only rejects
