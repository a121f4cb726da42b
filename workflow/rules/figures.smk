# Stage 4b: figures (PNG for the report, SVG beside it); every number comes from a CSV under results/.


# One job draws both per-(benchmark, model) figures: each job's start-up (Python, pandas,
# matplotlib) costs more than the drawing.
rule figures_model:
    input:
        documents=probe_documents,
    output:
        roc=report(
            "results/figures/{benchmark}/{model}/roc.png",
            caption="../report/roc.rst",
            category="ROC curves",
            subcategory="{benchmark}",
            labels=figure_labels,
        ),
        roc_svg="results/figures/{benchmark}/{model}/roc.svg",
        distributions=report(
            "results/figures/{benchmark}/{model}/score_distributions.png",
            caption="../report/score_distributions.rst",
            category="Score distributions",
            subcategory="{benchmark}",
            labels=figure_labels,
        ),
        distributions_svg="results/figures/{benchmark}/{model}/score_distributions.svg",
    log:
        "logs/figures_model/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        methods=config["figures"]["headline_methods"],
        code_version=step_version("figures"),
    script:
        "../scripts/figures_model.py"


rule figure_auc_vs_size:
    input:
        metrics=benchmark_metrics_tables,
        models=benchmark_local_models,
    output:
        png=report(
            "results/figures/{benchmark}/auc_vs_size.png",
            caption="../report/auc_vs_size.rst",
            category="AUC against model size",
            labels=auc_vs_size_labels,
        ),
        svg="results/figures/{benchmark}/auc_vs_size.svg",
    log:
        "logs/figure_auc_vs_size/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        methods=config["figures"]["headline_methods"],
        families=benchmark_local_families,
        code_version=step_version("figures"),
    script:
        "../scripts/figure_auc_vs_size.py"
