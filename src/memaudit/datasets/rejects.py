"""The published-data policy of the cloze-probe datasets (NYT Exhibit J, articles, QA).

The same policy as :mod:`memaudit.datasets.copybench_published`, with its record type: a row
the loader cannot use is skipped, never the whole file, and reported as a
:class:`~memaudit.datasets.copybench_published.Rejected` row (file, line where the record
starts, key, a short repr of the value, reason); ``strict=True`` turns the first one (in line
order) into a one-line :class:`~memaudit.errors.InputError`. A file that cannot be read at all
(missing, a directory, empty, a spreadsheet, a parquet file where text is read, UTF-16 or otherwise not
UTF-8, broken CSV quoting) is always a one-line
``InputError`` naming the file and, where there is one, the line.

A benchmark's rejects go to ``results/datasets/<benchmark>/rejects.csv``
(:func:`write_benchmark_rejects`), beside its documents and passages, with the columns of
CopyBench's ``copybench_rejects.csv`` for published files: file, line, element, key, value,
reason, action. ``line`` is the physical line where the record starts (1-based, as an
editor shows it; a CSV header is line 1), the row number for a parquet file, and 0 for a problem
with a whole file (an unreadable PDF, an article without a date). ``element`` is a JSON array's
element (0-based, as ``data[12]`` indexes it), empty for other files: it is what identifies the
record, since ``DataFrame.to_json(orient="records")`` writes the whole array on line 1.
"""

from __future__ import annotations

import csv
import json
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

# one definition of the rejects machinery, shared with the CopyBench loaders
from memaudit.datasets.copybench_published import (
    MISSING,
    RECORD_DECODER,
    TOO_DEEP,
    REJECT_COLUMNS,
    Rejected,
    RowReject,
    json_type,
    short_repr,
    write_rejects,
)
from memaudit.errors import InputError
from memaudit.io import invalid_utf8

__all__ = ["MISSING", "REJECT_COLUMNS", "REJECTS_FILE", "ColumnRejected", "Rejected", "RejectLog", "RowReject",
           "benchmark_rejects_path", "count_rejects", "csv_rows", "csv_rows_or_error", "json_type", "place",
           "short_repr", "write_benchmark_rejects", "write_rejects"]

