"""Every name a benchmark imports from memaudit exists: the scripts import inside ``main()``, so a
module renamed in the package (``memaudit.models.smollm2`` became ``memaudit.models.builtin``)
broke ``make bench`` without any test noticing."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def memaudit_imports(path: Path) -> list[tuple[int, str, str | None]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "memaudit":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "memaudit"]
    return out


def test_the_benchmarks_import_memaudit():
    assert len(BENCHMARKS) >= 10
    assert sum(len(memaudit_imports(p)) for p in BENCHMARKS) > 30


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_each_name_a_benchmark_imports_from_memaudit_exists(path):
    missing = []
    for line, module, name in memaudit_imports(path):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            missing.append(f"{path.name}:{line}: {module} ({err})")
            continue
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, missing
