"""CopyBench's published files (Chen et al., 2024; reference repository ``chentong0/copy-bench``).

Data (``data/`` in the repository): JSON arrays, byte for byte what ``json.dumps(records,
indent=2)`` writes (ASCII with ``\\u`` escapes, no trailing newline), one object per prompt:

- ``data.literal.json`` (Section 3.2, literal copying; 758 items, 16 BookMIA books):
  ``{id, title, input, reference}``; ``input`` is the ~200-word prefix, ``reference`` the
  next ~50 words.
- ``data.nonliteral.json`` (Section 3.2 and A.1, non-literal copying; 590 items, 118 books x 5
  story beginnings): ``{id, title, reference_events, reference_characters, input}``;
  ``input`` is one of the first five events, used as the story beginning, ``reference_events``
  the book's other events (strings), ``reference_characters`` one list of aliases per character.
- ``data.qa.json`` (Section 3.3, fact recall; 589 items): ``{id, title, input, reference}``;
  ``reference`` is the answer, one string.

Prompts (``prompts/``; Section A.2, Figures 5-7): one JSON object per template, ``{tag,
system, enable_system, instruction, demo_sep, demo_prompt, task_prompt, demos}`` with
``${input}``/``${output}`` placeholders; see :class:`PromptTemplate`.

Published-data policy: a record the loader cannot use is skipped, never the whole file, and
reported as a :class:`Rejected` row naming the file, the line where the record starts (1-based,
as an editor shows it), the key, a short repr of the value and the reason; ``strict=True`` turns
the first one into an :class:`~memaudit.errors.InputError`. A file that cannot be read as a JSON
array at all is always a one-line :class:`~memaudit.errors.InputError` naming the file. The files
carry no membership labels (every book is presumed seen in training): ``label`` stays ``None``
for the caller to set.
"""

from __future__ import annotations

import functools
import json
import random
import re
import string
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pandas as pd

from memaudit.errors import InputError
from memaudit.io import write_csv
from memaudit.probes.copybench.metrics import alias_key, normalize_answer, rouge_tokens

DATA_FILES = {"literal": "data.literal.json", "nonliteral": "data.nonliteral.json", "qa": "data.qa.json"}
PROMPT_FILES = {
    "literal": ("prompts.literal.format1.json", "prompts.literal.format2.json", "prompts.literal.format3.json"),
    "nonliteral": ("prompts.nonliteral.format1.json", "prompts.nonliteral.format2.json",
                   "prompts.nonliteral.format3.json"),
    "qa": ("prompts.qa.format1.json",),
}
# scripts/generate.py: --shots defaults to 1 and demonstrations are drawn with random.sample from
# the module-level generator seeded with 42, per item in file order. Section A.2 says four.
REFERENCE_DEFAULT_SHOTS = 1
PAPER_SHOTS = 4
REFERENCE_DEMO_SEED = 42

# element: a JSON array's element (0-based) for a set given as one (empty otherwise): a one-line array
# (DataFrame.to_json(orient="records")) puts every record on line 1
REJECT_COLUMNS = ("file", "line", "element", "key", "value", "reason", "action")
_VALUE_CHARS = 60
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_PROMPT_STRINGS = ("tag", "system", "instruction", "demo_sep", "demo_prompt", "task_prompt")
# JSON's "\\ud800" escape decodes to a lone surrogate, which no UTF-8 writer or tokenizer takes (a pair decodes
# to one character): a record holding one would stop the items rule, or MemFree's tokenizer, with a traceback
_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONObject(dict):
    """A decoded JSON object that keeps, in ``repeated``, every value of a key its text gives more
    than once (``{key: [values in order]}``): JSON allows that, and a plain dict keeps the last value
    and drops the others silently."""

    repeated: dict[str, list[Any]] = {}


def json_object(pairs: list[tuple[str, Any]]) -> JSONObject:
    """``object_pairs_hook`` of the loaders' decoders: the object, its repeated keys noted."""
    record = JSONObject(pairs)
    if len(record) < len(pairs):
        values: dict[str, list[Any]] = {}
        for key, value in pairs:
            values.setdefault(key, []).append(value)
        record.repeated = {key: found for key, found in values.items() if len(found) > 1}
    return record


