# Stage 2: target models. One job per (dataset, architecture, defense, seed).
# Periodic resume checkpoints live under results/.resume/ (not declared, so Snakemake never
# deletes them when a job fails); a rerun continues from the last one.


rule train_model:
    input:
        unpack(train_inputs),
    output:
        model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
        metrics="results/models/{dataset}/{arch}/{defense}/seed{seed}/metrics.json",
        # per test image: label, two clean passes' predictions (atat.training.train)
        predictions="results/models/{dataset}/{arch}/{defense}/seed{seed}/test_predictions.csv",
    params:
        spec=train_spec,
        resume="results/.resume/{dataset}/{arch}/{defense}/seed{seed}/resume.pt",
    log:
        "logs/train/{dataset}/{arch}/{defense}/seed{seed}.log",
    benchmark:
        "benchmarks/train/{dataset}/{arch}/{defense}/seed{seed}.tsv"
    threads: 8
    resources:
        gpu=gpu_count("train_model"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("train_model"),
        gpu_model=gpu_card("train_model", "gpu_model"),
        constraint=gpu_card("train_model", "constraint"),
        mem_mb=32000,
        runtime=runtime_min("train_model"),  # the job's forecast (atat.plan.job_cost) x 1.5
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/train_model.py"
