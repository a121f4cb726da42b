"""``benchmarks/suite_cpu.py``: the suite's CPU per test file, read as the whole machine's busy time."""

from __future__ import annotations

import json
import os

import pytest
from bench_helpers import load_benchmark

TICK = 1 / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def suite_cpu():
    return load_benchmark("suite_cpu")


@pytest.fixture(scope="module")
def plugin():
    return load_benchmark("suite_cpu_plugin")


def test_busy_time_is_user_nice_system_irq_and_softirq_not_idle_iowait_or_steal(plugin):
    #                 user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu  1000 20 300 9000 400 5 7 600 50 0"
    assert plugin.busy_cpu_seconds(line) == pytest.approx((1000 + 20 + 300 + 5 + 7) * TICK)


def test_the_summary_sums_each_file_and_ranks_files_and_tests_by_cpu(suite_cpu):
    rows = [{"test": "tests/test_a.py::test_one", "wall_seconds": 10.0, "cpu_seconds": 4.0},
            {"test": "tests/test_a.py::test_two[x]", "wall_seconds": 2.0, "cpu_seconds": 3.0},
            {"test": "tests/test_b.py::test_big", "wall_seconds": 30.0, "cpu_seconds": 50.0},
            {"test": "tests/test_c.py::test_c", "wall_seconds": 1.0, "cpu_seconds": 3.0}]
    got = suite_cpu.summarize(rows, cpu_seconds=80.0, wall_seconds=45.0, cpu_count=2, top=3)
    assert (got["n_items"], got["cpu_seconds"], got["floor_seconds"], got["unattributed_cpu_seconds"]) == (4, 80.0, 40.0, 20.0)
    assert got["files"] == [
        {"file": "tests/test_b.py", "tests": 1, "wall_seconds": 30.0, "cpu_seconds": 50.0, "cpu_share": 0.625},
        {"file": "tests/test_a.py", "tests": 2, "wall_seconds": 12.0, "cpu_seconds": 7.0, "cpu_share": 0.0875},
        {"file": "tests/test_c.py", "tests": 1, "wall_seconds": 1.0, "cpu_seconds": 3.0, "cpu_share": 0.0375}]
    # the top 3, a tie (3.0 CPU-s) broken by name: test_a's test_two in, test_c's out
    assert [t["test"] for t in got["tests"]] == ["tests/test_b.py::test_big", "tests/test_a.py::test_one",
                                                 "tests/test_a.py::test_two[x]"]
    assert "tests/test_b.py" in suite_cpu.table(got).splitlines()[2]


BURN = """
import json, os, time

import pytest

def burn(seconds, record):
    # spend CPU-seconds of this process, and write how many to the file the variable ``record`` names
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    with open(os.environ[record], "w") as f:
        json.dump(time.process_time() - start, f)

def test_burns():
    burn(0.3, "OWN_CPU")

def test_sleeps():
    time.sleep(0.3)

@pytest.fixture(scope="module")
def burnt():
    burn(0.3, "FIXTURE_CPU")

def test_uses_a_fixture(burnt):
    pass

def test_spawns():
    # a process the test does not wait for, as a workflow's job under SLURM: its CPU is not the test's rusage
    import subprocess, sys
    code = ("import json, sys, time\\nstart = time.process_time()\\nwhile time.process_time() - start < 0.3: pass\\n"
            "json.dump(time.process_time(), open(sys.argv[1] + '.part', 'w'))\\nimport os; os.rename(sys.argv[1] + '.part', sys.argv[1])")
    subprocess.Popen([sys.executable, "-c", code, os.environ["SPAWNED_CPU"]], start_new_session=True)
    while not os.path.exists(os.environ["SPAWNED_CPU"]):
        time.sleep(0.01)
"""


def test_a_run_attributes_at_least_each_tests_own_cpu_and_its_wall_time(suite_cpu, tmp_path, monkeypatch):
    """Through pytest itself: the plugin's row of a test is at least what the test's own process spent, and
    what a process it started and never waited for spent, and what its fixture spent (the machine's busy time
    holds them, whatever else runs beside), and a sleeping test's wall time is its sleep."""
    (tmp_path / "test_tiny.py").write_text(BURN)
    # the tests of the tiny file write the CPU-seconds they spent to these files
    records = {"test_burns": "OWN_CPU", "test_spawns": "SPAWNED_CPU", "test_uses_a_fixture": "FIXTURE_CPU"}
    for variable in records.values():
        monkeypatch.setenv(variable, str(tmp_path / f"{variable}.json"))
    out = tmp_path / "suite_cpu.json"
    assert suite_cpu.main(["--out", str(out), "--", str(tmp_path / "test_tiny.py"), "-p", "no:cacheprovider"]) == 0
    got = json.loads(out.read_text())
    assert got["pytest_exit"] == 0 and got["n_items"] == 4 and got["cpu_count"] == os.cpu_count()
    (entry,) = got["files"]
    assert entry["file"].endswith("test_tiny.py") and entry["tests"] == 4
    rows = {t["test"].rsplit("::", 1)[1]: t for t in got["tests"]}
    # each at least what it (its own process, a process it never waited for, its fixture) spent: the plugin
    # reads the machine's busy time, and before pytest sets a test's fixtures up
    for test, variable in records.items():
        spent = json.loads((tmp_path / f"{variable}.json").read_text())
        assert rows[test]["cpu_seconds"] >= round(spent, 1) - 0.1 - 2 * TICK, test  # the JSON rounds to 0.1
    assert rows["test_sleeps"]["wall_seconds"] >= 0.3 - 0.05
    assert got["cpu_seconds"] >= rows["test_burns"]["cpu_seconds"] and got["wall_seconds"] >= 0.9
    assert {"cpu_model", "cpu_flags", "cpu_count"} <= set(got["machine"])
