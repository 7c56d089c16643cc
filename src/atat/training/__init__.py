"""Target models: architectures, training loop, PGD, the HSIC estimator BiDO trains with, and every defense."""
