"""FDR-controlled selection: conformal p-values, Benjamini-Hochberg, knockoff+ (memaudit.stats.selection)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memaudit.errors import ConfigError, InputError
from memaudit.stats import selection


def test_conformal_pvalues_count_calibration_scores_at_or_above():
    calibration = [0.1, 0.5, 0.5, 0.9]
    p = selection.conformal_pvalues([1.0, 0.5, 0.2, 0.0], calibration)
    # (1 + #{c >= s}) / 5: 1.0 beats all, 0.5 ties two (ties count against), 0.2 beats one, 0.0 none
    np.testing.assert_allclose(p, [1 / 5, 4 / 5, 4 / 5, 5 / 5])


def test_conformal_pvalues_need_calibration_and_finite_scores():
    with pytest.raises(InputError, match="at least one calibration"):
        selection.conformal_pvalues([1.0], [])
    with pytest.raises(InputError, match="test scores: 1 value"):
        selection.conformal_pvalues([np.nan], [1.0])


def test_conformal_pvalues_are_uniform_for_exchangeable_nonmembers():
    # a non-member's p-value is uniform on {1/(n+1), ..., 1}: P(p <= k/(n+1)) = k/(n+1)
    rng = np.random.default_rng(0)
    n_cal, draws = 9, 20000
    p = np.array([selection.conformal_pvalues(rng.normal(size=1), rng.normal(size=n_cal))[0]
                  for _ in range(draws)])
    for k in (1, 3, 5):
        assert abs((p <= k / (n_cal + 1)).mean() - k / (n_cal + 1)) < 0.01


def test_benjamini_hochberg_is_the_step_up_rule():
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    # k = max{k : p_(k) <= 0.05 k / 10}: p_(5) = 0.042 > 0.025, p_(2) = 0.008 <= 0.01 -> k = 2
    assert selection.benjamini_hochberg(p, 0.05).tolist() == [True, True] + [False] * 8
    # at q = 0.25: p_(7) = 0.074 <= 0.175 and p_(10) = 0.216 <= 0.25 -> everything
    assert selection.benjamini_hochberg(p, 0.25).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.floats(0.01, 0.99))
def test_benjamini_hochberg_matches_its_definition(pvalues, q):
    p = np.asarray(pvalues)
    order = np.sort(p)
    m = p.size
    passing = [k for k in range(1, m + 1) if order[k - 1] <= q * k / m * (1 + 1e-12)]
    expected = p <= order[max(passing) - 1] if passing else np.zeros(m, bool)
    assert selection.benjamini_hochberg(p, q).tolist() == expected.tolist()


@pytest.mark.parametrize("q", [0, 1, -0.1, 1.5, "x", None])
def test_q_outside_the_open_unit_interval_is_a_config_error(q):
    with pytest.raises(ConfigError, match="FDR level"):
        selection.benjamini_hochberg([0.1], q)
    with pytest.raises(ConfigError, match="FDR level"):
        selection.knockoff_plus_threshold([1.0], q)


def _eq10_selection(w: np.ndarray, q: float) -> np.ndarray:
    """KTD's Eq. 10 evaluated directly, t on a grid finer than any gap between the |W|s: {W >= tau}."""
    levels = np.unique(np.abs(w[w != 0]))
    grid = np.unique(np.concatenate([levels, (levels[:-1] + levels[1:]) / 2, levels / 2]))
    for t in grid:
        if (1 + np.sum(w <= -t)) / max(1, np.sum(w >= t)) <= q:
            return w >= t
    return np.zeros(w.size, bool)


def test_knockoff_plus_threshold_on_a_worked_example():
    w = np.array([5.0, 4.0, 3.0, 2.5, 2.0, 1.5, -1.0, 1.2, -0.5, 0.0])
    # t = 1.0: (1 + 1) / 7 = 0.29; t = 1.2: (1 + 0) / 6 = 0.17 <= 0.2 -> tau = 1.2
    assert selection.knockoff_plus_threshold(w, 0.2) == 1.2
    assert selection.knockoff_plus_select(w, 0.2).tolist() == [True] * 6 + [False, True, False, False]
    # q = 0.1 needs at least 10 positives above every negative: never here
    assert selection.knockoff_plus_threshold(w, 0.1) == math.inf
    assert not selection.knockoff_plus_select(w, 0.1).any()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-6, 6).map(float), min_size=1, max_size=30), st.floats(0.05, 0.95))
def test_knockoff_plus_threshold_matches_eq10_with_ties_and_zeros(values, q):
    w = np.asarray(values)
    # the ratio is constant on (|W|_(k-1), |W|_(k)]: tau is reported as the interval's |W|, the
    # selected set is the same for every t in it
    assert selection.knockoff_plus_select(w, q).tolist() == _eq10_selection(w, q).tolist()
    tau = selection.knockoff_plus_threshold(w, q)
    assert tau == math.inf or tau in np.abs(w)


def test_fdp_and_power():
    fdp, power = selection.fdp_and_power([True, True, True, False, False], [1, 1, 0, 1, 0])
    assert (fdp, power) == (1 / 3, 2 / 3)
    assert selection.fdp_and_power([False, False], [1, 0]) == (0.0, 0.0)
    # no member to find: power is undefined (nan, one definition for BH and KTD's knockoff+), the FDP is not
    fdp, power = selection.fdp_and_power([True, False, True], [0, 0, 0])
    assert fdp == 1.0 and math.isnan(power)
    fdp, power = selection.fdp_and_power([False, False], [0, 0])
    assert fdp == 0.0 and math.isnan(power)


