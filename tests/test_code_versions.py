"""Probe families' code versions: a change to a family's code cannot go unnoticed.

The rerun half (a bumped version reruns exactly that family's jobs) is in test_incremental.
"""

from __future__ import annotations

import ast

import pytest

from memaudit.probes import registry
from memaudit.probes.registry import FAMILIES, code_fingerprint, family_modules, step_fingerprint
from memaudit.versions import STEPS
from workflow_helpers import ROOT, rule_directives


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
                      ("decop", "items"), ("decop", "summary"), ("ktd", "pool"), ("ktd", "summary"),
                      ("token_prob", "stats")]
    assert registry.family_version("decop", "items") == FAMILIES["decop"].stages["items"].version
    assert registry.family_version("decop") == FAMILIES["decop"].version
    with pytest.raises(KeyError, match="probe family 'prefix' declares no stage 'items'"):
        registry.family_version("prefix", "items")


@pytest.mark.parametrize("step", sorted(STEPS))
def test_each_steps_recorded_fingerprint_matches_its_code(step):
    current = step_fingerprint(step)
    assert STEPS[step].fingerprint == current, (
        f"the code of step {step!r} changed ({STEPS[step].fingerprint} -> {current}): if what it computes changes, "
        f"bump its version in memaudit/versions.py (STEPS); then run `memaudit code-versions --record`")


def test_the_steps_of_no_family_cover_their_code_and_not_the_probes():
    assert sorted(STEPS) == ["datasets", "figures", "models", "stats"] and not set(STEPS) & set(FAMILIES)
    datasets, models = set(registry.step_modules("datasets")), set(registry.step_modules("models"))
    assert {"memaudit.datasets.build", "memaudit.datasets.published", "memaudit.datasets.text"} <= datasets
    # a fine-tune's texts are datasets.build's member_texts: its code is the models step's too
    assert {"memaudit.models.prepare", "memaudit.models.finetune", "memaudit.datasets.build"} <= models
    assert {"memaudit.stats.metrics", "memaudit.stats.selection"} <= set(registry.step_modules("stats"))
    # no probe's running or scoring code (the datasets use CopyBench's tokeniser and the overlap test)
    assert not {fam.runner.partition(":")[0] for fam in FAMILIES.values()} & (datasets | models)
    # the forward pass is token_prob's stats stage, not its scoring
    stats = set(registry.stage_modules("token_prob", "stats"))
    assert "memaudit.models.token_stats" in stats and "memaudit.probes.token_prob.methods" not in stats


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


def _versions_copy(tmp_path):
    """A copy of memaudit/versions.py for record_fingerprints to write a stale step's fingerprint into: given
    only the registry's copy, it wrote into the real file whenever the working tree had a stale step (a
    change not yet recorded), and the test run edited the source."""
    import memaudit.versions

    copy = tmp_path / "versions.py"
    copy.write_text(open(memaudit.versions.__file__, encoding="utf-8").read())
    return copy


def test_record_writes_only_stale_fingerprints_and_keeps_versions(tmp_path, monkeypatch):
    copy = tmp_path / "registry.py"
    source = registry.__file__
    text = open(source, encoding="utf-8").read()
    stale = text.replace(f'fingerprint="{FAMILIES["prefix"].fingerprint}"', 'fingerprint="0000000000000000"')
    copy.write_text(stale)
    monkeypatch.setitem(FAMILIES, "prefix", registry.ProbeFamily(
        **{**FAMILIES["prefix"].__dict__, "fingerprint": "0000000000000000"}))
    assert registry.record_fingerprints(copy, _versions_copy(tmp_path)) == {"prefix": code_fingerprint("prefix")}
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
    assert registry.record_fingerprints(copy, _versions_copy(tmp_path)) == {"decop.items": recorded}
    assert copy.read_text() == text  # the family's own fingerprint, before it, is left as it was


def test_record_replaces_the_docs_placeholder_in_its_own_entry_not_the_next_familys(tmp_path, monkeypatch):
    """docs/adding-a-probe-family.md's skeleton reads fingerprint="<printed by memaudit code-versions --record>":
    the pattern took only hex digits, so it ran on into the next family and wrote over that one's fingerprint."""
    copy = tmp_path / "registry.py"
    text = open(registry.__file__, encoding="utf-8").read()
    placeholder = 'fingerprint="<printed by memaudit code-versions --record>"'
    prefix = FAMILIES["prefix"].fingerprint
    assert text.count(f'fingerprint="{prefix}"') == 1
    copy.write_text(text.replace(f'fingerprint="{prefix}"', placeholder))
    monkeypatch.setitem(FAMILIES, "prefix", registry.ProbeFamily(**{**FAMILIES["prefix"].__dict__, "fingerprint": ""}))
    assert registry.record_fingerprints(copy, _versions_copy(tmp_path)) == {"prefix": code_fingerprint("prefix")}
    assert copy.read_text() == text.replace(f'fingerprint="{prefix}"', f'fingerprint="{code_fingerprint("prefix")}"')


