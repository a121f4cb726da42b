"""FDR-controlled selection of member documents: which texts may be *named* as training data.

A detector's AUC says how well it ranks; a copyright holder needs a set: "of the texts we name,
at most a fraction q are wrongly named". Two procedures give such a set.

**Conformal p-values with Benjamini-Hochberg** (Bates et al., 2023, "Testing for outliers with
conformal p-values"; proposed for training-data detection in arXiv 2510.09717), for any
detector's scores (higher = member). Given calibration scores ``c_1..c_n`` of *known*
non-members, held out from the decision, a test document with score ``s`` gets

    p(s) = (1 + #{i : c_i >= s}) / (n + 1).

Under exchangeability of a non-member's score with the calibration scores, ``p`` is
super-uniform, and the conformal p-values are PRDS (Bates et al., Theorem 2), so BH at level
``q`` over the test documents controls the FDR at ``q * (test non-members / test documents) <= q``.
The guarantee is marginal: averaged over calibration draws, which is why
:func:`conformal_bh_runs` repeats the split over seeds. The smallest possible p-value is
``1 / (n + 1)``: with ``n + 1 < 1 / q`` nothing can ever be selected (:func:`min_resolvable_q`).

**Knockoff+** (Barber & Candes, 2015; KTD, Proposition 2, Eq. 10) for knockoff statistics
``W`` (``W > 0``: the text beats its knockoffs):

    tau = min { t > 0 : (1 + #{j : W_j <= -t}) / max(1, #{j : W_j >= t}) <= q },
    selected = {j : W_j >= tau}   (empty when no t qualifies).

``knockpy.knockoff_stats.data_dependent_threshhold`` implements knockoff+ but is not used: it
counts ``W = 0`` as negative and evaluates the ratio inside groups of tied ``|W|`` (so it can
differ from Eq. 10 when statistics tie, which paraphrase knockoffs with equal scores do), and
it would pull cvxpy and four solvers into the install for a dozen lines. The tests check this
implementation against a direct evaluation of Eq. 10 at every ``t``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.errors import ConfigError, InputError

# The FDR levels of KTD's Figure 1 (0.05 to 0.95), the default grid of the selection tables.
DEFAULT_QS = tuple(round(0.05 * k, 2) for k in range(1, 20))

RUN_COLUMNS = ["method", "split", "q", "n_calibration", "n_test", "n_test_member", "n_selected",
               "n_false", "fdp", "power"]
SELECTION_COLUMNS = ["method", "q", "n_splits", "n_calibration", "n_test", "n_test_member", "min_q",
                     "fdr", "fdr_se", "power", "power_se", "mean_selected"]
# role: "test" (a p-value, named or not at q) or "calibration" (the known non-members the p-values are
# computed against; no q, no p-value); split, seed and calibration_fraction redraw it (calibration_split).
SELECTED_COLUMNS = ["method", "q", "doc_id", "label", "score", "pvalue", "selected", "role", "split", "seed",
                    "calibration_fraction"]


def check_q(q: float, what: str = "q") -> float:
    """``q`` as a float in the open interval (0, 1), else :class:`ConfigError` naming ``what``."""
    try:
        q = float(q)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: an FDR level must be a number in (0, 1), got {q!r}") from None
    if not 0.0 < q < 1.0:
        raise ConfigError(f"{what}: an FDR level must be in (0, 1), got {q}")
    return q


def _finite(values, what: str) -> np.ndarray:
    values = np.asarray(values, dtype=float).ravel()
    bad = ~np.isfinite(values)
    if bad.any():
        raise InputError(f"{what}: {int(bad.sum())} value(s) are not finite (nan or inf)")
    return values


def conformal_pvalues(test_scores, calibration_scores) -> np.ndarray:
    """``p_j = (1 + #{calibration >= s_j}) / (n_cal + 1)`` for each test score (higher = member)."""
    test = _finite(test_scores, "test scores")
    calibration = np.sort(_finite(calibration_scores, "calibration scores"))
    if calibration.size == 0:
        raise InputError("conformal p-values need at least one calibration (known non-member) score")
    # calibration scores >= s: everything from the first position where s could be inserted on the left
    at_least = calibration.size - np.searchsorted(calibration, test, side="left")
    return (1.0 + at_least) / (calibration.size + 1.0)


def bh_adjusted_pvalues(pvalues) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values) ``min(1, min_{k >= rank} m p_(k) / k)``.

    ``scipy.stats.false_discovery_control(method="bh")``; an empty input gives an empty array.
    """
    pvalues = _finite(pvalues, "p-values")
    if pvalues.size == 0:
        return np.zeros(0, dtype=float)
    # imported here: scipy.stats takes about 2 s to import on a slow CPU, and a probe job that
    # imports this module for its conformal p-values alone needs no more of it
    from scipy import stats as scipy_stats

    return scipy_stats.false_discovery_control(pvalues, method="bh")


def benjamini_hochberg(pvalues, q: float) -> np.ndarray:
    """Boolean mask of the hypotheses BH rejects at level ``q``.

    Rejecting the adjusted p-values (:func:`bh_adjusted_pvalues`) ``<= q`` is the step-up rule
    "reject the k smallest, k = max{k : p_(k) <= q k / m}".
    """
    q = check_q(q)
    return rejected_at(bh_adjusted_pvalues(pvalues), q)


def rejected_at(adjusted: np.ndarray, q: float) -> np.ndarray:
    """BH's rejections at ``q`` from adjusted p-values already computed: they do not depend on
    q, so a q grid needs them once (:func:`bh_adjusted_pvalues`) and one comparison per q."""
    # A relative slack of 1e-12: m p / k is computed in floating point and may land an ulp above q.
    return adjusted <= q * (1 + 1e-12)


def min_resolvable_q(n_calibration: int) -> float:
    """The smallest q at which conformal BH can select anything: ``1 / (n_calibration + 1)``.

    Every p-value is at least that, and BH needs ``p_(k) <= q k / m`` for some ``k <= m``.
    """
    return 1.0 / (n_calibration + 1.0)


def knockoff_plus_threshold(w, q: float) -> float:
    """KTD's Eq. 10: the smallest ``t > 0`` with ``(1 + #{W <= -t}) / max(1, #{W >= t}) <= q``.

    Both counts change only at ``t = |W_j|``: the ratio is constant on each interval
    ``(|W|_(k-1), |W|_(k)]``, so the qualifying t form such intervals and the selected set
    ``{W >= t}`` is the same anywhere in one. ``tau`` is reported as the interval's ``|W_(k)|``.
    Returns ``inf`` when no t qualifies (nothing is selected).
    """
    q = check_q(q)
    w = _finite(w, "knockoff statistics W")
    candidates = np.unique(np.abs(w[w != 0]))  # ascending
    if candidates.size == 0:
        return math.inf
    ordered = np.sort(w)
    # #{W <= -t} and #{W >= t} for every candidate t at once
    negatives = np.searchsorted(ordered, -candidates, side="right")
    positives = w.size - np.searchsorted(ordered, candidates, side="left")
    ratio = (1.0 + negatives) / np.maximum(1, positives)
    ok = np.flatnonzero(ratio <= q * (1 + 1e-12))
    return float(candidates[ok[0]]) if ok.size else math.inf


def knockoff_plus_select(w, q: float) -> np.ndarray:
    """Boolean mask ``W >= tau`` for :func:`knockoff_plus_threshold`'s ``tau``."""
    tau = knockoff_plus_threshold(w, q)
    return np.asarray(w, dtype=float) >= tau


