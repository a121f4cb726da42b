"""What to tell a user whose model could not be loaded: for a hub model, the remedies.

A hub model is first loaded at the start of its ``prepare_model`` job (a dry run never
resolves it); when the hub cannot be reached, or the id or revision does not exist there,
the job stops with one line naming the hub id and revision and what to do
(docs/models.md, "Hub models offline").
"""

from __future__ import annotations

import os
from typing import Any


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def load_failure_message(name: str, spec: dict[str, Any], exc: BaseException) -> str:
    """One line: why the model ``name`` of load spec ``spec`` did not load and, for a hub model,
    how to make it loadable (network, HF_HOME with a downloaded copy, or a local ``source.path``)."""
    if "hub_id" not in spec:
        return f"could not load model {name!r}: {first_line(exc)}"
    hub_id, revision = spec["hub_id"], spec.get("revision")
    home = os.environ.get("HF_HOME") or "~/.cache/huggingface (HF_HOME unset)"
    return (f"hub model {hub_id!r} at revision {revision!r} could not be loaded: {first_line(exc)} "
            f"Remedy: check the network, the hub id and revision (and HF_TOKEN for a gated model); "
            f"offline, download it first (huggingface-cli download {hub_id} --revision {revision}) "
            f"into HF_HOME ({home}) and set HF_HUB_OFFLINE=1, or point the model's source.path at a local copy")
