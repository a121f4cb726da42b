"""CopyBench's requests to API models, planned before the run (``results/api/estimate.txt``).

The model under test, when it is an API model, gets exactly the prompts :func:`~.runner.run_probe`
sends: every item in every prompt format (:func:`~.runner.prompts_for`, with its in-context
demonstrations), once per decoding an API model can run (``greedy``, ``system``; ``memfree``
needs an open model's decoder), at the mode's ``<mode>_max_new_tokens``. Fact recall (``qa``) has
one template and its own demonstrations; its questions are priced as they stand in
``copybench_qa.jsonl``, unless an API ``qa_writer`` has yet to write them (then the mode is
listed as not planned, as with an API extractor, and the writer's and extractor's own requests
are planned from the documents: :func:`role_plan_records`).

The event judge (``probes.copybench.event_judge.model``), when it is an API model, is asked
about every (reference event, 128-token chunk) pair of every story (nonliteral mode, any model
under test). The stories do not exist yet, so its requests are an **upper bound**: each story
at its full ``nonliteral_max_new_tokens`` and cut into at most
``ceil(nonliteral_max_new_tokens / 128)`` chunks (one spaCy token per generated token at most),
each chunk priced at 128 tokens. Their prompts are placeholders (the paper's attribution
prompt with the event and a stand-in chunk), so none is ever counted as cached.

The fluency judge (``probes.copybench.fluency_judge.model``), when it is an API model, rates
every literal continuation and story: one request per output, priced with the output at its
mode's full ``<mode>_max_new_tokens`` (an upper bound, placeholders again), times
``max_attempts`` when the judge samples (``temperature`` > 0) and may be asked again.

Imported while Snakemake builds the DAG (:func:`plan_inputs`): no numpy at module level.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

from memaudit.config import copybench_prompt_paths, is_api_model

PLANNED_MODES = ("literal", "nonliteral", "qa")
API_DECODINGS = ("greedy", "system")  # memfree controls decoding: open models only
CHUNK_TOKENS = 128  # the judge's window and stride (memaudit.probes.copybench.judge.chunks)


def plan_inputs(config: dict, benchmark: str, mode: str) -> list[str | Path] | str:
    """The mode's items, the demonstrations the prompts are built with and the mode's prompt files of
    ``prompt_dir`` (``prompt: paper``): an edited one re-prices the estimate."""
    from memaudit.probes.registry import FAMILIES

    from memaudit.backends import is_api_model
    from memaudit.backends.planning import BuiltByRole
    from memaudit.probes.copybench.plan import extractor_model, qa_writer

    if mode not in PLANNED_MODES:
        return f"no planner for CopyBench's {mode!r} mode yet"
    job = SimpleNamespace(benchmark=benchmark, mode=mode)  # a published benchmark asks neither role
    if mode == "qa":
        writer = qa_writer(config, job)
        if writer and is_api_model(config["models"][writer]):
            # rule copybench_qa_items asks the writer first; its pairs are the prompts priced here
            return BuiltByRole(f"its questions are written by API model {writer!r} first (rule copybench_qa_items: "
                               f"those requests are in the estimate); build them (snakemake results/datasets/"
                               f"{benchmark}/copybench_qa.jsonl) and estimate again")
        # fact recall's demonstrations are in the prompt file
        return [FAMILIES["copybench"].reads_of(mode), *map(Path, copybench_prompt_paths(config, (mode,)))]
    extractor = extractor_model(config, job)
    if extractor and is_api_model(config["models"][extractor]):
        # rule copybench_items makes both modes' items; building them would pay the extractor first
        return BuiltByRole(f"its items are made with API model {extractor!r} extracting events and characters "
                           "first (rule copybench_items: those requests are in the estimate); build them (snakemake "
                           f"results/datasets/{benchmark}/{FAMILIES['copybench'].reads_of(mode)}) and estimate again")
    return [FAMILIES["copybench"].reads_of(mode), "copybench_demos.json",
            *map(Path, copybench_prompt_paths(config, (mode,)))]


def max_story_chunks(max_new_tokens: int) -> int:
    """The most 128-token chunks a story of ``max_new_tokens`` generated tokens is cut into."""
    return math.ceil(max_new_tokens / CHUNK_TOKENS)


def plan_records(config: dict, model: str, items: Sequence[dict], *, mode: str, datasets: str | Path) -> list[dict]:
    """The requests a CopyBench job of (``model``, ``mode``) sends to API models: the model's own
    generations (if it is an API model) and the event judge's upper bound (if the judge is one)."""
    from memaudit.backends.planning import plan_requests
    from memaudit.io import read_json
    from memaudit.probes.copybench.runner import _params, by_system, prompts_for
    from memaudit.probes.job import ProbeJob

    cfg = ProbeJob("copybench", mode, model, "", config, {}, {}).settings
    # the job of fact recall reads no demonstrations file (its demonstrations: the prompt file's, or Figure 10's)
    demos = {} if mode == "qa" else read_json(Path(datasets) / "copybench_demos.json")
    prompts = prompts_for(items, mode, cfg, demos)
    records = []
    if is_api_model(config["models"][model]):
        from memaudit.backends.base import model_takes_repetition_penalty

        takes_penalty = model_takes_repetition_penalty(config["models"][model])
        for decoding in cfg["decodings"]:
            if decoding in API_DECODINGS:
                for system, positions in by_system(prompts, decoding).items():  # as the runner sends them
                    params = _params(cfg, mode, chat=True, system=system, takes_penalty=takes_penalty)
                    records += plan_requests(model, [prompts[i][2] for i in positions], params)
    judge = (cfg.get("event_judge") or {}).get("model")
    if mode == "nonliteral" and judge and is_api_model(config["models"][judge]):
        decodings = [d for d in cfg["decodings"] if d in API_DECODINGS or not is_api_model(config["models"][model])]
        records += judge_upper_bound(judge, model, prompts, decodings, int(cfg["nonliteral_max_new_tokens"]))
    fluency = (cfg.get("fluency_judge") or {}).get("model")
    if fluency and is_api_model(config["models"][fluency]):
        decodings = [d for d in cfg["decodings"] if d in API_DECODINGS or not is_api_model(config["models"][model])]
        records += fluency_upper_bound(fluency, model, prompts, decodings, int(cfg[f"{mode}_max_new_tokens"]),
                                       cfg["fluency_judge"])
    return records


