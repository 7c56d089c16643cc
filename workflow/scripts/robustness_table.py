"""Snakemake adapter: paper Tables 11-14 (AutoAttack robust accuracies at one epsilon)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.tables import robustness_table  # noqa: E402

robustness_table(snakemake.input.summary, snakemake.output, eps=snakemake.params.eps)  # noqa: F821
