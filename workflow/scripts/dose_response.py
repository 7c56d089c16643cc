"""Snakemake adapter: AT-AT's dose-response table and figure (results/tables/dose_response.
{csv,md}, results/figures/dose_response.png) from results/summary.csv (atat.analysis.dose_response)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.plan.config import n_classes  # noqa: E402
from atat.analysis.dose_response import dose_response  # noqa: E402

sweep = snakemake.params.sweep  # noqa: F821
dose_response(snakemake.input.summary, snakemake.output,  # noqa: F821
              points=snakemake.params.points, dataset=sweep["dataset"],  # noqa: F821
              architecture=sweep["architecture"], attack=sweep["attack"],
              epsilons=snakemake.params.epsilons, zero=sweep.get("zero"),  # noqa: F821
              n_classes=n_classes(snakemake.config, sweep["dataset"]))  # noqa: F821
