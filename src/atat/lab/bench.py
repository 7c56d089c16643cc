"""`make bench`: every component measured against its limit, side by side in one run.

Each line compares the project's code path with a *reference* doing the same work on the same
model, data and thread count — a bare PyTorch loop written here, or the library called
directly — and prints the ratio with the goal of issue 16 beside it:

* ``train_step/<defense>``: one optimiser step through the defense's ``train_step`` (what
  :func:`atat.training.train.train` calls) vs a bare loop with the same model, batch, summed
  cross-entropy, Adam and PGD. Ratio = bare time / project time (throughput relative to the
  bare loop; goal ≥ 0.90).
* ``step_cost/atat_vs_nodef``: AT-AT step ÷ NoDef step, project and bare side by side
  (goal ≤ 4.6 with 5 PGD steps).
* ``train_job/nodef``: a whole :func:`atat.training.train.train` job (validation every epoch, the
  training-accuracy pass, checkpoints, data loading and augmentation) vs a bare loop over the
  same loader for the same epochs with no evaluation (goal ≥ 0.75); the line also gives the
  fraction of the job spent outside optimiser steps.
* ``autoattack/<attack>``: :func:`atat.robustness.evaluate_autoattack` vs ``pyautoattack``'s
  ``AutoAttack.run_standard_evaluation`` called directly with the same settings (goal ≥ 0.95).
* ``autoattack_layout``: rule autoattack's two job layouts (``autoattack.job``) for one
  model, each job a fresh process as Snakemake starts it: every ε in one process vs one
  process per ε, in CPU seconds of the processes (no goal in issue 16; the ratio is what
  ``per_model`` saves per model).
* ``inversion/<attack>``: one PPA / IF-GMI / PPDG job at the demo's settings (random networks
  of the demo's shapes, so no trained artefact is needed; a few of the classes), seconds per
  final image; ``inversion/<attack>/<part>``: the share of that time spent in the generator,
  the target model, the attack's augmentations, the scorer (evaluation model + face
  embedding, real-image embedding included), the final selection (everything inside it),
  PPDG's perceptual network and discriminator, and the rest (forward and backward of each
  network, timed through hooks and autograd markers; the attack code is not changed).
  No reference path exists: the split says where a speed-up can come from.
* ``inversion_speedups/<change>``: each exact inversion speed-up of issue 16 (IF-GMI's and
  PPDG's per-class batches in lockstep, PPDG's round-1 candidate search once per job, the
  real-image embeddings made once per dataset) vs the same job without it, in CPU seconds,
  with how far the results moved (:func:`bench_inversion_speedups`).
* ``dry_run/<config>``: ``snakemake -n all`` in CPU seconds (user + sys of the process; goal
  ≤ 3 CPU-s for the paper's DAG) against a *reference workflow* with the same DAG: every job of
  ``all`` from empty, each rule with the project's output patterns (wildcard constraints
  included) and, as its only input function, one lookup of the job's input files in a table
  -- no params, resources, logs, benchmarks, conda environments, config checks or project
  imports (:func:`reference_workflow`). Both run from an empty working directory, after one
  run not counted (the config check's marker, bytecode), alternating. Ratio = reference CPU-s
  / project CPU-s: the share of the dry run that is Snakemake's own work on this DAG (its
  jobs, files and edges); the rest is the project's (its functions, and the Snakemake
  machinery each params/resources function costs per job). A trivial Snakefile with the same
  number of jobs would leave out the edges and files Snakemake must match, and the workflow
  without its input functions would plan another DAG: the reference is the one DAG with the
  project taken out.

Timings on a shared machine are noisy: the project and the reference alternate within each
repeat (A B, then B A, ...), every line reports the median over repeats and the spread
(max/min − 1 of the per-repeat ratios), and only ratios are compared.
"""

from __future__ import annotations

import argparse
import copy
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

from atat.plan.config import defense_params

ROOT = Path(__file__).resolve().parents[3]
COMPONENTS = ("train_step", "train_job", "autoattack", "autoattack_layout", "inversion",
              "inversion_speedups", "prior_fir", "dry_run")


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
    from atat.plan.config import load_config, validate_config

    cfg = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    validate_config(cfg)
    return cfg


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
    from atat.training.defenses import ModelContext, StepContext, build_defense
    from atat.training.models import build_model

    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    bs = int(batch_size or cfg["training"]["batch_size"])
    g = torch.Generator().manual_seed(0)
    x = torch.rand(bs, 3, res, res, generator=g) * 2 - 1
    y = torch.randint(0, n_classes, (bs,), generator=g)
    rows, per_step = [], {}
    for name in defenses:
        variant = defense_params(cfg, name)
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
        iters = defense_params(cfg, "atat").get("iterations", 5)
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


