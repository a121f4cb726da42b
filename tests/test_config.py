"""Configuration validation: defaults, and errors that name the bad key."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from memaudit.jobs import load_config, validate_config
from memaudit.errors import ConfigError
ROOT = Path(__file__).resolve().parents[1]

CI_TEXT = (ROOT / "config" / "ci.yaml").read_text()
# a CopyBench prompt file in the published shape (prompts.<mode>.format<n>.json)
PROMPT_FILE = {"tag": "t", "system": "", "enable_system": False, "instruction": "", "demo_sep": "\n\n",
               "demo_prompt": "${input} ${output}", "task_prompt": "Continue: ${input}", "demos": []}
CI = yaml.safe_load(CI_TEXT)


def test_shipped_configs_validate_and_get_defaults():
    for name in ("config.yaml", "ci.yaml"):
        cfg = load_config(ROOT / "config" / name)
        raw = yaml.safe_load((ROOT / "config" / name).read_text())
        assert cfg["stats"]["n_boot_small"] == 10
        for key, bench in cfg["benchmarks"].items():  # the default unless set (ci's techdocs asks for 2)
            assert bench["min_passages"] == raw["benchmarks"][key].get("min_passages", 1)
            assert "member_fraction" in bench
            # an option added later has no default: its absence keeps a benchmark's params (the
            # benchmark_dataset rule's), so upgrading redoes no finished run
            assert ("documents_per_book" in bench) == ("documents_per_book" in raw["benchmarks"][key])
        for entry in cfg["models"].values():
            assert entry["backend"] == "hf" and entry["max_tokens"] >= 16


def bad(mutate):
    cfg = copy.deepcopy(CI)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    return str(err.value)


def test_wrong_type_names_the_key():
    msg = bad(lambda c: c["models"]["tiny-gpt2-small"]["source"]["tiny_gpt2"].update(n_layer="two"))
    assert msg == "config key models.tiny-gpt2-small.source.tiny_gpt2.n_layer: must be an integer, not the string 'two'"


@pytest.mark.parametrize("change, message", [
    # 0.25 of an epoch is a quarter of the member chunks' batches: three quarters of the members never trained
    ({"epochs": 0.25}, "models.smollm2-135m-contaminated.finetune.epochs: must be >= 1, not the number 0.25"),
    # dropout 1 zeroes every LoRA input: no gradient reaches A or B, and the adapter stays the identity
    ({"lora_dropout": 1}, "models.smollm2-135m-contaminated.finetune.lora_dropout: must be < 1, not the number 1"),
    # peft's NoMatchingPeftModuleError in the job ("No `target_modules` passed"), naming no key
    ({"target_modules": []}, "models.smollm2-135m-contaminated.finetune.target_modules: must list at least 1 item"),
    ({"target_modules": ""}, "models.smollm2-135m-contaminated.finetune.target_modules: must not be empty"),
])
def test_a_fine_tune_that_trains_less_than_its_members_is_refused_naming_the_key(change, message):
    """Each passed the checks: a "contaminated" model then trained on part of its members (epochs below 1), or on
    none of them (an adapter that never moved, lora_dropout 1), while every table labelled them all members."""
    assert bad(lambda c: c["models"]["smollm2-135m-contaminated"]["finetune"].update(change)) == f"config key {message}"


def test_a_tiny_gpt2_whose_heads_do_not_divide_its_width_is_refused_naming_the_key():
    """GPT-2 splits n_embd among n_head heads: 33 over 2 passed the checks, and the model's prepare_model job, after
    the pretraining pool and its tokenizer, stopped on transformers' ValueError naming neither key."""
    msg = bad(lambda c: c["models"]["tiny-gpt2-small"]["source"]["tiny_gpt2"].update(n_embd=33))
    assert msg == ("config key models.tiny-gpt2-small.source.tiny_gpt2.n_embd: 33 is not a multiple of n_head (2); "
                   "each attention head takes n_embd / n_head dimensions")


def test_an_api_model_as_a_base_is_refused_naming_the_key():
    """A model fine-tuned from an API model passed the checks; the dry run then stopped in prepare_model's
    input function with ``KeyError: 'source'`` (an API model has no weights to fine-tune)."""
    def mutate(c):
        c["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-4o-mini-2024-07-18", "pricing": {
            "input_per_mtok": 0.15, "output_per_mtok": 0.6}}}
        c["models"]["tiny-gpt2-small-contaminated"]["base"] = "gpt"
    assert bad(mutate) == ("config key models.tiny-gpt2-small-contaminated.base: 'gpt' is an API model (backend "
                           "'openai'), whose weights are not here to fine-tune; use a local model (source)")


@pytest.mark.parametrize("backend, line", [
    ("openia", "must be 'openai' or 'hf' or 'anthropic', not the string 'openia'; did you mean 'openai'?"),
    ("HF", "must be 'hf' or 'openai' or 'anthropic', not the string 'HF'; did you mean 'hf'?"),
    ("claude", "must be 'hf' or 'openai' or 'anthropic', not the string 'claude'"),
    (3, "must be a string, not the number 3"),
])
def test_a_typo_in_a_models_backend_is_one_line_naming_the_key_the_value_and_the_choices(backend, line):
    """``backend: openia`` on an API model gave three lines: the schema's, then the cross-key checks reading the
    entry as a local model's (no source; an api block only API backends take). A backend no backend has says
    nothing of what the entry should hold; the choices come closest first (``difflib``), and a number is one
    line too (it failed the enum beside the type)."""
    def mutate(c):
        c["models"]["gpt"] = {"family": "api", "backend": backend, "api": {"model_id": "gpt-4o-2024-08-06",
                                                                         "api_key_env": "OPENAI_API_KEY"}}
        c["probes"]["cloze_blackbox"] = {"models": ["gpt"], "benchmarks": ["novels"]}
    assert bad(mutate).splitlines() == [f"config key models.gpt.backend: {line}"]


def test_a_whole_number_written_as_a_float_is_no_integer():
    """JSON Schema counts 2.0 as an integer, so ``passages_per_document: 2.0`` passed and stopped the dataset
    job at a list slice (``seed: 7.0``: numpy's generator at the statistics jobs)."""
    with pytest.raises(TypeError):
        ["a", "b", "c"][:2.0]
    assert bad(lambda c: c["benchmarks"]["novels"].update(passages_per_document=2.0)) == (
        "config key benchmarks.novels.passages_per_document: must be an integer, not the number 2.0")
    assert bad(lambda c: c.update(seed=7.0)) == "config key seed: must be an integer, not the number 7.0"
    assert bad(lambda c: c["benchmarks"]["novels"].update(n_documents=16.0)) == (
        "config key benchmarks.novels.n_documents: must be an integer or null, not the number 16.0")
    # a number key still takes an integer
    assert validate_config({**CI, "stats": {"selection": {"q": 0.5}}})["stats"]["selection"]["q"] == 0.5
    cfg = copy.deepcopy(CI)
    cfg["models"]["tiny-gpt2-small-contaminated"]["finetune"]["epochs"] = 2
    assert validate_config(cfg)["models"]["tiny-gpt2-small-contaminated"]["finetune"]["epochs"] == 2


@pytest.mark.parametrize("published, line", [
    ({"format": "booktection", "path": "bt.csv", "hf": "avduarte333/BookTection"},
     "published.hf: beside path, whose file is read (the Hub is not asked); give one of them"),
    ({"format": "arxivtection", "path": "ax.csv", "cache_dir": "hub"},
     "published.cache_dir: beside path, whose file is read (nothing is downloaded to cache); remove it"),
    ({"format": "bookmia", "path": "bm.jsonl", "hf": "swj0419/BookMIA"},
     "published.hf: the bookmia set is read from a local path only; download it and give 'path'"),
    ({"format": "wikimia", "path": "w.jsonl", "length": "small"},
     "published.length: only BookTection has Length settings (format booktection)"),
    ({"format": "nyt", "path": "n.parquet", "cache_dir": "hub"},
     "published.cache_dir: only a Hub download (formats booktection, arxivtection) is cached"),
])
def test_a_published_key_its_block_does_not_read_is_an_error_naming_it(published, line):
    """hf or cache_dir beside a BookTection path, hf of BookMIA, length of a format without Length settings:
    each was accepted and ignored without a word (memaudit.datasets.published reads the path first)."""
    assert bad(lambda c: c["benchmarks"].update(pub={"published": published})) == (
        f"config key benchmarks.pub.{line}")
    assert validate_config({**CI, "benchmarks": {**CI["benchmarks"], "pub": {"published": {
        "format": "booktection", "hf": "avduarte333/BookTection", "length": "medium", "cache_dir": "hub"}}}})


def test_a_q_or_knockoff_count_listed_twice_is_an_error_not_rows_twice():
    """stats.selection.qs [0.1, 0.1] ran the selection twice at 0.1 (its rows twice in the tables); KTD's qs,
    ms and member_ratios alike. Each list is a set of levels, as min_k_ratios and decop.lengths are."""
    assert bad(lambda c: c["stats"].update(selection={"qs": [0.1, 0.2, 0.1]})) == (
        "config key stats.selection.qs: must not list an item twice")
    twice = bad(lambda c: c["probes"]["ktd"].update(qs=[0.1, 0.1], ms=[1, 2, 2], member_ratios=[0.1, 0.1]))
    assert twice.splitlines() == [
        "config key probes.ktd.member_ratios: must not list an item twice",
        "config key probes.ktd.ms: must not list an item twice",
        "config key probes.ktd.qs: must not list an item twice"]


def test_a_negative_seed_is_refused_before_the_statistics_jobs_fail_on_it():
    with pytest.raises(ValueError, match="non-negative"):  # what the bootstrap did with it, at the run's end
        np.random.default_rng(-1)
    assert bad(lambda c: c.update(seed=-1)) == "config key seed: must be >= 0, not the number -1"
    assert validate_config({**CI, "seed": 0})["seed"] == 0


def test_a_device_the_gpu_claims_cannot_read_is_refused_before_any_job():
    """Snakemake asked memaudit.devices.model_gpus for the model's GPUs only once its first GPU job was ready."""
    assert bad(lambda c: c["models"]["smollm2-135m"].update(device="gpu")) == (
        "config key models.smollm2-135m.device: must match ^(auto|cpu|cuda(:[0-9]+)?)$, not the string 'gpu'")
    assert bad(lambda c: c["models"]["smollm2-135m"].update(device="cuda1")).endswith("not the string 'cuda1'")
    for device in ("auto", "cpu", "cuda", "cuda:1"):
        cfg = copy.deepcopy(CI)
        cfg["models"]["smollm2-135m"].update(device=device, **({"gpus": 2} if device == "cuda:1" else {}))
        assert validate_config(cfg)["models"]["smollm2-135m"]["device"] == device


def test_a_device_outside_the_gpus_a_job_claims_is_refused_before_any_job():
    """A job sees only the GPUs it claims (memaudit.devices), numbered from 0: `cuda:1` with `gpus` unset
    claimed one GPU and then failed inside the model's first GPU job ("this job sees 1 GPU(s)"), after
    the jobs before it had run; `gpus: 0` with `cuda` likewise; `cpu` with `gpus: 2` held two GPUs idle."""
    def model(**keys):
        return lambda c: c["models"]["smollm2-135m"].update(keys)

    assert bad(model(device="cuda:1")) == (
        "config key models.smollm2-135m.device: 'cuda:1', but each job of this model claims 1 GPU(s) (gpus unset) "
        "and sees only those, numbered from 0; use cuda, or set gpus: 2")
    assert bad(model(device="cuda:2", gpus=2)) == (
        "config key models.smollm2-135m.device: 'cuda:2', but each job of this model claims 2 GPU(s) (gpus: 2) "
        "and sees only those, numbered from 0; use cuda, or set gpus: 3")
    assert bad(model(device="cuda", gpus=0)) == (
        "config key models.smollm2-135m.gpus: 0, but device 'cuda' runs on a GPU and a job sees only the GPUs it "
        "claims; remove gpus: 0 or use device cpu")
    assert bad(model(device="cpu", gpus=2)) == (
        "config key models.smollm2-135m.gpus: 2 GPU(s) claimed by each job of a model on device 'cpu', which uses "
        "none; remove gpus or use device cuda")
    for keys in ({"device": "cuda:1", "gpus": 2}, {"device": "cuda:0"}, {"device": "auto", "gpus": 0},
                 {"device": "auto", "gpus": 2}, {"device": "cpu", "gpus": 0}):
        cfg = copy.deepcopy(CI)
        model(**keys)(cfg)
        assert {k: validate_config(cfg)["models"]["smollm2-135m"][k] for k in keys} == keys


