"""Snakemake adapter: AutoAttack robust accuracy of one model at the job's epsilons (one, or
every epsilon of the config with autoattack.job per_model), one JSON per epsilon. Progress
(finished epsilons and batches) is kept under results/.resume/autoattack/<model>/ (not a
declared output, so a job killed by a time limit goes on where it stopped when rerun)."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.robustness import evaluate_autoattack_model_file  # noqa: E402

p = snakemake.params  # noqa: F821
w = snakemake.wildcards  # noqa: F821
evaluate_autoattack_model_file(
    model_path=snakemake.input.model, dataset_root=p.dataset_root,  # noqa: F821
    outputs=dict(zip(map(float, p.epsilons), snakemake.output)),  # noqa: F821
    settings=p.autoattack, resolution=p.resolution, device=device(),
    resume_dir=f"results/.resume/autoattack/{w.dataset}/{w.arch}/{w.defense}/seed{w.seed}",
    epsilon_factor=p.epsilon_factor)  # the attack runs at factor x eps (atat.plan.eps_scale)