def bench_train_job(cfg: Mapping[str, Any], cache: Path, *, epochs: int | None = None,
                    repeats: int = 3, step_rows: Sequence[Row] = ()) -> list[Row]:
    """A whole NoDef training job through :func:`atat.training.train.train` vs a bare epoch loop.

    ``epochs=None``: the demo's recipe as its jobs run it (``training.epochs``,
    ``lr_milestones``, ``eval_every``, ``checkpoint_every``), so the per-job costs (set-up, the
    test pass, the final save) weigh as much as in the demo; a number of epochs: that many,
    with a resume file every epoch (the --quick check)."""
    from atat.data.loading import make_loader
    from atat.training.defenses import ModelContext, build_defense
    from atat.training.models import build_model
    from atat.training.train import TrainSpec, train

    root = bench_dataset(cache, cfg)
    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    training = dict(cfg["training"])
    if epochs is not None:
        training.update(epochs=epochs, lr_milestones=[epochs + 1], checkpoint_every=1)
    epochs = int(training["epochs"])
    variant = defense_params(cfg, "nodef")
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
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(
            training["lr_milestones"]), gamma=float(training.get("lr_gamma", 0.1)))
        for _ in range(epochs):
            for x, y in loader:
                step(net, opt, x, y, gen)
            sched.step()

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
                     unit=f"job, {epochs} epochs, {n_steps} steps, resume file every "
                          f"{training['checkpoint_every']}", note=note)]


def bench_autoattack(cfg: Mapping[str, Any], *, n_examples: int | None = None,
                     epsilon: float | None = None, repeats: int = 3) -> list[Row]:
    """The project's AutoAttack wrapper vs pyautoattack called directly: per attack, and the
    whole job (every attack in one call) against one direct call per attack."""
    from pyautoattack import AutoAttack

    from atat.training.models import build_model
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
    direct: dict[str, Callable[[], None]] = {}

    def run_project(attacks: tuple[str, ...]) -> None:
        evaluate_autoattack(net, x, y, epsilon=eps, attacks=attacks, version=aa["version"],
                            settings=settings or None, batch_size=int(aa["batch_size"]),
                            seed=int(aa["seed"]), normalize=False)

    for attack in aa["attacks"]:
        def project(attack: str = attack) -> None:
            run_project((attack,))

        def reference(attack: str = attack) -> None:  # bound now: `direct` calls it later
            adv = AutoAttack(net, norm="Linf", eps=eps, version="standard", seed=int(aa["seed"]),
                             device="cpu")
            if aa["version"] == "custom":
                for group, values in settings.items():
                    for key, val in values.items():
                        setattr(getattr(adv, groups[group]), key, val)
            adv.attacks_to_run = [attack]
            adv.run_standard_evaluation(x, y, batch_size=int(aa["batch_size"]))

        direct[attack] = reference
        tp, tr = interleaved(project, reference, repeats)
        rows.append(_summary("autoattack", attack, tp, tr, per=n, goal=">= 0.95",
                             ratio_def="direct s ÷ project s",
                             unit=f"example, eps {eps:g}, {aa['version']} settings"))
    # the job as the workflow runs it: every attack from the clean inputs in one call (one
    # clean pass and one round of sanity checks of the project's own) vs one direct call per
    # attack (what running each attack individually takes with the library alone)
    attacks = tuple(aa["attacks"])

    def project_job() -> None:
        run_project(attacks)

    def direct_job() -> None:
        for a in attacks:
            direct[a]()

    tp, tr = interleaved(project_job, direct_job, repeats)
    rows.append(_summary("autoattack", "all (one job)", tp, tr, per=n, goal=">= 0.95",
                         ratio_def="direct s ÷ project s",
                         unit=f"example, eps {eps:g}, {len(attacks)} attacks",
                         note="project: one call, every attack from the clean inputs; "
                              "direct: one library call per attack"))
    return rows


# ---------------------------------------------------------------------- AutoAttack job layout
#: One AutoAttack job as a fresh process (what Snakemake starts): imports, the model file and
#: its examples, then every epsilon given on the command line (rule autoattack's library call).
_AUTOATTACK_JOB = """
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from atat.robustness import evaluate_autoattack_model_file
a = json.loads(sys.argv[2])
evaluate_autoattack_model_file(model_path=a["model"], dataset_root=a["root"],
    outputs={float(e): p for e, p in a["outputs"]}, settings=a["settings"],
    resolution=a["resolution"])
"""


def _bench_model(cfg: Mapping[str, Any], cache: Path, root: Path) -> Path:
    """A NoDef model of the demo's shapes, trained once (1 epoch) into ``cache``: AutoAttack's
    cost does not depend on how well the model is trained."""
    from atat.training.train import TrainSpec, train

    out = cache / "autoattack-layout" / "model.pt"
    if not out.exists():
        ds = cfg["datasets"]["synthfaces"]
        training = dict(cfg["training"], epochs=1, lr_milestones=[2], checkpoint_every=1)
        spec = TrainSpec(model_id="bench/nodef/layout", dataset_root=str(root),
                         resolution=int(ds["resolution"]), n_classes=int(ds["n_classes"]),
                         architecture="resnet18", defense=defense_params(cfg, "nodef"),
                         training=training, augmentation=cfg["augmentation"], seed=0)
        train(spec, out_model=out, out_metrics=out.with_name("metrics.json"),
              resume_path=out.with_name("resume.pt"), progress=False)
    return out


