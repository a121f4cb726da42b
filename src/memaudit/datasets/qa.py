"""Benchmark-contamination sets for the information-guided probes (Section 4.3, Table 4).

The paper's controlled contamination: a QA benchmark is split into a contaminated half, which
a model is fine-tuned on (members, label 1), and a clean half (non-members, label 0); a probe
with discriminative power reconstructs more masked words on the contaminated half.

- :func:`load_qa_jsonl`: any multiple-choice or short-answer set in JSON lines, one object per
  line (or one JSON array of them, as ``json.dump`` writes it) with ``question`` (a string), ``choices`` (a list of at least two strings; absent or
  ``null`` for a short-answer question) and ``answer``: for a multiple-choice question either
  the correct choice's **text** (a JSON string, equal to one choice after stripping surrounding
  whitespace, in either Unicode normal form) or its **0-based index** (a JSON integer); a letter
  ("B") is a string and so must be a choice's text. A short-answer question's answer is a string
  (or an integer, read as its digits). An optional ``id`` (string or integer) names the question; other keys are kept in
  ``meta["extra"]``. Keys match in any case (``Choices``), as the other published loaders match
  them; a row with two keys alike but for case (``choices`` and ``Choices``) is rejected.
- :func:`contamination_split`: the seeded member split.
- :func:`demo_questions`: a few hundred fill-in-the-blank questions built deterministically from
  the demo world's Reuters articles (the ``demo_qa`` source).

Document = passage = one question. Its text is what the contaminated model is fine-tuned on,
:func:`render_qa`: the question, the lettered choices and the answer::

    <question>
    A. <choice>
    B. <choice>
    Answer: B. <choice>

``meta`` keeps ``question``, ``choices``, ``answer`` (the text) and ``answer_index``, and ``half``:
``contaminated``, ``clean`` or ``given`` (``label_key``). Not ``split``: a passage's ``meta.split`` is a
fixed validation/test split (:data:`memaudit.datasets.types.VALIDATION`), which the cloze probes tune
and report on.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from memaudit import MEMBER, NONMEMBER
from memaudit.datasets.near_duplicates import DEFAULT_NGRAM, check_both_sides, keep_together, near_duplicate_groups
from memaudit.datasets.rejects import (
    MISSING,
    Rejected,
    RejectLog,
    RowReject,
    check_text,
    json_type,
    read_text,
    require_rows,
    short_repr,
)
from memaudit.datasets.text import split_sentences
from memaudit.datasets.types import Document, Passage
from memaudit.errors import InputError

QA_SOURCE = "qa"
DEMO_QA_SOURCE = "demo_qa"
QA_FIELDS = ("id", "question", "choices", "answer")
# Copied from a QA document's meta into its passage's (memaudit.datasets.build)
QA_META = ("question", "choices", "answer", "answer_index")
BLANK = "____"
LETTERS = string.ascii_uppercase


@dataclass
class QAQuestion:
    """One question: ``choices`` empty for a short-answer question, else ``answer_index`` indexes them."""

    qid: str
    question: str
    choices: list[str]
    answer: str
    answer_index: int | None
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    label: int | None = None  # the file's own label (``label_key``), else None: memaudit splits
    group: str | None = None  # the source the question is asked of (``group_key``), else None: its own unit
    element: int | None = None  # its index in a JSON array (0-based), for a set given as one

    def where(self) -> str:
        """``line 3``, or ``line 1, element 12`` for an element of a JSON array (all on line 1, maybe)."""
        return f"line {self.line}" if self.element is None else f"line {self.line}, element {self.element}"


def render_qa(question: str, choices: Sequence[str], answer: str) -> str:
    """The text a contaminated model is fine-tuned on: the question, lettered choices, the answer."""
    lines = [question]
    if choices:
        lines += [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
        lines.append(f"Answer: {LETTERS[list(choices).index(answer)]}. {answer}")
    else:
        lines.append(f"Answer: {answer}")
    return "\n".join(lines)


# ---------------------------------------------------------------- reading JSON lines


def _normalised(text: str) -> str:
    """What makes two questions (or choices) the same: :func:`~memaudit.datasets.labelled.text_key`
    (spacing, Unicode NFC: a question repeated decomposed went unseen) ignoring case."""
    from memaudit.datasets.labelled import text_key

    return text_key(text).lower()


def _choices(value: Any) -> list[str]:
    if value is MISSING or value is None:
        return []
    if not isinstance(value, list):
        raise RowReject("choices", value, f"expected an array of strings, got {json_type(value)}")
    if len(value) < 2:
        raise RowReject("choices", value, "fewer than 2 choices (leave the key out for a short-answer question)")
    if len(value) > len(LETTERS):
        raise RowReject("choices", value, f"more than {len(LETTERS)} choices")
    choices = [check_text(f"choices[{i}]", c).strip() for i, c in enumerate(value)]
    seen: dict[str, int] = {}
    for i, c in enumerate(choices):
        first = seen.setdefault(_normalised(c), i)
        if first != i:
            raise RowReject(f"choices[{i}]", c, f"the same choice as choices[{first}]")
    return choices


def _answer(value: Any, choices: list[str]) -> tuple[str, int | None]:
    """``(answer text, index or None)``: an integer indexes the choices, a string is a choice's text."""
    if value is MISSING:
        raise RowReject("answer", value, "missing key")
    is_int = type(value) is int
    if not choices:
        if is_int:
            return str(value), None
        return check_text("answer", value).strip(), None
    if is_int:
        if not 0 <= value < len(choices):
            raise RowReject("answer", value, f"index out of range: {len(choices)} choices, indexed from 0")
        return choices[value], value
    text = unicodedata.normalize("NFC", check_text("answer", value).strip())
    # in Unicode NFC on both sides: "Cafe\u0301" (e + combining accent) is the choice "Caf\u00e9"
    composed = [unicodedata.normalize("NFC", c) for c in choices]
    if text not in composed:
        raise RowReject("answer", value, "not one of the choices (give the correct choice's text "
                        "or its 0-based index)")
    index = composed.index(text)
    return choices[index], index


