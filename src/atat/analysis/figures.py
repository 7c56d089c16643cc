"""Figures with matplotlib (Agg backend, no display).

Legibility rules every figure here follows (issue 17 item 6): text at least
:data:`MIN_FONT_PT` points at the saved size, saved at :data:`DPI`; legends outside the data
(beside the axes); more defenses than the colour cycle holds are told apart by a marker too
(:func:`defense_style`); point labels never overlap (:func:`place_labels`); column titles of
image grids wrapped to their column (:func:`wrap_title`); small images upscaled with
nearest-neighbour interpolation (each pixel a visible square, nothing smoothed away).

Every figure that compares defenses (Figure 4, Figure 2, robust accuracy vs ε; the
dose-response in :mod:`atat.analysis.dose_response`) draws the 95% intervals the tables compute, from
:mod:`atat.analysis.stats.intervals`, in both axes where both are estimates (issue 45 item 6): Wilson
score intervals for rates (clean test accuracy over the model's ``n_test`` test images, robust
accuracy over AutoAttack's ``aa_n_examples_eps<ε>`` images, AttAcc@1/@5 over the attack's
``<attack>_n_images`` images; several seeds pooled, counts and trials summed), Student-t
intervals over per-class means for EvalConf and the distances δ (the per-image table, as
Tables 27/28), and for Figure 2's predicted leakage the 95% interval of the fitted mean of the
regression. A figure whose input lacks a count stops with a message naming the column -- it
never draws bare points. Each figure says on its face which intervals its bars are.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from atat.base import io  # noqa: E402
from atat.plan.config import eps_tag  # noqa: E402
from atat.analysis.stats.intervals import t_interval_mean, wilson_pooled  # noqa: E402
from atat.analysis.summary import robust_column  # noqa: E402
from atat.analysis.paper import (ARCH_LABELS, ATTACK_NAMES, DATASET_LABELS,  # noqa: E402
                        DEFENSE_LABELS, FIGURE4_TYPES, label)

#: Saved resolution of every figure (dots per inch) and the smallest font size used (points).
DPI = 120
MIN_FONT_PT = 8
#: AT-AT is drawn in red in every figure (the paper's Fig. 4); the other defenses take the
#: remaining colours of matplotlib's cycle.
ATAT_COLOR = "tab:red"
_COLORS = [c for c in (matplotlib.colors.to_hex(c) for c in
                       plt.rcParams["axes.prop_cycle"].by_key()["color"])
           if c != matplotlib.colors.to_hex(ATAT_COLOR)]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">"]


def defense_style(i: int) -> dict:
    """Colour and marker of the ``i``-th defense: the colour cycle without AT-AT's red
    first, then a new marker with each further pass over the colours (18 defenses: 9
    colours x 2 markers)."""
    return {"color": _COLORS[i % len(_COLORS)],
            "marker": _MARKERS[(i // len(_COLORS)) % len(_MARKERS)]}


def atat_style(i: int) -> dict:
    """Style of the ``i``-th AT-AT-type defense (the grid's AT-AT first, then e.g. the
    dose-response variants): red always, with its own marker and line style."""
    return {"color": ATAT_COLOR, "marker": _MARKERS[i % len(_MARKERS)],
            "ls": ["-", "--", ":", "-."][i % 4], "lw": 2.5 if i == 0 else 1.6}


def cell_title(dataset: str, arch: str | None = None) -> str:
    """``FaceScrub / ResNet-152`` (the paper's typography, :mod:`atat.analysis.paper`)."""
    return label(DATASET_LABELS, dataset) + (f" / {label(ARCH_LABELS, arch)}" if arch else "")


def wrap_title(text: str, width_in: float, fontsize: float = MIN_FONT_PT) -> str:
    """``text`` wrapped at word boundaries (hyphens too) to fit ``width_in`` inches at
    ``fontsize`` points (an average glyph of DejaVu Sans is ~0.6 em wide; 0.62 is kept)."""
    chars = max(4, int(width_in * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars, break_on_hyphens=False)) or text


def _boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float],
                   pad: float = 0.0) -> bool:
    return not (a[2] + pad <= b[0] or b[2] + pad <= a[0] or a[3] + pad <= b[1]
                or b[3] + pad <= a[1])


