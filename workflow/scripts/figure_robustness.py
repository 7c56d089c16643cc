"""Snakemake adapter: robust accuracy vs epsilon per defense (PNG)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.figures import robust_accuracy_vs_epsilon  # noqa: E402

robust_accuracy_vs_epsilon(snakemake.input.summary, snakemake.output[0],  # noqa: F821
                           epsilons=snakemake.params.epsilons)  # noqa: F821
