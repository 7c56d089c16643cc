"""IF-GMI: model inversion through the intermediate features of StyleGAN2 (paper A.5;
docs/sources.md#if-gmi, #attack-conventions).

Per target class (first-appearance order), per batch of its candidates, the attack runs a
sequence of *stages*. Stage 0 optimises the single latent ``w`` with the synthesis starting at
block 0; stage i > 0 starts the synthesis at block k = i from the output features of block
k-1 (the "mid vector") and optimises both ``w`` and those features. Each stage has a fresh
Adam; after every update the deviation of the mid features (stages k != 0) and of ``w`` from
the stage's starting point is projected onto an L1 ball (Duchi et al. 2008) whose radius is
indexed by the stage (radius 0 = no projection). The image recorded for a stage is the one
of the forward pass *before* the stage's last update (``last_img``, docs/sources.md#if-gmi). The
output features of block k then become the next stage's initial mid vector. Starting the synthesis
at block k drops the toRGB contributions of the blocks before k (docs/sources.md#if-gmi).

There is no final selection: every candidate's stage image is scored, and the reported stage
is the one with the highest evaluation-model Acc@1 (docs/sources.md#if-gmi) — the rule of the
IF-GMI code and the replication, i.e. the stage is chosen with the evaluator.

Deviation for resumability (documented, as in :mod:`atat.inversion.ppa`): the original draws
every random transform from one global torch stream; here the stream is re-seeded with
``seed + batch index`` at the start of each batch, so a job resumed after an interruption
reproduces an uninterrupted run exactly. A job over a range of the classes
(:func:`ifgmi_classes`, atat.plan.config.inversion_shards) computes its batches as the job over every
class does (same batch indices and lockstep groups); :func:`merge_ifgmi` joins the ranges and
chooses the stage.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from atat.base import io
from atat.base.precision import attack_precision
from atat.plan.inversion_defaults import IFGMI_CANDIDATE_DEFAULTS, IFGMI_DEFAULTS, ifgmi_settings
from atat.base.progress import track  # one log line per batch, with ETA

from .core import (
    Lanes,
    ResultAccumulator,
    attack_transform,
    broadcast_w,
    check_class_ranges,
    draws_random,
    identity_loss,
    initial_latents,
    pack_lanes,
    seed_everything,
    target_classes,
)

__all__ = ["DEFAULTS", "ifgmi_classes", "ifgmi_settings", "l1_ball_projection", "merge_ifgmi",
           "optimize_stage", "run_ifgmi"]

#: Values of docs/sources.md#if-gmi ([REP] if_gmi.yaml, FaceScrub) used for keys a config leaves
#: out: one copy in the torch-free atat.plan.inversion_defaults, which atat.plan.config's checks read too.
DEFAULTS = IFGMI_DEFAULTS
CANDIDATE_DEFAULTS = IFGMI_CANDIDATE_DEFAULTS

SELECTION_NOTE = ("IF-GMI: the reported stage is the one with the highest evaluation-model "
                  "Acc@1 over all candidates' stage images (no final selection), as in the "
                  "IF-GMI code and the replication; the stage is therefore chosen with the "
                  "evaluation model.")


# ------------------------------------------------------ L1-ball projection (docs/sources.md#if-gmi)
def l1_ball_projection(d: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection of each sample (dim 0) of ``d`` onto the L1 ball of ``radius``
    (Duchi et al. 2008), on the flattened sample. A sample with ||d||_1 < radius is returned
    unchanged; otherwise, with μ = |d| sorted descending and c_j its cumulative sums,
    ρ = max{j : μ_j·j > c_j − radius}, θ = (c_ρ − radius)/ρ and the result is
    sign(d)·max(|d| − θ, 0), whose L1 norm equals ``radius``. ``radius`` 0 gives zeros."""
    radius = float(radius)
    if radius < 0:
        raise ValueError(f"L1-ball radius must be >= 0, got {radius}")
    if d.dim() == 0:
        raise ValueError("l1_ball_projection needs a batch dimension (dim 0)")
    if radius == 0:
        return torch.zeros_like(d)
    flat = d.reshape(d.shape[0], -1)
    mag = flat.abs()
    inside = mag.sum(dim=1) < radius
    if bool(inside.all()):
        return d.clone()
    mu = mag.sort(dim=1, descending=True).values
    csum = mu.cumsum(dim=1)
    j = torch.arange(1, flat.shape[1] + 1, device=d.device, dtype=d.dtype)
    cond = mu * j > (csum - radius)
    rho = torch.where(cond, torch.arange(flat.shape[1], device=d.device), -1).max(dim=1).values
    rho = rho.clamp(min=0)  # cond holds at j=1 whenever ||d||_1 >= radius > 0
    theta = (csum.gather(1, rho[:, None]) - radius) / (rho[:, None] + 1).to(d.dtype)
    proj = flat.sign() * (mag - theta).clamp(min=0)
    out = torch.where(inside[:, None], flat, proj)
    return out.reshape(d.shape)


