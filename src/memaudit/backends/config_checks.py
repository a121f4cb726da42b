"""Config checks for API models that a JSON schema cannot express.

Called from :func:`memaudit.jobs.run_checks` (a probe that needs option log-probabilities on an
endpoint configured with ``api.logprobs: false`` is :func:`memaudit.probes.registry.check_capabilities`'
concern); returns problems as
``"dotted.key: message"`` strings like the other checks there. No message ever
repeats the value of ``api_key_env``: a user who pasted the key itself there
must not see it echoed into a terminal or a CI log.
"""

from __future__ import annotations

from memaudit.backends.base import API_BACKENDS, provider_api
from memaudit.secrets import API_KEY_ENV_PROBLEM, looks_like_a_key_not_a_variable, url_credential_problem

# The role models a setting under ``probes`` gives a temperature: (family, role, the temperature's dotted key,
# whether an unnamed role falls back on a default model, as the paraphraser does, or is off)
ROLE_TEMPERATURES = (("decop", "paraphraser", "decop.paraphrase.temperature", True),
                     ("copybench", "fluency_judge", "copybench.fluency_judge.temperature", False))
# the Messages API's bound: above it every request is answered HTTP 400
ANTHROPIC_MAX_TEMPERATURE = 1.0


def check_api_models(config: dict) -> list[str]:
    """Problems with the API models of a validated config (empty when there are none).

    - an ``openai``/``anthropic`` model needs an ``api`` block and no ``source``,
      ``base`` or ``finetune`` (those describe local weights);
    - a local (``hf``) model takes no ``api`` block;
    - ``api_key_env`` must be a variable name, not a key;
    - ``base_url`` must not carry credentials (``https://user:secret@host``, ``?api_key=…``,
      ``?token=…``, ``?signature=…``: :func:`memaudit.secrets.url_credential_problem`);
    - a model on a provider's own API (no ``base_url``, or one on its host) needs a price
      (``api.pricing`` or the top-level ``api.pricing.<model_id>``), so that the
      cost estimate and ledger are never silently zero;
    - two models with one backend, ``model_id`` and ``revision`` at different ``base_url`` s (two
      ``memaudit serve`` s, a base and its adapter, both answering to the model's name) would share
      cache entries, which leave the server out: one model's answers would be served as the other's;
    - a token-probability reference model must be local: it needs token log-probabilities;
    - an Anthropic role model is given a temperature of at most 1 (:data:`ROLE_TEMPERATURES`).
    """
    problems: list[str] = []
    price_table = config.get("api", {}).get("pricing", {})
    endpoints: dict[tuple, tuple[str, str | None]] = {}  # a request's cache identity -> first model, base_url
    for name, entry in config["models"].items():
        where = f"models.{name}"
        backend = entry.get("backend", "hf")
        api = entry.get("api")
        if backend not in API_BACKENDS:
            if api is not None:
                problems.append(f"{where}.api: only for API backends ({', '.join(API_BACKENDS)}); "
                                f"this model's backend is {backend!r}")
            continue
        for local in ("source", "base", "finetune"):
            if local in entry:
                problems.append(f"{where}.{local}: not for backend {backend!r} (an API model has no local weights)")
        if api is None:
            problems.append(f"{where}.api: required for backend {backend!r} (at least model_id)")
            continue
        env = api.get("api_key_env")
        if env is not None and looks_like_a_key_not_a_variable(env):
            problems.append(f"{where}.api.api_key_env: {API_KEY_ENV_PROBLEM}")
        base_url = api.get("base_url")
        problem = url_credential_problem(base_url) if base_url else None
        if problem:
            problems.append(f"{where}.api.base_url: {problem}")
        else:
            first, first_url = endpoints.setdefault((backend, api.get("model_id"), api.get("revision")),
                                                    (name, base_url))
            if (first_url or "").rstrip("/") != (base_url or "").rstrip("/"):
                # values under api are never shown: the message names the keys only
                problems.append(f"{where}.api.revision: models.{first} has the same backend, model_id and "
                                f"revision at another base_url, so the two would share cached answers; set "
                                f"api.revision on one to what its server serves (e.g. the adapter)")
        if provider_api(backend, base_url) and "pricing" not in api and api.get("model_id") not in price_table:
            problems.append(f"{where}.api.pricing: required for a paid API model (or add "
                            f"api.pricing.{api.get('model_id')}); prices are in USD per million tokens")
        if backend != "anthropic" and "thinking" in api:
            problems.append(f"{where}.api.thinking: anthropic only (an OpenAI reasoning model is api.reasoning)")
        if backend == "anthropic" and "reasoning" in api:
            problems.append(f"{where}.api.reasoning: openai only (the Messages API takes a temperature)")
        if backend == "anthropic" and "system_role" in api:
            problems.append(f"{where}.api.system_role: openai only (the Messages API takes its system prompt "
                            f"apart from the messages)")
        if "repetition_penalty" in api and (backend == "anthropic"
                                            or api["repetition_penalty"] and provider_api(backend, base_url)):
            provider = "the Messages API" if backend == "anthropic" else "OpenAI's own API"
            problems.append(f"{where}.api.repetition_penalty: for an OpenAI-compatible server (base_url) only; "
                            f"{provider} has none and refuses one")
        if backend == "anthropic" and "max_tokens_field" in api:
            # (logprobs and top_logprobs have schema defaults, so only this one can be told apart)
            problems.append(f"{where}.api.max_tokens_field: the Anthropic Messages API has only max_tokens")
    refs = config.get("probes", {}).get("token_prob", {}).get("reference_models", [])
    for i, ref in enumerate(refs):
        if config["models"].get(ref, {}).get("backend", "hf") in API_BACKENDS:
            problems.append(f"probes.token_prob.reference_models.{i}: {ref!r} is an API model; a reference "
                            f"model needs token log-probabilities, which only local (hf) models give")
    return problems + _role_temperature_problems(config)


def _role_temperature_problems(config: dict) -> list[str]:
    """A temperature above 1 for a role an Anthropic model serves (the KTD paper's T5 paraphraser samples at 1.9):
    the Messages API answers every such request HTTP 400, so it is named before any job runs."""
    from memaudit.probes.registry import named_role_model, role_model

    problems = []
    for family, role, key, defaults in ROLE_TEMPERATURES:
        if role_model(config, family, role) is None:  # the family is off
            continue
        model = role_model(config, family, role) if defaults else named_role_model(config, family, role)
        if config["models"].get(model, {}).get("backend") != "anthropic":
            continue
        temperature = config.get("probes", {})
        for part in key.split("."):
            temperature = temperature.get(part) if isinstance(temperature, dict) else None
        if temperature is not None and temperature > ANTHROPIC_MAX_TEMPERATURE:
            problems.append(f"probes.{key}: {temperature:g}, but the {role.replace('_', ' ')} {model!r} "
                            f"(models.{model}) is an Anthropic model, whose Messages API takes a temperature from "
                            f"0 to {ANTHROPIC_MAX_TEMPERATURE:g} (HTTP 400 above); set at most "
                            f"{ANTHROPIC_MAX_TEMPERATURE:g} or give the role another model")
    return problems