def fdp_and_power(selected, labels) -> tuple[float, float]:
    """False discovery proportion ``|S ∩ non-members| / max(|S|, 1)`` and power
    ``|S ∩ members| / #members`` (KTD's Eq. 1, one draw).

    With no member to find, power is undefined: ``nan`` (as metrics.csv's ``bh_power``), not 0. The
    FDP stays a number: every document named is a false discovery, so its mean over draws is the
    chance of naming anything when nothing is a member, which BH and knockoff+ keep ``<= q``."""
    selected = np.asarray(selected, dtype=bool)
    labels = np.asarray(labels, dtype=int)
    n_selected = int(selected.sum())
    false = int((selected & (labels == 0)).sum())
    n_members = int((labels == 1).sum())
    power = (n_selected - false) / n_members if n_members else math.nan
    return false / max(n_selected, 1), power


def _calibration_keys(doc_ids, seed: int, split: int) -> np.ndarray:
    """A seeded pseudo-random key per document that depends on its id alone, not its position."""
    return np.array([int.from_bytes(hashlib.blake2b(f"{seed}:{split}:{d}".encode(), digest_size=8).digest(), "big")
                     for d in doc_ids], dtype=np.uint64)


def calibration_split(labels, doc_ids, fraction: float, *, seed: int, split: int) -> np.ndarray:
    """Boolean mask of the calibration documents: a random ``fraction`` of the non-members.

    The rest of the non-members stay in the test set with every member, so a non-member's
    test score and the calibration scores are exchangeable (a random split of one group).
    The draw is the ``n_cal`` non-members with the smallest keys seeded by ``(seed, split)`` and
    the document's id, so every method of a (benchmark, model) that scores the same non-members
    calibrates on the same ones whatever the order of its rows (paired comparisons), and methods
    over overlapping documents share the calibration documents they have in common.
    """
    labels = np.asarray(labels, dtype=int)
    doc_ids = np.asarray(doc_ids, dtype=str)
    nonmembers = np.flatnonzero(labels == 0)
    n_cal = calibration_size(nonmembers.size, fraction)
    if n_cal < 1:
        raise InputError(f"conformal selection: {nonmembers.size} non-member(s) and calibration_fraction "
                         f"{fraction} leave no calibration document")
    keys = _calibration_keys(doc_ids[nonmembers], seed, split)
    order = np.lexsort((doc_ids[nonmembers], keys))  # by key; a (vanishingly rare) tie by id
    mask = np.zeros(labels.size, dtype=bool)
    mask[nonmembers[order[:n_cal]]] = True
    return mask


