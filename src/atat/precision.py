"""Float32 precision control shared by PGD and AutoAttack.

Two settings (config ``autoattack.precision``):

* ``fp32`` (default, the correct measurement): float32 with TF32 disabled for cuDNN
  convolutions and CUDA matmuls. A perturbation of 1e-5 on an input near 0.5 is below TF32's
  input rounding (10-bit mantissa: ulp(0.5) ≈ 4.9e-4) and would otherwise silently vanish.
* ``tf32``: PyTorch's default backend flags, under which the authors' code (REPO) ran: cuDNN
  convolutions may use TF32 (``torch.backends.cudnn.allow_tf32 = True``), CUDA float32 matmuls
  do not (``torch.backends.cuda.matmul.allow_tf32 = False``, float32 matmul precision
  "highest"). On GPUs with TF32 (compute capability ≥ 8: A6000, A100, H100) the paper's
  ε = 1e-5 (and partly 0.0005) perturbations are then mostly rounded away inside the
  convolutions. TF32 exists only on CUDA: on CPU (and older GPUs) both settings compute the
  same numbers (:func:`tf32_active` says which case a device is).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

PRECISIONS = ("fp32", "tf32")
DEFAULT_PRECISION = "fp32"


def check_precision(value: Any, key: str = "autoattack.precision") -> str:
    """``value`` if it is one of :data:`PRECISIONS`, else a ValueError naming ``key``."""
    if value not in PRECISIONS:
        raise ValueError(f"{key} must be one of {', '.join(PRECISIONS)} (fp32: TF32 off, the "
                         f"correct measurement; tf32: PyTorch's defaults as the authors' code "
                         f"ran), got {value!r}")
    return str(value)


def _fp32_precision_nodes() -> list[tuple[str, Any]]:
    b = torch.backends
    nodes: list[tuple[str, Any]] = [("backends", b)]
    for name, obj in (("cuda.matmul", getattr(getattr(b, "cuda", None), "matmul", None)),
                      ("cudnn", getattr(b, "cudnn", None)),
                      ("cudnn.conv", getattr(getattr(b, "cudnn", None), "conv", None)),
                      ("cudnn.rnn", getattr(getattr(b, "cudnn", None), "rnn", None)),
                      ("mkldnn", getattr(b, "mkldnn", None)),
                      ("mkldnn.matmul", getattr(getattr(b, "mkldnn", None), "matmul", None)),
                      ("mkldnn.conv", getattr(getattr(b, "mkldnn", None), "conv", None)),
                      ("mkldnn.rnn", getattr(getattr(b, "mkldnn", None), "rnn", None))):
        if obj is not None:
            nodes.append((name, obj))
    return [(n, o) for n, o in nodes if hasattr(o, "fp32_precision")]


@contextlib.contextmanager
def _backend_flags(cudnn_tf32: bool) -> Iterator[None]:
    """CUDA float32 matmuls without TF32; cuDNN with TF32 iff ``cudnn_tf32``; restore after.

    Uses the legacy flags (``torch.backends.cuda.matmul.allow_tf32``,
    ``torch.backends.cudnn.allow_tf32``, ``torch.set_float32_matmul_precision``). PyTorch ≥ 2.9
    refuses to *read* the legacy flags once the new ``fp32_precision`` API has been used
    (RuntimeError "mix of the legacy and new APIs"); in that case every ``fp32_precision`` node
    is set to "ieee" (the cuDNN conv/rnn nodes to "tf32" when ``cudnn_tf32``) and their previous
    strings restored on exit.
    """
    b = torch.backends
    try:
        saved: tuple[Any, ...] = ("legacy", torch.get_float32_matmul_precision(),
                                  b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32)
    except RuntimeError:
        saved = ("new", [(n, o, o.fp32_precision) for n, o in _fp32_precision_nodes()])
    try:
        if saved[0] == "legacy":
            torch.set_float32_matmul_precision("highest")
            b.cuda.matmul.allow_tf32 = False
            b.cudnn.allow_tf32 = bool(cudnn_tf32)
        else:
            for name, obj, _ in saved[1]:
                tf32 = cudnn_tf32 and name in ("cudnn.conv", "cudnn.rnn")
                obj.fp32_precision = "tf32" if tf32 else "ieee"
        yield
    finally:
        if saved[0] == "legacy":
            torch.set_float32_matmul_precision(saved[1])
            b.cuda.matmul.allow_tf32 = saved[2]
            b.cudnn.allow_tf32 = saved[3]
        else:
            for _, obj, value in saved[1]:
                obj.fp32_precision = value


def no_tf32() -> contextlib.AbstractContextManager[None]:
    """Disable TF32 for matmul and cuDNN (float32 matmul precision 'highest'); restore after
    (see :func:`_backend_flags` for the legacy/new PyTorch precision APIs)."""
    return _backend_flags(cudnn_tf32=False)


def attack_precision(precision: str) -> contextlib.AbstractContextManager[None]:
    """The backend flags of ``precision`` (module doc) for the duration of the block:
    ``fp32`` = :func:`no_tf32`; ``tf32`` = PyTorch's defaults (cuDNN TF32 on, matmul TF32
    off). The previous flags are restored on exit, also on error."""
    return _backend_flags(cudnn_tf32=check_precision(precision, "precision") == "tf32")


def tf32_disabled() -> bool:
    """True when neither matmul nor cuDNN may use TF32 (legacy or new precision API)."""
    b = torch.backends
    try:
        return (not b.cuda.matmul.allow_tf32 and not b.cudnn.allow_tf32
                and torch.get_float32_matmul_precision() == "highest")
    except RuntimeError:  # the new fp32_precision API is in use
        return all(o.fp32_precision == "ieee" for _, o in _fp32_precision_nodes()
                   if o.fp32_precision != "none")


def tf32_active(precision: str, device: str | torch.device) -> bool:
    """Whether ``precision`` actually changes the arithmetic on ``device``: only ``tf32`` on
    a CUDA device with TF32 hardware (compute capability ≥ 8); on CPU it is a no-op."""
    device = torch.device(device)
    if check_precision(precision, "precision") != "tf32" or device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8
