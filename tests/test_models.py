"""atat.training.models: ImageNet weight files load in the format torchvision publishes them."""

import re
from pathlib import Path

import pytest
import torch
import torchvision

from atat.training.models import build_model, densenet_current_keys


def _published(state):
    """torchvision's published DenseNet files (PyTorch < 0.4.1): dense-layer modules named
    'norm.1', 'conv.2', ..., and no BatchNorm num_batches_tracked buffers."""
    pattern = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))([12]\.\w+)$")
    return {(f"{m.group(1)}.{m.group(2)}" if (m := pattern.match(k)) else k): v
            for k, v in state.items() if not k.endswith("num_batches_tracked")}


def test_densenet_keys_of_the_published_file_are_renamed():
    state = {"features.denseblock1.denselayer1.norm.1.weight": 1,
             "features.denseblock4.denselayer32.conv.2.weight": 2,
             "features.norm5.running_var": 3, "classifier.bias": 4}
    assert densenet_current_keys(state) == {
        "features.denseblock1.denselayer1.norm1.weight": 1,
        "features.denseblock4.denselayer32.conv2.weight": 2,
        "features.norm5.running_var": 3, "classifier.bias": 4}


@pytest.mark.parametrize("published", [True, False])
def test_densenet169_loads_a_weight_file_as_torchvision_publishes_it(tmp_path, published):
    torch.manual_seed(0)
    ref = torchvision.models.densenet169(weights=None)
    state = ref.state_dict()
    assert any(".norm1." in k for k in state)
    torch.save(_published(state) if published else state, tmp_path / "densenet169-b2777c0a.pth")
    if published:
        assert not any(".norm1." in k for k in torch.load(tmp_path / "densenet169-b2777c0a.pth"))
    model = build_model("densenet169", 3, tmp_path / "densenet169-b2777c0a.pth")
    got = model.state_dict()
    for k, v in state.items():
        if k.startswith("features.") and v.is_floating_point():
            assert torch.equal(got[k], v), k


def test_densenet47_is_densenet169_with_shorter_blocks():
    """Table 24 in the miniature: DenseNet-169's growth rate, width and bottleneck with its
    blocks (6, 12, 32, 32) shortened to (2, 3, 8, 8); the same 15 feature children (TL-DMI's
    freeze rule) and dense-block stages (BiDO, HSIC); no torchvision weights (pretrained only
    by the miniature's pretraining, tests/test_pretrain.py)."""
    from atat.training.models import build_model

    net, ref = build_model("densenet47", 5), build_model("densenet169", 5)
    assert [n for n, _ in net.features.named_children()] \
        == [n for n, _ in ref.features.named_children()]
    assert [len(getattr(net.features, f"denseblock{i}")) for i in range(1, 5)] == [2, 3, 8, 8]
    assert [len(getattr(ref.features, f"denseblock{i}")) for i in range(1, 5)] == [6, 12, 32, 32]
    layer, ref_layer = net.features.denseblock1.denselayer1, ref.features.denseblock1.denselayer1
    assert layer.conv1.weight.shape == ref_layer.conv1.weight.shape   # width 64, bottleneck 4
    assert layer.conv2.weight.shape == ref_layer.conv2.weight.shape   # growth 32
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in net.modules())
    assert convs + 1 == 47                                            # + the head
    logits, hidden = net.forward_hidden(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 5) and [h.shape[1] for h in hidden] == [128, 160, 336, 424]
    assert net.feature_dim == 424
    with pytest.raises(ValueError, match="no torchvision weights"):
        from atat.training.models import densenet47
        densenet47(weights="IMAGENET1K_V1")


def test_resnet10_is_the_shallow_from_scratch_resnet():
    """Issue 17's miniature grid: ResNet-10 = torchvision's ResNet with one BasicBlock per
    stage; the ResNet stages BiDO and HSIC read and the 512-d features of ResNet-18; no
    torchvision weights, so a pretrained recipe on it is refused before any job unless the
    config pretrains its own backbones (``pretraining``, the demo)."""
    import copy

    from atat.plan.config import ConfigError, load_config, validate_config
    from atat.training.models import build_model

    net = build_model("resnet10", 5)
    assert [len(getattr(net.features, f"layer{i}")) for i in range(1, 5)] == [1, 1, 1, 1]
    assert net.feature_dim == 512
    logits, hidden = net.forward_hidden(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 5) and len(hidden) == 4
    n10 = sum(p.numel() for p in net.parameters())
    assert n10 < sum(p.numel() for p in build_model("resnet18", 5).parameters()) / 2
    with pytest.raises(ValueError, match="no torchvision weights"):
        from atat.training.models import resnet10
        resnet10(weights="IMAGENET1K_V1")
    root = Path(__file__).resolve().parents[1] / "config"
    cfg = load_config(root / "config.yaml", root / "demo.yaml")
    cfg = copy.deepcopy(cfg)
    cfg["architectures"]["resnet10"] = {}
    cfg["grid"] = [{"datasets": ["synthfaces"], "architectures": ["resnet10"],
                    "defenses": ["nodef"]}]
    cfg["causal"], cfg["inversion"]["attacks"] = None, []
    cfg["dose_response"] = None
    cfg["tables"] = {"table4_architecture": "resnet10"}
    cfg["training"]["pretrained"] = True
    validate_config(cfg)            # the demo's pretraining makes a backbone for it
    cfg["pretraining"] = None       # without: torchvision's ImageNet files, none for ResNet-10
    cfg["evaluation_model"]["pretrained"] = cfg["face_embedding"]["pretrained"] = False
    with pytest.raises(ConfigError, match="architectures.resnet10: no ImageNet weights"):
        validate_config(cfg)
    cfg["training"]["pretrained"] = False
    validate_config(cfg)
