from memaudit.probes.token_prob.forward import run_token_stats
from memaudit.workflow_support import checkpoint_root, start

log = start(snakemake)
root, (benchmark, model) = checkpoint_root(snakemake), (snakemake.wildcards.benchmark, snakemake.wildcards.model)
run_token_stats(
    snakemake.config, model, snakemake.input.model, snakemake.input.passages, snakemake.output.stats,
    lowercased=snakemake.params.get("lowercased", False), shard_passages=snakemake.params.shard_passages,
    checkpoint_dir=root / snakemake.rule / benchmark / model, checkpoint_root=root, progress=log.info,
)
