"""Snakemake adapter: the experiments' precondition checks (results/tables/preconditions.{csv,md})
from the preconditions' summary, the models' metrics.json, the inversion priors' quality records
and the evaluation models' metrics; a failed check is a WARNING, not an error."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.preconditions import preconditions_table  # noqa: E402

preconditions_table(snakemake.input.summary, snakemake.params.metrics, snakemake.output,  # noqa: F821
                    snakemake.config, prior_files=snakemake.params.priors,  # noqa: F821
                    evaluation_files=snakemake.params.evaluation)  # noqa: F821
