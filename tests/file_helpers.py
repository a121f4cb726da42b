"""Small file helpers shared by the loader tests."""

from __future__ import annotations

from pathlib import Path


def write_file(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (UTF-8) or raw bytes to ``path``, making its folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path
