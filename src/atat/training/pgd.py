"""Projected gradient descent in the normalised [-1, 1] input space
(docs/sources.md#adversarial-training), in float32 with TF32 disabled by default (``precision``, see
:mod:`atat.base.precision`)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from atat.base.precision import DEFAULT_PRECISION, attack_precision, no_tf32, tf32_disabled

__all__ = ["no_tf32", "pgd", "sample_targets", "tf32_disabled"]


def sample_targets(y: Tensor, n_classes: int, generator: torch.Generator | None = None) -> Tensor:
    """AT-AT target classes (docs/sources.md#adversarial-training): uniform over classes; a draw
    equal to the true label is replaced by (t + 1) mod n_classes, so the target always differs from
    the label."""
    if n_classes < 2:
        raise ValueError("targeted PGD needs at least 2 classes")
    t = torch.randint(0, n_classes, y.shape, generator=generator, device="cpu").to(y.device)
    return torch.where(t == y, (t + 1) % n_classes, t)


def pgd(
    model: Callable[[Tensor], Tensor],
    x: Tensor,
    labels: Tensor,
    *,
    epsilon: float,
    step_size: float,
    iterations: int,
    targeted: bool,
    random_start: bool = True,
    clamp: tuple[float, float] = (-1.0, 1.0),
    generator: torch.Generator | None = None,
    precision: str = DEFAULT_PRECISION,
) -> Tensor:
    """L-infinity PGD. ``labels`` are attack targets when ``targeted`` (the loss of the target
    class is decreased) and true labels otherwise (their loss is increased).

    The model is called in whatever mode it is in (the authors run it in train mode, so
    BatchNorm uses batch statistics). Gradients flow to the input only; parameter ``.grad``
    fields are left untouched. Returns a detached tensor within ``epsilon`` of ``x`` and
    inside ``clamp``. ``precision``: backend flags of :func:`atat.base.precision.attack_precision`
    ("fp32": TF32 off, the default; "tf32": PyTorch's defaults, cuDNN TF32 on).
    """
    if epsilon <= 0 or step_size <= 0 or iterations < 0:
        raise ValueError(f"PGD needs epsilon > 0, step_size > 0, iterations >= 0; got "
                         f"{epsilon}, {step_size}, {iterations}")
    lo, hi = clamp
    with attack_precision(precision):
        x = x.detach().float()
        if random_start:
            noise = (torch.rand(x.shape, generator=generator, device="cpu", dtype=torch.float32)
                     .to(x.device) * 2 - 1) * epsilon
            x_adv = (x + noise).clamp(lo, hi)
        else:
            x_adv = x.clone()
        for _ in range(iterations):
            x_adv.requires_grad_(True)
            logits = model(x_adv)
            loss = F.cross_entropy(logits, labels)
            objective = -loss if targeted else loss
            (grad,) = torch.autograd.grad(objective, x_adv)
            with torch.no_grad():
                x_adv = x_adv + step_size * grad.sign()
                x_adv = x + (x_adv - x).clamp(-epsilon, epsilon)
                x_adv = x_adv.clamp(lo, hi)
        return x_adv.detach()
