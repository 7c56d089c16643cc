"""Snakemake adapter: torchvision ImageNet weights into the shared cache, hash-verified."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.downloads import fetch, torchvision_hash_prefix  # noqa: E402

url = snakemake.params.url  # noqa: F821
fetch(url, snakemake.output[0], sha256_prefix=torchvision_hash_prefix(url),  # noqa: F821
      offline=snakemake.params.offline)  # noqa: F821
