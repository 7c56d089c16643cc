"""Pretraining a backbone: the miniature's counterpart of torchvision's ImageNet weights.

The paper fine-tunes ImageNet-initialised networks (paper A.3; its evaluation model and TL-DMI's
frozen layers are ImageNet-initialised too). On the miniature, rule ``pretrain_backbone`` trains
each backbone the config fine-tunes -- a target architecture, the evaluation model's
Inception-v3, the public classifier of δ_face -- once on the pretraining population
(:mod:`atat.data.pretraining`: face identities disjoint from every private and public one) and
writes the **state dict of the torchvision network** (:func:`atat.training.models.torchvision_network`
with a head of the population's class count), the format of torchvision's ImageNet files. So
``pretrained: true`` is one code path in both configs: load the file
(:func:`atat.training.models.load_pretrained`), fresh head, fine-tune.

Recipe: Adam + MultiStepLR through the one training loop (:func:`atat.training.train.fit`,
resumable), summed cross-entropy (Inception-v3 with its auxiliary head: main + auxiliary), the
config's training augmentation, the snapshot of lowest loss on the population's held-out
images. Deterministic in ``seed``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.base import io
from atat.data.loading import make_loader, resolve_aug
from atat.training.defenses import StepContext
from atat.training.models import torchvision_network
from atat.training.train import fingerprint, seed_everything, versions
from atat.training.train import fit as train_loop

log = logging.getLogger(__name__)

__all__ = ["CrossEntropy", "PRETRAINING_DEFAULTS", "pretrain_backbone", "pretraining_recipe"]

#: recipe keys of ``pretraining.training`` the config may leave out
PRETRAINING_DEFAULTS: dict[str, Any] = {
    "lr": 1e-3, "betas": [0.9, 0.999], "lr_gamma": 0.1, "eval_every": 1,
    # the classification layer as torchvision initialises it, or zeroed (initial loss ln K)
    "head_init": "default",
    # resume file after every epoch (atat.training.train.fit); it does not change the weights
    "checkpoint_every": 1,
}


class CrossEntropy:
    """The training method (:class:`atat.training.train.TrainingMethod`) of plain classifiers --
    the pretrained backbones and the inversion attacks' evaluation networks: the summed loss of
    ``loss_fn`` (model, x, y) -> (loss, logits); summed cross-entropy of the plain logits for
    evaluation; no state of its own. Logs the augmented training accuracy."""

    def __init__(self, loss_fn: Callable[[nn.Module, Tensor, Tensor], tuple[Tensor, Tensor]]
                 | None = None) -> None:
        self.loss_fn = loss_fn or self.eval_loss

    @staticmethod
    def eval_loss(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        logits = model(x)
        return F.cross_entropy(logits, y, reduction="sum"), logits

    def on_epoch_start(self, epoch: int, model: nn.Module) -> None:
        pass

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        optimizer.zero_grad(set_to_none=True)
        loss, logits = self.loss_fn(model, x, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"training loss is {float(loss.detach())} at epoch "
                                     f"{ctx.epoch}, step {ctx.step}")
        loss.backward()
        optimizer.step()
        correct = int((logits.detach().argmax(1) == y).sum())
        return float(loss.detach()), {"train_acc_augmented": correct / len(y)}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def checkpoint_state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"plain cross-entropy training has no state, got {sorted(state)}")


def _main_and_aux_loss(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy of the logits, plus the auxiliary head's where the network returns
    one (Inception-v3 with ``aux_logits`` in train mode)."""
    out = model(x)
    if isinstance(out, tuple):
        logits, aux = out[0], out[1]
        return (F.cross_entropy(logits, y, reduction="sum")
                + F.cross_entropy(aux, y, reduction="sum")), logits
    return F.cross_entropy(out, y, reduction="sum"), out


def pretraining_recipe(training: Mapping[str, Any]) -> dict[str, Any]:
    """``training`` (config ``pretraining.training``, merged with the backbone's entry of
    ``pretraining.backbones``) over :data:`PRETRAINING_DEFAULTS`; milestones below epochs."""
    p = {**PRETRAINING_DEFAULTS, **dict(training)}
    for key in ("epochs", "batch_size", "lr_milestones"):
        if key not in p:
            raise ValueError(f"pretraining.training.{key} is required")
    if any(m >= p["epochs"] for m in p["lr_milestones"]):
        raise ValueError(f"pretraining.training.lr_milestones {p['lr_milestones']}: every "
                         f"milestone must be < epochs = {p['epochs']}")
    if p["head_init"] not in ("default", "zero"):
        raise ValueError(f"pretraining.training.head_init: {p['head_init']!r} is not "
                         "'default' or 'zero'")
    return p


