"""Incremental reruns, read from dry-run job lists (rule + wildcards) on a finished run of config/ci.yaml.

The finished run is made in seconds with ``snakemake --touch`` (see
``workflow_helpers.touch_finished``), which records the same metadata (params,
code, input sets) a real run does; ``test_adding_a_model_schedules_only_its_jobs``
also runs on the real ``ci_run`` to show both give the same plan. Snakemake's
default ``--rerun-triggers`` throughout.

Each test compares the plan after a config change with the exact set of jobs
that must rerun: for a change to something that exists, the jobs that depend
on it, as Snakemake's own dependency graph gives them (what ``--forcerun`` of
those outputs plans on the unchanged config, where no trigger fires); for a new model or
benchmark, the jobs carrying its name plus the tables and figures over all of
them. A rerun too wide (params holding too much config, inputs too wide) adds
jobs to the first set and fails the test.
"""

from __future__ import annotations

import copy
import csv
import functools
import json
import os
import re
import shlex
import shutil
from pathlib import Path, PurePosixPath

import pytest
import yaml

from memaudit import jobs

from memaudit.versions import STEPS, step_version
from workflow_helpers import (ROOT, SNAKEMAKE, directory_outputs, dry_run, make_workdir, planned_jobs, rule_directives,
                              snakemake, touch_finished)

pytestmark = pytest.mark.workflow

