"""Perceptual feature networks for PPDG's projection and generator fine-tuning
(docs/sources.md#ppdg).

Every network implements :class:`PerceptualFeatures`:

* ``features(images)`` — images in [-1, 1], [N, 3, H, W] → flat features [N, D], scaled so that
  the squared Euclidean distance between two feature rows *is* the perceptual distance
  (``feature_distance``). PPDG's MMD / CT losses operate on these rows.
* ``distance(x, y)`` — per-sample perceptual distance [N] of two image batches.

Two implementations:

:class:`VGG16LPIPS`
    Our own LPIPS-VGG (version 0.1) network: torchvision's VGG-16 ``features`` (ImageNet
    weights from a local state-dict file, e.g. ``vgg16-397923af.pth``), five taps relu1_2,
    relu2_2, relu3_3, relu4_3, relu5_3; inputs in [-1, 1] are first mapped with LPIPS' scaling
    layer ``(x - shift) / scale`` (shift [-.030, -.088, -.188], scale [.458, .448, .450]); each tap
    is unit-normalised over channels (``f / (||f||_2 + 1e-10)``); the squared difference of the
    two normalised taps is weighted per channel by the non-negative LPIPS 1×1 linear weights
    (``lin{i}.model.1.weight`` of the LPIPS v0.1 ``vgg.pth`` file, shape [1, C, 1, 1]), averaged
    over space and summed over the five layers. ``features`` returns the concatenation over
    layers of ``normalised_tap · sqrt(w_c / (H·W))``, so ``||f(x) - f(y)||² == distance(x, y)``.

    **Choice (stated):** PPDG's projection step (``w_projector_lpips.py``) and its MMD/CT losses
    use NVIDIA's TorchScript ``metrics/vgg16.pt`` called with ``return_lpips=True`` on [0, 255]
    images — an LPIPS-VGG feature extractor. We do not load that TorchScript file; we replace it
    with this same LPIPS-VGG network (the one PPDG's point-wise generator fine-tuning uses via the
    ``lpips`` package), so projection and tuning share one perceptual metric.

:class:`EmbeddingFeatures`
    Wraps any network that returns an embedding (e.g. the demo's face-embedding network trained
    on the public pool): features = the flattened embedding, distance = squared L2.

:func:`build_perceptual` picks one by the config's ``perceptual`` value
(``"vgg16_lpips"`` or ``"public_embedding"``).
"""

from __future__ import annotations

import copy
import os
import re
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "EmbeddingFeatures",
    "LPIPS_SCALE",
    "LPIPS_SHIFT",
    "PerceptualFeatures",
    "VGG16LPIPS",
    "VGG16_TAPS",
    "build_perceptual",
    "feature_distance",
]

#: LPIPS v0.1 scaling layer constants (applied to [-1, 1] inputs).
LPIPS_SHIFT = (-0.030, -0.088, -0.188)
LPIPS_SCALE = (0.458, 0.448, 0.450)
#: torchvision ``vgg16().features`` index of the ReLU after relu1_2, relu2_2, relu3_3, relu4_3,
#: relu5_3 (the LPIPS taps) and the channel count there.
VGG16_TAPS = (3, 8, 15, 22, 29)
VGG16_CHANNELS = (64, 128, 256, 512, 512)
_EPS = 1e-10


def feature_distance(fx: torch.Tensor, fy: torch.Tensor) -> torch.Tensor:
    """Per-sample squared Euclidean distance of flat feature rows."""
    return (fx - fy).square().flatten(1).sum(dim=1)


class PerceptualFeatures(nn.Module, ABC):
    """Interface: ``features(images in [-1,1]) -> [N, D]`` and ``distance(x, y) -> [N]``."""

    @abstractmethod
    def features(self, images: torch.Tensor) -> torch.Tensor:
        ...

    @abstractmethod
    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ...

    def feature_distance(self, fx: torch.Tensor, fy: torch.Tensor) -> torch.Tensor:
        return feature_distance(fx, fy)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images)


def _load_state_dict(path: str | os.PathLike[str]) -> dict:
    from atat.base.io import DOWNLOAD_ADVICE, torch_load

    sd = torch_load(path, advice=DOWNLOAD_ADVICE)
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict):
        raise ValueError(f"{path}: not a state dict")
    return sd


def _vgg16_features() -> nn.Sequential:
    """torchvision's VGG-16 ``features`` module, randomly initialised (weights=None); built
    without the 100M-parameter classifier when torchvision's ``make_layers`` is available."""
    try:
        from torchvision.models.vgg import cfgs, make_layers

        return make_layers(cfgs["D"], batch_norm=False)
    except ImportError:  # pragma: no cover - older/newer torchvision layouts
        from torchvision.models import vgg16

        return vgg16(weights=None).features


