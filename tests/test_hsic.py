"""atat.training.hsic: the normalised-CCA HSIC of docs/sources.md#hsic-estimator against a float64 NumPy
implementation written directly from the formula, flattening, argument conventions, dependence
ordering, gradients."""

import numpy as np
import pytest
import torch

from atat.training.hsic import hsic_xz, hsic_yz, nhsic, one_hot


def reference_nhsic(a, b, ktype_b="gaussian", sigma=5.0, eps=1e-5):
    """trace(R_A R_B), R = K H (K H + eps m I)^-1; Gaussian K = exp(-|a_i - a_j|^2 / (2 s^2 d))
    (explicit pairwise differences, not the expanded form used by the implementation)."""
    def r(x, ktype):
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        m, d = x.shape
        if ktype == "gaussian":
            sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
            k = np.exp(-sq / (2 * sigma ** 2 * d))
        else:
            k = x @ x.T
        h = np.eye(m) - np.ones((m, m)) / m
        kc = k @ h
        return kc @ np.linalg.inv(kc + eps * m * np.eye(m))
    return float(np.trace(r(a, "gaussian") @ r(b, ktype_b)))


@pytest.mark.parametrize("m,da,db", [(16, 20, 7), (32, 300, 48), (24, 5, 3 * 8 * 8)])
def test_nhsic_matches_the_formula_gaussian(m, da, db):
    rng = np.random.default_rng(m)
    a, b = rng.normal(size=(m, da)), rng.normal(size=(m, db)) * 2
    ref = reference_nhsic(a, b)
    got64 = nhsic(torch.tensor(a), torch.tensor(b), dtype=torch.float64)
    assert got64.dtype == torch.float64
    assert got64.item() == pytest.approx(ref, abs=1e-5)
    got32 = nhsic(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32))
    assert got32.dtype == torch.float32
    assert got32.item() == pytest.approx(ref, rel=3e-3)  # float32 of an ill-conditioned inverse


def test_nhsic_matches_the_formula_linear_on_one_hot():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(32, 40))
    y = rng.integers(0, 5, 32)
    yo = np.eye(5)[y]
    ref = reference_nhsic(z, yo, "linear")
    got = nhsic(torch.tensor(z), torch.tensor(yo), ktype_b="linear", dtype=torch.float64)
    assert got.item() == pytest.approx(ref, abs=1e-5)
    # hsic_yz: Gaussian on Z, linear on Y by default; integer labels accepted with n_classes
    assert hsic_yz(torch.tensor(z), torch.tensor(yo), dtype=torch.float64).item() == \
        pytest.approx(ref, abs=1e-5)
    assert hsic_yz(torch.tensor(z), torch.tensor(y), n_classes=5, dtype=torch.float64).item() == \
        pytest.approx(ref, abs=1e-5)
    # the Gaussian kernel on Y gives a different value
    assert hsic_yz(torch.tensor(z), torch.tensor(yo), ktype="gaussian",
                   dtype=torch.float64).item() != pytest.approx(ref, abs=1e-3)


def test_flattening_and_argument_order():
    torch.manual_seed(0)
    x = torch.randn(12, 3, 4, 4)
    z = torch.randn(12, 8, 2, 2) + x.reshape(12, -1)[:, :32].reshape(12, 8, 2, 2)
    flat = nhsic(z.reshape(12, -1), x.reshape(12, -1))
    assert nhsic(z, x).item() == pytest.approx(flat.item(), rel=1e-6)
    ref = reference_nhsic(z.numpy(), x.numpy())
    assert hsic_xz(x, z, dtype=torch.float64).item() == pytest.approx(ref, abs=1e-5)
    # the first argument gets the Gaussian kernel: swapping arguments with a linear second
    # kernel changes the value
    y = one_hot(torch.arange(12) % 3, 3)
    assert nhsic(z, y, ktype_b="linear").item() != pytest.approx(
        nhsic(y, z.reshape(12, -1), ktype_b="linear").item(), rel=1e-3)


def test_dependent_features_score_higher_than_independent_noise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 8, generator=g)
    w = torch.randn(8, 8, generator=g)
    noise = torch.randn(128, 8, generator=g)
    dependent, independent = nhsic(x @ w, x).item(), nhsic(noise, x).item()
    assert dependent > independent + 5


def test_nhsic_is_differentiable():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 4, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda t: nhsic(t, b, dtype=torch.float64, eps=1e-2), (a,), eps=1e-6, atol=1e-5)
    a32 = a.detach().float().requires_grad_()
    nhsic(a32, b.float()).backward()
    assert a32.grad is not None and torch.isfinite(a32.grad).all() and a32.grad.abs().sum() > 0


def test_batch_mismatch_and_unknown_kernel_raise():
    with pytest.raises(ValueError, match="batch"):
        nhsic(torch.randn(4, 2), torch.randn(5, 2))
    with pytest.raises(ValueError, match="kernel"):
        nhsic(torch.randn(4, 2), torch.randn(4, 2), ktype_b="IMQ")
    with pytest.raises(ValueError, match="n_classes"):
        hsic_yz(torch.randn(4, 2), torch.tensor([0, 1, 0, 1]))


def test_nhsic_is_float32_exact_inside_a_bf16_training_autocast():
    """BiDO's HSIC term under the opt-in training.autocast: bf16 keeps its float32 maths."""
    from atat.training.hsic import nhsic
    from atat.base.precision import training_autocast

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 8, generator=g), torch.randn(16, 5, generator=g)
    ref = nhsic(a, b)
    with training_autocast("cpu", "bf16"):
        got = nhsic(a, b)
    assert got.dtype == torch.float32 and torch.equal(got, ref)
