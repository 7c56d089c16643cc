"""Snakemake adapter: Figure 4, clean accuracy vs privacy per defense (AT-AT highlighted)."""

from _common import setup

setup(snakemake)  # noqa: F821

import pandas as pd  # noqa: E402

from atat.analysis.figures import accuracy_vs_privacy  # noqa: E402

accuracy_vs_privacy(pd.read_csv(snakemake.input.summary), snakemake.output[0],  # noqa: F821
                    attacks=snakemake.params.attacks, metrics=snakemake.params.metrics,  # noqa: F821
                    architecture=snakemake.params.architecture,  # noqa: F821
                    per_image=pd.read_csv(snakemake.input.per_image))  # noqa: F821
