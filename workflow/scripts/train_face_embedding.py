"""Snakemake adapter: train the demo face-embedding network on a dataset's public pool
(rule train_face_embedding)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.inversion.evaluation import train_face_embedding  # noqa: E402

spec = dict(snakemake.params.spec)  # noqa: F821
train_face_embedding(spec.pop("dataset_dir"), out_model=snakemake.output.model,  # noqa: F821
                     out_metrics=snakemake.output.metrics,  # noqa: F821
                     device=device(), progress=True, **spec)
