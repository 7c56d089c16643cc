"""Vanilla (Madry) adversarial training (paper §5 "Classic Adversarial Training";
docs/sources.md#adversarial-training, REPO ``adversarial_train.yaml``).

Same machinery as AT-AT (:mod:`atat.training.defenses.atat`) with the REPO defaults of vanilla AT:
untargeted L-inf PGD against the model itself in train mode, eps 0.01, step 0.001,
10 iterations, random start, all in the normalised [-1, 1] input space; the loss is
``0 * CE_sum(f(x), y) + 1 * CE_sum(f(x_adv), y)`` - the adversarial loss uses the **true**
label (the clean forward pass is skipped when ``weight_clean`` is 0).
"""

from __future__ import annotations

from torch import Tensor

from atat.training.defense_defaults import AT_DEFAULTS
from atat.training.defenses.atat import AntiAdversarialTraining, pgd_training_params
from atat.training.defenses.base import StepContext


class AdversarialTraining(AntiAdversarialTraining):
    type_name = "at"
    targeted = False
    PARAMS = pgd_training_params(AT_DEFAULTS)

    def adversarial_labels(self, y: Tensor, ctx: StepContext) -> Tensor:
        return y
