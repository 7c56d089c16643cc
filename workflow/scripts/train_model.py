"""Snakemake adapter: train one target model (rule train_model)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.training.train import TrainSpec, train  # noqa: E402

p = snakemake.params  # noqa: F821
spec = TrainSpec(**p.spec)
train(spec, out_model=snakemake.output.model, out_metrics=snakemake.output.metrics,  # noqa: F821
      out_predictions=snakemake.output.predictions,  # noqa: F821
      resume_path=p.resume, device=device(), progress=True)
