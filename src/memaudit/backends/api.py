"""What the API backends share: requests as cache keys, the thread pool, retries, the ledger.

An API backend (OpenAI, Anthropic, any OpenAI-compatible server) turns each
prompt into a wire request, a :class:`PlannedCall` whose identity -- backend,
model id, revision, the exact body, seed, (when sampling) sample index and a
backend's ``key_fields`` -- is hashed into the cache key. A batch is served in three steps:

1. every key is looked up in the SQLite cache (:mod:`memaudit.backends.cache`);
2. the missing ones are sent from a thread pool with at most ``concurrency``
   requests in flight, each with retries (:mod:`memaudit.backends.retry`; the
   SDKs' own retries are off so that ours are the only ones);
3. each response is committed to the cache (with a cost-ledger row) the moment
   it arrives, so a killed run loses only the calls in flight.

Requests that still fail after their retries are collected; once the batch is
done the backend raises :class:`APIRequestError` naming how many failed and why
(``on_error: raise``) or records them as ``error`` outcomes (``on_error: record``).
Either way every success is already cached, so a rerun sends only the failures.

Keys are read and redacted by :mod:`memaudit.backends.secrets`; every error
message this module builds passes through :func:`~memaudit.backends.secrets.redact`.
The config's ``api`` blocks are read by :mod:`memaudit.backends.settings`.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import logging
import math
import os
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from memaudit.backends.base import (STATUS_ERROR, STATUS_INVALID, STATUS_OK, STATUS_REFUSAL, Backend, Generation,
                                    GenerationParams, get_backend_class, option_variants, provider_api,
                                    takes_repetition_penalty)
from memaudit.backends.cache import ResponseCache, UsageRow, canonical_json, request_key, utc_now
from memaudit.backends.refusal import is_refusal
from memaudit.backends.retry import (RETRYABLE_STATUS, Cooldown, RequestFault, RetriesExhausted, RetriesStopped,
                                     RetryPolicy, call_with_retries, parse_retry_after, should_retry_header)
from memaudit.backends.secrets import Secret, read_api_key, redact, register_secret
from memaudit.backends.settings import Pricing, api_entry, api_settings, pricing_for
from memaudit.errors import ConfigError, MemauditError

log = logging.getLogger(__name__)

KEY_SCHEMA_VERSION = 1  # bump when the meaning of a cached request changes
NO_KEY = "none"  # sent to keyless OpenAI-compatible servers: the SDKs insist on some key
# They say who pays, not what is answered (as OpenAI's organization and project, no part of a key
# either): a rotated gateway token keeps the cache.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key"})


# HTTP 400 error codes by which a provider declines a prompt it flagged, before any answer: OpenAI's reasoning
# models' "invalid_prompt" ("your prompt was flagged as potentially violating our usage policy") and Azure
# OpenAI's "content_filter" (its prompt filter). A refusal, as finish_reason content_filter is, not a fault.
REFUSAL_ERROR_CODES = frozenset({"invalid_prompt", "content_filter"})
# How the cache stores such a refusal: {REFUSED_KEY: {"status": 400, "error": <the error object>}} (no API
# sends this key, so no answer reads as one)
REFUSED_KEY = "memaudit_refused"
# Anthropic's 429s for a spent budget (error.details.error_code; the SDK's classes of the same names)
SPEND_LIMIT_CODES = frozenset({"enforced_spend_limit_reached", "contract_spend_limit_reached"})
# Statuses every request of a batch meets alike: the key refused (401), payment required (402), no access
# (403), no such model or route (404). After the first, the batch sends no more.
EVERY_REQUEST_STATUS = frozenset({401, 402, 403, 404})
# Requests that failed on connection errors after all their retries, with none answered yet, after which the
# batch sends no more: the server is down, and each further request would wait out its own retries.
UNREACHABLE_AFTER = 3


class APIRequestError(MemauditError):
    """API requests that still failed after their retries; the message says how many and why."""


# ----------------------------------------------------------------------------- from the config

def api_backend_from_config(config: dict, model: str, *, rule: str | None = None,
                            cache: ResponseCache | str | Path | bool = True,
                            require_key: bool = True) -> "APIBackend":
    """The backend of one configured API model, with the shared cache and the model's price.

    ``rule`` labels the model's usage rows in the cost ledger (pass ``snakemake.rule``);
    ``cache``: ``True`` for the config's shared cache (``api.cache``), ``False`` for none,
    or a cache or path; ``require_key=False`` builds one that can plan and price
    requests without its key.
    """
    entry = config["models"][model]
    backend = entry.get("backend", "hf")
    api = api_entry(config, model)
    settings = api_settings(config)
    cls = get_backend_class(backend)
    if not issubclass(cls, APIBackend):
        raise ConfigError(f"models.{model}.backend: {backend!r} is not an API backend")
    policy = RetryPolicy(max_attempts=int(api["max_retries"]) + 1, base_delay=float(settings["backoff_base"]),
                         max_delay=float(settings["backoff_max"]),
                         max_retry_after=float(settings["max_retry_after"]))
    return cls(api["model_id"], name=model, revision=api.get("revision"), base_url=api.get("base_url"),
               api_key_env=api.get("api_key_env"), concurrency=int(api["concurrency"]),
               timeout=float(api["timeout"]), top_logprobs=int(api["top_logprobs"]),
               logprobs=bool(api["logprobs"]), max_tokens_field=api.get("max_tokens_field"),
               **({"reasoning": True} if api.get("reasoning") else {}),
               **({"thinking": False} if api.get("thinking") is False else {}),
               **({"system_role": False} if api.get("system_role") is False else {}),
               **({"repetition_penalty": api["repetition_penalty"]} if "repetition_penalty" in api else {}),
               pricing=pricing_for(config, model),
               cache=settings["cache"] if cache is True else (None if cache is False else cache),
               rule=rule, on_error=settings["on_error"], retry_policy=policy, require_key=require_key)


def custom_headers(text: str | None) -> dict[str, str]:
    """The headers ``ANTHROPIC_CUSTOM_HEADERS`` or ``OPENAI_CUSTOM_HEADERS`` adds, read as the SDKs read them
    (one ``name: value`` a line: the text before the first colon is the name, after it the value, both
    stripped; a line without a colon is skipped), names lowercased (HTTP's are case-insensitive)."""
    headers = {}
    for line in (text or "").split("\n"):
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return headers


def credential_header(name: str) -> bool:
    """Whether a header carries a credential, not a setting: :data:`CREDENTIAL_HEADERS` and every name that
    says so (a gateway's ``helicone-auth``, ``x-portkey-api-key``, ``cf-aig-authorization``, Azure's
    ``api-key``, ``x-goog-api-key``: :func:`memaudit.secrets.keyish_name`)."""
    from memaudit.secrets import keyish_name

    return name in CREDENTIAL_HEADERS or keyish_name(name)


def custom_headers_digest(text: str | None, *, legacy: bool = False) -> str | None:
    """SHA-256 of the :func:`custom_headers` that may change an answer (an ``anthropic-beta`` feature, an API
    version, a gateway's routing), credentials left out (:func:`credential_header`: a rotated gateway token
    asks nothing again); the key gets the hash, never the headers. ``None`` where none is left, so a key
    without them is what it always was. ``legacy``: the digest before credential headers other than
    :data:`CREDENTIAL_HEADERS` were left out, under which earlier runs cached their answers (still served)."""
    headers = {name: value for name, value in custom_headers(text).items()
               if not (name in CREDENTIAL_HEADERS if legacy else credential_header(name))}
    return hashlib.sha256(canonical_json(headers).encode("utf-8")).hexdigest() if headers else None


# ----------------------------------------------------------------------------- requests and results

@dataclass(frozen=True)
class PlannedCall:
    """One wire request; ``key`` is the SHA-256 of its canonical identity (see :mod:`.cache`)."""

    key: str
    identity: dict
    body: dict
    prompt: str
    system_prompt: str | None
    max_output_tokens: int
    # the key an earlier version gave the same request (a gateway credential header in its key), looked up
    # where ``key`` is not cached: answers paid for then are still served
    legacy_key: str | None = None


def token_count(value) -> int:
    """A usage block's count of tokens: absent or null is none, as is a negative one."""
    return max(int(value or 0), 0)


@dataclass
class Parsed:
    """The parts of a provider response the probes use, whatever the wire format."""

    text: str | None
    input_tokens: int
    output_tokens: int
    finish_reason: str | None
    provider_refusal: bool = False
    # per generated position: the sampled token and the top alternatives, [token, logprob]
    tokens: list[tuple[str, float]] | None = None
    top_logprobs: list[list[tuple[str, float]]] | None = None
    # of input_tokens, those the provider served from its prompt cache (billed at a discount)
    provider_cached_tokens: int = 0
    # of input_tokens, those written to the provider's prompt cache for 5 minutes and for 1 hour
    # (Anthropic reports them and bills them above the input price)
    provider_cache_write_5m_tokens: int = 0
    provider_cache_write_1h_tokens: int = 0


@dataclass
class CallOutcome:
    key: str
    status: str
    response: dict | None = None
    parsed: Parsed | None = None
    from_cache: bool = False
    requested_at: str | None = None
    attempts: int = 0
    error: str | None = None


@dataclass
class OptionScores:
    """Log-probabilities of a fixed set of next tokens (e.g. DE-COP's option letters) for one prompt.

    ``logprobs[option]`` is ``log sum_v p(v)`` over the option's variants
    (:func:`~memaudit.backends.base.option_variants`) found in the returned top
    list, and ``nan`` when none is there: OpenAI returns at most the top 20 and
    ``logit_bias`` does not change them, so a letter outside them is *missing*,
    not improbable-by-a-known-amount. Its probability is then at most that of the
    last listed token: ``missing_upper_bound``.
    """

    logprobs: dict[str, float]
    missing: tuple[str, ...]
    top: list[tuple[str, float]]
    missing_upper_bound: float | None
    status: str
    from_cache: bool = False
    requested_at: str | None = None
    error: str | None = None


def option_logprobs_from_top(top: Sequence[Sequence],
                             options: Sequence[str]) -> tuple[dict[str, float], tuple[str, ...]]:
    """Per option, ``logsumexp`` of the listed log-probabilities of its variants; ``nan`` if none is listed."""
    scores, missing = {}, []
    for opt in options:
        variants = set(option_variants(opt))
        vals = [float(lp) for tok, lp in top if tok in variants]
        if vals:
            m = max(vals)
            scores[opt] = m + math.log(sum(math.exp(v - m) for v in vals))
        else:
            scores[opt] = math.nan
            missing.append(opt)
    return scores, tuple(missing)


def split_sdk_fields(create, body: dict) -> tuple[dict, dict]:
    """``body`` as (keyword arguments the SDK method ``create`` names, the rest for ``extra_body``).

    SDK releases add and drop named parameters (the anthropic 2.x SDK names no
    ``temperature``) while the wire format keeps them; sending unnamed ones as
    ``extra_body`` puts the same JSON on the wire whichever SDK is installed.
    """
    func = getattr(create, "__func__", create)
    named = _SDK_PARAMETERS.get(func)
    if named is None:
        import inspect

        named = frozenset(inspect.signature(create).parameters) - {"extra_body", "extra_headers", "extra_query",
                                                                   "timeout"}
        _SDK_PARAMETERS[func] = named
    return ({k: v for k, v in body.items() if k in named}, {k: v for k, v in body.items() if k not in named})


_SDK_PARAMETERS: dict = {}


def response_bytes(raw) -> bytes:
    """The body of an SDK raw response (the SDKs' raw-response classes differ: ``.content`` or ``.read()``)."""
    content = getattr(raw, "content", None)
    return content if isinstance(content, bytes) else raw.read()


def decode_json(content: bytes, *, label: str) -> dict:
    """A response body as a JSON object; anything else is a (retryable) malformed response."""
    import json

    try:
        data = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        head = redact(content[:60].decode("utf-8", "replace"))
        raise RequestFault(f"{label}: malformed response, not valid JSON ({exc}; body starts {head!r})",
                           retryable=True, status=None) from None
    if not isinstance(data, dict):
        raise RequestFault(f"{label}: malformed response, a JSON {type(data).__name__} instead of an object",
                           retryable=True)
    return data


# ----------------------------------------------------------------------------- the backend

class APIBackend(Backend):
    """A remote model behind one HTTP API; subclasses supply the wire format.

    Subclasses define ``backend_name``, ``default_key_env``, ``default_base_url``
    and five methods: ``_make_client(api_key)``, ``_body(prompt, params,
    top_logprobs)`` (the wire request), ``_send(body)`` (the SDK call, returning
    the decoded JSON body), ``_parse(data)`` (a :class:`Parsed`) and
    ``_sdk_errors()`` (the SDK's exception classes).
    """

    backend_name = "api"
    sends_seed = True  # whether the wire request carries params.seed (else it is no part of the cache key)
    default_key_env = ""
    default_base_url = ""
    usage_keys = ("input_tokens", "output_tokens")  # the response's usage block: (input, output) token counts
    custom_headers_env = ""  # the environment variable whose headers the SDK adds to every request

    def __init__(self, model_id: str, *, name: str | None = None, revision: str | None = None,
                 base_url: str | None = None, api_key_env: str | None = None, concurrency: int = 4,
                 timeout: float = 60.0, top_logprobs: int = 20, logprobs: bool = True,
                 max_tokens_field: str | None = None, pricing: Pricing | None = None,
                 cache: ResponseCache | str | Path | None = None, rule: str | None = None,
                 on_error: str = "raise", retry_policy: RetryPolicy | None = None,
                 max_retries: int | None = None, require_key: bool = True):
        if on_error not in ("raise", "record"):
            raise ConfigError(f"on_error must be 'raise' or 'record', not {on_error!r}")
        if concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
        self.model_id = model_id
        self.name = name or model_id
        self.revision = revision
        self.base_url = base_url
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.top_logprobs = int(top_logprobs)
        self.logprobs = bool(logprobs)
        self.max_tokens_field = max_tokens_field
        self.pricing = pricing
        self.rule = rule
        self.on_error = on_error
        if retry_policy is None:
            retry_policy = RetryPolicy() if max_retries is None else RetryPolicy(max_attempts=max_retries + 1)
        self.retry_policy = retry_policy
        self.cache = ResponseCache(cache) if isinstance(cache, (str, Path)) else cache
        # what else may decide the answer: the headers the SDK adds from its environment variable, hashed
        headers_text = os.environ.get(self.custom_headers_env) if self.custom_headers_env else None
        digest = custom_headers_digest(headers_text)
        self.key_fields = {"custom_headers": digest} if digest is not None else {}
        legacy = custom_headers_digest(headers_text, legacy=True)
        self.legacy_key_fields = ({"custom_headers": legacy} if legacy is not None else {}) \
            if legacy != digest else None
        for name, value in custom_headers(headers_text).items():
            if credential_header(name):  # a gateway's key, quoted back by its 401, shows in no message or log
                for part in (value, *value.split()):
                    register_secret(part)
        self.run_id = uuid.uuid4().hex[:12]
        self.label = f"{self.backend_name} model {self.name!r}"
        self.takes_repetition_penalty = takes_repetition_penalty(self.backend_name, base_url)
        # A keyless OpenAI-compatible server needs no variable; the provider's own API does, also where
        # base_url names the provider's host (it sent the key "none" there)
        self.api_key_env = api_key_env or (self.default_key_env if provider_api(self.backend_name, base_url) else None)
        self._cooldown = Cooldown()
        self._counts_lock = threading.Lock()
        # Totals over this backend's life, for logs and benchmarks.
        self.counts = {"sent": 0, "cached": 0, "retries": 0, "failed": 0}
        self._key: Secret | None = Secret(NO_KEY) if self.api_key_env is None else None
        # why a key the variable holds cannot be used (two keys pasted), where planning and pricing go on without it
        self.key_problem: str | None = None
        if self.api_key_env is not None:
            try:
                self._key = read_api_key(self.api_key_env, label=self.label)
            except ConfigError as exc:
                if require_key:
                    raise
                # planning and pricing only (``estimate-cost`` before the key is exported): a blank or malformed
                # key is no more needed than an unset one; sending anything then fails with this message
                self.key_problem = str(exc) if os.environ.get(self.api_key_env, "").strip() else None
        self.key_present = self._key is not None
        self._sdk_client = None
        self._client_lock = threading.Lock()

    @property
    def _client(self):
        return self._sdk_client if self._sdk_client is not None else self._ensure_client()

    def _ensure_client(self):
        """The SDK client, built before the first request is sent: a fully cached rerun never imports the SDK."""
        with self._client_lock:
            if self._sdk_client is None:
                if self._key is None:
                    self._key = read_api_key(self.api_key_env, label=self.label)  # raises, naming the variable
                self._sdk_client = self._make_client(self._key.value)
            return self._sdk_client

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model_id={self.model_id!r}, name={self.name!r}, "
                f"base_url={redact(self.base_url) if self.base_url else None!r}, api_key_env={self.api_key_env!r})")

    def describe(self) -> dict:
        return {"backend": self.backend_name, "model_id": self.model_id, "revision": self.revision,
                "base_url": redact(self.base_url) if self.base_url else self.default_base_url}

    def close(self) -> None:
        """Close the cache connection (the last one to close folds SQLite's WAL file back into the database)."""
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> "APIBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- subclass hooks -------------------------------------------------------------------

    @abc.abstractmethod
    def _make_client(self, api_key: str):
        """The SDK client, with the SDK's own retries off (ours are the ones counted)."""

    @abc.abstractmethod
    def _body(self, prompt: str, params: GenerationParams, top_logprobs: int) -> dict:
        """The JSON body of the wire request for one prompt."""

    @abc.abstractmethod
    def _send(self, body: dict) -> dict:
        """Send one request through the SDK; the decoded JSON response body."""

    @abc.abstractmethod
    def _parse(self, data: dict) -> Parsed:
        """Read a response body; raises KeyError/TypeError/... when it is not in the API's format."""

    @abc.abstractmethod
    def _sdk_errors(self) -> tuple[type, type, type]:
        """The SDK's (APIStatusError, APITimeoutError, APIConnectionError) classes."""

    # -- planning -------------------------------------------------------------------------

    def plan(self, prompts: Sequence[str], params: GenerationParams, *, top_logprobs: int = 0,
             option_logprobs: bool = False) -> list[PlannedCall]:
        """The wire requests for ``prompts``, with their cache keys, without sending anything."""
        if option_logprobs:
            params, top_logprobs = self._option_params(params), self.top_logprobs
        sampled = params.temperature > 0
        calls = []
        for prompt in prompts:
            body = self._body(prompt, params, top_logprobs)
            identity = {"v": KEY_SCHEMA_VERSION, "backend": self.backend_name, "model_id": self.model_id,
                        "revision": self.revision, "body": body,
                        # a seed the API never receives changes no answer: no part of the key then
                        **({"seed": params.seed} if self.sends_seed else {}),
                        # greedy answers do not depend on the sample index: one cache entry serves all
                        "sample_index": params.sample_index if sampled else 0}
            legacy = None if self.legacy_key_fields is None else request_key({**identity, **self.legacy_key_fields})
            identity.update(self.key_fields)
            calls.append(PlannedCall(request_key(identity), identity, body, prompt, params.system_prompt,
                                     params.max_new_tokens, legacy_key=legacy))
        return calls

    @staticmethod
    def _option_params(params: GenerationParams) -> GenerationParams:
        # One greedy token: the option letters are read from the first position's top list.
        return dataclasses.replace(params, max_new_tokens=1, temperature=0.0, top_p=1.0, stop=(),
                                   sample_index=0)

    @staticmethod
    def wire_seed(params: GenerationParams) -> int:
        """The seed sent to the API: distinct per sample, as the HF backend seeds torch."""
        return params.seed * 1000003 + params.sample_index if params.temperature > 0 else params.seed

    # -- serving --------------------------------------------------------------------------

    def _serve(self, calls: Sequence[PlannedCall]) -> list[CallOutcome]:
        """Outcomes for ``calls`` in order: cache hits first, then the rest from the thread pool."""
        unique: dict[str, PlannedCall] = {}
        for c in calls:
            unique.setdefault(c.key, c)
        outcomes: dict[str, CallOutcome] = {}
        if self.cache is not None:
            hits = self.cache.get_many(unique)
            legacy = {c.legacy_key: k for k, c in unique.items() if c.legacy_key and k not in hits}
            if legacy:
                hits.update({legacy[old]: hit for old, hit in self.cache.get_many(legacy).items()})
            usage, unreadable = [], []
            for key, hit in hits.items():
                parsed, status, error = self._parse_safely(hit.response)
                if parsed is None:
                    # Only responses that parsed are stored: this entry was damaged since, and
                    # replaying it would record an invalid answer for a request that got a valid one.
                    log.warning("%s (cache entry %s in %s); asking again", error, key, self.cache.path)
                    unreadable.append(key)
                    continue
                outcomes[key] = CallOutcome(key, status, hit.response, parsed, from_cache=True,
                                            requested_at=hit.requested_at, attempts=hit.attempts, error=error)
                usage.append(self._usage(key, status, hit.input_tokens, hit.output_tokens, from_cache=True))
            self.cache.record_usage(usage)
            self.cache.discard(unreadable)
        todo = [c for k, c in unique.items() if k not in outcomes]
        with self._counts_lock:
            self.counts["cached"] += len(outcomes)
        if todo:
            self._ensure_client()  # or fail on a missing key, before any thread starts
            log.info("%s: %d requests: %d cached, %d to send (%d in flight at most)", self.label, len(unique),
                     len(outcomes), len(todo), self.concurrency)
            self._send_all(todo, outcomes)
        return [outcomes[c.key] for c in calls]

    def _send_all(self, todo: Sequence[PlannedCall], outcomes: dict[str, CallOutcome]) -> None:
        t0 = time.monotonic()
        every = max(1, len(todo) // 10)
        done = 0
        stop = threading.Event()
        halt = _Halt()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo)),
                                thread_name_prefix=f"{self.backend_name}-{self.name}") as pool:
            futures = [pool.submit(self._fetch, c, stop, halt) for c in todo]
            try:
                for fut in as_completed(futures):
                    outcome = fut.result()
                    outcomes[outcome.key] = outcome
                    done += 1
                    if done % every == 0 or done == len(todo):
                        log.info("%s: %d/%d sent in %.1fs (%d retries so far)", self.label, done, len(todo),
                                 time.monotonic() - t0, self.counts["retries"])
            except BaseException:
                # Interrupted: drop what has not started and send no retry (a request waiting
                # for one wakes at once); the calls in flight finish and are cached by their
                # threads before the pool closes.
                stop.set()
                for fut in futures:
                    fut.cancel()
                raise
        unsent = sum(1 for c in todo if outcomes[c.key].attempts == 0)
        if halt.cause is not None and unsent:
            log.warning("%s: %d of %d requests not sent, since every request meets the same fault: %s",
                        self.label, unsent, len(todo), halt.cause)

    def _readable_attempt(self, call: PlannedCall) -> tuple[dict, Parsed, str, str | None]:
        """One attempt and its parse. Valid JSON that is not a response of this API (an error object sent with
        status 200 by a proxy, a missing field) is a fault like malformed JSON: retried, and an error once the
        retries are spent, so ``on_error: raise`` stops the job and a rerun asks again. It was an invalid answer,
        which the prefix and CopyBench probes scored as an empty text (0) in outputs that looked finished. What
        its usage block says was billed goes to the ledger all the same, each time."""
        data = self._attempt(call.body)
        parsed, status, error = self._parse_safely(data)
        if parsed is None:
            billed = self._billed_tokens(data)
            if self.cache is not None and (billed.input_tokens or billed.output_tokens):
                self.cache.record_usage([self._usage_of(call.key, STATUS_INVALID, billed)])
            raise RequestFault(error, retryable=True)
        return data, parsed, status, error

    def _fetch(self, call: PlannedCall, stop: threading.Event | None = None,
               halt: "_Halt | None" = None) -> CallOutcome:
        requested_at = utc_now()
        t0 = time.monotonic()
        try:
            (data, parsed, status, error), attempts = call_with_retries(
                lambda: self._readable_attempt(call), self.retry_policy, cooldown=self._cooldown,
                on_retry=self._on_retry, stop=stop)
        except RetriesStopped as exc:
            if halt is None or halt.cause is None:  # the batch was interrupted: its outcome is never read
                return CallOutcome(call.key, STATUS_ERROR, requested_at=requested_at, attempts=exc.attempts,
                                   error=f"{self.label}: {exc}")
            with self._counts_lock:
                self.counts["failed"] += 1
            return CallOutcome(call.key, STATUS_ERROR, requested_at=requested_at, attempts=exc.attempts,
                               error=f"{self.label}: not sent{' again' if exc.attempts else ''}, since every "
                                     f"request meets the same fault: {halt.cause}")
        except RetriesExhausted as exc:
            with self._counts_lock:
                self.counts["failed"] += 1
            message = redact(str(exc))  # every fault's message starts with this model's label already
            log.warning("%s", message)
            if halt is not None and stop is not None and halt.failed(exc.fault, message, self.label):
                stop.set()  # what has not started is not sent; a request waiting for its retry sends none
            return CallOutcome(call.key, STATUS_ERROR, requested_at=requested_at, attempts=exc.attempts,
                               error=message)
        if halt is not None:
            halt.answered()
        with self._counts_lock:
            self.counts["sent"] += 1
        usage = self._usage_of(call.key, status, parsed)
        if self.cache is not None:
            self.cache.put(key=call.key, backend=self.backend_name, model_id=self.model_id, request=call.identity,
                           response=data, input_tokens=parsed.input_tokens, output_tokens=parsed.output_tokens,
                           requested_at=requested_at, seconds=time.monotonic() - t0, attempts=attempts, usage=usage)
        return CallOutcome(call.key, status, data, parsed, requested_at=requested_at, attempts=attempts,
                           error=error)

    def _attempt(self, body: dict) -> dict:
        status_error, timeout_error, connection_error = self._sdk_errors()
        try:
            return self._send(body)
        except RequestFault:
            raise
        except timeout_error:
            raise RequestFault(f"{self.label}: timed out after {self.timeout:g}s", retryable=True) from None
        except connection_error as exc:
            raise RequestFault(redact(f"{self.label}: connection error ({exc})"), retryable=True,
                               connection=True) from None
        except status_error as exc:
            status = int(exc.status_code)
            error = _error_object(exc)
            if status == 400 and error.get("code") in REFUSAL_ERROR_CODES:
                # the provider declined the prompt itself: its refusal, kept as an answer is (asked again, the
                # same prompt is declined again), where an error was never cached and stopped the job each rerun
                return {REFUSED_KEY: {"status": status, "error": error}}
            detail = _error_detail(exc)
            # a 429 for an exhausted quota or billing limit is no rate limit: retrying cannot help
            quota = _quota_spent(error) if status == 429 else None
            # the server's own word decides over the status, as in the SDKs' retries
            said = should_retry_header(exc.response.headers)
            retryable = (status in RETRYABLE_STATUS if said is None else said) and not quota
            why_not = quota or ("the server said x-should-retry: false" if said is False
                                else "the request itself was rejected")
            raise RequestFault(redact(f"{self.label}: HTTP {status}: {detail}"), retryable=retryable,
                               status=status, retry_after=parse_retry_after(exc.response.headers),
                               why_not_retried=why_not,
                               every_request=status in EVERY_REQUEST_STATUS or quota is not None) from None

    def _on_retry(self, fault: RequestFault, attempt: int, delay: float) -> None:
        with self._counts_lock:
            self.counts["retries"] += 1
        log.warning("%s (attempt %d of %d); retrying in %.2fs", fault.message, attempt,
                    self.retry_policy.max_attempts, delay)

    def _parse_safely(self, data: dict) -> tuple[Parsed | None, str, str | None]:
        try:
            parsed = _refused(data) if REFUSED_KEY in data else self._parse(data)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            return None, STATUS_INVALID, redact(f"{self.label}: response not in the {self.backend_name} format "
                                                f"({type(exc).__name__}: {exc})")
        if is_refusal(parsed.text, provider_signal=parsed.provider_refusal):
            return parsed, STATUS_REFUSAL, None
        if not parsed.text and not parsed.top_logprobs:
            return parsed, STATUS_INVALID, f"{self.label}: empty answer (finish_reason {parsed.finish_reason!r})"
        return parsed, STATUS_OK, None

    def _usage_counts(self, usage: dict) -> dict:
        """:class:`Parsed`'s token fields from a response's usage block: the input and output tokens
        (``usage_keys``); a backend whose provider reports prompt-cache tokens adds them. One reading
        for a response the parser reads and one it cannot (:meth:`_billed_tokens`), so both are billed alike."""
        n_in, n_out = (token_count(usage.get(k)) for k in self.usage_keys)
        return {"input_tokens": n_in, "output_tokens": n_out}

    def _billed_tokens(self, data: Any) -> Parsed:
        """The tokens a response's usage block counts (:meth:`_usage_counts`), as a :class:`Parsed` without
        text; none where it counts nothing readable: a response the parser cannot read may still have
        been billed, prompt-cache reads and writes included."""
        try:
            counts = self._usage_counts(data.get("usage") or {})
        except (AttributeError, TypeError, ValueError):
            counts = {"input_tokens": 0, "output_tokens": 0}
        return Parsed(text=None, finish_reason=None, **counts)

    def _usage_of(self, key: str, status: str, parsed: Parsed) -> UsageRow:
        """The ledger row of a response sent now, priced from ``parsed``'s token counts."""
        return self._usage(key, status, parsed.input_tokens, parsed.output_tokens, from_cache=False,
                           provider_cached=parsed.provider_cached_tokens,
                           cache_write_5m=parsed.provider_cache_write_5m_tokens,
                           cache_write_1h=parsed.provider_cache_write_1h_tokens)

    def _usage(self, key: str, status: str, n_in: int, n_out: int, *, from_cache: bool,
               provider_cached: int = 0, cache_write_5m: int = 0, cache_write_1h: int = 0) -> UsageRow:
        if from_cache:
            cost: float | None = 0.0
            provider_cached = cache_write_5m = cache_write_1h = 0
        elif self.pricing is not None:
            cost = self.pricing.cost(n_in, n_out, provider_cached, cache_write_5m, cache_write_1h)
        else:
            cost = None
        return UsageRow(self.run_id, self.rule, self.name, self.backend_name, self.model_id, key, from_cache,
                        status, int(n_in), int(n_out), cost, int(provider_cached),
                        int(cache_write_5m) + int(cache_write_1h))

    def _raise_failures(self, outcomes: Sequence[CallOutcome]) -> None:
        if self.on_error != "raise":
            return
        unique = {o.key: o for o in outcomes}
        failed = [o for o in unique.values() if o.status == STATUS_ERROR]
        if failed:
            cached = "" if self.cache is None else " (the answered ones are cached: a rerun sends only what failed)"
            unsent = sum(1 for o in failed if o.attempts == 0)
            unsent = f", {unsent} of them not sent" if unsent else ""
            raise APIRequestError(f"{self.label}: {len(failed)} of {len(unique)} requests failed{unsent}{cached}. "
                                  f"First failure: {failed[0].error}")

    # -- request types --------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], params: GenerationParams, *,
                 top_logprobs: int = 0) -> list[Generation]:
        """Answers to ``prompts`` (a system prompt and decoding parameters from ``params``).

        ``params.chat`` is moot: chat APIs always apply the provider's own format.
        With ``top_logprobs > 0`` each answer's ``meta["top_logprobs"]`` lists the
        top alternatives at every generated position.
        """
        outcomes = self._serve(self.plan(prompts, params, top_logprobs=top_logprobs))
        self._raise_failures(outcomes)
        return [_cut_at_stops(self._generation(o), self.unsent_stops(params)) for o in outcomes]

    def unsent_stops(self, params: GenerationParams) -> tuple[str, ...]:
        """Stop strings the API is not sent (it would refuse them): the answer is cut at them here."""
        return ()

    def _generation(self, o: CallOutcome) -> Generation:
        p = o.parsed
        meta: dict[str, Any] = {"attempts": o.attempts, "key": o.key}
        if p is None:
            return Generation("", status=o.status, from_cache=o.from_cache, requested_at=o.requested_at,
                              error=o.error, meta=meta)
        meta["finish_reason"] = p.finish_reason
        if p.top_logprobs is not None:
            meta["top_logprobs"] = [[list(t) for t in pos] for pos in p.top_logprobs]
            meta["tokens"] = [list(t) for t in (p.tokens or [])]
        return Generation(p.text or "", p.input_tokens, p.output_tokens, meta, status=o.status,
                          from_cache=o.from_cache, requested_at=o.requested_at, error=o.error)


