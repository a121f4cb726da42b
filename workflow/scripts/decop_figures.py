from memaudit.probes.decop.figures import make_decop_figures
from memaudit.workflow_support import start

log = start(snakemake, "light")
make_decop_figures(
    snakemake.wildcards.benchmark, list(snakemake.input.tables), list(snakemake.input.answers),
    list(snakemake.input.calibrations), list(snakemake.input.models), {k: snakemake.output[k] for k in snakemake.output.keys()},
    items=snakemake.input.decop_items, families=snakemake.params.families,
)
