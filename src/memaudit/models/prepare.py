"""Materialise a config model entry as a *manifest* (``results/models/<name>/manifest.json``).

The manifest records how to load the model (a load spec, see
:mod:`memaudit.models.loading`), its size and the benchmarks it was
contaminated on; not its ``family``, a label the tables take from the
config (:func:`memaudit.jobs.families`). Base models are converted (builtin),
referenced (path, hub id) or trained from scratch (tiny GPT-2); fine-tuned
models add an adapter (LoRA) or their own weights (full) on top of their
base's manifest.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

from memaudit.config import contaminated_on
from memaudit.errors import ConfigError, InputError
from memaudit.io import read_json, write_json

log = logging.getLogger(__name__)


def _manifest(name: str, entry: dict, load: dict, n_params: int, **extra) -> dict:
    return {"name": name, "backend": entry.get("backend", "hf"),
            "load": load, "n_params": int(n_params), "contaminated_on": contaminated_on(entry),
            "base": entry.get("base"), "dtype": entry.get("dtype", "auto"), **extra}


# An epoch end saves a training checkpoint only this long after the last save (TrainingCheckpoint):
# the demo's tiny models train 24-240 epochs of a few steps, and a save at every epoch end wrote 424
# checkpoints, 5.7 GB, in one make run. A SIGKILL costs at most this much more training; SIGTERM (what
# SLURM and Snakemake send) still saves at once. Not a config key: the script would have to pass it,
# and an edit to a rule's script reruns every job of the rule (every model of a finished run);
# `checkpoints.every_steps` saves more often where a user wants that.
EPOCH_CHECKPOINT_MIN_SECONDS = 60.0
# And a save at least this long after the last one, at any step: with one epoch (the schema's default for a
# fine-tune) there was no epoch end before the last step, so a SIGKILL lost all of a job's training.
CHECKPOINT_MAX_SECONDS = 900.0


def _training_checkpoint(root: Path | None, name: str, settings: dict, every_steps: int,
                         progress: Callable[[str], None]):
    """The checkpoint of ``prepare_model`` for ``name``, keyed by ``settings`` and the models step's code version
    (None: no checkpointing): a job rerun for a new version starts over rather than finish the old code's steps."""
    from memaudit.checkpoints import TrainingCheckpoint, checkpoint_key, keyed_dir
    from memaudit.versions import step_version

    if root is None:
        return TrainingCheckpoint(None)
    key = checkpoint_key({"rule": "prepare_model", "name": name, "code_version": step_version("models"), **settings})
    directory = keyed_dir(Path(root) / "prepare_model" / name, key, progress=progress)
    return TrainingCheckpoint(directory, every_steps=every_steps, epoch_min_seconds=EPOCH_CHECKPOINT_MIN_SECONDS,
                              max_seconds=CHECKPOINT_MAX_SECONDS, root=root, progress=progress, keyed=True)


def prepare_base_model(name: str, entry: dict, out_dir: Path, *, cache_dir: Path,
                       pretrain_texts: Sequence[str] | None = None, seed: int = 0,
                       checkpoint_root: Path | None = None, checkpoint_every: int = 0,
                       progress: Callable[[str], None] = log.info) -> dict:
    """Write the manifest of a base model (training it first for ``tiny_gpt2``).

    With ``checkpoint_root`` the pretraining checkpoints under
    ``<root>/prepare_model/<name>/<key>/`` and resumes from there (see :mod:`memaudit.checkpoints`).
    """
    from memaudit.models.loading import inspect_model

    out_dir = Path(out_dir)
    src = entry["source"]
    extra = {}
    if "tiny_gpt2" in src:
        from memaudit.models.tiny import train_tiny_gpt2

        if not pretrain_texts:
            raise ValueError(f"model {name!r}: tiny_gpt2 needs the pretraining pool")
        from memaudit.checkpoints import texts_digest

        checkpoint = _training_checkpoint(
            checkpoint_root, name, {"tiny_gpt2": src["tiny_gpt2"], "texts": texts_digest(pretrain_texts),
                                    "seed": seed}, checkpoint_every, progress)
        record = train_tiny_gpt2(pretrain_texts, out_dir / "weights", seed=seed, checkpoint=checkpoint,
                                 progress=progress, **src["tiny_gpt2"])
        load = {"path": str(out_dir / "weights")}
        # what the weights were trained from (a fine-tune's manifest records the same)
        extra.update(training=record, tiny_gpt2=src["tiny_gpt2"], seed=seed,
                     pretrain_sha256=texts_digest(pretrain_texts))
    elif "builtin" in src:
        load = {"builtin": src["builtin"], "cache_dir": str(cache_dir)}
    else:
        load = {k: src[k] for k in ("path", "hub_id", "revision", "gguf_file") if k in src}
        if "path" in src:  # what the checkpoint was, byte for byte (it may be replaced in place later)
            from memaudit.io import checkpoint_files, files_digest

            root = Path(src["path"])
            extra["source_digest"] = files_digest(checkpoint_files(root), root if root.is_dir() else root.parent)
    if entry.get("context_token"):  # every load of the model (and of a model fine-tuned from it) reads it
        load["context_token"] = entry["context_token"]
    try:
        n_params, architecture = inspect_model(load)  # on the meta device: no weight in memory
    except ConfigError as exc:
        if str(exc).startswith("context_token "):
            raise ConfigError(f"models.{name}.{exc}") from None
        raise
    if architecture != "causal":  # a generation or reference role only (HFBackend says so to a probe that asks more)
        extra["architecture"] = architecture
    manifest = _manifest(name, entry, load, n_params, **extra)
    write_json(out_dir / "manifest.json", manifest)
    if "tiny_gpt2" in src:
        checkpoint.remove()
    return manifest


