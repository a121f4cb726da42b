"""The DAG benchmark's configuration has the promised size, and a dry run of hub models loads nothing.

Timings are not asserted (they depend on the machine); ``make bench`` records them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memaudit.jobs import validate_config
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_dag")


def test_large_config_is_valid_and_as_large_as_the_issue_asks(bench):
    config = validate_config(bench.large_config(20, 6))
    assert len(config["models"]) == 20 and len(config["benchmarks"]) == 6
    assert bench.n_methods(config) == 8
    hub = [e for e in config["models"].values() if "source" in e]
    assert len(hub) == 10 and all(len(e["source"]["revision"]) == 40 for e in hub)


def test_dry_run_of_hub_models_touches_no_network_and_loads_no_model(bench, tmp_path):
    """Every job of every model is planned (each per-pair rule once per (benchmark, model),
    prepare_model once per model), with no socket opened and no model library imported."""
    config = bench.large_config(4, 2)
    workdir = bench.scratch_workflow(tmp_path)
    configfile = workdir / "config" / "large.yaml"
    configfile.write_text(yaml.safe_dump(config))
    run = bench.dry_run(workdir, configfile)
    assert run["network"] == []
    assert not {"torch", "transformers"} & set(run["modules"]), run["modules"]
    by_rule = run["jobs_by_rule"]
    assert by_rule["prepare_model"] == 4
    for rule in ("token_stats", "token_prob_scores", "metrics", "figures_model"):
        assert by_rule[rule] == 4 * 2, rule
    assert by_rule["benchmark_dataset"] == by_rule["figure_auc_vs_size"] == 2
