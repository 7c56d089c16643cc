"""Projected gradient descent in the normalised [-1, 1] input space (spec §2.8).

Attacks and PGD always run in float32 with TF32 disabled: a perturbation of 1e-5 is below
TF32's 10-bit mantissa resolution and would silently vanish.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor


@contextlib.contextmanager
def no_tf32() -> Iterator[None]:
    """Disable TF32 for matmul and cuDNN (and restore the previous settings afterwards)."""
    matmul = torch.backends.cuda.matmul.allow_tf32
    cudnn = torch.backends.cudnn.allow_tf32
    precision = torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn
        torch.set_float32_matmul_precision(precision)


def tf32_disabled() -> bool:
    return (not torch.backends.cuda.matmul.allow_tf32
            and not torch.backends.cudnn.allow_tf32
            and torch.get_float32_matmul_precision() == "highest")


def sample_targets(y: Tensor, n_classes: int, generator: torch.Generator | None = None) -> Tensor:
    """AT-AT target classes (spec §2.8): uniform over classes; a draw equal to the true label
    is replaced by (t + 1) mod n_classes, so the target always differs from the label."""
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
) -> Tensor:
    """L-infinity PGD. ``labels`` are attack targets when ``targeted`` (the loss of the target
    class is decreased) and true labels otherwise (their loss is increased).

    The model is called in whatever mode it is in (the authors run it in train mode, so
    BatchNorm uses batch statistics). Gradients flow to the input only; parameter ``.grad``
    fields are left untouched. Returns a detached tensor within ``epsilon`` of ``x`` and
    inside ``clamp``.
    """
    if epsilon <= 0 or step_size <= 0 or iterations < 0:
        raise ValueError(f"PGD needs epsilon > 0, step_size > 0, iterations >= 0; got "
                         f"{epsilon}, {step_size}, {iterations}")
    lo, hi = clamp
    with no_tf32():
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
