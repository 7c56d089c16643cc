"""The one training loop shared by every defense (paper A.3; docs/sources.md#training-recipe), and
by the inversion attacks' evaluation networks (:func:`fit`; docs/sources.md#evaluation-model,
#facenet-distance).

* Adam, MultiStepLR stepped once per epoch, loss summed over the batch (the defense decides).
* Validation after every 0-based epoch divisible by ``eval_every``; the kept model is the
  evaluation with the lowest validation loss (strictly lower replaces; the first always saves).
* Resumable: every ``checkpoint_every`` epochs the complete state (model, optimizer,
  scheduler, best-so-far, history, every RNG) is written atomically to an *undeclared* file,
  so a killed job resumes where it stopped and ends with the same weights as an
  uninterrupted run.
* Stops with :class:`TrainingDivergedError` (naming the model and lr) on a non-finite loss or a
  per-sample batch loss more than :data:`DIVERGENCE_FACTOR` times the run's first; stops before
  training when the dataset's class count differs from ``n_classes``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import platform
import random
import time
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from torch import nn

from atat.base import io
from atat.data.loading import make_loader
from atat.training.defenses import Defense, ModelContext, StepContext, build_defense
from atat.training.models import build_model
from atat.base.precision import memory_format, training_autocast
from atat.base.progress import Progress

log = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite, or grew orders of magnitude above its start."""


#: A run has diverged when a batch's per-sample training loss exceeds this multiple of the
#: first batch's (floored at 1, so a start near 0 cannot trip it). Healthy training never
#: comes close: the first batch's cross-entropy is about ln(n_classes), and a per-sample loss
#: 1000x that means logits hundreds apart on the wrong class.
DIVERGENCE_FACTOR = 1e3


@dataclasses.dataclass
class TrainSpec:
    """Everything that determines a trained model."""

    model_id: str
    dataset_root: str
    resolution: int
    n_classes: int
    architecture: str
    defense: Mapping[str, Any]          # the config variant: {"type": ..., params...}
    training: Mapping[str, Any]         # the recipe of this cell (config.training_params)
    augmentation: Mapping[str, Any]
    seed: int
    weights_path: str | None = None
    # metrics.json of the model whose val_acc is the early-stopping target when
    # training["stop_at_val_acc"] names a defense variant (paper Table 3; see resolve_stop_target)
    stop_reference_metrics: str | None = None

    def fingerprint(self) -> str:
        # stop_reference_metrics only when set, so every other model keeps its fingerprint
        return fingerprint({k: v for k, v in dataclasses.asdict(self).items()
                            if k not in ("model_id",)
                            and not (k == "stop_reference_metrics" and v is None)})


def fingerprint(settings: Mapping[str, Any]) -> str:
    """Short hash of everything that determines a trained model (JSON, sorted keys): a resume
    checkpoint is used only by a run with the same fingerprint."""
    blob = json.dumps(dict(settings), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    import atat
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "numpy": np.__version__,
            "atat": getattr(atat, "__version__", "unknown"), "platform": platform.platform()}


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@torch.no_grad()
def evaluate(model: nn.Module, defense: Defense, loader: Any, device: torch.device,
             topk: int = 5, predictions: list[tuple[int, int]] | None = None
             ) -> dict[str, float]:
    """Mean loss, top-1 and top-k accuracy on clean inputs (model in eval mode); with
    ``predictions`` (a list) each image's (label, top-1 prediction) is appended to it in the
    loader's order."""
    model.eval()
    total, loss_sum, correct, correct_k = 0, 0.0, 0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss, logits = defense.eval_loss(model, x, y)
        loss_sum += float(loss)
        pred = logits.argmax(1)
        correct += int((pred == y).sum())
        if predictions is not None:
            predictions.extend(zip(y.tolist(), pred.tolist()))
        k = min(topk, logits.shape[1])
        correct_k += int((logits.topk(k, dim=1).indices == y[:, None]).any(1).sum())
        total += len(y)
    if total == 0:
        raise ValueError("evaluation split is empty")
    return {"loss": loss_sum / total, "acc": correct / total, f"top{topk}": correct_k / total,
            "n": total}


