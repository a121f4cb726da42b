"""Running the token-probability probes: every method from the stored statistics of one forward pass per
(model, texts) (:mod:`memaudit.probes.token_prob.forward`, the ``token_stats`` jobs), and ``lowercase`` from
the pass over the lowercased texts too (the ``token_stats_lowercase`` jobs)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from memaudit.io import write_csv
from memaudit.probes.job import document_scores
from memaudit.probes.token_prob.forward import load_passages
from memaudit.probes.token_prob.methods import ScoringContext, aggregate_documents, build_methods, score_passages
from memaudit.models.token_stats import load_many, load_provenance

log = logging.getLogger(__name__)


def run_job(job) -> None:
    """The token_prob probe job (:class:`memaudit.probes.job.ProbeJob`): every method from stored statistics."""
    names, paths = list(job.params["reference_models"]), list(job.inputs.get("references", []))
    if len(names) != len(paths):
        raise ValueError(f"{len(names)} reference model names for {len(paths)} token statistics files")
    lowercase = list(job.inputs.get("lowercase", []))  # one file where the lowercase score is on, else none
    run_token_prob_scores(job.model, job.inputs["stats"], dict(zip(names, paths)), job.inputs["passages"],
                          job.settings, job.outputs["passages"], job.outputs["documents"], progress=job.progress,
                          benchmark=job.benchmark, lowercase_path=lowercase[0] if lowercase else None)


def run_token_prob_scores(model: str, stats_path: str | Path, references: Mapping[str, str | Path],
                          passages_path: str | Path, cfg: dict, out_passages: str | Path,
                          out_documents: str | Path, *, progress: Callable[[str], None] = log.info,
                          benchmark: str | None = None, lowercase_path: str | Path | None = None) -> pd.DataFrame:
    """Score every configured method from stored statistics; write passage and document tables.

    ``references`` maps each reference model's name to its statistics on the same passages, and
    ``lowercase_path`` holds the model's on the lowercased passages (without it, no ``lowercase`` score). A passage
    that ``lowercase`` or a reference method cannot compare on the same characters under both passes
    (:func:`memaudit.probes.token_prob.methods.shared_span`) is left out of that method's tables, and
    counted in one line of the log per method, naming the benchmark and model.
    """
    passages = load_passages(passages_path)
    stats_path = Path(stats_path)
    references = {name: load_many(Path(p), "original") for name, p in references.items()}
    lowercase = load_many(Path(lowercase_path), "lowercase") if lowercase_path is not None else None
    ctx = ScoringContext(texts=passages["text"].tolist(), stats=load_many(stats_path, "original"),
                         lowercase=lowercase, references=references)
    checked = [("model", ctx.stats, "token_stats"), *((name, ts, "token_stats") for name, ts in references.items())]
    if lowercase is not None:  # made by a job of its own, apart from the original pass
        checked.append((f"{model} on the lowercased passages", lowercase, "token_stats_lowercase"))
    for name, ts, rule in checked:
        if len(ts) != len(passages):
            raise ValueError(f"token statistics of {name} cover {len(ts)} passages, "
                             f"{passages_path} has {len(passages)}: rerun its {rule} job")
    methods = build_methods(cfg["methods"], cfg["min_k_ratios"], [r for r in references], model)
    methods = [m for m in methods if not (m.needs_lowercase and ctx.lowercase is None)]
    scores = score_passages(ctx, methods, passages)
    where = f"{benchmark or passages_path}, {model}"
    for name, span in ctx.spans.items():
        if (note := span.note(name)) is not None:
            progress(f"{where}: {note}")
    bad = scores[~np.isfinite(scores["score"])]
    if len(bad):
        first = bad.iloc[0]
        line = int(np.flatnonzero(passages["passage_id"].to_numpy() == first["passage_id"])[0]) + 1
        raise ValueError(f"{where}: {len(bad)} non-finite score{'s' if len(bad) > 1 else ''}, e.g. passage "
                         f"{first['passage_id']} ({passages_path}, line {line}), method {first['method']}, from "
                         f"{stats_path}: an empty passage, or statistics out of range; rerun its token_stats job")
    perplexity = np.exp(ctx.stats.mean_nll())
    scores = scores.merge(pd.DataFrame({"passage_id": passages["passage_id"], "perplexity": perplexity}),
                          on="passage_id")
    write_csv(out_passages, scores)
    docs = aggregate_documents(scores, cfg.get("aggregate", "mean"))
    docs = document_scores(docs, model=model, dtype=load_provenance(stats_path).get("dtype"))
    write_csv(out_documents, docs)
    progress(f"{len(methods)} methods x {len(passages)} passages -> {docs['doc_id'].nunique()} documents")
    return docs