def test_a_method_without_members_has_no_power_in_the_selection_tables_as_in_metrics():
    """Power with no member to find is undefined: nan in the runs and the selection table (it was 0.0), as
    metrics.csv's bh_power; the FDR stays a number, the share of splits in which BH names anything."""
    rng = np.random.default_rng(3)
    frame = _frame(rng.normal(2.0, 1.0, 20), rng.normal(0.0, 1.0, 30))
    frame = pd.concat([frame, _frame([], np.linspace(0, 1, 30), method="no_members")], ignore_index=True)
    runs = selection.conformal_bh_runs(frame, [0.1, 0.9], n_splits=4, seed=0)
    empty = runs[runs["method"] == "no_members"]
    assert (empty["n_test_member"] == 0).all() and empty["power"].isna().all()
    assert (empty["fdp"] == (empty["n_selected"] > 0)).all()  # every document named is a false one
    assert runs.loc[runs["method"] == "loss", "power"].notna().all()
    summary = selection.summarise_runs(runs).set_index(["method", "q"])
    assert summary.loc["no_members", ["power", "power_se"]].isna().all().all()
    at = empty[empty["q"] == 0.9]
    assert summary.loc[("no_members", 0.9), "fdr"] == pytest.approx((at["n_selected"] > 0).mean())
    assert summary.loc["loss", "power"].notna().all()
    group = frame[frame["method"] == "no_members"]
    metrics = selection.selection_metrics(group["score"], group["label"], group["doc_id"], q=0.1, n_splits=4)
    assert math.isnan(metrics["bh_power"]) and math.isnan(summary.loc[("no_members", 0.1), "power"])


def test_a_mean_over_splits_does_not_skip_a_missing_power():
    """The means over splits are explicit about nan: a split without a power makes the mean nan, not the
    mean of the others (pandas' default skipna)."""
    runs = pd.DataFrame({"method": "m", "split": [0, 1], "q": 0.1, "n_calibration": 5, "n_test": 10,
                         "n_test_member": 3, "n_selected": 2, "n_false": 0, "fdp": 0.0, "power": [0.5, math.nan]})
    out = selection.summarise_runs(runs)
    assert math.isnan(out["power"].iloc[0]) and math.isnan(out["power_se"].iloc[0]) and out["fdr"].iloc[0] == 0.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=2, max_size=40), st.sampled_from([0.25, 0.5, 0.75]),
       st.integers(0, 5))
def test_every_split_tests_every_member(labels, fraction, split):
    """Calibration draws non-members only, so a split's test documents hold every member: a method with
    members (every method of the demo, whose benchmarks are half members and whose DE-COP subsets take
    half members) has a power on every split, and one without has none on any."""
    labels = np.asarray(labels)
    assume(selection.can_calibrate(labels, fraction))
    cal = selection.calibration_split(labels, [f"d{i}" for i in range(labels.size)], fraction, seed=7, split=split)
    assert not (cal & (labels == 1)).any()
    assert int(labels[~cal].sum()) == int(labels.sum())


def _frame(member_scores, nonmember_scores, method="loss"):
    scores = np.r_[member_scores, nonmember_scores]
    labels = np.r_[np.ones(len(member_scores), int), np.zeros(len(nonmember_scores), int)]
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(scores.size)], "label": labels,
                         "method": method, "score": scores})


def test_conformal_bh_controls_fdr_on_average_and_finds_separated_members():
    rng = np.random.default_rng(1)
    frame = _frame(rng.normal(2.0, 1.0, 60), rng.normal(0.0, 1.0, 120))
    runs = selection.conformal_bh_runs(frame, [0.1, 0.2, 0.3], n_splits=40, calibration_fraction=0.5, seed=3)
    summary = selection.summarise_runs(runs)
    assert list(summary.columns) == selection.SELECTION_COLUMNS
    assert summary["n_calibration"].tolist() == [60, 60, 60] and summary["n_test"].tolist() == [120] * 3
    # E[FDP] <= q * n_test_nonmember / n_test = q / 2 (BH with PRDS conformal p-values)
    for row in summary.itertuples():
        assert row.fdr <= row.q / 2 + 2 * row.fdr_se + 0.01, row
    assert summary["power"].is_monotonic_increasing and summary["power"].iloc[-1] > 0.3
    assert summary["min_q"].iloc[0] == pytest.approx(1 / 61)


def test_conformal_bh_selects_nothing_without_signal_at_low_q():
    rng = np.random.default_rng(2)
    frame = _frame(rng.normal(0, 1, 50), rng.normal(0, 1, 100))
    summary = selection.summarise_runs(selection.conformal_bh_runs(frame, [0.1], n_splits=30, seed=0))
    assert summary["mean_selected"].iloc[0] < 3 and summary["fdr"].iloc[0] <= 0.15


def test_conformal_bh_uses_the_same_calibration_documents_for_every_method():
    rng = np.random.default_rng(4)
    a = _frame(rng.normal(1, 1, 20), rng.normal(0, 1, 20), "a")
    b = a.assign(method="b", score=-a["score"])
    chosen = selection.selected_documents(pd.concat([a, b]), [0.5], seed=7)
    cal = chosen[chosen.role == "calibration"]
    assert set(cal.loc[cal.method == "a", "doc_id"]) == set(cal.loc[cal.method == "b", "doc_id"])
    assert (cal["label"] == 0).all() and len(cal) == 2 * 10  # a quarter of 40 documents (half the non-members)
    chosen = chosen[chosen.role == "test"]
    assert set(chosen.loc[chosen.method == "a", "doc_id"]) == set(chosen.loc[chosen.method == "b", "doc_id"])
    assert len(chosen) == 2 * 30  # 40 documents less 10 calibration non-members, per method
    # the named set is BH's on those p-values
    part = chosen[chosen.method == "a"]
    assert part["selected"].tolist() == selection.benjamini_hochberg(part["pvalue"], 0.5).tolist()


def test_calibration_documents_follow_the_document_not_its_row():
    """Methods that list the same documents in another order, or one document more, calibrate on
    the same non-members: the draw is keyed by (seed, split, doc_id), not by position."""
    rng = np.random.default_rng(9)
    a = _frame(rng.normal(1, 1, 30), rng.normal(0, 1, 30), "a")
    shuffled = a.sample(frac=1.0, random_state=3).assign(method="b")
    extra = pd.concat([a, pd.DataFrame({"doc_id": ["d-extra"], "label": [0], "method": ["a"], "score": [0.1]})])
    for split in range(5):
        cal = {name: set(f["doc_id"][selection.calibration_split(f["label"], f["doc_id"], 0.5, seed=2, split=split)])
               for name, f in (("a", a), ("b", shuffled), ("extra", extra))}
        assert cal["a"] == cal["b"] and len(cal["a"]) == 15
        assert len(cal["a"] & cal["extra"]) >= 14 and len(cal["extra"]) == 16  # round(0.5 * 31) = 16
        assert all(d.startswith("d") and int(d[1:]) >= 30 for d in cal["a"])  # non-members only (d30..d59)
    picks = [frozenset(a["doc_id"][selection.calibration_split(a["label"], a["doc_id"], 0.5, seed=2, split=k)])
             for k in range(5)]
    assert len(set(picks)) == 5  # a new draw per split
    runs = selection.conformal_bh_runs(pd.concat([a, shuffled]), [0.3], n_splits=4, seed=2)
    by = runs.set_index(["method", "split"])
    assert (by.loc["a", "n_selected"] == by.loc["b", "n_selected"]).all()
    assert (by.loc["a", "fdp"] == by.loc["b", "fdp"]).all()


