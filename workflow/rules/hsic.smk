# Stage 4: HSIC(X, Z_l) and HSIC(Y, Z_l) of every model (paper §3, App. D;
# docs/sources.md#hsic-measurement), one job per model, and the HSIC tables (paper Table 1, Tables
# 8/9) built from them + their summary (results/summaries/<table>.csv).
# Which models each table holds, its caption and labels: atat.analysis.paper (entries table1/8/9).
#
# Config block `hsic:` (optional; schema: workflow/schemas/config.schema.yaml):
#   split: train       REPO's default: augmented, shuffled train loader (the paper does not say
#                      which loader it used; docs/sources.md#hsic-measurement)
#   n_batches: null    cap on the batches measured (null = the whole split)
#   yz_ktype: linear   kernel on the one-hot labels (docs/sources.md#hsic-measurement)
#   dtype: float64     precision of the measurement's kernel maths (BiDO trains in float32;
#                      as a measurement float32 is off by up to 6%: atat.measures.hsic_measure)

HSIC_CFG = config.get("hsic") or {}


rule measure_hsic:
    input:
        model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
        dataset=lambda wc: dataset_stamp(wc.dataset),
    output:
        "results/hsic/{dataset}/{arch}/{defense}/seed{seed}.json",
    params:
        dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
        resolution=lambda wc: dataset_resolution(wc.dataset),
        # docs/sources.md#hsic-measurement: the training loader (batch 128 in the paper recipe) with
        # its augmentation
        batch_size=lambda wc: training_params(config, wc.dataset, wc.arch, wc.defense)["batch_size"],
        num_workers=lambda wc: training_params(config, wc.dataset, wc.arch, wc.defense)[
            "num_workers"
        ],
        aug=config["augmentation"],
        split=HSIC_CFG.get("split", "train"),
        n_batches=HSIC_CFG.get("n_batches"),
        yz_ktype=HSIC_CFG.get("yz_ktype", "linear"),
        dtype=HSIC_CFG.get("dtype", "float64"),
        seed=lambda wc: int(wc.seed),
        meta=lambda wc: dict(
            dataset=wc.dataset, architecture=wc.arch, defense_name=wc.defense, seed=int(wc.seed)
        ),
    log:
        "logs/hsic/{dataset}/{arch}/{defense}/seed{seed}.log",
    benchmark:
        "benchmarks/hsic/{dataset}/{arch}/{defense}/seed{seed}.tsv"
    threads: 4
    resources:
        gpu=gpu_count("measure_hsic"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("measure_hsic"),
        gpu_model=gpu_card("measure_hsic", "gpu_model"),
        constraint=gpu_card("measure_hsic", "constraint"),
        mem_mb=32000,
        runtime=runtime_min("measure_hsic"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/measure_hsic.py"


# Tables 1, 8, 9, one rule each (named after the table) for every table whose selection
# holds models of this config (atat.analysis.paper.table_rules).
for _table in table_rules(PLAN, "hsic_table"):

    rule:
        name:
            _table
        input:
            hsic=[hsic_file(r) for r in hsic_table_runs(PLAN, _table)[0]],
            summary=output_summary_file(_table),
        output:
            report(
                f"results/tables/{_table}.csv",
                caption="../report/hsic_table.rst",
                category="Tables",
                subcategory="HSIC",
            ),
            f"results/tables/{_table}.md",
            f"results/tables/{_table}.tex",
        params:
            table=_table,
            number=table_number(_table),
            note=hsic_table_runs(PLAN, _table)[1],
        log:
            f"logs/tables/{_table}.log",
        benchmark:
            f"benchmarks/tables/{_table}.tsv"
        threads: 1
        resources:
            mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
            runtime=10,
        conda:
            "../../envs/stats.yaml"
        script:
            "../scripts/hsic_table.py"