def place_labels(ax, xs: Sequence[float], ys: Sequence[float], texts: Sequence[str], *,
                 fontsize: float = MIN_FONT_PT, marker_px: float = 8.0,
                 renderer=None) -> list:
    """Label the points ``(xs[i], ys[i])`` of ``ax`` with ``texts[i]`` so that no two labels
    overlap, no label covers a point and every label stays inside the axes.

    A deterministic greedy placement in display coordinates: labels are placed in the given
    order, each at the first free position of rings of candidates around its point (16
    directions, upper right first, at growing distance); failing that (a crowded panel) at
    the free position of a grid over the axes nearest to the point. A label not touching its
    point gets a thin leader line (drawn under points and labels, ending at the label's box).
    Call after the axes' limits and the figure's layout are final (the positions are display
    coordinates; ``renderer``: that of a figure already drawn in its final layout, else the
    figure is drawn here). Returns the annotations."""
    fig = ax.figure
    if renderer is None:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
    to_pt = 72.0 / fig.dpi
    ab = ax.get_window_extent(renderer)
    axbox = (ab.x0 + 2, ab.y0 + 2, ab.x1 - 2, ab.y1 - 2)
    pts = [tuple(ax.transData.transform((x, y))) for x, y in zip(xs, ys)]
    r = marker_px / 2
    taken = [(px - r, py - r, px + r, py + r) for px, py in pts]
    sizes = []
    for t in texts:
        probe = ax.text(0, 0, t, fontsize=fontsize)
        bb = probe.get_window_extent(renderer)
        probe.remove()
        sizes.append((bb.width, bb.height))
    out = []
    angles = [45, 0, 90, 135, 180, -45, -90, -135, 22.5, 67.5, 112.5, 157.5, -22.5, -67.5,
              -112.5, -157.5]
    for (px, py), t, (w, h) in zip(pts, texts, sizes):
        def box_at(cx: float, cy: float) -> tuple[float, float, float, float]:
            return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)

        def free(b: tuple[float, float, float, float]) -> bool:
            return (b[0] >= axbox[0] and b[1] >= axbox[1] and b[2] <= axbox[2]
                    and b[3] <= axbox[3] and not any(_boxes_overlap(b, o, 1.0) for o in taken))

        best, ring = None, 0
        for ring in range(12):
            dist = r + 2 + ring * h * 0.75
            for a in angles:
                c, s = math.cos(math.radians(a)), math.sin(math.radians(a))
                cx, cy = px + dist * c + c * w / 2, py + dist * s + s * h / 2
                if free(box_at(cx, cy)):
                    best = (cx, cy)
                    break
            if best:
                break
        if best is None:           # crowded: nearest free cell of a grid over the axes
            cands = [(x0 + w / 2, y0 + h / 2)
                     for x0 in _frange(axbox[0], axbox[2] - w, max(2.0, w / 4))
                     for y0 in _frange(axbox[1], axbox[3] - h, max(2.0, h / 2))]
            cands.sort(key=lambda c: (c[0] - px) ** 2 + (c[1] - py) ** 2)
            best = next((c for c in cands if free(box_at(*c))), (px + r + w / 2, py))
            ring = -1
        taken.append(box_at(*best))
        if ring != 0:            # not touching its point: a leader line says whose it is
            dx, dy = best[0] - px, best[1] - py
            cut = min(w / 2 / abs(dx) if dx else math.inf, h / 2 / abs(dy) if dy else math.inf)
            end = (best[0] - dx * min(1.0, cut + 0.03), best[1] - dy * min(1.0, cut + 0.03))
            (x0, y0), (x1, y1) = ax.transData.inverted().transform([(px, py), end])
            ax.plot([x0, x1], [y0, y1], color="0.55", lw=0.6, zorder=1.5, scalex=False,
                    scaley=False)        # under the points and the labels, ending at the box
        out.append(ax.annotate(
            t, (xs[len(out)], ys[len(out)]), xytext=((best[0] - px) * to_pt,
                                                     (best[1] - py) * to_pt),
            textcoords="offset points", ha="center", va="center", fontsize=fontsize,
            annotation_clip=False, zorder=4))
    return out


