"""Vanilla adversarial training (docs/sources.md#adversarial-training): untargeted PGD, loss on the
TRUE label."""

import pytest
import torch
import torch.nn.functional as F

from atat.training.defenses.at import AdversarialTraining
from atat.training.defenses.base import StepContext
from atat.training.pgd import pgd


def setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 5))
    x = torch.rand(8, 3, 4, 4) * 2 - 1
    y = torch.randint(0, 5, (8,))
    return model, x, y


def test_defaults_are_the_repo_vanilla_at_values():
    d = AdversarialTraining({}, 5)
    assert d.type_name == "at" and d.targeted is False
    assert d.params == {"epsilon": 0.01, "step_size": 0.001, "iterations": 10,
                        "random_start": True, "weight_clean": 0.0, "weight_adv": 1.0}


def test_adversarial_loss_uses_the_true_label():
    model, x, y = setup()
    d = AdversarialTraining({"epsilon": 0.1, "step_size": 0.03, "iterations": 4}, 5)
    ctx = StepContext(epoch=0, step=0, n_classes=5, generator=torch.Generator().manual_seed(7))
    loss, logs = d.training_loss(model, x, y, ctx)
    g = torch.Generator().manual_seed(7)  # same draws: untargeted PGD draws only the start
    x_adv = pgd(model, x, y, epsilon=0.1, step_size=0.03, iterations=4, targeted=False,
                random_start=True, generator=g)
    expected = F.cross_entropy(model(x_adv), y, reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert "loss_clean" not in logs  # weight_clean 0: no clean forward pass
    # the perturbation is adversarial for the true label: it raises the loss
    assert expected.item() > F.cross_entropy(model(x), y, reduction="sum").item()
    assert (x_adv - x).abs().max() <= 0.1 + 1e-6
    assert logs["attack_success"] == pytest.approx(
        float((model(x_adv).argmax(1) != y).float().mean()))


def test_clean_weight_adds_the_clean_term():
    model, x, y = setup()
    d = AdversarialTraining({"epsilon": 0.1, "step_size": 0.03, "iterations": 2,
                             "weight_clean": 0.5, "random_start": False}, 5)
    ctx = StepContext(epoch=0, step=0, n_classes=5, generator=torch.Generator().manual_seed(1))
    loss, _ = d.training_loss(model, x, y, ctx)
    x_adv = pgd(model, x, y, epsilon=0.1, step_size=0.03, iterations=2, targeted=False,
                random_start=False)
    expected = (0.5 * F.cross_entropy(model(x), y, reduction="sum")
                + F.cross_entropy(model(x_adv), y, reduction="sum"))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_train_step_updates_the_model():
    model, x, y = setup()
    d = AdversarialTraining({"iterations": 2}, 5)
    opt = torch.optim.Adam(d.trainable_parameters(model), lr=1e-2)
    before = [p.clone() for p in model.parameters()]
    ctx = StepContext(epoch=0, step=0, n_classes=5, generator=torch.Generator().manual_seed(0))
    loss, logs = d.train_step(model, opt, x, y, ctx)
    assert loss > 0 and 0 <= logs["attack_success"] <= 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("type_name", ["at", "atat"])
@pytest.mark.parametrize("params,key", [({"epsilon": 5.0}, "epsilon"),
                                        ({"epsilon": 2.5, "step_size": 0.1}, "epsilon"),
                                        ({"epsilon": 0.01, "step_size": 0.02}, "step_size"),
                                        ({"weight_clean": 0.0, "weight_adv": 0.0}, "weight_adv"),
                                        ({"weight_adv": -1.0}, "weight_adv")])
def test_meaningless_perturbations_and_weights_are_rejected(type_name, params, key):
    """Issue 13 item 16: inputs lie in [-1, 1], so epsilon <= 2; a step beyond epsilon is
    clipped back; a zero loss trains nothing."""
    from atat.training.defenses import build_defense
    from atat.training.defenses.base import DefenseConfigError
    with pytest.raises(DefenseConfigError, match=f"defenses.x.{key}"):
        build_defense({"type": type_name, **params}, 5, where="defenses.x")
    build_defense({"type": type_name, "epsilon": 2.0, "step_size": 2.0}, 5)  # the boundary
