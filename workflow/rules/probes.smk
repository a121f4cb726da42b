# Stage 3: probes. Token statistics are computed once per (benchmark, model) and shared.


rule token_stats:
    input:
        model="results/models/{model}",
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        stats="results/scores/{benchmark}/{model}/token_stats.npz",
    params:
        entry=model_entry,
        lowercase="lowercase" in TOKEN_PROB["methods"],
        shard_passages=config["checkpoints"]["shard_passages"],
    threads: job_threads(8)
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=gpu_slots,
    log:
        "logs/token_stats/{benchmark}/{model}.log",
    benchmark:
        "logs/benchmarks/token_stats/{benchmark}/{model}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/token_stats.py"


rule token_prob_scores:
    input:
        stats=rules.token_stats.output.stats,
        references=reference_stats,
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        passages="results/scores/{benchmark}/{model}/token_prob_passages.csv",
        documents="results/scores/{benchmark}/{model}/token_prob_documents.csv",
    params:
        token_prob=canonical(TOKEN_PROB),
        code_version=SCORING_VERSION,
    log:
        "logs/token_prob_scores/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/token_prob_scores.py"