def _frange(lo: float, hi: float, step: float) -> list[float]:
    n = int((hi - lo) // step) + 1 if hi >= lo else 0
    return [lo + i * step for i in range(n)]


def _save(fig, out_png: str | Path, *, layout: bool = True) -> None:
    if layout:
        fig.tight_layout()
    with io.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    plt.close(fig)


#: What the error bars of a figure comparing defenses are (said on each figure's face).
WILSON_NOTE = "bars: 95% Wilson intervals"


def require_counts(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Stop with a message naming the count columns ``what`` needs for its 95% intervals
    and lacks (a summary written before they were recorded): a figure without them would
    plot bare points."""
    missing = [c for c in dict.fromkeys(columns) if c not in df.columns]
    if missing:
        raise ValueError(
            f"{what}: the summary lacks the count column(s) {missing} needed for the 95% "
            "intervals (n_test from each model's metrics.json, aa_n_examples_eps<ε> from "
            "the AutoAttack records, <attack>_n_images from the inversion records); rebuild "
            "the summary (atat.analysis.summary.build_summary) from records that have them")


def _wilson_bar(rates: pd.Series, counts: pd.Series, what: str) -> tuple[float, float, float]:
    """(estimate, low, high): seeds pooled, Wilson 95%
    (:func:`atat.analysis.stats.intervals.wilson_pooled`)."""
    est, lo, hi, _ = wilson_pooled(rates, counts, what)
    return est, lo, hi


def _err(est: Sequence[float], lo: Sequence[float], hi: Sequence[float]) -> list[list[float]]:
    """matplotlib's asymmetric ``xerr``/``yerr`` ([below], [above]) from interval bounds."""
    return [[e - a for e, a in zip(est, lo)], [b - e for e, b in zip(est, hi)]]


def robust_accuracy_vs_epsilon(summary_csv: str | Path, out_png: str | Path, *,
                               epsilons: Sequence[float]) -> None:
    """One panel per (dataset, architecture), up to 3 a row (4: 2 x 2): worst-case AutoAttack
    robust accuracy against epsilon (log scale, [0, 1] pixel units) for each defense; clean
    test accuracy drawn as a star at the left edge. AT-AT in red and thicker; one legend
    beside the panels. Each point carries its 95% Wilson interval (robust accuracy over
    ``aa_n_examples_eps<ε>`` images, clean accuracy over ``n_test``; seeds pooled): a summary
    without those counts is an error (:func:`require_counts`)."""
    df = pd.read_csv(summary_csv)
    eps = sorted(float(e) for e in epsilons)
    cols = [robust_column(e) for e in eps]
    n_cols = [f"aa_n_examples_eps{eps_tag(e)}" for e in eps]
    require_counts(df, [*n_cols, "n_test"], f"{summary_csv} (robust accuracy vs ε)")
    panels = list(df.groupby(["dataset", "architecture"], sort=True))
    is_atat = {d: bool((df.loc[df["defense"] == d, "defense_type"] == "atat").any())
               for d in dict.fromkeys(df["defense"])}
    others = [d for d, a in is_atat.items() if not a]
    atats = [d for d, a in is_atat.items() if a]
    ncols = 2 if len(panels) == 4 else min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(4.2 * ncols + 2.2,
                                      max(3.6 * nrows, 0.2 * df["defense"].nunique() + 0.8)))
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    handles: dict[str, object] = {}
    for ax, ((dataset, arch), part) in zip(axes.flat, panels):
        for defense, rows in part.groupby("defense", sort=False):
            if is_atat[defense]:
                style = dict(atat_style(atats.index(defense)), zorder=3)
            else:
                style = defense_style(others.index(defense))
            bars = [_wilson_bar(rows[c], rows[n], f"{summary_csv}: {defense} {c}")
                    for c, n in zip(cols, n_cols)]
            est, lo, hi = (list(v) for v in zip(*bars))
            cont = ax.errorbar(eps, est, yerr=_err(est, lo, hi), ms=5, capsize=2,
                               elinewidth=0.8, label=label(DEFENSE_LABELS, defense), **style)
            line = cont.lines[0]
            a, a_lo, a_hi = _wilson_bar(rows["test_acc"], rows["n_test"],
                                        f"{summary_csv}: {defense} test_acc")
            ax.errorbar([eps[0] / 3], [a], yerr=_err([a], [a_lo], [a_hi]), marker="*", ms=10,
                        ls="none", capsize=2, elinewidth=0.8, color=line.get_color(),
                        zorder=3, label=f"{label(DEFENSE_LABELS, defense)} clean")
            handles.setdefault(defense, line)
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("AutoAttack L∞ ε ([0, 1] pixel units)", fontsize=9)
        ax.set_ylabel("robust accuracy (worst case)", fontsize=9)
        ax.set_title(f"{cell_title(dataset, arch)}\n(★ at the left: clean test accuracy)",
                     fontsize=9)
        ax.tick_params(labelsize=MIN_FONT_PT)
        ax.grid(alpha=0.3)
    fig.legend(list(handles.values()), [label(DEFENSE_LABELS, d) for d in handles],
               loc="outside right upper", fontsize=MIN_FONT_PT, frameon=False,
               title=f"{WILSON_NOTE}\n(seeds pooled)", title_fontsize=MIN_FONT_PT)
    _save(fig, out_png, layout=False)


def _spec_title(spec: Mapping[str, Any]) -> str:
    """A regression spec in a reader's words, on two lines, e.g. ``Table 15, generic defenses``
    / ``OLS on test acc. + robust acc. at ε 0.0025, 0.0005, 1e-05`` (the spec's id, which names
    no table to a reader, only where the spec carries no table)."""
    table = str(spec.get("table", ""))
    if not table.startswith("T"):
        return str(spec["name"])
    terms, eps = [], []
    for r in spec.get("regressors", []):
        if r.startswith("robust_acc_eps"):
            eps.append(r.removeprefix("robust_acc_eps"))
        else:
            terms.append("test acc." if r == spec.get("accuracy_column", "test_acc") else r)
    if eps:
        terms.append(f"robust acc. at ε {', '.join(eps)}")
    sample = spec.get("sample_name")
    head = f"Table {table[1:]}" + (f", {sample} defenses" if sample else "")
    controls = str(spec.get("controls", "none"))
    tail = "" if controls == "none" else f"; controls {controls.replace('_x_', ' × ')}"
    return f"{head}\n{spec['family'].upper()} on {' + '.join(terms)}{tail}"


def observed_vs_predicted(summary: pd.DataFrame, spec: dict, out_png: str | Path) -> dict:
    """Figure 2: observed leakage against the leakage predicted by one regression spec
    (normally Table 5's joint OLS, T15_ppa_generic_joint_ols), one point per model, one
    colour/marker per defense (legend beside the axes), with the 45-degree line; R2 and MAE
    in the title. Returns n, R2 and MAE, and the plotted arrays (``arrays``: per model
    ``x`` (predicted), ``x_low``/``x_high`` and ``y`` (observed), ``y_low``/``y_high``).

    Both axes are estimates, both carry 95% intervals: observed leakage (a rate
    ``<attack>_attacc1``/``_attacc5``) its Wilson interval over the model's
    ``<attack>_n_images`` attacked images; predicted leakage the 95% interval of the fitted
    mean (statsmodels ``get_prediction``, with the fit's own covariance: HC2 t for OLS, Wald
    for Beta). A summary without the count column is an error (:func:`require_counts`), as
    is a response that is no such rate or a spec that averages seeds (no per-model count).

    A spec that cannot be fitted on ``summary`` (:class:`atat.analysis.stats.regression.SpecSkipped`:
    too few models, missing columns, collinear design, ...) gives a figure that says so and
    why -- no point or number is drawn -- and ``{"skipped": reason}``, as a skipped spec's
    column in the regression tables does."""
    from atat.analysis.stats.regression import SpecSkipped, fit_spec

    try:
        fit = fit_spec(summary, spec)
    except SpecSkipped as exc:
        reason = str(exc)
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "\n".join(["Figure 2 not drawn:", f"spec {spec['name']} skipped",
                                      *textwrap.wrap(reason, 44)]),
                ha="center", va="center", fontsize=9, transform=ax.transAxes)
        _save(fig, out_png)
        return {"skipped": reason}
    from atat.analysis.stats.intervals import wilson_from_rate
    from atat.analysis.stats.regression import build_design

    data = fit["data"]
    res = fit["result"]
    response_col = fit["spec"]["response"]
    attack, _, metric = response_col.partition("_")
    if metric not in ("attacc1", "attacc5"):
        raise ValueError(f"Figure 2 (spec {spec['name']}): response {response_col} is not an "
                         "attack rate <attack>_attacc1/_attacc5, whose per-model 95% Wilson "
                         "interval the figure draws")
    if fit["spec"].get("aggregate_seeds") or fit["spec"].get("units") == "percent":
        raise ValueError(f"Figure 2 (spec {spec['name']}): the figure draws one point per model "
                         "with its Wilson interval; a spec that averages seeds or works in "
                         "percent has no per-model count")
    n_col = f"{attack}_n_images"
    require_counts(summary, [n_col], f"Figure 2 (spec {spec['name']})")
    X, _ = build_design(data, fit["spec"])
    if fit["spec"]["family"] == "ols":
        prediction = res.get_prediction(X)
    else:
        prediction = res.get_prediction(exog=X, which="mean")
    pred = pd.Series(np.asarray(prediction.predicted, float), index=data.index)
    band = np.asarray(prediction.conf_int(alpha=0.05), float)
    pred_lo = pd.Series(band[:, 0], index=data.index)
    pred_hi = pd.Series(band[:, 1], index=data.index)
    y = data[response_col]
    obs = []
    for i in data.index:
        n_images = summary.loc[i, n_col]
        if pd.isna(n_images):
            raise ValueError(f"Figure 2 (spec {spec['name']}): the {data.loc[i, 'defense']} "
                             f"model of row {i} has no {n_col} (its inversion record lacks "
                             "n_images)")
        obs.append(wilson_from_rate(float(summary.loc[i, response_col]), int(n_images)))
    y_lo = pd.Series([o[0] for o in obs], index=data.index)
    y_hi = pd.Series([o[1] for o in obs], index=data.index)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    atat = set(summary.loc[summary["defense_type"] == "atat", "defense"]
               if "defense_type" in summary.columns else [])
    others = n_atat = 0
    for defense, idx in data.groupby("defense", sort=True).groups.items():
        if defense in atat:
            style = {k: v for k, v in atat_style(n_atat).items() if k in ("color", "marker")}
            style, n_atat = dict(style, edgecolor="black", zorder=3), n_atat + 1
        else:
            style, others = defense_style(others), others + 1
        ax.errorbar(pred.loc[idx], y.loc[idx],
                    xerr=_err(pred.loc[idx], pred_lo.loc[idx], pred_hi.loc[idx]),
                    yerr=_err(y.loc[idx], y_lo.loc[idx], y_hi.loc[idx]), fmt="none",
                    ecolor=style["color"], elinewidth=0.7, capsize=1.5, alpha=0.7,
                    zorder=style.get("zorder", 2) - 0.5)
        ax.scatter(pred.loc[idx], y.loc[idx], label=label(DEFENSE_LABELS, defense), s=36,
                   **style)
    lo = float(min(pred_lo.min(), y_lo.min(), 0.0))
    hi = float(max(pred_hi.max(), y_hi.max(), 1.0))
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="observed = predicted")
    st = fit["stats"]
    r2 = st.get("r2", st.get("pseudo_r2"))
    response = metric_label(fit["spec"]["response"])
    ax.set_xlabel(f"predicted {response} ({fit['spec']['family'].upper()} fit)", fontsize=9)
    ax.set_ylabel(f"observed {response}", fontsize=9)
    ax.set_title(f"{_spec_title(fit['spec'])}\nR² = {r2:.3f}   MAE = {st['mae']:.3f}   "
                 f"n = {st['n']}", fontsize=9)
    ax.tick_params(labelsize=MIN_FONT_PT)
    ax.set_aspect("equal", adjustable="box")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=MIN_FONT_PT, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, frameon=False, title_fontsize=MIN_FONT_PT,
              title="bars: 95% intervals\nobserved: Wilson (images)\npredicted: fitted mean")
    _save(fig, out_png)
    arrays = {"x": pred.to_numpy(), "x_low": pred_lo.to_numpy(), "x_high": pred_hi.to_numpy(),
              "y": y.to_numpy(dtype=float), "y_low": y_lo.to_numpy(),
              "y_high": y_hi.to_numpy()}
    return {"n": int(st["n"]), "r2": float(r2), "mae": float(st["mae"]), "arrays": arrays}



