"""Snakemake adapter: reconstruction grid of one (dataset, architecture, attack) (paper Fig.
3/6)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.figures import reconstruction_grid  # noqa: E402

sm = snakemake  # noqa: F821
w = sm.wildcards
reconstruction_grid(dict(sm.params.models), f"{sm.input.dataset}/private", sm.output[0],
                    title=f"{w.attack.upper()} reconstructions, {w.dataset} / {w.arch} "
                          "(each: max. evaluation confidence)")
