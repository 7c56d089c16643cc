# Stage 1b: the miniature's ImageNet (docs/decisions.md#pretraining). With a `pretraining` block
# (config/demo.yaml) every network fine-tuned with pretrained: true -- target models, the
# evaluation model, the public classifier of δ_face -- starts from a backbone trained here on
# synthetic face identities disjoint from every private and public identity of the config; without
# one (config/config.yaml) from torchvision's ImageNet file (rule torchvision_weights). Both are a
# state dict of the torchvision network, loaded by one code path (atat.training.models).


rule pretraining_population:
    output:
        folder=directory(PRETRAIN_POPULATION),
        stamp=f"{PRETRAIN_POPULATION}{STAMP_SUFFIX}",
    params:
        population=lambda wc: dict(config["pretraining"]["population"]),
        exclude=pretraining_exclusions(config),
    log:
        "logs/pretrain/population.log",
    benchmark:
        "benchmarks/pretrain/population.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/make_pretraining_population.py"


rule pretrain_backbone:
    input:
        population=f"{PRETRAIN_POPULATION}{STAMP_SUFFIX}",
    output:
        weights="results/pretrained/{backbone}/{res}px/weights.pth",
        metrics="results/pretrained/{backbone}/{res}px/metrics.json",
    wildcard_constraints:
        backbone=_alt({b for b, _ in PRETRAIN}),
        res=_alt({str(r) for _, r in PRETRAIN}),
    params:
        spec=pretrain_backbone_spec,
    log:
        "logs/pretrain/{backbone}_{res}px.log",
    benchmark:
        "benchmarks/pretrain/{backbone}_{res}px.tsv"
    # Critical path: every target model, evaluation model and public classifier waits for one
    priority: 60
    threads: 8
    resources:
        gpu=gpu_count("pretrain_backbone"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("pretrain_backbone"),
        gpu_model=gpu_card("pretrain_backbone", "gpu_model"),
        constraint=gpu_card("pretrain_backbone", "constraint"),
        mem_mb=16000,
        runtime=runtime_min("pretrain_backbone"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/pretrain_backbone.py"
