"""The token-probability family's forward passes: per-token statistics of a benchmark's passages under one
model (the ``token_stats`` jobs), and of their lowercased copies (the ``token_stats_lowercase`` jobs, for the
``lowercase`` score alone), which every method then reads (:mod:`memaudit.probes.token_prob.runner`). Each pass is
a job of its own, so turning ``lowercase`` on or off computes or drops that pass and never repeats the other.

Its code version is the family's ``stats`` stage (:mod:`memaudit.probes.registry`): a change to how a method
scores reruns the scoring, not every model's forward passes; a change to the statistics reruns both.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from memaudit.config import model_scoring_settings
from memaudit.io import read_jsonl
from memaudit.models.token_stats import RECORDED, TokenStats, concat_stats, save_many

log = logging.getLogger(__name__)


def load_passages(path: str | Path) -> pd.DataFrame:
    frame = pd.DataFrame(read_jsonl(path))
    return frame.sort_values("passage_id", kind="stable").reset_index(drop=True)


def run_token_stats(config: dict, model: str, model_dir: str | Path, passages_path: str | Path,
                    out_path: str | Path, *, lowercased: bool = False, shard_passages: int | None = None,
                    checkpoint_dir: str | Path | None = None, checkpoint_root: str | Path | None = None,
                    progress: Callable[[str], None] = log.info) -> dict:
    """Per-token statistics of the passages under one model, stored as ``original``; with ``lowercased``, of
    their lowercased copies instead, stored as ``lowercase`` (target log-probabilities only: the ``lowercase``
    score reads no distribution statistics).

    The passages are processed in shards of ``shard_passages`` (None: one shard).
    With ``checkpoint_dir`` each finished shard is saved there atomically and a
    rerun after a kill loads the finished shards instead of recomputing them;
    the directory is keyed by the model's manifest, the passages, the settings
    and the dtype and device type they are computed in, and removed once the
    output is written (with its parents up to ``checkpoint_root`` that are left empty). A shard's statistics do
    not depend on whether it was computed before or after a kill, so a resumed
    run's output equals an uninterrupted one's.
    """
    manifest_path, passages_path = Path(model_dir) / "manifest.json", Path(passages_path)
    entry = model_scoring_settings(config["models"][model])
    passages = load_passages(passages_path)
    texts = passages["text"].tolist()
    size = max(1, int(shard_passages or len(texts) or 1))
    bounds = [(a, min(a + size, len(texts))) for a in range(0, len(texts), size)]
    shards_dir = None
    if checkpoint_dir is not None:
        from memaudit.checkpoints import checkpoint_key, file_digest, keyed_dir
        from memaudit.models.loading import resolve_device
        from memaudit.probes.registry import family_version

        # `dtype: auto` resolves per machine: a job resumed on another (a GPU without bfloat16, the CPU) must
        # not join the shards of one precision to those of another under the second one's name; nor shards
        # written before an array was recorded (RECORDED) to newer ones. `device: auto` too: a GPU's logits
        # differ from a CPU's in the last bits, so shards of both are not one run's (cuda:1 is cuda). Nor shards of
        # the code before an upgrade that bumped the statistics' version (`code_version`) to the new code's
        key = checkpoint_key({"rule": "token_stats_lowercase" if lowercased else "token_stats",
                              "code_version": family_version("token_prob", "stats"),
                              "manifest": file_digest(manifest_path),
                              "passages": file_digest(passages_path), "entry": entry,
                              "shard_passages": size, "dtype_used": _dtype_used(None, entry),
                              "device_used": resolve_device(entry.get("device", "auto")).split(":")[0],
                              "arrays": list(RECORDED)})
        shards_dir = keyed_dir(checkpoint_dir, key, progress=progress)
    backend = None

    def loaded():
        nonlocal backend
        if backend is None:  # loaded only if some shard is left to compute
            from memaudit.backends import open_backend
            from memaudit.backends.base import TOKEN_LOGPROBS

            backend = open_backend(config, model, model_dir=model_dir, needs={TOKEN_LOGPROBS},
                                   role="token statistics (probes.token_prob, its reference_models)")
        return backend

    t0 = time.time()
    name, variant, with_distribution = ("lowercase", [t.lower() for t in texts], False) if lowercased else (
        "original", texts, True)
    parts, n_loaded = [], 0
    progress(f"forward pass over {len(texts)} passages in {len(bounds)} shard(s)"
             + (f", checkpoints in {shards_dir}" if shards_dir else ""))
    for k, (a, b) in enumerate(bounds):
        path = shards_dir / f"{name}-{k:05d}.npz" if shards_dir else None
        part = _load_shard(path, b - a, progress)
        if part is not None:
            n_loaded += 1
            progress(f"{name} shard {k + 1}/{len(bounds)}: loaded from checkpoint")
        else:
            part = loaded().token_stats(variant[a:b], with_distribution=with_distribution, progress=progress)
            if path is not None:
                part.save(path)
            progress(f"{name} shard {k + 1}/{len(bounds)}: passages {a}..{b - 1} done "
                     f"({time.time() - t0:.0f}s)")
        parts.append(part)
    stats = concat_stats(parts)
    if n_loaded:
        progress(f"resumed: {n_loaded} of {len(bounds)} shards loaded from checkpoint {shards_dir}")
    save_many(Path(out_path), provenance={"model": model, "dtype": _dtype_used(backend, entry)}, **{name: stats})
    if shards_dir is not None:
        from memaudit.checkpoints import remove_checkpoint

        remove_checkpoint(shards_dir, checkpoint_root or checkpoint_dir, stale_keys=True, progress=progress)
    chars = stats.chars
    n_cut = int(sum(int(n) < len(t) for n, t in zip(chars, variant))) if chars is not None else 0
    if n_cut:
        progress(f"{n_cut} of {len(texts)} passages cut at the model's max_tokens: scored on their first "
                 f"{int(np.median([n for n, t in zip(chars, variant) if n < len(t)]))} characters (median)")
    info = {"n_passages": len(texts), "n_tokens": int(stats.offsets[-1]), "truncated": n_cut,
            "seconds": time.time() - t0, "shards": len(bounds), "shards_resumed": n_loaded}
    progress(f"{info['n_tokens']} tokens in {info['seconds']:.1f}s")
    return info


def _dtype_used(backend, entry: dict) -> str:
    """The dtype the statistics were computed in (resolved as loading would, when every shard was resumed)."""
    if backend is not None:
        return backend.describe()["dtype"]
    from memaudit.models.loading import resolve_device, resolve_dtype

    return resolve_dtype(entry.get("dtype", "auto"), resolve_device(entry.get("device", "auto")))


def _load_shard(path: Path | None, n_passages: int, progress: Callable[[str], None]) -> TokenStats | None:
    """A finished shard's statistics, or None if it is missing or unusable (then it is recomputed)."""
    if path is None or not path.exists():
        return None
    try:
        part = TokenStats.load(path)
    except Exception as exc:  # noqa: BLE001 -- a damaged shard is recomputed, never trusted
        progress(f"recomputing shard {path.name}: unreadable ({type(exc).__name__})")
        return None
    if len(part) != n_passages:
        progress(f"recomputing shard {path.name}: it covers {len(part)} passages, not {n_passages}")
        return None
    if part.chars is None:
        progress(f"recomputing shard {path.name}: written before the scored part of each text was recorded")
        return None
    return part