class _Halt:
    """Whether a batch stops sending, and why: at the first request that failed on a fault every request meets
    alike (:attr:`RequestFault.every_request`), or at the :data:`UNREACHABLE_AFTER`-th that failed on
    connection errors while none was answered. ``cause`` is the fault's message less the model's label."""

    def __init__(self):
        self.cause: str | None = None
        self._answered = False
        self._unreachable = 0
        self._lock = threading.Lock()

    def answered(self) -> None:
        with self._lock:
            self._answered = True

    def failed(self, fault: RequestFault, message: str, label: str) -> bool:
        """Note a request that failed for good with ``fault``; True where the batch stops now."""
        with self._lock:
            if self.cause is not None:
                return False
            self._unreachable += bool(fault.connection) and not self._answered
            if fault.every_request or self._unreachable >= UNREACHABLE_AFTER:
                self.cause = message.removeprefix(f"{label}: ")
                if not fault.every_request:
                    self.cause += f" ({self._unreachable} requests failed so, none was answered)"
                return True
            return False


def _refused(data: dict) -> Parsed:
    """A provider's refusal by HTTP 400 (:data:`REFUSAL_ERROR_CODES`) as an answer: no text, no tokens
    (none are billed), the provider's signal, and its error code as the finish reason."""
    code = data[REFUSED_KEY]["error"]["code"]
    if code not in REFUSAL_ERROR_CODES:
        raise ValueError(f"{REFUSED_KEY} with error code {code!r}")
    return Parsed(text=None, input_tokens=0, output_tokens=0, finish_reason=code, provider_refusal=True)


