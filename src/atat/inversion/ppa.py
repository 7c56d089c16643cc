"""Plug & Play Attack (PPA; docs/sources.md#attack-conventions, #ppa): candidate search,
Poincaré-loss optimisation of single latents per batch, final selection by mean target confidence
over random transforms, evaluation of the selected images.

Deviation for resumability (documented): the original draws every random transform from one
global torch stream; here the stream is re-seeded with ``seed + batch index`` at the start
of each optimisation batch (and with ``seed`` before the final selection), so a job resumed
after an interruption reproduces an uninterrupted run exactly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

from atat import io
from atat.precision import no_tf32
from atat.progress import track  # one log line per batch, with ETA

from .core import (
    ResultAccumulator,
    attack_transform,
    final_selection,
    identity_loss,
    initial_latents,
    optimize_w,
    render,
    seed_everything,
    target_classes,
)

log = logging.getLogger(__name__)

__all__ = ["run_ppa", "score_latents"]


@torch.no_grad()
def score_latents(G: nn.Module, w: torch.Tensor, targets: torch.Tensor, scorer: Callable,
                  acc: ResultAccumulator, batch_size: int) -> None:
    """Render ``w`` in batches and add the scorer's per-image results to ``acc``."""
    for i in range(0, len(w), batch_size):
        imgs = render(G, w[i:i + batch_size])
        t = targets[i:i + batch_size]
        acc.add(imgs, t, scorer(imgs, t))


def run_ppa(G: nn.Module, target_model: nn.Module, params: Mapping[str, Any], scorer: Callable,
            *, device: str | torch.device = "cpu", resume_dir: str | Path | None = None,
            progress: bool = True) -> dict[str, Any]:
    """Run PPA against ``target_model`` (inputs in [-1, 1] at ``params['input_resolution']``)
    with generator ``G``; ``params`` as returned by :func:`atat.config.inversion_params`.

    Returns ``frame`` (per-image scores of the final images), ``best_images`` (per class the
    image of highest evaluation confidence), ``final_w``/``targets`` (selected latents),
    ``avg_target_conf`` (mean target confidence at the last optimisation step over all
    candidates, per class then averaged: the replication's AvgTargetConf,
    docs/sources.md#attack-accuracy-and-confidence)."""
    device = torch.device(device)
    G = G.to(device).eval().requires_grad_(False)
    target_model = target_model.to(device).eval().requires_grad_(False)
    seed = int(params["seed"])
    res = int(params["input_resolution"])
    crop = params.get("center_crop")
    cand = params["candidates"]
    resume = Path(resume_dir) if resume_dir else None
    if resume:
        resume.mkdir(parents=True, exist_ok=True)

    with no_tf32():
        seed_everything(seed)
        classes = target_classes(params["targets"], int(params["n_classes"]),
                                 params.get("dataset_kind", ""), seed)
        per_cand = torch.tensor(classes).repeat_interleave(int(cand["num_candidates"]))
        w_init = initial_latents(G, target_model, per_cand, cand, center_crop=crop, resize=res,
                                 seed=seed, device=device,
                                 init_path=resume / "init_w.pt" if resume else None)
        log.info("PPA: %d classes x %d candidates, %d steps per batch", len(classes),
                 int(cand["num_candidates"]), int(params["steps"]))

        tf = attack_transform(crop, res, params["rrc_scale"], params["rrc_ratio"])
        loss_fn = identity_loss(params.get("loss", "poincare"))
        bs = int(params["batch_size"])
        batches = range(0, len(w_init), bs)
        w_opt, last_conf = [], []
        for b, start in enumerate(track(batches, "PPA batches", log=logging.getLogger(__name__),
                                        enabled=progress)):
            path = resume / f"batch{b:05d}.pt" if resume else None
            saved = io.load_resume(path) if path is not None else None  # corrupt: redone
            if saved is None:
                torch.manual_seed(seed + b)
                w, conf = optimize_w(
                    G, target_model, w_init[start:start + bs].to(device),
                    per_cand[start:start + bs].to(device), steps=int(params["steps"]),
                    lr=float(params["lr"]), betas=params["betas"], transform=tf, loss_fn=loss_fn,
                    lr_milestones=params.get("lr_milestones") or (),
                    lr_gamma=float(params.get("lr_gamma", 0.1)))
                saved = {"w": w.cpu(), "conf": conf.cpu()}
                if path is not None:
                    io.torch_save(saved, path)
            w_opt.append(saved["w"])
            last_conf.append(saved["conf"])
        w_opt_all = torch.cat(w_opt)
        conf_all = torch.cat(last_conf)

        fs = params["final_selection"]
        torch.manual_seed(seed)
        final_w, final_t, scores = final_selection(
            G, target_model, w_opt_all.to(device), per_cand.to(device),
            samples_per_target=int(fs["samples_per_target"]), iterations=int(fs["iterations"]),
            center_crop=crop, resize=res, rrc_scale=fs.get("rrc_scale", (0.5, 0.9)),
            rrc_ratio=fs.get("rrc_ratio", (0.8, 1.2)), flip=float(fs.get("flip", 0.5)),
            batch_size=max(bs * 10, 1))

        acc = ResultAccumulator(int(params["figure_resolution"]), crop)
        score_latents(G, final_w, final_t.cpu(), scorer, acc, bs)

    per_class = {int(c): float(conf_all[per_cand == c].mean()) for c in classes}
    return {
        "frame": acc.frame(),
        "best_images": acc.best_images(),
        "final_w": final_w.cpu(),
        "targets": final_t.cpu(),
        "selection_scores": scores.cpu(),
        "avg_target_conf": sum(per_class.values()) / len(per_class),
        "classes": classes,
        "note": (f"PPA: {len(classes)} classes, {int(cand['num_candidates'])} candidates per "
                 f"class from {int(cand['search_space_size'])} latents, {int(params['steps'])} "
                 f"steps, {params.get('loss', 'poincare')} loss, final selection keeps "
                 f"{int(fs['samples_per_target'])} per class"),
    }

