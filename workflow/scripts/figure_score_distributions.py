import pandas as pd

from memaudit.figures.plots import plot_score_distributions
from memaudit.stats.workflow import select_methods
from memaudit.workflow_support import start

log = start(snakemake, "light")
docs = pd.concat([pd.read_csv(p) for p in snakemake.input.documents], ignore_index=True)
wc = snakemake.wildcards
plot_score_distributions(select_methods(docs, snakemake.params.methods),
                         snakemake.output.png[: -len(".png")], f"{wc.benchmark} / {wc.model}")
