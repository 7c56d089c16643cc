"""HSIC measurement of a trained model (docs/sources.md#hsic-measurement) and the HSIC tables built
from it."""

import numpy as np
import pandas as pd
import pytest
import torch

from atat.base import io
from atat.data.loading import make_loader
from atat.training.hsic import hsic_xz, hsic_yz
from atat.measures.hsic_measure import measure_hsic
from atat.training.models import build_model
from atat.analysis.tables import hsic_table

N_CLASSES = 4


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, make_synthfaces):
    return str(make_synthfaces(tmp_path_factory.mktemp("synth") / "ds",
                               n_private_identities=N_CLASSES, n_public_identities=2,
                               images_per_identity=12, public_images_per_identity=2,
                               resolution=32, seed=5))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """A checkpoint in the format of atat.training.train.train (random ResNet-18; BN stats perturbed
    so eval mode is not the identity)."""
    torch.manual_seed(0)
    model = build_model("resnet18", N_CLASSES)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    io.torch_save({"format_version": 1, "model_id": "synth/resnet18/nodef/seed0",
                   "architecture": "resnet18", "n_classes": N_CLASSES, "resolution": 32,
                   "defense": {"type": "nodef"}, "state_dict": model.state_dict(),
                   "defense_state": {}, "best_epoch": 0}, path)
    return path


def test_layer_means_are_means_of_the_raw_per_batch_values(data_root, model_path, tmp_path):
    out = tmp_path / "hsic.json"
    res = measure_hsic(model_path, data_root, 32, batch_size=8, seed=1, out_path=out,
                       meta={"dataset": "synth", "architecture": "resnet18",
                             "defense_name": "nodef", "seed": 0})
    assert res["layers"] == ["layer1", "layer2", "layer3", "layer4"]
    n_train = len(make_loader(data_root, "train", resolution=32, batch_size=1,
                              train=False).dataset)
    assert res["n_batches"] == n_train // 8 >= 2          # drop_last
    assert res["split"] == "train" and res["augmented"] and res["shuffled"]
    written = io.read_json(out)
    for key in ("hsic_xz", "hsic_yz"):
        for layer in res["layers"]:
            raw = written["raw"][key][layer]
            assert len(raw) == res["n_batches"]
            assert all(round(v, 5) == v for v in raw)      # rounded to 5 decimals
            assert written[key][layer] == pytest.approx(float(np.mean(raw)), abs=1e-12)
            assert all(np.isfinite(raw))
    # a different seed draws other batches / augmentations
    other = measure_hsic(model_path, data_root, 32, batch_size=8, seed=2)
    assert other["raw"]["hsic_xz"] != res["raw"]["hsic_xz"]
    again = measure_hsic(model_path, data_root, 32, batch_size=8, seed=1)
    assert again["raw"] == res["raw"]


def test_matches_atat_hsic_called_directly_on_one_batch(data_root, model_path):
    # val split: unshuffled, unaugmented, so the first batch is known
    res = measure_hsic(model_path, data_root, 32, split="val", batch_size=8, n_batches=1)
    assert res["n_batches"] == 1 and not res["augmented"]
    from atat.training.train import load_model
    model, _, _ = load_model(model_path)
    x, y = next(iter(make_loader(data_root, "val", resolution=32, batch_size=8, train=False)))
    with torch.no_grad():
        _, hidden = model.forward_hidden(x)
        for layer, z in zip(res["layers"], hidden):
            direct_xz = float(hsic_xz(x, z, dtype=torch.float64))   # the default hsic.dtype
            direct_yz = float(hsic_yz(z, y, n_classes=N_CLASSES, dtype=torch.float64))
            assert res["raw"]["hsic_xz"][layer][0] == pytest.approx(direct_xz, abs=1.5e-5)
            assert res["raw"]["hsic_yz"][layer][0] == pytest.approx(direct_yz, abs=1.5e-5)
            assert res["hsic_xz"][layer] == res["raw"]["hsic_xz"][layer][0]


def _reference_nhsic(a, b, kernel_b):
    """nHSIC written independently in float64 NumPy: Gaussian kernel from pairwise differences
    (not the expanded form), right centring, R = K~ (K~ + eps m I)^-1, trace(R_a R_b)."""
    def normalized(v, kernel):
        v = np.asarray(v, dtype=np.float64).reshape(len(v), -1)
        m, d = v.shape
        if kernel == "gaussian":
            diff = v[:, None, :] - v[None, :, :]
            k = np.exp(-(diff ** 2).sum(-1) / (2 * 5.0 ** 2 * d))
        else:
            k = v @ v.T
        kc = k @ (np.eye(m) - 1.0 / m)
        return kc @ np.linalg.inv(kc + 1e-5 * m * np.eye(m))
    return float(np.sum(normalized(a, "gaussian") * normalized(b, kernel_b).T))


class _Hidden(torch.nn.Module):
    """A 'model' whose hidden stages are given tensors (the measurement's kernel maths alone)."""

    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden

    def forward_hidden(self, x):
        return torch.zeros(len(x), N_CLASSES), self.hidden


