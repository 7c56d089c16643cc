"""The registry of paper outputs (atat.analysis.paper, issue 15 item 1): the targets of `all`, the
names its entries refer to, one label per defense."""

from __future__ import annotations

import copy
import importlib
import json
import re
from pathlib import Path

import pytest
import yaml

from atat.analysis import paper, tables
from atat.plan.config import ConfigError, load_config, model_runs

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((ROOT / "tests" / "data" / "all_targets.json").read_text())
DOGS = "overlays/demo-dogs.yaml"   # the demo's opt-in dog breeds (Table 26), after demo.yaml
CONFIGS = {"config.yaml": ("config.yaml",), "config.yaml+demo.yaml": ("config.yaml", "demo.yaml"),
           f"config.yaml+demo.yaml+{DOGS}": ("config.yaml", "demo.yaml", DOGS)}


def _regressions():
    return yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())


def _plan(key):
    config = load_config(*(ROOT / "config" / f for f in CONFIGS[key]))
    return paper.Plan(config, model_runs(config), _regressions())


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_final_targets_are_the_recorded_ones(key):
    """The registry plans exactly what the rules files planned before it (recorded with
    that code: 514 files for the paper config, 108 for the demo; 516 and 110 with the
    preconditions table of issue 17), in the same order. The demo with its dog-breed overlay
    plans what the demo planned before the dogs became an overlay (2026-12-06)."""
    assert paper.final_targets(_plan(key)) == RECORDED[key]


def _rules_text(stage: str) -> str:
    return (ROOT / "workflow" / "rules" / f"{stage}.smk").read_text()


def test_every_entry_names_its_rule_and_an_existing_builder():
    """A written-out rule is `rule <name>:` in the entry's rules file; a table of a family
    gets its rule, named after the table, from the family's loop in that file."""
    for o in paper.REGISTRY:
        text = _rules_text(o.stage)
        if o.family:
            assert o.rule == o.id and paper.TABLE_FAMILIES[o.family] == o.stage, o.id
            assert f'for _table in table_rules(PLAN, "{o.family}"):' in text, o.id
        else:
            assert f"rule {o.rule}:" in text, o.id
        module, func = o.builder.split(":")
        assert callable(getattr(importlib.import_module(module), func)), o.builder
    # the check can fail: a family no rules file loops over
    assert 'table_rules(PLAN, "no_such_family")' not in _rules_text("tables")


def test_one_rule_per_table_no_shared_output_pattern():
    """Issue 15 item 6: no table rule has a wildcard in its outputs (the patterns once kept
    apart only by wildcard constraints): every rule writing results/tables/ names its files."""
    blocks = [b for smk in (ROOT / "workflow" / "rules").glob("*.smk")
              for b in re.split(r"^[ \t]*rule\b", smk.read_text(), flags=re.M)[1:]]
    table_rules = [b for b in blocks if '"results/tables/' in b]
    assert len(table_rules) >= 8
    for block in table_rules:
        name = block.split("\n", 2)[:2]
        assert "wildcard_constraints" not in block, name
        for path in re.findall(r'"(results/tables/[^"]*)"', block):
            # fixed, or the loop's own table: f"results/tables/{_table}.csv"
            assert "{" not in path or re.fullmatch(r"results/tables/\{_table\}\.\w+", path), name


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_table_rules_of_each_family(key):
    """The tables that get a rule: every regression and main-results table, the AutoAttack
    tables of the configured epsilons, the HSIC tables whose selection holds models."""
    plan = _plan(key)
    assert paper.table_rules(plan, "regression_table") == [
        f"table{t}" for t in paper.REGRESSION_TABLE_IDS]
    assert paper.table_rules(plan, "main_results_table") == [
        f"table{t}" for t in paper.MAIN_TABLE_IDS]
    assert paper.table_rules(plan, "robustness_table") == [
        f"table{n}" for n in sorted(map(int, paper.robustness_table_eps(plan.config)))]
    hsic = paper.table_rules(plan, "hsic_table")
    assert hsic == [t for t in tables.HSIC_TABLE_IDS if paper.hsic_table_runs(plan, t)[0]]
    # every target table of the plan has its rule
    ruled = {t for f in paper.TABLE_FAMILIES for t in paper.table_rules(plan, f)}
    family_targets = {o.id for o in paper.REGISTRY if o.family and o.targets(plan)}
    assert family_targets <= ruled
    expected_hsic = {"config.yaml": ["table1", "table8", "table9"],
                     "config.yaml+demo.yaml": ["table1", "table8", "table9"],
                     f"config.yaml+demo.yaml+{DOGS}": ["table1", "table8", "table9"]}[key]
    assert hsic == expected_hsic


