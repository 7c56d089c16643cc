"""The embedded default's image prior: a small StyleGAN2 trained on a dataset's public pool
(identities disjoint from the private pool), written as a StyleGAN2-ADA-style pickle that
the attacks load through the same safe loader as NVIDIA's ``ffhq.pkl``."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from atat.base import io

from .stylegan2 import train_small_generator

log = logging.getLogger(__name__)

#: Settings of ``generators.<name>.train`` and the keyword of train_small_generator they set.
_KEYS = ("steps", "batch_size", "z_dim", "w_dim", "mapping_layers", "channel_base",
         "channel_max", "lr", "r1_gamma", "seed")


def train_prior(dataset_dir: str | Path, out_path: str | Path, *, resolution: int,
                settings: Mapping[str, Any], device: str = "cpu") -> dict[str, Any]:
    """Train on ``<dataset_dir>/public`` and write the pickle atomically to ``out_path``;
    a JSON of the losses sits beside it (``<out_path>.json``)."""
    public = Path(dataset_dir) / "public"
    if not (public / "manifest.csv").exists():
        raise FileNotFoundError(f"{public}: no public pool (manifest.csv) to train a prior on")
    kwargs = {k: settings[k] for k in _KEYS if k in settings}
    start = time.time()
    every = max(1, int(kwargs.get("steps", 1000)) // 20)
    with io.atomic_path(out_path) as tmp:
        out = train_small_generator(public, resolution=resolution, split="public",
                                    device=device, out_path=tmp, log_every=every,
                                    log_fn=log.info, **kwargs)
    hist = out["history"]
    tail = max(1, len(hist["loss_G"]) // 10)
    record = {"settings": kwargs, "resolution": resolution, "seconds": time.time() - start,
              "final_loss_G": sum(hist["loss_G"][-tail:]) / tail,
              "final_loss_D": sum(hist["loss_D"][-tail:]) / tail,
              "parameters_G": sum(p.numel() for p in out["G_ema"].parameters())}
    io.write_json(f"{out_path}.json", record)
    log.info("prior trained in %.0f s: %s", record["seconds"], record)
    return record
