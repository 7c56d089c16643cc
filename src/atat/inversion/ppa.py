"""Plug & Play Attack (PPA; docs/sources.md#attack-conventions, #ppa): candidate search,
Poincaré-loss optimisation of single latents per batch, final selection by mean target confidence
over random transforms, evaluation of the selected images.

Deviation for resumability (documented): the original draws every random transform from one
global torch stream; here the stream is re-seeded with ``seed + batch index`` at the start
of each optimisation batch (batches of the job's whole candidate list, whichever classes a
job attacks) and with ``seed + class`` before each class's final selection, so a job resumed
after an interruption reproduces an uninterrupted run exactly, and a job over a range of the
classes (:func:`ppa_classes`, atat.plan.config.inversion_shards) computes exactly what the job over
every class computes for them; :func:`merge_ppa` joins the ranges. Each class's final images
are scored in batches of that class only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

from atat.base import io
from atat.base.precision import attack_precision
from atat.base.progress import track  # one log line per batch, with ETA

from .core import (
    ResultAccumulator,
    attack_transform,
    final_selection,
    identity_loss,
    initial_latents,
    optimize_w,
    render,
    check_class_ranges,
    seed_everything,
    target_classes,
)

log = logging.getLogger(__name__)

__all__ = ["merge_ppa", "ppa_classes", "run_ppa", "score_latents"]


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
    with generator ``G``; ``params`` as returned by :func:`atat.plan.config.inversion_params`.

    Returns ``frame`` (per-image scores of the final images), ``best_images`` (per class the
    image of highest evaluation confidence), ``final_w``/``targets`` (selected latents),
    ``avg_target_conf`` (mean target confidence at the last optimisation step over all
    candidates, per class then averaged: the replication's AvgTargetConf,
    docs/sources.md#attack-accuracy-and-confidence). The same as :func:`merge_ppa` of
    :func:`ppa_classes` over every class."""
    return merge_ppa([ppa_classes(G, target_model, params, scorer, device=device,
                                  resume_dir=resume_dir, progress=progress)], params)


