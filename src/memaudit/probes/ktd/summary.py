"""KTD over every (benchmark, model): one table, FDR and power against q, W's distributions."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from memaudit.io import read_csv, write_csv
from memaudit.probes.ktd.statistics import ALL_TEXTS, VALIDATION_PREFIX

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = ["benchmark", "model", "n_params", "contaminated", "statistic", "m", "measured_on", "q", "n_texts",
                   "min_q", "n_draws",
                   "n_distinct_draws", "fdr", "fdr_se",
                   "power", "power_se", "mean_selected", "fdp_above_q", "nonmember_mean_w", "sign_pvalue",
                   "wilcoxon_pvalue"]
IMBALANCE_COLUMNS = ["benchmark", "model", "contaminated", "statistic", "m", "member_ratio", "n_members",
                     "n_nonmembers", "q", "n_draws", "fdr", "fdr_se", "power", "power_se", "mean_selected",
                     "fdp_above_q"]


def _read(paths: Sequence[str]) -> pd.DataFrame:
    return pd.concat([read_csv(p) for p in paths], ignore_index=True)


def build_summary(selection_paths: Sequence[str], symmetry_paths: Sequence[str], w_paths: Sequence[str],
                  contaminated: dict[str, list[str]], out_csv, out_fdr_power, out_w, *, m: int,
                  n_params: dict[str, float] | None = None, out_m_size=None,
                  families: dict[str, str] | None = None) -> pd.DataFrame:
    """``results/summary/ktd.csv``: every (benchmark, model, statistic, m, q) with its empirical FDR and
    power over the knockoff draws, ``min_q`` (:func:`min_resolvable_q`; rows below it are logged),
    whether the mean FDP over the draws lies above q (``fdp_above_q``, :func:`_judged`), and Lemma 1's
    symmetry tests of non-members' W beside it;
    the Table 2 baselines (``validation_<score>``, m 0: a threshold picked on labelled validation
    texts) at the same q, without symmetry columns, and KTD's rows again over those baselines' test
    texts (``measured_on`` "test"; "all": every text); the two figures for the gradient-norm
    statistic at ``m`` over every text. ``n_params`` (model -> parameter count, from the prepared
    models' manifests) fills ``n_params`` for the figure against m and model size (``out_m_size``:
    the paper's Figures 3 and 5), whose size lines join the models of one family (``families``, model ->
    family; each model its own where not given) fine-tuned on the same members (``contaminated``)."""
    from memaudit.figures.plots import fine_tuning, plot_selection

    selection = _read(selection_paths)
    symmetry = _read(symmetry_paths)
    frame = selection.merge(symmetry[["benchmark", "model", "statistic", "m", "nonmember_mean_w", "sign_pvalue",
                                      "wilcoxon_pvalue"]], on=["benchmark", "model", "statistic", "m"], how="left")
    frame["n_params"] = frame["model"].map(n_params or {})
    frame["min_q"] = min_resolvable_q(frame)
    frame = _judged(frame, contaminated)[SUMMARY_COLUMNS].sort_values(["benchmark", "model", "statistic", "m",
                                                                       "measured_on", "q"], kind="stable")
    write_csv(out_csv, frame)
    for note in resolution_notes(frame):
        log.warning("%s", note)
    everything = frame[frame["measured_on"] == ALL_TEXTS]
    chosen = everything[(everything["statistic"] == "gradnorm") & (everything["m"] == m)].assign(
        method=f"ktd gradnorm, m={m}")
    plot_selection(chosen, str(out_fdr_power).removesuffix(".png"), [f"ktd gradnorm, m={m}"],
                   title=f"KTD knockoff+: empirical FDR and power against q (gradient-norm W, m = {m}; "
                         "mean over knockoff draws)")
    if out_m_size is not None:
        plot_m_and_size(everything.assign(family=everything["model"].map(lambda x: (families or {}).get(x, x)),
                                          tuning=everything["model"].map(lambda x: fine_tuning(contaminated.get(x)))),
                        str(out_m_size).removesuffix(".png"), m=m)
    w = _read(w_paths)
    plot_w_distributions(w[(w["statistic"] == "gradnorm") & (w["m"] == m) & (w["draw"] == 0)],
                         str(out_w).removesuffix(".png"), m=m)
    return frame


def min_resolvable_q(frame: pd.DataFrame) -> pd.Series:
    """The smallest q at which knockoff+ can name anything, ``1 / n_texts``: its ratio
    (1 + #{W <= -t}) / #{W >= t} is at least 1/n. Empty for the Table 2 baselines, whose validation
    threshold can name a single passage at any q. A ``test`` row's ``n_texts`` is the mean test part
    over the draws, rounded, and so is its ``min_q``."""
    baseline = frame["statistic"].astype(str).str.startswith(VALIDATION_PREFIX)
    return (1.0 / frame["n_texts"].astype(float)).mask(baseline)


def resolution_notes(frame: pd.DataFrame) -> list[str]:
    """ktd.csv's rows at a q below their ``min_q``, one line per q, passage count and ``measured_on``
    naming the (benchmark, model) pairs (as :func:`memaudit.stats.selection.resolution_notes`):
    their 0s say nothing of the statistic."""
    low = frame[frame["q"] < frame["min_q"]]
    notes = []
    for (on, q, n, min_q), group in low.groupby(["measured_on", "q", "n_texts", "min_q"], sort=True):
        pairs = ", ".join(dict.fromkeys(f"{b}/{mod}" for b, mod in zip(group["benchmark"], group["model"])))
        notes.append(f"ktd.csv: q = {q:g} is below 1/n_texts = {min_q:.3g} ({n} passages, measured_on {on!r}) "
                     f"for {len(group)} rows ({pairs}): knockoff+ can name nothing there, so their fdr, power "
                     "and mean_selected are 0 whatever W is")
    return notes


def _judged(frame: pd.DataFrame, contaminated: dict[str, list[str]]) -> pd.DataFrame:
    """``contaminated`` (the model was fine-tuned on the benchmark's members) and ``fdp_above_q``: whether
    the mean false discovery proportion over the knockoff draws, on these texts, exceeds q by more than 2
    standard errors, ``fdr > q + 2 fdr_se``. An observation, not a test of knockoff+'s guarantee: FDR is an
    expectation over data sets, and the standard error is the spread between knockoff draws of one pool on
    one fixed set of texts, not the texts' sampling error (with one distinct draw, m = the whole pool, it is
    NaN and the one FDP is compared with q as it is). With exactly exchangeable knockoffs, where FDR is
    controlled, 16% of simulated data sets read True at q = 0.1 and 30% at q = 0.2 (tests/test_ktd.py): it
    was named ``guarantee`` "fails" until KTD's summary version 12."""
    frame = frame.copy()
    frame["contaminated"] = [b in contaminated.get(mod, []) for b, mod in zip(frame["benchmark"], frame["model"])]
    slack = 2 * frame["fdr_se"].fillna(0)
    frame["fdp_above_q"] = frame["fdr"] > frame["q"] + slack
    return frame


def build_imbalance_summary(imbalance_paths: Sequence[str], contaminated: dict[str, list[str]], out_csv,
                            out_figure, *, m: int) -> pd.DataFrame:
    """``results/summary/ktd_imbalance.csv`` (the paper's Appendix B: knockoff+ on test sets with
    few members, every statistic at ``m``) and its Figure 9 for the gradient-norm statistic:
    one line per model and member ratio."""
    from memaudit.figures.plots import plot_selection

    frame = _judged(_read(imbalance_paths), contaminated)[IMBALANCE_COLUMNS]
    frame = frame.sort_values(["benchmark", "model", "statistic", "member_ratio", "q"], kind="stable")
    write_csv(out_csv, frame)
    chosen = frame[frame["statistic"] == "gradnorm"]
    # one line per model and member ratio: ratios whose member counts round alike (0.01, 0.05, 0.10 of a few
    # non-members: 1 member each) were one line zig-zagging through the three at each q
    lines = chosen.assign(model=[f"{mod}, member ratio {r:g} ({n} members per {k})" for mod, r, n, k in
                                 zip(chosen["model"], chosen["member_ratio"], chosen["n_members"],
                                     chosen["n_nonmembers"])],
                          method=f"ktd gradnorm, m={m}")
    plot_selection(lines, str(out_figure).removesuffix(".png"), [f"ktd gradnorm, m={m}"],
                   title=f"KTD knockoff+ with few members (Appendix B; gradient-norm W, m = {m}; mean over "
                         "knockoff draws and member samples)")
    return frame


def figure_q(qs) -> float:
    """The q the figures against m and size are drawn at: the grid's q nearest 0.1 (the paper's)."""
    qs = sorted(set(float(q) for q in qs))
    return min(qs, key=lambda q: (abs(q - 0.1), q))


def plot_m_and_size(frame: pd.DataFrame, out_prefix: str, *, m: int) -> list[Path]:
    """The KTD paper's Figure 3 (FDR and power against the number of knockoffs m) and Figure 5
    (against model size), for the gradient-norm statistic at the q nearest 0.1, one row per
    benchmark; solid lines and filled markers for models fine-tuned on the benchmark's members,
    dashed and open for the others; FDR's target q dotted. In the size panels a line joins the models
    of one ``family`` fine-tuned on the same members (``tuning``, :func:`~memaudit.figures.plots.fine_tuning`;
    both columns optional): a model fine-tuned on another benchmark's members is a dash-dotted line of its
    own, not a point on its base's line at the same size (all the models not fine-tuned on the benchmark's
    members were one line, families and fine-tunes alike). Models without a size (none here: KTD
    runs on local models) are left out of the size panels. A missing power (no member among the
    texts) is a hollow "n/a" marker at the bottom of its panel (:func:`memaudit.figures.plots.mark_missing`)."""
    from matplotlib.ticker import MaxNLocator

    from memaudit.figures.plots import (FIGURE_WIDTH_IN, FONT_SIZE, MARKERS, format_params, format_params_minor,
                                        legend_handles, mark_missing, new_figure, palette, save_figure, size_line,
                                        style)

    knock = frame[frame["statistic"] == "gradnorm"]
    knock = knock.assign(family=knock["family"] if "family" in knock.columns else "",
                         tuning=knock["tuning"] if "tuning" in knock.columns else "")
    families = sorted(knock["family"].unique(), key=str)
    markers = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(families)}
    q = figure_q(knock["q"])
    at_q = knock[np.isclose(knock["q"], q)]
    any_missing = at_q[["fdr", "power"]].isna().to_numpy().any()
    benchmarks = sorted(at_q["benchmark"].unique())
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 1.4, 2.6 * len(benchmarks) + 0.7)
        axes = fig.subplots(len(benchmarks), 4, squeeze=False)
        for row, benchmark in zip(axes, benchmarks):
            part = at_q[at_q["benchmark"] == benchmark]
            models = sorted(part["model"].unique())
            for color, model in zip(palette(len(models)), models):
                line = part[part["model"] == model].sort_values("m")
                dash = "-" if bool(line["contaminated"].iloc[0]) else "--"
                for ax, column in ((row[0], "fdr"), (row[1], "power")):
                    ax.errorbar(line["m"], line[column], yerr=line[f"{column}_se"].fillna(0), fmt=dash, marker="o",
                                markersize=3, color=color, label=model, capsize=2)
                    mark_missing(ax, line.loc[line[column].isna(), "m"], color=color)
            sized = part[(part["m"] == m) & part["n_params"].notna()].assign(
                contaminated=lambda f: f["contaminated"].astype(bool))
            # contaminated first (red, solid), then each family's other recipes (blue: dashed, dash-dotted)
            for (contaminated, family, tuning), pts in sorted(sized.groupby(["contaminated", "family", "tuning"]),
                                                              key=lambda g: (not g[0][0], str(g[0][1]), g[0][2])):
                pts = pts.sort_values("n_params")
                name = ("fine-tuned on members" if contaminated and tuning in ("", benchmark) else
                        f"fine-tuned on {tuning}" if contaminated else
                        f"fine-tuned on {tuning}, not this benchmark" if tuning else "not fine-tuned")
                name = f"{family}: {name}" if len(families) > 1 else name
                color = "tab:red" if contaminated else "tab:blue"
                for ax, column in ((row[2], "fdr"), (row[3], "power")):
                    ax.errorbar(pts["n_params"], pts[column], yerr=pts[f"{column}_se"].fillna(0),
                                fmt=size_line(contaminated, tuning, benchmark)[0], marker=markers[family],
                                markersize=4, capsize=2, color=color, label=name,
                                markerfacecolor=None if contaminated else "none")
                    mark_missing(ax, pts.loc[pts[column].isna(), "n_params"], color=color, marker=markers[family])
            for ax in (row[0], row[2]):
                ax.axhline(q, color="grey", linestyle=":", label=f"q = {q:g}")
            for ax, title in zip(row, ("FDR against m", "power against m", f"FDR against size (m = {m})",
                                       f"power against size (m = {m})")):
                ax.set_title(f"{benchmark}: {title}", fontsize=FONT_SIZE)
                ax.set_ylim(-0.02, 1.02)
            for ax in row[:2]:
                ax.set_xlabel("knockoffs per passage m")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            for ax in row[2:]:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(format_params)
                ax.xaxis.set_minor_formatter(format_params_minor)
                ax.set_xlabel("parameters")
            for ax in (row[1], row[3]):
                handles = legend_handles(ax, any_missing and "no member among the texts")
                ax.legend(handles=handles, frameon=False, fontsize=FONT_SIZE - 2)
        fig.suptitle(f"KTD knockoff+ at q = {q:g} (gradient-norm W): against the number of knockoffs "
                     "(Figure 3) and model size (Figure 5); mean over knockoff draws, bars one standard error "
                     "(none where one draw was distinct: no standard error, ktd.csv's blank fdr_se)")
        fig.tight_layout()
        return save_figure(fig, out_prefix)


