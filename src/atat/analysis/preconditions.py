"""The experiments' preconditions as checks the workflow reports.

Each experiment of the paper is only a test of its claim in its regime: AT-AT must make the
training PGD attack succeed and lower robust accuracy at small epsilon below NoDef's (§4),
the permuted-label models must rote-memorise their labels (App. A.3.1: > 99.4% training
accuracy), the Unseen-Pixels model must see < 3% of the pixels at a test accuracy within a few
points of NoDef's (§3), and Table 3's early-stopped NoDef must stop at a validation accuracy
comparable to that Unseen-Pixels model's (within the same few points; a NoDef whose validation
accuracy never reaches the target keeps its lowest-val-loss epoch, which the row says).
Optionally (``nodef_train_acc``, the demo's recipe criterion, experiment ``recipe``) each
cell's grid NoDef must fit its training data: training accuracy at least the threshold.
:func:`check_preconditions` turns ``results/summary.csv`` and the
models' ``metrics.json`` into one row per (check, model): ``experiment, model, check, value,
threshold, passed, note``. The thresholds are ``config['preconditions']``. A missing or NaN
value never passes (``passed = False`` with a note); a row that is reported only (AT-AT's
robust accuracy at the other epsilons) has ``passed`` empty.

The inversion attacks' prior is checked too (experiment ``inversion prior``, model
``generators/<name>``): its recognition rate, precision and coverage in the public
classifier's terms, each normalised between a structure-free floor and real unseen faces
(:mod:`atat.inversion.prior_quality`, rule ``prior_quality``). A prior that cannot be measured
(downloaded, or no public-identity classifier) has one reported-only row saying why.

The measurement's own regime (the paper's numbers are measured in it):

* **AutoAttack regime** (model: each cell's grid NoDef; check ``robust_below_clean_eps<tag>``
  per AutoAttack epsilon): robustness is a regressor of §4 only where AutoAttack separates it
  from clean accuracy. On the n AutoAttack examples robust-correct implies clean-correct, so the
  drop d = clean - robust is the share of examples that are clean-correct and broken, a
  binomial proportion with standard error SE = sqrt(d (1 - d) / n) (the paired SE of the two
  accuracies). Passes when d > 0, d >= ``autoattack_regime_se`` x SE and robust accuracy > 0
  (something is left to rank the defenses by). Epsilons above ``autoattack_regime_max_eps``
  are reported only: at the paper's 0.031 every model has 0% robust accuracy (§4).
* **evaluation model** (model: the dataset; check ``held_out_acc``): the accuracy of the
  evaluation model on the private test images it was not trained on, at least
  ``evaluation_heldout_acc``; AttAcc@1 is this classifier's verdict, and the paper's evaluators
  are far more accurate (docs/sources.md#evaluation-model-accuracy).
* **determinism** (every model; check ``repeated_clean_predictions_agree``): the share of test
  images whose two clean predictions agree (metrics.json ``eval_agreement``, written by
  :func:`atat.training.train.train`), at least ``eval_agreement``. MID samples its bottleneck at
  evaluation by design and fails it; the row says so.
* **attack regime** (model: the claims cell's grid NoDef; check ``ppa_attacc1``): PPA's
  AttAcc@1 on the undefended model at least ``nodef_ppa_attacc1``: every defense effect is a
  fall from this level (the paper's NoDef: 84%, §5).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from atat.base import io
from atat.plan.config import ConfigError, eps_tag
from atat.plan.inversion_defaults import PRIOR_STATISTICS
from atat.analysis.paper import (claims_cell, inversion_priors, output, plain_nodef_defenses,
                                 precondition_roles, prior_quality_path, prior_unmeasured_reason,
                                 section3_roles)
from atat.analysis.summary import robust_column

log = logging.getLogger(__name__)

COLUMNS = ["experiment", "model", "check", "value", "threshold", "passed", "note"]
THRESHOLD_KEYS = ["atat_attack_success", "atat_attack_success_epochs", "atat_robust_eps",
                  "atat_robust_gap", "permuted_train_acc", "unseen_pixels_kept_fraction",
                  "unseen_pixels_test_acc_drop", "prior_recognition", "prior_precision",
                  "prior_coverage", "autoattack_regime_max_eps", "autoattack_regime_se",
                  "evaluation_heldout_acc", "eval_agreement", "nodef_ppa_attacc1"]
#: optional thresholds (absent: no rows): the demo's recipe criterion, NoDef's training fit
OPTIONAL_THRESHOLD_KEYS = ["nodef_train_acc"]
_TOL = 1e-9  # a value exactly at its threshold compares as at it, not as a float below it

#: what to do when a check fails (the WARNING line of the job's log)
ADVICE = {
    "attack_success": "raise defenses.{defense}.epsilon or weight_adv, or train longer",
    "robust_acc_gap": "raise defenses.{defense}.epsilon or weight_adv (AT-AT does not lower "
                      "small-eps robustness below NoDef's)",
    "train_acc": "train longer or at a higher lr (defenses.{defense}.training.epochs / lr)",
    "kept_pixel_fraction": "raise the mask stages' thresholds or epochs "
                           "(defenses.*.change_threshold_epoch, mask_lr)",
    "test_acc_vs_nodef": "retrain longer (defenses.{defense}.training.epochs) or keep more "
                         "pixels",
    "nodef_train_acc": "the cell's recipe underfits: give it more epochs (an `overrides` entry "
                       "on its architecture or dataset, config/demo.yaml)",
    "early_stop_val_acc_gap": "the early-stopped NoDef's validation accuracy is not comparable "
                              "to its target's: validate more often or train longer "
                              "(defenses.{defense}.training.eval_every / epochs)",
    "prior_": "train the prior longer or larger (generators.{generator}.train: steps, "
              "channel_base/channel_max, lr, batch_size)",
    "robust_below_clean": "AutoAttack does not separate robust from clean accuracy at this eps "
                          "(no drop beyond its noise, or nothing left robust): more examples "
                          "(autoattack.n_examples), stronger settings (autoattack.settings) or "
                          "the eps's scale",
    "held_out_acc": "the evaluation model misjudges unseen images of the private identities: "
                    "train it longer or from pretrained weights (evaluation_model.training, "
                    "evaluation_model.pretrained)",
    "repeated_clean_predictions_agree": "two clean passes of the same weights disagree: random "
                                        "at evaluation (MID by design) or nondeterministic "
                                        "kernels",
    "ppa_attacc1": "PPA does not reach the paper's NoDef leakage on this cell: a larger attack "
                   "budget (inversion.ppa: candidates, steps) or a more accurate target",
}
PRIOR = "inversion prior"  # the experiment label of the prior's rows
EVALUATION = "evaluation model"


def thresholds(config: Mapping[str, Any]) -> dict[str, float]:
    """``config['preconditions']``, every key present (else a ConfigError naming it)."""
    section = config.get("preconditions")
    if not isinstance(section, Mapping):
        raise ConfigError("invalid configuration: preconditions: section missing (see "
                          "config/config.yaml and config/README.md)")
    missing = [k for k in THRESHOLD_KEYS if k not in section]
    if missing:
        raise ConfigError(f"invalid configuration: preconditions: keys {missing} missing")
    out = {}
    for k in THRESHOLD_KEYS + OPTIONAL_THRESHOLD_KEYS:
        if k not in section:
            continue
        v = section[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"invalid configuration: preconditions.{k}: {v!r} is not a "
                              "finite number")
        out[k] = float(v)
    return out


def cell_prefix(dataset: str, architecture: str) -> str:
    """The start of the :func:`model_name` of every model of one (dataset, architecture)."""
    return f"{dataset}/{architecture}/"


def model_name(row: Mapping[str, Any]) -> str:
    """The model's path under results/models/ (``dataset/arch/defense/seedN``)."""
    return (cell_prefix(row["dataset"], row["architecture"])
            + f"{row['defense']}/seed{int(row['seed'])}")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _row(experiment: str, model: str, check: str, value: Any, threshold: str,
         passed: bool | None, note: str = "") -> dict[str, Any]:
    value = float("nan") if _missing(value) else float(value)
    if passed is not None and math.isnan(value):
        passed = False
        note = "; ".join(x for x in ("value missing: not checked, counts as failed", note) if x)
    return dict(experiment=experiment, model=model, check=check, value=value,
                threshold=threshold, passed=passed, note=note)


