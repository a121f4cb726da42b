from memaudit.stats.workflow import build_summary
from memaudit.workflow_support import start

log = start(snakemake, "light")
build_summary(
    snakemake.input.metrics, snakemake.input.models,
    snakemake.output.csv, snakemake.output.md, snakemake.output.models,
)
