# Stage 3: AutoAttack robust accuracy of every model at each epsilon. autoattack.job decides the
# split (common.smk): per_epsilon (the paper config: one job per (model, epsilon), run side by
# side on a cluster) or per_model (the demo: one job writes every epsilon's file, loading the
# model, its examples and torch once). The files and their contents are the same either way.
# autoattack.precision (fp32: TF32 off; tf32: PyTorch's defaults as the authors' code ran) is
# recorded in each JSON; workflow/scripts/bench_gpu_precision.py measures one model under both.


rule autoattack:
    input:
        model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
        dataset=lambda wc: dataset_stamp(wc.dataset),
    output:
        AUTOATTACK_OUTPUT,
    params:
        dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
        resolution=lambda wc: dataset_resolution(wc.dataset),
        epsilons=autoattack_epsilons,
        autoattack=autoattack_settings,  # the model's budget (autoattack.overrides)
        epsilon_factor=epsilon_factor(config),  # run at factor x eps (atat.plan.eps_scale)
    log:
        f"logs/autoattack/{AUTOATTACK_JOB_NAME}.log",
    benchmark:
        f"benchmarks/autoattack/{AUTOATTACK_JOB_NAME}.tsv"
    threads: 4
    resources:
        gpu=gpu_count("autoattack"),  # 0 under device: cpu
        # the card that holds the job (atat.plan.gpu_memory; cluster settings' gpu_cards)
        gpu_mem_mb=gpu_mem_mb("autoattack"),
        gpu_model=gpu_card("autoattack", "gpu_model"),
        constraint=gpu_card("autoattack", "constraint"),
        mem_mb=16000,
        runtime=runtime_min("autoattack"),  # the job's forecast (atat.plan.job_cost) x 1.5
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/autoattack.py"
