"""Training loop: lowest-val-loss checkpoint, resume equivalence, AT-AT loss, divergence."""

import copy
import dataclasses
import json

import pytest
import torch

from atat.data.synthfaces import generate_synthfaces
from atat.training.defenses import build_defense
from atat.training.defenses.base import StepContext
from atat.training.train import TrainingDivergedError, TrainSpec, load_model, train

AUG = {"random_resized_crop": True, "rrc_scale": [0.85, 1.0], "horizontal_flip": True,
       "color_jitter": True, "jitter": {"brightness": 0.2, "contrast": 0.2, "saturation": 0.1,
                                        "hue": 0.1}}
RECIPE = {"optimizer": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 0.0,
          "batch_size": 16, "eval_batch_size": 64, "epochs": 4, "lr_milestones": [2, 3],
          "lr_gamma": 0.1, "eval_every": 1, "checkpoint_every": 1, "pretrained": False,
          "num_workers": 0}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "ds"
    generate_synthfaces(out, n_private_identities=4, n_public_identities=2,
                        images_per_identity=12, public_images_per_identity=2, resolution=32,
                        seed=3, progress=False)
    return str(out / "private")


def spec(data_root, defense=None, **training):
    return TrainSpec(model_id="test/resnet18/x/seed0", dataset_root=data_root, resolution=32,
                     n_classes=4, architecture="resnet18",
                     defense=defense or {"type": "nodef"}, training={**RECIPE, **training},
                     augmentation=AUG, seed=0)


def run(s, tmp, name, **kw):
    return train(s, out_model=tmp / f"{name}.pt", out_metrics=tmp / f"{name}.json",
                 resume_path=tmp / f"{name}.resume.pt", progress=False, **kw)


