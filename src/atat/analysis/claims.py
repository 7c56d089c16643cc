"""The paper's claims, one row each, against what this run measured (issues 17, 45).

Each claim is tested as the pre-registered analysis plan ``config/analysis/claims.yaml`` says -- its
statistic, test, one-sided level alpha, the paper's effect size theta (directional claims) or
the margin Delta (claims of no effect) with its source -- and every verdict is read off one
interval, the two-sided 1 - 2 alpha one (90% for alpha = 0.05; its ends are the one-sided
1 - alpha bounds). The verdicts can fail in both directions:

* directional claims (the paper says the quantity has a sign, with size theta):
  ``contradicted`` when the interval lies wholly on the wrong side of 0; ``smaller than the
  paper's`` when it excludes theta/2 (the row says whether it also excludes 0, i.e. whether
  the effect is significant); ``supported`` when the one-sided bound excludes 0; ``too weak
  to say`` when it holds both 0 and theta/2 -- then the mde column is what decides: the
  minimum detectable effect at the plan's power, (z_{1-alpha} + z_power) SE;
* a premise (only its direction matters, test ``significance``): supported / contradicted /
  too weak to say;
* claims of no effect: ``non_inferiority`` (no change beyond Delta in the forbidden
  direction) and ``equivalence`` (|quantity| < Delta): supported when the interval lies
  within the margin, contradicted when it lies wholly beyond, else too weak to say;
* a claim of several parts (each epsilon, each baseline, a Pareto statement of privacy and
  accuracy) is an intersection-union test: supported only if every part is; a contradicted
  part contradicts it, a part smaller than the paper's makes it smaller; a premise that is not
  supported gives ``premise not met``, never a pass;
* ``not testable``: an input is missing or the experiment's precondition (results/tables/
  preconditions.csv) failed; the basis column says which.

Intervals: for a difference of two AttAcc@1 rates, the one the plan names (:data:`RATE_INTERVALS`):
Newcombe's hybrid score interval, which treats every attacked image as independent, or the
paired t over target classes, which pairs the two models class by class (every attacked model
of a dataset is attacked on the same target classes with the same seeds) and so is honest
about images clustered by class (:func:`paired_class_difference`); Newcombe's for a difference
of test accuracies (test images are not clustered by target class); Welch's t for
differences of means (per-class mean distances) and for the log ratio of mean per-batch HSIC
(delta method), the regressions' t(n-k) with their HC2 standard errors (App. G), the Beta
fits' Wald z on the logit scale (App. G, H). Inputs are the workflow's own
outputs; numbers that have a home elsewhere come from it (the rates: :func:`atat.analysis.tables.
main_results`; the causal fit: :func:`atat.analysis.stats.causal.causal_table`; the dose-response
points: its table, and its two endpoint models' per-image files for the paired interval). The table records the plan's sha256 and whether the plan file was
modified after the run's first inversion record was written (:func:`plan_status`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from atat.base import io
from atat.plan.config import REPO_ROOT, ConfigError
from atat.analysis.paper import (BASELINE_TYPES, DEFENSE_LABELS, claims_cell, is_standard_variant,
                        label, output, section3_roles)

#: The pre-registered analysis plan and its schema.
PLAN_PATH = REPO_ROOT / "config" / "analysis" / "claims.yaml"
PLAN_SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "claims.schema.yaml"

SUPPORTED, SMALLER, CONTRADICTED = "supported", "smaller than the paper's", "contradicted"
TOO_WEAK, PREMISE_NOT_MET, NOT_TESTABLE = "too weak to say", "premise not met", "not testable"
VERDICTS = (SUPPORTED, SMALLER, CONTRADICTED, TOO_WEAK, PREMISE_NOT_MET, NOT_TESTABLE)
TESTS = ("directional", "significance", "non_inferiority", "equivalence")

#: The columns of results/tables/claims.csv (the markdown table drops the plan's two: its
#: caption says them).
COLUMNS = ["claim", "section", "statement", "paper", "test", "threshold", "run", "verdict",
           "mde", "basis", "plan_sha256", "plan_before_records"]
MD_COLUMNS = COLUMNS[:-2]
#: Paper §3: "Neither BiDO nor the defenses TL-DMI and NegLS ... significantly decrease HSIC".
HSIC_CLAIM_TYPES = ("bido", "tldmi", "negls")

#: The intervals a difference of two AttAcc@1 rates may be judged with (the plan's `interval`
#: of each key of :data:`ATTACC_DIFFERENCE_KEYS` names one): Newcombe's hybrid score interval
#: (images independent) or the paired t over the common target classes (class-clustered).
NEWCOMBE = "Newcombe hybrid score"
PAIRED_CLASSES = "paired t over classes (class-clustered)"
RATE_INTERVALS = (NEWCOMBE, PAIRED_CLASSES)
#: The plan's tests of an AttAcc@1 difference between two models (their keys).
ATTACC_DIFFERENCE_KEYS = ("claims.hsic.premise", "claims.hsic_bido_star.parts.attacc",
                          "claims.unseen_pixels", "claims.atat.parts.attacc",
                          "claims.dose_response")


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


# ------------------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class Test:
    """One pre-registered test (an entry or a part of config/analysis/claims.yaml)."""
    key: str                    # where it is in the plan, e.g. claims.causal_atat
    statistic: str
    test: str                   # one of TESTS
    interval: str
    source: str
    sign: int = 0               # directional/significance: the paper's side; else forbidden
    theta: float | None = None  # directional: the paper's effect, signed
    margin: float | None = None  # non_inferiority / equivalence
    gamma: float | None = None  # the cost of privacy (theta follows from the run's mean)

    def with_theta(self, theta: float) -> "Test":
        return dataclasses.replace(self, theta=theta)

    def describe(self, alpha: float) -> str:
        """The test in one line (the claims table's test column; alpha sets the interval)."""
        side = {1: "> 0", -1: "< 0"}.get(self.sign, "")
        what = {"directional": f"directional, {side}", "significance": f"premise, {side}",
                "non_inferiority": "non-inferiority, not "
                                   f"{'higher' if self.sign > 0 else 'lower'} by more than Delta",
                "equivalence": "equivalence, within +-Delta"}[self.test]
        return f"{self.statistic}; {what}; {100 * (1 - 2 * alpha):g}% {self.interval}"

    def threshold(self) -> str:
        """theta_P (and its half) or the margin, with its source."""
        if self.test == "directional" and self.gamma is not None and self.theta is None:
            return f"gamma_P {self.gamma:g} ({self.source})"
        if self.test == "directional":
            return f"theta_P {self.theta:.4g}, theta_P/2 {self.theta / 2:.4g} ({self.source})"
        if self.test == "significance":
            return f"sign only ({self.source})"
        return f"Delta {self.margin:g} ({self.source})"


@dataclass(frozen=True)
class AnalysisPlan:
    path: str
    sha256: str
    alpha: float
    power: float
    raw: Mapping[str, Any]

    @property
    def level(self) -> float:
        """The coverage of the interval every verdict reads (two-sided 1 - 2 alpha)."""
        return 1.0 - 2.0 * self.alpha

    def mde(self, se: float) -> float:
        """Minimum detectable effect at the plan's power: (z_{1-alpha} + z_power) SE."""
        return (_z(1.0 - self.alpha) + _z(self.power)) * se

    def test(self, claim: str, part: str | None = None) -> Test:
        entry = self.raw["claims"][claim]
        if part is None:
            return _test(f"claims.{claim}", entry)
        fields = {k: v for k, v in entry.items() if k != "parts"}
        return _test(f"claims.{claim}.parts.{part}", {**fields, **entry["parts"][part]})

    def parts(self, claim: str) -> list[str]:
        return list(self.raw["claims"][claim]["parts"])

    def premise(self, claim: str) -> Test:
        return _test(f"claims.{claim}.premise", self.raw["claims"][claim]["premise"])


def _test(key: str, d: Mapping[str, Any]) -> Test:
    def num(k: str) -> float | None:
        return None if d.get(k) is None else float(d[k])
    return Test(key=key, statistic=str(d.get("statistic", "")), test=str(d.get("test", "")),
                interval=str(d.get("interval", "")), source=str(d.get("source", "")),
                sign=int(d.get("sign", 0)), theta=num("theta"), margin=num("margin"),
                gamma=num("gamma"))


def _plan_tests(plan: AnalysisPlan) -> list[Test]:
    out = []
    for claim, entry in plan.raw["claims"].items():
        if "premise" in entry:
            out.append(plan.premise(claim))
        if "parts" in entry:
            out += [plan.test(claim, p) for p in plan.parts(claim)]
        else:
            out.append(plan.test(claim))
    return out


def _check_test(t: Test, fail: Any) -> None:
    """What the schema cannot say: each kind of test has the numbers it needs, finite, and
    theta on the side of ``sign``."""
    for name in ("theta", "margin", "gamma"):
        v = getattr(t, name)
        if v is not None and not math.isfinite(v):
            fail(f"{t.key}.{name}", f"{v} is not a finite number")
    if t.test in ("directional", "significance", "non_inferiority") and t.sign == 0:
        fail(f"{t.key}.sign", f"a {t.test} test needs 'sign' (-1 or 1)")
    if t.test == "directional":
        if t.theta is None and t.gamma is None:
            fail(f"{t.key}.theta", "a directional test needs the paper's effect 'theta' "
                                   "(or, for the cost of privacy, 'gamma')")
        if t.theta is not None and t.theta * t.sign <= 0:
            fail(f"{t.key}.theta", f"{t.theta:g} is not on the side of sign {t.sign:+d}")
    elif t.test in ("non_inferiority", "equivalence") and t.margin is None:
        fail(f"{t.key}.margin", f"a {t.test} test needs 'margin'")
    if t.test != "directional" and t.theta is not None:
        fail(f"{t.key}.theta", f"a {t.test} test takes no theta")
    if t.test == "equivalence" and t.sign:
        fail(f"{t.key}.sign", "an equivalence test is two-sided and takes no sign")
    if t.key in ATTACC_DIFFERENCE_KEYS and t.interval not in RATE_INTERVALS:
        fail(f"{t.key}.interval", f"{t.interval!r} is not an interval of an AttAcc@1 "
                                  f"difference (one of {', '.join(map(repr, RATE_INTERVALS))})")
    if t.key not in ATTACC_DIFFERENCE_KEYS and t.interval == PAIRED_CLASSES:
        fail(f"{t.key}.interval", "the paired t over classes is an interval of an AttAcc@1 "
                                  "difference between two attacked models only")


def load_plan(path: str | Path = PLAN_PATH) -> AnalysisPlan:
    """Read and validate the analysis plan (schema ``workflow/schemas/claims.schema.yaml``,
    then :func:`_check_test` for every test). A problem is a :class:`ConfigError` naming the
    file and the key."""
    import jsonschema

    from atat.plan.config import _describe

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the claims analysis plan ({exc})") from None
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: <top level>: must be a mapping")
    schema = yaml.safe_load(PLAN_SCHEMA_PATH.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(raw),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise ConfigError(f"{path}: {_describe(errors[0])}")

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"{path}: {key}: {msg}")

    plan = AnalysisPlan(path=str(path), sha256=hashlib.sha256(data).hexdigest(),
                        alpha=float(raw["alpha"]), power=float(raw["power"]), raw=raw)
    for key in ("alpha", "power"):
        if not math.isfinite(float(raw[key])):
            fail(key, f"{raw[key]} is not a finite number")
    for t in _plan_tests(plan):
        _check_test(t, fail)
    for claim in ("cost",):   # theta follows from gamma and the run's mean leakage
        for part in plan.parts(claim):
            t = plan.test(claim, part)
            if t.test != "directional" or t.gamma is None or t.theta is not None:
                fail(t.key, "the cost of privacy is a directional test of the Beta slope "
                            "with the paper's 'gamma' (and no theta)")
    return plan


def plan_status(plan_path: str | Path, records: Iterable[str | Path]) -> tuple[bool | None, str]:
    """Was the plan file in place, as it is, before the run's inversion records were written?

    Compares the plan file's modification time with the oldest of the run's inversion records
    (``metrics.json`` of every attacked model; the first moment an AttAcc@1 of this run could be
    read). (True, ...) when the plan is older; (False, ...) when it was modified after -- its
    verdicts are then not pre-registered for this run, whatever changed; (None, ...) without a
    record to compare with. A copy that does not keep modification times (``cp`` without
    ``-p``, a fresh checkout of the plan beside old results) reads as modified: the check errs
    on the side of saying so."""
    times = [os.stat(p).st_mtime for p in records if Path(p).exists()]
    if not times:
        return None, "no inversion record to compare the plan file's time with"

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    first, mine = min(times), os.stat(plan_path).st_mtime
    if mine > first:
        return False, (f"the plan file was modified ({iso(mine)}) after the run's first "
                       f"inversion record was written ({iso(first)}): these verdicts are not "
                       "pre-registered for this run")
    return True, (f"the plan file ({iso(mine)}) predates the run's first inversion record "
                  f"({iso(first)})")


# ------------------------------------------------------------------------------ intervals
@dataclass(frozen=True)
class Estimate:
    """An estimate with the interval its verdict reads (``lo``, ``hi``) and the standard error
    its minimum detectable effect uses."""
    est: float
    lo: float
    hi: float
    se: float

    def fmt(self, digits: int = 3) -> str:
        return f"{self.est:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def wilson_bounds(k: Any, n: Any, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score bounds of k/n at normal quantile ``z`` (vectorised)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def newcombe(k1: Any, n1: Any, k2: Any, n2: Any, alpha: float) -> tuple[np.ndarray, ...]:
    """k1/n1 - k2/n2 with Newcombe's hybrid score interval (his method 10, built from the two
    Wilson intervals) of two-sided level 1 - 2 alpha, and the standard error read off its
    width; vectorised. The same interval as statsmodels' ``confint_proportions_2indep(...,
    method='newcomb')`` (tests/test_claims.py checks)."""
    z = _z(1.0 - alpha)
    k1, n1, k2, n2 = (np.asarray(v, float) for v in (k1, n1, k2, n2))
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_bounds(k1, n1, z)
    l2, u2 = wilson_bounds(k2, n2, z)
    d = p1 - p2
    lo = d - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    hi = d + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return d, lo, hi, (hi - lo) / (2 * z)


def rate_difference(p1: float, n1: int, p2: float, n2: int, alpha: float = 0.025
                    ) -> Estimate:
    """p1 - p2 (rates measured on n1, n2 trials) with Newcombe's interval of level
    1 - 2 alpha (default 95%)."""
    c1, c2 = int(round(p1 * n1)), int(round(p2 * n2))
    d, lo, hi, se = newcombe(c1, n1, c2, n2, alpha)
    return Estimate(float(d), float(lo), float(hi), float(se))


@dataclass(frozen=True)
class ClassPairs:
    """Two sides of an AttAcc@1 difference, class by class: the common target classes (sorted)
    with each side's success rate and images in that class (a side of several models -- the
    seeds of a cell's defense -- pooled per class, all their images of the class together, as
    :func:`atat.analysis.tables.main_results` pools them over the whole cell)."""
    a: str                  # the sides' names (for messages)
    b: str
    classes: np.ndarray
    rate_a: np.ndarray
    rate_b: np.ndarray
    n_a: np.ndarray         # images of the class on each side
    n_b: np.ndarray

    @property
    def k(self) -> int:
        return len(self.classes)

    @property
    def d(self) -> np.ndarray:
        """The per-class differences d_c = rate_a,c - rate_b,c."""
        return self.rate_a - self.rate_b

    def newcombe(self, alpha: float) -> Estimate:
        """The same difference of the pooled rates with Newcombe's interval (images
        independent)."""
        ka, kb = float(np.sum(self.rate_a * self.n_a)), float(np.sum(self.rate_b * self.n_b))
        na, nb = float(self.n_a.sum()), float(self.n_b.sum())
        d, lo, hi, se = newcombe(round(ka), na, round(kb), nb, alpha)
        return Estimate(float(d), float(lo), float(hi), float(se))


def class_pairs(a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str],
                metric: str = "correct_top1") -> ClassPairs:
    """:class:`ClassPairs` of two sides' per-image rows (columns ``class`` and ``metric``, 0/1;
    each side's rows all its models' images). Raises ValueError naming the sides and the
    classes when the two sides were not attacked on the same target classes, or a side has
    no image."""
    for name, rows in zip(names, (a, b)):
        missing = [c for c in ("class", metric) if c not in rows.columns]
        if missing:
            raise ValueError(f"{name}: the per-image rows lack columns {missing}")
        if rows.empty:
            raise ValueError(f"{name}: no attacked image in the per-image table")
    ga, gb = (r.groupby("class")[metric].agg(["mean", "size"]) for r in (a, b))
    only_a, only_b = sorted(set(ga.index) - set(gb.index)), sorted(set(gb.index) - set(ga.index))
    if only_a or only_b:
        def few(cs: list[Any]) -> str:
            return ", ".join(map(str, cs[:10])) + (f" ... ({len(cs)} in all)" if len(cs) > 10
                                                   else "")
        raise ValueError(
            f"a paired difference needs the same target classes on both sides: {names[0]} and "
            f"{names[1]} differ (only {names[0]}: {few(only_a) or 'none'}; only {names[1]}: "
            f"{few(only_b) or 'none'})")
    gb = gb.loc[ga.index]
    return ClassPairs(names[0], names[1], ga.index.to_numpy(), ga["mean"].to_numpy(float),
                      gb["mean"].to_numpy(float), ga["size"].to_numpy(float),
                      gb["size"].to_numpy(float))


