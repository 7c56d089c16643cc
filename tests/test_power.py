"""The power analysis of the claims (atat.lab.power): its ICC, design effect and power
formulas against hand computations and simulation."""

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from atat.analysis.claims import Claim, Estimate, Part
from atat.analysis.claims import Test as PlanTest
from atat.lab import power

Z95, Z80 = NormalDist().inv_cdf(0.95), NormalDist().inv_cdf(0.80)


def test_anova_icc_by_hand_and_at_its_limits():
    # A: 1,1,0  B: 0,0,0 -> MSB 2/3, MSW 1/6, m0 3: (2/3 - 1/6) / (2/3 + 2/6) = 0.5
    icc, m0 = power.anova_icc([1, 1, 0, 0, 0, 0], list("AAABBB"))
    assert icc == pytest.approx(0.5) and m0 == pytest.approx(3.0)
    icc, _ = power.anova_icc([1, 1, 0, 0], list("AABB"))        # classes all-or-nothing
    assert icc == pytest.approx(1.0)
    assert math.isnan(power.anova_icc([1, 0, 1], list("AAA"))[0])   # one class: undefined


def test_independent_images_have_icc_near_zero_and_clustered_ones_high():
    rng = np.random.default_rng(0)
    classes = np.repeat(np.arange(200), 10)
    independent = rng.random(len(classes)) < 0.4
    assert abs(power.anova_icc(independent, classes)[0]) < 0.03
    p_class = rng.beta(0.5, 0.5, 200)                      # strongly class-dependent success
    clustered = rng.random(len(classes)) < p_class[classes]
    assert power.anova_icc(clustered, classes)[0] > 0.4


def test_class_clustering_one_row_per_attacked_model_with_its_design_effect():
    rows = []
    for defense, outcome in (("nodef", [1, 1, 0, 0, 0, 0]), ("atat", [1, 0, 1, 0, 1, 0])):
        for i, c in enumerate(outcome):
            rows.append({"dataset": "d", "architecture": "a", "defense": defense, "seed": 0,
                         "attack": "ppa", "class": i // 3, "correct_top1": c})
    out = power.class_clustering(pd.DataFrame(rows)).set_index("defense")
    assert out.loc["nodef", "icc"] == pytest.approx(0.5)
    assert out.loc["nodef", "design_effect"] == pytest.approx(1 + 2 * 0.5)
    assert out.loc["nodef", "effective_images"] == pytest.approx(6 / 2)
    assert out.loc["atat", "design_effect"] == pytest.approx(1.0)   # negative ICC counts as 0
    with pytest.raises(ValueError, match="class"):
        power.class_clustering(pd.DataFrame(rows).drop(columns="class"))


def _test(kind, theta=None, margin=None, sign=1):
    return PlanTest(key="claims.x", statistic="s", test=kind, interval="i", source="paper",
                sign=sign, theta=theta, margin=margin)


def test_directional_power_and_sample_factor():
    se = 0.1
    theta = (Z95 + Z80) * se               # the effect an 80%-powered test just detects
    out = power.part_power(_test("directional", theta=-theta, sign=-1), se, 0.05)
    assert out["power_at_theta"] == pytest.approx(0.80)
    assert out["n_factor_for_power"] == pytest.approx(1.0)
    assert out["power_at_half_theta"] == pytest.approx(NormalDist().cdf(theta / 2 / se - Z95))
    doubled = power.part_power(_test("directional", theta=theta), 2 * se, 0.05)
    assert doubled["n_factor_for_power"] == pytest.approx(4.0)    # SE ~ 1/sqrt(n)


def test_null_claims_power_at_zero_difference():
    se = 0.05
    margin = (Z95 + Z80) * se
    assert power.part_power(_test("non_inferiority", margin=margin), se, 0.05)[
        "power_at_zero_difference"] == pytest.approx(0.80)
    eq = power.part_power(_test("equivalence", margin=margin), se, 0.05)
    assert eq["power_at_zero_difference"] == pytest.approx(0.60)   # 2 * 0.8 - 1
    assert math.isnan(power.part_power(_test("directional", theta=1.0), float("nan"),
                                       0.05)["power_at_theta"])


def test_claim_power_reads_every_part_of_every_claim():
    c = Claim("causal_atat", "§5", "s", "p")
    c.parts = [Part("premise", _test("significance", theta=None), None, why="no data"),
               Part("", _test("directional", theta=-4.3, sign=-1),
                    Estimate(-0.2, -0.4, 0.0, 0.12))]
    table = power.claim_power([c], alpha=0.05)
    assert list(table["part"]) == ["premise", "-"]
    assert table.loc[1, "se"] == pytest.approx(0.12)
    assert table.loc[1, "power_at_theta"] == pytest.approx(NormalDist().cdf(4.3 / 0.12 - Z95))
