"""CopyBench's part of the job list: which (benchmark, model, mode) runs, what its summary reads, and its
method names (no numpy or pandas: read by every config check and while Snakemake builds the DAG)."""

from __future__ import annotations

from pathlib import Path

from memaudit.config import contaminated_on, copybench_prompt_paths, is_api_model, labels_per_book
from memaudit.jobs import controls, declared_controls, job_settings, probe_runs

METHODS = {"literal": ("copybench_rougeL", "copybench_rougeL_excess"),
           "nonliteral": ("copybench_characters", "copybench_events"), "qa": ("copybench_qa_f1",)}


def method_name(method: str, decoding: str) -> str:
    return method if decoding == "greedy" else f"{method}_{decoding}"


def method_names(config: dict, runs) -> list[str]:
    """The registry's ``methods`` hook: each probed mode's :data:`METHODS` under every configured decoding
    (:func:`method_name`). ``copybench_rougeL_excess`` is listed though a run without chance references
    (``chance_references: 0``, or items of one book) leaves it out."""
    modes = dict.fromkeys(mode for _, _, mode in runs)
    decodings = config["probes"]["copybench"]["decodings"]
    return [method_name(m, d) for mode in modes for d in decodings for m in METHODS[mode]]


def runs(config: dict) -> list[tuple[str, str, str]]:
    return probe_runs(config, "copybench")


def bases(config: dict) -> dict[str, str]:
    """Per model CopyBench runs on, its control (the base it is fine-tuned from, or its declared
    ``control``): the differences table's pairs (:func:`memaudit.jobs.controls`)."""
    return controls(config, "copybench")


def declared(config: dict) -> list[str]:
    return declared_controls(config, "copybench")


def members_of(config: dict) -> dict[str, list[str]]:
    """Per paired model, the benchmarks whose members it was fine-tuned on (where its rows are checks)."""
    return {m: contaminated_on(config["models"][m]) for m in bases(config)}


def book_benchmarks(config: dict) -> list[str]:
    """The benchmarks CopyBench runs on whose labels are given per book (:func:`memaudit.config.labels_per_book`):
    there the summary's intervals resample the items' books."""
    return sorted({b for b, _, _ in runs(config) if labels_per_book(config["benchmarks"][b])})


def published(config: dict, benchmark: str) -> dict | None:
    """The benchmark's ``published`` block when it is CopyBench's published files (format copybench), else None."""
    block = config["benchmarks"][benchmark].get("published") or {}
    return block if block.get("format") == "copybench" else None


def published_inputs(config: dict, wildcards) -> dict[str, str]:
    """The published data files (those in the folder) and the labels file: editing one rebuilds the items."""
    from memaudit.datasets.copybench_published import DATA_FILES

    block = published(config, wildcards.benchmark)
    if block is None:
        return {}
    folder = Path(block["path"])
    files = {f"published_{mode}": str(folder / name) for mode, name in DATA_FILES.items() if (folder / name).is_file()}
    return files | ({"labels": block["labels"]} if block.get("labels") else {})


# What copybench_items and copybench_qa_items read of probes.copybench (build_items with its extractor, and
# build_qa_items, memaudit.probes.copybench.runner): their params hold these keys only, so that changing how
# the probe jobs prompt, decode and score reruns the probes and leaves the items (an extractor's or a
# question writer's LLM work) alone. A key a builder comes to read must join its list (else a KeyError).
ITEMS_KEYS = ("extractor", "max_characters", "min_mentions", "n_beginnings", "n_events", "prefix_words",
              "reference_words")
QA_ITEMS_KEYS = ("qa_passage_words", "qa_per_book", "qa_writer")


def item_settings(config: dict, keys: tuple[str, ...]) -> dict:
    """``probes.copybench`` as its jobs see it (:func:`memaudit.jobs.job_settings`), cut to ``keys``."""
    cfg = job_settings(config, "copybench")
    return {k: cfg[k] for k in keys if k in cfg}