def _identifier(key: str, value: Any) -> str:
    """An id-like field: a non-empty string (stripped) or an integer (its digits)."""
    if value is MISSING:
        raise RowReject(key, value, "missing key")
    if type(value) is int or (isinstance(value, str) and value.strip() and "\x00" not in value):
        return str(value).strip()
    raise RowReject(key, value, "expected a non-empty string or an integer")


def _question(record: Any, line: int, label_key: str | None = None, group_key: str | None = None,
              element: int | None = None) -> QAQuestion:
    from memaudit.datasets.labelled import check_label, json_getter

    # keys in any case, as the NYT and WikiMIA loaders read them ("Choices" made a multiple-choice
    # question short-answer); two keys alike but for case reject the row, as a key given twice does
    get = json_getter(record)
    label = None if label_key is None else check_label(get(label_key), False, "0 or 1", key=label_key)
    group = None if group_key is None else _identifier(group_key, get(group_key))
    question = check_text("question", get("question")).strip()
    choices = _choices(get("choices"))
    answer, index = _answer(get("answer"), choices)
    qid = get("id")
    if qid is MISSING or qid is None:
        qid = "q" + hashlib.sha256(_normalised(question).encode("utf-8")).hexdigest()[:12]
    else:
        qid = _identifier("id", qid)
    known = {k.lower() for k in (*QA_FIELDS, label_key, group_key) if k}
    extra = {k: v for k, v in record.items() if str(k).strip().lower() not in known}
    return QAQuestion(qid, question, choices, answer, index, line, extra, label, group, element)


def read_qa_jsonl(path: str | Path, strict: bool = False, *, label_key: str | None = None,
                  group_key: str | None = None) -> tuple[list[QAQuestion], list[Rejected]]:
    """The usable questions of a QA JSON-lines file (Section 4.3's benchmarks: GPQA, CommonsenseQA,
    ARC), or of one JSON array of such objects (each element at the line where it starts, and its index), and
    the rejected rows (published-data policy).

    Rejected: a line that is not a JSON object, an empty question, a choice that is empty,
    repeated or not a string, fewer than two choices, an answer that is no choice or an index out
    of range, a repeated ``id``, and a question asked again (same text, ignoring case, spacing and
    Unicode normal form: it would sit in both halves of the split). With ``label_key``, also a row whose field
    of that name is missing or not exactly 0 or 1 (a JSON integer); with ``group_key``, one whose
    field of that name is missing or not a non-empty string or an integer. ``strict=True``: the first
    rejected row is an InputError; empty, non-UTF-8 or unusable files: InputError.
    """
    from memaudit.datasets.labelled import json_records

    path, text = read_text(path, "a QA JSON-lines file")
    log = RejectLog(strict)
    questions, ids, texts = [], {}, {}
    # json.dump's array was one rejected row "expected an object, got an array", and indented, every line
    # "not valid JSON": read as the labelled sets' and BookMIA's arrays are
    for line, element, record in json_records(path, text):
        try:
            if isinstance(record, RowReject):
                raise record
            q = _question(record, line, label_key, group_key, element)
            # the question first: an id derived from it (none given) repeats with it, and "duplicate id"
            # would name an id the file does not have
            key = _normalised(q.question)
            if key in texts:
                raise RowReject("question", q.question, f"the same question as {texts[key]}")
            if q.qid in ids:
                raise RowReject("id", q.qid, f"duplicate id, first on {ids[q.qid]}")
        except RowReject as exc:
            log.reject(path, line, exc, element)
            continue
        ids[q.qid], texts[key] = q.where(), q.where()
        questions.append(q)
    rejected = log.finish()
    require_rows(path, len(questions), rejected, "question")
    return questions, rejected


