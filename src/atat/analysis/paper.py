"""The paper's outputs: one registry entry per table, figure and final data product.

Every output the workflow's ``all`` builds is an :class:`Output` of :data:`REGISTRY`:

* ``id``       -- its name (``table1``, ``figure5``, ``hsic``...);
* ``rule``     -- the Snakemake rule that builds it (``workflow/rules/<stage>.smk``); one rule
  per table, with the table's fixed output paths (no two rules share an output pattern);
* ``family``   -- for a table of a family built alike (the AutoAttack, HSIC, regression and
  main-results tables): the family, whose rules file generates the rule of each of its
  entries in a loop over :func:`table_rules` (the rule is named after the table:
  ``rule == id``); ``""`` for an output whose rule is written out;
* ``stage``    -- the rules file of that rule (``hsic``, ``inversion``, ``summary``,
  ``tables``, ``stats``);
* ``targets``  -- the selection: a function of the :class:`Plan` (config + planned models)
  returning the files this config can build (``[]`` = not built for this config: a table
  whose inputs the config lacks is never a target, and never a failing job);
* ``builder``  -- ``"module:function"`` that writes it (resolved by the unit tests);
* ``caption``  -- the paper's caption (the builder adds what depends on the run: seeds,
  the attacks run, the attack precision...), empty where the builder composes it all;
* ``labels``   -- row-label overrides of this output over :data:`DEFENSE_LABELS`
  (paper Table 1 calls BiDO(.001,0) "BiDO**"; :meth:`Output.defense_labels`).

``workflow/rules/common.smk``'s ``all_targets()`` is :func:`final_targets` of the config's
plan; the rules take their selections from here (:func:`hsic_table_runs`,
:func:`section3_roles`, :func:`table4_architecture`...). :func:`check` runs when the config
is validated: a name an entry refers to that the config or ``config/regressions.yaml`` does
not define is a :class:`atat.plan.config.ConfigError` naming the key, never a missing target.

Labels: one label per defense / architecture / dataset (the paper's typography), here only.
A defense variant the paper does not have is labelled by its type (:func:`type_label`,
:meth:`DefenseLabels.with_types`): a new variant of a known type gets its type's label and
its name, a new type a readable default from its name.

Adding an output (e.g. a regression table, a causal table, a dose-response figure):

1. write its builder in the library (``atat.analysis.tables`` for tables, ``atat.analysis.figures`` for
   figures) with a unit test;
2. add one ``Output(...)`` to :data:`REGISTRY` with its selection function (next to the
   others below; a new config/spec name it refers to goes into :func:`check`);
3. give it a rule named after it in its stage's rules file with the fixed output paths of
   ``targets`` (a thin adapter in ``workflow/scripts/`` calling the builder), its resources
   in ``profiles/slurm/config.yaml`` if it is not a one-CPU job. ``all`` picks it up.

A further table of a family (a regression table, a main-results table) is one place: its id
in :data:`REGRESSION_TABLE_IDS` (with its caption in ``_REGRESSION_CAPTIONS``) or
:data:`MAIN_TABLE_IDS`, plus its specs in ``config/regressions.yaml`` or its layout in
``atat.analysis.tables.MAIN_TABLES``: the family's loop in its rules file gives it its rule
(``table<N>``), the builder reads the id from the rule's params.
``tests/data/all_targets.json`` records the targets of the paper and demo configs
(``tests/test_paper.py``): update it with the new files.

This module imports neither torch nor statsmodels (it runs while Snakemake builds the DAG;
``tests/test_config_memo.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, Sequence

from atat.plan.config import (PAPER_ROLE_NAMES, main_architecture, paper_roles, translate,
                         TABLE4_DEFAULT_ARCHITECTURE, ConfigError, dose_response_points,
                         with_dose_response)

EXTS = ("csv", "md", "tex")

# ------------------------------------------------------------------------------ labels
#: One label per defense variant (paper typography: §2-§3, Tables 1/9, App. D.1).
class DefenseLabels(dict):
    """The defense labels; a dose-response variant generated from a labelled defense
    (``atat_w0p25``, :func:`atat.plan.config.dose_response_variant_name`) is labelled from its base,
    "AT-AT (λ = 0.25)", so every table and figure that reads labels here names it alike."""

    _GENERATED = re.compile(r"^(?P<base>.+)_w(?P<tag>[0-9pme]+)$")

    def _generated(self, key: Any) -> str | None:
        m = self._GENERATED.match(str(key))
        if m is None or m["base"] not in self:
            return None
        try:
            value = float(m["tag"].replace("p", ".").replace("m", "-"))
        except ValueError:
            return None
        return f"{self[m['base']]} (\u03bb = {value:g})"

    def __missing__(self, key: Any) -> str:
        generated = self._generated(key)
        if generated is None:
            raise KeyError(key)
        return generated

    def get(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        if key in self:
            return self[key]
        generated = self._generated(key)
        return default if generated is None else generated

    def with_types(self, types: Mapping[str, Any]) -> DefenseLabels:
        """These labels and one for every variant of ``types`` (variant name -> its defense
        type; :func:`defense_types`) that has none: its type's label (:func:`type_label`),
        followed by the variant's name in parentheses unless the variant is named after its
        type. A new variant ``mid_b2`` of type mid is "MID (mid_b2)"; a variant ``noise`` of a
        type ``noise`` the paper does not have is "Noise"."""
        out = DefenseLabels(self)
        for variant, type_name in types.items():
            if not isinstance(type_name, str) or self.get(variant) is not None:
                continue
            text = type_label(type_name, self)
            out[variant] = text if variant == type_name else f"{text} ({variant})"
        return out


#: Labels of defense types that have no variant named after them.
TYPE_LABELS = {"pixel_mask": "Unseen-Pixels"}


def type_label(type_name: str, labels: Mapping[str, str] | None = None) -> str:
    """The label of a defense type: :data:`TYPE_LABELS`, else the label of the variant named
    after it (``mid`` -> "MID"), else a readable default from the type's name (underscores as
    spaces, first letter upper case: ``noise_input`` -> "Noise input")."""
    labels = DEFENSE_LABELS if labels is None else labels
    if type_name in TYPE_LABELS:
        return TYPE_LABELS[type_name]
    if type_name in labels:
        return labels[type_name]
    text = type_name.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def defense_types(*frames: Any, config: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Variant name -> defense type, from tables with columns ``defense`` and
    ``defense_type`` (results/summary.csv) and from ``config['defenses']``."""
    types: dict[str, str] = {}
    for frame in frames:
        if frame is not None and {"defense", "defense_type"} <= set(frame.columns):
            types.update({d: t for d, t in zip(frame["defense"], frame["defense_type"])
                          if isinstance(t, str)})
    for name, spec in ((config or {}).get("defenses") or {}).items():
        if isinstance(spec, Mapping) and isinstance(spec.get("type"), str):
            types[name] = spec["type"]
    return types


DEFENSE_LABELS = DefenseLabels({"nodef": "NoDef", "atat": "AT-AT", "mid": "MID", "bido": "BiDO",
                  "tldmi": "TL-DMI", "tldmi5": "TL-DMI-5", "negls": "NegLS", "rolss": "RoLSS",
                  "rolss_ssf": "RoLSS-SSF", "trap_mid": "Trap-MID", "at": "AT",
                  "trap_mid_star": "Trap-MID*", "bido_lx1e3": "BiDO(.001,0)",
                  "bido_lx1e4": "BiDO(.0001,0)", "nodef_es": "NoDef (early-stopped)",
                  "permuted": "NoDef, permuted labels", "unseen_pixels": "Unseen-Pixels",
                  "unseen_pixels_gl": "Unseen-Pixels mask stage 1 (GL)",
                  "unseen_pixels_agl": "Unseen-Pixels mask stage 2 (AGL)"})
