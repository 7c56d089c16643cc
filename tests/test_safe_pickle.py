"""Tests for atat.inversion.safe_pickle (docs/sources.md#stylegan2-pickles)."""

from __future__ import annotations

import builtins
import collections
import io
import os
import pickle
import subprocess

import numpy as np
import pytest
import torch

from atat.inversion import safe_pickle as sp
from atat.inversion.safe_pickle import (
    EasyDict,
    PersistentRecord,
    SafeUnpickler,
    UnsafePickleError,
    load_stylegan_pickle,
    safe_load,
    save_stylegan_pickle,
)
from atat.inversion.stylegan2 import Generator

SMALL = dict(z_dim=16, c_dim=0, w_dim=16, img_resolution=16, img_channels=3,
             mapping_kwargs=dict(num_layers=2),
             synthesis_kwargs=dict(channel_base=128, channel_max=16, conv_clamp=256))


def _small_generator(seed: int = 0) -> Generator:
    torch.manual_seed(seed)
    G = Generator(**SMALL)
    with torch.no_grad():  # non-zero noise strengths so const noise matters
        for name, p in G.named_parameters():
            if name.endswith("noise_strength"):
                p.fill_(0.1)
    return G.eval().requires_grad_(False)


def _malicious_src(sentinel) -> str:
    return (f"import pathlib\npathlib.Path({str(sentinel)!r}).write_text('pwned')\n"
            "class Generator:\n    pass\n")


class _RecordingUnpickler(SafeUnpickler):
    def __init__(self, f, seen):
        super().__init__(f)
        self.seen = seen

    def find_class(self, module, name):
        self.seen.add(f"{module}.{name}")
        return super().find_class(module, name)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_nvidia_layout_pickle_loads_without_executing_module_src(tmp_path, protocol):
    sentinel = tmp_path / "module_src_was_executed"
    G = _small_generator()
    path = tmp_path / "net.pkl"
    save_stylegan_pickle(path, G, module_src=_malicious_src(sentinel), protocol=protocol,
                         training_set_kwargs=dict(resolution=16, use_labels=False))

    # exactly the globals real StyleGAN2-ADA pickles contain are used
    # (docs/sources.md#stylegan2-pickles)
    seen: set[str] = set()
    data = _RecordingUnpickler(io.BytesIO(path.read_bytes()), seen).load()
    assert "torch_utils.persistence._reconstruct_persistent_obj" in seen
    assert "dnnlib.util.EasyDict" in seen
    assert "torch._utils._rebuild_tensor_v2" in seen
    assert "torch.storage._load_from_bytes" in seen
    spec_globals = {
        "torch_utils.persistence._reconstruct_persistent_obj", "collections.OrderedDict",
        "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
        "torch.storage._load_from_bytes", "numpy.core.multiarray.scalar",
        "numpy._core.multiarray.scalar", "numpy.dtype", "dnnlib.util.EasyDict",
        "builtins.set", "__builtin__.set", "_codecs.encode"}
    assert seen <= spec_globals, seen - spec_globals

    assert set(data) == {"G", "D", "G_ema", "augment_pipe", "training_set_kwargs"}
    rec = data["G_ema"]
    assert isinstance(rec, PersistentRecord)
    assert rec.class_name == "Generator" and rec.version == 6
    assert "pathlib" in rec.module_src  # kept as a string ...
    assert not sentinel.exists()        # ... and never executed
    assert isinstance(rec.state["_init_kwargs"], EasyDict)
    assert rec.state["_init_kwargs"].mapping_kwargs.num_layers == 2
    assert isinstance(data["training_set_kwargs"], EasyDict)
    layer = rec.children["synthesis"].children["b8"].children["conv0"]
    assert layer.class_name == "SynthesisLayer"
    assert isinstance(layer.state["act_gain"], np.floating)

    loaded = load_stylegan_pickle(path)
    assert not sentinel.exists()
    assert loaded["class_name"] == "Generator"
    kw = loaded["init_kwargs"]
    assert kw == {k: (dict(v) if isinstance(v, dict) else v) for k, v in SMALL.items()}
    assert type(kw["mapping_kwargs"]) is dict  # EasyDict flattened to plain dict
    ref = G.state_dict()
    sd = loaded["state_dict"]
    assert list(sd) == list(ref)
    for k in ref:
        assert sd[k].shape == ref[k].shape and torch.equal(sd[k], ref[k]), k

    G2 = Generator.from_pickle(path)
    assert not G2.training
    z = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))
    img = G2(z, truncation_psi=0.7, noise_mode="const")
    assert img.shape == (3, 3, 16, 16)
    torch.testing.assert_close(img, G(z, truncation_psi=0.7, noise_mode="const"), rtol=0, atol=0)
    assert not sentinel.exists()


def test_positional_init_args_are_mapped_to_names():
    rec = PersistentRecord(class_name="Generator", state={
        "_init_args": (8, 0, 8, 8, 3),
        "_init_kwargs": EasyDict(synthesis_kwargs=EasyDict(channel_base=64))})
    kw = sp.generator_init_kwargs(rec)
    assert kw["z_dim"] == 8 and kw["img_resolution"] == 8 and kw["img_channels"] == 3
    assert kw["synthesis_kwargs"] == {"channel_base": 64} and kw["mapping_kwargs"] == {}


def test_non_persistent_buffers_and_none_entries_are_skipped():
    child = PersistentRecord("FullyConnectedLayer", state={
        "_parameters": collections.OrderedDict(weight=torch.ones(2, 2), bias=None),
        "_buffers": collections.OrderedDict(tmp=torch.zeros(1)),
        "_non_persistent_buffers_set": {"tmp"}, "_modules": collections.OrderedDict()})
    root = PersistentRecord("MappingNetwork", state={
        "_parameters": {}, "_buffers": collections.OrderedDict(w_avg=torch.zeros(2)),
        "_modules": collections.OrderedDict(fc0=child, embed=None)})
    assert list(sp.flatten_state_dict(root)) == ["w_avg", "fc0.weight"]


