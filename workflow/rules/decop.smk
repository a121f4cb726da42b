# DE-COP (memaudit.probes.decop): multiple-choice items once per benchmark, one probe job per (model, mode).
from memaudit.probes.decop import plan as decop_plan

# A published benchmark's questions come ready-made: no paraphraser (decop_plan.needs_paraphraser).
register_outputs(decop_plan.outputs(config))
DECOP_PARAPHRASER = job_models("decop", [("paraphraser", decop_plan.needs_paraphraser)], model=False)


rule decop_items:
    input:
        unpack(role_input("decop", "paraphraser", needed=decop_plan.needs_paraphraser)),
        unpack(published_file),
        documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        mcq="results/datasets/{benchmark}/decop_items.jsonl",
        qc="results/datasets/{benchmark}/decop_qc.csv",
    log:
        "logs/decop_items/{benchmark}.log",
    benchmark:
        "logs/benchmarks/decop_items/{benchmark}.tsv"
    # Paraphrasing heads DE-COP's and KTD's chains: at priority 0 the demo's techdocs paraphrases
    # started after every tiny-model job, 21 minutes into make run, and their probes ran last on one
    # core. Above the tiny models' pretraining (10), below a fine-tune (20): see jobs.model_priority.
    priority: 15
    conda:
        "../../envs/memaudit.yaml"
    # a local paraphraser decodes on one thread (memaudit.probes.decop.paraphrase); an API one waits
    threads: 1
    resources:
        mem_mb=models_mem_mb(4000, DECOP_PARAPHRASER),
        runtime=models_runtime(DECOP_PARAPHRASER),
        api_openai=role_api_slots("decop", "paraphraser", "openai", needed=decop_plan.needs_paraphraser),
        api_anthropic=role_api_slots("decop", "paraphraser", "anthropic", needed=decop_plan.needs_paraphraser),
        gpu=models_gpus(DECOP_PARAPHRASER),
    params:
        # an API paraphraser's entry too: it has no weights an input could date (jobs.with_role_models)
        decop=lambda wc: jobs.with_role_models(
            decop_plan.item_settings(config, wc.benchmark),
            config,
            {role_model(config, "decop", "paraphraser") if decop_plan.needs_paraphraser(config, wc) else None: False},
        ),
        paraphraser=lambda wc: (
            role_model(config, "decop", "paraphraser") if decop_plan.needs_paraphraser(config, wc) else None
        ),
        published=lambda wc: canonical(config["benchmarks"][wc.benchmark].get("published")),
        seed=config["seed"],
        code_version=family_version("decop", "items"),
    script:
        "../scripts/decop_items.py"


rule decop_probe:
    input:
        unpack(local_model_dir),
        mcq=rules.decop_items.output.mcq,
    output:
        answers="results/scores/{benchmark}/{model}/decop_{mode}_answers.csv",
        documents="results/scores/{benchmark}/{model}/decop_{mode}_documents.csv",
        table="results/scores/{benchmark}/{model}/decop_{mode}_table.csv",
        calibration="results/scores/{benchmark}/{model}/decop_{mode}_calibration.json",
    log:
        "logs/decop_probe/{benchmark}/{model}/{mode}.log",
    benchmark:
        "logs/benchmarks/decop_probe/{benchmark}/{model}/{mode}.tsv"
    wildcard_constraints:
        mode=mode_constraint("decop"),
    conda:
        "../../envs/memaudit.yaml"
    # logit prompts are long (four passages); likelihood and black-box jobs are light or wait on an API
    threads: lambda wc: job_threads(2 if wc.mode == "logit" else 1)
    resources:
        mem_mb=models_mem_mb(4000, PROBED_MODEL),
        runtime=models_runtime(PROBED_MODEL),
        api_openai=api_openai_slots,
        api_anthropic=api_anthropic_slots,
        gpu=gpu_slots,
    params:
        family="decop",
        decop=lambda wc: decop_plan.settings(config, wc.benchmark),
        entry=model_entry,
        mode_settings=lambda wc: probe_settings(f"decop_{wc.mode}"),
        code_version=family_version("decop"),
    script:
        "../scripts/probe.py"


rule decop_figures:
    input:
        unpack(lambda wc: decop_plan.figure_inputs(config, wc.benchmark)),
    output:
        summary=report(
            "results/summary/decop_{benchmark}.csv",
            caption="../report/decop_summary.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "table": "AUC (every model, mode and length)"},
        ),
        auc_by_size=report(
            "results/figures/{benchmark}/decop/auc_by_model_size.png",
            caption="../report/decop_auc_by_model_size.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "AUC by model size"},
        ),
        auc_by_size_svg="results/figures/{benchmark}/decop/auc_by_model_size.svg",
        auc_by_length=report(
            "results/figures/{benchmark}/decop/auc_by_length.png",
            caption="../report/decop_auc_by_length.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "AUC by passage length"},
        ),
        auc_by_length_svg="results/figures/{benchmark}/decop/auc_by_length.svg",
        calibration=report(
            "results/figures/{benchmark}/decop/accuracy_calibration.png",
            caption="../report/decop_accuracy_calibration.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "accuracy with and without calibration"},
        ),
        calibration_svg="results/figures/{benchmark}/decop/accuracy_calibration.svg",
        position=report(
            "results/figures/{benchmark}/decop/accuracy_by_position.png",
            caption="../report/decop_accuracy_by_position.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "accuracy by verbatim position"},
        ),
        position_svg="results/figures/{benchmark}/decop/accuracy_by_position.svg",
        probabilities=report(
            "results/figures/{benchmark}/decop/label_probabilities.png",
            caption="../report/decop_label_probabilities.rst",
            category="DE-COP",
            labels={"benchmark": "{benchmark}", "figure": "label probabilities"},
        ),
        probabilities_svg="results/figures/{benchmark}/decop/label_probabilities.svg",
    log:
        "logs/decop_figures/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        # the models' labels in the figure by size (not prepare_model's: renaming one redraws this alone)
        families=lambda wc: jobs.families(config, decop_plan.figure_models(config, wc.benchmark)),
        code_version=family_version("decop", "summary"),
    script:
        "../scripts/decop_figures.py"
