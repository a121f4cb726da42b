"""Prefix probing: the scores by hand, and the workflow driving API models through a loopback server.

The end-to-end test is what a user paying for an API sees: the jobs that send
requests share one global Snakemake resource (``--resources api_openai=N`` caps
the requests in flight across parallel jobs), a rerun of a finished step sends
nothing (the response cache), refusals are counted, the key never reaches a
file, and the cost ledger says what was sent and what came from the cache.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import yaml

from api_server import ScriptedResponder, ChatServer, refusal_text
from memaudit.datasets.prefix import prefix_items
from memaudit.datasets.types import Passage
from memaudit.errors import InputError
from memaudit.probes.prefix.runner import INSTRUCTION, lcs_length, longest_common_run, score_continuation, words
from workflow_helpers import make_workdir, snakemake, touch_finished


def test_words_ignore_case_and_punctuation():
    assert words("It is a truth, universally-acknowledged!") == ["it", "is", "a", "truth", "universally",
                                                                  "acknowledged"]


def test_lcs_and_longest_run_by_hand():
    ref = "a b c d e f".split()
    gen = "x a b y c d e z".split()
    # subsequence a b c d e (5); longest contiguous shared run c d e (3)
    assert lcs_length(gen, ref) == 5
    assert lcs_length(ref, gen) == 5
    assert longest_common_run(gen, ref) == 3
    assert lcs_length([], ref) == 0 and longest_common_run(gen, []) == 0


def test_score_continuation_is_recall_robust_to_a_preamble():
    ref = "she walked to the window and looked at the rain"
    verbatim = score_continuation("Sure! Here is the rest: She walked to the window, and looked at the rain.", ref)
    assert verbatim == {"prefix_rougeL": 1.0, "prefix_lcs_words": 10.0}
    other = score_continuation("The ship sailed at dawn.", ref)
    # "the ... at" in order (2 of 10 words); no two consecutive words shared
    assert other == {"prefix_rougeL": pytest.approx(2 / 10), "prefix_lcs_words": 1.0}


def _passage(i: int, n_words: int, label: int = 1) -> Passage:
    return Passage(f"d{i}#p0", f"d{i}", label, " ".join(f"w{i}_{j}" for j in range(n_words)))


def test_prefix_items_split_at_words_and_skip_short_passages():
    items = prefix_items([_passage(0, 12), _passage(1, 7), _passage(2, 30, 0)], prefix_words=5,
                         continuation_words=6, min_continuation_words=3)
    assert [it.doc_id for it in items] == ["d0", "d2"]  # d1 leaves only 2 words after its prefix
    assert items[0].prefix == "w0_0 w0_1 w0_2 w0_3 w0_4"
    assert items[0].continuation == "w0_5 w0_6 w0_7 w0_8 w0_9 w0_10"
    assert items[1].label == 0 and items[1].meta["continuation_words"] == 6
    with pytest.raises(InputError, match="no passage has the 8 words"):
        prefix_items([_passage(1, 7)], prefix_words=5, continuation_words=6, min_continuation_words=3)


def test_a_prefix_keeps_the_passage_text_as_written_paragraph_breaks_and_all(tiny_model):
    """The prefix is the passage's text up to the end of its prefix_words-th word, as the model read it in
    training: 78 of the demo news' 79 prefixes hold a paragraph break, which was shown as a space (a model
    trained to memorise 8 of those passages, shown "dlrs. The company" for "dlrs.\\n\\nThe company", continued
    them with ROUGE-L recall of median 0.33 where the text as written gave 0.92)."""
    from memaudit.models.token_stats import encode

    text = "Stocks fell on Monday.\n\nThe  index lost 2 pct,\nits worst day since May. Traders sold banks."
    [item] = prefix_items([Passage("d0#p0", "d0", 1, text)], prefix_words=6, continuation_words=5,
                          min_continuation_words=3)
    assert item.prefix == "Stocks fell on Monday.\n\nThe  index"
    assert item.continuation == "lost 2 pct, its worst"
    assert item.meta["prefix_words"] == 6
    _, tok = tiny_model
    shown, read = encode(tok, item.prefix, None), encode(tok, text, None)
    assert read[:len(shown)] == shown  # the tokens of the prefix are the first tokens of the text


def test_a_continuation_with_no_ascii_word_is_skipped_and_counted_not_a_failed_probe(caplog):
    """The scores count ASCII words (as rouge_score does), so a passage in another script has nothing to
    score: it is skipped when the items are made, and the log counts it beside the short ones, where the
    probe job stopped on it with 'empty reference continuation' after generating (and paying for) it."""
    greek = Passage("g#p0", "g", 1, " ".join(["Το"] * 5 + ["ποτάμι", "κυλούσε", "ήσυχα", "μέσα", "στη", "νύχτα"]))
    mixed = Passage("m#p0", "m", 0, " ".join(["Ο"] * 5 + ["Νίκος", "είδε", "το", "BBC", "στις", "9"]))
    with caplog.at_level("INFO", logger="memaudit.datasets.prefix"):
        items = prefix_items([greek, mixed, _passage(0, 12), _passage(1, 6)], prefix_words=5, continuation_words=6,
                             min_continuation_words=3)
    assert [it.doc_id for it in items] == ["m", "d0"]
    assert [r.getMessage() for r in caplog.records] == [
        "2 of 4 passages skipped: 1 shorter than 8 words, 1 with no ASCII letter or digit in the continuation "
        "(the scores count ASCII words, as rouge_score does)"]
    with pytest.raises(InputError, match=r"no passage has the 8 words a prefix probe needs \(0 too short, 1 with "
                                         r"no ASCII letter or digit in the continuation"):
        prefix_items([greek], prefix_words=5, continuation_words=6, min_continuation_words=3)


def test_a_continuation_as_long_as_asked_is_kept_and_published_skips_are_named(caplog):
    """continuation_words under min_continuation_words: a passage with the whole continuation asked for is
    kept (it was skipped as too short); a published prefix (NYT Exhibit J) skipped for its completion is
    counted as such, not as a passage shorter than prefix_words + 5 (prefix_words does not apply to it)."""
    items = prefix_items([_passage(0, 8)], prefix_words=5, continuation_words=3)
    assert [(it.prefix, it.continuation) for it in items] == [("w0_0 w0_1 w0_2 w0_3 w0_4", "w0_5 w0_6 w0_7")]
    nyt = [Passage(f"n{i}#p0", f"n{i}", 1, " ".join(["w"] * 200),
                   meta={"prefix": "The Times said", "completion": "too short"}) for i in range(2)]
    with caplog.at_level("INFO", logger="memaudit.datasets.prefix"):
        assert [it.doc_id for it in prefix_items([*nyt, _passage(0, 12), _passage(1, 6)], prefix_words=5,
                                                 continuation_words=6)] == ["d0"]
    assert [r.getMessage() for r in caplog.records] == [
        "3 of 4 passages skipped: 1 shorter than 10 words, 2 with an empty published prefix or a published "
        "completion (NYT Exhibit J) of fewer than 5 words"]
    with pytest.raises(InputError, match=r"^no passage can be prefix-probed \(0 shorter than 55 words, 2 with an "
                                         r"empty published prefix or a published completion \(NYT Exhibit J\) of "
                                         r"fewer than 5 words\)$"):
        prefix_items(nyt, prefix_words=50, continuation_words=50)


def test_a_benchmark_with_nothing_to_prefix_probe_names_its_passages_file(tmp_path):
    """The prefix_dataset job's error named no file: which benchmark's passages had nothing to probe?"""
    from memaudit.io import write_jsonl
    from memaudit.probes.prefix.runner import build_pairs

    path = tmp_path / "passages.jsonl"
    write_jsonl(path, [_passage(0, 20).__dict__])
    with pytest.raises(InputError) as err:
        build_pairs(path, tmp_path / "pairs.jsonl", prefix_words=50, continuation_words=50)
    assert str(err.value) == (f"{path}: no passage has the 55 words a prefix probe needs (1 too short): lower "
                              f"probes.prefix.prefix_words or use longer passages")


def test_a_published_prefix_is_probed_as_given_nyt_exhibit_j(tmp_path):
    """Section 4.2: "For prefix probing, we use prefixes provided in Exhibit-J". A passage carrying the
    set's Prefix and Completion is probed with the whole prefix and scored against the completion's
    first words; an empty one is skipped; any other passage is cut as before."""
    from memaudit.io import read_jsonl, write_jsonl
    from memaudit.probes.prefix.runner import build_pairs

    snippet = " ".join(f"s{i}" for i in range(80))
    nyt = [Passage(f"nyt/{k}#p0", f"nyt/{k}", 1, snippet, meta={"prefix": prefix, "completion": completion})
           for k, prefix, completion in [
               ("a", "  The  Times reported  on Monday that", " ".join(f"c{i}" for i in range(70))),
               ("b", "", "some completion words here today"),  # kept for the cloze probe, not here
               ("c", "A prefix", "too short"),
               ("d", None, None)]]  # a missing value is empty, not the word "None"
    items = prefix_items([*nyt, _passage(0, 12)], prefix_words=5, continuation_words=6, min_continuation_words=3)
    assert [it.doc_id for it in items] == ["nyt/a", "d0"]
    a, d0 = items
    # as given, its inner spacing kept (its ends stripped: a prompt ending in a space)
    assert a.prefix == "The  Times reported  on Monday that" and a.continuation == "c0 c1 c2 c3 c4 c5"
    assert (a.meta["prefix_source"], a.meta["prefix_words"], a.meta["continuation_words"]) == ("published", 6, 6)
    assert d0.prefix == "w0_0 w0_1 w0_2 w0_3 w0_4" and d0.meta["prefix_source"] == "passage"
    # the prefix_dataset job's function writes the same pairs
    write_jsonl(tmp_path / "passages.jsonl", [p.to_dict() for p in [*nyt, _passage(0, 12)]])
    assert build_pairs(tmp_path / "passages.jsonl", tmp_path / "pairs.jsonl", prefix_words=5,
                       continuation_words=6) == 2
    assert [r["prefix"] for r in read_jsonl(tmp_path / "pairs.jsonl")] == [a.prefix, d0.prefix]


# --------------------------------------------------------------------------- the workflow on API models

KEY_ENV, KEY = "MEMAUDIT_TEST_OPENAI_KEY", "sk-test-never-in-a-file-4242"
CONCURRENCY = 3
OTHER = "It was a quiet morning in the harbour and nobody spoke of the ship."


def _config(base_url: str | None) -> dict:
    api = {"api_key_env": KEY_ENV, "concurrency": CONCURRENCY,
           "pricing": {"input_per_mtok": 2.0, "output_per_mtok": 8.0},
           "base_url": base_url or "http://127.0.0.1:9/v1"}
    return {
        "seed": 7, "assets_dir": "resources/demo", "cache_dir": "resources/cache",
        "benchmarks": {"novels": {"sources": ["austen"], "n_documents": 12, "passage_words": 40,
                                  "passages_per_document": 2}},
        # Two models behind one endpoint (the same model id would share cache entries, rightly).
        "models": {name: {"family": "memorizer", "backend": "openai", "api": {**api, "model_id": f"{name}-v1"}}
                   for name in ("memorizer-a", "memorizer-b")},
        "probes": {"token_prob": {}, "prefix": {"prefix_words": 20, "continuation_words": 20,
                                                "max_new_tokens": 64}},
        "stats": {"n_boot_ci": 200, "blind_folds": 3},
    }


def _estimate_rows(workdir) -> dict[str, list]:
    """model -> [requests, cached, to send, input tokens, output tokens, cost] from estimate.txt."""
    rows = {}
    for line in (workdir / "results/api/estimate.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].startswith("memorizer-"):
            rows[parts[0]] = [int(x) for x in parts[1:6]] + [parts[6]]
    return rows


def _write(workdir, cfg) -> str:
    path = workdir / "config" / "api.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path.relative_to(workdir))


@pytest.mark.slow
def test_api_models_through_the_workflow(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf")
    cfgfile = _write(workdir, _config(None))
    snakemake(workdir, "results/datasets/novels/prefix_continuation.jsonl", "--cores", "1", "--configfile", cfgfile)
    items = [json.loads(line) for line in
             (workdir / "results/datasets/novels/prefix_continuation.jsonl").read_text().splitlines()]
    members = [it for it in items if it["label"] == 1]
    nonmembers = [it for it in items if it["label"] == 0]
    assert members and len(nonmembers) >= 2
    # A model that memorised the members: it continues them verbatim (after a chatty preamble).
    replies = {f"{INSTRUCTION}\n\n{it['prefix']}": "Sure, here is the rest: " + it["continuation"] for it in members}
    replies.update({f"{INSTRUCTION}\n\n{it['prefix']}": OTHER for it in nonmembers[1:]})
    replies[f"{INSTRUCTION}\n\n{nonmembers[0]['prefix']}"] = refusal_text()

    targets = ["results/metrics/novels/memorizer-a.csv", "results/metrics/novels/memorizer-b.csv",
               "results/api/ledger.csv"]
    with ChatServer(ScriptedResponder(replies), latency=0.05) as server:
        cfgfile = _write(workdir, _config(server.openai_base_url))
        # The cost of the planned work, readable before any request is sent.
        snakemake(workdir, "results/api/estimate.txt", "--cores", "1", "--configfile", cfgfile)
        assert server.count() == 0
        plan = [json.loads(line) for line in (workdir / "results/api/plan.jsonl").read_text().splitlines()]
        assert len(plan) == 2 * len(items) and {r["max_new_tokens"] for r in plan} == {64}
        estimate = _estimate_rows(workdir)
        assert estimate["memorizer-a"][:3] == [len(items), 0, len(items)]  # requests, cached, to send
        assert float(estimate["memorizer-a"][-1]) <= 1.0  # dollars, at most
        plan = snakemake(workdir, *targets, "-n", "--cores", "2", "--configfile", cfgfile).stdout
        assert plan.count(f"api_openai={CONCURRENCY}") == 2  # both prefix_probe jobs claim the resource
        snakemake(workdir, *targets, "--cores", "2", "--resources", f"api_openai={CONCURRENCY}",
                  "--configfile", cfgfile)
        assert server.count("openai") == 2 * len(items)  # each model asked once per item
        # Two jobs ran side by side on two cores, yet the global resource kept them to CONCURRENCY in all.
        assert server.max_in_flight <= CONCURRENCY

        for model in ("memorizer-a", "memorizer-b"):
            metrics = pd.read_csv(workdir / f"results/metrics/novels/{model}.csv").set_index("method")
            assert metrics.loc["prefix_rougeL", "auc"] == pytest.approx(1.0)
            assert metrics.loc["prefix_lcs_words", "auc"] == pytest.approx(1.0)
            outcomes = json.loads((workdir / f"results/scores/novels/{model}/prefix_outcomes.json").read_text())
            assert (outcomes["n_items"], outcomes["refusal"], outcomes["ok"]) == (len(items), 1, len(items) - 1)
            assert outcomes["refusal_rate"] == pytest.approx(1 / len(items))
        ledger = pd.read_csv(workdir / "results/api/ledger.csv").set_index("model")
        assert ledger.loc["memorizer-a", "n_sent"] == len(items) and ledger.loc["memorizer-a", "n_cached"] == 0
        assert ledger.loc["memorizer-a", "n_refusal"] == 1
        tokens = ledger.loc["memorizer-a", ["input_tokens", "output_tokens"]]
        assert ledger.loc["memorizer-a", "cost_usd"] == pytest.approx((2.0 * tokens.iloc[0] + 8.0 * tokens.iloc[1])
                                                                      / 1e6)

        # Rerunning the finished probe jobs sends nothing: every answer comes from the cache.
        snakemake(workdir, *targets, "--cores", "2", "--resources", f"api_openai={CONCURRENCY}",
                  "--forcerun", "prefix_probe", "--configfile", cfgfile)
        assert server.count("openai") == 2 * len(items)
        outcomes = json.loads((workdir / "results/scores/novels/memorizer-a/prefix_outcomes.json").read_text())
        assert outcomes["n_from_cache"] == len(items)
        ledger = pd.read_csv(workdir / "results/api/ledger.csv").set_index("model")
        assert ledger.loc["memorizer-a", "n_cached"] == len(items)
        assert {r.authorization for r in server.records} == {f"Bearer {KEY}"}
        snakemake(workdir, "results/api/estimate.txt", "--cores", "1", "--forcerun", "api_estimate",
                  "--configfile", cfgfile)
        assert _estimate_rows(workdir)["memorizer-b"][:3] == [len(items), len(items), 0]  # all cached now

    # The key reached the server, never a file: results, logs, Snakemake metadata, the config.
    written = [p for top in ("results", "logs", ".snakemake", "config") for p in (workdir / top).rglob("*")
               if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in written)  # the cache is among the files searched
    leaked = [p for p in written if KEY.encode() in p.read_bytes()]
    assert leaked == []


def test_local_model_continues_the_bare_prefix(tiny_model, tiny_model_dir, tmp_path):
    from memaudit.backends.base import GenerationParams
    from memaudit.backends.hf import HFBackend
    from memaudit.probes.prefix.runner import run_prefix_probe

    model, tok = tiny_model
    backend = HFBackend({"path": str(tiny_model_dir)}, model=model, tokenizer=tok)
    passages = [_passage(i, 14, label=i % 2) for i in range(4)]
    items = [it.__dict__ for it in prefix_items(passages, prefix_words=6, continuation_words=8)]
    cfg = {"max_new_tokens": 12, "instruction": INSTRUCTION}
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("docs", "csv"), ("outcomes", "json")]}
    docs = run_prefix_probe(backend, items, cfg, chat=False, out_items=out["items"], out_documents=out["docs"],
                            out_outcomes=out["outcomes"])
    rows = [json.loads(line) for line in out["items"].read_text().splitlines()]
    # Plain mode: the model continues the bare prefix, greedily.
    direct = backend.generate_text(items[0]["prefix"], GenerationParams(max_new_tokens=12, chat=False))
    assert rows[0]["generation"] == direct.text
    assert rows[0]["prefix_rougeL"] == score_continuation(direct.text, items[0]["continuation"])["prefix_rougeL"]
    assert sorted(docs["method"].unique()) == ["prefix_lcs_words", "prefix_rougeL"]
    assert len(docs) == 2 * 4 and set(docs["label"]) == {0, 1}
    outcomes = json.loads(out["outcomes"].read_text())
    assert outcomes["n_items"] == 4 and outcomes["ok"] + outcomes["refusal"] + outcomes["invalid"] == 4
    assert outcomes["prompt_style"] == "plain"


DIALOGUE = '"I\'m sorry, Harry, but I can\'t let you go alone," said Hermione, and she took up her wand.'


def test_a_continuation_flagged_as_a_refusal_is_scored_on_its_text_and_counted(tmp_path):
    """The refusal detector reads dialogue that opens a continuation as a refusal. The probe still
    scores its text (a verbatim copy keeps its score), where it used to score 0, and counts it."""
    from memaudit.backends.base import GENERATE, Backend, Generation
    from memaudit.backends.refusal import is_refusal
    from memaudit.probes.prefix.runner import run_prefix_probe

    class Copier(Backend):  # continues every prefix with the item's own continuation, flagged as a backend flags it
        capabilities = frozenset({GENERATE})
        name = "copier"

        def describe(self):
            return {"id": self.name}

        def generate(self, prompts, params):
            conts = [next(it["continuation"] for it in items if p.endswith(it["prefix"])) for p in prompts]
            return [Generation(text=c, status="refusal" if is_refusal(c) else "ok") for c in conts]

    assert is_refusal(DIALOGUE)
    items = [{"item_id": "a#0", "passage_id": "a#p0", "doc_id": "a", "label": 1, "prefix": "It was late.",
              "continuation": DIALOGUE},
             {"item_id": "b#0", "passage_id": "b#p0", "doc_id": "b", "label": 0, "prefix": "The ship sailed.",
              "continuation": "The harbour lay quiet under a grey sky and the gulls circled the masts."}]
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("docs", "csv"), ("outcomes", "json")]}
    docs = run_prefix_probe(Copier(), items, {"max_new_tokens": 40, "instruction": INSTRUCTION}, chat=False,
                            out_items=out["items"], out_documents=out["docs"], out_outcomes=out["outcomes"])
    rows = [json.loads(line) for line in out["items"].read_text().splitlines()]
    assert [r["status"] for r in rows] == ["refusal", "ok"]
    assert [r["prefix_rougeL"] for r in rows] == [1.0, 1.0]
    assert rows[0]["prefix_lcs_words"] == len(words(DIALOGUE))
    assert docs.set_index(["doc_id", "method"]).loc[("a", "prefix_rougeL"), "score"] == 1.0
    outcomes = json.loads(out["outcomes"].read_text())
    assert (outcomes["refusal"], outcomes["ok"]) == (1, 1)


def test_a_prefix_probe_that_got_no_answer_is_a_one_line_error(tmp_path):
    """Under api.on_error: record a request that failed after its retries has no continuation to score: the job
    stops with one line (an APIRequestError, which the job's log writes without a traceback), where a
    RuntimeError printed its traceback twice."""
    from memaudit.backends.api import APIRequestError
    from memaudit.backends.base import GENERATE, Backend, Generation
    from memaudit.errors import MemauditError
    from memaudit.probes.prefix.runner import run_prefix_probe

    class Overloaded(Backend):
        capabilities = frozenset({GENERATE})
        name = "overloaded"

        def describe(self):
            return {"id": self.name}

        def generate(self, prompts, params):
            return [Generation(text="", status="error", error="HTTP 503: overloaded after 4 attempts")
                    if "ship" in p else Generation(text="The end.") for p in prompts]

    items = [{"item_id": "a#0", "passage_id": "a#p0", "doc_id": "a", "label": 1, "prefix": "It was late.",
              "continuation": "The lamps were lit."},
             {"item_id": "b#0", "passage_id": "b#p0", "doc_id": "b", "label": 0, "prefix": "The ship sailed.",
              "continuation": "The harbour lay quiet."}]
    out = {k: tmp_path / f"{k}.{ext}" for k, ext in [("items", "jsonl"), ("docs", "csv"), ("outcomes", "json")]}
    with pytest.raises(APIRequestError) as err:
        run_prefix_probe(Overloaded(), items, {"max_new_tokens": 8, "instruction": INSTRUCTION}, chat=False,
                         out_items=out["items"], out_documents=out["docs"], out_outcomes=out["outcomes"])
    assert isinstance(err.value, MemauditError)
    assert str(err.value) == ("1 prefix probes got no answer, e.g. b#0: HTTP 503: overloaded after 4 attempts "
                              "(answered ones are cached; rerun to retry the rest)")
    assert not out["outcomes"].exists()


def test_the_outcomes_say_which_prompt_was_sent(tmp_path):
    """prefix_outcomes.json said only "chat" or "plain": not which instruction and system prompt a chat model
    was sent (per benchmark, the paper's fiction or news instruction), though they decide what it continues.
    It says both; a plain-text model is sent the bare prefix, and its outcomes say so (null)."""
    from memaudit.backends.base import GENERATE, Backend, Generation
    from memaudit.probes.prefix.runner import run_prefix_probe

    class Echo(Backend):
        capabilities = frozenset({GENERATE})
        name = "echo"

        def describe(self):
            return {"id": self.name}

        def generate(self, prompts, params):
            return [Generation(text=p, status="ok") for p in prompts]

    items = [{"item_id": "a#0", "passage_id": "a#p0", "doc_id": "a", "label": 1, "prefix": "It was late.",
              "continuation": "and the lamps were lit along the quay"},
             {"item_id": "b#0", "passage_id": "b#p0", "doc_id": "b", "label": 0, "prefix": "The ship sailed.",
              "continuation": "into a grey morning with the tide"}]
    cfg = {"max_new_tokens": 40, "instruction": "Complete exactly and don't hallucinate", "system_prompt": "Be exact."}
    got = {}
    for chat in (True, False):
        out = {k: tmp_path / f"{chat}{k}.{ext}" for k, ext in [("items", "jsonl"), ("docs", "csv"), ("outcomes", "json")]}
        run_prefix_probe(Echo(), items, cfg, chat=chat, out_items=out["items"], out_documents=out["docs"],
                         out_outcomes=out["outcomes"])
        outcomes = json.loads(out["outcomes"].read_text())
        got[chat] = (outcomes["prompt_style"], outcomes["instruction"], outcomes["system_prompt"])
    assert got == {True: ("chat", "Complete exactly and don't hallucinate", "Be exact."),
                   False: ("plain", None, None)}


def test_the_instruction_can_be_given_per_benchmark_appendix_e(tmp_path):
    """The information-guided probes' Appendix E asks for fiction with one instruction and for news with
    "Complete exactly and don't hallucinate": one run probing both gets each its own, in the jobs'
    settings, the prompts sent and the cost estimate's plan; a name that is not a benchmark is refused."""
    import copy
    from pathlib import Path

    from memaudit.errors import ConfigError
    from memaudit.jobs import validate_config
    from memaudit.probes.cloze.baseline import NEWS_INSTRUCTION
    from memaudit.probes.prefix.runner import plan_records, settings

    demo = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    cfg = copy.deepcopy(demo)
    cfg["models"]["gpt"] = {"backend": "openai", "api": {"model_id": "gpt-x", "api_key_env": "OPENAI_API_KEY",
                                                         "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}
    cfg["probes"]["prefix"]["instruction"] = {"default": INSTRUCTION, "news": NEWS_INSTRUCTION}
    done = validate_config(cfg)
    assert settings(done, "news")["instruction"] == NEWS_INSTRUCTION
    assert settings(done, "novels")["instruction"] == INSTRUCTION
    assert {k: v for k, v in settings(done, "news").items() if k != "instruction"} == \
        {k: v for k, v in settings(done, "novels").items() if k != "instruction"}
    assert settings(validate_config(demo), "news")["instruction"] == INSTRUCTION  # the default, unchanged
    items = [{"prefix": "Stocks fell on Monday"}]
    planned = {b: plan_records(done, "gpt", items, datasets=tmp_path / b)[0]["prompt"] for b in ("news", "novels")}
    assert planned == {"news": f"{NEWS_INSTRUCTION}\n\nStocks fell on Monday",
                       "novels": f"{INSTRUCTION}\n\nStocks fell on Monday"}
    cfg["probes"]["prefix"]["instruction"] = {"nyt": NEWS_INSTRUCTION}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value).splitlines() == [
        f"config key probes.prefix.instruction.nyt: not a configured benchmark (benchmarks: "
        f"{', '.join(sorted(cfg['benchmarks']))}; or `default`)"]


@pytest.mark.workflow
def test_an_unset_key_variable_stops_the_run_before_any_job(tmp_path, monkeypatch):
    """An API model whose key variable was not set stopped its probe job at its start, after the jobs before
    it had run (the dataset here; on an audit a reference model prepared and items built first, minutes to
    hours). The run stops before any job with one line naming the variable and the config key; a dry run and
    the cost estimate, which send nothing, still need no key."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    (tmp_path / "wf").mkdir()
    workdir = make_workdir(tmp_path / "wf")
    cfgfile = _write(workdir, _config(None))
    target = "results/scores/novels/memorizer-a/prefix_documents.csv"
    assert snakemake(workdir, target, "-n", "--cores", "1", "--configfile", cfgfile).returncode == 0
    proc = snakemake(workdir, target, "--cores", "1", "--configfile", cfgfile, check=False)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if "is not set" in line]
    assert errors == [f"config key models.memorizer-a.api.api_key_env: environment variable {KEY_ENV} is not set; "
                      "export the API key in it before the run (the config names the variable, never the key)"]
    assert not (workdir / "results" / "datasets").exists()  # no job ran
    assert {j["rule"] for j in touch_finished(workdir, cfgfile)} >= {"prefix_probe"}  # --touch runs no job either
    shutil.rmtree(workdir / "results")
    snakemake(workdir, "results/api/estimate.txt", "--cores", "1", "--configfile", cfgfile)
    items = (workdir / "results/datasets/novels/prefix_continuation.jsonl").read_text().splitlines()
    assert _estimate_rows(workdir)["memorizer-a"][:3] == [len(items), 0, len(items)]  # requests, cached, to send
