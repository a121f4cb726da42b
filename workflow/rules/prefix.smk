# Prefix probing: black-box, so it runs on API models too. Jobs that send requests
# claim the global resources api_openai / api_anthropic (their model's concurrency).


rule prefix_dataset:
    input:
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        pairs="results/datasets/{benchmark}/prefix_continuation.jsonl",
    params:
        prefix_words=PREFIX.get("prefix_words"),
        continuation_words=PREFIX.get("continuation_words"),
    log:
        "logs/prefix_dataset/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/prefix_dataset.py"


rule prefix_probe:
    input:
        unpack(local_model_dir),
        pairs=rules.prefix_dataset.output.pairs,
    output:
        generations="results/scores/{benchmark}/{model}/prefix_items.jsonl",
        documents="results/scores/{benchmark}/{model}/prefix_documents.csv",
        outcomes="results/scores/{benchmark}/{model}/prefix_outcomes.json",
    params:
        entry=model_entry,
        prefix=probe_settings(PREFIX),
    resources:
        gpu=probe_gpu_slots,
        api_openai=api_openai_slots,
        api_anthropic=api_anthropic_slots,
    log:
        "logs/prefix_probe/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/prefix_probe.py"


rule api_ledger:
    input:
        api_probe_outputs(),
    output:
        ledger="results/api/ledger.csv",
    params:
        cache=API_CACHE,
    log:
        "logs/api_ledger.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/api_ledger.py"


rule api_estimate:
    """What the configured API work will cost, before any request: `snakemake results/api/estimate.txt`."""
    input:
        planned_inputs(config),
    output:
        text="results/api/estimate.txt",
        plan="results/api/plan.jsonl",
    log:
        "logs/api_estimate.log",
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/api_estimate.py"
