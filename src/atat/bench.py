"""`make bench`: every component measured against its limit, side by side in one run.

Each line compares the project's code path with a *reference* doing the same work on the same
model, data and thread count — a bare PyTorch loop written here, or the library called
directly — and prints the ratio with the goal of issue 16 beside it:

* ``train_step/<defense>``: one optimiser step through the defense's ``train_step`` (what
  :func:`atat.train.train` calls) vs a bare loop with the same model, batch, summed
  cross-entropy, Adam and PGD. Ratio = bare time / project time (throughput relative to the
  bare loop; goal ≥ 0.90).
* ``step_cost/atat_vs_nodef``: AT-AT step ÷ NoDef step, project and bare side by side
  (goal ≤ 4.6 with 5 PGD steps).
* ``train_job/nodef``: a whole :func:`atat.train.train` job (validation every epoch, the
  training-accuracy pass, checkpoints, data loading and augmentation) vs a bare loop over the
  same loader for the same epochs with no evaluation (goal ≥ 0.75); the line also gives the
  fraction of the job spent outside optimiser steps.
* ``autoattack/<attack>``: :func:`atat.robustness.evaluate_autoattack` vs ``pyautoattack``'s
  ``AutoAttack.run_standard_evaluation`` called directly with the same settings (goal ≥ 0.95).
* ``dry_run/<config>``: ``snakemake -n all`` wall time (goal ≤ 3 s for the paper DAG).

Timings on a shared machine are noisy: the project and the reference alternate within each
repeat (A B, then B A, ...), every line reports the median over repeats and the spread
(max/min − 1 of the per-repeat ratios), and only ratios are compared.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("train_step", "train_job", "autoattack", "dry_run")


@dataclasses.dataclass
class Row:
    """One line of the benchmark table."""

    component: str
    variant: str
    project_s: float            # median seconds per unit, project path
    reference_s: float          # median seconds per unit, reference path
    ratio: float                # median of per-repeat ratios (see `ratio_def`)
    spread: float               # max/min - 1 of the per-repeat ratios
    goal: str                   # e.g. ">= 0.90"
    ratio_def: str              # what the ratio is
    unit: str                   # what one timed unit is
    repeats: int
    note: str = ""

    @property
    def meets_goal(self) -> bool | None:
        if not self.goal:
            return None
        op, value = self.goal.split()
        return self.ratio >= float(value) if op == ">=" else self.ratio <= float(value)


# --------------------------------------------------------------------------- timing helpers
def _time(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(project: Callable[[], Any], reference: Callable[[], Any], repeats: int
                ) -> tuple[list[float], list[float]]:
    """Time both callables ``repeats`` times, alternating which goes first."""
    tp, tr = [], []
    for i in range(repeats):
        if i % 2 == 0:
            tp.append(_time(project))
            tr.append(_time(reference))
        else:
            tr.append(_time(reference))
            tp.append(_time(project))
    return tp, tr


def _summary(component: str, variant: str, tp: Sequence[float], tr: Sequence[float], *,
             per: float, goal: str, ratio_def: str, unit: str, note: str = "",
             ratio: Callable[[float, float], float] = lambda p, r: r / p) -> Row:
    ratios = [ratio(p, r) for p, r in zip(tp, tr)]
    return Row(component, variant, statistics.median(tp) / per, statistics.median(tr) / per,
               statistics.median(ratios), max(ratios) / min(ratios) - 1, goal, ratio_def, unit,
               len(tp), note)


# --------------------------------------------------------------------------- config
def demo_config() -> dict[str, Any]:
    """The embedded default (config/config.yaml overlaid with config/demo.yaml), validated."""
    from atat.config import load_config, validate_config

    cfg = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    validate_config(cfg)
    return cfg


def defense_variant(cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in cfg["defenses"][name].items() if k != "training"}


# --------------------------------------------------------------------------- bare loops
def bare_pgd(model: nn.Module, x: Tensor, labels: Tensor, *, epsilon: float, step_size: float,
             iterations: int, targeted: bool, generator: torch.Generator) -> Tensor:
    """L-inf PGD with random start in [-1, 1] input space, the textbook loop."""
    noise = (torch.rand(x.shape, generator=generator) * 2 - 1) * epsilon
    x_adv = (x + noise).clamp(-1, 1)
    for _ in range(iterations):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), labels)
        (grad,) = torch.autograd.grad(-loss if targeted else loss, x_adv)
        with torch.no_grad():
            x_adv = x + (x_adv + step_size * grad.sign() - x).clamp(-epsilon, epsilon)
            x_adv = x_adv.clamp(-1, 1)
    return x_adv.detach()


def bare_step(kind: str, params: Mapping[str, Any], n_classes: int
              ) -> Callable[[nn.Module, torch.optim.Optimizer, Tensor, Tensor, torch.Generator],
                            float]:
    """One optimiser step of NoDef / AT-AT / vanilla AT written as a bare PyTorch loop."""

    def step(model: nn.Module, opt: torch.optim.Optimizer, x: Tensor, y: Tensor,
             gen: torch.Generator) -> float:
        opt.zero_grad(set_to_none=True)
        if kind == "nodef":
            loss = F.cross_entropy(model(x), y, reduction="sum")
        else:
            targeted = kind == "atat"
            if targeted:
                t = torch.randint(0, n_classes, y.shape, generator=gen)
                labels = torch.where(t == y, (t + 1) % n_classes, t)
            else:
                labels = y
            x_adv = bare_pgd(model, x, labels, epsilon=params["epsilon"],
                             step_size=params["step_size"], iterations=params["iterations"],
                             targeted=targeted, generator=gen)
            loss = params["weight_adv"] * F.cross_entropy(model(x_adv), labels, reduction="sum")
            if params["weight_clean"] > 0:
                loss = loss + params["weight_clean"] * F.cross_entropy(model(x), y,
                                                                       reduction="sum")
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


# --------------------------------------------------------------------------- components
def _adam(cfg: Mapping[str, Any], params: Any) -> torch.optim.Optimizer:
    t = cfg["training"]
    return torch.optim.Adam(params, lr=t["lr"], betas=tuple(t["betas"]),
                            weight_decay=t["weight_decay"])


def bench_train_steps(cfg: Mapping[str, Any], *, defenses: Sequence[str] = ("nodef", "atat", "at"),
                      steps: int = 3, repeats: int = 5, batch_size: int | None = None
                      ) -> list[Row]:
    """Project ``train_step`` vs the bare loop, per defense; then AT-AT ÷ NoDef."""
    from atat.defenses import ModelContext, StepContext, build_defense
    from atat.models import build_model

    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    bs = int(batch_size or cfg["training"]["batch_size"])
    g = torch.Generator().manual_seed(0)
    x = torch.rand(bs, 3, res, res, generator=g) * 2 - 1
    y = torch.randint(0, n_classes, (bs,), generator=g)
    rows, per_step = [], {}
    for name in defenses:
        variant = defense_variant(cfg, name)
        defense = build_defense(variant, n_classes, context=ModelContext("resnet18", res))
        torch.manual_seed(0)
        net_p = defense.build_model(build_model("resnet18", n_classes))
        net_r = copy.deepcopy(net_p)
        net_p.train()
        net_r.train()
        opt_p = _adam(cfg, defense.trainable_parameters(net_p))
        opt_r = _adam(cfg, net_r.parameters())
        gen_p, gen_r = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        ref = bare_step(variant["type"], defense.params, n_classes)
        counter = {"step": 0}

        def project() -> None:
            for _ in range(steps):
                ctx = StepContext(epoch=0, step=counter["step"], n_classes=n_classes,
                                  generator=gen_p, steps_per_epoch=100)
                defense.train_step(net_p, opt_p, x, y, ctx)
                counter["step"] += 1

        def reference() -> None:
            for _ in range(steps):
                ref(net_r, opt_r, x, y, gen_r)

        project(), reference()  # warm-up (allocator, Adam state)
        tp, tr = interleaved(project, reference, repeats)
        per_step[name] = (tp, tr)
        rows.append(_summary("train_step", name, tp, tr, per=steps, goal=">= 0.90",
                             ratio_def="bare s/step ÷ project s/step",
                             unit=f"step, batch {bs}, {res}px, resnet18"))
    if "nodef" in per_step and "atat" in per_step:
        (p_no, r_no), (p_at, r_at) = per_step["nodef"], per_step["atat"]
        iters = defense_variant(cfg, "atat").get("iterations", 5)
        bare_ratio = statistics.median(r_at) / statistics.median(r_no)
        rows.append(_summary("step_cost", "atat_vs_nodef", p_at, p_no, per=steps, goal="<= 4.6",
                             ratio_def="project AT-AT step ÷ project NoDef step",
                             unit=f"step ({iters} PGD steps)",
                             note=f"bare loop: {bare_ratio:.2f}", ratio=lambda a, n: a / n))
    return rows


def bench_dataset(cache: Path, cfg: Mapping[str, Any]) -> Path:
    """The demo's private synthfaces pool, rendered once into ``cache``."""
    from atat.data.synthfaces import generate_synthfaces

    ds = cfg["datasets"]["synthfaces"]
    syn = ds["synthetic"]
    out = cache / f"synthfaces-{ds['resolution']}px"
    if not (out / "private").exists():
        generate_synthfaces(out, resolution=int(ds["resolution"]),
                            n_private_identities=int(syn["n_private_identities"]),
                            n_public_identities=1, images_per_identity=int(syn["images_per_identity"]),
                            public_images_per_identity=1, seed=int(syn["seed"]), progress=False)
    return out / "private"


