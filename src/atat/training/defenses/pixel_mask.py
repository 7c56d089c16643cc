"""Unseen-Pixels: a learned pixel mask that deletes >97 % of every training image before the
network sees it (paper §3 experiment 3, App. E.2; docs/sources.md#unseen-pixels; REPO
``defenses/drop_layer.py``).

Three stages, each an ordinary training run of the shared loop (one config variant each):

1. ``stage: group_lasso`` (GL): a multiplicative mask W of shape (3, H, W), every weight
   initialised to ``mask_init`` = 0.5, is prepended to the network (forward = network(W ⊙ x),
   x the *normalised* input, so a deleted pixel is 0 = mid-grey) and trained jointly with it by
   the same Adam optimiser. Loss (train and validation) = CE_sum + λ1·Σ_p ‖W[:, p]‖₂
   (+ λ_ridge·Σ_p ‖W[:, p]‖₂², default 0), the group lasso over the RGB triplet of every pixel.
   Two readings of λ1: paper App. E.2 writes the stage-1 loss as L + λ1·‖D^Norm‖₂ (D^Norm the
   H×W matrix of the triplet norms n_p) and calls λ1 the strength of a "ridge penalty"; REPO's
   ``lasso.lambda_`` weights the group lasso Σ_p n_p. ``penalty_form: group_lasso`` (default)
   is REPO's reading; ``penalty_form: ridge`` is the paper's formula read literally,
   λ1·‖D^Norm‖₂ = λ1·(Σ_p n_p²)^½ (one Frobenius norm of the whole mask, not squared; it shrinks
   every weight alike and leaves the zeroing to the hard threshold). Only stage 1 has the
   switch; stage 2 is the adaptive group lasso in both sources.
2. ``stage: adaptive`` (GL+AGL, Dinh & Ho): a fresh network and mask (init 0.5); the penalty is
   λ2·Σ_p ‖W[:, p]‖₂ / (ñ_p^ρ + 1e-8) with ñ_p the RGB norm of stage 1's final mask (a pixel
   stage 1 deleted gets weight 1e8, i.e. stays off).
   In both mask stages, after **every** optimiser step every pixel group with norm ≤ τ is set to
   0; τ = ``initial_threshold`` (1e-6) in 0-based epochs < ``change_threshold_epoch`` (10) and
   ``threshold`` (0.0025) afterwards (REPO: 1-based epoch counter, switch at the end of epoch 10).
   Augmentation in the mask stages: brightness, saturation and hue jitter only — no random
   resized crop, no flip, no contrast (paper App. E.2: they would let deleted pixels influence
   mask training); :meth:`PixelMaskDefense.train_augmentation` returns that augmentation.
3. ``stage: retrain``: stage 2's mask is binarised (1 where a weight is not ≈0, i.e.
   |w| > 1e-8 as REPO's ``isclose(w, 0)``; element-wise) and frozen; the network is fresh
   (ImageNet init as any target model). The mask becomes a **pre-augmentation** transform of the
   training images (REPO ``mask_as_transform``): Resize → ToTensor → Normalize(0.5, 0.5) → ·D* →
   (x+1)/2 → PIL image → then the full training pipeline (RRC, flip, jitter, ToTensor,
   Normalize), so deleted pixels never reach the network; in train mode forward does not apply
   the mask again, in eval mode (validation, test, attacks, HSIC) it does. No penalty, no
   threshold; recipe and augmentation as any target model (paper App. E.2).

λ: paper App. E.2 sets λ1 = 0.01 and λ2 = 0.1 with ρ = 1 for ResNet-18 and ResNet-152 (REPO
default ``lambda_`` 0.025; the paper wins). ``lambda_lasso: null`` picks λ1 in stage 1 and λ2 in
stage 2. The penalty is added once per batch to the **summed** CE (docs/sources.md#unseen-pixels, as
REPO).

Kept fraction: :func:`mask_stats` — ``kept_fraction`` is the mean of the binarised mask (the
fraction of the 3·H·W mask weights that are kept; for the binary stage-3 mask this is exactly the
mask's mean), ``kept_pixel_fraction`` the fraction of pixel positions with any channel kept. The
stats of the kept (best) model are stored in the checkpoint's ``defense_state["mask_stats"]``
and returned by :meth:`PixelMaskDefense.final_metrics`.

Chaining: stages 2 and 3 name the config variant of the previous stage in ``prior``; the
workflow turns that into ``prior_model`` = the path of that variant's model.pt for the same
(dataset, architecture, seed) and makes it an input of the training job. The prior file is read
only when training starts (:meth:`PixelMaskDefense.on_epoch_start` / :meth:`pre_transform`),
never when a trained model is loaded: the stage-2 prior norms travel in the defense state and
the stage-3 mask in the model's state dict (``mask.weight``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn
from torchvision import transforms as T

from atat.data.loading import resolve_aug
from atat.base.io import torch_load
from atat.training.defenses.base import (Defense, DefenseConfigError, Param, StepContext, boolean,
                                non_negative, positive, positive_int)
from atat.training.models import Classifier

STAGES = ("group_lasso", "adaptive", "retrain")
MASK_STAGES = ("group_lasso", "adaptive")
PAPER_LAMBDA = {"group_lasso": 0.01, "adaptive": 0.1}   # paper App. E.2 (λ1, λ2)
ADAPTIVE_EPS = 1e-8                                      # docs/sources.md#unseen-pixels, REPO

__all__ = ["MaskLayer", "MaskTransform", "MaskedClassifier", "PENALTY_FORMS", "PixelMaskDefense",
           "apply_threshold_", "binarize", "group_norms", "group_lasso_penalty",
           "load_mask", "mask_stage_augmentation", "mask_stats"]


def _optional_str(v: Any) -> bool:
    return v is None or (isinstance(v, str) and bool(v))


def _optional_non_negative(v: Any) -> bool:
    return v is None or non_negative(v)


def _optional_bool(v: Any) -> bool:
    return v is None or isinstance(v, bool)


# ------------------------------------------------------------------------------ maths
def group_norms(w: Tensor) -> Tensor:
    """RGB-triplet L2 norms n_p = ‖W[:, p]‖₂ of a (C, H, W) mask → (H, W)."""
    return torch.linalg.vector_norm(w, ord=2, dim=0)


PENALTY_FORMS = ("group_lasso", "ridge")


def group_lasso_penalty(w: Tensor, lam: float, lam_ridge: float = 0.0,
                        weights: Tensor | None = None, form: str = "group_lasso") -> Tensor:
    """λ·Σ_p w_p·n_p + λ_ridge·Σ_p n_p² (w_p = 1 for the plain group lasso); with
    ``form="ridge"`` the first term is λ·‖(n_p)_p‖₂ = λ·(Σ_p n_p²)^½ instead (paper App. E.2's
    stage-1 formula read literally; no adaptive weights)."""
    n = group_norms(w)
    if form == "ridge":
        if weights is not None:
            raise ValueError("the ridge form takes no adaptive weights")
        first = torch.linalg.vector_norm(n)
    elif form == "group_lasso":
        first = (n * weights).sum() if weights is not None else n.sum()
    else:
        raise ValueError(f"unknown penalty form {form!r} (known: {PENALTY_FORMS})")
    return lam * first + lam_ridge * (n * n).sum()


def adaptive_weights(prior_norms: Tensor, rho: float) -> Tensor:
    """AGL weights 1 / (ñ_p^ρ + 1e-8) (Dinh & Ho; REPO)."""
    return 1.0 / (prior_norms.pow(rho) + ADAPTIVE_EPS)


@torch.no_grad()
def apply_threshold_(w: Tensor, tau: float) -> int:
    """Hard threshold in place: W[:, p] = 0 wherever n_p ≤ τ. Returns the pixels kept."""
    keep = group_norms(w) > tau
    w.mul_(keep.to(w.dtype))
    return int(keep.sum())


def binarize(w: Tensor, atol: float = 1e-8) -> Tensor:
    """1 where a weight is not ≈0 (|w| > atol, REPO ``~isclose(w, 0)``), else 0; element-wise."""
    return (w.detach().abs() > atol).to(torch.float32)


def mask_stats(w: Tensor, atol: float = 1e-8) -> dict[str, float | int]:
    """Kept fraction of a mask: ``kept_fraction`` = mean of the binarised mask (= the mask's
    mean for a binary mask); ``kept_pixel_fraction`` = pixel positions with any channel kept."""
    b = binarize(w, atol)
    pixels = b.amax(dim=0)
    return {"kept_fraction": float(b.mean()), "kept_pixel_fraction": float(pixels.mean()),
            "kept_pixels": int(pixels.sum()), "n_pixels": int(pixels.numel()),
            "kept_weights": int(b.sum()), "n_weights": int(b.numel()),
            "mask_mean": float(w.detach().float().mean())}


def load_mask(path: str | Path) -> Tensor:
    """The (3, H, W) mask weights of a pixel-mask model checkpoint of :func:`atat.training.train.train`."""
    ckpt = torch_load(path)
    state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, Mapping) else None
    if not isinstance(state, Mapping) or "mask.weight" not in state:
        raise ValueError(f"{path}: not a pixel-mask model (no 'mask.weight' in its state dict)")
    defense = ckpt.get("defense", {}) if isinstance(ckpt, Mapping) else {}
    if defense and defense.get("type") != PixelMaskDefense.type_name:
        raise ValueError(f"{path}: defense type is '{defense.get('type')}', not "
                         f"'{PixelMaskDefense.type_name}'")
    return state["mask.weight"].detach().float().clone()


def mask_stage_augmentation(aug: Mapping[str, Any] | None) -> dict[str, Any]:
    """The mask stages' augmentation (paper App. E.2): only brightness, saturation and hue
    jitter (values of ``aug``); no random resized crop, no horizontal flip, contrast 0."""
    a = resolve_aug(aug)
    a["random_resized_crop"] = False
    a["horizontal_flip"] = False
    a["color_jitter"] = True
    a["jitter"] = {"brightness": a["jitter"]["brightness"], "contrast": 0.0,
                   "saturation": a["jitter"]["saturation"], "hue": a["jitter"]["hue"]}
    return a


# ------------------------------------------------------------------------------ modules
class MaskLayer(nn.Module):
    """Element-wise multiplicative weight W (REPO ``ElementwiseLinear``)."""

    def __init__(self, shape: tuple[int, ...], init: float = 0.5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full(shape, float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight


class MaskedClassifier(Classifier):
    """A :class:`Classifier` whose input first goes through a :class:`MaskLayer`.

    ``mask_mode`` "layer": the mask is applied in every forward (mask stages); "transform": the
    training loader already masked the images, so the mask is applied only in eval mode."""

    def __init__(self, base: Classifier, resolution: int, init: float = 0.5,
                 mask_mode: str = "layer") -> None:
        super().__init__(base.features, base.head, base.architecture)
        if mask_mode not in ("layer", "transform"):
            raise ValueError(f"mask_mode must be 'layer' or 'transform', got {mask_mode!r}")
        self.mask = MaskLayer((3, resolution, resolution), init)
        self.mask_mode = mask_mode

    def apply_mask(self, x: Tensor) -> Tensor:
        if self.mask_mode == "transform" and self.training:
            return x
        return self.mask(x)

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(self.apply_mask(x))

    def forward_hidden(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Mask first, then the four stages (as REPO measures HSIC of the pixel-mask models,
        docs/sources.md#hsic-measurement)."""
        return super().forward_hidden(self.apply_mask(x))