def test_the_docs_example_error_is_what_comes_out():
    """docs/models.md and the README quote the error for a tiny_gpt2 model named tiny with n_layer 'two'."""
    import re

    def mutate(c):
        c["models"]["tiny"] = copy.deepcopy(c["models"]["tiny-gpt2-small"])
        c["models"]["tiny"]["source"]["tiny_gpt2"]["n_layer"] = "two"
    expected = bad(mutate).splitlines()[0]
    assert expected == "config key models.tiny.source.tiny_gpt2.n_layer: must be an integer, not the string 'two'"
    docs = (ROOT / "docs" / "models.md").read_text()
    assert re.findall(r"^my\.yaml, line \d+, column \d+: (config key models\.tiny\..*)$", docs, re.M) == [expected]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`{expected}`" in readme


def test_a_source_key_on_a_published_benchmark_is_an_error_not_ignored():
    """n_documents, passage_words, ... shape a benchmark built from sources; on a published one
    they would be ignored without a word. Only what the user wrote counts (defaults come later)."""
    def mutate(c):
        c["benchmarks"]["pub"] = {"published": {"format": "arxivtection", "path": "x.csv"},
                                  "n_documents": 5, "member_fraction": 0.3}
    assert bad(mutate).splitlines() == [
        "config key benchmarks.pub.n_documents: only a benchmark built from 'sources' reads it; a published "
        "benchmark's documents come as published (remove it)",
        "config key benchmarks.pub.member_fraction: only a benchmark built from 'sources' reads it; a published "
        "benchmark's documents come as published (remove it, or set it under published: for format qa)"]
    ok = copy.deepcopy(CI)
    ok["benchmarks"]["pub"] = {"published": {"format": "qa", "path": "q.jsonl", "member_fraction": 0.3}}
    done = validate_config(ok)
    assert done["benchmarks"]["pub"]["n_documents"] is None  # defaults still filled in
    assert validate_config(done) == done  # and the completed config validates again
    # every benchmark key but the two kinds themselves is a sources-only key: a new one must be sorted here
    from memaudit.config import SOURCE_ONLY_KEYS, load_schema

    keys = set(load_schema()["properties"]["benchmarks"]["additionalProperties"]["properties"])
    assert keys - {"sources", "published"} == set(SOURCE_ONLY_KEYS)


def test_the_cache_dir_description_names_every_builtin_model_converted_there():
    """The schema said the cache held converted SmolLM2 only; Gemma-3-270M is converted into it too."""
    from memaudit.config import load_schema
    from memaudit.models.builtin import BUILTINS

    description = load_schema()["properties"]["cache_dir"]["description"]
    assert [name for name in BUILTINS if name not in description] == []


def test_a_model_key_nothing_reads_is_an_error_not_ignored():
    """dtype, device, gpus, ... on an API model, LoRA settings on a full fine-tune: nothing reads
    them there, and the run would go on as if they had been heeded. Only what the user wrote
    counts (the schema's defaults set dtype and the LoRA keys on every model later)."""
    def mutate(c):
        c["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-x", "base_url": "http://localhost:8000/v1"},
                              "dtype": "bfloat16", "gpus": 2, "batch_size": 4, "context_token": "<|endoftext|>"}
        c["models"]["tiny-gpt2-small-contaminated"]["finetune"].update(lora_r=8, target_modules=["c_attn"],
                                                                       lora_layers=1)
        c["models"]["smollm2-135m-contaminated"]["context_token"] = "<|endoftext|>"
    assert bad(mutate).splitlines() == [  # in the config's order
        "config key models.smollm2-135m-contaminated.context_token: a fine-tuned model trains and scores with its "
        "base's context token; set it on models.smollm2-135m (remove it here)",
        "config key models.tiny-gpt2-small-contaminated.finetune.lora_r: only method lora reads it; this model "
        "is fine-tuned fully (method: full; remove it)",
        "config key models.tiny-gpt2-small-contaminated.finetune.target_modules: only method lora reads it; this "
        "model is fine-tuned fully (method: full; remove it)",
        "config key models.tiny-gpt2-small-contaminated.finetune.lora_layers: only method lora reads it; this "
        "model is fine-tuned fully (method: full; remove it)",
        "config key models.gpt.dtype: only a local model reads it; backend 'openai' runs on the provider's "
        "machines (remove it)",
        "config key models.gpt.gpus: only a local model reads it; backend 'openai' runs on the provider's "
        "machines (remove it)",
        "config key models.gpt.batch_size: only a local model reads it; backend 'openai' runs on the provider's "
        "machines (remove it)",
        "config key models.gpt.context_token: only a local model reads it; backend 'openai' runs on the provider's "
        "machines (remove it)"]
    ok = copy.deepcopy(CI)
    ok["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-x", "base_url": "http://localhost:8000/v1"},
                           "dtype": "auto"}  # the default says nothing: not refused
    ok["models"]["smollm2-135m-contaminated"]["finetune"].update(lora_r=8)  # method lora: read
    done = validate_config(ok)
    assert done["models"]["gpt"]["max_tokens"] == 512  # the defaults are still filled in, and not refused ...
    assert done["models"]["tiny-gpt2-small-contaminated"]["finetune"]["lora_r"] == 16
    assert validate_config(done) == done  # ... so a completed config validates again, unchanged
    # every model key is sorted: read by API models too, local-only (here), or local weights (config_checks)
    from memaudit.config import LOCAL_ONLY_MODEL_KEYS, LORA_ONLY_KEYS, load_schema

    model = load_schema()["properties"]["models"]["additionalProperties"]["properties"]
    assert set(model) - {"backend", "api", "family", "source", "base", "control", "finetune"} == set(LOCAL_ONLY_MODEL_KEYS)
    common = {"members_of", "method", "epochs", "lr", "duplication", "batch_size", "max_length", "packing"}
    assert set(model["finetune"]["properties"]) - common == set(LORA_ONLY_KEYS)


def test_a_repeated_list_item_or_a_log_probability_threshold_above_0_is_an_error_not_run():
    # a repeated format, decoding or token type ran twice: prompts counted twice in the rates'
    # intervals, and cloze_<type> summed twice over the same words
    def mutate(c):
        c["probes"]["copybench"].update(formats=[1, 1], decodings=["greedy", "greedy"])
        c["probes"]["cloze"].update(measures=["prob", "prob"], prob_threshold=12)  # the minus sign forgotten
    assert bad(mutate).splitlines() == [
        "config key probes.cloze.measures: must not list an item twice",
        "config key probes.cloze.prob_threshold: must be a number < 0 or 'tune', not the number 12",
        "config key probes.copybench.decodings: must not list an item twice",
        "config key probes.copybench.formats: must not list an item twice"]


def test_story_beginnings_as_many_as_a_books_events_are_an_error_not_built():
    """``n_beginnings`` >= ``n_events`` made every event of a book a story beginning (at most ``n_events``
    of the beginnings asked), each item's reference events only the other beginnings: accepted, built and
    scored. A book yields at most ``n_events`` events (the extractor's prompt asks for that many, the
    extractive builder cuts the book into that many stretches), so the config check refuses it."""
    for n in (6, 7):
        assert bad(lambda c: c["probes"]["copybench"].update(n_beginnings=n)) == (
            f"config key probes.copybench.n_beginnings: {n} story beginnings of a book's n_events (6) events "
            "leave no event that is only a reference; give fewer beginnings or more events")
    ok = copy.deepcopy(CI)
    ok["probes"]["copybench"]["n_beginnings"] = 5
    assert validate_config(ok)["probes"]["copybench"]["n_beginnings"] == 5


def test_a_repeated_method_ratio_reference_or_length_or_a_reversed_length_ratio_is_an_error_not_run():
    # methods [loss, loss] scored loss twice: its documents' n_passages doubled; lengths [64, 64] cut and
    # paraphrased every passage twice under one item id; length_ratio [1.6, 0.4] rejected every
    # paraphrase after paying for them, and stopped decop_items
    def mutate(c):
        c["probes"]["token_prob"].update(methods=["loss", "min_k", "loss"], min_k_ratios=[0.2, 0.2],
                                         reference_models=["tiny-gpt2-small", "tiny-gpt2-small"])
        c["probes"]["decop"].update(lengths=[64, 64])
    assert bad(mutate).splitlines() == [
        "config key probes.decop.lengths: must not list an item twice",
        "config key probes.token_prob.methods: must not list an item twice",
        "config key probes.token_prob.min_k_ratios: must not list an item twice",
        "config key probes.token_prob.reference_models: must not list an item twice"]
    assert bad(lambda c: c["probes"]["decop"].update(paraphrase={"length_ratio": [1.6, 0.4]})).splitlines() == [
        "config key probes.decop.paraphrase.length_ratio: [1.6, 0.4] is no range (the lower bound first): every "
        "paraphrase would be rejected for its length"]
    ok = copy.deepcopy(CI)
    ok["probes"]["decop"]["paraphrase"] = {"length_ratio": [1.0, 1.0]}  # a bound may be the other bound
    assert validate_config(ok)["probes"]["decop"]["paraphrase"]["length_ratio"] == [1.0, 1.0]


def test_token_prob_methods_that_give_a_model_no_score_are_an_error_not_a_failed_job():
    """methods [reference] give a reference model no score (a model is never its own reference), and every
    model none without reference_models: its token_prob_scores job stopped, after its forward pass, with
    pandas' "No objects to concatenate"."""
    assert bad(lambda c: c["probes"]["token_prob"].update(methods=["reference"])) == (
        "config key probes.token_prob.methods: ['reference'] give tiny-gpt2-small no score: reference compares "
        "a model with each of probes.token_prob.reference_models (['tiny-gpt2-small']) but itself; add another "
        "method or reference model, or leave tiny-gpt2-small out of probes.token_prob.models")
    msg = bad(lambda c: c["probes"]["token_prob"].update(methods=["reference"], reference_models=[]))
    assert msg.startswith("config key probes.token_prob.methods: ['reference'] give smollm2-135m, "
                          "smollm2-135m-contaminated, tiny-gpt2-small, tiny-gpt2-small-contaminated no score")
    ok = copy.deepcopy(CI)
    ok["probes"]["token_prob"].update(methods=["reference"], models=["smollm2-135m"])
    assert validate_config(ok)["probes"]["token_prob"]["methods"] == ["reference"]


def test_a_length_floor_for_an_api_paraphraser_is_an_error_not_ignored():
    """probes.decop.paraphrase.min_length holds back a local paraphraser's end token; an API paraphraser
    never reads it, and the run would go on as if it had been heeded."""
    gpt = {"backend": "openai", "api": {"model_id": "gpt-x", "base_url": "http://localhost:8000/v1"}}

    def mutate(c):
        c["models"]["gpt"] = dict(gpt)
        c["probes"]["decop"]["paraphrase"].update(model="gpt", min_length=0.9)
    assert bad(mutate).splitlines() == [
        "config key probes.decop.paraphrase.min_length: 0.9, but the paraphraser 'gpt' is an API model, which only "
        "a local paraphraser's sampling reads (the paper's prompt asks an API model for the length); remove the key "
        "or paraphrase with a local model"]
    ok = copy.deepcopy(CI)
    ok["models"]["gpt"] = dict(gpt)
    ok["probes"]["decop"]["paraphrase"].update(model="gpt")  # min_length 0 (the default): nothing to refuse
    assert validate_config(ok)["probes"]["decop"]["paraphrase"]["min_length"] == 0
    ok = copy.deepcopy(CI)
    ok["probes"]["decop"]["paraphrase"].update(min_length=0.9)  # the ci's local SmolLM2 reads it
    assert validate_config(ok)["probes"]["decop"]["paraphrase"]["min_length"] == 0.9


