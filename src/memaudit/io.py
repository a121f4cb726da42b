"""Atomic file writing and strict reading of the project's file formats.

Every writer goes through :func:`atomic_path` (a file) or :func:`atomic_dir` (a
model directory): data are written to a temporary sibling and renamed into
place, so a killed job never leaves a half-written output that a later run could
mistake for a finished one. A full disk or a permission error while writing,
and a path that cannot be written (a folder, under a file), become a
:class:`~memaudit.errors.StorageError` naming the path, with the temporary file
already removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator

from memaudit.errors import InputError, StorageError

# errno -> (what happened, what to do) for the disk and the permissions, whenever they fail a write.
_STORAGE_ERRORS = {
    errno.ENOSPC: ("no space left on device",
                   "free space on that file system (or move results/ to a larger disk) and rerun"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota (or move results/ elsewhere) and rerun"),
    errno.EACCES: ("permission denied",
                   "make the directory writable by this user (or run from a copy you own) and rerun"),
    errno.EPERM: ("operation not permitted",
                  "make the directory writable by this user (or run from a copy you own) and rerun"),
    errno.EROFS: ("read-only file system", "run from a writable location and rerun"),
}
# errno -> (what happened, what to do) for a path that cannot be an output (a folder, under a file, in a folder
# that cannot be made): met only preparing the output or renaming onto it, where any OSError is the path's.
_PATH_ERRORS = {
    errno.EISDIR: ("is a directory", "name a file, not a directory"),
    errno.ENOTDIR: ("not a directory", "a file stands where the path has a folder: name another path"),
    errno.ENOENT: ("no such file or directory", "name a path in a folder that exists or that this user can create"),
}


def refuse_overwriting(output: str | os.PathLike | None, output_flag: str,
                       inputs: dict[str, str | os.PathLike | None]) -> None:
    """An InputError when the file ``output`` would be written over is one of ``inputs`` (``{flag: path}``), the
    same file by another name or link too: ``memaudit stats --output s.csv --input s.csv`` replaced the scores with
    their metrics, ``api-ledger --out`` the paid responses' cache with a CSV. Checked before anything is read."""
    if output is None or not Path(output).exists():
        return
    for flag, path in inputs.items():
        if path is not None and Path(path).exists() and os.path.samefile(output, path):
            raise InputError(f"{output}: {output_flag} names the file {flag} reads, which writing would destroy; "
                             f"write elsewhere")


def storage_error(exc: BaseException, path: str | os.PathLike, *, any_oserror: bool = False) -> StorageError | None:
    """The :class:`StorageError` for a disk-full or permission ``OSError`` while writing ``path``, else None;
    with ``any_oserror`` (preparing the output, renaming onto it), the one for every ``OSError``."""
    if not isinstance(exc, OSError) or (exc.errno not in _STORAGE_ERRORS and not any_oserror):
        return None
    where = f" (at {exc.filename})" if exc.filename and os.fspath(exc.filename) != os.fspath(path) else ""
    if exc.errno in _STORAGE_ERRORS:
        cause, remedy = _STORAGE_ERRORS[exc.errno]
        return StorageError(f"cannot write {os.fspath(path)}: {cause}{where}; {remedy}. "
                            f"Nothing half-written was left behind.")
    strerror = exc.strerror or type(exc).__name__
    cause, remedy = _PATH_ERRORS.get(exc.errno, (strerror[:1].lower() + strerror[1:], "check the path and rerun"))
    return StorageError(f"cannot write {os.fspath(path)}: {cause}{where}; {remedy}")


@contextlib.contextmanager
def storage_errors(path: str | os.PathLike, *, any_oserror: bool = False) -> Iterator[None]:
    """Turn a disk-full or permission ``OSError`` raised inside the block into a :class:`StorageError`
    (with ``any_oserror``, every ``OSError``: for the block preparing the output, where any is the path's)."""
    try:
        yield
    except OSError as exc:
        err = storage_error(exc, path, any_oserror=any_oserror)
        if err is None:
            raise
        raise err from exc


