"""Which statistics tables and figures the current config can produce.

The workflow makes a table a target of ``all`` only when the config produces every input it
needs (paper §4-6, App. G-I all need model-inversion leakage in results/summary.csv).
These functions hold that decision so it can be unit-tested without Snakemake; the rules in
``workflow/rules/stats.smk`` call :func:`stats_targets`.

Inversion attacks are read from ``config["inversion"]["attacks"]`` (e.g. ``[ppa, ifgmi,
ppdg]``); each adds the summary columns ``{attack}_{metric}`` for the metrics of
:data:`INVERSION_METRICS`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from atat.summary import INVERSION_METRICS
from atat.tables import MAIN_TABLES

REGRESSION_TABLE_IDS = ["5", "15", "16", "17", "18", "19", "20"]
MAIN_TABLE_IDS = [str(n) for n in sorted(MAIN_TABLES)]
EXTS = ("csv", "md", "tex")

__all__ = ["INVERSION_METRICS", "REGRESSION_TABLE_IDS", "MAIN_TABLE_IDS", "inversion_attacks",
           "summary_columns", "regression_table_buildable", "causal_buildable",
           "main_table_buildable", "stats_targets"]


def inversion_attacks(config: Mapping[str, Any]) -> list[str]:
    inv = config.get("inversion") or {}
    return [str(a) for a in (inv.get("attacks") or [])]


def summary_columns(config: Mapping[str, Any]) -> set[str]:
    """Inversion columns results/summary.csv will have under ``config``."""
    return {f"{a}_{m}" for a in inversion_attacks(config) for m in INVERSION_METRICS}


def regression_table_buildable(table_id: str, config: Mapping[str, Any],
                               specs: Iterable[Mapping[str, Any]]) -> bool:
    """Table 5 (= joint fits of T15) or 15-20: every response of its specs will exist."""
    key = "T15" if str(table_id) == "5" else f"T{table_id}"
    responses = {s["response"] for s in specs if s.get("table") == key}
    return bool(responses) and responses <= summary_columns(config)


def causal_buildable(config: Mapping[str, Any], regressions: Mapping[str, Any]) -> bool:
    c = regressions.get("causal") or {}
    responses = set(c.get("beta_responses") or []) | set(c.get("ols_responses") or [])
    return bool(config.get("causal")) and bool(responses) and responses <= summary_columns(config)


def main_table_buildable(table_id: str, config: Mapping[str, Any], runs: Iterable[Any]) -> bool:
    """Tables 23-28: the attack runs and a (non-causal) model of the layout is trained."""
    layout = MAIN_TABLES[int(table_id)]
    return layout["attack"] in inversion_attacks(config) and any(
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
    if any(s["response"] in cols for s in specs):
        targets.append("results/stats/regressions.csv")
    for t in REGRESSION_TABLE_IDS:
        if regression_table_buildable(t, config, specs):
            targets += _table(t)
    if regressions.get("cost_of_privacy") and regression_table_buildable("5", config, specs):
        targets += ["results/stats/cost_of_privacy.csv", "results/stats/cost_of_privacy.md"]
    if causal_buildable(config, regressions):
        targets += _table("21") + _table("22")
    for t in MAIN_TABLE_IDS:
        if main_table_buildable(t, config, runs):
            targets += _table(t)
    if regression_table_buildable("5", config, specs):
        targets.append("results/figures/figure2_observed_vs_predicted.png")
    if inversion_attacks(config):
        targets.append("results/figures/figure4_accuracy_vs_privacy.png")
    return targets
