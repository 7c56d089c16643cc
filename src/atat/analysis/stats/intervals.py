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
* :func:`tango_paired` -- the difference of two proportions measured on the same units (two
  models' accuracies on the same test images) with Tango's score interval for paired binary
  data (Tango 1998, Statistics in Medicine 17:891-908): the units both models get right or
  both get wrong cancel, only the discordant pairs carry the difference. Vectorised.
* :func:`paired_counts` -- the discordant counts of two 0/1 vectors over the same units.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

__all__ = ["wilson_interval", "wilson_from_rate", "wilson_pooled", "t_interval_mean",
           "per_class_t_intervals", "tango_paired", "tango_statistic", "paired_counts"]


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


def paired_counts(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray
                  ) -> tuple[int, int, int]:
    """(n10, n01, n) of two 0/1 vectors over the same units: units where only ``a`` is 1, where
    only ``b`` is 1, and all units."""
    a, b = np.asarray(a).astype(bool), np.asarray(b).astype(bool)
    if a.shape != b.shape:
        raise ValueError(f"paired vectors of different lengths ({a.size} and {b.size})")
    return int(np.sum(a & ~b)), int(np.sum(~a & b)), int(a.size)


def tango_statistic(n10: Any, n01: Any, n: Any, d0: Any) -> np.ndarray:
    """Tango's score statistic for H0: p1 - p2 = d0 on paired binary data (n10 units where only
    the first is 1, n01 where only the second is, n in all; vectorised):
    Z = (n10 - n01 - n d0) / sqrt(n (2 q + d0 (1 - d0))), q the maximum-likelihood estimate of
    the probability of a (0, 1) pair under H0, the positive root of
    2n q^2 + (-n10 - n01 + (2n - n10 + n01) d0) q - n01 d0 (1 - d0) = 0. Decreasing in d0."""
    n10, n01, n, d0 = (np.asarray(v, float) for v in (n10, n01, n, d0))
    a = 2.0 * n
    b = -n10 - n01 + (2.0 * n - n10 + n01) * d0
    c = -n01 * d0 * (1.0 - d0)
    q = (np.sqrt(np.maximum(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
    var = n * (2.0 * q + d0 * (1.0 - d0))
    num = n10 - n01 - n * d0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0, num / np.sqrt(np.where(var > 0, var, 1.0)), np.sign(num) * np.inf)
    return np.where(num == 0, 0.0, z)


def tango_paired(n10: Any, n01: Any, n: Any, alpha: float = 0.025,
                 iterations: int = 64) -> tuple[np.ndarray, ...]:
    """p1 - p2 = (n10 - n01) / n of paired binary data with Tango's score interval of two-sided
    level 1 - 2 alpha (each end a one-sided 1 - alpha bound: the d0 where
    :func:`tango_statistic` equals -+z_{1-alpha}, found by bisection) and the standard error
    read off its width, (hi - lo) / (2 z); vectorised. The interval of R's
    ``contingencytables::Tango_asymptotic_score_CI_paired_2x2`` and ``PropCIs::scoreci.mp``
    (tests/test_stats_intervals.py checks their published example). A non-inferiority test at
    margin -m (H0: p1 - p2 <= -m) rejects at level alpha exactly when the lower end is above -m
    (the statistic is monotone)."""
    from scipy.stats import norm

    n10, n01, n = np.broadcast_arrays(*(np.asarray(v, float) for v in (n10, n01, n)))
    if np.any(n <= 0) or np.any(n10 < 0) or np.any(n01 < 0) or np.any(n10 + n01 > n):
        raise ValueError("paired counts need 0 <= n10, n01 and n10 + n01 <= n, n > 0")
    d = (n10 - n01) / n
    z = float(norm.ppf(1.0 - alpha))

    def solve(target: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = a.copy(), b.copy()
        for _ in range(iterations):
            m = (a + b) / 2.0
            above = tango_statistic(n10, n01, n, m) > target
            a, b = np.where(above, m, a), np.where(above, b, m)
        return (a + b) / 2.0

    lo = solve(z, np.full_like(d, -1.0), d)
    hi = solve(-z, d, np.full_like(d, 1.0))
    return d, lo, hi, (hi - lo) / (2.0 * z)
