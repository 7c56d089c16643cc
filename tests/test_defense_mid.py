"""MID (docs/sources.md#mid): bottleneck shape, KL term of the loss, stochastic evaluation (its
training run through atat.training.train: tests/test_defense_registry.py)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from atat.training.defenses.base import DefenseConfigError, StepContext
from atat.training.defenses.mid import MutualInformationDefense, VIBHead
from atat.training.models import build_model

N_CLASSES = 5


@pytest.fixture(scope="module")
def base():
    torch.manual_seed(0)
    return build_model("resnet18", N_CLASSES)


def mid(**params):
    return MutualInformationDefense({"type": "mid", **params}, N_CLASSES)


def ctx():
    return StepContext(epoch=0, step=0, n_classes=N_CLASSES,
                       generator=torch.Generator().manual_seed(0))


def test_bottleneck_is_half_the_feature_width(base):
    d = mid()
    assert d.params["beta"] == 0.01  # paper A.1 value, not REPO's 0.03
    model = d.build_model(base)
    head = model.head
    assert isinstance(head, VIBHead)
    assert head.k == 256 and model.feature_dim == 512 and head.out_features == N_CLASSES
    assert tuple(head.st_layer.weight.shape) == (512, 512)
    assert sum(p.numel() for p in head.st_layer.parameters()) == 512 * 512 + 512
    assert tuple(head.classifier.weight.shape) == (N_CLASSES, 256)
    assert model.features is base.features  # feature extractor kept, head replaced
    assert set(k.split(".")[1] for k in model.state_dict() if k.startswith("head.")) == \
        {"st_layer", "classifier"}
    custom = mid(bottleneck_dim=64).build_model(build_model("resnet18", N_CLASSES))
    assert custom.head.k == 64 and tuple(custom.head.st_layer.weight.shape) == (128, 512)
    with pytest.raises(DefenseConfigError):
        mid(beta=-1.0)
    with pytest.raises(DefenseConfigError):
        mid(bottleneck_dim=0)


@pytest.mark.parametrize("architecture,feat_dim,k", [("resnet18", 512, 256),
                                                     ("resnet152", 2048, 1024),
                                                     ("densenet169", 1664, 832),
                                                     ("resnet10", 512, 256),
                                                     ("densenet47", 424, 212)])
def test_default_bottleneck_is_half_the_feature_width_on_every_architecture(architecture,
                                                                             feat_dim, k):
    """Issue 13 item 8: k = feat_dim // 2 on every architecture (REPO), not only ResNet-152."""
    from atat.training.defenses.base import ARCHITECTURE_FACTS
    base = build_model(architecture, N_CLASSES)
    # the static table the config checks use (no model built at DAG time) matches the models
    assert ARCHITECTURE_FACTS[architecture] == {
        "feature_dim": base.feature_dim, "feature_children": len(list(base.features.children()))}
    model = mid().build_model(base)
    assert model.feature_dim == feat_dim and model.head.k == k
    assert tuple(model.head.st_layer.weight.shape) == (2 * k, feat_dim)
    assert tuple(model.head.classifier.weight.shape) == (N_CLASSES, k)


def test_loss_is_summed_ce_plus_beta_times_summed_kl(base):
    model = mid().build_model(base)
    model.train()
    x = torch.rand(4, 3, 16, 16) * 2 - 1
    y = torch.tensor([0, 1, 2, 3])
    beta = 0.37
    d0, d1 = mid(beta=0.0), mid(beta=beta)
    with torch.no_grad():
        torch.manual_seed(5)
        loss0, _ = d0.training_loss(model, x, y, ctx())
        torch.manual_seed(5)
        loss1, logs = d1.training_loss(model, x, y, ctx())
    # recompute the KL independently from the same bottleneck statistics (BatchNorm in train
    # mode uses batch statistics, so the features are the same in every call)
    with torch.no_grad():
        s = model.head.st_layer(model.features(x)).double().numpy()
    mu, std = s[:, :256], np.log1p(np.exp(s[:, 256:] - 5))
    kl = float(np.sum(0.5 * (mu ** 2 + std ** 2 - 1 - np.log(std ** 2))))
    assert kl > 0
    assert (loss1 - loss0).item() == pytest.approx(beta * kl, rel=1e-4)
    assert logs["info_loss"] == pytest.approx(kl / 4, rel=1e-4)
    # the CE part is summed over the batch: same noise draw -> CE_sum of those logits
    torch.manual_seed(5)
    with torch.no_grad():
        logits, _, _ = model.head.forward_stats(model.features(x))
    assert loss0.item() == pytest.approx(F.cross_entropy(logits, y, reduction="sum").item(),
                                         rel=1e-5)


def test_evaluation_is_stochastic_and_includes_kl(base):
    model = mid().build_model(base).eval()
    x = torch.rand(3, 3, 16, 16) * 2 - 1
    y = torch.tensor([0, 1, 2])
    with torch.no_grad():
        d = mid()
        a, b = d.logits(model, x), d.logits(model, x)
        assert a.shape == (3, N_CLASSES)
        assert not torch.allclose(a, b)  # fresh noise on every forward, also in eval mode
        # forward_hidden still gives the four stages (HSIC measurement of MID models)
        logits, hidden = model.forward_hidden(x)
        assert logits.shape == (3, N_CLASSES) and len(hidden) == 4
        # validation loss includes the KL term
        torch.manual_seed(1)
        with_kl, logits1 = d.eval_loss(model, x, y)
        torch.manual_seed(1)
        without_kl, logits0 = mid(beta=0.0).eval_loss(model, x, y)
    assert torch.equal(logits0, logits1)
    assert with_kl.item() > without_kl.item()
