from memaudit.probes.copybench.summary import write_summary
from memaudit.workflow_support import start

log = start(snakemake, "light")
write_summary(list(snakemake.input.outcomes), list(snakemake.input.generations), bases=snakemake.params.bases,
              declared=snakemake.params.declared, members_of=snakemake.params.members_of,
              seed=snakemake.params.seed, out_rates=snakemake.output.rates,
              out_differences=snakemake.output.differences, out_figure=snakemake.output.figure,
              out_recall_figure=snakemake.output.recall_figure, per_book=snakemake.params.per_book)