def paired_t(d: Any, alpha: float) -> tuple[np.ndarray, ...]:
    """mean(d) over the last axis with the Student t(k - 1) interval of two-sided level
    1 - 2 alpha and its standard error sd(d)/sqrt(k) (vectorised over the other axes)."""
    d = np.asarray(d, float)
    k = d.shape[-1]
    est = d.mean(-1)
    se = d.std(-1, ddof=1) / np.sqrt(k)
    q = _t(1.0 - alpha, k - 1)
    return est, est - q * se, est + q * se, se


def paired_class_difference(pairs: ClassPairs, alpha: float = 0.025) -> Estimate:
    """rate_a - rate_b paired by target class: the mean of the per-class differences d_c over
    the k common classes, its standard error sd(d_c)/sqrt(k) and the Student t(k - 1) interval
    of level 1 - 2 alpha. The class effect (a class easy to invert is easy for every model)
    cancels in d_c, and the interval counts classes, not images, as the independent units.
    With equal images per class it estimates the same difference as :func:`rate_difference`.
    Fewer than 2 classes: an unbounded interval (not testable). Every class with the same
    difference gives a zero-width interval (the sample has no spread to estimate)."""
    if pairs.k < 2:
        return Estimate(float(pairs.d.mean()) if pairs.k else float("nan"), -math.inf,
                        math.inf, float("nan"))
    return Estimate(*(float(v) for v in paired_t(pairs.d, alpha)))


