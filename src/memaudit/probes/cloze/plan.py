"""The cloze family's part of the job list and its config checks (no numpy: read while Snakemake builds the DAG)."""

from __future__ import annotations

from memaudit.config import is_api_model, labels_per_book
from memaudit.jobs import controls, declared_controls, job_settings, probe_runs

# probes.cloze keys only the black-box probe reads (how it asks for a masked word): kept out of the params of
# cloze_items and the logit probes, so changing them reruns neither (the reference scores every candidate word)
BLACKBOX_KEYS = ("max_new_tokens", "prompt")


def runs(config: dict) -> list[tuple[str, str, str]]:
    return probe_runs(config, "cloze")


def benchmarks(config: dict) -> list[str]:
    return sorted({b for b, _, _ in runs(config)})


def book_benchmarks(config: dict) -> list[str]:
    """The probed benchmarks whose labels are given per book (:func:`memaudit.config.labels_per_book`): the
    summary reads their ``documents.jsonl`` for each passage's book, the unit its intervals resample."""
    return [b for b in benchmarks(config) if labels_per_book(config["benchmarks"][b])]


def uses_filter(config: dict, wildcards=None) -> bool:
    """Whether a knowledge filter model is configured (``probes.cloze.filter.model``); off by default."""
    return bool((config["probes"].get("cloze", {}).get("filter") or {}).get("model"))


def item_settings(config: dict) -> dict:
    """``probes.cloze`` as cloze_items and the logit probes read it (:func:`memaudit.jobs.job_settings`), less
    :data:`BLACKBOX_KEYS`."""
    return {k: v for k, v in job_settings(config, "cloze").items() if k not in BLACKBOX_KEYS}


def probe_settings(config: dict, mode: str) -> dict:
    """``probes.cloze`` as a probe job of ``mode`` reads it: all of it in black-box mode, else :func:`item_settings`."""
    return job_settings(config, "cloze") if mode == "blackbox" else item_settings(config)


def role_models(config: dict) -> dict[str, bool]:
    """The models rule cloze_items loads, each with whether it scores the texts (:func:`memaudit.jobs.with_role_models`):
    the reference (it reads words in windows of its ``max_tokens``), and a knowledge filter, which scores them
    in logit mode only."""
    from memaudit.probes.registry import role_model

    models = {role_model(config, "cloze", "reference"): True}
    if uses_filter(config):
        filt = config["probes"]["cloze"]["filter"]
        models[filt["model"]] = models.get(filt["model"], False) or filt.get("mode", "generate") == "logit"
    return models


def method_name(measure: str, *, mrr: bool = False) -> str:
    """A document score's method: reconstructed words of one token type (``cloze_<measure>``), or in logit
    mode their mean reciprocal rank (``cloze_<measure>_mrr``)."""
    return f"cloze_{measure}" + ("_mrr" if mrr else "")


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: :func:`method_name` of every configured measure in the runs' modes."""
    measures = config["probes"]["cloze"]["measures"]
    modes = {mode for _, _, mode in runs}
    mrr = [method_name(m, mrr=True) for m in measures] if "logit" in modes else []
    return [method_name(m) for m in measures] + mrr


def check_config(config: dict) -> list[str]:
    """The reference model must be able to score words, and must not be a model under test on its benchmark
    (a model that memorised a text finds nothing in it surprising, §3); ``min_reconstructed`` must not exceed
    ``top_k``, or no text can be flagged."""
    from memaudit.backends.base import WORD_LOGPROBS, model_capabilities
    from memaudit.probes.registry import role_model

    if not runs(config):
        return []
    if "cloze" not in config["probes"]:
        return ["probes.cloze: the settings cloze_blackbox and cloze_logit share (reference model, token "
                "types, thresholds) are missing; add a probes.cloze block (it may be empty: {})"]
    problems = []
    reference = role_model(config, "cloze", "reference")
    if reference not in config["models"]:
        return []  # registry.check_roles names the unknown model
    named = (config["probes"]["cloze"].get("reference") or {}).get("model")
    if not named and is_api_model(config["models"][reference]):
        # the default is the first local model; with none, a message about a model the user never named
        # as the reference would puzzle more than it helps
        return ["probes.cloze.reference.model: not set, and every model of the config is an API model, which "
                "cannot score words; add a local causal model that is not under test (e.g. source: {builtin: "
                "smollm2-135m-instruct}) and name it here"]
    if WORD_LOGPROBS not in model_capabilities(config["models"][reference]):
        problems.append(f"probes.cloze.reference.model: {reference!r} cannot score words "
                        f"({WORD_LOGPROBS}: local models only)")
    filt = config["probes"]["cloze"].get("filter") or {}
    if filt.get("model") in config["models"] and filt.get("mode") == "logit" and \
            WORD_LOGPROBS not in model_capabilities(config["models"][filt["model"]]):
        problems.append(f"probes.cloze.filter.mode: logit reads {filt['model']!r}'s next-token ranks, which it "
                        f"cannot give ({WORD_LOGPROBS}: local causal models only); use mode generate")
    fills = (config["probes"]["cloze"].get("reference") or {}).get("fills")
    rank_threshold = config["probes"]["cloze"].get("rank_threshold", 2000)
    if fills and "rank" in config["probes"]["cloze"].get("measures", ["rank"]) and \
            isinstance(rank_threshold, (int, float)) and rank_threshold >= fills:
        problems.append(f"probes.cloze.rank_threshold: {rank_threshold} selects no word, because with "
                        f"probes.cloze.reference.fills {fills} a word's rank counts the fills scored above it "
                        f"(0 to {fills}); set it below {fills}, or tune, or drop rank from probes.cloze.measures")
    top_k = config["probes"]["cloze"].get("top_k", 10)
    min_reconstructed = config["probes"]["cloze"].get("min_reconstructed", 2)
    if min_reconstructed > top_k:  # every text would be "too few tokens": every flag false, unseen
        problems.append(f"probes.cloze.min_reconstructed: {min_reconstructed} reconstructed tokens flag a text, but "
                        f"probes.cloze.top_k keeps at most {top_k} tokens of a type per text, so no text can be "
                        f"flagged; lower min_reconstructed or raise top_k")
    if any(m == reference for _, m, _ in runs(config)):
        default = "" if named else "not set, so the first local model, "
        # a mode whose models list is its default probes the reference too: say so, not only the key
        unset = sorted({mode for _, m, mode in runs(config) if m == reference
                        and "models" not in (config["probes"].get(f"cloze_{mode}") or {})})
        hint = "".join(f"; probes.cloze_{mode}.models is not set, so it probes every model that can serve it: list "
                       f"the models to probe" for mode in unset)
        problems.append(f"probes.cloze.reference.model: {default}{reference!r} chooses the masked words and cannot "
                        f"also be probed with them (probes.cloze_<mode>.models)" + ("" if named else "; name another")
                        + hint)
    return problems


