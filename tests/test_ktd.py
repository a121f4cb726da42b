"""KTD: knockoff statistics, draws from the paraphrase pool, knockoff+ over draws, symmetry, the job."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from memaudit.errors import ConfigError, InputError
from memaudit.probes.ktd import plan, statistics
from memaudit.probes.ktd.runner import STATISTICS, ktd_tables
from memaudit.stats.selection import knockoff_plus_select


def test_knockoff_statistic_is_eq8():
    w = statistics.knockoff_statistic([1.0, -2.0], [[0.0, 1.0, 2.0], [-1.0, -1.0, -4.0]])
    np.testing.assert_allclose(w, [1.0 - 1.0, -2.0 - (-2.0)])
    # m = 1 is vanilla knockoff inference: Z - Z~
    np.testing.assert_allclose(statistics.knockoff_statistic([3.0], [[1.0]]), [2.0])
    with pytest.raises(InputError, match="shape"):
        statistics.knockoff_statistic([1.0, 2.0], [[1.0]])


def test_draws_are_distinct_knockoffs_of_each_pool_and_seeded():
    rng = np.random.default_rng(0)
    picks = statistics.draw_knockoffs([3, 5, 2], 2, rng)
    assert [p.size for p in picks] == [2, 2, 2]
    assert all(len(set(p)) == 2 and p.max() < size for p, size in zip(picks, [3, 5, 2]))
    again = statistics.draw_knockoffs([3, 5, 2], 2, np.random.default_rng(0))
    assert all((a == b).all() for a, b in zip(picks, again))
    assert [p.tolist() for p in statistics.draw_knockoffs([3], 3, rng)] == [[0, 1, 2]]
    with pytest.raises(InputError, match="text 1: 2 knockoff"):
        statistics.draw_knockoffs([3, 2], 3, rng)
    with pytest.raises(ConfigError, match="probes.ktd.m"):
        statistics.draw_knockoffs([3], 0, rng)


def _items_and_scores(n_docs=40, passages=3, pool=3, member_gap=1.0, seed=0):
    """Pool items laid out as the runner reads them, and Z for every text: members' passages beat
    their knockoffs by ``member_gap``; a non-member's passage and knockoffs are exchangeable."""
    rng = np.random.default_rng(seed)
    items, z = [], {name: [] for name in STATISTICS}
    for d in range(n_docs):
        label = int(d % 2 == 0)
        for k in range(passages):
            items.append({"item_id": f"doc{d}#p{k}", "doc_id": f"doc{d}", "label": label, "answer": 0,
                          "options": [f"passage {d} {k}"] + [f"knockoff {d} {k} {i}" for i in range(pool)]})
            base = rng.normal(size=1 + pool)
            base[0] += member_gap * label
            for name in STATISTICS:
                z[name].extend(base)
    return items, {name: np.asarray(v) for name, v in z.items()}


def test_ktd_tables_separate_members_and_keep_nonmembers_symmetric():
    items, z = _items_and_scores(member_gap=3.0)
    tables = ktd_tables(items, z, ms=[1, 3], m=3, n_draws=4, qs=[0.1, 0.2], seed=5)
    docs = tables["documents"]
    assert sorted(docs["method"].unique()) == ["ktd_w_gradnorm", "ktd_w_loss", "ktd_w_min_k", "ktd_z_gradnorm"]
    from memaudit.probes.ktd.plan import method_names  # what the config check lets figures name

    assert sorted(method_names({}, [("b", "m", "")])) == sorted(docs["method"].unique())
    assert len(docs) == 4 * 40 and set(docs.loc[docs.doc_id == "doc0", "label"]) == {1}
    # a document's score is the mean of its passages' W (first draw, m = 3: every knockoff)
    w = tables["w"]
    first = w[(w.statistic == "loss") & (w.m == 3) & (w.draw == 0)]
    expected = first.groupby("doc_id")["w"].mean()
    got = docs[docs.method == "ktd_w_loss"].set_index("doc_id")["score"]
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index(), check_names=False)
    # m = pool: every draw uses the whole pool, so the W of draws agree
    assert w[(w.m == 3)].groupby(["statistic", "item_id"])["w"].nunique().max() == 1
    sel = tables["selection"].query("measured_on == 'all'").set_index(["statistic", "m", "q"])
    assert sel.loc[("gradnorm", 3, 0.2), "power"] > 0.8 and sel.loc[("gradnorm", 3, 0.2), "fdr"] <= 0.2
    assert sel.loc[("gradnorm", 3, 0.2), "n_draws"] == 4
    # ... so they are one distinct draw, with no standard error; m = 1 draws differ
    assert sel.loc[("gradnorm", 3, 0.2), "n_distinct_draws"] == 1
    assert np.isnan(sel.loc[("gradnorm", 3, 0.2), "fdr_se"]) and np.isnan(sel.loc[("gradnorm", 3, 0.2), "power_se"])
    assert sel.loc[("gradnorm", 1, 0.2), "n_distinct_draws"] == 4 and sel.loc[("gradnorm", 1, 0.2), "fdr_se"] >= 0
    sym = tables["symmetry"].set_index(["statistic", "m"])
    assert sym.loc[("gradnorm", 3), "n_nonmember"] == 60 and sym.loc[("gradnorm", 3), "wilcoxon_pvalue"] > 0.01
    assert sym.loc[("gradnorm", 3), "member_mean_w"] > 2


def test_validation_threshold_names_the_most_members_at_fdp_at_most_q():
    scores = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0])
    truth = np.array([1, 1, 0, 1, 1, 0, 0, 1])
    # cuts: t=8 -> 2 named, 0 false; t=6 -> 4, 1 false (0.25); t=5 -> 5, 1 false (0.2); t=2 -> 8, 3 false
    assert statistics.validation_threshold(scores, truth, 0.2) == 5.0
    assert statistics.validation_threshold(scores, truth, 0.1) == 8.0
    assert statistics.validation_threshold(scores, truth, 0.4) == 2.0
    assert statistics.validation_threshold(scores, np.zeros(8, dtype=int), 0.5) == np.inf  # nothing to find
    # FDP exactly q is allowed, though 0.7 * 90 is 62.99999999999999 in floating point
    # (the last member scores lowest, so only the cut naming all 90 texts names all 27 members)
    edge = np.r_[np.ones(26, int), np.zeros(63, int), 1]
    assert statistics.validation_threshold(np.arange(90.0, 0.0, -1.0), edge, 0.7) == 1.0
    # a tie is cut whole: t=1 names both texts scored 1, one of them a non-member
    assert statistics.validation_threshold(np.array([2.0, 1.0, 1.0]), np.array([1, 1, 0]), 0.2) == 2.0


