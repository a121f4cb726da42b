"""Document sources: the corpora a benchmark or the pre-training pool draws from.

Each source turns raw material into :class:`~memaudit.datasets.types.Document`
records (one per book chapter or news article). The built-in demo sources read
the unpacked Debian R data packages under ``assets_dir`` (see
:func:`memaudit.assets.fetch_demo_assets`); ``user_books`` reads the user's own
``.txt``/``.epub`` files.

Every text passes through :func:`~memaudit.datasets.text.clean_text`; the
documents of a source come back sorted by ``doc_id`` and are identical from run
to run. Adding a source is one loader function and one :data:`SOURCES` entry.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from xml.etree import ElementTree

from memaudit.assets import package_dir, read_lazyload, read_rda
from memaudit.datasets.readers import epub_metadata, pdf_metadata, read_epub, read_pdf, read_text_file
from memaudit.datasets.text import (
    clean_text,
    file_slug,
    gutenberg_metadata,
    heading_lines,
    paragraphs,
    split_chapters,
    strip_gutenberg,
    word_count,
)
from memaudit.datasets.types import Document
from memaudit.errors import AssetError, ConfigError, InputError

__all__ = ["SOURCES", "Source", "load_source"]


@dataclass(frozen=True)
class Source:
    """A named corpus: its loader, the demo packages it needs and the options it takes."""

    name: str
    description: str
    loader: Callable[..., list[Document]]
    packages: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


# --------------------------------------------------------------------------- helpers

def _as_lines(obj: Any, what: str) -> list[str]:
    """An R character vector (numpy array or list; NA -> "") as a list of lines."""
    try:
        items = list(obj)
    except TypeError:
        raise AssetError(f"{what}: expected a character vector, got {type(obj).__name__}") from None
    lines: list[str] = []
    for item in items:
        if item is None or (isinstance(item, float) and item != item):
            lines.append("")
        else:
            lines.extend(str(item).replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return lines


def _stamp(path: Path) -> tuple[int, int]:
    """(mtime_ns, size) of a file: part of the cache keys below, so a re-fetch invalidates them."""
    st = path.stat()
    return st.st_mtime_ns, st.st_size


# Parsing R data is slow (tidytext's books.rda takes seconds) and a workflow step
# may load the same source more than once; the caches hold immutable tuples only.
@functools.lru_cache(maxsize=16)
def _lazyload_lines(pkg_root: str, name: str, stamp: tuple[int, int]) -> tuple[str, ...]:
    return tuple(_as_lines(read_lazyload(Path(pkg_root), name), f"{Path(pkg_root).name}::{name}"))


def _lines_of(pkg_root: Path, name: str) -> list[str]:
    rdb = next(pkg_root.glob("usr/lib/R/site-library/*/data/Rdata.rdb"), None)
    stamp = _stamp(rdb) if rdb is not None else (0, 0)
    return list(_lazyload_lines(str(pkg_root), name, stamp))


@functools.lru_cache(maxsize=4)
def _tidytext_books(rda: str, stamp: tuple[int, int]) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(gutenberg_id, title, lines) per book of tidytext's books.rda, by id."""
    books = read_rda(rda).get("books")
    if books is None or not {"gutenberg_id", "text", "title"} <= set(getattr(books, "columns", [])):
        raise AssetError(f"{rda}: expected a 'books' table with gutenberg_id, text and title columns")
    return tuple(
        (int(gid), str(rows["title"].iloc[0]), tuple(_as_lines(rows["text"].fillna("").tolist(), f"{rda}[{gid}]")))
        for gid, rows in books.groupby("gutenberg_id", sort=True)
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _chapter_documents(
    *, source: str, prefix: str, book: str, title: str, author: str,
    lines: list[str], origin: str, min_words: int = 200, short: list[tuple[str, int]] | None = None,
) -> list[Document]:
    """One ``book``-kind Document per chapter, numbered ``<prefix>/ch001`` onwards.

    Numbering is continuous through volumes and parts (Emma's "VOLUME II,
    CHAPTER I" is ``ch019``); the original heading is kept in ``meta``. Chapters of fewer than
    ``min_words`` words are left out (:func:`~memaudit.datasets.text.split_chapters`; ``short``
    receives their headings and word counts).
    """
    docs = []
    for n, (heading, text) in enumerate(split_chapters(lines, min_words=min_words, short=short), 1):
        text = clean_text(text)
        docs.append(Document(
            doc_id=f"{prefix}/ch{n:03d}", source=source, title=clean_text(title),
            author=clean_text(author), kind="book", text=text,
            meta={"book": book, "chapter": n, "heading": clean_text(heading),
                  "n_words": word_count(text), "origin": origin},
        ))
    return docs


# --------------------------------------------------------------------------- austen

AUSTEN_NOVELS = {
    "emma": "Emma",
    "mansfieldpark": "Mansfield Park",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
    "prideprejudice": "Pride and Prejudice",
    "sensesensibility": "Sense and Sensibility",
}


def _load_austen(assets_dir: Path) -> list[Document]:
    """Jane Austen's six novels (janeaustenr), one document per chapter."""
    pkg = "r-cran-janeaustenr"
    root = package_dir(assets_dir, pkg)
    docs = []
    for obj, title in AUSTEN_NOVELS.items():
        lines = _lines_of(root, obj)
        docs += _chapter_documents(source="austen", prefix=f"austen/{obj}", book=obj, title=title,
                                   author="Jane Austen", lines=lines, origin=f"{pkg}::{obj}")
    return docs


# --------------------------------------------------------------------------- mobydick

def _load_mobydick(assets_dir: Path) -> list[Document]:
    """Moby Dick (tokenizers' ``mobydick``: the Gutenberg eBook #2701), one document per chapter.

    The Gutenberg header and licence are stripped; the Etymology and Extracts
    come before Chapter 1 and are dropped with the rest of the front matter.
    """
    pkg = "r-cran-tokenizers"
    lines = [line.lstrip("\ufeff") for line in _lines_of(package_dir(assets_dir, pkg), "mobydick")]
    header = gutenberg_metadata(lines)
    return _chapter_documents(
        source="mobydick", prefix="mobydick", book="mobydick",
        title=header.get("title", "Moby Dick; or The Whale"),
        author=header.get("author", "Herman Melville"),
        lines=strip_gutenberg(lines), origin=f"{pkg}::mobydick",
    )


# --------------------------------------------------------------------------- tidytext

# Gutenberg ids in tidytext's extdata/books.rda (its "title" column has the titles).
TIDYTEXT_BOOKS = {
    36: ("warofworlds", "H. G. Wells"),
    164: ("twentythousandleagues", "Jules Verne"),
    1342: ("prideprejudice", "Jane Austen"),
    1400: ("greatexpectations", "Charles Dickens"),
}


def _load_tidytext(assets_dir: Path, exclude_titles: list[str] | tuple[str, ...] = ()) -> list[Document]:
    """The four Gutenberg books of tidytext's ``extdata/books.rda``, one document per chapter.

    ``exclude_titles`` drops books by title (case-insensitive); an unknown title
    is a :class:`ConfigError` so that a typo cannot silently keep a book.
    """
    pkg = "r-cran-tidytext"
    rda = package_dir(assets_dir, pkg) / "usr/lib/R/site-library/tidytext/extdata/books.rda"
    if not rda.is_file():
        raise AssetError(f"{rda}: R data file missing")
    books = _tidytext_books(str(rda), _stamp(rda))
    if isinstance(exclude_titles, str):
        exclude_titles = [exclude_titles]
    titles = sorted({title for _, title, _ in books})
    by_lower = {t.lower(): t for t in titles}
    unknown = [t for t in exclude_titles if str(t).lower() not in by_lower]
    if unknown:
        raise ConfigError(f"tidytext.exclude_titles: unknown title(s) {unknown} "
                          f"(known: {', '.join(titles)})")
    excluded = {by_lower[str(t).lower()] for t in exclude_titles}
    docs = []
    for gid, title, lines in books:
        if title in excluded:
            continue
        slug, author = TIDYTEXT_BOOKS.get(gid, (_slug(title), ""))
        docs += _chapter_documents(
            source="tidytext", prefix=f"tidytext/{slug}", book=slug, title=title, author=author,
            lines=list(lines), origin=f"{pkg}::books.rda#gutenberg_id={gid}",
        )
    return docs


# --------------------------------------------------------------------------- reuters

REUTERS_CATEGORIES = ("acq", "crude")
_SIGN_OFF_RE = re.compile(r"^(?:Reuter|REUTER)\W*$")


def _reuters_body(raw: str) -> str:
    """BODY text: an indented line starts a paragraph; the "Reuter" sign-off is dropped."""
    lines = raw.replace("\x03", "").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and _SIGN_OFF_RE.match(lines[-1].strip()):
        lines.pop()
    paras: list[list[str]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == 0 or not paras or line[:1].isspace():
            paras.append([])
        paras[-1].append(line.strip())
    return "\n\n".join(" ".join(p) for p in paras)


def _load_reuters(assets_dir: Path) -> list[Document]:
    """tm's Reuters-21578 sample (``texts/crude``, ``texts/acq``), one document per article."""
    pkg = "r-cran-tm"
    texts = package_dir(assets_dir, pkg) / "usr/lib/R/site-library/tm/texts"
    docs = []
    for category in REUTERS_CATEGORIES:
        folder = texts / category
        files = sorted(folder.glob("*.xml"))
        if not files:
            raise AssetError(f"{folder}: no Reuters XML files")
        for path in files:
            try:
                root = ElementTree.parse(path).getroot()  # also unescapes &lt; &apos; ...
            except ElementTree.ParseError as exc:
                raise AssetError(f"{path}: malformed XML ({exc})") from None
            newid = root.get("NEWID")
            if not newid:
                raise AssetError(f"{path}: REUTERS element has no NEWID")
            text = clean_text(_reuters_body(root.findtext("TEXT/BODY") or ""))
            if not text:
                continue  # a few Reuters items are headlines only
            docs.append(Document(
                doc_id=f"reuters/{category}/{newid}", source="reuters",
                title=clean_text(root.findtext("TEXT/TITLE") or ""), author="Reuters", kind="news",
                text=text,
                meta={"category": category, "newid": int(newid), "oldid": root.get("OLDID"),
                      "date": (root.findtext("DATE") or "").strip(),
                      "dateline": clean_text(root.findtext("TEXT/DATELINE") or "").rstrip(" -"),
                      "topics": [d.text for d in root.findall("TOPICS/D") if d.text],
                      "places": [d.text for d in root.findall("PLACES/D") if d.text],
                      "n_words": word_count(text), "origin": f"{pkg}::texts/{category}/{path.name}"},
            ))
    return docs


# --------------------------------------------------------------------------- user_books

USER_BOOKS_DIRECTORY = "resources/books"
USER_BOOK_SUFFIXES = (".txt", ".epub", ".pdf")


def user_book_files(directory: str | Path = USER_BOOKS_DIRECTORY) -> list[Path]:
    """The files the ``user_books`` source reads, sorted (none for a missing directory): what a
    dataset job depends on, so that adding, changing or removing a book reruns it."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in USER_BOOK_SUFFIXES)


def user_books_inputs(sources_config: dict) -> list[str]:
    """:func:`user_book_files` of a benchmark's or the pretraining pool's config (``sources`` and
    ``source_options``), as paths for a rule's input; none unless it uses ``user_books``. A folder
    that is not there (a typo) is itself the input, so that Snakemake names it before any job runs."""
    if "user_books" not in (sources_config.get("sources") or []):
        return []
    options = (sources_config.get("source_options") or {}).get("user_books") or {}
    directory = options.get("directory", USER_BOOKS_DIRECTORY)
    if not Path(directory).exists():
        return [str(directory)]
    return [str(p) for p in user_book_files(directory)]


def _load_user_books(
    assets_dir: Path, directory: str | Path = USER_BOOKS_DIRECTORY, min_chapter_words: int = 200,
) -> list[Document]:
    """Every ``.txt``/``.epub``/``.pdf`` file directly in ``directory``.

    Gutenberg header/licence are stripped; the book is split into chapters
    when it has chapter headings, else it is one document. A PDF (a paper, for
    an arXivTection-like benchmark) is one document of kind ``paper``, its text
    layer read by pypdf (:func:`~memaudit.datasets.readers.read_pdf`). Title and
    author come from the Gutenberg ``Title:``/``Author:`` lines, the epub or PDF
    metadata, or the file stem. A missing directory gives no documents; an
    unreadable file is an :class:`InputError` naming it. A book with no text left
    after cleaning (an empty file) gives no document, and a book whose chapter
    headings all head fewer than ``min_chapter_words`` words is one document with
    ``meta.chapter_headings`` (how many it has); in a book read by chapter, a chapter of fewer
    than ``min_chapter_words`` words is left out and named in its first document's
    ``meta.short_chapters`` (``[heading, words]`` each): :func:`user_books_rejects` lists all three.
    """
    directory = Path(directory)
    if not directory.exists():
        return []
    if not directory.is_dir():
        raise InputError(f"{directory}: user_books directory is not a directory")
    # a link to nothing (a moved or unmounted book) is no input Snakemake can date: named here, not passed over
    broken = next((p for p in sorted(directory.iterdir()) if p.is_symlink() and not p.exists()
                   and p.suffix.lower() in USER_BOOK_SUFFIXES), None)
    if broken is not None:
        raise InputError(f"{broken}: cannot read (a link to {os.readlink(broken)}, which is not there)")
    files = user_book_files(directory)
    docs: list[Document] = []
    seen: dict[str, Path] = {}
    for path in files:
        slug = file_slug(path.stem, "book")
        if slug in seen:
            raise InputError(f"{path}: same document id 'user/{slug}' as {seen[slug]}; rename one")
        seen[slug] = path
        if path.suffix.lower() == ".pdf":
            body, meta = read_pdf(path), pdf_metadata(path)
            docs.append(Document(
                doc_id=f"user/{slug}", source="user_books", title=meta.get("title") or path.stem,
                author=meta.get("author") or "unknown", kind="paper", text=body,
                meta={"book": slug, "heading": "", "n_words": word_count(body), "origin": f"user_books::{path.name}"}))
            continue
        if path.suffix.lower() == ".epub":
            text, meta = read_epub(path), epub_metadata(path)
        else:
            text = read_text_file(path, allow_empty=True)  # an empty book: a rejects row (user_books_rejects)
            meta = gutenberg_metadata(text.split("\n"))
        lines = strip_gutenberg(text.split("\n"))
        if not any(not line.strip() for line in "\n".join(lines).strip().split("\n")):
            # One paragraph per line (no blank lines at all): keep the breaks.
            lines = [x for line in lines for x in (line, "")]
        title = meta.get("title") or path.stem
        author = meta.get("author") or "unknown"
        origin = f"user_books::{path.name}"
        short: list[tuple[str, int]] = []
        book_docs = _chapter_documents(source="user_books", prefix=f"user/{slug}", book=slug,
                                       title=title, author=author, lines=lines, origin=origin,
                                       min_words=min_chapter_words, short=short)
        if book_docs and short:  # chapters left out of a book read by chapter: user_books_rejects lists them
            book_docs[0].meta["short_chapters"] = [[clean_text(heading), words] for heading, words in short]
        if not book_docs:
            body = clean_text("\n\n".join(paragraphs(lines)))
            if not body:
                continue  # user_books_rejects lists it
            headings = heading_lines(lines)
            book_docs = [Document(
                doc_id=f"user/{slug}/ch001", source="user_books", title=clean_text(title),
                author=clean_text(author), kind="book", text=body,
                meta={"book": slug, "chapter": 1, "heading": "", "n_words": word_count(body),
                      "origin": origin, **({"chapter_headings": headings} if headings else {})},
            )]
        docs += book_docs
    return docs


def user_books_rejects(directory: str | Path, docs: list[Document], min_chapter_words: int = 200,
                       labels: str | Path | None = None) -> list:
    """Rows of a benchmark's rejects table for what a ``user_books`` folder holds but the source did
    not read as given: a folder inside it (books are read from its top level only), a file of
    another kind, a book with no text left after cleaning and a chapter of fewer than
    ``min_chapter_words`` words in a book read by chapter (rejected), and a book whose chapter
    headings each head fewer than ``min_chapter_words`` words, read as one document (kept).
    Hidden files (a leading dot) are passed over, as the articles loader does; so is the
    repository's own ``resources/books/README.md``, and the benchmark's ``labels`` file where it
    is kept beside the books (as docs/models.md's example keeps it): it is no book."""
    from memaudit.datasets.rejects import Rejected

    directory = Path(directory)
    if not directory.is_dir():
        return []
    read = {d.meta["origin"].split("::", 1)[1] for d in docs if d.source == "user_books"}
    labels_file = Path(labels).resolve() if labels else None
    rows = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or (directory == Path(USER_BOOKS_DIRECTORY) and path.name == "README.md"):
            continue
        if labels_file is not None and path.resolve() == labels_file:
            continue
        if path.is_dir():
            why = "a folder: books are read from the folder's top level only"
        elif path.suffix.lower() not in USER_BOOK_SUFFIXES:
            why = f"not a .txt, .epub or .pdf file ({path.suffix.lower() or 'no suffix'})"
        elif path.name not in read:
            why = "no text left after removing the Gutenberg header and licence (an empty file?)"
        else:
            continue
        rows.append(Rejected(str(directory), 0, "(file)", path.name, why))
    for d in docs:
        if d.source != "user_books":
            continue
        for heading, words in d.meta.get("short_chapters", ()):
            rows.append(Rejected(str(directory), 0, "(chapter)",
                                 f"{d.meta['origin'].split('::', 1)[1]}: {heading}",
                                 f"{words} words, fewer than min_chapter_words ({min_chapter_words}): the chapter "
                                 "is left out (lower source_options.user_books.min_chapter_words to keep it)"))
        if d.meta.get("chapter_headings"):
            rows.append(Rejected(str(directory), 0, "(file)", d.meta["origin"].split("::", 1)[1],
                                 f"{d.meta['chapter_headings']} chapter heading(s), each over fewer than "
                                 f"min_chapter_words ({min_chapter_words}) words: read as one document "
                                 "(lower source_options.user_books.min_chapter_words to split it)", action="kept"))
    return rows


# --------------------------------------------------------------------------- pydoc_topics

_RST_MARKUP_RE = re.compile(r"\*{1,2}([^*\n]+)\*{1,2}")


def _load_pydoc_topics(assets_dir: Path) -> list[Document]:
    """Technical prose (an arXivTection stand-in): the Python reference documentation that ships
    with CPython in ``pydoc_data.topics``, one document per topic, prose paragraphs only
    (indented grammar and code blocks, bullets and headings dropped, *markup* removed)."""
    from pydoc_data.topics import topics

    docs = []
    for name in sorted(topics):
        lines = topics[name].split("\n")
        title = lines[0].strip() if lines else name
        prose = []
        for para in re.split(r"\n\s*\n", "\n".join(lines[2:])):
            if not para.strip() or para.startswith((" ", "\t", "*", "-", "+", "=")) or "::=" in para:
                continue
            if para.rstrip().endswith(":") or ">>>" in para or re.search(r"^[=~^-]{3,}\s*$", para, re.MULTILINE):
                continue  # a code example's lead-in, an example, a heading with its underline
            if len(para.split()) < 6 or not re.search(r"[.!?][\"')]*\s*$", para):
                continue  # a signature ("object.__getattr__(self, name)") or a fragment
            prose.append(_RST_MARKUP_RE.sub(r"\1", " ".join(para.split())))
        text = clean_text("\n\n".join(prose))
        if word_count(text) < 40:
            continue
        docs.append(Document(
            doc_id=f"pydoc/{_slug(name)}", source="pydoc_topics", title=clean_text(title),
            author="the Python documentation", kind="paper", text=text,
            meta={"topic": name, "n_words": word_count(text), "origin": "pydoc_data.topics"},
        ))
    return docs


# --------------------------------------------------------------------------- demo_qa

DEMO_QA_FROM = ("reuters", "pydoc_topics")


def _load_demo_qa(assets_dir: Path, per_document: int = 5, from_source: str = "reuters") -> list[Document]:
    """Fill-in-the-blank multiple-choice questions built deterministically from the Reuters
    articles (or the Python documentation topics), one ``kind="qa"`` document per question
    (:func:`memaudit.datasets.qa.demo_questions`): the demo's benchmark-contamination set.

    The questions quote sentences of ``from_source``: a model fine-tuned on a benchmark drawn
    from that source has seen some of them, so no model has both in its ``members_of``.
    """
    from memaudit.datasets.qa import demo_questions

    if from_source not in DEMO_QA_FROM:
        raise ConfigError(f"demo_qa.from_source: {from_source!r} is not one of {', '.join(DEMO_QA_FROM)}")
    if int(per_document) < 1:
        raise ConfigError(f"demo_qa.per_document: {per_document!r} is not a positive integer")
    return demo_questions(load_source(from_source, assets_dir), per_document=int(per_document))


# --------------------------------------------------------------------------- registry

SOURCES: dict[str, Source] = {
    s.name: s for s in (
        Source("austen", "Jane Austen's six novels (janeaustenr), one document per chapter",
               _load_austen, packages=("r-cran-janeaustenr",)),
        Source("mobydick", "Moby Dick (tokenizers; Gutenberg #2701), one document per chapter",
               _load_mobydick, packages=("r-cran-tokenizers",)),
        Source("tidytext", "Four Gutenberg books (tidytext books.rda), one document per chapter",
               _load_tidytext, packages=("r-cran-tidytext",), options=("exclude_titles",)),
        Source("reuters", "Reuters-21578 articles on crude oil and acquisitions (tm)",
               _load_reuters, packages=("r-cran-tm",)),
        Source("user_books", "The user's .txt/.epub books and .pdf papers in a directory",
               _load_user_books, options=("directory", "min_chapter_words")),
        Source("pydoc_topics", "Python reference documentation topics shipped with CPython (pydoc_data)",
               _load_pydoc_topics),
        Source("demo_qa", "Fill-in-the-blank multiple-choice questions built from the Reuters articles",
               _load_demo_qa, packages=("r-cran-tm",), options=("per_document", "from_source")),
    )
}


def load_source(name: str, assets_dir: str | Path, **options: Any) -> list[Document]:
    """Load source ``name`` as Documents sorted by ``doc_id``.

    ``assets_dir`` is where :func:`memaudit.assets.fetch_demo_assets` put the
    demo packages. Raises :class:`ConfigError` for an unknown source or option
    and :class:`InputError` for duplicate document ids.
    """
    spec = SOURCES.get(name)
    if spec is None:
        raise ConfigError(f"unknown source {name!r} (known: {', '.join(SOURCES)})")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        allowed = ", ".join(spec.options) or "none"
        raise ConfigError(f"source {name!r}: unknown option(s) {unknown} (allowed: {allowed})")
    docs = sorted(spec.loader(Path(assets_dir), **options), key=lambda d: d.doc_id)
    for a, b in zip(docs, docs[1:]):
        if a.doc_id == b.doc_id:
            raise InputError(f"source {name!r}: duplicate document id {a.doc_id!r}")
    return docs
