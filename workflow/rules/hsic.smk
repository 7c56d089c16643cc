# Stage 3b: HSIC(X, Z_l) and HSIC(Y, Z_l) of every model (paper §3, App. D; spec §4), one job
# per model, and the HSIC tables (paper Table 1, Tables 8/9) built from them + summary.csv.
#
# Optional config block `hsic:` (read with defaults; needs a schema entry before it can be set):
#   split: train       spec §4 default: augmented, shuffled train loader (open question §8.5)
#   n_batches: null    cap on the batches measured (null = the whole split)
#   yz_ktype: linear   kernel on the one-hot labels (spec §4)

HSIC_CFG = config.get("hsic") or {}

# Canonical row order of the HSIC tables (paper names in atat.hsic_measure.HSIC_LABELS).
HSIC_ROW_ORDER = ["nodef", "mid", "bido", "bido_lx1e3", "bido_lx1e4", "tldmi", "tldmi5",
                  "negls", "rolss", "rolss_ssf", "trap_mid", "trap_mid_star", "at", "atat"]
# Table 1 (paper §3): FaceScrub ResNet-152, every defense of that cell except the models of
# other experiments (permuted labels, vanilla AT, early-stopped NoDef) and BiDO(.0001, 0), which only Table 9 has
# (Table 9's caption: the RN-152 BiDO(.001, 0) model is Table 1's BiDO**).
TABLE1_CELL = ("facescrub", "resnet152")
TABLE1_EXCLUDE = {"permuted", "at", "bido_lx1e4", "nodef_es"}
# Table 9 (App. D.1): FaceScrub ResNet-18 and ResNet-152; BiDO variants vs NoDef, MID, TL-DMI.
TABLE9_DATASET = "facescrub"
TABLE9_ARCHS = ["resnet18", "resnet152"]
TABLE9_DEFENSES = ["nodef", "mid", "tldmi", "bido", "bido_lx1e3", "bido_lx1e4"]
TABLE9_NEEDS = {"bido_lx1e3", "bido_lx1e4"}
# Table 8 (App. D.1, caption not in paper.md): NoDef vs BiDO (0.05, 0.5) in every
# (dataset, architecture) cell that has both.
TABLE8_DEFENSES = ["nodef", "bido"]


def hsic_file(run):
    return f"results/hsic/{run.path}.json"


def _is_mask_stage(defense):
    """Stages 1/2 of Unseen-Pixels are mask-learning runs, not target models."""
    d = config["defenses"][defense]
    return d["type"] == "pixel_mask" and d.get("stage", "group_lasso") != "retrain"


def _table_run_key(r):
    order = HSIC_ROW_ORDER + [d for d in config["defenses"] if d not in HSIC_ROW_ORDER]
    return (r.dataset, r.architecture, order.index(r.defense), r.seed)


def hsic_table_runs(table):
    """(runs, note) of one HSIC table for the current config; runs == [] means not built."""
    grid = [r for r in RUNS if r.replicate is None and not _is_mask_stage(r.defense)]
    note = None
    if table == "table1":
        cells = {(r.dataset, r.architecture) for r in grid}
        cell = TABLE1_CELL
        if cell not in cells and grid:
            # no FaceScrub ResNet-152 models (e.g. the demo): the analogous table of the
            # config's first grid cell
            cell = (grid[0].dataset, grid[0].architecture)
            note = (f"Analogue of the paper's Table 1 for {cell[0]}/{cell[1]} (this config "
                    f"has no facescrub/resnet152 models).")
        runs = [r for r in grid if (r.dataset, r.architecture) == cell
                and r.defense not in TABLE1_EXCLUDE]
    elif table == "table8":
        have = {(r.dataset, r.architecture, r.defense) for r in grid}
        runs = [r for r in grid if r.defense in TABLE8_DEFENSES
                and all((r.dataset, r.architecture, d) in have for d in TABLE8_DEFENSES)]
    elif table == "table9":
        runs = [r for r in grid if r.dataset == TABLE9_DATASET
                and r.architecture in TABLE9_ARCHS and r.defense in TABLE9_DEFENSES]
        if not TABLE9_NEEDS & {r.defense for r in runs}:
            runs = []
    else:
        raise ValueError(table)
    return sorted(runs, key=_table_run_key), note


HSIC_TABLES_BUILT = [t for t in ("table1", "table8", "table9") if hsic_table_runs(t)[0]]


def hsic_targets():
    targets = [hsic_file(r) for r in RUNS]
    for t in HSIC_TABLES_BUILT:
        targets += expand("results/tables/{table}.{ext}", table=t, ext=["csv", "md", "tex"])
    return targets


TARGET_FUNCTIONS.append(hsic_targets)


rule measure_hsic:
    input:
        model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
        dataset=lambda wc: dataset_dir(wc.dataset),
    output:
        "results/hsic/{dataset}/{arch}/{defense}/seed{seed}.json",
    params:
        dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
        resolution=lambda wc: dataset_resolution(wc.dataset),
        # spec §4: the training loader (batch 128 in the paper recipe) with its augmentation
        batch_size=lambda wc: training_params(config, wc.dataset, wc.arch, wc.defense)["batch_size"],
        num_workers=lambda wc: training_params(config, wc.dataset, wc.arch, wc.defense)["num_workers"],
        aug=config["augmentation"],
        split=HSIC_CFG.get("split", "train"),
        n_batches=HSIC_CFG.get("n_batches"),
        yz_ktype=HSIC_CFG.get("yz_ktype", "linear"),
        seed=lambda wc: int(wc.seed),
        meta=lambda wc: dict(dataset=wc.dataset, architecture=wc.arch, defense_name=wc.defense,
                             seed=int(wc.seed)),
    log:
        "logs/hsic/{dataset}/{arch}/{defense}/seed{seed}.log",
    benchmark:
        "benchmarks/hsic/{dataset}/{arch}/{defense}/seed{seed}.tsv"
    threads: 4
    resources:
        gpu=1,
        mem_mb=32000,
        runtime=2 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/measure_hsic.py"


rule hsic_table:
    input:
        hsic=lambda wc: [hsic_file(r) for r in hsic_table_runs(wc.hsic_table)[0]],
        summary="results/summary.csv",
    output:
        report(
            "results/tables/{hsic_table}.csv",
            caption="../report/hsic_table.rst",
            category="Tables",
            subcategory="HSIC",
        ),
        "results/tables/{hsic_table}.md",
        "results/tables/{hsic_table}.tex",
    wildcard_constraints:
        hsic_table=_alt(HSIC_TABLES_BUILT),
    params:
        table=lambda wc: wc.hsic_table,
        note=lambda wc: hsic_table_runs(wc.hsic_table)[1],
    log:
        "logs/tables/{hsic_table}.log",
    benchmark:
        "benchmarks/tables/{hsic_table}.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/measure_hsic.py"
