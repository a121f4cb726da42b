from memaudit.stats.workflow import run_blind_baseline
from memaudit.workflow_support import start

log = start(snakemake, "light")
run_blind_baseline(
    snakemake.input.documents, snakemake.output.scores, snakemake.output.metrics,
    benchmark=snakemake.wildcards.benchmark, stats=snakemake.params.stats, seed=snakemake.params.seed,
    per_book=snakemake.params.per_book,
)
