"""AT-AT's dose-response (issue 17, beyond the paper): robust accuracy at each AutoAttack
epsilon and AttAcc@1 of one inversion attack against lambda = ``weight_adv``, one point per
swept lambda, each with its 95% interval.

The sweep itself (which lambdas, which model gives each: the grid's AT-AT variant, the
``zero`` NoDef variant for lambda = 0, or a generated variant) is declared in the config
(``dose_response``) and resolved by :func:`atat.plan.config.dose_response_points`; the rule
``dose_response`` (workflow/rules/dose_response.smk) hands those points to
:func:`dose_response`, which reads ``results/summary.csv`` and writes
``results/tables/dose_response.{csv,md}`` and ``results/figures/dose_response.png``.

Intervals (:mod:`atat.analysis.stats.intervals`, as the rest of the project): Wilson score 95%
intervals of binomial proportions -- clean test accuracy over the model's test images
(``n_test``), robust accuracy over AutoAttack's ``n_examples``
validation images (``aa_n_examples_eps<ε>`` of the summary), AttAcc@1 over the attack's
images (``<attack>_n_images``). Several seeds of one lambda are pooled (counts and trials
summed), as the App. I.3 tables pool seeds; the interval then ignores the between-seed
variance of training, which one seed per point (the demo) does not measure either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from atat.plan.config import eps_tag
from atat.analysis.paper import ARCH_LABELS, ATTACK_NAMES, DATASET_LABELS, DEFENSE_LABELS, output
from atat.analysis.paper import label as _label
from atat.analysis.stats.intervals import wilson_pooled as _pooled
from atat.analysis.summary import robust_column

#: the role of a point's model in the table's ``model`` column
ROLES = {"zero": "lambda = 0 control", "base": "the grid's model",
         "generated": "generated variant"}


def dose_response_frame(summary: pd.DataFrame, points: Sequence[Mapping[str, Any]], *,
                        dataset: str, architecture: str, attack: str,
                        epsilons: Sequence[float], zero: str | None = None) -> pd.DataFrame:
    """One row per point (``points``: mappings with ``weight_adv``, ``defense``,
    ``generated``; lambda order kept): lambda, the model's defense variant and role, seeds,
    clean test accuracy (over the test images, ``n_test``), robust accuracy at each epsilon
    and AttAcc@1 of ``attack``, each with its Wilson 95% interval and number of images.
    Raises when a point's model or a column is not in the summary (a point is never dropped
    silently)."""
    if not points:
        raise ValueError("dose-response: no points")
    df = summary
    if "treatment" in df.columns:
        df = df[df["treatment"].isna()]  # causal replicates are another experiment
    cell = df[(df["dataset"] == dataset) & (df["architecture"] == architecture)]
    acc_col, n_img_col = f"{attack}_attacc1", f"{attack}_n_images"
    need = ["test_acc", "n_test", acc_col, n_img_col]
    for eps in epsilons:
        need += [robust_column(eps), f"aa_n_examples_eps{eps_tag(eps)}"]
    missing = [c for c in need if c not in summary.columns]
    if missing:
        raise ValueError(f"dose-response: the summary lacks columns {missing}")
    rows = []
    for p in points:
        lam, defense = float(p["weight_adv"]), str(p["defense"])
        part = cell[cell["defense"] == defense]
        if part.empty:
            raise ValueError(f"dose-response: no {dataset}/{architecture}/{defense} model in the "
                             f"summary (lambda = {lam:g})")
        role = ("generated" if p.get("generated") else
                "zero" if zero is not None and defense == zero and lam == 0 else "base")
        row: dict[str, Any] = {"weight_adv": lam, "defense": defense, "model": ROLES[role],
                               "n_seeds": int(part["seed"].nunique())}
        est, lo, hi, n = _pooled(part["test_acc"], part["n_test"], f"{defense} test_acc")
        row.update({"test_acc": est, "test_acc_ci_low": lo, "test_acc_ci_high": hi,
                    "n_test": n})
        for eps in epsilons:
            col = robust_column(eps)
            est, lo, hi, n = _pooled(part[col], part[f"aa_n_examples_eps{eps_tag(eps)}"],
                                     f"{defense} {col}")
            row.update({col: est, f"{col}_ci_low": lo, f"{col}_ci_high": hi,
                        f"{col}_n": n})
        est, lo, hi, n = _pooled(part[acc_col], part[n_img_col], f"{defense} {acc_col}")
        row.update({acc_col: est, f"{acc_col}_ci_low": lo, f"{acc_col}_ci_high": hi,
                    n_img_col: n})
        rows.append(row)
    return pd.DataFrame(rows)


def _markdown(frame: pd.DataFrame, *, attack: str, epsilons: Sequence[float],
              caption: str) -> str:
    from atat.analysis.tables import to_markdown

    def ci(r: pd.Series, col: str) -> str:
        return f"{r[col]:.3f} [{r[f'{col}_ci_low']:.3f}, {r[f'{col}_ci_high']:.3f}]"

    acc_col = f"{attack}_attacc1"
    shown = []
    for _, r in frame.iterrows():
        row = {"lambda": f"{r['weight_adv']:g}",
               "Model": _label(DEFENSE_LABELS, r["defense"]) + f" ({r['model']})",
               "Test acc.": ci(r, "test_acc")}
        for eps in epsilons:
            row[f"Robust acc. eps={eps:g}"] = ci(r, robust_column(eps))
        row[f"{ATTACK_NAMES.get(attack, attack)} AttAcc@1"] = ci(r, acc_col)
        shown.append(row)
    return to_markdown(pd.DataFrame(shown), caption)


def dose_response_figure(frame: pd.DataFrame, out_png: str | Path, *, attack: str,
                         epsilons: Sequence[float], title: str,
                         chance: float | None = None) -> None:
    """Two panels against lambda: robust accuracy at each epsilon (and clean test
    accuracy, dashed) and AttAcc@1 of ``attack`` (chance level dotted), each with its 95%
    Wilson interval as error bars (the legends say so)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import offset_copy

    from atat.base import io

    lam = frame["weight_adv"].to_numpy(dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8))
    ax = axes[0]
    order = sorted(epsilons, reverse=True)
    for k, eps in enumerate(order):
        col = robust_column(eps)
        y = frame[col].to_numpy(dtype=float)
        err = [y - frame[f"{col}_ci_low"].to_numpy(dtype=float),
               frame[f"{col}_ci_high"].to_numpy(dtype=float) - y]
        # dodged sideways by a few points so that equal values' error bars stay visible
        shift = offset_copy(ax.transData, fig=fig, units="points",
                            x=4.0 * (k - (len(order) - 1) / 2))
        ax.errorbar(lam, y, yerr=err, marker="o", ms=4, capsize=2, label=f"eps = {eps:g}",
                    transform=shift)
    acc = frame["test_acc"].to_numpy(dtype=float)
    ax.errorbar(lam, acc, yerr=[acc - frame["test_acc_ci_low"].to_numpy(dtype=float),
                                frame["test_acc_ci_high"].to_numpy(dtype=float) - acc],
                ls="--", color="gray", marker=".", capsize=2, label="clean test acc.")
    ax.set_xlabel("lambda (weight_adv)")
    ax.set_ylabel("AutoAttack robust accuracy (worst case)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("robustness", fontsize=10)
    ax.legend(fontsize=8, title="bars: 95% Wilson intervals", title_fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[1]
    col = f"{attack}_attacc1"
    y = frame[col].to_numpy(dtype=float)
    err = [y - frame[f"{col}_ci_low"].to_numpy(dtype=float),
           frame[f"{col}_ci_high"].to_numpy(dtype=float) - y]
    ax.errorbar(lam, y, yerr=err, marker="o", capsize=3, color="tab:red",
                label="AttAcc@1, 95% Wilson interval")
    if chance is not None:
        ax.axhline(chance, ls=":", color="gray", label=f"chance ({chance:.3f})")
    ax.legend(fontsize=8)
    ax.set_xlabel("lambda (weight_adv)")
    ax.set_ylabel(f"{ATTACK_NAMES.get(attack, attack)} AttAcc@1 (lower = more private)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("leakage", fontsize=10)
    ax.grid(alpha=0.3)
    positive = lam[lam > 0]
    for a in axes:
        if positive.size and positive.max() / positive.min() > 4:
            # a geometric ladder (plus 0): even spacing of its steps, 0 on the linear part
            a.set_xscale("symlog", linthresh=float(positive.min()), linscale=0.5)
        a.set_xticks(lam)
        a.set_xticklabels([f"{v:g}" for v in lam])
        a.minorticks_off()
        a.margins(x=0.06)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with io.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def dose_response(summary_csv: str | Path, outputs: Sequence[str | Path], *,
                  points: Sequence[Mapping[str, Any]], dataset: str, architecture: str,
                  attack: str, epsilons: Sequence[float], zero: str | None = None,
                  n_classes: int | None = None) -> pd.DataFrame:
    """Write the dose-response table (the .csv and .md among ``outputs``: one row per
    lambda) and figure (the .png) from ``summary_csv``; returns the table's frame."""
    from atat.base import io

    summary = pd.read_csv(summary_csv)
    frame = dose_response_frame(summary, points, dataset=dataset, architecture=architecture,
                                attack=attack, epsilons=epsilons, zero=zero)
    cell = f"{_label(DATASET_LABELS, dataset)} / {_label(ARCH_LABELS, architecture)}"
    caption = output("dose_response").caption.format(attack=ATTACK_NAMES.get(attack, attack),
                                                     cell=cell)
    n_seeds = int(frame["n_seeds"].max())
    n_aa = int(frame[f"{robust_column(epsilons[0])}_n"].max())
    n_test = int(frame["n_test"].max())
    caption += (f" Error bars and brackets: 95% Wilson score intervals; clean test accuracy "
                f"over the {n_test} test images, robust accuracy over AutoAttack's {n_aa} "
                f"validation images, AttAcc@1 over "
                f"the attack's images; {n_seeds} seed(s) per point (pooled). lambda = 0: "
                + (f"the '{zero}' model." if zero else "an AT-AT model trained with lambda 0."))
    for out in map(Path, outputs):
        if out.suffix == ".csv":
            with io.atomic_path(out) as tmp:
                frame.to_csv(tmp, index=False)
        elif out.suffix == ".md":
            io.write_text(out, _markdown(frame, attack=attack, epsilons=epsilons,
                                         caption=caption))
        elif out.suffix == ".png":
            dose_response_figure(frame, out, attack=attack, epsilons=epsilons,
                                 title=f"AT-AT dose-response, {cell}",
                                 chance=None if not n_classes else 1.0 / n_classes)
        else:
            raise ValueError(f"unknown dose-response output format: {out}")
    return frame
