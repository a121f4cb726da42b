from memaudit.workflow_support import start

log = start(snakemake)
if snakemake.params.published and snakemake.params.paraphraser is None:
    from memaudit.probes.decop.runner import published_items_for_run

    published_items_for_run(snakemake.input.documents, snakemake.params.published, snakemake.params.decop,
                            snakemake.params.seed, snakemake.output.mcq, snakemake.output.qc, progress=log.info)
else:
    from memaudit.probes.decop.paraphrase import MiniLMEncoder
    from memaudit.probes.decop.runner import build_items, make_paraphraser

    paraphraser = make_paraphraser(snakemake.config, snakemake.params.paraphraser, rule=snakemake.rule,
                                   model_dir=snakemake.input.get("paraphraser"))
    build_items(
        snakemake.input.documents, snakemake.params.decop, snakemake.params.seed, paraphraser, MiniLMEncoder(),
        snakemake.output.mcq, snakemake.output.qc, progress=log.info,
    )