def test_validation_baselines_follow_the_table_2_protocol_beside_ktd():
    items, z = _items_and_scores(member_gap=3.0, seed=4)
    tables = ktd_tables(items, z, ms=[3], m=3, n_draws=3, qs=[0.1, 0.3], seed=2, n_validation=30)
    sel = tables["selection"]
    base = sel[sel.statistic.str.startswith("validation_")].set_index(["statistic", "q"])
    assert set(base.index.get_level_values(0)) == {"validation_loss", "validation_min_k", "validation_zlib"}
    assert (base["m"] == 0).all() and (base["n_draws"] == 3).all() and (base["n_distinct_draws"] == 3).all()
    assert (base["n_texts"] == 120 - 30).all()  # the rest of the 120 passages is measured
    # the passages' own Z separates them by 3 standard deviations: the threshold carries over (power
    # 0.80 over these three draws of 5 member and 5 non-member documents)
    assert base.loc[("validation_loss", 0.3), "power"] > 0.75 and base.loc[("validation_loss", 0.3), "fdr"] < 0.3
    # by hand for one draw: the first validation draw's threshold applied to the rest
    ids = [it["item_id"] for it in items]
    starts = np.arange(0, 4 * len(items), 4)
    loss = z["loss"][starts]
    labels = np.array([it["label"] for it in items])
    val, test = statistics.validation_split(labels, 30, [2, 0, 7])
    assert sorted([*val, *test]) == list(range(len(items))) and len(val) == 30
    # stratified: each part has the benchmark's member share (60 of 120 here)
    assert labels[val].sum() == 15 and labels[test].sum() == 45
    assert not np.array_equal(val, statistics.validation_split(labels, 30, [2, 1, 7])[0])  # draws differ
    tau = statistics.validation_threshold(loss[val], labels[val], 0.1)
    named = loss[test] >= tau
    runs = statistics.validation_runs({"loss": pd.Series(loss, index=ids)}, pd.Series(labels, index=ids), [0.1],
                                      n_validation=30, n_draws=1, seed=2)
    assert runs.loc[0, "n_selected"] == named.sum() and runs.loc[0, "tau"] == tau
    assert runs.loc[0, "fdp"] == pytest.approx((named & (labels[test] == 0)).sum() / max(named.sum(), 1))
    # at most half the texts validate; too few texts to split is an error naming the cause
    capped = statistics.validation_runs({"loss": pd.Series(loss[:10], index=ids[:10])},
                                        pd.Series(labels[:10], index=ids[:10]), [0.2], n_validation=100,
                                        n_draws=1, seed=0)
    assert capped.loc[0, "n_texts"] == 5
    with pytest.raises(InputError, match="3 texts cannot be split"):
        statistics.validation_runs({"loss": pd.Series(loss[:3], index=ids[:3])}, pd.Series(labels[:3], index=ids[:3]),
                                   [0.2], n_validation=100, n_draws=1, seed=0)


def test_ktd_is_also_measured_on_the_baselines_test_passages():
    """Table 2 compares KTD with the baselines at the same q; the baselines are measured on the passages
    their validation draw left out, KTD's own rows on every passage. So KTD's rows are also given on
    exactly those test passages (``measured_on`` "test"; knockoff+ over them, knockoff draw d with
    validation draw d), and every row says which passages it was measured on."""
    items, z = _items_and_scores(member_gap=1.0, seed=4)
    tables = ktd_tables(items, z, ms=[1, 3], m=3, n_draws=3, qs=[0.1, 0.3], seed=2, n_validation=30)
    sel = tables["selection"]
    assert set(sel.loc[sel.statistic.str.startswith("validation_"), "measured_on"]) == {"test"}
    knock = sel[~sel.statistic.str.startswith("validation_")].set_index(["statistic", "m", "measured_on", "q"])
    assert len(knock) == 3 * 2 * 2 * 2  # statistics x ms x (all, test) x qs
    assert (knock.xs("all", level="measured_on")["n_texts"] == 120).all()
    assert (knock.xs("test", level="measured_on")["n_texts"] == 90).all()  # the baselines' 90 test passages
    assert (knock.xs("test", level="measured_on")["n_distinct_draws"] == 3).all()  # the test parts differ
    # by hand: knockoff+ over validation draw d's test passages with knockoff draw d's W
    labels = np.array([it["label"] for it in items])
    docs = np.array([it["doc_id"] for it in items])
    w = tables["w"]
    fdps, powers, named = [], [], []
    for d in range(3):
        _, test = statistics.validation_split(labels, 30, [2, d, 7], groups=docs)
        part = w[(w.statistic == "gradnorm") & (w.m == 3) & (w.draw == d)].set_index("item_id")
        values, truth = part["w"].to_numpy()[test], part["label"].to_numpy()[test]
        chosen = knockoff_plus_select(values, 0.3)
        named.append(chosen.sum())
        fdps.append(((truth == 0) & chosen).sum() / max(chosen.sum(), 1))
        powers.append(((truth == 1) & chosen).sum() / (truth == 1).sum())
    row = knock.loc[("gradnorm", 3, "test", 0.3)]
    assert row["mean_selected"] == np.mean(named) and row["fdr"] == pytest.approx(np.mean(fdps))
    assert row["power"] == pytest.approx(np.mean(powers))
    # the same split as the loss baseline's (whose rows hold 90 test passages each draw)
    assert sel.query("statistic == 'validation_loss' and q == 0.3").iloc[0]["n_texts"] == 90


def test_validation_part_holds_whole_documents():
    """Passages of one document share its words, names and style: with a document on both sides of the
    split, the threshold is tuned on documents it is then measured on. The validation part holds whole
    documents (about n_validation passages, stratified by the documents' labels)."""
    items, z = _items_and_scores(member_gap=1.0, seed=4)  # 40 documents of 3 passages, every other a member
    labels = np.array([it["label"] for it in items])
    docs = np.array([it["doc_id"] for it in items])
    for draw in range(5):
        val, test = statistics.validation_split(labels, 30, [2, draw, 7], groups=docs)
        assert not set(docs[val]) & set(docs[test])
        assert sorted([*val, *test]) == list(range(120)) and len(val) == 30  # 10 documents of 3 passages
        assert labels[val].sum() == 15  # 5 member documents of 10
    # the job's baseline rows are that split's: the first draw's threshold applied to the rest, by hand
    tables = ktd_tables(items, z, ms=[3], m=3, n_draws=1, qs=[0.3], seed=2, n_validation=30)
    row = tables["selection"].query("statistic == 'validation_loss'").iloc[0]
    loss = z["loss"][np.arange(0, 4 * len(items), 4)]
    val, test = statistics.validation_split(labels, 30, [2, 0, 7], groups=docs)
    named = loss[test] >= statistics.validation_threshold(loss[val], labels[val], 0.3)
    assert row["n_texts"] == 90 and row["mean_selected"] == named.sum()
    assert row["fdr"] == pytest.approx((named & (labels[test] == 0)).sum() / max(named.sum(), 1))
    assert row["power"] == pytest.approx((named & (labels[test] == 1)).sum() / 45)
    # documents of unequal length: the test part's size varies between draws; the table gives its mean
    ids = [f"t{i}" for i in range(12)]
    sizes = pd.Series([f"d{i}" for i in (0, 0, 0, 0, 1, 2, 3, 3, 4, 5, 6, 7)], index=ids)
    runs = statistics.validation_runs({"loss": pd.Series(np.linspace(1, 0, 12), index=ids)},
                                      pd.Series([1, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0], index=ids), [0.5],
                                      n_validation=6, n_draws=6, seed=0, documents=sizes)
    assert runs["n_texts"].nunique() > 1
    assert statistics.summarise_selection(runs).loc[0, "n_texts"] == round(runs["n_texts"].mean())
    with pytest.raises(InputError, match="document 'd0' holds members and non-members"):
        statistics.validation_split(np.array([1, 0, 0, 1]), 2, [0], groups=np.array(["d0", "d0", "d1", "d2"]))