def _make_parent(path: Path) -> None:
    """``path``'s folder, made where missing; a file in the way is ENOTDIR, as the kernel says of a file met
    further down the path (mkdir's exist_ok raises FileExistsError for it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), exc.filename) from exc


def _remove_stale_temporaries(path: Path, suffix: str) -> None:
    """Remove temporaries a killed writer of ``path`` left behind (SIGKILL runs no cleanup).

    Only names of exactly the form this module creates (``.<name>.<8 random chars><suffix>``)
    match; Snakemake runs one writer per output, so none of them is in use.
    """
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.[a-z0-9_]{{8}}{re.escape(suffix)}$")
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return
    for sibling in siblings:
        if pattern.match(sibling.name):
            with contextlib.suppress(OSError):
                shutil.rmtree(sibling) if sibling.is_dir() else sibling.unlink()


_TEMPORARY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def _create_temporary(path: Path, suffix: str, *, directory: bool = False) -> Path:
    """A new ``.<name>.<8 random chars><suffix>`` beside ``path`` (a file, or a folder), created with the
    permissions ``open()`` and ``mkdir()`` give (0666 or 0777 less the umask): ``tempfile.mkstemp`` and
    ``mkdtemp`` create 0600 and 0700, and every output renamed from one was unreadable to the group and
    the others a plainly written file is readable by (results shared on a cluster, a DVC remote)."""
    for _ in range(100):
        name = "".join(_TEMPORARY_CHARS[b % len(_TEMPORARY_CHARS)] for b in os.urandom(8))
        tmp = path.parent / f".{path.name}.{name}{suffix}"
        try:
            if directory:
                os.mkdir(tmp, 0o777)
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no unused temporary name", os.fspath(path.parent))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    ``suffix`` defaults to the target's suffix so that libraries which infer the
    format from the extension (matplotlib, numpy) keep working.
    """
    path = Path(path)
    suffix = suffix if suffix is not None else "".join(path.suffixes)
    with storage_errors(path, any_oserror=True):
        if path.is_dir():  # found before the writer computes its output, not when renaming onto the folder
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        _make_parent(path)
        _remove_stale_temporaries(path, suffix)
        tmp_path = _create_temporary(path, suffix)
    try:
        yield tmp_path
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        err = storage_error(exc, path)  # the writer's own errors (reading an input) are not the output's
        if err is not None:
            raise err from exc
        raise
    try:
        with storage_errors(path, any_oserror=True):
            os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; it replaces ``path`` on success.

    For writers that fill a directory (``save_pretrained``): a killed or failed
    write leaves no partial model where a finished one is expected.
    """
    path = Path(path)
    with storage_errors(path, any_oserror=True):
        _make_parent(path)
        _remove_stale_temporaries(path, "")
        tmp = _create_temporary(path, "", directory=True)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        err = storage_error(exc, path)
        if err is not None:
            raise err from exc
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
    return [rec for _, rec in read_jsonl_lines(path)]


def _unreadable(path: Path, exc: OSError | UnicodeDecodeError, what: str) -> InputError:
    """The one-line :class:`InputError` for a JSON(L) file that cannot be read as UTF-8 text: a directory
    or another encoding (UTF-16, Latin-1) named, with the line of the first byte that is not UTF-8."""
    if isinstance(exc, IsADirectoryError):
        return InputError(f"{path}: is a directory, expected {what}")
    if isinstance(exc, OSError):
        return InputError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})")
    with open(path, "rb") as fh:  # the decoder saw a chunk, not the file: find the byte in the file
        data = fh.read()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return InputError(f"{path}: is UTF-16 text, expected {what} in UTF-8; convert the file to UTF-8")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as whole:
        return invalid_utf8(path, data, whole)
    return InputError(f"{path}: not UTF-8 text ({exc.reason})")


def invalid_utf8(path: str | os.PathLike, data: bytes, exc: UnicodeDecodeError) -> InputError:
    """The one-line error for a file whose bytes ``data`` are not UTF-8: the line and byte offset of the
    first bad byte (``exc`` from decoding the whole of ``data``)."""
    line = data.count(b"\n", 0, exc.start) + 1
    return InputError(f"{path}, line {line}: invalid UTF-8 at byte offset {exc.start} "
                      f"(byte 0x{data[exc.start]:02x}); convert the file to UTF-8")


def read_jsonl_lines(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """``(line number, record)`` of a JSONL file (blank lines skipped), for errors naming the line."""
    path = Path(path)
    out = []
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as exc:
        raise _unreadable(path, exc, "a JSONL file") from None
    with fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}, line {lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise InputError(f"{path}, line {lineno}: expected a JSON object")
                out.append((lineno, rec))
        except UnicodeDecodeError as exc:
            raise _unreadable(path, exc, "a JSONL file") from None
    return out


class _RepeatedKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def read_json(path: str | os.PathLike, *, unique_keys: bool = False) -> Any:
    """A JSON file; every problem one InputError naming the file (and the line and column of a syntax error).
    ``unique_keys``: a key given twice in one object is an error too (``json`` keeps the last value unsaid), for
    a user's file where each key means something (a scripted server's prompts)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_unique_keys if unique_keys else None)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _unreadable(path, exc, "a JSON file") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}, line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})") from None
    except _RepeatedKey as exc:
        raise InputError(f"{path}: {json.dumps(exc.args[0], ensure_ascii=False)} is given twice in one object; JSON "
                         f"would keep only the last value: remove or rename one") from None


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame atomically (no index)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


