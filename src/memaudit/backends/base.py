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
  non-literal copying, prefix completion, paraphrasing).
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import Sequence

from memaudit.errors import ConfigError

TOKEN_LOGPROBS = "token_logprobs"
OPTION_LOGPROBS = "option_logprobs"
GENERATE = "generate"


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


@dataclass
class Generation:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    meta: dict = field(default_factory=dict)


class Backend(abc.ABC):
    """A model behind one of the request types above."""

    capabilities: frozenset[str] = frozenset()

    @abc.abstractmethod
    def describe(self) -> dict:
        """Identity of the model for records and cache keys (id, revision, adapter, n_params)."""

    def token_stats(self, texts: Sequence[str], **kwargs):
        raise ConfigError(f"{type(self).__name__} cannot serve {TOKEN_LOGPROBS}")

    def option_logprobs(self, prompts: Sequence[str], options: Sequence[Sequence[str]], **kwargs):
        raise ConfigError(f"{type(self).__name__} cannot serve {OPTION_LOGPROBS}")

    def generate(self, prompts: Sequence[str], params: GenerationParams) -> list[Generation]:
        raise ConfigError(f"{type(self).__name__} cannot serve {GENERATE}")


# Backends are imported only when used: `import memaudit` never imports torch or an SDK.
_REGISTRY: dict[str, tuple[str, str, frozenset[str]]] = {
    "hf": ("memaudit.backends.hf", "HFBackend",
           frozenset({TOKEN_LOGPROBS, OPTION_LOGPROBS, GENERATE})),
}


def backend_capabilities(name: str) -> frozenset[str]:
    if name not in _REGISTRY:
        raise ConfigError(f"unknown backend {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name][2]


def get_backend_class(name: str) -> type[Backend]:
    backend_capabilities(name)
    module, cls = _REGISTRY[name][:2]
    return getattr(importlib.import_module(module), cls)


def check_probe_support(probe: str, needs: set[str], model: str, backend: str) -> None:
    missing = set(needs) - backend_capabilities(backend)
    if missing:
        raise ConfigError(f"probe {probe!r} needs {', '.join(sorted(missing))}, which model "
                          f"{model!r} (backend {backend!r}) cannot serve")
