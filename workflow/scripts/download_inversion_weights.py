"""Snakemake adapter: a pretrained weight file of the inversion stage (StyleGAN2-ADA pickle,
FaceNet, LPIPS) into the shared cache, checked against data/checksums.lock.yaml and loaded
before it becomes the output."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.downloads import fetch_weights  # noqa: E402

fetch_weights(snakemake.params.kind, snakemake.params.url, snakemake.output[0],  # noqa: F821
              key=snakemake.params.key, offline=snakemake.params.offline)  # noqa: F821
