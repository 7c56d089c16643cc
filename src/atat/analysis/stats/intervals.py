"""Confidence intervals for the App. I.3 tables.

* :func:`wilson_interval` -- Wilson score 95% interval for a proportion such as AttAcc@1
  (``count`` correct reconstructions out of ``nobs``), via
  ``statsmodels.stats.proportion.proportion_confint(method="wilson")``.
* :func:`wilson_from_rate` -- the same from a rate and its denominator (the count is
  ``round(rate * nobs)``; a rate that is not k/nobs is an error, never rounded silently
  beyond 1e-6 * nobs).
* :func:`wilson_pooled` -- the same for rates of several models (seeds) pooled: counts and
  trials summed (the dose-response and the figures pool seeds this way, as the App. I.3
  tables pool seeds' images).
* :func:`t_interval_mean` -- Student-t interval for a mean of per-class values (e.g. mean
  FaceNet L2 distance or evaluation confidence over the attacked classes):
  mean +- t_{0.975, m-1} sd / sqrt(m) (``statsmodels DescrStatsW.tconfint_mean``).
* :func:`per_class_t_intervals` -- :func:`t_interval_mean` per group of a long table.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

__all__ = ["wilson_interval", "wilson_from_rate", "wilson_pooled", "t_interval_mean",
           "per_class_t_intervals"]


def wilson_interval(count: int | float, nobs: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval (two-sided, level 1 - alpha) for count/nobs."""
    if nobs <= 0:
        raise ValueError("nobs must be positive")
    if count < 0 or count > nobs:
        raise ValueError(f"count {count} outside [0, {nobs}]")
    lo, hi = proportion_confint(count, nobs, alpha=alpha, method="wilson")
    return float(lo), float(hi)


def wilson_from_rate(rate: float, nobs: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson interval from a rate in [0, 1] measured on ``nobs`` trials."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate {rate} outside [0, 1]")
    count = rate * nobs
    k = round(count)
    if abs(count - k) > 1e-6 * max(nobs, 1):
        raise ValueError(f"rate {rate} is not a multiple of 1/{nobs} (count {count})")
    return wilson_interval(int(k), int(nobs), alpha)


def wilson_pooled(rates: Sequence[float] | pd.Series, trials: Sequence[float] | pd.Series,
                  what: str, alpha: float = 0.05) -> tuple[float, float, float, int]:
    """Pooled proportion of per-model ``rates`` each measured on ``trials`` images (counts and
    trials summed), with its Wilson interval: ``(estimate, low, high, n)``. ``what`` names the
    quantity in the error raised for a missing rate or count or a rate that is not k/n."""
    counts, n = 0, 0
    for rate, k in zip(rates, trials):
        if pd.isna(rate) or pd.isna(k):
            raise ValueError(f"{what}: missing value or image count in the summary")
        k = int(k)
        c = float(rate) * k
        if abs(c - round(c)) > 1e-6 * max(k, 1):
            raise ValueError(f"{what}: rate {rate} is not a multiple of 1/{k}")
        counts += int(round(c))
        n += k
    if n == 0:
        raise ValueError(f"{what}: no image count in the summary")
    lo, hi = wilson_interval(counts, n, alpha)
    return counts / n, lo, hi, n


def t_interval_mean(values: Sequence[float] | np.ndarray | pd.Series,
                    alpha: float = 0.05) -> dict[str, Any]:
    """Mean of ``values`` (NaNs dropped) with its Student-t interval on m-1 df."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    m = x.size
    if m == 0:
        raise ValueError("no finite values")
    mean = float(x.mean())
    if m == 1:
        return {"mean": mean, "sd": np.nan, "se": np.nan, "n": 1, "df": 0,
                "ci_low": np.nan, "ci_high": np.nan}
    d = DescrStatsW(x)
    lo, hi = d.tconfint_mean(alpha=alpha)
    sd = float(x.std(ddof=1))
    return {"mean": mean, "sd": sd, "se": sd / np.sqrt(m), "n": int(m), "df": int(m - 1),
            "ci_low": float(lo), "ci_high": float(hi)}


def per_class_t_intervals(df: pd.DataFrame, value: str, by: Sequence[str] | str | None = None,
                          alpha: float = 0.05) -> pd.DataFrame:
    """:func:`t_interval_mean` of column ``value`` within each group of ``by`` (each row
    of ``df`` being one class); ``by=None`` gives a single row."""
    if by is None:
        return pd.DataFrame([t_interval_mean(df[value], alpha)])
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    for key, g in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), **t_interval_mean(g[value], alpha)})
    return pd.DataFrame(rows)
