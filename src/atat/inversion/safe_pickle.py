"""Restricted loader for NVIDIA StyleGAN2-ADA network pickles (``ffhq.pkl``, ``afhqdog.pkl``).

docs/sources.md#stylegan2-pickles.

The official pickles store every network as a ``torch_utils.persistence`` object: the
pickle calls the global ``torch_utils.persistence._reconstruct_persistent_obj`` with a
single ``meta`` dict ``{type: 'class', version, module_src, class_name, state}``.  The
original loader *executes* ``module_src`` (the full source of ``training/networks.py``).
This module never does that and never imports NVIDIA code:

* ``_reconstruct_persistent_obj`` is mapped to a factory returning an inert
  :class:`PersistentRecord` (class name, version, ``module_src`` kept as a plain string,
  ``state`` = the module's ``__dict__`` with ``_parameters``/``_buffers``/``_modules``,
  ``_init_args``/``_init_kwargs`` and plain attributes);
* tensors are rebuilt only through wrapped, validated versions of
  ``torch._utils._rebuild_tensor_v2`` / ``_rebuild_parameter``; storages through
  ``torch.load(..., weights_only=True)`` (itself a restricted unpickler);
* ``dnnlib.util.EasyDict`` becomes :class:`EasyDict` (a plain ``dict`` subclass);
* a handful of inert builtins (``OrderedDict``, ``set``, numpy scalars/dtypes,
  ``_codecs.encode`` with latin-1) are allowed;
* **every other global raises** :class:`UnsafePickleError` naming it, before anything
  from the file is called.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import io
import os
import pickle
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "UnsafePickleError",
    "EasyDict",
    "PersistentRecord",
    "SafeUnpickler",
    "safe_load",
    "flatten_state_dict",
    "generator_init_kwargs",
    "load_stylegan_pickle",
    "ALLOWED_GLOBALS",
    "save_stylegan_pickle",
]


class UnsafePickleError(pickle.UnpicklingError):
    """Raised when a pickle references a global that is not on the allow-list."""


class EasyDict(dict):
    """Inert stand-in for ``dnnlib.util.EasyDict`` (attribute access to dict keys)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        del self[name]


@dataclass
class PersistentRecord:
    """Inert record of a ``torch_utils.persistence`` object (never instantiated/executed)."""

    class_name: str
    version: Any = None
    type: str = "class"
    module_src: str = field(default="", repr=False)  # kept only as a string; never exec'd
    state: dict = field(default_factory=dict, repr=False)

    # -- convenience views on the stored nn.Module __dict__ ------------------------------
    @property
    def init_args(self) -> tuple:
        return tuple(self.state.get("_init_args", ()) or ())

    @property
    def init_kwargs(self) -> dict:
        return _plain(self.state.get("_init_kwargs", {}) or {})

    @property
    def parameters(self) -> dict:
        return dict(self.state.get("_parameters", {}) or {})

    @property
    def buffers(self) -> dict:
        return dict(self.state.get("_buffers", {}) or {})

    @property
    def children(self) -> dict:
        return dict(self.state.get("_modules", {}) or {})

    def attr(self, name: str, default: Any = None) -> Any:
        return self.state.get(name, default)


# ---------------------------------------------------------------------------------------
# Allow-listed callables (all wrappers validate their arguments)
# ---------------------------------------------------------------------------------------

def _reconstruct_persistent_obj(meta: Any) -> PersistentRecord:
    if not isinstance(meta, dict):
        raise UnsafePickleError("_reconstruct_persistent_obj: meta is not a dict")
    if meta.get("type", "class") != "class":
        raise UnsafePickleError(
            f"_reconstruct_persistent_obj: unsupported persistent type {meta.get('type')!r}"
        )
    state = meta.get("state")
    if state is None:
        state = {}
    if not isinstance(state, dict):
        raise UnsafePickleError("_reconstruct_persistent_obj: state is not a dict")
    src = meta.get("module_src", "")
    return PersistentRecord(
        class_name=str(meta.get("class_name", "")),
        version=meta.get("version"),
        type="class",
        module_src=src if isinstance(src, str) else repr(src),
        state=state,
    )


