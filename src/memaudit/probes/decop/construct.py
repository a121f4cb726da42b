"""DE-COP passages from a benchmark's documents (books and papers: the ``user_books`` source reads
.txt, .epub and .pdf files, :mod:`memaudit.datasets.sources`), and the calibration split.

Passages of about 64, 128 or 256 tokens (BookTection's small/medium/large), made
of whole sentences and ending with punctuation (Section 3), cleaned of markup, a
configurable number per document, chosen deterministically from a seed.
Lengths are counted in words (``tokens / 1.33``, the usual English BPE ratio), so a
passage's size does not depend on which model is later probed.
"""

from __future__ import annotations

import random
import re
from typing import Sequence

from memaudit import NONMEMBER
from memaudit.datasets.text import make_passages
from memaudit.errors import InputError

TOKENS_PER_WORD = 1.33
LENGTH_NAMES = {64: "small", 128: "medium", 256: "large"}
ENDS_WITH_PUNCT = re.compile(r"[.!?;:][\"'\u201d\u2019)\]]*$")


def words_for_tokens(tokens: int) -> int:
    return max(1, round(tokens / TOKENS_PER_WORD))


def passages_of(text: str, length_tokens: int, n: int | None, *, seed: int | str, doc_id: str) -> list[str]:
    """Up to ``n`` sentence-aligned passages of ~``length_tokens`` tokens ending with punctuation,
    drawn without replacement (seeded by document and length) and returned in text order."""
    words = words_for_tokens(length_tokens)
    # make_passages may end with a shorter remainder: only full-size passages are kept
    candidates = [p for p in make_passages(text, words)
                  if ENDS_WITH_PUNCT.search(p.strip()) and len(p.split()) >= words]
    if n is None or n >= len(candidates):
        return candidates
    rng = random.Random(f"{seed}:{doc_id}:{length_tokens}")
    keep = sorted(rng.sample(range(len(candidates)), n))
    return [candidates[i] for i in keep]


def select_documents(docs: Sequence[dict], *, n_documents: int | None, calibration_documents: int,
                     seed: int | str, where: str = "documents") -> dict[str, str]:
    """``doc_id -> role``: ``calibrate`` for clean documents held out for Algorithm 1, ``evaluate`` for
    the rest (at most ``n_documents``, half members and half non-members when both exist).

    The calibration documents are disjoint from the evaluated ones (Section 4.1: "distinct from
    those used to establish the average baseline performance").
    """
    rng = random.Random(f"{seed}:decop-documents")
    ids = sorted(d["doc_id"] for d in docs)
    label = {d["doc_id"]: int(d["meta"]["label"]) for d in docs}
    clean = [i for i in ids if label[i] == NONMEMBER]
    if calibration_documents >= len(clean):
        raise InputError(f"{where}: probes.decop.calibration_documents={calibration_documents} leaves no clean "
                         f"document to evaluate (only {len(clean)} clean documents); give this benchmark fewer "
                         f"(calibration_documents: {{default: N, <benchmark>: n}}, 0 for none)")
    calib = set(rng.sample(clean, calibration_documents))
    rest = [i for i in ids if i not in calib]
    if n_documents is not None and n_documents < len(rest):
        members = [i for i in rest if label[i] != NONMEMBER]
        nonmembers = [i for i in rest if label[i] == NONMEMBER]
        k = min(n_documents // 2, len(members), len(nonmembers))
        picked = rng.sample(members, k) + rng.sample(nonmembers, k)
        others = [i for i in rest if i not in set(picked)]
        picked += rng.sample(others, n_documents - len(picked))
        rest = picked
    roles = {i: "calibrate" for i in calib}
    roles.update({i: "evaluate" for i in rest})
    return dict(sorted(roles.items()))