def _ill_conditioned_cases():
    g = torch.Generator().manual_seed(3)
    m = 16
    base = torch.randn(m, 6, generator=g)
    yield "scale 1e3", torch.randn(m, 3, 8, 8, generator=g) * 1e3, [base * 1e3]
    yield "1-D", torch.randn(m, 1, generator=g), [torch.randn(m, 1, generator=g)]
    near = base[:, :1] + 1e-4 * torch.randn(m, 6, generator=g)   # nearly collinear columns
    yield "collinear", near, [near * 50, base]


def test_measurement_in_float64_matches_an_independent_reference_where_float32_does_not():
    """The measurement's default precision reproduces a float64 NumPy reference on
    ill-conditioned inputs to 1e-8 (relative); float32 (BiDO's training precision) does not,
    which is why the tables are measured in float64."""
    from atat.measures.hsic_measure import batch_hsic

    y = torch.arange(16) % N_CLASSES
    onehot = np.eye(N_CLASSES)[y.numpy()]
    worst32 = 0.0
    for name, x, hidden in _ill_conditioned_cases():
        model = _Hidden(hidden)
        xz64, yz64, _ = batch_hsic(model, x, y, N_CLASSES)            # default: float64
        xz32, yz32, _ = batch_hsic(model, x, y, N_CLASSES, dtype="float32")
        for i, z in enumerate(hidden):
            ref_xz = _reference_nhsic(z.numpy(), x.numpy(), "gaussian")
            ref_yz = _reference_nhsic(z.numpy(), onehot, "linear")
            assert xz64[i] == pytest.approx(ref_xz, rel=1e-8, abs=1e-10), name
            assert yz64[i] == pytest.approx(ref_yz, rel=1e-8, abs=1e-10), name
            worst32 = max(worst32, abs(xz32[i] - ref_xz) / abs(ref_xz),
                          abs(yz32[i] - ref_yz) / abs(ref_yz))
    assert worst32 > 1e-5, f"float32 matched the reference to {worst32:.1e} on every case"


def test_measurement_records_its_precision_and_rejects_an_unknown_one(data_root, model_path):
    res = measure_hsic(model_path, data_root, 32, split="val", batch_size=8, n_batches=1)
    assert res["estimator"]["dtype"] == "float64"
    res32 = measure_hsic(model_path, data_root, 32, split="val", batch_size=8, n_batches=1,
                         dtype="float32")
    assert res32["estimator"]["dtype"] == "float32"
    with pytest.raises(ValueError, match="hsic.dtype: 'float16'"):
        measure_hsic(model_path, data_root, 32, split="val", batch_size=8, n_batches=1,
                     dtype="float16")


def _fake_hsic(path, dataset, arch, defense, seed, base):
    layers = ["layer1", "layer2", "layer3", "layer4"]
    raw = {l: [base + i, base + i + 0.5] for i, l in enumerate(layers)}
    io.write_json(path, {"dataset": dataset, "architecture": arch, "defense_name": defense,
                         "seed": seed, "layers": layers, "n_batches": 2,
                         "hsic_xz": {l: float(np.mean(v)) for l, v in raw.items()},
                         "hsic_yz": {l: float(np.mean(v)) / 10 for l, v in raw.items()},
                         "raw": {"hsic_xz": raw, "hsic_yz": raw}})


@pytest.mark.parametrize("with_ppa", [False, True])
def test_hsic_table_columns_and_no_invented_attack_accuracy(tmp_path, with_ppa):
    files = []
    for i, d in enumerate(["nodef", "bido", "bido_lx1e3"]):
        files.append(tmp_path / f"{d}.json")
        _fake_hsic(files[-1], "facescrub", "resnet152", d, 0, 10.0 * i)
    summary = pd.DataFrame({"dataset": "facescrub", "architecture": "resnet152",
                            "defense": ["nodef", "bido", "bido_lx1e3", "mid"],
                            "defense_type": ["nodef", "bido", "bido", "mid"], "seed": 0,
                            "test_acc": [0.9, 0.8, 0.7, 0.6]})
    if with_ppa:
        summary["ppa_attacc1"] = [0.95, 0.5, 0.85, 0.7]
    summary.to_csv(tmp_path / "summary.csv", index=False)
    outs = [tmp_path / f"table1.{e}" for e in ("csv", "md", "tex")]
    table = hsic_table(files, tmp_path / "summary.csv", outs, table="table1")
    assert list(table["Defense"]) == ["NoDef", "BiDO", "BiDO**"]
    assert [c for c in table.columns if c.startswith("HSIC")] == \
        ["HSIC(X,Z1)", "HSIC(X,Z2)", "HSIC(X,Z3)", "HSIC(X,Z4)"]
    assert table["HSIC(X,Z2)"].tolist() == pytest.approx([1.25, 11.25, 21.25])
    assert table["Test acc."].tolist() == pytest.approx([0.9, 0.8, 0.7])
    assert ("PPA AttAcc@1" in table.columns) == with_ppa
    if with_ppa:
        assert table["PPA AttAcc@1"].tolist() == pytest.approx([0.95, 0.5, 0.85])
    assert all(o.exists() for o in outs)
    assert (tmp_path / "table1.md").read_text().startswith("Table 1")
    t8 = hsic_table(files[:2], tmp_path / "summary.csv", [tmp_path / "t8.csv"], table="table8")
    assert "HSIC(Y,Z4)" in t8.columns
