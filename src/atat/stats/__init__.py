"""Statistics of the paper: leakage regressions (App. G), cost of privacy, causal AT-AT
experiment (App. H) and confidence intervals (App. I.3).  All model fitting is done by
statsmodels."""

from atat.stats.causal import (
    assign_treatment,
    causal_beta,
    causal_ols,
    causal_table,
    delta_method_delta,
)
from atat.stats.intervals import (
    per_class_t_intervals,
    t_interval_mean,
    wilson_from_rate,
    wilson_interval,
)
from atat.stats.regression import (
    SpecSkipped,
    cost_of_privacy,
    cost_of_privacy_from_table,
    fit_all,
    fit_spec,
    gamma_from_beta,
    load_specs,
)

__all__ = [
    "SpecSkipped", "assign_treatment", "causal_beta", "causal_ols", "causal_table",
    "cost_of_privacy", "cost_of_privacy_from_table", "delta_method_delta", "fit_all",
    "fit_spec", "gamma_from_beta", "load_specs", "per_class_t_intervals",
    "t_interval_mean", "wilson_from_rate", "wilson_interval",
]