def bench_train_job(cfg: Mapping[str, Any], cache: Path, *, epochs: int = 2, repeats: int = 3,
                    step_rows: Sequence[Row] = ()) -> list[Row]:
    """A whole NoDef training job through :func:`atat.train.train` vs a bare epoch loop."""
    from atat.data.loading import make_loader
    from atat.defenses import ModelContext, build_defense
    from atat.models import build_model
    from atat.train import TrainSpec, train

    root = bench_dataset(cache, cfg)
    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    training = dict(cfg["training"], epochs=epochs, lr_milestones=[epochs + 1],
                    checkpoint_every=1)
    variant = defense_variant(cfg, "nodef")
    work = Path(tempfile.mkdtemp(prefix="job-", dir=cache))
    counter = {"i": 0}

    def project() -> None:
        counter["i"] += 1
        spec = TrainSpec(model_id=f"bench/nodef/{counter['i']}", dataset_root=str(root),
                         resolution=res, n_classes=n_classes, architecture="resnet18",
                         defense=variant, training=training, augmentation=cfg["augmentation"],
                         seed=0)
        d = work / str(counter["i"])
        train(spec, out_model=d / "model.pt", out_metrics=d / "metrics.json",
              resume_path=d / "resume.pt", progress=False)

    def reference() -> None:
        torch.manual_seed(0)
        defense = build_defense(variant, n_classes, context=ModelContext("resnet18", res))
        aug = defense.train_augmentation(cfg["augmentation"])
        loader = make_loader(str(root), "train", resolution=res, batch_size=training["batch_size"],
                             train=True, aug=aug, generator=torch.Generator().manual_seed(0),
                             num_workers=training["num_workers"])
        net = build_model("resnet18", n_classes)
        net.train()
        opt = _adam(cfg, net.parameters())
        step = bare_step("nodef", {}, n_classes)
        gen = torch.Generator().manual_seed(1)
        for _ in range(epochs):
            for x, y in loader:
                step(net, opt, x, y, gen)

    tp, tr = interleaved(project, reference, repeats)
    note = ""
    loader = make_loader(str(root), "train", resolution=res, batch_size=training["batch_size"],
                         train=True)
    n_steps = len(loader) * epochs
    step_row = next((r for r in step_rows if r.component == "train_step" and r.variant == "nodef"),
                    None)
    if step_row is not None:
        inside = n_steps * step_row.project_s / statistics.median(tp)
        note = (f"{n_steps} steps x {step_row.project_s:.3f} s = {100 * inside:.0f}% of the job; "
                f"the rest is evaluation, training-accuracy pass, checkpoints, data")
    return [_summary("train_job", "nodef", tp, tr, per=1, goal=">= 0.75",
                     ratio_def="bare job s ÷ project job s",
                     unit=f"job, {epochs} epochs, {n_steps} steps", note=note)]


