from memaudit.decop.paraphrase import MiniLMEncoder
from memaudit.decop.runner import build_items, make_paraphraser
from memaudit.workflow_support import start

log = start(snakemake)
paraphraser = make_paraphraser(
    snakemake.config, snakemake.params.paraphraser, rule=snakemake.rule,
    manifest_path=f"{snakemake.input.paraphraser}/manifest.json" if "paraphraser" in snakemake.input.keys() else None,
)
build_items(
    snakemake.input.documents, snakemake.params.decop, snakemake.params.seed, paraphraser, MiniLMEncoder(),
    snakemake.output.mcq, snakemake.output.qc, progress=log.info,
)
