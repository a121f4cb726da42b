# Stage 1: demo assets, member/non-member benchmarks, the disjoint pretraining pool.


localrules:
    fetch_assets,


rule fetch_assets:
    output:
        stamp=f"{ASSETS}/.fetched",
    log:
        "logs/fetch_assets.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/fetch_assets.py"


rule benchmark_dataset:
    input:
        unpack(published_file),
        assets=rules.fetch_assets.output.stamp,
        user_books=user_books,
    output:
        documents="results/datasets/{benchmark}/documents.jsonl",
        passages="results/datasets/{benchmark}/passages.jsonl",
        rejects="results/datasets/{benchmark}/rejects.csv",
    log:
        "logs/benchmark_dataset/{benchmark}.log",
    # a benchmark's dataset takes seconds, and the fine-tunes wait on its members: first of all
    priority: 40
    conda:
        "../../envs/memaudit.yaml"
    params:
        benchmark=benchmark_entry,
        seed=config["seed"],
        code_version=dataset_version,
    script:
        "../scripts/benchmark_dataset.py"


rule pretrain_pool:
    input:
        assets=rules.fetch_assets.output.stamp,
        user_books=lambda wc: user_books_inputs(config["pretrain"]),
    output:
        documents="results/pretrain/documents.jsonl",
    log:
        "logs/pretrain_pool.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        pretrain=canonical(config["pretrain"]),
        code_version=step_version("datasets"),
    script:
        "../scripts/pretrain_pool.py"
