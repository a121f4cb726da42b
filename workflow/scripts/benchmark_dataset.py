from pathlib import Path

from memaudit.datasets.build import build_benchmark
from memaudit.datasets.rejects import write_rejects
from memaudit.io import write_jsonl
from memaudit.workflow_support import start

log = start(snakemake, "light")
rejects = []
docs, passages = build_benchmark(
    snakemake.wildcards.benchmark, snakemake.params.benchmark, Path(snakemake.input.assets).parent, snakemake.params.seed,
    rejects=rejects,
)
n_members = sum(d.meta["label"] == 1 for d in docs)
unlabelled = sum(d.meta["label"] not in (0, 1) for d in docs)
grouped = sum("near_duplicates" in d.meta for d in docs)
log.info(f"{len(docs)} documents ({n_members} members{f', {unlabelled} unlabelled' if unlabelled else ''}), "
         f"{len(passages)} passages, {grouped} kept on one side with their near-duplicates (meta.near_duplicates), "
         f"{len(rejects)} rows rejected ({snakemake.output.rejects})")
write_rejects(snakemake.output.rejects, rejects)
write_jsonl(snakemake.output.documents, (d.to_dict() for d in docs))
write_jsonl(snakemake.output.passages, (p.to_dict() for p in passages))
