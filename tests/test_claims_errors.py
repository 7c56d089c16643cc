"""The claims' error rates by simulation through atat.analysis.claims' own functions (plan
revision 3): under no effect every claim of the plan -- its parts as many as the plan has,
§6's 14 included -- is contradicted at most 5.5% and supported at most 5.5% of the time; §6 is
supported at least 80% of the time at the paper's effect with equal accuracy on the run's 1,260
test images (the models fixed), and not with the seed's spread the 9cf82ad replicates measured
(which is why the plan declares its accuracy part undecidable by design); the seed's spread
added to a single-seed comparison keeps its level where ignoring it does not. Every simulation
is seeded; N draws each; bounds are 5.5% (or the nominal level plus 3 Monte Carlo standard
errors where that is wider)."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from scipy import stats as sps

from atat.analysis import claims as C
from atat.analysis.stats.intervals import tango_paired

PLAN = C.load_plan()
A = PLAN.alpha
N = 20000
BOUND = 0.055


def _mc(p: float, n: int = N) -> float:
    return 3 * np.sqrt(p * (1 - p) / n)


def _bound(p: float = A, n: int = N) -> float:
    return max(BOUND, p + _mc(p, n))


# ------------------------------------------------------------------------------ claims of K parts
def _claim_parts(claim: str) -> list[C.Test]:
    """The parts whose verdicts combine into one row of the claim (the premise is its own
    gate): the plan's parts, once per attack for the gradient-suppressing defenses' (PPA and
    IF-GMI), once per baseline (7) for §6; the cost of privacy one epsilon per row. Declared
    undecidable or not, every part is judged here (the logic under test is the combination)."""
    entry = PLAN.raw["claims"][claim]
    tests = [PLAN.test(claim, p) for p in PLAN.parts(claim)] if "parts" in entry \
        else [PLAN.test(claim)]
    if claim == "cost":
        tests = tests[:1]
    tests = [dataclasses.replace(t, undecidable=None, theta=1.0 if t.gamma is not None
                                 else t.theta) for t in tests]
    return tests * {"atat": 7, "tradeoff_gradient": 2}.get(claim, 1)


def _se(t: C.Test) -> float:
    """The parts' standard error: the part's theta or margin (a tenth of the margin for an
    equivalence part, which can be supported only when its interval is narrower than it)."""
    scale = abs(t.theta) if t.theta is not None else float(t.margin) if t.margin else 1.0
    return scale / 10 if t.test == "equivalence" else scale


def _t_intervals(t: C.Test, true: float, rng, k: int, df: float = 8.0, se: float | None = None):
    """N t(df) estimates around ``true`` (standard error :func:`_se`) with their intervals at
    the plan's alpha and at the level a part of a claim of k parts is contradicted on
    (C.contradiction_level)."""
    se = _se(t) if se is None else se
    est = true + se * rng.standard_t(df, N)
    q, qk = sps.t.ppf(1 - A, df), sps.t.ppf(1 - C.contradiction_level(t, A, k), df)
    return est - q * se, est + q * se, est - qk * se, est + qk * se


def _boundary(t: C.Test) -> float:
    """The true value at the edge of the part's contradicting and of its supported side: 0
    for a directional part, the margin on the forbidden side for a non-inferiority part,
    +margin for an equivalence part (either edge, by symmetry)."""
    if t.test in ("directional", "significance"):
        return 0.0
    if t.test == "non_inferiority":
        return t.sign * t.margin
    return t.margin


def _deep(t: C.Test) -> float:
    """A true value far inside the part's supported side (the other parts while one sits at
    its boundary): 20 standard errors beyond its boundary, or 0 for an equivalence part."""
    if t.test == "equivalence":
        return 0.0
    side = t.sign if t.test in ("directional", "significance") else -t.sign
    return _boundary(t) + side * 20 * _se(t)


def _claim_verdicts(tests, trues, rng, ses=None):
    k = PLAN.family(len(tests))
    per = []
    for i, (t, true) in enumerate(zip(tests, trues)):
        lo, hi, lo_k, hi_k = _t_intervals(t, true, rng, k, se=None if ses is None else ses[i])
        per.append(C.verdicts(t, lo, hi, lo_k, hi_k))
    return _combine(np.array(per))


def _combine(per: np.ndarray) -> np.ndarray:
    """C.combine of each column of (parts, draws) verdicts."""
    return np.array([C.combine(per[:, j]) for j in range(per.shape[1])])


@pytest.mark.parametrize("claim", list(PLAN.raw["claims"]))
def test_under_no_effect_no_claim_is_contradicted_more_than_alpha(claim):
    """Every part at the edge of its contradicting side (no effect for a directional part,
    exactly the margin for a claim of no effect): the claim is contradicted at most 5.5% of the
    time, whatever its number of parts."""
    rng = np.random.default_rng(zlib.crc32(claim.encode()))
    tests = _claim_parts(claim)
    v = _claim_verdicts(tests, [_boundary(t) for t in tests], rng)
    assert np.mean(v == C.CONTRADICTED) <= _bound(), (claim, len(tests))


@pytest.mark.parametrize("claim", list(PLAN.raw["claims"]))
def test_under_no_effect_no_claim_is_supported_more_than_alpha(claim):
    """One part at the edge of its supported side and the others far inside theirs (the least
    favourable configuration of an intersection-union test): supported at most 5.5%."""
    rng = np.random.default_rng(zlib.crc32(claim.encode()) + 1)
    tests = _claim_parts(claim)
    for i in {0, len(tests) - 1}:
        trues = [_deep(t) for t in tests]
        trues[i] = _boundary(tests[i])
        v = _claim_verdicts(tests, trues, rng)
        assert np.mean(v == C.SUPPORTED) <= _bound(), (claim, i)


def test_revision_2_contradicted_the_multi_part_claims_under_no_effect():
    """Why revision 3 corrects: without it (multiplicity none) the 3-part trade-off and the
    14-part §6 claim are contradicted far more often than alpha under no effect (the 13.7%
    and 22.3% of the independent simulation); with it, at most alpha."""
    rng = np.random.default_rng(3)
    none = dataclasses.replace(PLAN, raw={**PLAN.raw, "multiplicity": "none"})
    for claim, low in (("tradeoff", 0.11), ("atat", 0.20)):
        tests = _claim_parts(claim)
        rates = {}
        for name, plan in (("none", none), ("bonferroni", PLAN)):
            k = plan.family(len(tests))
            per = []
            for t in tests:
                lo, hi, lo_k, hi_k = _t_intervals(t, _boundary(t), rng, k, df=1e6)
                per.append(C.verdicts(t, lo, hi, lo_k, hi_k))
            rates[name] = np.mean(_combine(np.array(per)) == C.CONTRADICTED)
        assert rates["none"] > low and rates["bonferroni"] <= _bound(), (claim, rates)


def test_a_part_smaller_than_the_papers_needs_its_bonferroni_interval_too():
    """At the paper's full effect in every part, the 3-part trade-off claim is 'smaller than
    the paper's' at most alpha of the time (revision 2: up to 3 alpha)."""
    rng = np.random.default_rng(4)
    tests = _claim_parts("tradeoff")
    ses = [t.theta / (sps.norm.ppf(1 - A) + sps.norm.ppf(PLAN.power)) for t in tests]
    v = _claim_verdicts(tests, [t.theta for t in tests], rng, ses=ses)
    assert np.mean(v == C.SMALLER) <= _bound()


# ---------------------------------------------------------------------------- §6 on the run's data
K_CLASSES, M_IMAGES, ICC = 20, 20, 0.4     # the second design's claims cell (20 x 20 images)
N_TEST = 1260                              # each dataset's test split
N6 = 3000


def _section6(rng, *, attacc_gap, acc_gap, p_acc=0.5, seed_sd=0.0, seed_att_sd=0.0,
              replicates=(5, 5), n=N6, margin=None):
    """N draws of §6 on one attack: AT-AT against 7 baselines. AttAcc@1: 20 target classes of
    20 images, class success probabilities Beta (ICC 0.4) around 0.45 shared by every model of
    the cell (the same classes and candidate seeds), each model its own class x model
    interaction (SD 0.05), each baseline's shifted by -``attacc_gap`` (a list of 7, or a
    number: AT-AT minus the baseline); judged by the paired t over classes. Test accuracy:
    1,260 test images, each model right or wrong independently (the worst discordance, 0.5
    at accuracy 0.5), each baseline at p_acc - ``acc_gap``; judged by Tango's paired
    interval at ``margin`` (default the plan's). ``seed_sd`` / ``seed_att_sd``: each model
    is one seed, its true accuracy / class success moved by N(0, sd^2), and the plan's seed
    spread added, estimated from ``replicates`` seeds of two arms (with their binomial
    noise). Returns the (n,) claim verdicts."""
    b = 7
    gaps_att = np.broadcast_to(np.asarray(attacc_gap, float), (b,))
    gaps_acc = np.broadcast_to(np.asarray(acc_gap, float), (b,))
    s = 1 / ICC - 1
    t_att, t_acc = PLAN.test("atat", "attacc"), PLAN.test("atat", "accuracy")
    t_acc = dataclasses.replace(t_acc, undecidable=None,
                                margin=t_acc.margin if margin is None else margin)
    k = PLAN.family(2 * b)
    # AttAcc@1
    base = rng.beta(0.45 * s, 0.55 * s, (n, 1, K_CLASSES))
    shift = np.concatenate([[0.0], -gaps_att])[None, :, None]
    seed_att = rng.normal(0, seed_att_sd, (n, b + 1, 1)) if seed_att_sd else 0.0
    p_cls = np.clip(base + rng.normal(0, 0.05, (n, b + 1, K_CLASSES)) + shift + seed_att,
                    0.01, 0.99)
    rates = rng.binomial(M_IMAGES, p_cls) / M_IMAGES
    d = rates[:, :1] - rates[:, 1:]                                   # (n, 7, classes)
    est, lo, hi, _ = C.paired_t(d, A)
    _, lo_k, hi_k, _ = C.paired_t(d, A / k)
    # test accuracy
    true_atat = p_acc + (rng.normal(0, seed_sd, (n, 1)) if seed_sd else np.zeros((n, 1)))
    true_base = (p_acc - gaps_acc)[None, :] + (rng.normal(0, seed_sd, (n, b)) if seed_sd
                                               else 0.0)
    ra = rng.random((n, 1, N_TEST)) < np.clip(true_atat, 0, 1)[:, :, None]
    rb = rng.random((n, b, N_TEST)) < np.clip(true_base, 0, 1)[:, :, None]
    n10, n01 = (ra & ~rb).sum(-1), (~ra & rb).sum(-1)
    e_acc, alo, ahi, _ = tango_paired(n10, n01, N_TEST, A)
    _, alo_k, ahi_k, _ = tango_paired(n10, n01, N_TEST, A / k)
    if seed_sd or seed_att_sd:
        dfree = sum(replicates) - 2
        for sd, p0, nn, metric in ((seed_att_sd, 0.45, K_CLASSES * M_IMAGES, "att"),
                                   (seed_sd, p_acc, N_TEST, "acc")):
            reps = [rng.binomial(nn, np.clip(p0 + rng.normal(0, sd, (n, r)), 0, 1)) / nn
                    for r in replicates]
            s2 = sum((r.shape[1] - 1) * r.var(1, ddof=1) for r in reps) / dfree
            v = np.mean(np.concatenate([r * (1 - r) / nn for r in reps], 1), 1)
            var = 2 * np.maximum(s2 - v, 0)[:, None]
            dfs = C.seed_df(s2, v, dfree)[:, None]
            if metric == "att":
                lo, hi = C.with_seed_arrays(lo, est, hi, var, dfs, A)
                lo_k, hi_k = C.with_seed_arrays(lo_k, est, hi_k, var, dfs, A / k)
            else:
                alo, ahi = C.with_seed_arrays(alo, e_acc, ahi, var, dfs, A)
                alo_k, ahi_k = C.with_seed_arrays(alo_k, e_acc, ahi_k, var, dfs, A / k)
    va = C.verdicts(t_att, lo, hi, lo_k, hi_k)
    vc = C.verdicts(t_acc, alo, ahi, alo_k, ahi_k)
    return np.array([C.combine(list(va[j]) + list(vc[j])) for j in range(n)])


def test_section6_under_no_effect_is_neither_contradicted_nor_supported_beyond_alpha():
    rng = np.random.default_rng(61)
    theta, margin = PLAN.test("atat", "attacc").theta, PLAN.test("atat", "accuracy").margin
    # no difference in privacy, accuracy exactly the tolerance below every baseline's
    v = _section6(rng, attacc_gap=0.0, acc_gap=-margin)
    assert np.mean(v == C.CONTRADICTED) <= _bound(n=N6)
    # least favourable for support: one baseline as private as AT-AT, the others far less
    v = _section6(rng, attacc_gap=[0.0] + [2 * theta] * 6, acc_gap=0.0)
    assert np.mean(v == C.SUPPORTED) <= _bound(n=N6)
    # ... or one baseline exactly the tolerance more accurate
    v = _section6(rng, attacc_gap=2 * theta, acc_gap=[-margin] + [0.1] * 6)
    assert np.mean(v == C.SUPPORTED) <= _bound(n=N6)


def test_section6_is_supported_at_the_papers_effect_with_equal_accuracy():
    """The paper's effect (AttAcc@1 theta_P = -0.20 below every baseline) at equal accuracy on
    1,260 test images with independent errors (discordance 0.5, the worst): all 14 parts
    supported >= 80% with the models fixed (the plan's margin 0.07 is sized for this; 0.06 is
    not enough). With the seed's spread the 9cf82ad replicates measured (test accuracy SD
    0.040 pooled over the arms, AttAcc@1 0.023 with its binomial noise) it is far from 80%:
    the plan declares the accuracy part undecidable by design."""
    rng = np.random.default_rng(62)
    theta = PLAN.test("atat", "attacc").theta
    v = _section6(rng, attacc_gap=theta, acc_gap=0.0)
    assert np.mean(v == C.SUPPORTED) >= PLAN.power, np.mean(v == C.SUPPORTED)
    v = _section6(rng, attacc_gap=theta, acc_gap=0.0, seed_sd=0.040, seed_att_sd=0.005)
    assert np.mean(v == C.SUPPORTED) < 0.3
    assert PLAN.test("atat", "accuracy").undecidable


def test_the_accuracy_margin_is_the_smallest_that_powers_section6():
    """At 0.06 the same simulation falls short of 80% (the margin was sized, not guessed)."""
    rng = np.random.default_rng(63)
    v = _section6(rng, attacc_gap=PLAN.test("atat", "attacc").theta, acc_gap=0.0, margin=0.06)
    assert np.mean(v == C.SUPPORTED) < PLAN.power


# ------------------------------------------------------------------------------ the seed's spread
def _replicates(rng, n, p, sd, nn, r=5):
    """Two arms of r replicates each: a rate moved by the seed (N(0, sd^2)) and measured on nn
    trials; their pooled variance s2 and mean binomial variance v (the plan's rule)."""
    reps = [rng.binomial(nn, np.clip(p + rng.normal(0, sd, (n, r)), 0, 1)) / nn
            for _ in range(2)]
    s2 = sum(x.var(1, ddof=1) for x in reps) / 2
    v = np.mean(np.concatenate([x * (1 - x) / nn for x in reps], 1), 1)
    return s2, v


@pytest.mark.parametrize("sd", [0.0, 0.01, 0.02, 0.04])
def test_the_seed_spread_added_keeps_a_single_seed_comparison_at_its_level(sd):
    """Two single-seed models of methods with the same mean accuracy 0.5, each seed moving
    accuracy by N(0, sd^2), on 1,260 shared test images: with the seed's variance estimated on
    5 + 5 replicates less their binomial noise, Satterthwaite's df (the plan's rule) and
    added, one-sided errors at most 5.5% whatever the seed's share; Tango's interval alone
    (the models taken for their methods) errs far more as soon as the seed moves accuracy.
    The rule with t(8) instead of Satterthwaite's df (5.5-6.3% in the same simulation at sd
    0.01-0.02) and the replicates' raw variance (0.9% at sd 0: far too wide) are not it."""
    rng = np.random.default_rng(int(64 + 1000 * sd))
    n, p = N, 0.5
    true_a, true_b = p + rng.normal(0, sd, n), p + rng.normal(0, sd, n)
    ra = rng.random((n, N_TEST)) < true_a[:, None]
    rb = rng.random((n, N_TEST)) < true_b[:, None]
    n10, n01 = (ra & ~rb).sum(1), (~ra & rb).sum(1)
    d, lo, hi, _ = tango_paired(n10, n01, N_TEST, A)
    if sd >= 0.02:
        assert np.mean(lo > 0) > 3 * A                   # ignoring the seed
    s2, v = _replicates(rng, n, p, sd, N_TEST)
    lo2, hi2 = C.with_seed_arrays(lo, d, hi, 2 * np.maximum(s2 - v, 0), C.seed_df(s2, v, 8), A)
    assert np.mean(lo2 > 0) <= _bound() and np.mean(hi2 < 0) <= _bound()


def test_the_seed_spread_of_attacc_keeps_the_paired_interval_at_its_level():
    """The same for an AttAcc@1 difference (paired t over 20 classes of 20 images, ICC 0.4,
    each model its class x model interaction), the replicates attacked on the same classes:
    at most 5.5% each side with and without a seed effect."""
    rng = np.random.default_rng(66)
    s = 1 / ICC - 1
    for sd in (0.0, 0.02):
        base = rng.beta(0.3 * s, 0.7 * s, (N, 1, K_CLASSES))
        pc = np.clip(base + rng.normal(0, 0.05, (N, 2, K_CLASSES))
                     + rng.normal(0, sd, (N, 2, 1)), 0.01, 0.99)
        r = rng.binomial(M_IMAGES, pc) / M_IMAGES
        d, lo, hi, _ = C.paired_t(r[:, 0] - r[:, 1], A)
        reps = []
        for _ in range(2):
            pr = np.clip(base + rng.normal(0, 0.05, (N, 5, K_CLASSES))
                         + rng.normal(0, sd, (N, 5, 1)), 0.01, 0.99)
            reps.append((rng.binomial(M_IMAGES, pr) / M_IMAGES).mean(2))
        s2 = sum(x.var(1, ddof=1) for x in reps) / 2
        nn = K_CLASSES * M_IMAGES
        v = np.mean(np.concatenate([x * (1 - x) / nn for x in reps], 1), 1)
        lo2, hi2 = C.with_seed_arrays(lo, d, hi, 2 * np.maximum(s2 - v, 0),
                                      C.seed_df(s2, v, 8), A)
        assert np.mean(lo2 > 0) <= _bound() and np.mean(hi2 < 0) <= _bound(), sd


def test_with_seed_is_the_square_and_add_of_the_two_parts():
    e = C.normal_estimate(0.1, 0.02, A, 30)
    w = C.with_seed(e, 0.0009, 8, A)
    q, qs = sps.t.ppf(1 - A, 30), sps.t.ppf(1 - A, 8)
    assert w.lo == pytest.approx(0.1 - np.hypot(q * 0.02, qs * 0.03))
    assert w.hi == pytest.approx(0.1 + np.hypot(q * 0.02, qs * 0.03))
    assert w.se == pytest.approx(np.hypot(0.02, 0.03))
    # Welch-Satterthwaite degrees of freedom of the sum
    assert w.df == pytest.approx((0.02 ** 2 + 0.0009) ** 2 / (0.02 ** 4 / 30 + 0.0009 ** 2 / 8))
    # at another level: both parts' quantiles at it
    w2 = w.level(A / 14)
    q2, qs2 = sps.t.ppf(1 - A / 14, 30), sps.t.ppf(1 - A / 14, 8)
    assert w2.lo == pytest.approx(0.1 - np.hypot(q2 * 0.02, qs2 * 0.03))
    assert C.with_seed(e, 0.0, 8, A) == e


# ------------------------------------------------------------------------------ mde
def test_the_mde_is_the_noncentral_t_effect_with_the_plans_power():
    """Revision 2's mde, (z_{1-alpha} + z_power) SE, had 77% power with a t(4) interval; the
    noncentral t's has 80% (and the normal one stays for a normal interval)."""
    se, df = 0.1, 4
    m = PLAN.mde(se, df)
    assert C.power_at(m, se, A, df) == pytest.approx(PLAN.power, abs=1e-6)
    old = (sps.norm.ppf(1 - A) + sps.norm.ppf(PLAN.power)) * se
    assert C.power_at(old, se, A, df) < 0.78 and m > old
    assert PLAN.mde(se) == pytest.approx(old)
    # simulated: a t(df) test at the mde rejects 80% of the time
    rng = np.random.default_rng(65)
    x = rng.normal(m, se * np.sqrt(df + 1), (N, df + 1))
    t = x.mean(1) / (x.std(1, ddof=1) / np.sqrt(df + 1))
    assert abs(np.mean(t > sps.t.ppf(1 - A, df)) - PLAN.power) <= _mc(PLAN.power)
