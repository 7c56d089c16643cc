"""AutoAttack robustness evaluation (paper §4, App. F.3/F.4; docs/sources.md#autoattack).

The paper reports, per model and per L∞ budget ε ∈ {0.031, 0.0025, 0.0005, 1e-5} (in [0, 1]
pixel units), the robust accuracy of each of the four attacks of *standard* AutoAttack
(APGD-CE, APGD-T, FAB-T, Square), each run **individually from the clean inputs** (AutoAttack's
``run_standard_evaluation_individual``), and the worst case over the four: an example counts as
robust only if it is correctly classified clean and after every attack.

This module wraps ``pyautoattack`` (the PyPI packaging of the official AutoAttack code):

* :class:`NormalizedModel` folds the project's input normalisation ((x − 0.5)/0.5, inputs in
  [−1, 1]) into the model so that AutoAttack sees [0, 1] inputs, and reduces multi-output
  forwards to logits.
* ``precision`` (config ``autoattack.precision``, :mod:`atat.base.precision`): "fp32" (default)
  turns TF32 off (perturbations of 1e-5 vanish under TF32's 10-bit mantissa); "tf32" keeps
  PyTorch's defaults (cuDNN TF32 on), as the authors' code ran. Recorded in every result.
* :func:`evaluate_autoattack` runs the attacks on tensors and returns the JSON-serialisable
  result record; :func:`evaluate_autoattack_with_adversarials` returns the record *and* the
  adversarial examples.
* :func:`evaluate_autoattack_model_file` is one job of rule ``autoattack``: a trained
  ``model.pt`` on the first configured examples of its dataset, at one ε or at every ε of the
  config (``autoattack.job``), one JSON record per ε. It resumes: a job killed part-way
  (a cluster time limit) reruns neither a finished ε nor a finished batch of an attack
  (``results/.resume/autoattack/<model>/eps<tag>/``, see "Batches and resume" below).
* :func:`compare_precisions` (and its CLI :func:`precision_benchmark_main`, script
  ``workflow/scripts/bench_gpu_precision.py``; issue 13 item 18) measures Table 14's cells
  (robust accuracy at each ε for one model) under both precisions. TF32 exists only on CUDA
  GPUs of compute capability ≥ 8, so on CPU (or older GPUs) the two columns are identical by
  construction and every row says ``tf32_active: false``; only a GPU run measures the effect.

pyautoattack 0.2.0 quirks handled here (read from its source):

1. ``AutoAttack.__init__`` takes keyword-only arguments and has no ``verbose``/``log_path``
   arguments (GitHub's version has both); ``self.verbose`` is hard-coded to True and everything
   goes to the stdlib logger ``"auto-attack"`` (info/debug/warning). We capture its warnings
   (randomised/dynamic defence, zero gradients, probability outputs, Square check) into the
   result record.
2. ``run_standard_evaluation`` returns the tuple ``(x_adv, y_adv)`` where ``y_adv`` holds the
   prediction on ``x_adv`` for fooled points and the clean prediction otherwise, so the
   library's own per-example robust flags are exactly ``y_adv == y``.
3. ``run_standard_evaluation_individual`` has side effects that make it unsuitable: it leaves
   ``attacks_to_run`` set to the last attack and ``verbose`` False, and gives no per-attack
   timing or flags. We replicate it (set ``attacks_to_run = [attack]`` and call
   ``run_standard_evaluation`` once per attack) — the same code path, without the side effects.
4. ``run_standard_evaluation`` re-runs its sanity checks (``checks.check_randomized`` with 5
   forward passes, ``check_range_output``, ``check_dynamic``, ``check_n_classes``) before every
   attack; by default we run them once and stub them out inside the library for the attack
   runs (``library_checks="once"``; they only log). ``checks.check_dynamic`` calls
   ``sys.settrace(None)``, which silently removes any tracer
   installed before (coverage, debuggers); we restore the previous tracer. Its call counters
   (``checks.funcs``) are module globals never reset, so a single flagged model would flag every
   later model in the process; we reset them before each run.
5. Every sub-attack calls ``torch.random.manual_seed(seed)`` (global RNG) at the start of
   each ``perturb``, i.e. per batch. We run inside ``torch.random.fork_rng`` so the caller's
   RNG stream is untouched.
6. ``APGDAttack`` derives its step-size checkpoint schedule (``n_iter_2``, ``n_iter_min``,
   ``size_decr``) from ``n_iter`` **in the constructor only**; setting ``apgd.n_iter`` afterwards
   (the documented way to customise) leaves the 100-iteration schedule (first checkpoint at 22)
   in place. For version "custom" we recompute them as the constructor would. Version
   "standard" is not affected (100 iterations, as constructed).
7. With ``n_target_classes + 1 > n_classes`` APGD-T/FAB-T index past the sorted logits
   (AutoAttack only warns); we clamp ``n_target_classes`` to ``n_classes − 1`` and record it.
   APGD-T's targeted DLR loss needs at least 4 classes (it reads the 4th-largest logit).
8. In ``run_standard_evaluation`` FAB-T forces ``fab.n_restarts = 1`` whatever was configured;
   the settings we report are read back from the attack objects *after* each run, so they show
   what was actually used.
9. ``checks.check_n_classes`` prints APGD-T's target count in its FAB-T message (cosmetic).

Batches and resume. ``run_standard_evaluation`` attacks the clean-correct examples in
batches of ``batch_size``; we make that same split and call the library once per batch
(:func:`_run_batch`), after ``torch.manual_seed(seed)``. With quirk 5 a batch's outcome then
depends only on its examples, the model and the settings -- the random starts of APGD/FAB,
Square's random squares and a randomised model's draws are the same whichever batches ran
before in the process -- so the flags are the library's own single run's (tested) and a
batch saved by a killed job can stand in for rerunning it. Two more things make a resumed
record identical to an uninterrupted one: the library changes plain settings of its attack
objects while it runs (``loss``, ``targeted``, ``seed``, FAB-T's ``n_restarts = 1``, which
later FAB runs inherit), so each saved batch carries them and a resumed batch restores them;
and the library's warnings of each batch are saved and replayed in order. Everything before
the attacks (clean pass, checks) is recomputed on resume, from the same seed. The resume
directory is stamped with all that determines the record (settings, seed, precision,
device, library and torch versions, the model's weights and file checksum, the examples)
and emptied when any of it changed. Only the wall-clock ``seconds`` differ.

Randomised models (MID samples z = μ + σ·ε at evaluation) trigger AutoAttack's
"randomized defense" warning; as in the paper we still run version "standard" (not "rand") and
set ``randomized_model`` in the record.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import json
import logging
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from atat.base import io
from atat.base.fetch.verify import sha256sum
from atat.plan.config import check_autoattack_settings, eps_tag
from atat.plan.eps_scale import applied_pixel_radius
from atat.data.loading import make_loader
from atat.base.precision import (DEFAULT_PRECISION, PRECISIONS, attack_precision, check_precision,
                            no_tf32, tf32_active)
from atat.base.progress import Progress
from atat.training.train import load_model

log = logging.getLogger(__name__)

#: attacks of the standard ensemble, in AutoAttack's order
STANDARD_ATTACKS: tuple[str, ...] = ("apgd-ce", "apgd-t", "fab-t", "square")
#: every attack name pyautoattack's ``run_standard_evaluation`` understands
KNOWN_ATTACKS: tuple[str, ...] = ("apgd-ce", "apgd-t", "fab-t", "square", "apgd-dlr", "fab")
#: the paper's budgets (App. F.3), L∞ in [0, 1] pixel units
PAPER_EPSILONS: tuple[float, ...] = (0.031, 0.0025, 0.0005, 1e-5)

#: cheapest configuration that still runs all four attacks (CPU demo). Measured with 1 torch
#: thread on the shared 2-core machine, torchvision resnet18 (20 classes) at 64x64, every
#: example correctly classified (worst case), 4 epsilons: 54 s per model on 32 examples,
#: 102 s on 64 (about 20 forward passes per epsilon are fixed overhead: clean pass, checks,
#: each attack's own clean/final passes).
DEMO_SETTINGS: dict[str, dict[str, float]] = {
    "apgd": {"n_iter": 2, "n_restarts": 1},
    "apgd_t": {"n_target_classes": 1, "n_iter": 2, "n_restarts": 1},
    "fab": {"n_target_classes": 1, "n_iter": 2, "n_restarts": 1},
    "square": {"n_queries": 5, "p_init": 0.8},
}


# --------------------------------------------------------------------------- model wrapper
def _extract_logits(out: Any, logits_fn: Callable[[Any], Tensor] | None) -> Tensor:
    if logits_fn is not None:
        out = logits_fn(out)
    elif isinstance(out, (tuple, list)):
        out = out[0]
    elif isinstance(out, Mapping):
        if "logits" not in out:
            raise ValueError(
                f"model returned a mapping without a 'logits' key (keys: {sorted(out)}); "
                "pass logits_fn")
        out = out["logits"]
    if not isinstance(out, Tensor) or out.dim() != 2:
        raise ValueError(
            "model output must reduce to a (batch, n_classes) logits tensor, got "
            f"{type(out).__name__}{tuple(out.shape) if isinstance(out, Tensor) else ''}")
    return out


class NormalizedModel(nn.Module):
    """``forward(x01) = logits(model((x01 − mean) / std))`` for inputs ``x01`` in [0, 1].

    The project's models take inputs in [−1, 1] (mean = std = 0.5, hard-coded as in the
    original AutoAttack wrapper). ``logits_fn`` maps the wrapped model's raw output to logits;
    without it a tuple/list output yields element 0 and a mapping its ``"logits"`` entry.
    (Note: a model that returns ``(h, mu, sigma, logits)``, as MID does in the original code,
    needs ``logits_fn=lambda out: out[-1]``.)
    """

    def __init__(self, model: nn.Module, mean: float = 0.5, std: float = 0.5,
                 logits_fn: Callable[[Any], Tensor] | None = None):
        super().__init__()
        if not std > 0:
            raise ValueError(f"std must be > 0, got {std}")
        self.model = model
        self.mean = float(mean)
        self.std = float(std)
        self.logits_fn = logits_fn

    def forward(self, x01: Tensor) -> Tensor:
        return _extract_logits(self.model((x01 - self.mean) / self.std), self.logits_fn)


# --------------------------------------------------------------------------- TF32 off
# no_tf32 lives in atat.base.precision (shared with PGD); re-exported here.



# --------------------------------------------------------------------------- helpers
class _WarningCollector(logging.Handler):
    """Collects WARNING+ messages of the 'auto-attack' logger (deduplicated, in order)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg not in self.messages:
            self.messages.append(msg)

    # logger-like interface for pyautoattack.checks functions called directly
    def warning(self, msg: str) -> None:
        if msg not in self.messages:
            self.messages.append(msg)

    info = debug = lambda self, msg: None  # noqa: E731


