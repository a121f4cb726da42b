"""One probe job as data: what a family's runner receives, whatever the family.

Every family's probe rule runs the same thin script (``workflow/scripts/probe.py``),
which builds a :class:`ProbeJob` from the Snakemake job and calls the runner the
registry names for the family. A runner opens its model with :meth:`ProbeJob.backend`
(:func:`memaudit.backends.open_backend`), and writes its per-document scores with
:func:`document_scores`, which adds the provenance columns every score table carries.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pandas as pd

log = logging.getLogger(__name__)

DOCUMENT_COLUMNS = ["doc_id", "label", "method", "score", "model", "dtype"]


@dataclass
class ProbeJob:
    family: str
    mode: str
    model: str
    benchmark: str
    config: dict
    inputs: dict[str, Any]  # name -> path, or list of paths
    outputs: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None
    progress: Callable[[str], None] = log.info

    @property
    def probe(self) -> str:
        from memaudit.probes.registry import FAMILIES

        return FAMILIES[self.family].probe(self.mode)

    @property
    def settings(self) -> dict:
        """The probe's config block (``probes.<probe>``), over the family's shared block if it has modes."""
        probes = self.config.get("probes", {})
        shared = probes.get(self.family, {}) if self.mode else {}
        return {**shared, **probes.get(self.probe, {})}

    def backend(self):
        """The model under test (:func:`memaudit.backends.open_backend`)."""
        from memaudit.backends import open_backend
        from memaudit.probes.registry import PROBES

        return open_backend(self.config, self.model, model_dir=self.inputs.get("model"), rule=self.rule,
                            role=f"probe {self.probe!r} on {self.benchmark!r}", needs=PROBES[self.probe].needs)

    @contextlib.contextmanager
    def opened_backend(self) -> Iterator:
        """:meth:`backend`, closed at the end (an API backend's threads and cache connection)."""
        backend = self.backend()
        try:
            yield backend
        finally:
            close = getattr(backend, "close", None)
            if close:
                close()

    @classmethod
    def from_snakemake(cls, smk, progress: Callable[[str], None] = log.info) -> "ProbeJob":
        def named(files) -> dict[str, Any]:
            out = {}
            for key in files.keys():
                value = files[key]
                out[key] = str(value) if isinstance(value, str) else [str(v) for v in value]
            return out

        params = {k: smk.params[k] for k in smk.params.keys()}
        return cls(family=params["family"], mode=smk.wildcards.get("mode", params.get("mode", "")),
                   model=smk.wildcards.model, benchmark=smk.wildcards.benchmark, config=smk.config,
                   inputs=named(smk.input), outputs=named(smk.output), params=params, rule=smk.rule,
                   progress=progress)


def document_scores(frame: pd.DataFrame, *, model: str, dtype: str | None) -> pd.DataFrame:
    """Per-document scores with their provenance: the model's name and the dtype it ran in.

    ``dtype`` is the one actually used (``dtype: auto`` resolves per machine), ``api`` for an
    API model.
    """
    frame = frame.copy()
    frame["model"] = model
    frame["dtype"] = dtype or "api"
    return frame[DOCUMENT_COLUMNS + [c for c in frame.columns if c not in DOCUMENT_COLUMNS]]
