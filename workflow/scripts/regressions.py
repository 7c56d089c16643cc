"""Snakemake adapter: fit every leakage regression of config/regressions.yaml (App. G) to
results/summary.csv; tidy CSV, one row per spec x term (skipped specs keep their reason)."""

from _common import setup

setup(snakemake)  # noqa: F821

import logging  # noqa: E402

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from atat.base import io  # noqa: E402
from atat.analysis.stats.regression import fit_all, sensitivity_specs  # noqa: E402
from atat.analysis.tables import load_specs  # noqa: E402

summary = pd.read_csv(snakemake.input.summary)  # noqa: F821
specs = load_specs(snakemake.input.specs, snakemake.params.statistics)  # noqa: F821
# the sensitivity analyses of the file, beside the pre-registered specs (never instead)
with open(snakemake.input.specs) as fh:  # noqa: F821
    specs += sensitivity_specs(yaml.safe_load(fh), snakemake.input.specs,  # noqa: F821
                               snakemake.params.statistics)  # noqa: F821
tidy = fit_all(summary, specs)
for spec, reason in tidy.loc[tidy["status"] == "skipped", ["spec", "reason"]].itertuples(index=False):
    logging.getLogger("regressions").warning("skipped %s: %s", spec, reason)
with io.atomic_path(snakemake.output[0]) as tmp:  # noqa: F821
    tidy.to_csv(tmp, index=False)
