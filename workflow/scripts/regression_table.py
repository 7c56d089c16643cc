"""Snakemake adapter: paper Table 5 or 15-20 (regression coefficients) from the tidy fits."""

from _common import setup

setup(snakemake)  # noqa: F821

import pandas as pd  # noqa: E402

from atat.analysis.tables import regression_table  # noqa: E402

tidy = pd.read_csv(snakemake.input.regressions)  # noqa: F821
regression_table(tidy, f"T{snakemake.params.number}", snakemake.output)  # noqa: F821
