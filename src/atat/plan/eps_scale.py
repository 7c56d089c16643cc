"""One epsilon rule: every L-infinity radius taken from the paper is applied as
``factor x paper value`` (config ``epsilon_scale``; docs/decisions.md#one-ε-scale).

The paper works at 224 px. A run at another resolution (the demo: 32 px) states one factor,
with its derivation, in ``epsilon_scale: {factor: f, derivation: "..."}``; the paper config
says ``factor: 1``. The rule is applied here and nowhere else:

* AT-AT's (and vanilla AT's) training PGD: ``epsilon`` and ``step_size`` of every variant of a
  type in :data:`SCALED_DEFENSE_PARAMS` are written in the config in the paper's units and
  trained at ``factor x`` (:func:`scaled_defense_params`, called by
  :func:`atat.plan.config.defense_params`, so the dose-response variants and the causal
  replicates follow too). The step stays ε/5, as the paper's.
* AutoAttack: ``autoattack.epsilons`` stay the paper's values (table columns, file names and
  the ``epsilon`` field of every record are the paper's ε, so tables compare with the paper);
  the attack runs at :func:`autoattack_epsilon` and the record adds ``epsilon_applied``.

Units, written once. The models take inputs in [-1, 1] (``(x - 0.5) / 0.5``): a training PGD
radius is in those *input* units; AutoAttack works on [0, 1] *pixels*. One pixel unit is two
input units (:data:`INPUT_UNITS_PER_PIXEL_UNIT`; :func:`input_to_pixel`, :func:`pixel_to_input`):
the paper's AT-AT ε 0.0005 (input units) is 0.00025 in pixel units.

Ranges. An L-inf ball of pixel radius >= 1 around any image in [0, 1] already contains every
image, so ``min(factor x eps, 1)`` is the same threat model as ``factor x eps`` (exact, not a
clip of convenience); likewise 2 in input units. A factor is rejected (:func:`check`, a
:class:`~atat.plan.config.ConfigError` naming ``epsilon_scale.factor``) when it is not a
finite number > 0, when a scaled training radius leaves the input range (PGD would then
train on arbitrary images), or when even the smallest AutoAttack ε would cover the whole image
space (no column would measure anything).

Not this rule: Unseen-Pixels' mask penalties λ (docs/decisions.md#unseen-pixels) are loss
weights, not radii, and rest on another premise (docs/decisions.md#one-ε-scale).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

#: config key of the rule
KEY = "epsilon_scale"
#: the factor when the config states none: the paper's own resolution
DEFAULT_FACTOR = 1.0
#: [0, 1] pixel units -> [-1, 1] input units (the models' (x - 0.5) / 0.5)
INPUT_UNITS_PER_PIXEL_UNIT = 2.0
#: the largest meaningful radius in each unit: the ball then holds every image
MAX_PIXEL_RADIUS = 1.0
MAX_INPUT_RADIUS = MAX_PIXEL_RADIUS * INPUT_UNITS_PER_PIXEL_UNIT
#: defense types whose parameters are radii in input units taken from the paper
SCALED_DEFENSE_PARAMS: dict[str, tuple[str, ...]] = {
    "atat": ("epsilon", "step_size"),
    "at": ("epsilon", "step_size"),
}
#: significant digits a scaled value keeps (0.0005 x 49 is 0.0245, not 0.024499999999999997,
#: so a model's fingerprint does not depend on float noise)
_DIGITS = 12


def input_to_pixel(radius: float) -> float:
    """A radius in [-1, 1] input units in [0, 1] pixel units."""
    return float(radius) / INPUT_UNITS_PER_PIXEL_UNIT


def pixel_to_input(radius: float) -> float:
    """A radius in [0, 1] pixel units in [-1, 1] input units."""
    return float(radius) * INPUT_UNITS_PER_PIXEL_UNIT


def _tidy(value: float) -> float:
    return float(format(value, f".{_DIGITS}g"))


def factor(config: Mapping[str, Any]) -> float:
    """The configured factor (``DEFAULT_FACTOR`` when ``epsilon_scale`` is absent)."""
    block = config.get(KEY) or {}
    return float(block.get("factor", DEFAULT_FACTOR))


def scaled_eps(config: Mapping[str, Any], paper_eps: float) -> float:
    """``factor x paper_eps`` (any unit: the result is in the unit of ``paper_eps``)."""
    return _tidy(factor(config) * float(paper_eps))


def autoattack_epsilon(config: Mapping[str, Any], paper_eps: float) -> float:
    """The radius AutoAttack runs at for the paper's ``paper_eps`` ([0, 1] pixel units)."""
    return applied_pixel_radius(factor(config), paper_eps)


