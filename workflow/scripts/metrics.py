import pandas as pd

from memaudit.io import write_csv
from memaudit.stats.summary import metrics_table
from memaudit.workflow_support import start

log = start(snakemake, "light")
docs = pd.concat([pd.read_csv(p) for p in snakemake.input.documents], ignore_index=True)
stats = snakemake.params.stats
table = metrics_table(
    docs, benchmark=snakemake.wildcards.benchmark, model=snakemake.wildcards.model,
    contaminated=bool(snakemake.params.contaminated), seed=snakemake.params.seed,
    n_boot_small=stats["n_boot_small"], n_boot_ci=stats["n_boot_ci"],
)
write_csv(snakemake.output.metrics, table)
log.info(f"{len(table)} methods; best AUC {table['auc'].max():.3f}")
