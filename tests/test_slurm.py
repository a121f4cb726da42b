"""The ci workflow submitted through profiles/slurm to a real single-node SLURM cluster.

A SLURM controller and node daemon are started on this machine (tests/slurm_cluster.py), the
ci workflow (`all`: datasets, tiny GPT-2 pretraining and full fine-tuning, every token-probability
method, DE-COP's logit mode on the LoRA-contaminated SmolLM2 and its likelihood mode, KTD,
CopyBench, statistics, selection, figures) runs with `snakemake --profile <profiles/slurm with
this cluster's names>`, every job goes through sbatch and srun, and the results are compared with
those of the local run of the same config (the `ci_run` fixture): bit for bit. Skips only where
SLURM cannot be installed (not root, no apt).

What the local run already computed with SmolLM2 is not computed a second time (it was half of
this test's 9 minutes): the run starts from the local run's novels dataset (its DE-COP paraphrases
included) and SmolLM2 models, copied with their times, and token-probability attacks run on the
tiny models only. Every rule but `decop_items` still runs under SLURM; the comparison covers every
table the SLURM run writes.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
import shutil
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
                      for rule in ("prepare_model", "token_stats", "prefix_probe", "decop_items", "decop_probe")},
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


# Products of the local run the SLURM run starts from (copied with their modification times, so
# Snakemake finds them up to date): SmolLM2's conversion, its LoRA fine-tune and its DE-COP
# paraphrases are the local run's three longest jobs.
SEEDED = ("results/datasets/novels", "results/models/smollm2-135m", "results/models/smollm2-135m-contaminated")
SLURM_CONFIG = "config/ci-slurm.yaml"


# Families whose jobs the SLURM run leaves out: their rules are submitted exactly as token_stats and
# decop_probe are (one Snakemake job per SLURM job, the same resources), and the local ci run checks
# their numbers; each adds a dozen SLURM jobs (about 20 s each on the test's one node) to make test.
LOCAL_ONLY = ("ktd", "copybench", "copybench_literal", "copybench_nonliteral", "cloze", "cloze_logit",
              "decop_likelihood")


def slurm_config(workdir: Path) -> dict:
    """config/ci.yaml with token-probability attacks on the tiny models only, DE-COP's logit mode on the
    seeded SmolLM2, and no KTD, CopyBench or cloze probes (LOCAL_ONLY) nor CopyBench's models and books."""
    config = yaml.safe_load((workdir / "config/ci.yaml").read_text())
    token_prob = config["probes"]["token_prob"]
    token_prob["models"] = [m for m in token_prob["models"] if not m.startswith("smollm2")]
    assert token_prob["models"] and "smollm2-135m-contaminated" in config["probes"]["decop_logit"]["models"]
    for probe in LOCAL_ONLY:
        del config["probes"][probe]
    config["models"] = {m: e for m, e in config["models"].items() if not m.startswith("tiny-gpt2-cb")}
    del config["benchmarks"]["books"]
    (workdir / SLURM_CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def seed_from(local: Path, workdir: Path) -> None:
    for rel in SEEDED:
        shutil.copytree(local / rel, workdir / rel, symlinks=True, copy_function=shutil.copy2,
                        ignore=shutil.ignore_patterns("cloze_*"))  # the SLURM run has no cloze probes


def assert_tables_match(local_run: Path, workdir: Path, *, since: float, scratch: Path) -> list[str]:
    """Every table the SLURM run wrote (after ``since``) equals the local run's rows of the models
    and methods the SLURM run scored (SmolLM2 has no token-probability rows there). Returns the tables."""
    written = [t for t in _compared_tables(workdir) if (workdir / t).stat().st_mtime >= since]
    assert set(written) <= set(_compared_tables(local_run))
    assert {"results/summary/metrics.csv", "results/summary/selection.csv",
            "results/metrics/novels/smollm2-135m-contaminated.csv",
            "results/scores/novels/smollm2-135m-contaminated/decop_logit_documents.csv"} <= set(written), written
    assert not [t for t in written if t.startswith("results/datasets/novels/")], written  # seeded
    assert len(written) >= 30, written
    for table in written:
        local, remote = pd.read_csv(local_run / table), pd.read_csv(workdir / table)
        keys = [k for k in ("benchmark", "model", "method") if k in local.columns]
        keep = (pd.MultiIndex.from_frame(local[keys]).isin(pd.MultiIndex.from_frame(remote[keys])) if keys
                else pd.Series(True, index=local.index))
        keep = pd.Series(keep, index=local.index)
        if not keep.all():
            assert table.startswith("results/summary/") or "smollm2-135m-contaminated" in table, table
            local[keep].to_csv(scratch / "local.csv", index=False)
            _assert_frames_equal(scratch / "local.csv", workdir / table)
        else:
            _assert_frames_equal(local_run / table, workdir / table)
    npz = sorted(workdir.glob("results/scores/*/*/token_stats.npz"))
    assert len(npz) == 4
    for stats in npz:
        with np.load(stats) as b, np.load(local_run / stats.relative_to(workdir)) as a:
            assert sorted(a.files) == sorted(b.files)
            for name in a.files:
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{stats} {name}")
    return written


def test_ci_workflow_on_slurm_equals_local_run(slurm_cluster, ci_run, tmp_path):
    (tmp_path / "slurm-run").mkdir()
    workdir = make_workdir(tmp_path / "slurm-run")
    config = slurm_config(workdir)
    seed_from(ci_run, workdir)
    profile = cluster_profile(tmp_path / "profile", slurm_cluster.cpus)
    t0 = time.time()
    proc = subprocess.run([*SNAKEMAKE, "--profile", str(profile), "all", "--configfile", SLURM_CONFIG],
                          cwd=workdir, capture_output=True, text=True, timeout=1200)
    elapsed = time.time() - t0
    log = proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, f"snakemake --profile slurm failed after {elapsed:.0f}s:\n{log}\n{slurm_cluster.logs()}"

    # Every job went through SLURM and completed there: the SLURM jobs Snakemake reports
    # submitting are those SLURM knows under this run's id (their job name), all COMPLETED,
    # and no rule ran in Snakemake's own process except the declared local rule.
    output = proc.stdout + proc.stderr
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    submitted = set(re.findall(r"has been submitted with SLURM jobid (\d+)", output))
    slurm_jobs = _slurm_jobs(run_id)
    assert submitted and {jobid for jobid, _ in slurm_jobs} == submitted, (submitted, slurm_jobs)
    assert all(state == "COMPLETED" for _, state in slurm_jobs), slurm_jobs
    assert set(re.findall(r"^localrule (\w+):", output, re.M)) <= {"fetch_assets", "all"}
    ran = set(re.findall(r"^\s*rule (\w+):", output, re.M))
    assert {"prepare_model", "token_stats", "token_prob_scores", "metrics", "figures_model", "decop_probe",
            "benchmark_dataset", "summary"} <= ran, ran
    # the seeded products were up to date: no SmolLM2 job, no paraphrasing
    assert "decop_items" not in ran and "prepare_model" in ran
    assert not re.search(r"^\s+wildcards: model=smollm2", output, re.M), "a seeded model was rebuilt"
    # the profile's groups: scoring, statistics and figures of each scored (benchmark, model) pair in
    # one job where token-probability scoring connects them (the tiny pair on novels and on news);
    # the pair without it (DE-COP's SmolLM2 on novels) has its metrics and its figures in two groups
    from memaudit import jobs
    from memaudit.probes.registry import probes_for_model

    pairs = [(b, m) for b, models in jobs.scored(config).items() for m in models]
    expected = sum(1 if "token_prob" in probes_for_model(config, m, b) else 2 for b, m in pairs)
    groups = re.findall(r"Group job (\w+) \(jobs in lexicogr. order\):", output)
    assert (len(pairs), expected) == (5, 6) and groups == ["score_and_stats"] * expected, groups

    written = assert_tables_match(ci_run, workdir, since=t0, scratch=tmp_path)
    summary = pd.read_csv(workdir / "results/summary/metrics.csv")
    assert {"smollm2-135m-contaminated", "tiny-gpt2-small-contaminated"} <= set(summary["model"])
    print(f"SLURM run: {len(slurm_jobs)} SLURM jobs in {elapsed:.0f}s; {len(written)} tables compared")
