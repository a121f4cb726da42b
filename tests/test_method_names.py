"""The method names a config's run writes (memaudit.jobs.method_names), and the config errors built on them:
a misspelt ``figures.headline_methods`` or ``stats.selection.figure_methods`` entry, two Min-K% ratios that would share one name."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memaudit.errors import ConfigError
from memaudit.jobs import load_config, method_names, validate_config

ROOT = Path(__file__).resolve().parents[1]
CI = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
SHA = "0123456789abcdef0123456789abcdef01234567"


def shipped_configs(tmp_path) -> dict[str, dict]:
    """Every config/*.yaml, validated (paper.yaml with its hub revisions pinned, as a user must)."""
    out = {}
    for path in sorted((ROOT / "config").glob("*.yaml")):
        if path.name == "paper.yaml":
            pinned = tmp_path / path.name
            pinned.write_text(path.read_text().replace("REPLACE_WITH_COMMIT", SHA))
            path = pinned
        out[path.name] = load_config(path)
    return out


def test_method_names_of_the_ci_config_are_every_familys_names_under_its_settings():
    names = method_names(validate_config(copy.deepcopy(CI)))
    assert names == [
        # token_prob: methods x min_k_ratios [0.1, 0.2], the reference for every other model (no lowercase...)
        "loss", "zlib", "lowercase", "min_k_10pct", "min_k_20pct", "min_k_plus_plus_10pct", "min_k_plus_plus_20pct",
        "ref_tiny-gpt2-small",
        # DE-COP's logit and likelihood modes at its one length
        "decop-logit", "decop-logit-calibrated", "decop-logit-prob", "decop-likelihood", "decop-likelihood-prob",
        # CopyBench's literal and non-literal modes, greedy and MemFree
        "copybench_rougeL", "copybench_rougeL_excess", "copybench_rougeL_memfree", "copybench_rougeL_excess_memfree",
        "copybench_characters", "copybench_events", "copybench_characters_memfree", "copybench_events_memfree",
        "ktd_w_gradnorm", "ktd_w_loss", "ktd_w_min_k", "ktd_z_gradnorm",
        "cloze_prob", "cloze_rank", "cloze_person", "cloze_prob_mrr", "cloze_rank_mrr", "cloze_person_mrr"]


def test_method_names_follow_each_familys_settings():
    cfg = copy.deepcopy(CI)
    probes = cfg["probes"]
    probes["token_prob"].update(methods=["loss", "min_k", "reference"], min_k_ratios=[0.05, 0.125])
    probes["decop"]["lengths"] = [128, 64]
    probes["decop"]["calibration_documents"] = 0
    del probes["decop_likelihood"]
    probes["copybench"]["decodings"] = ["greedy", "system"]
    del probes["copybench_nonliteral"]
    for key in ("ktd", "cloze_logit"):
        del probes[key]
    probes["cloze_blackbox"] = {"models": ["tiny-gpt2-small"]}  # the black-box mode has no mean reciprocal ranks
    probes["cloze"]["measures"] = ["rank"]
    names = method_names(validate_config(cfg))
    assert names == ["loss", "min_k_5pct", "min_k_12p5pct", "ref_tiny-gpt2-small",
                     # the first length unsuffixed; no calibrated variant where calibration_documents is 0
                     "decop-logit", "decop-logit-prob", "decop-logit-64tok", "decop-logit-prob-64tok",
                     "copybench_rougeL", "copybench_rougeL_excess", "copybench_rougeL_system",
                     "copybench_rougeL_excess_system", "cloze_rank"]


def test_every_shipped_config_writes_the_names_it_would_draw(tmp_path):
    """The shipped configs pass, and each would pass naming any method its run writes. The default
    list (figures.headline_methods unset) is not checked: config.yaml turns lowercase off."""
    configs = shipped_configs(tmp_path)
    assert sorted(configs) == ["ci.yaml", "config.yaml", "gpu.yaml", "paper.yaml"]
    for name, cfg in configs.items():
        names = method_names(cfg)
        assert {"loss", "zlib", "min_k_20pct", "min_k_plus_plus_20pct"} <= set(names), name
        assert ("lowercase" in names) == (name != "config.yaml"), name
        cfg["figures"]["headline_methods"] = names[::-1]
        cfg["stats"]["selection"]["figure_methods"] = names
        validate_config(cfg)


def test_a_misspelt_headline_method_is_a_config_error_with_close_matches():
    cfg = copy.deepcopy(CI)
    cfg["figures"] = {"headline_methods": ["loss", "zlibb", "min_k_15pct", "decop-logit", "nothing-like-it"]}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value).splitlines() == [
        "config key figures.headline_methods.1: 'zlibb' is no method this config's probes write; did you mean "
        "'zlib'? (they write 31: see config/README.md)",
        "config key figures.headline_methods.2: 'min_k_15pct' is no method this config's probes write; did you "
        "mean 'min_k_10pct', 'min_k_20pct', 'min_k_plus_plus_10pct'? (they write 31: see config/README.md)",
        "config key figures.headline_methods.4: 'nothing-like-it' is no method this config's probes write "
        "(they write 31: see config/README.md)"]
    # a name another config's families write is refused where this one's do not: DE-COP turned off
    cfg["figures"] = {"headline_methods": ["loss", "decop-logit"]}
    for key in ("decop", "decop_logit", "decop_likelihood", "ktd"):
        del cfg["probes"][key]
    with pytest.raises(ConfigError, match=r"headline_methods\.1: 'decop-logit' is no method"):
        validate_config(cfg)


def test_a_misspelt_selection_figure_method_is_a_config_error_the_default_is_not():
    """stats.selection.figure_methods is checked as figures.headline_methods is, where the user sets it;
    its default (decop-likelihood-prob, copybench_rougeL) names methods a token-probability-only run lacks."""
    cfg = copy.deepcopy(CI)
    cfg["stats"] = {"selection": {"figure_methods": ["decop-likelihood-prob", "copybench_rougel", "loss"]}}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value).splitlines() == [
        "config key stats.selection.figure_methods.1: 'copybench_rougel' is no method this config's probes "
        "write; did you mean 'copybench_rougeL', 'copybench_rougeL_excess', 'copybench_rougeL_memfree'? "
        "(they write 31: see config/README.md)"]
    # both lists misspelt: one line each
    cfg["figures"] = {"headline_methods": ["zlibb"]}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert [line.split(":")[0] for line in str(err.value).splitlines()] == [
        "config key figures.headline_methods.0", "config key stats.selection.figure_methods.1"]
    # the default is not checked: a token-probability-only run has neither DE-COP nor CopyBench methods
    only_tokens = copy.deepcopy(CI)
    only_tokens["probes"] = {"token_prob": only_tokens["probes"]["token_prob"]}
    checked = validate_config(only_tokens)
    assert checked["stats"]["selection"]["figure_methods"] == ["loss", "decop-likelihood-prob", "copybench_rougeL"]
    assert "decop-likelihood-prob" not in method_names(checked)
    # set by the user, the same names are refused there
    only_tokens["stats"] = {"selection": {"figure_methods": ["loss", "decop-likelihood-prob"]}}
    with pytest.raises(ConfigError, match=r"figure_methods\.1: 'decop-likelihood-prob' is no method"):
        validate_config(only_tokens)


def test_check_config_names_the_file_and_the_misspelt_headline_method(tmp_path):
    cfg = copy.deepcopy(CI)
    cfg["figures"] = {"headline_methods": ["loss", "zlibb"]}
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "memaudit.cli", "check-config", str(path)],
                          capture_output=True, text=True)
    assert done.returncode != 0
    line, text = next((n, t) for n, t in enumerate(path.read_text().splitlines(), 1) if t.endswith("- zlibb"))
    assert (f"{path}, line {line}, column {text.index('zlibb') + 1}: config key figures.headline_methods.1: 'zlibb' "
            f"is no method this config's probes write; did you mean 'zlib'?") in done.stderr


def test_two_min_k_ratios_that_name_one_method_are_a_config_error():
    cfg = copy.deepcopy(CI)
    cfg["probes"]["token_prob"]["min_k_ratios"] = [0.1, 0.2, 0.1000001]
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value) == (
        "config key probes.token_prob.min_k_ratios.2: 0.1000001 and 0.1 both name the methods min_k_10pct and "
        "min_k_plus_plus_10pct, so one's scores would overwrite the other's: drop one, or make them differ within "
        "6 significant digits of the percentage")
    cfg["probes"]["token_prob"]["min_k_ratios"] = [0.1, 0.10001, 0.125]  # 10pct, 10p001pct, 12p5pct
    assert {"min_k_10pct", "min_k_10p001pct", "min_k_12p5pct"} <= set(method_names(validate_config(cfg)))
