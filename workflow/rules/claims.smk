# Stage 11 (issue 17): the paper's claims against this run, one row each with the run's 95%
# interval and a verdict, and how much the numbers move with the seed (atat.claims). Reads
# only the workflow's own outputs (summary, per-image table, regressions, cost of privacy,
# preconditions, dose-response, the claims cell's HSIC files: atat.paper.claims_inputs);
# built when the plan runs an inversion attack.


rule claims:
    input:
        unpack(claims_rule_inputs),
    output:
        report(
            "results/tables/claims.csv",
            caption="../report/claims.rst",
            category="The paper's claims",
            labels={"output": "table"},
        ),
        "results/tables/claims.md",
        report(
            "results/tables/seed_variation.csv",
            caption="../report/claims.rst",
            category="The paper's claims",
            labels={"output": "seed variation"},
        ),
        "results/tables/seed_variation.md",
    log:
        "logs/tables/claims.log",
    benchmark:
        "benchmarks/tables/claims.tsv"
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/claims.py"
