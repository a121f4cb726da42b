"""API backends through the real openai and anthropic SDK clients against a loopback server.

Every number of requests asserted below is what the server received, so the
cache, retry and resume claims are checked on the wire.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from api_server import (Fault, bad_request, error_object_200, loopback, malformed_json, overloaded,
                        provider_refusal, rate_limited, refusal_text, reply_with_top, server_error, stall,
                        unauthorized)
from memaudit.backends.anthropic_backend import AnthropicBackend
from memaudit.backends.api import APIRequestError, api_backend_from_config, option_logprobs_from_top
from memaudit.backends.base import (GENERATE, OPTION_LOGPROBS, STATUS_ERROR, STATUS_INVALID, STATUS_OK,
                                    STATUS_REFUSAL, GenerationParams, check_probe_support, model_capabilities)
from memaudit.backends.cache import ResponseCache, canonical_json
from memaudit.backends.ledger import estimate_cost, estimate_plan, ledger_frame
from memaudit.backends.openai_backend import OpenAIBackend
from memaudit.backends.refusal import classify_answer, is_refusal, outcome_rates, parse_choice
from memaudit.backends.retry import (Cooldown, RequestFault, RetriesExhausted, RetryPolicy, call_with_retries,
                                     parse_retry_after)
from memaudit.backends.secrets import redact
from memaudit.backends.settings import Pricing, api_slots
from memaudit.errors import ConfigError, InputError, MemauditError

KEY_ENV = "MEMAUDIT_TEST_API_KEY"
KEY = "sk-test-Z9q2" + "x7Lm4Pw8Rt6Yh3Nv" * 2  # what a real key looks like; must never be written anywhere
FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
GREEDY = GenerationParams(max_new_tokens=8)
OPTIONS = ["A", "B", "C", "D"]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def server():
    with loopback() as srv:
        yield srv


def make_openai(server, cache, **kw) -> OpenAIBackend:
    opts = dict(name="gpt-test", base_url=server.openai_base_url, api_key_env=KEY_ENV, cache=cache,
                retry_policy=FAST, concurrency=4, timeout=5.0, pricing=Pricing(1.0, 2.0), rule="rule_a")
    opts.update(kw)
    return OpenAIBackend("gpt-test-2025-01-01", **opts)


def make_anthropic(server, cache, **kw) -> AnthropicBackend:
    opts = dict(name="claude-test", base_url=server.anthropic_base_url, api_key_env=KEY_ENV, cache=cache,
                retry_policy=FAST, timeout=5.0, pricing=Pricing(3.0, 15.0))
    opts.update(kw)
    return AnthropicBackend("claude-test-1", **opts)


def test_a_records_status_is_set_before_the_client_has_its_answer(monkeypatch):
    """A client that has its answer sees its request's status in ``records``, however late the
    server's bookkeeping after the write runs (a full test run on a busy machine saw None there)."""
    import memaudit.backends.server as server_module

    end = server_module.ChatServer._end

    def late_end(self, record, status):
        time.sleep(0.5)
        end(self, record, status)

    monkeypatch.setattr(server_module.ChatServer, "_end", late_end)
    with loopback() as srv:
        api = make_openai(srv, None)
        out = api.generate(["The sea"], GenerationParams(max_new_tokens=4))
        assert out[0].status == STATUS_OK
        assert [r.status for r in srv.records] == [200]


# ----------------------------------------------------------------------------- success, cache, ledger

def test_success_then_cached_rerun_sends_nothing_and_the_ledger_prices_it(server, tmp_path):
    db = tmp_path / "cache.sqlite"
    prompts = ["first prompt alpha", "second prompt beta", "third prompt gamma"]
    out = make_openai(server, db).generate(prompts, GREEDY)
    assert [g.text for g in out] == [f"Echo: {p}" for p in prompts]
    assert [(g.input_tokens, g.output_tokens, g.status, g.from_cache) for g in out] == [(3, 4, STATUS_OK, False)] * 3
    assert server.count() == 3
    sent = server.records[0].request
    assert (sent.max_tokens, sent.temperature, sent.seed, sent.logprobs) == (8, 0.0, 0, False)

    rerun = make_openai(server, db, rule="rule_b")
    again = rerun.generate(prompts, GREEDY)
    assert server.count() == 3  # zero network calls
    assert rerun._sdk_client is None  # not even an SDK client was built
    assert [g.text for g in again] == [g.text for g in out]
    assert all(g.from_cache for g in again)
    assert [g.requested_at for g in again] == [g.requested_at for g in out]  # when the API was asked

    ledger = ledger_frame(db).set_index(["model", "rule"])
    a, b = ledger.loc[("gpt-test", "rule_a")], ledger.loc[("gpt-test", "rule_b")]
    assert (a.n_sent, a.n_cached, a.input_tokens, a.output_tokens) == (3, 0, 9, 12)
    assert a.cost_usd == pytest.approx((9 * 1.0 + 12 * 2.0) / 1e6)
    assert (b.n_sent, b.n_cached, b.cached_input_tokens, b.cost_usd) == (0, 3, 9, 0.0)

    # a different decoding parameter is a different request
    make_openai(server, db).generate(prompts[:1], GenerationParams(max_new_tokens=9))
    assert server.count() == 4


def test_two_clones_caches_merge_into_one_with_nothing_paid_twice(server, tmp_path, capsys):
    """DVC versions the cache as one file: two clones that ran on one branch got a dvc.lock conflict, and keeping one
    side then pulling replaced the other side's paid answers. `memaudit api-cache-merge` copies the other cache's
    answers and usage rows into this one: an answer both hold once (this cache's), a usage row both recorded (the
    shared history before the clones parted) once, so the ledger's cost is the sum of what was paid."""
    import shutil

    from memaudit.cli import main

    mine, theirs = tmp_path / "mine.sqlite", tmp_path / "theirs.sqlite"
    first = make_openai(server, mine)
    first.generate(["shared one", "shared two"], GREEDY)  # before the clones parted
    first.close()  # its answers in the file itself, out of the WAL, before the copy
    shutil.copy(mine, theirs)
    make_openai(server, mine, rule="mine").generate(["only mine"], GREEDY)
    make_openai(server, theirs, rule="theirs").generate(["only theirs a", "only theirs b", "shared one"], GREEDY)
    paid = {path: ledger_frame(path)["cost_usd"].sum() for path in (mine, theirs)}
    shared = ledger_frame(mine).set_index(["model", "rule"]).loc[("gpt-test", "rule_a"), "cost_usd"]
    assert main(["api-cache-merge", str(theirs), "--into", str(mine)]) == 0
    # theirs: 2 answers sent, 1 read from the shared cache (a usage row at no cost)
    assert capsys.readouterr().out == (f"{mine}: 2 answer(s) and 3 usage row(s) added from {theirs} "
                                       f"(5 answers in all)\n")
    merged = ResponseCache(mine)
    assert merged.count() == 5
    ledger = ledger_frame(mine).set_index(["model", "rule"])
    assert ledger["cost_usd"].sum() == pytest.approx(paid[mine] + paid[theirs] - shared)  # nothing counted twice
    assert ledger.loc[("gpt-test", "theirs"), "n_sent"] == 2 and ledger.loc[("gpt-test", "theirs"), "n_cached"] == 1
    merged.close()
    assert main(["api-cache-merge", str(theirs), "--into", str(mine)]) == 0  # again: nothing new
    assert "0 answer(s) and 0 usage row(s) added" in capsys.readouterr().out
    with ResponseCache(mine) as writer:  # a cache a job opened (no URI names) merges the same way
        assert writer.merge_from(theirs) == (0, 0)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("file:")) == []
    assert main(["api-cache-merge", str(mine), "--into", str(mine)]) == 2
    assert "the cache --into names" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("not a cache")
    assert main(["api-cache-merge", str(tmp_path / "notes.txt"), "--into", str(mine)]) == 2
    assert f"{tmp_path / 'notes.txt'}: not a usable response cache" in capsys.readouterr().err
    # a misspelt other cache: said of that file, not as this cache's "cannot open ... a directory this user can write"
    assert main(["api-cache-merge", str(tmp_path / "nope.sqlite"), "--into", str(mine)]) == 2
    assert capsys.readouterr() == ("", f"memaudit api-cache-merge: error: {tmp_path / 'nope.sqlite'}: no such file "
                                       f"(the other clone's response cache)\n")
    assert not (tmp_path / "nope.sqlite").exists()
    assert ResponseCache(mine).count() == 5  # left as it was


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_prompt_tokens_the_provider_cached_are_priced_at_the_cached_rate(server, tmp_path, backend):
    """OpenAI's usage block counts the prompt's tokens its prompt cache served in
    ``prompt_tokens_details.cached_tokens`` (of ``prompt_tokens``); Anthropic's, in
    ``cache_read_input_tokens`` (beside ``input_tokens``). Both reach the ledger, priced at
    ``cached_input_per_mtok``, and at the input price where the config gives none."""
    from memaudit.backends.server import ChatReply

    make = make_openai if backend == "openai" else make_anthropic
    db = tmp_path / "c.sqlite"
    server.responder.queue(ChatReply(text="Emma.", input_tokens=2048, output_tokens=10,
                                     cached_input_tokens=1536), prompt="long prompt")
    server.responder.queue(ChatReply(text="Moby.", input_tokens=2048, output_tokens=10,
                                     cached_input_tokens=1024), prompt="other prompt")
    (g,) = make(server, db, pricing=Pricing(2.0, 8.0, cached_input_per_mtok=0.5), rule="r1").generate(
        ["long prompt"], GREEDY)
    assert (g.text, g.input_tokens, g.output_tokens) == ("Emma.", 2048, 10)
    make(server, db, pricing=Pricing(2.0, 8.0), rule="r2").generate(["other prompt"], GREEDY)
    ledger = ledger_frame(db).set_index("rule")
    assert list(ledger.loc["r1", ["input_tokens", "provider_cached_tokens"]]) == [2048, 1536]
    assert ledger.loc["r1", "cost_usd"] == pytest.approx((512 * 2.0 + 1536 * 0.5 + 10 * 8.0) / 1e6)
    assert list(ledger.loc["r2", ["input_tokens", "provider_cached_tokens"]]) == [2048, 1024]
    assert ledger.loc["r2", "cost_usd"] == pytest.approx((2048 * 2.0 + 10 * 8.0) / 1e6)  # no cached price


def test_anthropic_prompt_cache_writes_are_priced_at_1_25_and_2_times_the_input_price(server, tmp_path):
    """Anthropic bills a prompt-cache write at 1.25 times the input price for the 5-minute lifetime
    and 2 times for the 1-hour one (its usage block: ``cache_creation_input_tokens``, split in
    ``cache_creation``); they were priced at the input price. Through the SDK and the loopback server."""
    from memaudit.backends.server import ChatReply

    db = tmp_path / "c.sqlite"
    server.responder.queue(ChatReply(text="Emma.", input_tokens=4096, output_tokens=10, cached_input_tokens=1024,
                                     cache_write_5m_tokens=2048, cache_write_1h_tokens=512), prompt="long prompt")
    (g,) = make_anthropic(server, db, pricing=Pricing(2.0, 8.0, cached_input_per_mtok=0.2), rule="r1").generate(
        ["long prompt"], GREEDY)
    assert (g.text, g.input_tokens, g.output_tokens) == ("Emma.", 4096, 10)
    row = ledger_frame(db).set_index("rule").loc["r1"]
    assert list(row[["input_tokens", "provider_cached_tokens", "provider_cache_write_tokens"]]) == [4096, 1024, 2560]
    assert row["cost_usd"] == pytest.approx((512 * 2.0 + 1024 * 0.2 + 2048 * 2.5 + 512 * 4.0 + 10 * 8.0) / 1e6)


def test_anthropic_cache_writes_without_their_split_are_the_5_minute_ones():
    """A usage block without ``cache_creation`` (an older API version, a proxy) counts every write
    at the default lifetime, 5 minutes; with it, the split is read."""
    b = AnthropicBackend("claude-test-1", api_key_env=KEY_ENV, pricing=Pricing(2.0, 8.0))
    reply = {"content": [{"type": "text", "text": "Emma."}], "stop_reason": "end_turn",
             "usage": {"input_tokens": 100, "cache_creation_input_tokens": 300, "output_tokens": 5}}
    parsed = b._parse(reply)
    assert (parsed.input_tokens, parsed.provider_cache_write_5m_tokens, parsed.provider_cache_write_1h_tokens) == \
        (400, 300, 0)
    reply["usage"]["cache_creation"] = {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200}
    parsed = b._parse(reply)
    assert (parsed.input_tokens, parsed.provider_cache_write_5m_tokens, parsed.provider_cache_write_1h_tokens) == \
        (400, 100, 200)
    assert Pricing(2.0, 8.0).cost(400, 5, 0, 100, 200) == pytest.approx(
        (100 * 2.0 + 100 * 2.5 + 200 * 4.0 + 5 * 8.0) / 1e6)


def test_pricing_reads_the_cached_rate_and_caps_cached_tokens_at_the_input():
    assert Pricing.from_config({"input_per_mtok": 1, "output_per_mtok": 4, "cached_input_per_mtok": 0.1}) == \
        Pricing(1.0, 4.0, 0.1)
    assert Pricing(1.0, 4.0, 0.1).cost(100, 10, 40) == pytest.approx((60 * 1.0 + 40 * 0.1 + 10 * 4.0) / 1e6)
    assert Pricing(1.0, 4.0, 0.1).cost(100, 0, 500) == pytest.approx(100 * 0.1 / 1e6)


def test_a_cache_written_before_provider_cached_tokens_gains_the_column(tmp_path):
    """A cache database of an earlier memaudit (its usage table without the column) opens, keeps its
    rows, and counts no provider-cached tokens for them."""
    import sqlite3

    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE usage (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, run_id TEXT NOT NULL, "
                 "rule TEXT, model TEXT NOT NULL, backend TEXT NOT NULL, model_id TEXT NOT NULL, key TEXT NOT NULL, "
                 "from_cache INTEGER NOT NULL, status TEXT NOT NULL, input_tokens INTEGER NOT NULL, "
                 "output_tokens INTEGER NOT NULL, cost_usd REAL)")
    conn.execute("INSERT INTO usage (at, run_id, rule, model, backend, model_id, key, from_cache, status, "
                 "input_tokens, output_tokens, cost_usd) VALUES ('t', 'r', 'rule_a', 'm', 'openai', 'id', 'k', 0, "
                 "'ok', 7, 3, 0.25)")
    conn.commit()
    conn.close()
    row = ledger_frame(db).iloc[0]
    assert (row["input_tokens"], row["output_tokens"], row["provider_cached_tokens"],
            row["provider_cache_write_tokens"], row["cost_usd"]) == (7, 3, 0, 0, 0.25)


