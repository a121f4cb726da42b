"""Knowledge filters (Section 3, "Accounting for context using knowledge filters"; Appendix B).

A candidate surprisal token that a small instruction-tuned model can fill in from the
masked context alone is guessable, not evidence of memorisation: it is dropped. Each
filter model gets both of the paper's filter prompts for every candidate:

- prompt 1 (``word``): "What is the word that fills in the [MASK] token ...": the
  candidate is reconstructed when the answer (:func:`~.prompts.parse_filter_word`)
  matches the true word (:func:`~.prompts.matches`);
- prompt 2 (``list``): "What are 100 words that can fill in the [MASK] token ...": the
  candidate is reconstructed when the true word is among the listed words
  (:func:`~.prompts.parse_word_list`, :func:`~.prompts.listed`).

``mode: logit`` (:func:`top_choice_filter`) asks an open filter model the logit probe's
question instead: would greedy decoding from the text to the left write the word.

A candidate is dropped when *any* filter model reconstructs it with either prompt. Every
filter model sees every candidate (not only those the previous ones kept), so which model
dropped what does not depend on their order and the table shows each model's share.

Candidates are mappings with ``candidate_id``, ``doc_id``, ``word`` (the true word) and
``context`` (the passage with the word replaced by ``[MASK]``, exactly once); other keys
pass through. Decoding is greedy (:data:`FILTER_PARAMS`), so the filter is deterministic
(and an API filter's answers come from the cache on a rerun). A refusal or an unparseable
answer does not drop a candidate (no evidence that it is guessable); a request that got no
answer at all (status ``error``) stops the filter with an error naming it, since keeping or
dropping would then depend on a transient failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

from memaudit.backends.api import APIRequestError
from memaudit.backends.base import (STATUS_ERROR, STATUS_INVALID, STATUS_OK, STATUS_REFUSAL, Backend, Generation,
                                    GenerationParams)
from memaudit.backends.refusal import is_refusal
from memaudit.errors import InputError
from memaudit.probes.cloze.prompts import (MASK, ONE_WORD, declines, filter_list_prompt, filter_word_prompt, listed,
                                           matches, parse_filter_word, parse_word_list)

WORD_PROMPT = "word"
LIST_PROMPT = "list"
FILTER_PROMPTS = (WORD_PROMPT, LIST_PROMPT)
_BUILDERS = {WORD_PROMPT: filter_word_prompt, LIST_PROMPT: filter_list_prompt}

# Greedy; room for a list of 100 words (numbered lines take 3-4 tokens each). One call per
# filter model serves both prompts, so one limit: a model answering prompt 1 in a word stops early.
FILTER_PARAMS = GenerationParams(max_new_tokens=400, temperature=0.0, chat=True)

RECORD_COLUMNS = ["candidate_id", "doc_id", "word", "filter", "word_guess", "word_status", "word_match",
                  "list_n_words", "list_status", "list_match", "dropped", "reason"]
CANDIDATE_COLUMNS = ["candidate_id", "doc_id", "word", "kept", "dropped_by"]


def check_candidates(candidates: Sequence[Mapping]) -> None:
    """:class:`InputError` naming the first candidate without the keys the cloze modules read,
    or whose context does not hold ``[MASK]`` exactly once; also on repeated ``candidate_id``."""
    seen = set()
    for i, c in enumerate(candidates):
        missing = [k for k in ("candidate_id", "doc_id", "word", "context") if k not in c]
        if missing:
            raise InputError(f"cloze candidate {i}: missing {', '.join(missing)}")
        if str(c["context"]).count(MASK) != 1:
            raise InputError(f"cloze candidate {c['candidate_id']!r}: its context must hold {MASK} exactly once")
        if c["candidate_id"] in seen:
            raise InputError(f"cloze candidate id {c['candidate_id']!r} occurs twice")
        seen.add(c["candidate_id"])


@dataclass
class FilterOutcome:
    """What :func:`knowledge_filter` returns.

    ``kept``: the candidates no filter model reconstructed, in input order (the input mappings).
    ``records``: one per (candidate, filter model), fields :data:`RECORD_COLUMNS`: each prompt's
    parsed guess or number of listed words, its status (ok / refusal / invalid) and whether it
    matched; ``dropped`` and ``reason`` (``word_prompt``, ``list_prompt``, both joined by ``+``,
    or ``""``).
    """

    kept: list[Mapping]
    records: list[dict] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """The per-(candidate, filter) records as a table."""
        return pd.DataFrame(self.records, columns=RECORD_COLUMNS)

    def candidates(self) -> pd.DataFrame:
        """One row per candidate: ``kept`` and ``dropped_by`` (``filter:reason`` joined by ``;``)."""
        rows: dict = {}
        for r in self.records:
            row = rows.setdefault(r["candidate_id"], {"candidate_id": r["candidate_id"], "doc_id": r["doc_id"],
                                                      "word": r["word"], "kept": True, "dropped_by": []})
            if r["dropped"]:
                row["kept"] = False
                row["dropped_by"].append(f"{r['filter']}:{r['reason']}")
        for row in rows.values():
            row["dropped_by"] = ";".join(row["dropped_by"])
        return pd.DataFrame(list(rows.values()), columns=CANDIDATE_COLUMNS)

    def replies(self) -> list[str]:
        """Per filter model, one line: how many of each prompt's replies gave a word, refused or gave none.
        Neither of the last two drops a candidate, so a filter model that refuses every prompt filters
        nothing; this says so where the count of dropped tokens alone would not."""
        lines = []
        for name in dict.fromkeys(r["filter"] for r in self.records):
            mine = [r for r in self.records if r["filter"] == name]
            parts = []
            for prompt in FILTER_PROMPTS:
                statuses = [r[f"{prompt}_status"] for r in mine if r[f"{prompt}_status"] is not None]
                if statuses:
                    parts.append(f"{prompt} prompt: {statuses.count(STATUS_OK)} of {len(statuses)} answered a word, "
                                 f"{statuses.count(STATUS_REFUSAL)} refused, {statuses.count(STATUS_INVALID)} "
                                 "without a word")
            lines.append(f"knowledge filter {name!r}, " + "; ".join(parts)
                         + " (a refusal or a reply without a word drops nothing)")
        return lines

    def counts(self) -> pd.DataFrame:
        """Per filter model: candidates seen, dropped, and dropped by each prompt."""
        t = self.table()
        if t.empty:
            return pd.DataFrame(columns=["filter", "n_candidates", "n_dropped", "n_word_match", "n_list_match"])
        return (t.groupby("filter", sort=False)
                 .agg(n_candidates=("candidate_id", "size"), n_dropped=("dropped", "sum"),
                      n_word_match=("word_match", "sum"), n_list_match=("list_match", "sum"))
                 .reset_index())


def _status(generation: Generation, parsed_something: bool) -> str:
    if generation.status == STATUS_ERROR:
        return STATUS_ERROR
    if parsed_something:
        return STATUS_OK
    if generation.status == STATUS_REFUSAL or is_refusal(generation.text) or declines(generation.text, ONE_WORD):
        return STATUS_REFUSAL
    return STATUS_INVALID


def judge_replies(candidate: Mapping, replies: Mapping[str, Generation], *, plural: bool = False) -> dict:
    """The record of one filter model's replies to one candidate's filter prompts (by prompt name)."""
    truth = candidate["word"]
    rec = {"candidate_id": candidate["candidate_id"], "doc_id": candidate["doc_id"], "word": truth,
           "word_guess": None, "word_status": None, "word_match": False,
           "list_n_words": None, "list_status": None, "list_match": False}
    if WORD_PROMPT in replies:
        g = replies[WORD_PROMPT]
        guess = parse_filter_word(g.text, candidate["context"]) if g.status != STATUS_ERROR else None
        rec.update(word_guess=guess, word_status=_status(g, guess is not None),
                   word_match=matches(guess, truth, plural=plural))
    if LIST_PROMPT in replies:
        g = replies[LIST_PROMPT]
        words = parse_word_list(g.text) if g.status != STATUS_ERROR else []
        rec.update(list_n_words=len(words), list_status=_status(g, bool(words)),
                   list_match=listed(words, truth, plural=plural))
    reasons = [f"{name}_prompt" for name in FILTER_PROMPTS if rec[f"{name}_match"]]
    rec.update(dropped=bool(reasons), reason="+".join(reasons))
    return rec


def top_choice_filter(texts: Sequence[str], tokens: Mapping[tuple[int, int], Mapping], backend: Backend) -> set:
    """The ``logit`` knowledge filter (``probes.cloze.filter.mode: logit``, beyond the paper): the keys of
    the ``tokens`` whose word greedy decoding from the text to its left writes (the record's ``greedy``:
    every token of the word the filter model's top choice, as the logit probe reconstructs it; a record
    without ``greedy`` falls back to its first token's ``rank`` 0)
    -- the question the logit probe asks the model under test, asked of a model that never saw the
    members, so a word any fluent reader predicts there ("Securities and Exchange [Commission]") is not
    counted as memorised. One forward pass per text (``Backend.word_logprobs``), every token of the text
    read from it; no generation, so it costs what the reference model's scoring costs, where the paper's
    two prompts cost a generated list of 100 words per token.

    ``tokens``: ``(text index, start) -> {"start", "end", ...}``, character spans in ``texts[index]``.
    """
    by_text: dict[int, list[tuple[int, int]]] = {}
    for key in sorted(tokens):
        by_text.setdefault(key[0], []).append(key)
    order = sorted(by_text)
    if not order:
        return set()
    scores = backend.word_logprobs([texts[i] for i in order],
                                   [[(tokens[k]["start"], tokens[k]["end"]) for k in by_text[i]] for i in order])
    # the probe's whole-word rule, so the filter drops only what the probe would count as reconstructed
    return {k for i, row in zip(order, scores) for k, s in zip(by_text[i], row)
            if (s["greedy"] if "greedy" in s else s.get("rank") == 0)}


def knowledge_filter(candidates: Sequence[Mapping], filters: Mapping[str, Backend], *,
                     params: GenerationParams = FILTER_PARAMS, prompts: Sequence[str] = FILTER_PROMPTS,
                     plural: bool = False) -> FilterOutcome:
    """Drop the candidates any filter model reconstructs (module docstring); one ``generate``
    call per filter model, holding the ``prompts`` of every candidate.

    ``filters``: filter-model name (the config role's model, recorded in the table) -> backend.
    No filters: every candidate is kept, with no records.
    """
    unknown = set(prompts) - set(FILTER_PROMPTS)
    if unknown or not prompts:
        raise ValueError(f"filter prompts must be among {FILTER_PROMPTS}, got {list(prompts)}")
    check_candidates(candidates)
    requests = [(c, name) for c in candidates for name in prompts]
    texts = [_BUILDERS[name](c["context"]) for c, name in requests]
    records, dropped = [], set()
    for filter_name, backend in filters.items():
        generations = backend.generate(texts, params) if texts else []
        if len(generations) != len(texts):
            raise RuntimeError(f"filter {filter_name!r}: {len(generations)} answers to {len(texts)} prompts")
        errors = [c["candidate_id"] for (c, _), g in zip(requests, generations) if g.status == STATUS_ERROR]
        if errors:
            first = next(g for g in generations if g.status == STATUS_ERROR)
            raise APIRequestError(f"knowledge filter {filter_name!r}: {len(errors)} prompts got no answer, e.g. for "
                                  f"candidate {errors[0]!r}: {first.error} (answered ones are cached; rerun to retry)")
        for i, c in enumerate(candidates):
            replies = dict(zip(prompts, generations[i * len(prompts):(i + 1) * len(prompts)]))
            rec = {"filter": filter_name, **judge_replies(c, replies, plural=plural)}
            records.append({k: rec[k] for k in RECORD_COLUMNS})
            if rec["dropped"]:
                dropped.add(c["candidate_id"])
    kept = [c for c in candidates if c["candidate_id"] not in dropped]
    return FilterOutcome(kept=kept, records=records)
