"""Atomic file writing and strict reading of the project's file formats.

Every writer goes through :func:`atomic_path`: data are written to a temporary
sibling and renamed into place, so a killed job never leaves a half-written
output that a later run could mistake for a finished one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from memaudit.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    ``suffix`` defaults to the target's suffix so that libraries which infer the
    format from the extension (matplotlib, numpy) keep working.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=suffix if suffix is not None else "".join(path.suffixes),
        dir=path.parent,
    )
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False, default=_json_default) + "\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file; a malformed line raises :class:`InputError` naming file and line."""
    path = Path(path)
    out = []
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}, line {lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise InputError(f"{path}, line {lineno}: expected a JSON object")
            out.append(rec)
    return out


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg})") from None


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame atomically (no index)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def _json_default(obj):
    # numpy scalars and arrays, Paths
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
