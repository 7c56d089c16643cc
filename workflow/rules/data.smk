# Stage 1: datasets in the one on-disk format (manifest.csv + meta.json + images), under
# <resources_dir>/datasets/<name>/{private,public}.

# Offline, a download job can only fail the same way again (a file missing or wrong): it
# fails once, at once, with its message. Online a download is retried 3 times. prepare_dataset
# keeps the profile's / command line's --retries.
OFFLINE = bool(config.get("offline", False))
DOWNLOAD_RETRIES = 0 if OFFLINE else 3


# A dataset is a folder plus its stamp `<name>.dataset.json` (atat.data.manifest.write_stamp:
# the manifest's checksum, written after the manifest was checked against the files). Jobs that
# read a dataset declare the stamp, not the folder: emptying or touching the folder reruns
# nothing; a job that would read a folder that no longer matches its stamp is stopped before
# any job starts (onstart, common.smk), so no output it would replace is lost.
rule synthfaces:
    output:
        folder=directory(f"{RES}/datasets/{{dataset}}"),
        stamp=f"{RES}/datasets/{{dataset}}{STAMP_SUFFIX}",
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
    retries: DOWNLOAD_RETRIES
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/download_weights.py"


# Pretrained weights of the model-inversion stage (docs/sources.md#ppdg, #evaluation-model,
# #facenet-distance, #stylegan2-pickles). Each file is checked against data/checksums.lock.yaml (key
# weights/<kind>/<file name>; a sha256 missing there is recorded at first download, for review and
# commit) and loaded (safe unpickler / weights_only state dict) before it becomes the output. With
# `offline` a missing file stops the job naming the path to place it at; no socket is opened.
rule stylegan_weights:
    output:
        f"{RES}/weights/stylegan2/{{generator}}.pkl",
    wildcard_constraints:
        generator=_alt(re.escape(n) for n in _downloaded_generators()),
    params:
        kind="stylegan2",
        url=lambda wc: config["generators"][wc.generator]["url"],
        key=lambda wc: f"weights/stylegan2/{wc.generator}.pkl",
        offline=config.get("offline", False),
    log:
        "logs/data/stylegan_weights_{generator}.log",
    benchmark:
        "benchmarks/data/stylegan_weights_{generator}.tsv"
    localrule: True
    retries: DOWNLOAD_RETRIES
    threads: 1
    resources:
        mem_mb=4000,  # torch + the ~380 MB pickle read and its generator built once
        runtime=60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/download_inversion_weights.py"


rule facenet_weights:
    output:
        f"{RES}/weights/facenet/{{facenet_file}}",
    wildcard_constraints:
        facenet_file=_alt([re.escape(_facenet_name())] if _facenet_name() else []),
    params:
        kind="facenet",
        url=(config.get("face_embedding") or {}).get("url"),
        key=lambda wc: f"weights/facenet/{wc.facenet_file}",
        offline=config.get("offline", False),
    log:
        "logs/data/facenet_weights_{facenet_file}.log",
    benchmark:
        "benchmarks/data/facenet_weights_{facenet_file}.tsv"
    localrule: True
    retries: DOWNLOAD_RETRIES
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/download_inversion_weights.py"


rule lpips_weights:
    output:
        LPIPS_FILE,
    params:
        kind="lpips",
        url=LPIPS_VGG_URL,
        key="weights/lpips/vgg_v0.1.pth",
        offline=config.get("offline", False),
    log:
        "logs/data/lpips_weights.log",
    benchmark:
        "benchmarks/data/lpips_weights.tsv"
    localrule: True
    retries: DOWNLOAD_RETRIES
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/download_inversion_weights.py"


# Real datasets (FaceScrub, CelebA, Stanford Dogs) in two halves. fetch_dataset needs the
# network and little else: a local rule (the login node) that downloads the raw files (or
# verifies those placed by hand under <resources_dir>/raw/<source>/ when offline) and records
# their checksums. prepare_dataset is the heavy half (extract, crop, split: ~90k images, hours
# on 4 cores): a cluster job that never opens a socket and builds from the recorded files.
rule fetch_dataset:
    output:
        f"{RES}/raw/{{source}}.fetched.json",
    wildcard_constraints:
        source=_alt(sorted({config["datasets"][d]["source"] for d in REAL})),
    params:
        source="{source}",
        raw_dir=f"{RES}/raw/{{source}}",
        offline=config.get("offline", False),
    log:
        "logs/data/fetch_{source}.log",
    benchmark:
        "benchmarks/data/fetch_{source}.tsv"
    localrule: True
    retries: DOWNLOAD_RETRIES
    threads: 1
    resources:
        mem_mb=2000,
        runtime=6 * 60,  # a CelebA or FaceScrub archive of several GB
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/fetch_dataset.py"


rule prepare_dataset:
    input:
        fetched=lambda wc: f"{RES}/raw/{config['datasets'][wc.dataset]['source']}.fetched.json",
    output:
        folder=directory(f"{RES}/datasets/{{dataset}}"),
        stamp=f"{RES}/datasets/{{dataset}}{STAMP_SUFFIX}",
    wildcard_constraints:
        dataset=_alt(REAL),
    params:
        source=lambda wc: config["datasets"][wc.dataset]["source"],
        raw_dir=lambda wc: f"{RES}/raw/{config['datasets'][wc.dataset]['source']}",
        split_seed=config["split_seed"],
        n_classes=lambda wc: config["datasets"][wc.dataset]["n_classes"],
        offline=True,  # the files are in place (fetch_dataset): never the network
    log:
        "logs/data/prepare_{dataset}.log",
    benchmark:
        "benchmarks/data/prepare_{dataset}.tsv"
    threads: 4
    resources:
        mem_mb=8000,
        runtime=6 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/prepare_dataset.py"
