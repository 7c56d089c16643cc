"""RoLSS / RoLSS-SSF (docs/sources.md#rolss): skip factors per block, no identity path for skip 0,
identity scaled by k for SSF, torchvision parameter names (ImageNet weights load)."""

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock

from atat.training.defenses.base import DefenseConfigError
from atat.training.defenses.rolss import (RemoveLastStageSkip, RoLSSScaledSkip, block_skips,
                                 set_block_skip, stage_skips)
from atat.training.models import build_model


def residual_branch(block, x):
    return block.bn2(block.conv2(block.relu(block.bn1(block.conv1(x)))))


def rolss_resnet18(cls=RemoveLastStageSkip, n_classes=4, **params):
    torch.manual_seed(0)
    model = cls(params, n_classes).build_model(build_model("resnet18", n_classes))
    return model.eval()


def test_skip_factors_follow_the_official_layout():
    skips = block_skips(rolss_resnet18().features)
    assert skips == {"layer1.0": 1, "layer1.1": 1, "layer2.0": 1, "layer2.1": 1,
                     "layer3.0": 1, "layer3.1": 0, "layer4.0": 0, "layer4.1": 0}
    ssf = block_skips(rolss_resnet18(RoLSSScaledSkip).features)
    assert ssf["layer4.0"] == ssf["layer4.1"] == pytest.approx(0.2) and ssf["layer3.1"] == 0
    no_split = block_skips(rolss_resnet18(layer3_split=1.0).features)
    assert no_split["layer3.1"] == 1 and no_split["layer4.1"] == 0
    # ResNet-152 layer3 (36 blocks): blocks 28-35 lose their skip
    assert stage_skips(36, 1, 0.8) == [1.0] * 28 + [0.0] * 8
    assert stage_skips(23, 1, 0.8) == [1.0] * 18 + [0.0] * 5
    assert stage_skips(3, 0.2, None) == [0.2] * 3
    with torch.device("meta"):
        m = RemoveLastStageSkip({}, 10).build_model(build_model("resnet152", 10))
    s = block_skips(m.features)
    assert [s[f"layer3.{i}"] for i in range(36)] == [1.0] * 28 + [0.0] * 8
    assert all(s[f"layer4.{i}"] == 0 for i in range(3))


def test_skip_zero_block_output_does_not_depend_on_identity_path():
    model = rolss_resnet18()
    x = torch.randn(2, 256, 2, 2)
    block = model.features.layer4[0]          # has a downsample
    out = block(x)
    assert torch.allclose(out, F.relu(residual_branch(block, x)))
    calls = []
    hook = block.downsample.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        for p in block.downsample.parameters():
            p.add_(torch.randn_like(p))
        assert torch.equal(block(x), out)     # identity/downsample path is not used
    hook.remove()
    assert not calls
    # restoring the skip changes the output (to torchvision's block)
    set_block_skip(block, 1.0)
    restored = block(x)
    assert not torch.allclose(restored, out)
    assert torch.allclose(restored, BasicBlock.forward(block, x))
    inner = model.features.layer4[1]          # plain identity x
    y = torch.randn(2, 512, 1, 1)
    assert torch.allclose(inner(y), F.relu(residual_branch(inner, y)))
    assert not torch.allclose(BasicBlock.forward(inner, y), inner(y))


def test_ssf_scales_the_identity_by_k():
    model = rolss_resnet18(RoLSSScaledSkip)
    x = torch.randn(2, 256, 2, 2)
    block = model.features.layer4[0]
    expected = F.relu(residual_branch(block, x) + 0.2 * block.downsample(x))
    assert torch.allclose(block(x), expected, atol=1e-6)
    inner = model.features.layer4[1]
    y = torch.randn(2, 512, 1, 1)
    assert torch.allclose(inner(y), F.relu(residual_branch(inner, y) + 0.2 * y), atol=1e-6)
    k = rolss_resnet18(RemoveLastStageSkip, skip=[1, 1, 1, 0.6]).features.layer4[1]
    assert k.skip == pytest.approx(0.6)


def test_imagenet_state_dict_loads_without_missing_or_unexpected_keys(tmp_path):
    torch.manual_seed(1)
    plain = torchvision.models.resnet18()
    state = plain.state_dict()
    path = tmp_path / "resnet18.pth"
    torch.save(state, path)
    model = RemoveLastStageSkip({}, 5).build_model(build_model("resnet18", 5, path))
    features = model.features.state_dict()
    assert set(features) == {k for k in state if not k.startswith("fc.")}
    for k, v in features.items():
        assert torch.equal(v, state[k]), k
    # and a plain torchvision state dict loads strictly into the patched network
    result = model.features.load_state_dict({k: v for k, v in state.items()
                                             if not k.startswith("fc.")}, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    # the whole-model output differs from the unpatched network with the same weights
    plain.fc = model.features.fc
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    model.eval()
    plain.eval()
    assert not torch.allclose(model.features(x), plain(x))


def test_trains_and_rejects_densenet_and_bad_params():
    model = rolss_resnet18().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(4, 3, 16, 16) * 2 - 1, torch.tensor([0, 1, 2, 3])
    loss = F.cross_entropy(model(x), y, reduction="sum")
    loss.backward()
    assert model.features.layer4[0].downsample[0].weight.grad is None  # unused path
    assert model.features.layer4[1].conv2.weight.grad.abs().sum() > 0
    opt.step()
    with torch.device("meta"):
        net = build_model("densenet169", 4)
    with pytest.raises(ValueError, match="ResNet"):
        RemoveLastStageSkip({}, 4).build_model(net)
    for bad in ({"skip": [1, 1, 0]}, {"skip": [1, 1, 1, -0.1]}, {"layer3_split": 0},
                {"layer3_split": 1.5}, {"k": 0.2}):
        with pytest.raises(DefenseConfigError):
            RemoveLastStageSkip(bad, 4)
    assert RoLSSScaledSkip({}, 4).params["skip"] == [1, 1, 1, 0.2]