CI_YAML = "config/ci.yaml"
CI = yaml.safe_load((ROOT / CI_YAML).read_text())
BENCHMARKS = sorted(CI["benchmarks"])
MODELS = sorted(CI["models"])
NEW_MODEL = "tiny-gpt2-wide"
NEW_MODEL_ENTRY = {
    "family": "tiny-gpt2",
    "source": {"tiny_gpt2": {"n_layer": 1, "n_embd": 48, "n_head": 2, "n_positions": 64,
                             "vocab_size": 512, "max_tokens": 20000}},
}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A scratch copy of the workflow in which config/ci.yaml has (as far as Snakemake can tell) run,
    that run's jobs ({(rule, wildcards): [outputs]}) and the rules' directory outputs."""
    workdir = make_workdir(tmp_path_factory.mktemp("touched-ci"), share_resources=False)
    directories = directory_outputs(workdir, CI_YAML)
    jobs = touch_finished(workdir, CI_YAML, directories)
    return workdir, {(j["rule"], j["wildcards"]): j["output"] for j in jobs}, directories


@pytest.fixture(scope="module")
def finished(finished_run):
    return finished_run[0]


def with_config(workdir, name: str, change) -> str:
    cfg = copy.deepcopy(CI)
    change(cfg)
    path = workdir / "config" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path.relative_to(workdir))


def wildcard(job: tuple[str, str], name: str) -> str | None:
    m = re.search(rf"(?:^|, ){name}=([^,]+)", job[1])
    return m.group(1) if m else None


@functools.cache
def _dependency_graph(workdir) -> tuple[dict, dict]:
    """The unchanged config's whole run as Snakemake plans it (a dry run with ``--forceall``): each job's
    outputs, and each job's readers (the jobs with one of its outputs, or a file in one, as an input).

    Read once per tree (the finished tree's record is not changed by the tests that ask, which read the
    plans of their own configs or code beside it)."""
    jobs = dry_run(workdir, CI_YAML, "--forceall")
    outputs = {(j["rule"], j["wildcards"]): j["output"] for j in jobs}
    producer = {out: job for job, outs in outputs.items() for out in outs}
    readers = {job: set() for job in outputs}
    for j in jobs:
        for path in j["input"]:
            made = next((producer[p] for p in (path, *map(str, PurePosixPath(path).parents)) if p in producer), None)
            if made is not None:
                readers[made].add((j["rule"], j["wildcards"]))
    return outputs, readers


def downstream_of(workdir, *targets: str) -> frozenset[tuple[str, str]]:
    """The given rules' or files' jobs and every job that depends on them, on the unchanged config: the plan
    of ``--forcerun targets`` there. Walked in Snakemake's dependency graph, read once for every question
    (a dry run per question cost a ``snakemake`` start each, about 1.7 s of CPU, 20 of them)."""
    outputs, readers = _dependency_graph(workdir)
    todo = [job for job, outs in outputs.items() if job[0] in targets or not set(targets).isdisjoint(outs)]
    assert todo, f"no job of the unchanged config makes {targets}"
    seen = set(todo)
    while todo:
        for reader in readers[todo.pop()] - seen:
            seen.add(reader)
            todo.append(reader)
    return frozenset(seen)


def cross_model(benchmarks=BENCHMARKS) -> set[tuple[str, str]]:
    """The tables and figures over all models: the summary and the AUC-against-size figure of each benchmark
    given (those the changed models are scored on)."""
    return {("all", ""), ("summary", "")} | {("figure_auc_vs_size", f"benchmark={b}") for b in benchmarks}


def test_finished_run_has_nothing_to_do(finished):
    assert planned_jobs(finished, CI_YAML) == set()


@pytest.mark.parametrize("tree", ["touched", pytest.param("ci_run", marks=pytest.mark.slow)])
def test_adding_a_model_schedules_only_its_jobs(tree, request, finished, finished_run):
    workdir = finished if tree == "touched" else request.getfixturevalue("ci_run")
    def add_model(c):
        c["models"][NEW_MODEL] = NEW_MODEL_ENTRY
        c["probes"]["token_prob"]["models"].append(NEW_MODEL)  # the ci config names token_prob's models

    config = with_config(workdir, "plus_one_model", add_model)
    jobs = planned_jobs(workdir, config)
    # The new model gets every per-model job an existing base model of its kind has.
    like = {(r, w.replace("tiny-gpt2-small", NEW_MODEL)) for r, w in finished_run[1]
            if wildcard((r, w), "model") == "tiny-gpt2-small" and r not in ("decop_probe", "ktd_probe", "cloze_probe")}
    assert {("prepare_model", f"model={NEW_MODEL}"), ("token_stats", f"benchmark=novels, model={NEW_MODEL}")} <= like
    # Nothing of any other model reruns: only the new model's jobs and the cross-model tables and figures. The
    # books' AUC-against-size figure, of models the new one is not scored beside, stays.
    assert jobs == like | cross_model(CI["probes"]["token_prob"]["benchmarks"])


def test_changing_one_models_training_reruns_only_that_model(finished):
    model = "tiny-gpt2-small-contaminated"
    config = with_config(finished, "epochs", lambda c: c["models"][model]["finetune"].__setitem__("epochs", 3))
    jobs = planned_jobs(finished, config)
    assert jobs == downstream_of(finished, f"results/models/{model}")
    assert {wildcard(j, "model") for j in jobs} == {model, None}


def test_changing_how_a_model_is_scored_does_not_retrain_it(finished, finished_run):
    """max_tokens truncates passages when scoring: the fine-tuned weights stay, its scores rerun."""
    model = "smollm2-135m-contaminated"
    config = with_config(finished, "max_tokens", lambda c: c["models"][model].__setitem__("max_tokens", 48))
    jobs = planned_jobs(finished, config)
    scoring = [out for job, outs in finished_run[1].items()
               if wildcard(job, "model") == model and job[0] != "prepare_model" for out in outs]
    assert ("token_stats", f"benchmark=novels, model={model}") in jobs
    assert jobs == downstream_of(finished, *scoring)
    assert ("prepare_model", f"model={model}") not in jobs


def test_renaming_a_models_family_redraws_only_what_shows_it(finished):
    """``family`` labels a model and decides nothing it computes: a column of models.csv (the summary), the
    lines of the AUC-against-size figures of the benchmarks it is scored on and of DE-COP's figure by model
    size. Renaming it re-trained the model and reran its forward passes, probes and tables."""
    model = "tiny-gpt2-small-contaminated"
    config = with_config(finished, "family", lambda c: c["models"][model].__setitem__("family", "tiny-gpt2-tuned"))
    assert planned_jobs(finished, config) == cross_model(CI["probes"]["token_prob"]["benchmarks"]) | {
        ("decop_figures", "benchmark=novels")}


def test_a_reference_models_scoring_settings_rerun_what_it_chose_and_scored(finished, finished_run):
    """A model serving as a reference reads texts cut at its own ``max_tokens``: the cloze items it chose
    (tiny-gpt2-cb, the cloze reference) and the KTD baselines it scored (tiny-gpt2-small, KTD's reference)
    rerun with that model's own scoring jobs. Its weights are unchanged, so only the params can say so."""
    def change(c):
        c["models"]["tiny-gpt2-cb"]["max_tokens"] = 48
        c["models"]["tiny-gpt2-small"]["max_tokens"] = 48

    jobs = planned_jobs(finished, with_config(finished, "reference_max_tokens", change))
    scoring = [out for job, outs in finished_run[1].items()
               if wildcard(job, "model") in ("tiny-gpt2-cb", "tiny-gpt2-small") and job[0] != "prepare_model"
               for out in outs]
    assert ("cloze_items", "benchmark=novels") in jobs
    assert ("ktd_probe", "benchmark=novels, model=tiny-gpt2-small-contaminated") in jobs
    assert jobs == downstream_of(finished, *scoring, "cloze_items", "ktd_probe")


def test_an_api_role_models_entry_reruns_what_the_role_made(finished_run, tmp_path):
    """An API paraphraser has no weights that an input could date: its entry (which model answers, at
    which endpoint) decides the paraphrases, so changing it rebuilds DE-COP's items and KTD's pool and all
    after them, as re-training a local paraphraser does."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished

    def api_paraphraser(c, model_id="served-model"):
        c["models"]["served"] = {"backend": "openai", "api": {
            "model_id": model_id, "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MEMAUDIT_NO_KEY",
            "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}
        c["probes"]["decop"]["paraphrase"]["model"] = "served"

    before = with_config(workdir, "api_paraphraser", api_paraphraser)
    assert ("decop_items", "benchmark=novels") in {
        (j["rule"], j["wildcards"]) for j in touch_finished(workdir, before, finished_run[2], only_scheduled=True)}
    assert planned_jobs(workdir, before) == set()
    after = with_config(workdir, "api_paraphraser_changed", lambda c: api_paraphraser(c, "another-model"))
    plan = dry_run(workdir, after)
    jobs = {(j["rule"], j["wildcards"]) for j in plan}
    assert {("decop_items", "benchmark=novels"), ("ktd_pool", "benchmark=novels")} <= jobs
    # and the cost ledger after them: it waited for the probes of API models under test alone, so it was written
    # while (or before) the paraphrases were paid for, and never again
    assert jobs == downstream_of(finished_run[0], "decop_items", "ktd_pool") | {("api_ledger", "")}
    ledger = next(j for j in plan if j["rule"] == "api_ledger")
    assert {"results/summary/decop_novels.csv", "results/summary/ktd.csv", "results/summary/copybench.csv",
            "results/summary/cloze.csv"} <= set(ledger["input"])


def test_the_cost_ledger_waits_for_every_job_an_api_role_model_serves():
    """Without an API model in a role the ledger waits for the probes of API models under test alone (a run of
    local models is not held up); with one, for every family's final outputs too."""
    from memaudit.config import validate_config

    config = validate_config(copy.deepcopy(CI))
    assert jobs.api_role_models(config) == [] and jobs.api_ledger_inputs(config, ["results/summary/ktd.csv"]) == []
    config["models"]["judge"] = {"backend": "anthropic", "api": {"model_id": "claude-x"}}
    config["probes"]["copybench"]["event_judge"] = {"model": "judge"}
    assert jobs.api_role_models(config) == ["judge"]
    assert jobs.api_ledger_inputs(config, ["results/summary/ktd.csv"]) == ["results/summary/ktd.csv"]


def test_how_an_api_models_requests_are_sent_reruns_nothing(finished_run, tmp_path):
    """An API model's concurrency, timeout, retries, key variable and prices decide how its requests are sent
    and what they cost, never an answer (answers are cached by request, priced when made): raising a slow
    paraphraser's concurrency reran DE-COP's items, KTD's pool and every DE-COP and KTD probe of every local
    model, and every job of an API model under test."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished

    def served(c, **sending):
        c["models"]["served"] = {"backend": "openai", "api": {
            "model_id": "served-model", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MEMAUDIT_NO_KEY",
            "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, **sending}}
        c["probes"]["decop"]["paraphrase"]["model"] = "served"
        c["probes"]["prefix"] = {"models": ["served"], "benchmarks": ["news"]}

    before = with_config(workdir, "served", served)
    scheduled = {(j["rule"], j["wildcards"]) for j in touch_finished(workdir, before, finished_run[2],
                                                                     only_scheduled=True)}
    assert {("decop_items", "benchmark=novels"), ("prefix_probe", "benchmark=news, model=served")} <= scheduled
    after = with_config(workdir, "served_sending", lambda c: served(
        c, concurrency=16, timeout=300, max_retries=8, api_key_env="OTHER_KEY",
        pricing={"input_per_mtok": 0.5, "cached_input_per_mtok": 0.25, "output_per_mtok": 1.5}))
    assert planned_jobs(workdir, after) == set()


def test_scheduling_and_cache_settings_rerun_nothing(finished):
    """How many GPUs, how much memory and how much time a job claims and where converted weights are cached
    never change a result."""
    def change(c):
        c["models"]["tiny-gpt2-small"]["gpus"] = 2
        c["models"]["tiny-gpt2-small"]["mem_mb"] = 16000
        c["models"]["smollm2-135m"]["mem_mb"] = 32000  # a base and the DE-COP paraphraser
        c["models"]["tiny-gpt2-small"]["runtime"] = 600
        c["models"]["smollm2-135m"]["runtime"] = 900
        c["cache_dir"] = "resources/another-cache"

    assert planned_jobs(finished, with_config(finished, "gpus_cache", change)) == set()


@pytest.fixture(scope="module")
def rescored(finished):
    """Every token_prob_scores job and what depends on it."""
    jobs = downstream_of(finished, "token_prob_scores")
    assert {r for r, _ in jobs} >= {"token_prob_scores", "metrics", "figures_model", "summary"}
    assert {r for r, _ in jobs}.isdisjoint({"token_stats", "token_stats_lowercase", "prepare_model",
                                            "benchmark_dataset"})
    return jobs


def test_adding_a_min_k_ratio_schedules_only_scoring(finished, rescored):
    """A new Min-K% ratio is scored from the token statistics already computed: no forward pass,
    model or dataset reruns (all token-probability methods of a pair share one cheap scoring job)."""
    config = with_config(finished, "ratio",
                         lambda c: c["probes"]["token_prob"].__setitem__("min_k_ratios", [0.1, 0.2, 0.3]))
    assert planned_jobs(finished, config) == rescored


@functools.cache
def token_prob_methods() -> tuple[str, ...]:
    """config/ci.yaml's token-probability methods: the schema's default, every one."""
    return tuple(jobs.validate_config(copy.deepcopy(CI))["probes"]["token_prob"]["methods"])


@pytest.mark.parametrize("drop", ["min_k_ratios", "min_k", "reference", "lowercase"])
def test_dropping_a_min_k_ratio_or_a_method_schedules_only_scoring(drop, finished, rescored):
    """As adding one: the scores left are read off the token statistics already computed. ``lowercase`` too:
    its pass over the lowercased passages is a job of its own (``token_stats_lowercase``), no longer part of
    the forward pass job (``token_stats``), whose every job reran when it was dropped."""
    def change(c):
        tp = c["probes"]["token_prob"]
        if drop == "min_k_ratios":
            tp["min_k_ratios"] = [0.1]
        else:
            tp["methods"] = [m for m in token_prob_methods() if m != drop]

    assert planned_jobs(finished, with_config(finished, f"without_{drop}", change)) == rescored


def _without_lowercase(finished_run, workdir, change=None) -> tuple[str, list[dict]]:
    """Make ``workdir``, a copy of the finished ci run, a finished run of its config without ``lowercase`` (after
    ``change``), as if it had never had the method: no pass over the lowercased passages is left. Returns that
    config's path and the jobs its run ran."""
    def without(c):
        if change is not None:
            change(c)
        c["probes"]["token_prob"]["methods"] = [m for m in token_prob_methods() if m != "lowercase"]

    config = with_config(workdir, "without_lowercase_run", without)
    for path in workdir.glob("results/scores/*/*/token_stats_lowercase.npz"):
        path.unlink()
    return config, touch_finished(workdir, config, finished_run[2], only_scheduled=True)


def test_adding_the_lowercase_method_schedules_only_its_pass_and_scoring(finished_run, rescored, tmp_path):
    """Turning ``lowercase`` on runs the pass over the lowercased passages of each pair token_prob scores
    (``token_stats_lowercase``), then the scoring, metrics and figures as adding any method does; no forward
    pass over the passages (``token_stats``). It was part of token_stats, whose every job reran: for a 7B
    model, hours of a GPU per benchmark to compute again what was there."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished
    assert planned_jobs(workdir, _without_lowercase(finished_run, workdir)[0]) == set()
    tp = CI["probes"]["token_prob"]
    passes = {("token_stats_lowercase", f"benchmark={b}, model={m}") for b in tp["benchmarks"] for m in tp["models"]}
    assert planned_jobs(workdir, CI_YAML) == passes | rescored


def test_a_model_token_prob_reads_only_as_a_reference_gets_no_lowercase_pass(finished_run, tmp_path):
    """A reference model's statistics are read as the original pass alone (``ref_<model>`` of the models
    scored): one token_prob does not score gets its forward pass on each benchmark, no scoring, metrics or
    figures of its own, and no pass over the lowercased passages, which only the ``lowercase`` score of a
    model scored reads. It had one: adding ``lowercase`` to the methods reran its forward passes too (as it
    reran those of the models scored, whose lowercased passes were part of ``token_stats``); now it runs the
    lowercased passes of the models scored, and no forward pass."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished
    tp, reference = CI["probes"]["token_prob"], "tiny-gpt2-cb"  # not scored by token_prob (CopyBench's)
    assert reference not in tp["models"] and "lowercase" in token_prob_methods()

    def reference_only(c):
        c["probes"]["token_prob"]["reference_models"] = [*tp["reference_models"], reference]

    ran = {(r, w) for j in _without_lowercase(finished_run, workdir, reference_only)[1]
           for r, w in [(j["rule"], j["wildcards"])] if wildcard((r, w), "model") == reference}
    assert ran == {("token_stats", f"benchmark={b}, model={reference}") for b in tp["benchmarks"]}
    after = with_config(workdir, "reference_only_lowercase", reference_only)
    assert planned_jobs(workdir, after) == {
        (r, f"benchmark={b}, model={m}") for b in tp["benchmarks"] for m in tp["models"]
        for r in ("token_stats_lowercase", "token_prob_scores", "metrics", "figures_model")} | cross_model(
        tp["benchmarks"])


