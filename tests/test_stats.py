"""Statistics against hand-computed values and against sklearn/scipy."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from sklearn.metrics import roc_auc_score

from memaudit.errors import InputError
from memaudit.stats.blind import blind_baseline, blind_baseline_scores
from memaudit.stats.cli import stats_main
from memaudit.stats.metrics import (
    METRIC_COLUMNS,
    binarized_auc,
    bootstrap_auc,
    cluster_bootstrap_auc,
    compute_metrics,
    fold_auc,
    independent_difference,
    label_groups,
    paired_difference,
    roc_auc,
    t_test_pvalue,
    tpr_at_fpr,
)
from memaudit.stats.summary import (
    SUMMARY_COLUMNS,
    merge_metrics,
    metrics_table,
    summary_markdown,
    write_summary,
)

# Members 0.9, 0.8, 0.4; non-members 0.7, 0.3, 0.2.
# Pairs member > non-member: 0.9 beats 3, 0.8 beats 3, 0.4 beats 2 -> AUC = 8/9.
HAND_SCORES = np.array([0.9, 0.8, 0.4, 0.7, 0.3, 0.2])
HAND_LABELS = np.array([1, 1, 1, 0, 0, 0])


def _random_data(seed: int = 0, n: int = 300, shift: float = 0.6):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    scores = rng.normal(size=n) + shift * labels
    return scores, labels


# ---------------------------------------------------------------- roc_auc

def test_roc_auc_hand_computed():
    assert roc_auc(HAND_SCORES, HAND_LABELS) == pytest.approx(8 / 9)


def test_roc_auc_ties_count_half():
    # One member/non-member pair tied at 0.5, one member above: (1 + 0.5) / 2.
    assert roc_auc([0.5, 0.9, 0.5], [1, 1, 0]) == pytest.approx(0.75)


def test_roc_auc_matches_sklearn_on_random_data():
    scores, labels = _random_data(1)
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))


def test_roc_auc_single_class_is_nan():
    assert math.isnan(roc_auc([0.1, 0.2], [1, 1]))


def test_auc_tpr_and_welch_test_against_sklearn_scipy_and_brute_force_on_ties():
    """On scores drawn with many ties (a few values, equal up to a sign, tiny and large magnitudes): the AUC is
    sklearn's, the bootstrap's rank formula gives it on the original documents, the binarized AUC is sklearn's
    AUC of the Youden predictions, the TPR at FPR <= x is the largest over every threshold (no interpolation),
    and the t-test is scipy's Welch test where neither group is constant."""
    import warnings

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from sklearn.metrics import roc_curve

    from memaudit.stats.metrics import _auc_of_rows

    values = st.sampled_from([-3.0, -0.0, 0.0, 1e-300, 0.5, 1.0, 1.0 + 2**-52, 7.0, 1e12]) | st.floats(-1e6, 1e6)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.tuples(values, st.integers(0, 1)), min_size=2, max_size=40))
    def check(rows):
        scores, labels = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        if labels.min() == labels.max():
            assert math.isnan(roc_auc(scores, labels)) and math.isnan(tpr_at_fpr(scores, labels, 0.01))
            return
        members, nonmembers = scores[labels == 1], scores[labels == 0]
        assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
        assert _auc_of_rows(np.r_[members, nonmembers][None, :], members.size)[0] == pytest.approx(
            roc_auc_score(labels, scores), abs=1e-9)
        fpr, tpr, thresholds = roc_curve(labels, scores)
        youden = (scores >= thresholds[int(np.argmax(tpr - fpr))]).astype(int)
        assert binarized_auc(scores, labels) == pytest.approx(roc_auc_score(labels, youden), abs=1e-12)
        for x in (0.0, 0.01, 1 / 3, 1.0):
            best = max((members >= t).mean() for t in np.r_[np.unique(scores), np.inf]
                       if (nonmembers >= t).mean() <= x + 1e-12)
            assert tpr_at_fpr(scores, labels, x) == best
        spread = 1e-6 * max(1.0, float(np.abs(scores).max()))
        if min(members.size, nonmembers.size) >= 2 and min(np.ptp(members), np.ptp(nonmembers)) > spread:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = scipy_stats.ttest_ind(members, nonmembers, equal_var=False).pvalue
            assert t_test_pvalue(scores, labels) == pytest.approx(expected, rel=1e-6, abs=1e-300)

    check()


# ---------------------------------------------------------- binarized_auc

def test_binarized_auc_hand_computed():
    # Youden J = TPR - FPR: threshold 0.8 -> 2/3 - 0 ; 0.4 -> 1 - 1/3; both J = 2/3.
    # Binarized AUC = (TPR + TNR) / 2 = (1 + J) / 2 = 5/6 at either point.
    assert binarized_auc(HAND_SCORES, HAND_LABELS) == pytest.approx(5 / 6)


def test_binarized_auc_hand_computed_unique_optimum():
    # Members 5, 4.5, 4, 2; non-members 3, 1, 0.  J = TPR - FPR per threshold:
    # >=5: 1/4; >=4.5: 2/4; >=4: 3/4 (unique max); >=3: 3/4 - 1/3; >=2: 1 - 1/3.
    # Binarized AUC = (1 + 3/4) / 2 = 7/8.
    scores = [5, 4.5, 4, 2, 3, 1, 0]
    labels = [1, 1, 1, 1, 0, 0, 0]
    assert binarized_auc(scores, labels) == pytest.approx(7 / 8)


def test_binarized_auc_equals_balanced_accuracy_at_youden_point():
    scores, labels = _random_data(2)
    members, nonmembers = scores[labels == 1], scores[labels == 0]
    best = max(
        (members >= t).mean() - (nonmembers >= t).mean() for t in np.unique(scores)
    )
    assert binarized_auc(scores, labels) == pytest.approx((1 + best) / 2)


def test_binarized_auc_equals_sklearns_auc_of_the_youden_predictions():
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(3)
    for _ in range(300):
        n1, n0 = rng.integers(1, 30, size=2)
        scores = np.round(rng.normal(size=n1 + n0), int(rng.integers(0, 3)))  # ties too
        labels = np.r_[np.ones(n1, int), np.zeros(n0, int)]
        fpr, tpr, thresholds = roc_curve(labels, scores)
        predictions = (scores >= thresholds[int(np.argmax(tpr - fpr))]).astype(int)
        assert binarized_auc(scores, labels) == pytest.approx(roc_auc_score(labels, predictions), abs=1e-12)