def test_validation_draws_of_a_small_benchmark_keep_members_on_both_sides():
    """Two members among ten texts, half of them validating: a plain random draw leaves the test part
    without a member in about 2 draws of 9 (power undefined); the stratified draw puts one on each side
    every time."""
    ids = [f"t{i}" for i in range(10)]
    labels = pd.Series([1, 1, 0, 0, 0, 0, 0, 0, 0, 0], index=ids)
    scores = {"loss": pd.Series(np.linspace(1.0, 0.0, 10), index=ids)}
    runs = statistics.validation_runs(scores, labels, [0.5], n_validation=5, n_draws=20, seed=0)
    assert runs["power"].notna().all() and (runs["n_texts"] == 5).all()
    for draw in range(20):
        val, test = statistics.validation_split(labels.to_numpy(), 5, [0, draw, 7])
        assert labels.to_numpy()[val].sum() == 1 and labels.to_numpy()[test].sum() == 1
    plain = [np.random.default_rng([0, d, 7]).permutation(10)[5:] for d in range(20)]
    assert sum(not (set(p) & {0, 1}) for p in plain) > 0  # what the plain draw did


def test_a_validation_draw_without_test_members_has_no_power():
    """A validation baseline's test part can hold no member (every member fell in the validation set,
    which a class of one text allows even stratified): its power is nan (it was 0.0, which read as
    "found none"), and the mean over draws does not skip it."""
    ids = [f"t{i}" for i in range(10)]
    perm = np.random.default_rng([0, 0, 7]).permutation(10)
    labels = pd.Series(0, index=ids)
    labels.iloc[perm[0]] = 1  # the one member is in draw 0's validation set (perm[:5])
    scores = {"loss": pd.Series(np.linspace(0.0, 1.0, 10), index=ids)}
    runs = statistics.validation_runs(scores, labels, [0.2, 0.5], n_validation=5, n_draws=2, seed=0)
    first = runs[runs["draw"] == 0]
    assert first["power"].isna().all() and (first["n_selected"] == 0).all() and (first["fdp"] == 0.0).all()
    table = statistics.summarise_selection(runs).set_index("q")
    assert table["power"].isna().all() and table["power_se"].isna().all()
    assert (table["fdr"] == runs.groupby("q")["fdp"].mean()).all()


def test_ktd_means_over_draws_do_not_skip_a_missing_power():
    runs = pd.DataFrame({"statistic": "gradnorm", "m": 1, "measured_on": "all", "draw": [0, 1], "q": 0.1,
                         "n_texts": 10, "tau": 1.0,
                         "n_selected": [2, 4], "n_false": 0, "fdp": [0.0, 0.5], "power": [0.5, np.nan]})
    out = statistics.summarise_selection(runs).iloc[0]
    assert np.isnan(out["power"]) and np.isnan(out["power_se"])
    assert out["fdr"] == 0.25 and out["fdr_se"] == pytest.approx(np.std([0.0, 0.5], ddof=1) / np.sqrt(2))
    assert out["mean_selected"] == 3.0


def test_m_and_size_figure_marks_a_missing_power(tmp_path, monkeypatch):
    """A power that could not be computed (no member among the texts) is a hollow 'n/a' marker at the
    bottom of the power panels, not a gap in the line."""
    from memaudit.figures import plots
    from memaudit.probes.ktd.summary import plot_m_and_size

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    frame = pd.DataFrame({"benchmark": "b", "model": "tiny", "n_params": 1e6, "contaminated": False,
                          "statistic": "gradnorm", "m": [1, 2], "q": 0.1, "fdr": [0.1, 0.0], "fdr_se": 0.01,
                          "power": [0.4, np.nan], "power_se": [0.05, np.nan]})
    plot_m_and_size(frame, str(tmp_path / "m_and_size"), m=2)
    axes = drawn[0].axes
    for ax, x in ((axes[1], 2.0), (axes[3], 1e6)):  # power against m, power against size
        hollow = [line for line in ax.get_lines() if line.get_label() == "_missing"]
        assert [(list(line.get_xdata()), list(line.get_ydata())) for line in hollow] == [([x], [plots.MISSING_Y])]
        assert [t.xy[0] for t in ax.texts if t.get_text() == "n/a"] == [x]
        assert ax.get_legend().get_texts()[-1].get_text() == "n/a (hollow, at the bottom): no member among the texts"
    assert not [line for ax in (axes[0], axes[2]) for line in ax.get_lines() if line.get_label() == "_missing"]


def test_m_and_size_figure_draws_a_line_per_family_and_fine_tuning(tmp_path, monkeypatch):
    """The size panels drew every model not fine-tuned on the benchmark's members as one line: two families'
    bases, and a fine-tune on another benchmark at its base's size (a vertical stroke read as a size trend).
    A line now joins one family's models fine-tuned on the same members; models_table's family, ktd.csv's
    contaminated_on (build_summary's ``contaminated``) decide it."""
    from memaudit.figures import plots
    from memaudit.probes.ktd.summary import plot_m_and_size

    drawn = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, prefix: drawn.append(fig) or [])
    rows = [("p-70m", "pythia", 7e7, "", 0.1), ("p-160m", "pythia", 1.6e8, "", 0.2),
            ("p-160m-news", "pythia", 1.6e8, "news", 0.3), ("p-70m-ft", "pythia", 7e7, "novels", 0.8),
            ("p-160m-ft", "pythia", 1.6e8, "novels", 0.9), ("o-125m", "opt", 1.25e8, "", 0.15)]
    frame = pd.DataFrame([{"benchmark": "novels", "model": model, "family": family, "n_params": n,
                           "tuning": tuning, "contaminated": tuning == "novels", "statistic": "gradnorm", "m": 2,
                           "q": 0.1, "fdr": 0.1, "fdr_se": 0.01, "power": power, "power_se": 0.02}
                          for model, family, n, tuning, power in rows])
    plot_m_and_size(frame, str(tmp_path / "m_and_size"), m=2)
    power_by_size = drawn[0].axes[3]
    lines = {bars.get_label(): (list(bars.lines[0].get_xdata()), list(bars.lines[0].get_ydata()),
                                bars.lines[0].get_linestyle()) for bars in power_by_size.containers}
    assert lines == {
        "pythia: fine-tuned on members": ([7e7, 1.6e8], [0.8, 0.9], "-"),
        "opt: not fine-tuned": ([1.25e8], [0.15], "--"),
        "pythia: fine-tuned on news, not this benchmark": ([1.6e8], [0.3], "-."),
        "pythia: not fine-tuned": ([7e7, 1.6e8], [0.1, 0.2], "--"),
    }


