import pandas as pd

from memaudit.figures.plots import plot_auc_vs_size
from memaudit.workflow_support import start

log = start(snakemake, "light")
metrics = pd.read_csv(snakemake.input.metrics)
metrics = metrics[metrics["benchmark"] == snakemake.wildcards.benchmark]
models = pd.read_csv(snakemake.input.models)
metrics = metrics[metrics["model"].isin(set(models["model"]))]  # the blind baseline has no size
methods = [m for m in snakemake.params.methods if m in set(metrics["method"])]
plot_auc_vs_size(metrics, models, snakemake.output.png[: -len(".png")],
                 f"AUC against model size: {snakemake.wildcards.benchmark}", methods=methods)
