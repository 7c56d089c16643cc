"""Randomized AT-AT experiment (App. H) on simulated data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from scipy.special import expit
from statsmodels.othermod.betareg import BetaModel

from atat.analysis.stats.causal import (
    assign_treatment,
    causal_beta,
    causal_ols,
    causal_table,
    delta_method_delta,
)
from atat.analysis.stats.regression import SpecSkipped


def simulate_causal(seed: int = 0, n: int = 10, mu0: float = 0.84, mu1: float = 0.065,
                    phi: float = 400.0) -> pd.DataFrame:
    """10 ResNet-152 FaceScrub models, 5 treated (paper §5: 84% -> 6.5%)."""
    rng = np.random.default_rng(seed)
    d = np.array(assign_treatment(n, n // 2, seed))
    mu = np.where(d == 1, mu1, mu0)
    y = rng.beta(mu * phi, (1 - mu) * phi)
    dist = 0.9 + 0.43 * d + rng.normal(0, 0.015, n)
    return pd.DataFrame({"dataset": "facescrub", "architecture": "resnet152",
                         "defense": np.where(d == 1, "atat", "nodef"),
                         "defense_type": np.where(d == 1, "atat", "nodef"),
                         "seed": np.arange(n), "replicate": np.arange(n), "treatment": d,
                         "ppa_attacc1": y, "ppa_dist_face": dist})


def test_assignment_balanced_and_reproducible():
    a = assign_treatment(10, 5, seed=7)
    assert len(a) == 10 and sum(a) == 5 and set(a) <= {0, 1}
    assert a == assign_treatment(10, 5, seed=7)
    others = {tuple(assign_treatment(10, 5, seed=s)) for s in range(30)}
    assert len(others) > 20  # different seeds give different assignments
    assert all(sum(o) == 5 for o in others)
    # over many seeds each unit is treated about half the time (complete randomization)
    freq = np.mean([assign_treatment(10, 5, seed=s) for s in range(2000)], axis=0)
    assert np.all(np.abs(freq - 0.5) < 0.05), freq
    assert sum(assign_treatment(7, 3, seed=1)) == 3
    with pytest.raises(ValueError):
        assign_treatment(4, 5, seed=0)


def test_causal_ols_hc2_t_n_minus_2_matches_statsmodels():
    df = simulate_causal(seed=1)
    r = causal_ols(df, "ppa_attacc1")
    X = sm.add_constant(df["treatment"].astype(float))
    ref = sm.OLS(df["ppa_attacc1"], X).fit(cov_type="HC2", use_t=True)
    assert r["tau"] == pytest.approx(ref.params["treatment"], rel=1e-12)
    assert r["tau_se"] == pytest.approx(ref.bse["treatment"], rel=1e-12)
    assert r["df_resid"] == 8
    half = (r["tau_ci_high"] - r["tau_ci_low"]) / 2 / r["tau_se"]
    assert half == pytest.approx(2.306, abs=5e-4)  # Table 21: t_{0.975,8} = 2.306
    # with a binary regressor, tau = difference in group means and HC2 = Welch-type SE
    g = df.groupby("treatment")["ppa_attacc1"]
    assert r["tau"] == pytest.approx(g.mean()[1] - g.mean()[0], rel=1e-10)
    assert r["tau_se"] == pytest.approx(np.sqrt((g.var() / g.count()).sum()), rel=1e-10)


def test_causal_l2_distance_ols():
    df = simulate_causal(seed=2)
    r = causal_ols(df, "ppa_dist_face")
    assert r["tau_ci_low"] <= 0.43 <= r["tau_ci_high"]
    means = df.groupby("treatment")["ppa_dist_face"].mean()
    assert r["tau"] == pytest.approx(means[1] - means[0])


def test_causal_beta_odds_ratio_and_paper_magnitudes():
    df = simulate_causal(seed=3)
    r = causal_beta(df, "ppa_attacc1")
    ref = BetaModel(df["ppa_attacc1"].to_numpy(),
                    sm.add_constant(df["treatment"].astype(float))).fit(
        method="newton", cov_type="eim", disp=False)
    p = np.asarray(ref.params)
    assert r["tau"] == pytest.approx(p[1], rel=1e-7)
    assert r["odds_ratio"] == pytest.approx(np.exp(r["tau"]), rel=1e-12)
    assert r["odds_ratio_ci_low"] == pytest.approx(np.exp(r["tau_ci_low"]), rel=1e-12)
    assert r["odds_ratio_ci_high"] == pytest.approx(np.exp(r["tau_ci_high"]), rel=1e-12)
    assert r["tau_ci_high"] - r["tau"] == pytest.approx(1.959964 * r["tau_se"], rel=1e-6)
    # paper: 84% -> 6.5% is an odds ratio of ~1/77 (0.0130)
    true_or = (0.065 / 0.935) / (0.84 / 0.16)
    assert r["odds_ratio_ci_low"] <= true_or <= r["odds_ratio_ci_high"]
    assert 50 < r["odds_reduction"] < 110
    assert r["mu0"] == pytest.approx(expit(p[0])) and r["mu1"] == pytest.approx(expit(p[0] + p[1]))
    assert r["tau_p"] < 1e-16 and abs(r["tau_stat"]) > 10


def test_delta_method_matches_finite_differences():
    df = simulate_causal(seed=4, phi=80.0)
    r = causal_beta(df, "ppa_attacc1")
    alpha, tau, V = r["alpha"], r["tau"], r["cov_alpha_tau"]

    def delta(a, t):
        return expit(a + t) - expit(a)

    h = 1e-6
    g_fd = np.array([(delta(alpha + h, tau) - delta(alpha - h, tau)) / (2 * h),
                     (delta(alpha, tau + h) - delta(alpha, tau - h)) / (2 * h)])
    var_fd = g_fd @ V @ g_fd
    dm = delta_method_delta(alpha, tau, V)
    np.testing.assert_allclose(dm["grad"], g_fd, rtol=1e-6)
    assert dm["var"] == pytest.approx(var_fd, rel=1e-6)
    assert r["delta"] == pytest.approx(delta(alpha, tau), rel=1e-12)
    assert r["delta_se"] == pytest.approx(np.sqrt(var_fd), rel=1e-6)
    assert r["delta_ci_high"] - r["delta"] == pytest.approx(sps.norm.ppf(0.975) * r["delta_se"])
    # the paper's g, written out
    mu0, mu1 = expit(alpha), expit(alpha + tau)
    g = np.array([mu1 * (1 - mu1) - mu0 * (1 - mu0), mu1 * (1 - mu1)])
    assert dm["var"] == pytest.approx(g @ V @ g, rel=1e-12)
    # the (alpha, tau) block of the Beta covariance is what enters
    np.testing.assert_allclose(V, np.asarray(r["result"].cov_params())[:2, :2])


def test_causal_table_and_skips():
    df = simulate_causal(seed=5)
    other = df.assign(architecture="resnet18", treatment=np.nan)  # non-causal rows: ignored
    t = causal_table(pd.concat([df, other]), sample={"architecture": "resnet152"})
    assert list(zip(t.model, t.response)) == [("ols", "ppa_attacc1"), ("ols", "ppa_dist_face"),
                                              ("beta", "ppa_attacc1")]
    assert (t.status == "ok").all() and (t.n == 10).all()
    t2 = causal_table(df.drop(columns=["ppa_dist_face"]))
    row = t2[t2.response == "ppa_dist_face"].iloc[0]
    assert row.status == "skipped" and "missing column" in row.reason and np.isnan(row.tau)
    with pytest.raises(SpecSkipped):
        causal_ols(df.assign(treatment=1), "ppa_attacc1")


def test_a_constant_causal_response_is_skipped_with_its_reason():
    t = causal_table(simulate_causal(seed=5).assign(ppa_attacc1=0.0))
    flat = t[t.response == "ppa_attacc1"]
    assert len(flat) == 2 and (flat.status == "skipped").all()
    assert flat.reason.str.contains("ppa_attacc1 is constant").all()
    assert (t[t.response == "ppa_dist_face"].status == "ok").all()