def test_members_for_ratio_rounds_floors_at_one_and_caps():
    assert statistics.members_for_ratio(0.1, 60, 60) == 6
    assert statistics.members_for_ratio(0.05, 60, 60) == 3
    assert statistics.members_for_ratio(0.01, 60, 60) == 1  # 0.6 rounds to 1
    assert statistics.members_for_ratio(0.001, 60, 60) == 1  # never a test set without members
    assert statistics.members_for_ratio(2.0, 60, 40) == 40  # no more members than there are
    with pytest.raises(ConfigError, match="member_ratios: each ratio must be > 0, got 0"):
        statistics.members_for_ratio(0, 60, 60)


def test_imbalanced_test_sets_follow_appendix_b():
    """All non-members, a seeded sample of members per (draw, ratio), knockoff+ on that set: by hand
    for one draw; and with 3 members knockoff+ at q = 0.1 names nothing or at least 1/q = 10 texts,
    so at least 7 non-members."""
    items, z = _items_and_scores(member_gap=3.0, seed=7)
    tables = ktd_tables(items, z, ms=[1, 3], m=3, n_draws=2, qs=[0.1, 0.5], seed=3, member_ratios=[1.0, 0.1, 0.05])
    imb = tables["imbalance"]
    assert set(imb["m"]) == {3} and set(imb["statistic"]) == set(STATISTICS)  # only the configured m
    assert len(imb) == 3 * 3 * 2 and (imb["n_draws"] == 2).all() and (imb["n_nonmembers"] == 60).all()
    by = imb.set_index(["statistic", "member_ratio", "q"])
    assert by.loc[("gradnorm", 1.0, 0.1), "n_members"] == 60 and by.loc[("gradnorm", 0.1, 0.1), "n_members"] == 6
    assert by.loc[("gradnorm", 0.05, 0.1), "n_members"] == 3
    # balanced, knockoff+ finds the members at FDR near q
    assert by.loc[("gradnorm", 1.0, 0.1), "power"] > 0.8 and by.loc[("gradnorm", 1.0, 0.1), "fdr"] < 0.2
    # draw 1, ratio 0.1 by hand: the same member sample for every statistic
    w = tables["w"]
    labels = pd.Series({it["item_id"]: it["label"] for it in items})
    ids = [it["item_id"] for it in items]
    truth = labels.loc[ids].to_numpy()
    members, nonmembers = np.flatnonzero(truth == 1), np.flatnonzero(truth == 0)
    keep = np.sort(np.r_[np.random.default_rng([3, 1, 1, 13]).choice(members, size=6, replace=False), nonmembers])
    draws = {(name, 3): [w[(w.statistic == name) & (w.m == 3) & (w.draw == d)].set_index("item_id")["w"].loc[ids]
                         for d in range(2)] for name in STATISTICS}
    runs = statistics.imbalanced_runs(draws, labels, [0.1, 0.5], ratios=[1.0, 0.1, 0.05], m=3, seed=3)
    few = runs[(runs.member_ratio == 0.05) & (runs.q == 0.1)]
    assert len(few) == 3 * 2 and (few["n_members"] == 3).all()
    assert ((few["n_selected"] == 0) | ((few["n_selected"] >= 10) & (few["n_false"] >= few["n_selected"] - 3))).all()
    assert (few["n_selected"] > 0).any()  # this seed's non-member W has a long right tail: the FDP leaks
    runs = runs[runs.q == 0.5]
    for name in STATISTICS:
        chosen = knockoff_plus_select(draws[(name, 3)][1].to_numpy()[keep], 0.5)
        row = runs[(runs.statistic == name) & (runs.draw == 1) & (runs.member_ratio == 0.1)].iloc[0]
        assert row["n_selected"] == chosen.sum() and row["n_false"] == (chosen & (truth[keep] == 0)).sum()
        assert row["power"] == pytest.approx((chosen & (truth[keep] == 1)).sum() / 6)
    with pytest.raises(InputError, match="0 member and 60 non-member"):
        nonmember_only = {k: [v[0][truth == 0]] for k, v in draws.items()}
        statistics.imbalanced_runs(nonmember_only, labels, [0.5], ratios=[0.1], m=3, seed=0)


def test_selection_runs_are_knockoff_plus_of_each_draw():
    items, z = _items_and_scores(member_gap=1.5, seed=3)
    tables = ktd_tables(items, z, ms=[2], m=2, n_draws=3, qs=[0.3], seed=1)
    w = tables["w"]
    fdps = []
    for d in range(3):
        part = w[(w.statistic == "gradnorm") & (w.draw == d)]
        chosen = knockoff_plus_select(part["w"].to_numpy(), 0.3)
        fdps.append(((part["label"].to_numpy() == 0) & chosen).sum() / max(chosen.sum(), 1))
    row = tables["selection"].query("statistic == 'gradnorm' and m == 2 and q == 0.3").iloc[0]
    assert row["fdr"] == pytest.approx(np.mean(fdps))


def test_shifted_knockoffs_break_symmetry_and_the_tests_say_so():
    # a paraphraser whose outputs always score lower than any original (imperfect knockoffs):
    # non-members' W is positive, and both tests reject symmetry
    items, z = _items_and_scores(member_gap=0.0, seed=2)
    for name in STATISTICS:
        for s in range(0, z[name].size, 4):
            z[name][s + 1:s + 4] -= 2.0
    sym = ktd_tables(items, z, ms=[3], m=3, n_draws=1, qs=[0.1], seed=0)["symmetry"]
    row = sym[sym.statistic == "gradnorm"].iloc[0]
    assert row["nonmember_share_positive"] > 0.9 and row["sign_pvalue"] < 1e-6 and row["wilcoxon_pvalue"] < 1e-6


