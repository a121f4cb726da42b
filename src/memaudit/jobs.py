"""The configured run as data: which models are scored where, by which probes, with which auxiliary models.

Pure functions of the (validated) config, so the job list can be unit-tested without
Snakemake; ``workflow/rules/common.smk`` wraps them as the input functions and lists
its rules need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memaudit.backends.base import is_api_model
from memaudit.config import contaminated_on, is_labelled
from memaudit.config import label_provenance as provenance
from memaudit.probes.registry import FAMILIES, probes_for_model, role_model


def _checks() -> list:
    from memaudit.backends.config_checks import check_api_models
    from memaudit.probes.registry import check_capabilities, check_families, check_roles

    return [check_capabilities, check_roles, check_families, check_api_models, check_controls,
            check_method_lists]


def run_checks(config: dict) -> list[str]:
    """Problems beyond the config's own references: probes on models that cannot serve them,
    roles naming unknown models, API settings (every one names its dotted key)."""
    return [problem for check in _checks() for problem in check(config)]


def validate_config(config: dict) -> dict:
    """:func:`memaudit.config.validate_config` with :func:`run_checks`: what the workflow runs before any job."""
    from memaudit import config as cfg

    return cfg.validate_config(config, checks=_checks())


def check_config(config: dict) -> dict:
    """The cross-key checks of a config already validated against the schema (the Snakefile's)."""
    from memaudit import config as cfg

    return cfg.check_config(config, checks=_checks())


def load_config(path: str | Path) -> dict:
    from memaudit import config as cfg

    return cfg.load_config(path, checks=_checks())


def check_workflow_config(config: dict, configfiles, located_in=()) -> dict:
    """:func:`memaudit.config.check_workflow_config` with :func:`run_checks`: the Snakefile's first step."""
    from memaudit import config as cfg

    return cfg.check_workflow_config(config, configfiles, checks=_checks(), located_in=located_in)


def config_digest(config: dict) -> str:
    """A short SHA-256 of the whole (completed) config, key order aside: the param of a job that reads all of
    it (the cost estimate), so that any change reruns it and a dry run shows a digest, not the config."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(canonical(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


def canonical(obj: Any) -> Any:
    """A copy with every mapping's keys sorted.

    Snakemake reruns a job when the text of its params changes, and a dict's text depends
    on key order: reordering keys in the YAML (or writing it with another tool) must not
    rerun anything.
    """
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


def job_settings(config: dict, probe: str, benchmark: str | None = None, per_benchmark: dict | None = None) -> dict:
    """``probes.<probe>`` as a job sees it, keys sorted (:func:`canonical`): less its ``models`` and
    ``benchmarks`` lists, which choose which jobs run, not what a job computes (adding a model or a
    benchmark runs the probe there alone); and each key of ``per_benchmark`` (key -> default)
    resolved for ``benchmark`` (:func:`memaudit.config.for_benchmark`), so changing one benchmark's
    value reruns only that benchmark's jobs."""
    from memaudit.config import for_benchmark

    cfg = {k: v for k, v in config["probes"].get(probe, {}).items() if k not in ("models", "benchmarks")}
    for key, default in (per_benchmark or {}).items():
        cfg[key] = for_benchmark(cfg.get(key), benchmark, default)
    return canonical(cfg)


def local_models(config: dict) -> list[str]:
    return [m for m in sorted(config["models"]) if not is_api_model(config["models"][m])]


def api_models(config: dict) -> list[str]:
    return [m for m in sorted(config["models"]) if is_api_model(config["models"][m])]


def model_dir(config: dict, model: str) -> dict[str, str]:
    """``{"model": results/models/<model>}`` for a local model, ``{}`` for an API model (no weights)."""
    return {} if is_api_model(config["models"][model]) else {"model": f"results/models/{model}"}


def families(config: dict, models: Sequence[str]) -> dict[str, str]:
    """Each model's ``family`` (its name where unset), which groups models in the tables and figures: the param
    of the jobs that show it, not of ``prepare_model`` or any probe, so renaming one redraws those alone."""
    return {m: config["models"][m].get("family", m) for m in sorted(models)}


def model_priority(entry: dict) -> int:
    """Scheduling order of model jobs, ahead of every other job (priority 0).

    A converted or referenced model (30) is quick and unblocks its fine-tunes and
    paraphrasing; a fine-tune (20) heads the run's longest chain (fine-tune, probing,
    statistics); training a model from scratch (10) is cheap enough to fill the gaps. On
    the demo's 2 cores, equal priorities let the tiny models' jobs take both cores first
    and the SmolLM2 LoRA start last, 3 minutes late.
    """
    if "finetune" in entry:
        return 20
    return 10 if "tiny_gpt2" in (entry.get("source") or {}) else 30


def model_inputs(config: dict, model: str) -> dict:
    """What preparing a model needs: its base and the members it is fine-tuned on, the pretraining pool, or
    the files of a checkpoint given by path."""
    entry = config["models"][model]
    if "base" in entry:
        return {"base": f"results/models/{entry['base']}",
                "members": [f"results/datasets/{b}/documents.jsonl" for b in entry["finetune"]["members_of"]]}
    if "tiny_gpt2" in entry["source"]:
        return {"pretrain": "results/pretrain/documents.jsonl"}
    if "path" in entry["source"]:  # a checkpoint replaced in place reruns the model and all after it
        from memaudit.io import checkpoint_files

        # a path with nothing there is itself the input: Snakemake names it before any job runs
        return {"weights": checkpoint_files(entry["source"]["path"]) or [str(entry["source"]["path"])]}
    return {}


def probe_runs(config: dict, family: str) -> list[tuple[str, str, str]]:
    """Every ``(benchmark, model, mode)`` the family's probes run on."""
    fam = FAMILIES[family]
    return [(b, m, mode) for mode in fam.modes for b in sorted(config["benchmarks"]) for m in sorted(config["models"])
            if fam.probe(mode) in probes_for_model(config, m, b)]


def method_names(config: dict, benchmark: str | None = None, models: Sequence[str] | None = None) -> list[str]:
    """Every method name (the ``method`` of the score files, metrics.csv) the configured run writes: each
    family whose probes run somewhere lists its own (its registry entry's ``methods`` hook, from the naming
    code its runners use), in registry order, each name once. ``benchmark`` and ``models``: those its runs
    there write."""
    from memaudit.probes.registry import load_callable

    names: dict[str, None] = {}
    for fam in FAMILIES.values():
        runs = [(b, m, mode) for b, m, mode in probe_runs(config, fam.name)
                if (benchmark is None or b == benchmark) and (models is None or m in models)]
        if runs and fam.methods:
            names.update(dict.fromkeys(load_callable(fam.methods)(config, runs)))
    return list(names)


def figure_labels(config: dict, benchmark: str, model: str) -> dict[str, str]:
    """The report's labels of the ROC and score-distribution figures of (``benchmark``, ``model``), naming the
    methods they draw (:func:`memaudit.stats.workflow.select_methods`): the ``figures.headline_methods`` and
    reference-model methods its probes write there, else every one (a model only CopyBench probes)."""
    written = method_names(config, benchmark, [model])
    headline = set(config["figures"]["headline_methods"])
    drawn = [m for m in written if m in headline or m.startswith("ref_")] or written
    return {"benchmark": benchmark, "model": model, "methods": ", ".join(drawn)}


def size_figure_labels(config: dict, benchmark: str) -> dict[str, str]:
    """The report's labels of ``benchmark``'s AUC-against-size figure, naming the methods it draws
    (workflow/scripts/figure_auc_vs_size.py): the ``figures.headline_methods`` the local models' probes
    write there, else every method they write."""
    local = set(local_models(config))
    written = method_names(config, benchmark, [m for m in scored(config).get(benchmark, []) if m in local])
    drawn = [m for m in config["figures"]["headline_methods"] if m in written] or written
    return {"benchmark": benchmark, "model": "all local models", "methods": ", ".join(drawn)}


# The config's lists of method names (dotted key: the schema object holding its default). Set, each name must
# be one the run writes (:func:`check_method_lists`); a user's misspelt name would otherwise be left out of
# the figures without a word.
METHOD_LISTS = {
    "figures.headline_methods": ("properties", "figures"),
    "stats.selection.figure_methods": ("properties", "stats", "properties", "selection"),
}


def method_list_default(key: str) -> list[str]:
    """The schema's default of one of :data:`METHOD_LISTS` (a fresh copy). ``memaudit headline --methods``
    defaults to that of ``figures.headline_methods``, so the figures and the headline table cannot drift apart."""
    from memaudit.backends.settings import _schema_defaults

    return _schema_defaults(*METHOD_LISTS[key])[key.rsplit(".", 1)[-1]]


def check_method_lists(config: dict) -> list[str]:
    """Each of :data:`METHOD_LISTS` (``figures.headline_methods``, ``stats.selection.figure_methods``)
    names methods the run writes (:func:`method_names`): the figures keep the rows of the names listed,
    so a misspelt one (``zlibb``) would be left out without a word. A list equal to the schema's default
    is not checked: the defaults name the methods of the default settings, and a run without some of
    them (a DE-COP-only one) draws what it has."""
    import difflib

    known = None
    problems = []
    for key in METHOD_LISTS:
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.get(part, {})
        chosen = node.get(leaf)
        if chosen is None or chosen == method_list_default(key):  # unset: the figures draw what the run has
            continue
        known = method_names(config) if known is None else known
        for i, name in enumerate(chosen):
            if name not in known:
                close = difflib.get_close_matches(name, known, n=3)
                hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
                problems.append(f"{key}.{i}: {name!r} is no method this config's probes write"
                                f"{hint} (they write {len(known)}: see config/README.md)")
    return problems


def controls(config: dict, family: str) -> dict[str, str]:
    """Per model the family probes, its control (:func:`memaudit.config.control_of`): the pairs of the
    family's differences table. Only probed models: a model added elsewhere in the config does not
    rerun the family's summary."""
    from memaudit.config import control_of

    probed = sorted({m for _, m, _ in probe_runs(config, family)})
    return {m: control_of(config["models"][m]) for m in probed if control_of(config["models"][m])}


def declared_controls(config: dict, family: str) -> list[str]:
    """The models of :func:`controls` whose control is declared (``control``), not the base they are
    fine-tuned from here: their rows are comparisons with labels as given, not ground-truth checks."""
    return sorted(m for m in controls(config, family) if config["models"][m].get("control"))


def unpaired_controls(config: dict, family: str) -> list[str]:
    """A declared ``control`` the family does not run where it runs the model (same benchmark and mode):
    the difference the user asked for would be missing from the family's differences table."""
    runs = set(probe_runs(config, family))
    problems = []
    for benchmark, model, mode in sorted(runs):
        control = config["models"][model].get("control")
        if control in config["models"] and control != model and (benchmark, control, mode) not in runs:
            probe = f"{family}_{mode}" if mode else family
            problems.append(f"models.{model}.control: {family} pairs {model!r} with {control!r}, which "
                            f"probes.{probe} does not run on {benchmark!r}; add {control!r} to its models")
    return problems


def check_controls(config: dict) -> list[str]:
    """Each declared ``control`` paired where its model is (:func:`unpaired_controls`, per family that pairs
    models), and read at all: a control on a model no such family probes would change nothing."""
    paired = [fam.name for fam in FAMILIES.values() if fam.paired]
    problems = [problem for family in paired for problem in unpaired_controls(config, family)]
    probed = {m for family in paired for _, m, _ in probe_runs(config, family)}
    for name, entry in config["models"].items():
        control = entry.get("control")
        if control in config["models"] and control != name and "base" not in entry and name not in probed:
            problems.append(f"models.{name}.control: only {' and '.join(paired)} pair a model with its control, "
                            f"and none of them probes {name!r}; probe it there or remove control")
    return problems


def scored(config: dict) -> dict[str, list[str]]:
    """Per labelled benchmark, the models some probe scores there (a probe's ``benchmarks:`` list can leave
    one out): what the membership statistics, selection and figures cover. An unlabelled benchmark
    (:func:`memaudit.config.is_labelled`) has no members to score against; its family's own tables cover it."""
    return {b: [m for m in sorted(config["models"]) if probes_for_model(config, m, b)]
            for b in sorted(config["benchmarks"]) if is_labelled(config["benchmarks"][b])}


def probe_documents(config: dict, benchmark: str, model: str) -> list[str]:
    """Per-document score tables of every probe run for (benchmark, model)."""
    return [f"results/scores/{benchmark}/{model}/{probe}_documents.csv"
            for probe in probes_for_model(config, model, benchmark)]


def unprobed_pair(config: dict, benchmark: str, model: str) -> str:
    """Why a (benchmark, model) of the config has no metrics or figures to make: no probe runs the model there,
    so a target of them asked for by name (``results/metrics/qa/smollm2-135m.csv``) cannot be made."""
    return (f"no probe of the config runs model {model!r} on benchmark {benchmark!r}, so it has no scores for its "
            f"metrics or figures; add both to a probe's models and benchmarks lists (`snakemake -n all` lists what "
            f"the config makes)")


def api_probe_outputs(config: dict) -> list[str]:
    """Every probe output of an API model: the cost ledger is written after the last request."""
    return [doc for b in sorted(config["benchmarks"]) for m in api_models(config)
            for doc in probe_documents(config, b, m)]


def job_runtime(own: int | None, model_minutes: Sequence[int], attempt: int, *, profile=None):
    """A job's time limit (minutes) at its ``attempt``: the rule's ``own`` (None: ``profile``, the profile's
    default as evaluated for this attempt, the user's to scale), raised to the largest of its models'
    ``model_minutes`` (0: none set). The rule's and the models' grow with the attempt: a job retried after it
    hit its time limit (the profile's ``retries``) was given the same limit again, and hit it again."""
    base = own * attempt if own is not None else profile
    most = max([0, *model_minutes]) * attempt
    if not most:
        return base
    return max(base, most) if isinstance(base, int) else most


def api_role_models(config: dict) -> list[str]:
    """The API models of the config serving a family's role (DE-COP's and KTD's paraphraser, CopyBench's
    extractor, question writer and judges, the cloze probes' reference and filter), by name."""
    return sorted({m for f in FAMILIES for r in FAMILIES[f].roles if (m := role_model(config, f, r))
                   and m in config["models"] and is_api_model(config["models"][m])})


def api_ledger_inputs(config: dict, family_outputs: Sequence[str]) -> list[str]:
    """What the cost ledger waits for: every probe output of an API model under test and, where an API model
    serves a role, every family's final outputs (``family_outputs``: the rule files' registered ones), which
    wait for the jobs that call it: the paraphrases (DE-COP, KTD), CopyBench's items, questions and judged
    probes of local models, the cloze probes' items. On the probe outputs alone, the ledger was written while
    (or before) those jobs paid for their requests, and never again: their cost was missing from it."""
    outputs = api_probe_outputs(config)
    if api_role_models(config):
        outputs += [o for o in family_outputs if o not in outputs]
    return outputs


def reference_models(config: dict, model: str) -> list[str]:
    """The token_prob reference models of ``model`` (never the model itself)."""
    tp = config["probes"].get("token_prob", {})
    if "reference" not in tp.get("methods", []):
        return []
    return [r for r in tp.get("reference_models", []) if r != model]


def lowercase_pass(config: dict, benchmark: str, model: str) -> bool:
    """Whether (benchmark, model) gets a pass over the lowercased passages (a ``token_stats_lowercase`` job): for
    the ``lowercase`` score of a model token_prob scores there. A model read only as a reference is read as its
    original pass (``ref_<model>``); a second pass would double its forward passes for nothing."""
    tp = config["probes"].get("token_prob", {})
    return "lowercase" in tp.get("methods", []) and "token_prob" in probes_for_model(config, model, benchmark)


def metrics_tables(config: dict) -> list[str]:
    tables = [f"results/metrics/{b}/{m}.csv" for b, models in scored(config).items() for m in models]
    if config["stats"]["blind_baseline"]:
        tables += [f"results/metrics/{b}/blind_baseline.csv" for b in sorted(config["benchmarks"])
                   if is_labelled(config["benchmarks"][b])]
    return tables


def selection_tables(config: dict) -> list[str]:
    """The per-(benchmark, model) conformal BH tables the metrics jobs write beside their metrics."""
    return [f"results/selection/{b}/{m}.csv" for b, models in scored(config).items() for m in models]


def label_provenance(config: dict) -> dict[str, dict]:
    """``{benchmark: {labels, null_control, families}}`` (:func:`memaudit.config.label_provenance`, and the
    probe families this config runs on the benchmark, ``;``-joined in registry order): the summary's
    ``benchmarks.csv``, which tells the headline where a base model is a null control and which families'
    tables are this run's (one left in ``results/summary`` by a run of another config is not)."""
    probed = {f: {b for b, _, _ in probe_runs(config, f)} for f in FAMILIES}
    return {name: {**provenance(bench, int(config["seed"])),
                   "families": ";".join(f for f in FAMILIES if name in probed[f])}
            for name, bench in sorted(config["benchmarks"].items())}


def idle_entries(config: dict) -> list[str]:
    """One line per benchmark or model that the config names but nothing runs on (a probe list that
    leaves it out, as an explicit ``benchmarks:``/``models:`` list does): the workflow warns, since such
    a benchmark is only a dataset and such a model is prepared (trained, converted) for nothing.

    A model is in use when a probe runs it, a family's role names it (paraphraser, judge, reference,
    filter...), it is a token_prob reference model, or it is the base or control of a model in use;
    a benchmark when a probe runs on it or a model in use is fine-tuned on its members.
    """
    from memaudit.config import control_of
    from memaudit.probes.registry import named_role_model, role_model

    runs = [run for family in FAMILIES for run in probe_runs(config, family)]
    used = {m for _, m, _ in runs}
    # a role outside DEFAULTED_ROLES runs only where the config names its model: role_model's fallback (the
    # first local model by name) is loaded by no job there
    used |= {role_model(config, f, r) if (f, r) in DEFAULTED_ROLES else
             role_model(config, f, r) and named_role_model(config, f, r)
             for f in FAMILIES for r in FAMILIES[f].roles} - {None}
    grown = None
    while grown != used:
        grown = set(used)
        for m in grown:
            entry = config["models"].get(m, {})
            used |= set(reference_models(config, m)) | {x for x in (entry.get("base"), control_of(entry)) if x}
    probed = {b for b, _, _ in runs} | {b for m in used for b in contaminated_on(config["models"].get(m, {}))}
    lines = [f"benchmarks.{b}: no probe runs on it (no probes.<probe>.benchmarks list names it): only its "
             "dataset and the model-free blind baseline are made"
             for b in sorted(config["benchmarks"]) if b not in probed]
    lines += [f"models.{m}: no probe runs it and no role, reference, base or control names it: it is prepared "
              "for nothing (add it to a probe's models list, or remove it)" for m in sorted(config["models"])
              if m not in used]
    return lines + _idle_probes(config)


def _idle_probes(config: dict) -> list[str]:
    """One line per probe block whose ``models:`` or ``benchmarks:`` list is empty: it passed every check, and the
    run went by without a word of the probe. (A block the schema fills in, token_prob's, that finds nothing to
    run on, an API model only, say, is no mistake of the user's: no line.)"""
    from memaudit.probes.registry import enabled_probes

    from memaudit.config import load_schema

    on_by_default = {name for name, block in load_schema()["properties"]["probes"]["properties"].items()
                     if isinstance(block, dict) and "default" in block}
    lines = []
    for probe in enabled_probes(config):
        empty = [key for key in ("models", "benchmarks") if config["probes"][probe].get(key) == []]
        if empty:
            # token_prob's block is there by default: removed, it would run on every local model
            off = ("an empty list is how this probe, on by default, is turned off: list what it should run on "
                   "if it is meant to run" if probe in on_by_default else
                   "list what it should run on, or remove the block")
            lines.append(f"probes.{probe}: runs on nothing (its {' and '.join(empty)} "
                         f"list{'s are' if len(empty) > 1 else ' is'} empty): {off}")
    return lines


# roles that fall back on the first local model by name when the config names none
DEFAULTED_ROLES = (("decop", "paraphraser"), ("cloze", "reference"))


def defaulted_roles(config: dict) -> list[str]:
    """One line per role of :data:`DEFAULTED_ROLES` that the config leaves to its default while the family
    runs and more than one local model could take it: the default is the first local model by name, so a
    model added later under an earlier name would take the role over (and rerun what the role made)."""
    from memaudit.probes.registry import named_role_model, role_model

    lines = []
    for family, role in DEFAULTED_ROLES:
        model = role_model(config, family, role)
        if model is not None and not named_role_model(config, family, role) and len(local_models(config)) > 1:
            lines.append(f"probes.{FAMILIES[family].roles[role]}: not set, so the {family} {role} is {model!r}, the "
                         "first local model by name; name it, or a model added later under an earlier name takes "
                         "its place")
    return lines


def final_outputs(config: dict) -> list[str]:
    """What ``snakemake all`` builds, less what the families register in their rule files."""
    by_benchmark = scored(config)
    return [
        "results/summary/metrics.csv",
        "results/summary/metrics.md",
        "results/summary/models.csv",
        "results/summary/benchmarks.csv",
        "results/summary/selection.csv",
        "results/figures/selection_fdr_power.png",
        "results/api/ledger.csv",
        *[f"results/figures/{b}/{m}/{fig}.png" for b, models in by_benchmark.items() for m in models
          for fig in ("roc", "score_distributions")],
        # model size is known for local models only: a benchmark scored by API models alone has no such figure
        *[f"results/figures/{b}/auc_vs_size.png" for b, models in by_benchmark.items()
          if any(not is_api_model(config["models"][m]) for m in models)],
    ]


# ----------------------------------------------------------------------------- auxiliary models by role

def role_input(config: dict, family: str, role: str) -> dict[str, str]:
    """``{role: results/models/<model>}``: the prepared local model a role's job loads (``{}`` for an API model)."""
    model = role_model(config, family, role)
    return {role: path for path in model_dir(config, model).values()} if model else {}


def auxiliary_model_settings(config: dict, model: str, *, scoring: bool = False) -> dict:
    """What a job loading ``model`` beside the model under test (a role's model, a reference) computes with
    beyond the prepared weights it reads as an input (a model re-trained or re-converted is newer, which
    reruns the job): an API model's entry less scheduling (:func:`memaudit.config.model_scoring_settings`),
    since it has no weights and its entry decides every answer (``api.model_id``, ``base_url``); and with
    ``scoring`` (a reference, a logit filter: it reads texts cut at its ``max_tokens``) a local model's
    :data:`~memaudit.config.SCORING_KEYS` set to other than the schema's defaults. ``{}`` otherwise."""
    from memaudit.backends.settings import _schema_defaults
    from memaudit.config import SCORING_KEYS, model_scoring_settings

    entry = config["models"][model]
    if is_api_model(entry):
        return canonical(model_scoring_settings(entry))
    if not scoring:
        return {}
    defaults = _schema_defaults("properties", "models", "additionalProperties")
    return {k: entry[k] for k in SCORING_KEYS if k in entry and entry[k] != defaults.get(k)}


def with_role_models(settings: dict, config: dict, models: dict[str | None, bool]) -> dict:
    """``settings`` (a job's params) with ``role_models``: :func:`auxiliary_model_settings` of each model of
    ``models`` (name -> whether the job scores texts with it; None: no model) that has any, so that changing
    an API judge's model or a reference's ``max_tokens`` reruns the jobs that used it. Without any, ``settings``
    as they were: the params of a job whose auxiliary models are local stay those finished runs recorded."""
    extra = {m: s for m, scoring in sorted((m, s) for m, s in models.items() if m in config["models"])
             if (s := auxiliary_model_settings(config, m, scoring=scoring))}
    return canonical({**settings, "role_models": extra}) if extra else settings
