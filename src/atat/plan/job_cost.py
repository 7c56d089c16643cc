"""Cost model of the workflow's jobs (issue 43 items 3-4). Torch-free: the workflow imports it
at DAG time to request each GPU job's runtime and to refuse a job longer than the cluster's
partition allows; ``atat.lab.forecast`` prints the campaign from the same functions.

A job's work is a list of :class:`Pass` -- images (or optimiser steps) through one network at
one resolution, forward only (``fwd``) or forward and backward (``fb``) -- plus a fixed cost
per job (process start, imports). Work comes from the config alone (epochs x images x
architecture for training; images x attack iterations per epsilon for AutoAttack; classes x
candidates x steps x (generator + target) for the inversion attacks). A device turns work into
seconds:

* **GPU** (:class:`GpuRates`): forward multiply-accumulates per image (:data:`GMAC`, counted
  with ``torch.utils.flop_counter`` on this project's networks, 2026-12-06) x 2 FLOP x 3 for
  forward+backward, over an effective FLOP/s per precision. Defaults are estimates for an
  A100 (docs/sources.md#gpu-throughput-of-the-cost-model); ``make bench-gpu`` measurements replace them
  (``atat.lab.forecast``).
* **CPU** (:class:`CpuRates`): measured CPU seconds per image (or per step) of each network at
  its shape, timed in one thread by ``python -m atat.lab.forecast calibrate`` (``make bench``).

Every count is an upper bound where the job may stop early (AutoAttack's images that an attack
already broke, ``stop_at_val_acc``): a runtime request must not be short. AutoAttack's work
expected for a model whose clean and robust accuracy a finished run recorded is
:func:`autoattack_cost` with ``records`` (``python -m atat.lab.forecast --run DIR``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["Pass", "JobCost", "GpuRates", "CpuRates", "GMAC", "stylegan_key",
           "train_cost", "autoattack_cost", "autoattack_work", "autoattack_settings",
           "autoattack_epsilons", "hsic_cost", "inversion_cost",
           "evaluation_model_cost", "public_classifier_cost", "generator_cost",
           "real_embeddings_cost", "prior_quality_cost", "knn_pairs", "public_heldout",
           "FEATURE_DIM", "synthfaces_cost", "pretrain_cost", "fixed_cost",
           "split_sizes", "inversion_class_count", "class_shards", "runtime_request_min",
           "parse_gpu_cards", "pick_gpu_card", "RuntimeLimitError", "check_runtime_limit",
           "GPU_RULES"]

#: rules whose jobs run on a GPU under the SLURM profile (the rules declaring ``gpu=1``)
GPU_RULES = ("train_model", "autoattack", "measure_hsic", "invert", "invert_shard",
             "train_evaluation_model", "pretrain_backbone",
             "real_embeddings", "train_generator")

#: forward multiply-accumulates per image (GMAC) at the given resolution, counted with
#: torch.utils.flop_counter (FLOPs / 2) on this project's networks (atat.training.models.build_model,
#: torchvision Inception-v3 / VGG16, facenet-pytorch InceptionResnetV1, atat.inversion.stylegan2
#: Generator incl. mapping) on 2026-12-06. Other resolutions scale with (r / r0)^2.
GMAC: dict[str, tuple[float, int]] = {
    "resnet18": (1.8136, 224), "resnet152": (11.5116, 224), "densenet169": (3.3582, 224),
    "resnet10": (0.8887, 224), "densenet47": (0.7007, 224),
    "inception_v3": (5.7132, 299), "vgg16": (15.3466, 224), "facenet": (1.4177, 160),
    # StyleGAN2 with FFHQ's architecture (channel_base 32768, channel_max 512): the whole
    # generator at its full resolution (no (r/r0)^2 scaling: the architecture changes with r)
    "stylegan2/32768/512@1024": (75.3852, 1024), "stylegan2/32768/512@512": (60.2018, 512),
}


def stylegan_key(resolution: int, channel_base: int = 32768, channel_max: int = 512) -> str:
    """Network key of a StyleGAN2 generator (its MACs depend on the whole architecture)."""
    return f"stylegan2/{int(channel_base)}/{int(channel_max)}@{int(resolution)}"


@dataclasses.dataclass(frozen=True)
class Pass:
    """``count`` images (or steps, kind ``step``) through ``network`` at ``resolution``."""

    network: str
    resolution: int
    kind: str            # fwd | fb | step
    count: float
    #: fp32 (TF32 off) | tf32 (PyTorch's cuDNN default) | bf16 (training.autocast: bf16)
    precision: str = "fp32"


@dataclasses.dataclass(frozen=True)
class JobCost:
    """Work of one job: its passes and a fixed part (process start and imports)."""

    rule: str
    name: str
    passes: tuple[Pass, ...]
    gpu: bool
    gpu_mem_mb: int | None = None
    #: data-loader worker processes doing the host work (kind ``image``) beside the GPU; 0:
    #: the job's own process does it between the GPU's steps
    host_workers: int = 0


# ---- devices ---------------------------------------------------------------------------------

#: CPU seconds per image of the host work of a GPU job, one core: decoding a dataset image
#: (``jpeg@<res>``: a natural photograph, 224 / 299 px, JPEG quality 90, to RGB) and the
#: training transform of a decoded image (``augment@<res>``: the paper config's random resized
#: crop, flip and colour jitter, atat.data.loading.build_transform). Timed on 2026-12-06 on
#: this project's host (2 vCPUs of an Intel Xeon, shared: load 4.6-4.8) by ``python -m
#: atat.lab.forecast calibrate --only host``, the median of three runs (jpeg@224 0.34-0.45 ms,
#: augment@224 3.75-3.78 ms, jpeg@299 0.43-0.58 ms, augment@299 5.7-6.0 ms); its CSV
#: (results/bench/forecast_host.csv) replaces them in the forecast. A cluster node's cores
#: differ, and a source image larger than the network's input decodes slower (its pixels).
HOST_CPU_S: dict[str, float] = {
    "jpeg@224/image": 0.000435, "augment@224/image": 0.00375,
    "jpeg@299/image": 0.000460, "augment@299/image": 0.00591,
}


def host_unit_seconds(per_unit: Mapping[str, float], key: str) -> float:
    """CPU seconds of host unit ``key`` (``<unit>@<res>/image``): measured, else the same unit
    measured at the nearest resolution scaled by the pixel count."""
    if key in per_unit:
        return per_unit[key]
    unit, rest = key.split("@", 1)
    res = int(rest.split("/", 1)[0])
    known = [(int(k.split("@", 1)[1].split("/", 1)[0]), v) for k, v in per_unit.items()
             if k.startswith(f"{unit}@") and k.endswith("/image")]
    if not known:
        raise KeyError(f"no host rate for {key} (python -m atat.lab.forecast calibrate --only "
                       f"host measures them)")
    r0, v = min(known, key=lambda rv: abs(rv[0] - res))
    return v * (res / r0) ** 2


@dataclasses.dataclass(frozen=True)
class GpuRates:
    """Effective FLOP/s per precision, the host's CPU seconds per image of the data loading
    (:data:`HOST_CPU_S`) and a fixed start-up cost per job (docs/forecast.md)."""

    flops: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {"fp32": 12e12, "tf32": 23e12})
    job_overhead_s: float = 60.0
    name: str = "A100 (estimated)"
    host: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(HOST_CPU_S))

    def pass_seconds(self, p: Pass) -> float:
        """GPU seconds of pass ``p``: its FLOPs over the rate of its precision (``<precision>/
        generator`` for a StyleGAN2 network where measured; ``bf16`` without a measured rate at
        the TF32 rate, an upper bound). Host work (kind ``image``) takes no GPU time: see
        :meth:`seconds`."""
        if p.kind == "image":
            return 0.0
        if p.kind == "step":
            raise ValueError(f"no GPU figure for optimiser steps of {p.network!r}")
        gmac = network_gmac(p.network, p.resolution)
        key = p.precision if p.precision in self.flops or p.precision != "bf16" else "tf32"
        if p.network.startswith("stylegan2/") and f"{key}/generator" in self.flops:
            key = f"{key}/generator"
        return p.count * gmac * 1e9 * 2 * (3 if p.kind == "fb" else 1) / self.flops[key]

    def host_seconds(self, job: JobCost) -> float:
        """CPU seconds of the job's host work (its passes of kind ``image``), one core."""
        return sum(p.count * host_unit_seconds(self.host, f"{p.network}@{p.resolution}/image")
                   for p in job.passes if p.kind == "image")

    def seconds(self, job: JobCost, cpus: int | None = None) -> float:
        """The fixed part plus the slower of the GPU's passes and the host work spread over
        the job's data-loader workers (at most ``cpus``, the cores the job gets: the
        profile's ``cpus_per_gpu``); with no workers the host work adds to the GPU time."""
        gpu = sum(self.pass_seconds(p) for p in job.passes)
        if not any(p.kind == "image" for p in job.passes):
            return self.job_overhead_s + gpu
        host = self.host_seconds(job)
        workers = min(job.host_workers, cpus) if cpus else job.host_workers
        return self.job_overhead_s + (max(gpu, host / workers) if workers > 0 else gpu + host)


