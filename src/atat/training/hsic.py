"""Normalised-CCA HSIC ("hsic_normalized_cca" of BiDO; docs/sources.md#hsic-estimator), the one
estimator used both by the BiDO training loss (docs/sources.md#bido) and by the HSIC measurement of
the paper's Tables 1/9.

For a batch of m samples and matrices A (m × d_A), B (m × d_B):

1. D_ij = |‖a_i‖² − 2 a_i·a_j + ‖a_j‖²|                      (squared distances)
2. Gaussian kernel K_ij = exp(−D_ij / (2 σ² d)), σ = 5, d = feature dimension of that matrix
   (the bandwidth scales with the dimension); linear kernel K = A Aᵀ.
3. Right centring only: K̃ = K H, H = I − (1/m) 11ᵀ.
4. R = K̃ (K̃ + ε m I)⁻¹, ε = 1e-5 (ordinary inverse of a non-symmetric matrix).
5. nHSIC(A, B) = Σ_ij R_A[i, j] R_B[j, i] = trace(R_A R_B).

The first argument always gets the Gaussian kernel; the second the kernel ``ktype_b``.
Inputs (m, ...) are flattened to (m, d). Computed in float32 by default (as BiDO), differentiable.

Deviation (numerically immaterial): BiDO moves the m × m kernel matrices to the CPU before
centring and inverting; here everything stays on the input's device. The squared-distance
matrix uses the expanded form of step 1 (as BiDO), whose float32 accuracy needs full-precision
matmuls: TF32 and autocast are switched off inside this module's kernel computations.
"""

from __future__ import annotations

import torch
from torch import Tensor

from atat.base.precision import no_autocast, no_tf32

SIGMA = 5.0
EPS = 1e-5
KERNELS = ("gaussian", "linear")


def flatten(a: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """(m, ...) → (m, d) in ``dtype``."""
    if a.dim() < 1:
        raise ValueError("HSIC input needs a batch dimension")
    return a.reshape(a.shape[0], -1).to(dtype)


def distmat(a: Tensor) -> Tensor:
    """D_ij = |‖a_i‖² − 2 a_i·a_j + ‖a_j‖²| for a (m, d) matrix."""
    r = (a * a).sum(1, keepdim=True)
    with no_tf32():
        g = a @ a.T
    return (r - 2 * g + r.T).abs()


def gaussian_kernel(a: Tensor, sigma: float = SIGMA) -> Tensor:
    """K_ij = exp(−D_ij / (2 σ² d)), d = a.shape[1] (bandwidth scaled by the dimension)."""
    return torch.exp(-distmat(a) / (2.0 * sigma * sigma * a.shape[1]))


def linear_kernel(a: Tensor) -> Tensor:
    with no_tf32():
        return a @ a.T


def kernel(a: Tensor, ktype: str = "gaussian", sigma: float = SIGMA) -> Tensor:
    if ktype == "gaussian":
        return gaussian_kernel(a, sigma)
    if ktype == "linear":
        return linear_kernel(a)
    raise ValueError(f"unknown kernel '{ktype}' (known: {KERNELS})")


def centred_kernel(a: Tensor, ktype: str = "gaussian", sigma: float = SIGMA) -> Tensor:
    """K̃ = K H with H = I − 11ᵀ/m (right centring only, as BiDO)."""
    k = kernel(a, ktype, sigma)
    m = k.shape[0]
    h = torch.eye(m, dtype=k.dtype, device=k.device) - 1.0 / m
    with no_tf32():
        return k @ h


def normalized_kernel(a: Tensor, ktype: str = "gaussian", *, sigma: float = SIGMA,
                      eps: float = EPS, dtype: torch.dtype = torch.float32) -> Tensor:
    """R = K̃ (K̃ + ε m I)⁻¹ of the flattened batch ``a`` (step 4)."""
    with no_autocast():  # the kernel maths in ``dtype`` even inside an autocast region
        a = flatten(a, dtype)
        kc = centred_kernel(a, ktype, sigma)
        m = kc.shape[0]
        eye = torch.eye(m, dtype=kc.dtype, device=kc.device)
        with no_tf32():
            return kc @ torch.linalg.inv(kc + eps * m * eye)


def nhsic_from_normalized(r_a: Tensor, r_b: Tensor) -> Tensor:
    """trace(R_A R_B) = Σ_ij R_A[i, j] R_B[j, i] (step 5)."""
    return (r_a * r_b.T).sum()


def nhsic(a: Tensor, b: Tensor, *, ktype_b: str = "gaussian", sigma: float = SIGMA,
          eps: float = EPS, dtype: torch.dtype = torch.float32) -> Tensor:
    """Normalised-CCA HSIC of docs/sources.md#hsic-estimator: Gaussian kernel on ``a``, kernel
    ``ktype_b`` on ``b``. Returns a 0-dim tensor of ``dtype`` (float32 by default, as BiDO) with
    gradients to both inputs."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"batch sizes differ: {a.shape[0]} vs {b.shape[0]}")
    r_a = normalized_kernel(a, "gaussian", sigma=sigma, eps=eps, dtype=dtype)
    r_b = normalized_kernel(b, ktype_b, sigma=sigma, eps=eps, dtype=dtype)
    return nhsic_from_normalized(r_a, r_b)


def one_hot(y: Tensor, n_classes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.nn.functional.one_hot(y.long(), n_classes).to(dtype)


def hsic_xz(x: Tensor, z: Tensor, **kw) -> Tensor:
    """HSIC(X, Z_l) = nHSIC(Z_l, X): Gaussian kernels on both (docs/sources.md#hsic-estimator)."""
    return nhsic(z, x, ktype_b="gaussian", **kw)


def hsic_yz(z: Tensor, y_onehot: Tensor, *, ktype: str = "linear",
            n_classes: int | None = None, **kw) -> Tensor:
    """HSIC(Y, Z_l) = nHSIC(Z_l, Y): Gaussian on Z, ``ktype`` (default linear) on the one-hot
    labels. Integer labels of shape (m,) are accepted when ``n_classes`` is given."""
    if y_onehot.dim() == 1:
        if n_classes is None:
            raise ValueError("integer labels need n_classes (or pass one-hot labels)")
        y_onehot = one_hot(y_onehot, n_classes)
    return nhsic(z, y_onehot, ktype_b=ktype, **kw)


__all__ = ["EPS", "KERNELS", "SIGMA", "centred_kernel", "distmat", "gaussian_kernel", "hsic_xz",
           "hsic_yz", "kernel", "linear_kernel", "nhsic", "nhsic_from_normalized",
           "normalized_kernel", "one_hot"]