def bench_autoattack_layout(cfg: Mapping[str, Any], cache: Path, *, threads: int = 1,
                            n_examples: int | None = None, repeats: int = 3) -> list[Row]:
    """Rule autoattack's two job layouts (config ``autoattack.job``) for one model, each job a
    fresh Python process as Snakemake starts it: ``per_model`` (one process, every epsilon) vs
    ``per_epsilon`` (one process per epsilon), in CPU seconds of the child processes (user +
    system; the jobs are CPU-bound, and CPU time is what the demo's 2 cores are short of).
    Ratio = per_epsilon CPU ÷ per_model CPU; the note gives the wall times."""
    import json
    import resource

    ds = cfg["datasets"]["synthfaces"]
    root = bench_dataset(cache, cfg)
    model = _bench_model(cfg, cache, root)
    settings = dict(cfg["autoattack"])
    if n_examples:
        settings["n_examples"] = int(n_examples)
    epsilons = [float(e) for e in settings["epsilons"]]
    work = Path(tempfile.mkdtemp(prefix="aa-layout-", dir=cache))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS=str(threads))
    counter = {"i": 0}

    def job(eps: Sequence[float]) -> None:
        counter["i"] += 1
        arg = {"model": str(model), "root": str(root), "resolution": int(ds["resolution"]),
               "settings": settings,
               "outputs": [[e, str(work / str(counter["i"]) / f"eps{e:g}.json")] for e in eps]}
        subprocess.run([sys.executable, "-c", _AUTOATTACK_JOB, str(threads), json.dumps(arg)],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_of(fn: Callable[[], None]) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                time.perf_counter() - t0)

    def per_model() -> None:
        job(epsilons)

    def per_epsilon() -> None:
        for e in epsilons:
            job([e])

    cpu_m, cpu_e, wall_m, wall_e = [], [], [], []
    for i in range(repeats):
        order = (per_model, per_epsilon) if i % 2 == 0 else (per_epsilon, per_model)
        for fn in order:
            c, w = cpu_of(fn)
            (cpu_m if fn is per_model else cpu_e).append(c)
            (wall_m if fn is per_model else wall_e).append(w)
    k = len(epsilons)
    note = (f"CPU s per model: per_model {statistics.median(cpu_m):.1f}, per_epsilon "
            f"{statistics.median(cpu_e):.1f} ({k} processes); wall s {statistics.median(wall_m):.1f}"
            f" vs {statistics.median(wall_e):.1f}")
    return [_summary("autoattack_layout", "per_model vs per_epsilon", cpu_m, cpu_e, per=1,
                     goal="", ratio_def="per_epsilon CPU s ÷ per_model CPU s",
                     unit=f"model: {k} eps x {settings['n_examples']} examples, fresh processes",
                     note=note)]


# --------------------------------------------------------------------------- inversion split
#: What the time of an inversion job is split into. ``final_selection`` and ``scorer`` are
#: phases: everything inside them (generator, target model, transforms) counts there. The
#: networks count forward *and* backward; ``other`` is the rest (optimiser steps, losses,
#: L1 projections, bookkeeping).
INVERSION_PARTS = ("generator", "target", "augmentation", "scorer", "final_selection",
                   "perceptual", "discriminator", "other")
_PHASES = ("final_selection", "scorer")


class TimeSplit:
    """Wall time attributed to what is running, forward and backward.

    A stack of scopes: :meth:`push`/:meth:`pop` around a network's forward (or a phase), and
    during ``backward()`` the markers :func:`_mark` puts on a network's outputs (its
    backward starts) and inputs (its backward ends) switch the category. Inside a phase of
    ``_PHASES`` every push keeps the phase. Time between two switches goes to the category
    in force; nothing is counted twice, so the parts add up to the clock's run time."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.stack: list[str] = ["other"]
        self.backward_cat: str | None = None
        self.t = time.perf_counter()

    def _current(self) -> str:
        top = self.stack[-1]
        return top if top in _PHASES or self.backward_cat is None else self.backward_cat

    def _tick(self) -> None:
        now = time.perf_counter()
        cat = self._current()
        self.totals[cat] = self.totals.get(cat, 0.0) + now - self.t
        self.t = now

    def push(self, cat: str) -> None:
        self._tick()
        self.backward_cat = None
        top = self.stack[-1]
        self.stack.append(top if top in _PHASES else cat)

    def pop(self) -> None:
        self._tick()
        self.backward_cat = None
        self.stack.pop()

    def switch_backward(self, cat: str | None) -> None:
        self._tick()
        self.backward_cat = cat

    def stop(self) -> dict[str, float]:
        self._tick()
        return dict(self.totals)


class _Marker(torch.autograd.Function):
    """Identity whose backward tells a :class:`TimeSplit` what the engine computes next."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, split: TimeSplit, cat: str | None) -> Tensor:
        ctx.split, ctx.cat = split, cat
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        ctx.split.switch_backward(ctx.cat)
        return grad, None, None


def _mark(obj: Any, split: TimeSplit, cat: str | None) -> Any:
    """``obj`` (a tensor, or a tuple/list of them) with markers on the tensors that carry a
    gradient; anything else unchanged."""
    if isinstance(obj, Tensor):
        if torch.is_grad_enabled() and obj.requires_grad:
            return _Marker.apply(obj, split, cat)
        return obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_mark(o, split, cat) for o in obj)
    return obj


