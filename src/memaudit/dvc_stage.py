"""The DVC stage of a run on a config of your own: every local input it reads, hashed in ``dvc.lock``.

``dvc.yaml`` ships one stage, ``memaudit``, that runs the workflow on the demo config and depends on
the code, ``resources/books`` and the demo config. An audit reads more: its own config file, a books
folder elsewhere, a labels file, a published set, the checkpoints under test, CopyBench's summaries
(every input ``check-config`` checks: :func:`memaudit.config.local_inputs`). DVC hashes what a
stage lists (an absolute path outside the repository too: an external dependency), so listing them
puts into ``dvc.lock`` the exact books, labels and weights a result came from, and makes
``dvc status`` report the stage changed when any of them does.

:func:`config_inputs` reads those paths from a validated config; :func:`write_stage` rewrites the
stage's ``cmd`` and ``deps`` in place (comments and the outputs kept: ``ruamel.yaml``, which DVC
itself uses, round-trips the file). Two stages may not share outputs, so the one stage is retargeted
rather than a second one added. ``memaudit dvc-stage CONFIG`` does both.
"""

from __future__ import annotations

import sys
from pathlib import Path

from memaudit.errors import InputError

# What the stage always depends on (dvc.yaml's list, before the config it runs on): the workflow, the
# package and the user_books source's default folder. Not the demo config: a --configfile replaces it
# (Snakefile), so an audit's stage that listed it changed whenever the demo config did.
CORE_DEPS = ("Snakefile", "workflow", "src/memaudit", "resources/books")
STAGE = "memaudit"


def config_inputs(config: dict) -> list[str]:
    """Every local file or folder a validated config names as an input, each once: those
    :func:`memaudit.config.local_inputs` lists (and ``check-config`` checks): books folders, labels files,
    published sets and their labels, local checkpoints (``source.path``), the probes' prompt folders and
    MemFree rejection files, CopyBench's extractor summaries; then the ``user_books`` source's default
    folder where a benchmark or the pretraining pool reads it without naming one. Hub ids, API models,
    the demo's assets and caches are not inputs here.

    One list for both: kept apart, this one missed ``probes.copybench.extractor.summaries`` when the
    extractor learnt to read summaries, and a stage's ``dvc.lock`` did not hash the summaries its events
    came from."""
    from memaudit.config import local_inputs
    from memaudit.datasets.sources import USER_BOOKS_DIRECTORY

    paths = [path for _, path in local_inputs(config)]
    blocks = [*config.get("benchmarks", {}).values(), config.get("pretrain") or {}]
    if any("user_books" in (block.get("sources") or [])
           and not ((block.get("source_options") or {}).get("user_books") or {}).get("directory") for block in blocks):
        paths.append(str(USER_BOOKS_DIRECTORY))
    return list(dict.fromkeys(paths))


def stage_deps(config: dict, configfile: str) -> list[str]:
    """:data:`CORE_DEPS`, the config file (the only one Snakemake reads), then :func:`config_inputs` not already
    inside a listed one."""
    deps = [*CORE_DEPS, configfile]
    for path in config_inputs(config):
        if not any(_inside(path, d) for d in deps):
            deps.append(path)
    return list(dict.fromkeys(deps))


def _inside(path: str, folder: str) -> bool:
    p, f = Path(path), Path(folder)
    return p == f or (not p.is_absolute() and not f.is_absolute() and f in p.parents)


def repository_path(path: str | Path, root: str | Path) -> str:
    """``path`` relative to the repository ``root`` where it is an absolute path inside it, else as given: git
    carries dvc.yaml to other clones, where the first clone's absolute path is another clone's file, or none."""
    p = Path(path)
    if p.is_absolute():
        try:
            return p.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:  # outside the repository: an external dependency, by its absolute path
            pass
    return str(path)


def stage_command(configfile: str, cores: int = 8) -> str:
    """The stage's ``cmd``: the workflow on ``configfile``, quoted for the shell DVC runs it in (a path with a
    space was split into two arguments, and ``dvc repro`` failed)."""
    import shlex

    return f"snakemake --cores {int(cores)} all --configfile {shlex.quote(str(configfile))}"


