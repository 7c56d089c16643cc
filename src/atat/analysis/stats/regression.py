"""Leakage-on-robustness regressions of paper §4 / App. G (Tables 5, 15-20) and the
"cost of privacy" gamma_epsilon of App. G.

Every fit is done by statsmodels (``sm.OLS`` and
``statsmodels.othermod.betareg.BetaModel``); this module only selects the sample, builds
the design matrix, calls statsmodels and reshapes its results into one tidy table.

Specification (one dict, normally read from ``config/regressions.yaml``)::

    name:        unique id (required)
    table:       paper table the spec belongs to, e.g. "T15"
    response:    column of results/summary.csv, e.g. ppa_attacc1, ifgmi_attacc1
    regressors:  list of columns, e.g. [test_acc, robust_acc_eps0.0025, ...]
    sample:      {defense_types: [...], defenses: [...], exclude_defenses: [...],
                  datasets: [...], architectures: [...],
                  exclude_rows: [{column: value(s), ...}, ...]}  (every key optional;
                  an exclude_rows rule drops rows matching all of its column values;
                  `defenses` names variants, `defense_types` implementations -- a type
                  also catches every variant of it, e.g. type nodef = nodef + permuted)
    family:      ols | beta
    controls:    none | acc_x_dataset | acc_x_architecture
    # optional (defaults in DEFAULTS below)
    cov_type:    HC2           # OLS SEs used for the reported t interval / p-value
    beta_cov:    eim           # Beta covariance: eim (expected information = R betareg
                               # default) or oim (observed Hessian = statsmodels default)
    accuracy_column: test_acc  # the clean accuracy interacted with the controls
    interaction_main_effects: true   # acc_x_dataset = acc + dataset + acc:dataset
    reference_levels: {dataset: facescrub, architecture: resnet152}
    units:       proportion    # proportion | percent (percent columns are divided by 100)
    min_df_resid: 1            # fewer residual df than this -> the spec is skipped
    aggregate_seeds: false     # true: average rows over seeds within (dataset, arch, defense)
    include_causal_rows: false # rows with a non-null `treatment` belong to App. H

Output of :func:`fit_all`: one row per (spec, term) with the columns of
:data:`TIDY_COLUMNS`; a spec that cannot be estimated yields one row with
``status == "skipped"``, ``term`` empty and ``reason`` saying why -- no number is ever
filled in for it.
"""

from __future__ import annotations

import copy
import itertools
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

# statsmodels and scipy.stats (~2 s to import) are imported by the fitting functions only:
# the workflow imports this module while it builds the DAG (expand_grids, select_sample).

__all__ = [
    "DEFAULTS",
    "TIDY_COLUMNS",
    "SpecSkipped",
    "check_regressions",
    "paper_statistics",
    "causal_sample",
    "expand_grids",
    "sensitivity_specs",
    "select_sample",
    "build_design",
    "parameter_count",
    "check_size",
    "squeeze_unit_interval",
    "fit_ols",
    "bell_mccaffrey_df",
    "fit_beta",
    "beta_fit_batch",
    "beta_bootstrap_t",
    "fit_spec",
    "fit_all",
    "gamma_from_beta",
    "cost_of_privacy",
    "cost_of_privacy_from_table",
]

DEFAULTS: dict[str, Any] = {
    "table": "",
    "family": "ols",
    "controls": "none",
    "sample": {},
    "cov_type": "HC2",
    "beta_cov": "eim",
    "accuracy_column": "test_acc",
    "interaction_main_effects": True,
    "reference_levels": {"dataset": "facescrub", "architecture": "resnet152"},
    "units": "proportion",
    "min_df_resid": 1,
    "aggregate_seeds": False,
    "include_causal_rows": False,
}

FAMILIES = ("ols", "beta")
CONTROLS = {"none": None, "acc_x_dataset": "dataset", "acc_x_architecture": "architecture"}
OLS_COV_TYPES = ("nonrobust", "HC0", "HC1", "HC2", "HC3")
SAMPLE_KEYS = ("defense_types", "defenses", "exclude_defenses", "datasets", "architectures",
               "exclude_rows")
GROUP_KEYS = ("dataset", "architecture", "defense", "defense_type")
#: Keys of a regressor set written as a mapping (see :func:`expand_grids`).
REGSET_KEYS = ("regressors", "interaction_main_effects")

TIDY_COLUMNS = [
    "spec", "table", "family", "response", "sample_name", "regressor_set", "controls",
    "regressors", "status", "reason", "term", "estimate", "se", "stat", "p_value",
    "ci_low", "ci_high", "ci_method", "se_nonrobust", "se_hc0", "se_hc1", "se_hc2",
    "se_hc3", "df_bm_hc3", "p_value_nonrobust", "n", "k", "df_resid", "r2", "adj_r2", "pseudo_r2",
    "mae", "response_mean", "phi", "llf", "aic", "beta_squeeze",
    "converged", "notes",
]


class SpecSkipped(Exception):
    """The specification cannot be estimated on the data given (reason in ``str(e)``)."""


# --------------------------------------------------------------------------- specs


def _norm_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    if "name" not in spec:
        raise ValueError(f"specification without a name: {dict(spec)}")
    out = copy.deepcopy(dict(DEFAULTS))
    for key, val in spec.items():
        out[key] = copy.deepcopy(val)
    out["reference_levels"] = {**DEFAULTS["reference_levels"],
                               **(spec.get("reference_levels") or {})}
    for key in ("response", "regressors"):
        if key not in out:
            raise ValueError(f"spec {out['name']}: missing '{key}'")
    if isinstance(out["regressors"], str):
        out["regressors"] = [out["regressors"]]
    out["regressors"] = [str(r) for r in out["regressors"]]
    out["family"] = str(out["family"]).lower()
    if out["family"] not in FAMILIES:
        raise ValueError(f"spec {out['name']}: family must be one of {FAMILIES}")
    out["controls"] = str(out.get("controls") or "none")
    if out["controls"] not in CONTROLS:
        raise ValueError(f"spec {out['name']}: controls must be one of {sorted(CONTROLS)}")
    if out["cov_type"] not in OLS_COV_TYPES:
        raise ValueError(f"spec {out['name']}: cov_type must be one of {OLS_COV_TYPES}")
    if str(out["beta_cov"]).lower() not in ("eim", "oim"):
        raise ValueError(f"spec {out['name']}: beta_cov must be eim or oim")
    if out["units"] not in ("proportion", "percent"):
        raise ValueError(f"spec {out['name']}: units must be proportion or percent")
    bad = set(out["sample"] or {}) - set(SAMPLE_KEYS)
    if bad:
        raise ValueError(f"spec {out['name']}: unknown sample keys {sorted(bad)}")
    return out


