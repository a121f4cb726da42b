"""usage: memaudit COMMAND [ARGS]   (memaudit COMMAND --help for each; memaudit --version)

    memaudit fetch-assets [--dest resources/demo]       fetch the Debian demo packages
    memaudit stats --input scores.csv --score-col score --label-col label
                                                        membership statistics for any scores
    memaudit headline [--summary results/summary/metrics.csv] [--config CONFIG]
                                                        a run's headline numbers and ground-truth checks
    memaudit serve (--path DIR | --builtin NAME | --hub-id ID --revision REV | --scripted FILE) [--port 8000]
                                                        a local model behind the OpenAI API
    memaudit estimate-cost [--config config/config.yaml] --plan PLAN.jsonl
                                                        what planned API requests will cost
    memaudit api-ledger [--cache results/api/cache.sqlite] [--out ledger.csv]
                                                        tokens and dollars spent, per model and rule
    memaudit api-cache-merge OTHER [--into results/api/cache.sqlite]
                                                        another clone's paid API answers copied into this cache
    memaudit code-versions [--record]                   each probe family's, stage's and step's code version
                                                        and whether its code changed since it was recorded
    memaudit check-config CONFIG                        every problem of a config file, one line each
                                                        (a YAML error with its line and column)
    memaudit dvc-stage CONFIG [--cores 8]               point dvc.yaml's stage at a config, every local
                                                        input it reads (books, labels, checkpoints) a dependency
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memaudit.errors import MemauditError


def _fetch_assets(argv: list[str]) -> int:
    from memaudit.assets import fetch_demo_assets

    p = argparse.ArgumentParser(prog="memaudit fetch-assets", description="Fetch the demo text packages.")
    p.add_argument("--dest", default="resources/demo", type=Path,
                   help="where the packages are fetched and unpacked (default: resources/demo)")
    args = p.parse_args(argv)
    fetch_demo_assets(args.dest, require_tools=True)  # asked for by name: no apt-get is an error here
    return 0


def _headline(argv: list[str]) -> int:
    from memaudit.jobs import load_config, method_list_default
    from memaudit.stats.headline import print_headline

    # one list for the figures and the headline table: the schema's default of figures.headline_methods
    methods = method_list_default("figures.headline_methods")

    p = argparse.ArgumentParser(prog="memaudit headline", description="Print the headline numbers of a run.")
    p.add_argument("--summary", default="results/summary/metrics.csv", type=Path,
                   help="the run's metrics table; the other summary tables are read beside it "
                        "(default: results/summary/metrics.csv)")
    p.add_argument("--methods", nargs="*",
                   help=f"methods of the AUC table, each a method of the run's metrics table (default: "
                        f"{' '.join(methods)}, as far as the run has them: the schema's default of "
                        f"figures.headline_methods, what the ROC and distribution figures draw; with --config, that "
                        f"config's figures.headline_methods)")
    p.add_argument("--config", type=Path,
                   help="the run's config file, whose figures.headline_methods the table shows, as its figures do "
                        "(make run passes it)")
    args = p.parse_args(argv)
    named = args.methods is not None  # named here, each must be a method of the run; a default, as far as it has
    if not named:
        args.methods = load_config(args.config)["figures"]["headline_methods"] if args.config else methods
    print_headline(args.summary, args.methods, methods_named=named)
    return 0


def _stats(argv: list[str]) -> int:
    from memaudit.stats.cli import stats_main

    return stats_main(argv)


def _serve(argv: list[str]) -> int:
    from memaudit.backends.serve import serve_main

    return serve_main(argv)


def _estimate_cost(argv: list[str]) -> int:
    from memaudit.backends.ledger import estimate_main

    return estimate_main(argv)


def _api_ledger(argv: list[str]) -> int:
    from memaudit.backends.ledger import ledger_main

    return ledger_main(argv)


def _api_cache_merge(argv: list[str]) -> int:
    from memaudit.backends.cache import merge_main

    return merge_main(argv)


def _code_versions(argv: list[str]) -> int:
    from memaudit.probes.registry import code_versions_main

    return code_versions_main(argv)


def _check_config(argv: list[str]) -> int:
    from memaudit.config import check_local_inputs
    from memaudit.errors import ConfigError
    from memaudit.jobs import load_config
    from memaudit.workflow_support import config_warnings

    p = argparse.ArgumentParser(prog="memaudit check-config",
                                description="Validate a config file as the workflow does, without running it "
                                            "(the files and folders it names are looked for from the current "
                                            "directory, as the workflow run there reads them).")
    p.add_argument("config", type=Path, help="the config file (YAML)")
    args = p.parse_args(argv)
    config = load_config(args.config)
    missing = check_local_inputs(config)
    if missing:
        raise ConfigError("\n".join(f"{args.config}: {line}" for line in missing))
    for line in config_warnings(config):  # the lines a run of the workflow prints once, with the file as errors have
        print(f"memaudit check-config: warning: {args.config}: {line.removeprefix('warning: ')}", file=sys.stderr)
    print(f"{args.config}: valid")
    return 0


def _dvc_stage(argv: list[str]) -> int:
    from memaudit.dvc_stage import dvc_stage_main

    return dvc_stage_main(argv)


COMMANDS = {"check-config": _check_config, "dvc-stage": _dvc_stage, "fetch-assets": _fetch_assets, "stats": _stats, "headline": _headline, "serve": _serve,
            "estimate-cost": _estimate_cost, "api-ledger": _api_ledger, "api-cache-merge": _api_cache_merge,
            "code-versions": _code_versions}


def main(argv: list[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe is caught below, not a traceback at shutdown
        return status
    except BrokenPipeError:
        # the reader has gone (`memaudit -h | head -3`): stop quietly with the status SIGPIPE gives (128 + 13);
        # not SIGPIPE's default action itself, which would also end `memaudit serve` when a client hangs up
        import os

        try:  # the interpreter's last flush of stdout would raise again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout with no file behind it (captured)
            pass
        return 141


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        import difflib

        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        print(f"memaudit: error: unknown command {argv[0]!r}{hint} (commands: {', '.join(sorted(COMMANDS))}; "
              f"memaudit --help)", file=sys.stderr)
        return 2
    if argv and argv[0] == "--version":
        from memaudit import __version__

        print(f"memaudit {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        # asked for: stdout, status 0; no command at all is an error: its usage goes where errors go
        print(__doc__.strip(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except MemauditError as exc:
        for line in str(exc).splitlines() or [""]:  # one problem a line, each naming the command
            print(f"memaudit {argv[0]}: error: {line}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:  # not a file's (a closed pipe): the caller's to handle, or a bug to show
            raise
        # a file the command names that cannot be opened, read or written, not a traceback
        print(f"memaudit {argv[0]}: error: {exc.filename}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