def plan_inputs(config: dict, benchmark: str, mode: str) -> list[str] | str:
    """What the cost estimate's cloze planner reads: the benchmark's cloze items -- unless an API knowledge
    filter would have to be paid to choose them (rule cloze_items), which an estimate must not do."""
    from memaudit.backends.planning import BuiltByRole
    from memaudit.probes.registry import role_model

    model = role_model(config, "cloze", "filter") if uses_filter(config) else None
    if model in config["models"] and is_api_model(config["models"][model]):
        return BuiltByRole(f"its masked words are chosen with API model {model!r} as knowledge filter first (rule "
                           f"cloze_items); build them (snakemake results/datasets/{benchmark}/cloze_items.jsonl) and "
                           f"estimate again, or estimate with a local filter")
    return ["cloze_items.jsonl"]


def outputs(config: dict) -> list[str]:
    return ["results/summary/cloze.csv", "results/summary/cloze_differences.csv",
            "results/summary/cloze_vs_prefix.csv", "results/summary/cloze_overlap.csv",
            "results/summary/cloze_by_size.csv", "results/figures/cloze/reconstruction.png",
            "results/figures/cloze/recovery_by_size.png"] if runs(config) else []


def _probed(config: dict) -> list[str]:
    return sorted({m for _, m, _ in runs(config)})


def bases(config: dict) -> dict[str, str]:
    """Per model the cloze probes run on, its control (the base it is fine-tuned from, or its declared
    ``control``): the differences table's pairs (:func:`memaudit.jobs.controls`)."""
    return controls(config, "cloze")


def declared(config: dict) -> list[str]:
    return declared_controls(config, "cloze")


def members_of(config: dict) -> dict[str, list[str]]:
    """Per probed model, the benchmarks whose members it was fine-tuned on (its ground truth)."""
    return {m: list((config["models"][m].get("finetune") or {}).get("members_of") or []) for m in _probed(config)}


def prefix_runs(config: dict) -> list[tuple[str, str]]:
    """The (benchmark, model) pairs the prefix probe also runs on: its LCS baseline is reported beside
    the cloze probes there (Section 4, Appendix E)."""
    both = {(b, m) for b, m, _ in runs(config)} & {(b, m) for b, m, _ in probe_runs(config, "prefix")}
    return sorted(both)


def sized_models(config: dict) -> list[str]:
    """The probed models with a parameter count (local ones: their ``manifest.json``) for Figure 3."""
    return [m for m in _probed(config) if not is_api_model(config["models"][m])]


def summary_inputs(config: dict) -> dict[str, list[str]]:
    pairs = prefix_runs(config)
    return {"texts": [f"results/scores/{b}/{m}/cloze_{mode}_texts.csv" for b, m, mode in runs(config)],
            "tokens": [f"results/scores/{b}/{m}/cloze_{mode}_tokens.csv" for b, m, mode in runs(config)],
            "models": [f"results/models/{m}" for m in sized_models(config)],
            "prefix": [f"results/scores/{b}/{m}/prefix_items.jsonl" for b, m in pairs],
            "pairs": [f"results/datasets/{b}/prefix_continuation.jsonl" for b, m in pairs],
            "documents": [f"results/datasets/{b}/documents.jsonl" for b in book_benchmarks(config)]}