@dataclasses.dataclass(frozen=True)
class CpuRates:
    """Measured CPU seconds per image (per step for ``step``), keyed ``network@res/kind``, and
    the fixed CPU seconds of a job (a fresh process importing torch and the package)."""

    per_unit: Mapping[str, float]
    job_overhead_s: float
    name: str = "CPU, one thread"
    #: a rule's own fixed part where measured (its script's imports), else job_overhead_s
    rule_overhead_s: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def unit_key(self, p: Pass) -> str:
        """The calibrated unit of pass ``p``: ``network@res/kind``; for a network at a batch of
        its own (``<network>/b<batch>``, :func:`pretrain_cost`) without a unit timed at that
        batch, the network's unit at the calibration's batch (per image an upper bound where
        the job's batch is larger: a CPU's per-image cost falls with the batch)."""
        key = f"{p.network}@{p.resolution}/{p.kind}"
        base, sep, batch = p.network.rpartition("/b")
        if key not in self.per_unit and sep and batch.isdigit() and "/" not in base:
            return f"{base}@{p.resolution}/{p.kind}"
        return key

    def pass_seconds(self, p: Pass) -> float:
        key = self.unit_key(p)
        if key not in self.per_unit:
            raise KeyError(f"no CPU calibration for {key} (python -m atat.lab.forecast "
                           f"calibrate measures the demo's networks)")
        return p.count * self.per_unit[key]

    def seconds(self, job: JobCost) -> float:
        fixed = self.rule_overhead_s.get(job.rule, self.job_overhead_s)
        return fixed + sum(self.pass_seconds(p) for p in job.passes)


