"""The cloze probes' tables and figure over every (benchmark, model, mode) job.

``results/summary/cloze.csv``
    one row per (benchmark, model, mode, token type): how many passages were probed and how many
    had too few surprisal tokens to be flagged, the reconstruction rate on members and on
    non-members, and the detection of memorised texts (a passage is flagged when at least
    ``min_reconstructed`` of its tokens are reconstructed) as the paper reports it: precision,
    recall and F-beta with beta = 0.1 (Tables 2-3, ``sklearn.metrics.precision_recall_fscore_support``),
    after the reference rows on the same passages (majority: every passage flagged; random: seeded
    coin flips; random_expected: the coin's expectation). On a benchmark with a fixed split
    (BookMIA's: the first 1870 rows validation, ``published.validation_rows``) on its test
    passages only, as the paper reports (column ``split`` "test"; "all" elsewhere):
    :func:`reported_passages`.
``results/summary/cloze_differences.csv``
    contaminated model minus its base on the same masked words (paired per passage: the
    reconstruction rate), members and non-members apart, with a 95% paired bootstrap interval
    (Table 4's exact-match difference, with ground truth): contamination must show on members
    only. The interval resamples the unit the labels were given to, whole (``ci_unit``, how many
    ``n_units``): the book where labels are given per book (a QA set's article), else the document
    where documents have several passages (a news article's), else the passage.
``results/summary/cloze_vs_prefix.csv``
    where the prefix probe ran on the same (benchmark, model): the cloze probes' precision,
    recall and F-beta beside the prefix-LCS baseline's (Appendix E: a logistic-regression LCS
    threshold fitted on a validation part), on the same test texts: a fixed split's (``split``
    "test"), else over seeded splits (:func:`memaudit.probes.cloze.baseline.versus_prefix`).
``results/summary/cloze_overlap.csv``
    Figure 2 as a table: per (benchmark, model, mode), how many passages each combination of
    token types flags (and how many of them are members); the passages of ``cloze.csv``
    (``split``).
``results/summary/cloze_by_size.csv`` and ``results/figures/cloze/recovery_by_size.png``
    Figure 3: per (benchmark, mode, token type), the share of masked words each local model
    reconstructs against its parameter count (from its ``manifest.json``), members and
    non-members apart, with a passage-clustered bootstrap interval
    (:func:`memaudit.probes.cloze.tables.recovery_by_size`). API models have no parameter count
    and are left out of it.
``results/figures/cloze/reconstruction.png``
    the reconstruction rate per model, members against non-members.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from memaudit.datasets.types import TEST
from memaudit.io import read_csv, write_csv
from memaudit.probes.cloze.plan import method_name
from memaudit.probes.cloze.scoring import UNANSWERED, answered
from memaudit.stats.metrics import holds_zero, independent_difference, label_groups, paired_difference

BETA = 0.1
# why a figure's reconstruction rate is missing (memaudit.figures.plots.mark_missing)
NO_WORD = "no masked word of this type"
NO_ANSWER = "no masked word of this type answered"


def read_texts(paths: Sequence[str]) -> pd.DataFrame:
    frames = [read_csv(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _rate(block: pd.DataFrame) -> float:
    n = block["n_tokens"].sum()
    return float(block["n_reconstructed"].sum() / n) if n else float("nan")


GROUP = ["benchmark", "model", "mode"]
ALL = "all"  # the split column of a benchmark without a fixed split: every passage is reported on


def unanswered(texts: pd.DataFrame) -> set[tuple[str, str, str, str]]:
    """The (benchmark, model, mode, token type) whose masked words got no answer at all: a black-box model
    that never writes ``<word>`` tags or refuses every prompt (:func:`memaudit.probes.cloze.scoring.answered`).
    It reconstructs nothing, and measures nothing: its rates, precision, recall, F-beta and differences are
    blank, as its document scores are (no AUC), where they read 0 (and AUC 0.5) as if measured."""
    if texts.empty:
        return set()
    counts = texts.assign(answered=answered(texts)).groupby([*GROUP, "measure"])["answered"].sum()
    return set(counts.index[counts == 0])


def reported_passages(texts: pd.DataFrame) -> pd.DataFrame:
    """The text-table rows the detection tables report on, with ``split`` saying which: on a benchmark
    whose passages carry a fixed split (BookMIA's, the loader's ``meta.split``) its test passages,
    "test" (the paper tunes on the validation split and reports on the test split); on any other
    every passage, "all"."""
    if "split" in texts.columns:
        marked = texts["split"].notna() & texts["split"].astype(str).ne("")
        fixed = texts["benchmark"].isin(set(texts.loc[marked, "benchmark"]))
        texts = texts[~fixed | (texts["split"] == TEST)]
        return texts.assign(split=np.where(fixed[texts.index], TEST, ALL))
    return texts.assign(split=ALL)


def with_reference(texts: pd.DataFrame):
    """``f(table)``: the table with ``reference_model`` and ``reference_scoring`` columns: per benchmark which
    reference model chose the words its probes masked (its config name) and how it read them (``masked``,
    ``causal``, ``window``); the text tables' columns, one reference per benchmark, so every table of the family
    says what chose its words. Text tables of before ``reference_model`` leave it blank."""
    per = {}
    for column, default in (("reference_model", None), ("reference_scoring", "causal")):
        if "benchmark" not in texts:  # no text table read
            per[column] = {}
            continue
        values = texts[column] if column in texts else pd.Series(default, index=texts.index, dtype=object)
        known = values.notna()
        per[column] = values[known].astype(str).groupby(texts.loc[known, "benchmark"]).agg(
            lambda s: ";".join(sorted(set(s))))

    def add(table: pd.DataFrame) -> pd.DataFrame:
        if "benchmark" not in table:
            return table.assign(**{column: pd.Series(dtype=str) for column in per})
        return table.assign(**{column: table["benchmark"].map(names) for column, names in per.items()})
    return add


def detection_table(texts: pd.DataFrame, *, seed: int, prompt: str = "cloze") -> pd.DataFrame:
    """Per (benchmark, model, mode): the majority and random reference rows, then one row per token type
    (method ``cloze_<type>``: :func:`memaudit.probes.cloze.plan.method_name`) with precision, recall and F-beta of the memorised flag
    (:func:`memaudit.probes.cloze.tables.detection_table`), its counts and its reconstruction rates, on
    the :func:`reported_passages` (``split``). ``prompt`` (``probes.cloze.prompt``) is the prompt column of the
    black-box rows (``none`` in logit mode, which asks nothing): the two prompts read other answers."""
    from memaudit.probes.cloze.tables import detection_table as prf_table

    texts = reported_passages(texts)
    texts = texts.assign(method=texts["measure"].map(method_name))
    predictions = texts.rename(columns={"doc_id": "document", "passage_id": "doc_id", "memorised": "flagged"})
    table = prf_table(predictions[[*GROUP, "split", "method", "doc_id", "label", "flagged"]], by=[*GROUP, "split"],
                      beta=BETA, seed=seed)
    rows = []
    for (benchmark, model, mode, method), block in texts.groupby([*GROUP, "method"], sort=True):
        rows.append({"benchmark": benchmark, "model": model, "mode": mode, "method": method, "n_texts": len(block),
                     "n_too_few_tokens": int(block["reason"].dropna().astype(str).ne("").sum()),
                     "n_tokens": int(block["n_tokens"].sum()), "n_invalid": int(block["n_invalid"].sum()),
                     "n_refusal": int(block["n_refusal"].sum()), "n_error": int(block["n_error"].sum()),
                     "n_answered": int(answered(block).sum()),
                     "rate_member": _rate(block[block["label"] == 1]),
                     "rate_nonmember": _rate(block[block["label"] == 0])})
    # by benchmark, so the majority and random rows (no token type: no block above) say it too
    table = with_reference(texts)(table.merge(pd.DataFrame(rows), on=[*GROUP, "method"], how="left"))
    silent = table["n_answered"].eq(0)  # no word answered: nothing measured (the reference rows need none)
    table.loc[silent, ["precision", "recall", "fbeta", "rate_member", "rate_nonmember"]] = np.nan
    return table.assign(prompt=np.where(table["mode"] == "blackbox", prompt, "none"))


def differences_table(texts: pd.DataFrame, bases: dict[str, str], *, seed: int,
                      members_of: dict[str, list[str]] | None = None, declared: Collection[str] = (),
                      books: Mapping[str, Mapping[str, str]] | None = None) -> pd.DataFrame:
    """Contaminated minus base reconstruction rate per passage, members and non-members apart, and the
    member gain minus the non-member gain (group ``member_minus_nonmember``, each group resampled on
    its own): a model fine-tuned on a QA set's members also learns its format and domain, which
    raises the non-members too; what it adds beyond that is the member text itself.

    ``contaminated_on_benchmark`` says whether the model was fine-tuned on this benchmark's
    members (``finetune.members_of``): only then is the member split its ground truth. A model
    fine-tuned on other texts (the source articles a QA set quotes, say) is a comparison, not a
    controlled contamination, and may rise on both halves. ``bases`` pairs each model with its control:
    the base it is fine-tuned from, or its declared ``control`` (the models in ``declared``, ``pairing``
    control: two checkpoints an auditor was given, labels as given, no ground truth).

    A group the model has texts in but its control none to pair with (the control not probed there)
    keeps its row, with ``n_texts`` 0 and no difference: the headline reads it as not evaluated,
    where a missing row would drop the check unseen. So does a group where the model or its control
    answered none of the type's words (:func:`unanswered`: ``unanswered`` names it; the rate of the one
    that did answer is kept): 0 against 0 held the non-members' check.

    The passages of one document, or of one book where the labels are given per book (``books``: per
    benchmark, ``{doc_id: book}``), are not independent draws: where they share a label and come several
    to a unit (:func:`memaudit.stats.metrics.label_groups`, as the AUC's ``ci_books``), the intervals
    resample whole units, paired by passage (``ci_unit`` book or document, ``n_units`` how many); else
    passages one by one (``ci_unit`` text)."""
    members_of = members_of or {}
    silent = unanswered(texts)
    rows = []
    keys = ["benchmark", "mode", "measure"]
    for (benchmark, model, mode, measure), mine in texts.groupby(["benchmark", "model", *keys[1:]], sort=True):
        base = bases.get(model)
        if not base:
            continue
        theirs = texts[(texts["model"] == base) & (texts["benchmark"] == benchmark) & (texts["mode"] == mode)
                       & (texts["measure"] == measure)]
        mine = mine[mine["n_tokens"] > 0]
        joined = mine.merge(theirs, on=["passage_id", "label"], suffixes=("", "_base"))
        of_book = (books or {}).get(benchmark)
        clustered = "doc_id" in mine and label_groups(_units(mine, of_book).tolist(), mine["label"]) is not None
        unit = _units(joined, of_book) if clustered else None
        name = ("document" if of_book is None else "book") if clustered else "text"
        key = {"benchmark": benchmark, "model": model, "base": base,
               "pairing": "control" if model in declared else "base", "mode": mode, "measure": measure,
               "contaminated_on_benchmark": benchmark in members_of.get(model, ())}
        unpaired = {"n_texts": 0, "rate_base": float("nan"), "difference": float("nan"), "ci_low": float("nan"),
                    "ci_high": float("nan"), "ci_unit": None, "n_units": 0, "interval_holds_0": None}
        # the model or its control answered none of the type's words: its zeros measure nothing, and no
        # difference with them is one (a non-member interval of 0 - 0 held 0, a check counted as holding)
        mute = [m for m in (model, base) if (benchmark, m, mode, measure) in silent]
        gains, units = {}, {}
        for label in sorted(set(mine["label"].astype(int))):
            block = joined[joined["label"] == label]
            group = "member" if int(label) == 1 else "nonmember"
            if block.empty:
                own = mine[mine["label"] == label]
                rows.append({**key, "group": group, **unpaired,
                             "rate_model": float((own["n_reconstructed"] / own["n_tokens"]).mean())})
                continue
            a = (block["n_reconstructed"] / block["n_tokens"]).to_numpy(float)
            b = (block["n_reconstructed_base"] / block["n_tokens_base"]).to_numpy(float)
            if mute:
                rows.append({**key, "group": group, **unpaired, "n_texts": len(block),
                             "rate_model": float("nan") if model in mute else float(a.mean()),
                             "rate_base": float("nan") if base in mute else float(b.mean()),
                             "unanswered": ";".join(mute)})
                continue
            gains[int(label)] = a - b
            units[int(label)] = unit[block.index].to_numpy() if clustered else None
            value, low, high = paired_difference(a, b, seed=seed, groups=units[int(label)])
            rows.append({**key, "group": group, "n_texts": len(block),
                         "rate_model": float(a.mean()), "rate_base": float(b.mean()), "difference": value,
                         "ci_low": low, "ci_high": high, "ci_unit": name,
                         "n_units": _n_units(units[int(label)], len(block)), "interval_holds_0": holds_zero(low, high)})
        if 1 in gains and 0 in gains:  # the member gain beyond the non-member gain (domain and format learnt)
            both = (units[1], units[0]) if clustered else None
            value, low, high = independent_difference(gains[1], gains[0], seed=seed, groups=both)
            rows.append({**key, "group": "member_minus_nonmember", "n_texts": len(gains[1]) + len(gains[0]),
                         "rate_model": float("nan"), "rate_base": float("nan"), "difference": value,
                         "ci_low": low, "ci_high": high, "ci_unit": name,
                         "n_units": sum(_n_units(units[g], len(gains[g])) for g in (1, 0)),
                         "interval_holds_0": holds_zero(low, high)})
        elif set(mine["label"].astype(int)) >= {0, 1}:  # both groups, one of them unpaired or unanswered
            paired = joined if mute else joined.iloc[0:0]
            rows.append({**key, "group": "member_minus_nonmember", **unpaired, "n_texts": len(paired),
                         "rate_model": float("nan"), **({"unanswered": ";".join(mute)} if mute else {})})
    return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)


def _units(frame: pd.DataFrame, of_book: Mapping[str, str] | None) -> pd.Series:
    """Each passage's book (``of_book``: ``{doc_id: book}``), else its document."""
    docs = frame["doc_id"].astype(str)
    return docs if of_book is None else docs.map(lambda d: of_book.get(d, d))


def _n_units(units, n_items: int) -> int:
    """How many units an interval resampled: the books or documents of ``units``, else the items."""
    return n_items if units is None else int(pd.unique(units).size)


DIFFERENCE_COLUMNS = ["benchmark", "model", "base", "pairing", "mode", "measure", "contaminated_on_benchmark", "group", "n_texts",
                      "rate_model", "rate_base", "difference", "ci_low", "ci_high", "ci_unit", "n_units",
                      "interval_holds_0", "unanswered"]


def overlap(texts: pd.DataFrame) -> pd.DataFrame:
    """Figure 2 as a table: per (benchmark, model, mode), every exclusive region of the token types'
    flagged passages (:func:`memaudit.probes.cloze.tables.overlap_table`): how many passages exactly
    those types flag, and how many of them are members; on the :func:`reported_passages` (``split``)."""
    from memaudit.probes.cloze.tables import overlap_table

    lead = [*GROUP, "split"]
    frames = []
    for (benchmark, model, mode, split), block in reported_passages(texts).groupby(lead, sort=True):
        predictions = block.assign(method=block["measure"].map(method_name)).rename(
            columns={"doc_id": "document", "passage_id": "doc_id", "memorised": "flagged"})
        table = overlap_table(predictions[["method", "doc_id", "label", "flagged"]])
        frames.append(table.assign(benchmark=benchmark, model=model, mode=mode, split=split))
    if not frames:
        return pd.DataFrame(columns=[*lead, "region", "n_flagged", "n_correct"])
    out = pd.concat(frames, ignore_index=True)
    return out[[*lead, *[c for c in out.columns if c not in lead]]]


def reconstruction_figure(table: pd.DataFrame, out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memaudit.figures.plots import mark_missing, missing_handle, save_figure

    table = table[table["method"].str.startswith("cloze_")]
    panels = sorted(set(zip(table["benchmark"], table["mode"], table["method"])))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.2 * max(len(panels), 1), 3.6), squeeze=False)
    for ax, (benchmark, mode, measure) in zip(axes[0], panels):
        block = table[(table["benchmark"] == benchmark) & (table["mode"] == mode) & (table["method"] == measure)]
        x = np.arange(len(block))
        handles = []
        for offset, column, name in ((-0.2, "rate_member", "members"), (0.2, "rate_nonmember", "non-members")):
            rates = block[column].to_numpy(dtype=float)
            bars = ax.bar(x + offset, rates, 0.4, label=name)
            handles.append(bars)
            # no masked word of this type in the group: no rate, marked n/a rather than an empty slot
            mark_missing(ax, (x + offset)[np.isnan(rates)], color=bars.patches[0].get_facecolor())
        missing = block[block[["rate_member", "rate_nonmember"]].isna().any(axis=1)]
        silent = (missing["n_answered"].eq(0) & missing["n_tokens"].gt(0) if "n_answered" in missing
                  else pd.Series(False, index=missing.index))
        handles += [missing_handle(reason) for reason in missing_reasons(silent)]
        ax.set_xticks(x, block["model"], rotation=30, ha="right", fontsize=7)
        ax.set_title(f"{benchmark}: {measure} tokens ({mode})", fontsize=9)
        ax.set_ylabel("share of masked words reconstructed")
        # a share runs 0-1: a panel of zeros scaled itself to -0.04..0.04 and read as blank, a measured 0 as no data
        ax.set_ylim(-0.02, 1.02)
        ax.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out).with_suffix(""))
    plt.close(fig)


