"""The static torchvision weights table the DAG reads (atat.plan.weights_table) is torchvision's."""

import subprocess
import sys
from pathlib import Path

import pytest
from torchvision.models import get_model_weights

from atat.plan.config import load_config
from atat.training.models import ARCHITECTURES
from atat.plan.weights_table import (TORCHVISION_WEIGHTS, torchvision_weights_filename,
                                torchvision_weights_url)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("arch", sorted(TORCHVISION_WEIGHTS))
def test_table_is_torchvisions_enum(arch):
    enum = get_model_weights(arch)
    assert {w.name: w.url for w in enum} == TORCHVISION_WEIGHTS[arch]
    for w in enum:
        assert torchvision_weights_filename(arch, w.name) == Path(w.url).name


def test_every_weight_the_configs_can_ask_for_is_listed():
    for overlay in ([], [ROOT / "config" / "demo.yaml"]):
        config = load_config(ROOT / "config" / "config.yaml", *overlay)
        for arch, spec in config["architectures"].items():
            if ARCHITECTURES[arch][1] is None:   # the demo's from-scratch nets (ResNet-10,
                continue     # DenseNet-47): no ImageNet weights (pretrained: a ConfigError)
            assert torchvision_weights_url(arch, spec.get("weights", "IMAGENET1K_V1"))
        ev = config["evaluation_model"]
        if config.get("pretraining"):   # the judge starts from the miniature's pretraining
            assert ev["architecture"] in ARCHITECTURES, ev["architecture"]
        else:
            assert torchvision_weights_url(ev["architecture"], ev["weights"])
    assert torchvision_weights_url("vgg16", "IMAGENET1K_V1")  # VGG16-LPIPS features


def test_unknown_weights_name_the_key():
    with pytest.raises(ValueError, match=r"architectures\.resnet18\.weights: .*'IMAGENET1K_V2'"):
        torchvision_weights_url("resnet18", "IMAGENET1K_V2")
    with pytest.raises(ValueError, match="'resnet50'"):
        torchvision_weights_url("resnet50", "IMAGENET1K_V1")


def test_table_module_imports_neither_torch_nor_torchvision():
    code = ("import sys, atat.plan.weights_table; "
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src")})
    assert out.stdout.strip() == "[]"