# The published loaders' one decoder (memaudit.datasets.rejects reads JSON lines with it too). Non-strict:
# a raw control character inside a string (a stray NUL byte) reaches the record checks and costs that
# record only, not the whole file; a key given twice is kept for the checks (json_object).
RECORD_DECODER = json.JSONDecoder(strict=False, object_pairs_hook=json_object)


class _Record:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LiteralItem(_Record):
    """One ``data.literal.json`` record: ``input`` -> ``prefix``, ``reference`` -> ``reference``."""

    item_id: str
    title: str
    prefix: str
    reference: str
    label: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class NonLiteralItem(_Record):
    """One ``data.nonliteral.json`` record: ``input`` -> ``beginning``; events and alias lists as published."""

    item_id: str
    title: str
    beginning: str
    reference_events: list[str]
    reference_characters: list[list[str]]
    label: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class QAItem(_Record):
    """One ``data.qa.json`` record: ``input`` -> ``question``, the one ``reference`` string -> ``answers``."""

    item_id: str
    title: str
    question: str
    answers: list[str]
    label: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Rejected(_Record):
    """A record left out of a published file: where it starts, which key, what value and why."""

    file: str
    line: int
    key: str
    value: str
    reason: str
    action: str = "rejected"  # or "kept": the record loads as published, with this note
    element: int | None = None  # its index in a JSON array (0-based), for a set given as one

    def where(self) -> str:
        """``line 3``, or ``line 1, element 12`` for an element of a JSON array."""
        return f"line {self.line}" if self.element is None else f"line {self.line}, element {self.element}"

    def message(self) -> str:
        return f"{self.file}, {self.where()}, key {self.key}: {self.reason}"


@dataclass
class PromptTemplate(_Record):
    """A CopyBench prompt file (``prompts/prompts.<task>.format<n>.json``; Section A.2, Figures 5-7).

    :meth:`render` assembles the user text as ``scripts/generate.py`` does::

        instruction + demo_sep + demo_sep.join(demo_prompt(demo) for each demo)
                    + demo_sep + task_prompt(input, output="")

    stripped of surrounding whitespace; placeholders are filled by :class:`string.Template`
    substitution. With ``k = 0`` the two separators meet. The system text is returned only when
    ``enable_system`` is set (the reference's ``--system_prompt`` sets it); a model without a
    chat template gets ``system + "\\n\\n" + user``, as the reference merges them.
    """

    tag: str
    system: str
    enable_system: bool
    instruction: str
    demo_sep: str
    demo_prompt: str
    task_prompt: str
    demos: list[dict[str, str]]

    def render(self, input_text: str, k: int, *,
               demo_indices: Sequence[int] | None = None) -> tuple[str | None, str]:
        """``(system or None, user text)`` for one item with ``k`` demonstrations.

        The demonstrations are the first ``k`` in file order, or ``demo_indices`` (``k`` of
        them: the probe passes the reference's own draw, :func:`reference_demo_indices`, for a
        published item with the published prompt files, and a draw seeded by the item otherwise).
        """
        if not 0 <= k <= len(self.demos):
            raise ValueError(f"prompt {self.tag}: k={k} demonstrations asked, the file has {len(self.demos)}")
        indices = list(range(k)) if demo_indices is None else list(demo_indices)
        if len(indices) != k or any(not 0 <= i < len(self.demos) for i in indices):
            raise ValueError(f"prompt {self.tag}: demo_indices {indices} are not {k} indices "
                             f"below {len(self.demos)}")
        demo_template = string.Template(self.demo_prompt)
        shown = [demo_template.safe_substitute(input=self.demos[i]["input"], output=self.demos[i]["output"])
                 for i in indices]
        task = string.Template(self.task_prompt).safe_substitute(input=input_text, output="")
        user = (self.instruction + self.demo_sep + self.demo_sep.join(shown) + self.demo_sep + task).strip()
        return (self.system if self.enable_system else None), user


def reference_demo_indices(n_items: int, n_demos: int, k: int, seed: int = REFERENCE_DEMO_SEED) -> list[list[int]]:
    """The demonstrations ``scripts/generate.py`` draws for each record of a data file, in file order.

    The reference seeds Python's generator with 42 and calls ``random.sample(demos, k)`` once
    per record (none when ``k`` is 0; ``--n_instances`` draws first and is not modelled here).
    ``random.sample`` picks positions from the length alone, so sampling ``range(n_demos)``
    gives the same positions. Index the result with ``item.meta["index"]``.
    """
    rng = random.Random(seed)
    return [rng.sample(range(n_demos), k) if k > 0 else [] for _ in range(n_items)]


