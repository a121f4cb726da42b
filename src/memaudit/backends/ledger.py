"""The cost ledger: tokens and dollars per model and per rule, and the estimate before a run.

Every result an API backend serves appends a usage row to the cache database
(:class:`memaudit.backends.cache.UsageRow`): the rule that asked, the model,
input and output tokens as the provider reported them, whether it came from the
cache, and its cost priced from the config at the time of the call

    cost = ((input_tokens - provider_cached - written_5m - written_1h) * input_per_mtok
            + provider_cached * cached_input_per_mtok
            + (1.25 * written_5m + 2 * written_1h) * input_per_mtok + output_tokens * output_per_mtok) / 1e6

(prices in US dollars per million tokens, as providers publish them; ``provider_cached``, the
prompt tokens the provider's own prompt cache served, as its usage block says, priced at
``input_per_mtok`` where the config gives no ``cached_input_per_mtok``; ``written_5m`` and
``written_1h``, those written to Anthropic's prompt cache for 5 minutes and for 1 hour, billed at
1.25 and 2 times the input price; the ledger's ``provider_cache_write_tokens`` counts both). A result
served from the cache costs nothing. :func:`summarise_usage` sums the rows per
model and rule; :func:`estimate_cost` prices the planned requests before any is
sent, counting those already cached as free and each uncached one at its
estimated prompt tokens plus the full ``max_new_tokens`` -- an upper bound,
since answers usually stop earlier -- and every prompt token at the input price:
memaudit marks nothing for Anthropic's prompt cache (no ``cache_control``), so no
request of its own writes to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from memaudit.backends.settings import Pricing

# Chat formats wrap each message in a few tokens (OpenAI's cookbook counts 3 per
# message and 3 to prime the reply); the estimate adds them per request.
TOKENS_PER_MESSAGE = 3
TOKENS_REPLY_PRIMING = 3
CHARS_PER_TOKEN = 4.0  # OpenAI's rule of thumb for English text


def approx_tokens(text: str) -> int:
    """Tokens of a text by the 4-characters-per-token rule (no tokenizer of the remote model is at hand)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def approx_prompt_tokens(prompt: str, system_prompt: str | None) -> int:
    messages = 1 + (system_prompt is not None)
    return (approx_tokens(prompt) + approx_tokens(system_prompt or "")
            + messages * TOKENS_PER_MESSAGE + TOKENS_REPLY_PRIMING)


@dataclass
class CostEstimate:
    """What a planned set of requests will send and cost at most, per model."""

    rows: list[dict] = field(default_factory=list)

    def add(self, *, model: str, model_id: str, backend: str, n_requests: int, n_cached: int,
            input_tokens: int, max_output_tokens: int, pricing: Pricing | None,
            key_env: str | None = None, key_present: bool = True, key_problem: str | None = None) -> None:
        """Add planned requests of one model (merged into its row if it has one)."""
        cost = pricing.cost(input_tokens, max_output_tokens) if pricing is not None else None
        row = next((r for r in self.rows if r["model"] == model), None)
        if row is None:
            row = {"model": model, "model_id": model_id, "backend": backend, "n_requests": 0, "n_cached": 0,
                   "n_to_send": 0, "input_tokens_est": 0, "output_tokens_max": 0, "cost_usd_max": 0.0,
                   "api_key_env": key_env, "api_key_present": key_present, "api_key_problem": key_problem}
            self.rows.append(row)
        row["n_requests"] += n_requests
        row["n_cached"] += n_cached
        row["n_to_send"] += n_requests - n_cached
        row["input_tokens_est"] += input_tokens
        row["output_tokens_max"] += max_output_tokens
        row["cost_usd_max"] = None if cost is None or row["cost_usd_max"] is None else row["cost_usd_max"] + cost

    @property
    def total_cost_usd(self) -> float | None:
        """Sum over models; ``None`` when some model has no price (the total would understate)."""
        costs = [r["cost_usd_max"] for r in self.rows]
        return None if any(c is None for c in costs) else float(sum(costs))

    def format(self) -> str:
        """A table a user reads before starting the run."""
        head = f"{'model':<24} {'requests':>9} {'cached':>8} {'to send':>8} {'input tok':>11} " \
               f"{'output tok <=':>14} {'cost <= USD':>12}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            cost = "no price" if r["cost_usd_max"] is None else f"{r['cost_usd_max']:.4f}"
            lines.append(f"{r['model']:<24} {r['n_requests']:>9} {r['n_cached']:>8} {r['n_to_send']:>8} "
                         f"{r['input_tokens_est']:>11} {r['output_tokens_max']:>14} {cost:>12}")
        total = self.total_cost_usd
        lines.append(f"total: at most {'unknown (a model has no price)' if total is None else f'{total:.4f} USD'}"
                     " (input tokens estimated at 4 characters per token; every answer at its full max tokens)")
        for r in self.rows:
            if r["n_to_send"] and r["api_key_env"] and not r["api_key_present"]:
                lines.append(f"warning: {r['api_key_problem']}" if r["api_key_problem"] else
                             f"warning: {r['model']}: environment variable {r['api_key_env']} is not set")
        return "\n".join(lines)


