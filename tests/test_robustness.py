"""Tests of atat.robustness (AutoAttack wrapper). Tiny models and images only."""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from atat.robustness import (DEMO_SETTINGS, NormalizedModel, evaluate_autoattack,
                             evaluate_autoattack_with_adversarials, no_tf32)

ROOT_DIR = Path(__file__).resolve().parents[1]
CHEAP = {"apgd": {"n_iter": 4, "n_restarts": 1},
         "apgd_t": {"n_target_classes": 2, "n_iter": 4},
         "fab": {"n_target_classes": 2, "n_iter": 4, "n_restarts": 1},
         "square": {"n_queries": 30, "p_init": 0.8}}


def untimed(record: dict | Path) -> dict:
    """An AutoAttack record (dict, or the path of its JSON) without its wall-clock seconds
    (overall and per attack): the values a rerun may change."""
    r = json.loads(record.read_text() if isinstance(record, Path) else json.dumps(record))
    r.pop("seconds")
    for entry in r["per_attack"].values():
        entry.pop("seconds")
    return r


@contextlib.contextmanager
def one_thread():
    # on a shared 2-core machine torch's intra-op threads spin against each other: these
    # tiny attacks run ~10x slower with 2 threads than with 1
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def tiny_cnn(n_classes: int = 5, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                          nn.Flatten(), nn.Linear(16, n_classes)).eval()
    with torch.no_grad():   # sharper logits, so that eps = 0.01 fools some but not all
        model[0].weight.mul_(20.0)
        model[4].weight.mul_(20.0)
    return model


def cnn_data(model: nn.Module, n: int = 6, size: int = 16, n_classes: int = 5):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 3, size, size, generator=g)
    x[0, :, :4] = 0.0          # pixels on the box boundary
    x[1, :, :4] = 1.0
    with torch.no_grad():
        y = model((x - 0.5) / 0.5).argmax(1)
    y[-1] = (y[-1] + 1) % n_classes   # one misclassified example
    return x, y


class GroupLinear(nn.Module):
    """logit_c = scale * mean of image column c (1 x 4 x n_classes image, [-1, 1] inputs)."""

    def __init__(self, n_classes: int = 4, scale: float = 10.0):
        super().__init__()
        self.lin = nn.Linear(4 * n_classes, n_classes)
        w = torch.zeros(n_classes, 4, n_classes)
        for c in range(n_classes):
            w[c, :, c] = scale / 4
        with torch.no_grad():
            self.lin.weight.copy_(w.reshape(n_classes, -1))
            self.lin.bias.zero_()

    def forward(self, x):
        return self.lin(x.flatten(1))


def linear_data(n_classes: int = 4, n: int = 4):
    y = torch.arange(n) % n_classes
    x = torch.full((n, 1, 4, n_classes), 0.3)
    for i in range(n):
        x[i, :, :, y[i]] = 0.7   # correct column brighter: fooled iff eps > 0.2 (L-inf)
    y_label = y.clone()
    y_label[-1] = (y[-1] + 1) % n_classes   # one wrong label -> clean accuracy (n-1)/n
    return x, y_label


# ----------------------------------------------------------------------------- wrapper
def test_normalized_model_applies_minus_one_one_normalisation():
    seen = {}

    class Probe(nn.Module):
        def forward(self, x):
            seen["x"] = x
            return x.flatten(1)[:, :3] * 2.0

    x = torch.rand(2, 1, 2, 2)
    out = NormalizedModel(Probe())(x)
    torch.testing.assert_close(seen["x"], (x - 0.5) / 0.5)
    torch.testing.assert_close(out, ((x - 0.5) / 0.5).flatten(1)[:, :3] * 2.0)


def test_normalized_model_logits_from_tuple_dict_and_logits_fn():
    logits = torch.randn(2, 3)

    class Multi(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def forward(self, x):
            if self.kind == "tuple":
                return logits, torch.zeros(1)
            if self.kind == "dict":
                return {"logits": logits, "aux": 0}
            return torch.zeros(1), logits   # e.g. (h, ..., logits)

    x = torch.rand(2, 1, 2, 2)
    assert torch.equal(NormalizedModel(Multi("tuple"))(x), logits)
    assert torch.equal(NormalizedModel(Multi("dict"))(x), logits)
    assert torch.equal(NormalizedModel(Multi("last"), logits_fn=lambda o: o[-1])(x), logits)
    with pytest.raises(ValueError, match="logits"):
        NormalizedModel(Multi("last"))(x)     # element 0 is not (batch, classes)


# ----------------------------------------------------------------------------- TF32
def test_no_tf32_disables_and_restores():
    b = torch.backends
    before = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        b.cuda.matmul.allow_tf32 = True
        b.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
        with no_tf32():
            assert b.cuda.matmul.allow_tf32 is False
            assert b.cudnn.allow_tf32 is False
            assert torch.get_float32_matmul_precision() == "highest"
        assert b.cuda.matmul.allow_tf32 is True
        assert b.cudnn.allow_tf32 is True
        assert torch.get_float32_matmul_precision() == "high"
        with pytest.raises(RuntimeError):     # restored on error, too
            with no_tf32():
                raise RuntimeError("boom")
        assert b.cudnn.allow_tf32 is True and torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before[2])
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before[0], before[1]


