from memaudit.backends.planning import write_estimate
from memaudit.workflow_support import start

log = start(snakemake, "light")
log.info("\n" + write_estimate(snakemake.config, snakemake.output.text, snakemake.output.plan))
