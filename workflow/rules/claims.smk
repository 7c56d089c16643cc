# Stage 11: the paper's claims against this run, each tested as the
# pre-registered analysis plan config/analysis/claims.yaml says (its sha256 in the table), with the
# run's interval, a verdict and the minimum detectable effect; and how much the numbers move
# with the seed (atat.analysis.claims). Reads only the workflow's own outputs (summary, per-image table,
# regressions, cost of privacy, preconditions, dose-response, the claims cell's HSIC files:
# atat.analysis.paper.claims_inputs); built when the plan runs an inversion attack.


from atat.analysis.claims import prediction_files as claims_prediction_files  # noqa: E402


rule claims:
    input:
        unpack(claims_rule_inputs),
        plan=CLAIMS_PLAN,  # the pre-registered analysis plan (config/analysis/claims.yaml)
        # the Beta fits the plan's bootstrap intervals refit (cost of privacy)
        regressions_spec=REGRESSIONS_YAML,
        # the per-test-image predictions of the models §6 compares (its paired accuracy test)
        test_predictions=lambda wildcards: claims_prediction_files(PLAN),
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
    params:
        # their times against the plan's: was the plan in place before any AttAcc was seen?
        records=claims_inversion_records,
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
