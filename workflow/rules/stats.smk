# Stage 9: statistics of §4, §5 and App. G-I (regressions, cost of privacy, causal AT-AT
# experiment, main results with confidence intervals) and Figures 2 and 4.
#
# Every rule here needs model-inversion leakage columns in results/summary.csv
# ({attack}_attacc1, ..., attack in ppa/ifgmi/ppdg). They become targets of `all` only when
# the config configures the inversion attacks that produce them (config key
# `inversion: {attacks: [...]}`); otherwise they can still be requested by name, and the
# library functions behind them are unit-tested on simulated summaries. Which outputs the
# config can fit (atat.analysis.paper's predicates) and their specifications: atat.analysis.paper.


rule regressions:
    input:
        summary="results/summary.csv",
        specs=REGRESSIONS_YAML,
    output:
        report(
            "results/stats/regressions.csv",
            caption="../report/regressions.rst",
            # not "Statistics": the report's own runtime panel has that link target in docutils
            category="Regression fits",
            labels={"output": "all regression fits (tidy)"},
        ),
    params:
        statistics=config["statistics"],  # the samples the specs name (atat.analysis.stats.regression)
    log:
        "logs/stats/regressions.log",
    benchmark:
        "benchmarks/stats/regressions.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=20,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/regressions.py"


# Tables 5, 15-20, one rule each (named after the table; atat.analysis.paper.table_rules).
for _table in table_rules(PLAN, "regression_table"):

    rule:
        name:
            _table
        input:
            regressions="results/stats/regressions.csv",
        output:
            report(
                f"results/tables/{_table}.csv",
                caption="../report/regression_table.rst",
                category="Tables",
                subcategory="App. G regressions",
                labels={"table": table_number(_table)},
            ),
            f"results/tables/{_table}.md",
            f"results/tables/{_table}.tex",
        params:
            number=table_number(_table),
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
            "../scripts/regression_table.py"


rule cost_of_privacy:
    input:
        regressions="results/stats/regressions.csv",
    output:
        report(
            "results/stats/cost_of_privacy.csv",
            caption="../report/cost_of_privacy.rst",
            category="Regression fits",
            labels={"output": "cost of privacy"},
        ),
        "results/stats/cost_of_privacy.md",
    params:
        spec=(REGRESSIONS.get("cost_of_privacy") or {}).get("spec"),
        terms=(REGRESSIONS.get("cost_of_privacy") or {}).get("terms"),
    log:
        "logs/stats/cost_of_privacy.log",
    benchmark:
        "benchmarks/stats/cost_of_privacy.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/cost_of_privacy.py"


rule causal_tables:
    input:
        summary=output_summary_file("table21_22"),
        specs=REGRESSIONS_YAML,
    output:
        table21=[
            report(
                "results/tables/table21.csv",
                caption="../report/causal_tables.rst",
                category="Tables",
                subcategory="App. H causal AT-AT",
                labels={"table": "21"},
            ),
            "results/tables/table21.md",
            "results/tables/table21.tex",
        ],
        table22=[
            report(
                "results/tables/table22.csv",
                caption="../report/causal_tables.rst",
                category="Tables",
                subcategory="App. H causal AT-AT",
                labels={"table": "22"},
            ),
            "results/tables/table22.md",
            "results/tables/table22.tex",
        ],
    params:
        causal=config.get("causal"),  # the experiment's cell: its one home is the config
    log:
        "logs/tables/table21_22.log",
    benchmark:
        "benchmarks/tables/table21_22.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/causal_tables.py"


rule output_per_image:
    # The rows of the grid's per-image table (rule inversion_per_image) that one table or
    # Figure 4 reads: its models and attacks only (atat.analysis.paper.per_image_selection), so that
    # rebuilding it runs only their attacks (issue 43). Same function as inversion_per_image.
    input:
        output_per_image_inputs,
    output:
        output_per_image_file("{entry}"),
    wildcard_constraints:
        entry=_alt(PER_IMAGE_ENTRIES),
    log:
        "logs/summaries/{entry}.per_image.log",
    benchmark:
        "benchmarks/summaries/{entry}.per_image.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        "../../envs/torch.yaml"  # imports atat.inversion (facenet-pytorch)
    script:
        "../scripts/inversion_per_image.py"


# Tables 23-28, one rule each (named after the table; atat.analysis.paper.table_rules).
for _table in table_rules(PLAN, "main_results_table"):

    rule:
        name:
            _table
        input:
            # long table, one row per attacked image (columns: atat.analysis.tables.PER_IMAGE_COLUMNS +
            # evalconf, dist_face, dist_eval) of the table's models (rule output_per_image)
            per_image=output_per_image_file(_table),
            summary=output_summary_file(_table),
        output:
            report(
                f"results/tables/{_table}.csv",
                caption="../report/main_results_table.rst",
                category="Tables",
                subcategory="App. I.2 / I.3 main results",
                labels={"table": table_number(_table)},
            ),
            f"results/tables/{_table}.md",
            f"results/tables/{_table}.tex",
        params:
            number=table_number(_table),
        log:
            f"logs/tables/{_table}.log",
        benchmark:
            f"benchmarks/tables/{_table}.tsv"
        threads: 1
        resources:
            mem_mb=2000,
            runtime=10,
        conda:
            "../../envs/stats.yaml"
        script:
            "../scripts/main_results_table.py"


rule figure2:
    input:
        summary="results/summary.csv",
        specs=REGRESSIONS_YAML,
    output:
        report(
            "results/figures/figure2_observed_vs_predicted.png",
            caption="../report/figure2.rst",
            category="Figures",
            labels={"figure": "2"},
        ),
    params:
        spec=FIGURE2_SPEC,
        statistics=config["statistics"],
    log:
        "logs/figures/figure2.log",
    benchmark:
        "benchmarks/figures/figure2.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure2.py"


rule figure4:
    input:
        summary=output_summary_file("figure4"),
        # EvalConf's and the distances' 95% t intervals over per-class means (as Tables 27/28),
        # of its points' models only (rule output_per_image)
        per_image=output_per_image_file("figure4"),
    output:
        report(
            "results/figures/figure4_accuracy_vs_privacy.png",
            caption="../report/figure4.rst",
            category="Figures",
            labels={"figure": "4"},
        ),
    params:
        attacks=INV_ATTACKS or ["ppa", "ifgmi", "ppdg"],
        metrics=INVERSION_METRICS,
        architecture=main_architecture(config),
    log:
        "logs/figures/figure4.log",
    benchmark:
        "benchmarks/figures/figure4.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure4.py"
