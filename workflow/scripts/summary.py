from memaudit.stats.workflow import build_summary
from memaudit.workflow_support import start

log = start(snakemake, "light")
build_summary(
    snakemake.input.metrics, snakemake.input.models,
    snakemake.output.csv, snakemake.output.md, snakemake.output.models,
    selection_paths=snakemake.input.selection, out_selection=snakemake.output.selection,
    out_figure=snakemake.output.selection_figure, figure_methods=snakemake.params.figure_methods,
    rejects=dict(zip(snakemake.params.benchmarks, snakemake.input.rejects)), out_rejects=snakemake.output.rejects,
    benchmarks=snakemake.params.label_provenance, out_benchmarks=snakemake.output.benchmarks,
    api_models=snakemake.params.api_models, families=snakemake.params.families,
)
