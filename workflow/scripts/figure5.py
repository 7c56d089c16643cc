"""Snakemake adapter: paper Figure 5 (PGD adversarial examples at each epsilon)."""

from _common import setup

setup(snakemake)  # noqa: F821

from atat.data.manifest import dataset_folder  # noqa: E402
import logging  # noqa: E402

from atat.analysis.figures import adversarial_examples_figure  # noqa: E402

sm = snakemake  # noqa: F821
info = adversarial_examples_figure(sm.input.model, f"{dataset_folder(sm.input.dataset)}/private",
                                   sm.params.epsilons, sm.output[0], seed=int(sm.params.seed))
log = logging.getLogger("figure5")
if not info["pool"]:  # the figure says so; the log too
    log.warning("Figure 5 not drawn: %s classifies none of %d test images correctly",
                info["model_id"], info["scanned"])
else:
    log.info("Figure 5: %d clean-correct test images attacked (of %d classified); rows %s; "
             "misclassified fraction per eps %s; max L-inf per eps %s", info["pool"],
             info["scanned"], info["shown"], info["flipped"], info["linf"])
