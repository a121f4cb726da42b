from memaudit.probes.copybench.runner import build_items, make_extractor
from memaudit.workflow_support import start

log = start(snakemake, "light")
extractor = None
if snakemake.params.extractor:
    extractor = make_extractor(snakemake.config, snakemake.params.extractor, rule=snakemake.rule,
                               model_dir=snakemake.input.get("extractor"))
try:
    build_items(snakemake.input.documents, (list(snakemake.input.pretrain) or [None])[0], snakemake.params.copybench,
                seed=snakemake.params.seed, out_literal=snakemake.output.literal,
                out_nonliteral=snakemake.output.nonliteral, out_rejects=snakemake.output.rejects,
                out_judge=snakemake.output.judge, out_demos=snakemake.output.demos,
                out_extraction=snakemake.output.extraction, extractor=extractor,
                published=snakemake.params.published, progress=log.info)
finally:
    if extractor is not None and hasattr(extractor.llm.backend, "close"):
        extractor.llm.backend.close()