# --------------------------------------------------------------- one stage (docs/sources.md#if-gmi)
def optimize_stage(G: nn.Module, target_model: nn.Module, w: torch.Tensor,
                   mid: torch.Tensor | None, block: int, targets: torch.Tensor, *, steps: int,
                   lr: float, betas: Sequence[float],
                   transform: Callable[[torch.Tensor], torch.Tensor],
                   loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   radius_mid: float = 0.0, radius_w: float = 0.0) -> dict[str, torch.Tensor]:
    """One IF-GMI stage on a batch: synthesis starts at ``block`` from the input features
    ``mid`` (None for block 0); trainable set {w} at block 0, {w, mid} otherwise; fresh Adam;
    after every update the deviations from the stage start are projected onto the L1 balls
    (``radius`` 0 = no projection; the mid ball only for block != 0).

    Returns ``w`` and ``mid`` after the last update (detached), ``out_features`` (output of
    ``block``, the next stage's initial mid), ``last_img`` (image of the forward pass before
    the last update) and ``last_conf`` (target-model confidence of that pass)."""
    if steps < 1:
        raise ValueError(f"every IF-GMI stage needs >= 1 step, got {steps}")
    synthesis = G.synthesis
    w = w.detach().clone().requires_grad_(True)
    w0 = w.detach().clone()
    trainable = [w]
    if block > 0:
        if mid is None:
            raise ValueError(f"stage at block {block} needs input features")
        mid = mid.detach().clone().requires_grad_(True)
        m0 = mid.detach().clone()
        trainable.append(mid)
    else:
        mid = None
    opt = torch.optim.Adam(trainable, lr=lr, betas=tuple(betas), weight_decay=0)
    last_img = last_conf = None
    for _ in range(steps):
        img = synthesis.forward_from(block, mid, broadcast_w(G, w), noise_mode="const")
        last_img = img.detach()
        logits = target_model(transform(img))
        loss = loss_fn(logits, targets)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"IF-GMI loss is {float(loss)} at block {block} (lr {lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last_conf = logits.detach().softmax(dim=1).gather(1, targets[:, None]).squeeze(1)
        with torch.no_grad():
            if block != 0 and radius_mid > 0:
                mid.copy_(m0 + l1_ball_projection(mid - m0, radius_mid))
            if radius_w > 0:
                w.copy_(w0 + l1_ball_projection(w - w0, radius_w))
    with torch.no_grad():
        out, _ = synthesis.block_features(broadcast_w(G, w), block, start=block, x=mid,
                                          noise_mode="const")
    return {"w": w.detach(), "mid": None if mid is None else mid.detach(),
            "out_features": out.detach(), "last_img": last_img, "last_conf": last_conf}


