"""The paper's claims, one row each, against what this run measured.

Each claim is tested as the pre-registered analysis plan ``config/analysis/claims.yaml`` says -- its
statistic, test, one-sided level alpha, the paper's effect size theta (directional claims) or
the margin Delta (claims of no effect) with its source, the preconditions of the regime it
reads, how the seed's spread enters it -- and every verdict is read off intervals of two-sided
level 1 - 2 alpha (90% for alpha = 0.05; their ends are one-sided 1 - alpha bounds). The
verdicts can fail in both directions:

* directional claims (the paper says the quantity has a sign, with size theta):
  ``contradicted`` when the interval lies wholly on the wrong side of 0; ``smaller than the
  paper's`` when it excludes theta/2 (the row says whether it also excludes 0, i.e. whether
  the effect is significant); ``supported`` when the one-sided bound excludes 0; ``too weak
  to say`` when it holds both 0 and theta/2 -- then the mde column is what decides: the
  minimum detectable effect at the plan's power (noncentral t where the interval is a t
  interval);
* a premise (only its direction matters, test ``significance``): supported / contradicted /
  too weak to say;
* claims of no effect: ``non_inferiority`` (no change beyond Delta in the forbidden
  direction) and ``equivalence`` (|quantity| < Delta): supported when the interval lies
  within the margin, contradicted when it lies wholly beyond, else too weak to say;
* a claim of several parts (each epsilon, each baseline, a Pareto statement of privacy and
  accuracy) is an intersection-union test: supported only if every part is (valid at alpha
  without correction); a part contradicts it, or makes it smaller than the paper's, only on
  its Bonferroni interval over the claim's K parts (level 1 - 2 alpha / K; for the claim's
  verdict the same decision as Holm's step-down, whose first step it is: one contradicting
  part suffices), so that under no effect the claim is contradicted at most alpha of the time
  however many parts it has; a premise that is not supported gives ``premise not met``;
* ``too weak to say (undecidable by design)``: the plan declared before the run that the part
  cannot reach its power at the planned size (``undecidable``, with the reason); its estimate
  is reported, its verdict not read;
* ``not in the paper's regime``: a precondition the claim reads (the plan's ``regime``: rows
  of results/tables/preconditions.csv of the cells, epsilons and models it reads) failed; the
  regime column names the check, its value and its threshold. Rows that are missing (a run
  older than the check) read ``regime not checked``, never a pass;
* ``not testable``: an input is missing; the run column says which.

Intervals: for a difference of two AttAcc@1 rates, the one the plan names (:data:`RATE_INTERVALS`):
Newcombe's hybrid score interval, which treats every attacked image as independent, or the
paired t over target classes (:func:`paired_class_difference`); for a difference of two test
accuracies, Tango's score interval for paired binary data over the same test images
(:func:`paired_accuracy_difference`, from each model's per-test-image predictions) or
Newcombe's of the two rates; Welch's t for differences of means and for the log ratio of mean
per-batch HSIC (delta method); the regressions' HC3 standard errors with Bell-McCaffrey degrees
of freedom (or HC2 with t(n - k), the paper's); the Beta fits' parametric bootstrap-t on the
logit scale (or the Wald z, the paper's). The seed's spread: a part of a single-seed comparison
whose plan says ``seed: added`` gets the seed's variance of a difference, 2 s2_seed, measured on
the causal replicates of the same run (:meth:`Inputs.seed_spread`), added to its interval
(:func:`with_seed`); the regressions carry it in their residuals, the causal claim in its
replicates. Inputs are the workflow's own outputs; numbers that have a home elsewhere come
from it. The table records the plan's sha256 and whether the plan file was modified after the
run's first inversion record was written (:func:`plan_status`).
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
from typing import Any, Callable, Iterable, Mapping, Sequence

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
UNDECIDABLE = "too weak to say (undecidable by design)"
NOT_IN_REGIME = "not in the paper's regime"
VERDICTS = (SUPPORTED, SMALLER, CONTRADICTED, TOO_WEAK, UNDECIDABLE, PREMISE_NOT_MET,
            NOT_TESTABLE, NOT_IN_REGIME)
TESTS = ("directional", "significance", "non_inferiority", "equivalence")

#: The columns of results/tables/claims.csv (the markdown table drops the plan's two: its
#: caption says them).
COLUMNS = ["claim", "section", "statement", "paper", "test", "threshold", "run", "verdict",
           "mde", "regime", "seed", "basis", "plan_sha256", "plan_before_records"]
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
#: A difference of two models' test accuracies: Newcombe's interval of the two rates (test
#: images independent draws for each model) or Tango's paired score interval over the same
#: test images (each image right or wrong under both models; the models' per-test-image
#: predictions, results/models/.../test_predictions.csv).
ACC_NEWCOMBE = "Newcombe hybrid score (test-set accuracies as rates)"
ACC_TANGO = "Tango paired score (the same test images)"
#: An OLS coefficient of the regressions (n = 16-18 models): the paper's HC2 standard errors
#: with t(n - k), or HC3 with Bell-McCaffrey degrees of freedom (the regressions table's
#: se_hc3, df_bm_hc3; atat.analysis.stats.regression.bell_mccaffrey_df).
OLS_HC2 = "t(n-k) with HC2 standard errors"
OLS_HC3_BM = "t(Bell-McCaffrey df) with HC3 standard errors"
#: A Beta-regression coefficient: the paper's Wald z, or a parametric bootstrap-t (the plan's
#: `bootstrap`; atat.analysis.stats.regression.beta_bootstrap_t).
BETA_WALD = "Wald z on the logit scale"
BETA_BOOT = "parametric bootstrap-t on the logit scale"
#: Which intervals each test of the plan may name (claim, part or None for every part).
INTERVALS = {("atat", "attacc"): RATE_INTERVALS, ("atat", "accuracy"): (ACC_NEWCOMBE, ACC_TANGO),
             ("tradeoff", None): (OLS_HC2, OLS_HC3_BM), ("clean_acc", None): (OLS_HC2, OLS_HC3_BM),
             ("tradeoff_gradient", None): (OLS_HC2, OLS_HC3_BM),
             ("cost", None): (BETA_WALD, BETA_BOOT), ("causal_atat", None): (BETA_WALD, BETA_BOOT)}
#: How the seed's spread enters a test (the plan's `seed`): added to the interval of a
#: single-seed comparison (the causal replicates' variance, ``seed_metric``), already in the
#: regression's residuals (every model one seed), in the replicates the interval is over, or
#: not measured by any replicate (the interval then speaks of the two trained models).
SEED_WAYS = ("added", "residuals", "replicates", "not measured")
#: The preconditions a claim may read (the plan's `regime` lists their names): the experiment
#: and check of results/tables/preconditions.csv (atat.analysis.preconditions; thresholds: the
#: config's `preconditions:`); the rows read are those of the cells, epsilons and models the
#: claim reads (:class:`Reads`). None: every check of the experiment.
REGIME_GATES = {"recipe": ("recipe", "nodef_train_acc"),
                "autoattack": ("AutoAttack regime", "robust_below_clean_eps"),
                "evaluation_model": ("evaluation model", "held_out_acc"),
                "attack_regime": ("attack regime", "ppa_attacc1"),
                "determinism": ("determinism", "repeated_clean_predictions_agree"),
                "atat": ("AT-AT", None), "permuted": ("permuted labels", None),
                "unseen_pixels": ("Unseen-Pixels", None)}
#: Defense types whose clean predictions are random by design (MID samples its bottleneck at
#: evaluation, paper App. A.1): their failed determinism check is the defense, not the regime.
STOCHASTIC_AT_EVALUATION = ("mid",)
MULTIPLICITY = ("bonferroni", "none")


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def _t(p: float, df: Any) -> Any:
    from scipy import stats as sps

    return sps.t.ppf(p, df)


def mde(se: float, alpha: float, power: float, df: float | None = None,
        crit: float | None = None) -> float:
    """Minimum detectable effect of a one-sided level-alpha test at ``power``: the true effect
    delta with P(T > t_{1-alpha, df}) = power, T noncentral t(df, delta / se) (scipy.stats.nct)
    -- with ``df`` None or infinite, (z_{1-alpha} + z_power) se, or (crit + z_power) se when the
    interval's own one-sided quantile is ``crit`` (a bootstrap's)."""
    if not (se > 0 and math.isfinite(se)):
        return float("nan")
    if df is None or not math.isfinite(df):
        return ((crit if crit is not None else _z(1.0 - alpha)) + _z(power)) * se
    from scipy import stats as sps
    from scipy.optimize import brentq

    q = float(sps.t.ppf(1.0 - alpha, df))
    ncp = brentq(lambda d: float(sps.nct.sf(q, df, d)) - power, 0.0, 100.0)
    return ncp * se


def power_at(effect: float, se: float, alpha: float, df: float | None = None) -> float:
    """P(a one-sided level-alpha t(df) (normal: df None) test rejects) at a true ``effect``
    (in the test's direction) with standard error ``se``: noncentral t."""
    if not (se > 0 and math.isfinite(se)):
        return float("nan")
    from scipy import stats as sps

    if df is None or not math.isfinite(df):
        return float(sps.norm.sf(_z(1.0 - alpha) - effect / se))
    return float(sps.nct.sf(sps.t.ppf(1.0 - alpha, df), df, effect / se))


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
    seed: str = ""              # how the seed's spread enters (SEED_WAYS)
    seed_metric: str | None = None  # seed "added": the replicates' summary column
    undecidable: str | None = None  # declared before the run: why the part cannot decide

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

    @property
    def multiplicity(self) -> str:
        """How the parts of a claim of several parts are corrected (:data:`MULTIPLICITY`)."""
        return str(self.raw.get("multiplicity", "none"))

    @property
    def bootstrap(self) -> tuple[int, int]:
        """(draws, seed) of every bootstrap interval."""
        b = self.raw.get("bootstrap") or {}
        return int(b.get("draws", 1999)), int(b.get("seed", 0))

    def family(self, parts: int) -> int:
        """K, the number of parts a part's contradiction is corrected over."""
        return max(int(parts), 1) if self.multiplicity == "bonferroni" else 1

    def mde(self, se: float, df: float | None = None, crit: float | None = None) -> float:
        """Minimum detectable effect at the plan's power (:func:`mde`)."""
        return mde(se, self.alpha, self.power, df, crit)

    def mde_of(self, e: "Estimate") -> float:
        """:meth:`mde` of an estimate: noncentral t with its degrees of freedom, or its own
        one-sided quantile (a bootstrap's; the normal one for a normal interval)."""
        if e.df is not None and math.isfinite(e.df):
            return self.mde(e.se, e.df)
        crit = (e.hi - e.lo) / (2 * e.se) if e.se > 0 and math.isfinite(e.hi - e.lo) else None
        return self.mde(e.se, None, crit)

    def test(self, claim: str, part: str | None = None) -> Test:
        entry = self.raw["claims"][claim]
        if part is None:
            return _test(f"claims.{claim}", entry)
        fields = {k: v for k, v in entry.items() if k not in ("parts", "regime")}
        return _test(f"claims.{claim}.parts.{part}", {**fields, **entry["parts"][part]})

    def parts(self, claim: str) -> list[str]:
        return list(self.raw["claims"][claim]["parts"])

    def premise(self, claim: str) -> Test:
        return _test(f"claims.{claim}.premise", self.raw["claims"][claim]["premise"])

    def regime(self, claim: str) -> tuple[str, ...]:
        """The preconditions the claim reads (:data:`REGIME_GATES` names)."""
        return tuple(self.raw["claims"][claim].get("regime") or ())


def _test(key: str, d: Mapping[str, Any]) -> Test:
    def num(k: str) -> float | None:
        return None if d.get(k) is None else float(d[k])
    return Test(key=key, statistic=str(d.get("statistic", "")), test=str(d.get("test", "")),
                interval=str(d.get("interval", "")), source=str(d.get("source", "")),
                sign=int(d.get("sign", 0)), theta=num("theta"), margin=num("margin"),
                gamma=num("gamma"), seed=str(d.get("seed", "")),
                seed_metric=None if d.get("seed_metric") is None else str(d["seed_metric"]),
                undecidable=None if d.get("undecidable") is None else str(d["undecidable"]))


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
    theta on the side of ``sign``; the interval is one its statistic may have; a seed
    ``added`` names the replicates' metric."""
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
    bits = t.key.split(".")
    allowed = INTERVALS.get((bits[1], bits[3] if len(bits) > 3 else None),
                            INTERVALS.get((bits[1], None)))
    if allowed is not None and t.interval not in allowed:
        fail(f"{t.key}.interval", f"{t.interval!r} is not one of "
                                  f"{', '.join(map(repr, allowed))}")
    if t.seed and t.seed not in SEED_WAYS:
        fail(f"{t.key}.seed", f"{t.seed!r} is not one of {', '.join(SEED_WAYS)}")
    if t.seed == "added" and not t.seed_metric:
        fail(f"{t.key}.seed_metric", "a seed spread 'added' needs the replicates' metric "
                                     "'seed_metric' (a summary column)")
    if t.seed != "added" and t.seed_metric:
        fail(f"{t.key}.seed_metric", "only a seed spread 'added' takes a metric")


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
    """An estimate with the interval its verdict reads (``lo``, ``hi``), the standard error its
    minimum detectable effect uses, the degrees of freedom of its quantile (None: normal or
    a bootstrap's own) and ``at``: the same estimate's interval at another one-sided level
    (a part of a claim of several parts is contradicted on its Bonferroni interval)."""
    est: float
    lo: float
    hi: float
    se: float
    df: float | None = None
    at: Callable[[float], "Estimate"] | None = field(default=None, compare=False, repr=False)

    def fmt(self, digits: int = 3) -> str:
        return f"{self.est:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"

    def level(self, alpha: float) -> "Estimate":
        """This estimate with its interval of two-sided level 1 - 2 ``alpha``."""
        if self.at is None:
            raise ValueError("this estimate has no interval at another level")
        return self.at(alpha)


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
    return Estimate(float(d), float(lo), float(hi), float(se),
                    at=lambda a: rate_difference(p1, n1, p2, n2, a))


def paired_accuracy_difference(n10: int, n01: int, n: int, alpha: float = 0.025) -> Estimate:
    """Accuracy of model A minus model B on the same n test images, with Tango's score interval
    for paired binary data of level 1 - 2 alpha (:func:`atat.analysis.stats.intervals.
    tango_paired`; n10 images only A gets right, n01 only B)."""
    from atat.analysis.stats.intervals import tango_paired

    d, lo, hi, se = tango_paired(n10, n01, n, alpha)
    return Estimate(float(d), float(lo), float(hi), float(se),
                    at=lambda a: paired_accuracy_difference(n10, n01, n, a))


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
        return Estimate(float(d), float(lo), float(hi), float(se), at=self.newcombe)


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
                        math.inf, float("nan"), at=lambda a: paired_class_difference(pairs, a))
    return Estimate(*(float(v) for v in paired_t(pairs.d, alpha)), df=float(pairs.k - 1),
                    at=lambda a: paired_class_difference(pairs, a))