def test_adding_a_probe_schedules_its_jobs_and_the_tables_it_joins(finished):
    """A new probe's jobs, and the metric tables and figures of the pairs it scores (they hold every
    probe's methods) and the cloze summary (its prefix-LCS baseline table joins the prefix probe where
    the cloze probes run on the same pair: tiny-gpt2-small on novels); no model, forward pass or
    other probe reruns."""
    model = "tiny-gpt2-small"
    config = with_config(finished, "plus_probe", lambda c: c["probes"].__setitem__("prefix", {"models": [model]}))
    expected = {("prefix_dataset", f"benchmark={b}") for b in BENCHMARKS}
    expected |= {(r, f"benchmark={b}, model={model}") for b in BENCHMARKS
                 for r in ("prefix_probe", "metrics", "figures_model")}
    assert planned_jobs(finished, config) == expected | cross_model() | {("cloze_summary", "")}


def test_adding_a_model_to_a_probe_runs_the_probe_on_that_model_alone(finished_run, tmp_path):
    """The probe's jobs on the models it already ran on stay (its params leave out the model list)."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "tree", symlinks=True)
    first, new = "tiny-gpt2-small", "tiny-gpt2-small-contaminated"
    before = with_config(workdir, "prefix_one", lambda c: c["probes"].__setitem__("prefix", {"models": [first]}))
    touch_finished(workdir, before, finished_run[2], only_scheduled=True)  # the run of `before` on the finished tree
    after = with_config(workdir, "prefix_two", lambda c: c["probes"].__setitem__("prefix", {"models": [first, new]}))
    expected = {(r, f"benchmark={b}, model={new}") for b in BENCHMARKS
                for r in ("prefix_probe", "metrics", "figures_model")}
    # the cloze probes run on `new` over novels: their prefix-LCS baseline table gains its rows
    assert planned_jobs(workdir, after) == expected | cross_model() | {("cloze_summary", "")}


def test_raising_ktds_m_tops_up_the_pool_and_reruns_ktd_not_decop(finished, finished_run):
    """A larger knockoff pool reruns the top-up, KTD's jobs and what reads them; DE-COP's items and
    probes stay (the extra paraphrases go to KTD's own pool file)."""
    config = with_config(finished, "ktd_m", lambda c: c["probes"]["ktd"].update(ms=[1, 2, 5], m=5))
    jobs = planned_jobs(finished, config)
    assert {j for j in finished_run[1] if j[0] == "ktd_pool"} == {("ktd_pool", "benchmark=novels")}
    assert jobs == downstream_of(finished, "ktd_pool")
    assert ("ktd_probe", "benchmark=novels, model=tiny-gpt2-small") in jobs
    assert not {r for r, _ in jobs} & {"decop_items", "decop_probe", "token_stats", "prepare_model"}


def test_changing_the_blind_baselines_folds_reruns_only_the_blind_baselines(finished):
    config = with_config(finished, "folds", lambda c: c["stats"].__setitem__("blind_folds", 4))
    expected = {("blind_baseline", f"benchmark={b}") for b in BENCHMARKS} | {("summary", ""), ("all", "")}
    assert planned_jobs(finished, config) == expected


def coauthor_commands(configfile: str) -> list[list[str]]:
    """The Snakemake commands docs/reruns.md gives a co-author after ``dvc pull`` (its DVC block), split, with
    ``configfile`` for the block's ``my.yaml``."""
    text = (ROOT / "docs" / "reruns.md").read_text(encoding="utf-8")
    block = text.split("# a co-author, on another clone:", 1)[1].split("```", 1)[0]
    return [[configfile if arg == "my.yaml" else arg for arg in shlex.split(line.split("#", 1)[0])]
            for line in block.splitlines() if line.startswith("snakemake ")]


def test_a_pulled_run_touched_as_the_docs_say_reruns_what_a_later_change_decides(finished_run, tmp_path):
    """A co-author's clone after ``dvc pull`` holds every result but none of Snakemake's records (DVC versions
    results/ and logs/, not .snakemake/). The docs' ``snakemake --touch --cores 1 all`` touched only the jobs
    whose outputs the pull happened to date before their inputs and recorded no params or code for the rest,
    so a parameter changed afterwards reran nothing: the co-author's tables silently kept the old value."""
    clone = shutil.copytree(finished_run[0], tmp_path / "clone", symlinks=True,
                            ignore=shutil.ignore_patterns(".snakemake"))
    touch, dry = coauthor_commands(CI_YAML)
    assert touch[:2] == ["snakemake", "--touch"] and dry[:2] == ["snakemake", "-n"]
    # both name the config the results were made with: touched with the demo's, a run of another config was
    # marked as the demo's wherever the two share an output, and the next run redid all of it
    assert touch[-2:] == dry[-2:] == ["--configfile", CI_YAML]
    snakemake(clone, *touch[1:])
    assert planned_jobs(clone, CI_YAML) == set()  # what the docs' dry run says: nothing to be done
    config = with_config(clone, "folds", lambda c: c["stats"].__setitem__("blind_folds", 4))
    expected = {("blind_baseline", f"benchmark={b}") for b in BENCHMARKS} | {("summary", ""), ("all", "")}
    assert planned_jobs(clone, config) == expected


def test_make_report_refuses_while_jobs_are_pending_and_says_which(finished, tmp_path):
    """`make report` built the HTML from the outputs as they were: after a config change that reruns jobs it showed
    the old figures under the new settings' captions, rc 0, no word. It now refuses, with the pending jobs' table,
    and writes no report; on the finished run (nothing pending) the dry run's line is the one it looks for."""
    import subprocess
    import sys

    shutil.copy2(ROOT / "Makefile", finished / "Makefile")
    config = with_config(finished, "report_seed", lambda c: c.__setitem__("seed", c["seed"] + 1))
    # -o venv: the test's own environment, not a venv made in the tree; a make of its own, not a sub-make of
    # `make test` (which printed "make[1]: Entering directory ..." first)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    made = subprocess.run(["make", "--no-print-directory", "-o", "venv", "report", f"BIN={Path(sys.executable).parent}",
                           f"CONFIG={config}"], cwd=finished, capture_output=True, text=True, env=env)
    assert made.returncode == 2, made.stdout + made.stderr
    lines = made.stdout.splitlines()
    assert lines[0] == "Job stats:" and re.fullmatch(r"total\s+\d+", lines[-3]), lines
    assert re.search(r"^benchmark_dataset\s+3$", made.stdout, re.M)
    assert lines[-2:] == [
        "make report: jobs above are pending (the config or the code changed since the outputs were made), so the",
        f"report would show old outputs under the new settings: run them first (make run CONFIG={config})"]
    assert not (finished / "results/report.html").exists()
    plan = subprocess.run([*SNAKEMAKE, "--dry-run", "--quiet", "rules", "all", "--configfile", CI_YAML],
                          cwd=finished, capture_output=True, text=True)
    assert "\nNothing to be done" in "\n" + plan.stdout + plan.stderr, plan.stdout + plan.stderr


