"""Membership-inference evaluation statistics for one set of document scores.

Conventions (see :mod:`memaudit`): ``score`` higher = more likely a member;
``label`` 1 = member (seen in training), 0 = non-member.

The statistics follow the DE-COP evaluation (Duarte et al., 2024, section 5.1):
the ROC AUC, the "binarized" AUC of the reference code (a Youden-optimal
threshold, then the AUC of the thresholded 0/1 predictions), a 10-resample
bootstrap reported as mean and standard deviation -- of the binarized AUC, as in
the paper's tables, and of the ROC AUC -- and a two-sample t-test between the
groups.  In addition we report a 1000-resample percentile
confidence interval and the TPR at low FPR (Carlini et al., 2022, "Membership
inference attacks from first principles"), which is what matters when a
detector is used to accuse a single document.

Where labels are given per book (every book's documents share one label: ``split_by: book``, a
user's ``labels`` file, a QA set split by article), a book's chapters are not independent draws:
the interval and the t-test then take the book as their unit (``groups``): the bootstrap resamples
whole books within each class (a cluster bootstrap; Field & Welsh 2007), the t-test compares the
books' mean scores, ``ci_books`` says how many books the interval rests on (NaN where it
resampled documents) and ``books_pvalue`` is a rank test of the books' means, the one that holds
with few books. The 10-resample mean and standard deviation stay DE-COP's, by document.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats
from sklearn.metrics import roc_auc_score, roc_curve

from memaudit.errors import InputError

# Its code version is the "stats" step's (memaudit.versions.STEPS): bump it with every change here that
# alters a statistic.

METRIC_COLUMNS = [
    "n_member",
    "n_nonmember",
    "auc",
    "auc_binarized",
    "auc_boot_mean",
    "auc_boot_std",
    "auc_binarized_boot_mean",
    "auc_binarized_boot_std",
    "auc_ci_low",
    "auc_ci_high",
    "ci_books",
    "books_pvalue",
    "tpr_at_1pct_fpr",
    "tpr_at_01pct_fpr",
    "t_pvalue",
]

# Absolute slack when comparing an empirical FPR k/n with a target such as 0.01:
# k/n is computed in floating point and may land one ulp above the target.
_FPR_TOLERANCE = 1e-12


def _as_arrays(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert to (float scores, int 0/1 labels) of equal length."""
    try:
        scores = np.asarray(scores, dtype=float).ravel()
    except (TypeError, ValueError):
        raise InputError("scores must be numbers") from None
    labels_raw = np.asarray(labels).ravel()
    if scores.shape != labels_raw.shape:
        raise InputError(
            f"scores and labels differ in length ({scores.size} vs {labels_raw.size})"
        )
    try:
        labels_num = labels_raw.astype(float)
    except (TypeError, ValueError):
        raise InputError("labels must be 0 (non-member) or 1 (member)") from None
    bad = ~np.isin(labels_num, (0.0, 1.0))
    if bad.any():
        raise InputError(
            f"labels must be 0 (non-member) or 1 (member); "
            f"{int(bad.sum())} other value(s), e.g. {labels_raw[bad][0]!r}"
        )
    n_nonfinite = int((~np.isfinite(scores)).sum())
    if n_nonfinite:
        raise InputError(f"{n_nonfinite} score(s) are not finite (nan or inf)")
    return scores, labels_num.astype(int)


def _both_classes(labels: np.ndarray) -> bool:
    return bool((labels == 1).any() and (labels == 0).any())


def roc_auc(scores, labels) -> float:
    """Area under the ROC curve; ``nan`` when only one class is present.

    Equals the Mann-Whitney probability ``P(s_member > s_nonmember) +
    0.5 * P(s_member = s_nonmember)`` over all member/non-member pairs.
    """
    scores, labels = _as_arrays(scores, labels)
    if not _both_classes(labels):
        return math.nan
    return float(roc_auc_score(labels, scores))


