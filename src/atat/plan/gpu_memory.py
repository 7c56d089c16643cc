"""GPU memory of every GPU job of the workflow, planned like its runtime (torch-free: the
workflow reads it when it builds the DAG, to request a card that holds each job and to refuse,
before any job, a config whose jobs fit no card of the cluster's ``gpu_cards``).

A job's peak is its networks' weights and optimizer state plus, per image of its batch, the
tensors alive at the peak of its pass. The per-image figures are counted, not guessed:
:mod:`atat.lab.gpu_memory_table` runs each network's passes on the CPU at small batches and
records the live tensor bytes per image (:data:`NETWORKS`; the same tensors a GPU allocates
for the same code). A GPU adds cuDNN workspaces and the caching allocator's rounding (x
:data:`~atat.plan.inversion_resources.ALLOCATOR_FACTOR`) and the CUDA context
(:data:`~atat.plan.inversion_resources.CUDA_CONTEXT_GIB`), as for the inversion jobs
(:mod:`atat.plan.inversion_resources`, reused for rules invert and invert_shard).

Per rule (fp32 throughout: the paper config's precision; the opt-in ``training.autocast: bf16``
lowers training's activations, which this upper bound ignores):

* **train_model**: weights, gradients and Adam's two moments (4 x the parameters, x the
  defense's parameter factor) plus the larger of Adam's multi-tensor step temporaries and
  ``batch_size`` x the training pass per image x the defense's per-image factor
  (:data:`DEFENSE_FACTORS`: AT-AT's clean and perturbed forward graphs, Trap-MID's
  discriminator and trigger-injected half batch, MID's bottleneck, BiDO's HSIC terms);
* **autoattack**: weights plus ``autoattack.batch_size`` x (the input-gradient pass + the
  attack's own image-sized state, :data:`AUTOATTACK_STATE_IMAGES` copies of the input);
* **measure_hsic**: weights plus the training batch size x the HSIC pass (the four stages'
  features and the float64 kernels);
* **train_evaluation_model**: Inception-v3 (aux head from 150 px) as train_model, NoDef;
* **real_embeddings**: the scorers' weights, batches of :data:`EMBED_BATCH` without gradient
  and the features of every private training image (kept on the device, concatenated once);
* **invert**, **invert_shard**: :func:`atat.plan.inversion_resources.gpu_memory_mb` (a merging
  invert job: 0, it runs on a CPU).

A network/resolution not in the table is scaled from the same network's nearest measured
resolution by the pixel count (a convolutional network's activations); a network not in the
table at all is a ValueError naming it and the command that measures it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from atat.plan.inversion_resources import ALLOCATOR_FACTOR, CUDA_CONTEXT_GIB
from atat.training.defense_defaults import PGD_DEFENSE_DEFAULTS
from atat.plan.inversion_resources import gpu_memory_mb as _inversion_mb

__all__ = ["AUTOATTACK_STATE_IMAGES", "DEFENSE_FACTORS", "DEFENSE_PROBE", "EMBED_BATCH",
           "NETWORKS", "NetworkMemory", "autoattack_bytes", "defense_factors", "describe_job",
           "evaluation_bytes",
           "gpu_mb", "hsic_bytes", "inversion_job_mb", "job_gpu_mem_mb", "network",
           "real_embeddings_bytes", "train_bytes"]

GIB = 1024 ** 3
FLOAT = 4   # bytes of a float32


@dataclasses.dataclass(frozen=True)
class NetworkMemory:
    """One network at one input resolution: parameters without the classifier head, the
    feature width before it, and bytes per image at the peak of each pass (None: the
    workflow never runs that pass on it)."""

    params: int
    feature_dim: int
    no_grad: int
    train: int | None = None
    input_grad: int | None = None
    hidden: int | None = None

    def scaled(self, factor: float) -> "NetworkMemory":
        per_image = {f: (None if getattr(self, f) is None else round(getattr(self, f) * factor))
                     for f in ("no_grad", "train", "input_grad", "hidden")}
        return dataclasses.replace(self, **per_image)


#: Counted 2026-12-06 on the CPU (2 vCPUs Intel Xeon, torch 2.14.1, float32) with
#: ``python -m atat.lab.gpu_memory_table``: live tensor bytes per image of each pass (the slope
#: of the peak between batches that agree within 3%); docs/measurements.md has the command and
#: the cross-check against the process's RSS.
NETWORKS: dict[tuple[str, int], NetworkMemory] = {
    # the paper's target architectures at 224 px
    ("resnet18", 224): NetworkMemory(params=11176512, feature_dim=512, no_grad=6422528,
                                     train=21676072, input_grad=22378536, hidden=6422528),
    ("resnet152", 224): NetworkMemory(params=58143808, feature_dim=2048, no_grad=10436608,
                                      train=176473128, input_grad=178225192, hidden=18866416),
    ("densenet169", 224): NetworkMemory(params=12484480, feature_dim=1664, no_grad=10035200,
                                        train=157351976, input_grad=157954088, hidden=18991856),
    # the scorers: the evaluation model (with its aux head) at 299 px, FaceNet at 160 px
    ("inception_v3", 299): NetworkMemory(params=25112264, feature_dim=2048, no_grad=13829760,
                                         train=98004080, input_grad=99163732),
    ("facenet", 160): NetworkMemory(params=23482624, feature_dim=512, no_grad=3794560),
    # the embedded default's networks (32 px; its evaluation model at 80 px, no aux head)
    ("resnet10", 32): NetworkMemory(params=4905792, feature_dim=512, no_grad=131072,
                                    train=319528, input_grad=333864, hidden=131072),
    ("densenet47", 32): NetworkMemory(params=1417712, feature_dim=424, no_grad=131072,
                                      train=694632, input_grad=710952, hidden=181392),
    ("resnet18", 32): NetworkMemory(params=11176512, feature_dim=512, no_grad=131072,
                                    train=442408, input_grad=456744, hidden=131072),
    ("inception_v3", 80): NetworkMemory(params=21785568, feature_dim=2048, no_grad=876160,
                                        train=4290856, input_grad=4383272),
}

#: the network the defenses' factors are counted on
DEFENSE_PROBE = ("resnet18", 64)
#: defense type -> (per-image factor, parameter factor) of one training step against NoDef's,
#: on DEFENSE_PROBE (``python -m atat.lab.gpu_memory_table --defenses``; default parameters)
DEFENSE_FACTORS: dict[str, tuple[float, float]] = {
    "atat": (1.95, 1.00),        # the clean and the perturbed forward graph
    "at": (1.03, 1.00),          # weight_clean 0 (AT's default): the perturbed graph only
    "mid": (1.00, 1.02),         # the bottleneck head
    "bido": (1.06, 1.00),        # the HSIC terms of the four stages
    "tldmi": (0.30, 1.00),       # frozen layers keep no activations (ResNet-18; 1.0 is used)
    "negls": (1.00, 1.00),
    "rolss": (0.99, 1.00),
    "rolss_ssf": (1.00, 1.00),
    "trap_mid": (2.08, 2.00),    # the trigger-injected half batch, the discriminator
    "pixel_mask": (1.03, 1.00),  # the input mask (stage group_lasso counted)
}
#: AT and AT-AT without a clean term (weight_clean 0; AT's default,
#: atat.training.defense_defaults) run one forward graph per step: AT's counted factor
ONE_GRAPH_WHEN_NO_CLEAN_TERM = ("at", "atat")
#: peak of Adam's multi-tensor step (torch's default on a GPU) over the parameters' bytes,
#: counted on ResNet-18 with its moments and gradients in place
ADAM_STEP_FACTOR = 1.0
#: images of AutoAttack's own state per attacked image (its running, best and previous
#: iterates, gradients and momentum in APGD; FAB's projections), in copies of the input:
#: counted 34.9 on ResNet-10 at 32 px, 24.8 on ResNet-18 at 64 px (the larger kept)
AUTOATTACK_STATE_IMAGES = 35
#: the scorers' batch in rule real_embeddings (atat.inversion.metrics.Evaluator's default)
EMBED_BATCH = 64


def network(name: str, res: int) -> NetworkMemory:
    """The table's entry of ``name`` at ``res`` px, or the nearest measured resolution's
    scaled by the pixel count (module doc)."""
    res = int(res)
    if (name, res) in NETWORKS:
        return NETWORKS[(name, res)]
    known = sorted(r for n, r in NETWORKS if n == name)
    if not known:
        raise ValueError(
            f"no GPU memory figure for network {name!r} (measured: "
            f"{', '.join(sorted({n for n, _ in NETWORKS}))}); count it with `python -m "
            f"atat.lab.gpu_memory_table --only {name}@{res}` and add the row to "
            f"atat.plan.gpu_memory.NETWORKS")
    nearest = min(known, key=lambda r: (abs(math.log(r / res)), r))
    return NETWORKS[(name, nearest)].scaled((res / nearest) ** 2)


def gpu_mb(tensor_bytes: float) -> int:
    """GPU memory to request for ``tensor_bytes`` of live tensors: x ALLOCATOR_FACTOR + the
    CUDA context, in MiB rounded up to 1000 (as atat.plan.inversion_resources.gpu_memory_mb)."""
    gib = ALLOCATOR_FACTOR * tensor_bytes / GIB + CUDA_CONTEXT_GIB
    return int(math.ceil(gib * 1024 / 1000.0) * 1000)


def _head_params(feature_dim: int, n_classes: int, defense_type: str,
                 params: Mapping[str, Any]) -> int:
    if defense_type == "mid":   # VIB head: features -> 2k (mu, sigma), k -> classes
        k = params.get("bottleneck_dim") or feature_dim // 2
        return feature_dim * 2 * k + 2 * k + k * n_classes + n_classes
    return feature_dim * n_classes + n_classes


def defense_factors(defense_type: str, params: Mapping[str, Any] | None = None
                    ) -> tuple[float, float]:
    """(per-image factor, parameter factor) of a defense type's training step (module doc)."""
    params = params or {}
    act, fixed = DEFENSE_FACTORS.get(defense_type, (1.0, 1.0))
    if defense_type in ONE_GRAPH_WHEN_NO_CLEAN_TERM and not float(
            params.get("weight_clean", PGD_DEFENSE_DEFAULTS[defense_type]["weight_clean"])):
        act = DEFENSE_FACTORS["at"][0]   # AT's default step: the perturbed graph only
    # never below NoDef's: a factor counted on ResNet-18 (TL-DMI's frozen share) need not hold
    # on another network
    return max(act, 1.0), max(fixed, 1.0)