def test_the_verbatim_run_limit_has_no_default_and_names_its_key_when_out_of_range():
    """probes.decop.paraphrase.max_verbatim_run (quality control's containment check): absent, the
    decop_items and ktd_pool jobs' params are as before it existed (quality control reads 0.5)."""
    from memaudit.probes.decop.paraphrase import QCSettings
    from memaudit.probes.decop.plan import item_settings

    settings = item_settings(validate_config(copy.deepcopy(CI)), "novels")["paraphrase"]
    assert "max_verbatim_run" not in settings and QCSettings.from_config(settings).max_verbatim_run == 0.5
    for value, why in ((0, "must be > 0, not the number 0"), (1.5, "must be <= 1, not the number 1.5"),
                       ("half", "must be a number, not the string 'half'")):
        msg = bad(lambda c: c["probes"]["decop"]["paraphrase"].update(max_verbatim_run=value))
        assert msg == f"config key probes.decop.paraphrase.max_verbatim_run: {why}"
    ok = copy.deepcopy(CI)
    ok["probes"]["decop"]["paraphrase"].update(max_verbatim_run=0.8)
    assert QCSettings.from_config(validate_config(ok)["probes"]["decop"]["paraphrase"]).max_verbatim_run == 0.8


def test_local_sampling_keys_for_an_api_paraphraser_are_errors_and_have_no_default():
    """probes.decop.paraphrase.top_k, top_p and prefix are read by a local paraphraser's sampling only
    (an API model samples as its API does); absent, they add nothing to the jobs' params."""
    gpt = {"backend": "openai", "api": {"model_id": "gpt-x", "base_url": "http://localhost:8000/v1"}}

    def mutate(c):
        c["models"]["gpt"] = dict(gpt)
        c["probes"]["decop"]["paraphrase"].update(model="gpt", top_k=50, top_p=0.95, prefix="paraphrase: ")
    tail = ("but the paraphraser 'gpt' is an API model, which samples as its API does (only a local paraphraser "
            "reads {}); remove the key or paraphrase with a local model")
    assert bad(mutate).splitlines() == [
        "config key probes.decop.paraphrase.top_k: 50, " + tail.format("top_k"),
        "config key probes.decop.paraphrase.top_p: 0.95, " + tail.format("top_p"),
        "config key probes.decop.paraphrase.prefix: 'paraphrase: ', " + tail.format("prefix")]
    ok = copy.deepcopy(CI)
    ok["models"]["gpt"] = dict(gpt)
    ok["probes"]["decop"]["paraphrase"].update(model="gpt")
    settings = validate_config(ok)["probes"]["decop"]["paraphrase"]
    assert not {"top_k", "top_p", "prefix"} & set(settings)  # no default: the ci's params are as before
    ok = copy.deepcopy(CI)
    ok["probes"]["decop"]["paraphrase"].update(top_k=40, top_p=0.9)  # the ci's local SmolLM2 reads them
    assert {k: validate_config(ok)["probes"]["decop"]["paraphrase"][k] for k in ("top_k", "top_p")} == \
        {"top_k": 40, "top_p": 0.9}
    for key, value, why in (("top_p", 0, "must be > 0, not the number 0"),
                            ("top_p", 1.5, "must be <= 1, not the number 1.5"),
                            ("top_k", -1, "must be >= 0, not the number -1"),
                            ("prefix", 3, "must be a string, not the number 3")):
        assert bad(lambda c: c["probes"]["decop"]["paraphrase"].update({key: value})) == \
            f"config key probes.decop.paraphrase.{key}: {why}"


def test_a_temperature_above_1_for_an_anthropic_role_model_is_an_error_before_any_job_runs():
    """The Messages API takes a temperature from 0 to 1: a Claude paraphraser at KTD's T5 setting 1.9 (or a
    sampled fluency judge above 1) was answered HTTP 400 on every request at run time. Now a config error
    naming the key that gives the temperature and the model."""
    claude = {"backend": "anthropic", "api": {"model_id": "claude-x", "pricing": {"input_per_mtok": 3,
                                                                                "output_per_mtok": 15}}}

    def mutate(c):
        c["models"]["claude"] = copy.deepcopy(claude)
        c["probes"]["decop"]["paraphrase"].update(model="claude", temperature=1.9)
        c["probes"]["copybench"]["fluency_judge"] = {"model": "claude", "temperature": 1.2}
    tail = ("but the {} 'claude' (models.claude) is an Anthropic model, whose Messages API takes a temperature "
            "from 0 to 1 (HTTP 400 above); set at most 1 or give the role another model")
    assert bad(mutate).splitlines() == [
        "config key probes.decop.paraphrase.temperature: 1.9, " + tail.format("paraphraser"),
        "config key probes.copybench.fluency_judge.temperature: 1.2, " + tail.format("fluency judge")]
    ok = copy.deepcopy(CI)
    ok["models"]["claude"] = copy.deepcopy(claude)
    ok["probes"]["decop"]["paraphrase"].update(model="claude", temperature=1.0)
    ok["probes"]["copybench"]["fluency_judge"] = {"model": "claude", "temperature": 1.0}
    validate_config(ok)
    # a local paraphraser samples at any temperature; a fluency judge not named rates nothing
    ok = copy.deepcopy(CI)
    ok["models"]["claude"] = copy.deepcopy(claude)
    ok["probes"]["decop"]["paraphrase"].update(temperature=1.9)
    ok["probes"]["copybench"]["fluency_judge"] = {"temperature": 1.5}
    assert validate_config(ok)["probes"]["decop"]["paraphrase"]["temperature"] == 1.9


def test_a_decop_mode_asking_for_more_passages_than_its_items_have_is_an_error():
    # first_passages took the 3 there were and the mode probed fewer passages than its config said
    def mutate(c):
        c["probes"]["decop"]["passages_per_document"] = 3
        c["probes"]["decop_logit"]["passages_per_document"] = 5
    assert bad(mutate).splitlines() == [
        "config key probes.decop_logit.passages_per_document: 5, but the items of 'novels' have "
        "probes.decop.passages_per_document = 3 per document; raise that one or lower this one"]
    ok = copy.deepcopy(CI)
    ok["probes"]["decop"]["passages_per_document"] = 3
    ok["probes"]["decop_logit"]["passages_per_document"] = 3
    assert validate_config(ok)["probes"]["decop_logit"]["passages_per_document"] == 3


@pytest.mark.parametrize("dtype, line", [
    ("float64", "must be 'auto' or 'float32' or 'bfloat16' or 'float16', not the string 'float64'"),
    ("float", "must be 'auto' or 'float32' or 'bfloat16' or 'float16', not the string 'float'"),
    ("flaot16", "must be 'float16' or 'auto' or 'float32' or 'bfloat16', not the string 'flaot16'; "
                "did you mean 'float16'?"),
    ("bfloat61", "must be 'bfloat16' or 'auto' or 'float32' or 'float16', not the string 'bfloat61'; "
                 "did you mean 'bfloat16'?"),
])
def test_an_enum_hint_is_given_for_a_likely_typo_only(dtype, line):
    """``dtype: float64`` was told "did you mean 'float16'?" (difflib's ratio, 0.86, is high for two
    different precisions sharing the prefix "float") with float16 listed first. A hint is a typo's fix: one
    edit (a transposition counts as one; two from 8 characters), case aside; else the choices in their order."""
    msg = bad(lambda c: c["models"]["tiny-gpt2-small"].update(dtype=dtype))
    assert msg.splitlines() == [f"config key models.tiny-gpt2-small.dtype: {line}"]


def test_a_value_under_token_prob_is_shown_as_any_other_probes():
    """``token`` in a key's name hides its values (a pasted token); a probe's name is the schema's own."""
    msg = bad(lambda c: c["probes"]["token_prob"].update(methods=["loss", "minn_k"], min_k_ratios=[0.2, 1.5]))
    assert msg.splitlines() == [
        "config key probes.token_prob.methods.1: must be 'min_k' or 'loss' or 'zlib' or 'lowercase' or "
        "'min_k_plus_plus' or 'reference', not the string 'minn_k'; did you mean 'min_k'?",
        "config key probes.token_prob.min_k_ratios.1: must be <= 1, not the number 1.5"]


def test_unknown_key_is_rejected():
    msg = bad(lambda c: c["benchmarks"]["novels"].update(passage_wrods=3))
    assert msg == ("config key benchmarks.novels.passage_wrods: unknown key; did you mean 'passage_words'? (known "
                   "here: documents_per_book, labels, member_fraction, min_passages, n_documents, near_duplicate_ngram, passage_words, "
                   "passages_per_document, published, source_options, sources, split_by)")


def test_too_few_ci_resamples_names_the_key_and_the_minimum_the_stats_cli_shares():
    """stats.n_boot_ci's minimum is the one `memaudit stats --n-boot-ci` enforces (MIN_BOOT_CI, 40: fewer leave a
    2.5% tail of the percentile interval without one resample); 40 itself is accepted."""
    from memaudit.stats.cli import MIN_BOOT_CI

    assert MIN_BOOT_CI == 40
    assert bad(lambda c: c["stats"].update(n_boot_ci=39)) == "config key stats.n_boot_ci: must be >= 40, not the number 39"
    cfg = copy.deepcopy(CI)
    cfg["stats"]["n_boot_ci"] = 40
    validate_config(cfg)
    assert cfg["stats"]["n_boot_ci"] == 40

def test_every_problem_is_one_line_all_at_once_with_cross_key_checks_beside_schema_errors():
    def mutate(c):
        for i in range(12):  # more than the old cap of 10
            c[f"extra_{i:02d}"] = i
        c["stats"]["n_boot_ci"] = -5
        c["models"]["tiny-gpt2-small"]["dtype"] = "float64"
        c["models"]["x"] = {"base": "nope", "finetune": {"members_of": ["novels"]}}  # a cross-key problem
    lines = bad(mutate).splitlines()
    known = ("api, assets_dir, benchmarks, cache_dir, checkpoints, figures, generation_cache, models, pretrain, probes, seed, "
             "stats, threads_per_job")
    assert lines == [f"config key extra_{i:02d}: unknown key (known here: {known})" for i in range(12)] + [
        "config key models.tiny-gpt2-small.dtype: must be 'auto' or 'float32' or 'bfloat16' or 'float16', "
        "not the string 'float64'",
        "config key stats.n_boot_ci: must be >= 40, not the number -5",
        "config key models.x.base: unknown model 'nope' (configured: smollm2-135m, smollm2-135m-contaminated, "
        "tiny-gpt2-cb, tiny-gpt2-cb-books, tiny-gpt2-small, tiny-gpt2-small-contaminated, x)"]


@pytest.mark.parametrize("mutate, line", [
    (lambda c: c["probes"]["token_prob"].update(models="tiny-gpt2-small"),
     "config key probes.token_prob.models: must be a list, not the string 'tiny-gpt2-small'"),
    (lambda c: c["benchmarks"]["novels"].update(sources="austen"),
     "config key benchmarks.novels.sources: must be a list, not the string 'austen'"),
    (lambda c: c["pretrain"].update(sources="mobydick"),
     "config key pretrain.sources: must be a list, not the string 'mobydick'"),
    (lambda c: c["models"]["tiny-gpt2-small"].update(source="gpt2"),
     "config key models.tiny-gpt2-small.source: must be a mapping, not the string 'gpt2'"),
    (lambda c: c.update(models=[{"name": "tiny-gpt2-small"}]), "config key models: must be a mapping, not a list"),
    (lambda c: c.update(benchmarks=["novels", "news"]), "config key benchmarks: must be a mapping, not a list"),
])
def test_a_value_of_another_shape_is_one_line_not_the_cross_key_checks_reading_it(mutate, line):
    """``models: tiny-gpt2-small`` (a string where a list belongs) was that line and then fifteen more, one per
    letter (``probes.token_prob.models.0: unknown model 't'``, ...); ``models`` as a list made every reference
    to a model unknown, naming keys that were right."""
    assert bad(mutate).splitlines() == [line]


def test_an_unknown_model_or_benchmark_gets_the_close_name_or_the_configured_ones():
    from memaudit.config import unknown

    assert unknown("model", "tiny-gpt2-smal", ["tiny-gpt2-small", "smollm2-135m"]) == (
        "unknown model 'tiny-gpt2-smal'; did you mean 'tiny-gpt2-small'?")
    assert unknown("benchmark", "poems", ["news", "novels"]) == "unknown benchmark 'poems' (configured: news, novels)"
    assert unknown("model", "x", [f"m{i:02d}" for i in range(13)]) == "unknown model 'x'"  # too many to list
    msg = bad(lambda c: c["probes"]["token_prob"].update(models=["tiny-gpt2-smal"]))
    assert "config key probes.token_prob.models.0: unknown model 'tiny-gpt2-smal'; did you mean 'tiny-gpt2-small'?" in msg