# ---------------------------------------------------------------- the contamination split


def contamination_split(qids: Iterable[str], member_fraction: float = 0.5, seed: int = 13) -> set[str]:
    """The contaminated (member) questions of Section 4.3's controlled contamination: the
    ``round(n * member_fraction)`` ids (at least 1, at
    most n - 1; Python rounds halves to even) of lowest SHA-256 of ``"<seed>:<id>"``.

    Deterministic, and independent of file order: adding or removing a question moves no other
    question across the split unless it changes the count.
    """
    qids = sorted(set(qids))
    if len(qids) < 2:
        raise InputError(f"a contamination split needs at least 2 questions, got {len(qids)}")
    if not 0 < member_fraction < 1:
        raise InputError(f"member_fraction must be between 0 and 1 (exclusive), got {member_fraction}")
    n_members = min(max(round(len(qids) * member_fraction), 1), len(qids) - 1)
    ranked = sorted(qids, key=lambda q: hashlib.sha256(f"{seed}:{q}".encode("utf-8")).hexdigest())
    return set(ranked[:n_members])


def qa_records(questions: Sequence[QAQuestion], members: set[str], *, source: str = QA_SOURCE,
               origin: str = "") -> tuple[list[Document], list[Passage]]:
    """One document and one passage per question, labelled by ``members`` (Section 4.3's halves); a
    question's group (``group_key``) is its document's ``book``, the unit of the statistics."""
    docs, passages = [], []
    for q in questions:
        doc_id = f"{source}/{q.qid}"
        label = MEMBER if q.qid in members else NONMEMBER
        text = render_qa(q.question, q.choices, q.answer)
        fields = {"question": q.question, "choices": list(q.choices), "answer": q.answer,
                  "answer_index": q.answer_index}
        half = ("contaminated" if label == MEMBER else "clean") if q.label is None else "given"
        book = {} if q.group is None else {"book": f"{source}/{q.group}"}
        # meta.split is a fixed validation/test split (memaudit.datasets.types): as "contaminated" it made
        # the cloze probes tune on no passage and report none
        place = {"line": q.line} if q.element is None else {"line": q.line, "element": q.element}
        docs.append(Document(doc_id, source, "", "", "qa", text,
                             dict(fields, label=label, half=half, **place, origin=origin, n_passages=1, **book)))
        passages.append(Passage(f"{doc_id}#p0", doc_id, label, text, "", "",
                                dict(fields, half=half, **place, n_words=len(text.split()), extra=q.extra)))
    return sorted(docs, key=lambda d: d.doc_id), sorted(passages, key=lambda p: p.passage_id)


