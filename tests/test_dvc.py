"""DVC round trip on a finished run: push, fresh clone, pull, touch, nothing left to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ROOT, share_resources_into, snakemake

pytestmark = pytest.mark.slow
DVC = [str(Path(sys.executable).with_name("dvc"))]


def sh(cmd, cwd):
    # The stage's command finds snakemake on PATH, as in an activated environment.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_a_workflow_tree_has_its_own_assets_stamp(tmp_path):
    """A test's workflow tree links the unpacked demo packages but has its own copy of their stamp, the input
    of every dataset job: through a link to resources/demo, a stamp touched by any other run (the clone's
    `snakemake --touch` below, another session sharing the folder) made a finished tree's datasets older
    than their input, and the copy of the ci run without its .snakemake (the round trip below) reran every
    job: the round trip's flake."""
    from workflow_helpers import ASSETS_STAMP, make_workdir

    shared = ROOT / "resources" / "demo"
    before = (shared / ASSETS_STAMP).stat().st_mtime_ns if (shared / ASSETS_STAMP).exists() else None
    tree = make_workdir(tmp_path)
    demo = tree / "resources" / "demo"
    assert demo.is_dir() and not demo.is_symlink()
    assert os.path.samefile(demo / "extracted", shared / "extracted") and os.path.samefile(demo / "debs", shared / "debs")
    assert os.path.samefile(tree / "resources" / "cache", ROOT / "resources" / "cache")  # not an input: shared
    if before is None:  # assets not fetched yet: the tree's first run fetches them through the links
        assert not (demo / ASSETS_STAMP).exists()
    else:
        stamp = demo / ASSETS_STAMP
        assert stamp.is_file() and not stamp.is_symlink() and not os.path.samefile(stamp, shared / ASSETS_STAMP)
        assert stamp.read_bytes() == (shared / ASSETS_STAMP).read_bytes()
        # as old as the fetch (another session may touch the shared one meanwhile)
        assert stamp.stat().st_mtime_ns in {before, (shared / ASSETS_STAMP).stat().st_mtime_ns}