#: Figure 4 privacy metrics: column suffix -> axis label, and whether lower = more private.
PRIVACY_METRICS = {"attacc1": ("AttAcc@1", True), "attacc5": ("AttAcc@5", True),
                   "evalconf": ("EvalConf", True), "dist_face": ("δ_face (squared L2)", False),
                   "dist_eval": ("δ_eval (squared L2)", False)}


def metric_label(column: str) -> str:
    """``ppa_attacc1`` -> ``PPA AttAcc@1`` (a column that is no attack metric unchanged)."""
    attack, _, metric = column.partition("_")
    if attack in ATTACK_NAMES and metric in PRIVACY_METRICS:
        return f"{ATTACK_NAMES[attack]} {PRIVACY_METRICS[metric][0]}"
    return column


#: Figure 4's metrics that are rates over attacked images (Wilson intervals, count
#: ``<attack>_n_images``); the others are means over per-class means (t intervals).
RATE_METRICS = ("attacc1", "attacc5")


def privacy_points(summary: pd.DataFrame, per_image: pd.DataFrame | None, *, attack: str,
                   metric: str, what: str = "Figure 4") -> pd.DataFrame:
    """One row per defense of ``summary`` (one cell's models; several seeds pooled) with
    clean test accuracy and ``<attack>_<metric>``, each with its 95% interval: columns
    ``defense``, ``defense_type``, ``test_acc``, ``test_acc_low``/``_high`` (Wilson over the
    models' ``n_test`` test images) and ``value``, ``value_low``/``_high``: for AttAcc@1/@5
    the Wilson interval over the attacked images (``<attack>_n_images``), for EvalConf and
    the distances the Student-t interval over per-class means of the models' rows of
    ``per_image`` (App. I.3, as Tables 27/28; one class: no interval, NaN). Defenses without
    a value of the metric are left out. Raises when a count or the per-image table is
    missing."""
    col = f"{attack}_{metric}"
    rate = metric in RATE_METRICS
    require_counts(summary, ["n_test"] + ([f"{attack}_n_images"] if rate else []), what)
    if not rate:
        if per_image is None:
            raise ValueError(f"{what}: {col}'s 95% t interval over per-class means needs the "
                             "per-image table (results/inversion/per_image.csv)")
        need = ["dataset", "architecture", "defense", "seed", "attack", "class", metric]
        missing = [c for c in need if c not in per_image.columns]
        if missing:
            raise ValueError(f"{what}: the per-image table lacks columns {missing} ({col})")
    rows = []
    for (defense, dtype), g in summary.groupby(["defense", "defense_type"], sort=True):
        g = g[g[col].notna()]
        if g.empty:
            continue
        acc = _wilson_bar(g["test_acc"], g["n_test"], f"{what}: {defense} test_acc")
        if rate:
            val = _wilson_bar(g[col], g[f"{attack}_n_images"], f"{what}: {defense} {col}")
        else:
            keys = g[["dataset", "architecture", "defense", "seed"]].drop_duplicates()
            mine = per_image[per_image["attack"] == attack].merge(keys, how="inner")
            if mine.empty or mine[metric].isna().all():
                raise ValueError(f"{what}: the per-image table has no {attack} rows with "
                                 f"{metric} of the {defense} model(s) {keys.to_dict('records')}")
            t = t_interval_mean(mine.groupby("class")[metric].mean())
            val = (t["mean"], t["ci_low"], t["ci_high"])
        rows.append({"defense": defense, "defense_type": dtype, "test_acc": acc[0],
                     "test_acc_low": acc[1], "test_acc_high": acc[2], "value": val[0],
                     "value_low": val[1], "value_high": val[2]})
    return pd.DataFrame(rows, columns=["defense", "defense_type", "test_acc", "test_acc_low",
                                       "test_acc_high", "value", "value_low", "value_high"])