def welch(a: Any, b: Any, alpha: float, log_ratio: bool = False) -> tuple[np.ndarray, ...]:
    """mean(a) - mean(b) -- or ln(mean(a) / mean(b)) with ``log_ratio`` (delta method) -- with
    Welch's t interval of two-sided level 1 - 2 alpha and its standard error, over the last
    axis (vectorised over the others)."""
    est, se, df = _welch_parts(a, b, log_ratio)
    q = _t(1.0 - alpha, df)
    return est, est - q * se, est + q * se, se


def _welch_parts(a: Any, b: Any, log_ratio: bool) -> tuple[np.ndarray, ...]:
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
    return est, se, df


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
    est, lo, hi, se = (float(v) for v in welch(a, b, alpha, log_ratio))
    df = float(_welch_parts(a, b, log_ratio)[2])
    return Estimate(est, lo, hi, se, df=df if math.isfinite(df) else None,
                    at=lambda x: mean_difference(a, b, x, log_ratio))


def normal_estimate(est: float, se: float, alpha: float, df: float | None = None) -> Estimate:
    """est +- q se, q the z (or, with ``df``, Student t) quantile 1 - alpha."""
    finite = df is not None and np.isfinite(df)
    q = float(_t(1.0 - alpha, df)) if finite else _z(1.0 - alpha)
    return Estimate(float(est), float(est - q * se), float(est + q * se), float(se),
                    df=float(df) if finite else None,
                    at=lambda a: normal_estimate(est, se, a, df))


def bootstrap_estimate(est: float, se: float, t_draws: Any, alpha: float) -> Estimate:
    """The bootstrap-t interval of level 1 - 2 alpha: [est - q_{1-alpha} se, est - q_alpha se],
    q the quantiles of the studentized bootstrap draws ``t_draws`` (Efron & Tibshirani 1993,
    ch. 12; :func:`atat.analysis.stats.regression.beta_bootstrap_t`)."""
    t = np.asarray(t_draws, float)
    t = t[np.isfinite(t)]
    if t.size < 10:
        return Estimate(float(est), -math.inf, math.inf, float(se))
    q_lo, q_hi = np.quantile(t, [alpha, 1.0 - alpha])
    return Estimate(float(est), float(est - q_hi * se), float(est - q_lo * se), float(se),
                    at=lambda a: bootstrap_estimate(est, se, t, a))


