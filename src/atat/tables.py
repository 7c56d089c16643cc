"""Paper tables as CSV + Markdown + LaTeX, built only from results/summary.csv."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from atat import io
from atat.summary import robust_column

DEFENSE_LABELS = {"nodef": "NoDef", "atat": "AT-AT", "mid": "MID", "bido": "BiDO",
                  "tldmi": "TL-DMI", "tldmi5": "TL-DMI-5", "negls": "NegLS", "rolss": "RoLSS",
                  "rolss_ssf": "RoLSS-SSF", "trap_mid": "Trap-MID", "at": "AT"}
DATASET_LABELS = {"facescrub": "FaceScrub", "celeba": "CelebA", "stanford_dogs": "Stanford Dogs",
                  "synthfaces": "SynthFaces"}


def to_markdown(df: pd.DataFrame, caption: str, float_fmt: str = "{:.3f}") -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return "" if pd.isna(v) else float_fmt.format(v)
        return str(v)

    header = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return f"{caption}\n\n" + "\n".join([header, sep, *rows]) + "\n"


def write_table(df: pd.DataFrame, outputs: Sequence[str | Path], caption: str) -> None:
    """Write ``df`` to the .csv, .md and .tex paths among ``outputs`` (atomically)."""
    for out in map(Path, outputs):
        if out.suffix == ".csv":
            with io.atomic_path(out) as tmp:
                df.to_csv(tmp, index=False)
        elif out.suffix == ".md":
            io.write_text(out, to_markdown(df, caption))
        elif out.suffix == ".tex":
            io.write_text(out, df.to_latex(index=False, float_format="%.3f", caption=caption,
                                           na_rep="--"))
        else:
            raise ValueError(f"unknown table format: {out}")


def table4(summary_csv: str | Path, outputs: Sequence[str | Path], *, architecture: str,
           epsilons: Sequence[float]) -> pd.DataFrame:
    """Table 4: leakage vs clean/robust accuracy under AutoAttack at each epsilon, per
    dataset and defense, for the main architecture. The leakage column (PPA AttAcc@1) is
    included only when the summary has it (i.e. once model inversion has run)."""
    summary = pd.read_csv(summary_csv)
    df = summary[summary["architecture"] == architecture]
    if df.empty:
        raise ValueError(f"summary has no models of architecture '{architecture}'")
    cols = {"dataset": "Dataset", "defense": "Defense"}
    if "ppa_attacc1" in df.columns:
        cols["ppa_attacc1"] = "PPA AttAcc@1"
    cols["test_acc"] = "Test acc."
    for eps in epsilons:
        cols[robust_column(eps)] = f"Acc eps={eps:g}"
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"summary lacks columns {missing} needed by Table 4")
    # mean over seeds (one seed per cell in the paper)
    table = (df[list(cols)].groupby(["dataset", "defense"], sort=False).mean(numeric_only=True)
             .reset_index())
    table["dataset"] = table["dataset"].map(lambda d: DATASET_LABELS.get(d, d))
    table["defense"] = table["defense"].map(lambda d: DEFENSE_LABELS.get(d, d))
    table = table.rename(columns=cols)
    n_seeds = df.groupby(["dataset", "defense"]).size().max()
    caption = (f"Table 4: Leakage (AttAcc@1) vs. clean/robust accuracies under AutoAttack for "
               f"various eps ({architecture}; worst case over the attacks run; "
               f"mean over {n_seeds} seed(s)).")
    if "ppa_attacc1" not in df.columns:
        caption += " PPA AttAcc@1 is not in the summary yet (model inversion not run)."
    write_table(table, outputs, caption)
    return table
