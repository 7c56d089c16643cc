"""TL-DMI (docs/sources.md#tl-dmi): which children are frozen, trainable counts, frozen tensors stay
put."""

import pytest
import torch
import torchvision

from atat.training.defenses import REGISTRY
from atat.training.defenses.base import DefenseConfigError
from atat.training.defenses.tldmi import TransferLearningDefense, frozen_children
from atat.training.models import build_model


def tldmi(n_classes=4, **params):
    return TransferLearningDefense(params, n_classes)


def trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def meta_model(arch, n_classes, **params):
    with torch.device("meta"):
        return tldmi(n_classes, **params).build_model(build_model(arch, n_classes))


@pytest.mark.parametrize("arch, freeze, expected", [
    ("resnet18", 6, 8_393_728), ("resnet18", 5, 10_493_440),
    ("resnet152", 6, 14_964_736), ("resnet152", 5, 55_578_624),
    ("densenet169", 6, 11_186_944), ("densenet169", 5, 12_106_624)])
def test_trainable_parameter_counts_match_the_spec(arch, freeze, expected):
    n = 530
    model = meta_model(arch, n, freeze_layers=freeze)
    head = model.head.in_features * n + n
    assert trainable(model) == expected + head
    assert all(p.requires_grad for p in model.head.parameters())


def test_resnet18_count_on_a_real_model_and_optimizer_excludes_frozen():
    d = tldmi(4)
    model = d.build_model(build_model("resnet18", 4))
    assert trainable(model) == 8_393_728 + 512 * 4 + 4
    params = d.trainable_parameters(model)
    assert sum(p.numel() for p in params) == 8_393_728 + 512 * 4 + 4
    assert d.frozen == sorted(["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3"])
    assert all(not p.requires_grad for p in model.features.layer3.parameters())
    assert all(p.requires_grad for p in model.features.layer4.parameters())


def test_freeze_rule_children_zero_to_f_inclusive_and_zero_freezes_everything():
    net = torchvision.models.resnet18()
    assert frozen_children(net, 6) == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2",
                                       "layer3"]
    assert frozen_children(net, 5)[-1] == "layer2"
    model = meta_model("resnet18", 4, freeze_layers=0)
    assert trainable(model) == 512 * 4 + 4
    with pytest.raises(DefenseConfigError):
        tldmi(4, freeze_layers=-1)
    with pytest.raises(ValueError, match="children"):
        meta_model("resnet18", 4, freeze_layers=10)


def test_frozen_parameters_identical_after_two_epochs_of_atat_train(tmp_path, monkeypatch,
                                                                    tiny_recipe, make_synthfaces):
    from atat.training.train import TrainSpec, load_model, train

    monkeypatch.setitem(REGISTRY, "tldmi", TransferLearningDefense)
    root = tmp_path / "ds"
    make_synthfaces(root, n_private_identities=3, n_public_identities=2, images_per_identity=6,
                    public_images_per_identity=2)
    weights = tmp_path / "imagenet.pth"
    torch.manual_seed(1)
    init = torchvision.models.resnet18().state_dict()
    torch.save(init, weights)
    recipe = tiny_recipe(lr=1e-2, eval_batch_size=64, epochs=2, lr_milestones=[5],
                         pretrained=True)
    spec = TrainSpec(model_id="t/resnet18/tldmi/seed0", dataset_root=str(root / "private"),
                     resolution=16, n_classes=3, architecture="resnet18",
                     defense={"type": "tldmi", "freeze_layers": 6}, training=recipe,
                     augmentation={}, seed=0, weights_path=str(weights))
    train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
          resume_path=tmp_path / "m.resume.pt", progress=False)
    model, _, ckpt = load_model(tmp_path / "m.pt")
    state = ckpt["state_dict"]
    frozen = ("conv1.", "bn1.", "layer1.", "layer2.", "layer3.")
    checked = 0
    for name, p in model.features.named_parameters():
        if name.startswith(frozen):
            assert torch.equal(state[f"features.{name}"], init[name]), name
            assert not p.requires_grad  # load_model re-applies the freeze
            checked += 1
    assert checked == len([k for k in dict(torchvision.models.resnet18().named_parameters())
                           if k.startswith(frozen)])
    changed = [n for n, _ in model.features.named_parameters()
               if n.startswith("layer4.") and not torch.equal(state[f"features.{n}"], init[n])]
    assert changed, "layer4 was not trained"
    # docs/sources.md#tl-dmi: frozen BatchNorm layers keep updating their running statistics (train
    # mode)
    assert not torch.equal(state["features.bn1.running_mean"], init["bn1.running_mean"])
    assert not torch.equal(state["features.layer3.1.bn2.running_var"],
                           init["layer3.1.bn2.running_var"])


