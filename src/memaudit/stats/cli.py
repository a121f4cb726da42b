"""``memaudit stats``: membership-inference metrics for any per-document CSV (or .xlsx sheet).

Example::

    memaudit stats --input per_document.csv --score-col score --label-col label \\
        --group-col method --output metrics.csv

Scores must be oriented higher = more likely member.  Labels may be 0/1,
true/false, yes/no or any two strings; ``--member-value`` names the member one.
Several ``--score-col`` score a wide table (one column per method, as in DE-COP's
per-book results) one column at a time.

Every problem with the input is one line naming the file and the physical line
(as an editor numbers it; the row of an .xlsx sheet) and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from memaudit.errors import MemauditError
from memaudit.io import refuse_overwriting, write_csv
from memaudit.stats.headline import FEW_BOOKS, FEW_DOCUMENTS
from memaudit.stats.metrics import METRIC_COLUMNS, compute_metrics, label_groups
from memaudit.stats.table_input import Table, read_table

# The fewest resamples a 95% percentile interval is drawn from (`memaudit stats --n-boot-ci`, the
# `stats.n_boot_ci` schema minimum): its bounds are the 2.5th and 97.5th percentiles, and under 40
# resamples a 2.5% tail holds none of them (1 gave [0.831, 0.831]).
MIN_BOOT_CI = 40

EXIT_INPUT_ERROR = 2

# Spellings of the two boolean labels, so that "1", "1.0", "True" and "yes" all
# match --member-value 1.
_TRUE_SPELLINGS = {"1", "1.0", "true", "t", "yes", "y"}
_FALSE_SPELLINGS = {"0", "0.0", "false", "f", "no", "n"}

# A decimal number as written in a CSV file; "inf", "nan", "0x1p3" and "1_000" are not scores.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class _UsageError(MemauditError):
    """A user error the CLI reports in one line and exits 2 for."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memaudit stats",
        description=(
            "Compute AUC, DE-COP binarized AUC, bootstrap mean/std of both, 95% CI, "
            "TPR at 1% and 0.1% FPR and a Welch t-test p-value from a per-document "
            "CSV file (UTF-8) or the first sheet of an .xlsx workbook. Scores must be "
            "higher for more likely members."
        ),
    )
    parser.add_argument("--input", required=True, type=Path, help="per-document CSV file or .xlsx workbook")
    parser.add_argument(
        "--score-col", action="extend", nargs="+", default=[], metavar="COL",
        help="score column (default: score); several score a wide table one column at a time, "
             "each row of the output naming its score_column",
    )
    parser.add_argument("--label-col", default="label", help="membership label column (default: label)")
    parser.add_argument(
        "--group-col", action="extend", nargs="+", default=[], metavar="COL",
        help="compute metrics separately per value of these columns (e.g. method)",
    )
    parser.add_argument(
        "--skip-unscorable-groups", action="store_true",
        help="leave out, with a note on stderr, a group that cannot be scored (an empty group value, "
             "or members only or non-members only) instead of stopping with an error",
    )
    parser.add_argument(
        "--book-col", metavar="COL",
        help="the book (or other unit) each document belongs to: where every book's documents share one "
             "label, the 95%% CI resamples whole books and the t-test compares the books' means "
             "(ci_books says how many books; books_pvalue: a one-sided rank test of the books' means)",
    )
    parser.add_argument(
        "--books-from", metavar="DOCUMENTS", type=Path,
        help="a benchmark's results/datasets/<benchmark>/documents.jsonl: each row's book is that of its "
             "--doc-col document there, as the workflow's statistics count books (instead of --book-col)",
    )
    parser.add_argument("--doc-col", default="doc_id",
                        help="with --books-from: the column of document ids (default: doc_id)")
    parser.add_argument(
        "--member-value", default="1",
        help="label value that means member (default: 1; also matches true/yes)",
    )
    parser.add_argument("--output", type=Path, help="write the metrics table to this CSV")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    parser.add_argument("--n-boot", type=int, default=10,
                        help="resamples for the bootstrap means and stds (default: 10, as in DE-COP)")
    parser.add_argument("--n-boot-ci", type=int, default=1000,
                        help=f"resamples for the 95%% percentile CI, at least {MIN_BOOT_CI} (default: 1000)")
    return parser


def _normalise_label(value: str) -> str:
    text = value.strip().lower()
    if text in _TRUE_SPELLINGS:
        return "1"
    if text in _FALSE_SPELLINGS:
        return "0"
    return text


def _column_positions(table: Table, columns: list[str]) -> dict[str, int]:
    """Field index of each needed column; a missing or repeated header name is an error."""
    positions = {}
    for column in columns:
        found = [i for i, name in enumerate(table.header) if name == column]
        if not found:
            raise _UsageError(f"{table.path}: no column {column!r}; columns are: {', '.join(map(repr, table.header))}")
        if len(found) > 1:
            raise _UsageError(f"{table.at(table.header_at)}: column {column!r} appears {len(found)} times "
                              f"in the header (fields {', '.join(str(i + 1) for i in found)})")
        positions[column] = found[0]
    return positions


