"""`make bench-gpu`: the paper config's shapes, timed on the device (issue 16 §3).

Where `make bench` compares the project with bare references at the demo's shapes, this measures
what a GPU session needs to plan the paper grid, at ``config/config.yaml``'s shapes (FaceScrub:
ResNet-152 at 224 px, 530 classes, batch 128; the FFHQ StyleGAN2 at 1024 px with PPA's 800 px
centre crop), random weights (no artefact needed):

* ``train/<defense>/<variant>``: training images/s of NoDef and AT-AT (the paper's 5-step PGD)
  through the defense's own ``train_step``. ``fp32`` is the paper's setting (PyTorch's default
  backend flags, as the authors trained); the GPU speed-ups that change the numerics are
  measured beside it: ``channels_last`` (the opt-in config key ``training.memory_format:
  channels_last``), ``bf16_autocast`` (``training.autocast: bf16``: bfloat16 autocast over the
  step, AT-AT's PGD kept in float32 without autocast, as in a training job; both through
  :mod:`atat.base.precision`, the helpers the training loop uses) and ``compile`` (``torch.compile``,
  only with ``--with-compile``: minutes of compilation; not a config key). Each line gives
  the speed-up over ``fp32`` and how far the first step's loss moved (``|Δ loss|``).
* ``autoattack/eps<ε>``: standard AutoAttack images/s at each of the config's ε, estimated
  per attack from two short runs (``--aa-iters`` and twice as many iterations or Square
  queries, one target class): their difference gives the time per iteration, the rest is the
  fixed cost; fixed + the standard version's iterations x targets x time per iteration. On images
  labelled by the model's own predictions (all clean-correct: every attack does its full
  work). An upper bound of the time: a real model loses some images early in Square.
* ``ppa/optimisation``: PPA's optimisation step (render at 1024 px, crop, resize, random
  resized crop, target forward and backward, Adam) on a batch of ``inversion.ppa.batch_size``
  latents: images·steps/s, and seconds per attacked image for the config's ``steps``
  (the candidate search and final selection not included).
* ``tf32/<where>``: whether TF32 is off in every forward inside PGD (AT-AT's training step;
  also autocast off there under ``bf16_autocast``) and AutoAttack, and the backend flags of the
  training forwards around them (as configured: PyTorch's defaults). Pass/fail lines; on CPU
  the flags are read the same way, but TF32 does not exist there.

``--quick`` shrinks every shape (a check that the benchmark runs; numbers not meaningful).
Table on the terminal, CSV in ``results/bench/bench_gpu.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from atat.plan.config import defense_params
from atat.inversion.stylegan2 import OFFICIAL_PRIOR_KWARGS

ROOT = Path(__file__).resolve().parents[3]
TRAIN_VARIANTS = ("fp32", "channels_last", "bf16_autocast", "compile")
#: standard AutoAttack's work per attack: (iterations or queries, target classes, restarts)
STANDARD_WORK = {"apgd-ce": (100, 1, 1), "apgd-t": (100, 9, 1), "fab-t": (100, 9, 1),
                 "square": (5000, 1, 1)}


@dataclasses.dataclass(frozen=True)
class Shapes:
    """The measured shapes; :func:`paper_shapes` reads them from the config."""

    architecture: str
    resolution: int
    n_classes: int
    batch_size: int
    aa_examples: int
    gen_resolution: int
    center_crop: int | None
    ppa_batch: int
    ppa_steps: int
    generator_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Line:
    component: str
    variant: str
    value: float
    unit: str
    speedup: float | None = None
    passed: bool | None = None
    note: str = ""


def paper_config() -> dict[str, Any]:
    from atat.plan.config import load_config, validate_config

    cfg = load_config(ROOT / "config" / "config.yaml")
    validate_config(cfg)
    return cfg


def paper_shapes(cfg: Mapping[str, Any], dataset: str = "facescrub",
                 architecture: str = "resnet152") -> Shapes:
    """FaceScrub with ResNet-152 (the paper's main cell) and its prior (FFHQ, 1024 px)."""
    ds = cfg["datasets"][dataset]
    gen = cfg["generators"][ds["generator"]]
    ppa = cfg["inversion"]["ppa"]
    return Shapes(architecture=architecture, resolution=int(ds["resolution"]),
                  n_classes=int(ds["n_classes"]), batch_size=int(cfg["training"]["batch_size"]),
                  aa_examples=int(cfg["autoattack"]["batch_size"]), gen_resolution=1024,
                  center_crop=gen.get("center_crop"), ppa_batch=int(ppa["batch_size"]),
                  ppa_steps=int(ppa["steps"]), generator_kwargs=OFFICIAL_PRIOR_KWARGS)


def quick_shapes() -> Shapes:
    return Shapes(architecture="resnet18", resolution=32, n_classes=10, batch_size=4,
                  aa_examples=4, gen_resolution=32, center_crop=None, ppa_batch=2, ppa_steps=50,
                  generator_kwargs=dict(z_dim=16, c_dim=0, w_dim=16, img_channels=3,
                                        mapping_kwargs=dict(num_layers=2),
                                        synthesis_kwargs=dict(channel_base=256, channel_max=16)))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t)
    return out