def test_push_clone_pull_touch_is_up_to_date(ci_run, tmp_path):
    # the shared run's own assets stamp: one touched by another run is not this run's input (above)
    assert not (ci_run / "resources" / "demo").is_symlink()
    repo = tmp_path / "repo"  # a copy: the shared run directory stays as the other tests expect
    shutil.copytree(ci_run, repo, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    # The project's stage, pointed at the ci config as `memaudit dvc-stage` does: `dvc repro` runs Snakemake,
    # which finds the run finished.
    from memaudit.dvc_stage import write_stage
    from memaudit.jobs import load_config

    stage = (ROOT / "dvc.yaml").read_text()
    shutil.copy2(ROOT / "dvc.yaml", repo / "dvc.yaml")
    deps = write_stage(repo / "dvc.yaml", "config/ci.yaml", load_config(ROOT / "config" / "ci.yaml"), cores=2)
    assert "config/ci.yaml" in deps and "config/config.yaml" not in deps
    shutil.copytree(ROOT / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    assert "- resources/books\n" in stage  # the user_books folder is a dependency (the repository holds its README)
    (repo / "resources" / "books").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "resources" / "books" / "README.md", repo / "resources" / "books" / "README.md")
    # resources/books is in git, as in the project (its README): a clone has it, and dvc status hashes it the same
    (repo / ".gitignore").write_text(".snakemake/\nresources/*\n!resources/books/\n")
    sh(["git", "init", "-q"], repo)
    sh(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"], repo)
    sh(DVC + ["init", "-q"], repo)
    remote = tmp_path / "remote"
    sh(DVC + ["remote", "add", "-d", "shared", str(remote)], repo)
    before = {p: p.stat().st_mtime_ns for p in (repo / "results").rglob("*") if p.is_file()}
    sh(DVC + ["repro"], repo)  # persisted outputs: nothing deleted, nothing recomputed; dvc.lock records them
    assert {p: p.stat().st_mtime_ns for p in before} == before
    sh(DVC + ["push", "-q"], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "run"], repo)
    assert (repo / "dvc.lock").exists() and any(remote.rglob("*"))

    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    # the assets' stamp its own: the clone's scripts are newer than the stamp, so the `--touch` below touches
    # it (fetch_assets' code changed), which through a link to resources/demo made every other tree stale
    share_resources_into(clone)
    # git carries only DVC's .gitignore under results/; every artifact comes from the remote
    assert [p.name for p in (clone / "results").rglob("*")] == [".gitignore"]
    sh(DVC + ["pull", "-q"], clone)
    assert (clone / "results/summary/metrics.csv").read_bytes() == (repo / "results/summary/metrics.csv").read_bytes()
    # the co-author block of docs/reruns.md as it is written: dvc status clean, then the touch with --forceall
    assert "Data and pipelines are up to date" in sh(DVC + ["status"], clone)
    snakemake(clone, "--touch", "--forceall", "--cores", "1", "all", "--configfile", "config/ci.yaml")
    planned = snakemake(clone, "-n", "all", "--configfile", "config/ci.yaml")
    out = planned.stdout + planned.stderr
    assert "Nothing to be done" in out, out[-3000:]
    # every job's params and code recorded, as a run records them (plain --touch left five rules without: a
    # parameter changed later reran none of their jobs)
    assert "missing provenance/metadata" not in out, out[-3000:]
    # Every artifact came back, byte for byte: models, token statistics, scores, figures, the API ledger.
    pulled = sorted(p.relative_to(clone) for p in (clone / "results").rglob("*") if p.is_file())
    made = sorted(p.relative_to(repo) for p in (repo / "results").rglob("*") if p.is_file())
    assert pulled == made and len(made) > 20
    assert all((clone / p).read_bytes() == (repo / p).read_bytes() for p in made)
    # a book dropped into the user_books folder makes the stage stale for DVC too (dvc repro reruns Snakemake)
    assert "Data and pipelines are up to date" in sh(DVC + ["status"], repo)
    (repo / "resources" / "books" / "new.txt").write_text("CHAPTER I.\n\nA new book.\n", encoding="utf-8")
    status = sh(DVC + ["status"], repo)
    assert "changed deps" in status and "resources/books" in status, status


def test_dvc_stage_makes_every_input_of_an_audit_config_a_dependency_hashed_in_the_lock(tmp_path):
    """``memaudit dvc-stage``: a config's books folder, labels file and checkpoint, outside the repository,
    become the stage's dependencies (the file's comments and outputs kept); ``dvc commit`` hashes them
    into dvc.lock and ``dvc status`` then names the one that changed."""
    from memaudit.dvc_stage import CORE_DEPS

    data = tmp_path / "client"  # the auditor's files, outside the repository
    (data / "books").mkdir(parents=True)
    (data / "books" / "Emma.txt").write_text("CHAPTER I\n\nEmma Woodhouse, handsome, clever, and rich.\n")
    (data / "labels.csv").write_text("book,label\nEmma.txt,1\n")
    (data / "suspect").mkdir()
    (data / "suspect" / "config.json").write_text("{}\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(ROOT / "dvc.yaml", repo / "dvc.yaml")
    for dep in CORE_DEPS:  # stand-ins: DVC hashes whatever is there
        path = repo / dep
        path.parent.mkdir(parents=True, exist_ok=True)
        if "." in path.name or path.name == "Snakefile":
            path.write_text(f"{dep}\n")
        else:
            path.mkdir()
            (path / "README").write_text(f"{dep}\n")
    audit = {"benchmarks": {"mine": {"sources": ["user_books"], "labels": str(data / "labels.csv"),
                                     "source_options": {"user_books": {"directory": str(data / "books")}}}},
             "models": {"suspect": {"family": "theirs", "source": {"path": str(data / "suspect")}}},
             "probes": {"token_prob": {"models": ["suspect"], "reference_models": []}}}
    (repo / "audit.yaml").write_text(yaml.safe_dump(audit))
    out = sh([str(Path(sys.executable).with_name("memaudit")), "dvc-stage", "audit.yaml", "--cores", "2"], repo)
    assert "depends on 8 paths" in out

    stage_file = (repo / "dvc.yaml").read_text()
    assert stage_file.startswith("# One stage: Snakemake is the only DAG")  # the comments kept
    assert "# the user_books source's default folder" in stage_file
    stage = yaml.safe_load(stage_file)["stages"]["memaudit"]
    assert stage["cmd"] == "snakemake --cores 2 all --configfile audit.yaml"
    assert stage["deps"] == [*CORE_DEPS, "audit.yaml", str(data / "labels.csv"), str(data / "books"),
                             str(data / "suspect")]
    assert stage["outs"] == yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["memaudit"]["outs"]

    for out_dir in [next(iter(o)) for o in stage["outs"]]:
        (repo / out_dir).mkdir(parents=True, exist_ok=True)
        (repo / out_dir / "placeholder").write_text("x\n")
    sh(["git", "init", "-q"], repo)
    sh(DVC + ["init", "-q"], repo)
    sh(DVC + ["commit", "-f", "-q", "memaudit"], repo)  # the inputs' hashes into dvc.lock, nothing run
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]["memaudit"]
    assert {d["path"] for d in lock["deps"]} >= {str(data / "labels.csv"), str(data / "books"), str(data / "suspect")}
    assert "up to date" in sh(DVC + ["status"], repo)
    (data / "labels.csv").write_text("book,label\nEmma.txt,0\n")
    status = sh(DVC + ["status"], repo)
    assert "modified:" in status and str(data / "labels.csv") in status and str(data / "books") not in status


def test_dvc_stage_quotes_a_config_path_with_a_space(tmp_path):
    """The stage's command runs in a shell: `--configfile my audit/x.yaml` unquoted gave Snakemake the target
    `audit/x.yaml` and `dvc repro` failed."""
    import shlex

    from memaudit.dvc_stage import write_stage

    shutil.copy2(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    write_stage(tmp_path / "dvc.yaml", "my audit/x.yaml", {"benchmarks": {}, "models": {}}, cores=2)
    cmd = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]["memaudit"]["cmd"]
    assert cmd == "snakemake --cores 2 all --configfile 'my audit/x.yaml'"
    assert shlex.split(cmd)[-2:] == ["--configfile", "my audit/x.yaml"]
    write_stage(tmp_path / "dvc.yaml", "config/ci.yaml", {"benchmarks": {}, "models": {}}, cores=2)
    assert yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]["memaudit"]["cmd"] == (
        "snakemake --cores 2 all --configfile config/ci.yaml")


