"""Member/non-member benchmarks with a known ground truth, and the disjoint pretraining pool.

A benchmark draws documents from its sources, cuts each into sentence-aligned
passages, keeps ``passages_per_document`` of them as the document's excerpt,
samples ``n_documents`` documents (at most ``documents_per_book`` of each book first, where
set) and splits them IID into members and non-members (seeded; the documents of all its sources
taken in ``doc_id`` order, so the order ``sources`` lists them in changes nothing). The excerpt is both what the
probes read and what a contaminated model is fine-tuned on, so membership is exact.

``split_by: book`` splits whole books instead (every sampled chapter of a member book is
a member): the level CopyBench's non-literal copying works at, where a model that saw
some chapters of a book knows its characters in all of them. A model is contaminated
only on the benchmarks in its ``members_of``; a book split's books may recur in another
benchmark, which then must not be in the same model's ``members_of``.

``labels`` (a ``book,label`` CSV) replaces the random split with the user's own labels, by book: the
books a model is known to have seen and known not to have (a licence list, publication dates against a
training cutoff). A book the file does not list is left out with a row in the rejects table.

Documents (or books) that share a ``near_duplicate_ngram``-word run (default 13) are kept on one
side of either random split (:mod:`memaudit.datasets.near_duplicates`): a non-member that repeats a
member's text was seen in training; given labels are never moved (a ``kept`` row says where a
non-member repeats a member). Each such document's ``meta["near_duplicates"]`` lists the others of its
group.
"""

from __future__ import annotations

import logging
import random
import unicodedata
from pathlib import Path
from typing import Sequence

from memaudit import MEMBER, NONMEMBER
from memaudit.datasets.near_duplicates import (DEFAULT_NGRAM, check_both_sides, keep_together, near_duplicate_groups,
                                               nonmembers_sharing)
from memaudit.datasets.qa import BLANK, QA_META
from memaudit.datasets.sources import load_source
from memaudit.datasets.text import make_passages
from memaudit.datasets.types import Document, Passage
from memaudit.errors import InputError

log = logging.getLogger(__name__)

# The code version of what is built here is the "datasets" step's (memaudit.versions.STEPS). A source's own
# version, beside it (memaudit.versions.dataset_code_version): bump a source's with a change that alters only
# the benchmarks built from it, and only theirs rerun.
# demo_qa 1: a question's answered sentence joins the near-duplicate test (from pydoc_topics, a non-member
# question's answer stood in a member question's sentence).
# user_books 1: an epub is decoded in the encoding it declares (it was read as UTF-8, bad bytes replaced), and the
# configured labels file in the folder is no rejected book.
# user_books 2: a chapter left out for min_chapter_words in a book read by chapter has a rejects row (it went
# unmentioned) and is named in the book's first document's meta.short_chapters.
# demo_qa 2: no blank whose word stands again in its sentence inside another token ("Rospatch's", "-1", "1.0"):
# the answer was shown beside the blank. user_books 3: a PDF's typeset ligatures (U+FB00-FB06) are read as
# their letters ("ﬁnance" was one character other than "fi"). user_books 4: a PDF's word hyphenated at a line's
# end is joined only where both sides are lowercase ("COVID-\n19" was "COVID19"); soft hyphens are dropped and
# no-break spaces read as spaces (clean_text).
# user_books 5: a file name stored in NFD matches its labels row in NFC, and its id is the NFC name's; a PDF's
# compound broken at its own hyphen at a line's end keeps the hyphen ("well-\nknown" was "wellknown").
# user_books 6: a NUL character in a book stops the build naming file, line and column (it was removed unsaid).
# demo_qa 3: a question's wrong choices are names or numbers of its own article only, a sentence whose article
# has too few passed over for the next (they were topped up from all articles: the member half showed the
# fine-tune non-member articles' words, which the cloze probes mask on non-members); 195 questions, not 250.
# user_books 7: a PDF's page break is a line break (a blank line before: a paragraph break mid-sentence), and a
# line of spaces in its text layer a paragraph break.
SOURCE_VERSIONS = {"demo_qa": 3, "user_books": 7}
# How a benchmark of two or more sources is split, its own version (memaudit.versions.dataset_code_version:
# "+multisource<n>" on such benchmarks only, so a fix here reruns them and no single-source benchmark).
# 2: the documents sorted by doc_id before the seeded draw (1: in the order the sources were listed, so the
# same sources listed in another order split otherwise).
MULTI_SOURCE_SPLIT_VERSION = 2