def _accuracy_vs_privacy_figure(summary: pd.DataFrame, *, attacks: Sequence[str],
                                metrics: Sequence[str], architecture: str | None,
                                per_image: pd.DataFrame | None = None):
    """The figure of :func:`accuracy_vs_privacy`, labels placed, not saved: ``(fig, n)``."""
    df = summary
    if "treatment" in df.columns:
        df = df[df["treatment"].isna()]
    if architecture is not None:
        df = df[df["architecture"] == architecture]
    # §6's comparison: AT-AT and the seven baselines, NoDef as the reference; each the grid's
    # own model (a variant is named apart from its type: BiDO**, a dose-response λ), not §3's
    # experiments (permuted labels, Unseen-Pixels), which have their own Table 3 and Figure 1
    df = df[(df["defense"] == df["defense_type"]) & df["defense_type"].isin(FIGURE4_TYPES)]
    present = {(a, m) for a in attacks for m in metrics if f"{a}_{m}" in df.columns
               and df[f"{a}_{m}"].notna().any()}
    datasets = sorted(df["dataset"].unique())
    if not present or not datasets:
        raise ValueError("no inversion metric columns in the summary: nothing to plot")
    # one row per (attack, metric), one column per dataset: the paper's Fig. 4 panels, stacked
    # so that the figure grows downwards (a report scrolls; 15 panels side by side did not fit
    # a screen's width at a readable size)
    rows = [(a, m) for a in attacks for m in metrics if (a, m) in present]
    fig, axes = plt.subplots(len(rows), len(datasets), squeeze=False,
                             figsize=(4.6 * len(datasets), 3.8 * len(rows)))
    drawn = 0
    to_label = []
    for i, (attack, metric) in enumerate(rows):
        for j, dataset in enumerate(datasets):
            ax = axes[i][j]
            col = f"{attack}_{metric}"
            name, lower_private = PRIVACY_METRICS.get(metric, (metric, True))
            part = privacy_points(df[df["dataset"] == dataset], per_image, attack=attack,
                                  metric=metric)
            if part.empty:              # the attack did not run on this cell (a budget choice)
                ax.axis("off")
                ax.text(0.5, 0.5, f"{label(ATTACK_NAMES, attack)} not run on\n"
                        f"{cell_title(dataset, architecture)}", ha="center", va="center",
                        fontsize=9, color="0.4", transform=ax.transAxes)
                continue
            part = part.assign(is_atat=part["defense_type"] == "atat",
                               name=[label(DEFENSE_LABELS, d) for d in part["defense"]])
            part = part.sort_values(["is_atat", "name"], ascending=[False, True])
            for r in part.itertuples(index=False):
                colour = "tab:red" if r.is_atat else "tab:blue"
                ax.errorbar([r.test_acc], [r.value],
                            xerr=_err([r.test_acc], [r.test_acc_low], [r.test_acc_high]),
                            yerr=_err([r.value], [r.value_low], [r.value_high]), fmt="none",
                            ecolor=colour, elinewidth=0.8, capsize=2, alpha=0.6,
                            zorder=2.5 if r.is_atat else 1.8, label=r.name)
                ax.scatter(r.test_acc, r.value, s=90 if r.is_atat else 40,
                           color="tab:red" if r.is_atat else "tab:blue",
                           zorder=3 if r.is_atat else 2,
                           edgecolor="black" if r.is_atat else "none")
            ax.margins(0.15)
            ax.autoscale_view()
            ax.set_xlim(ax.get_xlim())
            ax.set_ylim(ax.get_ylim())
            ax.set_xlabel("clean test accuracy (fraction)", fontsize=9)
            ax.set_ylabel(f"{label(ATTACK_NAMES, attack)} {name}\n"
                          f"({'lower' if lower_private else 'higher'} = more private)",
                          fontsize=9)
            ax.set_title(cell_title(dataset, architecture), fontsize=9)
            ax.tick_params(labelsize=MIN_FONT_PT)
            ax.grid(alpha=0.3)
            to_label.append((ax, part))
            drawn += 1
    kinds = ["Wilson score (clean test accuracy" + (
        ", AttAcc" if any(m in RATE_METRICS for _, m in rows) else "") + ")"]
    if any(m not in RATE_METRICS for _, m in rows):
        kinds.append("Student t over per-class means (EvalConf, δ)")
    # at a fixed distance from the top edge (a fraction of the height would sink into the
    # first row of a tall figure), so that tight_layout keeps the panels below it
    fig.suptitle(wrap_title(f"Bars: 95% intervals, {'; '.join(kinds)}; seeds pooled",
                            4.6 * len(datasets) - 0.3, 9), fontsize=9, va="top",
                 y=1 - 0.08 / fig.get_figheight())
    fig.tight_layout()
    fig.canvas.draw()                   # once: the layout is final, the labels do not move it
    renderer = fig.canvas.get_renderer()
    for ax, part in to_label:
        place_labels(ax, part["test_acc"].tolist(), part["value"].tolist(),
                     part["name"].tolist(), marker_px=11.0, renderer=renderer)
    return fig, drawn


