"""``memaudit stats``: membership-inference metrics for any per-document CSV.

Example::

    memaudit stats --input per_document.csv --score-col score --label-col label \\
        --group-col method --output metrics.csv

Scores must be oriented higher = more likely member.  Labels may be 0/1,
true/false, yes/no or any two strings; ``--member-value`` names the member one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from memaudit.errors import MemauditError
from memaudit.io import write_csv
from memaudit.stats.metrics import METRIC_COLUMNS, compute_metrics

EXIT_INPUT_ERROR = 2

# Spellings of the two boolean labels, so that "1", "1.0", "True" and "yes" all
# match --member-value 1 (pandas reads a 0/1 column as int, or float if it has gaps).
_TRUE_SPELLINGS = {"1", "1.0", "true", "t", "yes", "y"}
_FALSE_SPELLINGS = {"0", "0.0", "false", "f", "no", "n"}


class _UsageError(MemauditError):
    """A user error the CLI reports in one line and exits 2 for."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memaudit stats",
        description=(
            "Compute AUC, DE-COP binarized AUC, bootstrap mean/std and 95% CI, "
            "TPR at 1% and 0.1% FPR and a Welch t-test p-value from a per-document "
            "CSV. Scores must be higher for more likely members."
        ),
    )
    parser.add_argument("--input", required=True, type=Path, help="per-document CSV file")
    parser.add_argument("--score-col", default="score", help="score column (default: score)")
    parser.add_argument("--label-col", default="label", help="membership label column (default: label)")
    parser.add_argument(
        "--group-col", action="extend", nargs="+", default=[], metavar="COL",
        help="compute metrics separately per value of these columns (e.g. method)",
    )
    parser.add_argument(
        "--member-value", default="1",
        help="label value that means member (default: 1; also matches true/yes)",
    )
    parser.add_argument("--output", type=Path, help="write the metrics table to this CSV")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    parser.add_argument("--n-boot", type=int, default=10,
                        help="resamples for bootstrap mean/std (default: 10, as in DE-COP)")
    parser.add_argument("--n-boot-ci", type=int, default=1000,
                        help="resamples for the 95%% percentile CI (default: 1000)")
    return parser


def _normalise_label(value) -> str:
    text = str(value).strip().lower()
    if text in _TRUE_SPELLINGS:
        return "1"
    if text in _FALSE_SPELLINGS:
        return "0"
    return text


def _read_table(path: Path, needed: list[str]) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise _UsageError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise _UsageError(f"{path}: is a directory, not a CSV file") from None
    except pd.errors.EmptyDataError:
        raise _UsageError(f"{path}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise _UsageError(f"{path}: not a readable CSV file ({exc})") from None
    for column in needed:
        if column not in frame.columns:
            raise _UsageError(
                f"{path}: no column {column!r}; columns are: {', '.join(map(str, frame.columns))}"
            )
    return frame


def _line(index: int) -> int:
    # Row index 0 is line 2 of the file (line 1 is the header).
    return index + 2


def _parse_scores(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    raw = frame[column]
    numeric = pd.to_numeric(raw, errors="coerce")
    bad = ~np.isfinite(numeric.to_numpy(dtype=float))
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        value = raw.iloc[index]
        what = "missing" if pd.isna(value) else f"not a finite number ({value!r})"
        raise _UsageError(
            f"{path}, line {_line(index)}: column {column!r} is {what}"
            f" ({int(bad.sum())} such row(s) in all)"
        )
    return numeric.to_numpy(dtype=float)


def _parse_labels(frame: pd.DataFrame, column: str, member_value: str, path: Path) -> np.ndarray:
    raw = frame[column]
    missing = raw.isna().to_numpy()
    if missing.any():
        raise _UsageError(
            f"{path}, line {_line(int(np.flatnonzero(missing)[0]))}: column {column!r} is missing"
        )
    normalised = raw.map(_normalise_label)
    values = sorted(set(normalised))
    member = _normalise_label(member_value)
    if len(values) < 2:
        raise _UsageError(
            f"{path}: column {column!r} has a single value ({raw.iloc[0]!r}); "
            f"metrics need both members and non-members"
        )
    if len(values) > 2:
        shown = ", ".join(repr(v) for v in values[:5])
        raise _UsageError(
            f"{path}: column {column!r} has {len(values)} distinct values ({shown}...); "
            f"expected exactly two (member and non-member)"
        )
    if member not in values:
        raise _UsageError(
            f"{path}: --member-value {member_value!r} does not occur in column {column!r} "
            f"(values: {', '.join(repr(v) for v in values)})"
        )
    return (normalised == member).to_numpy().astype(int)


def compute_stats_table(args: argparse.Namespace) -> pd.DataFrame:
    """Metrics table for parsed arguments: group columns then :data:`METRIC_COLUMNS`."""
    needed = [args.score_col, args.label_col, *args.group_col]
    frame = _read_table(args.input, needed)
    if frame.empty:
        raise _UsageError(f"{args.input}: no data rows")
    scores = _parse_scores(frame, args.score_col, args.input)
    labels = _parse_labels(frame, args.label_col, args.member_value, args.input)
    options = dict(n_boot_small=args.n_boot, n_boot_ci=args.n_boot_ci, seed=args.seed)

    if not args.group_col:
        return pd.DataFrame([compute_metrics(scores, labels, **options)], columns=METRIC_COLUMNS)
    rows = []
    groups = frame.groupby(args.group_col, sort=True, dropna=False).indices
    for key, positions in groups.items():
        key = key if isinstance(key, tuple) else (key,)
        metrics = compute_metrics(scores[positions], labels[positions], **options)
        rows.append({**dict(zip(args.group_col, key)), **metrics})
    return pd.DataFrame(rows, columns=[*args.group_col, *METRIC_COLUMNS])


def _format_for_terminal(table: pd.DataFrame) -> str:
    formatters = {
        "t_pvalue": lambda v: "n/a" if pd.isna(v) else f"{v:.2e}",
    }
    return table.to_string(
        index=False,
        formatters=formatters,
        float_format=lambda v: "n/a" if pd.isna(v) else f"{v:.3f}",
    )


def stats_main(argv: list[str] | None = None) -> int:
    """Entry point of ``memaudit stats``; returns the process exit status.

    0 on success; 2 on a usage or input error (missing file or column,
    non-numeric score, single-class labels), with a one-line message on stderr.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        # argparse exits 0 for --help and 2 for bad arguments; return, don't exit.
        return int(exc.code or 0)
    if args.n_boot < 0 or args.n_boot_ci < 0:
        print(f"{parser.prog}: error: --n-boot and --n-boot-ci must be >= 0", file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        table = compute_stats_table(args)
        if args.output is not None:
            write_csv(args.output, table)
    except MemauditError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    print(_format_for_terminal(table))
    if args.output is not None:
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(stats_main())
