"""Configuration: loading (with overlays), validation against the JSON schema plus the
semantic checks a schema cannot express, and expansion of the grid into model runs.

Everything here runs before any job: `workflow/rules/common.smk` calls
:func:`validate_config` and stops the workflow with one message naming the bad key.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, TypeVar

import jsonschema
import yaml

from atat.plan import eps_scale
from atat.plan.errors import ConfigError  # re-exported: callers import it from here
from atat.plan.inversion_defaults import EVAL_TRAINING_DEFAULTS, ifgmi_settings

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


# ---- values derived from a config, computed once per config ------------------------------------
# Snakemake asks for the same derived values (an inversion job's settings, a job's cost) once
# per job and per resource: thousands of times for the paper's DAG. They depend on the config
# and their arguments only, so each is computed once per config content and arguments.

#: configs whose content token is known: id -> (the config, live views of its first two levels,
#: the objects they held, their ids, the token). Holding the objects keeps their ids from being
#: reused.
_TOKENS: dict[int, tuple[Any, list[Any], list[Any], tuple[int, ...], str]] = {}
_MEMO: dict[tuple[Hashable, ...], Any] = {}
#: configs remembered at once; memoised values kept before the memo starts again
MEMO_CONFIGS = 16
MEMO_ENTRIES = 200_000
_T = TypeVar("_T")


def _two_levels(config: Mapping[str, Any]) -> list[Any]:
    """Live views of the values of ``config`` and of every mapping or list among them."""
    return [config.values(), *(v.values() if isinstance(v, Mapping) else v
                               for v in config.values() if isinstance(v, (Mapping, list)))]


def config_token(config: Mapping[str, Any]) -> str:
    """A text standing for ``config``'s content (the sha256 of its canonical JSON), computed
    once per config object. The object is remembered with the objects of its first two levels:
    a key set or replaced there (``config.update(...)``, ``cfg["inversion"]["classes_per_job"]
    = ...``, an item appended to ``cfg["seeds"]``) computes the token again; an edit deeper
    down, in place, is not seen -- call :func:`forget` after one. Equal contents give equal
    tokens, so a copy of a config shares its memoised values."""
    hit = _TOKENS.get(id(config))
    if hit is not None and hit[0] is config and hit[3] == tuple(
            map(id, itertools.chain.from_iterable(hit[1]))):
        return hit[4]
    views = _two_levels(config)
    objs = list(itertools.chain.from_iterable(views))
    ids = tuple(map(id, objs))
    try:
        text = json.dumps(config, sort_keys=True, default=repr)
    except TypeError:   # keys of mixed types: no canonical order, this object alone
        text = f"object {id(config)} {len(_TOKENS)} {len(_MEMO)} {ids}"
    token = hashlib.sha256(text.encode()).hexdigest()
    _TOKENS.pop(id(config), None)
    _TOKENS[id(config)] = (config, views, objs, ids, token)
    while len(_TOKENS) > MEMO_CONFIGS:
        del _TOKENS[next(iter(_TOKENS))]
    return token


def forget(config: Mapping[str, Any] | None = None) -> None:
    """Drop what is remembered of ``config`` (after editing it in place below its second
    level), or everything (None)."""
    if config is None:
        _TOKENS.clear()
        _MEMO.clear()
    else:
        _TOKENS.pop(id(config), None)


def memoised(name: str, config: Mapping[str, Any], key: Hashable,
             compute: Callable[[], _T]) -> _T:
    """``compute()``, or the value it gave before for ``name`` with ``key`` under a config of
    the same content (:func:`config_token`). Values are shared between callers: return
    immutable values, or copy them (:func:`copy_tree`). A call that raises is not
    remembered."""
    k = (name, config_token(config), key)
    try:
        return _MEMO[k]
    except KeyError:
        pass
    value = compute()
    if len(_MEMO) >= MEMO_ENTRIES:
        _MEMO.clear()
    _MEMO[k] = value
    return value


def copy_tree(obj: _T) -> _T:
    """A copy of nested dicts and lists (the leaves shared: numbers, strings, None)."""
    if type(obj) is dict:
        return {k: copy_tree(v) for k, v in obj.items()}  # type: ignore[return-value]
    if type(obj) is list:
        return [copy_tree(v) for v in obj]  # type: ignore[return-value]
    return copy.deepcopy(obj) if isinstance(obj, (dict, list, set)) else obj


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


def non_finite_floats(value: Any, key: str = "") -> list[str]:
    """``key: value`` of every NaN or infinite float anywhere in ``value`` (mappings and lists
    walked; list entries as ``key[i]``), in document order. JSON Schema bounds accept NaN
    (every comparison with it is false), so the schema alone lets ``training.lr: .nan``
    through to fail, or worse train, inside a job."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{key or '<top level>'}: {value!r}"]
    if isinstance(value, Mapping):
        return [bad for k, v in value.items()
                for bad in non_finite_floats(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, (list, tuple)):
        return [bad for i, v in enumerate(value) for bad in non_finite_floats(v, f"{key}[{i}]")]
    return []


def validate_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the first problem, or return silently."""
    bad = non_finite_floats(config)
    if bad:
        more = f" (and {len(bad) - 1} more: {', '.join(bad[1:4])})" if bad[1:] else ""
        raise ConfigError(f"invalid configuration: {bad[0]} -- every number must be finite "
                          f"(NaN and infinity are not values){more}")
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        raise ConfigError(f"invalid configuration: {_describe(errors[0])}")
    # the dose-response sweep's generated AT-AT variants are checked as defined defenses;
    # a problem of the sweep itself is reported after those of the names it refers to
    try:
        expanded, sweep_error = with_dose_response(config), None
    except ConfigError as exc:
        expanded, sweep_error = {**config, "dose_response": None}, exc
    _check_semantics(expanded)
    if sweep_error is not None:
        raise sweep_error


def _check_semantics(config: Mapping[str, Any]) -> None:
    # imported here: the defense modules import torch, which the DAG needs for nothing else
    from atat.training.defenses import DefenseConfigError, defense_class

    datasets = config["datasets"]
    for name, ds in datasets.items():
        if ds["source"] == "synthfaces":
            if "synthetic" not in ds:
                raise ConfigError(f"datasets.{name}.synthetic: required for source synthfaces")
            n = ds["synthetic"]["n_private_identities"]
            if ds.get("n_classes", n) != n:
                raise ConfigError(f"datasets.{name}.n_classes: {ds['n_classes']} differs from "
                                  f"synthetic.n_private_identities = {n}")
            if ds["synthetic"].get("domain", "faces") != "faces" and ds.get("faces"):
                raise ConfigError(f"datasets.{name}.faces: true, but synthetic.domain is "
                                  f"'{ds['synthetic']['domain']}' (not faces): delta_face would "
                                  "measure dog images with a face network; set faces: false "
                                  "(delta_eval replaces it, paper I.2)")
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
    eps_scale.check(config)   # the one epsilon rule (atat.plan.eps_scale)
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
    configured = [str(a) for a in ((config.get("inversion") or {}).get("attacks") or [])]
    for i, cell in enumerate(config["grid"]):
        for attack in cell.get("attacks") or []:
            if attack not in configured:
                raise ConfigError(f"invalid configuration: grid[{i}].attacks: '{attack}' is not "
                                  f"one of inversion.attacks {configured}")
    for i, rule in enumerate(config.get("overrides", [])):
        for key, pool in (("dataset", datasets), ("architecture", config["architectures"]),
                          ("defense", config["defenses"])):
            value = rule["when"].get(key)
            if value is not None and value not in pool:
                raise ConfigError(f"invalid configuration: overrides[{i}].when.{key}: '{value}' "
                                  f"is not defined")
        if "defense" in rule:
            _check_defense_patch(config, i, rule)
    planned = {(r.dataset, r.architecture, r.defense) for r in model_runs(config)}
    for ds, arch, name in sorted(planned):
        if name not in config["defenses"] or arch not in config["architectures"]:
            continue  # named in the grid but undefined: reported above
        variant = defense_params(config, name, (ds, arch))   # as that cell trains it
        patched = variant != defense_params(config, name)
        cls = defense_class(variant["type"], f"defenses.{name}")
        try:
            cls.check_architecture(cls.resolve_params(variant, f"defenses.{name}"), arch,
                                   f"defenses.{name}")
        except DefenseConfigError as exc:
            raise ConfigError(f"invalid configuration: {exc} (planned on {arch}"
                              + (f", as patched by overrides for {ds} / {arch}" if patched
                                 else "") + ")") from None
    causal = config.get("causal")
    if causal:
        for key, pool in (("dataset", datasets), ("architecture", config["architectures"]),
                          ("treatment", config["defenses"]), ("control", config["defenses"])):
            if causal[key] not in pool:
                raise ConfigError(f"invalid configuration: causal.{key}: '{causal[key]}' is not "
                                  "defined")
        if causal["n_treated"] > causal["n_models"]:
            raise ConfigError("invalid configuration: causal.n_treated: larger than n_models")
        configured = [str(a) for a in ((config.get("inversion") or {}).get("attacks") or [])]
        unknown = [a for a in causal.get("attacks") or [] if a not in configured]
        if configured and unknown:
            raise ConfigError(f"invalid configuration: causal.attacks: {unknown} are not among "
                              f"inversion.attacks {configured}")
        grid_seeds = set(int(s) for s in config["seeds"])
        own = set(range(causal["first_seed"], causal["first_seed"] + causal["n_models"]))
        if grid_seeds & own:
            raise ConfigError("invalid configuration: causal.first_seed: replicate seeds "
                              f"{sorted(own)} overlap the grid's seeds {sorted(grid_seeds)}")
    _check_inversion(config)
    training = config["training"]
    if any(m >= training["epochs"] for m in training["lr_milestones"]):
        raise ConfigError("invalid configuration: training.lr_milestones: every milestone must "
                          f"be < training.epochs = {training['epochs']}")
    _check_auxiliary_milestones(config)
    _check_evaluation_network(config)
    aa = config["autoattack"]
    try:
        check_autoattack_settings(aa.get("settings"), aa["version"])
    except ValueError as exc:
        raise ConfigError(f"invalid configuration: autoattack.settings: {exc}") from None
    for i, rule in enumerate(aa.get("overrides", [])):
        for key, pool in (("dataset", config["datasets"]),
                          ("architecture", config["architectures"]),
                          ("defense", config["defenses"])):
            value = rule["when"].get(key)
            if value is not None and value not in pool:
                raise ConfigError(f"invalid configuration: autoattack.overrides[{i}].when.{key}: "
                                  f"'{value}' is not defined")
    _check_paper_roles(config)
    _check_names(config)
    _check_early_stopping(config)
    _check_ranges(config)
    _check_pretrained_weights(config)
    _check_statistics(config)   # last: a reduced grid's own problems are named first


#: keys accepted in ``autoattack.settings`` (version "custom"), per group: the one home of
#: the rule, used by :func:`validate_config` and by :mod:`atat.robustness` at job time.
AUTOATTACK_SETTING_KEYS: dict[str, tuple[str, ...]] = {
    "apgd": ("n_iter", "n_restarts", "rho", "eot_iter"),
    "apgd_t": ("n_iter", "n_restarts", "n_target_classes", "rho", "eot_iter"),
    "fab": ("n_iter", "n_restarts", "n_target_classes", "alpha_max", "eta", "beta"),
    "square": ("n_queries", "p_init", "n_restarts"),
}
_AUTOATTACK_INT_KEYS = {"n_iter", "n_restarts", "n_target_classes", "eot_iter", "n_queries"}


def check_autoattack_settings(settings: Mapping[str, Any] | None,
                              version: str) -> dict[str, dict[str, Any]]:
    """The sub-attack overrides of ``settings`` (groups and keys of
    :data:`AUTOATTACK_SETTING_KEYS`, positive values), only allowed with version "custom";
    ValueError otherwise. Torch-free: runs at DAG time and in the AutoAttack job."""
    if settings is None:
        out: dict[str, dict[str, Any]] = {}
    elif not isinstance(settings, Mapping):
        raise ValueError(f"settings must be a mapping, got {type(settings).__name__}")
    else:
        out = {}
        for group, values in settings.items():
            if group not in AUTOATTACK_SETTING_KEYS:
                raise ValueError(f"unknown settings group {group!r} "
                                 f"(allowed: {sorted(AUTOATTACK_SETTING_KEYS)})")
            if not isinstance(values, Mapping):
                raise ValueError(f"settings[{group!r}] must be a mapping")
            for key, val in values.items():
                if key not in AUTOATTACK_SETTING_KEYS[group]:
                    raise ValueError(f"unknown setting {group}.{key} "
                                     f"(allowed: {list(AUTOATTACK_SETTING_KEYS[group])})")
                if key in _AUTOATTACK_INT_KEYS:
                    if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                        raise ValueError(f"setting {group}.{key} must be an integer >= 1, "
                                         f"got {val!r}")
                elif isinstance(val, bool) or not isinstance(val, (int, float)) or not (
                        math.isfinite(val) and val > 0):
                    raise ValueError(f"setting {group}.{key} must be a positive number, "
                                     f"got {val!r}")
                if key == "p_init" and val > 1:
                    raise ValueError(f"setting square.p_init must be in (0, 1], got {val!r}")
            out[group] = dict(values)
    if version == "standard" and out:
        raise ValueError("settings are only allowed with version='custom' "
                         "(version 'standard' uses AutoAttack's fixed hyper-parameters)")
    return out


def _check_defense_patch(config: Mapping[str, Any], i: int, rule: Mapping[str, Any]) -> None:
    """An override's ``defense`` patch: parameters of the one variant its ``when`` names, valid
    for that variant's type once merged (its type and recipe stay the variant's)."""
    from atat.training.defenses import DefenseConfigError, defense_class  # torch: see _check_semantics

    where = f"overrides[{i}].defense"
    name = rule["when"].get("defense")
    if name is None:
        raise ConfigError(f"invalid configuration: {where}: needs when.defense (defense "
                          "parameters belong to one variant)")
    for key in ("type", "training"):
        if key in rule["defense"]:
            raise ConfigError(f"invalid configuration: {where}.{key}: an override cannot change a "
                              f"variant's {key} (define another variant under 'defenses')")
    variant = {**config["defenses"][name], **rule["defense"]}
    try:
        defense_class(variant["type"], where).resolve_params(variant, where)
    except DefenseConfigError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def _check_auxiliary_milestones(config: Mapping[str, Any]) -> None:
    """lr_milestones of the evaluation model / face embedding below their epochs (after the
    job's defaults, atat.plan.inversion_defaults.EVAL_TRAINING_DEFAULTS), as in ``training``."""
    sections = [(key, (config.get(key) or {}).get("training"))
                for key in ("evaluation_model", "face_embedding")]
    sections = [(k, t) for k, t in sections if t is not None]
    if not sections:
        return
    for key, training in sections:
        recipe = {**EVAL_TRAINING_DEFAULTS, **dict(training)}
        if any(m >= recipe["epochs"] for m in recipe["lr_milestones"]):
            raise ConfigError(f"invalid configuration: {key}.training.lr_milestones: every "
                              f"milestone must be < {key}.training.epochs = {recipe['epochs']} "
                              f"(milestones {list(recipe['lr_milestones'])}; defaults from "
                              "atat.plan.inversion_defaults.EVAL_TRAINING_DEFAULTS)")


def _check_evaluation_network(config: Mapping[str, Any]) -> None:
    """``evaluation_model``: Inception-v3 needs inputs of >= 75 px; another architecture (a
    target architecture as judge) has no auxiliary head (``aux_logits: false``)."""
    ev = config.get("evaluation_model")
    if not ev:
        return
    arch = str(ev.get("architecture", EVALUATION_BACKBONE))
    if arch == EVALUATION_BACKBONE and int(ev["resolution"]) < 75:
        raise ConfigError(f"invalid configuration: evaluation_model.resolution: "
                          f"{ev['resolution']} px is below Inception-v3's smallest input (75)")
    if arch != EVALUATION_BACKBONE and ev.get("aux_logits", True):
        raise ConfigError(f"invalid configuration: evaluation_model.aux_logits: {arch} has no "
                          "auxiliary head (set aux_logits: false; only inception_v3 has one)")


def _check_ranges(config: Mapping[str, Any]) -> None:
    """Ordered (lo, hi) pairs the schema can only bound element-wise."""
    pairs = [("augmentation.rrc_scale", config["augmentation"].get("rrc_scale"))]
    ev_aug = (config.get("evaluation_model") or {}).get("augmentation") or {}
    pairs.append(("evaluation_model.augmentation.rrc_scale", ev_aug.get("rrc_scale")))
    for key, pair in pairs:
        if pair is not None and not 0 < pair[0] <= pair[1]:
            raise ConfigError(f"invalid configuration: {key}: {pair} must satisfy "
                              "0 < low <= high (a RandomResizedCrop scale range)")


#: ``tables.table4_architecture`` when the config leaves it out (the paper's main
#: architecture; atat.analysis.paper.main_architecture reads the same default).
TABLE4_DEFAULT_ARCHITECTURE = "resnet152"


def _check_pretrained_weights(config: Mapping[str, Any]) -> None:
    """A model whose recipe starts from pretrained weights (``pretrained: true``) needs a source
    of them: the config's ``pretraining`` (the miniature's own backbones, any architecture), or
    else torchvision's ImageNet files (``atat.plan.weights_table``): not ResNet-10 or
    DenseNet-47, the demo's own networks. ``face_embedding.pretrained`` is a public
    classifier's (FaceNet is pretrained by definition)."""
    from atat.plan.weights_table import TORCHVISION_WEIGHTS

    face = config.get("face_embedding") or {}
    if face.get("pretrained") and face.get("source") != "public_classifier":
        raise ConfigError("invalid configuration: face_embedding.pretrained: only a "
                          "public_classifier is fine-tuned from a pretrained backbone (FaceNet's "
                          "weights are downloaded); remove the key")
    if config.get("pretraining"):
        _check_pretraining(config)
        return
    if face.get("pretrained") and face.get("architecture", "resnet18") not in TORCHVISION_WEIGHTS:
        raise ConfigError(f"invalid configuration: face_embedding.pretrained: no ImageNet "
                          f"weights exist for {face.get('architecture')} (add a pretraining block)")
    for run in model_runs(config):
        if run.architecture in TORCHVISION_WEIGHTS or run.defense not in config["defenses"]:
            continue
        if training_params(config, run.dataset, run.architecture, run.defense)["pretrained"]:
            raise ConfigError(f"invalid configuration: architectures.{run.architecture}: no "
                              f"ImageNet weights exist for it, but {run.path} is trained with "
                              "pretrained: true (set training.pretrained: false, or add a "
                              "pretraining block: the miniature's own backbones)")


#: the evaluation model's network, a backbone of ``pretraining`` besides the target architectures
EVALUATION_BACKBONE = "inception_v3"


def pretraining_exclusions(config: Mapping[str, Any]) -> list[dict[str, int]]:
    """The face populations the pretraining population must be disjoint from
    (:mod:`atat.data.pretraining`): the seed and pool sizes of every synthetic face dataset of
    the config (a dog population has no face identities to collide with)."""
    out = []
    for d in config["datasets"].values():
        syn = d.get("synthetic") or {}
        if d["source"] != "synthfaces" or syn.get("domain", "faces") != "faces":
            continue
        out.append({"seed": int(syn["seed"]),
                    "n_private_identities": int(syn["n_private_identities"]),
                    "n_public_identities": int(syn["n_public_identities"])})
    return out


def pretraining_backbones(config: Mapping[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(backbone, resolution) -> {aux_logits, training} of every network the config fine-tunes
    from its ``pretraining``: each target architecture trained with ``pretrained: true`` at its
    dataset's resolution, the evaluation model's Inception-v3 at its resolution
    (``evaluation_model.pretrained``) and the public classifier of δ_face
    (``face_embedding.pretrained``); one backbone serves every network of the same
    architecture and resolution. Empty without ``pretraining`` (the paper config: torchvision's
    ImageNet files). ``training``: ``pretraining.training`` updated by the backbone's entry of
    ``pretraining.backbones``."""
    pre = config.get("pretraining")
    if not pre:
        return {}
    wanted: dict[tuple[str, int], bool] = {}
    for run in model_runs(config):
        if run.defense in config["defenses"] and training_params(
                config, run.dataset, run.architecture, run.defense)["pretrained"]:
            wanted[(run.architecture, int(config["datasets"][run.dataset]["resolution"]))] = False
    ev = config.get("evaluation_model") or {}
    if ev.get("pretrained"):
        wanted[(str(ev.get("architecture", EVALUATION_BACKBONE)), int(ev["resolution"]))] = \
            bool(ev.get("aux_logits", True))
    face = config.get("face_embedding") or {}
    if face.get("pretrained") and face.get("source") == "public_classifier":
        wanted.setdefault((str(face.get("architecture", "resnet18")), int(face["resolution"])),
                          False)
    per = pre.get("backbones") or {}
    return {key: {"aux_logits": aux, "training": {**pre["training"], **(per.get(key[0]) or {})}}
            for key, aux in sorted(wanted.items())}


def _check_pretraining(config: Mapping[str, Any]) -> None:
    """``pretraining``: each backbone's recipe has its milestones below its epochs and a batch
    no larger than the population's training images (the loader drops the last partial batch)."""
    pre = config["pretraining"]
    pop = pre["population"]
    n_train = int(pop["identities"]) * int(pop["images_per_identity"])
    recipes = [("pretraining.training", dict(pre["training"]))]
    recipes += [(f"pretraining.backbones.{name}", {**pre["training"], **(entry or {})})
                for name, entry in (pre.get("backbones") or {}).items()]
    for key, recipe in recipes:
        if any(m >= recipe["epochs"] for m in recipe["lr_milestones"]):
            raise ConfigError(f"invalid configuration: {key}.lr_milestones: every milestone must "
                              f"be < epochs = {recipe['epochs']} (milestones "
                              f"{list(recipe['lr_milestones'])})")
        if int(recipe["batch_size"]) > n_train:
            raise ConfigError(f"invalid configuration: {key}.batch_size: {recipe['batch_size']} "
                              f"is more than the pretraining population's {n_train} training "
                              "images (pretraining.population)")


def _check_statistics(config: Mapping[str, Any]) -> None:
    """``statistics`` (issue 17): the regression samples name defined datasets,
    architectures, defense variants and types; the reference levels are defined and in
    every sample that lists its factor; and when the config runs model inversion (the
    statistics need its leakage) every dataset and architecture a sample names is planned
    by the grid -- a sample naming an unplanned one would silently fit fewer models than it
    declares. The sample names the specifications use are checked with
    config/regressions.yaml (atat.analysis.stats.regression.check_regressions)."""
    from atat.training.defenses import REGISTRY as DEFENSE_TYPES

    stats = config["statistics"]
    pools = {"datasets": ("datasets", config["datasets"]),
             "architectures": ("architectures", config["architectures"]),
             "defenses": ("defenses", config["defenses"]),
             "exclude_defenses": ("defenses", config["defenses"]),
             "defense_types": ("the defense types of atat.training.defenses", DEFENSE_TYPES)}
    columns = {"dataset": "datasets", "architecture": "architectures", "defense": "defenses",
               "defense_type": "defense_types"}
    grid_runs = [r for r in model_runs(config) if r.replicate is None]
    planned = {"datasets": sorted({r.dataset for r in grid_runs}),
               "architectures": sorted({r.architecture for r in grid_runs})}
    check_planned = bool((config.get("inversion") or {}).get("attacks"))

    def fail(key: str, msg: str) -> None:
        raise ConfigError(f"invalid configuration: statistics.{key}: {msg}")

    for name, sample in stats["samples"].items():
        for key, (pool_name, pool) in pools.items():
            for item in sample.get(key) or []:
                if item not in pool:
                    fail(f"samples.{name}.{key}", f"'{item}' is not defined under "
                                                  f"'{pool_name}' (defined: {sorted(pool)})")
                if check_planned and key in planned and item not in planned[key]:
                    fail(f"samples.{name}.{key}",
                         f"'{item}' is not planned by the grid (planned: {planned[key]}): "
                         "the sample would silently lose its models; declare this config's "
                         "own samples")
        for i, rule in enumerate(sample.get("exclude_rows") or []):
            for col, values in rule.items():
                if col not in columns:
                    continue
                pool_name, pool = pools[columns[col]]
                for item in values if isinstance(values, list) else [values]:
                    if item not in pool:
                        fail(f"samples.{name}.exclude_rows[{i}].{col}",
                             f"'{item}' is not defined under '{pool_name}'")
    for factor, key in (("dataset", "datasets"), ("architecture", "architectures")):
        ref = stats["reference_levels"][factor]
        if ref not in pools[key][1]:
            fail(f"reference_levels.{factor}", f"'{ref}' is not defined under '{key}'")
        for name, sample in stats["samples"].items():
            if sample.get(key) and ref not in sample[key]:
                fail(f"reference_levels.{factor}",
                     f"'{ref}' is not one of samples.{name}.{key} {sample[key]} (the "
                     "reference level of the factor's treatment coding)")


# ------------------------------------------------------------------------------ paper roles
#: The paper's dataset and architecture names that the selections below refer to (Tables 1,
#: 4, 9, 23-28). Config key ``paper_roles`` maps them to the config's own names (the demo's
#: deep/shallow nets and its two populations play the paper's roles); absent = identity.
PAPER_ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "datasets": ("facescrub", "celeba", "stanford_dogs"),
    "architectures": ("resnet152", "resnet18", "densenet169"),
}


def paper_roles(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """``kind -> {paper name: config name}`` for every paper name of
    :data:`PAPER_ROLE_NAMES` (unmapped names stand for themselves). Validated by
    :func:`validate_config` (``paper_roles.<kind>.<name>``)."""
    given = config.get("paper_roles") or {}
    return {kind: {n: str((given.get(kind) or {}).get(n, n)) for n in names}
            for kind, names in PAPER_ROLE_NAMES.items()}


def translate(config: Mapping[str, Any], kind: str, names: Iterable[str]) -> list[str]:
    """The config's names of the paper's ``names`` (``kind``: ``datasets`` or
    ``architectures``), in order: the one translation every hard-coded paper-name
    selection goes through."""
    roles = paper_roles(config)[kind]
    return [roles.get(n, n) for n in names]


def main_architecture(config: Mapping[str, Any]) -> str:
    """``tables.table4_architecture``: the paper's main architecture (ResNet-152, or the
    config's architecture in its role, ``paper_roles``)."""
    arch = (config.get("tables") or {}).get("table4_architecture")
    return str(arch) if arch is not None else translate(
        config, "architectures", [TABLE4_DEFAULT_ARCHITECTURE])[0]


def _check_paper_roles(config: Mapping[str, Any]) -> None:
    """``paper_roles``: each key a paper name of :data:`atat.analysis.paper.PAPER_ROLE_NAMES`, each
    value a name the config defines, and no config name in two roles (an unmapped paper
    name keeps its own name, so it counts as mapped to itself)."""
    given = config.get("paper_roles") or {}
    for kind, mapping in given.items():
        known = PAPER_ROLE_NAMES[kind]   # the schema admits only these kinds
        for paper, mine in (mapping or {}).items():
            if paper not in known:
                raise ConfigError(f"invalid configuration: paper_roles.{kind}.{paper}: not one "
                                  f"of the paper's {kind} its selections name (known: "
                                  f"{list(known)})")
            if mine not in config[kind]:
                raise ConfigError(f"invalid configuration: paper_roles.{kind}.{paper}: "
                                  f"'{mine}' is not defined under '{kind}' (defined: "
                                  f"{sorted(config[kind])})")
    for kind, roles in paper_roles(config).items():
        by_mine: dict[str, list[str]] = {}
        for paper, mine in roles.items():
            by_mine.setdefault(mine, []).append(paper)
        for mine, papers in by_mine.items():
            if len(papers) > 1:
                mapped = [p for p in papers if p in (given.get(kind) or {})]
                raise ConfigError(f"invalid configuration: paper_roles.{kind}.{mapped[0]}: "
                                  f"'{mine}' plays two roles: {papers} (an unmapped paper "
                                  "name stands for itself)")


def _check_names(config: Mapping[str, Any]) -> None:
    """Name-valued keys the checks above do not cover: each must name something that exists
    (a misspelt name would otherwise silently drop a table or a model)."""
    generators = config.get("generators") or {}
    for name, ds in config["datasets"].items():
        gen = ds.get("generator")
        if gen is not None and gen not in generators:
            raise ConfigError(f"invalid configuration: datasets.{name}.generator: '{gen}' is not "
                              f"defined under 'generators' (defined: {sorted(generators)})")
    arch = (config.get("tables") or {}).get("table4_architecture")
    trained = sorted({r.architecture for r in model_runs(config)})
    default = main_architecture(config)
    if arch is None and default not in trained:
        role = ("" if default == TABLE4_DEFAULT_ARCHITECTURE else
                f" (paper_roles.architectures.{TABLE4_DEFAULT_ARCHITECTURE})")
        raise ConfigError(f"invalid configuration: tables.table4_architecture: not set, and its "
                          f"default '{default}'{role} is not an architecture the "
                          f"grid trains (trained: {trained}); set it to one of them, or Table 4 "
                          "and Figure 5 would be dropped")
    if arch is not None and arch not in trained:
        raise ConfigError(f"invalid configuration: tables.table4_architecture: '{arch}' is "
                          f"not an architecture the grid trains (trained: {trained}); Table 4 "
                          "and Figure 5 would be dropped")
    for where, training in _training_sections(config):
        target = training.get("stop_at_val_acc")
        if isinstance(target, str) and target not in config["defenses"]:
            raise ConfigError(f"invalid configuration: {where}.stop_at_val_acc: '{target}' is not "
                              f"defined under 'defenses' (defined: {sorted(config['defenses'])})")


def _training_sections(config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(key path, mapping) of every training recipe section of the config."""
    out: list[tuple[str, Mapping[str, Any]]] = [("training", config["training"])]
    out += [(f"defenses.{n}.training", v["training"]) for n, v in config["defenses"].items()
            if "training" in v]
    out += [(f"overrides[{i}].training", r["training"])
            for i, r in enumerate(config.get("overrides", [])) if "training" in r]
    return out


def stop_reference_variant(training: Mapping[str, Any]) -> str | None:
    """The defense variant an early-stopped recipe takes its target accuracy from
    (``stop_at_val_acc`` given as a name, paper Table 3), or None."""
    target = training.get("stop_at_val_acc")
    return target if isinstance(target, str) else None


def _check_early_stopping(config: Mapping[str, Any]) -> None:
    """An early-stopped run whose target is another variant's accuracy needs that variant's
    model of the same dataset, architecture and seed in the plan (its metrics.json is an input
    of the training job), and that model must not itself wait for another model."""
    runs = {(r.dataset, r.architecture, r.defense, r.seed) for r in model_runs(config)}
    for run in model_runs(config):
        ref = stop_reference_variant(training_params(config, run.dataset, run.architecture,
                                                     run.defense))
        if ref is None:
            continue
        key = next((w for w, t in reversed(_training_sections(config))
                    if t.get("stop_at_val_acc") == ref), "training")
        where = f"invalid configuration: {key}.stop_at_val_acc ({run.path})"
        if ref == run.defense:
            raise ConfigError(f"{where}: a model cannot stop at its own accuracy")
        if (run.dataset, run.architecture, ref, run.seed) not in runs:
            raise ConfigError(f"{where}: the target accuracy is that of '{ref}', but the grid "
                              f"trains no {run.dataset}/{run.architecture}/{ref}/seed{run.seed}; add "
                              f"'{ref}' to the grid cell or give a number")
        if stop_reference_variant(training_params(config, run.dataset, run.architecture, ref)):
            raise ConfigError(f"{where}: '{ref}' itself stops at another model's accuracy; "
                              "chains are not supported")


def _check_inversion(config: Mapping[str, Any]) -> None:
    inv = config.get("inversion")
    if not inv or not inv.get("attacks"):
        return
    datasets, generators = config["datasets"], config.get("generators", {})
    for key in ("evaluation_model", "face_embedding"):
        if key not in config:
            raise ConfigError(f"invalid configuration: {key}: required when inversion.attacks "
                              "is not empty")
    for name, gen in generators.items():
        train = gen.get("train")
        if train:
            ds = datasets.get(train["dataset"])
            if ds is None:
                raise ConfigError(f"invalid configuration: generators.{name}.train.dataset: "
                                  f"'{train['dataset']}' is not defined under 'datasets'")
            if ds["source"] != "synthfaces":
                raise ConfigError(f"invalid configuration: generators.{name}.train.dataset: only "
                                  "synthfaces datasets ship a public pool to train a prior on")
    used = {r.dataset for r in model_runs(config)}
    for name in sorted(used):
        gen = datasets[name].get("generator")
        if gen is None:
            raise ConfigError(f"invalid configuration: datasets.{name}.generator: required when "
                              "inversion.attacks is not empty")
        if gen not in generators:
            raise ConfigError(f"invalid configuration: datasets.{name}.generator: '{gen}' is not "
                              f"defined under 'generators' (defined: {sorted(generators)})")
    for name, gen in generators.items():
        crop, train = gen.get("center_crop"), gen.get("train")
        if crop is not None and train and train["dataset"] in datasets:
            res = int(datasets[train["dataset"]]["resolution"])
            if crop > res:
                raise ConfigError(f"invalid configuration: generators.{name}.center_crop: {crop} "
                                  f"is larger than the generator's {res} px images (the "
                                  f"resolution of datasets.{train['dataset']}); a crop that "
                                  "large crops nothing")
    face = config["face_embedding"]
    if face["source"] == "public_classifier":
        # rule train_face_embedding (workflow/rules/evaluation.smk) trains it on the public
        # pool of a synthfaces dataset only; a real face dataset has no such pool
        real = sorted(n for n in used if datasets[n].get("faces")
                      and datasets[n]["source"] != "synthfaces")
        if real:
            raise ConfigError(f"invalid configuration: face_embedding.source: public_classifier "
                              f"is trained on a synthfaces dataset's public pool only, but the "
                              f"grid attacks the face dataset(s) {real} "
                              f"(source {datasets[real[0]]['source']}); use source facenet")
    if face["source"] == "facenet" and "url" not in face:
        raise ConfigError("invalid configuration: face_embedding.url: required for source facenet")
    if face["source"] == "public_classifier" and "training" not in face:
        raise ConfigError("invalid configuration: face_embedding.training: required for source "
                          "public_classifier")
    for attack in inv["attacks"]:
        if attack not in inv:
            raise ConfigError(f"invalid configuration: inversion.{attack}: settings required for "
                              "a listed attack")
    for i, rule in enumerate(inv.get("overrides", [])):
        for key, pool in (("dataset", datasets), ("architecture", config["architectures"]),
                          ("defense", config["defenses"])):
            value = rule["when"].get(key)
            if value is not None and value not in pool:
                raise ConfigError(f"invalid configuration: inversion.overrides[{i}].when.{key}: "
                                  f"'{value}' is not defined")
    for run in model_runs(config):
        for attack in inv["attacks"]:
            params = inversion_params(config, run.dataset, run.architecture, run.defense, attack)
            targets, n = params["targets"], n_classes(config, run.dataset)
            where = f"inversion ({run.path}, {attack})"
            if isinstance(targets, int) and targets > n:
                raise ConfigError(f"invalid configuration: {where}: targets = {targets} is more "
                                  f"than the {n} classes of {run.dataset}")
            if isinstance(targets, list) and max(targets) >= n:
                raise ConfigError(f"invalid configuration: {where}: target class {max(targets)} "
                                  f"does not exist ({run.dataset} has {n} classes)")
            fs = params.get("final_selection")
            cands = params["candidates"]["num_candidates"]
            if fs and fs["samples_per_target"] > cands:
                raise ConfigError(f"invalid configuration: {where}: final_selection."
                                  f"samples_per_target {fs['samples_per_target']} > "
                                  f"candidates.num_candidates {cands}")
            if cands > params["candidates"]["search_space_size"]:
                raise ConfigError(f"invalid configuration: {where}: candidates.num_candidates "
                                  f"{cands} > search_space_size")
            if attack == "ifgmi":
                _check_ifgmi_radii(params, where)


def _check_ifgmi_radii(params: Mapping[str, Any], where: str) -> None:
    """One max_radius_mid / max_radius_w per IF-GMI stage (``steps``), after the
    defaults (docs/sources.md#if-gmi) of keys the config leaves out
    (atat.plan.inversion_defaults.ifgmi_settings)."""

    settings = ifgmi_settings(params)
    n = len(settings["steps"])
    for key in ("max_radius_mid", "max_radius_w"):
        radii = settings[key]
        if len(radii) < n:
            given = "given" if params.get(key) is not None else "default"
            raise ConfigError(f"invalid configuration: {where}: inversion.ifgmi.{key}: "
                              f"{len(radii)} radii ({given}) for {n} stages (steps = "
                              f"{settings['steps']}); give one radius per stage (0 = "
                              "unconstrained)")


def n_classes(config: Mapping[str, Any], dataset: str) -> int:
    ds = config["datasets"][dataset]
    return int(ds.get("n_classes") or ds["synthetic"]["n_private_identities"])


def autoattack_params(config: Mapping[str, Any], dataset: str, architecture: str,
                      defense: str) -> dict[str, Any]:
    """AutoAttack settings of one model: ``autoattack`` without its ``overrides``, with
    ``n_examples`` from the last matching ``autoattack.overrides`` entry (the per-cell budget).
    Computed once per config and model (:func:`memoised`); each call returns its own copy."""
    return copy_tree(memoised("autoattack_params", config, (dataset, architecture, defense),
                              lambda: _autoattack_params(config, dataset, architecture, defense)))


def _autoattack_params(config: Mapping[str, Any], dataset: str, architecture: str,
                       defense: str) -> dict[str, Any]:
    params = {k: v for k, v in config["autoattack"].items() if k != "overrides"}
    cell = {"dataset": dataset, "architecture": architecture, "defense": defense}
    for rule in config["autoattack"].get("overrides", []):
        if all(cell[k] == v for k, v in rule["when"].items()):
            params["n_examples"] = int(rule["n_examples"])
    return _canonical(params)


def inversion_params(config: Mapping[str, Any], dataset: str, architecture: str, defense: str,
                     attack: str) -> dict[str, Any]:
    """Settings of one inversion job: the attack's section plus the shared keys (seed,
    targets, figure resolution, the dataset's generator and its crop), then every matching
    ``inversion.overrides`` entry in order (later entries win). Computed once per config and
    job (:func:`memoised`); each call returns its own copy."""
    return copy_tree(memoised("inversion_params", config, (dataset, architecture, defense, attack),
                              lambda: _inversion_params(config, dataset, architecture, defense,
                                                        attack)))


def _inversion_params(config: Mapping[str, Any], dataset: str, architecture: str, defense: str,
                      attack: str) -> dict[str, Any]:
    inv = config["inversion"]
    params = deep_merge({}, inv.get(attack, {}))
    params["targets"] = inv.get("targets", "all")
    cell = {"dataset": dataset, "architecture": architecture, "defense": defense,
            "attack": attack}
    for rule in inv.get("overrides", []):
        if all(cell[k] == v for k, v in rule["when"].items()):
            if "targets" in rule["set"]:
                params["targets"] = rule["set"]["targets"]
            params = deep_merge(params, rule["set"].get(attack, {}))
    gen_name = config["datasets"][dataset]["generator"]
    params["attack"] = attack
    params["seed"] = int(inv.get("seed", 42))
    params["figure_resolution"] = int(inv.get("figure_resolution", 128))
    params["generator"] = gen_name
    params["center_crop"] = config["generators"][gen_name].get("center_crop")
    params["dataset_kind"] = config["datasets"][dataset]["source"]
    params["n_classes"] = n_classes(config, dataset)
    params["input_resolution"] = int(config["datasets"][dataset]["resolution"])
    # float32 backend flags of the attack (atat.base.precision; fp32 when the key is absent)
    params["precision"] = str(inv.get("precision", "fp32"))
    return _canonical(params)


def inversion_class_count(params: Mapping[str, Any]) -> int:
    """How many classes an inversion job with ``params`` (:func:`inversion_params`) attacks:
    the length of the attack's class list (atat.inversion.core.target_classes; PPDG attacks
    each listed class once)."""
    targets = params["targets"]
    if targets == "all":
        return int(params["n_classes"])
    if isinstance(targets, (list, tuple)):
        return len(set(targets)) if params["attack"] == "ppdg" else len(targets)
    return max(int(targets), 1)


def inversion_shards(config: Mapping[str, Any], dataset: str, architecture: str, defense: str,
                     attack: str) -> list[tuple[int, int]]:
    """The jobs of one (model, attack) inversion: ``[(start, stop), ...]``, consecutive
    ranges of positions in the attack's class list (atat.inversion.run.attack_class_list)
    of at most ``inversion.classes_per_job[attack]`` classes (absent or null: one range of
    every class). One range = one job (rule invert); several = one rule invert_shard job
    each, merged by rule invert into the same outputs. The model's seed does not matter."""
    return list(memoised("inversion_shards", config, (dataset, architecture, defense, attack),
                         lambda: _inversion_shards(config, dataset, architecture, defense,
                                                   attack)))


def _inversion_shards(config: Mapping[str, Any], dataset: str, architecture: str, defense: str,
                      attack: str) -> tuple[tuple[int, int], ...]:
    n = inversion_class_count(inversion_params(config, dataset, architecture, defense, attack))
    per_job = (config["inversion"].get("classes_per_job") or {}).get(attack)
    size = n if per_job is None else int(per_job)
    if size < 1:
        raise ConfigError(f"inversion.classes_per_job.{attack} must be >= 1, got {per_job!r}")
    return tuple((a, min(a + size, n)) for a in range(0, n, size))


def _canonical(obj: Any) -> Any:
    """Mappings with sorted keys (recursively): Snakemake compares rule params by their text,
    so the same settings written in another key order must give the same params."""
    if isinstance(obj, Mapping):
        return {k: _canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------ grid
@dataclasses.dataclass(frozen=True)
class ModelRun:
    dataset: str
    architecture: str
    defense: str
    seed: int
    replicate: int | None = None     # causal experiment only (paper §5, App. H)
    treatment: int | None = None     # 1 = treatment variant, 0 = control variant
    dose_response: bool = False      # a model only the dose-response sweep adds (not the grid's)

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
    runs.extend(dose_response_runs(config, runs))
    runs.extend(causal_runs(config))
    return runs


def causal_assignment(n_models: int, n_treated: int, seed: int) -> list[int]:
    """Complete randomisation of the causal experiment: exactly ``n_treated`` of ``n_models``
    replicates get the treatment; reproducible from ``seed`` (recorded in the config)."""
    return assign_treatment(n_models, n_treated, seed)


def assign_treatment(n: int, n_treated: int, seed: int) -> list[int]:
    """Complete randomization: a 0/1 list of length ``n`` with exactly ``n_treated`` ones,
    a deterministic function of ``seed`` (NumPy PCG64 ``default_rng(seed).permutation``).
    Part of the plan (which replicate is treated), so it lives here; atat.analysis.stats.causal
    re-exports it."""
    import numpy as np

    n, n_treated = int(n), int(n_treated)
    if n < 1 or not 0 <= n_treated <= n:
        raise ValueError(f"need 0 <= n_treated <= n and n >= 1, got n={n}, n_treated={n_treated}")
    rng = np.random.default_rng(int(seed))
    order = rng.permutation(n)
    d = np.zeros(n, dtype=int)
    d[order[:n_treated]] = 1
    return [int(v) for v in d]


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


# ------------------------------------------------------------------------------ dose-response
#: Keys of ``dose_response`` (issue 17: AT-AT's lambda swept on one grid cell).
DOSE_RESPONSE_KEYS = ("dataset", "architecture", "defense", "weight_adv", "zero", "attack")


@dataclasses.dataclass(frozen=True)
class DosePoint:
    """One lambda of the dose-response sweep and the defense variant whose models give it:
    the grid's AT-AT variant (its own ``weight_adv``), the ``zero`` variant (lambda = 0) or a
    variant generated from the AT-AT variant (``generated``)."""

    weight_adv: float
    defense: str
    generated: bool


def dose_response_variant_name(defense: str, weight_adv: float) -> str:
    """Name of the generated variant: ``atat_w0p25`` for lambda 0.25 (names are path
    components and wildcard alternatives: '.' -> 'p', '-' -> 'm')."""
    tag = format(float(weight_adv), "g").replace(".", "p").replace("-", "m").replace("+", "")
    return f"{defense}_w{tag}"


def _dose_error(key: str, msg: str) -> ConfigError:
    return ConfigError(f"invalid configuration: dose_response.{key}: {msg}")


def dose_response_points(config: Mapping[str, Any]) -> list[DosePoint]:
    """The sweep's points in lambda order ([] when ``dose_response`` is null or absent),
    checked here (this runs before the schema whenever a plan is built): every key known,
    the cell's dataset/architecture defined, ``defense`` an ``atat``-type variant that
    states its ``weight_adv``, ``weight_adv`` a non-empty list of distinct numbers >= 0,
    ``zero`` (optional) a ``nodef``-type variant with the AT-AT variant's training recipe in
    that cell, used only when 0 is swept, ``attack`` one of ``inversion.attacks``; a
    generated name must not be a user-defined variant with other settings."""
    dr = config.get("dose_response")
    if dr is None:
        return []
    if not isinstance(dr, Mapping):
        raise ConfigError("invalid configuration: dose_response: must be a mapping or null, "
                          f"got {type(dr).__name__}")
    unknown = sorted(set(dr) - set(DOSE_RESPONSE_KEYS))
    if unknown:
        raise ConfigError(f"invalid configuration: unknown key 'dose_response.{unknown[0]}' "
                          f"(known: {list(DOSE_RESPONSE_KEYS)})")
    for key in ("dataset", "architecture", "defense", "weight_adv", "attack"):
        if key not in dr:
            raise _dose_error(key, "required")
    defenses = config.get("defenses") or {}
    for key, pool, pool_name in (("dataset", config.get("datasets") or {}, "datasets"),
                                 ("architecture", config.get("architectures") or {},
                                  "architectures"),
                                 ("defense", defenses, "defenses")):
        if not isinstance(dr[key], str) or dr[key] not in pool:
            raise _dose_error(key, f"{dr[key]!r} is not defined under '{pool_name}' "
                                   f"(defined: {sorted(pool)})")
    base_name = dr["defense"]
    base = defenses[base_name]
    if base.get("type") != "atat":
        raise _dose_error("defense", f"'{base_name}' is of type '{base.get('type')}'; the "
                                     "sweep varies AT-AT's lambda (weight_adv): name an "
                                     "'atat'-type variant")
    own = base.get("weight_adv")
    if isinstance(own, bool) or not isinstance(own, (int, float)):
        raise _dose_error("defense", f"defenses.{base_name}.weight_adv must be stated "
                                     "explicitly (the sweep reuses that model for its own "
                                     "lambda)")
    values = dr["weight_adv"]
    if not isinstance(values, list) or not values:
        raise _dose_error("weight_adv", f"a non-empty list of numbers >= 0, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < 0:
            raise _dose_error("weight_adv", f"{v!r} is not a number >= 0")
    if len({float(v) for v in values}) != len(values):
        raise _dose_error("weight_adv", f"{values} has repeated values")
    inv_attacks = list((config.get("inversion") or {}).get("attacks") or [])
    if dr["attack"] not in inv_attacks:
        raise _dose_error("attack", f"{dr['attack']!r} is not one of inversion.attacks "
                                    f"{inv_attacks} (the sweep's AttAcc@1 comes from it; "
                                    "without that attack set dose_response: null)")
    zero = dr.get("zero")
    if zero is not None:
        if 0 not in [float(v) for v in values]:
            raise _dose_error("zero", f"'{zero}' is set, but 0 is not among weight_adv "
                                      f"{values}")
        if not isinstance(zero, str) or zero not in defenses:
            raise _dose_error("zero", f"{zero!r} is not defined under 'defenses' "
                                      f"(defined: {sorted(defenses)})")
        if defenses[zero].get("type") != "nodef":
            raise _dose_error("zero", f"'{zero}' is of type '{defenses[zero].get('type')}'; "
                                      "lambda = 0 is the NoDef objective: name a 'nodef' "
                                      "variant, or null to train AT-AT with lambda 0")
        ds, arch = dr["dataset"], dr["architecture"]
        if training_params(config, ds, arch, zero) != training_params(config, ds, arch,
                                                                      base_name):
            raise _dose_error("zero", f"'{zero}' is trained with another recipe than "
                                      f"'{base_name}' on {ds}/{arch} (training_params "
                                      "differ), so it is not the lambda = 0 control")
    points = []
    for v in sorted(float(v) for v in values):
        if v == 0 and zero is not None:
            points.append(DosePoint(v, zero, False))
        elif v == float(own):
            points.append(DosePoint(v, base_name, False))
        else:
            name = dose_response_variant_name(base_name, v)
            existing = defenses.get(name)
            if existing is not None and dict(existing) != _generated_variant(config, v):
                raise _dose_error("weight_adv", f"{v:g} generates the variant '{name}', "
                                                "which defenses defines with other settings")
            points.append(DosePoint(v, name, True))
    return points


def _generated_variant(config: Mapping[str, Any], weight_adv: float) -> dict[str, Any]:
    """The AT-AT variant's settings with ``weight_adv`` replaced; its ``training`` is the
    variant's whole recipe in the sweep's cell (per-cell ``overrides`` of the AT-AT variant
    included, which name it and so would not match the generated name)."""
    dr = config["dose_response"]
    out = copy.deepcopy(dict(config["defenses"][dr["defense"]]))
    out["weight_adv"] = float(weight_adv)
    out["training"] = training_params(config, dr["dataset"], dr["architecture"], dr["defense"])
    return out


def dose_response_defenses(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The generated variants of the sweep, by name: the AT-AT variant's settings with
    ``weight_adv`` replaced and its whole training recipe of the sweep's cell as ``training``
    (checked: the generated variant's :func:`training_params` there equal the AT-AT
    variant's). The one place they are made."""
    points = dose_response_points(config)
    if not points:
        return {}
    out = {p.defense: _generated_variant(config, p.weight_adv) for p in points if p.generated}
    dr = config["dose_response"]
    expanded = {**config, "defenses": {**config["defenses"], **out}}
    want = training_params(config, dr["dataset"], dr["architecture"], dr["defense"])
    for name in out:
        if training_params(expanded, dr["dataset"], dr["architecture"], name) != want:
            raise _dose_error("defense", f"the overrides give the generated '{name}' another "
                                         f"training recipe than '{dr['defense']}' on "
                                         f"{dr['dataset']}/{dr['architecture']} (an override "
                                         "without `defense` before one naming it)")
    return out


def with_dose_response(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the sweep's generated variants added under ``defenses`` (a copy;
    idempotent). The workflow applies it once after validation (workflow/rules/common.smk),
    so every rule sees the variants as defined defenses; :class:`atat.analysis.paper.Plan` and
    :func:`validate_config` apply it to the configs they are given."""
    generated = dose_response_defenses(config)
    out = dict(config)
    if generated:
        out["defenses"] = {**config["defenses"], **generated}
    return out


def dose_response_runs(config: Mapping[str, Any], planned: Iterable[ModelRun] = ()
                       ) -> list[ModelRun]:
    """The sweep's models that ``planned`` (the grid's) lacks, one per point and seed, marked
    ``dose_response=True``: trained, AutoAttacked and attacked by ``dose_response.attack``
    only (not part of the paper's per-cell outputs, HSIC or reconstruction grids)."""
    points = dose_response_points(config)
    if not points:
        return []
    dr = config["dose_response"]
    have = {(r.dataset, r.architecture, r.defense, r.seed) for r in planned}
    runs = []
    for p in points:
        for seed in config["seeds"]:
            key = (dr["dataset"], dr["architecture"], p.defense, int(seed))
            if key not in have:
                have.add(key)
                runs.append(ModelRun(*key, dose_response=True))
    return runs


def _matching_overrides(config: Mapping[str, Any], dataset: str, architecture: str,
                        defense: str) -> list[Mapping[str, Any]]:
    """The ``overrides`` entries whose ``when`` matches the cell, in order."""
    cell = {"dataset": dataset, "architecture": architecture, "defense": defense}
    return [rule for rule in config.get("overrides", [])
            if all(cell[k] == v for k, v in rule["when"].items())]


def training_params(config: Mapping[str, Any], dataset: str, architecture: str,
                    defense: str) -> dict[str, Any]:
    """Recipe of one cell: base recipe ← defense-level overrides ← per-cell overrides."""
    params = dict(config["training"])
    params.update(config["defenses"][defense].get("training", {}))
    for rule in _matching_overrides(config, dataset, architecture, defense):
        params.update(rule.get("training", {}))
    return params


def defense_params(config: Mapping[str, Any], defense: str,
                   cell: tuple[str, str] | None = None) -> dict[str, Any]:
    """Parameters of defense variant ``defense`` (its ``training`` recipe left out), updated
    key by key by the ``defense`` patch of every ``overrides`` entry matching ``cell`` =
    (dataset, architecture), in order; ``cell=None``: the variant as defined. Radii taken from
    the paper (AT-AT's, AT's) come out multiplied by ``epsilon_scale.factor``
    (:mod:`atat.plan.eps_scale`): the values the model trains with."""
    params = {k: v for k, v in config["defenses"][defense].items() if k != "training"}
    if cell is not None:
        for rule in _matching_overrides(config, cell[0], cell[1], defense):
            params.update(rule.get("defense", {}))
    return eps_scale.scaled_defense_params(config, params)   # radii: factor x the paper's


def eps_tag(eps: float) -> str:
    """Canonical text of an epsilon in paths and column names (0.031, 0.0025, 1e-05)."""
    return format(float(eps), "g")


def unique(items: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