def time_module(module: nn.Module, split: TimeSplit, cat: str) -> list[Any]:
    """Count ``module``'s forward and backward as ``cat`` (hooks survive ``deepcopy``, so the
    attacks' private copies are counted too). Returns the hook handles."""

    def pre(_m: nn.Module, args: tuple) -> tuple:
        args = _mark(args, split, None)   # backward reaching the inputs: the network is done
        split.push(cat)
        return args

    def post(_m: nn.Module, _args: tuple, out: Any) -> Any:
        split.pop()
        return _mark(out, split, cat)     # backward reaching the outputs: the network starts

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


def time_callable(fn: Callable[..., Any], split: TimeSplit, cat: str) -> Callable[..., Any]:
    """``fn`` counted as ``cat`` like :func:`time_module` (forward and backward)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        args = _mark(args, split, None)
        split.push(cat)
        try:
            out = fn(*args, **kwargs)
        finally:
            split.pop()
        return _mark(out, split, cat)

    return wrapped


class _patched:
    """Set ``module.<name>`` to ``value`` for the duration of a ``with`` block."""

    def __init__(self, module: Any, name: str, value: Any):
        self.module, self.name, self.value = module, name, value

    def __enter__(self) -> None:
        self.old = getattr(self.module, self.name)
        setattr(self.module, self.name, self.value)

    def __exit__(self, *exc: Any) -> None:
        setattr(self.module, self.name, self.old)


def inversion_networks(cfg: Mapping[str, Any], seed: int = 0) -> dict[str, nn.Module]:
    """Randomly initialised networks of the demo's shapes: the prior (G and D of
    ``generators.<name>.train``, built by :func:`atat.inversion.stylegan2.train_small_generator`
    with 0 steps), the target ResNet-18 through the NoDef inference path, the evaluation model
    (the config's ``evaluation_model.architecture``) and the face-embedding network (also
    PPDG's perceptual network)."""
    import inspect

    from atat.training.defenses import ModelContext, build_defense
    from atat.inversion.evaluation import FaceEmbedding, build_evaluation_model
    from atat.inversion.run import TargetLogits
    from atat.inversion.stylegan2 import train_small_generator
    from atat.training.models import build_model

    ds = cfg["datasets"]["synthfaces"]
    res, n_classes = int(ds["resolution"]), int(ds["n_classes"])
    gen_cfg = cfg["generators"][ds["generator"]]["train"]
    accepted = set(inspect.signature(train_small_generator).parameters) - {"steps", "resolution"}
    settings = {k: v for k, v in gen_cfg.items() if k in accepted}
    bs = int(settings.get("batch_size", 16))
    torch.manual_seed(seed)
    prior = train_small_generator(None, resolution=res, steps=0,
                                  images=torch.zeros(bs, 3, res, res), **settings)
    variant = defense_params(cfg, "nodef")
    defense = build_defense(variant, n_classes, context=ModelContext("resnet18", res))
    target = TargetLogits(defense.build_model(build_model("resnet18", n_classes)), defense).eval()
    ev = cfg["evaluation_model"]
    evaluation = build_evaluation_model(n_classes,
                                        architecture=str(ev.get("architecture", "inception_v3")),
                                        aux_logits=bool(ev.get("aux_logits", True)),
                                        resolution=int(ev["resolution"])).eval()
    fe = cfg["face_embedding"]
    n_public = int(ds["synthetic"]["n_public_identities"])
    face = FaceEmbedding(build_model(fe.get("architecture", "resnet18"), n_public),
                         int(fe["resolution"])).eval()
    perceptual = FaceEmbedding(build_model(fe.get("architecture", "resnet18"), n_public),
                               int(fe["resolution"])).eval()
    return {"G": prior["G_ema"].eval(), "D": prior["D"].eval(), "target": target,
            "evaluation": evaluation, "face": face, "perceptual": perceptual}


def bench_prior_fir(cfg: Mapping[str, Any], *, steps: int = 10, repeats: int = 3) -> list[Row]:
    """The prior's training steps (the demo's ``generators.<name>.train`` shapes, random images)
    on upfirdn2d's direct FIR path against the general path it replaces (F.pad + stride-1
    depthwise convolution + slicing; ``atat.inversion.stylegan2.DIRECT_FIR``), interleaved in
    this process. Both paths give the same bits (tests/test_stylegan2.py), so the ratio is a
    pure speed-up of the ``train_generator`` jobs."""
    import inspect

    import atat.inversion.stylegan2 as sg

    ds = cfg["datasets"]["synthfaces"]
    res = int(ds["resolution"])
    gen_cfg = cfg["generators"][ds["generator"]]["train"]
    accepted = set(inspect.signature(sg.train_small_generator).parameters) - {"steps",
                                                                              "resolution"}
    settings = {k: v for k, v in gen_cfg.items() if k in accepted}
    bs = int(settings.get("batch_size", 16))
    images = torch.rand(4 * bs, 3, res, res, generator=torch.Generator().manual_seed(0)) * 2 - 1

    def run(direct: bool) -> Callable[[], Any]:
        def go() -> None:
            old, sg.DIRECT_FIR = sg.DIRECT_FIR, direct
            try:
                sg.train_small_generator(None, resolution=res, steps=steps, images=images,
                                         **settings)
            finally:
                sg.DIRECT_FIR = old
        return go

    run(True)()  # warm-up (allocator, kernels)
    tp, tr = interleaved(run(True), run(False), repeats)
    return [_summary("prior_fir", "direct FIR path", tp, tr, per=steps, goal=">= 1.00",
                     ratio_def="general-path time / direct-path time (same bits)",
                     unit="prior training step (demo shapes)",
                     note=f"{steps} steps x {repeats} repeats, batch {bs}, {res} px")]


def quick_inversion_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The attack's params cut to a few steps and latents (``--quick``: does it run)."""
    p = copy.deepcopy(dict(params))
    p["candidates"] = dict(p["candidates"], num_candidates=2, search_space_size=8, batch_size=8)
    if isinstance(p["steps"], list):
        p["steps"] = [2] * len(p["steps"])
    else:
        p["steps"] = 2
    p["lr_milestones"] = []
    if "final_selection" in p:
        p["final_selection"] = dict(p["final_selection"], samples_per_target=1, iterations=2)
    for key in ("inv_steps", "tune_steps"):
        if key in p:
            p[key] = 2
    if "num_inv_points" in p:
        p["num_inv_points"] = 1
    return p


def run_split_attack(attack: str, params: Mapping[str, Any], nets: Mapping[str, nn.Module],
                     real_root: Path) -> dict[str, Any]:
    """One attack job as :func:`atat.inversion.run.run_inversion` runs it (scorer built on the
    private training images of the attacked classes, then the attack), timed by part.
    Returns ``wall`` (seconds), ``parts`` (seconds per part of :data:`INVERSION_PARTS`),
    ``n_images`` (final images), ``phases`` (seconds per phase, overlapping the parts) and
    the attack's ``result``."""
    from atat.inversion import core, ifgmi, ppa, ppdg
    from atat.inversion.metrics import Evaluator
    from atat.inversion.perceptual import build_perceptual

    split = TimeSplit()
    handles: list[Any] = []
    for key, cat in (("target", "target"), ("evaluation", "scorer"), ("face", "scorer"),
                     ("perceptual", "perceptual"), ("D", "discriminator")):
        handles += time_module(nets[key], split, cat)
    G = nets["G"]
    handles += time_module(G.mapping, split, "generator")
    for block in G.synthesis.blocks():
        handles += time_module(block, split, "generator")
    phases: dict[str, float] = {}

    def phase(fn: Callable[..., Any], name: str, cat: str | None = None) -> Callable[..., Any]:
        inner = time_callable(fn, split, cat) if cat else fn

        def wrapped(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0
        return wrapped

    def transform(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *a, **k: time_callable(fn(*a, **k), split, "augmentation")

    patches = []
    for mod in (ppa, ifgmi, ppdg):
        patches.append(_patched(mod, "attack_transform", transform(core.attack_transform)))
    # where the attacks look the candidate search up: core (initial_latents, PPA and IF-GMI)
    # and PPDG's own rounds (later rounds; round 1 searches once per job)
    for mod in (core, ppdg):
        patches.append(_patched(mod, "candidate_search",
                                phase(core.candidate_search, "candidate_search")))
    patches.append(_patched(ppdg, "candidate_confidences",
                            phase(core.candidate_confidences, "candidate_search")))
    for mod in (ppa, ppdg):
        patches.append(_patched(mod, "final_selection",
                                phase(core.final_selection, "final_selection", "final_selection")))
    patches += [_patched(ppa, "optimize_w", phase(core.optimize_w, "optimisation")),
                _patched(ppdg, "optimize_w", phase(core.optimize_w, "optimisation")),
                _patched(ifgmi, "optimize_stage", phase(ifgmi.optimize_stage, "optimisation")),
                _patched(ppdg, "project_pointwise", phase(ppdg.project_pointwise, "projection")),
                _patched(ppdg, "project_joint", phase(ppdg.project_joint, "projection")),
                _patched(ppdg, "tune_generator", phase(ppdg.tune_generator, "tuning"))]
    classes = [int(c) for c in params["targets"]]
    t0 = time.perf_counter()
    split.t = t0
    try:
        for p in patches:
            p.__enter__()
        split.push("scorer")
        evaluator = phase(Evaluator, "real_embedding")(
            nets["evaluation"], nets["face"], real=real_root,
            center_crop=params.get("center_crop"), classes=classes)
        split.pop()
        scorer = phase(evaluator, "scoring", "scorer")
        if attack == "ppa":
            result = ppa.run_ppa(G, nets["target"], params, scorer, progress=False)
        elif attack == "ifgmi":
            result = ifgmi.run_ifgmi(G, nets["target"], params, scorer, progress=False,
                                     log=lambda _m: None)
        elif attack == "ppdg":
            if params["perceptual"] != "public_embedding":
                raise ValueError(f"bench: PPDG's perceptual network {params['perceptual']!r} "
                                 "needs downloaded weights; the benchmark runs the demo's "
                                 "inversion.ppdg.perceptual: public_embedding")
            net = build_perceptual(params["perceptual"], module=nets["perceptual"])
            result = ppdg.run_ppdg(G, nets["D"], nets["target"], params, scorer, net,
                                   progress=False, log=lambda _m: None)
        else:
            raise ValueError(f"unknown inversion attack '{attack}' (known: ppa, ifgmi, ppdg)")
        split.push("scorer")
        evaluator.summarize(result["frame"])
        split.pop()
    finally:
        for p in reversed(patches):
            p.__exit__()
        for h in handles:
            h.remove()
    parts = split.stop()   # the parts tile [t0, split.t]: they add up to the wall time
    wall = split.t - t0
    return {"wall": wall, "parts": parts, "n_images": len(result["frame"]),
            "phases": phases, "result": result}


def bench_inversion(cfg: Mapping[str, Any], cache: Path, *, attacks: Sequence[str] | None = None,
                    n_classes: int | None = 2, repeats: int = 2, quick: bool = False
                    ) -> list[Row]:
    """PPA, IF-GMI and PPDG at the demo's settings on random networks of the demo's shapes,
    per final (scored) image: the total, then each part of :data:`INVERSION_PARTS` as its
    share of the total (``n_classes`` of the dataset's classes are attacked; None = all).

    Per-image costs are close to linear in the classes, except PPA's and IF-GMI's candidate
    search, which scores ``search_space_size`` latents once per job: with 2 of 20 classes its
    share is ~10x what it is in a full demo job (the note's ``phases`` show it)."""
    from atat.plan.config import inversion_params

    ds = cfg["datasets"]["synthfaces"]
    n_all = int(ds["n_classes"])
    k = n_all if n_classes is None else min(int(n_classes), n_all)
    real_root = bench_dataset(cache, cfg)
    nets = inversion_networks(cfg)
    rows = []
    for attack in attacks or cfg["inversion"]["attacks"]:
        params = inversion_params(cfg, "synthfaces", "resnet18", "nodef", attack)
        if quick:
            params = quick_inversion_params(params)
        params["targets"] = list(range(k))
        runs = [run_split_attack(attack, params, nets, real_root) for _ in range(repeats)]
        n_img = runs[0]["n_images"]
        totals = [r["wall"] for r in runs]
        med = statistics.median(totals)
        unit = (f"final image ({n_img} from {k} of {n_all} classes; demo settings"
                f"{', QUICK' if quick else ''}; random nets)")
        shares = {part: [r["parts"].get(part, 0.0) / r["wall"] for r in runs]
                  for part in INVERSION_PARTS}
        phase_names = sorted({name for r in runs for name in r["phases"]})
        phase_share = {name: statistics.median([r["phases"].get(name, 0.0) / r["wall"]
                                                for r in runs]) for name in phase_names}
        phase_txt = ", ".join(f"{name} {100 * v:.0f}%" for name, v in phase_share.items())
        split_txt = ", ".join(f"{part} {100 * statistics.median(s):.0f}%"
                              for part, s in shares.items() if max(s) > 0)
        rows.append(Row("inversion", attack, med / n_img, float("nan"), med / n_img,
                        _spread(totals), "", "s per final image (absolute)", unit, repeats,
                        note=f"{med / k:.1f} s per class; {split_txt}; phases: {phase_txt}"))
        for part, s in shares.items():
            if part in ("perceptual", "discriminator") and max(s) == 0:
                continue
            sec = [r["parts"].get(part, 0.0) / r["n_images"] for r in runs]
            rows.append(Row("inversion", f"{attack}/{part}", statistics.median(sec),
                            med / n_img, statistics.median(s), _spread(s), "",
                            "share of the attack's time", unit, repeats))
    return rows


def bench_inversion_speedups(cfg: Mapping[str, Any], cache: Path, *, n_classes: int = 4,
                             repeats: int = 3, quick: bool = False) -> list[Row]:
    """The exact inversion speed-ups of issue 16, each against the path without it, on the
    demo's settings and random networks of its shapes (``n_classes`` classes attacked, 4 =
    one lockstep batch of 20 at the demo's 5 candidates per class), order rotated per repeat:

    * ``ifgmi lockstep``: IF-GMI's per-class batches run together vs one at a time;
    * ``ppdg shared search`` / ``ppdg lockstep``: PPDG's round-1 candidate search once per
      job vs per class, then also round 1's optimisations together vs per class;
    * ``real embeddings cached``: the scorer built from rule real_embeddings' features vs
      embedding the private training images in the job (the demo attacks every class).

    Timed in CPU seconds of this process (one thread by default), so that other work on the
    machine changes the ratios less. The note gives how far the results moved (latents,
    Acc@1, evaluation confidence: float rounding only)."""
    from atat.plan.config import inversion_params
    from atat.inversion import ifgmi, ppdg
    from atat.inversion.metrics import Evaluator, load_real_embeddings, save_real_embeddings
    from atat.inversion.perceptual import build_perceptual

    ds = cfg["datasets"]["synthfaces"]
    k = min(int(n_classes), int(ds["n_classes"]))
    real_root = bench_dataset(cache, cfg)
    nets = inversion_networks(cfg)
    G, target = nets["G"], nets["target"]
    rows: list[Row] = []
    unit = (f"CPU s of a job of {k} of {ds['n_classes']} classes (demo settings"
            f"{', QUICK' if quick else ''})")

    def params_of(attack: str) -> dict[str, Any]:
        p = inversion_params(cfg, "synthfaces", "resnet18", "nodef", attack)
        p = quick_inversion_params(p) if quick else p
        p["targets"] = list(range(k))
        return p

    scorer = Evaluator(nets["evaluation"], nets["face"], real=real_root, classes=list(range(k)))

    def moved(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
        dw = float((a["final_w"] - b["final_w"]).abs().max())
        fa, fb = a["frame"], b["frame"]
        return (f"max |Δw| {dw:.1e}, Acc@1 {fa['correct_top1'].mean():.4f} vs "
                f"{fb['correct_top1'].mean():.4f}, max |Δevalconf| "
                f"{float((fa['evalconf'] - fb['evalconf']).abs().max()):.1e}")

    def rotate(fns: Sequence[Callable[[], Any]]) -> tuple[list[list[float]], list[Any]]:
        times: list[list[float]] = [[] for _ in fns]
        outs: list[Any] = [None] * len(fns)
        for i in range(repeats):
            for j in [(i + n) % len(fns) for n in range(len(fns))]:
                t0 = time.process_time()  # CPU time: the machine may be shared
                outs[j] = fns[j]()
                times[j].append(time.process_time() - t0)
        return times, outs

    quiet = lambda _m: None  # noqa: E731
    p = params_of("ifgmi")
    (t_one, t_lock), (r_one, r_lock) = rotate([
        lambda: ifgmi.run_ifgmi(G, target, p, scorer, progress=False, log=quiet,
                                lockstep=False),
        lambda: ifgmi.run_ifgmi(G, target, p, scorer, progress=False, log=quiet)])
    rows.append(_summary("inversion_speedups", "ifgmi lockstep", t_lock, t_one, per=1,
                         goal="", ratio_def="speed-up (one batch at a time / lockstep)",
                         unit=unit, note=moved(r_one, r_lock)))

    p = params_of("ppdg")
    net = build_perceptual(p["perceptual"], module=nets["perceptual"])
    run = lambda **kw: ppdg.run_ppdg(G, nets["D"], target, p, scorer, net,  # noqa: E731
                                     progress=False, log=quiet, **kw)
    (t_base, t_search, t_both), (r_base, r_search, r_both) = rotate([
        lambda: run(share_search=False, lockstep=False),
        lambda: run(share_search=True, lockstep=False),
        lambda: run()])
    rows.append(_summary("inversion_speedups", "ppdg shared search", t_search, t_base, per=1,
                         goal="", ratio_def="speed-up (search per class / once per job)",
                         unit=unit, note=moved(r_base, r_search)))
    rows.append(_summary("inversion_speedups", "ppdg lockstep", t_both, t_search, per=1,
                         goal="", ratio_def="speed-up (round 1 per class / lockstep), both "
                         "with the shared search", unit=unit, note=moved(r_search, r_both)))
    rows.append(_summary("inversion_speedups", "ppdg both", t_both, t_base, per=1, goal="",
                         ratio_def="speed-up (before / after)", unit=unit,
                         note=moved(r_base, r_both)))

    all_classes = list(range(int(ds["n_classes"])))
    emb_path = cache / "real_embeddings.pt"
    save_real_embeddings(Evaluator(nets["evaluation"], nets["face"], real=real_root), emb_path)
    (t_embed, t_cached), (e_job, e_cached) = rotate([
        lambda: Evaluator(nets["evaluation"], nets["face"], real=real_root,
                          classes=all_classes),
        lambda: Evaluator(nets["evaluation"], nets["face"], real=None, classes=all_classes,
                          real_embeddings=load_real_embeddings(emb_path))])
    same = all(torch.equal(e_job.real_eval[c], e_cached.real_eval[c]) and
               torch.equal(e_job.real_face[c], e_cached.real_face[c]) for c in e_job.real_eval)
    rows.append(_summary("inversion_speedups", "real embeddings cached", t_cached, t_embed,
                         per=1, goal="", ratio_def="speed-up (embed in the job / load the file)",
                         unit="CPU s of one job's scorer set-up, every class",
                         note=f"saves {statistics.median(t_embed) - statistics.median(t_cached):.1f}"
                              f" CPU s per job; features identical: {same}"))
    return rows


def _spread(values: Sequence[float]) -> float:
    lo, hi = min(values), max(values)
    if lo <= 0:
        return 0.0 if hi <= 0 else float("inf")
    return hi / lo - 1


def reference_workflow(dest: Path, configfiles: Sequence[str | Path]) -> int:
    """Write ``dest/Snakefile`` and ``dest/jobs.json``: the workflow's DAG of ``all`` from
    empty under ``configfiles`` with the project taken out (module doc, ``dry_run``). Returns
    its number of jobs."""
    import json

    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                          ResourceSettings)

    work = Path(tempfile.mkdtemp(prefix="atat-bench-dag-"))
    table: dict[str, dict[str, list[str]]] = {}
    outputs: dict[str, list[str]] = {}
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(
                                  configfiles=[Path(c).resolve() for c in configfiles]),
                              snakefile=ROOT / "Snakefile", workdir=work)
        wf_api.dag(DAGSettings(targets={"all"}, forceall=True))
        wf = wf_api._workflow
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        for job in wf.dag.jobs:
            outputs.setdefault(job.rule.name, [str(o) for o in job.rule.output])
            key = "/".join(f"{k}={v}" for k, v in sorted(job.wildcards.items()))
            table.setdefault(job.rule.name, {})[key] = [str(f) for f in job.input]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "jobs.json").write_text(json.dumps(table))
    lines = ["import json", "", 'JOBS = json.load(open(f"{workflow.basedir}/jobs.json"))', "",
             "", "def key(wc):", '    return "/".join(f"{k}={v}" for k, v in sorted(wc.items()))',
             "", "", "rule all:", '    input: JOBS["all"][""]', "    default_target: True", ""]
    for name, outs in outputs.items():
        if name != "all":
            lines += ["", f"rule {name}:", f"    input: lambda wc: JOBS[{name!r}][key(wc)]",
                      "    output: " + ", ".join(repr(o) for o in outs), ""]
    (dest / "Snakefile").write_text("\n".join(lines))
    return sum(len(v) for v in table.values())


def _dry_run_cpu(args: Sequence[str], workdir: Path) -> tuple[float, int]:
    """CPU seconds (user + sys) of ``snakemake -n all ARGS`` in ``workdir``, and the jobs it
    plans (its job table's total)."""
    import re
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "all", *args], cwd=workdir,
                         check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"^total\s+(\d+)", out, re.M)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, int(m.group(1)) if m else 0


