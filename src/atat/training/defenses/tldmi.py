"""TL-DMI, transfer-learning defense against model inversion (paper App. A.1;
docs/sources.md#tl-dmi).

The first layers of the ImageNet-initialised feature extractor are frozen; only the later
layers and the head are fine-tuned on the private data. Rule (REPO ``defenses/tldmi.py`` =
TLDMI-O ``models/classify.py``): enumerate the *direct children* of the feature extractor in
order and disable gradients of every parameter of children ``0 ... freeze_layers``
**inclusive**; ``freeze_layers = 0`` is special-cased to freeze the *whole* feature extractor.

* ResNet children: 0 conv1, 1 bn1, 2 relu, 3 maxpool, 4 layer1, 5 layer2, 6 layer3, 7 layer4,
  8 avgpool, 9 fc (Identity). ``freeze_layers = 6`` (TL-DMI) trains layer4 + head (ResNet-18
  8,393,728 + head; ResNet-152 14,964,736 + head); ``5`` (TL-DMI-5) trains layer3 + layer4.
* DenseNet: the flat Sequential of docs/sources.md#architectures (conv0, norm0, relu0, pool0,
  denseblock1, transition1, denseblock2, ...). ``6`` trains transition2 ... norm5 (11,186,944) +
  head.

BatchNorm running statistics: the model stays in train mode, so frozen BatchNorm layers
*keep updating* their running mean/var (only gradients are disabled, docs/sources.md#tl-dmi),
exactly as in REPO and TLDMI-O. Only the parameters are frozen, not the buffers.

The frozen parameters are left out of the optimizer (``trainable_parameters``); REPO hands
them to Adam too, but they never have a gradient and weight decay is 0, so the update is the
same.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import nn

from atat.training.defenses.base import ARCHITECTURE_FACTS, Defense, DefenseConfigError, Param


def _non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def frozen_children(features: nn.Module, freeze_layers: int) -> list[str]:
    """Names of the feature-extractor children TL-DMI freezes (docs/sources.md#tl-dmi rule)."""
    names = [name for name, _ in features.named_children()]
    if freeze_layers == 0:
        return names
    return names[: freeze_layers + 1]


class TransferLearningDefense(Defense):
    type_name = "tldmi"
    PARAMS = {
        "freeze_layers": Param(6, _non_negative_int,
                               "index F of the last frozen child of the feature extractor, "
                               "integer >= 0 (children 0..F are frozen; 0 = whole feature "
                               "extractor); TL-DMI 6, TL-DMI-5 5"),
    }

    @classmethod
    def check_architecture(cls, params: Mapping[str, Any], architecture: str,
                           where: str = "defense") -> None:
        n = ARCHITECTURE_FACTS[architecture]["feature_children"]
        if params["freeze_layers"] >= n:
            raise DefenseConfigError(
                f"{where}.freeze_layers: {params['freeze_layers']} but the {architecture} "
                f"feature extractor has only {n} children (0..{n - 1})")

    def build_model(self, model: nn.Module) -> nn.Module:
        features = getattr(model, "features", None)
        if features is None:
            raise TypeError("TL-DMI needs a Classifier with a `features` module (atat.training.models)")
        n_children = len(list(features.children()))
        freeze = self.params["freeze_layers"]
        if freeze >= n_children:
            raise ValueError(f"TL-DMI freeze_layers={freeze} but the feature extractor has only "
                             f"{n_children} children")
        names = set(frozen_children(features, freeze))
        for name, child in features.named_children():
            if name in names:
                for p in child.parameters():
                    p.requires_grad_(False)
        self.frozen = sorted(names)
        return model

    @staticmethod
    def count_trainable(model: nn.Module) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)