def _is_storage(obj: Any) -> bool:
    return isinstance(obj, (torch.storage.TypedStorage, torch.storage.UntypedStorage))


def _load_from_bytes(b: Any):
    if not isinstance(b, (bytes, bytearray)):
        raise UnsafePickleError("torch.storage._load_from_bytes: argument is not bytes")
    try:
        obj = torch.load(io.BytesIO(bytes(b)), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's own restricted unpickler refused / corrupt bytes
        raise UnsafePickleError(
            f"torch.storage._load_from_bytes: storage payload refused by torch.load("
            f"weights_only=True): {exc}") from exc
    if not _is_storage(obj):
        raise UnsafePickleError(
            f"torch.storage._load_from_bytes produced {type(obj).__name__}, not a storage"
        )
    return obj


def _check_hooks(backward_hooks: Any, where: str) -> None:
    if backward_hooks:  # None / empty OrderedDict only
        raise UnsafePickleError(f"{where}: non-empty backward_hooks are not allowed")


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    if not _is_storage(storage):
        raise UnsafePickleError("_rebuild_tensor_v2: first argument is not a torch storage")
    _check_hooks(backward_hooks, "_rebuild_tensor_v2")
    if metadata is not None and not isinstance(metadata, dict):
        raise UnsafePickleError("_rebuild_tensor_v2: metadata is not a dict")
    return torch._utils._rebuild_tensor_v2(
        storage, storage_offset, tuple(size), tuple(stride), bool(requires_grad),
        collections.OrderedDict(), metadata or None)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    if not isinstance(data, torch.Tensor):
        raise UnsafePickleError("_rebuild_parameter: data is not a tensor")
    _check_hooks(backward_hooks, "_rebuild_parameter")
    return torch.nn.Parameter(data, bool(requires_grad))


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    if state:
        raise UnsafePickleError("_rebuild_parameter_with_state: extra state is not allowed")
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _codecs_encode(obj, encoding="utf-8", errors="strict"):
    # protocol <= 2 writes bytes as _codecs.encode(str, 'latin1')
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "iso-8859-1"):
        raise UnsafePickleError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(obj, encoding, errors)


def _np_dtype(*args, **kwargs):
    dt = np.dtype(*args, **kwargs)
    if dt.hasobject:
        raise UnsafePickleError("numpy object dtypes are not allowed")
    return dt


def _np_scalar(dtype, obj=None):
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise UnsafePickleError("numpy scalar with object/invalid dtype is not allowed")
    if not isinstance(obj, (bytes, bytearray)):
        raise UnsafePickleError("numpy scalar payload is not bytes")
    return np.frombuffer(bytes(obj), dtype=dtype, count=1)[0]


def _np_reconstruct(subtype, shape, dtype):
    if subtype is not np.ndarray:
        raise UnsafePickleError("numpy _reconstruct of a non-ndarray subtype is not allowed")
    return np.ndarray.__new__(np.ndarray, shape, _np_dtype(dtype))


def _np_frombuffer(buf, dtype, shape, order):
    # protocol-5 pickles of ndarrays
    if not isinstance(buf, (bytes, bytearray, pickle.PickleBuffer)):
        raise UnsafePickleError("numpy _frombuffer payload is not a buffer")
    dt = _np_dtype(dtype)
    arr = np.frombuffer(bytes(buf), dtype=dt)
    return arr.reshape(tuple(shape), order="F" if order == "F" else "C").copy()


_NUMPY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")

ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch_utils.persistence", "_reconstruct_persistent_obj"): _reconstruct_persistent_obj,
    ("dnnlib.util", "EasyDict"): EasyDict,
    ("dnnlib", "EasyDict"): EasyDict,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "set"): set,
    ("__builtin__", "frozenset"): frozenset,
    ("_codecs", "encode"): _codecs_encode,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch.storage", "_load_from_bytes"): _load_from_bytes,
    ("numpy", "dtype"): _np_dtype,
    ("numpy", "ndarray"): np.ndarray,
}
for _m in _NUMPY_MODULES:
    ALLOWED_GLOBALS[(_m, "scalar")] = _np_scalar
    ALLOWED_GLOBALS[(_m, "_reconstruct")] = _np_reconstruct
