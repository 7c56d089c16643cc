"""Snakemake adapter: reconstruction grid of one (dataset, architecture, attack) (paper Fig.
3/6)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
from atat.analysis.figures import cell_title, reconstruction_grid  # noqa: E402
from atat.analysis.paper import ATTACK_NAMES, label  # noqa: E402

sm = snakemake  # noqa: F821
w = sm.wildcards
reconstruction_grid(dict(sm.params.models), f"{dataset_folder(sm.input.dataset)}/private", sm.output[0],
                    title=f"{label(ATTACK_NAMES, w.attack)} reconstructions, "
                          f"{cell_title(w.dataset, w.arch)} (each: the image of max. "
                          "evaluation confidence)")