def seed_df(s2: Any, v: Any, df: float) -> Any:
    """Degrees of freedom of the seed's variance s2 - v (s2 estimated on ``df`` degrees of
    freedom, v known): Satterthwaite's df (s2 - v)^2 / s2^2, at least 1 so that the quantile
    stays finite where the seed's share is small (vectorised)."""
    s2, v = np.asarray(s2, float), np.asarray(v, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(s2 > 0, np.maximum(s2 - v, 0.0) / s2, 0.0)
    return np.maximum(df * share ** 2, 1.0)


@dataclass(frozen=True)
class SeedSpread:
    """The seed's variance of a metric, from the causal experiment's replicates (same cell and
    recipe, other seeds; :meth:`Inputs.seed_spread`): s2, the variance pooled within the two
    arms (``df`` = replicates - 2 degrees of freedom); ``v``, the mean binomial sampling
    variance p (1 - p) / n a replicate's rate carries (0 for a metric that is not a rate);
    ``var_seed`` = max(0, s2 - v) with :func:`seed_df` degrees of freedom; ``var_difference``
    = 2 var_seed, what a difference of two single-seed models adds (for AT-AT against a
    baseline: its arm's and the control arm's variance, s2 being their mean)."""
    metric: str
    n: int
    df: int
    s2: float
    v: float

    @property
    def var_seed(self) -> float:
        return max(0.0, self.s2 - self.v)

    @property
    def var_difference(self) -> float:
        return 2.0 * self.var_seed

    @property
    def df_seed(self) -> float:
        return float(seed_df(self.s2, self.v, self.df))

    def note(self) -> str:
        return (f"{self.metric}: s2 {self.s2:.3g} over {self.n} replicates less binomial "
                f"{self.v:.3g} -> SD of a single-seed difference "
                f"{math.sqrt(self.var_difference):.3g}, t({self.df_seed:.3g})")


def with_seed(e: Estimate, var: float, df: float, alpha: float) -> Estimate:
    """``e`` with a seed's variance ``var`` (of the difference) added: each end moved out as the
    square root of its squared distance plus (t_{1-alpha, df} sqrt(var))^2 (the square-and-add
    of Newcombe's method 10 and of Zou & Donner's MOVER, 2008, for a sum of independent
    parts); standard error sqrt(se^2 + var), Welch-Satterthwaite degrees of freedom."""
    if var <= 0:
        return Estimate(e.est, e.lo, e.hi, e.se, e.df,
                        at=lambda a: with_seed(e.level(a), var, df, a))
    half = float(_t(1.0 - alpha, df)) * math.sqrt(var)
    lo = e.est - math.sqrt((e.est - e.lo) ** 2 + half ** 2)
    hi = e.est + math.sqrt((e.hi - e.est) ** 2 + half ** 2)
    se2 = (e.se if math.isfinite(e.se) else 0.0) ** 2
    base_df = e.df if e.df is not None and math.isfinite(e.df) else math.inf
    dof = (se2 + var) ** 2 / ((se2 ** 2 / base_df if math.isfinite(base_df) else 0.0)
                              + var ** 2 / df)
    return Estimate(e.est, lo, hi, math.sqrt(se2 + var), dof,
                    at=lambda a: with_seed(e.level(a), var, df, a))


def with_seed_arrays(lo: Any, est: Any, hi: Any, var: Any, df: Any, alpha: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`with_seed`'s ends, vectorised (the simulations)."""
    half = _t(1.0 - alpha, np.asarray(df, float)) * np.sqrt(np.asarray(var, float))
    est = np.asarray(est, float)
    return (est - np.sqrt((est - np.asarray(lo, float)) ** 2 + half ** 2),
            est + np.sqrt((np.asarray(hi, float) - est) ** 2 + half ** 2))


# ------------------------------------------------------------------------------ verdicts
def verdicts(t: Test, lo: Any, hi: Any, lo_k: Any = None, hi_k: Any = None) -> np.ndarray:
    """The verdict of test ``t`` for each interval [lo, hi] (vectorised; a non-finite end is
    not testable). ``lo_k``, ``hi_k``: the wider interval a part of a claim of K parts is
    contradicted (or found smaller than the paper's) on -- its Bonferroni interval of level
    1 - 2 alpha / K; support is read off [lo, hi] (an intersection-union test needs no
    correction)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    lo_k = lo if lo_k is None else np.asarray(lo_k, float)
    hi_k = hi if hi_k is None else np.asarray(hi_k, float)
    out = np.full(np.broadcast(lo, hi, lo_k, hi_k).shape, TOO_WEAK, dtype=object)
    if t.test == "equivalence":
        m = float(t.margin)
        out[(lo > -m) & (hi < m)] = SUPPORTED
        out[(lo_k > m) | (hi_k < -m)] = CONTRADICTED
    else:
        # coordinates in which the paper's (directional) or the forbidden (non-inferiority)
        # side is positive
        low, up = (lo, hi) if t.sign > 0 else (-hi, -lo)
        low_k, up_k = (lo_k, hi_k) if t.sign > 0 else (-hi_k, -lo_k)
        if t.test == "non_inferiority":
            m = float(t.margin)
            out[up < m] = SUPPORTED
            out[low_k > m] = CONTRADICTED
        else:
            out[low > 0] = SUPPORTED
            if t.test == "directional":
                out[up_k < abs(float(t.theta)) / 2] = SMALLER
            out[up_k < 0] = CONTRADICTED
    out[~(np.isfinite(lo) & np.isfinite(hi) & np.isfinite(lo_k) & np.isfinite(hi_k))] = \
        NOT_TESTABLE
    return out


def contradiction_level(t: Test, alpha: float, k: int = 1) -> float:
    """The one-sided level of the interval a part of a claim of ``k`` parts is contradicted
    (or found smaller than the paper's) on: alpha / k (Bonferroni over the parts), halved
    again for an equivalence part, which is contradicted on either side (two one-sided
    rejections, each at alpha / 2k, so the pair stays at alpha / k whatever the interval's
    width against the margin)."""
    return alpha / (k * (2 if t.test == "equivalence" else 1))


def verdict(t: Test, e: Estimate | None, alpha: float | None = None, k: int = 1) -> str:
    """The verdict of one part: ``e``'s interval, and for contradiction its interval at
    :func:`contradiction_level` (a part of a claim of ``k`` parts; :func:`verdicts`). A part
    the plan declared undecidable is never read (one without an estimate is not testable)."""
    if e is None:
        return NOT_TESTABLE
    if t.undecidable:
        return UNDECIDABLE
    level = contradiction_level(t, alpha, k) if alpha is not None else None
    wide = e.level(level) if level is not None and level < alpha else e
    return str(verdicts(t, e.lo, e.hi, wide.lo, wide.hi)[()])


#: The order in which the verdicts of parts decide a claim of several parts.
_PRIORITY = (CONTRADICTED, SMALLER, NOT_TESTABLE, UNDECIDABLE, TOO_WEAK, PREMISE_NOT_MET)


def combine(parts: Iterable[str], premise: str | None = None) -> str:
    """The verdict of a claim of several parts (intersection-union): the premise first (not
    supported: ``premise not met``), then a contradicted part, a part smaller than the
    paper's, an untestable part, a part undecidable by design, a part too weak to say;
    supported only if every part is."""
    if premise is not None and premise != SUPPORTED:
        return NOT_TESTABLE if premise == NOT_TESTABLE else PREMISE_NOT_MET
    vs = list(parts)
    if not vs:
        return NOT_TESTABLE
    for v in _PRIORITY:
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
    regime: str = ""
    seed: str = ""
    #: the parts the verdict was read from (premise first, named "premise"); not a column
    parts: list["Part"] = field(default_factory=list, repr=False)
    #: gate -> "pass" / "FAIL" / "not checked" (the claims.md regime table); not a column
    gates: dict[str, str] = field(default_factory=dict, repr=False)
    #: the failed checks, "<experiment> <check> <model>: <value> vs <threshold>"; not a column
    failed_checks: list[str] = field(default_factory=list, repr=False)


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
    #: the claim's parts K and the plan's alpha (its contradiction reads level 1 - 2 alpha/K)
    k: int = 1
    alpha: float = 0.05
    #: the interval before the seed's spread was added (None: nothing added)
    base: Estimate | None = None
    seed_note: str = ""

    def verdict(self) -> str:
        return verdict(self.test, self.est, self.alpha, self.k)

    def text(self) -> str:
        if self.est is None:
            return f"{self.name}: {self.why}" if self.name else self.why
        return (f"{self.name}: " if self.name else "") + self.short()

    def short(self) -> str:
        """The estimate, its interval(s) and the part's verdict, without the name."""
        if self.est is None:
            return "n/a" + (f" ({self.why})" if self.why else "")
        v = self.verdict()
        notes = [significance_note(self.test, self.est)] if v == SMALLER else []
        if self.base is not None and (self.base.lo, self.base.hi) != (self.est.lo, self.est.hi):
            notes.append(f"sampling alone {self.base.fmt(self.digits)}")
        level = contradiction_level(self.test, self.alpha, self.k)
        if level < self.alpha and v in (CONTRADICTED, SMALLER):
            wide = self.est.level(level)
            notes.append(f"on its {100 * (1 - 2 * level):.3g}% Bonferroni interval over "
                         f"{self.k} parts {wide.fmt(self.digits)}")
        return f"{self.est.fmt(self.digits)} ({v}" + "".join(f", {n}" for n in notes) + ")"


def _seed_text(parts: Sequence[Part]) -> str:
    notes = list(dict.fromkeys(p.seed_note for p in parts if p.seed_note))
    return "; ".join(notes)


def judge(c: Claim, plan: AnalysisPlan, parts: Sequence[Part], premise: Part | None = None,
          extra: Sequence[str] = ()) -> None:
    """Fill the test, threshold, run, verdict, mde and seed columns of ``c`` from its parts
    (K = len(parts) for the Bonferroni interval of a contradicting part)."""
    k = plan.family(len(parts))
    for p in parts:
        p.k, p.alpha = k, plan.alpha
    if premise is not None:
        premise.alpha = plan.alpha
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
                      + f"{plan.mde_of(p.est):.3g}"
                      for p in parts if p.est is not None and np.isfinite(p.est.se))
    c.verdict = combine([p.verdict() for p in parts],
                        premise.verdict() if premise is not None else None)
    c.parts = ([dataclasses.replace(premise, name="premise")] if premise is not None else []) \
        + list(parts)
    c.seed = _seed_text(([premise] if premise is not None else []) + list(parts))


# ------------------------------------------------------------------------------ the regime
@dataclass(frozen=True)
class Reads:
    """What a claim reads, for its regime gates: the cells (dataset, architecture), the
    AutoAttack epsilons (tags) and the models (preconditions' model names) -- with the ones
    whose defense evaluates at random by design."""
    cells: tuple[tuple[str, str], ...]
    eps: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    stochastic: tuple[str, ...] = ()

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for d, _ in self.cells))