def fluency_upper_bound(judge: str, model: str, prompts: Sequence[tuple], decodings: Sequence[str],
                        max_new_tokens: int, fcfg: dict) -> list[dict]:
    """Placeholder fluency judgements: one per output the model under test writes, each output at its
    full ``max_new_tokens``, times ``max_attempts`` when the judge samples (each may be asked again)."""
    from memaudit.backends.planning import plan_requests
    from memaudit.probes.copybench.fluency import FluencyJudge, fluency_prompt

    rater = FluencyJudge(None, max_new_tokens=int(fcfg["max_new_tokens"]), temperature=float(fcfg["temperature"]),
                         max_attempts=int(fcfg["max_attempts"]))
    records = []
    for attempt in range(rater.max_attempts):
        texts = []
        for decoding in decodings:
            for it, fmt, *_ in prompts:
                # distinct per output and attempt (the estimate counts identical requests once)
                texts.append(fluency_prompt(_placeholder(
                    f"{model}'s {decoding} output for {it['item_id']} format {fmt}, attempt {attempt}", max_new_tokens)))
        records += plan_requests(judge, texts, rater._params(attempt))
    return records


def judge_upper_bound(judge: str, model: str, prompts: Sequence[tuple], decodings: Sequence[str],
                      max_new_tokens: int) -> list[dict]:
    """Placeholder judge requests: every reference event against every chunk a story can have, per
    (story beginning, format, decoding) the model under test writes."""
    from memaudit.backends.planning import plan_requests
    from memaudit.probes.copybench.judge import ATTRIBUTION_PROMPT, LLMJudge

    n_chunks = max_story_chunks(max_new_tokens)
    texts = []
    for decoding in decodings:
        for it, fmt, *_ in prompts:
            for c in range(n_chunks):
                # distinct per story and chunk (the estimate counts identical requests once), 128 tokens long
                stand_in = _placeholder(f"chunk {c} of {model}'s {decoding} story {it['item_id']} format {fmt}",
                                        CHUNK_TOKENS)
                texts += [ATTRIBUTION_PROMPT.format(claim=event, reference=stand_in)
                          for event in it["reference_events"]]
    return plan_requests(judge, texts, LLMJudge(None).params)


# ----------------------------------------------------------------------------- the roles that build items

