"""DVC round trip on a finished run: push, fresh clone, pull, touch, nothing left to do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_helpers import ROOT, snakemake

pytestmark = pytest.mark.slow
DVC = [str(Path(sys.executable).with_name("dvc"))]


def sh(cmd, cwd):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_push_clone_pull_touch_is_up_to_date(ci_run, tmp_path):
    repo = tmp_path / "repo"  # a copy: the shared run directory stays as the other tests expect
    shutil.copytree(ci_run, repo, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    shutil.copy2(ROOT / "dvc.yaml", repo / "dvc.yaml")
    shutil.copytree(ROOT / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / ".gitignore").write_text(".snakemake/\nresources/\n")
    sh(["git", "init", "-q"], repo)
    sh(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"], repo)
    sh(DVC + ["init", "-q"], repo)
    remote = tmp_path / "remote"
    sh(DVC + ["remote", "add", "-d", "shared", str(remote)], repo)
    sh(DVC + ["commit", "-f", "-q"], repo)  # record the finished run's outputs in dvc.lock
    sh(DVC + ["push", "-q"], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "run"], repo)
    assert (repo / "dvc.lock").exists() and any(remote.rglob("*"))

    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    (clone / "resources").mkdir()
    for name in ("demo", "cache"):
        (clone / "resources" / name).symlink_to(ROOT / "resources" / name)
    assert not (clone / "results").exists()
    sh(DVC + ["pull", "-q"], clone)
    assert (clone / "results/summary/metrics.csv").read_bytes() == (repo / "results/summary/metrics.csv").read_bytes()
    snakemake(clone, "--touch", "--cores", "1", "all", "--configfile", "config/ci.yaml")
    out = snakemake(clone, "-n", "all", "--configfile", "config/ci.yaml").stdout
    assert "Nothing to be done" in out