def test_no_tf32_with_new_precision_api():
    # once the new fp32_precision API is used, PyTorch (>= 2.9) refuses to read the legacy
    # flags ("mix of the legacy and new APIs"); no_tf32 must still work and restore
    b = torch.backends
    before = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        b.cuda.matmul.fp32_precision = "tf32"
        b.cudnn.conv.fp32_precision = "tf32"
        with no_tf32():
            assert b.cuda.matmul.fp32_precision == "ieee"
            assert b.cudnn.conv.fp32_precision == "ieee"
            assert b.cudnn.rnn.fp32_precision == "ieee"
        assert b.cuda.matmul.fp32_precision == "tf32"
        assert b.cudnn.conv.fp32_precision == "tf32"
    finally:   # legacy writes make the legacy flags readable again
        torch.set_float32_matmul_precision(before[2])
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before[0], before[1]
    assert b.cudnn.allow_tf32 == before[1]


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("eps", [0, -0.1, float("nan"), float("inf"), 2.0, "0.1", True])
def test_bad_epsilon(eps):
    x = torch.rand(2, 3, 8, 8)
    with pytest.raises(ValueError, match="epsilon"):
        evaluate_autoattack(tiny_cnn(), x, torch.zeros(2, dtype=torch.long), epsilon=eps)


def test_unknown_attack_named():
    x = torch.rand(2, 3, 8, 8)
    with pytest.raises(ValueError, match="'pgd-linf'"):
        evaluate_autoattack(tiny_cnn(), x, torch.zeros(2, dtype=torch.long), epsilon=0.01,
                            attacks=("apgd-ce", "pgd-linf"))
    with pytest.raises(ValueError, match="duplicate"):
        evaluate_autoattack(tiny_cnn(), x, torch.zeros(2, dtype=torch.long), epsilon=0.01,
                            attacks=("square", "square"))
    with pytest.raises(ValueError, match="non-empty"):
        evaluate_autoattack(tiny_cnn(), x, torch.zeros(2, dtype=torch.long), epsilon=0.01,
                            attacks=())


@pytest.mark.parametrize("shift", [-0.5, 0.01])
def test_inputs_outside_unit_box(shift):
    x = torch.rand(2, 3, 8, 8)
    x[0, 0, 0, 0] = 1.0 + shift if shift > 0 else shift
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        evaluate_autoattack(tiny_cnn(), x, torch.zeros(2, dtype=torch.long), epsilon=0.01)


def test_bad_settings_and_version():
    x = torch.rand(2, 3, 8, 8)
    y = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="version='custom'"):
        evaluate_autoattack(tiny_cnn(), x, y, epsilon=0.01, settings=CHEAP)
    with pytest.raises(ValueError, match="apgd.n_iterations"):
        evaluate_autoattack(tiny_cnn(), x, y, epsilon=0.01, version="custom",
                            settings={"apgd": {"n_iterations": 3}})
    with pytest.raises(ValueError, match="version"):
        evaluate_autoattack(tiny_cnn(), x, y, epsilon=0.01, version="plus")
    with pytest.raises(ValueError, match="4 classes"):
        evaluate_autoattack(tiny_cnn(3), x, y, epsilon=0.01, version="custom", settings=CHEAP)


# ----------------------------------------------------------------------------- attacks
@pytest.fixture(scope="module")
def cnn_run():
    model = tiny_cnn()
    x, y = cnn_data(model)
    with one_thread():
        record, adv = evaluate_autoattack_with_adversarials(
            model, x, y, epsilon=0.01, version="custom", settings=CHEAP, batch_size=4, seed=3,
            recheck=True)
    return model, x, y, record, adv


def test_adversarials_within_eps_ball_and_box(cnn_run):
    _, x, _, record, adv = cnn_run
    assert set(adv) == {"apgd-ce", "apgd-t", "fab-t", "square"}
    for name, xa in adv.items():
        assert xa.shape == x.shape and xa.dtype == torch.float32
        assert float(xa.min()) >= 0.0 and float(xa.max()) <= 1.0, name
        dist = (xa.double() - x.double()).abs().amax()
        assert float(dist) <= 0.01 + 1e-7, (name, float(dist))   # float32 rounding only
        assert record["per_attack"][name]["max_linf_perturbation"] == pytest.approx(
            float(dist))
    # the attack did move something (otherwise the bound above tests nothing)
    assert max(float((xa - x).abs().amax()) for xa in adv.values()) > 0.005


