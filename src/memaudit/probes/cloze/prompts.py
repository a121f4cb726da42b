"""The information-guided probes' prompts (Appendix B) and the parsing of their answers.

Prompts, as printed in Appendix B of the paper (text and line breaks read from the
authors' PDF, ``Memorization_NAACL2025.pdf`` in ``AbhilashaRavichander/information-probing``:
the prompt boxes are set with 8 pt line spacing, a blank line where the spacing doubles):

``cloze`` (fiction and news, after Chang et al. 2023's name cloze)
    the instruction, a blank line, ``Example:``, the two in-context examples (``Input:`` and
    ``Output: <word>...</word>`` on consecutive lines, a blank line between examples), then
    ``Input: <context>``. The paper's box ends at ``Input:``; we add a final ``Output:`` line
    as in Chang et al.'s template, which the paper adapts (same examples, ``<word>`` for
    ``<name>``): the examples establish the Input/Output pattern, and a base model prompted
    in plain text then answers with the tag. The examples are unquoted, as the paper prints
    them (Chang et al. quote them).
``one_word`` (dataset contamination, after Deng et al. 2024)
    ``Complete the sentence in one word:`` / ``Input: <context>`` / ``Reply the answer only.``,
    one line each, no tags asked for.
knowledge filters (two prompts)
    ``What is the word that fills in the [MASK] token in the following passage?`` and
    ``What are 100 words that can fill in the [MASK] token in the following passage?``,
    each followed by ``Passage: <context>`` on the next line.

Matching (:func:`normalise`, :func:`matches`): case-insensitive; Unicode compatibility forms
and diacritics folded (``Zoë`` = ``Zoe``); surrounding quotes and punctuation, a possessive
``'s`` and inner punctuation removed (``O'Brien`` = ``OBrien``, ``U.S.`` = ``US``) except
between two digits (``1/2`` and ``19-20`` are not ``12`` and ``1920``); numbers
compared as numbers (``1,000`` = ``1000`` = ``1000.0``; the number words zero to twenty and
the tens = their digits). Plural-insensitive matching is *off* by default: the paper reports
exact-match rates (Table 4), and whether a guess is evidence of memorisation should not
depend on a lenient rule; ``plural=True`` accepts ``dog`` for ``dogs`` and vice versa.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation

MASK = "[MASK]"
CLOZE = "cloze"
ONE_WORD = "one_word"
STYLES = (CLOZE, ONE_WORD)

# Appendix B, verbatim (wrapped lines of the printed box joined).
CLOZE_INSTRUCTION = (
    "You have seen the following passage in your training data. What is the word that fills in the [MASK] "
    "token in it? This word is a noun, verb, adjective, or adverb (not a pronoun, preposition or conjunction). "
    "You must make a guess, even if you are uncertain."
)
CLOZE_EXAMPLES = (
    ("Stay gold, [MASK], stay gold.", "Ponyboy"),
    ("The door opened, and [MASK], dressed and hatted, entered with a cup of tea.", "Gerty"),
)
CLOZE_TEMPLATE = (
    CLOZE_INSTRUCTION + "\n\nExample:\n"
    + "\n\n".join(f"Input: {text}\nOutput: <word>{word}</word>" for text, word in CLOZE_EXAMPLES)
    + "\n\nInput: {context}\nOutput:"
)
ONE_WORD_TEMPLATE = "Complete the sentence in one word:\nInput: {context}\nReply the answer only."
FILTER_WORD_TEMPLATE = "What is the word that fills in the [MASK] token in the following passage?\nPassage: {context}"
FILTER_LIST_TEMPLATE = (
    "What are 100 words that can fill in the [MASK] token in the following passage?\nPassage: {context}"
)
LIST_SIZE = 100


def _fill(template: str, context: str) -> str:
    # str.replace, not str.format: a passage may contain braces.
    return template.replace("{context}", context)


def cloze_prompt(context: str) -> str:
    """The probe prompt for fiction and news (Appendix B, after Chang et al. 2023)."""
    return _fill(CLOZE_TEMPLATE, context)


def one_word_prompt(context: str) -> str:
    """The probe prompt for test-set contamination (Appendix B, after Deng et al. 2024)."""
    return _fill(ONE_WORD_TEMPLATE, context)


def probe_prompt(context: str, style: str = CLOZE) -> str:
    """The probe prompt of ``style`` (``cloze`` or ``one_word``) for a masked context."""
    if style == CLOZE:
        return cloze_prompt(context)
    if style == ONE_WORD:
        return one_word_prompt(context)
    raise ValueError(f"unknown cloze prompt style {style!r} (known: {', '.join(STYLES)})")


def filter_word_prompt(context: str) -> str:
    """Knowledge filter prompt 1 (Appendix B): the single word that fills the mask."""
    return _fill(FILTER_WORD_TEMPLATE, context)


def filter_list_prompt(context: str) -> str:
    """Knowledge filter prompt 2 (Appendix B): 100 words that can fill the mask."""
    return _fill(FILTER_LIST_TEMPLATE, context)


# ----------------------------------------------------------------------------- parsing

_QUOTES = "\"'`“”‘’«»*_"
_EDGE = re.compile(rf"^[\s{re.escape(_QUOTES)}\[\](){{}}<>]+|[\s{re.escape(_QUOTES)}\[\](){{}}<>.,;:!?…]+$")
# a closed tag's content holds no opening tag: in "<word>Frodo<word> ... <word>Sam</word>" it is Sam's
_TAG = re.compile(r"<\s*word\s*>((?:(?!<\s*word\s*>).)*?)<\s*/\s*word\s*>", re.IGNORECASE | re.DOTALL)
_OPENER = re.compile(r"<\s*word\s*>", re.IGNORECASE)
# A tag not closed as asked, as models often write it: closed by a second opening tag or a backslash
# ("<word>Frodo<word>", "<word>Frodo<\\word>"), cut (a stop string, the token limit: nothing of the closing
# tag left, or a beginning of it, "<", "</", "</wo", "</word" without its ">"), or ended by the line.
_LOOSE_TAG = re.compile(r"<\s*word\s*>([^<\n]*)"
                        r"(?:<\s*[/\\]?\s*word\s*>|<\s*(?:[/\\]\s*(?:w(?:o(?:r(?:d\s*)?)?)?)?)?$|\n|$)", re.IGNORECASE)
_ANSWER_PREFIX = re.compile(r"^\s*(?:(?:the\s+)?(?:answer|output|word)\s*(?:is|:)\s*)", re.IGNORECASE)
# an opening quote starts no word's inside: the apostrophe of "It's" opens nothing
_QUOTED = re.compile(r"(?<!\w)[\"“'‘*]+([^\"”'’*\n]{1,40}?)[\"”'’*]+")
_IS_WORD = re.compile(r"\bis\s*:?\s+([^\s.,;!?]+)\s*[.!]?\s*$", re.IGNORECASE)


def _clean(text: str) -> str | None:
    if MASK.casefold() in text.casefold():
        return None
    word = _EDGE.sub("", text.strip())
    return word or None


def _guess(text: str) -> str | None:
    """:func:`_clean`, and ``None`` for a non-answer (:data:`NON_ANSWERS`)."""
    word = _clean(text)
    return None if word is None or is_non_answer(word) else word


def _tag_contents(reply: str) -> list[str]:
    """What the reply's tags hold: every closed tag's content, then that of the one tag left unclosed
    (:data:`_LOOSE_TAG`) where it is unambiguous: no other unclosed opening tag in the reply, and one word."""
    contents = [m.group(1) for m in _TAG.finditer(reply)]
    rest = _TAG.sub(" ", reply)
    m = _LOOSE_TAG.search(rest)
    if m and not _OPENER.search(rest, 0, m.start()) and not _OPENER.search(rest, m.end()):
        word = _clean(m.group(1))
        if word is not None and len(word.split()) == 1:
            contents.append(m.group(1))
    return contents


def tagged_word(reply: str | None) -> str | None:
    """The content of the first ``<word>...</word>`` tag that holds a word (case and spacing in the
    tag tolerated), cleaned of surrounding quotes, brackets and punctuation; after the closed ones,
    the one tag left unclosed when it holds one word (:func:`_tag_contents`: ``<word>Frodo<word>``,
    ``<word>Frodo<\\word>``, ``<word>Frodo`` then a line break, a closing tag cut off). An empty tag,
    ``[MASK]`` or a non-answer (``unknown``, :data:`NON_ANSWERS`) is passed over: a model that opens
    with ``<word></word>`` and then answers has answered. ``None`` when there is no tag or none holds
    a word."""
    if not reply:
        return None
    return next((w for content in _tag_contents(reply) if (w := _guess(content)) is not None), None)


def _tag(reply: str | None) -> re.Match | None:
    return _OPENER.search(reply) if reply else None


def declines(reply: str | None, style: str = CLOZE) -> bool:
    """Whether a reply that gives no word declines to guess: its tag holds a non-answer
    (:data:`NON_ANSWERS`), or, for a prompt that asks for a bare word (``one_word``, the knowledge
    filter's), its first line is one. The probe prompt demands a guess, so such a reply is a
    refusal, not an invalid answer (:func:`memaudit.probes.cloze.scoring.classify_reply`)."""
    if not reply:
        return False
    if _tag(reply) or style == CLOZE:
        return any(is_non_answer(_clean(c) or "") for c in _tag_contents(reply))
    first = next((line for line in reply.strip().splitlines() if line.strip()), "")
    return is_non_answer(_ANSWER_PREFIX.sub("", first))


def _echo_fill(reply: str, context: str) -> str | None:
    """The word a reply puts where the context has ``[MASK]``, when it echoes the sentence."""
    before, _, after = context.partition(MASK)
    left = re.findall(r"\w+", before)[-3:]
    right = re.findall(r"\w+", after)[:3]
    if not left and not right:
        return None
    gap = r"\W+"
    pattern = (gap.join(map(re.escape, left)) + gap if left else "") + r"(\w[\w'’-]*)" + \
        (gap + gap.join(map(re.escape, right)) if right else "")
    m = re.search(pattern, reply, re.IGNORECASE)
    return m.group(1) if m else None


def parse_word(reply: str | None, style: str = CLOZE, *, context: str | None = None) -> str | None:
    """The guessed word in a probe reply, ``None`` when the reply gives none (an invalid answer).

    ``cloze``: the first ``<word>`` tag (:func:`tagged_word`); a reply without one is invalid,
    whatever it says. ``one_word`` (the contamination prompt asks for a bare word): a tag if
    there is one; else the first line without an ``Answer:``/``The answer is`` opening, if it is
    a single word; else, given ``context``, the word the reply puts at the mask when it echoes
    the masked sentence.
    """
    if style not in STYLES:
        raise ValueError(f"unknown cloze prompt style {style!r} (known: {', '.join(STYLES)})")
    if style == CLOZE or not reply or _tag(reply):
        return tagged_word(reply)
    first = next((line for line in reply.strip().splitlines() if line.strip()), "")
    if declines(first, style):
        return None
    bare = _guess(_ANSWER_PREFIX.sub("", first))
    if bare is not None and len(bare.split()) == 1:
        return bare
    return _echo_fill(reply, context) if context and MASK in context else None


def parse_filter_word(reply: str | None, context: str | None = None) -> str | None:
    """The word a knowledge filter model gives for prompt 1, which asks for no format.

    In order: a ``<word>`` tag; a one-word reply (after an ``Answer:`` opening); the first quoted
    or bold word of the first line that is not ``[MASK]`` (``The word is "Frodo".``); a first
    line ending ``... is Frodo.``; where the first line is a lead-in ending with a colon (``The
    word is:``), the same read of the next line, as chat models set their answer apart; given the
    masked ``context``, the word a reply that writes the passage out puts at the mask (instruction-
    tuned models often answer so). ``None`` when none applies.
    """
    if not reply or not reply.strip():
        return None
    if _tag(reply):
        return tagged_word(reply)
    lines = [line for line in reply.strip().splitlines() if line.strip()]
    if declines(lines[0], ONE_WORD):
        return None
    word = _one_word_of(lines[0])
    if word is None and lines[0].rstrip().endswith(":") and len(lines) > 1:
        word = _one_word_of(lines[1])
    if word is None and context and MASK in context:
        word = _echo_fill(reply, context)
    return word


def _one_word_of(line: str) -> str | None:
    """:func:`parse_filter_word`'s read of one line: bare, quoted or ``... is X``."""
    bare = _guess(_ANSWER_PREFIX.sub("", line))
    if bare is not None and len(bare.split()) == 1:
        return bare
    for m in _QUOTED.finditer(line):
        quoted = _guess(m.group(1))
        if quoted is not None and len(quoted.split()) == 1:
            return quoted
    m = _IS_WORD.search(line)
    return _guess(m.group(1)) if m else None


# a list's marker: a bullet, "1." "(1)" "1)" "1:" "[1]", bold "**1.**", "#1", "1 -" / "1 –", "a."; a number
# with none of those after it ("1984") is an entry, not a marker
_BULLET = re.compile(r"^\s*(?:[-*•·]|\**\(?\d{1,3}[.):\]]\**|#\d{1,3}[.):]?|\d{1,3}\s+[-–—]|[a-z][.)])\s+",
                     re.IGNORECASE)
_NUMBERED_INLINE = re.compile(r"(?:^|\s)\d{1,3}[.)]\s+")
# an entry separator: a semicolon, or a comma that is no thousands separator (a digit before it, a group of
# exactly three digits after it: "2,500" is one entry, "5,10" two)
_LIST_SEPARATOR = re.compile(r";|(?<!\d),|,(?!\d{3}(?!\d))|" + _NUMBERED_INLINE.pattern)


def parse_word_list(reply: str | None, limit: int = LIST_SIZE) -> list[str]:
    """The words a knowledge filter model lists for prompt 2, in order, duplicates removed.

    Entries are separated by new lines, commas (not a number's thousands separators: ``2,500``),
    semicolons or inline numbering (``1. a 2. b``);
    bullets, numbering, quotes and a parenthesised gloss (``Frodo (a hobbit)``) are removed.
    Headers (an entry ending with ``:``) and prose (entries of more than four words) are skipped.
    At most ``limit`` entries (the prompt asks for 100) are kept.
    """
    if not reply:
        return []
    out: list[str] = []
    seen: set[str] = set()
    for line in reply.splitlines():
        if line.rstrip().endswith(":"):
            continue
        for part in _LIST_SEPARATOR.split(line):
            entry = _clean(re.sub(r"\([^)]*\)", " ", _BULLET.sub("", part or "")))
            if entry is None or len(entry.split()) > 4:
                continue
            key = normalise(entry)
            if key and key not in seen:
                seen.add(key)
                out.append(entry)
            if len(out) >= limit:
                return out
    return out


# ----------------------------------------------------------------------------- matching

_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update({w: str(10 * i) for i, w in enumerate(
    "thirty forty fifty sixty seventy eighty ninety".split(), start=3)})
_NUMERIC = re.compile(r"^[$£€]?[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?%?$")


def _as_number(text: str) -> str | None:
    if text in _NUMBER_WORDS:
        return _NUMBER_WORDS[text]
    if not _NUMERIC.match(text) or not any(c.isdigit() for c in text):
        return None
    try:
        value = Decimal(text.strip("$£€%").replace(",", ""))
    except InvalidOperation:
        return None
    return format(value.normalize(), "f") if value == value.to_integral() else str(value.normalize())


def normalise(word: str | None) -> str:
    """The form in which a guess and the true word are compared (rules in the module docstring)."""
    if not word:
        return ""
    text = unicodedata.normalize("NFKD", word)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold().replace("’", "'").strip()
    text = _EDGE.sub("", text)
    number = _as_number(text)
    if number is not None:
        return number
    text = re.sub(r"'s$", "", text)
    # punctuation goes ("U.S.", "co-op"), but not between two digits: "1/2", "1-2" and "19-20" are not
    # the numbers 12 and 1920
    return re.sub(r"(?<!\d)[\W_]+|[\W_]+(?!\d)", "", text)


# Tag contents (or bare replies) that decline to guess, compared after normalise(): "unknown" is no guess at
# the word, so it is not scored as a wrong one. Phrases only, and "unknown": candidates are nouns, names and
# numbers, and none of these is one (a true word "unknown" would be missed).
NON_ANSWERS = frozenset(normalise(p) for p in (
    "unknown", "not known", "I don't know", "I do not know", "don't know", "dunno", "no idea", "I have no idea",
    "not sure", "I'm not sure", "I am not sure", "unsure", "uncertain", "can't tell", "cannot tell",
    "can't say", "cannot say", "can't determine", "cannot determine", "cannot be determined", "no answer",
    "n/a", "none"))


def is_non_answer(text: str | None) -> bool:
    """Whether ``text`` is a non-answer phrase (:data:`NON_ANSWERS`)."""
    return bool(text) and normalise(text) in NON_ANSWERS


def _singular(word: str) -> str:
    if len(word) > 3 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith(("ses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    if len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def matches(guess: str | None, truth: str, *, plural: bool = False) -> bool:
    """Whether a guess reconstructs the true word: equal after :func:`normalise`.

    ``plural=True`` also accepts a guess that differs from the truth only in a regular
    plural ending (``dog``/``dogs``, ``city``/``cities``, ``box``/``boxes``).
    """
    g, t = normalise(guess), normalise(truth)
    if not g or not t:
        return False
    if g == t:
        return True
    return plural and not g.isdigit() and _singular(g) == _singular(t)


def listed(words: list[str], truth: str, *, plural: bool = False) -> bool:
    """Whether the true word is among a filter model's listed words (an entry of several words
    counts when one of its words matches)."""
    return any(matches(entry, truth, plural=plural) or
               any(matches(part, truth, plural=plural) for part in entry.split())
               for entry in words)