for _m in ("numpy.core.numeric", "numpy._core.numeric"):
    ALLOWED_GLOBALS[(_m, "_frombuffer")] = _np_frombuffer
# torch dtypes may appear inside tensor metadata in some torch versions; they are inert.
for _name in ("float32", "float16", "float64", "bfloat16", "int64", "int32", "uint8", "bool"):
    ALLOWED_GLOBALS[("torch", _name)] = getattr(torch, _name)


class SafeUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only globals in :data:`ALLOWED_GLOBALS`."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401
        # python-2 era names (protocol <= 2), e.g. __builtin__.set -> builtins.set
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to load global '{module}.{name}': not on the StyleGAN2-ADA "
                "pickle allow-list (atat.inversion.safe_pickle.ALLOWED_GLOBALS)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(f"persistent ids are not allowed (got {pid!r})")


def safe_load(fileobj_or_path, *, advice: str | None = None) -> Any:
    """Unpickle with :class:`SafeUnpickler` from a path, bytes or binary file object. A file
    that is truncated or corrupt raises :class:`atat.base.io.CheckpointError` naming it and
    ``advice`` (default: delete it and rerun the job that writes it, a download included); a
    refused global stays an :class:`UnsafePickleError`."""
    if isinstance(fileobj_or_path, (bytes, bytearray)):
        return SafeUnpickler(io.BytesIO(bytes(fileobj_or_path))).load()
    if isinstance(fileobj_or_path, (str, os.PathLike)):
        from atat.base import io as atat_io

        with open(fileobj_or_path, "rb") as f:
            try:
                return SafeUnpickler(f).load()
            except UnsafePickleError:
                raise
            except (MemoryError, RecursionError):
                raise
            except Exception as e:  # "pickle data was truncated", EOFError, bad opcodes, ...
                raise atat_io.unreadable(fileobj_or_path, e, atat_io.REBUILD_ADVICE
                                         if advice is None else advice) from None
    return SafeUnpickler(fileobj_or_path).load()


# ---------------------------------------------------------------------------------------
# Record → state dict / kwargs
# ---------------------------------------------------------------------------------------