def test_source_options_nothing_reads_are_named_not_ignored():
    """Options of a source the benchmark does not list were ignored without a word; an option its source does
    not take stopped the dataset job (memaudit.datasets.sources.load_source)."""
    def mutate(c):
        c["benchmarks"]["novels"]["source_options"] = {"tidytext": {"exclude_titles": ["Emma"]},
                                                       "austen": {"exclude_titles": ["Emma"]}}
        c["benchmarks"]["news"]["sources"] = ["user_books"]
        c["benchmarks"]["news"]["source_options"] = {"user_books": {"directory": "books", "min_words": 5}}
        c["pretrain"]["source_options"] = {"mobydick": {"chapters": 3}, "tidytext": {"exclude_titles": []}}
    assert bad(mutate).splitlines() == [
        "config key benchmarks.novels.source_options.tidytext: 'tidytext' is not one of the sources (austen), so "
        "nothing reads these options (remove them or add the source)",
        "config key benchmarks.novels.source_options.austen.exclude_titles: source 'austen' has no such option "
        "(it takes: none)",
        "config key benchmarks.news.source_options.user_books.min_words: source 'user_books' has no such option "
        "(it takes: directory, min_chapter_words)",
        "config key pretrain.source_options.mobydick.chapters: source 'mobydick' has no such option (it takes: none)"]


def test_a_source_or_a_members_benchmark_listed_twice_is_an_error():
    """members_of [novels, novels] fine-tuned on every member twice (prepare_model reads each listed file)."""
    def mutate(c):
        c["models"]["tiny-gpt2-small-contaminated"]["finetune"]["members_of"] = ["novels", "news", "novels"]
        c["benchmarks"]["news"]["sources"] = ["reuters", "reuters"]
        c["pretrain"]["sources"] = ["mobydick", "mobydick"]
    assert bad(mutate).splitlines() == [
        "config key benchmarks.news.sources: must not list an item twice",
        "config key models.tiny-gpt2-small-contaminated.finetune.members_of: must not list an item twice",
        "config key pretrain.sources: must not list an item twice"]


def test_unknown_base_model_and_benchmark():
    def mutate(c):
        c["models"]["x"] = {"base": "nope", "finetune": {"members_of": ["novels", "missing"]}}
    msg = bad(mutate)
    assert "models.x.base: unknown model 'nope'" in msg
    assert "models.x.finetune.members_of.1: unknown benchmark 'missing'" in msg


def test_hub_model_needs_pinned_revision():
    msg = bad(lambda c: c["models"].update(hub={"source": {"hub_id": "org/model"}}))
    assert msg == ("config key models.hub.source.revision: required with hub_id (pin a commit so reruns load "
                   "the same weights)")


SHA = "0123456789abcdef0123456789abcdef01234567"
MOVING = ("must be a commit sha (40 lowercase hex digits), not 'main'; a branch or tag can move, "
          "so reruns could load other weights: pin the commit (the model's history on the hub) or set "
          "allow_moving_revision: true")


def test_hub_revision_must_be_a_commit_unless_the_entry_accepts_moving_weights():
    def with_hub(source):
        cfg = copy.deepcopy(CI)
        cfg["models"]["hub"] = {"source": source}
        return cfg

    assert bad(lambda c: c["models"].update(hub={"source": {"hub_id": "org/m", "revision": "main"}})) == (
        "config key models.hub.source.revision: " + MOVING)
    assert bad(lambda c: c["models"].update(hub={"source": {"hub_id": "org/m", "revision": SHA.upper()}})) == (
        "config key models.hub.source.revision: " + MOVING.replace("'main'", f"'{SHA.upper()}'"))
    assert bad(lambda c: c["models"].update(hub={"source": {"hub_id": "org/m", "revision": "main",
                                                             "allow_moving_revision": False}})) == (
        "config key models.hub.source.revision: " + MOVING)
    assert bad(lambda c: c["models"].update(hub={"source": {"path": "/m", "allow_moving_revision": True}})) == (
        "config key models.hub.source.allow_moving_revision: only with hub_id (the other sources do not move)")
    pinned = validate_config(with_hub({"hub_id": "org/m", "revision": SHA}))
    assert pinned["models"]["hub"]["source"] == {"hub_id": "org/m", "revision": SHA}  # no default added
    moving = validate_config(with_hub({"hub_id": "org/m", "revision": "main", "allow_moving_revision": True}))
    assert moving["models"]["hub"]["source"]["allow_moving_revision"] is True
    docs = (ROOT / "docs" / "models.md").read_text()
    assert f"config key models.pythia-1b.source.revision: {MOVING}\n" in docs


@pytest.mark.workflow
def test_the_docs_gemma_entries_join_the_demo_and_plan_only_their_jobs(tmp_path):
    """docs/models.md's two Gemma entries (the builtin base and its LoRA fine-tune), added to the demo
    config with both names in token_prob's models, validate, and a dry run plans each of the two
    models' per-model jobs on novels and news; the builtin name is checked by the schema."""
    docs = (ROOT / "docs" / "models.md").read_text()
    block = docs.split("Size trends across two pretrained families")[1].split("```yaml\n")[1].split("```")[0]
    entries = yaml.safe_load(block)
    assert set(entries) == {"gemma-3-270m", "gemma-3-270m-contaminated"}
    demo = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    demo["models"].update(entries)
    demo["probes"]["token_prob"]["models"] += list(entries)
    assert validate_config(copy.deepcopy(demo))["models"]["gemma-3-270m"]["source"] == {"builtin": "gemma-3-270m"}
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    make_workdir(workdir, share_resources=False)
    (workdir / "sizes.yaml").write_text(yaml.safe_dump(demo))
    gemma = {(rule, wildcards) for rule, wildcards in planned_jobs(workdir, "sizes.yaml") if "gemma" in wildcards}
    per_pair = {(rule, f"benchmark={b}, model={m}") for rule in ("token_stats", "token_prob_scores", "metrics",
                                                                  "figures_model")
                for b in ("news", "novels") for m in entries}
    assert gemma == {("prepare_model", f"model={m}") for m in entries} | per_pair
    demo["models"]["gemma-3-270m"]["source"] = {"builtin": "gemma-3-27b"}
    with pytest.raises(ConfigError, match="models.gemma-3-270m.source.builtin"):
        validate_config(demo)


def test_the_paper_config_is_refused_until_its_hub_revisions_are_pinned():
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "config" / "paper.yaml")
    models = ["llama-2-7b", "llama-2-13b", "mistral-7b", "llama-2-7b-chat", "llama-2-13b-chat", "pythia-1.4b",
              "bert-base-uncased", "pythia-6.9b", "flan-t5-xl", "stablelm-3b-ref"]
    path = ROOT / "config" / "paper.yaml"
    assert placed(str(err.value).splitlines(), path) == at_its_key([
        f"config key models.{m}.source.revision: " + MOVING.replace("'main'", "'REPLACE_WITH_COMMIT'") for m in models])


def test_pretraining_pool_must_be_disjoint_from_benchmarks():
    msg = bad(lambda c: c["pretrain"].update(sources=["austen"]))
    assert "pretrain.sources" in msg and "novels" in msg


def test_a_pool_source_holding_a_benchmarks_text_under_another_name_is_refused():
    """Only source names were compared: tidytext's Pride and Prejudice (janeaustenr's text) and the Reuters
    articles demo_qa quotes reached the pretraining pool of every tiny model, members and non-members alike."""
    def tidytext_whole(c):
        c["pretrain"] = {"sources": ["mobydick", "tidytext"], "source_options": {"tidytext": {"exclude_titles": []}}}

    assert bad(tidytext_whole) == (
        "config key pretrain.sources: 'tidytext' holds Pride and Prejudice (janeaustenr's and tidytext's), as source "
        "'austen' of benchmark(s) novels, books does; the pretraining pool must be disjoint "
        "(pretrain.source_options: {tidytext: {exclude_titles: [Pride and Prejudice]}})")

    def reuters_quoted(c):
        c["benchmarks"]["news"] = {"sources": ["demo_qa"], "split_by": "book"}
        c["pretrain"] = {"sources": ["reuters"]}

    assert bad(reuters_quoted) == ("config key pretrain.sources: 'reuters' holds the reuters documents, as source "
                                   "'demo_qa' of benchmark(s) news does; the pretraining pool must be disjoint")
    cfg = copy.deepcopy(CI)
    cfg["pretrain"] = {"sources": ["mobydick", "tidytext"]}  # the schema's default leaves Pride and Prejudice out
    assert validate_config(cfg)["pretrain"]["source_options"] == {"tidytext": {"exclude_titles": ["Pride and Prejudice"]}}


def test_a_model_trained_from_scratch_needs_a_pretraining_source():
    """With no pretraining source the pool job wrote an empty file and the first tiny model's prepare_model
    stopped on it (ValueError: tiny_gpt2 needs the pretraining pool), after the datasets had been built."""
    assert bad(lambda c: c["pretrain"].update(sources=[])) == (
        "config key pretrain.sources: empty, but models tiny-gpt2-cb, tiny-gpt2-small are trained from scratch "
        "on the pretraining pool (source tiny_gpt2); list a source no benchmark uses (the default: mobydick, tidytext)")
    cfg = copy.deepcopy(CI)
    cfg["pretrain"]["sources"] = []
    cfg["models"] = {m: e for m, e in cfg["models"].items() if m.startswith("smollm2")}
    cfg["probes"] = {"token_prob": {"reference_models": []}}
    assert validate_config(cfg)["pretrain"]["sources"] == []  # no model trained from scratch: no pool needed


def test_a_model_name_that_would_share_a_file_with_another_result_is_refused():
    """results/metrics/<benchmark>/blind_baseline.csv is the blind baseline's, and results/selection/<benchmark>/
    <model>_named.csv is a model's named documents: a model called blind_baseline, or x_named beside x, would
    write (or be read from) another result's file."""
    def add(name, like="tiny-gpt2-small"):
        return lambda c: c["models"].update({name: copy.deepcopy(c["models"][like])})

    assert bad(add("blind_baseline")) == (
        "config key models.blind_baseline: the name of the blind baseline's metrics file "
        "(results/metrics/<benchmark>/blind_baseline.csv); rename the model")
    assert bad(add("tiny-gpt2-small_named")) == (
        "config key models.tiny-gpt2-small_named: 'tiny-gpt2-small' is a model too, and results/selection/"
        "<benchmark>/tiny-gpt2-small_named.csv would be both this model's selection table and the documents "
        "'tiny-gpt2-small' names; rename one")
    cfg = copy.deepcopy(CI)
    cfg["models"]["lonely_named"] = copy.deepcopy(cfg["models"]["tiny-gpt2-small"])
    assert "lonely_named" in validate_config(cfg)["models"]  # no model called 'lonely': no clash


def test_the_names_pandas_reads_as_missing_are_pandas_own():
    from pandas._libs.parsers import STR_NA_VALUES

    from memaudit.config import PANDAS_NA_NAMES

    assert PANDAS_NA_NAMES == set(STR_NA_VALUES)


def test_a_model_or_benchmark_name_that_pandas_reads_as_missing_is_refused():
    """The results tables are read back with pandas' default missing values: a model called NA (or None, null,
    NaN...) came back from its metrics file as NaN, sorted apart with no name; a benchmark called nan or null
    likewise."""
    def add(name, like="tiny-gpt2-small"):
        return lambda c: c["models"].update({name: copy.deepcopy(c["models"][like])})

    assert bad(add("NA")) == (
        "config key models.NA: 'NA' is a name pandas reads as a missing value (NaN) in the results tables, where "
        "this model's rows would lose their name; rename the model")
    assert bad(add("None")).startswith("config key models.None: 'None' is a name pandas reads as a missing value")
    assert bad(lambda c: c["benchmarks"].update(null=copy.deepcopy(c["benchmarks"]["news"]))) == (
        "config key benchmarks.null: 'null' is a name pandas reads as a missing value (NaN) in the results tables, "
        "where this benchmark's rows would lose their name; rename the benchmark")
    cfg = copy.deepcopy(CI)
    cfg["models"]["NA2"] = copy.deepcopy(cfg["models"]["tiny-gpt2-small"])
    assert "NA2" in validate_config(cfg)["models"]  # only the exact words pandas reads as missing


def test_no_token_probability_method_is_refused_not_a_probe_that_writes_nothing():
    msg = bad(lambda c: c["probes"]["token_prob"].update(methods=[]))
    assert msg == "config key probes.token_prob.methods: must list at least 1 item"


