"""The few numbers a user reads first after a run, and where everything else is.

The core prints the AUC table, the ground-truth checks over ``metrics.csv`` and conformal BH's
over ``selection.csv``; each probe family adds its own sections through the ``headline`` hook of
its registry entry (:mod:`memaudit.probes.registry`), in registry order, so a new family's checks
need no change here. The helpers below (:func:`section`, :func:`table_section`,
:func:`interval_check`, :func:`base_models`) are what those hooks share.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pandas as pd

from memaudit.errors import InputError


def headline_table(summary: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """AUC [95% CI] per (benchmark, model) for the headline methods, plus the blind baseline."""
    rows = summary[summary["method"].isin(methods) | summary["method"].str.startswith("ref_")
                   | (summary["model"] == "(none)")]
    table = rows.assign(cell=auc_cells(rows)).pivot_table(index=["benchmark", "model", "contaminated"],
                                               columns="method", values="cell", aggfunc="first")
    return table.fillna("")


def auc_cells(rows: pd.DataFrame) -> pd.Series:
    """``AUC [low, high]`` of each row of ``metrics.csv``, all to 3 decimals (an interval to 2 could print
    outside its AUC: 0.895 [0.90, 0.92]); ``n/a`` for a missing AUC or interval, not ``nan``; an interval
    over fewer than :data:`FEW_DOCUMENTS` documents a class marked ``*`` (:data:`FEW_DOCUMENTS_NOTE`)."""
    return rows.apply(auc_cell, axis=1)


def auc_cell(row) -> str:
    auc, low, high = row["auc"], row["auc_ci_low"], row["auc_ci_high"]
    if pd.isna(auc):
        return "n/a"
    cell = f"{auc:.3f} [n/a]" if pd.isna(low) or pd.isna(high) else f"{auc:.3f} [{low:.3f}, {high:.3f}]"
    return cell + FEW_DOCUMENTS_MARK if few_documents(row) else cell


# Below this many documents in a class the bootstrap and low-FPR columns say little: ``memaudit stats``
# warns, the headline marks the AUC cell.
FEW_DOCUMENTS = 10


def few_documents(row) -> bool:
    """Whether a row of ``metrics.csv`` has fewer than :data:`FEW_DOCUMENTS` members or non-members (False
    for a table without the counts)."""
    counts = [row.get(c, math.nan) for c in ("n_member", "n_nonmember")]
    return any(not pd.isna(n) and n < FEW_DOCUMENTS for n in counts)


# How an AUC cell of few documents is marked, and the line that says why wherever one is printed.
FEW_DOCUMENTS_MARK = "*"
FEW_DOCUMENTS_NOTE = (f"* fewer than {FEW_DOCUMENTS} members or non-members (n_member, n_nonmember in metrics.csv): "
                      f"no interval is a guide over so few (a percentile bootstrap of 3 + 3 separated documents "
                      f"gives [1.000, 1.000])")


def few_documents_note(*texts: str) -> str:
    """:data:`FEW_DOCUMENTS_NOTE` where one of ``texts`` holds a marked AUC cell, else ""."""
    return FEW_DOCUMENTS_NOTE if any(f"]{FEW_DOCUMENTS_MARK}" in t for t in texts) else ""


def family_main_methods() -> list[str]:
    """Each probe family's main scores (its registry entry's ``headline_methods``), in registry order."""
    from memaudit.probes.registry import FAMILIES

    return [m for f in FAMILIES.values() for m in f.headline_methods]


def other_scores_table(summary: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """AUC [95% CI] of each family's main scores (its registry entry's ``headline_methods``) for the
    (benchmark, model) pairs :func:`headline_table` has no score of: a model probed black-box only (an
    API model under audit), or by other families only. One row per (benchmark, model, method)."""
    main = family_main_methods()
    shown = summary["method"].isin(methods) | summary["method"].str.startswith("ref_")
    scored = set(zip(summary.loc[shown, "benchmark"], summary.loc[shown, "model"]))
    unscored = np.array([(b, m) not in scored for b, m in zip(summary["benchmark"], summary["model"])], dtype=bool)
    rows = summary[summary["method"].isin(main) & (summary["model"] != "(none)") & unscored]
    rows = rows.assign(order=rows["method"].map({m: i for i, m in enumerate(main)}))
    rows = rows.sort_values(["benchmark", "model", "order"], kind="stable")
    return pd.DataFrame({"benchmark": rows["benchmark"], "model": rows["model"],
                         "contaminated": rows["contaminated"], "method": rows["method"], "auc": auc_cells(rows)})


def read_table(path: str | Path, what: str = "a table of the run's", required: Sequence[str] = (),
               **kwargs) -> pd.DataFrame:
    """A CSV the headline reads (``pd.read_csv``'s ``kwargs``); a directory, an empty file, UTF-16 or other
    non-UTF-8 text or a malformed CSV is one line naming the file (pandas raised IsADirectoryError,
    EmptyDataError or UnicodeDecodeError: an empty ``models.csv`` beside the metrics was a traceback), and so
    is a table without one of the ``required`` columns (:func:`require_columns`)."""
    import io

    from memaudit.datasets.rejects import read_text

    _, text = read_text(path, what)
    if not text.strip():
        raise InputError(f"{path}: empty (no header, no rows): {what}")
    try:
        table = pd.read_csv(io.StringIO(text), **kwargs)
    except pd.errors.ParserError as exc:
        raise InputError(f"{path}: not a readable CSV table ({str(exc).strip()})") from None
    require_columns(path, table, required, what)
    return table


def require_columns(path: str | Path, table: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """One line naming ``path`` and the ``columns`` ``table`` lacks (a table of an older memaudit, or edited by
    hand: a KeyError from deep in the checks, as ``models.csv`` without ``base`` gave)."""
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputError(f"{path}: not {what} (no column {', '.join(map(repr, missing))}); rerun the workflow "
                         f"to write it again")


@contextlib.contextmanager
def columns_named(path: str | Path, table: pd.DataFrame, what: str = "a table of the run's") -> Iterator[None]:
    """:func:`require_columns`' line for a column of ``table`` that the block asks for and ``table`` lacks: a
    KeyError for a column name (``table["fdr"]``) or an AttributeError for a field of one of its
    ``itertuples()`` rows (``r.fdr``), where a family's check reads the columns it needs; any other passes."""
    try:
        yield
    except KeyError as exc:
        name = exc.args[0] if len(exc.args) == 1 else None
        if not isinstance(name, str) or name in table.columns:
            raise
        require_columns(path, table, [name], what)
        raise
    except AttributeError as exc:
        row = getattr(exc, "obj", None)
        if not (isinstance(row, tuple) and hasattr(row, "_fields")) or exc.name in table.columns:
            raise
        require_columns(path, table, [exc.name], what)
        raise


# columns of metrics.csv the headline formats as numbers
_NUMERIC_COLUMNS = ("auc", "auc_ci_low", "auc_ci_high", "n_member", "n_nonmember")


def _read_summary(summary_path: Path) -> pd.DataFrame:
    """The metrics table (:func:`read_table`); a value of a numeric column that is not a number is one line
    naming its line and column (``Unknown format code 'f' for object of type 'str'`` from deep in the table)."""
    summary = read_table(summary_path, "a run's metrics table (results/summary/metrics.csv)")
    for column in (c for c in _NUMERIC_COLUMNS if c in summary.columns):
        numbers = pd.to_numeric(summary[column], errors="coerce")
        bad = summary[column].notna() & numbers.isna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{summary_path}, line {row + 2}: column {column!r} is not a number "
                             f"({summary[column].iloc[row]!r})")
        summary[column] = numbers
    return summary


