"""The backend of one configured model, local or API, for a probe job.

A probe job asks for "the model named ``m``" and gets a :class:`~memaudit.backends.base.Backend`:
an :class:`~memaudit.backends.hf.HFBackend` loaded from the model's prepared
manifest (``results/models/<m>/manifest.json``) for local models, or the API
backend with the shared response cache and cost ledger for API models.
"""

from __future__ import annotations

from pathlib import Path

from memaudit.backends.base import API_BACKENDS, Backend


def open_backend(config: dict, model: str, *, model_dir: str | Path | None = None,
                 rule: str | None = None) -> Backend:
    """The backend serving ``model``; ``model_dir`` is the prepared model of a local one."""
    entry = config["models"][model]
    backend = entry.get("backend", "hf")
    if backend in API_BACKENDS:
        from memaudit.backends.api import api_backend_from_config

        return api_backend_from_config(config, model, rule=rule)
    if model_dir is None:
        raise ValueError(f"model {model!r} is local: its prepared model directory is needed")
    from memaudit.backends.hf import HFBackend
    from memaudit.io import read_json

    manifest = read_json(Path(model_dir) / "manifest.json")
    return HFBackend(manifest["load"], dtype=entry.get("dtype", "float32"), device=entry.get("device", "auto"),
                     batch_size=entry.get("batch_size", 8), max_tokens=entry.get("max_tokens", 512))
