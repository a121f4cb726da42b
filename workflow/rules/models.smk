# Stage 2: base models (converted, referenced or trained from scratch) and contaminated fine-tunes.


rule prepare_model:
    input:
        unpack(model_inputs),
    output:
        model=directory("results/models/{model}"),
    params:
        entry=model_build_entry,
        seed=config["seed"],
    threads: job_threads(8)
    # Models first, and among them the ones that unblock the run's longest chain (fine-tune,
    # probing, statistics): see model_priority.
    priority: model_priority
    resources:
        mem_mb=8000,
        runtime=240,
        gpu=training_gpu_slots,
    log:
        "logs/prepare_model/{model}.log",
    benchmark:
        "logs/benchmarks/prepare_model/{model}.tsv"
    conda:
        "../../envs/memaudit.yaml"
    script:
        "../scripts/prepare_model.py"
