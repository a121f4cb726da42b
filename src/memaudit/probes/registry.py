"""Probes by name: what each reads and which backend capabilities it needs.

A probe reads one record type from ``results/datasets/<benchmark>/`` and writes
per-document scores to ``results/scores/<benchmark>/<model>/<probe>_documents.csv``
(columns doc_id, label, method, score), which the statistics stage consumes for
every probe alike. Adding a probe is a module, an entry here and a rule file.
"""

from __future__ import annotations

from dataclasses import dataclass

from memaudit.backends.base import (API_BACKENDS, GENERATE, OPTION_LOGPROBS, TOKEN_LOGPROBS, check_probe_support,
                                    model_capabilities)


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    needs: frozenset[str]
    reads: str  # record type: passages, multiple_choice, prefix_continuation, cloze, knockoffs
    description: str


PROBES: dict[str, ProbeSpec] = {
    "token_prob": ProbeSpec(
        "token_prob", frozenset({TOKEN_LOGPROBS}), "passages",
        "loss, zlib, lowercase, Min-K%, Min-K%++ and reference-model scores from token log-probabilities",
    ),
    "prefix": ProbeSpec(
        "prefix", frozenset({GENERATE}), "prefix_continuation",
        "prefix probing: ROUGE-L recall and longest shared word run of a generated continuation",
    ),
    # DE-COP (memaudit.decop): one entry per mode, each with its own models list; shared
    # settings (lengths, orderings, paraphrasing, calibration) live in probes.decop.
    "decop_logit": ProbeSpec(
        "decop_logit", frozenset({OPTION_LOGPROBS}), "multiple_choice",
        "DE-COP, open models: teacher-forced option-letter probabilities, with and without calibration",
    ),
    "decop_blackbox": ProbeSpec(
        "decop_blackbox", frozenset({GENERATE}), "multiple_choice",
        "DE-COP, text-only models: the answer letter parsed from the reply",
    ),
    "decop_likelihood": ProbeSpec(
        "decop_likelihood", frozenset({TOKEN_LOGPROBS}), "multiple_choice",
        "DE-COP, base models: the option with the highest length-normalised log-likelihood",
    ),
}


def enabled_probes(config: dict) -> list[str]:
    return [name for name in PROBES if name in config.get("probes", {})]


def probe_runs_on(probe: str, entry: dict) -> bool:
    """Whether a model entry can serve a probe (white-box probes skip black-box API models)."""
    return PROBES[probe].needs <= model_capabilities(entry)


def probe_selects(config: dict, probe: str, model: str) -> bool:
    """Whether the probe's optional ``models`` list (default: every model) includes ``model``."""
    chosen = config["probes"][probe].get("models")
    return chosen is None or model in chosen


def probe_covers(config: dict, probe: str, benchmark: str | None) -> bool:
    """Whether the probe's optional ``benchmarks`` list (default: every benchmark) includes ``benchmark``."""
    chosen = config["probes"][probe].get("benchmarks")
    return benchmark is None or chosen is None or benchmark in chosen


def probes_for_model(config: dict, model: str, benchmark: str | None = None) -> list[str]:
    entry = config["models"][model]
    return [p for p in enabled_probes(config) if probe_selects(config, p, model) and probe_runs_on(p, entry)
            and probe_covers(config, p, benchmark)]


def check_capabilities(config: dict) -> list[str]:
    """Problems (dotted key: message) for probes configured on models that cannot serve them."""
    from memaudit.errors import ConfigError

    problems = []
    for probe in enabled_probes(config):
        for i, model in enumerate(config["probes"][probe].get("models") or []):
            if model not in config["models"]:
                problems.append(f"probes.{probe}.models.{i}: unknown model {model!r}")
        for i, benchmark in enumerate(config["probes"][probe].get("benchmarks") or []):
            if benchmark not in config.get("benchmarks", {}):
                problems.append(f"probes.{probe}.benchmarks.{i}: unknown benchmark {benchmark!r}")
    for model, entry in config["models"].items():
        for probe in enabled_probes(config):
            if not probe_selects(config, probe, model):
                continue
            if (entry.get("backend", "hf") in API_BACKENDS and not probe_runs_on(probe, entry)
                    and config["probes"][probe].get("models") is None):
                continue  # black-box models are simply not scored by white-box probes (unless named)
            try:
                check_probe_support(probe, set(PROBES[probe].needs), model, entry.get("backend", "hf"))
            except ConfigError as exc:
                problems.append(f"models.{model}.backend: {exc}")
    return problems
