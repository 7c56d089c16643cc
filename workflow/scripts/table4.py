"""Snakemake adapter: paper Table 4 (CSV, Markdown, LaTeX) from results/summary.csv."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.tables import table4  # noqa: E402

table4(snakemake.input.summary, snakemake.output, architecture=snakemake.params.architecture,  # noqa: F821
       epsilons=snakemake.params.epsilons)  # noqa: F821
