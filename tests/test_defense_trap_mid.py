"""Trap-MID (docs/sources.md#trap-mid): trapdoor-label schedule, augmentation, trigger/discriminator
update, trapdoor learning, state round trip, training through atat.training.train."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from atat.training.defenses import REGISTRY
from atat.training.defenses.base import DefenseConfigError, ModelContext, StepContext
from atat.training.defenses.trap_mid import TrapMID, trapdoor_label_vector
from atat.training.models import Classifier

C, R = 4, 16


def tiny(n_out=C, seed=0):
    torch.manual_seed(seed)
    f = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(2), nn.Flatten())
    return Classifier(f, nn.Linear(64, n_out), "tiny")


def defense(discriminator=False, **params):
    """A Trap-MID defense around a tiny classifier; a tiny discriminator replaces the
    ResNet one built by build_model (same code path, cheaper)."""
    d = TrapMID({"discriminator": False, **params}, C, ModelContext("resnet18", R))
    model = d.build_model(tiny())
    if discriminator:
        d.params["discriminator"] = True
        d.discriminator = tiny(1, seed=1)
    return d, model


COLORS = torch.rand(C, 3, 1, 1, generator=torch.Generator().manual_seed(0)) * 2 - 1


def batch(n, g):
    y = torch.randint(0, C, (n,), generator=g)
    x = (COLORS[y] * 0.5 + 0.3 * torch.randn(n, 3, R, R, generator=g)).clamp(-1, 1)
    return x, y


def test_params_defaults_and_checks():
    d = TrapMID({}, C)
    assert d.params == {"alpha": 0.007, "beta": 0.5, "step_size": 0.01, "discriminator": True,
                        "optimized": True}
    assert TrapMID({"alpha": 0.02, "beta": 0.2}, C).params["alpha"] == 0.02  # Trap-MID*
    for bad in ({"alpha": 0}, {"alpha": 1.5}, {"beta": -0.1}, {"step_size": 0},
                {"discriminator": 1}):
        with pytest.raises(DefenseConfigError):
            TrapMID(bad, C)


def test_label_vector_is_balanced_and_shuffled():
    g = torch.Generator().manual_seed(0)
    t = trapdoor_label_vector(22, 4, g)
    counts = torch.bincount(t, minlength=4)
    assert len(t) == 22 and counts.sum() == 22 and counts.max() - counts.min() <= 1
    assert sorted(counts.tolist()) == [5, 5, 6, 6]
    assert not torch.equal(t, t.sort().values)


def test_labels_per_epoch_use_the_counted_number_of_batches():
    d, _ = defense()
    g = torch.Generator().manual_seed(0)
    bs, n_batches = 5, 7
    epochs = []
    for epoch in range(3):
        d.on_epoch_start(epoch, None)
        epochs.append(torch.cat([d.trapdoor_labels(bs, StepContext(epoch, i, C, g))
                                 for i in range(n_batches)]))
    assert d._batches_per_epoch == n_batches
    for t in epochs[1:]:  # epochs after the first: one balanced vector of length bs*n_batches
        counts = torch.bincount(t, minlength=C)
        assert counts.max() - counts.min() <= 1 and counts.sum() == bs * n_batches
    assert all(0 <= int(v) < C for v in epochs[0])
    # a loop that announces the epoch length is used in the first epoch too
    d2, _ = defense()
    ctx = StepContext(0, 0, C, torch.Generator().manual_seed(0))
    ctx.steps_per_epoch = 3
    t = torch.cat([d2.trapdoor_labels(6, ctx) for _ in range(3)])
    assert sorted(torch.bincount(t, minlength=C).tolist()) == [4, 4, 5, 5]


def test_augmentation_is_per_sample_and_differentiable():
    d, _ = defense()
    torch.manual_seed(0)
    x = torch.rand(1, 3, R, R).repeat(16, 1, 1, 1).requires_grad_(True)
    out = d.augment(x)
    assert out.shape == x.shape
    distinct = {tuple(o.flatten()[:20].tolist()) for o in out.detach()}
    assert len(distinct) > 3  # independent random parameters per image
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_blend_and_build_model_make_triggers_and_a_resnet_discriminator():
    d = TrapMID({}, C, ModelContext("resnet18", R))
    model = d.build_model(tiny())
    assert d.triggers.shape == (C, 3, R, R)
    assert 0 <= d.triggers.min() and d.triggers.max() < 1
    assert d.discriminator.architecture == "resnet18" and d.discriminator.head.out_features == 1
    x = torch.rand(3, 3, R, R) * 2 - 1
    t = torch.tensor([2, 0, 2])
    assert torch.allclose(d.inject(x, t), 0.993 * x + 0.007 * d.triggers[t])
    with pytest.raises(ValueError, match="resolution"):
        d.inject(torch.rand(3, 3, 8, 8), t)
    assert model is not None


def test_trapdoor_is_learned_and_triggers_change():
    d, model = defense(alpha=0.5, beta=0.5)
    opt = torch.optim.Adam(d.trainable_parameters(model), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    xe, _ = batch(64, torch.Generator().manual_seed(5))
    te = torch.randint(0, C, (64,), generator=torch.Generator().manual_seed(6))
    initial = d.triggers.clone()
    before = d.trapdoor_accuracy(model, xe, te)
    for step in range(48):
        x, y = batch(16, g)
        loss, logs = d.train_step(model, opt, x, y, StepContext(step // 8, step, C, g))
        assert {"loss_trigger", "loss_clean", "loss_trapdoor", "trapdoor_acc"} <= set(logs)
    after = d.trapdoor_accuracy(model, xe, te)
    assert not torch.equal(d.triggers, initial)
    assert 0 <= d.triggers.min() and d.triggers.max() <= 1
    # (with beta = 0 the trigger updates alone reach ~0.73 here: the model loss matters)
    assert before < 0.5 and after >= 0.95


def test_model_loss_is_weighted_mean_ce_and_step_reports_sum():
    d, model = defense(beta=0.2, optimized=False)
    x, y = batch(6, torch.Generator().manual_seed(0))
    t = torch.tensor([0, 1, 2, 3, 0, 1])
    torch.manual_seed(3)
    loss, logs = d.model_loss(model, x, y, t)
    torch.manual_seed(3)  # same augmentation draws
    aug = torch.cat([d.augment(x), d.augment(d.inject(x, t))])
    logits = model(aug)
    expected = 0.8 * F.cross_entropy(logits[:6], y) + 0.2 * F.cross_entropy(logits[6:], t)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # train_step: same trapdoor labels (first epoch: one balanced block of 6 from the
    # generator) and the same augmentation draws -> it reports the mean loss times the batch
    t_step = trapdoor_label_vector(6, C, torch.Generator().manual_seed(9))
    torch.manual_seed(4)
    expected_step, _ = d.model_loss(copy.deepcopy(model), x, y, t_step)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    initial = d.triggers.clone()
    torch.manual_seed(4)
    reported, _ = d.train_step(model, opt, x, y,
                               StepContext(0, 0, C, torch.Generator().manual_seed(9)))
    assert torch.equal(d.triggers, initial)  # optimized False: fixed triggers
    assert reported == pytest.approx(6 * expected_step.item(), rel=1e-5)


def test_discriminator_step_trains_d_with_the_main_lr_and_moves_triggers():
    d, model = defense(discriminator=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.5, 0.9))
    opt.param_groups[0]["lr"] = 1e-4  # as after a MultiStepLR milestone
    d_before = copy.deepcopy(d.discriminator.state_dict())
    t_before = d.triggers.clone()
    x, y = batch(8, torch.Generator().manual_seed(0))
    _, logs = d.train_step(model, opt, x, y, StepContext(0, 0, C, torch.Generator()))
    assert "loss_discriminator" in logs and "loss_naturalness" in logs
    assert isinstance(d.optimizer_d, torch.optim.Adam)
    assert d.optimizer_d.param_groups[0]["lr"] == 1e-4
    assert d.optimizer_d.param_groups[0]["betas"] == (0.5, 0.9)
    assert any(not torch.equal(d_before[k], v) for k, v in d.discriminator.state_dict().items())
    assert (d.triggers - t_before).abs().max() == pytest.approx(0.01, abs=1e-6)
    assert all(p.grad is None for p in d.discriminator.parameters())
    assert model.training


def test_state_round_trip_continues_identically(tmp_path):
    torch.manual_seed(0)
    d, model = defense(discriminator=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(2)
    for step in range(2):
        d.on_epoch_start(step, model)
        d.train_step(model, opt, *batch(8, g), StepContext(step, step, C, g))
    torch.save(d.state_dict(), tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)
    assert set(state) == {"triggers", "discriminator", "discriminator_optimizer",
                          "batches_per_epoch"}
    assert set(d.checkpoint_state_dict()) == {"triggers", "discriminator", "batches_per_epoch"}
    # a fresh defense (new random triggers) takes over the state
    d2, model2 = defense(discriminator=True)
    model2.load_state_dict(model.state_dict())
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # no aliasing (as after a file)
    assert not torch.equal(d2.triggers, d.triggers)
    d2.load_state_dict(state)
    assert torch.equal(d2.triggers, d.triggers)
    g2 = torch.Generator()
    g2.set_state(g.get_state())
    rng = torch.get_rng_state()
    for dd, mm, oo, gg in ((d, model, opt, g), (d2, model2, opt2, g2)):
        torch.set_rng_state(rng)
        dd.on_epoch_start(2, mm)
        dd.train_step(mm, oo, *batch(8, gg), StepContext(2, 2, C, gg))
    assert torch.equal(d2.triggers, d.triggers)
    for k, v in d.discriminator.state_dict().items():
        assert torch.equal(d2.discriminator.state_dict()[k], v), k
    for k, v in model.state_dict().items():
        assert torch.equal(model2.state_dict()[k], v), k
    with pytest.raises(ValueError, match="triggers"):
        d2.load_state_dict({})


def test_trains_through_atat_train_and_triggers_come_back(tmp_path, monkeypatch, tiny_recipe,
                                                         make_synthfaces):
    from atat.training.train import TrainSpec, load_model, train

    initial = []

    class Recording(TrapMID):
        def build_model(self, model):
            out = super().build_model(model)
            initial.append(self.triggers.clone())
            return out

    monkeypatch.setitem(REGISTRY, "trap_mid", Recording)
    root = tmp_path / "ds"
    make_synthfaces(root, n_private_identities=3, n_public_identities=2, images_per_identity=6,
                    public_images_per_identity=2)
    recipe = tiny_recipe(eval_batch_size=64, epochs=2, lr_milestones=[1])
    spec = TrainSpec(model_id="t/resnet18/trap_mid/seed0", dataset_root=str(root / "private"),
                     resolution=16, n_classes=3, architecture="resnet18",
                     defense={"type": "trap_mid", "alpha": 0.02, "beta": 0.2}, training=recipe,
                     augmentation={}, seed=0)
    metrics = train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
                    resume_path=tmp_path / "m.resume.pt", progress=False)
    assert "trapdoor_acc" in metrics["history"][0] and "loss_discriminator" in metrics["history"][0]
    model, d, ckpt = load_model(tmp_path / "m.pt")
    state = ckpt["defense_state"]
    assert torch.equal(d.triggers, state["triggers"])
    assert len(initial) == 2  # train() and load_model()
    assert not torch.equal(state["triggers"], initial[0])  # the triggers were trained
    assert 0 <= state["triggers"].min() and state["triggers"].max() <= 1
    assert state["batches_per_epoch"] >= 1
    for k, v in d.discriminator.state_dict().items():
        assert torch.equal(v, state["discriminator"][k]), k
