"""Snakemake adapter: collect every model's metrics into results/summary.csv, or one output's
models' records into results/summaries/<output>.csv (rule output_summary)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.summary import build_summary  # noqa: E402

build_summary(snakemake.params.models, snakemake.output[0],  # noqa: F821
              attacks=snakemake.params.attacks,  # noqa: F821
              # rule summary only: the rescaled AttAcc@1 (rule output_summary: none)
              evaluation=snakemake.params.get("evaluation"))  # noqa: F821
