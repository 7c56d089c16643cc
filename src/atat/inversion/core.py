"""Building blocks shared by PPA, IF-GMI and PPDG (docs/sources.md#attack-conventions).

Conventions (docs/sources.md#attack-conventions): generator images are float tensors in [-1, 1] fed
to the classifiers without further normalisation; a single latent ``w`` of shape [N, 1, w_dim] is
broadcast to all synthesis layers; synthesis runs with constant noise in float32; random transforms
on a 4-D batch draw ONE parameter set per call (torchvision semantics).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import v2 as T

from atat.base import io
# docs/sources.md#attack-conventions: torch, random and numpy seeded at attack start (one home:
# atat.training.train)
from atat.training.train import seed_everything

__all__ = [
    "LOSSES",
    "Lanes",
    "attack_transform",
    "broadcast_w",
    "candidate_confidences",
    "candidate_search",
    "check_class_ranges",
    "draws_random",
    "final_selection",
    "identity_loss",
    "initial_latents",
    "optimize_w",
    "pack_lanes",
    "poincare_loss",
    "preprocess",
    "render",
    "seed_everything",
    "select_candidates",
    "target_classes",
]


# ------------------------------------------------ identity losses (docs/sources.md#identity-losses)
def poincare_loss(logits: torch.Tensor, targets: torch.Tensor, xi: float = 1e-4) -> torch.Tensor:
    """Poincaré loss of PPA, mean over the batch. u = logits / ||logits||_1,
    v = clip(onehot - xi, 0, 1), loss = arccosh(1 + 2||u-v||² / ((1-||u||²)(1-||v||²)))."""
    u = logits / logits.abs().sum(dim=1, keepdim=True)
    v = (F.one_hot(targets, logits.shape[1]).to(logits.dtype) - xi).clamp(0, 1)
    num = 2 * (u - v).pow(2).sum(dim=1)
    den = (1 - u.pow(2).sum(dim=1)) * (1 - v.pow(2).sum(dim=1))
    return torch.acosh(1 + num / den).mean()


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, targets)


def _max_margin(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    real = logits.gather(1, targets[:, None]).squeeze(1)
    other = logits.masked_fill(F.one_hot(targets, logits.shape[1]).bool(), float("-inf"))
    return (-real + other.max(dim=1).values).mean()


def _logit(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """LOMMA's 'logit loss' (docs/sources.md#identity-losses): NLLLoss on raw logits = -mean target
    logit."""
    return -logits.gather(1, targets[:, None]).mean()


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "poincare": poincare_loss,
    "cross_entropy": _cross_entropy,
    "max_margin": _max_margin,
    "logit": _logit,
}


def identity_loss(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown inversion loss '{name}' (known: {sorted(LOSSES)})") from None


# -------------------------------------------------- target classes (docs/sources.md#target-classes)
def target_classes(targets: str | int | Sequence[int], n_classes: int, dataset_kind: str,
                   seed: int = 42, first_k: bool = False) -> list[int]:
    """Classes to attack. ``'all'`` → every class; a list → that list; an int k → PPA/PPDG's
    seeded random sample (FaceScrub: ⌊k/2⌋ actors from 0..264 then the rest from the
    actresses 265..529, one ``random.Random(seed)`` stream) or, with ``first_k`` (IF-GMI's
    parser), the first k classes."""
    if targets == "all":
        return list(range(n_classes))
    if isinstance(targets, (list, tuple)):
        return [int(t) for t in targets]
    k = int(targets)
    if first_k:
        return list(range(k)) if k > 0 else [0]
    rng = random.Random(seed)
    if dataset_kind == "facescrub":
        half = n_classes // 2
        men = rng.sample(range(0, half), k // 2)
        women = rng.sample(range(half, n_classes), k - k // 2)
        return men + women
    return rng.sample(range(0, n_classes), k)


def check_class_ranges(parts: Sequence[Mapping[str, Any]], n: int, attack: str
                       ) -> list[Mapping[str, Any]]:
    """``parts`` (results of class-range jobs, each with ``class_range = (start, stop)``)
    sorted by range, after checking that their ranges tile 0..n exactly once."""
    parts = sorted(parts, key=lambda p: tuple(p["class_range"]))
    at = 0
    for p in parts:
        if p.get("attack", attack) != attack:
            raise ValueError(f"a {p.get('attack')} part among the {attack} parts")
        a, b = (int(v) for v in p["class_range"])
        if a != at or b <= a:
            raise ValueError(f"{attack}: the parts' class ranges "
                             f"{[tuple(q['class_range']) for q in parts]} do not tile the "
                             f"attack's {n} classes (gap or overlap at position {at})")
        at = b
    if at != n:
        raise ValueError(f"{attack}: the parts' class ranges end at {at}, the attack has {n} "
                         "classes")
    return parts


# --------------------------------------------------- rendering (docs/sources.md#attack-conventions)
def broadcast_w(G: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """[N, 1, w_dim] (or [N, w_dim]) → [N, num_ws, w_dim]."""
    if w.dim() == 2:
        w = w[:, None]
    if w.shape[1] == 1:
        w = w.expand(-1, G.num_ws, -1)
    return w


def render(G: nn.Module, w: torch.Tensor, noise_mode: str = "const") -> torch.Tensor:
    """Full-resolution images of single latents ``w`` (constant noise, float32)."""
    return G.synthesis(broadcast_w(G, w), noise_mode=noise_mode, force_fp32=True)


def preprocess(images: torch.Tensor, center_crop: int | None, size: int | None) -> torch.Tensor:
    """CenterCrop(center_crop) then bilinear antialiased resize to size×size (either optional)."""
    if center_crop is not None and center_crop < images.shape[-1]:
        images = T.functional.center_crop(images, [center_crop, center_crop])
    if size is not None and images.shape[-1] != size:
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False,
                               antialias=True)
    return images


def attack_transform(center_crop: int | None, resize: int, rrc_scale: Sequence[float],
                     rrc_ratio: Sequence[float]) -> Callable[[torch.Tensor], torch.Tensor]:
    """PPA's optimisation transform: CenterCrop → Resize → RandomResizedCrop(resize) with one
    parameter draw per call for the whole batch."""
    rrc = T.RandomResizedCrop(resize, scale=tuple(rrc_scale), ratio=tuple(rrc_ratio),
                              antialias=True)

    def apply(images: torch.Tensor) -> torch.Tensor:
        return rrc(preprocess(images, center_crop, resize))

    return apply


# ---------------------------------------------- candidate search (docs/sources.md#candidate-search)
@torch.no_grad()
def candidate_confidences(G: nn.Module, target_model: nn.Module, *, search_space_size: int,
                          center_crop: int | None, resize: int, horizontal_flip: bool = True,
                          batch_size: int = 25, truncation_psi: float = 0.5,
                          truncation_cutoff: int | None = 8, seed: int = 42, clip: bool = True,
                          device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The search space of :func:`candidate_search`: ``search_space_size`` seeded z's mapped
    to ws [S, num_ws, w_dim] (truncated per ``truncation_cutoff``) and their (flip-averaged)
    target confidences [S, n_classes]."""
    z = torch.from_numpy(np.random.RandomState(seed).randn(search_space_size, G.z_dim))
    z = z.to(torch.float32).to(device)
    w_all = G.mapping(z, None, truncation_psi=truncation_psi,
                      truncation_cutoff=truncation_cutoff)
    confs = []
    for i in range(0, search_space_size, batch_size):
        imgs = G.synthesis(w_all[i:i + batch_size], noise_mode="const", force_fp32=True)
        if clip:
            imgs = imgs.clamp(-1, 1)
        imgs = preprocess(imgs, center_crop, resize)
        views = [imgs, imgs.flip(3)] if horizontal_flip else [imgs]
        conf = torch.stack([target_model(v).softmax(dim=1) for v in views]).mean(dim=0)
        confs.append(conf)
    return w_all, torch.cat(confs)