def test_binarized_auc_is_optimistic_on_noise():
    rng = np.random.default_rng(3)
    scores, labels = rng.normal(size=200), np.repeat([0, 1], 100)
    assert binarized_auc(scores, labels) > 0.5


# ------------------------------------------------------------- tpr_at_fpr

def test_tpr_at_fpr_hand_computed():
    # 3 non-members: FPR steps of 1/3.  FPR 1% < 1/3 -> TPR at FPR 0 = members
    # strictly above 0.7 = 2/3.  FPR <= 1/3 allows threshold 0.4 -> TPR 1.
    assert tpr_at_fpr(HAND_SCORES, HAND_LABELS, 0.01) == pytest.approx(2 / 3)
    assert tpr_at_fpr(HAND_SCORES, HAND_LABELS, 1 / 3) == pytest.approx(1.0)
    assert tpr_at_fpr(HAND_SCORES, HAND_LABELS, 0.0) == pytest.approx(2 / 3)


def test_tpr_at_fpr_ties_cannot_be_split():
    # The member ties the top non-member, so at FPR 0 nothing can be flagged.
    assert tpr_at_fpr([0.5, 0.5, 0.1], [1, 0, 0], 0.01) == 0.0
    assert tpr_at_fpr([0.5, 0.5, 0.1], [1, 0, 0], 0.5) == 1.0


def test_tpr_at_fpr_exact_one_percent():
    # 100 non-members 0..99, members 98.5, 97.5, ..., 89.5: with one false
    # positive (FPR exactly 1%) the threshold 98.5 flags 1 of 10 members;
    # with two (2%) the threshold 97.5 flags 2.
    nonmembers = np.arange(100.0)
    members = 98.5 - np.arange(10.0)
    scores = np.r_[members, nonmembers]
    labels = np.r_[np.ones(10, int), np.zeros(100, int)]
    assert tpr_at_fpr(scores, labels, 0.01) == pytest.approx(0.1)
    assert tpr_at_fpr(scores, labels, 0.02) == pytest.approx(0.2)
    assert tpr_at_fpr(scores, labels, 0.001) == 0.0


def test_tpr_at_fpr_against_brute_force():
    scores, labels = _random_data(4, n=2000, shift=1.5)
    members, nonmembers = scores[labels == 1], scores[labels == 0]
    for fpr in (0.01, 0.001, 0.1):
        best = max(
            (members >= t).mean()
            for t in np.r_[np.unique(scores), np.inf]
            if (nonmembers >= t).mean() <= fpr
        )
        assert tpr_at_fpr(scores, labels, fpr) == pytest.approx(best)


# ---------------------------------------------------------- t_test_pvalue

def test_t_test_pvalue_matches_scipy_welch():
    scores, labels = _random_data(5)
    expected = scipy_stats.ttest_ind(scores[labels == 1], scores[labels == 0], equal_var=False)
    assert t_test_pvalue(scores, labels) == pytest.approx(expected.pvalue)


def test_t_test_pvalue_hand_computed():
    # Members 1,2,3 (mean 2, var 1); non-members 4,5,6 (mean 5, var 1):
    # t = -3 / sqrt(1/3 + 1/3) = -3.674; Welch df = (2/3)^2 / (2 * (1/3)^2 / 2) = 4.
    p = t_test_pvalue([1, 2, 3, 4, 5, 6], [1, 1, 1, 0, 0, 0])
    assert p == pytest.approx(2 * scipy_stats.t.sf(3 / math.sqrt(2 / 3), df=4))


def test_t_test_pvalue_nan_for_tiny_group():
    assert math.isnan(t_test_pvalue([0.1, 0.2, 0.3], [1, 0, 0]))


def test_t_test_pvalue_nan_for_two_constant_groups_whatever_their_means():
    # 0/1 scores, every member 1 and every non-member 0: scipy's Welch test says t = inf, p = 0
    with pytest.warns(RuntimeWarning, match="Precision loss"):
        assert scipy_stats.ttest_ind([1.0] * 3, [0.0] * 3, equal_var=False).pvalue == 0.0
    assert math.isnan(t_test_pvalue([1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]))
    assert math.isnan(t_test_pvalue([0.25] * 6, [1, 1, 1, 0, 0, 0]))


def test_t_test_pvalue_takes_rounding_noise_for_no_variance(recwarn):
    noisy = 0.1 + 0.2  # 0.30000000000000004
    # the same numbers in both groups: scipy finds t = 1.41 in the rounding noise
    with pytest.warns(RuntimeWarning, match="Precision loss"):
        assert scipy_stats.ttest_ind([noisy, 0.3, 0.3], [0.3, 0.3, noisy], equal_var=False).pvalue < 0.25
    assert math.isnan(t_test_pvalue([noisy, 0.3, 0.3, 0.3, 0.3, noisy], [1, 1, 1, 0, 0, 0]))
    # one group constant up to rounding: Welch's test with that group's variance 0, hand-computed
    # (members mean 0.3, var 0; non-members 0, 0.1, 0.2: mean 0.1, var 0.01; t = 0.2 / sqrt(0.01 / 3),
    # df = n0 - 1 = 2), and no precision-loss warning from the constant group
    recwarn.clear()
    p = t_test_pvalue([noisy, 0.3, 0.3, 0.0, 0.1, 0.2], [1, 1, 1, 0, 0, 0])
    assert p == pytest.approx(2 * scipy_stats.t.sf(0.2 / math.sqrt(0.01 / 3), df=2), rel=1e-9)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_t_test_pvalue_does_not_change_with_a_shift_of_every_score():
    scores, labels = _random_data(5)
    expected = scipy_stats.ttest_ind(scores[labels == 1], scores[labels == 0], equal_var=False).pvalue
    for shift in (-3e4, 1e6, 1e9):  # log-likelihood sums are large negative numbers
        assert t_test_pvalue(scores + shift, labels) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------- bootstrap_auc

