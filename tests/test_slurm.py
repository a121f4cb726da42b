"""A subset of the ci workflow submitted through profiles/slurm to a real single-node SLURM cluster.

A SLURM controller and node daemon are started on this machine (tests/slurm_cluster.py); the ci
workflow cut to the tiny GPT-2 pair (`all`: datasets, pretraining and full fine-tuning on novels
and news, every token-probability method on the novels, statistics, selection, figures, summary) runs with
`snakemake --profile <profiles/slurm with this cluster's names>`, every job goes through sbatch
and srun, and every table it writes is compared with the local run of the ci config (the `ci_run`
fixture): bit for bit. Skips only where SLURM cannot be installed (not root, no apt).

The two runs share nothing, so the local run is made while SLURM runs its jobs (they mostly wait
for the executor's status checks): this test and the local run were make test's longest chain.
The other families' rules are submitted the same way (one Snakemake job per SLURM job, resources
from the rule) and their numbers are checked by the local run.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from slurm_cluster import PARTITION, SlurmCluster, SlurmUnavailable
from workflow_helpers import ROOT, SNAKEMAKE, make_workdir

pytestmark = pytest.mark.slow

# The profile's settings that name things of a particular cluster, and this cluster's values.
# Everything else in profiles/slurm/config.yaml is used as it is.
CLUSTER_SPECIFIC = {
    "default-resources": {"slurm_partition": PARTITION, "slurm_account": None},
    "set-resources": {rule: {"slurm_partition": PARTITION}
                      for rule in yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())["set-resources"]},
    # No accounting database here: squeue, which sees finished jobs for MinJobAge (a day).
    "slurm-status-command": "squeue",
    # A short first status check instead of 40 s (the executor adds 10 s per check while
    # nothing finishes), and a local file system needs no latency wait.
    "slurm-init-seconds-before-status-checks": 2,
    "latency-wait": 5,
}
EXTRA = {
    "slurm-no-account": True,  # the test cluster has no accounts
    "max-threads": None,       # set to the node's CPU count: a config without threads_per_job asks for 8
}


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.fail("snakemake-executor-plugin-slurm is not installed: `pip install -e '.[dev]'` installs it")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        cluster.stop()
        pytest.skip(f"no SLURM cluster for this test: {exc}")
    except Exception:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


def _merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def cluster_profile(dest: Path, cpus: int) -> Path:
    """profiles/slurm with this cluster's partition, status command and polling."""
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    missing = [key for key in CLUSTER_SPECIFIC if key not in profile]
    assert not missing, f"profiles/slurm/config.yaml lacks the cluster settings {missing}"
    assert profile["executor"] == "slurm"
    profile = _merge(profile, CLUSTER_SPECIFIC)
    profile = _merge(profile, {**EXTRA, "max-threads": cpus})
    dest.mkdir(parents=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def _slurm_jobs(run_id: str) -> list[tuple[str, str]]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%j|%T"], capture_output=True, text=True,
                         check=True).stdout
    return [(jobid, state) for jobid, name, state in (line.split("|") for line in out.split()) if name == run_id]


