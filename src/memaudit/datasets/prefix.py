"""Prefix/continuation pairs for prefix probing (NYT Exhibit J style; CopyBench literal copying).

Each passage is cut at a word boundary into a prefix the model is shown and the
continuation it should not be able to reproduce unless it memorised the text.
The information-guided probes paper gives the first 50 words of a passage as the
prefix (Appendix E); CopyBench gives 200 words and scores the next 50. Both are
``prefix_words``/``continuation_words`` settings here.

A passage that carries its published prefix and completion (the NYT Exhibit J set's
``Prefix``/``Completion``, in ``meta``) is probed with them, as the paper does for the NYT
articles ("we use prefixes provided in Exhibit-J of the lawsuit", Section 4.2): the whole
published prefix as published (line breaks and spacing kept, its ends stripped), and the first
``continuation_words`` words of the completion. A row whose
prefix or completion is empty is skipped (the loader notes it as kept for the cloze probe).
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

from memaudit.datasets.types import Passage, PrefixContinuation
from memaudit.errors import InputError

log = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")  # a word of prefix_words and continuation_words: what str.split() splits off


def word_spans(text: str) -> list[tuple[int, int]]:
    """Where each word of ``text`` (as ``str.split()`` counts them) starts and ends: a prefix cut at a word
    is ``text[:end]``, the text as written with its line breaks (CopyBench's built literal items cut so too)."""
    return [m.span() for m in _WORD.finditer(text)]


def _scorable(words: list[str]) -> bool:
    """Whether a continuation has a word the prefix probe scores: its scores count lowercased ASCII letters
    and digits, as ``rouge_score`` does (:func:`memaudit.probes.prefix.runner.words`)."""
    return any(ch.isascii() and ch.isalnum() for word in words for ch in word)


def prefix_items(passages: Iterable[Passage], *, prefix_words: int, continuation_words: int,
                 min_continuation_words: int = 5) -> list[PrefixContinuation]:
    """One item per passage long enough to leave ``min_continuation_words`` after the prefix
    (``continuation_words`` where that is fewer: a continuation as long as asked is never too short).

    A passage shorter than ``prefix_words + continuation_words`` keeps its full
    prefix and a shorter continuation (recorded in ``meta``); shorter than
    ``prefix_words + min_continuation_words`` it is skipped, and so is one whose continuation has
    no ASCII letter or digit (text in another script: nothing to score, where the probe job
    stopped on it after generating), and one whose published prefix is empty or whose published
    completion is that short (``prefix_words`` does not apply to it); the log counts each.
    """
    need = min(min_continuation_words, continuation_words)
    items, n_skipped, n_published, n_unscorable = [], 0, 0, 0
    for p in passages:
        if "prefix" in p.meta and "completion" in p.meta:  # a published prefix (NYT Exhibit J)
            # as published, breaks and spacing kept (the loader strips its ends): what the evidence showed a model
            source, prefix = "published", str(p.meta["prefix"] or "").strip()
            rest = str(p.meta["completion"] or "").split()
            if not prefix or len(rest) < need:
                n_published += 1
                continue
        else:
            spans = word_spans(p.text)
            if len(spans) < prefix_words + need:
                n_skipped += 1
                continue
            # the text as written up to the end of the last prefix word: a model read its paragraph breaks
            # in training, and one shown them as spaces continued the text it had memorised far less often
            source, prefix = "passage", p.text[:spans[prefix_words - 1][1]]
            rest = [p.text[a:b] for a, b in spans[prefix_words:]]
        continuation = rest[:continuation_words]
        if not _scorable(continuation):
            n_unscorable += 1
            continue
        items.append(PrefixContinuation(
            item_id=f"{p.passage_id}#prefix", passage_id=p.passage_id, doc_id=p.doc_id, label=p.label,
            prefix=prefix, continuation=" ".join(continuation),
            meta={"title": p.title, "author": p.author, "prefix_source": source,
                  "prefix_words": len(prefix.split()), "continuation_words": len(continuation)}))
    published = (f", {n_published} with an empty published prefix or a published completion (NYT Exhibit J) of "
                 f"fewer than {need} words") if n_published else ""
    unscorable = (f", {n_unscorable} with no ASCII letter or digit in the continuation (the scores count ASCII "
                  f"words, as rouge_score does)") if n_unscorable else ""
    if not items and n_published:  # prefix_words does not apply to a published prefix
        raise InputError(f"no passage can be prefix-probed ({n_skipped} shorter than {prefix_words + need} words"
                         f"{published}{unscorable})")
    if not items:
        raise InputError(f"no passage has the {prefix_words + need} words a prefix probe needs ({n_skipped} too "
                         f"short{unscorable}): lower probes.prefix.prefix_words or use longer passages")
    n_left = n_skipped + n_published + n_unscorable
    if n_left:
        log.info("%d of %d passages skipped: %d shorter than %d words%s%s", n_left, len(items) + n_left, n_skipped,
                 prefix_words + need, published, unscorable)
    return items
