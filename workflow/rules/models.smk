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
    # Models first: a fine-tune heads the run's longest chain (fine-tune, probing, statistics),
    # so it should not wait behind jobs that can run later, such as DE-COP paraphrasing.
    priority: 10
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
