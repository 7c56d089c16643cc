"""Snakemake adapter: the experiments' precondition checks (results/tables/preconditions.{csv,md})
from results/summary.csv and the models' metrics.json; a failed check is a WARNING, not an error."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.preconditions import preconditions_table  # noqa: E402

preconditions_table(snakemake.input.summary, snakemake.params.metrics, snakemake.output,  # noqa: F821
                    snakemake.config)  # noqa: F821
