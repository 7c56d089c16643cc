"""Snakemake adapter: the quality of a trained inversion prior in the public classifier's terms
(rule prior_quality; atat.inversion.prior_quality)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.inversion.prior_quality import prior_quality, settings  # noqa: E402

sm = snakemake  # noqa: F821
prior_quality(sm.input.generator, sm.input.face, sm.input.face_metrics,
              dataset_folder(sm.input.dataset),
              sm.output[0], config_settings=settings(sm.config), center_crop=sm.params.center_crop,
              device=device())
