from memaudit.probes.prefix.runner import build_pairs
from memaudit.workflow_support import start

log = start(snakemake, "light")
n = build_pairs(snakemake.input.passages, snakemake.output.pairs, prefix_words=snakemake.params.prefix_words,
                continuation_words=snakemake.params.continuation_words)
log.info(f"{n} prefix/continuation items from {snakemake.input.passages}")