def load_qa_jsonl(path: str | Path, strict: bool = False, *, member_fraction: float = 0.5, seed: int = 13,
                  near_duplicate_ngram: int | None = DEFAULT_NGRAM, label_key: str | None = None,
                  group_key: str | None = None) -> tuple[list[Document], list[Passage], list[Rejected]]:
    """A QA JSON-lines file split into a contaminated half (label 1) and a clean half (label 0): the
    controlled contamination of Section 4.3 (Table 4), with the clean half as the control.

    ``(documents, passages, rejected)``; see :func:`read_qa_jsonl` for the rows rejected and
    :func:`contamination_split` for the split. Questions whose rendered texts share a
    ``near_duplicate_ngram``-word run are kept in one half
    (:mod:`memaudit.datasets.near_duplicates`; ``None``: no such check), and each such document's
    ``meta["near_duplicates"]`` names the others.

    ``group_key`` (beyond the paper): the questions asked of one source (a reading passage, an
    article) share that field's value and are one unit: split together, and one draw of the
    intervals, tests and blind-baseline folds (their documents' ``book``).

    ``label_key`` (beyond the paper): each question carries its own label in that field (1 = member:
    a benchmark's published questions, say; 0 = questions written after the model's cutoff), and
    nothing is split. An audit of a model someone else trained has no contaminated half of its own
    making. Nothing is moved either: a non-member unit sharing a run with a member unit keeps its
    label, with a ``kept`` row saying so, as does a group whose questions carry both labels (the
    statistics then count questions, not groups: :func:`memaudit.stats.metrics.label_groups`).
    """
    questions, rejected = read_qa_jsonl(path, strict, label_key=label_key, group_key=group_key)
    unit = {q.qid: q.qid if q.group is None else q.group for q in questions}
    texts: dict[str, list[str]] = {}
    for q in questions:
        texts.setdefault(unit[q.qid], []).append(render_qa(q.question, q.choices, q.answer))
    groups = near_duplicate_groups(texts, near_duplicate_ngram) if near_duplicate_ngram is not None else {}
    if label_key is None:
        if len(texts) < 2:  # contamination_split's own error names neither the file nor the rows left out
            what = "question" if group_key is None else f"group of {group_key}"
            first = f" ({len(rejected)} rejected; first: {rejected[0].message()})" if rejected else ""
            raise InputError(f"{path}: one usable {what}, and the contamination split needs two{first}")
        member_units = keep_together(contamination_split(list(texts), member_fraction, seed), groups)
        if near_duplicate_ngram is not None:
            check_both_sides(f"{path}", len(texts), member_units, near_duplicate_ngram)
        members = {q.qid for q in questions if unit[q.qid] in member_units}
    else:
        members = {q.qid for q in questions if q.label == MEMBER}
        notes = _kept_across(path, questions, unit, members, groups, near_duplicate_ngram)
        rejected = sorted(rejected + notes + _mixed_groups(path, questions, members, group_key),
                          key=lambda r: (r.line, -1 if r.element is None else r.element))
    docs, passages = qa_records(questions, members, origin=str(path))
    by_unit: dict[str, list[str]] = {}
    for q in questions:
        by_unit.setdefault(unit[q.qid], []).append(f"{QA_SOURCE}/{q.qid}")
    by_id = {d.doc_id: d for d in docs}
    for q in questions:
        near = [doc for u in groups.get(unit[q.qid], ()) if u != unit[q.qid] for doc in by_unit[u]]
        if near:
            by_id[f"{QA_SOURCE}/{q.qid}"].meta["near_duplicates"] = near
    return docs, passages, rejected


def _kept_across(path: str | Path, questions: Sequence[QAQuestion], unit: dict[str, str], members: set[str],
                 groups: dict[str, tuple[str, ...]], n: int | None) -> list[Rejected]:
    """A ``kept`` row per non-member question whose unit shares an ``n``-word run with a member's unit:
    its label is the file's, and a member's text in it is a reason to read its scores with care."""
    member_units = {unit[q] for q in members}
    rows = []
    for q in questions:
        shared = [u for u in groups.get(unit[q.qid], ()) if u != unit[q.qid] and u in member_units]
        if q.qid not in members and shared:
            what = "question" if q.group is None else "group"
            rows.append(Rejected(str(path), q.line, "id", short_repr(q.qid), f"a non-member that shares a {n}-word run "
                                 f"with member {what}(s) {', '.join(sorted(shared))}: kept with its label", "kept",
                                 q.element))
    return rows


def _mixed_groups(path: str | Path, questions: Sequence[QAQuestion], members: set[str],
                  group_key: str | None) -> list[Rejected]:
    """A ``kept`` row per group (``group_key``) whose questions carry both labels, on its first question."""
    labels: dict[str, set[bool]] = {}
    first: dict[str, QAQuestion] = {}
    for q in questions:
        if q.group is not None:
            labels.setdefault(q.group, set()).add(q.qid in members)
            first.setdefault(q.group, q)
    return [Rejected(str(path), first[g].line, group_key, short_repr(g), "a group whose questions carry both labels: "
                     "kept; the statistics count this benchmark's questions one by one, not its groups", "kept",
                     first[g].element)
            for g in sorted(labels) if len(labels[g]) > 1]


# ---------------------------------------------------------------- the demo set


_NUMBER = re.compile(r"^\d+(?:[.,]\d+)*$")
_NAME = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]+)*$")
# Quotes and brackets may open a word; a leading "." or "," is part of it (".125" is no "125").
_LEAD = "\"'([<\u201c\u2018"
_TRAIL = "\"')]>,.;:!?\u201d\u2019"
# Capitalised words that are not names a reader could only know from the article
_COMMON = {"The", "This", "That", "These", "Those", "Its", "His", "Her", "Their", "There", "They", "It", "He",
           "She", "We", "In", "On", "At", "For", "But", "And", "Reuters", "Reuter", "Inc", "Corp", "Co", "Ltd"}


