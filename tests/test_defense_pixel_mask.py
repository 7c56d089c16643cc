"""Unseen-Pixels pixel-mask defense (paper App. E.2; docs/sources.md#unseen-pixels)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms as T

from atat.base import io
from atat.data.loading import DEFAULT_AUG, build_transform
from atat.training.defenses.base import DefenseConfigError, ModelContext, StepContext
from atat.training.defenses.pixel_mask import (MaskTransform, PixelMaskDefense, apply_threshold_,
                                      binarize, group_norms, mask_stats)
from atat.training.models import build_model

R = 32
CTX = ModelContext(architecture="resnet18", resolution=R)


def defense(**params):
    return PixelMaskDefense(params, n_classes=4, context=CTX)


def stage_checkpoint(path, mask):
    """A stage-1/2 model file in the atat.training.train format holding ``mask``."""
    d = defense(stage="group_lasso")
    model = d.build_model(build_model("resnet18", 4))
    with torch.no_grad():
        model.mask.weight.copy_(mask)
    io.torch_save({"format_version": 1, "model_id": "x", "architecture": "resnet18",
                   "n_classes": 4, "resolution": R, "defense": {"type": "pixel_mask"},
                   "state_dict": model.state_dict(), "defense_state": {}, "best_epoch": 0},
                  path)


def random_mask(seed=0, keep=0.3):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(3, R, R, generator=g) + 0.1
    drop_pixel = torch.rand(R, R, generator=g) > keep
    w[:, drop_pixel] = 0.0
    w[1, :4, :] = 0.0          # single channels dropped in kept pixels (element-wise binarising)
    w[2, 5, 5] = 1e-9          # ≈0 counts as deleted (REPO isclose)
    return w


def retrain_model(tmp_path, mask):
    stage_checkpoint(tmp_path / "stage2.pt", mask)
    d = defense(stage="retrain", prior="unseen_pixels_agl", prior_model=str(tmp_path / "stage2.pt"))
    model = d.build_model(build_model("resnet18", 4))
    pre = d.pre_transform()
    d.on_epoch_start(0, model)
    return d, model, pre


# ------------------------------------------------------------------------------ augmentation
@pytest.mark.parametrize("stage", ["group_lasso", "adaptive"])
def test_mask_stage_augmentation_is_brightness_saturation_hue_only(stage):
    kw = {"prior_model": "unused.pt"} if stage == "adaptive" else {}
    aug = defense(stage=stage, **kw).train_augmentation(DEFAULT_AUG)
    assert aug["random_resized_crop"] is False and aug["horizontal_flip"] is False
    assert aug["jitter"] == {"brightness": 0.2, "contrast": 0.0, "saturation": 0.1, "hue": 0.1}
    steps = build_transform(R, train=True, aug=aug).transforms
    assert [type(s) for s in steps] == [T.Resize, T.ColorJitter, T.ToTensor, T.Normalize]
    jitter = steps[1]
    assert jitter.contrast is None
    assert jitter.brightness == (0.8, 1.2) and jitter.saturation == (0.9, 1.1)
    assert jitter.hue == (-0.1, 0.1)


def test_retrain_keeps_the_full_target_augmentation(tmp_path):
    d, _, _ = retrain_model(tmp_path, random_mask())
    assert d.train_augmentation(DEFAULT_AUG) == DEFAULT_AUG


def test_config_checks():
    with pytest.raises(DefenseConfigError, match="prior"):
        defense(stage="adaptive")
    with pytest.raises(DefenseConfigError, match="takes no prior"):
        defense(stage="group_lasso", prior="x")
    with pytest.raises(DefenseConfigError):
        defense(stage="stage4")
    assert defense().lam == 0.01 and defense(stage="adaptive", prior="a").lam == 0.1


# ------------------------------------------------------------------------------ penalty, threshold
def test_group_lasso_and_adaptive_penalties(tmp_path):
    d1 = defense(stage="group_lasso")
    m1 = d1.build_model(build_model("resnet18", 4))
    assert torch.all(m1.mask.weight == 0.5)
    expected = 0.01 * R * R * np.sqrt(3 * 0.25)
    assert float(d1.penalty(m1).detach()) == pytest.approx(expected, rel=1e-5)
    prior = random_mask(1)
    stage_checkpoint(tmp_path / "s1.pt", prior)
    d2 = defense(stage="adaptive", prior_model=str(tmp_path / "s1.pt"))
    m2 = d2.build_model(build_model("resnet18", 4))
    d2.on_epoch_start(0, m2)
    n_prior = prior.norm(dim=0).double()
    expected2 = 0.1 * (np.sqrt(0.75) / (n_prior + 1e-8)).sum()
    assert float(d2.penalty(m2).detach()) == pytest.approx(float(expected2), rel=1e-5)
    # the prior norms travel in the defense state (not re-read when a model is loaded)
    d3 = defense(stage="adaptive", prior_model=str(tmp_path / "missing.pt"))
    d3.load_state_dict(d2.state_dict())
    assert torch.equal(d3.prior_norms, d2.prior_norms)


def test_penalty_form_switch_reads_lambda1_as_the_papers_ridge_norm():
    """Issue 13 item 6: paper E.2's stage-1 loss L + λ1·‖D^Norm‖₂ (``penalty_form: ridge``)
    vs REPO's group lasso λ1·Σ_p n_p (default)."""
    w = random_mask(2)
    n = w.norm(dim=0).double()
    for form, expected in (("group_lasso", 0.01 * n.sum()),
                           ("ridge", 0.01 * n.pow(2).sum().sqrt())):
        d = defense(stage="group_lasso", penalty_form=form)
        m = d.build_model(build_model("resnet18", 4))
        with torch.no_grad():
            m.mask.weight.copy_(w)
        assert float(d.penalty(m).detach()) == pytest.approx(float(expected), rel=1e-5), form
    # the two readings pull on a pixel differently: group lasso by the unit direction of its
    # triplet, ridge by the triplet divided by the norm of the whole mask
    d = defense(stage="group_lasso", penalty_form="ridge", lambda_lasso=1.0)
    m = d.build_model(build_model("resnet18", 4))
    d.penalty(m).backward()
    assert torch.allclose(m.mask.weight.grad, m.mask.weight.detach() / m.mask.weight.norm())
    assert defense().params["penalty_form"] == "group_lasso"
    with pytest.raises(DefenseConfigError, match="penalty_form"):
        defense(stage="adaptive", prior="a", penalty_form="ridge")
    with pytest.raises(DefenseConfigError, match="penalty_form"):
        defense(penalty_form="lasso")


