"""Randomized AT-AT experiment of paper §5 / App. H (Tables 21, 22).

* :func:`assign_treatment` -- reproducible complete randomization (exactly ``n_treated``
  of ``n`` units treated).
* :func:`causal_ols` -- ``Y = alpha + tau D + u`` by OLS, HC2 SEs, Student t on n-2 df
  (Table 21 OLS columns; Table 22 with the L2 reconstruction distance as Y).
* :func:`causal_beta` -- ``Y ~ Beta(mu phi, (1-mu) phi)``, ``logit mu = alpha + tau D``;
  odds ratio exp(tau) with the exponentiated Wald interval; ``Delta = mu1 - mu0`` with
  the delta-method variance written in App. H:
  ``Var(Delta) ~= g' Var(alpha, tau) g``,
  ``g = (mu1(1-mu1) - mu0(1-mu0), mu1(1-mu1))``.
* :func:`causal_table` -- all of the above as one tidy table.

All fitting is statsmodels (through :mod:`atat.analysis.stats.regression`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from atat.plan.config import assign_treatment
from atat.analysis.stats.regression import (SpecSkipped, check_response_varies, fit_beta, fit_ols,
                                  squeeze_unit_interval)

__all__ = [
    "assign_treatment",
    "causal_ols",
    "causal_beta",
    "delta_method_delta",
    "causal_table",
]


def _design(df: pd.DataFrame, response: str, treatment: str) -> tuple[pd.Series, pd.DataFrame]:
    for col in (response, treatment):
        if col not in df.columns:
            raise SpecSkipped(f"missing column '{col}'")
    data = df[[response, treatment]].dropna()
    d = data[treatment].astype(float)
    if not set(np.unique(d)) <= {0.0, 1.0}:
        raise SpecSkipped(f"treatment column '{treatment}' must be 0/1")
    if d.sum() == 0 or d.sum() == len(d):
        raise SpecSkipped("need both treated and control units")
    if len(data) < 3:
        raise SpecSkipped(f"too few units (n={len(data)}) for 2 parameters")
    check_response_varies(data[response], response)
    X = pd.DataFrame({"const": 1.0, "treatment": d.to_numpy()}, index=data.index)
    return data[response].astype(float), X


def causal_ols(df: pd.DataFrame, response: str, treatment: str = "treatment",
               cov_type: str = "HC2") -> dict[str, Any]:
    """OLS of ``response`` on the treatment indicator; HC2 SEs, t(n-2) intervals.
    ``tau`` is the ATE in the response's units (proportion for AttAcc, L2 for distances)."""
    y, X = _design(df, response, treatment)
    coef, st, res = fit_ols(y, X, cov_type)
    c = coef.set_index("term")
    out = {
        "response": response, "model": "ols", "n": st["n"], "df_resid": st["df_resid"],
        "alpha": float(c.loc["const", "estimate"]), "alpha_se": float(c.loc["const", "se"]),
        "tau": float(c.loc["treatment", "estimate"]), "tau_se": float(c.loc["treatment", "se"]),
        "tau_stat": float(c.loc["treatment", "stat"]),
        "tau_p": float(c.loc["treatment", "p_value"]),
        "tau_ci_low": float(c.loc["treatment", "ci_low"]),
        "tau_ci_high": float(c.loc["treatment", "ci_high"]),
        "tau_se_nonrobust": float(c.loc["treatment", "se_nonrobust"]),
        "r2": st["r2"], "ci_method": c.loc["treatment", "ci_method"],
        "coefficients": coef, "result": res,
    }
    return out


def delta_method_delta(alpha: float, tau: float, cov: np.ndarray) -> dict[str, Any]:
    """Delta = expit(alpha + tau) - expit(alpha) and its delta-method variance
    g' cov g with g = (mu1(1-mu1) - mu0(1-mu0), mu1(1-mu1)) (App. H); ``cov`` is the 2x2
    covariance of (alpha_hat, tau_hat)."""
    from scipy.special import expit  # here: the workflow imports this module for the DAG

    mu0 = float(expit(alpha))
    mu1 = float(expit(alpha + tau))
    g = np.array([mu1 * (1 - mu1) - mu0 * (1 - mu0), mu1 * (1 - mu1)])
    cov = np.asarray(cov, float)[:2, :2]
    var = float(g @ cov @ g)
    return {"mu0": mu0, "mu1": mu1, "delta": mu1 - mu0, "var": var, "se": float(np.sqrt(var)),
            "grad": g}


