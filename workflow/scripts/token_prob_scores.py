from memaudit.probes.runner import run_token_prob_scores
from memaudit.workflow_support import start

log = start(snakemake, "light")
run_token_prob_scores(
    snakemake.wildcards.model, snakemake.input.stats, list(snakemake.input.references),
    snakemake.input.passages, snakemake.params.token_prob,
    snakemake.output.passages, snakemake.output.documents, progress=log.info,
)