def permuted_targets(targets: list[int], seed: int) -> list[int]:
    """Permuted-label training (paper §3, App. A.3.1; docs/sources.md#permuted-labels): image i
    receives the label of training image perm[i], perm = randperm(n) from a torch Generator seeded
    with ``seed``. Class frequencies are unchanged; the image-label pairing is destroyed."""
    perm = torch.randperm(len(targets), generator=torch.Generator().manual_seed(seed))
    return [int(targets[j]) for j in perm.tolist()]


def resolve_stop_target(spec: TrainSpec) -> tuple[TrainSpec, dict[str, Any] | None]:
    """An early-stopping target given as a defense variant's name (paper Table 3: "accuracy
    comparable to our Unseen-Pixel model's") becomes the ``val_acc`` in that model's
    metrics.json, ``spec.stop_reference_metrics``. Returns the spec with the number in its
    recipe (so the fingerprint follows the reference model) and a record of where it came
    from (None when the target is a number or unset)."""
    target = spec.training.get("stop_at_val_acc")
    if not isinstance(target, str):
        return spec, None
    path = spec.stop_reference_metrics
    if not path:
        raise ValueError(f"{spec.model_id}: training.stop_at_val_acc = '{target}' names a model, "
                         "but no metrics file of it was given (TrainSpec.stop_reference_metrics)")
    try:
        ref = json.loads(Path(path).read_text())
        value = float(ref["val_acc"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: cannot read the val_acc that {spec.model_id} stops at "
                         f"(training.stop_at_val_acc = '{target}'): {exc}. {io.REBUILD_ADVICE}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{path}: val_acc = {value} is not an accuracy in [0, 1]")
    record = {"defense": target, "metrics": str(path), "model_id": ref.get("model_id"),
              "val_acc": value}
    return dataclasses.replace(spec, training={**spec.training, "stop_at_val_acc": value}), record


def _state_to_cpu(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class TrainingMethod(Protocol):
    """What the training loop asks of a model's training method: a defense
    (:class:`atat.training.defenses.Defense`), or the plain cross-entropy of the inversion attacks'
    evaluation networks (:mod:`atat.inversion.evaluation`)."""

    def on_epoch_start(self, epoch: int, model: nn.Module) -> None: ...

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                   y: torch.Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]: ...

    def eval_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def checkpoint_state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@dataclasses.dataclass
class _Run:
    """The state of one training run: what the loop's steps read and advance."""

    name: str
    n_classes: int
    recipe: Mapping[str, Any]
    device: torch.device
    method: TrainingMethod
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    loader_gen: torch.Generator
    step_gen: torch.Generator
    train_loader: Any
    val_loader: Any
    start_epoch: int = 0
    best: dict[str, Any] | None = None
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    wall_before: float = 0.0
    t0: float = 0.0
    step: int = 0
    loss_start: float | None = None

    @property
    def stop_at(self) -> float | None:
        return self.recipe.get("stop_at_val_acc")

    @property
    def keep_last(self) -> bool:
        return self.recipe.get("keep", "best_val_loss") == "last"

    @property
    def wall_seconds(self) -> float:
        return self.wall_before + time.perf_counter() - self.t0


def seed_everything(seed: int) -> None:
    """torch, numpy and Python's global RNGs seeded with ``seed``."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _loader_args(spec: TrainSpec) -> dict[str, Any]:
    return dict(resolution=spec.resolution, num_workers=spec.training["num_workers"])


def _adam(params: Any, p: Mapping[str, Any]) -> tuple[torch.optim.Optimizer, Any]:
    """Adam and MultiStepLR (stepped once per epoch) of the recipe ``p``.

    ``foreach=True``: the multi-tensor Adam (PyTorch's default on CUDA) also on CPU, where the
    default is the per-parameter loop; the updates are bitwise identical
    (tests/test_train.py), one ResNet-18 step ~2x faster in the optimiser (issue 16)."""
    optimizer = torch.optim.Adam(params, lr=p["lr"], betas=tuple(p["betas"]),
                                 weight_decay=p.get("weight_decay", 0.0), foreach=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=list(p["lr_milestones"]),
                                                     gamma=p["lr_gamma"])
    return optimizer, scheduler


def _to_device(model: nn.Module, device: torch.device, recipe: Mapping[str, Any]) -> None:
    """``model`` onto ``device``, in the recipe's ``memory_format`` (opt-in channels_last;
    the default leaves the model as built)."""
    model.to(device)
    fmt = memory_format(recipe.get("memory_format"))
    if fmt is not torch.contiguous_format:
        model.to(memory_format=fmt)


def _set_up(spec: TrainSpec, device: torch.device
            ) -> tuple[_Run, dict[str, Any], Any, int]:
    """Seed every RNG, then build the defense, model, optimizer, scheduler and the loaders
    (in this order: the model's initialisation draws from the seeded RNG). Returns the run,
    the defense's train augmentation, the test loader and the evaluation batch size."""
    p = spec.training
    seed_everything(spec.seed)
    loader_gen = torch.Generator().manual_seed(spec.seed)
    step_gen = torch.Generator().manual_seed(spec.seed + 1_000_003)

    context = ModelContext(architecture=spec.architecture, resolution=spec.resolution,
                           weights_path=spec.weights_path)
    defense = build_defense(spec.defense, spec.n_classes, where=f"defense of {spec.model_id}",
                            context=context)
    model = defense.build_model(build_model(spec.architecture, spec.n_classes, spec.weights_path))
    _to_device(model, device, p)
    optimizer, scheduler = _adam(defense.trainable_parameters(model), p)
    common = _loader_args(spec)
    aug = defense.train_augmentation(spec.augmentation)
    train_loader = make_loader(spec.dataset_root, "train", batch_size=p["batch_size"], train=True,
                               aug=aug, generator=loader_gen, **common)
    if train_loader.dataset.n_classes != spec.n_classes:
        raise ValueError(f"{spec.model_id}: the dataset {spec.dataset_root} has "
                         f"{train_loader.dataset.n_classes} classes, but the model would be "
                         f"trained with n_classes = {spec.n_classes}; set the dataset's "
                         "n_classes in the config to match, or re-prepare the dataset")
    pre = defense.pre_transform()
    if pre is not None:  # e.g. Unseen-Pixels: mask before augmentation
        train_loader.dataset.transform = T.Compose([pre, train_loader.dataset.transform])
    if p.get("permute_labels_seed") is not None:
        train_loader.dataset.targets = permuted_targets(train_loader.dataset.targets,
                                                        int(p["permute_labels_seed"]))
    eval_bs = p.get("eval_batch_size", p["batch_size"])
    # val_drop_last (BiDO/MID, paper A.1) drops the last partial batch of the validation AND
    # the test split, as REPO's data_loaders.py (both loaders get drop_last=val_drop_last)
    drop_last = bool(p.get("val_drop_last", False))
    val_loader = make_loader(spec.dataset_root, "val", batch_size=eval_bs, train=False,
                             drop_last=drop_last, **common)
    test_loader = make_loader(spec.dataset_root, "test", batch_size=eval_bs, train=False,
                              drop_last=drop_last, **common)
    for split, loader in (("val", val_loader), ("test", test_loader)):
        if len(loader) == 0:
            raise ValueError(f"{spec.model_id}: the {split} split of {spec.dataset_root} has "
                             f"{len(loader.dataset)} images, fewer than one evaluation batch "
                             f"(eval_batch_size = {eval_bs}) with val_drop_last; lower "
                             "training.eval_batch_size")
    run = _Run(name=spec.model_id, n_classes=spec.n_classes, recipe=p, device=device,
               method=defense, model=model, optimizer=optimizer, scheduler=scheduler,
               loader_gen=loader_gen, step_gen=step_gen, train_loader=train_loader,
               val_loader=val_loader)
    return run, aug, test_loader, eval_bs


def _resume(run: _Run, resume_path: Path, fingerprint: str) -> None:
    """Continue from the resume checkpoint when there is one of this configuration."""
    if (state := io.load_resume(resume_path, weights_only=False)) is None:  # corrupt: moved aside
        return
    if state.get("fingerprint") != fingerprint:
        log.warning("ignoring resume checkpoint %s: it belongs to a different configuration",
                    resume_path)
        return
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    run.method.load_state_dict(state["defense"])
    run.loader_gen.set_state(state["loader_gen"])
    run.step_gen.set_state(state["step_gen"])
    _set_rng_state(state["rng"])
    run.start_epoch, run.best, run.history = state["epoch"] + 1, state["best"], state["history"]
    run.wall_before = state["wall_seconds"]
    log.info("resumed %s from %s at epoch %d", run.name, resume_path, run.start_epoch)


def _train_epoch(run: _Run, epoch: int) -> dict[str, Any]:
    """One pass over the training split; returns the epoch's history record (lr, mean
    training loss and the method's logged terms). Stops on a diverged loss."""
    p = run.recipe
    run.method.on_epoch_start(epoch, run.model)
    run.model.train()
    loss_sum, n_seen, logs_sum = 0.0, 0, {}
    fmt = memory_format(p.get("memory_format"))
    for x, y in run.train_loader:
        x, y = x.to(run.device), y.to(run.device)
        if fmt is not torch.contiguous_format:
            x = x.contiguous(memory_format=fmt)
        ctx = StepContext(epoch=epoch, step=run.step, n_classes=run.n_classes,
                          generator=run.step_gen, steps_per_epoch=len(run.train_loader))
        try:
            with training_autocast(run.device, p.get("autocast")):
                loss, logs = run.method.train_step(run.model, run.optimizer, x, y, ctx)
        except FloatingPointError as exc:
            raise TrainingDivergedError(f"{run.name}: {exc}; lower the learning rate "
                                        f"(training.lr = {p['lr']})") from None
        per_sample = loss / len(y)
        if run.loss_start is None:
            run.loss_start = per_sample
        elif abs(per_sample) > DIVERGENCE_FACTOR * max(abs(run.loss_start), 1.0):
            raise TrainingDivergedError(
                f"{run.name}: training loss per sample {per_sample:.3g} at epoch {epoch}, "
                f"step {run.step} is more than {DIVERGENCE_FACTOR:g}x its start "
                f"({run.loss_start:.3g}): the run diverged; lower the learning rate "
                f"(training.lr = {p['lr']})")
        loss_sum += loss
        n_seen += len(y)
        for k, v in logs.items():
            logs_sum[k] = logs_sum.get(k, 0.0) + v * len(y)
        run.step += 1
    record: dict[str, Any] = {"epoch": epoch, "lr": run.optimizer.param_groups[0]["lr"],
                              "train_loss": loss_sum / max(n_seen, 1),
                              **{k: v / max(n_seen, 1) for k, v in logs_sum.items()}}
    if not any("loss_start" in h for h in run.history):
        record["loss_start"] = run.loss_start  # the divergence check's reference, kept on resume
    return record


def _validate_and_keep(run: _Run, epoch: int, record: dict[str, Any]) -> None:
    """On evaluation epochs: validation loss and accuracy into ``record``, and the snapshot
    kept when it is the best so far (or the last, or the first reaching the stop target)."""
    p = run.recipe
    if not (epoch % p["eval_every"] == 0 or (run.keep_last and epoch == p["epochs"] - 1)):
        return
    val = evaluate(run.model, run.method, run.val_loader, run.device)
    if not np.isfinite(val["loss"]):
        raise TrainingDivergedError(f"{run.name}: validation loss is {val['loss']} "
                                    f"at epoch {epoch}; lower the learning rate "
                                    f"(training.lr = {p['lr']})")
    record.update(val_loss=val["loss"], val_acc=val["acc"])
    reached = run.stop_at is not None and val["acc"] >= run.stop_at
    if run.best is None or run.keep_last or val["loss"] < run.best["val_loss"] or reached:
        run.best = {"epoch": epoch, "val_loss": val["loss"], "val_acc": val["acc"],
                    "model": _state_to_cpu(run.model),
                    "defense": copy.deepcopy(run.method.checkpoint_state_dict()),
                    "stopped_early": reached}


def _save_resume(run: _Run, epoch: int, resume_path: Path, fingerprint: str) -> None:
    """The complete state after ``epoch``, written atomically to the resume file."""
    io.torch_save({"fingerprint": fingerprint, "epoch": epoch, "model": run.model.state_dict(),
                   "optimizer": run.optimizer.state_dict(),
                   "scheduler": run.scheduler.state_dict(), "defense": run.method.state_dict(),
                   "loader_gen": run.loader_gen.get_state(), "step_gen": run.step_gen.get_state(),
                   "rng": _rng_state(), "best": run.best, "history": run.history,
                   "wall_seconds": run.wall_seconds}, resume_path)


def _loop(run: _Run, resume_path: Path | None, fingerprint: str,
          stop_after_epochs: int | None, progress: bool) -> bool:
    """The epochs: resume, train, validate, checkpoint. False when ``stop_after_epochs``
    interrupted the run on purpose; afterwards ``run.model`` holds the last epoch's weights
    and ``run.best`` the kept snapshot."""
    p = run.recipe
    if resume_path is not None:
        _resume(run, resume_path, fingerprint)
    run.t0 = time.perf_counter()
    run.loss_start = next((h["loss_start"] for h in run.history if "loss_start" in h), None)
    epochs_done = Progress(p["epochs"], "epochs done", done=run.start_epoch, enabled=False)
    for epoch in range(run.start_epoch, p["epochs"]):
        record = _train_epoch(run, epoch)
        _validate_and_keep(run, epoch, record)
        run.history.append(record)
        log.info("%s epoch %d: %s%s", run.name, epoch,  # one line per epoch, with ETA
                 {k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()},
                 f" | {epochs_done.step()}" if progress else "")
        run.scheduler.step()
        done = epoch + 1
        if resume_path is not None and (done % p["checkpoint_every"] == 0
                                        or done == p["epochs"]):
            _save_resume(run, epoch, resume_path, fingerprint)
        if run.best is not None and run.best.get("stopped_early"):
            log.info("%s: validation accuracy %.4f reached training.stop_at_val_acc = %s at epoch "
                     "%d; keeping this snapshot and stopping", run.name, run.best["val_acc"],
                     run.stop_at, epoch)
            break
        if stop_after_epochs is not None and done - run.start_epoch >= stop_after_epochs \
                and done < p["epochs"]:
            return False
    if run.best is None:
        raise RuntimeError(f"{run.name}: no validation evaluation happened (epochs = "
                           f"{p['epochs']}, eval_every = {p['eval_every']})")
    if run.stop_at is not None and not run.best.get("stopped_early"):
        log.warning("%s: validation accuracy never reached stop_at_val_acc = %s; keeping the "
                    "lowest-validation-loss model", run.name, run.stop_at)
    return True


def fit(model: nn.Module, method: TrainingMethod, *, name: str, n_classes: int,
        recipe: Mapping[str, Any], train_loader: Any, val_loader: Any,
        loader_gen: torch.Generator, resume_path: str | Path | None, fingerprint: str,
        device: str | torch.device = "cpu", stop_after_epochs: int | None = None,
        progress: bool = True) -> dict[str, Any] | None:
    """The loop of :func:`train` for a model built elsewhere (the inversion attacks'
    evaluation networks): Adam + MultiStepLR of ``recipe`` (lr, betas, weight_decay
    (default 0), lr_milestones, lr_gamma, epochs, eval_every, checkpoint_every), ``method``'s
    training steps, validation on ``val_loader``, the lowest-validation-loss snapshot, and
    resume from ``resume_path`` (None: no resume file) when its ``fingerprint`` matches.
    ``train_loader`` must shuffle with ``loader_gen``. Loads the kept snapshot into
    ``model`` and returns ``{"best": {epoch, val_loss, val_acc, model (state dict)},
    "history", "train_seconds"}``, or None when ``stop_after_epochs`` interrupted the run;
    the resume file is removed at the end."""
    device = torch.device(device)
    _to_device(model, device, recipe)
    optimizer, scheduler = _adam(model.parameters(), recipe)
    run = _Run(name=name, n_classes=int(n_classes), recipe=recipe, device=device, method=method,
               model=model, optimizer=optimizer, scheduler=scheduler, loader_gen=loader_gen,
               step_gen=torch.Generator().manual_seed(0), train_loader=train_loader,
               val_loader=val_loader)
    path = Path(resume_path) if resume_path is not None else None
    if not _loop(run, path, fingerprint, stop_after_epochs, progress):
        return None
    assert run.best is not None
    model.load_state_dict(run.best["model"])
    method.load_state_dict(run.best["defense"])
    if path is not None:
        path.unlink(missing_ok=True)
    return {"best": run.best, "history": run.history, "train_seconds": run.wall_seconds}


#: columns of a model's test_predictions.csv (:func:`train`)
PREDICTION_COLUMNS = ["index", "label", "pred", "correct", "pred_repeat"]


def _test_predictions(run: _Run, spec: TrainSpec, test_loader: Any, eval_bs: int,
                      first: list[tuple[int, int]]) -> list[dict[str, int]]:
    """Per test image (the whole split in its fixed order, also where ``val_drop_last`` made the
    metrics' pass skip the last partial batch): label, the first clean pass's prediction (the
    metrics' test pass where it covered the split) and a second clean pass's (same weights, eval
    mode). The two agree unless the model is random at evaluation (MID's sampled bottleneck)."""
    loader = test_loader
    if test_loader.drop_last:
        loader = make_loader(spec.dataset_root, "test", batch_size=eval_bs, train=False,
                             **_loader_args(spec))
        evaluate(run.model, run.method, loader, run.device, predictions=first)
    repeat: list[tuple[int, int]] = []
    evaluate(run.model, run.method, loader, run.device, predictions=repeat)
    if [y for y, _ in first] != [y for y, _ in repeat]:
        raise RuntimeError(f"{spec.model_id}: the test split's order changed between two passes")
    return [{"index": i, "label": y, "pred": p, "correct": int(p == y), "pred_repeat": q}
            for i, ((y, p), (_, q)) in enumerate(zip(first, repeat))]


def _finish(run: _Run, spec: TrainSpec, aug: Mapping[str, Any], test_loader: Any, eval_bs: int,
            stop_reference: dict[str, Any] | None) -> tuple[dict, dict, list[dict[str, int]]]:
    """The kept snapshot evaluated on the test and training splits: the model checkpoint, the
    metrics record and the per-test-image predictions (:func:`_test_predictions`)."""
    p, best = spec.training, run.best
    assert best is not None
    model, defense = run.model, run.method
    model.load_state_dict(best["model"])
    defense.load_state_dict(best["defense"])
    first: list[tuple[int, int]] = []  # the whole split's first clean pass (test_predictions)
    test = evaluate(model, defense, test_loader, run.device,
                    predictions=None if test_loader.drop_last else first)
    # accuracy on the training split with the labels it was trained on (permuted ones for the
    # rote-memorisation models, paper Table 2), un-augmented
    train_eval = make_loader(spec.dataset_root, "train", batch_size=eval_bs, train=False,
                             **_loader_args(spec))
    train_eval.dataset.targets = list(run.train_loader.dataset.targets)
    train_metrics = evaluate(model, defense, train_eval, run.device)
    extra = defense.final_metrics(model)  # type: ignore[attr-defined]
    predictions = _test_predictions(run, spec, test_loader, eval_bs, first)  # last: RNG draws
    val = {"loss": best["val_loss"], "acc": best["val_acc"]}
    wall = run.wall_seconds
    checkpoint = {
        "format_version": 1, "model_id": spec.model_id, "architecture": spec.architecture,
        "n_classes": spec.n_classes, "resolution": spec.resolution,
        "defense": dict(spec.defense), "state_dict": best["model"],
        "defense_state": best["defense"], "best_epoch": best["epoch"],
    }
    metrics = {
        "model_id": spec.model_id, "architecture": spec.architecture,
        "defense_type": spec.defense["type"], "seed": spec.seed,
        "best_epoch": best["epoch"], "val_loss": val["loss"], "val_acc": val["acc"],
        "test_loss": test["loss"], "test_acc": test["acc"], "test_top5": test["top5"],
        "train_acc": train_metrics["acc"], "checkpoint_rule": "last" if run.keep_last else
        ("first_reaching_stop_at_val_acc" if run.stop_at is not None else "lowest_val_loss"),
        "n_test": test["n"], "train_seconds": wall, "epochs": p["epochs"],
        "training": dict(spec.training), "defense": dict(spec.defense),
        "augmentation": aug, "history": run.history,
        "fingerprint": spec.fingerprint(), "device": str(run.device), "versions": versions(),
        "pretrained": spec.weights_path is not None,
        "stopped_early": bool(best.get("stopped_early", False)),
        "labels_permuted": p.get("permute_labels_seed") is not None,
        "stop_reference": stop_reference,
        "eval_agreement": sum(r["pred"] == r["pred_repeat"] for r in predictions)
        / len(predictions),
        **extra,
    }
    return checkpoint, metrics, predictions


def train(spec: TrainSpec, *, out_model: str | Path, out_metrics: str | Path,
          resume_path: str | Path, device: str | torch.device = "cpu",
          stop_after_epochs: int | None = None, progress: bool = True,
          out_predictions: str | Path | None = None) -> dict[str, Any] | None:
    """Train one model. Returns the metrics dict, or ``None`` when ``stop_after_epochs``
    interrupted the run on purpose (used by the resume test). ``out_predictions``: the
    per-test-image CSV (columns :data:`PREDICTION_COLUMNS`: ``index`` 0..n-1 over the test
    split in its fixed order, the same for every model of a dataset; ``label``; ``pred`` and
    ``correct`` of the first clean pass; ``pred_repeat`` of a second clean pass), written
    atomically; metrics.json's ``eval_agreement`` is the share of images whose two predictions
    agree (1.0 for a deterministic model)."""
    spec, stop_reference = resolve_stop_target(spec)
    device = torch.device(device)
    run, aug, test_loader, eval_bs = _set_up(spec, device)
    resume_path = Path(resume_path)
    if not _loop(run, resume_path, spec.fingerprint(), stop_after_epochs, progress):
        return None
    checkpoint, metrics, predictions = _finish(run, spec, aug, test_loader, eval_bs,
                                               stop_reference)
    io.torch_save(checkpoint, out_model)
    if out_predictions is not None:
        io.write_csv_rows(out_predictions, PREDICTION_COLUMNS, predictions)
    io.write_json(out_metrics, metrics)
    resume_path.unlink(missing_ok=True)
    return metrics


def load_model(path: str | Path, device: str | torch.device = "cpu"
               ) -> tuple[nn.Module, Defense, dict[str, Any]]:
    """Rebuild a trained model (eval mode) and its defense from a checkpoint of :func:`train`."""
    ckpt = io.torch_load(path)
    context = ModelContext(architecture=ckpt["architecture"], resolution=ckpt["resolution"])
    defense = build_defense(ckpt["defense"], ckpt["n_classes"], context=context)
    model = defense.build_model(build_model(ckpt["architecture"], ckpt["n_classes"]))
    model.load_state_dict(ckpt["state_dict"])
    defense.load_state_dict(ckpt["defense_state"])
    model.to(device).eval()
    return model, defense, ckpt


def logits_fn(model: nn.Module, defense: Defense):
    """A plain callable x -> logits for attacks."""
    return lambda x: defense.logits(model, x)


__all__ = ["PREDICTION_COLUMNS", "TrainSpec", "TrainingDivergedError", "TrainingMethod",
           "evaluate", "fingerprint", "fit", "load_model", "logits_fn", "seed_everything",
           "train"]