def fold_auc(scores, labels, folds) -> float:
    """The cross-validated AUC of out-of-fold scores: the Mann-Whitney probability over the member/non-member
    pairs that one fold holds, ``sum_f U_f / sum_f n1_f n0_f`` (``U_f``: the fold's pairs a member wins, a tie
    one half), i.e. each fold's AUC weighted by its pairs; a fold of one class adds nothing. ``nan`` where no
    fold holds both classes.

    Each fold's scores come from a model fitted without it, with an intercept of its own: a pair across two
    folds compares the two models' offsets, not the documents, and one AUC over the pooled scores mixes them
    in (Parker et al. 2007; Forman & Scholz 2010). The pooled AUC is biased down by that, most where whole
    books are held out (the held-out side is short in training, its fold's intercept leans the other way).
    Pairs within folds keep each comparison inside one model; weighting folds by their pairs rather than
    averaging their AUCs equally lets a fold of one member and many non-members count for what it holds.
    """
    scores, labels = _as_arrays(scores, labels)
    folds = _fold_codes(folds, scores.size)
    if not _both_classes(labels):
        return math.nan
    order = np.r_[np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)]
    return float(_fold_auc_of_rows(_fold_keys(scores)[order][None, :], folds[order][None, :],
                                   int((labels == 1).sum()))[0])


def _fold_codes(folds, n: int) -> np.ndarray:
    """``folds`` (any labels) as codes 0, 1, ... of length ``n``."""
    folds = np.asarray(folds).ravel()
    if folds.size != n:
        raise InputError(f"scores and folds differ in length ({n} vs {folds.size})")
    return np.unique(folds, return_inverse=True)[1].astype(int)


def _fold_keys(scores: np.ndarray) -> np.ndarray:
    """Dense ranks 1..n of ``scores`` (ties share one): the order and ties of any subset, in a known range."""
    return scipy_stats.rankdata(scores, method="dense")


def _fold_auc_of_rows(keys: np.ndarray, folds: np.ndarray, n_member: int) -> np.ndarray:
    """:func:`fold_auc` of each row of ``keys`` (:func:`_fold_keys`, resampled) with its ``folds`` (codes),
    the first ``n_member`` entries of each row the members; ``nan`` for a row where no fold holds both.

    Vectorised over rows: ``fold * (n + 1) + key`` orders every document of a higher fold above all of a lower
    one, so the rank-sum U of the whole row (:func:`_auc_of_rows`) counts every within-fold pair as it should
    plus every cross-fold pair whose member's fold is the higher, ``sum_a n1_a sum_{b<a} n0_b``, subtracted.
    """
    n_fold = int(folds.max()) + 1 if folds.size else 0
    width = keys.shape[1] + 1
    shifted = folds * float(width) + keys
    n_nonmember = keys.shape[1] - n_member
    u_all = _auc_of_rows(shifted, n_member) * (n_member * n_nonmember)
    n1 = np.stack([(folds[:, :n_member] == f).sum(axis=1) for f in range(n_fold)], axis=1)
    n0 = np.stack([(folds[:, n_member:] == f).sum(axis=1) for f in range(n_fold)], axis=1)
    below = np.cumsum(n0, axis=1) - n0  # non-members of the lower folds
    across = (n1 * below).sum(axis=1)
    pairs = (n1 * n0).sum(axis=1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, (u_all - across) / pairs, np.nan)


def binarized_auc(scores, labels) -> float:
    """AUC after thresholding at the Youden point, as in the DE-COP reference code.

    The threshold ``theta`` maximises Youden's ``J = TPR - FPR`` over the points
    of ``sklearn.metrics.roc_curve``; documents with ``score >= theta`` are
    predicted members and the AUC of these 0/1 predictions is returned, which is
    ``(TPR(theta) + TNR(theta)) / 2 = (1 + J_max) / 2`` (balanced accuracy).

    The threshold is chosen on the same documents it is evaluated on, so the
    value is in-sample and optimistic: it is never below 0.5 and it is above
    0.5 even for a score with no signal.  It is reported only for comparison
    with DE-COP's tables; use :func:`roc_auc` for conclusions.
    """
    scores, labels = _as_arrays(scores, labels)
    if not _both_classes(labels):
        return math.nan
    fpr, tpr, _ = roc_curve(labels, scores)
    # argmax takes the first (highest-threshold) point among ties in J. The AUC of the 0/1
    # predictions ``score >= theta`` is read off that point, (TPR + 1 - FPR) / 2: the same value
    # as roc_auc_score of the predictions (to an ulp; tests/test_stats.py), at half the cost,
    # which matters in the bootstrap.
    best = int(np.argmax(tpr - fpr))
    return float((tpr[best] + 1.0 - fpr[best]) / 2.0)


