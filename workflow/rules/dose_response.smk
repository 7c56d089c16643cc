# Stage 10 (beyond the paper, issue 17): AT-AT's dose-response. The sweep's models are
# ordinary models of the DAG (train -> AutoAttack at every epsilon -> dose_response.attack;
# the generated variants come from atat.plan.config.dose_response_points via common.smk); this
# rule only reads its summary (results/summaries/dose_response.csv). Built when the config sets `dose_response`
# (atat.analysis.paper entry dose_response).


rule dose_response:
    input:
        summary=output_summary_file("dose_response"),
    output:
        report(
            "results/tables/dose_response.csv",
            caption="../report/dose_response.rst",
            category="Beyond the paper",
            subcategory="AT-AT dose-response",
            labels={"output": "table"},
        ),
        "results/tables/dose_response.md",
        report(
            "results/figures/dose_response.png",
            caption="../report/dose_response.rst",
            category="Beyond the paper",
            subcategory="AT-AT dose-response",
            labels={"output": "figure"},
        ),
    params:
        points=[
            dict(weight_adv=p.weight_adv, defense=p.defense, generated=p.generated)
            for p in dose_response_points(config)
        ],
        sweep=config.get("dose_response") or {},
        epsilons=config["autoattack"]["epsilons"],
    log:
        "logs/dose_response/dose_response.log",
    benchmark:
        "benchmarks/dose_response/dose_response.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/dose_response.py"
