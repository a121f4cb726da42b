# Stage 4a: statistics per (benchmark, model), the blind baseline, the summary tables.


rule metrics:
    input:
        documents=probe_documents,
    output:
        metrics="results/metrics/{benchmark}/{model}.csv",
    params:
        contaminated=is_contaminated,
        stats=canonical(config["stats"]),
        seed=config["seed"],
        code_version=STATS_VERSION,
    log:
        "logs/metrics/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/metrics.py"


rule blind_baseline:
    input:
        documents="results/datasets/{benchmark}/documents.jsonl",
    output:
        scores="results/scores/{benchmark}/_blind_baseline/documents.csv",
        metrics="results/metrics/{benchmark}/_blind_baseline.csv",
    params:
        stats=canonical(config["stats"]),
        seed=config["seed"],
        code_version=STATS_VERSION,
    log:
        "logs/blind_baseline/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/blind_baseline.py"


rule summary:
    input:
        metrics=metrics_tables(),
        models=expand("results/models/{model}", model=LOCAL_MODELS),
    output:
        csv="results/summary/metrics.csv",
        md="results/summary/metrics.md",
        models="results/summary/models.csv",
    log:
        "logs/summary.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/summary.py"