def applied_pixel_radius(scale: float, paper_eps: float) -> float:
    """``min(scale x paper_eps, 1)`` for a radius in [0, 1] pixel units (a ball of radius
    >= 1 already holds every image: the same threat model)."""
    return min(_tidy(float(scale) * float(paper_eps)), MAX_PIXEL_RADIUS)


def scaled_defense_params(config: Mapping[str, Any], params: Mapping[str, Any]
                          ) -> dict[str, Any]:
    """A defense variant's parameters as trained: the radii of a type in
    :data:`SCALED_DEFENSE_PARAMS` multiplied by the factor (when stated; the defense's
    defaults are the paper's values, so an unstated radius is scaled from its default)."""
    out = dict(params)
    names = SCALED_DEFENSE_PARAMS.get(str(out.get("type")), ())
    if not names or factor(config) == 1.0:
        return out
    # the defenses' own defaults, torch-free: the DAG calls this for every training job
    from atat.training.defense_defaults import PGD_DEFENSE_DEFAULTS

    defaults = PGD_DEFENSE_DEFAULTS[str(out["type"])]
    for name in names:
        value = out.get(name, defaults[name])
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = scaled_eps(config, value)
    return out


def check(config: Mapping[str, Any]) -> None:
    """Raise :class:`~atat.plan.config.ConfigError` naming ``epsilon_scale.factor`` when the
    factor is meaningless for this config (see the module docstring)."""
    from atat.plan.errors import ConfigError
    from atat.training.defenses import defense_class

    block = config.get(KEY)
    if block is None:
        return
    where = f"{KEY}.factor"
    f = block.get("factor") if isinstance(block, Mapping) else None
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0:
        raise ConfigError(f"invalid configuration: {where}: {f!r} is not a finite number > 0 "
                          "(applied radius = factor x the paper's; 1 = the paper's resolution)")
    for name, variant in sorted((config.get("defenses") or {}).items()):
        names = SCALED_DEFENSE_PARAMS.get(str(variant.get("type")), ())
        if not names:
            continue
        defaults = defense_class(variant["type"]).PARAMS
        for param in names:
            paper = variant.get(param, defaults[param].default)
            if not isinstance(paper, (int, float)) or isinstance(paper, bool):
                continue   # reported by the defense's own check
            if f * paper > MAX_INPUT_RADIUS:
                raise ConfigError(
                    f"invalid configuration: {where}: {f!r} x defenses.{name}.{param} "
                    f"{paper!r} = {f * paper:g} exceeds {MAX_INPUT_RADIUS:g} (the whole [-1, 1] "
                    "input range: the PGD of training would reach any image)")
    epsilons = [float(e) for e in (config.get("autoattack") or {}).get("epsilons") or []]
    if epsilons and f * min(epsilons) >= MAX_PIXEL_RADIUS:
        raise ConfigError(
            f"invalid configuration: {where}: {f!r} x the smallest autoattack.epsilons "
            f"{min(epsilons):g} = {f * min(epsilons):g} >= {MAX_PIXEL_RADIUS:g}: every "
            "AutoAttack radius would cover the whole [0, 1] image space")
