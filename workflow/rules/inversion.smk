# Stage 6: model inversion (paper §2, A.5; docs/sources.md#attack-conventions). One job per (model,
# attack); each job writes the per-image scores of its final images, the summary metrics, one
# reconstruction per class (highest evaluation confidence, for the grid figures) and the
# final latents. Per-batch/per-class progress lives under results/.resume/inversion/ (not
# declared, so a failed job keeps it and a rerun continues). With inversion.classes_per_job a
# (model, attack) is several invert_shard jobs of consecutive classes (parts/classes<a>-<b>.pt,
# each with its own resume directory) that rule invert merges into the same bytes.

from atat.analysis.paper import inversion_priors, prior_quality_path  # noqa: E402

TRAINED_GENERATORS = [n for n, g in config.get("generators", {}).items() if "train" in g]
INV_RUNS = [r for r in RUNS] if INV_ATTACKS else []
# the attacks' priors -> None where rule prior_quality measures one, else why not (issue 17)
INV_PRIORS = inversion_priors(config, INV_RUNS)
QUALITY_GENERATORS = [g for g, why in INV_PRIORS.items() if why is None]

INV_DIR = "results/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}"


wildcard_constraints:
    attack=_alt(INV_ATTACKS or ["ppa", "ifgmi", "ppdg"]),
    generator=_alt(config.get("generators", {})),


rule train_generator:
    # Embedded default: the attacker's image prior, a small StyleGAN2 (same Generator class as
    # the official priors) trained on the dataset's PUBLIC pool (identities disjoint from the
    # private ones). At full scale the generators are downloaded instead (rule stylegan_weights).
    input:
        dataset=lambda wc: dataset_stamp(config["generators"][wc.generator]["train"]["dataset"]),
    output:
        "results/generators/{generator}.pkl",
    wildcard_constraints:
        generator=_alt(TRAINED_GENERATORS),
    params:
        train=lambda wc: config["generators"][wc.generator]["train"],
        resolution=lambda wc: dataset_resolution(
            config["generators"][wc.generator]["train"]["dataset"]
        ),
    log:
        "logs/inversion/train_generator_{generator}.log",
    benchmark:
        "benchmarks/inversion/train_generator_{generator}.tsv"
    # Critical path: every inversion job waits for this one, so it starts as soon as its
    # input exists instead of after the training and AutoAttack jobs (issue 16).
    priority: 50
    threads: 4
    resources:
        gpu=gpu_count("train_generator"),  # 0 under device: cpu; any card (no memory model)
        mem_mb=16000,
        runtime=24 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_generator.py"


rule prior_quality:
    # Is the prior a prior of its population's images? Recognition rate by the public pool's
    # identity classifier and precision/recall in its embedding, each against held-out real
    # public images (ceiling) and a per-pixel Gaussian (floor); checked in the preconditions
    # table (atat.inversion.prior_quality; issue 17 item 5). Only where that classifier exists.
    input:
        generator="results/generators/{generator}.pkl",
        face=lambda wc: prior_instrument_files(
            config["generators"][wc.generator]["train"]["dataset"]
        ),
        face_metrics=lambda wc: prior_instrument_files(
            config["generators"][wc.generator]["train"]["dataset"], "metrics.json"
        ),
        dataset=lambda wc: dataset_stamp(config["generators"][wc.generator]["train"]["dataset"]),
    output:
        prior_quality_path("{generator}"),
    wildcard_constraints:
        generator=_alt(QUALITY_GENERATORS),
    params:
        center_crop=lambda wc: config["generators"][wc.generator].get("center_crop"),
    log:
        "logs/inversion/prior_quality_{generator}.log",
    benchmark:
        "benchmarks/inversion/prior_quality_{generator}.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # 1,000 samples at 32 px and a ResNet-18: ~1 GB with torch
        runtime=30,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/prior_quality.py"


