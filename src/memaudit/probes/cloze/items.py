"""A benchmark's cloze items: each passage's surprisal tokens, chosen once and probed on every model.

For every passage: its candidate words (:mod:`~memaudit.probes.cloze.candidates`), their
log-probability and rank under the *reference* model (one forward pass per passage,
:meth:`~memaudit.backends.base.Backend.word_logprobs`), and per token type (``prob``, ``rank``,
``person``) the selected surprisal tokens with their cloze contexts
(:mod:`~memaudit.probes.cloze.select`; Ravichander et al. §3, Appendix A). Optionally a
*knowledge filter* (an instruction-tuned model, the ``filter`` role) drops the tokens it can
guess from context alone (§3, "Accounting for context using knowledge filters").

A threshold given as ``"tune"`` is fitted on the benchmark's own texts by
:func:`~memaudit.probes.cloze.select.tune_threshold`, which reads no labels (so it cannot fit the
member split it is later tested on); the value used is written in every item and in the
candidates table. In a benchmark with a fixed split (each passage's ``meta.split``: BookMIA's first
1870 rows are the paper's validation split) it is fitted on the validation passages only, as the
paper tunes on its held-out 1870 rows, and each item records its passage's ``split`` for the
tables that report on the test passages. A passage left with fewer than ``min_reconstructed`` tokens of a type is kept,
with ``too_few_tokens`` as its reason for that type: it can never be flagged, and the tables count it.

A question-answer passage (``meta.question`` opens its text, as :func:`memaudit.datasets.qa.render_qa`
writes it: the question, the lettered choices, ``Answer: X. <choice>``) has its words masked in the
question only (``qa_scope: question``, the default; ``all`` masks the choices and the answer line
too). A choice is a short isolated word whose context is a letter and a line break, so whether a
model "reconstructs" it says more about the format than about the question; the answer line is
template (spaCy tags its ``Answer`` as a person name). On the demo's QA set, 30 of the 36 tokens
reconstructed on *clean* questions by the model fine-tuned on the other half were choices or that
``Answer`` (docs/probes/cloze.md). A masked question word still has the choices in its context,
and a word that recurs there (a choice repeating it) is no candidate: the once-in-the-window rule
reads the whole text. Each item records the scope and how many candidate words it left out.
"""

from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from memaudit.datasets.types import VALIDATION
from memaudit.backends.base import GENERATE, WORD_LOGPROBS
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_jsonl, write_csv, write_jsonl
from memaudit.models import masked_word_logprobs  # noqa: F401 -- a masked reference's numbers: in the cloze fingerprint
from memaudit.models import window_word_logprobs  # noqa: F401 -- a causal reference's fills: in the cloze fingerprint
from memaudit.probes.cloze.candidates import cloze_context, context_bounds, extract_candidates_many, spans
from memaudit.probes.cloze.select import MEASURES, PERSON, PROB, RANK, select_surprisal_tokens, tune_threshold

TOO_FEW = "too_few_tokens"
QA_SCOPES = ("question", "all")


def mask_limit(passage: dict, qa_scope: str = "question") -> tuple[int, str]:
    """Where maskable words end in ``passage["text"]``, and the scope's name (module docstring).

    ``(len(question), "question")`` for a question-answer passage under ``qa_scope: question``,
    else ``(len(text), "text")``.
    """
    if qa_scope not in QA_SCOPES:
        raise ValueError(f"qa_scope: {qa_scope!r} is not one of {', '.join(QA_SCOPES)}")
    text = passage["text"]
    question = (passage.get("meta") or {}).get("question")
    if qa_scope == "question" and isinstance(question, str) and question.strip() and text.startswith(question):
        return len(question), "question"
    return len(text), "text"


def tuning_passages(passages: Sequence[dict]) -> list[int] | None:
    """The indices of the passages a ``"tune"`` threshold is fitted on: in a benchmark with a fixed
    split (a passage's ``meta.split``), its validation passages; else ``None``, every passage."""
    splits = [(p.get("meta") or {}).get("split") for p in passages]
    if not any(splits):
        return None
    return [i for i, split in enumerate(splits) if split == VALIDATION]


def thresholds_for(settings: dict, scores: Sequence[Sequence[dict]],
                   tune_on: Sequence[int] | None = None) -> dict[str, float]:
    """The Prob and Rank thresholds: the configured numbers, or tuned (label-free) where ``"tune"``, on
    the texts ``tune_on`` indexes (:func:`tuning_passages`; ``None``: every text)."""
    tuning = scores if tune_on is None else [scores[i] for i in tune_on]
    out = {}
    for measure, key in ((PROB, "prob_threshold"), (RANK, "rank_threshold")):
        value = settings[key]
        if value == "tune":
            if not tuning:
                raise InputError(f"cloze {key}: tune, but the benchmark's fixed split has no validation passage "
                                 f"to tune on (published.validation_rows)")
            value = tune_threshold(tuning, measure, target_coverage=settings["tune_coverage"],
                                   min_tokens=settings["min_reconstructed"]).threshold
        out[measure] = float(value)
    return out


