import pytest
import torch
import torch.nn.functional as F
from torch import nn

from atat.training.pgd import no_tf32, pgd, sample_targets, tf32_disabled


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, 5))


def batch(n=16):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 3, 8, 8, generator=g) * 2 - 1
    y = torch.randint(0, 5, (n,), generator=g)
    return x, y


def test_targeted_step_lowers_target_loss():
    model, (x, y) = tiny_model(), batch()
    t = sample_targets(y, 5, torch.Generator().manual_seed(0))
    before = F.cross_entropy(model(x), t).item()
    x_adv = pgd(model, x, t, epsilon=0.1, step_size=0.02, iterations=1, targeted=True,
                random_start=False)
    assert F.cross_entropy(model(x_adv), t).item() < before


def test_untargeted_step_raises_true_label_loss():
    model, (x, y) = tiny_model(), batch()
    before = F.cross_entropy(model(x), y).item()
    x_adv = pgd(model, x, y, epsilon=0.1, step_size=0.02, iterations=1, targeted=False,
                random_start=False)
    assert F.cross_entropy(model(x_adv), y).item() > before


def test_perturbation_within_epsilon_and_clamp():
    model, (x, y) = tiny_model(), batch()
    x = x.clamp(-0.999, 0.999)
    x[0, 0, 0, 0] = 1.0  # at the clamp edge
    for eps in (1e-5, 0.0005, 0.3):
        x_adv = pgd(model, x, y, epsilon=eps, step_size=eps / 2, iterations=5, targeted=True,
                    random_start=True, generator=torch.Generator().manual_seed(0))
        # float32: x_adv - x is recomputed from rounded values, so allow one ulp at |x| <= 1
        assert (x_adv - x).abs().max().item() <= eps + torch.finfo(torch.float32).eps
        assert x_adv.min() >= -1 and x_adv.max() <= 1
        assert x_adv.dtype == torch.float32


def test_parameter_gradients_untouched():
    model, (x, y) = tiny_model(), batch()
    pgd(model, x, y, epsilon=0.01, step_size=0.005, iterations=3, targeted=False)
    assert all(p.grad is None for p in model.parameters())


def test_tf32_is_disabled_inside_pgd_and_restored():
    seen = []

    class Spy(nn.Module):
        def forward(self, z):
            seen.append(tf32_disabled())
            return z.flatten(1)[:, :5]

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    try:
        x, y = batch()
        pgd(Spy(), x, y, epsilon=0.01, step_size=0.005, iterations=2, targeted=True)
        assert seen and all(seen)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "high"
        with no_tf32():
            assert tf32_disabled()
    finally:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False


def test_tf32_precision_sets_pytorch_defaults_inside_pgd_and_restores():
    seen = []

    class Spy(nn.Module):
        def forward(self, z):
            b = torch.backends
            seen.append((b.cudnn.allow_tf32, b.cuda.matmul.allow_tf32,
                         torch.get_float32_matmul_precision()))
            return z.flatten(1)[:, :5]

    b = torch.backends
    before = (b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        b.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("high")
        x, y = batch()
        pgd(Spy(), x, y, epsilon=0.01, step_size=0.005, iterations=2, targeted=True,
            precision="tf32")
        # PyTorch's defaults (the authors' code): cuDNN TF32 on, matmul TF32 off
        assert seen == [(True, False, "highest")] * 2
        assert b.cudnn.allow_tf32 is False and torch.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError, match="precision must be one of fp32, tf32"):
            pgd(Spy(), x, y, epsilon=0.01, step_size=0.005, iterations=1, targeted=True,
                precision="bf16")
    finally:
        torch.set_float32_matmul_precision(before[2])
        b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before[0], before[1]


def test_fp32_and_tf32_give_identical_pgd_on_cpu():
    """TF32 is a CUDA feature: on CPU the two settings compute the same numbers."""
    model, (x, y) = tiny_model(), batch()
    runs = [pgd(model, x, y, epsilon=1e-5, step_size=5e-6, iterations=3, targeted=False,
                generator=torch.Generator().manual_seed(0), precision=p)
            for p in ("fp32", "tf32")]
    assert torch.equal(runs[0], runs[1])


def test_targets_never_equal_labels_and_cover_all_other_classes():
    y = torch.arange(5).repeat(400)
    t = sample_targets(y, 5, torch.Generator().manual_seed(0))
    assert (t != y).all()
    assert set(t[y == 0].tolist()) == {1, 2, 3, 4}
