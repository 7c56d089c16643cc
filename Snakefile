# AT-AT reproduction workflow. One DAG: data -> target models -> AutoAttack -> summary ->
# tables and figures. `snakemake all` (or just `snakemake`) builds everything the config
# describes; name a file to rebuild only it, e.g. `snakemake results/tables/table4.md`.
# Paper config: config/config.yaml. Embedded 2-core default: add `--configfile config/demo.yaml`.

from snakemake.utils import min_version

min_version("9.0")


configfile: f"{workflow.basedir}/config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/robustness.smk"
include: "workflow/rules/hsic.smk"
include: "workflow/rules/inversion.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/stats.smk"
include: "workflow/rules/dose_response.smk"
include: "workflow/rules/claims.smk"


rule all:
    input:
        all_targets(),
    default_target: True


# every input/params/resource function's signature read once, not per job, and each rule's
# script read once for its jobs' check (common.smk)
assign_partitions()
cache_function_signatures()
cache_script_sources()