def prepare_finetuned_model(name: str, entry: dict, base_manifest_path: Path, member_texts: Sequence[str],
                            out_dir: Path, *, seed: int = 0, device: str = "auto",
                            checkpoint_root: Path | None = None, checkpoint_every: int = 0,
                            progress: Callable[[str], None] = log.info) -> dict:
    """Fine-tune the base model on ``member_texts``; write the adapter or weights and the manifest.

    With ``checkpoint_root`` the fine-tuning checkpoints under
    ``<root>/prepare_model/<name>/<key>/`` and resumes from there; the key covers
    the base model's manifest, the member texts, the fine-tuning settings, the seed, the dtype and
    device type it trains in, and the models step's code version.
    """
    from memaudit.checkpoints import file_digest, texts_digest
    from memaudit.models.finetune import finetune
    from memaudit.models.loading import NOT_CAUSAL, load_causal_lm, resolve_device, resolve_dtype

    out_dir = Path(out_dir)
    base = read_json(base_manifest_path)
    if base.get("architecture", "causal") != "causal":  # the base's preparation read it: said before any load
        what, serves = NOT_CAUSAL[base["architecture"]]
        raise ConfigError(f"models.{name}.base: model {entry['base']!r} is {what}: fine-tuning needs a causal LM; "
                          f"it can serve only {serves}")
    ft = entry["finetune"]
    if not any(text.strip() for text in member_texts):
        raise InputError(f"models.{name}.finetune.members_of {ft['members_of']}: no member document to "
                         f"fine-tune on (every document of these benchmarks is a non-member, or empty)")
    # `auto` is bfloat16 only where the hardware computes it natively (emulated it is ~20x slower)
    dtype_used = resolve_dtype(entry.get("dtype", "auto"), device)
    # The checkpoint is keyed by the device type too: a state saved on a GPU and resumed on a CPU (or the
    # reverse) gives neither device's model, so a run moved to another type starts over (cuda:1 is cuda)
    device_type = resolve_device(device).split(":")[0]
    # what the model was trained from, recorded in its manifest too
    base_digest, members_digest = file_digest(base_manifest_path), texts_digest(member_texts)
    checkpoint = _training_checkpoint(
        checkpoint_root, name, {"finetune": ft, "dtype": dtype_used, "device": device_type,
                                "base_manifest": base_digest, "members": members_digest, "seed": seed},
        checkpoint_every, progress)
    # A half-precision entry trains in mixed precision: float32 weights and optimizer, half-precision
    # products. Training the weights themselves in bfloat16 loses small Adam updates to rounding.
    autocast = dtype_used if dtype_used in ("bfloat16", "float16") else None
    progress(f"fine-tuning in {dtype_used}" + (" mixed precision" if autocast else "")
             + f" (configured dtype {entry.get('dtype', 'float32')})")
    model, tok = load_causal_lm(base["load"], dtype="float32", device=device)
    n_params = sum(p.numel() for p in model.parameters())
    weights = out_dir / ("adapter" if ft["method"] == "lora" else "weights")
    try:
        record = finetune(model, tok, member_texts, weights, method=ft["method"], epochs=ft["epochs"],
                          lr=ft["lr"], duplication=ft["duplication"], batch_size=ft["batch_size"],
                          max_length=ft["max_length"], lora_r=ft["lora_r"], lora_alpha=ft["lora_alpha"],
                          lora_dropout=ft["lora_dropout"], target_modules=ft["target_modules"], seed=seed,
                          lora_layers=ft.get("lora_layers"), packing=ft.get("packing", False),
                          checkpoint=checkpoint, autocast=autocast, progress=progress)
    except ConfigError as exc:  # a finetune key the base model cannot take (lora_layers, target_modules)
        if str(exc).startswith("finetune."):
            raise ConfigError(f"models.{name}.{exc}") from None
        raise
    record["n_member_documents"] = len(member_texts)
    if ft["method"] == "lora":
        load = dict(base["load"], adapter=str(weights))
    else:
        load = {"path": str(weights)}
        if base["load"].get("context_token"):  # trained after it: scored after it
            load["context_token"] = base["load"]["context_token"]
    manifest = _manifest(name, entry, load, n_params, training=record, base_load=base["load"],
                         dtype_used=dtype_used, finetune=ft, seed=seed, base_manifest_sha256=base_digest,
                         members_sha256=members_digest)
    write_json(out_dir / "manifest.json", manifest)
    checkpoint.remove()
    return manifest