def load_documents(sources: Sequence[str], assets_dir: Path, source_options: dict | None = None) -> list[Document]:
    docs: list[Document] = []
    for src in sources:
        docs.extend(load_source(src, Path(assets_dir), **(source_options or {}).get(src, {})))
    seen: set[str] = set()
    for d in docs:
        if d.doc_id in seen:
            raise InputError(f"duplicate document id {d.doc_id!r} across sources {list(sources)}")
        seen.add(d.doc_id)
    return docs


def build_benchmark(name: str, cfg: dict, assets_dir: Path, seed: int,
                    rejects: list | None = None) -> tuple[list[Document], list[Passage]]:
    """Documents (with ``meta['label']``) and their passages for one benchmark.

    A published benchmark's rejected rows (the ``nyt``, ``articles`` and ``qa`` formats), a built
    one's documents with fewer than ``min_passages`` passages, and a labelled one's books without
    a label and labels without a book, are appended to ``rejects``
    (see :func:`memaudit.datasets.rejects.write_benchmark_rejects`).
    """
    if "published" in cfg:
        from memaudit.datasets.published import published_benchmark

        return published_benchmark(name, cfg["published"], seed=seed, rejects=rejects)
    # by id, not in the order the sources are listed: [a, b] and [b, a] are one benchmark, and the seeded
    # sample and shuffle below gave them two splits (one source's documents come sorted by id already)
    docs = sorted(load_documents(cfg["sources"], assets_dir, cfg.get("source_options")), key=lambda d: d.doc_id)
    if "user_books" in cfg["sources"] and rejects is not None:
        from memaudit.datasets.sources import USER_BOOKS_DIRECTORY, user_books_rejects

        options = (cfg.get("source_options") or {}).get("user_books") or {}
        rejects += user_books_rejects(options.get("directory", USER_BOOKS_DIRECTORY), docs,
                                      options.get("min_chapter_words", 200), labels=cfg.get("labels"))
    candidates, short = [], []
    for d in docs:
        passages = _document_passages(d, cfg)
        if len(passages) >= cfg["min_passages"]:
            candidates.append((d, passages))
        else:
            short.append((d, len(passages)))
    if short and rejects is not None:  # left out by the config, but never without a trace
        from memaudit.datasets.rejects import Rejected, short_repr

        rejects += [Rejected(f"source {d.source}", 0, "document", short_repr(f"{d.doc_id} ({k} passage(s))"),
                             f"fewer than min_passages ({cfg['min_passages']}) passages of "
                             f"{cfg['passage_words']} words: the document is left out") for d, k in short]
    if len(candidates) < 2:  # say why: passage_words above what the documents hold was only "0 usable"
        longest = max((len(d.text.split()) for d, _ in short), default=0)
        why = f"; {len(short)} document(s) gave fewer, the longest of them {longest:,} words" if short else ""
        raise InputError(f"benchmark {name!r}: only {len(candidates)} usable documents in sources "
                         f"{cfg['sources']} (need at least 2 with {cfg['min_passages']} passage(s) of "
                         f"passage_words={cfg['passage_words']} words{why})")
    labels = _book_labels(name, cfg["labels"], candidates, rejects) if cfg.get("labels") else None
    if labels is not None:
        candidates = [c for c in candidates if _book(c[0]) in labels]
    rng = random.Random(f"{seed}:{name}")
    if cfg.get("documents_per_book") is not None:
        candidates = _sample_per_book(candidates, cfg["documents_per_book"], rng)
    n = cfg.get("n_documents")
    if n is not None and n < len(candidates):
        candidates = rng.sample(candidates, n)
    elif n is not None and n > len(candidates):  # "at most": fewer, said in the job's log, not only counted there
        log.warning(f"benchmark {name}: n_documents is {n}, but the sources give {len(candidates)} usable documents "
                    f"({len(short)} left out for fewer than min_passages passages): all {len(candidates)} are used")
    rng.shuffle(candidates)
    if labels is not None:
        candidates, n_members, groups = _given_split(name, cfg, candidates, labels, rejects)
    else:
        if cfg.get("split_by", "document") == "book":
            candidates, n_members = _split_books(name, candidates, cfg["member_fraction"], rng)
        else:
            n_members = round(len(candidates) * cfg["member_fraction"])
            n_members = min(max(n_members, 1), len(candidates) - 1)
        candidates, n_members, groups = _keep_near_duplicates_together(name, cfg, candidates, n_members)
    out_docs, out_passages = [], []
    for rank, (d, passages) in enumerate(sorted(candidates[:n_members], key=lambda c: c[0].doc_id)
                                          + sorted(candidates[n_members:], key=lambda c: c[0].doc_id)):
        label = MEMBER if rank < n_members else NONMEMBER
        excerpt = "\n".join(passages)
        meta = dict(d.meta, label=label, n_passages=len(passages), benchmark=name)
        if (unit := _unit(d, cfg)) in groups:
            meta["near_duplicates"] = [u for u in groups[unit] if u != unit]
        out_docs.append(Document(d.doc_id, d.source, d.title, d.author, d.kind, excerpt, meta))
        qa_fields = {k: d.meta[k] for k in QA_META if k in d.meta} if d.kind == "qa" else {}
        for i, p in enumerate(passages):
            out_passages.append(Passage(f"{d.doc_id}#p{i}", d.doc_id, label, p, d.title, d.author,
                                        {"index": i, "n_words": len(p.split()), **qa_fields}))
    out_docs.sort(key=lambda d: d.doc_id)
    out_passages.sort(key=lambda p: p.passage_id)
    return out_docs, out_passages


