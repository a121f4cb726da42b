# Every probe family's probe job: the registry names the runner (memaudit.probes.registry).
from memaudit.probes.job import ProbeJob
from memaudit.probes.registry import runner_of
from memaudit.workflow_support import start

log = start(snakemake, "light" if snakemake.params.get("light") else None)
job = ProbeJob.from_snakemake(snakemake, progress=log.info)
runner_of(job.family)(job)
