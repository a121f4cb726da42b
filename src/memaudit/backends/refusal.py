"""Refusals, invalid answers and their rates.

A model that declines to quote a book ("I can't provide verbatim copyrighted
text...") has not shown that it does not know the text; a probe that scored the
refusal as a wrong answer would bias the audit. Refusals are therefore detected
and recorded as their own outcome, and so are answers a probe cannot parse (a
DE-COP reply with no option letter): both rates appear next to the scores.

Detection reads only the opening of an answer (:data:`REFUSAL_WINDOW`
characters): a refusal comes first, while a continuation may well *contain* a
phrase like "cannot provide" later on. Providers' own signals count too: an
OpenAI ``finish_reason`` of ``content_filter`` or a ``refusal`` message, an
Anthropic ``stop_reason`` of ``refusal``, and an HTTP 400 that declines a flagged
prompt (error code ``invalid_prompt`` or Azure's ``content_filter``:
:data:`memaudit.backends.api.REFUSAL_ERROR_CODES`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

from memaudit.backends.base import STATUS_ERROR, STATUS_INVALID, STATUS_OK, STATUS_REFUSAL, STATUSES

REFUSAL_WINDOW = 400

_NOT = r"(?:can(?:'|’)?t|cannot|can not|won(?:'|’)t|will not|(?:am|'m|’m) (?:unable|not able) to|unable to|not able to)"
_ACTS = (r"(?:help(?! but)|assist|provide|share|reproduce|comply|fulfil+|continue|complete|generate|quote|"
         r"recite|output|write|print|type out|give you|do that|repeat)")
_REFUSAL_PATTERNS = [
    # "I'm sorry, but I can't ...", "I am afraid I cannot ...", "I apologize, but I cannot ..."
    rf"\bI(?:(?:'|’| a)m (?:sorry|afraid)| apologi[sz]e)\b[^.?!]{{0,80}}?\b{_NOT}",
    # an answer that opens with the refusal: "I can't provide that.", "I won't reproduce ..."
    rf"^\W*(?:sorry[,.!]?\s*)?(?:but\s+)?I\s+{_NOT}\s+(?:\w+\s+){{0,2}}?{_ACTS}\b",
    # "... cannot reproduce/quote ... verbatim / copyrighted / word for word / the full text"
    rf"\b{_NOT}\s+(?:\w+\s+){{0,2}}?{_ACTS}\b[^.?!]{{0,80}}?(?:verbatim|copyright|word[- ]for[- ]word|"
    r"exact (?:text|wording|words|passage)|full text|lyrics)",
    # "Due to copyright restrictions, I cannot ..."
    rf"\bcopyright(?:ed)?\b[^.?!]{{0,60}}?\bI\s+{_NOT}",
    r"^\W*As an AI(?: language model)?\b[^.?!]{0,60}?\b(?:can(?:'|’)?t|cannot|unable|not able)\b",
]
_REFUSAL_RE = re.compile("|".join(f"(?:{p})" for p in _REFUSAL_PATTERNS), re.IGNORECASE)


def is_refusal(text: str | None, *, provider_signal: bool = False) -> bool:
    """True when the provider flagged a refusal or the answer opens with one."""
    if provider_signal:
        return True
    if not text:
        return False
    return _REFUSAL_RE.search(text[:REFUSAL_WINDOW]) is not None


# a dash after the letter only where a space follows ("D - the ..."): "A-list" is a word
_CHOICE_START = r"^[\s*_`\"'(\[]*(?:option\s+|answer\s*:?\s*)?\(?({letters})\s*(?:[.):\]*_`]|[-–—](?=\s)|$|\n)"
_CHOICE_STATED = r"\b(?:answer|option|choice)(?:\s+is)?\s*:?\s*\(?\**({letters})\b(?![a-z'’])"
# "The verbatim passage is D.", "Passage A": the letter as written, so "the passage a friend wrote" names none
_PASSAGE_STATED = r"\bpassage(?:\s+is)?\s*:?\s*\(?\**((?-i:{letters}))\b(?![a-z'’])"


def parse_choice(text: str | None, letters: Sequence[str] = ("A", "B", "C", "D")) -> str | None:
    """The option letter an answer picks, or ``None`` when it picks none or several.

    Accepted: an answer that opens with the letter (``"B"``, ``"(B)"``, ``"**B**."``, ``"D - the ..."``,
    ``"Answer: B"``) or one that states it (``"The answer is B"``, ``"option B"``, ``"The verbatim
    passage is D"``, ``"Passage A"``). ``"A passage ..."`` opens with an article, not a choice, and is
    not read as ``A``; an answer that states two letters (``"A or B"``) picks none.
    """
    if not text:
        return None
    alt = "|".join(re.escape(x) for x in letters)
    start = re.search(_CHOICE_START.format(letters=alt), text, re.IGNORECASE)
    if start:
        return _canonical(start.group(1), letters)
    stated = {_canonical(m.group(1), letters) for pattern in (_CHOICE_STATED, _PASSAGE_STATED)
              for m in re.finditer(pattern.format(letters=alt), text, re.IGNORECASE)}
    return stated.pop() if len(stated) == 1 else None


def _canonical(found: str, letters: Sequence[str]) -> str:
    return next(x for x in letters if x.lower() == found.lower())


def classify_answer(text: str | None, letters: Sequence[str] = ("A", "B", "C", "D"), *,
                    provider_refusal: bool = False) -> tuple[str, str | None]:
    """``(status, choice)`` of a multiple-choice answer: ok with the letter, refusal, or invalid."""
    if is_refusal(text, provider_signal=provider_refusal):
        return STATUS_REFUSAL, None
    choice = parse_choice(text, letters)
    return (STATUS_OK, choice) if choice is not None else (STATUS_INVALID, None)


def outcome_rates(statuses: Iterable[str]) -> dict:
    """Counts and rates of each outcome: ``n``, ``n_ok`` ... ``refusal_rate``, ``invalid_rate``, ``error_rate``.

    Rates are over all requests (``n``); an empty input gives rates of ``nan``.
    """
    counts = Counter(statuses)
    unknown = set(counts) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown outcome status(es): {', '.join(sorted(unknown))}")
    n = sum(counts.values())
    out: dict = {"n": n}
    for status in (STATUS_OK, STATUS_REFUSAL, STATUS_INVALID, STATUS_ERROR):
        out[f"n_{status}"] = counts.get(status, 0)
    for status in (STATUS_REFUSAL, STATUS_INVALID, STATUS_ERROR):
        out[f"{status}_rate"] = counts.get(status, 0) / n if n else float("nan")
    return out
