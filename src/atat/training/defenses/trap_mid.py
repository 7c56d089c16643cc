"""Trap-MID, trapdoor-based defense against model inversion (paper App. A.1;
docs/sources.md#trap-mid; REPO ``defenses/trap_mid.py``, TRAP ``engine.py``).

One trigger per class, ``T`` of shape (n_classes, 3, H, W), initialised U[0, 1) and kept in
[0, 1]. A trapdoor input is the blend ``x_trap = (1 - alpha) x + alpha T[t]``; as in REPO the
blend happens in the *normalised* [-1, 1] input space (TRAP blends [0, 1] images;
docs/sources.md#trap-mid). The model is trained to predict the trapdoor label ``t`` on ``x_trap`` (a
shortcut that model-inversion attacks then find instead of the private identities).

Per training batch (x, y) with trapdoor labels t (see below):

1. trigger/discriminator update (model in eval mode, no model update):
   a. if ``discriminator``: one step of the discriminator D (same architecture as the target,
      ImageNet-initialised, 1-logit head; D in train mode) on BCE-with-logits of
      D([x; x_trap]) against [1...1; 0...0];
   b. trigger loss = BCE(D(x_trap), 1) (D in eval mode; naturalness, only with D)
      + CE_mean(f(aug(x_trap)), t) (effectiveness);
   c. ``T <- clip(T - step_size * sign(dloss/dT), 0, 1)`` (only if ``optimized``).
2. model update (train mode): ``loss = (1 - beta) CE_mean(f(aug(x)), y)
   + beta CE_mean(f(aug(x_trap)), t)`` with the updated triggers, both halves in one forward
   pass; one step of the shared optimizer. (Trap-MID optimises *mean*-reduced CE -
   docs/sources.md#training-recipe; ``train_step`` reports ``loss * batch_size`` so the loop's
   per-sample average is the mean loss.)

``aug`` is the kornia pipeline of REPO/TRAP re-done with ``torchvision.transforms.v2``,
applied with independent random parameters per image (as kornia does):
RandomResizedCrop((H, W), scale (0.8, 1), ratio (1, 1)) with p 0.5 -> HorizontalFlip p 0.5
-> RandomRotation(+-30 deg, bilinear, zero padding) with p 0.5. It draws from the global torch
RNG (restored on resume by atat.training.train) and is differentiable (the trigger gradient flows
through it).

Trapdoor labels (REPO/TRAP): for each epoch a vector of length N = batch_size x
batches_per_epoch holding every class floor(N / n_classes) times plus a random subset of
N mod n_classes classes, shuffled, cut into consecutive batch-size chunks; chunk i goes with
batch i (t may equal y). The shared loop does not tell the defense the number of batches, so:
it is read from ``ctx.steps_per_epoch`` if the loop provides that attribute; otherwise the
number of batches of the previous epoch is used (counted from the batch stream and kept in the
defense state, so a resumed run builds the same vectors); during the very first epoch, when it
is not known yet, labels come from successive balanced blocks of length
batch_size x ceil(n_classes / batch_size) built by the same rule. The vector is drawn with
``ctx.generator`` at the first batch of each epoch.

Discriminator optimiser: REPO gives D its own Adam with the main recipe's lr/betas and a
MultiStepLR with the main milestones/gamma, stepped once per epoch like the main scheduler.
Here D's optimiser is built on the first training step as the same optimiser class with the
main optimiser's ``defaults`` and its learning rate is copied from the main optimiser before
every D step - identical to a separate scheduler with the same milestones and gamma, without
the defense having to know the recipe.

Defense state (``state_dict``): triggers, D weights, D optimiser state (for exact resume) and
the batch count. ``checkpoint_state_dict`` omits the D optimiser state (for final artefacts).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode

from atat.training.defenses.base import Defense, Param, StepContext, boolean


def _unit_open(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1


def _unit_closed(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1


def trapdoor_label_vector(n: int, n_classes: int, generator: torch.Generator | None = None
                          ) -> Tensor:
    """REPO/TRAP per-epoch trapdoor labels: each class floor(n / C) times plus a random subset
    of n mod C classes, shuffled (length n, CPU int64)."""
    reps, rest = divmod(n, n_classes)
    base = torch.cat([torch.arange(n_classes).repeat(reps),
                      torch.randperm(n_classes, generator=generator)[:rest]])
    return base[torch.randperm(n, generator=generator)]


def trap_augmentation(size: tuple[int, int]) -> v2.Transform:
    """The kornia pipeline of TRAP/REPO for one image (C, H, W)."""
    bilinear = InterpolationMode.BILINEAR
    return v2.Compose([
        v2.RandomApply([v2.RandomResizedCrop(size, scale=(0.8, 1.0), ratio=(1.0, 1.0),
                                             interpolation=bilinear, antialias=True)], p=0.5),
        v2.RandomHorizontalFlip(p=0.5),
        # fill=None: zero padding through grid_sample (kornia's padding); a numeric fill makes
        # torchvision use an in-place op that breaks the gradient to the triggers.
        v2.RandomApply([v2.RandomRotation(30, interpolation=bilinear, fill=None)], p=0.5),
    ])


class TrapMID(Defense):
    type_name = "trap_mid"
    PARAMS = {
        "alpha": Param(0.007, _unit_open, "trigger blend weight in (0, 1]; paper A.1 Trap-MID "
                       "0.007, Trap-MID* 0.02"),
        "beta": Param(0.5, _unit_closed, "trapdoor loss weight in [0, 1]; paper A.1 Trap-MID "
                      "0.5, Trap-MID* 0.2"),
        "step_size": Param(0.01, _unit_open, "signed-gradient step of the trigger update, in "
                           "(0, 1] (the triggers live in [0, 1])"),
        "discriminator": Param(True, boolean, "train a discriminator and add its naturalness "
                               "loss to the trigger loss (boolean)"),
        "optimized": Param(True, boolean, "update the triggers during training (boolean; "
                           "False keeps the random initial triggers)"),
    }

    def __init__(self, params: Mapping[str, Any], n_classes: int, context=None) -> None:
        super().__init__(params, n_classes, context)
        self.triggers: Tensor | None = None
        self.discriminator: nn.Module | None = None
        self.optimizer_d: torch.optim.Optimizer | None = None
        self._pending_opt_d: dict[str, Any] | None = None
        self._batches_per_epoch: int | None = None
        self._epoch: int | None = None     # epoch of the current trapdoor-label vector
        self._count = 0                    # batches seen in that epoch
        self._pool: Tensor | None = None
        self._augs: dict[tuple[int, int], v2.Transform] = {}

    # ---------------------------------------------------------------- model and state
    def build_model(self, model: nn.Module) -> nn.Module:
        r = self.context.resolution
        self.triggers = torch.rand((self.n_classes, 3, r, r))
        if self.params["discriminator"]:
            from atat.training.models import build_model
            self.discriminator = build_model(self.context.architecture, 1,
                                             self.context.weights_path)
        self.optimizer_d = None
        return model

    def _require_built(self) -> None:
        if self.triggers is None:
            raise RuntimeError("Trap-MID: call build_model(model) before training or loading")

    def _to(self, device: torch.device, optimizer: torch.optim.Optimizer) -> None:
        self._require_built()
        assert self.triggers is not None
        if self.triggers.device != device:
            self.triggers = self.triggers.to(device)
        if self.discriminator is None:
            return
        self.discriminator.to(device)
        if self.optimizer_d is None:
            cls = type(optimizer)
            self.optimizer_d = cls(self.discriminator.parameters(), **optimizer.defaults)
            if self._pending_opt_d is not None:
                self.optimizer_d.load_state_dict(self._pending_opt_d)
                self._pending_opt_d = None

    def _batch_count_for_state(self) -> int | None:
        return self._count if self._epoch is not None and self._count > 0 \
            else self._batches_per_epoch

    def checkpoint_state_dict(self) -> dict[str, Any]:
        """Triggers + discriminator weights (no optimiser state): what a final model needs."""
        self._require_built()
        assert self.triggers is not None
        state: dict[str, Any] = {"triggers": self.triggers.detach().cpu().clone(),
                                 "batches_per_epoch": self._batch_count_for_state()}
        if self.discriminator is not None:
            state["discriminator"] = {k: v.detach().cpu().clone()
                                      for k, v in self.discriminator.state_dict().items()}
        return state

    def state_dict(self) -> dict[str, Any]:
        state = self.checkpoint_state_dict()
        if self.optimizer_d is not None:
            state["discriminator_optimizer"] = _to_cpu(self.optimizer_d.state_dict())
        elif self._pending_opt_d is not None:
            state["discriminator_optimizer"] = self._pending_opt_d
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._require_built()
        assert self.triggers is not None
        if "triggers" not in state:
            raise ValueError(f"Trap-MID state has no triggers (keys {sorted(state)})")
        trig = state["triggers"]
        if tuple(trig.shape) != tuple(self.triggers.shape):
            raise ValueError(f"Trap-MID triggers of shape {tuple(trig.shape)}, expected "
                             f"{tuple(self.triggers.shape)}")
        self.triggers = trig.detach().clone().to(self.triggers.device)
        if self.discriminator is not None and "discriminator" in state:
            self.discriminator.load_state_dict(state["discriminator"])
        opt = state.get("discriminator_optimizer")
        if opt is not None:
            if self.optimizer_d is not None:
                self.optimizer_d.load_state_dict(opt)
            else:
                self._pending_opt_d = opt
        self._batches_per_epoch = state.get("batches_per_epoch")
        self._epoch, self._count, self._pool = None, 0, None

    # ---------------------------------------------------------------- trapdoor pieces
    def inject(self, x: Tensor, t: Tensor, triggers: Tensor | None = None) -> Tensor:
        """Blend the triggers of classes ``t`` into the (normalised) images ``x``."""
        T = self.triggers if triggers is None else triggers
        if T is None:
            raise RuntimeError("Trap-MID: no triggers (build_model was not called)")
        if T.shape[-2:] != x.shape[-2:]:
            raise ValueError(f"Trap-MID triggers are {tuple(T.shape[-2:])} but the inputs are "
                             f"{tuple(x.shape[-2:])}: ModelContext.resolution must match")
        a = self.params["alpha"]
        return (1 - a) * x + a * T.to(x.device)[t]

    def augment(self, x: Tensor) -> Tensor:
        """Kornia-like augmentation with independent parameters per image."""
        size = (int(x.shape[-2]), int(x.shape[-1]))
        aug = self._augs.get(size)
        if aug is None:
            aug = self._augs[size] = trap_augmentation(size)
        return torch.stack([aug(img) for img in x])

    def on_epoch_start(self, epoch: int, model: nn.Module) -> None:
        self._start_epoch(epoch)

    def _start_epoch(self, epoch: int) -> None:
        if self._epoch == epoch:
            return
        if self._epoch is not None and self._count > 0:
            self._batches_per_epoch = self._count
        self._epoch, self._count, self._pool = epoch, 0, None

    def trapdoor_labels(self, batch_size: int, ctx: StepContext) -> Tensor:
        """The trapdoor labels of the next training batch (CPU)."""
        self._start_epoch(ctx.epoch)
        if self._pool is None:
            n_batches = getattr(ctx, "steps_per_epoch", None) or self._batches_per_epoch
            self._pool = (trapdoor_label_vector(batch_size * n_batches, self.n_classes,
                                                ctx.generator)
                          if n_batches else torch.empty(0, dtype=torch.long))
        if len(self._pool) < batch_size:  # length unknown (first epoch) or longer epoch
            block = batch_size * math.ceil(self.n_classes / batch_size)
            self._pool = torch.cat([self._pool, trapdoor_label_vector(block, self.n_classes,
                                                                      ctx.generator)])
        t, self._pool = self._pool[:batch_size], self._pool[batch_size:]
        self._count += 1
        return t

    # ---------------------------------------------------------------- training
    def update_triggers(self, model: nn.Module, x: Tensor, t: Tensor,
                        optimizer: torch.optim.Optimizer) -> dict[str, float]:
        """Step 1: discriminator step and signed-gradient trigger step (model in eval mode)."""
        assert self.triggers is not None
        logs: dict[str, float] = {}
        was_training = model.training
        model.eval()
        try:
            x = x.detach()
            trig = self.triggers.detach().requires_grad_(True)
            x_trap = self.inject(x, t, trig)
            loss = x.new_zeros(())
            D = self.discriminator
            if D is not None:
                assert self.optimizer_d is not None
                bs = len(t)
                lr = optimizer.param_groups[0]["lr"]
                for group in self.optimizer_d.param_groups:
                    group["lr"] = lr
                D.train()
                d_logits = D(torch.cat([x, x_trap.detach()]))
                target = torch.cat([torch.ones(bs, 1), torch.zeros(bs, 1)]).to(d_logits)
                d_loss = F.binary_cross_entropy_with_logits(d_logits, target)
                self.optimizer_d.zero_grad(set_to_none=True)
                d_loss.backward()
                self.optimizer_d.step()
                self.optimizer_d.zero_grad(set_to_none=True)
                D.eval()
                nat_logits = D(x_trap)
                natural = F.binary_cross_entropy_with_logits(nat_logits,
                                                             torch.ones_like(nat_logits))
                loss = loss + natural
                logs["loss_discriminator"] = float(d_loss.detach())
                logs["loss_naturalness"] = float(natural.detach())
            effective = F.cross_entropy(self.logits(model, self.augment(x_trap)), t)
            loss = loss + effective
            (grad,) = torch.autograd.grad(loss, trig)
            with torch.no_grad():
                self.triggers = (trig - self.params["step_size"] * grad.sign()).clamp(0, 1)
            logs["loss_trigger"] = float(loss.detach())
        finally:
            model.train(was_training)
        return logs

    def model_loss(self, model: nn.Module, x: Tensor, y: Tensor, t: Tensor
                   ) -> tuple[Tensor, dict[str, float]]:
        """Step 2: (1 - beta) CE_mean(f(aug(x)), y) + beta CE_mean(f(aug(x_trap)), t)."""
        bs = len(y)
        with torch.no_grad():
            x_trap = self.inject(x, t)
        logits = self.logits(model, torch.cat([self.augment(x), self.augment(x_trap)]))
        clean = F.cross_entropy(logits[:bs], y)
        trap = F.cross_entropy(logits[bs:], t)
        b = self.params["beta"]
        loss = (1 - b) * clean + b * trap
        logs = {"loss_clean": float(clean.detach()), "loss_trapdoor": float(trap.detach()),
                "trapdoor_acc": float((logits[bs:].argmax(1) == t).float().mean())}
        return loss, logs

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        """Model loss with the current triggers (mean-reduced, see module doc); the full
        step including the trigger update is :meth:`train_step`."""
        t = self.trapdoor_labels(len(y), ctx).to(y.device)
        return self.model_loss(model, x, y, t)

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        self._to(x.device, optimizer)
        t = self.trapdoor_labels(len(y), ctx).to(y.device)
        logs: dict[str, float] = {}
        if self.params["optimized"]:
            logs.update(self.update_triggers(model, x, t, optimizer))
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss, model_logs = self.model_loss(model, x, y, t)
        logs.update(model_logs)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at epoch {ctx.epoch}, step {ctx.step}")
        loss.backward()
        optimizer.step()
        return float(loss.detach()) * len(y), logs

    @torch.no_grad()
    def trapdoor_accuracy(self, model: nn.Module, x: Tensor, t: Tensor) -> float:
        """Fraction of trigger-injected inputs classified as their trapdoor label (eval mode,
        no augmentation)."""
        was_training = model.training
        model.eval()
        try:
            pred = self.logits(model, self.inject(x, t)).argmax(1)
        finally:
            model.train(was_training)
        return float((pred == t.to(pred.device)).float().mean())


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(v) for v in obj)
    return obj