def _zero_head(net: nn.Module) -> None:
    """Zero the network's classification layer (``fc`` or ``classifier``): every class starts
    at the same logit, the first loss is ln K. torchvision's Inception-v3 initialises its fc with
    a truncated normal of std 0.1 over 2,048 features, logits of std ~4 and a first loss far
    above ln K (docs/decisions.md#pretraining)."""
    head = getattr(net, "fc", None) or getattr(net, "classifier")
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)


def pretrain_backbone(dataset_root: str | Path, *, out_weights: str | Path,
                      out_metrics: str | Path, architecture: str, resolution: int,
                      training: Mapping[str, Any], augmentation: Mapping[str, Any] | None = None,
                      seed: int = 0, aux_logits: bool = False, num_workers: int = 0,
                      device: str | torch.device = "cpu", progress: bool = True,
                      resume_path: str | Path | None = None,
                      stop_after_epochs: int | None = None) -> dict[str, Any] | None:
    """Train ``architecture`` (a target architecture or ``inception_v3``; ``aux_logits`` for
    Inception-v3's auxiliary head) at ``resolution`` on the train split of the pretraining
    population ``dataset_root``, validating on its val split (module docstring). Writes the
    kept snapshot's state dict (torchvision format) to ``out_weights`` and a metrics JSON;
    returns the metrics, or None when ``stop_after_epochs`` interrupted the run."""
    device = torch.device(device)
    p = pretraining_recipe(training)
    seed_everything(seed)
    loader_gen = torch.Generator().manual_seed(seed)
    aug = resolve_aug(augmentation)
    common = dict(resolution=int(resolution), num_workers=int(num_workers))
    train_loader = make_loader(dataset_root, "train", batch_size=p["batch_size"], train=True,
                               aug=aug, generator=loader_gen, **common)
    if len(train_loader) == 0:
        raise ValueError(f"{dataset_root}: the train split has fewer images than one batch "
                         f"(pretraining.training.batch_size = {p['batch_size']})")
    val_loader = make_loader(dataset_root, "val", batch_size=p["batch_size"], train=False,
                             **common)
    n_classes = train_loader.dataset.n_classes
    net = torchvision_network(architecture, n_classes, aux_logits=aux_logits)
    if p["head_init"] == "zero":
        _zero_head(net)
    settings = {"kind": "pretrained_backbone", "dataset_root": str(dataset_root),
                "architecture": architecture, "resolution": int(resolution),
                "n_classes": int(n_classes), "training": p, "augmentation": aug,
                "seed": int(seed), "aux_logits": bool(aux_logits),
                "num_workers": int(num_workers)}
    fit = train_loop(net, CrossEntropy(_main_and_aux_loss), name=f"pretraining {architecture}",
                     n_classes=n_classes, recipe=p, train_loader=train_loader,
                     val_loader=val_loader, loader_gen=loader_gen, resume_path=resume_path,
                     fingerprint=fingerprint(settings), device=device,
                     stop_after_epochs=stop_after_epochs, progress=progress)
    if fit is None:
        return None
    best = fit["best"]
    history = fit["history"]
    metrics = {
        "kind": "pretrained_backbone", "architecture": architecture,
        "resolution": int(resolution), "n_classes": int(n_classes),
        "aux_logits": bool(aux_logits), "seed": int(seed),
        "n_train": len(train_loader.dataset), "n_val": len(val_loader.dataset),
        "best_epoch": best["epoch"], "val_loss": best["val_loss"], "val_acc": best["val_acc"],
        "train_acc_augmented": next(h.get("train_acc_augmented") for h in history
                                    if h["epoch"] == best["epoch"]),
        "train_seconds": fit["train_seconds"], "training": p, "augmentation": aug,
        "history": history, "device": str(device), "versions": versions(),
        "format": "state dict of the torchvision network (atat.training.models."
                  "torchvision_network), its head the population's classes",
    }
    io.torch_save({k: v.detach().cpu() for k, v in net.state_dict().items()}, out_weights)
    io.write_json(out_metrics, metrics)
    log.info("pretrained %s at %d px: val acc %.4f (best epoch %d of %d), %.0f s", architecture,
             resolution, best["val_acc"], best["epoch"], p["epochs"], fit["train_seconds"])
    return metrics
