"""OpenAI Chat Completions, and any OpenAI-compatible server (vLLM, llama.cpp, ``memaudit serve``).

Black-box: generation, and option log-probabilities read from the first answer
position's ``top_logprobs`` (at most 20, the API's limit). The official ``openai``
SDK sends the requests (``with_raw_response``, so the exact JSON the server sent
is what the cache stores); its own retries are off.

Wire details a researcher should know:

- the length parameter is ``max_completion_tokens`` on OpenAI itself (``max_tokens``
  is deprecated there and refused by reasoning models) and ``max_tokens`` on
  compatible servers by default (older vLLM and llama.cpp know only that);
  ``api.max_tokens_field`` overrides it;
- at most 4 stop strings are sent (the API's limit); an answer is cut at the others on arrival;
- an answer's ``content`` given as a list of parts (some compatible servers) is the text of its
  ``text`` parts; a ``refusal`` part is the provider's refusal;
- ``repetition_penalty`` is not an OpenAI parameter; compatible servers that take
  it (vLLM) get it as an extra body field, OpenAI itself refuses it at once;
  ``api.repetition_penalty`` decides over the host (false: a server that refuses or drops it);
- sampled requests send ``seed * 1000003 + sample_index`` as the seed, so repeated
  samples of one prompt differ (the HF backend seeds torch the same way).
"""

from __future__ import annotations

from typing import Sequence

from memaudit.backends.api import (APIBackend, OptionScores, Parsed, decode_json, option_logprobs_from_top,
                                   response_bytes, split_sdk_fields, token_count)
from memaudit.backends.base import (GENERATE, OPTION_LOGPROBS, STATUS_ERROR, STATUS_INVALID, STATUS_OK,
                                    STATUS_REFUSAL, GenerationParams, provider_api, system_into_user,
                                    takes_repetition_penalty)
from memaudit.errors import ConfigError

MAX_TOP_LOGPROBS = 20
# Chat Completions takes at most 4 stop strings (OpenAI's, Azure's and the proxies before them answer 400
# "Invalid 'stop': array too long"); the others are cut on arrival
MAX_STOPS = 4


