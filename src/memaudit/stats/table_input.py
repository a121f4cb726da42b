"""The per-document table ``memaudit stats`` reads: a UTF-8 CSV file or the first sheet of an .xlsx workbook.

Every record keeps the place a person opens it at: for a CSV file the physical line where the
record starts, as an editor numbers it (blank lines and line breaks inside quoted fields
counted), for a workbook the spreadsheet row.  Fields are kept as the text in the file; nothing
is converted here.  Anything that is not such a table (a missing, empty or binary file, a
directory, another encoding, a truncated quoted field, a record with more or fewer fields than
the header, a spreadsheet named as CSV) is an :class:`~memaudit.errors.InputError` of one line
naming the file and, where there is one, the line.

An .xlsx workbook is read with the standard library (``zipfile`` and ``xml.etree``): the first
sheet's cells as stored (a number's stored digits, a string's text, ``TRUE``/``FALSE``, an
error such as ``#N/A``), the cached value of a formula, empty cells as empty fields.
"""

from __future__ import annotations

import csv
import io
import posixpath
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from memaudit.datasets.rejects import check_local_file, read_text
from memaudit.errors import InputError

_XLSX_SUFFIXES = {".xlsx", ".xlsm"}
_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # legacy .xls (and .doc) files
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# Large enough for any real field; the csv module's default (128 KiB) refuses long texts.
_FIELD_SIZE_LIMIT = 2**31 - 1

_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
_CELL_REF = re.compile(r"([A-Z]{1,3})(\d+)$")


@dataclass(frozen=True)
class Table:
    """A header and its records, each record with its line (CSV) or row (.xlsx) number."""

    path: Path
    unit: str  # "line" or "row"
    header: list[str]
    header_at: int
    records: list[tuple[int, list[str]]]
    n_blank: int  # blank lines or empty rows between records, skipped

    def at(self, number: int) -> str:
        """``'<file>, line 7'``: where a message points."""
        return f"{self.path}, {self.unit} {number}"


def read_table(path: Path) -> Table:
    """The table in ``path``: the first sheet of a .xlsx/.xlsm workbook, else UTF-8 CSV."""
    path = check_local_file(path, "a CSV file")
    if path.suffix.lower() in _XLSX_SUFFIXES:
        return _read_xlsx(path)
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(_OLE_MAGIC))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if magic.startswith(_ZIP_MAGIC):
        raise InputError(f"{path}: is a zip archive (an .xlsx or .ods spreadsheet?), not CSV text; "
                         f"name an .xlsx workbook *.xlsx, or export the sheet as CSV")
    if magic.startswith(_OLE_MAGIC):
        raise InputError(f"{path}: is a legacy Excel (.xls) file, not CSV text; export the sheet as CSV or .xlsx")
    if magic.startswith(_UTF16_BOMS):
        raise InputError(f"{path}: is UTF-16 text; save it as UTF-8")
    path, text = read_text(path, "a CSV file")
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputError(f"{path}, line {line}: a NUL byte; this is a binary file or text in another "
                         f"encoding, not UTF-8 CSV")
    previous_limit = csv.field_size_limit(_FIELD_SIZE_LIMIT)
    try:
        return _parse_csv(path, text)
    finally:
        csv.field_size_limit(previous_limit)


def _parse_csv(path: Path, text: str) -> Table:
    # Not memaudit.datasets.rejects.csv_rows: that reader gives a loader the rows to reject (a wrong
    # field count, a quote left open on the last line); a table of scores is refused whole.
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    header_at = 0
    records: list[tuple[int, list[str]]] = []
    n_blank = 0
    while True:
        # Records end at the end of a line, so the next one starts on the line after.
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            reason = str(exc)
            if "unexpected end of data" in reason:
                reason = "a quoted field is never closed (a truncated file?)"
            raise InputError(f"{path}, line {start}: not valid CSV: {reason}") from None
        if len(fields) <= 1 and not "".join(fields).strip():
            # A blank (or whitespace-only) line; a line of empty fields (",,") is a record.
            n_blank += header is not None
            continue
        if header is None:
            header, header_at = fields, start
            continue
        if len(fields) != len(header):
            raise InputError(f"{path}, line {start}: {len(fields)} field(s) where the header "
                             f"(line {header_at}) has {len(header)}")
        records.append((start, fields))
    if header is None:
        raise InputError(f"{path}: file is empty")
    return Table(path, "line", header, header_at, records, n_blank)


