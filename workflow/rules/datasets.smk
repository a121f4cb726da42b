# Stage 1: demo assets, member/non-member benchmarks, the disjoint pretraining pool.


localrules:
    fetch_assets,


rule fetch_assets:
    output:
        stamp=f"{ASSETS}/.fetched",
    log:
        "logs/fetch_assets.log",
    script:
        "../scripts/fetch_assets.py"


rule benchmark_dataset:
    input:
        assets=rules.fetch_assets.output.stamp,
    output:
        documents="results/datasets/{benchmark}/documents.jsonl",
        passages="results/datasets/{benchmark}/passages.jsonl",
    params:
        benchmark=lookup(dpath="benchmarks/{benchmark}", within=config),
        seed=config["seed"],
        assets_dir=ASSETS,
    log:
        "logs/benchmark_dataset/{benchmark}.log",
    script:
        "../scripts/benchmark_dataset.py"


rule pretrain_pool:
    input:
        assets=rules.fetch_assets.output.stamp,
    output:
        documents="results/pretrain/documents.jsonl",
    params:
        pretrain=config["pretrain"],
        assets_dir=ASSETS,
    log:
        "logs/pretrain_pool.log",
    script:
        "../scripts/pretrain_pool.py"
