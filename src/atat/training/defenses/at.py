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

from atat.training.defenses.atat import AntiAdversarialTraining
from atat.training.defense_defaults import AT_DEFAULTS
from atat.training.defenses.base import (Param, StepContext, boolean, input_perturbation, non_negative,
                                positive_int)


class AdversarialTraining(AntiAdversarialTraining):
    type_name = "at"
    targeted = False
    PARAMS = {
        "epsilon": Param(AT_DEFAULTS["epsilon"], input_perturbation,
                         "L-inf radius in [-1, 1] input units, 0 < epsilon <= 2"),
        "step_size": Param(AT_DEFAULTS["step_size"], input_perturbation,
                           "PGD step in [-1, 1] input units, 0 < step_size <= epsilon"),
        "iterations": Param(AT_DEFAULTS["iterations"], positive_int, "PGD steps, integer > 0"),
        "random_start": Param(AT_DEFAULTS["random_start"], boolean, "boolean"),
        "weight_clean": Param(AT_DEFAULTS["weight_clean"], non_negative,
                              "weight of CE on clean inputs, >= 0"),
        "weight_adv": Param(AT_DEFAULTS["weight_adv"], non_negative,
                            "weight of CE on perturbed inputs, >= 0"),
    }

    def adversarial_labels(self, y: Tensor, ctx: StepContext) -> Tensor:
        return y
