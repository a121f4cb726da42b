"""Prefix probing: show a model the start of a passage and compare its continuation with the original.

The black-box baseline of the information-guided probes paper (Appendix E: the
first 50 words as prefix, the instruction "Please complete the following text
with more than 150 words:", scored by the longest common subsequence in words,
after Karamolegkou et al. 2023) and the literal-copying measure of CopyBench
(ROUGE-L against the next 50 words). It needs only generation, so it runs on API
models as well as local ones.

Two scores per item, both higher = more likely a member (memaudit's convention):

``prefix_rougeL``
    ROUGE-L *recall*: the longest common word subsequence between generation
    and reference continuation, divided by the reference length. CopyBench reports
    the F-measure of a length-limited generation; recall is used here because
    chat models often open with a preamble ("Sure, here is the rest: ...") or run
    past the reference, and the F-measure then penalises a verbatim reproduction
    for the words around it.
``prefix_lcs_words``
    the longest run of consecutive words the generation shares with the reference
    (Karamolegkou et al.'s "LCS" in words): long runs are what a legal expert
    reads as verbatim copying.

An empty answer scores 0 on both. A refusal is scored on its text like any answer
(a real one reproduces nothing; the detector also reads dialogue that opens a
continuation as one) and counted: the refusal and invalid rates sit beside the
scores in ``prefix_outcomes.json``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from memaudit.backends.api import APIRequestError
from memaudit.backends.base import (STATUS_ERROR, STATUSES, Backend, GenerationParams,
                                    generate_batched_if_greedy)
from memaudit.io import write_csv, write_json, write_jsonl
from memaudit.probes.job import document_scores
from memaudit.probes.overlap import lcs_length, longest_common_run
from memaudit.probes.prefix.plan import METHODS
from memaudit.probes.token_prob.methods import aggregate_documents

log = logging.getLogger(__name__)

INSTRUCTION = "Please complete the following text with more than 150 words:"  # information-guided probes, App. E
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lowercased alphanumeric words (ROUGE's tokenisation: punctuation and case do not count)."""
    return _WORD.findall(text.lower())


def score_continuation(generation: str, reference: str) -> dict[str, float]:
    gen, ref = words(generation), words(reference)
    if not ref:
        raise ValueError("empty reference continuation")
    return {"prefix_rougeL": lcs_length(gen, ref) / len(ref), "prefix_lcs_words": float(longest_common_run(gen, ref))}


def prompts_for(items: Sequence[dict], *, instruction: str, chat: bool) -> list[str]:
    """The probe prompts: instruction + prefix for chat models, the bare prefix for plain-text models."""
    if chat:
        # A blank line, where the paper's Table 8 prints instruction and prefix in one cell with a space
        # (its Appendix E says only "before the prefix"; Karamolegkou et al.'s code sends the bare prefix):
        # it sets the text to continue apart from the instruction, as DE-COP's C.1 prompt does, and is what
        # every cached API answer was asked. docs/probes/prefix.md, "Prompts and settings".
        return [f"{instruction}\n\n{it['prefix']}" for it in items]
    return [it["prefix"] for it in items]


def generation_params(cfg: dict, *, chat: bool) -> GenerationParams:
    """Greedy decoding with the probe's token limit, repetition penalty and stop strings."""
    return GenerationParams(max_new_tokens=int(cfg["max_new_tokens"]), temperature=0.0,
                            system_prompt=cfg.get("system_prompt") if chat else None, chat=chat,
                            repetition_penalty=float(cfg.get("repetition_penalty", 1.0)),
                            stop=tuple(cfg.get("stop") or ()))