def _blank_candidates(words: Sequence[str]) -> list[tuple[int, str, str]]:
    """``(position, core, kind)`` of the words a question may blank out: numbers and capitalised
    names (not the sentence's first word), each occurring once in the sentence."""
    cores = [w.lstrip(_LEAD).rstrip(_TRAIL) for w in words]
    out = []
    for i, core in enumerate(cores):
        if cores.count(core) != 1:
            continue
        if _NUMBER.match(core):
            out.append((i, core, "number"))
        elif i > 0 and len(core) > 2 and _NAME.match(core) and core not in _COMMON:
            out.append((i, core, "name"))
    return out


def _shown_elsewhere(sentence: str, core: str) -> bool:
    """Whether ``core`` stands in ``sentence`` more than once between non-word characters: a blank over one
    occurrence would leave the answer in the question ("____ ... Rospatch's stock", "'-1' ... '____'")."""
    return len(re.findall(rf"(?<!\w){re.escape(core)}(?!\w)", sentence)) > 1


def _blanked(words: Sequence[str], position: int, core: str) -> str:
    word = words[position]
    start = word.index(core)
    return " ".join([*words[:position], word[:start] + BLANK + word[start + len(core):], *words[position + 1:]])


def _distractors(rng: random.Random, answer: str, kind: str, sentence: str, local: Sequence[str],
                 n: int = 3) -> list[str] | None:
    """``n`` other words of the answer's kind from the same article, or None where it has fewer.

    Never from other articles: the split keeps an article's questions in one half, and a model
    fine-tuned on the member half would see another article's names and numbers as choices, so the
    non-members' words the cloze probes mask would no longer be unseen (they were topped up from all
    articles: 8 of the 129 non-member answers stood in member questions)."""
    near = [w for w in dict.fromkeys(local) if w.lower() != answer.lower() and w not in sentence]
    if len(near) < n:
        return None
    return rng.sample(near, n)


@dataclass
class _Candidate:
    doc: Document
    index: int
    words: list[str]
    blanks: list[tuple[int, str, str]]


def demo_questions(documents: Sequence[Document], per_document: int = 5, min_words: int = 8,
                   max_words: int = 60) -> list[Document]:
    """Fill-in-the-blank multiple-choice questions (Section 4.3's contamination set, built offline).

    From each article, the first ``per_document`` sentences of ``min_words``..``max_words`` words
    that have a number or a capitalised name occurring once, not even inside another word (``Rospatch's``,
    ``-1``, ``3.14%0.7`` would show the answer beside its blank): that word becomes the blank
    (``____``), the answer one of four choices; the three distractors are words of the same kind
    (number or name) from the same article (a sentence whose article has too few is passed over for
    the next one, so an article still gives up to ``per_document``). Every choice is picked
    with a generator seeded by the article's id and the sentence's index, so the same articles
    give the same questions. One ``kind="qa"`` document per question, its text
    :func:`render_qa`; ``meta["book"]`` is the article's id, so ``split_by: book`` keeps an
    article's questions in one half.
    """
    out = []
    for doc in documents:
        taken = 0
        for index, sentence in enumerate(split_sentences(doc.text)):
            words = sentence.split()
            blanks = [b for b in _blank_candidates(words) if not _shown_elsewhere(sentence, b[1])]
            if taken < per_document and min_words <= len(words) <= max_words and blanks:
                question = _demo_question(_Candidate(doc, index, words, blanks))
                if question is not None:
                    out.append(question)
                    taken += 1
    return out


def _demo_question(c: _Candidate) -> Document | None:
    rng = random.Random(f"{DEMO_QA_SOURCE}:{c.doc.doc_id}:{c.index}")
    position, answer, kind = rng.choice(c.blanks)
    sentence = " ".join(c.words)
    local = [core for s in split_sentences(c.doc.text) for _, core, k in _blank_candidates(s.split()) if k == kind]
    distractors = _distractors(rng, answer, kind, sentence, local)
    if distractors is None:
        return None
    choices = [answer, *distractors]
    rng.shuffle(choices)
    question = _blanked(c.words, position, answer)
    text = render_qa(question, choices, answer)
    doc_id = f"{DEMO_QA_SOURCE}/{c.doc.doc_id}/s{c.index:03d}"
    return Document(doc_id, DEMO_QA_SOURCE, c.doc.title, c.doc.author, "qa", text,
                    {"question": question, "choices": choices, "answer": answer,
                     "answer_index": choices.index(answer), "blank_kind": kind, "book": c.doc.doc_id,
                     "article": c.doc.doc_id, "sentence": c.index, "n_words": len(text.split()),
                     "origin": f"{DEMO_QA_SOURCE} from {c.doc.meta.get('origin', c.doc.doc_id)}"})
