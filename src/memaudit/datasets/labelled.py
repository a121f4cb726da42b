"""Published sets of labelled texts, one text per row, under the published-data policy.

One reader for every format that is "a text and a 0/1 label per row" (the NYT Exhibit J set of
the information-guided probes, WikiMIA and XSum/BBC-style member/non-member sets of the KTD
paper), so each is a :class:`LabelledSet` (its text field, its optional fields, what its labels
mean) and not a copy of the parsing:

- ``.parquet`` (read with ``pyarrow``; where it is missing the error says how to convert);
- JSON lines (``.jsonl``/``.json``/``.ndjson``), as ``Dataset.to_json`` or
  ``DataFrame.to_json(orient="records", lines=True)`` writes them, or a JSON array of the same
  objects (each element at the line where it starts, and named by its index, 0-based: the
  rejects' ``element`` column and the passages' ``meta.element``, since ``orient="records"``
  without ``lines`` puts every element on line 1);
- CSV with a header row, fields with commas, quotes or newlines quoted, so one record may span
  several physical lines (every message names the line where it starts; a line end inside a
  field, CRLF or CR, is read as ``\n``, as the same set in JSON gives it).

Field names match case-insensitively; other fields are kept in ``extra``. The label must be
exactly 0 or 1 (the number in JSON and parquet, where a float column's 0.0 and 1.0 count, the text in a CSV
cell). A row with an empty
text, another label, a NUL character, broken JSON, a key given twice or a wrong field count is
rejected with its line; a repeated text (whitespace- and NFC-normalised) is rejected, and every copy of a
text given with conflicting labels is rejected (:func:`deduplicate`); a non-member sharing a 13-word run with a
member keeps its label with a ``kept`` row (:func:`note_near_duplicates`). A file that cannot be read at all is a
one-line :class:`~memaudit.errors.InputError`.

WikiMIA (``swj0419/WikiMIA``, splits ``WikiMIA_length32`` ... ``_length256``): ``input`` and
``label``, 1 = Wikipedia events before 2017 (seen by the models), 0 = events after 2023. The
XSum/BBC-style sets of the KTD paper (Section 5) are a user's own member/non-member texts in the
same shape, ``text`` (or the field ``text_key`` names) and ``label`` (1 = member).
"""

from __future__ import annotations

import csv
import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from memaudit import MEMBER
from memaudit.datasets.copybench_published import _array_elements, check_keys_once
from memaudit.datasets.near_duplicates import DEFAULT_NGRAM, near_duplicate_groups, nonmembers_sharing
from memaudit.datasets.rejects import (
    MISSING,
    Rejected,
    RejectLog,
    RowReject,
    check_local_file,
    check_text,
    csv_rows,
    json_lines,
    json_type,
    place,
    read_text,
    require_rows,
)
from memaudit.datasets.types import Document, Passage
from memaudit.errors import InputError

_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_CSV_FIELD_LIMIT = 64 * 1024 * 1024  # the csv module's default (128 KiB) is shorter than a long article


@dataclass(frozen=True)
class LabelledSet:
    """What one published set calls its fields: ``text`` (required, non-empty), ``optional``
    (strings, may be empty; null, as parquet and JSON give a missing value, reads as empty), and ``label``
    with ``label_meaning`` ("0 (...) or 1 (...)")."""

    what: str
    text: str
    optional: tuple[str, ...] = ()
    label_meaning: str = "0 (non-member) or 1 (member)"

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.text, *self.optional, "label")