class MaskTransform:
    """Pre-augmentation transform of the retraining stage (REPO ``mask_as_transform``):
    PIL → Resize(H, W) → ToTensor → Normalize(0.5, 0.5) → ·mask → (x+1)/2 → PIL. The full
    training transform follows it, so no augmentation can move a deleted pixel back in."""

    def __init__(self, mask: Tensor, resolution: int) -> None:
        mask = mask.detach().cpu().float().clone()
        if mask.shape != (3, resolution, resolution):
            raise ValueError(f"mask shape {tuple(mask.shape)} does not match resolution "
                             f"{resolution}")
        self.mask = mask
        self.resolution = resolution
        self._pre = T.Compose([T.Resize((resolution, resolution), antialias=True), T.ToTensor(),
                               T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
        self._to_pil = T.ToPILImage()

    def __call__(self, img: Image.Image) -> Image.Image:
        x = self._pre(img) * self.mask
        return self._to_pil((x + 1) / 2)

    def __repr__(self) -> str:
        return (f"MaskTransform(resolution={self.resolution}, "
                f"kept_fraction={float(self.mask.mean()):.4f})")


# ------------------------------------------------------------------------------ defense
class PixelMaskDefense(Defense):
    type_name = "pixel_mask"
    PARAMS = {
        "stage": Param("group_lasso", lambda v: v in STAGES,
                       f"one of {list(STAGES)} (paper App. E.2 stages 1, 2, final retraining)"),
        "lambda_lasso": Param(None, _optional_non_negative,
                              "group-lasso weight, >= 0, or null = paper App. E.2 value "
                              "(0.01 group_lasso, 0.1 adaptive)"),
        "penalty_form": Param("group_lasso", lambda v: v in PENALTY_FORMS,
                              f"one of {list(PENALTY_FORMS)}: what λ1 weights in stage 1, the "
                              "group lasso Σ_p n_p (REPO) or the paper's 'ridge' ‖D^Norm‖₂ "
                              "(App. E.2); only stage group_lasso may use ridge"),
        "lambda_ridge": Param(0.0, non_negative, "weight of Σ_p n_p², >= 0 (REPO: 0, "
                              "docs/sources.md#unseen-pixels)"),
        "rho": Param(1.0, positive, "AGL exponent ρ, > 0 (paper App. E.2: 1)"),
        "mask_init": Param(0.5, lambda v: positive(v) and v <= 1,
                           "initial mask weight, 0 < mask_init <= 1 (REPO: 0.5, "
                           "docs/sources.md#unseen-pixels)"),
        "mask_lr": Param(None, lambda v: v is None or (positive(v) and v <= 10),
                         "Adam learning rate of the mask weights in the mask stages, in (0, 10], "
                         "or null = the training lr (paper/REPO: one optimiser, one lr)"),
        "penalty": Param(None, _optional_bool,
                         "add the penalty to the loss; null = on in the mask stages, off in "
                         "retrain"),
        "apply_threshold": Param(True, boolean, "hard threshold after every optimiser step "
                                                "(mask stages)"),
        "initial_threshold": Param(1e-6, non_negative, "τ before change_threshold_epoch"),
        "threshold": Param(0.0025, non_negative, "τ from change_threshold_epoch on"),
        "change_threshold_epoch": Param(10, positive_int,
                                        "0-based epoch from which τ = threshold (REPO: after "
                                        "epoch 10, 1-based)"),
        "binarize_atol": Param(1e-8, non_negative, "|w| > atol counts as kept (REPO isclose)"),
        "prior": Param(None, _optional_str,
                       "config defense variant of the previous stage (adaptive: stage 1; "
                       "retrain: stage 2); the workflow makes it an input"),
        "prior_model": Param(None, _optional_str,
                             "path of the previous stage's model.pt (filled in by the workflow "
                             "from `prior`)"),
    }

    @classmethod
    def resolve_params(cls, params: Mapping[str, Any], where: str = "defense") -> dict[str, Any]:
        out = super().resolve_params(params, where)
        if out["stage"] != "group_lasso" and not (out["prior"] or out["prior_model"]):
            raise DefenseConfigError(
                f"{where}: stage '{out['stage']}' needs `prior` (the config variant of the "
                f"previous stage) or `prior_model` (its model file)")
        if out["stage"] == "group_lasso" and (out["prior"] or out["prior_model"]):
            raise DefenseConfigError(f"{where}: stage 'group_lasso' takes no prior")
        if out["penalty_form"] != "group_lasso" and out["stage"] != "group_lasso":
            raise DefenseConfigError(
                f"{where}.penalty_form: '{out['penalty_form']}' is only defined for stage "
                f"'group_lasso' (stage 1); stage '{out['stage']}' uses the adaptive group lasso")
        return out

    def __init__(self, params: Mapping[str, Any], n_classes: int, context=None) -> None:
        super().__init__(params, n_classes, context)
        p = self.params
        self.stage: str = p["stage"]
        self.lam: float = (p["lambda_lasso"] if p["lambda_lasso"] is not None
                           else PAPER_LAMBDA.get(self.stage, 0.0))
        self.use_penalty: bool = (p["penalty"] if p["penalty"] is not None
                                  else self.stage in MASK_STAGES)
        self.tau: float = p["initial_threshold"]
        self.prior_norms: Tensor | None = None     # adaptive: ñ (H, W)
        self.frozen_mask: Tensor | None = None     # retrain: binarised D* (3, H, W), CPU
        self._mask_installed = False
        self._transform_built = False
        self._mask_module: MaskLayer | None = None

    # ---------------------------------------------------------------- model
    def build_model(self, model: nn.Module) -> nn.Module:
        if not isinstance(model, Classifier):
            raise TypeError(f"pixel_mask needs an atat.training.models.Classifier, got "
                            f"{type(model).__name__}")
        r = int(self.context.resolution)
        if self.stage == "retrain":
            # all-ones initial mask, replaced when the stage-2 mask is installed (training) or loaded
            # from the checkpoint's state dict (load_model); never trained
            masked = MaskedClassifier(model, r, init=1.0, mask_mode="transform")
            masked.mask.weight.requires_grad_(False)
        else:
            masked = MaskedClassifier(model, r, init=self.params["mask_init"], mask_mode="layer")
        self._mask_module = masked.mask
        return masked

    # ---------------------------------------------------------------- prior (previous stage)
    def _prior_path(self) -> Path:
        path = self.params["prior_model"]
        if not path:
            raise RuntimeError(f"pixel_mask stage '{self.stage}': `prior_model` is not set (the "
                               f"workflow fills it in from `prior` = {self.params['prior']!r})")
        return Path(path)

    def load_prior(self, model: nn.Module | None = None) -> None:
        """Read the previous stage's mask (once) and, for retrain, install the binarised mask
        in ``model`` (frozen). Idempotent; a no-op in stage 1."""
        r = int(self.context.resolution)
        if self.stage == "adaptive" and self.prior_norms is None:
            w = load_mask(self._prior_path())
            if w.shape != (3, r, r):
                raise ValueError(f"prior mask shape {tuple(w.shape)} != (3, {r}, {r})")
            self.prior_norms = group_norms(w)
        elif self.stage == "retrain":
            if self.frozen_mask is None:
                w = load_mask(self._prior_path())
                if w.shape != (3, r, r):
                    raise ValueError(f"prior mask shape {tuple(w.shape)} != (3, {r}, {r})")
                self.frozen_mask = binarize(w, self.params["binarize_atol"])
            if model is not None:
                with torch.no_grad():
                    model.mask.weight.copy_(self.frozen_mask.to(model.mask.weight.device))
                model.mask.weight.requires_grad_(False)
                self._mask_installed = True

    # ---------------------------------------------------------------- training hooks
    def train_augmentation(self, aug: Mapping[str, Any] | None) -> dict[str, Any]:
        """The augmentation this stage trains with: mask stages only brightness/saturation/hue
        (paper App. E.2); retrain the unchanged target-model augmentation."""
        if self.stage in MASK_STAGES:
            return mask_stage_augmentation(aug)
        return resolve_aug(aug)

    def pre_transform(self) -> Callable[[Image.Image], Image.Image] | None:
        """Retrain: the pre-augmentation mask transform (reads the stage-2 mask); else None."""
        if self.stage != "retrain":
            return None
        self.load_prior()
        assert self.frozen_mask is not None
        self._transform_built = True
        return MaskTransform(self.frozen_mask, int(self.context.resolution))

    def trainable_parameters(self, model: nn.Module) -> list[Any]:
        """With ``mask_lr`` set (mask stages), the mask weights form their own Adam parameter
        group with that lr (the scheduler decays both groups alike). Adam moves a weight by
        about lr per step whatever the gradient's scale, so a mask that starts at 0.5 needs
        several hundred steps at lr 1e-3 to reach the threshold: the paper's runs have ~20k
        steps, a short run needs a larger mask lr to delete any pixel."""
        params = super().trainable_parameters(model)
        if self.params["mask_lr"] is None or self.stage not in MASK_STAGES:
            return params
        mask = model.mask.weight
        rest = [p for p in params if p is not mask]
        return [{"params": rest}, {"params": [mask], "lr": float(self.params["mask_lr"])}]

    def on_epoch_start(self, epoch: int, model: nn.Module) -> None:
        p = self.params
        self.tau = p["initial_threshold"] if epoch < p["change_threshold_epoch"] else p["threshold"]
        self.load_prior(model)

    def penalty(self, model: nn.Module) -> Tensor:
        w = model.mask.weight
        weights = None
        if self.stage == "adaptive":
            if self.prior_norms is None:
                raise RuntimeError("pixel_mask adaptive stage: the stage-1 mask was not loaded "
                                   "(load_prior / on_epoch_start not called)")
            weights = adaptive_weights(self.prior_norms.to(w.device), self.params["rho"])
        return group_lasso_penalty(w, self.lam, self.params["lambda_ridge"], weights,
                                   form=self.params["penalty_form"])

    def _loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits = self.logits(model, x)
        ce = F.cross_entropy(logits, y, reduction="sum")
        pen = self.penalty(model) if self.use_penalty else ce.new_zeros(())
        return ce + pen, pen, logits

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        loss, pen, _ = self._loss(model, x, y)
        return loss, {"mask_penalty": float(pen.detach())}

    def eval_loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        loss, _, logits = self._loss(model, x, y)
        return loss, logits

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        if self.stage == "retrain" and not self._mask_installed:
            raise RuntimeError("pixel_mask retrain: the stage-2 mask is not installed "
                               "(on_epoch_start(epoch, model) must run before training)")
        if self.stage == "retrain" and not self._transform_built:
            raise RuntimeError("pixel_mask retrain: the training loader lacks the "
                               "pre-augmentation mask transform (call pre_transform() and "
                               "prepend it to the training transform) - without it the network "
                               "would train on unmasked images")
        loss, logs = super().train_step(model, optimizer, x, y, ctx)
        w = model.mask.weight
        if self.stage in MASK_STAGES and self.params["apply_threshold"]:
            kept = apply_threshold_(w.data, self.tau)
        else:
            kept = int((group_norms(w.detach()) > 0).sum())
        logs["kept_pixel_fraction"] = kept / (w.shape[1] * w.shape[2])
        logs["threshold"] = self.tau
        return loss, logs

    # ---------------------------------------------------------------- state / reporting
    def state_dict(self) -> dict[str, Any]:
        if self.stage == "adaptive" and self.prior_norms is not None:
            return {"prior_norms": self.prior_norms.detach().cpu().clone()}
        return {}

    def checkpoint_state_dict(self) -> dict[str, Any]:
        state = self.state_dict()
        if self._mask_module is not None:
            state["mask_stats"] = mask_stats(self._mask_module.weight,
                                             self.params["binarize_atol"])
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        unknown = set(state) - {"prior_norms", "mask_stats"}
        if unknown:
            raise ValueError(f"pixel_mask: unexpected defense state {sorted(unknown)}")
        if "prior_norms" in state:
            self.prior_norms = state["prior_norms"].detach().cpu().clone()

    def final_metrics(self, model: nn.Module) -> dict[str, Any]:
        """Mask statistics of ``model`` for metrics.json (kept fraction etc.)."""
        return {"pixel_mask_stage": self.stage,
                **mask_stats(model.mask.weight, self.params["binarize_atol"])}
