"""Measures the table of :mod:`atat.plan.gpu_memory`: the live tensor bytes of each network's
passes, per image, counted on the CPU at small batches (never called by the workflow).

What is counted: every tensor storage an operator creates while a pass runs (a
``TorchDispatchMode`` sees each op's outputs, a finalizer on each storage sees it freed; views
and in-place results share their storage and count once), the highest total at any moment
being the pass's peak. These are the tensors a GPU allocates through PyTorch's caching
allocator for the same code; cuDNN's workspaces and the allocator's rounding are what
:mod:`atat.plan.gpu_memory` adds on top (x 1.15 and the CUDA context). The slope of the peak
between batch sizes (:func:`per_image`) gives the bytes per image.

Passes (the ones the workflow's GPU rules run):

* ``train``: forward and backward of a classifier in train mode (cross-entropy; the gradient
  buffers exist, as after a first step) -- rules train_model (NoDef; the defenses' factors
  below), train_evaluation_model (Inception-v3 with its aux head from 150 px); Adam's step
  itself: :func:`adam_step_factor`;
* ``input_grad``: eval mode, parameters frozen, the gradient of the loss w.r.t. the input --
  AutoAttack's gradient passes;
* ``no_grad``: eval mode forward without autograd -- real_embeddings, AutoAttack's Square,
  evaluation passes;
* ``hidden``: :func:`atat.measures.hsic_measure.batch_hsic` in float64 (the four stages'
  features kept, the kernels of X, Y and each stage) -- rule measure_hsic.

Defenses: :func:`measure_defense` counts one real ``train_step`` of each defense type (its own
code: AT-AT's PGD and two forward graphs, Trap-MID's discriminator and its trigger-injected
half batch, MID's bottleneck, BiDO's HSIC terms) on a ResNet-18 at 64 px against NoDef's, as
two factors: bytes per image, and parameters (the defended model's and the networks the
defense holds). :func:`measure_autoattack`: the library's own state per image, in copies of
the input.

Usage (about 7 minutes of one core for every entry; ResNet-152 at 224 px peaks at ~3 GB)::

    python -m atat.lab.gpu_memory_table                 # every entry, as Python rows
    python -m atat.lab.gpu_memory_table --only resnet18@224 --defenses --autoattack
    python -m atat.lab.gpu_memory_table rss --arch resnet152 --res 224 --pass train --batch 4

``rss`` runs one pass in this process and prints its peak RSS above the RSS before it (the
cross-check of docs/measurements.md: a fresh process per batch size).
"""

from __future__ import annotations

import argparse
import resource
import sys
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from atat.plan.gpu_memory import DEFENSE_PROBE, NETWORKS, NetworkMemory

__all__ = ["LiveTensors", "adam_step_factor", "build_network", "measure_autoattack",
           "measure_defense", "measure_network", "peak_bytes", "per_image"]

#: parameters a defense type needs besides its defaults to be built on its own
DEFENSE_PROBE_PARAMS = {"pixel_mask": {"stage": "group_lasso"}}
#: classes of the probe classifiers' head (the table stores the network without its head)
PROBE_CLASSES = 10
#: the smallest input of Inception-v3's aux head (its 5x5 pooling of a 17x17 map at 299 px)
AUX_MIN_RES = 150


class LiveTensors(TorchDispatchMode):
    """Bytes of the tensor storages created inside the mode and still alive; ``peak`` the
    highest total seen."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self._live.discard(key)
        self.current -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        # an output on an input's storage (in place, a view) is no new tensor: e.g. a gradient
        # accumulated into its buffer, BatchNorm's running statistics
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._live or key in inputs:
                continue
            self._live.add(key)
            self.current += nbytes
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._freed, key, nbytes)
        return out


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes of the tensors ``fn`` creates (module doc); its result is dropped."""
    with LiveTensors() as live:
        fn()
    return live.peak


def per_image(pass_at: Callable[[int], Callable[[], Any]], start: int = 2,
              tolerance: float = 0.03, largest: int = 1024) -> tuple[float, float]:
    """(bytes per image, batch-independent bytes) of ``pass_at(b)()``: the slope of its peak
    between batches b, 2b and 4b, doubling b from ``start`` until both slopes agree within
    ``tolerance`` and the batch-independent part is at most a quarter of the peak at 4b (a
    pass's peak is the largest of its phases' peaks; at small batches a batch-independent
    tensor -- a parameter's gradient, a kernel matrix -- or a phase with fewer bytes per image
    can decide it)."""
    b = start
    p1, p2 = peak_bytes(pass_at(b)), peak_bytes(pass_at(2 * b))
    while True:
        p4 = peak_bytes(pass_at(4 * b))
        s1, s2 = (p2 - p1) / b, (p4 - p2) / (2 * b)
        fixed = p4 - 4 * b * s2
        if s2 > 0 and abs(s1 - s2) <= tolerance * s2 and fixed <= p4 / 4:
            return s2, fixed
        if 4 * b >= largest:
            raise RuntimeError(f"no linear peak up to batch {4 * b}: slopes {s1:.0f}, {s2:.0f}, "
                               f"batch-independent {fixed:.0f} of {p4:.0f} bytes")
        b, p1, p2 = 2 * b, p2, p4


