from memaudit.decop.runner import run_decop
from memaudit.workflow_support import start

log = start(snakemake)
api_backend = None
if snakemake.wildcards.mode == "blackbox" and "model" not in snakemake.input.keys():
    from memaudit.backends.api import api_backend_from_config

    api_backend = api_backend_from_config(snakemake.config, snakemake.wildcards.model, rule=snakemake.rule)
elif snakemake.wildcards.mode == "blackbox":
    from memaudit.decop.runner import local_generator

    api_backend = local_generator(f"{snakemake.input.model}/manifest.json", snakemake.params.entry)
run_decop(
    snakemake.wildcards.mode, snakemake.input.mcq, snakemake.params.decop,
    out_answers=snakemake.output.answers, out_documents=snakemake.output.documents,
    out_table=snakemake.output.table, out_calibration=snakemake.output.calibration,
    manifest_path=f"{snakemake.input.model}/manifest.json" if "model" in snakemake.input.keys() else None,
    entry=snakemake.params.entry, api_backend=api_backend,
    passages_per_document=snakemake.params.passages_per_document, progress=log.info,
)
