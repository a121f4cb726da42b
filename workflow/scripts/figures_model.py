import pandas as pd

from memaudit.figures.plots import plot_roc, plot_score_distributions
from memaudit.io import read_csv
from memaudit.stats.workflow import select_methods
from memaudit.workflow_support import start

log = start(snakemake, "light")
docs = pd.concat([read_csv(p) for p in snakemake.input.documents], ignore_index=True)
docs = select_methods(docs, snakemake.params.methods)
title = f"{snakemake.wildcards.benchmark} / {snakemake.wildcards.model}"
plot_roc(docs, snakemake.output.roc[: -len(".png")], title)
plot_score_distributions(docs, snakemake.output.distributions[: -len(".png")], title)