@pytest.mark.parametrize("params", [{"mask_init": 0.0}, {"mask_init": 3.0},
                                    {"mask_lr": 100.0}, {"mask_lr": 0.0}])
def test_meaningless_mask_settings_are_rejected(params):
    with pytest.raises(DefenseConfigError, match=next(iter(params))):
        defense(**params)


def test_threshold_schedule_and_hard_threshold_after_each_step():
    d = defense(stage="group_lasso", lambda_lasso=0.0)
    model = d.build_model(build_model("resnet18", 4))
    d.on_epoch_start(9, model)
    assert d.tau == 1e-6
    d.on_epoch_start(10, model)
    assert d.tau == 0.0025
    with torch.no_grad():
        model.mask.weight[:, 0, 0] = 0.001          # norm ≈ 0.0017 <= 0.0025: deleted
        model.mask.weight[:, 1, 1] = torch.tensor([0.003, 0.0, 0.0])  # norm 0.003: kept
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = torch.randn(4, 3, R, R), torch.tensor([0, 1, 2, 3])
    ctx = StepContext(epoch=10, step=0, n_classes=4, generator=torch.Generator())
    _, logs = d.train_step(model, opt, x, y, ctx)
    w = model.mask.weight.detach()
    assert torch.all(w[:, 0, 0] == 0) and w[0, 1, 1] == pytest.approx(0.003)
    assert logs["kept_pixel_fraction"] == (R * R - 1) / (R * R)
    w2 = torch.tensor([[[0.5, 1e-7]], [[0.0, 0.0]], [[0.0, 0.0]]])
    assert apply_threshold_(w2, 1e-6) == 1 and w2[0, 0, 1] == 0


