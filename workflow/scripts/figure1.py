"""Snakemake adapter: paper Figure 1 (Unseen-Pixels: original, masked, reconstruction)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.analysis.figures import unseen_pixels_figure  # noqa: E402

sm = snakemake  # noqa: F821
unseen_pixels_figure(sm.input.model, f"{dataset_folder(sm.input.dataset)}/private", sm.input.images,
                     sm.output[0])