def check_config(config: dict) -> list[str]:
    """CopyBench on its published files: stories need an event judge that is a model, since the MiniLM
    judge is calibrated on pairs cut from the books' text, which the published files do not hold.

    Story items built from books: a book gives at most ``n_events`` events (the extractor's prompt asks
    for that many, the extractive builder cuts the book into that many stretches), of which the first
    ``n_beginnings`` are beginnings; as many beginnings as events leave no event that is only a reference.

    MemFree on an API model (it decodes on the provider's side): its job stopped at its start.

    A mode run on a published folder without its data file: its items were none, and its probe job stopped
    after the others had run."""
    problems = []
    cfg = config["probes"].get("copybench", {})
    built = [b for b, _, _ in runs(config) if published(config, b) is None]
    if built and int(cfg["n_beginnings"]) >= int(cfg["n_events"]):
        problems.append(f"probes.copybench.n_beginnings: {cfg['n_beginnings']} story beginnings of a book's n_events "
                        f"({cfg['n_events']}) events leave no event that is only a reference; give fewer "
                        "beginnings or more events")
    if "memfree" in cfg.get("decodings", []):  # else the API model's job stops at its start (memfree_index)
        modes_of: dict[str, list[str]] = {}
        for _, model, mode in runs(config):
            if is_api_model(config["models"][model]) and mode not in modes_of.get(model, []):
                modes_of.setdefault(model, []).append(mode)
        for model, modes in sorted(modes_of.items()):
            problems.append(f"probes.copybench.decodings: memfree needs control of decoding, which API model "
                            f"{model!r} does not give (it runs {', '.join(f'copybench_{m}' for m in sorted(modes))}); "
                            f"leave memfree out of the decodings, or {model!r} out of those modes' models")
    for benchmark, mode in sorted({(b, mode) for b, _, mode in runs(config)}, key=lambda r: (r[1], r[0])):
        block = published(config, benchmark)
        folder = Path(block["path"]) if block is not None else None
        if folder is None or not folder.is_dir():
            continue
        # only for a published benchmark: the loaders' module imports pandas (this check runs in every
        # snakemake start and in check-config, which import neither)
        from memaudit.datasets.copybench_published import DATA_FILES

        if not (folder / DATA_FILES[mode]).is_file():
            problems.append(f"probes.copybench_{mode}: benchmark {benchmark!r} is a published CopyBench folder "
                            f"without {DATA_FILES[mode]} ({folder}); put the file there or leave {benchmark!r} "
                            f"out of probes.copybench_{mode}.benchmarks")
    judge = (cfg.get("event_judge", {}) or {}).get("model")
    for benchmark in sorted({b for b, _, mode in runs(config) if mode == "nonliteral"}):
        if published(config, benchmark) is not None and not judge:
            problems.append(f"probes.copybench.event_judge.model: benchmark {benchmark!r} is CopyBench's published "
                            f"files, which hold no book text to calibrate the local MiniLM judge on; name a judge "
                            f"model (a causal LM or an API model) or leave {benchmark!r} out of "
                            f"probes.copybench_nonliteral.benchmarks")
    return problems


def config_warnings(config: dict) -> list[str]:
    """Story items built with ``n_events`` <= :data:`~memaudit.probes.copybench.metrics.EVENT_THRESHOLD`: an
    item's reference events are its book's events less its beginning, so no story can have the paper's 5
    found and ``copybench_events`` is 0 whatever the model writes. A warning, not an error: small test
    configs use 5 events, and their character and literal results still mean something."""
    from memaudit.probes.copybench.metrics import EVENT_THRESHOLD

    n_events = int(config["probes"].get("copybench", {}).get("n_events", 20))
    built = sorted({b for b, _, mode in runs(config) if mode == "nonliteral" and published(config, b) is None})
    if not built or n_events - 1 >= EVENT_THRESHOLD:
        return []
    return [f"probes.copybench.n_events: {n_events} events a book leave each built story item at most "
            f"{n_events - 1} reference events (its beginning is not one), fewer than the {EVENT_THRESHOLD} found "
            f"that count a story as event copying: copybench_events (events>={EVENT_THRESHOLD}) on benchmark"
            f"{'s' if len(built) > 1 else ''} {', '.join(built)} can only be 0; give n_events at least "
            f"{EVENT_THRESHOLD + 1}"]


