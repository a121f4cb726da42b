# API models: the cost ledger after the last request, and the estimate before the first.


rule api_ledger:
    input:
        jobs.api_probe_outputs(config),
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
    script:
        "../scripts/api_estimate.py"