def test_the_cli_reports_a_stale_family_and_exits_1(monkeypatch, capsys):
    monkeypatch.setitem(FAMILIES, "prefix", registry.ProbeFamily(
        **{**FAMILIES["prefix"].__dict__, "fingerprint": "0000000000000000"}))
    assert registry.code_versions_main([]) == 1
    out = capsys.readouterr().out
    assert f"{'prefix':18s} version {FAMILIES['prefix'].version}  fingerprint 0000000000000000  changed" in out
    assert f"{'token_prob':18s} version {FAMILIES['token_prob'].version}" in out and "ok" in out
    assert f"{'copybench.summary':18s} version {FAMILIES['copybench'].stages['summary'].version}  fingerprint" in out
    assert f"{'stats':18s} version {STEPS['stats'].version}  fingerprint {STEPS['stats'].fingerprint}  ok" in out


def test_record_writes_a_stale_steps_fingerprint_into_versions(tmp_path, monkeypatch):
    import memaudit.versions

    registry_copy, versions_copy = tmp_path / "registry.py", tmp_path / "versions.py"
    registry_text = open(registry.__file__, encoding="utf-8").read()
    versions_text = open(memaudit.versions.__file__, encoding="utf-8").read()
    recorded = STEPS["models"].fingerprint
    assert versions_text.count(f'fingerprint="{recorded}"') == 1
    registry_copy.write_text(registry_text)
    versions_copy.write_text(versions_text.replace(f'fingerprint="{recorded}"', 'fingerprint="0000000000000000"'))
    monkeypatch.setitem(STEPS, "models", memaudit.versions.Stage(
        **{**STEPS["models"].__dict__, "fingerprint": "0000000000000000"}))
    assert registry.record_fingerprints(registry_copy, versions_copy) == {"models": recorded}
    assert versions_copy.read_text() == versions_text and registry_copy.read_text() == registry_text


# ----------------------------------------------------------------------------- workflow scripts

# A rule's `script:` is outside the code versions: on a user's finished run, any edit to it (a comment
# too) reruns every job of every rule that runs it, through Snakemake's code trigger (docs/reruns.md).
# probe.py alone runs six rules, every probe of every family. The logic lives in src/memaudit/, behind
# code versions, and a script changes only where all of its rules' outputs must be remade: then its
# digest here changes in the same commit. Session 46 nearly shipped a one-line edit of prepare_model.py
# that would have retrained every model of every finished run, for a change that altered no result.
SCRIPT_DIGESTS = {
    "api_estimate.py": "b702258527a8e0e6",
    "api_ledger.py": "41733b030d26f799",
    "benchmark_dataset.py": "d79fe6c2732ca2a1",
    "blind_baseline.py": "cae3e7e82c63b2d5",
    "cloze_items.py": "eaf7272a88404e6c",
    "cloze_summary.py": "1129526252781e4c",
    "copybench_items.py": "20daf51240614211",
    "copybench_qa_items.py": "0e799f313d74e6d3",
    "copybench_summary.py": "d09fd01cc1f3b7e3",
    "decop_figures.py": "d68bcf5fac568fab",
    "decop_items.py": "6f584e89a9584f73",
    "fetch_assets.py": "7c809a89731d662d",
    "figure_auc_vs_size.py": "7098c255ce7232bd",
    "figures_model.py": "dbfee0656a64d804",
    "ktd_pool.py": "3fce2b6b4975b63f",
    "ktd_summary.py": "3468f026932796d8",  # session 76: the model families for the size panels (KTD summary 11)
    "metrics.py": "97fa06db94bf61e4",
    "prefix_dataset.py": "30c8014e6b3c461c",
    "prepare_model.py": "3adb46d6c6eff193",
    "pretrain_pool.py": "729d10066d7b55ca",
    "probe.py": "471ddcd2b35c726a",
    "summary.py": "91cd817733743b9c",
    "token_stats.py": "7ae3219aa246a3db",
}


def _rules_by_script() -> dict[str, list[str]]:
    """{script file name: the rules whose `script:` runs it}, read from workflow/rules/*.smk."""
    import re

    rules: dict[str, list[str]] = {}
    for rule, directives in rule_directives().items():
        if script := re.fullmatch(r'"\.\./scripts/([\w.]+)"', directives.get("script", "")):
            rules.setdefault(script[1], []).append(rule)
    return rules


def test_a_workflow_script_changes_only_with_its_digest():
    import hashlib

    scripts = {p.name: p for p in (ROOT / "workflow" / "scripts").glob("*.py")}
    rules = _rules_by_script()
    assert set(rules) == set(scripts), "every script runs in a rule, and every rule's script is here"
    assert len(rules["probe.py"]) == 6 and "prepare_model" in rules["prepare_model.py"]
    assert set(SCRIPT_DIGESTS) == set(scripts), f"add the new script's digest: {sorted(set(scripts) ^ set(SCRIPT_DIGESTS))}"
    for name, path in sorted(scripts.items()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        assert digest == SCRIPT_DIGESTS[name], (
            f"workflow/scripts/{name} changed ({SCRIPT_DIGESTS[name]} -> {digest}): on a user's finished run every "
            f"job of rule(s) {', '.join(rules[name])} reruns. Put the change in src/memaudit/ (behind a code "
            f"version where results change); if the script must change, update SCRIPT_DIGESTS in tests/test_code_versions.py")