def test_cache_key_is_the_canonical_request_and_sample_index_counts_only_when_sampling(server, tmp_path):
    b = make_openai(server, None)
    (call,) = b.plan(["Who wrote Emma?"], GenerationParams(max_new_tokens=5, system_prompt="Be brief.", seed=3))
    body = {"model": "gpt-test-2025-01-01", "max_tokens": 5, "temperature": 0.0, "seed": 3,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who wrote Emma?"}]}
    identity = {"v": 1, "backend": "openai", "model_id": "gpt-test-2025-01-01", "revision": None, "body": body,
                "seed": 3, "sample_index": 0}
    assert call.body == body
    assert call.key == hashlib.sha256(canonical_json(identity).encode()).hexdigest()

    def key(**kw):
        return b.plan(["p"], GenerationParams(**kw))[0].key

    assert key(sample_index=0) == key(sample_index=5)  # greedy: one entry serves every sample
    assert key(temperature=0.7, sample_index=0) != key(temperature=0.7, sample_index=1)
    assert key(seed=1) != key(seed=2)
    # sampled requests send distinct seeds, so the provider returns distinct samples
    assert b.plan(["p"], GenerationParams(temperature=0.7, seed=2, sample_index=3))[0].body["seed"] == 2 * 1000003 + 3
    other_revision = make_openai(server, None, revision="abc123")
    assert other_revision.plan(["p"], GenerationParams())[0].key != key()


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_the_sdks_custom_headers_are_part_of_the_cache_key_hashed(server, tmp_path, monkeypatch, backend):
    """The SDKs send the headers of ``ANTHROPIC_CUSTOM_HEADERS`` (``OPENAI_CUSTOM_HEADERS``) with every
    request, and one can change the answer (an ``anthropic-beta`` feature, an API version, a gateway's
    routing): a request under other headers was served the cached answer of the first. Now their names
    and values are in the key as one SHA-256 (they may hold a gateway's token: never stored in clear);
    credential headers, which say who pays and not what is answered, are left out, as OpenAI's
    organization and project are; without the variable the key is what it was."""
    make = make_anthropic if backend == "anthropic" else make_openai
    env = "ANTHROPIC_CUSTOM_HEADERS" if backend == "anthropic" else "OPENAI_CUSTOM_HEADERS"
    db = tmp_path / "c.sqlite"
    token = "gw-secret-Q7r9T2v4W6y8"
    monkeypatch.setenv(env, f"anthropic-beta: context-1m-2025-08-07\nX-Gateway-Token: {token}")
    make(server, db).generate(["Who wrote Emma?"], GREEDY)
    assert server.count() == 1 and server.records[0].headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert server.records[0].headers["x-gateway-token"] == token  # what the key hashes is what was sent
    again = make(server, db).generate(["Who wrote Emma?"], GREEDY)
    assert server.count() == 1 and again[0].from_cache
    monkeypatch.setenv(env, f"X-Gateway-Token: {token}\nanthropic-beta: output-128k-2025-02-19")
    other = make(server, db).generate(["Who wrote Emma?"], GREEDY)
    assert server.count() == 2 and not other[0].from_cache
    assert token.encode() not in db.read_bytes() and b"output-128k" not in db.read_bytes()

    def key(headers: str | None) -> str:
        if headers is None:
            monkeypatch.delenv(env, raising=False)
        else:
            monkeypatch.setenv(env, headers)
        return make(server, None).plan(["p"], GREEDY)[0].key

    beta = "anthropic-beta: output-128k-2025-02-19"
    assert key(f"{beta}\nx-api-key: sk-ant-one-0123456789") == key(f"Anthropic-Beta:output-128k-2025-02-19\n"
                                                                   f"Authorization: Bearer two-0123456789")
    assert key(beta) != key("anthropic-beta: context-1m-2025-08-07") and key(beta) != key(None)
    if backend == "anthropic":
        body = {"model": "claude-test-1", "max_tokens": 8, "messages": [{"role": "user", "content": "p"}],
                "temperature": 0.0}
        seed = {}
    else:
        body = {"model": "gpt-test-2025-01-01", "messages": [{"role": "user", "content": "p"}], "max_tokens": 8,
                "temperature": 0.0, "seed": 0}
        seed = {"seed": 0}
    unchanged = {"v": 1, "backend": backend, "model_id": body["model"], "revision": None, "body": body,
                 **seed, "sample_index": 0}
    assert key(None) == key("no header on this line") == hashlib.sha256(canonical_json(unchanged).encode()).hexdigest()


def test_a_rotated_gateway_credential_header_asks_nothing_again_and_never_shows(server, tmp_path, monkeypatch):
    """A gateway's key in a custom header (Helicone-Auth, x-portkey-api-key, Azure's api-key) says who pays, not
    what is answered: it was hashed into the key, so rotating it asked every cached prompt again (docs/models.md
    said it did not), and a 401 quoting it showed it in the log and in the error rows results keep. Answers an
    earlier version cached under the key holding it are still served."""
    import memaudit.backends.api as api_module

    db = tmp_path / "c.sqlite"
    old_token, new_token = "sk-helicone-OLD0123456789abcd", "sk-helicone-NEW0123456789abcd"
    portkey = "pk-SecretGateway0123456789"
    headers = "Helicone-Auth: Bearer {}\nx-portkey-api-key: " + portkey + "\nanthropic-beta: context-1m-2025-08-07"
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", headers.format(old_token))
    # an answer cached by the earlier version, whose key hashed every header but Authorization and x-api-key
    with monkeypatch.context() as m:
        m.setattr(api_module, "credential_header", lambda name: name in api_module.CREDENTIAL_HEADERS)
        earlier = make_openai(server, db)
        assert earlier.legacy_key_fields is None
        earlier.generate(["Who wrote Emma?"], GREEDY)
    assert server.count() == 1
    now = make_openai(server, db)
    call = now.plan(["Who wrote Emma?"], GREEDY)[0]
    assert call.legacy_key == earlier.plan(["Who wrote Emma?"], GREEDY)[0].key != call.key
    assert now.generate(["Who wrote Emma?"], GREEDY)[0].from_cache and server.count() == 1
    assert estimate_cost(now, ["Who wrote Emma?"], GREEDY).rows[0]["n_cached"] == 1
    now.generate(["Who wrote Persuasion?"], GREEDY)  # cached under the new key, which holds no credential
    assert server.count() == 2
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", headers.format(new_token))
    rotated = make_openai(server, db)
    assert rotated.plan(["Who wrote Persuasion?"], GREEDY)[0].key == now.plan(["Who wrote Persuasion?"], GREEDY)[0].key
    assert rotated.generate(["Who wrote Persuasion?"], GREEDY)[0].from_cache and server.count() == 2
    # the answer routing still changes the key
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", headers.format(new_token).replace("context-1m", "output-128k"))
    assert make_openai(server, db).plan(["Who wrote Persuasion?"], GREEDY)[0].key != call.key
    # a 401 quoting the gateway's key: the registered value is redacted wherever it shows
    assert redact(f"HTTP 401: Invalid x-portkey-api-key {portkey} for {new_token}") == \
        "HTTP 401: Invalid x-portkey-api-key *** for ***"
    assert portkey.encode() not in db.read_bytes() and new_token.encode() not in db.read_bytes()


@pytest.mark.parametrize("text, clean", [
    ("https://alice:p@ss@host/v1", "https://***@host/v1"),  # the password's own @ showed its tail
    ("wss://alice:pw@host/", "wss://***@host/"),
    ("POST https://r.openai.azure.com/openai?api-key=Zx8KpQ2rT5&api-version=2024-06-01",
     "POST https://r.openai.azure.com/openai?api-key=***&api-version=2024-06-01"),
    ("https://gw.example.com/v1;token=abcdef012345", "https://gw.example.com/v1;token=***"),
    ("x-api-key: 0123456789abcdef", "x-api-key: ***"),
    ("api-key: 3f2a11223344", "api-key: ***"),
    ("Authorization: Basic YWxpY2U6czNjcjN0cGFzcw==", "Authorization: ***"),
    ("Basic understanding, max_tokens=200, the key=value pair", "Basic understanding, max_tokens=200, the key=value pair"),
])
def test_redact_hides_every_form_a_credential_takes_in_a_message(text, clean):
    assert redact(text) == clean


def test_concurrent_requests_stay_within_the_limit(tmp_path):
    with loopback(latency=0.2) as srv:
        b = make_openai(srv, tmp_path / "c.sqlite", concurrency=4)
        t0 = time.monotonic()
        out = b.generate([f"prompt {i}" for i in range(8)], GREEDY)
        elapsed = time.monotonic() - t0
    assert srv.count() == 8 and srv.max_in_flight == 4
    assert elapsed < 8 * 0.2 * 0.75  # one at a time would take 1.6 s; four at a time about 0.4 s
    assert [g.text for g in out] == [f"Echo: prompt {i}" for i in range(8)]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_concurrent_writers_share_one_cache_file(tmp_path, monkeypatch, journal):
    """Two connections writing at once, in WAL mode (a local disk) and with the rollback journal (a
    network file system, where SLURM jobs on several nodes write the same file)."""
    from memaudit.backends.cache import JOURNAL_ENV

    monkeypatch.setenv(JOURNAL_ENV, journal)
    db = tmp_path / "shared.sqlite"
    caches = [ResponseCache(db), ResponseCache(db)]  # two connections, as two Snakemake jobs have
    errors = []

    def write(cache, keys):
        try:
            for k in keys:
                cache.put(key=f"k{k}", backend="openai", model_id="m", request={"k": k}, response={"n": k},
                          input_tokens=1, output_tokens=1, requested_at="t", seconds=0.0, attempts=1)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(caches[0], range(0, 120))),
               threading.Thread(target=write, args=(caches[1], range(100, 220)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert caches[0].count() == 220
    assert caches[1].get_many(["k5", "k150", "k999"]).keys() == {"k5", "k150"}
    assert caches[0]._conn.execute("PRAGMA journal_mode").fetchone()[0] == journal
    assert caches[0]._conn.execute("PRAGMA synchronous").fetchone()[0] == (1 if journal == "wal" else 2)


MOUNTINFO = """\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /home rw,relatime shared:9 - nfs4 fs1:/home rw,vers=4.2
31 30 0:26 / /home/scratch\\040space rw,relatime - lustre 10.0.0.1@o2ib:/scratch rw,flock
32 22 0:27 / /tmp rw,nosuid - tmpfs tmpfs rw
"""


def test_file_system_type_is_that_of_the_longest_mount_point_above_the_path():
    from memaudit.backends.cache import file_system_type

    assert file_system_type("/home/ana/run/results/api", MOUNTINFO) == "nfs4"
    assert file_system_type("/home/scratch space/run/results", MOUNTINFO) == "lustre"
    assert file_system_type("/homework/results", MOUNTINFO) == "ext4"  # /home is no prefix of /homework
    assert file_system_type("/tmp/x", MOUNTINFO) == "tmpfs"
    assert file_system_type("/", MOUNTINFO) == "ext4"


def test_a_cache_on_a_network_file_system_uses_the_rollback_journal(tmp_path, monkeypatch, caplog):
    """SQLite's WAL index is shared memory: processes on several hosts (SLURM jobs writing one
    results/api/cache.sqlite on NFS) would corrupt it. There the cache opens with the rollback
    journal, and a cache left in WAL mode by a run on a local disk is switched back."""
    import memaudit.backends.cache as cache_module

    db = tmp_path / "c.sqlite"
    with ResponseCache(db) as local:
        assert local.journal_mode == "WAL"
    monkeypatch.setattr(cache_module, "file_system_type", lambda path, mountinfo=None: "nfs4")
    with ResponseCache(db) as shared:
        assert shared.journal_mode == "DELETE"
        assert shared._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    monkeypatch.setattr(cache_module, "file_system_type", lambda path, mountinfo=None: "ext4")
    monkeypatch.setenv(cache_module.JOURNAL_ENV, "delete")  # detection overridden
    assert ResponseCache(db).journal_mode == "DELETE"
    monkeypatch.setenv(cache_module.JOURNAL_ENV, "journal")
    with pytest.raises(ConfigError, match="MEMAUDIT_SQLITE_JOURNAL: 'journal' is neither 'wal' nor 'delete'"):
        ResponseCache(db)


def test_no_process_switches_a_cache_in_the_rollback_journal_to_wal_unless_told(tmp_path, monkeypatch):
    """The journal mode is written into the file: `memaudit api-ledger` run from a shell without the jobs'
    MEMAUDIT_SQLITE_JOURNAL=delete switched the cache the jobs were writing to WAL (their next write made
    -wal and -shm files), and a login node whose disk is local to it but shared with the compute nodes over NFS
    would do the same. A reader (the ledger, the estimate) leaves the mode alone; a writer switches a cache in
    the rollback journal to WAL only when MEMAUDIT_SQLITE_JOURNAL=wal says so (a new cache takes the detected
    mode, and WAL to the rollback journal, the safe way, is still switched)."""
    import memaudit.backends.cache as cache_module

    def header_mode(path):  # bytes 18-19 of an SQLite file: 1 1 rollback journal, 2 2 WAL
        return tuple(Path(path).read_bytes()[18:20])

    db = tmp_path / "c.sqlite"
    monkeypatch.setattr(cache_module, "file_system_type", lambda path, mountinfo=None: "ext4")
    monkeypatch.setenv(cache_module.JOURNAL_ENV, "delete")
    with ResponseCache(db) as jobs_cache:  # the jobs' environment
        jobs_cache.put(key="k", backend="openai", model_id="m", request={}, response={"n": 1}, input_tokens=1,
                       output_tokens=1, requested_at="t", seconds=0.0, attempts=1)
        monkeypatch.delenv(cache_module.JOURNAL_ENV)  # the shell api-ledger runs in
        with ResponseCache(db, existing=True) as reader:
            assert reader.journal_mode == "DELETE" and reader.count() == 1
        assert header_mode(db) == (1, 1) and not Path(f"{db}-wal").exists()
        with ResponseCache(db) as writer:  # a writer whose disk looks local
            assert writer.journal_mode == "DELETE"
        jobs_cache.put(key="k2", backend="openai", model_id="m", request={}, response={"n": 2}, input_tokens=1,
                       output_tokens=1, requested_at="t", seconds=0.0, attempts=1)
        assert header_mode(db) == (1, 1) and not Path(f"{db}-wal").exists()
    monkeypatch.setenv(cache_module.JOURNAL_ENV, "wal")  # told
    with ResponseCache(db) as forced:
        assert forced.journal_mode == "WAL" and header_mode(db) == (2, 2)
    monkeypatch.delenv(cache_module.JOURNAL_ENV)
    with ResponseCache(tmp_path / "new.sqlite") as new:  # a new cache: the detected mode
        assert new.journal_mode == "WAL"


@pytest.mark.parametrize("damage", ['{"choi', "null", '{"choices": []}'])
def test_a_damaged_cache_entry_is_asked_again_not_replayed_or_a_traceback(server, tmp_path, caplog, damage):
    db = tmp_path / "c.sqlite"
    prompts = ["first prompt alpha", "second prompt beta"]
    b = make_openai(server, db)
    (key, _) = [c.key for c in b.plan(prompts, GREEDY)]
    b.generate(prompts, GREEDY)
    b.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE responses SET response = ? WHERE key = ?", (damage, key))
    with caplog.at_level(logging.WARNING):
        out = make_openai(server, db).generate(prompts, GREEDY)
    assert [(g.text, g.status, g.from_cache) for g in out] == [("Echo: first prompt alpha", STATUS_OK, False),
                                                                ("Echo: second prompt beta", STATUS_OK, True)]
    assert server.count() == 3  # only the damaged one asked again
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"cache entry {key}" in warning and str(db) in warning and warning.endswith("; asking again")
    # the new answer took the damaged one's place
    again = make_openai(server, db).generate(prompts, GREEDY)
    assert [g.from_cache for g in again] == [True, True] and server.count() == 3


def test_a_cache_file_that_is_no_database_is_a_one_line_error_naming_it(tmp_path):
    db = tmp_path / "cache.sqlite"
    db.write_bytes(b"not a database, a half-copied file " * 200)
    with pytest.raises(InputError) as err:
        ResponseCache(db)
    assert str(err.value) == (f"{db}: not a usable response cache (file is not a database); restore it "
                              f"(dvc checkout) or move it aside to start an empty one")


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_cache_path_that_cannot_be_a_database_file_is_a_one_line_error_naming_it(tmp_path, where):
    """``api.cache`` naming a directory, or a file under a file: one line naming the path, not
    sqlite3's "unable to open database file" (which names none) or mkdir's traceback."""
    (tmp_path / "results").mkdir()
    (tmp_path / "a_file").write_text("x")
    db = tmp_path / "results" if where == "a directory" else tmp_path / "a_file" / "cache.sqlite"
    with pytest.raises(InputError) as err:
        ResponseCache(db)
    assert str(err.value).startswith(f"{db}: cannot open the response cache (")
    assert str(err.value).endswith("): name a file, not a directory, in a directory this user can write")


@pytest.mark.parametrize("what", ["another database", "an empty file", "a usage table of another shape"])
def test_the_ledger_of_a_file_that_is_no_response_cache_is_one_line_and_leaves_it_as_it_was(tmp_path, capsys,
                                                                                              what):
    """``memaudit api-ledger --cache`` naming another SQLite database (or an empty file) turned it into a
    cache, memaudit's tables added, and printed an empty ledger; a database with a ``usage`` table of its
    own ended in a KeyError traceback. Now one line naming the file, and the file untouched."""
    from memaudit.cli import main

    db = tmp_path / "other.sqlite"
    if what == "an empty file":
        db.write_bytes(b"")
    else:
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE usage (id INTEGER, note TEXT)" if what.startswith("a usage")
                     else "CREATE TABLE notes (note TEXT)")
        conn.commit()
        conn.close()
    before = db.read_bytes()
    assert main(["api-ledger", "--cache", str(db)]) == 2
    assert capsys.readouterr() == ("", f"memaudit api-ledger: error: {db}: not an API response cache (it has no "
                                       f"memaudit usage table); name the cache a run wrote (api.cache, by default "
                                       f"results/api/cache.sqlite)\n")
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


# ----------------------------------------------------------------------------- option log-probabilities

def test_option_logprobs_from_top_list_with_missing_letters_as_nan(server, tmp_path):
    top = [("A", -0.2), (" A", -1.9), ("B", -2.3), (" C", -4.0), ("The", -5.0)]
    server.responder.queue(reply_with_top("A", top), prompt="q1")
    server.responder.queue(reply_with_top("The", [("The", -0.1), (" of", -2.0)]), prompt="q2")
    b = make_openai(server, tmp_path / "c.sqlite")
    s1, s2 = b.option_scores(["q1", "q2"], [OPTIONS, OPTIONS])

    assert s1.logprobs["A"] == pytest.approx(math.log(math.exp(-0.2) + math.exp(-1.9)), abs=1e-12)
    assert (s1.logprobs["B"], s1.logprobs["C"]) == (-2.3, -4.0)
    assert math.isnan(s1.logprobs["D"]) and s1.missing == ("D",) and s1.missing_upper_bound == -5.0
    assert s1.status == STATUS_OK
    assert set(s2.logprobs) == set(OPTIONS) and all(math.isnan(v) for v in s2.logprobs.values())
    assert s2.status == STATUS_INVALID and "no option among the top 2" in s2.error
    sent = server.records[0].request
    assert (sent.max_tokens, sent.temperature, sent.logprobs, sent.top_logprobs) == (1, 0.0, True, 20)

    # the request does not depend on the option set: another set is served from the cache
    (rows,) = make_openai(server, tmp_path / "c.sqlite").option_logprobs(["q1"], [["B", "C", "E"]])
    assert server.count() == 2 and rows["B"] == -2.3 and math.isnan(rows["E"])


def test_a_provider_flagged_refusal_of_an_option_question_is_a_refusal(server, tmp_path):
    """A reply the provider flagged (finish_reason content_filter, a message.refusal) was read as an answer:
    ok where its top list held a letter, invalid where it had none; it is a refusal with no letters, as
    generate() counts it. Through the real openai SDK."""
    from api_server import ChatReply

    server.responder.queue(ChatReply("A", finish_reason="content_filter", tokens=[("A", -0.1)],
                                     top_logprobs=[[("A", -0.1), ("B", -2.5)]], output_tokens=1), prompt="filtered")
    server.responder.queue(provider_refusal(), prompt="refused")
    server.responder.queue(reply_with_top("B", [("B", -0.2), ("A", -1.8)]), prompt="answered")
    scores = make_openai(server, tmp_path / "c.sqlite").option_scores(["filtered", "refused", "answered"],
                                                                      [OPTIONS] * 3)
    assert [s.status for s in scores] == [STATUS_REFUSAL, STATUS_REFUSAL, STATUS_OK]
    assert [[math.isnan(v) for v in s.logprobs.values()] for s in scores[:2]] == [[True] * 4] * 2
    assert [(s.missing, s.top, s.error) for s in scores[:2]] == [(tuple(OPTIONS), [], None)] * 2
    assert scores[2].logprobs["B"] == -0.2


def test_option_logprobs_from_top_sums_variants_and_never_raises():
    scores, missing = option_logprobs_from_top([(" B", -1.0), ("B", -1.0), ("x", -0.1)], ["B", " C"])
    assert scores["B"] == pytest.approx(-1.0 + math.log(2)) and math.isnan(scores[" C"]) and missing == (" C",)
    assert option_logprobs_from_top([], ["A"])[1] == ("A",)


def test_top_logprobs_above_the_api_limit_is_a_config_error(server):
    with pytest.raises(ConfigError, match="top_logprobs must be 1..20"):
        make_openai(server, None, top_logprobs=21)


# ----------------------------------------------------------------------------- faults and retries

def test_429_honours_retry_after_and_retries_only_once(server, tmp_path):
    server.responder.queue(rate_limited(0.3), prompt="limited")
    b = make_openai(server, tmp_path / "c.sqlite")
    (g,) = b.generate(["limited"], GREEDY)
    assert g.status == STATUS_OK and g.meta["attempts"] == 2 and server.count() == 2
    first, second = server.records
    assert first.status == 429 and second.status == 200
    # waited what the server asked, not the 0.01 s backoff: from when the 429 began to leave the server
    assert second.arrived - first.responding >= 0.3 - 0.01
    assert b.counts == {"sent": 1, "cached": 0, "retries": 1, "failed": 0}
    assert len(b.cache.usage_rows()) == 1  # only the answered request is in the ledger


def test_a_retry_after_of_zero_or_a_past_date_waits_the_backoff_not_nothing(server, tmp_path):
    """As the SDKs' own retries read it: a wait of 0 (a proxy's ``Retry-After: 0``, an HTTP date already
    past) names no wait, and the request backs off; taken at its word, every retry went out at once
    and a brief overload spent them all within milliseconds."""
    past = "Wed, 21 Oct 2015 07:28:00 GMT"
    server.responder.queue(rate_limited(0), Fault(503, "busy", {"Retry-After": past}), prompt="p")
    backoff = RetryPolicy(max_attempts=3, base_delay=0.4, max_delay=0.4)  # waits of 0.2 to 0.4 s
    (g,) = make_openai(server, tmp_path / "c.sqlite", retry_policy=backoff).generate(["p"], GREEDY)
    assert g.status == STATUS_OK and server.count() == 3
    first, second, third = server.records
    assert second.arrived - first.responding >= 0.2 - 0.01
    assert third.arrived - second.responding >= 0.2 - 0.01


def test_openais_own_host_written_as_base_url_is_openais_api(monkeypatch, tmp_path):
    """base_url https://api.openai.com/v1 without api_key_env sent the bearer key "none", the deprecated
    max_tokens and a repetition penalty, as to a compatible server; it is OpenAI's API: its key variable,
    max_completion_tokens, no penalty. A compatible server of another host keeps its own behaviour."""
    from memaudit.backends.base import provider_api

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-own")
    written = OpenAIBackend("gpt-4o-mini-2024-07-18", base_url="https://api.openai.com/v1", cache=None)
    assert (written.api_key_env, written.max_tokens_field, written.takes_repetition_penalty) == (
        "OPENAI_API_KEY", "max_completion_tokens", False)
    gateway = OpenAIBackend("some/model", base_url="https://gateway.example.com/v1", cache=None)
    assert (gateway.api_key_env, gateway.max_tokens_field, gateway.takes_repetition_penalty) == (
        None, "max_tokens", True)
    assert [provider_api(b, u) for b, u in [("openai", None), ("openai", "https://API.OpenAI.com/v1"),
                                            ("anthropic", "https://api.anthropic.com"),
                                            ("openai", "http://127.0.0.1:8000/v1")]] == [True, True, True, False]


def test_a_reasoning_model_is_sent_no_temperature_stop_or_seed_and_its_answer_is_cut_at_the_stop(server, tmp_path,
                                                                                                   monkeypatch):
    """api.reasoning: o-series and gpt-5 refuse temperature 0, top_p and (some) stop strings: none is sent,
    nor the seed; the length field is max_completion_tokens; a stop is cut on arrival. From the config
    too; on an Anthropic model the key is a config error."""
    import dataclasses

    from memaudit.backends.config_checks import check_api_models
    from memaudit.backends.server import ChatReply

    server.responder.queue(ChatReply(text="Paris.\n\n\nAnd more.", input_tokens=1, output_tokens=4), prompt="q")
    b = make_openai(server, tmp_path / "c.sqlite", reasoning=True)
    params = dataclasses.replace(GREEDY, stop=("\n\n\n",), top_p=0.9, seed=3)
    (call,) = b.plan(["q"], params)
    assert call.body == {"model": "gpt-test-2025-01-01", "max_completion_tokens": 8,
                         "messages": [{"role": "user", "content": "q"}]}
    (g,) = b.generate(["q"], params)
    assert g.text == "Paris." and g.meta["cut_at_stop"] == "\n\n\n"
    assert (b.generate(["q"], dataclasses.replace(params, seed=4))[0].from_cache, server.count()) == (True, 1)
    price = {"input_per_mtok": 1, "output_per_mtok": 1}
    config = {"models": {"o": {"backend": "openai", "api": {"model_id": "o3-x", "reasoning": True, "pricing": price}},
                         "c": {"backend": "anthropic", "api": {"model_id": "claude-x", "reasoning": True,
                                                               "pricing": price}}},
              "probes": {}}
    assert [p for p in check_api_models(config) if "reasoning" in p] == [
        "models.c.api.reasoning: openai only (the Messages API takes a temperature)"]
    from memaudit.jobs import validate_config

    ci = yaml.safe_load((Path(__file__).parents[1] / "config/ci.yaml").read_text())
    ci["models"]["o"] = config["models"]["o"]
    full = validate_config(ci)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-o")
    built = api_backend_from_config(full, "o", cache=False)
    assert (built.reasoning, built.max_tokens_field, built.sends_seed) == (True, "max_completion_tokens", False)


def test_openai_is_sent_at_most_four_stop_strings_and_the_answer_is_cut_at_the_others(server, tmp_path):
    """OpenAI's Chat Completions (and Azure's, and the proxies before them) take at most 4 stop strings: a
    probe configured with more got HTTP 400 "Invalid 'stop': array too long" for every request. The first 4
    are sent; an answer is cut at the others on arrival, as a server cuts at the first stop string it holds."""
    import dataclasses

    from memaudit.backends.server import ChatReply

    stops = ("\n\n\n", "THE END", "Chapter", "***", "Epilogue")
    server.responder.queue(ChatReply(text="Once upon a time. Epilogue: more.", input_tokens=1, output_tokens=6),
                           prompt="tell")
    b = make_openai(server, tmp_path / "c.sqlite")
    params = dataclasses.replace(GREEDY, stop=stops)
    (call,) = b.plan(["tell"], params)
    assert call.body["stop"] == list(stops[:4])
    (g,) = b.generate(["tell"], params)
    assert (g.status, g.text, g.meta["cut_at_stop"]) == (STATUS_OK, "Once upon a time. ", "Epilogue")
    (sent,) = server.records
    assert sent.status == 200 and sent.request.stop == stops[:4]
    # four or fewer: all sent, nothing cut here
    assert b.plan(["tell"], dataclasses.replace(GREEDY, stop=stops[:4]))[0].body["stop"] == list(stops[:4])
    assert b.unsent_stops(dataclasses.replace(GREEDY, stop=stops[:4])) == ()


def test_a_server_without_a_system_role_gets_the_system_prompt_before_the_users(server, monkeypatch):
    """api.system_role false (vLLM serving Mistral-Instruct or Prometheus-7B answers 400 to a system
    message): one user message, the system prompt first and a blank line, through the real SDK."""
    from memaudit.backends.config_checks import check_api_models
    from memaudit.jobs import validate_config

    ci = yaml.safe_load((Path(__file__).parents[1] / "config/ci.yaml").read_text())
    ci["models"]["judge"] = {"backend": "openai", "api": {"model_id": "prometheus-7b-v2.0", "system_role": False,
                                                          "base_url": server.openai_base_url}}
    ci["models"]["chat"] = {"backend": "openai", "api": {"model_id": "gpt-like", "base_url": server.openai_base_url}}
    full = validate_config(ci)
    params = GenerationParams(max_new_tokens=5, system_prompt="You are a fair judge.")
    merged = api_backend_from_config(full, "judge", cache=False)
    (g,) = merged.generate(["Rate this story."], params)
    assert g.status == STATUS_OK
    assert server.records[-1].request.messages == [{"role": "user", "content": "You are a fair judge.\n\nRate this story."}]
    api_backend_from_config(full, "chat", cache=False).generate(["Rate this story."], params)  # the default: two
    assert server.records[-1].request.messages == [{"role": "system", "content": "You are a fair judge."},
                                                   {"role": "user", "content": "Rate this story."}]
    # a different request, so a different cache entry; without a system prompt the same body as before
    assert merged.plan(["q"], params)[0].key != make_openai(server, None, system_role=True).plan(["q"], params)[0].key
    assert merged.plan(["q"], GenerationParams())[0].body["messages"] == [{"role": "user", "content": "q"}]
    config = {"models": {"c": {"backend": "anthropic", "api": {"model_id": "claude-x", "system_role": False,
                                                               "pricing": {"input_per_mtok": 1, "output_per_mtok": 1}}}},
              "probes": {}}
    assert [p for p in check_api_models(config) if "system_role" in p] == [
        "models.c.api.system_role: openai only (the Messages API takes its system prompt apart from the messages)"]


def test_api_repetition_penalty_says_whether_a_compatible_server_is_sent_one(server):
    """The host alone decided whether a penalty was sent: every host but api.openai.com got one, so Azure's v1
    endpoint answered 400 and a gateway that drops it left outcomes recording 1.1 never applied.
    api.repetition_penalty: false sends none (CopyBench then decodes with 1.0, as on OpenAI's API); unset keeps
    the host's rule, and adds no key to the validated config (the params of existing jobs are unchanged)."""
    from memaudit.backends.base import model_takes_repetition_penalty
    from memaudit.backends.config_checks import check_api_models
    from memaudit.backends.settings import api_entry
    from memaudit.jobs import validate_config

    ci = yaml.safe_load((Path(__file__).parents[1] / "config/ci.yaml").read_text())
    for name, setting in (("unset", None), ("takes", True), ("azure", False)):
        api = {"model_id": f"m-{name}", "base_url": server.openai_base_url}
        ci["models"][name] = {"backend": "openai",
                              "api": api if setting is None else {**api, "repetition_penalty": setting}}
    full = validate_config(ci)
    assert "repetition_penalty" not in full["models"]["unset"]["api"]
    assert "repetition_penalty" not in api_entry(full, "unset")
    backends = {n: api_backend_from_config(full, n, cache=False) for n in ("unset", "takes", "azure")}
    assert {n: b.takes_repetition_penalty for n, b in backends.items()} == {"unset": True, "takes": True,
                                                                              "azure": False}
    assert {n: model_takes_repetition_penalty(full["models"][n]) for n in backends} == {
        "unset": True, "takes": True, "azure": False}  # the cost plan reads it so too

    penalised = GenerationParams(max_new_tokens=4, repetition_penalty=1.1)
    for n in ("unset", "takes"):
        backends[n].generate(["story"], penalised)
        assert server.records[-1].request.repetition_penalty == 1.1
    with pytest.raises(ConfigError, match=r"model 'azure': the endpoint takes no repetition_penalty \(use 1.0\)"):
        backends["azure"].generate(["story"], penalised)
    assert server.count() == 2  # refused before anything was sent
    (g,) = backends["azure"].generate(["story"], GenerationParams(max_new_tokens=4))
    assert g.status == STATUS_OK and server.records[-1].request.repetition_penalty == 1.0
    pricing = {"input_per_mtok": 1, "output_per_mtok": 1}
    config = {"models": {"c": {"backend": "anthropic", "api": {"model_id": "claude-x", "repetition_penalty": False,
                                                               "pricing": pricing}},
                         "o": {"backend": "openai", "api": {"model_id": "gpt-x", "repetition_penalty": True,
                                                            "pricing": pricing}},
                         "off": {"backend": "openai", "api": {"model_id": "gpt-y", "repetition_penalty": False,
                                                              "pricing": pricing}}},
              "probes": {}}
    assert [p for p in check_api_models(config) if "repetition_penalty" in p] == [
        "models.c.api.repetition_penalty: for an OpenAI-compatible server (base_url) only; the Messages API has "
        "none and refuses one",
        "models.o.api.repetition_penalty: for an OpenAI-compatible server (base_url) only; OpenAI's own API has "
        "none and refuses one"]


def test_api_thinking_false_turns_off_an_anthropic_models_default_thinking(server):
    """A Claude model that thinks by default spent the token limit on thinking blocks (no text: invalid) and
    refused temperature 0; api.thinking: false sends thinking {"type": "disabled"}, a request of its own (another
    cache entry). Unset, none is sent, so the keys of cached requests are unchanged. openai takes no such key."""
    from memaudit.backends.config_checks import check_api_models

    pricing = {"input_per_mtok": 3, "output_per_mtok": 15}
    config = {"models": {"claude": {"backend": "anthropic", "api": {
        "model_id": "claude-test-1", "base_url": server.anthropic_base_url, "api_key_env": KEY_ENV,
        "thinking": False, "pricing": pricing}},
        "gpt": {"backend": "openai", "api": {"model_id": "gpt-x", "thinking": False, "pricing": pricing}}},
        "probes": {}}
    off = api_backend_from_config(config, "claude", cache=False)
    (g,) = off.generate(["The sea"], GREEDY)
    assert g.status == STATUS_OK and server.records[-1].request.thinking == {"type": "disabled"}
    default = make_anthropic(server, None)
    default.generate(["The sea"], GREEDY)
    assert server.records[-1].request.thinking is None and server.count() == 2
    assert off.plan(["q"], GREEDY)[0].key != default.plan(["q"], GREEDY)[0].key
    assert [p for p in check_api_models(config) if "thinking" in p] == [
        "models.gpt.api.thinking: anthropic only (an OpenAI reasoning model is api.reasoning)"]


def test_system_into_user_puts_each_system_prompt_before_the_next_user_message():
    from memaudit.backends.base import system_into_user

    assert system_into_user([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == [
        {"role": "user", "content": "S\n\nU"}]
    assert system_into_user([{"role": "user", "content": "U1"}, {"role": "assistant", "content": "A"},
                             {"role": "system", "content": "S"}, {"role": "user", "content": "U2"}]) == [
        {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "S\n\nU2"}]
    assert system_into_user([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]
    assert system_into_user([{"role": "user", "content": "U"}]) == [{"role": "user", "content": "U"}]


# A Mistral-Instruct-v0.2 style template (Prometheus-7B-v2.0's is the same): no system role
NO_SYSTEM_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


def test_a_local_template_that_refuses_a_system_message_gets_it_before_the_users(tiny_backend, caplog):
    """The paper's fluency judge (Prometheus-7B) and CopyBench's system-mode reminder on Mistral-Instruct:
    asked again with the system prompt in the user turn, logged once; a template error of another kind
    (a conversation without a system message) still raises."""
    import logging

    from jinja2.exceptions import TemplateError

    tok = tiny_backend.tokenizer
    tok.chat_template = NO_SYSTEM_TEMPLATE
    params = GenerationParams(max_new_tokens=3, system_prompt="Be fair.", chat=True)
    with caplog.at_level(logging.INFO, logger="memaudit.backends.hf"):
        assert tiny_backend._render("Rate it.", params) == f"{tok.bos_token}[INST] Be fair.\n\nRate it. [/INST]"
        (g,) = tiny_backend.generate(["Rate it."], params)  # the generation path renders it so too
        tiny_backend._render("Again.", params)
    assert g.status == STATUS_OK
    assert sum("refuses a system message" in r.message for r in caplog.records) == 1
    with pytest.raises(TemplateError, match="roles must alternate"):
        tiny_backend.render_messages([{"role": "assistant", "content": "A"}])
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"  # one that takes it
    tiny_backend._system_merged = False
    assert tiny_backend._render("Rate it.", params) == "<system>Be fair.<user>Rate it."


def test_a_429_for_a_spent_quota_is_not_retried(server, tmp_path):
    """OpenAI's insufficient_quota 429 is permanent (a billing limit): one attempt and a failure naming it,
    where a rate limit's 429 is retried (above)."""
    server.responder.queue(Fault(429, "You exceeded your current quota, please check your plan and billing "
                                      "details.", code="insufficient_quota"), prompt="broke")
    b = make_openai(server, tmp_path / "c.sqlite", on_error="record")
    (g,) = b.generate(["broke"], GREEDY)
    assert g.status == STATUS_ERROR and g.meta["attempts"] == 1 and server.count() == 1
    assert "HTTP 429: You exceeded your current quota" in g.error and b.counts["retries"] == 0


FLAGGED = "Invalid prompt: your prompt was flagged as potentially violating our usage policy."
AZURE_FILTERED = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."


@pytest.mark.parametrize("fault", [
    Fault(400, FLAGGED, code="invalid_prompt", extra={"type": "invalid_request_error"}),  # OpenAI's reasoning models
    Fault(400, AZURE_FILTERED, code="content_filter", extra={  # Azure OpenAI's prompt filter
        "type": None, "param": "prompt", "status": 400, "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"protected_material_text": {"filtered": True, "detected": True}}}}),
], ids=["invalid_prompt", "content_filter"])
def test_a_prompt_the_provider_declines_with_http_400_is_a_cached_refusal(server, tmp_path, fault):
    """A provider that declines a flagged prompt with HTTP 400 (code invalid_prompt or content_filter) refused it,
    as finish_reason content_filter says: a refusal, cached at no cost, so a rerun asks nothing. It was an error,
    never cached, that stopped the job on every rerun. Another 400 (a prompt too long) is still an error."""
    db = tmp_path / "c.sqlite"
    server.responder.queue(fault, prompt="flagged")
    server.responder.queue(Fault(400, "This model's maximum context length is 8192 tokens.",
                                 code="context_length_exceeded", extra={"type": "invalid_request_error"}),
                           prompt="too long")
    out = make_openai(server, db, on_error="record").generate(["flagged", "fine", "too long"], GREEDY)
    assert [g.status for g in out] == [STATUS_REFUSAL, STATUS_OK, STATUS_ERROR]
    code = fault.code
    assert (out[0].text, out[0].error, out[0].meta["finish_reason"], out[0].input_tokens) == ("", None, code, 0)
    assert out[2].error == ("openai model 'gpt-test': HTTP 400: This model's maximum context length is 8192 tokens. "
                            "(not retried: the request itself was rejected)")
    assert server.count() == 3
    row = ledger_frame(db).set_index(["model", "rule"]).loc[("gpt-test", "rule_a")]
    # the refusal billed nothing: the cost is the answer's, 1 input and 2 output tokens ("Echo: fine")
    assert (row.n_sent, row.n_refusal, row.input_tokens, row.output_tokens) == (2, 1, 1, 2)
    assert row.cost_usd == pytest.approx((1 * 1.0 + 2 * 2.0) / 1e6)

    (again,) = make_openai(server, db).generate(["flagged"], GREEDY)  # on_error: raise, and nothing raised
    assert (again.status, again.from_cache, again.meta["finish_reason"]) == (STATUS_REFUSAL, True, code)
    assert server.count() == 3
    # an option question declined so has no letters, as a refusal has none
    server.responder.queue(fault, prompt="flagged")
    (scores,) = make_openai(server, db).option_scores(["flagged"], [OPTIONS])
    assert (scores.status, scores.missing, scores.error) == (STATUS_REFUSAL, tuple(OPTIONS), None)
    assert server.count() == 4


@pytest.mark.parametrize("code, retried", [("enforced_spend_limit_reached", False),
                                           ("contract_spend_limit_reached", False), ("ramp_limit_exceeded", True)])
def test_an_anthropic_spend_limit_is_not_retried_but_a_ramp_limit_is(server, code, retried):
    """Anthropic's 429 for a spend limit (error.details.error_code) is a spent budget, as OpenAI's
    insufficient_quota: one attempt and an error naming it, where every request retried 4 times and paused
    every thread. Its ramp_limit_exceeded is a rate limit: retried."""
    server.responder.queue(Fault(429, "Your organization has reached its spend limit.",
                                 extra={"details": {"error_code": code}}), prompt="spend")
    b = make_anthropic(server, None, on_error="record")
    (g,) = b.generate(["spend"], GREEDY)
    if retried:
        assert (g.status, g.meta["attempts"], server.count(), b.counts["retries"]) == (STATUS_OK, 2, 2, 1)
    else:
        assert (g.status, g.meta["attempts"], server.count(), b.counts["retries"]) == (STATUS_ERROR, 1, 1, 0)
        assert g.error == (f"anthropic model 'claude-test': HTTP 429: Your organization has reached its spend "
                           f"limit. (not retried: the organization's spend limit is reached: {code})")


MODEL_GONE = "The model `gpt-9` does not exist or you do not have access to it."


@pytest.mark.parametrize("fault, cause", [
    (Fault(404, MODEL_GONE, code="model_not_found", extra={"type": "invalid_request_error"}),
     f"HTTP 404: {MODEL_GONE} (not retried: the request itself was rejected)"),
    (unauthorized("sk-wrong"), "HTTP 401: Incorrect API key provided: sk-*** You can find your API key at "  # redacted
                               "https://example.invalid (not retried: the request itself was rejected)"),
    (Fault(403, "Country, region, or territory not supported"),
     "HTTP 403: Country, region, or territory not supported (not retried: the request itself was rejected)"),
    (Fault(429, "You exceeded your current quota.", code="insufficient_quota"),
     "HTTP 429: You exceeded your current quota. (not retried: the account's quota is spent)"),
], ids=["404", "401", "403", "quota"])
def test_a_fault_every_request_meets_stops_the_batch_after_the_first(server, caplog, fault, cause):
    """A 401, 403, 404 or spent quota is met by every request alike: after the first, the batch sends nothing
    more and its other requests fail naming the cause, in one warning, where all 50 were sent, each warned."""
    server.responder.queue(*[fault] * 50)
    label = "openai model 'gpt-test'"
    with caplog.at_level(logging.WARNING, logger="memaudit.backends.api"):
        out = make_openai(server, None, on_error="record", concurrency=1).generate(
            [f"p{i}" for i in range(50)], GREEDY)
    assert server.count() == 1 and {g.status for g in out} == {STATUS_ERROR}
    assert [g.error for g in out] == [f"{label}: {cause}"] + [
        f"{label}: not sent, since every request meets the same fault: {cause}"] * 49
    assert [r.getMessage() for r in caplog.records] == [
        f"{label}: {cause}", f"{label}: 49 of 50 requests not sent, since every request meets the same fault: {cause}"]


def test_a_batch_stopped_at_a_fault_every_request_meets_says_so(server):
    """With requests in flight, those sent meet the fault (at most ``concurrency``), the others are not sent;
    under on_error: raise the job's one line says how many were not sent."""
    server.responder.queue(*[Fault(404, MODEL_GONE, code="model_not_found")] * 20)
    with pytest.raises(APIRequestError) as err:
        make_openai(server, None, concurrency=4).generate([f"p{i}" for i in range(20)], GREEDY)
    sent = server.count()
    assert 1 <= sent <= 4
    assert str(err.value) == (f"openai model 'gpt-test': 20 of 20 requests failed, {20 - sent} of them not sent. "
                              f"First failure: openai model 'gpt-test': HTTP 404: {MODEL_GONE} "
                              f"(not retried: the request itself was rejected)")


def test_a_server_that_cannot_be_reached_stops_the_batch_after_three_requests(tmp_path):
    """Connection refused for every attempt of 3 requests, none answered: the server is down, and the other
    requests are not sent (each would have waited out its own retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    b = OpenAIBackend("gpt-test", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, cache=None,
                      retry_policy=FAST, concurrency=1, on_error="record")
    out = b.generate([f"p{i}" for i in range(10)], GREEDY)
    assert [g.meta["attempts"] for g in out] == [3, 3, 3] + [0] * 7
    assert out[3].error.startswith("openai model 'gpt-test': not sent, since every request meets the same fault: "
                                   "connection error (Connection error.) after 3 attempts (3 requests failed so, "
                                   "none was answered)")


@pytest.mark.parametrize("make", [make_openai, make_anthropic])
def test_the_servers_x_should_retry_decides_over_the_status(server, tmp_path, make):
    """As the SDKs' own retries decide: ``x-should-retry: false`` (a proxy that already retried, a
    provider that knows the request will fail again) is not retried whatever the status;
    ``x-should-retry: true`` is, whatever the status."""
    db = tmp_path / "c.sqlite"
    server.responder.queue(Fault(503, "Upstream retries exhausted", {"x-should-retry": "false"}), prompt="give up")
    with pytest.raises(APIRequestError) as err:
        make(server, db).generate(["give up"], GREEDY)
    assert server.count() == 1
    assert "HTTP 503: Upstream retries exhausted (not retried: the server said x-should-retry: false)" in str(err.value)

    server.responder.queue(Fault(400, "Try again", {"x-should-retry": "true"}), prompt="again")
    (g,) = make(server, db).generate(["again"], GREEDY)
    assert g.status == "ok" and g.meta["attempts"] == 2 and server.count() == 1 + 2


def test_anthropic_is_never_sent_a_whitespace_stop_and_its_answer_is_cut_there(server, tmp_path):
    """The Messages API refuses a stop sequence of whitespace alone (CopyBench's "\\n\\n\\n": every CopyBench
    request to Claude was a 400); the loopback server refuses it as the API does. Such a stop is cut
    client-side; the others are sent. A seed, which the Messages API does not take, is no part of the
    cache key: another seed is served from the cache."""
    import dataclasses

    from memaudit.backends.server import ChatReply

    story = "Once upon a time.\n\n\nThe End. And more."
    server.responder.queue(ChatReply(text=story, input_tokens=1, output_tokens=9), prompt="tell")
    b = make_anthropic(server, tmp_path / "c.sqlite")
    params = dataclasses.replace(GREEDY, stop=("\n\n\n", "THE END"), max_new_tokens=64)
    (g,) = b.generate(["tell"], params)
    assert g.status == STATUS_OK and g.text == "Once upon a time." and g.meta["cut_at_stop"] == "\n\n\n"
    (sent,) = server.records
    assert sent.status == 200 and sent.request.stop == ("THE END",)
    (again,) = b.generate(["tell"], dataclasses.replace(params, seed=7))
    assert again.from_cache and again.text == "Once upon a time." and server.count() == 1
    # the server answers a whitespace-only stop as the Messages API does
    raw = make_anthropic(server, None, on_error="record")
    raw.unsent_stops = lambda params: ()
    raw._body = lambda prompt, params, top: {"model": "claude-test-1", "max_tokens": 8, "stop_sequences": ["\n\n"],
                                             "messages": [{"role": "user", "content": prompt}]}
    (bad,) = raw.generate(["x"], GREEDY)
    assert bad.status == STATUS_ERROR and "each stop sequence must contain non-whitespace" in bad.error


def test_a_429_pauses_the_other_threads_too(tmp_path):
    with loopback(latency=0.05) as srv:
        srv.responder.queue(rate_limited(0.4))  # to whichever request comes first
        make_openai(srv, tmp_path / "c.sqlite", concurrency=2).generate([f"p{i}" for i in range(4)], GREEDY)
    (limited,) = [r for r in srv.records if r.status == 429]
    # requests sent before the client saw the 429 may land just after it: skip those up to 20 ms after
    # the server was done with it; the others waited 0.4 s from when the 429 began to leave the server
    later = [r.arrived for r in srv.records if r.arrived > limited.finished + 0.02]
    assert later and min(later) >= limited.responding + 0.4 - 0.02
    assert srv.count() == 5


def test_an_interrupted_batch_sends_no_retry_and_ends_without_waiting_out_the_backoff(server, tmp_path):
    """SIGTERM (stop_on_sigterm, as a job under SLURM) while requests wait for their retry: the
    job ends at once, and none of them is sent again (each retry was a paid call nobody reads)."""
    from memaudit.errors import JobInterrupted
    from memaudit.workflow_support import stop_on_sigterm

    server.responder.queue(server_error(500), rate_limited(20))  # one waits for its backoff, one for Retry-After
    slow = RetryPolicy(max_attempts=4, base_delay=20, max_delay=20)

    def terminate_once_both_failed():
        while sum(r.status in (500, 429) for r in list(server.records)) < 2:
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    stop_on_sigterm()
    try:
        threading.Thread(target=terminate_once_both_failed, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(JobInterrupted):
            make_openai(server, tmp_path / "c.sqlite", concurrency=2, retry_policy=slow).generate(
                ["p1", "p2", "p3", "p4"], GREEDY)
        ended = time.monotonic() - t0
    finally:
        signal.signal(signal.SIGTERM, previous)
    time.sleep(0.3)
    assert ended < 5  # not the 20 s of either wait
    assert server.count() == 2  # no retry, and p3, p4 never started


def test_5xx_is_retried_and_exhaustion_is_a_clear_error_after_caching_the_rest(server, tmp_path):
    db = tmp_path / "c.sqlite"
    server.responder.queue(server_error(500), server_error(503), prompt="flaky")
    (g,) = make_openai(server, db).generate(["flaky"], GREEDY)
    assert g.meta["attempts"] == 3 and server.count() == 3

    server.responder.queue(server_error(500), server_error(500), server_error(500), prompt="down")
    with pytest.raises(APIRequestError) as err:
        make_openai(server, db).generate(["ok 1", "down", "ok 2"], GREEDY)
    msg = str(err.value)
    assert "1 of 3 requests failed" in msg and "HTTP 500" in msg and "after 3 attempts" in msg
    assert server.count() == 3 + 2 + 3
    assert ResponseCache(db).count() == 3  # flaky, ok 1, ok 2

    out = make_openai(server, db).generate(["ok 1", "down", "ok 2"], GREEDY)  # the server has recovered
    assert server.count() == 3 + 2 + 3 + 1  # only the failed one is sent again
    assert [g.from_cache for g in out] == [True, False, True]


def test_timeout_is_retried(server, tmp_path):
    server.responder.queue(stall(1.0), prompt="slow")
    t0 = time.monotonic()
    (g,) = make_openai(server, tmp_path / "c.sqlite", timeout=0.3).generate(["slow"], GREEDY)
    assert g.status == STATUS_OK and g.text == "Echo: slow" and g.meta["attempts"] == 2
    assert server.count() == 2 and time.monotonic() - t0 >= 0.3


def test_malformed_json_is_retried_then_a_clear_error_or_recorded(server, tmp_path):
    server.responder.queue(malformed_json(), prompt="glitch")
    (g,) = make_openai(server, tmp_path / "a.sqlite").generate(["glitch"], GREEDY)
    assert g.status == STATUS_OK and g.meta["attempts"] == 2 and server.count() == 2

    server.responder.queue(malformed_json(), malformed_json(), malformed_json(), prompt="broken")
    with pytest.raises(APIRequestError, match=r"malformed response, not valid JSON .* after 3 attempts"):
        make_openai(server, tmp_path / "b.sqlite").generate(["broken"], GREEDY)

    server.responder.queue(malformed_json(), malformed_json(), malformed_json(), prompt="broken")
    (g,) = make_openai(server, tmp_path / "b.sqlite", on_error="record").generate(["broken"], GREEDY)
    assert g.status == STATUS_ERROR and g.text == ""
    assert g.error.startswith("openai model 'gpt-test': malformed response, not valid JSON") and \
        g.error.count("openai model") == 1 and g.error.endswith("after 3 attempts")


def test_content_as_a_list_of_parts_is_read_as_its_text_parts(server, tmp_path):
    """Some OpenAI-compatible servers send message.content as a list of parts: it reached the refusal check
    outside the parser's error handling, and its TypeError stopped the batch with a traceback. The text of
    its text parts is the answer (a refusal part is the provider's refusal); a part that is no object is a
    response not in the format, recorded invalid. Through the real openai SDK."""
    def completion(content):
        return Fault(raw=json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "gpt-test-2025-01-01",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 3}}).encode())

    server.responder.queue(completion([{"type": "text", "text": "Emma "}, {"type": "image_url", "image_url": {}},
                                       {"type": "text", "text": "Woodhouse"}]), prompt="parts")
    server.responder.queue(completion([{"type": "text", "text": refusal_text()}]), prompt="sorry")
    server.responder.queue(completion([{"type": "refusal", "refusal": "I cannot help with that."}]), prompt="flag")
    for _ in range(3):  # every attempt: a response not in the format is retried (as malformed JSON is)
        server.responder.queue(completion(["Emma"]), prompt="bare")
        server.responder.queue(completion(5), prompt="number")
    gens = make_openai(server, tmp_path / "c.sqlite", on_error="record").generate(
        ["parts", "sorry", "flag", "bare", "number"], GREEDY)
    assert [(g.status, g.text) for g in gens] == [(STATUS_OK, "Emma Woodhouse"), (STATUS_REFUSAL, refusal_text()),
                                                  (STATUS_REFUSAL, "I cannot help with that."), (STATUS_ERROR, ""),
                                                  (STATUS_ERROR, "")]
    assert [g.error for g in gens[3:]] == [
        "openai model 'gpt-test': response not in the openai format (AttributeError: 'str' object has no attribute "
        "'get') after 3 attempts",
        "openai model 'gpt-test': response not in the openai format (TypeError: message.content is int, not a "
        "string) after 3 attempts"]


def test_an_error_object_with_status_200_is_retried_and_an_error_once_retries_are_spent(server, tmp_path):
    """A proxy's error object sent with status 200 was an invalid answer, neither retried nor an error: the
    prefix and CopyBench probes scored it as an empty text (0) in outputs that looked finished, under the
    default on_error: raise too. It is a fault like malformed JSON: retried, an error once the retries are
    spent (the job stops under raise), never cached."""
    db = tmp_path / "c.sqlite"
    server.responder.queue(error_object_200("The model is overloaded"), prompt="odd")
    (g,) = make_openai(server, db).generate(["odd"], GREEDY)
    assert g.status == STATUS_OK and server.count() == 2 and ResponseCache(db).count() == 1  # the retry's answer
    for _ in range(3):
        server.responder.queue(error_object_200("The model is overloaded"), prompt="odder")
    with pytest.raises(APIRequestError, match=r"1 of 1 requests failed.*The model is overloaded.*after 3 attempts"):
        make_openai(server, db).generate(["odder"], GREEDY)
    assert ResponseCache(db).count() == 1 and server.count() == 5
    for _ in range(3):
        server.responder.queue(error_object_200("The model is overloaded"), prompt="odder")
    (g,) = make_openai(server, db, on_error="record").generate(["odder"], GREEDY)
    assert g.status == STATUS_ERROR and "The model is overloaded" in g.error and g.text == ""


def test_an_unreadable_response_is_still_in_the_ledger_at_the_tokens_its_usage_block_bills(server, tmp_path):
    """A 200 the parser cannot read (no choices, an empty content list) but whose usage block counts tokens
    was billed: its row is in the ledger, priced, status invalid, where it had none and the total understated
    the bill; one without a readable usage block adds no row (nothing to count). Each attempt is billed: such a
    response is retried (an error once the retries are spent)."""
    db = tmp_path / "c.sqlite"
    for _ in range(3):
        server.responder.queue(Fault(raw=json.dumps({"id": "x", "object": "chat.completion", "choices": [],
                                                       "usage": {"prompt_tokens": 7, "completion_tokens": 3}}).encode()),
                               prompt="none")
        server.responder.queue(Fault(raw=json.dumps({"choices": [], "usage": {"prompt_tokens": "many"}}).encode()),
                               prompt="odd")
    gens = make_openai(server, db, on_error="record").generate(["none", "odd"], GREEDY)
    assert [g.status for g in gens] == [STATUS_ERROR, STATUS_ERROR]
    rows = ResponseCache(db).usage_rows()
    assert [(r["status"], r["input_tokens"], r["output_tokens"], r["from_cache"]) for r in rows] == [
        (STATUS_INVALID, 7, 3, 0)] * 3
    assert [r["cost_usd"] for r in rows] == pytest.approx([(7 * 1.0 + 3 * 2.0) / 1e6] * 3)
    assert ResponseCache(db).count() == 0  # not cached: a rerun asks again
    for _ in range(3):
        server.responder.queue(Fault(raw=json.dumps({"type": "message", "content": None,
                                                     "usage": {"input_tokens": 5, "output_tokens": 2}}).encode()),
                               prompt="blank")
    (g,) = make_anthropic(server, db, on_error="record").generate(["blank"], GREEDY)
    assert g.status == STATUS_ERROR
    assert [(r["backend"], r["input_tokens"], r["output_tokens"]) for r in ResponseCache(db).usage_rows()][3:] == [
        ("anthropic", 5, 2)] * 3


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_an_unreadable_response_is_billed_as_a_readable_one_with_its_prompt_cache_tokens(server, tmp_path, backend):
    """An unreadable response's row counted only input_tokens and output_tokens (OpenAI: prompt_tokens at
    the full input price): Anthropic's cache reads and writes, which a caching proxy reports beside
    input_tokens, were left out of its tokens and its price. It is now counted and priced as the same
    usage block in a readable response: reads at the cached price, 5-minute writes at 1.25 and 1-hour
    writes at 2 times the input price. Through the SDK and the loopback server."""
    if backend == "anthropic":
        usage = {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 1000,
                 "cache_creation_input_tokens": 400,
                 "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 100}}
        readable = {"id": "m", "type": "message", "role": "assistant", "model": "claude-test-1",
                    "content": [{"type": "text", "text": "Emma."}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": usage}
        unreadable = {"type": "message", "content": None, "usage": usage}
        make, expected = make_anthropic, (1500, 5, 1000, 400, (100 * 2.0 + 1000 * 0.2 + 300 * 2.5 + 100 * 4.0
                                                               + 5 * 8.0) / 1e6)
    else:
        usage = {"prompt_tokens": 1500, "completion_tokens": 5, "total_tokens": 1505,
                 "prompt_tokens_details": {"cached_tokens": 1000}}
        readable = {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-test-2025-01-01",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "Emma."}}], "usage": usage}
        unreadable = {"id": "c", "object": "chat.completion", "choices": [], "usage": usage}
        make, expected = make_openai, (1500, 5, 1000, 0, (500 * 2.0 + 1000 * 0.2 + 5 * 8.0) / 1e6)
    db = tmp_path / "c.sqlite"
    server.responder.queue(Fault(raw=json.dumps(readable).encode()), prompt="readable")
    for _ in range(3):  # retried: each attempt billed
        server.responder.queue(Fault(raw=json.dumps(unreadable).encode()), prompt="unreadable")
    gens = make(server, db, pricing=Pricing(2.0, 8.0, cached_input_per_mtok=0.2), on_error="record").generate(
        ["readable", "unreadable"], GREEDY)
    assert [g.status for g in gens] == [STATUS_OK, STATUS_ERROR]
    rows = sorted(ResponseCache(db).usage_rows(), key=lambda r: r["status"])
    assert [(r["status"], r["input_tokens"], r["output_tokens"], r["provider_cached_tokens"],
             r["provider_cache_write_tokens"]) for r in rows] == [
        (STATUS_INVALID, *expected[:4])] * 3 + [(STATUS_OK, *expected[:4])]
    assert [r["cost_usd"] for r in rows] == pytest.approx([expected[4]] * 4)


def test_a_rejected_request_is_not_retried(server, tmp_path):
    server.responder.queue(bad_request("Invalid value for 'temperature'"), prompt="bad")
    with pytest.raises(APIRequestError, match=r"HTTP 400: Invalid value for 'temperature' \(not retried"):
        make_openai(server, tmp_path / "c.sqlite").generate(["bad"], GREEDY)
    assert server.count() == 1


def test_what_the_server_said_is_one_short_line_of_the_final_error(server, tmp_path):
    import anthropic
    import httpx

    from memaudit.backends.api import _error_detail

    server.responder.queue(bad_request("Invalid value for 'temperature':\n  expected a number\n"), prompt="bad")
    with pytest.raises(APIRequestError) as err:
        make_openai(server, tmp_path / "c.sqlite").generate(["bad"], GREEDY)
    assert str(err.value) == ("openai model 'gpt-test': 1 of 1 requests failed (the answered ones are cached: a rerun "
                              "sends only what failed). First failure: openai model 'gpt-test': HTTP 400: Invalid "
                              "value for 'temperature': expected a number (not retried: the request itself was "
                              "rejected)")

    def status_error(body):
        response = httpx.Response(502, request=httpx.Request("POST", "http://127.0.0.1/v1/messages"))
        return anthropic.APIStatusError(body if isinstance(body, str) else "Error code: 502", response=response,
                                        body=body)

    # a proxy's error page, which the anthropic SDK quotes whole
    page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center>nginx</center>\r\n</body></html>"
    assert _error_detail(status_error(page)) == "502 Bad Gateway nginx"
    assert _error_detail(status_error({"detail": "Not Found"})) == "Not Found"
    # a token the cut would leave too short to be told is one is masked first
    assert _error_detail(status_error("x" * 285 + " hf_" + "A1b2C3d4E5" * 3)) == "x" * 285 + " ***"
    assert _error_detail(status_error("y" * 400)) == "y" * 299 + "…"


# ----------------------------------------------------------------------------- refusals and rates

def test_refusals_are_detected_from_text_and_provider_signal(server, tmp_path):
    server.responder.queue(refusal_text(), prompt="quote chapter 1")
    server.responder.queue(provider_refusal(), prompt="quote chapter 2")
    out = make_openai(server, tmp_path / "c.sqlite").generate(["quote chapter 1", "quote chapter 2", "summarise"],
                                                             GREEDY)
    assert [g.status for g in out] == [STATUS_REFUSAL, STATUS_REFUSAL, STATUS_OK]
    rates = outcome_rates(g.status for g in out)
    assert (rates["n"], rates["n_refusal"], rates["refusal_rate"], rates["invalid_rate"]) == (3, 2, 2 / 3, 0.0)
    ledger = ledger_frame(tmp_path / "c.sqlite")
    assert ledger.loc[0, "n_refusal"] == 2


@pytest.mark.parametrize("text, expected", [
    ("I can't provide verbatim copyrighted text.", True),
    ("I’m sorry, but I can’t help with reproducing that passage.", True),
    ("Sorry, I cannot share the full text of that book.", True),
    ("I won't reproduce the lyrics word for word, but here is a summary.", True),
    ("Due to copyright restrictions, I cannot quote this.", True),
    ("I apologize, but I cannot determine which passage is verbatim.", True),
    ("I apologize for the confusion: the answer is B.", False),
    ("It is a truth universally acknowledged, that a single man in possession", False),
    ("He said he can't provide for his family any more.", False),
    ("I cannot help but think of her smile.", False),
    ("The answer is B.", False),
])
def test_refusal_patterns(text, expected):
    assert is_refusal(text) is expected


def test_answer_parsing_and_invalid_answers():
    assert [parse_choice(t) for t in ["B", "(C)", "**D**.", "Answer: A", "The answer is C.", "option B"]] == \
        ["B", "C", "D", "A", "C", "B"]
    assert [parse_choice(t) for t in ["A passage about whales", "A or B", "", "The answer is B, not option C"]] == \
        [None] * 4
    assert classify_answer("I can't provide that.") == (STATUS_REFUSAL, None)
    assert classify_answer("Perhaps the second one") == (STATUS_INVALID, None)
    assert classify_answer("D") == (STATUS_OK, "D")
    assert math.isnan(outcome_rates([])["refusal_rate"])


# ----------------------------------------------------------------------------- Anthropic

def test_anthropic_messages_success_overload_retry_refusal_and_cache(server, tmp_path):
    db = tmp_path / "c.sqlite"
    server.responder.queue(overloaded(), prompt="hello claude")
    server.responder.queue(rate_limited(retry_after_ms=250), prompt="busy")
    server.responder.queue(provider_refusal("I can't do that."), prompt="quote it")
    params = GenerationParams(max_new_tokens=6, system_prompt="You are terse.", stop=("END",))
    out = make_anthropic(server, db).generate(["hello claude", "busy", "quote it"], params)
    assert [g.status for g in out] == [STATUS_OK, STATUS_OK, STATUS_REFUSAL]
    assert out[0].text == "Echo: hello claude" and out[0].meta["finish_reason"] == "end_turn"
    assert (out[0].input_tokens, out[0].output_tokens, out[0].meta["attempts"]) == (5, 3, 2)
    busy = [r for r in server.records if r.prompt == "busy"]
    assert [r.status for r in busy] == [429, 200] and busy[1].arrived - busy[0].responding >= 0.25 - 0.01
    sent = server.records[-1].request
    assert (sent.api, sent.messages[0], sent.stop, sent.temperature) == (
        "anthropic", {"role": "system", "content": "You are terse."}, ("END",), 0.0)
    n = server.count()
    again = make_anthropic(server, db).generate(["hello claude", "busy", "quote it"], params)
    assert server.count() == n and all(g.from_cache for g in again)
    assert [g.status for g in again] == [STATUS_OK, STATUS_OK, STATUS_REFUSAL]


def test_anthropic_is_sent_top_p_without_its_default_temperature(server, tmp_path):
    """Claude's current models (Sonnet and Haiku 4.5, Opus 4.1, Sonnet 4.6) answer 400 "`temperature` and
    `top_p` cannot both be specified for this model" to a request naming both: the fluency judge's sampled
    decoding (temperature 1.0, top-p 0.9, as Prometheus's library samples) failed every request. At the Messages
    API's default temperature, 1.0, top_p goes alone, and at temperature 0 (greedy) top_p is not sent; a
    temperature and a top_p both set otherwise are both sent (the request cannot be put another way)."""
    b = make_anthropic(server, tmp_path / "c.sqlite")
    bodies = [b.plan(["rate"], GenerationParams(max_new_tokens=4, temperature=t, top_p=p))[0].body
              for t, p in ((1.0, 0.9), (0.0, 0.9), (0.7, 0.9), (0.7, 1.0))]
    assert [{k: body[k] for k in ("temperature", "top_p") if k in body} for body in bodies] == [
        {"top_p": 0.9}, {"temperature": 0.0}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 0.7}]
    (g,) = b.generate(["rate"], GenerationParams(max_new_tokens=4, temperature=1.0, top_p=0.9))
    (sent,) = server.records
    assert g.status == STATUS_OK and (sent.request.temperature, sent.request.top_p) == (1.0, 0.9)


def test_anthropic_has_no_logprobs_and_no_repetition_penalty(server):
    b = make_anthropic(server, None)
    with pytest.raises(ConfigError, match="no log-probabilities"):
        b.generate(["x"], GREEDY, top_logprobs=5)
    with pytest.raises(ConfigError, match="no repetition_penalty"):
        b.generate(["x"], GenerationParams(repetition_penalty=1.2))
    with pytest.raises(ConfigError, match="cannot serve option_logprobs"):
        b.option_logprobs(["x"], [OPTIONS])
    assert server.count() == 0


# ----------------------------------------------------------------------------- kill and resume

KILLED_RUN = """
import sys
from memaudit.backends.base import GenerationParams
from memaudit.backends.openai_backend import OpenAIBackend
b = OpenAIBackend("gpt-test", base_url=sys.argv[1], api_key_env=sys.argv[3], cache=sys.argv[2], concurrency=2)
b.generate([f"prompt {i}" for i in range(12)], GenerationParams(max_new_tokens=4))
"""


def stored_rows(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        except sqlite3.OperationalError:  # the table is not created yet
            return 0


def test_a_killed_run_resumes_without_repeating_paid_calls(tmp_path):
    db = tmp_path / "c.sqlite"
    prompts = [f"prompt {i}" for i in range(12)]
    with loopback(latency=0.15) as srv:
        proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, srv.openai_base_url, str(db), KEY_ENV],
                                env={**os.environ}, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while stored_rows(db) < 4:  # kill once four answers are committed, mid-run
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        stored = ResponseCache(db).count()
        assert 4 <= stored < 12
        # Requests the killed process had already written to its sockets may reach the server's
        # handler threads only now (seen under load in make test): wait until the count settles.
        before, settled = srv.count(), time.monotonic()
        while time.monotonic() - settled < 1.0:
            time.sleep(0.05)
            if srv.count() != before:
                before, settled = srv.count(), time.monotonic()
        out = OpenAIBackend("gpt-test", base_url=srv.openai_base_url, api_key_env=KEY_ENV, cache=db,
                            concurrency=4).generate(prompts, GenerationParams(max_new_tokens=4))
        assert srv.count() - before == 12 - stored  # nothing answered before the kill is paid again
    assert sum(g.from_cache for g in out) == stored
    assert [g.text for g in out] == [f"Echo: {p}" for p in prompts]


# ----------------------------------------------------------------------------- keys

def test_the_key_is_sent_but_never_written_to_cache_ledger_logs_or_errors(server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "anthropic", "httpx", "httpx2", "memaudit"):
        caplog.set_level(logging.DEBUG, logger=name)
    db = tmp_path / "cache.sqlite"
    b = make_openai(server, db)
    b.generate(["some prompt"], GREEDY)
    assert server.records[0].authorization == f"Bearer {KEY}"  # it was used

    server.responder.queue(unauthorized(KEY), prompt="who am I")
    with pytest.raises(APIRequestError) as err:
        b.generate(["who am I"], GREEDY)
    assert KEY not in str(err.value) and "Incorrect API key provided: ***" in str(err.value)
    logging.getLogger("some.library").warning("connecting with key %s", KEY)  # any logger, any handler

    from memaudit.cli import main

    assert main(["api-ledger", "--cache", str(db), "--out", str(tmp_path / "ledger.csv")]) == 0
    b.close()
    secret = KEY.encode()
    for path in tmp_path.iterdir():
        assert secret not in path.read_bytes(), path.name
    assert KEY not in caplog.text and "connecting with key ***" in caplog.text
    assert KEY not in repr(b) and KEY not in json.dumps(b.describe())
    assert redact(f"https://user:{KEY}@host/v1") == "https://***@host/v1"


def test_the_ledger_and_the_estimate_never_write_over_what_they_read(tmp_path, capsys):
    """``api-ledger --out`` naming the cache wrote a CSV over every paid response, and ``estimate-cost --json``
    naming the plan its estimate over the plan: each is a one-line error, the file left as it was."""
    from memaudit.backends.cache import ResponseCache
    from memaudit.cli import main

    db = tmp_path / "cache.sqlite"
    ResponseCache(db).close()
    before = db.read_bytes()
    assert main(["api-ledger", "--cache", str(db), "--out", str(db)]) == 2
    assert capsys.readouterr().err == (f"memaudit api-ledger: error: {db}: --out names the file --cache reads, which "
                                       f"writing would destroy; write elsewhere\n")
    assert db.read_bytes() == before
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"model": "gpt", "prompt": "hi"}\n')
    config = Path(__file__).parents[1] / "config" / "ci.yaml"
    assert main(["estimate-cost", "--config", str(config), "--plan", str(plan), "--json", str(plan)]) == 2
    assert capsys.readouterr().err == (f"memaudit estimate-cost: error: {plan}: --json names the file --plan reads, "
                                       f"which writing would destroy; write elsewhere\n")
    assert plan.read_text() == '{"model": "gpt", "prompt": "hi"}\n'


def test_the_ledger_and_the_estimate_written_to_a_bad_path_are_one_line_errors(tmp_path, capsys, monkeypatch):
    """``--out`` naming a folder, ``--json`` under a file or in a folder that cannot be made gave an
    IsADirectoryError / FileExistsError / FileNotFoundError traceback: each is one line naming the path, exit 2,
    and a cache with no request yet prints that in words, not pandas' "Empty DataFrame"."""
    from memaudit.backends.cache import ResponseCache
    from memaudit.cli import main

    monkeypatch.chdir(tmp_path)
    ResponseCache(Path("fresh.sqlite")).close()
    Path("folder").mkdir()
    Path("ok.csv").write_text("kept\n")
    assert main(["api-ledger", "--cache", "fresh.sqlite"]) == 0
    assert capsys.readouterr() == ("no API requests recorded in fresh.sqlite\n", "")
    assert main(["api-ledger", "--cache", "fresh.sqlite", "--out", "folder"]) == 2
    assert capsys.readouterr() == ("no API requests recorded in fresh.sqlite\n",
                                   "memaudit api-ledger: error: cannot write folder: is a directory; "
                                   "name a file, not a directory\n")
    assert main(["api-ledger", "--cache", "fresh.sqlite", "--out", "/proc/nope/x.csv"]) == 2
    assert capsys.readouterr().err == ("memaudit api-ledger: error: cannot write /proc/nope/x.csv: no such file or "
                                       "directory (at /proc/nope); name a path in a folder that exists or that this "
                                       "user can create\n")
    plan = Path("plan.jsonl")
    plan.write_text('{"model": "smollm2-135m", "prompt": "hi"}\n')  # a local model's: costs nothing
    config = Path(__file__).parents[1] / "config" / "ci.yaml"
    assert main(["estimate-cost", "--config", str(config), "--plan", str(plan), "--json", "folder"]) == 2
    assert capsys.readouterr().err == ("memaudit estimate-cost: error: cannot write folder: is a directory; "
                                       "name a file, not a directory\n")
    assert main(["estimate-cost", "--config", str(config), "--plan", str(plan), "--json", "ok.csv/x.json"]) == 2
    assert capsys.readouterr().err == ("memaudit estimate-cost: error: cannot write ok.csv/x.json: not a directory "
                                       "(at ok.csv); a file stands where the path has a folder: name another path\n")
    assert sorted(p.name for p in Path().iterdir()) == ["folder", "fresh.sqlite", "ok.csv", "plan.jsonl"]
    assert list(Path("folder").iterdir()) == [] and Path("ok.csv").read_text() == "kept\n"
    assert main(["api-ledger", "--cache", "fresh.sqlite", "--out", "ledger.csv"]) == 0  # still written: a header
    assert Path("ledger.csv").read_text().startswith("model,rule,")


def test_tokens_of_other_providers_quoted_by_a_server_or_a_library_are_masked_too(server, tmp_path, caplog):
    # A gateway in front of an OpenAI-compatible server may echo the Hugging Face token or the
    # bearer header it was given; neither was registered, so only their shape can hide them.
    hf_token = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7"
    github = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
    b = make_openai(server, tmp_path / "cache.sqlite")
    server.responder.queue(unauthorized(f"{hf_token} (header Authorization: Bearer {github})"), prompt="who")
    with pytest.raises(APIRequestError) as err:
        b.generate(["who"], GREEDY)
    message = str(err.value)
    assert hf_token not in message and github not in message and "Incorrect API key provided: *** (header" in message
    caplog.set_level(logging.INFO)
    logging.getLogger("some.library").info("retrying with %s", hf_token)
    assert hf_token not in caplog.text and "retrying with ***" in caplog.text
    assert redact("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJl, sk-proj-abc***wxyz") == "jwt ***, sk-***"
    b.close()


def test_a_missing_key_variable_is_named_and_only_needed_to_send(server, monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=f"environment variable {KEY_ENV} is not set"):
        make_openai(server, None)
    planner = make_openai(server, tmp_path / "c.sqlite", require_key=False)
    assert estimate_cost(planner, ["p"], GREEDY).rows[0]["api_key_present"] is False
    with pytest.raises(ConfigError, match=KEY_ENV):
        planner.generate(["p"], GREEDY)
    assert server.count() == 0
    # a blank variable is an unset one, and a key no header could carry is no more needed to price: the
    # estimate refused both ("is not set", "holds a space") though it priced with the variable unset
    for value, warning in ((" \n", f"warning: gpt-test: environment variable {KEY_ENV} is not set"),
                           (f"{KEY} {KEY}", f"warning: openai model 'gpt-test': environment variable {KEY_ENV} holds "
                                            f"a space, line break or non-ASCII character inside the key (two keys "
                                            f"pasted, a typographic quote?); the value is not shown")):
        monkeypatch.setenv(KEY_ENV, value)
        planner = make_openai(server, tmp_path / "c.sqlite", require_key=False)
        estimate = estimate_cost(planner, ["p"], GREEDY)
        assert estimate.rows[0]["api_key_present"] is False and estimate.format().splitlines()[-1] == warning
        with pytest.raises(ConfigError, match=KEY_ENV):
            planner.generate(["p"], GREEDY)
    assert server.count() == 0


@pytest.mark.parametrize("value", [KEY + "\n" + KEY[::-1], KEY + "\u2019", KEY[:20] + " " + KEY[20:]])
def test_a_key_no_http_header_can_carry_is_refused_before_anything_is_sent(server, monkeypatch, tmp_path, value):
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(ConfigError) as err:
        make_openai(server, tmp_path / "c.sqlite")
    assert str(err.value) == (f"openai model 'gpt-test': environment variable {KEY_ENV} holds a space, line break "
                              f"or non-ASCII character inside the key (two keys pasted, a typographic quote?); the "
                              f"value is not shown")
    assert server.count() == 0


# ----------------------------------------------------------------------------- cost estimate

def test_estimate_counts_cached_requests_as_free_and_bounds_the_rest(server, tmp_path):
    db = tmp_path / "c.sqlite"
    b = make_openai(server, db, pricing=Pricing(2.0, 8.0))
    params = GenerationParams(max_new_tokens=10, system_prompt="Be brief.")
    prompts = ["Who wrote Emma?", "Name the whale.", "Quote the first line.", "x" * 41]
    b.generate(prompts[:1], params)
    est = estimate_cost(b, prompts, params)
    (row,) = est.rows
    # ceil(chars / 4) per text, 3 tokens per message (system + user), 3 to prime the reply
    expected_in = sum(math.ceil(len(p) / 4) + math.ceil(len("Be brief.") / 4) + 2 * 3 + 3 for p in prompts[1:])
    assert (row["n_requests"], row["n_cached"], row["n_to_send"]) == (4, 1, 3)
    assert (row["input_tokens_est"], row["output_tokens_max"]) == (expected_in, 30)
    assert est.total_cost_usd == pytest.approx((expected_in * 2.0 + 30 * 8.0) / 1e6)
    sampled = estimate_cost(b, prompts, GenerationParams(max_new_tokens=10, temperature=0.7), n_samples=3)
    assert sampled.rows[0]["n_requests"] == 12
    assert server.count() == 1
    assert "to send" in est.format() and "at most" in est.format()


def test_estimate_plan_from_config_without_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    config = {"models": {"gpt": {"backend": "openai",
                                 "api": {"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": KEY_ENV}},
                         "local": {"backend": "hf", "source": {"builtin": "smollm2-135m-instruct"}}},
              "api": {"cache": str(tmp_path / "c.sqlite"),
                      "pricing": {"gpt-4o-mini-2024-07-18": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}}
    plan = [{"model": "gpt", "prompt": "abcd" * 10, "max_new_tokens": 5, "kind": "generate"},
            {"model": "gpt", "prompt": "Which passage is verbatim?", "kind": "option_logprobs"},
            {"model": "local", "prompt": "free"}]
    est = estimate_plan(config, plan)
    (row,) = est.rows
    assert (row["n_requests"], row["output_tokens_max"]) == (2, 5 + 1)
    assert row["input_tokens_est"] == (10 + 6) + (7 + 6)
    assert est.total_cost_usd == pytest.approx((29 * 0.15 + 6 * 0.6) / 1e6)
    assert f"environment variable {KEY_ENV} is not set" in est.format()
    assert not (tmp_path / "c.sqlite").exists()  # an estimate writes nothing


@pytest.mark.parametrize("existing", ["another database", "empty file"])
def test_an_estimate_reads_the_cache_and_never_makes_a_file_into_one(tmp_path, monkeypatch, capsys, existing):
    """The estimate opened api.cache for writing: the schema set-up turned another SQLite database (or an empty
    file) named there into a cache. It opens an existing cache only; anything else is a one-line error naming
    the file and the key, and the file is left as it was."""
    from memaudit.cli import main

    monkeypatch.delenv(KEY_ENV)
    db = tmp_path / "c.sqlite"
    if existing == "empty file":
        db.touch()
    else:
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('mine')")
        conn.close()
    before = db.read_bytes()
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "benchmarks": {"b": {"sources": ["austen"]}},
        "models": {"gpt": {"backend": "openai", "family": "gpt",
                           "api": {"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": KEY_ENV,
                                   "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}},
        "api": {"cache": str(db)}}))
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"model": "gpt", "prompt": "hi"}\n')
    assert main(["estimate-cost", "--config", str(config), "--plan", str(plan)]) == 2
    assert capsys.readouterr().err == (
        f"memaudit estimate-cost: error: {db}: not an API response cache (it has no memaudit usage table); name "
        f"the cache a run wrote (api.cache, by default results/api/cache.sqlite)\n")
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.sqlite", "c.yaml", "plan.jsonl"]


def test_a_paid_providers_base_url_without_a_price_is_no_price_not_free(monkeypatch):
    """An OpenAI-compatible server of one's own (loopback, localhost, a private address) with no price costs
    nothing; a provider elsewhere has no price, so the estimate's total is unknown, where it counted the
    provider's requests at $0 and the total understated the bill."""
    from memaudit.backends.settings import pricing_for

    monkeypatch.delenv(KEY_ENV)
    urls = ["http://127.0.0.1:8000/v1", "http://localhost:8000/v1", "http://[::1]:9000/v1", "http://10.1.2.3/v1",
            "http://192.168.0.7:8000/v1", "https://api.together.xyz/v1", "https://openrouter.ai/api/v1",
            "http://8.8.8.8/v1"]
    config = {"models": {f"m{i}": {"backend": "openai", "api": {"model_id": "llama", "base_url": url,
                                                                 "api_key_env": KEY_ENV}}
                         for i, url in enumerate(urls)},
              "api": {"cache": "c.sqlite"}}
    assert [pricing_for(config, f"m{i}") for i in range(len(urls))] == [Pricing(0.0, 0.0)] * 5 + [None] * 3
    config["models"]["m5"]["api"]["pricing"] = {"input_per_mtok": 0.2, "output_per_mtok": 0.2}
    assert pricing_for(config, "m5") == Pricing(0.2, 0.2)
    est = estimate_plan(config, [{"model": "m0", "prompt": "hi", "max_new_tokens": 4},
                                 {"model": "m6", "prompt": "hi", "max_new_tokens": 4}])
    assert est.total_cost_usd is None
    assert "total: at most unknown (a model has no price)" in est.format()


@pytest.mark.parametrize("line, message", [
    ('{"model": "gpt", "prompt": "hi", "max_new_tokens": "lots"}', "max_new_tokens must be an integer >= 1"),
    ('{"model": "gpt", "prompt": "hi", "samples": 0}', "samples must be an integer >= 1"),
    ('{"model": "gpt", "prompt": 5}', "prompt must be a string"),
    ('{"model": ["gpt"], "prompt": "hi"}', "model must be a string"),
    ('{"model": "gpt", "prompt": "hi", "stop": "END"}', "stop must be a list of strings"),
    ('{"model": "gpt", "prompt": "hi", "temperature": "hot"}', "temperature must be a finite number >= 0"),
    # JSON's NaN and Infinity, which Python reads: a traceback from the cache key; out of range: priced as if sent
    ('{"model": "gpt", "prompt": "hi", "temperature": NaN}', "temperature must be a finite number >= 0"),
    ('{"model": "gpt", "prompt": "hi", "temperature": Infinity}', "temperature must be a finite number >= 0"),
    ('{"model": "gpt", "prompt": "hi", "temperature": -1}', "temperature must be a finite number >= 0"),
    ('{"model": "gpt", "prompt": "hi", "top_p": 7}', "top_p must be a finite number above 0 and at most 1"),
    ('{"model": "gpt", "prompt": "hi", "top_p": 0}', "top_p must be a finite number above 0 and at most 1"),
    ('{"model": "gpt", "prompt": "hi", "repetition_penalty": -Infinity}',
     "repetition_penalty must be a finite number above 0"),
    # the demo config is the default: the message says which config the plan's models were looked up in
    ('{"model": "nope", "prompt": "hi"}',
     "unknown model 'nope' (configured: claude, gpt); the plan's models are looked up in {config} (--config)"),
    # requests the model's API cannot take (a traceback-free error that named no line)
    ('{"model": "claude", "prompt": "hi", "kind": "option_logprobs"}',
     "anthropic model 'claude': the Messages API returns no log-probabilities"),
    ('{"model": "gpt", "prompt": "hi", "repetition_penalty": 1.2}',
     "openai model 'gpt': the endpoint takes no repetition_penalty (use 1.0): OpenAI's API has none; an "
     "OpenAI-compatible server such as vLLM takes it (api.repetition_penalty)"),
])
def test_estimate_cost_names_the_plan_file_and_line_of_a_bad_record(tmp_path, monkeypatch, capsys, line, message):
    """A wrong kind of value stopped the estimate with a traceback; every problem is one line naming the file
    and its line (blank lines counted)."""
    from memaudit.cli import main

    monkeypatch.delenv(KEY_ENV, raising=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "benchmarks": {"b": {"sources": ["austen"]}},
        "models": {"gpt": {"backend": "openai", "family": "gpt",
                           "api": {"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": KEY_ENV,
                                   "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}},
                   "claude": {"backend": "anthropic", "family": "claude",
                              "api": {"model_id": "claude-x", "api_key_env": KEY_ENV,
                                      "pricing": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}}},
        "api": {"cache": str(tmp_path / "cache.sqlite")}}))
    plan = tmp_path / "plan.jsonl"
    plan.write_text(f'{{"model": "gpt", "prompt": "fine"}}\n\n{line}\n')
    assert main(["estimate-cost", "--config", str(config), "--plan", str(plan)]) == 2
    message = message.replace("{config}", str(config))
    assert capsys.readouterr().err == f"memaudit estimate-cost: error: {plan}, line 3: {message}\n"


# ----------------------------------------------------------------------------- retry policy

def test_backoff_grows_exponentially_with_jitter_and_is_capped():
    import random

    policy = RetryPolicy(max_attempts=6, base_delay=1.0, max_delay=8.0)
    rng = random.Random(0)
    delays = [policy.backoff(n, rng) for n in range(1, 6)]
    for d, cap in zip(delays, [1, 2, 4, 8, 8]):
        assert cap / 2 <= d <= cap
    assert len(set(delays)) == 5  # jittered, not lockstep


def test_call_with_retries_counts_attempts_and_honours_retry_after():
    slept, results = [], iter([RequestFault("429", retryable=True, status=429, retry_after=2.5),
                               RequestFault("503", retryable=True, status=503), "done"])

    def attempt():
        item = next(results)
        if isinstance(item, Exception):
            raise item
        return item

    now = [0.0]

    def sleep(seconds):  # a fake clock: the test takes no time
        slept.append(seconds)
        now[0] += seconds

    value, n = call_with_retries(attempt, RetryPolicy(base_delay=1.0), sleep=sleep,
                                 cooldown=Cooldown(clock=lambda: now[0], sleep=sleep))
    # the server's 2.5 s, then the second backoff, d = 2: in [d/2, d]; the cooldown added no extra wait
    assert (value, n) == ("done", 3) and len(slept) == 2 and slept[0] == 2.5 and 1.0 <= slept[1] <= 2.0

    def rejected():
        raise RequestFault("HTTP 401", retryable=False, status=401)

    with pytest.raises(RetriesExhausted, match="not retried") as err:
        call_with_retries(rejected, RetryPolicy(), sleep=slept.append)
    assert err.value.attempts == 1

    def out_of_quota():
        raise RequestFault("HTTP 429", retryable=True, status=429, retry_after=3600)

    with pytest.raises(RetriesExhausted, match="quota is probably exhausted"):
        call_with_retries(out_of_quota, RetryPolicy(max_retry_after=300), sleep=slept.append)


def test_parse_retry_after_forms():
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert parse_retry_after({"Retry-After": "soon"}) is None and parse_retry_after({}) is None


# ----------------------------------------------------------------------------- config and registry

API_MODEL = {"backend": "openai", "family": "gpt",
             "api": {"model_id": "gpt-4o-mini-2024-07-18", "api_key_env": "OPENAI_API_KEY",
                     "pricing": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}}


def test_schema_fills_api_defaults_only_for_api_models():
    import copy

    import yaml

    from memaudit.config import _validator_with_defaults, load_schema

    from workflow_helpers import ROOT

    config = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    config["models"]["gpt"] = copy.deepcopy(API_MODEL)
    validator = _validator_with_defaults(load_schema())
    list(validator.iter_errors(config))
    assert list(validator.iter_errors(config)) == []
    api = config["models"]["gpt"]["api"]
    assert (api["concurrency"], api["max_retries"], api["timeout"], api["top_logprobs"]) == (4, 5, 60, 20)
    assert all("api" not in e for name, e in config["models"].items() if name != "gpt")
    assert "api" not in config  # the top-level block keeps no default
    config["models"]["gpt"]["api"]["top_logprobs"] = 25
    assert any("top_logprobs" in str(e.absolute_path) for e in validator.iter_errors(config))


def test_api_config_checks_name_the_key_and_never_echo_a_pasted_key():
    import copy

    from memaudit.backends.config_checks import check_api_models
    from memaudit.probes import registry

    pasted = "sk-proj-" + "Ab3" * 12
    models = {
        "gpt": copy.deepcopy(API_MODEL),
        "pasted": {"backend": "openai", "api": {"model_id": "gpt-4o", "api_key_env": pasted,
                                                "pricing": {"input_per_mtok": 1, "output_per_mtok": 1}}},
        "unpriced": {"backend": "anthropic", "api": {"model_id": "claude-x"}},
        "creds": {"backend": "openai", "api": {"model_id": "m", "base_url": "http://u:p@127.0.0.1:8000/v1"}},
        "query": {"backend": "openai", "api": {"model_id": "m", "base_url": f"http://127.0.0.1:8000/v1?key={pasted}"}},
        "token": {"backend": "openai", "api": {"model_id": "m", "base_url": "http://127.0.0.1:8000/v1?access_token=x"}},
        "nolp": {"backend": "openai", "api": {"model_id": "local", "base_url": "http://127.0.0.1:8000/v1",
                                              "logprobs": False}},
        "weights": {"backend": "openai", "source": {"builtin": "smollm2-135m-instruct"}},
        "local": {"backend": "hf", "source": {"builtin": "smollm2-135m-instruct"}, "api": {"model_id": "x"}},
    }
    config = {"models": models, "probes": {"decop_logit": {"models": ["nolp", "gpt"]}}}
    problems = check_api_models(config)
    text = "\n".join(problems)
    assert pasted not in text
    assert sorted(p.split(":")[0] for p in problems) == [
        "models.creds.api.base_url", "models.local.api", "models.pasted.api.api_key_env",
        "models.query.api.base_url", "models.token.api.base_url",
        "models.unpriced.api.pricing", "models.weights.api", "models.weights.source"]
    assert [p for p in problems if p.startswith(("models.query", "models.token"))] == [
        f"models.{name}.api.base_url: must not carry credentials in its query string (parameter {param!r}); put the "
        f"key in the variable named by api_key_env; the value is not shown"
        for name, param in (("query", "key"), ("token", "access_token"))]
    # the endpoint without log-probabilities, named for a probe that needs them: the capability check
    assert registry.check_capabilities(config) == [
        "probes.decop_logit.models.0: probe 'decop_logit' needs option_logprobs, which model 'nolp' (backend 'openai', "
        "api.logprobs: false) cannot serve"]
    assert check_api_models({"models": {"gpt": API_MODEL}, "api": {}}) == []


def test_one_model_id_at_two_base_urls_needs_a_revision_to_tell_their_cached_answers_apart(tmp_path):
    from memaudit.backends.config_checks import check_api_models

    def served(port, **api):
        return {"backend": "openai", "api": {"model_id": "smollm2-135m-instruct",
                                             "base_url": f"http://127.0.0.1:{port}/v1", **api}}

    # a base and its LoRA adapter behind two `memaudit serve`s, both answering to the builtin's name
    models = {"base": served(8000), "tuned": served(8001), "alias": served(8000), "slash": {
        "backend": "openai", "api": {"model_id": "smollm2-135m-instruct", "base_url": "http://127.0.0.1:8000/v1/"}}}
    assert check_api_models({"models": models}) == [
        "models.tuned.api.revision: models.base has the same backend, model_id and revision at another base_url, "
        "so the two would share cached answers; set api.revision on one to what its server serves (e.g. the adapter)"]
    models["tuned"] = served(8001, revision="adapter-1")
    assert check_api_models({"models": models}) == []
    # what the check prevents: the second server is never asked, the first one's answer is served
    with loopback({"q": "base answer"}) as first, loopback({"q": "fine-tuned answer"}) as second:
        answers = [OpenAIBackend("smollm2-135m-instruct", base_url=srv.openai_base_url, cache=tmp_path / "c.sqlite",
                                 **kw).generate(["q"], GREEDY)[0].text
                   for srv, kw in ((first, {}), (second, {}), (second, {"revision": "adapter-1"}))]
        assert answers == ["base answer", "base answer", "fine-tuned answer"] and second.count() == 1


def test_capabilities_registry_and_resource_slots():
    check_probe_support("decop", {OPTION_LOGPROBS, GENERATE}, "gpt", "openai")
    with pytest.raises(ConfigError, match="needs option_logprobs, which model 'claude' \\(backend 'anthropic'\\)"):
        check_probe_support("decop", {OPTION_LOGPROBS}, "claude", "anthropic")
    assert OPTION_LOGPROBS not in model_capabilities({"backend": "openai", "api": {"logprobs": False}})
    config = {"models": {"gpt": {**API_MODEL, "api": {**API_MODEL["api"], "concurrency": 8}},
                         "local": {"backend": "hf"}}}
    assert [api_slots(config, m, "openai") for m in ("gpt", "local")] == [8, 0]
    assert api_slots(config, "gpt", "anthropic") == 0


def test_backend_from_config_uses_schema_defaults_and_the_shared_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    config = {"models": {"gpt": API_MODEL}, "api": {"cache": str(tmp_path / "api.sqlite")}}
    with api_backend_from_config(config, "gpt", rule="decop") as b:
        pass
    assert (b.model_id, b.concurrency, b.retry_policy.max_attempts, b.timeout) == (
        "gpt-4o-mini-2024-07-18", 4, 6, 60.0)
    assert (b.max_tokens_field, b.pricing, b.rule, b.cache.path) == (
        "max_completion_tokens", Pricing(0.15, 0.6), "decop", tmp_path / "api.sqlite")
    assert b.describe()["base_url"] == "https://api.openai.com/v1"


def test_importing_the_interface_imports_no_sdk_or_torch():
    code = ("import sys, memaudit.backends.base, memaudit.backends.api, memaudit.config; "
            "print(sorted(m for m in ('openai', 'anthropic', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ----------------------------------------------------------------------------- memaudit serve

def test_serve_puts_a_local_model_behind_the_openai_api(tiny_model):
    import torch

    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    model, tok = tiny_model
    hf = HFBackend({"path": "tiny"}, model=model, tokenizer=tok)
    params = GenerationParams(max_new_tokens=5, chat=False)
    with ChatServer(HFResponder(hf), model_name="tiny") as srv:
        api = OpenAIBackend("tiny", base_url=srv.openai_base_url, cache=None)
        (remote,) = api.generate(["The sea"], params, top_logprobs=5)
    (local,) = hf.generate(["The sea"], params)
    assert remote.text == local.text and remote.output_tokens == local.output_tokens
    from memaudit.models.token_stats import encode

    ids = torch.tensor([encode(tok, "The sea", max_tokens=None)])  # a plain-text prompt follows the context token
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
    values, idx = torch.topk(logp, 5)
    expected = [[tok.decode([int(i)]), float(v)] for v, i in zip(values, idx)]
    got = remote.meta["top_logprobs"][0]
    assert [t for t, _ in got] == [t for t, _ in expected]
    assert max(abs(a[1] - b[1]) for a, b in zip(got, expected)) < 1e-5


@pytest.mark.parametrize("api, fields, message", [
    ("openai", {"max_tokens": 0}, "max_tokens: expected an integer >= 1, got 0"),  # was the default, 256
    ("openai", {"max_completion_tokens": 2.5}, "max_completion_tokens: expected an integer >= 1, got 2.5"),
    ("openai", {"temperature": -1}, "temperature: expected a number in [0, 2], got -1"),  # was greedy
    ("openai", {"seed": "abc", "temperature": 1}, "seed: expected an integer, got 'abc'"),  # was a 500
    ("openai", {"top_logprobs": 3}, "top_logprobs: logprobs must be true when top_logprobs is set"),
    ("openai", {"logprobs": True, "top_logprobs": -1}, "top_logprobs: expected an integer in [0, 20], got -1"),
    ("openai", {"stop": 5}, "stop: expected a string or a list of strings, got 5"),
    ("openai", {"repetition_penalty": 0}, "repetition_penalty: expected a number > 0, got 0"),
    ("openai", {"messages": []}, "messages: expected a non-empty list of messages"),  # was answered
    ("openai", {"messages": [{"content": "x"}]}, "messages[0]: expected an object with a string 'role'"),
    ("anthropic", {"temperature": 1.5}, "temperature: expected a number in [0, 1], got 1.5"),
    ("anthropic", {"max_tokens": "8"}, "max_tokens: expected an integer >= 1, got '8'"),
    ("anthropic", {"messages": [{"role": "user", "content": 5}]},
     "messages[0].content: message content must be a string or a list of text parts"),
])
def test_serve_answers_a_bad_parameter_with_a_400_naming_it(server, api, fields, message):
    """Not a default put in its place, a value the model cannot take let through, or a 500."""
    import urllib.error
    import urllib.request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}
    path = "/v1/chat/completions" if api == "openai" else "/v1/messages"
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode())
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    answer = json.loads(err.value.read())
    assert err.value.code == 400 and server.count() == 1
    assert (answer["error"]["message"], answer["error"]["type"]) == (message, "invalid_request_error")


def test_serve_says_a_stop_string_ended_the_answer_in_both_wire_formats(tiny_model):
    """An answer decoded alone and cut at a stop string was finish_reason "length" (the batched path
    said "stop"); Anthropic's stop_reason is "stop_sequence", with the string."""
    import openai

    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    model, tok = tiny_model
    hf = HFBackend({"path": "tiny"}, model=model, tokenizer=tok)
    (whole,) = hf.generate(["Emma Woodhouse"], GenerationParams(max_new_tokens=6, chat=False))
    assert (whole.text, whole.meta["finish_reason"]) == ("useuseuseuseuseuse", "length")
    stop = "eus"
    messages = [{"role": "user", "content": "Emma Woodhouse"}]
    with ChatServer(HFResponder(hf), model_name="tiny") as srv:
        client = openai.OpenAI(api_key="none", base_url=srv.openai_base_url, max_retries=0)
        chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0.0,
                                              stop=[stop]).model_dump()
        req = urllib_request(f"{srv.anthropic_base_url}/v1/messages", {
            "model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 0.0, "stop_sequences": [stop]})
    assert (chat["choices"][0]["message"]["content"], chat["choices"][0]["finish_reason"]) == ("us", "stop")
    assert (req["content"][0]["text"], req["stop_reason"], req["stop_sequence"]) == ("us", "stop_sequence", "eus")


def urllib_request(url: str, body: dict) -> dict:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, data=json.dumps(body).encode()), timeout=30) as r:
        return json.loads(r.read())


class _Gated:
    """An HF backend whose first sampled answer waits for ``gate``: the requests sent meanwhile queue up."""

    def __init__(self, backend):
        self.backend, self.gate, self.busy, self.decoded = backend, threading.Event(), threading.Event(), []

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def hold(self, api) -> threading.Thread:
        """Send a sampled request through ``api`` and return once the model is busy with it."""
        sampled = threading.Thread(target=api.generate, args=(["warm"], GenerationParams(
            max_new_tokens=2, temperature=1.0, chat=False)))
        sampled.start()
        assert self.busy.wait(30)
        return sampled

    def queued_behind(self, api, server, prompts, params) -> list:
        """``api``'s answers to ``prompts``, all of them sent while the model is busy, then let go."""
        sampled, out = self.hold(api), []
        waiting = threading.Thread(target=lambda: out.extend(api.generate(prompts, params)))
        waiting.start()
        deadline = time.monotonic() + 30
        while server.count() < len(prompts) + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.gate.set()
        waiting.join(30)
        sampled.join(30)
        return out

    def generate_text(self, text, params, **kw):
        if params.temperature > 0:
            self.busy.set()
            assert self.gate.wait(30)
        self.decoded.append(text)
        return self.backend.generate_text(text, params, **kw)

    def generate_rendered_batched(self, texts, params, **kw):
        self.decoded.extend(texts)
        return self.backend.generate_rendered_batched(texts, params, **kw)


def test_serve_decodes_the_greedy_requests_waiting_together_as_each_alone(tiny_model):
    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    model, tok = tiny_model
    hf = HFBackend({"path": "tiny"}, model=model, tokenizer=tok)
    gated = _Gated(hf)
    responder = HFResponder(gated)
    prompts = [f"The sea {'and the ship ' * i}was" for i in range(6)]
    params = GenerationParams(max_new_tokens=8, chat=False)
    with ChatServer(responder, model_name="tiny") as srv:
        api = OpenAIBackend("tiny", base_url=srv.openai_base_url, cache=None, concurrency=6)
        out = gated.queued_behind(api, srv, prompts, params)
    assert responder.batches == [6] and responder.dropped == 0
    alone = [hf.generate([p], params)[0] for p in prompts]
    assert [g.text for g in out] == [g.text for g in alone] and all(g.text for g in out)
    assert [g.input_tokens for g in out] == [g.input_tokens for g in alone]


def test_serve_drops_a_request_whose_client_went_away_before_its_turn(tiny_model):
    import openai

    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    model, tok = tiny_model
    gated = _Gated(HFBackend({"path": "tiny"}, model=model, tokenizer=tok))
    responder = HFResponder(gated)
    with ChatServer(responder, model_name="tiny") as srv:
        api = OpenAIBackend("tiny", base_url=srv.openai_base_url, cache=None)
        sampled = gated.hold(api)
        impatient = openai.OpenAI(api_key="none", base_url=srv.openai_base_url, max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            impatient.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "gone"}],
                                              max_tokens=4, temperature=0.0)
        gated.gate.set()
        sampled.join(30)
        deadline = time.monotonic() + 30
        while (len(srv.records) < 2 or srv.records[1].status is None) and time.monotonic() < deadline:
            time.sleep(0.01)
        after = api.generate(["back"], GenerationParams(max_new_tokens=3, chat=False))[0]
    assert responder.dropped == 1 and [r.status for r in srv.records] == [200, 499, 200]
    assert len(gated.decoded) == 2 and not any("gone" in t for t in gated.decoded) and after.status == STATUS_OK


def test_serve_answers_a_prompt_too_long_with_a_400_and_its_batch_without_it(tiny_model):
    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    model, tok = tiny_model
    hf = HFBackend({"path": "tiny"}, model=model, tokenizer=tok)
    gated = _Gated(hf)
    responder = HFResponder(gated)
    params = GenerationParams(max_new_tokens=8, chat=False)
    long = " ".join(["the sea and the ship"] * 60)  # over the tiny model's 128 positions
    with ChatServer(responder, model_name="tiny") as srv:
        api = OpenAIBackend("tiny", base_url=srv.openai_base_url, cache=None, concurrency=3, on_error="record")
        out = gated.queued_behind(api, srv, ["The sea", long, "The ship"], params)
        statuses = sorted(r.status for r in srv.records)
    alone = [hf.generate([p], params)[0].text for p in ("The sea", "The ship")]
    assert [out[0].text, out[2].text] == alone and out[0].status == out[2].status == STATUS_OK
    assert out[1].status == STATUS_ERROR and "exceeds its 128 positions" in out[1].error
    assert out[1].error.endswith("(not retried: the request itself was rejected)")
    assert statuses == [200, 200, 200, 400] and srv.count() == 4  # the batch failed, then each alone


def test_fit_context_decodes_a_long_prompt_to_the_models_last_position_and_a_short_one_as_ever(tiny_model):
    """GenerationParams.fit_context (CopyBench's stories on a 4096-position Llama-2, as offline vLLM):
    a prompt with fewer positions left than its new tokens gets as many as are left, the same tokens as
    asking for that many; one that fits is decoded as without the flag; one that fills the context is
    the error it always was. Batched and one at a time alike."""
    import dataclasses

    from memaudit.backends.hf import HFBackend

    model, tok = tiny_model
    hf = HFBackend({"path": "tiny"}, name="tiny", model=model, tokenizer=tok)
    params = GenerationParams(max_new_tokens=40, chat=False, fit_context=True)
    long = " ".join(["the sea and the ship"] * 8)
    n_long = len(hf._prompt_ids(long, params))
    assert 88 < n_long < 128  # 128 positions: fewer than 40 left
    left = 128 - n_long
    batched = hf.generate_batched(["The sea", long], params)
    strict = dataclasses.replace(params, fit_context=False)
    with pytest.raises(ValueError, match="exceeds its 128 positions") as too_long:
        hf.generate_batched([long], strict)
    # a user's error (a job prints its one line), and a ValueError still (memaudit serve answers it with a 400)
    assert isinstance(too_long.value, MemauditError)
    (as_asked,) = hf.generate_batched([long], dataclasses.replace(strict, max_new_tokens=left))
    assert batched[1].meta["capped_to"] == left and batched[1].meta["token_ids"] == as_asked.meta["token_ids"]
    assert batched[1].output_tokens <= left and batched[1].text == as_asked.text
    (short,) = hf.generate_batched(["The sea"], strict)
    assert "capped_to" not in batched[0].meta and batched[0].meta["token_ids"] == short.meta["token_ids"]
    (one,) = hf.generate([long], params)  # the one-at-a-time path
    assert one.meta["capped_to"] == left and one.text == as_asked.text
    with pytest.raises(ValueError, match="leaves none of its 128 positions") as no_room:
        hf.generate_batched(["The sea", " ".join(["the sea and the ship"] * 12)], params)
    assert isinstance(no_room.value, MemauditError)


@pytest.mark.parametrize("option, value, message", [
    ("--max-batch", "0", "--max-batch: must be at least 1, not 0"),
    ("--max-batch", "-3", "--max-batch: must be at least 1, not -3"),
    ("--port", "65536", "--port: must be 0 to 65535 (0: any free port), not 65536"),
    ("--port", "-1", "--port: must be 0 to 65535 (0: any free port), not -1"),
    ("--latency", "-0.5", "--latency: must be a finite number of seconds >= 0, not -0.5"),
    ("--latency", "nan", "--latency: must be a finite number of seconds >= 0, not nan"),
    ("--latency", "inf", "--latency: must be a finite number of seconds >= 0, not inf"),
])
def test_serve_refuses_a_nonsense_number_in_one_line_before_loading_a_model(tmp_path, monkeypatch, capsys, option,
                                                                            value, message):
    """``--max-batch 0`` (or negative) was served as 1 without a word, ``--port 65536`` or ``-1`` failed with
    bind()'s OverflowError traceback once the model had loaded, and a negative or nan ``--latency`` with a
    ValueError in every request's thread (inf: every answer never came). Each is one line naming the option,
    before any model loads."""
    import memaudit.models.loading as loading
    from memaudit.cli import main

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["serve", "--path", str(tmp_path), option, value]) == 2
    assert capsys.readouterr() == ("", f"memaudit serve: error: {message}\n")
    if option == "--max-batch":  # no model to batch: refused whatever its value (below)
        return
    scripted = tmp_path / "replies.json"
    scripted.write_text('{"replies": {}}')
    assert main(["serve", "--scripted", str(scripted), option, value]) == 2
    assert capsys.readouterr() == ("", f"memaudit serve: error: {message}\n")


@pytest.mark.parametrize("source, options, message", [
    ("--scripted", ["--adapter", "/nonexistent", "--device", "bogus"],
     "--adapter, --device: not with --scripted (no model: the replies come from the file)"),
    ("--scripted", ["--max-batch", "1", "--dtype", "float32"],
     "--dtype, --max-batch: not with --scripted (no model: the replies come from the file)"),
    ("--scripted", ["--revision", "abc"],
     "--revision: only with --hub-id (a --path, --builtin or --scripted source has no hub commit)"),
    ("--path", ["--revision", "abc"],
     "--revision: only with --hub-id (a --path, --builtin or --scripted source has no hub commit)"),
    ("--builtin", ["--revision", "abc"],
     "--revision: only with --hub-id (a --path, --builtin or --scripted source has no hub commit)"),
    ("--path", ["--cache-dir", "elsewhere"], "--cache-dir: only with --builtin (where a builtin model is converted)"),
])
def test_serve_refuses_an_option_its_source_does_not_read(tmp_path, monkeypatch, capsys, source, options, message):
    """``memaudit serve --scripted replies.json --adapter /nonexistent --device bogus`` started without a word,
    and ``--revision`` with ``--path`` or ``--builtin`` was dropped: each is argparse's error, before anything
    listens or loads."""
    import memaudit.models.loading as loading
    from memaudit.backends.server import ChatServer
    from memaudit.cli import main

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(ChatServer, "__init__", lambda *a, **k: pytest.fail("a server was started"))
    (tmp_path / "replies.json").write_text('{"replies": {}}')
    value = {"--scripted": str(tmp_path / "replies.json"), "--path": str(tmp_path), "--builtin": "smollm2-135m"}
    with pytest.raises(SystemExit) as exc:
        main(["serve", source, value[source], *options])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == f"memaudit serve: error: {message}"


@pytest.mark.parametrize("text, message", [
    (None, "{path}: file not found"),
    ('{"replies": {"hi": "there"', "{path}, line 1, column 27: not valid JSON (Expecting ',' delimiter)"),
    # a prompt given twice: json kept its last answer unsaid
    ('{"replies": {"hi": "one",\n "hi": "two"}}', '{path}: "hi" is given twice in one object; JSON would keep only '
                                                 'the last value: remove or rename one'),
    ('["hi"]', '{path}: expected {{"replies": {{prompt: answer, ...}}}}, not a list'),
    ('{"replies": {"hi": 3}}', '{path}: replies: the answer to "hi" must be a string, not an int'),
    ('{"replies": ["hi"]}', '{path}: replies: must be an object {{prompt: answer, ...}}, not a list'),
    ('{"reply": {}}', '{path}: unknown key "reply"; the file is {{"replies": {{prompt: answer, ...}}}}'),
])
def test_serve_names_a_reply_script_it_cannot_use_in_one_line(tmp_path, monkeypatch, capsys, text, message):
    """``memaudit serve --scripted FILE`` with the file missing or not JSON ended in a FileNotFoundError or
    JSONDecodeError traceback; one of another shape in an AttributeError, or served a number where a reply
    belongs (a TypeError in each request's thread) or no reply at all (a misspelt key). One line naming the
    file and what is wrong, exit status 2, before serving."""
    from memaudit.backends.server import ChatServer
    from memaudit.cli import main

    monkeypatch.setattr(ChatServer, "serve_forever", lambda self: pytest.fail("served a script it cannot use"))

    script = tmp_path / "replies.json"
    if text is not None:
        script.write_text(text)
    assert main(["serve", "--scripted", str(script), "--port", "0"]) == 2
    assert capsys.readouterr() == ("", f"memaudit serve: error: {message.format(path=script)}\n")


def test_serve_on_a_port_in_use_is_one_line_before_loading_a_model(tmp_path, monkeypatch, capsys):
    """``memaudit serve`` on a port another server listens on failed with bind()'s OSError traceback, and
    only once the model had loaded (minutes for a large one). The port is bound first: one line naming it."""
    import socket

    import memaudit.models.loading as loading
    from memaudit.cli import main

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["serve", "--path", str(tmp_path), "--port", str(port)]) == 2
        assert capsys.readouterr() == ("", f"memaudit serve: error: --port {port}: 127.0.0.1:{port} is already in "
                                           "use (another server listens there); choose another port, or 0 for any "
                                           "free one\n")