def select_candidates(w_all: torch.Tensor, conf: torch.Tensor,
                      per_candidate_targets: Sequence[int]) -> torch.Tensor:
    """For each entry t of ``per_candidate_targets`` the not-yet-chosen row of ``w_all`` with
    the highest ``conf[:, t]`` (``conf`` is not modified)."""
    conf = conf.clone()
    chosen = []
    for t in per_candidate_targets:
        idx = int(torch.argmax(conf[:, t]))
        chosen.append(idx)
        conf[idx, t] = -1.0
    return w_all[chosen]


@torch.no_grad()
def candidate_search(G: nn.Module, target_model: nn.Module, per_candidate_targets: Sequence[int],
                     *, search_space_size: int, center_crop: int | None, resize: int,
                     horizontal_flip: bool = True, batch_size: int = 25,
                     truncation_psi: float = 0.5, truncation_cutoff: int | None = 8,
                     seed: int = 42, clip: bool = True,
                     device: torch.device | str = "cpu") -> torch.Tensor:
    """For each entry t of ``per_candidate_targets`` pick the not-yet-chosen latent with the
    highest (flip-averaged) target confidence for t among ``search_space_size`` seeded z's.
    Returns the chosen ws, [N, num_ws, w_dim] (truncated per ``truncation_cutoff``)."""
    w_all, conf = candidate_confidences(
        G, target_model, search_space_size=search_space_size, center_crop=center_crop,
        resize=resize, horizontal_flip=horizontal_flip, batch_size=batch_size,
        truncation_psi=truncation_psi, truncation_cutoff=truncation_cutoff, seed=seed,
        clip=clip, device=device)
    return select_candidates(w_all, conf, per_candidate_targets)