def test_dvc_stage_warns_of_a_cache_outside_the_stages_outputs(tmp_path, capsys):
    """An API cache (or the generation cache) moved out of results/ is not versioned: `dvc-stage` said nothing, and
    the paid answers were in no push. It warns, naming the key; caches under the outputs get no line."""
    from memaudit.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy2(ROOT / "dvc.yaml", repo / "dvc.yaml")
    config = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    config["api"] = {**config.get("api", {}), "cache": str(tmp_path / "api.sqlite")}
    config["generation_cache"] = "cache/generations.sqlite"
    (repo / "my.yaml").write_text(yaml.safe_dump(config))
    assert main(["dvc-stage", str(repo / "my.yaml"), "--dvc-file", str(repo / "dvc.yaml")]) == 0
    not_there = ("memaudit dvc-stage: warning: not there yet (DVC will report them missing): Snakefile, workflow, "
                 "src/memaudit, resources/books")  # a repository of the config and dvc.yaml only
    err = capsys.readouterr().err.splitlines()
    assert err[0] == not_there
    err = err[1:]
    assert [line.split(" is outside")[0] for line in err] == [
        f"memaudit dvc-stage: warning: api.cache {tmp_path / 'api.sqlite'}",
        "memaudit dvc-stage: warning: generation_cache cache/generations.sqlite"]
    assert err[0].endswith("DVC does not version it, and a clone's pull does not bring its answers; keep it under "
                           "results/")
    config["api"]["cache"], config["generation_cache"] = "results/api/mine.sqlite", "results/models/gen.sqlite"
    (repo / "my.yaml").write_text(yaml.safe_dump(config))
    assert main(["dvc-stage", str(repo / "my.yaml"), "--dvc-file", str(repo / "dvc.yaml")]) == 0
    assert capsys.readouterr().err == not_there + "\n"


def test_dvc_stage_writes_a_config_inside_the_repository_relative_to_it(tmp_path, capsys):
    """`memaudit dvc-stage $PWD/my.yaml` wrote the absolute path into the stage's command and deps: git carries
    dvc.yaml to a co-author's clone, whose `dvc repro` then ran Snakemake on the first clone's config (or on
    none). A config outside the repository keeps its absolute path (an external dependency)."""
    from memaudit.cli import main

    repo = tmp_path / "repo"
    (repo / "audit").mkdir(parents=True)
    shutil.copy2(ROOT / "dvc.yaml", repo / "dvc.yaml")
    shutil.copy2(ROOT / "config" / "ci.yaml", repo / "audit" / "my.yaml")
    shutil.copy2(ROOT / "config" / "ci.yaml", tmp_path / "outside.yaml")
    assert main(["dvc-stage", str(repo / "audit" / "my.yaml"), "--dvc-file", str(repo / "dvc.yaml"),
                 "--cores", "2"]) == 0
    stage = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["memaudit"]
    assert stage["cmd"] == "snakemake --cores 2 all --configfile audit/my.yaml"
    assert stage["deps"] == ["Snakefile", "workflow", "src/memaudit", "resources/books", "audit/my.yaml"]
    assert capsys.readouterr() == (f"{repo / 'dvc.yaml'}: stage 'memaudit' runs `snakemake --cores 2 all "
                                   "--configfile audit/my.yaml` and depends on 5 paths: Snakefile, workflow, "
                                   "src/memaudit, resources/books, audit/my.yaml\n",
                                   "memaudit dvc-stage: warning: not there yet (DVC will report them missing): "
                                   "Snakefile, workflow, src/memaudit, resources/books\n")
    assert main(["dvc-stage", str(tmp_path / "outside.yaml"), "--dvc-file", str(repo / "dvc.yaml"),
                 "--cores", "2"]) == 0
    stage = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["memaudit"]
    assert stage["cmd"] == f"snakemake --cores 2 all --configfile {tmp_path / 'outside.yaml'}"
    assert stage["deps"][-1] == str(tmp_path / "outside.yaml")


