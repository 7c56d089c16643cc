"""Power of the claims analysis at a finished run's sample sizes (issue 45's design question):
where the noise of AttAcc@1 comes from and how much each claim's test could see.

    python -m atat.lab.power --run DIR --configfile config/config.yaml config/demo.yaml \
        [--out docs/power.md]

Three tables, from the run's own files (DIR holds ``results/``):

1. **Class clustering of AttAcc@1.** Per attacked model (dataset, architecture, defense, seed,
   attack) from ``results/inversion/per_image.csv``: the images per class, the attack success
   rate, the one-way ANOVA intra-class correlation of ``correct_top1`` between a model's target
   classes, and the design effect 1 + (m - 1) ICC it implies for a rate that treats the images
   as independent (m = images per class). Pooled: the median ICC over models.
2. **Power per claim part.** Every part of every claim as :func:`atat.analysis.claims.judged_claims`
   judges it under the pre-registered plan (``config/analysis/claims.yaml``), with the standard error its
   interval implies: for a directional test, the power to find it supported when the true
   effect is the paper's theta_P and when it is theta_P/2, and the factor by which the sample
   must grow for 80% power at theta_P (SE scales as 1/sqrt(n)); for a non-inferiority or
   equivalence test, the power to find it supported when the true difference is 0.
3. **Design of the AttAcc@1 differences.** Every part that compares two models' AttAcc@1
   (:data:`atat.analysis.claims.ATTACC_DIFFERENCE_KEYS`), whichever interval the plan names:
   its standard error under Newcombe's interval (images independent) and under the paired t
   over the k common target classes (:func:`atat.analysis.claims.paired_class_difference`),
   k, the images per class m, and the variance components of the per-class difference d_c:
   the within-class binomial part s2_within (the mean over classes of the two models'
   p_c(1 - p_c)/(m - 1), the unbiased estimate of the binomial variance of a rate over m
   images) and the between-class part s2_between = Var(d_c) - s2_within (clipped at 0). From
   them the paired SE at m' = f m images per class, sqrt((s2_between + s2_within m/m') / k),
   and the power at theta_P and theta_P/2 (Student t(k - 1) quantile) for f = 1..4: more
   images per class shrink only the within part, more classes shrink both.

Normal approximations throughout (the claims table's verdicts use the plan's own intervals);
this is a planning aid, not a verdict. A lab tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

MODEL_KEYS = ["dataset", "architecture", "defense", "seed", "attack"]
_N = NormalDist()


def anova_icc(values: Sequence[float], groups: Sequence[Any]) -> tuple[float, float]:
    """(ICC, m0) of ``values`` clustered by ``groups``: the one-way ANOVA estimator
    (MSB - MSW) / (MSB + (m0 - 1) MSW) with m0 the (unbalanced-design) effective group size;
    NaN when it is undefined (one group, or no variation within and between groups)."""
    df = pd.DataFrame({"y": np.asarray(values, dtype=float), "g": list(groups)})
    sizes = df.groupby("g")["y"].size()
    k, n = len(sizes), len(df)
    if k < 2 or n <= k:
        return float("nan"), float("nan")
    m0 = (n - (sizes ** 2).sum() / n) / (k - 1)
    means = df.groupby("g")["y"].transform("mean")
    msb = float(((df.groupby("g")["y"].mean() - df["y"].mean()) ** 2 * sizes).sum() / (k - 1))
    msw = float(((df["y"] - means) ** 2).sum() / (n - k))
    denom = msb + (m0 - 1) * msw
    if denom <= 0:
        return float("nan"), float(m0)
    return (msb - msw) / denom, float(m0)


def class_clustering(per_image: pd.DataFrame, metric: str = "correct_top1") -> pd.DataFrame:
    """One row per attacked model: images, classes, images per class, rate, ICC, design
    effect and the effective number of independent images."""
    keys = [k for k in MODEL_KEYS if k in per_image.columns]
    missing = [c for c in ("class", metric) if c not in per_image.columns]
    if missing:
        raise ValueError(f"per-image table lacks columns {missing}")
    rows = []
    for key, g in per_image.groupby(keys, sort=True):
        icc, m0 = anova_icc(g[metric], g["class"])
        deff = 1 + (m0 - 1) * max(icc, 0.0) if math.isfinite(icc) else float("nan")
        rows.append({**dict(zip(keys, key)), "images": len(g), "classes": g["class"].nunique(),
                     "images_per_class": m0, "rate": float(g[metric].mean()), "icc": icc,
                     "design_effect": deff,
                     "effective_images": len(g) / deff if math.isfinite(deff) else float("nan")})
    return pd.DataFrame(rows)


def part_power(test: Any, se: float, alpha: float, power: float = 0.80,
               df: float | None = None) -> dict[str, float]:
    """Power of one part's test at standard error ``se`` (normal approximation; with ``df``
    the critical value is Student t's): directional and significance tests at theta_P and
    theta_P/2 with the sample factor for ``power`` at theta_P; non-inferiority / equivalence
    at a true difference of 0."""
    if df is None or not math.isfinite(df):
        z = _N.inv_cdf(1 - alpha)
    else:
        from scipy import stats as sps

        z = float(sps.t.ppf(1 - alpha, df))
    out = {"se": se, "power_at_theta": float("nan"), "power_at_half_theta": float("nan"),
           "n_factor_for_power": float("nan"), "power_at_zero_difference": float("nan")}
    if not (se > 0 and math.isfinite(se)):
        return out
    if test.test in ("directional", "significance") and test.theta is not None:
        theta = abs(float(test.theta))
        out["power_at_theta"] = _N.cdf(theta / se - z)
        out["power_at_half_theta"] = _N.cdf(theta / 2 / se - z)
        out["n_factor_for_power"] = ((z + _N.inv_cdf(power)) * se / theta) ** 2
    elif test.test == "non_inferiority" and test.margin is not None:
        out["power_at_zero_difference"] = _N.cdf(abs(float(test.margin)) / se - z)
    elif test.test == "equivalence" and test.margin is not None:
        out["power_at_zero_difference"] = max(0.0, 2 * _N.cdf(abs(float(test.margin)) / se - z)
                                              - 1)
    return out


def claim_power(claims: Sequence[Any], alpha: float, power: float = 0.80) -> pd.DataFrame:
    """One row per part of every judged claim (:attr:`atat.analysis.claims.Claim.parts`)."""
    rows = []
    for c in claims:
        for p in c.parts:
            est = p.est
            row = {"claim": c.claim, "part": p.name or "-", "verdict": p.verdict(),
                   "test": p.test.test,
                   "theta_or_margin": p.test.theta if p.test.theta is not None
                   else p.test.margin,
                   "estimate": est.est if est is not None else float("nan")}
            row.update(part_power(p.test, est.se if est is not None else float("nan"),
                                  alpha, power))
            rows.append(row)
    return pd.DataFrame(rows)


def variance_components(pairs: Any) -> dict[str, float]:
    """k, m and the variance components of the per-class difference d_c of ``pairs``
    (:class:`atat.analysis.claims.ClassPairs`): s2_within, the mean over classes of
    p_a(1-p_a)/(n_a-1) + p_b(1-p_b)/(n_b-1) (n: images of the class on that side); var_d, the
    sample variance of d_c; s2_between = max(var_d - s2_within, 0); and se_paired =
    sqrt(var_d / k), the paired interval's standard error. m is the mean images per class
    over both sides (NaN components with a class of one image)."""
    k = int(pairs.k)
    n_a, n_b = np.asarray(pairs.n_a, float), np.asarray(pairs.n_b, float)
    m = float(np.mean(np.concatenate([n_a, n_b]))) if k else float("nan")
    nan = float("nan")
    if k < 2 or (n_a < 2).any() or (n_b < 2).any():
        return {"k": k, "m": m, "s2_within": nan, "var_d": nan, "s2_between": nan,
                "se_paired": nan}
    pa, pb = np.asarray(pairs.rate_a, float), np.asarray(pairs.rate_b, float)
    within = float(np.mean(pa * (1 - pa) / (n_a - 1) + pb * (1 - pb) / (n_b - 1)))
    var_d = float(np.var(pairs.d, ddof=1))
    return {"k": k, "m": m, "s2_within": within, "var_d": var_d,
            "s2_between": max(var_d - within, 0.0), "se_paired": math.sqrt(var_d / k)}


def projected_se(components: Mapping[str, float], factor: float) -> float:
    """The paired standard error at ``factor`` times the images per class (the same k
    classes): sqrt((s2_between + s2_within / factor) / k)."""
    c = components
    return math.sqrt((c["s2_between"] + c["s2_within"] / factor) / c["k"])


def attacc_design(claims: Sequence[Any], alpha: float, power: float = 0.80,
                  factors: Sequence[int] = (1, 2, 3, 4)) -> tuple[pd.DataFrame, list[str]]:
    """One row per AttAcc@1-difference part of every judged claim and per factor f of the
    images per class (m' = f m): the interval the plan names, k, m, m', Newcombe's and the
    paired standard error of the run, the variance components (:func:`variance_components`),
    the paired SE projected to m' (:func:`projected_se`) and the power there
    (:func:`part_power` with t(k - 1)). Also the parts left out (no per-image rows of both
    sides, or their class sets differ), as ``claim/part: why``."""
    from atat.analysis.claims import ATTACC_DIFFERENCE_KEYS

    rows, left_out = [], []
    for c in claims:
        for p in c.parts:
            if p.test.key not in ATTACC_DIFFERENCE_KEYS:
                continue
            name = f"{c.claim}/{p.name or '-'}"
            if p.pairs is None:
                left_out.append(f"{name}: " + (p.why or "no per-image rows of both sides with "
                                                         "the same target classes"))
                continue
            comp = variance_components(p.pairs)
            se_newcombe = p.pairs.newcombe(alpha).se
            for f in factors:
                se_f = (projected_se(comp, f) if math.isfinite(comp["s2_within"])
                        else float("nan"))
                row = {"claim": c.claim, "part": p.name or "-", "interval": p.test.interval,
                       "k": comp["k"], "m": comp["m"], "m_prime": f * comp["m"],
                       "se_newcombe": se_newcombe / math.sqrt(f),
                       "se_paired": comp["se_paired"] if f == 1 else float("nan"),
                       "s2_within": comp["s2_within"], "s2_between": comp["s2_between"],
                       "se_projected": se_f}
                pw = part_power(p.test, se_f, alpha, power, df=comp["k"] - 1)
                row.update({k: pw[k] for k in ("power_at_theta", "power_at_half_theta",
                                               "power_at_zero_difference")})
                rows.append(row)
    return pd.DataFrame(rows), left_out


def _claims_of_run(run: Path, config: Mapping[str, Any]) -> tuple[list[Any], Any]:
    """Judge the claims on the run's files (the claims rule's inputs, atat.analysis.paper)."""
    import yaml

    from atat.analysis import claims as C
    from atat.plan.config import REPO_ROOT, model_runs
    from atat.analysis.paper import Plan, claims_inputs

    regressions = yaml.safe_load((REPO_ROOT / "config" / "regressions.yaml").read_text()) or {}
    plan = Plan(config, model_runs(config), regressions)
    files = claims_inputs(plan)

    def here(rel: str | None) -> Path | None:
        return run / rel if rel is not None and (run / rel).exists() else None

    the_plan = C.load_plan()
    inp = C.read_inputs(config, summary_csv=run / files["summary"],
                        per_image_csv=run / files["per_image"],
                        regressions_csv=here(files["regressions"]), cost_csv=here(files["cost"]),
                        hsic_files={d: run / f for d, f in files["hsic"].items()
                                    if (run / f).exists()},
                        preconditions_csv=here(files["preconditions"]),
                        dose_csv=here(files["dose"]),
                        dose_per_image=[run / f for f in files["dose_per_image"]
                                        if (run / f).exists()], plan=the_plan)
    return C.judged_claims(inp), the_plan


def _fmt(df: pd.DataFrame, caption: str) -> str:
    from atat.analysis.tables import to_markdown

    return to_markdown(df, caption, float_fmt="{:.3g}") if len(df) else caption + "\n\n(none)\n"


def report(run: str | Path, config: Mapping[str, Any]) -> str:
    """The two tables as Markdown, with the pooled ICC."""
    run = Path(run)
    per_image = pd.read_csv(run / "results" / "inversion" / "per_image.csv")
    icc = class_clustering(per_image)
    claims, plan = _claims_of_run(run, config)
    power = claim_power(claims, plan.alpha, plan.power)
    pooled = icc.groupby("attack")["icc"].median()
    design, left_out = attacc_design(claims, plan.alpha, plan.power)
    lines = ["# Power of the claims analysis", "",
             f"Run: `{run}`; plan sha256 `{plan.sha256}` (one-sided alpha {plan.alpha:g}).", "",
             "## Class clustering of AttAcc@1", "",
             "Median ICC over models: " + ", ".join(f"{a} {v:.3f}" for a, v in pooled.items())
             + ".", "", _fmt(icc, "Per attacked model:"), "## Power per claim part", "",
             _fmt(power, "Per part (normal approximation; n_factor: how many times the "
                         "sample for 80% power at theta_P):"), "",
             "## Design of the AttAcc@1 differences", "",
             _fmt(design, "Per AttAcc@1-difference part and images per class m' = f m (the "
                          "same k classes): se_newcombe, Newcombe's SE at m' (images "
                          "independent, 1/sqrt(f)); se_paired, the paired t over classes' SE of "
                          "the run (at m); s2_within / s2_between, the variance components of "
                          "the per-class difference d_c; se_projected = sqrt((s2_between + "
                          "s2_within m/m') / k), and the power of the paired test there "
                          "(t(k - 1)) at theta_P, theta_P/2 or, for a non-inferiority test, a "
                          "true difference of 0. Parts left out: "
                          + ("; ".join(left_out) if left_out else "none") + "."), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from atat.plan.config import load_config, validate_config

    ap = argparse.ArgumentParser(prog="python -m atat.lab.power",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=".", help="the directory that ran the workflow")
    ap.add_argument("--configfile", nargs="+", default=["config/config.yaml", "config/demo.yaml"])
    ap.add_argument("--out", help="write the Markdown here (default: stdout)")
    args = ap.parse_args(argv)
    config = load_config(*args.configfile)
    validate_config(config)
    text = report(args.run, config)
    if args.out:
        Path(args.out).write_text(text)
        print(f"written: {args.out}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
