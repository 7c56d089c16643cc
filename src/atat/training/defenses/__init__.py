"""Registry of defense implementations, selected by the `type` of a config variant."""

from __future__ import annotations

from typing import Any, Mapping

from atat.training.defenses.atat import AntiAdversarialTraining
from atat.training.defenses.at import AdversarialTraining
from atat.training.defenses.bido import BiDO
from atat.training.defenses.mid import MutualInformationDefense
from atat.training.defenses.negls import NegativeLabelSmoothing
from atat.training.defenses.base import Defense, DefenseConfigError, ModelContext, StepContext
from atat.training.defenses.nodef import NoDefense
from atat.training.defenses.pixel_mask import PixelMaskDefense
from atat.training.defenses.rolss import RemoveLastStageSkip, RoLSSScaledSkip
from atat.training.defenses.tldmi import TransferLearningDefense
from atat.training.defenses.trap_mid import TrapMID

REGISTRY: dict[str, type[Defense]] = {
    cls.type_name: cls for cls in (NoDefense, AntiAdversarialTraining, MutualInformationDefense,
                                   BiDO, NegativeLabelSmoothing, TransferLearningDefense,
                                   RemoveLastStageSkip, RoLSSScaledSkip, AdversarialTraining,
                                   TrapMID, PixelMaskDefense)
}


def defense_class(type_name: str, where: str = "defense") -> type[Defense]:
    try:
        return REGISTRY[type_name]
    except KeyError:
        raise DefenseConfigError(
            f"{where}.type: unknown defense type '{type_name}' (known: {sorted(REGISTRY)})"
        ) from None


def build_defense(variant: Mapping[str, Any], n_classes: int, where: str = "defense",
                  context: ModelContext | None = None) -> Defense:
    cls = defense_class(variant["type"], where)
    cls.resolve_params(variant, where)  # raise with the key path before constructing
    return cls(variant, n_classes, context)


__all__ = ["REGISTRY", "Defense", "DefenseConfigError", "ModelContext", "StepContext", "build_defense",
           "defense_class"]
