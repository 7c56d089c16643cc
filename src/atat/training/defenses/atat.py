"""AT-AT, anti-adversarial training (paper §5; docs/sources.md#adversarial-training).

Per batch: targets t != y drawn uniformly; x_adv = targeted PGD towards t (in train mode,
[-1, 1] input space); loss = w_clean * CE_sum(f(x), y) + w_adv * CE_sum(f(x_adv), t), i.e. the
model is trained to *accept* the small targeted perturbation.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch.nn.functional as F
from torch import Tensor, nn

from atat.training.defense_defaults import ATAT_DEFAULTS
from atat.training.defenses.base import (Defense, DefenseConfigError, Param, StepContext, boolean,
                                input_perturbation, non_negative, positive_int)
from atat.training.pgd import pgd, sample_targets


def pgd_training_params(defaults: Mapping[str, Any]) -> dict[str, Param]:
    """The parameters of a PGD-training defense (AT-AT, vanilla AT) with ``defaults``, the
    defense's entry of :mod:`atat.training.defense_defaults` (their one home)."""
    return {
        "epsilon": Param(defaults["epsilon"], input_perturbation,
                         "L-inf radius in [-1, 1] input units, 0 < epsilon <= 2 (the whole "
                         "input range)"),
        "step_size": Param(defaults["step_size"], input_perturbation,
                           "PGD step in [-1, 1] input units, 0 < step_size <= epsilon"),
        "iterations": Param(defaults["iterations"], positive_int, "PGD steps, integer > 0"),
        "random_start": Param(defaults["random_start"], boolean, "boolean"),
        "weight_clean": Param(defaults["weight_clean"], non_negative,
                              "weight of CE on clean inputs, >= 0"),
        "weight_adv": Param(defaults["weight_adv"], non_negative,
                            "weight of CE on perturbed inputs, >= 0"),
    }


class AntiAdversarialTraining(Defense):
    type_name = "atat"
    targeted = True
    PARAMS = pgd_training_params(ATAT_DEFAULTS)

    @classmethod
    def resolve_params(cls, params: Mapping[str, Any], where: str = "defense") -> dict[str, Any]:
        out = super().resolve_params(params, where)
        if out["step_size"] > out["epsilon"]:
            raise DefenseConfigError(
                f"{where}.step_size: {out['step_size']!r} is larger than epsilon = "
                f"{out['epsilon']!r} (a PGD step beyond the radius is clipped back; use "
                "step_size <= epsilon)")
        if out["weight_clean"] + out["weight_adv"] <= 0:
            raise DefenseConfigError(f"{where}.weight_adv: weight_clean and weight_adv are both "
                                     "0, so the loss is 0 and nothing trains")
        return out

    def adversarial_labels(self, y: Tensor, ctx: StepContext) -> Tensor:
        return sample_targets(y, ctx.n_classes, ctx.generator)

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        p = self.params
        labels = self.adversarial_labels(y, ctx)
        x_adv = pgd(lambda z: self.logits(model, z), x, labels, epsilon=p["epsilon"],
                    step_size=p["step_size"], iterations=p["iterations"],
                    targeted=self.targeted, random_start=p["random_start"],
                    generator=ctx.generator)
        loss = x.new_zeros(())
        logs: dict[str, float] = {}
        if p["weight_clean"] > 0:
            clean = F.cross_entropy(self.logits(model, x), y, reduction="sum")
            loss = loss + p["weight_clean"] * clean
            logs["loss_clean"] = float(clean.detach()) / len(y)
        adv_logits = self.logits(model, x_adv)
        adv = F.cross_entropy(adv_logits, labels, reduction="sum")
        loss = loss + p["weight_adv"] * adv
        pred = adv_logits.argmax(1)
        success = (pred == labels) if self.targeted else (pred != y)
        logs["loss_adv"] = float(adv.detach()) / len(y)
        logs["attack_success"] = float(success.float().mean())
        return loss, logs
