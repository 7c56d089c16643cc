"""Target architectures (paper A.4; docs/sources.md#architectures): torchvision ResNet-18/152 and
DenseNet-169 (and the demo's ResNet-10 and DenseNet-47), optionally initialised from a pretrained
weights file on disk, with the head replaced by a fresh Linear layer and the network split into
feature extractor + head.

A pretrained weights file is a state dict of the torchvision network (:func:`torchvision_network`):
torchvision's ImageNet files on the paper config, the miniature's own pretraining
(:mod:`atat.training.pretrain`, rule ``pretrain_backbone``) on the demo. Both load through
:func:`load_pretrained`, the one code path of ``training.pretrained: true``: every tensor but the
classification head must match; the head is replaced."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Mapping

import torch
import torchvision
from torch import Tensor, nn
from torchvision.models import (DenseNet169_Weights, ResNet18_Weights, ResNet152_Weights,
                                WeightsEnum)

from atat.base.io import DOWNLOAD_ADVICE, torch_load

def resnet10(weights: object = None, num_classes: int = 1000) -> torchvision.models.ResNet:
    """ResNet-10: torchvision's ResNet with one BasicBlock per stage ([1, 1, 1, 1]), the
    shallow second architecture of the demo's miniature grid (issue 17: the paper pairs a deep
    ResNet-152 with a shallow ResNet-18; at 32 px from scratch on CPU ResNet-152 costs ~9x
    ResNet-18 per training step, ResNet-10 ~0.5x). Same stem, stage widths (64-512) and
    512-d features as ResNet-18. torchvision publishes no ImageNet weights for it: pretrained
    only from the miniature's own pretraining (config ``pretraining``; atat.plan.config checks)."""
    if weights is not None:
        raise ValueError("resnet10 has no torchvision weights (pretrain it: config pretraining)")
    return torchvision.models.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1],
                                     num_classes=num_classes)


def densenet47(weights: object = None, num_classes: int = 1000) -> torchvision.models.DenseNet:
    """DenseNet-47: DenseNet-169's growth rate (32), initial width (64) and bottleneck (4) with
    its four dense blocks shortened from (6, 12, 32, 32) to (2, 3, 8, 8) layers, about a
    quarter each and the same proportions; 2 x 21 dense-layer convolutions + conv0 + 3
    transitions + the head = 47 layers. The demo's third architecture, in DenseNet-169's role
    (paper Table 24): same structure (dense blocks, transitions, the flat feature Sequential of
    docs/sources.md#architectures with 15 children, denseblock1-4 as the stages), 424-d features. At
    32 px, one thread, batch 64, an Adam step costs ~0.42x ResNet-18's and ~0.8x ResNet-10's
    (measured 2026-12-02), as DenseNet-169 sits between the paper's ResNet-152 and ResNet-18. No
    torchvision weights: pretrained only from the miniature's own pretraining (config
    ``pretraining``; atat.plan.config checks)."""
    if weights is not None:
        raise ValueError("densenet47 has no torchvision weights (pretrain it: config pretraining)")
    return torchvision.models.DenseNet(growth_rate=32, block_config=(2, 3, 8, 8),
                                       num_init_features=64, num_classes=num_classes)


ARCHITECTURES: dict[str, tuple[type[nn.Module] | object, type[WeightsEnum] | None]] = {
    "resnet18": (torchvision.models.resnet18, ResNet18_Weights),
    "resnet152": (torchvision.models.resnet152, ResNet152_Weights),
    "densenet169": (torchvision.models.densenet169, DenseNet169_Weights),
    "resnet10": (resnet10, None),   # no torchvision weights: the miniature's pretraining only
    "densenet47": (densenet47, None),   # no torchvision weights: the miniature's pretraining only
}

#: the evaluation model's network (atat.inversion.evaluation), pretrained like a target backbone
EVALUATION_ARCHITECTURE = "inception_v3"

#: state-dict prefixes of the classification heads of the torchvision networks: a pretrained
#: file's head of another size (a pretraining run's K-way head) is not loaded, the caller
#: replaces it (``fc``, ``classifier``) or keeps it freshly initialised (Inception-v3's
#: auxiliary ``AuxLogits.fc``, paper-config only)
HEAD_PREFIXES = ("fc.", "classifier.", "AuxLogits.fc.")


class Classifier(nn.Module):
    """forward(x) = head(features(x)); ``stages`` names the intermediate blocks (ResNet
    layer1-4, DenseNet denseblock1-4) used by BiDO and the HSIC measurement."""

    def __init__(self, features: nn.Module, head: nn.Linear, architecture: str) -> None:
        super().__init__()
        self.features = features
        self.head = head
        self.architecture = architecture

    @property
    def feature_dim(self) -> int:
        return self.head.in_features

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def stage_names(self) -> list[str]:
        if self.architecture.startswith("resnet"):
            return ["layer1", "layer2", "layer3", "layer4"]
        return [f"denseblock{i}" for i in range(1, 5)]

    def forward_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits and the outputs of the four intermediate stages (ResNet layer1-4, DenseNet
        denseblock1-4), as used by BiDO's loss and the HSIC measurement (docs/sources.md#bido,
        #hsic-measurement)."""
        wanted = set(self.stage_names())
        hidden: list[Tensor] = []
        if self.architecture.startswith("resnet"):
            net = self.features
            h = net.maxpool(net.relu(net.bn1(net.conv1(x))))
            for name in ("layer1", "layer2", "layer3", "layer4"):
                h = getattr(net, name)(h)
                hidden.append(h)
            h = torch.flatten(net.avgpool(h), 1)
        else:
            h = x
            for name, module in self.features.named_children():
                h = module(h)
                if name in wanted:
                    hidden.append(h)
        return self.head(h), hidden


