"""The defense interface. A defense says what it adds to the model, to the loss and to the
training step; the training loop (atat.training.train) is shared by every defense."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DefenseConfigError(ValueError):
    """A defense variant in the config has an unknown or invalid parameter."""


@dataclasses.dataclass(frozen=True)
class Param:
    default: Any
    check: Callable[[Any], bool]
    description: str


def positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def non_negative(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


#: Largest meaningful L-inf radius / step in the normalised input space: inputs lie in [-1, 1],
#: so a perturbation of 2 already reaches every image.
MAX_INPUT_PERTURBATION = 2.0


def input_perturbation(v: Any) -> bool:
    """A radius or step in [-1, 1] input units: 0 < v <= 2."""
    return positive(v) and v <= MAX_INPUT_PERTURBATION


#: What the config checks need to know about each target architecture without building it
#: (atat.training.models.build_model; tests/test_defense_mid.py checks the table against it):
#: feature width (input of the head) and the number of direct children of the feature
#: extractor (TL-DMI freezes a prefix of them).
ARCHITECTURE_FACTS: dict[str, dict[str, int]] = {
    "resnet18": {"feature_dim": 512, "feature_children": 10},
    "resnet152": {"feature_dim": 2048, "feature_children": 10},
    "densenet169": {"feature_dim": 1664, "feature_children": 15},
    "resnet10": {"feature_dim": 512, "feature_children": 10},   # the demo's shallow ResNet
    "densenet47": {"feature_dim": 424, "feature_children": 15},  # the demo's DenseNet
}


@dataclasses.dataclass(frozen=True)
class ModelContext:
    """What a defense may need to know about the model it defends (e.g. Trap-MID builds a
    discriminator of the same architecture from the same ImageNet weights)."""

    architecture: str = "resnet18"
    resolution: int = 224
    weights_path: str | None = None


@dataclasses.dataclass
class StepContext:
    """What a training step may need besides the batch."""

    epoch: int
    step: int
    n_classes: int
    generator: torch.Generator
    steps_per_epoch: int | None = None


class Defense:
    """Base class = NoDef. Subclasses override only what they change."""

    type_name: ClassVar[str] = "nodef"
    PARAMS: ClassVar[Mapping[str, Param]] = {}

    def __init__(self, params: Mapping[str, Any], n_classes: int,
                 context: ModelContext | None = None) -> None:
        self.params = self.resolve_params(params)
        self.n_classes = n_classes
        self.context = context or ModelContext()

    # ---------------------------------------------------------------- parameters
    @classmethod
    def resolve_params(cls, params: Mapping[str, Any], where: str = "defense") -> dict[str, Any]:
        """Fill defaults and check every parameter; unknown names are errors."""
        given = {k: v for k, v in params.items() if k not in ("type", "training")}
        unknown = sorted(set(given) - set(cls.PARAMS))
        if unknown:
            raise DefenseConfigError(
                f"{where}: unknown parameter(s) {unknown} for defense type '{cls.type_name}' "
                f"(allowed: {sorted(cls.PARAMS)})")
        out = {}
        for name, spec in cls.PARAMS.items():
            value = given.get(name, spec.default)
            if not spec.check(value):
                raise DefenseConfigError(
                    f"{where}.{name}: invalid value {value!r} ({spec.description})")
            out[name] = value
        return out

    @classmethod
    def check_architecture(cls, params: Mapping[str, Any], architecture: str,
                           where: str = "defense") -> None:
        """Raise :class:`DefenseConfigError` when the resolved ``params`` are meaningless on
        ``architecture`` (run by the config checks for every planned model, before any job)."""

    # ---------------------------------------------------------------- model
    def build_model(self, model: nn.Module) -> nn.Module:
        """Modify or wrap the freshly built classifier (e.g. add a bottleneck)."""
        return model

    def trainable_parameters(self, model: nn.Module) -> list[Any]:
        """What the optimiser trains: parameters, or Adam parameter groups (dicts)."""
        return [p for p in model.parameters() if p.requires_grad]

    # ---------------------------------------------------------------- data
    def train_augmentation(self, aug: Mapping[str, Any] | None) -> dict[str, Any]:
        """The training augmentation this defense trains with (default: the config's)."""
        from atat.data.loading import resolve_aug

        return resolve_aug(aug)

    def pre_transform(self) -> Callable[[Any], Any] | None:
        """A transform applied to training images before augmentation (Unseen-Pixels)."""
        return None

    def final_metrics(self, model: nn.Module) -> dict[str, Any]:
        """Extra numbers for the metrics file of the kept model."""
        return {}

    # ---------------------------------------------------------------- loss and step
    def on_epoch_start(self, epoch: int, model: nn.Module) -> None:
        """Hook for schedules (e.g. NegLS)."""

    def logits(self, model: nn.Module, x: Tensor) -> Tensor:
        out = model(x)
        return out[0] if isinstance(out, tuple) else out

    def training_loss(self, model: nn.Module, x: Tensor, y: Tensor,
                      ctx: StepContext) -> tuple[Tensor, dict[str, float]]:
        """Loss of one batch, summed over the batch (docs/sources.md#training-recipe,
        criterionSum)."""
        logits = self.logits(model, x)
        loss = F.cross_entropy(logits, y, reduction="sum")
        return loss, {}

    def eval_loss(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """(summed loss, logits) on a clean evaluation batch."""
        logits = self.logits(model, x)
        return F.cross_entropy(logits, y, reduction="sum"), logits

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor,
                   y: Tensor, ctx: StepContext) -> tuple[float, dict[str, float]]:
        optimizer.zero_grad(set_to_none=True)
        loss, logs = self.training_loss(model, x, y, ctx)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training loss is {loss.item()} at epoch {ctx.epoch}, step {ctx.step}")
        loss.backward()
        optimizer.step()
        return float(loss.detach()), logs

    # ---------------------------------------------------------------- extra state
    def state_dict(self) -> dict[str, Any]:
        """Defense state saved with the model (e.g. Trap-MID triggers)."""
        return {}

    def checkpoint_state_dict(self) -> dict[str, Any]:
        """Defense state kept with the final model (default: all of it); the resume file
        always holds the full :meth:`state_dict`."""
        return self.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"defense '{self.type_name}' has no state, got {sorted(state)}")
