"""NegLS, negative label smoothing (paper A.1; docs/sources.md#negls; REPO
``defenses/label_smoothing.py``, PPA ``losses/label_smoothing.py`` and ``train_model.py``).

Per-sample loss with the current smoothing factor α_e:

    ℓ_i = (1 − α_e) · (−log p_{y_i}) + α_e · mean_c(−log p_c)

(mean over *all* classes, including the true one). α < 0 makes the model over-confident.

Reduction: REPO's loss class divides the summed loss by the batch size even in its "sum" mode,
so the optimised batch loss is the **batch mean** of ℓ_i — reproduced here (this matters for
Adam only through its ε, but keeps the optimisation identical). For the shared loop's
bookkeeping :meth:`train_step` reports mean·m, and :meth:`eval_loss` returns Σ_i ℓ_i, so the
logged train/validation/test losses are per-sample means. (REPO's validation number is
Σ_batches mean_b / N, i.e. the per-sample mean divided by the batch size with the last short
batch over-weighted; the ordering of checkpoints differs from ours only through that last-batch
weight.)

Schedule (REPO, ``ls_scheduler: True``): REPO increments an epoch counter e **before** each
epoch, so e = t + 1 for the 0-based epoch t of the shared loop, and

    α_e = 0                          for e < 50
    α_e = α · (e − 49) / (E − 50)    for 50 ≤ e < 75
    α_e = α                          for e ≥ 75

with E = the number of training epochs (100). In 0-based epochs: 0 for t ≤ 48, −0.001 at t = 49
(α = −0.05) rising to −0.025 at t = 73, then −0.05 from t = 74 on (a jump from α/2 to α,
because the ramp's denominator is E − 50 = 50 while it lasts only 25 epochs). PPA applies the
same formula to the 0-based epoch t, i.e. REPO switches smoothing on one epoch earlier than PPA.
``schedule = "repo"`` (default) reproduces REPO; ``"ppa"`` the PPA convention; ``"constant"``
uses α from the first epoch (REPO's ``ls_scheduler: False``); ``"scaled"`` stretches REPO's
100-epoch schedule to a run of E epochs (used by the short embedded demo). The thresholds 50 and 75 are
hard-coded in both sources; ``schedule_epochs`` is E.

The validation loss uses the α of the current epoch, so best-checkpoint selection compares
losses computed with different α (docs/sources.md#negls). The current α is part of
:meth:`state_dict`, so the kept (best) checkpoint records — and its test loss uses — the α it was
validated with (REPO evaluates the test loss with the last epoch's α; only the reported test loss
differs).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atat.training.defenses.base import Defense, DefenseConfigError, Param, StepContext, positive_int

SCHEDULES = ("repo", "ppa", "constant", "scaled")


def _smoothing(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and -1.0 <= v < 1.0


def ramp(e: int, alpha: float, total_epochs: int) -> float:
    """The REPO/PPA formula evaluated at counter ``e``."""
    if e < 50:
        return 0.0
    if e < 75:
        return alpha * (e + 1 - 50) / (total_epochs - 50)
    return alpha


def scheduled_alpha(epoch: int, alpha: float, *, schedule: str = "repo",
                    total_epochs: int = 100) -> float:
    """α for the 0-based training epoch ``epoch``."""
    if schedule == "constant":
        return alpha
    if schedule == "repo":
        return ramp(epoch + 1, alpha, total_epochs)
    if schedule == "ppa":
        return ramp(epoch, alpha, total_epochs)
    if schedule == "scaled":
        # the REPO schedule stretched to a run of ``total_epochs`` epochs (for short demo runs):
        # epoch t behaves like REPO's epoch floor((t + 1) * 100 / E) - 1 of a 100-epoch run
        return ramp((epoch + 1) * 100 // total_epochs, alpha, 100)
    raise ValueError(f"unknown NegLS schedule '{schedule}' (known: {SCHEDULES})")


def label_smoothing_losses(logits: Tensor, y: Tensor, alpha: float) -> Tensor:
    """Per-sample ℓ_i = (1 − α)(−log p_y) + α · mean_c(−log p_c)."""
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, y[:, None]).squeeze(1)
    smooth = -logp.mean(dim=-1)
    return (1.0 - alpha) * nll + alpha * smooth


class NegativeLabelSmoothing(Defense):
    type_name = "negls"
    PARAMS = {
        "alpha": Param(-0.05, _smoothing, "smoothing factor in [-1, 1); negative for NegLS"),
        "schedule": Param("repo", lambda v: v in SCHEDULES, f"one of {SCHEDULES}"),
        "schedule_epochs": Param(100, positive_int,
                                 "E of the schedule (total training epochs), integer > 0; "
                                 "> 50 for the repo/ppa schedules"),
    }

    def __init__(self, params: Mapping[str, Any], n_classes: int, context=None) -> None:
        super().__init__(params, n_classes, context)
        if self.params["schedule"] in ("repo", "ppa") and self.params["schedule_epochs"] <= 50:
            raise DefenseConfigError(
                f"negls.schedule_epochs = {self.params['schedule_epochs']}: the {self.params['schedule']} "
                "schedule has hard-coded thresholds at epochs 50 and 75 and needs > 50 epochs; use "
                "schedule: scaled for short runs")
        self.epoch: int | None = None
        self.current_alpha = self.alpha_at(0)

    def alpha_at(self, epoch: int) -> float:
        p = self.params
        return scheduled_alpha(epoch, p["alpha"], schedule=p["schedule"],
                               total_epochs=p["schedule_epochs"])

    def on_epoch_start(self, epoch: int, model: nn.Module) -> None:
        self.epoch = epoch
        self.current_alpha = self.alpha_at(epoch)

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        """Batch **mean** of ℓ_i (REPO's "sum" mode; see the module docstring)."""
        losses = label_smoothing_losses(self.logits(model, x), y, self.current_alpha)
        return losses.mean(), {"label_smoothing": self.current_alpha}

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        loss, logs = super().train_step(model, optimizer, x, y, ctx)
        return loss * len(y), logs  # the loop divides the reported sum by the sample count

    def eval_loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.logits(model, x)
        return label_smoothing_losses(logits, y, self.current_alpha).sum(), logits

    def state_dict(self) -> dict[str, Any]:
        return {"current_alpha": self.current_alpha, "epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        self.current_alpha = float(state["current_alpha"])
        self.epoch = state.get("epoch")
