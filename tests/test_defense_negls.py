"""NegLS (docs/sources.md#negls): the REPO α schedule (and PPA's one-epoch shift), the loss against
the hand formula, the current α in training/evaluation (its training run through atat.training.train:
tests/test_defense_registry.py)."""

import math

import pytest
import torch

from atat.training.defenses.base import DefenseConfigError, StepContext
from atat.training.defenses.negls import NegativeLabelSmoothing, scheduled_alpha

N_CLASSES = 3


def negls(**params):
    return NegativeLabelSmoothing({"type": "negls", **params}, N_CLASSES)


# 0-based epoch of the shared loop -> alpha (REPO: counter e = epoch + 1, E = 100, alpha -0.05)
REPO_SCHEDULE = {0: 0.0, 48: 0.0, 49: -0.001, 50: -0.002, 60: -0.012, 73: -0.025, 74: -0.05,
                 75: -0.05, 99: -0.05}
# PPA: the same formula on the 0-based epoch
PPA_SCHEDULE = {0: 0.0, 48: 0.0, 49: 0.0, 50: -0.001, 73: -0.024, 74: -0.025, 75: -0.05, 99: -0.05}


@pytest.mark.parametrize("epoch,expected", sorted(REPO_SCHEDULE.items()))
def test_repo_schedule(epoch, expected):
    d = negls()
    d.on_epoch_start(epoch, torch.nn.Identity())
    assert d.current_alpha == pytest.approx(expected, abs=1e-12)
    assert scheduled_alpha(epoch, -0.05) == pytest.approx(expected, abs=1e-12)


def test_ppa_and_constant_schedules():
    for epoch, expected in PPA_SCHEDULE.items():
        assert scheduled_alpha(epoch, -0.05, schedule="ppa") == pytest.approx(expected, abs=1e-12)
    d = negls(schedule="constant", alpha=-0.1)
    assert d.current_alpha == -0.1
    d.on_epoch_start(3, torch.nn.Identity())
    assert d.current_alpha == -0.1
    # E enters the ramp's denominator (REPO uses config.model.hyper.epochs)
    assert scheduled_alpha(49, -0.05, total_epochs=60) == pytest.approx(-0.005)
    with pytest.raises(DefenseConfigError):
        negls(schedule="linear")
    with pytest.raises(DefenseConfigError):
        negls(alpha=1.5)


def hand_loss(logits, y, alpha):
    """(1 - a)(-log p_y) + a * mean_c(-log p_c), written out per sample with math.log."""
    out = []
    for row, label in zip(logits.tolist(), y.tolist()):
        z = sum(math.exp(v) for v in row)
        nll = [-math.log(math.exp(v) / z) for v in row]
        out.append((1 - alpha) * nll[label] + alpha * sum(nll) / len(row))
    return out


def test_loss_equals_the_hand_formula_and_uses_the_current_alpha():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, N_CLASSES)
    x = torch.randn(5, 4)
    y = torch.tensor([0, 2, 1, 1, 0])
    with torch.no_grad():
        logits = model(x)
    d = negls()
    ctx = StepContext(epoch=80, step=0, n_classes=N_CLASSES,
                      generator=torch.Generator().manual_seed(0))
    for epoch, alpha in ((10, 0.0), (60, -0.012), (80, -0.05)):
        d.on_epoch_start(epoch, model)
        per_sample = hand_loss(logits, y, alpha)
        loss, logs = d.training_loss(model, x, y, ctx)
        # REPO's "sum" mode returns the batch mean
        assert loss.item() == pytest.approx(sum(per_sample) / 5, rel=1e-6)
        assert logs["label_smoothing"] == pytest.approx(alpha)
        eval_sum, eval_logits = d.eval_loss(model, x, y)
        assert eval_sum.item() == pytest.approx(sum(per_sample), rel=1e-6)
        assert torch.allclose(eval_logits, logits)
    # negative smoothing changes the loss relative to plain CE
    ce = torch.nn.functional.cross_entropy(logits, y).item()
    assert abs(loss.item() - ce) > 1e-4
    # training step reports the summed loss for the shared loop (mean * batch size)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    reported, _ = d.train_step(model, opt, x, y, ctx)
    assert reported == pytest.approx(sum(per_sample), rel=1e-6)


def test_state_round_trip():
    d = negls()
    d.on_epoch_start(60, torch.nn.Identity())
    e = negls()
    e.load_state_dict(d.state_dict())
    assert e.current_alpha == pytest.approx(-0.012)


def test_scaled_schedule_stretches_the_repo_schedule_to_short_runs():
    from atat.training.defenses.negls import scheduled_alpha
    repo = [scheduled_alpha(t, -0.05, schedule="repo", total_epochs=100) for t in range(100)]
    scaled = [scheduled_alpha(t, -0.05, schedule="scaled", total_epochs=100) for t in range(100)]
    assert scaled == repo
    short = [scheduled_alpha(t, -0.05, schedule="scaled", total_epochs=12) for t in range(12)]
    assert short[:5] == [0.0] * 5 and short[-1] == -0.05 and min(short) == -0.05
    assert any(-0.05 < a < 0 for a in short)  # the ramp is visible in 12 epochs
