"""Target architectures (paper A.4; docs/sources.md#architectures): torchvision ResNet-18/152 and
DenseNet-169 (and the demo's shallow ResNet-10, from scratch only),
optionally initialised from ImageNet weights stored in a local file, with the 1000-way head
replaced by a fresh Linear layer and the network split into feature extractor + head."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

import torch
import torchvision
from torch import Tensor, nn
from torchvision.models import (DenseNet169_Weights, ResNet18_Weights, ResNet152_Weights,
                                WeightsEnum)

from atat.base.io import DOWNLOAD_ADVICE, torch_load

def resnet10(weights: object = None) -> torchvision.models.ResNet:
    """ResNet-10: torchvision's ResNet with one BasicBlock per stage ([1, 1, 1, 1]), the
    shallow second architecture of the demo's miniature grid (issue 17: the paper pairs a deep
    ResNet-152 with a shallow ResNet-18; at 32 px from scratch on CPU ResNet-152 costs ~9x
    ResNet-18 per training step, ResNet-10 ~0.5x). Same stem, stage widths (64-512) and
    512-d features as ResNet-18. torchvision publishes no ImageNet weights for it, so it is
    trained from scratch only (``training.pretrained: false``; atat.plan.config checks)."""
    if weights is not None:
        raise ValueError("resnet10 has no ImageNet weights (train it from scratch)")
    return torchvision.models.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1])


def densenet47(weights: object = None) -> torchvision.models.DenseNet:
    """DenseNet-47: DenseNet-169's growth rate (32), initial width (64) and bottleneck (4) with
    its four dense blocks shortened from (6, 12, 32, 32) to (2, 3, 8, 8) layers, about a
    quarter each and the same proportions; 2 x 21 dense-layer convolutions + conv0 + 3
    transitions + the head = 47 layers. The demo's third architecture, in DenseNet-169's role
    (paper Table 24): same structure (dense blocks, transitions, the flat feature Sequential of
    docs/sources.md#architectures with 15 children, denseblock1-4 as the stages), 424-d features. At
    32 px, one thread, batch 64, an Adam step costs ~0.42x ResNet-18's and ~0.8x ResNet-10's
    (measured 2026-12-02), as DenseNet-169 sits between the paper's ResNet-152 and ResNet-18. No
    ImageNet weights: from scratch only (``training.pretrained: false``; atat.plan.config checks)."""
    if weights is not None:
        raise ValueError("densenet47 has no ImageNet weights (train it from scratch)")
    return torchvision.models.DenseNet(growth_rate=32, block_config=(2, 3, 8, 8),
                                       num_init_features=64)


ARCHITECTURES: dict[str, tuple[type[nn.Module] | object, type[WeightsEnum] | None]] = {
    "resnet18": (torchvision.models.resnet18, ResNet18_Weights),
    "resnet152": (torchvision.models.resnet152, ResNet152_Weights),
    "densenet169": (torchvision.models.densenet169, DenseNet169_Weights),
    "resnet10": (resnet10, None),   # no ImageNet weights: from scratch only
    "densenet47": (densenet47, None),   # no ImageNet weights: from scratch only
}


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


def build_model(architecture: str, n_classes: int, weights_path: str | Path | None = None
                ) -> Classifier:
    """Build a classifier. ``weights_path`` is a torchvision ImageNet state dict on disk (never
    downloaded here); ``None`` means random initialisation."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture '{architecture}' (known: {sorted(ARCHITECTURES)})")
    ctor, weights_enum = ARCHITECTURES[architecture]
    net = ctor(weights=None)  # type: ignore[operator]
    if weights_path is not None and weights_enum is None:
        raise ValueError(f"{architecture} has no ImageNet weights (train it from scratch)")
    if weights_path is not None:
        path = Path(weights_path)
        if not path.is_file():
            raise FileNotFoundError(f"pretrained weights for {architecture} not found: {path}")
        state = torch_load(path, advice=DOWNLOAD_ADVICE)
        if architecture.startswith("densenet"):
            state = densenet_current_keys(state)
        net.load_state_dict(state)
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
