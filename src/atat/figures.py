"""Figures with matplotlib (Agg backend, no display)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from atat import io  # noqa: E402
from atat.summary import robust_column  # noqa: E402
from atat.paper import DEFENSE_LABELS  # noqa: E402


def robust_accuracy_vs_epsilon(summary_csv: str | Path, out_png: str | Path, *,
                               epsilons: Sequence[float]) -> None:
    """One panel per (dataset, architecture): worst-case AutoAttack robust accuracy against
    epsilon (log scale) for each defense; clean test accuracy drawn at the left edge."""
    df = pd.read_csv(summary_csv)
    eps = sorted(float(e) for e in epsilons)
    cols = [robust_column(e) for e in eps]
    panels = list(df.groupby(["dataset", "architecture"], sort=True))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, ((dataset, arch), part) in zip(axes[0], panels):
        for defense, rows in part.groupby("defense", sort=False):
            mean = rows[cols].mean()
            style = dict(lw=2.5, color="tab:red") if rows["defense_type"].iloc[0] == "atat" else {}
            line, = ax.plot(eps, mean.values, marker="o",
                            label=DEFENSE_LABELS.get(defense, defense), **style)
            ax.scatter([eps[0] / 3], [rows["test_acc"].mean()], marker="*", s=80,
                       color=line.get_color())
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("AutoAttack L-inf epsilon ([0,1] pixels)")
        ax.set_ylabel("robust accuracy (worst case)")
        ax.set_title(f"{dataset} / {arch}  (star: clean test acc.)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    with io.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def _save(fig, out_png: str | Path) -> None:
    fig.tight_layout()
    with io.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def observed_vs_predicted(summary: pd.DataFrame, spec: dict, out_png: str | Path) -> dict:
    """Figure 2: observed leakage against the leakage predicted by one regression spec
    (normally Table 5's joint OLS, T15_ppa_generic_joint_ols), one point per model coloured
    by defense, with the 45-degree line; R2 and MAE in the title. Returns n, R2 and MAE.

    A spec that cannot be fitted on ``summary`` (:class:`atat.stats.regression.SpecSkipped`:
    too few models, missing columns, collinear design, ...) gives a figure that says so and
    why -- no point or number is drawn -- and ``{"skipped": reason}``, as a skipped spec's
    column in the regression tables does."""
    from atat.stats.regression import SpecSkipped, fit_spec

    try:
        fit = fit_spec(summary, spec)
    except SpecSkipped as exc:
        reason = str(exc)
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        ax.axis("off")
        ax.text(0.5, 0.5, "\n".join(["Figure 2 not drawn:", f"spec {spec['name']} skipped",
                                      *textwrap.wrap(reason, 48)]),
                ha="center", va="center", fontsize=8, transform=ax.transAxes)
        _save(fig, out_png)
        return {"skipped": reason}
    data = fit["data"]
    res = fit["result"]
    if fit["spec"]["family"] == "ols":
        pred = res.fittedvalues
    else:
        from atat.stats.regression import build_design

        X, _ = build_design(data, fit["spec"])
        pred = res.model.predict(res.params, exog=X, which="mean")
    pred = pd.Series(pred.to_numpy() if hasattr(pred, "to_numpy") else pred, index=data.index)
    y = data[fit["spec"]["response"]]
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    for defense, idx in data.groupby("defense", sort=True).groups.items():
        ax.scatter(pred.loc[idx], y.loc[idx], label=DEFENSE_LABELS.get(defense, defense), s=36)
    lo = float(min(pred.min(), y.min(), 0.0))
    hi = float(max(pred.max(), y.max(), 1.0))
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="observed = predicted")
    st = fit["stats"]
    r2 = st.get("r2", st.get("pseudo_r2"))
    ax.set_xlabel(f"predicted {fit['spec']['response']} ({fit['spec']['family'].upper()})")
    ax.set_ylabel(f"observed {fit['spec']['response']}")
    ax.set_title(f"{fit['spec']['name']}\nR2={r2:.3f}  MAE={st['mae']:.3f}  n={st['n']}",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, out_png)
    return {"n": int(st["n"]), "r2": float(r2), "mae": float(st["mae"])}


#: Figure 4 privacy metrics: column suffix -> axis label, and whether lower = more private.
PRIVACY_METRICS = {"attacc1": ("AttAcc@1", True), "attacc5": ("AttAcc@5", True),
                   "evalconf": ("EvalConf", True), "dist_face": ("delta_face (L2)", False),
                   "dist_eval": ("delta_eval (L2)", False)}


def accuracy_vs_privacy(summary: pd.DataFrame, out_png: str | Path, *,
                        attacks: Sequence[str] = ("ppa", "ifgmi", "ppdg"),
                        metrics: Sequence[str] = ("attacc1",),
                        architecture: str | None = "resnet152") -> int:
    """Figure 4: clean test accuracy (x) against each privacy metric (y) for every defense,
    one row of panels per attack and one column per (metric, dataset); AT-AT in red and larger.
    Only attack/metric columns present in ``summary`` are drawn; returns the number of panels
    (raises if there is none)."""
    df = summary
    if "treatment" in df.columns:
        df = df[df["treatment"].isna()]
    if architecture is not None:
        df = df[df["architecture"] == architecture]
    present = {(a, m) for a in attacks for m in metrics if f"{a}_{m}" in df.columns
               and df[f"{a}_{m}"].notna().any()}
    datasets = sorted(df["dataset"].unique())
    if not present or not datasets:
        raise ValueError("no inversion metric columns in the summary: nothing to plot")
    # one row per attack, one column per (metric, dataset): a grid like the paper's Fig. 4
    rows = [a for a in attacks if any((a, m) in present for m in metrics)]
    cols = [(m, d) for m in metrics if any((a, m) in present for a in attacks) for d in datasets]
    fig, axes = plt.subplots(len(rows), len(cols), squeeze=False,
                             figsize=(4.0 * len(cols), 3.3 * len(rows)))
    drawn = 0
    for i, attack in enumerate(rows):
        for j, (metric, dataset) in enumerate(cols):
            ax = axes[i][j]
            if (attack, metric) not in present:
                ax.axis("off")
                continue
            col = f"{attack}_{metric}"
            label, lower_private = PRIVACY_METRICS.get(metric, (metric, True))
            part = df[df["dataset"] == dataset].groupby(["defense", "defense_type"],
                                                          as_index=False)[["test_acc", col]].mean()
            for r in part.itertuples(index=False):
                atat = r.defense_type == "atat"
                ax.scatter(r.test_acc, getattr(r, col), s=90 if atat else 40,
                           color="tab:red" if atat else "tab:blue", zorder=3 if atat else 2,
                           edgecolor="black" if atat else "none")
                ax.annotate(DEFENSE_LABELS.get(r.defense, r.defense), (r.test_acc, getattr(r, col)),
                            fontsize=7, xytext=(3, 3), textcoords="offset points")
            ax.set_xlabel("clean test accuracy")
            ax.set_ylabel(f"{attack.upper()} {label} ({'lower' if lower_private else 'higher'}"
                          " = more private)", fontsize=8)
            ax.set_title(f"{dataset}" + (f" / {architecture}" if architecture else ""), fontsize=9)
            ax.grid(alpha=0.3)
            drawn += 1
    _save(fig, out_png)
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


def reconstruction_grid(best_images: Mapping[str, str | Path], dataset_root: str | Path,
                        out_png: str | Path, *, n_classes: int = 4, title: str = "") -> list[int]:
    """Paper Fig. 3/6: per class (rows) a training image of the class beside each defense's
    reconstruction (columns), the reconstruction chosen by maximum evaluation-model
    confidence (not cherry-picked). ``best_images`` maps a defense to its ``best_images.pt``.
    Rows are the first ``n_classes`` classes every defense attacked. Returns those classes."""
    import torch

    loaded = {d: io.torch_load(p) for d, p in best_images.items()}
    common = sorted(set.intersection(*(set(v) for v in loaded.values()))) if loaded else []
    classes = [int(c) for c in common[:n_classes]]
    if not classes:
        raise ValueError("no class was attacked in every model of the figure")
    first = loaded[next(iter(loaded))][classes[0]]["image"]
    reals = first_training_images(dataset_root, classes, int(first.shape[-1]))
    cols = ["training image", *[DEFENSE_LABELS.get(d, d) for d in loaded]]
    fig, axes = plt.subplots(len(classes), len(cols), squeeze=False,
                             figsize=(1.25 * len(cols), 1.35 * len(classes) + 0.4))
    for r, c in enumerate(classes):
        row = [(reals[c], None)] + [(v[c]["image"], v[c]["evalconf"]) for v in loaded.values()]
        for k, (img, conf) in enumerate(row):
            ax = axes[r][k]
            ax.imshow(torch.as_tensor(img).permute(1, 2, 0).numpy())
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(cols[k], fontsize=7)
            if k == 0:
                ax.set_ylabel(f"class {c}", fontsize=7)
            if conf is not None:
                ax.set_xlabel(f"conf {conf:.2f}", fontsize=6)
    if title:
        fig.suptitle(title, fontsize=8)
    _save(fig, out_png)
    return classes


def unseen_pixels_figure(mask_model: str | Path, dataset_root: str | Path,
                         best_images: str | Path, out_png: str | Path, *,
                         n_classes: int = 3) -> dict:
    """Paper Fig. 1: per class a training image, the same image as the Unseen-Pixels model
    saw it (deleted pixels black) and the PPA reconstruction from that model. Returns the
    classes shown and the kept pixel fraction."""
    import torch
    import torch.nn.functional as F

    from atat.defenses.pixel_mask import binarize, load_mask

    mask = binarize(load_mask(mask_model))                     # (3, H, W) in {0, 1}
    best = io.torch_load(best_images)
    classes = sorted(best)[:n_classes]
    if not classes:
        raise ValueError(f"{best_images}: no reconstruction")
    res = int(mask.shape[-1])
    reals = first_training_images(dataset_root, classes, res)
    kept = float(mask.amax(dim=0).mean())
    fig, axes = plt.subplots(len(classes), 3, squeeze=False,
                             figsize=(4.2, 1.45 * len(classes) + 0.5))
    for r, c in enumerate(classes):
        masked = (reals[c].float() * mask).round().to(torch.uint8)
        recon = best[c]["image"].float()[None]
        recon = F.interpolate(recon, size=(res, res), mode="bilinear", antialias=True,
                              align_corners=False)[0].clamp(0, 255).to(torch.uint8)
        for k, (img, title) in enumerate([(reals[c], "original"),
                                          (masked, f"pixels kept {kept:.1%}"),
                                          (recon, "PPA reconstruction")]):
            ax = axes[r][k]
            ax.imshow(img.permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(title, fontsize=7)
            if k == 0:
                ax.set_ylabel(f"class {c}", fontsize=7)
    _save(fig, out_png)
    return {"classes": classes, "kept_pixel_fraction": kept}


def adversarial_examples_figure(model_path: str | Path, dataset_root: str | Path,
                                epsilons: Sequence[float], out_png: str | Path, *,
                                n_images: int = 3, iterations: int = 20, seed: int = 0) -> dict:
    """Paper Fig. 5: test images and their untargeted L-inf PGD adversarial examples at each
    epsilon ([0, 1] pixel units, i.e. 2·eps in the model's [-1, 1] input space; step
    2.5·eps/iterations, random start), with the model's prediction under each image.
    Returns per epsilon the fraction of the shown images whose prediction changed and the
    largest perturbation (pixel units)."""
    import torch

    from atat.data.loading import make_loader
    from atat.pgd import pgd
    from atat.train import load_model

    model, defense, ckpt = load_model(model_path)
    loader = make_loader(dataset_root, "test", resolution=int(ckpt["resolution"]),
                         batch_size=n_images, train=False)
    x, y = next(iter(loader))

    def forward(inp):
        return defense.logits(model, inp)

    gen = torch.Generator().manual_seed(seed)
    columns = [("clean", x)]
    flipped, linf = {}, {}
    with torch.no_grad():
        clean_pred = forward(x).argmax(1)
    for eps in sorted(float(e) for e in epsilons):
        e = 2.0 * eps
        adv = pgd(forward, x, y, epsilon=e, step_size=2.5 * e / iterations,
                  iterations=iterations, targeted=False, generator=gen)
        columns.append((f"eps = {eps:g}", adv))
        linf[eps] = float((adv - x).abs().max()) / 2.0       # back to [0, 1] pixel units
        with torch.no_grad():
            flipped[eps] = float((forward(adv).argmax(1) != clean_pred).float().mean())
    fig, axes = plt.subplots(len(x), len(columns), squeeze=False,
                             figsize=(1.5 * len(columns), 1.6 * len(x) + 0.4))
    for k, (title, imgs) in enumerate(columns):
        with torch.no_grad():
            pred = forward(imgs).argmax(1)
        for r in range(len(x)):
            ax = axes[r][k]
            ax.imshow(((imgs[r].clamp(-1, 1) + 1) / 2).permute(1, 2, 0).numpy(),
                      interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(f"pred {int(pred[r])} (true {int(y[r])})", fontsize=6)
            if r == 0:
                ax.set_title(title, fontsize=7)
    fig.suptitle(f"PGD adversarial examples, {ckpt['model_id']}", fontsize=8)
    _save(fig, out_png)
    return {"flipped": flipped, "linf": linf, "model_id": ckpt["model_id"]}