@pytest.mark.parametrize("arch, frozen, in_file", [
    ("resnet10", ("conv1.", "bn1.", "layer1.", "layer2.", "layer3."), ""),
    # the feature extractor is the flat Sequential of torchvision's `features` children
    ("densenet47", ("conv0.", "norm0.", "denseblock1.", "transition1.", "denseblock2."),
     "features."),
])
def test_tldmi_freezes_the_layers_of_the_miniatures_pretrained_backbone(
        tmp_path, monkeypatch, tiny_recipe, make_synthfaces, arch, frozen, in_file):
    """TL-DMI on the miniature (docs/decisions.md#pretraining): a backbone pretrained by the
    workflow's own pretraining (atat.training.pretrain, on a tiny pretraining population),
    fine-tuned through the real training path; the fine-tuned model's frozen layers are the
    pretrained file's bit for bit, the later ones moved."""
    from atat.data.pretraining import generate_pretraining_population
    from atat.training.pretrain import pretrain_backbone
    from atat.training.train import TrainSpec, load_model, train

    monkeypatch.setitem(REGISTRY, "tldmi", TransferLearningDefense)
    generate_pretraining_population(tmp_path / "pre", identities=3, images_per_identity=4,
                                    val_images_per_identity=1, resolution=32, seed=2,
                                    progress=False)
    weights = tmp_path / f"{arch}.pth"
    pretrain_backbone(tmp_path / "pre", out_weights=weights, out_metrics=tmp_path / "pre.json",
                      architecture=arch, resolution=32,
                      training={"epochs": 1, "batch_size": 4, "lr_milestones": []},
                      progress=False)
    pretrained = torch.load(weights, weights_only=True)
    root = tmp_path / "ds"
    make_synthfaces(root, n_private_identities=3, n_public_identities=2, images_per_identity=6,
                    public_images_per_identity=2, resolution=32)
    recipe = tiny_recipe(lr=1e-2, eval_batch_size=64, epochs=2, lr_milestones=[5],
                         pretrained=True)
    spec = TrainSpec(model_id=f"t/{arch}/tldmi/seed0", dataset_root=str(root / "private"),
                     resolution=32, n_classes=3, architecture=arch,
                     defense={"type": "tldmi", "freeze_layers": 6}, training=recipe,
                     augmentation={}, seed=0, weights_path=str(weights))
    train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "m.json",
          resume_path=tmp_path / "m.resume.pt", progress=False)
    model, _, ckpt = load_model(tmp_path / "m.pt")
    state = ckpt["state_dict"]
    checked = 0
    for name, p in model.features.named_parameters():
        if name.startswith(frozen):
            assert torch.equal(state[f"features.{name}"], pretrained[in_file + name]), name
            assert not p.requires_grad
            checked += 1
    assert checked == sum(1 for k, _ in torchvision_named_parameters(arch)
                          if k.startswith(tuple(in_file + f for f in frozen)))
    later = [n for n, _ in model.features.named_parameters() if not n.startswith(frozen)
             and in_file + n in pretrained
             and not torch.equal(state[f"features.{n}"], pretrained[in_file + n])]
    assert later, "the unfrozen layers were not trained"


def torchvision_named_parameters(arch):
    from atat.training.models import torchvision_network

    return list(torchvision_network(arch, 3).named_parameters())
