"""Float32 precision control shared by PGD and AutoAttack.

Attacks and PGD run in float32 with TF32 disabled: a perturbation of 1e-5 is below TF32's
10-bit mantissa resolution and would silently vanish.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


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
def no_tf32() -> Iterator[None]:
    """Disable TF32 for matmul and cuDNN (float32 matmul precision 'highest'); restore after.

    Uses the legacy flags (``torch.backends.cuda.matmul.allow_tf32``,
    ``torch.backends.cudnn.allow_tf32``, ``torch.set_float32_matmul_precision``). PyTorch ≥ 2.9
    refuses to *read* the legacy flags once the new ``fp32_precision`` API has been used
    (RuntimeError "mix of the legacy and new APIs"); in that case all ``fp32_precision`` nodes
    are set to "ieee" and their previous strings restored on exit.
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
            b.cudnn.allow_tf32 = False
        else:
            for _, obj, _ in saved[1]:
                obj.fp32_precision = "ieee"
        yield
    finally:
        if saved[0] == "legacy":
            torch.set_float32_matmul_precision(saved[1])
            b.cuda.matmul.allow_tf32 = saved[2]
            b.cudnn.allow_tf32 = saved[3]
        else:
            for _, obj, value in saved[1]:
                obj.fp32_precision = value


def tf32_disabled() -> bool:
    """True when neither matmul nor cuDNN may use TF32 (legacy or new precision API)."""
    b = torch.backends
    try:
        return (not b.cuda.matmul.allow_tf32 and not b.cudnn.allow_tf32
                and torch.get_float32_matmul_precision() == "highest")
    except RuntimeError:  # the new fp32_precision API is in use
        return all(o.fp32_precision == "ieee" for _, o in _fp32_precision_nodes()
                   if o.fp32_precision != "none")