def _one_method(scores: np.ndarray, labels: np.ndarray, doc_ids, *, n_splits: int,
                calibration_fraction: float, seed: int):
    """Yield ``(split, calibration mask, p-values of the test documents)`` for each split."""
    for split in range(n_splits):
        cal = calibration_split(labels, doc_ids, calibration_fraction, seed=seed, split=split)
        yield split, cal, conformal_pvalues(scores[~cal], scores[cal])


def calibration_size(n_nonmembers: int, calibration_fraction: float) -> int:
    """How many of ``n_nonmembers`` calibrate: ``round(fraction * n)``, Python's rounding (half to even)."""
    return int(round(calibration_fraction * n_nonmembers))


def can_calibrate(labels, calibration_fraction: float) -> bool:
    """Whether a method's non-members leave at least one calibration document (:func:`calibration_split`)."""
    return calibration_size(int((np.asarray(labels, dtype=int) == 0).sum()), calibration_fraction) >= 1


def uncalibrated_notes(doc_scores: pd.DataFrame, calibration_fraction: float) -> list[str]:
    """The methods whose non-members are too few for a calibration set, one line per number of
    non-members: they get no rows in the selection tables (and ``nan`` ``bh_*`` columns in the metrics
    table), where a method that scored only a few documents stopped the whole (benchmark, model)."""
    counts = {method: int((group["label"] == 0).sum()) for method, group in doc_scores.groupby("method", sort=True)
              if not can_calibrate(group["label"], calibration_fraction)}
    notes = []
    for n in sorted(set(counts.values())):
        methods = [m for m, k in counts.items() if k == n]
        which = f"method {methods[0]!r}" if len(methods) == 1 else f"methods {', '.join(map(repr, methods))}"
        notes.append(f"{n} non-member(s) and calibration_fraction {calibration_fraction} leave no calibration "
                     f"document for {which}: no conformal BH selection (no rows in the selection tables, nan "
                     f"bh_* columns)")
    return notes


def _check_settings(n_splits: int, calibration_fraction: float) -> None:
    if n_splits < 1:
        raise ConfigError(f"stats.selection.n_splits: must be >= 1, got {n_splits}")
    if not 0.0 < calibration_fraction < 1.0:
        raise ConfigError(f"stats.selection.calibration_fraction: must be in (0, 1), got {calibration_fraction}")


def _method_runs(method: str, scores, labels, doc_ids, qs: Sequence[float], *, n_splits: int,
                 calibration_fraction: float, seed: int) -> list[dict]:
    scores = _finite(scores, f"scores of method {method!r}")
    labels = np.asarray(labels, dtype=int)
    rows = []
    for split, cal, pvalues in _one_method(scores, labels, doc_ids, n_splits=n_splits,
                                            calibration_fraction=calibration_fraction, seed=seed):
        test_labels = labels[~cal]
        adjusted = bh_adjusted_pvalues(pvalues)
        for q in qs:
            selected = rejected_at(adjusted, q)
            fdp, power = fdp_and_power(selected, test_labels)  # power nan where no test document is a member
            rows.append({"method": method, "split": split, "q": q, "n_calibration": int(cal.sum()),
                         "n_test": int((~cal).sum()), "n_test_member": int(test_labels.sum()),
                         "n_selected": int(selected.sum()),
                         "n_false": int((selected & (test_labels == 0)).sum()), "fdp": fdp, "power": power})
    return rows