def test_bootstrap_deterministic_for_seed():
    scores, labels = _random_data(6)
    a = bootstrap_auc(scores, labels, 50, seed=7)
    b = bootstrap_auc(scores, labels, 50, seed=7)
    c = bootstrap_auc(scores, labels, 50, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Resample b does not depend on how many resamples follow it.
    np.testing.assert_array_equal(bootstrap_auc(scores, labels, 10, seed=7), a[:10])


def test_bootstrap_resamples_are_stratified_and_match_sklearn():
    scores, labels = _random_data(7, n=60)
    scores = np.round(scores, 1)  # ties exercise the mid-rank formula
    members, nonmembers = scores[labels == 1], scores[labels == 0]
    rng = np.random.default_rng(11)
    expected = []
    for _ in range(5):
        sample = np.r_[rng.choice(members, members.size), rng.choice(nonmembers, nonmembers.size)]
        boot_labels = np.r_[np.ones(members.size), np.zeros(nonmembers.size)]
        expected.append(roc_auc_score(boot_labels, sample))
    np.testing.assert_allclose(bootstrap_auc(scores, labels, 5, seed=11), expected)


def test_bootstrap_binarized_matches_per_resample_binarized_auc():
    scores, labels = _random_data(8, n=80)
    members, nonmembers = scores[labels == 1], scores[labels == 0]
    rng = np.random.default_rng(3)
    sample = np.r_[rng.choice(members, members.size), rng.choice(nonmembers, nonmembers.size)]
    boot_labels = np.r_[np.ones(members.size, int), np.zeros(nonmembers.size, int)]
    got = bootstrap_auc(scores, labels, 1, seed=3, binarized=True)
    assert got[0] == pytest.approx(binarized_auc(sample, boot_labels))


def test_binarized_bootstrap_columns_by_hand_and_same_resamples_as_continuous():
    # One resample, drawn as bootstrap_auc draws it (members first, then non-members, from
    # default_rng(seed)); the binarized AUC is (TPR + TNR) / 2 at the best threshold, found
    # here by trying every score of the resample.
    rng = np.random.default_rng(4)
    members, nonmembers = HAND_SCORES[:3], HAND_SCORES[3:]
    drawn_m, drawn_n = rng.choice(members, 3), rng.choice(nonmembers, 3)
    best = max((drawn_m >= t).mean() + (drawn_n < t).mean() for t in np.r_[drawn_m, drawn_n]) / 2
    m = compute_metrics(HAND_SCORES, HAND_LABELS, n_boot_small=1, n_boot_ci=2, seed=4)
    assert m["auc_binarized_boot_mean"] == pytest.approx(best)
    assert math.isnan(m["auc_binarized_boot_std"])  # one resample: no sample std
    sample = np.r_[drawn_m, drawn_n]
    assert m["auc_boot_mean"] == pytest.approx(roc_auc_score([1, 1, 1, 0, 0, 0], sample))


def test_bootstrap_ci_contains_auc():
    scores, labels = _random_data(9)
    metrics = compute_metrics(scores, labels, seed=0)
    assert metrics["auc_ci_low"] < metrics["auc"] < metrics["auc_ci_high"]
    assert metrics["auc_ci_high"] - metrics["auc_ci_low"] < 0.3
    assert abs(metrics["auc_boot_mean"] - metrics["auc"]) < 0.05


# ---------------------------------------------------------- compute_metrics

def test_compute_metrics_values_and_columns():
    m = compute_metrics(HAND_SCORES, HAND_LABELS, n_boot_small=10, n_boot_ci=200, seed=0)
    assert list(m) == METRIC_COLUMNS
    assert (m["n_member"], m["n_nonmember"]) == (3, 3)
    assert m["auc"] == pytest.approx(8 / 9)
    assert m["auc_binarized"] == pytest.approx(5 / 6)
    assert m["tpr_at_1pct_fpr"] == pytest.approx(2 / 3)
    assert m["tpr_at_01pct_fpr"] == pytest.approx(2 / 3)
    small = bootstrap_auc(HAND_SCORES, HAND_LABELS, 10, seed=0)
    assert m["auc_boot_mean"] == pytest.approx(small.mean())
    assert m["auc_boot_std"] == pytest.approx(small.std(ddof=1))
    small_binarized = bootstrap_auc(HAND_SCORES, HAND_LABELS, 10, seed=0, binarized=True)
    assert m["auc_binarized_boot_mean"] == pytest.approx(small_binarized.mean())
    assert m["auc_binarized_boot_std"] == pytest.approx(small_binarized.std(ddof=1))
    wide = bootstrap_auc(HAND_SCORES, HAND_LABELS, 200, seed=0)
    assert m["auc_ci_low"] == pytest.approx(np.percentile(wide, 2.5))
    assert m["t_pvalue"] == pytest.approx(t_test_pvalue(HAND_SCORES, HAND_LABELS))


def test_compute_metrics_rejects_non_finite_scores_naming_count():
    with pytest.raises(InputError, match=r"\b2 score"):
        compute_metrics([0.1, np.nan, np.inf, 0.4], [1, 0, 1, 0])


def test_compute_metrics_rejects_bad_labels():
    with pytest.raises(InputError, match="labels"):
        compute_metrics([0.1, 0.2, 0.3], [1, 0, 2])


def test_compute_metrics_single_class_is_nan_not_crash():
    m = compute_metrics([0.1, 0.2, 0.3], [1, 1, 1])
    assert (m["n_member"], m["n_nonmember"]) == (3, 0)
    assert all(math.isnan(m[k]) for k in METRIC_COLUMNS[2:])


# ---------------------------------------------------------- blind baseline

VOCAB = [f"w{i}" for i in range(60)]


def test_blind_baseline_near_chance_on_iid_texts():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(VOCAB, 30)) for _ in range(100)]
    labels = np.repeat([1, 0], 50)
    scores = blind_baseline_scores(texts, labels, seed=0)
    assert scores.shape == (100,)
    assert 0.35 <= roc_auc(scores, labels) <= 0.65


