"""KTD's part of the job list and its config checks (no numpy: read while Snakemake builds the DAG)."""

from __future__ import annotations

import json

from memaudit.jobs import probe_runs

# DE-COP's items hold three quality-controlled paraphrases per passage; a larger m tops them up in
# KTD's own pool file (memaudit.probes.ktd.pool).
DECOP_POOL = 3
POOL_FILE = "ktd_pool.jsonl"

# The importance scores Z of every text (memaudit.probes.ktd.runner), each with its knockoff statistic W
STATISTICS = ("gradnorm", "loss", "min_k")
Z_GRADNORM = "ktd_z_gradnorm"  # the gradient norm alone, a detector without knockoffs


def w_method(statistic: str) -> str:
    """The method name of the knockoff statistic W over one Z of :data:`STATISTICS`."""
    return f"ktd_w_{statistic}"


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: every KTD job writes each W (:func:`w_method`) and :data:`Z_GRADNORM`."""
    return [w_method(s) for s in STATISTICS] + [Z_GRADNORM]


def runs(config: dict) -> list[tuple[str, str, str]]:
    return probe_runs(config, "ktd")


def check_config(config: dict) -> list[str]:
    """KTD's config problems (dotted key: message): knockoffs need DE-COP's paraphrase pool, and
    Definition 1 forbids the model under test paraphrasing its own knockoffs."""
    from memaudit.config import is_api_model
    from memaudit.probes.registry import role_model

    probes = config.get("probes", {})
    if "ktd" not in probes:
        return []
    paraphraser = role_model(config, "decop", "paraphraser")  # None while DE-COP is off
    if "decop" not in probes or paraphraser is None:
        return ["probes.ktd: knockoffs are the paraphrases of DE-COP's pool; configure probes.decop "
                "(its paraphrase.model makes them) and a decop_<mode> block"]
    cfg = probes["ktd"]
    problems = []
    if cfg["m"] not in cfg["ms"]:
        problems.append(f"probes.ktd.m: {cfg['m']} must be one of probes.ktd.ms {cfg['ms']}")
    for i, ref in enumerate(cfg.get("reference_models", [])):
        entry = config["models"].get(ref)
        if entry is None:
            problems.append(f"probes.ktd.reference_models.{i}: {ref!r} is not a configured model")
        elif is_api_model(entry):
            problems.append(f"probes.ktd.reference_models.{i}: {ref!r} is an API model; a reference model scores "
                            f"every passage's tokens, so it must be local")
    tested = sorted({model for _, model, _ in runs(config)})
    if paraphraser in tested:
        problems.append(f"probes.ktd.models: {paraphraser!r} paraphrases the knockoffs "
                        f"(probes.decop.paraphrase.model); KTD's knockoffs must come from another model "
                        f"(Definition 1)")
    # A fine-tune of the paraphraser (or its base, a sibling, the same checkpoint under another name)
    # rates the paraphraser's own outputs as familiar text: the knockoffs are not independent of it.
    base, weights = _weights(config, paraphraser)
    for model in tested:
        if model != paraphraser and weights is not None and _weights(config, model)[1] == weights:
            problems.append(f"probes.ktd.models: {model!r} is built on the weights of {base!r}, as is "
                            f"{paraphraser!r}, which paraphrases the knockoffs (probes.decop.paraphrase.model); "
                            f"KTD's knockoffs must come from other weights than the model under test's "
                            f"(Definition 1)")
    return problems


def _weights(config: dict, model: str) -> tuple[str | None, str | None]:
    """The base model whose weights ``model`` starts from (itself for a base model), and a key equal for
    equal weights: that base's ``source`` (two names of one checkpoint share it), else its name.
    ``(None, None)`` for a model not configured."""
    entry = config["models"].get(model)
    if entry is None:
        return None, None
    base = entry.get("base", model)
    source = config["models"].get(base, {}).get("source")
    return base, json.dumps(source, sort_keys=True) if source else f"model {base}"


def reference_models(config: dict, model: str) -> list[str]:
    """The reference models of ``model``'s Table 2 reference baseline (never the model itself)."""
    return [r for r in config["probes"]["ktd"].get("reference_models", []) if r != model]


def pool_size(ktd_settings: dict) -> int:
    """Knockoffs each passage's pool must hold: KTD's largest m."""
    return int(max(ktd_settings["ms"]))


def records_file(ktd_settings: dict) -> str:
    """The record file under ``results/datasets/<benchmark>/`` KTD's probe jobs read: DE-COP's
    items, or the pool topped up beyond their three paraphrases (:mod:`memaudit.probes.ktd.pool`)."""
    return POOL_FILE if pool_size(ktd_settings) > DECOP_POOL else "decop_items.jsonl"


def outputs(config: dict) -> list[str]:
    return ["results/summary/ktd.csv", "results/summary/ktd_imbalance.csv", "results/figures/ktd/fdr_power.png",
            "results/figures/ktd/w_distributions.png", "results/figures/ktd/imbalance.png",
            "results/figures/ktd/m_and_size.png"] if runs(config) else []


def summary_inputs(config: dict) -> dict[str, list[str]]:
    done = runs(config)
    tables = {name: [f"results/scores/{b}/{m}/ktd_{name}.csv" for b, m, _ in done]
              for name in ("selection", "symmetry", "w", "imbalance")}
    # the prepared models' manifests: parameter counts for the figure against model size
    return {**tables, "models": [f"results/models/{m}" for m in sorted({m for _, m, _ in done})]}