def text_key(text: str) -> str:
    """A text with its whitespace normalised and in Unicode NFC: what makes two rows the same text ("Café"
    composed and decomposed is one text, which was two: a copy of it given the other label went unseen)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


# ---------------------------------------------------------------- raw records: (line, getter)

Getter = Callable[[str], Any]  # a field name -> its value, or MISSING


def json_getter(record: Any) -> Getter:
    """Case-insensitive access to a JSON object's keys; two keys equal but for case reject the row."""
    if not isinstance(record, dict):
        raise RowReject("(record)", record, f"expected an object, got {json_type(record)}")
    check_keys_once(record)
    keys: dict[str, str] = {}
    for key in record:
        other = keys.setdefault(str(key).strip().lower(), key)
        if other != key:
            raise RowReject(key, record[key], f"keys {other!r} and {key!r} differ only in case")
    return lambda name: record[keys[name.lower()]] if name.lower() in keys else MISSING


Records = Iterator[tuple[int, int | None, Any]]  # (line, element of a JSON array or None, record)


def json_records(path: Path, text: str) -> Records:
    """JSON lines, or one top-level array (each element at the line where it starts, and its index:
    what tells apart the elements of a one-line array)."""
    if text.lstrip().startswith("["):
        for index, line, value in _array_elements(path, text):
            yield line, index, value
    else:
        for line, value in json_lines(text):
            yield line, None, value


def _lines_only(records: Iterator[tuple[int, Any]]) -> Records:
    """CSV and parquet records, which a line (row number) identifies: no element."""
    for line, record in records:
        yield line, None, record


def csv_records(path: Path, text: str, fields: Sequence[str]) -> Iterator[tuple[int, Any]]:
    """Rows of a CSV with a header as ``(start line, dict or RowReject)``; broken quoting: InputError."""
    old_limit = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        header: list[str] | None = None
        for start, row in csv_rows(path, text, empty_fields=True):  # a ",," row has an empty text: rejected
            if isinstance(row, RowReject):  # a truncated file's last row: rejected, or the header: no table
                if header is None:
                    raise InputError(f"{path}, line {start}: not valid CSV ({row.reason})")
                yield start, row
                continue
            if header is None:
                header = _csv_header(path, row, start, fields)
                continue
            if len(row) != len(header):
                yield start, RowReject("(record)", ",".join(row), f"{len(row)} fields, the header has {len(header)}")
                continue
            yield start, dict(zip(header, row))
    finally:
        csv.field_size_limit(old_limit)


def _csv_header(path: Path, row: list[str], line: int, fields: Sequence[str]) -> list[str]:
    """The header's column names; ``fields`` (named in messages as given) must be there in any case,
    each name once."""
    names = [cell.strip() for cell in row]
    seen: dict[str, str] = {}
    for name in names:
        if not name:
            continue
        other = seen.setdefault(name.lower(), name)
        if other != name or names.count(name) > 1:
            raise InputError(f"{path}, line {line}: columns {other!r} and {name!r} have the same name")
    missing = [f for f in fields if f.lower() not in seen]
    if missing:
        raise InputError(f"{path}, line {line}: missing column(s) {', '.join(missing)} "
                         f"(expected {', '.join(fields)}, any case; found {', '.join(n for n in names if n) or 'none'})")
    return names


def parquet_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Rows of a parquet file as ``(row number from 1, dict)``, read with pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading parquet needs pyarrow (pip install pyarrow), or convert the file to "
                         f"JSON lines with DataFrame.to_json(orient='records', lines=True)") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError) for a broken file
        raise InputError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None
    for row_no, row in enumerate(rows, 1):
        yield row_no, row


def is_parquet(path: Path) -> bool:
    """Whether a local file is parquet: its magic bytes or its suffix."""
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1" or path.suffix.lower() == ".parquet"


def raw_records(path: str | Path, spec: LabelledSet) -> tuple[Path, str, Records]:
    """``(path, format, records)`` for a local file of the set, the format from its magic bytes or
    suffix; a record is ``(line, element, record)`` (``element``: see :func:`json_records`)."""
    path = check_local_file(path, spec.what)
    if is_parquet(path):
        return path, "parquet", _lines_only(parquet_records(path))
    path, text = read_text(path, spec.what)
    suffix = path.suffix.lower()
    if suffix in _JSON_SUFFIXES or (suffix != ".csv" and text.lstrip()[:1] in ("{", "[")):
        return path, "json", json_records(path, text)
    return path, "csv", _lines_only(csv_records(path, text, spec.fields))