def test_changing_the_selection_figures_methods_redraws_only_the_summary(finished):
    """stats.selection.figure_methods picks the curves of the summary's FDR/power figure: no metrics job
    reads it (it ran every one again, on every benchmark and model)."""
    config = with_config(finished, "figure_methods",
                         lambda c: c["stats"].__setitem__("selection", {"figure_methods": ["loss", "zlib"]}))
    assert planned_jobs(finished, config) == {("summary", ""), ("all", "")}


def test_changing_how_decop_asks_reruns_its_probes_not_the_paraphrases(finished):
    """probes.decop orderings, batch_size, max_answer_tokens and fdr are the probe jobs': DE-COP's items
    (the paraphraser's work) and KTD's pool built on them stay, as do KTD's probes."""
    config = with_config(finished, "decop_asking", lambda c: c["probes"]["decop"].update(
        orderings="permutations", batch_size=12, max_answer_tokens=4, fdr=0.2))
    jobs = planned_jobs(finished, config)
    assert ("decop_probe", "benchmark=novels, model=tiny-gpt2-small, mode=likelihood") in jobs
    assert jobs == downstream_of(finished, "decop_probe")
    assert not {r for r, _ in jobs} & {"decop_items", "ktd_pool", "ktd_probe"}


def test_changing_how_copybench_probes_reruns_its_probes_not_the_items(finished):
    """Decoding and scoring settings are CopyBench's probe jobs': its items (an extractor's work where one
    is named) stay."""
    config = with_config(finished, "copybench_probing", lambda c: c["probes"]["copybench"].update(
        memfree_n=5, literal_max_new_tokens=30, repetition_penalty=1.2, batch_size=8, reference_tokens=40))
    jobs = planned_jobs(finished, config)
    assert ("copybench_probe", "benchmark=books, model=tiny-gpt2-cb, mode=literal") in jobs
    assert jobs == downstream_of(finished, "copybench_probe")
    assert "copybench_items" not in {r for r, _ in jobs}