# ------------------------------------------------------------------ settings
def _radius(radii: Sequence[float], stage: int, name: str) -> float:
    if stage >= len(radii):
        raise ValueError(f"IF-GMI stage {stage} has no {name} radius ({name} lists "
                         f"{len(radii)} values); give one radius per stage (0 = unconstrained)")
    return float(radii[stage])


def _merge(dst: ResultAccumulator, rows: list, best: Mapping) -> None:
    """Add one batch's rows and per-class best images to ``dst`` (same rule as
    ResultAccumulator.add: a later image replaces only with a strictly higher confidence)."""
    dst.rows.extend(rows)
    for c, (conf, img) in best.items():
        c = int(c)
        if c not in dst.best or conf > dst.best[c][0]:
            dst.best[c] = (float(conf), img)


# ------------------------------------------------------------------ the attack
def _plan(cfg: Mapping[str, Any]) -> tuple[list[int], torch.Tensor, list[torch.Tensor]]:
    """The attack's classes (first-appearance order), each candidate's class and the batches
    (candidate indices) of the whole job: per class, batches of that class's candidates."""
    classes = target_classes(cfg["targets"], int(cfg["n_classes"]),
                             cfg.get("dataset_kind", ""), int(cfg["seed"]), first_k=True)
    per_cand = torch.tensor(classes, dtype=torch.long).repeat_interleave(
        int(cfg["candidates"]["num_candidates"]))
    bs = int(cfg["batch_size"])
    batches: list[torch.Tensor] = []
    for c in dict.fromkeys(classes):
        idx = (per_cand == c).nonzero().squeeze(1)
        batches.extend(idx[i:i + bs] for i in range(0, len(idx), bs))
    return classes, per_cand, batches


def run_ifgmi(G: nn.Module, target_model: nn.Module, params: Mapping[str, Any], scorer: Callable,
              *, device: str | torch.device = "cpu", resume_dir: str | Path | None = None,
              progress: bool = True, log: Callable[[str], Any] = print,
              lockstep: bool = True) -> dict[str, Any]:
    """Run IF-GMI against ``target_model`` (inputs in [-1, 1] at ``params['input_resolution']``)
    with generator ``G``; ``params`` as returned by :func:`atat.plan.config.inversion_params`.
    ``scorer(images, targets)`` scores each batch's stage images at generator resolution.

    The per-class batches (docs/sources.md#if-gmi: one class at a time, e.g. 5 candidates in a batch
    of 20) are optimised ``lockstep``: consecutive batches, up to ``batch_size`` images, run as
    one batch of :class:`atat.inversion.core.Lanes`, each batch with its own random stream
    (``seed + batch index``), its own loss and its own L1 balls, so every batch's result is
    the one it gets alone, up to float rounding (the generator's modulated convolution is
    one grouped convolution over the batch, summed in a batch-size dependent order). Not when
    the target model draws random numbers (MID's sampled bottleneck), whose draws would be
    shared: then one batch at a time. ``lockstep=False``: always one batch at a time.

    Returns ``frame`` (per-image scores of the best stage), ``best_images`` (per class the
    best-stage image of highest evaluation confidence), ``best_stage``, ``stage_attacc1``
    (Acc@1 per stage), ``selection_note``, ``final_w`` (best stage's w, [N, 1, w_dim]),
    ``targets`` ([N], same order as ``frame`` and ``final_w``), plus ``stage_summary`` (per
    stage Acc@1/Acc@5/mean eval confidence/AvgTargetConf), ``avg_target_conf`` (best stage),
    ``classes`` and ``note``. The same as :func:`merge_ifgmi` of :func:`ifgmi_classes` over
    every class."""
    return merge_ifgmi([ifgmi_classes(G, target_model, params, scorer, device=device,
                                      resume_dir=resume_dir, progress=progress, log=log,
                                      lockstep=lockstep)], params, log=log)


