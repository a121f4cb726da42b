from pathlib import Path

from memaudit.probes.runner import run_token_stats
from memaudit.workflow_support import checkpoint_root, start

log = start(snakemake)
root, (benchmark, model) = checkpoint_root(snakemake), (snakemake.wildcards.benchmark, snakemake.wildcards.model)
run_token_stats(
    Path(snakemake.input.model) / "manifest.json", snakemake.input.passages, snakemake.output.stats,
    snakemake.params.entry, lowercase=snakemake.params.lowercase,
    shard_passages=snakemake.params.shard_passages,
    checkpoint_dir=root / "token_stats" / benchmark / model, checkpoint_root=root, progress=log.info,
)
