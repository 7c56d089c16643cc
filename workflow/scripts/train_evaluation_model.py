"""Snakemake adapter: train the evaluation model of one dataset (rule train_evaluation_model)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.inversion.evaluation import train_evaluation_model  # noqa: E402

spec = dict(snakemake.params.spec)  # noqa: F821
train_evaluation_model(spec.pop("dataset_root"), out_model=snakemake.output.model,  # noqa: F821
                       out_metrics=snakemake.output.metrics,  # noqa: F821
                       weights_path=snakemake.input.get("weights"),  # noqa: F821
                       device=device(), progress=True, **spec)
