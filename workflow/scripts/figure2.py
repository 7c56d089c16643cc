"""Snakemake adapter: Figure 2, observed vs predicted leakage of the Table 5 OLS fit."""

from _common import setup

setup(snakemake)  # noqa: F821

import logging  # noqa: E402

import pandas as pd  # noqa: E402

from atat.analysis.figures import observed_vs_predicted  # noqa: E402
from atat.analysis.tables import load_specs  # noqa: E402

specs = load_specs(snakemake.input.specs, snakemake.params.statistics)  # noqa: F821
spec = {s["name"]: s for s in specs}[snakemake.params.spec]  # noqa: F821
info = observed_vs_predicted(pd.read_csv(snakemake.input.summary), spec,  # noqa: F821
                             snakemake.output[0])  # noqa: F821
if "skipped" in info:  # the figure says so; the log says why
    logging.getLogger("figure2").warning("Figure 2 not drawn: spec %s skipped: %s",
                                         spec["name"], info["skipped"])
