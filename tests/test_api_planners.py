"""The cost estimate's planners against what the runners really send.

Each family's runner runs on an API model through the real OpenAI SDK and the loopback
server; the requests the server received must be the planned ones (same count, same
system and user texts), and pricing the plan afterwards finds every planned request in
the response cache (same wire body: max tokens, stop, repetition penalty, seed), so none
is left to send. The event judge's plan is an upper bound, tight when every story fills
its chunks.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from api_server import loopback
from memaudit.backends.ledger import estimate_plan
from memaudit.errors import ConfigError
from memaudit.backends.planning import not_planned, plan_run, planned_inputs, probes_without_planner
from memaudit.io import write_json, write_jsonl
from memaudit.jobs import validate_config
from memaudit.probes.job import ProbeJob
from memaudit.probes.registry import load_callable, runner_of

KEY_ENV = "MEMAUDIT_TEST_PLAN_KEY"


def _config(tmp_path, base_url: str, probes: dict) -> dict:
    def api(model_id):
        return {"model_id": model_id, "base_url": base_url, "api_key_env": KEY_ENV,
                "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}

    return validate_config({
        "benchmarks": {"b": {"sources": ["austen"]}},
        "models": {"served": {"backend": "openai", "api": api("served-model")},
                   "judge": {"backend": "openai", "api": api("judge-model")},
                   # two different local models: KTD refuses a model built on the paraphraser's weights
                   "local": {"source": {"tiny_gpt2": {}}}, "paraphraser": {"source": {"tiny_gpt2": {"n_layer": 3}}}},
        "probes": probes, "api": {"cache": str(tmp_path / "cache.sqlite")}})


@pytest.fixture()
def data(tmp_path, monkeypatch):
    """The benchmark's dataset folder the planners read, with the served model's key set."""
    monkeypatch.setenv(KEY_ENV, "sk-test-plan")
    return tmp_path / "datasets" / "b"


def _received(server, model_id: str = "served-model") -> Counter:
    """(system text, user text) of every request the server got for one model id."""
    out = Counter()
    for r in server.records:
        if r.request.model == model_id:
            system = next((m["content"] for m in r.request.messages if m["role"] == "system"), None)
            out[(system, r.request.messages[-1]["content"])] += 1
    return out


def _planned(plan, model: str) -> Counter:
    return Counter((r["system_prompt"], r["prompt"]) for r in plan if r["model"] == model)


def _run(config, family: str, mode: str, inputs: dict, tmp_path, outputs: list[str]) -> None:
    out = {f.split(".")[0]: str(tmp_path / "out" / f"{mode}_{f}") for f in outputs}
    runner_of(family)(ProbeJob(family, mode, "served", "b", config, inputs, out))


def _all_cached(config, plan, model: str) -> dict:
    row = next(r for r in estimate_plan(config, plan).rows if r["model"] == model)
    return {k: row[k] for k in ("n_requests", "n_cached", "n_to_send")}


# ----------------------------------------------------------------------------- DE-COP

def _decop_items():
    base = {"answer": 0, "meta": {"title": "Emma", "author": "Jane Austen", "kind": "book", "length_tokens": 64}}
    items = []
    for d in range(3):
        for p in range(2):  # two passages per document: decop_blackbox probes only the first
            pid = f"d{d}#L64p{p}"
            items.append({**base, "item_id": pid, "passage_id": pid, "doc_id": f"d{d}", "label": d % 2,
                          "options": [f"{pid} option {k}: the house by the sea stood empty." for k in range(4)],
                          "meta": {**base["meta"], "role": "calibrate" if d == 2 else "evaluate"}})
    return items


def test_decop_plan_is_what_its_logit_and_blackbox_modes_send(tmp_path, data):
    write_jsonl(data / "decop_items.jsonl", _decop_items())
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "decop": {"lengths": [64], "orderings": "latin_square", "paraphrase": {"model": "local"}},
            "decop_logit": {"models": ["served"]},
            "decop_blackbox": {"models": ["served"], "passages_per_document": 1}})
        assert planned_inputs(config) == ["results/datasets/b/decop_items.jsonl"]
        plan = plan_run(config, tmp_path / "datasets")
        # logit: 6 passages x 4 orderings; black-box: the first passage of 3 documents x 4 orderings
        assert Counter(r["kind"] for r in plan) == {"option_logprobs": 24, "generate": 12}
        assert {r["max_new_tokens"] for r in plan if r["kind"] == "generate"} == {8}
        for mode in ("logit", "blackbox"):
            _run(config, "decop", mode, {"mcq": str(data / "decop_items.jsonl")}, tmp_path,
                 ["answers.csv", "documents.csv", "table.csv", "calibration.json"])
        received = _received(server)
        assert sum(received.values()) == 36
        # every question's text once per mode: the logit and black-box prompts are the same texts
        assert received == _planned(plan, "served")
        assert _all_cached(config, plan, "served") == {"n_requests": 36, "n_cached": 36, "n_to_send": 0}


def test_decop_with_an_api_paraphraser_is_not_planned_rather_than_paid_for(tmp_path):
    config = _config(tmp_path, "http://127.0.0.1:9/v1", {
        "decop": {"lengths": [64], "paraphrase": {"model": "judge"}}, "decop_blackbox": {"models": ["served"]}})
    assert planned_inputs(config) == []  # the estimate must not make the paraphraser run
    assert plan_run(config, tmp_path) == []
    assert not_planned(config) == ["decop_blackbox on b: its items are paraphrased by API model 'judge' first "
                                   "(rule decop_items); build them (snakemake results/datasets/b/decop_items.jsonl) "
                                   "and estimate again, or estimate with a local paraphraser"]


def test_decop_items_an_api_paraphraser_made_in_an_earlier_run_are_priced(tmp_path, data):
    """docs/models.md's remedy: build the items (paying the paraphraser), estimate again. The planner read its
    reason from the config alone, so the items, once built, were never priced."""
    from memaudit.backends.planning import write_estimate

    config = _config(tmp_path, "http://127.0.0.1:9/v1", {
        "decop": {"lengths": [64], "orderings": "latin_square", "paraphrase": {"model": "judge"}},
        "decop_blackbox": {"models": ["served"], "passages_per_document": 1}})
    assert planned_inputs(config) == []  # never a dependency: stale items would be rebuilt, the paraphraser paid
    assert plan_run(config, tmp_path / "datasets") == []
    write_jsonl(data / "decop_items.jsonl", _decop_items())
    plan = plan_run(config, tmp_path / "datasets")
    # the first passage of 3 documents x 4 orderings, as the test above plans from a local paraphraser's items
    assert Counter(r["kind"] for r in plan) == {"generate": 12} and {r["model"] for r in plan} == {"served"}
    assert not_planned(config, tmp_path / "datasets") == []
    text = write_estimate(config, tmp_path / "estimate.txt", tmp_path / "plan.jsonl", tmp_path / "datasets")
    assert text.splitlines()[-1] == (
        f"priced from records an API role model made in an earlier run: decop_blackbox on b: {data}/decop_items.jsonl "
        "(as built; a config change that rebuilds them changes the estimate)")
    assert "not included" not in text


# ----------------------------------------------------------------------------- cloze

def _cloze_items():
    items = []
    for d in range(2):
        text = f"Doc {d}: the captain walked along the harbour at dawn."
        tokens = []
        for word in ("captain", "harbour"):
            start = text.index(word)
            context = text[:start] + "[MASK]" + text[start + len(word):]
            tok = {"word": word, "start": start, "end": start + len(word), "context": context}
            tokens.append({**tok, "measure": "prob"})
            if word == "harbour":  # selected by two token types: asked once
                tokens.append({**tok, "measure": "rank"})
        items.append({"passage_id": f"d{d}#p0", "doc_id": f"d{d}", "label": d, "text": text, "tokens": tokens})
    return items


def test_cloze_blackbox_plan_is_one_prompt_per_masked_context_as_sent(tmp_path, data):
    write_jsonl(data / "cloze_items.jsonl", _cloze_items())
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "cloze": {"measures": ["prob", "rank"], "reference": {"model": "local"}},
            "cloze_blackbox": {"models": ["served"]}})
        plan = plan_run(config, tmp_path / "datasets")
        assert len(plan) == 4  # 2 passages x 2 distinct masked contexts (6 tokens)
        assert all(r["prompt"].startswith("You have seen the following passage") for r in plan)
        _run(config, "cloze", "blackbox", {"records": str(data / "cloze_items.jsonl")}, tmp_path,
             ["tokens.csv", "texts.csv", "documents.csv"])
        assert _received(server) == _planned(plan, "served")
        assert _all_cached(config, plan, "served") == {"n_requests": 4, "n_cached": 4, "n_to_send": 0}


# ----------------------------------------------------------------------------- CopyBench

def _copybench_files(data):
    literal = [{"item_id": f"l{i}", "doc_id": f"d{i}", "book": f"book{i}", "label": i % 2,
                "prefix": f"Book {i} begins: the rain fell on the old town.", "reference": "and nobody came."}
               for i in range(3)]
    events = ["A ship sails from the harbour.", "The garden is full of roses.", "A letter arrives."]
    stories = [{"item_id": f"s{i}", "doc_id": f"d{i}", "book": f"book{i}", "label": i % 2,
                "beginning": f"Story {i}: the lighthouse keeper woke early.", "reference_events": events,
                "reference_characters": [["Mara"]]} for i in range(2)]
    demos = {"literal": [{"input": f"demo input {k}", "output": f"demo output {k}"} for k in range(5)],
             "nonliteral": [{"input": f"story start {k}", "output": f"story end {k}"} for k in range(5)]}
    write_jsonl(data / "copybench_literal.jsonl", literal)
    write_jsonl(data / "copybench_nonliteral.jsonl", stories)
    write_jsonl(data / "documents.jsonl", [])
    write_json(data / "copybench_demos.json", demos)
    write_json(data / "copybench_judge.json", {"threshold": 0.5})
    return literal, stories, events


def test_copybench_plan_is_every_format_and_api_decoding_with_its_demos_and_bounds_the_judge(tmp_path, data):
    literal, stories, events = _copybench_files(data)
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "copybench": {"formats": [1, 2], "demonstrations": 2, "decodings": ["greedy", "system"],
                          "literal_max_new_tokens": 40, "nonliteral_max_new_tokens": 256,
                          "event_judge": {"model": "judge"}},
            "copybench_literal": {"models": ["served"]}, "copybench_nonliteral": {"models": ["served"]}})
        assert planned_inputs(config) == [f"results/datasets/b/{f}" for f in
                                          ("copybench_demos.json", "copybench_literal.jsonl",
                                           "copybench_nonliteral.jsonl")]
        plan = plan_run(config, tmp_path / "datasets")
        own = [r for r in plan if r["model"] == "served"]
        # (3 literal + 2 story items) x 2 formats x 2 decodings
        assert len(own) == (3 + 2) * 2 * 2
        assert Counter(r["max_new_tokens"] for r in own) == {40: 12, 256: 8}
        assert {r["repetition_penalty"] for r in own} == {1.1} and {tuple(r["stop"]) for r in own} == {("\n\n\n",)}
        assert sum(r["system_prompt"] is not None for r in own) == 10  # the system decoding's reminder
        # the demos are in the prompt: "demo input" (literal) and "story start" (stories), 2 of them each
        assert all(r["prompt"].count("demo input") == 2 or r["prompt"].count("story start") == 2 for r in own)
        judge = [r for r in plan if r["model"] == "judge"]
        # upper bound: 2 stories x 2 formats x 2 decodings x 3 events x ceil(256 / 128) chunks
        assert len(judge) == 2 * 2 * 2 * 3 * math.ceil(256 / 128) == 48
        for n, r in enumerate(own):
            if r["max_new_tokens"] == 256:  # a distinct story of 200 spaCy tokens per decoding: two 128-token chunks
                server.responder.queue(" ".join(f"story{n}word{k}" for k in range(200)), prompt=r["prompt"])
        for mode in ("literal", "nonliteral"):
            inputs = {"records": f"copybench_{mode}.jsonl", "documents": "documents.jsonl",
                      "judge": "copybench_judge.json", "demos": "copybench_demos.json"}
            _run(config, "copybench", mode, {k: str(data / f) for k, f in inputs.items()}, tmp_path,
                 ["generations.jsonl", "documents.csv", "outcomes.json"])
        assert _received(server) == _planned(plan, "served")
        assert _all_cached(config, plan, "served") == {"n_requests": 20, "n_cached": 20, "n_to_send": 0}
        # every story filled both chunks, so the judge got exactly the bound: each event per chunk
        judged = _received(server, "judge-model")
        assert sum(judged.values()) == len(judge)
        claims = Counter(p.split("Claim: ")[1].split("\n")[0] for (_, p) in judged.elements())
        assert claims == Counter({e: 16 for e in events})
    # a local model under test writes stories too (memfree included): the API judge's bound covers them
    config["probes"]["copybench"]["decodings"].append("memfree")
    planner = load_callable("memaudit.probes.copybench.api_plan:plan_records")
    local = planner(config, "local", stories, mode="nonliteral", datasets=data)
    assert {r["model"] for r in local} == {"judge"} and len(local) == 2 * 2 * 3 * 3 * 2
    # an API model cannot run memfree (its job stops with a config error): nothing to plan for it there
    assert len([r for r in planner(config, "served", stories, mode="nonliteral", datasets=data)
                if r["model"] == "served"]) == 2 * 2 * 2


def test_copybench_sends_a_prompt_files_own_system_text_and_honours_enable_system(tmp_path, data):
    """As the reference's ``generate.py``: the ``system`` decoding (its ``--system_prompt``) sends the prompt
    file's ``system`` text, and a file with ``enable_system`` sends it under every decoding; the runner sends
    what the plan says."""
    _copybench_files(data)
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    demos = [{"input": f"file demo {k}", "output": f"file output {k}"} for k in range(3)]
    for n, system, enabled in ((1, "Do not copy any book.", False), (2, "Write only your own words.", True)):
        write_json(prompts / f"prompts.literal.format{n}.json", {
            "tag": f"literal.format{n}", "system": system, "enable_system": enabled,
            "instruction": f"Continue the passage (format {n}).", "demo_sep": "\n\n\n",
            "demo_prompt": "Prefix: ${input}\nCompletion: ${output}", "task_prompt": "Prefix: ${input}\nCompletion:",
            "demos": demos})
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "copybench": {"formats": [1, 2], "demonstrations": 2, "decodings": ["greedy", "system"],
                          "prompt_dir": str(prompts), "literal_max_new_tokens": 16},
            "copybench_literal": {"models": ["served"]}})
        plan = [r for r in plan_run(config, tmp_path / "datasets") if r["model"] == "served"]
        # 3 items: format 1 greedy bare, format 1 system with its file's text, format 2 with its text under both
        assert Counter((r["prompt"].split("\n")[0], r["system_prompt"]) for r in plan) == {
            ("Continue the passage (format 1).", None): 3,
            ("Continue the passage (format 1).", "Do not copy any book."): 3,
            ("Continue the passage (format 2).", "Write only your own words."): 6}
        inputs = {"records": "copybench_literal.jsonl", "documents": "documents.jsonl", "demos": "copybench_demos.json"}
        _run(config, "copybench", "literal", {k: str(data / f) for k, f in inputs.items()}, tmp_path,
             ["generations.jsonl", "documents.csv", "outcomes.json"])
        # format 2's greedy and system requests are one request (cached): the server got each once
        assert _received(server) == Counter(set(_planned(plan, "served").elements()))


# ----------------------------------------------------------------------------- families with nothing to plan

def test_ktd_on_an_api_model_is_never_scheduled_so_never_unplanned(tmp_path):
    config = _config(tmp_path, "http://127.0.0.1:9/v1", {
        "decop": {"paraphrase": {"model": "paraphraser"}}, "decop_likelihood": {}, "ktd": {"models": ["local"]},
        "token_prob": {}})
    # gradient norms and token log-probabilities: no API model serves them, so neither is planned nor missing
    assert probes_without_planner(config) == []
    assert not_planned(config) == []
    with pytest.raises(ConfigError, match="probe 'ktd' needs gradient_norms"):  # named on an API model
        _config(tmp_path, "http://127.0.0.1:9/v1", {"decop": {"paraphrase": {"model": "paraphraser"}},
                                                    "decop_likelihood": {}, "ktd": {"models": ["served"]}})


def _books(data, n_books: int = 2):
    docs = [{"doc_id": f"austen/book{b}/ch{c:03d}", "source": "austen", "title": f"Book {b}", "author": "Jane Austen",
             "kind": "book", "text": " ".join(f"Anne{b} walked to chapter{c} word{w} of the town." for w in range(30)),
             "meta": {"book": f"book{b}", "chapter": c, "label": b % 2}} for b in range(n_books) for c in range(2)]
    data.mkdir(parents=True, exist_ok=True)
    write_jsonl(data / "documents.jsonl", docs)
    return docs


def test_copybench_extractor_requests_are_planned_first_exactly_then_bounded(tmp_path, data):
    """The API extractor's prompts per book (events, characters) as it sends them, plus its repairs'
    upper bound; the probe jobs whose items it makes are listed as not yet plannable."""
    from memaudit.backends.planning import plan_run as run_plan
    from memaudit.probes.copybench.build import nonliteral_items
    from memaudit.probes.copybench.items import make_extractor

    docs = _books(data)
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "copybench": {"extractor": {"model": "judge", "max_attempts": 3, "max_new_tokens": 64},
                          "n_events": 6, "n_beginnings": 1},
            "copybench_literal": {"models": ["served"]}, "copybench_nonliteral": {"models": ["local"]}})
        assert planned_inputs(config) == ["results/datasets/b/documents.jsonl"]
        assert not_planned(config) == [
            f"copybench_{mode} on b: its items are made with API model 'judge' extracting events and characters "
            "first (rule copybench_items: those requests are in the estimate); build them (snakemake "
            f"results/datasets/b/copybench_{mode}.jsonl) and estimate again" for mode in ("literal", "nonliteral")]
        plan = run_plan(config, tmp_path / "datasets")
        assert {r["model"] for r in plan} == {"judge"} and {r["max_new_tokens"] for r in plan} == {64}
        assert len(plan) == 2 * 2 * 3  # 2 books x (events, characters) x 3 attempts at most
        first, repairs = plan[:4], plan[4:]
        assert all("The output above cannot be used" in r["prompt"] for r in repairs)
        # what the extractor sends: book 0 answers at once; book 1's first events reply is unusable
        events = '["1. Anne walks to the town.", "2. Anne reads.", "3. Anne sails.", "4. Anne sings.", ' \
                 '"5. Anne rests.", "6. Anne leaves."]'
        characters = '[{"name": "Anne Elliot", "alias": ["Anne"]}, {"name": "Frederick Wentworth", "alias": []}]'
        for r in first:
            reply = events if "most representative events" in r["prompt"] else characters
            server.responder.queue("no list here" if "Book 1" in r["prompt"] and reply == events else reply,
                                   prompt=r["prompt"])
        server.responder.queue(events)  # book 1's repaired events
        extractor = make_extractor(config, "judge")
        items, rejects = nonliteral_items(docs, None, n_events=6, n_beginnings=1, extractor=extractor)
        assert rejects == [] and len(items) == 2
        sent = [r.request.prompt for r in server.records]
        assert len(sent) == 5 <= len(plan)  # 4 first requests and one repair, within the bound
        assert sorted(p for p in sent if "cannot be used" not in p) == sorted(r["prompt"] for r in first)
        assert _all_cached(config, plan, "judge") == {"n_requests": 12, "n_cached": 4, "n_to_send": 8}


def test_copybench_qa_writer_requests_are_its_first_step_exactly_and_the_rest_bounded(tmp_path, data):
    from memaudit.probes.copybench.qa import build_qa

    docs = _books(data)
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "copybench": {"qa_writer": {"model": "judge", "max_new_tokens": 24}, "qa_per_book": 2,
                          "qa_passage_words": 100},
            "copybench_qa": {"models": ["local"]}})
        plan = plan_run(config, tmp_path / "datasets")
        # 2 books x 2 passages, each asked for a pair, a claim and a verdict
        assert len(plan) == 3 * 4 and {r["model"] for r in plan} == {"judge"}
        for i, r in enumerate(plan[:4]):
            server.responder.queue(f"Question: Who walked to chapter {i}? Answer: Anne", prompt=r["prompt"])
        server.responder.queue(*(["Anne walked to the town."] * 4), *(["attributable"] * 4))
        from memaudit.backends import open_backend

        items, rejects = build_qa(docs, config["probes"]["copybench"], seed=int(config["seed"]),
                                  writer=open_backend(config, "judge"))
        assert len(items) == 4 and rejects == []
        assert len(server.records) == len(plan)
        assert sorted(r.request.prompt for r in server.records[:4]) == sorted(r["prompt"] for r in plan[:4])
        assert {r.request.max_tokens for r in server.records} == {24}


def test_a_published_copybench_benchmark_is_planned_whatever_extractor_and_writer_are_named(tmp_path):
    # the published files bring their items: rules copybench_items and copybench_qa_items ask no model
    config = _config(tmp_path, "http://127.0.0.1:9/v1", {
        "copybench": {"extractor": {"model": "judge"}, "qa_writer": {"model": "judge"}},
        "copybench_literal": {"models": ["served"]}, "copybench_qa": {"models": ["served"]}})
    config["benchmarks"]["b"] = {"published": {"format": "copybench", "path": str(tmp_path / "data")}}
    assert not_planned(config) == []
    assert planned_inputs(config) == ["results/datasets/b/copybench_demos.json",
                                      "results/datasets/b/copybench_literal.jsonl",
                                      "results/datasets/b/copybench_qa.jsonl"]


def test_the_estimate_reads_the_prompt_files_of_the_copybench_modes_it_prices(tmp_path):
    """``prompt: paper``: the prompts are built from ``prompt_dir``'s files, so the estimate's inputs are the files
    of each mode an API model runs (fact recall's format 1 alone), not those of a mode only local models run."""
    config = _config(tmp_path, "http://127.0.0.1:9/v1", {
        "copybench": {"prompt": "paper", "prompt_dir": "prompts", "formats": [1, 2]},
        "copybench_literal": {"models": ["served"]}, "copybench_nonliteral": {"models": ["local"]},
        "copybench_qa": {"models": ["served"]}})
    assert planned_inputs(config) == ["prompts/prompts.literal.format1.json", "prompts/prompts.literal.format2.json",
                                      "prompts/prompts.qa.format1.json", "results/datasets/b/copybench_demos.json",
                                      "results/datasets/b/copybench_literal.jsonl",
                                      "results/datasets/b/copybench_qa.jsonl"]
    config["probes"]["copybench"]["prompt"] = "bare"  # the built-in templates: no file read
    assert planned_inputs(config) == ["results/datasets/b/copybench_demos.json",
                                      "results/datasets/b/copybench_literal.jsonl",
                                      "results/datasets/b/copybench_qa.jsonl"]


def test_copybench_fact_recall_plan_is_what_the_qa_job_sends(tmp_path, data):
    """Fact recall: one template (Figure 7) with its SQuAD demonstrations, per question and API decoding;
    an API question writer that has yet to write them leaves the mode unplanned, not priced as nothing."""
    qa = [{"item_id": f"q{i}", "doc_id": f"d{i}", "book": f"book{i}", "label": i % 2,
           "question": f"According to Book {i}, who rang the bell?", "answers": ["the porter"]} for i in range(3)]
    write_jsonl(data / "copybench_qa.jsonl", qa)
    write_jsonl(data / "documents.jsonl", [])
    with loopback() as server:
        config = _config(tmp_path, server.openai_base_url, {
            "copybench": {"decodings": ["greedy", "system"], "qa_max_new_tokens": 20},
            "copybench_qa": {"models": ["served"]}})
        assert planned_inputs(config) == ["results/datasets/b/copybench_qa.jsonl"]
        plan = plan_run(config, tmp_path / "datasets")
        assert len(plan) == 3 * 2 and {r["max_new_tokens"] for r in plan} == {20}
        assert all("[Output_Start]" in r["prompt"] for r in plan)  # the template's answer markers
        _run(config, "copybench", "qa", {"records": str(data / "copybench_qa.jsonl"),
                                          "documents": str(data / "documents.jsonl")}, tmp_path,
             ["generations.jsonl", "documents.csv", "outcomes.json"])
        assert _received(server) == _planned(plan, "served")
        assert _all_cached(config, plan, "served") == {"n_requests": 6, "n_cached": 6, "n_to_send": 0}
    config["probes"]["copybench"]["qa_writer"] = {"model": "judge", "max_new_tokens": 128}
    assert not_planned(config) == [
        "copybench_qa on b: its questions are written by API model 'judge' first (rule copybench_qa_items: those "
        "requests are in the estimate); build them (snakemake results/datasets/b/copybench_qa.jsonl) and estimate "
        "again"]