def run_prefix_probe(backend: Backend, items: Sequence[dict], cfg: dict, *, chat: bool,
                     out_items: str | Path, out_documents: str | Path, out_outcomes: str | Path,
                     progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """Generate a continuation of every item's prefix, score it, write item, document and outcome tables."""
    params = generation_params(cfg, chat=chat)
    prompts = prompts_for(items, instruction=cfg["instruction"], chat=chat)
    progress(f"{len(prompts)} prefix probes ({'chat' if chat else 'plain text'}, "
             f"max {params.max_new_tokens} new tokens)")
    # through the generation cache that CopyBench's literal mode reads too
    generations = generate_batched_if_greedy(backend, prompts, params, max_rows=getattr(backend, "batch_size", 16))
    rows, long_rows = [], []
    for it, g in zip(items, generations):
        # A refusal is scored on its text, not as 0: a real one reproduces nothing anyway, and the
        # detector reads dialogue that opens a continuation ("I'm sorry, Harry, but I can't ...") as
        # one, which would hide a verbatim copy. Its status is counted all the same.
        scores = (score_continuation(g.text or "", it["continuation"]) if g.status != STATUS_ERROR
                  else dict.fromkeys(METHODS, 0.0))
        rows.append({"item_id": it["item_id"], "passage_id": it["passage_id"], "doc_id": it["doc_id"],
                     "label": int(it["label"]), "status": g.status, "from_cache": bool(g.from_cache),
                     "input_tokens": g.input_tokens, "output_tokens": g.output_tokens, **scores,
                     "generation": g.text, "error": g.error})
        long_rows += [{"passage_id": it["passage_id"], "doc_id": it["doc_id"], "label": int(it["label"]),
                       "method": m, "score": scores[m]} for m in METHODS]
    statuses = Counter(r["status"] for r in rows)
    if statuses[STATUS_ERROR]:
        first = next(r for r in rows if r["status"] == STATUS_ERROR)
        raise APIRequestError(f"{statuses[STATUS_ERROR]} prefix probes got no answer, e.g. {first['item_id']}: "
                              f"{first['error']} (answered ones are cached; rerun to retry the rest)")
    docs = aggregate_documents(pd.DataFrame(long_rows), cfg.get("aggregate", "mean"))
    docs = document_scores(docs, model=backend.name, dtype=backend.describe().get("dtype"))
    n = len(rows)
    outcomes = {"n_items": n, **{s: statuses.get(s, 0) for s in STATUSES},
                "refusal_rate": statuses.get("refusal", 0) / n, "invalid_rate": statuses.get("invalid", 0) / n,
                "n_from_cache": sum(r["from_cache"] for r in rows),
                "input_tokens": sum(r["input_tokens"] for r in rows),
                "output_tokens": sum(r["output_tokens"] for r in rows),
                "prompt_style": "chat" if chat else "plain",
                # what a chat model was sent before the prefix (a plain-text model: the bare prefix)
                "instruction": cfg["instruction"] if chat else None, "system_prompt": params.system_prompt}
    write_jsonl(out_items, rows)
    write_csv(out_documents, docs)
    write_json(out_outcomes, outcomes)
    progress(f"{n} items: {dict(statuses)}; {outcomes['n_from_cache']} from the cache")
    return docs


def build_pairs(passages_path: str | Path, out_pairs: str | Path, *, prefix_words: int,
                continuation_words: int) -> int:
    """The prefix_dataset job: a benchmark's passages to prefix/continuation pairs
    (:func:`memaudit.datasets.prefix.prefix_items`: a published prefix, NYT Exhibit J's, as given;
    else the passage's first ``prefix_words`` words). Returns how many pairs were written."""
    from memaudit.datasets.prefix import prefix_items
    from memaudit.datasets.types import Passage
    from memaudit.io import read_jsonl

    from memaudit.errors import InputError

    passages = [Passage.from_dict(d) for d in read_jsonl(passages_path)]
    try:
        items = prefix_items(passages, prefix_words=prefix_words, continuation_words=continuation_words)
    except InputError as exc:  # which benchmark had nothing to probe: its passages file says
        raise InputError(f"{passages_path}: {exc}") from None
    write_jsonl(out_pairs, (it.__dict__ for it in items))
    return len(items)


def settings(config: dict, benchmark: str | None) -> dict:
    """``probes.prefix`` as one benchmark's jobs see it (less ``models``/``benchmarks``, which choose
    jobs): ``instruction`` resolved to that benchmark's, given once or per benchmark (Appendix E of
    the information-guided probes: the fiction prompt for books, "Complete exactly and don't
    hallucinate" for news), so changing one benchmark's instruction reruns only its jobs."""
    from memaudit.jobs import job_settings

    return job_settings(config, "prefix", benchmark, {"instruction": INSTRUCTION})


def run_job(job) -> pd.DataFrame:
    """The prefix probe job (:class:`memaudit.probes.job.ProbeJob`) of one (benchmark, model)."""
    from memaudit.backends import is_api_model
    from memaudit.io import read_jsonl

    cfg = settings(job.config, job.benchmark)
    chat = is_api_model(job.config["models"][job.model]) or cfg.get("local_prompt") == "chat"
    with job.opened_backend() as backend:
        return run_prefix_probe(backend, read_jsonl(job.inputs["pairs"]), cfg, chat=chat,
                                out_items=job.outputs["generations"], out_documents=job.outputs["documents"],
                                out_outcomes=job.outputs["outcomes"], progress=job.progress)


def plan_records(config: dict, model: str, items: Sequence[dict], *, mode: str = "", datasets=None) -> list[dict]:
    """The requests the prefix probe will send to API model ``model`` (for ``memaudit estimate-cost``)."""
    from memaudit.backends import is_api_model

    if not is_api_model(config["models"][model]):
        return []
    from memaudit.backends.planning import plan_requests

    cfg = settings(config, Path(datasets).name if datasets is not None else None)
    # every field of the request's cache key, so requests already cached are counted as free
    return plan_requests(model, prompts_for(items, instruction=cfg["instruction"], chat=True),
                         generation_params(cfg, chat=True))