def _asked_roles(config: dict, benchmark: str) -> dict[str, str]:
    """``{role: API model}`` of the item builders rule copybench_items / copybench_qa_items ask on ``benchmark``:
    the extractor where a copying mode runs there, the QA writer where fact recall does."""
    from memaudit.probes.copybench.plan import extractor_model, qa_writer, runs

    modes = {mode for b, _, mode in runs(config) if b == benchmark}
    job = SimpleNamespace(benchmark=benchmark, mode=None)
    asked = {"extractor": extractor_model(config, job) if modes & {"literal", "nonliteral"} else None,
             "qa_writer": qa_writer(config, job) if "qa" in modes else None}
    return {role: model for role, model in asked.items() if model and is_api_model(config["models"][model])}


def role_plan_inputs(config: dict, benchmark: str) -> list[str]:
    """What the item builders' planner reads on ``benchmark``: its documents, where an API role builds items."""
    return ["documents.jsonl"] if _asked_roles(config, benchmark) else []


def role_plan_records(config: dict, benchmark: str, datasets: str | Path) -> list[dict]:
    """The requests the API extractor and QA writer are sent while the items are built, before any probe job.

    Each first request is exact, built by the same functions the rules call (so a rerun finds it in the
    cache). What follows depends on replies that do not exist yet, so it is an **upper bound** with
    placeholder text: the extractor asked again ``max_attempts - 1`` times per prompt with a reply of
    its full ``max_new_tokens`` (an unusable reply is shown back to it, :func:`~.extract.repair_prompt`);
    the QA writer's steps 2 and 3 (claim, verification) once for every passage, its question, answer and
    claim each ``max_new_tokens`` long.
    """
    from memaudit.io import read_jsonl

    roles = _asked_roles(config, benchmark)
    documents = read_jsonl(Path(datasets) / "documents.jsonl")
    records = []
    if "extractor" in roles:
        records += _extractor_records(config, roles["extractor"], documents)
    if "qa_writer" in roles:
        records += _qa_writer_records(config, roles["qa_writer"], documents)
    return records


def _placeholder(what: str, tokens: int) -> str:
    """Stand-in text for a reply or output not yet written: ``[what]`` padded to ``tokens`` tokens' length."""
    from memaudit.backends.ledger import CHARS_PER_TOKEN

    return f"[{what}]".ljust(int(tokens * CHARS_PER_TOKEN), ".")


def _extractor_records(config: dict, model: str, documents: Sequence[dict]) -> list[dict]:
    from memaudit.backends.planning import plan_requests
    from memaudit.probes.copybench.build import book_text, books_of
    from memaudit.probes.copybench.extract import LLMExtractor, character_prompt, event_prompt, repair_prompt
    from memaudit.probes.copybench.items import book_extractor

    cfg = config["probes"]["copybench"]
    settings = cfg["extractor"]
    extractor = book_extractor(config, LLMExtractor(None, name=model, max_attempts=int(settings["max_attempts"]),
                                                    max_new_tokens=int(settings["max_new_tokens"])))
    llm = extractor.llm
    prompts = []
    for book, docs in books_of(documents).items():
        title, author, source, _ = extractor.reads(docs[0]["meta"].get("book") or docs[0]["title"], docs[0]["title"],
                                                   docs[0].get("author"), book_text(docs))
        prompts.append(event_prompt(title, author, source, int(cfg["n_events"])))
        if extractor.characters_from == "llm":
            prompts.append(character_prompt(title, author, source))
    records = plan_requests(model, prompts, llm.params(0))
    for attempt in range(1, llm.max_attempts):
        records += plan_requests(model, [repair_prompt(p, _placeholder(f"reply {attempt} to prompt {i}",
                                                                       llm.max_new_tokens), "[the reason]")
                                         for i, p in enumerate(prompts)], llm.params(attempt))
    return records


def _qa_writer_records(config: dict, model: str, documents: Sequence[dict]) -> list[dict]:
    from memaudit.backends.planning import plan_requests
    from memaudit.probes.copybench.qa import CLAIM_PROMPT, GENERATE_PROMPT, VERIFY_PROMPT, passages, writer_params

    settings = config["probes"]["copybench"]
    params = writer_params(settings)
    cuts, _ = passages(documents, words=int(settings["qa_passage_words"]), per_book=int(settings["qa_per_book"]),
                       seed=int(config["seed"]))
    n = params.max_new_tokens
    prompts = [GENERATE_PROMPT.format(passage=c["passage"]) for c in cuts]
    prompts += [CLAIM_PROMPT.format(question=_placeholder(f"question {i}", n), answer=_placeholder(f"answer {i}", n))
                for i in range(len(cuts))]
    prompts += [VERIFY_PROMPT.format(claim=_placeholder(f"claim {i}", n), reference=c["passage"])
                for i, c in enumerate(cuts)]
    return plan_requests(model, prompts, params)
