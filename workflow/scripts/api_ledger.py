from memaudit.backends.ledger import write_ledger
from memaudit.workflow_support import start

log = start(snakemake, "light")
frame = write_ledger(snakemake.params.cache, snakemake.output.ledger)
log.info(f"API ledger: {int(frame['n_sent'].sum())} requests sent, {int(frame['n_cached'].sum())} from the cache")