def test_dvc_stage_names_a_broken_dvc_yaml_and_never_leaves_it_half_written(tmp_path, monkeypatch, capsys):
    """A hand edit gone wrong was ruamel's traceback; a dump that failed half-way (or a kill) left dvc.yaml
    truncated, the stage lost: now one line with the line and column, and the file as it was."""
    from ruamel.yaml import YAML

    from memaudit.cli import main
    from memaudit.dvc_stage import write_stage

    broken = tmp_path / "broken.yaml"
    broken.write_text("stages:\n  memaudit:\n    cmd: [snakemake\n")
    assert main(["dvc-stage", str(ROOT / "config/ci.yaml"), "--dvc-file", str(broken)]) == 2
    assert capsys.readouterr().err == (f"memaudit dvc-stage: error: {broken}, line 4, column 1: not valid YAML "
                                       f"(expected ',' or ']', but got '<stream end>')\n")
    dvc_file = tmp_path / "dvc.yaml"
    shutil.copy2(ROOT / "dvc.yaml", dvc_file)
    before = dvc_file.read_bytes()

    def dump_half(self, data, stream):
        stream.write("stages:\n  memaudit:\n")
        raise OSError("killed mid-write")

    monkeypatch.setattr(YAML, "dump", dump_half)
    with pytest.raises(OSError, match="killed mid-write"):
        write_stage(dvc_file, "config/ci.yaml", {"benchmarks": {}, "models": {}}, cores=2)
    assert dvc_file.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["broken.yaml",
                                                                                             "dvc.yaml"]


@pytest.mark.parametrize("cores", ["0", "-2"])
def test_dvc_stage_refuses_fewer_than_one_core_and_writes_nothing(tmp_path, capsys, cores):
    """`--cores 0` was written into the stage as `snakemake --cores 0 all ...`, which `dvc repro` then ran:
    one line naming the option, and dvc.yaml as it was."""
    from memaudit.cli import main

    dvc_file = tmp_path / "dvc.yaml"
    shutil.copy2(ROOT / "dvc.yaml", dvc_file)
    before = dvc_file.read_bytes()
    assert main(["dvc-stage", str(ROOT / "config/ci.yaml"), "--dvc-file", str(dvc_file), "--cores", cores]) == 2
    assert capsys.readouterr() == ("", f"memaudit dvc-stage: error: --cores: must be at least 1, not {cores}\n")
    assert dvc_file.read_bytes() == before


def test_python_bytecode_caches_are_no_change_of_the_stages_code_dependency(tmp_path):
    """`src/memaudit` is a dependency of the stage, and importing the package writes `__pycache__/*.pyc` into it
    (per Python version, stamped with the sources' mtimes): `dvc.lock` hashed them, and a co-author's fresh
    clone (no .pyc), another Python, or a checkout that touched the sources made `dvc status` report the code
    changed and `dvc repro` rerun the stage. The project's .dvcignore leaves them out."""
    repo = tmp_path / "repo"
    (repo / "src" / "memaudit").mkdir(parents=True)
    (repo / "src" / "memaudit" / "cli.py").write_text("x = 1\n")
    (repo / "dvc.yaml").write_text('stages:\n  memaudit:\n    cmd: "true"\n    deps:\n      - src/memaudit\n')
    shutil.copy2(ROOT / ".dvcignore", repo / ".dvcignore")
    sh(["git", "init", "-q"], repo)
    sh(DVC + ["init", "-q"], repo)
    sh(DVC + ["repro", "-q"], repo)
    cache = repo / "src" / "memaudit" / "__pycache__"
    cache.mkdir()
    (cache / "cli.cpython-311.pyc").write_bytes(b"\xa7\r\r\n bytecode")
    assert sh(DVC + ["status"], repo).strip() == "Data and pipelines are up to date."
    (repo / "src" / "memaudit" / "cli.py").write_text("x = 2\n")  # a change of the code still is one
    assert "modified:           src/memaudit" in sh(DVC + ["status"], repo)