def summarise_usage(rows: Iterable[dict], by: Sequence[str] = ("model", "rule")) -> list[dict]:
    """Totals per group: requests, of which sent and cached, tokens (sent and cached) and dollars.

    ``cost_usd`` is ``None`` for a group with a sent request that had no price.
    """
    groups: dict[tuple, dict] = {}
    for r in rows:
        g = tuple(r.get(k) for k in by)
        acc = groups.setdefault(g, {**dict(zip(by, g)), "n_requests": 0, "n_sent": 0, "n_cached": 0,
                                    "input_tokens": 0, "output_tokens": 0, "provider_cached_tokens": 0,
                                    "provider_cache_write_tokens": 0, "cached_input_tokens": 0,
                                    "cached_output_tokens": 0, "n_refusal": 0, "n_invalid": 0, "cost_usd": 0.0})
        acc["n_requests"] += 1
        acc[f"n_{r['status']}"] = acc.get(f"n_{r['status']}", 0) + 1
        if r["from_cache"]:
            acc["n_cached"] += 1
            acc["cached_input_tokens"] += r["input_tokens"]
            acc["cached_output_tokens"] += r["output_tokens"]
        else:
            acc["n_sent"] += 1
            acc["input_tokens"] += r["input_tokens"]
            acc["output_tokens"] += r["output_tokens"]
            acc["provider_cached_tokens"] += r.get("provider_cached_tokens") or 0
            acc["provider_cache_write_tokens"] += r.get("provider_cache_write_tokens") or 0
            if r["cost_usd"] is None or acc["cost_usd"] is None:
                acc["cost_usd"] = None
            else:
                acc["cost_usd"] += r["cost_usd"]
    return [groups[g] for g in sorted(groups, key=lambda t: tuple("" if v is None else str(v) for v in t))]


LEDGER_COLUMNS = ["n_requests", "n_sent", "n_cached", "input_tokens", "output_tokens", "provider_cached_tokens",
                  "provider_cache_write_tokens", "cached_input_tokens",
                  "cached_output_tokens", "n_ok", "n_refusal", "n_invalid", "cost_usd"]


def ledger_frame(cache_path, by: Sequence[str] = ("model", "rule")):
    """The ledger of a cache database as a pandas DataFrame (one row per group)."""
    import pandas as pd

    from memaudit.backends.cache import ResponseCache

    with ResponseCache(cache_path, existing=True) as cache:
        rows = summarise_usage(cache.usage_rows(), by)
    columns = list(by) + LEDGER_COLUMNS
    frame = pd.DataFrame(rows)
    for c in columns:
        if c not in frame:
            frame[c] = 0
    return frame[columns]


def estimate_cost(backend, prompts: Sequence[str], params, *, n_samples: int = 1, option_logprobs: bool = False,
                  estimate: CostEstimate | None = None) -> CostEstimate:
    """Price the requests ``backend.generate`` (or ``option_logprobs``) would send for ``prompts``.

    Samples ``0 .. n_samples-1`` are planned for each prompt when sampling
    (``temperature > 0``); greedy requests are planned once. Cached requests are free.
    """
    import dataclasses

    estimate = estimate if estimate is not None else CostEstimate()
    samples = range(n_samples) if params.temperature > 0 else range(1)
    calls = []
    for s in samples:
        p = dataclasses.replace(params, sample_index=s)
        calls.extend(backend.plan(prompts, p, option_logprobs=option_logprobs))
    keys = [c.key for c in calls]
    cached = backend.cache.contains_many(keys) if backend.cache is not None else set()
    legacy = {c.legacy_key: c.key for c in calls if getattr(c, "legacy_key", None) and c.key not in cached}
    if legacy:  # answered under the key an earlier version gave them (APIBackend._serve serves them)
        cached |= {legacy[old] for old in backend.cache.contains_many(legacy)}
    unique = {c.key: c for c in calls}
    to_send = [c for k, c in unique.items() if k not in cached]
    estimate.add(model=backend.name, model_id=backend.model_id, backend=backend.backend_name,
                 n_requests=len(unique), n_cached=len(unique) - len(to_send),
                 input_tokens=sum(approx_prompt_tokens(c.prompt, c.system_prompt) for c in to_send),
                 max_output_tokens=sum(c.max_output_tokens for c in to_send), pricing=backend.pricing,
                 key_env=backend.api_key_env, key_present=backend.key_present, key_problem=backend.key_problem)
    return estimate