def conformal_bh_runs(doc_scores: pd.DataFrame, qs: Sequence[float] = DEFAULT_QS, *, n_splits: int = 20,
                      calibration_fraction: float = 0.5, seed: int = 0) -> pd.DataFrame:
    """One row of :data:`RUN_COLUMNS` per (method, calibration split, q).

    ``doc_scores`` is the long format of every probe (``doc_id, label, method, score``). For each
    split a random ``calibration_fraction`` of the non-members is the calibration set; every other
    document is tested, and BH at each q selects among them. FDP and power are measured against
    the labels of the test documents. A method whose non-members leave no calibration document has
    no rows (:func:`uncalibrated_notes` names it).
    """
    qs = [check_q(q, "stats.selection.qs") for q in qs]
    _check_settings(n_splits, calibration_fraction)
    rows = []
    for method, group in doc_scores.groupby("method", sort=True):
        if not can_calibrate(group["label"], calibration_fraction):
            continue
        rows += _method_runs(method, group["score"], group["label"], group["doc_id"], qs, n_splits=n_splits,
                             calibration_fraction=calibration_fraction, seed=seed)
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


# The columns every metrics table (and so results/summary/metrics.csv) carries for conformal BH.
METRIC_COLUMNS = ["bh_q", "bh_fdr", "bh_power"]


def selection_metrics(scores, labels, doc_ids, *, q: float = 0.1, n_splits: int = 20,
                      calibration_fraction: float = 0.5, seed: int = 0) -> dict:
    """:data:`METRIC_COLUMNS` for one detector: conformal BH at ``q``, empirical FDR and power
    averaged over ``n_splits`` calibration splits (drawn by document id: :func:`calibration_split`).
    ``nan`` when there is no member or too few non-members for a calibration set (the same rule as
    every other metric: one degenerate method does not abort a summary), and when ``q`` is below
    :func:`min_resolvable_q` of the calibration size: BH names nothing there whatever the scores, and
    0 and 0 would read as a measured FDR and a detector without power (:func:`bh_resolution_notes`)."""
    from memaudit.stats.metrics import _as_arrays

    q = check_q(q, "stats.selection.q")
    _check_settings(n_splits, calibration_fraction)
    scores, labels = _as_arrays(scores, labels)  # labels other than 0/1 are an error, as in every metric
    out = {"bh_q": q, "bh_fdr": math.nan, "bh_power": math.nan}
    n_cal = calibration_size(int((labels == 0).sum()), calibration_fraction)
    if not (labels == 1).any() or n_cal < 1 or q < min_resolvable_q(n_cal):
        return out
    runs = pd.DataFrame(_method_runs("", scores, labels, doc_ids, [q], n_splits=n_splits,
                                     calibration_fraction=calibration_fraction, seed=seed))
    out["bh_fdr"], out["bh_power"] = float(runs["fdp"].mean(skipna=False)), float(runs["power"].mean(skipna=False))
    return out


def summarise_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """:data:`SELECTION_COLUMNS`: empirical FDR (mean FDP over splits) and power per (method, q),
    with their standard errors and the smallest resolvable q of the calibration size.

    Power is ``nan`` where the test documents hold no member. Calibration draws non-members only, so
    every split of a method tests all its members: power is ``nan`` on every split or on none. The
    means and standard errors do not skip ``nan`` (``skipna=False``), so were a split ever without
    members its ``nan`` would show in the mean rather than be averaged away over the other splits."""
    out = []
    for (method, q), group in runs.groupby(["method", "q"], sort=True):
        n = len(group)
        n_cal = int(group["n_calibration"].iloc[0])
        out.append({"method": method, "q": q, "n_splits": n, "n_calibration": n_cal,
                    "n_test": int(group["n_test"].iloc[0]), "n_test_member": int(group["n_test_member"].iloc[0]),
                    "min_q": min_resolvable_q(n_cal),
                    "fdr": float(group["fdp"].mean(skipna=False)),
                    "fdr_se": float(group["fdp"].std(ddof=1, skipna=False) / math.sqrt(n)) if n > 1 else math.nan,
                    "power": float(group["power"].mean(skipna=False)),
                    "power_se": (float(group["power"].std(ddof=1, skipna=False) / math.sqrt(n)) if n > 1
                                 else math.nan),
                    "mean_selected": float(group["n_selected"].mean())})
    return pd.DataFrame(out, columns=SELECTION_COLUMNS)


