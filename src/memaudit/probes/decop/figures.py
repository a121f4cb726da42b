"""The DE-COP figures of one benchmark and the AUC table they plot (``results/summary/decop_<benchmark>.csv``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from matplotlib.ticker import FuncFormatter

from memaudit.figures.plots import (FIGURE_WIDTH_IN, MARKERS, MISSING_AUC, fine_tuning, format_params, legend_handles,
                                    mark_missing, new_figure, plot_note, save_figure, size_line, style)
from memaudit.io import read_csv, read_json, read_jsonl, write_csv
from memaudit.probes.decop.analysis import auc_summary, longest_option_rate, longest_option_rows

log = logging.getLogger(__name__)


def make_decop_figures(benchmark: str, tables: Sequence[str], answers: Sequence[str], calibrations: Sequence[str],
                       model_dirs: Sequence[str], out: dict, items: str | Path | None = None,
                       families: dict[str, str] | None = None) -> pd.DataFrame:
    """The AUC table and figures of one benchmark; with the benchmark's ``items``, the table also
    holds the blind longest-option rows (:func:`~memaudit.probes.decop.analysis.longest_option_rows`).
    ``families``: each model's family (the config's, :func:`memaudit.jobs.families`), which a manifest
    prepared before the family was renamed does not hold."""
    manifests = [read_json(Path(d) / "manifest.json") for d in model_dirs]
    n_params = {m["name"]: m.get("n_params") for m in manifests}
    by_model: dict[str, list[pd.DataFrame]] = {}
    for path in tables:
        table = read_csv(path)
        by_model.setdefault(str(table["model"].iloc[0]), []).append(table.drop(columns=["model", "mode"]))
    merged = {m: pd.concat(ts, ignore_index=True) for m, ts in by_model.items()}
    summary = auc_summary(merged, n_params)
    if items is not None:
        records = read_jsonl(items)
        blind = longest_option_rows(records)
        if not blind.empty:
            summary = pd.concat([summary, blind], ignore_index=True)
            hits, n, p = longest_option_rate(records)
            log.info(f"DE-COP on {benchmark}: the verbatim passage is the strictly longest option in {hits} of "
                     f"{n} evaluated passages ({hits / n:.0%}; chance 25%, binomial p = {p:.2g}). A model that "
                     "picks the longest option scores that without having seen anything: read accuracies "
                     "against the table's (none) decop-longest-option rows")
    write_csv(out["summary"], summary)
    runs = {}
    for path in answers:
        frame = read_csv(path)
        runs[f"{frame['model'].iloc[0]} ({frame['mode'].iloc[0]})"] = frame
    deltas = calibration_deltas(calibrations)
    strip = lambda p: str(p)[:-4]  # noqa: E731 - plots write <prefix>.png and .svg
    sized = {m["name"]: {"family": (families or {}).get(m["name"], m.get("family", m["name"])),
                         "contaminated": benchmark in m["contaminated_on"],
                         "fine_tuned_on": fine_tuning(m["contaminated_on"])} for m in manifests}
    plot_decop_auc_by_size(summary, strip(out["auc_by_size"]), f"DE-COP on {benchmark}: AUC by model size", sized,
                           benchmark=benchmark)
    plot_decop_auc_by_length(summary, strip(out["auc_by_length"]), f"DE-COP on {benchmark}: AUC by length")
    plot_decop_calibration_accuracy(merged, strip(out["calibration"]),
                                          f"DE-COP on {benchmark}: logit mode with and without calibration")
    plot_decop_accuracy_by_position(runs, strip(out["position"]),
                                          f"DE-COP on {benchmark}: accuracy by position of the verbatim passage")
    plot_decop_label_probabilities(runs, deltas, strip(out["probabilities"]),
                                         f"DE-COP on {benchmark}: label probabilities before/after calibration")
    return summary


def calibration_deltas(calibrations: Sequence[str | Path]) -> dict[str, tuple[int, dict]]:
    """``"<model> (<mode>)" -> (length, Algorithm 1's Δ per letter)`` at the shortest length that was
    calibrated, from the probe jobs' calibration files. A length whose calibration was skipped (no clean
    document survived quality control, or ``calibration_documents`` is 0 for the benchmark) has no Δ: a
    job with none is left out of the label-probability figure (it crashed the figures job)."""
    deltas = {}
    for path in calibrations:
        record = json.loads(Path(path).read_text())
        done = {int(length): c for length, c in record.get("calibration", {}).items() if "delta" in c}
        if done:
            deltas[f"{record['model']} ({record['mode']})"] = (min(done), done[min(done)]["delta"])
    return deltas


# ----------------------------------------------------------------------------- the figures

# Which AUC: the ROC-AUC of the document scores (accuracy, or mean verbatim probability), the
# summary table's `auc`. DE-COP's own tables and Figures 4-5 report the mean of 10 bootstrap
# resamples of the reference code's binarized AUC (Section 5.1), which metrics.csv carries as
# auc_binarized_boot_mean: the two are not the same number.
AUC_LABEL = "ROC-AUC of document scores"

def _legend(ax, any_missing: bool) -> None:
    ax.legend(handles=legend_handles(ax, any_missing and MISSING_AUC), loc="center left", bbox_to_anchor=(1.01, 0.5))


def plot_decop_auc_by_size(summary: pd.DataFrame, out_prefix, title: str, models: dict[str, dict],
                           benchmark: str = "") -> list[Path]:
    """DE-COP AUC against parameter count at the shortest passage length, one line per (method, model
    family, members fine-tuned on): ``models`` gives each model's ``family``, whether it was fine-tuned on this
    benchmark's members (``contaminated``, from its manifest's ``contaminated_on``; solid), not its name, and
    which members it was fine-tuned on (``fine_tuned_on``, :func:`~memaudit.figures.plots.fine_tuning`): a
    model fine-tuned on another benchmark's members is a line of its own (dash-dotted), not a point on its
    base's line at the same size.
    An AUC that could not be computed (NaN: one class only) is a hollow marker with "n/a" at the bottom;
    a model without a parameter count (an API model) has no place on the axis and is not drawn."""
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 0.6, 4.0)
        ax = fig.add_subplot()
        data = summary.dropna(subset=["n_params"])
        data = data[data["length"] == data["length"].min()] if not data.empty else data
        data = data.assign(family=[models[m]["family"] for m in data["model"]],
                           contaminated=[bool(models[m]["contaminated"]) for m in data["model"]],
                           tuning=[fine_tuning(models[m].get("fine_tuned_on")) for m in data["model"]])
        groups = list(data.groupby(["method", "family", "contaminated", "tuning"])) if not data.empty else []
        for (i, ((method, family, contaminated, tuning), g)) in enumerate(groups):
            g = g.sort_values("n_params")
            linestyle, kind = size_line(contaminated, tuning, benchmark)
            (line,) = ax.plot(g["n_params"], g["auc"], marker=MARKERS[i % len(MARKERS)], linestyle=linestyle,
                              label=f"{method}, {family} ({kind or 'not contaminated'})")
            mark_missing(ax, g.loc[g["auc"].isna(), "n_params"], color=line.get_color(),
                         marker=MARKERS[i % len(MARKERS)])
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(format_params))
        ax.set(xlabel="parameters", ylabel=AUC_LABEL, ylim=(0, 1.02), title=title)
        if groups:
            _legend(ax, data["auc"].isna().any())
        return save_figure(fig, out_prefix)


def plot_decop_auc_by_length(summary: pd.DataFrame, out_prefix, title: str) -> list[Path]:
    """DE-COP AUC against passage length (tokens), one line per (model, method) without calibration; an AUC
    that could not be computed (NaN: one class only) is a hollow marker with "n/a" at the bottom."""
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 0.6, 4.0)
        ax = fig.add_subplot()
        if not summary.empty:
            data = summary.assign(method=summary["method"].str.replace(r"-\d+tok$", "", regex=True))
            data = data[~data["method"].str.contains("-calibrated")]
            for i, ((model, method), g) in enumerate(data.groupby(["model", "method"])):
                g = g.sort_values("length")
                (line,) = ax.plot(g["length"], g["auc"], marker=MARKERS[i % len(MARKERS)], label=f"{model} ({method})")
                mark_missing(ax, g.loc[g["auc"].isna(), "length"], color=line.get_color(),
                             marker=MARKERS[i % len(MARKERS)])
            ax.set_xticks(sorted(data["length"].unique()))
            _legend(ax, data["auc"].isna().any())
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="passage length (tokens)", ylabel=AUC_LABEL, ylim=(0, 1.02), title=title)
        return save_figure(fig, out_prefix)


def plot_decop_calibration_accuracy(tables: dict[str, pd.DataFrame], out_prefix, title: str) -> list[Path]:
    """Mean document accuracy by group (members / non-members), logit mode without and with calibration; a
    bar with no documents (a model whose calibration was skipped has no calibrated rows) is a hollow
    marker with "n/a" at the bottom."""
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 0.6, 4.0)
        ax = fig.add_subplot()
        rows = []
        for model, t in tables.items():
            ev = t[(t["role"] == "evaluate") & t["method"].str.startswith("decop-logit")
                   & ~t["method"].str.contains("-prob")]
            ev = ev[ev["length"] == ev["length"].min()] if not ev.empty else ev
            for (method, label), g in ev.groupby(["method", "label"]):
                rows.append((model, "calibrated" if "calibrated" in method else "raw", int(label), g["accuracy"].mean()))
        data = pd.DataFrame(rows, columns=["model", "variant", "label", "accuracy"])
        if data.empty:  # blank axes with a raw/calibrated legend said nothing of why
            return plot_note(out_prefix, f"{title}: no logit-mode table in this run (the calibration, Algorithm 1, "
                                         f"is logit mode's: probes.decop_logit.models)")
        bars = [(m, lab) for m in sorted(data["model"].unique()) for lab in (1, 0)]
        x = np.arange(len(bars))
        any_missing = False
        for k, variant in enumerate(("raw", "calibrated")):
            vals = np.array([data.loc[(data["model"] == m) & (data["label"] == lab) & (data["variant"] == variant),
                                      "accuracy"].mean() for m, lab in bars], dtype=float)
            drawn = ax.bar(x + (k - 0.5) * 0.38, vals, width=0.38, label=f"{variant}")
            # a model whose calibration was skipped (no clean calibration document) has no calibrated bar
            if len(drawn.patches):
                mark_missing(ax, (x + (k - 0.5) * 0.38)[np.isnan(vals)], color=drawn.patches[0].get_facecolor())
            any_missing |= bool(np.isnan(vals).any())
        ax.set_xticks(x, [f"{m}\n{'members' if lab else 'non-members'}" for m, lab in bars], rotation=30, ha="right")
        ax.axhline(0.25, color="grey", lw=0.8, ls=":")
        ax.set(ylabel="mean document accuracy", ylim=(0, 1.02), title=title)
        ax.legend(handles=legend_handles(ax, any_missing and "no documents (calibration skipped)"))
        return save_figure(fig, out_prefix)


def plot_decop_accuracy_by_position(answers: dict[str, pd.DataFrame], out_prefix, title: str) -> list[Path]:
    """Accuracy by the position (A-D) of the verbatim option, per model and group (selection bias)."""
    from memaudit.probes.decop.analysis import accuracy_by_position

    if not any(a.loc[a["role"] == "evaluate", "ordering"].nunique() >= 2 for a in answers.values()):
        # likelihood mode only: order-free, one question per passage; blank axes said nothing of why
        return plot_note(out_prefix, f"{title}: no mode of this run shows the options in more than one order "
                                     f"(likelihood mode scores them order-free; logit and black-box modes rotate them)")
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 0.6, 4.0)
        ax = fig.add_subplot()
        i = 0
        for name, a in answers.items():
            a = a[(a["role"] == "evaluate") & (a["length"] == a["length"].min())]
            if a["ordering"].nunique() < 2:
                continue  # likelihood mode: order-free, one question per passage
            for label, g in accuracy_by_position(a).groupby("label"):
                ax.plot(g["position"], g["accuracy"], marker=MARKERS[i % len(MARKERS)],
                        linestyle="-" if label else "--", label=f"{name}, {'members' if label else 'non-members'}")
                i += 1
        ax.axhline(0.25, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="position of the verbatim passage", ylabel="accuracy", ylim=(0, 1.02), title=title)
        if i:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        return save_figure(fig, out_prefix)


def plot_decop_label_probabilities(answers: dict[str, pd.DataFrame], deltas: dict[str, tuple[int, dict]],
                                   out_prefix, title: str) -> list[Path]:
    """Mean P(A-D) on the evaluated documents before and after adding Δ, the clean calibration documents'
    (:func:`calibration_deltas`), both at the length Δ was computed for: each document's mean, then their
    mean, as Algorithm 1 averages. Appendix E's Figure 9 shows the same for one evaluated book (A Day of
    Fallen Night, a clean one). On the calibration documents themselves "after" is 0.25 by construction."""
    from memaudit.probes.decop.analysis import PROB_COLUMNS

    evaluated = {name: a[(a["role"] == "evaluate") & (a["length"] == deltas[name][0])]
                 for name, a in answers.items() if name in deltas}
    evaluated = {name: a for name, a in evaluated.items() if not a.empty}
    if not evaluated:  # no calibrated logit run: blank axes said nothing of why
        return plot_note(out_prefix, f"{title}: no label adjustment Δ in this run (logit mode with clean calibration "
                                     f"documents: probes.decop_logit.models, probes.decop.calibration_documents)")
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 0.6, 4.0)
        ax = fig.add_subplot()
        names = list(evaluated)
        width = 0.8 / max(1, 2 * len(names))
        for k, name in enumerate(names):
            before = evaluated[name].groupby("doc_id")[list(PROB_COLUMNS)].mean().mean().to_numpy()
            after = before + np.array([deltas[name][1][x] for x in "ABCD"])
            x = np.arange(4)
            ax.bar(x + (2 * k - len(names)) * width + width / 2, before, width, label=f"{name} before")
            ax.bar(x + (2 * k + 1 - len(names)) * width + width / 2, after, width, label=f"{name} after", alpha=0.6)
        ax.axhline(0.25, color="grey", lw=0.8, ls=":")
        ax.set_xticks(np.arange(4), list("ABCD"))
        ax.set(xlabel="label", ylabel="mean probability (evaluated documents)", title=title)
        if names:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
        return save_figure(fig, out_prefix)
