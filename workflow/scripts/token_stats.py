from pathlib import Path

from memaudit.probes.runner import run_token_stats
from memaudit.workflow_support import start

log = start(snakemake)
run_token_stats(
    Path(snakemake.input.model) / "manifest.json", snakemake.input.passages, snakemake.output.stats,
    snakemake.params.entry, lowercase=snakemake.params.lowercase, progress=log.info,
)