def test_kept_checkpoint_is_lowest_validation_loss(data_root, tmp_path):
    metrics = run(spec(data_root), tmp_path, "a")
    evals = [h for h in metrics["history"] if "val_loss" in h]
    assert len(evals) == RECIPE["epochs"]
    best = min(evals, key=lambda h: h["val_loss"])
    assert metrics["best_epoch"] == best["epoch"]
    assert metrics["val_loss"] == pytest.approx(best["val_loss"])
    # the saved weights reproduce the best evaluation's validation loss
    from atat.data.loading import make_loader
    from atat.training.train import evaluate
    model, defense, ckpt = load_model(tmp_path / "a.pt")
    val = evaluate(model, defense, make_loader(data_root, "val", resolution=32, batch_size=64,
                                               train=False), torch.device("cpu"))
    assert val["loss"] == pytest.approx(best["val_loss"], rel=1e-5)
    assert ckpt["best_epoch"] == best["epoch"]
    assert 0 <= metrics["test_acc"] <= 1 and not (tmp_path / "a.resume.pt").exists()


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(data_root, tmp_path):
    s = spec(data_root, defense={"type": "atat", "epsilon": 0.01, "step_size": 0.005,
                                 "iterations": 2}, eval_every=2)
    full = run(s, tmp_path, "full")
    assert run(s, tmp_path, "part", stop_after_epochs=2) is None
    assert (tmp_path / "part.resume.pt").exists() and not (tmp_path / "part.pt").exists()
    resumed = run(s, tmp_path, "part")
    a = torch.load(tmp_path / "full.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "part.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert full["test_acc"] == resumed["test_acc"]
    assert [h["train_loss"] for h in full["history"]] == [h["train_loss"] for h in resumed["history"]]


def test_resume_checkpoint_of_another_config_is_ignored(data_root, tmp_path):
    run(spec(data_root), tmp_path, "x", stop_after_epochs=1)
    m = run(spec(data_root, lr=5e-4), tmp_path, "x")
    assert len(m["history"]) == RECIPE["epochs"]


def test_nan_loss_stops_with_a_clear_message(data_root, tmp_path):
    with pytest.raises(TrainingDivergedError, match="lr"):
        run(spec(data_root, lr=float("inf")), tmp_path, "nan")
    assert not (tmp_path / "nan.pt").exists()


def test_atat_loss_is_clean_ce_plus_weighted_targeted_ce():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 5))
    x = torch.rand(8, 3, 4, 4) * 2 - 1
    y = torch.randint(0, 5, (8,))
    d = build_defense({"type": "atat", "epsilon": 0.05, "step_size": 0.01, "iterations": 3,
                       "weight_adv": 0.5}, 5)
    ctx = StepContext(epoch=0, step=0, n_classes=5, generator=torch.Generator().manual_seed(7))
    loss, logs = d.training_loss(model, x, y, ctx)
    # recompute independently with the same random draws
    from atat.training.pgd import pgd, sample_targets
    g = torch.Generator().manual_seed(7)
    t = sample_targets(y, 5, g)
    assert (t != y).all()
    x_adv = pgd(model, x, t, epsilon=0.05, step_size=0.01, iterations=3, targeted=True,
                random_start=True, generator=g)
    ce = torch.nn.functional.cross_entropy
    expected = ce(model(x), y, reduction="sum") + 0.5 * ce(model(x_adv), t, reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert 0 <= logs["attack_success"] <= 1


def test_permuted_labels_keep_the_histogram_and_break_the_pairing():
    from collections import Counter

    from atat.training.train import permuted_targets
    targets = [i % 10 for i in range(2000)]
    perm = permuted_targets(targets, 42)
    assert Counter(perm) == Counter(targets)
    assert perm == permuted_targets(targets, 42) and perm != permuted_targets(targets, 43)
    same = sum(a == b for a, b in zip(targets, perm)) / len(targets)
    assert same < 0.15  # chance level is 1/10; the true pairing is gone


def test_permuted_label_training_uses_the_permuted_labels(data_root, tmp_path, monkeypatch):
    import atat.training.train as T
    from atat.data.loading import ManifestDataset
    seen = []
    real = T.permuted_targets
    monkeypatch.setattr(T, "permuted_targets", lambda t, s: seen.append((list(t), real(t, s)))
                        or seen[-1][1])
    batches = []
    real_step = T.Defense.train_step

    def spy(self, model, opt, x, y, ctx):
        batches.append(y.clone())
        return real_step(self, model, opt, x, y, ctx)

    monkeypatch.setattr(T.Defense, "train_step", spy)
    m = run(spec(data_root, permute_labels_seed=42, epochs=1, lr_milestones=[]), tmp_path, "perm")
    assert m["labels_permuted"] and len(seen) == 1
    original, permuted = seen[0]
    assert original == ManifestDataset(data_root, "train").targets and permuted != original
    from collections import Counter
    assert Counter(torch.cat(batches).tolist()) <= Counter(permuted)


def test_early_stop_keeps_the_first_snapshot_reaching_the_target(data_root, tmp_path):
    m = run(spec(data_root, stop_at_val_acc=0.0), tmp_path, "es")
    assert m["stopped_early"] and m["best_epoch"] == 0 and len(m["history"]) == 1


def test_keep_last_keeps_the_final_epoch_and_train_acc_uses_the_trained_labels(data_root,
                                                                              tmp_path):
    m = run(spec(data_root, permute_labels_seed=42, keep="last", eval_every=3), tmp_path, "last")
    assert m["best_epoch"] == RECIPE["epochs"] - 1 and m["checkpoint_rule"] == "last"
    # train_acc is measured on the permuted labels the model was fitted to: recompute it
    from atat.data.loading import make_loader
    from atat.training.train import evaluate, permuted_targets
    model, defense, _ = load_model(tmp_path / "last.pt")
    loader = make_loader(data_root, "train", resolution=32, batch_size=64, train=False)
    loader.dataset.targets = permuted_targets(loader.dataset.targets, 42)
    assert m["train_acc"] == pytest.approx(evaluate(model, defense, loader, "cpu")["acc"])
    default = run(spec(data_root, epochs=2, lr_milestones=[1]), tmp_path, "default")
    assert default["checkpoint_rule"] == "lowest_val_loss"


# --------------------------------------------------------------- issue 13 items 5, 7, 9, 16
def test_a_loss_far_above_its_start_stops_the_run_naming_model_and_lr(data_root, tmp_path):
    """lr 1e8 gives finite losses of ~1e18 per sample (no NaN): once the run was accepted."""
    with pytest.raises(TrainingDivergedError) as info:
        run(spec(data_root, lr=1e8), tmp_path, "div")
    msg = str(info.value)
    assert "test/resnet18/x/seed0" in msg and "training.lr = 100000000.0" in msg
    assert "diverged" in msg and "its start" in msg
    assert not (tmp_path / "div.pt").exists() and not (tmp_path / "div.json").exists()


def test_the_divergence_reference_survives_a_resume(data_root, tmp_path, monkeypatch):
    import atat.training.train as T
    s = spec(data_root)
    assert run(s, tmp_path, "ref", stop_after_epochs=1) is None
    state = torch.load(tmp_path / "ref.resume.pt", weights_only=False)
    start = state["history"][0]["loss_start"]
    assert start == pytest.approx(torch.log(torch.tensor(4.0)).item(), rel=0.5)
    # a resumed run compares against the stored start, not against its own first batch
    monkeypatch.setattr(T, "DIVERGENCE_FACTOR", 1e-9)
    with pytest.raises(TrainingDivergedError, match=f"its start \\({start:.3g}\\)"):
        run(s, tmp_path, "ref")


def test_class_count_of_the_dataset_must_match_n_classes(data_root, tmp_path):
    s = dataclasses.replace(spec(data_root), n_classes=530)
    with pytest.raises(ValueError) as info:
        run(s, tmp_path, "classes")
    msg = str(info.value)
    assert "530" in msg and "has 4 classes" in msg and data_root in msg
    assert not (tmp_path / "classes.pt").exists()


def test_val_drop_last_drops_the_last_partial_test_batch_too(data_root, tmp_path):
    """REPO data_loaders.py: val and test loaders both use drop_last = val_drop_last."""
    from atat.data.manifest import read_dataset
    n_test = len(read_dataset(data_root, "test")[0])
    n_val = len(read_dataset(data_root, "val")[0])
    bs = 2
    assert n_test % bs and n_val % bs  # both splits end in a partial batch
    kw = dict(epochs=1, lr_milestones=[], eval_batch_size=bs)
    kept = run(spec(data_root, **kw), tmp_path, "keep")
    dropped = run(spec(data_root, val_drop_last=True, **kw), tmp_path, "drop")
    assert kept["n_test"] == n_test
    assert dropped["n_test"] == n_test // bs * bs
    with pytest.raises(ValueError, match="eval_batch_size"):
        run(spec(data_root, val_drop_last=True, epochs=1, lr_milestones=[],
                 eval_batch_size=n_test + n_val), tmp_path, "empty")


def test_early_stop_target_named_by_a_variant_is_read_from_its_metrics(data_root, tmp_path):
    """Paper Table 3: the early-stopped NoDef stops at the Unseen-Pixels model's val_acc, read
    from that model's metrics.json when the job runs (no hand-copied number)."""
    ref = tmp_path / "unseen_metrics.json"
    ref.write_text(json.dumps({"model_id": "x/resnet18/unseen_pixels/seed0", "val_acc": 0.0}))
    s = spec(data_root, stop_at_val_acc="unseen_pixels")
    s = dataclasses.replace(s, stop_reference_metrics=str(ref))
    m = run(s, tmp_path, "es_ref")
    assert m["stopped_early"] and m["best_epoch"] == 0 and len(m["history"]) == 1
    assert m["training"]["stop_at_val_acc"] == 0.0
    assert m["stop_reference"] == {"defense": "unseen_pixels", "metrics": str(ref),
                                   "model_id": "x/resnet18/unseen_pixels/seed0", "val_acc": 0.0}
    # a target above every reachable accuracy: trains to the end, lowest-val-loss model kept
    ref.write_text(json.dumps({"val_acc": 1.0 + 1e-12}))
    with pytest.raises(ValueError, match="not an accuracy"):
        run(s, tmp_path, "es_bad")
    # the reference accuracy is part of what determines the model (resume fingerprint)
    from atat.training.train import resolve_stop_target
    ref.write_text(json.dumps({"val_acc": 0.5}))
    a = resolve_stop_target(s)[0].fingerprint()
    ref.write_text(json.dumps({"val_acc": 0.6}))
    assert resolve_stop_target(s)[0].fingerprint() != a
    with pytest.raises(ValueError, match="stop_reference_metrics"):
        run(spec(data_root, stop_at_val_acc="unseen_pixels"), tmp_path, "es_none")
    ref.unlink()
    with pytest.raises(ValueError, match="unseen_metrics.json"):
        run(s, tmp_path, "es_missing")


def test_models_without_a_stop_reference_keep_their_fingerprint(data_root):
    """The new TrainSpec field must not change the fingerprint (resume files) of any other
    model: it only counts when set."""
    import hashlib
    s = spec(data_root)
    old = {k: v for k, v in dataclasses.asdict(s).items()
           if k not in ("model_id", "stop_reference_metrics")}
    blob = json.dumps(old, sort_keys=True, default=str)
    assert s.fingerprint() == hashlib.sha256(blob.encode()).hexdigest()[:16]
    assert dataclasses.replace(s, stop_reference_metrics="m.json").fingerprint() != s.fingerprint()


def test_training_adam_is_multi_tensor_and_bitwise_equal_to_the_default_loop():
    """atat.training.train uses Adam(foreach=True) for speed on CPU; it must not change a number."""
    import torch.nn.functional as F

    from atat.training.models import build_model
    from atat.training.train import _adam

    recipe = {"lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 1e-4, "lr_milestones": [1],
              "lr_gamma": 0.1}
    torch.manual_seed(0)
    net = build_model("resnet18", 5)
    ref = copy.deepcopy(net)
    opt, _ = _adam(net.parameters(), recipe)
    assert opt.param_groups[0]["foreach"] is True
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, 3, 16, 16, generator=g)
        y = torch.randint(0, 5, (4,), generator=g)
        for m, o in ((net, opt), (ref, opt_ref)):
            o.zero_grad()
            F.cross_entropy(m(x), y, reduction="sum").backward()
            o.step()
    for (k, a), b in zip(net.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), k


