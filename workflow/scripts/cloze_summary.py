from memaudit.probes.cloze.summary import build_summary
from memaudit.workflow_support import start

log = start(snakemake, "light")
prefix = [(b, m, items, pairs) for (b, m), items, pairs
          in zip(snakemake.params.prefix_runs, snakemake.input.prefix, snakemake.input.pairs)]
build_summary(snakemake.input.texts, snakemake.params.bases, declared=snakemake.params.declared, seed=snakemake.params.seed,
              out_table=snakemake.output.table, out_differences=snakemake.output.differences,
              out_figure=snakemake.output.figure, out_versus=snakemake.output.versus,
              out_overlap=snakemake.output.overlap, prefix=prefix, members_of=snakemake.params.members_of,
              token_paths=snakemake.input.tokens, model_dirs=snakemake.input.models,
              out_by_size=snakemake.output.by_size, out_size_figure=snakemake.output.size_figure,
              prompt=snakemake.params.prompt,
              documents=dict(zip(snakemake.params.book_benchmarks, snakemake.input.documents)))
