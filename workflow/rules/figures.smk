# Stage 4b: figures (PNG for the report, SVG beside it); every number comes from a CSV under results/.


rule figure_roc:
    input:
        documents=probe_documents,
    output:
        png=report(
            "results/figures/{benchmark}/{model}/roc.png",
            caption="../report/roc.rst",
            category="ROC curves",
            subcategory="{benchmark}",
            labels=figure_labels,
        ),
        svg="results/figures/{benchmark}/{model}/roc.svg",
    params:
        methods=config["figures"]["headline_methods"],
    log:
        "logs/figure_roc/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/figure_roc.py"


rule figure_score_distributions:
    input:
        documents=probe_documents,
    output:
        png=report(
            "results/figures/{benchmark}/{model}/score_distributions.png",
            caption="../report/score_distributions.rst",
            category="Score distributions",
            subcategory="{benchmark}",
            labels=figure_labels,
        ),
        svg="results/figures/{benchmark}/{model}/score_distributions.svg",
    params:
        methods=config["figures"]["headline_methods"],
    log:
        "logs/figure_score_distributions/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/figure_score_distributions.py"


rule figure_auc_vs_size:
    input:
        metrics=benchmark_metrics_tables,
        models=expand("results/models/{model}", model=LOCAL_MODELS),
    output:
        png=report(
            "results/figures/{benchmark}/auc_vs_size.png",
            caption="../report/auc_vs_size.rst",
            category="AUC against model size",
            labels=auc_vs_size_labels,
        ),
        svg="results/figures/{benchmark}/auc_vs_size.svg",
    params:
        methods=config["figures"]["headline_methods"],
    log:
        "logs/figure_auc_vs_size/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/figure_auc_vs_size.py"