def initial_latents(G: nn.Module, target_model: nn.Module, per_candidate_targets: torch.Tensor,
                    candidates: Mapping[str, Any], *, center_crop: int | None, resize: int,
                    seed: int, device: torch.device | str = "cpu",
                    init_path: Path | None = None) -> torch.Tensor:
    """The candidates' starting latents, [N, 1, w_dim] on the CPU: :func:`candidate_search`
    with the ``candidates`` settings (docs/sources.md#candidate-search), or the ones saved in
    ``init_path`` by an earlier attempt of the job (a corrupt file is moved aside and the search
    redone)."""
    w_init = io.load_resume(init_path) if init_path is not None else None
    if w_init is None:
        ws = candidate_search(
            G, target_model, per_candidate_targets.tolist(),
            search_space_size=int(candidates["search_space_size"]), center_crop=center_crop,
            resize=resize, horizontal_flip=bool(candidates.get("horizontal_flip", True)),
            batch_size=int(candidates.get("batch_size", 25)),
            truncation_psi=float(candidates.get("truncation_psi", 0.5)),
            truncation_cutoff=candidates.get("truncation_cutoff", 8), seed=seed, device=device)
        w_init = ws[:, :1].detach().cpu()
        if init_path is not None:
            io.torch_save(w_init, init_path)
    return w_init


# ------------------------------------------------------------------ lockstep lanes
def _rng_states() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


@torch.no_grad()
def draws_random(fn: Callable[..., Any], *args: Any) -> bool:
    """Whether ``fn(*args)`` draws from torch's global CPU or CUDA random streams (e.g. MID's
    sampled bottleneck at inference). The streams are restored afterwards."""
    cpu, cuda = _rng_states()
    try:
        fn(*args)
        cpu2, cuda2 = _rng_states()
        return not torch.equal(cpu, cpu2) or len(cuda) != len(cuda2) or any(
            not torch.equal(a, b) for a, b in zip(cuda, cuda2))
    finally:
        torch.set_rng_state(cpu)
        if cuda:
            torch.cuda.set_rng_state_all(cuda)


