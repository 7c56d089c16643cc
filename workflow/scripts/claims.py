"""Snakemake adapter: the paper's claims against this run (results/tables/claims.{csv,md};
atat.analysis.claims)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.claims import claims_table  # noqa: E402

inp = snakemake.input  # noqa: F821
hsic = {k[len("hsic_"):]: v for k, v in inp.items() if k.startswith("hsic_")}
# the dose-response endpoints' per-image files (a named list; absent without a sweep)
dose_per_image = inp.get("dose_per_image") or []
dose_per_image = [dose_per_image] if isinstance(dose_per_image, str) else list(dose_per_image)
predictions = inp.get("test_predictions") or []
predictions = [predictions] if isinstance(predictions, str) else list(predictions)
claims_table(snakemake.config, summary_csv=inp.summary, per_image_csv=inp.per_image,  # noqa: F821
             outputs=snakemake.output,  # noqa: F821
             regressions_csv=inp.get("regressions"), cost_csv=inp.get("cost"),
             hsic_files=hsic, preconditions_csv=inp.get("preconditions"),
             dose_csv=inp.get("dose"), dose_per_image=dose_per_image, plan=inp.plan,
             records=snakemake.params.records,  # noqa: F821
             test_predictions=predictions, regressions_spec=inp.get("regressions_spec"))
