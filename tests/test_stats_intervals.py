"""Wilson and t intervals (App. I.3) against hand computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from atat.analysis.stats.intervals import (
    per_class_t_intervals,
    t_interval_mean,
    wilson_from_rate,
    wilson_interval,
)

Z = 1.959963984540054  # Phi^{-1}(0.975)


def wilson_by_hand(k: int, n: int, z: float = Z) -> tuple[float, float]:
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(13, 50), (0, 50), (50, 50), (22313, 26500), (1, 26500),
                                 (26500, 26500)])
def test_wilson_matches_hand_formula(k, n):
    lo, hi = wilson_interval(k, n)
    elo, ehi = wilson_by_hand(k, n)
    assert lo == pytest.approx(elo, abs=1e-12)
    assert hi == pytest.approx(ehi, abs=1e-12)
    assert 0 <= lo <= k / n <= hi <= 1


def test_wilson_literal_values():
    # worked by hand: 13/50 -> centre 0.29841/1.07683 = 0.27712, half 0.11841
    lo, hi = wilson_interval(13, 50)
    assert lo == pytest.approx(0.15872, abs=5e-5)
    assert hi == pytest.approx(0.39553, abs=5e-5)
    # AttAcc@1 = 84.2% on 530 classes x 50 reconstructions = 26,500 images
    lo, hi = wilson_interval(22313, 26500)
    assert lo == pytest.approx(0.83756, abs=5e-5) and hi == pytest.approx(0.84633, abs=5e-5)
    assert wilson_from_rate(22313 / 26500, 26500) == (lo, hi)
    with pytest.raises(ValueError):
        wilson_from_rate(0.123456789, 50)
    with pytest.raises(ValueError):
        wilson_interval(51, 50)


def test_t_interval_mean_by_hand():
    x = np.array([1.02, 0.97, 1.11, 0.88, 1.05, 0.93, 1.20, 0.99])
    r = t_interval_mean(x)
    m, sd, n = x.mean(), x.std(ddof=1), len(x)
    half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert r["mean"] == pytest.approx(m) and r["df"] == 7
    assert r["ci_low"] == pytest.approx(m - half, rel=1e-12)
    assert r["ci_high"] == pytest.approx(m + half, rel=1e-12)
    assert half / (sd / math.sqrt(n)) == pytest.approx(2.3646, abs=1e-4)
    one = t_interval_mean([0.5, np.nan])
    assert one["n"] == 1 and np.isnan(one["ci_low"])


def test_per_class_t_intervals_groups():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"defense": np.repeat(["nodef", "atat"], 30),
                       "dist_face": np.r_[rng.normal(0.8, 0.1, 30), rng.normal(1.2, 0.1, 30)]})
    out = per_class_t_intervals(df, "dist_face", by="defense").set_index("defense")
    for d, g in df.groupby("defense"):
        ref = t_interval_mean(g["dist_face"])
        assert out.loc[d, "ci_low"] == pytest.approx(ref["ci_low"])
        assert out.loc[d, "n"] == 30
    assert out.loc["nodef", "ci_high"] < out.loc["atat", "ci_low"]


def test_wilson_pooled_sums_counts_and_trials_and_names_what_is_missing():
    from atat.analysis.stats.intervals import wilson_interval, wilson_pooled

    est, lo, hi, n = wilson_pooled(pd.Series([37 / 100, 41 / 100]), pd.Series([100, 100]),
                                   "bido ppa_attacc1")
    assert (est, n) == (78 / 200, 200) and (lo, hi) == wilson_interval(78, 200)
    # unequal trials: the pooled rate, not the mean of the rates
    assert wilson_pooled([0.5, 0.0], [10, 30], "x")[0] == pytest.approx(5 / 40)
    with pytest.raises(ValueError, match="bido test_acc: missing value or image count"):
        wilson_pooled([0.5], [np.nan], "bido test_acc")
    with pytest.raises(ValueError, match="not a multiple of 1/100"):
        wilson_pooled([0.3333], [100], "x")
