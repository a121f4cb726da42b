"""Running the workflow in a scratch copy, and reading dry-run job lists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import snakemake_forkserver

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def make_workdir(dest: Path, share_resources: bool = True) -> Path:
    """A copy of the workflow sharing the fetched assets and the converted-model cache (:func:`share_resources_into`).

    ``share_resources=False`` gives it empty ``resources/`` instead: enough for dry runs.
    """
    for name in ("Snakefile", "workflow", "config", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    (dest / "resources").mkdir()
    if share_resources:
        share_resources_into(dest)
    return dest


ASSETS_STAMP = ".fetched"  # fetch_assets' output: an input of every dataset job


def share_resources_into(dest: Path) -> None:
    """``dest/resources``: the converted-model cache as a link to the repository's (no rule reads it as an
    input), and a ``demo`` folder of the tree's own whose unpacked packages link to the repository's but
    whose stamp ``.fetched`` is a copy (its time kept).

    The stamp is the input of every dataset job, so its time decides whether a tree's whole run is stale.
    Shared through a link to ``resources/demo``, it was touched under every tree by any other run: a
    ``snakemake --touch`` where fetch_assets' script is newer than the stamp (test_dvc's git clone), a
    fetch_assets rerun, any session on the machine sharing the folder. A finished tree's datasets were
    then older than their input: Snakemake's recorded checksum hid it where the tree's .snakemake is,
    but test_dvc's copy without it reran every job (and saw its outputs rewritten).
    """
    assets = ROOT / "resources" / "demo"
    for name in ("debs", "extracted"):  # where fetch_assets unpacks, created for a first fetch through the links
        (assets / name).mkdir(parents=True, exist_ok=True)
    demo = dest / "resources" / "demo"
    demo.mkdir(parents=True)
    for entry in sorted(assets.iterdir()):
        if entry.name == ASSETS_STAMP:
            shutil.copy2(entry, demo / entry.name)
        elif not entry.name.startswith("."):  # not a stamp being written (io.atomic_path's ..fetched.*)
            (demo / entry.name).symlink_to(entry)
    (ROOT / "resources" / "cache").mkdir(parents=True, exist_ok=True)
    (dest / "resources" / "cache").symlink_to(ROOT / "resources" / "cache")


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = snakemake_forkserver.run(list(args), cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def report_data(html: str, name: str) -> dict:
    """The JSON the HTML report of ``snakemake --report`` assigns to ``var <name>``."""
    m = re.search(rf"^\s*var {name} = (\{{.*\}});\s*$", html, re.M)
    assert m, f"no 'var {name}' in the report"
    return json.loads(m.group(1))


def planned_jobs(workdir: Path, configfile: Path | str | None, *extra: str, env: dict | None = None) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run of ``all`` schedules."""
    return {(job["rule"], job["wildcards"]) for job in dry_run(workdir, configfile, *extra, env=env)}


# Run in a subprocess (the API changes the working directory): which output
# positions of each rule are directory() outputs, as JSON {rule: [index, ...]}.
_DIRECTORY_OUTPUTS = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings
with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                      config_settings=ConfigSettings(configfiles=[Path(sys.argv[1])]),
                      snakefile=Path("Snakefile"), workdir=Path("."))
    dirs = {r.name: [i for i, f in enumerate(r.output) if is_flagged(f, "directory")] for r in wf._workflow.rules}
