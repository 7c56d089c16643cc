"""Snakemake adapter: render the embedded synthetic identity dataset (rule synthfaces)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.synthfaces import generate_synthfaces  # noqa: E402

p = snakemake.params  # noqa: F821
generate_synthfaces(snakemake.output[0], resolution=p.resolution, split_seed=p.split_seed,  # noqa: F821
                    **p.synthetic)