def _config():
    return {"models": {"a": {}, "b": {}},
            "benchmarks": {"novels": {}},
            "probes": {"decop": {"paraphrase": {"model": "a"}}, "decop_likelihood": {"models": ["b"]},
                       "ktd": {"models": ["b"], "m": 2, "ms": [1, 2, 3]}}}


def test_ktd_config_checks():
    assert plan.check_config(_config()) == []
    cfg = _config()
    del cfg["probes"]["decop"]
    assert plan.check_config(cfg) == ["probes.ktd: knockoffs are the paraphrases of DE-COP's pool; configure "
                                      "probes.decop (its paraphrase.model makes them) and a decop_<mode> block"]
    cfg = copy.deepcopy(_config())
    cfg["probes"]["ktd"].update(ms=[1, 10], m=3)  # a pool beyond DE-COP's three is topped up (ktd_pool)
    assert plan.check_config(cfg) == ["probes.ktd.m: 3 must be one of probes.ktd.ms [1, 10]"]
    cfg = copy.deepcopy(_config())
    cfg["probes"]["ktd"]["reference_models"] = ["c", "api"]
    cfg["models"]["api"] = {"backend": "openai", "api": {"model": "gpt-x"}}
    assert plan.check_config(cfg) == [
        "probes.ktd.reference_models.0: 'c' is not a configured model",
        "probes.ktd.reference_models.1: 'api' is an API model; a reference model scores every passage's tokens, so "
        "it must be local"]
    cfg["probes"]["ktd"]["reference_models"] = ["a", "b"]
    assert plan.reference_models(cfg, "b") == ["a"]  # never its own reference
    cfg = copy.deepcopy(_config())
    cfg["probes"]["ktd"]["models"] = ["a", "b"]
    (problem,) = plan.check_config(cfg)
    assert problem.startswith("probes.ktd.models: 'a' paraphrases the knockoffs")


def test_ktd_refuses_a_model_that_shares_the_paraphrasers_weights():
    """Definition 1: a fine-tune of the paraphraser (or its base, a sibling fine-tune, the same
    checkpoint under another name) rates the paraphraser's own outputs as familiar text, so it is
    refused as the paraphraser itself is; a model of other weights is not."""
    cfg = copy.deepcopy(_config())
    cfg["models"] = {"a": {"source": {"builtin": "x"}}, "a-ft": {"base": "a", "finetune": {"members_of": ["novels"]}},
                     "a-ft2": {"base": "a", "finetune": {"members_of": ["novels"]}},
                     "a-again": {"source": {"builtin": "x"}}, "b": {"source": {"builtin": "y"}}}
    cfg["probes"]["ktd"]["models"] = ["a-ft", "b", "a-again"]
    tail = ("'a', which paraphrases the knockoffs (probes.decop.paraphrase.model); KTD's knockoffs must come "
            "from other weights than the model under test's (Definition 1)")
    assert plan.check_config(cfg) == [f"probes.ktd.models: 'a-again' is built on the weights of 'a', as is {tail}",
                                      f"probes.ktd.models: 'a-ft' is built on the weights of 'a', as is {tail}"]
    cfg["probes"]["decop"]["paraphrase"]["model"] = "a-ft2"  # a sibling fine-tune paraphrases
    cfg["probes"]["ktd"]["models"] = ["a-ft", "b"]
    (problem,) = plan.check_config(cfg)
    assert problem.startswith("probes.ktd.models: 'a-ft' is built on the weights of 'a', as is 'a-ft2', which paraphrases")


def test_importance_scores_of_a_real_model(tiny_model, tiny_model_dir):
    """Z from a real HF model: loss and Min-K% from its token statistics, the gradient norm (negated)
    from its per-sample gradients."""
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.ktd.runner import importance_scores

    model, tok = tiny_model
    backend = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok, batch_size=4)
    texts = ["the cat sat on the mat and looked at the dog", "a dog ran in the park",
             "the cat sat on the mat", "colourless green ideas sleep furiously"]
    lines = []
    z, stats = importance_scores(backend, texts, params="all", progress=lines.append)
    assert not any("max_tokens" in line for line in lines)  # all four fit
    np.testing.assert_allclose(stats.logprob, backend.token_stats(texts, with_distribution=False).logprob)
    np.testing.assert_allclose(z["loss"], -stats.mean_nll())
    lowest = [np.sort(stats.passage(i)[0].astype(np.float64))[:max(1, int(0.2 * len(stats.passage(i)[0])))].mean()
              for i in range(len(texts))]
    np.testing.assert_allclose(z["min_k"], lowest)
    np.testing.assert_allclose(-z["gradnorm"], backend.gradient_norms(texts, params="all"))
    assert (z["gradnorm"] < 0).all()
    # a text past max_tokens is scored on its first max_tokens tokens: counted in the log, it was silent
    short = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok, batch_size=4, max_tokens=20)
    cut = short.token_stats(texts, with_distribution=False).chars < np.array([len(t) for t in texts])
    assert cut.tolist() == [True, False, False, True]  # 28 and 32 tokens of this tokenizer; 13 and 14 fit
    lines = []
    importance_scores(short, texts, params="all", progress=lines.append)
    assert [line for line in lines if "max_tokens" in line] == [
        "2 of 4 texts longer than the model's max_tokens: each is scored (Z, and the gradient norm) on its first "
        "max_tokens tokens only, so a passage and its knockoffs compare different spans (shorter passages, "
        "probes.decop.lengths, or the model's max_tokens avoid it)"]
    # the Table 2 baselines are token_prob's methods on the same passages
    from memaudit.probes.ktd.runner import baseline_scores
    from memaudit.probes.token_prob.methods import Lowercase, Reference, ScoringContext, Zlib

    items = [{"item_id": f"p{i}", "options": [t]} for i, t in enumerate(texts)]
    lower = backend.token_stats([t.lower() for t in texts], with_distribution=False)
    ref_stats = backend.token_stats(texts[::-1], with_distribution=False).take([3, 2, 1, 0])  # any other stats
    base = baseline_scores(items, z, np.arange(len(texts)), stats=stats, lowercase=lower, references={"r": ref_stats})
    assert sorted(base) == ["loss", "lowercase", "min_k", "ref_r", "zlib"]
    ctx = ScoringContext(texts, stats, lowercase=lower, references={"r": ref_stats})
    np.testing.assert_allclose(base["lowercase"].to_numpy(), Lowercase().score(ctx))
    np.testing.assert_allclose(base["lowercase"].to_numpy(), lower.mean_nll() / stats.mean_nll())  # none cut
    np.testing.assert_allclose(base["zlib"].to_numpy(), Zlib().score(ctx))
    np.testing.assert_allclose(base["ref_r"].to_numpy(), ref_stats.mean_nll() - stats.mean_nll())
    np.testing.assert_allclose(base["ref_r"].to_numpy(), Reference("r").score(ctx), atol=1e-5)  # same texts: ~0
    assert list(base["loss"].index) == ["p0", "p1", "p2", "p3"]