class _NoStep(torch.optim.SGD):
    """An optimizer that keeps every gradient buffer and changes nothing: a counted step holds
    the activations, not the parameter-sized tensors of the update (:data:`atat.plan.
    gpu_memory.ADAM_STEP_FACTOR` counts those)."""

    def __init__(self, params: Any, **_: Any) -> None:
        super().__init__(params, lr=0.0)

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=False)

    def step(self, closure: Any = None) -> None:
        return None


def adam_step_factor(name: str = "resnet18", res: int = 64) -> float:
    """Peak bytes of one Adam step (torch's multi-tensor implementation, the default on a GPU)
    with its moments and the gradients in place, over the parameters' bytes."""
    model, _, _ = build_network(name, res)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(params, lr=1e-6, foreach=True)
    opt.step()   # creates the moments
    return peak_bytes(opt.step) / sum(p.numel() * p.element_size() for p in params)


# ---- the networks ------------------------------------------------------------------------------

def build_network(name: str, res: int, n_classes: int = PROBE_CLASSES
                  ) -> tuple[nn.Module, int, int]:
    """(model, parameters without the classifier head, feature width) of a network of the
    table at ``res`` px, randomly initialised: the target architectures
    (:func:`atat.training.models.build_model`), ``inception_v3`` (the evaluation model, with
    its aux head from :data:`AUX_MIN_RES` px on: below, its pooling has no input) and
    ``facenet`` (InceptionResnetV1, 512-d embedding)."""
    if name == "inception_v3":
        from atat.inversion.evaluation import build_evaluation_model

        model = build_evaluation_model(n_classes, aux_logits=res >= AUX_MIN_RES)
        head = sum(p.numel() for p in model.head.parameters())
        feat = model.head.in_features
    elif name == "facenet":
        from facenet_pytorch import InceptionResnetV1

        model = InceptionResnetV1(pretrained=None, classify=False)
        head, feat = 0, 512
    else:
        from atat.training.models import build_model

        model = build_model(name, n_classes)
        head = sum(p.numel() for p in model.head.parameters())
        feat = model.head.in_features
    return model, sum(p.numel() for p in model.parameters()) - head, feat


def _logits(model: nn.Module, x: torch.Tensor, train: bool) -> torch.Tensor:
    if train and hasattr(model, "forward_train"):  # the evaluation model: logits + aux logits
        logits, aux = model.forward_train(x)
        return logits if aux is None else torch.cat([logits, aux[:, :logits.shape[1]]])
    return model(x)