def test_named_documents_over_a_q_grid_are_bhs_at_each_q_in_method_then_q_order():
    rng = np.random.default_rng(6)
    a = _frame(rng.normal(1.5, 1, 25), rng.normal(0, 1, 30), "a")
    b = a.assign(method="b", score=a["score"] + rng.normal(0, 1, len(a)))
    qs = [0.1, 0.3, 0.5, 0.9]
    chosen = selection.selected_documents(pd.concat([b, a]), qs, seed=3)
    assert list(chosen.columns) == selection.SELECTED_COLUMNS
    assert chosen["role"].tolist() == ["test"] * 2 * len(qs) * 40 + ["calibration"] * 2 * 15  # once per method
    chosen = chosen[chosen.role == "test"]
    assert len(chosen) == 2 * len(qs) * 40  # 55 documents less 15 calibration non-members
    assert chosen[["method", "q"]].drop_duplicates().values.tolist() == [[m, q] for m in "ab" for q in qs]
    for (method, q), part in chosen.groupby(["method", "q"], sort=False):
        first = chosen[(chosen.method == method) & (chosen.q == qs[0])]
        assert part["doc_id"].tolist() == first["doc_id"].tolist()  # the same test documents at every q
        assert part["pvalue"].tolist() == first["pvalue"].tolist()
        assert part["selected"].tolist() == selection.benjamini_hochberg(part["pvalue"], q).tolist()
    sizes = chosen.groupby(["method", "q"])["selected"].sum()
    assert sizes.loc["a"].is_monotonic_increasing and sizes.loc["a", 0.9] > sizes.loc["a", 0.1]


def test_named_documents_list_each_methods_calibration_documents_with_the_seed_and_fraction_drawn_by():
    """The reference set the p-values were computed against is written, not left to be inferred from
    the non-members missing from the test rows: an auditor must be able to show it (and redraw it from
    seed, split and calibration_fraction with :func:`calibration_split`). The test rows come first,
    as before, so a reader of them is unaffected."""
    docs = pd.DataFrame({"doc_id": ["m1", "m2", "m3"] + [f"n{i}" for i in range(1, 11)],
                         "label": [1] * 3 + [0] * 10,
                         "score": [9.0, 8.0, 7.0, 3.0, 1.0, 2.0, 0.5, 4.0, 1.5, 2.2, 0.1, 3.3, 0.7]})
    # zlib scored every document but n10, listed in reverse: 9 non-members, round(4.5) = 4 calibrate
    zlib = docs[docs["doc_id"] != "n10"].iloc[::-1].assign(method="zlib")
    named = selection.selected_documents(pd.concat([zlib, docs.assign(method="loss")]), [0.1, 0.5], seed=5)
    assert list(named.columns) == ["method", "q", "doc_id", "label", "score", "pvalue", "selected",
                                   "role", "split", "seed", "calibration_fraction"]
    test, cal = named[named["role"] == "test"], named[named["role"] == "calibration"]
    assert len(test) == 2 * 2 * 8 and named.index[:len(test)].tolist() == test.index.tolist()  # test rows first
    assert test.loc[test["q"] == 0.5, ["method", "doc_id", "selected"]].values.tolist() == [
        ["loss", "m1", True], ["loss", "m2", True], ["loss", "m3", True], ["loss", "n2", False],
        ["loss", "n3", False], ["loss", "n6", False], ["loss", "n8", False], ["loss", "n9", False],
        ["zlib", "n9", False], ["zlib", "n8", False], ["zlib", "n6", False], ["zlib", "n3", False],
        ["zlib", "n2", False], ["zlib", "m3", False], ["zlib", "m2", False], ["zlib", "m1", False]]  # 1/5 > 0.5 * 3/8
    # once per method (the draw does not depend on q), in the method's row order
    assert cal[["method", "doc_id", "label", "score"]].values.tolist() == [
        ["loss", "n1", 0, 3.0], ["loss", "n4", 0, 0.5], ["loss", "n5", 0, 4.0], ["loss", "n7", 0, 2.2],
        ["loss", "n10", 0, 0.7],
        ["zlib", "n7", 0, 2.2], ["zlib", "n5", 0, 4.0], ["zlib", "n4", 0, 0.5], ["zlib", "n1", 0, 3.0]]
    assert cal["q"].isna().all() and cal["pvalue"].isna().all() and not cal["selected"].any()
    assert (named["split"] == 0).all() and (named["seed"] == 5).all() and (named["calibration_fraction"] == 0.5).all()
    # every test p-value is recomputable from the calibration rows written beside it
    for method in ("loss", "zlib"):
        rows = test[(test["method"] == method) & (test["q"] == 0.1)]
        np.testing.assert_allclose(
            rows["pvalue"], selection.conformal_pvalues(rows["score"], cal.loc[cal["method"] == method, "score"]))
    assert selection.selected_documents(docs.assign(method="loss"), [0.5], calibration_fraction=0.3, seed=5).query(
        "role == 'calibration'")[["doc_id", "calibration_fraction"]].values.tolist() == [
        ["n1", 0.3], ["n4", 0.3], ["n10", 0.3]]


def test_too_few_nonmembers_for_a_calibration_set_is_reported():
    frame = _frame([1.0, 2.0], [0.0])
    with pytest.raises(InputError, match="1 non-member.*no calibration document"):
        selection.calibration_split(frame["label"], frame["doc_id"], 0.4, seed=0, split=0)


