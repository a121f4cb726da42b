"""Running the token-probability probes: one forward pass per (model, texts), every method from it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from memaudit.io import read_json, read_jsonl, write_csv, write_json
from memaudit.probes.token_prob import ScoringContext, aggregate_documents, build_methods, score_passages
from memaudit.probes.token_stats import TokenStats, load_many, save_many

log = logging.getLogger(__name__)


def load_passages(path: str | Path) -> pd.DataFrame:
    frame = pd.DataFrame(read_jsonl(path))
    return frame.sort_values("passage_id", kind="stable").reset_index(drop=True)


def run_token_stats(manifest_path: str | Path, passages_path: str | Path, out_path: str | Path,
                    entry: dict, *, lowercase: bool = True,
                    progress: Callable[[str], None] = log.info) -> dict:
    """Per-token statistics of the passages (and of their lowercased copies) under one model."""
    from memaudit.backends.hf import HFBackend

    manifest = read_json(manifest_path)
    passages = load_passages(passages_path)
    texts = passages["text"].tolist()
    backend = HFBackend(manifest["load"], dtype=entry.get("dtype", "float32"),
                        device=entry.get("device", "auto"), batch_size=entry.get("batch_size", 8),
                        max_tokens=entry.get("max_tokens", 512))
    t0 = time.time()
    progress(f"forward pass over {len(texts)} passages")
    named = {"original": backend.token_stats(texts, progress=progress)}
    if lowercase:
        progress("second pass over the lowercased passages")
        named["lowercase"] = backend.token_stats([t.lower() for t in texts], with_distribution=False,
                                                 progress=progress)
    save_many(Path(out_path), **named)
    info = {"n_passages": len(texts), "n_tokens": int(named["original"].offsets[-1]),
            "seconds": time.time() - t0}
    progress(f"{info['n_tokens']} tokens in {info['seconds']:.1f}s")
    return info


def _has(path: Path, name: str) -> bool:
    with np.load(path) as z:
        return f"{name}__offsets" in z.files


def run_token_prob_scores(model: str, stats_path: str | Path, reference_paths: Sequence[str | Path],
                          passages_path: str | Path, cfg: dict, out_passages: str | Path,
                          out_documents: str | Path, *, progress: Callable[[str], None] = log.info) -> pd.DataFrame:
    """Score every configured method from stored statistics; write passage and document tables.

    A reference model's statistics live at ``.../scores/<benchmark>/<reference>/token_stats.npz``;
    its name is read from that path.
    """
    passages = load_passages(passages_path)
    stats_path = Path(stats_path)
    references = {Path(p).parent.name: load_many(Path(p), "original") for p in reference_paths}
    ctx = ScoringContext(texts=passages["text"].tolist(), stats=load_many(stats_path, "original"),
                         lowercase=load_many(stats_path, "lowercase") if _has(stats_path, "lowercase") else None,
                         references=references)
    for name, ts in [("model", ctx.stats), *references.items()]:
        if len(ts) != len(passages):
            raise ValueError(f"token statistics of {name} cover {len(ts)} passages, "
                             f"{passages_path} has {len(passages)}: rerun its token_stats job")
    methods = build_methods(cfg["methods"], cfg["min_k_ratios"], [r for r in references], model)
    methods = [m for m in methods if not (m.needs_lowercase and ctx.lowercase is None)]
    scores = score_passages(ctx, methods, passages)
    bad = scores[~np.isfinite(scores["score"])]
    if len(bad):
        raise ValueError(f"{len(bad)} non-finite scores, e.g. passage {bad.iloc[0]['passage_id']} "
                         f"method {bad.iloc[0]['method']} (an empty passage?)")
    perplexity = np.exp(ctx.stats.mean_nll())
    scores = scores.merge(pd.DataFrame({"passage_id": passages["passage_id"], "perplexity": perplexity}),
                          on="passage_id")
    write_csv(out_passages, scores)
    docs = aggregate_documents(scores, cfg.get("aggregate", "mean"))
    write_csv(out_documents, docs)
    progress(f"{len(methods)} methods x {len(passages)} passages -> {docs['doc_id'].nunique()} documents")
    return docs
