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

Accepted local files (memaudit never downloads this set; a Hub id is an InputError): the Hub's
``.parquet`` file, JSON lines or a JSON array as ``Dataset.to_json`` writes it (``\\/`` and
``\\u00e9``-style escapes, newlines inside articles as ``\\n``), or CSV with a header row as
``DataFrame.to_csv(index=False)`` writes it; read by :mod:`memaudit.datasets.labelled`, the one
reader of labelled-text sets.

One :class:`~memaudit.datasets.types.Document` and one
:class:`~memaudit.datasets.types.Passage` per article: the passage text is the snippet, the
full text the cloze probe masks; ``meta`` keeps the set's own ``prefix`` and ``completion``,
which the prefix-probing baseline uses as the paper does (:func:`memaudit.datasets.prefix.prefix_items`),
the file and its ``line`` (and ``element``, its index in a JSON array). Title and author stay empty: the outlet
would tell a probe the label. Rows the loader cannot use follow the published-data policy of
:mod:`memaudit.datasets.rejects`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from memaudit.datasets.labelled import LabelledSet, deduplicate, located, note_near_duplicates, read_rows, text_key
from memaudit.datasets.rejects import Rejected, RejectLog, require_rows
from memaudit.datasets.types import Document, Passage

NYT_SOURCE = "nyt_exhibit_j"
NYT = LabelledSet("the NYT Exhibit J set", "snippet", ("prefix", "completion"),
                  label_meaning="0 (other outlet, after the cutoff) or 1 (Exhibit J)")


def nyt_doc_id(snippet: str) -> str:
    """``nyt/<12 hex digits>``: a hash of the whitespace-normalised snippet, the same whichever
    file format or row order the set comes in."""
    return "nyt/" + hashlib.sha256(text_key(snippet).encode("utf-8")).hexdigest()[:12]


def _read_rows(path: str | Path, log: RejectLog) -> tuple[Path, str, list[dict[str, Any]]]:
    """The usable rows; an empty prefix or completion is kept with a note (the prefix probe lacks it)."""
    path, fmt, rows = read_rows(path, NYT, log)
    for row in rows:
        for key in ("prefix", "completion"):
            if not row[key]:
                log.add(path, row["line"], key, "", f"empty {key}: kept for the cloze probe; the prefix probe "
                        f"has no {key} for it", action="kept", element=row["element"])
    return path, fmt, rows


def load_nyt(path: str | Path, strict: bool = False) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """Load a local copy of the NYT Exhibit J set (Section 4.2) under the published-data policy.

    Returns ``(documents, passages, rejected)``: one document and one passage per usable article
    (label 1 = Exhibit J, member; 0 = later CNN article, non-member), in file order for the
    passages and by ``doc_id`` for the documents. Rejected: an empty snippet, a label other than
    exactly 0 or 1, a NUL character, a malformed line or a wrong field count, a repeated snippet,
    and every copy of a snippet given with conflicting labels; a non-member sharing a 13-word run with a member is
    kept with a note (:func:`~memaudit.datasets.labelled.note_near_duplicates`). An empty or null prefix or completion
    (null: how parquet and ``Dataset.to_json`` give a missing one) is kept with a note (action
    ``kept``). ``strict=True``: the first rejected row is an InputError. A file with no usable row
    is an InputError.
    """
    log = RejectLog(strict)
    path, fmt, rows = _read_rows(path, log)
    rows = deduplicate(path, rows, NYT, log)
    note_near_duplicates(path, rows, NYT, log)
    rejected = log.finish()
    require_rows(path, len(rows), rejected, "article")
    docs, passages = [], []
    for row in rows:
        doc_id = nyt_doc_id(row["snippet"])
        words = len(row["snippet"].split())
        docs.append(Document(doc_id, NYT_SOURCE, "", "", "news", row["snippet"],
                             {"label": row["label"], "origin": str(path), "format": fmt, **located(row),
                              "n_words": words, "n_passages": 1}))
        passages.append(Passage(f"{doc_id}#p0", doc_id, row["label"], row["snippet"], "", "",
                                {"prefix": row["prefix"], "completion": row["completion"], "file": str(path),
                                 **located(row), "n_words": words, "extra": row["extra"]}))
    return sorted(docs, key=lambda d: d.doc_id), passages, rejected