def refuse_unknown_methods(summary: pd.DataFrame, summary_path: Path, methods: Sequence[str]) -> None:
    """One line for a name of ``methods`` (``--methods``, named by the user) that no row of the metrics table has,
    with the closest of its methods: ``--methods losss`` printed an empty table, ``--methods loss zlibb`` dropped
    zlibb unseen. A run without rows (every benchmark unlabelled) has no AUC table to refuse them from."""
    import difflib

    known = sorted(set(summary["method"].astype(str)))
    unknown = [m for m in methods if m not in known]
    if not unknown or not known:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise InputError(f"--methods: {', '.join(hints)} not in {summary_path} (its methods: {', '.join(known)})")


def print_headline(summary_path: Path, methods: Sequence[str], *, methods_named: bool = False) -> None:
    """The headline of the run whose metrics table is ``summary_path``: the AUC table of ``methods`` (as far as
    the run has them; with ``methods_named``, given by the user, each a method of the run or an error), the
    ground-truth checks and each family's sections."""
    summary_path = Path(summary_path)
    if not summary_path.exists():
        raise InputError(f"{summary_path}: not found (did the run finish?)")
    summary = _read_summary(summary_path)
    missing = [c for c in ("benchmark", "model", "contaminated", "method", "auc", "auc_ci_low", "auc_ci_high")
               if c not in summary.columns]
    if missing:  # another table passed as --summary: one line, not a KeyError from deep in the table code
        raise InputError(f"{summary_path}: not a run's metrics table (no column {', '.join(map(repr, missing))}); "
                         f"pass results/summary/metrics.csv")
    if methods_named:
        refuse_unknown_methods(summary, summary_path, methods)
    if summary.empty:  # every benchmark unlabelled (published CopyBench without labels): no AUC to show
        print("\nNo labelled benchmark in this run: no ROC-AUC (CopyBench's rates: "
              f"{summary_path.with_name('copybench.csv')}).")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 22):
            print("\nROC-AUC [bootstrap 95% CI] of document scores (higher score = member):\n")
            table = headline_table(summary, methods)
            # pandas' repr of an empty table ("Empty DataFrame / Columns: []") reads as a failure
            shown = [table.to_string() if not table.empty else
                     f"none of {', '.join(methods) or 'no method'} in this run (every method: {summary_path})"]
            print(shown[0])
            other = other_scores_table(summary, methods)
            if not other.empty:
                print("\nROC-AUC [bootstrap 95% CI] of the models scored by other probes only (each family's main "
                      "scores;\nevery score of every model: the metrics table below):\n")
                shown.append(other.to_string(index=False))
                print(shown[-1])
            if few_documents_note(*shown):
                print("\n" + FEW_DOCUMENTS_NOTE)
    root = summary_path.parent.parent
    print(f"\nTables:  {summary_path} (every method), {summary_path.with_suffix('.md')}")
    print(f"Figures: {figures_made(root / 'figures')}")
    models_path = summary_path.with_name("models.csv")
    models = read_table(models_path, "the run's models table", MODELS_COLUMNS) if models_path.exists() else None
    controlled = null_control_benchmarks(summary_path.parent)
    core = [] if models is None else [
        section("Ground truth (contaminated: fine-tuned on the members; base models: null control, within the "
                "range a random split gives 99 times in 100)",
                demo_expectations(summary, models, controlled=controlled, scored_with=methods)
                if not summary.empty else summary),
        selection_section(summary_path.with_name("selection.csv"), summary, models, controlled),
        published_labels_note(summary_path.parent, summary)]
    core += [blind_baseline_note(summary, methods),
             book_intervals_note(summary, methods, summary_path.parent)] if not summary.empty else []
    blocks = [b for b in core if b] + family_blocks(summary_path.parent, models)
    for block in blocks:
        print("\n" + block)
    if tally(blocks):
        print("\n" + tally(blocks))
    rejects_path = summary_path.with_name("rejects.csv")
    if rejects_path.exists():
        print("\n" + rejects_summary(read_table(rejects_path, "the run's rejects table",
                                                 ("benchmark", "file", "reason", "action", "n_rows"),
                                                 keep_default_na=False)))
    report = root / "report.html"
    print(f"Report:  {report}" + ("" if report.exists() else " (make it with: snakemake --report "
                                                        f"{report} all, and the run's own --configfile if it had "
                                                        "one; or make report CONFIG=<that file>)"))


