"""Paper tables as CSV + Markdown + LaTeX, built from results/summary.csv and the per-model
results (which runs go into which table, captions and labels: :mod:`atat.analysis.paper`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from atat.base import io
from atat.analysis.paper import (ARCH_LABELS, ATTACK_NAMES, DATASET_LABELS, DEFENSE_LABELS,
                        REGRESSION_TABLE_IDS, defense_types, output, robustness_table_number,
                        translate)
from atat.analysis.paper import MAIN_TABLES, main_table_layout
from atat.analysis.paper import label as _label
from atat.analysis.summary import robust_column

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
    labels = DEFENSE_LABELS.with_types(defense_types(df))
    table["defense"] = table["defense"].map(lambda d: labels.get(d, d))
    table = table.rename(columns=cols)
    n_seeds = df.groupby(["dataset", "defense"]).size().max()
    caption = (f"Table 4: Leakage (AttAcc@1) vs. clean/robust accuracies under AutoAttack for "
               f"various eps ({architecture}; worst case over the attacks run; "
               f"mean over {n_seeds} seed(s)).")
    if "ppa_attacc1" not in df.columns:
        caption += " PPA AttAcc@1 is not in the summary yet (model inversion not run)."
    write_table(table, outputs, caption)
    return table


# --------------------------------------------------------------------------- Tables 1, 8, 9
HSIC_TABLE_IDS = ["table1", "table8", "table9"]
#: The HSIC tables that show HSIC(Y, Zj) beside HSIC(X, Zj) (paper App. D.1 Table 8).
HSIC_TABLES_WITH_YZ = {"table8"}


def hsic_table(hsic_files: Sequence[str | Path], summary_csv: str | Path | None,
               outputs: Sequence[str | Path], *, table: str,
               cells_text: str | None = None, note: str | None = None) -> pd.DataFrame:
    """One HSIC table (CSV/Markdown/LaTeX; paper §3 Table 1, App. D Tables 8/9; rows and
    caption: :mod:`atat.analysis.paper`) from per-model HSIC JSONs of :func:`atat.measures.hsic_measure.measure_hsic`
    (which carry ``dataset``, ``architecture``, ``defense_name``, ``seed`` from the rule) and
    results/summary.csv (test accuracy; PPA AttAcc@1 only if the summary has it - it is never
    invented). Rows keep the order of ``hsic_files``; several seeds of a cell are averaged."""
    if table not in HSIC_TABLE_IDS:
        raise ValueError(f"unknown HSIC table '{table}' (known: {HSIC_TABLE_IDS})")
    entry = output(table)
    with_yz = table in HSIC_TABLES_WITH_YZ
    recs = []
    splits: set[str] = set()
    dtypes: set[str] = set()
    for path in hsic_files:
        r = io.read_json(path)
        dtypes.add(str((r.get("estimator") or {}).get("dtype", "float32")))
        for key in ("dataset", "architecture", "defense_name", "seed"):
            if key not in r:
                raise ValueError(f"{path}: HSIC file lacks '{key}' (written without meta?)")
        row: dict[str, Any] = {"dataset": r["dataset"], "architecture": r["architecture"],
                               "defense": r["defense_name"], "seed": int(r["seed"])}
        for j, layer in enumerate(r["layers"], 1):
            row[f"HSIC(X,Z{j})"] = r["hsic_xz"][layer]
            if with_yz:
                row[f"HSIC(Y,Z{j})"] = r["hsic_yz"][layer]
        row["n_batches"] = r["n_batches"]
        splits.add("augmented, shuffled train" if r.get("augmented", True)
                   else str(r.get("split")))
        recs.append(row)
    if not recs:
        raise ValueError(f"{table}: no HSIC files")
    df = pd.DataFrame(recs)
    keys = ["dataset", "architecture", "defense", "seed"]
    has_ppa = False
    types: dict[str, str] = {}
    if summary_csv is not None:
        summary = pd.read_csv(summary_csv)
        types = defense_types(summary)
        extra = ["test_acc"] + (["ppa_attacc1"] if "ppa_attacc1" in summary.columns else [])
        has_ppa = "ppa_attacc1" in extra
        summary = summary[keys + extra]
        df = df.merge(summary, on=keys, how="left", validate="one_to_one")
    value_cols = [c for c in df.columns if c not in keys]
    grouped = (df.groupby(["dataset", "architecture", "defense"], sort=False)[value_cols]
               .mean(numeric_only=True).reset_index())
    n_seeds = int(df.groupby(["dataset", "architecture", "defense"]).size().max())
    labels = entry.defense_labels(types)
    out = pd.DataFrame({
        "Dataset": grouped["dataset"].map(lambda d: DATASET_LABELS.get(d, d)),
        "Architecture": grouped["architecture"].map(lambda a: ARCH_LABELS.get(a, a)),
        "Defense": grouped["defense"].map(lambda d: labels.get(d, d)),
    })
    for c in [c for c in grouped.columns if c.startswith("HSIC")]:
        out[c] = grouped[c]
    if "test_acc" in grouped.columns:
        out["Test acc."] = grouped["test_acc"]
    if has_ppa:
        out["PPA AttAcc@1"] = grouped["ppa_attacc1"]
    cells = cells_text or ", ".join(sorted({f"{DATASET_LABELS.get(d, d)} "
                                            f"({ARCH_LABELS.get(a, a)})" for d, a in
                                            zip(grouped["dataset"], grouped["architecture"])}))
    caption = entry.caption.format(cells=cells)
    caption += (f" Mean over the {' / '.join(sorted(splits))} batches (as the authors' code "
                f"does) and over {n_seeds} seed(s); Zj = output of stage j; HSIC computed in "
                f"{' / '.join(sorted(dtypes))}.")
    if has_ppa:
        caption += " PPA AttAcc@1 measures reconstruction."
    else:
        caption += " PPA AttAcc@1 is not in the summary (model inversion not run)."
    if note:
        caption += " " + note
    write_table(out, outputs, caption)
    return out


# --------------------------------------------------------------------------- Tables 2, 3
def _rows_of(summary: pd.DataFrame, roles: Mapping[str, Sequence[str]], attack: str,
             cols: Mapping[str, str]) -> pd.DataFrame:
    """Rows of the given defense roles (role label -> defense names) per (dataset,
    architecture) cell, mean over seeds, with the columns ``cols`` (summary name -> label)."""
    rows = []
    labels = DEFENSE_LABELS.with_types(defense_types(summary))
    for (ds, arch), cell in summary.groupby(["dataset", "architecture"], sort=True):
        for label, names in roles.items():
            part = cell[cell["defense"].isin(list(names))]
            if part.empty:
                continue
            several = part["defense"].nunique() > 1  # e.g. TL-DMI and TL-DMI-5: name each
            for defense, g in part.groupby("defense", sort=False):
                row = {"Dataset": DATASET_LABELS.get(ds, ds),
                       "Architecture": ARCH_LABELS.get(arch, arch),
                       "Model": labels.get(defense, defense) if several else label}
                for col, out in cols.items():
                    row[out] = float(g[col].mean()) if col in g.columns else float("nan")
                rows.append(row)
    return pd.DataFrame(rows)


def table2(summary_csv: str | Path, outputs: Sequence[str | Path], *,
           permuted: Sequence[str], true_labels: Sequence[str], attack: str = "ppa"
           ) -> pd.DataFrame:
    """Table 2 (paper §3): PPA against models trained on permuted labels next to the same
    architecture trained on the true labels: training accuracy (on the labels fitted),
    test accuracy and the reconstruction distance (δ_face; δ_eval beside it). AttAcc is
    shown for completeness although the paper calls it ill-defined for permuted labels."""
    summary = pd.read_csv(summary_csv)
    cells = summary[summary["defense"].isin(list(permuted))][["dataset", "architecture"]]
    keep = summary.merge(cells.drop_duplicates(), on=["dataset", "architecture"])
    a = attack
    cols = {"train_acc": "Train acc.", "test_acc": "Test acc.",
            f"{a}_dist_face": f"{a.upper()} delta_face (L2)",
            f"{a}_dist_eval": f"{a.upper()} delta_eval", f"{a}_attacc1": f"{a.upper()} AttAcc@1"}
    table = _rows_of(keep, {"true labels": true_labels, "permuted labels": permuted}, a, cols)
    if table.empty:
        raise ValueError("no permuted-label model in the summary")
    write_table(table, outputs, output("table2").caption.format(attack=a.upper()))
    return table


def table3(summary_csv: str | Path, outputs: Sequence[str | Path], *,
           roles: Mapping[str, Sequence[str]], attack: str = "ppa") -> pd.DataFrame:
    """Table 3 (paper §3): the Unseen-Pixels model (trained on images with the learned mask
    applied) vs NoDef, an early-stopped NoDef of similar accuracy and TL-DMI, under PPA."""
    summary = pd.read_csv(summary_csv)
    unseen = roles.get("Unseen-Pixels", [])
    cells = summary[summary["defense"].isin(list(unseen))][["dataset", "architecture"]]
    keep = summary.merge(cells.drop_duplicates(), on=["dataset", "architecture"])
    a = attack
    cols = {"kept_pixel_fraction": "Pixels kept", "test_acc": "Test acc.",
            f"{a}_attacc1": f"{a.upper()} AttAcc@1", f"{a}_attacc5": f"{a.upper()} AttAcc@5",
            f"{a}_dist_face": f"{a.upper()} delta_face (L2)"}
    table = _rows_of(keep, roles, a, cols)
    if table.empty:
        raise ValueError("no Unseen-Pixels model in the summary")
    write_table(table, outputs, output("table3").caption.format(attack=a.upper()))
    return table


# --------------------------------------------------------------------------- Tables 11-14

ATTACK_LABELS = {"apgd-ce": "APGD-CE", "apgd-t": "APGD-T", "fab-t": "FAB-T", "square": "Square"}

def robustness_table(summary_csv: str | Path, outputs: Sequence[str | Path], *,
                     eps: float) -> pd.DataFrame:
    """Tables 11-14: AutoAttack robust accuracy at ``eps`` per dataset x architecture x
    defense, overall (worst case over the attacks) and per constituent attack, with the
    clean accuracy on the attacked examples and their number. Rows of the causal experiment
    (non-null ``treatment``) are left out (they belong to App. H); several seeds of a cell are
    averaged and counted in column ``Seeds``."""
    number = robustness_table_number(eps)
    if number is None:
        raise ValueError(f"epsilon {eps:g} has no robustness table in the paper (Tables 11-14)")
    df = pd.read_csv(summary_csv)
    if "treatment" in df.columns:
        df = df[df["treatment"].isna()]
    worst = robust_column(eps)
    if worst not in df.columns:
        raise ValueError(f"summary lacks column {worst}: AutoAttack at eps={eps:g} has not run")
    if df.empty:
        raise ValueError("summary has no (non-causal) models")
    cols = {f"aa_clean_acc_eps{format(float(eps), 'g')}": "Clean acc. (attacked set)",
            worst: "Robust acc. (worst case)"}
    for attack, label in ATTACK_LABELS.items():
        if robust_column(eps, attack) in df.columns:
            cols[robust_column(eps, attack)] = label
    cols = {c: v for c, v in cols.items() if c in df.columns}
    n_col = f"aa_n_examples_eps{format(float(eps), 'g')}"
    keys = ["dataset", "architecture", "defense"]
    grouped = df.groupby(keys, sort=False)
    table = grouped[list(cols)].mean().reset_index()
    table["Seeds"] = grouped.size().to_numpy()
    if n_col in df.columns:
        table["Examples"] = grouped[n_col].min().astype(int).to_numpy()
    table["dataset"] = table["dataset"].map(lambda d: _label(DATASET_LABELS, d))
    table["architecture"] = table["architecture"].map(lambda a: _label(ARCH_LABELS, a))
    labels = DEFENSE_LABELS.with_types(defense_types(df))
    table["defense"] = table["defense"].map(lambda d: _label(labels, d))
    table = table.rename(columns={"dataset": "Dataset", "architecture": "Architecture",
                                  "defense": "Defense", **cols})
    n_ex = sorted(set(df[n_col].dropna().astype(int))) if n_col in df.columns else []
    examples = (f"{n_ex[0]} validation set examples" if len(n_ex) == 1
                else f"{'/'.join(map(str, n_ex))} validation set examples")
    attacks = [ATTACK_LABELS[a] for a in ATTACK_LABELS if robust_column(eps, a) in df.columns]
    caption = (f"Table {number}: AutoAttack robust accuracies with eps={eps:g} "
               f"(L-inf, [0,1] pixels). Attack is on {examples}. 'Robust acc.' is the worst "
               f"case over the attacks run ({', '.join(attacks) or 'none recorded'}); the "
               "per-attack columns give each attack's own robust accuracy. "
               + precision_caption(df, eps))
    write_table(table, outputs, caption)
    return table


#: Caption sentence per autoattack.precision value (atat.base.precision).
PRECISION_CAPTIONS = {
    "fp32": "Attacks ran in float32 with TF32 off (autoattack.precision fp32).",
    "tf32": ("Attacks ran with PyTorch's default precision, cuDNN convolutions in TF32 "
             "(autoattack.precision tf32, as the authors' code ran): on GPUs with TF32 a "
             "perturbation below TF32's input rounding (~5e-4 near 0.5) is partly lost, so "
             "robust accuracies at eps <= 0.0005 are overstated."),
}


def precision_caption(df: pd.DataFrame, eps: float) -> str:
    """The caption sentence saying under which ``autoattack.precision`` the rows at ``eps``
    were attacked (column ``aa_precision_eps<eps>`` of the summary; rows without it predate
    the key)."""
    col = f"aa_precision_eps{format(float(eps), 'g')}"
    values = df[col] if col in df.columns else pd.Series([None] * len(df), dtype=object)
    known = sorted({str(v) for v in values.dropna()})
    n_missing = int(values.isna().sum())
    if len(known) == 1 and not n_missing:
        return PRECISION_CAPTIONS.get(known[0], f"Attack precision: {known[0]}.")
    counts = {v: int((values == v).sum()) for v in known}
    parts = [f"{v} for {n} model(s)" for v, n in counts.items()]
    if n_missing:
        parts.append(f"not recorded for {n_missing} model(s)")
    return "Attack precision (autoattack.precision): " + ", ".join(parts) + "."


# --------------------------------------------------------------------------- Tables 5, 15-20

#: Which regression specs (config/regressions.yaml) go into which paper table.
#: Paper table ("T5", "T15"...) -> caption (from the registry, atat.analysis.paper).
REGRESSION_TABLES = {f"T{t}": output(f"table{t}").caption for t in REGRESSION_TABLE_IDS}
REGRESSION_NOTE = (" SEs in parentheses; OLS MacKinnon & White (HC2) small-sample robust SEs "
                   "in brackets; 95% interval below (OLS: t(n-k) with HC2; Beta: Wald z). "
                   "Test accuracy is clean; eps terms are AutoAttack robust accuracies "
                   "(worst case). Beta coefficients are on the logit scale; Beta R2 is the "
                   "pseudo R2 of Ferrari & Cribari-Neto. A skipped specification shows its "
                   "reason instead of numbers.")


def _term_label(term: str) -> str:
    if term == "const":
        return "Intercept"
    if term == "test_acc":
        return "Test acc."
    if term == "phi":
        return "phi (precision)"
    if term.startswith("robust_acc_eps"):
        return f"Acc eps={term[len('robust_acc_eps'):]}"
    return term.replace("test_acc", "Test acc.")


def regression_specs_for_table(tidy: pd.DataFrame, table: str,
                               table5_specs: Sequence[str] | None = None) -> list[str]:
    """Spec names (in file order) shown in ``table``; Table 5 = the joint OLS and joint Beta
    specs of Table 15 unless ``table5_specs`` names others."""
    if table == "T5":
        names = list(table5_specs or ["T15_ppa_generic_joint_ols", "T15_ppa_generic_joint_beta"])
        missing = [n for n in names if n not in set(tidy["spec"])]
        if missing:
            raise ValueError(f"Table 5 specs not in the regression results: {missing}")
        return names
    return list(dict.fromkeys(tidy.loc[tidy["table"] == table, "spec"]))


def regression_table(tidy: pd.DataFrame, table: str, outputs: Sequence[str | Path], *,
                     table5_specs: Sequence[str] | None = None,
                     digits: int = 3) -> pd.DataFrame:
    """Coefficient table (one column per specification) from the tidy output of
    :func:`atat.analysis.stats.regression.fit_all`: per term ``estimate (SE) [HC2 SE]`` (OLS) or
    ``estimate (SE)`` (Beta) and the 95% interval, then R2, MAE and n. A skipped spec's
    column holds ``skipped: <reason>`` -- no number is made up."""
    if table not in REGRESSION_TABLES:
        raise ValueError(f"unknown regression table {table!r}")
    names = regression_specs_for_table(tidy, table, table5_specs)
    if not names:
        raise ValueError(f"no specifications of {table} in the regression results")
    f = f"{{:.{digits}f}}"
    columns: dict[str, dict[str, str]] = {}
    order: list[str] = []
    header: dict[str, str] = {}
    for name in names:
        sub = tidy.loc[tidy["spec"] == name]
        first = sub.iloc[0]
        ctl = {"none": "", "acc_x_dataset": " x Dataset",
               "acc_x_architecture": " x Arch."}.get(str(first["controls"]), "")
        header[name] = f"{str(first['family']).upper()}{ctl} ({first['regressor_set'] or name})"
        col: dict[str, str] = {}
        if (sub["status"] != "ok").any():
            col["Status"] = f"skipped: {first['reason']}"
            columns[name] = col
            continue
        for rec in sub.to_dict("records"):
            term = _term_label(str(rec["term"]))
            classical = rec["se_nonrobust"] if rec["family"] == "ols" else rec["se"]
            cell = f.format(rec["estimate"]) + f" ({f.format(classical)})"
            if rec["family"] == "ols":
                cell += f" [{f.format(rec['se_hc2'])}]"
            col[term] = cell
            col[f"{term} 95% CI"] = f"[{f.format(rec['ci_low'])}, {f.format(rec['ci_high'])}]"
            for key in (term, f"{term} 95% CI"):
                if key not in order:
                    order.append(key)
        r2 = first["r2"] if first["family"] == "ols" else first["pseudo_r2"]
        col["R2"] = "" if pd.isna(r2) else f.format(r2)
        col["MAE"] = f.format(first["mae"])
        col["n"] = str(int(first["n"]))
        col["Status"] = "ok"
        columns[name] = col
    stats_rows = ["R2", "MAE", "n"]
    # phi last among the terms, then fit statistics
    terms = [o for o in order if not o.startswith("phi")] + [o for o in order if o.startswith("phi")]
    rows = ["Status"] + [r for r in terms if r not in stats_rows] + stats_rows
    out = pd.DataFrame({"Term": rows})
    for name in names:
        out[header[name] if list(header.values()).count(header[name]) == 1 else name] = [
            columns[name].get(r, "") for r in rows]
    skipped = [n for n in names if columns[n]["Status"] != "ok"]
    caption = REGRESSION_TABLES[table] + REGRESSION_NOTE
    if skipped:
        caption += f" Skipped: {len(skipped)} of {len(names)} specifications."
    write_table(out, outputs, caption)
    return out


def cost_of_privacy_table(tidy: pd.DataFrame, outputs: Sequence[str | Path], *, spec: str,
                          terms: Sequence[str]) -> pd.DataFrame:
    """gamma_eps of App. G (pp of robust accuracy per pp of leakage) from the Beta fit
    ``spec`` of the regression results; a skipped spec gives its reason, not numbers."""
    from atat.analysis.stats.regression import cost_of_privacy_from_table

    df = cost_of_privacy_from_table(tidy, spec, terms)
    caption = ("Cost of privacy gamma_eps = 1/(beta_eps mu_bar (1 - mu_bar)) from the Beta "
               f"model {spec} (App. G); interval from the inverted Wald endpoints of beta_eps.")
    write_table(df, outputs, caption)
    return df


# --------------------------------------------------------------------------- Tables 21-22

def causal_tables(summary_csv: str | Path, table21: Sequence[str | Path],
                  table22: Sequence[str | Path], *, sample: dict | None = None,
                  treatment: str = "treatment", beta_responses: Sequence[str] = ("ppa_attacc1",),
                  ols_responses: Sequence[str] = ("ppa_attacc1", "ppa_dist_face"),
                  distance_responses: Sequence[str] = ("ppa_dist_face",),
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables 21 (leakage on AT-AT assignment: OLS with HC2 t interval, Beta with odds
    ratio and Delta) and 22 (OLS of the L2 reconstruction distance) from the causal rows
    of the summary (non-null ``treatment``)."""
    from atat.analysis.stats.causal import causal_table

    df = pd.read_csv(summary_csv)
    if treatment not in df.columns or df[treatment].notna().sum() == 0:
        raise ValueError("summary has no causal-experiment rows (column 'treatment' empty)")
    res = causal_table(df, beta_responses=beta_responses, ols_responses=ols_responses,
                       treatment=treatment, sample=sample)

    def fmt_rows(sub: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for r in sub.to_dict("records"):
            base = {"Response": r["response"], "Model": str(r["model"]).upper()}
            if r["status"] != "ok":
                rows.append({**base, "Status": f"skipped: {r['reason']}"})
                continue
            row = {**base, "Status": "ok", "n": int(r["n"]),
                   "Intercept (NoDef)": r["alpha"], "Intercept SE": r["alpha_se"],
                   "AT-AT (Treatment)": r["tau"], "Treatment SE": r["tau_se"],
                   "CI low": r["tau_ci_low"], "CI high": r["tau_ci_high"],
                   "stat": r["tau_stat"], "p": r["tau_p"]}
            if r["model"] == "ols":
                row["R2"] = r["r2"]
            else:
                row.update({"Odds ratio": r["odds_ratio"], "OR CI low": r["odds_ratio_ci_low"],
                            "OR CI high": r["odds_ratio_ci_high"], "mu0": r["mu0"],
                            "mu1": r["mu1"], "Delta": r["delta"], "Delta CI low":
                            r["delta_ci_low"], "Delta CI high": r["delta_ci_high"],
                            "pseudo R2": r["pseudo_r2"]})
            rows.append(row)
        return pd.DataFrame(rows)

    dist = set(distance_responses)
    t21 = fmt_rows(res[~res["response"].isin(dist)])
    t22 = fmt_rows(res[res["response"].isin(dist) & (res["model"] == "ols")])
    write_table(t21, table21, "Table 21: Causal regressions of leakage (AttAcc@1) on AT-AT "
                "assignment. OLS 95% CIs use HC2 SEs with t(n-2); Beta uses Wald (+-1.96 SE) "
                "on the logit scale. Baseline is NoDef; the Treatment coefficient is the "
                "effect of AT-AT relative to NoDef.")
    write_table(t22, table22, "Table 22: OLS regression of reconstruction distance (L2) on "
                "AT-AT assignment. 95% CIs use HC2 SEs with t(n-2). Baseline is NoDef.")
    return t21, t22


# --------------------------------------------------------------------------- Tables 23-28

PER_IMAGE_COLUMNS = ["dataset", "architecture", "defense", "attack", "class", "correct_top1",
                     "correct_top5"]
PER_CLASS_METRICS = {"evalconf": "EvalConf", "dist_face": "delta_face", "dist_eval": "delta_eval"}


def main_results(per_image: pd.DataFrame, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Main results with confidence intervals (App. I.3), one row per model cell
    (dataset, architecture, defense, attack):

    * AttAcc@1 / AttAcc@5: share of correct reconstructions over all attacked images, with
      the Wilson score 95% interval (per image, n = number of images);
    * EvalConf, delta_face, delta_eval (where the per-image table has them): per-class means
      first, then the mean over classes with its Student-t 95% interval (m - 1 df);
    * clean test accuracy from ``summary`` (mean over seeds) when given.

    ``per_image`` has the columns of :data:`PER_IMAGE_COLUMNS` (correct_* are 0/1) plus any
    of ``evalconf``, ``dist_face``, ``dist_eval``; several seeds of a cell are pooled.
    """
    from atat.analysis.stats.intervals import t_interval_mean, wilson_interval

    missing = [c for c in PER_IMAGE_COLUMNS if c not in per_image.columns]
    if missing:
        raise ValueError(f"per-image table lacks columns {missing}")
    keys = ["dataset", "architecture", "defense", "attack"]
    rows = []
    for key, g in per_image.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        n = len(g)
        for k in ("1", "5"):
            c = g[f"correct_top{k}"].astype(int)
            if not c.isin([0, 1]).all():
                raise ValueError(f"correct_top{k} must be 0/1")
            lo, hi = wilson_interval(int(c.sum()), n)
            row.update({f"attacc{k}": c.sum() / n, f"attacc{k}_ci_low": lo,
                        f"attacc{k}_ci_high": hi})
        row["n_images"] = n
        row["n_classes"] = g["class"].nunique()
        for m in PER_CLASS_METRICS:
            if m in g.columns and g[m].notna().any():
                per_class = g.groupby("class")[m].mean()
                t = t_interval_mean(per_class)
                row.update({m: t["mean"], f"{m}_ci_low": t["ci_low"], f"{m}_ci_high": t["ci_high"]})
        rows.append(row)
    out = pd.DataFrame(rows)
    if summary is not None and not out.empty:
        s = summary
        if "treatment" in s.columns:
            s = s[s["treatment"].isna()]
        acc = s.groupby(["dataset", "architecture", "defense"])["test_acc"].mean().rename("test_acc")
        out = out.join(acc, on=["dataset", "architecture", "defense"])
    return out


def main_results_table(per_image: pd.DataFrame, summary: pd.DataFrame | None,
                       outputs: Sequence[str | Path], *, number: int,
                       digits: int = 3, config: Mapping[str, Any] | None = None
                       ) -> pd.DataFrame:
    """Table ``number`` (23-28, layout in :data:`MAIN_TABLES`, its names translated by the
    ``config``'s ``paper_roles``: :func:`main_table_layout`) as formatted
    ``value [low, high]`` cells. Raises if the inputs have no row for it."""
    layout = main_table_layout(number, config)
    sel = per_image[per_image["architecture"].isin(layout["architectures"])
                    & per_image["dataset"].isin(layout["datasets"])
                    & per_image["attack"].isin(layout["attacks"])]
    if sel.empty:
        raise ValueError(f"no per-image results for Table {number} ({layout})")
    order = {a: i for i, a in enumerate(layout["attacks"])}
    res = main_results(sel, summary).sort_values(
        "attack", key=lambda c: c.map(order), kind="stable")
    f = f"{{:.{digits}f}}"

    def cell(r: dict, m: str) -> str:
        if m not in r or pd.isna(r[m]):
            return ""
        lo, hi = r.get(f"{m}_ci_low"), r.get(f"{m}_ci_high")
        band = "" if not layout["intervals"] or pd.isna(lo) else \
            f" [{f.format(lo)}, {f.format(hi)}]"
        return f.format(r[m]) + band

    labels = DEFENSE_LABELS.with_types(defense_types(per_image, summary, config=config))
    rows = []
    for r in res.to_dict("records"):
        row = {"Attack": ATTACK_NAMES.get(r["attack"], r["attack"]),
               "Dataset": _label(DATASET_LABELS, r["dataset"]),
               "Architecture": _label(ARCH_LABELS, r["architecture"]),
               "Defense": _label(labels, r["defense"])}
        if "test_acc" in r:
            row["Test acc."] = "" if pd.isna(r["test_acc"]) else f.format(r["test_acc"])
        row["AttAcc@1"] = cell(r, "attacc1")
        row["AttAcc@5"] = cell(r, "attacc5")
        for m, label in PER_CLASS_METRICS.items():
            if m in r:
                row[label] = cell(r, m)
        row["Images"] = int(r["n_images"])
        row["Classes"] = int(r["n_classes"])
        rows.append(row)
    table = pd.DataFrame(rows)
    archs = ", ".join(_label(ARCH_LABELS, a) for a in layout["architectures"])
    attacks = ", ".join(ATTACK_NAMES.get(a, a) for a in layout["attacks"])
    expanded_by = [k for k, v in MAIN_TABLES.items() if v.get("expands") == number]
    if layout["intervals"]:
        caption = (f"Table {number}: Table {layout['expands']} with 95% intervals ({archs}; "
                   f"{attacks}): AttAcc@1/@5 Wilson score intervals over attacked images; "
                   "EvalConf and distances t intervals over per-class means.")
    else:
        caption = (f"Table {number}: model-inversion results ({archs}; {attacks}): AttAcc@1/@5 "
                   "over attacked images; EvalConf and distances means over per-class means"
                   + (f"; intervals in Table {expanded_by[0]}." if expanded_by else "."))
    write_table(table, outputs, caption)
    return table


# --------------------------------------------------------------------------- regressions file
def load_specs(path: str | Path, statistics: Mapping[str, Any] | None = None
               ) -> list[dict[str, Any]]:
    """Read a regressions YAML file and return the explicit list of specifications, with
    the samples and reference levels of the workflow config's ``statistics`` section
    (``statistics``; default the paper config's, ``config/config.yaml``)."""
    import yaml

    from atat.analysis.stats.regression import check_regressions, expand_grids

    with open(path) as fh:
        config = yaml.safe_load(fh) or {}
    check_regressions(config, path, tables=REGRESSION_TABLES, statistics=statistics)
    return expand_grids(config, path, statistics=statistics)
