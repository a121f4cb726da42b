"""A content-addressed SQLite cache of API responses, and the usage rows the cost ledger reads.

Key: the SHA-256 of the canonical JSON (sorted keys, no whitespace) of the request
-- backend, model id, revision, the exact body sent on the wire (prompt, system
prompt, decoding parameters), the seed and, for sampled requests, the sample
index (HELM's "the request's JSON is the cache key"), and what else a backend says
decides the answer (the SDKs' custom headers, as a hash). Identical requests from
any rule, any run, any process share one entry, so a rerun makes no network call.

Every response is committed the moment it arrives, so a run killed midway loses
at most the calls in flight; the rerun sends only what is missing. Many jobs may
write at once: the database runs in WAL mode (readers never block the writer)
with a busy timeout (writers queue instead of failing), and an entry is written
with ``INSERT OR IGNORE``, so two jobs that raced on the same request keep the
first answer. Only successful responses are stored: a failed request is retried
on the next run. A provider's refusal by HTTP 400 (a prompt it flagged) is an answer, stored as
``{"memaudit_refused": {"status": 400, "error": <its error object>}}``.

WAL needs every process that opens the file on one host (its index is shared
memory): jobs of a SLURM run on several nodes writing one file on NFS, Lustre or
GPFS would corrupt it. On a network file system (:func:`journal_mode_for`) the
database uses SQLite's rollback journal instead, whose file locks those systems
serve across hosts; ``MEMAUDIT_SQLITE_JOURNAL=wal`` or ``delete`` overrides the
choice.

The file lives under ``results/`` (default ``results/api/cache.sqlite``) so DVC
versions it with the results it produced. It holds request bodies and responses,
never credentials: keys travel in HTTP headers, which are not stored.

An entry whose response is not a JSON object (a row damaged outside memaudit) is
removed with a warning naming the file and key, and asked again; a file that is
not an SQLite database is an error naming it, and so, for the ledger and the cost
estimate, which only read, is a database that is no memaudit cache (it is left as it was).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from memaudit.errors import ConfigError, InputError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_CHUNK = 500  # keys per SELECT ... IN (...), well under SQLite's bound-parameter limit

_DDL = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model_id TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    requested_at TEXT NOT NULL,
    completed_at TEXT NOT NULL,
    seconds REAL NOT NULL,
    attempts INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    run_id TEXT NOT NULL,
    rule TEXT,
    model TEXT NOT NULL,
    backend TEXT NOT NULL,
    model_id TEXT NOT NULL,
    key TEXT NOT NULL,
    from_cache INTEGER NOT NULL,
    status TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd REAL,
    provider_cached_tokens INTEGER NOT NULL DEFAULT 0,
    provider_cache_write_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_RESPONSE_COLUMNS = ("key", "backend", "model_id", "request", "response", "input_tokens", "output_tokens",
                     "requested_at", "completed_at", "seconds", "attempts")
# a usage row's columns as every insert writes them (not the id SQLite gives it)
_USAGE_COLUMNS_ORDERED = ("at", "run_id", "rule", "model", "backend", "model_id", "key", "from_cache", "status",
                          "input_tokens", "output_tokens", "cost_usd", "provider_cached_tokens",
                          "provider_cache_write_tokens")


def canonical_json(obj) -> str:
    """The one serialisation keys are computed from: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def request_key(request: dict) -> str:
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