def accuracy_vs_privacy(summary: pd.DataFrame, out_png: str | Path, *,
                        attacks: Sequence[str] = ("ppa", "ifgmi", "ppdg"),
                        metrics: Sequence[str] = ("attacc1",),
                        architecture: str | None = "resnet152",
                        per_image: pd.DataFrame | None = None) -> int:
    """Figure 4: clean test accuracy (x) against each privacy metric (y) for AT-AT, the seven
    baselines and NoDef (:data:`atat.analysis.paper.FIGURE4_TYPES`, each cell's own model of each),
    one row of panels per (attack, metric) and one column per dataset; AT-AT in red and larger.
    Each point is labelled with its defense, the labels placed so that none overlaps another
    or a point (:func:`place_labels`; a leader line joins a label set away from its point).
    Only attack/metric columns present in ``summary`` are drawn; returns the number of panels
    (raises if there is none). Both axes carry 95% intervals (:func:`privacy_points`: Wilson
    for test accuracy and AttAcc, t over per-class means of ``per_image`` for EvalConf and δ;
    the figure's title says so); a missing count or per-image table is an error."""
    fig, drawn = _accuracy_vs_privacy_figure(summary, attacks=attacks, metrics=metrics,
                                             architecture=architecture, per_image=per_image)
    _save(fig, out_png, layout=False)
    return drawn


def first_training_images(dataset_root: str | Path, classes: Sequence[int], resolution: int
                          ) -> dict[int, "object"]:
    """The first private training image (manifest order) of each class, as uint8 [3, r, r]."""
    import torch

    from atat.data.loading import ManifestDataset, build_transform

    ds = ManifestDataset(dataset_root, "train", build_transform(resolution, train=False))
    out = {}
    for c in classes:
        idx = ds.targets.index(int(c)) if int(c) in ds.targets else None
        if idx is None:
            raise ValueError(f"{dataset_root}: no training image of class {c}")
        x, _ = ds[idx]
        out[int(c)] = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return out


def class_names(dataset_root: str | Path) -> list[str]:
    """The dataset's class names (``meta.json``), index = label."""
    from atat.data.manifest import read_dataset

    return [str(n) for n in read_dataset(dataset_root, check_files=False)[1]["class_names"]]


def class_label(names: Sequence[str], c: int, width: int = 16) -> str:
    """``3`` or ``3 Aaron Eckhart`` (a name that says more than the number), shortened."""
    name = names[c] if 0 <= c < len(names) else ""
    numbered = re.fullmatch(rf"\D*0*{c}", name) is not None      # "priv_0003" says no more
    text = f"{c}" if not name or numbered else f"{c} {name}"
    return textwrap.shorten(text, width, placeholder="…") if len(text) > width else text


#: Width of one image cell of the reconstruction grids and Figures 1/5 (inches): 150 px at
#: :data:`DPI`, so a 32 px image is drawn ~4.7x (nearest-neighbour), a 128 px one ~1.2x.
CELL_IN = 1.25