def bootstrap_auc(
    scores, labels, n_resamples: int, seed: int, *, binarized: bool = False, folds=None
) -> np.ndarray:
    """AUCs of ``n_resamples`` stratified bootstrap resamples of the documents.

    Each resample draws ``N_member`` members and ``N_nonmember`` non-members
    with replacement from their own group (DE-COP section 5.1: "we sample M
    elements from each group, where M is either N_S or N_C"), so both classes
    are always present.  With ``binarized=True`` each resample is scored with
    :func:`binarized_auc`, which is what the DE-COP reference code reports;
    the default is the threshold-free :func:`roc_auc`.

    Resample ``b`` uses the ``b``-th draws of ``numpy.random.default_rng(seed)``,
    so the result is a deterministic function of ``seed`` and the first ``k``
    values do not depend on ``n_resamples``.  Returns an empty array when a
    class is missing.

    With ``folds`` (out-of-fold scores: each document's fold), each resample's documents keep their folds
    and it is scored with :func:`fold_auc` (the same draws; ``nan`` for a resample no fold of which holds
    both classes); not with ``binarized``.
    """
    scores, labels = _as_arrays(scores, labels)
    if folds is not None:
        if binarized:
            raise InputError("bootstrap_auc: a binarized AUC within folds is not defined here")
        folds = _fold_codes(folds, scores.size)
    if n_resamples < 0:
        raise InputError(f"n_resamples must be >= 0, got {n_resamples}")
    if not _both_classes(labels):
        return np.array([], dtype=float)
    values = scores if folds is None else _fold_keys(scores)
    members = values[labels == 1]
    nonmembers = values[labels == 0]
    if folds is not None:
        member_folds, nonmember_folds = folds[labels == 1], folds[labels == 0]
    rng = np.random.default_rng(seed)
    boot_labels = np.r_[np.ones(members.size, int), np.zeros(nonmembers.size, int)]
    out = np.empty(n_resamples, dtype=float)
    # Resamples are drawn in order, one at a time, so resample b is the same whatever
    # n_resamples; they are scored in chunks to bound memory on large benchmarks.
    chunk = max(1, min(256, 2_000_000 // max(scores.size, 1)))
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        draws = np.empty((stop - start, scores.size), dtype=float)
        draw_folds = np.empty((stop - start, scores.size), dtype=int)
        # rng.integers draws what rng.choice(..., replace=True) draws (numpy's Generator picks
        # the indices that way; tests/test_stats.py checks it) at half the cost per call.
        for row, row_folds in zip(draws, draw_folds):
            picked = rng.integers(0, members.size, size=members.size)
            row[: members.size] = members[picked]
            if folds is not None:
                row_folds[: members.size] = member_folds[picked]
            picked = rng.integers(0, nonmembers.size, size=nonmembers.size)
            row[members.size :] = nonmembers[picked]
            if folds is not None:
                row_folds[members.size :] = nonmember_folds[picked]
        if folds is not None:
            out[start:stop] = _fold_auc_of_rows(draws, draw_folds, members.size)
        elif binarized:
            out[start:stop] = [binarized_auc(row, boot_labels) for row in draws]
        else:
            out[start:stop] = _auc_of_rows(draws, members.size)
    return out


def label_groups(units: Sequence[str], labels) -> list[str] | None:
    """``units`` (each document's book) as :func:`blind_baseline_scores`'s ``groups`` where the labels are
    given per unit: every unit's documents share one label, some unit has more than one document, and
    each class has at least 2 units; else None (folds by document: nothing to keep whole, or too few
    books to hold one out)."""
    labels = np.asarray(labels).ravel()
    by_unit: dict[str, set[int]] = {}
    for unit, label in zip(units, labels):
        by_unit.setdefault(str(unit), set()).add(int(label))
    if len(by_unit) == len(labels) or any(len(v) > 1 for v in by_unit.values()):
        return None
    per_class = [sum(1 for v in by_unit.values() if c in v) for c in (0, 1)]
    return [str(u) for u in units] if min(per_class) >= 2 else None


def cluster_bootstrap_auc(scores, labels, groups, n_resamples: int, seed: int, *, folds=None) -> np.ndarray:
    """AUCs of ``n_resamples`` stratified cluster-bootstrap resamples: each draws, with replacement, as
    many member groups as there are (every document of each drawn group) and as many non-member groups.

    For labels given per book (``groups``: each document's book, one label per book): the books, not
    their chapters, are the independent draws. Resample ``b`` uses the ``b``-th draws of
    ``numpy.random.default_rng(seed)``; a group with both labels raises :class:`InputError`.

    With ``folds`` (out-of-fold scores), each drawn document keeps its fold and the resample is scored with
    :func:`fold_auc` (the same draws; ``nan`` for a resample no fold of which holds both classes: with folds
    by book, one whose drawn member books and non-member books never share a fold).
    """
    scores, labels = _as_arrays(scores, labels)
    if folds is not None:
        folds = _fold_codes(folds, scores.size)
        scores = _fold_keys(scores)
    groups = np.asarray(groups, dtype=str).ravel()
    if groups.shape != scores.shape:
        raise InputError(f"scores and groups differ in length ({scores.size} vs {groups.size})")
    if n_resamples < 0:
        raise InputError(f"n_resamples must be >= 0, got {n_resamples}")
    if not _both_classes(labels):
        return np.array([], dtype=float)
    sides = []
    for label in (1, 0):
        names = np.unique(groups[labels == label])
        mixed = np.intersect1d(names, groups[labels != label])
        if mixed.size:
            raise InputError(f"group {str(mixed[0])!r} has members and non-members: not a per-group label")
        sides.append([np.flatnonzero((groups == g) & (labels == label)) for g in names])
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples, dtype=float)
    for b in range(n_resamples):
        members, nonmembers = (np.concatenate([side[i] for i in rng.integers(0, len(side), size=len(side))])
                               for side in sides)
        picked = np.r_[members, nonmembers]
        out[b] = (_auc_of_rows(scores[picked][None, :], members.size)[0] if folds is None
                  else _fold_auc_of_rows(scores[picked][None, :], folds[picked][None, :], members.size)[0])
    return out


def group_means(scores, labels, groups) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each group's name, mean score and label, groups in sorted order (a book's chapters count once)."""
    scores, labels = _as_arrays(scores, labels)
    frame: dict = {}
    for score, label, group in zip(scores, labels, np.asarray(groups, dtype=str).ravel()):
        frame.setdefault((str(group), int(label)), []).append(score)
    keys = sorted(frame)
    return ([k[0] for k in keys], np.array([float(np.mean(frame[k])) for k in keys]),
            np.array([k[1] for k in keys], dtype=int))


def group_t_test_pvalue(scores, labels, groups) -> float:
    """:func:`t_test_pvalue` of the groups' mean scores."""
    _, means, labels = group_means(scores, labels, groups)
    return t_test_pvalue(means, labels)


