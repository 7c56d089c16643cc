"""Snakemake adapter: render the embedded synthetic identity dataset (rule synthfaces)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import write_stamp  # noqa: E402
from atat.data.synthfaces import generate_synthfaces  # noqa: E402

p = snakemake.params  # noqa: F821
generate_synthfaces(snakemake.output.folder, resolution=p.resolution, split_seed=p.split_seed,  # noqa: F821
                    **p.synthetic)
stamp = write_stamp(snakemake.output.folder)  # noqa: F821
assert str(stamp) == snakemake.output.stamp, (stamp, snakemake.output.stamp)  # noqa: F821