def _plain(obj: Any) -> Any:
    """EasyDict/OrderedDict → dict, tuples/lists recursively, numpy scalars → python."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def flatten_state_dict(record: PersistentRecord, prefix: str = "") -> "collections.OrderedDict[str, torch.Tensor]":
    """Recursively collect parameters and (persistent) buffers → ``state_dict()`` names."""
    out: collections.OrderedDict[str, torch.Tensor] = collections.OrderedDict()
    _flatten(record, prefix, out)
    return out


def _flatten(rec: PersistentRecord, prefix: str, out: dict) -> None:
    if not isinstance(rec, PersistentRecord):
        raise TypeError(f"expected a PersistentRecord at '{prefix}', got {type(rec).__name__}")
    non_persistent = set(rec.state.get("_non_persistent_buffers_set", ()) or ())
    for name, t in (rec.state.get("_parameters") or {}).items():
        if t is not None:
            out[prefix + name] = t.detach()
    for name, t in (rec.state.get("_buffers") or {}).items():
        if t is not None and name not in non_persistent:
            out[prefix + name] = t.detach()
    for name, child in (rec.state.get("_modules") or {}).items():
        if child is not None:
            _flatten(child, prefix + name + ".", out)


_GEN_POSITIONAL = ("z_dim", "c_dim", "w_dim", "img_resolution", "img_channels",
                   "mapping_kwargs", "synthesis_kwargs")


def generator_init_kwargs(record: PersistentRecord) -> dict:
    """Constructor kwargs of a stored ``Generator`` (positional ``_init_args`` mapped to names).

    Falls back to the stored plain attributes (z_dim, c_dim, …) for anything missing.
    """
    kwargs: dict = {}
    for name, value in zip(_GEN_POSITIONAL, record.init_args):
        kwargs[name] = _plain(value)
    kwargs.update(record.init_kwargs)
    for name in _GEN_POSITIONAL[:5]:
        if name not in kwargs and name in record.state:
            kwargs[name] = _plain(record.state[name])
    kwargs.setdefault("mapping_kwargs", {})
    kwargs.setdefault("synthesis_kwargs", {})
    kwargs["mapping_kwargs"] = dict(kwargs["mapping_kwargs"] or {})
    kwargs["synthesis_kwargs"] = dict(kwargs["synthesis_kwargs"] or {})
    return kwargs


def load_stylegan_pickle(path, key: str = "G_ema", *, advice: str | None = None) -> dict:
    """Safely read a StyleGAN2-ADA network pickle.

    Returns ``{'init_kwargs': dict, 'state_dict': OrderedDict[str, Tensor], 'class_name': str,
    'record': PersistentRecord, 'keys': list of top-level keys}`` for network ``key``
    (``'G_ema'`` by default; ``'G'``/``'D'`` also work). A truncated or corrupt file raises
    :class:`atat.base.io.CheckpointError` naming it and ``advice`` (see :func:`safe_load`).
    """
    data = safe_load(path, advice=advice)
    if isinstance(data, PersistentRecord):  # a bare network pickle
        rec, keys = data, []
    else:
        if not isinstance(data, dict):
            raise ValueError(f"unexpected top-level object {type(data).__name__} in {path}")
        keys = list(data.keys())
        if key not in data:
            raise KeyError(f"network {key!r} not in pickle (keys: {keys})")
        rec = data[key]
    if not isinstance(rec, PersistentRecord):
        raise ValueError(f"{key!r} is not a torch_utils.persistence object")
    if rec.class_name in ("Generator",):
        init_kwargs = generator_init_kwargs(rec)
    else:
        init_kwargs = {n: _plain(v) for n, v in zip(("c_dim", "img_resolution", "img_channels"),
                                                    rec.init_args)}
        init_kwargs.update(rec.init_kwargs)
    return {
        "init_kwargs": init_kwargs,
        "state_dict": flatten_state_dict(rec),
        "class_name": rec.class_name,
        "record": rec,
        "keys": keys,
    }


# ---------------------------------------------------------------------------------------
# Writer: an nn.Module tree → a pickle in the StyleGAN2-ADA persistence layout
# (used by tests and to store the embedded demo prior in the same format).  It writes
# the global *names* ``torch_utils.persistence._reconstruct_persistent_obj`` and
# ``dnnlib.util.EasyDict`` without importing anything of NVIDIA's.
# ---------------------------------------------------------------------------------------

_WRITE_AS = {
    id(_reconstruct_persistent_obj): ("torch_utils.persistence", "_reconstruct_persistent_obj"),
    id(EasyDict): ("dnnlib.util", "EasyDict"),
}


class _PersistencePickler(pickle._Pickler):  # pure-python pickler: save_global overridable
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._storages = 0

    def reducer_override(self, obj):
        """A storage as torch pickles it (``_load_from_bytes`` of its legacy serialisation,
        the layout of NVIDIA's pickles), with its key -- torch writes the storage's memory
        address -- replaced by a counter of the same width, so the same weights give the same
        bytes in every process (a re-run or resumed prior is byte-identical, not only equal)."""
        if not isinstance(obj, torch.storage.TypedStorage):
            return NotImplemented
        fn, (blob,) = obj.__reduce__()
        key = str(obj._untyped_storage._cdata).encode("ascii")
        self._storages += 1
        stable = str(self._storages).zfill(len(key)).encode("ascii")
        if len(stable) != len(key) or blob.count(key) < 2:
            return fn, (blob,)  # an unexpected layout: torch's own bytes, still loadable
        return fn, (blob.replace(key, stable, 2),)  # the object record and the key list

    def save_global(self, obj, name=None):
        spec = _WRITE_AS.get(id(obj))
        if spec is None:
            return super().save_global(obj, name)
        module, qualname = spec
        if self.proto >= 4:
            self.save(module)
            self.save(qualname)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{module}\n{qualname}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)


_PersistencePickler.dispatch[types.FunctionType] = _PersistencePickler.save_global


class _PersistentProxy:
    def __init__(self, meta: dict):
        self.meta = meta

    def __reduce__(self):
        return (_reconstruct_persistent_obj, (self.meta,))


def _to_easydict(obj: Any) -> Any:
    if isinstance(obj, dict):
        return EasyDict({k: _to_easydict(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [_to_easydict(v) for v in obj]
    return obj


_PLAIN_TYPES = (int, float, str, bool, type(None))


def _module_record(module: torch.nn.Module, module_src: str, init_kwargs: dict | None,
                   version: int = 6) -> _PersistentProxy:
    state: dict = {
        "training": False,
        "_parameters": collections.OrderedDict(
            (n, None if p is None else torch.nn.Parameter(p.detach().cpu().clone(),
                                                          requires_grad=False))
            for n, p in module._parameters.items()),
        "_buffers": collections.OrderedDict(
            (n, None if b is None else b.detach().cpu().clone()) for n, b in module._buffers.items()),
        "_non_persistent_buffers_set": set(module._non_persistent_buffers_set),
        "_backward_hooks": collections.OrderedDict(),
        "_forward_hooks": collections.OrderedDict(),
        "_forward_pre_hooks": collections.OrderedDict(),
        "_state_dict_hooks": collections.OrderedDict(),
        "_load_state_dict_pre_hooks": collections.OrderedDict(),
        "_modules": collections.OrderedDict(
            (n, None if c is None else _module_record(c, module_src, None, version))
            for n, c in module._modules.items()),
        "_init_args": (),
        "_init_kwargs": _to_easydict(dict(init_kwargs or {})),
    }
    for k, v in module.__dict__.items():
        if k.startswith("_") or k in state:
            continue
        if isinstance(v, _PLAIN_TYPES) or (isinstance(v, (tuple, list))
                                          and all(isinstance(e, _PLAIN_TYPES) for e in v)):
            state[k] = v
    if "activation" in state and type(module).__name__ == "SynthesisLayer":
        state["act_gain"] = np.float64(np.sqrt(2) if state["activation"] == "lrelu" else 1.0)
    meta = dict(type="class", version=version, module_src=module_src,
                class_name=type(module).__name__, state=state)
    return _PersistentProxy(meta)


def save_stylegan_pickle(path, G_ema: torch.nn.Module, G: torch.nn.Module | None = None,
                         D: torch.nn.Module | None = None, module_src: str = "",
                         training_set_kwargs: dict | None = None, protocol: int = 4) -> None:
    """Write ``{'G', 'D', 'G_ema', 'augment_pipe', 'training_set_kwargs'}`` in the layout of
    NVIDIA's network pickles (docs/sources.md#stylegan2-pickles).  ``G_ema.init_kwargs`` (if
    present) is stored as the Generator's ``_init_kwargs``.  ``module_src`` is stored verbatim as a
    string."""
    init_kwargs = getattr(G_ema, "init_kwargs", None)
    data = {
        "G": _module_record(G if G is not None else G_ema, module_src, init_kwargs),
        "D": None if D is None else _module_record(D, module_src, getattr(D, "init_kwargs", None)),
        "G_ema": _module_record(G_ema, module_src, init_kwargs),
        "augment_pipe": None,
        "training_set_kwargs": _to_easydict(training_set_kwargs) if training_set_kwargs else None,
    }
    buf = io.BytesIO()
    _PersistencePickler(buf, protocol=protocol).dump(data)
    Path(path).write_bytes(buf.getvalue())