def ppa_classes(G: nn.Module, target_model: nn.Module, params: Mapping[str, Any],
                scorer: Callable, *, class_range: tuple[int, int] | None = None,
                device: str | torch.device = "cpu", resume_dir: str | Path | None = None,
                progress: bool = True) -> dict[str, Any]:
    """PPA on the classes at positions ``class_range = (start, stop)`` of the attack's class
    list (None: every class): the candidate search of the whole job, the optimisation
    batches of the whole candidate list that hold any of these classes' candidates (a batch
    shared with a neighbouring range is computed by both, each keeping its own candidates),
    the per-class final selection and scoring. A part for :func:`merge_ppa`."""
    device = torch.device(device)
    G = G.to(device).eval().requires_grad_(False)
    target_model = target_model.to(device).eval().requires_grad_(False)
    seed = int(params["seed"])
    res = int(params["input_resolution"])
    crop = params.get("center_crop")
    cand = params["candidates"]
    nc = int(cand["num_candidates"])
    resume = Path(resume_dir) if resume_dir else None
    if resume:
        resume.mkdir(parents=True, exist_ok=True)

    with attack_precision(str(params.get("precision", "fp32"))):
        seed_everything(seed)
        classes = target_classes(params["targets"], int(params["n_classes"]),
                                 params.get("dataset_kind", ""), seed)
        start, stop = (0, len(classes)) if class_range is None else map(int, class_range)
        if not 0 <= start < stop <= len(classes):
            raise ValueError(f"class range {class_range} is not within the attack's "
                             f"{len(classes)} classes")
        per_cand = torch.tensor(classes).repeat_interleave(nc)
        w_init = initial_latents(G, target_model, per_cand, cand, center_crop=crop, resize=res,
                                 seed=seed, device=device,
                                 init_path=resume / "init_w.pt" if resume else None)
        log.info("PPA: classes %d-%d of %d x %d candidates, %d steps per batch", start, stop,
                 len(classes), nc, int(params["steps"]))

        tf = attack_transform(crop, res, params["rrc_scale"], params["rrc_ratio"])
        loss_fn = identity_loss(params.get("loss", "poincare"))
        bs = int(params["batch_size"])
        lo, hi = start * nc, stop * nc                     # this range's candidates
        first, last = lo // bs, (hi - 1) // bs              # the batches that hold them
        w_opt, last_conf = [], []
        for b in track(range(first, last + 1), "PPA batches", log=logging.getLogger(__name__),
                       enabled=progress):
            a = b * bs
            path = resume / f"batch{b:05d}.pt" if resume else None
            saved = io.load_resume(path) if path is not None else None  # corrupt: redone
            if saved is None:
                torch.manual_seed(seed + b)
                w, conf = optimize_w(
                    G, target_model, w_init[a:a + bs].to(device),
                    per_cand[a:a + bs].to(device), steps=int(params["steps"]),
                    lr=float(params["lr"]), betas=params["betas"], transform=tf, loss_fn=loss_fn,
                    lr_milestones=params.get("lr_milestones") or (),
                    lr_gamma=float(params.get("lr_gamma", 0.1)))
                saved = {"w": w.cpu(), "conf": conf.cpu()}
                if path is not None:
                    io.torch_save(saved, path)
            keep = slice(max(lo - a, 0), min(hi - a, bs))
            w_opt.append(saved["w"][keep])
            last_conf.append(saved["conf"][keep])
        w_opt_all = torch.cat(w_opt)
        conf_all = torch.cat(last_conf)
        mine = per_cand[lo:hi]

        fs = params["final_selection"]
        final_w, final_t, scores = final_selection(
            G, target_model, w_opt_all.to(device), mine.to(device),
            samples_per_target=int(fs["samples_per_target"]), iterations=int(fs["iterations"]),
            center_crop=crop, resize=res, rrc_scale=fs.get("rrc_scale", (0.5, 0.9)),
            rrc_ratio=fs.get("rrc_ratio", (0.8, 1.2)), flip=float(fs.get("flip", 0.5)),
            batch_size=max(bs * 10, 1), class_seed=seed)

        acc = ResultAccumulator(int(params["figure_resolution"]), crop)
        final_t = final_t.cpu()
        for c in sorted(set(classes[start:stop])):  # batches of one class each
            idx = (final_t == c).nonzero().squeeze(1)
            score_latents(G, final_w[idx], final_t[idx], scorer, acc, bs)

    return {
        "attack": "ppa", "class_range": (start, stop), "classes": classes[start:stop],
        "class_conf": {int(c): float(conf_all[mine == c].mean()) for c in classes[start:stop]},
        "final_w": final_w.cpu(), "targets": final_t, "selection_scores": scores.cpu(),
        "rows": acc.rows, "best": acc.best,
    }


def merge_ppa(parts: list[Mapping[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """One PPA result from :func:`ppa_classes` parts whose class ranges tile the attack's
    class list: exactly what the job over every class returns."""
    classes = target_classes(params["targets"], int(params["n_classes"]),
                             params.get("dataset_kind", ""), int(params["seed"]))
    parts = check_class_ranges(parts, len(classes), "ppa")
    cand = params["candidates"]
    fs = params["final_selection"]
    t = torch.cat([p["targets"] for p in parts])
    order = torch.argsort(t, stable=True)   # classes ascending, as one job's final selection
    acc = ResultAccumulator(int(params["figure_resolution"]), params.get("center_crop"))
    acc.rows = sorted((r for p in parts for r in p["rows"]), key=lambda r: r["class"])
    acc.best = {int(c): v for p in parts for c, v in p["best"].items()}
    per_class = {int(c): v for p in parts for c, v in p["class_conf"].items()}
    per_class = {int(c): per_class[int(c)] for c in classes}
    return {
        "frame": acc.frame(),
        "best_images": acc.best_images(),
        "final_w": torch.cat([p["final_w"] for p in parts])[order],
        "targets": t[order],
        "selection_scores": torch.cat([p["selection_scores"] for p in parts])[order],
        "avg_target_conf": sum(per_class.values()) / len(per_class),
        "classes": classes,
        "note": (f"PPA: {len(classes)} classes, {int(cand['num_candidates'])} candidates per "
                 f"class from {int(cand['search_space_size'])} latents, {int(params['steps'])} "
                 f"steps, {params.get('loss', 'poincare')} loss, final selection keeps "
                 f"{int(fs['samples_per_target'])} per class"),
    }