def ifgmi_classes(G: nn.Module, target_model: nn.Module, params: Mapping[str, Any],
                  scorer: Callable, *, class_range: tuple[int, int] | None = None,
                  device: str | torch.device = "cpu", resume_dir: str | Path | None = None,
                  progress: bool = True, log: Callable[[str], Any] = print,
                  lockstep: bool = True) -> dict[str, Any]:
    """IF-GMI's batches of the classes at positions ``class_range = (start, stop)`` of the
    attack's class list (None: every class), every stage of each. The lockstep groups are
    those of the job over every class: a group shared with a neighbouring range is computed
    whole by both, each keeping its own batches, so every batch is computed as in that job.
    A part for :func:`merge_ifgmi` (which chooses the stage over all classes)."""
    device = torch.device(device)
    G = G.to(device).eval().requires_grad_(False)
    target_model = target_model.to(device).eval().requires_grad_(False)
    cfg = ifgmi_settings(params)
    seed = int(cfg["seed"])
    res = int(cfg["input_resolution"])
    crop = cfg.get("center_crop")
    cand = cfg["candidates"]
    steps = cfg["steps"]
    n_stages = len(steps)
    n_blocks = int(G.synthesis.num_blocks)
    if n_stages < 1:
        raise ValueError("IF-GMI needs at least one stage (params['steps'] is empty)")
    if n_stages > n_blocks:
        raise ValueError(f"IF-GMI has {n_stages} stages (steps {steps}) but the generator has "
                         f"only {n_blocks} synthesis blocks; stage i starts at block i")
    r_mid = [_radius(cfg["max_radius_mid"], i, "max_radius_mid") for i in range(n_stages)]
    r_w = [_radius(cfg["max_radius_w"], i, "max_radius_w") for i in range(n_stages)]
    loss_fn = identity_loss(cfg.get("loss") or "poincare")
    bs = int(cfg["batch_size"])
    fig_res = int(cfg["figure_resolution"])

    resume = Path(resume_dir) if resume_dir else None
    if resume:
        resume.mkdir(parents=True, exist_ok=True)
        stamp = json.dumps(dict(params), sort_keys=True, default=str)
        stamp_path = resume / "params.json"
        if stamp_path.exists() and stamp_path.read_text() != stamp:
            raise ValueError(f"{resume} holds a run with other parameters; use a fresh "
                             "resume_dir")
        io.write_text(stamp_path, stamp)

    with attack_precision(str(params.get("precision", "fp32"))):
        seed_everything(seed)
        classes, per_cand, batches = _plan(cfg)
        start, stop = (0, len(classes)) if class_range is None else map(int, class_range)
        if not 0 <= start < stop <= len(classes):
            raise ValueError(f"class range {class_range} is not within the attack's "
                             f"{len(classes)} classes")
        mine = set(classes[start:stop])
        w_init = initial_latents(G, target_model, per_cand, cand, center_crop=crop, resize=res,
                                 seed=seed, device=device,
                                 init_path=resume / "init_w.pt" if resume else None)
        log(f"IF-GMI: classes {start}-{stop} of {len(classes)} x "
            f"{int(cand['num_candidates'])} candidates, stages {steps}, batch size {bs}")

        tf = attack_transform(crop, res, cfg["rrc_scale"], cfg["rrc_ratio"])
        if lockstep and draws_random(target_model, torch.zeros(2, 3, res, res, device=device)):
            log("IF-GMI: the target model draws random numbers at inference: one batch at a "
                "time (no lockstep)")
            lockstep = False
        groups = (pack_lanes([len(i) for i in batches], bs) if lockstep
                  else [[b] for b in range(len(batches))])
        own = {b for b, idx in enumerate(batches) if int(per_cand[idx[0]]) in mine}
        groups = [g for g in groups if own.intersection(g)]
        kw = dict(steps=steps, lr=float(cfg["lr"]), betas=cfg["betas"], transform=tf,
                  loss_fn=loss_fn, r_mid=r_mid, r_w=r_w, fig_res=fig_res, crop=crop)
        out: dict[int, dict] = {}
        for group in track(groups, "IF-GMI batch groups", log=logging.getLogger(__name__),
                           enabled=progress):
            paths = {b: resume / f"batch{b:05d}.pt" if resume else None for b in group}
            done = {b: io.load_resume(paths[b]) if paths[b] is not None else None
                    for b in group}  # corrupt: redone
            todo = [b for b in group if done[b] is None]
            if len(todo) == 1 and not lockstep:
                b = todo[0]
                done[b] = _attack_batch(G, target_model, w_init[batches[b]].to(device),
                                        per_cand[batches[b]].to(device), scorer, seed=seed + b,
                                        **kw)
            elif todo:
                outs = _attack_lanes(G, target_model, [w_init[batches[b]] for b in todo],
                                     [per_cand[batches[b]] for b in todo], scorer,
                                     seeds=[seed + b for b in todo], device=device, **kw)
                done.update(zip(todo, outs))
            for b in todo:
                if paths[b] is not None:
                    io.torch_save(done[b], paths[b])
            out.update((b, done[b]) for b in group if b in own)
    return {"attack": "ifgmi", "class_range": (start, stop), "classes": classes[start:stop],
            "batches": out}


