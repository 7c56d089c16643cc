# Stage 5: paper tables (CSV + Markdown + LaTeX) and figures, from results/summary.csv only.


def table_targets():
    targets = ["results/summary.csv", "results/figures/robust_accuracy_vs_eps.png"]
    if table4_architecture():
        targets += expand("results/tables/table4.{ext}", ext=["csv", "md", "tex"])
    return targets


TARGET_FUNCTIONS.append(table_targets)


rule table4:
    input:
        summary="results/summary.csv",
    output:
        expand("results/tables/table4.{ext}", ext=["csv", "md", "tex"]),
    params:
        architecture=table4_architecture(),
        epsilons=config["autoattack"]["epsilons"],
    log:
        "logs/tables/table4.log",
    benchmark:
        "benchmarks/tables/table4.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/table4.py"


rule figure_robustness:
    input:
        summary="results/summary.csv",
    output:
        "results/figures/robust_accuracy_vs_eps.png",
    params:
        epsilons=config["autoattack"]["epsilons"],
    log:
        "logs/figures/robust_accuracy_vs_eps.log",
    benchmark:
        "benchmarks/figures/robust_accuracy_vs_eps.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/figure_robustness.py"
