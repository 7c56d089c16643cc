"""MID, the mutual-information (variational information bottleneck) defense (paper A.1;
docs/sources.md#mid; REPO ``defenses/mid.py``, MID-O ``train_vib.py``).

A bottleneck sits between the pooled features and a **new** head:
``s = st_layer(h)`` with ``st_layer = Linear(feat_dim → 2k)``; ``μ = s[:, :k]``,
``σ = softplus(s[:, k:] − 5)``; ``z = μ + σ·ε`` with ε ~ N(0, I) drawn afresh on **every**
forward pass, in training *and* evaluation (no deterministic μ-only mode, as REPO and MID-O);
``logits = classifier(z)`` with ``classifier = Linear(k → n_classes)`` (fresh init).

Loss (train and validation, docs/sources.md#mid): ``CE_sum(logits, y) + β · Σ_batch Σ_j
−½(1 + 2 log σ_ij − μ_ij² − σ_ij²)`` — the KL to N(0, I), summed over dimensions and the batch
to match the summed CE.

β: the paper (App. A.1) says β = 0.01 "following previous work"; REPO's ``mid.yaml`` has 0.03
(its comment says the paper default is 0.003; MID-O uses 0.003 with batch-mean CE and KL, the
same ratio). The paper's stated value wins here: default ``beta = 0.01``
(docs/sources.md#mid). Bottleneck width k = feat_dim // 2 by default (ResNet-152: 1024 as in the
paper; ResNet-18: 256; DenseNet-169: 832). The paper's lower learning rate 1e-4 for FaceScrub MID
models is a recipe (config) matter, not part of this class.

Implementation: the model stays an :class:`atat.training.models.Classifier` whose ``head`` is a
:class:`VIBHead`; ``model(x)`` returns plain (stochastic) logits, so AutoAttack, the shared
evaluation and ``forward_hidden`` (HSIC measurement of the stage outputs) work unchanged;
the loss uses :meth:`VIBHead.forward_stats` to get (logits, μ, σ) of one and the same sample.
Checkpoint keys: ``head.st_layer.*`` and ``head.classifier.*``.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.training.defenses.base import (ARCHITECTURE_FACTS, Defense, DefenseConfigError, Param,
                                StepContext, non_negative, positive_int)
from atat.training.models import Classifier


def _optional_positive_int(v: Any) -> bool:
    return v is None or positive_int(v)


class VIBHead(nn.Module):
    """Stochastic bottleneck + new linear classifier. ``in_features``/``out_features`` mirror an
    ``nn.Linear`` head so code that inspects ``model.head`` keeps working."""

    def __init__(self, in_features: int, k: int, n_classes: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = n_classes
        self.k = k
        self.st_layer = nn.Linear(in_features, 2 * k)
        self.classifier = nn.Linear(k, n_classes)

    def forward_stats(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(logits, μ, σ) of one fresh sample z = μ + σ·ε (train and eval alike)."""
        s = self.st_layer(h.reshape(h.shape[0], -1))
        mu, std = s[:, :self.k], F.softplus(s[:, self.k:] - 5, beta=1)
        z = mu + std * torch.randn_like(std)
        return self.classifier(z), mu, std

    def forward(self, h: Tensor) -> Tensor:
        return self.forward_stats(h)[0]


def kl_to_standard_normal(mu: Tensor, std: Tensor) -> Tensor:
    """Σ over batch and dimensions of −½(1 + 2 log σ − μ² − σ²) (docs/sources.md#mid)."""
    return -0.5 * (1 + 2 * std.log() - mu.pow(2) - std.pow(2)).sum()


class MutualInformationDefense(Defense):
    type_name = "mid"
    PARAMS = {
        "beta": Param(0.01, non_negative,
                      "KL weight, >= 0 (paper A.1: 0.01; REPO mid.yaml 0.03; MID-O 0.003)"),
        "bottleneck_dim": Param(None, _optional_positive_int,
                                "bottleneck width k, integer > 0 or null (= feature_dim // 2)"),
    }

    @classmethod
    def check_architecture(cls, params: Mapping[str, Any], architecture: str,
                           where: str = "defense") -> None:
        k, feat = params["bottleneck_dim"], ARCHITECTURE_FACTS[architecture]["feature_dim"]
        if k is not None and k > feat:
            raise DefenseConfigError(f"{where}.bottleneck_dim: {k} is wider than the {feat} "
                                     f"features of {architecture}; a bottleneck needs k <= {feat}")

    def build_model(self, model: nn.Module) -> nn.Module:
        if not isinstance(model, Classifier):
            raise TypeError(f"MID needs an atat.training.models.Classifier, got {type(model).__name__}")
        feat_dim = model.feature_dim
        k = self.params["bottleneck_dim"] or feat_dim // 2
        head = VIBHead(feat_dim, k, model.head.out_features)
        return Classifier(model.features, head, model.architecture)

    @staticmethod
    def forward_stats(model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return model.head.forward_stats(model.features(x))

    def loss_terms(self, model: nn.Module, x: Tensor, y: Tensor
                   ) -> tuple[Tensor, Tensor, Tensor]:
        """(summed CE, summed KL, logits) of one stochastic forward pass."""
        logits, mu, std = self.forward_stats(model, x)
        return F.cross_entropy(logits, y, reduction="sum"), kl_to_standard_normal(mu, std), logits

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        ce, kl, _ = self.loss_terms(model, x, y)
        loss = ce + self.params["beta"] * kl
        return loss, {"loss_ce": float(ce.detach()) / len(y),
                      "info_loss": float(kl.detach()) / len(y)}

    def eval_loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """The validation loss includes the KL term; predictions are stochastic
        (docs/sources.md#mid)."""
        ce, kl, logits = self.loss_terms(model, x, y)
        return ce + self.params["beta"] * kl, logits
