from memaudit.stats.workflow import run_metrics
from memaudit.workflow_support import start

log = start(snakemake, "light")
table = run_metrics(
    snakemake.input.documents, snakemake.output.metrics, snakemake.output.selection, snakemake.output.named,
    benchmark=snakemake.wildcards.benchmark, model=snakemake.wildcards.model,
    contaminated=bool(snakemake.params.contaminated), stats=snakemake.params.stats, seed=snakemake.params.seed,
    benchmark_documents=snakemake.input.benchmark_documents, per_book=snakemake.params.per_book,
)
log.info(f"{len(table)} methods; best AUC {table['auc'].max():.3f}")