rule real_embeddings:
    # The scorer's features of the private training images (evaluation model; face network on
    # face datasets), made once per dataset and networks instead of in every attack job
    # (issue 16; identical for jobs attacking every class, float rounding for a subset).
    input:
        evaluation="results/evaluation/{dataset}/model.pt",
        dataset=lambda wc: dataset_stamp(wc.dataset),
        face=lambda wc: face_network_file(wc.dataset) or [],
    output:
        "results/inversion/{dataset}/real_embeddings.pt",
    params:
        faces=lambda wc: bool(config["datasets"][wc.dataset].get("faces", False)),
        face=config.get("face_embedding"),
    log:
        "logs/inversion/real_embeddings_{dataset}.log",
    benchmark:
        "benchmarks/inversion/real_embeddings_{dataset}.tsv"
    # on the critical path of every inversion job of the dataset, like the prior; one
    # thread: images are read and resized one at a time (PIL, no loader workers)
    priority: 50
    threads: 1
    resources:
        gpu=gpu_count("real_embeddings"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("real_embeddings"),
        gpu_model=gpu_card("real_embeddings", "gpu_model"),
        constraint=gpu_card("real_embeddings", "constraint"),
        # the paper's ~25k FaceScrub training images at 299 px through Inception-v3 and FaceNet
        # in batches of 64: a few GB; the features themselves ~0.3 GB
        mem_mb=16000,
        runtime=runtime_min("real_embeddings"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/real_embeddings.py"


rule invert:
    # One (model, attack): attacks every class itself, or, when inversion.classes_per_job
    # splits its classes (atat.plan.config.inversion_shards), merges the parts of its
    # invert_shard jobs into the same bytes (seconds on one CPU, no GPU).
    input:
        unpack(invert_inputs),
    output:
        per_image=f"{INV_DIR}/per_image.csv",
        metrics=f"{INV_DIR}/metrics.json",
        images=f"{INV_DIR}/best_images.pt",
        latents=f"{INV_DIR}/final_w.pt",
    params:
        attack=lambda wc: inversion_params(config, wc.dataset, wc.arch, wc.defense, wc.attack),
        evaluation=config.get("evaluation_model"),
        face=config.get("face_embedding"),
        faces=lambda wc: bool(config["datasets"][wc.dataset].get("faces", False)),
        resume="results/.resume/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}",
        ids=lambda wc: dict(
            dataset=wc.dataset,
            architecture=wc.arch,
            defense=wc.defense,
            seed=int(wc.seed),
            attack=wc.attack,
        ),
    log:
        "logs/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}.log",
    benchmark:
        "benchmarks/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}.tsv"
    threads: lambda wc: 1 if invert_sharded(wc) else 8
    resources:
        # no GPU (gpu 0, no card) when it only merges its shards' parts, or under device: cpu
        gpu=gpu_count("invert"),
        # host RAM; a CPU run at 1024 px needs about the GPU figure below (PPA ~46 GiB of
        # tensors at batch 25, PPDG's tuning ~31 GiB at 5 points: atat.plan.inversion_resources)
        mem_mb=invert_resource("mem_mb", 48000),
        # estimated GPU memory (atat.plan.inversion_resources), at the paper's 1024 px with a
        # ResNet-152 target: PPA (batch 25) 55000 MB, IF-GMI and PPDG (batch 20) 44000 MB;
        # PPDG's tuning on 5 points (~37 GiB) is below its optimisation batch. Not a standard
        # Snakemake resource: informative, or a cap with --resources gpu_mem_mb=N (global).
        gpu_mem_mb=gpu_mem_mb("invert"),
        # the card that holds gpu_mem_mb (gpu_cards; larger after an OOM) and the runtime from
        # the job's forecast (common.smk, atat.plan.job_cost)
        gpu_model=gpu_card("invert", "gpu_model"),
        constraint=gpu_card("invert", "constraint"),
        runtime=runtime_min("invert"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/invert.py"


rule invert_shard:
    # The classes at positions start..stop-1 of one (model, attack)'s class list
    # (inversion.classes_per_job; atat.plan.config.inversion_shards), each computed exactly as in
    # the job over every class; its own resume files; merged by rule invert.
    input:
        unpack(inversion_inputs),
        real_embeddings="results/inversion/{dataset}/real_embeddings.pt",
    output:
        part=f"{INV_DIR}/parts/classes{{start}}-{{stop}}.pt",
    wildcard_constraints:
        start=r"\d+",
        stop=r"\d+",
    params:
        attack=lambda wc: inversion_params(config, wc.dataset, wc.arch, wc.defense, wc.attack),
        evaluation=config.get("evaluation_model"),
        face=config.get("face_embedding"),
        faces=lambda wc: bool(config["datasets"][wc.dataset].get("faces", False)),
        resume="results/.resume/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}/classes{start}-{stop}",
        ids=lambda wc: dict(
            dataset=wc.dataset,
            architecture=wc.arch,
            defense=wc.defense,
            seed=int(wc.seed),
            attack=wc.attack,
        ),
    log:
        "logs/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}/classes{start}-{stop}.log",
    benchmark:
        "benchmarks/inversion/{dataset}/{arch}/{defense}/seed{seed}/{attack}/classes{start}-{stop}.tsv"
    threads: 8
    resources:
        gpu=gpu_count("invert_shard"),
        mem_mb=48000,  # as rule invert
        gpu_mem_mb=gpu_mem_mb("invert_shard"),
        gpu_model=gpu_card("invert_shard", "gpu_model"),  # as rule invert
        constraint=gpu_card("invert_shard", "constraint"),
        runtime=runtime_min("invert_shard"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/invert.py"


rule inversion_per_image:
    # One long table of every attacked image (dataset, architecture, defense, seed, attack,
    # class, correct_top1, correct_top5, evalconf, dist_face, dist_eval, img_absmax): the input of the
    # Wilson / per-class t intervals of Tables 23-28. The grid's models only: a causal
    # replicate or a dose-response variant would otherwise be pooled into its cell's row.
    input:
        lambda wc: [
            f"results/inversion/{r.path}/{a}/per_image.csv"
            for r in (grid_runs(PLAN) if INV_ATTACKS else [])
            for a in run_attacks(config, r)
        ],
    output:
        "results/inversion/per_image.csv",
    log:
        "logs/inversion/per_image.log",
    benchmark:
        "benchmarks/inversion/per_image.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        "../../envs/torch.yaml"  # imports atat.inversion (facenet-pytorch)
    script:
        "../scripts/inversion_per_image.py"


rule figure_reconstructions:
    # Paper Fig. 3/6: a training image of each shown class beside every defense's
    # reconstruction of it (the image of maximum evaluation confidence: not cherry-picked).
    input:
        images=lambda wc: list(reconstruction_inputs(wc).values()),
        dataset=lambda wc: dataset_stamp(wc.dataset),
    output:
        report(
            "results/figures/reconstructions_{dataset}_{arch}_{attack}.png",
            caption="../report/figure_reconstructions.rst",
            category="Figures",
            subcategory="Reconstructions (Fig. 3, 6)",
            labels={"dataset": "{dataset}", "architecture": "{arch}", "attack": "{attack}"},
        ),
    params:
        models=reconstruction_inputs,
    log:
        "logs/figures/reconstructions_{dataset}_{arch}_{attack}.log",
    benchmark:
        "benchmarks/figures/reconstructions_{dataset}_{arch}_{attack}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure_reconstructions.py"


# --- paper §3: Table 2 (rote memorisation) and Table 3 (Unseen-Pixels), each from its summary ---
rule table2:
    input:
        summary=output_summary_file("table2"),
    output:
        report(
            "results/tables/table2.csv",
            caption="../report/table2.rst",
            category="Tables",
            subcategory="Main text",
            labels={"table": "2"},
        ),
        "results/tables/table2.md",
        "results/tables/table2.tex",
    params:
        permuted=permuted_defenses(config),
        true_labels=plain_nodef_defenses(config),
    log:
        "logs/tables/table2.log",
    benchmark:
        "benchmarks/tables/table2.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/section3_tables.py"


rule table3:
    input:
        summary=output_summary_file("table3"),
    output:
        report(
            "results/tables/table3.csv",
            caption="../report/table3.rst",
            category="Tables",
            subcategory="Main text",
            labels={"table": "3"},
        ),
        "results/tables/table3.md",
        "results/tables/table3.tex",
    params:
        roles=section3_roles(config),
    log:
        "logs/tables/table3.log",
    benchmark:
        "benchmarks/tables/table3.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/section3_tables.py"


rule figure1:
    # Paper Fig. 1: original, pixel-deleted (as the Unseen-Pixels model saw it) and PPA
    # reconstruction from the Unseen-Pixels model.
    input:
        model=lambda wc: f"{model_dir(unseen_pixel_run(wc))}/model.pt",
        images=lambda wc: f"results/inversion/{unseen_pixel_run(wc).path}/ppa/best_images.pt",
        dataset=lambda wc: dataset_stamp(wc.dataset),
    output:
        report(
            "results/figures/figure1_unseen_pixels_{dataset}_{arch}.png",
            caption="../report/figure1.rst",
            category="Figures",
            labels={"figure": "1", "cell": "{dataset}/{arch}"},
        ),
    log:
        "logs/figures/figure1_{dataset}_{arch}.log",
    benchmark:
        "benchmarks/figures/figure1_{dataset}_{arch}.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure1.py"