def test_blind_baseline_separates_class_specific_vocabulary():
    rng = np.random.default_rng(1)
    member_vocab = VOCAB[:30] + [f"old{i}" for i in range(10)]
    nonmember_vocab = VOCAB[:30] + [f"new{i}" for i in range(10)]
    texts = [" ".join(rng.choice(member_vocab, 30)) for _ in range(50)]
    texts += [" ".join(rng.choice(nonmember_vocab, 30)) for _ in range(50)]
    labels = np.repeat([1, 0], 50)
    assert roc_auc(blind_baseline_scores(texts, labels), labels) > 0.95


def test_blind_baseline_reduces_folds_and_is_deterministic():
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(VOCAB, 10)) for _ in range(13)]
    labels = np.r_[np.ones(3, int), np.zeros(10, int)]  # 3 members < 5 folds
    a = blind_baseline_scores(texts, labels, n_splits=5, seed=4)
    b = blind_baseline_scores(texts, labels, n_splits=5, seed=4)
    np.testing.assert_array_equal(a, b)
    assert ((a > 0) & (a < 1)).all()
    with pytest.raises(InputError, match="at least 2"):
        blind_baseline_scores(texts[:11], labels[2:], n_splits=5)


def _books_with_their_own_names(n_books: int = 8, chapters: int = 6, seed: int = 3):
    """Chapters of books labelled per book, where each book has its own names (its characters) and the
    shared words say nothing of the label: a classifier can only recognise a book it has seen."""
    rng = np.random.default_rng(seed)
    texts, labels, books = [], [], []
    for b in range(n_books):
        names = [f"name{b}x{i}" for i in range(6)]
        for _ in range(chapters):
            texts.append(" ".join(rng.choice(VOCAB + names * 3, 40)))
            labels.append(int(b % 2 == 0))
            books.append(f"book{b}")
    return texts, np.array(labels), books


def test_blind_baseline_keeps_books_whole_where_labels_are_given_per_book():
    texts, labels, books = _books_with_their_own_names()
    groups = label_groups(books, labels)
    assert groups == books
    # folds by document: a held-out chapter's book is in training with its label
    assert roc_auc(blind_baseline_scores(texts, labels, seed=0), labels) > 0.95
    # folds by book: a book's names never reach the classifier before its chapters are scored
    assert 0.2 <= roc_auc(blind_baseline_scores(texts, labels, seed=0, groups=groups), labels) <= 0.8


# fold 0: members 0.9, 0.3 against non-member 0.5 (1 of 2 pairs); fold 1: member 0.2 against 0.1 and 0.2
# (1 + 1/2 of 2); fold 2: one non-member, no pair. Within folds (1 + 1.5) / 4 = 0.625; pooled, 0.95 of
# fold 2 and the others' cross-fold pairs: 0.9 wins 3, 0.3 wins 2, 0.2 wins 1.5, of 12 = 0.5417.
FOLD_SCORES = [0.9, 0.3, 0.5, 0.2, 0.1, 0.2, 0.95]
FOLD_LABELS = [1, 1, 0, 1, 0, 0, 0]
FOLD_OF = [0, 0, 0, 1, 1, 1, 2]


def test_fold_auc_counts_only_the_pairs_one_fold_holds():
    assert fold_auc(FOLD_SCORES, FOLD_LABELS, FOLD_OF) == 0.625
    assert roc_auc(FOLD_SCORES, FOLD_LABELS) == pytest.approx(6.5 / 12)
    assert math.isnan(fold_auc([0.1, 0.2, 0.3, 0.4], [1, 1, 0, 0], ["a", "a", "b", "b"]))  # no fold holds both
    m = compute_metrics(FOLD_SCORES, FOLD_LABELS, n_boot_small=10, n_boot_ci=200, seed=0, folds=FOLD_OF)
    assert m["auc"] == 0.625
    # the interval is of the same within-fold AUC: one fold of one model ranks pairs a member wins or ties
    # in fold 1 and fold 0's 0.9 beat; its draws are fractions of fold pairs, none over 1
    draws = bootstrap_auc(FOLD_SCORES, FOLD_LABELS, 200, 0, folds=FOLD_OF)
    assert (m["auc_ci_low"], m["auc_ci_high"]) == tuple(np.percentile(draws[np.isfinite(draws)], [2.5, 97.5]))
    # without folds the draws are those of the pooled AUC, as before
    rows = _stratified_rows(np.r_[FOLD_LABELS], 20, 0)
    np.testing.assert_allclose(bootstrap_auc(FOLD_SCORES, FOLD_LABELS, 20, 0),
                               [roc_auc(np.r_[FOLD_SCORES][row], np.repeat([1, 0], [3, 4])) for row in rows])
    np.testing.assert_allclose(draws[:20], [fold_auc(np.r_[FOLD_SCORES][row], np.repeat([1, 0], [3, 4]),
                                                     np.r_[FOLD_OF][row]) for row in rows])
    with pytest.raises(InputError, match=r"scores and folds differ in length \(7 vs 2\)"):
        fold_auc(FOLD_SCORES, FOLD_LABELS, [0, 1])


def _stratified_rows(labels, n, seed):
    """The document positions bootstrap_auc draws, members first (its rng order)."""
    rng = np.random.default_rng(seed)
    members, nonmembers = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
    return [np.r_[members[rng.integers(0, members.size, members.size)],
                  nonmembers[rng.integers(0, nonmembers.size, nonmembers.size)]] for _ in range(n)]


