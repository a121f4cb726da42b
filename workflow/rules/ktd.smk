# KTD (memaudit.probes.ktd): knockoffs from the benchmark's paraphrase pool (DE-COP's items, topped up
# by ktd_pool when KTD's largest m exceeds their three), one probe job per model (importance scores of
# texts and knockoffs, W, knockoff+ over draws), one summary.
from memaudit.probes.ktd import plan as ktd_plan

register_outputs(ktd_plan.outputs(config))
KTD_PARAPHRASER = job_models("decop", [("paraphraser", None)], model=False)
KTD_PROBE_MODELS = job_models(extra=lambda wc: ktd_plan.reference_models(config, wc.model))


rule ktd_pool:
    input:
        unpack(role_input("decop", "paraphraser")),
        decop_items="results/datasets/{benchmark}/decop_items.jsonl",
    output:
        pool="results/datasets/{benchmark}/ktd_pool.jsonl",
        qc="results/datasets/{benchmark}/ktd_pool_qc.csv",
    log:
        "logs/ktd_pool/{benchmark}.log",
    benchmark:
        "logs/benchmarks/ktd_pool/{benchmark}.tsv"
    priority: 15
    conda:
        "../../envs/memaudit.yaml"
    # as decop_items: a local paraphraser decodes on one thread, an API one waits
    threads: 1
    resources:
        mem_mb=models_mem_mb(4000, KTD_PARAPHRASER),
        runtime=models_runtime(KTD_PARAPHRASER),
        api_openai=role_api_slots("decop", "paraphraser", "openai"),
        api_anthropic=role_api_slots("decop", "paraphraser", "anthropic"),
        gpu=models_gpus(KTD_PARAPHRASER),
    params:
        size=lambda wc: ktd_plan.pool_size(config["probes"]["ktd"]),
        paraphrase=lambda wc: jobs.with_role_models(
            canonical(config["probes"]["decop"]["paraphrase"]),
            config,
            {role_model(config, "decop", "paraphraser"): False},
        ),
        paraphraser=lambda wc: role_model(config, "decop", "paraphraser"),
        seed=config["seed"],
        code_version=family_version("ktd", "pool"),
    script:
        "../scripts/ktd_pool.py"


rule ktd_probe:
    input:
        unpack(local_model_dir),
        records=lambda wc: f"results/datasets/{wc.benchmark}/{ktd_plan.records_file(config['probes']['ktd'])}",
        references=lambda wc: [f"results/models/{r}" for r in ktd_plan.reference_models(config, wc.model)],
    output:
        documents="results/scores/{benchmark}/{model}/ktd_documents.csv",
        selection="results/scores/{benchmark}/{model}/ktd_selection.csv",
        symmetry="results/scores/{benchmark}/{model}/ktd_symmetry.csv",
        w="results/scores/{benchmark}/{model}/ktd_w.csv",
        imbalance="results/scores/{benchmark}/{model}/ktd_imbalance.csv",
    log:
        "logs/ktd_probe/{benchmark}/{model}.log",
    benchmark:
        "logs/benchmarks/ktd_probe/{benchmark}/{model}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    threads: lambda wc: job_threads(1)
    resources:
        # its reference models are loaded in this job after the model under test: their GPUs and memory count too
        mem_mb=models_mem_mb(6000, KTD_PROBE_MODELS),
        runtime=models_runtime(KTD_PROBE_MODELS),
        gpu=models_gpus(KTD_PROBE_MODELS),
    params:
        family="ktd",
        # the reference models' max_tokens and batch_size: they score every text here
        ktd=lambda wc: jobs.with_role_models(
            probe_settings("ktd"), config, dict.fromkeys(ktd_plan.reference_models(config, wc.model), True)
        ),
        reference_models=lambda wc: ktd_plan.reference_models(config, wc.model),
        entry=model_entry,
        seed=config["seed"],
        code_version=family_version("ktd"),
    script:
        "../scripts/probe.py"


rule ktd_summary:
    input:
        unpack(lambda wc: ktd_plan.summary_inputs(config)),
    output:
        table=report(
            "results/summary/ktd.csv",
            caption="../report/ktd_summary.rst",
            category="KTD",
            labels={"table": "knockoff+ FDR and power, symmetry of W"},
        ),
        fdr_power=report(
            "results/figures/ktd/fdr_power.png",
            caption="../report/ktd_fdr_power.rst",
            category="KTD",
            labels={"figure": "FDR and power against q"},
        ),
        fdr_power_svg="results/figures/ktd/fdr_power.svg",
        w=report(
            "results/figures/ktd/w_distributions.png",
            caption="../report/ktd_w_distributions.rst",
            category="KTD",
            labels={"figure": "distributions of W"},
        ),
        w_svg="results/figures/ktd/w_distributions.svg",
        imbalance=report(
            "results/summary/ktd_imbalance.csv",
            caption="../report/ktd_imbalance.rst",
            category="KTD",
            labels={"table": "knockoff+ with few members (Appendix B)"},
        ),
        imbalance_figure=report(
            "results/figures/ktd/imbalance.png",
            caption="../report/ktd_imbalance_figure.rst",
            category="KTD",
            labels={"figure": "FDR and power with few members"},
        ),
        imbalance_figure_svg="results/figures/ktd/imbalance.svg",
        m_size=report(
            "results/figures/ktd/m_and_size.png",
            caption="../report/ktd_m_and_size.rst",
            category="KTD",
            labels={"figure": "FDR and power against m and model size"},
        ),
        m_size_svg="results/figures/ktd/m_and_size.svg",
    log:
        "logs/ktd_summary/summary.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        # only KTD's models: adding a model elsewhere does not redraw the summary
        contaminated=lambda wc: {
            m: contaminated_on(config["models"][m]) for m in sorted({m for _, m, _ in ktd_plan.runs(config)})
        },
        m=config["probes"].get("ktd", {}).get("m"),
        code_version=family_version("ktd", "summary"),
    script:
        "../scripts/ktd_summary.py"
