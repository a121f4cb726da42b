"""Probing a model with a benchmark's cloze items (Ravichander et al. §3, §4; Appendix A, B).

Two modes, one record per probed token and one per (passage, token type):

- ``blackbox`` (any model that generates, API models included): the paper's cloze prompt, one
  mask at a time, the prompts of every passage in one batched ``generate`` call, the
  ``<word>...</word>`` reply parsed and compared with the masked word
  (:mod:`memaudit.probes.cloze.prompts`). Refusals and replies without a word are counted per
  passage (``n_refusal``, ``n_invalid``), never dropped (:func:`~memaudit.probes.cloze.scoring.classify_reply`). ``prompt: one_word`` uses the paper's
  dataset-contamination prompt instead.
- ``logit`` (open models): the model's own next-token distribution at the masked word's
  position, from the text to its left (:meth:`~memaudit.backends.base.Backend.word_logprobs`):
  the word counts as reconstructed when each of its tokens is the model's top choice given the ones
  before it (``greedy``: greedy decoding writes the whole word, as the black-box mode compares the
  whole word; its first token alone would count the ``" 19"`` of any year), and the passage also
  gets the mean reciprocal rank ``mean(1 / (rank + 1))`` of the first tokens. This reads what the
  model would answer greedily, without a prompt, which suits base models that do not follow
  instructions; the table says which mode produced each row.

A passage counts as memorised when at least ``min_reconstructed`` (default 2, Appendix A) of its
tokens of a type are reconstructed. Document scores (higher = member), one method per token type:
``cloze_<type>`` = tokens reconstructed per passage (the mean over the document's passages); in logit mode also
``cloze_<type>_mrr`` = the mean reciprocal rank over them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.backends.base import GenerationParams
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_jsonl, write_csv
from memaudit.probes.cloze import prompts
from memaudit.probes.cloze.plan import method_name
from memaudit.probes.cloze.scoring import answered, classify_reply
from memaudit.probes.job import ProbeJob, document_scores

TOKEN_COLUMNS = ["passage_id", "doc_id", "label", "measure", "word", "start", "guess", "status", "rank",
                 "reconstructed", "truncated"]


def probe_tokens(items: Sequence[dict]) -> list[tuple[int, dict]]:
    """Every (item index, token) to probe; a word selected by several types is probed once per type."""
    return [(i, t) for i, it in enumerate(items) for t in it["tokens"]]


def blackbox_requests(tokens: Sequence[tuple[int, dict]], *, style: str, max_new_tokens: int,
                      chat: bool = True) -> tuple[list[str], list[str], GenerationParams]:
    """``(contexts, prompts, params)``: one greedy request per distinct masked context (a word selected
    by several token types is asked once)."""
    unique = list(dict.fromkeys(t["context"] for _, t in tokens))
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=0.0, chat=chat)
    return unique, [prompts.probe_prompt(c, style) for c in unique], params


def blackbox_answers(backend, tokens: Sequence[tuple[int, dict]], *, style: str, max_new_tokens: int,
                     chat: bool = True) -> list[dict]:
    """Ask for each masked word once (greedy) and parse the reply; one dict per token."""
    unique, texts, params = blackbox_requests(tokens, style=style, max_new_tokens=max_new_tokens, chat=chat)
    replies = dict(zip(unique, backend.generate(texts, params)))
    out = []
    for _, t in tokens:
        status, guess = classify_reply(replies[t["context"]], style=style, context=t["context"])
        out.append({"guess": guess, "status": status, "rank": None,
                    "reconstructed": bool(guess is not None and prompts.matches(guess, t["word"])),
                    "truncated": False})  # the prompt holds the word's context window whole
    return out


def logit_answers(backend, items: Sequence[dict], tokens: Sequence[tuple[int, dict]]) -> list[dict]:
    """The rank of each masked word's first token under the model, from its left context (one pass per text),
    and whether the model writes the whole word greedily (``reconstructed``)."""
    by_item: dict[int, list[tuple[int, int]]] = {}
    for i, t in tokens:
        by_item.setdefault(i, [])
        if (t["start"], t["end"]) not in by_item[i]:
            by_item[i].append((t["start"], t["end"]))
    order = sorted(by_item)
    if getattr(backend, "architecture", "causal") == "masked":  # it would see the word's right side
        raise ConfigError(f"model {getattr(backend, 'name', None)!r} is a masked LM: cloze_logit reads a causal "
                          "LM's next-token choice; a masked LM serves only as probes.cloze.reference.model")
    records = backend.word_logprobs([items[i]["text"] for i in order], [by_item[i] for i in order])
    read = {(i, span): rec for i, recs in zip(order, records) for span, rec in zip(by_item[i], recs)}
    # a word past max_tokens is read in a sliding window (``truncated``: part of its left context): kept in the
    # token table and counted in the log, where the rank was read as if in full context
    return [{"guess": None, "status": "ok", "rank": int(read[(i, (t["start"], t["end"]))]["rank"]),
             "reconstructed": bool(read[(i, (t["start"], t["end"]))]["greedy"]),
             "truncated": bool(read[(i, (t["start"], t["end"]))].get("truncated"))} for i, t in tokens]


def token_table(items: Sequence[dict], tokens: Sequence[tuple[int, dict]], answers: Sequence[dict]) -> pd.DataFrame:
    rows = [{"passage_id": items[i]["passage_id"], "doc_id": items[i]["doc_id"], "label": items[i]["label"],
             "measure": t["measure"], "word": t["word"], "start": t["start"], **a} for (i, t), a in zip(tokens, answers)]
    return pd.DataFrame(rows, columns=TOKEN_COLUMNS)


def text_table(items: Sequence[dict], tokens: pd.DataFrame, measures: Sequence[str], *,
               min_reconstructed: int) -> pd.DataFrame:
    """One row per (passage, token type): counts, memorised flag, mean reciprocal rank, reason; and the
    passage's ``split`` where the benchmark has a fixed one (an item's ``split``: no column without)."""
    rows = []
    for it in items:
        for m in measures:
            mine = tokens[(tokens["passage_id"] == it["passage_id"]) & (tokens["measure"] == m)]
            ranks = mine["rank"].dropna().to_numpy(float)
            n_rec = int(mine["reconstructed"].sum())
            rows.append({"passage_id": it["passage_id"], "doc_id": it["doc_id"], "label": it["label"],
                         **({"split": it["split"]} if "split" in it else {}), "measure": m,
                         "n_tokens": len(mine), "n_reconstructed": n_rec,
                         "n_invalid": int((mine["status"] == "invalid").sum()),
                         "n_refusal": int((mine["status"] == "refusal").sum()),
                         "n_error": int((mine["status"] == "error").sum()),
                         "mrr": float(np.mean(1.0 / (ranks + 1))) if len(ranks) else np.nan,
                         "memorised": n_rec >= min_reconstructed,
                         "reason": it.get("reasons", {}).get(m, ""),
                         # which reference model chose the tokens (its config name; blank in items of before
                         # it was recorded) and how it read them (masked or causal)
                         "reference_model": it.get("reference_model"),
                         "reference_scoring": it.get("reference_scoring", "causal")})
    return pd.DataFrame(rows)


def document_table(texts: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Per document and token type: reconstructed words per passage, the mean over the document's passages of
    each one's count (``cloze_<type> = sum_p n_reconstructed_p / n_passages``); logit mode adds the MRR (the mean
    over its passages with a word of the type).

    The paper's unit is the passage (a passage is memorised when at least ``min_reconstructed`` of its words
    are reconstructed, Appendix A); a document holds 1 to ``passages_per_document`` of them (fewer where the
    text is short: ``min_passages`` defaults to 1). A sum over them scored a document of four passages up to
    four times one of one, so where members and non-members differ in length the AUC measured length too
    (before cloze family version 10). Passages are of one length (``passage_words``), so the mean is a count
    per passage of that length; a one-passage document scores its passage's count, as before.

    A token type none of whose words got an answer (a black-box model that never writes ``<word>`` tags or
    refuses every prompt; or no word of the type in any passage) measured nothing: its scores are blank,
    so its AUC is none, not the 0.5 of every document scoring 0 (:func:`memaudit.stats.summary.metrics_table`)."""
    frames = []
    grouped = texts.groupby(["doc_id", "label", "measure"], sort=True)
    count = grouped["n_reconstructed"].mean().reset_index()
    frames.append(count.assign(method=count["measure"].map(method_name), score=count["n_reconstructed"].astype(float)))
    if mode == "logit":
        mrr = grouped["mrr"].mean().reset_index().fillna({"mrr": 0.0})
        frames.append(mrr.assign(method=mrr["measure"].map(lambda m: method_name(m, mrr=True)), score=mrr["mrr"]))
    out = pd.concat(frames, ignore_index=True)
    silent = answered(texts).groupby(texts["measure"]).sum() == 0
    out.loc[out["measure"].map(silent).astype(bool), "score"] = np.nan
    return out[["doc_id", "label", "method", "score"]].sort_values(["method", "doc_id"]).reset_index(drop=True)


