# API models: the cost ledger after the last request, and the estimate before the first.


rule api_ledger:
    input:
        # after every job that sends requests: the probes of API models, and the jobs of API role models
        # (paraphrases, judges, extractors), which every family's final outputs wait for
        jobs.api_ledger_inputs(config, FAMILY_OUTPUTS),
    output:
        ledger="results/api/ledger.csv",
    log:
        "logs/api_ledger.log",
    conda:
        "../../envs/memaudit.yaml"
    params:
        cache=API_CACHE,
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
    # the plan reads the whole config (models, prices, probes) and every family's planner: a model added
    # or a price changed re-prices, where an estimate already written was kept (its inputs, the datasets,
    # had not changed)
    params:
        config=jobs.config_digest(config),
        code_version={family: family_version(family) for family in sorted(FAMILIES)},
    script:
        "../scripts/api_estimate.py"