def _passed(v: Any) -> bool | None:
    s = str(v).strip().lower()
    return True if s in ("true", "1", "1.0") else False if s in ("false", "0", "0.0") else None


def _fmt_value(v: Any) -> str:
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)


def regime_of(pc: pd.DataFrame | None, gates: Sequence[str], reads: Reads
              ) -> tuple[dict[str, str], list[str], list[str]]:
    """The claim's gates against the preconditions table ``pc``: (gate -> "pass" / "FAIL" /
    "not checked", the failed checks as "<experiment> <check> <model>: <value> vs
    <threshold>", the gates without a judged row). A row with ``passed`` empty is reported
    only, not a check; a missing row is never a pass."""
    from atat.analysis.preconditions import cell_prefix

    status: dict[str, str] = {}
    failed: list[str] = []
    unchecked: list[str] = []
    prefixes = tuple(cell_prefix(d, a) for d, a in reads.cells)
    for gate in gates:
        experiment, check = REGIME_GATES[gate]
        rows = pd.DataFrame() if pc is None or pc.empty else pc[pc["experiment"] == experiment]
        if len(rows) and check is not None:
            checks = [f"{check}{e}" for e in reads.eps] if gate == "autoattack" else [check]
            rows = rows[rows["check"].astype(str).isin(checks)]
        if len(rows):
            model = rows["model"].astype(str)
            if gate == "evaluation_model":
                rows = rows[model.isin(reads.datasets)]
            elif gate == "determinism":
                rows = rows[model.isin(reads.models)]
            elif gate != "attack_regime":
                rows = rows[model.str.startswith(prefixes)] if prefixes else rows.iloc[:0]
        judged = [(r, _passed(r["passed"])) for _, r in rows.iterrows()]
        judged = [(r, p) for r, p in judged if p is not None]
        if not judged:
            status[gate] = "not checked"
            unchecked.append(gate)
            continue
        bad = [r for r, p in judged if p is False
               and not (gate == "determinism" and str(r["model"]) in reads.stochastic)]
        status[gate] = "FAIL" if bad else "pass"
        failed += [f"{r['experiment']} {r['check']} {r['model']}: {_fmt_value(r.get('value'))} "
                   f"vs {r.get('threshold')}" for r in bad]
    return status, failed, unchecked


def apply_regime(c: Claim, inp: "Inputs", claim_key: str, reads: Reads) -> None:
    """The plan's regime gates of ``claim_key`` on ``c``: a failed one makes the verdict
    ``not in the paper's regime`` (the regime column names the check, value vs threshold, and
    starts with the verdict as measured); gates without rows say ``regime not checked``."""
    gates = inp.plan.regime(claim_key)
    if not gates:
        c.regime = "no precondition read"
        return
    status, failed, unchecked = regime_of(inp.preconditions, gates, reads)
    c.gates, c.failed_checks = status, failed
    passed = [g for g, s in status.items() if s == "pass"]
    bits = []
    if failed:
        bits.append("FAILED: " + "; ".join(failed))
    if passed:
        bits.append("passed: " + ", ".join(passed))
    if unchecked:
        bits.append("regime not checked: " + ", ".join(unchecked) + " (no rows)")
    if failed:   # what the run measured stays visible beside the gate that overrules it
        bits.insert(0, f"as measured: {c.verdict}")
    c.regime = "; ".join(bits)
    if failed:
        c.verdict = NOT_IN_REGIME


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
    #: per-test-image predictions of the models §6 compares (results/models/<dataset>/<arch>/
    #: <defense>/seed<s>/test_predictions.csv), with columns dataset, architecture, defense,
    #: seed added
    test_predictions: pd.DataFrame | None = None
    #: the regressions' specifications by name (config/regressions.yaml expanded): the Beta
    #: fits a bootstrap interval refits
    specs: Mapping[str, Mapping[str, Any]] | None = None
    #: cache of the Beta bootstraps (spec or "causal" -> its draws)
    boot: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

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

    def first_model(self, defense: str) -> pd.Series | None:
        """The summary row of the grid's first-seed model of ``defense`` in this cell."""
        s = self.summary
        rows = s[(s["dataset"] == self.dataset) & (s["architecture"] == self.architecture)
                 & (s["defense"] == defense)]
        if "treatment" in rows:
            rows = rows[rows["treatment"].isna()]
        rows = rows.sort_values("seed")
        return None if rows.empty else rows.iloc[0]

    def model_name(self, defense: str) -> str | None:
        """The preconditions' name of the first-seed model of ``defense`` in this cell."""
        r = self.first_model(defense)
        return None if r is None else \
            f"{self.dataset}/{self.architecture}/{defense}/seed{int(r['seed'])}"

    def test_accuracy(self, defense: str) -> tuple[float, int] | None:
        """(test accuracy, test images) of the grid's first-seed model of ``defense`` in this
        cell (summary columns test_acc, n_test); None where either is missing."""
        r = self.first_model(defense)
        if r is None or "n_test" not in r or "test_acc" not in r or pd.isna(r["n_test"]) \
                or pd.isna(r["test_acc"]):
            return None
        return float(r["test_acc"]), int(r["n_test"])

    def predictions(self, defense: str) -> pd.DataFrame | None:
        """The per-test-image predictions of the grid's first-seed model of ``defense`` in
        this cell (sorted by index), None where they are not among the inputs."""
        p, r = self.test_predictions, self.first_model(defense)
        if p is None or p.empty or r is None:
            return None
        rows = p[(p["dataset"] == self.dataset) & (p["architecture"] == self.architecture)
                 & (p["defense"] == defense) & (p["seed"] == int(r["seed"]))]
        return None if rows.empty else rows.sort_values("index")

    def seed_spread(self, metric: str) -> SeedSpread | None:
        """The seed's variance of ``metric`` (a summary column) among the causal experiment's
        replicates (:class:`SeedSpread`); None without two replicates in an arm."""
        s = self.summary
        if "treatment" not in s or metric not in s:
            return None
        reps = s[s["treatment"].notna()]
        causal = self.config.get("causal") or {}
        if causal.get("dataset"):
            reps = reps[(reps["dataset"] == causal["dataset"])
                        & (reps["architecture"] == causal["architecture"])]
        reps = reps[reps[metric].notna()]
        arms = [g[metric].astype(float) for _, g in reps.groupby("treatment")]
        df = sum(len(a) - 1 for a in arms if len(a) > 1)
        if df < 1:
            return None
        s2 = sum((len(a) - 1) * a.var(ddof=1) for a in arms if len(a) > 1) / df
        count = ("n_test" if metric == "test_acc" else
                 metric.rsplit("_", 1)[0] + "_n_images" if metric.endswith(("_attacc1",
                                                                             "_attacc5"))
                 else None)
        v = 0.0
        if count is not None and count in reps and reps[count].notna().all():
            p, n = reps[metric].astype(float), reps[count].astype(float)
            v = float(np.mean(p * (1 - p) / n))
        return SeedSpread(metric, len(reps), int(df), float(s2), v)

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


