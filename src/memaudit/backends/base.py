"""The model interface every probe talks to.

A backend serves some of three request types (lm-evaluation-harness style) and
declares which ones in ``capabilities``; every probe declares the capabilities it
needs, and :func:`check_probe_support` rejects a probe configured on a backend
that cannot serve it before any job runs.

- ``TOKEN_LOGPROBS``: per-token log-probabilities of a text, plus the mean and
  spread of the next-token distribution (white-box: loss, zlib, Min-K%, Min-K%++,
  reference; the gradient statistics of KTD build on the same access);
- ``OPTION_LOGPROBS``: log-probabilities of a fixed set of next tokens after a
  prompt, by teacher forcing (DE-COP's option letters, cloze candidates);
- ``GENERATE``: text generation (black-box: DE-COP answers, CopyBench literal and
  non-literal copying, prefix completion, paraphrasing);
- ``GRADIENT_NORMS``: per-text norms of the gradient of the mean token log-likelihood
  over (a selection of) the weights (white-box: KTD's importance score, Eq. 6 of the
  knockoff paper);
- ``WORD_LOGPROBS``: the log-probability of given words of a text (character spans) from
  their left context, and the rank of each word's first token among the next-token
  candidates (white-box: the information-guided probes' surprisal-token selection,
  Eq. 2 and 3 of that paper).

Backends: ``hf`` (local, white-box: all five), ``openai`` (Chat Completions, also
any OpenAI-compatible server through ``base_url``: generation and, from the top-20
``top_logprobs``, option log-probabilities) and ``anthropic`` (Messages:
generation). The API backends share their cache, retry, throttling and cost
plumbing in :mod:`memaudit.backends.api`.
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Sequence

from memaudit.config import API_BACKENDS, is_api_model  # noqa: F401 -- re-exported: the backends' own test
from memaudit.errors import ConfigError

TOKEN_LOGPROBS = "token_logprobs"
OPTION_LOGPROBS = "option_logprobs"
GENERATE = "generate"
GRADIENT_NORMS = "gradient_norms"
WORD_LOGPROBS = "word_logprobs"


@dataclass(frozen=True)
class GenerationParams:
    """Decoding parameters; frozen so a request can be hashed into a cache key."""

    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0
    system_prompt: str | None = None
    chat: bool = True  # apply the chat template (instruct models) or plain text
    seed: int = 0
    sample_index: int = 0  # distinguishes repeated samples of one prompt
    # Local causal models: a prompt whose max_new_tokens would run past the model's positions gets as
    # many new tokens as fit (``meta["capped_to"]``), as offline vLLM stops at max_model_len (CopyBench's
    # 1024-token stories after four demonstrations); False: an error naming the model. The prompt is
    # never cut either way, and a server decides for itself (OpenAI's and vLLM's answer 400).
    fit_context: bool = False


# Outcome of one request. A refusal and an invalid answer are results (counted in
# the refusal and invalid rates), not errors; ``error`` is a request that got no
# usable response at all.
STATUS_OK = "ok"
STATUS_REFUSAL = "refusal"
STATUS_INVALID = "invalid"
STATUS_ERROR = "error"
STATUSES = (STATUS_OK, STATUS_REFUSAL, STATUS_INVALID, STATUS_ERROR)


@dataclass
class Generation:
    """One generated answer.

    ``from_cache`` and ``requested_at`` (UTC, ISO 8601, when the model was actually
    asked) matter for API models, which change behind a fixed name over time.
    ``meta`` holds backend extras: ``finish_reason``, ``attempts``, per-position
    ``top_logprobs`` (lists of ``[token, logprob]``; a local model adds the token's raw bytes,
    :func:`memaudit.backends.hf.token_bytes`) when requested.
    """

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    meta: dict = field(default_factory=dict)
    status: str = STATUS_OK
    from_cache: bool = False
    requested_at: str | None = None
    error: str | None = None


def generate_batched_if_greedy(backend, prompts: Sequence[str], params: GenerationParams, *,
                               max_rows: int = 16, memfree=None) -> list[Generation]:
    """Greedy requests to an open model decode together (``HFBackend.generate_batched``: continuous
    batching, the same tokens as one at a time, through the generation cache; optionally MemFree);
    everything else, API models and sampled decodings, goes through :meth:`Backend.generate`."""
    batched = getattr(backend, "generate_batched", None)
    if batched is not None and params.temperature == 0:
        return batched(prompts, params, max_rows=max_rows, memfree=memfree)
    return backend.generate(prompts, params)


def option_variants(option: str) -> tuple[str, ...]:
    """The next-token strings that count as answering ``option``: ``"A"`` and ``" A"``.

    One definition for every backend, so white-box (teacher-forced) and black-box
    (top-logprob) option scores sum the same variants.
    """
    return (option,) if option.startswith(" ") else (option, " " + option)


def system_into_user(messages: Sequence[dict]) -> list[dict]:
    """``messages`` for a model without a system role: each system message's content before the next user
    message's, a blank line between (CopyBench's paper, A.2: "we simply prepend the system prompt to the
    instruction"; its reference code joins them with ``"\\n\\n"``). A system message with no user message
    after it becomes one."""
    out, pending = [], []
    for m in messages:
        if m["role"] == "system":
            pending.append(m["content"])
        elif m["role"] == "user" and pending:
            out.append({**m, "content": "\n\n".join([*pending, m["content"]])})
            pending = []
        else:
            out.append(dict(m))
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def option_token_ids(tokenizer, option: str) -> list[int]:
    """The token ids that answer ``option`` in a local model's next-token distribution.

    For each of :func:`option_variants`, the *last* token of its encoding, as the DE-COP
    reference reads ``tokenizer("A").input_ids[-1]``, kept when it decodes to the option alone.
    The first token would be wrong for SentencePiece tokenizers (Llama 2, Mistral): they encode
    ``" A"`` as ``▁`` then ``▁A``, and a bare ``▁`` shared by all four letters would add the same
    probability to each. A tokenizer with no such token for an option is an error naming it.
    """
    ids = set()
    for variant in option_variants(option):
        encoded = tokenizer(variant, add_special_tokens=False)["input_ids"]
        if encoded and tokenizer.decode([encoded[-1]]).strip() == option.strip():
            ids.add(int(encoded[-1]))
    if not ids:
        raise ValueError(f"no single token of this tokenizer answers option {option!r}")
    return sorted(ids)


class Backend(abc.ABC):
    """A model behind one of the request types above."""

    capabilities: frozenset[str] = frozenset()
    # whether generate() honours GenerationParams.repetition_penalty (:func:`takes_repetition_penalty`)
    takes_repetition_penalty: bool = True

    @abc.abstractmethod
    def describe(self) -> dict:
        """Identity of the model for records and cache keys (id, revision, adapter, n_params)."""

    def token_stats(self, texts: Sequence[str], **kwargs):
        raise ConfigError(f"{type(self).__name__} cannot serve {TOKEN_LOGPROBS}")

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[Sequence[str]], **kwargs):
        """``{option: log p(option's first token | prompt)}`` per prompt (variants summed).

        Keywords every backend takes: ``params`` (:class:`GenerationParams`: system prompt,
        chat template) and ``batch_size`` (how many prompts a local backend runs at once).
        """
        raise ConfigError(f"{type(self).__name__} cannot serve {OPTION_LOGPROBS}")

    def generate(self, prompts: Sequence[str], params: GenerationParams) -> list[Generation]:
        raise ConfigError(f"{type(self).__name__} cannot serve {GENERATE}")

    def gradient_norms(self, texts: Sequence[str], **kwargs):
        """``||d/d theta mean token log p(text)||_2`` per text (float64 array); ``params`` selects theta."""
        raise ConfigError(f"{type(self).__name__} cannot serve {GRADIENT_NORMS}")

    def word_logprobs(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]], **kwargs):
        """Per text, per character span ``(start, end)``: ``log p(word | text to its left)`` and its rank
        (a causal LM), or the masked word's in its window ``bounds`` (a masked LM), or, given ``fills``, a
        causal LM's among candidate fills by the likelihood of the whole window.

        A list of records per text (``logprob``, ``first_logprob``, ``rank``, ``scoring``, ...), in the order
        of the spans: :func:`memaudit.models.word_logprobs.compute_word_logprobs`,
        :func:`memaudit.models.masked_word_logprobs.compute_masked_word_logprobs`,
        :func:`memaudit.models.window_word_logprobs.compute_window_word_logprobs`.
        """
        raise ConfigError(f"{type(self).__name__} cannot serve {WORD_LOGPROBS}")


# Backends are imported only when used: `import memaudit` never imports torch or an SDK.
_REGISTRY: dict[str, tuple[str, str, frozenset[str]]] = {
    "hf": ("memaudit.backends.hf", "HFBackend",
           frozenset({TOKEN_LOGPROBS, OPTION_LOGPROBS, GENERATE, GRADIENT_NORMS, WORD_LOGPROBS})),
    # Chat Completions offers at most the top 20 next-token log-probabilities: enough
    # for option letters (a letter outside the top 20 is recorded as missing), never
    # for the log-probability of a given text.
    "openai": ("memaudit.backends.openai_backend", "OpenAIBackend",
               frozenset({OPTION_LOGPROBS, GENERATE})),
    "anthropic": ("memaudit.backends.anthropic_backend", "AnthropicBackend", frozenset({GENERATE})),
}



def backend_capabilities(name: str) -> frozenset[str]:
    if name not in _REGISTRY:
        raise ConfigError(f"unknown backend {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name][2]


def model_capabilities(entry: dict) -> frozenset[str]:
    """What one configured model can serve: its backend's capabilities, narrowed by the entry.

    An OpenAI-compatible endpoint that returns no log-probabilities (``api.logprobs: false``;
    OpenAI's reasoning models, some servers) cannot serve option log-probabilities.
    """
    caps = backend_capabilities(entry.get("backend", "hf"))
    if entry.get("api", {}).get("logprobs") is False:
        caps = caps - {OPTION_LOGPROBS}
    return caps


PROVIDER_HOSTS = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}


def provider_api(backend: str, base_url: str | None) -> bool:
    """Whether requests go to the provider's own API: no ``base_url``, or one on the provider's host
    (``https://api.openai.com/v1`` written out), not an OpenAI-compatible server of another kind."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(base_url).hostname if base_url else None
    except ValueError:  # no URL at all ("http://[::1/v1"): the config check names the key
        return False
    return not base_url or (host or "").lower() == PROVIDER_HOSTS.get(backend)


def takes_repetition_penalty(backend: str, base_url: str | None = None, setting: bool | None = None) -> bool:
    """Whether a model's API takes a repetition penalty: local models and OpenAI-compatible servers
    (``api.base_url``: vLLM, ``memaudit serve``) do; OpenAI's own API (also where ``base_url`` names
    its host) and Anthropic's Messages API have none, and refuse any value but 1.0. An OpenAI-compatible
    model's ``api.repetition_penalty`` (``setting``) decides over its host: false for one that refuses the
    field (Azure's v1 endpoint answers 400) or drops it (a gateway: the penalty would be recorded, never applied)."""
    if backend == "anthropic":
        return False
    if backend == "openai":
        return not provider_api(backend, base_url) if setting is None else bool(setting)
    return True


def model_takes_repetition_penalty(entry: dict) -> bool:
    """:func:`takes_repetition_penalty` of one configured model."""
    api = entry.get("api") or {}
    return takes_repetition_penalty(entry.get("backend", "hf"), api.get("base_url"), api.get("repetition_penalty"))


def get_backend_class(name: str) -> type[Backend]:
    backend_capabilities(name)
    module, cls = _REGISTRY[name][:2]
    return getattr(importlib.import_module(module), cls)


def check_probe_support(probe: str, needs: set[str], model: str, backend: str) -> None:
    missing = set(needs) - backend_capabilities(backend)
    if missing:
        raise ConfigError(f"probe {probe!r} needs {', '.join(sorted(missing))}, which model "
                          f"{model!r} (backend {backend!r}) cannot serve")