#: Keys of one specification (an entry of ``specs``, or ``defaults``).
SPEC_KEYS = ("name", "response", "regressors", "sample_name", "regressor_set", *DEFAULTS)
#: Keys of a ``grids`` entry: its own, plus spec options copied into every spec it yields.
GRID_KEYS = ("table", "response", "response_label", "sample", "families", "regressor_sets",
             "controls", *(k for k in DEFAULTS if k not in ("family", "controls", "sample")))
#: Top-level keys of config/regressions.yaml and the keys of its fixed-form sections.
FILE_KEYS = {"defaults": None, "regressor_sets": None, "grids": None,
             "specs": None, "cost_of_privacy": ("spec", "terms"),
             "causal": ("treatment", "beta_responses", "ols_responses"),
             "sensitivity": None}
#: Keys of an entry of ``sensitivity`` (:func:`sensitivity_specs`).
SENSITIVITY_KEYS = ("tables", "exclude_defenses", "note")
#: Keys of the workflow config's ``statistics`` section (declared per config): the
#: named estimation samples the specifications refer to and the reference levels of the
#: dataset/architecture factors (the paper: FaceScrub / ResNet-152).
STATISTICS_KEYS = ("samples", "reference_levels")
#: Where the keys of a regressions file that belong to the workflow config live now.
_MOVED_KEYS = {"samples": "statistics.samples",
               "defaults.reference_levels": "statistics.reference_levels",
               "causal.sample": "causal (dataset, architecture)"}


def paper_statistics() -> dict[str, Any]:
    """The ``statistics`` section of the paper config (``config/config.yaml``): what the
    library uses when a caller gives no config (unit tests on simulated paper grids)."""
    import yaml

    path = Path(__file__).resolve().parents[4] / "config" / "config.yaml"
    return dict(yaml.safe_load(path.read_text())["statistics"])


def _statistics(statistics: Mapping[str, Any] | None) -> dict[str, Any]:
    return paper_statistics() if statistics is None else dict(statistics)


def causal_sample(causal: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The causal experiment's cell ``{dataset, architecture}`` (Tables 21/22) from the
    workflow config's ``causal`` section (``causal``) -- its one home -- or None without one."""
    c = causal
    if not c:
        return None
    return {"dataset": str(c["dataset"]), "architecture": str(c["architecture"])}


def check_regressions(config: Mapping[str, Any], path: str | Path = "config/regressions.yaml",
                      tables: Iterable[str] | None = None,
                      statistics: Mapping[str, Any] | None = None) -> None:
    """Structure of a regressions file (``config/regressions.yaml``): unknown keys at the
    top level, in ``defaults``, a grid entry, a spec, ``cost_of_privacy`` or ``causal`` are
    errors (a typo such as ``grid:`` for ``grids:`` would silently give no regression
    table), and every sample (declared by the workflow config's ``statistics.samples``:
    ``statistics``, default the paper config's), regressor set, spec
    (``cost_of_privacy.spec``) and, when ``tables`` is given, grid ``table`` named must
    exist.  A key that moved to the workflow config (``samples``,
    ``defaults.reference_levels``, ``causal.sample``) is an error saying where it lives.
    Raises :class:`atat.plan.config.ConfigError` naming ``path`` and the key.  No
    statsmodels/torch."""
    from atat.plan.config import ConfigError

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"{path}: {key}: {msg}")

    if isinstance(config, Mapping):
        for key, home in _MOVED_KEYS.items():
            head, _, tail = key.partition(".")
            section = config.get(head) if tail else config
            if isinstance(section, Mapping) and (tail or head) in section:
                fail(key, f"declared by the workflow config ({home}; config/config.yaml, "
                          "config/demo.yaml), not by the regressions file")

    def unknown(section: Any, allowed: Iterable[str], key: str) -> None:
        if not isinstance(section, Mapping):
            fail(key, f"must be a mapping, got {type(section).__name__}")
        bad = sorted(set(section) - set(allowed))
        if bad:
            fail(f"{key}.{bad[0]}" if key else bad[0],
                 f"unknown key (allowed: {sorted(allowed)})")

    if not isinstance(config, Mapping):
        fail("<top level>", "must be a mapping")
    unknown(config, FILE_KEYS, "")
    for key, allowed in FILE_KEYS.items():
        if allowed is not None and config.get(key) is not None:
            unknown(config[key], allowed, key)
    unknown(config.get("defaults") or {}, SPEC_KEYS, "defaults")
    samples = _statistics(statistics).get("samples") or {}
    unknown(samples, samples, "statistics.samples")  # a mapping of names
    for name, sample in samples.items():
        unknown(sample or {}, SAMPLE_KEYS, f"statistics.samples.{name}")
    regsets = config.get("regressor_sets") or {}
    unknown(regsets, regsets, "regressor_sets")
    for name, rs in regsets.items():
        if isinstance(rs, Mapping) and (set(rs) - set(REGSET_KEYS) or "regressors" not in rs):
            fail(f"regressor_sets.{name}", f"regressor set '{name}': needs 'regressors', may "
                                           f"have {REGSET_KEYS[1:]}; got {sorted(rs)}")
    known_tables = None if tables is None else sorted(tables)
    for i, grid in enumerate(config.get("grids") or []):
        key = f"grids[{i}]"
        unknown(grid, GRID_KEYS, key)
        for req in ("table", "response", "sample", "regressor_sets"):
            if req not in grid:
                fail(key, f"'{req}' is required")
        if grid["sample"] not in samples:
            fail(f"{key}.sample", f"'{grid['sample']}' is not a sample the workflow config "
                                  f"declares under 'statistics.samples' "
                                  f"(declared: {sorted(samples)})")
        for rs in grid["regressor_sets"]:
            if rs not in regsets:
                fail(f"{key}.regressor_sets", f"'{rs}' is not defined under 'regressor_sets' "
                                              f"(defined: {sorted(regsets)})")
        for fam in grid.get("families", FAMILIES):
            if fam not in FAMILIES:
                fail(f"{key}.families", f"'{fam}' is not one of {list(FAMILIES)}")
        for ctl in grid.get("controls", ["none"]):
            if ctl not in CONTROLS:
                fail(f"{key}.controls", f"'{ctl}' is not one of {sorted(CONTROLS)}")
        if known_tables is not None and grid["table"] not in known_tables:
            fail(f"{key}.table", f"'{grid['table']}' is not a regression table "
                                 f"(known: {known_tables})")
    for i, spec in enumerate(config.get("specs") or []):
        unknown(spec, SPEC_KEYS, f"specs[{i}]")
        if isinstance(spec.get("sample"), str) and spec["sample"] not in samples:
            fail(f"specs[{i}].sample", f"'{spec['sample']}' is not a sample the workflow "
                                       f"config declares under 'statistics.samples' "
                                       f"(declared: {sorted(samples)})")
        if known_tables is not None and spec.get("table") and spec["table"] not in known_tables:
            fail(f"specs[{i}].table", f"'{spec['table']}' is not a regression table "
                                      f"(known: {known_tables})")
    grid_tables = {g.get("table") for g in config.get("grids") or [] if isinstance(g, Mapping)}
    for name, entry in (config.get("sensitivity") or {}).items():
        key = f"sensitivity.{name}"
        unknown(entry, SENSITIVITY_KEYS, key)
        for req in ("tables", "exclude_defenses", "note"):
            if not entry.get(req):
                fail(key, f"'{req}' is required (a sensitivity analysis says what it leaves "
                          "out, from which tables and why)")
        for table in entry["tables"]:
            if table not in grid_tables:
                fail(f"{key}.tables", f"'{table}' is not the table of a grid "
                                      f"(grids: {sorted(t for t in grid_tables if t)})")