def bench_dry_run(*, repeats: int = 3) -> list[Row]:
    """``snakemake -n all`` of the paper grid and of the demo in CPU seconds, each beside its
    reference workflow (module doc); the paper's goal is absolute: <= 3 CPU-s."""
    rows = []
    for variant, configs, goal in (("paper", [ROOT / "config" / "config.yaml"], "<= 3"),
                                   ("demo", [ROOT / "config" / "demo.yaml"], "")):
        with tempfile.TemporaryDirectory(prefix="atat-bench-dry-") as tmp:
            ref_dir, work = Path(tmp) / "reference", Path(tmp) / "work"
            work.mkdir()
            n_ref = reference_workflow(ref_dir, configs)
            # the Snakefile's own configfile is the paper config; the demo is an overlay
            project = ["-s", str(ROOT / "Snakefile")] + (
                ["--configfile", str(configs[0])] if variant == "demo" else [])
            _dry_run_cpu(project, work)                     # not counted: marker, bytecode
            _dry_run_cpu([], ref_dir)
            tp, tr, jobs = [], [], set()
            for i in range(repeats):
                order = [("p", project, work), ("r", [], ref_dir)]
                for kind, args, cwd in (order if i % 2 == 0 else order[::-1]):
                    cpu, n = _dry_run_cpu(args, cwd)
                    (tp if kind == "p" else tr).append(cpu)
                    jobs.add(n)
        if len(jobs) != 1:
            raise RuntimeError(f"dry_run/{variant}: the project and its reference plan "
                               f"different jobs ({sorted(jobs)}; reference DAG {n_ref})")
        row = _summary("dry_run", variant, tp, tr, per=1.0, goal="",
                       ratio_def="reference CPU-s / project CPU-s (same DAG, project out)",
                       unit="snakemake -n all, CPU-s", note=f"{jobs.pop()} jobs")
        rows.append(row)
        med = statistics.median(tp)
        rows.append(Row("dry_run", f"{variant}/cpu_s", med, statistics.median(tr), med,
                        max(tp) / min(tp) - 1, goal, "project CPU-s (absolute)",
                        "snakemake -n all, CPU-s", repeats, f"best {min(tp):.2f}"))
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
    from atat.base import io

    io.write_csv_rows(path, [f.name for f in dataclasses.fields(Row)] + ["meets_goal", *meta],
                      ({**dataclasses.asdict(r), "meets_goal": r.meets_goal, **meta}
                       for r in rows))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(COMPONENTS),
                    help=f"comma-separated subset of {','.join(COMPONENTS)}")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (the demo runs one thread per job)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes (batch 8, 8 AutoAttack examples, 1 epoch, inversion on 1 "
                         "class with 2 steps per stage): checks that the benchmark runs, numbers "
                         "not meaningful")
    ap.add_argument("--inversion-classes", type=int, default=2,
                    help="classes attacked per inversion job (the demo attacks all 20; the "
                         "per-image cost is close to linear in the classes)")
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
        rows += bench_train_job(cfg, cache, epochs=1 if args.quick else None,
                                repeats=max(1, args.repeats // 2 + 1) if not args.quick else 1,
                                step_rows=rows)
    if "autoattack" in only:
        rows += bench_autoattack(cfg, n_examples=8 if args.quick else None,
                                 repeats=max(1, args.repeats // 2 + 1) if not args.quick else 1)
    if "autoattack_layout" in only:
        rows += bench_autoattack_layout(cfg, cache, threads=args.threads,
                                        n_examples=8 if args.quick else None,
                                        repeats=1 if args.quick else max(1, args.repeats // 2 + 1))
    if "inversion" in only:
        rows += bench_inversion(cfg, cache, n_classes=1 if args.quick else args.inversion_classes,
                                repeats=1 if args.quick else max(1, args.repeats // 2),
                                quick=args.quick)
    if "inversion_speedups" in only:
        rows += bench_inversion_speedups(cfg, cache, n_classes=1 if args.quick else 4,
                                         repeats=1 if args.quick else 3, quick=args.quick)
    if "prior_fir" in only:
        rows += bench_prior_fir(cfg, steps=2 if args.quick else 10,
                                repeats=1 if args.quick else args.repeats)
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
