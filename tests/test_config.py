"""The config is validated before any job runs; each bad config names its key."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from atat.plan.config import (ConfigError, defense_params, load_config, model_runs, training_params,
                         validate_config)

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"
DEMO_DOGS = ROOT / "config" / "overlays" / "demo-dogs.yaml"   # layered after demo.yaml


@pytest.fixture
def demo():
    return load_config(PAPER, DEMO)


@pytest.fixture
def demo_dogs():
    return load_config(PAPER, DEMO, DEMO_DOGS)


def test_paper_and_demo_configs_are_valid(demo, demo_dogs):
    validate_config(load_config(PAPER))
    validate_config(demo)
    validate_config(demo_dogs)


# every overlay stack the slow tests run through Snakemake (tests/test_workflow.py and the
# others named in each .test/*/config.yaml header); validated here in a second, so that a
# change of the demo that one of them no longer satisfies fails the quick suite, not CI's
TEST_STACKS = {
    "tiny": (PAPER, DEMO, ROOT / ".test" / "tiny" / "config.yaml"),
    "all-defenses": (PAPER, DEMO, ROOT / ".test" / "tiny" / "config.yaml",
                     ROOT / ".test" / "all-defenses" / "config.yaml"),
    "stats": (PAPER, DEMO, ROOT / ".test" / "tiny" / "config.yaml",
              ROOT / ".test" / "stats" / "config.yaml"),
    "minimal": (PAPER, DEMO, ROOT / ".test" / "minimal" / "config.yaml"),
    "paper-shapes": (PAPER, ROOT / ".test" / "paper-shapes" / "config.yaml"),
}


@pytest.mark.parametrize("name", sorted(TEST_STACKS))
def test_every_test_config_stack_is_valid(name):
    validate_config(load_config(*TEST_STACKS[name]))


def test_every_test_config_is_in_a_checked_stack():
    checked = {p for stack in TEST_STACKS.values() for p in stack}
    assert set((ROOT / ".test").glob("*/config.yaml")) <= checked


def test_the_dog_overlay_is_the_demo_plus_the_dogs():
    """config/overlays/demo-dogs.yaml restates demo.yaml's lists (lists replace lists): its
    grid is demo.yaml's plus Table 26's row, its inversion overrides the dogs' PPA exception
    and budget (the first demo's 5 images per class) plus demo.yaml's, its prior the faces' recipe at 12,000 steps; the demo alone has no dogs
    (2026-12-06, docs/decisions.md#the-dog-breed-block-is-an-overlay)."""
    import yaml

    demo_raw = yaml.safe_load(DEMO.read_text())
    dogs_raw = yaml.safe_load(DEMO_DOGS.read_text())
    dog_rows = [{"datasets": ["synthdogs"], "architectures": ["resnet18", "resnet10"],
                 "defenses": ["nodef", "mid", "bido", "tldmi", "negls", "rolss", "rolss_ssf",
                              "trap_mid", "atat"], "attacks": ["ppa"]}]
    assert dogs_raw["grid"] == demo_raw["grid"] + dog_rows
    dog_rule = {"when": {"dataset": "synthdogs"},
                "note": ("demo dogs: the paper's dogs PPA (2x the faces' steps, lr 0.01, "
                         "RRC 0.75-1)"),
                "set": {"ppa": {"steps": 60, "lr": 0.01, "rrc_scale": [0.75, 1.0]}}}
    dog_budget = {"when": {"dataset": "synthdogs", "attack": "ppa"},
                  "note": "demo dogs: 5 images per class (10 candidates), the block's first budget",
                  "set": {"ppa": {"candidates": {"num_candidates": 10},
                                  "final_selection": {"samples_per_target": 5}}}}
    assert dogs_raw["inversion"] == {
        "overrides": [dog_rule, dog_budget, *demo_raw["inversion"]["overrides"]]}
    faces = demo_raw["generators"]["synthfaces_public"]["train"]
    assert dogs_raw["generators"]["synthdogs_public"]["train"] == {
        **faces, "dataset": "synthdogs", "steps": 12000}
    assert set(dogs_raw) == {"datasets", "grid", "paper_roles", "generators", "inversion"}
    assert dogs_raw["paper_roles"] == {"datasets": {"stanford_dogs": "synthdogs"}}
    # the demo alone names no dog anywhere; with the overlay it plans the 18 dog models
    demo = load_config(PAPER, DEMO)
    assert "synthdogs" not in str(demo)
    assert "stanford_dogs" not in demo["paper_roles"]["datasets"]
    runs = model_runs(load_config(PAPER, DEMO, DEMO_DOGS))
    assert len([r for r in runs if r.dataset == "synthdogs"]) == 18
    assert len(runs) == len(model_runs(demo)) + 18


def test_paper_grid_has_every_cell_of_tables_23_to_26():
    runs = model_runs(load_config(PAPER))
    cells = {(r.dataset, r.architecture, r.defense) for r in runs}
    assert ("facescrub", "resnet152", "atat") in cells
    assert ("celeba", "densenet169", "nodef") in cells
    assert ("stanford_dogs", "resnet18", "atat") in cells
    assert ("stanford_dogs", "densenet169", "atat") not in cells  # Table 26: RN-152, RN-18 only
    assert ("facescrub", "densenet169", "rolss") not in cells     # RoLSS cannot load into DenseNet
    assert ("celeba", "resnet18", "tldmi5") in cells and ("celeba", "resnet152", "tldmi5") not in cells
    main = [r for r in runs if r.replicate is None]
    assert len(main) == 2 * 3 * 8 + 2 * 2 * 2 + 2 + 2 * 9 + 2 * 2 + 2 + 2 * 4 + 1


def test_causal_replicates_are_balanced_and_reproducible():
    cfg = load_config(PAPER)
    runs = [r for r in model_runs(cfg) if r.replicate is not None]
    assert len(runs) == 10 and sum(r.treatment for r in runs) == 5
    assert {r.defense for r in runs if r.treatment} == {"atat"}
    assert {r.defense for r in runs if not r.treatment} == {"nodef"}
    assert len({r.seed for r in runs}) == 10
    again = [r for r in model_runs(load_config(PAPER)) if r.replicate is not None]
    assert runs == again
    seen = set()
    for seed in range(20):  # different seeds give different (balanced) assignments
        other = copy.deepcopy(cfg)
        other["causal"]["assignment_seed"] = seed
        d = tuple(r.treatment for r in model_runs(other) if r.replicate is not None)
        assert sum(d) == 5
        seen.add(d)
    assert len(seen) > 10


def test_causal_seeds_must_not_overlap_the_grid():
    cfg = load_config(PAPER)
    cfg["causal"]["first_seed"] = 0
    with pytest.raises(ConfigError, match="causal.first_seed"):
        validate_config(cfg)


def mutate(cfg, path, value):
    cfg = copy.deepcopy(cfg)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return cfg


DELETE = object()

BAD = [
    # (description, path, value, words the message must contain)
    ("unknown defense in the grid", ("grid", 0, "defenses"), ["nodef", "madeup"],
     ["grid[0].defenses", "madeup"]),
    ("unknown defense type", ("defenses", "atat", "type"), "magic", ["defenses.atat.type", "magic"]),
    ("epsilon <= 0", ("autoattack", "epsilons"), [0.0025, 0.0], ["autoattack.epsilons.1"]),
    ("epsilon > 1", ("autoattack", "epsilons"), [2.0], ["autoattack.epsilons.0"]),
    ("missing dataset section", ("datasets", "synthfaces"), DELETE,
     ["grid[0].datasets", "synthfaces"]),
    ("wrong type", ("training", "batch_size"), "128", ["training.batch_size", "integer"]),
    ("unknown top-level key", ("learning_rate",), 0.1, ["unknown key", "learning_rate"]),
    ("unknown nested key", ("training", "momentum"), 0.9, ["training.momentum"]),
    ("bad defense parameter", ("defenses", "atat", "epsilon"), -1.0,
     ["defenses.atat.epsilon"]),
    ("unknown defense parameter", ("defenses", "atat", "eps"), 0.1, ["defenses.atat", "eps"]),
    ("milestone beyond training", ("training", "lr_milestones"), [5, 50],
     ["training.lr_milestones"]),
    ("unknown attack", ("autoattack", "attacks"), ["apgd-ce", "cw"], ["autoattack.attacks.1"]),
    ("unknown AutoAttack job layout", ("autoattack", "job"), "per_eps",
     ["autoattack.job", "per_eps"]),
    ("unknown inversion attack", ("inversion", "attacks"), ["ppa", "gmi"],
     ["inversion.attacks.1"]),
    ("undefined generator", ("datasets", "synthfaces", "generator"), "stylegan3",
     ["datasets.synthfaces.generator", "stylegan3"]),
    ("more selected than candidates", ("inversion", "ppa", "final_selection",
                                       "samples_per_target"), 50,
     ["final_selection.samples_per_target", "num_candidates"]),
    ("more targets than classes", ("inversion", "targets"), 75, ["targets = 75", "20 classes"]),
    ("unknown inversion loss", ("inversion", "ppa", "loss"), "hinge", ["inversion.ppa.loss"]),
    ("missing evaluation model", ("evaluation_model",), DELETE, ["evaluation_model"]),
    ("generator trained on a real dataset", ("generators", "synthfaces_public", "train",
                                             "dataset"), "nowhere",
     ["generators.synthfaces_public.train.dataset", "nowhere"]),
]



def _assert_rejected(config, path, value, words):
    """The config with ``path`` set to ``value`` is a ConfigError whose message has ``words``."""
    with pytest.raises(ConfigError) as info:
        validate_config(mutate(config, path, value))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("desc,path,value,words", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_rejected_naming_the_key(demo, desc, path, value, words):
    _assert_rejected(demo, path, value, words)


def test_inversion_overrides_apply_per_cell():
    from atat.plan.config import inversion_params
    paper = load_config(PAPER)
    dogs = inversion_params(paper, "stanford_dogs", "resnet18", "nodef", "ppa")
    assert dogs["steps"] == 100 and dogs["lr"] == 0.01 and dogs["center_crop"] is None
    fs = inversion_params(paper, "facescrub", "resnet152", "nodef", "ppa")
    assert fs["steps"] == 50 and fs["center_crop"] == 800 and fs["targets"] == "all"
    assert inversion_params(paper, "facescrub", "resnet18", "bido_lx1e3", "ppa")["targets"] == 75
    assert inversion_params(paper, "celeba", "resnet18", "nodef", "ppdg")["targets"] == 75
    assert inversion_params(paper, "celeba", "resnet18", "nodef", "ifgmi")["steps"] == [70, 25, 25, 25]


def test_overrides_apply_per_cell(demo):
    demo["dose_response"] = None  # its NoDef lambda = 0 control would no longer match AT-AT's recipe
    demo["overrides"] = [{"when": {"dataset": "synthfaces", "defense": "atat"},
                          "training": {"lr": 1e-4}}]
    validate_config(demo)
    assert training_params(demo, "synthfaces", "resnet18", "atat")["lr"] == 1e-4
    # the other cells keep the demo's fine-tuning lr (docs/decisions.md#pretraining)
    assert training_params(demo, "synthfaces", "resnet18", "nodef")["lr"] == demo["training"]["lr"]
    assert demo["training"]["lr"] != 1e-4


def test_defense_patch_applies_per_cell(demo):
    """An override's `defense` patch changes the matched variant in the matched cells only (the
    demo's NegLS schedule spans DenseNet-47's longer run); the recipe and the type stay."""
    validate_config(demo)
    dn = defense_params(demo, "negls", ("synthfaces", "densenet47"))
    rn = defense_params(demo, "negls", ("synthfaces", "resnet18"))
    assert dn["schedule_epochs"] == training_params(demo, "synthfaces", "densenet47",
                                                   "negls")["epochs"] == 25
    assert rn["schedule_epochs"] == training_params(demo, "synthfaces", "resnet18",
                                                   "negls")["epochs"] == 10
    assert dn["type"] == rn["type"] == "negls" and "training" not in dn
    assert defense_params(demo, "negls") == rn  # no cell: the variant as defined
    assert defense_params(demo, "mid", ("synthfaces", "densenet47")) == defense_params(demo, "mid")


@pytest.mark.parametrize("overlay,key", [
    ("autoattack:\n  epsilons: [-0.1]\n", "autoattack.epsilons.0"),   # a bad magnitude
    ("training:\n  lr_gamma: .nan\n", "training.lr_gamma: nan"),       # NaN passes the schema
])
def test_snakemake_stops_before_any_job_on_a_bad_config(tmp_path, overlay, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(overlay)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(DEMO), str(bad)],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert key in out
    assert "Job stats" not in out


def test_inversion_params_do_not_depend_on_key_order():
    from atat.plan.config import inversion_params
    a = load_config(PAPER, DEMO)
    b = copy.deepcopy(a)
    b["inversion"]["ppdg"] = dict(reversed(list(b["inversion"]["ppdg"].items())))
    pa = inversion_params(a, "synthfaces", "resnet18", "nodef", "ppdg")
    pb = inversion_params(b, "synthfaces", "resnet18", "nodef", "ppdg")
    assert repr(pa) == repr(pb)    # Snakemake's params check compares the text


# ------------------------------------------------------------------------------ issue 13
def test_bido_star_resnet18_keeps_the_repo_milestones():
    """Item 4, paper D.1: 75 epochs at lr 1e-4, "all other training hyperparameters" as App. A.3:
    milestones [75, 90] (REPO), which never fire within 75 epochs."""
    paper = load_config(PAPER)
    for variant in ("bido_lx1e3", "bido_lx1e4"):
        rn18 = training_params(paper, "facescrub", "resnet18", variant)
        assert (rn18["epochs"], rn18["lr"], rn18["lr_milestones"]) == (75, 1e-4, [75, 90])
        rn152 = training_params(paper, "facescrub", "resnet152", variant)
        assert (rn152["epochs"], rn152["lr"], rn152["lr_milestones"]) == (100, 1e-3, [75, 90])
        assert rn18["val_drop_last"] and rn152["val_drop_last"]


def test_mid_and_bido_drop_the_last_partial_batch():
    """Item 7: MID/BiDO set val_drop_last (train() applies it to the val and test loaders)."""
    paper = load_config(PAPER)
    for defense in ("mid", "bido", "bido_lx1e3", "bido_lx1e4"):
        assert training_params(paper, "facescrub", "resnet152", defense)["val_drop_last"]
    assert not training_params(paper, "facescrub", "resnet152", "nodef")["val_drop_last"]


@pytest.mark.parametrize("cfg", [PAPER, DEMO])
def test_early_stopped_nodef_stops_at_the_unseen_pixels_models_accuracy(cfg):
    """Item 5: Table 3's early-stopped NoDef is in the paper grid wherever Unseen-Pixels is,
    and its target is that model's accuracy (a name, resolved from its metrics.json)."""
    config = load_config(PAPER) if cfg == PAPER else load_config(PAPER, DEMO)
    runs = model_runs(config)
    cells = {(r.dataset, r.architecture, r.seed) for r in runs if r.defense == "unseen_pixels"}
    assert cells and cells == {(r.dataset, r.architecture, r.seed) for r in runs
                               if r.defense == "nodef_es"}
    for ds, arch, _ in cells:
        params = training_params(config, ds, arch, "nodef_es")
        assert params["stop_at_val_acc"] == "unseen_pixels" and params["eval_every"] == 1
    if cfg == PAPER:
        assert ("facescrub", "resnet152", 0) in cells


def test_early_stopped_nodef_waits_for_the_unseen_pixels_model_in_the_dag():
    """Item 5: the Unseen-Pixels model's metrics.json is an input of the early-stopped job."""
    target = "results/models/synthfaces/resnet18/nodef_es/seed0/model.pt"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(DEMO), "--forceall",
         target], cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "results/models/synthfaces/resnet18/unseen_pixels/seed0/metrics.json" in out
    assert "results/models/synthfaces/resnet18/unseen_pixels_gl/seed0/model.pt" in out


NAME_CASES = [
    # (description, path, value, words the message must contain) - item 15: every value that
    # names a dataset, architecture, defense, attack, table or generator must exist
    ("table 4 architecture misspelt", ("tables", "table4_architecture"), "resnet15",
     ["tables.table4_architecture", "resnet15"]),
    ("table 4 architecture not trained", ("tables", "table4_architecture"), "resnet152",
     ["tables.table4_architecture", "resnet152", "not an architecture the grid trains"]),
    ("grid dataset", ("grid", 0, "datasets"), ["synthfacez"], ["grid[0].datasets", "synthfacez"]),
    ("grid architecture", ("grid", 0, "architectures"), ["resnet50"],
     ["grid[0].architectures", "resnet50"]),
    ("grid defense", ("grid", 0, "defenses"), ["nodef", "tldmi6"], ["grid[0].defenses", "tldmi6"]),
    ("override dataset", ("overrides",), [{"when": {"dataset": "facescrubb"}, "training": {}}],
     ["overrides[0].when.dataset", "facescrubb"]),
    ("override architecture", ("overrides",),
     [{"when": {"architecture": "resnet15"}, "training": {}}],
     ["overrides[0].when.architecture", "resnet15"]),
    ("override defense", ("overrides",), [{"when": {"defense": "bido2"}, "training": {}}],
     ["overrides[0].when.defense", "bido2"]),
    ("override defense patch without when.defense", ("overrides",),
     [{"when": {"architecture": "resnet18"}, "defense": {"alpha": -0.1}}],
     ["overrides[0].defense", "needs when.defense"]),
    ("override defense patch unknown parameter", ("overrides",),
     [{"when": {"defense": "negls"}, "defense": {"schedule_epoch": 24}}],
     ["overrides[0].defense", "schedule_epoch", "negls"]),
    ("override defense patch bad value", ("overrides",),
     [{"when": {"defense": "negls"}, "defense": {"alpha": 2.0}}], ["overrides[0].defense.alpha"]),
    ("override defense patch changes the type", ("overrides",),
     [{"when": {"defense": "negls"}, "defense": {"type": "mid"}}], ["overrides[0].defense.type"]),
    ("override with nothing to apply", ("overrides",), [{"when": {"defense": "negls"}}],
     ["overrides.0"]),
    ("override defense patch meaningless on the cell's net", ("overrides",),
     [{"when": {"architecture": "densenet47", "defense": "mid"},
       "defense": {"bottleneck_dim": 500}}],
     ["defenses.mid.bottleneck_dim", "424 features of densenet47",
      "patched by overrides for synthfaces / densenet47"]),
    ("inversion override dataset", ("inversion", "overrides"),
     [{"when": {"dataset": "dogs"}, "set": {}}], ["inversion.overrides[0].when.dataset", "dogs"]),
    ("inversion override architecture", ("inversion", "overrides"),
     [{"when": {"architecture": "vgg"}, "set": {}}],
     ["inversion.overrides[0].when.architecture", "vgg"]),
    ("inversion override defense", ("inversion", "overrides"),
     [{"when": {"defense": "nodeff"}, "set": {}}], ["inversion.overrides[0].when.defense", "nodeff"]),
    ("inversion override attack", ("inversion", "overrides"),
     [{"when": {"attack": "gmi"}, "set": {}}], ["inversion.overrides.0.when.attack"]),
    ("inversion attack", ("inversion", "attacks"), ["ppa", "kedmi"], ["inversion.attacks.1"]),
    ("autoattack attack", ("autoattack", "attacks"), ["apgd-dlr"], ["autoattack.attacks.0"]),
    ("defense type", ("defenses", "mid", "type"), "vib", ["defenses.mid.type", "vib"]),
    ("defense prior", ("defenses", "unseen_pixels", "prior"), "unseen_pixels_ag",
     ["defenses.unseen_pixels.prior", "unseen_pixels_ag"]),
    ("early-stop target variant", ("defenses", "nodef_es", "training", "stop_at_val_acc"),
     "unseen_pixel", ["defenses.nodef_es.training.stop_at_val_acc", "unseen_pixel"]),
    ("early-stop target not trained", ("defenses", "nodef_es", "training", "stop_at_val_acc"),
     "bido_lx1e4", ["defenses.nodef_es.training.stop_at_val_acc", "bido_lx1e4",
                    "trains no synthfaces/resnet18/bido_lx1e4/seed0"]),
    ("early-stop target is itself", ("defenses", "nodef_es", "training", "stop_at_val_acc"),
     "nodef_es", ["defenses.nodef_es.training.stop_at_val_acc", "its own accuracy"]),
    ("generator of the grid's dataset", ("datasets", "synthfaces", "generator"), "ffhq3",
     ["datasets.synthfaces.generator", "ffhq3"]),
    ("generator of a dataset outside the grid", ("datasets", "facescrub", "generator"),
     "ffqh", ["datasets.facescrub.generator", "ffqh"]),
    ("generator training dataset", ("generators", "synthfaces_public", "train", "dataset"),
     "synth", ["generators.synthfaces_public.train.dataset", "synth"]),
    ("dataset source", ("datasets", "synthfaces", "source"), "celebahq",
     ["datasets.synthfaces.source"]),
    ("architecture name", ("architectures", "resnet50"), {"weights": "IMAGENET1K_V1"},
     ["architectures", "resnet50"]),
    ("evaluation model architecture", ("evaluation_model", "architecture"), "inception_v4",
     ["evaluation_model.architecture"]),
    ("face embedding architecture", ("face_embedding", "architecture"), "resnet15",
     ["face_embedding.architecture"]),
    ("face embedding source", ("face_embedding", "source"), "arcface", ["face_embedding.source"]),
    ("perceptual network", ("inversion", "ppdg", "perceptual"), "vgg19",
     ["inversion.ppdg.perceptual"]),
    ("hsic split", ("hsic",), {"split": "holdout"}, ["hsic.split"]),
]


@pytest.mark.parametrize("desc,path,value,words", NAME_CASES, ids=[c[0] for c in NAME_CASES])
def test_every_name_valued_key_must_name_something_that_exists(demo, desc, path, value, words):
    _assert_rejected(demo, path, value, words)


PAPER_NAME_CASES = [
    ("causal dataset", ("causal", "dataset"), "facescrubs", ["causal.dataset", "facescrubs"]),
    ("causal architecture", ("causal", "architecture"), "resnet15", ["causal.architecture"]),
    ("causal treatment", ("causal", "treatment"), "at_at", ["causal.treatment", "at_at"]),
    ("causal control", ("causal", "control"), "nodeff", ["causal.control", "nodeff"]),
    ("table 4 architecture", ("tables", "table4_architecture"), "resnet15",
     ["tables.table4_architecture", "resnet15"]),
]


def test_rolss_on_a_densenet_stops_before_any_job():
    """RoLSS cannot load ImageNet weights into a DenseNet (docs/sources.md#rolss): a grid cell
    asking for it is rejected by the config check, not by the training job hours later."""
    cfg = load_config(PAPER)
    cfg["grid"][1]["architectures"] = ["resnet152", "densenet169"]
    with pytest.raises(ConfigError, match="defenses.rolss.*densenet169"):
        validate_config(cfg)
    paper = load_config(PAPER)
    paper["defenses"]["mid"]["bottleneck_dim"] = 1024   # fits ResNet-152/DenseNet, not ResNet-18
    with pytest.raises(ConfigError, match="planned on resnet18"):
        validate_config(paper)


@pytest.mark.parametrize("desc,path,value,words", PAPER_NAME_CASES,
                         ids=[c[0] for c in PAPER_NAME_CASES])
def test_every_name_valued_key_of_the_paper_config_must_exist(desc, path, value, words):
    _assert_rejected_naming(path, value, words)


def _assert_rejected_naming(path, value, words):
    """The paper config with ``path`` set to ``value`` is a ConfigError containing ``words``."""
    with pytest.raises(ConfigError) as info:
        validate_config(mutate(load_config(PAPER), path, value))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


MAGNITUDE_CASES = [
    # item 16: values outside what is meaningful stop before any job
    ("AT-AT epsilon beyond the input range", ("defenses", "atat", "epsilon"), 5.0,
     ["defenses.atat.epsilon", "<= 2"]),
    ("AT-AT step larger than epsilon", ("defenses", "atat", "step_size"), 0.05,   # demo epsilon 0.0245
     ["defenses.atat.step_size", "larger than epsilon"]),
    ("AT-AT negative weight", ("defenses", "atat", "weight_adv"), -0.08,
     ["defenses.atat.weight_adv"]),
    ("AT-AT both weights zero", ("defenses", "atat"),
     {"type": "atat", "weight_clean": 0.0, "weight_adv": 0.0}, ["defenses.atat.weight_adv"]),
    ("AT epsilon beyond the input range", ("defenses", "at", "epsilon"), 3.0,
     ["defenses.at.epsilon"]),
    ("AT step larger than epsilon", ("defenses", "at", "step_size"), 0.5,
     ["defenses.at.step_size", "larger than epsilon"]),
    ("MID negative beta", ("defenses", "mid", "beta"), -0.01, ["defenses.mid.beta"]),
    ("BiDO negative lambda", ("defenses", "bido", "lambda_x"), -0.05, ["defenses.bido.lambda_x"]),
    ("NegLS alpha of 1", ("defenses", "negls", "alpha"), 1.0, ["defenses.negls.alpha"]),
    ("Trap-MID trigger step beyond [0, 1]", ("defenses", "trap_mid", "step_size"), 2.0,
     ["defenses.trap_mid.step_size"]),
    ("Trap-MID beta above 1", ("defenses", "trap_mid", "beta"), 1.5, ["defenses.trap_mid.beta"]),
    ("RoLSS skip factor above 1", ("defenses", "rolss_ssf", "skip"), [1, 1, 1, 5],
     ["defenses.rolss_ssf.skip"]),
    ("mask lambda negative", ("defenses", "unseen_pixels_gl", "lambda_lasso"), -0.01,
     ["defenses.unseen_pixels_gl.lambda_lasso"]),
    ("mask init 0", ("defenses", "unseen_pixels_gl", "mask_init"), 0.0,
     ["defenses.unseen_pixels_gl.mask_init"]),
    ("mask lr 1e3", ("defenses", "unseen_pixels_gl", "mask_lr"), 1000.0,
     ["defenses.unseen_pixels_gl.mask_lr"]),
    ("training lr 1e8", ("training", "lr"), 1e8, ["training.lr", "maximum of 10"]),
    ("training lr 0", ("training", "lr"), 0.0, ["training.lr"]),
    ("defense lr 1e8", ("defenses", "permuted", "training", "lr"), 1e8,
     ["defenses.permuted.training.lr"]),
    ("override lr 1e8", ("overrides",),
     [{"when": {"defense": "nodef"}, "training": {"lr": 1e8}}], ["overrides.0.training.lr"]),
    ("evaluation model lr 1e8", ("evaluation_model", "training", "lr"), 1e8,
     ["evaluation_model.training.lr"]),
    ("epochs 0", ("training", "epochs"), 0, ["training.epochs"]),
    ("batch size 0", ("training", "batch_size"), 0, ["training.batch_size"]),
    ("lr gamma 0", ("training", "lr_gamma"), 0.0, ["training.lr_gamma"]),
    ("beta2 of 1", ("training", "betas"), [0.9, 1.0], ["training.betas.1"]),
    ("weight decay 5", ("training", "weight_decay"), 5.0, ["training.weight_decay"]),
    ("early-stop accuracy above 1", ("defenses", "nodef_es", "training", "stop_at_val_acc"),
     1.5, ["defenses.nodef_es.training.stop_at_val_acc"]),
    ("MID bottleneck wider than the features", ("defenses", "mid", "bottleneck_dim"), 1024,
     ["defenses.mid.bottleneck_dim", "424 features of densenet47"]),  # the first planned
    # cell in sorted order (synthfaces / densenet47) that it does not fit
    ("TL-DMI freezing beyond the feature extractor", ("defenses", "tldmi", "freeze_layers"), 10,
     ["defenses.tldmi.freeze_layers", "only 10 children"]),
    ("crop scale range reversed", ("augmentation", "rrc_scale"), [0.9, 0.5],
     ["augmentation.rrc_scale", "low <= high"]),
    ("crop scale of 0", ("augmentation", "rrc_scale"), [0.0, 1.0], ["augmentation.rrc_scale"]),
    ("evaluation crop range reversed", ("evaluation_model", "augmentation", "rrc_scale"),
     [1.0, 0.85], ["evaluation_model.augmentation.rrc_scale"]),
]
#: on the demo with its dog-breed overlay (config/overlays/demo-dogs.yaml)
DOG_CASES = [
    ("a dog population judged by a face network", ("datasets", "synthdogs", "faces"), True,
     ["datasets.synthdogs.faces", "synthetic.domain is 'dogs'", "faces: false"]),
    ("an unknown synthetic domain", ("datasets", "synthdogs", "synthetic", "domain"), "cats",
     ["domain", "cats"]),
]


@pytest.mark.parametrize("desc,path,value,words", MAGNITUDE_CASES,
                         ids=[c[0] for c in MAGNITUDE_CASES])
def test_meaningless_magnitudes_are_rejected(demo, desc, path, value, words):
    _assert_rejected(demo, path, value, words)


@pytest.mark.parametrize("desc,path,value,words", DOG_CASES, ids=[c[0] for c in DOG_CASES])
def test_meaningless_dog_settings_are_rejected(demo_dogs, desc, path, value, words):
    _assert_rejected(demo_dogs, path, value, words)


# ------------------------------------------------------------------ docs review (issue 13 items
# 15/16, "Config names are resolved up front"): each of these passed validation and failed
# in a job (KeyError, ValueError, Snakemake "missing input") or dropped a target silently.
def _public_classifier(cfg):
    cfg["face_embedding"] = {"source": "public_classifier", "architecture": "resnet18",
                             "resolution": 64, "training": {"epochs": 5, "lr_milestones": [3]}}
    return cfg


UP_FRONT_CASES = [
    # item 1: keys the attacks read without a default
    *[(f"ppa without {key}", ("inversion", "ppa", key), DELETE, ["inversion.ppa", key])
      for key in ("candidates", "batch_size", "steps", "lr", "betas", "rrc_scale", "rrc_ratio",
                  "final_selection")],
    *[(f"ppdg without {key}", ("inversion", "ppdg", key), DELETE, ["inversion.ppdg", key])
      for key in ("candidates", "batch_size", "steps", "lr", "betas", "rrc_scale", "rrc_ratio",
                  "final_selection", "num_rounds", "measure", "num_inv_points", "tune_lr",
                  "perceptual")],
    *[(f"{attack} without candidates.{key}", ("inversion", attack, "candidates", key), DELETE,
       [f"inversion.{attack}.candidates", key])
      for attack in ("ppa", "ifgmi", "ppdg") for key in ("num_candidates", "search_space_size")],
    *[(f"{attack} without final_selection.{key}", ("inversion", attack, "final_selection", key),
       DELETE, [f"inversion.{attack}.final_selection", key])
      for attack in ("ppa", "ppdg") for key in ("samples_per_target", "iterations")],
    *[(f"ifgmi without {key}", ("inversion", "ifgmi", key), DELETE, ["inversion.ifgmi", key])
      for key in ("candidates", "batch_size", "steps")],
    # item 2: the evaluation model's flip is RandomHorizontalFlip's 0.5 or off
    ("evaluation flip 0.3", ("evaluation_model", "augmentation", "flip"), 0.3,
     ["evaluation_model.augmentation.flip"]),
    ("evaluation flip 1", ("evaluation_model", "augmentation", "flip"), 1,
     ["evaluation_model.augmentation.flip"]),
    # item 3: the AutoAttack job's settings rule, before any job
    ("autoattack settings group", ("autoattack", "settings"), {"apgd_ce": {"n_iter": 5}},
     ["autoattack.settings", "apgd_ce"]),
    ("autoattack settings key", ("autoattack", "settings"), {"apgd": {"n_queries": 5}},
     ["autoattack.settings", "apgd.n_queries"]),
    ("autoattack settings value", ("autoattack", "settings"), {"square": {"p_init": 2.0}},
     ["autoattack.settings", "p_init"]),
    ("autoattack settings integer", ("autoattack", "settings"), {"fab": {"n_iter": 2.5}},
     ["autoattack.settings", "fab.n_iter"]),
    ("autoattack settings with version standard", ("autoattack", "version"), "standard",
     ["autoattack.settings", "version='custom'"]),
    # item 4: one IF-GMI radius per stage
    ("ifgmi max_radius_mid shorter than steps", ("inversion", "ifgmi", "max_radius_mid"),
     [1000, 2000], ["inversion.ifgmi.max_radius_mid", "2 radii", "3 stages"]),
    ("ifgmi max_radius_w shorter than steps", ("inversion", "ifgmi", "max_radius_w"), [1000],
     ["inversion.ifgmi.max_radius_w", "1 radii", "3 stages"]),
    ("ifgmi more stages than default radii", ("inversion", "ifgmi", "steps"), [5] * 9,
     ["inversion.ifgmi.max_radius_mid", "9 stages"]),
    # item 5: milestones of the auxiliary networks, as in training
    ("evaluation model milestone beyond epochs", ("evaluation_model", "training",
                                                  "lr_milestones"), [11, 15],
     ["evaluation_model.training.lr_milestones", "epochs = 15"]),
    ("face embedding milestone beyond epochs", ("face_embedding", "training", "lr_milestones"),
     [20], ["face_embedding.training.lr_milestones", "epochs = 15"]),
    ("evaluation model default milestones beyond epochs",
     ("evaluation_model", "training"), {"epochs": 10},
     ["evaluation_model.training.lr_milestones", "epochs = 10", "[75, 90]"]),
    # item 9: a crop larger than the generator's images crops nothing
    ("generator center crop 2000", ("generators", "synthfaces_public", "center_crop"), 2000,
     ["generators.synthfaces_public.center_crop"]),
    ("trained generator crop beyond its resolution",
     ("generators", "synthfaces_public", "center_crop"), 64,
     ["generators.synthfaces_public.center_crop", "32 px"]),
]


@pytest.mark.parametrize("desc,path,value,words", UP_FRONT_CASES,
                         ids=[c[0] for c in UP_FRONT_CASES])
def test_values_a_job_would_fail_on_are_rejected_up_front(demo, desc, path, value, words):
    _assert_rejected(demo, path, value, words)


@pytest.mark.parametrize("desc,path,value", [
    ("evaluation flip 0", ("evaluation_model", "augmentation", "flip"), 0),
    ("evaluation flip 0.5", ("evaluation_model", "augmentation", "flip"), 0.5),
    ("ppa override sets one key", ("inversion", "overrides"),
     [{"when": {"architecture": "resnet18"}, "set": {"ppa": {"steps": 5}}}]),
    ("ifgmi one radius per stage", ("inversion", "ifgmi"),
     {"candidates": {"num_candidates": 10, "search_space_size": 100}, "batch_size": 5,
      "steps": [5, 5], "max_radius_mid": [1, 2], "max_radius_w": [1, 2]}),
    ("trained generator crop at its resolution",
     ("generators", "synthfaces_public", "center_crop"), 32),
])
def test_the_new_checks_accept_what_the_jobs_accept(demo, desc, path, value):
    validate_config(mutate(demo, path, value))


PAPER_UP_FRONT_CASES = [
    # item 6: the default Table 4 architecture must be trained, or the key set
    ("no table4_architecture and no resnet152",
     lambda c: (c.pop("tables"),
                [cell.update(architectures=["resnet18"]) for cell in c["grid"]],
                c["causal"].update(architecture="resnet18")),
     ["tables.table4_architecture", "not set", "resnet152", "trained: ['resnet18']"]),
    # item 7: nothing builds a public-classifier face embedding for a real face dataset
    ("public classifier on a real face dataset", _public_classifier,
     ["face_embedding.source", "public_classifier", "celeba", "facescrub"]),
    # item 9: no StyleGAN2 resolution is above 1024
    ("downloaded generator crop 2000",
     lambda c: c["generators"]["ffhq"].update(center_crop=2000),
     ["generators.ffhq.center_crop"]),
]


@pytest.mark.parametrize("desc,edit,words", PAPER_UP_FRONT_CASES,
                         ids=[c[0] for c in PAPER_UP_FRONT_CASES])
def test_paper_values_a_job_would_fail_on_are_rejected_up_front(desc, edit, words):
    cfg = load_config(PAPER)
    edit(cfg)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_table4_default_is_fine_when_the_grid_trains_resnet152():
    cfg = load_config(PAPER)
    del cfg["tables"]
    validate_config(cfg)


def test_autoattack_job_and_config_share_one_settings_rule():
    """robustness._check_arguments calls atat.plan.config.check_autoattack_settings (one home)."""
    from atat.plan import config as config_module

    robustness = (ROOT / "src" / "atat" / "robustness.py").read_text()
    assert "check_autoattack_settings(settings, version)" in robustness
    assert "_SETTING_KEYS" not in robustness
    with pytest.raises(ValueError, match="unknown setting apgd.n_queries"):
        config_module.check_autoattack_settings({"apgd": {"n_queries": 1}}, "custom")
    assert config_module.check_autoattack_settings(None, "standard") == {}


# ------------------------------------------------------------------ statistics (issue 17)
# The regression samples are declared per config (`statistics`); a name they use that the
# config does not define -- or, with model inversion, a dataset/architecture the grid does
# not plan, which would silently shrink n -- is an error naming the key, before any job.
_LFW = {"source": "facescrub", "resolution": 224, "n_classes": 10, "generator": "ffhq",
        "faces": True}
STATISTICS_BAD = [
    ("undefined dataset", ("statistics", "samples", "generic", "datasets"),
     ["facescrub", "celeb_a"], ["statistics.samples.generic.datasets", "'celeb_a'",
                                "not defined under 'datasets'"]),
    ("undefined architecture", ("statistics", "samples", "gradient", "architectures"),
     ["resnet152", "resnet15"], ["statistics.samples.gradient.architectures", "'resnet15'"]),
    ("undefined defense", ("statistics", "samples", "generic", "defenses"),
     ["nodef", "tldmi6"], ["statistics.samples.generic.defenses", "'tldmi6'",
                           "not defined under 'defenses'"]),
    ("undefined excluded defense", ("statistics", "samples", "generic", "exclude_defenses"),
     ["bido_lx1e5"], ["statistics.samples.generic.exclude_defenses", "'bido_lx1e5'"]),
    ("unknown defense type", ("statistics", "samples", "gradient", "defense_types"),
     ["negls", "rolsss"], ["statistics.samples.gradient.defense_types", "'rolsss'"]),
    ("undefined name in exclude_rows", ("statistics", "samples", "generic", "exclude_rows"),
     [{"defense": "tldmi5", "architecture": ["resnet152", "densenet121"]}],
     ["statistics.samples.generic.exclude_rows[0].architecture", "'densenet121'"]),
    ("unknown sample key", ("statistics", "samples", "generic", "defence"), ["mid"],
     ["statistics.samples.generic", "defence"]),
    ("reference level outside a sample", ("statistics", "reference_levels", "dataset"),
     "stanford_dogs", ["statistics.reference_levels.dataset", "'stanford_dogs'",
                       "samples.generic.datasets"]),
    ("undefined reference level", ("statistics", "reference_levels", "architecture"),
     "resnet50", ["statistics.reference_levels.architecture", "'resnet50'"]),
    ("no samples", ("statistics", "samples"), DELETE, ["statistics", "samples"]),
]


@pytest.mark.parametrize("desc,path,value,words", STATISTICS_BAD,
                         ids=[c[0] for c in STATISTICS_BAD])
def test_bad_statistics_samples_are_rejected_naming_the_key(desc, path, value, words):
    _assert_rejected_naming(path, value, words)


def test_a_sample_dataset_the_grid_does_not_plan_is_an_error_with_inversion():
    """A defined dataset no grid cell trains would make the sample fit fewer models than it
    declares: an error when the statistics are built (model inversion configured), not
    without them (a reduced config that attacks nothing never fits a regression)."""
    cfg = mutate(load_config(PAPER), ("datasets", "lfw"), _LFW)
    validate_config(cfg)                              # defined, unused: fine
    cfg = mutate(cfg, ("statistics", "samples", "generic", "datasets"),
                 ["facescrub", "celeba", "lfw"])
    with pytest.raises(ConfigError, match=r"statistics.samples.generic.datasets: 'lfw' is "
                                          r"not planned by the grid"):
        validate_config(cfg)
    validate_config(mutate(cfg, ("inversion", "attacks"), []))
    # the demo declares its own samples, on its own cells
    demo = load_config(PAPER, DEMO)
    assert demo["statistics"]["samples"]["generic"]["datasets"] != \
        load_config(PAPER)["statistics"]["samples"]["generic"]["datasets"]


# --- paper_roles (issue 17): the config's names in the paper's dataset/architecture roles
ROLES_CASES = [
    ("unknown paper dataset", {"datasets": {"lfw": "synthfaces"}},
     ["paper_roles.datasets.lfw", "not one of the paper's datasets"]),
    ("unknown paper architecture", {"architectures": {"resnet50": "resnet10"}},
     ["paper_roles.architectures.resnet50", "not one of the paper's architectures"]),
    ("value not defined", {"datasets": {"facescrub": "synthfaces_c"}},
     ["paper_roles.datasets.facescrub", "'synthfaces_c' is not defined under 'datasets'"]),
    ("two paper names to one config name",
     {"datasets": {"facescrub": "synthfaces", "celeba": "synthfaces"}},
     ["paper_roles.datasets.facescrub", "'synthfaces' plays two roles",
      "['facescrub', 'celeba']"]),
    ("null value", {"architectures": {"resnet18": None}},
     ["paper_roles.architectures.resnet18"]),
    ("onto the identity of an unmapped one", {"architectures": {"resnet152": "resnet18"}},
     ["paper_roles.architectures.resnet152", "'resnet18' plays two roles",
      "['resnet152', 'resnet18']"]),
    ("unknown kind", {"defenses": {"nodef": "nodef"}}, ["paper_roles", "defenses"]),
]


@pytest.mark.parametrize("desc,roles,words", ROLES_CASES, ids=[c[0] for c in ROLES_CASES])
def test_paper_roles_errors_name_the_key(demo, desc, roles, words):
    demo["paper_roles"] = roles
    with pytest.raises(ConfigError) as info:
        validate_config(demo)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_paper_roles_absent_is_the_identity_and_the_demo_maps_its_grid(demo):
    from atat.analysis.paper import PAPER_ROLE_NAMES, paper_roles

    paper = load_config(PAPER)
    assert "paper_roles" not in paper
    assert paper_roles(paper) == {k: {n: n for n in v} for k, v in PAPER_ROLE_NAMES.items()}
    roles = paper_roles(demo)
    assert roles["architectures"] == {"resnet152": "resnet18", "resnet18": "resnet10",
                                      "densenet169": "densenet47"}
    assert roles["datasets"]["celeba"] == "synthfaces_b"
    # the Table 4 default follows the role: without the key the demo's is its ResNet-18
    del demo["tables"]
    validate_config(demo)


def test_causal_replicates_get_only_the_attacks_tables_21_22_read():
    """causal.attacks (paper App. H: PPA) decides the replicates' inversion jobs; an attack not
    run at all, or a causal response reading an attack the replicates do not get, is a
    ConfigError naming the key."""
    import copy

    import yaml

    from atat.analysis import paper
    from atat.plan.config import load_config, model_runs, validate_config

    root = Path(__file__).resolve().parents[1] / "config"
    cfg = load_config(root / "config.yaml", root / "demo.yaml")
    runs = model_runs(cfg)
    replicates = [r for r in runs if r.replicate is not None]
    assert len(replicates) == 10
    assert all(paper.run_attacks(cfg, r) == ["ppa"] for r in replicates)
    grid = paper.grid_runs(paper.Plan(cfg, runs))
    main = [r for r in grid if (r.dataset, r.architecture) == ("synthfaces", "resnet18")]
    assert main and all(paper.run_attacks(cfg, r) == ["ppa", "ifgmi", "ppdg"] for r in main)
    # the demo's other face cells: PPA and IF-GMI only (their grid blocks' `attacks`)
    assert all(paper.run_attacks(cfg, r) == ["ppa", "ifgmi"] for r in grid if r not in main)
    # the dog breeds (Table 26, the overlay config/overlays/demo-dogs.yaml): PPA only, as the
    # paper's
    with_dogs = load_config(root / "config.yaml", root / "demo.yaml",
                            root / "overlays" / "demo-dogs.yaml")
    dogs = [r for r in model_runs(with_dogs) if r.dataset == "synthdogs"]
    assert len(dogs) == 18 and all(paper.run_attacks(with_dogs, r) == ["ppa"] for r in dogs)
    regressions = yaml.safe_load((root / "regressions.yaml").read_text())
    plan = paper.Plan(cfg, runs, regressions)
    hsic = set(next(o for o in paper.REGISTRY if o.id == "hsic").targets(plan))
    assert not any("/seed10" in f for f in hsic) and len(hsic) == len(grid)
    bad = copy.deepcopy(cfg)
    bad["causal"]["attacks"] = ["ppa", "gmi"]
    with pytest.raises(ConfigError, match=r"causal\.attacks: \['gmi'\]"):
        validate_config(bad)
    regs = copy.deepcopy(regressions)
    regs["causal"]["ols_responses"] = ["ppa_attacc1", "ifgmi_dist_face"]
    with pytest.raises(ConfigError, match=r"causal\.ols_responses: 'ifgmi_dist_face'"):
        paper.check(cfg, regs)
    paper.check(cfg, regressions)


def test_a_grid_block_chooses_its_models_attacks():
    """grid[i].attacks: the attacks of that block's models (default every inversion.attacks;
    a model in several blocks gets the union); a reconstruction figure is planned only for a
    (cell, attack) with an attacked model; an unknown attack is a ConfigError naming the key."""
    import copy

    from atat.analysis import paper
    from atat.plan.config import load_config, model_runs, validate_config

    root = Path(__file__).resolve().parents[1] / "config"
    cfg = load_config(root / "config.yaml", root / "demo.yaml")
    cfg["grid"] = [{"datasets": ["synthfaces"], "architectures": ["resnet18"],
                    "defenses": ["nodef", "mid"], "attacks": ["ppa"]},
                   {"datasets": ["synthfaces"], "architectures": ["resnet18"],
                    "defenses": ["mid"], "attacks": ["ifgmi"]},
                   {"datasets": ["synthfaces"], "architectures": ["resnet10"],
                    "defenses": ["nodef"]}]
    cfg["causal"] = None
    cfg["dose_response"] = None
    cfg["statistics"]["samples"] = {
        name: {"defenses": ["nodef", "mid"], "datasets": ["synthfaces"],
               "architectures": ["resnet18", "resnet10"], "exclude_rows": []}
        for name in ("generic", "gradient")}
    validate_config(cfg)
    plan = paper.Plan(cfg, model_runs(cfg))
    got = {(r.architecture, r.defense): paper.run_attacks(cfg, r) for r in plan.runs}
    assert got == {("resnet18", "nodef"): ["ppa"], ("resnet18", "mid"): ["ppa", "ifgmi"],
                   ("resnet10", "nodef"): ["ppa", "ifgmi", "ppdg"]}
    figures = paper.output("reconstructions").targets(plan)
    assert "results/figures/reconstructions_synthfaces_resnet18_ppdg.png" not in figures
    assert "results/figures/reconstructions_synthfaces_resnet18_ifgmi.png" in figures
    assert "results/figures/reconstructions_synthfaces_resnet10_ppdg.png" in figures
    assert set(paper.reconstruction_models(plan, "synthfaces", "resnet18", "ifgmi")) == {"mid"}
    inv = paper.output("inversion").targets(plan)
    assert not any("/resnet18/" in f and "/ppdg/" in f for f in inv)
    bad = copy.deepcopy(cfg)
    bad["grid"][0]["attacks"] = ["ppa", "gmi"]
    with pytest.raises(ConfigError, match=r"grid\[0\]\.attacks: 'gmi' is not one of"):
        validate_config(bad)


NON_FINITE = [  # (overlay YAML as a user writes it, the key the message must name)
    ("training: {lr: .nan}", "training.lr: nan"),
    ("training: {lr_gamma: .nan}", "training.lr_gamma: nan"),
    ("autoattack: {epsilons: [0.031, .nan]}", "autoattack.epsilons[1]: nan"),
    ("inversion: {ppa: {lr: .inf}}", "inversion.ppa.lr: inf"),
    ("inversion: {ppa: {lr: -.inf}}", "inversion.ppa.lr: -inf"),
]


@pytest.mark.parametrize("overlay,key", NON_FINITE, ids=[k for _, k in NON_FINITE])
@pytest.mark.parametrize("base", [(PAPER,), (PAPER, DEMO)], ids=["paper", "demo"])
def test_nan_and_inf_are_rejected_naming_the_key(tmp_path, base, overlay, key):
    """JSON Schema bounds accept NaN; the finite walk over the whole config does not."""
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay + "\n")
    config = load_config(*base, path)
    with pytest.raises(ConfigError, match="must be finite") as info:
        validate_config(config)
    assert key in str(info.value), str(info.value)


def test_derived_values_are_memoised_per_config_content_and_follow_its_edits():
    """inversion_params and inversion_shards are computed once per config and job (the DAG asks
    for them thousands of times); the memo follows a key set or replaced on the first two
    levels, a deeper edit in place after forget(), and every caller gets its own copy."""
    from atat.plan import config as C

    cfg = load_config(PAPER)
    args = ("facescrub", "resnet152", "nodef", "ppa")
    first = C.inversion_params(cfg, *args)
    assert first == C._inversion_params(cfg, *args)
    first["steps"] = -1                                    # a caller's edit stays its own
    assert C.inversion_params(cfg, *args)["steps"] != -1
    assert C.inversion_params(copy.deepcopy(cfg), *args) == C.inversion_params(cfg, *args)
    cfg["inversion"]["classes_per_job"] = {"ppa": 200}      # replaced on the second level
    assert C.inversion_shards(cfg, *args) == [(0, 200), (200, 400), (400, 530)]
    cfg["inversion"]["classes_per_job"] = {"ppa": 300}
    assert C.inversion_shards(cfg, *args) == [(0, 300), (300, 530)]
    cfg.update(inversion={**cfg["inversion"], "seed": 7})   # replaced on the first level
    assert C.inversion_params(cfg, *args)["seed"] == 7
    cfg["inversion"]["ppa"]["batch_size"] = 3               # deeper, in place: after forget()
    C.forget(cfg)
    assert C.inversion_params(cfg, *args)["batch_size"] == 3
    calls = []
    value = C.memoised("test", cfg, ("k",), lambda: calls.append(1) or 42)
    assert value == C.memoised("test", cfg, ("k",), lambda: calls.append(1) or 43) == 42
    assert calls == [1]


def test_the_evaluation_models_network_matches_its_input_size_and_heads(demo):
    """Inception-v3 needs >= 75 px; a target architecture as judge has no auxiliary head."""
    inception = mutate(mutate(demo, ("evaluation_model", "architecture"), "inception_v3"),
                       ("evaluation_model", "resolution"), 32)
    with pytest.raises(ConfigError, match="evaluation_model.resolution"):
        validate_config(inception)
    judge = mutate(mutate(demo, ("evaluation_model", "architecture"), "densenet47"),
                   ("evaluation_model", "aux_logits"), True)
    with pytest.raises(ConfigError, match="evaluation_model.aux_logits"):
        validate_config(judge)
    validate_config(mutate(judge, ("evaluation_model", "aux_logits"), False))
