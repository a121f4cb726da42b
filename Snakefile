# memaudit: audit language models for memorised training data.
# Table of contents; every stage lives in workflow/rules/, every piece of logic in src/memaudit/.
from snakemake.utils import min_version

min_version("9.0")


# The demo config is the default and `--config key=value` applies on top of it; `--configfile
# other.yaml` replaces it rather than being merged into it (a merge would keep the demo's models
# and benchmarks). An empty --configfile is an error naming it (common.smk), not the demo; a YAML
# error in the demo config names its line and column (check_config_file) before the directive reads it.
if not workflow.overwrite_configfiles:
    from memaudit.workflow_support import check_config_file

    check_config_file("config/config.yaml")

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/token_prob.smk"
include: "workflow/rules/prefix.smk"
include: "workflow/rules/decop.smk"
include: "workflow/rules/copybench.smk"
include: "workflow/rules/ktd.smk"
include: "workflow/rules/cloze.smk"
include: "workflow/rules/api.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/figures.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
