"""The one epsilon rule (atat.plan.eps_scale; docs/decisions.md#one-ε-scale): AT-AT's training
radius and AutoAttack's applied radii read the same factor; a meaningless factor is a
ConfigError naming epsilon_scale.factor; the radii tool measures what it says."""

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from atat.plan import eps_scale
from atat.plan.config import (ConfigError, defense_params, load_config, validate_config,
                              with_dose_response)

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"
PAPER_EPSILONS = (0.031, 0.0025, 0.0005, 1e-5)


@pytest.fixture
def demo():
    return load_config(PAPER, DEMO)


def with_factor(config, f):
    out = copy.deepcopy(config)
    out["epsilon_scale"] = {**(out.get("epsilon_scale") or {}), "factor": f}
    return out


def test_both_configs_state_the_rule_with_its_derivation(demo):
    paper = load_config(PAPER)
    assert paper["epsilon_scale"]["factor"] == 1
    assert eps_scale.factor(demo) == demo["epsilon_scale"]["factor"]
    for cfg in (paper, demo):
        assert len(cfg["epsilon_scale"]["derivation"]) > 40
    # the demo states AT-AT's radii in the paper's values, as the paper config does
    for key in ("epsilon", "step_size"):
        assert demo["defenses"]["atat"][key] == paper["defenses"]["atat"][key]
    assert demo["autoattack"]["epsilons"] == paper["autoattack"]["epsilons"] == list(
        PAPER_EPSILONS)


def test_units_are_converted_in_one_place():
    assert eps_scale.input_to_pixel(0.0005) == 0.00025   # the paper's AT-AT radius in pixels
    assert eps_scale.pixel_to_input(0.031) == 0.062
    assert eps_scale.MAX_INPUT_RADIUS == 2 * eps_scale.MAX_PIXEL_RADIUS == 2


@pytest.mark.parametrize("f", [1.0, 7.0, 20.0, 49.0])
def test_atat_and_autoattack_read_the_same_factor(demo, f):
    cfg = with_factor(demo, f)
    atat = defense_params(cfg, "atat", ("synthfaces", "resnet18"))
    paper = load_config(PAPER)["defenses"]["atat"]
    assert atat["epsilon"] == pytest.approx(f * paper["epsilon"], rel=1e-12)
    assert atat["step_size"] == pytest.approx(f * paper["step_size"], rel=1e-12)
    assert atat["step_size"] == pytest.approx(atat["epsilon"] / 5)   # the paper's eps / 5
    for e in PAPER_EPSILONS:
        assert eps_scale.autoattack_epsilon(cfg, e) == pytest.approx(min(f * e, 1.0), rel=1e-12)
    # the applied radii in the two units: AT-AT's in [-1, 1] input units, AutoAttack's in
    # [0, 1] pixels; one factor moves both
    ratio = eps_scale.autoattack_epsilon(cfg, 0.0005) / eps_scale.input_to_pixel(atat["epsilon"])
    base = eps_scale.autoattack_epsilon(with_factor(demo, 1.0), 0.0005) / eps_scale.input_to_pixel(
        defense_params(with_factor(demo, 1.0), "atat")["epsilon"])
    assert ratio == pytest.approx(base)
    validate_config(cfg)


def test_scaled_values_carry_no_float_noise(demo):
    atat = defense_params(with_factor(demo, 49), "atat")
    assert (atat["epsilon"], atat["step_size"]) == (0.0245, 0.0049)


def test_the_paper_factor_leaves_every_defense_as_configured():
    paper = load_config(PAPER)
    for name, variant in paper["defenses"].items():
        assert defense_params(paper, name) == {k: v for k, v in variant.items()
                                               if k != "training"}, name