@contextlib.contextmanager
def _frozen_eval(model: nn.Module) -> Iterator[None]:
    """Eval mode and requires_grad=False on all parameters (restored after).

    AutoAttack differentiates w.r.t. the input only; FAB calls ``y.backward`` which would
    otherwise accumulate gradients into the parameters.
    """
    was_training = model.training
    flags = [(p, p.requires_grad) for p in model.parameters()]
    model.eval()
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, rg in flags:
            p.requires_grad_(rg)
        model.train(was_training)


def _predict(model: nn.Module, x: Tensor, batch_size: int, device: torch.device) -> Tensor:
    preds = []
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_size):
            preds.append(model(x[i:i + batch_size].to(device)).argmax(1).cpu())
    return torch.cat(preds)


def _jsonable(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, Tensor):
        return _jsonable(v.item()) if v.numel() == 1 else v.tolist()
    if isinstance(v, torch.device):
        return str(v)
    return str(v)


_APGD_FIELDS = ("norm", "eps", "n_iter", "n_restarts", "loss", "eot_iter", "thr_decr",
                "n_iter_2", "n_iter_min", "size_decr", "use_largereps", "use_rs", "seed")
_FIELDS = {
    "apgd": _APGD_FIELDS,
    "apgd_targeted": _APGD_FIELDS + ("n_target_classes",),
    "fab": ("norm", "eps", "n_iter", "n_restarts", "n_target_classes", "targeted",
            "alpha_max", "eta", "beta", "seed"),
    "square": ("norm", "eps", "n_queries", "p_init", "n_restarts", "loss", "targeted",
               "rescale_schedule", "seed"),
}
_ATTACK_OBJECT = {"apgd-ce": "apgd", "apgd-dlr": "apgd", "apgd-t": "apgd_targeted",
                  "fab": "fab", "fab-t": "fab", "square": "square"}
_RENAME = {"thr_decr": "rho"}


def _read_settings(adversary: Any, obj_name: str) -> dict[str, Any]:
    obj = getattr(adversary, obj_name)
    return {_RENAME.get(f, f): _jsonable(getattr(obj, f)) for f in _FIELDS[obj_name]
            if hasattr(obj, f)}


