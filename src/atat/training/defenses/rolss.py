"""RoLSS and RoLSS-SSF: removal / scaling of the last-stage skip connections (paper App. A.1;
docs/sources.md#rolss; ROLSS-F ``models/torchvision/models/resnet.py``, identical to the official
Pillowkoh/RoLSS file).

Every residual block of the torchvision ResNet computes
``out = ReLU(residual_branch(x) + s * identity)``, identity = ``downsample(x)`` if the block
has a downsample else ``x``; with ``s == 0`` the identity/downsample path is omitted entirely
(the downsample module stays in the model, unused, so parameter names and shapes are those
of torchvision and ImageNet weights load unchanged).

* ``skip = [s1, s2, s3, s4]`` gives s per stage (layer1..layer4). RoLSS: [1, 1, 1, 0];
  RoLSS-SSF: [1, 1, 1, 0.2] (k = 0.2).
* ``layer3_split`` (default 0.8, as hard-coded in the official and forked model file): in
  layer3 the blocks with index >= ``max(1, int(layer3_split * n_blocks))`` get s = 0 whatever
  s3 is (ResNet-18: block 1 of 2; ResNet-152: blocks 28-35 of 36). Open question
  (docs/sources.md#rolss): it is unclear whether the RoLSS paper intends this; set ``layer3_split:
  1.0`` to build the textbook RoLSS (only stage 4 changed). (For n_blocks = 1 the official builder
  would append an extra block; we never add blocks - torchvision ResNets have >= 2 blocks per
  stage.)

Implementation: the blocks of the freshly built torchvision ResNet (after ImageNet weights
were loaded, docs/sources.md#architectures) are switched in place to subclasses with a ``skip``
attribute. The skip factor is a plain Python attribute (not a buffer), so ``state_dict`` keys are
exactly torchvision's. DenseNet RoLSS changes layer widths so ImageNet weights cannot load
(docs/sources.md#rolss; REPO marks it buggy); it is not implemented and raises.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor, nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

from atat.training.defenses.base import Defense, DefenseConfigError, Param


class SkipBasicBlock(BasicBlock):
    """torchvision BasicBlock whose identity path is multiplied by ``skip`` (0 = removed)."""

    skip: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.skip:
            identity = self.downsample(x) if self.downsample is not None else x
            out = out + self.skip * identity
        return self.relu(out)


class SkipBottleneck(Bottleneck):
    """torchvision Bottleneck whose identity path is multiplied by ``skip`` (0 = removed)."""

    skip: float = 1.0

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.skip:
            identity = self.downsample(x) if self.downsample is not None else x
            out = out + self.skip * identity
        return self.relu(out)


_SKIP_CLASS = {BasicBlock: SkipBasicBlock, Bottleneck: SkipBottleneck,
               SkipBasicBlock: SkipBasicBlock, SkipBottleneck: SkipBottleneck}


def set_block_skip(block: nn.Module, skip: float) -> None:
    """Turn a torchvision BasicBlock/Bottleneck (in place) into its skip-scaled version."""
    try:
        cls = _SKIP_CLASS[type(block)]
    except KeyError:
        raise TypeError(f"not a torchvision ResNet block: {type(block).__name__}") from None
    block.__class__ = cls
    block.skip = float(skip)


def stage_skips(n_blocks: int, s: float, split: float | None) -> list[float]:
    """Skip factor of each block of one stage; ``split`` applies the official layer3 rule."""
    if split is None:
        return [float(s)] * n_blocks
    first_removed = max(1, int(split * n_blocks))
    return [float(s) if i < first_removed else 0.0 for i in range(n_blocks)]


def apply_skips(net: ResNet, skip: list[float], layer3_split: float | None = 0.8) -> None:
    for stage, s in enumerate(skip, start=1):
        layer = getattr(net, f"layer{stage}")
        factors = stage_skips(len(layer), s, layer3_split if stage == 3 else None)
        for block, k in zip(layer, factors):
            set_block_skip(block, k)


def block_skips(net: nn.Module) -> dict[str, float]:
    """Name -> skip factor of every residual block (for logging and tests)."""
    return {name: float(getattr(m, "skip", 1.0)) for name, m in net.named_modules()
            if isinstance(m, (BasicBlock, Bottleneck))}


def _skip_list(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and len(v) == 4
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and 0 <= s <= 1
                    for s in v))


def _split(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1


class RemoveLastStageSkip(Defense):
    type_name = "rolss"
    PARAMS = {
        "skip": Param([1, 1, 1, 0], _skip_list,
                      "list of 4 skip factors in [0, 1] for layer1..layer4 (0 removes the "
                      "identity path, 1 keeps it, k in between scales it down)"),
        "layer3_split": Param(0.8, _split,
                              "official RoLSS rule: layer3 blocks with index >= "
                              "int(split * n_blocks) have no skip; in (0, 1], 1.0 disables it"),
    }

    @classmethod
    def check_architecture(cls, params: Mapping[str, Any], architecture: str,
                           where: str = "defense") -> None:
        if not architecture.startswith("resnet"):
            raise DefenseConfigError(
                f"{where}: {cls.type_name} is implemented for ResNets only, not '{architecture}' "
                "(DenseNet RoLSS changes layer widths, so ImageNet weights cannot load; "
                "docs/sources.md#rolss): remove it from that grid cell")

    def build_model(self, model: nn.Module) -> nn.Module:
        arch = getattr(model, "architecture", "")
        features = getattr(model, "features", None)
        if not isinstance(features, ResNet):
            raise ValueError(
                f"{self.type_name} is implemented for torchvision ResNets only, not '{arch}': "
                "DenseNet RoLSS changes layer widths, so ImageNet weights cannot be loaded "
                "(docs/sources.md#rolss)")
        apply_skips(features, list(self.params["skip"]), self.params["layer3_split"])
        return model


class RoLSSScaledSkip(RemoveLastStageSkip):
    """RoLSS-SSF: last-stage skip scaled by k = 0.2 instead of removed."""

    type_name = "rolss_ssf"
    PARAMS = {**RemoveLastStageSkip.PARAMS,
              "skip": Param([1, 1, 1, 0.2], _skip_list,
                            RemoveLastStageSkip.PARAMS["skip"].description)}
