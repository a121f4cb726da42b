"""An auditor's own news archive as an NYT-Exhibit-J-shaped set (Section 4.2, for one's own articles).

A folder of articles, ``.txt`` (UTF-8) and ``.pdf`` (the text layer, read with ``pypdf``), read
from its top level only. Each article's publication date decides its label against a
``cutoff`` (the target model's training-data cutoff): published before it = 1 ("possibly
seen", member), on or after it = 0 (non-member).

Dates, one of (both may be used in one folder):

- a sidecar ``dates.csv`` in the folder, with a header and the columns ``file`` (the file
  name, e.g. ``budget-vote.pdf``, matched in Unicode NFC: a Mac's HFS+ disk stores it
  decomposed) and ``date`` (``YYYY-MM-DD``), and optionally ``title``;
- for a ``.txt``, a first line ``Date: YYYY-MM-DD`` (removed from the text).

A ``.txt`` dated both ways must agree. Hidden files (``.DS_Store``) are skipped. The records are those of the NYT loader
(:mod:`memaudit.datasets.nyt`): one document and one passage per article, the passage text the
article's paragraphs joined by a blank line (``"\\n\\n"``, as the demo's Reuters articles have
theirs), the words of each separated by single spaces: a model that read the articles as
published read their paragraph breaks, and the prefix probe shows it a prefix as written. A
``.txt``'s paragraphs are separated by blank lines, the lines of each joined; a ``.txt`` without any
blank line (a news export) has one paragraph per line. A PDF's paragraphs are separated by the
blank lines of its text layer, where pypdf gives any (most PDFs give none); its other line breaks
and its page breaks are the typesetter's, and are joined: a PDF without blank lines is one
paragraph, so a ``.txt`` and a PDF of one article have the same words, not always the same breaks.
Unlike the NYT set's published ``Prefix``, an article carries no prefix of its own: the prefix probe
cuts it at ``probes.prefix.prefix_words`` (50 in the paper's Appendix E, the default) as it cuts any
passage. The title is the ``title`` column of ``dates.csv`` or the file name's stem; no outlet or date
goes into the text or title a probe reads.

Under the published-data policy (:mod:`memaudit.datasets.rejects`), an article that cannot be
used is a rejected row with its reason, never silently dropped: a PDF without a text layer (a
scan: run OCR first), an encrypted or broken PDF, a ``.txt`` that is not UTF-8 or holds a NUL
(the row's line is the NUL's), a file with no text, a file without a date, two dates that
disagree, a file that is neither ``.txt`` nor ``.pdf``, a sub-folder, two files with the
same document id, and a copy of an earlier file's text (whitespace and Unicode form aside) on
the same side of the cutoff, which would count the article twice (across the cutoff both stay,
with a ``kept`` row); so is a ``dates.csv`` row that
names no article in the folder, gives an invalid date, repeats a file, has more fields than
the header (an unquoted title with a comma), or is a last row whose quote is never closed (a
truncated file).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memaudit import MEMBER, NONMEMBER
from memaudit.datasets.labelled import text_key
from memaudit.datasets.readers import first_nul
from memaudit.datasets.rejects import Rejected, RejectLog, RowReject, csv_rows, read_text, require_rows
from memaudit.datasets.text import clean_text, file_slug, join_hyphenated_lines, paragraphs
from memaudit.datasets.types import Document, Passage
from memaudit.errors import ConfigError, InputError

DATES_FILE = "dates.csv"
ARTICLE_SUFFIXES = (".txt", ".pdf")
ARTICLES_SOURCE = "articles"
_DATE_LINE = re.compile(r"^\s*Date\s*:\s*(\S.*?)\s*$", re.IGNORECASE)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_date(value: Any) -> dt.date:
    """A ``YYYY-MM-DD`` string (or a date, as YAML reads an unquoted one) as a date; else ValueError."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    if not _ISO_DATE.match(text):
        raise ValueError(f"{value!r} is not a date YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid date") from None


def label_for(date: dt.date, cutoff: dt.date) -> int:
    """1 (member, possibly seen) for an article published before ``cutoff``, 0 on or after it."""
    return MEMBER if date < cutoff else NONMEMBER


# ---------------------------------------------------------------- dates.csv


@dataclass
class _Dated:
    date: dt.date
    line: int
    title: str


class _BadDateRow(RowReject):
    """A ``dates.csv`` row that names an article and gives no valid date (or names it by a path): the article's
    own rejected row points at it, rather than asking for a row that is there."""

    def __init__(self, name: str, value: Any, reason: str, key: str = "date"):
        super().__init__(key, value, reason)
        self.name = name


