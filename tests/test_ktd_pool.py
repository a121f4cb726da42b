"""KTD's knockoff pool beyond DE-COP's three paraphrases: the top-up, its quality control, its files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from memaudit.errors import InputError
from memaudit.io import write_jsonl
from memaudit.probes.decop.paraphrase import QCSettings, paraphrase_with_qc
from memaudit.probes.decop.prompts import paraphrase_prompt
from memaudit.probes.ktd import plan
from memaudit.probes.ktd.pool import TOP_UP_FIRST_ATTEMPT, build_pool

BUDGET = "The committee postponed the vote on the new budget until next week because members wanted more time."
BUDGET_DECOP = [
    "The vote on the new budget was delayed by the committee to next week, as members asked for more time.",
    "Members wanted more time, so the committee moved the vote on the new budget to the following week.",
    "Because its members needed more time, the committee put off the budget vote until next week."]
BUDGET_NEW = [
    "The committee pushed the budget vote back a week, since its members asked for additional time.",
    "Wanting more time, the members of the committee had the vote on the new budget delayed by a week.",
    "Next week is when the committee will now vote on the budget, as members requested extra time."]
RIVER = "The river burst its banks after three days of heavy rain, flooding the fields and the lower streets of town."
RIVER_DECOP = [
    "After three days of heavy rain the river overflowed, flooding the fields and the town's lower streets.",
    "Three days of downpour made the river burst its banks, and water covered the fields and lower streets.",
    "The lower streets of the town and the fields flooded when the river broke its banks after days of rain."]
RIVER_NEW = [
    "Heavy rain fell for three days until the river spilled over, putting the fields and low streets under water.",
    "The fields and the lowest streets of the town were flooded once the river overflowed after three rainy days."]


@pytest.fixture(scope="module")
def encoder():
    from memaudit.models.encoder import MiniLMEncoder

    return MiniLMEncoder()


def _decop_items(path):
    items = [{"item_id": f"{d}#L64p0", "passage_id": f"{d}#L64p0", "doc_id": d, "label": label,
              "options": [text, *paras], "answer": 0,
              "meta": {"title": d, "author": "x", "kind": "novel", "role": "evaluate", "length_tokens": 64,
                       "attempts": 1, "paraphraser": "para"}}
             for d, label, text, paras in (("budget", 1, BUDGET, BUDGET_DECOP), ("river", 0, RIVER, RIVER_DECOP))]
    write_jsonl(path, items)
    return items


class Scripted:
    """A paraphraser that answers from a script per text and records what it was asked."""

    def __init__(self, replies):
        self.replies, self.asked = replies, []

    def describe(self):
        return {"paraphraser": "scripted"}

    def candidates(self, texts, lengths, attempt, wanted=None):
        self.asked.append((attempt, dict(zip(texts, wanted))))
        return [self.replies[t].pop(0) if self.replies[t] else [] for t in texts]


def test_the_pool_tops_up_decop_items_and_leaves_out_a_short_one_with_its_count(encoder, tmp_path):
    items = _decop_items(tmp_path / "decop_items.jsonl")
    para = Scripted({BUDGET: [[BUDGET_DECOP[0], BUDGET_NEW[0], "Too short."], [BUDGET_NEW[1]]],
                     RIVER: [[RIVER_NEW[0], BUDGET_NEW[2]], [RIVER]]})
    pool = build_pool(tmp_path / "decop_items.jsonl", 5, {"max_attempts": 2}, para, encoder,
                      tmp_path / "ktd_pool.jsonl", tmp_path / "ktd_pool_qc.csv")
    # rounds numbered from TOP_UP_FIRST_ATTEMPT; the retry asks only for what is missing
    assert para.asked == [(TOP_UP_FIRST_ATTEMPT, {BUDGET: 2, RIVER: 2}), (TOP_UP_FIRST_ATTEMPT + 1, {BUDGET: 1, RIVER: 1})]
    # budget: DE-COP's three first, untouched, then two new (a duplicate of DE-COP's and a short one rejected)
    assert [it["item_id"] for it in pool] == ["budget#L64p0"]
    assert pool[0]["options"] == [BUDGET, *BUDGET_DECOP, BUDGET_NEW[0], BUDGET_NEW[1]]
    assert pool[0]["meta"]["pool_size"] == 5 and pool[0]["meta"]["pool_attempts"] == 2
    assert {k: v for k, v in pool[0].items() if k not in ("options", "meta")} == \
        {k: v for k, v in items[0].items() if k not in ("options", "meta")}
    assert [json.loads(line) for line in (tmp_path / "ktd_pool.jsonl").open()] == pool
    # river: one new paraphrase accepted, one unrelated, then the passage itself: left out, and counted
    qc = pd.read_csv(tmp_path / "ktd_pool_qc.csv").set_index("doc_id")
    assert qc.loc["budget", ["n_passages", "n_kept", "n_candidates", "n_duplicate", "n_length"]].tolist() == [1, 1, 4, 1, 1]
    assert qc.loc["river", ["n_passages", "n_kept", "n_candidates", "n_unrelated", "n_near_identical"]].tolist() == \
        [1, 0, 3, 1, 1]
    assert qc.loc["budget", "accept_rate"] == pytest.approx(2 / 4) and set(qc["paraphraser"]) == {"scripted"}


def test_a_pool_nobody_reaches_and_items_that_are_not_decop_items_are_errors(encoder, tmp_path):
    _decop_items(tmp_path / "decop_items.jsonl")
    never = Scripted({BUDGET: [], RIVER: []})
    with pytest.raises(InputError, match=r"no passage reached a pool of 4 knockoffs after 1 rounds .*ktd_pool_qc.csv"):
        build_pool(tmp_path / "decop_items.jsonl", 4, {"max_attempts": 1}, never, encoder,
                   tmp_path / "ktd_pool.jsonl", tmp_path / "ktd_pool_qc.csv")
    assert pd.read_csv(tmp_path / "ktd_pool_qc.csv")["n_kept"].sum() == 0  # the counts are written first
    with pytest.raises(InputError, match="3 knockoffs per passage are DE-COP's own"):
        build_pool(tmp_path / "decop_items.jsonl", 3, {}, never, encoder, tmp_path / "p.jsonl", tmp_path / "q.csv")
    write_jsonl(tmp_path / "short.jsonl", [{"item_id": "a", "doc_id": "a", "label": 1, "answer": 0,
                                            "options": [BUDGET, BUDGET_DECOP[0]], "meta": {"length_tokens": 64}}])
    with pytest.raises(InputError, match=r"short.jsonl: item 'a' is not a DE-COP item"):
        build_pool(tmp_path / "short.jsonl", 5, {}, never, encoder, tmp_path / "p.jsonl", tmp_path / "q.csv")
    write_jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(InputError, match="empty.jsonl: no items to top up"):
        build_pool(tmp_path / "empty.jsonl", 5, {}, never, encoder, tmp_path / "p.jsonl", tmp_path / "q.csv")


def test_an_api_paraphraser_fills_a_pool_of_seven_through_the_real_sdk(encoder, tmp_path, monkeypatch):
    """The paper's prompt gives three paraphrases a reply: four missing need two replies of the same
    prompt, the first sample ``attempt`` (as DE-COP asks) and the second ``attempt + 1000``."""
    from memaudit.backends.openai_backend import OpenAIBackend
    from memaudit.backends.retry import RetryPolicy
    from memaudit.backends.scripted import ScriptedResponder
    from memaudit.backends.server import ChatServer
    from memaudit.probes.decop.paraphrase import BackendParaphraser

    extra = BUDGET_NEW + ["A week's delay for the budget vote: the committee's members wanted more time to decide."]
    prompt = paraphrase_prompt(BUDGET, 64)
    responder = ScriptedResponder()
    responder.queue(f"Example B: {extra[0]}\n\nExample C: {extra[1]}\n\nExample D: {BUDGET_DECOP[2]}",
                    f"Example B: {extra[2]}\n\nExample C: {extra[3]}\n\nExample D: {extra[0]}", prompt=prompt)
    monkeypatch.setenv("KTD_POOL_KEY", "sk-test-pool")
    with ChatServer(responder) as server:
        backend = OpenAIBackend("gpt-like", name="para", base_url=server.openai_base_url, api_key_env="KTD_POOL_KEY",
                                cache=tmp_path / "c.sqlite", concurrency=1,
                                retry_policy=RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01))
        para = BackendParaphraser(backend, name="para", temperature=0.7)
        [res] = paraphrase_with_qc([BUDGET], [64], para, encoder, QCSettings(max_attempts=1), n=7,
                                   accepted=[BUDGET_DECOP], first_attempt=TOP_UP_FIRST_ATTEMPT)
        seeds = [r.request.seed for r in server.records]
    assert res.paraphrases == [*BUDGET_DECOP, *extra]
    # the second reply's repeat comes after the pool is full: not examined
    assert res.rejected["duplicate"] == 1 and res.n_candidates == 5
    assert seeds == [TOP_UP_FIRST_ATTEMPT, TOP_UP_FIRST_ATTEMPT + 1000]  # seed 0 * 1000003 + sample index


def test_the_pool_file_is_read_only_when_ktd_asks_for_more_than_three():
    assert plan.records_file({"ms": [1, 2, 3]}) == "decop_items.jsonl"
    assert plan.records_file({"ms": [1, 4]}) == "ktd_pool.jsonl" and plan.pool_size({"ms": [10, 2]}) == 10