def merge_ifgmi(parts: list[Mapping[str, Any]], params: Mapping[str, Any], *,
                log: Callable[[str], Any] = print) -> dict[str, Any]:
    """One IF-GMI result (see :func:`run_ifgmi`) from :func:`ifgmi_classes` parts whose class
    ranges tile the attack's class list: the stage with the highest evaluation Acc@1 over
    every class, exactly what the job over every class returns."""
    cfg = ifgmi_settings(params)
    classes, per_cand, batches = _plan(cfg)
    parts = check_class_ranges(parts, len(classes), "ifgmi")
    done = {int(b): r for p in parts for b, r in p["batches"].items()}
    if sorted(done) != list(range(len(batches))):
        raise ValueError(f"ifgmi: the parts hold batches {sorted(done)[:10]}..., the job has "
                         f"{len(batches)}")
    steps = cfg["steps"]
    n_stages = len(steps)
    cand = cfg["candidates"]
    crop = cfg.get("center_crop")
    r_mid = [_radius(cfg["max_radius_mid"], i, "max_radius_mid") for i in range(n_stages)]
    r_w = [_radius(cfg["max_radius_w"], i, "max_radius_w") for i in range(n_stages)]
    loss_name = cfg.get("loss") or "poincare"
    accs = [ResultAccumulator(int(cfg["figure_resolution"]), crop) for _ in range(n_stages)]
    stage_w: list[list[torch.Tensor]] = [[] for _ in range(n_stages)]
    stage_conf: list[list[torch.Tensor]] = [[] for _ in range(n_stages)]
    for b in range(len(batches)):
        for i, st in enumerate(done[b]["stages"]):
            _merge(accs[i], st["rows"], st["best"])
            stage_w[i].append(st["w"])
            stage_conf[i].append(st["target_conf"])

    targets = per_cand[torch.cat(batches)]
    summary = []
    for i, acc in enumerate(accs):
        frame = acc.frame()
        conf = torch.cat(stage_conf[i])
        per_class = [float(conf[targets == c].mean()) for c in dict.fromkeys(classes)]
        summary.append({"stage": i, "block": i, "steps": steps[i],
                        "acc1": float(frame["correct_top1"].mean()),
                        "acc5": float(frame["correct_top5"].mean()),
                        "evalconf": float(frame["evalconf"].mean()),
                        "avg_target_conf": sum(per_class) / len(per_class)})
    stage_acc1 = [s["acc1"] for s in summary]
    best = max(range(n_stages), key=lambda i: (stage_acc1[i], -i))  # first stage on ties
    log(f"IF-GMI: stage Acc@1 {[round(a, 4) for a in stage_acc1]}; best stage {best} "
        "(chosen by the evaluation model's Acc@1)")
    return {
        "frame": accs[best].frame(),
        "best_images": accs[best].best_images(),
        "best_stage": best,
        "stage_attacc1": stage_acc1,
        "stage_summary": summary,
        "selection_note": SELECTION_NOTE,
        "final_w": torch.cat(stage_w[best]),
        "targets": targets,
        "avg_target_conf": summary[best]["avg_target_conf"],
        "classes": classes,
        "note": (f"IF-GMI: {len(classes)} classes, {int(cand['num_candidates'])} candidates per "
                 f"class from {int(cand['search_space_size'])} latents, stages {steps} "
                 f"(blocks 0..{n_stages - 1}), {loss_name} loss, L1 radii mid "
                 f"{r_mid} / w {r_w}, no final selection; best stage {best}"),
    }


