"""CopyBench fluency: Figure 9's rubric, the judge's replies read strictly, through the real SDK and in the probe."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from api_server import ChatServer, ScriptedResponder
from memaudit.probes.copybench.fluency import (SYSTEM_PROMPT, FluencyJudge, fluency_prompt, parse_score,
                                               rubric_text)

KEY_ENV = "MEMAUDIT_TEST_FLUENCY_KEY"


def _backend(server, tmp_path):
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy

    return OpenAIBackend("prometheus-like", name="judge", base_url=server.openai_base_url, api_key_env=KEY_ENV,
                         cache=tmp_path / "c.sqlite", concurrency=1,
                         retry_policy=RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01))


def test_the_prompt_is_figure_9_without_the_reference_answer_it_never_gives():
    p = fluency_prompt("Harry waved his wand.")
    assert p.startswith("###Task Description:\nAn instruction (might include an Input inside it), a response to "
                        "evaluate, and a score rubric representing a evaluation criteria are given.\n")
    assert "reference answer" not in p.lower()
    assert "###The instruction to evaluate:\n\n\n###Response to evaluate:\nHarry waved his wand.\n\n" in p
    assert ('3. The output format should look as follows: "Feedback: (write a feedback for criteria) [RESULT] '
            '(an integer number between 1 and 5)"') in p
    assert p.endswith("###Score Rubrics:\n" + rubric_text() + "\n\n###Feedback: ")
    lines = rubric_text().splitlines()
    assert lines[0] == "[Evaluate whether the given text is well-written and grammatical.]"
    assert lines[1] == "Score 1: The response is completely unclear, making comprehension difficult."
    assert lines[5] == ("Score 5: The response is clear and well-organized, enabling the reader to effortlessly "
                        "follow the content.")


@pytest.mark.parametrize("reply, expected", [
    ("Feedback: The text is clear. [RESULT] 4", (4, "The text is clear.", "")),
    ("The story flows. [RESULT] (5)", (5, "The story flows.", "")),
    ("Rambling. [RESULT] 2\nActually, on reflection: [RESULT] 3",
     (3, "Rambling. [RESULT] 2\nActually, on reflection:", "")),
    ("Feedback: fine [RESULT] 5.0", (5, "fine", "")),
    ("Feedback: fine [RESULT] 7", (None, "fine", "[RESULT] 7 is outside 1-5")),
    ("Feedback: fine [RESULT] 0", (None, "fine", "[RESULT] 0 is outside 1-5")),
    ("Feedback: fine [RESULT] 3.5", (None, "fine", "[RESULT] 3.5 is not an integer from 1 to 5")),
    ("I would rate this a four out of five.", (None, "I would rate this a four out of five.",
                                               "no [RESULT] marker followed by a number")),
])
def test_scores_are_read_from_the_last_result_marker_and_anything_else_says_why(reply, expected):
    assert parse_score(reply) == expected


def test_the_judge_through_the_real_sdk_counts_every_output(tmp_path, monkeypatch):
    """Greedy: one request per non-empty output, an unusable reply is not asked again (it would repeat);
    the empty output gets no request. Sampling: the unusable one is asked again and rated."""
    monkeypatch.setenv(KEY_ENV, "sk-test-fluency")
    outputs = ["Harry waved his wand and the door opened.", "door door door the the", "", "It was a cold day."]
    replies = {fluency_prompt(outputs[0]): "Feedback: Clear and organised. [RESULT] 5",
               fluency_prompt(outputs[1]): "Feedback: Repetitive nonsense. [RESULT] 9",
               fluency_prompt(outputs[3]): "Feedback: Short but clear. [RESULT] 4"}
    with ChatServer(ScriptedResponder(replies)) as server:
        ratings = FluencyJudge(_backend(server, tmp_path)).rate(outputs)
        assert server.count() == 3
        request = server.records[0].request
        assert request.messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert request.temperature == 0.0 and request.max_tokens == 256
    assert [(r.score, r.status, r.attempts) for r in ratings] == [
        (5, "rated", 1), (None, "invalid", 1), (None, "empty", 0), (4, "rated", 1)]
    assert ratings[1].reason == "[RESULT] 9 is outside 1-5" and ratings[1].feedback == "Repetitive nonsense."
    assert ratings[2].reason == "no output to rate"

    responder = ScriptedResponder()
    responder.queue("Feedback: hm [RESULT] 9", "Feedback: Repetitive. [RESULT] 1", prompt=fluency_prompt(outputs[1]))
    with ChatServer(responder) as server:
        judge = FluencyJudge(_backend(server, tmp_path / "sampled"), temperature=1.0, max_attempts=3)
        (rating,) = judge.rate([outputs[1]])
        assert server.count() == 2
        assert [r.request.temperature for r in server.records] == [1.0, 1.0]
        assert [r.request.top_p for r in server.records] == [0.9, 0.9]
    assert (rating.score, rating.status, rating.attempts, rating.replies) == (
        1, "rated", 2, ["Feedback: hm [RESULT] 9", "Feedback: Repetitive. [RESULT] 1"])


def test_the_literal_probe_reports_fluency_per_output_and_per_group(tiny_backend, tmp_path, monkeypatch):
    """The tiny model writes the continuations, an API judge rates them: every output has its score or
    its reason, each group its mean with an interval, the summary table its counts."""
    from memaudit.io import read_json, read_jsonl
    from memaudit.probes.copybench.runner import run_probe
    from memaudit.probes.copybench.summary import rates_table

    monkeypatch.setenv(KEY_ENV, "sk-test-fluency")
    prefixes = ["the old house stood", "a ship sailed from the", "she walked into the garden and", "in the morning"]
    items = [{"item_id": f"d{i}#literal", "doc_id": f"d{i}", "book": "b", "label": i % 2, "prefix": p,
              "reference": "and then nothing happened at all"} for i, p in enumerate(prefixes)]
    cfg = {"prompt": "bare", "formats": [1], "demonstrations": 0, "decodings": ["greedy"], "literal_max_new_tokens": 16,
           "nonliteral_max_new_tokens": 16, "repetition_penalty": 1.1, "memfree_n": 4, "reference_tokens": 50,
           "batch_size": 4}
    scores = iter(["Feedback: a [RESULT] 2", "Feedback: b [RESULT] 4", "Feedback: c [RESULT] 3",
                   "Feedback: d, no score"])

    class Judge(ScriptedResponder):  # answers in arrival order, whatever the continuation
        def respond(self, request):
            return self._reply(request, next(scores))

    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("documents", "csv"), ("outcomes", "json")]}
    with ChatServer(Judge()) as server:
        run_probe(tiny_backend, "literal", items, [], cfg, chat=False, demos={}, judge_info={},
                  fluency=FluencyJudge(_backend(server, tmp_path)), out_items=out["items"],
                  out_documents=out["documents"], out_outcomes=out["outcomes"])
        judged = [r.request.prompt for r in server.records]
    rows = pd.DataFrame(read_jsonl(out["items"]))
    # every continuation was rated once, in order, the prompt carrying that continuation
    assert [fluency_prompt(g) for g in rows["generation"]] == judged
    assert rows["fluency_status"].tolist() == ["rated", "rated", "rated", "invalid"]
    assert rows["copybench_fluency"].tolist()[:3] == [2.0, 4.0, 3.0] and math.isnan(rows["copybench_fluency"][3])
    assert rows["fluency_reason"][3] == "no [RESULT] marker followed by a number"
    outcomes = read_json(out["outcomes"])
    assert outcomes["fluency_judge"]["model"] == "judge"
    block = outcomes["decodings"]["greedy"]
    assert block["fluency"] == {"rated": 3, "invalid": 1}
    # members are items 1 and 3 (rated 4, unrated), non-members 0 and 2 (rated 2 and 3)
    assert block["member"]["mean_copybench_fluency"] == [4.0, 4.0, 4.0]
    assert block["nonmember"]["mean_copybench_fluency"][0] == 2.5
    assert block["all"]["mean_copybench_fluency"][0] == 3.0
    table = rates_table([_place(out["outcomes"], tmp_path)])
    fl = table[table["statistic"] == "mean_copybench_fluency"].set_index("group")
    assert fl.loc["all", "value"] == 3.0
    assert (table["fluency_judge"] == "judge").all()
    assert (table["fluency_rated"] == 3).all() and (table["fluency_invalid"] == 1).all()


def _place(outcomes, tmp_path) -> str:
    """The outcomes file where the summary expects it: results/scores/<benchmark>/<model>/copybench_<mode>_..."""
    dest = tmp_path / "results/scores/bench/tiny/copybench_literal_outcomes.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(outcomes.read_text())
    return str(dest)


def test_the_role_is_configured_checked_and_wired_for_the_copying_modes_only():
    import copy
    from pathlib import Path
    from types import SimpleNamespace

    import yaml

    from memaudit import jobs
    from memaudit.errors import ConfigError
    from memaudit.probes.copybench.plan import needs_fluency_judge

    ci = jobs.validate_config(yaml.safe_load((Path(__file__).parents[1] / "config" / "ci.yaml").read_text()))
    assert ci["probes"]["copybench"]["fluency_judge"] == {"model": None, "max_new_tokens": 256, "temperature": 0,
                                                          "max_attempts": 3}
    assert not needs_fluency_judge(ci, SimpleNamespace(mode="literal"))
    cfg = copy.deepcopy(ci)
    cfg["probes"]["copybench"]["fluency_judge"]["model"] = "smollm2-135m"
    assert [needs_fluency_judge(cfg, SimpleNamespace(mode=m)) for m in ("literal", "nonliteral", "qa")] == [
        True, True, False]
    assert jobs.role_input(cfg, "copybench", "fluency_judge") == {"fluency_judge": "results/models/smollm2-135m"}
    cfg["probes"]["copybench"]["fluency_judge"]["model"] = "nope"
    with pytest.raises(ConfigError, match=r"probes\.copybench\.fluency_judge\.model: unknown model 'nope'"):
        jobs.check_config(cfg)


def test_an_api_fluency_judge_is_priced_as_one_request_per_output_times_its_attempts():
    from memaudit.probes.copybench.api_plan import fluency_upper_bound

    prompts = [({"item_id": f"b{i}#b0"}, fmt, "user", None) for i in range(3) for fmt in ("1", "2")]
    greedy = fluency_upper_bound("judge", "m", prompts, ["greedy", "system"], 200,
                                 {"max_new_tokens": 256, "temperature": 0, "max_attempts": 3})
    assert len(greedy) == 12 and len({r["prompt"] for r in greedy}) == 12  # attempts only when sampling
    assert {(r["model"], r["max_new_tokens"], r["system_prompt"]) for r in greedy} == {("judge", 256, SYSTEM_PROMPT)}
    # each stand-in output is as long as the mode's whole token budget (about 4 characters a token)
    assert all(len(r["prompt"]) >= len(fluency_prompt("")) + 200 * 3 for r in greedy)
    sampled = fluency_upper_bound("judge", "m", prompts, ["greedy"], 200,
                                  {"max_new_tokens": 256, "temperature": 1.0, "max_attempts": 3})
    assert len(sampled) == 18 and len({r["prompt"] for r in sampled}) == 18
    assert {r["temperature"] for r in sampled} == {1.0}


@pytest.mark.workflow
def test_a_probe_job_claims_its_judges_gpus_and_api_slots(tmp_path):
    """The judges run inside the probe job: a local fluency judge on a GPU gets one even where the model
    under test needs none, and an API event judge's concurrency counts against `api_openai`."""
    import os
    from pathlib import Path

    import yaml

    from workflow_helpers import dry_run_resources, make_workdir

    workdir = make_workdir(tmp_path)
    cfg = yaml.safe_load((Path(__file__).parents[1] / "config" / "ci.yaml").read_text())
    cfg["models"]["judge"] = {"family": "smollm2", "source": {"builtin": "smollm2-135m-instruct"}, "device": "cuda"}
    cfg["models"]["judge-api"] = {"family": "gpt", "backend": "openai",
                                  "api": {"model_id": "gpt-like", "api_key_env": KEY_ENV, "concurrency": 3,
                                          "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}
    cfg["probes"]["copybench"]["fluency_judge"] = {"model": "judge"}
    cfg["probes"]["copybench"]["event_judge"] = {"model": "judge-api"}
    (workdir / "config/judges.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the tiny models (device auto) then claim nothing
    res = dry_run_resources(workdir, "config/judges.yaml", env=env)
    for model in ("tiny-gpt2-cb", "tiny-gpt2-cb-books"):
        literal = res[("copybench_probe", f"benchmark=books, model={model}, mode=literal")]
        story = res[("copybench_probe", f"benchmark=books, model={model}, mode=nonliteral")]
        assert (literal["gpu"], literal["api_openai"]) == (1, 0)  # the fluency judge's GPU; no event judge
        assert (story["gpu"], story["api_openai"]) == (1, 3)  # and the API event judge's three slots
    assert res[("token_stats", "benchmark=novels, model=tiny-gpt2-small")]["gpu"] == 0


def test_a_local_judge_decodes_its_judgements_together_with_the_same_tokens(tiny_model_dir):
    """On an open model the greedy judgements go through continuous batching; they are the replies one
    prompt at a time would give (a random model's replies carry no score: every output is invalid)."""
    tiny_backend = _long_context_backend(tiny_model_dir)

    class OneAtATime:  # the same backend without its batched path
        def __init__(self, backend):
            self.backend, self.name = backend, backend.name

        def generate(self, prompts, params):
            return self.backend.generate(prompts, params)

    outputs = ["the old house stood by the sea", "a ship sailed", "", "she walked into the garden"]
    batched = FluencyJudge(tiny_backend, max_new_tokens=12).rate(outputs)
    single = FluencyJudge(OneAtATime(tiny_backend), max_new_tokens=12).rate(outputs)
    assert [r.replies for r in batched] == [r.replies for r in single]
    assert [r.status for r in batched] == ["invalid", "invalid", "empty", "invalid"]
    assert all(len(r.replies) == 1 for r in batched if r.status == "invalid")


def test_a_local_event_judge_decodes_its_verdicts_together_with_the_same_tokens(tiny_model_dir):
    """The attribution prompts of an open-model event judge go through continuous batching: the same
    replies, verdicts and invalid count as one prompt at a time."""
    from memaudit.probes.copybench.judge import ATTRIBUTION_PROMPT, LLMJudge

    backend = _long_context_backend(tiny_model_dir)

    class OneAtATime:  # the same backend without its batched path
        name = "judge"

        def generate(self, prompts, params):
            return backend.generate(prompts, params)

    pairs = [("Emma paints.", "Emma painted Harriet."), ("A ship sails.", "The ship"), ("Anne waits.", "Anne")]
    prompts = [ATTRIBUTION_PROMPT.format(claim=e, reference=r) for e, r in pairs]
    params = LLMJudge(None).params
    assert ([g.text for g in backend.generate_batched(prompts, params)]
            == [g.text for g in OneAtATime().generate(prompts, params)])
    # a random model names neither option: every verdict is invalid and counted, either way
    assert LLMJudge(backend).supported(pairs) == LLMJudge(OneAtATime()).supported(pairs) == ([False] * 3, 3)


def _long_context_backend(tiny_model_dir):
    """The tiny GPT-2's tokenizer with a random 2-layer model of 2048 positions (the rubric prompt is
    about 1,100 tokens of this tokenizer), behind the HF backend."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from memaudit.backends.hf import HFBackend

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=2048, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    return HFBackend({"path": str(tiny_model_dir)}, name="judge", model=model, tokenizer=tok)