def test_baselines_compare_a_reference_cut_shorter_on_the_characters_both_scored(tiny_model, tiny_model_dir):
    """A reference model cut at fewer tokens than the model (the model itself at 4 tokens, the model at 12):
    ref_<name> is L_ref - L over the characters both passes scored, 0 for a model as its own reference (the
    losses of what each pass scored differ); zlib compresses the part the model scored. A passage the
    statistics cannot compare so is left out of that baseline, counted in one line."""
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.ktd.runner import baseline_scores
    from memaudit.probes.token_prob.methods import zlib_lengths

    model, tok = tiny_model
    texts = ["the cat sat on the mat and looked at the dog " * 2, "a dog ran in the park and then home " * 3,
             "the cat sat on the mat, then the sea rose " * 2, "colourless green ideas sleep furiously " * 3]
    stats = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok, max_tokens=12).token_stats(
        texts, with_distribution=False)
    ref = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok, max_tokens=4).token_stats(
        texts, with_distribution=False)
    assert (ref.chars < stats.chars).all() and (stats.chars < [len(t) for t in texts]).all()
    assert np.abs(ref.mean_nll() - stats.mean_nll()).max() > 5e-3  # what ref_r was
    items = [{"item_id": f"p{i}", "options": [t]} for i, t in enumerate(texts)]
    z = {"loss": -stats.mean_nll(), "min_k": np.zeros(len(texts))}
    messages = []
    base = baseline_scores(items, z, np.arange(len(texts)), stats=stats, references={"r": ref},
                           progress=messages.append)
    np.testing.assert_allclose(base["ref_r"].to_numpy(), 0, atol=1e-5)
    assert list(base["ref_r"].index) == ["p0", "p1", "p2", "p3"]
    np.testing.assert_allclose(base["zlib"].to_numpy(),
                               -stats.mean_nll() / zlib_lengths(t[:n] for t, n in zip(texts, stats.chars)))
    assert messages == ["ref_r: 4 of 4 passages scored to different lengths by the two passes (each cut at its own "
                        f"max_tokens): 4 compared on the characters both scored (median "
                        f"{int(np.median(ref.chars))} characters)"]
    ref.ends = None  # statistics that do not say where their tokens end
    base = baseline_scores(items, z, np.arange(len(texts)), stats=stats, references={"r": ref},
                           progress=messages.append)
    assert "ref_r" not in base and len(base["zlib"]) == 4 and "; 4 left out of its scores: " in messages[-1]


def test_summary_table_figures_and_headline_rows(tmp_path):
    from memaudit.probes.ktd.summary import (IMBALANCE_COLUMNS, SUMMARY_COLUMNS, build_imbalance_summary, build_summary,
                                            figure_q)
    from memaudit.probes.ktd.headline import expectations as ktd_expectations

    paths = {name: [] for name in ("selection", "symmetry", "w", "imbalance")}
    for model, gap in (("tiny-contaminated", 3.0), ("tiny", 0.0)):
        items, z = _items_and_scores(member_gap=gap, seed=4)
        tables = ktd_tables(items, z, ms=[1, 3], m=3, n_draws=3, qs=[0.1, 0.2, 0.3], seed=0,
                            member_ratios=[0.1, 0.05])
        for name in paths:
            path = tmp_path / f"{model}_{name}.csv"
            tables[name].assign(benchmark="novels", model=model).to_csv(path, index=False)
            paths[name].append(str(path))
    out = tmp_path / "out"
    frame = build_summary(paths["selection"], paths["symmetry"], paths["w"], {"tiny-contaminated": ["novels"]},
                          out / "ktd.csv", out / "fdr_power.png", out / "w.png", m=3,
                          n_params={"tiny": 1.3e6, "tiny-contaminated": 1.3e6}, out_m_size=out / "m_and_size.png")
    assert list(frame.columns) == SUMMARY_COLUMNS and set(frame["n_params"]) == {1.3e6}
    assert (out / "m_and_size.png").stat().st_size > 1000 and (out / "m_and_size.svg").exists()
    assert figure_q([0.3, 0.05, 0.2]) == 0.05 and figure_q([0.5, 0.1, 0.15]) == 0.1
    knock = frame[~frame.statistic.str.startswith("validation_") & (frame.measured_on == "all")]
    assert len(knock) == 2 * 3 * 2 * 3  # models x statistics x ms x qs
    # the Table 2 baselines (models x scores x qs) and KTD again on their test passages
    assert len(frame) - len(knock) == 2 * 3 * 3 + 2 * 3 * 2 * 3
    assert set(frame.loc[frame.statistic.str.startswith("validation_"), "measured_on"]) == {"test"}
    assert frame.loc[frame.model == "tiny-contaminated", "contaminated"].all()
    assert not frame.loc[frame.model == "tiny", "contaminated"].any()
    assert frame["fdp_above_q"].dtype == bool and (knock["n_texts"] == 120).all()
    assert frame["fdp_above_q"].tolist() == (frame["fdr"] > frame["q"] + 2 * frame["fdr_se"].fillna(0)).tolist()
    assert (out / "fdr_power.png").stat().st_size > 0 and (out / "w.svg").exists()
    imb = build_imbalance_summary(paths["imbalance"], {"tiny-contaminated": ["novels"]}, out / "imbalance.csv",
                                  out / "imbalance.png", m=3)
    assert list(imb.columns) == IMBALANCE_COLUMNS and len(imb) == 2 * 3 * 2 * 3  # models x stats x ratios x qs
    assert imb.loc[imb.model == "tiny-contaminated", "contaminated"].all()
    assert set(imb["n_members"]) == {6, 3} and (imb["n_nonmembers"] == 60).all()
    assert pd.read_csv(out / "imbalance.csv").shape == imb.shape and (out / "imbalance.png").stat().st_size > 1000
    models = pd.DataFrame({"model": ["tiny", "tiny-contaminated"], "base": ["", "tiny"]})
    checks = ktd_expectations(frame, models)
    assert checks[["model", "q"]].values.tolist() == [["tiny", 0.1], ["tiny-contaminated", 0.1],
                                                        ["tiny-contaminated", 0.2], ["tiny-contaminated", 0.3]]
    base = checks[checks.model == "tiny"].iloc[0]
    assert base["expected"] == "named <= 6.0" and base["ok"] is True
    assert (checks.loc[checks.model == "tiny-contaminated", "power"] > 0.8).all()


