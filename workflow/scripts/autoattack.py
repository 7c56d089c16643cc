"""Snakemake adapter: AutoAttack robust accuracy of one model at one epsilon."""

from _common import device, setup

setup(snakemake)  # noqa: F821

from atat.robustness import evaluate_autoattack_model_file  # noqa: E402

p = snakemake.params  # noqa: F821
evaluate_autoattack_model_file(
    model_path=snakemake.input.model, dataset_root=p.dataset_root,  # noqa: F821
    out_path=snakemake.output[0], epsilon=float(p.epsilon), settings=p.autoattack,  # noqa: F821
    resolution=p.resolution, device=device())
