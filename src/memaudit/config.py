"""Configuration: schema validation with defaults, cross-key checks and per-entry lookups.

The schema lives in ``workflow/schemas/config.schema.yaml``; the Snakefile
validates against it with ``snakemake.utils.validate`` and then calls
:func:`check_config` for the checks a JSON schema cannot express (references
between entries). Every error names the offending key as a dotted path.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Sequence

import yaml

from memaudit.errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"

# Backends served over an API (no local weights); every other model is a local Hugging Face one.
API_BACKENDS = ("openai", "anthropic")

BUILTIN_SOURCES = ("austen", "mobydick", "tidytext", "reuters", "user_books", "pydoc_topics", "demo_qa")


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _validator_with_defaults(schema: dict):
    import jsonschema

    base = jsonschema.Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})(schema)


def key_path(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def validate_config(config: dict, schema: dict | None = None, *,
                    checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    """Validate ``config`` against the schema, fill defaults, run cross-key checks.

    ``checks`` add problems this module cannot see (which probe a backend serves, API
    settings): :func:`memaudit.jobs.validate_config` passes them. Returns a new, completed
    config. Raises :class:`ConfigError` naming every bad key.
    """
    config = copy.deepcopy(config)
    validator = _validator_with_defaults(schema or load_schema())
    # Defaults are filled during the first pass; a second pass reports errors on
    # the completed document so nested defaults are validated too.
    list(validator.iter_errors(config))
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"config key {key_path(e.absolute_path)}: {e.message}" for e in errors[:10]]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    return check_config(config, checks=checks)


def is_api_model(entry: dict) -> bool:
    """Whether a configured model is served by an API (no local weights, no prepared model directory).

    The one test for it; :mod:`memaudit.backends` re-exports it.
    """
    return entry.get("backend", "hf") in API_BACKENDS


# DE-COP's published formats (memaudit.datasets.published): BookTection/arXivTection also from the Hub
DECOP_FORMATS = ("booktection", "arxivtection", "bookmia")
# published formats whose unusable rows are skipped and listed (memaudit.datasets.rejects): all of them
REJECTS_FORMATS = ("nyt", "articles", "qa", "wikimia", "member_texts", "copybench", *DECOP_FORMATS)


def is_labelled(bench: dict) -> bool:
    """Whether a benchmark has members and non-members: every one but CopyBench's published files
    without a ``labels`` file (its books carry no membership labels; :mod:`memaudit.datasets.copybench_published`)."""
    published = bench.get("published") or {}
    return not (published.get("format") == "copybench" and not published.get("labels"))


def _cloze_published_problems(name: str, published: dict) -> list[str]:
    """The keys of the published formats read under the rejects policy (nyt, articles, qa for the
    information-guided probes; wikimia, member_texts for KTD and the other detectors)."""
    from memaudit.datasets.articles import parse_date

    where, fmt = f"benchmarks.{name}.published", published["format"]
    problems = []
    if fmt in REJECTS_FORMATS and fmt not in DECOP_FORMATS:  # DE-COP's: see check_config
        if not published.get("path"):
            problems.append(f"{where}.path: the {fmt} set is read from a local "
                            f"{'folder' if fmt in ('articles', 'copybench') else 'file'} (there is no download)")
        if published.get("hf"):
            problems.append(f"{where}.hf: the {fmt} set is read from a local path only; download it and give 'path'")
    if fmt == "articles" and published.get("cutoff") is None:
        problems.append(f"{where}.cutoff: required with format articles (YYYY-MM-DD; earlier articles are members)")
    elif published.get("cutoff") is not None:
        if fmt != "articles":
            problems.append(f"{where}.cutoff: only format articles is labelled by a date cutoff")
        else:
            try:
                parse_date(published["cutoff"])
            except ValueError as exc:
                problems.append(f"{where}.cutoff: {exc}")
    if "member_fraction" in published and fmt != "qa":
        problems.append(f"{where}.member_fraction: only format qa is split by memaudit "
                        f"(the other formats carry labels)")
    if "strict" in published and fmt not in REJECTS_FORMATS:
        problems.append(f"{where}.strict: only formats {', '.join(REJECTS_FORMATS)} skip unusable rows")
    if "text_key" in published and fmt != "member_texts":
        problems.append(f"{where}.text_key: only format member_texts names its text field")
    if "labels" in published and fmt != "copybench":
        problems.append(f"{where}.labels: only format copybench takes its labels from a title,label file "
                        f"(the others carry theirs)")
    return problems


def _unlabelled_problems(config: dict) -> list[str]:
    """An unlabelled benchmark (published CopyBench without labels) has no members to fine-tune on and no
    non-members to score against: CopyBench's rates are all it can give (which probes may run on one:
    :func:`memaudit.probes.registry.check_capabilities`)."""
    unlabelled = {name for name, bench in config["benchmarks"].items() if not is_labelled(bench)}
    problems = []
    for model, entry in config["models"].items():
        for i, b in enumerate((entry.get("finetune") or {}).get("members_of") or []):
            if b in unlabelled:
                problems.append(f"models.{model}.finetune.members_of.{i}: benchmark {b!r} is unlabelled "
                                f"(published CopyBench without published.labels): it has no members to fine-tune on")
    return problems


def _demo_qa_overlaps(config: dict) -> list[str]:
    """demo_qa quotes sentences of its from_source (Reuters): a model contaminated on a benchmark of
    those articles has seen questions of both halves of a demo_qa benchmark."""
    benchmarks = config["benchmarks"]
    quoted = {name: bench.get("source_options", {}).get("demo_qa", {}).get("from_source", "reuters")
              for name, bench in benchmarks.items() if "demo_qa" in bench.get("sources", [])}
    problems = []
    for model, entry in config["models"].items():
        members_of = (entry.get("finetune") or {}).get("members_of") or []
        for qa in (b for b in members_of if b in quoted):
            for other in members_of:
                if quoted[qa] in benchmarks.get(other, {}).get("sources", []):
                    problems.append(f"models.{model}.finetune.members_of: {qa!r} (demo_qa) quotes the {quoted[qa]} "
                                    f"articles of {other!r}; a model contaminated on both has seen clean questions")
    return problems


def check_config(config: dict, *, checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    """Checks across entries: references between models, benchmarks and sources, plus ``checks``."""
    problems: list[str] = []
    benchmarks = config["benchmarks"]
    models = config["models"]
    for name, bench in benchmarks.items():
        if ("sources" in bench) == ("published" in bench):
            problems.append(f"benchmarks.{name}: give exactly one of 'sources' (documents to build it from) "
                            f"or 'published' (BookTection, arXivTection, BookMIA, nyt, articles or qa data)")
        published = bench.get("published") or {}
        if published and published["format"] == "bookmia" and not published.get("path"):
            problems.append(f"benchmarks.{name}.published.path: BookMIA is read from a local JSONL file")
        if published:
            problems += _cloze_published_problems(name, published)
        for i, src in enumerate(bench.get("sources", [])):
            if src not in BUILTIN_SOURCES:
                problems.append(f"benchmarks.{name}.sources.{i}: unknown source {src!r} "
                                f"(known: {', '.join(BUILTIN_SOURCES)})")
    problems += _demo_qa_overlaps(config)
    problems += _unlabelled_problems(config)
    pretrain_sources = set(config.get("pretrain", {}).get("sources", []))
    for src in sorted(pretrain_sources):
        if src not in BUILTIN_SOURCES:
            problems.append(f"pretrain.sources: unknown source {src!r}")
        used = [b for b, v in benchmarks.items() if src in v.get("sources", [])]
        if used:
            problems.append(f"pretrain.sources: {src!r} is also a source of benchmark(s) "
                            f"{', '.join(used)}; the pretraining pool must be disjoint")
    for name, entry in models.items():
        where = f"models.{name}"
        if is_api_model(entry):
            continue  # an API model: no local weights; checked by check_api_models
        has_source, has_base = "source" in entry, "base" in entry
        if has_source == has_base:
            problems.append(f"{where}: give exactly one of 'source' (a base model) or "
                            f"'base' + 'finetune' (a fine-tuned model)")
        if has_source:
            kinds = [k for k in ("builtin", "path", "hub_id", "tiny_gpt2") if k in entry["source"]]
            if len(kinds) != 1:
                problems.append(f"{where}.source: give exactly one of builtin, path, hub_id, "
                                f"tiny_gpt2 (got {kinds or 'none'})")
            if "hub_id" in entry["source"] and "revision" not in entry["source"]:
                problems.append(f"{where}.source.revision: required with hub_id (pin a commit "
                                f"so reruns load the same weights)")
            if "finetune" in entry:
                problems.append(f"{where}.finetune: needs 'base' (the model to fine-tune)")
        if has_base:
            base = entry["base"]
            if base not in models:
                problems.append(f"{where}.base: unknown model {base!r}")
            elif "base" in models[base]:
                problems.append(f"{where}.base: {base!r} is itself fine-tuned; chain from a base model")
            if "finetune" not in entry:
                problems.append(f"{where}.finetune: required with 'base'")
            else:
                for i, b in enumerate(entry["finetune"]["members_of"]):
                    if b not in benchmarks:
                        problems.append(f"{where}.finetune.members_of.{i}: unknown benchmark {b!r}")
    for check in checks:
        problems.extend(check(config))
    tp = config.get("probes", {}).get("token_prob", {})
    for i, ref in enumerate(tp.get("reference_models", [])):
        if ref not in models:
            problems.append(f"probes.token_prob.reference_models.{i}: unknown model {ref!r}")
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


def load_config(path: str | Path, *, checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return validate_config(raw, checks=checks)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def base_model_of(config: dict, model: str) -> str:
    """The base model a model derives from (itself for a base model)."""
    return config["models"][model].get("base", model)


def contaminated_on(model_entry: dict) -> list[str]:
    """Benchmarks whose members this model was fine-tuned on (empty for base models)."""
    return list(model_entry.get("finetune", {}).get("members_of", []))


# Keys of a model entry that do not decide what a job computes, kept out of the params of the
# jobs they do not concern (Snakemake reruns a job whose params text changes):
# how many GPUs a job claims is scheduling, never a result;
EXECUTION_KEYS = ("gpus",)
# how the prepared model is scored (passage truncation, forward batch) does not change its weights.
SCORING_KEYS = ("max_tokens", "batch_size")


def model_build_settings(entry: dict) -> dict:
    """The part of a model entry that decides its prepared weights (``prepare_model``'s params).

    Changing ``max_tokens``, ``batch_size`` or ``gpus`` then re-scores the model without
    re-training or re-converting it.
    """
    return {k: v for k, v in entry.items() if k not in SCORING_KEYS + EXECUTION_KEYS}


def model_scoring_settings(entry: dict) -> dict:
    """The part of a model entry a probing job's results depend on (everything but scheduling)."""
    return {k: v for k, v in entry.items() if k not in EXECUTION_KEYS}