def test_two_benchmarks_of_one_text_in_one_members_of_are_refused():
    """novels and books split Austen's chapters apart: a model fine-tuned on both saw 4 of books' 12 non-member
    excerpts verbatim (novels' members) in the demo, and 3 of novels' non-member chapters (books' members)."""
    msg = bad(lambda c: c["models"]["tiny-gpt2-cb-books"]["finetune"].update(members_of=["books", "novels"]))
    assert msg == ("config key models.tiny-gpt2-cb-books.finetune.members_of: 'books' and 'novels' both hold the "
                   "austen documents; a model contaminated on both has seen non-members of each (the other's members)")


def test_unknown_reference_model():
    msg = bad(lambda c: c["probes"]["token_prob"].update(reference_models=["ghost"]))
    assert "probes.token_prob.reference_models.0: unknown model 'ghost'" in msg


@pytest.mark.workflow
def placed(lines, path) -> list[tuple[str | None, str]]:
    """Each problem line as (the config text at the place it names in ``path``, up to a colon; the problem), or
    (None, the line) where it names no place: that the place is the key's is checked by what is there."""
    text = Path(path).read_text().splitlines()
    out = []
    for line in lines:
        m = re.match(rf"{re.escape(str(path))}, line (\d+), column (\d+): (.*)", line)
        out.append((text[int(m[1]) - 1][int(m[2]) - 1:].split(":")[0], m[3]) if m else (None, line))
    return out


def at_its_key(lines: list[str]) -> list[tuple[str, str]]:
    """The :func:`placed` form of problem lines placed at their own key (the dotted key's last name)."""
    return [(re.match(r"config key (\S+?): ", line)[1].rsplit(".", 1)[-1], line) for line in lines]


def test_a_problem_is_placed_at_the_line_and_column_of_its_key_in_the_file_that_sets_it(tmp_path):
    """A config of a hundred lines named a bad key only by its dotted path: the line is now placed where the
    last file that gives the key its value sets it; a name with a dot (``gpt-4.1``) is one key; a missing key
    is placed at the mapping it is missing from; a value no file holds (``--config``) and a key no file or
    mapping above it holds get no place (check-config names its one file)."""
    from memaudit.config import locate_problems

    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("seed: 1\nmodels:\n  gpt-4.1:\n    backend: openai\n")
    second.write_text("# mine\nseed: -3\nstats:\n  selection: {qs: [0.1, 0.1]}\nmodels:\n  gpt-4.1:\n    dtpe: x\n")
    config = {"seed": -3, "stats": {"selection": {"qs": [0.1, 0.1]}},
              "models": {"gpt-4.1": {"backend": "openai", "dtpe": "x"}}}
    problems = ["config key seed: must be >= 0, not the number -3",
                "config key models.gpt-4.1.dtpe: unknown key",
                "config key models.gpt-4.1.api: required for backend 'openai'",
                "config key stats.selection.qs: must not list an item twice",
                "config key stats.selection.qs.1: repeated",
                "config key benchmarks: missing (required)"]
    assert locate_problems("\n".join(problems), config, [first, second]).splitlines() == [
        f"{second}, line 2, column 1: {problems[0]}",
        f"{second}, line 7, column 5: {problems[1]}",
        f"{second}, line 6, column 3: {problems[2]}",  # the last file to hold models.gpt-4.1
        f"{second}, line 4, column 15: {problems[3]}",
        f"{second}, line 4, column 25: {problems[4]}",
        problems[5]]
    overridden = {**config, "seed": -5}  # --config seed=-5: no file holds -5
    assert locate_problems(problems[0].replace("-3", "-5"), overridden, [first, second]) == (
        "config key seed: must be >= 0, not the number -5")
    assert locate_problems(problems[5], config, [second], name_file=True) == f"{second}: {problems[5]}"
    unreadable = tmp_path / "c.yaml"  # an impossible date: PyYAML raises ValueError; the file places nothing
    unreadable.write_text("seed: -3\nwhen: 2023-02-30\n")
    assert locate_problems(problems[0], config, [unreadable]) == problems[0]


def test_snakemake_rejects_bad_config_naming_the_key(tmp_path):
    cfg = copy.deepcopy(CI)
    cfg["stats"]["n_boot_ci"] = "many"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "all", "--configfile", str(path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert placed(proc.stderr.splitlines(), path) == at_its_key(
        ["config key stats.n_boot_ci: must be an integer, not the string 'many'"])


def test_every_local_input_a_config_names_must_be_there_before_any_job_runs(tmp_path):
    """A labels file, data file or folder, books folder, checkpoint, prompt folder or rejection corpus
    that is not there is one line naming its key, relative paths read from the workflow's directory."""
    from memaudit.config import check_local_inputs, local_inputs

    (tmp_path / "labels.csv").write_text("book,label\nEmma.txt,1\n")
    (tmp_path / "books").mkdir()
    cfg = validate_config(CI)
    cfg["benchmarks"]["mine"] = {**cfg["benchmarks"]["novels"], "labels": "labels.csv", "sources": ["user_books"],
                                 "source_options": {"user_books": {"directory": "bookz"}}}
    cfg["benchmarks"]["pub"] = {"published": {"format": "copybench", "path": str(tmp_path / "books"),
                                              "labels": "titles.csv"}}
    cfg["pretrain"]["sources"] = ["user_books"]
    cfg["pretrain"]["source_options"] = {"user_books": {"directory": "books"}}
    cfg["models"]["theirs"] = {"family": "theirs", "source": {"path": "/nowhere/checkpoint"}}
    cfg["probes"]["copybench"]["memfree_rejection_file"] = "corpus.json"
    # the extractor's summaries: a missing file was Snakemake's multi-line MissingInputException, or nothing
    # at all where the items were already built
    cfg["probes"]["copybench"]["extractor"] = {"summaries": "summaries.jsonl"}
    assert [key for key, _ in local_inputs(cfg)] == [
        "benchmarks.mine.labels", "benchmarks.mine.source_options.user_books.directory",
        "benchmarks.pub.published.path", "benchmarks.pub.published.labels",
        "pretrain.source_options.user_books.directory", "models.theirs.source.path",
        "probes.copybench.memfree_rejection_file", "probes.copybench.extractor.summaries"]
    assert check_local_inputs(cfg, root=tmp_path) == [
        "config key benchmarks.mine.source_options.user_books.directory: bookz: no such file or folder",
        "config key benchmarks.pub.published.labels: titles.csv: no such file or folder",
        "config key models.theirs.source.path: /nowhere/checkpoint: no such file or folder",
        "config key probes.copybench.memfree_rejection_file: corpus.json: no such file or folder",
        "config key probes.copybench.extractor.summaries: summaries.jsonl: no such file or folder"]
    # a books folder only counts where user_books is a source
    cfg["benchmarks"]["mine"]["sources"] = ["austen"]
    assert "benchmarks.mine.source_options.user_books.directory" not in dict(local_inputs(cfg))


def test_a_published_path_must_be_a_folder_or_a_file_as_its_format_reads_it(tmp_path):
    """An articles folder given as a file (the dates.csv, say), or a published set's file given as its folder,
    passed memaudit check-config and stopped the dataset job."""
    from memaudit.config import check_local_inputs

    (tmp_path / "arts").mkdir()
    (tmp_path / "arts" / "dates.csv").write_text("file,date\n")
    (tmp_path / "nyt.jsonl").write_text("")
    cfg = validate_config(CI)
    cfg["benchmarks"] = {
        "arts": {"published": {"format": "articles", "path": "arts/dates.csv", "cutoff": "2023-01-01"}},
        "nyt.2023": {"published": {"format": "nyt", "path": "arts"}},
        "fine": {"published": {"format": "wikimia", "path": "nyt.jsonl"}},
        "cb": {"published": {"format": "copybench", "path": "nyt.jsonl"}}}
    assert check_local_inputs(cfg, root=tmp_path) == [
        "config key benchmarks.arts.published.path: arts/dates.csv: a file, but format articles reads a folder",
        "config key benchmarks.cb.published.path: nyt.jsonl: a file, but format copybench reads a folder",
        "config key benchmarks.nyt.2023.published.path: arts: a folder, but format nyt reads a file"]


def test_a_model_folder_that_is_no_model_and_a_gguf_file_nothing_reads_are_named_before_any_job(tmp_path):
    """``source.path`` at an empty folder, a file or a LoRA adapter's folder passed the check, and the prepare job
    stopped on "Unrecognized model" naming no key; a ``gguf_file`` beside a builtin or tiny model was ignored
    unsaid, and one missing from its folder failed in the job with a bogus hub URL."""
    from memaudit.config import check_local_inputs

    for name in ("empty", "adapter", "model", "quantised"):
        (tmp_path / name).mkdir()
    (tmp_path / "weights.bin").write_bytes(b"\0")
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "quantised" / "m.gguf").write_bytes(b"GGUF")
    cfg = validate_config(CI)
    for name, source in {"a-empty": {"path": "empty"}, "b-file": {"path": "weights.bin"},
                         "c-adapter": {"path": "adapter"}, "d-model": {"path": "model"},
                         "e-gguf": {"path": "quantised", "gguf_file": "m.gguf"},
                         "f-gguf": {"path": "quantised", "gguf_file": "nosuch.gguf"}}.items():
        cfg["models"][name] = {"family": "theirs", "source": source}
    assert check_local_inputs(cfg, root=tmp_path) == [
        "config key models.a-empty.source.path: empty: no config.json (a Hugging Face model folder holds one beside "
        "its weights; a GGUF file is named by source.gguf_file)",
        "config key models.b-file.source.path: weights.bin: a file, but a model is a folder (config.json and the "
        "weights)",
        "config key models.c-adapter.source.path: adapter: a LoRA adapter (adapter_config.json), not a model; give "
        "the folder of a whole model (an adapter merged into its base with peft's merge_and_unload, say)",
        "config key models.f-gguf.source.gguf_file: quantised/nosuch.gguf: no such file or folder"]
    assert bad(lambda c: c["models"]["tiny-gpt2-cb"]["source"].update(gguf_file="m.gguf")) == (
        "config key models.tiny-gpt2-cb.source.gguf_file: only with path or hub_id (a tiny_gpt2 model has no GGUF "
        "file to name)")
    assert bad(lambda c: c["models"]["smollm2-135m"]["source"].update(gguf_file="m.gguf")) == (
        "config key models.smollm2-135m.source.gguf_file: only with path or hub_id (a builtin model has no GGUF "
        "file to name)")


def test_a_prompt_folder_without_a_prompt_file_the_run_reads_is_named_before_any_job_runs(tmp_path):
    """``prompt: paper`` reads ``prompts.<mode>.format<n>.json`` from ``prompt_dir`` for each mode run and
    format (fact recall: format 1 only). A folder lacking one stopped that mode's probe job, after the items and
    the other modes' jobs had run (hours of generation on a real run), with no config key named."""
    from memaudit.config import check_local_inputs

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for name in ("prompts.literal.format1.json", "prompts.literal.format3.json", "prompts.qa.format2.json"):
        (prompts / name).write_text(json.dumps(PROMPT_FILE))
    cfg = validate_config(CI)
    cfg["probes"]["copybench"].update(prompt="paper", prompt_dir="prompts", formats=[1, 3])
    cfg["probes"]["copybench_qa"] = {"models": ["tiny-gpt2-cb"], "benchmarks": ["books"]}
    assert check_local_inputs(cfg, root=tmp_path) == [
        "config key probes.copybench.prompt_dir: prompts: no prompts.nonliteral.format1.json (prompt: paper reads "
        "prompts.<mode>.format<n>.json for each CopyBench mode run and each of probes.copybench.formats; fact "
        "recall format 1 only)",
        "config key probes.copybench.prompt_dir: prompts: no prompts.nonliteral.format3.json (prompt: paper reads "
        "prompts.<mode>.format<n>.json for each CopyBench mode run and each of probes.copybench.formats; fact "
        "recall format 1 only)",
        "config key probes.copybench.prompt_dir: prompts: no prompts.qa.format1.json (prompt: paper reads "
        "prompts.<mode>.format<n>.json for each CopyBench mode run and each of probes.copybench.formats; fact "
        "recall format 1 only)"]
    cfg["probes"]["copybench"]["prompt"] = "bare"  # the bare prefix reads no prompt file
    assert check_local_inputs(cfg, root=tmp_path) == []


