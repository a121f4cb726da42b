"""The paper's prompts (Appendices B and C), option orderings and answer parsing."""

from __future__ import annotations

import itertools
import re
from typing import Sequence

from memaudit.backends.refusal import classify_answer

LETTERS = ("A", "B", "C", "D")

# Appendix B.1 (64- and 128-token passages), verbatim.
PARAPHRASE_PROMPT_SHORT = (
    "Generate always 3 possible paraphrases for the following text that is identified as Example A: "
    "<text>. Format your output as: Example B: <paraphrase 1> Example C: <paraphrase 2> "
    "Example D: <paraphrase 3> -Example A: {ref_text}"
)
# Appendix B.2 (256-token passages), verbatim.
PARAPHRASE_PROMPT_LONG = (
    "Rewrite this entire text (all sentences with no exception) expressing the same meaning using "
    "different words. Aim to keep the rewriting similar in length to the original text. Do it three "
    "times. The text to be rewritten is identified as <Example A>. Format your output as: "
    "Example B: <insert paraphrase B>\n\nExample C: <insert paraphrase C>\n\nExample D: "
    "<insert paraphrase D>\n\nExample A: {ref_text}"
)
# A one-paraphrase prompt for small local models, which cannot follow the three-in-one format
# (SmolLM2-135M answers B.1 with commentary); used by the ``single`` prompt style.
PARAPHRASE_PROMPT_SINGLE = (
    "Rewrite the following text using different words while keeping its meaning and its length. "
    "Output only the rewritten text.\n\nText: {ref_text}"
)

# Appendix C.2 (Table 10): the open models' system prompt, FORMAT_HINT after it. C.1 (Table 9, closed models)
# opens its one prompt with the same instruction and has no format hint (nor have the reference's ChatGPT and
# Claude scripts): see :func:`closed_model_prompt`.
SYSTEM_PROMPT = (
    "You are entering a multiple choice questions exam. You should directly answer each question by "
    "choosing the correct option. Be concise and straight to the point in your answer. Output only the "
    "letter corresponding to the correct answer."
)
FORMAT_HINT = "Format your answer as '<put correct answer here>'."


def paraphrase_prompt(text: str, length_tokens: int) -> str:
    """Appendix B: the B.2 "rewrite all sentences" prompt for 256-token passages, B.1 otherwise."""
    template = PARAPHRASE_PROMPT_LONG if length_tokens >= 256 else PARAPHRASE_PROMPT_SHORT
    return template.format(ref_text=text)


# The "Example B:" markers Appendix B asks for, case as written (upper-case "EXAMPLE B:" too): a paraphrase's
# own "see example d) below" or "for example a. k. a." is no marker (matched case-blind, it split the option).
_EXAMPLE_RE = re.compile(r"(?:^|\n|\s)[*_#\s]*(?:-\s*)?(?:Example|EXAMPLE)\s+([A-D])\s*[*_]*\s*[:.)\]-]\s*[*_]*\s*")


def parse_paraphrases(reply: str) -> list[str]:
    """The three paraphrases of a reply formatted "Example B: ... Example C: ... Example D: ...".

    Returns up to three texts in B, C, D order, empty strings for missing ones; an
    echoed "Example A" is ignored (models often repeat the original at the end).
    """
    marks = list(_EXAMPLE_RE.finditer(reply or ""))
    found: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(reply)
        letter = m.group(1)
        body = reply[m.end():end].strip().strip("<>").strip()
        if letter in "BCD" and letter not in found:
            found[letter] = body
    return [found.get(letter, "") for letter in "BCD"]


def question(title: str, author: str, kind: str) -> str:
    """Appendix C's question: books name title and author; papers (arXivTection) the title, in
    the reference code's words (``2_decop_hf.py``: 'verbatim from the arXiv paper "X"?').

    The paper prints two book variants (C.1 '"X" book by Y', C.2 '"X" by Y'); we use C.1's, the
    reference code's. A book without a known author is a "document" (memaudit's wording).
    """
    if kind == "paper":
        return f'Which of the following passages is verbatim from the arXiv paper "{title}"?'
    if not author or author == "unknown":
        return f'Which of the following passages is verbatim from the "{title}" document?'
    return f'Which of the following passages is verbatim from the "{title}" book by {author}?'


def user_prompt(title: str, author: str, kind: str, shown: Sequence[str]) -> str:
    """Appendix C user message: question, options A-D, a blank line, "Answer:" (Table 10's layout
    and the reference's ``2_decop_hf.py``; memaudit before DE-COP version 4 had no blank line)."""
    opts = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, shown))
    return f"Question: {question(title, author, kind)}\nOptions:\n{opts}\n\nAnswer:"


def system_prompt() -> str:
    """Appendix C.2's system prompt for open models, its format hint after a blank line (Table 10's
    wording; the reference code's ``DEFAULT_SYSTEM_PROMPT`` has ``'<put correct answer here>.'`` for
    Llama-2-7B and ``'<correct letter>'`` for the larger models)."""
    return f"{SYSTEM_PROMPT}\n\n{FORMAT_HINT}"


def closed_model_prompt(user: str) -> str:
    """Appendix C.1's prompt for closed (API) models, Table 9: one user turn, the instruction, a blank
    line, the question ``user`` (:func:`user_prompt`); no system prompt and no format hint."""
    return f"{SYSTEM_PROMPT}\n\n{user}"


def orderings(kind: str) -> list[tuple[int, ...]]:
    """Option orders: ``perm[k]`` is the option shown at position k (option 0 = the verbatim passage).

    ``permutations``: all 24 (the paper's default). ``latin_square``: the 4 rotations, so each
    option appears exactly once in each position (a quarter of the cost; position bias still
    cancels out in the accuracy).
    """
    if kind == "permutations":
        return list(itertools.permutations(range(4)))
    if kind == "latin_square":
        return [tuple((k + r) % 4 for k in range(4)) for r in range(4)]
    raise ValueError(f"unknown orderings {kind!r} (permutations or latin_square)")


def correct_position(perm: Sequence[int], answer: int = 0) -> int:
    return list(perm).index(answer)


# the letter alone, perhaps quoted, bracketed, starred or in the <...> the format hint asks for
_STRICT_RE = re.compile(r"^\s*[\"'(\[*<]*\s*([A-D])\s*[\"')\].:*>]*\s*$")


def parse_answer(text: str | None, *, provider_refusal: bool = False) -> tuple[str, str | None, str]:
    """``(status, letter, how)`` of a black-box answer: strict first, then lenient.

    Strict: the reply is only the letter (optionally quoted, bracketed or followed by
    ".", ")" or ":"), as the prompt asks. Lenient: :func:`memaudit.backends.refusal.classify_answer`
    (the reply opens with or states a letter). Otherwise a refusal or an invalid answer,
    which the caller counts (never read as an option).
    """
    m = _STRICT_RE.match(text or "")
    if m and not provider_refusal:
        return "ok", m.group(1), "strict"
    status, letter = classify_answer(text, LETTERS, provider_refusal=provider_refusal)
    return status, letter, ("lenient" if letter else status)