# the columns of models.csv every check reads (backend and contaminated_on: where the run wrote them)
MODELS_COLUMNS = ("model", "base")


def figures_made(figures: Path) -> str:
    """Where the run's figures are, for the kinds it drew only: an API-only benchmark has no model-size
    figure and an unlabelled run no figure at all."""
    kinds = {f"{figures}/<benchmark>/<model>/roc.png": "*/*/roc.png",
             "score_distributions.png": "*/*/score_distributions.png",
             f"{figures}/<benchmark>/auc_vs_size.png": "*/auc_vs_size.png"}
    made = [kind for kind, pattern in kinds.items() if next(figures.glob(pattern), None) is not None]
    return ", ".join(made) or f"none in {figures}"


class Section(str):
    """A headline section's text, with how many of its ground-truth checks (rows of a table with an
    ``ok`` column) hold: :func:`tally` adds them up over every section."""

    held: int = 0
    checked: int = 0
    unevaluated: int = 0
    title: str = ""


def section(header: str, table: pd.DataFrame) -> str:
    """A headline section: ``header:``, a blank line and ``table`` without its index; "" for no rows."""
    if table is None or table.empty:
        return ""
    out = Section(f"{header}:\n\n{table.to_string(index=False)}")
    if "ok" in table.columns:  # rows whose ok is blank are reported, not checked (KTD's contaminated models)
        verdicts = [bool(v) for v in table["ok"] if isinstance(v, (bool, np.bool_))]
        out.held, out.checked = sum(verdicts), len(verdicts)
        if "expected" in table.columns:
            out.unevaluated = int(table["expected"].astype(str).str.startswith(NOT_EVALUATED).sum())
        out.title = header.split(" (")[0].split(":")[0]
    return out


# Where the docs say which of the demo's checks rest on too few documents to hold on every machine.
FRAGILE_CHECKS = "docs/statistics.md#checks-that-fall-either-way"
# How a check whose row is missing from its table reads (``expected``): counted, as not holding.
NOT_EVALUATED = "not evaluated"


def tally(blocks: Sequence[str]) -> str:
    """One line: how many ground-truth checks hold over the sections, where the others fail and where a
    check had no row to be made on (:data:`NOT_EVALUATED`; counted as not holding, but no chance failure),
    then, where some fail, a second line pointing to :data:`FRAGILE_CHECKS`; "" where no section checks
    anything."""
    checked = sum(getattr(b, "checked", 0) for b in blocks)
    if not checked:
        return ""
    held = sum(getattr(b, "held", 0) for b in blocks)
    line = f"Ground-truth checks: {held} of {checked} hold"
    unevaluated = [f"{b.unevaluated} in {b.title}" for b in blocks if getattr(b, "unevaluated", 0)]
    if unevaluated:
        line += f"; {NOT_EVALUATED} (no row to check in its table): {', '.join(unevaluated)}"
    failing = [f"{n} in {b.title}" for b in blocks
               if (n := getattr(b, "checked", 0) - getattr(b, "held", 0) - getattr(b, "unevaluated", 0)) > 0]
    if not failing:
        return line
    return (f"{line}; failing (ok False above): {', '.join(failing)}\n"
            f"  (on the demo's few documents some checks fall either way with a CPU's rounding: {FRAGILE_CHECKS})")


def table_section(path: Path, header: str, check: Callable[[pd.DataFrame], pd.DataFrame]) -> str:
    """:func:`section` of ``check`` over the CSV at ``path``; "" where the file is missing or has no rows."""
    path = Path(path)
    if not path.exists():
        return ""
    table = read_table(path)
    if table.empty:
        return ""
    with columns_named(path, table):
        return section(header, check(table))


def interval_check(group: str, ci_low: float, ci_high: float, *, n_paired: int | None = None, base: str = "",
                   unit: str = "text") -> tuple[str, bool]:
    """The paired ground-truth check of a contaminated-minus-base difference: on members (and the
    members' gain over the non-members') its interval lies above 0, on non-members it holds 0. No
    interval (a group of one item: nan bounds) shows neither. ``n_paired`` 0 (the model's group had
    no ``unit`` of ``base`` to pair with): :data:`NOT_EVALUATED`, counted as not holding."""
    if n_paired == 0:
        return f"{NOT_EVALUATED}: no {unit} of {base} to pair", False
    if math.isnan(ci_low) or math.isnan(ci_high):
        what = "CI above 0" if group in ("member", "member_minus_nonmember") else "CI holds 0"
        return f"{what} (no interval: one item)", False
    if group in ("member", "member_minus_nonmember"):
        return "CI above 0", bool(ci_low > 0)
    return "CI holds 0", bool(ci_low <= 0 <= ci_high)