def test_vanilla_at_dose_response_and_causal_variants_follow_the_rule(demo):
    cfg = with_factor(demo, 10.0)
    cfg["defenses"]["at"] = {"type": "at"}      # its radii are the defaults: the paper's
    at = defense_params(cfg, "at")
    assert (at["epsilon"], at["step_size"]) == (0.1, 0.01)
    expanded = with_dose_response(cfg)
    generated = [n for n in expanded["defenses"] if n.startswith("atat_w")]
    assert generated
    for name in generated:
        assert defense_params(expanded, name)["epsilon"] == defense_params(cfg, "atat")["epsilon"]
    assert cfg["causal"]["treatment"] == "atat"


def test_a_variant_without_radii_trains_at_the_scaled_defaults(demo):
    cfg = with_factor(demo, 49)
    cfg["defenses"]["atat_plain"] = {"type": "atat"}
    assert defense_params(cfg, "atat_plain")["epsilon"] == 0.0245


BAD_FACTORS = [
    ("zero", 0, ["epsilon_scale.factor"]),
    ("negative", -2.0, ["epsilon_scale.factor"]),
    ("not a number", "49", ["epsilon_scale.factor"]),
    ("infinite", math.inf, ["epsilon_scale.factor"]),
    ("nan", math.nan, ["epsilon_scale.factor"]),
    ("vanilla AT's radius beyond the input range", 250.0,   # 250 x 0.01 = 2.5 > 2
     ["epsilon_scale.factor", "defenses.at.epsilon", "[-1, 1]"]),
    ("every AutoAttack radius covers the image space", 2e5,
     ["epsilon_scale.factor"]),
]


@pytest.mark.parametrize("desc,value,words", BAD_FACTORS, ids=[b[0] for b in BAD_FACTORS])
def test_a_meaningless_factor_is_a_config_error_naming_the_key(demo, desc, value, words):
    with pytest.raises(ConfigError) as info:
        validate_config(with_factor(demo, value))
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_atat_radius_beyond_the_input_range_names_the_variant(demo):
    cfg = with_factor(demo, 5000.0)   # 5000 x 0.0005 = 2.5 > 2
    del cfg["defenses"]["at"]
    with pytest.raises(ConfigError, match=r"epsilon_scale\.factor.*defenses\.atat\.epsilon"):
        eps_scale.check(cfg)


def test_the_smallest_autoattack_radius_is_checked_too(demo):
    cfg = with_factor(demo, 200.0)   # AT-AT 0.1 in input units: fine
    cfg["autoattack"]["epsilons"] = [0.031, 0.005]   # 200 x 0.005 = 1: every image
    with pytest.raises(ConfigError, match=r"epsilon_scale\.factor.*smallest autoattack"):
        eps_scale.check(cfg)


def test_unknown_keys_of_the_rule_are_rejected(demo):
    cfg = copy.deepcopy(demo)
    cfg["epsilon_scale"]["factr"] = 3
    with pytest.raises(ConfigError, match="epsilon_scale"):
        validate_config(cfg)


def test_autoattack_runs_at_the_applied_radius_and_records_both(monkeypatch, tmp_path):
    """The job's entry point: output files and ``epsilon`` keep the paper's ε; the attack
    runs at the applied one."""
    import atat.robustness as rb

    seen = []

    def fake_eval(net, x, y, *, epsilon, **kw):
        seen.append(epsilon)
        return {"epsilon": epsilon, "robust_accuracy": 0.5, "clean_accuracy": 1.0}

    monkeypatch.setattr(rb, "_trained_model", lambda *a, **k: (nn.Identity(), {"model_id": "m"}))
    monkeypatch.setattr(rb, "first_examples", lambda *a, **k: (torch.zeros(2, 3, 4, 4),
                                                               torch.zeros(2, dtype=torch.long)))
    monkeypatch.setattr(rb, "evaluate_autoattack", fake_eval)
    outputs = {e: tmp_path / f"eps{e:g}.json" for e in PAPER_EPSILONS}
    settings = {"split": "val", "n_examples": 2, "attacks": ["apgd-ce"], "version": "standard",
                "batch_size": 2, "seed": 0}
    records = rb.evaluate_autoattack_model_file(
        model_path=tmp_path / "model.pt", dataset_root=tmp_path, outputs=outputs,
        settings=settings, resolution=4, epsilon_factor=49.0)
    assert seen == [1.0, 0.1225, 0.0245, 0.00049]   # 49 x 0.031 > 1: the whole image space
    for rec, e in zip(records, PAPER_EPSILONS):
        assert rec["epsilon"] == e and rec["epsilon_tag"] == format(e, "g")
        assert rec["epsilon_applied"] == pytest.approx(min(49 * e, 1.0), rel=1e-12)
        assert rec["epsilon_factor"] == 49.0