# ----------------------------------------------------------------------------- command line

PLAN_FIELDS = ("model", "prompt", "system_prompt", "max_new_tokens", "temperature", "top_p", "stop", "seed",
               "repetition_penalty", "samples", "kind")
# what each optional field must be (a wrong one stopped the estimate with a traceback)
_PLAN_FIELD_KINDS = {"model": (str, "a string"), "prompt": (str, "a string"),
                     "system_prompt": ((str, type(None)), "a string or null"),
                     "max_new_tokens": (int, "an integer >= 1"), "samples": (int, "an integer >= 1"),
                     "seed": (int, "an integer"), "temperature": ((int, float), "a finite number >= 0"),
                     "top_p": ((int, float), "a finite number above 0 and at most 1"),
                     "repetition_penalty": ((int, float), "a finite number above 0"),
                     "stop": (list, "a list of strings")}
# where a number must fall: JSON's NaN and Infinity (Python's json reads both) stopped the estimate with a
# traceback from the cache key, and a temperature of -1 or a top_p of 7 was priced as if it could be sent
_PLAN_FIELD_RANGES = {"temperature": lambda v: v >= 0, "top_p": lambda v: 0 < v <= 1,
                      "repetition_penalty": lambda v: v > 0}


def _plan_field_problem(rec: dict) -> str | None:
    """The first field of a plan record that has the wrong kind of value, in words; None if all are right."""
    for name, (kinds, words) in _PLAN_FIELD_KINDS.items():
        if name not in rec:
            continue
        value = rec[name]
        right = isinstance(value, kinds) and not isinstance(value, bool)
        if right and name in ("max_new_tokens", "samples"):
            right = value >= 1
        if right and name == "stop":
            right = all(isinstance(s, str) for s in value)
        if right and name in _PLAN_FIELD_RANGES:
            right = math.isfinite(value) and _PLAN_FIELD_RANGES[name](value)
        if not right:
            return f"{name} must be {words}"
    return None


def estimate_plan(config: dict, records: Sequence[dict], *, where: Sequence[str] = (),
                  config_name: str | None = None) -> CostEstimate:
    """Price a plan: records ``{"model", "prompt", ...}`` (see ``memaudit estimate-cost --help``).

    Records of one model with the same decoding parameters are priced together;
    local (``hf``) models cost nothing and are skipped. ``where`` names each record in
    errors (``plan.jsonl, line 3``; default ``plan record 3``), and ``config_name`` the config a model
    unknown to it was looked up in (``memaudit estimate-cost`` reads the demo's unless told another).
    """
    from memaudit.backends.api import api_backend_from_config
    from memaudit.backends.base import GenerationParams, is_api_model
    from memaudit.errors import ConfigError, InputError

    groups: dict[tuple, list[str]] = {}
    first_at: dict[tuple, str] = {}  # where each group's first record is: a request it cannot make is named there
    for i, rec in enumerate(records, 1):
        at = where[i - 1] if where else f"plan record {i}"
        unknown = set(rec) - set(PLAN_FIELDS)
        if unknown or "model" not in rec or "prompt" not in rec:
            raise InputError(f"{at}: needs 'model' and 'prompt'; may have {', '.join(PLAN_FIELDS)}"
                             + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else ""))
        problem = _plan_field_problem(rec)
        if problem:
            raise InputError(f"{at}: {problem}")
        if rec["model"] not in config["models"]:
            from memaudit.config import unknown as unknown_name

            looked_up = f"; the plan's models are looked up in {config_name} (--config)" if config_name else ""
            raise InputError(f"{at}: {unknown_name('model', rec['model'], config['models'])}{looked_up}")
        params = GenerationParams(max_new_tokens=int(rec.get("max_new_tokens", 64)),
                                  temperature=float(rec.get("temperature", 0.0)), top_p=float(rec.get("top_p", 1.0)),
                                  stop=tuple(rec.get("stop", ())), system_prompt=rec.get("system_prompt"),
                                  seed=int(rec.get("seed", 0)),
                                  repetition_penalty=float(rec.get("repetition_penalty", 1.0)))
        kind = rec.get("kind", "generate")
        if kind not in ("generate", "option_logprobs"):
            raise InputError(f"{at}: kind must be generate or option_logprobs, not {kind!r}")
        key = (rec["model"], params, int(rec.get("samples", 1)), kind)
        groups.setdefault(key, []).append(rec["prompt"])
        first_at.setdefault(key, at)
    estimate = CostEstimate()
    backends: dict = {}
    from memaudit.backends.cache import ResponseCache
    from memaudit.backends.settings import api_settings

    # An estimate writes nothing: without a cache yet, nothing is cached; an existing file is opened only if it
    # is a cache (a cache's set-up made another database, or an empty file, named in api.cache into one)
    cache_path = Path(api_settings(config)["cache"])
    cache = ResponseCache(cache_path, existing=True) if cache_path.exists() else False
    try:
        for (model, params, samples, kind), prompts in groups.items():
            if not is_api_model(config["models"][model]):
                continue
            if model not in backends:
                backends[model] = api_backend_from_config(config, model, require_key=False, cache=cache)
            try:
                estimate_cost(backends[model], prompts, params, n_samples=samples,
                              option_logprobs=kind == "option_logprobs", estimate=estimate)
            except ConfigError as exc:  # a request this model's API cannot take (log-probabilities of Claude)
                raise InputError(f"{first_at[model, params, samples, kind]}: {exc}") from None
    finally:
        if cache is not False:
            cache.close()
    return estimate