def group_rank_pvalue(scores, labels, groups, *, seed: int = 0) -> float:
    """One-sided p-value that member groups score higher: the Mann-Whitney U test of the groups' mean
    scores, its null distribution by permutation (``scipy.stats.mannwhitneyu`` with a
    ``PermutationMethod``: every split where there are at most 9,999, ties included, else 9,999 seeded
    draws). The test that holds with few books, where no interval does: 3 member books above 3
    non-member ones give 0.05, the smallest p-value 3 against 3 can give. ``nan`` with fewer than two
    books a side (the workflow's :func:`label_groups` never gives that)."""
    _, means, labels = group_means(scores, labels, groups)
    members, nonmembers = means[labels == 1], means[labels == 0]
    if members.size < 2 or nonmembers.size < 2:  # scipy's permutation test needs two a side
        return math.nan
    method = scipy_stats.PermutationMethod(n_resamples=9999, random_state=seed)
    return float(scipy_stats.mannwhitneyu(members, nonmembers, alternative="greater", method=method).pvalue)


def _auc_of_rows(draws: np.ndarray, n_member: int) -> np.ndarray:
    """ROC AUC of each row of ``draws`` whose first ``n_member`` entries are the members.

    Mann-Whitney form with mid-ranks for ties:
    ``AUC = (R_member - n1 (n1 + 1) / 2) / (n1 n0)`` where ``R_member`` is the
    sum of the members' ranks among all ``n1 + n0`` scores.  Vectorised over
    rows because one ``roc_auc_score`` call per resample dominates the run
    time of a summary with 1000 resamples per method.
    """
    n_nonmember = draws.shape[1] - n_member
    ranks = scipy_stats.rankdata(draws, axis=1)
    rank_sum = ranks[:, :n_member].sum(axis=1)
    return (rank_sum - n_member * (n_member + 1) / 2) / (n_member * n_nonmember)


