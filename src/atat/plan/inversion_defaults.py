"""Defaults of the inversion stage's settings that the config may leave out, in a torch-free
module: the jobs (atat.inversion.ifgmi, atat.inversion.evaluation) fill them in, and
atat.plan.config validates the filled-in values before any job, so both must read one copy."""

from __future__ import annotations

from typing import Any, Mapping

#: the inversion prior's quality statistics with a precondition target ``prior_<name>`` in
#: ``config['preconditions']`` (keys of its quality record, atat.inversion.prior_quality)
PRIOR_STATISTICS = ("recognition", "precision", "coverage")

#: Recipe of the evaluation model and face-embedding network (REP classifier config;
#: docs/sources.md#evaluation-model); config values are merged over these.
EVAL_TRAINING_DEFAULTS: dict[str, Any] = {
    "epochs": 100, "lr": 1e-3, "betas": [0.9, 0.999], "batch_size": 128,
    "lr_milestones": [75, 90], "lr_gamma": 0.1, "eval_every": 5,
    # resume file after every epoch (atat.training.train.fit); it does not change the model
    "checkpoint_every": 1,
}

#: PPDG's steps per round (docs/sources.md#ppdg: set in the authors' code by the measure) of
#: projecting the pivots (``inv_steps``) and tuning the generator (``tune_steps``) where the
#: config gives none: atat.inversion.ppdg runs them, atat.plan.job_cost counts them.
PPDG_INV_STEPS: dict[str, int] = {"pointwise": 300, "mmd": 100, "ct": 150}
PPDG_TUNE_STEPS: dict[str, int] = {"pointwise": 150, "mmd": 150, "ct": 25}

#: IF-GMI settings of docs/sources.md#if-gmi for keys the config does not give.
IFGMI_DEFAULTS: dict[str, Any] = {
    "lr": 0.005,
    "betas": [0.1, 0.1],
    "loss": "poincare",
    "rrc_scale": [0.9, 1.0],
    "rrc_ratio": [1.0, 1.0],
    "max_radius_mid": [1000, 2000, 3000, 4000, 5000, 6000, 8000, 8000],
    "max_radius_w": [1000, 2000, 3000, 4000, 5000, 6000, 8000, 8000],
}
IFGMI_CANDIDATE_DEFAULTS: dict[str, Any] = {
    "horizontal_flip": True, "batch_size": 20, "truncation_psi": 0.5, "truncation_cutoff": 8,
}


def ifgmi_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the docs/sources.md#if-gmi defaults filled in for missing keys (e.g. the demo
    config names only candidates/batch_size/steps)."""
    out = {**IFGMI_DEFAULTS,
           **{k: v for k, v in params.items() if v is not None or k not in IFGMI_DEFAULTS}}
    out["candidates"] = {**IFGMI_CANDIDATE_DEFAULTS, **dict(params.get("candidates") or {})}
    steps = params["steps"]
    out["steps"] = [int(s) for s in (steps if isinstance(steps, (list, tuple)) else [steps])]
    return out
