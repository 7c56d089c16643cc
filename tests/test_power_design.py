"""The design table of atat.lab.power (issue 45): the variance components of a paired AttAcc@1
difference, the standard error projected to more images per class, and the rows it gives
for a judged run."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from atat.analysis import claims as C
from atat.lab import power
from atat.plan.config import load_config

from test_claims import DEMO, HOLDS, PAPER, ROOT, _write  # noqa: E402

PLAN = C.load_plan()


def _pairs(rate_a, rate_b, m):
    k = len(rate_a)
    return C.ClassPairs("a", "b", np.arange(k), np.asarray(rate_a, float),
                        np.asarray(rate_b, float), np.full(k, m, float), np.full(k, m, float))


def test_no_between_class_variance_the_se_falls_as_one_over_root_m():
    # every class 3 of 5 against 1 of 5: d_c = 0.4 everywhere, Var(d_c) = 0
    pairs = _pairs([0.6] * 20, [0.2] * 20, 5)
    comp = power.variance_components(pairs)
    assert comp["k"] == 20 and comp["m"] == 5 and comp["var_d"] == pytest.approx(0, abs=1e-15)
    assert comp["s2_within"] == pytest.approx(0.6 * 0.4 / 4 + 0.2 * 0.8 / 4)
    assert comp["s2_between"] == 0            # clipped: Var(d_c) below the binomial part
    se1 = power.projected_se(comp, 1)
    assert se1 == pytest.approx(math.sqrt(comp["s2_within"] / 20))
    for f in (2, 3, 4):
        assert power.projected_se(comp, f) == pytest.approx(se1 / math.sqrt(f))


def test_all_or_nothing_classes_have_only_between_class_variance():
    # each class all successes or all failures: no binomial part, more images do not help
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 30), rng.integers(0, 2, 30)
    comp = power.variance_components(_pairs(a, b, 5))
    assert comp["s2_within"] == 0
    assert comp["s2_between"] == pytest.approx(np.var(a - b, ddof=1))
    assert comp["se_paired"] == pytest.approx(np.std(a - b, ddof=1) / math.sqrt(30))
    assert power.projected_se(comp, 4) == pytest.approx(comp["se_paired"])


def test_the_components_estimate_the_simulated_ones():
    """Binomial images around class probabilities with a known between-class spread: the
    within part is unbiased (p(1-p)/(m-1)), the between part recovers Var(p_a,c - p_b,c)."""
    rng = np.random.default_rng(4)
    k, m, reps = 400, 5, 200
    within, between = [], []
    for _ in range(reps):
        pa = rng.uniform(0.2, 0.8, k)
        pb = np.clip(pa - 0.1 + rng.normal(0, 0.1, k), 0, 1)
        comp = power.variance_components(_pairs(rng.binomial(m, pa) / m,
                                                rng.binomial(m, pb) / m, m))
        within.append(comp["s2_within"])
        between.append(comp["var_d"] - comp["s2_within"])     # unclipped
        true_within = np.mean(pa * (1 - pa) + pb * (1 - pb)) / m
    assert np.mean(within) == pytest.approx(true_within, rel=0.03)
    assert np.mean(between) == pytest.approx(0.01, abs=0.002)


def test_a_class_of_one_image_has_no_within_estimate():
    comp = power.variance_components(_pairs([1, 0], [0, 0], 1))
    assert math.isnan(comp["s2_within"]) and comp["k"] == 2


def test_power_with_t_critical_value():
    t = C.Test("k", "x", "directional", C.PAIRED_CLASSES, "s", sign=-1, theta=-0.2)
    out = power.part_power(t, 0.05, 0.05, df=19)
    q = sps.t.ppf(0.95, 19)
    assert out["power_at_theta"] == pytest.approx(NormalDist().cdf(0.2 / 0.05 - q))
    assert out["power_at_half_theta"] == pytest.approx(NormalDist().cdf(0.1 / 0.05 - q))
    assert power.part_power(t, 0.05, 0.05)["power_at_theta"] > out["power_at_theta"]


def test_the_design_rows_of_a_judged_run(tmp_path):
    demo = load_config(PAPER, DEMO, ROOT / "tests" / "data" / "demo_dose_response.yaml")
    files = _write(tmp_path, HOLDS, demo)
    inp = C.read_inputs(demo, summary_csv=files["summary_csv"],
                        per_image_csv=files["per_image_csv"],
                        hsic_files=files["hsic_files"], dose_csv=files["dose_csv"],
                        dose_per_image=files["dose_per_image"], plan=PLAN)
    claims = C.judged_claims(inp)
    table, left_out = power.attacc_design(claims, PLAN.alpha, PLAN.power)
    # AT-AT against each of the 7 baselines for both attacks, the 3 HSIC premises, BiDO**,
    # Unseen-Pixels, the dose-response's endpoints (their own per-image files): 4 factors each
    parts = table.drop_duplicates(["claim", "part"])
    assert len(parts) == 2 * 7 + 3 + 1 + 1 + 1 and len(table) == 4 * len(parts)
    # the committed plan's interval (revision 2: paired)
    assert set(table["interval"]) == {C.PAIRED_CLASSES} and set(table["k"]) == {20}
    assert set(table["m"]) == {5} and list(table["m_prime"][:4]) == [5, 10, 15, 20]
    assert left_out == []
    dose = table[table["claim"] == "dose_response"]
    assert list(dose["part"].unique()) == ["lambda 1 minus 0"]
    row = table[(table["claim"] == "atat_ppa") & (table["part"] == "MID AttAcc@1")].iloc[0]
    p = inp.per_image
    rows = [p[(p["defense"] == d) & (p["attack"] == "ppa")] for d in ("atat", "mid")]
    pairs = C.class_pairs(*rows, ("atat", "mid"))
    assert row["se_paired"] == pytest.approx(C.paired_class_difference(pairs, PLAN.alpha).se)
    assert row["se_newcombe"] == pytest.approx(
        C.rate_difference(0.05, 100, 0.40, 100, PLAN.alpha).se)
    # f = 1: the projection is the run's SE, or the binomial part's where Var(d_c) is below it
    var_d = row["se_paired"] ** 2 * 20
    assert row["se_projected"] == pytest.approx(math.sqrt(max(var_d, row["s2_within"]) / 20))
    assert not math.isnan(row["power_at_theta"])
    up = table[table["claim"] == "unseen_pixels_unseen_pixels"]
    assert up["power_at_zero_difference"].notna().all() and up["power_at_theta"].isna().all()
    assert (np.diff(up["se_projected"]) <= 0).all()
    assert isinstance(table, pd.DataFrame)


def test_the_power_tool_reads_the_dose_response_endpoints_files(tmp_path):
    """``_claims_of_run`` reads a run's files where the claims rule's inputs are
    (atat.analysis.paper.claims_inputs), the dose-response endpoints' per-image files among
    them: its dose-response part has both sides class by class."""
    import shutil

    import yaml

    from atat.analysis.paper import Plan, claims_inputs
    from atat.plan.config import model_runs

    demo = load_config(PAPER, DEMO, ROOT / "tests" / "data" / "demo_dose_response.yaml")
    files = _write(tmp_path, HOLDS, demo)
    regressions = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    where = claims_inputs(Plan(demo, model_runs(demo), regressions))
    run = tmp_path / "run"
    ends = where["dose_per_image"]
    assert [f.split("/")[4] for f in ends] == ["nodef", "atat_w1"]
    for src, rel in ((files["summary_csv"], where["summary"]),
                     (files["per_image_csv"], where["per_image"]),
                     (files["dose_csv"], where["dose"]), *zip(files["dose_per_image"], ends)):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, run / rel)
    claims, plan = power._claims_of_run(run, demo)
    (dose,) = [c for c in claims if c.claim == "dose_response"]
    (part,) = dose.parts
    assert part.est is not None and part.pairs is not None and part.pairs.k == 20
    assert part.test.interval == plan.test("dose_response").interval == C.PAIRED_CLASSES