# ---------------------------------------------------------------- .xlsx

def _read_xlsx(path: Path) -> Table:
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected an .xlsx workbook")
    try:
        with zipfile.ZipFile(path) as archive:
            sheet_name = _first_sheet(archive)
            shared = _shared_strings(archive)
            rows = _sheet_rows(archive.read(sheet_name), shared)
    except (zipfile.BadZipFile, zlib.error, KeyError, IndexError, ElementTree.ParseError, ValueError,
            EOFError, OSError) as exc:
        raise InputError(f"{path}: not a readable .xlsx workbook ({type(exc).__name__}: {exc})") from None
    header: list[str] | None = None
    header_at = 0
    records: list[tuple[int, list[str]]] = []
    n_blank = 0
    for number, cells in rows:
        if all(not value.strip() for value in cells.values()):
            n_blank += header is not None
            continue
        if header is None:
            width = max(cells) + 1
            header, header_at = [cells.get(i, "") for i in range(width)], number
            continue
        beyond = [i for i, value in cells.items() if i >= len(header) and value.strip()]
        if beyond:
            raise InputError(f"{path}, row {number}: a value in column {_column_letters(beyond[0])}, "
                             f"beyond the header (row {header_at}) of {len(header)} column(s)")
        records.append((number, [cells.get(i, "") for i in range(len(header))]))
    if header is None:
        raise InputError(f"{path}: the first sheet is empty")
    return Table(path, "row", header, header_at, records, n_blank)


def _first_sheet(archive: zipfile.ZipFile) -> str:
    """The archive member of the workbook's first sheet, found through workbook.xml and its rels."""
    workbook = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    sheet = workbook.find(f"{{{_MAIN_NS}}}sheets/{{{_MAIN_NS}}}sheet")
    if sheet is None:
        raise ValueError("the workbook has no sheet")
    rel_id = sheet.get(f"{{{_REL_NS}}}id")
    rels = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
    for rel in rels.iter(f"{{{_PKG_REL_NS}}}Relationship"):
        if rel.get("Id") == rel_id:
            target = rel.get("Target", "")
            return target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join("xl", target))
    raise ValueError(f"the first sheet's relationship {rel_id!r} is missing")


def _text_of(element: ElementTree.Element) -> str:
    """Text of a string item: its ``<t>`` and its rich-text runs' ``<t>``, not phonetic hints."""
    parts = [t.text or "" for t in element.findall(f"{{{_MAIN_NS}}}t")]
    parts += [t.text or "" for t in element.findall(f"{{{_MAIN_NS}}}r/{{{_MAIN_NS}}}t")]
    return "".join(parts)


def _shared_strings(archive: zipfile.ZipFile) -> list[str]:
    if "xl/sharedStrings.xml" not in archive.namelist():
        return []
    root = ElementTree.fromstring(archive.read("xl/sharedStrings.xml"))
    return [_text_of(item) for item in root.findall(f"{{{_MAIN_NS}}}si")]


def _column_index(letters: str) -> int:
    index = 0
    for letter in letters:
        index = index * 26 + ord(letter) - ord("A") + 1
    return index - 1


def _column_letters(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _cell_value(cell: ElementTree.Element, shared: list[str]) -> str:
    kind = cell.get("t", "n")
    if kind == "inlineStr":
        inline = cell.find(f"{{{_MAIN_NS}}}is")
        return "" if inline is None else _text_of(inline)
    value = cell.findtext(f"{{{_MAIN_NS}}}v")
    if value is None:
        return ""
    if kind == "s":
        return shared[int(value)]
    if kind == "b":
        return "TRUE" if value.strip() == "1" else "FALSE"
    return value


def _sheet_rows(xml: bytes, shared: list[str]) -> list[tuple[int, dict[int, str]]]:
    """(spreadsheet row number, {column index: value}) for every ``<row>`` of a sheet."""
    rows = []
    number = 0
    for row in ElementTree.fromstring(xml).iter(f"{{{_MAIN_NS}}}row"):
        number = int(row.get("r", number + 1))
        cells: dict[int, str] = {}
        column = -1
        for cell in row.findall(f"{{{_MAIN_NS}}}c"):
            match = _CELL_REF.match(cell.get("r", ""))
            column = _column_index(match.group(1)) if match else column + 1
            cells[column] = _cell_value(cell, shared)
        rows.append((number, cells))
    return rows
