from memaudit.probes.prefix import run_prefix_probe_job
from memaudit.workflow_support import start

log = start(snakemake)
run_prefix_probe_job(snakemake.config, snakemake.wildcards.model, snakemake.input.pairs,
                     snakemake.output, model_dir=snakemake.input.get("model"), rule=snakemake.rule,
                     progress=log.info)