def utc_now() -> str:
    """UTC wall time in ISO 8601 with milliseconds, e.g. ``2025-01-31T12:00:00.123Z``."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@dataclass(frozen=True)
class CachedResponse:
    key: str
    response: dict
    input_tokens: int
    output_tokens: int
    requested_at: str
    attempts: int


@dataclass(frozen=True)
class UsageRow:
    """One served result for the cost ledger (cached ones cost nothing: ``cost_usd`` 0)."""

    run_id: str
    rule: str | None
    model: str
    backend: str
    model_id: str
    key: str
    from_cache: bool
    status: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    # of input_tokens, those the provider served from its own prompt cache (priced at its discount)
    provider_cached_tokens: int = 0
    # of input_tokens, those written to the provider's prompt cache (priced above the input price)
    provider_cache_write_tokens: int = 0

    def as_tuple(self, at: str) -> tuple:
        return (at, self.run_id, self.rule, self.model, self.backend, self.model_id, self.key,
                int(self.from_cache), self.status, self.input_tokens, self.output_tokens, self.cost_usd,
                self.provider_cached_tokens, self.provider_cache_write_tokens)


# the usage columns of every cache memaudit wrote (later ones are added on opening: see ResponseCache)
_USAGE_COLUMNS = frozenset({"id", "at", "run_id", "rule", "model", "backend", "model_id", "key", "from_cache",
                            "status", "input_tokens", "output_tokens", "cost_usd"})
_USAGE_INSERT = (f"INSERT INTO usage ({', '.join(_USAGE_COLUMNS_ORDERED)}) "
                 f"VALUES ({','.join('?' * len(_USAGE_COLUMNS_ORDERED))})")


# File systems whose files processes on several hosts open at once (the kernel's names, as
# /proc/self/mountinfo gives them): SQLite's WAL index cannot be shared there.
NETWORK_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "glusterfs", "fuse.glusterfs", "ceph",
    "fuse.ceph", "fuse.ceph-fuse", "9p", "panfs", "wekafs", "afs", "fuse.sshfs", "fuse.s3fs", "virtiofs",
})
JOURNAL_ENV = "MEMAUDIT_SQLITE_JOURNAL"


def file_system_type(path: str | Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system holding ``path`` (the longest mount point above it in
    ``/proc/self/mountinfo``); ``None`` where that cannot be read (not Linux)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    target = Path(path).resolve()
    best, best_type = -1, None
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        fields, tail = fields.split(), tail.split()
        if len(fields) < 5 or not tail:
            continue
        # octal escapes for space, tab, newline and backslash in mount points
        point = Path(fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
                     .replace("\\134", "\\"))
        if (target == point or point in target.parents) and len(point.parts) > best:
            best, best_type = len(point.parts), tail[0]
    return best_type


def journal_mode_for(path: str | Path) -> str:
    """``WAL`` for a database on a local disk, ``DELETE`` (the rollback journal) on a network file
    system (:data:`NETWORK_FILE_SYSTEMS`) or where ``MEMAUDIT_SQLITE_JOURNAL=delete``."""
    forced = os.environ.get(JOURNAL_ENV, "").strip().lower()
    if forced:
        if forced not in ("wal", "delete"):
            raise ConfigError(f"environment variable {JOURNAL_ENV}: {forced!r} is neither 'wal' nor 'delete'")
        return forced.upper()
    return "DELETE" if file_system_type(Path(path).parent) in NETWORK_FILE_SYSTEMS else "WAL"


class ResponseCache:
    """The response cache and usage log in one SQLite file; safe across threads and processes.

    ``existing=True`` (the ledger's and the cost estimate's) opens only a cache memaudit wrote: a file that
    is not one (another SQLite database, an empty file) is an error naming it, not a file turned into a cache.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 120.0, existing: bool = False):
        self.path = Path(path)
        try:
            if not existing:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():  # sqlite3 says only "unable to open database file"
                raise IsADirectoryError(errno.EISDIR, "a directory", str(self.path))
            if existing and not self.path.exists():
                raise FileNotFoundError(errno.ENOENT, "no such file", str(self.path))
            wanted = journal_mode_for(self.path)
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            # One connection shared by the backend's threads behind a lock: SQLite
            # serialises writers anyway, and the lock keeps transactions from interleaving.
            # mode=rw: an existing cache is opened, never created
            self._conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=rw" if existing else self.path,
                                         uri=existing, timeout=busy_timeout, check_same_thread=False,
                                         isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            reason = str(exc)
            if isinstance(exc, OSError) and exc.strerror:  # mkdir's: where, if not at the cache itself
                at = exc.filename if exc.filename and str(exc.filename) != str(self.path) else None
                reason = exc.strerror + (f" at {at}" if at else "")
            raise InputError(f"{self.path}: cannot open the response cache ({reason}): name a file, not a "
                             f"directory, in a directory this user can write") from None
        self._lock = threading.Lock()
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # checked before anything is written (the journal mode is written into the file's header)
            if existing and not _USAGE_COLUMNS <= {row[1] for row in self._conn.execute("PRAGMA table_info(usage)")}:
                self._conn.close()
                raise InputError(f"{self.path}: not an API response cache (it has no memaudit usage table); name "
                                 f"the cache a run wrote (api.cache, by default results/api/cache.sqlite)")
            (current,) = self._conn.execute("PRAGMA journal_mode").fetchone()
            current = str(current).upper()
            if existing:
                # a reader (the ledger, the cost estimate) leaves the mode as the writers set it: the mode is
                # written into the file, and a shell whose detection (or MEMAUDIT_SQLITE_JOURNAL) differed from
                # the jobs' switched every writer's connection (WAL on a file that jobs on other hosts share)
                self.journal_mode = current
            elif wanted == "WAL" and current != "WAL" and not fresh and not os.environ.get(JOURNAL_ENV, "").strip():
                # nor is a cache in the rollback journal switched to WAL by a process that finds its disk local
                # (a login node exporting results/ to the compute nodes over NFS): only MEMAUDIT_SQLITE_JOURNAL=wal
                self.journal_mode = current
                log.info("%s: SQLite journal mode %s kept (a run on a network file system set it); "
                         "%s=wal switches it to WAL where every job runs on this host", self.path, current, JOURNAL_ENV)
            else:
                (mode,) = self._conn.execute(f"PRAGMA journal_mode = {wanted}").fetchone()
                self.journal_mode = str(mode).upper()
                if self.journal_mode != wanted:  # another process holds it open in the other mode
                    log.warning("%s: SQLite journal mode %s, not %s (another process has the file open)",
                                self.path, self.journal_mode, wanted)
            # NORMAL in WAL mode: a killed process loses nothing committed; only a power
            # cut may lose the last commits, which the next run then simply repeats. The
            # rollback journal needs FULL for the same.
            self._conn.execute(f"PRAGMA synchronous = {'NORMAL' if self.journal_mode == 'WAL' else 'FULL'}")
            self._conn.execute("BEGIN IMMEDIATE")
            for stmt in filter(str.strip, _DDL.split(";")):
                self._conn.execute(stmt)
            # a cache written before the provider's prompt-cache counts were recorded: its rows count none
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(usage)")}
            for column in ("provider_cached_tokens", "provider_cache_write_tokens"):
                if column not in columns:
                    self._conn.execute(f"ALTER TABLE usage ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise InputError(f"{self.path}: not a usable response cache ({exc}); restore it (dvc checkout) "
                             f"or move it aside to start an empty one") from None

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "ResponseCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        """The cached responses among ``keys`` (missing and unreadable ones are absent from the result)."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, CachedResponse] = {}
        unreadable: list[str] = []
        with self._lock:
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i:i + _CHUNK]
                rows = self._conn.execute(
                    "SELECT key, response, input_tokens, output_tokens, requested_at, attempts FROM responses "
                    f"WHERE key IN ({','.join('?' * len(chunk))})", chunk).fetchall()
                for key, response, n_in, n_out, requested_at, attempts in rows:
                    try:
                        data = json.loads(response)
                    except (TypeError, ValueError) as exc:
                        data = exc
                    if isinstance(data, dict):
                        out[key] = CachedResponse(key, data, n_in, n_out, requested_at, attempts)
                    else:
                        unreadable.append(key)
                        what = data if isinstance(data, Exception) else "not a JSON object"
                        log.warning("%s: cache entry %s is unreadable (%s); asking again", self.path, key, what)
        self.discard(unreadable)
        return out

    def discard(self, keys: Sequence[str]) -> None:
        """Remove entries (unreadable ones), so that the answer asked again is stored in their place."""
        if not keys:
            return
        with self._lock:
            self._conn.executemany("DELETE FROM responses WHERE key = ?", [(k,) for k in keys])

    def contains_many(self, keys: Iterable[str]) -> set[str]:
        keys = list(dict.fromkeys(keys))
        found: set[str] = set()
        with self._lock:
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i:i + _CHUNK]
                found.update(k for (k,) in self._conn.execute(
                    f"SELECT key FROM responses WHERE key IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def put(self, *, key: str, backend: str, model_id: str, request: dict, response: dict, input_tokens: int,
            output_tokens: int, requested_at: str, seconds: float, attempts: int,
            usage: UsageRow | None = None) -> None:
        """Store one response (and its usage row) in one transaction, committed before returning."""
        now = utc_now()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT OR IGNORE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (key, backend, model_id, canonical_json(request), json.dumps(response, ensure_ascii=False),
                     int(input_tokens), int(output_tokens), requested_at, now, float(seconds), int(attempts)))
                if usage is not None:
                    self._conn.execute(_USAGE_INSERT, usage.as_tuple(now))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def record_usage(self, rows: Sequence[UsageRow]) -> None:
        """Append usage rows in one transaction (the cached results of one batch)."""
        if not rows:
            return
        now = utc_now()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(_USAGE_INSERT, [r.as_tuple(now) for r in rows])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def usage_rows(self) -> list[dict]:
        with self._lock:
            cur = self._conn.execute("SELECT * FROM usage ORDER BY id")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def count(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def merge_from(self, other: str | Path) -> tuple[int, int]:
        """Copy into this cache the answers of ``other`` (another cache a run wrote) it lacks, and the usage rows
        it has not recorded (a row is the same one when its time, run, request key, status and tokens are): two
        clones' caches, which DVC cannot merge (one file, one hash), become one, nothing paid twice in the
        ledger. An answer both hold is this cache's. Returns (answers added, usage rows added)."""
        other = Path(other)
        ResponseCache(other, existing=True).close()  # a cache a run wrote, or a one-line error naming it
        answers = ", ".join(_RESPONSE_COLUMNS)
        usage = ", ".join(_USAGE_COLUMNS_ORDERED)
        same = " AND ".join(f"u.{c} IS o.{c}" for c in ("at", "run_id", "key", "status", "from_cache",
                                                        "input_tokens", "output_tokens", "model"))
        with self._lock:
            # a plain path, read only by the SELECTs below: a URI is taken as one only on a connection opened with
            # uri=True (existing=True), elsewhere as a file name to create
            self._conn.execute("ATTACH DATABASE ? AS other", (str(other.absolute()),))
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                before = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
                self._conn.execute(f"INSERT OR IGNORE INTO responses ({answers}) SELECT {answers} FROM other.responses")
                added = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0] - before
                rows = self._conn.execute(
                    f"INSERT INTO usage ({usage}) SELECT {usage} FROM other.usage AS o "
                    f"WHERE NOT EXISTS (SELECT 1 FROM main.usage AS u WHERE {same})").rowcount
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            finally:
                self._conn.execute("DETACH DATABASE other")
        return added, rows