def test_a_method_too_few_non_members_calibrate_is_left_out_and_named_not_the_whole_table():
    """A method that scored one non-member (a probe that skipped the others) has no selection rows and
    nan bh_* columns, and one note names it; the other methods of its (benchmark, model) are selected as
    alone: it stopped the metrics job before, losing every method's tables."""
    full = _frame([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0], method="loss")
    few = _frame([5.0, 6.0], [1.0], method="prefix_rougeL")
    fewer = _frame([5.0], [1.0], method="cloze_prob")
    both = pd.concat([full, few, fewer], ignore_index=True)
    runs = selection.conformal_bh_runs(both, [0.5], n_splits=3)
    assert runs.equals(selection.conformal_bh_runs(full, [0.5], n_splits=3))
    named = selection.selected_documents(both, [0.5])
    assert named.equals(selection.selected_documents(full, [0.5]))
    assert selection.uncalibrated_notes(both, 0.5) == [
        "1 non-member(s) and calibration_fraction 0.5 leave no calibration document for methods 'cloze_prob', "
        "'prefix_rougeL': no conformal BH selection (no rows in the selection tables, nan bh_* columns)"]
    assert selection.uncalibrated_notes(full, 0.5) == []
    metrics = selection.selection_metrics(few["score"], few["label"], few["doc_id"], q=0.5)
    assert metrics["bh_q"] == 0.5 and np.isnan(metrics["bh_fdr"]) and np.isnan(metrics["bh_power"])


def test_calibration_size_rounds_half_to_even_as_documented():
    labels = np.array([1] * 3 + [0] * 25)
    ids = [f"d{i}" for i in range(labels.size)]
    sizes = {n: int(selection.calibration_split(labels[:3 + n], ids[:3 + n], 0.5, seed=1, split=0).sum())
             for n in (25, 24, 23, 3)}
    assert sizes == {25: 12, 24: 12, 23: 12, 3: 2}  # round(12.5) = 12, round(11.5) = 12, round(1.5) = 2


def test_unresolvable_q_is_named():
    rng = np.random.default_rng(5)
    frame = _frame(rng.normal(5, 1, 10), rng.normal(0, 1, 8))
    summary = selection.summarise_runs(selection.conformal_bh_runs(frame, [0.1, 0.3], n_splits=3))
    # 4 calibration non-members: the smallest p-value is 1/5 = 0.2, so q = 0.1 selects nothing
    assert summary.set_index("q").loc[0.1, "mean_selected"] == 0
    notes = selection.resolution_notes(summary)
    assert notes == ["q = 0.1 is below 1/(n_calibration + 1) = 0.2 (4 calibration non-members) for method "
                     "'loss': nothing can be selected"]


def test_unresolvable_qs_are_named_in_one_line_per_q_and_calibration_size():
    """Three methods on the same 8 non-members (4 calibrate) and one on 4 (2 calibrate): q = 0.1 is
    unresolvable for all four (1/5 and 1/3), q = 0.3 only for the last (1/3 = 0.333)."""
    rng = np.random.default_rng(5)
    members, nonmembers = rng.normal(5, 1, 10), rng.normal(0, 1, 8)
    frame = pd.concat([_frame(members, nonmembers, method=m) for m in ("zlib", "loss", "min_k")]
                      + [_frame(members, nonmembers[:4], method="ref")], ignore_index=True)
    summary = selection.summarise_runs(selection.conformal_bh_runs(frame, [0.1, 0.3], n_splits=3))
    assert selection.resolution_notes(summary) == [
        "q = 0.1 is below 1/(n_calibration + 1) = 0.2 (4 calibration non-members) for 3 methods "
        "('loss', 'min_k', 'zlib'): nothing can be selected",
        "q = 0.1 is below 1/(n_calibration + 1) = 0.333 (2 calibration non-members) for method 'ref': "
        "nothing can be selected",
        "q = 0.3 is below 1/(n_calibration + 1) = 0.333 (2 calibration non-members) for method 'ref': "
        "nothing can be selected"]


@pytest.mark.parametrize("key,kwargs", [("n_splits", {"n_splits": 0}),
                                        ("calibration_fraction", {"calibration_fraction": 1.0})])
def test_bad_selection_settings_name_their_key(key, kwargs):
    with pytest.raises(ConfigError, match=f"stats.selection.{key}"):
        selection.conformal_bh_runs(_frame([1.0], [0.0, 0.5]), [0.1], **kwargs)


SETTINGS = {"n_boot_small": 10, "n_boot_ci": 100,
            "selection": {"q": 0.1, "qs": [0.1, 0.2, 0.3], "n_splits": 6, "calibration_fraction": 0.5,
                          "figure_methods": ["loss"]}}


def _write_docs(path, frame):
    frame.to_csv(path, index=False)
    return str(path)


def _run_news_metrics(tmp_path, caplog, docs, *, contaminated):
    """run_metrics of (news, m) over ``docs`` into tmp_path's metrics, selection and named tables, its warnings
    in ``caplog``: (the metrics table, {table: path})."""
    from memaudit.stats.workflow import run_metrics

    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    with caplog.at_level("WARNING", logger="memaudit.stats.workflow"):
        table = run_metrics(docs, out["metrics"], out["selection"], out["named"], benchmark="news", model="m",
                            contaminated=contaminated, stats=SETTINGS, seed=1)
    return table, out


def test_a_metrics_job_keeps_every_method_when_one_has_too_few_non_members(tmp_path, caplog):
    """The metrics job of a (benchmark, model) where one probe scored a single non-member writes every
    table: that method's metrics row with nan bh_* columns and no selection rows, one warning naming it."""
    rng = np.random.default_rng(8)
    loss = _frame(rng.normal(3, 1, 40), rng.normal(0, 1, 40))
    docs = [_write_docs(tmp_path / "a.csv", loss),
            _write_docs(tmp_path / "b.csv", _frame(rng.normal(3, 1, 4), [0.0], method="prefix_rougeL"))]
    table, out = _run_news_metrics(tmp_path, caplog, docs, contaminated=True)
    assert table["method"].tolist() == ["loss", "prefix_rougeL"]
    few = table.set_index("method").loc["prefix_rougeL"]
    assert few["bh_q"] == 0.1 and np.isnan(few["bh_fdr"]) and np.isnan(few["bh_power"]) and few["auc"] == 1.0
    assert set(pd.read_csv(out["selection"])["method"]) == set(pd.read_csv(out["named"])["method"]) == {"loss"}
    assert [r.getMessage() for r in caplog.records if "calibration document" in r.getMessage()] == [
        "news/m: 1 non-member(s) and calibration_fraction 0.5 leave no calibration document for method "
        "'prefix_rougeL': no conformal BH selection (no rows in the selection tables, nan bh_* columns)"]


