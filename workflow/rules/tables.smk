# Stage 8: paper tables (CSV + Markdown + LaTeX) and figures, each from its own summary of the
# records it reads (results/summaries/<id>.csv, rule output_summary: atat.analysis.paper.summary_selection).
# Which tables this config builds and what goes into them: atat.analysis.paper (entries table4,
# table11-14, figure_robustness, figure5, preconditions).

ROBUSTNESS_TABLE_EPS = robustness_table_eps(config)  # Tables 11-14 (App. F.4): number -> eps


rule table4:
    input:
        summary=output_summary_file("table4"),
    output:
        report(
            "results/tables/table4.csv",
            caption="../report/table4.rst",
            category="Tables",
            subcategory="Main text",
            labels={"table": "4"},
        ),
        "results/tables/table4.md",
        "results/tables/table4.tex",
    params:
        architecture=table4_architecture(PLAN),
        epsilons=config["autoattack"]["epsilons"],
    log:
        "logs/tables/table4.log",
    benchmark:
        "benchmarks/tables/table4.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/table4.py"


rule preconditions:
    input:
        summary=output_summary_file("preconditions"),
        metrics=[f"{model_dir(r)}/metrics.json" for r in RUNS],
        priors=[prior_quality_path(g) for g in QUALITY_GENERATORS],  # rule prior_quality
        # each attacked dataset's evaluation model: its held-out accuracy
        evaluation=list(evaluation_metrics_files(PLAN).values()),
    output:
        report(
            "results/tables/preconditions.csv",
            caption="../report/preconditions.rst",
            category="Tables",
            subcategory="Preconditions",
            labels={"table": "preconditions"},
        ),
        "results/tables/preconditions.md",
    params:
        metrics={r.path: f"{model_dir(r)}/metrics.json" for r in RUNS},
        # the attacks' priors -> quality record, None where not measured (a reported row)
        priors={g: None if why else prior_quality_path(g) for g, why in INV_PRIORS.items()},
        evaluation=evaluation_metrics_files(PLAN),
    log:
        "logs/tables/preconditions.log",
    benchmark:
        "benchmarks/tables/preconditions.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/preconditions_table.py"


# Tables 11-14, one rule each (named after the table) for every tabulated epsilon the
# config runs (atat.analysis.paper.table_rules).
for _table in table_rules(PLAN, "robustness_table"):

    rule:
        name:
            _table
        input:
            summary=output_summary_file(_table),
        output:
            report(
                f"results/tables/{_table}.csv",
                caption="../report/robustness_table.rst",
                category="Tables",
                subcategory="App. F.4 AutoAttack",
                labels={"table": table_number(_table)},
            ),
            f"results/tables/{_table}.md",
            f"results/tables/{_table}.tex",
        params:
            number=table_number(_table),
            eps=ROBUSTNESS_TABLE_EPS[table_number(_table)],
        log:
            f"logs/tables/{_table}.log",
        benchmark:
            f"benchmarks/tables/{_table}.tsv"
        threads: 1
        resources:
            mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
            runtime=10,
        conda:
            "../../envs/stats.yaml"
        script:
            "../scripts/robustness_table.py"


rule figure_robustness:
    input:
        summary=output_summary_file("figure_robustness"),
    output:
        report(
            "results/figures/robust_accuracy_vs_eps.png",
            caption="../report/figure_robustness.rst",
            category="Figures",
            labels={"figure": "robust accuracy vs eps"},
        ),
    params:
        epsilons=config["autoattack"]["epsilons"],
    log:
        "logs/figures/robust_accuracy_vs_eps.log",
    benchmark:
        "benchmarks/figures/robust_accuracy_vs_eps.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure_robustness.py"


rule figure5:
    input:
        model=lambda wc: f"{model_dir(figure5_model_run())}/model.pt",
        dataset=lambda wc: dataset_stamp(figure5_model_run().dataset),
    output:
        report(
            "results/figures/figure5_adversarial_examples.png",
            caption="../report/figure5.rst",
            category="Figures",
            labels={"figure": "5"},
        ),
    params:
        epsilons=config["autoattack"]["epsilons"],
        seed=config["autoattack"]["seed"],  # order of the test images, PGD random start
    log:
        "logs/figures/figure5.log",
    benchmark:
        "benchmarks/figures/figure5.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure5.py"
