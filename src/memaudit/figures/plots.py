"""Figures for the audit report: ROC curves, score distributions, AUC against model size.

Every figure is written as PNG and SVG next to each other (``<out_prefix>.png``,
``<out_prefix>.svg``), both atomically: either both files appear complete or
neither does.  Figures are built on :class:`matplotlib.figure.Figure` with the
Agg canvas rather than through ``pyplot``, so no global figure state or
interactive backend is involved (safe in Snakemake jobs and threads).

Inputs are the project's CSV frames, so every plotted number can be traced to
a file under ``results/``: ``doc_scores`` (``doc_id, label, method, score``)
and the summary frame of :mod:`memaudit.stats.summary`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from sklearn.metrics import roc_curve

from memaudit.errors import InputError
from memaudit.io import atomic_path
from memaudit.stats.metrics import roc_auc
from memaudit.stats.summary import DOC_SCORE_COLUMNS, as_bool, require_columns

log = logging.getLogger(__name__)

FIGURE_WIDTH_IN = 10.0
FONT_SIZE = 9
LOW_FPR_MIN = 1e-3
_RC = {
    "font.size": FONT_SIZE,
    "axes.titlesize": FONT_SIZE + 1,
    "axes.labelsize": FONT_SIZE,
    "legend.fontsize": FONT_SIZE - 1,
    "xtick.labelsize": FONT_SIZE - 1,
    "ytick.labelsize": FONT_SIZE - 1,
}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
# Past the palette's last colour, lines take the next style ("-.", then dash-dot-dot): dotted is chance.
LINESTYLES = ["-", "--", "-.", (0, (5, 1, 1, 1, 1, 1))]


def style():
    # rcParams are read when artists are created, so the whole figure is built inside.
    return matplotlib.rc_context(_RC)


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


# Where a missing value (an AUC of NaN: a method that scored one class only, or a model with no
# scores) is marked: a hollow marker this far up from the x axis, in axes coordinates, with "n/a".
MISSING_Y = 0.03
MISSING_AUC = "no AUC (one class only, or no scores)"
MISSING_LABEL = f"n/a (hollow, at the bottom): {MISSING_AUC}"


def mark_missing(ax, x, *, color, marker: str = "o") -> None:
    """Mark points whose y value is missing: a hollow marker at the bottom edge of ``ax`` (``x`` in data
    coordinates, y at :data:`MISSING_Y` of the axes height), each with "n/a" above it, so a point
    that could not be computed is told apart from one never computed. The x limits take them in."""
    x = np.asarray(x, dtype=float)
    if not x.size:
        return
    edge = ax.get_xaxis_transform()  # x: data, y: axes fraction
    ax.plot(x, np.full(x.size, MISSING_Y), ls="none", marker=marker, ms=6, mfc="none", mec=color,
            mew=1.2, transform=edge, clip_on=False, label="_missing")
    for xi in x:
        ax.annotate("n/a", (xi, MISSING_Y), xycoords=edge, xytext=(0, 5), textcoords="offset points",
                    ha="center", va="bottom", color=color, fontsize=FONT_SIZE - 3)


def missing_handle(reason: str = MISSING_AUC):
    """The legend entry that explains :func:`mark_missing`'s markers: "n/a (hollow, at the bottom): <reason>"
    (by default, for an AUC)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], ls="none", marker="o", ms=6, mfc="none", mec="grey",
                  label=f"n/a (hollow, at the bottom): {reason}")


def legend_handles(ax, missing: str | None = None) -> list:
    """``ax``'s legend handles, then, where ``missing`` gives why a value is missing (the panel has
    :func:`mark_missing`'s markers), the :func:`missing_handle` that explains them."""
    handles, _ = ax.get_legend_handles_labels()
    return handles + [missing_handle(missing)] if missing else handles