def _seeded(inp: Inputs, t: Test, e: Estimate | None) -> tuple[Estimate | None, str]:
    """The part's estimate with the seed's spread as the plan says (:data:`SEED_WAYS`), and
    the note the seed column shows."""
    if t.seed == "residuals":
        return e, "in the regression's residuals (each model one seed)"
    if t.seed == "replicates":
        return e, "over the causal replicates' seeds (the interval's units)"
    if t.seed == "not measured":
        return e, ("not measured by any replicate: the interval speaks of these trained "
                   "models")
    if t.seed != "added":
        return e, ""
    spread = inp.seed_spread(str(t.seed_metric))
    if spread is None:
        return e, (f"added, but not measured in this run (no causal replicates with "
                   f"{t.seed_metric}): the interval speaks of these trained models")
    note = f"added ({spread.note()})"
    if e is None:
        return None, note
    return with_seed(e, spread.var_difference, spread.df_seed, inp.plan.alpha), note


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
    pooled rates) or :func:`paired_class_difference` of the per-image rows."""
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


def _accuracy_vs(inp: Inputs, a: str, b: str, t: Test) -> tuple[Estimate | None, str]:
    """Test accuracy of ``a`` minus ``b`` (the grid's first-seed models of the cell) with the
    plan's interval: Tango's paired score interval over their per-test-image predictions (the
    same test images, in the same order: checked), or Newcombe's of the two rates."""
    if t.interval == ACC_NEWCOMBE:
        ma, mb = inp.test_accuracy(a), inp.test_accuracy(b)
        if ma is None or mb is None:
            return None, "test accuracy or its n_test missing"
        return rate_difference(ma[0], ma[1], mb[0], mb[1], inp.plan.alpha), ""
    pa, pb = inp.predictions(a), inp.predictions(b)
    missing = [inp.model_name(d) or d for d, p in ((a, pa), (b, pb)) if p is None]
    if missing:
        return None, ("per-test-image predictions (test_predictions.csv) missing for "
                      + ", ".join(missing))
    ia, ib = pa["index"].to_numpy(), pb["index"].to_numpy()
    if len(ia) != len(ib) or (ia != ib).any() or \
            (pa["label"].to_numpy() != pb["label"].to_numpy()).any():
        raise ValueError(f"{inp.model_name(a)} and {inp.model_name(b)}: their test "
                         "predictions are not over the same test images (index and label "
                         "differ); a paired accuracy difference needs one test split")
    from atat.analysis.stats.intervals import paired_counts

    n10, n01, n = paired_counts(pa["correct"].to_numpy(), pb["correct"].to_numpy())
    return paired_accuracy_difference(n10, n01, n, inp.plan.alpha), ""


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


def _part(inp: Inputs, name: str, t: Test, est: Estimate | None, why: str = "", **kw: Any
          ) -> Part:
    """A :class:`Part` with the seed's spread entering its interval as the plan says."""
    seeded, note = _seeded(inp, t, est)
    return Part(name, t, seeded, why, base=est if seeded is not est else None,
                seed_note=note, **kw)


def _cell_reads(inp: Inputs) -> Reads:
    return Reads(cells=((inp.dataset, inp.architecture),))


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
        premise = _part(inp, "PPA AttAcc@1 minus NoDef's", t_prem, att,
                        "PPA of NoDef or the defense missing", pairs=pairs)
        ratio, why = _hsic_ratio(inp, d, nodef)
        part = _part(inp, "ln HSIC(X,Z) ratio to NoDef's", plan.test("hsic", "hsic"), ratio,
                     why, digits=4)
        judge(c, plan, [part], premise)
        c.basis = f"{_rate_name(t_prem)} (premise); Welch t on the log ratio of mean " \
                  "per-batch HSIC (mean over layers)"
        apply_regime(c, inp, "hsic", _cell_reads(inp))
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
        _part(inp, f"ln HSIC(X,Z) ratio {_lab(star)} / BiDO",
              plan.test("hsic_bido_star", "hsic"), ratio, why, digits=4),
        _part(inp, "PPA AttAcc@1 minus BiDO's", t_att, att, "PPA of BiDO or BiDO** missing",
              pairs=pairs)])
    c.basis = f"Welch t on the HSIC log ratio, {_rate_name(t_att)} on AttAcc@1; both parts " \
              "must hold"
    apply_regime(c, inp, "hsic_bido_star", _cell_reads(inp))
    return [c]


def _permuted_claim(inp: Inputs, nodef: str) -> list[Claim]:
    from atat.analysis.paper import permuted_defenses

    out = []
    for d in permuted_defenses(inp.config):
        c = Claim(f"permuted_{d}", "§3 (2), Table 2",
                  "a model that rote-memorises permuted labels leaks less: larger PPA "
                  "delta_face (L2 to the nearest training image) than NoDef",
                  "train acc. > 99.4%; reconstructions collapse (high L2)")
        a, b = inp.classes(d, "ppa", "dist_face"), inp.classes(nodef, "ppa", "dist_face")
        est = (mean_difference(a, b, inp.plan.alpha) if a.size >= 2 and b.size >= 2
               else None)
        judge(c, inp.plan, [_part(inp, "", inp.plan.test("permuted"), est,
                                  "PPA per-image distances missing")])
        c.basis = "Welch t over per-class means"
        apply_regime(c, inp, "permuted", _cell_reads(inp))
        out.append(c)
    return out


def _unseen_pixels_claim(inp: Inputs) -> list[Claim]:
    roles = section3_roles(inp.config)
    out = []
    for d in roles["Unseen-Pixels"]:
        for base in roles["NoDef (early-stopped)"]:
            c = Claim(f"unseen_pixels_{d}", "§3 (3), Table 3",
                      "a model that never saw > 97% of the pixels is not more private (PPA "
                      "AttAcc@1) than NoDef of about its accuracy (early-stopped) beyond the "
                      "margin", "> 50% AttAcc@1; only marginally more private than NoDef-ES")
            t = inp.plan.test("unseen_pixels")
            att, pairs = _rate_vs(inp, d, base, "ppa", t)
            judge(c, inp.plan, [_part(inp, "PPA AttAcc@1 minus NoDef-ES's", t, att,
                                      "PPA of Unseen-Pixels or NoDef-ES missing",
                                      pairs=pairs)])
            c.basis = _rate_name(t)
            apply_regime(c, inp, "unseen_pixels", _cell_reads(inp))
            out.append(c)
    return out


def _tidy_rows(inp: Inputs, spec: str) -> pd.DataFrame:
    t = inp.tidy
    return pd.DataFrame() if t is None else t[t["spec"] == spec]


def _term(inp: Inputs, spec: str, term: str, t: Test | None = None
          ) -> tuple[Estimate | None, str]:
    """The OLS coefficient ``term`` of ``spec`` with the interval the plan names at its level:
    t(df_resid) with the fit's (HC2) standard error, or HC3 with Bell-McCaffrey degrees of
    freedom (columns se_hc3, df_bm_hc3); None and why."""
    rows = _tidy_rows(inp, spec)
    if rows.empty:          # no regressions in this run (an empty frame has no columns)
        return None, f"{spec} not fitted"
    r = rows[(rows["term"] == term) & (rows["status"] == "ok")]
    if r.empty:
        reason = rows["reason"].iloc[0] if "reason" in rows and \
            isinstance(rows["reason"].iloc[0], str) and rows["reason"].iloc[0] else "no estimate"
        return None, f"not fitted ({reason})"
    r = r.iloc[0]
    if t is not None and t.interval == OLS_HC3_BM:
        if any(k not in r or pd.isna(r[k]) for k in ("se_hc3", "df_bm_hc3")):
            return None, (f"{spec}: no HC3 standard error with Bell-McCaffrey degrees of "
                          "freedom (a regressions table of an older fit, or a leverage of 1): "
                          "rerun rule regressions")
        return normal_estimate(float(r["estimate"]), float(r["se_hc3"]), inp.plan.alpha,
                               float(r["df_bm_hc3"])), ""
    df = float(r["df_resid"]) if "df_resid" in r and pd.notna(r["df_resid"]) else None
    return normal_estimate(float(r["estimate"]), float(r["se"]), inp.plan.alpha, df), ""


