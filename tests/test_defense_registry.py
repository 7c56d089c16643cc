"""Every defense of the registry (atat.training.defenses.REGISTRY) through one training run of
atat.training.train: one epoch of ResNet-18 at 16 px on the tiny synthetic dataset (tests/conftest.py),
finite losses, and load_model giving back the registered class with its state. The checks that
are a defense's own (BiDO's HSIC terms, MID's bottleneck and KL, NegLS's smoothing) are kept
beside it in :data:`CHECKS`; the defenses' other behaviour is tested in tests/test_defense_*.py."""

from __future__ import annotations

import numpy as np
import pytest

from atat.training.defenses import REGISTRY
from atat.training.defenses.bido import BiDO
from atat.training.defenses.mid import MutualInformationDefense
from atat.training.defenses.negls import NegativeLabelSmoothing

AUGMENTATION = {"random_resized_crop": True, "rrc_scale": [0.85, 1.0], "horizontal_flip": True,
                "color_jitter": False}
#: A defense's variant and recipe changes where the run needs them (default: ``{"type": t}``
#: and the tiny recipe as it is).
VARIANTS = {"bido": {"type": "bido"}, "mid": {"type": "mid", "beta": 0.01},
            "negls": {"type": "negls", "schedule": "constant"}}
RECIPES = {"bido": {"eval_batch_size": 2, "val_drop_last": True},
           "mid": {"val_drop_last": False}}


def _bido(metrics, model, defense):
    h = metrics["history"][0]
    assert all(np.isfinite(h[k]) for k in ("train_loss", "val_loss", "hsic_xz", "hsic_yz"))
    assert isinstance(defense, BiDO)


def _mid(metrics, model, defense):
    assert set(h["info_loss"] > 0 for h in metrics["history"]) == {True}
    assert model.head.k == 256 and isinstance(defense, MutualInformationDefense)


def _negls(metrics, model, defense):
    h = metrics["history"][0]
    assert h["label_smoothing"] == pytest.approx(-0.05)
    # the defense state survives weights_only loading
    assert isinstance(defense, NegativeLabelSmoothing)
    assert defense.current_alpha == pytest.approx(-0.05)


#: A defense's own checks after the run.
CHECKS = {"bido": _bido, "mid": _mid, "negls": _negls}


def test_the_cases_name_registered_defenses():
    assert set(VARIANTS) | set(RECIPES) | set(CHECKS) <= set(REGISTRY)


@pytest.mark.parametrize("type_name", sorted(REGISTRY))
def test_one_training_run(type_name, tmp_path, tiny_recipe, make_synthfaces):
    from atat.training.train import TrainSpec, load_model, train

    root = make_synthfaces(tmp_path / "ds")
    spec = TrainSpec(model_id=f"test/resnet18/{type_name}/seed0", dataset_root=str(root),
                     resolution=16, n_classes=4, architecture="resnet18",
                     defense=VARIANTS.get(type_name, {"type": type_name}),
                     training=tiny_recipe(**RECIPES.get(type_name, {})),
                     augmentation=AUGMENTATION, seed=0)
    metrics = train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
                    resume_path=tmp_path / "m.resume.pt", progress=False)
    for key in ("train_loss", "val_loss", "test_loss"):
        value = metrics[key] if key != "train_loss" else metrics["history"][0][key]
        assert np.isfinite(value), key
    model, defense, _ = load_model(tmp_path / "m.pt")
    assert type(defense) is REGISTRY[type_name]
    if type_name in CHECKS:
        CHECKS[type_name](metrics, model, defense)