# ------------------------------------------------------------ opt-in speed-ups (issue 16 §3)
ATAT = {"type": "atat", "epsilon": 0.01, "step_size": 0.005, "iterations": 2,
        "weight_adv": 0.5}


def _weights(path):
    model, _, _ = load_model(path)
    return model.state_dict()


def test_default_speedup_keys_are_the_papers_setting_bitwise(data_root, tmp_path):
    """training.autocast: none and memory_format: contiguous are exactly the default run."""
    a = run(spec(data_root, ATAT, epochs=1), tmp_path, "a")
    b = run(spec(data_root, ATAT, epochs=1, autocast="none", memory_format="contiguous"),
            tmp_path, "b")
    wa, wb = _weights(tmp_path / "a.pt"), _weights(tmp_path / "b.pt")
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert a["history"][0]["train_loss"] == b["history"][0]["train_loss"]


def test_bf16_autocast_trains_and_keeps_atats_pgd_in_float32(data_root, tmp_path, monkeypatch):
    import atat.training.defenses.atat as atat_defense
    from atat.base.precision import autocast_enabled, tf32_disabled

    seen = {"pgd": [], "step": []}
    original = atat_defense.pgd

    def spied(model, *args, **kwargs):
        def recorded(z):
            out = model(z)
            seen["pgd"].append((autocast_enabled(), tf32_disabled(), z.dtype, out.dtype))
            return out
        seen["step"].append(autocast_enabled())
        return original(recorded, *args, **kwargs)

    monkeypatch.setattr(atat_defense, "pgd", spied)
    metrics = run(spec(data_root, ATAT, epochs=1, autocast="bf16"), tmp_path, "bf16")
    assert seen["step"] and all(seen["step"])            # the step ran under autocast ...
    assert seen["pgd"] and all(p == (False, True, torch.float32, torch.float32)
                               for p in seen["pgd"])    # ... its PGD did not
    assert all(v.dtype == torch.float32 for v in _weights(tmp_path / "bf16.pt").values()
               if v.is_floating_point())
    assert 0 <= metrics["test_acc"] <= 1
    fp32 = run(spec(data_root, ATAT, epochs=1), tmp_path, "fp32")
    assert metrics["history"][0]["train_loss"] == pytest.approx(
        fp32["history"][0]["train_loss"], rel=0.05)