def write_stage(dvc_file: str | Path, configfile: str, config: dict, *, cores: int = 8,
                stage: str = STAGE) -> list[str]:
    """Point ``stage`` of ``dvc_file`` at ``configfile``: its ``cmd`` runs the workflow on it, its ``deps``
    are :func:`stage_deps`. Everything else in the file is kept. Returns the deps written."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from memaudit.io import atomic_path

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)  # dvc.yaml's own layout: "- item" two spaces in
    dvc_file = Path(dvc_file)
    configfile = repository_path(configfile, dvc_file.parent)
    if not dvc_file.is_file():
        raise InputError(f"{dvc_file}: no such file (run from the repository root, where dvc.yaml is)")
    try:
        data = yaml.load(dvc_file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{dvc_file}: not UTF-8 text (byte {exc.start})") from None
    except YAMLError as exc:  # a hand edit gone wrong: one line with the place, not ruamel's traceback
        mark = getattr(exc, "problem_mark", None)
        where = f"{dvc_file}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(dvc_file)
        what = " ".join(str(getattr(exc, "problem", None) or "cannot be parsed").split())
        raise InputError(f"{where}: not valid YAML ({what})") from None
    stages = data.get("stages") if isinstance(data, dict) else None
    stages = stages if isinstance(stages, dict) else {}
    if stage not in stages or not isinstance(stages[stage], dict):
        raise InputError(f"{dvc_file}: no stage {stage!r} (stages: {', '.join(stages) or 'none'})")
    deps = stage_deps(config, configfile)
    stages[stage]["cmd"] = stage_command(configfile, cores)
    listed = stages[stage].get("deps")
    n = len(CORE_DEPS)
    if isinstance(listed, list) and list(listed[:n]) == list(CORE_DEPS):
        del listed[n:]  # the core entries stay where they are, with their comments
        listed.extend(deps[n:])
    else:
        stages[stage]["deps"] = deps
    # through a temporary file: a dump that fails half-way (or a killed process) leaves dvc.yaml as it was,
    # not truncated
    with atomic_path(dvc_file) as tmp, tmp.open("w", encoding="utf-8") as out:
        yaml.dump(data, out)
    return deps


def unversioned_caches(config: dict, dvc_file: Path) -> list[str]:
    """One warning line per cache of ``config`` (the API response cache, ``api.cache``; local models' greedy
    generations, ``generation_cache``) that lies outside every output of ``dvc_file``'s stage: the paid answers
    of a cache moved out of ``results/`` were no longer versioned, and ``dvc-stage`` said nothing."""
    import os

    import yaml

    from memaudit.backends.settings import api_settings

    outs = []
    for out in ((yaml.safe_load(dvc_file.read_text(encoding="utf-8")) or {}).get("stages", {}).get(STAGE, {})
                .get("outs") or []):
        outs += list(out) if isinstance(out, dict) else [out]
    root = dvc_file.parent.resolve()
    versioned = [Path(os.path.normpath(root / o)) for o in outs]
    caches = [("api.cache", api_settings(config).get("cache")), ("generation_cache", config.get("generation_cache"))]
    lines = []
    for key, path in caches:
        if not path:
            continue
        where = Path(os.path.normpath(root / path))
        if not any(where == o or o in where.parents for o in versioned):
            lines.append(f"warning: {key} {path} is outside the stage's outputs ({', '.join(map(str, outs))}): "
                         f"DVC does not version it, and a clone's pull does not bring its answers; keep it under "
                         f"results/")
    return lines


def dvc_stage_main(argv: list[str]) -> int:
    import argparse

    from memaudit.jobs import load_config

    p = argparse.ArgumentParser(prog="memaudit dvc-stage",
                                description="Point dvc.yaml's stage at a config: its command runs the workflow on it, "
                                            "and every local input the config reads (books, labels, published sets, "
                                            "checkpoints) becomes a dependency DVC hashes into dvc.lock.")
    p.add_argument("config", help="the config file (a path relative to the repository root, as Snakemake takes it)")
    p.add_argument("--dvc-file", default="dvc.yaml", type=Path, help="the DVC file to write (default: dvc.yaml)")
    p.add_argument("--cores", type=int, default=8, help="the stage command's snakemake --cores (default: 8)")
    args = p.parse_args(argv)
    if args.cores < 1:  # written into the stage, it failed only later, when `dvc repro` ran it
        raise InputError(f"--cores: must be at least 1, not {args.cores}")
    config = load_config(args.config)
    deps = write_stage(args.dvc_file, args.config, config, cores=args.cores)
    missing = [d for d in deps if not (args.dvc_file.parent / d).exists()]  # relative ones from the repository root
    configfile = repository_path(args.config, args.dvc_file.parent)
    print(f"{args.dvc_file}: stage {STAGE!r} runs `{stage_command(configfile, args.cores)}` "
          f"and depends on {len(deps)} paths: {', '.join(deps)}")
    if missing:
        print(f"memaudit dvc-stage: warning: not there yet (DVC will report them missing): {', '.join(missing)}",
              file=sys.stderr)  # a warning, where the others go: stdout says what was written
    for line in unversioned_caches(config, args.dvc_file):
        print(f"memaudit dvc-stage: {line}", file=sys.stderr)
    return 0
