"""Incremental reruns, read from dry-run job lists (rule + wildcards) on a finished run of config/ci.yaml.

The finished run is made in seconds with ``snakemake --touch`` (see
``workflow_helpers.touch_finished``), which records the same metadata (params,
code, input sets) a real run does; ``test_adding_a_model_schedules_only_its_jobs``
also runs on the real ``ci_run`` to show both give the same plan. Every test
asserts the exact set of jobs, with Snakemake's default ``--rerun-triggers``.
"""

from __future__ import annotations

import copy
import os
import re
import shutil

import pytest
import yaml

from memaudit.versions import VERSIONED, code_version
from workflow_helpers import ROOT, make_workdir, planned_jobs, touch_finished

CI = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
BENCHMARKS = sorted(CI["benchmarks"])
MODELS = sorted(CI["models"])
NEW_MODEL = "tiny-gpt2-wide"
NEW_MODEL_ENTRY = {
    "family": "tiny-gpt2",
    "source": {"tiny_gpt2": {"n_layer": 1, "n_embd": 48, "n_head": 2, "n_positions": 64,
                             "vocab_size": 512, "max_tokens": 20000}},
}


@pytest.fixture(scope="module")
def finished_and_full_plan(tmp_path_factory):
    """A scratch copy of the workflow in which config/ci.yaml has (as far as Snakemake can tell) run,
    and the jobs of that run."""
    workdir = make_workdir(tmp_path_factory.mktemp("touched-ci"), share_resources=False)
    return workdir, {(j["rule"], j["wildcards"]) for j in touch_finished(workdir, "config/ci.yaml")}


@pytest.fixture(scope="module")
def finished(finished_and_full_plan):
    return finished_and_full_plan[0]


@pytest.fixture(scope="module")
def pair_rules(finished_and_full_plan):
    """Rules with one job per (benchmark, model) in the full run of config/ci.yaml."""
    rules = {r for r, w in finished_and_full_plan[1] if re.fullmatch(r"benchmark=[^,]+, model=[^,]+", w)}
    assert {"token_stats", "token_prob_scores", "metrics", "figure_roc", "figure_score_distributions"} <= rules
    return rules


def with_config(workdir, name: str, change) -> str:
    cfg = copy.deepcopy(CI)
    change(cfg)
    path = workdir / "config" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path.relative_to(workdir))


def cross_model(benchmarks=BENCHMARKS) -> set[tuple[str, str]]:
    """The tables and figures over all models: the summary and each benchmark's AUC-against-size figure."""
    return {("all", ""), ("summary", "")} | {("figure_auc_vs_size", f"benchmark={b}") for b in benchmarks}


def model_jobs(model: str, rules, benchmarks=BENCHMARKS, prepare=True) -> set[tuple[str, str]]:
    jobs = {(r, f"benchmark={b}, model={model}") for r in rules for b in benchmarks}
    return jobs | ({("prepare_model", f"model={model}")} if prepare else set())


def test_finished_run_has_nothing_to_do(finished):
    assert planned_jobs(finished, "config/ci.yaml") == set()


@pytest.mark.parametrize("tree", ["touched", pytest.param("ci_run", marks=pytest.mark.slow)])
def test_adding_a_model_schedules_only_its_jobs(tree, request, finished, pair_rules):
    workdir = finished if tree == "touched" else request.getfixturevalue("ci_run")
    config = with_config(workdir, "plus_one_model", lambda c: c["models"].__setitem__(NEW_MODEL, NEW_MODEL_ENTRY))
    jobs = planned_jobs(workdir, config)
    assert ("prepare_model", f"model={NEW_MODEL}") in jobs
    assert ("token_stats", f"benchmark=novels, model={NEW_MODEL}") in jobs
    # Nothing of any other model reruns: only the new model's jobs and the cross-model tables and figures.
    assert jobs == model_jobs(NEW_MODEL, pair_rules) | cross_model()


