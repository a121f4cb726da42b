# Stage 2: base models (converted, referenced or trained from scratch) and contaminated fine-tunes.


rule prepare_model:
    input:
        unpack(model_inputs),
    output:
        model=directory("results/models/{model}"),
    log:
        "logs/prepare_model/{model}.log",
    benchmark:
        "logs/benchmarks/prepare_model/{model}.tsv"
    # Models first, and among them the ones that unblock the run's longest chain (fine-tune,
    # probing, statistics): see model_priority.
    priority: model_priority
    conda:
        "../../envs/memaudit.yaml"
    threads: job_threads(8)
    resources:
        mem_mb=models_mem_mb(8000, PROBED_MODEL),
        runtime=models_runtime(PROBED_MODEL, 240),
        gpu=training_gpu_slots,
    params:
        entry=model_build_entry,
        seed=config["seed"],
        code_version=step_version("models"),
    script:
        "../scripts/prepare_model.py"