def test_metrics_job_writes_bh_columns_and_selection_tables(tmp_path):
    from memaudit.stats.summary import SUMMARY_COLUMNS
    from memaudit.stats.workflow import build_summary, run_metrics

    rng = np.random.default_rng(8)
    loss = _frame(rng.normal(3, 1, 40), rng.normal(0, 1, 40))
    docs = [_write_docs(tmp_path / "a.csv", loss),
            _write_docs(tmp_path / "b.csv", loss.assign(method="zlib", score=rng.normal(size=80)))]
    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    table = run_metrics(docs, out["metrics"], out["selection"], out["named"], benchmark="news", model="m",
                        contaminated=True, stats=SETTINGS, seed=1)
    assert list(table.columns) == SUMMARY_COLUMNS and table["method"].tolist() == ["loss", "zlib"]
    expected = selection.selection_metrics(loss["score"], loss["label"], loss["doc_id"], q=0.1, n_splits=6, seed=1)
    row = table.set_index("method").loc["loss"]
    assert (row["bh_q"], row["bh_fdr"], row["bh_power"]) == (0.1, expected["bh_fdr"], expected["bh_power"])
    assert row["bh_power"] > 0.2  # 20 calibration documents: the smallest p-value is 1/21
    chosen = pd.read_csv(out["selection"])
    assert chosen[["benchmark", "model"]].drop_duplicates().values.tolist() == [["news", "m"]]
    assert len(chosen) == 2 * 3 and chosen["contaminated"].all()
    # the metrics table's q = 0.1 columns are the selection table's q = 0.1 row
    at = chosen[(chosen.method == "loss") & (chosen.q == 0.1)].iloc[0]
    assert (at["fdr"], at["power"]) == pytest.approx((row["bh_fdr"], row["bh_power"]))
    named = pd.read_csv(out["named"])
    assert len(named) == 2 * 3 * 60 + 2 * 20  # methods x qs x (80 documents less 20 calibration) + calibration
    assert (named["role"] == "test").sum() == 2 * 3 * 60

    base = tmp_path / "base"
    run_metrics([_write_docs(tmp_path / "c.csv", _frame(rng.normal(0, 1, 40), rng.normal(0, 1, 40)))],
                base / "metrics.csv", base / "selection.csv", base / "named.csv", benchmark="news", model="b",
                contaminated=False, stats=SETTINGS, seed=1)
    models = tmp_path / "models"
    for name, base_of in (("m", "b"), ("b", "")):
        (models / name).mkdir(parents=True)
        (models / name / "manifest.json").write_text(json.dumps(
            {"name": name, "family": "f", "n_params": 1, "base": base_of,
             "contaminated_on": ["news"] if base_of else []}))
    summary = tmp_path / "summary"
    build_summary([out["metrics"], base / "metrics.csv"], [models / "m", models / "b"], summary / "metrics.csv",
                  summary / "metrics.md", summary / "models.csv", selection_paths=[out["selection"],
                                                                                  base / "selection.csv"],
                  out_selection=summary / "selection.csv", out_figure=summary / "selection.png",
                  figure_methods=["loss"])
    assert (summary / "selection.png").stat().st_size > 0 and (summary / "selection.svg").exists()
    merged = pd.read_csv(summary / "selection.csv")
    assert len(merged) == 2 * 3 + 1 * 3

    from memaudit.stats.headline import selection_expectations

    checks = selection_expectations(merged, pd.read_csv(summary / "models.csv"))
    assert checks[["model", "q"]].values.tolist() == [["b", 0.1], ["m", 0.1], ["m", 0.2], ["m", 0.3]]
    assert checks["ok"].all()
    # a selection whose FDR exceeds q + 0.02 fails its check
    worse = merged.assign(fdr=np.where(merged.model == "m", merged.q + 0.05, merged.fdr))
    rechecked = selection_expectations(worse, pd.read_csv(summary / "models.csv"))
    assert not rechecked.loc[rechecked.model == "m", "ok"].any()


# ----------------------------------------------------------------------------- independent checks, edge cases

def _direct_pvalues(test, calibration) -> list[float]:
    """p = (1 + #{c >= s}) / (n_cal + 1), counted one test score at a time."""
    return [(1 + sum(c >= s for c in calibration)) / (len(calibration) + 1) for s in test]


@pytest.mark.parametrize("test, calibration", [
    ([0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 2.0, 2.0, 2.0]),  # every test score ties calibration scores
    ([0.0, 1.0, 2.0], [1.0]),  # a single calibration point: p in {1/2, 1}
    ([5.0, 5.0, 5.0], [5.0, 5.0]),  # everything equal: every p is 1
    ([0.0, -0.0], [-0.0, 0.0]),  # signed zeros tie
    ([-1e308, 1e308], [1e308, -1e308, 0.0]),
])
def test_conformal_pvalues_are_the_formula_counted_directly_on_ties(test, calibration):
    assert selection.conformal_pvalues(test, calibration).tolist() == _direct_pvalues(test, calibration)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_score_that_is_no_number_is_an_error_on_either_side_not_a_p_value(bad):
    for test, calibration, side in (([bad, 1.0], [1.0, 2.0], "test"), ([1.0], [2.0, bad], "calibration")):
        with pytest.raises(InputError, match=f"{side} scores: 1 value"):
            selection.conformal_pvalues(test, calibration)
    with pytest.raises(InputError, match="p-values: 1 value"):
        selection.bh_adjusted_pvalues([0.1, bad])


def _exact_step_up(pvalues, q) -> list[bool]:
    """BH's step-up rule in exact rational arithmetic: reject p <= p_(k), k = max{k : p_(k) <= q k / m}."""
    from fractions import Fraction

    p = [Fraction(x).limit_denominator(10**6) for x in pvalues]
    q = Fraction(q).limit_denominator(10**6)
    order, m = sorted(p), len(p)
    passing = [k for k in range(1, m + 1) if order[k - 1] <= q * k / m]
    return [bool(passing) and x <= order[max(passing) - 1] for x in p]


