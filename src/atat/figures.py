"""Figures with matplotlib (Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from atat import io  # noqa: E402
from atat.summary import robust_column  # noqa: E402
from atat.tables import DEFENSE_LABELS  # noqa: E402


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