def tpr_at_fpr(scores, labels, fpr: float) -> float:
    """Highest TPR reachable by a threshold whose FPR is at most ``fpr``.

    ``max { TPR(t) : FPR(t) <= fpr }`` over every threshold of
    ``roc_curve(..., drop_intermediate=False)``, which includes the
    "reject all" point (FPR = TPR = 0), so the set is never empty.

    The empirical FPR moves in steps of ``1 / n_nonmember``.  When
    ``n_nonmember < 1 / fpr`` no threshold can flag even one non-member, so the
    value is the TPR at FPR = 0: the fraction of members scoring strictly above
    every non-member.  It is then a statement about the single highest
    non-member score, not about the target FPR, and is very noisy.
    """
    scores, labels = _as_arrays(scores, labels)
    if not 0.0 <= fpr <= 1.0:
        raise InputError(f"fpr must be in [0, 1], got {fpr}")
    if not _both_classes(labels):
        return math.nan
    fprs, tprs, _ = roc_curve(labels, scores, drop_intermediate=False)
    return float(tprs[fprs <= fpr + _FPR_TOLERANCE].max())


def t_test_pvalue(scores, labels) -> float:
    """Two-sided p-value of Welch's t-test of ``H0: mean(member) = mean(non-member)``.

    ``t = (m1 - m0) / sqrt(s1^2/n1 + s0^2/n0)`` with Welch-Satterthwaite degrees
    of freedom (``scipy.stats.ttest_ind(equal_var=False)``).  ``nan`` when a
    group has fewer than 2 documents, or both groups have zero variance.

    Unlike DE-COP, which pools the documents of all 10 bootstrap resamples
    before testing (counting each document about 10 times and so shrinking the
    p-value), this tests the original documents once each.

    Zero variance is judged up to float rounding: a group whose scores differ by
    no more than a few units in the last place of their magnitude (one mean summed
    in another order) is constant. scipy alone would return p = 0 for two constant
    groups with different means (t = inf: e.g. 0/1 scores, all members 1 and all
    non-members 0, read as infinitely significant from 3 documents against 3),
    and a t of 1.4 for the same three numbers in both groups written with rounding
    noise. The scores are centred on their median first: the test is unchanged
    by a shift, and scores far from 0 (log-likelihood sums) keep their digits.
    """
    scores, labels = _as_arrays(scores, labels)
    members = scores[labels == 1]
    nonmembers = scores[labels == 0]
    if members.size < 2 or nonmembers.size < 2:
        return math.nan
    scale = float(np.abs(scores).max())
    if _constant(members, scale) and _constant(nonmembers, scale):
        return math.nan
    shift = float(np.median(scores))
    # From the groups' statistics: ttest_ind on a constant group warns of precision loss (it
    # cannot tell a constant from a nearly constant group), and the variance of a group constant
    # up to rounding is 0, not the rounding's.
    moments = [((g - shift).mean(), 0.0 if _constant(g, scale) else (g - shift).std(ddof=1), g.size)
               for g in (members, nonmembers)]
    result = scipy_stats.ttest_ind_from_stats(*moments[0], *moments[1], equal_var=False)
    return float(result.pvalue)


def _constant(values: np.ndarray, scale: float) -> bool:
    """Whether ``values`` are one number up to float rounding at ``scale`` (the scores' magnitude)."""
    return float(np.ptp(values)) <= 8 * np.finfo(float).eps * max(scale, np.finfo(float).tiny)


