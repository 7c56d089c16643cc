"""Snakemake adapter: one long per-image table of every inversion job (rule
inversion_per_image)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.inversion.run import concat_per_image  # noqa: E402

concat_per_image(list(snakemake.input), snakemake.output[0])  # noqa: F821