def train_bytes(arch: str, res: int, *, batch_size: int, n_classes: int,
                defense_type: str = "nodef", defense_params: Mapping[str, Any] | None = None,
                eval_batch_size: int | None = None) -> float:
    """Live tensors at the peak of one training job (module doc)."""
    net = network(arch, res)
    if net.train is None:
        raise ValueError(f"no training figure for {arch!r}")
    act, param_factor = defense_factors(defense_type, defense_params)
    weights = FLOAT * (net.params * param_factor + _head_params(
        net.feature_dim, n_classes, defense_type, defense_params or {}))
    if defense_type == "trap_mid":   # one trigger per class at the input resolution
        weights += FLOAT * n_classes * 3 * int(res) ** 2
    per_step = max(int(batch_size) * net.train * act, ADAM_STEP_FACTOR * weights)
    evaluation = int(eval_batch_size or 0) * net.no_grad
    # weights, gradients and Adam's two moments, then the step's largest phase
    return 4 * weights + max(per_step, evaluation)


def autoattack_bytes(arch: str, res: int, *, batch_size: int, n_classes: int) -> float:
    """Live tensors at the peak of one AutoAttack job (module doc)."""
    net = network(arch, res)
    state = AUTOATTACK_STATE_IMAGES * 3 * int(res) ** 2 * FLOAT
    weights = FLOAT * (net.params + _head_params(net.feature_dim, n_classes, "nodef", {}))
    return weights + int(batch_size) * (net.input_grad + state)


