"""Published benchmarks: the DE-COP data, BookTection / arXivTection (CSV or Hugging Face) and
BookMIA (JSONL); and the information-guided probes' sets (``nyt``, ``articles``, ``qa``: see
:func:`cloze_published`).

BookTection and arXivTection rows are complete questions: ``Example_A`` ... ``Example_D``
(``Example_A`` the verbatim passage), ``Answer`` (the verbatim's letter, "A"), ``ID``
("Title_-_Author" for books, the paper title for arXiv), ``Label`` (1 = suspect, possibly
seen; 0 = clean, published after the cutoff) and, in BookTection only, ``Length``
(small/medium/large). BookMIA rows are single snippets (``book_id``, ``book``,
``snippet_id``, ``snippet``, ``label``), to be paraphrased; real snippets contain NUL bytes.

Bad input is an :class:`~memaudit.errors.InputError` naming the file, row (the file's
line number) and column, raised while loading, before any model is asked anything.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from memaudit.config import REJECTS_FORMATS
from memaudit.datasets.types import Document, Passage
from memaudit.errors import InputError

TECTION_COLUMNS = ("Example_A", "Example_B", "Example_C", "Example_D", "Answer", "ID", "Label")
LENGTH_TOKENS = {"small": 64, "medium": 128, "large": 256}
HF_DATASETS = {"booktection": "avduarte333/BookTection", "arxivtection": "avduarte333/arXivTection"}
BOOKMIA_FIELDS = ("book_id", "book", "snippet_id", "snippet", "label")
# The published formats read under the rejects policy: the information-guided probes' sets and the
# labelled-text sets of the KTD paper (memaudit.datasets.labelled)
CLOZE_FORMATS = tuple(f for f in REJECTS_FORMATS if f != "copybench")

log = logging.getLogger(__name__)


def _title_author(doc_id: str, kind: str) -> tuple[str, str]:
    if kind == "book" and "_-_" in doc_id:
        title, author = doc_id.split("_-_", 1)
        return title.replace("_", " ").strip(), author.replace("_", " ").strip()
    return doc_id.replace("_", " ").strip() if kind == "book" else doc_id.strip(), ""


def items_from_frame(frame: pd.DataFrame, where: str, *, kind: str, line_offset: int = 2,
                     length: str | None = None) -> list[dict]:
    """Validated multiple-choice items from a BookTection/arXivTection table.

    ``where`` names the source in errors; row ``i`` of the frame is reported as line
    ``i + line_offset`` (2 for a CSV with a header). ``length`` keeps only BookTection rows
    of that setting.
    """
    missing = [c for c in TECTION_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{where}: missing column(s) {', '.join(missing)} "
                         f"(expected {', '.join(TECTION_COLUMNS)}; found {', '.join(map(str, frame.columns))})")
    if length is not None:
        if "Length" not in frame.columns:
            raise InputError(f"{where}: no column Length to select length={length!r} (BookTection has it)")
        frame = frame[frame["Length"].astype(str).str.strip().str.lower() == length]
    items, labels, seen = [], {}, {}
    for i, row in frame.iterrows():
        line = int(i) + line_offset
        at = f"{where}: row {line}"
        options = []
        for col in TECTION_COLUMNS[:4]:
            value = row[col]
            text = "" if pd.isna(value) else str(value).replace("\x00", "").strip()
            if not text:
                raise InputError(f"{at}, column {col}: empty option")
            options.append(text)
        answer = "" if pd.isna(row["Answer"]) else str(row["Answer"]).strip().upper()
        if answer not in ("A", "B", "C", "D"):
            raise InputError(f"{at}, column Answer: {row['Answer']!r} is not one of A, B, C, D")
        doc_id = "" if pd.isna(row["ID"]) else str(row["ID"]).strip()
        if not doc_id:
            raise InputError(f"{at}, column ID: empty document ID")
        try:
            label = int(float(row["Label"]))
        except (TypeError, ValueError):
            label = -1
        if label not in (0, 1):
            raise InputError(f"{at}, column Label: {row['Label']!r} is not 0 (clean) or 1 (suspect)")
        if labels.setdefault(doc_id, (label, line))[0] != label:
            raise InputError(f"{at}, column Label: ID {doc_id!r} is labelled {label} here but "
                             f"{labels[doc_id][0]} on row {labels[doc_id][1]}")
        size = str(row.get("Length", length or "medium")).strip().lower() if "Length" in frame.columns else "medium"
        key = (doc_id, options[0], size)
        if key in seen:
            raise InputError(f"{at}, column ID: duplicate question (same ID {doc_id!r} and Example_A as row "
                             f"{seen[key]})")
        seen[key] = line
        title, author = _title_author(doc_id, kind)
        n = sum(1 for it in items if it["doc_id"] == doc_id)
        items.append({"item_id": f"{doc_id}#p{n}", "passage_id": f"{doc_id}#p{n}", "doc_id": doc_id,
                      "label": label, "options": options, "answer": "ABCD".index(answer),
                      "meta": {"title": title, "author": author, "kind": kind, "role": "evaluate",
                               "length_tokens": LENGTH_TOKENS.get(size, 128), "source_row": line}})
    if not items:
        raise InputError(f"{where}: no rows" + (f" with Length {length!r}" if length else ""))
    return items


def load_tection_csv(path: str | Path, *, kind: str = "book", length: str | None = None) -> list[dict]:
    """A local BookTection (``kind="book"``) or arXivTection (``kind="paper"``) CSV."""
    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable CSV ({exc})") from exc
    frame = frame.replace({"": None})
    return items_from_frame(frame, str(path), kind=kind, length=length)


def load_tection_hf(name: str, *, length: str | None = None, cache_dir: str | None = None) -> list[dict]:
    """``avduarte333/BookTection`` or ``avduarte333/arXivTection`` from the Hugging Face Hub
    (``name`` is the repo id or "booktection"/"arxivtection"); needs network access once."""
    repo = HF_DATASETS.get(name.lower(), name)
    kind = "paper" if "arxiv" in repo.lower() else "book"
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(repo, repo_type="dataset", cache_dir=cache_dir,
                                    allow_patterns=["*.csv", "*.parquet", "**/*.csv", "**/*.parquet"]))
    files = sorted(folder.rglob("*.parquet")) or sorted(folder.rglob("*.csv"))
    if not files:
        raise InputError(f"hf:{repo}: no CSV or parquet data files in the dataset")
    items = []
    for f in files:
        frame = pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f, dtype=str)
        items += items_from_frame(frame.reset_index(drop=True), f"hf:{repo}/{f.relative_to(folder)}",
                                  kind=kind, line_offset=0 if f.suffix == ".parquet" else 2, length=length)
    return items


def load_bookmia(path: str | Path) -> tuple[list[Document], list[Passage]]:
    """BookMIA JSONL: one document per ``book_id``, one passage per snippet (NUL bytes removed)."""
    path = Path(path)
    docs: dict[str, Document] = {}
    passages, seen = [], {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            at = f"{path}: line {line_no}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{at}: not valid JSON ({exc.msg})") from exc
            missing = [k for k in BOOKMIA_FIELDS if k not in rec]
            if missing:
                raise InputError(f"{at}: missing field(s) {', '.join(missing)}")
            book_id = str(rec["book_id"]).strip()
            snippet = str(rec["snippet"]).replace("\x00", "").strip()
            if not snippet:
                raise InputError(f"{at}, field snippet: empty snippet")
            try:
                label = int(rec["label"])
            except (TypeError, ValueError):
                label = -1
            if label not in (0, 1):
                raise InputError(f"{at}, field label: {rec['label']!r} is not 0 or 1")
            key = (book_id, str(rec["snippet_id"]))
            if key in seen:
                raise InputError(f"{at}, field snippet_id: duplicate snippet {key[1]!r} of book {book_id!r} "
                                 f"(first on line {seen[key]})")
            seen[key] = line_no
            doc = docs.get(book_id)
            if doc is None:
                doc = docs[book_id] = Document(book_id, "bookmia", str(rec["book"]).replace("\x00", "").strip(),
                                               "", "book", "", {"label": label})
            elif doc.meta["label"] != label:
                raise InputError(f"{at}, field label: book {book_id!r} has label {label} here and "
                                 f"{doc.meta['label']} earlier")
            passages.append(Passage(f"{book_id}#{key[1]}", book_id, label, snippet, doc.title, ""))
    if not passages:
        raise InputError(f"{path}: no snippets")
    return sorted(docs.values(), key=lambda d: d.doc_id), passages


# ----------------------------------------------------------------------------- benchmarks

def published_items(published: dict) -> list[dict]:
    """The multiple-choice items of a ``published`` benchmark block: a local ``path`` or a hub ``hf`` id."""
    fmt = published["format"]
    kind = "paper" if fmt == "arxivtection" else "book"
    length = published.get("length")
    if published.get("path"):
        return load_tection_csv(published["path"], kind=kind, length=length)
    return load_tection_hf(published.get("hf") or fmt, length=length, cache_dir=published.get("cache_dir"))


def published_benchmark(name: str, published: dict, *, seed: int = 13,
                        rejects: list | None = None) -> tuple[list[Document], list[Passage]]:
    """Documents and passages of a benchmark built from published data.

    BookTection/arXivTection: one document per ``ID`` (its text: the verbatim passages), one passage
    per question (the verbatim option), so the token-probability probes score the same passages
    DE-COP asks about. BookMIA: one document per book, one passage per snippet. ``Label``/``label``
    1 (suspect) becomes member, 0 (clean) non-member. ``nyt``, ``articles``, ``qa``: see
    :func:`cloze_published`; ``copybench``: :func:`copybench_published_benchmark`. Their rejected
    rows are appended to ``rejects`` (write them with
    :func:`memaudit.datasets.rejects.write_benchmark_rejects`), or logged as a warning when the
    caller passes no list.
    """
    if published["format"] in (*CLOZE_FORMATS, "copybench"):
        docs, passages, rejected = (copybench_published_benchmark(name, published)
                                    if published["format"] == "copybench" else cloze_published(name, published, seed=seed))
        if rejects is not None:
            rejects.extend(rejected)
        elif rejected:
            log.warning(f"benchmark {name}: {len(rejected)} row(s) of {published['path']} rejected or kept with a "
                        f"note; first: {rejected[0].message()}")
        return docs, passages
    if published["format"] == "bookmia":
        if not published.get("path"):
            raise InputError(f"benchmarks.{name}.published.path: BookMIA is read from a local JSONL file")
        docs, passages = load_bookmia(published["path"])
        for d in docs:
            d.meta["benchmark"] = name
        return docs, passages
    items = published_items(published)
    docs: dict[str, Document] = {}
    passages = []
    for it in items:
        m = it["meta"]
        verbatim = it["options"][it["answer"]]
        doc = docs.setdefault(it["doc_id"], Document(
            it["doc_id"], published["format"], m["title"], m["author"], m["kind"], "",
            {"label": it["label"], "benchmark": name, "origin": published.get("path") or published.get("hf")
             or published["format"]}))
        doc.text = f"{doc.text}\n{verbatim}" if doc.text else verbatim
        passages.append(Passage(it["item_id"], it["doc_id"], it["label"], verbatim, m["title"], m["author"],
                                {"length_tokens": m["length_tokens"], "source_row": m.get("source_row")}))
    for d in docs.values():
        d.meta["n_passages"] = sum(1 for p in passages if p.doc_id == d.doc_id)
    return sorted(docs.values(), key=lambda d: d.doc_id), passages


def cloze_published(name: str, published: dict, *, seed: int = 13) -> tuple[list[Document], list[Passage], list]:
    """``(documents, passages, rejected)`` of an information-guided-probes benchmark (Sections 4.2, 4.3).

    - ``{format: nyt, path: <file>}``: the NYT Exhibit J set (:func:`memaudit.datasets.nyt.load_nyt`);
    - ``{format: articles, path: <folder>, cutoff: YYYY-MM-DD}``: an auditor's own articles, labelled
      by date (:func:`memaudit.datasets.articles.build_articles`);
    - ``{format: qa, path: <file>, member_fraction: 0.5}``: a QA set in JSON lines split (seeded by
      ``seed``) into a contaminated and a clean half (:func:`memaudit.datasets.qa.load_qa_jsonl`);
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
        from memaudit.datasets.qa import load_qa_jsonl

        docs, passages, rejected = load_qa_jsonl(path, strict, member_fraction=float(
            published.get("member_fraction", 0.5)), seed=seed)
    elif fmt in ("wikimia", "member_texts"):
        from memaudit.datasets.labelled import WIKIMIA, load_labelled, member_texts_set

        spec = WIKIMIA if fmt == "wikimia" else member_texts_set(published.get("text_key", "text"))
        docs, passages, rejected = load_labelled(path, spec, source=fmt, strict=strict)
    else:
        raise InputError(f"{where}.format: {fmt!r} is not one of {', '.join(CLOZE_FORMATS)}")
    labels = {p.label for p in passages}
    if labels != {0, 1}:
        only = "members (label 1)" if labels == {1} else "non-members (label 0)"
        raise InputError(f"{path}: all {len(passages)} usable rows are {only}; a benchmark needs both"
                         + (" (check cutoff)" if fmt == "articles" else ""))
    for d in docs:
        d.meta["benchmark"] = name
    return docs, passages, rejected


def copybench_published_benchmark(name: str, published: dict) -> tuple[list[Document], list[Passage], list]:
    """CopyBench's published files as a benchmark: one document per book (what the files say of it,
    :func:`~memaudit.datasets.copybench_published.book_texts`), one passage per literal snippet (the
    BookMIA prefix and its reference). Labels from ``published.labels``, else every book is
    unlabelled (-1). The items themselves are built by rule copybench_items from the same files."""
    from memaudit.datasets.copybench_published import book_texts, copybench_sets

    sets = copybench_sets(published)
    texts = book_texts(sets)
    labels = {it["book"]: it["label"] for items in (sets.literal, sets.nonliteral, sets.qa) for it in items}
    titles = {it["book"]: it["title"] for items in (sets.literal, sets.nonliteral, sets.qa) for it in items}
    passages = [Passage(it["item_id"], it["book"], it["label"], f"{it['prefix'].strip()} {it['reference'].strip()}",
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
