"""DE-COP's items: the verbatim passage and its three paraphrases, built once per benchmark.

Only this module's code, and what it imports, builds the items (the ``decop_items`` and
``ktd_pool`` scripts reach it through :mod:`memaudit.probes.decop.runner`'s re-export, so that
their text, which Snakemake tracks, did not change when it moved here), and its own code version
(the registry's ``decop`` ``items`` stage) decides when they are rebuilt: a change to how models
are probed or scored reruns the probes, not the paraphrasing before them, nor KTD, which reads
the same items.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from memaudit.io import read_jsonl, write_csv, write_jsonl
from memaudit.errors import InputError
from memaudit.probes.decop.construct import passages_of, select_documents, words_for_tokens
from memaudit.probes.decop.paraphrase import REASONS, QCSettings, paraphrase_with_qc, quality_table

log = logging.getLogger(__name__)

__all__ = ["build_items", "make_paraphraser", "published_items_for_run"]


def build_items(documents_path: str | Path, cfg: dict, seed: int, paraphraser, encoder,
                out_items: str | Path, out_qc: str | Path, *,
                progress: Callable[[str], None] = log.info) -> list[dict]:
    """Multiple-choice items (verbatim passage + three QC'd paraphrases) for a benchmark's documents.

    Passages are cut from each document's text — for the demo benchmarks exactly the excerpt a
    contaminated model was fine-tuned on — and shared by every probed model.
    """
    docs = read_jsonl(documents_path)
    roles = select_documents(docs, n_documents=cfg.get("n_documents"),
                             calibration_documents=int(cfg["calibration_documents"]), seed=seed,
                             where=str(documents_path))
    by_id = {d["doc_id"]: d for d in docs}
    lengths = [int(n) for n in cfg["lengths"]]
    todo = []
    for doc_id, role in roles.items():
        d = by_id[doc_id]
        for length in lengths:
            for k, text in enumerate(passages_of(d["text"], length, cfg["passages_per_document"],
                                                 seed=seed, doc_id=doc_id)):
                todo.append((d, role, length, k, text))
    progress(f"{len(roles)} documents ({sum(r == 'calibrate' for r in roles.values())} for calibration), "
             f"{len(todo)} passages to paraphrase")
    if not todo:  # short texts (WikiMIA's 32 words): else an empty quality table, a KeyError
        longest = max(len(by_id[doc_id]["text"].split()) for doc_id in roles)
        raise InputError(f"{documents_path}: no document is long enough for a DE-COP passage of {min(lengths)} tokens "
                         f"(at least {words_for_tokens(min(lengths))} words, ending a sentence); the longest of the "
                         f"{len(roles)} has {longest} words: give longer texts, or a shorter probes.decop.lengths "
                         f"(64, 128 or 256 tokens)")
    short = sorted(set(roles) - {d["doc_id"] for d, *_ in todo})
    if short:  # no passage, so no item: DE-COP and KTD leave the document out, and say so
        progress(f"{len(short)} of the {len(roles)} documents give no passage of {min(lengths)} tokens "
                 f"(at least {words_for_tokens(min(lengths))} words, ending a sentence) and have no item: "
                 + ", ".join(f"{i} ({len(by_id[i]['text'].split())} words)" for i in short))
    qc = QCSettings.from_config(cfg["paraphrase"])
    t0 = time.time()
    results = paraphrase_with_qc([t[4] for t in todo], [t[2] for t in todo], paraphraser, encoder, qc,
                                 progress=progress)
    progress(f"paraphrases in {time.time() - t0:.1f}s")
    who = paraphraser.describe()
    items = []
    for (d, role, length, k, text), res in zip(todo, results):
        if res.paraphrases is None:
            continue
        pid = f"{d['doc_id']}#L{length}p{k}"
        items.append({"item_id": pid, "passage_id": pid, "doc_id": d["doc_id"], "label": int(d["meta"]["label"]),
                      "options": [text, *res.paraphrases], "answer": 0,
                      "meta": {"title": d["title"], "author": d["author"], "kind": d["kind"], "role": role,
                               "length_tokens": length, "attempts": res.attempts, **who}})
    qc_table = quality_table([(d["doc_id"], int(d["meta"]["label"]), role) for d, role, *_ in todo], results,
                             paraphraser=who["paraphraser"], per_passage=3,
                             documents=[(i, int(by_id[i]["meta"]["label"]), role) for i, role in roles.items()])
    write_csv(out_qc, qc_table)
    write_jsonl(out_items, items)
    dropped = int((qc_table["n_passages"] - qc_table["n_kept"]).sum())
    progress(f"{len(items)} items, {dropped} passage(s) dropped by quality control")
    if not any(it["meta"]["role"] == "evaluate" for it in items):
        raise InputError(f"{documents_path}: quality control rejected every evaluated passage "
                         f"(see {out_qc}); loosen probes.decop.paraphrase or change the paraphraser")
    return items


def published_items_for_run(documents_path: str | Path, published: dict, cfg: dict, seed: int,
                            out_items: str | Path, out_qc: str | Path, *,
                            progress: Callable[[str], None] = log.info) -> list[dict]:
    """The ready-made questions of a BookTection/arXivTection benchmark, with the run's roles.

    The documents are chosen and split into calibration and evaluation exactly as for built
    benchmarks (:func:`select_documents`: clean ``Label`` 0 documents held out for Algorithm 1);
    only questions of the configured ``lengths`` are kept. The QC table records that nothing was
    paraphrased here (the published paraphrases were made by Claude 2.0 for the paper).
    """
    from memaudit.datasets.published import published_items

    docs = read_jsonl(documents_path)
    roles = select_documents(docs, n_documents=cfg.get("n_documents"),
                             calibration_documents=int(cfg["calibration_documents"]), seed=seed,
                             where=str(documents_path))
    lengths = {int(n) for n in cfg["lengths"]}
    source = published.get("path") or published.get("hf") or published["format"]
    items = []
    published_rows, _ = published_items(published)  # rejects: listed by the benchmark_dataset job
    for it in published_rows:
        if it["doc_id"] in roles and int(it["meta"]["length_tokens"]) in lengths:
            it["meta"].update(role=roles[it["doc_id"]], paraphraser=f"published ({published['format']})")
            items.append(it)
    if not any(it["meta"]["role"] == "evaluate" for it in items):
        raise InputError(f"{source}: no question of length(s) {sorted(lengths)} tokens among the selected "
                         f"documents (probes.decop.lengths; arXivTection's questions count as 128 tokens, "
                         f"BookTection's small/medium/large as 64/128/256)")
    by_doc = pd.DataFrame([{"doc_id": it["doc_id"], "label": it["label"], "role": it["meta"]["role"]}
                           for it in items])
    qc = by_doc.groupby(["doc_id", "label", "role"]).size().rename("n_passages").reset_index()
    qc["n_kept"] = qc["n_passages"]
    qc["n_candidates"] = 3 * qc["n_passages"]
    for r in REASONS:
        qc[f"n_{r}"] = 0
    qc["accept_rate"] = 1.0
    for r in REASONS:
        qc[f"{r}_rate"] = 0.0
    qc["paraphraser"] = f"published ({source})"
    write_csv(out_qc, qc)
    write_jsonl(out_items, items)
    progress(f"{len(items)} published questions from {source} ({qc['doc_id'].nunique()} documents, "
             f"{int((qc['role'] == 'calibrate').sum())} for calibration)")
    return items



def make_paraphraser(config: dict, name: str, *, model_dir: str | Path | None = None, rule: str | None = None):
    """The configured paraphrasing model (the ``paraphraser`` role): a local instruct model (one
    paraphrase per request, sampled at ``paraphrase.temperature``), a local encoder-decoder
    paraphrase model such as T5 (``paraphrase.prefix`` + passage, sampled by ``generate()``; see
    :func:`memaudit.probes.decop.paraphrase.local_paraphraser`) or an API/served model with the
    paper's prompts."""
    from memaudit.backends import is_api_model, open_backend
    from memaudit.backends.base import GENERATE

    settings = config["probes"]["decop"]["paraphrase"]
    backend = open_backend(config, name, model_dir=model_dir, rule=rule, role="probes.decop.paraphrase.model",
                           needs={GENERATE})
    if is_api_model(config["models"][name]):
        from memaudit.probes.decop.paraphrase import BackendParaphraser

        return BackendParaphraser(backend, name=name, temperature=float(settings["temperature"]))
    from memaudit.probes.decop.paraphrase import local_paraphraser

    return local_paraphraser(backend.model, backend.tokenizer, name=name, settings=settings, seed=int(config["seed"]))
