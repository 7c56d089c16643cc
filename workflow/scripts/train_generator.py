"""Snakemake adapter: train the embedded default's image prior on a public pool (rule
train_generator)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.inversion.prior import train_prior  # noqa: E402

sm = snakemake  # noqa: F821
train_prior(dataset_folder(sm.input.dataset), sm.output[0], resolution=int(sm.params.resolution),
            settings=dict(sm.params.train), device=device())