class OpenAIBackend(APIBackend):
    backend_name = "openai"
    usage_keys = ("prompt_tokens", "completion_tokens")
    capabilities = frozenset({OPTION_LOGPROBS, GENERATE})
    default_key_env = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    custom_headers_env = "OPENAI_CUSTOM_HEADERS"

    def __init__(self, model_id: str, *, reasoning: bool = False, system_role: bool = True,
                 repetition_penalty: bool | None = None, **kwargs):
        super().__init__(model_id, **kwargs)
        # whether the endpoint takes vLLM's repetition_penalty: the config's word, else by its host
        self.takes_repetition_penalty = takes_repetition_penalty(self.backend_name, self.base_url, repetition_penalty)
        # false: a server whose chat template refuses a system message (Mistral-Instruct, Prometheus-7B on
        # vLLM answer 400) gets the system prompt before the user message, as the local backend does
        self.system_role = bool(system_role)
        # a reasoning model (o-series, gpt-5): no temperature, top_p, stop or seed on the wire (it refuses them)
        self.reasoning = bool(reasoning)
        self.sends_seed = not self.reasoning
        if not 1 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ConfigError(f"{self.label}: top_logprobs must be 1..{MAX_TOP_LOGPROBS} "
                              f"(the API returns at most {MAX_TOP_LOGPROBS}), not {self.top_logprobs}")
        if self.max_tokens_field is None:  # OpenAI's own API: the field its reasoning models take too
            self.max_tokens_field = ("max_completion_tokens"
                                     if self.reasoning or provider_api(self.backend_name, self.base_url)
                                     else "max_tokens")

    def _make_client(self, api_key: str):
        import openai

        # base_url always explicit: left unset, the SDK would follow OPENAI_BASE_URL from the environment.
        return openai.OpenAI(api_key=api_key, base_url=self.base_url or self.default_base_url,
                             timeout=self.timeout, max_retries=0)

    def _sdk_errors(self):
        import openai

        return openai.APIStatusError, openai.APITimeoutError, openai.APIConnectionError

    def _body(self, prompt: str, params: GenerationParams, top_logprobs: int) -> dict:
        messages = [{"role": "system", "content": params.system_prompt}] if params.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        if not self.system_role:
            messages = system_into_user(messages)
        body = {"model": self.model_id, "messages": messages, self.max_tokens_field: params.max_new_tokens}
        if not self.reasoning:
            body.update(temperature=params.temperature, seed=self.wire_seed(params))
            if params.top_p != 1.0:
                body["top_p"] = params.top_p
            if params.stop:
                body["stop"] = list(params.stop[:MAX_STOPS])
        if top_logprobs:
            if not self.logprobs:
                raise ConfigError(f"{self.label}: log-probabilities requested, but the config says the endpoint "
                                  f"returns none (api.logprobs: false)")
            body["logprobs"] = True
            body["top_logprobs"] = min(int(top_logprobs), MAX_TOP_LOGPROBS)
        if params.repetition_penalty != 1.0:
            if not self.takes_repetition_penalty:
                raise ConfigError(f"{self.label}: the endpoint takes no repetition_penalty (use 1.0): OpenAI's "
                                  f"API has none; an OpenAI-compatible server such as vLLM takes it "
                                  f"(api.repetition_penalty)")
            body["repetition_penalty"] = params.repetition_penalty
        return body

    def unsent_stops(self, params: GenerationParams) -> tuple[str, ...]:
        """A reasoning model is sent no stop string (some refuse them), another model the first
        :data:`MAX_STOPS`: the stops not sent are cut on arrival."""
        return tuple(params.stop) if self.reasoning else tuple(params.stop[MAX_STOPS:])

    def _send(self, body: dict) -> dict:
        named, extra = split_sdk_fields(self._client.chat.completions.create, body)
        raw = self._client.chat.completions.with_raw_response.create(**named, extra_body=extra or None)
        return decode_json(response_bytes(raw), label=self.label)

    def _parse(self, data: dict) -> Parsed:
        if "choices" not in data and isinstance(data.get("error"), dict):
            raise ValueError(f"an error object instead of a completion: {data['error'].get('message')}")
        choice = data["choices"][0]
        message = choice["message"]
        text = message.get("content")
        refusal = message.get("refusal")
        if isinstance(text, list):  # content parts (some compatible servers): the spec's text and refusal parts
            refusal = refusal or "".join(p["refusal"] for p in text if p.get("type") == "refusal") or None
            text = "".join(p["text"] for p in text if p.get("type") == "text")
        for field, value in (("content", text), ("refusal", refusal)):
            if value is not None and not isinstance(value, str):  # read as text past here, outside error handling
                raise TypeError(f"message.{field} is {type(value).__name__}, not a string")
        if not text and refusal:
            text = refusal
        tokens = top = None
        content = (choice.get("logprobs") or {}).get("content")
        if content is not None:
            tokens = [(e["token"], float(e["logprob"])) for e in content]
            top = [[(t["token"], float(t["logprob"])) for t in e.get("top_logprobs") or []] for e in content]
        return Parsed(text=text, finish_reason=choice.get("finish_reason"),
                      provider_refusal=bool(refusal) or choice.get("finish_reason") == "content_filter",
                      tokens=tokens, top_logprobs=top, **self._usage_counts(data.get("usage") or {}))

    def _usage_counts(self, usage: dict) -> dict:
        # prompt_tokens counts them all; prompt_tokens_details.cached_tokens, those OpenAI's prompt
        # cache served (billed at a discount); servers of the OpenAI format without it cache none
        return {**super()._usage_counts(usage),
                "provider_cached_tokens": token_count((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))}

    # -- option log-probabilities ---------------------------------------------------------

    def option_scores(self, prompts: Sequence[str], options: Sequence[Sequence[str]], *,
                      params: GenerationParams = GenerationParams()) -> list[OptionScores]:
        """Option log-probabilities with what is missing, per prompt (see :class:`OptionScores`).

        One request per prompt: a single greedy token with ``top_logprobs`` =
        ``api.top_logprobs`` (20 by default); the options are read from the first
        position's list. The request does not depend on the options, so one cached
        answer serves any option set. Status ``invalid`` when no option is listed, ``refusal`` (no
        letters) when the provider flagged a refusal, as :meth:`generate` counts one.
        """
        if len(prompts) != len(options):
            raise ValueError(f"{len(prompts)} prompts but {len(options)} option lists")
        calls = self.plan(prompts, params, option_logprobs=True)
        outcomes = self._serve(calls)
        self._raise_failures(outcomes)
        out = []
        for o, opts in zip(outcomes, options):
            nan_row = {opt: float("nan") for opt in opts}
            # a refusal (content_filter, message.refusal) gives no letters, whatever its top list holds
            if o.status in (STATUS_ERROR, STATUS_REFUSAL) or o.parsed is None:
                out.append(OptionScores(nan_row, tuple(opts), [], None, o.status, o.from_cache, o.requested_at,
                                        o.error))
                continue
            first = o.parsed.top_logprobs[0] if o.parsed.top_logprobs else []
            if not first:
                out.append(OptionScores(nan_row, tuple(opts), [], None, STATUS_INVALID, o.from_cache,
                                        o.requested_at, f"{self.label}: the response has no top_logprobs "
                                                        f"(if the endpoint offers none, set api.logprobs: false)"))
                continue
            scores, missing = option_logprobs_from_top(first, opts)
            status = STATUS_INVALID if len(missing) == len(opts) else STATUS_OK
            error = f"{self.label}: no option among the top {len(first)} tokens" if status == STATUS_INVALID else None
            out.append(OptionScores(scores, missing, list(first), min(lp for _, lp in first) if missing else None,
                                    status, o.from_cache, o.requested_at, error))
        return out

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[Sequence[str]], *,
                        params: GenerationParams = GenerationParams(),
                        batch_size: int | None = None) -> list[dict[str, float]]:
        """``{option: log-probability}`` per prompt, ``nan`` for an option outside the top list.

        ``batch_size`` is a local backend's hint and means nothing here: requests run at the
        model's ``api.concurrency``.

        Same shape as :meth:`memaudit.backends.hf.HFBackend.option_logprobs`
        (variants ``"A"``/``" A"`` summed); use :meth:`option_scores` for what is missing and why.
        """
        return [s.logprobs for s in self.option_scores(prompts, options, params=params)]
