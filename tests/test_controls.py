"""A model's declared control (``models.<name>.control``): an auditor's two checkpoints, given by path,
paired in CopyBench's and the cloze probes' differences as a fine-tune is paired with its base here."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml

from memaudit import jobs
from memaudit.config import control_of, model_build_settings, model_scoring_settings, pairing_of
from memaudit.errors import ConfigError
from workflow_helpers import ROOT

CI = yaml.safe_load((ROOT / "config/ci.yaml").read_text())


def audit_config(**control) -> dict:
    """The ci config with two base models standing for an audit's checkpoints: ``suspect`` (the
    tiny-gpt2-cb-books entry made a base model) and ``original`` (tiny-gpt2-cb), both probed by CopyBench
    and the cloze probes."""
    cfg = copy.deepcopy(CI)
    cfg["models"]["original"] = copy.deepcopy(cfg["models"]["tiny-gpt2-cb"])
    cfg["models"]["suspect"] = {**copy.deepcopy(cfg["models"]["tiny-gpt2-cb"]), **control}
    for probe in ("copybench_literal", "copybench_nonliteral"):
        cfg["probes"][probe]["models"] = ["original", "suspect"]
    cfg["probes"]["cloze_logit"]["models"] = ["original", "suspect"]
    return cfg


def problems_of(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        jobs.check_config(cfg)
    return str(err.value)


def test_a_declared_control_pairs_the_two_in_both_families_and_nowhere_else():
    cfg = jobs.check_config(audit_config(control="original"))
    assert jobs.controls(cfg, "copybench") == {"suspect": "original"}
    assert jobs.declared_controls(cfg, "copybench") == ["suspect"] == jobs.declared_controls(cfg, "cloze")
    assert jobs.controls(cfg, "cloze") == {"suspect": "original"}
    # a fine-tuned model's control is its base, given as a base
    entry = cfg["models"]["tiny-gpt2-small-contaminated"]
    assert (control_of(entry), pairing_of(entry)) == ("tiny-gpt2-small", "base")
    assert (control_of(cfg["models"]["suspect"]), pairing_of(cfg["models"]["suspect"])) == ("original", "control")
    assert control_of(cfg["models"]["original"]) is None
    # the control decides which tables pair the two, never the weights or the scores
    assert "control" not in model_build_settings(cfg["models"]["suspect"])
    assert "control" not in model_scoring_settings(cfg["models"]["suspect"])


@pytest.mark.parametrize("change, message", [
    (lambda c: c["models"]["suspect"].update(control="nobody"), "models.suspect.control: unknown model 'nobody'"),
    (lambda c: c["models"]["suspect"].update(control="suspect"),
     "models.suspect.control: a model cannot be its own control"),
    (lambda c: c["models"]["tiny-gpt2-cb-books"].update(control="original"),
     "models.tiny-gpt2-cb-books.control: 'tiny-gpt2-cb-books' is fine-tuned from 'tiny-gpt2-cb', which is its "
     "control; remove control"),
    (lambda c: c["probes"]["cloze_logit"].update(models=["suspect"]),
     "models.suspect.control: cloze pairs 'suspect' with 'original', which probes.cloze_logit does not run on "
     "'novels'; add 'original' to its models"),
    (lambda c: c["probes"]["copybench_nonliteral"].update(models=["tiny-gpt2-cb", "suspect"]),
     "models.suspect.control: copybench pairs 'suspect' with 'original', which probes.copybench_nonliteral does "
     "not run on 'books'; add 'original' to its models"),
    (lambda c: c["probes"].update(cloze_logit={"models": ["original"], "benchmarks": ["novels"]},
                                  copybench_literal={"models": ["original"], "benchmarks": ["books"]},
                                  copybench_nonliteral={"models": ["original"], "benchmarks": ["books"]}),
     "models.suspect.control: only copybench and cloze pair a model with its control, and none of them probes "
     "'suspect'; probe it there or remove control"),
])
def test_a_control_that_cannot_be_paired_is_a_config_error_naming_the_key(change, message):
    cfg = audit_config(control="original")
    change(cfg)
    assert message in problems_of(cfg)


def _copybench_items(tmp_path, model: str, member: float, nonmember: float) -> str:
    from memaudit.io import write_jsonl

    path = tmp_path / "scores" / "books" / model / "copybench_literal_items.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"item_id": f"m{i}", "label": 1, "decoding": "greedy", "copybench_rougeL": member + 0.02 * i}
            for i in range(5)]
    rows += [{"item_id": f"n{i}", "label": 0, "decoding": "greedy", "copybench_rougeL": nonmember + 0.01 * i}
             for i in range(5)]
    write_jsonl(path, rows)
    return str(path)


def test_copybench_rows_of_a_declared_control_are_reported_not_checked(tmp_path):
    from memaudit.probes.copybench import headline
    from memaudit.probes.copybench.summary import DIFFERENCE_COLUMNS, differences_table

    paths = [_copybench_items(tmp_path, m, a, b) for m, a, b in
             [("original", 0.2, 0.2), ("suspect", 0.6, 0.25), ("base", 0.2, 0.2), ("tuned", 0.5, 0.2),
              ("other", 0.3, 0.3)]]
    table = differences_table(paths, {"suspect": "original", "tuned": "base", "other": "base"}, seed=2,
                              declared=["suspect"], members_of={"tuned": ["books"], "other": ["news"]})
    assert list(table.columns) == list(DIFFERENCE_COLUMNS)
    pairs = table.groupby("model")[["base", "pairing", "contaminated_on_benchmark"]].first()
    assert pairs.to_dict("index") == {
        "suspect": {"base": "original", "pairing": "control", "contaminated_on_benchmark": False},
        "tuned": {"base": "base", "pairing": "base", "contaminated_on_benchmark": True},
        "other": {"base": "base", "pairing": "base", "contaminated_on_benchmark": False}}
    rows = table[(table["model"] == "suspect") & (table["score"] == "copybench_rougeL")].set_index("group")
    assert rows.loc["member", "difference"] == pytest.approx(0.4)
    assert rows.loc["nonmember", "difference"] == pytest.approx(0.05)
    assert rows.loc["member_minus_nonmember", "difference"] == pytest.approx(0.35)

    # (no excess over chance: one book's items only) the fine-tune on this benchmark alone is checked
    checks = headline.expectations(table, scores=("copybench_rougeL",))
    assert set(checks["model"]) == {"tuned"} and checks["ok"].all()
    shown = headline.against_control(table)  # per score: members, non-members, the gain beyond them
    assert shown["books"].tolist()[:3] == ["member", "nonmember", "member_minus_nonmember"]
    assert shown["score"].tolist()[:3] == ["copybench_rougeL"] * 3
    audit = shown.set_index(["score", "books"])
    assert set(audit["model"]) == {"suspect"} and set(audit["control"]) == {"original"}
    assert "ok" not in audit.columns  # no ground truth: where the interval lies, no verdict
    assert audit.loc[("copybench_rougeL", "member"), "interval"] == "above 0"
    assert audit.loc[("copybench_rougeL", "member"), "difference"] == pytest.approx(0.4)
    assert audit.loc[("copybench_rougeL", "member_minus_nonmember"), "interval"] == "above 0"
    assert audit.loc[("copybench_rougeL", "member"), "items"] == 5

    (tmp_path / "summary").mkdir()
    table.to_csv(tmp_path / "summary" / "copybench_differences.csv", index=False)
    text = "\n".join(str(b) for b in headline.headline(tmp_path / "summary", None))
    assert "CopyBench, each model minus its declared control" in text and "original" in text


def test_a_differences_table_from_before_the_pairing_column_reads_as_before():
    from memaudit.probes.copybench import headline

    old = pd.DataFrame([{"benchmark": "books", "model": "tuned", "base": "base", "mode": "literal",
                         "decoding": "greedy", "group": "member", "n_items": 5, "score": "copybench_rougeL_excess",
                         "mean_model": 0.5, "mean_base": 0.1, "difference": 0.4, "ci_low": 0.2, "ci_high": 0.6,
                         "interval_holds_0": False}])
    checks = headline.expectations(old)  # its non-member and gain rows are missing: not evaluated
    assert checks["ok"].tolist() == [True, False, False] and checks["books"].tolist()[0] == "member"
    assert headline.against_control(old.iloc[0:0]).empty


def test_cloze_rows_of_a_declared_control_are_reported_not_checked(tmp_path):
    from memaudit.probes.cloze import headline, summary

    def texts(model, rec):
        n = len(rec)
        return pd.DataFrame({"benchmark": "news", "model": model, "mode": "logit",
                             "passage_id": [f"p{i}" for i in range(n)], "doc_id": [f"d{i}" for i in range(n)],
                             "label": [1] * (n // 2) + [0] * (n - n // 2), "measure": "prob", "n_tokens": 4,
                             "n_reconstructed": rec, "n_invalid": 0, "n_refusal": 0, "n_error": 0, "mrr": 0.5,
                             "memorised": [r >= 2 for r in rec], "reason": ""})

    frame = pd.concat([texts("original", [0, 1, 0, 0, 0, 1, 0, 0]), texts("suspect", [3, 4, 2, 2, 0, 1, 0, 1])],
                      ignore_index=True)
    table = summary.differences_table(frame, {"suspect": "original"}, seed=3, declared=["suspect"])
    assert list(table.columns) == summary.DIFFERENCE_COLUMNS
    assert (table["pairing"] == "control").all() and not table["contaminated_on_benchmark"].any()
    assert headline.expectations(table).empty
    audit = headline.against_control(table).set_index("texts")
    assert audit.loc["member", "difference"] == pytest.approx(np.mean([3, 3, 2, 2]) / 4)
    assert audit.loc["member", "interval"] == "above 0" and audit.loc["nonmember", "interval"] == "holds 0"
    assert audit.loc["member", "control"] == "original" and audit.loc["member", "n"] == 4
    plain = summary.differences_table(frame, {"suspect": "original"}, seed=3)
    assert (plain["pairing"] == "base").all() and headline.against_control(plain).empty


def test_interval_reading():
    from memaudit.stats.headline import interval_reading

    assert [interval_reading(*ci) for ci in [(0.1, 0.3), (-0.3, -0.1), (-0.1, 0.1), (0.0, 0.2)]] == \
        ["above 0", "below 0", "holds 0", "holds 0"]
