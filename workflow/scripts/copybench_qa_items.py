from memaudit.backends import open_backend
from memaudit.probes.copybench.runner import build_qa_items
from memaudit.workflow_support import start

log = start(snakemake, "light")
settings = snakemake.params.copybench
writer = (open_backend(snakemake.config, snakemake.params.writer, model_dir=snakemake.input.get("qa_writer"),
                       rule=snakemake.rule) if snakemake.params.writer else None)
try:
    build_qa_items(snakemake.input.documents, settings, seed=snakemake.params.seed, writer=writer,
                   out_items=snakemake.output.qa, out_rejects=snakemake.output.rejects,
                   published=snakemake.params.published, progress=log.info)
finally:
    if writer is not None and hasattr(writer, "close"):
        writer.close()
