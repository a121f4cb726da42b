# CopyBench (memaudit.probes.copybench): items once per benchmark, one probe job per (model, mode),
# one summary over every job. Black-box: runs on API models too (MemFree only on open models).
from memaudit.probes.copybench import plan as copybench_plan

register_outputs(copybench_plan.outputs(config))
COPYBENCH_EXTRACTOR = job_models("copybench", [("extractor", copybench_plan.needs_extractor)], model=False)
COPYBENCH_QA_WRITER = job_models("copybench", [("qa_writer", copybench_plan.needs_qa_writer)], model=False)


rule copybench_items:
    input:
        unpack(role_input("copybench", "extractor", needed=copybench_plan.needs_extractor)),
        unpack(lambda wc: copybench_plan.published_inputs(config, wc)),
        documents="results/datasets/{benchmark}/documents.jsonl",
        pretrain=lambda wc: ["results/pretrain/documents.jsonl"] if config.get("pretrain") else [],
        summaries=lambda wc: copybench_plan.summaries_input(config, wc),
    output:
        literal="results/datasets/{benchmark}/copybench_literal.jsonl",
        nonliteral="results/datasets/{benchmark}/copybench_nonliteral.jsonl",
        rejects="results/datasets/{benchmark}/copybench_rejects.csv",
        judge="results/datasets/{benchmark}/copybench_judge.json",
        demos="results/datasets/{benchmark}/copybench_demos.json",
        extraction="results/datasets/{benchmark}/copybench_extraction.csv",
    log:
        "logs/copybench_items/{benchmark}.log",
    benchmark:
        "logs/benchmarks/copybench_items/{benchmark}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    threads: 1
    resources:
        mem_mb=models_mem_mb(3000, COPYBENCH_EXTRACTOR),
        runtime=models_runtime(COPYBENCH_EXTRACTOR),
        api_openai=role_api_slots("copybench", "extractor", "openai", needed=copybench_plan.needs_extractor),
        api_anthropic=role_api_slots("copybench", "extractor", "anthropic", needed=copybench_plan.needs_extractor),
        gpu=models_gpus(COPYBENCH_EXTRACTOR),
    params:
        copybench=lambda wc: jobs.with_role_models(
            copybench_plan.item_settings(config, copybench_plan.ITEMS_KEYS),
            config,
            {copybench_plan.extractor_model(config, wc): False},
        ),
        extractor=lambda wc: copybench_plan.extractor_model(config, wc),
        published=lambda wc: canonical(copybench_plan.published(config, wc.benchmark)),
        seed=config["seed"],
        code_version=family_version("copybench", "items"),
    script:
        "../scripts/copybench_items.py"


# fact recall's questions: the qa_writer role's three-step synthesis, or extractive (no writer named)
rule copybench_qa_items:
    input:
        unpack(role_input("copybench", "qa_writer", needed=copybench_plan.needs_qa_writer)),
        unpack(lambda wc: copybench_plan.published_inputs(config, wc)),
        documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        qa="results/datasets/{benchmark}/copybench_qa.jsonl",
        rejects="results/datasets/{benchmark}/copybench_qa_rejects.csv",
    log:
        "logs/copybench_qa_items/{benchmark}.log",
    benchmark:
        "logs/benchmarks/copybench_qa_items/{benchmark}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    threads: lambda wc: job_threads(1)
    resources:
        mem_mb=models_mem_mb(3000, COPYBENCH_QA_WRITER),
        runtime=models_runtime(COPYBENCH_QA_WRITER),
        gpu=models_gpus(COPYBENCH_QA_WRITER),
        api_openai=role_api_slots("copybench", "qa_writer", "openai", needed=copybench_plan.needs_qa_writer),
        api_anthropic=role_api_slots("copybench", "qa_writer", "anthropic", needed=copybench_plan.needs_qa_writer),
    params:
        copybench=lambda wc: jobs.with_role_models(
            copybench_plan.item_settings(config, copybench_plan.QA_ITEMS_KEYS),
            config,
            {copybench_plan.qa_writer(config, wc): False},
        ),
        writer=lambda wc: copybench_plan.qa_writer(config, wc),
        published=lambda wc: canonical(copybench_plan.published(config, wc.benchmark)),
        seed=config["seed"],
        code_version=family_version("copybench", "items"),
    script:
        "../scripts/copybench_qa_items.py"