def _eps(term: str) -> str:
    return term.split("eps")[1]


def _ols_name(t: Test) -> str:
    return "HC3 SEs with Bell-McCaffrey df" if t.interval == OLS_HC3_BM else \
        "t(n-k) with HC2 SEs"


def _sample_cells(inp: Inputs, spec_name: str) -> tuple[tuple[str, str], ...]:
    """The cells whose models a regression's sample holds (the regressions' own
    select_sample); without the specifications, every grid cell of the summary."""
    s = inp.summary
    grid = s[s["treatment"].isna()] if "treatment" in s else s
    if inp.specs and spec_name in inp.specs:
        from atat.analysis.stats.regression import SpecSkipped, select_sample
        try:
            grid, _ = select_sample(grid, inp.specs[spec_name])
        except SpecSkipped:
            pass
    return tuple(sorted({(str(d), str(a)) for d, a in zip(grid["dataset"],
                                                         grid["architecture"])}))


def _eps_tags(inp: Inputs, claim: str) -> tuple[str, ...]:
    return tuple(_eps(p) for p in inp.plan.parts(claim))


def _tradeoff_claims(inp: Inputs) -> list[Claim]:
    plan = inp.plan
    out = []
    eps_all = _eps_tags(inp, "tradeoff")
    for table, attack, claim, paper in (
            ("T15", "ppa", "generic defenses: PPA AttAcc@1 rises with robust accuracy at each "
             "epsilon (test acc. controlled), by about the paper's amount",
             "significant at all eps; R2 0.93-0.95 (joint OLS)"),
            ("T18", "ifgmi", "generic defenses: IF-GMI AttAcc@1 rises with robust accuracy at "
             "each epsilon, by about the paper's amount", "significant at all eps; R2 0.93-0.95")):
        c = Claim(f"tradeoff_{attack}", "§4, Table 5, App. G", claim, paper)
        parts = []
        for term in plan.parts("tradeoff"):
            t = plan.test("tradeoff", term)
            est, why = _term(inp, f"{table}_{attack}_generic_eps{_eps(term)}_ols", term, t)
            parts.append(_part(inp, f"eps {_eps(term)}", t, est, why))
        joint = _tidy_rows(inp, f"{table}_{attack}_generic_joint_ols")
        ok = joint[joint["status"] == "ok"] if len(joint) else joint
        extra = [f"joint OLS R2 {float(ok['r2'].iloc[0]):.2f} (n {int(ok['n'].iloc[0])})"] \
            if len(ok) else []
        judge(c, plan, parts, extra=extra)
        c.basis = (c.basis + "; " if c.basis else "") + \
            "robust-accuracy slope of each single-eps OLS (test acc. + robust acc.), " \
            f"{_ols_name(parts[0].test)}; every eps must hold"
        apply_regime(c, inp, "tradeoff", Reads(
            _sample_cells(inp, f"{table}_{attack}_generic_joint_ols"), eps_all))
        out.append(c)
    # clean accuracy adds little once robust accuracy is known (joint model)
    c = Claim("clean_acc_ppa", "§4, Table 5", "clean test accuracy is weakly or insignificantly "
              "related to PPA AttAcc@1 once robust accuracy is controlled (joint OLS): its "
              "slope lies within the margin", "weak or insignificant")
    t = plan.test("clean_acc")
    est, why = _term(inp, "T15_ppa_generic_joint_ols", "test_acc", t)
    judge(c, plan, [_part(inp, "test_acc slope", t, est,
                          why or "T15_ppa_generic_joint_ols not fitted")])
    c.basis = (c.basis + "; " if c.basis else "") + _ols_name(t)
    apply_regime(c, inp, "clean_acc", Reads(_sample_cells(inp, "T15_ppa_generic_joint_ols"),
                                            eps_all))
    out.append(c)
    # gradient-suppressing defenses: the tradeoff does not hold
    c = Claim("tradeoff_gradient", "§4, Tables 16/19", "gradient-suppressing defenses do not "
              "follow the tradeoff: at each epsilon and attack the robust-accuracy slope stays "
              "below half the generic defenses' (theta_P/2)", "the tradeoff does not hold")
    parts = []
    for table, attack in (("T16", "ppa"), ("T19", "ifgmi")):
        for term in plan.parts("tradeoff_gradient"):
            t = plan.test("tradeoff_gradient", term)
            est, why = _term(inp, f"{table}_{attack}_gradient_eps{_eps(term)}_ols", term, t)
            parts.append(_part(inp, f"{attack.upper()} eps {_eps(term)}", t, est, why))
    judge(c, plan, parts)
    c.basis = (c.basis + "; " if c.basis else "") + \
        f"the single-eps OLS of Tables 16/19, {_ols_name(parts[0].test)}; every slope must hold"
    apply_regime(c, inp, "tradeoff_gradient", Reads(
        _sample_cells(inp, "T16_ppa_gradient_joint_ols"), _eps_tags(inp, "tradeoff_gradient")))
    out.append(c)
    return out


def _beta_bootstrap(inp: Inputs, key: str, y: Any, X: pd.DataFrame) -> dict[str, Any]:
    """:func:`atat.analysis.stats.regression.beta_bootstrap_t` of a Beta fit, once per
    ``key`` (the plan's draws and seed)."""
    from atat.analysis.stats.regression import beta_bootstrap_t

    if key not in inp.boot:
        draws, seed = inp.plan.bootstrap
        out = beta_bootstrap_t(np.asarray(y, float), np.asarray(X, float), draws, seed)
        out["names"] = list(X.columns)
        inp.boot[key] = out
    return inp.boot[key]


def _exog(res: Any) -> pd.DataFrame:
    """The mean model's design of a fitted statsmodels BetaModel, with its column names."""
    exog = np.asarray(res.model.exog, float)
    return pd.DataFrame(exog, columns=list(res.model.exog_names)[:exog.shape[1]])


def _cost_bootstrap(inp: Inputs, spec_name: str, term: str
                    ) -> tuple[Estimate | None, float | None, str]:
    """The Beta slope ``term`` of ``spec_name`` refitted from the summary (the regressions' own
    fit_spec) with its parametric bootstrap-t interval, and the fit's mean leakage."""
    from atat.analysis.stats.regression import SpecSkipped, fit_spec

    if not inp.specs or spec_name not in inp.specs:
        return None, None, (f"the bootstrap refits {spec_name}, and the regression "
                            "specifications (config/regressions.yaml) are not among the inputs")
    try:
        fit = fit_spec(inp.summary, inp.specs[spec_name])
        res = fit["result"]
        X = _exog(res)
        boot = _beta_bootstrap(inp, spec_name, res.model.endog, X)
    except SpecSkipped as exc:
        return None, None, f"{spec_name} not fitted ({exc})"
    j = boot["names"].index(term)
    est = bootstrap_estimate(float(boot["theta"][j]), float(boot["se"][j]), boot["t"][:, j],
                             inp.plan.alpha)
    return est, float(fit["stats"]["response_mean"]), ""


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
        spec_name = str(r["spec"]) if r is not None and "spec" in r and pd.notna(r["spec"]) \
            else "T15_ppa_generic_joint_beta"
        reads = Reads(_sample_cells(inp, spec_name), _eps_tags(inp, "cost"))
        if t.interval == BETA_BOOT:
            est, mu, why = _cost_bootstrap(inp, spec_name, term)
        elif r is None or any(k not in r or not np.isfinite(float(r[k]))
                              for k in ("beta", "beta_ci_low", "beta_ci_high", "mu_bar")):
            note = "" if r is None or "note" not in r or pd.isna(r["note"]) else r["note"]
            est, mu, why = None, None, f"cost of privacy not computed {note}".strip()
        else:
            se = (float(r["beta_ci_high"]) - float(r["beta_ci_low"])) / (2 * z95)
            est, mu, why = normal_estimate(float(r["beta"]), se, plan.alpha), \
                float(r["mu_bar"]), ""
        if est is None:
            judge(c, plan, [_part(inp, "beta", t, None, why)])
            c.basis = "Beta slope of the joint Beta model"
            apply_regime(c, inp, "cost", reads)
            out.append(c)
            continue
        theta = 1.0 / (t.gamma * mu * (1 - mu))
        gamma = 1.0 / (est.est * mu * (1 - mu)) if est.est else float("nan")
        judge(c, plan, [_part(inp, "beta", t.with_theta(theta), est)],
              extra=[f"mean leakage {mu:.3f}, so theta_P = 1/(gamma_P mu(1-mu)) = "
                     f"{theta:.3g}", f"gamma {gamma:.2f}"])
        c.basis = (c.basis + "; " if c.basis else "") + \
            f"{t.interval} (the Beta slope, not the inverted gamma interval)"
        apply_regime(c, inp, "cost", reads)
        out.append(c)
    return out


