"""Power of the claims analysis at a finished run's sample sizes (issue 45's design question):
where the noise of AttAcc@1 comes from and how much each claim's test could see.

    python -m atat.lab.power --run DIR --configfile config/config.yaml config/demo.yaml \
        [--out docs/power.md]

Two tables, from the run's own files (DIR holds ``results/``):

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


def part_power(test: Any, se: float, alpha: float, power: float = 0.80) -> dict[str, float]:
    """Power of one part's test at standard error ``se`` (normal approximation): directional
    and significance tests at theta_P and theta_P/2 with the sample factor for ``power`` at
    theta_P; non-inferiority / equivalence at a true difference of 0."""
    z = _N.inv_cdf(1 - alpha)
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
                        dose_csv=here(files["dose"]), plan=the_plan)
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
    lines = ["# Power of the claims analysis", "",
             f"Run: `{run}`; plan sha256 `{plan.sha256}` (one-sided alpha {plan.alpha:g}).", "",
             "## Class clustering of AttAcc@1", "",
             "Median ICC over models: " + ", ".join(f"{a} {v:.3f}" for a, v in pooled.items())
             + ".", "", _fmt(icc, "Per attacked model:"), "## Power per claim part", "",
             _fmt(power, "Per part (normal approximation; n_factor: how many times the "
                         "sample for 80% power at theta_P):"), ""]
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
