"""GPU memory estimate of one inversion job (rule ``invert``; issue 13 item 14). Torch-free:
the workflow imports it to declare the rule's resources at DAG time.

A job's peak is the largest of its stages' live tensors (autograd keeps every activation of
the networks a gradient flows through until the backward pass):

* **optimisation** (PPA, IF-GMI, PPDG's PPA rounds): ``batch_size`` latents rendered at full
  resolution with gradient to ``w``, then the target model at its input resolution:
  ``batch · (synthesis_grad(r) + target(arch))``;
* **PPDG generator tuning** (docs/sources.md#ppdg): all synthesis parameters trainable on the
  ``num_inv_points`` pivots at full resolution, pointwise LPIPS-VGG also at full resolution:
  ``fixed + n_points · (S·r + V·r²)``; with mmd/ct the VGG features are taken at 256 px (V·1);
* **rendering without gradient** (candidate search, scoring, final selection): per image the
  transient tensors of the last synthesis blocks.

with r = resolution / 256. Measured (2026-12-01, CPU, float32, peak RSS above the process's
RSS before the stage; this project's plain-PyTorch StyleGAN2 with FFHQ's architecture kwargs
and random weights):

    optimisation (ResNet-18 target at 224 px), per image: 256 px 0.52, 512 px 0.88,
        1024 px 1.65 GiB (batch 1 and 2; linear in r: 0.127 + 0.37·r without the target)
    target at 224 px with input gradient, per image: ResNet-152 0.174, DenseNet-169 0.147,
        ResNet-18 0.033 GiB
    PPDG tuning (pointwise): 256 px 1 point 1.46, 2 points 2.24; 512 px 2.65 / 4.65 GiB
        → S = 0.545, V = 0.235 GiB, fixed 0.65 GiB (G's weights, gradients, Adam moments)
    rendering without gradient: 0.73 GiB per 1024 px image (batch 1 and 3)

Cross-check: the tuning model predicts ≈ 7.7 GiB process peak (with the 1.1 GiB Python/torch
baseline) at 1024 px with one point, against 8.5 GiB measured for a whole PPDG job there.

A GPU allocates the same tensors; :func:`gpu_memory_gib` adds 15% (caching allocator,
cuDNN workspaces) and 1 GiB (CUDA context). At the paper's settings (1024 px FFHQ prior,
ResNet-152 target at 224 px) this gives ≈ 53 GiB for PPA (batch 25), ≈ 43 GiB for IF-GMI and
PPDG (batch 20; PPDG's tuning on 5 points ≈ 37 GiB comes second): PPA needs an 80 GB GPU, the
others a 48 GB one. The figures are for generators of FFHQ's architecture (channel_base 32768,
channel_max 512); for the demo's small prior they are generous upper bounds. NVIDIA's fused CUDA kernels (bias_act, upfirdn2d), which the official
attacks use, save fewer intermediate tensors; this project's synthesis is plain PyTorch.
"""

from __future__ import annotations

import math

__all__ = ["gpu_memory_gib", "gpu_memory_mb", "peak_tensors_gib", "ppdg_tuning_memory_gib"]

#: optimisation: synthesis with gradient to w, per image: CONST + SLOPE · r (GiB)
OPT_CONST_GIB = 0.127
OPT_SLOPE_GIB = 0.37
#: target model at 224 px with input gradient, per image (GiB); scaled by (input/224)²
TARGET_GIB_224 = {"resnet152": 0.174, "densenet169": 0.147, "resnet18": 0.033,
                  # ResNet-10 (demo only, not measured on a GPU): ResNet-18's figure x 0.70, the
                  # ratio of their forward activation counts at 224 px (5.22M / 7.48M); the
                  # same count over-predicts ResNet-152 (x 8.9 vs the measured 5.3), so this errs
                  # high
                  "resnet10": 0.023,
                  # DenseNet-47 (demo only, not measured on a GPU): forward activation counts at
                  # 224 px 10.87M vs DenseNet-169's 45.65M and ResNet-18's 7.48M give 0.035
                  # (from DenseNet-169's figure) or 0.048 (from ResNet-18's); the higher one
                  "densenet47": 0.048}
#: weights of G and of the networks beside it (target, evaluation, face, D, VGG), GiB
WEIGHTS_GIB = 0.6
#: PPDG tuning per image at 256 px: synthesis S·r, VGG V·r² (GiB); fixed part (GiB)
SYNTHESIS_GIB_256 = 0.545
VGG_GIB_256 = 0.235
TUNING_FIXED_GIB = 0.65
#: rendering without gradient, per 1024 px image (GiB), ∝ r
RENDER_GIB_1024 = 0.73
#: GPU overheads
ALLOCATOR_FACTOR = 1.15
CUDA_CONTEXT_GIB = 1.0
MEASURES = ("pointwise", "mmd", "ct")
ATTACKS = ("ppa", "ifgmi", "ppdg")


def _r(resolution: int) -> float:
    if int(resolution) < 4:
        raise ValueError(f"generator resolution must be >= 4, got {resolution}")
    return int(resolution) / 256


def ppdg_tuning_memory_gib(resolution: int, n_points: int, measure: str = "pointwise") -> float:
    """Tensors alive at the peak of PPDG's generator tuning, GiB (module doc)."""
    if measure not in MEASURES:
        raise ValueError(f"unknown PPDG measure {measure!r} (known: {', '.join(MEASURES)})")
    if int(n_points) < 1:
        raise ValueError(f"need n_points >= 1, got {n_points}")
    r = _r(resolution)
    vgg = VGG_GIB_256 * (r * r if measure == "pointwise" else 1.0)
    return TUNING_FIXED_GIB + int(n_points) * (SYNTHESIS_GIB_256 * r + vgg)


def peak_tensors_gib(attack: str, *, resolution: int, batch_size: int, architecture: str,
                     input_resolution: int, render_batch_size: int, n_points: int = 5,
                     measure: str = "pointwise") -> float:
    """Largest stage of one inversion job, GiB (module doc). ``render_batch_size``: the
    largest number of images rendered at once without gradient."""
    if attack not in ATTACKS:
        raise ValueError(f"unknown inversion attack {attack!r} (known: {', '.join(ATTACKS)})")
    if architecture not in TARGET_GIB_224:
        raise ValueError(f"no memory figure for target architecture {architecture!r} "
                         f"(known: {', '.join(TARGET_GIB_224)})")
    r = _r(resolution)
    target = TARGET_GIB_224[architecture] * (int(input_resolution) / 224) ** 2
    stages = [int(batch_size) * (OPT_CONST_GIB + OPT_SLOPE_GIB * r + target),
              int(render_batch_size) * RENDER_GIB_1024 * r / 4]
    if attack == "ppdg":
        stages.append(ppdg_tuning_memory_gib(resolution, n_points, measure))
    return WEIGHTS_GIB + max(stages)


def gpu_memory_gib(attack: str, **kwargs) -> float:
    """Estimated peak GPU memory of one inversion job, GiB: :func:`peak_tensors_gib` × 1.15
    + 1 GiB."""
    return ALLOCATOR_FACTOR * peak_tensors_gib(attack, **kwargs) + CUDA_CONTEXT_GIB


def gpu_memory_mb(attack: str, **kwargs) -> int:
    """:func:`gpu_memory_gib` in MiB rounded up to 1000 (Snakemake's ``*_mb`` style)."""
    return int(math.ceil(gpu_memory_gib(attack, **kwargs) * 1024 / 1000.0) * 1000)