def test_table_rules_reject_an_unknown_family_and_id():
    plan = _plan("config.yaml")
    with pytest.raises(ValueError, match="unknown table family 'robustness'"):
        paper.table_rules(plan, "robustness")
    assert paper.table_number("table15") == "15"
    with pytest.raises(ValueError, match="not a numbered table id"):
        paper.table_number("table21_22")


def test_every_rule_has_its_resources_in_the_slurm_profile():
    """Each rule the cluster runs (not `localrule: True`, not `all`) has a block under
    set-resources of profiles/slurm (CPU rules: one CPU, 4 GB; GPU rules: the GPU block),
    written-out rules and the one-per-table rules the registry's families generate alike."""
    written, local = set(), set()
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(),
                                     re.M):
            (local if re.search(r"^\s+localrule:\s*True", body, re.M) else written).add(rule)
    generated = {o.rule for o in paper.REGISTRY if o.family}
    assert {"train_model", "table4"} <= written and {"table15", "table1"} <= generated
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    missing = sorted((written | generated) - local - set(profile["set-resources"]))
    assert not missing, f"rules without a block in profiles/slurm/config.yaml: {missing}"


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_no_two_entries_claim_a_file(key):
    """One rule per table with fixed output paths: a file claimed by two entries would be
    two rules for one output (an AmbiguousRuleException)."""
    plan = _plan(key)
    files = [t for o in paper.REGISTRY for t in o.targets(plan)]
    assert len(files) == len(set(files))
    ids = [o.id for o in paper.REGISTRY]
    assert len(ids) == len(set(ids))


def test_stage_targets_partition_the_final_targets():
    plan = _plan("config.yaml")
    stages = {o.stage for o in paper.REGISTRY}
    by_stage = [t for s in stages for t in paper.final_targets(plan, s)]
    assert sorted(by_stage) == sorted(paper.final_targets(plan))


def test_one_label_per_defense_and_architecture():
    assert tables.DEFENSE_LABELS is paper.DEFENSE_LABELS
    assert tables.ARCH_LABELS is paper.ARCH_LABELS
    import atat.measures.hsic_measure as hm
    assert not hasattr(hm, "HSIC_LABELS") and not hasattr(hm, "ARCH_LABELS")
    # paper typography: Table 9's caption writes BiDO(.001,0); Table 1 calls it BiDO**
    assert paper.output("table9").defense_labels()["bido_lx1e3"] == "BiDO(.001,0)"
    assert paper.output("table1").defense_labels()["bido_lx1e3"] == "BiDO**"
    assert paper.output("table4").defense_labels()["bido_lx1e4"] == "BiDO(.0001,0)"


def test_table_ids_agree_with_the_builders_layouts():
    assert paper.MAIN_TABLE_IDS == [str(n) for n in sorted(tables.MAIN_TABLES)]
    assert {f"T{t}" for t in paper.REGRESSION_TABLE_IDS} == set(tables.REGRESSION_TABLES)
    assert [o.id for o in paper.REGISTRY if o.family == "hsic_table"] == tables.HSIC_TABLE_IDS


def test_the_paper_and_demo_configs_pass_the_check():
    for key in CONFIGS:
        plan = _plan(key)
        paper.check(plan.config, plan.regressions)


def test_a_misspelt_spec_name_is_a_config_error():
    plan = _plan("config.yaml")
    reg = copy.deepcopy(_regressions())
    reg["cost_of_privacy"]["spec"] = "T15_ppa_generic_joint_betta"
    with pytest.raises(ConfigError, match=r"cost_of_privacy.spec.*T15_ppa_generic_joint_betta"):
        paper.check(plan.config, reg, "config/regressions.yaml")
    # without inversion no statistics entry is built, so its names are not read
    no_inv = {**plan.config, "inversion": None}
    paper.check(no_inv, reg)