def compute_metrics(
    scores, labels, *, n_boot_small: int = 10, n_boot_ci: int = 1000, seed: int = 0, groups=None, folds=None
) -> dict:
    """All of :data:`METRIC_COLUMNS` for one detector on one document set.

    - ``auc``: :func:`roc_auc`; ``auc_binarized``: :func:`binarized_auc`.
    - ``auc_boot_mean`` / ``auc_boot_std``: mean and sample standard deviation
      (ddof=1) of the ROC AUC (:func:`bootstrap_auc`) over ``n_boot_small``
      stratified resamples.
    - ``auc_binarized_boot_mean`` / ``auc_binarized_boot_std``: the same over the
      same resamples (same ``seed``) of :func:`binarized_auc`, the Youden threshold
      re-chosen in each resample: DE-COP's protocol (10 resamples), the
      ``mean_{std}`` entries of its Table 2.
    - ``auc_ci_low`` / ``auc_ci_high``: 2.5th and 97.5th percentiles of
      ``n_boot_ci`` resamples (percentile bootstrap 95% interval); with ``groups``
      (each document's book, labels given per book), of :func:`cluster_bootstrap_auc`,
      and ``ci_books`` the number of books; ``books_pvalue``: :func:`group_rank_pvalue`.
    - ``tpr_at_1pct_fpr`` / ``tpr_at_01pct_fpr``: :func:`tpr_at_fpr` at 1% and 0.1%.
    - ``t_pvalue``: :func:`t_test_pvalue` (with ``groups``: :func:`group_t_test_pvalue`).

    With ``folds`` (out-of-fold scores of models fitted apart, the blind baseline: each document's fold),
    ``auc`` is :func:`fold_auc` and ``auc_boot_*`` and ``auc_ci_*`` are of the same within-fold AUC over the
    same resamples (those where no fold holds both classes left out); the other columns are of the scores
    as they are, pooled.

    Non-finite scores raise :class:`InputError`.  With a single class every
    metric is ``nan`` (the counts are still filled in) so that one degenerate
    method does not abort a whole summary.
    """
    scores, labels = _as_arrays(scores, labels)
    n_member = int((labels == 1).sum())
    n_nonmember = int((labels == 0).sum())
    out: dict = {name: math.nan for name in METRIC_COLUMNS}
    out["n_member"] = n_member
    out["n_nonmember"] = n_nonmember
    if not _both_classes(labels):
        return out

    out["auc"] = roc_auc(scores, labels) if folds is None else fold_auc(scores, labels, folds)
    out["auc_binarized"] = binarized_auc(scores, labels)
    for prefix, binarized in (("auc_boot", False), ("auc_binarized_boot", True)):
        small = bootstrap_auc(scores, labels, n_boot_small, seed, binarized=binarized,
                              folds=None if binarized else folds)
        small = small[np.isfinite(small)]
        if small.size:
            out[f"{prefix}_mean"] = float(small.mean())
            out[f"{prefix}_std"] = float(small.std(ddof=1)) if small.size > 1 else math.nan
    if groups is None:
        wide = bootstrap_auc(scores, labels, n_boot_ci, seed, folds=folds)
    else:
        wide = cluster_bootstrap_auc(scores, labels, groups, n_boot_ci, seed, folds=folds)
        out["ci_books"] = int(np.unique(np.asarray(groups, dtype=str)).size)
        out["books_pvalue"] = group_rank_pvalue(scores, labels, groups, seed=seed)
    wide = wide[np.isfinite(wide)]
    if wide.size:
        low, high = np.percentile(wide, [2.5, 97.5])
        out["auc_ci_low"] = float(low)
        out["auc_ci_high"] = float(high)
    out["tpr_at_1pct_fpr"] = tpr_at_fpr(scores, labels, 0.01)
    out["tpr_at_01pct_fpr"] = tpr_at_fpr(scores, labels, 0.001)
    out["t_pvalue"] = t_test_pvalue(scores, labels) if groups is None else group_t_test_pvalue(scores, labels, groups)
    return out


def holds_zero(low: float, high: float) -> bool | None:
    """Whether a difference's interval holds 0; None (blank in the CSV) where there is no interval (nan
    bounds: a group of one), which neither holds 0 nor excludes it."""
    return None if np.isnan(low) or np.isnan(high) else bool(low <= 0 <= high)


def paired_difference(a: np.ndarray, b: np.ndarray, *, seed: int, n_resamples: int = 1000,
                      groups=None) -> tuple[float, float, float]:
    """Mean of ``a - b`` over paired items and its 95% paired bootstrap interval (scipy).

    With ``groups`` (each pair's book, where items come several to a book and labels are given per book:
    :func:`label_groups`), a cluster bootstrap instead: each resample draws as many books as there are,
    with replacement, and takes every pair of each (:func:`_cluster_means`), since a book's items are
    not independent draws (as :func:`cluster_bootstrap_auc`), widened to hold the items' interval where it is
    the wider (:func:`_wider`: a few books can agree by chance). The point estimate is the item mean either way.

    One pair (or none), or one book, gives no interval (nan bounds): a single difference says nothing of
    its spread, and a zero-width interval there would read as certain. Every difference the same over two
    or more pairs (books) is the bootstrap's own zero-width answer."""
    from scipy.stats import bootstrap

    diff = np.asarray(a, float) - np.asarray(b, float)
    if len(diff) < 2 or (groups is not None and _n_groups(diff, groups, "differences") < 2):
        return (float(diff.mean()) if len(diff) else math.nan), math.nan, math.nan
    if np.all(diff == diff[0]):
        m = float(diff.mean())
        return m, m, m
    res = bootstrap((np.asarray(a, float), np.asarray(b, float)), lambda x, y: np.mean(x - y), paired=True,
                    n_resamples=n_resamples, method="percentile", random_state=np.random.default_rng(seed))
    items = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if groups is not None:
        draws = _cluster_means(diff, groups, np.random.default_rng(seed), n_resamples)
        return float(diff.mean()), *_wider(_percentile_interval(draws), items, diff, groups)
    return float(diff.mean()), *items


