"""Records shared by every dataset builder and every probe.

A :class:`Document` is the unit of a membership claim (a book chapter, a news
article, a paper); a :class:`Passage` is the unit a probe reads. Document-level
scores aggregate passage scores. Probe-specific records (multiple-choice items,
prefix/continuation pairs, cloze items, knockoff sets) extend a passage through
``meta`` and are written as JSONL with the same identifying fields, so every
probe joins back to ``doc_id`` and ``label``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A passage's meta["split"] in a benchmark with a fixed split (BookMIA's first 1870 rows, the
# information-guided probes' validation split; memaudit.datasets.published): thresholds are fitted on
# the validation passages and detection is reported on the test passages. Absent: no fixed split.
VALIDATION, TEST = "validation", "test"


@dataclass
class Document:
    doc_id: str  # stable and unique across sources, e.g. "austen/emma/ch012"
    source: str  # corpus name, e.g. "austen", "reuters", "user_books"
    title: str
    author: str
    kind: str  # "book" | "news" | "paper" | "qa" (one question: question, choices, answer; never cut)
    text: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Document":
        return cls(**{k: d[k] for k in ("doc_id", "source", "title", "author", "kind", "text")},
                   meta=dict(d.get("meta") or {}))


@dataclass
class Passage:
    passage_id: str  # f"{doc_id}#p{index}"
    doc_id: str
    label: int  # 1 = member, 0 = non-member (memaudit.MEMBER / NONMEMBER)
    text: str
    title: str = ""
    author: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Passage":
        return cls(passage_id=d["passage_id"], doc_id=d["doc_id"], label=int(d["label"]),
                   text=d["text"], title=d.get("title", ""), author=d.get("author", ""),
                   meta=dict(d.get("meta") or {}))


# Records of the probes that build on passages. Each keeps passage_id/doc_id/label
# so its scores join back to documents and ground truth.


@dataclass
class MultipleChoiceItem:
    """DE-COP: the verbatim passage among paraphrases; ``answer`` indexes ``options``."""

    item_id: str
    passage_id: str
    doc_id: str
    label: int
    options: list[str]
    answer: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrefixContinuation:
    """Generate-and-compare (CopyBench literal copying, NYT-style prefix completion)."""

    item_id: str
    passage_id: str
    doc_id: str
    label: int
    prefix: str
    continuation: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClozeItem:
    """Information-guided probes: a passage with masked spans the model must restore."""

    item_id: str
    passage_id: str
    doc_id: str
    label: int
    masked_text: str
    answers: list[str]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class KnockoffSet:
    """KTD: a passage and its paraphrase knockoffs, compared through per-sample statistics."""

    item_id: str
    passage_id: str
    doc_id: str
    label: int
    original: str
    knockoffs: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
