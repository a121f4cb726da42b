"""Configuration: schema validation with defaults, cross-key checks and per-entry lookups.

The schema lives in ``workflow/schemas/config.schema.yaml``; the Snakefile validates
against it here (:func:`check_workflow_config`, not ``snakemake.utils.validate``, whose
messages quote the offending config section: a pasted API key with it) together with the
checks a JSON schema cannot express (references between entries). Every problem is one
line, ``config key <dotted.key>: <what is wrong>``, all of them at once, no value shown
that could be a secret (:mod:`memaudit.secrets`).
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import re
from pathlib import Path
from typing import Callable, Sequence

import yaml

from memaudit.errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"

# Backends served over an API (no local weights); every other model is a local Hugging Face one.
API_BACKENDS = ("openai", "anthropic")

BUILTIN_SOURCES = ("austen", "mobydick", "tidytext", "reuters", "user_books", "pydoc_topics", "demo_qa")


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The config schema, a fresh copy (callers may change theirs). The file is parsed once per version
    of it: a config check reads it more than once (the validator, the schema defaults of
    :mod:`memaudit.backends.settings` and :func:`memaudit.jobs.method_list_default`), and each parse
    costs a tenth of ``memaudit check-config``'s time."""
    stat = Path(path).stat()
    return copy.deepcopy(_parsed_schema(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _parsed_schema(path: str, mtime_ns: int, size: int) -> dict:
    # libyaml's parser where PyYAML has it (its wheels do): the same document in a tenth of the time
    # (0.21 s against 0.02 s for this schema), paid by every snakemake start, dry run included
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


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

    # an integer is an int: JSON Schema counts 2.0 as one, and the value reached the jobs as a float
    # (passages_per_document: 2.0 stopped the dataset job at a list slice, seed: 7.0 numpy's generator)
    integers = base.TYPE_CHECKER.redefine(
        "integer", lambda checker, instance: isinstance(instance, int) and not isinstance(instance, bool))
    return jsonschema.validators.extend(base, {"properties": set_defaults}, type_checker=integers)(schema)


def key_path(path) -> str:
    from memaudit.secrets import safe_key

    return ".".join(safe_key(p) for p in path) or "<top level>"


_TYPE_WORDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}


def _secret_path(path) -> bool:
    """Whether values at ``path`` may be secrets: anything in an ``api`` block or under a key-ish name.
    A probe's name is fixed by the schema, never a secret's (``probes.token_prob`` holds no token)."""
    from memaudit.secrets import keyish_name

    path = tuple(path)
    return any(p == "api" or (keyish_name(p) and path[:i] != ("probes",)) for i, p in enumerate(path))


def _describe(value, path) -> str:
    """A value as an error message may show it: short scalars outside API blocks, else only its kind."""
    from memaudit.secrets import high_entropy, looks_like_credential

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    secret = _secret_path(path)
    if isinstance(value, (int, float)):
        return "a number" if secret else f"the number {value!r}"
    text = str(value)
    if secret or looks_like_credential(text) or high_entropy(text) or len(text) > 60 or "\n" in text:
        return "a string (the value is not shown)"
    return f"the string {text!r}"


_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def _kinds(schema: dict) -> str:
    """What a subschema accepts, in words (``an integer``, ``'tune'``)."""
    if "enum" in schema:
        return " or ".join(repr(v) for v in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    types = schema.get("type")
    if types is None:
        return "a value of another form"
    words = [_TYPE_WORDS.get(t, t) for t in ([types] if isinstance(types, str) else types)]
    text = " or ".join(words)
    for bound, sign in _BOUNDS.items():
        if bound in schema:
            text += f" {sign} {schema[bound]}"
    return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _closest(value: str, choices: Sequence) -> str | None:
    """The choice ``value`` is a likely typo of (case aside: ``HF`` is ``hf``), or None: one edit away, a
    transposition counting as one (``openia``), two from 8 characters. Not difflib's ratio: ``float64`` and
    ``float16`` share enough to score 0.86, but one is no misspelling of the other."""
    from nltk.metrics.distance import edit_distance  # imported only when a value is wrong (nltk is slow to import)

    most = 1 if len(value) < 8 else 2
    distances = [(edit_distance(value.lower(), str(c).lower(), transpositions=True), i) for i, c in enumerate(choices)]
    distance, i = min(distances, default=(most + 1, -1))
    return choices[i] if distance <= most else None


def _closest_first(value: str, choices: Sequence) -> list:
    """``choices`` with the one closest to ``value`` (:func:`_closest`) first: a typo's fix leads the list."""
    best = _closest(value, choices)
    return list(choices) if best is None else [best, *(c for c in choices if c != best)]


def _did_you_mean(value: str, choices: Sequence) -> str:
    best = _closest(value, choices)
    return "" if best is None else f"; did you mean {best!r}?"


def schema_problems(error) -> list[str]:
    """One ``dotted.key: what is wrong`` line per problem a jsonschema error reports.

    The messages are memaudit's, not jsonschema's: those quote the offending value (a
    pasted key, or a whole mapping), these show a value only where :func:`_describe` allows.
    """

    path = list(error.absolute_path)
    value, rule, expected = error.instance, error.validator, error.validator_value
    where = key_path(path)
    if "propertyNames" in error.absolute_schema_path:
        # the instance is the offending name itself, reported at its parent
        return [f"{key_path([*path, value])}: the name must match {expected}"]
    if rule == "additionalProperties" and isinstance(value, dict):
        allowed = sorted(error.schema.get("properties", {}))
        lines = []
        for extra in value:
            if extra in allowed or any(re.search(p, str(extra)) for p in error.schema.get("patternProperties", {})):
                continue
            close = difflib.get_close_matches(str(extra), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = f"(known here: {', '.join(allowed)})" if allowed else "(none is allowed here)"
            lines.append(f"{key_path([*path, extra])}: unknown key{hint} {known}")
        return lines
    if rule == "required":
        return [f"{key_path([*path, name])}: missing (required)" for name in expected
                if isinstance(value, dict) and name not in value]
    if rule == "type":
        return [f"{where}: must be {_kinds({'type': expected})}, not {_describe(value, path)}"]
    if rule == "enum" and isinstance(value, str):
        return [f"{where}: must be {_kinds({rule: _closest_first(value, expected)})}, not {_describe(value, path)}"
                + _did_you_mean(value, expected)]
    if rule in ("enum", "const"):
        return [f"{where}: must be {_kinds({rule: expected})}, not {_describe(value, path)}"]
    if rule in ("oneOf", "anyOf"):
        return [f"{where}: must be {' or '.join(_kinds(s) for s in expected)}, not {_describe(value, path)}"]
    if rule in _BOUNDS:
        return [f"{where}: must be {_BOUNDS[rule]} {expected}, not {_describe(value, path)}"]
    if rule == "minItems":
        return [f"{where}: must list at least {_plural(expected, 'item')}"]
    if rule == "maxItems":
        return [f"{where}: must list at most {_plural(expected, 'item')}"]
    if rule == "uniqueItems":
        return [f"{where}: must not list an item twice"]
    if rule == "minLength":
        return [f"{where}: must not be empty" if expected == 1 else
                f"{where}: must have at least {_plural(expected, 'character')}"]
    if rule == "minProperties":
        return [f"{where}: must not be empty" if expected == 1 else
                f"{where}: must have at least {_plural(expected, 'key')}"]
    if rule == "pattern":
        return [f"{where}: must match {expected}, not {_describe(value, path)}"]
    return [f"{where}: does not satisfy the schema's {rule!r} rule (see config/README.md)"]


def config_problem_lines(problems: Sequence[str]) -> list[str]:
    """Each problem once, in order, as the line the user sees: ``config key <dotted.key>: <what is wrong>``.
    A check that quotes a name (a model's, a list entry) could quote a pasted key: none is shown."""
    from memaudit.secrets import redact

    return ["config key " + p for p in dict.fromkeys(redact(p) for p in problems)]


def _raise_problems(problems: Sequence[str]) -> None:
    if problems:
        raise ConfigError("\n".join(config_problem_lines(problems)))


def validate_config(config: dict, schema: dict | None = None, *,
                    checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    """Validate ``config`` against the schema, fill defaults, run cross-key checks.

    ``checks`` add problems this module cannot see (which probe a backend serves, API
    settings): :func:`memaudit.jobs.validate_config` passes them. Returns a new, completed
    config. Raises :class:`ConfigError` listing every problem, one ``config key <dotted.key>: …``
    line each: credentials first (:mod:`memaudit.secrets`; never a value), then the schema's
    (values shown only where :func:`_describe` allows), then the cross-key checks that can run.
    """
    from memaudit.secrets import credential_problems

    if not isinstance(config, dict):
        raise ConfigError(f"config key <top level>: must be a mapping, not {_describe(config, ())}")
    # every check below reads keys as text (a benchmark named 2024 stopped them with a TypeError), and a
    # NaN passes every bound of the schema (each comparison with it is false) to stop a job hours later
    _raise_problems(_keys_not_text(config) + _not_a_number(config) + _script_ends(config))
    problems = [f"{key_path(path)}: {message}" for path, message in credential_problems(config)]
    schema = schema or load_schema()
    problems += _source_keys_on_published(config, schema)
    problems += _split_keys_beside_labels(config, schema)
    problems += _model_keys_nothing_reads(config, schema)
    config = copy.deepcopy(config)
    validator = _validator_with_defaults(schema)
    # Defaults are filled during the first pass; a second pass reports errors on
    # the completed document so nested defaults are validated too.
    list(validator.iter_errors(config))
    errors = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    for error in errors:
        if error.validator == "enum" and tuple(error.absolute_path) in mistyped:
            continue  # `backend: 3`: the type's line says it; the choices' would be a second about one value
        problems += schema_problems(error)
    cross = _cross_key_problems(config, checks, guarded=bool(errors))
    misshapen = [tuple(e.absolute_path) for e in errors if e.validator in ("type", "oneOf", "anyOf")]
    # a model whose backend is none of the backends: the checks would read its entry as a local model's (no
    # source, an api block only API backends take), lines about a typo in one word (`backend: openia`)
    misshapen += [path[:2] for path in map(tuple, (e.absolute_path for e in errors))
                  if len(path) == 3 and path[0] == "models" and path[2] == "backend"]
    problems += _beside_misshapen(cross, misshapen)
    _raise_problems(problems)
    return config


def _keys_not_text(node, path: tuple = ()) -> list[str]:
    """A line for every mapping key under ``node`` that YAML read as no string: an unquoted ``2024:`` (a
    number), ``yes:``/``on:`` (YAML 1.1's booleans) or ``~:``. The schema's name patterns skip such keys,
    and the checks that compare names with text would raise on them."""
    problems = []
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                if len(path) == 1 and path[0] in _ENTRY_BLOCKS and isinstance(key, (int, float)) \
                        and not isinstance(key, bool):
                    # quoted, the name would still be refused: pandas reads it back as a number
                    problems.append(f"{key_path(path + (key,))}: YAML reads this name as the number {key!r}, and "
                                    f"the results tables would too: give the {path[0][:-1]} a name with a letter")
                    continue
                if isinstance(key, bool):
                    read = f"the boolean {str(key).lower()} (unquoted yes, no, on, off, true or false)"
                elif isinstance(key, (int, float)):
                    read = f"the number {key!r}"
                else:
                    read = "null" if key is None else repr(key)
                problems.append(f"{key_path(path + (key,))}: a key must be text, and YAML reads this one as "
                                f"{read}; put it in quotes")
            else:
                problems += _keys_not_text(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            problems += _keys_not_text(item, path + (i,))
    return problems


def _not_a_number(node, path: tuple = ()) -> list[str]:
    """A line for every NaN under ``node`` (YAML's ``.nan``): no setting takes one."""
    if isinstance(node, float) and math.isnan(node):
        return [f"{key_path(path)}: .nan (not a number) is no value a setting takes; give a number"]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [line for key, value in items for line in _not_a_number(value, path + (key,))]


def _script_ends(node, path: tuple = ()) -> list[str]:
    """A line for every text under ``node`` (a value or a key) holding ``</script`` in any case: ``snakemake
    --report`` copies each job's params into the report's HTML ``<script>`` block unescaped, so a family
    ``tiny</script><img onerror=…>`` ended the block there: the report showed no figure or table, and the rest
    of the string ran as the page's markup."""
    if isinstance(node, str):
        return ([f"{key_path(path)}: holds '</script', which would end the data block of the HTML report "
                 f"(snakemake --report copies the settings into it as they are); write it without"]
                if "</script" in node.lower() else [])
    if isinstance(node, dict):
        return [line for key, value in node.items()
                for line in _script_ends(key, path + (key,)) + _script_ends(value, path + (key,))]
    if isinstance(node, list):
        return [line for i, value in enumerate(node) for line in _script_ends(value, path + (i,))]
    return []


# Top-level blocks of named entries that the cross-key checks look names up in: one of another shape
# makes every reference to a model or benchmark look unknown.
_ENTRY_BLOCKS = ("benchmarks", "models")


def _beside_misshapen(problems: list[str], misshapen: Sequence[tuple]) -> list[str]:
    """The cross-key ``problems`` less those about a value the schema found of another shape (the paths of
    ``misshapen``), which the checks read as what it is not: a string where a list belongs, item by item
    (``models: tiny-gpt2-small`` was fifteen unknown models named ``t``, ``i``, ...), and with ``benchmarks``
    or ``models`` itself no mapping, every reference to one. The schema's line names the key to fix."""
    if any(len(path) == 1 and path[0] in _ENTRY_BLOCKS for path in misshapen):
        return []
    prefixes = [key_path(path) for path in misshapen]

    def under(problem: str) -> bool:
        key = problem.partition(": ")[0]
        return any(key == p or key.startswith(p + ".") for p in prefixes)

    return [p for p in problems if not under(p)]


# What shapes a benchmark built from sources (memaudit.datasets.build); a published benchmark's
# documents, passages and labels come as published (qa's own split keys live under published:).
SOURCE_ONLY_KEYS = ("source_options", "n_documents", "documents_per_book", "member_fraction", "split_by",
                    "near_duplicate_ngram", "passage_words", "passages_per_document", "min_passages", "labels")


def _set_here(block: dict, key: str, properties: dict) -> bool:
    """Whether ``key`` in ``block`` says something: present, and not the schema's default for it.

    A default says nothing, so the checks of keys that nothing reads in context flag only other
    values, and they hold for a config the schema has already completed (validating twice gives
    the same result): the defaults fill most of these keys into every entry.
    """
    if key not in block:
        return False
    spec = properties.get(key, {})
    return "default" not in spec or block[key] != spec["default"]


def _benchmarks_where(config: dict, schema: dict, keep: Callable[[dict], bool]) -> tuple[list[tuple[str, dict]], dict]:
    """The ``(name, entry)`` of the benchmarks ``keep`` selects (well-formed entries only: the schema's
    pass names the others), and the schema's properties of a benchmark entry."""
    benchmarks = config.get("benchmarks")
    properties = schema["properties"]["benchmarks"]["additionalProperties"]["properties"]
    if not isinstance(benchmarks, dict):
        return [], properties
    return [(n, b) for n, b in benchmarks.items() if isinstance(b, dict) and keep(b)], properties


def _source_keys_on_published(config: dict, schema: dict) -> list[str]:
    """A key that only a benchmark built from sources reads, set on a published one to a value
    other than its default (where it would be ignored without a word)."""
    selected, properties = _benchmarks_where(config, schema, lambda b: "published" in b and "sources" not in b)
    problems = []
    for name, bench in selected:
        for key in SOURCE_ONLY_KEYS:
            if _set_here(bench, key, properties):
                remedy = "remove it" + (", or set it under published: for format qa"
                                        if key in ("member_fraction", "near_duplicate_ngram") else
                                        ", or set it under published: for format copybench" if key == "labels" else "")
                problems.append(f"{key_path(('benchmarks', name, key))}: only a benchmark built from 'sources' "
                                f"reads it; a published benchmark's documents come as published ({remedy})")
    return problems


def _split_keys_beside_labels(config: dict, schema: dict) -> list[str]:
    """A random split's keys set beside a built benchmark's ``labels`` (the user's file gives the members,
    by book), to a value other than their default."""
    selected, properties = _benchmarks_where(config, schema, lambda b: "published" not in b and bool(b.get("labels")))
    problems = []
    for name, bench in selected:
        # the user's labels are the split: by book, whatever member_fraction would draw
        if _set_here(bench, "member_fraction", properties):
            problems.append(f"{key_path(('benchmarks', name, 'member_fraction'))}: the labels file "
                            f"({bench['labels']}) gives the members; remove member_fraction")
        if bench.get("split_by") == "document":
            problems.append(f"{key_path(('benchmarks', name, 'split_by'))}: labels are given per book, so the "
                            f"split is by book; remove split_by or set it to book")
    return problems


# What only a model with local weights reads (memaudit.backends.resolve, memaudit.devices); an API
# model's entry holding one would have it ignored. (source, base and finetune: backends.config_checks.)
LOCAL_ONLY_MODEL_KEYS = ("dtype", "device", "gpus", "mem_mb", "runtime", "max_tokens", "batch_size",
                         "context_token")
# What only LoRA fine-tuning reads (memaudit.models.finetune); under method full it would be ignored.
LORA_ONLY_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "target_modules", "lora_layers")


def _model_keys_nothing_reads(config: dict, schema: dict) -> list[str]:
    """A model key that nothing reads for that model, set to a value other than its default: a
    local-model setting on an API model, a LoRA setting on a model fine-tuned fully, a context token
    on a fine-tuned model (it trains and scores with its base's)."""
    models = config.get("models")
    if not isinstance(models, dict):
        return []
    properties = schema["properties"]["models"]["additionalProperties"]["properties"]
    problems = []
    for name, entry in models.items():
        if not isinstance(entry, dict):
            continue
        if is_api_model(entry):
            for key in LOCAL_ONLY_MODEL_KEYS:
                if _set_here(entry, key, properties):
                    problems.append(f"{key_path(('models', name, key))}: only a local model reads it; backend "
                                    f"{entry['backend']!r} runs on the provider's machines (remove it)")
        elif "base" in entry and "context_token" in entry:
            problems.append(f"{key_path(('models', name, 'context_token'))}: a fine-tuned model trains and scores "
                            f"with its base's context token; set it on models.{entry['base']} (remove it here)")
        finetune = entry.get("finetune")
        if isinstance(finetune, dict) and finetune.get("method") == "full":
            for key in LORA_ONLY_KEYS:
                if _set_here(finetune, key, properties["finetune"]["properties"]):
                    problems.append(f"{key_path(('models', name, 'finetune', key))}: only method lora reads it; "
                                    f"this model is fine-tuned fully (method: full; remove it)")
    return problems


def is_api_model(entry: dict) -> bool:
    """Whether a configured model is served by an API (no local weights, no prepared model directory).

    The one test for it; :mod:`memaudit.backends` re-exports it.
    """
    return entry.get("backend", "hf") in API_BACKENDS


# DE-COP's published formats (memaudit.datasets.published): BookTection/arXivTection also from the Hub
DECOP_FORMATS = ("booktection", "arxivtection", "bookmia")
# published formats whose unusable rows are skipped and listed (memaudit.datasets.rejects): all of them
FOLDER_FORMATS = ("articles", "copybench")  # published formats whose path is a folder; the others read a file
REJECTS_FORMATS = ("nyt", "articles", "qa", "wikimia", "member_texts", "copybench", *DECOP_FORMATS)


def for_benchmark(value, benchmark: str | None, default=None):
    """A setting given once for every benchmark, or per benchmark: a mapping of benchmark names (and
    ``default``) to values, where the schema allows one (DE-COP's ``calibration_documents``, the prefix
    probe's ``instruction``). ``benchmark`` None or absent from the mapping: its ``default``, else
    ``default``."""
    if isinstance(value, dict):
        fallback = value.get("default", default)
        return fallback if benchmark is None else value.get(benchmark, fallback)
    return default if value is None else value


def per_benchmark_problems(config: dict, probe: str, key: str) -> list[str]:
    """``probes.<probe>.<key>`` given per benchmark names configured benchmarks (or ``default``) only."""
    value = config.get("probes", {}).get(probe, {}).get(key)
    if not isinstance(value, dict):
        return []
    known = sorted(config.get("benchmarks", {}))
    return [f"probes.{probe}.{key}.{name}: not a configured benchmark (benchmarks: {', '.join(known)}; "
            f"or `default`)" for name in value if name != "default" and name not in known]


def is_labelled(bench: dict) -> bool:
    """Whether a benchmark has members and non-members: every one but CopyBench's published files
    without a ``labels`` file (its books carry no membership labels; :mod:`memaudit.datasets.copybench_published`)."""
    published = bench.get("published") or {}
    return not (published.get("format") == "copybench" and not published.get("labels"))


# What label 1 means in each published format: a claim about the world (a date, a court exhibit, a
# file's say-so), not a split memaudit drew, so an unmodified model may well separate the labels.
PUBLISHED_LABELS = {
    "booktection": "BookTection's Label (1 = a book the models may have seen, 0 = published after their cutoff)",
    "arxivtection": "arXivTection's Label (1 = a paper the models may have seen, 0 = published after their "
                    "cutoff)",
    "bookmia": "BookMIA's label (1 = a book the authors judge the models saw, 0 = published in 2023)",
    "nyt": "the NYT set's label (1 = an article of Exhibit J, 0 = a later article of another outlet)",
    "articles": "the articles' dates (1 = dated before {cutoff}, 0 = on or after it)",
    "wikimia": "WikiMIA's label (1 = a Wikipedia event before 2017, 0 = an event after 2023)",
    "member_texts": "the file's label column (1 = member)",
    "copybench": "the labels file {labels} (1 = a member book)",
}


def labels_per_book(cfg: dict) -> bool:
    """Whether a benchmark's labels are given per book, so that a book's documents are one draw for the
    statistics (:func:`memaudit.stats.metrics.label_groups` then checks each book has one label): a split
    by book, the user's ``labels``, or a published set's labels. Never an IID split of documents, where
    the chapters a sample happens to draw from one book may share a label by chance."""
    return bool(cfg.get("published") or cfg.get("labels") or cfg.get("split_by", "document") == "book")


def label_provenance(cfg: dict, seed: int) -> dict:
    """Where a benchmark's member/non-member labels come from (``labels``, a sentence), and whether its
    base models are null controls (``null_control``).

    A split memaudit draws at random (a built benchmark, by document or by book, or a published QA set's
    contaminated half) gives an unmodified model nothing to tell the halves apart by: its AUC sits near
    0.5 and its selections are near empty, which the headline checks. A published set's labels are a
    claim about the world (dates, a court exhibit), which an unmodified model may well reflect: there a
    base model's AUC is a finding, not a check. Contaminated models are checked on both (their members
    are what they were fine-tuned on).
    """
    published = cfg.get("published")
    if not published and cfg.get("labels"):
        return {"labels": f"given per book in {cfg['labels']} (book,label; 1 = member)", "null_control": False}
    if not published:
        # split_by: book keeps each book's documents (the demo's QA set: each article's questions) on one side
        unit = "by book" if cfg.get("split_by", "document") == "book" else "of documents"
        return {"labels": f"random split {unit} (seed {seed}, member fraction {cfg.get('member_fraction', 0.5)})",
                "null_control": True}
    fmt = published["format"]
    if fmt == "copybench" and not published.get("labels"):
        return {"labels": "none: CopyBench's published books carry no membership labels", "null_control": False}
    if fmt == "qa" and published.get("label_key"):
        return {"labels": f"published (qa): the QA set's own {published['label_key']!r} field (1 = member)",
                "null_control": False}
    if fmt == "qa":
        return {"labels": f"random split of the QA set's questions (seed {seed}, member fraction "
                          f"{published.get('member_fraction', 0.5)})", "null_control": True}
    text = PUBLISHED_LABELS.get(fmt, "the published set's labels").format(
        cutoff=published.get("cutoff"), labels=published.get("labels"))
    return {"labels": f"published ({fmt}): {text}", "null_control": False}


# the published formats read from the Hugging Face Hub when no local path is given (memaudit.datasets.published)
HUB_FORMATS = ("booktection", "arxivtection")


def _hub_key_problems(where: str, fmt: str, published: dict) -> list[str]:
    """BookTection's and arXivTection's keys that only some blocks read, each ignored without a word elsewhere:
    ``hf`` and ``cache_dir`` beside a local ``path`` (the file is read, the Hub not asked), ``hf`` of any other
    format (read from a local path only), ``length`` of a format without Length settings."""
    problems = []
    if fmt in HUB_FORMATS and published.get("path"):
        if "hf" in published:
            problems.append(f"{where}.hf: beside path, whose file is read (the Hub is not asked); give one of them")
        if "cache_dir" in published:
            problems.append(f"{where}.cache_dir: beside path, whose file is read (nothing is downloaded to cache); "
                            f"remove it")
    if fmt not in HUB_FORMATS and published.get("hf"):
        problems.append(f"{where}.hf: the {fmt} set is read from a local path only; download it and give 'path'")
    if fmt not in HUB_FORMATS and "cache_dir" in published:
        problems.append(f"{where}.cache_dir: only a Hub download (formats {', '.join(HUB_FORMATS)}) is cached")
    if fmt not in HUB_FORMATS and "length" in published:
        problems.append(f"{where}.length: only BookTection has Length settings (format booktection)")
    return problems


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
    problems += _hub_key_problems(where, fmt, published)
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
    if "group_key" in published and fmt != "qa":
        problems.append(f"{where}.group_key: only format qa groups its questions by a field")
    if "label_key" in published and fmt != "qa":
        problems.append(f"{where}.label_key: only format qa reads each question's label from a field "
                        f"(the other formats carry theirs)")
    elif "label_key" in published and "member_fraction" in published:
        problems.append(f"{where}.member_fraction: the QA set labels its own questions "
                        f"(label_key {published['label_key']!r}); memaudit splits only an unlabelled set (remove one)")
    if "near_duplicate_ngram" in published and fmt != "qa":
        problems.append(f"{where}.near_duplicate_ngram: only format qa is split by memaudit "
                        f"(the other formats carry labels)")
    if "strict" in published and fmt not in REJECTS_FORMATS:
        problems.append(f"{where}.strict: only formats {', '.join(REJECTS_FORMATS)} skip unusable rows")
    if "text_key" in published and fmt != "member_texts":
        problems.append(f"{where}.text_key: only format member_texts names its text field")
    elif str(published.get("text_key", "")).strip().lower() == "label":  # field names are read in lower case
        problems.append(f"{where}.text_key: {published['text_key']!r} is the field that holds each row's label "
                        f"(1 = member); name the field that holds the text")
    if "validation_rows" in published and fmt != "bookmia":
        problems.append(f"{where}.validation_rows: only format bookmia has a fixed validation split by row "
                        f"(the information-guided probes' first 1870 BookMIA rows)")
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


def _text_origins(block: dict) -> dict[str, str]:
    """The texts a benchmark's or the pretraining pool's ``sources`` hold, as ``{text: the source holding it}``:
    each source its own (``user_books``: its directory's); ``demo_qa`` also its ``from_source``, whose sentences
    its questions quote; ``tidytext`` also ``austen`` unless ``exclude_titles`` drops Pride and Prejudice, the
    same text as janeaustenr's."""
    from memaudit.datasets.sources import USER_BOOKS_DIRECTORY

    out: dict[str, str] = {}
    for src in block.get("sources") or []:
        options = (block.get("source_options") or {}).get(src)
        options = options if isinstance(options, dict) else {}
        if src == "user_books":
            out[f"user_books:{options.get('directory', USER_BOOKS_DIRECTORY)}"] = src
            continue
        out[src] = src
        if src == "demo_qa":
            out[str(options.get("from_source", "reuters"))] = src
        excluded = options.get("exclude_titles") or ()
        if src == "tidytext" and "pride and prejudice" not in {str(t).lower() for t in
                                                               ([excluded] if isinstance(excluded, str) else excluded)}:
            out["austen"] = src
    return out


def _shared_text(origin: str, *holders: str) -> str:
    """What two blocks share, in words: the ``origin`` text of :func:`_text_origins`, held by sources ``holders``."""
    if origin == "austen" and "tidytext" in holders:
        return "Pride and Prejudice (janeaustenr's and tidytext's)"
    return f"the {origin} documents"


def _demo_qa_overlaps(config: dict) -> list[str]:
    """demo_qa quotes sentences of its from_source (Reuters): a model contaminated on a benchmark of
    those articles has seen questions of both halves of a demo_qa benchmark. Any two benchmarks of one
    model's members_of that hold the same texts (:func:`_text_origins`) are refused alike: novels and books
    both split Austen's chapters, so either's members include non-members of the other."""
    benchmarks = config["benchmarks"]
    quoted = {name: bench.get("source_options", {}).get("demo_qa", {}).get("from_source", "reuters")
              for name, bench in benchmarks.items() if "demo_qa" in bench.get("sources", [])}
    origins = {name: _text_origins(bench) for name, bench in benchmarks.items() if "sources" in bench}
    problems = []
    for model, entry in config["models"].items():
        members_of = (entry.get("finetune") or {}).get("members_of") or []
        reported = set()
        for qa in (b for b in members_of if b in quoted):
            for other in members_of:
                if quoted[qa] in benchmarks.get(other, {}).get("sources", []):
                    reported.add(frozenset((qa, other)))
                    problems.append(f"models.{model}.finetune.members_of: {qa!r} (demo_qa) quotes the {quoted[qa]} "
                                    f"articles of {other!r}; a model contaminated on both has seen clean questions")
        built = [b for b in dict.fromkeys(members_of) if b in origins]
        for i, a in enumerate(built):
            for b in built[i + 1:]:
                shared = [_shared_text(o, origins[a][o], origins[b][o])
                          for o in sorted(origins[a].keys() & origins[b].keys())]
                if shared and frozenset((a, b)) not in reported:
                    problems.append(f"models.{model}.finetune.members_of: {a!r} and {b!r} both hold "
                                    f"{', '.join(shared)}; a model contaminated on both has seen non-members of "
                                    f"each (the other's members)")
    return problems


def _benchmark_problems(config: dict) -> list[str]:
    problems = []
    for name, bench in config["benchmarks"].items():
        problems += _missing_value_name_problems(f"benchmarks.{name}", name, "benchmark")
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
        if "sources" in bench:  # (on a published benchmark, _source_keys_on_published names the block)
            problems += _source_option_problems(("benchmarks", name), bench, unlisted=True)
    return problems


def _source_option_problems(where: tuple, block: dict, *, unlisted: bool) -> list[str]:
    """Options under a block's ``source_options`` that no loader reads (:data:`memaudit.datasets.sources.SOURCES`):
    one its source does not take (the dataset job stopped on it), and with ``unlisted`` the options of a
    source the block does not list (ignored without a word). The pretraining pool's schema default holds
    options for a source it may not list, so it is checked without ``unlisted``."""
    from memaudit.datasets.sources import SOURCES

    sources = block.get("sources") or []
    problems = []
    for src, options in (block.get("source_options") or {}).items():
        if src not in sources:
            if unlisted:
                problems.append(f"{key_path((*where, 'source_options', src))}: {src!r} is not one of the "
                                f"sources ({', '.join(sources)}), so nothing reads these options (remove them or "
                                f"add the source)")
            continue
        if src not in SOURCES or not isinstance(options, dict):
            continue  # an unknown source is named under sources
        for option in options:
            if option not in SOURCES[src].options:
                problems.append(f"{key_path((*where, 'source_options', src, option))}: source {src!r} has no such "
                                f"option (it takes: {', '.join(SOURCES[src].options) or 'none'})")
    return problems


def _pretrain_problems(config: dict) -> list[str]:
    benchmarks = config["benchmarks"]
    problems = _source_option_problems(("pretrain",), config.get("pretrain", {}), unlisted=False)
    # a tiny model trains on the pool alone: an empty pool stopped its prepare_model, after the datasets
    scratch = sorted(m for m, e in config["models"].items() if "tiny_gpt2" in (e.get("source") or {}))
    if scratch and not config.get("pretrain", {}).get("sources"):
        default = ", ".join(load_schema()["properties"]["pretrain"]["properties"]["sources"]["default"])
        problems.append(f"pretrain.sources: empty, but model{'s' if len(scratch) > 1 else ''} {', '.join(scratch)} "
                        f"{'are' if len(scratch) > 1 else 'is'} trained from scratch on the pretraining pool (source "
                        f"tiny_gpt2); list a source no benchmark uses (the default: {default})")
    for src in sorted(set(config.get("pretrain", {}).get("sources", []))):
        if src not in BUILTIN_SOURCES:
            problems.append(f"pretrain.sources: unknown source {src!r}")
        used = [b for b, v in benchmarks.items() if src in v.get("sources", [])]
        if used:
            problems.append(f"pretrain.sources: {src!r} is also a source of benchmark(s) "
                            f"{', '.join(used)}; the pretraining pool must be disjoint")
    # texts one source holds under another's name: tidytext's Pride and Prejudice, demo_qa's Reuters sentences
    pool = _text_origins(config.get("pretrain", {}))
    shared: dict[tuple[str, str, str], list[str]] = {}
    for b, bench in benchmarks.items():
        held = _text_origins(bench) if "sources" in bench else {}
        for origin in sorted(pool.keys() & held.keys()):
            if pool[origin] != held[origin]:  # the same source: named above
                shared.setdefault((pool[origin], held[origin], origin), []).append(b)
    for (src, other, origin), used in shared.items():
        problems.append(f"pretrain.sources: {src!r} holds {_shared_text(origin, src, other)}, as source {other!r} of "
                        f"benchmark(s) {', '.join(used)} does; the pretraining pool must be disjoint"
                        + (" (pretrain.source_options: {tidytext: {exclude_titles: [Pride and Prejudice]}})"
                           if origin == "austen" and src == "tidytext" else ""))
    return problems


COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


def _revision_problems(where: str, source: dict) -> list[str]:
    """A hub model is pinned to a commit (40 hex digits), unless its entry accepts moving weights."""
    if "hub_id" not in source:
        if "allow_moving_revision" in source:
            return [f"{where}.source.allow_moving_revision: only with hub_id (the other sources do not move)"]
        return []
    revision = source.get("revision")
    if revision is None:
        return [f"{where}.source.revision: required with hub_id (pin a commit so reruns load the same weights)"]
    if COMMIT_SHA.fullmatch(str(revision)) or source.get("allow_moving_revision") is True:
        return []
    from memaudit.secrets import looks_like_credential

    text = str(revision)
    shown = "a string (the value is not shown)" if looks_like_credential(text) or len(text) > 60 else repr(text)
    return [f"{where}.source.revision: must be a commit sha (40 lowercase hex digits), not "
            f"{shown}; a branch or tag can move, so reruns could load other "
            f"weights: pin the commit (the model's history on the hub) or set allow_moving_revision: true"]


def _model_problems(config: dict) -> list[str]:
    models, benchmarks = config["models"], config["benchmarks"]
    problems = []
    for name, entry in models.items():
        where = f"models.{name}"
        problems += _file_name_problems(name, models)
        problems += _control_problems(name, entry, models)
        if is_api_model(entry):
            continue  # an API model: no local weights; checked by check_api_models
        problems += _device_problems(where, entry)
        has_source, has_base = "source" in entry, "base" in entry
        if has_source == has_base:
            problems.append(f"{where}: give exactly one of 'source' (a base model) or "
                            f"'base' + 'finetune' (a fine-tuned model)")
        if has_source:
            kinds = [k for k in ("builtin", "path", "hub_id", "tiny_gpt2") if k in entry["source"]]
            if len(kinds) != 1:
                problems.append(f"{where}.source: give exactly one of builtin, path, hub_id, "
                                f"tiny_gpt2 (got {kinds or 'none'})")
            problems += _revision_problems(where, entry["source"])
            if "gguf_file" in entry["source"] and kinds and kinds[0] in ("builtin", "tiny_gpt2"):
                # read only with path or hub_id: beside a builtin it was ignored unsaid (and reran the conversion)
                problems.append(f"{where}.source.gguf_file: only with path or hub_id (a {kinds[0]} model has no "
                                f"GGUF file to name)")
            tiny = entry["source"].get("tiny_gpt2")
            width, heads = (tiny.get("n_embd"), tiny.get("n_head")) if isinstance(tiny, dict) else (None, None)
            if type(width) is type(heads) is int and heads > 0 and width % heads:  # else transformers' ValueError
                problems.append(f"{where}.source.tiny_gpt2.n_embd: {tiny['n_embd']} is not a multiple of n_head "
                                f"({tiny['n_head']}); each attention head takes n_embd / n_head dimensions")
            if "finetune" in entry:
                problems.append(f"{where}.finetune: needs 'base' (the model to fine-tune)")
        if has_base:
            base = entry["base"]
            if base not in models:
                problems.append(f"{where}.base: {unknown('model', base, models)}")
            elif "base" in models[base]:
                problems.append(f"{where}.base: {base!r} is itself fine-tuned; chain from a base model")
            elif is_api_model(models[base]):
                problems.append(f"{where}.base: {base!r} is an API model (backend {models[base]['backend']!r}), "
                                f"whose weights are not here to fine-tune; use a local model (source)")
            if "finetune" not in entry:
                problems.append(f"{where}.finetune: required with 'base'")
            else:
                for i, b in enumerate(entry["finetune"]["members_of"]):
                    if b not in benchmarks:
                        problems.append(f"{where}.finetune.members_of.{i}: {unknown('benchmark', b, benchmarks)}")
    return problems


# read_csv's default na_values, as its docs list them (tests/test_config.py compares them with pandas' own:
# the config checks import no pandas, which Snakemake's every start would pay for)
PANDAS_NA_NAMES = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                             "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})


# read_csv's default true_values/false_values and the numbers its C parser reads (no thousands separator)
_PANDAS_BOOLEANS = frozenset({"True", "TRUE", "true", "False", "FALSE", "false"})
_PANDAS_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity)", re.IGNORECASE)


def _pandas_reads_as_number(name: str) -> bool:
    """Whether ``read_csv`` reads a column holding only ``name`` as numbers or booleans (2024, 007, 1e3, True)."""
    return name in _PANDAS_BOOLEANS or _PANDAS_NUMBER.fullmatch(name) is not None


def _missing_value_name_problems(where: str, name: str, kind: str) -> list[str]:
    """A name that pandas' ``read_csv`` reads as a missing value by default (``NA``, ``None``, ``null``...):
    the results tables are read back that way (memaudit.stats), and such a model's or benchmark's rows
    came back with NaN for its name, sorted apart from it or dropped. Refused here rather than every
    table read with ``keep_default_na=False``, which would make their empty scores strings."""
    if _pandas_reads_as_number(name):
        # a table whose every row is such a model's (or benchmark's) reads its name back as 2024 or True
        return [f"{where}: {name!r} is a name pandas reads as a number or a boolean in the results tables, where "
                f"this {kind}'s rows would not match its name; rename the {kind}"]
    if name not in PANDAS_NA_NAMES:
        return []
    return [f"{where}: {name!r} is a name pandas reads as a missing value (NaN) in the results tables, where "
            f"this {kind}'s rows would lose their name; rename the {kind}"]


def _file_name_problems(name: str, models: dict) -> list[str]:
    """A model's name is part of its result files' names (workflow/rules/stats.smk): one that is another
    result's file name would write over it, or be read as it."""
    missing = _missing_value_name_problems(f"models.{name}", name, "model")
    if missing:
        return missing
    if name == "blind_baseline":
        return [f"models.{name}: the name of the blind baseline's metrics file "
                f"(results/metrics/<benchmark>/blind_baseline.csv); rename the model"]
    stem = name.removesuffix("_named")
    if stem != name and stem in models:
        return [f"models.{name}: {stem!r} is a model too, and results/selection/<benchmark>/{name}.csv would be "
                f"both this model's selection table and the documents {stem!r} names; rename one"]
    return []


def _device_problems(where: str, entry: dict) -> list[str]:
    """``device`` against ``gpus``: a job sees only the GPUs it claims (memaudit.devices), so ``cuda:N``
    counts among those and a job claiming none has no ``cuda``; a ``cpu`` model claiming GPUs holds them idle.
    Each failed only inside the model's first job (or, for ``cpu``, never said a word)."""
    device, gpus = str(entry.get("device", "auto")), entry.get("gpus")
    if device == "cpu" and gpus:
        return [f"{where}.gpus: {gpus} GPU(s) claimed by each job of a model on device 'cpu', which uses none; "
                f"remove gpus or use device cuda"]
    if not device.startswith("cuda"):
        return []
    claimed = 1 if gpus is None else gpus
    index = int(device.partition(":")[2] or 0)
    if index < claimed:
        return []
    if claimed == 0:
        return [f"{where}.gpus: 0, but device {device!r} runs on a GPU and a job sees only the GPUs it claims; "
                f"remove gpus: 0 or use device cpu"]
    return [f"{where}.device: {device!r}, but each job of this model claims {claimed} GPU(s) "
            f"({'gpus unset' if gpus is None else f'gpus: {gpus}'}) and sees only those, numbered from 0; "
            f"use cuda, or set gpus: {index + 1}"]


def _control_problems(name: str, entry: dict, models: dict) -> list[str]:
    """``control``: another model, set on a model that is not fine-tuned here (a fine-tuned model's
    control is its base)."""
    control = entry.get("control")
    if control is None:
        return []
    where = key_path(("models", name, "control"))
    if "base" in entry:
        return [f"{where}: {name!r} is fine-tuned from {entry['base']!r}, which is its control; remove control"]
    if control == name:
        return [f"{where}: a model cannot be its own control"]
    if control not in models:
        return [f"{where}: {unknown('model', control, models)}"]
    return []


def _reference_problems(config: dict) -> list[str]:
    tp = config.get("probes", {}).get("token_prob", {})
    return [f"probes.token_prob.reference_models.{i}: {unknown('model', ref, config['models'])}"
            for i, ref in enumerate(tp.get("reference_models", [])) if ref not in config["models"]]


CROSS_KEY_CHECKS = (_benchmark_problems, _demo_qa_overlaps, _unlabelled_problems, _pretrain_problems,
                    _model_problems)


def _cross_key_problems(config: dict, checks: Sequence[Callable[[dict], list[str]]], *,
                        guarded: bool) -> list[str]:
    """The problems of every cross-key check. With ``guarded`` (the schema found problems, so parts of
    the config may have other shapes than the checks expect) a check that cannot run on it is left out:
    the schema's lines already say what to fix first."""
    problems: list[str] = []
    for check in (*CROSS_KEY_CHECKS, *checks, _reference_problems):
        if not guarded:
            problems += check(config)
            continue
        try:
            problems += check(config)
        except Exception:  # noqa: BLE001 -- a check written for schema-valid configs
            continue
    return problems


def check_config(config: dict, *, checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    """Checks across entries: references between models, benchmarks and sources, pinned hub
    revisions, plus ``checks``. Raises :class:`ConfigError` with one line per problem."""
    _raise_problems(_cross_key_problems(config, checks, guarded=False))
    return config


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key repeated in one mapping: PyYAML keeps the last value
    without a word, so a model or benchmark named twice would drop the first entry silently (the
    YAML spec requires unique keys). Keys brought in by a merge (``<<: *defaults``) may be overridden."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in first_line
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}, first on line {first_line[key]}; YAML would keep "
                                    f"only the last one: remove or rename one", key_node.start_mark)
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node):
        # an unquoted impossible date (2023-02-30) raised a bare ValueError, a traceback without the line
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is not a valid date: {exc}", node.start_mark) from None


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:timestamp", _UniqueKeyLoader.construct_yaml_timestamp)


def read_config_file(path: str | Path) -> dict:
    """The mapping in a YAML (or JSON) config file, before validation.

    Raises :class:`ConfigError` in one line naming the file and, for a syntax error, the
    line and column (PyYAML's own text spans several lines and quotes the file; the quote is
    left out, so a key pasted there is not echoed)."""
    from memaudit.secrets import looks_like_credential, redact

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not UTF-8 text (byte {exc.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        # a comment is no value, so credential_problems never sees it; but `snakemake --report` (make report)
        # embeds each --configfile as written, comments and all, in the report people mail
        comment = line.lstrip()[1:] if line.lstrip().startswith("#") else line.partition(" #")[2]
        if comment and looks_like_credential(comment):
            raise ConfigError(f"{path}, line {number}: a comment holds what looks like an API key or token (the "
                              f"value is not shown); the report embeds the config file as written: remove it")
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        what = " ".join(str(getattr(exc, "problem", None) or "cannot be parsed").split())
        if context is not None and getattr(exc, "context", None) and (not mark or context.line != mark.line):
            what += f"; {' '.join(exc.context.split())} that starts on line {context.line + 1}"
        raise ConfigError(f"{where}: not valid YAML ({redact(what)})") from None
    if raw is None or raw == {}:
        raise ConfigError(f"{path}: the config file is empty (no keys); give at least benchmarks and models "
                          f"(config/ci.yaml is a small example)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}, line 1: expected a mapping of config keys at the top level, "
                          f"not {_describe(raw, ())}")
    return raw


def load_config(path: str | Path, *, checks: Sequence[Callable[[dict], list[str]]] = ()) -> dict:
    """A validated, completed config read from ``path``; every problem is one line starting with the file,
    and with the line and column of the key where the file sets it (:func:`locate_problems`)."""
    raw = read_config_file(path)
    try:
        return validate_config(raw, checks=checks)
    except ConfigError as exc:
        raise ConfigError(locate_problems(str(exc), raw, [path], name_file=True)) from None


_PROBLEM_KEY = re.compile(r"config key (\S+): ")


def _key_in(config, dotted: str) -> tuple[list, bool]:
    """The keys (and list indices) of ``dotted`` in ``config``, and whether all of it is there: a name may
    hold a dot (a model ``gpt-4.1``), so the longest name a mapping has is taken first."""
    parts, keys, node, i = dotted.split("."), [], config, 0
    while i < len(parts):
        if isinstance(node, dict):
            by_text = {str(k): k for k in node}  # a key YAML read as no string (2024, yes) is named as text
            j = next((j for j in range(len(parts), i, -1) if ".".join(parts[i:j]) in by_text), None)
            if j is None:
                return keys, False
            keys.append(by_text[".".join(parts[i:j])])
        elif isinstance(node, list) and parts[i].isdigit() and int(parts[i]) < len(node):
            keys.append(int(parts[i]))
            j = i + 1
        else:
            return keys, False
        node, i = node[keys[-1]], j
    return keys, True


def _key_of(node: yaml.ScalarNode):
    """The key a mapping key's node makes: its text, or what YAML reads a plain ``2024`` or ``yes`` as."""
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        return yaml.safe_load(node.value)
    except yaml.YAMLError:
        return node.value


def _node_at(root, keys: list):
    """The YAML node of the value at ``keys`` under the composed document ``root``, and the mark where
    the last key (or list item) starts; None where the file does not hold it (a key brought by a merge)."""
    node, mark = root, None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and _key_of(k) == key),
                         None)
            if found is None:
                return None
            mark, node = found[0].start_mark, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            mark = node.start_mark
        else:
            return None
    return node, mark


def locate_problems(problems: str, config: dict, paths: Sequence[str | Path], *, name_file: bool = False) -> str:
    """``problems`` (lines ``config key <dotted.key>: …``) with each line's place in the config files:
    ``<file>, line L, column C: `` where the last of ``paths`` to set the key gives it the value ``config``
    holds (a value from ``--config key=value`` is no file's, and keeps no place), or, for a key no file sets
    (one missing, or filled in by a default), the place of the nearest mapping above it a file sets. A line
    no file places starts with the file where ``name_file`` (one file, as ``memaudit check-config`` reads)."""
    documents = []
    for path in reversed(list(paths)):  # the last file given overrides the ones before it
        try:
            text = Path(path).read_text(encoding="utf-8")
            documents.append((path, yaml.compose(text, Loader=yaml.SafeLoader), yaml.safe_load(text)))
        except (OSError, ValueError, yaml.YAMLError):  # read_config_file has refused it already (ValueError:
            continue  # bytes that are no UTF-8, an impossible date)

    def place(line: str) -> str | None:
        key = _PROBLEM_KEY.match(line)
        if key is None:
            return None
        keys, whole = _key_in(config, key[1])
        for path, root, data in documents:
            here, there = _value_at(data, keys), _value_at(config, keys)
            if whole and here != there and not (here != here and there != there):  # NaN is no NaN's equal
                continue
            for n in range(len(keys), 0, -1) if not whole else (len(keys),):
                found = _node_at(root, keys[:n])
                if found is not None and found[1] is not None:
                    return f"{path}, line {found[1].line + 1}, column {found[1].column + 1}"
        return None

    def from_command_line_as_text(line: str) -> bool:
        """Whether the line is about a string no file gives: Snakemake reads a ``--config key={sub: 5}`` value's
        insides as text ('5'), so a nested number, boolean or null can only come from a --configfile."""
        key = _PROBLEM_KEY.match(line)
        if key is None or ", not the string " not in line:
            return False
        keys, whole = _key_in(config, key[1])
        return whole and isinstance(_value_at(config, keys), str) and len(keys) > 1 and all(
            _value_at(data, keys) != _value_at(config, keys) for _, _, data in documents)

    out = []
    for line in problems.splitlines():
        where = place(line) or (str(paths[0]) if name_file and paths else None)
        if from_command_line_as_text(line):
            line += " (--config reads the values inside {...} as text: set this one in a --configfile)"
        out.append(f"{where}: {line}" if where else line)
    return "\n".join(out)


_ABSENT = object()


def _value_at(data, keys: list):
    """The value at ``keys`` (mapping keys, list indices) in ``data``; :data:`_ABSENT` where it holds none."""
    for key in keys:
        if isinstance(data, dict) and key in data or (
                isinstance(data, list) and isinstance(key, int) and key < len(data)):
            data = data[key]
        else:
            return _ABSENT
    return data


def unknown(kind: str, name, known) -> str:
    """``unknown model 'x'``, with ``; did you mean 'y'?`` where a configured name is close (a typo) and the
    configured names where there are few enough to list."""
    known = sorted(str(k) for k in known)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = f" (configured: {', '.join(known)})" if 0 < len(known) <= 12 and not close else ""
    return f"unknown {kind} {name!r}{hint}{listed}"


def check_workflow_config(config: dict, configfiles: Sequence[str | Path],
                          checks: Sequence[Callable[[dict], list[str]]] = (), *,
                          located_in: Sequence[str | Path] = ()) -> dict:
    """What the Snakefile runs before anything reads the config: every ``--configfile`` must hold
    keys (an empty one is refused naming it, not replaced by the demo), then :func:`validate_config`
    and :func:`check_local_inputs`. Returns the completed config; raises :class:`ConfigError` (one
    line per problem, a key's problem placed in ``located_in`` (default: ``configfiles``) by
    :func:`locate_problems`)."""
    for path in configfiles:
        read_config_file(path)
    try:
        completed = validate_config(config, checks=checks)
    except ConfigError as exc:
        raise ConfigError(locate_problems(str(exc), config, located_in or configfiles)) from None
    missing = check_local_inputs(completed)  # each line names the input's own file (and line) already
    if missing:
        raise ConfigError("\n".join(missing))
    return completed


def local_inputs(config: dict) -> list[tuple[str, str]]:
    """``(dotted key, path)`` of every local file or folder a completed config names as an input:
    benchmarks' ``labels``, ``published.path`` and ``published.labels``, a ``user_books``
    ``directory`` named in ``source_options`` (benchmarks and the pretraining pool), models'
    ``source.path``, the probes' ``prompt_dir`` and ``memfree_rejection_file``, and CopyBench's
    ``extractor.summaries``."""
    out = []

    def user_books(key: str, entry: dict) -> None:
        directory = ((entry.get("source_options") or {}).get("user_books") or {}).get("directory")
        if directory and "user_books" in (entry.get("sources") or []):
            out.append((f"{key}.source_options.user_books.directory", str(directory)))

    for name, bench in sorted(config.get("benchmarks", {}).items()):
        key = f"benchmarks.{name}"
        if bench.get("labels"):
            out.append((f"{key}.labels", str(bench["labels"])))
        published = bench.get("published") or {}
        for field in ("path", "labels"):
            if published.get(field):
                out.append((f"{key}.published.{field}", str(published[field])))
        user_books(key, bench)
    user_books("pretrain", config.get("pretrain") or {})
    for name, entry in sorted(config.get("models", {}).items()):
        if (entry.get("source") or {}).get("path"):
            out.append((f"models.{name}.source.path", str(entry["source"]["path"])))
            if entry["source"].get("gguf_file"):  # a file in that folder, as transformers reads it
                out.append((f"models.{name}.source.gguf_file",
                            str(Path(entry["source"]["path"]) / entry["source"]["gguf_file"])))
    for probe, settings in sorted(config.get("probes", {}).items()):
        for field in ("prompt_dir", "memfree_rejection_file"):
            if isinstance(settings, dict) and settings.get(field):
                out.append((f"probes.{probe}.{field}", str(settings[field])))
        summaries = ((settings or {}).get("extractor") or {}).get("summaries") if probe == "copybench" else None
        if summaries:
            out.append(("probes.copybench.extractor.summaries", str(summaries)))
    return out


def check_local_inputs(config: dict, root: str | Path = ".") -> list[str]:
    """One line per input of :func:`local_inputs` that is not there (relative paths from ``root``,
    the workflow's directory), before any job runs.

    Snakemake names a missing input only of a job it is about to run: a labels file, folder or
    checkpoint renamed after a finished run left that run's dataset in place, and the run
    reported it as made from the new path (the summary reads the config). So the workflow
    checks them first, and ``memaudit check-config`` too.

    A labels file is also read (a small CSV: ``book,label``, or CopyBench's ``title,label``): a bad
    row stopped the dataset job, and Snakemake removes a job's outputs before it runs it, so the
    finished dataset was gone and everything after it ran again once the file was fixed.
    """
    from memaudit.datasets.label_files import read_labels
    from memaudit.errors import InputError

    problems = []
    for key, path in local_inputs(config):
        found = Path(root) / path
        if not found.exists():
            problems.append(f"config key {key}: {path}: no such file or folder")
        elif key.endswith(".published.path") and key.startswith("benchmarks."):
            fmt = config["benchmarks"][key[len("benchmarks."):-len(".published.path")]]["published"].get("format")
            wants_folder = fmt in FOLDER_FORMATS
            if found.is_dir() != wants_folder:  # else the dataset job stops on it, after check-config said valid
                problems.append(f"config key {key}: {path}: a {'folder' if found.is_dir() else 'file'}, but "
                                f"format {fmt} reads a {'folder' if wants_folder else 'file'}")
        elif key.endswith(".labels") and key.startswith("benchmarks."):
            try:
                read_labels(found, "title" if key.endswith(".published.labels") else "book")
            except InputError as exc:
                problems.append(f"config key {key}: {exc}")
        elif key.startswith("models.") and key.endswith(".source.path"):
            problems += _model_folder_problems(config["models"][key[len("models."):-len(".source.path")]], key, path,
                                               found)
        elif key == "probes.copybench.prompt_dir":
            problems += _prompt_dir_problems(config, key, path, found)
        elif key == "probes.copybench.memfree_rejection_file":
            problems += _rejection_file_problems(config, key, path, found)
    return problems


def _model_folder_problems(entry: dict, key: str, path: str, found: Path) -> list[str]:
    """A ``source.path`` that transformers cannot load as a model: a file, a folder without ``config.json`` (and
    no ``gguf_file``), or a LoRA adapter's folder (``adapter_config.json``), which the fine-tune of a ``base``
    makes: the prepare job stopped on "Unrecognized model", naming neither the key nor what the folder is."""
    if not found.is_dir():
        return [f"config key {key}: {path}: a file, but a model is a folder (config.json and the weights)"]
    if (found / "config.json").is_file() or entry["source"].get("gguf_file"):
        return []
    if (found / "adapter_config.json").is_file():
        return [f"config key {key}: {path}: a LoRA adapter (adapter_config.json), not a model; give the folder of a "
                f"whole model (an adapter merged into its base with peft's merge_and_unload, say)"]
    return [f"config key {key}: {path}: no config.json (a Hugging Face model folder holds one beside its weights; "
            f"a GGUF file is named by source.gguf_file)"]


def _prompt_dir_problems(config: dict, key: str, path: str, found: Path) -> list[str]:
    """The prompt files of the run that are not in ``found``, or that do not load: a broken one stopped the
    probe job after the models were prepared, its old outputs already removed, where check-config said valid."""
    from memaudit.datasets.copybench_published import load_prompt_file
    from memaudit.errors import InputError

    names = copybench_prompt_files(config)
    if names and not found.is_dir():
        return [f"config key {key}: {path}: a file, but prompt_dir names the folder of the prompt files"]
    problems = []
    for name in names:
        if not (found / name).is_file():
            problems.append(f"config key {key}: {path}: no {name} (prompt: paper reads prompts.<mode>.format<n>.json "
                            f"for each CopyBench mode run and each of probes.copybench.formats; fact recall format 1 "
                            f"only)")
            continue
        try:
            load_prompt_file(found / name)  # a few small files: read at every check
        except InputError as exc:
            problems.append(f"config key {key}: {exc}")
    return problems


def _rejection_file_problems(config: dict, key: str, path: str, found: Path) -> list[str]:
    """MemFree's rejection corpus, where a MemFree decoding reads it: a JSON array of texts (a folder, or an
    object, stopped the probe job as a broken prompt file did)."""
    from memaudit.datasets.copybench_published import load_rejection_corpus
    from memaudit.errors import InputError

    if "memfree" not in ((config.get("probes") or {}).get("copybench") or {}).get("decodings", []):
        return []
    if found.is_dir():
        return [f"config key {key}: {path}: a folder, but memfree_rejection_file names a JSON file (an array of texts)"]
    try:
        load_rejection_corpus(found)
    except InputError as exc:
        return [f"config key {key}: {exc}"]
    return []


def copybench_prompt_files(config: dict, modes: tuple[str, ...] | None = None) -> list[str]:
    """The prompt files ``probes.copybench.prompt_dir`` must hold for this run (the probe reads them only with
    ``prompt: paper``): ``prompts.<mode>.format<n>.json`` of each mode run (of ``modes`` where given), fact
    recall's format 1 alone. Here, not in ``probes/copybench``, because ``check-config`` checks them and this
    module imports no family; the probe's rule declares the same files as its inputs."""
    probes = config.get("probes") or {}
    settings = probes.get("copybench") or {}
    if settings.get("prompt", "paper") != "paper":
        return []
    return [f"prompts.{mode}.format{n}.json" for mode in ("literal", "nonliteral", "qa")
            if (mode in modes if modes is not None else f"copybench_{mode}" in probes)
            for n in ([1] if mode == "qa" else settings.get("formats", [1, 2, 3]))]


def copybench_prompt_paths(config: dict, modes: tuple[str, ...] | None = None) -> list[str]:
    """The paths of :func:`copybench_prompt_files` under ``probes.copybench.prompt_dir`` (none without one): the
    inputs of the jobs that read them, the mode's probes and the API cost estimate."""
    prompt_dir = ((config.get("probes") or {}).get("copybench") or {}).get("prompt_dir")
    return [str(Path(prompt_dir) / name) for name in copybench_prompt_files(config, modes)] if prompt_dir else []


def control_of(entry: dict) -> str | None:
    """The model a model is compared with in the families' paired differences (CopyBench's and the
    cloze probes'): its declared ``control`` (two checkpoints given by path: the suspect and the one it
    was made from), else the base it is fine-tuned from here; None for a model with neither."""
    return entry.get("control") or entry.get("base")


def pairing_of(entry: dict) -> str:
    """How a model's :func:`control_of` was given: ``control`` (declared: labels as given, no ground
    truth) or ``base`` (fine-tuned here: the controlled contamination's null control)."""
    return "control" if entry.get("control") else "base"


def base_model_of(config: dict, model: str) -> str:
    """The base model a model derives from (itself for a base model)."""
    return config["models"][model].get("base", model)


def contaminated_on(model_entry: dict) -> list[str]:
    """Benchmarks whose members this model was fine-tuned on (empty for base models)."""
    return list(model_entry.get("finetune", {}).get("members_of", []))


# Keys of a model entry that do not decide what a job computes, kept out of the params of the
# jobs they do not concern (Snakemake reruns a job whose params text changes):
# how many GPUs, how much memory and how much time a job claims is scheduling, never a result;
EXECUTION_KEYS = ("gpus", "mem_mb", "runtime")
# how the prepared model is scored (passage truncation, forward batch) does not change its weights.
SCORING_KEYS = ("max_tokens", "batch_size")
# Which model a model is compared with changes the tables that pair them, never its weights or scores.
COMPARISON_KEYS = ("control",)
# A model's label in the tables and figures (memaudit.jobs.families, the params of the jobs that show it).
LABEL_KEYS = ("family",)
# How an API model's requests are sent and priced (the answers are cached by request, each priced when it
# was made): raising a slow paraphraser's concurrency must not rerun every job downstream of its paraphrases.
API_SENDING_KEYS = ("concurrency", "timeout", "max_retries", "api_key_env", "pricing")


def model_build_settings(entry: dict) -> dict:
    """The part of a model entry that decides its prepared weights (``prepare_model``'s params).

    Changing ``max_tokens``, ``batch_size``, ``gpus``, ``mem_mb`` or ``runtime`` then re-scores the model
    without re-training or re-converting it.
    """
    return {k: v for k, v in model_scoring_settings(entry).items() if k not in SCORING_KEYS}


def model_scoring_settings(entry: dict) -> dict:
    """The part of a model entry a probing job's results depend on: everything but scheduling, the control
    and the family (which label tables), and of an API model's ``api`` block what is asked, not how it is
    sent (:data:`API_SENDING_KEYS`)."""
    kept = {k: v for k, v in entry.items() if k not in EXECUTION_KEYS + COMPARISON_KEYS + LABEL_KEYS}
    if isinstance(kept.get("api"), dict):
        kept["api"] = {k: v for k, v in kept["api"].items() if k not in API_SENDING_KEYS}
    return kept
