# Config validation, grid expansion, input functions and wildcard constraints.
# Everything here runs when the DAG is built, before any job.

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from atat.config import (  # noqa: E402
    ConfigError,
    eps_tag,
    model_runs,
    training_params,
)
from atat.config import n_classes as _n_classes  # noqa: E402
from atat.report import inversion_attacks  # noqa: E402
from atat.config_memo import validate_config_once  # noqa: E402
from atat.weights_table import (  # noqa: E402
    torchvision_weights_filename,
    torchvision_weights_url,
)

# The full check imports torch (defense parameters); it is skipped when this exact config
# and code passed before (marker under .snakemake/, see atat.config_memo).
try:
    validate_config_once(config, ".snakemake/atat-validated-configs")
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

RES = config["resources_dir"]
RUNS = model_runs(config)
EPS = {eps_tag(e): float(e) for e in config["autoattack"]["epsilons"]}
INV_ATTACKS = inversion_attacks(config)
SYNTH = [n for n, d in config["datasets"].items() if d["source"] == "synthfaces"]
REAL = [n for n, d in config["datasets"].items() if d["source"] != "synthfaces"]


def _alt(names):
    return "|".join(sorted(names)) if names else "(?!x)x"


wildcard_constraints:
    dataset=_alt(config["datasets"]),
    arch=_alt(config["architectures"]),
    defense=_alt(config["defenses"]),
    seed=r"\d+",
    eps=_alt(re.escape(e) for e in EPS),


def dataset_dir(dataset):
    return f"{RES}/datasets/{dataset}"


def dataset_resolution(dataset):
    return config["datasets"][dataset]["resolution"]


def n_classes(dataset):
    return _n_classes(config, dataset)


def weights_path(wildcards):
    """ImageNet weights file of this cell, or None when training from scratch."""
    params = training_params(config, wildcards.dataset, wildcards.arch, wildcards.defense)
    if not params["pretrained"]:
        return None
    weights = config["architectures"][wildcards.arch].get("weights", "IMAGENET1K_V1")
    return f"{RES}/weights/torchvision/{torchvision_weights_filename(wildcards.arch, weights)}"


def prior_model(wildcards):
    """Model file of the previous stage a defense builds on (Unseen-Pixels mask stages)."""
    prior = config["defenses"][wildcards.defense].get("prior")
    if not prior:
        return None
    return f"results/models/{wildcards.dataset}/{wildcards.arch}/{prior}/seed{wildcards.seed}/model.pt"


def stop_reference(wildcards):
    """metrics.json of the model whose val_acc an early-stopped variant stops at, when its
    training.stop_at_val_acc names a variant (paper Table 3 baseline), else None."""
    ref = training_params(config, wildcards.dataset, wildcards.arch, wildcards.defense).get(
        "stop_at_val_acc")
    if not isinstance(ref, str):
        return None
    return f"results/models/{wildcards.dataset}/{wildcards.arch}/{ref}/seed{wildcards.seed}/metrics.json"


def train_inputs(wildcards):
    inputs = {"dataset": dataset_dir(wildcards.dataset)}
    if prior_model(wildcards):
        inputs["prior_model"] = prior_model(wildcards)
    if stop_reference(wildcards):
        inputs["stop_reference"] = stop_reference(wildcards)
    weights = weights_path(wildcards)
    if weights:
        inputs["weights"] = weights
    return inputs


def train_spec(wildcards):
    """Everything that determines the model, handed to atat.train.TrainSpec."""
    ds = wildcards.dataset
    spec = dict(
        model_id=f"{ds}/{wildcards.arch}/{wildcards.defense}/seed{wildcards.seed}",
        dataset_root=f"{dataset_dir(ds)}/private",
        resolution=dataset_resolution(ds),
        n_classes=n_classes(ds),
        architecture=wildcards.arch,
        defense=defense_variant(wildcards),
        training=training_params(config, ds, wildcards.arch, wildcards.defense),
        augmentation=config["augmentation"],
        seed=int(wildcards.seed),
        weights_path=weights_path(wildcards),
    )
    if stop_reference(wildcards):  # only then: the params of every other model stay as they were
        spec["stop_reference_metrics"] = stop_reference(wildcards)
    return spec


def defense_variant(wildcards):
    variant = {k: v for k, v in config["defenses"][wildcards.defense].items() if k != "training"}
    if prior_model(wildcards):
        variant["prior_model"] = prior_model(wildcards)
    return variant


def model_dir(run):
    return f"results/models/{run.path}"


def summary_models(wildcards):
    """What rule summary reads: per model its metrics and one AutoAttack file per epsilon."""
    return [
        dict(
            dataset=r.dataset,
            architecture=r.architecture,
            defense=r.defense,
            defense_type=config["defenses"][r.defense]["type"],
            seed=r.seed,
            replicate=r.replicate,
            treatment=r.treatment,
            metrics=f"{model_dir(r)}/metrics.json",
            robustness={e: f"results/robustness/{r.path}/eps{e}.json" for e in EPS},
            inversion={a: f"results/inversion/{r.path}/{a}/metrics.json" for a in INV_ATTACKS},
        )
        for r in RUNS
    ]


def summary_inputs(wildcards):
    files = []
    for m in summary_models(wildcards):
        files.append(m["metrics"])
        files.extend(m["robustness"].values())
        files.extend(m["inversion"].values())
    return files


def table4_architecture():
    arch = config.get("tables", {}).get("table4_architecture", "resnet152")
    return arch if any(r.architecture == arch for r in RUNS) else None


# Each stage's rules file appends a function returning the final targets it can build for the
# current config (only what exists: a table whose inputs the config lacks is not a target).
TARGET_FUNCTIONS = []


def all_targets():
    targets = []
    for fn in TARGET_FUNCTIONS:
        targets.extend(t for t in fn() if t not in targets)
    return targets


def torchvision_weight_urls():
    """File name -> URL of every ImageNet weight file the config can ask for: the target
    architectures, the evaluation model (Inception-v3, spec attacks §5.2) and VGG16 (the
    feature network of VGG16-LPIPS, spec attacks §4.2). From the static table of
    atat.weights_table: importing torchvision here would cost every dry run ~5 s."""
    wanted = [(arch, spec.get("weights", "IMAGENET1K_V1"))
              for arch, spec in config["architectures"].items()]
    ev = config.get("evaluation_model") or {}
    if ev.get("pretrained"):
        wanted.append((ev.get("architecture", "inception_v3"), ev.get("weights", "IMAGENET1K_V1")))
    if config.get("inversion"):
        wanted.append(("vgg16", "IMAGENET1K_V1"))
    try:
        urls = [torchvision_weights_url(arch, weights) for arch, weights in wanted]
    except ValueError as exc:
        raise WorkflowError(f"invalid configuration: {exc}") from None
    return {Path(url).name: url for url in urls}
