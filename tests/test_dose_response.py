"""AT-AT's dose-response (issue 17, beyond the paper): the sweep declared in the config
(``dose_response``), its generated variants and models in the plan, and the builder
(atat.analysis.dose_response) -- one point per lambda with 95% intervals."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from atat.analysis import paper
from atat.plan.config import (ConfigError, dose_response_defenses, dose_response_points,
                         load_config, model_runs, training_params, validate_config,
                         with_dose_response)
from atat.analysis.dose_response import ROLES, dose_response, dose_response_frame
from atat.analysis.summary import robust_column

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"
EPS = [0.031, 0.0025]
#: a sweep on the paper's main cell (as config/config.yaml's comment shows it)
PAPER_SWEEP = {"dataset": "facescrub", "architecture": "resnet152", "defense": "atat",
               "weight_adv": [0, 0.02, 0.04, 0.08, 0.16], "zero": "nodef", "attack": "ppa"}


#: the demo's sweep as designed (config/demo.yaml keeps it commented out since 2026-12-01, cut
#: for the session budget): lambda = 0 is the cell's NoDef, 0.5 the grid's AT-AT
SWEEP_FILE = ROOT / "tests" / "data" / "demo_dose_response.yaml"
DEMO_SWEEP = yaml.safe_load(SWEEP_FILE.read_text())["dose_response"]


@pytest.fixture
def demo():
    return load_config(PAPER, DEMO, SWEEP_FILE)


def _regressions():
    return yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())


# ------------------------------------------------------------------------------ the plan
def test_the_demo_plan_has_one_model_per_lambda(demo):
    points = dose_response_points(demo)
    assert [(p.weight_adv, p.defense, p.generated) for p in points] == [
        (0.0, "nodef", False), (0.125, "atat_w0p125", True), (0.25, "atat_w0p25", True),
        (0.5, "atat", False), (1.0, "atat_w1", True)]
    runs = model_runs(demo)
    added = [r for r in runs if r.dose_response]
    # lambda = 0 is the grid's NoDef and 0.5 the grid's AT-AT: only three models are added
    assert [r.defense for r in added] == ["atat_w0p125", "atat_w0p25", "atat_w1"]
    assert all((r.dataset, r.architecture, r.seed) == ("synthfaces", "resnet18", 0)
               for r in added)
    # the sweep's cell (the main cell, the miniature grid's other cells aside)
    cell = [r for r in runs if r.replicate is None
            and (r.dataset, r.architecture) == ("synthfaces", "resnet18")]
    assert len(cell) == 18 + 3
    assert sum(r.defense in ("nodef", "atat") for r in cell) == 2   # reused, not duplicated


def test_generated_variants_change_only_weight_adv(demo):
    generated = dose_response_defenses(demo)
    assert sorted(generated) == ["atat_w0p125", "atat_w0p25", "atat_w1"]
    base = demo["defenses"]["atat"]
    recipe = training_params(demo, "synthfaces", "resnet18", "atat")
    for name, variant in generated.items():
        assert {k: v for k, v in variant.items() if k not in ("weight_adv", "training")} == {
            k: v for k, v in base.items() if k != "weight_adv"}, name
        assert training_params(with_dose_response(demo), "synthfaces", "resnet18",
                               name) == recipe
    assert generated["atat_w0p25"]["weight_adv"] == 0.25
    expanded = with_dose_response(demo)
    assert set(generated) <= set(expanded["defenses"])
    assert "atat_w1" not in demo["defenses"]                     # a copy: the input is kept
    assert with_dose_response(expanded) == expanded              # idempotent
    assert paper.Plan(demo, model_runs(demo)).config["defenses"]["atat_w1"]["weight_adv"] == 1.0


def test_added_models_are_attacked_by_the_sweeps_attack_only(demo):
    plan = paper.Plan(demo, model_runs(demo), _regressions())
    by_name = {r.defense: r for r in plan.runs   # the sweep's cell, not the causal replicates
               if r.replicate is None and (r.dataset, r.architecture) == ("synthfaces", "resnet18")}
    assert paper.run_attacks(plan.config, by_name["atat_w0p25"]) == ["ppa"]
    assert paper.run_attacks(plan.config, by_name["atat"]) == ["ppa", "ifgmi", "ppdg"]
    targets = paper.final_targets(plan)
    for name in ("atat_w0p125", "atat_w0p25", "atat_w1"):
        inv = [t for t in targets if f"/{name}/" in t]
        assert inv == [f"results/inversion/synthfaces/resnet18/{name}/seed0/ppa/metrics.json"]
    assert targets[-3:] == paper.DOSE_RESPONSE_FILES
    # not in the paper's per-cell outputs: no HSIC, not in Table 1 or the reconstruction grids
    assert not [t for t in targets if t.startswith("results/hsic/") and "_w" in t]
    t1, _ = paper.hsic_table_runs(plan, "table1")
    assert not [r for r in t1 if r.dose_response]
    assert "atat_w1" not in paper.reconstruction_models(plan, "synthfaces", "resnet18", "ppa")


def test_without_a_sweep_nothing_is_planned():
    config = load_config(PAPER)
    assert config["dose_response"] is None
    assert dose_response_points(config) == [] and dose_response_defenses(config) == {}
    assert not [r for r in model_runs(config) if r.dose_response]
    assert not set(paper.DOSE_RESPONSE_FILES) & set(
        paper.final_targets(paper.Plan(config, model_runs(config), _regressions())))


def test_the_same_rule_plans_a_sweep_on_the_paper_config():
    config = load_config(PAPER)
    config["dose_response"] = copy.deepcopy(PAPER_SWEEP)
    validate_config(config)   # the generated variants pass the AT-AT parameter checks
    added = [r for r in model_runs(config) if r.dose_response]
    assert [r.defense for r in added] == ["atat_w0p02", "atat_w0p04", "atat_w0p16"]
    assert {(r.dataset, r.architecture) for r in added} == {("facescrub", "resnet152")}
    targets = paper.final_targets(paper.Plan(config, model_runs(config), _regressions()))
    assert set(paper.DOSE_RESPONSE_FILES) <= set(targets)


def test_zero_null_trains_atat_with_lambda_zero(demo):
    demo["dose_response"]["zero"] = None
    points = dose_response_points(demo)
    assert (points[0].weight_adv, points[0].defense, points[0].generated) == (0, "atat_w0", True)
    assert dose_response_defenses(demo)["atat_w0"]["weight_adv"] == 0.0


BAD = [
    ("unknown key", "lambdas", [1], "dose_response.lambdas"),
    ("unknown dataset", "dataset", "synthfacez", "dose_response.dataset"),
    ("unknown architecture", "architecture", "resnet50", "dose_response.architecture"),
    ("unknown defense", "defense", "atatt", "dose_response.defense"),
    ("a non-AT-AT defense", "defense", "at", "dose_response.defense"),
    ("NoDef as the swept defense", "defense", "nodef", "dose_response.defense"),
    ("negative lambda", "weight_adv", [0, -0.5, 1.0], "dose_response.weight_adv"),
    ("empty list", "weight_adv", [], "dose_response.weight_adv"),
    ("not a list", "weight_adv", 0.5, "dose_response.weight_adv"),
    ("repeated lambda", "weight_adv", [0.25, 0.25], "dose_response.weight_adv"),
    ("a string lambda", "weight_adv", ["0.5"], "dose_response.weight_adv"),
    ("unknown zero", "zero", "nodeff", "dose_response.zero"),
    ("zero not a NoDef", "zero", "mid", "dose_response.zero"),
    ("zero with another recipe", "zero", "permuted", "dose_response.zero"),
    ("attack not run", "attack", "gmi", "dose_response.attack"),
]


@pytest.mark.parametrize("what,key,value,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_sweep_is_a_config_error_naming_its_key(demo, what, key, value, message):
    demo["dose_response"][key] = value
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        dose_response_points(demo)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        validate_config(demo)   # the schema or the same check, before any job


def test_zero_without_lambda_zero_and_a_missing_key_are_errors(demo):
    bad = copy.deepcopy(demo)
    bad["dose_response"]["weight_adv"] = [0.25, 1.0]
    with pytest.raises(ConfigError, match=r"dose_response\.zero.*0 is not among"):
        dose_response_points(bad)
    bad = copy.deepcopy(demo)
    del bad["dose_response"]["attack"]
    with pytest.raises(ConfigError, match=r"dose_response\.attack: required"):
        dose_response_points(bad)
    bad = copy.deepcopy(demo)
    bad["inversion"]["attacks"] = ["ifgmi"]
    with pytest.raises(ConfigError, match=r"dose_response\.attack.*dose_response: null"):
        dose_response_points(bad)


def test_per_cell_overrides_of_the_atat_variant_reach_the_generated_ones(demo):
    """An override naming `atat` would not match `atat_w0p25`: the generated variants carry
    the AT-AT variant's whole recipe of the cell, so every lambda trains alike; the NoDef
    control then differs from it, which is an error (not the lambda = 0 control)."""
    demo["overrides"] = [{"when": {"dataset": "synthfaces", "defense": "atat"},
                          "training": {"lr": 1e-4}}]
    with pytest.raises(ConfigError, match=r"dose_response\.zero.*another recipe"):
        validate_config(demo)
    demo["dose_response"]["zero"] = None
    expanded = with_dose_response(demo)
    for name in ("atat_w0", "atat_w0p125", "atat_w1"):
        assert training_params(expanded, "synthfaces", "resnet18", name)["lr"] == 1e-4
    # an override without `defense` before the one naming it would break that
    demo["overrides"].insert(0, {"when": {"dataset": "synthfaces"}, "training": {"lr": 1e-3}})
    with pytest.raises(ConfigError, match=r"dose_response\.defense.*another training recipe"):
        with_dose_response(demo)


def test_a_sweep_error_comes_after_those_of_the_names_it_refers_to(demo):
    demo["defenses"]["atat"]["type"] = "magic"
    with pytest.raises(ConfigError, match=r"defenses\.atat\.type"):
        validate_config(demo)


def test_a_generated_name_taken_by_another_variant_is_an_error(demo):
    demo["defenses"]["atat_w0p25"] = {"type": "atat", "weight_adv": 0.25, "epsilon": 0.01,
                                      "step_size": 0.001}
    with pytest.raises(ConfigError, match=r"dose_response\.weight_adv.*atat_w0p25"):
        dose_response_points(demo)


def test_the_base_variant_must_state_its_lambda(demo):
    del demo["defenses"]["atat"]["weight_adv"]
    with pytest.raises(ConfigError, match=r"dose_response\.defense.*weight_adv"):
        dose_response_points(demo)


# ------------------------------------------------------------------------------ the builder
POINTS = [{"weight_adv": 0.0, "defense": "nodef", "generated": False},
          {"weight_adv": 0.25, "defense": "atat_w0p25", "generated": True},
          {"weight_adv": 0.5, "defense": "atat", "generated": False},
          {"weight_adv": 1.0, "defense": "atat_w1", "generated": True}]


def _summary(seeds=(0,)):
    """A fabricated results/summary.csv: the sweep's models plus another cell and defense,
    rates that are counts over 64 AutoAttack images and 100 attack images."""
    rows = []
    for i, (defense, dtype) in enumerate([("nodef", "nodef"), ("atat_w0p25", "atat"),
                                          ("atat", "atat"), ("atat_w1", "atat"),
                                          ("mid", "mid")]):
        for seed in seeds:
            row = {"dataset": "synthfaces", "architecture": "resnet18", "defense": defense,
                   "defense_type": dtype, "seed": seed, "replicate": None, "treatment": None,
                   "test_acc": 0.5 + 0.01 * i, "n_test": 100,
                   "ppa_attacc1": (40 - 5 * i - seed) / 100, "ppa_n_images": 100}
            for j, eps in enumerate(EPS):
                row[robust_column(eps)] = (32 - 4 * i - 8 * j + seed) / 64
                row[f"aa_n_examples_eps{eps:g}"] = 64
            rows.append(row)
    other = dict(rows[0], architecture="resnet152", ppa_attacc1=0.99)
    return pd.DataFrame(rows + [other])


def test_one_point_per_lambda_with_intervals():
    frame = dose_response_frame(_summary(), POINTS, dataset="synthfaces",
                                architecture="resnet18", attack="ppa", epsilons=EPS,
                                zero="nodef")
    assert frame["weight_adv"].tolist() == [0.0, 0.25, 0.5, 1.0]
    assert frame["defense"].tolist() == ["nodef", "atat_w0p25", "atat", "atat_w1"]
    assert frame.loc[0, "model"] == ROLES["zero"]        # lambda = 0 is the NoDef model
    assert frame["model"].tolist()[1:] == [ROLES["generated"], ROLES["base"], ROLES["generated"]]
    for col in [robust_column(e) for e in EPS] + ["ppa_attacc1"]:
        assert (frame[f"{col}_ci_low"] < frame[col]).all()
        assert (frame[col] < frame[f"{col}_ci_high"]).all()
        assert frame[f"{col}_ci_low"].between(0, 1).all() and frame[f"{col}_ci_high"].le(1).all()
    assert frame[robust_column(0.031)].tolist() == [32 / 64, 28 / 64, 24 / 64, 20 / 64]
    assert frame["ppa_attacc1"].tolist() == [0.40, 0.35, 0.30, 0.25]   # not the RN-152 row
    assert frame["ppa_n_images"].tolist() == [100] * 4
    # the Wilson interval of 40/100 (statsmodels: 0.3094..0.4980)
    assert frame.loc[0, "ppa_attacc1_ci_low"] == pytest.approx(0.3094, abs=1e-4)
    assert frame.loc[0, "ppa_attacc1_ci_high"] == pytest.approx(0.4980, abs=1e-4)


def test_seeds_are_pooled_into_one_point():
    frame = dose_response_frame(_summary(seeds=(0, 1)), POINTS, dataset="synthfaces",
                                architecture="resnet18", attack="ppa", epsilons=EPS)
    assert len(frame) == len(POINTS) and frame["n_seeds"].tolist() == [2] * 4
    assert frame.loc[0, "ppa_attacc1"] == pytest.approx((40 + 39) / 200)
    assert frame.loc[0, "ppa_n_images"] == 200
    assert frame.loc[0, f"{robust_column(0.031)}_n"] == 128
    # without `zero` the lambda = 0 model is not called the NoDef control
    assert frame.loc[0, "model"] == ROLES["base"]


def test_a_missing_model_or_column_is_an_error():
    summary = _summary()
    with pytest.raises(ValueError, match=r"atat_w1.*lambda = 1"):
        dose_response_frame(summary[summary["defense"] != "atat_w1"], POINTS,
                            dataset="synthfaces", architecture="resnet18", attack="ppa",
                            epsilons=EPS)
    with pytest.raises(ValueError, match="ifgmi_attacc1"):
        dose_response_frame(summary, POINTS, dataset="synthfaces", architecture="resnet18",
                            attack="ifgmi", epsilons=EPS)
    bad = summary.copy()
    bad.loc[bad["defense"] == "atat", "ppa_attacc1"] = 0.3333
    with pytest.raises(ValueError, match="not a multiple of 1/100"):
        dose_response_frame(bad, POINTS, dataset="synthfaces", architecture="resnet18",
                            attack="ppa", epsilons=EPS)


def test_clean_accuracy_has_its_wilson_interval_and_needs_its_count(tmp_path):
    """Clean test accuracy is an estimate too (over the model's n_test test images): its 95%
    Wilson interval is in the frame, drawn as error bars, and a summary without n_test stops
    with a message naming the column (no bare point)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.container import ErrorbarContainer

    from atat.analysis.dose_response import dose_response_figure
    from atat.analysis.stats.intervals import wilson_interval

    frame = dose_response_frame(_summary(seeds=(0, 1)), POINTS, dataset="synthfaces",
                                architecture="resnet18", attack="ppa", epsilons=EPS)
    assert frame["n_test"].tolist() == [200] * 4                     # two seeds pooled
    for i in range(4):
        lo, hi = wilson_interval(2 * (50 + i), 200)
        assert frame.loc[i, ["test_acc_ci_low", "test_acc_ci_high"]].tolist() == [lo, hi]
    figs = []
    real_close = plt.close
    try:
        plt.close = figs.append           # keep the figure open for inspection
        dose_response_figure(frame, tmp_path / "d.png", attack="ppa", epsilons=EPS, title="t")
    finally:
        plt.close = real_close
    ax = figs[0].axes[0]
    acc = [c for c in ax.containers if isinstance(c, ErrorbarContainer)
           and c.get_label() == "clean test acc."]
    (seg,) = [lc.get_segments() for lc in acc[0].lines[2]]
    assert np.allclose([(s[0][1], s[1][1]) for s in seg],
                       frame[["test_acc_ci_low", "test_acc_ci_high"]].to_numpy())
    assert "95% Wilson" in ax.get_legend().get_title().get_text()
    real_close(figs[0])
    with pytest.raises(ValueError, match="n_test"):
        dose_response_frame(_summary().drop(columns="n_test"), POINTS, dataset="synthfaces",
                            architecture="resnet18", attack="ppa", epsilons=EPS)


def test_the_builder_writes_table_and_figure(tmp_path):
    csv = tmp_path / "summary.csv"
    _summary().to_csv(csv, index=False)
    outs = [tmp_path / "dose_response.csv", tmp_path / "dose_response.md",
            tmp_path / "dose_response.png"]
    frame = dose_response(csv, outs, points=POINTS, dataset="synthfaces",
                          architecture="resnet18", attack="ppa", epsilons=EPS, zero="nodef",
                          n_classes=20)
    back = pd.read_csv(outs[0])
    assert back["weight_adv"].tolist() == frame["weight_adv"].tolist() == [0, 0.25, 0.5, 1.0]
    md = outs[1].read_text()
    assert md.count("\n| ") == 1 + len(POINTS)       # header + one row per lambda
    assert "0.400 [0.309, 0.498]" in md and "'nodef' model" in md
    assert outs[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_rule_builds_one_point_per_lambda_from_a_summary(tmp_path):
    """Rule dose_response through Snakemake on the demo config with its designed sweep, from
    a fabricated results/summaries/dose_response.csv (its own summary; no model is trained:
    only that rule may run): its params (the points of atat.plan.config), the script and the
    builder give one row per lambda with intervals, and the figure."""
    import subprocess
    import sys

    demo = load_config(PAPER, DEMO, SWEEP_FILE)
    sweep = SWEEP_FILE
    points = dose_response_points(demo)
    rows = []
    for i, p in enumerate(points):
        row = {"dataset": "synthfaces", "architecture": "resnet18", "defense": p.defense,
               "defense_type": "nodef" if p.defense == "nodef" else "atat", "seed": 0,
               "replicate": None, "treatment": None, "test_acc": 0.55, "n_test": 100,
               "ppa_attacc1": (30 - i) / 100, "ppa_n_images": 100}
        for eps in demo["autoattack"]["epsilons"]:
            row[robust_column(eps)] = (40 - 3 * i) / 64
            row[f"aa_n_examples_eps{eps:g}"] = 64
        rows.append(row)
    # the rule reads its own summary (rule output_summary; issue 43), as rule summary writes
    own = tmp_path / paper.output_summary_file("dose_response")
    own.parent.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(own, index=False)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(tmp_path), "--configfile", str(DEMO), str(sweep), "--cores", "1", "--allowed-rules",
         "dose_response", "--", *paper.DOSE_RESPONSE_FILES],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pd.read_csv(tmp_path / "results" / "tables" / "dose_response.csv")
    assert table["weight_adv"].tolist() == [p.weight_adv for p in points]
    assert table["defense"].tolist() == [p.defense for p in points]
    for col in [robust_column(e) for e in demo["autoattack"]["epsilons"]] + ["ppa_attacc1"]:
        assert (table[f"{col}_ci_low"] < table[col]).all()
        assert (table[col] < table[f"{col}_ci_high"]).all()
    png = tmp_path / "results" / "figures" / "dose_response.png"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_generated_variants_are_labelled_from_their_base_everywhere():
    """Tables and figures read defense labels from atat.analysis.paper: a generated dose-response
    variant is named after its base defense and lambda, not by its file name."""
    from atat.plan.config import dose_response_variant_name
    from atat.analysis.paper import DEFENSE_LABELS, REGISTRY, label

    for lam, text in ((0.25, "AT-AT (\u03bb = 0.25)"), (1.0, "AT-AT (\u03bb = 1)"),
                      (1e-05, "AT-AT (\u03bb = 1e-05)")):
        name = dose_response_variant_name("atat", lam)
        assert label(DEFENSE_LABELS, name) == text
        assert DEFENSE_LABELS.get(name) == text
        assert DEFENSE_LABELS[name] == text
        assert REGISTRY[0].defense_labels().get(name) == text
    assert DEFENSE_LABELS.get("unknown_w1", "fallback") == "fallback"
    assert label(DEFENSE_LABELS, "atat_wx") == "atat_wx"
    assert "atat_w1" not in DEFENSE_LABELS      # the registry's name check stays strict