def hsic_bytes(arch: str, res: int, *, batch_size: int, n_classes: int) -> float:
    """Live tensors at the peak of one HSIC measurement (module doc)."""
    net = network(arch, res)
    if net.hidden is None:
        raise ValueError(f"no HSIC figure for {arch!r}")
    weights = FLOAT * (net.params + _head_params(net.feature_dim, n_classes, "nodef", {}))
    return weights + int(batch_size) * net.hidden


def evaluation_bytes(arch: str, res: int, *, batch_size: int, n_classes: int) -> float:
    """Live tensors at the peak of training the evaluation model (module doc)."""
    return train_bytes(arch, res, batch_size=batch_size, n_classes=n_classes)


def real_embeddings_bytes(evaluation: tuple[str, int], face: tuple[str, int] | None, *,
                          n_images: int, n_classes: int) -> float:
    """Live tensors at the peak of rule real_embeddings (module doc)."""
    nets = [network(*evaluation)] + ([network(*face)] if face else [])
    weights = FLOAT * sum(n.params for n in nets)
    weights += FLOAT * _head_params(nets[0].feature_dim, n_classes, "nodef", {})
    features = 2 * int(n_images) * FLOAT * sum(n.feature_dim for n in nets)
    return weights + EMBED_BATCH * sum(n.no_grad for n in nets) + features


