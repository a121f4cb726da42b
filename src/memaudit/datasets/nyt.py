"""The NYT Exhibit J set of the information-guided probes paper (Section 4.2; Appendix E).

What the published set is, and where that was learnt (no Hub access from here; nothing was
downloaded):

- ``https://huggingface.co/datasets/lasha-nlp/NYT_Memorization`` (the page as stored by the
  search index, branch ``refs/convert/parquet``): formats "parquet", size "< 1K" rows, one
  config ``default`` with one split ``train``, the file ``default/train/0000.parquet``
  (484 kB).
- The README of the authors' repository ``AbhilashaRavichander/information-probing``: label 1 =
  the articles of Exhibit J of the New York Times lawsuit (text GPT-4 allegedly regurgitated),
  label 0 = CNN articles scraped in 2023, after the models' cutoff; fields "``Snippet`` is the
  article. ``Prefix`` is the prefix provided to the model according to the evidence in
  Exhibit-J. ``Completion`` is the original article content that follows the prefix."
- Public code that loads the set with ``datasets.load_dataset("lasha-nlp/NYT_Memorization")``
  reads ``x["snippet"]`` and ``x["label"] == 1``: the stored column names are lower-case
  (``snippet``, ``prefix``, ``completion``, ``label``), the README capitalises them.

The schema itself could not be read, so column names are matched case-insensitively, extra
columns are kept in ``meta["extra"]``, and the label must be exactly 0 or 1.

Accepted local files (memaudit never downloads this set; a Hub id is an InputError):

- ``.parquet`` (the Hub file; needs ``pyarrow``, which memaudit does not install);
- JSON lines (``.jsonl``/``.json``/``.ndjson``), as ``Dataset.to_json`` or
  ``DataFrame.to_json(orient="records", lines=True)`` writes the set: one compact object per
  line, ``\\/`` and ``\\u00e9``-style escapes, newlines inside articles as ``\\n``; or a JSON array
  of the same objects;
- CSV with a header row (``Dataset.to_csv`` / ``DataFrame.to_csv(index=False)``): fields with
  commas, quotes or newlines quoted, so one record may span several physical lines.

One :class:`~memaudit.datasets.types.Document` and one
:class:`~memaudit.datasets.types.Passage` per article: the passage text is the snippet, the
full text the cloze probe masks; ``meta`` keeps ``prefix`` and ``completion`` for the
prefix-probing baseline, the file and its ``line``. Title and author stay empty: the outlet
would tell a probe the label. Rows the loader cannot use follow the published-data policy of
:mod:`memaudit.datasets.rejects`.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path
from typing import Any, Callable, Iterator

from memaudit.datasets.copybench_published import _array_elements
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
    read_text,
    require_rows,
)
from memaudit.datasets.types import Document, Passage
from memaudit.errors import InputError

NYT_SOURCE = "nyt_exhibit_j"
NYT_FIELDS = ("snippet", "prefix", "completion", "label")
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_CSV_FIELD_LIMIT = 64 * 1024 * 1024  # the csv module's default (128 KiB) is shorter than a long article


# ---------------------------------------------------------------- raw records: (line, getter)

Getter = Callable[[str], Any]  # a field name -> its value, or MISSING


def _json_getter(record: Any) -> Getter:
    """Case-insensitive access to a JSON object's keys; two keys equal but for case reject the row."""
    if not isinstance(record, dict):
        raise RowReject("(record)", record, f"expected an object, got {json_type(record)}")
    keys: dict[str, str] = {}
    for key in record:
        other = keys.setdefault(str(key).strip().lower(), key)
        if other != key:
            raise RowReject(key, record[key], f"keys {other!r} and {key!r} differ only in case")
    return lambda name: record[keys[name]] if name in keys else MISSING