def test_cluster_bootstrap_within_folds_leaves_out_draws_no_fold_holds_both_classes():
    # books a, b members, c, d non-members; folds by book: a with c (fold 0), b with d (fold 1)
    scores = [0.9, 0.8, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    books = ["a", "a", "b", "b", "c", "c", "d", "d"]
    folds = [0, 0, 1, 1, 0, 0, 1, 1]
    assert fold_auc(scores, labels, folds) == 0.5  # fold 0: 4 of 4, fold 1: 0 of 4
    draws = cluster_bootstrap_auc(scores, labels, books, 400, 0, folds=folds)
    # a draw of a twice and d twice holds no pair of one fold: nan; every other draw is a mix of 1 and 0
    assert np.isnan(draws).any() and set(np.unique(draws[np.isfinite(draws)])) <= {0.0, 0.5, 1.0}
    m = compute_metrics(scores, labels, n_boot_ci=400, seed=0, groups=books, folds=folds)
    assert (m["auc"], m["auc_ci_low"], m["auc_ci_high"]) == (0.5, 0.0, 1.0)


def _six_books_three_against_three(rng, signal: bool):
    """Chapters of six books, three a side, each book with its own word distribution (a book effect); with
    ``signal`` 15% of each book's words come from one half of the vocabulary for members, the other for
    non-members (the auditor's simulation of a benchmark whose sides differ in their words)."""
    vocab = [f"w{i}" for i in range(300)]
    half = np.r_[np.ones(150), np.zeros(150)] / 150
    sizes = rng.integers(4, 16, size=6)
    side = rng.permutation([1, 1, 1, 0, 0, 0])
    texts, labels, books = [], [], []
    for b, size in enumerate(sizes):
        p = rng.dirichlet(np.ones(300) * 0.3)
        if signal:
            p = 0.85 * p + 0.15 * (half if side[b] else half[::-1])
        texts += [" ".join(rng.choice(vocab, size=60, p=p)) for _ in range(size)]
        labels += [int(side[b])] * int(size)
        books += [f"b{b}"] * int(size)
    return texts, np.array(labels), books


@pytest.mark.parametrize("signal", [False, True])
def test_blind_auc_within_folds_is_unbiased_where_the_pooled_one_reads_below_chance(signal):
    # by-book folds of six books, 3 against 3: pooled, each fold's intercept ranks its documents against the
    # other folds' (the held-out side short in training): 0.35 with no difference, 0.45 with one over these 20
    # draws; within folds 0.45 and 0.67 (SD 0.21 a draw, so an SE of 0.046 for 20: the tolerance is 2 SE)
    rng = np.random.default_rng(0)
    pooled, within = [], []
    for draw in range(20):
        texts, labels, books = _six_books_three_against_three(rng, signal)
        blind = blind_baseline(texts, labels, n_splits=3, seed=draw, groups=label_groups(books, labels))
        assert sorted(set(blind.fold)) == [0, 1, 2]
        np.testing.assert_array_equal(blind.scores, blind_baseline_scores(texts, labels, n_splits=3, seed=draw,
                                                                          groups=books))
        pooled.append(roc_auc(blind.scores, labels))
        within.append(fold_auc(blind.scores, labels, blind.fold))
    pooled, within = np.mean(pooled), np.mean(within)
    if signal:
        assert pooled < 0.5 < within - 0.1
    else:
        assert pooled < 0.45 and abs(within - 0.5) < 0.09


def test_label_groups_only_where_every_book_has_one_label_and_each_side_two_books():
    assert label_groups(["a", "a", "b", "b", "c", "d"], [1, 1, 0, 0, 1, 0]) == ["a", "a", "b", "b", "c", "d"]
    assert label_groups(["a", "a", "b", "b"], [1, 0, 0, 0]) is None  # a book on both sides: an IID split
    assert label_groups(["a", "b", "c", "d"], [1, 1, 0, 0]) is None  # one document a book: nothing to keep whole
    assert label_groups(["a", "a", "b", "c"], [1, 1, 0, 0]) is None  # one member book: none to hold out
    texts = [" ".join(["w1"] * 5)] * 6
    with pytest.raises(InputError, match="2 groups of each class"):
        blind_baseline_scores(texts, [1, 1, 1, 0, 0, 0], groups=["a", "a", "a", "b", "c", "c"])


# ---------------------------------------------------------- labels given per book


def test_a_cluster_bootstrap_of_one_document_books_is_the_document_bootstrap():
    """Each resample draws the member books, then the non-member books, as the document bootstrap draws
    documents: with one document a book (named in the documents' order) the two are the same draws."""
    rng = np.random.default_rng(5)
    labels = np.r_[np.ones(9, int), np.zeros(12, int)]
    scores = rng.normal(size=21) + labels
    books = [f"d{i:02d}" for i in range(21)]
    np.testing.assert_array_equal(cluster_bootstrap_auc(scores, labels, books, 200, seed=4),
                                  bootstrap_auc(scores, labels, 200, seed=4))


def _chapters_of_books(n_books: int, chapters: int, book_sd: float, seed: int):
    """Scores of chapters whose books differ (a book effect of ``book_sd``), with no membership signal."""
    rng = np.random.default_rng(seed)
    scores, labels, books = [], [], []
    for b in range(n_books):
        offset = rng.normal(scale=book_sd)
        scores += list(offset + rng.normal(scale=0.3, size=chapters))
        labels += [b % 2] * chapters
        books += [f"book{b}"] * chapters
    return np.array(scores), np.array(labels), books


def test_books_not_chapters_are_the_draws_where_labels_are_given_per_book():
    """Twenty books, eight chapters each, a strong book effect and no membership: chapters resampled one by
    one give a narrow interval that misses 0.5 (160 "independent" draws); whole books give an honest one.
    (Over 40 such draws the interval by document held 0.5 in 68%, by book in 100%; with six books a side
    87%, and with three a side the percentile interval of so few books is no guide: the headline says so.)"""
    scores, labels, books = _chapters_of_books(20, 8, book_sd=1.0, seed=6)
    by_document = compute_metrics(scores, labels, n_boot_ci=1000, seed=0)
    by_book = compute_metrics(scores, labels, n_boot_ci=1000, seed=0, groups=books)
    assert by_document["auc"] == by_book["auc"] and math.isnan(by_document["ci_books"]) and by_book["ci_books"] == 20
    assert not by_document["auc_ci_low"] <= 0.5 <= by_document["auc_ci_high"]
    assert by_book["auc_ci_low"] <= 0.5 <= by_book["auc_ci_high"]
    assert by_book["auc_ci_high"] - by_book["auc_ci_low"] > 2 * (by_document["auc_ci_high"] - by_document["auc_ci_low"])
    # the t-test of the books' means: 10 against 10
    means = [scores[np.array(books) == f"book{b}"].mean() for b in range(20)]
    assert by_book["t_pvalue"] == pytest.approx(t_test_pvalue(means, [b % 2 for b in range(20)]))
    assert by_document["t_pvalue"] < 0.05 < by_book["t_pvalue"]


def test_the_rank_test_of_the_books_means_is_exact_and_one_sided():
    """Three member books above three non-member ones: p = 1/20, the smallest 3 against 3 can give; the
    reverse order 1; chapters count through their book's mean only."""
    books = ["a", "a", "b", "c", "d", "d", "e", "f"]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    high = [5.0, 7.0, 6.0, 5.5, 1.0, 9.0, 2.0, 3.0]  # book d's mean is 5.0: below every member book's
    assert compute_metrics(high, labels, groups=books, n_boot_ci=10)["books_pvalue"] == pytest.approx(1 / 20)
    assert compute_metrics([-x for x in high], labels, groups=books, n_boot_ci=10)["books_pvalue"] == pytest.approx(1.0)
    assert math.isnan(compute_metrics(high, labels, n_boot_ci=10)["books_pvalue"])


def test_a_book_with_both_labels_is_no_cluster():
    with pytest.raises(InputError, match="group 'a' has members and non-members"):
        cluster_bootstrap_auc([0.1, 0.2, 0.3, 0.4], [1, 0, 1, 0], ["a", "a", "b", "c"], 10, seed=0)


def test_a_paired_difference_over_clustered_items_resamples_whole_books():
    """Four books of ten items, every item of a book with its book's gain: the items carry four draws'
    worth of evidence, not forty. Resampling items one by one gave an interval a third as wide as the
    books give; with ``groups`` each resample draws four books with replacement, every item of each,
    so the interval is the percentile interval of the mean of four books drawn (exactly, over all
    4^4 draws: [0.15, 0.5]). The point estimate is the item mean either way."""
    import itertools

    gains = np.array([0.1, 0.2, 0.3, 0.6])
    model, base = np.repeat(gains, 10) + 0.25, np.full(40, 0.25)
    books = np.repeat(["a", "b", "c", "d"], 10)
    value, low, high = paired_difference(model, base, seed=0)
    by_book = paired_difference(model, base, seed=0, groups=books)
    exact = np.percentile([np.mean(c) for c in itertools.product(gains, repeat=4)], [2.5, 97.5])
    assert exact.tolist() == pytest.approx([0.15, 0.5])
    assert value == by_book[0] == pytest.approx(0.3)
    assert by_book[1:] == pytest.approx(tuple(exact), abs=0.03)
    assert (low, high) == pytest.approx((0.24, 0.3575))  # scipy's item bootstrap, as before
    assert by_book[2] - by_book[1] > 2.5 * (high - low)
    # one book: no interval (its spread is unknown); a constant gain over books: zero width
    assert paired_difference(model[:10], base[:10], seed=0, groups=books[:10])[1:] == pytest.approx((np.nan,) * 2,
                                                                                                   nan_ok=True)
    assert paired_difference(np.full(6, 0.5), np.zeros(6), seed=0, groups=list("aabbcc")) == (0.5, 0.5, 0.5)
    with pytest.raises(InputError, match=r"differences and groups differ in length \(40 vs 10\)"):
        paired_difference(model, base, seed=0, groups=books[:10])


def test_a_book_interval_is_never_narrower_than_the_items_one():
    """Session 65's demo run: the CopyBench fine-tune's ROUGE-L excess minus its base's on the twelve passages of
    three non-member books. The items spread from -0.066 to +0.046 (their bootstrap holds 0), but the three
    books' means happen to agree (-0.012, -0.009, -0.015), and a percentile bootstrap of three books, ten
    distinct means, gave [-0.015, -0.009]: 'interval excludes 0' from three draws. Few books can agree by
    chance and the resampling cannot tell; the interval is the union of the books' and the items' ones."""
    from scipy.stats import bootstrap

    diff = np.array([-0.0314, 0.0072, -0.0569, -0.0373, 0.0464, -0.0122, 0.0261, -0.0208, 0.0015, 0.0464,
                     -0.0429, -0.0659])
    books = ["persuasion"] * 2 + ["pride"] * 6 + ["sense"] * 4
    items = bootstrap((diff, np.zeros(12)), lambda x, y: np.mean(x - y), paired=True, n_resamples=1000,
                      method="percentile", random_state=np.random.default_rng(13)).confidence_interval
    value, low, high = paired_difference(diff, np.zeros(12), seed=13, groups=books)
    assert value == pytest.approx(diff.mean())
    assert (low, high) == pytest.approx((items.low, items.high))  # the items' interval is the wider here
    assert low < 0 < high
    gains = (np.array([0.70, 0.75, 0.74, 0.80, 0.72, 0.77]), diff)
    names = (["a", "a", "b", "b", "c", "c"], books)
    value, low, high = independent_difference(*gains, seed=13, groups=names)
    by_item = independent_difference(*gains, seed=13)
    assert low <= by_item[1] and high >= by_item[2]


def test_the_difference_in_differences_over_books_resamples_each_sides_books():
    """The member gain minus the non-member gain with each side's books resampled on their own: with one
    item a book, the two-sample bootstrap of the items (every resample's member books drawn first, in
    name order, then the non-member books'); with books of identical items, the books' spread."""
    rng = np.random.default_rng(3)
    member, nonmember = rng.normal(0.4, 0.1, 8), rng.normal(0.1, 0.1, 6)
    names = ([f"m{i}" for i in range(8)], [f"n{i}" for i in range(6)])
    value, low, high = independent_difference(member, nonmember, seed=2, groups=names)
    draw = np.random.default_rng(2)
    ref = member[draw.integers(0, 8, (1000, 8))].mean(axis=1) - nonmember[draw.integers(0, 6, (1000, 6))].mean(axis=1)
    assert value == pytest.approx(member.mean() - nonmember.mean())
    assert (low, high) == pytest.approx(tuple(np.percentile(ref, [2.5, 97.5])))
    # ten identical items per book: the items' interval is narrower than the books'
    wide = (np.repeat(member[:4], 10), np.repeat(nonmember[:4], 10))
    books = (np.repeat(names[0][:4], 10), np.repeat(names[1][:4], 10))
    by_item = independent_difference(*wide, seed=2)
    by_book = independent_difference(*wide, seed=2, groups=books)
    assert by_item[0] == pytest.approx(by_book[0])
    assert by_book[2] - by_book[1] > 2.5 * (by_item[2] - by_item[1])
    assert np.isnan(independent_difference(*wide, seed=2, groups=(books[0], ["x"] * 40))[1])  # one book a side


def test_the_metrics_table_takes_books_where_each_methods_documents_are_labelled_per_book():
    scores, labels, books = _chapters_of_books(6, 4, book_sd=1.0, seed=1)
    doc_ids = [f"{b}/ch{i % 4}" for i, b in enumerate(books)]
    docs = pd.DataFrame({"doc_id": doc_ids * 2, "label": np.r_[labels, labels], "score": np.r_[scores, scores],
                         "method": ["loss"] * 24 + ["zlib"] * 24})
    docs = docs[(docs["method"] == "loss") | docs["doc_id"].str.startswith(("book0", "book1"))]  # zlib: 2 books
    table = metrics_table(docs, benchmark="b", model="m", contaminated=False, seed=0, n_boot_ci=200,
                          books=dict(zip(doc_ids, books)))
    loss, zlib = table.set_index("method").loc["loss"], table.set_index("method").loc["zlib"]
    assert loss["ci_books"] == 6 and math.isnan(zlib["ci_books"])  # one book a side: nothing to resample
    expected = compute_metrics(scores, labels, n_boot_ci=200, seed=0, groups=books)
    assert (loss["auc_ci_low"], loss["auc_ci_high"]) == pytest.approx((expected["auc_ci_low"], expected["auc_ci_high"]))
    plain = metrics_table(docs, benchmark="b", model="m", contaminated=False, seed=0, n_boot_ci=200)
    assert plain["ci_books"].isna().all()


# ---------------------------------------------------------- summary tables

def _doc_scores(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = np.repeat([1, 0], 40)
    rows = []
    for method, shift in (("loss", 1.0), ("zlib", 0.3)):
        scores = rng.normal(size=80) + shift * labels
        rows += [
            {"doc_id": f"d{i}", "label": lab, "method": method, "score": s}
            for i, (lab, s) in enumerate(zip(labels, scores))
        ]
    return pd.DataFrame(rows)


def test_metrics_table_rows_match_compute_metrics():
    docs = _doc_scores()
    table = metrics_table(docs, benchmark="bt", model="m1", contaminated=True,
                          seed=3, n_boot_small=10, n_boot_ci=100)
    assert list(table.columns) == SUMMARY_COLUMNS
    assert list(table["method"]) == ["loss", "zlib"]
    zlib = docs[docs["method"] == "zlib"].sort_values("doc_id")  # a method's documents go in doc_id order
    expected = compute_metrics(zlib["score"], zlib["label"], n_boot_small=10, n_boot_ci=100, seed=3)
    row = table.iloc[1]
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, nan_ok=True)


def test_metrics_table_rejects_duplicate_documents():
    docs = _doc_scores()
    docs = pd.concat([docs, docs.iloc[[0]]])
    with pytest.raises(InputError, match="d0"):
        metrics_table(docs, benchmark="bt", model="m", contaminated=False, seed=0,
                      n_boot_small=2, n_boot_ci=2)


def test_merge_and_write_summary(tmp_path):
    docs = _doc_scores()
    paths = []
    for model in ("m2", "m1"):
        table = metrics_table(docs, benchmark="bt", model=model, contaminated=model == "m1",
                              seed=0, n_boot_small=5, n_boot_ci=50)
        path = tmp_path / f"{model}.csv"
        table.to_csv(path, index=False)
        paths.append(path)
    merged = merge_metrics(paths)
    assert list(merged.columns) == SUMMARY_COLUMNS
    assert list(merged["model"]) == ["m1", "m1", "m2", "m2"]
    assert list(merged["contaminated"]) == [True, True, False, False]
    # a blank (or unknown) contaminated cell: bool(nan) read it as a contaminated model
    edited = pd.read_csv(paths[0]).astype({"contaminated": object})
    edited.loc[1, "contaminated"] = None
    edited.to_csv(tmp_path / "edited.csv", index=False)
    with pytest.raises(InputError) as err:
        merge_metrics([tmp_path / "edited.csv"])
    assert str(err.value) == (f"{tmp_path / 'edited.csv'}, line 3, column contaminated: nan is not true or false "
                              f"(True/False, yes/no or 1/0)")

    write_summary(merged, tmp_path / "s.csv", tmp_path / "s.md")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "s.csv"), merged, check_dtype=False)
    md = (tmp_path / "s.md").read_text()
    assert "higher = more likely a member" in md
    first = merged.iloc[0]
    assert f"| {first['auc']:.3f} |" in md
    assert f"{first['t_pvalue']:.2e}" in md
    assert md == summary_markdown(merged)