def test_a_registry_name_without_label_is_an_error(monkeypatch):
    plan = _plan("config.yaml")
    monkeypatch.setattr(paper, "TABLE9_DEFENSES", [*paper.TABLE9_DEFENSES, "bido_lx1e5"])
    with pytest.raises(ConfigError, match=r"TABLE9_DEFENSES.*bido_lx1e5"):
        paper.check(plan.config, plan.regressions)


def test_a_selected_name_of_another_kind_is_a_config_error():
    plan = _plan("config.yaml")
    config = copy.deepcopy(dict(plan.config))
    config["defenses"]["bido_lx1e3"]["type"] = "mid"
    with pytest.raises(ConfigError, match=r"defenses.bido_lx1e3.*'mid'"):
        paper.check(config, plan.regressions)


def test_hsic_selection_of_the_paper_config():
    plan = _plan("config.yaml")
    t1, note = paper.hsic_table_runs(plan, "table1")
    assert note is None
    assert {(r.dataset, r.architecture) for r in t1} == {("facescrub", "resnet152")}
    assert not {r.defense for r in t1} & paper.TABLE1_EXCLUDE
    t9, _ = paper.hsic_table_runs(plan, "table9")
    assert {r.architecture for r in t9} == set(paper.TABLE9_ARCHS)
    with pytest.raises(ValueError, match="unknown HSIC table"):
        paper.hsic_table_runs(plan, "table7")


def test_translate_maps_paper_names_and_keeps_the_unmapped():
    config = {"paper_roles": {"architectures": {"resnet152": "resnet18", "resnet18": "resnet10"}}}
    assert paper.translate(config, "architectures", ["resnet18", "resnet152", "densenet169"]) \
        == ["resnet10", "resnet18", "densenet169"]
    assert paper.translate(config, "datasets", ["facescrub"]) == ["facescrub"]
    assert paper.translate({}, "architectures", paper.TABLE9_ARCHS) == paper.TABLE9_ARCHS
    assert paper.main_architecture(config) == "resnet18"
    assert paper.main_architecture({}) == "resnet152"


def test_demo_roles_select_table9_and_the_main_tables():
    """The demo's paper_roles: Table 9 = SynthFaces ResNet-10/ResNet-18 (the paper's
    FaceScrub ResNet-18/ResNet-152); Table 1 is its real cell (no analogue note); Tables 23,
    24 (DenseNet-169's role: DenseNet-47), 25, 27, 28 are targets; Table 26 (Stanford Dogs'
    role: the dog breeds on ResNet-18 / ResNet-10) only with the overlay
    config/overlays/demo-dogs.yaml."""
    plan = _plan("config.yaml+demo.yaml")
    t9, _ = paper.hsic_table_runs(plan, "table9")
    assert {(r.dataset, r.architecture) for r in t9} == {("synthfaces", "resnet10"),
                                                         ("synthfaces", "resnet18")}
    assert {"bido_lx1e3", "nodef", "mid"} <= {r.defense for r in t9}
    t1, note = paper.hsic_table_runs(plan, "table1")
    assert note is None and {(r.dataset, r.architecture) for r in t1} == {
        ("synthfaces", "resnet18")}
    targets = set(paper.final_targets(plan))
    for t in ("table9", "table23", "table24", "table25", "table27", "table28"):
        assert f"results/tables/{t}.csv" in targets
    # no dogs in the demo: Stanford Dogs keeps its own name, whose cells the demo does not
    # train, so Table 26 and every synthdogs file are no targets
    assert paper.translate(plan.config, "datasets", ["stanford_dogs"]) == ["stanford_dogs"]
    assert not [t for t in targets if "table26" in t or "synthdogs" in t]
    dogs = _plan(f"config.yaml+demo.yaml+{DOGS}")
    assert paper.translate(dogs.config, "datasets", ["stanford_dogs"]) == ["synthdogs"]
    added = set(paper.final_targets(dogs)) - targets
    assert {f"results/tables/table26.{x}" for x in ("csv", "md", "tex")} <= added
    assert all("synthdogs" in t or "table26" in t for t in added) and len(added) == 41
    assert "results/tables/table20.csv" in targets and "results/tables/table6.csv" not in targets
    assert paper.translate(plan.config, "architectures", ["densenet169"]) == ["densenet47"]