def _reconstruction_grid_figure(best_images: Mapping[str, str | Path],
                                dataset_root: str | Path, *, n_classes: int, title: str):
    import torch

    loaded = {d: io.torch_load(p) for d, p in best_images.items()}
    common = sorted(set.intersection(*(set(v) for v in loaded.values()))) if loaded else []
    classes = [int(c) for c in common[:n_classes]]
    if not classes:
        raise ValueError("no class was attacked in every model of the figure")
    first = loaded[next(iter(loaded))][classes[0]]["image"]
    reals = first_training_images(dataset_root, classes, int(first.shape[-1]))
    names = class_names(dataset_root)
    cols = ["training image", *[label(DEFENSE_LABELS, d) for d in loaded]]
    titles = [wrap_title(t, CELL_IN - 0.1) for t in cols]
    title_lines = max(t.count("\n") + 1 for t in titles)
    width = CELL_IN * len(cols) + 0.5
    fig, axes = plt.subplots(len(classes), len(cols), squeeze=False,
                             figsize=(width, (CELL_IN + 0.3) * len(classes)
                                      + 0.16 * title_lines + 0.6))
    for r, c in enumerate(classes):
        row = [(reals[c], None)] + [(v[c]["image"], v[c]["evalconf"]) for v in loaded.values()]
        for k, (img, conf) in enumerate(row):
            ax = axes[r][k]
            ax.imshow(torch.as_tensor(img).permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(titles[k], fontsize=MIN_FONT_PT)
            if k == 0:
                ax.set_ylabel(wrap_title(f"class {class_label(names, c)}", CELL_IN),
                              fontsize=MIN_FONT_PT)
            if conf is not None:
                ax.set_xlabel(f"EvalConf {conf:.2f}", fontsize=MIN_FONT_PT)
    if title:
        fig.suptitle(wrap_title(title, width - 0.3, 9), fontsize=9)
    fig.tight_layout()
    return fig, classes


def reconstruction_grid(best_images: Mapping[str, str | Path], dataset_root: str | Path,
                        out_png: str | Path, *, n_classes: int = 4, title: str = "") -> list[int]:
    """Paper Fig. 3/6: per class (rows) a training image of the class beside each defense's
    reconstruction (columns), the reconstruction chosen by maximum evaluation-model
    confidence (not cherry-picked). ``best_images`` maps a defense to its ``best_images.pt``.
    Rows are the first ``n_classes`` classes every defense attacked. Column titles are wrapped
    to their column (:func:`wrap_title`), so they never run into each other whatever the
    number of columns; images are drawn :data:`CELL_IN` inches wide with nearest-neighbour
    upscaling. Returns the classes shown."""
    fig, classes = _reconstruction_grid_figure(best_images, dataset_root, n_classes=n_classes,
                                               title=title)
    _save(fig, out_png, layout=False)
    return classes


def unseen_pixels_figure(mask_model: str | Path, dataset_root: str | Path,
                         best_images: str | Path, out_png: str | Path, *,
                         n_classes: int = 3) -> dict:
    """Paper Fig. 1: per class a training image, the same image as the Unseen-Pixels model
    saw it (deleted pixels black) and the PPA reconstruction from that model (resized to the
    training resolution). Images drawn :data:`CELL_IN` inches wide, nearest-neighbour.
    Returns the classes shown and the kept pixel fraction."""
    import torch
    import torch.nn.functional as F

    from atat.training.defenses.pixel_mask import binarize, load_mask

    mask = binarize(load_mask(mask_model))                     # (3, H, W) in {0, 1}
    best = io.torch_load(best_images)
    classes = sorted(best)[:n_classes]
    if not classes:
        raise ValueError(f"{best_images}: no reconstruction")
    res = int(mask.shape[-1])
    reals = first_training_images(dataset_root, classes, res)
    names = class_names(dataset_root)
    kept = float(mask.amax(dim=0).mean())
    fig, axes = plt.subplots(len(classes), 3, squeeze=False,
                             figsize=(3 * CELL_IN + 0.6, (CELL_IN + 0.15) * len(classes) + 0.5))
    for r, c in enumerate(classes):
        masked = (reals[c].float() * mask).round().to(torch.uint8)
        recon = best[c]["image"].float()[None]
        recon = F.interpolate(recon, size=(res, res), mode="bilinear", antialias=True,
                              align_corners=False)[0].clamp(0, 255).to(torch.uint8)
        for k, (img, title) in enumerate([(reals[c], "original"),
                                          (masked, f"as trained on\n({kept:.1%} pixels kept)"),
                                          (recon, "PPA\nreconstruction")]):
            ax = axes[r][k]
            ax.imshow(img.permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(title, fontsize=MIN_FONT_PT)
            if k == 0:
                ax.set_ylabel(wrap_title(f"class {class_label(names, c)}", CELL_IN),
                              fontsize=MIN_FONT_PT)
    _save(fig, out_png)
    return {"classes": classes, "kept_pixel_fraction": kept}


def select_adversarial_examples(misclassified: Mapping[float, Sequence[bool]], n: int
                                ) -> list[int]:
    """Figure 5's rows among a pool of clean-correct candidates (positions 0..P-1, in the
    pool's seeded order): the candidates whose adversarial example is misclassified at the
    smallest epsilon come first (lexicographic over ascending epsilon, misclassified before
    not), ties broken by pool position; the first ``n``. So at the smallest epsilon where
    any candidate flips, the first min(n, number flipped) rows flip there (and, the flips
    being nested in epsilon, at every larger one too)."""
    eps = sorted(misclassified)
    size = len(misclassified[eps[0]]) if eps else 0
    if any(len(misclassified[e]) != size for e in eps):
        raise ValueError("misclassified: one flag per pool candidate at every epsilon")
    order = sorted(range(size), key=lambda i: (tuple(not bool(misclassified[e][i])
                                                      for e in eps), i))
    return order[:n]


def clean_correct_pool(forward, dataset, *, pool_size: int, seed: int, batch_size: int = 32
                       ) -> tuple[list[int], int]:
    """Test images the model classifies correctly when clean: the dataset is visited in a
    seeded random order (``torch.randperm`` with ``seed``) and the first ``pool_size``
    correctly classified ones are kept. Returns their dataset indices and how many images
    were classified to find them."""
    import torch

    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    pool: list[int] = []
    seen = 0
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        x = torch.stack([dataset[i][0] for i in idx])
        y = torch.tensor([dataset.targets[i] for i in idx])
        with torch.no_grad():
            ok = (forward(x).argmax(1) == y).tolist()
        for i, good in zip(idx, ok):
            seen += 1
            if good:
                pool.append(i)
                if len(pool) == pool_size:
                    return pool, seen
    return pool, seen


def adversarial_examples_figure(model_path: str | Path, dataset_root: str | Path,
                                epsilons: Sequence[float], out_png: str | Path, *,
                                n_images: int = 3, iterations: int = 20, seed: int = 0,
                                pool_size: int = 8) -> dict:
    """Paper Fig. 5: test images and their untargeted L∞ PGD adversarial examples at each
    epsilon ([0, 1] pixel units, i.e. 2·eps in the model's [-1, 1] input space; step
    2.5·eps/iterations, random start drawn from ``seed``).

    Which images: a pool of ``pool_size`` test images the model classifies correctly when
    clean (:func:`clean_correct_pool`, seeded order) is attacked at every epsilon; the rows
    are the ``n_images`` of them whose adversarial example is misclassified at the smallest
    epsilon (:func:`select_adversarial_examples`). Each column title gives how many of the
    pool flip at that epsilon (or says none does); under each image its true class and the
    model's prediction (red: misclassified). 32 px images are drawn ~4.7x, nearest-neighbour.
    Cost: ``pool_size`` x len(epsilons) x ``iterations`` forward/backward passes (8 x 4 x 20 by
    default; the figure used to attack its 3 shown images only).

    Returns per epsilon the fraction of the pool misclassified (``flipped``) and the largest
    perturbation (``linf``, pixel units), the pool size, the rows' dataset indices
    (``shown``), their true classes and clean / adversarial predictions."""
    import torch

    from atat.data.loading import ManifestDataset, build_transform
    from atat.training.pgd import pgd
    from atat.training.train import load_model

    model, defense, ckpt = load_model(model_path)
    ds = ManifestDataset(dataset_root, "test", build_transform(int(ckpt["resolution"]),
                                                                  train=False))

    def forward(inp):
        return defense.logits(model, inp)

    eps_list = sorted(float(e) for e in epsilons)
    pool, scanned = clean_correct_pool(forward, ds, pool_size=pool_size, seed=seed)
    info: dict = {"model_id": ckpt["model_id"], "pool": len(pool), "scanned": scanned,
                  "flipped": {}, "linf": {}, "shown": [], "true": [], "clean_pred": [],
                  "adv_pred": {}}
    if not pool:
        fig, ax = plt.subplots(figsize=(4.6, 2.0))
        ax.axis("off")
        ax.text(0.5, 0.5, "\n".join(textwrap.wrap(
            f"Figure 5 not drawn: {ckpt['model_id']} classifies none of the {scanned} test "
            "images correctly, so no adversarial flip can be shown.", 52)),
            ha="center", va="center", fontsize=9, transform=ax.transAxes)
        _save(fig, out_png)
        return info
    x = torch.stack([ds[i][0] for i in pool])
    y = torch.tensor([ds.targets[i] for i in pool])
    gen = torch.Generator().manual_seed(seed)
    advs, preds = {}, {}
    for eps in eps_list:
        e = 2.0 * eps
        adv = pgd(forward, x, y, epsilon=e, step_size=2.5 * e / iterations,
                  iterations=iterations, targeted=False, generator=gen)
        with torch.no_grad():
            preds[eps] = forward(adv).argmax(1)
        advs[eps] = adv
        info["linf"][eps] = float((adv - x).abs().max()) / 2.0   # back to [0, 1] pixel units
        info["flipped"][eps] = float((preds[eps] != y).float().mean())
    rows = select_adversarial_examples({e: (preds[e] != y).tolist() for e in eps_list},
                                       n_images)
    names = [str(n) for n in ds.class_names]
    info["shown"] = [pool[i] for i in rows]
    info["true"] = [int(y[i]) for i in rows]
    info["clean_pred"] = info["true"]             # the pool is clean-correct by construction
    info["adv_pred"] = {e: [int(preds[e][i]) for i in rows] for e in eps_list}

    def title(eps: float) -> str:
        k = int((preds[eps] != y).sum())
        flips = (f"{k}/{len(pool)} flipped" if k else f"none of {len(pool)} flipped")
        return f"ε = {eps:g}\n{flips}"

    columns = [("clean", x, None)] + [(title(e), advs[e], preds[e]) for e in eps_list]
    fig, axes = plt.subplots(len(rows), len(columns), squeeze=False,
                             figsize=(CELL_IN * 1.15 * len(columns) + 0.3,
                                      (CELL_IN + 0.55) * len(rows) + 0.9))
    for k, (head, imgs, pred) in enumerate(columns):
        for r, i in enumerate(rows):
            ax = axes[r][k]
            ax.imshow(((imgs[i].clamp(-1, 1) + 1) / 2).permute(1, 2, 0).numpy(),
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            true = int(y[i])
            if pred is None:
                text = f"true {class_label(names, true, 14)}\npred {true} (correct)"
                colour = "black"
            else:
                p = int(pred[i])
                wrong = p != true
                text = (f"pred {class_label(names, p, 14)}\n"
                        + ("misclassified" if wrong else "unchanged"))
                colour = "tab:red" if wrong else "0.35"
            ax.set_xlabel(text, fontsize=MIN_FONT_PT, color=colour)
            if r == 0:
                ax.set_title(head, fontsize=MIN_FONT_PT + 1)
    fig.suptitle(wrap_title(f"Untargeted L∞ PGD ({iterations} steps) adversarial examples, "
                            f"{ckpt['model_id']}. Rows: {len(rows)} of {len(pool)} correctly "
                            f"classified test images (seed {seed}), those misclassified at the "
                            "smallest ε first", CELL_IN * 1.15 * len(columns), 9), fontsize=9)
    _save(fig, out_png)
    return info