# ---------------------------------------------------------------------------------------
# Refusals: the payload must never run
# ---------------------------------------------------------------------------------------

class _Reduce:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def _payloads(sentinel):
    s = str(sentinel)
    return {
        "os.system": _Reduce(os.system, (f"touch {s}",)),
        "builtins.eval": _Reduce(builtins.eval, (f"open({s!r}, 'w').close()",)),
        "builtins.exec": _Reduce(builtins.exec, (f"open({s!r}, 'w').close()",)),
        "subprocess.call": _Reduce(subprocess.call, (["touch", s],)),
        "subprocess.Popen": _Reduce(subprocess.Popen, (["touch", s],)),
        "builtins.open": _Reduce(builtins.open, (s, "w")),
        "builtins.getattr": _Reduce(getattr, ("abc", "upper")),
    }


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "builtins.exec",
                                  "subprocess.call", "subprocess.Popen", "builtins.open",
                                  "builtins.getattr"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_unexpected_globals_are_refused_and_never_run(tmp_path, name, protocol):
    sentinel = tmp_path / "pwned"
    payload = _payloads(sentinel)[name]
    blob = pickle.dumps({"G_ema": payload}, protocol=protocol)
    path = tmp_path / "evil.pkl"
    path.write_bytes(blob)
    func = payload.func
    qual = f"{func.__module__}.{func.__qualname__}"
    with pytest.raises(UnsafePickleError) as exc:
        load_stylegan_pickle(path)
    assert qual in str(exc.value)  # e.g. 'posix.system', 'builtins.eval'
    with pytest.raises(UnsafePickleError):
        safe_load(blob)
    assert not sentinel.exists()


def test_payload_nested_inside_persistent_state_is_refused(tmp_path):
    sentinel = tmp_path / "pwned"
    G = _small_generator()
    path = tmp_path / "net.pkl"
    save_stylegan_pickle(path, G)
    ok = load_stylegan_pickle(path)  # sanity: the clean file loads
    assert "mapping.fc0.weight" in ok["state_dict"]

    proxy = sp._module_record(G, "", G.init_kwargs)
    proxy.meta["state"]["_modules"]["mapping"].meta["state"]["evil"] = _Reduce(
        os.system, (f"touch {sentinel}",))
    buf = io.BytesIO()
    sp._PersistencePickler(buf, protocol=4).dump({"G_ema": proxy})
    with pytest.raises(UnsafePickleError, match="system"):
        safe_load(buf.getvalue())
    assert not sentinel.exists()


def test_malicious_storage_bytes_are_refused(tmp_path):
    sentinel = tmp_path / "pwned"
    inner = pickle.dumps(_Reduce(os.system, (f"touch {sentinel}",)), protocol=2)
    blob = pickle.dumps(_Reduce(torch.storage._load_from_bytes, (inner,)), protocol=2)
    with pytest.raises(UnsafePickleError):
        safe_load(blob)
    assert not sentinel.exists()


def test_backward_hooks_and_object_dtypes_are_refused():
    with pytest.raises(UnsafePickleError):
        sp._rebuild_tensor_v2(torch.zeros(2).untyped_storage(), 0, (2,), (1,), False,
                              collections.OrderedDict(h=print))
    with pytest.raises(UnsafePickleError):
        sp._np_dtype("O")
    with pytest.raises(UnsafePickleError):
        sp._codecs_encode("x", "rot13")
    with pytest.raises(UnsafePickleError):
        sp._reconstruct_persistent_obj({"type": "function", "state": {}})


def test_plain_tensors_and_numpy_scalars_roundtrip():
    obj = {"t": torch.arange(6.0).reshape(2, 3)[:, 1:], "p": torch.nn.Parameter(torch.ones(2)),
           "f": np.float64(1.5), "i": np.int64(3), "s": {1, 2},
           "od": collections.OrderedDict(a=1), "a": np.arange(4, dtype=np.float32)}
    for proto in (2, 3, 4, 5):
        out = safe_load(pickle.dumps(obj, protocol=proto))
        assert torch.equal(out["t"], obj["t"])
        assert isinstance(out["p"], torch.nn.Parameter) and torch.equal(out["p"], obj["p"])
        assert out["f"] == 1.5 and out["i"] == 3 and out["s"] == {1, 2}
        assert out["od"] == obj["od"]
        np.testing.assert_array_equal(out["a"], obj["a"])


def test_the_same_weights_give_the_same_bytes(tmp_path):
    """torch names a pickled storage by its memory address; the writer replaces it by a
    counter, so two copies of one generator (other storages, other addresses) write identical
    files that load to equal tensors, as a re-run or resumed prior must."""
    import copy

    G = _small_generator()
    twin = copy.deepcopy(G)
    assert G.mapping.fc0.weight.data_ptr() != twin.mapping.fc0.weight.data_ptr()
    a, b = tmp_path / "a.pkl", tmp_path / "b.pkl"
    save_stylegan_pickle(a, G)
    save_stylegan_pickle(b, twin)
    assert a.read_bytes() == b.read_bytes()
    sa, sb = load_stylegan_pickle(a)["state_dict"], load_stylegan_pickle(b)["state_dict"]
    assert sa.keys() == G.state_dict().keys()
    for k, v in G.state_dict().items():
        assert torch.equal(sa[k], v) and torch.equal(sb[k], v), k
