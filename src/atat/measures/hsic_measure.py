"""HSIC measurement of a trained model (paper §3 Table 1, App. D Tables 8/9;
docs/sources.md#hsic-measurement); the tables are built by :func:`atat.analysis.tables.hsic_table` (selection
and captions: :mod:`atat.analysis.paper`).

Procedure (docs/sources.md#hsic-measurement, REPO ``utils/bido_metrics.py``):

* loader: the **train** split by default, with the training augmentation, shuffled,
  ``drop_last`` (the loader the model was trained on; batch size = the training batch size);
  other splits use the evaluation transform, unshuffled, also ``drop_last`` (a batch of one
  sample has no HSIC);
* model in eval mode (REPO: eval mode because the accuracy evaluation runs first), no gradient;
* layers: the four stage outputs of :meth:`atat.training.models.Classifier.forward_hidden` (ResNet
  layer1-4, DenseNet denseblock1-4; pixel-mask models apply their mask first);
* per batch and layer: HSIC(X, Z_l) = nHSIC(Z_l, X) and HSIC(Y, Z_l) = nHSIC(Z_l, one-hot Y)
  with the one estimator of :mod:`atat.training.hsic` (Gaussian σ=5 on Z and X, ``yz_ktype`` (linear)
  on Y), X = the normalised input batch as fed to the model, flattened; each value rounded to
  5 decimals (as REPO); reported per layer: the mean over batches of the rounded values; the
  raw per-batch values are kept in the output.

Deviation: the REPO measures DenseNet stage outputs only for BiDO models (other DenseNets: the
final pooled vector only, docs/sources.md#hsic-measurement); here every ResNet and DenseNet gets its
four stages, so rows of one table are comparable. The paper's HSIC tables are ResNet tables.

Precision: the measurement computes the kernels, their centring and inverse in ``dtype``,
float64 by default (config ``hsic.dtype``; recorded in the output and the tables' captions).
BiDO trains with the same estimator in float32 (:mod:`atat.training.hsic`), but as a measurement
float32 is not accurate enough: the inverse of the regularised kernel (ε = 1e-5) amplifies
rounding, and against a float64 reference the float32 values were off by a median 2e-3 and up to
6% relative (tests/test_hsic_measure.py checks both paths against an independent float64
reference on ill-conditioned inputs).

Tiny datasets: when the split holds fewer samples than one batch (test configs), the whole
split is one batch; ``batch_size_used`` records it (HSIC values depend on the batch size).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from atat.base import io
from atat.data.loading import make_loader
from atat.training.hsic import (EPS, SIGMA, nhsic_from_normalized, normalized_kernel, one_hot)

log = logging.getLogger(__name__)

DECIMALS = 5

#: the measurement's precisions (config ``hsic.dtype``); float64 is the default
DTYPES = {"float64": torch.float64, "float32": torch.float32}
DEFAULT_DTYPE = "float64"

__all__ = ["DECIMALS", "DEFAULT_DTYPE", "DTYPES", "batch_hsic", "measure_hsic",
           "measure_hsic_loader"]


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"hsic.dtype: '{name}' is not one of {list(DTYPES)}")
    return DTYPES[name]


def batch_hsic(model: nn.Module, x: Tensor, y: Tensor, n_classes: int, *,
               yz_ktype: str = "linear", dtype: str = DEFAULT_DTYPE
               ) -> tuple[list[float], list[float], Tensor]:
    """Unrounded (HSIC(X, Z_l) per layer, HSIC(Y, Z_l) per layer, logits) of one batch, the
    kernel maths in ``dtype`` (the model runs as it was trained; its activations are cast).

    Identical to calling :func:`atat.training.hsic.hsic_xz` / :func:`atat.training.hsic.hsic_yz` per layer; the
    normalised kernels of X and Y are computed once per batch instead of once per layer."""
    with torch.no_grad():
        logits, hidden = model.forward_hidden(x)
        dt = _dtype(dtype)
        r_x = normalized_kernel(x, "gaussian", dtype=dt)
        r_y = normalized_kernel(one_hot(y, n_classes), yz_ktype, dtype=dt)
        xz, yz = [], []
        for z in hidden:
            r_z = normalized_kernel(z, "gaussian", dtype=dt)
            xz.append(float(nhsic_from_normalized(r_z, r_x)))
            yz.append(float(nhsic_from_normalized(r_z, r_y)))
    return xz, yz, logits


def _layer_names(model: nn.Module, n: int) -> list[str]:
    names = model.stage_names() if hasattr(model, "stage_names") else []
    return list(names) if len(names) == n else [f"z{i + 1}" for i in range(n)]


def measure_hsic_loader(model: nn.Module, loader: Any, n_classes: int, device: torch.device, *,
                        n_batches: int | None = None, yz_ktype: str = "linear",
                        dtype: str = DEFAULT_DTYPE, progress: bool = False) -> dict[str, Any]:
    """Run the measurement of docs/sources.md#hsic-measurement over ``loader``; returns layers,
    per-layer means and the rounded raw per-batch values."""
    model.eval()
    raw_xz: list[list[float]] = []
    raw_yz: list[list[float]] = []
    correct = total = 0
    layers: list[str] | None = None
    from atat.base.progress import track  # one log line per batch, with ETA

    total = len(loader) if n_batches is None else min(len(loader), n_batches)
    for b, (x, y) in enumerate(track(loader, "HSIC batches", total=total, log=log, enabled=progress)):
        if n_batches is not None and b >= n_batches:
            break
        x, y = x.to(device), y.to(device)
        xz, yz, logits = batch_hsic(model, x, y, n_classes, yz_ktype=yz_ktype, dtype=dtype)
        if layers is None:
            layers = _layer_names(model, len(xz))
        raw_xz.append([round(v, DECIMALS) for v in xz])
        raw_yz.append([round(v, DECIMALS) for v in yz])
        correct += int((logits.argmax(1) == y).sum())
        total += len(y)
    if not raw_xz:
        raise ValueError("HSIC measurement saw no batch (empty split, or drop_last with fewer "
                         "samples than one batch)")
    assert layers is not None
    for vals in raw_xz + raw_yz:
        if not all(math.isfinite(v) for v in vals):
            raise FloatingPointError(f"non-finite HSIC value in {vals}")
    out: dict[str, Any] = {"layers": layers, "n_batches": len(raw_xz), "n_samples": total,
                           "accuracy": correct / total, "hsic_xz": {}, "hsic_yz": {},
                           "raw": {"hsic_xz": {}, "hsic_yz": {}}}
    for i, name in enumerate(layers):
        col_xz = [row[i] for row in raw_xz]
        col_yz = [row[i] for row in raw_yz]
        out["raw"]["hsic_xz"][name] = col_xz
        out["raw"]["hsic_yz"][name] = col_yz
        out["hsic_xz"][name] = float(np.mean(col_xz))
        out["hsic_yz"][name] = float(np.mean(col_yz))
    return out


def measure_hsic(model_path: str | Path, dataset_root: str | Path, resolution: int, *,
                 split: str = "train", batch_size: int = 128, n_batches: int | None = None,
                 device: str | torch.device = "cpu", aug: Mapping[str, Any] | None = None,
                 seed: int = 0, yz_ktype: str = "linear", dtype: str = DEFAULT_DTYPE,
                 num_workers: int = 0,
                 out_path: str | Path | None = None, meta: Mapping[str, Any] | None = None,
                 progress: bool = False) -> dict[str, Any]:
    """HSIC(X, Z_l) and HSIC(Y, Z_l) of a model checkpoint of :func:`atat.training.train.train`
    (docs/sources.md#hsic-measurement). ``aug``: the training augmentation (train split only;
    ``None`` = the docs/sources.md#input-pipeline default); ``seed`` seeds loader order and
    augmentation; ``n_batches`` caps the number of batches (``None`` = all). Writes JSON to
    ``out_path`` when given and returns the dict. ``dtype``: the kernel maths' precision
    (``float64`` default, ``float32`` as BiDO's training loss)."""
    _dtype(dtype)
    from atat.training.train import load_model

    device = torch.device(device)
    t0 = time.perf_counter()
    model, _, ckpt = load_model(model_path, device)
    n_classes = int(ckpt["n_classes"])
    torch.manual_seed(seed)  # augmentation draws from the global generator
    train = split == "train"
    probe = make_loader(dataset_root, split, resolution=resolution, batch_size=1, train=False)
    n_split = len(probe.dataset)
    bs = min(int(batch_size), n_split)
    if bs < batch_size:
        log.warning("split '%s' has %d samples < batch size %d: measuring on one batch of %d",
                    split, n_split, batch_size, bs)
    loader = make_loader(dataset_root, split, resolution=resolution, batch_size=bs, train=train,
                         aug=dict(aug) if (train and aug is not None) else None,
                         shuffle=train, drop_last=True, num_workers=num_workers,
                         generator=torch.Generator().manual_seed(seed))
    res = measure_hsic_loader(model, loader, n_classes, device, n_batches=n_batches,
                              yz_ktype=yz_ktype, dtype=dtype, progress=progress)
    result = {
        **dict(meta or {}),
        "model_id": ckpt.get("model_id"), "architecture": ckpt.get("architecture"),
        "defense": ckpt.get("defense"), "split": split, "augmented": train,
        "shuffled": train, "drop_last": True, "batch_size": int(batch_size),
        "batch_size_used": bs, "n_batches_requested": n_batches, "seed": seed,
        "model_mode": "eval",
        "estimator": {"name": "normalised-CCA HSIC (atat.training.hsic)", "sigma": SIGMA, "eps": EPS,
                      "yz_ktype": yz_ktype, "dtype": dtype, "decimals": DECIMALS},
        **res,
        "device": str(device), "seconds": time.perf_counter() - t0,
    }
    if out_path is not None:
        io.write_json(out_path, result)
    return result
