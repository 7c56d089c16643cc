"""Snakemake adapter: the paper's claims against this run (results/tables/claims.{csv,md};
atat.analysis.claims)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.claims import claims_table  # noqa: E402

inp = snakemake.input  # noqa: F821
hsic = {k[len("hsic_"):]: v for k, v in inp.items() if k.startswith("hsic_")}
claims_table(snakemake.config, summary_csv=inp.summary, per_image_csv=inp.per_image,  # noqa: F821
             outputs=snakemake.output,  # noqa: F821
             regressions_csv=inp.get("regressions"), cost_csv=inp.get("cost"),
             hsic_files=hsic, preconditions_csv=inp.get("preconditions"),
             dose_csv=inp.get("dose"), plan=inp.plan,
             records=snakemake.params.records)  # noqa: F821
