"""The miniature's ImageNet (docs/decisions.md#pretraining): the pretraining population is
disjoint from every private and public identity, a pretrained backbone is a torchvision state
dict that the one loader puts into every network fine-tuned from it, the config plans one
pretraining job per backbone (none on the paper config), and the recipe rule picks as written."""

import copy
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchvision

from atat.data.painting import MIN_DISCRETE_DIFF
from atat.data.pretraining import (excluded_identities, generate_pretraining_population,
                                   make_pretraining_identities, min_signature_distance)
from atat.plan.config import (ConfigError, load_config, pretraining_backbones,
                              pretraining_exclusions, validate_config)
from atat.training.models import build_model, load_pretrained, torchvision_network
from atat.training.pretrain import pretrain_backbone

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"


@pytest.fixture(scope="module")
def demo():
    return load_config(PAPER, DEMO)


def test_pretraining_identities_are_disjoint_from_both_face_populations(demo):
    """Every pretraining identity differs from each of the 120 identities of both populations'
    private and public pools, and from every other, in >= MIN_DISCRETE_DIFF discrete
    attributes; without the exclusion the same draw lands near a target identity."""
    populations = pretraining_exclusions(demo)
    assert [p["seed"] for p in populations] == [0, 1]
    excluded = excluded_identities(populations)
    assert len(excluded) == 2 * (20 + 40)
    n, seed = demo["pretraining"]["population"]["identities"], demo["pretraining"]["population"]["seed"]
    ids = make_pretraining_identities(n, seed, excluded)
    assert len(ids) == n == 500
    assert len({i["name"] for i in ids}) == n and all(i["name"].startswith("pre_") for i in ids)
    assert not {i["name"] for i in ids} & {e["name"] for e in excluded}
    assert min_signature_distance(ids, excluded) >= MIN_DISCRETE_DIFF
    assert min_signature_distance(ids, ids) >= MIN_DISCRETE_DIFF
    unchecked = make_pretraining_identities(n, seed)
    assert min_signature_distance(unchecked, excluded) < MIN_DISCRETE_DIFF


def test_pretraining_identities_are_seeded_and_prefix_stable():
    excluded = excluded_identities([{"seed": 0, "n_private_identities": 5,
                                     "n_public_identities": 5}])
    five = make_pretraining_identities(5, 7, excluded)
    assert make_pretraining_identities(8, 7, excluded)[:5] == five
    assert make_pretraining_identities(5, 8, excluded) != five


def _population(root, **changes):
    args = dict(identities=4, images_per_identity=3, val_images_per_identity=1, resolution=32,
                seed=2, exclude_populations=[{"seed": 0, "n_private_identities": 4,
                                              "n_public_identities": 2}], progress=False)
    return generate_pretraining_population(root, **{**args, **changes})


