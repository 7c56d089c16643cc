"""Leakage regressions (App. G) on simulated summaries with known coefficients."""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf
from scipy.special import expit
from statsmodels.othermod.betareg import BetaModel

from atat.plan.config import load_config, model_runs
from atat.analysis.summary import robust_column
from atat.analysis.tables import load_specs
from atat.analysis.stats.regression import (
    SpecSkipped,
    build_design,
    cost_of_privacy,
    cost_of_privacy_from_table,
    expand_grids,
    fit_all,
    fit_ols,
    fit_spec,
    gamma_from_beta,
    parameter_count,
    select_sample,
    squeeze_unit_interval,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "regressions.yaml"

EPS = (0.031, 0.0025, 0.0005, 1e-05)
JOINT = ["test_acc", "robust_acc_eps0.0025", "robust_acc_eps0.0005", "robust_acc_eps1e-05"]
# true coefficients of the simulated OLS response (const, test_acc, eps .0025, .0005, 1e-5)
TRUE_OLS = np.array([-0.30, 0.20, 0.50, 0.30, 0.40])
# true logit-scale coefficients and precision of the simulated Beta response
TRUE_BETA = np.array([-3.0, 1.0, 3.0, 1.5, 2.0])
TRUE_PHI = 60.0

DEFENSES = [  # (variant name, defense type)
    ("nodef", "nodef"), ("mid", "mid"), ("bido", "bido"), ("tldmi", "tldmi"),
    ("tldmi5", "tldmi"), ("negls", "negls"), ("rolss", "rolss"), ("rolss_ssf", "rolss_ssf"),
    ("trap_mid", "trap_mid"), ("atat", "atat"),
]


def simulate_summary(seed: int = 0, n_seeds: int = 1, noise: float = 0.02,
                     causal: bool = True) -> pd.DataFrame:
    """A results/summary.csv look-alike.  ppa_attacc1 = TRUE_OLS . x + N(0, noise);
    ifgmi_attacc1 ~ Beta(mu phi, (1-mu) phi), logit mu = TRUE_BETA . x.  TL-DMI-5 on every
    architecture, DenseNet-169 / Stanford Dogs / Trap-MID / AT-AT rows and 10 causal rows
    are present so that the sample filters are exercised."""
    rng = np.random.default_rng(seed)
    rows = []
    for ds in ("facescrub", "celeba", "stanford_dogs"):
        for arch in ("resnet152", "resnet18", "densenet169"):
            for name, dtype in DEFENSES:
                for s in range(n_seeds):
                    rows.append({"dataset": ds, "architecture": arch, "defense": name,
                                 "defense_type": dtype, "seed": s})
    for rep in range(10):
        d = rep % 2
        rows.append({"dataset": "facescrub", "architecture": "resnet152",
                     "defense": "atat" if d else "nodef", "defense_type": "atat" if d else "nodef",
                     "seed": 100 + rep, "treatment": d, "replicate": rep})
    df = pd.DataFrame(rows)
    n = len(df)
    df["test_acc"] = rng.uniform(0.6, 0.95, n)
    df["val_acc"] = df["test_acc"] + rng.normal(0, 0.01, n)
    df["test_top5"] = np.minimum(1.0, df["test_acc"] + 0.04)
    df[robust_column(0.031)] = 0.0
    df[robust_column(0.0025)] = rng.uniform(0.05, 0.6, n)
    df[robust_column(0.0005)] = rng.uniform(0.3, 0.9, n)
    df[robust_column(1e-05)] = rng.uniform(0.5, 0.95, n)
    for e in EPS:
        for att in ("apgd-ce", "apgd-t", "fab-t", "square"):
            df[robust_column(e, att)] = df[robust_column(e)]
    X = sm.add_constant(df[JOINT].to_numpy())
    df["ppa_attacc1"] = X @ TRUE_OLS + rng.normal(0, noise, n)
    mu = expit(X @ TRUE_BETA)
    df["ifgmi_attacc1"] = rng.beta(mu * TRUE_PHI, (1 - mu) * TRUE_PHI)
    df["ppa_attacc5"] = np.minimum(1, df["ppa_attacc1"] + 0.1)
    df["ppa_dist_face"] = 1.2 - 0.5 * df["ppa_attacc1"] + rng.normal(0, 0.02, n)
    if not causal:
        df = df.loc[df["treatment"].isna()].drop(columns=["treatment", "replicate"])
    return df


def paper_grid_summary(seed: int = 0) -> pd.DataFrame:
    """A results/summary.csv look-alike with one row per model of the REAL paper grid
    (config/config.yaml through atat.plan.config.model_runs, causal replicates included), the
    identifier columns as the summary rule writes them (defense_type = the variant's
    `type`) and simulated metrics."""
    cfg = load_config(ROOT / "config" / "config.yaml")
    rows = [{"dataset": r.dataset, "architecture": r.architecture, "defense": r.defense,
             "defense_type": cfg["defenses"][r.defense]["type"], "seed": r.seed,
             "replicate": r.replicate, "treatment": r.treatment} for r in model_runs(cfg)]
    df = pd.DataFrame(rows)
    df["treatment"] = pd.to_numeric(df["treatment"])
    rng = np.random.default_rng(seed)
    n = len(df)
    df["test_acc"] = rng.uniform(0.6, 0.95, n)
    df[robust_column(0.031)] = 0.0
    df[robust_column(0.0025)] = rng.uniform(0.05, 0.6, n)
    df[robust_column(0.0005)] = rng.uniform(0.3, 0.9, n)
    df[robust_column(1e-05)] = rng.uniform(0.5, 0.95, n)
    X = sm.add_constant(df[JOINT].to_numpy())
    df["ppa_attacc1"] = X @ TRUE_OLS + rng.normal(0, 0.02, n)
    mu = expit(X @ TRUE_BETA)
    df["ifgmi_attacc1"] = rng.beta(mu * TRUE_PHI, (1 - mu) * TRUE_PHI)
    return df


def _spec(**kw):
    base = {"name": "s", "response": "ppa_attacc1", "regressors": JOINT, "family": "ols",
            "sample": {"defense_types": ["nodef", "mid", "bido", "tldmi"],
                       "datasets": ["facescrub", "celeba"],
                       "architectures": ["resnet152", "resnet18"],
                       "exclude_rows": [{"defense": "tldmi5",
                                         "architecture": ["resnet152", "densenet169"]}]}}
    base.update(kw)
    return base


# --------------------------------------------------------------------------- config


def test_config_has_56_specs_laid_out_as_documented():
    specs = load_specs(CONFIG)
    assert len(specs) == 56
    assert len({s["name"] for s in specs}) == 56
    tables = pd.Series([s["table"] for s in specs]).value_counts().to_dict()
    assert tables == {"T15": 10, "T16": 10, "T18": 10, "T19": 10, "T17": 8, "T20": 8}
    fam = pd.Series([s["family"] for s in specs]).value_counts().to_dict()
    assert fam == {"ols": 28, "beta": 28}
    for s in specs:
        if s["table"] in ("T17", "T20"):
            assert s["controls"] in ("acc_x_dataset", "acc_x_architecture")
            assert s["sample_name"] == "generic"
        else:
            assert s["controls"] == "none"
        assert s["response"] == ("ppa_attacc1" if s["table"] in ("T15", "T16", "T17")
                                 else "ifgmi_attacc1")
        assert "robust_acc_eps0.031" not in s["regressors"]
    names = {s["name"] for s in specs}
    assert {"T15_ppa_generic_joint_ols", "T15_ppa_generic_joint_beta"} <= names


def test_table5_sample_gives_n18_and_t13():
    """Table 5: OLS CIs use t_{0.975,13} = 2.160 -> n = 18 with NoDef and TL-DMI-5."""
    df = simulate_summary()
    specs = {s["name"]: s for s in load_specs(CONFIG)}
    fit = fit_spec(df, specs["T15_ppa_generic_joint_ols"])
    assert fit["stats"]["n"] == 18 and fit["stats"]["df_resid"] == 13
    c = fit["coefficients"].set_index("term")
    half = (c["ci_high"] - c["ci_low"]) / 2 / c["se"]
    np.testing.assert_allclose(half, 2.160, atol=5e-4)
    assert np.allclose(c["se"], c["se_hc2"])
    data = fit["data"]
    assert set(data["defense"]) == {"nodef", "mid", "bido", "tldmi", "tldmi5"}
    assert (data.loc[data.defense == "tldmi5", "architecture"] == "resnet18").all()
    assert "treatment" not in data.columns or data["treatment"].isna().all()
    grad = fit_spec(df, specs["T16_ppa_gradient_joint_ols"])
    assert grad["stats"]["n"] == 16


def test_paper_grid_samples_select_variants_not_types():
    """On the real paper grid, BiDO** (bido_lx1e3/4, type bido) and the
    permuted-label models (type nodef) are not in the regression samples: generic n = 18
    (df 13, Table 5's t_{0.975,13}), gradient-suppressing n = 16."""
    df = paper_grid_summary()
    assert {"bido_lx1e3", "bido_lx1e4", "permuted"} <= set(df["defense"])  # the variants exist
    specs = {s["name"]: s for s in load_specs(CONFIG)}
    for name in ("T15_ppa_generic_joint_ols", "T18_ifgmi_generic_joint_beta",
                 "T17_ppa_generic_acc_x_dataset_testacc_ols"):
        fit = fit_spec(df, specs[name])
        assert fit["stats"]["n"] == 18, name
        assert set(fit["data"]["defense"]) == {"nodef", "mid", "bido", "tldmi", "tldmi5"}
        assert set(fit["data"].loc[fit["data"]["defense"] == "tldmi5", "architecture"]) == \
            {"resnet18"}
        assert fit["data"]["treatment"].isna().all()      # no causal replicate
    joint = fit_spec(df, specs["T15_ppa_generic_joint_ols"])
    assert joint["stats"]["df_resid"] == 13
    assert "t(13) HC2: estimate +- 2.1604 se" in joint["coefficients"]["ci_method"].iloc[0]
    for name in ("T16_ppa_gradient_joint_ols", "T19_ifgmi_gradient_joint_beta"):
        fit = fit_spec(df, specs[name])
        assert fit["stats"]["n"] == 16, name
        assert set(fit["data"]["defense"]) == {"nodef", "negls", "rolss", "rolss_ssf"}
    # every spec of the config selects by variant name
    assert all("defense_types" not in s["sample"] for s in specs.values())


def test_no_t17_t20_spec_nests_a_t15_t18_spec():
    """The Tables 17/20 "alternate explanation" models and the Tables 15/18
    robust-accuracy models on the same sample and response are non-nested both ways (no
    design's column span holds the other's), so App. G's "significantly worse fitting" is
    a finding the data can confirm or refute, not an impossibility."""
    df = paper_grid_summary(seed=4)
    specs = load_specs(CONFIG)
    alt = [s for s in specs if s["table"] in ("T17", "T20")]
    main = [s for s in specs if s["table"] in ("T15", "T18")]
    assert len(alt) == 16 and len(main) == 20
    pairs = 0
    for a in alt:
        data, _ = select_sample(df, a)
        Xa, _ = build_design(data, a)
        assert not any(c.startswith("robust_acc") for c in Xa.columns), a["name"]
        for m in main:
            if m["response"] != a["response"] or m["sample"] != a["sample"]:
                continue
            Xm, _ = build_design(data, m)
            both = np.linalg.matrix_rank(np.hstack([Xa.to_numpy(), Xm.to_numpy()]))
            assert both > np.linalg.matrix_rank(Xa.to_numpy()), (a["name"], "nests", m["name"])
            assert both > np.linalg.matrix_rank(Xm.to_numpy()), (m["name"], "nests", a["name"])
            pairs += 1
    assert pairs == 16 * 10


def test_interaction_models_can_fit_worse_than_the_robust_model():
    """Where leakage is driven by robust accuracy (the simulation), the T17 clean-accuracy
    interaction models fit worse than Table 15's joint model -- impossible while T17 nested
    it (R2 never falls when columns are added)."""
    tidy = fit_all(paper_grid_summary(seed=1), load_specs(CONFIG))
    r2 = tidy.groupby("spec")["r2"].first()
    for name in r2.index[r2.index.str.startswith("T17_") & r2.index.str.endswith("_ols")]:
        assert r2[name] < r2["T15_ppa_generic_joint_ols"], name


def test_regressor_set_mapping_is_checked():
    cfg = {"grids": [{"table": "T", "response": "y", "sample": "s",
                      "families": ["ols"], "regressor_sets": ["r"]}]}
    stats = {"samples": {"s": {}}, "reference_levels": {}}
    with pytest.raises(ValueError, match="regressor set 'r'.*interaction_main_effects"):
        expand_grids({**cfg, "regressor_sets": {"r": {"regressors": ["x"], "lag": 1}}},
                     statistics=stats)
    with pytest.raises(ValueError, match="needs 'regressors'"):
        expand_grids({**cfg, "regressor_sets": {"r": {"interaction_main_effects": False}}},
                     statistics=stats)
    (spec,) = expand_grids({**cfg, "regressor_sets": {
        "r": {"regressors": ["x"], "interaction_main_effects": False}}}, statistics=stats)
    assert spec["regressors"] == ["x"] and spec["interaction_main_effects"] is False


def test_fit_all_default_config_runs_every_spec():
    df = simulate_summary()
    tidy = fit_all(df, load_specs(CONFIG))
    assert tidy["spec"].nunique() == 56
    assert (tidy["status"] == "ok").all(), tidy.loc[tidy.status != "ok", ["spec", "reason"]]
    assert tidy["estimate"].notna().all()
    ols = tidy[tidy.family == "ols"]
    assert ols["r2"].between(0, 1).all() and ols["se_hc2"].notna().all()
    beta = tidy[tidy.family == "beta"]
    assert beta["pseudo_r2"].between(0, 1).all() and (beta["phi"] > 0).all()
    t17 = tidy[(tidy.spec == "T17_ppa_generic_acc_x_dataset_testacc_ols")]
    assert set(t17["term"]) == {"const", "test_acc", "dataset[celeba]", "test_acc:dataset[celeba]"}
    t17s = tidy[(tidy.spec == "T17_ppa_generic_acc_x_dataset_testacc_slopes_ols")]
    assert set(t17s["term"]) == {"const", "test_acc", "test_acc:dataset[celeba]"}
    t17a = tidy[(tidy.spec == "T17_ppa_generic_acc_x_architecture_testacc_beta")]
    assert {"architecture[resnet18]", "test_acc:architecture[resnet18]", "phi"} <= set(t17a.term)
    # parameter_count (which plans targets before any model exists) is the fits' k
    specs = {s["name"]: s for s in load_specs(CONFIG)}
    for name, k in tidy.groupby("spec")["k"].first().items():
        data, _ = select_sample(df, specs[name])
        assert parameter_count(specs[name], data) == k, name


def test_seed_aggregation_recovers_one_row_per_cell():
    df = simulate_summary(seed=9, n_seeds=3)
    assert fit_spec(df, _spec())["stats"]["n"] == 54
    fit = fit_spec(df, _spec(aggregate_seeds=True))
    assert fit["stats"]["n"] == 18 and fit["stats"]["df_resid"] == 13
    cell = df[(df.dataset == "celeba") & (df.architecture == "resnet18") & (df.defense == "bido")]
    row = fit["data"].query("dataset == 'celeba' and architecture == 'resnet18' "
                            "and defense == 'bido'")
    assert row["ppa_attacc1"].iloc[0] == pytest.approx(cell["ppa_attacc1"].mean())


# --------------------------------------------------------------------------- equality


def test_ols_identical_to_statsmodels_direct():
    df = simulate_summary(seed=3)
    fit = fit_spec(df, _spec())
    d = fit["data"]
    X = sm.add_constant(d[JOINT])
    y = d["ppa_attacc1"]
    ref = sm.OLS(y, X).fit()
    ref2 = sm.OLS(y, X).fit(cov_type="HC2", use_t=True)
    c = fit["coefficients"].set_index("term")
    np.testing.assert_allclose(c["estimate"], ref.params, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c["se_nonrobust"], ref.bse, rtol=1e-12)
    for h in ("HC0", "HC1", "HC2", "HC3"):
        np.testing.assert_allclose(c[f"se_{h.lower()}"], getattr(ref, f"{h}_se"), rtol=1e-12)
    np.testing.assert_allclose(c["se"], ref2.bse, rtol=1e-12)
    np.testing.assert_allclose(c["p_value"], ref2.pvalues, rtol=1e-10)
    np.testing.assert_allclose(c[["ci_low", "ci_high"]].to_numpy(), ref2.conf_int().to_numpy(),
                               rtol=1e-12)
    # HC2 by its definition, as a check on the statsmodels call itself
    Xn = X.to_numpy()
    h = np.einsum("ij,jk,ik->i", Xn, np.linalg.inv(Xn.T @ Xn), Xn)
    bread = np.linalg.inv(Xn.T @ Xn)
    meat = Xn.T @ (Xn * (ref.resid.to_numpy() ** 2 / (1 - h))[:, None])
    np.testing.assert_allclose(c["se_hc2"], np.sqrt(np.diag(bread @ meat @ bread)), rtol=1e-10)
    st = fit["stats"]
    assert st["r2"] == pytest.approx(ref.rsquared, rel=1e-12)
    assert st["adj_r2"] == pytest.approx(ref.rsquared_adj, rel=1e-12)
    assert st["mae"] == pytest.approx(np.mean(np.abs(ref.resid)), rel=1e-12)
    assert st["df_resid"] == ref.df_resid == len(d) - 5


def test_beta_identical_to_statsmodels_direct():
    df = simulate_summary(seed=4)
    fit = fit_spec(df, _spec(response="ifgmi_attacc1", family="beta"))
    d = fit["data"]
    X = sm.add_constant(d[JOINT])
    ref = BetaModel(d["ifgmi_attacc1"].to_numpy(), X).fit(method="newton", cov_type="eim",
                                                          disp=False)
    c = fit["coefficients"].set_index("term")
    np.testing.assert_allclose(c.loc[X.columns, "estimate"], ref.params[:5], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(c.loc[X.columns, "se"], ref.bse[:5], rtol=1e-6)
    np.testing.assert_allclose(c.loc[X.columns, ["ci_low", "ci_high"]].to_numpy(),
                               np.asarray(ref.conf_int())[:5], rtol=1e-6, atol=1e-9)
    half = (c["ci_high"] - c["ci_low"]).iloc[:5] / 2 / c["se"].iloc[:5]
    np.testing.assert_allclose(half, 1.959964, atol=1e-6)
    assert c.loc["phi", "estimate"] == pytest.approx(np.exp(np.asarray(ref.params)[-1]), rel=1e-7)
    mu = ref.predict()
    assert fit["stats"]["mae"] == pytest.approx(np.mean(np.abs(d["ifgmi_attacc1"] - mu)), rel=1e-6)
    assert fit["stats"]["beta_squeeze"].startswith("not needed")


def test_interaction_controls_match_statsmodels_formula():
    df = simulate_summary(seed=5)
    fit = fit_spec(df, _spec(controls="acc_x_dataset"))
    d = fit["data"].rename(columns=lambda c: c.replace(".", "_").replace("-", "_"))
    ref = smf.ols("ppa_attacc1 ~ test_acc * C(dataset, Treatment('facescrub')) + "
                  "robust_acc_eps0_0025 + robust_acc_eps0_0005 + robust_acc_eps1e_05",
                  d).fit(cov_type="HC2", use_t=True)
    c = fit["coefficients"].set_index("term")
    lvl = "C(dataset, Treatment('facescrub'))[T.celeba]"
    assert c.loc["test_acc:dataset[celeba]", "estimate"] == pytest.approx(
        ref.params[f"test_acc:{lvl}"], rel=1e-9)
    assert c.loc["dataset[celeba]", "se"] == pytest.approx(ref.bse[lvl], rel=1e-9)
    assert fit["stats"]["r2"] == pytest.approx(ref.rsquared, rel=1e-12)
    assert fit["stats"]["k"] == len(ref.params) == 7


# --------------------------------------------------------------------------- recovery


def test_ols_recovers_known_coefficients_within_95ci():
    """20 independent simulated summaries (10 seeds per cell, n = 180): each true
    coefficient lies inside its 95% interval in >= 16 of 20 fits (P(fail) ~ 0.3% per
    coefficient if the intervals are calibrated), and the average estimate is unbiased."""
    hits, est = np.zeros(5), []
    for rep in range(20):
        fit = fit_spec(simulate_summary(seed=100 + rep, n_seeds=10), _spec())
        assert fit["stats"]["n"] == 180 and fit["stats"]["r2"] > 0.9
        c = fit["coefficients"].set_index("term").loc[["const", *JOINT]]
        hits += (c["ci_low"] <= TRUE_OLS).to_numpy() & (TRUE_OLS <= c["ci_high"]).to_numpy()
        est.append(c["estimate"].to_numpy())
    assert np.all(hits >= 16), hits
    np.testing.assert_allclose(np.mean(est, axis=0), TRUE_OLS, atol=0.01)


def test_ols_hc2_interval_coverage_near_nominal():
    """Over 200 simulated responses on the Table 5 design (n = 18) the HC2 t(13)
    intervals of every coefficient cover the truth 90-99% of the time."""
    reps = 200
    rng = np.random.default_rng(2024)
    cover = np.zeros(5)
    X = fit_spec(simulate_summary(seed=1), _spec())["data"][JOINT]
    X = sm.add_constant(X)
    assert len(X) == 18
    for _ in range(reps):
        y = X.to_numpy() @ TRUE_OLS + rng.normal(0, 0.02, len(X))
        c, st, _res = fit_ols(y, X, "HC2")
        assert st["df_resid"] == 13
        cover += (c["ci_low"].to_numpy() <= TRUE_OLS) & (TRUE_OLS <= c["ci_high"].to_numpy())
    cover /= reps
    assert np.all((cover > 0.90) & (cover < 0.99)), cover


def test_beta_recovers_known_coefficients():
    df = simulate_summary(seed=12, n_seeds=10)
    fit = fit_spec(df, _spec(response="ifgmi_attacc1", family="beta"))
    c = fit["coefficients"].set_index("term")
    cc = c.loc[["const", *JOINT]]
    assert ((cc["ci_low"] <= TRUE_BETA) & (TRUE_BETA <= cc["ci_high"])).all(), cc
    assert c.loc["phi", "ci_low"] <= TRUE_PHI <= c.loc["phi", "ci_high"]


# --------------------------------------------------------------------------- skips


def test_skips_are_recorded_never_invented():
    df = simulate_summary().drop(columns=["robust_acc_eps0.0005"])
    small = _spec(name="small", regressors=["test_acc", "robust_acc_eps0.0025"],
                  sample={"defense_types": ["nodef", "mid"], "datasets": ["facescrub"],
                          "architectures": ["resnet152"]})
    specs = [_spec(name="missing"), small, _spec(name="ok", regressors=["test_acc"]),
             _spec(name="onelevel", regressors=["test_acc"], controls="acc_x_dataset",
                   sample={"defense_types": ["nodef", "mid", "bido"], "datasets": ["celeba"]})]
    tidy = fit_all(df, specs)
    by = tidy.groupby("spec")
    assert by.size()["missing"] == 1 and by.size()["small"] == 1
    r = tidy.set_index("spec")
    assert r.loc["missing", "status"] == "skipped"
    assert "missing columns" in r.loc["missing", "reason"]
    assert "robust_acc_eps0.0005" in r.loc["missing", "reason"]
    assert "too few rows" in r.loc["small", "reason"]
    assert ">=2 levels" in r.loc["onelevel", "reason"]
    skipped = tidy[tidy.status == "skipped"]
    assert skipped[["estimate", "se", "ci_low", "ci_high", "n"]].isna().all().all()
    assert (tidy.loc[tidy.spec == "ok", "status"] == "ok").all()
    with pytest.raises(SpecSkipped):
        fit_spec(df, small)


def test_percent_units_refused_unless_declared():
    df = simulate_summary(seed=6)
    pct = df.copy()
    cols = ["test_acc", *JOINT[1:], "ppa_attacc1"]
    pct[cols] = pct[cols] * 100
    with pytest.raises(SpecSkipped, match="outside \\[0, 1\\]"):
        fit_spec(pct, _spec())
    a = fit_spec(df, _spec())["coefficients"]["estimate"].to_numpy()
    b = fit_spec(pct, _spec(units="percent"))["coefficients"]["estimate"].to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_beta_squeeze_for_exact_zero_one():
    df = simulate_summary(seed=7)
    spec = _spec(response="ifgmi_attacc1", family="beta", regressors=["test_acc"])
    sel = fit_spec(df, spec)["data"].index
    df.loc[sel[0], "ifgmi_attacc1"] = 0.0
    df.loc[sel[1], "ifgmi_attacc1"] = 1.0
    fit = fit_spec(df, spec)
    assert fit["stats"]["beta_squeeze"].startswith("applied")
    assert any("squeezed" in n for n in fit["notes"])
    y = df.loc[sel, "ifgmi_attacc1"].to_numpy()
    n = len(y)
    ys = (y * (n - 1) + 0.5) / n
    np.testing.assert_allclose(squeeze_unit_interval(y)[0], ys)
    ref = BetaModel(ys, sm.add_constant(df.loc[sel, ["test_acc"]])).fit(
        method="newton", cov_type="eim", disp=False)
    np.testing.assert_allclose(fit["coefficients"]["estimate"].iloc[:2], ref.params[:2], rtol=1e-6)
    tidy = fit_all(df, [spec])
    assert tidy["beta_squeeze"].str.startswith("applied").all()


# --------------------------------------------------------------------------- R betareg


FOOD = """food,income,persons
15.998,62.476,1
16.652,82.304,5
21.741,74.679,3
7.431,39.151,3
10.481,64.724,5
13.548,36.786,3
23.256,83.052,4
17.976,86.935,1
14.161,88.233,2
8.825,38.695,2
14.184,73.831,7
19.604,77.122,3
13.728,45.519,2
21.141,82.251,2
17.446,59.862,3
9.629,26.563,3
14.005,61.818,2
9.16,29.682,1
18.831,50.825,5
7.641,71.062,4
13.882,41.99,4
9.67,37.324,3
21.604,86.352,5
10.866,45.506,2
28.98,69.929,6
10.882,61.041,2
18.561,82.469,1
11.629,44.208,2
18.067,49.467,5
14.539,25.905,5
19.192,79.178,5
25.918,75.811,3
28.833,82.718,6
15.869,48.311,4
14.91,42.494,5
9.55,40.573,4
23.066,44.872,6
14.751,27.167,7
"""


def _food() -> pd.DataFrame:
    embedded = pd.read_csv(io.StringIO(FOOD))
    try:
        path = resources.files("statsmodels.othermod.tests").joinpath("results/foodexpenditure.csv")
        bundled = pd.read_csv(io.StringIO(path.read_text()))
        pd.testing.assert_frame_equal(bundled, embedded)  # statsmodels' copy is the same data
    except (FileNotFoundError, ModuleNotFoundError):
        pass
    return embedded


def test_beta_reproduces_r_betareg_food_expenditure():
    """R: betareg(I(food/income) ~ income + persons, data = FoodExpenditure) (betareg
    vignette, Cribari-Neto & Zeileis 2010): coefficients -0.62255, -0.01230, 0.11846,
    phi 35.60975; SEs 0.22385, 0.003036, 0.03534, 8.0796; pseudo R^2 0.3878; logLik 45.33."""
    d = _food()
    d["share"] = d["food"] / d["income"]
    fit = fit_spec(d, {"name": "food", "response": "share", "regressors": ["income", "persons"],
                       "family": "beta"})
    c = fit["coefficients"].set_index("term")
    np.testing.assert_allclose(c.loc[["const", "income", "persons"], "estimate"],
                               [-0.62255, -0.01230, 0.11846], atol=1e-5)
    assert c.loc["phi", "estimate"] == pytest.approx(35.60975, abs=1e-4)
    np.testing.assert_allclose(c.loc[["const", "income", "persons"], "se"],
                               [0.223853539, 0.003035585, 0.035340667], rtol=1e-4)
    assert c.loc["phi", "se"] == pytest.approx(8.079598, rel=1e-4)
    np.testing.assert_allclose(c.loc[["const", "income", "persons"], "stat"],
                               [-2.781051, -4.051556, 3.352005], rtol=1e-4)
    assert fit["stats"]["pseudo_r2"] == pytest.approx(0.3878, abs=5e-5)
    assert fit["stats"]["llf"] == pytest.approx(45.33, abs=5e-3)


# --------------------------------------------------------------------------- cost of privacy


def test_gamma_interval_is_inverted_beta_interval():
    mu = 0.45
    c = mu * (1 - mu)
    g = gamma_from_beta(12.0, 8.0, 16.0, mu)
    assert g["bounded"]
    assert g["gamma"] == pytest.approx(1 / (12.0 * c))
    assert g["ci_low"] == pytest.approx(1 / (16.0 * c))
    assert g["ci_high"] == pytest.approx(1 / (8.0 * c))
    # symmetric beta interval -> asymmetric gamma interval (paper: 5.4 [2.9-58.3])
    assert (g["ci_high"] - g["gamma"]) > (g["gamma"] - g["ci_low"])
    neg = gamma_from_beta(-2.0, -3.0, -1.0, mu)
    assert neg["bounded"] and neg["ci_low"] == pytest.approx(1 / (-1.0 * c))
    assert neg["ci_high"] == pytest.approx(1 / (-3.0 * c))
    unb = gamma_from_beta(0.5, -0.2, 1.2, mu)
    assert not unb["bounded"] and unb["ci_low"] == -np.inf and unb["ci_high"] == np.inf
    assert "unbounded" in unb["note"] and "contains 0" in unb["note"]


def test_cost_of_privacy_from_beta_fit():
    df = simulate_summary(seed=8, n_seeds=3)
    specs = {s["name"]: s for s in load_specs(CONFIG)}
    spec = dict(specs["T15_ppa_generic_joint_beta"], response="ifgmi_attacc1")
    fit = fit_spec(df, spec)
    cop = cost_of_privacy(fit).set_index("term")
    assert list(cop.index) == JOINT[1:]
    coef = fit["coefficients"].set_index("term")
    mu_bar = fit["data"]["ifgmi_attacc1"].mean()
    k = mu_bar * (1 - mu_bar)
    for t in JOINT[1:]:
        b, lo, hi = coef.loc[t, ["estimate", "ci_low", "ci_high"]]
        assert cop.loc[t, "gamma"] == pytest.approx(1 / (b * k), rel=1e-12)
        assert cop.loc[t, "ci_low"] == pytest.approx(1 / (hi * k), rel=1e-12)
        assert cop.loc[t, "ci_high"] == pytest.approx(1 / (lo * k), rel=1e-12)
    tidy = fit_all(df, [spec])
    cop2 = cost_of_privacy_from_table(tidy, spec["name"]).set_index("term")
    pd.testing.assert_series_equal(cop["gamma"], cop2["gamma"])
    with pytest.raises(ValueError):
        cost_of_privacy(fit_spec(df, _spec()))


# ------------------------------------------------------------------ config/regressions.yaml
# is validated where it is loaded ("config names are resolved up front"): a typo is
# an error naming the file and the key, never a regression table that silently disappears.
def _edit_grids(cfg, **kw):
    cfg["grids"][0].update(kw)


REGRESSION_FILE_CASES = [
    ("grid for grids", lambda c: c.update(grid=c.pop("grids")), ["grid", "unknown key"]),
    ("unknown top-level key", lambda c: c.update(defults={}), ["defults"]),
    ("unknown key in a grid entry", lambda c: _edit_grids(c, familes=["ols"]),
     ["grids[0].familes"]),
    ("unknown key in defaults", lambda c: c["defaults"].update(cov="HC3"), ["defaults.cov"]),
    ("samples in the regressions file", lambda c: c.update(samples={"generic": {}}),
     ["samples", "statistics.samples", "declared by the workflow config"]),
    ("reference levels in the regressions file",
     lambda c: c["defaults"].update(reference_levels={"dataset": "celeba"}),
     ["defaults.reference_levels", "statistics.reference_levels"]),
    ("the causal cell in the regressions file",
     lambda c: c["causal"].update(sample={"dataset": "facescrub"}),
     ["causal.sample", "workflow config"]),
    ("unknown key in a spec", lambda c: c.update(specs=[{"name": "x", "response": "y",
                                                         "regressors": ["a"], "famly": "ols"}]),
     ["specs[0].famly"]),
    ("unknown key in cost_of_privacy", lambda c: c["cost_of_privacy"].update(term=["a"]),
     ["cost_of_privacy.term"]),
    ("unknown key in causal", lambda c: c["causal"].update(treatmnt="t"), ["causal.treatmnt"]),
    ("unknown sample", lambda c: _edit_grids(c, sample="generik"),
     ["grids[0].sample", "generik", "statistics.samples"]),
    ("unknown sample of a spec", lambda c: c.update(specs=[{
        "name": "x", "response": "ppa_attacc1", "regressors": ["test_acc"],
        "sample": "gradiant"}]), ["specs[0].sample", "gradiant"]),
    ("unknown regressor set", lambda c: _edit_grids(c, regressor_sets=["joint", "robust"]),
     ["grids[0].regressor_sets", "'robust'"]),
    ("unknown table", lambda c: _edit_grids(c, table="T51"), ["grids[0].table", "T51"]),
    ("unknown family", lambda c: _edit_grids(c, families=["ols", "logit"]),
     ["grids[0].families", "logit"]),
    ("grid without a response", lambda c: c["grids"][0].pop("response"),
     ["grids[0]", "'response' is required"]),
    ("cost of privacy names no spec", lambda c: c["cost_of_privacy"].update(spec="T15_x"),
     ["cost_of_privacy.spec", "T15_x"]),
]


@pytest.mark.parametrize("desc,edit,words", REGRESSION_FILE_CASES,
                         ids=[c[0] for c in REGRESSION_FILE_CASES])
def test_regressions_file_is_validated_naming_file_and_key(tmp_path, desc, edit, words):
    import yaml

    from atat.plan.config import ConfigError

    cfg = yaml.safe_load(CONFIG.read_text())
    edit(cfg)
    path = tmp_path / "regressions.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as info:
        load_specs(path)
    for word in [str(path), *words]:
        assert word in str(info.value), (word, str(info.value))


def test_regressions_file_structure_is_checked_at_dag_time_too():
    """atat.analysis.paper.check expands the grids while Snakemake builds the DAG: the structural
    checks run there (no table names: expand_grids also takes ad-hoc specs)."""
    import yaml

    from atat.plan.config import ConfigError

    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["grid"] = cfg.pop("grids")
    with pytest.raises(ConfigError, match="config/regressions.yaml: grid: unknown key"):
        expand_grids(cfg)


def test_samples_and_reference_levels_come_from_the_workflow_config():
    """The specifications name samples the workflow config declares
    (`statistics.samples`); the demo's declaration replaces the paper's, and an explicit
    spec may name a declared sample."""
    import yaml

    paper = load_config(ROOT / "config" / "config.yaml")["statistics"]
    demo = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    cfg = yaml.safe_load(CONFIG.read_text())
    cfg["specs"] = [{"name": "x", "response": "ppa_attacc1", "regressors": ["test_acc"],
                     "sample": "gradient"}]
    by_name = {s["name"]: s for s in expand_grids(cfg, statistics=demo["statistics"])}
    generic = by_name["T15_ppa_generic_joint_ols"]
    assert generic["sample"] == demo["statistics"]["samples"]["generic"]
    assert generic["reference_levels"] == demo["statistics"]["reference_levels"]
    assert by_name["x"]["sample"] == demo["statistics"]["samples"]["gradient"]
    assert by_name["x"]["sample_name"] == "gradient"
    default = {s["name"]: s for s in expand_grids(cfg)}     # no config: the paper's
    assert default["T15_ppa_generic_joint_ols"]["sample"] == paper["samples"]["generic"]
    assert default["T15_ppa_generic_joint_ols"]["reference_levels"] == \
        {"dataset": "facescrub", "architecture": "resnet152"}


@pytest.mark.parametrize("family", ["ols", "beta"])
def test_a_constant_response_is_skipped_with_its_reason(family):
    # every model's AttAcc@1 0 (tiny models the attack never breaks): nothing to explain;
    # before, OLS reported status "ok" with a zero slope and an undefined p-value
    df = simulate_summary().assign(ppa_attacc1=0.0, ifgmi_attacc1=0.0)
    spec = _spec(name="flat", family=family, regressors=["test_acc"])
    tidy = fit_all(df, [spec])
    assert (tidy.status == "skipped").all() and len(tidy) == 1
    assert "is constant (0 for all" in tidy.reason.iloc[0]
    assert tidy[["estimate", "se", "p_value"]].isna().all().all()
    varied = df.assign(ppa_attacc1=np.linspace(0.1, 0.3, len(df)),
                       ifgmi_attacc1=np.linspace(0.1, 0.3, len(df)))
    assert (fit_all(varied, [spec]).status == "ok").all()
