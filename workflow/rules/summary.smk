# Stage 7: one tidy row per model.


rule summary:
    input:
        summary_inputs,
    output:
        "results/summary.csv",
    params:
        models=summary_models,
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