class VGG16LPIPS(PerceptualFeatures):
    """LPIPS-VGG v0.1 (see module docstring). Frozen, eval mode.

    ``vgg_weights``: torchvision VGG-16 state-dict file (keys ``features.<i>.weight/bias``; a
    file holding only the ``features`` module's keys is accepted too). ``lpips_weights``: LPIPS
    v0.1 ``vgg.pth`` (keys ``lin{0..4}.model.1.weight``, shape [1, C, 1, 1], non-negative)."""

    def __init__(self, vgg_weights: str | os.PathLike[str],
                 lpips_weights: str | os.PathLike[str]):
        super().__init__()
        layers = _vgg16_features()[:VGG16_TAPS[-1] + 1]
        for i, m in enumerate(layers):
            if isinstance(m, nn.ReLU):
                layers[i] = nn.ReLU(inplace=False)
        sd = _load_state_dict(vgg_weights)
        feat = {k[len("features."):]: v for k, v in sd.items() if k.startswith("features.")}
        if not feat:
            feat = {k: v for k, v in sd.items() if re.fullmatch(r"\d+\.(weight|bias)", k)}
        feat = {k: v for k, v in feat.items() if int(k.split(".")[0]) <= VGG16_TAPS[-1]}
        layers.load_state_dict(feat, strict=True)
        self.vgg = layers

        lin = _load_state_dict(lpips_weights)
        weights = []
        for i, ch in enumerate(VGG16_CHANNELS):
            keys = [k for k in lin if re.fullmatch(rf"lin{i}\.model\.\d+\.weight", k)]
            if len(keys) != 1:
                raise KeyError(f"{lpips_weights}: expected one 'lin{i}.model.*.weight', got {keys}")
            w = lin[keys[0]].float()
            if tuple(w.shape) != (1, ch, 1, 1):
                raise ValueError(f"{keys[0]} has shape {tuple(w.shape)}, expected (1, {ch}, 1, 1)")
            if (w < 0).any():
                raise ValueError(f"{keys[0]}: LPIPS linear weights must be non-negative")
            weights.append(w.reshape(1, ch, 1, 1))
        for i, w in enumerate(weights):
            self.register_buffer(f"lin{i}", w)
        self.register_buffer("shift", torch.tensor(LPIPS_SHIFT).reshape(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor(LPIPS_SCALE).reshape(1, 3, 1, 1))
        self.eval().requires_grad_(False)

    def train(self, mode: bool = True):  # always frozen/eval
        return super().train(False)

    def lin_weights(self) -> list[torch.Tensor]:
        return [getattr(self, f"lin{i}") for i in range(len(VGG16_TAPS))]

    def taps(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Channel-normalised activations at the five LPIPS taps."""
        h = (images.float() - self.shift) / self.scale
        out = []
        for i, layer in enumerate(self.vgg):
            h = layer(h)
            if i in VGG16_TAPS:
                out.append(h / (h.square().sum(dim=1, keepdim=True).sqrt() + _EPS))
        return out

    def features(self, images: torch.Tensor) -> torch.Tensor:
        parts = []
        for f, w in zip(self.taps(images), self.lin_weights()):
            hw = f.shape[2] * f.shape[3]
            parts.append((f * (w / hw).sqrt()).flatten(1))
        return torch.cat(parts, dim=1)

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = 0
        for fx, fy, w in zip(self.taps(x), self.taps(y), self.lin_weights()):
            d = ((fx - fy).square() * w).sum(dim=1)  # 1×1 linear layer, no bias
            total = total + d.mean(dim=(1, 2))  # spatial average
        return total


class EmbeddingFeatures(PerceptualFeatures):
    """Any embedding network as a perceptual metric: features = flattened embedding of the
    (optionally center-cropped and resized) [-1, 1] images, distance = squared L2. The module is
    deep-copied, put in eval mode and frozen (the caller's network is not modified)."""

    def __init__(self, module: nn.Module, resolution: int | None = None,
                 center_crop: int | None = None):
        super().__init__()
        self.net = copy.deepcopy(module).eval().requires_grad_(False)
        self.resolution = resolution
        self.center_crop = center_crop

    def train(self, mode: bool = True):
        return super().train(False)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        from .core import preprocess

        return self.net(preprocess(images, self.center_crop, self.resolution)).flatten(1)

    def distance(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return feature_distance(self.features(x), self.features(y))


def build_perceptual(kind: str, **kwargs) -> PerceptualFeatures:
    """``"vgg16_lpips"``: ``VGG16LPIPS(vgg_weights=..., lpips_weights=...)``;
    ``"public_embedding"``: ``EmbeddingFeatures(module=..., resolution=None, center_crop=None)``."""
    if kind == "vgg16_lpips":
        return VGG16LPIPS(kwargs["vgg_weights"], kwargs["lpips_weights"])
    if kind == "public_embedding":
        return EmbeddingFeatures(kwargs["module"], resolution=kwargs.get("resolution"),
                                 center_crop=kwargs.get("center_crop"))
    raise ValueError(f"unknown perceptual network '{kind}' (known: vgg16_lpips, public_embedding)")