def test_a_base_model_without_its_ktd_row_is_counted_not_evaluated(tmp_path):
    """KTD probed the fine-tune of tiny on novels but not tiny itself (probes.ktd.models left it out): the
    null check of tiny is listed and counted as not evaluated, where the section checked nothing and the
    headline's count said nothing of KTD. A base model whose rows miss q = 0.1 alike; a base model nothing
    of KTD's table touches (the paraphraser) is no check."""
    from memaudit.probes.ktd.headline import expectations, headline
    from memaudit.stats.headline import tally

    summary = tmp_path / "summary"
    summary.mkdir()
    row = {"benchmark": "novels", "model": "tiny-contaminated", "statistic": "gradnorm", "m": 2, "measured_on": "all",
           "q": 0.1, "fdr": 0.2, "power": 0.9, "mean_selected": 12.0, "fdp_above_q": True, "sign_pvalue": 0.01,
           "n_texts": 40}
    pd.DataFrame([row]).to_csv(summary / "ktd.csv", index=False)
    models = pd.DataFrame({"model": ["tiny", "tiny-contaminated", "paraphraser"], "base": ["", "tiny", ""]})
    blocks = headline(summary, models)
    assert tally(blocks) == ("Ground-truth checks: 0 of 1 hold; not evaluated (no row to check in its table): "
                             "1 in KTD knockoff+")
    assert blocks[0].endswith(
        "   novels              tiny  2 0.1  NaN    NaN    NaN                        not evaluated: no row in "
        "ktd.csv (probes.ktd.models) False")
    assert "paraphraser" not in blocks[0]
    # the base model probed, but not at the null check's q (probes.ktd.qs without 0.1)
    pd.DataFrame([row, {**row, "model": "tiny", "q": 0.2, "mean_selected": 0.0}]).to_csv(summary / "ktd.csv",
                                                                                       index=False)
    checks = expectations(pd.read_csv(summary / "ktd.csv"), models)
    assert [(r.model, r.q, r.expected, r.ok) for r in checks.itertuples()] == [
        ("tiny-contaminated", 0.1, "reported", ""),
        ("tiny", 0.1, "not evaluated: no gradnorm row at m = 2, q = 0.1 in ktd.csv", False)]


def test_match_lengths_cuts_a_group_to_its_shortest_word_count_as_written():
    from memaudit.probes.ktd.runner import match_lengths

    group = ["One two,  three\nfour five six.", "a b c d", "x\ty z w v"]
    cut, n = match_lengths(group)
    assert n == 4
    assert cut == ["One two,  three\nfour", "a b c d", "x\ty z w"]
    # a function of the group as a set: the passage and its knockoffs are cut alike
    again, m = match_lengths(group[::-1])
    assert m == 4 and again == cut[::-1]
    assert match_lengths(["  ", "a b"]) == (["", ""], 0)


def test_length_matched_knockoffs_remove_a_pure_length_difference(tiny_model_dir, tmp_path):
    """Knockoffs that are the passage's own first words: a difference of length only. Unmatched, W
    is far from 0; matched (the default), every text of a group is the same 12 words, so W is 0 for
    every statistic, while the detectors without knockoffs still read the whole passages."""
    import json

    from memaudit.backends.hf import HFBackend
    from memaudit.config import validate_config
    from memaudit.io import write_jsonl
    from memaudit.probes.job import ProbeJob
    from memaudit.probes.ktd.runner import run_job

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "manifest.json").write_text(json.dumps({"load": {"path": str(tiny_model_dir)}}))
    words = ("the cat sat on the mat and the dog ran in the park while the old man read a book by the "
             "river and the children played with a red ball near the tall trees").split()
    items = []
    for d in range(4):
        for k in range(2):
            text = " ".join(words[k + d:k + d + 24])
            prefixes = [" ".join(text.split()[:n]) for n in (12, 15, 18)]
            items.append({"item_id": f"doc{d}#p{k}", "doc_id": f"doc{d}", "label": int(d < 2), "answer": 0,
                          "options": [text, *prefixes], "meta": {}})
    write_jsonl(tmp_path / "items.jsonl", items)
    # float32 as the HFBackend below: `auto` is bfloat16 on a CPU with AMX, where the two differ by 2e-4
    tiny = {"source": {"tiny_gpt2": {}}, "dtype": "float32"}
    outputs = ("documents", "selection", "symmetry", "w", "imbalance")

    def run(name: str, **ktd) -> dict[str, pd.DataFrame]:
        config = validate_config({
            "benchmarks": {"b": {"sources": ["austen"]}}, "models": {"local": tiny, "paraphraser": tiny},
            "probes": {"decop": {"paraphrase": {"model": "paraphraser"}}, "decop_likelihood": {"models": ["local"]},
                       "ktd": {"models": ["local"], "m": 2, "ms": [1, 2, 3], "n_draws": 2, "qs": [0.1, 0.5],
                               "validation_texts": 4, "member_ratios": [0.5], **ktd}}})
        out = {k: str(tmp_path / name / f"{k}.csv") for k in outputs}
        run_job(ProbeJob("ktd", "", "local", "b", config,
                         {"model": str(model_dir), "records": str(tmp_path / "items.jsonl")}, out))
        return {k: pd.read_csv(v) for k, v in out.items()}

    matched, unmatched = run("matched"), run("unmatched", length_match=False)
    w = matched["w"]
    assert len(w) == 8 * 3 * 3 * 2 and (w["words"] == 12).all()
    np.testing.assert_allclose(w["w"], 0.0, atol=1e-5)
    assert unmatched["w"]["words"].isna().all()
    size = unmatched["w"].assign(a=unmatched["w"]["w"].abs()).groupby("statistic")["a"]
    assert (size.mean() > 1e-3).all()
    # the longer text has the smaller gradient (a mean over more tokens): every original looks seen
    assert (unmatched["w"].query("statistic == 'gradnorm'")["w"] > 0.05).all()
    # without knockoffs, both read the whole passages: the gradient norm of each full text
    backend = HFBackend({"path": str(tiny_model_dir)}, name="local")
    norms = backend.gradient_norms([it["options"][0] for it in items])
    expected = pd.Series(-norms, index=[it["doc_id"] for it in items]).groupby(level=0).mean()
    for tables in (matched, unmatched):
        z = tables["documents"].query("method == 'ktd_z_gradnorm'").set_index("doc_id")["score"]
        np.testing.assert_allclose(z.loc[expected.index], expected.to_numpy(), rtol=1e-5)