def _read_dates(folder: Path, log: RejectLog) -> tuple[dict[str, _Dated], dict[str, int]]:
    """``file name -> (date, line, title)`` from ``dates.csv``, and ``file name -> line`` of the rows that name a
    file with no valid date; bad rows go to ``log``."""
    path = folder / DATES_FILE
    if not path.exists():
        return {}, {}
    path, text = read_text(path, "a dates.csv table")
    dates: dict[str, _Dated] = {}
    bad_dates: dict[str, int] = {}
    # a row's name in NFC -> the file's name on disk, which a Mac's HFS+ disk stores decomposed (NFD)
    on_disk = {unicodedata.normalize("NFC", p.name): p.name for p in folder.iterdir() if p.is_file()}
    header: list[str] | None = None
    for start, row in csv_rows(path, text):
        if isinstance(row, RowReject):  # a truncated file's last row: rejected, or the header: no table
            if header is None:
                raise InputError(f"{path}, line {start}: not valid CSV ({row.reason})")
            log.reject(path, start, row)
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            missing = [c for c in ("file", "date") if c not in header]
            if missing:
                raise InputError(f"{path}, line {start}: missing column(s) {', '.join(missing)} "
                                 f"(expected file,date[,title]; found {','.join(row)})")
            continue
        record = dict(zip(header, (cell.strip() for cell in row)))
        try:
            if any(cell.strip() for cell in row[len(header):]):  # zip would drop them: a title cut at a comma
                raise RowReject("(record)", ",".join(row), f"{len(row)} fields, the header has {len(header)} "
                                "(quote a title that holds a comma)")
            name, dated = _dates_row(folder, record, start, dates, on_disk)
        except RowReject as exc:
            log.reject(path, start, exc)
            if isinstance(exc, _BadDateRow):
                bad_dates.setdefault(exc.name, start)
            continue
        dates[name] = dated
    return dates, bad_dates


def _dates_row(folder: Path, record: dict[str, str], line: int, dates: dict[str, _Dated],
               on_disk: dict[str, str]) -> tuple[str, _Dated]:
    """``(the file's name on disk, its date)`` of one ``dates.csv`` row."""
    given = record.get("file", "")
    if not given:
        raise RowReject("file", given, "empty file name")
    name = on_disk.get(unicodedata.normalize("NFC", given), given)
    if name in dates:
        raise RowReject("file", given, f"listed again (first on line {dates[name].line})")
    if Path(name).name != name:  # "./a.txt", "news/a.txt": file lists are written from find's output
        base = on_disk.get(unicodedata.normalize("NFC", Path(given).name))
        if base is not None and base not in dates:
            raise _BadDateRow(base, given, f"a path: give the file name alone ({base!r}), as it is in {folder}",
                              key="file")
    if Path(name).name != name or not (folder / name).is_file():
        raise RowReject("file", given, f"no such article in {folder}")
    try:
        date = parse_date(record.get("date", ""))
    except ValueError as exc:
        raise _BadDateRow(name, record.get("date", ""), str(exc)) from None
    return name, _Dated(date, line, record.get("title", ""))


# ---------------------------------------------------------------- reading one article


# The Latin ligatures (ff, fi, fl, ffi, ffl, long st, st) a typeset PDF's font draws, which pypdf gives as these
# presentation forms: "ﬁnance" is no "finance" to a tokenizer nor to the near-duplicate test (a .txt of the article)
_LIGATURES = re.compile("[\ufb00-\ufb06]")


