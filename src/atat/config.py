"""Configuration: loading (with overlays), validation against the JSON schema plus the
semantic checks a schema cannot express, and expansion of the grid into model runs.

Everything here runs before any job: `workflow/rules/common.smk` calls
:func:`validate_config` and stops the workflow with one message naming the bad key.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping

import jsonschema
import yaml

from atat.defenses import DefenseConfigError, defense_class

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message names the offending key."""


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Merge like Snakemake's --configfile: mappings recursively, everything else replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config(*paths: str | Path) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for path in paths:
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: top level must be a mapping")
        config = deep_merge(config, data)
    return config


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        where = f"{key}." if key != "<top level>" else ""
        return f"unknown key '{where}{extra[0]}'" + (f" (and {extra[1:]})" if extra[1:] else "")
    if error.validator == "required":
        return f"{key}: {error.message}"
    if error.validator == "propertyNames":
        return f"{key}: invalid name {error.instance!r} ({error.message})"
    return f"{key}: {error.message}"


def schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def validate_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the first problem, or return silently."""
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        raise ConfigError(f"invalid configuration: {_describe(errors[0])}")
    _check_semantics(config)


def _check_semantics(config: Mapping[str, Any]) -> None:
    datasets = config["datasets"]
    for name, ds in datasets.items():
        if ds["source"] == "synthfaces":
            if "synthetic" not in ds:
                raise ConfigError(f"datasets.{name}.synthetic: required for source synthfaces")
            n = ds["synthetic"]["n_private_identities"]
            if ds.get("n_classes", n) != n:
                raise ConfigError(f"datasets.{name}.n_classes: {ds['n_classes']} differs from "
                                  f"synthetic.n_private_identities = {n}")
        elif "synthetic" in ds:
            raise ConfigError(f"datasets.{name}.synthetic: only allowed for source synthfaces")
        if "n_classes" not in ds and ds["source"] != "synthfaces":
            raise ConfigError(f"datasets.{name}.n_classes: required for source {ds['source']}")
    for name, variant in config["defenses"].items():
        try:
            defense_class(variant["type"], f"defenses.{name}").resolve_params(
                variant, f"defenses.{name}")
        except DefenseConfigError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from None
    for name, variant in config["defenses"].items():
        prior = variant.get("prior")
        if prior is not None and config["defenses"].get(prior, {}).get("type") != variant["type"]:
            raise ConfigError(f"invalid configuration: defenses.{name}.prior: '{prior}' must name "
                              f"a defined '{variant['type']}' variant (the previous stage)")
    for i, cell in enumerate(config["grid"]):
        for key, pool, pool_name in (("datasets", datasets, "datasets"),
                                     ("architectures", config["architectures"], "architectures"),
                                     ("defenses", config["defenses"], "defenses")):
            for item in cell[key]:
                if item not in pool:
                    raise ConfigError(
                        f"invalid configuration: grid[{i}].{key}: '{item}' is not defined under "
                        f"'{pool_name}' (defined: {sorted(pool)})")
    for i, rule in enumerate(config.get("overrides", [])):
        for key, pool in (("dataset", datasets), ("architecture", config["architectures"]),
                          ("defense", config["defenses"])):
            value = rule["when"].get(key)
            if value is not None and value not in pool:
                raise ConfigError(f"invalid configuration: overrides[{i}].when.{key}: '{value}' "
                                  f"is not defined")
    causal = config.get("causal")
    if causal:
        for key, pool in (("dataset", datasets), ("architecture", config["architectures"]),
                          ("treatment", config["defenses"]), ("control", config["defenses"])):
            if causal[key] not in pool:
                raise ConfigError(f"invalid configuration: causal.{key}: '{causal[key]}' is not "
                                  "defined")
        if causal["n_treated"] > causal["n_models"]:
            raise ConfigError("invalid configuration: causal.n_treated: larger than n_models")
        grid_seeds = set(int(s) for s in config["seeds"])
        own = set(range(causal["first_seed"], causal["first_seed"] + causal["n_models"]))
        if grid_seeds & own:
            raise ConfigError("invalid configuration: causal.first_seed: replicate seeds "
                              f"{sorted(own)} overlap the grid's seeds {sorted(grid_seeds)}")
    training = config["training"]
    if any(m >= training["epochs"] for m in training["lr_milestones"]):
        raise ConfigError("invalid configuration: training.lr_milestones: every milestone must "
                          f"be < training.epochs = {training['epochs']}")


# ------------------------------------------------------------------------------ grid
@dataclasses.dataclass(frozen=True)
class ModelRun:
    dataset: str
    architecture: str
    defense: str
    seed: int
    replicate: int | None = None     # causal experiment only (paper §5, App. H)
    treatment: int | None = None     # 1 = treatment variant, 0 = control variant

    @property
    def path(self) -> str:
        """Relative directory of this model's outputs under results/models/."""
        return f"{self.dataset}/{self.architecture}/{self.defense}/seed{self.seed}"


def model_runs(config: Mapping[str, Any]) -> list[ModelRun]:
    """Every model of the config: the grid, then the causal experiment's replicates."""
    runs: list[ModelRun] = []
    for cell in config["grid"]:
        for ds in cell["datasets"]:
            for arch in cell["architectures"]:
                for defense in cell["defenses"]:
                    for seed in config["seeds"]:
                        run = ModelRun(ds, arch, defense, int(seed))
                        if run not in runs:
                            runs.append(run)
    runs.extend(causal_runs(config))
    return runs


def causal_assignment(n_models: int, n_treated: int, seed: int) -> list[int]:
    """Complete randomisation of the causal experiment: exactly ``n_treated`` of ``n_models``
    replicates get the treatment; reproducible from ``seed`` (recorded in the config)."""
    from atat.stats.causal import assign_treatment

    return [int(d) for d in assign_treatment(n_models, n_treated, seed)]


def causal_runs(config: Mapping[str, Any]) -> list[ModelRun]:
    """Replicates of the randomised AT-AT experiment (paper §5, App. H): replicate i is trained
    with seed ``first_seed + i`` and the treatment or control variant its assignment says."""
    c = config.get("causal")
    if not c:
        return []
    assignment = causal_assignment(c["n_models"], c["n_treated"], c["assignment_seed"])
    return [ModelRun(c["dataset"], c["architecture"], c["treatment"] if d else c["control"],
                     c["first_seed"] + i, replicate=i, treatment=d)
            for i, d in enumerate(assignment)]


def training_params(config: Mapping[str, Any], dataset: str, architecture: str,
                    defense: str) -> dict[str, Any]:
    """Recipe of one cell: base recipe ← defense-level overrides ← per-cell overrides."""
    params = dict(config["training"])
    params.update(config["defenses"][defense].get("training", {}))
    cell = {"dataset": dataset, "architecture": architecture, "defense": defense}
    for rule in config.get("overrides", []):
        if all(cell[k] == v for k, v in rule["when"].items()):
            params.update(rule["training"])
    return params


def eps_tag(eps: float) -> str:
    """Canonical text of an epsilon in paths and column names (0.031, 0.0025, 1e-05)."""
    return format(float(eps), "g")


def unique(items: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