def _json_records(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """JSON lines, or one top-level array (each element at the line where it starts)."""
    if text.lstrip().startswith("["):
        for _, line, value in _array_elements(path, text):
            yield line, value
    else:
        yield from json_lines(text)


def _csv_records(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """Rows of a CSV with a header as ``(start line, dict or RowReject)``; broken quoting: InputError."""
    old_limit = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        header: list[str] | None = None
        for start, row in csv_rows(path, text):
            if header is None:
                header = _csv_header(path, row, start)
                continue
            if len(row) != len(header):
                yield start, RowReject("(record)", ",".join(row), f"{len(row)} fields, the header has {len(header)}")
                continue
            yield start, dict(zip(header, row))
    finally:
        csv.field_size_limit(old_limit)


def _csv_header(path: Path, row: list[str], line: int) -> list[str]:
    """The header's column names; the four fields must be there (any case), each name once."""
    names = [cell.strip() for cell in row]
    seen: dict[str, str] = {}
    for name in names:
        if not name:
            continue
        other = seen.setdefault(name.lower(), name)
        if other != name or names.count(name) > 1:
            raise InputError(f"{path}, line {line}: columns {other!r} and {name!r} have the same name")
    missing = [f for f in NYT_FIELDS if f not in seen]
    if missing:
        raise InputError(f"{path}, line {line}: missing column(s) {', '.join(missing)} "
                         f"(expected {', '.join(NYT_FIELDS)}, any case; found {', '.join(n for n in names if n) or 'none'})")
    return names


def _parquet_records(path: Path) -> Iterator[tuple[int, Any]]:
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


def _raw_records(path: str | Path) -> tuple[Path, str, Iterator[tuple[int, Any]]]:
    """``(path, format, records)`` for a local NYT file, the format from its magic bytes or suffix."""
    path = check_local_file(path, "the NYT Exhibit J set")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1" or path.suffix.lower() == ".parquet":
        return path, "parquet", _parquet_records(path)
    path, text = read_text(path, "the NYT Exhibit J set")
    suffix = path.suffix.lower()
    if suffix in _JSON_SUFFIXES or (suffix != ".csv" and text.lstrip()[:1] in ("{", "[")):
        return path, "json", _json_records(path, text)
    return path, "csv", _csv_records(path, text)


# ---------------------------------------------------------------- checking one row


def _label(value: Any, textual: bool) -> int:
    """Exactly 0 or 1: the number in JSON and parquet (not ``true``, ``1.0`` or ``"1"``), the text
    "0"/"1" in a CSV cell."""
    if value is MISSING:
        raise RowReject("label", value, "missing key")
    if textual and value in ("0", "1"):
        return int(value)
    if not textual and type(value) is int and value in (0, 1):
        return value
    got = f"the text {value!r}" if textual else f"{json_type(value)} {value!r}"
    raise RowReject("label", value, f"not exactly 0 (other outlet, after the cutoff) or 1 (Exhibit J): got {got}")


def _check_row(get: Getter, textual: bool) -> dict[str, Any]:
    snippet = check_text("snippet", get("snippet"))
    label = _label(get("label"), textual)
    prefix = check_text("prefix", get("prefix"), allow_empty=True)
    completion = check_text("completion", get("completion"), allow_empty=True)
    return {"snippet": snippet.strip(), "label": label, "prefix": prefix.strip(), "completion": completion.strip()}


def _extra(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict):
        return {}
    return {str(k): v for k, v in record.items() if str(k).strip().lower() not in NYT_FIELDS}


# ---------------------------------------------------------------- the loader


def _snippet_key(snippet: str) -> str:
    return " ".join(snippet.split())


def nyt_doc_id(snippet: str) -> str:
    """``nyt/<12 hex digits>``: a hash of the whitespace-normalised snippet, the same whichever
    file format or row order the set comes in."""
    return "nyt/" + hashlib.sha256(_snippet_key(snippet).encode("utf-8")).hexdigest()[:12]


def _read_rows(path: str | Path, log: RejectLog) -> tuple[Path, str, list[dict[str, Any]]]:
    """Every row that passes the per-row checks, with its line; the others go to ``log``."""
    path, fmt, records = _raw_records(path)
    rows = []
    for line, record in records:
        try:
            if isinstance(record, RowReject):
                raise record
            get = _json_getter(record) if fmt != "csv" else (lambda name, r=record: _csv_get(r, name))
            row = _check_row(get, textual=fmt == "csv")
        except RowReject as exc:
            log.reject(path, line, exc)
            continue
        for key in ("prefix", "completion"):
            if not row[key]:
                log.add(path, line, key, "", f"empty {key}: kept for the cloze probe; the prefix probe "
                        f"has no {key} for it", action="kept")
        rows.append(dict(row, line=line, extra=_extra(record) if fmt != "csv" else _csv_extra(record)))
    return path, fmt, rows


def _csv_get(record: dict[str, str], name: str) -> Any:
    """A CSV cell by field name, the header's case ignored (checked unique by :func:`_csv_header`)."""
    return next((value for key, value in record.items() if key.lower() == name), MISSING)


def _csv_extra(record: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in record.items() if k and k.lower() not in NYT_FIELDS}


def _deduplicate(path: Path, rows: list[dict[str, Any]], log: RejectLog) -> list[dict[str, Any]]:
    """One row per snippet (whitespace-normalised): a repeat with the same label is rejected; when the
    labels conflict every copy is rejected, since the set cannot say which label is right."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_snippet_key(row["snippet"]), []).append(row)
    kept = []
    for group in groups.values():
        first = group[0]
        labels = sorted({r["label"] for r in group})
        if len(labels) > 1:
            for row in group:
                others = ", ".join(f"line {r['line']} (label {r['label']})" for r in group if r is not row)
                log.add(path, row["line"], "label", row["label"],
                        f"the same snippet is on {others}: conflicting labels, every copy rejected")
            continue
        kept.append(first)
        for row in group[1:]:
            log.add(path, row["line"], "snippet", row["snippet"], f"duplicate snippet, first on line {first['line']}")
    return sorted(kept, key=lambda r: r["line"])


def load_nyt(path: str | Path, strict: bool = False) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """Load a local copy of the NYT Exhibit J set (Section 4.2) under the published-data policy.

    Returns ``(documents, passages, rejected)``: one document and one passage per usable article
    (label 1 = Exhibit J, member; 0 = later CNN article, non-member), in file order for the
    passages and by ``doc_id`` for the documents. Rejected: an empty snippet, a label other than
    exactly 0 or 1, a NUL character, a malformed line or a wrong field count, a repeated snippet,
    and every copy of a snippet given with conflicting labels. An empty prefix or completion is
    kept with a note (action ``kept``). ``strict=True``: the first rejected row is an InputError.
    A file with no usable row is an InputError.
    """
    log = RejectLog(strict)
    path, fmt, rows = _read_rows(path, log)
    rows = _deduplicate(path, rows, log)
    rejected = log.finish()
    require_rows(path, len(rows), rejected, "article")
    docs, passages = [], []
    for row in rows:
        doc_id = nyt_doc_id(row["snippet"])
        words = len(row["snippet"].split())
        docs.append(Document(doc_id, NYT_SOURCE, "", "", "news", row["snippet"],
                             {"label": row["label"], "origin": str(path), "format": fmt, "line": row["line"],
                              "n_words": words, "n_passages": 1}))
        passages.append(Passage(f"{doc_id}#p0", doc_id, row["label"], row["snippet"], "", "",
                                {"prefix": row["prefix"], "completion": row["completion"], "file": str(path),
                                 "line": row["line"], "n_words": words, "extra": row["extra"]}))
    return sorted(docs, key=lambda d: d.doc_id), passages, rejected
