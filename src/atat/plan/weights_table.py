"""URLs of the torchvision ImageNet weight files the workflow can ask for, as a static table.

The DAG needs only the file names and URLs (``<resources_dir>/weights/torchvision/<file>``
and the download rule's URL); reading them from torchvision's weight enums would import
torch and torchvision (about 5 s) on every Snakemake start, dry runs included. This module
imports neither. ``tests/test_weights_table.py`` checks every entry against torchvision's
enums (and that each listed architecture has all of its enum members here), so a torchvision
upgrade that renames a file fails the test rather than the download.

Architectures: the target models (paper A.3: ResNet-18/152, DenseNet-169), the evaluation
model Inception-v3 (docs/sources.md#evaluation-model) and VGG16, the feature network of
VGG16-LPIPS (docs/sources.md#ppdg).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import urlsplit

_BASE = "https://download.pytorch.org/models"

#: architecture -> torchvision weight enum member name -> URL of the state dict file
TORCHVISION_WEIGHTS: dict[str, dict[str, str]] = {
    "resnet18": {"IMAGENET1K_V1": f"{_BASE}/resnet18-f37072fd.pth"},
    "resnet152": {"IMAGENET1K_V1": f"{_BASE}/resnet152-394f9c45.pth",
                  "IMAGENET1K_V2": f"{_BASE}/resnet152-f82ba261.pth"},
    "densenet169": {"IMAGENET1K_V1": f"{_BASE}/densenet169-b2777c0a.pth"},
    "inception_v3": {"IMAGENET1K_V1": f"{_BASE}/inception_v3_google-0cc3c7bd.pth"},
    "vgg16": {"IMAGENET1K_V1": f"{_BASE}/vgg16-397923af.pth",
              "IMAGENET1K_FEATURES": f"{_BASE}/vgg16_features-amdegroot-88682ab5.pth"},
}


def torchvision_weights_url(architecture: str, weights: str) -> str:
    """URL of torchvision's ``weights`` (an enum member name, e.g. IMAGENET1K_V1) of
    ``architecture``; a combination torchvision does not have is an error naming both."""
    try:
        table = TORCHVISION_WEIGHTS[architecture]
    except KeyError:
        raise ValueError(f"no torchvision ImageNet weights known for architecture "
                         f"'{architecture}' (known: {sorted(TORCHVISION_WEIGHTS)})") from None
    try:
        return table[weights]
    except KeyError:
        raise ValueError(f"architectures.{architecture}.weights: torchvision has no '{weights}' "
                         f"weights for {architecture} (it has: {sorted(table)})") from None


def torchvision_weights_filename(architecture: str, weights: str) -> str:
    """File name torchvision gives these weights (its hash prefix is checked on download)."""
    return PurePosixPath(urlsplit(torchvision_weights_url(architecture, weights)).path).name
