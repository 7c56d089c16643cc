"""atat.models: ImageNet weight files load in the format torchvision publishes them."""

import re

import pytest
import torch
import torchvision

from atat.models import build_model, densenet_current_keys


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