def _validate_inputs(x01: Tensor, y: Tensor, epsilon: float, attacks: Sequence[str],
                     version: str, batch_size: int) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (
            math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if epsilon > 1:
        raise ValueError(f"epsilon must be <= 1 (L-inf in [0, 1] pixel units), got {epsilon!r}")
    if isinstance(attacks, str) or len(attacks) == 0:
        raise ValueError(f"attacks must be a non-empty sequence of names, got {attacks!r}")
    for a in attacks:
        if a not in KNOWN_ATTACKS:
            raise ValueError(f"unknown attack {a!r} (known: {list(KNOWN_ATTACKS)})")
    if len(set(attacks)) != len(attacks):
        raise ValueError(f"duplicate attack names in {list(attacks)}")
    if version not in ("standard", "custom"):
        raise ValueError(f"version must be 'standard' or 'custom', got {version!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(x01, Tensor) or x01.dim() != 4 or not x01.is_floating_point():
        raise ValueError("x01 must be a floating-point tensor of shape (N, C, H, W)")
    if x01.shape[0] == 0:
        raise ValueError("x01 is empty")
    if not isinstance(y, Tensor) or y.dim() != 1 or y.shape[0] != x01.shape[0]:
        raise ValueError(f"y must be a 1-D tensor with {x01.shape[0]} labels")
    if y.is_floating_point() or y.dtype == torch.bool:
        raise ValueError(f"y must hold integer class labels, got dtype {y.dtype}")
    if not torch.isfinite(x01).all():
        raise ValueError("x01 contains NaN or inf")
    lo, hi = float(x01.min()), float(x01.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(
            f"x01 must lie within [0, 1] (AutoAttack's input range), got min {lo:.4g}, "
            f"max {hi:.4g}; pass un-normalised images (the model wrapper applies (x-0.5)/0.5)")


def _library_version() -> str:
    try:
        return importlib.metadata.version("pyautoattack")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        import pyautoattack
        return str(getattr(pyautoattack, "__version__", "unknown"))


# --------------------------------------------------------------------------- resume
RESUME_RECORD = "record.json"


def _tensors_digest(named: Iterable[tuple[str, Tensor]]) -> str:
    """sha256 over names, dtypes, shapes and bytes of tensors (in the given order)."""
    h = hashlib.sha256()
    for name, t in named:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class _ResumeDir:
    """The saved progress of one AutoAttack evaluation (one ε of one model): ``inputs.json``
    (the fingerprint: everything that determines the record), ``<attack>/batch<k>.pt`` per
    finished batch and ``record.json`` once the ε is complete. Opened with another
    fingerprint (a retrained model, other examples, settings, seed, precision, device or
    library version) the directory is emptied first: stale progress is never mixed in. Files
    are written atomically (:mod:`atat.base.io`); a corrupt batch file is moved aside and that
    batch is rerun."""

    def __init__(self, path: str | Path, fingerprint: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.kept = io.prepare_resume_dir(
            self.path, fingerprint,
            stale="was written for another model, examples or settings: this epsilon starts over")

    def record(self) -> dict[str, Any] | None:
        """The finished record, or None (none yet, or unreadable: then it is removed)."""
        path = self.path / RESUME_RECORD
        if not path.exists():
            return None
        try:
            return io.read_json(path)
        except io.CheckpointError as e:
            log.warning("%s -- recomputing this epsilon", e)
            path.unlink()
            return None

    def _batch_path(self, attack: str, k: int) -> Path:
        return self.path / attack / f"batch{k:05d}.pt"

    def batch(self, attack: str, k: int, index: Tensor, need_recheck: bool
              ) -> dict[str, Any] | None:
        """Batch ``k`` of ``attack`` as saved, or None when it must run (not saved yet,
        corrupt -- moved aside --, or saved for other examples)."""
        saved = io.load_resume(self._batch_path(attack, k))
        if saved is None:
            return None
        if not (torch.equal(saved.get("index", torch.empty(0)), index)
                and (saved.get("recheck_pred") is not None or not need_recheck)):
            log.warning("%s does not belong to this batch: rerunning it",
                        self._batch_path(attack, k))
            return None
        return saved

    def save_batch(self, attack: str, k: int, index: Tensor, saved: Mapping[str, Any]) -> None:
        io.torch_save({**saved, "index": index}, self._batch_path(attack, k))

    def save_record(self, record: Mapping[str, Any]) -> None:
        """The finished record; its batch files are no longer needed."""
        io.write_json(self.path / RESUME_RECORD, record)
        for sub in self.path.iterdir():
            if sub.is_dir():
                shutil.rmtree(sub, ignore_errors=True)


def _resume_fingerprint(net: NormalizedModel, x01: Tensor, y: Tensor, *,
                        inputs: Mapping[str, Any] | None, **arguments: Any) -> dict[str, Any]:
    """What determines an AutoAttack record: the arguments, the library and torch versions,
    the attacked model's weights and normalisation, the examples, and the caller's
    ``inputs`` (e.g. the model file's sha256)."""
    return {**arguments, "library_version": _library_version(),
            "torch_version": torch.__version__,
            "model_state_sha256": _tensors_digest(net.state_dict().items()),
            "normalization": [net.mean, net.std],
            "examples_sha256": _tensors_digest([("x", x01), ("y", y)]),
            "inputs": dict(inputs or {})}


# --------------------------------------------------------------------------- steps
def _check_arguments(x01: Tensor, y: Tensor, epsilon: float, attacks: Sequence[str],
                     version: str, batch_size: int, settings: Mapping[str, Any] | None,
                     library_checks: str, precision: str
                     ) -> tuple[tuple[str, ...], str, dict[str, dict[str, Any]]]:
    """Validated ``(attacks, precision, settings overrides)``; stops on any bad argument."""
    attacks = tuple(attacks)
    precision = check_precision(precision, "precision")
    _validate_inputs(x01, y, epsilon, attacks, version, batch_size)
    if library_checks not in ("once", "every_attack"):
        raise ValueError(f"library_checks must be 'once' or 'every_attack', "
                         f"got {library_checks!r}")
    # the same check as validate_config's (autoattack.settings), at job time for direct calls
    overrides = check_autoattack_settings(settings, version)
    return attacks, precision, overrides


def _attacked_net(model: nn.Module, normalize: bool,
                  logits_fn: Callable[[Any], Tensor] | None, device: torch.device) -> nn.Module:
    """The model as AutoAttack sees it: [0, 1] inputs -> logits, float32, on ``device``."""
    if isinstance(model, NormalizedModel):
        if logits_fn is not None:
            raise ValueError("logits_fn given but model is already a NormalizedModel")
        net: nn.Module = model
    elif normalize:
        net = NormalizedModel(model, logits_fn=logits_fn)
    else:
        net = NormalizedModel(model, mean=0.0, std=1.0, logits_fn=logits_fn)
    if any(t.is_floating_point() and t.dtype != torch.float32
           for t in list(net.parameters()) + list(net.buffers())):
        log.info("model is not float32: evaluating a float32 copy")
        net = copy.deepcopy(net).float()
    return net.to(device)


def _isolate(stack: contextlib.ExitStack, net: nn.Module, device: torch.device, precision: str,
             collector: _WarningCollector) -> None:
    """Enter the run's context on ``stack``: the precision, the model frozen in eval mode, a
    forked RNG (quirk 5), and the library's warnings routed to ``collector``."""
    aa_logger = logging.getLogger("auto-attack")
    stack.enter_context(attack_precision(precision))
    stack.enter_context(_frozen_eval(net))
    stack.enter_context(torch.random.fork_rng(
        devices=[device] if device.type == "cuda" else []))
    aa_logger.addHandler(collector)
    stack.callback(aa_logger.removeHandler, collector)
    if aa_logger.getEffectiveLevel() > logging.WARNING:  # make sure warnings reach us
        stack.callback(aa_logger.setLevel, aa_logger.level)
        aa_logger.setLevel(logging.WARNING)


def _count_classes(net: nn.Module, x01: Tensor, y: Tensor, attacks: Sequence[str],
                   device: torch.device) -> int:
    """The model's number of outputs, checked against the labels and the attacks."""
    with torch.no_grad():
        n_classes = int(net(x01[:1].to(device)).shape[1])
    if n_classes < 2:
        raise ValueError(f"model has {n_classes} output(s); need at least 2 classes")
    if int(y.min()) < 0 or int(y.max()) >= n_classes:
        raise ValueError(f"labels must be in [0, {n_classes - 1}]")
    if "apgd-t" in attacks and n_classes < 4:
        raise ValueError(f"attack 'apgd-t' (targeted DLR loss) needs >= 4 classes, "
                         f"the model has {n_classes}")
    if "apgd-dlr" in attacks and n_classes < 3:
        raise ValueError(f"attack 'apgd-dlr' needs >= 3 classes, the model has {n_classes}")
    return n_classes


def _configure_adversary(net: nn.Module, *, epsilon: float, seed: int, device: torch.device,
                         version: str, overrides: Mapping[str, Mapping[str, Any]],
                         n_classes: int) -> tuple[Any, list[str]]:
    """AutoAttack configured exactly as its standard version does, then the custom
    overrides (quirk 6) and the target-count clamp (quirk 7); returns it and the notes."""
    from pyautoattack import AutoAttack  # local: heavy import, optional for callers

    adversary = AutoAttack(net, norm="Linf", eps=epsilon, version="standard",
                           seed=seed, device=device)
    notes: list[str] = []
    if version == "custom":
        adversary.version = "custom"  # only used for logging and the 'rand' check
        for group, values in overrides.items():
            obj = {"apgd": adversary.apgd, "apgd_t": adversary.apgd_targeted,
                   "fab": adversary.fab, "square": adversary.square}[group]
            for key, val in values.items():
                setattr(obj, "thr_decr" if key == "rho" else key, val)
            if group in ("apgd", "apgd_t") and "n_iter" in values:
                # quirk 6: the checkpoint schedule is only derived in __init__
                obj.n_iter_orig = obj.n_iter
                obj.n_iter_2 = max(int(0.22 * obj.n_iter), 1)
                obj.n_iter_min = max(int(0.06 * obj.n_iter), 1)
                obj.size_decr = max(int(0.03 * obj.n_iter), 1)
    for obj, name in ((adversary.apgd_targeted, "apgd-t"), (adversary.fab, "fab-t")):
        if obj.n_target_classes > n_classes - 1:
            notes.append(f"{name}: n_target_classes clamped from {obj.n_target_classes} "
                         f"to {n_classes - 1} (model has {n_classes} classes)")
            obj.n_target_classes = n_classes - 1
    return adversary, notes


def _sanity_checks(stack: contextlib.ExitStack, checks: Any, adversary: Any, net: nn.Module,
                   xb: Tensor, yb: Tensor, *, attacks: Sequence[str], n_classes: int,
                   batch_size: int, version: str, library_checks: str,
                   collector: _WarningCollector) -> _WarningCollector:
    """AutoAttack's sanity checks on the first batch. The randomness check always runs (its
    messages are returned); with ``library_checks="once"`` the others run here once and are
    stubbed out inside the library for the attack runs (quirk 4; undone by ``stack``)."""
    randomized_probe = _WarningCollector()
    checks.check_randomized(net, xb, yb, bs=batch_size, logger=randomized_probe)
    if randomized_probe.messages:
        log.warning("model output is random at evaluation (AutoAttack suggests version "
                    "'rand'); running version %r as in the paper", version)
    if library_checks == "once":
        # run_standard_evaluation repeats these checks (7 extra forward passes) for
        # every attack; run them once here and switch them off inside the library
        checks.check_range_output(net, xb, logger=collector)
        checks.funcs.update({k: 0 for k in checks.funcs})  # quirk 4
        tracer = sys.gettrace()
        try:
            checks.check_dynamic(net, xb, False, logger=collector)
        finally:
            sys.settrace(tracer)  # quirk 4
        checks.check_n_classes(n_classes, list(attacks),
                               adversary.apgd_targeted.n_target_classes,
                               adversary.fab.n_target_classes, logger=collector)
        for fname, repl in (
                ("check_randomized", lambda *a, **k: None),
                ("check_range_output", lambda *a, **k: n_classes),
                ("check_dynamic", lambda *a, **k: None),
                ("check_n_classes", lambda *a, **k: None)):
            stack.callback(setattr, checks, fname, getattr(checks, fname))
            setattr(checks, fname, repl)
    return randomized_probe


def _robust_batches(clean_correct: Tensor, batch_size: int) -> list[Tensor]:
    """The batches ``run_standard_evaluation`` attacks: the clean-correct examples (indices,
    ascending), ``batch_size`` at a time (the library's own split of its robust points)."""
    idx = torch.nonzero(clean_correct).flatten()
    return [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)]


#: the attack objects of an AutoAttack adversary whose plain settings a batch may change
#: (``run_standard_evaluation`` sets ``loss``, ``targeted``, ``seed``, FAB-T's ``n_restarts``)
_ADVERSARY_OBJECTS: tuple[str, ...] = ("apgd", "apgd_targeted", "fab", "square")


def _adversary_state(adversary: Any) -> dict[str, dict[str, Any]]:
    """The plain (None/bool/int/float/str) attributes of the adversary's attack objects."""
    return {name: {k: v for k, v in vars(getattr(adversary, name)).items()
                   if v is None or isinstance(v, (bool, int, float, str))}
            for name in _ADVERSARY_OBJECTS}


def _restore_adversary_state(adversary: Any, state: Mapping[str, Mapping[str, Any]]) -> None:
    for name, values in state.items():
        obj = getattr(adversary, name)
        for key, value in values.items():
            setattr(obj, key, value)


def _run_batch(adversary: Any, checks: Any, attack: str, net: nn.Module, x01: Tensor,
               y: Tensor, *, seed: int, do_recheck: bool, batch_size: int,
               device: torch.device, collector: _WarningCollector
               ) -> tuple[dict[str, Any], Tensor]:
    """One attack on one batch of clean-correct examples (``run_standard_evaluation`` on the
    batch alone: the library reseeds every attack's ``perturb`` with ``seed``, so a batch's
    result depends on its examples only). The global RNG is reset to ``seed`` first (what a
    randomised model draws in the library's clean pass and final check then does not depend
    on the batches before). Returns the batch's saved outcome and its adversarial examples:
    ``y_adv`` (the library's predictions), ``linf`` (per example), ``recheck_pred`` (an
    independent prediction on ``x_adv``, or None), ``seconds``, ``warnings`` (the library's,
    in order; the run's ``collector`` gets them from the caller, as from a resumed batch)
    and ``state`` (:func:`_adversary_state` after the run)."""
    adversary.attacks_to_run = [attack]
    checks.funcs.update({k: 0 for k in checks.funcs})  # quirk 4
    torch.manual_seed(seed)
    aa_logger = logging.getLogger("auto-attack")
    own = _WarningCollector()
    aa_logger.removeHandler(collector)
    aa_logger.addHandler(own)
    tracer = sys.gettrace()
    t0 = time.perf_counter()
    try:
        out = adversary.run_standard_evaluation(x01, y, batch_size=batch_size)
    finally:
        sys.settrace(tracer)  # quirk 4
        aa_logger.removeHandler(own)
        aa_logger.addHandler(collector)
    seconds = time.perf_counter() - t0
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"unexpected return from pyautoattack: {type(out)}")
    x_adv, y_adv = out
    x_adv = x_adv.detach().to("cpu", torch.float32)
    return {
        "y_adv": y_adv.detach().to("cpu", torch.long),
        "linf": (x_adv.double() - x01.double()).abs().flatten(1).amax(1),
        # the paper's CHECK metric: predictions recomputed independently of the library
        "recheck_pred": _predict(net, x_adv, batch_size, device) if do_recheck else None,
        "seconds": seconds,
        "warnings": list(own.messages),
        "state": _adversary_state(adversary),
    }, x_adv


def _run_attack(adversary: Any, checks: Any, attack: str, net: nn.Module, x01: Tensor,
                y: Tensor, clean_correct: Tensor, *, do_recheck: bool, batch_size: int,
                device: torch.device, seed: int, collector: _WarningCollector,
                resume: _ResumeDir | None = None, keep_adversarials: bool = True,
                ) -> tuple[dict[str, Any], Tensor | None]:
    """One attack from the clean inputs, batch by batch (:func:`_robust_batches`): its result
    entry and, with ``keep_adversarials``, the adversarial examples (the clean input wherever
    the attack failed). With ``resume`` every finished batch is saved and a saved batch is
    taken instead of rerun: its outcome, its warnings (replayed into ``collector`` in batch
    order) and the adversary's settings after it (restored, so the next batch and the record
    see what an uninterrupted run leaves)."""
    n = len(y)
    batches = _robust_batches(clean_correct, batch_size)
    flags = torch.zeros(n, dtype=torch.bool)
    recheck_flags = torch.zeros(n, dtype=torch.bool)
    x_adv = x01.clone() if keep_adversarials else None
    linf_max, seconds = 0.0, 0.0
    for k, idx in enumerate(batches):
        saved = resume.batch(attack, k, idx, do_recheck) if resume is not None else None
        if saved is not None:
            _restore_adversary_state(adversary, saved["state"])
            log.info("%s batch %d/%d: resumed", attack, k + 1, len(batches))
        else:
            saved, xb = _run_batch(adversary, checks, attack, net, x01[idx], y[idx], seed=seed,
                                   do_recheck=do_recheck, batch_size=batch_size, device=device,
                                   collector=collector)
            if resume is not None:
                resume.save_batch(attack, k, idx, saved)
            if x_adv is not None:
                x_adv[idx] = xb
        for message in saved["warnings"]:
            collector.warning(message)
        flags[idx] = saved["y_adv"].eq(y[idx])  # the library's own robust flags (quirk 2)
        if do_recheck:  # every example of a batch is clean-correct
            recheck_flags[idx] = saved["recheck_pred"].eq(y[idx])
        linf_max = max(linf_max, float(saved["linf"].max()))
        seconds += float(saved["seconds"])
    entry = {
        "robust_accuracy": float(flags.float().mean()),
        "n_robust": int(flags.sum()),
        "seconds": seconds,
        "robust_accuracy_recheck": (float(recheck_flags.float().mean()) if do_recheck
                                    else None),
        "max_linf_perturbation": linf_max,
        "robust_flags": flags.int().tolist(),
        "robust_flags_recheck": recheck_flags.int().tolist() if do_recheck else None,
    }
    return entry, x_adv


def _worst_case(per_attack: Mapping[str, Mapping[str, Any]], attacks: Sequence[str], n: int,
                clean_correct: Tensor, do_recheck: bool) -> tuple[Tensor, Tensor]:
    """Per example: robust under every attack (AutoAttack's flags, and the re-check's)."""
    worst = torch.ones(n, dtype=torch.bool)
    worst_recheck = clean_correct.clone()
    for attack in attacks:
        worst &= torch.tensor(per_attack[attack]["robust_flags"], dtype=torch.bool)
        if do_recheck:
            worst_recheck &= torch.tensor(per_attack[attack]["robust_flags_recheck"],
                                          dtype=torch.bool)
    return worst, worst_recheck


# --------------------------------------------------------------------------- main entry
def evaluate_autoattack_with_adversarials(
        model: nn.Module, x01: Tensor, y: Tensor, *, epsilon: float,
        attacks: Sequence[str] = STANDARD_ATTACKS, version: str = "standard",
        settings: Mapping[str, Any] | None = None, batch_size: int = 128,
        seed: int = 0, device: str | torch.device = "cpu", normalize: bool = True,
        logits_fn: Callable[[Any], Tensor] | None = None,
        recheck: bool | None = None, library_checks: str = "once",
        precision: str = DEFAULT_PRECISION,
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """:func:`evaluate_autoattack` that also returns the adversarial examples.

    Returns ``(record, adversarials)`` where ``adversarials[attack]`` is the (N, C, H, W)
    float32 CPU tensor AutoAttack returned (clean input wherever the attack failed).
    """
    return _evaluate(model, x01, y, epsilon=epsilon, attacks=attacks, version=version,
                     settings=settings, batch_size=batch_size, seed=seed, device=device,
                     normalize=normalize, logits_fn=logits_fn, recheck=recheck,
                     library_checks=library_checks, precision=precision,
                     keep_adversarials=True)


def _evaluate(model: nn.Module, x01: Tensor, y: Tensor, *, epsilon: float,
              attacks: Sequence[str], version: str, settings: Mapping[str, Any] | None,
              batch_size: int, seed: int, device: str | torch.device, normalize: bool,
              logits_fn: Callable[[Any], Tensor] | None, recheck: bool | None,
              library_checks: str, precision: str, keep_adversarials: bool,
              resume_dir: str | Path | None = None, resume_inputs: Mapping[str, Any] | None = None,
              ) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The evaluation behind :func:`evaluate_autoattack` and
    :func:`evaluate_autoattack_with_adversarials` (``resume_dir``: see the former)."""
    from pyautoattack import checks  # local: heavy import, optional for callers

    attacks, precision, overrides = _check_arguments(x01, y, epsilon, attacks, version,
                                                     batch_size, settings, library_checks,
                                                     precision)
    device = torch.device(device)
    epsilon = float(epsilon)
    net = _attacked_net(model, normalize, logits_fn, device)
    x01 = x01.detach().to("cpu", torch.float32).contiguous()
    y = y.detach().to("cpu", torch.long)
    n = x01.shape[0]

    resume = None
    if resume_dir is not None:
        resume = _ResumeDir(resume_dir, _resume_fingerprint(
            net, x01, y, inputs=resume_inputs, epsilon=epsilon, attacks=list(attacks),
            version=version, settings=overrides, batch_size=batch_size, seed=seed,
            device=str(device), normalize=normalize, recheck=recheck,
            library_checks=library_checks, precision=precision))
        if (done := resume.record()) is not None:
            log.info("AutoAttack eps=%g: finished before (%s), not recomputed", epsilon,
                     resume.path)
            return done, {}

    collector = _WarningCollector()
    adversarials: dict[str, Tensor] = {}
    t_start = time.perf_counter()

    with contextlib.ExitStack() as stack:
        _isolate(stack, net, device, precision, collector)
        torch.manual_seed(seed)
        n_classes = _count_classes(net, x01, y, attacks, device)
        adversary, notes = _configure_adversary(net, epsilon=epsilon, seed=seed, device=device,
                                                version=version, overrides=overrides,
                                                n_classes=n_classes)
        # clean accuracy (once) and AutoAttack's sanity checks
        clean_correct = _predict(net, x01, batch_size, device).eq(y)
        randomized_probe = _sanity_checks(
            stack, checks, adversary, net, x01[:batch_size].to(device),
            y[:batch_size].to(device), attacks=attacks, n_classes=n_classes,
            batch_size=batch_size, version=version, library_checks=library_checks,
            collector=collector)
        randomized = bool(randomized_probe.messages)
        do_recheck = randomized if recheck is None else bool(recheck)

        per_attack: dict[str, dict[str, Any]] = {}
        effective: dict[str, dict[str, Any]] = {}
        attacks_done = Progress(len(attacks), f"eps={epsilon:g}: attacks done", enabled=False)
        for i, attack in enumerate(attacks):
            log.info("[%d/%d] %s at eps=%g on %d examples ...", i + 1, len(attacks), attack,
                     epsilon, n)
            per_attack[attack], x_adv = _run_attack(
                adversary, checks, attack, net, x01, y, clean_correct, do_recheck=do_recheck,
                batch_size=batch_size, device=device, seed=seed, collector=collector,
                resume=resume, keep_adversarials=keep_adversarials)
            if x_adv is not None:
                adversarials[attack] = x_adv
            effective[attack] = _read_settings(adversary, _ATTACK_OBJECT[attack])
            log.info("[%d/%d] %s: robust accuracy %.2f%% (%.1f s) | %s", i + 1, len(attacks),
                     attack, 100 * per_attack[attack]["robust_accuracy"],
                     per_attack[attack]["seconds"], attacks_done.step())  # with ETA

        worst, worst_recheck = _worst_case(per_attack, attacks, n, clean_correct, do_recheck)
        record = {
            "epsilon": epsilon,
            "norm": "Linf",
            "input_range": [0.0, 1.0],
            "version": version,
            "attacks": list(attacks),
            "individual": True,
            "settings_requested": overrides,
            "settings": effective,
            "settings_notes": notes,
            "library": {"name": "pyautoattack", "version": _library_version()},
            "torch_version": torch.__version__,
            "seed": seed,
            "batch_size": batch_size,
            "device": str(device),
            "precision": precision,
            "tf32_active": tf32_active(precision, device),
            "n_examples": n,
            "n_classes": n_classes,
            "clean_accuracy": float(clean_correct.float().mean()),
            "clean_flags": clean_correct.int().tolist(),
            "robust_accuracy": float(worst.float().mean()),
            "robust_flags": worst.int().tolist(),
            "robust_accuracy_recheck": (float(worst_recheck.float().mean()) if do_recheck
                                        else None),
            "library_checks": library_checks,
            "per_attack": per_attack,
            "randomized_model": randomized or any(
                "randomized defense" in m for m in collector.messages),
            "library_warnings": list(dict.fromkeys(randomized_probe.messages
                                                   + collector.messages)),
            "seconds": time.perf_counter() - t_start,
        }
    if resume is not None:
        resume.save_record(record)
    log.info("AutoAttack eps=%g: clean %.2f%%, worst-case robust %.2f%% (%.1f s)", epsilon,
             100 * record["clean_accuracy"], 100 * record["robust_accuracy"], record["seconds"])
    return record, adversarials


def evaluate_autoattack(model: nn.Module, x01: Tensor, y: Tensor, *, epsilon: float,
                        attacks: Sequence[str] = STANDARD_ATTACKS, version: str = "standard",
                        settings: Mapping[str, Any] | None = None, batch_size: int = 128,
                        seed: int = 0, device: str | torch.device = "cpu",
                        normalize: bool = True,
                        logits_fn: Callable[[Any], Tensor] | None = None,
                        recheck: bool | None = None,
                        library_checks: str = "once",
                        precision: str = DEFAULT_PRECISION,
                        resume_dir: str | Path | None = None,
                        resume_inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """AutoAttack (L∞) robust accuracy of ``model`` on ``x01`` (in [0, 1]) with labels ``y``.

    ``model`` takes inputs in [−1, 1]; it is wrapped in :class:`NormalizedModel` (unless it
    already is one, or ``normalize=False`` for a model that takes [0, 1] inputs). Each attack
    runs individually from the clean inputs; per attack an example is robust iff it is
    classified correctly clean and after the attack (AutoAttack's own flags); the worst case
    (``robust_accuracy``) is the AND over attacks.

    ``version="standard"``: AutoAttack's fixed hyper-parameters (APGD-CE 100 iterations,
    1 restart; APGD-T 9 targets, 100 iterations; FAB-T 9 targets, 100 iterations, 1 restart;
    Square 5000 queries, p_init 0.8). ``version="custom"``: the same, overridden by
    ``settings`` (groups "apgd", "apgd_t", "fab", "square"; see :data:`DEMO_SETTINGS`).
    ``n_target_classes`` is clamped to ``n_classes − 1`` in both versions.

    ``recheck``: also recompute clean and adversarial predictions independently (the
    original code's CHECK metric; fields ``*_recheck``); ``None`` = only for randomised models,
    where it can differ from AutoAttack's flags. ``library_checks``: "once" runs AutoAttack's
    sanity checks (randomised / dynamic defence, probability outputs, class count) once per
    call instead of before every attack (they cost 7 forward passes each time and never change
    the attack); "every_attack" keeps the library's behaviour.

    ``precision``: "fp32" (default) runs in float32 with TF32 off; "tf32" with PyTorch's
    default backend flags (cuDNN TF32 on, as the authors' code ran; no effect on CPU).
    Runs with the model in eval mode without parameter gradients, and is
    deterministic for a fixed ``seed`` (deterministic model and kernels). Returns a
    JSON-serialisable record (see :func:`evaluate_autoattack_with_adversarials` for the
    adversarial examples).

    Record: ``epsilon``, ``norm``, ``version``, ``precision``, ``tf32_active`` (whether TF32
    was possible: precision tf32 on a CUDA device of compute capability ≥ 8), ``attacks``,
    ``settings`` (per attack, read back
    from the attack objects after the run: n_iter, n_restarts, n_target_classes, n_queries,
    p_init, rho, eps, seed, ...), ``settings_requested``, ``settings_notes`` (clamping),
    ``library`` (name, version), ``n_examples``, ``n_classes``, ``clean_accuracy``,
    ``clean_flags``, ``robust_accuracy`` (worst case), ``robust_flags`` (worst case, 0/1 per
    example), ``per_attack[name]`` (``robust_accuracy``, ``n_robust``, ``seconds``,
    ``robust_flags``, ``max_linf_perturbation``, recheck fields), ``randomized_model``,
    ``library_warnings``, ``seconds``.

    Batches and resume: each attack runs on the clean-correct examples ``batch_size`` at a
    time, each batch a call of the library on that batch alone (the split the library makes
    itself; every attack's ``perturb`` reseeds torch with ``seed``, and the global RNG is reset
    to ``seed`` before each batch), so a batch's outcome depends on its examples, the model
    and the settings only -- not on which batches ran before it in the process. With
    ``resume_dir`` every finished batch is saved there (its predictions, per-example
    perturbation, re-check predictions, timing, the library's warnings and the adversary's
    settings after it) and the finished record too; a rerun takes every saved batch instead
    of running it (restoring the adversary's settings, replaying the warnings in order) and
    returns a finished record at once. Hence a record interrupted and resumed equals the
    uninterrupted one in every field but the wall-clock ``seconds`` (tested byte for byte).
    The directory is stamped with everything that determines the record (arguments, library
    and torch versions, the model's weights, the examples, ``resume_inputs``) and emptied when
    any of it changed.
    """
    record, _ = _evaluate(
        model, x01, y, epsilon=epsilon, attacks=attacks, version=version, settings=settings,
        batch_size=batch_size, seed=seed, device=device, normalize=normalize,
        logits_fn=logits_fn, recheck=recheck, library_checks=library_checks,
        precision=precision, keep_adversarials=False, resume_dir=resume_dir,
        resume_inputs=resume_inputs)
    return record


# --------------------------------------------------------------------------- model files
def first_examples(dataset_root: str | Path, split: str, n: int, resolution: int,
                   seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` examples of a split, un-normalised in [0, 1]: the first ``n`` in manifest order, or
    with ``seed`` (the AutoAttack jobs: ``autoattack.seed``) ``n`` drawn without replacement by
    a permutation seeded with it, kept in manifest order. A manifest lists a split identity by
    identity, so its first ``n`` images are the first identities' only (the demo's first 64
    validation images: 13 of 20 identities; its first 256 test images: 5); the authors' code
    takes the first batches of a validation split drawn by a random permutation, i.e. a random
    sample of it."""
    loader = make_loader(dataset_root, split, resolution=resolution, batch_size=min(n, 256),
                         train=False, normalize=False)
    if seed is not None:
        ds = loader.dataset
        pick = sorted(torch.randperm(len(ds), generator=torch.Generator().manual_seed(int(seed)))
                      [:n].tolist())
        loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, pick),
                                             batch_size=min(n, 256), shuffle=False)
    xs, ys, got = [], [], 0
    for x, y in loader:
        xs.append(x)
        ys.append(y)
        got += len(y)
        if got >= n:
            break
    x, y = torch.cat(xs)[:n], torch.cat(ys)[:n]
    if len(y) < n:
        log.warning("split '%s' has only %d examples; AutoAttack runs on all of them (asked %d)",
                    split, len(y), n)
    return x, y


class DefenseLogits(torch.nn.Module):
    """A trained model through its defense's inference path (``defense.logits``), on the
    models' [-1, 1] inputs, as a module (so it can be copied and put in train or eval mode)."""

    def __init__(self, model: torch.nn.Module, defense: Any) -> None:
        super().__init__()
        self.inner = model
        self.defense = defense

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.defense.logits(self.inner, x)


def _trained_model(model_path: str | Path, device: str) -> tuple[NormalizedModel, dict]:
    """The trained model as AutoAttack sees it: [0, 1] inputs → logits through the defense's
    inference path, eval mode."""
    model, defense, ckpt = load_model(model_path, device)
    return NormalizedModel(DefenseLogits(model, defense)).eval(), ckpt


def evaluate_autoattack_model_file(*, model_path: str | Path, dataset_root: str | Path,
                                   outputs: Mapping[float, str | Path],
                                   settings: Mapping[str, Any], resolution: int,
                                   device: str = "cpu", resume_dir: str | Path | None = None,
                                   epsilon_factor: float = 1.0) -> list[dict[str, Any]]:
    """One job of rule ``autoattack``: the trained model at each ε of ``outputs`` (ε → JSON
    path, run in that order), the model and its examples loaded once (config
    ``autoattack.job``: one ε per job, or every ε of the model in one job). ``settings`` is
    the config's ``autoattack`` block (``precision`` defaults to fp32). Each record (with
    ``precision`` and ``tf32_active``) is written as soon as its ε is done. Every ε starts from
    ``settings["seed"]`` (:func:`evaluate_autoattack` seeds before its first forward and runs
    inside a forked RNG), so a record does not depend on which ε ran before it in the process:
    both job layouts write the same files (``seconds`` aside).

    ``epsilon_factor`` (config ``epsilon_scale.factor``; :mod:`atat.plan.eps_scale`): the keys
    of ``outputs`` are the paper's ε; the attack runs at ``min(factor x ε, 1)``. The record's
    ``epsilon`` and ``epsilon_tag`` stay the paper's ε; ``epsilon_applied`` and
    ``epsilon_factor`` say what ran.

    ``resume_dir`` (rule ``autoattack``: ``results/.resume/autoattack/<model>``): each ε keeps
    its progress in ``<resume_dir>/eps<tag>/`` (tag of the configured ε, as the output file),
    per finished batch and, once done, its record (see :func:`evaluate_autoattack`), stamped
    with the model file's sha256 besides the settings and the examples. A job killed part-way
    (a time limit; Snakemake then deletes the outputs it had written) reruns no finished ε and
    no finished batch, and writes the records the uninterrupted job writes. The job removes
    its ε directories once every output is written."""
    if not outputs:
        raise ValueError("evaluate_autoattack_model_file: no epsilon to evaluate")
    precision = check_precision(settings.get("precision", DEFAULT_PRECISION))
    net, ckpt = _trained_model(model_path, device)
    x, y = first_examples(dataset_root, settings["split"], settings["n_examples"], resolution,
                          settings["seed"])  # a seeded sample of the split
    inputs = {"model_file_sha256": sha256sum(model_path)} if resume_dir is not None else None
    eps_dirs = {epsilon: (Path(resume_dir) / f"eps{eps_tag(epsilon)}" if resume_dir is not None
                          else None) for epsilon in outputs}
    results = []
    for epsilon, out_path in outputs.items():
        applied = applied_pixel_radius(epsilon_factor, epsilon)  # the epsilon the attack runs at
        result = evaluate_autoattack(
            net, x, y, epsilon=applied,
            attacks=tuple(settings["attacks"]), version=settings["version"],
            settings=settings.get("settings") or None, batch_size=settings["batch_size"],
            seed=settings["seed"], device=device, precision=precision,
            resume_dir=eps_dirs[epsilon], resume_inputs=inputs)
        result.update(model_id=ckpt["model_id"], split=settings["split"],
                      epsilon=float(epsilon), epsilon_applied=applied,
                      epsilon_factor=float(epsilon_factor),
                      epsilon_tag=eps_tag(epsilon), model_path=str(model_path))
        io.write_json(out_path, result)
        log.info("%s eps=%s robust accuracy %.4f (clean %.4f, precision %s)", ckpt["model_id"],
                 eps_tag(epsilon), result["robust_accuracy"], result["clean_accuracy"],
                 precision)
        results.append(result)
    for path in eps_dirs.values():
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
    return results


# --------------------------------------------------------------------------- precision bench
def _device_name(device: str | torch.device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    return str(device)


def compare_precisions(model: torch.nn.Module, x01: torch.Tensor, y: torch.Tensor, *,
                       epsilons: Sequence[float], attacks: Sequence[str],
                       version: str = "standard", settings: Mapping[str, Any] | None = None,
                       batch_size: int = 128, seed: int = 0, device: str = "cpu",
                       precisions: Sequence[str] = PRECISIONS) -> dict[str, Any]:
    """AutoAttack robust accuracy of ``model`` (see :func:`evaluate_autoattack`
    for its arguments) at each ε under each precision, same examples and seed. Returns
    ``{"device", "torch_version", "rows": [{epsilon, precision, tf32_active, clean_accuracy,
    robust_accuracy, robust_<attack>, seconds}], "differences": [{epsilon, robust_fp32,
    robust_tf32, tf32_minus_fp32, n_examples_differing, tf32_active}], "note"}``
    (``differences`` only when both fp32 and tf32 ran)."""
    precisions = [check_precision(p, "precisions") for p in precisions]
    rows: list[dict[str, Any]] = []
    flags: dict[tuple[float, str], list[int]] = {}
    for eps in epsilons:
        for precision in precisions:
            rec = evaluate_autoattack(model, x01, y, epsilon=float(eps), attacks=attacks,
                                      version=version, settings=settings,
                                      batch_size=batch_size, seed=seed, device=device,
                                      precision=precision)
            row = {"epsilon": float(eps), "precision": precision,
                   "tf32_active": rec["tf32_active"], "n_examples": rec["n_examples"],
                   "clean_accuracy": rec["clean_accuracy"],
                   "robust_accuracy": rec["robust_accuracy"], "seconds": rec["seconds"]}
            row.update({f"robust_{a}": v["robust_accuracy"] for a, v in rec["per_attack"].items()})
            rows.append(row)
            flags[(float(eps), precision)] = rec["robust_flags"]
            log.info("eps=%g %s: robust %.4f (clean %.4f, tf32 active: %s, %.1f s)", eps,
                     precision, rec["robust_accuracy"], rec["clean_accuracy"],
                     rec["tf32_active"], rec["seconds"])
    differences = []
    if {"fp32", "tf32"} <= set(precisions):
        by = {(r["epsilon"], r["precision"]): r for r in rows}
        for eps in epsilons:
            a, b = by[(float(eps), "fp32")], by[(float(eps), "tf32")]
            fa, fb = flags[(float(eps), "fp32")], flags[(float(eps), "tf32")]
            differences.append({
                "epsilon": float(eps), "robust_fp32": a["robust_accuracy"],
                "robust_tf32": b["robust_accuracy"],
                "tf32_minus_fp32": b["robust_accuracy"] - a["robust_accuracy"],
                "n_examples_differing": sum(int(u != v) for u, v in zip(fa, fb)),
                "tf32_active": b["tf32_active"]})
    active = tf32_active("tf32", device)
    note = ("tf32 ran with cuDNN TF32 convolutions on this GPU: the differences are the "
            "effect of PyTorch's default precision on the measurement" if active else
            "TF32 is not available on this device (CPU or a GPU of compute capability < 8): "
            "fp32 and tf32 compute the same numbers, so any difference would be a bug; run "
            "on an Ampere-or-later GPU to measure the effect")
    return {"device": _device_name(device), "torch_version": torch.__version__,
            "rows": rows, "differences": differences, "note": note}


def precision_benchmark(*, model_path: str | Path, dataset_root: str | Path,
                        settings: Mapping[str, Any], out_path: str | Path,
                        epsilons: Sequence[float] | None = None,
                        n_examples: int | None = None, device: str = "cpu",
                        precisions: Sequence[str] = PRECISIONS) -> dict[str, Any]:
    """:func:`compare_precisions` for a trained model on the first examples of its dataset's
    ``settings['split']`` (``settings``: the config's ``autoattack`` block; ``epsilons`` and
    ``n_examples`` override it), written atomically as JSON to ``out_path``."""
    net, ckpt = _trained_model(model_path, device)
    n = int(n_examples if n_examples is not None else settings["n_examples"])
    x, y = first_examples(dataset_root, settings["split"], n, int(ckpt["resolution"]),
                          settings["seed"])
    eps = [float(e) for e in (epsilons if epsilons is not None else settings["epsilons"])]
    result = compare_precisions(net, x, y, epsilons=eps, attacks=tuple(settings["attacks"]),
                                version=settings["version"],
                                settings=settings.get("settings") or None,
                                batch_size=int(settings["batch_size"]),
                                seed=int(settings["seed"]), device=device,
                                precisions=precisions)
    result.update(model_id=ckpt["model_id"], model_path=str(model_path),
                  split=settings["split"], attacks=list(settings["attacks"]),
                  version=settings["version"])
    io.write_json(out_path, result)
    return result


def _table(result: Mapping[str, Any]) -> str:
    lines = [f"device: {result['device']} (torch {result['torch_version']})",
             f"{'epsilon':>9} {'fp32':>8} {'tf32':>8} {'tf32-fp32':>10} {'differing':>9}"]
    for d in result["differences"]:
        lines.append(f"{d['epsilon']:>9g} {d['robust_fp32']:>8.4f} {d['robust_tf32']:>8.4f} "
                     f"{d['tf32_minus_fp32']:>+10.4f} {d['n_examples_differing']:>9d}")
    lines.append(result["note"])
    return "\n".join(lines)


def precision_benchmark_main(argv: Sequence[str] | None = None) -> int:
    """CLI of ``workflow/scripts/bench_gpu_precision.py``: Table 14's cells (robust accuracy at
    each ε) of one trained model under fp32 and tf32; prints the comparison, writes JSON."""
    import argparse

    from atat.plan.config import load_config, validate_config

    ap = argparse.ArgumentParser(
        prog="bench_gpu_precision.py",
        description="AutoAttack robust accuracy of one model at each epsilon under "
                    "autoattack.precision fp32 (TF32 off) and tf32 (PyTorch's defaults, as "
                    "the authors' code ran). Meaningful on a CUDA GPU with TF32 (compute "
                    "capability >= 8); on CPU both columns are identical (TF32 does not exist).")
    ap.add_argument("--model", required=True, help="a trained model.pt (rule train_model)")
    ap.add_argument("--dataset-root", required=True,
                    help="its dataset's private root, e.g. results/datasets/facescrub/private")
    ap.add_argument("--config", nargs="+", default=["config/config.yaml"],
                    help="config file(s), later ones overlay earlier ones; its autoattack "
                         "block gives attacks, version, settings, split, batch size, seed")
    ap.add_argument("--epsilons", type=float, nargs="+", default=None,
                    help="default: autoattack.epsilons (Table 14 alone: 1e-5)")
    ap.add_argument("--n-examples", type=int, default=None,
                    help="default: autoattack.n_examples")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="results/bench/precision.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load_config(*args.config)
    validate_config(cfg)
    result = precision_benchmark(model_path=args.model, dataset_root=args.dataset_root,
                                 settings=cfg["autoattack"], out_path=args.out,
                                 epsilons=args.epsilons, n_examples=args.n_examples,
                                 device=args.device)
    print(_table(result))
    print(f"written: {args.out}")
    return 0


__all__ = ["DefenseLogits", "NormalizedModel", "no_tf32", "evaluate_autoattack",
           "evaluate_autoattack_with_adversarials", "evaluate_autoattack_model_file",
           "first_examples", "compare_precisions", "precision_benchmark",
           "precision_benchmark_main", "STANDARD_ATTACKS", "KNOWN_ATTACKS", "PAPER_EPSILONS",
           "DEMO_SETTINGS"]
