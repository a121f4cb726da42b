# DE-COP (memaudit.decop): multiple-choice items once per benchmark, one probe job per (model, mode).


rule decop_items:
    input:
        unpack(decop_paraphraser_input),
        documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        mcq="results/datasets/{benchmark}/decop_items.jsonl",
        qc="results/datasets/{benchmark}/decop_qc.csv",
    params:
        decop=canonical(DECOP),
        paraphraser=lambda wc: None if has_published_items(config["benchmarks"][wc.benchmark]) else DECOP_PARAPHRASER,
        published=lambda wc: canonical(config["benchmarks"][wc.benchmark].get("published")),
        seed=config["seed"],
    # a local paraphraser decodes on one thread (memaudit.decop.paraphrase); an API one waits
    threads: 1
    resources:
        mem_mb=4000,
        api_openai=decop_paraphraser_slots("openai"),
        api_anthropic=decop_paraphraser_slots("anthropic"),
        gpu=decop_paraphraser_gpus,
    log:
        "logs/decop_items/{benchmark}.log",
    benchmark:
        "logs/benchmarks/decop_items/{benchmark}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/decop_items.py"


rule decop_probe:
    input:
        unpack(decop_model_input),
        mcq=rules.decop_items.output.mcq,
    output:
        answers="results/scores/{benchmark}/{model}/decop_{mode}_answers.csv",
        documents="results/scores/{benchmark}/{model}/decop_{mode}_documents.csv",
        table="results/scores/{benchmark}/{model}/decop_{mode}_table.csv",
        calibration="results/scores/{benchmark}/{model}/decop_{mode}_calibration.json",
    wildcard_constraints:
        mode="logit|blackbox|likelihood",
    params:
        decop=canonical(DECOP),
        entry=model_entry,
        passages_per_document=lambda wc: config["probes"][f"decop_{wc.mode}"].get("passages_per_document"),
    # logit prompts are long (four passages); likelihood and black-box jobs are light or wait on an API
    threads: lambda wc: job_threads(2 if wc.mode == "logit" else 1)
    resources:
        mem_mb=4000,
        api_openai=api_openai_slots,
        api_anthropic=api_anthropic_slots,
        gpu=probe_gpu_slots,
    log:
        "logs/decop_probe/{benchmark}/{model}/{mode}.log",
    benchmark:
        "logs/benchmarks/decop_probe/{benchmark}/{model}/{mode}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/decop_probe.py"


rule decop_figures:
    input:
        unpack(decop_figure_inputs),
    output:
        summary=report(
            "results/summary/decop_{benchmark}.csv",
            caption="../report/decop_summary.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "AUC table (every model, mode and length)"},
        ),
        auc_by_size=report(
            "results/figures/{benchmark}/decop/auc_by_model_size.png",
            caption="../report/decop_auc_by_model_size.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "AUC by model size"},
        ),
        auc_by_length=report(
            "results/figures/{benchmark}/decop/auc_by_length.png",
            caption="../report/decop_auc_by_length.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "AUC by passage length"},
        ),
        calibration=report(
            "results/figures/{benchmark}/decop/accuracy_calibration.png",
            caption="../report/decop_accuracy_calibration.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "accuracy with and without calibration"},
        ),
        position=report(
            "results/figures/{benchmark}/decop/accuracy_by_position.png",
            caption="../report/decop_accuracy_by_position.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "accuracy by verbatim position"},
        ),
        probabilities=report(
            "results/figures/{benchmark}/decop/label_probabilities.png",
            caption="../report/decop_label_probabilities.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "label probabilities"},
        ),
    log:
        "logs/decop_figures/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/decop_figures.py"
