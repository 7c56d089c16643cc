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
    script:
        "../scripts/make_synthfaces.py"