# ------------------------------------------------------------------ TF32 spies
class _FlagSpy(nn.Module):
    """Records :func:`atat.base.precision.tf32_disabled` at every forward of the wrapped model."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.seen: list[bool] = []

    def forward(self, x: Tensor) -> Tensor:
        from atat.base.precision import tf32_disabled

        self.seen.append(tf32_disabled())
        return self.inner(x)


@contextlib.contextmanager
def _spy_pgd(record: list[bool]) -> Iterator[None]:
    """Route AT-AT's PGD through a model wrapper that records per forward whether it ran in
    exact float32 (TF32 off and autocast off)."""
    import atat.training.defenses.atat as atat_defense
    from atat.base.precision import autocast_enabled, tf32_disabled

    original = atat_defense.pgd

    def spied(model: Callable[[Tensor], Tensor], *args: Any, **kwargs: Any) -> Tensor:
        def recorded(z: Tensor) -> Tensor:
            record.append(tf32_disabled() and not autocast_enabled())
            return model(z)
        return original(recorded, *args, **kwargs)

    atat_defense.pgd = spied
    try:
        yield
    finally:
        atat_defense.pgd = original


def _flags_text() -> str:
    b = torch.backends
    try:
        return (f"cudnn.allow_tf32={b.cudnn.allow_tf32} "
                f"cuda.matmul.allow_tf32={b.cuda.matmul.allow_tf32}")
    except RuntimeError:
        return "fp32_precision API in use"


# ------------------------------------------------------------------ training
def bench_training(cfg: Mapping[str, Any], shapes: Shapes, device: torch.device, *,
                   variants: Sequence[str], steps: int, repeats: int) -> list[Line]:
    from atat.training.defenses import ModelContext, StepContext, build_defense
    from atat.training.models import build_model
    from atat.base.precision import memory_format, training_autocast

    g = torch.Generator().manual_seed(0)
    x0 = (torch.rand(shapes.batch_size, 3, shapes.resolution, shapes.resolution, generator=g)
          * 2 - 1).to(device)
    y = torch.randint(0, shapes.n_classes, (shapes.batch_size,), generator=g).to(device)
    t = cfg["training"]
    lines: list[Line] = []
    for name in ("nodef", "atat"):
        variant = defense_params(cfg, name)
        base_rate = base_loss = None
        for kind in variants:
            defense = build_defense(variant, shapes.n_classes,
                                    context=ModelContext(shapes.architecture, shapes.resolution))
            torch.manual_seed(0)
            net = defense.build_model(build_model(shapes.architecture, shapes.n_classes))
            net = net.to(device).train()
            x = x0
            if kind == "channels_last":
                fmt = memory_format("channels_last")
                net = net.to(memory_format=fmt)
                x = x0.contiguous(memory_format=fmt)
            spy = _FlagSpy(net)
            model: nn.Module = torch.compile(spy) if kind == "compile" else spy
            opt = torch.optim.Adam(defense.trainable_parameters(net), lr=t["lr"],
                                   betas=tuple(t["betas"]), weight_decay=t["weight_decay"])
            gen = torch.Generator().manual_seed(1)
            counter = {"step": 0, "loss": None}
            pgd_flags: list[bool] = []

            def step() -> None:
                ctx = StepContext(epoch=0, step=counter["step"], n_classes=shapes.n_classes,
                                  generator=gen, steps_per_epoch=100)
                amp = training_autocast(device, "bf16" if kind == "bf16_autocast" else None)
                with amp, _spy_pgd(pgd_flags):
                    loss, _ = defense.training_loss(model, x, y, ctx)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if counter["loss"] is None:
                    counter["loss"] = float(loss.detach()) / len(y)
                counter["step"] += 1

            step()  # warm-up (and compilation); its loss is the numerics check
            times = _timed(lambda: [step() for _ in range(steps)], device, repeats)
            rate = shapes.batch_size * steps / statistics.median(times)
            loss0 = counter["loss"]
            if kind == "fp32":
                base_rate, base_loss = rate, loss0
            note = "" if base_loss is None or kind == "fp32" else \
                f"|Δ loss| at step 1 = {abs(loss0 - base_loss):.2e}"
            if kind == "bf16_autocast" and name == "atat":
                lines.append(Line("tf32", "pgd under bf16 autocast (AT-AT training step)",
                                  float(len(pgd_flags)), "forwards checked",
                                  passed=bool(pgd_flags) and all(pgd_flags),
                                  note="TF32 and autocast off in every PGD forward"))
            lines.append(Line("train", f"{name}/{kind}", rate, "images/s",
                              speedup=rate / base_rate if base_rate else None, note=note.strip("; ")))
            if kind == "fp32":
                n_pgd = len(pgd_flags)
                training_flags = list(spy.seen)
                if name == "atat":
                    lines.append(Line("tf32", "pgd (AT-AT training step)", float(n_pgd),
                                      "forwards checked", passed=bool(pgd_flags) and all(pgd_flags),
                                      note="TF32 off in every PGD forward"))
                lines.append(Line(
                    "tf32", f"training forwards ({name})", float(len(training_flags)),
                    "forwards checked", note=f"outside the attacks: {_flags_text()} (PyTorch's "
                    f"defaults, as the authors trained); TF32 disabled there: "
                    f"{all(training_flags) if training_flags else 'n/a'}"))
    return lines


# ------------------------------------------------------------------ AutoAttack
def bench_autoattack(cfg: Mapping[str, Any], shapes: Shapes, device: torch.device, *,
                     iters: int, repeats: int, epsilons: Sequence[float] | None = None
                     ) -> list[Line]:
    from atat.training.models import build_model
    from atat.robustness import NormalizedModel, evaluate_autoattack

    aa = cfg["autoattack"]
    torch.manual_seed(0)
    net = NormalizedModel(build_model(shapes.architecture, shapes.n_classes)).to(device).eval()
    spy = _FlagSpy(net).eval()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(shapes.aa_examples, 3, shapes.resolution, shapes.resolution, generator=g)
    with torch.no_grad():
        y = net(x.to(device)).argmax(1).cpu()
    def short(n: int) -> dict[str, dict[str, Any]]:
        return {"apgd": {"n_iter": n, "n_restarts": 1},
                "apgd_t": {"n_iter": n, "n_target_classes": 1, "n_restarts": 1},
                "fab": {"n_iter": n, "n_target_classes": 1, "n_restarts": 1},
                "square": {"n_queries": n, "p_init": 0.8}}

    lines = []
    for eps in (aa["epsilons"] if epsilons is None else epsilons):
        standard_s, parts = 0.0, []
        for attack in aa["attacks"]:
            def run(n: int, attack: str = attack) -> None:
                evaluate_autoattack(spy, x, y, epsilon=float(eps), attacks=(attack,),
                                    version="custom", settings=short(n),
                                    batch_size=shapes.aa_examples, seed=int(aa["seed"]),
                                    device=device, normalize=False,
                                    precision=aa.get("precision", "fp32"))
            run(iters)  # warm-up
            t1 = statistics.median(_timed(lambda: run(iters), device, repeats))
            t2 = statistics.median(_timed(lambda: run(2 * iters), device, repeats))
            per_unit = max(t2 - t1, 0.0) / iters      # one iteration (query) of one target
            fixed = max(t1 - per_unit * iters, 0.0)   # clean pass, library checks, set-up
            work = _standard_work(attack, shapes.n_classes)
            standard_s += fixed + per_unit * work
            parts.append(f"{attack} {fixed:.2f} s + {work} x {per_unit * 1e3:.1f} ms")
        lines.append(Line("autoattack", f"eps{eps:g}", shapes.aa_examples / standard_s,
                          "images/s (standard, estimated)",
                          note=f"per attack: fixed + standard work x time per iteration, from "
                               f"{iters}- and {2 * iters}-iteration runs ({'; '.join(parts)}); "
                               f"every image stays robust: an upper bound of the time"))
    lines.append(Line("tf32", "autoattack", float(len(spy.seen)), "forwards checked",
                      passed=bool(spy.seen) and all(spy.seen),
                      note=f"TF32 off in every AutoAttack forward (precision "
                           f"{aa.get('precision', 'fp32')})"))
    return lines


def _standard_work(attack: str, n_classes: int) -> int:
    """Iterations (queries) x target classes x restarts of ``attack`` in standard AutoAttack."""
    iters, targets, restarts = STANDARD_WORK[attack]
    return iters * min(targets, n_classes - 1) * restarts


# ------------------------------------------------------------------ PPA
def bench_ppa(cfg: Mapping[str, Any], shapes: Shapes, device: torch.device, *, steps: int,
              repeats: int) -> list[Line]:
    from atat.training.defenses import ModelContext, build_defense
    from atat.inversion import core
    from atat.inversion.run import TargetLogits
    from atat.inversion.stylegan2 import Generator
    from atat.training.models import build_model

    p = cfg["inversion"]["ppa"]
    torch.manual_seed(0)
    G = Generator(img_resolution=shapes.gen_resolution, **shapes.generator_kwargs)
    G = G.to(device).eval().requires_grad_(False)
    variant = defense_params(cfg, "nodef")
    defense = build_defense(variant, shapes.n_classes,
                            context=ModelContext(shapes.architecture, shapes.resolution))
    target = TargetLogits(defense.build_model(build_model(shapes.architecture, shapes.n_classes)),
                          defense).to(device).eval()
    target.requires_grad_(False)
    crop = shapes.center_crop if shapes.center_crop and shapes.center_crop < shapes.gen_resolution \
        else None
    tf = core.attack_transform(crop, shapes.resolution, p["rrc_scale"], p["rrc_ratio"])
    loss_fn = core.identity_loss(p["loss"])
    with torch.no_grad():
        w = G.mapping(torch.randn(shapes.ppa_batch, G.z_dim, device=device), None)[:, 0]
    targets = torch.arange(shapes.ppa_batch, device=device) % shapes.n_classes

    def run() -> None:
        core.optimize_w(G, target, w, targets, steps=steps, lr=float(p["lr"]), betas=p["betas"],
                        transform=tf, loss_fn=loss_fn)

    run()  # warm-up
    rate = shapes.ppa_batch * steps / statistics.median(_timed(run, device, repeats))
    return [Line("ppa", "optimisation", rate, "images x steps/s",
                 note=f"{shapes.gen_resolution} px generator, batch {shapes.ppa_batch}; "
                      f"{shapes.ppa_steps} steps per attacked image = "
                      f"{shapes.ppa_steps / rate:.2f} s per image (search and final selection "
                      f"not included)")]


# ------------------------------------------------------------------ table
def format_table(lines: Sequence[Line]) -> str:
    head = ["component", "variant", "value", "unit", "speed-up", "check", "note"]
    rows = [[ln.component, ln.variant, f"{ln.value:.3g}", ln.unit,
             "" if ln.speedup is None else f"{ln.speedup:.2f}x",
             "" if ln.passed is None else ("pass" if ln.passed else "FAIL"), ln.note]
            for ln in lines]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  " + head[-1]]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return "\n".join(out)


def write_csv(lines: Sequence[Line], path: Path, meta: Mapping[str, Any]) -> None:
    from atat.base import io

    io.write_csv_rows(path, [f.name for f in dataclasses.fields(Line)] + list(meta),
                      ({**dataclasses.asdict(ln), **meta} for ln in lines))


COMPONENTS = ("train", "autoattack", "ppa")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.bench_gpu",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default=",".join(COMPONENTS),
                    help=f"comma-separated subset of {','.join(COMPONENTS)}")
    ap.add_argument("--quick", action="store_true",
                    help="tiny shapes (ResNet-18 at 32 px, a 32 px generator), one step, one "
                         "repeat, AutoAttack at the first epsilon: does it run")
    ap.add_argument("--steps", type=int, default=5, help="training / PPA steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--aa-iters", type=int, default=10,
                    help="iterations (queries for Square) of each attack's short run")
    ap.add_argument("--with-compile", action="store_true",
                    help="also time torch.compile (minutes of compilation)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench" / "bench_gpu.csv"))
    args = ap.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    bad = sorted(set(only) - set(COMPONENTS))
    if bad:
        ap.error(f"unknown component(s) {bad}; choose from {list(COMPONENTS)}")
    device = torch.device(args.device)
    cfg = paper_config()
    shapes = quick_shapes() if args.quick else paper_shapes(cfg)
    steps = 1 if args.quick else args.steps
    repeats = 1 if args.quick else args.repeats
    variants = [v for v in TRAIN_VARIANTS if v != "compile" or args.with_compile]
    print(f"bench-gpu on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}),"
          f" shapes {shapes}", flush=True)
    lines: list[Line] = []
    if "train" in only:
        lines += bench_training(cfg, shapes, device, variants=variants, steps=steps,
                                repeats=repeats)
        print(format_table(lines), flush=True)
    if "autoattack" in only:
        lines += bench_autoattack(cfg, shapes, device, iters=2 if args.quick else args.aa_iters,
                                  repeats=repeats,
                                  epsilons=cfg["autoattack"]["epsilons"][:1] if args.quick else None)
    if "ppa" in only:
        lines += bench_ppa(cfg, shapes, device, steps=steps, repeats=repeats)
    meta = {"date": time.strftime("%Y-%m-%d"), "device": str(device), "quick": args.quick,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else ""}
    write_csv(lines, Path(args.out), meta)
    print()
    print(format_table(lines))
    print(f"\nwritten: {args.out}")
    failed = [ln for ln in lines if ln.passed is False]
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
