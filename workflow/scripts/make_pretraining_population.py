"""Snakemake adapter: render the pretraining population (rule pretraining_population)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import write_stamp  # noqa: E402
from atat.data.pretraining import generate_pretraining_population  # noqa: E402

p = snakemake.params  # noqa: F821
generate_pretraining_population(snakemake.output.folder, exclude_populations=p.exclude,  # noqa: F821
                                **p.population)
stamp = write_stamp(snakemake.output.folder)  # noqa: F821
assert str(stamp) == snakemake.output.stamp, (stamp, snakemake.output.stamp)  # noqa: F821