def _error_object(exc) -> dict:
    """The error object of an SDK status error's body (the openai SDK keeps the ``error`` object alone, the
    anthropic SDK the whole body); empty where the body is none (an HTML page)."""
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    return err if isinstance(err, dict) else {}


def _quota_spent(error: dict) -> str | None:
    """Why an HTTP 429 is no rate limit but a spent quota or billing limit (OpenAI's ``insufficient_quota``,
    Anthropic's spend limits in ``error.details.error_code``), in words; ``None`` for a rate limit (Anthropic's
    ``ramp_limit_exceeded`` is one: requests came faster than the account's limit grows)."""
    if "insufficient_quota" in (str(error.get("code") or ""), str(error.get("type") or "")):
        return "the account's quota is spent"
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    return f"the organization's spend limit is reached: {code}" if code in SPEND_LIMIT_CODES else None


def _cut_at_stops(g: Generation, stops: Sequence[str]) -> Generation:
    """``g`` with its text ended before the first of ``stops`` it holds (``meta.cut_at_stop``), as a
    server ends an answer at a stop string; ``g`` itself where it holds none."""
    found = [(g.text.find(s), s) for s in stops if s and s in g.text]
    if not found:
        return g
    at, stop = min(found)
    return dataclasses.replace(g, text=g.text[:at], meta={**g.meta, "cut_at_stop": stop})


ERROR_DETAIL_CHARS = 300


def _error_detail(exc) -> str:
    """What the server said, on one line of at most :data:`ERROR_DETAIL_CHARS` characters.

    An error message may span lines, and a proxy's error page is HTML (its tags dropped here),
    which the SDKs quote whole (anthropic) or not at all (openai): either made a final error
    of many lines, or one that said only the status.
    """
    body = getattr(exc, "body", None)
    detail = None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            detail = str(err["message"])
        elif body.get("detail"):  # FastAPI-based servers
            detail = str(body["detail"])
    elif isinstance(body, str) and body.strip():
        detail = re.sub(r"<[^>]*>", " ", body)
    # redacted before it is cut, so that no part of a key is left unmatched at the cut
    detail = " ".join(redact(detail or str(getattr(exc, "message", exc))).split())
    return detail if len(detail) <= ERROR_DETAIL_CHARS else detail[:ERROR_DETAIL_CHARS - 1] + "…"