# ---- the config's jobs -------------------------------------------------------------------------

def _render_batch(attack: str, p: Mapping[str, Any]) -> int:
    bs, cand = int(p["batch_size"]), int(p["candidates"]["batch_size"])
    render = {"ppa": max(cand, bs), "ifgmi": cand, "ppdg": max(cand, 2 * bs)}[attack]
    return max(render, 20)   # the final selection renders 20 at a time


def inversion_job_mb(config: Mapping[str, Any], dataset: str, arch: str, defense: str,
                     attack: str) -> int:
    """GPU memory of one attacking inversion job (atat.plan.inversion_resources): the
    optimisation batch with gradients, PPDG's generator tuning on num_inv_points pivots, the
    largest batch rendered without gradient."""
    from atat.plan.config import inversion_params
    from atat.plan.job_cost import generator_network

    p = inversion_params(config, dataset, arch, defense, attack)
    return _inversion_mb(
        attack, resolution=generator_network(config, config["datasets"][dataset]["generator"])[1],
        batch_size=int(p["batch_size"]), architecture=arch,
        input_resolution=int(p["input_resolution"]), render_batch_size=_render_batch(attack, p),
        n_points=int(p.get("num_inv_points", 1)), measure=p.get("measure", "pointwise"))


def job_gpu_mem_mb(rule: str, wc: Mapping[str, Any], config: Mapping[str, Any]) -> int | None:
    """GPU memory (MiB, rounded up to 1000) of the job of ``rule`` with wildcards ``wc``; 0 for
    a rule invert job that merges its shards' parts; None for a rule without a memory model
    (train_generator, the embedded default's small prior). pretrain_backbone (the embedded
    default's pretraining) is priced as a training job of its backbone."""
    from atat.plan.config import defense_params, n_classes, training_params
    from atat.plan.job_cost import _scorers, class_shards, dataset_images

    if rule in ("invert", "invert_shard"):
        ds, arch, defense, attack = wc["dataset"], wc["arch"], wc["defense"], wc["attack"]
        if rule == "invert" and len(class_shards(config, ds, arch, defense, attack)) > 1:
            return 0
        return inversion_job_mb(config, ds, arch, defense, attack)
    if rule in ("train_model", "autoattack", "measure_hsic"):
        ds, arch, defense = wc["dataset"], wc["arch"], wc["defense"]
        res, k = int(config["datasets"][ds]["resolution"]), n_classes(config, ds)
        t = training_params(config, ds, arch, defense)
        if rule == "train_model":
            dp = defense_params(config, defense, (ds, arch))
            return gpu_mb(train_bytes(arch, res, batch_size=int(t["batch_size"]), n_classes=k,
                                      defense_type=str(config["defenses"][defense]["type"]),
                                      defense_params=dp,
                                      eval_batch_size=int(t.get("eval_batch_size") or 0)))
        if rule == "autoattack":
            return gpu_mb(autoattack_bytes(arch, res, n_classes=k,
                                           batch_size=int(config["autoattack"]["batch_size"])))
        return gpu_mb(hsic_bytes(arch, res, batch_size=int(t["batch_size"]), n_classes=k))
    if rule == "train_evaluation_model":
        ds, ev = wc["dataset"], config["evaluation_model"]
        return gpu_mb(evaluation_bytes(str(ev.get("architecture", "inception_v3")),
                                       int(ev["resolution"]), n_classes=n_classes(config, ds),
                                       batch_size=int(ev["training"]["batch_size"])))
    if rule == "pretrain_backbone":   # a classifier of the population's identities
        from atat.plan.config import pretraining_backbones

        arch, res = str(wc["backbone"]), int(wc["res"])
        entry = pretraining_backbones(config)[(arch, res)]
        return gpu_mb(train_bytes(arch, res, batch_size=int(entry["training"]["batch_size"]),
                                  n_classes=int(config["pretraining"]["population"]["identities"])))
    if rule == "real_embeddings":
        ds = wc["dataset"]
        evaluation, face = _scorers(config, ds)
        return gpu_mb(real_embeddings_bytes(evaluation, face, n_images=dataset_images(config, ds)[0],
                                            n_classes=n_classes(config, ds)))
    return None