@pytest.mark.parametrize("pvalues, q", [
    ([0.02, 0.2, 1.0], 0.3),  # p_(2) = 0.2 = 0.3 * 2 / 3 exactly; in floating point 0.3 * 2 / 3 < 0.2
    ([0.25, 0.25, 0.25, 0.25], 0.25),  # all equal and at q: all rejected
    ([0.25, 0.25, 0.25, 0.25], 0.2),  # all equal above q: none
    ([1 / 3, 2 / 3, 1.0], 0.95),
    ([0.5], 0.5), ([0.5], 0.4999),
    ([0.01, 0.04, 0.04, 0.04, 0.2, 0.9], 0.1),  # ties at the threshold all go in
])
def test_benjamini_hochberg_is_the_exact_step_up_rule_and_scipys_adjustment(pvalues, q):
    from scipy.stats import false_discovery_control

    assert selection.benjamini_hochberg(pvalues, q).tolist() == _exact_step_up(pvalues, q)
    np.testing.assert_array_equal(selection.bh_adjusted_pvalues(pvalues),
                                  false_discovery_control(pvalues, method="bh"))


def test_conformal_bh_with_ties_is_the_direct_formula_then_the_exact_step_up():
    rng = np.random.default_rng(5)
    for _ in range(200):
        calibration = rng.integers(0, 4, rng.integers(1, 12)).astype(float)
        test = rng.integers(0, 5, rng.integers(1, 15)).astype(float)
        p = selection.conformal_pvalues(test, calibration)
        assert p.tolist() == _direct_pvalues(test, calibration)
        for q in (0.1, 0.3, 0.5):
            assert selection.benjamini_hochberg(p, q).tolist() == _exact_step_up(p, q)


def test_q_of_one_is_refused_though_bh_at_one_would_name_every_document():
    """q = 1 controls nothing: the config's q and qs are in (0, 1) (the schema's bounds, check_q's)."""
    with pytest.raises(ConfigError, match=r"stats.selection.qs: an FDR level must be in \(0, 1\), got 1.0"):
        selection.conformal_bh_runs(_frame([1.0, 2.0], [0.0, 0.5]), [0.5, 1])
    assert selection.rejected_at(selection.bh_adjusted_pvalues([1.0, 0.5, 0.9]), 1.0).all()