def _passes(model: nn.Module, name: str, res: int, n_classes: int
            ) -> dict[str, Callable[[int], Callable[[], Any]]]:
    gen = torch.Generator().manual_seed(0)

    def batch(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.rand(b, 3, res, res, generator=gen) * 2 - 1,
                torch.randint(0, n_classes, (b,), generator=gen))

    def labels(y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return y.repeat(logits.shape[0] // len(y))

    params = [p for p in model.parameters()]

    def train(b: int) -> Callable[[], Any]:
        x, y = batch(b)

        for p in params:   # gradient buffers exist (accumulated into; counted as fixed)
            p.requires_grad_(True)
            p.grad = torch.zeros_like(p)

        def step() -> None:   # forward and backward; the optimizer's step: adam_step_factor
            model.train()
            logits = _logits(model, x, True)
            F.cross_entropy(logits, labels(y, logits)).backward()
        return step

    def input_grad(b: int) -> Callable[[], Any]:
        x, y = batch(b)
        for p in params:
            p.requires_grad_(False)
            p.grad = None

        def step() -> None:
            model.eval()
            z = x.clone().requires_grad_(True)
            logits = model(z)
            torch.autograd.grad(F.cross_entropy(logits, y.remainder(logits.shape[1])), z)
        return step

    def no_grad(b: int) -> Callable[[], Any]:
        x, _ = batch(b)

        def step() -> None:
            model.eval()
            with torch.no_grad():
                model(x)
        return step

    def hidden(b: int) -> Callable[[], Any]:
        from atat.measures.hsic_measure import batch_hsic

        x, y = batch(b)

        def step() -> None:
            model.eval()
            batch_hsic(model, x, y, n_classes, dtype="float64")
        return step

    out = {"no_grad": no_grad}
    if name != "facenet":
        out.update(train=train, input_grad=input_grad)
    if hasattr(model, "forward_hidden"):
        out["hidden"] = hidden
    return out


def measure_network(name: str, res: int) -> NetworkMemory:
    """The table entry of ``name`` at ``res`` px (module doc)."""
    torch.manual_seed(0)
    model, params, feat = build_network(name, res)
    passes = _passes(model, name, res, PROBE_CLASSES)
    slopes = {k: round(per_image(fn)[0]) for k, fn in passes.items()}
    return NetworkMemory(params=params, feature_dim=feat, **slopes)


def measure_defense(defense: str, params: dict[str, Any] | None = None,
                    probe: tuple[str, int] = DEFENSE_PROBE) -> tuple[float, float]:
    """(per-image factor, parameter factor) of one ``train_step`` of a defense type against
    NoDef's on the probe network: the slopes of their peaks (module doc), and the parameters
    of the defended model and of the networks the defense holds (Trap-MID's discriminator)
    over the plain classifier's."""
    from atat.training.defenses import ModelContext, StepContext, build_defense
    from atat.training.models import build_model

    arch, res = probe

    def run(variant: dict[str, Any]) -> tuple[float, int]:
        torch.manual_seed(0)
        d = build_defense(variant, PROBE_CLASSES, context=ModelContext(arch, res))
        model = d.build_model(build_model(arch, PROBE_CLASSES))
        opt = _NoStep(d.trainable_parameters(model))
        gen = torch.Generator().manual_seed(0)

        def at(b: int) -> Callable[[], Any]:
            x = torch.rand(b, 3, res, res, generator=gen) * 2 - 1
            y = torch.randint(0, PROBE_CLASSES, (b,), generator=gen)

            def step() -> None:
                model.train()
                ctx = StepContext(epoch=0, step=0, n_classes=PROBE_CLASSES,
                                  generator=torch.Generator().manual_seed(1), steps_per_epoch=1)
                d.train_step(model, opt, x, y, ctx)
            return step
        peak_bytes(at(2))   # the gradient buffers and any lazily built state first
        held = [m for m in vars(d).values() if isinstance(m, nn.Module)]
        n_params = sum(p.numel() for m in [model, *held] for p in m.parameters())
        return per_image(at)[0], n_params

    base = run({"type": "nodef"})
    this = run({"type": defense, **(params or {})})
    return this[0] / base[0], this[1] / base[1]


def measure_autoattack(probe: tuple[str, int] = ("resnet10", 32)) -> float:
    """AutoAttack's own state per attacked image, in copies of the input: the slope of the
    peak of a standard run (APGD-CE, APGD-T, FAB-T, Square; few iterations -- the iterates'
    memory does not depend on their number) less the network's input-gradient pass, over
    the bytes of one input. Labels are the model's own predictions and epsilon is tiny, so
    every attack runs on every image."""
    from pyautoattack import AutoAttack

    arch, res = probe
    torch.manual_seed(0)
    model, _, _ = build_network(arch, res)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)

    def at(b: int) -> Callable[[], Any]:
        x = torch.rand(b, 3, res, res, generator=gen)
        with torch.no_grad():
            y = model(x * 2 - 1).argmax(1)

        def run() -> None:
            adv = AutoAttack(lambda z: model(z * 2 - 1), norm="Linf", eps=1e-6,
                             version="standard", seed=0, device=torch.device("cpu"))
            adv.apgd.n_iter = adv.apgd_targeted.n_iter = adv.fab.n_iter = 4
            adv.square.n_queries = 20
            adv.run_standard_evaluation(x, y, batch_size=b)
        return run

    attack = per_image(at, start=4)[0]
    grad = per_image(_passes(model, arch, res, PROBE_CLASSES)["input_grad"])[0]
    return (attack - grad) / (3 * res * res * 4)


# ---- command line -------------------------------------------------------------------------------

def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_delta_mib(name: str, res: int, which: str, batch: int) -> float:
    """Peak RSS above the RSS before one ``which`` pass at ``batch`` (MiB; one per process)."""
    torch.manual_seed(0)
    model, _, _ = build_network(name, res)
    fn = _passes(model, name, res, PROBE_CLASSES)[which](batch)
    before = _rss_kib()
    fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m atat.lab.gpu_memory_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="table", choices=("table", "rss"))
    ap.add_argument("--only", action="append", help="entries name@res (default: the table's)")
    ap.add_argument("--defenses", action="store_true", help="also the defenses' factors")
    ap.add_argument("--autoattack", action="store_true",
                    help="also AutoAttack's state and Adam's step factor")
    ap.add_argument("--arch")
    ap.add_argument("--res", type=int)
    ap.add_argument("--pass", dest="which", default="train")
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "rss":
        print(f"{args.arch}@{args.res} {args.which} batch {args.batch}: "
              f"{rss_delta_mib(args.arch, args.res, args.which, args.batch):.0f} MiB above the "
              f"RSS before the pass")
        return 0
    keys = ([(s.split("@")[0], int(s.split("@")[1])) for s in args.only] if args.only
            else list(NETWORKS))
    for name, res in keys:
        print(f"    ({name!r}, {res}): {measure_network(name, res)!r},", flush=True)
    if args.defenses:
        from atat.plan.gpu_memory import DEFENSE_FACTORS

        for defense in DEFENSE_FACTORS:
            act, params = measure_defense(defense, DEFENSE_PROBE_PARAMS.get(defense))
            print(f"    {defense!r}: ({act:.2f}, {params:.2f}),", flush=True)
    if args.autoattack:
        print(f"AUTOATTACK_STATE_IMAGES: {measure_autoattack():.1f} (ResNet-10 at 32 px), "
              f"{measure_autoattack(('resnet18', 64)):.1f} (ResNet-18 at 64 px)")
        print(f"ADAM_STEP_FACTOR: {adam_step_factor():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