def test_merge_metrics_names_file_and_missing_column(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"benchmark": ["b"], "model": ["m"]}).to_csv(bad, index=False)
    with pytest.raises(InputError, match=r"bad\.csv.*'contaminated'"):
        merge_metrics([bad])


# ---------------------------------------------------------------- CLI

def _write_cli_csv(path):
    docs = _doc_scores(5)
    docs["label"] = docs["label"].map({1: "true", 0: "false"})
    docs.to_csv(path, index=False)
    return docs


def test_cli_values_equal_compute_metrics(tmp_path, capsys):
    src = tmp_path / "docs.csv"
    docs = _write_cli_csv(src)
    out = tmp_path / "out" / "metrics.csv"
    rc = stats_main(["--input", str(src), "--group-col", "method", "--member-value", "true",
                     "--output", str(out), "--seed", "2", "--n-boot", "10", "--n-boot-ci", "100"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "auc_binarized" in printed and "loss" in printed
    table = pd.read_csv(out)
    assert list(table.columns) == ["method", *METRIC_COLUMNS]
    for _, row in table.iterrows():
        part = docs[docs["method"] == row["method"]]
        expected = compute_metrics(part["score"], (part["label"] == "true").astype(int),
                                   n_boot_small=10, n_boot_ci=100, seed=2)
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, nan_ok=True)


def test_cli_string_labels_with_member_value(tmp_path):
    src = tmp_path / "docs.csv"
    pd.DataFrame({"s": [0.9, 0.8, 0.4, 0.7, 0.3, 0.2],
                  "group": ["seen"] * 3 + ["unseen"] * 3}).to_csv(src, index=False)
    out = tmp_path / "m.csv"
    rc = stats_main(["--input", str(src), "--score-col", "s", "--label-col", "group",
                     "--member-value", "seen", "--output", str(out), "--n-boot-ci", "50"])
    assert rc == 0
    assert pd.read_csv(out)["auc"].iloc[0] == pytest.approx(8 / 9)


def test_cli_missing_column_exits_2_naming_file_and_column(tmp_path, capsys):
    src = tmp_path / "docs.csv"
    _write_cli_csv(src)
    assert stats_main(["--input", str(src), "--score-col", "loss_score"]) == 2
    err = capsys.readouterr().err
    assert "'loss_score'" in err and "docs.csv" in err


def test_cli_missing_file_exits_2(tmp_path, capsys):
    assert stats_main(["--input", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv" in capsys.readouterr().err


def test_cli_non_numeric_score_names_line(tmp_path, capsys):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.1,1\n0.5,0\nabc,1\n0.2,0\n")
    assert stats_main(["--input", str(src)]) == 2
    err = capsys.readouterr().err
    assert "line 4" in err and "'abc'" in err and "'score'" in err


def test_cli_single_class_labels_exit_2(tmp_path, capsys):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.1,1\n0.5,1\n")
    assert stats_main(["--input", str(src)]) == 2
    assert "single value" in capsys.readouterr().err


def test_cli_member_value_absent_exit_2(tmp_path, capsys):
    src = tmp_path / "docs.csv"
    src.write_text("score,label\n0.1,a\n0.5,b\n")
    assert stats_main(["--input", str(src), "--member-value", "c"]) == 2
    assert "'c'" in capsys.readouterr().err


def test_summary_markdown_prints_books_as_counts_and_their_pvalue_as_a_pvalue(tmp_path):
    """metrics.md printed a book count read back from the CSV as "20.000" and a books_pvalue of 1e-4 (9,999
    permutations) as "0.000", a p-value of 0."""
    docs = _doc_scores()
    books = {d: f"book{int(d[1:]) // 5}" for d in docs["doc_id"]}
    per_book = metrics_table(docs, benchmark="bt", model="m", contaminated=True, seed=0, n_boot_small=2,
                             n_boot_ci=20, books=books)
    by_document = metrics_table(docs, benchmark="bt", model="m0", contaminated=False, seed=0, n_boot_small=2,
                                n_boot_ci=20)
    for name, table in (("a", per_book), ("b", by_document)):
        table.to_csv(tmp_path / f"{name}.csv", index=False)
    merged = merge_metrics([tmp_path / "a.csv", tmp_path / "b.csv"])
    merged.loc[0, "books_pvalue"] = 1e-4
    cells = [line.strip("| ").split(" | ") for line in summary_markdown(merged).splitlines()[4:]]
    at = {c: i for i, c in enumerate(merged.columns)}
    assert [row[at["model"]] for row in cells] == list(merged["model"]) and merged.loc[0, "model"] == "m"
    assert merged["ci_books"].dtype == float and merged.loc[0, "ci_books"] == len(set(books.values())) == 16
    assert (cells[0][at["ci_books"]], cells[0][at["books_pvalue"]]) == ("16", "1.00e-04")
    assert (cells[-1][at["ci_books"]], cells[-1][at["books_pvalue"]]) == ("n/a", "n/a")


def test_a_methods_rows_in_another_order_give_the_same_bootstrap():
    """The bootstrap draws positions: each method's documents go in doc_id order, so two methods (or one
    method's rows read in another order) are resampled alike, as the pairing by seed promises."""
    from memaudit.stats.summary import metrics_table

    rng = np.random.default_rng(4)
    docs = pd.DataFrame({"doc_id": [f"d{i:02d}" for i in range(40)], "label": [i % 2 for i in range(40)],
                         "score": rng.normal(size=40)})
    table = pd.concat([docs.assign(method="a"), docs.iloc[::-1].assign(method="b")], ignore_index=True)
    out = metrics_table(table, benchmark="b", model="m", contaminated=True, n_boot_small=10, n_boot_ci=200,
                        seed=0).set_index("method")
    numeric = out.select_dtypes("number").columns
    pd.testing.assert_series_equal(out.loc["a", numeric], out.loc["b", numeric], check_names=False)


def test_the_rank_test_with_one_book_a_side_is_nan_and_selection_refuses_bad_labels():
    from memaudit.stats.metrics import group_rank_pvalue
    from memaudit.stats.selection import selection_metrics

    assert math.isnan(group_rank_pvalue([1, 2, 3, 4, 5], [1, 1, 0, 0, 0], ["a", "a", "b", "c", "d"]))
    with pytest.raises(InputError, match="labels must be 0 .non-member. or 1 .member."):
        selection_metrics(np.arange(35.0), [2] * 10 + [0] * 25, [f"d{i}" for i in range(35)])


def test_a_blind_baseline_on_too_few_documents_names_the_benchmarks_documents_file(tmp_path):
    """One member among four documents: the job's one line named no file, so nothing said which benchmark."""
    from memaudit.io import write_jsonl
    from memaudit.stats.workflow import run_blind_baseline

    documents = tmp_path / "documents.jsonl"
    write_jsonl(documents, [{"doc_id": f"d{i}", "text": f"text number {i}", "meta": {"label": int(i == 0)}}
                            for i in range(4)])
    with pytest.raises(InputError) as err:
        run_blind_baseline(documents, tmp_path / "scores.csv", tmp_path / "metrics.csv", benchmark="tiny",
                           stats={"blind_folds": 5, "n_boot_small": 10, "n_boot_ci": 10}, seed=0)
    assert str(err.value) == (f"{documents}: blind baseline needs at least 2 documents per class, got 1 member(s) "
                              "and 3 non-member(s)")