def _is_number(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _assert_frames_equal(local: Path, slurm: Path) -> None:
    a, b = pd.read_csv(local), pd.read_csv(slurm)
    assert list(a.columns) == list(b.columns), slurm
    # a table may be empty only where nothing is its right content (no rejected rows)
    assert len(a) == len(b) and (len(a) > 0 or slurm.name in EMPTY_ALLOWED), slurm
    keys = [c for c in a.columns if not _is_number(a[c]) or c in ("passage_id", "doc_id", "label")]
    a = a.sort_values(keys, kind="stable").reset_index(drop=True)
    b = b.sort_values(keys, kind="stable").reset_index(drop=True)
    numeric = [c for c in a.columns if c not in keys]
    pd.testing.assert_frame_equal(a.drop(columns=numeric), b.drop(columns=numeric), obj=str(slurm))
    # Same code, same CPU, same thread count (torch uses the job's threads: 1, threads_per_job in
    # config/ci.yaml, locally and under SLURM) and the same seeds: the numbers come out bit for bit the same,
    # so the tolerance is zero; NaNs (e.g. a p-value on a constant score) must match as NaNs.
    np.testing.assert_array_equal(a[numeric].to_numpy(float), b[numeric].to_numpy(float), err_msg=str(slurm))


EMPTY_ALLOWED = ("rejects.csv",)


def _compared_tables(run: Path) -> list[str]:
    """Every table of the run a local and a SLURM run must agree on (CSV files under results/)."""
    skip = ("results/api/",)  # the ledger has wall-clock fields
    return sorted(str(p.relative_to(run)) for p in (run / "results").rglob("*.csv")
                  if not str(p.relative_to(run)).startswith(skip))


SLURM_CONFIG = "config/ci-slurm.yaml"
# The models the SLURM run trains and scores (the tiny pair of the ci config)
SLURM_MODELS = ("tiny-gpt2-small", "tiny-gpt2-small-contaminated")
# The benchmarks it scores: the news, whose documents the contaminated model is fine-tuned on too, are
# built and trained on but not scored (scoring them is the same jobs again, 7 SLURM jobs of 23)
SLURM_SCORED = ("novels",)
# Methods of the families the SLURM run leaves out (rows of the local run's tables it has no part in)
OTHER_FAMILY = r"^(decop|ktd_|cloze_|copybench_|prefix_)"


def slurm_config(workdir: Path) -> dict:
    """config/ci.yaml cut to the tiny GPT-2 pair, every token-probability method on the novels (SLURM_SCORED).

    The SLURM run shares no product with the local ci run, so the two run side by side (the test
    compares them when both are done). The other families' rules (DE-COP, KTD, CopyBench, cloze)
    are submitted exactly as prepare_model, token_stats and the grouped scoring jobs are: one
    Snakemake job per SLURM job, resources from the rule; the local ci run checks their numbers.
    """
    config = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    token_prob = config["probes"]["token_prob"]
    assert set(SLURM_MODELS) <= set(token_prob["models"])
    token_prob["models"] = list(SLURM_MODELS)
    assert set(SLURM_SCORED) < set(token_prob["benchmarks"])
    benchmarks = token_prob["benchmarks"]  # every one is built: the contaminated model is fine-tuned on them
    token_prob["benchmarks"] = list(SLURM_SCORED)
    config["probes"] = {"token_prob": token_prob}
    config["models"] = {m: config["models"][m] for m in SLURM_MODELS}
    config["benchmarks"] = {b: config["benchmarks"][b] for b in benchmarks}
    (workdir / SLURM_CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def assert_tables_match(local_run: Path, workdir: Path, *, since: float, scratch: Path) -> list[str]:
    """Every table the SLURM run wrote (after ``since``) equals the local run's rows of the models
    and methods the SLURM run scored: the local run's other rows are other models' or other families'
    (OTHER_FAMILY), never a token-probability row the SLURM run lacks. Returns the tables."""
    written = [t for t in _compared_tables(workdir) if (workdir / t).stat().st_mtime >= since]
    assert set(written) <= set(_compared_tables(local_run))
    assert {"results/summary/metrics.csv", "results/summary/selection.csv", "results/datasets/novels/rejects.csv",
            "results/summary/rejects.csv",
            "results/metrics/novels/tiny-gpt2-small-contaminated.csv",
            "results/scores/novels/tiny-gpt2-small/token_prob_documents.csv",
            "results/metrics/news/blind_baseline.csv"} <= set(written), written
    assert not [t for t in written if t.startswith("results/scores/news/tiny")], written
    assert len(written) >= 15, written
    slurm_benchmarks = {p.name for p in (workdir / "results/datasets").iterdir() if p.is_dir()}
    for table in written:
        local, remote = pd.read_csv(local_run / table), pd.read_csv(workdir / table)
        if table == "results/summary/benchmarks.csv":  # the families each config runs: its own, by design
            families = remote.set_index("benchmark")["families"]
            assert families.isna().to_dict() == {"news": True, "novels": False}, remote  # news: built, not scored
            assert families["novels"] == "token_prob", remote
            remote.drop(columns="families").to_csv(scratch / "slurm.csv", index=False)
            local = local[local["benchmark"].isin(slurm_benchmarks)].drop(columns="families")
            local.to_csv(scratch / "local.csv", index=False)
            _assert_frames_equal(scratch / "local.csv", scratch / "slurm.csv")
            continue
        keys = [k for k in ("benchmark", "model", "method") if k in local.columns]
        keep = (pd.MultiIndex.from_frame(local[keys]).isin(pd.MultiIndex.from_frame(remote[keys])) if keys
                else pd.Series(True, index=local.index))
        keep = pd.Series(keep, index=local.index)
        if not keep.all():
            dropped = local[~keep.to_numpy()]
            # "(none)": the blind baselines, which the SLURM run has on every benchmark it builds
            other = (~dropped["model"].isin([*SLURM_MODELS, "(none)"]) if "model" in keys
                     else pd.Series(False, index=dropped.index))
            if "method" in keys:
                other |= dropped["method"].astype(str).str.match(OTHER_FAMILY)
            if "benchmark" in keys:  # e.g. summary/rejects.csv: a row per benchmark of the local run
                other |= ~dropped["benchmark"].isin(slurm_benchmarks)
                # and the tiny pair's rows on the news (built and trained on there, scored by the local run only)
                if "model" in keys:
                    other |= ~dropped["benchmark"].isin(SLURM_SCORED) & dropped["model"].isin(SLURM_MODELS)
            assert other.all(), (table, dropped[~other])
            local[keep].to_csv(scratch / "local.csv", index=False)
            _assert_frames_equal(scratch / "local.csv", workdir / table)
        else:
            _assert_frames_equal(local_run / table, workdir / table)
    npz = sorted(workdir.glob("results/scores/*/*/token_stats*.npz"))  # and of the lowercased passages
    assert [p.name for p in npz] == ["token_stats.npz", "token_stats_lowercase.npz"] * 2
    for stats in npz:
        with np.load(stats) as b, np.load(local_run / stats.relative_to(workdir)) as a:
            assert sorted(a.files) == sorted(b.files)
            for name in a.files:
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{stats} {name}")
    return written


def test_ci_workflow_on_slurm_equals_local_run(slurm_cluster, request, tmp_path):
    (tmp_path / "slurm-run").mkdir()
    workdir = make_workdir(tmp_path / "slurm-run")
    config = slurm_config(workdir)
    profile = cluster_profile(tmp_path / "profile", slurm_cluster.cpus)
    t0 = time.time()
    with (tmp_path / "slurm.out").open("w") as out, (tmp_path / "slurm.err").open("w") as err:
        proc = subprocess.Popen([*SNAKEMAKE, "--profile", str(profile), "all", "--configfile", SLURM_CONFIG],
                                cwd=workdir, stdout=out, stderr=err, text=True)
        try:
            # the local ci run (shared with the other workflow tests) is made while SLURM runs its jobs
            ci_run = request.getfixturevalue("ci_run")
            proc.wait(timeout=1200)
        finally:
            if proc.poll() is None:
                proc.kill()
    elapsed = time.time() - t0
    stdout, stderr = (tmp_path / "slurm.out").read_text(), (tmp_path / "slurm.err").read_text()
    log = stdout[-3000:] + stderr[-6000:]
    assert proc.returncode == 0, f"snakemake --profile slurm failed after {elapsed:.0f}s:\n{log}\n{slurm_cluster.logs()}"

    # Every job went through SLURM and completed there: the SLURM jobs Snakemake reports
    # submitting are those SLURM knows under this run's id (their job name), all COMPLETED,
    # and no rule ran in Snakemake's own process except the declared local rule.
    output = stdout + stderr
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", output))
    slurm_jobs = _slurm_jobs(run_id)
    assert submitted and {jobid for jobid, _ in slurm_jobs} == submitted, (submitted, slurm_jobs)
    assert all(state == "COMPLETED" for _, state in slurm_jobs), slurm_jobs
    assert set(re.findall(r"^localrule (\w+):", output, re.M)) <= {"fetch_assets", "all"}
    ran = set(re.findall(r"^\s*rule (\w+):", output, re.M))
    assert {"benchmark_dataset", "pretrain_pool", "prepare_model", "token_stats", "token_stats_lowercase",
            "token_prob_scores", "metrics", "figures_model", "summary"} <= ran, ran
    # the profile's groups: scoring, statistics and figures of each scored (benchmark, model) pair
    # (the tiny pair on the novels) in one job
    from memaudit import jobs

    pairs = [(b, m) for b, models in jobs.scored(config).items() for m in models]
    groups = re.findall(r"Group job (\w+) \(jobs in lexicogr. order\):", output)
    assert len(pairs) == 2 and groups == ["score_and_stats"] * 2, groups

    written = assert_tables_match(ci_run, workdir, since=t0, scratch=tmp_path)
    summary = pd.read_csv(workdir / "results/summary/metrics.csv")
    assert set(summary["model"]) == {*SLURM_MODELS, "(none)"}  # (none): the blind baselines
    print(f"SLURM run: {len(slurm_jobs)} SLURM jobs in {elapsed:.0f}s; {len(written)} tables compared")