def run_job(job: ProbeJob) -> None:
    cfg = job.settings
    items = read_jsonl(job.inputs["records"])
    if not items:
        raise InputError(f"{job.inputs['records']}: no cloze items")
    tokens = probe_tokens(items)
    measures = [m for m in cfg["measures"]]
    job.progress(f"{len(tokens)} masked words in {len(items)} passages ({job.mode} mode)")
    with job.opened_backend() as backend:
        if job.mode == "logit":
            answers = logit_answers(backend, items, tokens) if tokens else []
        else:
            # an instruction prompt: the chat template where the model has one (HFBackend applies it only then)
            answers = blackbox_answers(backend, tokens, style=cfg["prompt"],
                                       max_new_tokens=int(cfg["max_new_tokens"])) if tokens else []
        dtype = getattr(backend, "dtype", None)
    table = token_table(items, tokens, answers)
    texts = text_table(items, table, measures, min_reconstructed=int(cfg["min_reconstructed"]))
    ids = {"benchmark": job.benchmark, "model": job.model, "mode": job.mode}
    write_csv(job.outputs["tokens"], table.assign(**ids)[[*ids, *table.columns]])
    write_csv(job.outputs["texts"], texts.assign(**ids)[[*ids, *texts.columns]])
    write_csv(job.outputs["documents"], document_scores(document_table(texts, job.mode), model=job.model, dtype=dtype))
    for m in measures:
        cut = int(table.loc[table["measure"] == m, "truncated"].astype(bool).sum())
        for line in type_summary(texts[texts["measure"] == m], m, job.mode, truncated=cut):
            job.progress(line)