def bench_autoattack(cfg: Mapping[str, Any], *, n_examples: int | None = None,
                     epsilon: float | None = None, repeats: int = 3) -> list[Row]:
    """The project's AutoAttack wrapper vs pyautoattack called directly, per attack."""
    from pyautoattack import AutoAttack

    from atat.models import build_model
    from atat.robustness import NormalizedModel, evaluate_autoattack

    aa = cfg["autoattack"]
    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    n = int(n_examples or aa["n_examples"])
    eps = float(epsilon if epsilon is not None else aa["epsilons"][1])
    torch.manual_seed(0)
    net = NormalizedModel(build_model("resnet18", n_classes)).eval()
    x = torch.rand(n, 3, res, res, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = net(x).argmax(1)  # every example correct when clean: every attack does full work
    settings = aa.get("settings") or {}
    groups = {"apgd": "apgd", "apgd_t": "apgd_targeted", "fab": "fab", "square": "square"}
    rows = []
    for attack in aa["attacks"]:
        def project() -> None:
            evaluate_autoattack(net, x, y, epsilon=eps, attacks=(attack,), version=aa["version"],
                                settings=settings or None, batch_size=int(aa["batch_size"]),
                                seed=int(aa["seed"]), normalize=False)

        def reference() -> None:
            adv = AutoAttack(net, norm="Linf", eps=eps, version="standard", seed=int(aa["seed"]),
                             device="cpu")
            if aa["version"] == "custom":
                for group, values in settings.items():
                    for key, val in values.items():
                        setattr(getattr(adv, groups[group]), key, val)
            adv.attacks_to_run = [attack]
            adv.run_standard_evaluation(x, y, batch_size=int(aa["batch_size"]))

        tp, tr = interleaved(project, reference, repeats)
        rows.append(_summary("autoattack", attack, tp, tr, per=n, goal=">= 0.95",
                             ratio_def="direct s ÷ project s",
                             unit=f"example, eps {eps:g}, {aa['version']} settings"))
    return rows


def _snakemake_dry_run(args: Sequence[str]) -> None:
    subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "all", *args], cwd=ROOT,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bench_dry_run(*, repeats: int = 3) -> list[Row]:
    """Wall time of ``snakemake -n all`` on the paper grid and on the demo (absolute: no
    reference path exists, so the 'ratio' is the time itself, goal ≤ 3 s for the paper)."""
    rows = []
    for variant, args, goal in (("paper", [], "<= 3"),
                                ("demo", ["--configfile", "config/demo.yaml"], "")):
        times = [_time(lambda: _snakemake_dry_run(args)) for _ in range(repeats)]
        med = statistics.median(times)
        rows.append(Row("dry_run", variant, med, float("nan"), med, max(times) / min(times) - 1,
                        goal, "seconds (absolute)", "snakemake -n all", repeats))
    return rows


