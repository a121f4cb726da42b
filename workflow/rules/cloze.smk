# Information-guided cloze probes (memaudit.probes.cloze): surprisal tokens once per benchmark (the
# reference model, an optional knowledge filter), one probe job per (model, mode), one summary.
from memaudit.probes.cloze import plan as cloze_plan

register_outputs(cloze_plan.outputs(config))
# the models cloze_items loads: the reference and a local knowledge filter
CLOZE_ITEMS_MODELS = job_models("cloze", [("reference", None), ("filter", cloze_plan.uses_filter)], model=False)


rule cloze_items:
    input:
        unpack(role_input("cloze", "reference")),
        unpack(role_input("cloze", "filter", needed=cloze_plan.uses_filter)),
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        cloze_items="results/datasets/{benchmark}/cloze_items.jsonl",
        candidates="results/datasets/{benchmark}/cloze_candidates.csv",
    log:
        "logs/cloze_items/{benchmark}.log",
    benchmark:
        "logs/benchmarks/cloze_items/{benchmark}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    threads: lambda wc: job_threads(1)
    resources:
        # a local knowledge filter is loaded in this job beside the reference: its GPUs and memory count too
        mem_mb=models_mem_mb(4000, CLOZE_ITEMS_MODELS),
        runtime=models_runtime(CLOZE_ITEMS_MODELS),
        gpu=models_gpus(CLOZE_ITEMS_MODELS),
        api_openai=role_api_slots("cloze", "filter", "openai", needed=cloze_plan.uses_filter),
        api_anthropic=role_api_slots("cloze", "filter", "anthropic", needed=cloze_plan.uses_filter),
    params:
        # the reference's max_tokens and batch_size (it scores every word), a logit filter's too
        cloze=lambda wc: jobs.with_role_models(cloze_plan.item_settings(config), config, cloze_plan.role_models(config)),
        reference=lambda wc: role_model(config, "cloze", "reference"),
        code_version=family_version("cloze", "items"),
    script:
        "../scripts/cloze_items.py"


rule cloze_probe:
    input:
        unpack(local_model_dir),
        records="results/datasets/{benchmark}/cloze_items.jsonl",
    output:
        documents="results/scores/{benchmark}/{model}/cloze_{mode}_documents.csv",
        texts="results/scores/{benchmark}/{model}/cloze_{mode}_texts.csv",
        tokens="results/scores/{benchmark}/{model}/cloze_{mode}_tokens.csv",
    log:
        "logs/cloze_probe/{benchmark}/{model}/{mode}.log",
    benchmark:
        "logs/benchmarks/cloze_probe/{benchmark}/{model}/{mode}.tsv"
    wildcard_constraints:
        mode=mode_constraint("cloze"),
    conda:
        "../../envs/memaudit.yaml"
    threads: lambda wc: job_threads(1)
    resources:
        mem_mb=models_mem_mb(4000, PROBED_MODEL),
        runtime=models_runtime(PROBED_MODEL),
        api_openai=api_openai_slots,
        api_anthropic=api_anthropic_slots,
        gpu=gpu_slots,
    params:
        family="cloze",
        # how the black-box mode asks (prompt, max_new_tokens) is no concern of the logit mode's jobs
        cloze=lambda wc: cloze_plan.probe_settings(config, wc.mode),
        mode_settings=lambda wc: probe_settings(f"cloze_{wc.mode}"),
        entry=model_entry,
        code_version=family_version("cloze"),
    script:
        "../scripts/probe.py"


rule cloze_summary:
    input:
        unpack(lambda wc: cloze_plan.summary_inputs(config)),
    output:
        table=report(
            "results/summary/cloze.csv",
            caption="../report/cloze_summary.rst",
            category="Cloze probes",
            labels={"table": "precision, recall and F-beta of memorised-text detection"},
        ),
        differences=report(
            "results/summary/cloze_differences.csv",
            caption="../report/cloze_differences.rst",
            category="Cloze probes",
            labels={"table": "reconstruction rate, each model minus its base or control"},
        ),
        versus=report(
            "results/summary/cloze_vs_prefix.csv",
            caption="../report/cloze_vs_prefix.rst",
            category="Cloze probes",
            labels={"table": "cloze probes beside the prefix-LCS baseline"},
        ),
        overlap=report(
            "results/summary/cloze_overlap.csv",
            caption="../report/cloze_overlap.rst",
            category="Cloze probes",
            labels={"table": "passages each combination of token types flags"},
        ),
        figure=report(
            "results/figures/cloze/reconstruction.png",
            caption="../report/cloze_reconstruction.rst",
            category="Cloze probes",
            labels={"figure": "reconstruction rate by model, members and non-members"},
        ),
        figure_svg="results/figures/cloze/reconstruction.svg",
        by_size=report(
            "results/summary/cloze_by_size.csv",
            caption="../report/cloze_by_size_table.rst",
            category="Cloze probes",
            labels={"table": "masked words reconstructed by model size"},
        ),
        size_figure=report(
            "results/figures/cloze/recovery_by_size.png",
            caption="../report/cloze_by_size.rst",
            category="Cloze probes",
            labels={"figure": "masked words reconstructed by model size"},
        ),
        size_figure_svg="results/figures/cloze/recovery_by_size.svg",
    log:
        "logs/cloze_summary/summary.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        bases=lambda wc: cloze_plan.bases(config),
        declared=lambda wc: cloze_plan.declared(config),
        members_of=lambda wc: cloze_plan.members_of(config),
        prefix_runs=lambda wc: cloze_plan.prefix_runs(config),
        # cloze.csv's prompt column: what asked the black-box models (their jobs rerun with it)
        prompt=lambda wc: probe_settings("cloze")["prompt"],
        # the benchmarks of input.documents (labels given per book: intervals over books)
        book_benchmarks=lambda wc: cloze_plan.book_benchmarks(config),
        seed=config["seed"],
        code_version=family_version("cloze", "summary"),
    script:
        "../scripts/cloze_summary.py"