def interval_reading(ci_low: float, ci_high: float) -> str:
    """Where a difference's interval lies, without a verdict: ``above 0``, ``below 0``, ``holds 0`` or
    ``no interval`` (nan bounds: one item)."""
    if math.isnan(ci_low) or math.isnan(ci_high):
        return "no interval"
    if ci_low > 0:
        return "above 0"
    return "below 0" if ci_high < 0 else "holds 0"


def split_pairings(differences: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A differences table's rows of models paired with the base they are fine-tuned from here, and of
    models paired with a declared ``control`` (``pairing``; a table written before the column has the
    first kind only)."""
    if "pairing" not in differences.columns:
        return differences, differences.iloc[0:0]
    declared = differences["pairing"].astype(str) == "control"
    return differences[~declared], differences[declared]


def by_group(differences: pd.DataFrame, *keys: str) -> pd.DataFrame:
    """Rows sorted by ``keys``, then members, non-members and the gain beyond the non-members."""
    order = {"member": 0, "nonmember": 1, "member_minus_nonmember": 2}
    rank = differences["group"].map(order).fillna(len(order))
    return differences.assign(_rank=rank).sort_values([*keys, "_rank"], kind="stable").drop(columns="_rank")


# The groups a paired difference is checked on: members, non-members, the members' gain beyond the non-members'.
CHECK_GROUPS = ("member", "nonmember", "member_minus_nonmember")


def missing_groups(differences: pd.DataFrame, keys: Sequence[str]) -> list[tuple]:
    """``(*key, group)`` for each group of :data:`CHECK_GROUPS` that a key of ``differences`` (its ``keys``
    columns: one model's pair on one score) has no row of. A group with nothing of its own to pair (no member
    book that gave an item, no text with a masked word of the type) has no row, nor then has the gain, and
    their checks dropped out unseen."""
    rows = list(zip(*(differences[k] for k in keys), differences["group"]))
    have = set(rows)
    return [(*key, g) for key in dict.fromkeys(r[:-1] for r in rows) for g in CHECK_GROUPS if (*key, g) not in have]


# The paired differences' section for models given a control (CopyBench's and the cloze probes'):
CONTROL_READING = ("labels as given, no ground truth: memorised members show as members above 0 and the member "
                   "minus non-member gain above 0, non-members holding 0")


def base_models(models: pd.DataFrame) -> set[str]:
    """The local models of ``results/summary/models.csv`` that are no other model's fine-tune: the null controls
    (on the benchmarks of :func:`null_control_benchmarks`). An API model's row says which model was asked; it was
    never checked as a null control."""
    base = models["base"]  # all empty: pandas reads a float column, which fillna("") will refuse
    local = models["backend"].isna() | (models["backend"] == "hf") if "backend" in models else True
    return set(models.loc[(base.isna() | (base.astype(str).str.strip() == "")) & local, "model"])


def benchmarks_table(summary_dir: Path) -> pd.DataFrame | None:
    """``benchmarks.csv`` (``benchmark, labels, null_control``, the last as booleans), or None for a run
    summarised before it existed."""
    path = Path(summary_dir) / "benchmarks.csv"
    if not path.exists():
        return None
    table = read_table(path, "the run's benchmarks table", ("benchmark", "labels", "null_control"))
    return table.assign(null_control=table["null_control"].astype(str).str.lower() == "true")


def null_control_benchmarks(summary_dir: Path) -> set[str] | None:
    """The benchmarks of ``benchmarks.csv`` whose split memaudit drew at random, where a base model is a
    null control (:func:`memaudit.config.label_provenance`); None for a run that wrote no such table
    (before it existed: every benchmark, as then)."""
    table = benchmarks_table(summary_dir)
    return None if table is None else set(table.loc[table["null_control"], "benchmark"])


def is_null_control(benchmark: str, model: str, nulls: set[str], controlled: set[str] | None) -> bool:
    """Whether ``model`` is a null control on ``benchmark``: a base model (``nulls``), on a benchmark split at
    random (``controlled``; None: every benchmark)."""
    return model in nulls and (controlled is None or benchmark in controlled)


def blind_baseline_note(summary: pd.DataFrame, methods: Sequence[str]) -> str:
    """A line per benchmark whose labels the text alone tells apart (the blind baseline's AUC interval lies
    above 0.5), with the models whose headline AUC lies above the blind AUC; "" where there is none.

    On such a benchmark (books split by book, texts split by date) a detector's AUC mixes memorisation with
    the difference between the two sides (Das et al. 2024): 0.87 there may mean no more than the bag of
    words' 0.87. Only a model whose interval clears the blind AUC shows more than the labels' own signal.
    """
    from memaudit.stats.workflow import BLIND_METHOD, BLIND_MODEL

    blind = summary[(summary["method"] == BLIND_METHOD) & (summary["auc_ci_low"] > 0.5)]
    if blind.empty:
        return ""
    main = {*methods, *family_main_methods()}
    lines = ["The text alone separates members from non-members here (the blind baseline: a bag-of-words",
             "classifier that sees no model; Das et al. 2024). A model's AUC there mixes memorisation with that",
             "difference: only an interval above the blind AUC shows more (docs/statistics.md#blind-baseline):"]
    for r in blind.sort_values("benchmark").itertuples():
        rows = summary[(summary["benchmark"] == r.benchmark) & (summary["model"] != BLIND_MODEL)
                       & (summary["method"].isin(main) | summary["method"].str.startswith("ref_"))]
        above = rows[rows["auc_ci_low"] > r.auc].sort_values(["model", "auc"], ascending=[True, False])
        best = above.drop_duplicates("model")
        named = ", ".join(f"{b.model} ({b.method} {cell})" for b, cell in zip(best.itertuples(), auc_cells(best)))
        lines.append(f"  {r.benchmark}: blind AUC {auc_cell(r._asdict())}; above it: "
                     + (named or "no model"))
    note = few_documents_note(*lines)
    return "\n".join(lines + ([note] if note else []))


# Fewer books than this (both sides together) and an interval over whole books is no guide: the
# percentile bootstrap of a few clusters undercovers (6 a side held 0.5 in 87% of null draws, 3 a side
# far less; tests/test_stats.py), and 3 books against 3 cannot reach p < 0.05 by any test.
FEW_BOOKS = 20


def book_ranking(results_dir: Path, benchmark: str, model: str, method: str) -> str:
    """The books of ``benchmark`` by ``model``'s mean ``method`` score, highest first, members starred: what a
    rank test of few books rests on, read from the run's per-document scores
    (``results/scores/<benchmark>/<model>/*_documents.csv``) and ``documents.jsonl``; "" where either is missing."""
    from memaudit.io import read_csv
    from memaudit.stats.metrics import group_means
    from memaudit.stats.workflow import document_books

    documents = Path(results_dir) / "datasets" / benchmark / "documents.jsonl"
    folder = Path(results_dir) / "scores" / benchmark / model
    tables = [read_csv(p) for p in sorted(folder.glob("*_documents.csv"))] if folder.is_dir() else []
    tables = [t[t["method"] == method] for t in tables if {"method", "doc_id", "label", "score"} <= set(t.columns)]
    scores = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if scores.empty or not documents.exists():
        return ""
    books = document_books(documents)
    names, means, labels = group_means(scores["score"], scores["label"], scores["doc_id"].map(books))
    order = np.argsort(-means, kind="stable")
    return ", ".join(f"{names[i]}{'*' if labels[i] == 1 else ''}" for i in order)


def pvalue_text(p: float) -> str:
    """A p-value to 3 decimals, and below 0.001 in scientific notation (``1.0e-04``): to 3 decimals the
    smallest p-value of a rank test of 14 books or more printed as 0.000, a p-value of 0."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def book_intervals_note(summary: pd.DataFrame, methods: Sequence[str] = (), summary_dir: Path | None = None) -> str:
    """A line per benchmark whose intervals resampled whole books (``ci_books`` in ``metrics.csv``: labels
    given per book), saying how many; below :data:`FEW_BOOKS`, that no interval is a guide there, and each
    model's rank test of the books' means (``books_pvalue``) for the first of ``methods`` it has, else the
    first of the families' main scores (the registry's ``headline_methods``), with the books in the order of
    their mean scores where ``summary_dir``'s run has its per-document scores (:func:`book_ranking`)."""
    if "ci_books" not in summary.columns:
        return ""
    # the headline methods, then each family's main scores (a book benchmark probed by CopyBench only)
    ordered = list(dict.fromkeys([*methods, *family_main_methods()]))
    grouped = summary.dropna(subset=["ci_books"])
    books = grouped.groupby("benchmark")["ci_books"].max()
    if books.empty:
        return ""
    lines = ["Labels given per book (a QA set's: per article or group_key): the intervals resample whole books and the t-test",
             "compares the books' mean scores (metrics.csv ci_books), since a book's chapters are no independent draws:"]
    for benchmark, n in books.items():
        if n >= FEW_BOOKS:
            lines.append(f"  {benchmark}: {int(n)} books")
            continue
        lines.append(f"  {benchmark}: {int(n)} books, fewer than {FEW_BOOKS}: no interval is a guide; read the rank test "
                     f"of the books' means (books_pvalue, one-sided; its smallest value, e.g. 0.05 for 3 books "
                     f"against 3, comes 1 time in 20 by chance alone)")
        rows = grouped[(grouped["benchmark"] == benchmark) & grouped["method"].isin(ordered)
                       & grouped["books_pvalue"].notna()] if "books_pvalue" in grouped.columns else grouped.iloc[:0]
        order = {m: i for i, m in enumerate(ordered)}
        rows = rows.assign(order=rows["method"].map(order)).sort_values(["model", "order"]).drop_duplicates("model")
        for r in rows.itertuples():
            ranking = book_ranking(Path(summary_dir).parent, benchmark, r.model, r.method) if summary_dir else ""
            lines.append(f"    {r.model} {r.method}: books_pvalue {pvalue_text(r.books_pvalue)}"
                         + (f"; by mean score (* member): {ranking}" if ranking else ""))
    return "\n".join(lines)


def published_labels_note(summary_dir: Path, summary: pd.DataFrame) -> str:
    """A line per scored benchmark whose labels are published claims (``benchmarks.csv``): base models are
    not checked there, and why; "" where every scored benchmark was split at random."""
    table = benchmarks_table(summary_dir)
    if table is None or summary.empty:
        return ""
    table = table[~table["null_control"] & table["benchmark"].isin(set(summary["benchmark"]))]
    if table.empty:
        return ""
    path = Path(summary_dir) / "benchmarks.csv"
    lines = ["Base models are null controls only where memaudit split members from non-members at random.",
             "These benchmarks' labels are claims about the world (published, or your own), which a model never",
             f"fine-tuned on them may well reflect: there a base model's AUC and selections are findings, not checks",
             f"({path}):"]
    lines += [f"  {r.benchmark}: {r.labels}" for r in table.itertuples()]
    return "\n".join(lines)


def scored_files(summary_dir: Path, files: dict[str, str]) -> dict[tuple[str, str, str], Path]:
    """``{(benchmark, model, method): results/scores/<benchmark>/<model>/<files[method]>}`` for every row of
    ``summary_dir/metrics.csv`` whose method is a key of ``files`` and whose file exists: a family's
    per-run files found from the names in the summary, never parsed out of a path."""
    metrics = Path(summary_dir) / "metrics.csv"
    if not metrics.exists():
        return {}
    table = read_table(metrics)
    runs = sorted({(b, m, method) for b, m, method in zip(table["benchmark"], table["model"], table["method"])
                   if method in files})
    paths = {(b, m, method): Path(summary_dir).parent / "scores" / b / m / files[method] for b, m, method in runs}
    return {key: path for key, path in paths.items() if path.exists()}


def family_blocks(summary_dir: Path, models: pd.DataFrame | None) -> list[str]:
    """Every probe family's headline sections, in registry order (the families' ``headline`` hooks:
    ``"module:function"(summary_dir, models) -> [section, ...]``, ``models`` None when the run wrote no
    ``models.csv``); empty sections are dropped."""
    from memaudit.probes.registry import FAMILIES, load_callable

    ran = families_run(summary_dir)
    blocks, left = [], []
    for family in FAMILIES.values():
        if family.headline:
            shown = [b for b in load_callable(family.headline)(Path(summary_dir), models) if b]
            if ran is None or family.name in ran:
                blocks += shown
            elif shown:
                left.append(family.name)
    if left:  # a family this run's config does not run: its tables are another config's run
        blocks.append(f"Not shown: the tables of {', '.join(left)} in {summary_dir}, left there by a run of another "
                      f"config (this run's benchmarks.csv lists the families it ran on each benchmark).")
    return blocks


def families_run(summary_dir: Path) -> set[str] | None:
    """The probe families the run ran on any benchmark (``benchmarks.csv``'s ``families``); None for a run
    whose table has no such column (then every family's tables are shown, as before it existed)."""
    table = benchmarks_table(summary_dir)
    if table is None or "families" not in table.columns:
        return None
    return {f for cell in table["families"].fillna("") for f in str(cell).split(";") if f}


def family_benchmarks(summary_dir: Path, family: str) -> set[str] | None:
    """The benchmarks the run ran ``family`` on (``benchmarks.csv``'s ``families``): a family's per-benchmark
    tables of other benchmarks are another config's run; None for a run without that column (every one)."""
    table = benchmarks_table(summary_dir)
    if table is None or "families" not in table.columns:
        return None
    return {b for b, cell in zip(table["benchmark"], table["families"].fillna("")) if family in str(cell).split(";")}


def rejects_summary(rejects: pd.DataFrame) -> str:
    """What ``results/summary/rejects.csv`` says in a line, or a line per (benchmark, file, reason)."""
    where = "results/datasets/<benchmark>/rejects.csv"
    left = rejects[rejects["n_rows"] > 0]
    if left.empty:
        n = rejects["benchmark"].nunique()
        return f"Input rows left out by the loaders: none ({n} benchmark{'s' if n != 1 else ''} checked)."
    # a kept row (a near-duplicate, an empty NYT prefix) is in the benchmark: not counted as left out
    kept = int(left.loc[left["action"] == "kept", "n_rows"].sum())
    n_left = int(left["n_rows"].sum()) - kept
    if not n_left:
        head = f"none; {kept} kept with a note (each row with its line in {where}):"
    else:
        more = f"; {kept} more kept with a note" if kept else ""
        head = f"({n_left}{more}; each row with its line in {where}):"
    lines = [f"Input rows left out by the loaders{':' if not n_left else ''} {head}"]
    lines += [f"  {r.benchmark}: {r.n_rows} {r.action} in {r.file}: {r.reason}" for r in left.itertuples()]
    return "\n".join(lines)


# The level of the null control's check: a base model's AUC on a random split falls outside
# null_auc_range one time in a hundred by chance alone.
NULL_ALPHA = 0.01


def null_auc_range(n_member: int, n_nonmember: int, alpha: float = NULL_ALPHA) -> tuple[float, float]:
    """Where a base model's AUC falls with probability ``1 - alpha`` on a random member/non-member split
    of ``n_member`` + ``n_nonmember`` documents.

    The split is drawn at random, so whatever the scores, their ranks among the labels are a random
    permutation and the AUC is the Mann-Whitney U over ``n_member * n_nonmember``: mean 0.5, standard
    deviation ``sqrt((n_member + n_nonmember + 1) / (12 * n_member * n_nonmember))`` (no ties; the normal
    approximation), rounded outwards to 3 decimals. A fixed band such as [0.4, 0.6] is a test whose level
    moves with the sample: 1.35 standard deviations for 31 + 31 documents (a false alarm one run in six),
    1.9 for 60 + 60, 3.5 for 200 + 200 (blind to a base model that separates the halves).
    """
    from scipy.stats import norm

    n1, n0 = int(n_member), int(n_nonmember)
    if min(n1, n0) < 1:
        raise ValueError(f"null_auc_range: a split needs members and non-members, not {n1} and {n0}")
    half = norm.ppf(1 - alpha / 2) * math.sqrt((n1 + n0 + 1) / (12 * n1 * n0))
    return math.floor((0.5 - half) * 1000) / 1000, math.ceil((0.5 + half) * 1000) / 1000


def shown_value(value: float, low: float, high: float) -> float:
    """``value`` to 3 decimals as a check's row shows it beside its bounds ``[low, high]``: rounded, unless that
    would put a value outside them on a bound (0.6372 shown as 0.637 beside ``in [0.363, 0.637]``, ok False),
    where it is rounded away from it (0.638). A value within them rounds within them (the bounds have 3
    decimals or fewer)."""
    shown = round(value, 3)
    if value > high and shown <= high:
        return math.ceil(value * 1000) / 1000
    if value < low and shown >= low:
        return math.floor(value * 1000) / 1000
    return shown


def demo_expectations(summary: pd.DataFrame, models: pd.DataFrame, method: str = "loss",
                      contaminated_min: float = 0.9, null_alpha: float = NULL_ALPHA,
                      decop_method: str = "decop-likelihood-prob", decop_min: float = 0.8, *,
                      controlled: set[str] | None = None, scored_with: Sequence[str] = ()) -> pd.DataFrame:
    """Check the ground-truth expectations of a run against its summary.

    A model fine-tuned on a benchmark's members should separate them (AUC >= ``contaminated_min``);
    an uncontaminated *base* model on the same random split should sit near chance: its AUC within
    :func:`null_auc_range` of the split's documents at level ``null_alpha``; where the labels were drawn per book (``ci_books`` set), the books'
    means alike by Welch's two-sided t-test at ``null_alpha`` instead. DE-COP's likelihood mode (``decop_method``; by default its mean
    probability of the verbatim option, since accuracy over the demo's one or two passages per document
    takes a few values) should reach ``decop_min`` on the contaminated models; on a base model it is
    checked as the loss is, against :func:`null_auc_range` of its documents (DE-COP scores a dozen or
    a few dozen documents, whose range is wide). It was "the bootstrap 95% interval holds 0.5": a test
    at the 5% level (a false alarm one run in twenty, more where a percentile interval of a dozen
    documents undercovers), where the loss's null check is at ``null_alpha``; session 62's demo run
    gave a base model 0.829 over 7 + 5 documents, its interval above 0.5, inside the null range.
    Base models are checked on the ``controlled`` benchmarks only (:func:`null_control_benchmarks`;
    None: every benchmark). Where the null range holds every AUC from 0 to 1 (3 + 1 documents: no split
    is unlikely enough), the row is reported with ``ok`` blank, not counted as holding. A row whose documents lack members or non-members has no AUC: whichever its
    check, it fails as "members and non-members". A check whose row is missing fails as
    :data:`NOT_EVALUATED` (:func:`missing_checks`) rather than drop out of the count. Returns one row per
    checked (benchmark, model, method) with ``ok``.
    """
    nulls = base_models(models)
    rows = []
    for r in summary[summary["method"].isin([method, decop_method])].itertuples():
        is_decop = r.method == decop_method
        bounds = (-math.inf, math.inf)  # what the check compares r.auc with (shown_value)
        null = is_null_control(r.benchmark, r.model, nulls, controlled)
        if not (bool(r.contaminated) or null):
            continue
        if not (r.n_member >= 1 and r.n_nonmember >= 1):  # one class: no AUC, whichever check the row has
            expect, ok = "members and non-members", False
        elif bool(r.contaminated):
            floor = decop_min if is_decop else contaminated_min
            expect, ok, bounds = f">= {floor}", r.auc >= floor, (floor, math.inf)
        elif not pd.isna(getattr(r, "ci_books", math.nan)):
            # labels drawn per book (split_by: book): a book's chapters share its level, so the documents'
            # AUC strays from 0.5 by chance far more than null_auc_range allows (its labels are drawn
            # document by document: a check failing 14-24% of runs, not 1%, for 6 to 20 books). The books
            # are the draws: Welch's two-sided t-test of their means (t_pvalue where ci_books is set).
            p = float(r.t_pvalue)
            expect = f"books' means alike (t-test p >= {null_alpha:g}; {int(r.ci_books)} books)"
            ok = p >= null_alpha  # nan (no variance in either class) cannot show it: fails
        else:
            low, high = null_auc_range(r.n_member, r.n_nonmember, null_alpha)
            expect, ok, bounds = f"in [{low:.3f}, {high:.3f}]", low <= r.auc <= high, (low, high)
            if low <= 0 and high >= 1:  # a check no AUC can fail: reported, not counted as holding
                expect, ok = (f"no check: {int(r.n_member)} + {int(r.n_nonmember)} documents, too few (any AUC lies "
                              f"in the null range)"), ""
        rows.append({"benchmark": r.benchmark, "model": r.model, "method": r.method,
                     "auc": shown_value(r.auc, *bounds), "expected": expect, "ok": ok if ok == "" else bool(ok)})
    # the probe's other scores of a pair say it was probed there: token_prob's headline and reference
    # methods for the loss, DE-COP likelihood mode's other rows for its probability
    probed = {method: lambda m: m in set(scored_with) or m.startswith("ref_"),
              decop_method: lambda m: m.startswith(decop_method.removesuffix("-prob"))}
    for check, siblings in probed.items():
        for benchmark, model in missing_checks(summary, models, check, siblings, nulls, controlled):
            rows.append({"benchmark": benchmark, "model": model, "method": check, "auc": math.nan,
                         "expected": f"{NOT_EVALUATED}: no {check} row in metrics.csv", "ok": False})
    return pd.DataFrame(rows)


def missing_checks(summary: pd.DataFrame, models: pd.DataFrame, method: str, probed: Callable[[str], bool],
                   nulls: set[str], controlled: set[str] | None) -> list[tuple[str, str]]:
    """The (benchmark, model) pairs whose ``method`` check has no row in ``summary``, on the benchmarks
    where ``method`` or another score of its probe (``probed(method name)``) scored some model: a
    contaminated model (``models.csv``'s ``contaminated_on``) or null control with another score of the
    probe there (the method was left out of the run), and a contaminated model with no row at all there.
    A base model no probe covers on a benchmark is no check, nor is a model a probe's ``models`` list
    leaves out that other probes score."""
    ran = set(summary.loc[summary["method"].astype(str).map(probed) | (summary["method"] == method), "benchmark"])
    contaminated_on = models.get("contaminated_on", pd.Series("", index=models.index)).fillna("").astype(str)
    missing = []
    for benchmark in sorted(ran, key=str):
        here = summary[summary["benchmark"] == benchmark]
        for model, fine_tuned in zip(models["model"], contaminated_on):
            contaminated = benchmark in fine_tuned.split(";")
            if not (contaminated or is_null_control(benchmark, model, nulls, controlled)):
                continue
            mine = set(here.loc[here["model"] == model, "method"])
            if method not in mine and (any(map(probed, mine)) or (contaminated and not mine)):
                missing.append((benchmark, model))
    return missing


def selection_section(path: Path, summary: pd.DataFrame, models: pd.DataFrame,
                      controlled: set[str] | None) -> str:
    """The headline's section of :func:`selection_expectations` over ``selection.csv`` ("" where the run
    wrote none); a table of no rows (no model had non-members enough to calibrate) still lists the checks
    ``summary`` says it could not make."""
    path = Path(path)
    if not path.exists():
        return ""
    what = "the run's selection table"
    selection = read_table(path, what, ("benchmark", "model", "method"))
    # a row's columns: a table of no rows (nothing calibrated, an unlabelled run) is read for its header only
    require_columns(path, selection, SELECTION_ROW_COLUMNS if len(selection) else (), what)
    return section("FDR-controlled selection (conformal BH over the loss score; contaminated: empirical FDR <= "
                   "q + 0.02; base models: (near) nothing named at q = 0.1)",
                   selection_expectations(selection, models, controlled=controlled, summary=summary))


# the columns of selection.csv's rows that its checks read (min_q and n_calibration: where the run wrote them)
SELECTION_ROW_COLUMNS = ("contaminated", "q", "fdr", "power", "mean_selected", "n_test")


def selection_expectations(selection: pd.DataFrame, models: pd.DataFrame, method: str = "loss",
                           qs: Sequence[float] = (0.1, 0.2, 0.3), slack: float = 0.02,
                           null_q: float = 0.1, null_share: float = 0.05, *,
                           controlled: set[str] | None = None, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Issue 17's checks of conformal BH against ground truth, over ``method``'s scores.

    On a benchmark whose members a model was fine-tuned on, the empirical FDR (mean over the
    calibration splits) is at most ``q + slack`` at each of ``qs``; a *base* model (the null
    control, on the ``controlled`` benchmarks: :func:`null_control_benchmarks`) names at most
    ``null_share`` of the test documents on average at ``null_q``. With ``summary`` (``metrics.csv``),
    each check of a ``method`` row there that has no row in ``selection`` (too few non-members to
    calibrate on: :func:`memaudit.stats.selection.uncalibrated_notes`) fails as :data:`NOT_EVALUATED`
    rather than drop out of the count. So does a check at a q below the row's ``min_q``
    (:func:`memaudit.stats.selection.min_resolvable_q`), where BH names nothing whatever the scores.
    """
    nulls = base_models(models)
    rows = []
    mine, made = selection[selection["method"] == method], set()
    for r in mine.itertuples():
        q = round(float(r.q), 6)
        fdr_bound = math.inf
        if bool(r.contaminated) and q in {round(x, 6) for x in qs}:
            expect, ok, fdr_bound = f"fdr <= {q + slack:g}", r.fdr <= q + slack, q + slack
        elif is_null_control(r.benchmark, r.model, nulls, controlled) and q == round(null_q, 6):
            expect, ok = f"named <= {null_share:.0%} of {r.n_test}", r.mean_selected <= null_share * r.n_test
        else:
            continue
        min_q = float(getattr(r, "min_q", 0.0))
        if q < min_q:  # BH names nothing below the smallest p-value: the check would hold by arithmetic
            expect, ok = (f"{NOT_EVALUATED}: q = {q:g} is below 1/(n_calibration + 1) = {min_q:.3g} "
                          f"({int(r.n_calibration)} calibration non-members): nothing can be named"), False
        made.add((r.benchmark, r.model, q))
        rows.append({"benchmark": r.benchmark, "model": r.model, "q": q,
                     "fdr": shown_value(r.fdr, -math.inf, fdr_bound),
                     "power": round(r.power, 3), "mean_named": round(r.mean_selected, 1), "expected": expect,
                     "ok": bool(ok)})
    selected = set(zip(mine["benchmark"], mine["model"]))
    for r in ([] if summary is None else summary[summary["method"] == method].itertuples()):
        null = is_null_control(r.benchmark, r.model, nulls, controlled)
        wanted = qs if bool(r.contaminated) else [null_q] if null else []
        for q in (round(float(x), 6) for x in wanted):
            if (r.benchmark, r.model, q) in made:
                continue
            n = int(r.n_nonmember)
            why = (f"({n} non-member{'s' if n != 1 else ''}: too few to calibrate)"
                   if (r.benchmark, r.model) not in selected else f"at q = {q:g} (stats.selection.qs)")
            rows.append({"benchmark": r.benchmark, "model": r.model, "q": q, "fdr": math.nan, "power": math.nan,
                         "mean_named": math.nan, "expected": f"{NOT_EVALUATED}: no {method} row in selection.csv "
                                                             f"{why}", "ok": False})
    return pd.DataFrame(rows)
