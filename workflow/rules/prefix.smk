# Prefix probing (memaudit.probes.prefix): black-box, so it runs on API models too. Jobs that send
# requests claim the global resources api_openai / api_anthropic (their model's concurrency).
from memaudit.probes.prefix.runner import settings as prefix_settings


rule prefix_dataset:
    input:
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        pairs="results/datasets/{benchmark}/prefix_continuation.jsonl",
    log:
        "logs/prefix_dataset/{benchmark}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        prefix_words=config["probes"].get("prefix", {}).get("prefix_words"),
        continuation_words=config["probes"].get("prefix", {}).get("continuation_words"),
        # the pairs are the prefix family's too (a published prefix, NYT Exhibit J's, is used as given)
        code_version=family_version("prefix"),
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
    log:
        "logs/prefix_probe/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    resources:
        # as decop_probe: a local model's weights (the default 2000 MB of profiles/slurm held none)
        mem_mb=models_mem_mb(4000, PROBED_MODEL),
        runtime=models_runtime(PROBED_MODEL),
        gpu=gpu_slots,
        api_openai=api_openai_slots,
        api_anthropic=api_anthropic_slots,
    params:
        family="prefix",
        entry=model_entry,
        prefix=lambda wc: prefix_settings(config, wc.benchmark),
        code_version=family_version("prefix"),
    script:
        "../scripts/probe.py"