#: Paper §2's seven baselines (generic and gradient-suppressing), by defense type: what §6
#: compares AT-AT with (the claims, Figure 4).
BASELINE_TYPES = ("mid", "bido", "tldmi", "negls", "rolss", "rolss_ssf", "trap_mid")
#: The defense types Figure 4 plots (§6: "AT-AT (red points) to baselines"; NoDef as the
#: reference), each the standard variant (the defense named after its type).
FIGURE4_TYPES = ("nodef", *BASELINE_TYPES, "atat")


def is_standard_variant(config: Mapping[str, Any], defense: str) -> bool:
    """Whether ``defense`` is its type's standard variant, the defense named after its type
    (``bido``, not BiDO** ``bido_lx1e3`` nor a dose-response ``atat_w1``); a name the config
    does not define counts as its own type."""
    spec = (config.get("defenses") or {}).get(defense) or {}
    return spec.get("type", defense) == defense


ARCH_LABELS = {"resnet18": "ResNet-18", "resnet152": "ResNet-152", "densenet169": "DenseNet-169",
               "resnet10": "ResNet-10", "densenet47": "DenseNet-47"}
DATASET_LABELS = {"facescrub": "FaceScrub", "celeba": "CelebA", "stanford_dogs": "Stanford Dogs",
                  "synthfaces": "SynthFaces", "synthfaces_b": "SynthFaces-B",
                  "synthdogs": "SynthDogs"}
ATTACK_NAMES = {"ppa": "PPA", "ifgmi": "IF-GMI", "ppdg": "PPDG"}


def label(mapping: Mapping[Any, str], key: Any) -> str:
    return mapping.get(key, str(key))


# ------------------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class Plan:
    """What one config plans: the config, its models (:func:`atat.plan.config.model_runs`) and
    the regression specifications (``config/regressions.yaml``)."""

    config: Mapping[str, Any]
    runs: Sequence[Any]
    regressions: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the dose-response sweep's generated variants are defined defenses of the plan
        # (atat.plan.config.with_dose_response; idempotent, a no-op without a sweep)
        object.__setattr__(self, "config", with_dose_response(self.config))

    @property
    def attacks(self) -> list[str]:
        return inversion_attacks(self.config)

    @property
    def epsilons(self) -> list[float]:
        return [float(e) for e in self.config["autoattack"]["epsilons"]]

    @property
    def first_seed(self) -> int:
        return int(self.config["seeds"][0])

    @cached_property
    def stats_targets_by_entry(self) -> dict[str, list[str]]:
        """Targets of the statistics entries, by id (fitted-sample checks: computed once)."""
        return _stats(self)


def inversion_attacks(config: Mapping[str, Any]) -> list[str]:
    """The model-inversion attacks the config runs (``inversion.attacks``)."""
    inv = config.get("inversion") or {}
    return [str(a) for a in (inv.get("attacks") or [])]


def run_attacks(config: Mapping[str, Any], run: Any) -> list[str]:
    """The inversion attacks run against one model, in the order of ``inversion.attacks``:
    for a grid model the union of the ``attacks`` of the grid blocks that list it (a block
    without ``attacks``: every configured attack); for a model only the dose-response sweep
    adds (``run.dose_response``): its ``attack``; for a causal replicate (``run.replicate``):
    ``causal.attacks`` where given (what Tables 21/22 read), else every attack."""
    if getattr(run, "dose_response", False):
        return [str(config["dose_response"]["attack"])]
    attacks = inversion_attacks(config)
    if getattr(run, "replicate", None) is not None:
        wanted = (config.get("causal") or {}).get("attacks")
        return [a for a in attacks if a in {str(w) for w in wanted}] if wanted else attacks
    chosen: set[str] = set()
    for cell in config.get("grid") or []:
        if (run.dataset in cell["datasets"] and run.architecture in cell["architectures"]
                and run.defense in cell["defenses"]):
            chosen |= {str(a) for a in cell.get("attacks") or attacks}
    return [a for a in attacks if a in chosen] if chosen else attacks


def grid_runs(plan: "Plan") -> list[Any]:
    """The planned models of the paper's per-cell outputs: no causal replicate, no model
    only the dose-response sweep adds."""
    return [r for r in plan.runs if r.replicate is None
            and not getattr(r, "dose_response", False)]


def table_files(name: str) -> list[str]:
    return [f"results/tables/{name}.{e}" for e in EXTS]


def _defenses_where(config: Mapping[str, Any], pred: Callable[[Mapping[str, Any]], bool]
                    ) -> list[str]:
    return [n for n, d in config["defenses"].items() if pred(d)]


