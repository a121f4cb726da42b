"""A user's membership labels as a two-column CSV (``<key>,label``; 1 = member, 0 = non-member).

Two benchmarks read one: CopyBench's published books (``published: {format: copybench, labels:}``,
keyed by ``title``) and a benchmark built from sources (``benchmarks.<name>.labels``, keyed by
``book``: a book the model is known to have seen, or known not to have, instead of a random split).
The file is the user's own, not a published one: any problem stops the build with a one-line
:class:`~memaudit.errors.InputError` naming the file, the line and the column.
"""

from __future__ import annotations

from pathlib import Path

from memaudit.errors import InputError


def read_labels(path: str | Path, key: str) -> dict[str, tuple[int, int]]:
    """``{key value: (label, line)}`` of a CSV whose header is ``<key>,label``."""
    from memaudit.datasets.rejects import csv_rows_or_error, read_text

    path, text = read_text(path, f"a CSV file of {key},label rows")
    labels: dict[str, tuple[int, int]] = {}
    rows = csv_rows_or_error(path, text, empty_fields=True)  # a "," row (empty cells) is an error, not skipped
    header = next(rows, None)
    if header is None or tuple(c.strip().lower() for c in header[1]) != (key, "label"):
        got = ",".join(header[1]) if header else ""
        raise InputError(f"{path}, line {header[0] if header else 1}: the header must be '{key},label', got {got!r}")
    for line, cells in rows:
        if len(cells) != 2:
            raise InputError(f"{path}, line {line}: {len(cells)} columns, expected 2 ({key},label)")
        name, label = cells[0].strip(), cells[1].strip()
        if not name or "\x00" in name:
            raise InputError(f"{path}, line {line}, column {key}: {'a NUL character' if name else f'empty {key}'}")
        if label not in ("0", "1"):
            raise InputError(f"{path}, line {line}, column label: {label!r} is not 0 or 1 (1 = member)")
        if name in labels:
            raise InputError(f"{path}, line {line}, column {key}: {name!r} again (first on line {labels[name][1]})")
        labels[name] = (int(label), line)
    if not labels:
        raise InputError(f"{path}: no {key},label rows after the header")
    return labels