def plot_w_distributions(w: pd.DataFrame, out_prefix: str, *, m: int) -> list[Path]:
    """KTD's Figure 2: W of members and non-members per (benchmark, model); 0 marked (Lemma 1 wants the
    non-members symmetric about it)."""
    from memaudit.figures.plots import FIGURE_WIDTH_IN, FONT_SIZE, new_figure, save_figure, style

    pairs = sorted({(b, mod) for b, mod in zip(w["benchmark"], w["model"])})
    ncols = min(len(pairs), 3)
    nrows = math.ceil(len(pairs) / ncols)
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 2.4 * nrows + 0.6)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax, (benchmark, model) in zip(axes, pairs):
            part = w[(w["benchmark"] == benchmark) & (w["model"] == model)]
            bins = np.histogram_bin_edges(part["w"], bins=min(25, max(5, int(np.sqrt(len(part))))))
            for value, name, color in ((0, "non-member", "tab:blue"), (1, "member", "tab:red")):
                values = part.loc[part["label"] == value, "w"]
                if len(values):
                    ax.hist(values, bins=bins, alpha=0.45, color=color, label=f"{name} (n={len(values)})")
            ax.axvline(0, color="grey", linestyle=":")
            ax.set_title(f"{benchmark} / {model}", fontsize=FONT_SIZE)
            ax.set_xlabel("W = Z - mean of knockoff Z")
            ax.legend(frameon=False, fontsize=FONT_SIZE - 2)
        for ax in axes[len(pairs):]:
            ax.set_visible(False)
        fig.suptitle(f"KTD's knockoff statistic W (gradient norm, m = {m}): members should sit right of 0, "
                     "non-members symmetric about it")
        fig.tight_layout()
        return save_figure(fig, out_prefix)