def describe_job(rule: str, wc: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[str, str]:
    """(shape, remedy) of a job for the message that names jobs fitting no card: what its
    memory depends on, and the config keys that lower it."""
    from atat.plan.config import inversion_params, training_params

    if rule in ("invert", "invert_shard"):
        a = wc["attack"]
        p = inversion_params(config, wc["dataset"], wc["arch"], wc["defense"], a)
        extra = f", {p.get('num_inv_points', 1)} tuning points" if a == "ppdg" else ""
        return (f"{a} on {wc['arch']} at {p['input_resolution']} px, batch {p['batch_size']}, "
                f"candidates batch {p['candidates']['batch_size']}{extra}",
                f"a smaller inversion.{a}.batch_size or inversion.{a}.candidates.batch_size"
                + (f" (or inversion.{a}.num_inv_points)" if a == "ppdg" else ""))
    if rule in ("train_model", "measure_hsic"):
        t = training_params(config, wc["dataset"], wc["arch"], wc["defense"])
        res = config["datasets"][wc["dataset"]]["resolution"]
        defense = config["defenses"][wc["defense"]]["type"] if rule == "train_model" else None
        return (f"{wc['arch']} at {res} px, batch {t['batch_size']}"
                + (f", defense {defense}" if defense else ""),
                "a smaller training.batch_size (or the defense's/cell's training override)")
    if rule == "autoattack":
        res = config["datasets"][wc["dataset"]]["resolution"]
        return (f"{wc['arch']} at {res} px, batch {config['autoattack']['batch_size']}",
                "a smaller autoattack.batch_size")
    if rule == "train_evaluation_model":
        ev = config["evaluation_model"]
        return (f"{ev.get('architecture', 'inception_v3')} at {ev['resolution']} px, batch "
                f"{ev['training']['batch_size']}", "a smaller evaluation_model.training.batch_size")
    if rule == "pretrain_backbone":
        return (f"{wc['backbone']} at {wc['res']} px (pretraining)",
                f"a smaller pretraining.training.batch_size (or pretraining.backbones."
                f"{wc['backbone']}.batch_size)")
    return rule, "a larger card"
