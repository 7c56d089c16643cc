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


# ------------------------------------------------------------------------------ paired proportions
def test_tango_paired_reproduces_the_published_example():
    """Fagerland, Lydersen & Laake's example of the paired 2x2 table (complete response
    before and after consolidation therapy, Cavo et al. 2012: 59, 6 / 16, 80): Tango's
    asymptotic score interval -0.1240 to -0.0054 for the difference -0.0621, as R's
    contingencytables::Tango_asymptotic_score_CI_paired_2x2 prints it (its test suite)."""
    from atat.analysis.stats.intervals import tango_paired

    d, lo, hi, se = tango_paired(6, 16, 161, 0.025)
    assert float(d) == pytest.approx(-0.0621, abs=5e-5)
    assert (float(lo), float(hi)) == pytest.approx((-0.1240, -0.0054), abs=5e-5)
    assert float(se) == pytest.approx((float(hi) - float(lo)) / (2 * Z))


def test_tango_statistic_uses_the_constrained_maximum_likelihood():
    """The statistic's nuisance estimate is the maximum of the multinomial likelihood under
    p10 - p01 = d0 (checked against a numerical maximisation), and the interval's ends are
    where the statistic equals -+z."""
    from scipy.optimize import minimize_scalar

    from atat.analysis.stats.intervals import tango_paired, tango_statistic

    n10, n01, n = 37, 21, 300
    for d0 in (-0.1, 0.02, 0.08):
        m = n - n10 - n01

        def nll(q):
            return -(n10 * np.log(q + d0) + n01 * np.log(q) + m * np.log(1 - 2 * q - d0))
        q = minimize_scalar(nll, bounds=(max(0, -d0) + 1e-12, (1 - d0) / 2 - 1e-12),
                            method="bounded", options={"xatol": 1e-13}).x
        z = (n10 - n01 - n * d0) / np.sqrt(n * (2 * q + d0 * (1 - d0)))
        assert float(tango_statistic(n10, n01, n, d0)) == pytest.approx(z, rel=1e-5)
    d, lo, hi, _ = tango_paired(n10, n01, n, 0.05)
    z95 = sps.norm.ppf(0.95)
    assert float(tango_statistic(n10, n01, n, lo)) == pytest.approx(z95, abs=1e-9)
    assert float(tango_statistic(n10, n01, n, hi)) == pytest.approx(-z95, abs=1e-9)


def test_tango_paired_edges_and_vectorisation():
    from atat.analysis.stats.intervals import paired_counts, tango_paired

    d, lo, hi, _ = tango_paired([0, 5, 100], [0, 0, 0], [100, 100, 100], 0.025)
    assert list(d) == [0.0, 0.05, 1.0]
    assert lo[0] == pytest.approx(-hi[0]) and lo[0] < 0 < hi[0]      # no discordant pair
    assert 0 < lo[1] < 0.05 < hi[1] and hi[2] == pytest.approx(1.0) and lo[2] < 1
    with pytest.raises(ValueError, match="paired counts"):
        tango_paired(60, 50, 100)
    assert paired_counts([1, 1, 0, 0, 1], [1, 0, 1, 0, 0]) == (2, 1, 5)
    with pytest.raises(ValueError, match="different lengths"):
        paired_counts([1, 0], [1])


def test_tango_paired_holds_its_level_on_a_test_set():
    """1,260 test images, two models of accuracy 0.5 whose errors are independent (the
    worst discordance) or correlated: one-sided errors of the 90% interval at most 5.5%."""
    from atat.analysis.stats.intervals import tango_paired

    rng = np.random.default_rng(12)
    n, draws = 1260, 20000
    for rho in (0.0, 0.5):      # correlation of the two models' latent correctness
        # each image's (A right, B wrong), (A wrong, B right) and concordant probabilities
        p11 = sps.multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([0, 0])
        p10 = p01 = 0.5 - p11
        cells = rng.multinomial(n, [p10, p01, 1 - p10 - p01], draws)
        _, lo, hi, _ = tango_paired(cells[:, 0], cells[:, 1], n, 0.05)
        assert np.mean(lo > 0) <= 0.055 and np.mean(hi < 0) <= 0.055, rho
