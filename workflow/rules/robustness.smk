# Stage 3: AutoAttack robust accuracy of every model at each epsilon. autoattack.job decides the
# split: per_epsilon (the paper config: one job per (model, epsilon), run side by side on a
# cluster) or per_model (the demo: one job writes every epsilon's file, loading the model, its
# examples and torch once). The files and their contents are the same either way.
# autoattack.precision (fp32: TF32 off; tf32: PyTorch's defaults as the authors' code ran) is
# recorded in each JSON; workflow/scripts/bench_gpu_precision.py measures one model under both.

if config["autoattack"].get("job", "per_epsilon") == "per_model":

    rule autoattack:
        input:
            model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
            dataset=lambda wc: dataset_dir(wc.dataset),
        output:
            [
                f"results/robustness/{{dataset}}/{{arch}}/{{defense}}/seed{{seed}}/eps{e}.json"
                for e in EPS
            ],
        params:
            dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
            resolution=lambda wc: dataset_resolution(wc.dataset),
            epsilons=list(EPS.values()),
            autoattack=config["autoattack"],
        log:
            "logs/autoattack/{dataset}/{arch}/{defense}/seed{seed}/all_eps.log",
        benchmark:
            "benchmarks/autoattack/{dataset}/{arch}/{defense}/seed{seed}/all_eps.tsv"
        threads: 4
        resources:
            gpu=1,
            mem_mb=16000,
            runtime=len(EPS) * 12 * 60,
        conda:
            "../../envs/torch.yaml"
        script:
            "../scripts/autoattack.py"

else:

    rule autoattack:
        input:
            model="results/models/{dataset}/{arch}/{defense}/seed{seed}/model.pt",
            dataset=lambda wc: dataset_dir(wc.dataset),
        output:
            "results/robustness/{dataset}/{arch}/{defense}/seed{seed}/eps{eps}.json",
        params:
            dataset_root=lambda wc: f"{dataset_dir(wc.dataset)}/private",
            resolution=lambda wc: dataset_resolution(wc.dataset),
            epsilons=lambda wc: [EPS[wc.eps]],
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