def test_worst_case_is_and_over_attacks(cnn_run):
    _, x, y, record, _ = cnn_run
    json.dumps(record, allow_nan=False)        # JSON-serialisable
    n = x.shape[0]
    clean = torch.tensor(record["clean_flags"], dtype=torch.bool)
    assert record["clean_accuracy"] == pytest.approx(clean.float().mean().item())
    assert record["clean_accuracy"] == pytest.approx(5 / 6)
    assert 0 < record["robust_accuracy"] < record["clean_accuracy"]   # non-trivial case
    worst = torch.ones(n, dtype=torch.bool)
    for name, res in record["per_attack"].items():
        flags = torch.tensor(res["robust_flags"], dtype=torch.bool)
        assert len(res["robust_flags"]) == n
        assert not (flags & ~clean).any(), name          # robust implies clean-correct
        assert res["robust_accuracy"] == pytest.approx(flags.float().mean().item())
        assert res["robust_accuracy"] <= record["clean_accuracy"]
        assert record["robust_accuracy"] <= res["robust_accuracy"]
        assert res["robust_flags_recheck"] == res["robust_flags"]   # deterministic model
        assert res["seconds"] >= 0
        worst &= flags
    assert record["robust_flags"] == worst.int().tolist()
    assert record["robust_accuracy"] == pytest.approx(worst.float().mean().item())
    assert record["robust_accuracy"] <= record["clean_accuracy"]


def test_record_contents_custom(cnn_run):
    _, _, _, record, _ = cnn_run
    assert record["epsilon"] == 0.01 and record["norm"] == "Linf"
    assert record["version"] == "custom"
    assert record["library"]["name"] == "pyautoattack" and record["library"]["version"]
    assert record["n_examples"] == 6 and record["n_classes"] == 5
    s = record["settings"]
    assert s["apgd-ce"]["n_iter"] == 4 and s["apgd-ce"]["n_restarts"] == 1
    assert s["apgd-ce"]["loss"] == "ce" and s["apgd-ce"]["eps"] == 0.01
    assert s["apgd-ce"]["n_iter_2"] == 1          # checkpoint schedule follows n_iter
    assert s["apgd-t"]["n_target_classes"] == 2 and s["apgd-t"]["loss"] == "dlr-targeted"
    assert s["fab-t"]["targeted"] is True and s["fab-t"]["n_iter"] == 4
    assert s["square"]["n_queries"] == 30 and s["square"]["p_init"] == 0.8
    assert record["randomized_model"] is False


def test_deterministic_for_fixed_seed(cnn_run):
    # same seed -> same record; also: running AutoAttack's checks before every attack (the
    # library's default) instead of once changes nothing
    model, x, y, record, _ = cnn_run
    again = evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP,
                                batch_size=4, seed=3, recheck=True,
                                library_checks="every_attack")
    assert again["library_checks"] == "every_attack"

    def strip(r):
        r = untimed(r)
        r.pop("library_checks")
        return r
    assert strip(again) == strip(record)


def test_model_state_and_rng_untouched():
    model = tiny_cnn()
    x, y = cnn_data(model, n=3)
    model.train()
    rng = torch.random.get_rng_state()

    def tracer(*args):
        return None
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP,
                            attacks=("apgd-ce", "fab-t"))
        assert sys.gettrace() is tracer        # pyautoattack's check_dynamic unsets it
    finally:
        sys.settrace(previous)
    assert model.training
    assert all(p.requires_grad and p.grad is None for p in model.parameters())
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_target_classes_clamped_and_noted():
    model = tiny_cnn(4)
    x, y = cnn_data(model, n=2, n_classes=4)
    r = evaluate_autoattack(model, x, y, epsilon=0.01, version="custom",
                            settings={**CHEAP, "apgd_t": {"n_target_classes": 9, "n_iter": 2},
                                      "fab": {"n_target_classes": 9, "n_iter": 2}},
                            attacks=("apgd-t", "fab-t"))
    assert r["settings"]["apgd-t"]["n_target_classes"] == 3
    assert r["settings"]["fab-t"]["n_target_classes"] == 3
    assert len(r["settings_notes"]) == 2