def _document_passages(d: Document, cfg: dict) -> list[str]:
    """A QA item (``kind="qa"``: question, choices and answer) is one passage, never cut, whatever
    ``passage_words``; any other document is cut into sentence-aligned passages."""
    if d.kind == "qa":
        return [d.text]
    return make_passages(d.text, cfg["passage_words"], cfg["passages_per_document"])


def _sample_per_book(candidates: list, per_book: int, rng: random.Random) -> list:
    """At most ``per_book`` documents of each book (seeded, books in sorted order), so that no book
    is left with too little text for its events and beginnings where a plain sample of chapters
    follows the books' lengths (Emma's 55 chapters against Northanger Abbey's 31)."""
    by_book: dict[str, list] = {}
    for c in candidates:
        by_book.setdefault(_book(c[0]), []).append(c)
    kept = []
    for book in sorted(by_book):
        group = by_book[book]
        kept += rng.sample(group, per_book) if len(group) > per_book else group
    return kept


def _book(d: Document) -> str:
    return f"{d.source}/{d.meta.get('book') or d.title}"


def _unit(d: Document, cfg: dict) -> str:
    """What a split assigns to one side: a book (``split_by: book``, or labels given per book) or a document."""
    return _book(d) if cfg.get("split_by", "document") == "book" or cfg.get("labels") else d.doc_id


def _book_names(d: Document) -> set[str]:
    """What a labels file may call a document's book: ``source/book`` (as ``documents.jsonl`` has it), the
    book's id (``meta.book``, else the title) and the file it was read from (``user_books``: ``Emma.txt``)."""
    names = {_book(d), d.meta.get("book") or d.title}
    origin = str(d.meta.get("origin") or "")
    if d.source == "user_books" and "::" in origin:
        names.add(origin.split("::", 1)[1])
    return names


def _book_labels(name: str, path: str, candidates: list, rejects: list | None) -> dict[str, int]:
    """``{source/book: label}`` from the user's ``book,label`` file (:mod:`memaudit.datasets.label_files`).

    A book the file does not list is left out (never guessed), a row that names no book is kept
    unused, each with a row in the benchmark's rejects table; a row that names two books is an error.
    """
    from memaudit.datasets.label_files import read_labels
    from memaudit.datasets.rejects import Rejected, short_repr

    rows = read_labels(path, "book")
    books: dict[str, Document] = {}
    for d, _ in candidates:
        books.setdefault(_book(d), d)
    matches: dict[str, set[str]] = {}
    for book, d in books.items():
        for key in _book_names(d):
            # NFC on both sides: a file name from a Mac's HFS+ disk is decomposed, a row typed anywhere composed
            matches.setdefault(unicodedata.normalize("NFC", key), set()).add(book)
    labels: dict[str, int] = {}
    out: list = []
    for key, (label, line) in rows.items():
        found = sorted(matches.get(unicodedata.normalize("NFC", key), ()))
        if len(found) > 1:
            raise InputError(f"{path}, line {line}, column book: {key!r} names {len(found)} books of benchmark "
                             f"{name!r} ({', '.join(found)}); write one of these instead")
        if not found:
            out.append(Rejected(str(path), line, "book", short_repr(key), f"no book of benchmark {name!r} with usable "
                                f"documents is called this (its books: {', '.join(sorted(books))})", "unused"))
            continue
        if found[0] in labels:
            raise InputError(f"{path}, line {line}, column book: {key!r} is {found[0]}, labelled on an earlier line")
        labels[found[0]] = label
    for book, d in sorted(books.items()):
        if book not in labels:
            also = sorted(_book_names(d) - {book})
            out.append(Rejected(str(path), 0, "book", short_repr(book) + (f" ({', '.join(also)})" if also else ""),
                                "no row names this book: its documents are left out, never guessed"))
    if rejects is not None:
        rejects += out
    return labels