def read_pdf_text(path: str | Path) -> str:
    """The text layer of every page, in order, a page break as a line break, ligatures (``ﬁ``) as their letters
    (``fi``) and words hyphenated at a line's end joined (:func:`~memaudit.datasets.text.join_hyphenated_lines`);
    RowReject for a broken, encrypted or text-less PDF."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise RowReject("(file)", Path(path).name, "encrypted PDF (a password is needed to read it)")
        pages = [page.extract_text() or "" for page in reader.pages]
    except RowReject:
        raise
    except Exception as exc:  # pypdf raises many types (PdfReadError, ValueError, KeyError...) on broken files
        raise RowReject("(file)", Path(path).name, f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    # pypdf ends most pages' text with a line break: pages joined by another made a blank line, a paragraph break
    # wherever a page ended mid-sentence. A page break is a line break, as the typesetter's others are.
    text = "\n".join(page for page in (page.strip() for page in pages) if page)
    text = _LIGATURES.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    text = join_hyphenated_lines(text)  # "transfor- mation" was two words to every probe
    if not text.strip():
        raise RowReject("(file)", Path(path).name,
                        f"no text layer in its {len(pages)} page(s) (a scanned PDF? run OCR first)")
    return text


class _RejectAtLine(RowReject):
    """A RowReject of one line of the file (where a NUL is), not of the whole file (line 0)."""

    def __init__(self, line: int, key: str, value: Any, reason: str):
        super().__init__(key, value, reason)
        self.line = line


def _read_txt(path: Path) -> tuple[str, str | None]:
    """``(text, the date of a first 'Date:' line or None)``; RowReject if not UTF-8, or holding a NUL."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1  # the row is the file's (line 0): its line goes in the reason
        raise RowReject("(file)", path.name, f"not valid UTF-8 on line {line}, at byte offset {exc.start} "
                        f"(byte 0x{data[exc.start]:02x}); convert the file to UTF-8") from None
    # clean_text dropped a NUL without a word; the user's own file is not changed unseen (as user_books refuses one)
    nul = first_nul(text.replace("\r\n", "\n").replace("\r", "\n"))
    if nul is not None:
        line, column, count = nul
        raise _RejectAtLine(line, "(file)", path.name, f"a NUL character at column {column} ({count} in the file); "
                            "an article is read as UTF-8 text: is it UTF-16 or a binary file? convert it to UTF-8")
    first, _, rest = text.partition("\n")
    match = _DATE_LINE.match(first)
    if match:
        return rest, match.group(1)
    return text, None


def _first_lines(path: Path) -> str:
    """Where a ``.txt`` article without a date was looked at: a ``Date:`` line further down (only the
    first line is read), else what its first line is."""
    lines = path.read_bytes()[:4000].decode("utf-8-sig", errors="replace").split("\n")
    later = next((n for n, line in enumerate(lines[1:10], 2) if _DATE_LINE.match(line.strip())), None)
    if later is not None:
        return f"; its line {later} is a Date: line, but only the first line is read"
    first = lines[0].strip()
    return "; its first line is blank" if not first else f"; its first line is {first[:40]!r}"


def _article_date(path: Path, header_date: str | None, listed: _Dated | None, bad_row: int | None) -> dt.date:
    """The article's date from dates.csv or its ``Date:`` line, which must agree when both are given
    (``bad_row``: the line of a ``dates.csv`` row that names the file and was rejected for its date)."""
    own = None
    if header_date is not None:
        try:
            own = parse_date(header_date)
        except ValueError as exc:
            raise RowReject("Date", header_date, f"first line: {exc}") from None
    if listed is not None and own is not None and listed.date != own:
        raise RowReject("Date", header_date, f"{DATES_FILE} line {listed.line} says {listed.date}, "
                        f"the file's Date: line says {own}")
    if listed is None and own is None and bad_row is not None:
        raise RowReject("date", "", f"no date: its {DATES_FILE} row, line {bad_row}, was rejected")
    if listed is None and own is None:
        how = (f"or start the file with a line 'Date: YYYY-MM-DD'{_first_lines(path)}"
               if path.suffix.lower() == ".txt" else "")
        raise RowReject("date", "", f"no date: list it in {DATES_FILE} (file,date) {how}".strip())
    return listed.date if listed is not None else own


def _read_article(path: Path, listed: _Dated | None, bad_row: int | None = None) -> tuple[str, dt.date, str]:
    """``(text, date, title)`` of one file, its paragraphs joined by a blank line; RowReject for anything that
    stops it."""
    suffix = path.suffix.lower()
    if path.is_dir():
        raise RowReject("(file)", path.name, "a folder: articles are read from the folder's top level only")
    if suffix not in ARTICLE_SUFFIXES:
        raise RowReject("(file)", path.name, f"not a .txt or .pdf file ({suffix or 'no suffix'})")
    try:
        # a PDF's text layer is its typesetter's, not the user's to edit: clean_text drops a NUL in it
        raw, header_date = (read_pdf_text(path), None) if suffix == ".pdf" else _read_txt(path)
    except OSError as exc:
        raise RowReject("(file)", path.name, f"cannot read ({exc.strerror})") from None
    lines = clean_text(raw).split("\n")
    if suffix == ".txt" and all(line.strip() for line in lines):
        # no blank line at all: one paragraph per line (a news export), as user_books reads such a book
        lines = [x for line in lines for x in (line, "")]
    # the paragraphs as written, which a model read in training (the prefix probe shows a prefix so); a PDF's
    # other line breaks are its typesetter's, joined
    text = "\n\n".join(" ".join(paragraph.split()) for paragraph in paragraphs(lines))
    if not text:
        raise RowReject("(file)", path.name, "no text")
    date = _article_date(path, header_date, listed, bad_row)
    return text, date, (listed.title if listed and listed.title else path.stem)


