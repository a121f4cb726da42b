from pathlib import Path

from memaudit.assets import fetch_demo_assets
from memaudit.workflow_support import start

log = start(snakemake, "light")
fetch_demo_assets(Path(snakemake.output.stamp).parent, log=log.info)
