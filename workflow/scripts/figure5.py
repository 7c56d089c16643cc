"""Snakemake adapter: paper Figure 5 (PGD adversarial examples at each epsilon)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.figures import adversarial_examples_figure  # noqa: E402

sm = snakemake  # noqa: F821
adversarial_examples_figure(sm.input.model, f"{sm.input.dataset}/private", sm.params.epsilons,
                            sm.output[0])