def estimate_main(argv: Sequence[str] | None = None) -> int:
    """``memaudit estimate-cost``: what a planned set of API requests will cost, before sending any."""
    import argparse

    from memaudit.jobs import load_config
    from memaudit.io import read_jsonl_lines, refuse_overwriting, write_json

    p = argparse.ArgumentParser(
        prog="memaudit estimate-cost",
        description="Price planned API requests before the run: cached ones are free; each other one costs its "
                    "estimated prompt tokens plus its full max_new_tokens (an upper bound).",
        epilog='Plan: JSONL, one request per line: {"model": <config model name>, "prompt": "...", '
               '"system_prompt", "max_new_tokens" (64), "temperature" (0), "top_p", "stop", "seed", '
               '"repetition_penalty" (1), '
               '"samples" (1; sampled requests only), "kind" ("generate" or "option_logprobs")}. A local '
               'model\'s records cost nothing and are left out.')
    p.add_argument("--config", default="config/config.yaml", type=Path,
                   help="the config naming the plan's models and their prices (default: config/config.yaml)")
    p.add_argument("--plan", required=True, type=Path, help="planned requests (JSONL)")
    p.add_argument("--json", type=Path, help="also write the estimate here")
    args = p.parse_args(argv)
    refuse_overwriting(args.json, "--json", {"--plan": args.plan, "--config": args.config})
    numbered = read_jsonl_lines(args.plan)
    estimate = estimate_plan(load_config(args.config), [rec for _, rec in numbered],
                             where=[f"{args.plan}, line {line}" for line, _ in numbered], config_name=str(args.config))
    print(estimate.format())
    if args.json:
        write_json(args.json, {"rows": estimate.rows, "total_cost_usd_max": estimate.total_cost_usd})
    return 0


def ledger_main(argv: Sequence[str] | None = None) -> int:
    """``memaudit api-ledger``: tokens and dollars spent so far, per model and rule."""
    import argparse

    from memaudit.io import refuse_overwriting, write_csv

    p = argparse.ArgumentParser(prog="memaudit api-ledger", description="Tokens and cost of the API calls made.")
    p.add_argument("--cache", default="results/api/cache.sqlite", type=Path,
                   help="the API cache database (default: results/api/cache.sqlite)")
    p.add_argument("--by", nargs="+", default=["model", "rule"], choices=["model", "rule", "model_id", "backend",
                                                                           "run_id"],
                   help="the columns the table is grouped by (default: model rule)")
    p.add_argument("--out", type=Path, help="write the table as CSV")
    args = p.parse_args(argv)
    refuse_overwriting(args.out, "--out", {"--cache": args.cache})
    if not args.cache.exists():
        from memaudit.errors import InputError

        raise InputError(f"{args.cache}: no API cache yet (no API request has been made)")
    frame = ledger_frame(args.cache, args.by)
    # pandas' repr of an empty table ("Empty DataFrame / Columns: [...]") reads as a failure
    print(frame.to_string(index=False) if len(frame) else f"no API requests recorded in {args.cache}")
    if args.out:
        write_csv(args.out, frame)
    return 0


def write_ledger(cache_path, out_path, by: Sequence[str] = ("model", "rule")):
    """Write the ledger of ``cache_path`` as CSV; no cache yet (no API request made) gives an empty table."""
    import pandas as pd

    from memaudit.io import write_csv

    if Path(cache_path).exists():
        frame = ledger_frame(cache_path, by)
    else:
        frame = pd.DataFrame(columns=list(by) + LEDGER_COLUMNS)
    write_csv(out_path, frame)
    return frame