def test_changing_how_copybench_probes_leaves_the_fact_recall_questions(finished_run, tmp_path):
    """The same for copybench_qa_items (a qa_writer's synthesis where one is named): only the keys that
    cut and write the questions rebuild them."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished

    def with_qa(c, **settings):
        c["probes"]["copybench_qa"] = {"models": ["tiny-gpt2-cb"], "benchmarks": ["books"]}
        c["probes"]["copybench"].update(settings)

    config = with_config(workdir, "qa", with_qa)
    assert ("copybench_qa_items", "benchmark=books") in {
        (j["rule"], j["wildcards"]) for j in touch_finished(workdir, config, finished_run[2], only_scheduled=True)}
    probing = with_config(workdir, "qa_probing", lambda c: with_qa(c, qa_max_new_tokens=50, memfree_n=5, n_events=5))
    jobs = planned_jobs(workdir, probing)
    assert ("copybench_probe", "benchmark=books, model=tiny-gpt2-cb, mode=qa") in jobs
    assert "copybench_qa_items" not in {r for r, _ in jobs}
    cutting = with_config(workdir, "qa_cutting", lambda c: with_qa(c, qa_per_book=5))
    assert ("copybench_qa_items", "benchmark=books") in planned_jobs(workdir, cutting)


def test_changing_how_the_cloze_blackbox_probe_asks_reruns_only_its_jobs(finished_run, tmp_path):
    """probes.cloze prompt and max_new_tokens are the black-box probe's alone: they reran the cloze items
    (the reference scoring every candidate word, a knowledge filter's pass over every text) and every
    logit-mode probe, neither of which reads them."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished

    def blackbox(c, **asking):
        c["probes"]["cloze"].update(asking)
        c["probes"]["cloze_blackbox"] = {"models": ["smollm2-135m"], "benchmarks": ["novels"]}

    before = with_config(workdir, "cloze_blackbox", blackbox)
    assert ("cloze_probe", "benchmark=novels, model=smollm2-135m, mode=blackbox") in {
        (j["rule"], j["wildcards"]) for j in touch_finished(workdir, before, finished_run[2], only_scheduled=True)}
    after = with_config(workdir, "cloze_blackbox_asking", lambda c: blackbox(c, prompt="one_word", max_new_tokens=20))
    pair = "benchmark=novels, model=smollm2-135m"
    assert planned_jobs(workdir, after) == {
        ("cloze_probe", f"{pair}, mode=blackbox"), ("metrics", pair), ("figures_model", pair), ("cloze_summary", ""),
        ("summary", ""), ("figure_auc_vs_size", "benchmark=novels"), ("all", "")}


def paper_prompts(workdir: Path) -> Path:
    """``workdir/prompts``: CopyBench's built-in templates written as the published prompt files."""
    import dataclasses

    from memaudit.probes.copybench.prompts import TEMPLATES

    prompts = workdir / "prompts"
    prompts.mkdir()
    for tag, template in TEMPLATES.items():
        (prompts / f"prompts.{tag}.json").write_text(json.dumps(dataclasses.asdict(template)))
    return prompts


def test_an_edited_copybench_prompt_file_reruns_its_modes_probes_and_no_other(finished_run, tmp_path):
    """With ``prompt: paper`` the probe reads ``prompt_dir``'s ``prompts.<mode>.format<n>.json``: they were not
    its inputs, so a finished run kept the generations of a prompt since edited (stale, with no sign). They
    are inputs now, each mode's files of its own jobs alone."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished
    prompts = paper_prompts(workdir)
    config = with_config(workdir, "paper_prompts", lambda c: c["probes"]["copybench"].update(
        prompt="paper", prompt_dir="prompts", formats=[1, 2]))
    touch_finished(workdir, config, finished_run[2], only_scheduled=True)
    assert planned_jobs(workdir, config) == set()
    edited = prompts / "prompts.nonliteral.format2.json"
    edited.write_text(edited.read_text().replace("story", "tale"))
    later = edited.stat().st_mtime + 60  # than every output touched above
    os.utime(edited, (later, later))
    jobs = planned_jobs(workdir, config)
    generations = [f"results/scores/books/{m}/copybench_nonliteral_items.jsonl" for m in ("tiny-gpt2-cb", "tiny-gpt2-cb-books")]
    assert jobs == downstream_of(finished_run[0], *generations)
    assert {j for j in jobs if j[0] == "copybench_probe"} == {
        ("copybench_probe", f"benchmark=books, model={m}, mode=nonliteral") for m in ("tiny-gpt2-cb", "tiny-gpt2-cb-books")}
    (prompts / "prompts.literal.format3.json").write_text("{}")  # not a format this config reads
    assert planned_jobs(workdir, config) == jobs


def test_changing_how_copybench_cuts_its_items_rebuilds_them(finished):
    config = with_config(finished, "copybench_cutting", lambda c: c["probes"]["copybench"].update(n_events=5))
    assert planned_jobs(finished, config) == downstream_of(finished, "copybench_items")


def test_every_figure_saved_as_png_and_svg_declares_both(finished_run):
    """memaudit.figures.plots.save_figure writes <prefix>.png and <prefix>.svg: a rule declaring the PNG
    alone left the SVG undeclared (`snakemake <it>.svg` found no rule, --delete-all-output left it behind,
    --list-untracked listed it). CopyBench's summary saved its two figures as PNG only until session 76."""
    figures = {}
    for (rule, _), outputs in finished_run[1].items():
        pngs = sorted(o.removesuffix(".png") for o in outputs if o.endswith(".png"))
        if pngs:
            figures[rule] = (pngs, sorted(o.removesuffix(".svg") for o in outputs if o.endswith(".svg")))
    assert {"decop_figures", "ktd_summary", "cloze_summary", "summary", "figures_model",
            "copybench_summary"} <= set(figures)
    assert {rule: svgs for rule, (_, svgs) in figures.items()} == {rule: pngs for rule, (pngs, _) in figures.items()}


def test_changing_the_headline_methods_redraws_only_the_figures(finished, finished_run):
    config = with_config(finished, "headline",
                         lambda c: c.__setitem__("figures", {"headline_methods": ["loss", "zlib"]}))
    expected = {job for job in finished_run[1] if job[0] == "figures_model"}  # every (benchmark, model) scored
    scored = jobs.scored(jobs.validate_config(copy.deepcopy(CI)))
    assert expected == {("figures_model", f"benchmark={b}, model={m}") for b, models in scored.items() for m in models}
    assert planned_jobs(finished, config) == expected | cross_model() - {("summary", "")}


def test_declaring_a_control_reruns_only_the_tables_that_pair_the_two(finished):
    """``control`` pairs two probed models in the cloze differences: its summary reruns, no model
    is prepared or probed again (tiny-gpt2-small, a base model, against the other model cloze_logit runs)."""
    config = with_config(finished, "control",
                         lambda c: c["models"]["tiny-gpt2-small"].__setitem__("control", "tiny-gpt2-small-contaminated"))
    jobs = planned_jobs(finished, config)
    assert ("cloze_summary", "") in jobs
    assert jobs == downstream_of(finished, "cloze_summary")


def test_adding_a_benchmark_schedules_only_its_jobs(finished, finished_run):
    tales = {"sources": ["tidytext"], "n_documents": 8, "passage_words": 40, "passages_per_document": 1,
             "source_options": {"tidytext": {"exclude_titles": ["Pride and Prejudice"]}}}

    def add_tales(c):
        c["benchmarks"]["tales"] = tales
        c["probes"]["token_prob"]["benchmarks"].append("tales")  # probed as the news are

    config = with_config(finished, "plus_benchmark", add_tales)
    jobs = planned_jobs(finished, config)
    # The new benchmark gets what the news get (DE-COP's modes and CopyBench name their benchmarks).
    like = {(r, w.replace("benchmark=news", "benchmark=tales")) for r, w in finished_run[1]
            if wildcard((r, w), "benchmark") == "news"}
    assert {("benchmark_dataset", "benchmark=tales"), ("token_stats", "benchmark=tales, model=smollm2-135m")} <= like
    # The other benchmarks' AUC-against-size figures read their own metric tables, not the summary.
    assert jobs == like | {("summary", ""), ("all", "")}


# The rules that carry each version: a family's own (its probe jobs) and its stages' (what it builds once
# per benchmark, before any model is probed). The summaries carrying a family's version read its probe jobs.
VERSION_RULES = {("token_prob", ""): ("token_prob_scores",),
                 ("token_prob", "stats"): ("token_stats", "token_stats_lowercase"),
                 ("decop", ""): ("decop_probe",), ("decop", "items"): ("decop_items",),
                 ("decop", "summary"): ("decop_figures",),
                 ("ktd", ""): ("ktd_probe",), ("ktd", "pool"): ("ktd_pool",),
                 ("cloze", ""): ("cloze_probe",), ("cloze", "items"): ("cloze_items",),
                 ("copybench", ""): ("copybench_probe",),
                 ("copybench", "items"): ("copybench_items", "copybench_qa_items"),
                 ("copybench", "summary"): ("copybench_summary",), ("ktd", "summary"): ("ktd_summary",),
                 ("cloze", "summary"): ("cloze_summary",)}
FAMILY_RULES = {f: {r for (g, _), rules in VERSION_RULES.items() if g == f for r in rules}
                for f, _ in VERSION_RULES}


def test_every_version_in_the_registry_is_tested_here():
    from memaudit.probes.registry import FAMILIES

    declared = {(f.name, s) for f in FAMILIES.values() for s in f.stages}
    assert declared == {k for k in VERSION_RULES if k[1]}


@pytest.mark.parametrize("family, stage", sorted(VERSION_RULES))
def test_bumping_a_version_reruns_its_jobs_and_nothing_else(family, stage, finished, finished_run, tmp_path):
    """Package code does not trigger reruns; a version in the registry, a param, does: the family's
    reruns its probe jobs (not the items they read), a stage's reruns what it builds and what reads it."""
    src = shutil.copytree(ROOT / "src" / "memaudit", tmp_path / "src" / "memaudit")
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")  # the package finds its schema beside src/
    registry = src / "probes" / "registry.py"
    text = registry.read_text()
    # the family's own version comes first in its entry, its stages' after it
    pattern = rf'(ProbeFamily\(\s*"{family}",' + (rf'.*?"{stage}":\s*Stage\(' if stage else "") + r'.*?version=)(\d+)'
    assert len(re.findall(pattern, text, re.S)) == 1
    registry.write_text(re.sub(pattern, lambda m: f"{m[1]}{int(m[2]) + 1}", text, count=1, flags=re.S))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    jobs = planned_jobs(finished, CI_YAML, env=env)
    rules = {r for r, _ in jobs}
    # exactly the version's jobs and what depends on them ...
    assert jobs == downstream_of(finished, *VERSION_RULES[family, stage])
    # (config/ci.yaml runs no CopyBench QA, so copybench_qa_items has no job there)
    ran = {r for r in VERSION_RULES[family, stage] if any(job[0] == r for job in finished_run[1])}
    assert ran and rules >= ran
    # ... not the family's jobs upstream: a probe change keeps its items, a summary change its probes ...
    step = {"items": 0, "pool": 0, "stats": 0, "": 1, "summary": 2}
    upstream = {r for (f, st), rs in VERSION_RULES.items() if f == family and step[st] < step[stage] for r in rs}
    assert rules.isdisjoint(upstream)
    # ... and no job of another family (but KTD's, whose knockoffs are DE-COP's items: new items, new W;
    # config/ci.yaml tops the pool up, so the top-up reruns too)
    reads_decop_items = {"ktd_pool", "ktd_probe", "ktd_summary"} if (family, stage) == ("decop", "items") else set()
    assert rules >= reads_decop_items
    others = {r for f, fam_rules in FAMILY_RULES.items() if f != family for r in fam_rules} - reads_decop_items
    assert rules.isdisjoint(others | {"prepare_model", "benchmark_dataset"})  # others: token_stats but token_prob's


# The rules each step of no family (memaudit.versions.STEPS) versions; every other rule that runs a script
# carries a family's or a stage's version, or computes no result (NO_VERSION).
STEP_RULES = {"datasets": ("benchmark_dataset", "pretrain_pool"), "models": ("prepare_model",),
              "stats": ("metrics", "blind_baseline", "summary"), "figures": ("figures_model", "figure_auc_vs_size")}
# fetch_assets installs packaged files; api_ledger sums the cache's rows, each priced when it was sent;
# api_estimate carries the whole config and every family's version (test below)
NO_VERSION = {"fetch_assets", "api_ledger"}


def test_every_rule_that_computes_a_result_carries_a_code_version():
    """A rule without one keeps its finished outputs through any change to the package code it runs."""
    rules = {name: re.search(r"^code_version=(.+),$", directives.get("params", ""), re.M)
             for name, directives in rule_directives().items()}
    assert set(STEPS) == set(STEP_RULES)
    versioned = {r for rs in [*VERSION_RULES.values(), *STEP_RULES.values()] for r in rs}
    scripted = {r for r in rules if r != "all" and r not in NO_VERSION}
    assert versioned | {"prefix_probe", "prefix_dataset", "api_estimate"} == scripted
    missing = sorted(r for r in scripted if rules[r] is None)
    assert not missing, f"rules with no params code_version: {missing}"
    for step, step_rules in STEP_RULES.items():
        for rule in step_rules:
            assert f'step_version("{step}")' in rules[rule][1] or (step, rule) == ("datasets", "benchmark_dataset")


@pytest.mark.parametrize("step", sorted(STEP_RULES))
def test_bumping_a_steps_version_reruns_its_jobs_and_what_reads_them(step, finished, finished_run, tmp_path):
    """The steps of no family (datasets, model preparation, statistics, figures) rerun on their own version
    alone: a fine-tune's code changed reruns the fine-tunes and what reads them, not the datasets."""
    src = shutil.copytree(ROOT / "src" / "memaudit", tmp_path / "src" / "memaudit")
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")
    versions = src / "versions.py"
    text = versions.read_text()
    pattern = rf'("{step}": Stage\(.*?version=)(\d+)'
    assert len(re.findall(pattern, text, re.S)) == 1
    versions.write_text(re.sub(pattern, lambda m: f"{m[1]}{int(m[2]) + 1}", text, count=1, flags=re.S))
    jobs = planned_jobs(finished, CI_YAML, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")})
    assert jobs == downstream_of(finished, *STEP_RULES[step])
    assert {r for r, _ in jobs} >= {r for r in STEP_RULES[step] if any(job[0] == r for job in finished_run[1])}
    upstream = {"datasets": set(), "models": {"benchmark_dataset", "pretrain_pool"},
                "stats": {"benchmark_dataset", "prepare_model", "token_stats", "token_stats_lowercase"},
                "figures": {"benchmark_dataset", "prepare_model", "token_stats", "token_stats_lowercase",
                            "metrics"}}[step]
    assert upstream and not upstream & {r for r, _ in jobs} or step == "datasets"


ESTIMATE = ("results/api/estimate.txt", "results/api/plan.jsonl")
# an API model the estimates price (no server: a dry run sends nothing)
SERVED = {"backend": "openai", "api": {"model_id": "served-model", "base_url": "http://127.0.0.1:9/v1",
                                       "api_key_env": "MEMAUDIT_NO_KEY",
                                       "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}


def estimate_planned(workdir, config: str) -> set[str]:
    """The rules a dry run of the cost estimate's outputs plans."""
    out = snakemake(workdir, "-n", *ESTIMATE, "--configfile", config).stdout
    return set(re.findall(r"^(?:local)?rule (\w+):", out, re.M))


def estimate_touched(workdir, config: str) -> None:
    """The estimate recorded as made for ``config``, without making it."""
    (workdir / "results" / "api").mkdir(parents=True, exist_ok=True)
    for name in ESTIMATE:
        (workdir / name).write_text("")  # --touch records a job's metadata on outputs that exist
    snakemake(workdir, "--touch", "--forceall", *ESTIMATE, "--configfile", config, "--cores", "1")


def test_the_cost_estimate_is_made_again_when_the_config_changes(finished):
    """results/api/estimate.txt reads the whole config: an estimate already written was kept when a model was
    added or a price changed (no input of it had changed), and the user read the old total."""
    assert estimate_planned(finished, CI_YAML) == {"api_estimate"}
    estimate_touched(finished, CI_YAML)
    assert estimate_planned(finished, CI_YAML) == set()

    def api_model_added(c):
        c["models"]["served"] = copy.deepcopy(SERVED)

    assert estimate_planned(finished, with_config(finished, "estimate_changed", api_model_added)) == {"api_estimate"}


def test_an_edited_copybench_prompt_file_makes_the_cost_estimate_again_if_it_prices_that_mode(finished_run, tmp_path):
    """With ``prompt: paper`` the estimate builds CopyBench's prompts from ``prompt_dir``'s files, which were not
    its inputs: an estimate already written kept the old prompts' token counts. The files of the modes it prices
    are its inputs now; a file of a mode no API model runs is not."""
    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)
    prompts = paper_prompts(workdir)

    def served_on_literal(c):
        c["models"]["served"] = copy.deepcopy(SERVED)
        # MemFree needs control of decoding, which an API model does not give
        c["probes"]["copybench"].update(prompt="paper", prompt_dir="prompts", formats=[1, 2], decodings=["greedy"])
        c["probes"]["copybench_literal"]["models"].append("served")  # nonliteral: the local models alone

    config = with_config(workdir, "paper_prompts_api", served_on_literal)
    assert estimate_planned(workdir, config) == {"api_estimate"}
    estimate_touched(workdir, config)
    assert estimate_planned(workdir, config) == set()

    def edit(name: str) -> None:
        path = prompts / name
        template = json.loads(path.read_text())
        path.write_text(json.dumps({**template, "instruction": template["instruction"] + " Be brief."}))
        later = path.stat().st_mtime + 60  # than the outputs touched above
        os.utime(path, (later, later))

    edit("prompts.nonliteral.format2.json")  # no API model writes stories here: nothing to price again
    assert estimate_planned(workdir, config) == set()
    edit("prompts.literal.format2.json")
    assert estimate_planned(workdir, config) == {"api_estimate"}


def test_bumping_a_published_formats_version_reruns_its_benchmarks_datasets_only(finished_run, tmp_path):
    """A published format's loader has a version of its own (FORMAT_VERSIONS): bumping BookMIA's reruns
    the datasets of BookMIA benchmarks and what reads them, and no other benchmark's, where only
    DATASET_VERSION (every dataset, every model's probes) could reach a finished run."""
    from memaudit.datasets.build import MULTI_SOURCE_SPLIT_VERSION, SOURCE_VERSIONS
    from memaudit.datasets.published import FORMAT_VERSIONS
    from memaudit.versions import dataset_code_version

    version = step_version("datasets")
    assert dataset_code_version({"sources": ["austen"]}) == version  # the integer finished runs recorded
    assert dataset_code_version({"sources": ["reuters", "demo_qa"]}) == \
        f"{version}+demo_qa{SOURCE_VERSIONS['demo_qa']}+multisource{MULTI_SOURCE_SPLIT_VERSION}"
    assert dataset_code_version({"sources": ["demo_qa"]}) == f"{version}+demo_qa{SOURCE_VERSIONS['demo_qa']}"
    assert dataset_code_version({"sources": ["austen", "reuters"]}) == \
        f"{version}+multisource{MULTI_SOURCE_SPLIT_VERSION}"
    assert dataset_code_version({"published": {"format": "articles", "path": "news/", "cutoff": "2020-01-01"}}) == \
        f"{version}+articles{FORMAT_VERSIONS['articles']}"
    assert dataset_code_version({"published": {"format": "wikimia", "path": "w.jsonl"}}) == \
        f"{version}+wikimia{FORMAT_VERSIONS['wikimia']}"
    assert dataset_code_version({"published": {"format": "nyt", "path": "n.jsonl"}}) == \
        f"{version}+nyt{FORMAT_VERSIONS['nyt']}"
    assert dataset_code_version({"published": {"format": "bookmia", "path": "b.jsonl"}}) == \
        f"{version}+bookmia{FORMAT_VERSIONS['bookmia']}"
    assert dataset_code_version({"published": {"format": "copybench", "path": "data"}}) == \
        f"{version}+copybench{FORMAT_VERSIONS['copybench']}"

    workdir = shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)  # config/ci.yaml finished
    (workdir / "bookmia.jsonl").write_text("".join(
        json.dumps({"book_id": b, "book": f"Book {b}", "snippet_id": k, "snippet": f"Snippet {k} of book {b}.",
                    "label": b % 2}) + "\n" for b in range(4) for k in range(2)), encoding="utf-8")
    config = with_config(workdir, "bookmia", lambda c: c["benchmarks"].__setitem__(
        "bm", {"published": {"format": "bookmia", "path": "bookmia.jsonl"}}))
    assert ("benchmark_dataset", "benchmark=bm") in {  # then the run that adds the BookMIA benchmark
        (j["rule"], j["wildcards"]) for j in touch_finished(workdir, config, finished_run[2], only_scheduled=True)}
    assert planned_jobs(workdir, config) == set()
    src = shutil.copytree(ROOT / "src" / "memaudit", tmp_path / "src" / "memaudit")
    (tmp_path / "workflow").symlink_to(ROOT / "workflow")  # the package finds its schema beside src/
    published = src / "datasets" / "published.py"
    text = published.read_text()
    assert text.count('FORMAT_VERSIONS = {"bookmia": ') == 1
    published.write_text(re.sub(r'(FORMAT_VERSIONS = \{"bookmia": )(\d+)', lambda m: f"{m[1]}{int(m[2]) + 1}", text))
    jobs = planned_jobs(workdir, config, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")})
    assert ("benchmark_dataset", "benchmark=bm") in jobs
    assert jobs == planned_jobs(workdir, config, "--forcerun", "results/datasets/bm/documents.jsonl")
    assert {wildcard(job, "benchmark") for job in jobs} - {None} == {"bm"}


def test_a_metrics_target_of_a_pair_no_probe_runs_is_named_before_any_job(tmp_path):
    """``snakemake results/metrics/news/tiny-gpt2-cb.csv`` (a configured benchmark and model that no probe runs
    together) scheduled the dataset and the metrics job, which stopped on no score table with pandas' "No objects
    to concatenate"; the DAG now stops naming the pair and what would make it."""
    workdir = make_workdir(tmp_path, share_resources=False)
    config = str(ROOT / "config" / "ci.yaml")
    for target in ("results/metrics/news/tiny-gpt2-cb.csv", "results/figures/news/tiny-gpt2-cb/roc.png"):
        proc = snakemake(workdir, "-n", "--cores", "1", target, "--configfile", config, check=False)
        assert proc.returncode == 1, target
        assert ("InputError: no probe of the config runs model 'tiny-gpt2-cb' on benchmark 'news', so it has no "
                "scores for its metrics or figures; add both to a probe's models and benchmarks lists") in \
            proc.stdout + proc.stderr
    assert "metrics" in snakemake(workdir, "-n", "--cores", "1", "results/metrics/news/tiny-gpt2-small.csv",
                                  "--configfile", config).stdout
    # DE-COP's tables of a benchmark it does not run on: paraphrased for minutes, then a summary of nothing
    proc = snakemake(workdir, "-n", "--cores", "1", "results/summary/decop_news.csv", "--configfile", config,
                     check=False)
    assert proc.returncode == 1 and ("InputError: no DE-COP probe of the config runs on benchmark 'news', so it has "
                                     "no DE-COP tables or figures") in proc.stdout + proc.stderr


def test_a_steps_version_is_its_entrys_and_an_unknown_step_is_an_error():
    assert step_version("stats") == STEPS["stats"].version >= 10 and step_version("datasets") == 2
    with pytest.raises(KeyError, match="no code version step 'plots'"):
        step_version("plots")


def test_the_users_labels_file_labels_its_books_and_an_edit_reruns_the_benchmark(tmp_path):
    """A benchmark of the user's books labelled by the user's own file (the auditor's books known seen and
    known unseen): the documents carry its labels, a book it leaves out is in rejects.csv, and an edit to the
    file reruns the dataset job (it is an input, not only a parameter)."""
    workdir = make_workdir(tmp_path)
    books = workdir / "mybooks"
    books.mkdir()
    for i, name in enumerate(("Tale", "Saga", "Ode")):
        chapters = "\n\n".join(f"CHAPTER {n}.\n\n" + " ".join(f"{name} {n} {k} went on {i}." for k in range(30))
                               for n in ("I", "II"))
        (books / f"{name}.txt").write_text(f"{name.upper()}\n\n{chapters}\n", encoding="utf-8")
    (workdir / "labels.csv").write_text("book,label\nTale.txt,1\nSaga.txt,0\n", encoding="utf-8")

    def mine(c):
        c["benchmarks"]["mine"] = {"sources": ["user_books"], "labels": "labels.csv", "passage_words": 20,
                                   "passages_per_document": 1, "near_duplicate_ngram": None,
                                   "source_options": {"user_books": {"directory": "mybooks", "min_chapter_words": 20}}}

    config = with_config(workdir, "mine", mine)
    target = "results/datasets/mine/documents.jsonl"
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    labels = {json.loads(line)["doc_id"]: json.loads(line)["meta"]["label"]
              for line in (workdir / target).read_text().splitlines()}
    assert labels == {"user/tale/ch001": 1, "user/tale/ch002": 1, "user/saga/ch001": 0, "user/saga/ch002": 0}
    with open(workdir / "results/datasets/mine/rejects.csv", newline="") as f:
        rejects = list(csv.reader(f))
    assert rejects[1:] == [["labels.csv", "0", "", "book", "'user_books/ode' (Ode.txt, ode)",
                            "no row names this book: its documents are left out, never guessed", "rejected"]]
    assert "Nothing to be done" in snakemake(workdir, target, "-n", "--configfile", config).stdout

    (workdir / "labels.csv").write_text("book,label\nTale.txt,1\nSaga.txt,0\nOde.txt,1\n", encoding="utf-8")
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["benchmark_dataset"]
    assert "reason: Updated input files: labels.csv" in plan


def test_a_book_added_to_a_user_books_folder_reruns_its_benchmark(tmp_path):
    """The user's books are the dataset job's inputs: a new file (here a PDF paper) reruns it, and
    an untouched folder reruns nothing. The dataset is built for real (seconds: the folder is small)."""
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    workdir = make_workdir(tmp_path)
    books = workdir / "mybooks"
    books.mkdir()
    chapters = "\n\n".join(f"CHAPTER {n}.\n\n" + " ".join(f"Sentence {n} {k} of the tale." for k in range(30))
                           for n in ("I", "II", "III", "IV"))
    (books / "tale.txt").write_text(f"A TALE\n\n{chapters}\n", encoding="utf-8")

    def mine(c):
        c["benchmarks"]["mine"] = {"sources": ["user_books"], "passage_words": 20, "passages_per_document": 1,
                                   "source_options": {"user_books": {"directory": "mybooks", "min_chapter_words": 20}}}

    config = with_config(workdir, "mine", mine)
    target = "results/datasets/mine/documents.jsonl"
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    assert len((workdir / target).read_text().splitlines()) == 4  # four chapters
    assert "Nothing to be done" in snakemake(workdir, target, "-n", "--configfile", config).stdout

    with PdfPages(books / "paper.pdf") as pdf:
        fig = Figure()
        fig.text(0.05, 0.5, "A paper of our own, with several words in it.", fontsize=10)
        pdf.savefig(fig)
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["benchmark_dataset"]
    assert "reason: Updated input files: mybooks/paper.pdf" in plan
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    kinds = [json.loads(line)["kind"] for line in (workdir / target).read_text().splitlines()]
    assert sorted(kinds) == ["book"] * 4 + ["paper"]
    (books / "tale.txt").unlink()  # a book taken out of the folder reruns it too
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["benchmark_dataset"]


def test_an_article_or_its_date_edited_in_place_reruns_its_benchmark(tmp_path):
    """An auditor's article folder (published format articles): each file is an input beside the folder,
    so an article rewritten in place (the folder's own time unchanged) or a date corrected in dates.csv
    reruns the dataset job, where the folder alone would not; an untouched folder reruns nothing."""
    workdir = make_workdir(tmp_path)
    folder = workdir / "myarticles"
    folder.mkdir()
    for name, words in (("rates", "The central bank raised rates"), ("harvest", "Farmers reported a record harvest")):
        (folder / f"{name}.txt").write_text(" ".join(f"{words} in week {k}." for k in range(20)), encoding="utf-8")
    (folder / "dates.csv").write_text("file,date\nrates.txt,2022-03-01\nharvest.txt,2024-06-01\n", encoding="utf-8")

    def mine(c):
        c["benchmarks"]["mine"] = {"published": {"format": "articles", "path": "myarticles", "cutoff": "2023-01-01"}}

    config = with_config(workdir, "mine", mine)
    target = "results/datasets/mine/documents.jsonl"
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    labels = {json.loads(line)["doc_id"]: json.loads(line)["meta"]["label"]
              for line in (workdir / target).read_text().splitlines()}
    assert labels == {"articles/rates": 1, "articles/harvest": 0}
    assert "Nothing to be done" in snakemake(workdir, target, "-n", "--configfile", config).stdout

    def rewritten(path, text):
        """``text`` written into ``path`` in place, the folder's time kept as it was (as an editor saving
        over the file leaves it), and the file's time a second later than the dataset's."""
        folder_times = os.stat(folder).st_atime_ns, os.stat(folder).st_mtime_ns
        path.write_text(text, encoding="utf-8")
        later = (workdir / target).stat().st_mtime + 1
        os.utime(path, (later, later))
        os.utime(folder, ns=folder_times)

    rewritten(folder / "rates.txt", (folder / "rates.txt").read_text() + " A correction was appended.")
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["benchmark_dataset"]
    assert "reason: Updated input files: myarticles/rates.txt" in plan
    snakemake(workdir, target, "--cores", "1", "--configfile", config)

    rewritten(folder / "dates.csv", "file,date\nrates.txt,2024-03-01\nharvest.txt,2022-06-01\n")
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert "reason: Updated input files: myarticles/dates.csv" in plan
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    labels = {json.loads(line)["doc_id"]: json.loads(line)["meta"]["label"]
              for line in (workdir / target).read_text().splitlines()}
    assert labels == {"articles/rates": 0, "articles/harvest": 1}


def test_a_checkpoint_given_by_path_is_recorded_by_digest_and_replacing_it_reruns_its_model(tmp_path, tiny_model_dir):
    """A model given by ``source.path``: its manifest records the SHA-256 of every file (what the checkpoint
    was when the run read it), and the files are the job's inputs, so a checkpoint replaced in place
    reruns the model (and, after it, all that read it), where before nothing would."""
    import hashlib

    from memaudit.stats.workflow import models_table

    workdir = make_workdir(tmp_path)
    shutil.copytree(tiny_model_dir, workdir / "given")
    config = with_config(workdir, "given", lambda c: c["models"].__setitem__(
        "given", {"family": "theirs", "dtype": "float32", "source": {"path": "given"}}))
    target = "results/models/given"
    snakemake(workdir, target, "--cores", "1", "--configfile", config)
    manifest = json.loads((workdir / target / "manifest.json").read_text())
    files = sorted(p for p in (workdir / "given").rglob("*") if p.is_file())
    each = {str(p.relative_to(workdir / "given")): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert manifest["source_digest"]["files"] == each and "model.safetensors" in each
    whole = hashlib.sha256("".join(f"{n}\0{h}\n" for n, h in each.items()).encode()).hexdigest()
    assert manifest["source_digest"]["sha256"] == whole
    assert models_table([str(workdir / target)]).loc[0, "source_sha256"] == whole
    assert "Nothing to be done" in snakemake(workdir, target, "-n", "--configfile", config).stdout

    weights = workdir / "given" / "model.safetensors"
    weights.write_bytes(weights.read_bytes())  # rewritten, the same bytes: Snakemake's checksum sees no change
    assert "Nothing to be done" in snakemake(workdir, target, "-n", "--configfile", config).stdout
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 0.01  # the same path, other weights: a checkpoint replaced in place
    save_file(tensors, weights, metadata={"format": "pt"})
    plan = snakemake(workdir, target, "-n", "--configfile", config).stdout
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["prepare_model"]
    assert "reason: Updated input files: given/model.safetensors" in plan
