from memaudit.datasets.prefix import prefix_items
from memaudit.datasets.types import Passage
from memaudit.io import read_jsonl, write_jsonl
from memaudit.workflow_support import start

log = start(snakemake, "light")
passages = [Passage.from_dict(d) for d in read_jsonl(snakemake.input.passages)]
items = prefix_items(passages, prefix_words=snakemake.params.prefix_words,
                     continuation_words=snakemake.params.continuation_words)
write_jsonl(snakemake.output.pairs, (it.__dict__ for it in items))
log.info(f"{len(items)} prefix/continuation items from {len(passages)} passages")
