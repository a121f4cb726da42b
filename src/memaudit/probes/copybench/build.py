"""CopyBench items built from books: literal prefixes, and CliffsNotes-style events and characters.

CopyBench's published sets come from BookMIA snippets (literal) and CliffsNotes summaries
run through GPT-4 (events, characters; Appendix A.1). For the user's own books, and for
the demo, memaudit builds the same record types from a benchmark's documents:

Literal items (:func:`literal_items`)
    the first ``prefix_words`` words of a document's text (the excerpt a contaminated model
    was fine-tuned on) and the next ``reference_words`` as the reference (the paper: 200 and 50),
    each the text as written, paragraph breaks kept.
Events (:func:`extract_events`)
    *extractive*: the book's text (its sampled chapters in story order) is cut into
    ``n_events`` equal stretches of sentences and each stretch gives its most representative
    sentence (the highest TF-IDF cosine to the whole book; 8-40 words, not dialogue). These
    are sentences of the book, not an LLM's present-tense summary of it, so they are labelled
    ``extractive`` in every table (``event_source``). The real-run path is the paper's prompts
    through a configured model (:mod:`memaudit.probes.copybench.extract`, the ``extractor`` role).
Characters (:func:`extract_characters`)
    spaCy's PERSON entities (each line read on its own: :func:`line_docs`), titles stripped (Mr.,
    Miss, Captain ...), grouped into characters: a multi-word name is a character and each of
    its words that occurs in no other multi-word name is one of its aliases; a single name inside no multi-word name is
    a character of its own. A word shared by two characters' names ("Bennet") identifies
    neither and is dropped (each alias names exactly one character, as CopyBench requires).
Story beginnings (:func:`nonliteral_items`)
    the first ``n_beginnings`` events (the paper: five); each instance's reference events
    exclude its own beginning, and characters the beginning names do not count.

Books that cannot give an item (too little text for ``min_events`` events, no character)
are returned as rejects with the reason, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from memaudit.datasets.prefix import word_spans
from memaudit.probes.copybench.metrics import has_name, rouge_tokens

TITLES = frozenset({
    "mr", "mrs", "miss", "ms", "mister", "master", "madam", "madame", "dr", "doctor", "sir", "lady", "lord",
    "captain", "colonel", "admiral", "general", "major", "lieutenant", "sergeant", "rev", "reverend",
    "professor", "prof", "dame", "st", "saint", "uncle", "aunt", "king", "queen", "prince", "princess",
})
_NAME_WORD = re.compile(r"^[A-Z][a-zA-Z\-']*$")
_QUOTES = ("\"", "\u201c", "\u2018", "'")


@dataclass
class Reject:
    """A book or document the builder could not use, and why (written beside the items)."""

    where: str
    reason: str
    meta: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- literal

def literal_items(documents: Iterable[dict], *, prefix_words: int, reference_words: int) -> tuple[list[dict], list[Reject]]:
    """One literal item per document with ``prefix_words + reference_words`` words of text; a document
    too short, or whose reference has no ASCII letter or digit (ROUGE-L has nothing to compare), is a reject.

    Prefix and reference are the text as written between their first and last words (words counted by
    ``str.split``): a model fine-tuned on the document read its paragraph breaks, and MemFree's n-grams of the
    references (the default corpus) are those the model writes."""
    items, rejects = [], []
    for d in documents:
        text = d["text"]
        spans = word_spans(text)
        need = prefix_words + reference_words
        if len(spans) < need:
            rejects.append(Reject(d["doc_id"], f"{len(spans)} words, a literal item needs {need} "
                                               f"(prefix_words {prefix_words} + reference_words {reference_words})"))
            continue
        reference = text[spans[prefix_words][0]:spans[need - 1][1]]
        if not rouge_tokens(reference):
            # rouge-score's tokenizer keeps ASCII letters and digits only: against a reference in another
            # script every output, a verbatim copy too, would score ROUGE-L 0 (no copying, silently)
            rejects.append(Reject(d["doc_id"], f"its reference ({reference_words} words) has no ASCII letter or "
                                               "digit: ROUGE-L (rouge-score's tokenizer) would score every output 0"))
            continue
        items.append({
            "item_id": f"{d['doc_id']}#literal", "doc_id": d["doc_id"], "book": book_key(d), "title": d["title"],
            "label": int(d["meta"]["label"]), "prefix": text[:spans[prefix_words - 1][1]],
            "reference": reference,
            "meta": {"source": "built", "prefix_words": prefix_words, "reference_words": reference_words},
        })
    return items, rejects


# ----------------------------------------------------------------------------- books

def book_key(doc: dict) -> str:
    return f"{doc['source']}/{doc['meta'].get('book') or doc['title']}"


def books_of(documents: Iterable[dict]) -> dict[str, list[dict]]:
    """Documents grouped by book, each book's in story order (chapter number, then id)."""
    books: dict[str, list[dict]] = {}
    for d in documents:
        books.setdefault(book_key(d), []).append(d)
    for docs in books.values():
        docs.sort(key=lambda d: (int(d["meta"].get("chapter") or 0), d["doc_id"]))
    return dict(sorted(books.items()))


