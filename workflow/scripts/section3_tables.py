"""Snakemake adapter: paper Table 2 (rote memorisation) or Table 3 (Unseen-Pixels)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.tables import table2, table3  # noqa: E402

sm = snakemake  # noqa: F821
if sm.rule == "table2":
    table2(sm.input.summary, list(sm.output), permuted=sm.params.permuted,
           true_labels=sm.params.true_labels)
else:
    table3(sm.input.summary, list(sm.output), roles=dict(sm.params.roles))