def test_changing_one_models_training_reruns_only_that_model(finished, pair_rules):
    model = "tiny-gpt2-small-contaminated"
    config = with_config(finished, "epochs", lambda c: c["models"][model]["finetune"].__setitem__("epochs", 3))
    assert planned_jobs(finished, config) == model_jobs(model, pair_rules) | cross_model()


def test_changing_how_a_model_is_scored_does_not_retrain_it(finished, pair_rules):
    """max_tokens truncates passages when scoring: the fine-tuned weights stay, its scores rerun."""
    model = "smollm2-135m-contaminated"
    config = with_config(finished, "max_tokens", lambda c: c["models"][model].__setitem__("max_tokens", 48))
    assert planned_jobs(finished, config) == model_jobs(model, pair_rules, prepare=False) | cross_model()


# A new Min-K% ratio is scored from the token statistics already computed: no forward pass
# (token_stats), no model and no dataset reruns; every (benchmark, model) re-scores, since all
# token-probability methods of a pair share one scoring job and one metrics table.
TOKEN_PROB_DOWNSTREAM = ("token_prob_scores", "metrics", "figure_roc", "figure_score_distributions")


def rescored_everywhere() -> set[tuple[str, str]]:
    return {(r, f"benchmark={b}, model={m}") for r in TOKEN_PROB_DOWNSTREAM for b in BENCHMARKS for m in MODELS}


def test_adding_a_min_k_ratio_schedules_only_scoring(finished):
    config = with_config(finished, "ratio", lambda c: c["probes"]["token_prob"].__setitem__("min_k_ratios", [0.1, 0.2, 0.3]))
    assert planned_jobs(finished, config) == rescored_everywhere() | cross_model()


def test_adding_a_benchmark_schedules_only_its_jobs(finished, pair_rules):
    tales = {"sources": ["tidytext"], "n_documents": 8, "passage_words": 40, "passages_per_document": 1,
             "source_options": {"tidytext": {"exclude_titles": ["Pride and Prejudice"]}}}
    config = with_config(finished, "plus_benchmark", lambda c: c["benchmarks"].__setitem__("tales", tales))
    expected = {("benchmark_dataset", "benchmark=tales"), ("blind_baseline", "benchmark=tales"),
                ("figure_auc_vs_size", "benchmark=tales"), ("summary", ""), ("all", "")}
    expected |= {(r, f"benchmark=tales, model={m}") for r in pair_rules for m in MODELS}
    # The other benchmarks' AUC-against-size figures read their own metric tables, not the summary.
    assert planned_jobs(finished, config) == expected


def test_bumping_the_scoring_version_reruns_exactly_the_scoring_jobs(finished, tmp_path):
    """Package code does not trigger reruns; its version constant, passed as a param, does."""
    src = shutil.copytree(ROOT / "src" / "memaudit", tmp_path / "src" / "memaudit")
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")  # the package finds its schema beside src/
    module = src / "probes" / "token_prob.py"
    text = module.read_text()
    assert len(re.findall(r"^SCORING_VERSION = \d+$", text, re.M)) == 1
    module.write_text(re.sub(r"^SCORING_VERSION = (\d+)$", lambda m: f"SCORING_VERSION = {int(m[1]) + 1}", text,
                             flags=re.M))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    assert planned_jobs(finished, "config/ci.yaml", env=env) == rescored_everywhere() | cross_model()


@pytest.mark.parametrize(("module", "name"), sorted(VERSIONED))
def test_code_version_is_read_without_importing(module, name):
    import importlib

    assert code_version(module, name) == getattr(importlib.import_module(module), name) >= 1


def test_code_version_of_a_missing_constant_is_an_error():
    with pytest.raises(LookupError, match="assigns no top-level NO_SUCH_VERSION"):
        code_version("memaudit.probes.token_prob", "NO_SUCH_VERSION")
