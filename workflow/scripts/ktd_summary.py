from memaudit.probes.ktd.summary import build_summary
from memaudit.workflow_support import start

log = start(snakemake, "light")
build_summary(snakemake.input.selection, snakemake.input.symmetry, snakemake.input.w, snakemake.params.contaminated,
              snakemake.output.table, snakemake.output.fdr_power, snakemake.output.w, m=snakemake.params.m)
