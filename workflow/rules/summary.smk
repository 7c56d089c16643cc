# Stage 7: one tidy row per model.

from atat.analysis.paper import evaluation_metrics_files  # noqa: E402


rule summary:
    input:
        summary_inputs,
        # the evaluation models' held-out accuracy: the rescaled AttAcc@1's ceiling
        evaluation=list(evaluation_metrics_files(PLAN).values()),
    output:
        "results/summary.csv",
    params:
        models=summary_models,
        attacks=SUMMARY_ATTACKS,
        evaluation=evaluation_metrics_files(PLAN),
    log:
        "logs/summary.log",
    benchmark:
        "benchmarks/summary.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/summary.py"


rule output_summary:
    # One output's summary: the rows and columns its table or figure reads, from only the
    # records of its models (atat.analysis.paper.summary_selection), so that rebuilding one table runs
    # the jobs of its models and no other (issue 43). Same function as rule summary.
    input:
        output_summary_inputs,
    output:
        output_summary_file("{entry}"),
    wildcard_constraints:
        entry=_alt(SUMMARY_SELECTIONS),
    params:
        models=output_summary_models,
        attacks=SUMMARY_ATTACKS,
    log:
        "logs/summaries/{entry}.log",
    benchmark:
        "benchmarks/summaries/{entry}.tsv"
    threads: 1
    resources:
        mem_mb=3000,  # each job imports torch (~1 GB per Snakemake process)
        runtime=10,
    conda:
        "../../envs/stats.yaml"
    script:
        "../scripts/summary.py"
