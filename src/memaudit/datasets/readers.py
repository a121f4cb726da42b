"""Readers of the files a user's books and papers come in: UTF-8 text, epub and PDF.

Each reads only the file it is given; a file that cannot be read, or has no
text left after :func:`~memaudit.datasets.text.clean_text`, raises
:class:`~memaudit.errors.InputError` naming it.
"""

from __future__ import annotations

import html.parser
import posixpath
import re
import zipfile
from pathlib import Path
from urllib.parse import unquote
from xml.etree import ElementTree

from memaudit.datasets.text import clean_text
from memaudit.errors import InputError
from memaudit.io import invalid_utf8

__all__ = ["epub_metadata", "first_nul", "pdf_metadata", "read_epub", "read_pdf", "read_text_file", "refuse_nul"]


def first_nul(text: str) -> tuple[int, int, int] | None:
    """``(line, column, how many)`` of the first NUL in ``text`` (1-based; lines split at ``\\n``), or None."""
    nul = text.find("\x00")
    if nul < 0:
        return None
    return text.count("\n", 0, nul) + 1, nul - text.rfind("\n", 0, nul), text.count("\x00")


def refuse_nul(where: str, text: str, what: str, remedy: str = "") -> None:
    """An :class:`InputError` naming the line and column (1-based) of the first NUL in ``text``, if any:
    a user's book is never changed without a word, and a NUL is no text (in a "UTF-8" file, most
    often UTF-16 without its byte-order mark, every other byte NUL)."""
    found = first_nul(text)
    if found is None:
        return
    line, column, count = found
    raise InputError(f"{where}, line {line}, column {column}: a NUL character ({count} in the {what}){remedy}")


def read_text_file(path: str | Path, allow_empty: bool = False) -> str:
    """Read a strictly UTF-8 text file (a leading BOM is allowed).

    Line endings become ``\\n``. Raises :class:`InputError` naming the file and the byte offset
    when it is not UTF-8, the line and column of a NUL character (:func:`refuse_nul`), and the
    file when nothing is left after :func:`clean_text` (unless ``allow_empty``: then "").
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:  # the line as well: a byte offset alone is hard to find in an editor
        raise invalid_utf8(path, data, exc) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    refuse_nul(str(path), text, "file", "; a book is read as UTF-8 text: is it UTF-16 or a binary file? "
                                        "convert it to UTF-8")
    if not clean_text(text):
        if allow_empty:
            return ""
        raise InputError(f"{path}: no text left after cleaning (empty file?)")
    return text


_BLOCK_TAGS = {
    "p", "div", "br", "li", "ul", "ol", "blockquote", "pre", "tr", "table", "section",
    "article", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "dd", "dt", "figure", "header",
    "footer", "aside", "nav",
}
_SKIP_TAGS = {"head", "script", "style", "title", "svg"}


class _XHTMLText(html.parser.HTMLParser):
    """Collect text, one paragraph per block element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._buf: list[str] = []
        self._skip = 0

    def _flush(self) -> None:
        para = " ".join("".join(self._buf).split())
        if para:
            self.paragraphs.append(para)
        self._buf = []

    def handle_starttag(self, tag, attrs):
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_startendtag(self, tag, attrs):
        if tag in _BLOCK_TAGS:
            self._flush()

    def handle_endtag(self, tag):
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data):
        if not self._skip:
            self._buf.append(data)

    def close(self):
        super().close()
        self._flush()


_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}


def _epub_package(path: Path) -> tuple[zipfile.ZipFile, str, ElementTree.Element]:
    """Open an epub; return the zip, the OPF path inside it and the parsed OPF."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: not a valid epub (not a zip archive: {exc})") from None
    try:
        container = ElementTree.fromstring(zf.read("META-INF/container.xml"))
        rootfile = container.find(".//c:rootfile", _NS)
        if rootfile is None or not rootfile.get("full-path"):
            raise InputError(f"{path}: not a valid epub (container.xml names no rootfile)")
        opf_path = rootfile.get("full-path")
        opf = ElementTree.fromstring(zf.read(opf_path))
    except KeyError as exc:
        zf.close()
        raise InputError(f"{path}: not a valid epub (missing {exc.args[0]})") from None
    except ElementTree.ParseError as exc:
        zf.close()
        raise InputError(f"{path}: not a valid epub (malformed XML: {exc})") from None
    except zipfile.BadZipFile as exc:
        zf.close()
        raise InputError(f"{path}: not a valid epub (corrupt archive: {exc})") from None
    except InputError:
        zf.close()
        raise
    return zf, opf_path, opf


def epub_metadata(path: str | Path) -> dict[str, str]:
    """``title`` and ``author`` (first dc:title / dc:creator) of an epub, where present."""
    path = Path(path)
    zf, _, opf = _epub_package(path)
    zf.close()
    out = {}
    for key, tag in (("title", "dc:title"), ("author", "dc:creator")):
        el = opf.find(f".//{tag}", _NS)
        if el is not None and el.text and el.text.strip():
            out[key] = " ".join(el.text.split())
    return out


# The encoding an XHTML document declares: its XML declaration, else a <meta charset> (or http-equiv) near the top
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?([A-Za-z0-9._:-]+)""", re.IGNORECASE)


