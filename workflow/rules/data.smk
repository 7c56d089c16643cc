# Stage 1: datasets in the one on-disk format (manifest.csv + meta.json + images), under
# <resources_dir>/datasets/<name>/{private,public}.


rule synthfaces:
    output:
        directory(f"{RES}/datasets/{{dataset}}"),
    wildcard_constraints:
        dataset=_alt(SYNTH),
    params:
        resolution=lambda wc: dataset_resolution(wc.dataset),
        synthetic=lambda wc: config["datasets"][wc.dataset]["synthetic"],
        split_seed=config["split_seed"],
    log:
        "logs/data/synthfaces_{dataset}.log",
    benchmark:
        "benchmarks/data/synthfaces_{dataset}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/make_synthfaces.py"


rule torchvision_weights:
    output:
        f"{RES}/weights/torchvision/{{filename}}",
    wildcard_constraints:
        filename=_alt(re.escape(f) for f in torchvision_weight_urls()),
    params:
        url=lambda wc: torchvision_weight_urls()[wc.filename],
        offline=config.get("offline", False),
    log:
        "logs/data/torchvision_weights_{filename}.log",
    benchmark:
        "benchmarks/data/torchvision_weights_{filename}.tsv"
    localrule: True
    retries: 3
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/download_weights.py"


rule prepare_dataset:
    # Real datasets (FaceScrub, CelebA, Stanford Dogs): download (or use files placed by hand
    # under <resources_dir>/raw/<source>/ when offline), verify, extract, crop, split.
    output:
        directory(f"{RES}/datasets/{{dataset}}"),
    wildcard_constraints:
        dataset=_alt(REAL),
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
        raw_dir=lambda wc: f"{RES}/raw/{config['datasets'][wc.dataset]['source']}",
        split_seed=config["split_seed"],
        n_classes=lambda wc: config["datasets"][wc.dataset]["n_classes"],
        offline=config.get("offline", False),
    log:
        "logs/data/prepare_{dataset}.log",
    benchmark:
        "benchmarks/data/prepare_{dataset}.tsv"
    localrule: True
    threads: 4
    resources:
        mem_mb=8000,
        runtime=6 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/prepare_dataset.py"