def _parse_scores(table: Table, column: str, index: int) -> np.ndarray:
    scores = np.empty(len(table.records), dtype=float)
    bad = []
    for position, (_, fields) in enumerate(table.records):
        text = fields[index].strip()
        value = float(text) if _NUMBER.fullmatch(text) else math.nan
        if not math.isfinite(value):
            bad.append(position)
        scores[position] = value
    if bad:
        number, fields = table.records[bad[0]]
        text = fields[index]
        what = "missing" if not text.strip() else f"not a finite number ({_shorten(text)!r})"
        raise _UsageError(f"{table.at(number)}: column {column!r} is {what} ({len(bad)} such row(s) in all)")
    return scores


def _parse_labels(table: Table, column: str, index: int, member_value: str) -> np.ndarray:
    normalised = []
    for number, fields in table.records:
        if not fields[index].strip():
            raise _UsageError(f"{table.at(number)}: column {column!r} is missing")
        normalised.append(_normalise_label(fields[index]))
    values = sorted(set(normalised))
    member = _normalise_label(member_value)
    if len(values) < 2:
        raise _UsageError(
            f"{table.path}: column {column!r} has a single value ({_shorten(table.records[0][1][index])!r}); "
            f"metrics need both members and non-members"
        )
    if len(values) > 2:
        shown = ", ".join(repr(_shorten(v)) for v in values[:5])
        raise _UsageError(
            f"{table.path}: column {column!r} has {len(values)} distinct values ({shown}...); "
            f"expected exactly two (member and non-member)"
        )
    if member not in values:
        raise _UsageError(
            f"{table.path}: --member-value {member_value!r} does not occur in column {column!r} "
            f"(values: {', '.join(repr(_shorten(v)) for v in values)})"
        )
    return np.array([int(v == member) for v in normalised], dtype=int)


