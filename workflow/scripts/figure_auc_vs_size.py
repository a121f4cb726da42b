from memaudit.figures.plots import plot_auc_vs_size
from memaudit.stats.summary import merge_metrics
from memaudit.stats.workflow import models_table
from memaudit.workflow_support import start

log = start(snakemake, "light")
# This benchmark's metric tables and the model manifests, not the summary: adding a benchmark
# (which rewrites the summary) leaves the other benchmarks' figures alone.
metrics = merge_metrics(snakemake.input.metrics)
models = models_table(snakemake.input.models, families=snakemake.params.families)
metrics = metrics[metrics["model"].isin(set(models["model"]))]
# the headline methods, or on a benchmark probed by none of them (a DE-COP-only one) every method
methods = [m for m in snakemake.params.methods if m in set(metrics["method"])] or None
plot_auc_vs_size(metrics, models, snakemake.output.png[: -len(".png")],
                 f"AUC against model size: {snakemake.wildcards.benchmark}", methods=methods)
