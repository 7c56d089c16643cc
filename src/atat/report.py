"""Which statistics tables and figures the current config can produce.

The workflow makes a table a target of ``all`` only when the config produces every input it
needs (paper §4-6, App. G-I all need model-inversion leakage in results/summary.csv), and
a regression output (Tables 5, 15-20, cost of privacy, Figure 2) only when at least one of
its specifications can be fitted on the planned models (:func:`spec_identifiable`).
These functions hold that decision so it can be unit-tested without Snakemake; the rules in
``workflow/rules/stats.smk`` call :func:`stats_targets`.

Inversion attacks are read from ``config["inversion"]["attacks"]`` (e.g. ``[ppa, ifgmi,
ppdg]``); each adds the summary columns ``{attack}_{metric}`` for the metrics of
:data:`INVERSION_METRICS`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from atat.summary import INVERSION_METRICS
from atat.tables import MAIN_TABLES

REGRESSION_TABLE_IDS = ["5", "15", "16", "17", "18", "19", "20"]
MAIN_TABLE_IDS = [str(n) for n in sorted(MAIN_TABLES)]
#: The specification whose fit Figure 2 draws (paper Fig. 2: PPA, generic, joint OLS).
FIGURE2_SPEC = "T15_ppa_generic_joint_ols"
#: Paper Table 5 = the joint OLS and Beta fits of Table 15 (atat.tables.regression_table).
TABLE5_SPECS = ("T15_ppa_generic_joint_ols", "T15_ppa_generic_joint_beta")
EXTS = ("csv", "md", "tex")

__all__ = ["INVERSION_METRICS", "REGRESSION_TABLE_IDS", "MAIN_TABLE_IDS", "inversion_attacks",
           "summary_columns", "planned_sample_frame", "spec_identifiable",
           "regression_table_buildable", "causal_buildable",
           "main_table_buildable", "stats_targets"]


def inversion_attacks(config: Mapping[str, Any]) -> list[str]:
    inv = config.get("inversion") or {}
    return [str(a) for a in (inv.get("attacks") or [])]


def summary_columns(config: Mapping[str, Any]) -> set[str]:
    """Inversion columns results/summary.csv will have under ``config``."""
    return {f"{a}_{m}" for a in inversion_attacks(config) for m in INVERSION_METRICS}


def planned_sample_frame(config: Mapping[str, Any], runs: Iterable[Any]) -> pd.DataFrame:
    """The identifier columns results/summary.csv will have for the planned ``runs`` (one row
    per model: dataset, architecture, defense, defense_type, seed, treatment), so that a
    spec's sample can be selected by :func:`atat.stats.regression.select_sample` -- the
    same selection the fit makes -- before any model is trained."""
    defenses = config.get("defenses") or {}
    rows = [{"dataset": r.dataset, "architecture": r.architecture, "defense": r.defense,
             "defense_type": (defenses.get(r.defense) or {}).get("type", r.defense),
             "seed": getattr(r, "seed", 0), "treatment": getattr(r, "treatment", None)}
            for r in runs]
    frame = pd.DataFrame(rows, columns=["dataset", "architecture", "defense", "defense_type",
                                        "seed", "treatment"])
    frame["treatment"] = pd.to_numeric(frame["treatment"])   # None -> NaN (not causal)
    return frame


def spec_identifiable(spec: Mapping[str, Any], config: Mapping[str, Any],
                      runs: Iterable[Any] | None = None) -> bool:
    """The config produces the spec's response and regressor columns and (given ``runs``)
    the spec's sample of the planned models is large enough to fit it: n - k >=
    ``min_df_resid`` (:func:`atat.stats.regression.check_size`, the check the fit makes),
    with the sample selected exactly as the fit will select it (defense variants, datasets,
    architectures, excluded rows, causal rows)."""
    from atat.stats.regression import SpecSkipped, check_size, select_sample
    from atat.summary import robust_column

    cols = summary_columns(config) | {"test_acc"} | {
        robust_column(e) for e in config["autoattack"]["epsilons"]}
    if spec["response"] not in cols or not set(spec.get("regressors", [])) <= cols:
        return False
    if runs is None:
        return True
    try:
        sample, _ = select_sample(planned_sample_frame(config, runs), spec)
        check_size(spec, sample)
    except SpecSkipped:
        return False
    return True


def regression_table_buildable(table_id: str, config: Mapping[str, Any],
                               specs: Iterable[Mapping[str, Any]],
                               runs: Iterable[Any] | None = None) -> bool:
    """Table 5 (= joint fits of T15) or 15-20: every response of its specs will exist and at
    least one of its specs can be fitted on the config's models (``runs``), so a table is
    never a list of skipped specifications only."""
    if str(table_id) == "5":
        mine = [s for s in specs if s["name"] in TABLE5_SPECS]
    else:
        mine = [s for s in specs if s.get("table") == f"T{table_id}"]
    responses = {s["response"] for s in mine}
    runs = None if runs is None else list(runs)
    return (bool(responses) and responses <= summary_columns(config)
            and any(spec_identifiable(s, config, runs) for s in mine))


def causal_buildable(config: Mapping[str, Any], regressions: Mapping[str, Any]) -> bool:
    c = regressions.get("causal") or {}
    responses = set(c.get("beta_responses") or []) | set(c.get("ols_responses") or [])
    return bool(config.get("causal")) and bool(responses) and responses <= summary_columns(config)


def main_table_buildable(table_id: str, config: Mapping[str, Any], runs: Iterable[Any]) -> bool:
    """Tables 23-28: one of its attacks runs and a (non-causal) model of the layout is trained."""
    layout = MAIN_TABLES[int(table_id)]
    return bool(set(layout["attacks"]) & set(inversion_attacks(config))) and any(
        r.architecture in layout["architectures"] and r.dataset in layout["datasets"]
        and getattr(r, "treatment", None) is None for r in runs)


def _table(n: str) -> list[str]:
    return [f"results/tables/table{n}.{e}" for e in EXTS]


def stats_targets(config: Mapping[str, Any], regressions: Mapping[str, Any],
                  runs: Iterable[Any]) -> list[str]:
    """Targets of workflow/rules/stats.smk that ``config`` can produce."""
    from atat.stats.regression import expand_grids

    runs = list(runs)
    specs = expand_grids(regressions)
    cols = summary_columns(config)
    targets: list[str] = []
    if any(s["response"] in cols and spec_identifiable(s, config, runs) for s in specs):
        targets.append("results/stats/regressions.csv")
    for t in REGRESSION_TABLE_IDS:
        if regression_table_buildable(t, config, specs, runs):
            targets += _table(t)
    cop = [s for s in specs if s["name"] == (regressions.get("cost_of_privacy") or {}).get("spec")]
    if cop and cop[0]["response"] in cols and spec_identifiable(cop[0], config, runs):
        targets += ["results/stats/cost_of_privacy.csv", "results/stats/cost_of_privacy.md"]
    if causal_buildable(config, regressions):
        targets += _table("21") + _table("22")
    for t in MAIN_TABLE_IDS:
        if main_table_buildable(t, config, runs):
            targets += _table(t)
    fig2 = [s for s in specs if s["name"] == FIGURE2_SPEC]
    if fig2 and spec_identifiable(fig2[0], config, runs) and fig2[0]["response"] in cols:
        targets.append("results/figures/figure2_observed_vs_predicted.png")
    if inversion_attacks(config):
        targets.append("results/figures/figure4_accuracy_vs_privacy.png")
    return targets
