"""AT-AT reproduction: the science behind the Snakemake workflow."""

__version__ = "0.1.0"
