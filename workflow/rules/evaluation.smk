# Stage 5: the networks that judge the inversion attacks (docs/sources.md#evaluation-model,
# #facenet-distance), one per attacked dataset: the Inception-v3 evaluation model trained on the
# private training split, and (embedded demo only, face_embedding.source = public_classifier) the
# classifier of the dataset's public pool: δ_face's embedding on a face population, and on any
# population the instrument of rule prior_quality. With source facenet the pretrained
# InceptionResnetV1 weights file is used directly (see face_network_file in common.smk).
# Both train through atat.training.train's loop and resume from results/.resume/{evaluation,
# face_embedding}/<dataset>/resume.pt (not declared, so Snakemake never deletes it).


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
        gpu=gpu_count("train_evaluation_model"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("train_evaluation_model"),
        gpu_model=gpu_card("train_evaluation_model", "gpu_model"),
        constraint=gpu_card("train_evaluation_model", "constraint"),
        mem_mb=32000,
        runtime=runtime_min("train_evaluation_model"),
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_evaluation_model.py"


rule train_face_embedding:
    input:
        unpack(face_embedding_inputs),
    output:
        model="results/face_embedding/{dataset}/model.pt",
        metrics="results/face_embedding/{dataset}/metrics.json",
    wildcard_constraints:
        # every synthetic dataset has a public pool to train it on (faces and dogs alike)
        dataset=_alt(SYNTH if FACE_CFG.get("source") == "public_classifier" else []),
    params:
        spec=lambda wc: face_embedding_spec(wc.dataset),
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


rule train_instrument_classifier:
    # The prior-quality instrument's further members (preconditions.prior_quality.classifiers,
    # atat.inversion.prior_quality): the public pool's classifier of rule train_face_embedding
    # retrained with another seed. Only rule prior_quality reads them; no attack does.
    input:
        unpack(face_embedding_inputs),
    output:
        model="results/face_embedding/{dataset}/seed{seed}/model.pt",
        metrics="results/face_embedding/{dataset}/seed{seed}/metrics.json",
    wildcard_constraints:
        dataset=_alt(SYNTH if FACE_CFG.get("source") == "public_classifier" else []),
        seed=r"\d+",
    params:
        spec=lambda wc: face_embedding_spec(wc.dataset, int(wc.seed)),
    log:
        "logs/face_embedding/{dataset}_seed{seed}.log",
    benchmark:
        "benchmarks/face_embedding/{dataset}_seed{seed}.tsv"
    threads: 4
    resources:
        mem_mb=8000,
        runtime=4 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_face_embedding.py"