def test_channels_last_trains_the_same_model_up_to_float_order(data_root, tmp_path):
    run(spec(data_root, epochs=1), tmp_path, "std")
    run(spec(data_root, epochs=1, memory_format="channels_last"), tmp_path, "cl")
    a, b = _weights(tmp_path / "std.pt"), _weights(tmp_path / "cl.pt")
    keys = [k for k in a if a[k].is_floating_point()]
    va = torch.cat([a[k].flatten() for k in keys])
    vb = torch.cat([b[k].flatten() for k in keys])
    # Adam turns float-order differences of small gradients into steps of up to ~lr
    assert float((va - vb).norm() / va.norm()) < 1e-3
    assert not torch.equal(va, vb)  # the layout did take effect (sums in another order)


def test_unknown_speedup_values_stop_naming_the_key(data_root, tmp_path):
    with pytest.raises(ValueError, match="training.autocast must be one of none, bf16"):
        run(spec(data_root, epochs=1, autocast="fp16"), tmp_path, "bad")
    with pytest.raises(ValueError, match="training.memory_format must be one of contiguous"):
        run(spec(data_root, epochs=1, memory_format="nhwc"), tmp_path, "bad2")


# ------------------------------------------------ per-test-image predictions and determinism
def _predictions(path):
    import pandas as pd
    from atat.training.train import PREDICTION_COLUMNS
    df = pd.read_csv(path)
    assert list(df.columns) == PREDICTION_COLUMNS
    return df