def test_a_prompt_file_or_rejection_corpus_the_probe_could_not_read_is_named_before_any_job_runs(tmp_path):
    """A broken prompt file, a prompt_dir that is a file, a corpus that is a folder or no array: check-config said
    valid and the probe job stopped on it after the models were prepared, its old outputs already removed."""
    from memaudit.config import check_local_inputs

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for n in (1, 2, 3):
        (prompts / f"prompts.literal.format{n}.json").write_text(json.dumps(PROMPT_FILE))
    (prompts / "prompts.literal.format2.json").write_text('{"instruction": "x"\n')
    (prompts / "prompts.nonliteral.format1.json").write_text(json.dumps({**PROMPT_FILE, "task_prompt": "Go:"}))
    (tmp_path / "corpus.json").write_text('{"not": "an array"}')
    cfg = validate_config(CI)
    cfg["probes"]["copybench"].update(prompt="paper", prompt_dir="prompts", formats=[1, 2, 3],
                                      memfree_rejection_file="corpus.json")
    del cfg["probes"]["copybench_nonliteral"]
    prompt_key = "config key probes.copybench.prompt_dir"
    corpus_key = "config key probes.copybench.memfree_rejection_file"
    assert check_local_inputs(cfg, root=tmp_path) == [
        f"{prompt_key}: {prompts}/prompts.literal.format2.json, line 2, column 1: not valid JSON (Expecting ',' "
        f"delimiter)",
        f"{corpus_key}: {tmp_path}/corpus.json: the top level is an object, expected an array of records"]
    (tmp_path / "corpus.json").unlink()
    (tmp_path / "corpus.json").mkdir()
    (prompts / "prompts.literal.format2.json").write_text(json.dumps(PROMPT_FILE))
    assert check_local_inputs(cfg, root=tmp_path) == [
        f"{corpus_key}: corpus.json: a folder, but memfree_rejection_file names a JSON file (an array of texts)"]
    cfg["probes"]["copybench"]["decodings"] = ["greedy"]  # no MemFree: the corpus is read by nothing
    assert check_local_inputs(cfg, root=tmp_path) == []
    cfg["probes"]["copybench"]["prompt_dir"] = "corpus.json/../prompts/prompts.literal.format1.json"
    assert check_local_inputs(cfg, root=tmp_path) == [
        f"{prompt_key}: corpus.json/../prompts/prompts.literal.format1.json: a file, but prompt_dir names the folder "
        f"of the prompt files"]