def test_randomized_model_flagged_but_run():
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tiny_cnn()

        def forward(self, x):
            out = self.net(x)
            return out + 0.01 * torch.randn_like(out)   # random at evaluation, like MID

    model = Noisy()
    x, y = cnn_data(model.net, n=3)
    r = evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP,
                            attacks=("apgd-ce",))
    assert r["randomized_model"] is True
    assert any("randomized" in m for m in r["library_warnings"])
    assert len(r["per_attack"]["apgd-ce"]["robust_flags"]) == 3
    assert len(r["per_attack"]["apgd-ce"]["robust_flags_recheck"]) == 3   # auto for random


def test_probability_output_warning_recorded():
    model = nn.Sequential(tiny_cnn(), nn.Softmax(dim=1))
    x, y = cnn_data(model[0], n=2)
    r = evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP,
                            attacks=("apgd-ce",))
    assert any("probability distribution" in m for m in r["library_warnings"])


# ----------------------------------------------------------------------------- sanity
def test_linear_model_large_eps_all_fooled_standard():
    x, y = linear_data()
    r = evaluate_autoattack(GroupLinear(), x, y, epsilon=0.3, version="standard")
    assert r["clean_accuracy"] == pytest.approx(0.75)
    assert r["robust_accuracy"] == 0.0
    for name, res in r["per_attack"].items():
        assert res["robust_accuracy"] == 0.0, name
    # standard hyper-parameters exactly as AutoAttack sets them (targets clamped to 3)
    s = r["settings"]
    assert (s["apgd-ce"]["n_iter"], s["apgd-ce"]["n_restarts"], s["apgd-ce"]["rho"]) == (
        100, 1, 0.75)
    assert (s["apgd-t"]["n_iter"], s["apgd-t"]["n_restarts"],
            s["apgd-t"]["n_target_classes"]) == (100, 1, 3)
    assert (s["fab-t"]["n_iter"], s["fab-t"]["n_restarts"], s["fab-t"]["n_target_classes"]) == (
        100, 1, 3)
    assert (s["square"]["n_queries"], s["square"]["p_init"]) == (5000, 0.8)
    assert r["version"] == "standard" and r["settings_notes"]


def test_linear_model_tiny_eps_keeps_clean_accuracy():
    x, y = linear_data()
    # (custom budget: with nothing to fool, standard Square would spend all 5000 queries)
    r = evaluate_autoattack(GroupLinear(), x, y, epsilon=1e-8, version="custom",
                            settings=DEMO_SETTINGS)
    assert r["clean_accuracy"] == pytest.approx(0.75)
    assert r["robust_accuracy"] == r["clean_accuracy"]
    for res in r["per_attack"].values():
        assert res["robust_accuracy"] == r["clean_accuracy"]


def test_standard_settings_without_clamping():
    # 12 classes: AutoAttack's 9 target classes fit, nothing is clamped
    x, y = linear_data(n_classes=12, n=2)
    r = evaluate_autoattack(GroupLinear(12), x, y, epsilon=0.3, attacks=("apgd-t", "fab-t"))
    assert r["settings"]["apgd-t"]["n_target_classes"] == 9
    assert r["settings"]["fab-t"]["n_target_classes"] == 9
    assert r["settings_notes"] == []
    assert r["robust_accuracy"] == 0.0


# ----------------------------------------------------------------------------- precision
def test_attack_precision_tf32_is_pytorch_defaults_and_restores():
    from atat.base.precision import attack_precision

    b = torch.backends
    before = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        b.cuda.matmul.allow_tf32 = True
        b.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("high")
        with attack_precision("tf32"):
            assert b.cudnn.allow_tf32 is True            # cuDNN convolutions may use TF32
            assert b.cuda.matmul.allow_tf32 is False     # PyTorch's default for matmuls
            assert torch.get_float32_matmul_precision() == "highest"
        assert (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32) == (True, False)
        assert torch.get_float32_matmul_precision() == "high"
        with attack_precision("fp32"):
            assert not b.cudnn.allow_tf32 and not b.cuda.matmul.allow_tf32
        with pytest.raises(RuntimeError):                # restored on error, too
            with attack_precision("tf32"):
                raise RuntimeError("boom")
        assert b.cudnn.allow_tf32 is False and torch.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError, match="precision must be one of fp32, tf32"):
            with attack_precision("fp16"):
                pass
    finally:
        torch.set_float32_matmul_precision(before[2])
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before[0], before[1]


def test_attack_precision_tf32_with_new_precision_api():
    from atat.base.precision import attack_precision

    b = torch.backends
    before = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        b.cuda.matmul.fp32_precision = "tf32"
        b.cudnn.conv.fp32_precision = "ieee"
        with attack_precision("tf32"):
            assert b.cudnn.conv.fp32_precision == "tf32"
            assert b.cudnn.rnn.fp32_precision == "tf32"
            assert b.cuda.matmul.fp32_precision == "ieee"
        assert b.cuda.matmul.fp32_precision == "tf32"
        assert b.cudnn.conv.fp32_precision == "ieee"
    finally:   # legacy writes make the legacy flags readable again
        torch.set_float32_matmul_precision(before[2])
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before[0], before[1]