def test_predictions_file_is_the_test_split_in_order_and_agrees_with_the_metrics(data_root,
                                                                                 tmp_path):
    from atat.data.loading import make_loader
    from atat.data.manifest import read_dataset
    from atat.training.train import evaluate
    m = run(spec(data_root, epochs=2, lr_milestones=[1]), tmp_path, "p",
            out_predictions=tmp_path / "sub" / "test_predictions.csv")
    df = _predictions(tmp_path / "sub" / "test_predictions.csv")
    records = read_dataset(data_root, "test")[0]
    assert df["index"].tolist() == list(range(len(records)))
    assert df["label"].tolist() == records["label"].tolist()   # the manifest's order
    assert (df["correct"] == (df["pred"] == df["label"]).astype(int)).all()
    assert df["correct"].mean() == pytest.approx(m["test_acc"]) and len(df) == m["n_test"]
    # a deterministic model: the second clean pass repeats the first
    assert (df["pred"] == df["pred_repeat"]).all() and m["eval_agreement"] == 1.0
    # the predictions are the saved model's
    model, defense, _ = load_model(tmp_path / "p.pt")
    pairs = []
    evaluate(model, defense, make_loader(data_root, "test", resolution=32, batch_size=5,
                                         train=False), torch.device("cpu"), predictions=pairs)
    assert [p for _, p in pairs] == df["pred"].tolist()
    # without out_predictions nothing is written, and the metrics still say the agreement
    other = run(spec(data_root, epochs=2, lr_milestones=[1]), tmp_path / "o", "p")
    assert other["eval_agreement"] == 1.0 and not (tmp_path / "o" / "test_predictions.csv").exists()


def test_predictions_cover_the_whole_test_split_under_val_drop_last(data_root, tmp_path):
    from atat.data.manifest import read_dataset
    n_test = len(read_dataset(data_root, "test")[0])
    m = run(spec(data_root, val_drop_last=True, epochs=1, lr_milestones=[], eval_batch_size=2),
            tmp_path, "d", out_predictions=tmp_path / "d.csv")
    df = _predictions(tmp_path / "d.csv")
    assert n_test % 2 and m["n_test"] == n_test - 1      # the metrics' pass dropped one image
    assert len(df) == n_test and df["index"].tolist() == list(range(n_test))


def test_predictions_of_mid_differ_between_passes_it_samples_at_evaluation(data_root,
                                                                           tmp_path,
                                                                           monkeypatch):
    """MID draws its bottleneck's noise in evaluation too: the two clean passes disagree on some
    images, and eval_agreement says how often (the determinism precondition reports it). The
    noise is scaled up here: on 5 test images a one-epoch MID's sigma (~0.007) flips none."""
    from atat.training.defenses import mid as mid_module
    monkeypatch.setattr(mid_module.torch, "randn_like",
                        lambda t: 1e4 * torch.randn(t.shape, dtype=t.dtype, device=t.device))
    m = run(spec(data_root, {"type": "mid", "beta": 0.01, "bottleneck_dim": 8}, epochs=1,
                 lr_milestones=[]), tmp_path, "mid", out_predictions=tmp_path / "mid.csv")
    df = _predictions(tmp_path / "mid.csv")
    assert m["eval_agreement"] == pytest.approx((df["pred"] == df["pred_repeat"]).mean())
    assert m["eval_agreement"] < 1.0