COPYBENCH_JUDGES = [
    ("event_judge", copybench_plan.needs_judge_model),
    ("fluency_judge", copybench_plan.needs_fluency_judge),
]
COPYBENCH_PROBE_MODELS = job_models("copybench", COPYBENCH_JUDGES)


rule copybench_probe:
    input:
        unpack(local_model_dir),
        unpack(role_input("copybench", "event_judge", needed=copybench_plan.needs_judge_model)),
        unpack(role_input("copybench", "fluency_judge", needed=copybench_plan.needs_fluency_judge)),
        unpack(lambda wc: copybench_plan.probe_inputs(config, wc)),
    output:
        generations="results/scores/{benchmark}/{model}/copybench_{mode}_items.jsonl",
        documents="results/scores/{benchmark}/{model}/copybench_{mode}_documents.csv",
        outcomes="results/scores/{benchmark}/{model}/copybench_{mode}_outcomes.json",
    log:
        "logs/copybench_probe/{benchmark}/{model}/{mode}.log",
    benchmark:
        "logs/benchmarks/copybench_probe/{benchmark}/{model}/{mode}.tsv"
    wildcard_constraints:
        mode=mode_constraint("copybench"),
    conda:
        "../../envs/memaudit.yaml"
    threads: lambda wc: job_threads(1)
    resources:
        # the judges run in the job beside the model under test: their GPUs, memory and API slots count too
        mem_mb=models_mem_mb(4000, COPYBENCH_PROBE_MODELS),
        runtime=models_runtime(COPYBENCH_PROBE_MODELS),
        api_openai=probe_api_slots("copybench", COPYBENCH_JUDGES, "openai"),
        api_anthropic=probe_api_slots("copybench", COPYBENCH_JUDGES, "anthropic"),
        gpu=models_gpus(COPYBENCH_PROBE_MODELS),
    params:
        family="copybench",
        copybench=lambda wc: jobs.with_role_models(
            probe_settings("copybench"),
            config,
            dict.fromkeys(job_models("copybench", COPYBENCH_JUDGES, model=False)(wc), False),
        ),
        mode_settings=lambda wc: probe_settings(f"copybench_{wc.mode}"),
        entry=model_entry,
        code_version=family_version("copybench"),
    script:
        "../scripts/probe.py"


rule copybench_summary:
    input:
        unpack(lambda wc: copybench_plan.summary_inputs(config)),
    output:
        rates=report(
            "results/summary/copybench.csv",
            caption="../report/copybench_summary.rst",
            category="CopyBench",
            labels={"table": "copying rates with bootstrap intervals"},
        ),
        differences=report(
            "results/summary/copybench_differences.csv",
            caption="../report/copybench_differences.rst",
            category="CopyBench",
            labels={"table": "each model minus its base or control, paired"},
        ),
        figure=report(
            "results/figures/copybench/distributions.png",
            caption="../report/copybench_distributions.rst",
            category="CopyBench",
            labels={"figure": "score distributions"},
        ),
        figure_svg="results/figures/copybench/distributions.svg",
        recall_figure=report(
            "results/figures/copybench/copying_vs_recall.png",
            caption="../report/copybench_copying_vs_recall.rst",
            category="CopyBench",
            labels={"figure": "copying against fact recall"},
        ),
        recall_figure_svg="results/figures/copybench/copying_vs_recall.svg",
    log:
        "logs/copybench_summary/summary.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        bases=lambda wc: copybench_plan.bases(config),
        declared=lambda wc: copybench_plan.declared(config),
        members_of=lambda wc: copybench_plan.members_of(config),
        # labels given per book: the differences' intervals resample the items' books
        per_book=lambda wc: copybench_plan.book_benchmarks(config),
        seed=config["seed"],
        code_version=family_version("copybench", "summary"),
    script:
        "../scripts/copybench_summary.py"
