"""Statistics of the paper: leakage regressions (App. G), cost of privacy, causal AT-AT
experiment (App. H) and confidence intervals (App. I.3).  All model fitting is done by
statsmodels."""

# Imported on first use (PEP 562): the workflow imports atat.analysis.stats.causal and
# atat.analysis.stats.regression while it builds the DAG, and importing this package must not pull in
# statsmodels/scipy.stats (~2 s) for that.
import importlib

_HOMES = {
    "assign_treatment": "causal",
    "causal_beta": "causal",
    "causal_ols": "causal",
    "causal_table": "causal",
    "delta_method_delta": "causal",
    "per_class_t_intervals": "intervals",
    "t_interval_mean": "intervals",
    "wilson_from_rate": "intervals",
    "wilson_interval": "intervals",
    "SpecSkipped": "regression",
    "cost_of_privacy": "regression",
    "cost_of_privacy_from_table": "regression",
    "fit_all": "regression",
    "fit_spec": "regression",
    "gamma_from_beta": "regression",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"atat.analysis.stats.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'atat.analysis.stats' has no attribute {name!r}")


__all__ = [
    "SpecSkipped", "assign_treatment", "causal_beta", "causal_ols", "causal_table",
    "cost_of_privacy", "cost_of_privacy_from_table", "delta_method_delta", "fit_all",
    "fit_spec", "gamma_from_beta", "per_class_t_intervals",
    "t_interval_mean", "wilson_from_rate", "wilson_interval",
]
