"""Code versions: how a change to package code reaches Snakemake's rerun decision.

Snakemake reruns a job when its ``script:`` file changes, but not when package
code that the script imports changes, so a fix to a score definition would
otherwise leave every finished score stale. The modules whose code decides
result values carry an integer constant (``DATASET_VERSION`` in
:mod:`memaudit.datasets.build`, ``STATS_VERSION`` in :mod:`memaudit.stats.metrics`; a probe
family's version lives in its registry entry, :mod:`memaudit.probes.registry`); the rules pass it as ``params:
code_version``, so bumping it reruns exactly that rule's jobs and what depends
on them. Bump it with every change that alters numbers, not with refactors.

The constants are read from the module's source text, not imported: the rule
files need them while the DAG is built, and importing the statistics module
(scipy, scikit-learn) would add seconds to every ``snakemake`` invocation.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

# What each version constant covers: (module, constant) -> the rules whose params carry it.
VERSIONED = {
    ("memaudit.datasets.build", "DATASET_VERSION"): ("benchmark_dataset", "pretrain_pool"),
    ("memaudit.stats.metrics", "STATS_VERSION"): ("metrics", "blind_baseline"),
}


def dataset_code_version(benchmark: dict) -> int | str:
    """A benchmark's dataset job's ``code_version``: ``DATASET_VERSION``, and for a published format with
    a version of its own (``FORMAT_VERSIONS`` in :mod:`memaudit.datasets.published`) that too, as
    ``"<DATASET_VERSION>+<format><n>"``: a fix to one format's loader reruns that format's benchmarks
    and nothing else (every other benchmark keeps the plain integer its finished jobs recorded). A benchmark
    built from a source with a version of its own (``SOURCE_VERSIONS`` in :mod:`memaudit.datasets.build`)
    has it alike, ``"<DATASET_VERSION>+<source><n>"``."""
    version = code_version("memaudit.datasets.build", "DATASET_VERSION")
    fmt = (benchmark.get("published") or {}).get("format")
    own = _literal("memaudit.datasets.published", "FORMAT_VERSIONS").get(fmt)
    if own is not None:
        return f"{version}+{fmt}{own}"
    sources = _literal("memaudit.datasets.build", "SOURCE_VERSIONS")
    tags = [f"{s}{sources[s]}" for s in sorted(set(benchmark.get("sources") or [])) if s in sources]
    return "+".join([str(version), *tags]) if tags else version


def code_version(module: str, name: str) -> int:
    """The integer ``name = <int>`` assigned at the top level of ``module``, read without importing it."""
    value = _literal(module, name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{module}.{name} must be an int literal, got {value!r}")
    return value


def _literal(module: str, name: str):
    """The literal assigned to ``name`` at the top level of ``module``, read without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"module {module} not found")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"), filename=spec.origin)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{module} assigns no top-level {name}")