def _t(p: float, df: Any) -> Any:
    from scipy import stats as sps

    return sps.t.ppf(p, df)


def welch(a: Any, b: Any, alpha: float, log_ratio: bool = False) -> tuple[np.ndarray, ...]:
    """mean(a) - mean(b) -- or ln(mean(a) / mean(b)) with ``log_ratio`` (delta method) -- with
    Welch's t interval of two-sided level 1 - 2 alpha and its standard error, over the last
    axis (vectorised over the others)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    na, nb = a.shape[-1], b.shape[-1]
    ma, mb = a.mean(-1), b.mean(-1)
    va, vb = a.var(-1, ddof=1) / na, b.var(-1, ddof=1) / nb
    if log_ratio:
        est, va, vb = np.log(ma / mb), va / ma ** 2, vb / mb ** 2
    else:
        est = ma - mb
    se = np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    q = _t(1.0 - alpha, df)
    return est, est - q * se, est + q * se, se


def mean_difference(a: Sequence[float], b: Sequence[float], alpha: float = 0.025,
                    log_ratio: bool = False) -> Estimate:
    """:func:`welch` of two samples (NaNs dropped; at least 2 values each; positive means for
    ``log_ratio``)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        raise ValueError("need at least 2 values on each side")
    if log_ratio and (a.mean() <= 0 or b.mean() <= 0):
        raise ValueError("a log ratio needs positive means")
    return Estimate(*(float(v) for v in welch(a, b, alpha, log_ratio)))


def normal_estimate(est: float, se: float, alpha: float, df: float | None = None) -> Estimate:
    """est +- q se, q the z (or, with ``df``, Student t) quantile 1 - alpha."""
    q = _z(1.0 - alpha) if df is None or not np.isfinite(df) else float(_t(1.0 - alpha, df))
    return Estimate(float(est), float(est - q * se), float(est + q * se), float(se))


# ------------------------------------------------------------------------------ verdicts
def verdicts(t: Test, lo: Any, hi: Any) -> np.ndarray:
    """The verdict of test ``t`` for each interval [lo, hi] (vectorised; a non-finite end is
    not testable)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    out = np.full(np.broadcast(lo, hi).shape, TOO_WEAK, dtype=object)
    if t.test == "equivalence":
        m = float(t.margin)
        out[(lo > -m) & (hi < m)] = SUPPORTED
        out[(lo > m) | (hi < -m)] = CONTRADICTED
    else:
        # coordinates in which the paper's (directional) or the forbidden (non-inferiority)
        # side is positive
        low, up = (lo, hi) if t.sign > 0 else (-hi, -lo)
        if t.test == "non_inferiority":
            m = float(t.margin)
            out[up < m] = SUPPORTED
            out[low > m] = CONTRADICTED
        else:
            out[low > 0] = SUPPORTED
            if t.test == "directional":
                out[up < abs(float(t.theta)) / 2] = SMALLER
            out[up < 0] = CONTRADICTED
    out[~(np.isfinite(lo) & np.isfinite(hi))] = NOT_TESTABLE
    return out


def verdict(t: Test, e: Estimate | None) -> str:
    if e is None:
        return NOT_TESTABLE
    return str(verdicts(t, e.lo, e.hi)[()])


def combine(parts: Iterable[str], premise: str | None = None) -> str:
    """The verdict of a claim of several parts (intersection-union): the premise first (not
    supported: ``premise not met``), then a contradicted part, a part smaller than the
    paper's, an untestable part, a part too weak to say; supported only if every part is."""
    if premise is not None and premise != SUPPORTED:
        return NOT_TESTABLE if premise == NOT_TESTABLE else PREMISE_NOT_MET
    vs = list(parts)
    if not vs:
        return NOT_TESTABLE
    for v in (CONTRADICTED, SMALLER, NOT_TESTABLE, TOO_WEAK, PREMISE_NOT_MET):
        if v in vs:
            return v
    return SUPPORTED


def significance_note(t: Test, e: Estimate) -> str:
    """For a directional verdict smaller than the paper's: does the interval exclude 0 too?"""
    low = e.lo if t.sign > 0 else -e.hi
    return ("significant: the one-sided bound excludes 0" if low > 0 else
            "not significant: the interval holds 0")


def rate_power(p1: float, p0: float, n: int, t: Test, alpha: float) -> float:
    """Exact probability that test ``t`` of the difference of two rates (p1 - p0, n trials
    each, Newcombe interval of level 1 - 2 alpha) is ``supported``: the sum over every pair of
    counts."""
    from scipy.stats import binom

    k = np.arange(n + 1)
    k1, k0 = np.meshgrid(k, k, indexing="ij")
    _, lo, hi, _ = newcombe(k1, n, k0, n, alpha)
    prob = np.outer(binom.pmf(k, n, p1), binom.pmf(k, n, p0))
    return float(prob[verdicts(t, lo, hi) == SUPPORTED].sum())


