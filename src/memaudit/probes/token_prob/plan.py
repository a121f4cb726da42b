"""token_prob's method naming and config checks (no numpy or pandas: read by every config check,
``memaudit check-config`` and while Snakemake builds the DAG)."""

from __future__ import annotations


def pct_name(k: float) -> str:
    """A Min-K% ratio's part of its methods' names (``0.2`` -> ``20pct``, ``0.055`` -> ``5p5pct``):
    6 significant digits of the percentage."""
    pct = k * 100
    return f"{pct:g}pct".replace(".", "p")


def check_config(config: dict) -> list[str]:
    """token_prob's config problems (dotted key: message): two Min-K% ratios whose names round alike
    (:func:`pct_name`: 6 significant digits of the percentage) would give two methods one name, and
    one's scores would overwrite the other's in every table after them. (A ratio listed twice is the
    schema's problem: ``uniqueItems``.)"""
    first: dict[str, float] = {}
    problems = []
    for i, k in enumerate(config["probes"]["token_prob"]["min_k_ratios"]):
        pct = pct_name(k)
        if pct in first and first[pct] != k:
            problems.append(f"probes.token_prob.min_k_ratios.{i}: {k!r} and {first[pct]!r} both name the methods "
                            f"min_k_{pct} and min_k_plus_plus_{pct}, so one's scores would overwrite the other's: "
                            f"drop one, or make them differ within 6 significant digits of the percentage")
        else:
            first.setdefault(pct, k)
    return problems
