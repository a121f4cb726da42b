"""KTD's knockoff statistics and their selection (Section 4.1.2 of the KTD paper).

For text j with importance score ``Z_j`` (higher = more likely seen) and the scores
``Z~_j^(1..m)`` of m knockoffs (paraphrases made by a model other than the one under test),

    W_j = Z_j - (1/m) sum_i Z~_j^(i)          (Eq. 8; m = 1 is vanilla knockoff inference)

and knockoff+ (Eq. 10, :func:`memaudit.stats.selection.knockoff_plus_threshold`) names
``{j : W_j >= tau}``. KTD's guarantee rests on Lemma 1: a non-member's W is symmetric about 0.

Where the paper is wrong or optimistic, and what is reported instead of assumed:

- **Lemma 1 needs more than the paper states for m > 1.** Swapping a text with *one* knockoff
  flips the sign of ``Z - Z~`` (Definition 2), but not of ``Z - mean(Z~)``: even with
  exchangeable scores, ``Z`` has variance s^2 and the mean of m knockoff scores s^2/m, so ``W``
  is symmetric only when the score's own distribution is. And paraphrases are not exchangeable
  with their originals: a paraphraser's output is more generic text, with systematically
  different loss and gradient norm, so non-members' W is shifted. :func:`symmetry_table`
  measures both (a sign test and a Wilcoxon signed-rank test of non-members' W against 0,
  their mean and median) beside every selection, so a reader sees when the guarantee fails.
- **Texts are passages**, as the paper's samples: knockoff+ selects passages, and FDR and power
  are measured against their documents' labels. A document's score for the metrics tables (AUC,
  conformal BH) is the mean of its passages' W, which keeps Eq. 8's form. Passages of one
  document are not independent (Assumption 1): the symmetry tests are read with that in mind.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.errors import ConfigError, InputError
from memaudit.stats.selection import check_q, fdp_and_power, knockoff_plus_threshold

SELECTION_RUN_COLUMNS = ["statistic", "m", "measured_on", "draw", "q", "n_texts", "tau", "n_selected", "n_false", "fdp",
                         "power"]
# measured_on: which passages a selection row names from and is measured on
ALL_TEXTS, TEST_TEXTS = "all", "test"  # every passage; a validation draw's test part (Table 2's protocol)
SYMMETRY_COLUMNS = ["statistic", "m", "n_nonmember", "nonmember_mean_w", "nonmember_median_w",
                    "nonmember_share_positive", "sign_pvalue", "wilcoxon_pvalue", "member_mean_w"]


def knockoff_statistic(z, z_knockoffs) -> np.ndarray:
    """Eq. 8: ``W_j = Z_j - mean_i Z~_j^(i)``; ``z_knockoffs`` has one row per text, one column per draw."""
    z = np.asarray(z, dtype=float)
    z_knockoffs = np.asarray(z_knockoffs, dtype=float)
    if z_knockoffs.ndim != 2 or z_knockoffs.shape[0] != z.size or z_knockoffs.shape[1] < 1:
        raise InputError(f"knockoff scores must be (texts, m >= 1), got shape {z_knockoffs.shape} for {z.size} texts")
    return z - z_knockoffs.mean(axis=1)


def draw_knockoffs(pool_sizes: Sequence[int], m: int, rng: np.random.Generator) -> list[np.ndarray]:
    """For each text, ``m`` distinct indices into its pool of knockoffs (all of them when m = pool).

    A text whose pool is smaller than m is an :class:`InputError` (its paraphrases failed quality
    control: the caller reports it instead of scoring it with fewer knockoffs).
    """
    if m < 1:
        raise ConfigError(f"probes.ktd.m: must be >= 1, got {m}")
    out = []
    for j, size in enumerate(pool_sizes):
        if size < m:
            raise InputError(f"text {j}: {size} knockoff(s) in its pool, m = {m} asked")
        out.append(np.sort(rng.choice(size, size=m, replace=False)))
    return out


def passage_w(passage_z: np.ndarray, passage_pool: list[np.ndarray], ids: Sequence[str], m: int,
              rng: np.random.Generator) -> pd.Series:
    """Eq. 8's W of every passage (indexed by ``ids``) with ``m`` knockoffs drawn from its pool
    (``passage_pool[k]``: the scores of passage k's knockoffs)."""
    picks = draw_knockoffs([p.size for p in passage_pool], m, rng)
    w = knockoff_statistic(passage_z, np.stack([pool[idx] for pool, idx in zip(passage_pool, picks)]))
    return pd.Series(w, index=list(ids))


def _named(scores: np.ndarray, truth: np.ndarray, tau: float) -> dict:
    """What the cut ``scores >= tau`` names, measured against ``truth``: the columns every
    selection-run row shares (knockoff+ names ``W >= tau`` for its threshold tau)."""
    selected = scores >= tau
    fdp, power = fdp_and_power(selected, truth)
    return {"tau": tau, "n_selected": int(selected.sum()), "n_false": int((selected & (truth == 0)).sum()),
            "fdp": fdp, "power": power}


def selection_runs(w_draws: dict[tuple[str, int], list[pd.Series]], labels: pd.Series,
                   qs: Sequence[float]) -> pd.DataFrame:
    """Knockoff+ at every q for every (statistic, m) and knockoff draw: :data:`SELECTION_RUN_COLUMNS`.

    ``w_draws[(statistic, m)]`` holds one W series per draw (indexed by text); ``labels`` maps a
    text to 1 (member) / 0. FDP and power are measured against the labels.
    """
    qs = [check_q(q, "probes.ktd.qs") for q in qs]
    rows = []
    for (statistic, m), draws in sorted(w_draws.items()):
        for draw, w in enumerate(draws):
            truth = labels.loc[w.index].to_numpy(dtype=int)
            values = w.to_numpy()
            for q in qs:
                rows.append({"statistic": statistic, "m": m, "measured_on": ALL_TEXTS, "draw": draw, "q": q,
                             "n_texts": int(w.size), **_named(values, truth, knockoff_plus_threshold(values, q))})
    return pd.DataFrame(rows, columns=SELECTION_RUN_COLUMNS)


def knockoff_runs_on_test_parts(w_draws: dict[tuple[str, int], list[pd.Series]], labels: pd.Series,
                                qs: Sequence[float], *, n_validation: int, seed: int,
                                documents: pd.Series | None = None) -> pd.DataFrame:
    """Knockoff+ over the test part of each validation draw of :func:`validation_runs` (drawn over every
    text, as for the baselines that score them all: LOSS, Min-K%, zlib), knockoff draw d's W with
    validation draw d: :data:`SELECTION_RUN_COLUMNS` with ``measured_on`` "test". Table 2 compares
    KTD with the baselines at the same q; measured on every text it would be measured on other texts
    than theirs (and on more of them: knockoff+ names nothing below 1/q texts clearing its threshold).
    KTD uses no validation texts; it simply names from the same candidates the baselines do."""
    qs = [check_q(q, "probes.ktd.qs") for q in qs]
    rows, parts = [], {}
    for (statistic, m), draws in sorted(w_draws.items()):
        for draw, w in enumerate(draws):
            truth = labels.loc[w.index].to_numpy(dtype=int)
            key = (draw, tuple(w.index))
            if key not in parts:
                parts[key] = _validation_parts(truth, n_validation, [seed, draw, 7],
                                               None if documents is None else documents.loc[w.index])[1]
            values, truth = w.to_numpy()[parts[key]], truth[parts[key]]
            for q in qs:
                rows.append({"statistic": statistic, "m": m, "measured_on": TEST_TEXTS, "draw": draw, "q": q,
                             "n_texts": int(values.size), **_named(values, truth, knockoff_plus_threshold(values, q))})
    return pd.DataFrame(rows, columns=SELECTION_RUN_COLUMNS)


VALIDATION_PREFIX = "validation_"


def validation_threshold(scores: np.ndarray, truth: np.ndarray, q: float) -> float:
    """The Table 2 protocol's threshold on a labelled validation set: among the cuts ``score >= t``
    whose false discovery proportion is at most ``q``, the one naming the most members (ties: the
    higher t); ``inf`` (name nothing) when no cut names a member at FDP <= q."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], truth[order]
    true_pos, selected = np.cumsum(y == 1), np.arange(1, s.size + 1)
    last_of_tie = np.r_[s[1:] != s[:-1], True]  # a cut keeps every text tied with it
    # FDP <= q with the slack knockoff+ and BH have: 63 false of 90 is FDP 0.7, and 0.7 * 90 is 62.99...
    ok = last_of_tie & ((selected - true_pos) <= q * selected + 1e-9) & (true_pos > 0)
    if not ok.any():
        return math.inf
    best = np.flatnonzero(ok)[np.argmax(true_pos[ok])]  # the first (highest t) of the most members
    return float(s[best])


def validation_split(truth: np.ndarray, n_validation: int, seed: Sequence[int], groups: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a validation part of ``n_validation`` texts and of the test part (the rest), drawn
    with the benchmark's member share in each part (scikit-learn's stratified ``train_test_split``),
    so that a small benchmark's test part is not left without members, whose power would be
    undefined, nor its validation part without the members a threshold is chosen on. Where a class
    has fewer than two texts, or either part is too small to hold both classes, the draw is a plain
    random one (the test part may then hold no member: its power is ``nan``).

    ``groups`` (each text's document): the draw is of whole documents, ``n_validation`` texts' worth
    (the documents' share of the texts, rounded), so that no document has passages on both sides:
    they share its words and style, and a threshold tuned on them is not measured on new texts."""
    from sklearn.model_selection import train_test_split

    rng = np.random.default_rng(list(seed))
    if groups is None:
        unit, n_units, n_pick = np.arange(truth.size), truth.size, n_validation
    else:
        names, unit = np.unique(np.asarray(groups, dtype=str), return_inverse=True)
        n_units = names.size
        if n_units < 2:
            raise InputError(f"validation baselines: the texts of {n_units} document cannot be split into a "
                             f"validation and a test part")
        mixed = np.flatnonzero(np.bincount(unit, weights=truth, minlength=n_units) % np.bincount(unit) != 0)
        if mixed.size:
            raise InputError(f"validation baselines: document {str(names[mixed[0]])!r} holds members and non-members")
        n_pick = min(max(1, round(n_validation * n_units / truth.size)), n_units - 1)
    unit_truth = np.zeros(n_units, dtype=int)
    unit_truth[unit] = truth
    counts = np.bincount(unit_truth, minlength=2)
    if counts.min() >= 2 and min(n_pick, n_units - n_pick) >= 2:
        val, _ = train_test_split(np.arange(n_units), train_size=n_pick, stratify=unit_truth,
                                  random_state=int(rng.integers(2**31 - 1)))
    else:
        val = rng.permutation(n_units)[:n_pick]
    in_val = np.isin(unit, val)
    return np.flatnonzero(in_val), np.flatnonzero(~in_val)


def validation_runs(scores: dict[str, pd.Series], labels: pd.Series, qs: Sequence[float], *, n_validation: int,
                    n_draws: int, seed: int, documents: pd.Series | None = None) -> pd.DataFrame:
    """The KTD paper's Table 2 protocol for the score-only baselines (LOSS, Min-K%, zlib): a random
    validation set of ``n_validation`` labelled texts (stratified by label; with ``documents``, each
    text's document, of whole documents: :func:`validation_split`) picks, at each q, the threshold
    with the most power at FDP <= q (:func:`validation_threshold`); the other texts are named by it
    and measured.
    Repeated over ``n_draws`` seeded validation draws. Rows as :data:`SELECTION_RUN_COLUMNS`, with
    statistic ``validation_<score>``, m 0, ``measured_on`` "test" and ``n_texts`` the test texts
    (KTD on the same test texts: :func:`knockoff_runs_on_test_parts`).

    Unlike knockoff+ this needs labelled members, which an auditor rarely has, and its FDR holds
    only as far as the validation set resembles the rest: the table shows how far that is."""
    qs = [check_q(q, "probes.ktd.qs") for q in qs]
    rows = []
    for name, series in sorted(scores.items()):
        truth_all = labels.loc[series.index].to_numpy(dtype=int)
        values = series.to_numpy(dtype=float)
        for draw in range(n_draws):
            val, test = _validation_parts(truth_all, n_validation, [seed, draw, 7],
                                          None if documents is None else documents.loc[series.index])
            for q in qs:
                tau = validation_threshold(values[val], truth_all[val], q)
                rows.append({"statistic": f"{VALIDATION_PREFIX}{name}", "m": 0, "measured_on": TEST_TEXTS,
                             "draw": draw, "q": q, "n_texts": int(test.size),
                             **_named(values[test], truth_all[test], tau)})
    return pd.DataFrame(rows, columns=SELECTION_RUN_COLUMNS)


def _validation_parts(truth: np.ndarray, n_validation: int, seed: Sequence[int], documents: pd.Series | None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`validation_split` with at most half the texts validating: the one split of a draw that the
    baselines and KTD's ``measured_on`` "test" rows share."""
    n_val = min(int(n_validation), truth.size // 2)
    if n_val < 2:
        raise InputError(f"validation baselines: {truth.size} texts cannot be split into a validation and "
                         f"a test part")
    return validation_split(truth, n_val, seed, None if documents is None else documents.to_numpy())


def summarise_runs(runs: pd.DataFrame, keys: Sequence[str], first: Sequence[str]) -> pd.DataFrame:
    """Empirical FDR and power per ``keys``: means over the draws, with standard errors; the
    ``first`` columns (counts of texts) carried along, as their mean over the draws rounded where they
    differ (a validation baseline's test part: whole documents, of unequal lengths).

    A draw whose texts hold no member has no power (``nan``: a validation baseline's test part when
    every member fell in its validation set). The means and standard errors do not skip ``nan``
    (``skipna=False``, as :func:`memaudit.stats.selection.summarise_runs`): such a draw makes its
    row's power ``nan`` rather than be averaged away over the other draws."""
    grouped = runs.groupby(list(keys), sort=True)
    out = grouped.agg(n_draws=("draw", "size"), **{c: (c, "mean") for c in first})
    out[list(first)] = out[list(first)].round().astype(int)
    out["fdr"] = grouped["fdp"].mean(skipna=False)
    out["power"] = grouped["power"].mean(skipna=False)
    out["mean_selected"] = grouped["n_selected"].mean()
    n = np.sqrt(out["n_draws"].clip(lower=1))
    out["fdr_se"] = grouped["fdp"].std(skipna=False) / n
    out["power_se"] = grouped["power"].std(skipna=False) / n
    return out.reset_index()


def summarise_selection(runs: pd.DataFrame, distinct: dict[tuple[str, int], int] | None = None) -> pd.DataFrame:
    """Empirical FDR and power per (statistic, m, measured_on, q): means over the knockoff draws, with
    standard errors.

    ``distinct[(statistic, m)]``: how many of the draws over every text differ (``n_distinct_draws``;
    the draws of a validation test part all do). Where m is every passage's whole pool, each draw picks
    the same knockoffs: one distinct draw, and the standard errors are NaN rather than a 0 that
    would read as certainty.
    """
    out = summarise_runs(runs, ["statistic", "m", "measured_on", "q"], ["n_texts"])
    distinct = distinct or {}
    out.insert(out.columns.get_loc("n_draws") + 1, "n_distinct_draws",
               [distinct.get((s, m), n) if on == ALL_TEXTS else n
                for s, m, on, n in zip(out["statistic"], out["m"], out["measured_on"], out["n_draws"])])
    single = out["n_distinct_draws"] == 1
    out.loc[single, ["fdr_se", "power_se"]] = np.nan
    return out


def symmetry_table(w_draws: dict[tuple[str, int], list[pd.Series]], labels: pd.Series) -> pd.DataFrame:
    """Lemma 1 checked on the data: is non-members' W symmetric about 0? (:data:`SYMMETRY_COLUMNS`)

    Over the first draw of each (statistic, m): a two-sided sign test (``scipy.stats.binomtest``
    of #{W > 0} among nonzero W against 1/2) and a Wilcoxon signed-rank test (symmetry about 0,
    ``scipy.stats.wilcoxon``). Small p-values mean the knockoffs are not exchangeable with the
    texts: Lemma 1, on which knockoff+'s guarantee rests, fails. Both tests are two-sided, as the
    lemma is; only a shift to the right (``nonmember_mean_w > 0``) inflates the FDR, one to the
    left makes knockoff+ conservative (its count of W <= -t then over-counts the false ones).
    """
    from scipy import stats as scipy_stats  # here, not at the top: a KTD probe job needs none of it

    rows = []
    for (statistic, m), draws in sorted(w_draws.items()):
        w = draws[0]
        truth = labels.loc[w.index].to_numpy(dtype=int)
        null = w.to_numpy()[truth == 0]
        nonzero = null[null != 0]
        sign_p = (float(scipy_stats.binomtest(int((nonzero > 0).sum()), nonzero.size, 0.5).pvalue)
                  if nonzero.size else math.nan)
        wilcoxon_p = float(scipy_stats.wilcoxon(nonzero).pvalue) if nonzero.size >= 2 else math.nan
        members = w.to_numpy()[truth == 1]
        rows.append({"statistic": statistic, "m": m, "n_nonmember": int(null.size),
                     "nonmember_mean_w": float(null.mean()) if null.size else math.nan,
                     "nonmember_median_w": float(np.median(null)) if null.size else math.nan,
                     "nonmember_share_positive": float((null > 0).mean()) if null.size else math.nan,
                     "sign_pvalue": sign_p, "wilcoxon_pvalue": wilcoxon_p,
                     "member_mean_w": float(members.mean()) if members.size else math.nan})
    return pd.DataFrame(rows, columns=SYMMETRY_COLUMNS)


IMBALANCE_COLUMNS = ["statistic", "m", "member_ratio", "draw", "q", "n_members", "n_nonmembers", "tau", "n_selected",
                     "n_false", "fdp", "power"]


def members_for_ratio(ratio: float, n_nonmembers: int, n_members: int) -> int:
    """How many members a test set with ``ratio`` members per non-member keeps: ``round(ratio *
    n_nonmembers)``, at least 1 (a set without members measures no power) and at most the members
    there are. The table reports the count kept, so a floored or capped ratio shows."""
    if not 0 < ratio:
        raise ConfigError(f"probes.ktd.member_ratios: each ratio must be > 0, got {ratio}")
    return int(min(max(1, round(ratio * n_nonmembers)), n_members))


def imbalanced_runs(w_draws: dict[tuple[str, int], list[pd.Series]], labels: pd.Series, qs: Sequence[float], *,
                    ratios: Sequence[float], m: int, seed: int) -> pd.DataFrame:
    """The KTD paper's Appendix B: knockoff+ on test sets with few members. For every ratio r
    (members per non-member; the paper's 0.1, 0.05 and 0.01) and every knockoff draw of W at
    ``m``, all non-member texts and a random ``members_for_ratio(r, ...)`` of the members (seeded
    by seed, draw and r; the same texts for every statistic), knockoff+ at each q:
    :data:`IMBALANCE_COLUMNS`.

    Knockoff+ names nothing unless at least ``1/q`` texts clear its threshold (its ratio has 1 +
    #{W <= -t} over #{W >= t}), so with fewer than ``1/q`` members it can only name them beside
    non-members: few members mean little power at small q even with perfect knockoffs."""
    qs = [check_q(q, "probes.ktd.qs") for q in qs]
    rows = []
    for (statistic, k), draws in sorted(w_draws.items()):
        if k != m:
            continue
        for draw, w in enumerate(draws):
            truth = labels.loc[w.index].to_numpy(dtype=int)
            values = w.to_numpy()
            members, nonmembers = np.flatnonzero(truth == 1), np.flatnonzero(truth == 0)
            if members.size == 0 or nonmembers.size == 0:
                raise InputError(f"imbalanced member ratios: {members.size} member and {nonmembers.size} "
                                 f"non-member texts; both are needed")
            for r_index, ratio in enumerate(ratios):
                n_keep = members_for_ratio(float(ratio), nonmembers.size, members.size)
                rng = np.random.default_rng([seed, draw, r_index, 13])
                keep = np.sort(np.r_[rng.choice(members, size=n_keep, replace=False), nonmembers])
                sub_w, sub_truth = values[keep], truth[keep]
                for q in qs:
                    rows.append({"statistic": statistic, "m": k, "member_ratio": float(ratio), "draw": draw,
                                 "q": q, "n_members": n_keep, "n_nonmembers": int(nonmembers.size),
                                 **_named(sub_w, sub_truth, knockoff_plus_threshold(sub_w, q))})
    return pd.DataFrame(rows, columns=IMBALANCE_COLUMNS)


def summarise_imbalance(runs: pd.DataFrame) -> pd.DataFrame:
    """Empirical FDR and power per (statistic, m, member ratio, q) over the draws, with standard errors."""
    return summarise_runs(runs, ["statistic", "m", "member_ratio", "q"], ["n_members", "n_nonmembers"])