# The columns of the project's tables that hold identifiers (of documents, passages, items, books): read back
# as the text written, never as pandas' guess.
ID_COLUMNS = frozenset({"doc_id", "passage_id", "item_id", "candidate_id", "book", "book_id", "snippet_id"})


def read_csv(path: str | os.PathLike, **kwargs):
    """A table :func:`write_csv` wrote, its :data:`ID_COLUMNS` as the text in the file and every other
    column as ``pandas.read_csv`` reads it. Left to pandas, a published set's IDs ``007``, ``12`` and
    ``1.0`` came back as 7.0, 12.0 and 1.0 and ``NA`` as NaN: the named documents were renamed, and a
    join with ``documents.jsonl`` (IDs as text) matched none of them."""
    import pandas as pd

    from memaudit.config import PANDAS_NA_NAMES

    header = pd.read_csv(path, nrows=0).columns
    ids = [c for c in header if c in ID_COLUMNS]
    if not ids:
        return pd.read_csv(path, **kwargs)
    # pandas' own missing values everywhere but in the ID columns
    others = {c: sorted(PANDAS_NA_NAMES) for c in header if c not in ID_COLUMNS}
    return pd.read_csv(path, dtype=dict.fromkeys(ids, str), keep_default_na=False, na_values=others, **kwargs)


def _json_default(obj):
    # numpy scalars and arrays, Paths
    if hasattr(obj, "item") and getattr(obj, "shape", None) == ():
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def checkpoint_files(path: str | os.PathLike) -> list[str]:
    """The files of a local checkpoint (``source.path``): the file itself, or every file under the folder,
    hidden ones (a ``.git`` of a cloned model repository, caches) left out, sorted; [] where nothing is there."""
    path = Path(path)
    if path.is_file():
        return [str(path)]
    if not path.is_dir():
        return []
    return sorted(str(f) for f in path.rglob("*")
                  if f.is_file() and not any(part.startswith(".") for part in f.relative_to(path).parts))


def files_digest(files: Iterable[str | os.PathLike], root: str | os.PathLike) -> dict:
    """SHA-256 of each file (by its path relative to ``root``) and of them all together: what a checkpoint
    given by path was, byte for byte, when a run read it."""
    import hashlib

    each, whole = {}, hashlib.sha256()
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
        name = str(Path(f).relative_to(root)) if Path(f) != Path(root) else Path(f).name
        each[name] = h.hexdigest()
        whole.update(f"{name}\0{each[name]}\n".encode("utf-8"))
    return {"sha256": whole.hexdigest(), "files": each}