print("DIRECTORY_OUTPUTS" + json.dumps(dirs))
"""


def dry_run(workdir: Path, configfile: Path | str | None, *extra: str, env: dict | None = None) -> list[dict]:
    """Every job a dry run of ``all`` schedules: ``{"rule", "wildcards", "input", "output", "threads", "priority"}``
    (input and output as listed).
    ``configfile`` None: the Snakefile's default config (the demo)."""
    given = ["--configfile", str(configfile)] if configfile is not None else []
    proc = snakemake_forkserver.run(["-n", "all", *given, *extra], cwd=workdir, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"dry run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not m:
            continue
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        inp = re.search(r"^\s+input: (.*)$", block, re.M)
        out = re.search(r"^\s+output: (.*)$", block, re.M)
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        priority = re.search(r"^\s+priority: (\d+)$", block, re.M)
        jobs.append({"rule": m.group(1), "wildcards": wc.group(1).strip() if wc else "",
                     "input": [p.strip() for p in inp.group(1).split(",")] if inp else [],
                     "output": [p.strip() for p in out.group(1).split(",")] if out else [],
                     "threads": int(threads.group(1)) if threads else 1,
                     "priority": int(priority.group(1)) if priority else 0})
    return jobs


def directory_outputs(workdir: Path, configfile: Path | str) -> dict[str, list[int]]:
    """{rule: positions of its directory() outputs}."""
    proc = subprocess.run([sys.executable, "-c", _DIRECTORY_OUTPUTS, str(configfile)], cwd=workdir,
                          capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DIRECTORY_OUTPUTS")), None)
    if proc.returncode != 0 or line is None:
        raise AssertionError(f"reading the rules failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(line.removeprefix("DIRECTORY_OUTPUTS"))


def touch_finished(workdir: Path, configfile: Path | str, directories: dict | None = None, *,
                   only_scheduled: bool = False) -> list[dict]:
    """Make ``workdir`` look like a finished run of ``configfile`` in seconds, without running a job.

    Every output the dry run lists is created empty (directory outputs as directories), then
    ``snakemake --touch --forceall`` touches them job by job in DAG order and records each job's
    metadata (params, code, input set) exactly as a real run does, so later dry runs apply
    the same rerun triggers as on a finished run. Returns the jobs of the full run (see ``dry_run``).
    ``directories`` (from ``directory_outputs``) saves reading the rules again.

    ``only_scheduled``: on a tree already finished for another config, touch only the jobs the dry run
    of ``configfile`` schedules there (``--forcerun`` of their outputs: they and what depends on them,
    the same set), as a real run of it would run them; the other jobs keep their record. Snakemake's
    touch waits 0.1 s a job, so on the ci run's tree this is seconds less. Returns the scheduled jobs.
    """
    directories = directories or directory_outputs(workdir, configfile)
    jobs = dry_run(workdir, configfile)
    if only_scheduled and not jobs:
        return jobs
    for job in jobs:
        for i, out in enumerate(job["output"]):
            path = workdir / out
            if path.exists():
                continue
            if i in directories.get(job["rule"], []):
                path.mkdir(parents=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    which = ["--forcerun", *(out for job in jobs for out in job["output"])] if only_scheduled else ["--forceall"]
    snakemake(workdir, "--touch", *which, "--cores", "1", "all", "--configfile", str(configfile))
    return jobs


def dry_run_resources(workdir: Path, configfile: Path | str, *extra: str, env: dict | None = None) -> dict:
    """``{(rule, wildcards): {resource: value}}`` of every job a dry run of ``all`` schedules, as Snakemake
    evaluates the rules' resources (integers where they are)."""
    proc = snakemake_forkserver.run(["-n", "all", "--configfile", str(configfile), *extra], cwd=workdir, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"dry run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    out = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        if rule and wildcards and resources:
            pairs = (kv.split("=", 1) for kv in resources.group(1).split(", ") if "=" in kv)
            out[(rule.group(1), wildcards.group(1))] = {k: int(v) if v.isdigit() else v for k, v in pairs}
    return out


_RULE_START = re.compile(r"^(?:rule (\w+):|use rule (\w+) as (\w+) with:)[ \t]*$", re.M)
_DIRECTIVE = re.compile(r"^    (\w+):[ \t]*(.*)$")


def rule_directives() -> dict[str, dict[str, str]]:
    """{rule: {directive: its text}} as workflow/rules/*.smk declare them, for tests that read the rules
    statically (every rule carries a code version; which rules run a script). ``use rule A as B with:`` makes
    B out of A's directives with the ones it names replaced whole, as Snakemake does (a ``params:`` there is
    all of B's params, not added to A's)."""
    declared: dict[str, tuple[str | None, dict[str, str]]] = {}
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        starts = list(_RULE_START.finditer(text))
        for i, start in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            directives: dict[str, list[str]] = {}
            current = None
            for line in text[start.end():end].splitlines()[1:]:
                if line and not line[0].isspace():  # the rule's block ends at the next top-level line
                    break
                if directive := _DIRECTIVE.match(line):
                    current = directive[1]
                    directives[current] = [directive[2]] if directive[2] else []
                elif current is not None and line.strip() and not line.strip().startswith("#"):
                    directives[current].append(line.strip())
            name = start[1] or start[3]
            assert name not in declared, f"{smk.name}: rule {name} declared twice"
            declared[name] = (start[2], {k: "\n".join(v) for k, v in directives.items()})
    rules = {}

    def resolve(name: str) -> dict[str, str]:
        if name not in rules:
            parent, own = declared[name]
            rules[name] = {**(resolve(parent) if parent else {}), **own}
        return rules[name]

    for name in declared:
        resolve(name)
    return rules
