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

Both settings run the attacks without autocast: :func:`attack_precision` disables it for the
block, so a training step under the opt-in ``training.autocast: bf16`` still runs AT-AT's PGD
in float32. The opt-in training speed-ups (issue 16 §3; both change the numerics, both off by
default, which is the paper's setting) live here too: ``training.autocast`` (``none`` or
``bf16``: bfloat16 autocast over the training step, :func:`training_autocast`) and
``training.memory_format`` (``contiguous`` or ``channels_last``, :func:`memory_format`).
``make bench-gpu`` measures what each gains at the paper's shapes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

PRECISIONS = ("fp32", "tf32")
DEFAULT_PRECISION = "fp32"
#: ``training.autocast`` -> the autocast dtype (None: float32, the default)
TRAINING_AUTOCAST: dict[str, torch.dtype | None] = {"none": None, "bf16": torch.bfloat16}
#: ``training.memory_format`` -> the memory format of the model and its training inputs
MEMORY_FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


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


def _autocast_device_types() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@contextlib.contextmanager
def no_autocast() -> Iterator[None]:
    """Autocast off (CPU and CUDA) for the block, whatever the caller enabled; restored after."""
    with contextlib.ExitStack() as stack:
        for device_type in _autocast_device_types():
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def autocast_enabled() -> bool:
    """Whether autocast is on for the CPU or a CUDA device here."""
    return any(torch.is_autocast_enabled(t) for t in _autocast_device_types())


@contextlib.contextmanager
def _attack_flags(cudnn_tf32: bool) -> Iterator[None]:
    with no_autocast(), _backend_flags(cudnn_tf32=cudnn_tf32):
        yield


def attack_precision(precision: str) -> contextlib.AbstractContextManager[None]:
    """The backend flags of ``precision`` (module doc) for the duration of the block:
    ``fp32`` = :func:`no_tf32`; ``tf32`` = PyTorch's defaults (cuDNN TF32 on, matmul TF32
    off); autocast off in both. The previous flags are restored on exit, also on error."""
    return _attack_flags(cudnn_tf32=check_precision(precision, "precision") == "tf32")


def _choice(value: Any, choices: dict[str, Any], key: str, default: str) -> str:
    value = default if value is None else value
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)} ({default}: the paper's "
                         f"setting), got {value!r}")
    return str(value)


def training_autocast(device: str | torch.device, mode: str | None
                      ) -> contextlib.AbstractContextManager[Any]:
    """The training step's autocast (``training.autocast``): ``none``/None = float32 (the
    paper's setting, a no-op), ``bf16`` = bfloat16 autocast of the step's eligible ops
    (convolutions, matmuls) on ``device``; losses and optimiser states stay float32 and
    AT-AT's PGD runs without it (:func:`attack_precision`)."""
    dtype = TRAINING_AUTOCAST[_choice(mode, TRAINING_AUTOCAST, "training.autocast", "none")]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def memory_format(name: str | None) -> torch.memory_format:
    """``training.memory_format`` (None = ``contiguous``, the paper's setting)."""
    return MEMORY_FORMATS[_choice(name, MEMORY_FORMATS, "training.memory_format", "contiguous")]


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
