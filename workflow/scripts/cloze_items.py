from memaudit.backends import open_backend
from memaudit.backends.base import WORD_LOGPROBS
from memaudit.probes.cloze.items import run_items, knowledge_filter_from
from memaudit.workflow_support import start

log = start(snakemake)
settings, config = snakemake.params.cloze, snakemake.config
reference = open_backend(config, snakemake.params.reference, model_dir=snakemake.input.get("reference"),
                         rule=snakemake.rule, role="probes.cloze.reference.model", needs={WORD_LOGPROBS})
run_items(snakemake.input.passages, reference, settings, out_items=snakemake.output.cloze_items,
          out_candidates=snakemake.output.candidates,
          knowledge_filter=knowledge_filter_from(config, settings, snakemake.input.get("filter"), rule=snakemake.rule,
                                                 progress=log.info),
          progress=log.info)
