"""Reading a cloze probe's reply (Section 3, Appendix B): the status and the guess of one answer.

The black-box mode (:func:`memaudit.probes.cloze.runner.blackbox_answers`) asks for each masked
word once and reads the reply here: ``ok`` (a guess was read), ``refusal``, ``invalid`` (no guess:
for the cloze prompt, a reply without a ``<word>`` tag) or ``error`` (no answer at all). Refusals,
invalid answers and errors count as not reconstructed and are counted per passage
(:func:`~memaudit.probes.cloze.runner.text_table`); no word is dropped.
"""

from __future__ import annotations

from memaudit.backends.base import STATUS_ERROR, STATUS_INVALID, STATUS_OK, STATUS_REFUSAL, Generation
from memaudit.backends.refusal import is_refusal
from memaudit.probes.cloze.prompts import CLOZE, declines, parse_word


def classify_reply(generation: Generation, *, style: str = CLOZE, context: str | None = None,
                   ) -> tuple[str, str | None]:
    """``(status, guess)`` of one probe reply.

    A reply from which a guess is read is ``ok``, even if the backend's text heuristic flagged it
    as a refusal ("I can't be sure, but <word>X</word>": the model answered); otherwise
    ``refusal`` when the backend or :func:`~memaudit.backends.refusal.is_refusal` says so or the
    reply declines to guess (:func:`~memaudit.probes.cloze.prompts.declines`: ``<word>unknown</word>``),
    else ``invalid`` (``<word>[MASK]</word>`` among them). A request without an answer is ``error``.
    """
    if generation.status == STATUS_ERROR:
        return STATUS_ERROR, None
    guess = parse_word(generation.text, style, context=context)
    if guess is not None:
        return STATUS_OK, guess
    if generation.status == STATUS_REFUSAL or is_refusal(generation.text) or declines(generation.text, style):
        return STATUS_REFUSAL, None
    return STATUS_INVALID, None


# why a table has no number for a model's token type: nothing it replied could be read (every reply invalid,
# refused or failed), so its zeros measure nothing
UNANSWERED = "answered no masked word of the type"


def answered(texts):
    """Per row of a text table (``cloze_<mode>_texts.csv``), the masked words that got an answer: those probed
    less the invalid, refused and failed replies (every word in logit mode, which reads the model's own ranks).
    A token type with none answered measured nothing: its scores are blank
    (:func:`~memaudit.probes.cloze.runner.document_table`), and so are its rates in the tables."""
    return texts["n_tokens"] - texts["n_invalid"] - texts["n_refusal"] - texts["n_error"]
