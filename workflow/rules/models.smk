# Stage 2: base models (converted, referenced or trained from scratch) and contaminated fine-tunes.


rule prepare_model:
    input:
        unpack(model_inputs),
    output:
        model=directory("results/models/{model}"),
    params:
        entry=model_build_entry,
        seed=config["seed"],
    threads: 8
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
