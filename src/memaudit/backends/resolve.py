"""The backend of one configured model, local or API: the one way a probe, planner or script opens a model.

A job asks for "the model named ``m``" and gets a :class:`~memaudit.backends.base.Backend`:
an :class:`~memaudit.backends.hf.HFBackend` loaded from the model's prepared manifest
(``results/models/<m>/manifest.json``) for a local model, or the API backend with the
shared response cache and cost ledger for an API model.
"""

from __future__ import annotations

from pathlib import Path

from memaudit.backends.base import Backend, is_api_model


def open_backend(config: dict, model: str, *, model_dir: str | Path | None = None,
                 rule: str | None = None, role: str | None = None, needs=()) -> Backend:
    """The backend serving ``model``.

    ``model_dir`` is a local model's prepared directory (default ``results/models/<model>``);
    ``rule`` labels an API model's usage rows in the cost ledger (pass ``snakemake.rule``).
    ``role`` (a config key or probe) and the capabilities it ``needs``: a local model that cannot serve them (a
    masked LM or an encoder-decoder model, which only its loaded config tells) is a one-line error naming both
    now (:meth:`~memaudit.backends.hf.HFBackend.require`); an API model's are checked with the config.
    """
    entry = config["models"][model]
    if is_api_model(entry):
        from memaudit.backends.api import api_backend_from_config

        return api_backend_from_config(config, model, rule=rule)
    from memaudit.backends.hf import HFBackend
    from memaudit.io import read_json

    manifest = read_json(Path(model_dir or Path("results/models") / model) / "manifest.json")
    backend = HFBackend(manifest["load"], name=model, dtype=entry.get("dtype", "auto"),
                        device=entry.get("device", "auto"), batch_size=entry.get("batch_size", 8),
                        max_tokens=entry.get("max_tokens", 512), generation_cache=config.get("generation_cache"))
    if role is not None:
        backend.require(needs, role)
    return backend