def test_mask_lr_moves_the_mask_with_its_own_rate_and_defaults_to_one_optimiser():
    # default (paper/REPO): one parameter list, one lr
    d = defense(stage="group_lasso")
    model = d.build_model(build_model("resnet18", 4))
    assert all(isinstance(p, torch.nn.Parameter) for p in d.trainable_parameters(model))
    # mask_lr: a second Adam group holding only the mask, decayed by the same scheduler
    d = defense(stage="group_lasso", mask_lr=0.05)
    model = d.build_model(build_model("resnet18", 4))
    opt = torch.optim.Adam(d.trainable_parameters(model), lr=1e-3)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[1], gamma=0.1)
    net, mask = opt.param_groups
    assert mask["params"] == [model.mask.weight] and mask["lr"] == 0.05 and net["lr"] == 1e-3
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == \
        sum(p.numel() for p in model.parameters())
    before = model.mask.weight.detach().clone()
    x, y = torch.randn(4, 3, R, R), torch.tensor([0, 1, 2, 3])
    ctx = StepContext(epoch=0, step=0, n_classes=4, generator=torch.Generator())
    d.on_epoch_start(0, model)
    d.train_step(model, opt, x, y, ctx)
    # Adam's first step moves every weight with a non-zero gradient by ~lr
    step = (model.mask.weight.detach() - before).abs()
    assert step.max() == pytest.approx(0.05, rel=1e-3)
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-4, 0.005])
    with pytest.raises(DefenseConfigError):  # lr must be > 0
        defense(stage="group_lasso", mask_lr=0)


# ------------------------------------------------------------------------------ deleted pixels
def test_binarised_mask_deleted_pixels_have_zero_gradient_and_no_effect(tmp_path):
    mask = random_mask()
    _, model, _ = retrain_model(tmp_path, mask)
    binary = binarize(mask)
    assert torch.equal(model.mask.weight, binary)
    assert not model.mask.weight.requires_grad
    assert binary[2, 5, 5] == 0 and binary[1, :4].sum() == 0 and 0 < binary.mean() < 1
    deleted = binary == 0
    model.eval()
    torch.manual_seed(0)
    x = torch.randn(4, 3, R, R, requires_grad=True)
    y = torch.tensor([0, 1, 2, 3])
    F.cross_entropy(model(x), y, reduction="sum").backward()
    g = x.grad
    assert torch.all(g[:, deleted] == 0)           # exactly zero
    assert (g[:, ~deleted] != 0).float().mean() > 0.5
    # changing deleted pixels changes nothing (logits and hidden stages)
    x2 = x.detach().clone()
    x2[:, deleted] = torch.randn_like(x2[:, deleted]) * 5
    with torch.no_grad():
        assert torch.equal(model(x.detach()), model(x2))
        _, h1 = model.forward_hidden(x.detach())
        _, h2 = model.forward_hidden(x2)
        assert all(torch.equal(a, b) for a, b in zip(h1, h2))
        x3 = x.detach().clone()
        x3[:, ~deleted] += 1.0
        assert not torch.equal(model(x.detach()), model(x3))


def test_pre_augmentation_transform_hides_deleted_pixels_from_training(tmp_path):
    mask = random_mask(3)
    _, _, pre = retrain_model(tmp_path, mask)
    assert isinstance(pre, MaskTransform)
    deleted = binarize(mask) == 0
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, size=(R, R, 3), dtype=np.uint8)
    b = a.copy()
    d = deleted.permute(1, 2, 0).numpy()                 # (H, W, C)
    b[d] = rng.integers(0, 256, size=int(d.sum()), dtype=np.uint8)
    assert (a != b).any()
    img_a, img_b = Image.fromarray(a), Image.fromarray(b)
    masked = T.ToTensor()(pre(img_a))
    assert torch.allclose(masked[deleted], torch.full_like(masked[deleted], 127 / 255))
    full = T.Compose([pre, build_transform(R, train=True, aug=DEFAULT_AUG)])
    for seed in range(3):                                # crop, flip and jitter all on
        torch.manual_seed(seed)
        out_a = full(img_a)
        torch.manual_seed(seed)
        out_b = full(img_b)
        assert torch.equal(out_a, out_b)
    # without the mask the two images differ after the same augmentation
    plain = build_transform(R, train=True, aug=DEFAULT_AUG)
    torch.manual_seed(0)
    pa = plain(img_a)
    torch.manual_seed(0)
    assert not torch.equal(pa, plain(img_b))