SCORINGS = {
    "masked": "masked, with the context on both sides (a masked LM, as the paper's BERT)",
    "causal": "from their left context (a causal LM)",
    "window": "among {fills} candidate fills by the likelihood of the whole context window, both sides (a causal LM)",
}


def reference_scoring(scores: Sequence[Sequence[dict]]) -> str:
    """How the reference model read the words: ``masked`` (both sides of the word, a masked LM),
    ``causal`` (its left context) or ``window`` (a causal LM's candidate fills scored by the whole
    window's likelihood, ``reference.fills``); the records' ``scoring``, one for all."""
    kinds = {r.get("scoring", "causal") for recs in scores for r in recs}
    if len(kinds) > 1:
        raise ValueError(f"the reference model's records mix scorings {sorted(kinds)}")
    return kinds.pop() if kinds else "causal"


def build_items(passages: Sequence[dict], reference, settings: dict, *, knowledge_filter=None,
                progress: Callable[[str], None] = print) -> tuple[list[dict], pd.DataFrame]:
    """Cloze items (one per passage) and the candidates table (one row per candidate word).

    ``reference``: a backend with ``word_logprobs`` (the reference model). ``knowledge_filter``:
    optional ``f(tokens, texts) -> set of (passage index, start)`` to drop, given every selected token
    (``(passage index, start) -> {"word", "start", "end", "context", ...}``) and the passages' texts
    (see :mod:`memaudit.probes.cloze.knowledge_filter`).
    """
    texts = [p["text"] for p in passages]
    limits = [mask_limit(p, settings.get("qa_scope", "question")) for p in passages]
    found = extract_candidates_many(texts, context_chars=settings["context_chars"])
    candidates = [[c for c in cs if c.end <= limit] for cs, (limit, _) in zip(found, limits)]
    left_out = [len(f) - len(c) for f, c in zip(found, candidates)]
    progress(f"{sum(map(len, candidates))} candidate words in {len(texts)} passages"
             + (f" ({sum(left_out)} more in question-answer texts' choices and answer lines left out: "
                f"qa_scope question)" if sum(left_out) else ""))
    # a masked LM (the paper's BERT) reads the masked word's context window, the one the probe shows
    # (``bounds``), as does a causal reference scoring candidate fills (``reference.fills``); a causal
    # reference without fills reads all the text to the word's left
    bounds = [[context_bounds(t, c.start, c.end, settings["context_chars"]) for c in cs]
              for t, cs in zip(texts, candidates)]
    fills = (settings.get("reference") or {}).get("fills")
    scores = reference.word_logprobs(texts, [spans(c) for c in candidates], bounds=bounds,
                                     **({"fills": fills} if fills else {}))
    scoring = reference_scoring(scores)
    cut = sum(bool(s.get("truncated")) for ss in scores for s in ss)
    if cut:  # a word past the model's max_tokens is read in a sliding window: a part of its left context
        progress(f"{cut} candidate word(s) read with their context cut at the reference model's max_tokens "
                 f"(candidates table: ref_truncated)")
    # which model chose the words (its config name), recorded beside how it read them: the tables name it
    reference_model = getattr(reference, "name", None)
    tune_on = tuning_passages(passages)
    thresholds = thresholds_for(settings, scores, tune_on)
    tuned = "tune" in (settings["prob_threshold"], settings["rank_threshold"])
    progress(f"thresholds: log-probability < {thresholds[PROB]}, rank > {thresholds[RANK]:.0f}"
             + (f" (tuned on the {len(tune_on)} validation passages of the fixed split)"
                if tuned and tune_on is not None else ""))
    progress(f"reference model {reference_model!r}: the words scored "
             + SCORINGS.get(scoring, scoring).format(fills=fills))
    measures = [m for m in MEASURES if m in settings["measures"]]
    selected = [{m: select_surprisal_tokens(c, s, m, prob_threshold=thresholds[PROB],
                                            rank_threshold=thresholds[RANK], k=settings["top_k"])
                 for m in measures} for c, s in zip(candidates, scores)]
    tokens = [[{"measure": m, "start": t.candidate.start, "end": t.candidate.end, "word": t.candidate.word,
                "context": cloze_context(texts[i], t.candidate.start, t.candidate.end,
                                         width=settings["context_chars"]),
                "ref_logprob": t.logprob, "ref_rank": t.rank} for m in measures for t in selected[i][m]]
              for i in range(len(passages))]
    dropped: set = set()
    if knowledge_filter is not None:
        unique = {(i, t["start"]): t for i, ts in enumerate(tokens) for t in ts}
        dropped = knowledge_filter(unique, texts)
        progress(f"knowledge filter: {len(dropped)} of {len(unique)} tokens guessed from context, dropped")
    items = []
    for i, p in enumerate(passages):
        kept = [t for t in tokens[i] if (i, t["start"]) not in dropped]
        counts = {m: sum(t["measure"] == m for t in kept) for m in measures}
        split = (p.get("meta") or {}).get("split")
        items.append({"passage_id": p["passage_id"], "doc_id": p["doc_id"], "label": int(p["label"]),
                      **({"split": split} if split else {}), "text": p["text"], "n_candidates": len(candidates[i]),
                      "mask_scope": limits[i][1],
                      "n_out_of_scope": left_out[i], "tokens": kept,
                      "n_filtered": len(tokens[i]) - len(kept),
                      "reasons": {m: TOO_FEW for m, n in counts.items() if n < settings["min_reconstructed"]},
                      "thresholds": thresholds, "reference_model": reference_model,
                      "reference_scoring": scoring})
    rows = [{"passage_id": p["passage_id"], "doc_id": p["doc_id"], "label": int(p["label"]), "word": c.word,
             "start": c.start, "end": c.end, "pos": c.pos, "is_person": c.is_person,
             "ref_logprob": s.get("first_logprob"), "ref_word_logprob": s.get("logprob"), "ref_rank": s.get("rank"),
             "ref_model": reference_model, "ref_scoring": scoring, "ref_truncated": bool(s.get("truncated")),
             # window scoring (reference.fills): the left-context numbers it replaces, and its candidates
             "ref_left_logprob": s.get("left_first_logprob"), "ref_left_rank": s.get("left_rank"),
             "ref_n_fills": s.get("n_fills"), "ref_best_fill": s.get("best_fill"),
             "selected_as": ";".join(sorted(t["measure"] for t in tokens[i] if t["start"] == c.start)),
             "filtered": (i, c.start) in dropped}
            for i, p in enumerate(passages) for c, s in zip(candidates[i], scores[i])]
    return items, pd.DataFrame(rows)