def causal_beta(df: pd.DataFrame, response: str, treatment: str = "treatment",
                beta_cov: str = "eim") -> dict[str, Any]:
    """Beta regression of ``response`` (in [0, 1]) on the treatment indicator."""
    from scipy import stats as sps

    y, X = _design(df, response, treatment)
    if y.min() < 0 or y.max() > 1:
        raise SpecSkipped(f"Beta response {response} outside [0, 1]")
    coef, st, res = fit_beta(y, X, beta_cov)
    c = coef.set_index("term")
    params = np.asarray(res.params, float)
    cov = np.asarray(res.cov_params(), float)[:2, :2]
    alpha, tau = float(params[0]), float(params[1])
    tau_lo, tau_hi = float(c.loc["treatment", "ci_low"]), float(c.loc["treatment", "ci_high"])
    dm = delta_method_delta(alpha, tau, cov)
    z = float(sps.norm.ppf(0.975))
    _, squeezed = squeeze_unit_interval(y)
    out = {
        "response": response, "model": "beta", "n": st["n"],
        "alpha": alpha, "alpha_se": float(c.loc["const", "se"]),
        "tau": tau, "tau_se": float(c.loc["treatment", "se"]),
        "tau_stat": float(c.loc["treatment", "stat"]),
        "tau_p": float(c.loc["treatment", "p_value"]),
        "tau_ci_low": tau_lo, "tau_ci_high": tau_hi,
        "odds_ratio": float(np.exp(tau)),
        "odds_ratio_ci_low": float(np.exp(tau_lo)), "odds_ratio_ci_high": float(np.exp(tau_hi)),
        "odds_reduction": float(np.exp(-tau)),
        "mu0": dm["mu0"], "mu1": dm["mu1"], "delta": dm["delta"], "delta_se": dm["se"],
        "delta_ci_low": dm["delta"] - z * dm["se"], "delta_ci_high": dm["delta"] + z * dm["se"],
        "phi": st["phi"], "pseudo_r2": st["pseudo_r2"], "mae": st["mae"],
        "beta_squeeze": st["beta_squeeze"], "converged": st["converged"],
        "cov_alpha_tau": cov,
        "ci_method": "Wald z on logit scale; OR = exp(tau) with exp(Wald endpoints); "
                     "Delta +- z * delta-method se",
        "coefficients": coef, "result": res,
    }
    if squeezed:
        out["note"] = "response contained 0/1; squeezed before fitting"
    return out


_SCALAR_KEYS = (
    "response", "model", "n", "df_resid", "alpha", "alpha_se", "tau", "tau_se", "tau_stat",
    "tau_p", "tau_ci_low", "tau_ci_high", "tau_se_nonrobust", "r2", "odds_ratio",
    "odds_ratio_ci_low", "odds_ratio_ci_high", "odds_reduction", "mu0", "mu1", "delta",
    "delta_se", "delta_ci_low", "delta_ci_high", "phi", "pseudo_r2", "mae", "beta_squeeze",
    "converged", "ci_method",
)


def causal_table(df: pd.DataFrame, beta_responses: Sequence[str] = ("ppa_attacc1",),
                 ols_responses: Sequence[str] = ("ppa_attacc1", "ppa_dist_face"),
                 treatment: str = "treatment", sample: Mapping[str, Any] | None = None,
                 ) -> pd.DataFrame:
    """One row per (response, model) for the causal experiment rows of ``df``
    (rows with non-null ``treatment``; ``sample`` may further filter on columns, e.g.
    ``{"dataset": "facescrub", "architecture": "resnet152"}``).  Unestimable cases get
    ``status='skipped'`` and a reason."""
    data = df
    if treatment in data.columns:
        data = data.loc[data[treatment].notna()]
    for col, val in (sample or {}).items():
        vals = [val] if isinstance(val, str) else list(val)
        data = data.loc[data[col].astype(str).isin(vals)]
    rows = []
    for model, responses, fn in (("ols", ols_responses, causal_ols),
                                 ("beta", beta_responses, causal_beta)):
        for resp in responses:
            try:
                r = fn(data, resp, treatment)
                rows.append({"status": "ok", "reason": "",
                             **{k: r.get(k, np.nan) for k in _SCALAR_KEYS}})
            except SpecSkipped as exc:
                rows.append({"response": resp, "model": model, "status": "skipped",
                             "reason": str(exc)})
    out = pd.DataFrame(rows)
    cols = ["status", "reason", *_SCALAR_KEYS]
    for c in cols:
        if c not in out.columns:
            out[c] = np.nan
    return out[cols]