def _given_split(name: str, cfg: dict, candidates: list, labels: dict[str, int],
                 rejects: list | None) -> tuple[list, int, dict[str, tuple[str, ...]]]:
    """Candidates (members first), their member count and the near-duplicate groups of a benchmark whose
    labels the user gave. Nothing is moved: a book that shares a ``near_duplicate_ngram``-word run with a
    book of the other label keeps its label, with a ``kept`` row in the rejects table saying so."""
    from memaudit.datasets.rejects import Rejected, short_repr

    members = [c for c in candidates if labels[_book(c[0])] == MEMBER]
    others = [c for c in candidates if labels[_book(c[0])] != MEMBER]
    if not members or not others:
        raise InputError(f"benchmark {name!r}: the labels in {cfg['labels']} leave no "
                         f"{'members' if not members else 'non-members'} among its {len(candidates)} documents "
                         f"(a benchmark needs both)")
    n, _, groups = _near_duplicate_units(cfg, candidates)  # units are books: labels are given per book
    for book, shared in nonmembers_sharing(groups, lambda b: labels[b] == MEMBER):
        if rejects is not None:
            rejects.append(Rejected(str(cfg["labels"]), 0, "book", short_repr(book),
                                    f"a non-member that shares a {n}-word run with member(s) {', '.join(shared)}: "
                                    f"kept with its label", "kept"))
    return members + others, len(members), groups


def _near_duplicate_units(cfg: dict, candidates: list) -> tuple[int | None, int, dict[str, tuple[str, ...]]]:
    """``near_duplicate_ngram``, the number of split units and the groups of units that share a run of that
    many words (:func:`memaudit.datasets.near_duplicates.near_duplicate_groups`; none where it is null)."""
    n = cfg.get("near_duplicate_ngram", DEFAULT_NGRAM)
    texts: dict[str, list[str]] = {}
    for d, passages in candidates:
        texts.setdefault(_unit(d, cfg), []).extend([*passages, *_answered(d)])
    return n, len(texts), (near_duplicate_groups(texts, n) if n is not None else {})


def _answered(d: Document) -> list[str]:
    """A fill-in-the-blank question's sentence with its answer in the blank (``demo_qa``), beside its text: what a
    model fine-tuned on the question learns. Two questions on one sentence (two articles that repeat it) blank
    different words, and the two blanks can break every shared ``n``-word run of a short sentence, while the member
    question shows the non-member's answer in place."""
    question, answer = d.meta.get("question"), d.meta.get("answer")
    if d.kind != "qa" or not isinstance(question, str) or BLANK not in question or not isinstance(answer, str):
        return []
    return [question.replace(BLANK, answer, 1)]


def _keep_near_duplicates_together(name: str, cfg: dict, candidates: list,
                                   n_members: int) -> tuple[list, int, dict[str, tuple[str, ...]]]:
    """Candidates (members first) and their member count once split units that share a
    ``near_duplicate_ngram``-word run are on one side (:mod:`memaudit.datasets.near_duplicates`),
    with the groups found; the split is unchanged where there are none."""
    n, n_units, groups = _near_duplicate_units(cfg, candidates)
    if not groups:
        return candidates, n_members, {}
    members = keep_together({_unit(d, cfg) for d, _ in candidates[:n_members]}, groups)
    check_both_sides(f"benchmark {name!r}", n_units, members, n)
    ordered = [c for c in candidates if _unit(c[0], cfg) in members]
    return ordered + [c for c in candidates if _unit(c[0], cfg) not in members], len(ordered), groups


def _split_books(name: str, candidates: list, member_fraction: float, rng: random.Random) -> tuple[list, int]:
    """Candidates reordered members first, where members are all documents of a seeded share of the books."""
    books = sorted({_book(d) for d, _ in candidates})
    if len(books) < 2:
        raise InputError(f"benchmark {name!r}: split_by: book needs documents of at least 2 books "
                         f"(found {len(books)}: {books})")
    n_books = min(max(round(len(books) * member_fraction), 1), len(books) - 1)
    member_books = set(rng.sample(books, n_books))
    members = [c for c in candidates if _book(c[0]) in member_books]
    return members + [c for c in candidates if c not in members], len(members)


def build_pretrain_pool(cfg: dict, assets_dir: Path) -> list[Document]:
    """The third pool: whole documents from sources no benchmark uses (checked by the config)."""
    return load_documents(cfg["sources"], assets_dir, cfg.get("source_options"))


def member_texts(documents: Sequence[dict]) -> list[str]:
    return [d["text"] for d in documents if int(d["meta"]["label"]) == MEMBER]