def merge_main(argv: Sequence[str] | None = None) -> int:
    """``memaudit api-cache-merge``: one clone's paid answers copied into another's cache."""
    import argparse
    import os

    p = argparse.ArgumentParser(prog="memaudit api-cache-merge",
                                description="Copy the API answers and usage rows of another run's response cache "
                                            "into this one's (two clones' caches, which DVC cannot merge).")
    p.add_argument("other", type=Path, help="the other cache (e.g. the file of the other side of a dvc.lock "
                                            "conflict, from `git show` + `dvc get`, or a co-author's clone)")
    p.add_argument("--into", default="results/api/cache.sqlite", type=Path,
                   help="the cache added to (default: results/api/cache.sqlite); then `dvc commit`")
    args = p.parse_args(argv)
    if not args.other.exists():  # said of the file named, not as the cache's own "cannot open" (it is never opened)
        raise InputError(f"{args.other}: no such file (the other clone's response cache)")
    if args.into.exists() and os.path.samefile(args.other, args.into):
        raise InputError(f"{args.other}: the cache --into names; give the other clone's")
    if not args.into.exists():
        raise InputError(f"{args.into}: no API cache yet (no API request has been made here); copy {args.other} "
                         f"there instead")
    with ResponseCache(args.into, existing=True) as cache:
        answers, rows = cache.merge_from(args.other)
        total = cache.count()
    print(f"{args.into}: {answers} answer(s) and {rows} usage row(s) added from {args.other} ({total} answers in all)")
    return 0