def test_serve_errors_name_the_model_it_serves(tiny_model_dir):
    """``memaudit serve`` built its backend without a name: a prompt too long was refused as
    "model None: ...". The error names the served model (``--name``, else the path's last part), which
    answers whatever model name a request gives; an answer's ``model`` is the served model's name too, as
    OpenAI and Anthropic give the model that answered (it echoed the request's name)."""
    import openai

    from memaudit.backends.serve import make_server

    long = " ".join(["the sea and the ship"] * 60)  # over the tiny model's 128 positions
    for extra, served in (([], tiny_model_dir.name), (["--name", "austen-tiny"], "austen-tiny")):
        server = make_server(["--path", str(tiny_model_dir), "--port", "0", "--device", "cpu", "--dtype", "float32",
                              *extra])
        assert server.model_name == served
        with server:
            client = openai.OpenAI(api_key="none", base_url=server.openai_base_url, max_retries=0)
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(model="whatever-the-client-says", max_tokens=8,
                                               messages=[{"role": "user", "content": long}])
            answer = client.chat.completions.create(model="whatever-the-client-says", max_tokens=2,
                                                    temperature=0.0, messages=[{"role": "user", "content": "The"}])
            message = urllib_request(f"{server.anthropic_base_url}/v1/messages", {
                "model": "whatever-the-client-says", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
        assert (answer.model, answer.usage.completion_tokens, message["model"]) == (served, 2, served)
        n_prompt = len(encode_plain(tiny_model_dir, long))
        assert err.value.status_code == 400 and err.value.body == {
            "message": f"model {served!r}: a prompt of {n_prompt} tokens plus 8 new tokens exceeds its 128 positions; "
                       "use shorter prompts or fewer new tokens (the prompt is never cut silently)",
            "type": "invalid_request_error", "param": None, "code": None}


def encode_plain(model_dir, text: str) -> list[int]:
    """A plain-text prompt's tokens as the HF backend reads them: the context token, then the text."""
    from transformers import AutoTokenizer

    from memaudit.models.token_stats import encode

    return encode(AutoTokenizer.from_pretrained(model_dir), text, max_tokens=None)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The demo's SmolLM2 tokenizer (byte-level BPE), from its converted cache or its GGUF file (~10 s)."""
    from transformers import AutoTokenizer

    from memaudit.models.builtin import locate_gguf

    cached = Path("resources/cache/smollm2-135m-instruct")
    if (cached / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(cached)
    folder, gguf_file = locate_gguf("smollm2-135m-instruct")
    return AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)


def test_token_bytes_are_the_raw_bytes_of_a_character_split_across_tokens(smollm2_tokenizer):
    """Byte-level BPE (SmolLM2) splits an emoji and some CJK characters across tokens; decoded alone
    such a token is U+FFFD, whose UTF-8 (EF BF BD) was given as its bytes. SentencePiece's byte
    fallback spells them <0xE6>."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    from memaudit.backends.hf import token_bytes

    tok = smollm2_tokenizer
    for text in ("😀 ok", "日本語の文", "naïve café —"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        raw = token_bytes(tok, ids)
        assert b"".join(raw) == text.encode("utf-8")
    emoji = tok("😀 ok", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in emoji] == ["\ufffd"] * 3 + [" ok"]
    assert token_bytes(tok, emoji) == [b"\xf0\x9f", b"\x98", b"\x80", b" ok"]
    assert token_bytes(tok, [tok.convert_tokens_to_ids("<|im_start|>")]) == [b"<|im_start|>"]  # a special token

    vocab = {"<unk>": 0, "<0xE6>": 1, "<0x97>": 2, "<0xA5>": 3, "\u2581": 4, "a": 5, "\u2581a": 6}
    sp = Tokenizer(models.BPE(vocab, [("\u2581", "a")], unk_token="<unk>", byte_fallback=True))
    sp.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    sp.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    sp = PreTrainedTokenizerFast(tokenizer_object=sp, unk_token="<unk>")
    ids = sp("a 日", add_special_tokens=False)["input_ids"]
    assert sp.convert_ids_to_tokens(ids) == ["\u2581a", "\u2581", "<0xE6>", "<0x97>", "<0xA5>"]
    assert token_bytes(sp, ids) == [b" a", b" ", b"\xe6", b"\x97", b"\xa5"]


def test_serve_gives_the_raw_bytes_of_a_token_that_holds_part_of_a_character(smollm2_tokenizer):
    """Through the openai SDK: a model with SmolLM2's tokenizer answers "😀 ok" in four tokens, the
    first three parts of the emoji. Each token's ``bytes`` (and its top alternatives') are its raw
    bytes, and they join to the answer's UTF-8, as OpenAI's; they were EF BF BD (U+FFFD) each."""
    import openai
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from memaudit.backends.hf import HFBackend
    from memaudit.backends.server import ChatServer, HFResponder

    tok = smollm2_tokenizer

    class Forced(LlamaForCausalLM):
        """A random tiny Llama that follows ``successor`` (last token -> next token) where it says."""

        def forward(self, input_ids=None, **kwargs):
            out = super().forward(input_ids=input_ids, **kwargs)
            nxt = self.successor.get(int(input_ids[0, -1]))
            if nxt is not None:
                out.logits[:, -1, nxt] += 50.0
            return out

    torch.manual_seed(0)
    model = Forced(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    hf = HFBackend({"path": "forced"}, name="forced", model=model, tokenizer=tok)
    messages = [{"role": "user", "content": "Smile"}]
    prompt = hf._prompt_ids(hf.render_messages(messages), GenerationParams(chat=True))
    answer = tok("😀 ok", add_special_tokens=False)["input_ids"]
    model.successor = dict(zip([prompt[-1], *answer[:-1]], answer))
    with ChatServer(HFResponder(hf), model_name="forced") as srv:
        client = openai.OpenAI(api_key="none", base_url=srv.openai_base_url, max_retries=0)
        chat = client.chat.completions.create(model="forced", messages=messages, max_tokens=4, temperature=0.0,
                                              logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert chat.choices[0].message.content == "😀 ok"
    assert [c.token for c in content] == ["\ufffd", "\ufffd", "\ufffd", " ok"]
    assert [c.bytes for c in content] == [[0xF0, 0x9F], [0x98], [0x80], [0x20, 0x6F, 0x6B]]
    assert bytes(b for c in content for b in c.bytes).decode("utf-8") == "😀 ok"
    for c in content:
        assert c.top_logprobs[0].bytes == c.bytes  # the forced token is the best one
        assert all(alt.bytes == list(alt.token.encode("utf-8")) for alt in c.top_logprobs if "\ufffd" not in alt.token)


def test_a_connection_is_alive_until_its_client_closes_it():
    from memaudit.backends.server import client_connected

    ours, theirs = socket.socketpair()
    try:
        assert client_connected(ours)
        theirs.close()
        assert not client_connected(ours)
    finally:
        ours.close()
    assert not client_connected(ours)  # a closed socket, too


def test_a_connection_past_descriptor_1023_is_told_alive_too():
    """select() refuses descriptors above 1023, which a server with many clients reaches."""
    import fcntl
    import resource

    from memaudit.backends.server import client_connected

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this machine allows {hard} open files")
    if soft != resource.RLIM_INFINITY and soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    ours, theirs = socket.socketpair()
    try:
        # Our end moved to the lowest free descriptor from 1100 up. Opening 1100 sockets first and
        # taking the next one was flaky: a descriptor below 1024 that another thread closed in the
        # meantime was handed out instead (fd 22 in session 46's make test-quick).
        high = socket.socket(fileno=fcntl.fcntl(ours.fileno(), fcntl.F_DUPFD, 1100))
        ours.close()
        assert high.fileno() >= 1100 and client_connected(high)
        theirs.close()
        assert not client_connected(high)
        high.close()
    finally:
        ours.close()
        theirs.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_credentials_are_told_from_config_values():
    from pathlib import Path

    import yaml

    from memaudit.secrets import credential_problems, looks_like_credential, url_credential_problem

    for key in ("sk-proj-" + "Ab3" * 12, "sk-ant-api03-" + "Zy9" * 10, "Bearer abcdefgh12345678", "hf_" + "a1B" * 10):
        assert looks_like_credential(key) and looks_like_credential(f"prefix {key} suffix"), key
    for value in ("OPENAI_API_KEY", "gpt-4o-mini-2024-07-18", "EleutherAI/pythia-1.4b-deduped", "risk-assessment",
                  "0123456789abcdef0123456789abcdef01234567", "results/models/tiny-gpt2-small-contaminated"):
        assert not looks_like_credential(value), value
    assert credential_problems({"models": {"m": {"api": {"model_id": "sk-ant-" + "x1" * 10}}},
                                "tokens": {"access_token": "aB3dE5gH7jK9mN1pQ3rS5tU7"},
                                "published": {"text_key": "document_summary_2024_v1"}}) == [
        (("models", "m", "api", "model_id"), "looks like an API key or token (the value is not shown); keep keys out "
         "of the config: put the key in an environment variable and name that variable in api_key_env"),
        (("tokens", "access_token"), "looks like an API key or token (the value is not shown); keep keys out of the "
         "config: put the key in an environment variable and name that variable in api_key_env")]
    assert [url_credential_problem(u) for u in ("http://127.0.0.1:8000/v1", "https://api.example.com/v1?version=2",
                                                 "https://h/v1?Signature=abc", "https://h/v1#token=abc")] == [
        None, None] + ["must not carry credentials in its query string (parameter {!r}); put the key in the variable "
                       "named by api_key_env; the value is not shown".format(p) for p in ("Signature", "token")]
    # forms that passed the check: a ;path parameter, passwd/pw/credential/jwt, a key as a path segment
    query = ("must not carry credentials in its query string (parameter {!r}); put the key in the variable named "
             "by api_key_env; the value is not shown")
    assert [url_credential_problem(u) for u in (
        "https://gw.example.com/v1;api-key=Zx8KpQ2rT5vW9yB3nM6cF1hJ4lD7sG0a", "https://gw.example.com/v1?passwd=hunter2",
        "https://h/v1?pw=x", "https://h/v1?credential=x", "https://h/v1?jwt=abc.def",
        "https://gw.example.com/Zx8KpQ2rT5vW9yB3nM6cF1hJ4lD7sG0a/v1", "https://h/openai/deployments/gpt-4o-2024-08-06/v1",
    )] == [query.format(p) for p in ("api-key", "passwd", "pw", "credential", "jwt")] + [
        "must not carry credentials in its path; the value is not shown", None]
    shipped = sorted((Path(__file__).resolve().parents[1] / "config").glob("*.yaml"))
    assert len(shipped) == 4
    for path in shipped:  # no shipped config trips the detector
        assert credential_problems(yaml.safe_load(path.read_text())) == [], path
