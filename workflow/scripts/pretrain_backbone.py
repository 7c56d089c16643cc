"""Snakemake adapter: pretrain one backbone on the pretraining population (rule
pretrain_backbone)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.training.pretrain import pretrain_backbone  # noqa: E402

p = snakemake.params  # noqa: F821
pretrain_backbone(out_weights=snakemake.output.weights,  # noqa: F821
                  out_metrics=snakemake.output.metrics, device=device(), progress=True,  # noqa: F821
                  **p.spec)
