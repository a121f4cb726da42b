"""Probe families' code versions: a change to a family's code cannot go unnoticed.

The rerun half (a bumped version reruns exactly that family's jobs) is in test_incremental.
"""

from __future__ import annotations

import ast

import pytest

from memaudit.probes import registry
from memaudit.probes.registry import FAMILIES, code_fingerprint, family_modules


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_familys_recorded_fingerprint_matches_its_code(family):
    current = code_fingerprint(family)
    assert FAMILIES[family].fingerprint == current, (
        f"the code of probe family {family!r} changed (fingerprint {FAMILIES[family].fingerprint} -> {current}): "
        f"if its numbers change, bump its version in memaudit/probes/registry.py; then run "
        f"`memaudit code-versions --record`")


STAGES = sorted((fam.name, stage) for fam in FAMILIES.values() for stage in fam.stages)


@pytest.mark.parametrize("family, stage", STAGES)
def test_each_stages_recorded_fingerprint_matches_its_code(family, stage):
    current = code_fingerprint(family, stage)
    recorded = FAMILIES[family].stages[stage]
    assert recorded.fingerprint == current, (
        f"the code of stage {stage!r} of probe family {family!r} changed ({recorded.fingerprint} -> {current}): "
        f"if what it builds changes, bump the stage's version in memaudit/probes/registry.py; then run "
        f"`memaudit code-versions --record`")


def test_the_stages_that_build_items_once_per_benchmark_are_declared():
    assert STAGES == [("cloze", "items"), ("cloze", "summary"), ("copybench", "items"), ("copybench", "summary"),
                      ("decop", "items"), ("ktd", "pool"), ("ktd", "summary")]
    assert registry.family_version("decop", "items") == FAMILIES["decop"].stages["items"].version
    assert registry.family_version("decop") == FAMILIES["decop"].version
    with pytest.raises(KeyError, match="probe family 'prefix' declares no stage 'items'"):
        registry.family_version("prefix", "items")


def test_a_stages_modules_are_what_builds_it_not_the_probe_code():
    items = set(registry.stage_modules("decop", "items"))
    assert {"memaudit.probes.decop.items", "memaudit.probes.decop.paraphrase",
            "memaudit.probes.decop.construct"} <= items
    # how models are probed and scored is not the items' code
    assert not items & {"memaudit.probes.decop.runner", "memaudit.probes.decop.scoring",
                        "memaudit.probes.decop.analysis"}
    assert items < set(family_modules("decop"))  # the family's fingerprint covers its stages' code too
    # KTD's top-up is made by DE-COP's paraphraser: that code is the pool's
    assert {"memaudit.probes.ktd.pool", "memaudit.probes.decop.paraphrase"} <= set(registry.stage_modules("ktd", "pool"))
    assert "memaudit.probes.ktd.statistics" not in registry.stage_modules("ktd", "pool")


def test_a_familys_modules_are_its_package_and_what_it_imports():
    modules = family_modules("decop")
    assert {"memaudit.probes.decop.scoring", "memaudit.probes.decop.analysis", "memaudit.probes.decop.runner"} <= set(modules)
    # reached only through imports: the backend's forward passes and the published-file loader
    assert {"memaudit.models.forward", "memaudit.backends.hf", "memaudit.datasets.published"} <= set(modules)
    assert "memaudit.probes.registry" not in modules and "memaudit.backends.retry" not in modules
    assert not any(m.startswith("memaudit.probes.token_prob.runner") for m in modules)


def _fingerprint_of(tmp_path, monkeypatch, source: str) -> str:
    pkg = tmp_path / "memaudit_fake_family"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    fam = registry.ProbeFamily("fake", reads="x.jsonl", modes={"": frozenset()}, runner="x:y", version=1,
                               fingerprint="")
    monkeypatch.setitem(FAMILIES, "fake", fam)
    monkeypatch.setattr(registry.ProbeFamily, "package", property(lambda self: "memaudit_fake_family"))
    import importlib

    importlib.invalidate_caches()
    return code_fingerprint("fake")


def test_comments_and_docstrings_leave_the_fingerprint_alone_code_does_not(tmp_path, monkeypatch):
    base = '"""Doc."""\n\ndef score(x):\n    """Higher = member."""\n    return -x  # negated loss\n'
    same = '"""Other words."""\n\n\ndef score(x):\n    # a comment\n    return -x\n'
    changed = '"""Doc."""\n\ndef score(x):\n    return -2 * x\n'
    first = _fingerprint_of(tmp_path, monkeypatch, base)
    assert len(first) == 16 and int(first, 16) >= 0
    assert _fingerprint_of(tmp_path, monkeypatch, same) == first
    assert _fingerprint_of(tmp_path, monkeypatch, changed) != first


def test_record_writes_only_stale_fingerprints_and_keeps_versions(tmp_path, monkeypatch):
    copy = tmp_path / "registry.py"
    source = registry.__file__
    text = open(source, encoding="utf-8").read()
    stale = text.replace(f'fingerprint="{FAMILIES["prefix"].fingerprint}"', 'fingerprint="0000000000000000"')
    copy.write_text(stale)
    monkeypatch.setitem(FAMILIES, "prefix", registry.ProbeFamily(
        **{**FAMILIES["prefix"].__dict__, "fingerprint": "0000000000000000"}))
    assert registry.record_fingerprints(copy) == {"prefix": code_fingerprint("prefix")}
    assert copy.read_text() == text
    tree = ast.parse(copy.read_text())  # still Python
    assert tree.body


def test_record_writes_a_stale_stages_fingerprint_into_its_own_entry(tmp_path, monkeypatch):
    copy = tmp_path / "registry.py"
    text = open(registry.__file__, encoding="utf-8").read()
    recorded = FAMILIES["decop"].stages["items"].fingerprint
    assert text.count(f'fingerprint="{recorded}"') == 1
    copy.write_text(text.replace(f'fingerprint="{recorded}"', 'fingerprint="0000000000000000"'))
    stale = registry.Stage(**{**FAMILIES["decop"].stages["items"].__dict__, "fingerprint": "0000000000000000"})
    monkeypatch.setitem(FAMILIES, "decop", registry.ProbeFamily(
        **{**FAMILIES["decop"].__dict__, "stages": {"items": stale}}))
    assert registry.record_fingerprints(copy) == {"decop.items": recorded}
    assert copy.read_text() == text  # the family's own fingerprint, before it, is left as it was


def test_the_cli_reports_a_stale_family_and_exits_1(monkeypatch, capsys):
    monkeypatch.setitem(FAMILIES, "prefix", registry.ProbeFamily(
        **{**FAMILIES["prefix"].__dict__, "fingerprint": "0000000000000000"}))
    assert registry.code_versions_main([]) == 1
    out = capsys.readouterr().out
    assert f"{'prefix':18s} version {FAMILIES['prefix'].version}  fingerprint 0000000000000000  changed" in out
    assert f"{'token_prob':18s} version 1" in out and "ok" in out
    assert f"{'copybench.summary':18s} version {FAMILIES['copybench'].stages['summary'].version}  fingerprint" in out
