"""The test cluster's harness (tests/slurm_cluster.py) leaves the machine's slurm.conf as it found it."""

from __future__ import annotations

from pathlib import Path

from slurm_cluster import conf_to_restore, slurm_conf


def test_a_conf_left_by_a_killed_test_run_is_not_restored_but_the_machines_own_is():
    ours = slurm_conf(Path("/tmp/x"), host="node1", cpus=2, memory_mb=1000)
    # a test run killed before stop() leaves this file behind; the next run must not put it back
    assert conf_to_restore(ours) is None
    assert conf_to_restore(None) is None
    theirs = "ClusterName=site\nSlurmctldHost=head01\n"
    assert conf_to_restore(theirs) == theirs
    # only the marker's exact first line makes a file ours
    assert conf_to_restore("# a comment\n" + ours) == "# a comment\n" + ours