def test_a_metrics_job_names_the_file_and_row_of_a_score_that_is_no_number(tmp_path):
    """A nan score in one probe's file stopped the job naming the method only, not the file it came from."""
    from memaudit.stats.workflow import run_metrics

    rng = np.random.default_rng(8)
    good = _write_docs(tmp_path / "a.csv", _frame(rng.normal(3, 1, 10), rng.normal(0, 1, 10)))
    scores = _frame(rng.normal(3, 1, 10), rng.normal(0, 1, 10), method="zlib")
    scores.loc[[3, 7], "score"] = [np.nan, np.inf]
    bad = _write_docs(tmp_path / "b.csv", scores)
    out = [tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")]
    with pytest.raises(InputError) as err:
        run_metrics([good, bad], *out, benchmark="news", model="m", contaminated=True, stats=SETTINGS, seed=1)
    # one line, the house rule's: the file, its line (the header is line 1, so data row 4 is line 5), the column
    assert str(err.value) == (f"{bad}, line 5, column score: nan is not a finite number (doc_id "
                              f"{scores['doc_id'][3]!r}, method 'zlib'; 2 such row(s))")
    assert (tmp_path / "b.csv").read_text().splitlines()[4].split(",")[scores.columns.get_loc("score")] == ""  # line 5 is the nan
    assert not any(p.exists() for p in out)
    # a doc_id quoted over two lines before it: the line the row starts on, not the row count plus one
    scores.loc[1, "doc_id"] = "two\nlines"
    bad = _write_docs(tmp_path / "c.csv", scores)
    with pytest.raises(InputError, match=rf"^{re.escape(str(bad))}, line 6, column score: nan is not a finite"):
        run_metrics([good, bad], *out, benchmark="news", model="m", contaminated=True, stats=SETTINGS, seed=1)


def test_a_method_no_document_was_scored_on_has_no_auc_not_chances(tmp_path, caplog):
    """A probe that measured nothing (a cloze token type no reply answered: a black-box model that never
    writes <word> tags) scored every document 0, and metrics.csv read AUC 0.500 [0.500, 0.500], as if measured
    and found at chance. It leaves the scores blank: the row keeps its counts and has no AUC or other
    statistic (n/a in the headline), no selection rows, one warning naming it; a blank score beside
    numbers of the same method is still an error (above)."""
    from memaudit.stats.headline import auc_cells
    from memaudit.stats.workflow import run_metrics

    rng = np.random.default_rng(8)
    loss = _frame(rng.normal(3, 1, 40), rng.normal(0, 1, 40))
    blank = loss.assign(method="cloze_rank", score=np.nan)
    docs = [_write_docs(tmp_path / "a.csv", loss), _write_docs(tmp_path / "b.csv", blank)]
    table, out = _run_news_metrics(tmp_path, caplog, docs, contaminated=False)
    assert table["method"].tolist() == ["cloze_rank", "loss"]
    row = table.set_index("method").loc["cloze_rank"]
    assert (row["n_member"], row["n_nonmember"]) == (40, 40)
    assert row.drop(["benchmark", "model", "contaminated", "n_member", "n_nonmember"]).isna().all()
    assert auc_cells(table).tolist() == ["n/a", auc_cells(table.iloc[[1]]).iloc[0]]
    assert set(pd.read_csv(out["selection"])["method"]) == set(pd.read_csv(out["named"])["method"]) == {"loss"}
    assert [r.getMessage() for r in caplog.records if "no score" in r.getMessage()] == [
        "news/m: method 'cloze_rank' has no score for any of its 80 documents (its probe measured nothing "
        "there): no AUC, no statistic, no selection"]
    # every method blank: the tables are written, with no statistic and no selection row
    only = run_metrics([docs[1]], tmp_path / "m2.csv", tmp_path / "s2.csv", tmp_path / "n2.csv", benchmark="news",
                       model="m", contaminated=False, stats=SETTINGS, seed=1)
    assert only["method"].tolist() == ["cloze_rank"] and np.isnan(only["auc"].iloc[0])
    assert pd.read_csv(tmp_path / "s2.csv").empty and pd.read_csv(tmp_path / "n2.csv").empty


def test_bh_columns_at_a_q_no_calibration_set_can_resolve_are_empty_not_a_measured_zero():
    """8 non-members calibrate 4: every p-value is at least 1/5, so BH at q = 0.1 names nothing whatever
    the scores. metrics.csv's bh_fdr and bh_power said 0.0 and 0.0 there, read as a detector with no power;
    they are empty (as where no calibration set can be drawn), and resolvable qs keep their numbers."""
    rng = np.random.default_rng(5)
    frame = _frame(rng.normal(5, 1, 10), rng.normal(0, 1, 8))
    at = {q: selection.selection_metrics(frame["score"], frame["label"], frame["doc_id"], q=q, n_splits=3)
          for q in (0.1, 0.2, 0.3)}
    assert at[0.1]["bh_q"] == 0.1 and math.isnan(at[0.1]["bh_fdr"]) and math.isnan(at[0.1]["bh_power"])
    runs = selection.summarise_runs(selection.conformal_bh_runs(frame, [0.2, 0.3], n_splits=3)).set_index("q")
    for q in (0.2, 0.3):  # from q = 1/(4 + 1) on BH can name: the numbers of the selection table
        assert (at[q]["bh_fdr"], at[q]["bh_power"]) == (runs.loc[q, "fdr"], runs.loc[q, "power"])
    assert (at[0.2]["bh_power"], at[0.3]["bh_power"]) == (0.0, 1.0)


def test_a_metrics_job_says_when_the_bh_columns_q_is_unresolvable_though_not_in_the_grid(tmp_path, caplog):
    """stats.selection.q need not be one of stats.selection.qs; below 1/(n_calibration + 1) it now gets its
    log line (the grid's qs had theirs, it had none), which says the bh_* columns are empty, and a q of
    the grid that is the bh_* columns' q is named once."""
    from memaudit.stats.workflow import run_metrics

    rng = np.random.default_rng(8)
    docs = [_write_docs(tmp_path / "a.csv", _frame(rng.normal(3, 1, 30), rng.normal(0, 1, 30)))]
    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    for q, qs in ((0.05, [0.1, 0.2]), (0.05, [0.05, 0.1])):
        caplog.clear()
        stats = {**SETTINGS, "selection": {**SETTINGS["selection"], "q": q, "qs": qs}}
        with caplog.at_level("WARNING", logger="memaudit.stats.workflow"):
            table = run_metrics(docs, out["metrics"], out["selection"], out["named"], benchmark="news", model="m",
                                contaminated=True, stats=stats, seed=1)
        assert table["bh_fdr"].isna().all() and table["bh_power"].isna().all()
        assert [r.getMessage() for r in caplog.records] == [
            "news/m: q = 0.05 is below 1/(n_calibration + 1) = 0.0625 (15 calibration non-members) for method "
            "'loss': nothing can be selected (stats.selection.q: bh_fdr and bh_power are empty)"]


def test_document_ids_that_look_like_numbers_stay_text_from_loader_to_named_documents(tmp_path):
    """A published BookTection set whose IDs read as numbers ("007", "12", "1.0") or as a missing value
    ("NA") keeps them as written through the scores table, the metrics job's named documents and the
    headline's book ranking: pandas guessed 7, 12 and 1.0 (and NaN), so ``*_named.csv`` renamed the
    documents and the join with ``documents.jsonl`` (ids as text) matched none of them."""
    import csv

    from memaudit.datasets.published import published_benchmark
    from memaudit.io import write_csv, write_jsonl
    from memaudit.probes.job import document_scores
    from memaudit.stats.headline import book_ranking
    from memaudit.stats.workflow import read_document_scores, run_metrics

    ids = ["007", "12", "1.0", "NA"]
    rows = [{"Example_A": f"Verbatim {i} of {d}.", "Example_B": "One.", "Example_C": "Two.", "Example_D": "Three.",
             "Answer": "A", "ID": d, "Label": n % 2} for n, d in enumerate(ids) for i in range(2)]
    source = tmp_path / "booktection.csv"
    with source.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    docs, _ = published_benchmark("bt", {"format": "booktection", "path": str(source)})
    assert [d.doc_id for d in docs] == ["007", "1.0", "12", "NA"]
    write_jsonl(tmp_path / "datasets" / "bt" / "documents.jsonl", (d.to_dict() for d in docs))
    scores = tmp_path / "scores" / "bt" / "m" / "loss_documents.csv"
    scores.parent.mkdir(parents=True)
    write_csv(scores, document_scores(pd.DataFrame({"doc_id": [d.doc_id for d in docs],
                                                    "label": [d.meta["label"] for d in docs], "method": "loss",
                                                    "score": [5.0, 1.0, 4.0, 2.0]}), model="m", dtype="api"))
    assert read_document_scores([str(scores)])["doc_id"].tolist() == ["007", "1.0", "12", "NA"]

    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    run_metrics([str(scores)], *out.values(), benchmark="bt", model="m", contaminated=True,
                stats={**SETTINGS, "selection": {**SETTINGS["selection"], "calibration_fraction": 0.5}}, seed=1,
                benchmark_documents=tmp_path / "datasets" / "bt" / "documents.jsonl", per_book=True)
    from memaudit.io import read_csv

    named = read_csv(out["named"])
    # the members and one of the two non-members are tested, the other calibrates (and says so, with its draw)
    test = named[named["role"] == "test"]
    assert {"12", "NA"} < set(test["doc_id"]) < set(ids) and test["doc_id"].nunique() == 3
    cal = named[named["role"] == "calibration"]
    assert cal[["doc_id", "split", "seed", "calibration_fraction"]].to_dict("records") == [
        {"doc_id": (set(ids) - set(test["doc_id"])).pop(), "split": 0, "seed": 1, "calibration_fraction": 0.5}]
    assert cal["q"].isna().all() and cal["pvalue"].isna().all() and named["selected"].dtype == bool
    assert book_ranking(tmp_path, "bt", "m", "loss") == "007, 12*, NA*, 1.0"


def test_the_models_table_names_the_api_models_the_run_asked(tmp_path):
    """models.csv listed the prepared local models only: an audit of an API model had no table saying which
    model id (a dated snapshot), revision and server its scores came from (the config's name alone is in
    metrics.csv). Each API model has its row; it is no null control (only a local base model is, as before)."""
    from memaudit.stats.headline import base_models
    from memaudit.stats.workflow import api_model_rows, build_summary, run_metrics

    rng = np.random.default_rng(8)
    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    run_metrics([_write_docs(tmp_path / "a.csv", _frame(rng.normal(3, 1, 20), rng.normal(0, 1, 20)))],
                out["metrics"], out["selection"], out["named"], benchmark="news", model="suspect",
                contaminated=False, stats=SETTINGS, seed=1)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "manifest.json").write_text(json.dumps(
        {"name": "ref", "family": "smollm2", "n_params": 134515008, "base": None, "contaminated_on": [],
         "backend": "hf"}))
    config = {"models": {
        "ref": {"source": {"builtin": "smollm2-135m-instruct"}},
        "suspect": {"backend": "openai", "api": {"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": "K"}},
        "served": {"backend": "openai", "family": "llama",
                   "api": {"model_id": "llama-3", "revision": "adapter-2", "base_url": "http://127.0.0.1:8000/v1"}}}}
    summary = tmp_path / "summary"
    build_summary([out["metrics"]], [tmp_path / "ref"], summary / "metrics.csv", summary / "metrics.md",
                  summary / "models.csv", api_models=api_model_rows(config))
    assert (summary / "models.csv").read_text().splitlines() == [
        "model,family,n_params,base,contaminated_on,source_sha256,backend,model_id,revision,base_url",
        "ref,smollm2,134515008,,,,hf,,,",
        "served,llama,,,,,openai,llama-3,adapter-2,http://127.0.0.1:8000/v1",
        "suspect,suspect,,,,,openai,gpt-4o-mini-2024-07-18,,"]
    assert base_models(pd.read_csv(summary / "models.csv")) == {"ref"}


