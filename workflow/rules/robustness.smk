# Stage 3: AutoAttack robust accuracy, one job per (model, epsilon). autoattack.precision
# (fp32: TF32 off; tf32: PyTorch's defaults as the authors' code ran) is recorded in each JSON;
# workflow/scripts/bench_gpu_precision.py measures one model under both on a GPU.


rule autoattack:
    input:
        model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
        dataset=lambda wc: dataset_dir(wc.dataset),
    output:
        "results/robustness/{dataset}/{arch}/{defense}/seed{seed}/eps{eps}.json",
    params:
        dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
        resolution=lambda wc: dataset_resolution(wc.dataset),
        epsilon=lambda wc: EPS[wc.eps],
        autoattack=config["autoattack"],
    log:
        "logs/autoattack/{dataset}/{arch}/{defense}/seed{seed}/eps{eps}.log",
    benchmark:
        "benchmarks/autoattack/{dataset}/{arch}/{defense}/seed{seed}/eps{eps}.tsv"
    threads: 4
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=12 * 60,
    conda:
        "../../envs/torch.yaml"
    script:
        "../scripts/autoattack.py"
