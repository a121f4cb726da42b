"""Anthropic Messages (black-box: generation only; the API returns no log-probabilities).

The official ``anthropic`` SDK sends the requests (``with_raw_response``, so the
cache stores the exact JSON), with its own retries off. Refusals are read from
the answer text and from ``stop_reason: "refusal"``. The Messages API has no
seed: repeated samples of one prompt are told apart in the cache by their
sample index only, and are not reproducible on the provider's side. A model that
thinks by default (its thinking blocks spend the token limit, and it refuses a
temperature other than 1) is sent ``thinking: {"type": "disabled"}`` where the
config says ``api.thinking: false``. The headers
of ``ANTHROPIC_CUSTOM_HEADERS`` are in the cache key, hashed
(:func:`memaudit.backends.api.custom_headers_digest`).
"""

from __future__ import annotations

from memaudit.backends.api import (APIBackend, Parsed, decode_json, response_bytes, split_sdk_fields,
                                  token_count)
from memaudit.backends.base import GENERATE, GenerationParams
from memaudit.errors import ConfigError


class AnthropicBackend(APIBackend):
    backend_name = "anthropic"
    sends_seed = False  # the Messages API has no seed
    capabilities = frozenset({GENERATE})
    default_key_env = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"
    custom_headers_env = "ANTHROPIC_CUSTOM_HEADERS"

    def __init__(self, model_id: str, *, thinking: bool | None = None, **kwargs):
        super().__init__(model_id, **kwargs)
        # False: extended thinking off on the wire, for a model that thinks by default; None: the model's default
        self.thinking = thinking

    def _make_client(self, api_key: str):
        import anthropic

        # base_url always explicit: left unset, the SDK would follow ANTHROPIC_BASE_URL.
        return anthropic.Anthropic(api_key=api_key, base_url=self.base_url or self.default_base_url,
                                   timeout=self.timeout, max_retries=0)

    def _sdk_errors(self):
        import anthropic

        return anthropic.APIStatusError, anthropic.APITimeoutError, anthropic.APIConnectionError

    def _body(self, prompt: str, params: GenerationParams, top_logprobs: int) -> dict:
        if top_logprobs:
            raise ConfigError(f"{self.label}: the Messages API returns no log-probabilities")
        if params.repetition_penalty != 1.0:
            raise ConfigError(f"{self.label}: the Messages API has no repetition_penalty (use 1.0)")
        body = {"model": self.model_id, "max_tokens": params.max_new_tokens,
                "messages": [{"role": "user", "content": prompt}]}
        if params.system_prompt:
            body["system"] = params.system_prompt
        if self.thinking is False:
            body["thinking"] = {"type": "disabled"}
        # Recent models (Sonnet 4.5, Opus 4.1, ...) refuse temperature and top_p together (HTTP 400): top_p is
        # sent only where it changes the sampling (above temperature 0), and then alone at the API's default
        # temperature, 1.0 (the fluency judge's 1.0 and 0.9)
        send_top_p = params.top_p != 1.0 and params.temperature > 0
        if not (send_top_p and params.temperature == 1.0):
            body["temperature"] = params.temperature
        if send_top_p:
            body["top_p"] = params.top_p
        sent = [s for s in params.stop if s.strip()]
        if sent:
            body["stop_sequences"] = sent
        return body

    def unsent_stops(self, params: GenerationParams) -> tuple[str, ...]:
        """The Messages API refuses a stop sequence of whitespace alone (HTTP 400: "each stop sequence
        must contain non-whitespace"; CopyBench's is ``"\n\n\n"``): such stops are cut client-side."""
        return tuple(s for s in params.stop if not s.strip())

    def _send(self, body: dict) -> dict:
        named, extra = split_sdk_fields(self._client.messages.create, body)
        raw = self._client.messages.with_raw_response.create(**named, extra_body=extra or None)
        return decode_json(response_bytes(raw), label=self.label)

    def _parse(self, data: dict) -> Parsed:
        if data.get("type") == "error":
            raise ValueError(f"an error object instead of a message: {(data.get('error') or {}).get('message')}")
        blocks = data["content"]
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        stop = data.get("stop_reason")
        return Parsed(text=text, finish_reason=stop, provider_refusal=stop == "refusal",
                      **self._usage_counts(data.get("usage") or {}))

    def _usage_counts(self, usage: dict) -> dict:
        # input_tokens leaves out what the prompt cache read or wrote; memaudit sets no cache_control, so
        # both are 0, but a proxy that caches counts them here: read ones at the cached price, written
        # ones at theirs (cache_creation splits them by lifetime; without it, all have the default, 5 minutes)
        counts = super()._usage_counts(usage)
        read = token_count(usage.get("cache_read_input_tokens"))
        split = usage.get("cache_creation") or {}
        write_1h = token_count(split.get("ephemeral_1h_input_tokens"))
        written = token_count(usage.get("cache_creation_input_tokens")
                              or token_count(split.get("ephemeral_5m_input_tokens")) + write_1h)
        return {**counts, "input_tokens": counts["input_tokens"] + read + written, "provider_cached_tokens": read,
                "provider_cache_write_5m_tokens": max(written - write_1h, 0),
                "provider_cache_write_1h_tokens": min(write_1h, written)}