def test_the_models_table_fills_the_fields_a_row_lacks_without_a_pandas_deprecation(tmp_path):
    """Local rows have no model_id, revision or base_url, so those columns were all-NaN float64 and
    ``fillna("")`` filled them with a string: a Pandas4Warning (raising in pandas 4). Each row now carries a
    blank for every field it lacks, and the table is the same."""
    import warnings

    from memaudit.stats.workflow import models_table

    (tmp_path / "ft").mkdir()
    (tmp_path / "ft" / "manifest.json").write_text(json.dumps(
        {"name": "ft", "family": "tiny-gpt2", "n_params": 10, "base": "base", "contaminated_on": ["novels"]}))
    api = [{"model": "gpt", "family": "gpt", "backend": "openai", "model_id": "gpt-4o", "revision": "",
            "base_url": ""}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        local = models_table([tmp_path / "ft"])
        both = models_table([tmp_path / "ft"], api)
    assert local.to_dict("records") == [
        {"model": "ft", "family": "tiny-gpt2", "n_params": 10, "base": "base", "contaminated_on": "novels",
         "source_sha256": "", "backend": "hf", "model_id": "", "revision": "", "base_url": ""}]
    assert both.values.tolist() == [["ft", "tiny-gpt2", 10, "base", "novels", "", "hf", "", "", ""],
                                    ["gpt", "gpt", "", "", "", "", "openai", "gpt-4o", "", ""]]


def test_the_models_table_takes_each_models_family_from_the_config(tmp_path):
    """A local model's family is the config's (the summary's and the AUC figures' param), not its manifest's:
    renaming a family reruns those tables alone, not prepare_model, so a manifest prepared before the rename
    still holds the old name (and one prepared since holds none)."""
    from memaudit.stats.workflow import build_summary, models_table, run_metrics

    for name, manifest in (("ft", {"family": "tiny-gpt2", "base": "base", "contaminated_on": ["novels"]}),
                           ("base", {"contaminated_on": []})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"name": name, "n_params": 10, **manifest}))
    dirs = [tmp_path / "ft", tmp_path / "base"]
    families = {"ft": "tiny-gpt2-tuned", "base": "tiny-gpt2"}
    assert models_table(dirs, families=families)[["model", "family"]].values.tolist() == [
        ["base", "tiny-gpt2"], ["ft", "tiny-gpt2-tuned"]]
    rng = np.random.default_rng(8)
    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    run_metrics([_write_docs(tmp_path / "a.csv", _frame(rng.normal(3, 1, 20), rng.normal(0, 1, 20)))],
                out["metrics"], out["selection"], out["named"], benchmark="novels", model="ft",
                contaminated=True, stats=SETTINGS, seed=1)
    summary = tmp_path / "summary"
    build_summary([out["metrics"]], dirs, summary / "metrics.csv", summary / "metrics.md", summary / "models.csv",
                  families=families)
    assert (summary / "models.csv").read_text().splitlines()[1:] == [
        "base,tiny-gpt2,10,,,,hf,,,", "ft,tiny-gpt2-tuned,10,base,novels,,hf,,,"]


def test_a_run_whose_selection_tables_are_all_empty_gets_a_note_figure_not_a_failed_summary(tmp_path):
    """A labelled benchmark with one non-member leaves no calibration document: run_metrics warns and writes
    empty selection tables. The summary job then stopped the whole run ("InputError: selection table: no rows
    to plot"); it writes the empty table and a figure saying why, as for a run with no labelled benchmark."""
    from memaudit.stats.workflow import build_summary, run_metrics

    out = {name: tmp_path / f"{name}.csv" for name in ("metrics", "selection", "named")}
    run_metrics([_write_docs(tmp_path / "a.csv", _frame([2.0, 3.0], [0.5]))], out["metrics"], out["selection"],
                out["named"], benchmark="booktection", model="m", contaminated=False, stats=SETTINGS, seed=1)
    assert pd.read_csv(out["selection"]).empty
    summary = tmp_path / "summary"
    build_summary([out["metrics"]], [], summary / "metrics.csv", summary / "metrics.md", summary / "models.csv",
                  selection_paths=[out["selection"]], out_selection=summary / "selection.csv",
                  out_figure=summary / "selection_fdr_power.png", figure_methods=["loss"])
    assert pd.read_csv(summary / "selection.csv").empty
    assert list(pd.read_csv(summary / "selection.csv").columns) == list(pd.read_csv(out["selection"]).columns)
    assert (summary / "selection_fdr_power.png").read_bytes().startswith(b"\x89PNG")
