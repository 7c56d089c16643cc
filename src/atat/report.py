"""Whether the current config can produce a statistics table or figure (the predicates of
the statistics entries of :mod:`atat.paper`).

A table is a target of ``all`` only when the config produces every input it needs (paper
§4-6, App. G-I all need model-inversion leakage in results/summary.csv), and a regression
output (Tables 5, 15-20, cost of privacy, Figure 2) only when at least one of its
specifications can be fitted on the planned models (:func:`spec_identifiable`). These
predicates can be unit-tested without Snakemake; :func:`atat.paper.stats_targets` lists the
targets they allow.

Inversion attacks are read from ``config["inversion"]["attacks"]`` (e.g. ``[ppa, ifgmi,
ppdg]``); each adds the summary columns ``{attack}_{metric}`` for the metrics of
:data:`INVERSION_METRICS`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd

from atat.paper import FIGURE2_SPEC, TABLE5_SPECS, inversion_attacks
from atat.summary import INVERSION_METRICS
from atat.tables import main_table_layout

__all__ = ["FIGURE2_SPEC", "INVERSION_METRICS", "TABLE5_SPECS", "inversion_attacks",
           "summary_columns", "planned_sample_frame", "spec_identifiable",
           "regression_table_buildable", "causal_buildable", "main_table_buildable"]


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
    layout = main_table_layout(int(table_id), config)
    return bool(set(layout["attacks"]) & set(inversion_attacks(config))) and any(
        r.architecture in layout["architectures"] and r.dataset in layout["datasets"]
        and getattr(r, "treatment", None) is None for r in runs)
