"""Tests for atat.inversion.perceptual (LPIPS-VGG and embedding feature networks)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from atat.inversion.perceptual import (
    LPIPS_SCALE,
    LPIPS_SHIFT,
    VGG16_CHANNELS,
    EmbeddingFeatures,
    PerceptualFeatures,
    VGG16LPIPS,
    build_perceptual,
)

# VGG-16 "D" configuration up to relu5_3: conv channel counts, "M" = 2x2 max-pool.
_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
_TAP_AFTER_CONV = {2, 4, 7, 10, 13}  # 1-based conv index whose ReLU is an LPIPS tap


@pytest.fixture(scope="module")
def weight_files(tmp_path_factory):
    """Random VGG-16 feature weights (torchvision key names) and random non-negative LPIPS
    linear weights, saved like the real files (no downloads)."""
    d = tmp_path_factory.mktemp("lpips")
    g = torch.Generator().manual_seed(0)
    vgg = {}
    idx, in_ch = 0, 3
    for v in _CFG:
        if v == "M":
            idx += 1
            continue
        std = (2.0 / (in_ch * 9)) ** 0.5
        vgg[f"features.{idx}.weight"] = torch.randn(v, in_ch, 3, 3, generator=g) * std
        vgg[f"features.{idx}.bias"] = torch.randn(v, generator=g) * 0.01
        idx += 2  # conv, relu
        in_ch = v
    vgg["classifier.0.weight"] = torch.zeros(2, 2)  # ignored extra keys as in the real file
    lin = {f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1, generator=g)
           for i, c in enumerate(VGG16_CHANNELS)}
    torch.save(vgg, d / "vgg16.pth")
    torch.save(lin, d / "vgg.pth")
    return d / "vgg16.pth", d / "vgg.pth", vgg, lin


@pytest.fixture(scope="module")
def lpips_net(weight_files):
    return VGG16LPIPS(weight_files[0], weight_files[1])


def _reference_lpips(x, y, vgg, lin):
    """Straightforward LPIPS v0.1 recomputation with functional ops."""
    shift = torch.tensor(LPIPS_SHIFT).view(1, 3, 1, 1)
    scale = torch.tensor(LPIPS_SCALE).view(1, 3, 1, 1)

    def taps(img):
        h = (img - shift) / scale
        out, idx, conv = [], 0, 0
        for v in _CFG:
            if v == "M":
                h = F.max_pool2d(h, 2)
                idx += 1
                continue
            h = F.relu(F.conv2d(h, vgg[f"features.{idx}.weight"], vgg[f"features.{idx}.bias"],
                                padding=1))
            idx += 2
            conv += 1
            if conv in _TAP_AFTER_CONV:
                out.append(h)
        return out

    total = torch.zeros(len(x))
    for i, (a, b) in enumerate(zip(taps(x), taps(y))):
        a = a / (a.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        b = b / (b.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        d = F.conv2d((a - b) ** 2, lin[f"lin{i}.model.1.weight"])  # 1x1, no bias
        total += d.mean(dim=(1, 2, 3))
    return total


def test_lpips_matches_reference(weight_files, lpips_net):
    _, _, vgg, lin = weight_files
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 3, 32, 32, generator=g) * 2 - 1
    y = torch.rand(3, 3, 32, 32, generator=g) * 2 - 1
    got = lpips_net.distance(x, y)
    ref = _reference_lpips(x, y, vgg, lin)
    assert got.shape == (3,)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)


def test_lpips_properties(lpips_net):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    y = torch.rand(2, 3, 32, 32, generator=g) * 2 - 1
    assert torch.all(lpips_net.distance(x, x) == 0)
    torch.testing.assert_close(lpips_net.distance(x, y), lpips_net.distance(y, x))
    assert torch.all(lpips_net.distance(x, y) > 0)
    # flat features: squared Euclidean distance of feature rows == LPIPS distance
    fx, fy = lpips_net.features(x), lpips_net.features(y)
    assert fx.ndim == 2 and fx.shape[0] == 2
    torch.testing.assert_close(lpips_net.feature_distance(fx, fy), lpips_net.distance(x, y),
                               rtol=1e-4, atol=1e-6)


def test_lpips_frozen_and_differentiable(lpips_net):
    assert not any(p.requires_grad for p in lpips_net.parameters())
    lpips_net.train()
    assert not lpips_net.training
    x = (torch.rand(1, 3, 32, 32) * 2 - 1).requires_grad_(True)
    y = torch.rand(1, 3, 32, 32) * 2 - 1
    lpips_net.distance(x, y).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_lpips_rejects_negative_or_misnamed_weights(tmp_path, weight_files):
    vgg_path, _, _, lin = weight_files
    bad = dict(lin)
    bad["lin2.model.1.weight"] = -bad["lin2.model.1.weight"]
    torch.save(bad, tmp_path / "neg.pth")
    with pytest.raises(ValueError, match="non-negative"):
        VGG16LPIPS(vgg_path, tmp_path / "neg.pth")
    missing = {k: v for k, v in lin.items() if not k.startswith("lin4")}
    torch.save(missing, tmp_path / "missing.pth")
    with pytest.raises(KeyError):
        VGG16LPIPS(vgg_path, tmp_path / "missing.pth")


def test_embedding_features():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(2), nn.Flatten())
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net.train()
    emb = EmbeddingFeatures(net, resolution=8)
    assert net.training and all(p.requires_grad for p in net.parameters())  # caller untouched
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    y = torch.rand(2, 3, 16, 16) * 2 - 1
    fx = emb.features(x)
    assert fx.shape == (2, 16)
    small = F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False, antialias=True)
    torch.testing.assert_close(fx, net.eval()(small))
    d = emb.distance(x, y)
    torch.testing.assert_close(d, ((emb.features(x) - emb.features(y)) ** 2).sum(1))
    assert torch.all(emb.distance(x, x) == 0)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_build_perceptual(weight_files):
    vgg_path, lin_path, _, _ = weight_files
    p = build_perceptual("vgg16_lpips", vgg_weights=vgg_path, lpips_weights=lin_path)
    assert isinstance(p, VGG16LPIPS) and isinstance(p, PerceptualFeatures)
    e = build_perceptual("public_embedding", module=nn.Flatten())
    assert isinstance(e, EmbeddingFeatures)
    with pytest.raises(ValueError):
        build_perceptual("alexnet")
