"""Demo assets: public-domain text shipped in Debian's R data packages.

The demo corpora (Jane Austen's novels, Moby Dick, four Gutenberg books,
Reuters-21578 articles) come from the Debian packages of the R packages
janeaustenr, tokenizers, tidytext and tm. They are fetched with
``apt-get download`` and unpacked with ``dpkg-deb -x``; R itself is never
installed (installing the packages would pull R and hundreds of dependencies).

R's lazy-load databases (``data/Rdata.rdx`` + ``Rdata.rdb``) and ``.rda`` files
are read with the pure-Python ``rdata`` package.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

from memaudit.errors import AssetError
from memaudit.io import read_json, write_json

__all__ = ["DEMO_PACKAGES", "fetch_demo_assets", "package_dir", "read_lazyload", "read_rda"]

DEMO_PACKAGES = ("r-cran-janeaustenr", "r-cran-tidytext", "r-cran-tokenizers", "r-cran-tm")

# apt-get messages that mean the package lists are missing or out of date
# (a fresh container has none; a stale list points at a superseded version).
_STALE_LIST_MARKERS = (
    "Unable to locate package",
    "has no installation candidate",
    "Can't select candidate version",
    "404",
    "Failed to fetch",
)
_SITE_LIBRARY = Path("usr/lib/R/site-library")


def _run(cmd: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise AssetError(
            f"{cmd[0]} not found: the demo assets are Debian packages and need apt-get and "
            "dpkg-deb (a Debian or Ubuntu machine or container)"
        ) from None


def _download(pkg: str, debs: Path, state: dict, log: Callable[[str], Any]) -> Path:
    """``apt-get download pkg`` into ``debs``; refresh the package lists once if needed."""
    before = set(debs.glob(f"{pkg}_*.deb"))
    proc = _run(["apt-get", "download", pkg], cwd=debs)
    if proc.returncode != 0 and not state["updated"] \
            and any(marker in proc.stderr for marker in _STALE_LIST_MARKERS):
        log(f"apt-get download {pkg} failed; refreshing package lists (apt-get update)")
        state["updated"] = True
        update = _run(["apt-get", "update"])
        if update.returncode != 0:
            raise AssetError(
                f"cannot fetch {pkg}: 'apt-get update' failed (exit {update.returncode}): "
                f"{update.stderr.strip()}"
            )
        proc = _run(["apt-get", "download", pkg], cwd=debs)
    if proc.returncode != 0:
        raise AssetError(
            f"cannot fetch {pkg}: 'apt-get download {pkg}' failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()}"
        )
    found = sorted(set(debs.glob(f"{pkg}_*.deb")) - before) or sorted(debs.glob(f"{pkg}_*.deb"))
    if not found:
        raise AssetError(f"cannot fetch {pkg}: apt-get download reported success but left no "
                         f"{pkg}_*.deb in {debs}")
    return found[-1]


def _deb_version(deb: Path) -> str | None:
    proc = _run(["dpkg-deb", "-f", str(deb), "Version"])
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def fetch_demo_assets(
    dest: str | os.PathLike,
    packages: Sequence[str] = DEMO_PACKAGES,
    log: Callable[[str], Any] = print,
    require_tools: bool = False,
) -> Path:
    """Download and unpack the demo Debian packages under ``dest``; return ``dest``.

    Layout: ``dest/debs/<pkg>_<version>_<arch>.deb``, ``dest/extracted/<pkg>/usr/...``
    and ``dest/.fetched`` (JSON: package -> {"deb": filename, "version": ...}).
    Idempotent: a package whose ``extracted/<pkg>`` exists is skipped. Each
    package is unpacked into a temporary directory that is renamed into place,
    so an interrupted run never leaves a half-extracted package behind. When
    ``apt-get download`` fails because the package lists are missing or stale,
    ``apt-get update`` runs once and the download is retried.

    Without ``apt-get`` or ``dpkg-deb`` (a RHEL-like cluster node, macOS), the packages not yet here
    are recorded as not fetched and a warning logged, unless ``require_tools``: a workflow whose
    benchmarks are the user's own books, articles or published files reads none of them and must
    not fail for a tool it never needs; a demo source that does need one fails when it is loaded
    (:func:`package_dir`, naming the package and the remedy). ``memaudit fetch-assets`` (``make
    assets``) asks for the packages by name and sets ``require_tools``.

    Raises :class:`AssetError` naming the package and the command's stderr.
    """
    dest = Path(dest)
    debs, extracted = dest / "debs", dest / "extracted"
    try:
        debs.mkdir(parents=True, exist_ok=True)
        extracted.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission: one line, not a traceback
        blocker = next((p for p in (debs, dest, *dest.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is not a folder" if blocker else exc.strerror or type(exc).__name__
        raise AssetError(f"{dest}: cannot make the folder ({why})") from None
    stamp = dest / ".fetched"
    try:
        previous = read_json(stamp) if stamp.exists() else {}
    except Exception:  # an unreadable stamp is rebuilt, not fatal
        previous = {}
    record: dict[str, dict[str, str | None]] = {}
    state = {"updated": False}
    wanted = [pkg for pkg in packages if not (extracted / pkg).is_dir()]
    absent = [tool for tool in ("apt-get", "dpkg-deb") if wanted and shutil.which(tool) is None]
    if absent and not require_tools:
        log(f"warning: {' and '.join(absent)} not found, so the demo packages {', '.join(wanted)} are not "
            "fetched: the demo sources that read them fail when loaded (run `memaudit fetch-assets` on a "
            "Debian or Ubuntu machine); benchmarks of your own books, articles or published files need none")
        for pkg in wanted:
            record[pkg] = {"deb": None, "version": None, "not_fetched": f"{' and '.join(absent)} not found"}
        packages = [pkg for pkg in packages if pkg not in wanted]
    for pkg in packages:
        target = extracted / pkg
        if target.is_dir():
            if isinstance(previous.get(pkg), dict):
                record[pkg] = previous[pkg]
            else:
                existing = sorted(debs.glob(f"{pkg}_*.deb"))
                record[pkg] = {"deb": existing[-1].name if existing else None,
                               "version": _deb_version(existing[-1]) if existing else None}
            continue
        log(f"fetching {pkg}")
        for stale in extracted.glob(f".{pkg}.*"):  # left by a killed earlier run
            shutil.rmtree(stale, ignore_errors=True)
        deb = _download(pkg, debs, state, log)
        tmp = Path(tempfile.mkdtemp(prefix=f".{pkg}.", dir=extracted))
        try:
            proc = _run(["dpkg-deb", "-x", str(deb), str(tmp)])
            if proc.returncode != 0:
                raise AssetError(f"cannot unpack {pkg} ({deb.name}): 'dpkg-deb -x' failed "
                                 f"(exit {proc.returncode}): {proc.stderr.strip()}")
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        record[pkg] = {"deb": deb.name, "version": _deb_version(deb)}
        log(f"unpacked {deb.name} into {target}")
    # Rewrite the stamp only when it changes: its mtime is what Snakemake compares,
    # and a fresh mtime would make every dataset (and everything after) stale.
    if record != previous:
        write_json(stamp, record)
    return dest


def package_dir(assets_dir: str | os.PathLike, pkg: str) -> Path:
    """``assets_dir/extracted/<pkg>``; :class:`AssetError` with the fix when missing."""
    path = Path(assets_dir) / "extracted" / pkg
    if not path.is_dir():
        # make assets fetches into resources/demo only: the remedy for another assets_dir is the command
        default = Path(assets_dir) == Path("resources/demo")
        tools = [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]
        where = f" on a Debian or Ubuntu machine ({' and '.join(tools)} not found here)" if tools else ""
        raise AssetError(
            f"demo asset {pkg} not found at {path}; run `memaudit fetch-assets --dest "
            f"{assets_dir}`{' (or `make assets`)' if default else ''}{where} first"
        )
    return path


def _r_package_root(pkg_dir: Path) -> Path:
    """The R package folder inside an unpacked Debian package (r-cran-foo -> .../foo)."""
    site = pkg_dir / _SITE_LIBRARY
    guess = site / pkg_dir.name.removeprefix("r-cran-")
    if guess.is_dir():
        return guess
    found = sorted(p for p in site.glob("*") if p.is_dir()) if site.is_dir() else []
    if len(found) != 1:
        raise AssetError(f"{site}: expected exactly one R package folder, found "
                         f"{[p.name for p in found]}")
    return found[0]


def _parse_r(data: bytes, what: str) -> Any:
    """R serialisation bytes -> Python objects (rdata parse + convert)."""
    import rdata  # imported lazily: only asset readers need it

    try:
        with warnings.catch_warnings():
            # rdata warns about R classes it maps to a parent (tbl_df -> data.frame)
            # and about headerless serialisations; both are expected here.
            warnings.simplefilter("ignore")
            return rdata.conversion.convert(rdata.parser.parse_data(data))
    except Exception as exc:
        raise AssetError(f"{what}: cannot parse R data ({type(exc).__name__}: {exc})") from None


def read_lazyload(pkg_dir: str | os.PathLike, name: str) -> Any:
    """Read object ``name`` from an R package's lazy-load database.

    ``<pkg_dir>/usr/lib/R/site-library/<pkg>/data/Rdata.rdx`` is a gzip-compressed
    R serialisation of a list whose ``variables`` maps each object name to an
    ``(offset, length)`` pair in ``Rdata.rdb``; each ``.rdb`` entry is a 4-byte
    big-endian uncompressed length followed by a zlib stream holding the
    object's serialisation. A character vector comes back as a numpy array of
    ``str``; a data frame as a pandas DataFrame.

    Raises :class:`AssetError` naming the file when it is missing or corrupt,
    or naming the object and the available ones when it is not there.
    """
    data_dir = _r_package_root(Path(pkg_dir)) / "data"
    rdx, rdb = data_dir / "Rdata.rdx", data_dir / "Rdata.rdb"
    for f in (rdx, rdb):
        if not f.is_file():
            raise AssetError(f"{f}: lazy-load database file missing")
    try:
        index = _parse_r(gzip.decompress(rdx.read_bytes()), str(rdx))
    except (OSError, EOFError, zlib.error) as exc:
        raise AssetError(f"{rdx}: corrupt lazy-load index ({exc})") from None
    variables = index.get("variables") if isinstance(index, dict) else None
    if not isinstance(variables, dict):
        raise AssetError(f"{rdx}: no 'variables' table in the lazy-load index")
    if name not in variables:
        raise AssetError(f"{rdx}: no object {name!r} (has: {', '.join(sorted(map(str, variables)))})")
    offset, length = (int(v) for v in variables[name])
    with open(rdb, "rb") as fh:
        fh.seek(offset)
        entry = fh.read(length)
    if len(entry) != length or length <= 4:
        raise AssetError(f"{rdb}: truncated entry for {name!r} at offset {offset}")
    try:
        payload = zlib.decompress(entry[4:])
    except zlib.error as exc:
        raise AssetError(f"{rdb}: corrupt entry for {name!r} at offset {offset} ({exc})") from None
    expected = int.from_bytes(entry[:4], "big")
    if len(payload) != expected:
        raise AssetError(f"{rdb}: entry for {name!r} has {len(payload)} bytes, header says {expected}")
    return _parse_r(payload, f"{rdb}[{name}]")


def read_rda(path: str | os.PathLike) -> dict[str, Any]:
    """Read an ``.rda``/``.RData`` file into ``{object name: converted object}``.

    ``rdata`` detects the compression (gzip, bzip2 or xz; tidytext's
    ``extdata/books.rda`` is gzip). Raises :class:`AssetError` naming the file
    when it is missing or unreadable.
    """
    import rdata

    path = Path(path)
    if not path.is_file():
        raise AssetError(f"{path}: R data file missing")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(rdata.read_rda(path))
    except Exception as exc:
        raise AssetError(f"{path}: cannot read R data ({type(exc).__name__}: {exc})") from None