def missing_reasons(silent: pd.Series) -> list[str]:
    """Why a figure's rows without a rate have none, each reason once: ``silent`` (per row) the model had
    masked words of the type and answered none (:data:`NO_ANSWER`), else there were none (:data:`NO_WORD`)."""
    return [reason for reason, rows in ((NO_ANSWER, silent), (NO_WORD, ~silent)) if rows.any()]


SIZE_GROUP = ["benchmark", "mode", "measure", "label"]


def by_size(tokens: pd.DataFrame, n_params: dict[str, float], *, seed: int,
            silent: Collection[tuple[str, str, str, str]] = ()) -> pd.DataFrame:
    """Figure 3 as a table: per (benchmark, mode, token type, label) and model, the masked words
    reconstructed, by model size; the interval resamples passages (a passage's words together). A model
    whose words of the type got no answer (``silent``: :func:`unanswered`) has no rate."""
    from memaudit.probes.cloze.tables import recovery_by_size

    if tokens.empty or not n_params:
        return pd.DataFrame(columns=[*SIZE_GROUP, "model", "n_params", "n_candidates", "n_reconstructed", "rate",
                                     "rate_low", "rate_high"])
    done = tokens["reconstructed"].astype(str).str.lower() == "true"  # as read back from the CSV
    table = recovery_by_size(tokens.assign(reconstructed=done), n_params,
                             cluster="passage_id", by=SIZE_GROUP, seed=seed)
    silent = set(silent)
    mute = [key in silent for key in zip(table["benchmark"], table["model"], table["mode"], table["measure"])]
    table.loc[mute, ["rate", "rate_low", "rate_high"]] = np.nan
    return table