REJECTS_FILE = "rejects.csv"
# "owner/name" (or "hf:owner/name", "datasets/owner/name"): how a Hugging Face Hub id looks.
_HUB_ID = re.compile(r"^(?:hf:|hf://|datasets/)?[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class ColumnRejected(Rejected):
    """A row of a CSV table left out: its key is a column, and the message says so."""

    def message(self) -> str:
        if self.key == "(record)":
            return f"{self.file}, {self.where()}: {self.reason}"
        return f"{self.file}, {self.where()}, column {self.key}: {self.reason}"


@dataclass
class RejectLog:
    """The rejected rows of one load; :meth:`finish` applies ``strict`` and sorts them by file and line.
    ``record`` is the row type (:class:`ColumnRejected` for a CSV table, whose messages say "column")."""

    strict: bool = False
    rows: list[Rejected] = field(default_factory=list)
    record: type[Rejected] = Rejected

    def add(self, file: str | Path, line: int, key: str, value: Any, reason: str, action: str = "rejected",
            element: int | None = None) -> None:
        self.rows.append(self.record(str(file), int(line), key, short_repr(value), reason, action, element))

    def reject(self, file: str | Path, line: int, exc: RowReject, element: int | None = None) -> None:
        self.add(file, line, exc.key, exc.value, exc.reason, element=element)

    def finish(self) -> list[Rejected]:
        """The rows in (file, line, element) order; with ``strict``, the first rejected one as an InputError."""
        rows = sorted(self.rows, key=lambda r: (r.file, r.line, -1 if r.element is None else r.element))
        rejected = [r for r in rows if r.action == "rejected"]
        if self.strict and rejected:
            more = f" ({len(rejected)} rows rejected in all)" if len(rejected) > 1 else ""
            raise InputError(rejected[0].message() + more)
        return rows


def place(row: Mapping[str, Any]) -> str:
    """Where a loaded row (``line``, ``element``) is, for a message that points from one row to
    another: ``line 3``, or ``element 12`` of a JSON array (whose elements may all be on line 1)."""
    element = row.get("element")
    return f"line {row['line']}" if element is None else f"element {element}"


def require_rows(path: str | Path, n_kept: int, rejects: Sequence[Rejected], what: str) -> None:
    """A load that kept nothing is an InputError naming the first reason, not an empty benchmark."""
    if n_kept:
        return
    rejected = [r for r in rejects if r.action == "rejected"]
    first = f"; first: {rejected[0].message()}" if rejected else ""
    raise InputError(f"{path}: no usable {what} ({len(rejected)} rejected{first})")


# ---------------------------------------------------------------- reading files


def check_local_file(path: str | Path, what: str) -> Path:
    """``path`` as a readable local file; a Hub id, a missing file or a directory is a one-line InputError."""
    path = Path(path)
    if not path.exists():
        if _HUB_ID.match(str(path)) and not path.suffix and not path.parent.exists():
            raise InputError(f"{path}: looks like a Hugging Face Hub id, and {what} is read from a local file: "
                             f"download the data file and give its path")
        raise InputError(f"{path}: file not found")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected {what}")
    return path


def read_text(path: str | Path, what: str) -> tuple[Path, str]:
    """The file's text (UTF-8, a leading BOM dropped); missing, directory, empty or non-UTF-8: InputError."""
    path = check_local_file(path, what)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not data.strip():
        raise InputError(f"{path}: empty file")
    _refuse_binary(path, data, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_utf8(path, data, exc) from None
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise InputError(f"{path}: empty file")
    return path, text


# What a file that is not UTF-8 text usually is, by its first bytes: said by name, not as a byte offset.
_NOT_TEXT = (
    (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?)", "export it as CSV (UTF-8)"),
    (b"\xd0\xcf\x11\xe0", "an OLE2 file (an Excel .xls workbook?)", "export it as CSV (UTF-8)"),
    (b"\xff\xfe", "UTF-16 text (little-endian byte-order mark)", "convert the file to UTF-8"),
    (b"\xfe\xff", "UTF-16 text (big-endian byte-order mark)", "convert the file to UTF-8"),
    # the Hub's own export of every set: said as such, not as a byte offset to "convert to UTF-8"
    (b"PAR1", "a parquet file", "export it with pandas.read_parquet(...)"
     ".to_json(orient='records', lines=True), or .to_csv(index=False) for a CSV"),
)


def _refuse_binary(path: Path, data: bytes, what: str) -> None:
    for magic, kind, remedy in _NOT_TEXT:
        if data.startswith(magic):
            raise InputError(f"{path}: {kind}, expected {what} in UTF-8; {remedy}")



# One physical line with its ending, split as ``io.StringIO(text, newline="")`` splits (on \r\n, \r
# or \n, endings kept), without copying the whole text into StringIO's four-bytes-a-character buffer.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


_OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _lines(text: str) -> Iterator[str]:
    if not _OTHER_BREAKS.search(text):  # str.splitlines (fast) splits on these too; CSV does not
        return iter(text.splitlines(keepends=True))
    return (m.group() for m in _LINE.finditer(text))


UNCLOSED_LAST_ROW = "unclosed quote: the file ends inside this row"


def csv_rows(path: str | Path, text: str, *,
             empty_fields: bool = False) -> Iterator[tuple[int, list[str] | RowReject]]:
    """``(start line, cells)`` of each non-blank CSV row, in one pass; broken quoting is an
    :class:`InputError` naming the line where the row starts. ``empty_fields``: a line of empty
    fields (``,,``) is a row too, for a loader that rejects it with its line (a blank line never is).
    Line ends inside a quoted field (CRLF or CR) are ``\n`` in the cells.

    Quoting is read strictly: a lenient reader closes a quote left open (a stray quote, a truncated
    file) wherever the quotes happen to pair up, or at the end of the file, and so merged the rows
    after it into one field without a word. Only a quote left open on the last line, which takes in
    no other row, costs that row alone: it comes as a :class:`RowReject` in place of its cells
    (:data:`UNCLOSED_LAST_ROW`), for the loader to reject (a truncated file's last row loaded
    whenever its field count happened to match), or to raise where any problem stops the build
    (:func:`csv_rows_or_error`)."""
    reader = csv.reader(_lines(text), strict=True)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if str(exc) == "unexpected end of data" and reader.line_num == start:
                last = deque(_lines(text), maxlen=1)[0]
                yield start, RowReject("(record)", last.strip(), UNCLOSED_LAST_ROW)
                return
            reason = ("a quoted field opened in this record is never closed: a stray quote or a truncated file?"
                      if str(exc) == "unexpected end of data" else exc)
            raise InputError(f"{path}, line {start}: not valid CSV ({reason})") from None
        if any(cell.strip() for cell in row) or (empty_fields and len(row) > 1):
            # a quoted field over several lines keeps the file's line ends: "\n", as the same set in JSON has it
            yield start, [cell.replace("\r\n", "\n").replace("\r", "\n") if "\r" in cell else cell for cell in row]


def csv_rows_or_error(path: str | Path, text: str, *, empty_fields: bool = False) -> Iterator[tuple[int, list[str]]]:
    """:func:`csv_rows` for a file whose every problem stops the build (a user's labels): a last row
    with its quote left open is an :class:`InputError` naming the line, as other broken quoting is."""
    for start, row in csv_rows(path, text, empty_fields=empty_fields):
        if isinstance(row, RowReject):
            raise InputError(f"{path}, line {start}: not valid CSV ({row.reason})")
        yield start, row


def json_lines(text: str) -> Iterator[tuple[int, Any]]:
    """``(line, record)`` for each non-blank line of a JSON-lines text; a line that is not JSON
    yields a :class:`RowReject` as its record (the caller rejects that line only)."""
    for line_no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield line_no, RECORD_DECODER.decode(line)
        except json.JSONDecodeError as exc:
            yield line_no, RowReject("(record)", line.strip(), f"not valid JSON ({exc.msg}, column {exc.colno})")
        except RecursionError:  # the decoder recurses per nesting level: thousands of '[' are no record
            yield line_no, RowReject("(record)", line.strip(), f"not valid JSON ({TOO_DEEP})")


def check_text(key: str, value: Any, *, allow_empty: bool = False) -> str:
    """A string field: not another type, not empty (unless ``allow_empty``), no NUL character."""
    if value is MISSING:
        raise RowReject(key, value, "missing key")
    if not isinstance(value, str):
        raise RowReject(key, value, f"expected a string, got {json_type(value)}")
    if not allow_empty and not value.strip():
        raise RowReject(key, value, "empty or whitespace-only text")
    nul = value.find("\x00")
    if nul >= 0:
        raise RowReject(key, value, f"contains a NUL character at position {nul}")
    return value


# ---------------------------------------------------------------- writing


def benchmark_rejects_path(benchmark: str, results_dir: str | Path = "results") -> Path:
    """``results/datasets/<benchmark>/rejects.csv``: where a benchmark's rejected rows are written."""
    return Path(results_dir) / "datasets" / benchmark / REJECTS_FILE


def write_benchmark_rejects(benchmark: str, rejects: Sequence[Rejected], results_dir: str | Path = "results") -> Path:
    """Write a benchmark's rejected rows (an empty table when there are none) and return the path."""
    path = benchmark_rejects_path(benchmark, results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rejects(path, rejects)
    return path


REJECT_COUNT_COLUMNS = ("benchmark", "file", "reason", "action", "n_rows")


def count_rejects(tables: Mapping[str, str | Path]) -> "pd.DataFrame":
    """``results/summary/rejects.csv``: per benchmark (``{benchmark: its rejects.csv}``), the rows
    of its input files the loaders rejected or kept with a note, counted by file, reason and
    action; a benchmark whose inputs loaded whole gets one row with ``n_rows`` 0, so the table
    shows every benchmark was checked."""
    import pandas as pd

    rows = []
    for benchmark, path in sorted(tables.items()):
        try:
            table = pd.read_csv(path, dtype=str, keep_default_na=False)
        except pd.errors.EmptyDataError:
            table = pd.DataFrame(columns=list(REJECT_COLUMNS))
        missing = [c for c in ("file", "reason", "action") if c not in table.columns]
        if missing:
            raise InputError(f"{path}: not a rejects table (no column {missing[0]!r})")
        if table.empty:
            rows.append({"benchmark": benchmark, "file": "", "reason": "", "action": "", "n_rows": 0})
            continue
        counts = table.groupby(["file", "reason", "action"], sort=True).size()
        rows += [{"benchmark": benchmark, "file": f, "reason": r, "action": a, "n_rows": int(n)}
                 for (f, r, a), n in counts.items()]
    return pd.DataFrame(rows, columns=list(REJECT_COUNT_COLUMNS))