# --------------------------------------------------------------------------- the radii tool
class _Linear(nn.Module):
    """Two logits (0, w.x + b) on images in [0, 1]: the minimal L-inf radius that flips the
    prediction is |w.x + b| / ||w||_1 (away from the box's faces)."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = w

    def forward(self, x):
        s = x.flatten(1) @ self.w - 0.5 * self.w.sum()
        return torch.stack([torch.zeros_like(s), s], 1)


def test_bisection_finds_the_exact_radius_of_a_linear_model():
    from atat.lab.radii import bisect_radii, first_order, survival

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3 * 6 * 6, generator=gen)
    x = 0.5 + 0.01 * torch.randn(12, 3, 6, 6, generator=gen)
    net = _Linear(w)
    y = net(x).argmax(1)
    exact = net(x)[:, 1].abs() / w.abs().sum()
    radii = bisect_radii(net, x, y, steps=16, iterations=20)
    assert torch.allclose(radii, exact, rtol=2e-3)
    assert torch.allclose(first_order(net, x, y)["radius"], exact, rtol=1e-4)
    wrong = bisect_radii(net, x, 1 - y, steps=2, iterations=2)
    assert (wrong == 0).all()   # misclassified clean: radius 0
    med = float(exact.median())
    assert survival(radii, med) == pytest.approx(float((exact > med).float().mean()), abs=0.09)


def test_compare_gives_the_exponent_and_the_factor_it_implies():
    from atat.lab.radii import compare

    def rec(res, r):
        return {"resolution": res, "radius_quantiles": {"q50": r},
                "first_order": {"radius_quantiles": {"q50": r}}}

    out = compare(rec(32, 0.004), rec(64, 0.001), target_resolution=224)
    assert out["pgd"]["q50"]["exponent"] == pytest.approx(2.0)
    assert out["pgd"]["q50"]["factor"] == pytest.approx(49.0)
    out = compare(rec(32, 0.004), rec(64, 0.002))
    assert out["first_order"]["q50"]["factor"] == pytest.approx(7.0)


def test_the_training_attack_scan_is_monotone_and_leaves_the_model_untouched():
    """revision 2's measurement: AT-AT's own targeted attack at factor x its ε; on a linear
    model (inputs in [-1, 1]) it succeeds on no image at a radius far below every margin and
    on every image far above, and a BatchNorm network's running statistics are not touched
    by the train-mode pass (it runs on a copy)."""
    from atat.lab.radii import training_attack_success

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3 * 6 * 6, generator=gen)

    class Two(nn.Module):
        def forward(self, x):
            s = x.flatten(1) @ w
            return torch.stack([torch.zeros_like(s), s], 1)

    x = 0.05 * torch.randn(40, 3, 6, 6, generator=gen)
    net = Two()
    y = net(x).argmax(1)
    margin = (x.flatten(1) @ w).abs()
    unit = 0.0005 * float(w.abs().sum())            # factor 1: the paper's ε times ||w||_1
    lo, hi = float(margin.min()) / unit / 4, float(margin.max()) / unit * 8
    out = training_attack_success(net, x, y, n_classes=2, factors=(lo, hi), batch_size=16)
    assert out[format(lo, "g")]["targeted_success"] == 0.0
    assert out[format(hi, "g")]["targeted_success"] == 1.0
    assert out[format(hi, "g")]["epsilon_pixel_units"] == pytest.approx(hi * 0.0005 / 2)

    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(3))
    bn(torch.randn(2, 3, 6, 6))
    bn.eval()
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    training_attack_success(bn, x, torch.randint(0, 3, (40,), generator=gen), n_classes=3,
                            factors=(1.0, 50.0))
    assert not bn.training
    assert all(torch.equal(before[k], v) for k, v in bn.state_dict().items())


def test_the_anchor_takes_the_smallest_factor_at_half_success_else_the_ladders_end():
    from atat.lab.radii import anchor_factor

    def scan(*pairs):
        return {format(f, "g"): {"targeted_success": s} for f, s in pairs}

    got = anchor_factor(scan((1, 0.0), (2, 0.1), (5, 0.4), (10, 0.8), (20, 0.9)))
    assert got["factor"] == 10.0
    assert 5 < got["interpolated"] < 10
    assert anchor_factor(scan((1, 0.0), (20, 0.002), (50, 0.028))) == {"factor": 50.0,
                                                                        "interpolated": None}
    assert anchor_factor(scan((1, 0.6), (2, 0.9)))["factor"] == 1.0
    # the measurement of 2026-12-07 (docs/decisions.md#one-ε-scale) and the demo's factor
    rec = json.loads((ROOT / "tests" / "data" / "eps_anchor_2026-12-07.json").read_text())
    assert anchor_factor(rec["train_mode"])["factor"] == rec["anchor"]["factor"] == 50.0
    demo = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    assert demo["epsilon_scale"]["factor"] == rec["anchor"]["factor"]


# --------------------------------------------------------------------------- randomised defenses
def test_the_sensitivity_regressions_drop_mid_beside_the_pre_registered_ones():
    """config/regressions.yaml `sensitivity.without_randomised` (docs/decisions.md#randomised-
    defenses-at-evaluation): Tables 15 and 18 again without MID, never in a paper table."""
    import yaml

    from atat.analysis.stats.regression import expand_grids, fit_all, sensitivity_specs
    from atat.analysis.tables import REGRESSION_TABLES
    from test_tables import simulated_summary

    cfg = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    main = expand_grids(cfg)
    sens = sensitivity_specs(cfg)
    assert len(main) == 56                       # the paper's 56 stay as they are
    base = [s for s in main if s["table"] in ("T15", "T18")]
    assert [s["name"] for s in sens] == [f"{s['name']}__without_randomised" for s in base]
    for s in sens:
        assert "mid" in s["sample"]["exclude_defenses"] and s["table"] not in REGRESSION_TABLES
    summary = simulated_summary(causal=False)
    tidy = fit_all(summary, [next(s for s in main if s["name"] == "T15_ppa_generic_joint_ols"),
                             next(s for s in sens
                                  if s["name"] == "T15_ppa_generic_joint_ols__without_randomised")])
    n = tidy.groupby("spec")["n"].first()
    n_mid = int((summary["defense"] == "mid").sum())
    assert n_mid > 0
    assert n["T15_ppa_generic_joint_ols"] - n["T15_ppa_generic_joint_ols__without_randomised"] \
        == n_mid


@pytest.mark.parametrize("edit,words", [
    (lambda e: e.update(exclude=["mid"]), ["sensitivity.without_randomised.exclude"]),
    (lambda e: e.update(tables=["T51"]), ["sensitivity.without_randomised.tables", "T51"]),
    (lambda e: e.pop("note"), ["sensitivity.without_randomised", "note"]),
])
def test_a_bad_sensitivity_entry_names_its_key(edit, words):
    import yaml

    from atat.analysis.stats.regression import sensitivity_specs

    cfg = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    edit(cfg["sensitivity"]["without_randomised"])
    with pytest.raises(ConfigError) as info:
        sensitivity_specs(cfg)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