def selected_documents(doc_scores: pd.DataFrame, qs: Sequence[float] = DEFAULT_QS, *,
                       calibration_fraction: float = 0.5, seed: int = 0) -> pd.DataFrame:
    """The named documents of the first calibration split: one row of :data:`SELECTED_COLUMNS` per
    (method, q, test document), with its conformal p-value and whether BH selects it (none for a method
    whose non-members leave no calibration document: :func:`uncalibrated_notes`); then, once per method,
    a ``role`` "calibration" row per calibration document (``q`` and ``pvalue`` empty, not selected), so
    the reference set is written rather than implied by the non-members missing from the test rows.
    Every row carries the ``split``, ``seed`` and ``calibration_fraction`` that drew it."""
    qs = [check_q(q, "stats.selection.qs") for q in qs]
    frames, calibrations = [], []
    for method, group in doc_scores.groupby("method", sort=True):
        if not can_calibrate(group["label"], calibration_fraction):
            continue
        scores = _finite(group["score"], f"scores of method {method!r}")
        labels = group["label"].to_numpy(dtype=int)
        _, cal, pvalues = next(_one_method(scores, labels, group["doc_id"].to_numpy(), n_splits=1,
                                           calibration_fraction=calibration_fraction, seed=seed))
        test = group.loc[~cal, ["doc_id", "label", "score"]].reset_index(drop=True)
        adjusted = bh_adjusted_pvalues(pvalues)
        # the test documents once per q, in q order: one frame per method, not one per (method, q)
        frame = test.iloc[np.tile(np.arange(len(test)), len(qs))].reset_index(drop=True)
        frames.append(frame.assign(method=method, q=np.repeat(np.asarray(qs, dtype=float), len(test)),
                                   pvalue=np.tile(pvalues, len(qs)),
                                   selected=np.array([rejected_at(adjusted, q) for q in qs], dtype=bool).reshape(-1),
                                   role="test"))
        calibrations.append(group.loc[cal, ["doc_id", "label", "score"]].assign(
            method=method, q=math.nan, pvalue=math.nan, selected=False, role="calibration"))
    if not frames:
        return pd.DataFrame(columns=SELECTED_COLUMNS)
    # the test rows first, in the order they always had: a reader of them alone sees no change
    named = pd.concat([*frames, *calibrations], ignore_index=True)
    return named.assign(split=0, seed=seed, calibration_fraction=calibration_fraction)[SELECTED_COLUMNS]


def resolution_notes(summary: pd.DataFrame) -> list[str]:
    """The (method, q) pairs the calibration set is too small to resolve: one line per q and
    calibration size, naming every method it holds for (the methods of one document set share their
    calibration size, so a model's 25 methods at q = 0.05 make one line, not 25)."""
    low = summary[summary["q"] < summary["min_q"]]
    notes = []
    for (q, min_q, n_cal), group in low.groupby(["q", "min_q", "n_calibration"], sort=True):
        methods = list(dict.fromkeys(group["method"]))
        which = (f"method {methods[0]!r}" if len(methods) == 1
                 else f"{len(methods)} methods ({', '.join(repr(m) for m in methods)})")
        notes.append(f"q = {q:g} is below 1/(n_calibration + 1) = {min_q:.3g} ({n_cal} calibration "
                     f"non-members) for {which}: nothing can be selected")
    return notes


def bh_resolution_notes(doc_scores: pd.DataFrame, q: float, calibration_fraction: float) -> list[str]:
    """:func:`resolution_notes` for the q of metrics.csv's bh_* columns (``stats.selection.q``, which need
    not be in the grid of the selection tables), each line saying that those columns are empty there
    (:func:`selection_metrics`)."""
    rows = [{"method": method, "q": q, "n_calibration": n_cal, "min_q": min_resolvable_q(n_cal)}
            for method, group in doc_scores.groupby("method", sort=True)
            if (n_cal := calibration_size(int((group["label"] == 0).sum()), calibration_fraction)) >= 1]
    low = resolution_notes(pd.DataFrame(rows, columns=["method", "q", "n_calibration", "min_q"]))
    return [f"{note} (stats.selection.q: bh_fdr and bh_power are empty)" for note in low]