# torchvision's published DenseNet files name the dense layers' modules 'norm.1', 'conv.2', ...
# (before '.' was disallowed in module names); torchvision renames them when it loads one
# (torchvision.models.densenet._load_state_dict), and so must a load from the file on disk.
_DENSENET_OLD_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def densenet_current_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A DenseNet state dict with the published files' old layer keys renamed to the
    current module names (``denselayer1.norm.1.weight`` -> ``denselayer1.norm1.weight``)."""
    return {(m.group(1) + m.group(2) if (m := _DENSENET_OLD_KEY.match(k)) else k): v
            for k, v in state.items()}


def torchvision_network(architecture: str, num_classes: int = 1000, *,
                        aux_logits: bool = False) -> nn.Module:
    """The randomly initialised torchvision network of ``architecture`` with a
    ``num_classes``-way head: what a pretrained weights file is the state dict of. Inception-v3
    (the evaluation model's network) as torchvision builds it for its ImageNet weights:
    ``transform_input=True`` (atat.inversion.evaluation), ``aux_logits`` as asked."""
    if architecture == EVALUATION_ARCHITECTURE:
        return torchvision.models.Inception3(num_classes=num_classes, aux_logits=aux_logits,
                                             transform_input=True, init_weights=True)
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture '{architecture}' (known: "
                         f"{sorted([*ARCHITECTURES, EVALUATION_ARCHITECTURE])})")
    return ARCHITECTURES[architecture][0](weights=None, num_classes=num_classes)  # type: ignore[operator]


def load_pretrained(net: nn.Module, weights_path: str | Path, *, what: str,
                    removed: tuple[str, ...] = ()) -> list[str]:
    """Load the pretrained weights file ``weights_path`` (a state dict of the torchvision
    network, :func:`torchvision_network`; never downloaded here) into ``net``, the one code
    path of ``pretrained: true`` for torchvision's ImageNet files and the miniature's own.
    Every tensor must match except the classification heads (:data:`HEAD_PREFIXES`): a head of
    another shape stays as initialised. Keys under ``removed`` (sub-networks the caller drops
    after loading, e.g. Inception-v3's auxiliary head) are neither loaded nor required.
    Returns the head keys not loaded."""
    path = Path(weights_path)
    if not path.is_file():
        raise FileNotFoundError(f"pretrained weights for {what} not found: {path}")
    state = torch_load(path, advice=DOWNLOAD_ADVICE)
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"{path}: not a state dict of tensors (a pretrained weights file of "
                         f"{what})")
    if isinstance(net, torchvision.models.DenseNet):
        state = densenet_current_keys(dict(state))
    own = net.state_dict()
    skipped = sorted(k for k, v in state.items() if k.startswith(HEAD_PREFIXES) and k in own
                     and own[k].shape != v.shape)
    state = {k: v for k, v in state.items()
             if k not in skipped and not (removed and k.startswith(removed))}
    try:
        result = net.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ValueError(f"{path}: does not fit {what}: {exc}") from None
    missing = [k for k in result.missing_keys
               if k not in skipped and not (removed and k.startswith(removed))]
    if missing or result.unexpected_keys:
        raise ValueError(f"{path}: does not fit {what}: missing {missing[:5]}, unexpected "
                         f"{list(result.unexpected_keys)[:5]}")
    return skipped


def build_model(architecture: str, n_classes: int, weights_path: str | Path | None = None
                ) -> Classifier:
    """Build a classifier. ``weights_path`` is a pretrained weights file on disk
    (:func:`load_pretrained`); ``None`` means random initialisation."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture '{architecture}' (known: {sorted(ARCHITECTURES)})")
    ctor, _ = ARCHITECTURES[architecture]
    net = ctor(weights=None)  # type: ignore[operator]
    if weights_path is not None:
        load_pretrained(net, weights_path, what=architecture)
    if architecture.startswith("resnet"):
        in_features = net.fc.in_features
        net.fc = nn.Identity()
        features: nn.Module = net
    else:
        in_features = net.classifier.in_features
        # docs/sources.md#architectures: a flat Sequential of the children of `features` + ReLU +
        # pooling + flatten (named, so the dense blocks keep their torchvision names)
        features = nn.Sequential(OrderedDict(
            [*net.features.named_children(), ("relu", nn.ReLU(inplace=False)),
             ("pool", nn.AdaptiveAvgPool2d((1, 1))), ("flatten", nn.Flatten(1))]))
    head = nn.Linear(in_features, n_classes)
    return Classifier(features, head, architecture)