@functools.lru_cache(maxsize=16)
def _reference_draws(n_items: int, n_demos: int, k: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(d) for d in reference_demo_indices(n_items, n_demos, k))


def reference_demo_pick(meta: dict, n_demos: int, k: int) -> list[int] | None:
    """The demonstrations the reference gives a published item (its ``index`` among the file's
    ``n_records``, from :func:`_load_records`), or None for an item without them (a built one)."""
    if meta.get("source") != "published" or "index" not in meta or "n_records" not in meta:
        return None
    return list(_reference_draws(int(meta["n_records"]), n_demos, k)[int(meta["index"])])


# ---------------------------------------------------------------- reading whole files


def _read_json_text(path: str | Path) -> tuple[Path, str]:
    """The file's text; missing, directory, empty or non-UTF-8 files are one-line InputErrors."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a JSON file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not data.strip():
        raise InputError(f"{path}: empty file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}, line {line}: invalid UTF-8 at byte offset {exc.start} "
                         f"(byte 0x{data[exc.start]:02x})") from None
    return path, text.removeprefix("\ufeff")


def _invalid_json(path: Path, exc: json.JSONDecodeError) -> InputError:
    return InputError(f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})")


# Python's JSON decoder recurses once per nesting level and raises RecursionError past the interpreter's limit
TOO_DEEP = "nested too deeply"


def _decode_document(path: Path, text: str) -> Any:
    try:
        return RECORD_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise _invalid_json(path, exc) from None
    except RecursionError:
        raise _syntax_error(path, text, _WHITESPACE.match(text, 0).end(), TOO_DEEP) from None


def _syntax_error(path: Path, text: str, pos: int, what: str) -> InputError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return InputError(f"{path}, line {line}, column {column}: not valid JSON ({what})")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _array_elements(path: Path, text: str) -> Iterator[tuple[int, int, Any]]:
    """``(index, start line, value)`` for each element of the top-level JSON array, in one pass.

    Elements are decoded one at a time with ``raw_decode`` at their offsets; the line number
    is advanced by counting newlines between consecutive element starts, so the whole file is
    scanned once.
    """
    pos = _WHITESPACE.match(text, 0).end()
    if not text.startswith("[", pos):
        value = _decode_document(path, text)
        raise InputError(f"{path}: the top level is {json_type(value)}, expected an array of records")
    line, counted = 1, 0
    pos = _WHITESPACE.match(text, pos + 1).end()
    index = 0
    if text.startswith("]", pos):
        pos += 1
    else:
        while True:
            start = pos
            try:
                value, pos = RECORD_DECODER.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise _invalid_json(path, exc) from None
            except RecursionError:
                raise _syntax_error(path, text, start, f"element {index} is {TOO_DEEP}") from None
            line += text.count("\n", counted, start)
            counted = start
            yield index, line, value
            index += 1
            pos = _WHITESPACE.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _WHITESPACE.match(text, pos + 1).end()
            elif text.startswith("]", pos):
                pos += 1
                break
            else:
                raise _syntax_error(path, text, pos, "expected ',' or ']' after an array element")
    pos = _WHITESPACE.match(text, pos).end()
    if pos != len(text):
        raise _syntax_error(path, text, pos, "extra data after the top-level array")


# ---------------------------------------------------------------- checking records


class RowReject(Exception):
    """Raised while checking one record: which key, what value, why it cannot be used."""

    def __init__(self, key: str, value: Any, reason: str):
        super().__init__(reason)
        self.key, self.value, self.reason = key, value, reason


MISSING = object()


def check_keys_once(record: Any, where: str = "") -> None:
    """An object (as the decoders here make them) with a key given twice: rejected, naming the key
    (after ``where``, e.g. ``demos[0].``)."""
    for key, values in getattr(record, "repeated", {}).items():
        given = ", then ".join(map(short_repr, values))
        raise RowReject(where + key, values, f"given {len(values)} times in one record ({given}): which value "
                                             f"is meant is unknown")


def short_repr(value: Any) -> str:
    """The value as the rejects table shows it: its repr, cut at 60 characters."""
    if value is MISSING:
        return ""
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS - 3] + "..."


def _check_text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RowReject(key, value, f"expected a string, got {json_type(value)}")
    if not value.strip():
        raise RowReject(key, value, "empty or whitespace-only text")
    nul = value.find("\x00")
    if nul >= 0:
        raise RowReject(key, value, f"contains a NUL character at position {nul}")
    lone = surrogate_reason(value)
    if lone:
        raise RowReject(key, value, lone)
    return value


def surrogate_reason(text: str, *, position: bool = True) -> str:
    """Why ``text`` cannot be written as UTF-8 ("" when it can): its first unpaired surrogate."""
    lone = _SURROGATE.search(text)
    if lone is None:
        return ""
    at = f" at position {lone.start()}" if position else ""
    return f"contains an unpaired surrogate \\u{ord(lone.group()):04x}{at} (not UTF-8 text)"


def _required(record: dict, key: str) -> Any:
    if key not in record:
        raise RowReject(key, MISSING, "missing key")
    return record[key]


def _text_field(record: dict, key: str) -> str:
    return _check_text(key, _required(record, key))


def _check_list(key: str, value: Any) -> list:
    if not isinstance(value, list):
        raise RowReject(key, value, f"expected an array, got {json_type(value)}")
    return value


def _list_field(record: dict, key: str) -> list:
    return _check_list(key, _required(record, key))


def _events(record: dict) -> list[str]:
    events = _list_field(record, "reference_events")
    if not events:
        raise RowReject("reference_events", events, "empty events list")
    return [_check_text(f"reference_events[{i}]", event) for i, event in enumerate(events)]


def _characters(record: dict, notes: list | None = None) -> list[list[str]]:
    """Alias lists; an alias may repeat within one character. One that belongs to two characters
    is kept and noted in ``notes`` as ``(key, alias, reason)``: 34 of the 590 published records
    have one ("Samneric" for Sam and for Eric in *Lord of the Flies*), and the reference scorer
    counts such a name for both characters; rejecting them would lose six books' beginnings and
    change the paper's item set, so memaudit keeps them, scores them as published, and lists
    each in the rejects table with action ``kept``.

    Aliases are compared as the reference's character matcher (``scripts/eval_char_copying.py``)
    compares names, by their lower-cased word tokens, so "Jo March" and "jo-march" are one
    name. An alias with no word token would match every story there. An item may list no
    character.
    """
    characters = _list_field(record, "reference_characters")
    owner: dict[str, int] = {}
    for i, aliases in enumerate(characters):
        key = f"reference_characters[{i}]"
        _check_list(key, aliases)
        if not aliases:
            raise RowReject(key, aliases, "character with no aliases")
        for j, alias in enumerate(aliases):
            _check_text(f"{key}[{j}]", alias)
        for alias in aliases:
            if not alias_key(alias):
                raise RowReject(key, alias, f"alias {alias!r} has no word characters")
            first = owner.setdefault(alias_key(alias), i)
            if first != i:
                reason = (f"alias {alias!r} also belongs to reference_characters[{first}]: kept as published "
                          "(the reference scorer counts it for both characters)")
                if notes is None:
                    raise RowReject(key, alias, reason)
                notes.append((key, alias, reason))
    return characters


def _load_records(path: str | Path, strict: bool, fields: tuple[str, ...],
                  build: Callable[[dict, str, dict], Any]) -> tuple[list, list[Rejected]]:
    """Validate each element of a published data file; ``build(record, item_id, meta)`` makes the item.

    ``meta`` holds the element's ``index`` in the file, its start ``line``, the file's number of
    elements ``n_records`` (the reference's demonstration draw runs over all of them,
    :func:`reference_demo_indices`) and any key outside ``fields``. An ``id`` already seen on an
    earlier record (valid there) rejects the later record. A reject names the record's element as
    well as its line: a one-line array (``json.dump`` without an indent) has every record on line 1.
    """
    path, text = _read_json_text(path)
    items, rejects, id_places, n_records = [], [], {}, 0
    for index, line, record in _array_elements(path, text):
        n_records = index + 1
        try:
            if not isinstance(record, dict):
                raise RowReject("(record)", record, f"expected an object, got {json_type(record)}")
            check_keys_once(record)
            item_id = _text_field(record, "id")
            if item_id in id_places:
                raise RowReject("id", item_id, f"duplicate id, first on {id_places[item_id]}")
            extra = {k: v for k, v in record.items() if k not in fields}
            for key, value in extra.items():  # kept in the items' meta, which is written as UTF-8
                lone = surrogate_reason(json.dumps({key: value}, ensure_ascii=False), position=False)
                if lone:
                    raise RowReject(key, value, lone)
            meta = {"index": index, "line": line, **extra}
            built = build(record, item_id, meta)
            item, notes = built if isinstance(built, tuple) else (built, [])
            items.append(item)
            # only a record that loaded claims its id: a rejected one's later copy is the only usable one
            id_places[item_id] = f"line {line}, element {index}"
            rejects += [Rejected(str(path), line, key, short_repr(value), reason, "kept", index)
                        for key, value, reason in notes]
        except RowReject as exc:
            rejected = Rejected(str(path), line, exc.key, short_repr(exc.value), exc.reason, element=index)
            if strict:
                raise InputError(rejected.message()) from None
            rejects.append(rejected)
    for item in items:
        item.meta["n_records"] = n_records
    return items, rejects


def load_literal(path: str | Path, strict: bool = False) -> tuple[list[LiteralItem], list[Rejected]]:
    """Load ``data.literal.json`` (Section 3.2, literal copying) under the published-data policy."""
    def build(record, item_id, meta):
        return LiteralItem(item_id, _text_field(record, "title"), _text_field(record, "input"),
                           _literal_reference(record), None, meta)
    return _load_records(path, strict, ("id", "title", "input", "reference"), build)


def _literal_reference(record: dict) -> str:
    reference = _text_field(record, "reference")
    if not rouge_tokens(reference):  # another script: every output, a verbatim copy too, would score ROUGE-L 0
        raise RowReject("reference", reference, "no ASCII letter or digit: ROUGE-L (rouge-score's tokenizer) "
                                                "would score every output 0")
    return reference


def load_nonliteral(path: str | Path, strict: bool = False) -> tuple[list[NonLiteralItem], list[Rejected]]:
    """Load ``data.nonliteral.json`` (Sections 3.2, 3.3 and A.1, non-literal copying) under the policy.

    Rejects an empty events list and a character with no aliases; an alias shared by two
    characters of one item is kept with a note (see :func:`_characters`).
    """
    def build(record, item_id, meta):
        notes: list = []
        item = NonLiteralItem(item_id, _text_field(record, "title"), _text_field(record, "input"),
                              _events(record), _characters(record, notes), None, meta)
        return item, notes
    return _load_records(path, strict, ("id", "title", "input", "reference_events", "reference_characters"), build)


def load_qa(path: str | Path, strict: bool = False) -> tuple[list[QAItem], list[Rejected]]:
    """Load ``data.qa.json`` (Section 3.3, fact recall) under the policy; the one answer string -> ``[answer]``."""
    def build(record, item_id, meta):
        return QAItem(item_id, _text_field(record, "title"), _text_field(record, "input"),
                      [_qa_answer(record)], None, meta)
    return _load_records(path, strict, ("id", "title", "input", "reference"), build)


def _qa_answer(record: dict) -> str:
    answer = _text_field(record, "reference")
    if not normalize_answer(answer):  # eval_qa.py's scores: F1 0 for any output, EM 1 for an empty one
        raise RowReject("reference", answer, "nothing left after SQuAD normalisation (articles and punctuation "
                                             "only): F1 would be 0 for every output, exact match 1 for an empty one")
    return answer


# ---------------------------------------------------------------- prompt files


def _placeholders(path: Path, key: str, template: str) -> set[str]:
    parsed = string.Template(template)
    if not parsed.is_valid():
        raise InputError(f"{path}, key {key}: a '$' that is neither a placeholder nor '$$'")
    names = set(parsed.get_identifiers())
    unknown = sorted(names - {"input", "output"})
    if unknown:
        raise InputError(f"{path}, key {key}: placeholder ${{{unknown[0]}}} is not filled "
                         f"(only ${{input}} and ${{output}} are)")
    return names


def load_prompt_file(path: str | Path) -> PromptTemplate:
    """Load a CopyBench prompt file (``prompts/prompts.<task>.format<n>.json``; Section A.2).

    Every problem is a one-line :class:`InputError` naming the file and key: a missing or
    mistyped key, a malformed demonstration, a ``task_prompt`` without ``${input}``, a
    ``demo_prompt`` without ``${input}`` and ``${output}`` when there are demonstrations, and
    the reference's optional ``task_instruction``/``apply_config`` keys, which no published
    file uses and :meth:`PromptTemplate.render` does not apply.
    """
    path, text = _read_json_text(path)
    obj = _decode_document(path, text)
    if not isinstance(obj, dict):
        raise InputError(f"{path}: the top level is {json_type(obj)}, expected an object")
    for key in ("task_instruction", "apply_config"):
        if key in obj:
            raise InputError(f"{path}, key {key}: not supported (no published prompt file uses it)")
    try:
        check_keys_once(obj)
        values = {key: _required(obj, key) for key in (*_PROMPT_STRINGS, "enable_system", "demos")}
        for key in _PROMPT_STRINGS:
            if not isinstance(values[key], str):
                raise RowReject(key, values[key], f"expected a string, got {json_type(values[key])}")
        if not isinstance(values["enable_system"], bool):
            raise RowReject("enable_system", values["enable_system"],
                             f"expected a boolean, got {json_type(values['enable_system'])}")
        demos = _list_field(obj, "demos")
        for i, demo in enumerate(demos):
            if not isinstance(demo, dict):
                raise RowReject(f"demos[{i}]", demo, f"expected an object, got {json_type(demo)}")
            check_keys_once(demo, f"demos[{i}].")
            for key in ("input", "output"):
                if key not in demo:
                    raise RowReject(f"demos[{i}].{key}", MISSING, "missing key")
                _check_text(f"demos[{i}].{key}", demo[key])
    except RowReject as exc:
        raise InputError(f"{path}, key {exc.key}: {exc.reason}") from None
    if "input" not in _placeholders(path, "task_prompt", values["task_prompt"]):
        raise InputError(f"{path}, key task_prompt: no ${{input}} placeholder")
    demo_names = _placeholders(path, "demo_prompt", values["demo_prompt"])
    if demos and demo_names != {"input", "output"}:
        raise InputError(f"{path}, key demo_prompt: needs ${{input}} and ${{output}} placeholders "
                         f"to show the {len(demos)} demonstrations")
    return PromptTemplate(**{k: v for k, v in values.items() if k != "demos"},
                          demos=[{"input": d["input"], "output": d["output"]} for d in demos])


def load_rejection_corpus(path: str | Path) -> tuple[list[str], list[int]]:
    """MemFree's rejection corpus as the reference's ``generate.py --memfree_rejection_file`` reads it
    (CopyBench ships ``data/non-literal-rejection-corpus.json``): a JSON array of texts.

    Returns the texts and the indices of the blank ones, which block nothing and are left out (the
    probe's outcomes count them). Anything else that is not a string is an error naming the file,
    the line and the element: a corpus silently missing a text would let its n-grams through.
    """
    path, text = _read_json_text(path)
    texts, blank = [], []
    for index, line, value in _array_elements(path, text):
        if not isinstance(value, str):
            raise InputError(f"{path}, line {line}: element {index} is {json_type(value)}, expected a string "
                             "(a rejection corpus is an array of texts)")
        lone = surrogate_reason(value)
        if lone:  # the tokenizer would stop MemFree with a traceback
            raise InputError(f"{path}, line {line}: element {index} {lone}")
        if value.strip():
            texts.append(value)
        else:
            blank.append(index)
    if not texts:
        raise InputError(f"{path}: no text in the rejection corpus (an empty array, or blank strings only)")
    return texts, blank


def write_rejects(path: str | Path, rejects: Sequence[Rejected]) -> None:
    """Write rejected (and kept-with-a-note) records as a CSV with columns file, line, element (empty
    but for a JSON array's element), key, value, reason, action."""
    rows = [dict(r.to_dict(), element="" if r.element is None else r.element) for r in rejects]
    write_csv(path, pd.DataFrame(rows, columns=list(REJECT_COLUMNS)))


# ---------------------------------------------------------------- a runnable benchmark

# CopyBench's books carry no membership labels: a published benchmark without a ``labels`` file is
# *unlabelled* (label -1 on every item): its rates are reported over all books, and the membership
# statistics (AUC, conformal selection, the blind baseline) are not scheduled for it.
UNLABELLED = -1


@dataclass
class CopyBenchSets:
    """The published items of one benchmark in memaudit's item format, and what was left out."""

    literal: list[dict]
    nonliteral: list[dict]
    qa: list[dict]
    rejected: list[Rejected]
    files: dict[str, str]            # mode -> the data file read (absent: no such file in the folder)
    labelled: bool
    unused_labels: list[str] = field(default_factory=list)  # titles of the labels file no record has

    def books(self) -> list[str]:
        return sorted({it["book"] for items in (self.literal, self.nonliteral, self.qa) for it in items})


def data_folder(published: dict) -> Path:
    """``published.path``: the folder holding ``data.literal.json`` and the others (``data/`` of the repository)."""
    folder = Path(published["path"])
    if not folder.exists():
        raise InputError(f"{folder}: folder not found (benchmark published.path, format copybench: the data/ "
                         "folder of chentong0/copy-bench)")
    if not folder.is_dir():
        raise InputError(f"{folder}: is a file; format copybench reads a folder holding "
                         f"{', '.join(DATA_FILES.values())}")
    return folder


def data_files(published: dict) -> dict[str, Path]:
    """The published data files present in the folder, by mode; none at all is an InputError."""
    folder = data_folder(published)
    found = {mode: folder / name for mode, name in DATA_FILES.items() if (folder / name).is_file()}
    if not found:
        raise InputError(f"{folder}: none of {', '.join(DATA_FILES.values())} is there")
    return found


def load_title_labels(path: str | Path) -> dict[str, int]:
    """A user's membership labels for CopyBench's books: a CSV with header ``title,label``, label 0 or 1
    (:func:`memaudit.datasets.label_files.read_labels`: any problem is a one-line error)."""
    from memaudit.datasets.label_files import read_labels

    return {title: label for title, (label, _) in read_labels(path, "title").items()}


def book_key(title: str) -> str:
    """A published book's id in memaudit's tables (its documents, items and scores)."""
    return f"copybench/{title.strip()}"


def copybench_sets(published: dict) -> CopyBenchSets:
    """Every published set the folder holds, as the items :mod:`memaudit.probes.copybench` runs.

    ``published``: ``{format: copybench, path: <data folder>, labels: <title,label CSV>,
    strict: bool}``. With ``labels``, each record takes its book's label and a record whose title
    is not in the file is rejected (never guessed); without, every item is :data:`UNLABELLED`.
    The published titles are lower-case ("a game of thrones"): a labels title that differs from
    one only in case and spacing ("A Game of Thrones") labels it, with a kept note on its book's
    first record, where no other labels title folds to the same.
    """
    strict = bool(published.get("strict", False))
    files = data_files(published)
    labels = load_title_labels(published["labels"]) if published.get("labels") else None
    rejected: list[Rejected] = []
    loaders = {"literal": load_literal, "nonliteral": load_nonliteral, "qa": load_qa}
    sets: dict[str, list[dict]] = {mode: [] for mode in DATA_FILES}
    seen: set[str] = set()
    folded = _folded_titles(labels) if labels is not None else {}
    noted: set[str] = set()
    for mode, path in files.items():
        items, rejects = loaders[mode](path)
        rejected += rejects
        for it in items:
            title = it.title.strip()
            labels_title = title
            if labels is not None and title not in labels:
                labels_title = folded.get(_fold(title))
                if labels_title is None:
                    alike = [t for t in labels if _fold(t) == _fold(title)]
                    why = (f"matches {' and '.join(map(repr, alike))} of {published['labels']} but for case and "
                           f"spacing, which cannot say which: keep one" if alike else
                           f"no label for this title in {published['labels']}")
                    rejected.append(Rejected(str(path), it.meta["line"], "title", short_repr(it.title), why,
                                             element=it.meta["index"]))
                    continue
                if title not in noted:
                    noted.add(title)
                    rejected.append(Rejected(str(path), it.meta["line"], "title", short_repr(it.title),
                                             f"labelled by {labels_title!r} of {published['labels']} (the same "
                                             f"title but for case and spacing)", action="kept",
                                             element=it.meta["index"]))
            seen.add(labels_title)
            label = labels[labels_title] if labels is not None else UNLABELLED
            sets[mode].append(_item(mode, it, label))
    rejected.sort(key=lambda r: (r.file, r.line, -1 if r.element is None else r.element))
    first = [r for r in rejected if r.action == "rejected"]
    if strict and first:  # the first in line order, the labels check's included
        more = f" ({len(first)} records rejected in all)" if len(first) > 1 else ""
        raise InputError(first[0].message() + more)
    unused = sorted(set(labels) - seen) if labels is not None else []
    return CopyBenchSets(sets["literal"], sets["nonliteral"], sets["qa"], rejected,
                         {m: str(p) for m, p in files.items()}, labels is not None, unused)


def _fold(title: str) -> str:
    return " ".join(title.casefold().split())


def _folded_titles(labels: dict[str, int]) -> dict[str, str]:
    """Each labels title by its case- and spacing-folded form; a form two titles share matches neither."""
    by_form: dict[str, list[str]] = {}
    for title in labels:
        by_form.setdefault(_fold(title), []).append(title)
    return {form: titles[0] for form, titles in by_form.items() if len(titles) == 1}


def _item(mode: str, it: Any, label: int) -> dict:
    book = book_key(it.title)
    common = {"item_id": it.item_id, "doc_id": book, "book": book, "title": it.title.strip(), "label": label}
    meta = {"source": "published", **it.meta}
    if mode == "literal":
        return {**common, "prefix": it.prefix, "reference": it.reference, "meta": meta}
    if mode == "nonliteral":
        return {**common, "beginning": it.beginning, "reference_events": list(it.reference_events),
                "reference_characters": [list(c) for c in it.reference_characters],
                "meta": {**meta, "event_source": "published", "character_source": "published"}}
    return {**common, "question": it.question, "answers": list(it.answers), "qa_source": "published", "meta": meta}


# where a reference continues the prefix's word or quote (no space between them): closing punctuation, an
# apostrophe's ending ('s, 're), a closing quote (one followed by a space), a hyphen
_CONTINUES = re.compile(r"""[.,;:!?)\]}%\u201d\u2019-]|'(?:s|re|ve|m|ll|d|t)\b|"(?:\s|$)""")
_OPENING_QUOTE = re.compile(r"""(?:^|\s)["']$|[\u201c\u2018]$""")


def continuation(prefix: str, reference: str) -> str:
    """A published literal snippet, its ``input`` (prefix) then its ``reference``, rejoined where it was cut.

    CopyBench cut BookMIA's snippets between tokens, and the whitespace at the cut is in neither half: most
    prefixes end a word whose reference starts the next ("They are a form" | "of pressure"), others end
    mid-word or before punctuation ("comrade" | "? What", "Robert" | "'s folly"). A space goes back where
    the reference starts a new word, none where it continues the prefix's (:data:`_CONTINUES`) or the prefix
    ends with an opening quote; whitespace at the cut, where a file has it, is kept as written."""
    if prefix[-1:].isspace() or reference[:1].isspace():
        return prefix + reference
    spaced_ellipsis = prefix.endswith(" .") and reference.startswith(".")  # "my uncle ." | ". . but"
    if (_CONTINUES.match(reference) and not spaced_ellipsis) or _OPENING_QUOTE.search(prefix):
        return prefix + reference
    return f"{prefix} {reference}"


def book_texts(sets: CopyBenchSets) -> dict[str, str]:
    """What the published files say of each book, in file order: the literal snippets (prefix and
    reference), then the events (beginnings and reference events, each once), then the
    question-answer pairs. A book's document text, and MemFree's rejection corpus for stories."""
    parts: dict[str, list[str]] = {}
    for it in sets.literal:
        parts.setdefault(it["book"], []).append(continuation(it["prefix"], it["reference"]).strip())
    for it in sets.nonliteral:
        lines = parts.setdefault(it["book"], [])
        for event in (it["beginning"], *it["reference_events"]):
            if event not in lines:
                lines.append(event)
    for it in sets.qa:
        parts.setdefault(it["book"], []).append(f"{it['question'].strip()} {it['answers'][0].strip()}")
    return {book: "\n".join(lines) for book, lines in parts.items()}