# --------------------------------------------------------------------------- output
def format_table(rows: Sequence[Row]) -> str:
    head = ("component", "variant", "project s", "ref s", "ratio", "spread", "goal", "ok",
            "ratio is", "note")
    lines = [head]
    for r in rows:
        ok = {None: "", True: "yes", False: "NO"}[r.meets_goal]
        lines.append((r.component, r.variant, f"{r.project_s:.4g}", f"{r.reference_s:.4g}",
                      f"{r.ratio:.3f}", f"±{100 * r.spread:.0f}%", r.goal, ok, r.ratio_def,
                      r.note))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in lines)


def write_csv(rows: Sequence[Row], path: Path, meta: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [f.name for f in dataclasses.fields(Row)] + ["meets_goal", *meta]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({**dataclasses.asdict(r), "meets_goal": r.meets_goal, **meta})
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(COMPONENTS),
                    help=f"comma-separated subset of {','.join(COMPONENTS)}")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (the demo runs one thread per job)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes (batch 8, 8 AutoAttack examples, 1 epoch): checks that the "
                         "benchmark runs, numbers not meaningful")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "bench.csv"))
    ap.add_argument("--cache", default=str(ROOT / "results" / "bench" / "cache"))
    args = ap.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    bad = sorted(set(only) - set(COMPONENTS))
    if bad:
        ap.error(f"unknown component(s) {bad}; choose from {list(COMPONENTS)}")
    torch.set_num_threads(args.threads)
    cfg = demo_config()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    if "train_step" in only:
        rows += bench_train_steps(cfg, repeats=args.repeats, steps=1 if args.quick else 3,
                                  batch_size=8 if args.quick else None)
        print(format_table(rows), flush=True)
    if "train_job" in only:
        rows += bench_train_job(cfg, cache, epochs=1 if args.quick else 2,
                                repeats=max(1, args.repeats // 2 + 1) if not args.quick else 1,
                                step_rows=rows)
    if "autoattack" in only:
        rows += bench_autoattack(cfg, n_examples=8 if args.quick else None,
                                 repeats=max(1, args.repeats // 2 + 1) if not args.quick else 1)
    if "dry_run" in only:
        rows += bench_dry_run(repeats=1 if args.quick else 3)
    meta = {"date": time.strftime("%Y-%m-%d"), "threads": args.threads, "quick": args.quick,
            "torch": torch.__version__, "cpus": os.cpu_count()}
    write_csv(rows, Path(args.out), meta)
    print()
    print(format_table(rows))
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
