from memaudit.workflow_support import start

log = start(snakemake)
from memaudit.probes.decop.paraphrase import MiniLMEncoder
from memaudit.probes.decop.runner import make_paraphraser
from memaudit.probes.ktd.pool import build_pool

paraphraser = make_paraphraser(snakemake.config, snakemake.params.paraphraser, rule=snakemake.rule,
                               model_dir=snakemake.input.get("paraphraser"))
build_pool(snakemake.input.decop_items, snakemake.params.size, snakemake.params.paraphrase, paraphraser, MiniLMEncoder(),
           snakemake.output.pool, snakemake.output.qc, progress=log.info)
