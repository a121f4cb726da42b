"""Published benchmarks: the DE-COP data, BookTection / arXivTection (CSV or Hugging Face) and
BookMIA (JSON lines as the Hub has it, a JSON array or parquet); and the information-guided probes' sets (``nyt``, ``articles``, ``qa``: see
:func:`cloze_published`).

BookTection and arXivTection rows are complete questions: ``Example_A`` ... ``Example_D``
(``Example_A`` the verbatim passage), ``Answer`` (the verbatim's letter, "A"), ``ID``
("Title_-_Author" for books, the paper title for arXiv), ``Label`` (1 = suspect, possibly
seen; 0 = clean, published after the cutoff) and, in BookTection only, ``Length``
(small/medium/large). The published ``data/arXivTection.csv`` of ``avduarte333/DE-COP_Method``
is UTF-8 with a byte-order mark and CRLF line ends, quotes a field only where it needs it, has
1549 rows (50 papers, 25 suspect), one option that is a single space (line 615,
``Example_A``) and one record spanning four lines (630-633). BookMIA rows are single snippets
(``book_id``, ``book``, ``snippet_id``, ``snippet``, ``label``, 1 = member), to be paraphrased;
real snippets contain NUL bytes. The information-guided probes' paper splits BookMIA by row: "a
validation set of 1870 examples from BookMIA ... held out separately from the 8000 examples we
evaluate on" (the authors' ``get_bookmia``: ``bookmia_data[:1870]`` and ``[1870:]``); each
snippet's passage says which side of that split its row is on (``meta.split``, see
:func:`load_bookmia`).

Published-data policy (:mod:`memaudit.datasets.rejects`, as for every published format): a row
the loader cannot use is skipped, never the file, and listed as a rejected row naming the file,
the physical line where the record starts (1-based, as an editor shows it; the header is line 1),
the column (key, in BookMIA), a short repr of the value and the reason. Rejected: a wrong field
count, an empty or whitespace-only option or ID, two options with the same text (up to whitespace;
the later one is named), an ``Answer`` outside A-D, a ``Label`` other than
exactly ``0`` or ``1``, a ``Length`` other than small/medium/large, a question repeated (same ID,
``Example_A`` up to whitespace and length: the later copies), and every row of an ID whose rows
give both labels (the file cannot say which is right). NUL characters are removed from every
field alike, IDs and text, and each row so cleaned is listed with action ``kept``, so one ID
never becomes two documents unseen. ``strict=True`` makes the first rejected row (in line
order) an :class:`~memaudit.errors.InputError` with the count. A file that cannot be read at
all (missing, a directory, empty, a spreadsheet, UTF-16 or other non-UTF-8 bytes, a missing
column, a quote left open before the last line) is a one-line ``InputError`` naming the file. Loading is one pass over the rows plus
dictionary look-ups: linear in the rows (``benchmarks/bench_loaders.py``).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from memaudit.config import DECOP_FORMATS, REJECTS_FORMATS
from memaudit.datasets.labelled import (
    check_label,
    csv_get,
    csv_records,
    is_parquet,
    json_getter,
    json_records,
    parquet_records,
    text_key,
)
from memaudit.datasets.rejects import (
    MISSING,
    ColumnRejected,
    Rejected,
    RejectLog,
    RowReject,
    check_local_file,
    check_text,
    json_type,
    place,
    read_text,
    require_rows,
)
from memaudit.datasets.types import TEST, VALIDATION, Document, Passage
from memaudit.errors import InputError

TECTION_COLUMNS = ("Example_A", "Example_B", "Example_C", "Example_D", "Answer", "ID", "Label")
OPTION_COLUMNS = TECTION_COLUMNS[:4]
LENGTH_TOKENS = {"small": 64, "medium": 128, "large": 256}
TECTION_LABELS = "0 (clean) or 1 (suspect)"
HF_DATASETS = {"booktection": "avduarte333/BookTection", "arxivtection": "avduarte333/arXivTection"}
BOOKMIA_FIELDS = ("book_id", "book", "snippet_id", "snippet", "label")
BOOKMIA_LABELS = "0 (non-member) or 1 (member)"
# A published format's own version, beside the datasets step's (memaudit.versions.STEPS, dataset_code_version):
# bump a format's with a change to its loader's records, and only its benchmarks' datasets rerun.
# bookmia 1: a book's document text is its snippets (it was empty: nothing to fine-tune on or paraphrase).
# bookmia 2: each passage says whether its row is in the paper's validation split or its test split
# (meta.split; published.validation_rows, default 1870).
# nyt 1: a null prefix or completion (parquet, JSON) is kept as empty with a note, as an empty CSV cell was (it was
# rejected: the same set loaded differently as parquet and as CSV).
# copybench 1: a labels title differing from a published (lower-case) title only in case and spacing labels
# its records, with a kept note (they were rejected as unlabelled).
# qa 1: a question's half (contaminated, clean, given) is meta.half; as meta.split the cloze probes read it as a
# fixed validation/test split and reported on no passage.
# bookmia 3, nyt 2, wikimia 1, member_texts 1: a JSON array's rows are its elements (a one-line array put every
# BookMIA row in the test split and kept duplicate snippets); CSV text fields' CRLF line endings become "\n", and
# a truncated last row (an unclosed quote) is rejected (it loaded). booktection 1, arxivtection 1: the CSV
# changes (arXivTection's one multi-line record). qa 2: keys match in any case ("Choices" made a question
# short-answer).
# articles 1: a PDF article's typeset ligatures (U+FB00-FB06) are read as their letters, as its .txt copy.
# articles 2: a PDF's word hyphenated at a line's end is joined ("transfor- mation"), soft hyphens dropped and
# no-break spaces read as spaces.
# copybench 2: a record holding an unpaired surrogate (a lone \ud800 escape) is rejected naming its key (the items
# job failed writing it); a QA answer with nothing left after SQuAD normalisation is rejected (any refusal scored
# EM 1 against it). wikimia 2, member_texts 2, nyt 3, qa 3, booktection 2, arxivtection 2: a text in NFC and in
# NFD is one text (duplicates and label conflicts found, one doc_id), and a non-member sharing a 13-word run with
# a member has a kept row (wikimia, member_texts, nyt). articles 3: a file name stored in NFD (a Mac's disk)
# matches its dates.csv row in NFC and keeps the NFC name's id, and a PDF's compound broken at its own hyphen
# at a line's end keeps the hyphen. qa 3 also: a question or choice repeated in
# another Unicode form is reported as the same question (its id from the NFC text).
# bookmia 4, nyt 4, wikimia 3, member_texts 3, booktection 3, arxivtection 3: a parquet float label exactly 0.0
# or 1.0 is that label (such rows were rejected). qa 4: an answer matches its choice in either Unicode form (NFC).
# articles 4: a NUL in a .txt article rejects it, naming line and column (it was removed unsaid).
# qa 5: a question shorter than the near-duplicate n-gram is grouped with the same words asked again (it had no
# n-gram, so "Who wrote Emma?" and "Who wrote 'Emma'?" could land on both sides). articles 5: an article keeps
# its paragraph breaks (a .txt's blank lines, or one paragraph a line; a PDF's blank lines), and a PDF's page
# break is a line break (it was a blank line); the whole text was one line. copybench 3: a literal snippet (the
# passage, and its book's text) is its input and reference rejoined where they were cut (a space only where the
# reference starts a new word: "comrade? What", not "comrade ? What").
# copybench 5: a record whose id an earlier, rejected record held loads (it was rejected as that one's duplicate).
FORMAT_VERSIONS = {"bookmia": 4, "nyt": 4, "wikimia": 3, "member_texts": 3, "booktection": 3, "arxivtection": 3,
                   "copybench": 5, "qa": 5, "articles": 6}
# The information-guided probes' validation split of BookMIA: its first 1870 rows (§4, App. A); the
# rest is the test split everything is reported on. published.validation_rows: 0 = no fixed split.
BOOKMIA_VALIDATION_ROWS = 1870
# The published formats of the information-guided probes and of the KTD paper's labelled-text sets
# (memaudit.datasets.labelled), read by cloze_published
CLOZE_FORMATS = tuple(f for f in REJECTS_FORMATS if f not in ("copybench", *DECOP_FORMATS))

log = logging.getLogger(__name__)


def _title_author(doc_id: str, kind: str) -> tuple[str, str]:
    if kind == "book" and "_-_" in doc_id:
        title, author = doc_id.split("_-_", 1)
        return title.replace("_", " ").strip(), author.replace("_", " ").strip()
    return doc_id.replace("_", " ").strip() if kind == "book" else doc_id.strip(), ""


# ----------------------------------------------------------------------------- checking one row

Getter = Callable[[str], Any]
Notes = list[tuple[str, Any, str]]  # (column, value, note) of a row kept with a cleaning


def _without_nuls(key: str, value: Any, notes: Notes) -> Any:
    """``value`` with its NUL characters removed (noted); every field is cleaned this same way."""
    if isinstance(value, str) and "\x00" in value:
        notes.append((key, value, f"{value.count(chr(0))} NUL character(s) removed (IDs and text are cleaned alike)"))
        return value.replace("\x00", "")
    return value


def _text(get: Getter, key: str, notes: Notes) -> str:
    """A required text cell, NULs removed, surrounding whitespace stripped; empty or blank: rejected."""
    return check_text(key, _without_nuls(key, get(key), notes)).strip()


def _identifier(get: Getter, key: str, notes: Notes) -> str:
    """An ID given as text or as a whole number (BookMIA's ``book_id``), as text."""
    value = get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is not MISSING and not isinstance(value, str):
        raise RowReject(key, value, f"expected a string or a whole number, got {json_type(value)}")
    return _text(get, key, notes)


def _tection_row(get: Getter, textual: bool, has_length: bool) -> dict[str, Any]:
    """The checked cells of one BookTection/arXivTection row (a :class:`RowReject` names the first bad one)."""
    notes: Notes = []
    options = [_text(get, column, notes) for column in OPTION_COLUMNS]
    seen: dict[str, str] = {}
    for column, option in zip(OPTION_COLUMNS, options):
        # two options alike leave no single verbatim one to find (or three choices where chance is a quarter)
        first = seen.setdefault(text_key(option), column)
        if first != column:
            raise RowReject(column, get(column), f"the same text as {first} (up to whitespace): a question needs "
                                            f"four different options")
    answer = get("Answer")
    if not isinstance(answer, str) or answer.strip().upper() not in ("A", "B", "C", "D"):
        raise RowReject("Answer", answer, f"{answer!r} is not one of A, B, C, D" if isinstance(answer, str)
                        else f"expected a letter A-D, got {json_type(answer)}")
    doc_id = _text(get, "ID", notes)
    label = check_label(get("Label"), textual, TECTION_LABELS, key="Label", parquet=not textual)  # CSV or parquet
    size = "medium"
    if has_length:
        value = _without_nuls("Length", get("Length"), notes)
        size = value.strip().lower() if isinstance(value, str) else ""
        if size not in LENGTH_TOKENS:
            raise RowReject("Length", value, f"{value!r} is not small, medium or large")
    return {"options": options, "answer": "ABCD".index(answer.strip().upper()), "doc_id": doc_id,
            "label": label, "size": size, "question": (text_key(options[0]), size), "notes": notes}


def _consistent(path: str, rows: list[dict], log: RejectLog, *, id_key: str, label_key: str,
                question_key: str, what: str) -> list[dict]:
    """``rows`` (with ``line``, ``doc_id``, ``label``, ``question``, optionally ``element``: a JSON
    array's, which tells apart the rows of a one-line array) less every row of an ID given both
    labels and every later copy of a question; their notes go to ``log`` as ``kept``. Two passes
    over dictionaries: linear in the rows."""
    by_id: dict[str, dict[int, list[dict]]] = {}
    for row in rows:
        by_id.setdefault(row["doc_id"], {}).setdefault(row["label"], []).append(row)
    first_seen: dict[tuple, dict] = {}
    kept = []
    for row in rows:
        element = row.get("element")
        by_label = by_id[row["doc_id"]]
        if len(by_label) > 1:
            counts = " and ".join(f"{label} on {len(rs)} row(s) (first {place(rs[0])})"
                                  for label, rs in sorted(by_label.items()))
            log.add(path, row["line"], label_key, row["label"],
                    f"{id_key} {row['doc_id']!r} has {label_key} {counts}: conflicting labels, every row of it rejected",
                    element=element)
            continue
        first = first_seen.setdefault((row["doc_id"], row["question"]), row)
        if first is not row:
            log.add(path, row["line"], question_key, row["value"],
                    f"duplicate {what}: same {id_key} and {question_key} as {place(first)}", element=element)
            continue
        for key, value, note in row["notes"]:
            log.add(path, row["line"], key, value, note, action="kept", element=element)
        kept.append(row)
    return kept


# ----------------------------------------------------------------------------- BookTection, arXivTection

def tection_items(where: str, records: Iterable[tuple[int, Any]], log: RejectLog, *, kind: str,
                  textual: bool, length: str | None = None) -> list[dict]:
    """Multiple-choice items from the records of a BookTection/arXivTection table, ``(line, record)``
    (a record is a row dict, or a :class:`RowReject` for a row that could not be split).

    ``where`` names the source in the rejects; ``textual``: the cells are CSV text (labels "0"/"1")
    rather than typed values. ``length`` keeps only BookTection rows of that setting; every row is
    checked whatever its length. Items are numbered per ID in file order (``<ID>#p<n>``).
    """
    rows, has_length = [], None
    for line, record in records:
        try:
            if isinstance(record, RowReject):
                raise record
            get = (lambda name, r=record: csv_get(r, name)) if textual else json_getter(record)
            if has_length is None:
                has_length = get("Length") is not MISSING
            row = _tection_row(get, textual, has_length)
        except RowReject as exc:
            log.reject(where, line, exc)
            continue
        rows.append(dict(row, line=line, value=get("Example_A")))
    if length is not None and has_length is False:
        raise InputError(f"{where}: no column Length to select length={length!r} (BookTection has it)")
    rows = _consistent(where, rows, log, id_key="ID", label_key="Label", question_key="Example_A", what="question")
    items, numbers = [], Counter()
    for row in rows:
        if length is not None and row["size"] != length:
            continue
        doc_id = row["doc_id"]
        item_id = f"{doc_id}#p{numbers[doc_id]}"
        numbers[doc_id] += 1
        title, author = _title_author(doc_id, kind)
        items.append({"item_id": item_id, "passage_id": item_id, "doc_id": doc_id, "label": row["label"],
                      "options": row["options"], "answer": row["answer"],
                      "meta": {"title": title, "author": author, "kind": kind, "role": "evaluate",
                               "length_tokens": LENGTH_TOKENS[row["size"]], "source_file": where,
                               "source_line": row["line"]}})
    if rows and not items:
        raise InputError(f"{where}: no usable rows with Length {length!r}")
    return items


def _tection_records(path: str | Path) -> tuple[Path, Iterable, bool]:
    """``(path, records, textual)`` of a BookTection/arXivTection file: parquet (by its magic bytes or
    suffix; typed cells) or CSV (text cells)."""
    path = check_local_file(path, "a BookTection/arXivTection CSV or parquet file")
    with open(path, "rb") as fh:
        if fh.read(4) == b"PAR1" or path.suffix.lower() == ".parquet":
            return path, parquet_records(path), False
    path, text = read_text(path, "a BookTection/arXivTection CSV file")
    return path, csv_records(path, text, TECTION_COLUMNS), True


def load_tection_file(path: str | Path, *, kind: str = "book", length: str | None = None,
                     strict: bool = False) -> tuple[list[dict], list[Rejected]]:
    """``(items, rejected)`` of a local BookTection (``kind="book"``) or arXivTection (``kind="paper"``)
    file under the published-data policy (see the module's docstring): the CSV of DE-COP's
    repository, or a parquet file as the Hub serves the sets (its rows numbered from 1)."""
    log = RejectLog(strict, record=ColumnRejected)
    path, records, textual = _tection_records(path)
    items = tection_items(str(path), records, log, kind=kind, textual=textual, length=length)
    rejected = log.finish()
    require_rows(path, len(items), rejected, "question")
    return items, rejected


def load_tection_hf(name: str, *, length: str | None = None, cache_dir: str | None = None,
                    strict: bool = False) -> tuple[list[dict], list[Rejected]]:
    """``avduarte333/BookTection`` or ``avduarte333/arXivTection`` from the Hugging Face Hub
    (``name`` is the repo id or "booktection"/"arxivtection"); needs network access once. Each data
    file is read as :func:`load_tection_file` reads a CSV (a parquet file's rows numbered from 1)."""
    repo = HF_DATASETS.get(name.lower(), name)
    kind = "paper" if "arxiv" in repo.lower() else "book"
    import huggingface_hub

    from memaudit.models.hub import first_line

    try:
        folder = Path(huggingface_hub.snapshot_download(
            repo, repo_type="dataset", cache_dir=cache_dir,
            allow_patterns=["*.csv", "*.parquet", "**/*.csv", "**/*.parquet"]))
    except OSError as exc:  # every hub error (offline, no such repo, gated, HTTP): one line, as for a hub model
        raise InputError(
            f"hf:{repo}: the dataset could not be downloaded: {first_line(exc)} Remedy: check the network and the "
            f"dataset id (and HF_TOKEN for a gated dataset); offline, download its files where the Hub can be "
            f"reached (huggingface-cli download {repo} --repo-type dataset --local-dir DIR) and give the data file "
            f"as published.path instead of hf") from None
    files = sorted(folder.rglob("*.parquet")) or sorted(folder.rglob("*.csv"))
    if not files:
        raise InputError(f"hf:{repo}: no CSV or parquet data files in the dataset")
    log = RejectLog(strict, record=ColumnRejected)
    items = []
    for f in files:
        _, records, textual = _tection_records(f)
        items += tection_items(f"hf:{repo}/{f.relative_to(folder)}", records, log, kind=kind, textual=textual,
                               length=length)
    rejected = log.finish()
    require_rows(f"hf:{repo}", len(items), rejected, "question")
    return items, rejected


# ----------------------------------------------------------------------------- BookMIA

def _bookmia_records(path: str | Path) -> tuple[Path, list[tuple[int, int | None, Any]]]:
    """``(path, [(line, element, record)])`` of a BookMIA file: the Hub's ``book_data.jsonl`` (JSON lines), a JSON
    array of the same objects (``to_json(orient="records")``, all on line 1: each named by its
    ``element``, 0-based), or parquet (by its magic bytes or suffix, rows numbered from 1: the Hub's
    parquet conversion, ``Dataset.to_parquet``)."""
    path = check_local_file(path, "a BookMIA JSON-lines or parquet file")
    if is_parquet(path):
        return path, [(row, None, record) for row, record in parquet_records(path)]
    path, text = read_text(path, "a BookMIA JSON-lines file")
    return path, list(json_records(path, text))


def load_bookmia(path: str | Path, *, strict: bool = False, validation_rows: int = 0,
                 key: str = "published.validation_rows") -> tuple[list[Document], list[Passage], list[Rejected]]:
    """``(documents, passages, rejected)`` of a BookMIA file (JSON lines as the Hub has it, a JSON array,
    or parquet; :func:`_bookmia_records`): one document per ``book_id``
    (its text: the book's snippets in file order, what DE-COP paraphrases and a model with the benchmark in
    its ``members_of`` is fine-tuned on), one passage per snippet (``<book_id>#<snippet_id>``). ``book_id`` and ``snippet_id`` may be
    whole numbers or text; ``label`` must be the number 0 or 1. Rejected: a line that is not a
    JSON object, a missing or mistyped field, an empty snippet, a repeated ``snippet_id`` of a
    book (the later copies) and every snippet of a book given both labels; NULs are removed from
    every text field alike (noted as ``kept``). A book's title is its first row's.

    ``validation_rows`` > 0: the paper's fixed split by row position. A row is every non-blank
    line (array element, parquet row: an array's rows are its elements even when
    ``to_json(orient="records")`` writes them all on line 1; rejects and ``meta.source_element`` name
    an element by its index, 0-based), rejected ones included (the authors index the dataset's rows, whatever memaudit rejects);
    the passage of one of the first ``validation_rows`` rows gets ``meta.split`` "validation",
    of a later row "test". A book whose rows straddle the boundary keeps each snippet on its
    row's side, as the paper's split does: the split is of passages, not of documents, and a
    document carries no split. A file of at most ``validation_rows`` rows (no test split) is an
    :class:`InputError` naming the file and ``key``, never a split with nothing to report on.
    ``validation_rows`` 0: no split, no ``meta.split``."""
    if validation_rows < 0:
        raise InputError(f"{key}: {validation_rows} is negative (0: no fixed split)")
    log = RejectLog(strict)
    path, records = _bookmia_records(path)
    parquet = is_parquet(path)
    if validation_rows and len(records) <= validation_rows:
        raise InputError(f"{path}: {len(records)} rows, but {key} is {validation_rows}: the first "
                         f"{validation_rows} rows are the validation split and the test split is the rest, so "
                         f"the file needs more than {validation_rows} rows (set {key} to 0 for no fixed split)")
    rows = []
    # position: the record's index among the non-blank lines (array elements, parquet rows), 0-based:
    # the paper's split is by position (a one-line array's elements all share line 1)
    for position, (line, element, record) in enumerate(records):
        notes: Notes = []
        try:
            if isinstance(record, RowReject):
                raise record
            get = json_getter(record)
            row = {"doc_id": _identifier(get, "book_id", notes), "book": _text(get, "book", notes),
                   "snippet_id": _identifier(get, "snippet_id", notes), "snippet": _text(get, "snippet", notes),
                   "label": check_label(get("label"), False, BOOKMIA_LABELS, parquet=parquet)}
        except RowReject as exc:
            log.reject(path, line, exc, element)
            continue
        rows.append(dict(row, line=line, element=element, position=position, question=row["snippet_id"],
                         value=get("snippet_id"), notes=notes))
    rows = _consistent(str(path), rows, log, id_key="book_id", label_key="label", question_key="snippet_id",
                       what="snippet")
    rejected = log.finish()
    require_rows(path, len(rows), rejected, "snippet")
    docs: dict[str, Document] = {}
    passages = []
    for row in rows:
        doc = docs.setdefault(row["doc_id"], Document(row["doc_id"], "bookmia", row["book"], "", "book", "",
                                                      {"label": row["label"]}))
        doc.text = f"{doc.text}\n{row['snippet']}" if doc.text else row["snippet"]
        meta = {"source_file": str(path), "source_line": row["line"]}
        if row["element"] is not None:
            meta["source_element"] = row["element"]
        if validation_rows:
            meta["split"] = VALIDATION if row["position"] < validation_rows else TEST
        passages.append(Passage(f"{row['doc_id']}#{row['snippet_id']}", row["doc_id"], row["label"], row["snippet"],
                                doc.title, "", meta))
    return sorted(docs.values(), key=lambda d: d.doc_id), passages, rejected


def split_summary(passages: Sequence[Passage]) -> str:
    """The fixed split of a benchmark's passages in words, for the dataset job's log ("" without one;
    :func:`published_benchmark` logs it):
    passages and members per side, and the documents with passages on both sides (BookMIA's books
    whose rows straddle ``validation_rows``)."""
    sides: dict[str, list[Passage]] = {}
    for p in passages:
        if p.meta.get("split"):
            sides.setdefault(p.meta["split"], []).append(p)
    if not sides:
        return ""
    docs = {side: {p.doc_id for p in ps} for side, ps in sides.items()}
    both = set.intersection(*docs.values()) if len(docs) > 1 else set()
    counts = ", ".join(f"{len(sides.get(side, []))} {side} ({sum(p.label == 1 for p in sides.get(side, []))} "
                       f"members)" for side in (VALIDATION, TEST))
    return (f"fixed split (meta.split): {counts} passages; {len(both)} document(s) with passages on both "
            f"sides (each passage keeps its row's side)")


# ----------------------------------------------------------------------------- benchmarks

def published_items(published: dict) -> tuple[list[dict], list[Rejected]]:
    """``(items, rejected)``: the multiple-choice items of a BookTection/arXivTection ``published``
    block, from a local ``path`` or a hub ``hf`` id (``strict`` as in the block)."""
    fmt, strict = published["format"], bool(published.get("strict", False))
    kind = "paper" if fmt == "arxivtection" else "book"
    length = published.get("length")
    if published.get("path"):
        return load_tection_file(published["path"], kind=kind, length=length, strict=strict)
    return load_tection_hf(published.get("hf") or fmt, length=length, cache_dir=published.get("cache_dir"),
                           strict=strict)


def _tection_benchmark(name: str, published: dict) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """One document per ``ID`` (its text: the verbatim passages), one passage per question."""
    items, rejected = published_items(published)
    origin = published.get("path") or published.get("hf") or published["format"]
    docs: dict[str, Document] = {}
    passages = []
    for it in items:
        m = it["meta"]
        verbatim = it["options"][it["answer"]]
        doc = docs.setdefault(it["doc_id"], Document(
            it["doc_id"], published["format"], m["title"], m["author"], m["kind"], "",
            {"label": it["label"], "benchmark": name, "origin": origin}))
        doc.text = f"{doc.text}\n{verbatim}" if doc.text else verbatim
        passages.append(Passage(it["item_id"], it["doc_id"], it["label"], verbatim, m["title"], m["author"],
                                {"length_tokens": m["length_tokens"], "source_file": m["source_file"],
                                 "source_line": m["source_line"]}))
    return list(docs.values()), passages, rejected


def published_benchmark(name: str, published: dict, *, seed: int = 13,
                        rejects: list | None = None) -> tuple[list[Document], list[Passage]]:
    """Documents and passages of a benchmark built from published data.

    BookTection/arXivTection: one document per ``ID`` (its text: the verbatim passages), one passage
    per question (the verbatim option), so the token-probability probes score the same passages
    DE-COP asks about. BookMIA: one document per book, one passage per snippet, marked as in the
    validation or the test split by its row (``validation_rows``, default
    :data:`BOOKMIA_VALIDATION_ROWS`, the paper's 1870; 0: unmarked). ``Label``/``label``
    1 (suspect) becomes member, 0 (clean) non-member. ``nyt``, ``articles``, ``qa``: see
    :func:`cloze_published`; ``copybench``: :func:`copybench_published_benchmark`. Every format's
    rejected rows are appended to ``rejects`` (write them with
    :func:`memaudit.datasets.rejects.write_benchmark_rejects`), or logged as a warning when the
    caller passes no list; ``strict: true`` in the block makes the first one an InputError.
    """
    fmt = published["format"]
    if fmt == "copybench":
        docs, passages, rejected = copybench_published_benchmark(name, published)
    elif fmt in CLOZE_FORMATS:
        docs, passages, rejected = cloze_published(name, published, seed=seed)
    elif fmt == "bookmia":
        if not published.get("path"):
            raise InputError(f"benchmarks.{name}.published.path: BookMIA is read from a local JSONL file")
        docs, passages, rejected = load_bookmia(
            published["path"], strict=bool(published.get("strict", False)),
            validation_rows=int(published.get("validation_rows", BOOKMIA_VALIDATION_ROWS)),
            key=f"benchmarks.{name}.published.validation_rows")
        if split := split_summary(passages):
            log.info(f"benchmark {name}: {split}")  # the dataset job's log
    else:
        docs, passages, rejected = _tection_benchmark(name, published)
    if fmt in DECOP_FORMATS or (fmt == "copybench" and published.get("labels")):
        # as cloze_published's formats: one label only ran every job to an AUC of NaN
        _require_both_labels(published.get("labels") or published.get("path") or published.get("hf") or fmt,
                             [d.meta["label"] for d in docs], "books" if fmt == "copybench" else "documents")
    if fmt in DECOP_FORMATS:
        n_passages = Counter(p.doc_id for p in passages)
        for d in docs:
            d.meta.update(benchmark=name, n_passages=n_passages[d.doc_id])
        docs = sorted(docs, key=lambda d: d.doc_id)
    if rejects is not None:
        rejects.extend(rejected)
    elif rejected:
        source = published.get("path") or published.get("hf") or fmt
        log.warning(f"benchmark {name}: {len(rejected)} row(s) of {source} rejected or kept with a "
                    f"note; first: {rejected[0].message()}")
    return docs, passages


def cloze_published(name: str, published: dict, *, seed: int = 13) -> tuple[list[Document], list[Passage], list]:
    """``(documents, passages, rejected)`` of an information-guided-probes benchmark (Sections 4.2, 4.3).

    - ``{format: nyt, path: <file>}``: the NYT Exhibit J set (:func:`memaudit.datasets.nyt.load_nyt`);
    - ``{format: articles, path: <folder>, cutoff: YYYY-MM-DD}``: an auditor's own articles, labelled
      by date (:func:`memaudit.datasets.articles.build_articles`);
    - ``{format: qa, path: <file>, member_fraction: 0.5}``: a QA set in JSON lines split (seeded by
      ``seed``) into a contaminated and a clean half (:func:`memaudit.datasets.qa.load_qa_jsonl`), or
      labelled by the file itself (``label_key``: each question's field holding 0 or 1), its questions
      grouped by source (``group_key``);
    - ``{format: wikimia, path: <file>}``: WikiMIA (``input``, ``label``) and ``{format: member_texts,
      path: <file>, text_key: text}``: an XSum/BBC-style member/non-member set (the KTD paper's
      Section 5), both by :func:`memaudit.datasets.labelled.load_labelled`.

    ``strict: true`` in the block makes the first rejected row an InputError. The benchmark needs
    both labels: a set whose rows are all members (or all non-members) is an InputError.
    """
    fmt, path, strict = published["format"], published.get("path"), bool(published.get("strict", False))
    where = f"benchmarks.{name}.published"
    if not path:
        raise InputError(f"{where}.path: the {fmt} set is read from a local "
                         f"{'folder' if fmt == 'articles' else 'file'} (there is no download)")
    if fmt == "nyt":
        from memaudit.datasets.nyt import load_nyt

        docs, passages, rejected = load_nyt(path, strict)
    elif fmt == "articles":
        from memaudit.datasets.articles import build_articles

        if published.get("cutoff") is None:
            raise InputError(f"{where}.cutoff: required with format articles (YYYY-MM-DD; earlier articles are "
                             f"members)")
        docs, passages, rejected = build_articles(path, published["cutoff"], strict)
    elif fmt == "qa":
        from memaudit.datasets.near_duplicates import DEFAULT_NGRAM
        from memaudit.datasets.qa import load_qa_jsonl

        docs, passages, rejected = load_qa_jsonl(path, strict, member_fraction=float(
            published.get("member_fraction", 0.5)), seed=seed,
            near_duplicate_ngram=published.get("near_duplicate_ngram", DEFAULT_NGRAM),
            label_key=published.get("label_key"), group_key=published.get("group_key"))
    elif fmt in ("wikimia", "member_texts"):
        from memaudit.datasets.labelled import WIKIMIA, load_labelled, member_texts_set

        spec = WIKIMIA if fmt == "wikimia" else member_texts_set(published.get("text_key", "text"))
        docs, passages, rejected = load_labelled(path, spec, source=fmt, strict=strict)
    else:
        raise InputError(f"{where}.format: {fmt!r} is not one of {', '.join(CLOZE_FORMATS)}")
    _require_both_labels(path, [p.label for p in passages], "rows", " (check cutoff)" if fmt == "articles" else "")
    for d in docs:
        d.meta["benchmark"] = name
    return docs, passages, rejected


def _require_both_labels(source, labels: list[int], unit: str, hint: str = "") -> None:
    """An InputError naming ``source`` unless ``labels`` hold members (1) and non-members (0) both."""
    if set(labels) != {0, 1}:
        only = "members (label 1)" if set(labels) == {1} else "non-members (label 0)"
        raise InputError(f"{source}: all {len(labels)} usable {unit} are {only}; a benchmark needs both{hint}")


def copybench_published_benchmark(name: str, published: dict) -> tuple[list[Document], list[Passage], list]:
    """CopyBench's published files as a benchmark: one document per book (what the files say of it,
    :func:`~memaudit.datasets.copybench_published.book_texts`), one passage per literal snippet (the
    BookMIA prefix and its reference, rejoined where they were cut: ``continuation``). Labels from
    ``published.labels``, else every book is unlabelled (-1). The items themselves are built by rule copybench_items from the same files."""
    from memaudit.datasets.copybench_published import book_texts, continuation, copybench_sets

    sets = copybench_sets(published)
    texts = book_texts(sets)
    labels = {it["book"]: it["label"] for items in (sets.literal, sets.nonliteral, sets.qa) for it in items}
    titles = {it["book"]: it["title"] for items in (sets.literal, sets.nonliteral, sets.qa) for it in items}
    passages = [Passage(it["item_id"], it["book"], it["label"], continuation(it["prefix"], it["reference"]).strip(),
                        it["title"], "", {"source_line": it["meta"]["line"], "source_file": sets.files["literal"]})
                for it in sets.literal]
    docs = [Document(book, "copybench", titles[book], "", "book", texts[book],
                     {"label": labels[book], "benchmark": name, "book": titles[book], "origin": published["path"],
                      "labelled": sets.labelled, "n_passages": sum(1 for p in passages if p.doc_id == book)})
            for book in sets.books()]
    if not docs:
        first = next((r for r in sets.rejected if r.action == "rejected"), None)
        raise InputError(f"{published['path']}: no usable CopyBench record"
                         + (f"; first rejected: {first.message()}" if first else ""))
    for title in sets.unused_labels:
        log.warning(f"benchmark {name}: {published['labels']} labels {title!r}, which no record of "
                    f"{published['path']} has")
    return docs, passages, sets.rejected