def book_text(docs: Sequence[dict]) -> str:
    """A book's chapters (:func:`books_of`'s story order) as one text: a blank line between chapters, as
    between paragraphs, so a reader (the extractor, spaCy) sees a chapter end as the end of a paragraph,
    not a line break inside one."""
    return "\n\n".join(d["text"] for d in docs)


def line_docs(nlp, text: str) -> Iterator:
    """spaCy's reading of each non-blank line of ``text`` on its own: spaCy puts no sentence end at a line
    break and its entities run across one (kept or read as a space), so a heading ("CHAPTER I") or a quoted
    line would fuse with the sentence on the next line, and a name ending a line with one starting the next.
    memaudit's readers join a paragraph's wrapped lines, so a line break left in a document is the text's."""
    return nlp.pipe(line for line in text.split("\n") if line.strip())


def sentence_spans(nlp, text: str) -> Iterator:
    """spaCy's sentences of ``text``, each line segmented on its own (:func:`line_docs`)."""
    for doc in line_docs(nlp, text):
        yield from doc.sents


def sentences(nlp, text: str) -> list[str]:
    return [s.text.strip() for s in sentence_spans(nlp, text) if s.text.strip()]


def extract_events(sents: Sequence[str], n_events: int, *, min_words: int = 8, max_words: int = 40) -> list[str]:
    """Up to ``n_events`` sentences in story order, the most representative of each stretch of the text."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    candidates = [(i, s) for i, s in enumerate(sents)
                  if min_words <= len(s.split()) <= max_words and not s.startswith(_QUOTES)]
    if not candidates:
        return []
    matrix = TfidfVectorizer(stop_words="english").fit_transform([s for _, s in candidates])
    centroid = np.asarray(matrix.mean(axis=0)).ravel()
    norm = np.linalg.norm(centroid) or 1.0
    scores = (matrix @ centroid) / norm
    k = min(n_events, len(candidates))
    events = []
    for stretch in np.array_split(np.arange(len(candidates)), k):
        best = max(stretch, key=lambda j: (scores[j], -j))
        events.append(candidates[int(best)][1])
    return events


def _clean_name(text: str) -> str | None:
    words = re.sub(r"['\u2019]s$", "", text.strip()).replace(".", " ").split()
    while words and words[0].lower() in TITLES:
        words = words[1:]
    if not words or len(words) > 4 or not all(_NAME_WORD.match(w) for w in words):
        return None
    return " ".join(words)


def extract_characters(nlp, text: str, *, max_characters: int = 10, min_mentions: int = 2) -> tuple[list[list[str]], list[str]]:
    """Characters (each a list of aliases, most mentioned first) and the names dropped as ambiguous."""
    counts: dict[str, int] = {}
    for ent in (ent for doc in line_docs(nlp, text) for ent in doc.ents):
        if ent.label_ == "PERSON":
            name = _clean_name(ent.text)
            if name:
                counts[name] = counts.get(name, 0) + 1
    full = sorted(n for n in counts if " " in n)
    owners: dict[str, set[str]] = {}
    for name in full:
        for word in name.split():
            owners.setdefault(word, set()).add(name)
    characters: dict[str, dict] = {name: {"aliases": [name], "mentions": counts[name]} for name in full}
    ambiguous = sorted(w for w, names in owners.items() if len(names) > 1)
    for word, names in sorted(owners.items()):
        if len(names) == 1:
            owner = next(iter(names))
            if word not in characters[owner]["aliases"]:
                characters[owner]["aliases"].append(word)
                characters[owner]["mentions"] += counts.get(word, 0)
    for name, n in sorted(counts.items()):
        if " " not in name and name not in owners:
            characters[name] = {"aliases": [name], "mentions": n}
    kept = sorted((c for c in characters.values() if c["mentions"] >= min_mentions),
                  key=lambda c: (-c["mentions"], c["aliases"][0]))
    return [c["aliases"] for c in kept[:max_characters]], ambiguous


def nonliteral_items(documents: Iterable[dict], nlp, *, n_events: int = 20, n_beginnings: int = 5,
                     min_events: int | None = None, max_characters: int = 10,
                     min_mentions: int = 2, extractor=None) -> tuple[list[dict], list[Reject]]:
    """Story-beginning items per book: events and characters from the book's text (see the module docstring),
    or from ``extractor`` (:class:`memaudit.probes.copybench.extract.BookExtractor`, the paper's prompts
    through a language model) when one is given."""
    # a beginning plus the paper's event threshold (5) must be findable, and no more than asked for
    min_events = min_events if min_events is not None else min(n_events, n_beginnings + 5)
    items, rejects = [], []
    for book, docs in books_of(documents).items():
        labels = {int(d["meta"]["label"]) for d in docs}
        if len(labels) != 1:
            raise ValueError(f"book {book!r} has member and non-member documents: non-literal copying needs "
                             "a book-level split (benchmarks.<name>.split_by: book)")
        label = labels.pop()
        text = book_text(docs)
        if extractor is not None:
            got = extractor.book_sets(docs[0]["meta"].get("book") or docs[0]["title"], docs[0]["title"],
                                      docs[0].get("author"), text, n_events=n_events, min_events=min_events)
            if isinstance(got, Reject):
                rejects.append(Reject(book, got.reason, got.meta))
                continue
            events, characters, extraction = got
        else:
            events = extract_events(sentences(nlp, text), n_events)
            if len(events) < min_events:
                rejects.append(Reject(book, f"{len(events)} events from {len(text.split())} words, fewer than "
                                            f"min_events {min_events}: give the book more text"))
                continue
            characters, ambiguous = extract_characters(nlp, text, max_characters=max_characters,
                                                       min_mentions=min_mentions)
            if not characters:
                rejects.append(Reject(book, "no character named at least min_mentions "
                                            f"({min_mentions}) times"))
                continue
            extraction = {"event_source": "extractive", "character_source": "spacy", "ambiguous_names": ambiguous}
        for k, beginning in enumerate(events[:n_beginnings]):
            tokens = re.split(r"\W+", beginning.lower())
            named = [c for c in characters if has_name([t for t in tokens if t], c)]
            items.append({
                "item_id": f"{book}#b{k}", "doc_id": f"{book}#b{k}", "book": book, "title": docs[0]["title"],
                "label": label,
                "beginning": beginning,
                "reference_events": [e for j, e in enumerate(events) if j != k],
                "reference_characters": [c for c in characters if c not in named],
                "meta": {"source": "built", **extraction, "n_events": len(events),
                         "characters_in_beginning": len(named), "chapters": [d["doc_id"] for d in docs]},
            })
    return items, rejects
