from memaudit.probes.ktd.summary import build_imbalance_summary, build_summary
from memaudit.stats.workflow import models_table
from memaudit.workflow_support import start

log = start(snakemake, "light")
sizes = models_table(snakemake.input.models)
build_summary(snakemake.input.selection, snakemake.input.symmetry, snakemake.input.w, snakemake.params.contaminated,
              snakemake.output.table, snakemake.output.fdr_power, snakemake.output.w, m=snakemake.params.m,
              n_params=dict(zip(sizes["model"], sizes["n_params"].astype(float))), out_m_size=snakemake.output.m_size,
              families=dict(zip(sizes["model"], sizes["family"])))
build_imbalance_summary(snakemake.input.imbalance, snakemake.params.contaminated, snakemake.output.imbalance,
                        snakemake.output.imbalance_figure, m=snakemake.params.m)