def pack_lanes(sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``sizes`` in order, cut into consecutive groups whose sizes sum to at most
    ``capacity`` (a single larger entry forms its own group)."""
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(sizes):
        if groups and total + n <= capacity:
            groups[-1].append(i)
            total += n
        else:
            groups.append([i])
            total = n
    return groups


class Lanes:
    """Several independent optimisation batches ("lanes") run as one batch, each lane doing
    exactly what it would do alone: its random transforms draw from its own CPU torch stream
    (``rng_states``, swapped in around the lane's call, the global stream restored after) and
    the loss is the sum of the per-lane losses, so every sample gets the gradient it gets in
    its own batch. The networks must treat samples independently (eval mode, no random draws:
    :func:`draws_random`); Adam and the L1-ball projections are per element / per sample."""

    def __init__(self, sizes: Sequence[int], rng_states: Sequence[torch.Tensor]):
        if len(sizes) != len(rng_states):
            raise ValueError(f"{len(sizes)} lanes but {len(rng_states)} random states")
        self.sizes = [int(n) for n in sizes]
        self.states = [s.clone() for s in rng_states]
        bounds = np.cumsum([0, *self.sizes]).tolist()
        self.slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]

    def transform(self, tf: Callable[[torch.Tensor], torch.Tensor]
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
        def apply(images: torch.Tensor) -> torch.Tensor:
            outer = torch.get_rng_state()
            outs = []
            try:
                for j, sl in enumerate(self.slices):
                    torch.set_rng_state(self.states[j])
                    outs.append(tf(images[sl]))
                    self.states[j] = torch.get_rng_state()
            finally:
                torch.set_rng_state(outer)
            return torch.cat(outs)

        return apply

    def loss(self, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
             ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        def total(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            parts = [loss_fn(logits[sl], targets[sl]) for sl in self.slices]
            out = parts[0]
            for p in parts[1:]:
                out = out + p
            return out

        return total

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x[sl] for sl in self.slices]


# --------------------------------------------------------------- optimisation (docs/sources.md#ppa)
def optimize_w(G: nn.Module, target_model: nn.Module, w: torch.Tensor, targets: torch.Tensor, *,
               steps: int, lr: float, betas: Sequence[float],
               transform: Callable[[torch.Tensor], torch.Tensor],
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               lr_milestones: Iterable[int] = (), lr_gamma: float = 0.1,
               discriminator: nn.Module | None = None, discriminator_weight: float = 0.0,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """PPA's optimisation of one batch of single latents: fresh Adam (and MultiStepLR stepped
    every optimisation step) on ``w``; each step renders, transforms (one draw per step for
    the batch), and minimises the identity loss of the target logits. Returns the optimised
    ``w`` (detached) and the per-sample target confidence of the last step (pre-update)."""
    w = w.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([w], lr=lr, betas=tuple(betas), weight_decay=0)
    milestones = list(lr_milestones)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones, lr_gamma) if milestones else None
    last_conf = torch.zeros(len(w))
    for _ in range(steps):
        imgs = render(G, w)
        loss = torch.zeros((), device=w.device)
        if discriminator is not None and discriminator_weight > 0:
            loss = loss + discriminator_weight * F.softplus(-discriminator(imgs)).mean()
        logits = target_model(transform(imgs))
        loss = loss + loss_fn(logits, targets)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"inversion loss is {float(loss)} (lr {lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        last_conf = logits.detach().softmax(dim=1).gather(1, targets[:, None]).squeeze(1).cpu()
    return w.detach(), last_conf


# ------------------------------------------------------------ final selection (docs/sources.md#ppa)
#: images rendered at once by :func:`final_selection` (official PPA ``create_image`` default)
RENDER_BATCH_SIZE = 20


@torch.no_grad()
def final_selection(G: nn.Module, target_model: nn.Module, w: torch.Tensor,
                    targets: torch.Tensor, *, samples_per_target: int, iterations: int,
                    center_crop: int | None, resize: int,
                    rrc_scale: Sequence[float] | None = (0.5, 0.9),
                    rrc_ratio: Sequence[float] = (0.8, 1.2), flip: float = 0.5,
                    batch_size: int = 250, render_batch_size: int = RENDER_BATCH_SIZE,
                    class_seed: int | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per target class: score every candidate by its mean target confidence over
    ``iterations`` random transforms (RandomResizedCrop, unless ``rrc_scale`` is None as in
    PPDG, then RandomHorizontalFlip; one draw per call), keep the best
    ``samples_per_target`` in descending score order. Classes in ascending order.
    Returns (w, targets, scores) of the kept candidates.

    Candidates are scored ``batch_size`` at a time but rendered ``render_batch_size`` at a time
    and resized to ``resize`` at once, as the official PPA (``create_image``'s batches of 20,
    then a DataLoader of ``batch_size`` over the resized images): 250 full-resolution 1024 px
    images through the synthesis network at once would need ~100 GiB.

    ``class_seed``: torch's random streams are re-seeded with ``class_seed + class`` before
    each class, so a class's scores do not depend on the classes scored before it (PPA's
    class-range jobs, atat.plan.config.inversion_shards); None: one stream continues through the
    classes (the caller seeds it, as PPDG does per class)."""
    ops: list = []
    if rrc_scale is not None:
        ops.append(T.RandomResizedCrop(resize, scale=tuple(rrc_scale), ratio=tuple(rrc_ratio),
                                       antialias=True))
    ops.append(T.RandomHorizontalFlip(flip))
    tf = T.Compose(ops)
    out_w, out_t, out_s = [], [], []
    for cls in sorted(set(int(t) for t in targets.tolist())):
        if class_seed is not None:
            torch.manual_seed(int(class_seed) + cls)
        idx = (targets == cls).nonzero().squeeze(1)
        scores = torch.zeros(len(idx))
        for i in range(0, len(idx), batch_size):
            sub = idx[i:i + batch_size]
            imgs = torch.cat([preprocess(render(G, w[sub[j:j + render_batch_size]]),
                                         center_crop, resize)
                              for j in range(0, len(sub), render_batch_size)])
            acc = torch.zeros(len(sub))
            for _ in range(iterations):
                conf = target_model(tf(imgs)).softmax(dim=1)[:, cls]
                acc += conf.cpu()
            scores[i:i + len(sub)] = acc / iterations
        order = torch.argsort(scores, descending=True, stable=True)[:samples_per_target]
        out_w.append(w[idx[order]])
        out_t.append(targets[idx[order]])
        out_s.append(scores[order])
    return torch.cat(out_w), torch.cat(out_t), torch.cat(out_s)


# ------------------------------------------------------------------ results of one attack
#: Per-image columns every scorer returns (docs/sources.md#attack-accuracy-and-confidence,
#: #facenet-distance, #evaluation-model-distance). ``dist_face`` is NaN where no face-embedding
#: network is used (non-face datasets); ``dist_eval`` likewise when absent.
SCORE_COLUMNS = ("correct_top1", "correct_top5", "evalconf", "dist_face", "dist_eval")

#: Per-image column the accumulator adds itself: max |pixel| of the scored (center-cropped)
#: image. Generator outputs are scored unclamped, as in the official evaluations (see
#: :mod:`atat.inversion.metrics`); this column shows how far outside [-1, 1] they went.
IMAGE_COLUMNS = ("img_absmax",)

#: A scorer maps (images in [-1, 1] at generator resolution [N, 3, R, R], target classes [N])
#: to a dict of per-image float tensors keyed by SCORE_COLUMNS. It applies the generator's
#: center crop and the resizes of the evaluation/face networks itself.
Scorer = Callable[[torch.Tensor, torch.Tensor], dict]


class ResultAccumulator:
    """Collects the per-image scores of an attack's final images and, per class, the image
    the evaluation model is most confident about (for the reconstruction grids, paper Fig.
    3/6), stored as uint8 at ``figure_resolution``."""

    def __init__(self, figure_resolution: int, center_crop: int | None = None):
        self.figure_resolution = figure_resolution
        self.center_crop = center_crop
        self.rows: list[dict] = []
        self.best: dict[int, tuple[float, torch.Tensor]] = {}

    def add(self, images: torch.Tensor, targets: torch.Tensor, scores: dict) -> None:
        missing = [c for c in SCORE_COLUMNS if c not in scores]
        if missing:
            raise KeyError(f"scorer did not return {missing}")
        cols = {c: torch.as_tensor(scores[c]).detach().float().cpu() for c in SCORE_COLUMNS}
        absmax = (preprocess(images.detach(), self.center_crop, None).abs().flatten(1)
                  .amax(dim=1).float().cpu())
        small = None
        for i, t in enumerate(targets.tolist()):
            self.rows.append({"class": int(t), **{c: float(cols[c][i]) for c in SCORE_COLUMNS},
                              "img_absmax": float(absmax[i])})
            conf = float(cols["evalconf"][i])
            if t not in self.best or conf > self.best[t][0]:
                if small is None:
                    small = preprocess(images.detach().float().cpu(), self.center_crop,
                                       self.figure_resolution)
                    small = ((small.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
                self.best[int(t)] = (conf, small[i].clone())

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=["class", *SCORE_COLUMNS, *IMAGE_COLUMNS])

    def best_images(self) -> dict[int, dict]:
        return {c: {"evalconf": conf, "image": img} for c, (conf, img) in sorted(self.best.items())}
