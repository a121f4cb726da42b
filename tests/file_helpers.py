"""Small file helpers shared by the loader tests."""

from __future__ import annotations

from pathlib import Path


def write_file(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (UTF-8) or raw bytes to ``path``, making its folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def run_cases(check, name: str) -> int:
    """Run ``check``, a hypothesis ``@given`` test taking no fixtures, print how many cases ran
    (``pytest -s`` shows it) and return that count."""
    ran = 0
    inner = check.hypothesis.inner_test

    def counted(*args, **kwargs):
        nonlocal ran
        ran += 1
        return inner(*args, **kwargs)

    check.hypothesis.inner_test = counted
    check()
    print(f"{name}: {ran} cases ran")
    return ran
