"""PPDG-MI: Pseudo-Private-Data-Guided model inversion, high-resolution (PPA-based) variant
(docs/sources.md#ppdg).

Per target class (ascending order) a fresh deep copy of the generator is attacked for
``num_rounds`` rounds. Each round: candidate search with the *current* generator
(docs/sources.md#candidate-search), PPA optimisation of the candidates (docs/sources.md#ppa), final
selection with RandomHorizontalFlip only (keep all, sorted by score, docs/sources.md#ppa, #ppdg),
evaluation of the round's images. Between rounds the top ``num_inv_points`` selected latents are
rendered at full resolution (pseudo-private data), projected back into W (:func:`project_pointwise`
/ :func:`project_joint`) and the generator is fine-tuned to move its pivot images toward the
pseudo-private data (:func:`tune_generator`). Reported results are those of the last round.

Replication details kept on purpose (docs/sources.md#ppdg):

* the projection runs on a frozen eval-mode copy of the generator; in point-wise mode that copy's
  ``noise_const`` buffers are re-drawn from N(0, 1) (the joint MMD/CT projection keeps them);
* fine-tuning leaves the generator in training mode, so the next round's candidate-search
  mapping call nudges ``w_avg`` once toward the batch mean (``w_avg_beta`` 0.995);
* the projection's learning rate peaks at 0.01 (the config's ``inv_learning_rate`` is unused);
  the fine-tuning's ExponentialLR is never stepped, i.e. a constant ``tune_lr``;
* the discriminator term ``0.1·softplus(-D(img))`` of the projection is skipped (and logged)
  when no discriminator is available.

Our choices (not fixed by the sources): the torch/random/numpy RNGs are re-seeded with
``seed + class`` at the start of every class, so each class's result does not depend on which
classes were attacked before it (this makes the per-class resume exact, and a job over a range
of the classes, :func:`ppdg_classes`, computes what the job over every class computes for
them; :func:`merge_ppdg` joins the ranges); the feature network is
:mod:`atat.inversion.perceptual` (LPIPS-VGG replaces NVIDIA's TorchScript ``vgg16.pt``); when the
discriminator's minibatch-stddev group does not divide the number of jointly projected images,
D is applied image by image.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.base.io import load_resume, torch_save
from atat.base.precision import attack_precision
from atat.base.progress import Progress
from atat.plan.inversion_defaults import PPDG_INV_STEPS, PPDG_TUNE_STEPS
from .core import (
    SCORE_COLUMNS,
    Lanes,
    ResultAccumulator,
    attack_transform,
    candidate_confidences,
    candidate_search,
    check_class_ranges,
    draws_random,
    final_selection,
    identity_loss,
    optimize_w,
    render,
    seed_everything,
    select_candidates,
    target_classes,
)
from .perceptual import PerceptualFeatures

__all__ = [
    "DEFAULT_INV_STEPS",
    "DEFAULT_TUNE_STEPS",
    "MEASURES",
    "ct_loss",
    "merge_ppdg",
    "mmd_loss",
    "ppdg_classes",
    "project_joint",
    "project_pointwise",
    "run_ppdg",
    "tune_generator",
]

MEASURES = ("pointwise", "mmd", "ct")
#: docs/sources.md#ppdg: steps overridden in code by measure (one copy, torch-free, shared
#: with the cost model: atat.plan.inversion_defaults)
DEFAULT_INV_STEPS = PPDG_INV_STEPS
DEFAULT_TUNE_STEPS = PPDG_TUNE_STEPS
#: VGG was built for 224 px: projector/MMD/CT features use images area-downsampled to 256.
FEATURE_RESOLUTION = 256
#: round_metrics keys (report.INVERSION_METRICS) ← per-image score columns.
METRIC_COLUMNS = {"attacc1": "correct_top1", "attacc5": "correct_top5", "evalconf": "evalconf",
                  "dist_face": "dist_face", "dist_eval": "dist_eval"}


# ------------------------------------------------------- distribution losses (docs/sources.md#ppdg)
def _pdist2(z: Tensor) -> Tensor:
    sq = z.square().sum(dim=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * z @ z.T
    return d2.clamp_min(0.0)


def mmd_loss(x: Tensor, y: Tensor, kernel_mul: float = 2.0, kernel_num: int = 5) -> Tensor:
    """Multi-bandwidth Gaussian MMD between the rows of ``x`` (n, synthetic) and ``y`` (m,
    pseudo-private). Bandwidth b = ΣD² / ((n+m)² - (n+m)) over the joint set (no gradient),
    divided by kernel_mul^(kernel_num//2); K = Σ_i exp(-D² / (b·kernel_mul^i));
    loss = mean K_XX - mean K_XY - mean K_YX + mean K_YY."""
    x, y = x.flatten(1), y.flatten(1)
    n, m = len(x), len(y)
    z = torch.cat([x, y])
    d2 = _pdist2(z)
    total = n + m
    bandwidth = d2.detach().sum() / (total * total - total)
    bandwidth = bandwidth / kernel_mul ** (kernel_num // 2)
    bandwidth = bandwidth.clamp_min(torch.finfo(d2.dtype).tiny)  # all points equal → D² = 0
    k = sum(torch.exp(-d2 / (bandwidth * kernel_mul ** i)) for i in range(kernel_num))
    return k[:n, :n].mean() - k[:n, n:].mean() - k[n:, :n].mean() + k[n:, n:].mean()


def ct_loss(x: Tensor, y: Tensor) -> Tensor:
    """Conditional transport between sources ``x`` (n, synthetic) and targets ``y`` (m):
    sim = Y·Xᵀ (m×n); forward plan s = softmax over targets i (per source j), backward plan
    t = softmax over sources j (per target i); cost = 1 - cos(Y_i, X_j);
    loss = 0.5·mean_j Σ_i cost·s + 0.5·mean_i Σ_j cost·t."""
    x, y = x.flatten(1), y.flatten(1)
    sim = y @ x.T
    s = sim.softmax(dim=0)
    t = sim.softmax(dim=1)
    cost = 1.0 - F.normalize(y, dim=1) @ F.normalize(x, dim=1).T
    return 0.5 * (cost * s).sum(dim=0).mean() + 0.5 * (cost * t).sum(dim=1).mean()


_MEASURE_LOSSES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"mmd": mmd_loss, "ct": ct_loss}


# ------------------------------------------------------------------ helpers
def _feature_input(images: Tensor) -> Tensor:
    """Projector input: area-downsample to 256×256 when larger (in [-1, 1]; the original's
    [0, 255] rescale commutes with the linear area filter)."""
    if images.shape[-1] > FEATURE_RESOLUTION:
        images = F.interpolate(images, size=(FEATURE_RESOLUTION, FEATURE_RESOLUTION),
                               mode="area")
    return images


def _frozen_copy(module: nn.Module | None) -> nn.Module | None:
    if module is None:
        return None
    return copy.deepcopy(module).eval().requires_grad_(False)


def _d_loss(D: nn.Module | None, images: Tensor) -> Tensor:
    """softplus(-D(img)).mean(); D image by image if its mbstd group does not divide N."""
    if D is None:
        return torch.zeros((), device=images.device)
    try:
        logits = D(images, None)
    except ValueError as err:
        if "mbstd" not in str(err):
            raise
        logits = torch.cat([D(images[i:i + 1], None) for i in range(len(images))])
    return F.softplus(-logits).mean()


@torch.no_grad()
def _w_stats(G: nn.Module, n: int, seed: int) -> tuple[Tensor, float]:
    """w_avg [1, 1, w_dim] and w_std = sqrt(Σ||w - w_avg||² / n) over n untruncated w's of
    z ~ RandomState(seed)."""
    device = next(G.parameters()).device
    z = torch.from_numpy(np.random.RandomState(seed).randn(n, G.z_dim)).float().to(device)
    w = G.mapping(z, None)[:, :1, :]
    w_avg = w.mean(dim=0, keepdim=True)
    w_std = float(((w - w_avg).square().sum() / n).sqrt())
    return w_avg, w_std


def _schedule(step: int, steps: int, lr: float, rampdown: float, rampup: float,
              noise_ramp: float, noise_factor: float, w_std: float) -> tuple[float, float]:
    t = step / steps
    ramp = min(1.0, (1.0 - t) / rampdown)
    ramp = 0.5 - 0.5 * math.cos(ramp * math.pi)
    ramp = ramp * min(1.0, t / rampup)
    noise_scale = w_std * noise_factor * max(0.0, 1.0 - t / noise_ramp) ** 2
    return lr * ramp, noise_scale


def _project(Gp: nn.Module, Dp: nn.Module | None, w_start: Tensor, w_std: float,
             loss_of: Callable[[Tensor], Tensor], *, steps: int, lr: float, noise_factor: float,
             lr_rampdown: float, lr_rampup: float, noise_ramp: float, d_weight: float) -> Tensor:
    w_opt = w_start.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([w_opt], betas=(0.9, 0.999), lr=lr)
    for step in range(steps):
        cur_lr, noise_scale = _schedule(step, steps, lr, lr_rampdown, lr_rampup, noise_ramp,
                                        noise_factor, w_std)
        for group in opt.param_groups:
            group["lr"] = cur_lr
        ws = w_opt + torch.randn_like(w_opt) * noise_scale
        imgs = render(Gp, ws)
        loss = loss_of(imgs)
        if Dp is not None and d_weight:
            loss = loss + d_weight * _d_loss(Dp, imgs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return w_opt.detach()


# ---------------------------------------------------------------- projection (docs/sources.md#ppdg)
def project_pointwise(G: nn.Module, D: nn.Module | None, images: Tensor,
                      perceptual: PerceptualFeatures, *, steps: int, w_stats_samples: int = 600,
                      seed: int = 123, lr: float = 0.01, noise_factor: float = 0.05,
                      lr_rampdown: float = 0.25, lr_rampup: float = 0.05,
                      noise_ramp: float = 0.75, d_weight: float = 0.1) -> Tensor:
    """Project every image (full resolution, [-1, 1]) separately into W, starting at w_avg:
    Adam(0.9, 0.999) with the cosine ramp-down / linear ramp-up lr schedule, latent noise
    w_std·0.05·max(0, 1-t/0.75)² per step, loss = perceptual feature distance to the image
    (features of 256 px area-downsampled images) + 0.1·softplus(-D(img)). The frozen copy's
    ``noise_const`` buffers are re-drawn from N(0, 1) for every image. Returns [n, 1, w_dim]."""
    Gp = _frozen_copy(G)
    Dp = _frozen_copy(D)
    w_avg, w_std = _w_stats(Gp, w_stats_samples, seed)
    noise_bufs = [b for name, b in Gp.synthesis.named_buffers() if "noise_const" in name]
    pivots = []
    for j in range(len(images)):
        with torch.no_grad():
            for buf in noise_bufs:
                buf.copy_(torch.randn_like(buf))
            target = perceptual.features(_feature_input(images[j:j + 1].float()))

        def loss_of(imgs, target=target):
            feats = perceptual.features(_feature_input(imgs))
            return perceptual.feature_distance(feats, target).sum()

        pivots.append(_project(Gp, Dp, w_avg, w_std, loss_of, steps=steps, lr=lr,
                               noise_factor=noise_factor, lr_rampdown=lr_rampdown,
                               lr_rampup=lr_rampup, noise_ramp=noise_ramp, d_weight=d_weight))
    return torch.cat(pivots)


def project_joint(G: nn.Module, D: nn.Module | None, images: Tensor,
                  perceptual: PerceptualFeatures, measure: str, *, steps: int,
                  w_stats_samples: int = 600, seed: int = 123, lr: float = 0.01,
                  noise_factor: float = 0.05, lr_rampdown: float = 0.25, lr_rampup: float = 0.05,
                  noise_ramp: float = 0.75, d_weight: float = 0.1) -> Tensor:
    """Joint projection of the set of images (MMD or CT between the synthetic and the
    pseudo-private feature sets): all n latents start at w_avg, same schedule, latent noise and
    D term as :func:`project_pointwise`; the copy keeps the generator's constant noise.
    Returns [n, 1, w_dim]."""
    if measure not in _MEASURE_LOSSES:
        raise ValueError(f"joint projection needs measure 'mmd' or 'ct', got {measure!r}")
    measure_fn = _MEASURE_LOSSES[measure]
    Gp = _frozen_copy(G)
    Dp = _frozen_copy(D)
    w_avg, w_std = _w_stats(Gp, w_stats_samples, seed)
    with torch.no_grad():
        target = perceptual.features(_feature_input(images.float()))

    def loss_of(imgs):
        return measure_fn(perceptual.features(_feature_input(imgs)), target)

    w_start = w_avg.repeat(len(images), 1, 1)
    return _project(Gp, Dp, w_start, w_std, loss_of, steps=steps, lr=lr,
                    noise_factor=noise_factor, lr_rampdown=lr_rampdown, lr_rampup=lr_rampup,
                    noise_ramp=noise_ramp, d_weight=d_weight)


# --------------------------------------------------------------- fine-tuning (docs/sources.md#ppdg)
def tune_generator(G: nn.Module, w_pivots: Tensor, images: Tensor,
                   perceptual: PerceptualFeatures, measure: str, *, steps: int,
                   lr: float) -> list[float]:
    """Fine-tune ``G`` in place so that its pivot images render(G, w_pivots) move toward the
    pseudo-private ``images``: mapping and synthesis parameters trainable (the mapping gets no
    gradient — the pivots are fixed w's), buffers untouched, Adam(lr, betas 0.9/0.999),
    ``G.train()``. Loss: pointwise → mean_j perceptual.distance(x_j, pp_j) at full resolution;
    mmd/ct → distribution loss between the 256 px feature sets. Afterwards all parameters are
    frozen again; G stays in training mode (docs/sources.md#ppdg). Returns the per-step losses."""
    if measure not in MEASURES:
        raise ValueError(f"unknown PPDG measure {measure!r} (known: {MEASURES})")
    w_pivots = w_pivots.detach()
    images = images.detach().float()
    G.requires_grad_(False)
    G.mapping.requires_grad_(True)
    G.synthesis.requires_grad_(True)
    opt = torch.optim.Adam([p for p in G.parameters() if p.requires_grad], lr=lr)
    G.train()
    target = None
    if measure != "pointwise":
        with torch.no_grad():
            target = perceptual.features(_feature_input(images))
    losses = []
    try:
        for _ in range(steps):
            x = render(G, w_pivots)
            if measure == "pointwise":
                loss = perceptual.distance(x, images).mean()
            else:
                loss = _MEASURE_LOSSES[measure](perceptual.features(_feature_input(x)), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        G.requires_grad_(False)
    return losses


# ------------------------------------------------------------------ attack driver
def _fingerprint(params: dict, perceptual: PerceptualFeatures, with_d: bool) -> str:
    blob = json.dumps({"params": params, "perceptual": type(perceptual).__name__,
                       "discriminator": with_d}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _class_file(resume_dir: Path, cls: int) -> Path:
    return resume_dir / f"class_{cls:05d}.pt"


def _per_class_metrics(scores: dict) -> dict[str, float]:
    out = {}
    for key, col in METRIC_COLUMNS.items():
        v = torch.as_tensor(scores[col]).detach().float().cpu()
        out[key] = float(v.mean()) if len(v) else float("nan")
    return out


def _mean_over_targets(values: list[float]) -> float:
    arr = np.asarray(values, dtype=float)
    finite = arr[~np.isnan(arr)]
    return float(finite.mean()) if len(finite) else float("nan")


def _attack_class(G: nn.Module, Dp: nn.Module | None, target_model: nn.Module, cls: int,
                  params: dict, scorer, perceptual: PerceptualFeatures, *, device,
                  measure: str, inv_steps: int, tune_steps: int, log,
                  round1: dict | None = None) -> dict:
    """One class, all rounds. ``round1``: its first round computed beforehand, with the
    untuned generator (:func:`_first_rounds`): the candidate search result ``w`` and, when
    optimised in lockstep with other classes, the optimised ``w_opt``."""
    cand = params["candidates"]
    center_crop = params.get("center_crop")
    resize = int(params["input_resolution"])
    batch_size = int(params["batch_size"])
    fs = params["final_selection"]
    num_rounds = int(params["num_rounds"])
    loss_fn = identity_loss(params.get("loss", "poincare"))
    transform = attack_transform(center_crop, resize, params["rrc_scale"], params["rrc_ratio"])

    Gc = copy.deepcopy(G).eval().requires_grad_(False).to(device)
    rounds = []
    acc = ResultAccumulator(int(params["figure_resolution"]), center_crop)
    final_w = final_t = None
    for r in range(num_rounds):
        last = r == num_rounds - 1
        pre = round1 if r == 0 and round1 is not None else {}
        # a. candidate search with the current generator
        per_cand = [cls] * int(cand["num_candidates"])
        w = pre["w"] if "w" in pre else candidate_search(Gc, target_model, per_cand,
                             search_space_size=int(cand["search_space_size"]),
                             center_crop=center_crop, resize=resize,
                             horizontal_flip=bool(cand.get("horizontal_flip", True)),
                             batch_size=int(cand.get("batch_size", 25)),
                             truncation_psi=float(cand.get("truncation_psi", 0.5)),
                             truncation_cutoff=cand.get("truncation_cutoff", 8),
                             seed=int(params["seed"]), device=device)[:, :1].detach()
        targets = torch.full((len(w),), cls, dtype=torch.long, device=device)
        # b. PPA optimisation
        outs = [pre["w_opt"]] if "w_opt" in pre else []
        for i in range(0, len(w) if not outs else 0, batch_size):
            w_b, _ = optimize_w(Gc, target_model, w[i:i + batch_size], targets[i:i + batch_size],
                                steps=int(params["steps"]), lr=float(params["lr"]),
                                betas=params["betas"], transform=transform, loss_fn=loss_fn)
            outs.append(w_b)
        w_opt = torch.cat(outs)
        # c. final selection: RandomHorizontalFlip only, keep samples_per_target, sorted
        final_w, final_t, sel_scores = final_selection(
            Gc, target_model, w_opt, targets,
            samples_per_target=int(fs["samples_per_target"]), iterations=int(fs["iterations"]),
            center_crop=center_crop, resize=resize, rrc_scale=None,
            flip=float(fs.get("flip", 0.5)), batch_size=batch_size * 10)
        # d. evaluate this round's images with the current generator
        cols: dict[str, list[Tensor]] = {c: [] for c in SCORE_COLUMNS}
        with torch.no_grad():
            for i in range(0, len(final_w), batch_size * 2):
                imgs = render(Gc, final_w[i:i + batch_size * 2])
                t_b = final_t[i:i + batch_size * 2]
                scores = scorer(imgs, t_b)
                for c in SCORE_COLUMNS:
                    cols[c].append(torch.as_tensor(scores[c]).detach().float().cpu())
                if last:
                    acc.add(imgs, t_b.cpu(), scores)
        metrics = _per_class_metrics({c: torch.cat(v) for c, v in cols.items()})
        rounds.append(metrics)
        log(f"[ppdg] class {cls} round {r + 1}/{num_rounds}: attacc1 {metrics['attacc1']:.3f} "
            f"evalconf {metrics['evalconf']:.3f} (selection score top "
            f"{float(sel_scores[0]) if len(sel_scores) else float('nan'):.3f})")
        if last:
            break
        # e. pseudo-private data: top num_inv_points selected latents at full resolution
        n_pp = int(params["num_inv_points"])
        with torch.no_grad():
            pp = render(Gc, final_w[:n_pp])
        # f. projection
        if measure == "pointwise":
            w_piv = project_pointwise(Gc, Dp, pp, perceptual, steps=inv_steps)
        else:
            w_piv = project_joint(Gc, Dp, pp, perceptual, measure, steps=inv_steps)
        # g. generator fine-tuning (G stays in train mode, docs/sources.md#ppdg)
        tl = tune_generator(Gc, w_piv, pp, perceptual, measure, steps=tune_steps,
                            lr=float(params["tune_lr"]))
        if tl:
            log(f"[ppdg] class {cls} round {r + 1}: tuned G ({tune_steps} steps, loss "
                f"{tl[0]:.4f} -> {tl[-1]:.4f})")
    best = acc.best_images().get(cls)
    return {"class": int(cls), "rows": acc.rows,
            "best": None if best is None else {"evalconf": float(best["evalconf"]),
                                               "image": best["image"]},
            "final_w": final_w.detach().cpu(), "final_targets": final_t.detach().cpu(),
            "round_metrics": rounds}


def _first_rounds(G0: nn.Module, target_model: nn.Module, classes: list[int], params: dict,
                  search: tuple[Tensor, Tensor], *, seed: int, lockstep: bool, device) -> dict:
    """Round 1 of ``classes`` before their later rounds: every class's candidates come from
    the job's one candidate search ``search`` (w_all, confidences) with the untuned generator
    ``G0`` — the search of every class's first round is the same — and, with ``lockstep``,
    the classes' optimisations run as one batch of :class:`Lanes`, each class with the
    random stream it has alone (``seed + class``). Returns per class ``w`` (searched) and,
    with ``lockstep``, ``w_opt`` and ``rng`` (its CPU torch stream after the optimisation)."""
    n = int(params["candidates"]["num_candidates"])
    out = {cls: {"w": select_candidates(*search, [cls] * n)[:, :1].detach()} for cls in classes}
    if not lockstep:
        return out
    states = []
    for cls in classes:
        torch.manual_seed(seed + cls)
        states.append(torch.get_rng_state())
    lanes = Lanes([n] * len(classes), states)
    transform = attack_transform(params.get("center_crop"), int(params["input_resolution"]),
                                 params["rrc_scale"], params["rrc_ratio"])
    w = torch.cat([out[cls]["w"] for cls in classes])
    targets = torch.tensor(classes, dtype=torch.long, device=device).repeat_interleave(n)
    w_opt, _ = optimize_w(G0, target_model, w, targets, steps=int(params["steps"]),
                          lr=float(params["lr"]), betas=params["betas"],
                          transform=lanes.transform(transform),
                          loss_fn=lanes.loss(identity_loss(params.get("loss", "poincare"))))
    for cls, w_c, state in zip(classes, lanes.split(w_opt), lanes.states):
        out[cls].update(w_opt=w_c, rng=state)
    return out


def run_ppdg(G: nn.Module, D: nn.Module | None, target_model: nn.Module, params: dict, scorer,
             perceptual: PerceptualFeatures, *, device: str | torch.device = "cpu",
             resume_dir: str | Path | None = None, progress: bool = True,
             log: Callable[[str], None] = print, share_search: bool = True,
             lockstep: bool = True) -> dict:
    """Run PPDG (docs/sources.md#ppdg) on every target class of ``params`` (from
    ``atat.plan.config.inversion_params(..., "ppdg")``). ``G``, ``D`` and ``target_model`` are not
    modified (deep copies). ``scorer(images, targets) -> {SCORE_COLUMNS: per-image tensors}``.

    Returns ``frame`` (per-image rows of the last round: class + SCORE_COLUMNS),
    ``best_images`` ({class: {evalconf, image uint8}}), ``round_metrics`` (per round: mean over
    targets of the per-target attacc1/attacc5/evalconf/dist_face/dist_eval, docs/sources.md#ppdg),
    ``final_w`` [N, 1, w_dim] and ``final_targets`` [N] of the last round, ``targets`` (attacked
    classes, ascending) and ``note``. With ``resume_dir`` every finished class is written
    atomically to ``class_<c>.pt`` and skipped on restart.

    Same work, less time (when the target model draws no random numbers at inference; MID's
    sampled bottleneck does, and then every class runs alone): ``share_search`` — the
    candidate search of round 1 (untuned generator, the same for every class) runs once per
    job and each class takes its top candidates from it (exact); ``lockstep`` — when a
    class's candidates fit in one batch, round 1's optimisations of several classes run as
    one batch of up to ``batch_size`` (:class:`Lanes`: each class keeps its own random
    stream and loss; equal up to float rounding). Later rounds use each class's own tuned
    generator and run one class at a time. The same as :func:`merge_ppdg` of
    :func:`ppdg_classes` over every class."""
    part = ppdg_classes(G, D, target_model, params, scorer, perceptual, device=device,
                        resume_dir=resume_dir, progress=progress, log=log,
                        share_search=share_search, lockstep=lockstep)
    return merge_ppdg([part], params)


def _ppdg_steps(params: dict) -> tuple[str, int, int, int]:
    measure = params["measure"]
    if measure not in MEASURES:
        raise ValueError(f"unknown PPDG measure {measure!r} (known: {MEASURES})")
    inv_steps = params.get("inv_steps")
    inv_steps = DEFAULT_INV_STEPS[measure] if inv_steps is None else int(inv_steps)
    tune_steps = params.get("tune_steps")
    tune_steps = DEFAULT_TUNE_STEPS[measure] if tune_steps is None else int(tune_steps)
    num_rounds = int(params["num_rounds"])
    if num_rounds < 1:
        raise ValueError("num_rounds must be >= 1")
    return measure, inv_steps, tune_steps, num_rounds


def _ppdg_classes_of(params: dict) -> list[int]:
    return sorted(set(target_classes(params["targets"], int(params["n_classes"]),
                                     params["dataset_kind"], seed=int(params["seed"]))))


def ppdg_classes(G: nn.Module, D: nn.Module | None, target_model: nn.Module, params: dict,
                 scorer, perceptual: PerceptualFeatures, *,
                 class_range: tuple[int, int] | None = None,
                 device: str | torch.device = "cpu", resume_dir: str | Path | None = None,
                 progress: bool = True, log: Callable[[str], None] = print,
                 share_search: bool = True, lockstep: bool = True) -> dict:
    """PPDG on the classes at positions ``class_range = (start, stop)`` of the attack's
    (ascending) class list; None: every class. Every class has its own random streams
    (``seed + class``); round 1's lockstep groups are those of the job over every class (a
    group shared with a neighbouring range is optimised whole by both, each keeping its own
    classes), so each class is computed as in that job. A part for :func:`merge_ppdg`."""
    measure, inv_steps, tune_steps, num_rounds = _ppdg_steps(params)
    with attack_precision(str(params.get("precision", "fp32"))):
        return _ppdg_classes(G, D, target_model, params, scorer, perceptual,
                             class_range=class_range, device=device, resume_dir=resume_dir,
                             progress=progress, log=log, share_search=share_search,
                             lockstep=lockstep, measure=measure, inv_steps=inv_steps,
                             tune_steps=tune_steps, num_rounds=num_rounds)


def _ppdg_classes(G, D, target_model, params, scorer, perceptual, *, class_range, device,
                  resume_dir, progress, log, share_search, lockstep, measure, inv_steps,
                  tune_steps, num_rounds) -> dict:
    seed = int(params["seed"])
    all_classes = _ppdg_classes_of(params)
    start, stop = (0, len(all_classes)) if class_range is None else map(int, class_range)
    if not 0 <= start < stop <= len(all_classes):
        raise ValueError(f"class range {class_range} is not within the attack's "
                         f"{len(all_classes)} classes")
    classes = all_classes[start:stop]
    say = log if progress else (lambda _msg: None)

    tm = _frozen_copy(target_model).to(device)
    Dp = _frozen_copy(D)
    if Dp is not None:
        Dp = Dp.to(device)
    elif num_rounds > 1:
        log("[ppdg] no discriminator: the projection's 0.1·softplus(-D(img)) term is skipped")
    perceptual = perceptual.to(device)

    fingerprint = _fingerprint(params, perceptual, Dp is not None)
    rdir = Path(resume_dir) if resume_dir is not None else None
    saved = {}
    for cls in classes:
        path = _class_file(rdir, cls) if rdir is not None else None
        res = load_resume(path) if path is not None else None  # corrupt: moved aside, redone
        if res is not None and res.get("fingerprint") != fingerprint:
            raise ValueError(f"{path} was written with different PPDG settings; "
                             "remove the resume directory to start over")
        saved[cls] = res
    pending = [cls for cls in classes if saved[cls] is None]
    res_px = int(params["input_resolution"])
    if (share_search or lockstep) and pending and draws_random(
            tm, torch.zeros(2, 3, res_px, res_px, device=device)):
        log("[ppdg] the target model draws random numbers at inference: every class runs "
            "alone (no shared candidate search, no lockstep)")
        share_search = lockstep = False
    n_cand = int(params["candidates"]["num_candidates"])
    lockstep = lockstep and n_cand <= int(params["batch_size"])
    group_size = max(1, int(params["batch_size"]) // n_cand) if lockstep else len(all_classes)
    # round 1's groups: consecutive classes of the whole job's list, less the classes of this
    # range already done (those of other ranges are optimised with the group and dropped)
    outside = set(all_classes) - set(classes)
    search = G0 = None
    first: dict[int, dict] = {}
    results = []
    classes_done = Progress(len(classes), "[ppdg] classes done", log=say)  # with ETA
    for k, cls in enumerate(classes):
        path = _class_file(rdir, cls) if rdir is not None else None
        if saved[cls] is not None:
            say(f"[ppdg] class {cls} ({k + 1}/{len(classes)}): resumed from {path}")
            results.append(saved[cls])
            classes_done.skip()
            continue
        if (share_search or lockstep) and cls not in first:
            if search is None:
                G0 = copy.deepcopy(G).eval().requires_grad_(False).to(device)
                cand = params["candidates"]
                search = candidate_confidences(
                    G0, tm, search_space_size=int(cand["search_space_size"]),
                    center_crop=params.get("center_crop"), resize=res_px,
                    horizontal_flip=bool(cand.get("horizontal_flip", True)),
                    batch_size=int(cand.get("batch_size", 25)),
                    truncation_psi=float(cand.get("truncation_psi", 0.5)),
                    truncation_cutoff=cand.get("truncation_cutoff", 8), seed=seed,
                    device=device)
            g = (start + k) // group_size * group_size
            group = [c for c in all_classes[g:g + group_size] if c in outside or c in pending]
            first.update(_first_rounds(G0, tm, group, params, search, seed=seed,
                                       lockstep=lockstep, device=device))
        say(f"[ppdg] class {cls} ({k + 1}/{len(classes)})")
        seed_everything(seed + cls)
        pre = first.pop(cls, None)
        if pre is not None and "rng" in pre:
            torch.set_rng_state(pre["rng"])  # its stream after its own round-1 optimisation
        res = _attack_class(G, Dp, tm, cls, params, scorer, perceptual, device=device,
                            measure=measure, inv_steps=inv_steps, tune_steps=tune_steps, log=say,
                            round1=pre)
        res["fingerprint"] = fingerprint
        if path is not None:
            torch_save(res, path)
        results.append(res)
        classes_done.step()
    return {"attack": "ppdg", "class_range": (start, stop), "classes": classes,
            "results": results, "discriminator": Dp is not None,
            "perceptual": type(perceptual).__name__}


def merge_ppdg(parts: list[dict], params: dict) -> dict:
    """One PPDG result (see :func:`run_ppdg`) from :func:`ppdg_classes` parts whose class
    ranges tile the attack's class list: exactly what the job over every class returns."""
    measure, inv_steps, tune_steps, num_rounds = _ppdg_steps(params)
    classes = _ppdg_classes_of(params)
    parts = check_class_ranges(parts, len(classes), "ppdg")
    results = [res for p in parts for res in p["results"]]
    with_d = parts[0]["discriminator"]
    acc = ResultAccumulator(int(params["figure_resolution"]), params.get("center_crop"))
    round_metrics = []
    for r in range(num_rounds):
        row = {"round": r + 1}
        for key in METRIC_COLUMNS:
            row[key] = _mean_over_targets([res["round_metrics"][r][key] for res in results])
        round_metrics.append(row)
    for res in results:
        acc.rows.extend(res["rows"])
        if res["best"] is not None:
            acc.best[int(res["class"])] = (float(res["best"]["evalconf"]), res["best"]["image"])
    final_w = torch.cat([res["final_w"] for res in results])
    final_t = torch.cat([res["final_targets"] for res in results])
    note = (f"PPDG measure={measure} rounds={num_rounds} steps={params['steps']} "
            f"inv_steps={inv_steps} tune_steps={tune_steps} "
            f"num_inv_points={params['num_inv_points']} tune_lr={params['tune_lr']} "
            f"perceptual={parts[0]['perceptual']} "
            f"D-term={'on' if with_d else 'off (no discriminator)'} "
            f"classes={len(classes)} precision={params.get('precision', 'fp32')}")
    return {"frame": acc.frame(), "best_images": acc.best_images(),
            "round_metrics": round_metrics, "final_w": final_w, "final_targets": final_t,
            "targets": classes, "note": note}
