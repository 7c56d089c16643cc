# Stage 5: the networks that judge the inversion attacks (spec attacks §5.2, §5.4), one per
# attacked dataset: the Inception-v3 evaluation model trained on the private training split,
# and (embedded demo only, face_embedding.source = public_classifier) the face-embedding
# network of δ_face trained on the dataset's public pool. With source facenet the pretrained
# InceptionResnetV1 weights file is used directly (see face_network_file).
# Both train through atat.train's loop and resume from results/.resume/{evaluation,
# face_embedding}/<dataset>/resume.pt (not declared, so Snakemake never deletes it).

EVAL_CFG = config.get("evaluation_model") or {}
FACE_CFG = config.get("face_embedding") or {}
# datasets with a public pool to train the demo face embedding on (faces, synthetic)
PUBLIC_FACE = [
    n for n, d in config["datasets"].items() if d["source"] == "synthfaces" and d.get("faces")
]


def evaluation_model_inputs(wildcards):
    inputs = {"dataset": dataset_dir(wildcards.dataset)}
    if EVAL_CFG.get("pretrained"):
        inputs["weights"] = evaluation_weights_file()  # data.smk: ImageNet Inception-v3 file
    return inputs


def evaluation_model_spec(wildcards):
    """Keyword arguments of atat.inversion.evaluation.train_evaluation_model."""
    return dict(
        dataset_root=f"{dataset_dir(wildcards.dataset)}/private",
        n_classes=n_classes(wildcards.dataset),
        resolution=int(EVAL_CFG["resolution"]),
        aux_logits=bool(EVAL_CFG.get("aux_logits", True)),
        training=dict(EVAL_CFG["training"]),
        augmentation=EVAL_CFG.get("augmentation"),
        seed=int(EVAL_CFG.get("seed", 42)),
        num_workers=int(config["training"].get("num_workers", 0)),
        # atat.train's resume checkpoint (undeclared, as rule train_model's)
        resume_path=f"results/.resume/evaluation/{wildcards.dataset}/resume.pt",
    )


def evaluation_model_file(dataset):
    return f"results/evaluation/{dataset}/model.pt"


def face_network_file(dataset):
    """The δ_face network of ``dataset`` for atat.inversion.evaluation.load_face_network, or
    None for non-face datasets (δ_face is NaN there, paper I.2)."""
    if not config["datasets"][dataset].get("faces"):
        return None
    if FACE_CFG.get("source") == "public_classifier":
        return f"results/face_embedding/{dataset}/model.pt"
    return facenet_file()  # data.smk: the downloaded VGGFace2 InceptionResnetV1 state dict


rule train_evaluation_model:
    input:
        unpack(evaluation_model_inputs),
    output:
        model="results/evaluation/{dataset}/model.pt",
        metrics="results/evaluation/{dataset}/metrics.json",
    params:
        spec=evaluation_model_spec,
    log:
        "logs/evaluation/{dataset}.log",
    benchmark:
        "benchmarks/evaluation/{dataset}.tsv"
    # Critical path: every inversion job waits for this one, so it starts as soon as its
    # input exists instead of after the training and AutoAttack jobs (issue 16).
    priority: 50
    threads: 8
    resources:
        gpu=1,
        mem_mb=32000,
        runtime=24 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_evaluation_model.py"


rule train_face_embedding:
    input:
        dataset=lambda wc: dataset_dir(wc.dataset),
    output:
        model="results/face_embedding/{dataset}/model.pt",
        metrics="results/face_embedding/{dataset}/metrics.json",
    wildcard_constraints:
        dataset=_alt(PUBLIC_FACE if FACE_CFG.get("source") == "public_classifier" else []),
    params:
        spec=lambda wc: dict(
            dataset_dir=dataset_dir(wc.dataset),
            architecture=FACE_CFG.get("architecture", "resnet18"),
            resolution=int(FACE_CFG["resolution"]),
            training=dict(FACE_CFG.get("training") or {}),
            augmentation=config["augmentation"],
            seed=int(FACE_CFG.get("seed", 0)),
            num_workers=int(config["training"].get("num_workers", 0)),
            resume_path=f"results/.resume/face_embedding/{wc.dataset}/resume.pt",
        ),
    log:
        "logs/face_embedding/{dataset}.log",
    benchmark:
        "benchmarks/face_embedding/{dataset}.tsv"
    # Critical path: every inversion job waits for this one, so it starts as soon as its
    # input exists instead of after the training and AutoAttack jobs (issue 16).
    priority: 50
    threads: 4
    resources:
        mem_mb=8000,
        runtime=4 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_face_embedding.py"