def without_unanswered(versus: pd.DataFrame, silent: Collection[tuple[str, str, str, str]]) -> pd.DataFrame:
    """``cloze_vs_prefix.csv`` with no precision, recall or F-beta for a model's cloze probe whose words of the
    type got no answer (:func:`unanswered`), and why (``reason``): its flags were none, an F-beta of 0 read
    beside the prefix baseline's as a measured result."""
    keys = {(b, m, mode, method_name(measure)) for b, m, mode, measure in silent}
    mute = np.array([k in keys for k in zip(versus["benchmark"], versus["model"], versus["mode"], versus["method"])],
                    dtype=bool)
    versus = versus.copy()
    versus.loc[mute, ["precision", "recall", "f_beta", "f_beta_sd"]] = np.nan
    versus.loc[mute, "reason"] = versus.loc[mute, "model"] + " " + UNANSWERED
    return versus


def size_figure(table: pd.DataFrame, out: str | Path) -> None:
    """One panel per (benchmark, mode, token type): reconstruction rate against parameters (log scale), each
    point named by its model (a base and its fine-tunes share a size). A model with no rate (no masked word
    of the type in the group) is a hollow "n/a" marker at the bottom of the panel, named there too
    (:func:`memaudit.figures.plots.mark_missing`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memaudit.figures.plots import MISSING_Y, legend_handles, mark_missing, missing_handle, save_figure

    panels = sorted(set(zip(table["benchmark"], table["mode"], table["measure"])))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.0 * max(len(panels), 1), 3.4), squeeze=False)
    for ax, (benchmark, mode, measure) in zip(axes[0], panels):
        block = table[(table["benchmark"] == benchmark) & (table["mode"] == mode) & (table["measure"] == measure)]
        # names at one place (a base and its fine-tunes at one size and rate, members and non-members alike;
        # "one rate": within 0.03, about a name's height on the 0-1 axis) are stacked, not overprinted
        named: Counter = Counter()

        def lift(x, y) -> int:
            key = (float(x), round(float(y) / 0.03))
            named[key] += 1
            return 7 * (named[key] - 1)

        for label, name in ((1, "members"), (0, "non-members")):
            line = block[block["label"] == label].sort_values("n_params")
            if line.empty:
                continue
            known, missing = line[line["rate"].notna()], line[line["rate"].isna()]
            # several models of one size (a base and its fine-tunes) are separate points at that size: each named
            bars = ax.errorbar(known["n_params"], known["rate"], yerr=[known["rate"] - known["rate_low"],
                               known["rate_high"] - known["rate"]], fmt="o", capsize=3, label=name, alpha=0.8)
            color = bars[0].get_color()
            for model, x, y in zip(known["model"], known["n_params"], known["rate"]):
                ax.annotate(model, (x, y), xytext=(4, 2 + lift(x, y)), textcoords="offset points", fontsize=6,
                            color=color)
            # no masked word of this type: no rate, marked n/a at the bottom and named there (a name at a nan
            # height was drawn nowhere)
            mark_missing(ax, missing["n_params"], color=color)
            for model, x in zip(missing["model"], missing["n_params"]):
                ax.annotate(model, (x, MISSING_Y), xycoords=ax.get_xaxis_transform(), xytext=(8, -1 + lift(x, -1)),
                            textcoords="offset points", fontsize=6, color=color)
        ax.set_xscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel("share of masked words reconstructed")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{benchmark}: {measure} tokens ({mode})", fontsize=9)
        # a rate is missing for want of a word (no candidate), or of an answer (candidates, none answered)
        missing = block[block["rate"].isna()]
        silent = missing["n_candidates"].gt(0) if "n_candidates" in missing else pd.Series(False, index=missing.index)
        handles = legend_handles(ax) + [missing_handle(reason) for reason in missing_reasons(silent)]
        ax.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    save_figure(fig, Path(out).with_suffix(""))
    plt.close(fig)


def build_summary(text_paths: Sequence[str], bases: dict[str, str], *, seed: int, out_table: str,
                  declared: Collection[str] = (),
                  out_differences: str, out_figure: str, out_versus: str, out_overlap: str,
                  prefix: Sequence[tuple[str, str, str, str]] = (), members_of: dict[str, list[str]] | None = None,
                  token_paths: Sequence[str] = (), model_dirs: Sequence[str] = (), out_by_size: str | None = None,
                  out_size_figure: str | None = None, prompt: str = "cloze",
                  documents: Mapping[str, str] | None = None) -> None:
    """``prefix``: ``(benchmark, model, prefix_items.jsonl, prefix_continuation.jsonl)`` of the pairs the
    prefix probe also ran on; ``members_of``: per model, the benchmarks it was fine-tuned on;
    ``token_paths`` and ``model_dirs`` (the probed local models): Figure 3, ``out_by_size``; ``prompt``: the
    black-box mode's (``probes.cloze.prompt``), for ``cloze.csv``; ``documents``: per benchmark whose labels
    are given per book, its ``documents.jsonl`` (each document's book: the differences' intervals resample
    books there)."""
    from memaudit.io import read_jsonl
    from memaudit.probes.cloze.baseline import lcs_of_items, versus_prefix
    from memaudit.stats.workflow import document_books

    texts = read_texts(text_paths)
    table = detection_table(texts, seed=seed, prompt=prompt)
    write_csv(out_table, table)
    scored = with_reference(texts)
    silent = unanswered(texts)
    books = {benchmark: document_books(path) for benchmark, path in (documents or {}).items()}
    write_csv(out_differences, scored(differences_table(texts, bases, seed=seed, members_of=members_of,
                                                        declared=declared, books=books)))
    lcs = {(b, m): lcs_of_items(read_jsonl(items), read_jsonl(pairs)) for b, m, items, pairs in prefix}
    write_csv(out_versus, scored(without_unanswered(versus_prefix(texts, lcs, seed=seed, beta=BETA), silent)))
    write_csv(out_overlap, scored(overlap(texts)))
    reconstruction_figure(table, out_figure)
    if out_by_size is not None:
        from memaudit.stats.workflow import models_table

        sizes = models_table(model_dirs)
        sized = scored(by_size(read_texts(token_paths), dict(zip(sizes["model"], sizes["n_params"].astype(float))),
                               seed=seed, silent=silent))
        write_csv(out_by_size, sized)
        size_figure(sized, out_size_figure)