def stylegan_synthesis_gmac(resolution: int, channel_base: int, channel_max: int) -> float:
    """Forward GMAC of a StyleGAN2 synthesis network per image, from its convolutions: per
    block at resolution r (8 .. ``resolution``) a 3x3 up-convolution computed at r/2 and a 3x3
    convolution at r, plus the 4 px block's convolution (channels min(channel_base / r,
    channel_max)); within 5% of :data:`GMAC`'s counts of the FFHQ and AFHQ architectures."""
    ch = lambda r: min(channel_base // r, channel_max)  # noqa: E731
    macs = 16 * ch(4) * ch(4) * 9
    r = 8
    while r <= resolution:
        macs += (r // 2) ** 2 * ch(r // 2) * ch(r) * 9 + r * r * ch(r) * ch(r) * 9
        r *= 2
    return macs / 1e9


def network_gmac(network: str, resolution: int) -> float:
    """Forward GMAC per image of ``network`` at ``resolution`` (:data:`GMAC`)."""
    if network.startswith("stylegan2/"):
        key = network if "@" in network else f"{network}@{resolution}"
        if key in GMAC:
            return GMAC[key][0]
        _, cb, cm_res = key.split("/")[:3]
        cm, res = cm_res.split("@")
        return stylegan_synthesis_gmac(int(res.split("/")[0]), int(cb), int(cm))
    base, sep, batch = network.rpartition("/b")
    if sep and batch.isdigit() and base in GMAC:   # a batch of its own (pretrain_cost)
        network = base
    if network not in GMAC:
        raise ValueError(f"no MAC count for network {network!r} (known: {', '.join(GMAC)})")
    g, r0 = GMAC[network]
    return g * (int(resolution) / r0) ** 2


# ---- work per rule -----------------------------------------------------------------------------

def split_sizes(n_images: int, extra_test: int = 0) -> tuple[int, int, int]:
    """(train, val, test) of a private pool of ``n_images``: 90/10 train/test, then 80/20
    train/val (the paper's split, atat.data); ``extra_test`` test-only images added."""
    test = int(round(0.1 * n_images))
    val = int(round(0.2 * (n_images - test)))
    return n_images - test - val, val, test + int(extra_test)


def training_passes(defense: Mapping[str, Any]) -> tuple[int, int]:
    """(PGD steps, loss forward+backward passes) per training image of a defense variant, as
    the defense trains: its values over the type's defaults
    (atat.training.defense_defaults, the defaults the defense itself declares). PGD steps are
    one forward+backward to the input each; the losses are the adversarial one and the clean
    one where ``weight_clean`` > 0 (vanilla AT skips it). Any other type: one loss pass."""
    from atat.training.defense_defaults import pgd_training_settings

    p = pgd_training_settings(defense)
    if p is None:
        return 0, 1
    return int(p["iterations"]), 1 + (float(p["weight_clean"]) > 0)


def training_precision(training: Mapping[str, Any]) -> str:
    """The precision a training step runs at (atat.base.precision): bf16 under
    ``training.autocast: bf16``, else PyTorch's default flags (cuDNN convolutions in TF32)."""
    return "bf16" if training.get("autocast") == "bf16" else "tf32"


def decoded_each_epoch(workers: int, n_images: int, resolution: int) -> bool:
    """Whether a loader decodes its images again every epoch: with worker processes (not
    persistent, atat.data.loading.make_loader: each epoch's workers start from an empty
    cache), or when the decoded split exceeds the in-memory cache
    (atat.data.manifest.DEFAULT_CACHE_MAX_BYTES, estimated at ``resolution``)."""
    from atat.data.manifest import DEFAULT_CACHE_MAX_BYTES

    return workers > 0 or n_images * int(resolution) ** 2 * 3 > DEFAULT_CACHE_MAX_BYTES


def test_passes(n_test: int, training: Mapping[str, Any]) -> int:
    """Test images a target model's job classifies after training (atat.training.train):
    the metrics' test pass, then test_predictions.csv's second clean pass over the whole
    split; with ``val_drop_last`` the metrics' pass skips the last partial batch
    (``eval_batch_size``) and the predictions' first pass runs over the whole split again."""
    n = int(n_test)
    if not n:
        return 0
    if not training.get("val_drop_last"):
        return 2 * n
    batch = int(training.get("eval_batch_size", training.get("batch_size", n)) or n)
    return n // batch * batch + 2 * n


def train_cost(name: str, *, architecture: str, resolution: int, n_train: int, n_val: int,
               n_test: int, training: Mapping[str, Any], defense: Mapping[str, Any],
               precision: str | None = None, rule: str = "train_model",
               image_format: str | None = None) -> JobCost:
    """One training job: per epoch and training image the defense's PGD steps (TF32 off,
    atat.base.precision, as pgd runs them) and its loss passes forward+backward, validation
    every ``eval_every`` epochs, the training-accuracy pass and the test passes
    (:func:`test_passes`; forward), and the host
    work of the loader's workers (``training.num_workers``): each epoch's training transform
    of every training image (``augment@<resolution>/image``) and, where the loader decodes
    its images again every epoch (:func:`decoded_each_epoch`), the decoding of every image it
    reads (``<image_format>@<resolution>/image``; ``image_format`` None: not counted). A split
    kept decoded in memory is decoded once, inside the job's fixed part. ``precision``: of
    the loss and evaluation passes, default :func:`training_precision`."""
    epochs = int(training["epochs"])
    every = max(1, int(training.get("eval_every", 1) or 1))
    workers = int(training.get("num_workers", 0) or 0)
    precision = precision or training_precision(training)
    steps, losses = training_passes(defense)
    per_epoch = epochs * n_train
    fwd = (epochs // every + 1) * n_val + n_train + test_passes(n_test, training)
    passes = [Pass(architecture, resolution, "fb", per_epoch * steps, "fp32")] if steps else []
    passes += [Pass(architecture, resolution, "fb", per_epoch * losses, precision),
               Pass(architecture, resolution, "fwd", fwd, precision),
               Pass("augment", resolution, "image", per_epoch)]
    if image_format and decoded_each_epoch(workers, n_train, resolution):
        passes.append(Pass(image_format, resolution, "image", per_epoch + fwd))
    return JobCost(rule, name, tuple(passes), gpu=True, host_workers=workers)


#: standard AutoAttack (Croce & Hein 2020, its ``standard`` version): iterations or queries,
#: target classes, per attack (atat.lab.bench_gpu.STANDARD_WORK)
AA_STANDARD = {"apgd-ce": (100, 1), "apgd-t": (100, 9), "fab-t": (100, 9), "square": (5000, 1)}

#: the config's ``autoattack.settings`` block, iteration key and target key of each attack
_AA_SETTINGS = {"apgd-ce": ("apgd", "n_iter", None), "apgd-dlr": ("apgd", "n_iter", None),
                "apgd-t": ("apgd_t", "n_iter", "n_target_classes"),
                "fab-t": ("fab", "n_iter", "n_target_classes"),
                "square": ("square", "n_queries", None)}
#: AutoAttack's sanity checks, run once per epsilon on the first batch (atat.robustness,
#: ``library_checks="once"``): check_randomized's 5 forwards, check_range_output's and
#: check_dynamic's one each (pyautoattack 0.2.0, checks.py)
AA_CHECK_FORWARDS = 7
#: within-attack survival (:func:`autoattack_work`): ``estimate`` (geometric), ``low`` (every
#: image an attack breaks leaves after its first target/query), ``high`` (none leaves before
#: the attack's end)
AA_SURVIVAL = ("estimate", "low", "high")


def autoattack_settings(autoattack: Mapping[str, Any], n_classes: int
                        ) -> dict[str, tuple[int, int, int]]:
    """(iterations or queries, target classes, restarts) of each configured attack as
    atat.robustness runs it: the standard version's values, ``version: custom`` overriding
    them from ``settings``; target classes clamped to ``n_classes - 1``, FAB-T's restarts
    forced to 1 (pyautoattack's run_standard_evaluation does)."""
    attacks = list(autoattack.get("attacks") or AA_STANDARD)
    s = (autoattack.get("settings") or {}) if autoattack.get("version", "standard") != "standard" \
        else {}
    out = {}
    for a in attacks:
        if a not in _AA_SETTINGS:
            raise ValueError(f"autoattack.attacks: no cost model for {a!r} (known: "
                             f"{', '.join(_AA_SETTINGS)})")
        block, it_key, t_key = _AA_SETTINGS[a]
        cfg = s.get(block) or {}
        it0, t0 = AA_STANDARD.get(a, AA_STANDARD["apgd-ce"])
        it = int(cfg.get(it_key, it0))
        t = min(int(cfg.get(t_key, t0)), int(n_classes) - 1) if t_key else 1
        restarts = 1 if a == "fab-t" else int(cfg.get("n_restarts", 1) or 1)
        out[a] = (it, max(t, 1), restarts)
    return out


def _survivors(start: float, end: float, k: int, steps: int, survival: str) -> float:
    """Images still robust at sub-run (target, restart or query) ``k`` of ``steps`` of one
    attack that starts on ``start`` images and ends with ``end`` robust."""
    if k == 0 or start <= 0 or survival == "high":
        return start
    if survival == "low":
        return end
    return start * (end / start) ** (k / steps)   # every sub-run breaks the same share


def _survivor_sum(start: float, end: float, first: int, count: int, steps: int,
                  survival: str) -> float:
    """``sum(_survivors(start, end, k, steps, survival) for k in range(first, first +
    count))`` in closed form (Square's 5,000 queries per restart: no loop per query)."""
    if count <= 0:
        return 0.0
    if start <= 0 or survival == "high" or end >= start:
        return start * count
    if survival == "low":
        return (start + end * (count - 1)) if first == 0 else end * count
    if end <= 0:   # every sub-run after the first breaks what is left
        return start if first == 0 else 0.0
    log_q = math.log(end / start) / steps          # the share left after one sub-run, as a log
    # start * q^first * (1 + q + ... + q^(count-1)), the sum as expm1 ratios (q close to 1)
    return start * math.exp(first * log_q) * math.expm1(count * log_q) / math.expm1(log_q)


def autoattack_work(autoattack: Mapping[str, Any], *, n_classes: int,
                    record: Mapping[str, Any] | None = None, survival: str = "estimate"
                    ) -> tuple[float, float]:
    """(forward+backward, forward) image passes of one epsilon of atat.robustness with
    pyautoattack 0.2.0, counted from the library's code: once per epsilon the class count (one
    image), the clean accuracy (every example) and the sanity checks (:data:`AA_CHECK_FORWARDS`
    on the first batch); per attack, run individually from the clean inputs, AutoAttack's own
    clean pass over every example, then on the images classified correctly (``A``) the attack's
    first forward and the check of its result, and

    * APGD (CE/DLR): ``n_iter`` + 1 forward+backward per restart (the initial gradient);
    * APGD-T: per target and restart one forward and ``n_iter`` + 1 forward+backward;
    * FAB-T: per target ``n_iter`` forward+backward and ``n_iter`` + 3 forwards;
    * Square: per restart two forwards, then one forward per query.

    A target, restart or query works only on the images not yet broken by that attack.
    ``record`` None: every image classified correctly and none broken -- the upper bound a
    runtime request needs. ``record`` (an AutoAttack JSON of atat.robustness: ``clean_accuracy``,
    ``per_attack[a]['robust_accuracy']``): ``A`` = clean accuracy x n, and the images left at a
    later target/restart/query lie between the attack's final robust count and ``A``;
    ``survival`` picks :data:`AA_SURVIVAL` (``estimate``: each sub-run breaks the same share)."""
    if survival not in AA_SURVIVAL:
        raise ValueError(f"survival must be one of {AA_SURVIVAL}, got {survival!r}")
    n = int(autoattack["n_examples"])
    batch = min(int(autoattack.get("batch_size", 128) or 128), n)
    clean = 1.0 if record is None else float(record["clean_accuracy"])
    fb, fwd = 0.0, 1 + n + AA_CHECK_FORWARDS * batch
    for a, (it, targets, restarts) in autoattack_settings(autoattack, n_classes).items():
        fwd += n                     # run_standard_evaluation's clean accuracy
        start = clean * n
        if start <= 0:               # no robust example: the library skips the attack
            continue
        if record is not None and a not in (record.get("per_attack") or {}):
            raise ValueError(f"AutoAttack record without attack {a!r} (has: "
                             f"{', '.join(record.get('per_attack') or {}) or 'none'})")
        end = start if record is None else min(
            start, float(record["per_attack"][a]["robust_accuracy"]) * n)
        fwd += 2 * start             # the attack's first forward, the check of its result
        if a == "square":
            for r in range(restarts):
                fwd += 2 * _survivors(start, end, r * it, restarts * it, survival)
                fwd += _survivor_sum(start, end, r * it, it, restarts * it, survival)
            continue
        runs = targets * restarts
        alive = _survivor_sum(start, end, 0, runs, runs, survival)
        if a == "fab-t":
            fb += it * alive
            fwd += (it + 3) * alive
        else:
            fb += (it + 1) * alive
            fwd += alive if a == "apgd-t" else 0
    return fb, fwd


def autoattack_cost(name: str, *, architecture: str, resolution: int, n_classes: int,
                    autoattack: Mapping[str, Any], n_eps: int = 1,
                    records: Sequence[Mapping[str, Any]] | None = None,
                    survival: str = "estimate") -> JobCost:
    """AutoAttack of one model at ``n_eps`` epsilons on ``n_examples`` images
    (:func:`autoattack_work`). ``records`` None: every image classified correctly and none
    broken, the upper bound the runtime request uses; else one AutoAttack record per epsilon
    of a finished run: the work expected where the model's clean and robust accuracy are
    those."""
    precision = "tf32" if autoattack.get("precision") == "tf32" else "fp32"
    if records is None:
        fb, fwd = autoattack_work(autoattack, n_classes=n_classes)
        fb, fwd = fb * n_eps, fwd * n_eps
    else:
        if len(records) != n_eps:
            raise ValueError(f"{name}: {len(records)} AutoAttack records for {n_eps} epsilons")
        works = [autoattack_work(autoattack, n_classes=n_classes, record=r, survival=survival)
                 for r in records]
        fb, fwd = sum(w[0] for w in works), sum(w[1] for w in works)
    passes = (Pass(architecture, resolution, "fb", fb, precision),
              Pass(architecture, resolution, "fwd", fwd, precision))
    return JobCost("autoattack", name, passes, gpu=True)


def hsic_cost(name: str, *, architecture: str, resolution: int, n_train: int,
              n_batches: int | None = None, batch_size: int = 128) -> JobCost:
    """HSIC of one model: one forward pass over its training loader (or ``n_batches``)."""
    n = n_train if n_batches is None else min(n_train, int(n_batches) * int(batch_size))
    return JobCost("measure_hsic", name, (Pass(architecture, resolution, "fwd", n, "tf32"),),
                   gpu=True)


def inversion_class_count(targets: Any, n_classes: int) -> int:
    """Classes one (model, attack) attacks: ``all``, a seeded random ``k``, or a list."""
    if targets in (None, "all"):
        return int(n_classes)
    if isinstance(targets, int):
        return min(int(targets), int(n_classes))
    return len(list(targets))


def inversion_cost(name: str, *, attack: str, params: Mapping[str, Any], n_classes_job: int,
                   generator: str, generator_resolution: int, crop: int | None,
                   architecture: str, input_resolution: int, evaluation: tuple[str, int],
                   face: tuple[str, int] | None, perceptual: tuple[str, int] | None,
                   gpu_mem_mb: int | None = None) -> JobCost:
    """One inversion job over ``n_classes_job`` classes. Per class: the candidate search
    (``search_space_size`` renders and target forwards, once per job for PPDG), the
    optimisation (``num_candidates`` x steps x (generator + target) forward+backward), the
    final selection (``iterations`` target forwards per candidate), the scoring of the kept
    images (rendered, then the evaluation model and face network); PPDG repeats search,
    optimisation, selection and scoring every round (its first round's search once per job)
    and between rounds projects ``num_inv_points`` pivots (``inv_steps``) and tunes the
    generator (``tune_steps``), each step through the generator and its perceptual network.
    Precision: ``params['precision']`` where the config has it, else fp32 for PPA/IF-GMI (TF32
    forced off) and PyTorch's default (tf32) for PPDG."""
    prec = str(params.get("precision") or ("tf32" if attack == "ppdg" else "fp32"))
    c = params["candidates"]
    n_cand, search = int(c["num_candidates"]), int(c["search_space_size"])
    k = int(n_classes_job)
    steps = params["steps"]
    total_steps = sum(int(s) for s in steps) if isinstance(steps, (list, tuple)) else int(steps)
    rounds = int(params.get("num_rounds", 1) or 1) if attack == "ppdg" else 1
    fs = params.get("final_selection") or {}
    kept = int(fs.get("samples_per_target", n_cand)) if fs else n_cand
    g_fwd = g_fb = t_fwd = t_fb = p_fb = 0.0
    # the search: per class and round; PPDG's first round (untuned generator) once per job
    searches = (1 + k * (rounds - 1)) if attack == "ppdg" else k
    g_fwd += searches * search
    t_fwd += searches * search
    opt = k * n_cand * total_steps * rounds
    g_fb += opt
    t_fb += opt
    if fs:   # every round: the candidates rendered once, `iterations` augmented target forwards
        g_fwd += rounds * k * n_cand
        t_fwd += rounds * k * n_cand * int(fs.get("iterations", 0))
    g_fwd += rounds * k * kept   # the kept images rendered for the scorers, every round
    if attack == "ppdg" and rounds > 1:   # between rounds: project the pivots, tune G
        from atat.plan.inversion_defaults import PPDG_INV_STEPS, PPDG_TUNE_STEPS

        measure = params.get("measure", "pointwise")
        inv = params.get("inv_steps") or PPDG_INV_STEPS[measure]
        tune = params.get("tune_steps") or PPDG_TUNE_STEPS[measure]
        points = int(params.get("num_inv_points", 1))
        between = (rounds - 1) * k * points * (int(inv) + int(tune))
        g_fb += between
        p_fb += between
    passes = [Pass(generator, generator_resolution, "fwd", g_fwd, prec),
              Pass(generator, generator_resolution, "fb", g_fb, prec),
              Pass(architecture, input_resolution, "fwd", t_fwd, prec),
              Pass(architecture, input_resolution, "fb", t_fb, prec),
              Pass(evaluation[0], evaluation[1], "fwd", rounds * k * kept, prec)]
    if face:
        passes.append(Pass(face[0], face[1], "fwd", rounds * k * kept, prec))
    if p_fb and perceptual:
        passes.append(Pass(perceptual[0], perceptual[1], "fb", p_fb, prec))
    del crop  # the crop and resize are cheap next to the networks
    return JobCost("invert", name, tuple(passes), gpu=True, gpu_mem_mb=gpu_mem_mb)


def evaluation_recipe(training: Mapping[str, Any] | None, num_workers: int = 0
                      ) -> dict[str, Any]:
    """The recipe an evaluation network trains with: the config's ``training`` over the
    job's defaults (atat.plan.inversion_defaults.EVAL_TRAINING_DEFAULTS, the copy
    atat.inversion.evaluation fills in), with the target models' loader workers."""
    from atat.plan.inversion_defaults import EVAL_TRAINING_DEFAULTS

    return {**EVAL_TRAINING_DEFAULTS, **dict(training or {}), "num_workers": int(num_workers)}


def evaluation_model_cost(name: str, *, architecture: str, resolution: int, n_train: int,
                          n_val: int, training: Mapping[str, Any],
                          image_format: str | None = None) -> JobCost:
    """The evaluation model (Inception-v3) of one dataset: a training job without PGD."""
    job = train_cost(name, architecture=architecture, resolution=resolution, n_train=n_train,
                     n_val=n_val, n_test=0, training=training, defense={},
                     rule="train_evaluation_model", image_format=image_format)
    return job


def public_classifier_cost(rule: str, name: str, *, architecture: str, resolution: int,
                           n_images: int, n_heldout: int, training: Mapping[str, Any],
                           image_format: str | None = None) -> JobCost:
    """A classifier of a public pool (face embedding, prior-quality instrument): trained on
    the pool less the ``n_heldout`` images it validates on (:func:`public_heldout`); a CPU
    job in the profile."""
    n_val = int(n_heldout)
    job = train_cost(name, architecture=architecture, resolution=resolution,
                     n_train=n_images - n_val, n_val=n_val, n_test=0, training=training,
                     defense={}, rule=rule, image_format=image_format)
    return dataclasses.replace(job, gpu=False)


def generator_cost(name: str, *, key: str, resolution: int, steps: int) -> JobCost:
    """Training the embedded default's prior: ``steps`` optimiser steps (G and D at the
    configured batch; one CPU calibration per recipe)."""
    return JobCost("train_generator", name, (Pass(key, resolution, "step", int(steps)),),
                   gpu=True)


def real_embeddings_cost(name: str, *, n_train: int, evaluation: tuple[str, int],
                         face: tuple[str, int] | None) -> JobCost:
    """The scorer's features of the private training images: one forward each."""
    passes = [Pass(evaluation[0], evaluation[1], "fwd", n_train, "tf32")]
    if face:
        passes.append(Pass(face[0], face[1], "fwd", n_train, "tf32"))
    return JobCost("real_embeddings", name, tuple(passes), gpu=True)


#: penultimate feature width of each architecture (atat.training.models: the classifier's
#: ``feature_dim``, the public classifier's embedding in rule prior_quality)
FEATURE_DIM = {"resnet18": 512, "resnet10": 512, "resnet152": 2048, "densenet169": 1664,
               "densenet47": 424}
#: share of each public identity's images the public classifier holds out
#: (atat.inversion.evaluation.FACE_HOLDOUT_FRACTION; tests/test_job_cost.py checks they agree)
PUBLIC_HOLDOUT_FRACTION = 0.1


def public_heldout(identities: int, per_identity: int,
                   fraction: float = PUBLIC_HOLDOUT_FRACTION) -> int:
    """Images the public classifier held out of a pool of ``identities`` x ``per_identity``:
    per identity ``round(fraction x n)``, at least one where it has two or more
    (atat.inversion.evaluation.public_holdout_split)."""
    per = max(1, round(fraction * per_identity)) if per_identity >= 2 else 0
    return int(identities) * per


def knn_pairs(n_reference: int, n_samples: int, n_heldout: int) -> float:
    """Pairwise distances of one classifier's precision/recall/coverage in rule prior_quality
    (atat.inversion.prior_quality.measure): on each of the three sets Q (the prior's and the
    floor's ``n_samples``, the ``n_heldout`` real images) the reference's k-NN radii twice
    (precision, coverage: R^2 each), Q against the reference (precision: Q R), its first
    ``n_heldout`` against the reference (coverage: h R) and the reverse with their own radii
    (recall: h R + h^2)."""
    r, h = float(n_reference), float(n_heldout)
    return sum(2 * r * r + q * r + 2 * h * r + h * h for q in (n_samples, n_heldout, n_samples))


def prior_quality_cost(name: str, *, generator: str, generator_resolution: int,
                       resolution: int, samples: int, classifier: str, n_classifiers: int,
                       n_public: int, n_heldout: int, feature_dim: int) -> JobCost:
    """The prior's quality (atat.inversion.prior_quality): the public pool's ``n_public``
    images read and transformed once; per classifier the ``samples`` renders (drawn again for
    each), its forwards -- on each of the three sets (prior, floor: ``samples``; ceiling: the
    ``n_heldout`` images) one to classify and one to embed, and one embedding of each
    reference image (the rest of the pool) -- and the k-NN statistics' pairwise distances at
    ``feature_dim`` (:func:`knn_pairs`; unit ``knn@<dim>/pair``, the CPU calibration times
    it). ``resolution``: the classifier's (the real images are read at it)."""
    c = int(n_classifiers)
    ref = int(n_public) - int(n_heldout)
    forwards = c * (2 * (2 * int(samples) + int(n_heldout)) + ref)
    return JobCost("prior_quality", name, (
        Pass(generator, generator_resolution, "fwd", c * int(samples)),
        Pass(classifier, resolution, "fwd", forwards),
        Pass("read", resolution, "image", int(n_public)),
        Pass("knn", int(feature_dim), "pair", c * knn_pairs(ref, int(samples), int(n_heldout)))),
        gpu=False)


def synthfaces_cost(name: str, *, n_images: int, resolution: int, domain: str = "faces"
                    ) -> JobCost:
    """Drawing a synthetic population: ``n_images`` painted images."""
    return JobCost("synthfaces", name, (Pass(f"synth{domain}", resolution, "step", n_images),),
                   gpu=False)


#: validation every this many epochs where ``pretraining.training`` leaves ``eval_every`` out
#: (atat.training.pretrain.PRETRAINING_DEFAULTS; tests/test_job_cost.py checks they agree)
PRETRAIN_EVAL_EVERY = 1


def pretrain_cost(name: str, *, architecture: str, resolution: int, n_train: int, n_val: int,
                  training: Mapping[str, Any], num_workers: int = 0,
                  image_format: str | None = "png") -> JobCost:
    """One backbone's pretraining on the pretraining population (rule pretrain_backbone,
    atat.training.pretrain through atat.training.train.fit): per epoch each full training
    batch forward+backward (the training loader drops the last partial batch) and each of its
    images' training transform (``augment@<resolution>/image``), the held-out images forward on
    every ``eval_every``-th epoch; no training-accuracy or test pass. The network passes run
    at the recipe's batch, network key ``<architecture>/b<batch>`` (the CPU calibration's
    unit at that batch, else at its own: :meth:`CpuRates.unit_key`); the decoding as
    :func:`train_cost`'s."""
    epochs = int(training["epochs"])
    batch = int(training["batch_size"])
    every = max(1, int(training.get("eval_every", 1) or 1))
    seen = int(n_train) // batch * batch * epochs
    val = sum(1 for e in range(epochs) if e % every == 0) * int(n_val)
    net = f"{architecture}/b{batch}"
    precision = training_precision(training)
    passes = [Pass(net, resolution, "fb", seen, precision),
              Pass(net, resolution, "fwd", val, precision),
              Pass("augment", resolution, "image", seen)]
    if image_format and decoded_each_epoch(num_workers, int(n_train) + int(n_val), resolution):
        passes.append(Pass(image_format, resolution, "image", seen + val))
    return JobCost("pretrain_backbone", name, tuple(passes), gpu=True,
                   host_workers=int(num_workers))


def figure_cost(rule: str, name: str, *, panels: int, blank: int = 0, dpi: int) -> JobCost:
    """A figure drawn panel by panel (Figure 4: one panel per attack, metric and cell, each
    the defenses' points with intervals in both axes and placed labels), laid out and saved
    as a PNG at ``dpi``: ``panels`` units ``panel@<dpi>/draw`` and ``blank`` units
    ``panel@<dpi>/blank`` (the grid's panels of an attack not run there) beside the process."""
    passes = [Pass("panel", int(dpi), "draw", int(panels))]
    if blank:
        passes.append(Pass("panel", int(dpi), "blank", int(blank)))
    return JobCost(rule, name, tuple(passes), gpu=False)


def fixed_cost(rule: str, name: str) -> JobCost:
    """A job whose cost is its process (tables, figures, statistics)."""
    return JobCost(rule, name, (), gpu=False)


# ---- requests and limits --------------------------------------------------------------------

#: a runtime request is the forecast x this margin (the forecast is an estimate), rounded up
#: to 10 minutes, at least 30 minutes
RUNTIME_MARGIN = 1.5
MIN_RUNTIME_MIN = 30


def runtime_request_min(seconds: float, margin: float = RUNTIME_MARGIN) -> int:
    """Minutes to request for a job forecast at ``seconds``."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"forecast must be a finite non-negative time, got {seconds}")
    return max(MIN_RUNTIME_MIN, int(math.ceil(seconds * margin / 60 / 10)) * 10)


class RuntimeLimitError(ValueError):
    """A job's runtime request exceeds the partition's limit."""


def check_runtime_limit(requests: Iterable[tuple], max_runtime_min: int | None) -> None:
    """Refuse jobs (rule, name, requested minutes[, forecast seconds]) longer than
    ``max_runtime_min``: one message naming each (up to 10), its forecast and request, and the
    remedy."""
    if max_runtime_min is None:
        return
    limit = int(max_runtime_min)
    over = [(q[0], q[1], q[2], q[3] if len(q) > 3 else None) for q in requests if q[2] > limit]
    if not over:
        return
    over.sort(key=lambda x: -x[2])
    lines = [f"  {r} {n}: {m} min requested ("
             + (f"forecast {f / 3600:.1f} h" if f is not None else "forecast")
             + f" x {RUNTIME_MARGIN})" for r, n, m, f in over[:10]]
    more = f"\n  ... and {len(over) - 10} more" if len(over) > 10 else ""
    remedy = {
        "invert": "shard finer: a smaller inversion.classes_per_job (each job attacks fewer "
                  "classes)",
        "autoattack": "autoattack.job: per_epsilon (one job per epsilon) where it is per_model",
    }
    hints = sorted({remedy.get(r, "a partition with a longer limit (max_runtime_min)")
                    for r, _, _, _ in over})
    raise RuntimeLimitError(
        f"{len(over)} job(s) would exceed the partition's limit max_runtime_min = {limit} min "
        f"and would pend forever or be rejected; nothing was submitted:\n" + "\n".join(lines)
        + more + "\nRemedy: " + "; ".join(hints)
        + " (python -m atat.lab.forecast prints every job's forecast)")


def parse_gpu_cards(spec: str | None) -> list[tuple[str, int]]:
    """``"name=MB,name=MB"`` (config key ``gpu_cards``) -> [(name, MB)] by memory."""
    if not spec:
        return []
    cards = []
    for item in str(spec).split(","):
        name, sep, mb = item.strip().partition("=")
        if not sep or not name or not mb.strip().isdigit():
            raise ValueError(f"gpu_cards: expected 'name=MB,name=MB', got {spec!r}")
        cards.append((name.strip(), int(mb)))
    return sorted(cards, key=lambda c: c[1])


def pick_gpu_card(need_mb: int, cards: Sequence[tuple[str, int]], oom_failures: int = 0
                  ) -> str:
    """The smallest card with at least ``need_mb``, one size larger per earlier attempt that
    ran out of GPU memory. Raises ValueError when no card is large enough."""
    fitting = [i for i, (_, mb) in enumerate(cards) if mb >= need_mb]
    if not fitting:
        raise ValueError(f"needs {need_mb} MB of GPU memory; the largest card in gpu_cards has "
                         f"{max((mb for _, mb in cards), default=0)} MB")
    i = fitting[0] + int(oom_failures)
    if i >= len(cards):
        raise ValueError(f"ran out of GPU memory {oom_failures} time(s), last on "
                         f"{cards[-1][0]} ({cards[-1][1]} MB), the largest card in gpu_cards; "
                         f"lower the attack's batch_size")
    return cards[i][0]


# ---- the config's jobs --------------------------------------------------------------------------

#: images of the paper's real datasets (the whole private pool before the splits): CelebA's
#: 1,000 most frequent identities 30,038 (paper A.2), Stanford Dogs 20,580 (the dataset's
#: page); FaceScrub's Kaggle copy is not counted anywhere public (docs/sources.md#facescrub) -- 35,000 gives
#: the ~25,000 training images the workflow's real_embeddings rule assumes
REAL_DATASET_IMAGES = {"facescrub": 35000, "celeba": 30038, "stanford_dogs": 20580}


def image_format(config: Mapping[str, Any], dataset: str) -> str:
    """The host unit of decoding one of ``dataset``'s files: ``png`` for a painted population
    (atat.data.synthfaces writes PNG), ``jpeg`` for the real datasets (their archives' JPEGs,
    atat.data.builders)."""
    return "png" if config["datasets"][dataset]["source"] == "synthfaces" else "jpeg"


def dataset_images(config: Mapping[str, Any], dataset: str) -> tuple[int, int, int, int]:
    """(train, val, test, public) image counts of ``dataset``."""
    ds = config["datasets"][dataset]
    syn = ds.get("synthetic")
    if syn:
        n_priv = int(syn["n_private_identities"])
        n = n_priv * int(syn["images_per_identity"])
        extra = n_priv * int(syn.get("extra_test_images_per_identity", 0) or 0)
        public = int(syn["n_public_identities"]) * int(syn["public_images_per_identity"])
        return (*split_sizes(n, extra), public)
    if ds["source"] not in REAL_DATASET_IMAGES:
        raise ValueError(f"no image count for dataset source {ds['source']!r}")
    return (*split_sizes(REAL_DATASET_IMAGES[ds["source"]]), 0)


#: full resolution of the downloadable StyleGAN2-ADA priors, by file name (the workflow's
#: PRIOR_RESOLUTION); another url is assumed to be 1024 px
PRIOR_RESOLUTION = {"ffhq.pkl": 1024, "afhqdog.pkl": 512}


def generator_network(config: Mapping[str, Any], name: str) -> tuple[str, int]:
    """(network key, resolution) of generator ``name``."""
    g = config["generators"][name]
    if "train" in g:
        t = g["train"]
        res = int(config["datasets"][t["dataset"]]["resolution"])
        return stylegan_key(res, t.get("channel_base", 1024), t.get("channel_max", 64)), res
    res = PRIOR_RESOLUTION.get(str(g["url"]).rsplit("/", 1)[-1], 1024)
    return stylegan_key(res), res


def _scorers(config: Mapping[str, Any], dataset: str) -> tuple[tuple[str, int], tuple[str, int] | None]:
    ev = config.get("evaluation_model") or {}
    evaluation = (str(ev.get("architecture", "inception_v3")), int(ev.get("resolution", 299)))
    face = None
    if config["datasets"][dataset].get("faces"):
        fe = config.get("face_embedding") or {}
        if fe.get("source") == "public_classifier":
            face = (str(fe.get("architecture", "resnet18")), int(fe["resolution"]))
        else:
            face = ("facenet", int(fe.get("resolution", 160)))
    return evaluation, face


def class_shards(config: Mapping[str, Any], dataset: str, architecture: str, defense: str,
                 attack: str) -> list[tuple[int, int]]:
    """The class ranges of one (model, attack)'s jobs: atat.plan.config.inversion_shards (the
    workflow's own split, ``inversion.classes_per_job``), or one range of every class."""
    from atat.plan import config as _config
    from atat.plan.config import inversion_params, n_classes

    split = getattr(_config, "inversion_shards", None)
    if split is not None:
        return list(split(config, dataset, architecture, defense, attack))
    p = inversion_params(config, dataset, architecture, defense, attack)
    return [(0, inversion_class_count(p.get("targets", "all"), n_classes(config, dataset)))]


def autoattack_epsilons(wc: Mapping[str, Any], config: Mapping[str, Any]) -> list[float]:
    """The epsilons one AutoAttack job runs: its ``eps`` wildcard (``autoattack.job:
    per_epsilon``), else every epsilon of the config."""
    if "eps" in wc:
        return [float(wc["eps"])]
    return [float(e) for e in config["autoattack"]["epsilons"]]


def job_cost_for(rule: str, wc: Mapping[str, Any], config: Mapping[str, Any], *,
                 n_classes_job: int | None = None, gpu_mem_mb: int | None = None,
                 autoattack_records: Sequence[Mapping[str, Any]] | None = None,
                 survival: str = "estimate") -> JobCost:
    """The cost of the job of ``rule`` with wildcards ``wc`` under ``config`` (the rules'
    wildcards: dataset, arch, defense, seed, eps, attack, generator). ``autoattack_records``:
    for rule autoattack, one record per epsilon of :func:`autoattack_epsilons` from a finished
    run (the expected work, :func:`autoattack_cost`); None: the upper bound. Computed once per
    config and arguments (atat.plan.config.memoised; a JobCost is immutable): the workflow
    asks for it per job and per resource."""
    from atat.plan.config import memoised

    if autoattack_records is not None:   # records from a run: not a function of the config
        return _job_cost_for(rule, wc, config, n_classes_job=n_classes_job,
                             gpu_mem_mb=gpu_mem_mb, autoattack_records=autoattack_records,
                             survival=survival)
    key = (rule, tuple(wc.items()), n_classes_job, gpu_mem_mb, survival)
    return memoised("job_cost_for", config, key, lambda: _job_cost_for(
        rule, wc, config, n_classes_job=n_classes_job, gpu_mem_mb=gpu_mem_mb, survival=survival))


def _job_cost_for(rule: str, wc: Mapping[str, Any], config: Mapping[str, Any], *,
                  n_classes_job: int | None = None, gpu_mem_mb: int | None = None,
                  autoattack_records: Sequence[Mapping[str, Any]] | None = None,
                  survival: str = "estimate") -> JobCost:
    from atat.plan.config import (autoattack_params, defense_params, inversion_params,
                                  n_classes, training_params)

    name = "/".join(str(v) for v in wc.values())
    workers = int(config["training"].get("num_workers", 0) or 0)   # every training loader's
    if rule in ("train_model", "autoattack", "measure_hsic", "invert", "invert_shard"):
        ds, arch, defense = wc["dataset"], wc["arch"], wc["defense"]
        res = int(config["datasets"][ds]["resolution"])
        n_train, n_val, n_test, _ = dataset_images(config, ds)
        training = training_params(config, ds, arch, defense)
    if rule == "train_model":
        dp = defense_params(config, defense, (ds, arch))
        return train_cost(name, architecture=arch, resolution=res, n_train=n_train, n_val=n_val,
                          n_test=n_test, training=training, defense=dp,
                          image_format=image_format(config, ds))
    if rule == "autoattack":
        aa = autoattack_params(config, ds, arch, defense)
        return autoattack_cost(name, architecture=arch, resolution=res,
                               n_classes=n_classes(config, ds), autoattack=aa,
                               n_eps=len(autoattack_epsilons(wc, config)),
                               records=autoattack_records, survival=survival)
    if rule == "measure_hsic":
        h = config.get("hsic") or {}
        return hsic_cost(name, architecture=arch, resolution=res, n_train=n_train,
                         n_batches=h.get("n_batches"), batch_size=int(training["batch_size"]))
    if rule in ("invert", "invert_shard"):
        attack = wc["attack"]
        p = inversion_params(config, ds, arch, defense, attack)
        if rule == "invert_shard":
            n_classes_job = int(wc["stop"]) - int(wc["start"])
        elif n_classes_job is None:
            shards = class_shards(config, ds, arch, defense, attack)
            if len(shards) > 1:  # rule invert only merges its shards' parts (CPU, seconds)
                return fixed_cost("invert", name)
            n_classes_job = shards[0][1] - shards[0][0]
        gen_key, gen_res = generator_network(config, config["datasets"][ds]["generator"])
        evaluation, face = _scorers(config, ds)
        perceptual = None
        if attack == "ppdg":
            perceptual = (("vgg16", gen_res) if p.get("perceptual") == "vgg16_lpips"
                          else (str((config.get("face_embedding") or {}).get(
                              "architecture", "resnet18")), res))
        job = inversion_cost(name, attack=attack, params=p, n_classes_job=n_classes_job,
                             generator=gen_key, generator_resolution=gen_res,
                             crop=config["generators"][config["datasets"][ds]["generator"]].get(
                                 "center_crop"),
                             architecture=arch, input_resolution=int(p["input_resolution"]),
                             evaluation=evaluation, face=face, perceptual=perceptual,
                             gpu_mem_mb=gpu_mem_mb)
        return dataclasses.replace(job, rule=rule)
    if rule == "train_evaluation_model":
        ds = wc["dataset"]
        ev = config["evaluation_model"]
        n_train, n_val, _, _ = dataset_images(config, ds)
        return evaluation_model_cost(name, architecture=str(ev.get("architecture", "inception_v3")),
                                     resolution=int(ev["resolution"]), n_train=n_train,
                                     n_val=n_val, training=evaluation_recipe(
                                         ev.get("training"), workers),
                                     image_format=image_format(config, ds))
    if rule in ("train_face_embedding", "train_instrument_classifier"):
        ds = wc["dataset"]
        fe = config["face_embedding"]
        syn = config["datasets"][ds].get("synthetic") or {}
        return public_classifier_cost(rule, name, architecture=str(fe.get("architecture", "resnet18")),
                                      resolution=int(fe["resolution"]),
                                      n_images=dataset_images(config, ds)[3],
                                      n_heldout=public_heldout(
                                          int(syn.get("n_public_identities", 0)),
                                          int(syn.get("public_images_per_identity", 0))),
                                      training=evaluation_recipe(fe.get("training"), workers),
                                      image_format="png")
    if rule == "train_generator":
        t = config["generators"][wc["generator"]]["train"]
        key, res = generator_network(config, wc["generator"])
        return generator_cost(name, key=f"{key}/b{int(t.get('batch_size', 16))}", resolution=res,
                              steps=int(t["steps"]))
    if rule == "real_embeddings":
        ds = wc["dataset"]
        evaluation, face = _scorers(config, ds)
        return real_embeddings_cost(name, n_train=dataset_images(config, ds)[0],
                                    evaluation=evaluation, face=face)
    if rule == "prior_quality":
        g = wc["generator"]
        key, res = generator_network(config, g)
        pq = config["preconditions"]["prior_quality"]
        ds = config["generators"][g]["train"]["dataset"]
        syn = config["datasets"][ds].get("synthetic") or {}
        public = dataset_images(config, ds)[3]
        held = public_heldout(int(syn.get("n_public_identities", 0)),
                              int(syn.get("public_images_per_identity", 0)))
        fe = config["face_embedding"]
        arch = str(fe.get("architecture", "resnet18"))
        if arch not in FEATURE_DIM:
            raise ValueError(f"face_embedding.architecture {arch!r}: no feature width "
                             f"(known: {', '.join(FEATURE_DIM)})")
        return prior_quality_cost(name, generator=key, generator_resolution=res,
                                  resolution=int(fe["resolution"]),
                                  samples=int(pq["samples"]), classifier=arch,
                                  n_classifiers=int(pq["classifiers"]), n_public=public,
                                  n_heldout=held, feature_dim=FEATURE_DIM[arch])
    if rule == "pretraining_population":
        pop = config["pretraining"]["population"]
        n = int(pop["identities"]) * (int(pop["images_per_identity"])
                                      + int(pop["val_images_per_identity"]))
        return dataclasses.replace(synthfaces_cost(name, n_images=n,
                                                   resolution=int(pop["resolution"])),
                                   rule=rule)
    if rule == "pretrain_backbone":
        from atat.plan.config import pretraining_backbones

        pop = config["pretraining"]["population"]
        ident = int(pop["identities"])
        recipe = pretraining_backbones(config)[(wc["backbone"], int(wc["res"]))]["training"]
        return pretrain_cost(name, architecture=wc["backbone"], resolution=int(wc["res"]),
                             n_train=ident * int(pop["images_per_identity"]),
                             n_val=ident * int(pop["val_images_per_identity"]),
                             training={"eval_every": PRETRAIN_EVAL_EVERY, **recipe},
                             num_workers=workers)
    if rule == "synthfaces":
        ds = wc["dataset"]
        d = config["datasets"][ds]
        syn = d["synthetic"]
        tr, va, te, pub = dataset_images(config, ds)
        return synthfaces_cost(name, n_images=tr + va + te + pub, resolution=int(d["resolution"]),
                               domain=str(syn.get("domain", "faces")))
    return fixed_cost(rule, name)


#: what a job's log holds when it ran out of GPU memory (torch.OutOfMemoryError's text)
OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory")


def oom_attempts(attempts_log_text: str) -> int:
    """How many attempts in a job's attempts log (``===== attempt N ...`` headers,
    workflow/scripts/_common.py) ran out of GPU memory."""
    parts = attempts_log_text.split("===== attempt ")[1:] or [attempts_log_text]
    return sum(1 for part in parts if any(m in part for m in OOM_MARKERS))