def _training(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return d.get("training", {})


def is_mask_stage(config: Mapping[str, Any], defense: str) -> bool:
    """Stages 1/2 of Unseen-Pixels are mask-learning runs, not target models."""
    d = config["defenses"][defense]
    return d["type"] == "pixel_mask" and d.get("stage", "group_lasso") != "retrain"


# ------------------------------------------------------------------------------ HSIC (§3, App. D)
#: Canonical row order of the HSIC tables.
HSIC_ROW_ORDER = ["nodef", "mid", "bido", "bido_lx1e3", "bido_lx1e4", "tldmi", "tldmi5",
                  "negls", "rolss", "rolss_ssf", "trap_mid", "trap_mid_star", "at", "atat"]
#: Table 1 (paper §3): FaceScrub ResNet-152, every defense of that cell except the models of
#: other experiments (permuted labels, vanilla AT, early-stopped NoDef) and BiDO(.0001, 0),
#: which only Table 9 has (Table 9's caption: the RN-152 BiDO(.001, 0) model is Table 1's BiDO**).
TABLE1_CELL = ("facescrub", "resnet152")
TABLE1_EXCLUDE = {"permuted", "at", "bido_lx1e4", "nodef_es"}
#: Table 9 (App. D.1): FaceScrub ResNet-18 and ResNet-152; BiDO variants vs NoDef, MID, TL-DMI.
TABLE9_DATASET = "facescrub"
TABLE9_ARCHS = ["resnet18", "resnet152"]
TABLE9_DEFENSES = ["nodef", "mid", "tldmi", "bido", "bido_lx1e3", "bido_lx1e4"]
TABLE9_NEEDS = {"bido_lx1e3", "bido_lx1e4"}
#: Table 8 (App. D.1, caption not in paper.md): NoDef vs BiDO (0.05, 0.5) in every
#: (dataset, architecture) cell that has both.
TABLE8_DEFENSES = ["nodef", "bido"]


def hsic_file(run: Any) -> str:
    return f"results/hsic/{run.path}.json"


def hsic_table_runs(plan: Plan, table: str) -> tuple[list[Any], str | None]:
    """(runs, note) of one HSIC table for the plan; runs == [] means not built."""
    config = plan.config
    grid = [r for r in grid_runs(plan) if not is_mask_stage(config, r.defense)]
    order = HSIC_ROW_ORDER + [d for d in config["defenses"] if d not in HSIC_ROW_ORDER]
    note = None
    if table == "table1":
        cells = {(r.dataset, r.architecture) for r in grid}
        cell = paper_cell = (translate(config, "datasets", [TABLE1_CELL[0]])[0],
                             translate(config, "architectures", [TABLE1_CELL[1]])[0])
        if cell not in cells and grid:
            # no FaceScrub ResNet-152 models (e.g. the demo): the analogous table of the
            # config's first grid cell
            cell = (grid[0].dataset, grid[0].architecture)
            note = (f"Analogue of the paper's Table 1 for {cell[0]}/{cell[1]} (this config "
                    f"has no {'/'.join(paper_cell)} models).")
        runs = [r for r in grid if (r.dataset, r.architecture) == cell
                and r.defense not in TABLE1_EXCLUDE]
    elif table == "table8":
        have = {(r.dataset, r.architecture, r.defense) for r in grid}
        runs = [r for r in grid if r.defense in TABLE8_DEFENSES
                and all((r.dataset, r.architecture, d) in have for d in TABLE8_DEFENSES)]
    elif table == "table9":
        dataset = translate(config, "datasets", [TABLE9_DATASET])[0]
        archs = translate(config, "architectures", TABLE9_ARCHS)
        runs = [r for r in grid if r.dataset == dataset
                and r.architecture in archs and r.defense in TABLE9_DEFENSES]
        if not TABLE9_NEEDS & {r.defense for r in runs}:
            runs = []
    else:
        raise ValueError(f"unknown HSIC table '{table}' (known: table1, table8, table9)")
    return sorted(runs, key=lambda r: (r.dataset, r.architecture, order.index(r.defense),
                                       r.seed)), note


def _hsic_table_targets(table: str) -> Callable[[Plan], list[str]]:
    return lambda plan: table_files(table) if hsic_table_runs(plan, table)[0] else []


# ------------------------------------------------------------------------------ inversion (§3)
def inversion_cells(plan: Plan) -> list[tuple[str, str]]:
    """(dataset, architecture) cells whose reconstructions are drawn (Fig. 3/6)."""
    return sorted({(r.dataset, r.architecture) for r in grid_runs(plan)})


def reconstruction_models(plan: Plan, dataset: str, arch: str, attack: str) -> dict[str, str]:
    """best_images.pt of every (non-replicate, first-seed) model of one cell, by defense."""
    return {r.defense: f"results/inversion/{r.path}/{attack}/best_images.pt"
            for r in grid_runs(plan) if r.dataset == dataset
            and r.architecture == arch and r.seed == plan.first_seed
            and attack in run_attacks(plan.config, r)}


def permuted_defenses(config: Mapping[str, Any]) -> list[str]:
    """Table 2's permuted-label models."""
    return _defenses_where(config, lambda d: _training(d).get("permute_labels_seed") is not None)


def plain_nodef_defenses(config: Mapping[str, Any]) -> list[str]:
    """NoDef trained on the true labels to completion (Table 2's 'true labels')."""
    return _defenses_where(config, lambda d: d["type"] == "nodef" and not _training(d).get(
        "permute_labels_seed") and _training(d).get("stop_at_val_acc") is None)


def section3_roles(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Table 3's rows: role label -> defense names."""
    return {
        "Unseen-Pixels": _defenses_where(config, lambda d: d["type"] == "pixel_mask"
                                         and d.get("stage") == "retrain"),
        "NoDef": plain_nodef_defenses(config),
        "NoDef (early-stopped)": _defenses_where(
            config, lambda d: d["type"] == "nodef" and _training(d).get("stop_at_val_acc")
            is not None),
        "TL-DMI": _defenses_where(config, lambda d: d["type"] == "tldmi"),
    }


def precondition_roles(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """The experiments whose preconditions :mod:`atat.analysis.preconditions` checks:
    experiment label -> defense names (AT-AT: every defense of type ``atat`` but the variants
    the dose-response sweep generates: they explore other lambdas on purpose, and the sweep's
    own table reports them)."""
    generated = {p.defense for p in dose_response_points(config) if p.generated}
    return {"AT-AT": [n for n in _defenses_where(config, lambda d: d["type"] == "atat")
                      if n not in generated],
            "permuted labels": permuted_defenses(config),
            "Unseen-Pixels": section3_roles(config)["Unseen-Pixels"]}


def _preconditions_targets(plan: Plan) -> list[str]:
    checked = {d for names in precondition_roles(plan.config).values() for d in names}
    return ([f"results/tables/preconditions.{e}" for e in ("csv", "md")]
            if checked & {r.defense for r in plan.runs} else [])


def unseen_pixel_runs(plan: Plan) -> list[Any]:
    """The Unseen-Pixels models of Fig. 1 (first seed, no replicate)."""
    names = set(section3_roles(plan.config)["Unseen-Pixels"])
    return [r for r in plan.runs if r.defense in names and r.replicate is None
            and r.seed == plan.first_seed]


def per_image_file(run: Any, attack: str) -> str:
    """The per-image records of one attacked model (rule invert): one row per attacked image."""
    return f"results/inversion/{run.path}/{attack}/per_image.csv"


def _inversion_targets(plan: Plan) -> list[str]:
    if not plan.attacks:
        return []
    out = [f"results/inversion/{r.path}/{a}/metrics.json" for r in plan.runs
           for a in run_attacks(plan.config, r)]
    out.append("results/inversion/per_image.csv")
    return out


def _reconstruction_targets(plan: Plan) -> list[str]:
    return [f"results/figures/reconstructions_{d}_{a}_{atk}.png"
            for d, a in inversion_cells(plan) for atk in plan.attacks
            if reconstruction_models(plan, d, a, atk)]


def _table2_targets(plan: Plan) -> list[str]:
    trained = {r.defense for r in plan.runs}
    ok = "ppa" in plan.attacks and trained & set(permuted_defenses(plan.config))
    return table_files("table2") if ok else []


def _table3_targets(plan: Plan) -> list[str]:
    trained = {r.defense for r in plan.runs}
    ok = "ppa" in plan.attacks and trained & set(section3_roles(plan.config)["Unseen-Pixels"])
    return table_files("table3") if ok else []


def _figure1_targets(plan: Plan) -> list[str]:
    if "ppa" not in plan.attacks:
        return []
    return [f"results/figures/figure1_unseen_pixels_{r.dataset}_{r.architecture}.png"
            for r in unseen_pixel_runs(plan)]


# ------------------------------------------------------------------------ Table 4, 11-14, Fig. 5
#: Paper App. F.4: one AutoAttack table per epsilon.
ROBUSTNESS_TABLES = {0.031: 11, 0.0025: 12, 0.0005: 13, 1e-05: 14}


def robustness_table_number(eps: float) -> int | None:
    """Paper table number (11-14) of the AutoAttack table at ``eps``; None if not in the paper."""
    for e, n in ROBUSTNESS_TABLES.items():
        if abs(float(eps) - e) <= 1e-12 * max(1.0, e):
            return n
    return None


def robustness_table_eps(config: Mapping[str, Any]) -> dict[str, float]:
    """Table number (as text) -> epsilon, for every configured epsilon the paper tabulates."""
    return {str(robustness_table_number(e)): e for e in config["autoattack"]["epsilons"]
            if robustness_table_number(e) is not None}


def table4_architecture(plan: Plan) -> str | None:
    """Table 4's architecture, or None when no model of it is planned."""
    arch = main_architecture(plan.config)
    return arch if any(r.architecture == arch for r in plan.runs) else None


def figure5_run(plan: Plan) -> Any | None:
    """Paper Fig. 5: the NoDef model of the main architecture's first cell."""
    arch = table4_architecture(plan)
    for r in plan.runs:
        if r.architecture == arch and r.defense == "nodef" and r.replicate is None:
            return r
    return None


def _robustness_table_targets(number: int) -> Callable[[Plan], list[str]]:
    return lambda plan: (table_files(f"table{number}")
                         if str(number) in robustness_table_eps(plan.config) else [])


#: App. I.2/I.3 main-results tables. The paper prints no captions for 23, 27 and 28; its text
#: (App. I.2-I.3) says 24 is DenseNet-169, 25 ResNet-18, 26 Stanford Dogs (PPA, ResNet-152 and
#: ResNet-18), that "the main results tables, Tables 23 and 25, omitted confidence intervals",
#: and that 27 and 28 are 23 and 25 with the per-image Wilson / per-class t intervals. So 23 is
#: read as the ResNet-152 main table, and 23-26 carry point values only.
_ALL_ATTACKS = ["ppa", "ifgmi", "ppdg"]
_FACES = ["facescrub", "celeba"]
MAIN_TABLES: dict[int, dict[str, Any]] = {
    23: {"architectures": ["resnet152"], "datasets": _FACES, "attacks": _ALL_ATTACKS,
         "intervals": False},
    24: {"architectures": ["densenet169"], "datasets": _FACES, "attacks": _ALL_ATTACKS,
         "intervals": False},
    25: {"architectures": ["resnet18"], "datasets": _FACES, "attacks": _ALL_ATTACKS,
         "intervals": False},
    26: {"architectures": ["resnet152", "resnet18"], "datasets": ["stanford_dogs"],
         "attacks": ["ppa"], "intervals": False},
    27: {"architectures": ["resnet152"], "datasets": _FACES, "attacks": _ALL_ATTACKS,
         "intervals": True, "expands": 23},
    28: {"architectures": ["resnet18"], "datasets": _FACES, "attacks": _ALL_ATTACKS,
         "intervals": True, "expands": 25},
}


def main_table_layout(number: int, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:data:`MAIN_TABLES` ``[number]`` with its paper datasets and architectures in the
    config's names (``paper_roles``, :func:`translate`; no config = the paper's)."""
    layout = dict(MAIN_TABLES[number])
    if config is not None:
        for kind in ("datasets", "architectures"):
            layout[kind] = translate(config, kind, layout[kind])
    return layout


# ------------------------------------------------------------------------------ what is buildable
# Whether the config can produce a statistics table or figure (the predicates of the statistics
# entries): a table is a target of ``all`` only when the config produces every input it needs
# (paper Sections 4-6, App. G-I all need model-inversion leakage in the summary), and a
# regression output (Tables 5, 15-20, cost of privacy, Figure 2) only when at least one of its
# specifications can be fitted on the planned models (:func:`spec_identifiable`).

def summary_columns(config: Mapping[str, Any]) -> set[str]:
    """Inversion columns results/summary.csv will have under ``config``."""
    from atat.analysis.summary import INVERSION_METRICS

    return {f"{a}_{m}" for a in inversion_attacks(config) for m in INVERSION_METRICS}


def planned_sample_frame(config: Mapping[str, Any], runs: Iterable[Any]) -> pd.DataFrame:
    """The identifier columns results/summary.csv will have for the planned ``runs`` (one row
    per model: dataset, architecture, defense, defense_type, seed, treatment), so that a
    spec's sample can be selected by :func:`atat.analysis.stats.regression.select_sample` -- the
    same selection the fit makes -- before any model is trained."""
    import pandas as pd

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
    ``min_df_resid`` (:func:`atat.analysis.stats.regression.check_size`, the check the fit makes),
    with the sample selected exactly as the fit will select it (defense variants, datasets,
    architectures, excluded rows, causal rows)."""
    from atat.analysis.stats.regression import SpecSkipped, check_size, select_sample
    from atat.analysis.summary import INVERSION_METRICS, robust_column

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


# ------------------------------------------------------------------------------ the inversion priors
def prior_unmeasured_reason(config: Mapping[str, Any], generator: str) -> str | None:
    """Why generator ``generator``'s quality is not measured, or None if it is (rule
    prior_quality): only a prior the workflow trains on a synthetic dataset's public pool (faces
    or dogs), with face_embedding.source public_classifier (the classifier of that pool's
    identities or breeds), has an instrument and real public images to judge it
    (atat.inversion.prior_quality)."""
    g = config["generators"][generator] or {}
    if "train" not in g:
        return (f"not measured: downloaded prior (generators.{generator}.url); its training "
                f"images are not part of the workflow and no classifier of them is trained "
                f"(its quality is its authors' published one)")
    dataset = g["train"]["dataset"]
    if config["datasets"][dataset]["source"] != "synthfaces":
        return f"not measured: {dataset} has no public pool (not a synthetic dataset)"
    source = (config.get("face_embedding") or {}).get("source")
    if source != "public_classifier":
        return (f"not measured: face_embedding.source is {source}, not public_classifier "
                f"(no classifier of {dataset}'s public pool)")
    return None


def inversion_priors(config: Mapping[str, Any], inverted: Sequence[Any]) -> dict[str, str | None]:
    """Each generator the attacks use on the models ``inverted`` (objects with a ``dataset``)
    -> None where its quality is measured, else the reason it is not (sorted by name)."""
    names = {config["datasets"][r.dataset].get("generator") for r in inverted} - {None}
    return {name: prior_unmeasured_reason(config, name) for name in sorted(names)}


def evaluation_metrics_files(plan: Plan) -> dict[str, str]:
    """The metrics.json of each attacked dataset's evaluation model (rule
    train_evaluation_model), by dataset: what the preconditions' evaluation-model row reads."""
    attacked = sorted({r.dataset for r in plan.runs if run_attacks(plan.config, r)}
                      if plan.attacks else set())
    return {d: f"results/evaluation/{d}/metrics.json" for d in attacked}


def _claims_nodef_runs(plan: Plan) -> list[Any]:
    """The claims cell's grid NoDef models (every seed): the preconditions' attack regime."""
    cell, nodef = claims_cell(plan.config), set(plain_nodef_defenses(plan.config))
    return [r for r in grid_runs(plan)
            if (r.dataset, r.architecture) == cell and r.defense in nodef]


def prior_quality_path(generator: str) -> str:
    """Where rule prior_quality writes generator ``generator``'s quality record."""
    return f"results/generators/{generator}.quality.json"


# ------------------------------------------------------------------------------ statistics
def _stats(plan: Plan) -> dict[str, list[str]]:
    """Targets of the statistics stage by entry id (decided by the predicates above:
    a table only when its specs can be fitted on the planned models)."""
    from atat.analysis.stats.regression import expand_grids

    config, runs = plan.config, list(plan.runs)
    specs = expand_grids(plan.regressions, statistics=config.get("statistics"))
    cols = summary_columns(config)
    by_name = {s["name"]: s for s in specs}

    def fits(name: str | None) -> bool:
        s = by_name.get(name) if name else None
        return bool(s) and s["response"] in cols and spec_identifiable(s, config, runs)

    out: dict[str, list[str]] = {}
    out["regressions"] = (["results/stats/regressions.csv"] if any(
        s["response"] in cols and spec_identifiable(s, config, runs) for s in specs)
        else [])
    for t in REGRESSION_TABLE_IDS:
        out[f"table{t}"] = (table_files(f"table{t}") if regression_table_buildable(
            t, config, specs, runs) else [])
    cop = (plan.regressions.get("cost_of_privacy") or {}).get("spec")
    out["cost_of_privacy"] = (["results/stats/cost_of_privacy.csv",
                               "results/stats/cost_of_privacy.md"] if fits(cop) else [])
    out["table21_22"] = (table_files("table21") + table_files("table22")
                         if causal_buildable(config, plan.regressions) else [])
    for t in MAIN_TABLE_IDS:
        out[f"table{t}"] = (table_files(f"table{t}")
                            if main_table_buildable(t, config, runs) else [])
    out["figure2"] = (["results/figures/figure2_observed_vs_predicted.png"]
                      if fits(FIGURE2_SPEC) else [])
    # Figure 4: planned when it has a point, a standard-variant model of one of its types on
    # the main architecture that an attack reconstructs from (atat.analysis.figures.accuracy_vs_privacy)
    arch = main_architecture(config)
    out["figure4"] = (["results/figures/figure4_accuracy_vs_privacy.png"] if any(
        r.architecture == arch and r.defense in FIGURE4_TYPES
        and getattr(r, "replicate", None) is None and is_standard_variant(config, r.defense)
        and run_attacks(config, r) for r in runs) else [])
    return out


def _stats_targets(entry_id: str) -> Callable[[Plan], list[str]]:
    return lambda plan: plan.stats_targets_by_entry[entry_id]


REGRESSION_TABLE_IDS = ["5", "15", "16", "17", "18", "19", "20"]
#: App. I.2/I.3 main-results tables (layouts: atat.analysis.tables.MAIN_TABLES).
MAIN_TABLE_IDS = ["23", "24", "25", "26", "27", "28"]
#: The specification whose fit Figure 2 draws (paper Fig. 2: PPA, generic, joint OLS).
FIGURE2_SPEC = "T15_ppa_generic_joint_ols"
#: Paper Table 5 = the joint OLS and Beta fits of Table 15 (atat.analysis.tables.regression_table).
TABLE5_SPECS = ("T15_ppa_generic_joint_ols", "T15_ppa_generic_joint_beta")


#: Captions of the regression tables (paper Tables 5, 15-20; the builder adds the SE note).
_REGRESSION_CAPTIONS = {
    "5": "Table 5: OLS & Beta leakage (PPA AttAcc@1) regressions +-95% CI. OLS CIs use "
         "small-sample t(n-k) with HC2 SEs; Beta uses Wald (+-1.96 SE) on the logit scale.",
    "15": "Table 15: Linear (OLS) & Beta regressions quantifying the privacy-robustness "
          "tradeoff for generic information dependency-based privacy defenses. Leakage "
          "(response) is PPA AttAcc@1.",
    "16": "Table 16: Linear (OLS) & Beta regressions for attack gradient suppressor defenses "
          "(NegLS, RoLSS, RoLSS-SSF). Leakage (response) is PPA AttAcc@1.",
    "17": "Table 17: Robustness checks: leakage regressions with Clean Accuracy x Dataset "
          "(left) or Clean Accuracy x Architecture (right) interaction for generic "
          "defenses. Leakage (response) is PPA AttAcc@1.",
    "18": "Table 18: Linear (OLS) & Beta regressions for generic defenses. Leakage "
          "(response) is IF-GMI AttAcc@1.",
    "19": "Table 19: Linear (OLS) & Beta regressions for attack gradient suppressing "
          "defenses (NegLS, RoLSS, RoLSS-SSF). Leakage (response) is IF-GMI AttAcc@1.",
    "20": "Table 20: Robustness checks with Clean Accuracy x Dataset (left) or Clean "
          "Accuracy x Architecture (right) interaction for generic defenses. Leakage "
          "(response) is IF-GMI AttAcc@1.",
}


# ------------------------------------------------------------------------------ dose-response
#: Files of the dose-response output (atat.analysis.dose_response; rule dose_response).
DOSE_RESPONSE_FILES = ["results/tables/dose_response.csv", "results/tables/dose_response.md",
                       "results/figures/dose_response.png"]


def _dose_response_targets(plan: Plan) -> list[str]:
    """Built exactly when the config declares a sweep (``dose_response``; its checks in
    atat.plan.config.dose_response_points require the inversion attack it reads)."""
    return list(DOSE_RESPONSE_FILES) if dose_response_points(plan.config) else []


# ------------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Output:
    """One paper output (see the module docstring)."""

    id: str
    rule: str
    stage: str
    targets: Callable[[Plan], list[str]]
    builder: str
    caption: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    family: str = ""

    def defense_labels(self, types: Mapping[str, str] | None = None) -> DefenseLabels:
        """The row labels of this output; ``types`` (variant -> type) labels the variants
        the paper does not have (:meth:`DefenseLabels.with_types`)."""
        return DefenseLabels({**DEFENSE_LABELS, **self.labels}).with_types(types or {})


def _const(*files: str) -> Callable[[Plan], list[str]]:
    return lambda plan: list(files)


# ------------------------------------------------------------------------------ the claims
def claims_cell(config: Mapping[str, Any]) -> tuple[str, str]:
    """The cell of the per-cell claims: the paper's main one (FaceScrub, ResNet-152) in the
    config's names (``paper_roles``)."""
    return (translate(config, "datasets", ["facescrub"])[0],
            translate(config, "architectures", ["resnet152"])[0])


def claims_inputs(plan: Plan) -> dict[str, Any]:
    """What :func:`atat.analysis.claims.claims_table` reads under this plan: the summary and the
    per-image table, and -- where the plan builds them -- the regressions, the cost of
    privacy, the preconditions, the dose-response table (None where not built), the HSIC
    files of the claims cell's first-seed models (defense -> file) and the per-image files of
    the dose-response sweep's endpoints (``dose_per_image``, :func:`dose_endpoint_per_image`;
    [] without a sweep)."""
    def first(entry_id: str, suffix: str) -> str | None:
        return next((t for t in output(entry_id).targets(plan) if t.endswith(suffix)), None)

    dataset, arch = claims_cell(plan.config)
    built = set(output("hsic").targets(plan))
    hsic = {r.defense: hsic_file(r) for r in grid_runs(plan)
            if (r.dataset, r.architecture, r.seed) == (dataset, arch, plan.first_seed)
            and hsic_file(r) in built}
    return {"summary": "results/summary.csv", "per_image": "results/inversion/per_image.csv",
            "regressions": first("regressions", "regressions.csv"),
            "cost": first("cost_of_privacy", ".csv"), "preconditions": first("preconditions",
                                                                              ".csv"),
            "dose": first("dose_response", ".csv"), "hsic": hsic,
            "dose_per_image": dose_endpoint_per_image(plan)}


def dose_endpoint_per_image(plan: Plan) -> list[str]:
    """The per-image files (:func:`per_image_file`) of the dose-response sweep's two endpoints,
    its smallest and largest lambda (the first and last of
    :func:`atat.plan.config.dose_response_points`): every model of theirs the dose-response
    table pools (its own summary's records, :data:`SUMMARY_SELECTIONS`), attacked by the
    sweep's attack. The claims table pairs them class by class; [] without a sweep."""
    points = dose_response_points(plan.config)
    if not points or not plan.attacks:
        return []
    ends = {points[0].defense, points[-1].defense}
    return [per_image_file(rec.run, a) for rec in SUMMARY_SELECTIONS["dose_response"](plan)
            if rec.run.defense in ends for a in rec.attacks]


def _claims_targets(plan: Plan) -> list[str]:
    """The claims table and the seed-variation table (empty, saying so, without a causal
    experiment), when the plan attacks its models."""
    if "results/inversion/per_image.csv" not in _inversion_targets(plan):
        return []
    return [f"results/tables/{name}.{ext}" for name in ("claims", "seed_variation")
            for ext in ("csv", "md")]


REGISTRY: list[Output] = [
    # --- stage hsic (workflow/rules/hsic.smk)
    # the HSIC tables read the grid's models only (no replicate, no dose-response variant)
    Output("hsic", "measure_hsic", "hsic", lambda p: [hsic_file(r) for r in grid_runs(p)],
           "atat.measures.hsic_measure:measure_hsic"),
    Output("table1", "table1", "hsic", _hsic_table_targets("table1"),
           "atat.analysis.tables:hsic_table", "Table 1: HSIC(X,Zj) for defenses on {cells}.",
           labels={"bido_lx1e3": "BiDO**"}, family="hsic_table"),
    Output("table8", "table8", "hsic", _hsic_table_targets("table8"),
           "atat.analysis.tables:hsic_table",
           "Table 8: HSIC(X,Zj) and HSIC(Y,Zj) of NoDef vs. BiDO with "
           "(lambda x, lambda y) = (0.05, 0.5) on {cells}.", family="hsic_table"),
    Output("table9", "table9", "hsic", _hsic_table_targets("table9"),
           "atat.analysis.tables:hsic_table",
           "Table 9: HSIC(X,Zj) for different BiDO hyperparameter variations, "
           "with comparisons to NoDef, MID, and TL-DMI ({cells}).", family="hsic_table"),
    # --- stage inversion (workflow/rules/inversion.smk)
    Output("inversion", "invert", "inversion", _inversion_targets,
           "atat.inversion.run:run_inversion"),
    Output("reconstructions", "figure_reconstructions", "inversion", _reconstruction_targets,
           "atat.analysis.figures:reconstruction_grid"),
    Output("table2", "table2", "inversion", _table2_targets, "atat.analysis.tables:table2",
           "Table 2: {attack} results with and without label permutation (train acc. on the "
           "labels the model was fitted to; delta = squared L2 to the nearest training image "
           "of the class; AttAcc@1 is not well-defined for permuted labels)."),
    Output("table3", "table3", "inversion", _table3_targets, "atat.analysis.tables:table3",
           "Table 3: Unseen-Pixels (trained on masked images; fraction of pixels kept shown) "
           "vs. models trained on uncensored data under {attack}."),
    Output("figure1", "figure1", "inversion", _figure1_targets,
           "atat.analysis.figures:unseen_pixels_figure"),
    # --- stage tables (workflow/rules/tables.smk, summary.smk)
    Output("summary", "summary", "summary", _const("results/summary.csv"),
           "atat.analysis.summary:build_summary"),
    Output("figure_robustness", "figure_robustness", "tables",
           _const("results/figures/robust_accuracy_vs_eps.png"),
           "atat.analysis.figures:robust_accuracy_vs_epsilon"),
    Output("table4", "table4", "tables",
           lambda p: table_files("table4") if table4_architecture(p) else [],
           "atat.analysis.tables:table4"),
    *[Output(f"table{n}", f"table{n}", "tables", _robustness_table_targets(n),
             "atat.analysis.tables:robustness_table", family="robustness_table")
      for n in sorted(ROBUSTNESS_TABLES.values())],
    Output("preconditions", "preconditions", "tables", _preconditions_targets,
           "atat.analysis.preconditions:preconditions_table",
           "Preconditions of the experiments: AT-AT's training PGD success and "
           "robust-accuracy gap to NoDef, the permuted-label models' training accuracy, "
           "Unseen-Pixels' kept pixels and test accuracy vs. NoDef, the early-stopped NoDef's "
           "val. accuracy vs. Unseen-Pixels', each cell's NoDef training accuracy where the "
           "config sets a recipe criterion, the inversion prior's recognition, precision "
           "and coverage between a structure-free floor and real faces; and the measurement's "
           "own regime: each cell's NoDef robust accuracy below its clean accuracy by at least "
           "the configured standard errors of the drop (and above 0) at each AutoAttack "
           "epsilon, the evaluation model's accuracy on held-out private images, every "
           "model's two clean passes over the test split agreeing (MID samples at evaluation "
           "by design), and PPA's AttAcc@1 on the claims cell's NoDef. passed = False: the "
           "experiment is not in the paper's regime; empty: reported only."),
    Output("figure5", "figure5", "tables",
           lambda p: ["results/figures/figure5_adversarial_examples.png"] if figure5_run(p)
           else [], "atat.analysis.figures:adversarial_examples_figure"),
    # --- stage stats (workflow/rules/stats.smk)
    Output("regressions", "regressions", "stats", _stats_targets("regressions"),
           "atat.analysis.stats.regression:fit_all"),
    *[Output(f"table{t}", f"table{t}", "stats", _stats_targets(f"table{t}"),
             "atat.analysis.tables:regression_table", _REGRESSION_CAPTIONS[t],
             family="regression_table")
      for t in REGRESSION_TABLE_IDS],
    Output("cost_of_privacy", "cost_of_privacy", "stats", _stats_targets("cost_of_privacy"),
           "atat.analysis.tables:cost_of_privacy_table"),
    Output("table21_22", "causal_tables", "stats", _stats_targets("table21_22"),
           "atat.analysis.tables:causal_tables"),
    *[Output(f"table{t}", f"table{t}", "stats", _stats_targets(f"table{t}"),
             "atat.analysis.tables:main_results_table", family="main_results_table")
      for t in MAIN_TABLE_IDS],
    Output("figure2", "figure2", "stats", _stats_targets("figure2"),
           "atat.analysis.figures:observed_vs_predicted"),
    Output("figure4", "figure4", "stats", _stats_targets("figure4"),
           "atat.analysis.figures:accuracy_vs_privacy"),
    # --- stage claims (workflow/rules/claims.smk; issue 17): the paper's claims vs the run
    Output("claims", "claims", "claims", _claims_targets, "atat.analysis.claims:claims_table",
           "The paper's claims against this run, each tested as the pre-registered analysis "
           "plan config/analysis/claims.yaml says: the run's interval, a verdict (supported / smaller "
           "than the paper's / contradicted / too weak to say / premise not met / not "
           "testable) and the minimum detectable effect."),
    # --- stage dose_response (workflow/rules/dose_response.smk; beyond the paper, issue 17)
    Output("dose_response", "dose_response", "dose_response", _dose_response_targets,
           "atat.analysis.dose_response:dose_response",
           "AT-AT's dose-response (beyond the paper): robust accuracy at each epsilon and "
           "{attack} AttAcc@1 against lambda = weight_adv on {cell}, 95% Wilson intervals."),
]

_BY_ID = {o.id: o for o in REGISTRY}
if len(_BY_ID) != len(REGISTRY):  # pragma: no cover - a registry edit error
    raise RuntimeError("atat.analysis.paper.REGISTRY: two entries share an id")


def output(entry_id: str) -> Output:
    try:
        return _BY_ID[entry_id]
    except KeyError:
        raise KeyError(f"no paper output '{entry_id}' (known: {sorted(_BY_ID)})") from None


#: The table families (:attr:`Output.family`) and the rules file that generates their rules.
TABLE_FAMILIES = {"hsic_table": "hsic", "robustness_table": "tables",
                  "regression_table": "stats", "main_results_table": "stats"}


def table_number(entry_id: str) -> str:
    """The paper's number of a table entry (``table15`` -> ``15``)."""
    if not entry_id.startswith("table") or not entry_id[5:].isdigit():
        raise ValueError(f"'{entry_id}' is not a numbered table id (table<N>)")
    return entry_id[5:]


def table_rules(plan: Plan, family: str) -> list[str]:
    """Ids of the tables of ``family`` that get a rule (named after the id) under this plan,
    in registry order: every regression and main-results table (one the config cannot fit
    can still be requested by name, and its job says why it is skipped), the AutoAttack
    tables of the configured epsilons, the HSIC tables whose selection holds models. A table
    without a rule is "no rule to produce" when asked for by name, never a failing job."""
    if family not in TABLE_FAMILIES:
        raise ValueError(f"unknown table family '{family}' (known: {sorted(TABLE_FAMILIES)})")
    ids = [o.id for o in REGISTRY if o.family == family]
    if family == "robustness_table":
        eps = robustness_table_eps(plan.config)
        return [t for t in ids if table_number(t) in eps]
    if family == "hsic_table":
        return [t for t in ids if hsic_table_runs(plan, t)[0]]
    return ids


def final_targets(plan: Plan, stage: str | None = None) -> list[str]:
    """Every file of every entry (of one ``stage``) this plan builds, in registry order."""
    targets: list[str] = []
    seen: set[str] = set()
    for o in REGISTRY:
        if stage is not None and o.stage != stage:
            continue
        for t in o.targets(plan):
            if t not in seen:
                seen.add(t)
                targets.append(t)
    return targets


def stats_targets(config: Mapping[str, Any], regressions: Mapping[str, Any],
                  runs: Iterable[Any]) -> list[str]:
    """Targets of workflow/rules/stats.smk that ``config`` can produce."""
    return final_targets(Plan(config, list(runs), regressions), stage="stats")


# ------------------------------------------------------------------------------ validation
def check(config: Mapping[str, Any], regressions: Mapping[str, Any],
          regressions_path: str = "config/regressions.yaml") -> None:
    """Resolve every name the entries refer to; raise :class:`ConfigError` naming it
    otherwise (a misspelt name would silently drop a row or a target). The config's own
    name-valued keys (``tables.table4_architecture``, ``datasets.*.generator``...) are
    checked by :func:`atat.plan.config.validate_config`; this adds the registry's names:

    * each defense name of a selection (HSIC row order, Tables 1/8/9) has a label here
      (:data:`DEFENSE_LABELS`: the paper's catalogue), and each configured defense that
      a selection names is of the kind the selection expects;
    * the regression specifications of Table 5, Figure 2 and the cost of privacy
      (:data:`TABLE5_SPECS`, :data:`FIGURE2_SPEC`, ``cost_of_privacy.spec``) exist in
      ``config/regressions.yaml`` whenever the config runs model inversion.

    Cheap (no torch, no statsmodels): runs on every DAG build."""
    named = {"atat.analysis.paper.HSIC_ROW_ORDER": HSIC_ROW_ORDER,
             "atat.analysis.paper.TABLE1_EXCLUDE": sorted(TABLE1_EXCLUDE),
             "atat.analysis.paper.TABLE8_DEFENSES": TABLE8_DEFENSES,
             "atat.analysis.paper.TABLE9_DEFENSES": TABLE9_DEFENSES,
             "atat.analysis.paper.TABLE9_NEEDS": sorted(TABLE9_NEEDS)}
    for o in REGISTRY:
        named[f"atat.analysis.paper.REGISTRY[{o.id}].labels"] = list(o.labels)
    for where, names in named.items():
        unknown = [n for n in names if n not in DEFENSE_LABELS]
        if unknown:
            raise ConfigError(f"{where}: defense name(s) {unknown} have no label in "
                              f"atat.analysis.paper.DEFENSE_LABELS (add one there)")
    defenses = config.get("defenses") or {}
    for name in TABLE8_DEFENSES + TABLE9_DEFENSES:
        d = defenses.get(name)
        if d is not None and d.get("type") != _NAMED_TYPES[name]:
            raise ConfigError(f"invalid configuration: defenses.{name}: the HSIC tables "
                              f"(paper Tables 8/9) read '{name}' as a {_NAMED_TYPES[name]} "
                              f"model, but its type is '{d.get('type')}'")
    if not inversion_attacks(config):
        return  # the statistics entries need inversion leakage: they are not built
    _check_causal_attacks(config, regressions, regressions_path)
    from atat.analysis.stats.regression import expand_grids

    names = {s["name"] for s in expand_grids(regressions, regressions_path,
                                             statistics=config.get("statistics"))}
    wanted = {"Figure 2 (atat.analysis.paper.FIGURE2_SPEC)": [FIGURE2_SPEC],
              "Table 5 (atat.analysis.paper.TABLE5_SPECS)": list(TABLE5_SPECS)}
    cop = (regressions.get("cost_of_privacy") or {}).get("spec")
    if cop is not None:
        wanted["cost_of_privacy.spec"] = [cop]
    for what, specs in wanted.items():
        missing = [s for s in specs if s not in names]
        if missing:
            raise ConfigError(f"{regressions_path}: {what} names specification(s) {missing} "
                              f"that the file does not define")


def _check_causal_attacks(config: Mapping[str, Any], regressions: Mapping[str, Any],
                          regressions_path: str) -> None:
    """Tables 21/22 read responses ``<attack>_<metric>`` of the replicates: each attack must be
    one the replicates are attacked with (``causal.attacks``), or the table would be fitted on
    missing values."""
    from atat.analysis.summary import INVERSION_METRICS

    causal = config.get("causal") or {}
    wanted = causal.get("attacks")
    if not causal or not wanted:
        return
    c = regressions.get("causal") or {}
    for key in ("beta_responses", "ols_responses"):
        for response in c.get(key) or []:
            attack = next((str(response)[: -len(m) - 1] for m in INVERSION_METRICS
                           if str(response).endswith(f"_{m}")), None)
            if attack is not None and attack not in wanted:
                raise ConfigError(f"{regressions_path}: causal.{key}: '{response}' reads attack "
                                  f"'{attack}', which the causal replicates are not attacked "
                                  f"with (config causal.attacks: {list(wanted)}); add it there")


#: The defense type each name of the Tables 8/9 selections stands for.
_NAMED_TYPES = {"nodef": "nodef", "mid": "mid", "tldmi": "tldmi", "bido": "bido",
                "bido_lx1e3": "bido", "bido_lx1e4": "bido"}


# ------------------------------------------------------------------------------ what each reads
# Targeted rebuilds (issue 43 item 5): an output depends only on the jobs whose records it
# reads. An entry of SUMMARY_SELECTIONS reads a summary of its own, results/summaries/<id>.csv
# (rule output_summary: atat.analysis.summary.build_summary over the selected records only) instead of
# the whole grid's results/summary.csv; the selection mirrors the rows and columns the
# entry's builder reads, so the output is the same as from the full summary
# (tests/test_paper.py builds each from both). output_reads lists every file an entry's rule
# reads that another rule makes; tests/test_targeted_rebuilds.py checks that the dry run of
# each entry's files plans exactly those files' jobs, their ancestors and the entry's own jobs.


@dataclass(frozen=True)
class RunRecords:
    """The records of one model that a per-output summary reads: its ``metrics.json``
    always, its AutoAttack record at each of ``epsilons``, its inversion record of each of
    ``attacks``."""

    run: Any
    epsilons: tuple[float, ...] = ()
    attacks: tuple[str, ...] = ()


def output_summary_file(entry_id: str) -> str:
    """The summary of one output's records (rule output_summary)."""
    return f"results/summaries/{entry_id}.csv"


def summary_attacks(plan: Plan) -> list[str]:
    """The attacks with columns in the full summary (any model attacked with them), in the
    order of ``inversion.attacks``: every per-output summary has their columns too, so a
    builder that tests for a column sees the same columns in both."""
    used = {a for r in plan.runs for a in run_attacks(plan.config, r)}
    return [a for a in plan.attacks if a in used]


def _records(plan: Plan, runs: Iterable[Any], *, epsilons: Sequence[float] = (),
             attacks: str | Sequence[str] = (),
             attacked: Sequence[Any] | None = None) -> list[RunRecords]:
    """``runs`` (plan order kept) with AutoAttack at ``epsilons`` and the inversion records of
    ``attacks`` (``"all"``: every attack run against the model) where the model has them
    (and, given ``attacked``, is one of those models)."""
    out = []
    for r in runs:
        ran = (run_attacks(plan.config, r) if plan.attacks
               and (attacked is None or r in attacked) else [])
        wanted = ran if attacks == "all" else [a for a in ran if a in attacks]
        out.append(RunRecords(r, tuple(float(e) for e in epsilons), tuple(wanted)))
    return out


def _section3_cells_runs(plan: Plan, key_defenses: Sequence[str],
                         row_defenses: Iterable[str]) -> list[Any]:
    """Tables 2/3 (atat.analysis.tables.table2/table3): every model of a (dataset, architecture) cell
    holding one of ``key_defenses`` whose defense is one of the table's roles."""
    cells = {(r.dataset, r.architecture) for r in plan.runs if r.defense in key_defenses}
    rows = set(row_defenses)
    return [r for r in plan.runs if (r.dataset, r.architecture) in cells and r.defense in rows]


def _dose_response_runs(plan: Plan) -> list[Any]:
    sweep = plan.config.get("dose_response") or {}
    names = {p.defense for p in dose_response_points(plan.config)}
    return [r for r in plan.runs if r.treatment is None and r.dataset == sweep.get("dataset")
            and r.architecture == sweep.get("architecture") and r.defense in names]


def _robustness_selection(number: int) -> Callable[[Plan], list[RunRecords]]:
    def select(plan: Plan) -> list[RunRecords]:  # atat.analysis.tables.robustness_table: no causal row
        eps = robustness_table_eps(plan.config).get(str(number))
        return _records(plan, [r for r in plan.runs if r.treatment is None],
                        epsilons=[] if eps is None else [eps])
    return select


def _hsic_selection(table: str) -> Callable[[Plan], list[RunRecords]]:
    # atat.analysis.tables.hsic_table merges test accuracy and PPA AttAcc@1 of its rows' models
    return lambda plan: _records(plan, hsic_table_runs(plan, table)[0], attacks=["ppa"])


def _main_table_selection(table: str) -> Callable[[Plan], list[RunRecords]]:
    def select(plan: Plan) -> list[RunRecords]:
        # atat.analysis.tables.main_results: the clean test accuracy (mean over the non-causal models)
        # of each (dataset, architecture, defense) with rows in the table's per-image rows
        files = set(per_image_selection(plan, table) or [])
        keys = {(r.dataset, r.architecture, r.defense) for r in grid_runs(plan)
                if any(per_image_file(r, a) in files
                       for a in run_attacks(plan.config, r))}
        return _records(plan, [r for r in plan.runs if r.treatment is None
                               and (r.dataset, r.architecture, r.defense) in keys])
    return select


#: Entry id -> the records of its own summary (the rows and columns its builder reads).
SUMMARY_SELECTIONS: dict[str, Callable[[Plan], list[RunRecords]]] = {
    **{t: _hsic_selection(t) for t in ("table1", "table8", "table9")},
    # Tables 2/3: the cells of the permuted-label / Unseen-Pixels models, their table's rows
    "table2": lambda p: _records(p, _section3_cells_runs(
        p, permuted_defenses(p.config),
        [*permuted_defenses(p.config), *plain_nodef_defenses(p.config)]), attacks=["ppa"]),
    "table3": lambda p: _records(p, _section3_cells_runs(
        p, section3_roles(p.config)["Unseen-Pixels"],
        [d for names in section3_roles(p.config).values() for d in names]), attacks=["ppa"]),
    # Table 4: the main architecture's models (every row), AutoAttack at each epsilon, PPA
    "table4": lambda p: _records(p, [r for r in p.runs
                                     if r.architecture == main_architecture(p.config)],
                                 epsilons=p.epsilons, attacks=["ppa"]),
    **{f"table{n}": _robustness_selection(n) for n in sorted(ROBUSTNESS_TABLES.values())},
    # Figure "robust accuracy vs eps": every row, every epsilon, no inversion
    "figure_robustness": lambda p: _records(p, p.runs, epsilons=p.epsilons),
    # the preconditions: every model's row (AT-AT's gap and each NoDef's AutoAttack regime read
    # AutoAttack); PPA of the claims cell's grid NoDef (the attack regime)
    "preconditions": lambda p: _records(p, p.runs, epsilons=p.epsilons, attacks=["ppa"],
                                        attacked=_claims_nodef_runs(p)),
    # Tables 21/22: the causal replicates, every record
    "table21_22": lambda p: _records(p, [r for r in p.runs if r.treatment is not None],
                                     epsilons=p.epsilons, attacks="all"),
    **{f"table{t}": _main_table_selection(f"table{t}") for t in MAIN_TABLE_IDS},
    # Figure 4: its points' models (the main architecture's non-causal standard variants of
    # FIGURE4_TYPES, atat.analysis.figures) and their attacks (accuracy vs leakage)
    "figure4": lambda p: _records(p, [r for r in p.runs if r.treatment is None
                                      and r.architecture == main_architecture(p.config)
                                      and r.defense in FIGURE4_TYPES
                                      and is_standard_variant(p.config, r.defense)],
                                  attacks="all"),
    # the dose-response: the sweep's cell and variants, every epsilon, the sweep's attack
    "dose_response": lambda p: _records(
        p, _dose_response_runs(p), epsilons=p.epsilons,
        attacks=[str((p.config.get("dose_response") or {}).get("attack"))]),
}


def summary_selection(plan: Plan, entry_id: str) -> list[RunRecords] | None:
    """The records of ``entry_id``'s own summary under ``plan``, or None where the entry reads
    no summary or the whole grid's results/summary.csv (the regressions and what is built from
    them, Figure 2, the claims: they fit or test every model)."""
    output(entry_id)  # a KeyError naming the known ids for an unknown one
    select = SUMMARY_SELECTIONS.get(entry_id)
    return None if select is None else select(plan)


def record_files(plan: Plan, records: Iterable[RunRecords]) -> list[str]:
    """The record files of ``records`` (what rule output_summary reads), in order; paths from
    :func:`atat.analysis.summary.record_models`."""
    from atat.analysis.summary import record_models

    files: list[str] = []
    for m in record_models(records, plan.config):
        files += [m["metrics"], *m["robustness"].values(), *m["inversion"].values()]
    return files


#: The outputs that read rows of the grid's per-image table: each reads its own
#: (:func:`per_image_selection`, rule output_per_image).
PER_IMAGE_ENTRIES = [*(f"table{t}" for t in MAIN_TABLE_IDS), "figure4"]


def output_per_image_file(entry_id: str) -> str:
    """The per-image table of one output's attacked models (rule output_per_image)."""
    return f"results/summaries/{entry_id}.per_image.csv"


def per_image_selection(plan: Plan, entry_id: str) -> list[str] | None:
    """The per-image files (one per model and attack, rule invert) of the rows ``entry_id``
    reads from the grid's per-image table, in that table's order (rule inversion_per_image:
    grid models, their attacks), or None where the entry reads no per-image table of its own.
    Tables 23-28 (atat.analysis.tables.main_results_table) read the rows of their layout's datasets,
    architectures and attacks, Figure 4 those of its points' models (the main architecture's
    standard variants of :data:`FIGURE4_TYPES`; its EvalConf and distance intervals)."""
    if entry_id not in PER_IMAGE_ENTRIES or not plan.attacks:
        output(entry_id)  # a KeyError naming the known ids for an unknown one
        return None
    if entry_id == "figure4":  # atat.analysis.figures.privacy_points: its points' models' rows
        arch = main_architecture(plan.config)
        return [per_image_file(r, a) for r in grid_runs(plan)
                for a in run_attacks(plan.config, r) if r.architecture == arch
                and r.defense in FIGURE4_TYPES and is_standard_variant(plan.config, r.defense)]
    layout = main_table_layout(int(table_number(entry_id)), plan.config)
    return [per_image_file(r, a) for r in grid_runs(plan)
            for a in run_attacks(plan.config, r)
            if r.dataset in layout["datasets"] and r.architecture in layout["architectures"]
            and a in layout["attacks"]]


#: Entries whose rule makes the records the others read (their reads are their own files).
_PRODUCERS = {"hsic", "inversion", "summary"}


def output_reads(plan: Plan, entry_id: str) -> list[str]:
    """Every file made by another rule that ``entry_id``'s rule reads under ``plan``: the
    records of its own summary (:func:`summary_selection`), else results/summary.csv where
    its builder reads the whole grid, and its other inputs (HSIC records, the per-image
    table, the regressions, models and reconstructions). A producer of records (``hsic``,
    ``inversion``, ``summary``) reads what its own jobs read: its own files here."""
    entry = output(entry_id)
    if entry_id in _PRODUCERS:
        return list(entry.targets(plan))
    selection = summary_selection(plan, entry_id)
    reads = record_files(plan, selection) if selection is not None else []
    if entry_id in {"regressions", "figure2"}:
        reads.append("results/summary.csv")
    elif entry.family == "regression_table" or entry_id == "cost_of_privacy":
        reads.append("results/stats/regressions.csv")
    elif entry.family == "hsic_table":
        reads += [hsic_file(r) for r in hsic_table_runs(plan, entry_id)[0]]
    elif entry_id in PER_IMAGE_ENTRIES:
        reads += per_image_selection(plan, entry_id) or []
    elif entry_id == "preconditions":
        inverted = list(plan.runs) if plan.attacks else []
        reads += [f"results/models/{r.path}/metrics.json" for r in plan.runs]
        reads += list(evaluation_metrics_files(plan).values())
        reads += [prior_quality_path(g) for g, why in
                  inversion_priors(plan.config, inverted).items() if why is None]
    elif entry_id == "figure5":
        run = figure5_run(plan)
        reads += [f"results/models/{run.path}/model.pt"] if run is not None else []
    elif entry_id == "figure1":
        for r in unseen_pixel_runs(plan):
            reads += [f"results/models/{r.path}/model.pt",
                      f"results/inversion/{r.path}/ppa/best_images.pt"]
    elif entry_id == "reconstructions":
        for d, a in inversion_cells(plan):
            for atk in plan.attacks:
                reads += list(reconstruction_models(plan, d, a, atk).values())
    elif entry_id == "claims":
        found = claims_inputs(plan)
        reads += [v for k, v in found.items()
                  if k not in ("hsic", "dose_per_image") and v is not None]
        reads += list(found["hsic"].values()) + found["dose_per_image"]
    return list(dict.fromkeys(reads))
