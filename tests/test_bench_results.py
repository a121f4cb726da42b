"""The committed ``results/bench/*.json`` were judged against the targets their scripts set now.

A target changed after the run leaves the JSON's ``meets_targets`` (and so ``run_all.py --summary-only``
and ``--strict``) contradicting the script and the docs that quote the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "results" / "bench").glob("*.json"))
# keys of a JSON's ``targets`` and the script constants they copy
TARGET_CONSTANTS = {"speedup_min": "TARGET_SPEEDUP", "speedup_model": "TARGET_MODEL",
                    "max_abs_diff_max": "TARGET_ABS_DIFF", "max_rel_diff_max": "TARGET_REL_DIFF"}


def script(name: str):
    return load_benchmark(f"bench_{name}")


WITH_TARGETS = [p for p in RESULTS if "targets" in json.loads(p.read_text())]


def test_the_results_with_targets_are_found():
    assert sorted(p.name for p in WITH_TARGETS) == [
        "api.json", "grad_norms.json", "grad_norms_amx.json", "grad_norms_cuda.json", "grad_norms_zen5.json",
        "serve.json", "token_prob.json", "window_word_logprobs.json", "word_logprobs.json"]


@pytest.mark.parametrize("path", WITH_TARGETS, ids=lambda p: p.stem)
def test_a_committed_result_holds_its_scripts_targets(path):
    result = json.loads(path.read_text())
    module = script(result["name"])
    if hasattr(module, "TARGETS"):
        assert result["targets"] == module.TARGETS
    else:
        assert result["targets"] == {k: getattr(module, TARGET_CONSTANTS[k]) for k in result["targets"]}
    speedup_min, only = result["targets"].get("speedup_min"), result["targets"].get("speedup_model")
    for model, row in result.get("models", {}).items():
        if only in (None, model):
            assert result["meets_targets"][f"speedup_{model}"] == (row["speedup"] >= speedup_min), model