def _causal_bootstrap(inp: Inputs) -> tuple[Estimate | None, str]:
    """tau of the causal Beta regression refitted from the summary's replicates with its
    parametric bootstrap-t interval."""
    from atat.analysis.stats.causal import causal_beta
    from atat.analysis.stats.regression import SpecSkipped

    s = inp.summary
    causal = inp.config.get("causal") or {}
    rows = s[s["treatment"].notna()] if "treatment" in s else s.iloc[:0]
    if causal.get("dataset"):
        rows = rows[(rows["dataset"] == causal["dataset"])
                    & (rows["architecture"] == causal["architecture"])]
    try:
        fit = causal_beta(rows, "ppa_attacc1")
    except SpecSkipped as exc:
        return None, f"skipped: {exc}"
    res = fit["result"]
    X = _exog(res)
    boot = _beta_bootstrap(inp, "causal", res.model.endog, X)
    j = boot["names"].index("treatment")
    return bootstrap_estimate(float(boot["theta"][j]), float(boot["se"][j]), boot["t"][:, j],
                              inp.plan.alpha), ""


def _causal_claim(inp: Inputs) -> list[Claim]:
    c = Claim("causal_atat", "§5, App. H, Table 21", "randomised AT-AT (treatment) lowers PPA "
              "AttAcc@1 against NoDef replicates (Beta regression), by about the paper's amount",
              "84% -> 6.5%, odds 77x lower, z = 38")
    t = inp.causal
    plan = inp.plan
    row = None if t is None else t[(t["model"] == "beta") & (t["response"] == "ppa_attacc1")]
    causal = inp.config.get("causal") or {}
    reads = Reads(((str(causal.get("dataset", inp.dataset)),
                    str(causal.get("architecture", inp.architecture))),))
    t_tau = plan.test("causal_atat")
    if row is None or row.empty or row["status"].iloc[0] != "ok":
        reason = ("no causal experiment" if row is None or row.empty
                  else f"skipped: {row['reason'].iloc[0]}")
        judge(c, plan, [_part(inp, "tau", t_tau, None, reason)])
        c.basis = reason
        apply_regime(c, inp, "causal_atat", reads)
        return [c]
    r = row.iloc[0]
    if t_tau.interval == BETA_BOOT:
        est, why = _causal_bootstrap(inp)
    else:
        est, why = normal_estimate(float(r["tau"]), float(r["tau_se"]), plan.alpha), ""
    judge(c, plan, [_part(inp, "tau", t_tau, est, why, digits=2)],
          extra=[f"{100 * r['mu0']:.1f}% -> {100 * r['mu1']:.1f}%, odds "
                 f"{r['odds_reduction']:.2f}x lower, z = {r['tau_stat']:.1f}, n = {int(r['n'])}"])
    c.basis = (c.basis + "; " if c.basis else "") + t_tau.interval
    apply_regime(c, inp, "causal_atat", reads)
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


def _atat_reads(inp: Inputs, defenses: Sequence[str]) -> Reads:
    """The cell and the compared models (their determinism rows; MID's random evaluation is
    its design, :data:`STOCHASTIC_AT_EVALUATION`)."""
    names, stochastic = [], []
    for d in defenses:
        name, r = inp.model_name(d), inp.first_model(d)
        if name is None:
            continue
        names.append(name)
        if r is not None and str(r.get("defense_type", d)) in STOCHASTIC_AT_EVALUATION:
            stochastic.append(name)
    return Reads(((inp.dataset, inp.architecture),), models=tuple(names),
                 stochastic=tuple(stochastic))


def _atat_vs_baselines_in(inp: Inputs, suffix: str) -> list[Claim]:
    """§6 as a Pareto statement, per attack: against each baseline, AT-AT's AttAcc@1 lower
    (directional) and its test accuracy not lower beyond the tolerance (non-inferiority);
    every baseline must be beaten (intersection-union; a part contradicts on its Bonferroni
    interval over the 2 x baselines parts)."""
    atat = "atat"
    plan = inp.plan
    t_att, t_acc = plan.test("atat", "attacc"), plan.test("atat", "accuracy")
    out = []
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
        reads = _atat_reads(inp, [atat, *baselines])
        me = inp.cell(atat, attack)
        if me is None or n == 0:
            c.basis = "AT-AT not attacked" if me is None else \
                "no baseline of the 7 attacked in this cell"
            apply_regime(c, inp, "atat", reads)
            out.append(c)
            continue
        k = plan.family(2 * n)
        per, texts, mdes = [], [], {"AttAcc@1": [], "accuracy": []}
        for b in baselines:
            att, pairs = _rate_vs(inp, atat, b, attack, t_att)
            acc, why = _accuracy_vs(inp, atat, b, t_acc)
            pa = _part(inp, f"{_lab(b)} AttAcc@1", t_att, att, pairs=pairs, k=k,
                       alpha=plan.alpha)
            pc = _part(inp, f"{_lab(b)} acc.", t_acc, acc, why, k=k, alpha=plan.alpha)
            c.parts += [pa, pc]
            v = combine([pa.verdict(), pc.verdict()])
            per.append(v)
            texts.append(f"{_lab(b)} {v} (AttAcc@1 {pa.short()}; acc. {pc.short()})")
            for key, p in (("AttAcc@1", pa), ("accuracy", pc)):
                if p.est is not None and np.isfinite(p.est.se):
                    mdes[key].append(plan.mde_of(p.est))
        c.verdict = combine(per)
        beaten = sum(v == SUPPORTED for v in per)
        c.run = (f"AT-AT {me['attacc1']:.3f} at test acc. "
                 + (f"{acc_me[0]:.3f}" if acc_me else "n/a")
                 + f"; beats {beaten} of {n} baselines; AT-AT minus: " + "; ".join(texts))
        c.mde = "; ".join(f"{k_} {min(v):.3g}-{max(v):.3g}" for k_, v in mdes.items() if v)
        c.seed = _seed_text(c.parts)
        att_basis = ("paired t over the target classes" if t_att.interval == PAIRED_CLASSES
                     else "Newcombe over attacked images")
        acc_basis = ("Tango paired score over the same test images" if
                     t_acc.interval == ACC_TANGO else "Newcombe over the test images")
        c.basis = (f"per baseline: AttAcc@1 {att_basis}; test accuracy {acc_basis}; every "
                   f"baseline must be beaten; a part contradicts on its Bonferroni interval "
                   f"over {k} parts")
        apply_regime(c, inp, "atat", reads)
        out.append(c)
    return out


def _dose_claim(inp: Inputs) -> list[Claim]:
    d = inp.dose
    if d is None or d.empty or not inp.config.get("dose_response"):
        return []
    attack = str(inp.config["dose_response"]["attack"])
    col = f"{attack}_attacc1"
    lo_row, hi_row = d.iloc[0], d.iloc[-1]
    c = Claim("dose_response", "beyond the paper (App. H's lambda)",
              f"{attack.upper()} AttAcc@1 falls as AT-AT's lambda grows", "(not in the paper)")
    t = inp.plan.test("dose_response")
    diff, pairs, why = _dose_difference(inp, t, lo_row, hi_row, attack)
    pts = ", ".join(f"{r['weight_adv']:g}: {r[col]:.2f}" for _, r in d.iterrows())
    judge(c, inp.plan, [_part(inp, f"lambda {hi_row['weight_adv']:g} minus "
                                   f"{lo_row['weight_adv']:g}", t, diff, why, pairs=pairs)],
          extra=[f"all: {pts}"])
    c.basis = f"{_rate_name(t)}, the largest lambda against the smallest"
    dr = inp.config["dose_response"]
    apply_regime(c, inp, "dose_response", Reads(((str(dr.get("dataset", inp.dataset)),
                                                  str(dr.get("architecture",
                                                             inp.architecture))),)))
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
        why = {p.test.key.rsplit(".", 1)[-1]: p.test.undecidable for p in c.parts
               if p.test.undecidable}
        if why:
            c.basis = (c.basis + "; " if c.basis else "") + "declared undecidable by design " \
                "before the run: " + "; ".join(f"{k}: {v}" for k, v in why.items())
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