# ---------------------------------------------------------------- checking one row


def check_label(value: Any, textual: bool, meaning: str, key: str = "label", *, parquet: bool = False) -> int:
    """Exactly 0 or 1: the number in JSON and parquet (not ``true``, ``1.0`` or ``"1"``), the text
    "0"/"1" in a CSV cell (``key``: the field's name in messages). A ``parquet`` float column's 0.0 and
    1.0 are those labels: pandas stores a label column with a missing value as float64, the column's type,
    not the row's (any other float, or a missing value, is still rejected, never rounded)."""
    if value is MISSING:
        raise RowReject(key, value, "missing key")
    if textual and value in ("0", "1"):
        return int(value)
    if not textual and type(value) is int and value in (0, 1):
        return value
    if parquet and type(value) is float and value in (0.0, 1.0):
        return int(value)
    # null says it all ("got null None" repeated it in Python's word)
    got = f"the text {value!r}" if textual else "null" if value is None else f"{json_type(value)} {value!r}"
    raise RowReject(key, value, f"not exactly {meaning}: got {got}")


def _check_row(get: Getter, fmt: str, spec: LabelledSet) -> dict[str, Any]:
    row = {spec.text: check_text(spec.text, get(spec.text)).strip(),
           "label": check_label(get("label"), fmt == "csv", spec.label_meaning, parquet=fmt == "parquet")}
    for key in spec.optional:
        value = get(key)
        # null is how parquet and Dataset.to_json say "none" (a CSV cell says it empty): the same row either way
        row[key] = "" if value is None else check_text(key, value, allow_empty=True).strip()
    return row


def _extra(record: Any, fields: Sequence[str]) -> dict[str, Any]:
    if not isinstance(record, dict):
        return {}
    return {str(k): v for k, v in record.items() if str(k).strip().lower() not in fields}



# ---------------------------------------------------------------- rows of a set


def read_rows(path: str | Path, spec: LabelledSet, log: RejectLog) -> tuple[Path, str, list[dict[str, Any]]]:
    """Every row that passes the per-row checks (``spec.text``, ``label``, ``spec.optional``, ``line``,
    ``element`` (a JSON array's, else None), ``extra``: the record's other fields), in file order;
    the others go to ``log``."""
    path, fmt, records = raw_records(path, spec)
    rows = []
    for line, element, record in records:
        try:
            if isinstance(record, RowReject):
                raise record
            get = json_getter(record) if fmt != "csv" else (lambda name, r=record: csv_get(r, name))
            row = _check_row(get, fmt, spec)
        except RowReject as exc:
            log.reject(path, line, exc, element)
            continue
        extra = _extra(record, spec.fields) if fmt != "csv" else _csv_extra(record, spec.fields)
        rows.append(dict(row, line=line, element=element, extra=extra))
    return path, fmt, rows


def csv_get(record: dict[str, str], name: str) -> Any:
    """A CSV cell by field name, case ignored on both sides (names checked unique by :func:`_csv_header`)."""
    if name in record:  # the header spells it as asked: one look-up
        return record[name]
    name = name.lower()
    return next((value for key, value in record.items() if key.lower() == name), MISSING)


def located(row: dict[str, Any]) -> dict[str, int]:
    """A row's ``line`` for its document's and passage's meta, and its ``element`` where it is one of a JSON array."""
    return {"line": row["line"]} if row["element"] is None else {"line": row["line"], "element": row["element"]}


