"""token_prob's method naming and config checks (no numpy or pandas: read by every config check,
``memaudit check-config`` and while Snakemake builds the DAG)."""

from __future__ import annotations

from typing import Sequence

# the methods of probes.token_prob.methods that take no argument; min_k and min_k_plus_plus take each
# ratio of min_k_ratios, reference each reference model
PLAIN = ("loss", "zlib", "lowercase")
PER_RATIO = ("min_k", "min_k_plus_plus")


def pct_name(k: float) -> str:
    """A Min-K% ratio's part of its methods' names (``0.2`` -> ``20pct``, ``0.055`` -> ``5p5pct``):
    6 significant digits of the percentage."""
    pct = k * 100
    return f"{pct:g}pct".replace(".", "p")


def method_specs(methods: Sequence[str], min_k_ratios: Sequence[float], reference_models: Sequence[str],
                 model: str) -> list[tuple[str, float | str | None]]:
    """``(method, argument)`` of each score the configured ``methods`` give ``model``, in order: a Min-K%
    method once per ratio, ``reference`` once per reference model other than ``model`` (a model is
    never its own reference), the others with argument ``None``. An unknown method is a ValueError."""
    out: list[tuple[str, float | str | None]] = []
    for m in methods:
        if m in PLAIN:
            out.append((m, None))
        elif m in PER_RATIO:
            out.extend((m, k) for k in min_k_ratios)
        elif m == "reference":
            out.extend((m, r) for r in reference_models if r != model)
        else:
            raise ValueError(f"unknown token-probability method {m!r}")
    return out


def method_name(method: str, argument: float | str | None = None) -> str:
    """The name a score is written under: ``loss``, ``min_k_20pct`` (:func:`pct_name`), ``ref_<model>``."""
    if method in PER_RATIO:
        return f"{method}_{pct_name(argument)}"
    if method == "reference":
        return f"ref_{argument}"
    return method


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: the names of :func:`method_specs` for the models of ``runs``
    (``(benchmark, model, mode)``), each with its references (:func:`memaudit.jobs.reference_models`)."""
    cfg = config["probes"]["token_prob"]
    return list(dict.fromkeys(method_name(*spec) for _, model, _ in runs
                              for spec in method_specs(cfg["methods"], cfg["min_k_ratios"], cfg["reference_models"],
                                                       model)))


def check_config(config: dict) -> list[str]:
    """token_prob's config problems (dotted key: message): two Min-K% ratios whose names round alike
    (:func:`pct_name`: 6 significant digits of the percentage) would give two methods one name, and
    one's scores would overwrite the other's in every table after them. (A ratio listed twice is the
    schema's problem: ``uniqueItems``.) ``methods`` that give a model the probe runs on no score (only
    ``reference``, and no reference model but itself) stopped its job after its forward pass."""
    from memaudit.probes.registry import probe_runs_on, probe_selects

    cfg = config["probes"]["token_prob"]
    # a key left out is the schema's default (a config checked before Snakemake fills them in): every method,
    # loss among them, so no model is scoreless; no method at all is the schema's problem (minItems)
    methods, ratios, references = cfg.get("methods"), cfg.get("min_k_ratios") or [], cfg.get("reference_models") or []
    scoreless = [m for m, entry in sorted(config["models"].items())
                 if methods and probe_selects(config, "token_prob", m) and probe_runs_on("token_prob", entry)
                 and not method_specs(methods, ratios or [0.5], references, m)]
    problems = []
    if scoreless:
        names = ", ".join(scoreless)
        problems.append(f"probes.token_prob.methods: {methods!r} give {names} no score: reference compares "
                        f"a model with each of probes.token_prob.reference_models ({references!r}) "
                        f"but itself; add another method or reference model, or leave {names} out of "
                        f"probes.token_prob.models")
    first: dict[str, float] = {}
    for i, k in enumerate(ratios):
        pct = pct_name(k)
        if pct in first and first[pct] != k:
            problems.append(f"probes.token_prob.min_k_ratios.{i}: {k!r} and {first[pct]!r} both name the methods "
                            f"min_k_{pct} and min_k_plus_plus_{pct}, so one's scores would overwrite the other's: "
                            f"drop one, or make them differ within 6 significant digits of the percentage")
        else:
            first.setdefault(pct, k)
    return problems