def planned_n_rates(p0: float, t: Test, alpha: float = 0.05, power: float = 0.80,
                    n_max: int = 5000) -> int:
    """The smallest number of images per arm at which directional test ``t`` of a rate
    difference, with the paper's full effect (p0 + theta against p0), is ``supported`` with
    probability ``power`` (exact, :func:`rate_power`); starts from the normal approximation."""
    p1 = p0 + float(t.theta)
    var = p0 * (1 - p0) + p1 * (1 - p1)
    n = max(2, int((_z(1 - alpha) + _z(power)) ** 2 * var / float(t.theta) ** 2) // 2)
    while n <= n_max:
        if rate_power(p1, p0, n, t, alpha) >= power:
            return n
        n += 1
    raise ValueError(f"no n <= {n_max} gives power {power} for {p0} + {t.theta}")


# ------------------------------------------------------------------------------ rows
@dataclass
class Claim:
    claim: str
    section: str
    statement: str
    paper: str
    test: str = ""
    threshold: str = ""
    run: str = ""
    verdict: str = NOT_TESTABLE
    mde: str = ""
    basis: str = ""
    #: the parts the verdict was read from (premise first, named "premise"); not a column
    parts: list["Part"] = field(default_factory=list, repr=False)


@dataclass
class Part:
    """One part of a claim: its pre-registered test and the run's estimate (None: ``why``)."""
    name: str
    test: Test
    est: Estimate | None
    why: str = ""
    digits: int = 3
    #: an AttAcc@1 difference: its two sides class by class (the power analysis reads them)
    pairs: ClassPairs | None = None

    def verdict(self) -> str:
        return verdict(self.test, self.est)

    def text(self) -> str:
        if self.est is None:
            return f"{self.name}: {self.why}" if self.name else self.why
        v = self.verdict()
        note = f", {significance_note(self.test, self.est)}" if v == SMALLER else ""
        head = f"{self.name}: " if self.name else ""
        return f"{head}{self.est.fmt(self.digits)} ({v}{note})"


def judge(c: Claim, plan: AnalysisPlan, parts: Sequence[Part], premise: Part | None = None,
          extra: Sequence[str] = ()) -> None:
    """Fill the test, threshold, run, verdict and mde columns of ``c`` from its parts."""
    tests = list(dict.fromkeys(p.test.describe(plan.alpha) for p in parts))
    if premise is not None:
        tests.insert(0, premise.test.describe(plan.alpha))
    c.test = " AND ".join(tests)
    c.threshold = "; ".join((f"{p.name}: " if p.name and len(parts) > 1 else "")
                            + p.test.threshold() for p in parts)
    texts = ([f"premise {premise.text()}"] if premise is not None else []) + \
        [p.text() for p in parts] + list(extra)
    c.run = "; ".join(texts)
    c.mde = "; ".join((f"{p.name}: " if p.name and len(parts) > 1 else "")
                      + f"{plan.mde(p.est.se):.3g}"
                      for p in parts if p.est is not None and np.isfinite(p.est.se))
    c.verdict = combine([p.verdict() for p in parts],
                        premise.verdict() if premise is not None else None)
    c.parts = ([dataclasses.replace(premise, name="premise")] if premise is not None else []) \
        + list(parts)


# ------------------------------------------------------------------------------ the inputs
@dataclass
class Inputs:
    config: Mapping[str, Any]
    summary: pd.DataFrame
    main: pd.DataFrame                  # atat.analysis.tables.main_results: AttAcc / delta rows, CIs
    per_image: pd.DataFrame
    tidy: pd.DataFrame | None           # results/stats/regressions.csv
    causal: pd.DataFrame | None         # atat.analysis.stats.causal.causal_table
    cost: pd.DataFrame | None           # results/tables/cost_of_privacy.csv (raw)
    hsic: dict[str, dict[str, Any]]     # defense -> HSIC json of the main cell
    preconditions: pd.DataFrame | None
    dose: pd.DataFrame | None           # atat.analysis.dose_response.dose_response_frame
    dataset: str
    architecture: str
    plan: AnalysisPlan = dataclasses.field(default_factory=load_plan)
    #: the per-image rows of the dose-response sweep's endpoint models (their per-image files,
    #: atat.analysis.paper.dose_endpoint_per_image): not in ``per_image``, the grid's models only
    dose_images: pd.DataFrame | None = None

    def defenses_of(self, *types: str) -> list[str]:
        """The standard variant of each defense type (the defense named after its type)."""
        return [t for t in types
                if t in self.config["defenses"] and is_standard_variant(self.config, t)]

    def cell(self, defense: str, attack: str) -> pd.Series | None:
        m = self.main
        hit = m[(m["dataset"] == self.dataset) & (m["architecture"] == self.architecture)
                & (m["defense"] == defense) & (m["attack"] == attack)]
        return None if hit.empty else hit.iloc[0]

    def classes(self, defense: str, attack: str, metric: str) -> np.ndarray:
        p = self.per_image
        g = p[(p["dataset"] == self.dataset) & (p["architecture"] == self.architecture)
              & (p["defense"] == defense) & (p["attack"] == attack)]
        return g.groupby("class")[metric].mean().to_numpy(float) if metric in g else np.array([])

    def images(self, defense: str, attack: str, dataset: str | None = None,
               architecture: str | None = None) -> pd.DataFrame:
        """The per-image rows of every model of ``defense`` attacked by ``attack`` in this
        cell (or in ``dataset`` / ``architecture``): all its seeds, as
        :func:`atat.analysis.tables.main_results` pools them."""
        p = self.per_image
        if p is None or p.empty:
            return pd.DataFrame()
        return p[(p["dataset"] == (dataset or self.dataset))
                 & (p["architecture"] == (architecture or self.architecture))
                 & (p["defense"] == defense) & (p["attack"] == attack)]

    def test_accuracy(self, defense: str) -> tuple[float, int] | None:
        """(test accuracy, test images) of the grid's first-seed model of ``defense`` in this
        cell (summary columns test_acc, n_test); None where either is missing."""
        s = self.summary
        if "n_test" not in s or "test_acc" not in s:
            return None
        rows = s[(s["dataset"] == self.dataset) & (s["architecture"] == self.architecture)
                 & (s["defense"] == defense)]
        if "treatment" in rows:
            rows = rows[rows["treatment"].isna()]
        rows = rows.sort_values("seed")
        if rows.empty or pd.isna(rows["n_test"].iloc[0]) or pd.isna(rows["test_acc"].iloc[0]):
            return None
        return float(rows["test_acc"].iloc[0]), int(rows["n_test"].iloc[0])

    def precondition(self, experiment: str, cell: tuple[str, str] | None = None
                     ) -> tuple[bool | None, str]:
        """(all checks of ``experiment`` passed, the failed checks) -- None: not checked.
        ``cell`` = (dataset, architecture): only the checks of that cell's models (model
        names ``<dataset>/<architecture>/...``), so a claim about one cell is not decided by
        another cell's models (e.g. the demo's DenseNet-47 AT-AT for the ResNet-18 claims)."""
        pc = self.preconditions
        if pc is None or pc.empty:
            return None, "no preconditions table"
        rows = pc[pc["experiment"] == experiment]
        if cell is not None:
            from atat.analysis.preconditions import cell_prefix
            rows = rows[rows["model"].astype(str).str.startswith(cell_prefix(*cell))]
        if rows.empty:
            return None, f"no {experiment} precondition rows"
        # rows without a threshold (passed empty) are informational, not checks
        failed = rows.loc[rows["passed"].astype(str).str.lower().isin(["false", "0"]),
                          "check"].drop_duplicates().tolist()
        return (not failed), ("failed: " + ", ".join(failed)) if failed else "passed"


def _lab(defense: str) -> str:
    return label(DEFENSE_LABELS, defense)


def _rate_vs(inp: Inputs, a: str, b: str, attack: str, t: Test
             ) -> tuple[Estimate | None, ClassPairs | None]:
    """AttAcc@1 of ``attack``, defense ``a`` minus ``b`` in the cell, with the interval test
    ``t`` names (:data:`RATE_INTERVALS`), and the two sides class by class (None where their
    class sets differ under Newcombe; under the paired interval that stops with the error)."""
    ra, rb = inp.cell(a, attack), inp.cell(b, attack)
    if ra is None or rb is None:
        return None, None
    names = (f"{inp.dataset}/{inp.architecture}/{a} ({attack})",
             f"{inp.dataset}/{inp.architecture}/{b} ({attack})")
    return _rate_estimate(inp, t, inp.images(a, attack), inp.images(b, attack), names,
                          lambda: rate_difference(ra["attacc1"], int(ra["n_images"]),
                                                  rb["attacc1"], int(rb["n_images"]),
                                                  inp.plan.alpha))


def _rate_estimate(inp: Inputs, t: Test, a: pd.DataFrame, b: pd.DataFrame,
                   names: tuple[str, str], newcombe_estimate: Any
                   ) -> tuple[Estimate | None, ClassPairs | None]:
    """Dispatch on the plan's interval of an AttAcc@1 difference: ``newcombe_estimate()`` (the
    pooled rates, as today) or :func:`paired_class_difference` of the per-image rows."""
    if t.interval == PAIRED_CLASSES:
        pairs = class_pairs(a, b, names)
        return paired_class_difference(pairs, inp.plan.alpha), pairs
    if t.interval != NEWCOMBE:   # load_plan admits no other
        raise ValueError(f"{t.key}.interval: {t.interval!r} is not one of {RATE_INTERVALS}")
    try:
        pairs = class_pairs(a, b, names)
    except ValueError:
        pairs = None     # the power analysis then has no class structure to read
    return newcombe_estimate(), pairs


def _rate_name(t: Test) -> str:
    """The basis column's short name of an AttAcc@1 difference's interval."""
    return "paired t over classes" if t.interval == PAIRED_CLASSES else "Newcombe"


def _hsic_batches(inp: Inputs, defense: str) -> np.ndarray | None:
    """Per-batch HSIC(X, Z) averaged over the measured layers."""
    r = inp.hsic.get(defense)
    if r is None:
        return None
    cols = [np.asarray(v, float) for v in r["raw"]["hsic_xz"].values()]
    return np.mean(np.vstack(cols), axis=0) if cols else None


def _hsic_ratio(inp: Inputs, a: str, b: str) -> tuple[Estimate | None, str]:
    x, y = _hsic_batches(inp, a), _hsic_batches(inp, b)
    if x is None or y is None:
        return None, f"HSIC of {_lab(a) if x is None else _lab(b)} not measured"
    try:
        return mean_difference(x, y, inp.plan.alpha, log_ratio=True), ""
    except ValueError as exc:
        return None, f"HSIC log ratio: {exc}"


def _gated(c: Claim, ok: bool | None, why: str) -> bool:
    """A failed precondition makes the claim not testable (the basis says which check)."""
    if ok is False:
        c.verdict = NOT_TESTABLE
        return False
    return True


# ------------------------------------------------------------------------------ the claims
def _hsic_claims(inp: Inputs, nodef: str) -> list[Claim]:
    out = []
    plan = inp.plan
    for d in inp.defenses_of(*HSIC_CLAIM_TYPES):
        c = Claim(f"hsic_{d}", "§3 (1), Table 1",
                  f"{_lab(d)} does not lower HSIC(X,Z) below NoDef's (while lowering PPA "
                  "AttAcc@1)", "not significantly lower (BiDO, TL-DMI, NegLS)")
        t_prem = plan.premise("hsic")
        att, pairs = _rate_vs(inp, d, nodef, "ppa", t_prem)
        premise = Part("PPA AttAcc@1 minus NoDef's", t_prem, att,
                       "PPA of NoDef or the defense missing", pairs=pairs)
        ratio, why = _hsic_ratio(inp, d, nodef)
        part = Part("ln HSIC(X,Z) ratio to NoDef's", plan.test("hsic", "hsic"), ratio, why, 4)
        judge(c, plan, [part], premise)
        c.basis = f"{_rate_name(t_prem)} (premise); Welch t on the log ratio of mean " \
                  "per-batch HSIC (mean over layers)"
        out.append(c)
    return out


def _bido_star_claim(inp: Inputs, nodef: str) -> list[Claim]:
    labels = output("table1").labels
    star = next((d for d, lab in labels.items() if lab == "BiDO**"), None)
    c = Claim("hsic_bido_star", "§3 (1), App. D.1",
              "BiDO** lowers HSIC(X,Z) below BiDO's yet defends worse (higher PPA AttAcc@1)",
              "lower HSIC, worse defense")
    if star is None or "bido" not in inp.config["defenses"] \
            or star not in inp.config["defenses"]:
        c.basis = "BiDO or BiDO** not trained"
        return [c]
    plan = inp.plan
    ratio, why = _hsic_ratio(inp, star, "bido")
    t_att = plan.test("hsic_bido_star", "attacc")
    att, pairs = _rate_vs(inp, star, "bido", "ppa", t_att)
    judge(c, plan, [
        Part(f"ln HSIC(X,Z) ratio {_lab(star)} / BiDO", plan.test("hsic_bido_star", "hsic"),
             ratio, why, 4),
        Part("PPA AttAcc@1 minus BiDO's", t_att, att, "PPA of BiDO or BiDO** missing",
             pairs=pairs)])
    c.basis = f"Welch t on the HSIC log ratio, {_rate_name(t_att)} on AttAcc@1; both parts " \
              "must hold"
    return [c]


def _permuted_claim(inp: Inputs, nodef: str) -> list[Claim]:
    from atat.analysis.paper import permuted_defenses

    out = []
    ok, why = inp.precondition("permuted labels", (inp.dataset, inp.architecture))
    for d in permuted_defenses(inp.config):
        c = Claim(f"permuted_{d}", "§3 (2), Table 2",
                  "a model that rote-memorises permuted labels leaks less: larger PPA "
                  "delta_face (L2 to the nearest training image) than NoDef",
                  "train acc. > 99.4%; reconstructions collapse (high L2)")
        a, b = inp.classes(d, "ppa", "dist_face"), inp.classes(nodef, "ppa", "dist_face")
        est = (mean_difference(a, b, inp.plan.alpha) if a.size >= 2 and b.size >= 2
               else None)
        judge(c, inp.plan, [Part("", inp.plan.test("permuted"), est,
                                 "PPA per-image distances missing")])
        _gated(c, ok, why)
        c.basis = f"Welch t over per-class means; precondition {why}"
        out.append(c)
    return out


def _unseen_pixels_claim(inp: Inputs) -> list[Claim]:
    roles = section3_roles(inp.config)
    ok, why = inp.precondition("Unseen-Pixels", (inp.dataset, inp.architecture))
    out = []
    for d in roles["Unseen-Pixels"]:
        for base in roles["NoDef (early-stopped)"]:
            c = Claim(f"unseen_pixels_{d}", "§3 (3), Table 3",
                      "a model that never saw > 97% of the pixels is not more private (PPA "
                      "AttAcc@1) than NoDef of about its accuracy (early-stopped) beyond the "
                      "margin", "> 50% AttAcc@1; only marginally more private than NoDef-ES")
            t = inp.plan.test("unseen_pixels")
            att, pairs = _rate_vs(inp, d, base, "ppa", t)
            judge(c, inp.plan, [Part("PPA AttAcc@1 minus NoDef-ES's", t, att,
                                     "PPA of Unseen-Pixels or NoDef-ES missing", pairs=pairs)])
            _gated(c, ok, why)
            c.basis = f"{_rate_name(t)}; precondition {why}"
            out.append(c)
    return out


def _tidy_rows(inp: Inputs, spec: str) -> pd.DataFrame:
    t = inp.tidy
    return pd.DataFrame() if t is None else t[t["spec"] == spec]


def _term(inp: Inputs, spec: str, term: str) -> tuple[Estimate | None, str]:
    """The coefficient ``term`` of ``spec`` with its interval at the plan's level (t(df_resid)
    with the fit's standard error), or None and why."""
    rows = _tidy_rows(inp, spec)
    if rows.empty:          # no regressions in this run (an empty frame has no columns)
        return None, f"{spec} not fitted"
    r = rows[(rows["term"] == term) & (rows["status"] == "ok")]
    if r.empty:
        reason = rows["reason"].iloc[0] if "reason" in rows and \
            isinstance(rows["reason"].iloc[0], str) and rows["reason"].iloc[0] else "no estimate"
        return None, f"not fitted ({reason})"
    r = r.iloc[0]
    df = float(r["df_resid"]) if "df_resid" in r and pd.notna(r["df_resid"]) else None
    return normal_estimate(float(r["estimate"]), float(r["se"]), inp.plan.alpha, df), ""


def _eps(term: str) -> str:
    return term.split("eps")[1]


def _tradeoff_claims(inp: Inputs) -> list[Claim]:
    plan = inp.plan
    out = []
    for table, attack, claim, paper in (
            ("T15", "ppa", "generic defenses: PPA AttAcc@1 rises with robust accuracy at each "
             "epsilon (test acc. controlled), by about the paper's amount",
             "significant at all eps; R2 0.93-0.95 (joint OLS)"),
            ("T18", "ifgmi", "generic defenses: IF-GMI AttAcc@1 rises with robust accuracy at "
             "each epsilon, by about the paper's amount", "significant at all eps; R2 0.93-0.95")):
        c = Claim(f"tradeoff_{attack}", "§4, Table 5, App. G", claim, paper)
        parts = []
        for term in plan.parts("tradeoff"):
            est, why = _term(inp, f"{table}_{attack}_generic_eps{_eps(term)}_ols", term)
            parts.append(Part(f"eps {_eps(term)}", plan.test("tradeoff", term), est, why))
        joint = _tidy_rows(inp, f"{table}_{attack}_generic_joint_ols")
        ok = joint[joint["status"] == "ok"] if len(joint) else joint
        extra = [f"joint OLS R2 {float(ok['r2'].iloc[0]):.2f} (n {int(ok['n'].iloc[0])})"] \
            if len(ok) else []
        judge(c, plan, parts, extra=extra)
        c.basis = "robust-accuracy slope of each single-eps OLS (test acc. + robust acc.), " \
                  "t(n-k) with HC2 SEs; every eps must hold"
        out.append(c)
    # clean accuracy adds little once robust accuracy is known (joint model)
    c = Claim("clean_acc_ppa", "§4, Table 5", "clean test accuracy is weakly or insignificantly "
              "related to PPA AttAcc@1 once robust accuracy is controlled (joint OLS): its "
              "slope lies within the margin", "weak or insignificant")
    est, why = _term(inp, "T15_ppa_generic_joint_ols", "test_acc")
    judge(c, plan, [Part("test_acc slope", plan.test("clean_acc"), est,
                         why or "T15_ppa_generic_joint_ols not fitted")])
    c.basis = "t(n-k) with HC2 SEs"
    out.append(c)
    # gradient-suppressing defenses: the tradeoff does not hold
    c = Claim("tradeoff_gradient", "§4, Tables 16/19", "gradient-suppressing defenses do not "
              "follow the tradeoff: at each epsilon and attack the robust-accuracy slope stays "
              "below half the generic defenses' (theta_P/2)", "the tradeoff does not hold")
    parts = []
    for table, attack in (("T16", "ppa"), ("T19", "ifgmi")):
        for term in plan.parts("tradeoff_gradient"):
            est, why = _term(inp, f"{table}_{attack}_gradient_eps{_eps(term)}_ols", term)
            parts.append(Part(f"{attack.upper()} eps {_eps(term)}",
                              plan.test("tradeoff_gradient", term), est, why))
    judge(c, plan, parts)
    c.basis = "the single-eps OLS of Tables 16/19, t(n-k) with HC2 SEs; every slope must hold"
    out.append(c)
    return out


def _cost_claims(inp: Inputs) -> list[Claim]:
    plan = inp.plan
    out = []
    cost = inp.cost
    z95 = _z(0.975)   # the cost table carries beta's 95% Wald interval
    for term in plan.parts("cost"):
        t = plan.test("cost", term)
        c = Claim(f"cost_{term}", "§4, App. G", f"the robustness cost of privacy at eps "
                  f"{_eps(term)} (pp of robust accuracy per pp of PPA AttAcc@1, Beta, T15 "
                  "joint) is positive, of about the paper's size: judged on the Beta slope",
                  f"gamma {t.gamma:g}")
        row = None if cost is None or cost.empty else cost[cost["term"] == term]
        r = None if row is None or row.empty else row.iloc[0]
        if r is None or any(k not in r or not np.isfinite(float(r[k]))
                            for k in ("beta", "beta_ci_low", "beta_ci_high", "mu_bar")):
            note = "" if r is None or "note" not in r or pd.isna(r["note"]) else r["note"]
            judge(c, plan, [Part("beta", t, None,
                                 f"cost of privacy not computed {note}".strip())])
            c.basis = "Beta slope of the cost of privacy table"
            out.append(c)
            continue
        mu = float(r["mu_bar"])
        theta = 1.0 / (t.gamma * mu * (1 - mu))
        se = (float(r["beta_ci_high"]) - float(r["beta_ci_low"])) / (2 * z95)
        est = normal_estimate(float(r["beta"]), se, plan.alpha)
        gamma = f"gamma {float(r['gamma']):.2f}" if pd.notna(r.get("gamma")) else ""
        judge(c, plan, [Part("beta", t.with_theta(theta), est)],
              extra=[f"mean leakage {mu:.3f}, so theta_P = 1/(gamma_P mu(1-mu)) = "
                     f"{theta:.3g}"] + ([gamma] if gamma else []))
        c.basis = "Wald z on the logit scale (the Beta slope, not the inverted gamma interval)"
        out.append(c)
    return out


def _causal_claim(inp: Inputs) -> list[Claim]:
    c = Claim("causal_atat", "§5, App. H, Table 21", "randomised AT-AT (treatment) lowers PPA "
              "AttAcc@1 against NoDef replicates (Beta regression), by about the paper's amount",
              "84% -> 6.5%, odds 77x lower, z = 38")
    t = inp.causal
    plan = inp.plan
    row = None if t is None else t[(t["model"] == "beta") & (t["response"] == "ppa_attacc1")]
    causal = inp.config.get("causal") or {}
    ok, why = inp.precondition("AT-AT", (causal.get("dataset", inp.dataset),
                                         causal.get("architecture", inp.architecture)))
    if row is None or row.empty or row["status"].iloc[0] != "ok":
        reason = ("no causal experiment" if row is None or row.empty
                  else f"skipped: {row['reason'].iloc[0]}")
        judge(c, plan, [Part("tau", plan.test("causal_atat"), None, reason)])
        c.basis = reason
        return [c]
    r = row.iloc[0]
    est = normal_estimate(float(r["tau"]), float(r["tau_se"]), plan.alpha)
    judge(c, plan, [Part("tau", plan.test("causal_atat"), est, digits=2)],
          extra=[f"{100 * r['mu0']:.1f}% -> {100 * r['mu1']:.1f}%, odds "
                 f"{r['odds_reduction']:.2f}x lower, z = {r['tau_stat']:.1f}, n = {int(r['n'])}"])
    _gated(c, ok, why)
    c.basis = f"Wald z on the logit scale; AT-AT precondition {why}"
    return [c]


def atat_cells(inp: Inputs) -> list[tuple[str, str]]:
    """(dataset, architecture) of every grid cell whose AT-AT model was attacked: the claims
    cell first, then the others in order (§6: "across all ... data, and attacks", Tables
    23-28 span every cell)."""
    m = inp.main[inp.main["defense"] == "atat"]
    cells = sorted({(str(d), str(a)) for d, a in zip(m["dataset"], m["architecture"])})
    main = (inp.dataset, inp.architecture)
    return [main] + [c for c in cells if c != main]


def _atat_vs_baselines(inp: Inputs) -> list[Claim]:
    out: list[Claim] = []
    main = (inp.dataset, inp.architecture)
    for cell in atat_cells(inp) if "atat" in inp.config["defenses"] else []:
        out += _atat_vs_baselines_in(dataclasses.replace(inp, dataset=cell[0],
                                                         architecture=cell[1]),
                                     suffix="" if cell == main else f"_{cell[0]}_{cell[1]}")
    return out


def _atat_vs_baselines_in(inp: Inputs, suffix: str) -> list[Claim]:
    """§6 as a Pareto statement, per attack: against each baseline, AT-AT's AttAcc@1 lower
    (directional) and its test accuracy not lower beyond the tolerance (non-inferiority);
    every baseline must be beaten (intersection-union)."""
    atat = "atat"
    plan = inp.plan
    t_att, t_acc = plan.test("atat", "attacc"), plan.test("atat", "accuracy")
    out = []
    ok, why = inp.precondition("AT-AT", (inp.dataset, inp.architecture))
    where = f" (cell {inp.dataset} / {inp.architecture})" if suffix else ""
    m = inp.main
    attacks = (m.loc[(m["dataset"] == inp.dataset) & (m["architecture"] == inp.architecture),
                     "attack"] if suffix else m["attack"]).unique()
    acc_me = inp.test_accuracy(atat)
    for attack in attacks:
        baselines = {b: rb for b in inp.defenses_of(*BASELINE_TYPES)
                     if (rb := inp.cell(b, attack)) is not None}
        n = len(baselines)
        # another cell trains only the baselines its net allows (no RoLSS on a DenseNet)
        whom = (f"each of the {n} baselines trained in the cell (of the paper's 7)" if suffix
                else "each of the 7 baselines")
        c = Claim(f"atat_{attack}{suffix}", "§6, Figure 4, Tables 23-28",
                  f"AT-AT has lower {attack.upper()} AttAcc@1 than {whom}, at a test accuracy "
                  f"not lower than the baseline's beyond the tolerance{where}",
                  "superior privacy at higher accuracy")
        c.test = " AND ".join(t.describe(plan.alpha) for t in (t_att, t_acc))
        c.threshold = f"AttAcc@1: {t_att.threshold()}; accuracy: {t_acc.threshold()}"
        me = inp.cell(atat, attack)
        if me is None or n == 0:
            c.basis = "AT-AT not attacked" if me is None else \
                "no baseline of the 7 attacked in this cell"
            out.append(c)
            continue
        per, texts, mdes = [], [], {"AttAcc@1": [], "accuracy": []}
        for b, rb in baselines.items():
            att, pairs = _rate_vs(inp, atat, b, attack, t_att)
            acc_b = inp.test_accuracy(b)
            acc = (rate_difference(acc_me[0], acc_me[1], acc_b[0], acc_b[1], plan.alpha)
                   if acc_me and acc_b else None)
            pa = Part(f"{_lab(b)} AttAcc@1", t_att, att, pairs=pairs)
            pc = Part(f"{_lab(b)} acc.", t_acc, acc, "test accuracy or its n_test missing")
            c.parts += [pa, pc]
            v = combine([pa.verdict(), pc.verdict()])
            per.append(v)
            texts.append(f"{_lab(b)} {v} (AttAcc@1 {att.fmt()}, acc. "
                         + (acc.fmt() if acc is not None else "n/a") + ")")
            mdes["AttAcc@1"].append(plan.mde(att.se))
            if acc is not None:
                mdes["accuracy"].append(plan.mde(acc.se))
        c.verdict = combine(per)
        beaten = sum(v == SUPPORTED for v in per)
        c.run = (f"AT-AT {me['attacc1']:.3f} at test acc. "
                 + (f"{acc_me[0]:.3f}" if acc_me else "n/a")
                 + f"; beats {beaten} of {n} baselines; AT-AT minus: " + "; ".join(texts))
        c.mde = "; ".join(f"{k} {min(v):.3g}-{max(v):.3g}" for k, v in mdes.items() if v)
        _gated(c, ok, why)
        att_basis = ("paired t over the target classes" if t_att.interval == PAIRED_CLASSES
                     else "Newcombe over attacked images")
        c.basis = (f"per baseline: AttAcc@1 {att_basis}; test accuracy Newcombe over the test "
                   f"images; every baseline must be beaten; precondition {why}")
        out.append(c)
    return out


def _dose_claim(inp: Inputs) -> list[Claim]:
    d = inp.dose
    if d is None or d.empty or not inp.config.get("dose_response"):
        return []
    attack = str(inp.config["dose_response"]["attack"])
    col, ncol = f"{attack}_attacc1", f"{attack}_n_images"
    lo_row, hi_row = d.iloc[0], d.iloc[-1]
    c = Claim("dose_response", "beyond the paper (App. H's lambda)",
              f"{attack.upper()} AttAcc@1 falls as AT-AT's lambda grows", "(not in the paper)")
    t = inp.plan.test("dose_response")
    diff, pairs, why = _dose_difference(inp, t, lo_row, hi_row, attack)
    pts = ", ".join(f"{r['weight_adv']:g}: {r[col]:.2f}" for _, r in d.iterrows())
    judge(c, inp.plan, [Part(f"lambda {hi_row['weight_adv']:g} minus {lo_row['weight_adv']:g}",
                             t, diff, why, pairs=pairs)], extra=[f"all: {pts}"])
    c.basis = f"{_rate_name(t)}, the largest lambda against the smallest"
    return [c]


def _dose_difference(inp: Inputs, t: Test, lo_row: pd.Series, hi_row: pd.Series, attack: str
                     ) -> tuple[Estimate | None, ClassPairs | None, str]:
    """The dose-response's AttAcc@1 difference (largest lambda minus smallest), with the
    interval the plan names (:func:`_rate_estimate`). Newcombe reads the table's rates; the
    paired interval pairs the two endpoint models class by class from their per-image rows
    (``inp.dose_images``, the endpoints' own per-image files: a generated variant is not in
    results/inversion/per_image.csv): without them the part is not testable, and says so."""
    col, ncol = f"{attack}_attacc1", f"{attack}_n_images"
    dr = inp.config["dose_response"]
    dataset, arch = str(dr.get("dataset", inp.dataset)), str(dr.get("architecture",
                                                                     inp.architecture))
    defenses = [str(r["defense"]) if "defense" in r and pd.notna(r["defense"]) else None
                for r in (hi_row, lo_row)]
    rows = [_dose_images(inp, dfn, attack, dataset, arch) for dfn in defenses]

    def newcombe_estimate() -> Estimate:
        return rate_difference(hi_row[col], int(hi_row[ncol]), lo_row[col], int(lo_row[ncol]),
                               inp.plan.alpha)
    if t.interval == PAIRED_CLASSES and any(r.empty for r in rows):
        lam = [f"lambda {r['weight_adv']:g} ({dfn or 'no defense column'})"
               for r, dfn, g in zip((hi_row, lo_row), defenses, rows) if g.empty]
        return None, None, ("the paired interval needs per-image rows, and the "
                            "dose-response endpoints' per-image files have none of "
                            + ", ".join(lam))
    if any(r.empty for r in rows):
        return newcombe_estimate(), None, ""
    names = tuple(f"{dataset}/{arch}/{dfn} ({attack})" for dfn in defenses)
    est, pairs = _rate_estimate(inp, t, rows[0], rows[1], names, newcombe_estimate)
    return est, pairs, ""


def _dose_images(inp: Inputs, defense: str | None, attack: str, dataset: str,
                 architecture: str) -> pd.DataFrame:
    """The per-image rows of every model of ``defense`` among the dose-response endpoints'
    (all their seeds, pooled per class as the dose-response table pools them)."""
    p = inp.dose_images
    if defense is None or p is None or p.empty:
        return pd.DataFrame()
    return p[(p["dataset"] == dataset) & (p["architecture"] == architecture)
             & (p["defense"] == defense) & (p["attack"] == attack)]


def build_claims(inp: Inputs) -> pd.DataFrame:
    """The claims table's rows (:data:`MD_COLUMNS`) of :func:`judged_claims`."""
    return pd.DataFrame([{k: getattr(c, k) for k in MD_COLUMNS} for c in judged_claims(inp)],
                        columns=MD_COLUMNS)


def judged_claims(inp: Inputs) -> list[Claim]:
    """Every claim of the paper judged on ``inp``, with the parts its verdict was read from
    (``Claim.parts``: the estimates and their tests; the power analysis reads them)."""
    nodef = "nodef"
    claims: list[Claim] = []
    for part in (_hsic_claims(inp, nodef), _bido_star_claim(inp, nodef),
                 _permuted_claim(inp, nodef), _unseen_pixels_claim(inp), _tradeoff_claims(inp),
                 _cost_claims(inp), _causal_claim(inp), _atat_vs_baselines(inp),
                 _dose_claim(inp)):
        claims += part
    for c in claims:
        if c.verdict not in VERDICTS:  # pragma: no cover - a coding error above
            raise RuntimeError(f"claim {c.claim}: verdict {c.verdict!r}")
    return claims


# ------------------------------------------------------------------------------ seed variation
def seed_variation(summary: pd.DataFrame, config: Mapping[str, Any]) -> pd.DataFrame:
    """How much one model's numbers move with its seed: the causal experiment's replicates
    (one cell, same recipe, seeds ``causal.first_seed``...) per arm -- mean, SD, min, max of
    clean accuracy, robust accuracy at each epsilon and the attacks' AttAcc@1 / delta_face --
    next to the grid's first-seed model of the same variant (the number the tables show).
    Empty without a causal experiment."""
    causal = config.get("causal")
    if not causal or "treatment" not in summary or summary["treatment"].isna().all():
        return pd.DataFrame()
    cell = summary[(summary["dataset"] == causal["dataset"])
                   & (summary["architecture"] == causal["architecture"])]
    reps, grid = cell[cell["treatment"].notna()], cell[cell["treatment"].isna()]
    metrics = [c for c in summary.columns if c == "test_acc" or
               (c.startswith("robust_acc_eps") and c.count("_") == 2) or
               c.endswith(("_attacc1", "_dist_face"))]
    rows = []
    for arm, defense in ((1, causal.get("treatment", "atat")), (0, causal.get("control", "nodef"))):
        part = reps[reps["treatment"] == arm]
        ref = grid[grid["defense"] == defense]
        for m in metrics:
            v = part[m].dropna()
            if v.empty:
                continue
            rows.append({"arm": "treatment" if arm else "control", "defense": defense,
                         "metric": m, "n_seeds": len(v), "mean": v.mean(),
                         "sd": v.std(ddof=1) if len(v) > 1 else np.nan, "min": v.min(),
                         "max": v.max(), "grid_model": ref[m].iloc[0] if len(ref) and
                         m in ref else np.nan})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ the rule
def _read(path: str | Path | None) -> pd.DataFrame | None:
    return None if not path else pd.read_csv(path)


def _prior_sentence(inp: Inputs) -> str:
    """What the caption says of the attackers' priors: each prior's quality precondition (rows
    ``generators/<name>`` of the preconditions table), so a failed prior of one population
    (e.g. the demo's dogs) is not read as the prior of every claim."""
    from atat.analysis.preconditions import PRIOR

    pc = inp.preconditions
    rows = None if pc is None or pc.empty else pc[pc["experiment"] == PRIOR]
    if rows is None or rows.empty:
        ok, why = inp.precondition(PRIOR)
        return ("Every privacy number comes from inversions with the attacker's prior, whose "
                f"quality precondition {why}.")
    parts, failed_any = [], False
    for model, group in rows.groupby("model", sort=True):
        name = str(model).split("/", 1)[-1]
        failed = group.loc[group["passed"].astype(str).str.lower().isin(["false", "0"]),
                           "check"].drop_duplicates().tolist()
        checked = group["passed"].astype(str).str.lower().isin(["true", "1", "false", "0"]).any()
        failed_any |= bool(failed)
        parts.append(f"{name} " + ("failed: " + ", ".join(failed) if failed
                                   else "passed" if checked else "not measured"))
    return ("The privacy numbers come from inversions with the attackers' priors, whose quality "
            "preconditions: " + "; ".join(parts)
            + (" (where a prior failed, its population's reconstructions are weaker than the "
               "paper's: AttAcc@1 differences are measured, but with a worse attacker)"
               if failed_any else "") + ".")


def read_inputs(config: Mapping[str, Any], *, summary_csv: str | Path,
                per_image_csv: str | Path, plan: AnalysisPlan,
                regressions_csv: str | Path | None = None, cost_csv: str | Path | None = None,
                hsic_files: Mapping[str, str | Path] | None = None,
                preconditions_csv: str | Path | None = None,
                dose_csv: str | Path | None = None,
                dose_per_image: Sequence[str | Path] = ()) -> Inputs:
    """The claims' inputs read from a run's files (the claims rule's inputs;
    ``dose_per_image``: the dose-response endpoints' per-image files, concatenated)."""
    from atat.analysis.stats.causal import causal_table
    from atat.analysis.stats.regression import causal_sample
    from atat.analysis.tables import main_results

    summary = pd.read_csv(summary_csv)
    per_image = pd.read_csv(per_image_csv)
    causal = None
    if "treatment" in summary and summary["treatment"].notna().any():
        causal = causal_table(summary, sample=causal_sample(config.get("causal")))
    inp = Inputs(config=config, summary=summary, main=main_results(per_image, summary),
                 per_image=per_image, tidy=_read(regressions_csv), causal=causal,
                 cost=_read(cost_csv),
                 hsic={d: io.read_json(p) for d, p in (hsic_files or {}).items()},
                 preconditions=_read(preconditions_csv),
                 dose=_read(dose_csv), dataset=claims_cell(config)[0],
                 architecture=claims_cell(config)[1], plan=plan,
                 dose_images=(pd.concat([pd.read_csv(f) for f in dose_per_image],
                                        ignore_index=True) if dose_per_image else None))
    return inp


def claims_table(config: Mapping[str, Any], *, summary_csv: str | Path, per_image_csv: str | Path,
                 outputs: Sequence[str | Path], regressions_csv: str | Path | None = None,
                 cost_csv: str | Path | None = None,
                 hsic_files: Mapping[str, str | Path] | None = None,
                 preconditions_csv: str | Path | None = None,
                 dose_csv: str | Path | None = None,
                 dose_per_image: Sequence[str | Path] = (), plan: str | Path = PLAN_PATH,
                 records: Sequence[str | Path] = ()) -> pd.DataFrame:
    """Write results/tables/claims.{csv,md} and, with a causal experiment in the summary,
    results/tables/seed_variation.{csv,md} (``outputs``: those paths, by name;
    ``dose_per_image``: the dose-response endpoints' per-image files). ``plan``: the
    analysis plan (config/analysis/claims.yaml); ``records``: the run's inversion records, whose
    times :func:`plan_status` compares with the plan's."""
    from atat.analysis.tables import to_markdown

    the_plan = load_plan(plan)
    registered, plan_note = plan_status(plan, records)
    inp = read_inputs(config, summary_csv=summary_csv, per_image_csv=per_image_csv,
                      regressions_csv=regressions_csv, cost_csv=cost_csv,
                      hsic_files=hsic_files, preconditions_csv=preconditions_csv,
                      dose_csv=dose_csv, dose_per_image=dose_per_image, plan=the_plan)
    summary = inp.summary
    table = build_claims(inp)
    table["plan_sha256"] = the_plan.sha256
    table["plan_before_records"] = "" if registered is None else registered
    counts = table["verdict"].value_counts()
    caption = (f"The paper's claims against this run ({inp.dataset} / {inp.architecture} for "
               "the per-cell claims; §6's AT-AT claims also in every other cell where AT-AT "
               "was attacked): " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
               + f". Each claim tested as the analysis plan {Path(plan).name} (sha256 "
               f"{the_plan.sha256}) registers it: one-sided alpha {the_plan.alpha:g}, "
               f"intervals {100 * the_plan.level:g}% two-sided, mde = the minimum detectable "
               f"effect at {100 * the_plan.power:g}% power (atat.analysis.claims); {plan_note}. "
               + _prior_sentence(inp))
    seeds = seed_variation(summary, config)
    seeds_caption = ("How much the numbers move with the seed: the causal experiment's "
                     "replicates (same cell and recipe, other seeds) per arm, next to the grid's "
                     "first-seed model of the variant.")
    by_name = {Path(p).name: Path(p) for p in outputs}
    for name, frame, md, cap in (("claims", table, table[MD_COLUMNS], caption),
                                 ("seed_variation", seeds, seeds, seeds_caption)):
        if f"{name}.csv" not in by_name:
            continue
        with io.atomic_path(by_name[f"{name}.csv"]) as tmp:
            frame.to_csv(tmp, index=False)
        if f"{name}.md" in by_name:
            io.write_text(by_name[f"{name}.md"], to_markdown(md, cap) if len(frame) else
                          cap + "\n\n(no causal experiment in this run)\n")
    return table
