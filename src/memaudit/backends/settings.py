"""What the config says about API models, with the schema's defaults filled in.

The top-level ``api`` block (cache, retries, on_error), a model's ``api`` block,
the Snakemake resource slots a model's jobs claim, and a model's price. The
defaults live in one place, the JSON schema, for code and validation alike.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from memaudit.errors import ConfigError


@functools.lru_cache(maxsize=None)
def _schema_defaults_cached(path: tuple[str, ...]) -> str:
    import json

    from memaudit.config import load_schema

    node = load_schema()
    for step in path:
        node = node[step]
    return json.dumps({k: v["default"] for k, v in node["properties"].items() if "default" in v})


def _schema_defaults(*path: str) -> dict:
    """Defaults of one schema object: one source of truth for code and validation (a fresh copy per call)."""
    import json

    return json.loads(_schema_defaults_cached(path))


def api_settings(config: dict) -> dict:
    """The top-level ``api`` block with the schema's defaults filled in (it may be absent)."""
    return {**_schema_defaults("properties", "api"), **config.get("api", {})}


def api_entry(config: dict, model: str) -> dict:
    """A model's ``api`` block with the schema's defaults filled in."""
    defaults = _schema_defaults("properties", "models", "additionalProperties", "properties", "api")
    entry = config["models"][model]
    if "api" not in entry:
        raise ConfigError(f"models.{model}.api: required for backend {entry.get('backend', 'hf')!r}")
    return {**defaults, **entry["api"]}


def api_slots(config: dict, model: str, backend: str) -> int:
    """Slots of the Snakemake resource ``api_<backend>`` a job for ``model`` claims: its concurrency.

    Zero for a model on another backend, so ``--resources api_openai=16`` caps the
    requests in flight across all parallel jobs at 16.
    """
    entry = config["models"][model]
    if entry.get("backend", "hf") != backend:
        return 0
    return int(api_entry(config, model)["concurrency"])


@dataclass(frozen=True)
class Pricing:
    """US dollars per million input and output tokens, and per million input tokens the provider
    served from its own prompt cache (OpenAI caches a prompt's first 1,024+ tokens by itself and
    bills them at a discount that differs by model; without ``cached_input_per_mtok`` they are
    priced as other input tokens, an upper bound). Prompt tokens written to Anthropic's prompt cache
    cost more than others: 1.25 times the input price for its 5-minute lifetime, 2 times for the
    1-hour one (Anthropic's pricing page, "Prompt caching")."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    CACHE_WRITE_5M_FACTOR = 1.25
    CACHE_WRITE_1H_FACTOR = 2.0

    def cost(self, input_tokens: int, output_tokens: int, provider_cached_tokens: int = 0,
             cache_write_5m_tokens: int = 0, cache_write_1h_tokens: int = 0) -> float:
        """``input_tokens`` counts all the prompt's tokens: ``provider_cached_tokens`` of them read from the
        provider's prompt cache, ``cache_write_5m_tokens`` and ``cache_write_1h_tokens`` written to it."""
        cached = min(max(provider_cached_tokens, 0), input_tokens)
        write_1h = min(max(cache_write_1h_tokens, 0), input_tokens - cached)
        write_5m = min(max(cache_write_5m_tokens, 0), input_tokens - cached - write_1h)
        cached_rate = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        return ((input_tokens - cached - write_5m - write_1h) * self.input_per_mtok + cached * cached_rate
                + (write_5m * self.CACHE_WRITE_5M_FACTOR + write_1h * self.CACHE_WRITE_1H_FACTOR)
                * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    @classmethod
    def from_config(cls, entry: dict | None) -> "Pricing | None":
        if not entry:
            return None
        cached = entry.get("cached_input_per_mtok")
        return cls(float(entry["input_per_mtok"]), float(entry["output_per_mtok"]),
                   None if cached is None else float(cached))


def own_server(base_url: str) -> bool:
    """Whether ``base_url`` is a server of the user's own: ``localhost`` or a loopback or private
    address (``memaudit serve``, a vLLM server on the cluster's network)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def pricing_for(config: dict, model: str) -> Pricing | None:
    """A model's price: its own ``api.pricing``, else ``api.pricing.<model_id>`` at the top level.

    An OpenAI-compatible server of the user's own (:func:`own_server`) with no price costs nothing;
    one elsewhere (a paid provider's ``base_url``) has no price, so the estimate and the ledger say
    "no price" rather than a total that leaves it out (they counted it free).
    """
    entry = config["models"][model]
    api = entry.get("api", {})
    own = Pricing.from_config(api.get("pricing"))
    if own is not None:
        return own
    table = config.get("api", {}).get("pricing", {})
    if api.get("model_id") in table:
        return Pricing.from_config(table[api["model_id"]])
    if api.get("base_url") and own_server(api["base_url"]):
        return Pricing(0.0, 0.0)
    return None
