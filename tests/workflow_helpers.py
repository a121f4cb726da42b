"""Running the workflow in a scratch copy, and reading dry-run job lists."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def make_workdir(dest: Path) -> Path:
    """A copy of the workflow sharing the fetched assets and the converted-model cache."""
    for name in ("Snakefile", "workflow", "config", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    (dest / "resources").mkdir()
    for name in ("demo", "cache"):
        (ROOT / "resources" / name).mkdir(parents=True, exist_ok=True)
        (dest / "resources" / name).symlink_to(ROOT / "resources" / name)
    return dest


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def planned_jobs(workdir: Path, configfile: Path) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run schedules."""
    out = snakemake(workdir, "-n", "all", "--configfile", str(configfile)).stdout
    jobs = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not m:
            continue
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        jobs.add((m.group(1), wc.group(1).strip() if wc else ""))
    return jobs
