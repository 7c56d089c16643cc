"""Default parameters of the two adversarial-training defenses, AT-AT and vanilla AT, in a
torch-free module (docs/sources.md#adversarial-training). The defenses declare their
parameters with these values (:mod:`atat.training.defenses.atat`, :mod:`atat.training.defenses.at`),
and the cost model (:mod:`atat.plan.job_cost`, which the workflow imports while it builds the DAG,
without torch) counts a variant's PGD steps and loss passes from them: one copy of each
default, read by the code that trains and by the forecast."""

from __future__ import annotations

from typing import Any

#: AT-AT (paper §5): targeted L-inf PGD of 5 steps in [-1, 1] input units, the clean loss at
#: weight 1 and the adversarial loss at lambda = 0.08
ATAT_DEFAULTS: dict[str, Any] = {
    "epsilon": 0.0005, "step_size": 1e-4, "iterations": 5, "random_start": True,
    "weight_clean": 1.0, "weight_adv": 0.08,
}

#: vanilla (Madry) AT: untargeted PGD of 10 steps, eps 0.01, step 0.001; the adversarial loss
#: only (the clean forward pass is skipped while weight_clean is 0)
AT_DEFAULTS: dict[str, Any] = {
    "epsilon": 0.01, "step_size": 0.001, "iterations": 10, "random_start": True,
    "weight_clean": 0.0, "weight_adv": 1.0,
}

#: defense type -> its defaults (the types that train on PGD examples)
PGD_DEFENSE_DEFAULTS: dict[str, dict[str, Any]] = {"atat": ATAT_DEFAULTS, "at": AT_DEFAULTS}


def pgd_training_settings(variant: dict[str, Any] | Any) -> dict[str, Any] | None:
    """A defense variant's PGD settings as the defense trains with them (its values over the
    type's defaults), or None for a type that trains without PGD."""
    defaults = PGD_DEFENSE_DEFAULTS.get(str(variant.get("type")))
    if defaults is None:
        return None
    return {**defaults, **{k: v for k, v in variant.items() if k in defaults}}
