"""The prefix probe's method names and config checks (no numpy or pandas: read by every config check,
``memaudit check-config`` and while Snakemake builds the DAG)."""

from __future__ import annotations

METHODS = ("prefix_rougeL", "prefix_lcs_words")


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: every prefix job writes :data:`METHODS`."""
    return list(METHODS)


def check_config(config: dict) -> list[str]:
    """The prefix probe's config problems: a per-benchmark ``instruction`` names configured benchmarks."""
    from memaudit.config import per_benchmark_problems

    return per_benchmark_problems(config, "prefix", "instruction")
