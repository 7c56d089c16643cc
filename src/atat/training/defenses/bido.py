"""BiDO, bilateral dependency optimisation (paper A.1, D.1; docs/sources.md#bido; REPO
``defenses/bido.py``, BIDO-F ``BiDO/engine.py`` ``multilayer_hsic``).

Per batch (training *and* validation):

    L = CE_mean(logits, y) + Σ_l [ λx · nHSIC(Z_l, X) − λy · nHSIC(Z_l, Y) ]

* Z_l: outputs of the four stages (ResNet layer1–4 after the last block's ReLU; DenseNet-169
  dense blocks 1–4) from :meth:`atat.training.models.Classifier.forward_hidden`, flattened to (m, C·H·W).
* X: the (augmented, normalised) input batch flattened to (m, 3·H·W); Y = one-hot(y).
* nHSIC: :func:`atat.training.hsic.nhsic` (normalised CCA, Gaussian σ = 5 on Z and X, kernel ``ktype``,
  default linear, on Y).
* **Mean**-reduced CE (BiDO's own criterion), not the summed CE of the other defenses; the
  optimised quantity is exactly L above. The shared loop expects a loss "summed over the
  batch" for its bookkeeping only, so :meth:`train_step` reports L·m (the reported train loss
  is then the mean of per-batch L, as BIDO-F's ``losses.avg`` with equal batches) and
  :meth:`eval_loss` returns L·m, so the evaluated "loss" is the size-weighted mean of the total
  BiDO loss over validation batches (docs/sources.md#bido), which selects the best checkpoint.

Defaults λx = a1 = 0.05, λy = a2 = 0.5 (paper's standard values). BiDO** = same class with
(λx, λy) = (0.001, 0) or (0.0001, 0) (config variants).

REPO refuses to run unless ``dataset.val_drop_last=True`` (BIDO-F's evaluation could not
handle a short last batch). This class does not need it — a last batch of any size m ≥ 1 gives
finite values — but the config still sets it to reproduce REPO: it changes which validation
samples enter checkpoint selection and, as REPO's loaders, which test samples are scored
(atat.training.train drops the last partial batch of both splits).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.training.defenses.base import Defense, Param, StepContext, non_negative
from atat.training.hsic import KERNELS, nhsic_from_normalized, normalized_kernel, one_hot


class BiDO(Defense):
    type_name = "bido"
    PARAMS = {
        "lambda_x": Param(0.05, non_negative, "weight a1 of Σ_l nHSIC(Z_l, X), >= 0"),
        "lambda_y": Param(0.5, non_negative, "weight a2 of Σ_l nHSIC(Z_l, Y), >= 0"),
        "ktype": Param("linear", lambda v: v in KERNELS, f"kernel on Y, one of {KERNELS}"),
    }

    def build_model(self, model: nn.Module) -> nn.Module:
        if not hasattr(model, "forward_hidden"):
            raise TypeError("BiDO needs a model with forward_hidden (atat.training.models.Classifier)")
        return model

    def hsic_terms(self, model: nn.Module, x: Tensor, y: Tensor
                   ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """(logits, [nHSIC(Z_l, X)]_l, [nHSIC(Z_l, Y)]_l) of one forward pass."""
        logits, hidden = model.forward_hidden(x)
        r_x = normalized_kernel(x, "gaussian")
        r_y = normalized_kernel(one_hot(y, self.n_classes), self.params["ktype"])
        hx, hy = [], []
        for z in hidden:
            r_z = normalized_kernel(z, "gaussian")
            hx.append(nhsic_from_normalized(r_z, r_x))
            hy.append(nhsic_from_normalized(r_z, r_y))
        return logits, hx, hy

    def total_loss(self, model: nn.Module, x: Tensor, y: Tensor
                   ) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """(L as optimised — batch-mean CE + HSIC terms —, logits, logs)."""
        logits, hx, hy = self.hsic_terms(model, x, y)
        ce = F.cross_entropy(logits, y)  # mean reduction, as BiDO
        a1, a2 = self.params["lambda_x"], self.params["lambda_y"]
        loss = ce.to(hx[0].dtype) + sum(a1 * a - a2 * b for a, b in zip(hx, hy))
        logs = {"loss_ce": float(ce.detach()),
                "hsic_xz": sum(float(v.detach()) for v in hx) / len(hx),
                "hsic_yz": sum(float(v.detach()) for v in hy) / len(hy)}
        return loss, logits, logs

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        """The optimised loss L (batch-mean form; see the module docstring)."""
        loss, _, logs = self.total_loss(model, x, y)
        return loss, logs

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        loss, logs = super().train_step(model, optimizer, x, y, ctx)
        return loss * len(y), logs  # the loop divides the reported sum by the sample count

    def eval_loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        loss, logits, _ = self.total_loss(model, x, y)
        return loss * len(y), logits