def _csv_extra(record: dict[str, str], fields: Sequence[str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k and k.lower() not in fields}


def deduplicate(path: Path, rows: list[dict[str, Any]], spec: LabelledSet, log: RejectLog) -> list[dict[str, Any]]:
    """One row per text (whitespace-normalised): a repeat with the same label is rejected; when the
    labels conflict every copy is rejected, since the set cannot say which label is right."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(text_key(row[spec.text]), []).append(row)
    kept = []
    for group in groups.values():
        first = group[0]
        labels = sorted({r["label"] for r in group})
        if len(labels) > 1:
            for row in group:
                others = ", ".join(f"{place(r)} (label {r['label']})" for r in group if r is not row)
                log.add(path, row["line"], "label", row["label"],
                        f"the same {spec.text} is on {others}: conflicting labels, every copy rejected",
                        element=row["element"])
            continue
        kept.append(first)
        for row in group[1:]:
            log.add(path, row["line"], spec.text, row[spec.text], f"duplicate {spec.text}, first on {place(first)}",
                    element=row["element"])
    return sorted(kept, key=lambda r: (r["line"], r["element"] or 0))


def note_near_duplicates(path: Path, rows: list[dict[str, Any]], spec: LabelledSet, log: RejectLog) -> None:
    """A ``kept`` row in ``log`` for each non-member row that shares a ``DEFAULT_NGRAM``-word run with member
    rows (a reprint, a quoted paragraph): the set's labels are never moved, as with a labels file or articles'
    dates (:func:`memaudit.datasets.near_duplicates.nonmembers_sharing`), but its scores measure a text seen in
    training, and the row says so."""
    groups = near_duplicate_groups({i: [row[spec.text]] for i, row in enumerate(rows)}, DEFAULT_NGRAM)
    for i, shared in nonmembers_sharing(groups, lambda j: rows[j]["label"] == MEMBER):
        log.add(path, rows[i]["line"], spec.text, rows[i][spec.text],
                f"a non-member that shares a {DEFAULT_NGRAM}-word run with the member(s) on "
                f"{', '.join(place(rows[j]) for j in shared)}: kept with its label", action="kept",
                element=rows[i]["element"])


# ---------------------------------------------------------------- WikiMIA and member/non-member sets


WIKIMIA = LabelledSet("WikiMIA", "input", label_meaning="0 (events after 2023, unseen) or 1 (before 2017, seen)")


def member_texts_set(text_field: str = "text") -> LabelledSet:
    """An XSum/BBC-style member/non-member set: ``text_field`` and ``label`` (1 = member)."""
    return LabelledSet("the member/non-member texts", text_field.strip().lower(),
                       label_meaning="0 (non-member) or 1 (member)")


def load_labelled(path: str | Path, spec: LabelledSet, *, source: str, kind: str = "text",
                  strict: bool = False) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """``(documents, passages, rejected)`` of a labelled set: one document and one passage per
    usable row (its text), ``doc_id`` ``<source>/<12 hex digits of the normalised text>`` (the
    same whatever the file format or row order), label 1 = member. ``strict=True``: the first
    rejected row is an InputError; a file with no usable row, or with one class only, is one too."""
    log = RejectLog(strict)
    path, fmt, rows = read_rows(path, spec, log)
    rows = deduplicate(path, rows, spec, log)
    note_near_duplicates(path, rows, spec, log)
    rejected = log.finish()
    require_rows(path, len(rows), rejected, "text")
    labels = {r["label"] for r in rows}
    if len(labels) < 2:
        raise InputError(f"{path}: every usable row has label {labels.pop()}; a benchmark needs members and "
                         f"non-members")
    docs, passages = [], []
    for row in rows:
        text = row[spec.text]
        doc_id = f"{source}/" + hashlib.sha256(text_key(text).encode("utf-8")).hexdigest()[:12]
        words = len(text.split())
        docs.append(Document(doc_id, source, "", "", kind, text,
                             {"label": row["label"], "origin": str(path), "format": fmt, **located(row),
                              "n_words": words, "n_passages": 1}))
        passages.append(Passage(f"{doc_id}#p0", doc_id, row["label"], text, "", "",
                                {"file": str(path), **located(row), "n_words": words, "extra": row["extra"]}))
    return sorted(docs, key=lambda d: d.doc_id), passages, rejected