@pytest.mark.workflow
def test_a_labels_file_renamed_after_a_finished_dataset_stops_the_workflow(tmp_path):
    """Snakemake names a missing input only of a job it will run: after a finished dataset a labels
    path that is not there was accepted, the old dataset kept and the summary told of the new path."""
    from workflow_helpers import make_workdir

    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf")
    books = tmp_path / "books"
    books.mkdir()
    for i in range(4):
        (books / f"Book{i}.txt").write_text(" ".join(f"word{i}x{j}" for j in range(300)) + "\n")
    (tmp_path / "labels.csv").write_text("book,label\n" + "".join(f"Book{i}.txt,{i % 2}\n" for i in range(4)))
    cfg = copy.deepcopy(CI)
    cfg["benchmarks"]["mine"] = {"sources": ["user_books"], "labels": str(tmp_path / "labels.csv"),
                                 "source_options": {"user_books": {"directory": str(books)}}}
    cfg["probes"]["token_prob"]["benchmarks"].append("mine")
    (workdir / "config/mine.yaml").write_text(yaml.safe_dump(cfg))
    run = [sys.executable, "-m", "snakemake", "--cores", "1"]
    # a bad label is found before any job runs (a failed dataset job would have removed its dataset)
    good = (tmp_path / "labels.csv").read_text()
    (tmp_path / "labels.csv").write_text(good.replace("Book1.txt,1", "Book1.txt,yes"))
    proc = subprocess.run([*run, "results/datasets/mine/documents.jsonl", "--configfile", "config/mine.yaml"],
                          cwd=workdir, capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (1, f"config key benchmarks.mine.labels: {tmp_path / 'labels.csv'}, "
                                                 "line 3, column label: 'yes' is not 0 or 1 (1 = member)\n")
    (tmp_path / "labels.csv").write_text(good)
    proc = subprocess.run([*run, "results/datasets/mine/documents.jsonl", "--configfile", "config/mine.yaml"],
                          cwd=workdir, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg["benchmarks"]["mine"]["labels"] = str(tmp_path / "labels_v2.csv")
    (workdir / "config/mine.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([*run, "-n", "all", "--configfile", "config/mine.yaml"], cwd=workdir, capture_output=True,
                          text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", f"config key benchmarks.mine.labels: {tmp_path / 'labels_v2.csv'}: no such file or folder\n")
    from memaudit.cli import main

    assert main(["check-config", str(workdir / "config/mine.yaml")]) == 2


def test_probe_on_a_backend_without_the_capability_fails_validation(monkeypatch):
    from memaudit.backends import base

    from memaudit.jobs import check_config

    # a text-only backend (as API backends are); the schema's enum lists only real
    # backends, so the cross-key check is run on its own
    monkeypatch.setitem(base._REGISTRY, "textonly", ("x", "X", frozenset({base.GENERATE})))
    full = validate_config(CI)
    full["models"]["smollm2-135m"]["backend"] = "textonly"
    with pytest.raises(ConfigError) as err:
        check_config(full)
    assert "probes.token_prob.models.0: probe 'token_prob' needs token_logprobs" in str(err.value)


@pytest.mark.workflow
def test_api_model_validates_and_gets_no_white_box_jobs(tmp_path):
    cfg = copy.deepcopy(CI)
    cfg["models"]["gpt-x"] = {"backend": "openai", "api": {
        "model_id": "gpt-4o-mini-2024-07-18", "api_key_env": "OPENAI_API_KEY",
        "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}
    validate_config(cfg)  # token_prob needs token log-probabilities: the API model is skipped, not an error
    path = tmp_path / "api.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "all", "--configfile", str(path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpt-x" not in proc.stdout
    bad_key = copy.deepcopy(cfg)
    bad_key["models"]["gpt-x"]["api"]["api_key_env"] = "sk-live-123456"
    with pytest.raises(ConfigError) as err:
        validate_config(bad_key)
    assert "models.gpt-x.api.api_key_env" in str(err.value) and "sk-live-123456" not in str(err.value)


def test_dtype_auto_is_the_schema_default_and_the_shipped_configs_use_it():
    cfg = copy.deepcopy(CI)
    del cfg["models"]["smollm2-135m"]["dtype"]
    assert validate_config(cfg)["models"]["smollm2-135m"]["dtype"] == "auto"
    for name in ("config.yaml", "ci.yaml"):
        models = load_config(ROOT / "config" / name)["models"]
        assert {entry["dtype"] for entry in models.values()} == {"auto"}, name
    msg = bad(lambda c: c["models"]["smollm2-135m"].update(dtype="fp8"))
    assert "models.smollm2-135m.dtype" in msg and "'fp8'" in msg


def test_paper_config_validates_with_the_papers_settings(tmp_path):
    pinned = tmp_path / "paper.yaml"
    pinned.write_text((ROOT / "config" / "paper.yaml").read_text().replace("REPLACE_WITH_COMMIT", SHA))
    cfg = load_config(pinned)
    decop = cfg["probes"]["decop"]
    assert decop["orderings"] == "permutations" and decop["lengths"] == [64, 128, 256]
    assert decop["passages_per_document"] == 34 and decop["calibration_documents"] == {"default": 30, "arxivtection": 0}
    from memaudit.probes.decop.plan import calibration_documents

    # DE-COP's 30 unseen books; arXivTection's 25 clean papers would all be held out: no calibration there
    clean = {"booktection": 30, "arxivtection": 0}
    assert {b: calibration_documents(decop, b) for b in clean} == clean
    assert decop["paraphrase"]["temperature"] == 0.1
    # DE-COP's logit mode on the chat checkpoints, as the reference's 2_decop_hf.py loads them
    assert [cfg["models"][m]["source"]["hub_id"] for m in cfg["probes"]["decop_logit"]["models"]] == [
        "meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-13b-chat-hf"]
    paraphraser = cfg["models"][decop["paraphrase"]["model"]]
    assert paraphraser["backend"] == "openai" and paraphraser["api"]["api_key_env"] == "OPENAI_API_KEY"
    assert cfg["probes"]["token_prob"]["min_k_ratios"] == [0.2]
    # CopyBench's event judge is the paper's Flan-T5-XL
    judge = cfg["probes"]["copybench"]["event_judge"]["model"]
    assert cfg["models"][judge]["source"]["hub_id"] == "google/flan-t5-xl"
    # the information-guided probes' reference is the paper's masked LM
    reference = cfg["probes"]["cloze"]["reference"]["model"]
    assert cfg["models"][reference]["source"]["hub_id"] == "google-bert/bert-base-uncased"
    # and no probe runs on it nor on the encoder-decoder judge (each job would stop at its start: neither is
    # a causal LM), while token_prob still scores every causal local model
    from memaudit.jobs import probe_runs
    from memaudit.probes.registry import FAMILIES

    probed = {m for fam in FAMILIES for _, m, _ in probe_runs(cfg, fam)}
    assert not probed & {reference, judge}
    causal = {m for m, e in cfg["models"].items() if e["backend"] == "hf"} - {reference, judge}
    assert {m for _, m, _ in probe_runs(cfg, "token_prob")} == causal
    # Table 2's baselines on BookTection-128 only; DE-COP on all three lengths of the same books
    assert cfg["probes"]["token_prob"]["benchmarks"][0] == "booktection_128"
    assert cfg["benchmarks"]["booktection_128"]["published"] == {**cfg["benchmarks"]["booktection"]["published"],
                                                                 "length": "medium"}
    assert "length" not in cfg["benchmarks"]["booktection"]["published"]
    local = [e for e in cfg["models"].values() if e["backend"] == "hf"]
    assert local and all(e["dtype"] == "auto" and e["device"] == "auto" for e in local)
    assert cfg["stats"]["n_boot_small"] == 10


def test_gpu_config_puts_every_local_model_on_a_gpu_and_claims_one_per_job():
    """config/gpu.yaml (run end to end on an H100, docs/cluster.md): the ci workflow's token-probability
    part, every model `device: cuda`, so each of their GPU jobs claims one GPU even where the machine
    building the job graph has none (a cluster's login node)."""
    from memaudit.devices import model_gpus

    cfg = load_config(ROOT / "config" / "gpu.yaml")
    assert {e["device"] for e in cfg["models"].values()} == {"cuda"}
    assert {model_gpus(e, visible=0) for e in cfg["models"].values()} == {1}
    assert cfg["probes"]["token_prob"]["models"] == sorted(cfg["models"])
    assert [k for k, v in cfg["probes"].items() if "models" in v] == ["token_prob"]  # the only probe that runs
    assert cfg["models"]["smollm2-135m-contaminated"]["finetune"]["method"] == "lora"


# ------------------------------------------------------------------ the workflow's config errors (dry runs)

import snakemake_forkserver  # noqa: E402
from workflow_helpers import make_workdir, planned_jobs  # noqa: E402

# Planted fake credentials: each must appear nowhere the dry run prints or writes.
OPENAI_KEY = "sk-proj-PLANTEDa1B2c3D4e5F6g7H8i9J0kLmN"
ANTHROPIC_KEY = "sk-ant-api03-PLANTEDz9Y8x7W6v5U4t3S2r1Q0"
RANDOM_TOKEN = "PLANTEDaB3dE5gH7jK9mN1pQ3rS5tU7"  # no provider prefix: refused for its name and entropy
PRICING = {"input_per_mtok": 1, "output_per_mtok": 1}
API_KEYS_HERE = ("api_key_env, base_url, concurrency, logprobs, max_retries, max_tokens_field, model_id, "
                 "pricing, reasoning, repetition_penalty, revision, system_role, thinking, timeout, top_logprobs")
TOP_KEYS = ("api, assets_dir, benchmarks, cache_dir, checkpoints, figures, generation_cache, models, pretrain, probes, seed, "
            "stats, threads_per_job")
CREDENTIAL = ("looks like an API key or token (the value is not shown); keep keys out of the config: put the key "
              "in an environment variable and name that variable in api_key_env")
IN_QUERY = ("must not carry credentials in its query string (parameter {!r}); put the key in the variable named "
            "by api_key_env; the value is not shown")
EXTENDED = "Config file config/config.yaml is extended by additional config specified via the command line.\n"


def _ci_with(api: dict | None = None, **top) -> dict:
    cfg = copy.deepcopy(CI)
    if api is not None:
        cfg["models"]["gpt"] = {"backend": "openai", "api": api}
    cfg.update(top)
    return cfg


@pytest.mark.parametrize("base_url, problem", [
    ("http://[::1/v1", "is not a URL that can be parsed (Invalid IPv6 URL)"),  # a traceback at config time
    ("http://", "names no host (http://HOST[:PORT]/...)"),  # these were valid: every request a connection error,
    ("http:///v1", "names no host (http://HOST[:PORT]/...)"),  # after the retries, naming no key
    ("http://127.0.0.1:99999/v1", "is not a URL that can be parsed (its port)"),
    ("http://127.0.0.1:0/v1", "is not a URL that can be parsed (its port)"),
    ("http://127.0.0.1:8000/v1", None),
    ("https://[::1]:8000/v1", None),
])
def test_a_base_url_no_request_could_reach_is_one_line_at_config_time(base_url, problem):
    cfg = _ci_with({"model_id": "local", "base_url": base_url})
    if problem is None:
        assert validate_config(cfg)["models"]["gpt"]["api"]["base_url"] == base_url
        return
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value) == f"config key models.gpt.api.base_url: {problem}; the value is not shown"


SECRET_CASES = {
    "pasted as api.api_key": (
        _ci_with({"model_id": "gpt-4o-mini-2024-07-18", "api_key": OPENAI_KEY, "pricing": PRICING}), (), OPENAI_KEY,
        [f"config key models.gpt.api.api_key: {CREDENTIAL}",
         f"config key models.gpt.api.api_key: unknown key; did you mean 'api_key_env'? (known here: {API_KEYS_HERE})"]),
    "pasted into api_key_env beside another schema error": (
        _ci_with({"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": ANTHROPIC_KEY, "concurrency": 0,
                  "pricing": PRICING}, seed="many"), (), ANTHROPIC_KEY,
        ["config key models.gpt.api.api_key_env: must name an environment variable (e.g. OPENAI_API_KEY) that "
         "holds the key, not the key itself; the value is not shown",
         "config key models.gpt.api.concurrency: must be >= 1, not a number",
         "config key seed: must be an integer, not the string 'many'"]),
    "in base_url's query string": (
        _ci_with({"model_id": "local", "base_url": f"http://127.0.0.1:8000/v1?api_key={OPENAI_KEY}"}), (), OPENAI_KEY,
        ["config key models.gpt.api.base_url: " + IN_QUERY.format("api_key")]),
    "a signature in base_url's query string": (
        _ci_with({"model_id": "local", "base_url": f"https://h.example/v1?X-Amz-Signature={RANDOM_TOKEN}"}), (),
        RANDOM_TOKEN, ["config key models.gpt.api.base_url: " + IN_QUERY.format("X-Amz-Signature")]),
    "in base_url's userinfo": (
        _ci_with({"model_id": "local", "base_url": f"https://me:{OPENAI_KEY}@h.example/v1"}), (), OPENAI_KEY,
        ["config key models.gpt.api.base_url: must not contain credentials (user:password@); put the key in the "
         "variable named by api_key_env; the value is not shown"]),
    "a bearer token under another key": (
        _ci_with({"model_id": "gpt-4o-mini-2024-07-18", "pricing": PRICING, "headers": f"Bearer {RANDOM_TOKEN}"}),
        (), RANDOM_TOKEN,
        [f"config key models.gpt.api.headers: {CREDENTIAL}",
         f"config key models.gpt.api.headers: unknown key (known here: {API_KEYS_HERE})"]),
    "a random token under a key-ish name": (
        _ci_with(None, access_token=RANDOM_TOKEN), (), RANDOM_TOKEN,
        [f"config key access_token: {CREDENTIAL}", f"config key access_token: unknown key (known here: {TOP_KEYS})"]),
    "on the command line, over the demo config": (
        None, ("--config", f"api_key={ANTHROPIC_KEY}"), ANTHROPIC_KEY,
        [f"config key api_key: {CREDENTIAL}", f"config key api_key: unknown key; did you mean 'api'? (known here: "
                                              f"{TOP_KEYS})"]),
}


def _dry_run_and_everything_written(tmp_path, config: dict | None, extra: tuple):
    """A dry run in a fresh workdir (the config file outside it): the process and the bytes of every file
    in the workdir afterwards (.snakemake/, logs/, results/ and all)."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    make_workdir(workdir, share_resources=False)
    args = list(extra)
    if config is not None:
        path = tmp_path / "my.yaml"
        path.write_text(yaml.safe_dump(config))
        args += ["--configfile", str(path)]
    proc = snakemake_forkserver.run(["-n", "all", *args], cwd=workdir)
    return proc, {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}


@pytest.mark.workflow
@pytest.mark.parametrize("case", SECRET_CASES)
def test_a_planted_key_is_refused_in_one_line_per_problem_and_never_printed_or_written(tmp_path, case):
    config, extra, key, lines = SECRET_CASES[case]
    proc, written = _dry_run_and_everything_written(tmp_path, config, extra)
    assert proc.returncode == 1
    if config is None:  # the key is set on the command line, in no file: no place is named
        assert proc.stderr.splitlines() == lines
    else:
        assert placed(proc.stderr.splitlines(), tmp_path / "my.yaml") == at_its_key(lines)
    assert proc.stdout == (EXTENDED if extra else "")
    assert key not in proc.stdout + proc.stderr
    assert [p for p, data in written.items() if key.encode() in data] == []
    assert written  # the search saw the workdir (the copied workflow at least)
    if config is not None:  # and it would have found the key: it is in the config given
        assert key.encode() in (tmp_path / "my.yaml").read_bytes()

def test_a_key_pasted_where_a_name_belongs_is_shown_by_no_line():
    """A cross-key check quotes the names it finds (a model's, a probe's list entry): a pasted key used as one
    is refused, and no other line about the same entry prints it either."""
    cfg = copy.deepcopy(CI)
    cfg["models"][OPENAI_KEY] = {"family": "x"}  # neither source nor base + finetune: a cross-key problem
    cfg["probes"]["token_prob"]["models"] = [ANTHROPIC_KEY]  # an unknown model's name is quoted
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    lines = str(err.value).splitlines()
    assert [line for line in lines if OPENAI_KEY in line or ANTHROPIC_KEY in line] == []
    assert f"config key models.<a key that looks like a credential>: {CREDENTIAL}" in lines
    assert f"config key probes.token_prob.models.0: {CREDENTIAL}" in lines
    assert ("config key models.<not shown>: give exactly one of 'source' (a base model) or 'base' + 'finetune' "
            "(a fine-tuned model)") in lines
    assert [line for line in lines if line.startswith("config key probes.token_prob.models.0: unknown model")] == [
        "config key probes.token_prob.models.0: unknown model '<not shown>' (configured: <not shown>, smollm2-135m, "
        "smollm2-135m-contaminated, tiny-gpt2-cb, tiny-gpt2-cb-books, tiny-gpt2-small, tiny-gpt2-small-contaminated)"]



@pytest.mark.workflow
def test_config_on_the_command_line_applies_on_top_of_the_demo_config(tmp_path):
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    make_workdir(workdir, share_resources=False)
    demo = planned_jobs(workdir, None)
    assert planned_jobs(workdir, None, "--config", "seed=7") == demo
    assert planned_jobs(workdir, "config/config.yaml") == demo
    proc = snakemake_forkserver.run(["-n", "all", "--config", "seed=x"], cwd=workdir)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, EXTENDED, "config key seed: must be an integer, not the string 'x'\n")
    # --configfile replaces the demo config: ci's models and benchmarks only, not a merge with the demo's
    ci = planned_jobs(workdir, "config/ci.yaml")
    named = {part for _, wildcards in ci for part in wildcards.split(", ") if part.startswith(("model=", "benchmark="))}
    assert named == {f"model={m}" for m in CI["models"]} | {f"benchmark={b}" for b in CI["benchmarks"]}
    proc = snakemake_forkserver.run(["-n", "all", "--configfile", "config/ci.yaml", "--config", "seed=x"], cwd=workdir)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", "config key seed: must be an integer, not the string 'x'\n")
    # a nested value: Snakemake reads the insides of {...} as text, so no number can be given there; the line
    # says so (it read as if the user had typed quotes)
    proc = snakemake_forkserver.run(["-n", "all", "--configfile", "config/ci.yaml", "--config",
                                     "stats={n_boot_small: 5}"], cwd=workdir)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", "config key stats.n_boot_small: must be an integer, not the string '5' (--config reads the values "
               "inside {...} as text: set this one in a --configfile)\n")


@pytest.mark.workflow
def test_an_empty_configfile_is_an_error_naming_it_not_the_demo(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("{}\n")
    proc = snakemake_forkserver.run(["-n", "all", "--configfile", str(path)], cwd=ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", f"{path}: the config file is empty (no keys); give at least benchmarks and models "
               f"(config/ci.yaml is a small example)\n")


@pytest.mark.workflow
def test_a_yaml_error_in_the_demo_config_names_its_line_and_column(tmp_path):
    """The default config is read by the Snakefile's configfile directive, whose own message would be
    "Config file is not valid JSON or YAML" at the Snakefile's line; a --configfile cannot be helped
    (Snakemake reads it before the Snakefile runs; `memaudit check-config FILE` names the line)."""
    from workflow_helpers import make_workdir

    workdir = make_workdir(tmp_path, share_resources=False)
    config = workdir / "config/config.yaml"
    lines = config.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("models:"))
    lines.insert(at + 1, "\tsmollm2-135m-copy: {}")  # a tab where YAML wants spaces
    config.write_text("\n".join(lines) + "\n")
    proc = snakemake_forkserver.run(["-n", "all"], cwd=workdir)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"config/config.yaml, line {at + 2}, column 1: not valid YAML (found character '\\t' that cannot start "
        f"any token)"]


@pytest.mark.parametrize("text, message", [
    ("benchmarks:\n  a: [1, 2\nmodels: {}\n", ", line 3, column 7: not valid YAML (expected ',' or ']', but got ':'; "
                                              "while parsing a flow sequence that starts on line 2)"),
    ("a: 1\n\tb: 2\n", ", line 2, column 1: not valid YAML (found character '\\t' that cannot start any token)"),
    (f"a: 1\nb: *{ANTHROPIC_KEY}\n", ", line 2, column 4: not valid YAML (found undefined alias '<not shown>')"),
    ("", ": the config file is empty (no keys); give at least benchmarks and models (config/ci.yaml is a small "
         "example)"),
    ("# only a comment\n", ": the config file is empty (no keys); give at least benchmarks and models "
                           "(config/ci.yaml is a small example)"),
    ("- a\n- b\n", ", line 1: expected a mapping of config keys at the top level, not a list"),
    (f"{OPENAI_KEY}\n", ", line 1: expected a mapping of config keys at the top level, not a string (the value is "
                        "not shown)"),
    (b"seed: 1\nx: caf\xe9\n", ", line 2: not UTF-8 text (byte 14)"),
    # PyYAML keeps a repeated key's last value without a word: the first model would be dropped
    ("models:\n  a: {family: x}\n  b: {}\n  a: {family: y}\n", ", line 4, column 3: not valid YAML (duplicate key "
                                                                "'a', first on line 2; YAML would keep only the last "
                                                                "one: remove or rename one)"),
    ("benchmarks: {}\nmodels: {a: {}, a: {}}\n", ", line 2, column 17: not valid YAML (duplicate key 'a', first on "
                                                "line 2; YAML would keep only the last one: remove or rename one)"),
    (f"seed: 1\n{OPENAI_KEY}: 1\n{OPENAI_KEY}: 2\n", ", line 3, column 1: not valid YAML (duplicate key "
                                                    "'<not shown>', first on line 2; YAML would keep only the last "
                                                    "one: remove or rename one)"),
    # PyYAML reads an unquoted YYYY-MM-DD as a date, and an impossible one raised its ValueError's traceback
    ("benchmarks:\n  a: {published: {format: articles, path: x, cutoff: 2023-02-30}}\n",
     ", line 2, column 54: not valid YAML (2023-02-30 is not a valid date: day is out of range for month)"),
])
def test_a_config_file_that_cannot_be_read_is_one_line_naming_the_file_and_line(tmp_path, text, message):
    from memaudit.cli import main

    path = tmp_path / "my.yaml"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}{message}"
    assert ANTHROPIC_KEY not in str(err.value) and OPENAI_KEY not in str(err.value)
    assert main(["check-config", str(path)]) == 2


def test_a_setting_holding_a_script_end_tag_is_one_line_at_its_place(tmp_path):
    """``snakemake --report`` copies each job's params into the report's HTML <script> block unescaped: a family
    ``tiny</script><img src=x onerror=alert(1)>`` ended the block there, the report showed no figure or table and
    the rest ran as markup. Any text holding ``</script`` (any case, value or key) is refused at its place."""
    path = tmp_path / "my.yaml"
    text = CI_TEXT.replace("    family: tiny-gpt2\n", '    family: "tiny</SCRIPT><img src=x onerror=alert(1)>"\n', 1)
    assert text != CI_TEXT
    path.write_text(text)
    lines = path.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if "</SCRIPT>" in line)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    model = next(line.strip().rstrip(":") for line in reversed(lines[:row]) if line.startswith("  ") and
                 not line.startswith("   "))
    assert str(err.value) == (
        f"{path}, line {row + 1}, column 5: config key models.{model}.family: holds '</script', which would end the "
        f"data block of the HTML report (snakemake --report copies the settings into it as they are); write it "
        f"without")
    path.write_text(CI_TEXT.replace("    family: tiny-gpt2\n", '    family: "tiny <script>"\n', 1))
    assert load_config(path)["models"][model]["family"] == "tiny <script>"  # an opening tag ends nothing


def test_a_key_yaml_reads_as_no_text_and_a_nan_are_one_line_each_at_their_place(tmp_path):
    """An unquoted ``2024:`` benchmark (a number to YAML) stopped the checks with a TypeError's traceback, a
    ``yes:`` (YAML 1.1's true) was named ``stats.True`` at its block's line, and ``.nan`` passed every bound
    (each comparison with it is false) to stop the dataset job at ``round()``."""
    path = tmp_path / "my.yaml"
    path.write_text(CI_TEXT.replace("benchmarks:\n", "benchmarks:\n  2024:\n    sources: [reuters]\n", 1)
                    .replace("  n_boot_ci: 200\n", "  n_boot_ci: 200\n  yes: 1\n", 1)
                    .replace("    n_documents: 16\n", "    n_documents: 16\n    member_fraction: .nan\n", 1)
                    .replace("min_k_ratios: [0.1, 0.2]", "min_k_ratios: [0.1, .nan]", 1))
    lines = path.read_text().splitlines()

    def at(text: str, column: int) -> str:
        return f"{path}, line {lines.index(text) + 1}, column {column}"

    nan_line = next(i for i, line in enumerate(lines) if "min_k_ratios" in line)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).splitlines() == [
        f"{at('  2024:', 3)}: config key benchmarks.2024: YAML reads this name as the number 2024, and the results "
        f"tables would too: give the benchmark a name with a letter",
        f"{at('  yes: 1', 3)}: config key stats.True: a key must be text, and YAML reads this one as the boolean "
        f"true (unquoted yes, no, on, off, true or false); put it in quotes",
        f"{at('    member_fraction: .nan', 5)}: config key benchmarks.novels.member_fraction: .nan (not a number) "
        f"is no value a setting takes; give a number",
        f"{path}, line {nan_line + 1}, column {lines[nan_line].index('.nan') + 1}: config key "
        f"probes.token_prob.min_k_ratios.1: .nan (not a number) is no value a setting takes; give a number"]
    # a number where a key names a setting's choice, and a model named by a number (each found by name)
    path.write_text(CI_TEXT.replace("  tiny-gpt2-cb:\n", "  7:\n", 1).replace(
        "      tiny_gpt2: {n_layer: 1", "      tiny_gpt2: {1: 2, n_layer: 1", 1))
    problems = str(pytest.raises(ConfigError, load_config, path).value).splitlines()
    assert [line.partition(": ")[2] for line in problems] == [
        "config key models.tiny-gpt2-small.source.tiny_gpt2.1: a key must be text, and YAML reads this one as the "
        "number 1; put it in quotes",
        "config key models.7: YAML reads this name as the number 7, and the results tables would too: give the "
        "model a name with a letter"]


def test_a_key_merged_in_may_be_overridden_without_being_a_duplicate(tmp_path):
    from memaudit.config import read_config_file

    path = tmp_path / "merge.yaml"
    path.write_text("x-model: &small {family: tiny, max_tokens: 64}\n"
                    "models:\n  a: {<<: *small, max_tokens: 32}\n  b:\n    <<: [*small]\n    family: other\n")
    assert read_config_file(path)["models"] == {"a": {"family": "tiny", "max_tokens": 32},
                                                "b": {"family": "other", "max_tokens": 64}}


def test_a_key_in_a_comment_is_refused_since_the_report_embeds_the_file_as_written(tmp_path):
    """Snakemake's report embeds each --configfile word for word, comments included: a key left in a comment
    passed check-config (only values were checked) and went into the report.html people mail."""
    from memaudit.config import read_config_file

    key = "sk-proj-" + "Ab3" * 12
    path = tmp_path / "my.yaml"
    path.write_text(f"# the API key: {key}\nmodels: {{}}\n")
    with pytest.raises(ConfigError) as err:
        read_config_file(path)
    assert str(err.value) == (f"{path}, line 1: a comment holds what looks like an API key or token (the value is "
                              "not shown); the report embeds the config file as written: remove it")
    path.write_text(f"models:\n  m: {{family: x}}  # old one: Bearer {'x9' * 8}\n")
    with pytest.raises(ConfigError, match=r", line 2: a comment holds"):
        read_config_file(path)
    # the shipped configs' comments, and a '#' inside a value, are no comment holding a key
    path.write_text("models:\n  m: {family: 'a#sk-not-a-comment-but-long-enough'}  # a note\n")
    assert read_config_file(path) == {"models": {"m": {"family": "a#sk-not-a-comment-but-long-enough"}}}
    for shipped in sorted((ROOT / "config").glob("*.yaml")):
        read_config_file(shipped)


def test_check_config_lists_every_problem_of_a_file_one_line_each(tmp_path, capsys):
    from memaudit.cli import main

    path = tmp_path / "typo.yaml"
    path.write_text("benchmarkz: {}\n")
    assert main(["check-config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"memaudit check-config: error: {path}, line 1, column 1: config key benchmarkz: unknown key; did you mean "
        f"'benchmarks'? (known here: {TOP_KEYS})",
        f"memaudit check-config: error: {path}: config key benchmarks: missing (required)",
        f"memaudit check-config: error: {path}: config key models: missing (required)"]
    with pytest.raises(ConfigError, match=f"^{tmp_path}: is a folder, not a config file$"):
        load_config(tmp_path)
    assert main(["check-config", str(ROOT / "config" / "ci.yaml")]) == 0
    assert capsys.readouterr().out == f"{ROOT / 'config' / 'ci.yaml'}: valid\n"


@pytest.mark.workflow
def test_check_config_prints_the_warnings_a_dry_run_prints(tmp_path, capsys, monkeypatch):
    """A config checked before a long run shows what the workflow would warn about once (an idle benchmark
    and model, a role left to its default, CopyBench story items too short for the event threshold)."""
    from memaudit.cli import main
    from memaudit.jobs import local_models

    cfg = copy.deepcopy(CI)
    cfg["benchmarks"]["idle"] = dict(cfg["benchmarks"]["news"])
    cfg["models"]["zz-lonely"] = {"family": "tiny-gpt2", "source": {"tiny_gpt2": {}}}
    del cfg["probes"]["decop"]["paraphrase"]["model"]
    cfg["probes"]["copybench"]["n_events"] = 5
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    make_workdir(workdir, share_resources=False)
    path = tmp_path / "warned.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake_forkserver.run(["-n", "all", "--configfile", str(path)], cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    first = sorted(local_models(validate_config(copy.deepcopy(cfg))))[0]
    assert warned == [
        "warning: config key benchmarks.idle: no probe runs on it (no probes.<probe>.benchmarks list names it): "
        "only its dataset and the model-free blind baseline are made",
        "warning: config key models.zz-lonely: no probe runs it and no role, reference, base or control names it: "
        "it is prepared for nothing (add it to a probe's models list, or remove it)",
        f"warning: config key probes.decop.paraphrase.model: not set, so the decop paraphraser is {first!r}, the "
        "first local model by name; name it, or a model added later under an earlier name takes its place",
        "warning: config key probes.copybench.n_events: 5 events a book leave each built story item at most 4 "
        "reference events (its beginning is not one), fewer than the 5 found that count a story as event "
        "copying: copybench_events (events>=5) on benchmark books can only be 0; give n_events at least 6"]
    monkeypatch.chdir(workdir)  # where the dry run looked for the files the config names
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr()
    # with the file, as its errors have it (the dry run's lines are of the one config it runs on)
    assert (out.out, out.err.splitlines()) == (f"{path}: valid\n", [
        f"memaudit check-config: warning: {path}: {line.removeprefix('warning: ')}" for line in warned])


def test_a_model_or_benchmark_name_that_pandas_reads_as_a_number_or_boolean_is_refused():
    """A results table whose every model (or benchmark) is named like a number (2024, 1e3) or a boolean (True) is
    read back by pandas as numbers or booleans: the name 2024 came back as the integer 2024, matching no
    configured name "2024", and 007 as 7."""
    def add(name, like="tiny-gpt2-small"):
        return lambda c: c["models"].update({name: copy.deepcopy(c["models"][like])})

    assert bad(add("2024")) == (
        "config key models.2024: '2024' is a name pandas reads as a number or a boolean in the results tables, "
        "where this model's rows would not match its name; rename the model")
    assert bad(add("1e3")).startswith("config key models.1e3: '1e3' is a name pandas reads as a number")
    assert bad(add("007")).startswith("config key models.007: '007' is a name pandas reads as a number")
    assert bad(add("True")).startswith("config key models.True: 'True' is a name pandas reads as a number")
    # a benchmark's name starts with a letter (the schema): inf and true are the names left to refuse
    assert bad(lambda c: c["benchmarks"].update({"inf": copy.deepcopy(c["benchmarks"]["news"])})) == (
        "config key benchmarks.inf: 'inf' is a name pandas reads as a number or a boolean in the results "
        "tables, where this benchmark's rows would not match its name; rename the benchmark")
    cfg = copy.deepcopy(CI)
    for fine in ("nyt-2024", "v1.5b", "1_000"):
        cfg["models"][fine] = copy.deepcopy(cfg["models"]["tiny-gpt2-small"])
    assert {"nyt-2024", "v1.5b", "1_000"} <= set(validate_config(cfg)["models"])


def test_the_names_refused_as_numbers_are_those_pandas_reads_as_numbers(tmp_path):
    import pandas as pd

    from memaudit.config import _pandas_reads_as_number

    names = ["2024", "007", "1e3", "-4", "+.5", "1.", "inf", "-Infinity", "True", "false", "TRUE",
             "nyt-2024", "v1.5b", "1_000", "0x10", "1,000", "e3", "1e", "Truth", "yes"]
    for name in names:
        pd.DataFrame({"model": [name]}).to_csv(tmp_path / "t.csv", index=False)
        kind = pd.read_csv(tmp_path / "t.csv")["model"].dtype.kind
        assert _pandas_reads_as_number(name) == (kind in "biuf"), (name, kind)


def test_a_test_running_snakemake_unmarked_is_stopped_naming_the_marker(request):
    """make test-quick runs the tests marked neither ``workflow`` nor ``slow`` ("unit tests only"); 17 tests ran
    Snakemake (dry runs, a whole dataset) unmarked, in every quick run. A call through the tests' Snakemake
    helpers from an unmarked test now fails naming the test and the marker; this test, unmarked, is stopped
    before any Snakemake starts."""
    assert snakemake_forkserver.current_test is request.node
    with pytest.raises(AssertionError) as err:
        snakemake_forkserver.run(["--version"], cwd=ROOT)
    assert str(err.value) == (f"{request.node.nodeid} runs Snakemake: mark it @pytest.mark.workflow (make "
                              "test-quick, unit tests only, leaves such tests out)")
    request.node.add_marker(pytest.mark.workflow)
    snakemake_forkserver.check_marked()  # marked: no error