def test_a_base_models_null_check_where_knockoff_plus_cannot_name_is_not_evaluated_not_passed():
    """Knockoff+'s ratio is at least 1/#{W >= t} >= 1/n_texts: over 8 passages it names nothing at q = 0.1
    whatever W is, so "named <= 0.4" held by arithmetic (it read True). It is listed as not evaluated,
    saying why; over 40 passages the check is made as before."""
    from memaudit.probes.ktd.headline import expectations

    row = {"benchmark": "novels", "model": "tiny", "statistic": "gradnorm", "m": 2, "measured_on": "all", "q": 0.1,
           "fdr": 0.0, "power": 0.0, "mean_selected": 0.0, "fdp_above_q": False, "sign_pvalue": 0.5}
    models = pd.DataFrame({"model": ["tiny"], "base": [""]})
    checks = expectations(pd.DataFrame([{**row, "n_texts": 8}]), models)
    assert [(r.model, r.q, r.expected, r.ok) for r in checks.itertuples()] == [
        ("tiny", 0.1, "not evaluated: q = 0.1 is below 1/n_texts = 0.125 (8 passages): knockoff+ can name nothing",
         False)]
    assert knockoff_plus_select(np.arange(1.0, 9.0), 0.1).sum() == 0  # even 8 positive W, no negative one
    checks = expectations(pd.DataFrame([{**row, "n_texts": 40}]), models)
    assert [(r.expected, r.ok) for r in checks.itertuples()] == [("named <= 2.0", True)]


def test_summary_rows_carry_min_q_and_the_log_names_those_below_it(tmp_path, caplog):
    """Knockoff+ names nothing at q < 1/n_texts: over the baselines' 60 test passages q = 0.01 is below
    1/60, so KTD's "test" rows read fdr, power and mean_selected 0 there whatever W is, beside a
    baseline that names 26 passages. ``min_q`` says so beside the values, as in selection.csv; the
    job's log names the rows once per q and passage count; the baselines (a validation threshold can
    name a single passage at any q) have none."""
    import logging

    from memaudit.probes.ktd.summary import SUMMARY_COLUMNS, build_summary

    paths = {name: [] for name in ("selection", "symmetry", "w")}
    for model, gap in (("tiny-contaminated", 3.0), ("tiny", 0.0)):
        items, z = _items_and_scores(member_gap=gap, seed=4)
        tables = ktd_tables(items, z, ms=[1, 3], m=3, n_draws=3, qs=[0.01, 0.1], seed=0, member_ratios=[0.1])
        for name in paths:
            path = tmp_path / f"{model}_{name}.csv"
            tables[name].assign(benchmark="novels", model=model).to_csv(path, index=False)
            paths[name].append(str(path))
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO, logger="memaudit"):
        frame = build_summary(paths["selection"], paths["symmetry"], paths["w"], {"tiny-contaminated": ["novels"]},
                              out / "ktd.csv", out / "fdr_power.png", out / "w.png", m=3)
    assert SUMMARY_COLUMNS[SUMMARY_COLUMNS.index("n_texts") + 1] == "min_q"
    written = pd.read_csv(out / "ktd.csv")
    assert list(written.columns) == SUMMARY_COLUMNS
    baseline = written.statistic.str.startswith("validation_")
    assert written.loc[baseline, "min_q"].isna().all()
    knock = written[~baseline]
    assert sorted(set(zip(knock["measured_on"], knock["n_texts"], knock["min_q"]))) == [
        ("all", 120, 1 / 120), ("test", 60, 1 / 60)]
    low = knock[knock["q"] < knock["min_q"]]
    assert sorted(set(zip(low["measured_on"], low["q"]))) == [("test", 0.01)] and len(low) == 2 * 3 * 2
    # the values stay, as selection.csv's do: 0 beside a min_q that says why
    assert (low[["fdr", "power", "mean_selected"]] == 0).all().all()
    tiny_loss = written[(written.model == "tiny-contaminated") & (written.statistic == "validation_loss")
                        & (written.q == 0.01)]
    assert tiny_loss[["n_texts", "mean_selected"]].values.tolist() == [[60, 25.666666666666668]]
    notes = [r.getMessage() for r in caplog.records if "min_q" in r.getMessage() or "1/n_texts" in r.getMessage()]
    assert notes == ["ktd.csv: q = 0.01 is below 1/n_texts = 0.0167 (60 passages, measured_on 'test') for 12 rows "
                     "(novels/tiny, novels/tiny-contaminated): knockoff+ can name nothing there, so their fdr, "
                     "power and mean_selected are 0 whatever W is"]
    np.testing.assert_array_equal(frame["min_q"].to_numpy(), written["min_q"].to_numpy())


def test_fdp_above_q_is_the_mean_fdp_over_draws_above_q_by_two_standard_errors():
    from memaudit.probes.ktd.summary import _judged

    rows = pd.DataFrame({"benchmark": "b", "model": "x", "q": [0.2, 0.2, 0.2, 0.2],
                         "fdr": [0.25, 0.25, 0.21, 0.2], "fdr_se": [0.02, 0.03, np.nan, np.nan]})
    judged = _judged(rows, {"x": ["b"]})
    # 0.25 > 0.2 + 0.04; 0.25 <= 0.2 + 0.06; one distinct draw (no SE): 0.21 > 0.2, and 0.2 is not above 0.2
    assert judged["fdp_above_q"].tolist() == [True, False, True, False] and judged["contaminated"].all()
    assert "guarantee" not in judged


def test_fdp_above_q_is_no_test_of_fdr_control_exact_knockoffs_read_true_often():
    """The auditor's simulation: knockoffs exchangeable with the non-members, so knockoff+ controls FDR; the
    column reads True on 16% of data sets at q = 0.1 and 30% at q = 0.2 (it read "fails" as `guarantee`), while
    the FDR over data sets stays below q."""
    from memaudit.probes.ktd.statistics import passage_w, selection_runs, summarise_selection
    from memaudit.probes.ktd.summary import _judged

    rng = np.random.default_rng(0)
    above, fdp = {0.1: 0, 0.2: 0}, {0.1: [], 0.2: []}
    for r in range(200):
        z = np.r_[rng.normal(1.5, 1, 30), rng.normal(0, 1, 30)]
        pools = [rng.normal(0, 1, 5) for _ in range(60)]
        ids = [f"t{i}" for i in range(60)]
        labels = pd.Series([1] * 30 + [0] * 30, index=ids)
        ws = {("gradnorm", 3): [passage_w(z, pools, ids, 3, np.random.default_rng([r, d])) for d in range(10)]}
        judged = _judged(summarise_selection(selection_runs(ws, labels, [0.1, 0.2])).assign(benchmark="b", model="x"),
                         {})
        for q in (0.1, 0.2):
            row = judged[np.isclose(judged.q, q)].iloc[0]
            above[q] += bool(row.fdp_above_q)
            fdp[q].append(row.fdr)
    assert (above[0.1] / 200, above[0.2] / 200) == (0.16, 0.3)
    assert np.mean(fdp[0.1]) < 0.1 and np.mean(fdp[0.2]) < 0.2