def test_retrain_refuses_to_train_without_the_pre_transform(tmp_path):
    stage_checkpoint(tmp_path / "s2.pt", random_mask())
    d = defense(stage="retrain", prior_model=str(tmp_path / "s2.pt"))
    model = d.build_model(build_model("resnet18", 4))
    d.on_epoch_start(0, model)
    ctx = StepContext(epoch=0, step=0, n_classes=4, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="pre-augmentation"):
        d.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                     torch.randn(2, 3, R, R), torch.tensor([0, 1]), ctx)


# ------------------------------------------------------------------------------ kept fraction
def test_kept_fraction_of_the_retrain_mask_is_its_mean(tmp_path):
    d, model, _ = retrain_model(tmp_path, random_mask(4))
    stats = d.final_metrics(model)
    assert stats["kept_fraction"] == pytest.approx(float(model.mask.weight.mean()), abs=1e-7)
    assert stats["kept_fraction"] == stats["mask_mean"]
    assert stats["kept_pixels"] == int((group_norms(model.mask.weight) > 0).sum())


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, make_synthfaces):
    return str(make_synthfaces(tmp_path_factory.mktemp("synth") / "ds", n_public_identities=2,
                               images_per_identity=12, public_images_per_identity=2,
                               resolution=R))


def test_kept_fraction_written_with_the_model_is_the_kept_masks_mean(data_root, tmp_path,
                                                                    monkeypatch):
    from atat.training.defenses import REGISTRY
    from atat.training.train import TrainSpec, load_model, train
    monkeypatch.setitem(REGISTRY, "pixel_mask", PixelMaskDefense)  # until registered
    recipe = {"optimizer": "adam", "lr": 0.05, "betas": [0.9, 0.999], "weight_decay": 0.0,
              "batch_size": 16, "eval_batch_size": 64, "epochs": 2, "lr_milestones": [1],
              "lr_gamma": 1.0, "eval_every": 1, "checkpoint_every": 1, "pretrained": False,
              "num_workers": 0}
    variant = {"type": "pixel_mask", "stage": "group_lasso", "lambda_lasso": 1.0,
               "initial_threshold": 1e-6, "change_threshold_epoch": 1, "threshold": 0.55}
    spec = TrainSpec(model_id="t/resnet18/pm/seed0", dataset_root=data_root, resolution=R,
                     n_classes=4, architecture="resnet18", defense=variant, training=recipe,
                     augmentation=PixelMaskDefense(variant, 4, CTX).train_augmentation(DEFAULT_AUG),
                     seed=0)
    train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
          resume_path=tmp_path / "r.pt", progress=False)
    ckpt = torch.load(tmp_path / "m.pt", weights_only=True)
    w = ckpt["state_dict"]["mask.weight"]
    stats = ckpt["defense_state"]["mask_stats"]
    assert stats["kept_fraction"] == pytest.approx(float(binarize(w).mean()), abs=1e-7)
    assert stats["mask_mean"] == pytest.approx(float(w.mean()), abs=1e-7)
    assert 0 < stats["kept_fraction"] < 1
    model, d, _ = load_model(tmp_path / "m.pt")
    assert d.final_metrics(model)["kept_fraction"] == stats["kept_fraction"]
    # the binarised (stage-3) version of this mask has exactly this mean
    assert float(binarize(w).mean()) == pytest.approx(mask_stats(binarize(w))["mask_mean"])
