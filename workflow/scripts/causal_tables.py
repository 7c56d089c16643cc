"""Snakemake adapter: paper Tables 21 and 22 (causal AT-AT experiment, App. H)."""

from _common import setup

setup(snakemake)  # noqa: F821

import yaml  # noqa: E402

from atat.analysis.stats.regression import causal_sample  # noqa: E402
from atat.analysis.tables import causal_tables  # noqa: E402

with open(snakemake.input.specs) as fh:  # noqa: F821
    c = yaml.safe_load(fh).get("causal") or {}
causal_tables(snakemake.input.summary, snakemake.output.table21, snakemake.output.table22,  # noqa: F821
              sample=causal_sample(snakemake.params.causal),  # noqa: F821
              treatment=c.get("treatment", "treatment"),
              beta_responses=c.get("beta_responses", ["ppa_attacc1"]),
              ols_responses=c.get("ols_responses", ["ppa_attacc1", "ppa_dist_face"]))
