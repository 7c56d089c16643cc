"""Tests of transforms, ManifestDataset and make_loader (atat.data.loading)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from atat.data.loading import DEFAULT_AUG, ManifestDataset, build_transform, make_loader, resolve_aug
from atat.data.manifest import DatasetFormatError, assign_splits, write_dataset

N_CLASSES, PER_CLASS = 4, 10


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A small manifest dataset with non-square 40x48 colourful images."""
    r = tmp_path_factory.mktemp("loading") / "ds"
    r.mkdir()
    rng = np.random.RandomState(0)
    rows = []
    for c in range(N_CLASSES):
        for j in range(PER_CLASS):
            rel = f"{c}_{j}.png" if j % 2 else f"sub/{c}_{j}.jpg"
            (r / rel).parent.mkdir(exist_ok=True)
            Image.fromarray(rng.randint(0, 256, (40, 48, 3), dtype=np.uint8)).save(r / rel)
            rows.append((rel, c, f"k{c}"))
    df = pd.DataFrame(rows, columns=["path", "label", "identity"])
    df["split"] = assign_splits(len(df))
    write_dataset(r, df, {"name": "t", "class_names": [f"k{c}" for c in range(N_CLASSES)], "source": "test"})
    return r


@pytest.fixture
def img():
    rng = np.random.RandomState(1)
    return Image.fromarray(rng.randint(0, 256, (40, 48, 3), dtype=np.uint8))


# ------------------------------------------------------------------ transforms
def test_train_transform_range_and_shape(img):
    tf = build_transform(32, train=True)
    torch.manual_seed(0)
    xs = torch.stack([tf(img) for _ in range(8)])
    assert xs.shape == (8, 3, 32, 32) and xs.dtype == torch.float32
    assert xs.min() >= -1 and xs.max() <= 1 and xs.min() < -0.5  # [-1, 1], uses negative half
    assert not torch.equal(xs[0], xs[1])  # random augmentation
    tf01 = build_transform((24, 32), train=True, normalize=False)
    y = tf01(img)
    assert y.shape == (3, 24, 32) and y.min() >= 0 and y.max() <= 1


def test_train_transform_order_and_defaults():
    tf = build_transform(64, train=True)
    kinds = [type(t) for t in tf.transforms]
    assert kinds == [T.Resize, T.RandomResizedCrop, T.RandomHorizontalFlip, T.ColorJitter, T.ToTensor, T.Normalize]
    rrc, flip, cj = tf.transforms[1], tf.transforms[2], tf.transforms[3]
    assert rrc.size == (64, 64) and rrc.scale == (0.85, 1.0) and rrc.ratio == (1.0, 1.0)
    assert flip.p == 0.5
    assert cj.brightness == (0.8, 1.2) and cj.contrast == (0.8, 1.2) and cj.saturation == (0.9, 1.1)
    assert cj.hue == (-0.1, 0.1)
    assert tf.transforms[0].size == (64, 64)
    assert list(tf.transforms[-1].mean) == [0.5] * 3 and list(tf.transforms[-1].std) == [0.5] * 3


def test_aug_switches_and_jitter_override(img):
    tf = build_transform(32, train=True, aug={"jitter": {"contrast": 0.0}})
    cj = [t for t in tf.transforms if isinstance(t, T.ColorJitter)][0]
    assert cj.contrast is None and cj.brightness == (0.8, 1.2)  # other defaults kept
    off = build_transform(32, train=True, aug={"random_resized_crop": False, "horizontal_flip": False,
                                               "color_jitter": False})
    assert [type(t) for t in off.transforms] == [T.Resize, T.ToTensor, T.Normalize]
    assert torch.equal(off(img), build_transform(32, train=False)(img))
    tf = build_transform(32, train=True, aug={"rrc_scale": [0.5, 0.9]})
    assert tf.transforms[1].scale == (0.5, 0.9)
    with pytest.raises(ValueError, match="unknown augmentation"):
        build_transform(32, train=True, aug={"cutout": True})
    with pytest.raises(ValueError, match="unknown jitter"):
        build_transform(32, train=True, aug={"jitter": {"gamma": 0.1}})
    assert resolve_aug(None) == DEFAULT_AUG and resolve_aug(None) is not DEFAULT_AUG


