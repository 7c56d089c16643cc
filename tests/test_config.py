"""The config is validated before any job runs; each bad config names its key."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from atat.config import ConfigError, load_config, model_runs, training_params, validate_config

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"


@pytest.fixture
def demo():
    return load_config(PAPER, DEMO)


def test_paper_and_demo_configs_are_valid(demo):
    validate_config(load_config(PAPER))
    validate_config(demo)


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
    assert len(main) == 2 * 3 * 8 + 2 * 2 * 2 + 2 + 2 * 9 + 2 * 2 + 2 + 2 * 3 + 1


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


@pytest.mark.parametrize("desc,path,value,words", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_rejected_naming_the_key(demo, desc, path, value, words):
    with pytest.raises(ConfigError) as info:
        validate_config(mutate(demo, path, value))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_inversion_overrides_apply_per_cell():
    from atat.config import inversion_params
    paper = load_config(PAPER)
    dogs = inversion_params(paper, "stanford_dogs", "resnet18", "nodef", "ppa")
    assert dogs["steps"] == 100 and dogs["lr"] == 0.01 and dogs["center_crop"] is None
    fs = inversion_params(paper, "facescrub", "resnet152", "nodef", "ppa")
    assert fs["steps"] == 50 and fs["center_crop"] == 800 and fs["targets"] == "all"
    assert inversion_params(paper, "facescrub", "resnet18", "bido_lx1e3", "ppa")["targets"] == 75
    assert inversion_params(paper, "celeba", "resnet18", "nodef", "ppdg")["targets"] == 75
    assert inversion_params(paper, "celeba", "resnet18", "nodef", "ifgmi")["steps"] == [70, 25, 25, 25]


def test_overrides_apply_per_cell(demo):
    demo["overrides"] = [{"when": {"dataset": "synthfaces", "defense": "atat"},
                          "training": {"lr": 1e-4}}]
    validate_config(demo)
    assert training_params(demo, "synthfaces", "resnet18", "atat")["lr"] == 1e-4
    assert training_params(demo, "synthfaces", "resnet18", "nodef")["lr"] == 1e-3


def test_snakemake_stops_before_any_job_on_a_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("autoattack:\n  epsilons: [-0.1]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(DEMO), str(bad)],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "autoattack.epsilons.0" in out
    assert "Job stats" not in out


def test_inversion_params_do_not_depend_on_key_order():
    from atat.config import inversion_params
    a = load_config(PAPER, DEMO)
    b = copy.deepcopy(a)
    b["inversion"]["ppdg"] = dict(reversed(list(b["inversion"]["ppdg"].items())))
    pa = inversion_params(a, "synthfaces", "resnet18", "nodef", "ppdg")
    pb = inversion_params(b, "synthfaces", "resnet18", "nodef", "ppdg")
    assert repr(pa) == repr(pb)    # Snakemake's params check compares the text
