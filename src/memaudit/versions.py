"""Code versions: how a change to package code reaches Snakemake's rerun decision.

Snakemake reruns a job when its ``script:`` file changes, but not when package
code that the script imports changes, so a fix to a score definition would
otherwise leave every finished score stale. Every rule that computes a result
passes a code version as ``params: code_version``, so bumping it reruns exactly
that rule's jobs and what depends on them. A probe family's version and its
stages' live in its registry entry (:mod:`memaudit.probes.registry`); the steps
that belong to no family -- the datasets, model preparation, the statistics and
the common figures -- are :data:`STEPS` here. Bump a version with every change
that alters numbers, not with refactors; each records a ``fingerprint`` of its
code, and ``tests/test_code_versions.py`` fails when the code changed and the
fingerprint did not (``memaudit code-versions --record``), so a forgotten bump
is caught in review, not in a user's stale table.

This module is imported while Snakemake builds the DAG: it imports nothing heavy.
A published format's or a source's own version (``FORMAT_VERSIONS``,
``SOURCE_VERSIONS``) is read from its module's source text, not imported, for the
same reason.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stage:
    """A step with its own rules and code version: a family's items or summary, or one of :data:`STEPS`."""

    roots: tuple[str, ...]  # the modules whose code, with what they import, builds the stage's output
    version: int
    fingerprint: str


# The steps of no probe family: name -> its Stage. The rules that carry each (params code_version):
# datasets: benchmark_dataset, pretrain_pool; models: prepare_model; stats: metrics, blind_baseline,
# summary; figures: figures_model, figure_auc_vs_size. (fetch_assets installs packaged files;
# api_ledger sums the cache's rows, priced when each request was made; api_estimate carries the
# config and every family's version itself: they compute no result of their own.)
STEPS: dict[str, Stage] = {
    # Bump with every change that alters a benchmark or the pretraining pool. Not bumped for the
    # rejects rows of documents below min_passages (session 55): the documents and passages are the
    # same, and a bump would rerun every job of every finished run for a table of notes.
    "datasets": Stage(("memaudit.datasets.build", "memaudit.datasets.rejects"), version=2,
                      fingerprint="db94f7d7b737c527"),
    # Fine-tuning and base-model preparation (results/models/<model>). 1: the first version carried;
    # 2: the tiny GPT-2s' GELU is torch's fused tanh kernel (the same formula, other rounding).
    "models": Stage(("memaudit.models.prepare", "memaudit.datasets.build"), version=2,
                    fingerprint="5c5920e09de61390"),
    # Bump with every change that alters a statistic (memaudit.stats.metrics, selection, workflow).
    # 5: books kept whole in the blind folds; 6: in the AUC interval and the t-test (ci_books);
    # 7: books_pvalue; 8: books only where the config gives labels per book; 9: the t-test of two groups
    # constant up to rounding is nan (was p = 0 where their means differ); 10: a selection table's power
    # where a method's documents hold no member is nan, as metrics.csv's bh_power (was 0.0); 11: metrics.csv's
    # bh_fdr and bh_power are empty where stats.selection.q is below 1/(n_calibration + 1) (BH names nothing
    # there whatever the scores: they read 0 and 0); a _named.csv lists each method's calibration documents
    # (role calibration) with the split, seed and calibration_fraction that drew them; 12: models.csv names the
    # API models the run asked (backend, model_id, revision, base_url), a row each
    # 13: a method with no score at all (a cloze token type nothing answered) gets a metrics row of its counts
    # and no statistic (n/a in the headline), not an AUC of 0.5
    # 14: the blind baseline's AUC and its intervals count only pairs within a fold (pooled over folds fitted
    # apart, they read below 0.5 with folds by book); its scores file says each document's cv_fold
    "stats": Stage(("memaudit.stats.workflow", "memaudit.stats.summary"), version=14,
                   fingerprint="a4c713cd99fde358"),
    # The ROC, score-distribution and AUC-by-size figures. 1: the first version carried. 2: the ROC's low-FPR
    # panel draws every threshold (tied scores lost steps a threshold reaches)
    # 3: the AUC-by-size figure draws each bootstrap interval from its low to its high end (an interval
    # lying wholly above or below its AUC was drawn from the point, clipped)
    # 4: the AUC-by-size figure's x axis spans at least a decade (models of one size: no tick showed), a
    # contaminated model's points filled and a base model's open (one model per line: the dashes never showed);
    # the selection figure's legend says what its solid and dashed lines mean
    # 5: a method with no score is named "not measured" in the ROC and distribution figures (a note figure where
    # nothing was measured)
    # 6: the AUC-by-size figure names the models it draws no point of (scored by none of its methods)
    # 7: a model fine-tuned on another benchmark's members is a line of its own in the AUC-by-size figure (it was a
    # point on its base's line at the same size: a vertical stroke that read as a size trend)
    "figures": Stage(("memaudit.figures.plots",), version=7, fingerprint="fc50223b05085df2"),
}


def step_version(step: str) -> int:
    """The code version the rules of one of :data:`STEPS` carry."""
    if step not in STEPS:
        raise KeyError(f"no code version step {step!r} (steps: {sorted(STEPS)})")
    return STEPS[step].version


def dataset_code_version(benchmark: dict) -> int | str:
    """A benchmark's dataset job's ``code_version``: the ``datasets`` step's version, and for a published
    format with a version of its own (``FORMAT_VERSIONS`` in :mod:`memaudit.datasets.published`) that too, as
    ``"<version>+<format><n>"``: a fix to one format's loader reruns that format's benchmarks and nothing
    else (every other benchmark keeps the plain integer its finished jobs recorded). A benchmark built from a
    source with a version of its own (``SOURCE_VERSIONS`` in :mod:`memaudit.datasets.build`) has it alike,
    ``"<version>+<source><n>"``, and one of two or more sources ``"+multisource<n>"`` (how they are split)."""
    version = step_version("datasets")
    fmt = (benchmark.get("published") or {}).get("format")
    own = _literal("memaudit.datasets.published", "FORMAT_VERSIONS").get(fmt)
    if own is not None:
        return f"{version}+{fmt}{own}"
    sources = _literal("memaudit.datasets.build", "SOURCE_VERSIONS")
    listed = sorted(set(benchmark.get("sources") or []))
    tags = [f"{s}{sources[s]}" for s in listed if s in sources]
    if len(listed) > 1:  # how documents of several sources are split (MULTI_SOURCE_SPLIT_VERSION)
        tags.append(f"multisource{_literal('memaudit.datasets.build', 'MULTI_SOURCE_SPLIT_VERSION')}")
    return "+".join([str(version), *tags]) if tags else version


def _literal(module: str, name: str):
    """The literal assigned to ``name`` at the top level of ``module``, read without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"module {module} not found")
    stat = Path(spec.origin).stat()
    return copy.deepcopy(_literal_in(module, spec.origin, name, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=16)
def _literal_in(module: str, origin: str, name: str, mtime_ns: int, size: int):
    # parsed once per version of the file: a dry run asks for each benchmark (a tenth of a second for
    # the demo's four when each parsed the module again)
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"), filename=origin)
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