def independent_difference(a: np.ndarray, b: np.ndarray, *, seed: int, n_resamples: int = 1000,
                           groups=None) -> tuple[float, float, float]:
    """``mean(a) - mean(b)`` of two independent samples and its 95% percentile bootstrap interval
    (scipy, each sample resampled on its own). With ``groups`` (``(a's books, b's books)``: see
    :func:`paired_difference`), each sample's books are resampled on their own, every item of each drawn
    book (``numpy.random.default_rng(seed)`` draws ``a``'s books for every resample, then ``b``'s), widened to
    hold the items' interval where it is the wider (:func:`_wider`). A
    sample of one item (one book) gives no interval (nan bounds): its spread is unknown, and holding it
    fixed while the other is resampled would make the interval too narrow (a one-item sample read as
    certain)."""
    from scipy.stats import bootstrap

    a, b = np.asarray(a, float), np.asarray(b, float)
    value = float(a.mean() - b.mean()) if len(a) and len(b) else float("nan")
    if len(a) < 2 or len(b) < 2 or (groups is not None
                                    and min(_n_groups(x, g, "gains") for x, g in zip((a, b), groups)) < 2):
        return value, math.nan, math.nan
    if np.all(a == a[0]) and np.all(b == b[0]):
        return value, value, value
    res = bootstrap((a, b), lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis),
                    n_resamples=n_resamples, method="percentile", vectorized=True,
                    random_state=np.random.default_rng(seed))
    items = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if groups is not None:
        rng = np.random.default_rng(seed)
        draws = _cluster_means(a, groups[0], rng, n_resamples)
        books = _percentile_interval(draws - _cluster_means(b, groups[1], rng, n_resamples))
        return value, *_wider(books, items, np.concatenate([a, b]), [*groups[0], *groups[1]])
    return value, *items


def _n_groups(values: np.ndarray, groups, what: str) -> int:
    groups = np.asarray(groups, dtype=str).ravel()
    if groups.size != len(values):
        raise InputError(f"{what} and groups differ in length ({len(values)} vs {groups.size})")
    return int(np.unique(groups).size)


def _cluster_means(values: np.ndarray, groups, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """Means of ``n_resamples`` cluster-bootstrap resamples of ``values``: resample ``b`` draws as many groups
    as there are (the ``b``-th row of ``rng.integers``, groups in name order), with replacement, and takes
    every value of each drawn group (Field & Welsh 2007): the sum of the drawn groups' sums over the sum
    of their sizes."""
    _, index = np.unique(np.asarray(groups, dtype=str).ravel(), return_inverse=True)
    sums, sizes = np.bincount(index, weights=values), np.bincount(index)
    picks = rng.integers(0, sums.size, size=(n_resamples, sums.size))
    return sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)


def _wider(books: tuple[float, float], items: tuple[float, float], values: np.ndarray,
           groups) -> tuple[float, float]:
    """The books' interval widened to hold the items' one, where a book holds more than one item: a few books
    whose means agree by chance give a percentile bootstrap of a few distinct means, narrower than the items
    alone show (session 65's demo: three non-member books, [-0.015, -0.009] where the items gave [-0.031,
    0.009]), and no resampling of three books can tell. Clustering widens an interval, never narrows it; with
    one item a book the two are the same draws (the books' interval alone)."""
    if len(set(np.asarray(groups, dtype=str).ravel())) == len(values):
        return books
    return min(books[0], items[0]), max(books[1], items[1])


def _percentile_interval(draws: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)
