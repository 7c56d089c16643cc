"""Torch datasets, transforms and loaders over the manifest format (:mod:`atat.data.manifest`).

Transforms follow docs/sources.md#input-pipeline:

* train: ``Resize((H, W), antialias)`` -> ``RandomResizedCrop((H, W), scale=(0.85, 1.0),
  ratio=(1, 1), antialias)`` -> ``RandomHorizontalFlip(0.5)`` -> ``ColorJitter(brightness=0.2,
  contrast=0.2, saturation=0.1, hue=0.1)`` -> ``ToTensor`` -> ``Normalize(0.5, 0.5)``
  (inputs in [-1, 1]); each random step can be switched off through ``aug``;
* val / test: ``Resize((H, W))`` -> ``CenterCrop((H, W))`` (a no-op, kept for fidelity) ->
  ``ToTensor`` -> ``Normalize(0.5, 0.5)``;
* ``normalize=False`` drops ``Normalize`` (inputs in [0, 1], used for AutoAttack).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms as T

from atat.data.manifest import DEFAULT_CACHE_MAX_BYTES, DatasetFormatError, read_dataset

__all__ = [
    "DEFAULT_AUG",
    "DEFAULT_CACHE_MAX_BYTES",
    "ManifestDataset",
    "build_transform",
    "make_loader",
    "resolve_aug",
]

DEFAULT_AUG: dict[str, Any] = {
    "random_resized_crop": True,
    "rrc_scale": [0.85, 1.0],
    "horizontal_flip": True,
    "color_jitter": True,
    "jitter": {"brightness": 0.2, "contrast": 0.2, "saturation": 0.1, "hue": 0.1},
}


def resolve_aug(aug: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``aug`` over :data:`DEFAULT_AUG` (``jitter`` is merged key by key)."""
    out = copy.deepcopy(DEFAULT_AUG)
    if aug is None:
        return out
    unknown = set(aug) - set(DEFAULT_AUG)
    if unknown:
        raise ValueError(f"unknown augmentation key(s) {sorted(unknown)}; allowed: {sorted(DEFAULT_AUG)}")
    for k, v in aug.items():
        if k == "jitter":
            if v is None:
                continue
            bad = set(v) - set(DEFAULT_AUG["jitter"])
            if bad:
                raise ValueError(f"unknown jitter key(s) {sorted(bad)}; allowed: {sorted(DEFAULT_AUG['jitter'])}")
            out["jitter"].update({kk: float(vv) for kk, vv in v.items()})
        elif k == "rrc_scale":
            lo, hi = (float(x) for x in v)
            if not 0 < lo <= hi <= 1:
                raise ValueError(f"rrc_scale must satisfy 0 < lo <= hi <= 1, got {v}")
            out[k] = [lo, hi]
        else:
            out[k] = bool(v)
    return out


def _hw(resolution: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(resolution, int):
        return (resolution, resolution)
    h, w = (int(r) for r in resolution)
    return (h, w)


def build_transform(
    resolution: int | Sequence[int],
    train: bool,
    normalize: bool = True,
    aug: Mapping[str, Any] | None = None,
) -> T.Compose:
    """The transform of docs/sources.md#input-pipeline for ``resolution`` (int or ``(H, W)``); see
    module doc."""
    hw = _hw(resolution)
    steps: list[Callable] = [T.Resize(hw, antialias=True)]
    if train:
        a = resolve_aug(aug)
        if a["random_resized_crop"]:
            steps.append(T.RandomResizedCrop(hw, scale=tuple(a["rrc_scale"]), ratio=(1.0, 1.0), antialias=True))
        if a["horizontal_flip"]:
            steps.append(T.RandomHorizontalFlip(0.5))
        if a["color_jitter"]:
            steps.append(T.ColorJitter(**a["jitter"]))
    else:
        if aug is not None:
            resolve_aug(aug)  # validate keys; eval never augments
        steps.append(T.CenterCrop(hw))
    steps.append(T.ToTensor())
    if normalize:
        steps.append(T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
    return T.Compose(steps)


class ManifestDataset(Dataset):
    """Images of one split of a manifest-format dataset as ``(transform(RGB PIL), label)``.

    ``cache``: keep decoded RGB images in memory.  ``None`` (default) caches when the
    decoded images are estimated (from ``meta.resolution``, else from the first image) to
    need at most ``cache_max_bytes``.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str,
        transform: Callable | None = None,
        *,
        cache: bool | None = None,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        check_files: bool = True,
    ):
        self.root = Path(root)
        self.split = split
        self.transform = transform
        records, meta = read_dataset(self.root, split, check_files=check_files)
        self.records = records
        self.meta = meta
        self.paths: list[str] = records["path"].tolist()
        self.targets: list[int] = [int(x) for x in records["label"]]
        self.identities: list[str] = records["identity"].tolist()
        self.class_names: list[str] = list(meta["class_names"])
        self.n_classes: int = int(meta["n_classes"])
        if cache is None:
            cache = self._estimate_bytes() <= cache_max_bytes
        self.cache_enabled = bool(cache)
        self._cache: dict[int, Image.Image] = {}

    def _estimate_bytes(self) -> int:
        res = self.meta.get("resolution")
        if res:
            h, w = res
        elif self.paths:
            with Image.open(self.root / self.paths[0]) as im:
                w, h = im.size
        else:
            return 0
        return int(h) * int(w) * 3 * len(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def load_image(self, i: int) -> Image.Image:
        """Decoded RGB PIL image ``i`` (from the cache when enabled)."""
        if self.cache_enabled and i in self._cache:
            return self._cache[i]
        path = self.root / self.paths[i]
        try:
            with Image.open(path) as im:
                img = im.convert("RGB")
                img.load()
        except (OSError, ValueError) as e:
            raise DatasetFormatError(f"{path}: cannot read image ({e})") from e
        if self.cache_enabled:
            self._cache[i] = img
        return img

    def __getitem__(self, i: int) -> tuple[Any, int]:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        img = self.load_image(i)
        x = self.transform(img) if self.transform is not None else img
        return x, self.targets[i]

    def __repr__(self) -> str:
        return (f"ManifestDataset(root={str(self.root)!r}, split={self.split!r}, n={len(self)}, "
                f"n_classes={self.n_classes}, cache={self.cache_enabled})")


def make_loader(
    root: str | os.PathLike[str],
    split: str,
    *,
    resolution: int | Sequence[int],
    batch_size: int,
    train: bool,
    normalize: bool = True,
    aug: Mapping[str, Any] | None = None,
    shuffle: bool | None = None,
    drop_last: bool | None = None,
    num_workers: int = 0,
    generator: torch.Generator | None = None,
    limit: int | None = None,
    cache: bool | None = None,
    pin_memory: bool = False,
) -> DataLoader:
    """DataLoader over ``split`` of the dataset at ``root``.

    ``train`` selects the augmenting transform and the defaults ``shuffle=True,
    drop_last=True`` (eval: ``False, False``).  ``limit`` keeps only the first ``limit``
    samples of the split (manifest order).  The dataset is reachable as
    ``loader.dataset`` (a :class:`ManifestDataset`, or a ``Subset`` of one when ``limit``).
    """
    tf = build_transform(resolution, train=train, normalize=normalize, aug=aug)
    ds: Dataset = ManifestDataset(root, split, tf, cache=cache)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        ds = Subset(ds, list(range(min(int(limit), len(ds)))))
    if shuffle is None:
        shuffle = train
    if drop_last is None:
        drop_last = train
    return DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        generator=generator,
        pin_memory=pin_memory,
        persistent_workers=False,
    )