def test_population_is_rendered_deterministically_in_train_and_val(tmp_path):
    meta = _population(tmp_path / "a")
    assert meta["counts"] == {"train": 12, "val": 4}
    assert meta["n_classes"] == 4 and meta["min_distance_to_excluded"] >= MIN_DISCRETE_DIFF
    _population(tmp_path / "b")
    for rel in ("images/pre_0000/0000.png", "images/pre_0003/0003.png", "manifest.csv"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    with pytest.raises(FileExistsError):
        _population(tmp_path / "a")


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretraining") / "population"
    _population(root)
    return root


TINY = {"epochs": 1, "batch_size": 4, "lr_milestones": []}


def _pretrain(population, out, arch, res, **kw):
    return pretrain_backbone(population, out_weights=out / f"{arch}.pth",
                             out_metrics=out / f"{arch}.json", architecture=arch,
                             resolution=res, training=TINY, progress=False, **kw)


@pytest.mark.parametrize("arch", ["resnet18", "resnet10", "densenet47"])
def test_a_pretrained_backbone_is_a_torchvision_state_dict_the_targets_load(tmp_path, population,
                                                                            arch):
    metrics = _pretrain(population, tmp_path, arch, 32)
    assert metrics["n_classes"] == 4 and metrics["n_train"] == 12 and metrics["n_val"] == 4
    state = torch.load(tmp_path / f"{arch}.pth", weights_only=True)
    net = torchvision_network(arch, 4)
    assert net.load_state_dict(state) is not None   # strict: exactly the torchvision network
    head = "fc." if arch.startswith("resnet") else "classifier."
    torch.manual_seed(0)
    model = build_model(arch, 3, tmp_path / f"{arch}.pth")
    got = model.features.state_dict()
    prefix = "" if arch.startswith("resnet") else "features."
    loaded = [k for k in state if not k.startswith(head)]
    for k in loaded:
        assert torch.equal(got[k[len(prefix):]], state[k]), k
    assert model.head.out_features == 3   # a fresh head
    torch.manual_seed(0)
    assert torch.equal(model.head.weight, build_model(arch, 3).head.weight)


def test_the_evaluation_model_loads_its_pretrained_inception(tmp_path, population):
    from atat.inversion.evaluation import build_evaluation_model

    _pretrain(population, tmp_path, "inception_v3", 75)
    state = torch.load(tmp_path / "inception_v3.pth", weights_only=True)
    assert not any(k.startswith("AuxLogits.") for k in state)
    model = build_evaluation_model(3, aux_logits=False, weights_path=tmp_path / "inception_v3.pth",
                                   resolution=75)
    assert model.transform_input  # as torchvision's ImageNet file: the same input mapping
    net = model.net.state_dict()
    assert all(torch.equal(net[k], v) for k, v in state.items() if not k.startswith("fc."))
    with pytest.raises(ValueError, match="does not fit"):   # no auxiliary head in the file
        build_evaluation_model(3, aux_logits=True, weights_path=tmp_path / "inception_v3.pth",
                               resolution=75)


def test_the_face_network_fine_tunes_from_the_shared_backbone(tmp_path, population,
                                                             make_synthfaces):
    from atat.inversion.evaluation import train_face_embedding

    _pretrain(population, tmp_path, "resnet18", 16)
    data = tmp_path / "faces"
    make_synthfaces(data, n_public_identities=3, public_images_per_identity=4)
    m = train_face_embedding(data, out_model=tmp_path / "face.pt", out_metrics=tmp_path / "f.json",
                             architecture="resnet18", resolution=16,
                             training={"epochs": 1, "batch_size": 4, "lr_milestones": [],
                                       "lr": 1e-12},
                             weights_path=tmp_path / "resnet18.pth", progress=False)
    assert m["pretrained"]
    ckpt = torch.load(tmp_path / "face.pt", weights_only=True)
    state = torch.load(tmp_path / "resnet18.pth", weights_only=True)
    # lr 1e-12: one Adam step moves a weight by ~1e-12, so the conv weights are the file's
    conv = ckpt["state_dict"]["features.conv1.weight"]
    assert torch.allclose(conv, state["conv1.weight"], atol=1e-9)
    assert not torch.allclose(conv, torchvision.models.resnet18().conv1.weight, atol=1e-3)


def test_a_zeroed_head_starts_every_class_at_the_same_logit(tmp_path, population):
    """head_init: zero (Inception-v3's pretraining): the first loss is ln K, not torchvision's
    std-0.1 classifier's; an unknown head_init is refused."""
    from atat.training.pretrain import _zero_head, pretraining_recipe

    net = torchvision_network("inception_v3", 4)
    _zero_head(net)
    net.eval()
    logits = net(torch.randn(2, 3, 75, 75))
    assert torch.equal(logits, torch.zeros_like(logits))
    metrics = _pretrain(population, tmp_path, "resnet10", 32)
    zeroed = pretrain_backbone(population, out_weights=tmp_path / "z.pth",
                               out_metrics=tmp_path / "z.json", architecture="resnet10",
                               resolution=32, training={**TINY, "head_init": "zero"},
                               progress=False)
    start = zeroed["history"][0]["loss_start"]
    assert abs(start - torch.log(torch.tensor(4.0)).item()) < 1e-4
    assert metrics["history"][0]["loss_start"] != start
    with pytest.raises(ValueError, match="head_init"):
        pretraining_recipe({**TINY, "head_init": "small"})


def test_the_imagenet_path_is_unchanged(tmp_path):
    """A torchvision ImageNet file (1000-way head) loads every tensor, the head is replaced by
    the same fresh layer as without weights: the paper config's models are the same as before."""
    torch.manual_seed(5)
    ref = torchvision.models.resnet18()
    torch.save(ref.state_dict(), tmp_path / "resnet18-f37072fd.pth")
    torch.manual_seed(0)
    model = build_model("resnet18", 7, tmp_path / "resnet18-f37072fd.pth")
    for k, v in ref.state_dict().items():
        if not k.startswith("fc."):
            assert torch.equal(model.features.state_dict()[k], v), k
    torch.manual_seed(0)
    assert torch.equal(model.head.weight, build_model("resnet18", 7).head.weight)


def test_a_file_of_another_network_is_refused(tmp_path):
    torch.save(torchvision_network("resnet10", 5).state_dict(), tmp_path / "r10.pth")
    with pytest.raises(ValueError, match="does not fit resnet18"):
        build_model("resnet18", 3, tmp_path / "r10.pth")
    torch.save({"model": {"x": 1}}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="not a state dict"):
        load_pretrained(torchvision_network("resnet18"), tmp_path / "bad.pth", what="resnet18")
    with pytest.raises(FileNotFoundError):
        build_model("resnet10", 3, tmp_path / "missing.pth")


def test_the_config_plans_one_backbone_per_architecture_and_resolution(demo):
    validate_config(demo)
    backbones = pretraining_backbones(demo)
    assert sorted(backbones) == [("densenet47", 32), ("resnet10", 32), ("resnet10", 64),
                                 ("resnet18", 32)]   # the face network shares ResNet-18 at 32 px
    assert backbones[("resnet18", 32)]["training"]["epochs"] == 8
    assert not any(b["aux_logits"] for b in backbones.values())
    # the demo's judge is a ResNet-10 at 64 px: its own backbone, shared with no 32 px target;
    # an Inception-v3 judge is planned with its own entry of pretraining.backbones
    assert (demo["evaluation_model"]["architecture"], demo["evaluation_model"]["resolution"]) \
        == ("resnet10", 64)
    on = copy.deepcopy(demo)
    on["evaluation_model"].update(architecture="inception_v3", resolution=80)
    inception = pretraining_backbones(on)[("inception_v3", 80)]
    assert inception["training"]["epochs"] == 3 and inception["training"]["head_init"] == "zero"
    assert inception["training"]["batch_size"] == 32 and not inception["aux_logits"]
    paper = load_config(PAPER)
    assert pretraining_backbones(paper) == {}


@pytest.mark.parametrize("change, key", [
    (lambda c: c["pretraining"]["backbones"]["inception_v3"].update(lr_milestones=[3]),
     "pretraining.backbones.inception_v3.lr_milestones"),
    (lambda c: c["pretraining"]["training"].update(batch_size=20_000),
     "pretraining.training.batch_size"),
    (lambda c: c["face_embedding"].update(source="facenet", url="https://x/y.pt"),
     "face_embedding.pretrained"),
    (lambda c: c["pretraining"]["population"].update(identities=0),
     "pretraining.population.identities"),
    (lambda c: c["pretraining"]["training"].update(head_init="small"),
     "pretraining.training.head_init"),
])
def test_bad_pretraining_settings_are_config_errors(demo, change, key):
    cfg = copy.deepcopy(demo)
    change(cfg)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(cfg)


def test_without_pretraining_the_demo_networks_cannot_be_pretrained(demo):
    cfg = copy.deepcopy(demo)
    cfg["pretraining"] = None
    with pytest.raises(ConfigError, match="no ImageNet weights"):
        validate_config(cfg)


def test_the_recipe_rule_picks_as_pre_registered():
    from atat.lab.recipe import choose, milestones

    assert milestones(10, (0.75, 0.9)) == [7, 9] and milestones(25, (0.75, 0.9)) == [18, 22]
    assert milestones(8, (0.75,)) == [6] and milestones(4, (0.75,)) == [3]
    rows = pd.DataFrame([
        dict(pretrain_epochs=4, lr=1e-3, finetune_epochs=10, nodef_train_acc=1.0, nodef_val_acc=0.70),
        dict(pretrain_epochs=8, lr=1e-3, finetune_epochs=10, nodef_train_acc=0.98, nodef_val_acc=0.90),
        dict(pretrain_epochs=8, lr=3e-4, finetune_epochs=10, nodef_train_acc=0.995, nodef_val_acc=0.80),
        dict(pretrain_epochs=4, lr=1e-4, finetune_epochs=10, nodef_train_acc=0.99, nodef_val_acc=0.80),
    ])
    assert choose(rows) == 3            # highest val among train >= 0.99; tie -> cheaper
    assert choose(rows, 0.999) == 0     # only one eligible
    assert choose(rows, 1.01) == 0      # none eligible: the highest training accuracy
    epochs = pd.DataFrame([
        dict(pretrain_epochs=8, lr=1e-3, finetune_epochs=25, nodef_train_acc=1.0, nodef_val_acc=0.9),
        dict(pretrain_epochs=8, lr=1e-3, finetune_epochs=15, nodef_train_acc=0.995, nodef_val_acc=0.8),
        dict(pretrain_epochs=8, lr=1e-3, finetune_epochs=10, nodef_train_acc=0.9, nodef_val_acc=0.85),
    ])
    assert choose(epochs, criterion="fewest_epochs") == 1


def _snakemake(*args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(ROOT), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


#: one network of each kind the pretraining feeds (a dry run of these is cheaper than of `all`)
FED = ["results/models/synthfaces/resnet18/tldmi/seed0/model.pt",
       "results/models/synthfaces_b/resnet10/nodef/seed0/model.pt",
       "results/models/synthfaces/densenet47/nodef/seed0/model.pt",
       "results/evaluation/synthfaces/model.pt", "results/face_embedding/synthfaces/model.pt",
       "results/face_embedding/synthfaces/seed1/model.pt"]


@pytest.mark.slow
def test_the_paper_dag_has_no_pretraining_and_the_demo_pretrains_upstream():
    """Paper config: no pretraining job (its pretrained nets load torchvision's files). Demo: the
    population and each backbone feed every target model, public classifier and the
    evaluation model (ResNet-10's at 64 px, docs/decisions.md#the-evaluation-models-architecture)."""
    paper = _snakemake("all", "-n", "--quiet", "rules")
    assert "train_model" in paper and "pretrain" not in paper
    dag = _snakemake(*FED, "--forceall", "--dag", "--configfile", str(DEMO))
    rule_of = {}
    for line in dag.splitlines():
        if "[label = " in line:
            node, label = line.split("[label = ", 1)
            rule_of[node.strip()] = label.strip('"').split("\\n")[0].split('"')[0]
    fed = {}
    for line in dag.splitlines():
        if "->" in line:
            a, b = (part.strip().rstrip(";") for part in line.split("->"))
            fed.setdefault(rule_of[b], set()).add(rule_of[a])
    assert sum(r == "pretrain_backbone" for r in rule_of.values()) == 4
    for rule in ("train_model", "train_face_embedding", "train_instrument_classifier",
                 "train_evaluation_model"):
        assert "pretrain_backbone" in fed[rule], rule
    assert fed["pretrain_backbone"] == {"pretraining_population"}