#: results/models/<dataset>/<architecture>/<defense>/seed<s>/test_predictions.csv
_PREDICTIONS = "test_predictions.csv"


def read_predictions(files: Sequence[str | Path]) -> pd.DataFrame | None:
    """The per-test-image predictions of the given models (their files under results/models,
    the model read off the path), one frame with columns dataset, architecture, defense,
    seed, index, label, pred, correct; None without files."""
    frames = []
    for f in files:
        p = Path(f)
        if p.name != _PREDICTIONS or not p.parent.name.startswith("seed"):
            raise ValueError(f"{f}: not a model's {_PREDICTIONS} "
                             "(results/models/<dataset>/<arch>/<defense>/seed<s>/)")
        dataset, arch, defense = p.parts[-5], p.parts[-4], p.parts[-3]
        df = pd.read_csv(p)
        missing = [c for c in ("index", "label", "correct") if c not in df.columns]
        if missing:
            raise ValueError(f"{f}: columns {missing} missing")
        frames.append(df.assign(dataset=dataset, architecture=arch, defense=defense,
                                seed=int(p.parent.name[len("seed"):])))
    return pd.concat(frames, ignore_index=True) if frames else None


def prediction_files(inputs_plan: Any) -> list[str]:
    """The per-test-image prediction files §6's paired accuracy test reads under a workflow
    plan (:class:`atat.analysis.paper.Plan`): the grid's first-seed model of AT-AT and of every
    baseline (the standard variant of each of the paper's 7 types) in each attacked cell with
    an AT-AT model -- the models :func:`_atat_vs_baselines` compares."""
    from atat.analysis.paper import grid_runs

    config = inputs_plan.config
    wanted = {"atat"} | {t for t in BASELINE_TYPES
                         if t in config["defenses"] and is_standard_variant(config, t)}
    runs = [r for r in grid_runs(inputs_plan) if r.seed == inputs_plan.first_seed
            and r.defense in wanted and inputs_plan.attacks]
    cells = {(r.dataset, r.architecture) for r in runs if r.defense == "atat"}
    return sorted(f"results/models/{r.path}/{_PREDICTIONS}" for r in runs
                  if (r.dataset, r.architecture) in cells)


def read_inputs(config: Mapping[str, Any], *, summary_csv: str | Path,
                per_image_csv: str | Path, plan: AnalysisPlan,
                regressions_csv: str | Path | None = None, cost_csv: str | Path | None = None,
                hsic_files: Mapping[str, str | Path] | None = None,
                preconditions_csv: str | Path | None = None,
                dose_csv: str | Path | None = None,
                dose_per_image: Sequence[str | Path] = (),
                test_predictions: Sequence[str | Path] = (),
                regressions_spec: str | Path | None = None) -> Inputs:
    """The claims' inputs read from a run's files (the claims rule's inputs;
    ``dose_per_image``: the dose-response endpoints' per-image files, concatenated;
    ``test_predictions``: the per-test-image predictions of the models §6 compares;
    ``regressions_spec``: config/regressions.yaml, whose Beta fits a bootstrap refits)."""
    from atat.analysis.stats.causal import causal_table
    from atat.analysis.stats.regression import causal_sample, expand_grids
    from atat.analysis.tables import main_results

    summary = pd.read_csv(summary_csv)
    per_image = pd.read_csv(per_image_csv)
    causal = None
    if "treatment" in summary and summary["treatment"].notna().any():
        causal = causal_table(summary, sample=causal_sample(config.get("causal")))
    specs = None
    if regressions_spec is not None:
        raw = yaml.safe_load(Path(regressions_spec).read_text()) or {}
        specs = {s["name"]: s for s in expand_grids(raw, regressions_spec,
                                                    statistics=config.get("statistics"))}
    inp = Inputs(config=config, summary=summary, main=main_results(per_image, summary),
                 per_image=per_image, tidy=_read(regressions_csv), causal=causal,
                 cost=_read(cost_csv),
                 hsic={d: io.read_json(p) for d, p in (hsic_files or {}).items()},
                 preconditions=_read(preconditions_csv),
                 dose=_read(dose_csv), dataset=claims_cell(config)[0],
                 architecture=claims_cell(config)[1], plan=plan,
                 dose_images=(pd.concat([pd.read_csv(f) for f in dose_per_image],
                                        ignore_index=True) if dose_per_image else None),
                 test_predictions=read_predictions(test_predictions), specs=specs)
    return inp


def regime_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """One row per claim, one column per precondition gate any claim reads: pass, FAIL, not
    checked (no row: a run older than the check), or blank (not read); and the claim's
    failed checks with their values."""
    gates = [g for g in REGIME_GATES if any(g in c.gates for c in claims)]
    rows = []
    for c in claims:
        rows.append({"claim": c.claim, **{g: c.gates.get(g, "") for g in gates},
                     "failed checks (value vs threshold)": "; ".join(c.failed_checks)})
    return pd.DataFrame(rows)


def claims_table(config: Mapping[str, Any], *, summary_csv: str | Path, per_image_csv: str | Path,
                 outputs: Sequence[str | Path], regressions_csv: str | Path | None = None,
                 cost_csv: str | Path | None = None,
                 hsic_files: Mapping[str, str | Path] | None = None,
                 preconditions_csv: str | Path | None = None,
                 dose_csv: str | Path | None = None,
                 dose_per_image: Sequence[str | Path] = (), plan: str | Path = PLAN_PATH,
                 records: Sequence[str | Path] = (),
                 test_predictions: Sequence[str | Path] = (),
                 regressions_spec: str | Path | None = None) -> pd.DataFrame:
    """Write results/tables/claims.{csv,md} and, with a causal experiment in the summary,
    results/tables/seed_variation.{csv,md} (``outputs``: those paths, by name;
    ``dose_per_image``: the dose-response endpoints' per-image files; ``test_predictions``:
    the per-test-image predictions of the models §6 compares; ``regressions_spec``: the
    regression specifications, for the bootstrap's refits). ``plan``: the analysis plan
    (config/analysis/claims.yaml); ``records``: the run's inversion records, whose times
    :func:`plan_status` compares with the plan's. claims.md opens with the regime each claim
    reads (:func:`regime_table`)."""
    from atat.analysis.tables import to_markdown

    the_plan = load_plan(plan)
    registered, plan_note = plan_status(plan, records)
    inp = read_inputs(config, summary_csv=summary_csv, per_image_csv=per_image_csv,
                      regressions_csv=regressions_csv, cost_csv=cost_csv,
                      hsic_files=hsic_files, preconditions_csv=preconditions_csv,
                      dose_csv=dose_csv, dose_per_image=dose_per_image, plan=the_plan,
                      test_predictions=test_predictions, regressions_spec=regressions_spec)
    summary = inp.summary
    claims = judged_claims(inp)
    table = pd.DataFrame([{k: getattr(c, k) for k in MD_COLUMNS} for c in claims],
                         columns=MD_COLUMNS)
    table["plan_sha256"] = the_plan.sha256
    table["plan_before_records"] = "" if registered is None else registered
    counts = table["verdict"].value_counts()
    caption = (f"The paper's claims against this run ({inp.dataset} / {inp.architecture} for "
               "the per-cell claims; §6's AT-AT claims also in every other cell where AT-AT "
               "was attacked): " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
               + f". Each claim tested as the analysis plan {Path(plan).name} (sha256 "
               f"{the_plan.sha256}) registers it: one-sided alpha {the_plan.alpha:g}, "
               f"intervals {100 * the_plan.level:g}% two-sided, a part of a claim of K parts "
               "contradicting it on its Bonferroni interval (1 - 2 alpha / K), "
               f"mde = the minimum detectable effect at {100 * the_plan.power:g}% power "
               f"(atat.analysis.claims); {plan_note}. " + _prior_sentence(inp))
    regime = regime_table(claims)
    regime_caption = ("The regime each claim reads (results/tables/preconditions.csv; the "
                      "thresholds are the config's preconditions): pass, FAIL (the claim is "
                      "then not in the paper's regime), not checked (no row: a run older than "
                      "the check; never a pass), blank (not read).")
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
            text = to_markdown(md, cap) if len(frame) else \
                cap + "\n\n(no causal experiment in this run)\n"
            if name == "claims" and len(regime):
                text = to_markdown(regime, regime_caption) + "\n" + text
            io.write_text(by_name[f"{name}.md"], text)
    return table