def test_record_states_the_precision(cnn_run):
    _, _, _, record, _ = cnn_run
    assert record["precision"] == "fp32" and record["tf32_active"] is False


def test_tf32_precision_is_applied_recorded_and_a_no_op_on_cpu():
    seen = []

    class Spy(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            seen.append(torch.backends.cudnn.allow_tf32)
            return self.inner(x)

    model = tiny_cnn()
    x, y = cnn_data(model, n=4)
    kw = dict(epsilon=0.01, attacks=("apgd-ce", "square"), version="custom", settings=CHEAP,
              batch_size=4, seed=3)
    before = torch.backends.cudnn.allow_tf32
    rec_tf32 = evaluate_autoattack(Spy(model), x, y, precision="tf32", **kw)
    assert seen and all(seen) and torch.backends.cudnn.allow_tf32 == before
    seen.clear()
    rec_fp32 = evaluate_autoattack(Spy(model), x, y, **kw)
    assert seen and not any(seen)
    assert rec_tf32["precision"] == "tf32" and rec_tf32["tf32_active"] is False  # CPU
    assert rec_tf32["robust_flags"] == rec_fp32["robust_flags"]
    for a in kw["attacks"]:
        assert rec_tf32["per_attack"][a]["robust_flags"] == rec_fp32["per_attack"][a]["robust_flags"]
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32"):
        evaluate_autoattack(model, x, y, precision="high", **kw)


def test_compare_precisions_measures_every_epsilon_under_both_settings():
    from atat.robustness import compare_precisions

    model = tiny_cnn()
    x, y = cnn_data(model, n=4)
    out = compare_precisions(model, x, y, epsilons=[0.01, 1e-5], attacks=("apgd-ce",),
                             version="custom", settings=CHEAP, batch_size=4, seed=3)
    json.dumps(out, allow_nan=False)
    assert [(r["epsilon"], r["precision"]) for r in out["rows"]] == [
        (0.01, "fp32"), (0.01, "tf32"), (1e-5, "fp32"), (1e-5, "tf32")]
    assert all(r["tf32_active"] is False and "robust_apgd-ce" in r for r in out["rows"])
    assert [d["epsilon"] for d in out["differences"]] == [0.01, 1e-5]
    # CPU: TF32 does not exist, so both settings give the same numbers (and the note says so)
    assert all(d["tf32_minus_fp32"] == 0 and d["n_examples_differing"] == 0
               for d in out["differences"])
    assert "not available on this device" in out["note"] and out["device"] == "cpu"
    with pytest.raises(ValueError, match="precisions must be one of"):
        compare_precisions(model, x, y, epsilons=[0.01], attacks=("apgd-ce",),
                           precisions=("fp32", "bf16"))


def test_precision_benchmark_cli_on_a_trained_model(tmp_path, capsys, tiny_recipe,
                                                     make_synthfaces):
    import yaml

    from atat.robustness import precision_benchmark_main
    from atat.training.train import TrainSpec, train

    make_synthfaces(tmp_path / "ds", images_per_identity=8, seed=1)
    recipe = tiny_recipe(eval_batch_size=16, lr_milestones=[])
    spec = TrainSpec(model_id="t/resnet18/nodef/seed0", dataset_root=str(tmp_path / "ds" / "private"),
                     resolution=16, n_classes=4, architecture="resnet18",
                     defense={"type": "nodef"}, training=recipe,
                     augmentation={"random_resized_crop": False, "horizontal_flip": False,
                                   "color_jitter": False}, seed=0)
    with one_thread():
        train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
              resume_path=tmp_path / "m.resume.pt", progress=False)
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"autoattack": {
        "n_examples": 3, "batch_size": 3, "version": "custom", "attacks": ["apgd-ce"],
        "settings": {"apgd": {"n_iter": 2, "n_restarts": 1}}}}))
    out = tmp_path / "bench" / "precision.json"
    root = ROOT_DIR
    with one_thread():
        rc = precision_benchmark_main([
            "--model", str(tmp_path / "m.pt"), "--dataset-root", str(tmp_path / "ds" / "private"),
            "--config", str(root / "config" / "config.yaml"), str(root / "config" / "demo.yaml"),
            str(overlay), "--epsilons", "1e-5", "--device", "cpu", "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    # the demo's autoattack.split (test: its validation split has 108 images, fewer than 256)
    assert result["model_id"] == "t/resnet18/nodef/seed0" and result["split"] == "test"
    assert [r["precision"] for r in result["rows"]] == ["fp32", "tf32"]
    assert all(r["n_examples"] == 3 for r in result["rows"])
    printed = capsys.readouterr().out
    assert "tf32-fp32" in printed and "not available on this device" in printed
    # the same model through rule autoattack's job: record written, named by model and eps
    from atat.plan.config import load_config
    from atat.robustness import evaluate_autoattack_model_file

    aa = load_config(root / "config" / "config.yaml", root / "config" / "demo.yaml",
                     overlay)["autoattack"]
    job_out = tmp_path / "robustness" / "eps1e-05.json"
    with one_thread():
        [rec] = evaluate_autoattack_model_file(
            model_path=tmp_path / "m.pt", dataset_root=tmp_path / "ds" / "private",
            outputs={1e-5: job_out}, settings=aa, resolution=16)
    assert json.loads(job_out.read_text()) == json.loads(json.dumps(rec))
    assert rec["model_id"] == "t/resnet18/nodef/seed0" and rec["epsilon_tag"] == "1e-05"
    assert rec["n_examples"] == 3 and rec["attacks"] == ["apgd-ce"] and rec["precision"] == "fp32"
    # autoattack.job per_model: every epsilon in one job writes the records that one job per
    # epsilon writes (each epsilon seeded on its own; only the timings differ)
    per_model = {0.031: tmp_path / "pm" / "eps0.031.json", 1e-5: tmp_path / "pm" / "eps1e-05.json"}
    alone = tmp_path / "pe" / "eps0.031.json"
    with one_thread():
        evaluate_autoattack_model_file(
            model_path=tmp_path / "m.pt", dataset_root=tmp_path / "ds" / "private",
            outputs=per_model, settings=aa, resolution=16)
        evaluate_autoattack_model_file(
            model_path=tmp_path / "m.pt", dataset_root=tmp_path / "ds" / "private",
            outputs={0.031: alone}, settings=aa, resolution=16)

    assert untimed(per_model[1e-5]) == untimed(job_out)
    assert untimed(per_model[0.031]) == untimed(alone)
    assert untimed(alone)["epsilon"] == 0.031 and untimed(alone)["settings"] != {}


def test_autoattack_has_one_home_with_distinct_names():
    # issue 15 item 3: one module; the tensor-level and the model-file-level entry points
    # no longer share the name run_autoattack, and the adapters import names that exist
    import ast
    import importlib

    import atat.robustness as R

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("atat.robust_eval")
    assert not hasattr(R, "run_autoattack")
    assert all(hasattr(R, name) for name in R.__all__)
    for script in ("autoattack.py", "bench_gpu_precision.py"):
        tree = ast.parse((ROOT_DIR / "workflow" / "scripts" / script).read_text())
        imported = [(node.module, alias.name) for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("atat")
                    for alias in node.names]
        assert imported and all(mod == "atat.robustness" and hasattr(R, name)
                                for mod, name in imported), (script, imported)


def test_autoattack_precision_key_is_validated(tmp_path):
    from atat.plan.config import ConfigError, load_config, validate_config
    from atat.robustness import evaluate_autoattack_model_file

    cfg = load_config(ROOT_DIR / "config" / "config.yaml")
    assert cfg["autoattack"]["precision"] == "fp32"  # the correct measurement is the default
    cfg["autoattack"]["precision"] = "bf16"
    with pytest.raises(ConfigError, match="autoattack.precision"):
        validate_config(cfg)
    # the job checks it too, before loading anything
    with pytest.raises(ValueError, match="autoattack.precision must be one of fp32, tf32"):
        evaluate_autoattack_model_file(model_path=tmp_path / "missing.pt", dataset_root=tmp_path,
                outputs={0.01: tmp_path / "o.json"}, resolution=16,
                settings={"precision": "tf16"})


# ----------------------------------------------------------------------------- batches, resume
RESUME_SETTINGS = {**CHEAP, "fab": {"n_target_classes": 2, "n_iter": 4, "n_restarts": 2}}


def seconds_free_bytes(record: dict | Path) -> bytes:
    """The record as atat.base.io.write_json writes it, without the lines of its wall-clock
    ``seconds`` (overall and per attack): everything else compared byte for byte."""
    from atat.base import io

    text = record.read_text() if isinstance(record, Path) else None
    if text is None:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            io.write_json(Path(d) / "r.json", record)
            text = (Path(d) / "r.json").read_text()
    return "\n".join(line for line in text.splitlines()
                     if not line.strip().startswith('"seconds":')).encode()


class Interrupted(RuntimeError):
    pass


@pytest.fixture
def batch_spy(monkeypatch):
    """Counts the AutoAttack batches run (``calls``: (attack, epsilon) of each) and, with
    ``spy.stop_after = k``, raises :class:`Interrupted` instead of running batch k + 1 -- a
    job killed part-way."""
    import atat.robustness as R

    real = R._run_batch
    spy = type("Spy", (), {"calls": [], "stop_after": None})()

    def run(adversary, checks, attack, *args, **kwargs):
        if spy.stop_after is not None and len(spy.calls) >= spy.stop_after:
            raise Interrupted(f"killed before batch {len(spy.calls) + 1}")
        spy.calls.append((attack, float(adversary.apgd.eps)))
        return real(adversary, checks, attack, *args, **kwargs)
    monkeypatch.setattr(R, "_run_batch", run)
    return spy


def test_batches_give_the_librarys_own_flags():
    # each attack runs batch by batch on the clean-correct examples; the flags are those of
    # the library's single run over all examples (its own split into batches)
    from pyautoattack import AutoAttack

    from atat.robustness import _configure_adversary

    model = tiny_cnn()
    x, y = cnn_data(model, n=9)
    r = evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP,
                            batch_size=3, seed=5)
    net = NormalizedModel(model).eval()
    adversary, _ = _configure_adversary(net, epsilon=0.01, seed=5, device=torch.device("cpu"),
                                        version="custom", overrides=CHEAP, n_classes=5)
    assert isinstance(adversary, AutoAttack)
    for attack in r["attacks"]:
        adversary.attacks_to_run = [attack]
        _, y_adv = adversary.run_standard_evaluation(x, y, batch_size=3)
        assert r["per_attack"][attack]["robust_flags"] == y_adv.eq(y).int().tolist(), attack
    assert 0 < r["robust_accuracy"] < r["clean_accuracy"]


@pytest.mark.parametrize("stop_after", [1, 9])
def test_resumed_record_is_the_uninterrupted_one(tmp_path, batch_spy, stop_after):
    # 9 examples, 8 clean-correct, batches of 3: 3 batches per attack. Killed after the first
    # batch (mid-attack), or at the first batch of untargeted FAB (after FAB-T, which sets
    # fab.n_restarts = 1 for the library's later FAB runs: a resumed run must restore it)
    model = tiny_cnn()
    x, y = cnn_data(model, n=9)
    kw = dict(epsilon=0.01, version="custom", settings=RESUME_SETTINGS, batch_size=3, seed=4,
              attacks=("apgd-ce", "fab-t", "fab", "square"), recheck=True)
    whole = evaluate_autoattack(model, x, y, **kw)
    n_batches = len(batch_spy.calls)
    assert n_batches == 12 and whole["settings"]["fab"]["n_restarts"] == 1
    batch_spy.calls.clear()
    batch_spy.stop_after = stop_after
    with pytest.raises(Interrupted):
        evaluate_autoattack(model, x, y, resume_dir=tmp_path / "r", **kw)
    assert len(list((tmp_path / "r").rglob("batch*.pt"))) == stop_after
    batch_spy.calls.clear()
    batch_spy.stop_after = None
    resumed = evaluate_autoattack(model, x, y, resume_dir=tmp_path / "r", **kw)
    assert len(batch_spy.calls) == n_batches - stop_after   # no finished batch reruns
    assert seconds_free_bytes(resumed) == seconds_free_bytes(whole)
    # finished: the record is kept (its batches are not) and returned without any attack
    assert not list((tmp_path / "r").rglob("batch*.pt"))
    batch_spy.calls.clear()
    again = evaluate_autoattack(model, x, y, resume_dir=tmp_path / "r", **kw)
    assert batch_spy.calls == [] and again == json.loads(json.dumps(resumed))


def test_resume_of_a_randomised_model_restores_its_random_draws(tmp_path, batch_spy):
    # the model draws noise at every forward, large enough to flip predictions: the batches
    # after a restart must see the random numbers of the uninterrupted run (each batch starts
    # from torch.manual_seed(seed); without it this test fails)
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tiny_cnn()

        def forward(self, x):
            out = self.net(x)
            return out / 20 + torch.randn_like(out)

    model = Noisy()
    x, y = cnn_data(model.net, n=8)
    kw = dict(epsilon=0.01, version="custom", settings=CHEAP, batch_size=2, seed=1,
              attacks=("apgd-ce", "square"))
    whole = evaluate_autoattack(model, x, y, **kw)
    assert whole["randomized_model"] and whole["robust_accuracy_recheck"] is not None
    batch_spy.calls.clear()
    batch_spy.stop_after = 3
    with pytest.raises(Interrupted):
        evaluate_autoattack(model, x, y, resume_dir=tmp_path / "r", **kw)
    batch_spy.stop_after = None
    resumed = evaluate_autoattack(model, x, y, resume_dir=tmp_path / "r", **kw)
    assert seconds_free_bytes(resumed) == seconds_free_bytes(whole)


def test_resume_starts_over_when_what_determines_the_record_changed(tmp_path, batch_spy):
    model = tiny_cnn()
    x, y = cnn_data(model, n=6)
    kw = dict(epsilon=0.01, version="custom", settings=CHEAP, batch_size=2,
              attacks=("apgd-ce", "square"))
    batch_spy.stop_after = 2
    with pytest.raises(Interrupted):
        evaluate_autoattack(model, x, y, seed=0, resume_dir=tmp_path / "r", **kw)
    batch_spy.stop_after = None
    other = tiny_cnn(seed=1)       # another seed, a retrained model, other examples
    for m, xs, ys, seed in ((model, x, y, 1), (other, x, y, 0), (model, x.flip(0), y.flip(0), 0)):
        batch_spy.calls.clear()
        got = evaluate_autoattack(m, xs, ys, seed=seed, resume_dir=tmp_path / "r", **kw)
        ran = len(batch_spy.calls)
        batch_spy.calls.clear()
        fresh = evaluate_autoattack(m, xs, ys, seed=seed, **kw)
        assert ran == len(batch_spy.calls) > 0         # every batch ran: nothing stale kept
        assert seconds_free_bytes(got) == seconds_free_bytes(fresh)
        stamp = json.loads((tmp_path / "r" / "inputs.json").read_text())
        assert stamp["seed"] == seed and stamp["epsilon"] == 0.01


@pytest.fixture(scope="module")
def trained_tiny(tmp_path_factory, tiny_recipe, make_synthfaces):
    from atat.training.train import TrainSpec, train

    d = tmp_path_factory.mktemp("aa_model")
    root = make_synthfaces(d / "ds", images_per_identity=8, seed=1)
    spec = TrainSpec(model_id="t/resnet18/nodef/seed0", dataset_root=str(root),
                     resolution=16, n_classes=4, architecture="resnet18",
                     defense={"type": "nodef"},
                     training=tiny_recipe(eval_batch_size=16, lr_milestones=[]),
                     augmentation={"random_resized_crop": False, "horizontal_flip": False,
                                   "color_jitter": False}, seed=0)
    with one_thread():
        train(spec, out_model=d / "m.pt", out_metrics=d / "m.json",
              resume_path=d / "m.resume.pt", progress=False)
    return d / "m.pt", root


def test_model_file_job_resumes_per_epsilon_and_per_batch(tmp_path, trained_tiny, batch_spy):
    # rule autoattack's job with autoattack.job per_model: killed in the second epsilon (after
    # its first batch), its outputs deleted (as Snakemake does), rerun: the first epsilon is
    # not recomputed, the second goes on from its saved batch, and every file is the one the
    # uninterrupted job writes (byte for byte but the seconds)
    from atat.robustness import evaluate_autoattack_model_file

    model_path, root = trained_tiny
    settings = {"split": "val", "n_examples": 6, "batch_size": 2, "version": "custom",
                "attacks": ["apgd-ce", "apgd-t", "fab-t", "square"], "settings": CHEAP,
                "seed": 0, "precision": "fp32"}
    eps = [0.031, 1e-5]

    def job(out_dir, resume_dir=None):
        outputs = {e: out_dir / f"eps{e}.json" for e in eps}
        with one_thread():
            return evaluate_autoattack_model_file(
                model_path=model_path, dataset_root=root, outputs=outputs, settings=settings,
                resolution=16, resume_dir=resume_dir)

    job(tmp_path / "whole")
    first_eps = [c for c in batch_spy.calls if c[1] == 0.031]
    assert first_eps and len(first_eps) < len(batch_spy.calls)
    batch_spy.calls.clear()
    batch_spy.stop_after = len(first_eps) + 1
    resume = tmp_path / ".resume" / "autoattack" / "t" / "resnet18" / "nodef" / "seed0"
    with pytest.raises(Interrupted):
        job(tmp_path / "cut", resume)
    assert (resume / "eps0.031" / "record.json").is_file()
    assert len(list((resume / "eps1e-05").rglob("batch*.pt"))) == 1
    for f in (tmp_path / "cut").glob("*.json"):
        f.unlink()
    batch_spy.calls.clear()
    batch_spy.stop_after = None
    job(tmp_path / "cut", resume)
    assert batch_spy.calls and all(e == 1e-5 for _, e in batch_spy.calls)
    for e in eps:
        assert (seconds_free_bytes(tmp_path / "cut" / f"eps{e}.json")
                == seconds_free_bytes(tmp_path / "whole" / f"eps{e}.json")), e
    assert not (resume / "eps0.031").exists() and not (resume / "eps1e-05").exists()