def palette(n: int) -> list:
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def line_styles(n: int) -> list[tuple]:
    """``(colour, line style)`` of ``n`` lines, no two alike up to ``4 x 20``: :func:`palette`'s colours, and
    once they repeat (past 20 lines) the next of :data:`LINESTYLES`."""
    size = 10 if n <= 10 else 20
    return [(color, LINESTYLES[(i // size) % len(LINESTYLES)]) for i, color in enumerate(palette(n))]


def save_figure(fig: Figure, out_prefix: str | os.PathLike) -> list[Path]:
    """Write ``<out_prefix>.png`` and ``.svg``; on any failure neither file appears."""
    paths = [Path(f"{os.fspath(out_prefix)}.png"), Path(f"{os.fspath(out_prefix)}.svg")]
    with contextlib.ExitStack() as stack:
        # Both temporaries are renamed only after both savefig calls succeed.
        tmp_png = stack.enter_context(atomic_path(paths[0]))
        tmp_svg = stack.enter_context(atomic_path(paths[1]))
        # A tight bounding box keeps legends placed outside the axes inside the image. It is found once
        # for both formats: bbox_inches="tight" draws the figure once more per format to find it, which
        # made saving half of a figure job's plotting time (session 69, an AVX2-only EPYC).
        bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
        fig.savefig(tmp_png, format="png", dpi=150, bbox_inches=bbox)
        fig.savefig(tmp_svg, format="svg", bbox_inches=bbox)
    return paths


# How a method with no score is named: its probe measured nothing (a cloze token type no reply answered).
NOT_MEASURED = "not measured: no scores"


def _check_doc_scores(doc_scores: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The scores to draw, and the methods whose every score is missing (:data:`NOT_MEASURED`, left out)."""
    require_columns(doc_scores, DOC_SCORE_COLUMNS, "document scores")
    if doc_scores.empty:
        raise InputError("document scores: no rows to plot")
    frame = doc_scores[DOC_SCORE_COLUMNS].copy()
    blank = frame["score"].isna().groupby(frame["method"]).transform("all")
    unmeasured = sorted(frame.loc[blank, "method"].unique(), key=str)
    frame = frame[~blank]
    frame["score"] = pd.to_numeric(frame["score"], errors="coerce")
    n_bad = int((~np.isfinite(frame["score"].to_numpy(dtype=float))).sum())
    if n_bad:
        raise InputError(f"document scores: {n_bad} score(s) are missing or not finite")
    return frame, unmeasured


def _nothing_measured(out_prefix, title: str, unmeasured: Sequence[str]) -> list[Path]:
    return plot_note(out_prefix, f"{title}: no method measured anything (every score blank: "
                                 f"{', '.join(map(str, unmeasured))})")


def plot_roc(doc_scores: pd.DataFrame, out_prefix: str | os.PathLike, title: str) -> list[Path]:
    """ROC curve per method: linear axes (left) and log-scale FPR from 1e-3 (right).

    The right panel shows the low-FPR regime that matters for accusing a single
    document (Carlini et al., 2022); the dotted line is a random detector
    (TPR = FPR).  FPR cannot be below ``1 / n_nonmember``, so with few
    non-members the curve starts at that FPR.  A method with a single class has
    no curve; its legend entry says so, as does that of a method with no score
    (:data:`NOT_MEASURED`); with no score at all the figure says so.  Past 20 methods the colours
    repeat with another line style.  Returns the PNG and SVG paths.
    """
    frame, unmeasured = _check_doc_scores(doc_scores)
    if frame.empty:
        return _nothing_measured(out_prefix, title, unmeasured)
    methods = sorted([*frame["method"].unique(), *unmeasured], key=str)
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 4.0)
        ax_lin, ax_log = fig.subplots(1, 2)
        plotted = 0
        for method, (color, ls) in zip(methods, line_styles(len(methods))):
            if method in unmeasured:
                ax_lin.plot([], [], color=color, ls=ls, lw=1.4, label=f"{method} ({NOT_MEASURED})")
                continue
            group = frame[frame["method"] == method]
            labels = group["label"].to_numpy()
            scores = group["score"].to_numpy(dtype=float)
            auc = roc_auc(scores, labels)
            if math.isnan(auc):
                ax_lin.plot([], [], color=color, ls=ls, lw=1.4, label=f"{method} (one class only: no curve)")
                continue
            # every threshold: the log panel's steps read TPR off the last point, and the default drops the inner
            # points of a straight segment (tied scores), drawing less TPR there than a threshold reaches
            fpr, tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
            ax_lin.plot(fpr, tpr, color=color, ls=ls, lw=1.4, label=f"{method} (AUC {auc:.3f})")
            positive = fpr > 0
            ax_log.plot(fpr[positive], tpr[positive], color=color, ls=ls, lw=1.4, drawstyle="steps-post")
            plotted += 1
        if not plotted:
            raise InputError("document scores: no method has both members and non-members")
        diagonal = np.logspace(math.log10(LOW_FPR_MIN), 0, 100)
        ax_lin.plot([0, 1], [0, 1], ls=":", color="grey", lw=1, label="chance")
        ax_log.plot(diagonal, diagonal, ls=":", color="grey", lw=1)
        ax_lin.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="false positive rate",
                   ylabel="true positive rate", title="ROC")
        ax_log.set_xscale("log")
        ax_log.set(xlim=(LOW_FPR_MIN, 1), ylim=(0, 1.01), xlabel="false positive rate (log)",
                   ylabel="true positive rate", title="low-FPR regime")
        for ax in (ax_lin, ax_log):
            ax.grid(alpha=0.3, lw=0.5)
        ax_lin.legend(loc="lower right", frameon=False)
        fig.suptitle(title)
        fig.tight_layout()
        return save_figure(fig, out_prefix)


def plot_score_distributions(
    doc_scores: pd.DataFrame, out_prefix: str | os.PathLike, title: str
) -> list[Path]:
    """Per method, histograms of members' and non-members' scores.

    Scores are z-scored within each method, ``z = (s - mean) / sd`` over all of
    that method's documents, so methods on different scales share one axis
    convention; a method with constant scores is only centred.  Densities are
    normalised per class so unequal class sizes compare fairly.  A method with no
    score has an empty panel saying so (:data:`NOT_MEASURED`).
    """
    frame, unmeasured = _check_doc_scores(doc_scores)
    if frame.empty:
        return _nothing_measured(out_prefix, title, unmeasured)
    methods = sorted([*frame["method"].unique(), *unmeasured], key=str)
    ncols = min(len(methods), 4)
    nrows = math.ceil(len(methods) / ncols)
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 2.4 * nrows + 0.6)
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        for ax, method in zip(axes, methods):
            if method in unmeasured:
                ax.set_title(f"{method}  {NOT_MEASURED}")
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            group = frame[frame["method"] == method]
            scores = group["score"].to_numpy(dtype=float)
            labels = group["label"].to_numpy()
            sd = scores.std()
            z = (scores - scores.mean()) / (sd if sd > 0 else 1.0)
            bins = np.histogram_bin_edges(z, bins=min(30, max(5, int(np.sqrt(z.size)))))
            for value, name, color in ((0, "non-member", "tab:blue"), (1, "member", "tab:red")):
                part = z[labels == value]
                if part.size:
                    ax.hist(part, bins=bins, density=True, alpha=0.45, color=color,
                            label=f"{name} (n={part.size})")
            auc = roc_auc(scores, labels)
            auc_text = "n/a" if math.isnan(auc) else f"{auc:.3f}"
            ax.set_title(f"{method}  AUC {auc_text}")
            ax.set_xlabel("score, z-scored within method")
            ax.set_ylabel("density")
            # Headroom so the legend does not cover the tallest bars.
            ax.set_ylim(top=ax.get_ylim()[1] * 1.3)
            ax.legend(frameon=False, loc="upper left", fontsize=FONT_SIZE - 2)
        for ax in axes[len(methods):]:
            ax.set_visible(False)
        fig.suptitle(f"{title} (higher score = more likely member)")
        fig.tight_layout()
        return save_figure(fig, out_prefix)


def plot_auc_vs_size(
    metrics: pd.DataFrame,
    models: pd.DataFrame,
    out_prefix: str | os.PathLike,
    title: str,
    methods: Sequence[str] | None = None,
) -> list[Path]:
    """AUC against parameter count, one panel per benchmark.

    ``metrics`` is the summary frame (:data:`memaudit.stats.summary.SUMMARY_COLUMNS`);
    ``models`` has ``model, family, n_params`` (and ``contaminated_on``, not
    needed here because ``metrics.contaminated`` already says whether the model
    saw that benchmark; ``contaminated_on`` separates the recipes).  One line per
    (method, family, members fine-tuned on): colour = method, marker = family,
    solid with filled markers = contaminated (open markers: not), dashed = base
    models, dash-dotted = fine-tuned on another benchmark's members
    (:func:`size_line`), the axis at least a decade wide.  Error bars are the
    bootstrap 95% interval ``[auc_ci_low, auc_ci_high]``; the dotted line is
    chance (0.5).  An AUC that could not be computed (NaN: the method scored
    members only or non-members only, or the model has no scores) is a hollow
    marker with "n/a" at the bottom edge (:func:`mark_missing`), and the legend
    says so.  ``methods`` defaults to every method present.
    """
    require_columns(metrics, ["benchmark", "model", "contaminated", "method", "auc",
                              "auc_ci_low", "auc_ci_high"], "metrics")
    require_columns(models, ["model", "family", "n_params"], "models")
    if methods is None:
        methods = sorted(metrics["method"].unique(), key=str)
    methods = list(methods)
    absent = [m for m in methods if m not in set(metrics["method"])]
    if absent:
        raise InputError(f"metrics: no rows for method {absent[0]!r}")
    unknown = sorted(set(metrics["model"]) - set(models["model"]), key=str)
    if unknown:
        raise InputError(f"models: no entry for model {unknown[0]!r} named in the metrics")

    # a model scored by none of the methods drawn (a model only the cloze or CopyBench probes ran) has no point:
    # named under the figure and in the log, where it went missing unseen from a figure "of every local model"
    undrawn = sorted(set(metrics["model"]) - set(metrics.loc[metrics["method"].isin(methods), "model"]), key=str)
    if undrawn:
        log.info("not drawn (scored by none of the methods shown): %s", ", ".join(map(str, undrawn)))
    tuned = models["contaminated_on"] if "contaminated_on" in models.columns else [""] * len(models)
    recipes = models[["model", "family", "n_params"]].assign(tuning=[fine_tuning(v) for v in tuned])
    data = metrics[metrics["method"].isin(methods)].merge(recipes.drop_duplicates("model"), on="model", how="left")
    data["n_params"] = pd.to_numeric(data["n_params"], errors="coerce")
    if not (data["n_params"] > 0).all():
        bad = data.loc[~(data["n_params"] > 0), "model"].iloc[0]
        raise InputError(f"models: n_params of {bad!r} must be a positive number")
    data["contaminated"] = data["contaminated"].map(as_bool)
    if data.empty:
        raise InputError("metrics: nothing to plot")

    benchmarks = sorted(data["benchmark"].unique(), key=str)
    families = sorted(data["family"].unique(), key=str)
    colors = dict(zip(methods, palette(len(methods))))
    # Methods are drawn slightly apart along x (a factor of 10**0.01 = 2.3% per
    # method) so that their error bars at the same model do not hide each other.
    dodge = {m: 10 ** (0.01 * (i - (len(methods) - 1) / 2)) for i, m in enumerate(methods)}
    markers = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(families)}
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 4.0)
        axes = np.atleast_1d(fig.subplots(1, len(benchmarks), squeeze=False)).ravel()
        any_missing = False
        for ax, benchmark in zip(axes, benchmarks):
            panel = data[data["benchmark"] == benchmark]
            for (method, family, contaminated, tuning), line in panel.groupby(
                ["method", "family", "contaminated", "tuning"], sort=True
            ):
                line = line.sort_values("n_params")
                auc = line["auc"].to_numpy(dtype=float)
                x = line["n_params"].to_numpy(dtype=float) * dodge[method]
                # a line of one model is a point, whose dashes cannot show: filled marker = contaminated
                ls, kind = size_line(contaminated, tuning, benchmark)
                ax.plot(x, auc, color=colors[method], marker=markers[family], ms=4, lw=1.2,
                        ls=ls, mfc=colors[method] if contaminated else "white",
                        mec=colors[method], label=" · ".join([str(method), str(family)] + ([kind] if kind else [])))
                # A percentile interval may lie wholly above or below the point estimate: the bar
                # is drawn about its own midpoint, so it spans [low, high] as metrics.csv has it
                # (errors relative to the AUC, clipped at 0, cut off the part beyond the point).
                low = line["auc_ci_low"].to_numpy(dtype=float)
                high = line["auc_ci_high"].to_numpy(dtype=float)
                ax.errorbar(x, (low + high) / 2, yerr=(high - low) / 2, fmt="none", ecolor=colors[method],
                            elinewidth=1.2, capsize=2, label="_interval")
                missing = np.isnan(auc)
                mark_missing(ax, line["n_params"].to_numpy(dtype=float)[missing] * dodge[method],
                             color=colors[method], marker=markers[family])
                any_missing |= bool(missing.any())
            ax.axhline(0.5, ls=":", color="grey", lw=1)
            ax.set_xscale("log")
            # Sizes within a decade (a base and its fine-tune share one): the dodge alone set the limits,
            # no tick fell inside and the methods read as models of different sizes; show a decade about them.
            lowest = panel["n_params"].min() * min(dodge.values())
            highest = panel["n_params"].max() * max(dodge.values())
            if highest < 10 * lowest:
                centre = math.sqrt(lowest * highest)
                ax.set_xlim(centre / math.sqrt(10), centre * math.sqrt(10))
            ax.xaxis.set_major_formatter(FuncFormatter(format_params))
            ax.xaxis.set_minor_formatter(FuncFormatter(format_params_minor))
            ax.set(xlabel="parameters (log scale)", ylabel="ROC AUC", title=str(benchmark))
            ax.grid(alpha=0.3, lw=0.5)
        handles, labels = axes[0].get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        for ax in axes[1:]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(label, handle)
        if any_missing:
            seen[MISSING_LABEL] = missing_handle()
        fig.legend(list(seen.values()), list(seen.keys()), loc="center left",
                   bbox_to_anchor=(1.0, 0.5), frameon=False)
        fig.suptitle(f"{title} (dotted: chance; bars: bootstrap 95% CI)")
        if undrawn:
            fig.text(0.01, 0.005, "not drawn (scored by none of these methods): " + ", ".join(map(str, undrawn)),
                     fontsize=7, color="grey", ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.04, 1, 1) if undrawn else None)
        return save_figure(fig, out_prefix)


def fine_tuning(contaminated_on) -> str:
    """The member sets a model was fine-tuned on, as a size line's key and label: ``"news, novels"`` from a
    manifest's list or ``models.csv``'s ``;``-joined cell, ``""`` for a model fine-tuned on nothing (blank,
    NaN or absent)."""
    if contaminated_on is None or (isinstance(contaminated_on, float) and math.isnan(contaminated_on)):
        return ""
    parts = contaminated_on.split(";") if isinstance(contaminated_on, str) else list(contaminated_on)
    return ", ".join(sorted({str(p).strip() for p in parts if str(p).strip()}))


def size_line(contaminated: bool, tuning: str, benchmark: str) -> tuple[str, str]:
    """How a size figure shows one kind of model on ``benchmark``: its linestyle and the label's suffix.
    A line joins the models of one recipe across sizes (the bases; the fine-tunes on the same members), so a
    model fine-tuned on another benchmark's members is a line of its own, dash-dotted, not a point on its base's
    line at the same size (which drew a vertical stroke that read as a size trend)."""
    # solid = fine-tuned on this benchmark's members, as in every figure of the report (DE-COP's, the selection
    # figures, KTD's); this one drew them dashed until session 76
    if contaminated:
        return "-", "contaminated" if tuning in ("", str(benchmark)) else f"contaminated: fine-tuned on {tuning}"
    if tuning:
        return "-.", f"fine-tuned on {tuning}, not this benchmark"
    return "--", ""


def format_params(value: float, _pos=None) -> str:
    """1.6e8 -> '160M', 7e9 -> '7B', for parameter-count axes."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def format_params_minor(value: float, _pos=None) -> str:
    # Label only the 2x and 5x minor ticks; labelling all eight crowds the axis.
    leading = value / 10 ** math.floor(math.log10(value)) if value > 0 else 0
    return format_params(value) if round(leading) in (2, 5) else ""


def plot_note(out_prefix: str | os.PathLike, text: str) -> list[Path]:
    """A figure that says why there is nothing to draw (a run whose benchmarks are all unlabelled), so the
    report and every rule reading the figure still find it."""
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 1.6)
        ax = fig.subplots()
        ax.axis("off")
        ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
        return save_figure(fig, out_prefix)


def plot_selection(selection: pd.DataFrame, out_prefix: str | os.PathLike, methods: Sequence[str],
                   title: str = "Conformal p-values + Benjamini-Hochberg: documents named as members "
                                "(a random stats.selection.calibration_fraction of the non-members as calibration; "
                                "mean over splits)") -> list[Path]:
    """Empirical FDR and power of conformal BH against the target q (KTD's Figure 1), one row of
    panels per benchmark and one line per model, for the first of ``methods`` each model has.

    ``selection`` is ``results/summary/selection.csv``. A model with none of ``methods`` has no line;
    its legend entry says so (its rows stay in the table). Contaminated models are solid lines, the others
    dashed; the FDR panel's diagonal is the bound ``FDR = q``. A missing value (power where the test
    documents hold no member) is a hollow "n/a" marker at the bottom of its panel (:func:`mark_missing`).
    """
    require_columns(selection, ["benchmark", "model", "contaminated", "method", "q", "fdr", "power"], "selection table")
    if selection.empty:
        raise InputError("selection table: no rows to plot")
    benchmarks = sorted(selection["benchmark"].unique())
    with style():
        fig = new_figure(FIGURE_WIDTH_IN, 2.8 * len(benchmarks) + 0.6)
        axes = fig.subplots(len(benchmarks), 2, squeeze=False)
        any_missing = selection[["fdr", "power"]].isna().to_numpy().any()
        for (ax_fdr, ax_power), benchmark in zip(axes, benchmarks):
            part = selection[selection["benchmark"] == benchmark]
            models = sorted(part["model"].unique())
            styles = set()
            for color, model in zip(palette(len(models)), models):
                rows = part[part["model"] == model]
                method = next((m for m in methods if m in set(rows["method"])), None)
                if method is None:
                    ax_power.plot([], [], color=color, label=f"{model} (none of stats.selection.figure_methods: "
                                                             f"no line)")
                    continue
                line = rows[rows["method"] == method].sort_values("q")
                dash = "-" if as_bool(line["contaminated"].iloc[0]) else "--"
                styles.add(dash)
                for ax, column in ((ax_fdr, "fdr"), (ax_power, "power")):
                    ax.plot(line["q"], line[column], dash, marker="o", markersize=3, color=color,
                            label=f"{model} ({method})")
                    mark_missing(ax, line.loc[line[column].isna(), "q"], color=color)
            ax_fdr.plot([0, 1], [0, 1], ":", color="grey", label="FDR = q")
            ax_fdr.set_title(f"{benchmark}: empirical FDR")
            ax_power.set_title(f"{benchmark}: power")
            for ax in (ax_fdr, ax_power):
                ax.set_xlabel("target FDR q")
                ax.set_xlim(0, 1)
                ax.set_ylim(-0.02, 1.02)
            handles = legend_handles(ax_power)
            # what the line styles mean, in the legend (only the caption said it)
            from matplotlib.lines import Line2D

            handles += [Line2D([], [], color="black", linestyle=dash, label=text)
                        for dash, text in (("-", "solid: fine-tuned on the benchmark's members"),
                                           ("--", "dashed: not fine-tuned on the benchmark's members"))
                        if dash in styles]
            if any_missing:
                handles.append(missing_handle("no member among the test documents"))
            ax_power.legend(handles=handles, frameon=False, fontsize=FONT_SIZE - 2, loc="center left",
                            bbox_to_anchor=(1.02, 0.5))
        fig.suptitle(title)
        fig.tight_layout()
        return save_figure(fig, out_prefix)
