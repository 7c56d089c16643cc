"""Snakemake adapter: paper Tables 23-28 (main results with Wilson / t 95% intervals)."""

from _common import setup

setup(snakemake)  # noqa: F821

import pandas as pd  # noqa: E402

from atat.analysis.tables import main_results_table  # noqa: E402

main_results_table(pd.read_csv(snakemake.input.per_image), pd.read_csv(snakemake.input.summary),  # noqa: F821
                   snakemake.output, number=int(snakemake.params.number),  # noqa: F821
                   config=snakemake.config)  # noqa: F821