# ---------------------------------------------------------------- the builder


def article_files(folder: str | Path) -> list[str]:
    """The files :func:`build_articles` reads in ``folder`` (its top-level files but hidden ones,
    ``dates.csv`` included; none for a missing folder), sorted: a dataset job's inputs beside the folder
    itself, so that an article or ``dates.csv`` edited in place reruns it. Snakemake dates a folder
    input by the folder's own time, which changes when a file is added, removed or renamed, not when
    one is rewritten."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [str(p) for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")]


def build_articles(folder: str | Path, cutoff: Any, strict: bool = False,
                   ) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """Documents, passages and rejected rows of an auditor's article folder (Section 4.2's set, built
    from one's own archive); ``cutoff`` is ``YYYY-MM-DD`` or a date.

    Label 1 (member) for an article published before ``cutoff``, 0 on or after it. Rejected
    rows carry line 0 for a whole file (line 1 for a bad ``Date:`` line, the row's line for
    ``dates.csv``). ``strict=True``: the first rejected row is an InputError. A missing folder,
    one without any ``.txt``/``.pdf`` file, or one where no article is usable: InputError.
    """
    try:
        cutoff = parse_date(cutoff)
    except ValueError as exc:
        raise ConfigError(f"cutoff: {exc}") from None
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'} "
                         f"(expected a folder of .txt/.pdf articles)")
    entries = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name != DATES_FILE)
    if not any(p.suffix.lower() in ARTICLE_SUFFIXES and p.is_file() for p in entries):
        raise InputError(f"{folder}: no .txt or .pdf articles")
    log = RejectLog(strict)
    dates, bad_dates = _read_dates(folder, log)
    docs, passages, ids, texts = [], [], {}, {}
    for path in entries:
        try:
            text, date, title = _read_article(path, dates.get(path.name), bad_dates.get(path.name))
            doc_id = f"{ARTICLES_SOURCE}/{file_slug(path.stem, 'article')}"
            if doc_id in ids:
                raise RowReject("(file)", path.name, f"same document id {doc_id!r} as {ids[doc_id]}; rename one")
            label = label_for(date, cutoff)
            # a second copy on the same side would count the article twice; across the cutoff both stay
            # (a reprint: _across_the_cutoff's kept row)
            first = texts.get((text_key(text), label))
            if first is not None:
                raise RowReject("(file)", path.name, f"duplicate text, first in {first} (label {label} too): "
                                                     f"rejected so that the article counts once")
        except RowReject as exc:
            line = (exc.line if isinstance(exc, _RejectAtLine)
                    else 1 if exc.key == "Date" and path.suffix.lower() == ".txt" else 0)
            log.reject(path, line, exc)
            continue
        ids[doc_id] = texts[(text_key(text), label)] = path.name
        meta = {"date": date.isoformat(), "cutoff": cutoff.isoformat(), "file": str(path), "line": 0,
                "n_words": len(text.split())}
        docs.append(Document(doc_id, ARTICLES_SOURCE, title, "", "news", text,
                             dict(meta, label=label, origin=str(folder), n_passages=1)))
        passages.append(Passage(f"{doc_id}#p0", doc_id, label, text, title, "", meta))
    rejected = log.finish()
    require_rows(folder, len(docs), rejected, "article")
    return (sorted(docs, key=lambda d: d.doc_id), sorted(passages, key=lambda p: p.passage_id),
            rejected + _across_the_cutoff(docs))


def _across_the_cutoff(docs: list[Document]) -> list[Rejected]:
    """A ``kept`` row for each non-member that shares a ``DEFAULT_NGRAM``-word run with member(s): a
    reprint or a follow-up quoting an earlier article. Its date gives its label and nothing is moved,
    as with a labels file (:func:`memaudit.datasets.build._given_split`); the row says so."""
    from memaudit.datasets.near_duplicates import DEFAULT_NGRAM, near_duplicate_groups, nonmembers_sharing

    groups = near_duplicate_groups({d.doc_id: [d.text] for d in docs}, DEFAULT_NGRAM)
    by_id = {d.doc_id: d for d in docs}
    rows = []
    for doc_id, shared in nonmembers_sharing(groups, lambda d: by_id[d].meta["label"] == MEMBER):
        path = Path(by_id[doc_id].meta["file"])
        names = ", ".join(Path(by_id[o].meta["file"]).name for o in shared)
        rows.append(Rejected(str(path), 0, "(file)", path.name, f"a non-member that shares a {DEFAULT_NGRAM}-word "
                                                                f"run with member(s) {names}: kept with the label "
                                                                "its date gives", "kept"))
    return rows
