"""AutoAttack of one trained model at one epsilon on the configured validation examples
(paper §4, App. F.3; spec §5): inputs in [0, 1], normalisation folded into the model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import torch

from atat import io
from atat.config import eps_tag
from atat.data.loading import make_loader
from atat.robustness import NormalizedModel, evaluate_autoattack
from atat.train import load_model

log = logging.getLogger(__name__)


def first_examples(dataset_root: str | Path, split: str, n: int, resolution: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` examples of a split, un-normalised in [0, 1], in manifest order."""
    loader = make_loader(dataset_root, split, resolution=resolution, batch_size=min(n, 256),
                         train=False, normalize=False)
    xs, ys, got = [], [], 0
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        got += len(y)
        if got >= n:
            break
    x, y = torch.cat(xs)[:n], torch.cat(ys)[:n]
    if len(y) < n:
        log.warning("split '%s' has only %d examples; AutoAttack runs on all of them (asked %d)",
                    split, len(y), n)
    return x, y


def run_autoattack(*, model_path: str | Path, dataset_root: str | Path, out_path: str | Path,
                   epsilon: float, settings: Mapping[str, Any], resolution: int,
                   device: str = "cpu") -> dict[str, Any]:
    model, defense, ckpt = load_model(model_path, device)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return defense.logits(self.inner, x)

    x, y = first_examples(dataset_root, settings["split"], settings["n_examples"], resolution)
    result = evaluate_autoattack(
        NormalizedModel(Logits()).eval(), x, y, epsilon=epsilon,
        attacks=tuple(settings["attacks"]), version=settings["version"],
        settings=settings.get("settings") or None, batch_size=settings["batch_size"],
        seed=settings["seed"], device=device)
    result.update(model_id=ckpt["model_id"], split=settings["split"],
                  epsilon_tag=eps_tag(epsilon), model_path=str(model_path))
    io.write_json(out_path, result)
    log.info("%s eps=%s robust accuracy %.4f (clean %.4f)", ckpt["model_id"], eps_tag(epsilon),
             result["robust_accuracy"], result["clean_accuracy"])
    return result
