"""Snakemake's command line without paying its imports each time: a fork server for the tests.

A ``snakemake`` process spends about 2.5 of a dry run's 4.5 CPU-seconds importing Snakemake and
what its plugin registries import (every installed executor plugin; the SLURM plugin's efficiency
report imports pandas). The suite starts a few hundred, most of them dry runs, so that was about an
eighth of its work. Here one server process per test worker imports Snakemake's command line once;
each call forks it and the child runs ``snakemake.cli.main()`` with the call's arguments, working
directory and environment, its standard output and error in files, exactly as ``python -m
snakemake`` would run it (the same code from ``main()`` on, in a process of its own: a job it runs is
a process of its own too). ``memaudit`` itself is not imported before the fork, so a child reads the
source as it is at the call. A call whose ``PYTHON*`` variables differ from the server's (``PYTHONPATH``
to a changed copy of the package, say) runs as a plain subprocess: the interpreter reads those when it
starts, before any fork.

Only for calls that end by themselves (:func:`run`): a test that signals or kills a run needs the
real process (``subprocess.Popen`` of ``workflow_helpers.SNAKEMAKE``). ``MEMAUDIT_TEST_NO_FORKSERVER=1``
runs every call as a plain subprocess instead (to rule the server out when a test fails).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The server: reads one JSON request a line from stdin ({id, argv, cwd, env, out, err}), forks, and
# answers {"id": ..., "rc": N} when the child has exited. Single-threaded BLAS, so that no worker thread of
# numpy's (imported through pandas) is running when it forks.
_SERVER = r"""
import json, os, sys, traceback
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
import snakemake.cli
requests, replies = sys.stdin, sys.stdout
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(null, 0), os.dup2(out, 1), os.dup2(err, 2)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            sys.argv = ["snakemake", *req["argv"]]
            try:
                snakemake.cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if not isinstance(exc.code, (int, type(None))):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
        finally:
            try:
                sys.stdout.flush(), sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"id": req["id"], "rc": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""

_lock = threading.Lock()
_server: subprocess.Popen | None = None
_server_python_env: dict[str, str] = {}
_ids = itertools.count()


def _python_env(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _disabled() -> bool:
    return os.environ.get("MEMAUDIT_TEST_NO_FORKSERVER", "") not in ("", "0")


def _started() -> subprocess.Popen:
    global _server, _server_python_env
    if _server is None or _server.poll() is not None:
        _server_python_env = _python_env(os.environ)
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, bufsize=1)
    return _server


@atexit.register
def _stop() -> None:
    """End the server with the worker (its input closed, it exits) and reap it: its CPU time then counts in
    the worker's children's, as a subprocess's would."""
    if _server is not None and _server.poll() is None:
        _server.stdin.close()
        try:
            _server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _server.kill()


# The test running now (set by conftest's pytest_runtest_protocol), or None outside a test.
current_test = None
MARKERS = ("workflow", "slow")  # the tests make test-quick leaves out: `-m "not slow and not workflow"`


def check_marked() -> None:
    """A test that runs Snakemake (a dry run too) is marked ``workflow`` or ``slow``: make test-quick, "unit
    tests only", leaves those out. Unmarked, one ran Snakemake in every quick run (pyproject's markers)."""
    item = current_test
    if item is not None and not any(item.get_closest_marker(m) for m in MARKERS):
        raise AssertionError(f"{item.nodeid} runs Snakemake: mark it @pytest.mark.workflow (make test-quick, unit "
                             "tests only, leaves such tests out)")


def run(args: list[str], *, cwd: Path | str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m snakemake ARGS`` in ``cwd`` with ``env`` (None: this process's), its output captured as
    text: what ``subprocess.run(..., capture_output=True, text=True)`` returns."""
    check_marked()
    argv = [sys.executable, "-m", "snakemake", *args]
    environment = dict(os.environ if env is None else env)
    if _disabled() or (_server is not None and _python_env(environment) != _server_python_env) or (
            _server is None and _python_env(environment) != _python_env(os.environ)):
        return subprocess.run(argv, cwd=cwd, env=environment, capture_output=True, text=True)
    with _lock, tempfile.TemporaryDirectory(prefix="snakemake-call-") as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        request = {"id": next(_ids), "argv": [str(a) for a in args], "cwd": str(Path(cwd).resolve()), "env": environment,
                   "out": str(out), "err": str(err)}
        server = _started()
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        while True:  # a reply to an earlier call that was interrupted (a test's timeout) is not this call's
            reply = server.stdout.readline()
            if not reply:
                raise RuntimeError(f"the Snakemake fork server (pid {server.pid}) ended: rerun with "
                                   "MEMAUDIT_TEST_NO_FORKSERVER=1 to run Snakemake as a plain subprocess")
            answer = json.loads(reply)
            if answer["id"] == request["id"]:
                break
        rc = answer["rc"]
        return subprocess.CompletedProcess(argv, rc, out.read_text(errors="replace"), err.read_text(errors="replace"))
