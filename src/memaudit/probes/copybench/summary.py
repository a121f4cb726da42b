"""CopyBench's tables and figures over every (benchmark, model, mode) job.

``results/summary/copybench.csv``
    one row per (benchmark, model, mode, decoding, group, statistic): the paper's copying
    rates (ROUGE-L >= 0.8, events >= 5, characters >= 3; its Tables 2, 4 and 5) and mean
    scores, for member books, non-member books and all, each the mean over items of an item's formats,
    with a 95% interval over items, or whole books or documents (:func:`rate_interval`);
    story rows carry the event judge, its agreement with labelled pairs, its invalid verdicts on the
    stories and where the events and characters came from (``extractive`` on the demo's builder), and
    fact-recall rows the question source and writer. With a fluency judge
    (``probes.copybench.fluency_judge.model``), literal and story rows add
    ``mean_copybench_fluency`` (the paper's Fluency columns: the mean 1-5 rating of the rated
    outputs) and every row of those jobs says how many outputs were rated, invalid or empty.
``results/summary/copybench_differences.csv``
    contaminated model minus its base on the same prompts (paired per item, scores averaged
    over prompt formats), member and non-member items apart, with a paired bootstrap
    interval (over whole books where the labels are given per book, else over documents where
    they hold several items, else over items: ``ci_unit``, ``n_units``): the ground-truth check
    that contamination shows up as copying and only on the books the model was fine-tuned on.
    Literal scores: the mean ROUGE-L, the paper's literal
    copying (``copybench_rougeL_copy``: the share of outputs at ROUGE-L >= 0.8, so the
    difference is the difference of copying rates) and the excess over chance. A third row per score, group
    ``member_minus_nonmember``, is the difference in differences (the member items' mean gain
    minus the non-member items'; each group resampled on its own): fine-tuning on books of one
    author or genre also teaches their style, which raises the scores on that author's other
    books too (the demo's Austen novels), so the member gain beyond the non-member gain is what
    the fine-tuned text itself adds.
``results/figures/copybench/distributions.png``
    the skewed distributions of ROUGE-L, events and characters per model (the paper's Figure 4).
``results/figures/copybench/copying_vs_recall.png``
    literal, event and character copying rates (%) against fact-recall F1 (0-100), one point per
    (benchmark, model, decoding): the paper's Figure 2, drawn from the rows of ``copybench.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Sequence

import numpy as np
import pandas as pd

from memaudit.io import read_json, read_jsonl, write_csv
from memaudit.probes.copybench import metrics
from memaudit.stats.metrics import holds_zero, independent_difference, label_groups, paired_difference

# copybench_rougeL_copy: 1 where an output's ROUGE-L reaches the paper's 0.8 (what it counts as literal
# copying), averaged over prompt formats like the other scores: its paired difference is the difference
# of the two models' literal copying rates on the same prompts
COPY_SCORE = "copybench_rougeL_copy"
SCORES = {"literal": ("copybench_rougeL", COPY_SCORE, "copybench_rougeL_excess"),
          "nonliteral": ("copybench_characters", "copybench_events"), "qa": ("copybench_qa_f1", "copybench_qa_em")}


GROUPS = {1: "member", 0: "nonmember"}  # label -1: an unlabelled benchmark's items (published CopyBench)
DID_GROUP = "member_minus_nonmember"  # the member gain beyond the non-member gain


def _parse(path: str) -> tuple[str, str, str]:
    """(benchmark, model, mode) of results/scores/<benchmark>/<model>/copybench_<mode>_<kind>.*"""
    p = Path(path)
    return p.parent.parent.name, p.parent.name, p.name.split("_")[1]


# a rate_<name> statistic of outcomes.json: the prompts whose score reaches the paper's threshold
THRESHOLDS = {"rougeL>=0.8": ("copybench_rougeL", metrics.LITERAL_THRESHOLD),
              "events>=5": ("copybench_events", metrics.EVENT_THRESHOLD),
              "characters>=3": ("copybench_characters", metrics.CHARACTER_THRESHOLD)}
# A rate's interval holds Clopper-Pearson's (exact) where the items that copied, or those that did not, are
# fewer than this: a bootstrap of a few successes (none: [0, 0]) is far narrower than what they allow.
RARE_COUNT = 5


def rate_interval(item_values, units=None, *, rate: bool, seed: int) -> dict:
    """The mean over items of ``item_values`` (each item's score averaged over its prompt formats) and its
    95% interval, resampling the independent units: ``units`` (each item's book, where the labels are given
    per book, or document, where documents hold several items: as :func:`differences_table`) whole, else
    the items (:func:`memaudit.stats.metrics.paired_difference` against 0: its cluster bootstrap, widened to
    hold the items' interval). An item's formats are one draw, not three: resampling prompts one by one
    counted each item three times and made the interval ~sqrt(3) too narrow (its 95% held the rate 65% of
    the time, 48% with a book effect).

    A ``rate`` (a share of prompts at the paper's threshold) with fewer than :data:`RARE_COUNT` items on either
    side of it (``x = round(rate * n)`` of the ``n`` items copied, an item's formats averaged) also holds
    Clopper-Pearson's exact interval for ``x`` of ``n`` (``scipy.stats.binomtest``, ``ci_method``
    clopper-pearson): none of 10 items copying is [0, 0.3085], where every bootstrap resample reads 0 and the
    prompt bootstrap's [0, 0] read as certain. It counts items as independent: where books differ it is the
    least the interval can be, the books' bootstrap widening it where there are copies to resample.
    Returns value, ci_low, ci_high, n_items, ci_unit, n_units, ci_method."""
    from scipy.stats import binomtest

    values = np.asarray(item_values, dtype=float)
    nan = float("nan")
    if not values.size:
        return {"value": nan, "ci_low": nan, "ci_high": nan, "n_items": 0, "ci_unit": None, "n_units": 0,
                "ci_method": None}
    name = "item" if units is None else units[0]
    groups = None if units is None else units[1]
    value, low, high = paired_difference(values, np.zeros_like(values), seed=seed, groups=groups)
    n_units = values.size if groups is None else int(pd.unique(np.asarray(groups, dtype=str)).size)
    method = "bootstrap"
    if rate:
        n = values.size
        copied = int(round(value * n))
        if min(copied, n - copied) < RARE_COUNT:
            exact = binomtest(copied, n).proportion_ci(confidence_level=0.95, method="exact")
            low = exact.low if np.isnan(low) else min(low, exact.low)
            high = exact.high if np.isnan(high) else max(high, exact.high)
            method = "clopper-pearson"
    return {"value": value, "ci_low": float(low), "ci_high": float(high), "n_items": int(values.size),
            "ci_unit": name, "n_units": n_units, "ci_method": method}


def _prompt_values(frame: pd.DataFrame, statistic: str) -> pd.Series | None:
    """Each prompt's value of an outcomes.json statistic (``rate_<threshold or column>``, ``mean_<column>``);
    NaN where the prompt has none (an unrated output's fluency); None where the items file lacks it."""
    kind, _, name = statistic.partition("_")
    if kind == "rate" and name in THRESHOLDS:
        column, threshold = THRESHOLDS[name]
        if column not in frame:
            return None
        values = pd.to_numeric(frame[column], errors="coerce")
        return (values >= threshold).astype(float).where(values.notna())
    if kind in ("rate", "mean") and name in frame:
        return pd.to_numeric(frame[name].astype(object).where(frame[name].notna()), errors="coerce").astype(float)
    return None


def item_rates(items_path: str, *, per_book: bool, seed: int, statistics: Collection[str]) -> dict:
    """``{(decoding, group, statistic): rate_interval(...)}`` from a job's items file (one row per prompt): each
    item's prompts averaged over their formats (an item without a value, e.g. no rated output, left out), then
    :func:`rate_interval` over the items of each group (member, nonmember, all), their unit the book where the
    labels are given per book (``per_book``), else the document, where it holds several items and one label,
    else the item (:func:`memaudit.stats.metrics.label_groups`, as :func:`differences_table`)."""
    frame = pd.DataFrame(read_jsonl(items_path))
    out: dict = {}
    if frame.empty:
        return out
    column = "book" if per_book else "doc_id"
    for decoding, prompts in frame.groupby("decoding", sort=False):
        # whether the units are the draws is a question of the whole benchmark, both sides (as the differences')
        each = prompts.groupby("item_id").first()
        clustered = (column in each and each[column].notna().all()
                     and label_groups(each[column].astype(str).tolist(), each["label"]) is not None)
        for group, mask in (("member", prompts["label"] == 1), ("nonmember", prompts["label"] == 0),
                            ("all", pd.Series(True, index=prompts.index))):
            block = prompts[mask]
            for statistic in statistics:
                values = _prompt_values(block, statistic)
                if values is None:
                    continue
                items = block.assign(_value=values).groupby("item_id", sort=True).agg(
                    value=("_value", "mean"), **({"unit": (column, "first")} if clustered else {}))
                items = items[items["value"].notna()]
                units = (("book" if per_book else "document", items["unit"].astype(str).to_numpy()) if clustered
                         else None)
                out[decoding, group, statistic] = rate_interval(items["value"].to_numpy(), units,
                                                                rate=statistic.startswith("rate_"), seed=seed)
    return out


RATE_INTERVAL_COLUMNS = ("n_items", "ci_unit", "n_units", "ci_method")


def rates_table(outcome_paths: Sequence[str], items_paths: Sequence[str] = (), *, per_book: Collection[str] = (),
                seed: int = 0) -> pd.DataFrame:
    """copybench.csv: a row per (job, decoding, group, statistic) of each job's outcomes.json. With the job's
    items file (``items_paths``, matched by benchmark, model and mode), the value and its interval are
    :func:`item_rates`' (items, formats averaged, resampled by book or document: ``n_items``, ``ci_unit``,
    ``n_units``, ``ci_method``); a job without one keeps outcomes.json's numbers, a bootstrap of the
    prompts one by one (``ci_unit`` prompt), whose interval is too narrow."""
    items_of = {_parse(p): p for p in items_paths}
    rows = []
    for path in outcome_paths:
        benchmark, model, mode = _parse(path)
        out = read_json(path)
        statistics = {k for block in out["decodings"].values() for group in ("member", "nonmember", "all")
                      for k in block.get(group, {}) if k != "n"}
        recomputed = (item_rates(items_of[benchmark, model, mode], per_book=benchmark in per_book, seed=seed,
                                 statistics=statistics) if (benchmark, model, mode) in items_of else None)
        judge = out.get("judge") or {}
        agreement = judge.get("agreement") or {}
        fluency_judge = (out.get("fluency_judge") or {}).get("model")
        for decoding, block in out["decodings"].items():
            rated = block.get("fluency") or {}
            for group in ("member", "nonmember", "all"):
                for stat, (value, low, high) in ((k, v) for k, v in block.get(group, {}).items() if k != "n"):
                    interval = {"value": value, "ci_low": low, "ci_high": high, "n_items": None, "ci_unit": "prompt",
                                "n_units": block[group]["n"], "ci_method": "bootstrap"}
                    if recomputed is not None:
                        interval = recomputed.get((decoding, group, stat), rate_interval([], rate=False, seed=seed))
                    rows.append({"benchmark": benchmark, "model": model, "mode": mode, "decoding": decoding,
                                 "group": group, "n": block[group]["n"], "statistic": stat, **interval,
                                 "prompt": out.get("prompt"),
                                 "judge": judge.get("judge"), "judge_model": judge.get("model"),
                                 "judge_accuracy": agreement.get("accuracy"),
                                 "judge_precision": agreement.get("precision"),
                                 "judge_recall": agreement.get("recall"), "judge_f1": agreement.get("f1"),
                                 "refusal": block.get("refusal", 0), "invalid": block.get("invalid", 0),
                                 "judge_pairs": block.get("judge_pairs"), "judge_invalid": block.get("judge_invalid"),
                                 "event_source": out.get("event_source"),
                                 "character_source": out.get("character_source"),
                                 "qa_source": out.get("qa_source"), "qa_writer": out.get("qa_writer"),
                                 "fluency_judge": fluency_judge,
                                 **{f"fluency_{k}": rated.get(k, 0) if fluency_judge else None
                                    for k in ("rated", "invalid", "empty")}})
    return pd.DataFrame(rows)


def item_scores(items_path: str) -> pd.DataFrame:
    """Per (item, decoding): the mean of each score over the prompt formats, with the item's document
    and book where the file has them (the units of :func:`differences_table`'s intervals)."""
    frame = pd.DataFrame(read_jsonl(items_path))
    mode = _parse(items_path)[2]
    if "copybench_rougeL" in frame.columns:
        frame[COPY_SCORE] = (frame["copybench_rougeL"] >= metrics.LITERAL_THRESHOLD).astype(float)
    present = [c for c in SCORES[mode] if c in frame.columns]  # the excess needs other books (metrics.chance_rouge_l)
    units = [c for c in ("doc_id", "book") if c in frame.columns]  # one per item: kept beside it
    return frame.groupby(["item_id", "label", "decoding", *units], as_index=False, dropna=False)[present].mean()


# copybench_differences.csv's columns: a run with no model beside its control (an audit of models
# that are not fine-tunes of the run's own, without a declared control) writes the header alone,
# which pandas reads back. ``base`` is the model compared with: the base a model is fine-tuned from
# here (``pairing`` base) or its declared ``control`` (``pairing`` control); ``contaminated_on_benchmark``
# says whether the model was fine-tuned on this benchmark's members, where the rows are ground truth.
DIFFERENCE_COLUMNS = ("benchmark", "model", "base", "pairing", "mode", "decoding", "contaminated_on_benchmark",
                      "group", "n_items", "score", "mean_model", "mean_base", "difference", "ci_low", "ci_high",
                      "ci_unit", "n_units", "interval_holds_0")


def differences_table(items_paths: Sequence[str], bases: dict[str, str], *, seed: int,
                      declared: Collection[str] = (), members_of: dict[str, list[str]] | None = None,
                      per_book: Collection[str] = ()) -> pd.DataFrame:
    """A model minus its control (``bases``: per model), per (benchmark, mode, decoding, group, score).
    ``declared``: the models whose control is declared (``models.<name>.control``), not their base;
    ``members_of``: per model, the benchmarks it was fine-tuned on (None: every pair is a controlled
    contamination of its benchmark, as before the column existed).

    A group and score the model has items in but its control none to pair with (the control not run
    there, or without that score) keeps its row, with ``n_items`` 0 and no difference: the headline
    reads it as not evaluated, where a missing row would drop the check unseen.

    A book's prompts are not independent draws: on the benchmarks in ``per_book`` (labels given per
    book: :func:`memaudit.config.labels_per_book`) an item's unit is its book, elsewhere its document;
    where the units share a label and come several items to one (:func:`memaudit.stats.metrics.label_groups`,
    as the AUC's ``ci_books``), the intervals resample whole units, paired by item (``ci_unit`` book or
    document, ``n_units`` how many), else items one by one (``ci_unit`` item)."""
    by_key = {_parse(p): p for p in items_paths}
    rows = []
    nan = float("nan")
    unpaired = {"n_items": 0, "mean_base": nan, "difference": nan, "ci_low": nan, "ci_high": nan,
                "ci_unit": None, "n_units": 0, "interval_holds_0": None}
    for (benchmark, model, mode), path in sorted(by_key.items()):
        base = bases.get(model)
        if not base:
            continue
        contaminated = True if members_of is None else benchmark in members_of.get(model, ())
        mine = item_scores(path)
        theirs = (item_scores(by_key[(benchmark, base, mode)]) if (benchmark, base, mode) in by_key
                  else mine.iloc[0:0])
        scores = [c for c in SCORES[mode] if c in mine.columns]
        joined = mine.merge(theirs, on=["item_id", "label", "decoding"], suffixes=("", "_base"))
        key = {"benchmark": benchmark, "model": model, "base": base,
               "pairing": "control" if model in declared else "base", "mode": mode,
               "contaminated_on_benchmark": contaminated}
        column = "book" if benchmark in per_book else "doc_id"
        for decoding, own in mine.groupby("decoding"):
            by_decoding = joined[joined["decoding"] == decoding]
            clustered = (column in own and own[column].notna().all()
                         and label_groups(own[column].astype(str).tolist(), own["label"]) is not None)
            name = ("book" if column == "book" else "document") if clustered else "item"
            gains, units = {}, {}
            for label, own_block in own.groupby("label"):
                block = by_decoding[by_decoding["label"] == label]
                for score in scores:
                    if block.empty or score not in theirs.columns:
                        rows.append({**key, "decoding": decoding, "group": GROUPS.get(int(label), "unlabelled"),
                                     "score": score, "mean_model": float(own_block[score].mean()), **unpaired})
                        continue
                    units[int(label)] = block[column].astype(str).to_numpy() if clustered else None
                    value, low, high = paired_difference(block[score].to_numpy(), block[f"{score}_base"].to_numpy(),
                                                         seed=seed, groups=units[int(label)])
                    gains[int(label), score] = (block[score] - block[f"{score}_base"]).to_numpy()
                    rows.append({**key, "decoding": decoding, "group": GROUPS.get(int(label), "unlabelled"),
                                 "n_items": len(block), "score": score, "mean_model": float(block[score].mean()),
                                 "mean_base": float(block[f"{score}_base"].mean()), "difference": value,
                                 "ci_low": low, "ci_high": high, "ci_unit": name,
                                 "n_units": _n_units(units[int(label)], len(block)),
                                 "interval_holds_0": holds_zero(low, high)})
            for score in scores:
                if (1, score) in gains and (0, score) in gains:
                    value, low, high = independent_difference(gains[1, score], gains[0, score], seed=seed,
                                                              groups=(units[1], units[0]) if clustered else None)
                    rows.append({**key, "decoding": decoding, "group": DID_GROUP,
                                 "n_items": len(gains[1, score]) + len(gains[0, score]), "score": score,
                                 "mean_model": float("nan"), "mean_base": float("nan"), "difference": value,
                                 "ci_low": low, "ci_high": high, "ci_unit": name,
                                 "n_units": sum(_n_units(units[g], len(gains[g, score])) for g in (1, 0)),
                                 "interval_holds_0": holds_zero(low, high)})
                elif {0, 1} <= set(own["label"].astype(int)):  # both groups, one of them unpaired
                    rows.append({**key, "decoding": decoding, "group": DID_GROUP, "score": score,
                                 "mean_model": nan, **unpaired})
    return pd.DataFrame(rows, columns=list(DIFFERENCE_COLUMNS))


def _n_units(units, n_items: int) -> int:
    """How many units an interval resampled: the books or documents of ``units``, else the items."""
    return n_items if units is None else int(pd.unique(units).size)


DECODING_ORDER = ("greedy", "system", "memfree")


def distributions_figure(items_paths: Sequence[str], out: str | Path) -> list[Path]:
    """CopyBench's Figure 4: the literal ROUGE-L, events and characters found, per model, for one decoding (greedy,
    or the first of the run's others where it ran no greedy decoding: a ``decodings: [system]`` run drew empty
    panels), member and non-member books apart where the items are labelled (filled: members; outline:
    non-members). ``out``: the PNG; an SVG beside it (:func:`memaudit.figures.plots.save_figure`)."""
    from memaudit.figures.plots import FIGURE_WIDTH_IN, FONT_SIZE, new_figure, palette, plot_note, save_figure, style

    panels = [("literal", "copybench_rougeL", "ROUGE-L (literal)"),
              ("nonliteral", "copybench_events", "events found"),
              ("nonliteral", "copybench_characters", "characters found")]
    frames = {}
    for path in items_paths:
        benchmark, model, mode = _parse(path)
        if mode in ("literal", "nonliteral"):
            frames[benchmark, model, mode] = pd.DataFrame(read_jsonl(path))
    ran = {d for f in frames.values() if "decoding" in f.columns for d in f["decoding"].dropna().unique()}
    decoding = next((d for d in DECODING_ORDER if d in ran), min(ran, default=None))
    prefix = str(out).removesuffix(".png")
    if decoding is None:
        return plot_note(prefix, "CopyBench score distributions: no literal or non-literal generation in this run")
    models = sorted({(b, m) for b, m, _ in frames})
    colors = dict(zip(models, palette(len(models))))
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 1.3, 3.6)
        axes = fig.subplots(1, 3)
        for ax, (mode, score, title) in zip(axes, panels):
            shown = []
            for (benchmark, model, m), frame in sorted(frames.items()):
                if m != mode or score not in frame.columns:
                    continue
                rows = frame[frame["decoding"] == decoding]
                labels = (pd.to_numeric(rows["label"], errors="coerce") if "label" in rows.columns
                          else pd.Series(np.nan, index=rows.index))
                split = rows.empty or labels.isin([0, 1]).all()
                for label, part in ((1, "members"), (0, "non-members")) if split else ((None, "all books"),):
                    values = rows.loc[labels == label, score] if label is not None else rows[score]
                    if len(values):
                        shown.append((f"{model} ({benchmark}), {part}", values, colors[benchmark, model], label != 0))
            # one set of bins per panel: each model's own 20 bins made its bars narrower or wider than the others'
            bins = np.histogram_bin_edges(pd.concat([v for _, v, _, _ in shown]), bins=20) if shown else 20
            for name, values, color, filled in shown:
                ax.hist(values, bins=bins, label=name, color=color, alpha=0.45 if filled else 1.0,
                        histtype="bar" if filled else "step", lw=1.2)
            ax.set_title(f"{title}, {decoding} decoding", fontsize=FONT_SIZE)
            ax.set_ylabel("prompts")
            if shown:
                ax.legend(fontsize=FONT_SIZE - 3, frameon=False)
            else:
                ax.text(0.5, 0.5, f"no {mode} generation in this run", ha="center", va="center",
                        fontsize=FONT_SIZE - 1, transform=ax.transAxes)
        fig.tight_layout()
        return save_figure(fig, prefix)


COPYING = (("literal", "rate_rougeL>=0.8", "literal copying (%)"),
           ("nonliteral", "rate_events>=5", "event copying (%)"),
           ("nonliteral", "rate_characters>=3", "character copying (%)"))


def recall_points(rates: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, model, decoding): fact-recall F1 and the three copying rates, x100 (Figure 2's axes)."""
    columns = ["benchmark", "model", "decoding", "qa_f1"] + [stat for _, stat, _ in COPYING]
    if rates.empty:
        return pd.DataFrame(columns=columns)
    every = rates[rates["group"] == "all"]
    recall = every[(every["mode"] == "qa") & (every["statistic"] == "mean_copybench_qa_f1")]
    points = recall[["benchmark", "model", "decoding"]].assign(qa_f1=100 * recall["value"].to_numpy())
    for mode, stat, _ in COPYING:
        rate = every[(every["mode"] == mode) & (every["statistic"] == stat)]
        rate = rate[["benchmark", "model", "decoding"]].assign(**{stat: 100 * rate["value"].to_numpy()})
        points = points.merge(rate, on=["benchmark", "model", "decoding"], how="left")
    return points[columns].reset_index(drop=True)


def recall_figure(rates: pd.DataFrame, out: str | Path) -> list[Path]:
    """The paper's Figure 2: each copying rate against fact recall, a point per model (and decoding). ``out``: the
    PNG; an SVG beside it (:func:`memaudit.figures.plots.save_figure`)."""
    from memaudit.figures.plots import FIGURE_WIDTH_IN, FONT_SIZE, new_figure, save_figure, style

    points = recall_points(rates)
    with style():
        fig = new_figure(FIGURE_WIDTH_IN * 1.3, 3.8)
        axes = fig.subplots(1, 3)
        markers = {d: m for d, m in zip(sorted(points["decoding"].unique()), "osD^v<>")}
        for ax, (_, stat, label) in zip(axes, COPYING):
            shown = points.dropna(subset=[stat])
            for row in shown.to_dict("records"):  # a legend, not labels: equal points would overprint their names
                ax.scatter(row[stat], row["qa_f1"], s=36, marker=markers[row["decoding"]], alpha=0.7,
                           label=f"{row['model']} ({row['decoding']}), {row['benchmark']}")
            top = max([1.0, *shown[stat].tolist()])
            ax.set_xlim(-0.03 * top, 1.05 * top)
            ax.set_ylim(-1, max([5.0, *shown["qa_f1"].tolist()]) * 1.1)
            ax.set_xlabel(label)
            ax.set_ylabel("fact recall (F1, 0-100)")
            if not shown.empty:
                ax.legend(fontsize=FONT_SIZE - 3, frameon=False)
            else:
                ax.text(0.5, 0.5, "no model ran fact recall and this copying mode", ha="center", va="center",
                        fontsize=FONT_SIZE - 1, transform=ax.transAxes)
        fig.suptitle("Copying against fact recall (CopyBench Figure 2)", fontsize=FONT_SIZE + 1)
        fig.tight_layout()
        return save_figure(fig, str(out).removesuffix(".png"))


def write_summary(outcome_paths: Sequence[str], items_paths: Sequence[str], *, bases: dict[str, str],
                  declared: Collection[str], members_of: dict[str, list[str]], seed: int,
                  out_rates: str, out_differences: str, out_figure: str, out_recall_figure: str,
                  per_book: Collection[str] = ()) -> None:
    """``bases``, ``declared``, ``members_of``, ``per_book``: the rule's params
    (:mod:`memaudit.probes.copybench.plan`)."""
    rates = rates_table(outcome_paths, items_paths, per_book=per_book, seed=int(seed))
    write_csv(out_rates, rates)
    recall_figure(rates, out_recall_figure)
    write_csv(out_differences, differences_table(items_paths, bases, seed=int(seed), declared=declared,
                                                 members_of=members_of, per_book=per_book))
    distributions_figure(items_paths, out_figure)
