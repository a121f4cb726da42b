from memaudit.probes.copybench.runner import build_items
from memaudit.workflow_support import start

log = start(snakemake, "light")
build_items(snakemake.input.documents, (list(snakemake.input.pretrain) or [None])[0], snakemake.params.copybench,
            seed=snakemake.params.seed, out_literal=snakemake.output.literal,
            out_nonliteral=snakemake.output.nonliteral, out_rejects=snakemake.output.rejects,
            out_judge=snakemake.output.judge, out_demos=snakemake.output.demos, progress=log.info)