def expand_grids(config: Mapping[str, Any],
                 path: str | Path = "config/regressions.yaml",
                 statistics: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Expand a regressions config (see ``config/regressions.yaml``) into explicit specs.

    The config may hold ``specs`` (explicit list) and/or ``grids``; a grid entry names a
    ``sample`` declared by the workflow config (``statistics``: its ``statistics`` section,
    ``samples`` and ``reference_levels``; default the paper config's) and lists
    ``families``, ``regressor_sets`` (keys of ``regressor_sets``) and ``controls``; it
    yields their Cartesian product.  The config's ``reference_levels`` and then the file's
    ``defaults`` are applied to every spec.  A regressor set is a list of columns or a
    mapping ``{regressors: [...], interaction_main_effects: bool}`` (the form of the
    control's interaction that goes with it, e.g. Tables 17/20's ``acc + acc:factor``).
    An explicit spec may name a declared sample (``sample: generic``) or give its filters.
    """
    stats = _statistics(statistics)
    check_regressions(config, path, statistics=stats)
    defaults = dict(config.get("defaults") or {})
    if stats.get("reference_levels"):
        defaults = {"reference_levels": dict(stats["reference_levels"]), **defaults}
    samples = dict(stats.get("samples") or {})
    regsets = dict(config.get("regressor_sets") or {})
    specs: list[dict[str, Any]] = []
    for grid in config.get("grids") or []:
        sample_name = grid["sample"]
        if sample_name not in samples:
            raise ValueError(f"grid {grid}: unknown sample '{sample_name}'")
        families = grid.get("families", list(FAMILIES))
        controls = grid.get("controls", ["none"])
        for ctl, rs, fam in itertools.product(controls, grid["regressor_sets"], families):
            if rs not in regsets:
                raise ValueError(f"grid {grid}: unknown regressor set '{rs}'")
            parts = [grid["table"], grid.get("response_label", grid["response"]), sample_name]
            if ctl != "none":
                parts.append(ctl)
            parts += [rs, fam]
            regset = regsets[rs]
            options: dict[str, Any] = {}
            if isinstance(regset, Mapping):
                bad = set(regset) - set(REGSET_KEYS)
                if bad or "regressors" not in regset:
                    raise ValueError(f"regressor set '{rs}': needs 'regressors', may have "
                                     f"{REGSET_KEYS[1:]}; got {sorted(regset)}")
                options = {k: v for k, v in regset.items() if k != "regressors"}
                regset = regset["regressors"]
            spec = {
                **defaults,
                **{k: v for k, v in grid.items() if k not in
                   ("sample", "families", "regressor_sets", "controls", "response_label")},
                **options,
                "name": "_".join(parts),
                "sample_name": sample_name,
                "sample": copy.deepcopy(samples[sample_name]),
                "regressor_set": rs,
                "regressors": list(regset),
                "family": fam,
                "controls": ctl,
            }
            specs.append(spec)
    for spec in config.get("specs") or []:
        spec = {**defaults, **spec}
        if isinstance(spec.get("sample"), str):
            spec["sample_name"] = spec["sample"]
            spec["sample"] = copy.deepcopy(samples[spec["sample"]])
        specs.append(spec)
    names = [s["name"] for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"duplicate specification names: {dup}")
    cop = (config.get("cost_of_privacy") or {}).get("spec")
    if cop is not None and cop not in names:
        from atat.plan.config import ConfigError

        raise ConfigError(f"{path}: cost_of_privacy.spec: '{cop}' is not a specification the "
                          "file defines")
    return [_norm_spec(s) for s in specs]


def sensitivity_specs(config: Mapping[str, Any],
                      path: str | Path = "config/regressions.yaml",
                      statistics: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The sensitivity analyses of a regressions config: for each entry ``<name>`` of its
    ``sensitivity`` section (``{tables, exclude_defenses, note}``), every specification of the
    grids of those ``tables`` (:func:`expand_grids`) again, with ``exclude_defenses`` added to
    its sample. They sit *beside* the pre-registered specifications, never instead of them:
    named ``<spec>__<name>``, table ``<table> sensitivity <name>`` (so no paper table shows
    them), sample name ``<sample> without <defenses>``; :func:`expand_grids` leaves them out
    and rule ``regressions`` fits both into one tidy file."""
    stats = _statistics(statistics)
    check_regressions(config, path, statistics=stats)
    base = expand_grids(config, path, statistics=stats)
    out: list[dict[str, Any]] = []
    for name, entry in (config.get("sensitivity") or {}).items():
        drop = [str(d) for d in _as_list(entry["exclude_defenses"]) or []]
        for spec in base:
            if spec["table"] not in entry["tables"]:
                continue
            s = copy.deepcopy(spec)
            s["sample"]["exclude_defenses"] = list(dict.fromkeys(
                (_as_list(s["sample"].get("exclude_defenses")) or []) + drop))
            s["name"] = f"{spec['name']}__{name}"
            s["table"] = f"{spec['table']} sensitivity {name}"
            s["sample_name"] = f"{spec.get('sample_name', '')} without {', '.join(drop)}".strip()
            out.append(_norm_spec(s))
    return out


# --------------------------------------------------------------------------- data


def _as_list(x: Any) -> list[str] | None:
    if x is None:
        return None
    if isinstance(x, str):
        return [x]
    return [str(v) for v in x]


def select_sample(df: pd.DataFrame, spec: Mapping[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """Rows of ``df`` belonging to the spec's sample (see module docstring)."""
    notes: list[str] = []
    sample = spec.get("sample") or {}
    out = df.copy()
    if "treatment" in out.columns and not spec.get("include_causal_rows", False):
        causal = out["treatment"].notna()
        if causal.any():
            notes.append(f"excluded {int(causal.sum())} causal-experiment rows "
                         "(non-null treatment)")
            out = out.loc[~causal]
    filters = (("defense_types", "defense_type"), ("defenses", "defense"),
               ("datasets", "dataset"), ("architectures", "architecture"))
    for key, col in filters:
        wanted = _as_list(sample.get(key))
        if wanted is None:
            continue
        if col not in out.columns:
            raise SpecSkipped(f"sample filter '{key}' needs column '{col}', absent from summary")
        out = out.loc[out[col].astype(str).isin(wanted)]
    excl = _as_list(sample.get("exclude_defenses"))
    if excl:
        if "defense" not in out.columns:
            raise SpecSkipped("sample filter 'exclude_defenses' needs column 'defense'")
        out = out.loc[~out["defense"].astype(str).isin(excl)]
    for rule in sample.get("exclude_rows") or []:
        absent = [c for c in rule if c not in out.columns]
        if absent:
            raise SpecSkipped(f"sample rule exclude_rows {rule} needs columns {absent}")
        hit = np.ones(len(out), dtype=bool)
        for col, val in rule.items():
            hit &= out[col].astype(str).isin(_as_list(val)).to_numpy()
        if hit.any():
            notes.append(f"excluded {int(hit.sum())} rows matching {dict(rule)}")
            out = out.loc[~hit]
    if spec.get("aggregate_seeds", False):
        keys = [k for k in GROUP_KEYS if k in out.columns]
        before = len(out)
        num = out.select_dtypes("number").columns.difference(keys)
        out = out.groupby(keys, as_index=False, dropna=False)[list(num)].mean()
        notes.append(f"averaged {before} rows over seeds into {len(out)} cells")
    return out, notes


def _is_accuracy_like(col: str) -> bool:
    return (col.endswith("_acc") or col.startswith("robust_acc") or "attacc" in col
            or col in ("test_acc", "val_acc", "test_top5") or col.endswith("_evalconf"))


def _factor_levels(data: pd.DataFrame, spec: Mapping[str, Any]
                   ) -> tuple[str | None, list[str], str | None]:
    """(factor, its levels in ``data``, reference level) of the spec's control, or
    ``(None, [], None)`` without one; raises :class:`SpecSkipped` when the sample has fewer
    than two levels or lacks the reference level."""
    factor = CONTROLS[spec.get("controls", "none")]
    if factor is None:
        return None, [], None
    if factor not in data.columns:
        raise SpecSkipped(f"control {spec['controls']} needs column '{factor}', absent")
    levels = sorted(data[factor].astype(str).unique())
    ref = (spec.get("reference_levels") or {}).get(factor)
    if len(levels) < 2:
        raise SpecSkipped(
            f"control {spec['controls']} needs >=2 levels of {factor} in the sample; "
            f"found {levels}")
    if ref not in levels:
        raise SpecSkipped(f"reference level {factor}={ref!r} absent from sample {levels}")
    return factor, levels, ref


def parameter_count(spec: Mapping[str, Any], data: pd.DataFrame) -> int:
    """Number of estimated parameters k of the spec on the sample ``data`` (only its
    identifier columns are read): intercept + regressors (+ the accuracy column if a control
    needs it and it is not a regressor) + per non-reference level of the control its dummy
    (if ``interaction_main_effects``) and interaction, + the Beta precision. This is the k
    of :func:`build_design` (plus phi), so it can be evaluated on planned runs before any
    number exists (:func:`atat.analysis.paper.spec_identifiable`)."""
    k = 1 + len(spec["regressors"])
    factor, levels, _ = _factor_levels(data, spec)
    if factor is not None:
        if spec.get("accuracy_column", "test_acc") not in spec["regressors"]:
            k += 1
        per_level = 2 if spec.get("interaction_main_effects", True) else 1
        k += per_level * (len(levels) - 1)
    return k + (1 if spec.get("family") == "beta" else 0)


def check_size(spec: Mapping[str, Any], data: pd.DataFrame) -> int:
    """Raise :class:`SpecSkipped` unless the sample ``data`` leaves at least
    ``min_df_resid`` residual degrees of freedom (n - k) and, for an ``accuracy * factor``
    control, holds two models per level of the factor; return k. The one place that
    decides whether a sample is large enough -- for a fit (:func:`fit_spec`) and for
    planning a target (:func:`atat.analysis.paper.spec_identifiable`)."""
    if len(data) == 0:
        raise SpecSkipped("sample is empty after filtering")
    k = parameter_count(spec, data)
    factor, _, _ = _factor_levels(data, spec)
    if factor is not None and spec.get("interaction_main_effects", True):
        counts = data[factor].astype(str).value_counts().sort_index()
        if (counts < 2).any():  # own intercept and slope per level: one model cannot fix both
            raise SpecSkipped(
                f"control {spec['controls']} (accuracy * {factor}) needs >=2 models per level "
                f"of {factor}; found {counts.to_dict()}")
    df_resid = len(data) - k
    if df_resid < int(spec.get("min_df_resid", DEFAULTS["min_df_resid"])):
        raise SpecSkipped(
            f"too few rows: n={len(data)} for {k} parameters (df_resid={df_resid} < "
            f"min_df_resid={spec.get('min_df_resid', DEFAULTS['min_df_resid'])})")
    return k


def build_design(data: pd.DataFrame, spec: Mapping[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """Design matrix (with ``const`` first) for the spec's regressors and controls.

    ``acc_x_dataset`` / ``acc_x_architecture`` add, for every non-reference level L of the
    factor, the dummy ``{factor}[L]`` (main effect; only if ``interaction_main_effects``)
    and the product ``{acc}:{factor}[L]`` -- i.e. R's ``acc * factor`` with treatment
    coding.  If the accuracy column is not among the regressors it is added.
    """
    notes: list[str] = []
    cols = list(spec["regressors"])
    X = data[cols].astype(float).copy()
    factor, levels, ref = _factor_levels(data, spec)
    if factor is not None:
        acc = spec.get("accuracy_column", "test_acc")
        if acc not in X.columns:
            X[acc] = data[acc].astype(float)
            notes.append(f"added {acc} (needed by the {factor} interaction)")
        for lvl in levels:
            if lvl == ref:
                continue
            dummy = (data[factor].astype(str) == lvl).astype(float)
            if spec.get("interaction_main_effects", True):
                X[f"{factor}[{lvl}]"] = dummy
            X[f"{acc}:{factor}[{lvl}]"] = data[acc].astype(float) * dummy
        notes.append(f"{factor} reference level: {ref}")
    X.insert(0, "const", 1.0)
    return X, notes


def squeeze_unit_interval(y: pd.Series | np.ndarray) -> tuple[np.ndarray, bool]:
    """Smithson & Verkuilen (2006) squeeze ``(y (n-1) + 0.5) / n`` -- applied only when a
    value equals exactly 0 or 1 (the Beta likelihood is undefined there)."""
    y = np.asarray(y, dtype=float)
    if np.any((y <= 0.0) | (y >= 1.0)):
        n = y.size
        return (y * (n - 1) + 0.5) / n, True
    return y, False


def check_response_varies(y: pd.Series | np.ndarray, response: str) -> None:
    """A response that takes one value over the whole sample (every model's AttAcc@1 0, say)
    has nothing to explain: OLS would report a zero slope with zero variance ("ok", p = nan)
    and the Beta likelihood a degenerate optimum. Raises :class:`SpecSkipped` naming it."""
    v = np.asarray(y, dtype=float)
    if v.size and np.ptp(v) == 0.0:
        raise SpecSkipped(f"response {response} is constant ({v[0]:.6g} for all {v.size} rows): "
                          "no variation to explain")


def _prepare(df: pd.DataFrame, spec: Mapping[str, Any]):
    cols_needed = [spec["response"], *spec["regressors"]]
    factor = CONTROLS[spec.get("controls", "none")]
    if factor is not None:
        cols_needed += [spec.get("accuracy_column", "test_acc"), factor]
    sample_cols = [c for k, c in (("defense_types", "defense_type"), ("defenses", "defense"),
                                  ("datasets", "dataset"), ("architectures", "architecture"))
                   if (spec.get("sample") or {}).get(k) is not None]
    missing = sorted({c for c in cols_needed + sample_cols if c not in df.columns})
    if missing:
        raise SpecSkipped(f"missing columns in summary: {missing}")
    keep = [c for c in dict.fromkeys([*cols_needed, *GROUP_KEYS, "seed", "treatment"])
            if c in df.columns]
    if spec.get("aggregate_seeds", False):  # every numeric column is averaged: keep all
        keep = list(df.columns)
    data, notes = select_sample(df[keep], spec)
    used = list(dict.fromkeys(cols_needed))
    na = data[used].isna().any(axis=1)
    if na.any():
        notes.append(f"dropped {int(na.sum())} rows with missing values in {used}")
        data = data.loc[~na]
    data = data.copy()
    numeric = [spec["response"], *spec["regressors"]]
    if factor is not None:
        numeric.append(spec.get("accuracy_column", "test_acc"))
    numeric = list(dict.fromkeys(numeric))
    for c in numeric:
        try:
            data[c] = pd.to_numeric(data[c], errors="raise").astype(float)
        except (ValueError, TypeError) as exc:
            raise SpecSkipped(f"column {c} is not numeric: {exc}") from None
    acc_cols = [c for c in numeric if _is_accuracy_like(c)]
    if spec.get("units", "proportion") == "percent":
        for c in acc_cols:
            data[c] = data[c] / 100.0
        if acc_cols:
            notes.append(f"divided percent columns by 100: {acc_cols}")
    else:
        over = [c for c in acc_cols if len(data) and (data[c].max() > 1.0 or data[c].min() < 0.0)]
        if over:
            raise SpecSkipped(
                f"columns {over} have values outside [0, 1] but units: proportion "
                "(paper App. G estimates on [0, 1]; set units: percent if the summary is in %)")
    if spec["family"] == "beta":
        y = data[spec["response"]]
        if len(y) and (y.min() < 0.0 or y.max() > 1.0):
            raise SpecSkipped(f"Beta response {spec['response']} outside [0, 1]")
    return data, notes


# --------------------------------------------------------------------------- fitting


def fit_ols(y: pd.Series, X: pd.DataFrame, cov_type: str = "HC2") -> tuple[pd.DataFrame, dict, Any]:
    """OLS via statsmodels: coefficients with classical and HC0-HC3 SEs; the reported
    ``se``/``stat``/``p_value``/``ci`` use ``cov_type`` with Student t on n-k df."""
    import statsmodels.api as sm
    from scipy import stats as sps

    model = sm.OLS(np.asarray(y, float), X)
    res = model.fit()
    inf = model.fit(cov_type=cov_type, use_t=True) if cov_type != "nonrobust" else res
    ci = inf.conf_int(alpha=0.05)
    df_resid = float(res.df_resid)
    tcrit = float(sps.t.ppf(0.975, df_resid))
    with np.errstate(divide="ignore", invalid="ignore"):
        hc = {k: np.asarray(getattr(res, f"{k.upper()}_se"), float)
              for k in ("hc0", "hc1", "hc2", "hc3")}
    coef = pd.DataFrame({
        "term": list(X.columns),
        "estimate": np.asarray(res.params, float),
        "se": np.asarray(inf.bse, float),
        "stat": np.asarray(inf.tvalues, float),
        "p_value": np.asarray(inf.pvalues, float),
        "ci_low": np.asarray(ci, float)[:, 0],
        "ci_high": np.asarray(ci, float)[:, 1],
        "ci_method": f"t({df_resid:g}) {cov_type}: estimate +- {tcrit:.4f} se",
        "se_nonrobust": np.asarray(res.bse, float),
        "se_hc0": hc["hc0"], "se_hc1": hc["hc1"], "se_hc2": hc["hc2"], "se_hc3": hc["hc3"],
        "df_bm_hc3": bell_mccaffrey_df(np.asarray(X, float), "HC3"),
        "p_value_nonrobust": np.asarray(res.pvalues, float),
    })
    resid = np.asarray(res.resid, float)
    stats = {
        "n": int(res.nobs), "k": int(X.shape[1]), "df_resid": df_resid,
        "r2": float(res.rsquared), "adj_r2": float(res.rsquared_adj),
        "mae": float(np.mean(np.abs(resid))), "llf": float(res.llf), "aic": float(res.aic),
        "converged": True,
    }
    return coef, stats, inf


def bell_mccaffrey_df(X: np.ndarray, cov_type: str = "HC3") -> np.ndarray:
    """Bell-McCaffrey degrees of freedom of each OLS coefficient's heteroskedasticity-robust
    variance (Bell & McCaffrey 2002, Survey Methodology 28:169-181; recommended for small
    samples by Imbens & Kolesar 2016, Review of Economics and Statistics 98:701-712): the HC
    variance of coefficient j is a quadratic form u'M W_j M u of the errors (M = I - H, W_j =
    diag(c_ij^2 / (1 - h_ii)^p), c_j the j-th row of (X'X)^-1 X', p = 1 for HC2, 2 for HC3), and
    its Satterthwaite degrees of freedom under homoskedastic normal errors are
    tr(A)^2 / tr(A^2), A = M W_j M. With n = 16-18 models and leverage up to 0.5 they are 3-8,
    not n - k: a t(n - k) quantile with an HC standard error is too narrow there
    (tests/test_stats_small_sample.py). NaN where a leverage is 1."""
    X = np.asarray(X, float)
    n, k = X.shape
    xtxi = np.linalg.pinv(X.T @ X)
    c = xtxi @ X.T                         # (k, n)
    m = np.eye(n) - X @ c
    h = np.clip(np.diag(X @ c), 0.0, 1.0)
    power = {"HC2": 1, "HC3": 2}[cov_type]
    out = np.full(k, np.nan)
    if np.any(h > 1 - 1e-10):
        return out
    for j in range(k):
        w = c[j] ** 2 / (1.0 - h) ** power
        a = m @ (w[:, None] * m)
        out[j] = np.trace(a) ** 2 / np.sum(a * a)   # A symmetric: tr(A^2) = sum A_ij^2
    return out


def fit_beta(y: pd.Series, X: pd.DataFrame, cov: str = "eim") -> tuple[pd.DataFrame, dict, Any]:
    """Beta regression (logit mean link, log precision link, constant precision) via
    statsmodels ``BetaModel``; Wald z intervals.  ``cov='eim'`` uses the expected
    information (what R ``betareg`` reports), ``'oim'`` the observed Hessian.

    The returned table has the mean coefficients (logit scale) and a ``phi`` row: phi =
    exp(log-precision), se by the delta method, z = phi/se (R's identity-scale Wald test),
    interval = exp of the log-scale Wald interval.
    """
    from scipy import stats as sps
    from statsmodels.othermod.betareg import BetaModel

    yv = np.asarray(y, float)
    yv_fit, squeezed = squeeze_unit_interval(yv)
    model = BetaModel(yv_fit, X)
    kw = {"cov_type": "eim"} if cov.lower() == "eim" else {}
    res, method = None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for meth in ("newton", "bfgs"):
            try:
                cand = model.fit(method=meth, disp=False, maxiter=1000, **kw)
            except (np.linalg.LinAlgError, ValueError, FloatingPointError):
                continue
            if np.all(np.isfinite(cand.params)) and cand.mle_retvals.get("converged", False):
                res, method = cand, meth
                break
            if res is None and np.all(np.isfinite(cand.params)):
                res, method = cand, meth
    if res is None:
        raise SpecSkipped("Beta regression failed to converge (newton and bfgs)")
    converged = bool(res.mle_retvals.get("converged", False))
    params = np.asarray(res.params, float)
    bse = np.asarray(res.bse, float)
    ci = np.asarray(res.conf_int(alpha=0.05), float)
    pvals = np.asarray(res.pvalues, float)
    zval = np.asarray(res.tvalues, float)
    k = X.shape[1]
    zcrit = float(sps.norm.ppf(0.975))
    coef = pd.DataFrame({
        "term": list(X.columns),
        "estimate": params[:k], "se": bse[:k], "stat": zval[:k], "p_value": pvals[:k],
        "ci_low": ci[:k, 0], "ci_high": ci[:k, 1],
        "ci_method": f"Wald z ({cov.upper()}): estimate +- {zcrit:.4f} se, logit scale",
    })
    phi = float(np.exp(params[k]))
    se_phi = phi * float(bse[k])
    zphi = phi / se_phi if se_phi > 0 else np.nan
    coef = pd.concat([coef, pd.DataFrame([{
        "term": "phi", "estimate": phi, "se": se_phi, "stat": zphi,
        "p_value": float(2 * sps.norm.sf(abs(zphi))) if np.isfinite(zphi) else np.nan,
        "ci_low": float(np.exp(ci[k, 0])), "ci_high": float(np.exp(ci[k, 1])),
        "ci_method": "phi = exp(log-precision); exp of log-scale Wald interval",
    }])], ignore_index=True)
    mu = np.asarray(model.predict(params, which="mean"), float)
    eta = np.asarray(model.predict(params, which="linear"), float)
    ylogit = np.log(yv_fit / (1.0 - yv_fit))
    with np.errstate(invalid="ignore", divide="ignore"):
        pr2 = float(np.corrcoef(ylogit, eta)[0, 1] ** 2) if np.std(eta) > 0 else np.nan
    stats = {
        "n": int(len(yv)), "k": int(k) + 1, "df_resid": float(len(yv) - k - 1),
        "pseudo_r2": pr2,
        "mae": float(np.mean(np.abs(yv - mu))), "phi": phi,
        "llf": float(res.llf), "aic": float(res.aic), "converged": converged,
        "beta_squeeze": ("applied: y' = (y (n-1) + 0.5)/n, n=%d (Smithson & Verkuilen 2006)"
                         % len(yv)) if squeezed else "not needed (all 0 < y < 1)",
        "fit_method": method,
    }
    return coef, stats, res


def _beta_loglik(theta: np.ndarray, y: np.ndarray, X: np.ndarray) -> np.ndarray:
    from scipy.special import expit, gammaln

    k = X.shape[1]
    mu = expit(theta[:, :k] @ X.T)
    phi = np.exp(theta[:, k:k + 1])
    a, b = mu * phi, (1.0 - mu) * phi
    return np.sum(gammaln(phi) - gammaln(a) - gammaln(b) + (a - 1.0) * np.log(y)
                  + (b - 1.0) * np.log1p(-y), axis=1)


def _beta_score_info(theta: np.ndarray, y: np.ndarray, X: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Score and expected information of (beta, log phi) of a Beta regression with logit mean
    link and constant precision (Ferrari & Cribari-Neto 2004, J. Applied Statistics
    31:799-815, section 2), for each row of ``theta`` / ``y``."""
    from scipy.special import expit, polygamma, psi

    k = X.shape[1]
    mu = expit(theta[:, :k] @ X.T)                          # (B, n)
    phi = np.exp(theta[:, k:k + 1])                         # (B, 1)
    a, b = mu * phi, (1.0 - mu) * phi
    t = mu * (1.0 - mu)                                     # d mu / d eta
    ystar = np.log(y) - np.log1p(-y)
    mustar = psi(a) - psi(b)
    u_beta = phi * ((t * (ystar - mustar)) @ X)             # (B, k)
    u_phi = np.sum(mu * (ystar - mustar) + np.log1p(-y) - psi(b) + psi(phi), axis=1)
    tri_a, tri_b, tri_phi = polygamma(1, a), polygamma(1, b), polygamma(1, phi)
    w = phi * (tri_a + tri_b) * t * t                       # (B, n)
    k_bb = phi[:, :, None] * np.einsum("bi,ij,il->bjl", w, X, X)
    cvec = phi * (tri_a * mu - tri_b * (1.0 - mu))
    k_bphi = (t * cvec) @ X                                 # (B, k)
    k_phiphi = np.sum(tri_a * mu ** 2 + tri_b * (1.0 - mu) ** 2, axis=1) - y.shape[1] * \
        tri_phi[:, 0]
    p = phi[:, 0]
    score = np.concatenate([u_beta, (p * u_phi)[:, None]], axis=1)
    info = np.zeros((len(theta), k + 1, k + 1))
    info[:, :k, :k] = k_bb
    info[:, :k, k] = info[:, k, :k] = p[:, None] * k_bphi
    info[:, k, k] = p * p * k_phiphi
    return score, info


def beta_fit_batch(y: np.ndarray, X: np.ndarray, iterations: int = 100, tol: float = 1e-10
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximum-likelihood Beta regressions (logit mean link, constant precision, log link) of
    every row of ``y`` (B, n; values in (0, 1)) on the same design ``X`` (n, k) at once, by
    Fisher scoring with step halving: the model :func:`fit_beta` fits with statsmodels, for
    the many refits of a bootstrap. Returns (theta (B, k + 1): the mean coefficients and log
    phi, cov (B, k + 1, k + 1): the inverse expected information, converged (B,)). Starts
    from the least-squares fit of logit(y) (Ferrari & Cribari-Neto 2004, section 4)."""
    from scipy.special import expit

    y = np.atleast_2d(np.asarray(y, float))
    X = np.asarray(X, float)
    nb, n = y.shape
    k = X.shape[1]
    ystar = np.log(y) - np.log1p(-y)
    beta0 = np.linalg.lstsq(X, ystar.T, rcond=None)[0].T            # (B, k)
    resid = ystar - beta0 @ X.T
    s2 = np.sum(resid ** 2, axis=1, keepdims=True) / max(n - k, 1)
    mu0 = expit(beta0 @ X.T)
    phi0 = np.maximum(np.mean(1.0 / (s2 * mu0 * (1.0 - mu0)), axis=1) - 1.0, 1.0)
    theta = np.concatenate([beta0, np.log(phi0)[:, None]], axis=1)
    ll = _beta_loglik(theta, y, X)
    done = np.zeros(nb, bool)
    with np.errstate(all="ignore"):
        for _ in range(iterations):
            score, info = _beta_score_info(theta, y, X)
            try:
                step = np.linalg.solve(info, score[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = np.stack([np.linalg.lstsq(i, s, rcond=None)[0]
                                 for i, s in zip(info, score)])
            step[done | ~np.all(np.isfinite(step), axis=1)] = 0.0
            scale = np.ones(nb)
            new = theta + step
            ll_new = _beta_loglik(new, y, X)
            for _ in range(30):            # halve where the likelihood fell
                worse = ~(ll_new >= ll - 1e-12 * np.abs(ll)) & ~done
                if not worse.any():
                    break
                scale[worse] /= 2.0
                new[worse] = theta[worse] + scale[worse, None] * step[worse]
                ll_new[worse] = _beta_loglik(new[worse], y[worse], X)
            small = np.max(np.abs(new - theta), axis=1) < tol * (1.0 + np.max(np.abs(theta),
                                                                              axis=1))
            theta, ll = new, np.where(np.isfinite(ll_new), ll_new, ll)
            done |= small
            if done.all():
                break
        _, info = _beta_score_info(theta, y, X)
        cov = np.full_like(info, np.nan)
        ok = np.all(np.isfinite(info), axis=(1, 2))
        cov[ok] = np.linalg.pinv(info[ok])
    converged = done & np.all(np.isfinite(theta), axis=1) & \
        np.all(np.diagonal(cov, axis1=1, axis2=2) > 0, axis=1)
    return theta, cov, converged


def beta_bootstrap_t(y: np.ndarray, X: np.ndarray, draws: int, seed: int
                     ) -> dict[str, Any]:
    """Parametric bootstrap of the studentized mean coefficients of a Beta regression
    (:func:`beta_fit_batch`'s model; Efron & Tibshirani 1993, ch. 12, the bootstrap-t): fit
    ``y`` on ``X``, draw ``draws`` responses from the fitted Beta distributions (generator
    seeded with ``seed``; a draw rounded to 0 or 1 in floating point is moved 1e-12 inside),
    refit each, and return ``{"theta", "se" (expected-information standard errors of the
    fit), "t" ((m, k): (beta* - beta_hat) / se* of the m refits that converged), "failed"}``.
    The one-sided 1 - a bounds of coefficient j are beta_j - q_{1-a}(t_j) se_j and
    beta_j - q_a(t_j) se_j; the Wald z interval assumes q = -+z, which at n = 10-18 rows is
    too narrow (tests/test_stats_small_sample.py)."""
    y = np.asarray(y, float)
    X = np.asarray(X, float)
    theta, cov, ok = beta_fit_batch(y[None, :], X)
    if not ok[0]:
        raise SpecSkipped("Beta regression failed to converge (Fisher scoring)")
    theta, se = theta[0], np.sqrt(np.diag(cov[0]))
    k = X.shape[1]
    rng = np.random.default_rng(seed)
    from scipy.special import expit

    mu = expit(X @ theta[:k])
    phi = float(np.exp(theta[k]))
    ys = rng.beta(mu * phi, (1.0 - mu) * phi, size=(int(draws), len(y)))
    ys = np.clip(ys, 1e-12, 1.0 - 1e-12)
    ts, covs, oks = beta_fit_batch(ys, X)
    ses = np.sqrt(np.diagonal(covs, axis1=1, axis2=2))[:, :k]
    t = (ts[oks, :k] - theta[:k]) / ses[oks]
    return {"theta": theta, "se": se, "t": t, "failed": int((~oks).sum())}


def fit_spec(df: pd.DataFrame, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Fit one specification.

    Returns ``{"spec", "coefficients" (DataFrame), "stats" (dict), "notes" (list),
    "result" (statsmodels results), "data" (the estimation sample)}``.
    Raises :class:`SpecSkipped` when the spec cannot be estimated (too few rows, missing
    columns, rank-deficient design, values out of range, no convergence).
    """
    spec = _norm_spec(spec)
    data, notes = _prepare(df, spec)
    if len(data) == 0:
        raise SpecSkipped("sample is empty after filtering")
    X, dnotes = build_design(data, spec)
    notes += dnotes
    y = data[spec["response"]].astype(float)
    check_response_varies(y, spec["response"])
    k = check_size(spec, data)
    if k != X.shape[1] + (1 if spec["family"] == "beta" else 0):  # parameter_count's contract
        raise RuntimeError(f"spec {spec['name']}: parameter_count {k} disagrees with the "
                           f"design's {X.shape[1]} columns")
    rank = np.linalg.matrix_rank(X.to_numpy())
    if rank < X.shape[1]:
        raise SpecSkipped(f"design matrix rank {rank} < {X.shape[1]} columns {list(X.columns)} "
                          "(collinear or constant regressors)")
    if spec["family"] == "ols":
        coef, stats, res = fit_ols(y, X, spec["cov_type"])
        lev = np.asarray(res.get_influence().hat_matrix_diag)
        if np.any(lev > 1 - 1e-8):
            notes.append("an observation has leverage 1: HC2/HC3 SEs are undefined (inf/nan)")
        stats["beta_squeeze"] = ""
    else:
        coef, stats, res = fit_beta(y, X, str(spec["beta_cov"]))
        if not stats["converged"]:
            notes.append("optimizer did not report convergence")
        notes.append(f"Beta fitted with method={stats.pop('fit_method')}; pseudo_r2 = "
                     "squared corr(logit y, linear predictor) "
                     "(Ferrari & Cribari-Neto 2004, as R betareg)")
        if stats["beta_squeeze"].startswith("applied"):
            notes.append("Beta response squeezed: " + stats["beta_squeeze"])
    stats["response_mean"] = float(y.mean())
    return {"spec": spec, "coefficients": coef, "stats": stats, "notes": notes,
            "result": res, "data": data}


def _spec_meta(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "spec": spec.get("name"), "table": spec.get("table", ""),
        "family": spec.get("family"), "response": spec.get("response"),
        "sample_name": spec.get("sample_name", ""), "regressor_set": spec.get("regressor_set", ""),
        "controls": spec.get("controls", "none"),
        "regressors": " + ".join(spec.get("regressors") or []),
    }


def fit_all(df: pd.DataFrame, specs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Fit every spec; tidy DataFrame, one row per spec x term (columns TIDY_COLUMNS)."""
    rows: list[dict[str, Any]] = []
    for spec in specs:
        meta = _spec_meta(spec)
        try:
            fit = fit_spec(df, spec)
        except SpecSkipped as exc:
            rows.append({**meta, "status": "skipped", "reason": str(exc)})
            continue
        st = fit["stats"]
        notes = "; ".join(fit["notes"])
        for rec in fit["coefficients"].to_dict("records"):
            rows.append({**meta, "status": "ok", "reason": "", **rec,
                         **{k: st.get(k, np.nan) for k in
                            ("n", "k", "df_resid", "r2", "adj_r2", "pseudo_r2", "mae",
                             "response_mean", "phi", "llf", "aic", "beta_squeeze",
                             "converged")},
                         "notes": notes})
    out = pd.DataFrame(rows)
    for c in TIDY_COLUMNS:
        if c not in out.columns:
            out[c] = np.nan
    return out[TIDY_COLUMNS]


# --------------------------------------------------------------------------- cost of privacy


def gamma_from_beta(beta: float, ci_low: float, ci_high: float, mu_bar: float) -> dict[str, Any]:
    """gamma = 1 / (beta mu_bar (1 - mu_bar)) (App. G) and its interval by inverting the
    endpoints of beta's Wald interval.  If that interval contains 0 the image of the
    interval under 1/x is (-inf, 1/(lo c)] U [1/(hi c), +inf): reported as unbounded
    (ci_low = -inf, ci_high = +inf) with the two finite edges in the note."""
    c = mu_bar * (1.0 - mu_bar)
    if not (0.0 < mu_bar < 1.0):
        raise ValueError(f"mu_bar must lie in (0, 1), got {mu_bar}")
    gamma = 1.0 / (beta * c) if beta != 0 else np.nan
    if ci_low > 0 or ci_high < 0:
        ends = sorted((1.0 / (ci_low * c), 1.0 / (ci_high * c)))
        return {"gamma": gamma, "ci_low": ends[0], "ci_high": ends[1], "bounded": True,
                "note": "interval = 1/(c x) at the endpoints of beta's Wald interval, "
                        f"c = mu_bar(1-mu_bar) = {c:.6g}"}
    lo_edge = 1.0 / (ci_low * c) if ci_low != 0 else -np.inf
    hi_edge = 1.0 / (ci_high * c) if ci_high != 0 else np.inf
    return {"gamma": gamma, "ci_low": -np.inf, "ci_high": np.inf, "bounded": False,
            "note": (f"beta's 95% interval [{ci_low:.6g}, {ci_high:.6g}] contains 0, so the "
                     f"gamma interval is unbounded: (-inf, {lo_edge:.6g}] U [{hi_edge:.6g}, +inf)")}


def cost_of_privacy(fit: Mapping[str, Any], terms: Sequence[str] | None = None) -> pd.DataFrame:
    """gamma_epsilon for each robust-accuracy term of a Beta fit (from :func:`fit_spec`)."""
    if fit["spec"]["family"] != "beta":
        raise ValueError("cost of privacy is defined on the Beta model (App. G)")
    coef = fit["coefficients"].set_index("term")
    mu_bar = float(fit["stats"]["response_mean"])
    terms = list(terms) if terms else [t for t in coef.index if str(t).startswith("robust_acc")]
    rows = []
    for t in terms:
        b = coef.loc[t]
        g = gamma_from_beta(float(b["estimate"]), float(b["ci_low"]), float(b["ci_high"]), mu_bar)
        rows.append({"spec": fit["spec"]["name"], "term": t, "beta": float(b["estimate"]),
                     "beta_ci_low": float(b["ci_low"]), "beta_ci_high": float(b["ci_high"]),
                     "mu_bar": mu_bar, **g})
    return pd.DataFrame(rows)


def cost_of_privacy_from_table(tidy: pd.DataFrame, spec: str,
                               terms: Sequence[str] | None = None) -> pd.DataFrame:
    """Same as :func:`cost_of_privacy` but read from the :func:`fit_all` table."""
    sub = tidy.loc[(tidy["spec"] == spec)]
    if sub.empty:
        raise KeyError(f"spec {spec!r} not in table")
    if (sub["status"] != "ok").any():
        return pd.DataFrame([{"spec": spec, "term": t, "gamma": np.nan, "ci_low": np.nan,
                              "ci_high": np.nan, "bounded": False,
                              "note": f"spec skipped: {sub['reason'].iloc[0]}"}
                             for t in (terms or [])])
    if (sub["family"] != "beta").any():
        raise ValueError("cost of privacy is defined on the Beta model (App. G)")
    sub = sub.set_index("term")
    terms = list(terms) if terms else [t for t in sub.index if str(t).startswith("robust_acc")]
    rows = []
    for t in terms:
        b = sub.loc[t]
        mu_bar = float(b["response_mean"])
        g = gamma_from_beta(float(b["estimate"]), float(b["ci_low"]), float(b["ci_high"]), mu_bar)
        rows.append({"spec": spec, "term": t, "beta": float(b["estimate"]),
                     "beta_ci_low": float(b["ci_low"]), "beta_ci_high": float(b["ci_high"]),
                     "mu_bar": mu_bar, **g})
    return pd.DataFrame(rows)