def _shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for a message (a field can be megabytes long)."""
    return text if len(text) <= limit else text[:limit] + "..."


def _group_sort_key(key: tuple[str, ...]) -> tuple:
    # Numbers in numeric order (2 before 10), then text.
    return tuple((0, float(v), "") if _NUMBER.fullmatch(v.strip()) else (1, 0.0, v) for v in key)


def _describe(columns: list[str], key: tuple[str, ...]) -> str:
    return ", ".join(f"{column}={_shorten(value)!r}" for column, value in zip(columns, key))


def _numbers(table: Table, positions: list[int]) -> str:
    shown = ", ".join(str(table.records[p][0]) for p in positions[:5])
    return f"{table.unit}{'s' if len(positions) > 1 else ''} {shown}{', ...' if len(positions) > 5 else ''}"


def _scorable_groups(table: Table, args: argparse.Namespace, group_index: list[int], labels: np.ndarray,
                     notes: list[str]) -> list[tuple[tuple[str, ...], list[int]]]:
    """(group key, record positions) of every group that can be scored, sorted by key.

    A group with an empty value in a group column, or with members only or non-members only,
    cannot be scored: an error naming it, or with ``--skip-unscorable-groups`` a note saying
    which records were left out and why.
    """
    if not args.group_col:
        return [((), list(range(len(table.records))))]
    groups: dict[tuple[str, ...], list[int]] = {}
    for position, (_, fields) in enumerate(table.records):
        groups.setdefault(tuple(fields[i] for i in group_index), []).append(position)
    scorable, skipped = [], []
    for key in sorted(groups, key=_group_sort_key):
        positions = groups[key]
        n_member = int(labels[positions].sum())
        if any(not value.strip() for value in key):
            empty = [c for c, v in zip(args.group_col, key) if not v.strip()]
            reason = f"empty {', '.join(repr(c) for c in empty)} value"
        elif n_member in (0, len(positions)):
            reason = (f"{'members' if n_member else 'non-members'} only ({len(positions)}); "
                      f"an AUC needs both")
        else:
            scorable.append((key, positions))
            continue
        where = f"group {_describe(args.group_col, key)} ({len(positions)} record(s), {_numbers(table, positions)})"
        if not args.skip_unscorable_groups:
            raise _UsageError(f"{table.path}: {where} cannot be scored: {reason}; "
                              f"--skip-unscorable-groups leaves such groups out")
        skipped.append(f"{where}: {reason}")
    if not scorable:
        raise _UsageError(f"{table.path}: no group can be scored ({len(skipped)} group(s); the first, {skipped[0]})")
    notes.extend(f"note: skipped {text}" for text in skipped)
    return scorable


def _small_sample_notes(what: str, metrics: dict) -> list[str]:
    """Warnings for a row whose numbers rest on too few documents, or on too few books (an interval over
    whole books counts books, not their documents: :data:`FEW_BOOKS`), and a note where a TPR column is the
    TPR at FPR 0 (fewer non-members than one false positive at that FPR needs:
    :func:`memaudit.stats.metrics.tpr_at_fpr`)."""
    out = []
    n_member, n_nonmember = metrics["n_member"], metrics["n_nonmember"]
    if min(n_member, n_nonmember) < FEW_DOCUMENTS:
        out.append(f"warning: {what}: {n_member} member(s) and {n_nonmember} non-member(s), fewer than "
                   f"{FEW_DOCUMENTS} in a class: the bootstrap means, stds and 95% interval and the TPR at "
                   f"1% and 0.1% FPR are unreliable, whatever they show")
    else:  # (the warning above says it of the TPR columns already)
        collapsed = [c for c, needed in (("tpr_at_1pct_fpr", 100), ("tpr_at_01pct_fpr", 1000)) if n_nonmember < needed]
        if collapsed:
            out.append(f"note: {what}: {n_nonmember} non-members: {' and '.join(collapsed)} "
                       f"{'are' if len(collapsed) > 1 else 'is'} the TPR at FPR 0 (the share of members above every "
                       f"non-member): one false positive is already 1/{n_nonmember} = {1 / n_nonmember:.1%} FPR; "
                       f"1% FPR needs 100 non-members, 0.1% needs 1,000")
    n_books = metrics["ci_books"]
    if not math.isnan(n_books) and n_books < FEW_BOOKS:
        out.append(f"warning: {what}: the 95% interval resamples {int(n_books)} books, fewer than {FEW_BOOKS}: no "
                   f"interval is a guide over so few; read books_pvalue, the rank test of the books' means "
                   f"(3 books against 3 give at best 0.05)")
    return out


def _accounting(table: Table, n_scored: int) -> str:
    """Where every record went: ``read <file>: N record(s) (lines a-b, k blank skipped); S scored, R skipped``."""
    n_read = len(table.records)
    blank = f", {table.n_blank} blank {table.unit}(s) skipped" if table.n_blank else ""
    skipped = f", {n_read - n_scored} in skipped groups" if n_read > n_scored else ""
    return (f"read {table.path}: {n_read} record(s) ({table.unit}s {table.records[0][0]}-{table.records[-1][0]}"
            f"{blank}); {n_scored} scored{skipped}")


def _book_column(table: Table, column: str, index: int) -> np.ndarray:
    """Each row's ``--book-col`` book; an empty cell is an error naming the line, as a missing label is
    (read as a book named '', the blank rows of a side made one book)."""
    out = []
    for number, fields in table.records:
        if not fields[index].strip():
            raise _UsageError(f"{table.at(number)}: column {column!r} is missing")
        out.append(fields[index].strip())
    return np.array(out, dtype=object)


def _books_from(table: Table, args: argparse.Namespace) -> np.ndarray:
    """Each row's book by its ``--doc-col`` document in ``--books-from`` (a documents.jsonl); a document
    the file does not hold is an error naming the row."""
    from memaudit.stats.workflow import document_books

    book_of = document_books(args.books_from)
    column = table.header.index(args.doc_col)
    out = []
    for number, fields in table.records:
        doc = fields[column].strip()
        if doc not in book_of:
            raise _UsageError(f"{table.at(number)}: {args.doc_col} {doc!r} is not a document of {args.books_from}")
        out.append(book_of[doc])
    return np.array(out, dtype=object)


def _refuse_repeated_documents(table: Table, args: argparse.Namespace, column: int,
                               groups: list[tuple[tuple[str, ...], list[int]]]) -> None:
    """With ``--books-from`` each row is a ``--doc-col`` document: one listed twice in a group would count
    twice in every statistic (the workflow's metrics refuse it), an error naming both lines."""
    for key, members in groups:
        first: dict[str, int] = {}
        for position in members:
            number, fields = table.records[position]
            doc = fields[column].strip()
            if doc in first:
                group = f" in group {_describe(args.group_col, key)}" if key else ""
                raise _UsageError(f"{table.at(number)}: {args.doc_col} {_shorten(doc)!r} is listed again{group} "
                                  f"(first on {table.unit} {first[doc]}); a document listed twice counts twice "
                                  f"in every statistic")
            first[doc] = number


def compute_stats_table(args: argparse.Namespace) -> tuple[pd.DataFrame, list[str]]:
    """Metrics table for parsed arguments, and the notes and warnings to print with it.

    Columns: ``score_column`` when several ``--score-col`` are given, the group columns, then
    :data:`METRIC_COLUMNS`; one row per (score column, group).
    """
    table = read_table(args.input)
    if args.book_col and args.books_from:
        raise _UsageError("--book-col and --books-from both say where the books are: give one")
    score_cols = list(dict.fromkeys(args.score_col)) or ["score"]
    needed = list(dict.fromkeys([*score_cols, args.label_col, *args.group_col,
                                 *([args.book_col] if args.book_col else []),
                                 *([args.doc_col] if args.books_from else [])]))
    positions = _column_positions(table, needed)
    if not table.records:
        raise _UsageError(f"{table.path}: no data rows (only a header, {table.unit} {table.header_at})")
    labels = _parse_labels(table, args.label_col, positions[args.label_col], args.member_value)
    all_scores = {c: _parse_scores(table, c, positions[c]) for c in score_cols}
    notes: list[str] = []
    groups = _scorable_groups(table, args, [positions[c] for c in args.group_col], labels, notes)
    notes.insert(0, _accounting(table, sum(len(members) for _, members in groups)))
    options = dict(n_boot_small=args.n_boot, n_boot_ci=args.n_boot_ci, seed=args.seed)
    several = len(score_cols) > 1
    rows = []
    if args.books_from:
        _refuse_repeated_documents(table, args, positions[args.doc_col], groups)
    books = (_book_column(table, args.book_col, positions[args.book_col]) if args.book_col
             else _books_from(table, args) if args.books_from else None)
    for score_col, scores in all_scores.items():
        for key, members in groups:
            units = None
            if books is not None:
                units = label_groups(list(books[members]), labels[members])
                if units is None and score_col == score_cols[0]:
                    notes.append(f"note: {_describe(args.group_col, key) or table.path}: the labels are not given "
                                 f"per {args.book_col or 'book'} (a {args.book_col or 'book'} with both labels, one "
                                 f"document each, or "
                                 f"fewer than 2 a side): the interval resamples documents")
            metrics = compute_metrics(scores[members], labels[members], groups=units, **options)
            prefix = {"score_column": score_col} if several else {}
            rows.append({**prefix, **dict(zip(args.group_col, key)), **metrics})
            what = ", ".join(filter(None, [f"score column {score_col!r}" if several else "",
                                           _describe(args.group_col, key)])) or str(table.path)
            notes.extend(_small_sample_notes(what, metrics))
    columns = [*(["score_column"] if several else []), *args.group_col, *METRIC_COLUMNS]
    return pd.DataFrame(rows, columns=columns), notes


def _format_for_terminal(table: pd.DataFrame) -> str:
    if "ci_books" in table.columns and table["ci_books"].isna().all():  # no --book-col, or none applied
        table = table.drop(columns=["ci_books", "books_pvalue"])
    formatters = {
        "ci_books": lambda v: "n/a" if pd.isna(v) else f"{int(v)}",
        "books_pvalue": lambda v: "n/a" if pd.isna(v) else f"{v:.2e}",
        "t_pvalue": lambda v: "n/a" if pd.isna(v) else f"{v:.2e}",
    }
    return table.to_string(
        index=False,
        na_rep="n/a",
        formatters=formatters,
        float_format=lambda v: "n/a" if pd.isna(v) else f"{v:.3f}",
    )


def stats_main(argv: list[str] | None = None) -> int:
    """Entry point of ``memaudit stats``; returns the process exit status.

    0 on success; 2 on a usage or input error (missing, empty or unreadable file,
    missing column, non-numeric score, single-class labels, a group that cannot be
    scored), with a one-line message on stderr.  Notes (skipped blank lines and
    groups, TPR columns that are the TPR at FPR 0) and warnings (fewer than
    :data:`FEW_DOCUMENTS` documents in a class, an interval over fewer than
    :data:`FEW_BOOKS` books: :func:`_small_sample_notes`) go to stderr after the table.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 0 for --help and 2 for bad arguments; return, don't exit.
        return int(exc.code or 0)
    if args.n_boot < 0:
        print(f"{parser.prog}: error: --n-boot must be >= 0 (got {args.n_boot})", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.n_boot_ci < MIN_BOOT_CI:
        print(f"{parser.prog}: error: --n-boot-ci must be >= {MIN_BOOT_CI} (got {args.n_boot_ci}): fewer resamples "
              "leave a 2.5% tail of the 95% interval without a single one", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.seed < 0:  # numpy's generators take no negative seed (a ValueError from deep in the bootstrap)
        print(f"{parser.prog}: error: --seed must be >= 0 (got {args.seed})", file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        refuse_overwriting(args.output, "--output", {"--input": args.input})
        table, notes = compute_stats_table(args)
        if args.output is not None:
            write_csv(args.output, table)
    except MemauditError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except OSError as exc:
        print(f"{parser.prog}: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print(_format_for_terminal(table), flush=True)
    for note in notes:
        print(note, file=sys.stderr)
    if args.output is not None:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(stats_main())
