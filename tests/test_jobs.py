"""The run's job list as data (memaudit.jobs, memaudit.probes.registry): checked against configs by hand."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from memaudit import jobs
from memaudit.errors import ConfigError
from memaudit.probes.registry import FAMILIES, PROBES, load_callable, modes_of, role_model, runner_of
from workflow_helpers import ROOT

CI = jobs.validate_config(yaml.safe_load((ROOT / "config" / "ci.yaml").read_text()))
DEMO = jobs.validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


def test_probes_are_derived_from_the_family_declarations():
    assert set(PROBES) == {"token_prob", "prefix", "decop_logit", "decop_blackbox", "decop_likelihood",
                           "copybench_literal", "copybench_nonliteral", "copybench_qa", "ktd", "cloze_blackbox",
                           "cloze_logit"}
    # cloze: items once per benchmark; the logit mode reads the model's own word ranks
    assert PROBES["cloze_logit"].reads == PROBES["cloze_blackbox"].reads == "cloze_items.jsonl"
    assert PROBES["cloze_logit"].needs == frozenset({"word_logprobs"})
    assert PROBES["cloze_blackbox"].needs == frozenset({"generate"})
    # KTD's knockoffs are DE-COP's paraphrase pool; it needs gradients, which no API backend serves
    assert PROBES["ktd"].reads == "decop_items.jsonl"
    assert PROBES["ktd"].needs == frozenset({"token_logprobs", "gradient_norms"})
    assert load_callable(FAMILIES["ktd"].checks).__name__ == "check_config"
    assert PROBES["copybench_literal"].reads == "copybench_literal.jsonl"
    assert PROBES["copybench_nonliteral"].reads == "copybench_nonliteral.jsonl"
    assert PROBES["copybench_qa"].reads == "copybench_qa.jsonl"
    assert modes_of("decop") == ["logit", "blackbox", "likelihood"]
    assert PROBES["decop_logit"].needs == frozenset({"option_logprobs"})
    assert PROBES["decop_logit"].reads == "decop_items.jsonl" and PROBES["decop_logit"].family == "decop"
    from memaudit.probes.decop.runner import MODES, run_job

    assert MODES == ("logit", "blackbox", "likelihood") and runner_of("decop") is run_job
    assert load_callable(FAMILIES["prefix"].planner).__name__ == "plan_records"


def test_runners_and_planners_are_imported_only_when_asked():
    import subprocess
    import sys

    code = ("import sys, memaudit.probes.registry, memaudit.jobs; "
            "print(sorted(m for m in ('torch', 'openai', 'anthropic', 'memaudit.probes.decop.runner') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_config_checks_import_no_numpy_or_pandas():
    # every family's `checks` hook runs in `memaudit check-config` and while Snakemake reads the Snakefile:
    # token_prob's (two Min-K% ratios named alike) once pulled in pandas, tripling check-config's time
    import subprocess
    import sys

    # prefix's (config/config.yaml runs it) lived in its pandas runner; the `methods` hooks (loaded once a
    # method list is set: check_method_lists) in token_prob's, copybench's and prefix's numpy modules
    heavy = "print(sorted(m for m in ('numpy', 'pandas', 'torch') if m in sys.modules))"
    for name in ("ci", "config"):
        code = f"import sys; from memaudit.jobs import load_config; load_config('config/{name}.yaml'); {heavy}"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
        assert out.strip() == "[]", name
    # every method list set: every family the demo runs names its methods
    code = ("import sys, yaml; from memaudit import jobs\n"
            "raw = yaml.safe_load(open('config/config.yaml'))\n"
            "lists = ['loss', 'min_k_20pct', 'prefix_rougeL', 'copybench_rougeL', 'ktd_w_gradnorm', 'cloze_rank']\n"
            "raw.setdefault('figures', {})['headline_methods'] = lists\n"
            "raw.setdefault('stats', {}).setdefault('selection', {})['figure_methods'] = lists[::-1]\n"
            "config = jobs.validate_config(raw)\n"
            "assert [k for k in jobs.METHOD_LISTS] == ['figures.headline_methods', 'stats.selection.figure_methods']\n"
            "print(sorted({f.methods.split(':')[0] for f in jobs.FAMILIES.values() if jobs.probe_runs(config, f.name)}"
            " - set(sys.modules)))\n"
            f"{heavy}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split("\n")[:2] == ["[]", "[]"]  # every running family's methods hook loaded; no numpy, pandas, torch


def test_a_config_check_parses_the_schema_once(monkeypatch):
    # the validator, the API settings' defaults and check_method_lists' defaults each read the schema:
    # parsed each time, the two extra parses cost check-config half its time again
    import memaudit.config as cfg

    parsed = []
    real = cfg.yaml.load

    def counting(stream, Loader):
        parsed.append(getattr(stream, "name", None))
        return real(stream, Loader=Loader)

    cfg._parsed_schema.cache_clear()
    monkeypatch.setattr(cfg.yaml, "load", counting)
    jobs.load_config(ROOT / "config" / "ci.yaml")
    jobs.load_config(ROOT / "config" / "config.yaml")
    assert parsed.count(str(cfg.SCHEMA_PATH)) == 1
    first = cfg.load_schema()
    first["properties"].clear()  # a caller's copy: changing it changes no one else's
    assert "figures" in cfg.load_schema()["properties"]


def test_the_schema_parsed_by_libyaml_is_the_document_pyyamls_own_parser_reads():
    import yaml

    import memaudit.config as cfg

    assert yaml.__with_libyaml__  # PyYAML's wheels carry it: the schema is read by it, not the slow parser
    cfg._parsed_schema.cache_clear()
    text = cfg.SCHEMA_PATH.read_text(encoding="utf-8")
    pure = yaml.load(text, Loader=yaml.SafeLoader)
    assert cfg.load_schema() == pure
    assert json.dumps(cfg.load_schema(), sort_keys=True) == json.dumps(pure, sort_keys=True)  # types too


def test_a_modules_version_table_is_read_again_after_the_file_changes(tmp_path, monkeypatch):
    from memaudit import versions

    (tmp_path / "versioned_mod.py").write_text("TABLE = {'a': 1}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert versions._literal("versioned_mod", "TABLE") == {"a": 1}
    versions._literal("versioned_mod", "TABLE")["a"] = 5  # a caller's copy
    assert versions._literal("versioned_mod", "TABLE") == {"a": 1}
    (tmp_path / "versioned_mod.py").write_text("TABLE = {'a': 22}\n")
    assert versions._literal("versioned_mod", "TABLE") == {"a": 22}
    with pytest.raises(LookupError, match="versioned_mod assigns no top-level OTHER"):
        versions._literal("versioned_mod", "OTHER")


def test_probe_runs_follow_each_probes_models_and_benchmarks():
    assert jobs.probe_runs(CI, "decop") == [
        ("novels", "smollm2-135m-contaminated", "logit"),
        ("novels", "tiny-gpt2-small", "likelihood"),
        ("novels", "tiny-gpt2-small-contaminated", "likelihood"),
    ]
    assert [(b, m) for b, m, _ in jobs.probe_runs(CI, "token_prob")] == [
        (b, m) for b in ("news", "novels") for m in sorted(CI["models"]) if not m.startswith("tiny-gpt2-cb")]
    assert jobs.probe_runs(CI, "copybench") == [
        ("books", m, mode) for mode in ("literal", "nonliteral") for m in ("tiny-gpt2-cb", "tiny-gpt2-cb-books")]
    assert jobs.scored(CI)["books"] == ["tiny-gpt2-cb", "tiny-gpt2-cb-books"]  # CopyBench's pair only
    assert jobs.probe_runs(CI, "prefix") == []  # not configured
    # a benchmark that token_prob leaves out (the demo's techdocs until session 57, DE-COP's and KTD's): only
    # DE-COP's models are scored there
    docs = copy.deepcopy(DEMO)
    docs["benchmarks"]["techdocs"] = {**docs["benchmarks"]["novels"], "sources": ["pydoc_topics"], "n_documents": 24}
    docs["probes"]["decop_likelihood"]["benchmarks"] = ["novels", "techdocs"]
    assert jobs.scored(docs)["techdocs"] == sorted(docs["probes"]["decop_likelihood"]["models"])
    # every model but CopyBench's and the cloze probes' QA- and news-contaminated ones
    assert jobs.scored(DEMO)["novels"] == sorted(m for m in DEMO["models"] if m not in (
        "tiny-gpt2-medium-books", "tiny-gpt2-medium-qa", "tiny-gpt2-medium-news"))
    # CopyBench's summary pairs only the models it probes (a model added elsewhere reruns none of it)
    from memaudit.probes.copybench import plan as copybench_plan

    assert copybench_plan.bases(DEMO) == {"tiny-gpt2-medium-books": "tiny-gpt2-medium"}
    assert copybench_plan.bases(CI) == {"tiny-gpt2-cb-books": "tiny-gpt2-cb"}


def test_probe_documents_and_final_outputs_of_one_pair():
    assert jobs.probe_documents(CI, "novels", "smollm2-135m-contaminated") == [
        "results/scores/novels/smollm2-135m-contaminated/token_prob_documents.csv",
        "results/scores/novels/smollm2-135m-contaminated/decop_logit_documents.csv",
    ]
    outputs = jobs.final_outputs(CI)
    assert "results/figures/news/tiny-gpt2-small/roc.png" in outputs
    # every model but CopyBench's pair on novels and news, the pair on books
    assert len([o for o in outputs if o.endswith("roc.png")]) == 2 * (len(CI["models"]) - 2) + 2


def test_an_api_model_gets_black_box_probes_no_weights_and_a_ledger_entry():
    cfg = copy.deepcopy(CI)
    cfg["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-4o-mini-2024-07-18",
                                                         "api_key_env": "OPENAI_API_KEY",
                                                         "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}
    cfg["probes"]["prefix"] = {}
    cfg = jobs.validate_config(cfg)
    assert jobs.model_dir(cfg, "gpt") == {} and jobs.model_dir(cfg, "tiny-gpt2-small") == {
        "model": "results/models/tiny-gpt2-small"}
    assert "gpt" not in jobs.local_models(cfg) and jobs.api_models(cfg) == ["gpt"]
    assert jobs.api_probe_outputs(cfg) == [f"results/scores/{b}/gpt/prefix_documents.csv"
                                           for b in ("books", "news", "novels")]


def test_a_model_that_cannot_serve_a_named_probe_is_a_config_error_naming_both():
    cfg = copy.deepcopy(CI)
    cfg["models"]["served"] = {"backend": "openai", "api": {"model_id": "local", "base_url": "http://127.0.0.1:1/v1",
                                                            "api_key_env": "SERVED_KEY", "logprobs": False}}
    cfg["probes"]["decop_logit"]["models"] = ["served"]
    with pytest.raises(ConfigError) as err:
        jobs.validate_config(cfg)
    # placed at the list that names the model for the probe (the usual fix), not at its backend
    assert ("probes.decop_logit.models.0: probe 'decop_logit' needs option_logprobs, which model 'served' "
            "(backend 'openai', api.logprobs: false) cannot serve") in str(err.value)
    cfg["models"]["served"]["api"]["logprobs"] = True
    assert jobs.validate_config(cfg)["probes"]["decop_logit"]["models"] == ["served"]


def test_roles_name_their_model_or_default_to_the_first_local_model():
    assert role_model(CI, "decop", "paraphraser") == "smollm2-135m"
    assert jobs.role_input(CI, "decop", "paraphraser") == {"paraphraser": "results/models/smollm2-135m"}
    cfg = copy.deepcopy(CI)
    del cfg["probes"]["decop"]["paraphrase"]["model"]
    assert role_model(cfg, "decop", "paraphraser") == "smollm2-135m"  # first local model, sorted
    cfg["probes"]["decop"]["paraphrase"]["model"] = "nope"
    with pytest.raises(ConfigError, match=r"probes\.decop\.paraphrase\.model: unknown model 'nope'"):
        jobs.check_config(cfg)
    for probe in ("decop", "decop_logit", "decop_likelihood"):
        cfg["probes"].pop(probe)
    assert role_model(cfg, "decop", "paraphraser") is None and jobs.role_input(cfg, "decop", "paraphraser") == {}


def test_a_role_models_params_hold_what_its_weights_do_not():
    """An API model's entry (less scheduling and how its requests are sent) and a scoring role's
    max_tokens/batch_size set off their defaults join a job's params; a local model otherwise adds nothing
    (its weights are an input)."""
    cfg = copy.deepcopy(CI)
    cfg["models"]["served"] = {"backend": "openai", "gpus": 0, "api": {
        "model_id": "m-1", "logprobs": False, "concurrency": 2, "timeout": 90, "max_retries": 1,
        "api_key_env": "KEY", "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}
    cfg["models"]["tiny-gpt2-cb"]["max_tokens"] = 48
    settings = {"top_k": 4}
    assert jobs.auxiliary_model_settings(cfg, "served") == {"api": {"logprobs": False, "model_id": "m-1"},
                                                           "backend": "openai"}
    assert jobs.auxiliary_model_settings(cfg, "tiny-gpt2-cb") == {}
    assert jobs.auxiliary_model_settings(cfg, "tiny-gpt2-cb", scoring=True) == {"max_tokens": 48}
    assert jobs.auxiliary_model_settings(cfg, "tiny-gpt2-small", scoring=True) == {}  # the defaults, 512 and 8
    assert jobs.with_role_models(settings, cfg, {None: False, "tiny-gpt2-small": True, "smollm2-135m": False}) \
        is settings
    assert jobs.with_role_models(settings, cfg, {"tiny-gpt2-cb": True, "served": False}) == {
        "role_models": {"served": {"api": {"logprobs": False, "model_id": "m-1"}, "backend": "openai"},
                        "tiny-gpt2-cb": {"max_tokens": 48}},
        "top_k": 4}


def test_model_priorities_and_inputs(tmp_path):
    assert [jobs.model_priority(CI["models"][m]) for m in ("smollm2-135m", "smollm2-135m-contaminated",
                                                          "tiny-gpt2-small")] == [30, 20, 10]
    assert jobs.model_inputs(CI, "smollm2-135m-contaminated") == {
        "base": "results/models/smollm2-135m", "members": ["results/datasets/novels/documents.jsonl"]}
    assert jobs.model_inputs(CI, "tiny-gpt2-small") == {"pretrain": "results/pretrain/documents.jsonl"}
    assert jobs.model_inputs(CI, "smollm2-135m") == {}
    # a checkpoint given by path: its files (hidden ones left out), so one replaced in place reruns the model
    given = tmp_path / "ckpt"
    (given / "sub").mkdir(parents=True)
    (given / ".git").mkdir()
    for name in ("config.json", "model.safetensors", "sub/tokenizer.json", ".git/HEAD"):
        (given / name).write_text("x")
    config = {"models": {"given": {"source": {"path": str(given)}}}}
    assert jobs.model_inputs(config, "given") == {"weights": [str(given / n) for n in
                                                              ("config.json", "model.safetensors", "sub/tokenizer.json")]}
    config["models"]["given"]["source"]["path"] = str(given / "model.safetensors")  # a single file (GGUF, say)
    assert jobs.model_inputs(config, "given") == {"weights": [str(given / "model.safetensors")]}
    # nothing there (a typo): the path itself, so that Snakemake's missing-input error names it before any job
    config["models"]["given"]["source"]["path"] = str(tmp_path / "ckpt-typo")
    assert jobs.model_inputs(config, "given") == {"weights": [str(tmp_path / "ckpt-typo")]}
    assert jobs.reference_models(CI, "tiny-gpt2-small") == []  # never its own reference
    assert jobs.reference_models(CI, "smollm2-135m") == ["tiny-gpt2-small"]


def test_canonical_sorts_every_mapping():
    assert list(jobs.canonical({"b": 1, "a": {"d": [{"z": 0, "y": 1}], "c": 2}})) == ["a", "b"]
    assert list(jobs.canonical({"a": [{"z": 0, "y": 1}]})["a"][0]) == ["y", "z"]


def test_benchmarks_csv_names_the_families_each_benchmark_is_probed_by():
    """What the summary writes to benchmarks.csv's ``families`` (the headline shows only those families'
    tables): each family whose probes run on the benchmark, in registry order."""
    assert {b: p["families"] for b, p in jobs.label_provenance(DEMO).items()} == {
        "books": "copybench", "news": "token_prob;prefix;cloze", "novels": "token_prob;decop;ktd", "qa": "cloze"}
    off = copy.deepcopy(DEMO)
    del off["probes"]["ktd"]
    assert jobs.label_provenance(off)["novels"]["families"] == "token_prob;decop"


def test_a_benchmark_or_model_nothing_runs_on_is_named_in_a_warning():
    """Probe lists that leave out a new benchmark or model (as ci.yaml's explicit lists do): the benchmark
    is only a dataset and the model is prepared for nothing; the shipped configs have neither."""
    from memaudit.jobs import idle_entries, load_config

    for name in ("config.yaml", "ci.yaml", "gpu.yaml"):
        assert idle_entries(load_config(ROOT / "config" / name)) == [], name
    cfg = copy.deepcopy(load_config(ROOT / "config" / "ci.yaml"))
    cfg["benchmarks"]["idle"] = dict(cfg["benchmarks"]["news"])
    cfg["models"]["zz-lonely"] = {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}
    # a base that only its fine-tuned copy's probes reach is in use through it
    cfg["models"]["zz-tuned"] = {**copy.deepcopy(cfg["models"]["tiny-gpt2-small-contaminated"]), "base": "zz-base"}
    cfg["models"]["zz-base"] = {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}
    cfg["probes"]["token_prob"]["models"].append("zz-tuned")
    assert idle_entries(cfg) == [
        "benchmarks.idle: no probe runs on it (no probes.<probe>.benchmarks list names it): only its dataset and the model-free blind baseline are made",
        "models.zz-lonely: no probe runs it and no role, reference, base or control names it: it is prepared for "
        "nothing (add it to a probe's models list, or remove it)"]


def test_a_probe_that_runs_on_nothing_is_named_in_a_warning():
    """``models: []`` or ``benchmarks: []`` passed every check, and the probe's results were simply missing."""
    from memaudit.jobs import idle_entries, load_config

    cfg = copy.deepcopy(load_config(ROOT / "config" / "ci.yaml"))
    cfg["probes"]["decop_logit"]["models"] = []
    cfg["probes"]["cloze_logit"].update(models=[], benchmarks=[])
    cfg["probes"]["prefix"] = {"models": ["tiny-gpt2-small"], "benchmarks": ["news"]}
    assert idle_entries(cfg) == [
        "probes.decop_logit: runs on nothing (its models list is empty): list what it should run on, or remove "
        "the block",
        "probes.cloze_logit: runs on nothing (its models and benchmarks lists are empty): list what it should run "
        "on, or remove the block"]  # and not the prefix block, which runs on one model and benchmark
    # token_prob's block is on by default: an empty list is the way to turn it off, removing it would not be
    cfg["probes"]["token_prob"]["models"] = []
    assert ("probes.token_prob: runs on nothing (its models list is empty): an empty list is how this probe, on by "
            "default, is turned off: list what it should run on if it is meant to run") in idle_entries(cfg)


def test_a_model_first_by_name_is_idle_where_only_unset_optional_roles_would_name_it():
    """CopyBench's judges, extractor and QA writer and the cloze knowledge filter run only where the config
    names a model (role_model's first-local-model fallback is never loaded for them): an unused model that
    sorts first by name is prepared for nothing all the same, and was not named in the warning."""
    from memaudit.jobs import idle_entries, load_config

    cfg = copy.deepcopy(load_config(ROOT / "config" / "ci.yaml"))
    cfg["models"]["aa-lonely"] = {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}
    assert role_model(cfg, "copybench", "event_judge") == "aa-lonely"  # the fallback, which no job loads
    assert idle_entries(cfg) == [
        "models.aa-lonely: no probe runs it and no role, reference, base or control names it: it is prepared for "
        "nothing (add it to a probe's models list, or remove it)"]
    cfg["probes"]["copybench"]["event_judge"]["model"] = "aa-lonely"
    assert idle_entries(cfg) == []


def test_a_role_left_to_the_first_local_model_by_name_is_named_in_a_warning():
    from memaudit.jobs import defaulted_roles, load_config

    cfg = copy.deepcopy(load_config(ROOT / "config" / "ci.yaml"))
    assert defaulted_roles(cfg) == []  # the shipped configs name both roles
    del cfg["probes"]["decop"]["paraphrase"]["model"]
    cfg["probes"]["cloze"]["reference"].pop("model")
    first = sorted(jobs.local_models(cfg))[0]
    assert defaulted_roles(cfg) == [
        f"probes.decop.paraphrase.model: not set, so the decop paraphraser is {first!r}, the first local model by "
        "name; name it, or a model added later under an earlier name takes its place",
        f"probes.cloze.reference.model: not set, so the cloze reference is {first!r}, the first local model by name; "
        "name it, or a model added later under an earlier name takes its place"]


def test_story_items_too_few_events_to_reach_the_event_threshold_are_named_in_one_warning():
    """With n_events <= 5 a built story item holds at most 4 reference events (its beginning is not one), so
    no story reaches the paper's 5 events found and the event-copying rate is 0 whatever the model does.
    A warning, not an error: small test configs use n_events 5. Published CopyBench items carry their own."""
    from memaudit.jobs import load_config
    from memaudit.probes.copybench.plan import config_warnings

    for name in ("config.yaml", "ci.yaml", "gpu.yaml"):
        assert config_warnings(load_config(ROOT / "config" / name)) == [], name
    cfg = copy.deepcopy(load_config(ROOT / "config" / "ci.yaml"))
    cfg["probes"]["copybench"]["n_events"] = 5
    assert config_warnings(cfg) == [
        "probes.copybench.n_events: 5 events a book leave each built story item at most 4 reference events (its "
        "beginning is not one), fewer than the 5 found that count a story as event copying: copybench_events "
        "(events>=5) on benchmark books can only be 0; give n_events at least 6"]
    cfg["probes"]["copybench_nonliteral"]["benchmarks"] = []
    assert config_warnings(cfg) == []


def test_figure_labels_name_the_methods_each_figure_draws():
    """The report's labels of a (benchmark, model)'s ROC and distribution figures name the methods they draw
    (:func:`memaudit.stats.workflow.select_methods`: the headline and reference methods its probes write,
    else every method): they were figures.headline_methods and the token_prob references whatever the
    model, so CopyBench's pair on the ci books, drawn with its copybench scores, was labelled loss, zlib,
    ..., and the demo's every figure named lowercase, which it turns off."""
    headline = "loss, zlib, lowercase, min_k_20pct, min_k_plus_plus_20pct"
    assert jobs.figure_labels(CI, "novels", "smollm2-135m") == {
        "benchmark": "novels", "model": "smollm2-135m", "methods": f"{headline}, ref_tiny-gpt2-small"}
    assert jobs.figure_labels(CI, "novels", "tiny-gpt2-small")["methods"] == headline  # its own reference
    cb = ("copybench_rougeL, copybench_rougeL_excess, copybench_rougeL_memfree, copybench_rougeL_excess_memfree, "
          "copybench_characters, copybench_events, copybench_characters_memfree, copybench_events_memfree")
    assert jobs.figure_labels(CI, "books", "tiny-gpt2-cb")["methods"] == cb
    assert jobs.size_figure_labels(CI, "novels") == {"benchmark": "novels", "model": "all local models",
                                                     "methods": headline}
    assert jobs.size_figure_labels(CI, "books")["methods"] == cb  # no headline method there: every one
    assert jobs.figure_labels(DEMO, "novels", "tiny-gpt2-small")["methods"] == (
        "loss, zlib, min_k_20pct, min_k_plus_plus_20pct, ref_smollm2-135m")


def test_an_api_model_without_its_key_is_an_error_for_the_jobs_about_to_run(monkeypatch):
    """The API models whose key variable is not set, among the jobs about to run (each job's {model} and the
    API slots it claims); a job of the model that sends nothing (its metrics), a model no job sends to, or a
    keyless server of one's own, is no concern."""
    from memaudit.workflow_support import api_key_problems

    monkeypatch.delenv("AUDIT_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("JUDGE_KEY", "sk-set")
    api = {"base_url": "http://127.0.0.1:9/v1"}
    config = {"models": {
        "suspect": {"backend": "openai", "api": {**api, "model_id": "suspect-v1", "api_key_env": "AUDIT_KEY"}},
        "gpt": {"backend": "openai", "api": {"model_id": "gpt-4o-mini-2024-07-18"}},  # OpenAI's own: OPENAI_API_KEY
        "judge": {"backend": "anthropic", "api": {"model_id": "claude-x", "api_key_env": "JUDGE_KEY"}},
        "mine": {"backend": "openai", "api": {**api, "model_id": "served"}},  # a server of one's own: no key
        "local": {"source": {"builtin": "smollm2-135m-instruct"}}},
        "probes": {"cloze": {"filter": {"model": "gpt"}}, "cloze_blackbox": {}}}
    slots = {"api_openai": 2, "api_anthropic": 0}
    runs = [("local", {"api_openai": 0, "api_anthropic": 0}), ("suspect", slots), ("mine", slots), ("judge", {})]
    assert api_key_problems(config, runs) == [
        "config key models.suspect.api.api_key_env: environment variable AUDIT_KEY is not set; export the API key "
        "in it before the run (the config names the variable, never the key)"]
    # cloze_items, which claims the filter's slots, has no {model}: the role's model is asked
    assert api_key_problems(config, [(None, slots)]) == [
        "config key models.gpt.api.api_key_env: environment variable OPENAI_API_KEY is not set; export the API key "
        "in it before the run (the config names the variable, never the key)"]
    assert api_key_problems(config, [runs[0], runs[2], ("suspect", {"api_openai": 0})]) == []
    # blank, it is unset; two keys pasted, no request could carry it: each one line (the second was a ConfigError)
    monkeypatch.setenv("AUDIT_KEY", "  ")
    assert api_key_problems(config, runs[1:2]) == [
        "config key models.suspect.api.api_key_env: environment variable AUDIT_KEY is not set; export the API key "
        "in it before the run (the config names the variable, never the key)"]
    monkeypatch.setenv("AUDIT_KEY", "sk-one sk-two")
    assert api_key_problems(config, runs[1:2]) == [
        "config key models.suspect.api.api_key_env: openai model 'suspect': environment variable AUDIT_KEY holds a "
        "space, line break or non-ASCII character inside the key (two keys pasted, a typographic quote?); the "
        "value is not shown"]


def test_a_model_sending_more_requests_at_once_than_resources_allow_is_an_error_before_the_run():
    """Snakemake lowers a job's claim of ``api_<backend>`` above ``--resources api_<backend>=N`` to N and runs it,
    and the job's model still sent its concurrency at once: the cap across parallel jobs did not hold. Such a
    model is one line naming its key before any job runs; a model within the limit, no limit given, or a
    CopyBench job whose model and judge claim more together (it asks them one after the other) is no concern."""
    from memaudit.workflow_support import api_slot_problems

    api = {"base_url": "http://127.0.0.1:9/v1"}
    config = {"models": {
        "suspect": {"backend": "openai", "api": {**api, "model_id": "suspect-v1", "concurrency": 8}},
        "judge": {"backend": "openai", "api": {**api, "model_id": "judge-v1", "concurrency": 4}},
        "claude": {"backend": "anthropic", "api": {"model_id": "claude-x", "concurrency": 2}},
        "local": {"source": {"builtin": "smollm2-135m-instruct"}}},
        "probes": {"copybench": {"event_judge": {"model": "judge"}}, "copybench_nonliteral": {}}}
    runs = [("suspect", {"api_openai": 12, "api_anthropic": 0}), ("claude", {"api_openai": 0, "api_anthropic": 2}),
            ("local", {"api_openai": 4, "api_anthropic": 0})]  # a local model's story job asks the API judge
    assert api_slot_problems(config, {"api_openai": 4, "api_anthropic": 1}, runs) == [
        "config key models.claude.api.concurrency: 2 requests at once, more than --resources api_anthropic=1 lets a "
        "job claim (Snakemake would run its jobs with 1 slot, and they would still send 2); lower the concurrency "
        "or raise api_anthropic",
        "config key models.suspect.api.concurrency: 8 requests at once, more than --resources api_openai=4 lets a job "
        "claim (Snakemake would run its jobs with 4 slots, and they would still send 8); lower the concurrency or "
        "raise api_openai"]
    assert api_slot_problems(config, {"api_openai": 8, "api_anthropic": 2}, runs) == []  # 8 + 4 claimed, 8 at once
    assert api_slot_problems(config, {"api_openai": 3}, runs[2:]) == [
        "config key models.judge.api.concurrency: 4 requests at once, more than --resources api_openai=3 lets a job "
        "claim (Snakemake would run its jobs with 3 slots, and they would still send 4); lower the concurrency or "
        "raise api_openai"]
    assert api_slot_problems(config, {}, runs) == []


def test_the_run_checks_the_api_slots_each_rule_claims_not_those_snakemake_lowered_to_the_limit(monkeypatch, capsys):
    """A CopyBench story job claims its model's and its API judge's slots; under ``--resources api_openai=4``
    Snakemake lowers 8 to 4, the model's own share, and the judge whose key is not set went unasked until the
    job started. The check reads the claim the rule declares."""
    from types import SimpleNamespace

    from snakemake.resources import Resource

    from memaudit.workflow_support import check_api_jobs

    monkeypatch.setenv("SUSPECT_KEY", "sk-set")
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    api = {"base_url": "https://api.example.com/v1", "concurrency": 4,
           "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}
    config = {"models": {
        "suspect": {"backend": "openai", "api": {**api, "model_id": "suspect-v1", "api_key_env": "SUSPECT_KEY"}},
        "judge": {"backend": "openai", "api": {**api, "model_id": "judge-v1", "api_key_env": "JUDGE_KEY"}}},
        "probes": {"copybench": {"event_judge": {"model": "judge"}}, "copybench_nonliteral": {}}}
    wildcards = SimpleNamespace(model="suspect", benchmark="books", mode="nonliteral")
    rule = SimpleNamespace(name="copybench_probe", resources={
        "api_openai": Resource("api_openai", lambda wildcards: 8), "api_anthropic": Resource("api_anthropic", 0)})
    job = SimpleNamespace(rule=rule, wildcards=wildcards, wildcards_dict=vars(wildcards),
                          resources={"api_openai": 4, "api_anthropic": 0})  # as Snakemake lowered it
    with pytest.raises(SystemExit):
        check_api_jobs(config, {"api_openai": Resource("api_openai", 4)}, [job])
    assert capsys.readouterr().err == (
        "config key models.judge.api.api_key_env: environment variable JUDGE_KEY is not set; export the API key in "
        "it before the run (the config names the variable, never the key)\n")
    monkeypatch.setenv("JUDGE_KEY", "sk-set")
    check_api_jobs(config, {"api_openai": Resource("api_openai", 4)}, [job])  # 4 at once to each, in turn
    assert capsys.readouterr().err == ""


def test_a_model_claiming_more_gpus_than_resources_allow_is_an_error_before_the_run(capsys):
    """``gpus: 3`` under ``--resources gpu=1`` (profiles/local's cap on a 1-GPU machine): Snakemake lowered the
    claim to 1 unsaid, and a model placed on ``cuda:2`` stopped in its job telling the user to set the gpus it
    had. A job of no {model} (a role's) names every model over the limit; one within it, none."""
    from types import SimpleNamespace

    from snakemake.resources import Resource

    from memaudit.workflow_support import check_api_jobs, gpu_slot_problems

    config = {"models": {"big": {"source": {"path": "/m"}, "gpus": 3, "device": "cuda:2"},
                         "one": {"source": {"path": "/m"}, "device": "cuda"},
                         "api": {"backend": "openai", "api": {"model_id": "x", "base_url": "http://127.0.0.1:9/v1"}}}}
    line = ("config key models.big.gpus: 3 GPUs a job, more than --resources gpu=1 lets a job claim (Snakemake "
            "would run its jobs on 1); lower its gpus (a cuda:N device claims 1 unless gpus says more; its index "
            "stays below its gpus) or raise gpu")
    limit = {"gpu": Resource("gpu", 1)}
    assert gpu_slot_problems(config, limit, [("big", 3), ("one", 1)]) == [line]
    assert gpu_slot_problems(config, limit, [(None, 3)]) == [line]
    assert gpu_slot_problems(config, limit, [("one", 1)]) == []
    assert gpu_slot_problems(config, {"gpu": Resource("gpu", 4)}, [("big", 3)]) == []
    assert gpu_slot_problems(config, {}, [("big", 3)]) == []  # no cap (a SLURM run): Snakemake lowers nothing
    wildcards = SimpleNamespace(model="big", benchmark="novels")
    rule = SimpleNamespace(name="token_stats", resources={"gpu": Resource("gpu", lambda wildcards: 3)})
    job = SimpleNamespace(rule=rule, wildcards=wildcards, wildcards_dict=vars(wildcards), resources={"gpu": 1})
    with pytest.raises(SystemExit):
        check_api_jobs(config, limit, [job])
    assert capsys.readouterr().err == line + "\n"


def test_a_models_family_labels_it_and_is_no_setting_of_its_weights_or_scores():
    """``family`` (the config's, else the model's name) is a param of the tables and figures that show it, never
    of preparing or scoring the model: renaming it re-trained the model and reran everything after it."""
    from memaudit.config import model_build_settings, model_scoring_settings

    cfg = copy.deepcopy(CI)
    del cfg["models"]["tiny-gpt2-cb"]["family"]
    assert jobs.families(cfg, ["tiny-gpt2-cb", "smollm2-135m"]) == {"smollm2-135m": "smollm2",
                                                                   "tiny-gpt2-cb": "tiny-gpt2-cb"}
    entry = cfg["models"]["smollm2-135m-contaminated"]
    assert "family" not in model_build_settings(entry) and "family" not in model_scoring_settings(entry)
    assert model_build_settings(entry)["base"] == "smollm2-135m"


def test_the_lowercase_pass_runs_where_token_prob_scores_the_model_not_where_it_is_only_a_reference():
    """A pass over the lowercased passages (a token_stats_lowercase job) runs only for the ``lowercase`` score of
    a model token_prob scores there: a reference model is read as its original pass (``ref_<model>``)."""
    cfg = copy.deepcopy(CI)
    cfg["probes"]["token_prob"]["reference_models"] = ["tiny-gpt2-small", "tiny-gpt2-cb"]
    assert jobs.reference_models(cfg, "smollm2-135m") == ["tiny-gpt2-small", "tiny-gpt2-cb"]
    assert [jobs.lowercase_pass(cfg, b, m) for b in ("novels", "news")
            for m in ("smollm2-135m", "tiny-gpt2-small", "tiny-gpt2-cb")] == [True, True, False] * 2
    cfg["probes"]["token_prob"]["methods"] = ["loss", "reference"]
    assert not any(jobs.lowercase_pass(cfg, "novels", m) for m in ("smollm2-135m", "tiny-gpt2-cb"))
