"""Snakemake adapter: HSIC of one model (rule measure_hsic) or one HSIC table (rule
hsic_table: paper Tables 1, 8, 9)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

p = snakemake.params  # noqa: F821

if snakemake.rule == "hsic_table":  # noqa: F821
    from atat.analysis.tables import hsic_table

    hsic_table(list(snakemake.input.hsic), snakemake.input.summary,  # noqa: F821
               list(snakemake.output), table=p.table, note=p.note)  # noqa: F821
else:
    from atat.measures.hsic_measure import measure_hsic

    measure_hsic(snakemake.input.model, p.dataset_root, p.resolution,  # noqa: F821
                 split=p.split, batch_size=int(p.batch_size), n_batches=p.n_batches,
                 device=device(), aug=p.aug, seed=int(p.seed), yz_ktype=p.yz_ktype, dtype=p.dtype,
                 num_workers=int(p.num_workers), out_path=snakemake.output[0],  # noqa: F821
                 meta=p.meta, progress=False)