def needs_judge_model(config: dict, wildcards) -> bool:
    """Whether a probe job judges events with a configured model (else the local MiniLM judge)."""
    judge = config["probes"].get("copybench", {}).get("event_judge", {}) or {}
    return wildcards.mode == "nonliteral" and bool(judge.get("model"))


def needs_fluency_judge(config: dict, wildcards) -> bool:
    """Whether a probe job rates its outputs' fluency with a configured model (literal and story modes)."""
    judge = config["probes"].get("copybench", {}).get("fluency_judge", {}) or {}
    return wildcards.mode in ("literal", "nonliteral") and bool(judge.get("model"))


def _is_published(config: dict, wildcards) -> bool:
    return wildcards is not None and published(config, wildcards.benchmark) is not None


def needs_extractor(config: dict, wildcards=None) -> bool:
    """Whether rule copybench_items asks a model for events and characters (else they are extractive;
    a published benchmark's come from its files)."""
    return (bool(config["probes"].get("copybench", {}).get("extractor", {}).get("model"))
            and not _is_published(config, wildcards))


def extractor_model(config: dict, wildcards=None) -> str | None:
    return config["probes"]["copybench"]["extractor"]["model"] if needs_extractor(config, wildcards) else None


def summaries_input(config: dict, wildcards=None) -> list[str]:
    """The books' summaries the extractor reads (an input, so editing them rebuilds the items)."""
    path = config["probes"].get("copybench", {}).get("extractor", {}).get("summaries")
    return [path] if path and needs_extractor(config, wildcards) else []


def qa_writer(config: dict, wildcards=None) -> str | None:
    """The model synthesising fact-recall pairs (``probes.copybench.qa_writer.model``); None = extractive, or
    a published benchmark (its ``data.qa.json`` as published)."""
    if _is_published(config, wildcards):
        return None
    return (config["probes"].get("copybench", {}).get("qa_writer", {}) or {}).get("model") or None


def needs_qa_writer(config: dict, wildcards) -> bool:
    return qa_writer(config, wildcards) is not None


def probe_inputs(config: dict, wildcards) -> dict[str, str | list[str]]:
    """A probe job's item-side inputs: fact recall reads its items alone (no judge, no copying demonstrations)."""
    stem = f"results/datasets/{wildcards.benchmark}"
    inputs = {"records": f"{stem}/copybench_{wildcards.mode}.jsonl", "documents": f"{stem}/documents.jsonl"}
    if wildcards.mode != "qa":
        inputs.update(judge=f"{stem}/copybench_judge.json", demos=f"{stem}/copybench_demos.json")
    cfg = config["probes"]["copybench"]
    if cfg.get("memfree_rejection_file") and "memfree" in cfg.get("decodings", []):
        inputs["rejection_corpus"] = cfg["memfree_rejection_file"]  # an input: a new corpus reruns MemFree
    prompts = copybench_prompt_paths(config, (wildcards.mode,))
    if prompts:  # inputs: an edited prompt file reruns the mode's probes, not the other modes'
        inputs["prompts"] = prompts
    return inputs


def summary_inputs(config: dict) -> dict[str, list[str]]:
    done = runs(config)
    return {
        "outcomes": [f"results/scores/{b}/{m}/copybench_{mode}_outcomes.json" for b, m, mode in done],
        "generations": [f"results/scores/{b}/{m}/copybench_{mode}_items.jsonl" for b, m, mode in done],
    }


def outputs(config: dict) -> list[str]:
    if not runs(config):
        return []
    return ["results/summary/copybench.csv", "results/summary/copybench_differences.csv",
            "results/figures/copybench/distributions.png", "results/figures/copybench/copying_vs_recall.png"]