def _nodef(summary: pd.DataFrame, nodef: Sequence[str], row: Mapping[str, Any]
           ) -> tuple[pd.DataFrame, str]:
    """NoDef rows of the same dataset/architecture/seed; else (e.g. causal replicates) of the
    same dataset/architecture, with a note saying so."""
    cell = summary[(summary["dataset"] == row["dataset"])
                   & (summary["architecture"] == row["architecture"])
                   & summary["defense"].isin(nodef)]
    same = cell[cell["seed"] == row["seed"]]
    if len(same):
        return same.iloc[:1], ""
    if len(cell):
        return cell, f"no NoDef of seed {int(row['seed'])}: mean of {len(cell)} NoDef models"
    return cell, "no NoDef model of this dataset/architecture"


def _mean(df: pd.DataFrame, column: str) -> float:
    if column not in df.columns or not len(df):
        return float("nan")
    values = pd.to_numeric(df[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) == len(df) else float("nan")


def _wilson(rate: float, n: Any) -> str:
    from atat.analysis.stats.intervals import wilson_interval  # statsmodels: only when reported

    if _missing(rate) or _missing(n) or not n or not 0 <= rate <= 1:
        return "n/a"
    lo, hi = wilson_interval(int(round(rate * int(n))), int(n))
    return f"{rate:.3f} [{lo:.3f}, {hi:.3f}] (n={int(n)})"


def _success(history: Sequence[Mapping[str, Any]], epochs: int) -> tuple[float, str]:
    values = [float(h["attack_success"]) for h in history if "attack_success" in h]
    if not values:
        return float("nan"), "no attack_success in the training history"
    last = values[-epochs:]
    note = f"mean of the last {len(last)} epochs (" + ", ".join(f"{v:.3f}" for v in last) + ")"
    if len(last) < epochs:
        note += f"; only {len(last)} epochs logged"
    return sum(last) / len(last), note


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def prior_rows(priors: Mapping[str, Mapping[str, Any] | None], config: Mapping[str, Any]
               ) -> list[dict[str, Any]]:
    """The prior's rows: ``priors`` maps each generator the attacks use to its quality record
    (:func:`atat.inversion.prior_quality.prior_quality`), or None where it is not measured
    (one reported-only row with the reason)."""
    th = thresholds(config)
    rows = []
    for name, q in priors.items():
        model = f"generators/{name}"
        if q is None:
            reason = prior_unmeasured_reason(config, name) or "quality record missing"
            rows.append(_row(PRIOR, model, "prior_quality", None, "", None, reason))
            continue
        for stat in PRIOR_STATISTICS:
            if not isinstance(q.get(stat), Mapping):  # e.g. a record of an older version
                rows.append(_row(PRIOR, model, f"prior_{stat}", None,
                                 f">= {th[f'prior_{stat}']:g}", False,
                                 f"no {stat} in the quality record: rerun rule prior_quality"))
                continue
            s = {k: _num(v) for k, v in q[stat].items() if k != "members"}
            n = q["n_recall"] if stat == "coverage" else q["n_samples"]
            note = ""
            if int(q.get("classifiers", 1)) > 1:
                members = " / ".join(f"{_num(v):.2f}" for v in q[stat]["members"])
                note = (f"median of {q['classifiers']} public classifiers (seeds "
                        f"{', '.join(str(r['classifier_seed']) for r in q['classifier_records'])}"
                        f"; normalised each {members}): ")
            note += (f"prior {s['prior']:.3f} (n={n}), ceiling {s['ceiling']:.3f} (held-out "
                    f"real public images, n={q['n_heldout']}), floor {s['floor']:.3f} "
                    f"(per-pixel Gaussian); normalised (prior - floor) / (ceiling - floor)")
            if stat == "recognition":
                note += (f"; softmax >= {q['confidence']:g}; identities recognised "
                         f"{q['identities_recognised']['prior']} of {q['n_identities']}")
            else:
                note += f"; k = {q['k']}, {q['n_reference']} real reference images"
            if stat == "coverage" and isinstance(q.get("recall"), Mapping):
                r = {k: _num(v) for k, v in q["recall"].items() if k != "members"}
                note += (f"; improved recall (reported only) prior {r['prior']:.3f}, ceiling "
                         f"{r['ceiling']:.3f}, floor {r['floor']:.3f}")
            if math.isnan(s["normalised"]) and s["ceiling"] <= s["floor"]:
                note += "; ceiling <= floor: the classifier does not tell real faces from it"
            value, target = s["normalised"], th[f"prior_{stat}"]
            rows.append(_row(PRIOR, model, f"prior_{stat}", value, f">= {target:g}",
                             not math.isnan(value) and value >= target - _TOL, note))
    return rows


def _early_stop_row(name: str, m: Mapping[str, Any], summary: pd.DataFrame,
                    r: Mapping[str, Any], drop: float) -> dict[str, Any]:
    """Table 3's early-stopped NoDef (experiment Unseen-Pixels): its validation accuracy minus
    the one it stops at (the Unseen-Pixels model's, ``stop_reference`` in its metrics.json),
    passed when within ``drop`` either way; the note says whether the stop acted."""
    ref = m.get("stop_reference") or {}
    target = ref.get("val_acc", (m.get("training") or {}).get("stop_at_val_acc"))
    target = target if isinstance(target, (int, float)) else None  # a name: never resolved
    mine = m.get("val_acc")
    gap = _num(mine) - _num(target)
    epochs, best = m.get("epochs"), m.get("best_epoch")
    if m.get("stopped_early"):
        how = f"stopped at epoch {best} of {epochs}: first validation reaching the target"
    elif m:
        how = (f"target never reached in {epochs} epochs: the lowest-val-loss epoch ({best}) is "
               "kept, i.e. not an early-stopped model")
    else:
        how = "no metrics.json"
    source = ref.get("model_id") or "a fixed number"
    parts = [f"val acc. {_num(mine):.3f} vs target {_num(target):.3f} ({source})", how]
    reference = summary[(summary["dataset"] == r["dataset"])
                        & (summary["architecture"] == r["architecture"])
                        & (summary["seed"] == r["seed"])
                        & (summary["defense"] == ref.get("defense"))]
    if len(reference):
        parts.append(f"test acc. {float(r['test_acc']):.3f} vs "
                     f"{float(reference['test_acc'].iloc[0]):.3f}")
    return _row("Unseen-Pixels", name, "early_stop_val_acc_gap", gap, f"|.| <= {drop:g}",
                not math.isnan(gap) and abs(gap) <= drop + _TOL, "; ".join(parts))


def autoattack_regime_rows(name: str, r: Mapping[str, Any], epsilons: Sequence[float],
                           th: Mapping[str, float]) -> list[dict[str, Any]]:
    """A NoDef's AutoAttack regime at each epsilon (module docstring): the drop d = clean -
    robust accuracy on the AutoAttack examples against ``autoattack_regime_se`` standard errors
    SE = sqrt(d (1 - d) / n), and robust accuracy above 0; reported only above
    ``autoattack_regime_max_eps``."""
    k, rows = th["autoattack_regime_se"], []
    for e in epsilons:
        tag = eps_tag(e)
        clean, robust, n = (_num(r.get(c)) if not _missing(r.get(c)) else float("nan")
                            for c in (f"aa_clean_acc_eps{tag}", robust_column(e),
                                      f"aa_n_examples_eps{tag}"))
        drop = clean - robust
        check = f"robust_below_clean_eps{tag}"
        if any(math.isnan(v) for v in (clean, robust, n)) or n < 1:
            rows.append(_row("AutoAttack regime", name, check, None,
                             f">= {k:g} SE and robust acc. > 0", False,
                             "no AutoAttack record (clean, robust accuracy and examples)"))
            continue
        se = math.sqrt(max(drop * (1 - drop), 0.0) / n)
        note = (f"clean {clean:.3f}, robust {robust:.3f} on {int(n)} AutoAttack examples; drop "
                f"d = {drop:.3f}, SE = sqrt(d(1-d)/n) = {se:.3f}")
        if e > th["autoattack_regime_max_eps"] * (1 + _TOL):
            rows.append(_row("AutoAttack regime", name, check, drop, "", None,
                             f"reported only (eps above autoattack_regime_max_eps "
                             f"{th['autoattack_regime_max_eps']:g}); {note}"))
            continue
        passed = drop > 0 and drop >= k * se - _TOL and robust > 0
        rows.append(_row("AutoAttack regime", name, check, drop,
                         f">= {k:g} SE ({k * se:.3f}) and robust acc. > 0", passed, note))
    return rows


def evaluation_rows(evaluation: Mapping[str, Mapping[str, Any] | None],
                    config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The evaluation model of each attacked dataset (``evaluation``: dataset -> its
    metrics.json, None where missing): held-out accuracy on the private test images."""
    target = thresholds(config)["evaluation_heldout_acc"]
    rows = []
    for dataset, m in sorted(evaluation.items()):
        m = m or {}
        value = m.get("heldout_acc", m.get("test_acc"))
        n = m.get("n_heldout", m.get("n_test"))
        note = (f"{_wilson(_num(value), n)} (95% Wilson) on the private test images it was not "
                f"trained on; pretrained: {m.get('pretrained')}; the paper's evaluators: about "
                f"0.95-0.97 (docs/sources.md#evaluation-model-accuracy)") if m else \
            "no evaluation-model metrics"
        rows.append(_row(EVALUATION, dataset, "held_out_acc", value, f">= {target:g}",
                         not _missing(value) and value >= target - _TOL, note))
    return rows


def _determinism_row(name: str, r: Mapping[str, Any], m: Mapping[str, Any],
                     th: Mapping[str, float]) -> dict[str, Any]:
    value = m.get("eval_agreement")
    note = "share of test images whose two clean passes (same weights, eval mode) agree"
    if r.get("defense_type") == "mid":
        note += "; MID samples its bottleneck at evaluation (by design), so its passes differ"
    if _missing(value) and m:
        note += "; no eval_agreement in metrics.json: retrain (rule train_model)"
    return _row("determinism", name, "repeated_clean_predictions_agree", value,
                f">= {th['eval_agreement']:g}",
                not _missing(value) and value >= th["eval_agreement"] - _TOL, note)


def _attack_regime_row(name: str, r: Mapping[str, Any], th: Mapping[str, float]
                       ) -> dict[str, Any]:
    value, n = r.get("ppa_attacc1"), r.get("ppa_n_images")
    images = "" if _missing(n) else f" on {int(n)} attacked images"
    return _row("attack regime", name, "ppa_attacc1", value, f">= {th['nodef_ppa_attacc1']:g}",
                not _missing(value) and value >= th["nodef_ppa_attacc1"] - _TOL,
                f"PPA AttAcc@1 of the claims cell's NoDef{images}; the paper's NoDef 0.84 "
                "(§5, App. H): every defense effect is a fall from this level")


def check_preconditions(summary: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]],
                        config: Mapping[str, Any],
                        priors: Mapping[str, Mapping[str, Any] | None] | None = None,
                        evaluation: Mapping[str, Mapping[str, Any] | None] | None = None
                        ) -> pd.DataFrame:
    """One row per (check, model) of every model an experiment applies to (module docstring).

    ``metrics``: model name (:func:`model_name`) -> its ``metrics.json`` (``history``,
    ``n_test``, ``eval_agreement``); a model without it fails the checks that need it.
    ``priors``: see :func:`prior_rows`. ``evaluation``: see :func:`evaluation_rows`."""
    th = thresholds(config)
    roles = precondition_roles(config)
    nodef = plain_nodef_defenses(config)
    early_stopped = section3_roles(config)["NoDef (early-stopped)"]
    epsilons = [float(e) for e in config["autoattack"]["epsilons"]]
    eps = min(epsilons, key=lambda e: abs(e - th["atat_robust_eps"]))
    measured = [e for e in epsilons if robust_column(e) in summary.columns]
    claims = claims_cell(config)
    rows: list[dict[str, Any]] = []
    for _, r in summary.iterrows():
        name, m = model_name(r), metrics.get(model_name(r), {})
        if r["defense"] in roles["AT-AT"]:
            value, note = _success(m.get("history") or [], int(th["atat_attack_success_epochs"]))
            rows.append(_row("AT-AT", name, "attack_success", value,
                             f">= {th['atat_attack_success']:g}",
                             value >= th["atat_attack_success"] - _TOL, note))
            ref, ref_note = _nodef(summary, nodef, r)
            for e in epsilons:
                col = robust_column(e)
                mine = float(r[col]) if col in r and not _missing(r[col]) else float("nan")
                base = _mean(ref, col)
                gap = base - mine
                note = "; ".join(x for x in (f"NoDef {base:.3f}, AT-AT {mine:.3f}", ref_note)
                                 if x)
                if e == eps:
                    rows.append(_row("AT-AT", name, f"robust_acc_gap_eps{e:g}", gap,
                                     f">= {th['atat_robust_gap']:g}",
                                     gap >= th["atat_robust_gap"] - _TOL, note))
                elif e < max(epsilons):
                    n = r.get(f"aa_n_examples_eps{col.removeprefix('robust_acc_eps')}")
                    n_text = "" if _missing(n) else f", {int(n)} AutoAttack examples"
                    rows.append(_row("AT-AT", name, f"robust_acc_gap_eps{e:g}", gap, "",
                                     None, f"reported only{n_text}; {note}"))
        if r["defense"] in roles["permuted labels"]:
            value = r.get("train_acc")
            rows.append(_row("permuted labels", name, "train_acc", value,
                             f"> {th['permuted_train_acc']:g}",
                             not _missing(value) and value > th["permuted_train_acc"] + _TOL,
                             "un-augmented, on the permuted labels"))
        if r["defense"] in roles["Unseen-Pixels"]:
            value = r.get("kept_pixel_fraction")
            rows.append(_row("Unseen-Pixels", name, "kept_pixel_fraction", value,
                             f"< {th['unseen_pixels_kept_fraction']:g}",
                             not _missing(value)
                             and value < th["unseen_pixels_kept_fraction"] - _TOL))
            ref, ref_note = _nodef(summary, nodef, r)
            base, mine = _mean(ref, "test_acc"), float(r["test_acc"])
            ref_n = (metrics.get(model_name(ref.iloc[0]), {}).get("n_test") if len(ref)
                     else None)
            note = "; ".join(x for x in (f"Unseen-Pixels {_wilson(mine, m.get('n_test'))}, "
                                         f"NoDef {_wilson(base, ref_n)} (95% Wilson)", ref_note)
                             if x)
            drop = th["unseen_pixels_test_acc_drop"]
            rows.append(_row("Unseen-Pixels", name, "test_acc_vs_nodef", mine - base,
                             f">= -{drop:g} (test acc - NoDef's)",
                             mine - base >= -drop - _TOL, note))
        if ("nodef_train_acc" in th and r["defense"] in nodef
                and _missing(r.get("replicate"))):  # the grid's NoDef of each cell
            value = r.get("train_acc")
            rows.append(_row("recipe", name, "nodef_train_acc", value,
                             f">= {th['nodef_train_acc']:g}",
                             not _missing(value) and value >= th["nodef_train_acc"] - _TOL,
                             "the cell's NoDef fits its training data (un-augmented training "
                             "accuracy): the recipe criterion of config/demo.yaml"))
        if r["defense"] in early_stopped:
            rows.append(_early_stop_row(name, m, summary, r, th["unseen_pixels_test_acc_drop"]))
        if r["defense"] in nodef and _missing(r.get("replicate")):  # each cell's grid NoDef
            rows += autoattack_regime_rows(name, r, measured, th)
            if (r["dataset"], r["architecture"]) == claims and "ppa_attacc1" in summary.columns:
                rows.append(_attack_regime_row(name, r, th))
        rows.append(_determinism_row(name, r, m, th))
    rows += evaluation_rows(evaluation or {}, config)
    rows += prior_rows(priors or {}, config)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["passed"] = df["passed"].astype("boolean")
    return df


def warn_failed(df: pd.DataFrame) -> int:
    """One WARNING line per failed check naming the model and what to do; returns the count."""
    failed = df[df["passed"].fillna(True) == False]  # noqa: E712 - NA (reported only) is no failure
    for _, r in failed.iterrows():
        kind = next(k for k in ADVICE if r["check"].startswith(k))
        parts = r["model"].split("/")
        advice = ADVICE[kind].format(defense=parts[2] if len(parts) > 2 else "",
                                     generator=parts[-1])
        log.warning("precondition failed: %s %s: %s = %.4g (needs %s; %s): %s",
                    r["experiment"], r["model"], r["check"], r["value"], r["threshold"],
                    r["note"], advice)
    return len(failed)


def preconditions_table(summary_csv: str | Path, metrics_files: Mapping[str, str | Path],
                        outputs: Sequence[str | Path], config: Mapping[str, Any],
                        prior_files: Mapping[str, str | Path | None] | None = None,
                        evaluation_files: Mapping[str, str | Path] | None = None
                        ) -> pd.DataFrame:
    """``results/tables/preconditions.{csv,md}`` (never fails on a failed check: it is
    reported, and logged as a WARNING). ``prior_files``: each generator the attacks use ->
    its quality record (rule prior_quality), None where it is not measured.
    ``evaluation_files``: each attacked dataset -> its evaluation model's metrics.json."""
    from atat.analysis.tables import write_table  # imports the table builders' dependencies

    summary = pd.read_csv(summary_csv)
    metrics = {name: io.read_json(path) for name, path in metrics_files.items()}
    priors = {name: None if path is None else io.read_json(path)
              for name, path in (prior_files or {}).items()}
    evaluation = {name: io.read_json(path) for name, path in (evaluation_files or {}).items()}
    df = check_preconditions(summary, metrics, config, priors, evaluation)
    n_failed = warn_failed(df)
    n_checked = int(df["passed"].notna().sum())
    caption = (f"{output('preconditions').caption} {n_checked - n_failed} of {n_checked} "
               f"checks passed.")
    out = df.copy()
    out["passed"] = ["" if pd.isna(v) else bool(v) for v in df["passed"]]  # "": reported only
    write_table(out, outputs, caption)
    return df
