"""BiDO (docs/sources.md#bido): the loss is CE_mean + λx Σ_l nHSIC(Z_l, X) − λy Σ_l nHSIC(Z_l, Y)
over the four stage outputs, its HSIC values equal the formula, its gradient reaches the first
layer (its training run through atat.training.train: tests/test_defense_registry.py)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from atat.training.defenses.base import StepContext
from atat.training.defenses.bido import BiDO
from atat.training.hsic import hsic_xz, hsic_yz
from atat.training.models import build_model

N_CLASSES = 3


def reference_nhsic(a, b, ktype_b="gaussian", sigma=5.0, eps=1e-5):
    """float64 trace(R_A R_B) written from docs/sources.md#hsic-estimator with explicit pairwise
    distances."""
    def r(x, ktype):
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        m, d = x.shape
        if ktype == "gaussian":
            k = np.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / (2 * sigma ** 2 * d))
        else:
            k = x @ x.T
        kc = k @ (np.eye(m) - 1.0 / m)
        return kc @ np.linalg.inv(kc + eps * m * np.eye(m))
    return float(np.trace(r(a, "gaussian") @ r(b, ktype_b)))


def bido(**params):
    return BiDO({"type": "bido", **params}, N_CLASSES)


def ctx():
    return StepContext(epoch=0, step=0, n_classes=N_CLASSES,
                       generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 3, 16, 16, generator=g) * 2 - 1
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    return x, y


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model("resnet18", N_CLASSES).eval()  # eval: deterministic forward


def test_defaults():
    d = bido()
    assert (d.params["lambda_x"], d.params["lambda_y"], d.params["ktype"]) == (0.05, 0.5, "linear")


def test_hsic_terms_use_the_four_stages_and_match_the_formula(model, batch):
    x, y = batch
    with torch.no_grad():
        logits, hx, hy = bido().hsic_terms(model, x, y)
        _, hidden = model.forward_hidden(x)
    assert len(hx) == len(hy) == 4
    yo = np.eye(N_CLASSES)[y.numpy()]
    for z, vx, vy in zip(hidden, hx, hy):
        assert vx.item() == pytest.approx(reference_nhsic(z.numpy(), x.numpy()), rel=3e-3)
        assert vy.item() == pytest.approx(reference_nhsic(z.numpy(), yo, "linear"), rel=3e-3)


def test_loss_is_mean_ce_plus_weighted_hsic_sums(model, batch):
    x, y = batch
    a1, a2 = 0.3, 0.7
    d = bido(lambda_x=a1, lambda_y=a2)
    with torch.no_grad():
        loss, logs = d.training_loss(model, x, y, ctx())
        logits, hidden = model.forward_hidden(x)
        ce = F.cross_entropy(logits, y, reduction="mean")
        sx = sum(hsic_xz(x, z) for z in hidden)
        sy = sum(hsic_yz(z, y, n_classes=N_CLASSES) for z in hidden)
        expected = ce + a1 * sx - a2 * sy
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-5)
        # the summed CE would be 8x larger: make sure BiDO uses the mean
        assert abs(loss.item() - (F.cross_entropy(logits, y, reduction="sum")
                                  + a1 * sx - a2 * sy).item()) > 1e-3
        assert logs["hsic_xz"] == pytest.approx(sx.item() / 4, rel=1e-5)
        # evaluation returns the total BiDO loss times the batch size (size-weighted mean)
        eval_sum, eval_logits = d.eval_loss(model, x, y)
    assert eval_sum.item() == pytest.approx(8 * expected.item(), rel=1e-5, abs=1e-4)
    assert torch.allclose(eval_logits, logits)
    # BiDO** (lambda_y = 0): only the X term remains
    with torch.no_grad():
        star, _ = bido(lambda_x=0.001, lambda_y=0.0).training_loss(model, x, y, ctx())
    assert star.item() == pytest.approx((ce + 0.001 * sx).item(), rel=1e-5)


def test_hsic_gradient_reaches_the_first_convolution(batch):
    x, y = batch
    torch.manual_seed(1)
    net = build_model("resnet18", N_CLASSES).train()
    conv1 = net.features.conv1.weight
    for p in net.parameters():  # only conv1 needs a weight gradient (keeps the test cheap)
        p.requires_grad_(p is conv1)
    _, hx, hy = bido().hsic_terms(net, x, y)
    # each HSIC term alone (no CE) sends a gradient back to the first layer
    gx, = torch.autograd.grad(sum(hx), conv1, retain_graph=True)
    gy, = torch.autograd.grad(-sum(hy), conv1)
    for g in (gx, gy):
        assert torch.isfinite(g).all() and g.abs().sum() > 0
    assert not torch.allclose(gx, gy)
