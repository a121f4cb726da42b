# Stage 4a: statistics per (benchmark, model), the blind baseline, the summary tables.
from memaudit.stats.workflow import api_model_rows


rule metrics:
    input:
        documents=probe_documents,
        # each document's book: intervals over whole books where labels are given per book
        benchmark_documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        metrics=report(
            "results/metrics/{benchmark}/{model}.csv",
            caption="../report/metrics.rst",
            category="Metrics",
            subcategory="{benchmark}",
            labels=metrics_labels,
        ),
        # conformal BH over the q grid: FDR and power per (method, q), and the documents named
        selection="results/selection/{benchmark}/{model}.csv",
        named="results/selection/{benchmark}/{model}_named.csv",
    log:
        "logs/metrics/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        contaminated=is_contaminated,
        stats=stats_settings("n_boot_small", "n_boot_ci") | {"selection": metrics_selection_settings()},
        seed=config["seed"],
        per_book=labels_per_book_param,
        code_version=step_version("stats"),
    script:
        "../scripts/metrics.py"


rule blind_baseline:
    input:
        documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        scores="results/scores/{benchmark}/_blind_baseline/documents.csv",
        # No leading underscore: the report's reStructuredText would read the name as a link target.
        metrics=report(
            "results/metrics/{benchmark}/blind_baseline.csv",
            caption="../report/blind_baseline.rst",
            category="Metrics",
            subcategory="{benchmark}",
            labels={"benchmark": "{benchmark}", "model": "(none): blind baseline", "methods": "blind_bag_of_words"},
        ),
    log:
        "logs/blind_baseline/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        stats=stats_settings("n_boot_small", "n_boot_ci", "blind_folds") | {"selection": bh_settings()},
        seed=config["seed"],
        per_book=labels_per_book_param,
        code_version=step_version("stats"),
    script:
        "../scripts/blind_baseline.py"


rule summary:
    input:
        metrics=jobs.metrics_tables(config),
        selection=jobs.selection_tables(config),
        models=expand("results/models/{model}", model=LOCAL_MODELS),
        rejects=expand("results/datasets/{benchmark}/rejects.csv", benchmark=sorted(config["benchmarks"])),
    output:
        csv=report(
            "results/summary/metrics.csv",
            caption="../report/summary_metrics.rst",
            category="Summary",
            labels={"table": "metrics: every benchmark, model and method"},
        ),
        md="results/summary/metrics.md",
        models=report(
            "results/summary/models.csv",
            caption="../report/summary_models.rst",
            category="Summary",
            labels={"table": "models: size, family, contamination"},
        ),
        selection=report(
            "results/summary/selection.csv",
            caption="../report/summary_selection.rst",
            category="Summary",
            labels={"table": "selection: FDR-controlled naming of members, every q"},
        ),
        selection_figure=report(
            "results/figures/selection_fdr_power.png",
            caption="../report/selection_fdr_power.rst",
            category="FDR-controlled selection",
            labels={"figure": "empirical FDR and power against q"},
        ),
        selection_figure_svg="results/figures/selection_fdr_power.svg",
        rejects=report(
            "results/summary/rejects.csv",
            caption="../report/summary_rejects.rst",
            category="Summary",
            labels={"table": "rejects: input rows the loaders left out, per benchmark"},
        ),
        benchmarks=report(
            "results/summary/benchmarks.csv",
            caption="../report/summary_benchmarks.rst",
            category="Summary",
            labels={"table": "benchmarks: where the labels come from, which base models are null controls"},
        ),
    log:
        "logs/summary.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        figure_methods=config["stats"]["selection"]["figure_methods"],
        benchmarks=sorted(config["benchmarks"]),
        label_provenance=jobs.label_provenance(config),
        # which model each API model is (model_id, revision, base_url): models.csv's rows for them
        api_models=api_model_rows(config),
        # the local models' families (models.csv; not prepare_model's: renaming one rewrites the tables alone)
        families=jobs.families(config, LOCAL_MODELS),
        code_version=step_version("stats"),
    script:
        "../scripts/summary.py"
