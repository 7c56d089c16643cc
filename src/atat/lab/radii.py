"""Minimal adversarial L-infinity radii of a trained model (a measuring tool; never imported by
the workflow): per validation image, the smallest radius at which an untargeted PGD flips its
prediction, found by bisection over ε, and what a factor of the one ε rule
(:mod:`atat.plan.eps_scale`, docs/decisions.md#one-ε-scale) maps the paper's AutoAttack ε to on
that distribution.

    python -m atat.lab.radii --model results/models/synthfaces/resnet18/nodef/seed0/model.pt \\
        --dataset-root results/datasets/synthfaces/private --out radii.json --factor 1 49
    python -m atat.lab.radii --compare radii32.json radii64.json --target-resolution 224

Method (everything seeded, float32 with TF32 off, the model in eval mode as AutoAttack sees
it: :func:`atat.robustness._trained_model`):

* Radii are in [0, 1] pixel units (AutoAttack's). An image misclassified clean has radius 0.
* Bisection on a log scale between ``lo`` and ``hi``: at each step one PGD run on every
  image at once, each image at its own trial radius. :func:`atat.training.pgd.pgd` takes one
  radius, so it attacks a unit box ``u`` in [-1, 1]^n with the image ``clip(x + r_i u, 0, 1)``
  (:class:`_PerImageBall`): the same ball as PGD at radius r_i, the box clip moved into the
  model. ``iterations`` sign-gradient steps of 2.5/``iterations`` (in u; Madry et al.'s
  2.5 ε / steps), from a seeded random start in the ball, one attack per trial radius. The
  radius reported is the smallest trial radius at which the attack flipped the image (an upper
  bound of the true minimal radius up to the attack's strength); an image not flipped at
  ``hi`` is reported as ``inf``.
* First-order radius: margin / ||grad_x (logit_y - logit_runner_up)||_1 at the clean image
  (pixel units), and the mean absolute per-input gradient: how a margin's sensitivity spreads
  over the inputs (the quantity the resolution scaling of docs/decisions.md#at-at is about).
* ``--check-autoattack``: AutoAttack's APGD-CE (:func:`atat.robustness.evaluate_autoattack`)
  at each mapped ε, whose robust accuracy should match the radii's survival fraction there.

``--compare A B``: two such files of the same data at two resolutions give the exponent a of
median radius ∝ resolution^-a and the factor it implies at ``--target-resolution``:
(target / resolution_A)^a (a = 2: the first-order argument's area ratio, 49 from 32 to 224 px).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.base import io
from atat.plan.eps_scale import applied_pixel_radius, input_to_pixel
from atat.robustness import PAPER_EPSILONS, first_examples

#: the paper's AT-AT training radius (input units; docs/sources.md#adversarial-training)
PAPER_ATAT_EPSILON = 0.0005
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


class _PerImageBall(nn.Module):
    """``forward(u) = net(clip(x + r * u, 0, 1))`` for u in [-1, 1]^n: PGD on ``u`` with radius
    1 is PGD on the image with radius ``r_i`` per image (``r`` of shape (N, 1, 1, 1))."""

    def __init__(self, net: nn.Module, x01: Tensor, r: Tensor) -> None:
        super().__init__()
        self.net, self.x01, self.r = net, x01, r

    def forward(self, u: Tensor) -> Tensor:
        return self.net((self.x01 + self.r * u).clamp(0.0, 1.0))


def _flipped(net: nn.Module, x01: Tensor, y: Tensor, r: Tensor, *, iterations: int,
             seed: int, batch_size: int) -> Tensor:
    """Per image: does untargeted PGD at radius ``r_i`` change the prediction away from y?"""
    from atat.training.pgd import pgd

    out = []
    gen = torch.Generator().manual_seed(seed)
    for i in range(0, len(y), batch_size):
        sl = slice(i, i + batch_size)
        ball = _PerImageBall(net, x01[sl], r[sl].view(-1, 1, 1, 1))
        zero = torch.zeros_like(x01[sl])
        u = pgd(ball, zero, y[sl], epsilon=1.0, step_size=2.5 / iterations,
                iterations=iterations, targeted=False, random_start=True, clamp=(-1.0, 1.0),
                generator=gen, precision="fp32")
        with torch.no_grad():
            out.append(ball(u).argmax(1) != y[sl])
    return torch.cat(out)


def bisect_radii(net: nn.Module, x01: Tensor, y: Tensor, *, lo: float = 1e-6, hi: float = 0.5,
                 steps: int = 14, iterations: int = 20, seed: int = 0,
                 batch_size: int = 128) -> Tensor:
    """Minimal flipping radius per image ([0, 1] pixel units; 0 if misclassified clean, inf if
    PGD does not flip it at ``hi``), by ``steps`` log-scale bisection steps of PGD runs."""
    with torch.no_grad():
        pred = torch.cat([net(x01[i:i + batch_size]).argmax(1)
                          for i in range(0, len(y), batch_size)])
    correct = pred == y
    n = len(y)
    lo_t = torch.full((n,), float(lo))
    hi_t = torch.full((n,), float(hi))
    at_hi = _flipped(net, x01, y, hi_t, iterations=iterations, seed=seed, batch_size=batch_size)
    at_lo = _flipped(net, x01, y, lo_t, iterations=iterations, seed=seed, batch_size=batch_size)
    for k in range(steps):
        mid = (lo_t * hi_t).sqrt()
        flip = _flipped(net, x01, y, mid, iterations=iterations, seed=seed + 1 + k,
                        batch_size=batch_size)
        hi_t = torch.where(flip, mid, hi_t)
        lo_t = torch.where(flip, lo_t, mid)
    radii = torch.where(at_lo, lo_t.new_full((n,), float(lo)), hi_t)
    radii = torch.where(at_hi, radii, torch.full((n,), math.inf))
    return torch.where(correct, radii, torch.zeros(n))


def first_order(net: nn.Module, x01: Tensor, y: Tensor) -> dict[str, Tensor]:
    """Per image: margin to the runner-up class, ||grad margin||_1 and the first-order radius
    margin / ||grad||_1 (pixel units)."""
    from atat.base.precision import attack_precision

    with attack_precision("fp32"):
        x = x01.detach().clone().requires_grad_(True)
        logits = net(x)
        other = logits.detach().clone()
        other[torch.arange(len(y)), y] = -math.inf
        runner = other.argmax(1)
        margin = logits.gather(1, y[:, None])[:, 0] - logits.gather(1, runner[:, None])[:, 0]
        (grad,) = torch.autograd.grad(margin.sum(), x)
    l1 = grad.abs().flatten(1).sum(1)
    return {"margin": margin.detach(), "grad_l1": l1,
            "grad_mean_abs": grad.abs().flatten(1).mean(1),
            "radius": (margin.detach() / l1).clamp(min=0)}


def survival(radii: Tensor, eps: float) -> float:
    """Of the images classified correctly clean, the fraction whose radius exceeds ``eps``:
    robust accuracy / clean accuracy at ``eps`` for this attack."""
    ok = radii[radii > 0]
    return float((ok > eps).float().mean()) if len(ok) else float("nan")


def _quantiles(v: Tensor) -> dict[str, float]:
    v = v[torch.isfinite(v)].double()
    return {f"q{int(q * 100)}": float(torch.quantile(v, q)) for q in QUANTILES} if len(v) else {}


def measure(model_path: str | Path, dataset_root: str | Path, *, resolution: int,
            split: str = "val", n_examples: int = 1024, factors: Sequence[float] = (1.0,),
            steps: int = 14, iterations: int = 20, seed: int = 0,
            check_autoattack: bool = False, apgd_iterations: int = 20) -> dict[str, Any]:
    """The JSON record of one model (see the module docstring)."""
    from atat.robustness import _trained_model, evaluate_autoattack

    torch.manual_seed(seed)
    net, ckpt = _trained_model(model_path, "cpu")
    for p in net.parameters():
        p.requires_grad_(False)
    x01, y = first_examples(dataset_root, split, n_examples, resolution)
    t0 = time.process_time()
    radii = bisect_radii(net, x01, y, steps=steps, iterations=iterations, seed=seed)
    fo = first_order(net, x01, y)
    correct = radii > 0
    record: dict[str, Any] = {
        "model": str(model_path), "model_id": ckpt.get("model_id"), "resolution": resolution,
        "split": split, "n_examples": len(y), "n_correct": int(correct.sum()),
        "clean_accuracy": float(correct.float().mean()),
        "units": "[0, 1] pixel units",
        "method": {"bisection": "log scale", "lo": 1e-6, "hi": 0.5, "steps": steps,
                   "pgd_iterations": iterations, "pgd_step": "2.5 r / iterations",
                   "random_start": True, "seed": seed, "precision": "fp32 (TF32 off)",
                   "mode": "eval"},
        "radii": [float(r) for r in radii],
        "radius_quantiles": _quantiles(radii[correct]),
        "first_order": {"radius_quantiles": _quantiles(fo["radius"][correct]),
                        "grad_l1_median": float(fo["grad_l1"][correct].median()),
                        "grad_mean_abs_median": float(fo["grad_mean_abs"][correct].median())},
        "paper_autoattack_epsilons": list(PAPER_EPSILONS),
        "paper_atat_epsilon_pixel_units": input_to_pixel(PAPER_ATAT_EPSILON),
        "mapped": {},
        "cpu_seconds": None,
        "host": f"{platform.node()} ({platform.processor() or platform.machine()})",
        "date": datetime.date.today().isoformat(),
        "torch_version": torch.__version__,
    }
    for f in factors:
        rows = {}
        for eps in PAPER_EPSILONS + (input_to_pixel(PAPER_ATAT_EPSILON),):
            applied = applied_pixel_radius(f, eps)
            rows[format(eps, "g")] = {"applied": applied, "survival": survival(radii, applied)}
            if check_autoattack and eps in PAPER_EPSILONS:
                rec = evaluate_autoattack(
                    net, x01, y, epsilon=applied, attacks=("apgd-ce",), version="custom",
                    settings={"apgd": {"n_iter": apgd_iterations, "n_restarts": 1}},
                    seed=seed, normalize=False)
                rows[format(eps, "g")]["apgd_ce_robust_over_clean"] = (
                    rec["robust_accuracy"] / rec["clean_accuracy"]
                    if rec["clean_accuracy"] else float("nan"))
        record["mapped"][format(f, "g")] = rows
    record["cpu_seconds"] = time.process_time() - t0
    return record


#: the ladder of factors of the training-side anchor (docs/decisions.md#one-ε-scale, revision 2)
TRAINING_ATTACK_LADDER = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0)


def training_attack_success(model: nn.Module, x_input: Tensor, y: Tensor, *, n_classes: int,
                            factors: Sequence[float] = TRAINING_ATTACK_LADDER,
                            batch_size: int = 64, seed: int = 0, train_mode: bool = True
                            ) -> dict[str, dict[str, float]]:
    """AT-AT's own training attack (:func:`atat.training.pgd.pgd`, targeted to
    :func:`~atat.training.pgd.sample_targets`, AT-AT's iterations, step ε/5, random start) at
    ``f x`` AT-AT's paper ε (input units) for each factor: the share of ``x_input`` (in [-1, 1]
    input units) classified as its target after the attack, and the share no longer classified
    as its label. ``train_mode``: the network in train mode on seeded batches of
    ``batch_size`` (BatchNorm on batch statistics, as AT-AT's training attacks and logs), on a
    copy of ``model``, so the caller's model and its running statistics are untouched. Every
    factor sees the same batches and targets (one seed)."""
    import copy

    from atat.training.defense_defaults import ATAT_DEFAULTS
    from atat.training.pgd import pgd, sample_targets

    p = ATAT_DEFAULTS
    net = copy.deepcopy(model)
    net.train(train_mode)
    for q in net.parameters():
        q.requires_grad_(False)
    out: dict[str, dict[str, float]] = {}
    for f in factors:
        g = torch.Generator().manual_seed(int(seed))
        order = torch.randperm(len(y), generator=g)
        hit = flip = 0
        for i in range(0, len(y), batch_size):
            idx = order[i:i + batch_size]
            xb, yb = x_input[idx], y[idx]
            targets = sample_targets(yb, n_classes, g)
            x_adv = pgd(net, xb, targets, epsilon=f * p["epsilon"],
                        step_size=f * p["step_size"], iterations=int(p["iterations"]),
                        targeted=True, random_start=bool(p["random_start"]), generator=g)
            with torch.no_grad():
                pred = net(x_adv).argmax(1)
            hit += int((pred == targets).sum())
            flip += int((pred != yb).sum())
        out[format(f, "g")] = {"epsilon_input_units": f * p["epsilon"],
                               "epsilon_pixel_units": input_to_pixel(f * p["epsilon"]),
                               "targeted_success": hit / len(y), "untargeted_flip": flip / len(y)}
    return out


def anchor_factor(success: dict[str, dict[str, float]], threshold: float = 0.5
                  ) -> dict[str, float | None]:
    """The rule of revision 2: the smallest factor whose targeted success is >= ``threshold``
    (none on the ladder: its largest), and the log-linear interpolated factor at the threshold
    (reported only; None when the ladder does not bracket it)."""
    rows = sorted((float(k), v["targeted_success"]) for k, v in success.items())
    chosen = next((f for f, s in rows if s >= threshold), rows[-1][0])
    interp = None
    for (f0, s0), (f1, s1) in zip(rows, rows[1:]):
        if s0 < threshold <= s1:
            interp = math.exp(math.log(f0) + (threshold - s0) / (s1 - s0)
                              * (math.log(f1) - math.log(f0)))
            break
    if rows[0][1] >= threshold:
        interp = rows[0][0]
    return {"factor": chosen, "interpolated": interp}


def measure_training_attack(model_path: str | Path, dataset_root: str | Path, *,
                            resolution: int, split: str = "train", seed: int = 0,
                            factors: Sequence[float] = TRAINING_ATTACK_LADDER
                            ) -> dict[str, Any]:
    """The JSON record of the training-side anchor on one model file (train and eval mode)."""
    from atat.data.loading import make_loader
    from atat.robustness import DefenseLogits
    from atat.training.train import load_model

    torch.manual_seed(seed)
    model, defense, ckpt = load_model(model_path, "cpu")
    loader = make_loader(dataset_root, split, resolution=resolution, batch_size=256,
                         train=False, normalize=True)
    xs, ys = zip(*loader)
    x_input, y = torch.cat(xs), torch.cat(ys)   # [-1, 1] input units, every image of the split
    net = DefenseLogits(model, defense)
    t0 = time.process_time()
    with torch.no_grad():
        clean = float((net.eval()(x_input).argmax(1) == y).float().mean())
    rec: dict[str, Any] = {
        "model": str(model_path), "model_id": ckpt.get("model_id"), "resolution": resolution,
        "split": split, "n_examples": len(y), "clean_accuracy_eval_mode": clean,
        "attack": "AT-AT's training PGD (targeted, atat.training.defense_defaults.ATAT_DEFAULTS"
                  " x factor), seed %d" % seed,
        "rule": "smallest factor with train-mode targeted success >= 0.5 "
                "(docs/decisions.md#one-ε-scale, revision 2)",
    }
    for mode in ("train", "eval"):
        rec[f"{mode}_mode"] = training_attack_success(
            net, x_input, y, n_classes=int(ckpt["n_classes"]), factors=factors, seed=seed,
            train_mode=(mode == "train"))
    rec["anchor"] = anchor_factor(rec["train_mode"])
    rec["anchor_eval_mode"] = anchor_factor(rec["eval_mode"])
    rec["cpu_seconds"] = time.process_time() - t0
    rec["host"] = f"{platform.node()} ({platform.processor() or platform.machine()})"
    rec["date"] = datetime.date.today().isoformat()
    rec["torch_version"] = torch.__version__
    return rec


def compare(a: dict[str, Any], b: dict[str, Any], target_resolution: int = 224
            ) -> dict[str, Any]:
    """The exponent of median radius ∝ resolution^-a from two records and the factor it
    implies from ``a``'s resolution to ``target_resolution``; also from the first-order
    radii."""
    out: dict[str, Any] = {"resolutions": [a["resolution"], b["resolution"]],
                           "target_resolution": target_resolution}
    ratio = math.log(b["resolution"] / a["resolution"])
    for name, qa, qb in (("pgd", a["radius_quantiles"], b["radius_quantiles"]),
                         ("first_order", a["first_order"]["radius_quantiles"],
                          b["first_order"]["radius_quantiles"])):
        rows = {}
        for q in qa:
            exponent = math.log(qa[q] / qb[q]) / ratio
            rows[q] = {"exponent": exponent,
                       "factor": (target_resolution / a["resolution"]) ** exponent}
        out[name] = rows
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model")
    ap.add_argument("--dataset-root", help="the dataset's private folder")
    ap.add_argument("--resolution", type=int, default=None,
                    help="default: the model file's resolution")
    ap.add_argument("--split", default="val")
    ap.add_argument("--n-examples", type=int, default=1024)
    ap.add_argument("--factor", type=float, nargs="+", default=[1.0])
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-autoattack", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("A_JSON", "B_JSON"))
    ap.add_argument("--training-attack", action="store_true",
                    help="AT-AT's training attack at each --factor on --split (default: the "
                         "ladder of docs/decisions.md#one-ε-scale, revision 2)")
    ap.add_argument("--target-resolution", type=int, default=224)
    args = ap.parse_args(argv)
    if args.compare:
        result = compare(io.read_json(args.compare[0]), io.read_json(args.compare[1]),
                         args.target_resolution)
    else:
        if not (args.model and args.dataset_root):
            ap.error("--model and --dataset-root are required (or --compare)")
        torch.set_num_threads(args.threads)
        resolution = args.resolution
        if resolution is None:
            resolution = int(io.torch_load(args.model)["resolution"])
        if args.training_attack:
            factors = (TRAINING_ATTACK_LADDER if args.factor == [1.0] else args.factor)
            result = measure_training_attack(args.model, args.dataset_root,
                                             resolution=resolution, split=args.split,
                                             seed=args.seed, factors=factors)
            text = json.dumps(result, indent=1, default=float)
            if args.out:
                io.write_text(args.out, text + "\n")
            print(text)
            return
        result = measure(args.model, args.dataset_root, resolution=resolution,
                         split=args.split, n_examples=args.n_examples, factors=args.factor,
                         steps=args.steps, iterations=args.iterations, seed=args.seed,
                         check_autoattack=args.check_autoattack)
    text = json.dumps(result, indent=1, default=float)
    if args.out:
        io.write_text(args.out, text + "\n")
    summary = {k: v for k, v in result.items() if k != "radii"}
    print(json.dumps(summary, indent=1, default=float))


if __name__ == "__main__":
    main()
