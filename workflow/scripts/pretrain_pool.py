from pathlib import Path

from memaudit.datasets.build import build_pretrain_pool
from memaudit.io import write_jsonl
from memaudit.workflow_support import start

log = start(snakemake, "light")
docs = build_pretrain_pool(snakemake.params.pretrain, Path(snakemake.input.assets).parent)
log.info(f"pretraining pool: {len(docs)} documents, {sum(len(d.text.split()) for d in docs)} words")
write_jsonl(snakemake.output.documents, (d.to_dict() for d in docs))
