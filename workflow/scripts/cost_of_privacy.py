"""Snakemake adapter: cost of privacy gamma_eps (App. G) from the Table 5 Beta fit."""

from _common import setup

setup(snakemake)  # noqa: F821

import pandas as pd  # noqa: E402

from atat.analysis.tables import cost_of_privacy_table  # noqa: E402

tidy = pd.read_csv(snakemake.input.regressions)  # noqa: F821
cost_of_privacy_table(tidy, snakemake.output, spec=snakemake.params.spec,  # noqa: F821
                      terms=snakemake.params.terms)  # noqa: F821
