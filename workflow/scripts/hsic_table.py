"""Snakemake adapter: one HSIC table (paper Tables 1, 8, 9; rules table1/table8/table9)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.analysis.tables import hsic_table  # noqa: E402

p = snakemake.params  # noqa: F821
hsic_table(list(snakemake.input.hsic), snakemake.input.summary,  # noqa: F821
           list(snakemake.output), table=p.table, note=p.note)  # noqa: F821
