from pathlib import Path

from memaudit.datasets.build import member_texts
from memaudit.io import read_jsonl
from memaudit.models.prepare import prepare_base_model, prepare_finetuned_model
from memaudit.workflow_support import checkpoint_root, start

log = start(snakemake)
name, entry, out = snakemake.wildcards.model, snakemake.params.entry, Path(snakemake.output.model)
resume = dict(checkpoint_root=checkpoint_root(snakemake),
              checkpoint_every=snakemake.config.get("checkpoints", {}).get("every_steps", 0))
if "base" in entry:
    texts = [t for path in snakemake.input.members for t in member_texts(read_jsonl(path))]
    log.info(f"fine-tuning {name} ({entry['finetune']['method']}) on {len(texts)} member documents")
    manifest = prepare_finetuned_model(
        name, entry, Path(snakemake.input.base) / "manifest.json", texts, out,
        seed=snakemake.params.seed, device=entry.get("device", "auto"), progress=log.info, **resume,
    )
else:
    pretrain = None
    if "pretrain" in snakemake.input.keys():
        pretrain = [d["text"] for d in read_jsonl(snakemake.input.pretrain)]
    manifest = prepare_base_model(
        name, entry, out, cache_dir=Path(snakemake.config["cache_dir"]), pretrain_texts=pretrain,
        seed=snakemake.params.seed, progress=log.info, **resume,
    )
log.info(f"{name}: {manifest['n_params']:,} parameters")
