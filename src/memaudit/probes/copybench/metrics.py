"""CopyBench's metrics, as the reference implementation (``chentong0/copy-bench``) computes them.

Literal copying (``scripts/eval_literal_copying.py``)
    ROUGE-L F1 between the first ``words`` (50) tokens of the reference and the first 50
    tokens of the output, both tokenised by ``rouge-score``'s default tokenizer with the
    Porter stemmer (lowercase alphanumeric runs). A case copies when ROUGE-L >= 0.8.
Chance ROUGE-L (beyond the paper; :func:`chance_rouge_l`)
    The same output's mean ROUGE-L against the references of *other* books: what any
    continuation in that prose scores (function words, the period's idiom). A mean ROUGE-L
    compared across models needs it: a model that writes English scores ~0.1 against any
    passage, one that writes nothing scores 0. ``excess`` = ROUGE-L - chance.
Character copying (``scripts/eval_char_copying.py``)
    A character is found when any of its names occurs in the output as an exact lowercase
    token sequence, text and name both split on non-word characters (``\\W+``). A story
    copies when >= 3 characters are found. Characters named in the prompt do not count
    (the published data excludes them; :func:`character_hits` skips any that slip through
    and says how many).
Event copying (``scripts/eval_event_copying.py``)
    A judge decides per reference event whether any chunk of the story supports it (see
    :mod:`memaudit.probes.copybench.judge`); a story copies when >= 5 events are found.
Fact recall (``scripts/eval_qa.py``)
    SQuAD-normalised token F1 and exact match of the answer found between
    ``[Output_Start]`` and ``[Output_End]`` (the whole output when the markers are absent).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Sequence

from memaudit.probes.overlap import lcs_length

LITERAL_THRESHOLD = 0.8  # ROUGE-L (the paper, after Huang et al. 2023)
EVENT_THRESHOLD = 5  # events found
CHARACTER_THRESHOLD = 3  # characters found

_NON_WORD = re.compile(r"\W+")
_ANSWER = re.compile(r"\[Output_Start\](.*)\[Output_End\]")


@lru_cache(maxsize=1)
def _rouge_tokenizer():
    from rouge_score.tokenizers import DefaultTokenizer

    return DefaultTokenizer(use_stemmer=True)


def rouge_tokens(text: str, words: int = 50) -> list[str]:
    """The first ``words`` tokens of ``text`` as rouge-score tokenises them (Porter stemmer)."""
    return _rouge_tokenizer().tokenize(text or "")[:words]


def rouge_l_f1(out: Sequence[str], ref: Sequence[str]) -> float:
    """ROUGE-L F1 of two token lists: ``2PR / (P + R)``, ``P = LCS / len(out)``, ``R = LCS / len(ref)``."""
    if not ref or not out:
        return 0.0
    lcs = lcs_length(ref, out)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(out), lcs / len(ref)
    return 2 * p * r / (p + r)


def literal_rouge_l(output: str, reference: str, *, words: int = 50) -> float:
    """ROUGE-L F1 of the first ``words`` rouge tokens of ``output`` against those of ``reference``.

    rouge-score's tokenizer is public but its LCS scorer is not: the F-measure is
    ``2PR / (P + R)`` with ``P = LCS / len(output)``, ``R = LCS / len(reference)``, the
    definition ``rouge_scorer.RougeScorer(["rougeL"]).score`` uses (a test checks they agree).
    """
    return rouge_l_f1(rouge_tokens(output, words), rouge_tokens(reference, words))


def chance_pools(item_ids: Sequence[str], books: Sequence[str], *, k: int, seed: int) -> list[list[int]]:
    """Per item, the indices of the references its chance ROUGE-L is taken over: every item of another
    book, or ``k`` of them drawn without replacement, seeded by ``seed`` and the item's id (so an item
    gets the same references on every model and decoding, and the comparison stays paired)."""
    import random

    out = []
    for item_id, book in zip(item_ids, books):
        others = [j for j, b in enumerate(books) if b != book]
        if len(others) > k:
            others = sorted(random.Random(f"{seed}:{item_id}").sample(others, k))
        out.append(others)
    return out


def chance_rouge_l(outputs: Sequence[str], references: Sequence[str], pools: Sequence[Sequence[int]], *,
                   words: int = 50) -> list[float | None]:
    """Each output's mean ROUGE-L against the references its pool names (:func:`chance_pools`);
    None where the pool is empty (a benchmark of one book)."""
    refs = [rouge_tokens(r, words) for r in references]
    out = []
    for text, pool in zip(outputs, pools):
        tokens = rouge_tokens(text, words)
        out.append(sum(rouge_l_f1(tokens, refs[j]) for j in pool) / len(pool) if pool else None)
    return out


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _NON_WORD.split(text or "") if t]


def alias_key(alias: str) -> str:
    """A name as the character matcher compares it: its lower-cased word tokens ("Jo March" = "jo-march")."""
    return " ".join(_tokens(alias))


def has_name(text_tokens: Sequence[str], names: Sequence[str]) -> bool:
    """Whether any of ``names`` occurs in ``text_tokens`` as a contiguous token sequence."""
    for name in names:
        parts = _tokens(name)
        if not parts:
            continue
        n = len(parts)
        for i in range(len(text_tokens) - n + 1):
            if list(text_tokens[i:i + n]) == parts:
                return True
    return False


def character_hits(output: str, prompt: str, characters: Sequence[Sequence[str]]) -> tuple[list[bool | None], int]:
    """Per character: found in ``output`` (``None`` when the prompt names it); and how many the prompt named."""
    out_tokens, prompt_tokens = _tokens(output), _tokens(prompt)
    hits: list[bool | None] = []
    for names in characters:
        hits.append(None if has_name(prompt_tokens, names) else has_name(out_tokens, names))
    return hits, sum(h is None for h in hits)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lowercase, no punctuation, no articles, single spaces; in Unicode NFC first
    (an answer written decomposed, e + U+0301 for "é", is the reference's composed answer)."""
    text = "".join(ch for ch in unicodedata.normalize("NFC", text).lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def has_markers(output: str) -> bool:
    """Whether the output holds an answer between ``[Output_Start]`` and ``[Output_End]``."""
    return _ANSWER.search(output or "") is not None


def extract_answer(output: str) -> str:
    match = _ANSWER.search(output or "")
    return match.group(1) if match else (output or "")


def qa_f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def qa_scores(output: str, answers: Sequence[str]) -> dict[str, float]:
    """F1 and exact match of the marked answer, the best over the reference answers (0-1)."""
    answer = extract_answer(output)
    return {"f1": max(qa_f1(answer, a) for a in answers),
            "em": float(max(normalize_answer(answer) == normalize_answer(a) for a in answers))}