def run_items(passages_path: str, reference, settings: dict, *, out_items: str, out_candidates: str,
              knowledge_filter=None, progress: Callable[[str], None] = print) -> None:
    items, table = build_items(read_jsonl(passages_path), reference, settings, knowledge_filter=knowledge_filter,
                               progress=progress)
    write_jsonl(out_items, items)
    write_csv(out_candidates, table)


def knowledge_filter_from(config: dict, settings: dict, model_dir: str | None, *, rule: str | None = None,
                          progress: Callable[[str], None] = print):
    """The configured knowledge filter (``probes.cloze.filter.model``) as :func:`build_items` takes it, or None;
    the prompts' filter reports through ``progress`` how many replies gave a word, refused or gave none."""
    name = (settings.get("filter") or {}).get("model")
    if not name:
        return None
    from memaudit.backends import open_backend
    from memaudit.probes.cloze.knowledge_filter import knowledge_filter

    logit = settings["filter"].get("mode", "generate") == "logit"
    backend = open_backend(config, name, model_dir=model_dir, rule=rule, role="probes.cloze.filter.model",
                           needs={WORD_LOGPROBS if logit else GENERATE})
    if logit:
        from memaudit.probes.cloze.knowledge_filter import top_choice_filter

        if getattr(backend, "architecture", "causal") == "masked":  # it would see the word's right side
            raise ConfigError(f"probes.cloze.filter.model: model {name!r} is a masked LM: the logit filter reads a "
                              "causal LM's next-token choice; a masked LM serves only as probes.cloze.reference.model")

        return lambda tokens, texts: top_choice_filter(texts, tokens, backend)

    def drop(tokens: dict, texts) -> set:
        candidates = [{"candidate_id": f"{i}:{start}", "doc_id": str(i), "word": t["word"], "context": t["context"]}
                      for (i, start), t in tokens.items()]
        outcome = knowledge_filter(candidates, {name: backend})
        for line in outcome.replies():
            progress(line)
        kept = {c["candidate_id"] for c in outcome.kept}
        return {key for key in tokens if f"{key[0]}:{key[1]}" not in kept}

    return drop
