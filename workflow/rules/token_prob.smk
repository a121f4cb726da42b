# Token-probability probes (memaudit.probes.token_prob): token statistics once per (benchmark, model),
# every method from them. The pass over the lowercased passages, which only the `lowercase` score reads, is
# a rule of its own: turning that method on or off never reruns the forward passes over the passages.


rule token_stats:
    input:
        model="results/models/{model}",
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        stats="results/scores/{benchmark}/{model}/token_stats.npz",
    log:
        "logs/token_stats/{benchmark}/{model}.log",
    benchmark:
        "logs/benchmarks/token_stats/{benchmark}/{model}.tsv"
    # The longest probing jobs first (a fine-tuned model's forward passes over a whole benchmark):
    # at equal priority the demo's SmolLM2 statistics on novels started 14 minutes after its
    # fine-tune ended and ran last, alone on one core (make run 31.6 min, 2 cores).
    priority: 5
    conda:
        "../../envs/memaudit.yaml"
    threads: job_threads(8)
    resources:
        mem_mb=models_mem_mb(8000, PROBED_MODEL),
        runtime=models_runtime(PROBED_MODEL, 120),
        gpu=gpu_slots,
    params:
        entry=model_entry,
        shard_passages=config["checkpoints"]["shard_passages"],
        code_version=family_version("token_prob", "stats"),
    script:
        "../scripts/token_stats.py"


# Only where jobs.lowercase_pass holds (token_prob_scores asks for it): a model token_prob reads only as a
# reference gets none. token_stats' resources, priority and script: the same forward pass, over other texts.
use rule token_stats as token_stats_lowercase with:
    output:
        stats="results/scores/{benchmark}/{model}/token_stats_lowercase.npz",
    log:
        "logs/token_stats_lowercase/{benchmark}/{model}.log",
    benchmark:
        "logs/benchmarks/token_stats_lowercase/{benchmark}/{model}.tsv"
    params:
        entry=model_entry,
        lowercased=True,
        shard_passages=config["checkpoints"]["shard_passages"],
        code_version=family_version("token_prob", "stats"),


rule token_prob_scores:
    input:
        stats=rules.token_stats.output.stats,
        references=lambda wc: [
            f"results/scores/{wc.benchmark}/{ref}/token_stats.npz" for ref in jobs.reference_models(config, wc.model)
        ],
        lowercase=lambda wc: (
            [f"results/scores/{wc.benchmark}/{wc.model}/token_stats_lowercase.npz"]
            if jobs.lowercase_pass(config, wc.benchmark, wc.model)
            else []
        ),
        passages="results/datasets/{benchmark}/passages.jsonl",
    output:
        passages="results/scores/{benchmark}/{model}/token_prob_passages.csv",
        documents="results/scores/{benchmark}/{model}/token_prob_documents.csv",
    log:
        "logs/token_prob_scores/{benchmark}/{model}.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        family="token_prob",
        light=True,
        token_prob=probe_settings("token_prob"),
        reference_models=lambda wc: jobs.reference_models(config, wc.model),
        code_version=family_version("token_prob"),
    script:
        "../scripts/probe.py"