def type_summary(mine: pd.DataFrame, measure: str, mode: str, *, truncated: int = 0) -> list[str]:
    """The probe log's lines on one token type's rows of the texts table: words reconstructed, passages
    memorised, the documents with no word of the type (scored 0: :func:`document_table`), the ``truncated``
    words read with their left context cut at max_tokens, a type no word of which got an answer."""
    wordless = int((mine.groupby("doc_id")["n_tokens"].sum() == 0).sum())
    lines = [f"{measure}: {int(mine['n_reconstructed'].sum())} of {int(mine['n_tokens'].sum())} words reconstructed; "
             f"{int(mine['memorised'].sum())} of {len(mine)} passages memorised"
             + (f"; {wordless} document(s) had no word of the type: scored 0 (no reconstruction"
                f"{', MRR 0' if mode == 'logit' else ''}), as the paper counts a text with none" if wordless else "")
             + (f"; {truncated} word(s) read with their left context cut at the model's max_tokens (a sliding "
                f"window; tokens table: truncated)" if truncated else "")]
    if not answered(mine).sum():
        lines.append(f"{measure}: no word answered ({int(mine['n_invalid'].sum())} invalid, "
                     f"{int(mine['n_refusal'].sum())} refused, {int(mine['n_error'].sum())} failed): no score, no AUC")
    return lines


def plan_records(config: dict, model: str, items: Sequence[dict], *, mode: str, datasets=None) -> list[dict]:
    """The requests ``cloze_blackbox`` will send to API model ``model`` (for ``memaudit estimate-cost``):
    the paper's prompt once per distinct masked context, as :func:`run_job` sends them. The logit mode
    reads an open model's next-token distribution and sends nothing."""
    from memaudit.backends import is_api_model
    from memaudit.backends.planning import plan_requests

    if mode != "blackbox" or not is_api_model(config["models"][model]):
        return []
    cfg = ProbeJob("cloze", mode, model, "", config, {}, {}).settings
    _, texts, params = blackbox_requests(probe_tokens(items), style=cfg["prompt"],
                                         max_new_tokens=int(cfg["max_new_tokens"]))
    return plan_requests(model, texts, params)