def _attack_batch(G, target_model, w, targets, scorer, *, seed, steps, lr, betas, transform,
                  loss_fn, r_mid, r_w, fig_res, crop) -> dict:
    """All stages of one batch; each stage's images are scored at once and only the rows,
    the per-class best small image, w and the target confidences are kept."""
    torch.manual_seed(seed)
    mid = None
    stages = []
    for i, s in enumerate(steps):
        out = optimize_stage(G, target_model, w, mid, i, targets, steps=s, lr=lr, betas=betas,
                             transform=transform, loss_fn=loss_fn, radius_mid=r_mid[i],
                             radius_w=r_w[i])
        w, mid = out["w"], out["out_features"]
        acc = ResultAccumulator(fig_res, crop)
        t_cpu = targets.cpu()
        with torch.no_grad():
            acc.add(out["last_img"], t_cpu, scorer(out["last_img"], t_cpu))
        stages.append({"rows": acc.rows, "best": acc.best, "w": out["w"].cpu(),
                       "target_conf": out["last_conf"].cpu()})
        del out
    return {"stages": stages}


def _attack_lanes(G, target_model, ws, targets, scorer, *, seeds, device, steps, lr, betas,
                  transform, loss_fn, r_mid, r_w, fig_res, crop) -> list[dict]:
    """:func:`_attack_batch` of several batches at once (one :class:`Lanes` lane each, lane
    j's random stream seeded with ``seeds[j]``); returns one result per batch, equal to its
    :func:`_attack_batch` result up to float rounding."""
    states = []
    for s in seeds:
        torch.manual_seed(s)
        states.append(torch.get_rng_state())
    lanes = Lanes([len(w) for w in ws], states)
    w = torch.cat(list(ws)).to(device)
    t = torch.cat(list(targets)).to(device)
    t_cpu = t.cpu()
    tf, lf = lanes.transform(transform), lanes.loss(loss_fn)
    mid = None
    stages: list[list[dict]] = [[] for _ in ws]
    for i, s in enumerate(steps):
        out = optimize_stage(G, target_model, w, mid, i, t, steps=s, lr=lr, betas=betas,
                             transform=tf, loss_fn=lf, radius_mid=r_mid[i], radius_w=r_w[i])
        w, mid = out["w"], out["out_features"]
        with torch.no_grad():
            scores = scorer(out["last_img"], t_cpu)
        for j, sl in enumerate(lanes.slices):
            acc = ResultAccumulator(fig_res, crop)
            acc.add(out["last_img"][sl], t_cpu[sl], {c: v[sl] for c, v in scores.items()})
            stages[j].append({"rows": acc.rows, "best": acc.best, "w": out["w"][sl].cpu(),
                              "target_conf": out["last_conf"][sl].cpu()})
        del out
    torch.set_rng_state(lanes.states[-1])  # as after the last batch run alone
    return [{"stages": st} for st in stages]