def _decode_xhtml(path: Path, member: str, raw: bytes) -> str:
    """An epub member's text in the encoding it declares (UTF-8 without a declaration; a UTF-8 BOM
    wins); bytes that encoding cannot decode are an :class:`InputError` naming the file, the member
    and the byte offset, as :func:`read_text_file` names them (they were replaced without a word), and
    so is a NUL, by line and column (:func:`refuse_nul`)."""
    if raw.startswith(b"\xef\xbb\xbf"):
        encoding, raw = "utf-8", raw[3:]
    else:
        declared = _XML_ENCODING.match(raw) or _META_CHARSET.search(raw, 0, 4096)
        encoding = declared.group(1).decode("ascii") if declared else "utf-8"
    try:
        text = raw.decode(encoding)
    except LookupError:
        raise InputError(f"{path}: {member} declares the encoding {encoding!r}, which Python does not know") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: {member} is not valid {encoding} at byte offset {exc.start} "
                         f"(byte 0x{raw[exc.start]:02x})") from None
    refuse_nul(f"{path}: {member}", text.replace("\r\n", "\n").replace("\r", "\n"), "document")
    return text


def read_epub(path: str | Path) -> str:
    """Plain text of an epub in spine (reading) order.

    ``META-INF/container.xml`` names the OPF package file; its spine lists the
    XHTML documents in order; each is converted with :mod:`html.parser`, one
    paragraph per block element, paragraphs separated by blank lines; each is decoded in the
    encoding it declares (XML declaration or ``<meta charset>``; UTF-8 without one). Raises
    :class:`InputError` naming the file when it is not a readable epub, and the member too when
    its bytes are not in its encoding.
    """
    path = Path(path)
    zf, opf_path, opf = _epub_package(path)
    with zf:
        base = posixpath.dirname(opf_path)
        manifest = {
            item.get("id"): item.get("href")
            for item in opf.findall(".//opf:manifest/opf:item", _NS)
        }
        spine = [ref.get("idref") for ref in opf.findall(".//opf:spine/opf:itemref", _NS)]
        if not spine:
            raise InputError(f"{path}: not a valid epub (empty spine in {opf_path})")
        chunks = []
        for idref in spine:
            href = manifest.get(idref)
            if href is None:
                raise InputError(f"{path}: not a valid epub (spine item {idref!r} not in manifest)")
            member = posixpath.normpath(posixpath.join(base, unquote(href.split("#")[0])))
            try:
                raw = zf.read(member)
            except KeyError:
                raise InputError(f"{path}: not a valid epub (missing {member})") from None
            except zipfile.BadZipFile as exc:
                raise InputError(f"{path}: not a valid epub (corrupt {member}: {exc})") from None
            parser = _XHTMLText()
            parser.feed(_decode_xhtml(path, member, raw))
            parser.close()
            if parser.paragraphs:
                chunks.append("\n\n".join(parser.paragraphs))
    text = "\n\n".join(chunks)
    if not clean_text(text):
        raise InputError(f"{path}: no text in the epub's spine documents")
    return text


def read_pdf(path: str | Path) -> str:
    """A PDF's text layer as prose: pypdf's pages in order (the one PDF reader,
    :func:`memaudit.datasets.articles.read_pdf_text`, which re-joins words hyphenated across lines), the
    lines of a paragraph joined (a paragraph ends at a blank line of the text layer), then :func:`clean_text`.
    A broken, encrypted or scanned (text-less) PDF raises :class:`InputError` naming the file and why."""
    from memaudit.datasets.articles import read_pdf_text
    from memaudit.datasets.rejects import RowReject

    try:
        text = read_pdf_text(path)
    except RowReject as exc:
        raise InputError(f"{path}: {exc.reason}") from None
    # cleaned first: a line of spaces (pypdf's blank line between paragraphs) is a blank line, not two line breaks
    text = clean_text(re.sub(r"(?<!\n)\n(?!\n)", " ", clean_text(text)))
    if not text:
        raise InputError(f"{path}: no text left after cleaning its text layer")
    return text


def pdf_metadata(path: str | Path) -> dict[str, str]:
    """``title`` and ``author`` from a PDF's document information, where it has them (read after
    :func:`read_pdf` has accepted the file)."""
    from pypdf import PdfReader

    try:
        info = PdfReader(str(path)).metadata or {}
    except Exception:  # noqa: BLE001 - metadata is optional; read_pdf has already judged the file
        return {}
    out = {}
    for key, field in (("title", "/Title"), ("author", "/Author")):
        value = clean_text(str(info.get(field) or ""))
        if value:
            out[key] = value
    return out