def test_eval_transform_deterministic_and_exact(img):
    tf = build_transform(32, train=False)
    a, b = tf(img), tf(img)
    assert torch.equal(a, b) and a.shape == (3, 32, 32)
    ref = T.Normalize([0.5] * 3, [0.5] * 3)(T.ToTensor()(T.Resize((32, 32), antialias=True)(img)))
    assert torch.allclose(a, ref)
    raw = build_transform(32, train=False, normalize=False)(img)
    assert raw.min() >= 0 and raw.max() <= 1
    assert torch.allclose(raw * 2 - 1, a, atol=1e-6)


# ------------------------------------------------------------------ dataset
def test_manifest_dataset(root):
    ds = ManifestDataset(root, "train", build_transform(16, train=False))
    assert len(ds) == int(0.8 * int(0.9 * 40)) and ds.n_classes == N_CLASSES
    x, y = ds[0]
    assert x.shape == (3, 16, 16) and isinstance(y, int) and y == ds.targets[0]
    assert ds.cache_enabled  # small dataset -> cached by default
    assert torch.equal(ds[-1][0], ds[len(ds) - 1][0])
    nocache = ManifestDataset(root, "train", build_transform(16, train=False), cache=False)
    assert not nocache.cache_enabled
    assert all(torch.equal(ds[i][0], nocache[i][0]) for i in range(len(ds)))
    raw = ManifestDataset(root, "test")
    im, _ = raw[0]
    assert isinstance(im, Image.Image) and im.mode == "RGB" and im.size == (48, 40)
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ManifestDataset(root, "val", cache_max_bytes=0).cache_enabled is False


def test_manifest_dataset_errors(root, tmp_path):
    with pytest.raises(DatasetFormatError, match="unknown split"):
        ManifestDataset(root, "public-ish")
    with pytest.raises(DatasetFormatError, match="meta.json"):
        ManifestDataset(tmp_path, "train")


# ------------------------------------------------------------------ loaders
def test_make_loader_defaults(root):
    tl = make_loader(root, "train", resolution=16, batch_size=5, train=True)
    n = len(tl.dataset)
    assert tl.drop_last and isinstance(tl.sampler, torch.utils.data.RandomSampler)
    assert len(tl) == n // 5
    x, y = next(iter(tl))
    assert x.shape == (5, 3, 16, 16) and y.dtype == torch.int64
    assert -1 <= x.min() and x.max() <= 1
    el = make_loader(root, "test", resolution=16, batch_size=3, train=False, normalize=False)
    assert not el.drop_last and isinstance(el.sampler, torch.utils.data.SequentialSampler)
    ys = torch.cat([y for _, y in el])
    assert ys.tolist() == el.dataset.targets  # manifest order
    xs = torch.cat([x for x, _ in el])
    assert xs.min() >= 0 and xs.max() <= 1


def test_make_loader_generator_and_limit(root):
    def order(seed):
        g = torch.Generator().manual_seed(seed)
        tl = make_loader(root, "train", resolution=8, batch_size=4, train=True, generator=g,
                         aug={"color_jitter": False})
        return torch.cat([y for _, y in tl]).tolist()

    assert order(1) == order(1)
    lim = make_loader(root, "val", resolution=8, batch_size=2, train=False, limit=3)
    assert len(lim.dataset) == 3 and sum(len(y) for _, y in lim) == 3
    full = make_loader(root, "val", resolution=8, batch_size=2, train=False)
    assert [full.dataset[i][1] for i in range(3)] == [lim.dataset[i][1] for i in range(3)]
    shuf = make_loader(root, "val", resolution=8, batch_size=2, train=False, shuffle=True, drop_last=True)
    assert isinstance(shuf.sampler, torch.utils.data.RandomSampler) and shuf.drop_last
