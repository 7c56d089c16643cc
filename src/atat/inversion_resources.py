"""Memory estimate of PPDG's generator fine-tuning, the inversion stage's largest footprint
(issue 13 item 14). Torch-free: the workflow imports it to declare the ``invert`` rule's
resources at DAG time.

PPDG tunes the whole StyleGAN2 synthesis network on its ``num_inv_points`` pivot images at full
resolution (spec attacks §4.2 g); with the pointwise measure its loss is LPIPS-VGG on the
full-resolution images too. Autograd keeps every activation of G and of VGG-16 for the backward
pass, so the peak grows linearly in the number of points:

    peak ≈ fixed + n_points · (S · r + V · r²),  r = resolution / 256

* ``S`` — StyleGAN2 synthesis per image: the channel count halves as the resolution doubles
  (channel_base 32768, channel_max 512), so its activations roughly double per level (∝ r);
* ``V`` — VGG-16 per image at full resolution (fixed channels, ∝ r²); with the mmd/ct measures
  the features are taken at 256 px (``FEATURE_RESOLUTION``), i.e. V · 1;
* ``fixed`` — G's weights, gradients and Adam moments (30 M parameters) plus VGG's weights.

Measured (2026-12-01, CPU, float32, this project's plain-PyTorch StyleGAN2 with FFHQ's
architecture kwargs and random weights; peak RSS of :func:`atat.inversion.ppdg.tune_generator`
with pointwise LPIPS-VGG over the process's RSS before it, which is ~1.1 GiB of Python/torch):

    256 px: 1 point 2.57 GiB, 2 points 3.35 GiB  → 0.78 GiB per point
    512 px: 1 point 3.77 GiB, 2 points 5.80 GiB  → 2.03 GiB per point

Solving S + V = 0.78, 2S + 4V = 2.03 gives S = 0.545, V = 0.235 GiB; the fixed part is
0.65 GiB (both intercepts, 0.68 and 0.62, less the 1.1 GiB baseline). At 1024 px this predicts
5.9 GiB per point, i.e. 1.1 + 0.65 + 5.9 ≈ 7.7 GiB process peak for one point, against the
8.5 GiB measured for a whole PPDG job at 1024 px with one point (which also holds the target,
evaluation and face networks, the discriminator and the projection's copies). The projection
(:func:`atat.inversion.ppdg.project_pointwise`, features at 256 px, one image at a time) peaked
at 2.77 GiB at 512 px: below the tuning.

On a GPU the same tensors are allocated; :func:`ppdg_gpu_memory_gib` adds 15% for the caching
allocator's fragmentation and cuDNN workspaces and 1 GiB for the CUDA context. The paper's
setting (1024 px FFHQ prior, 5 points, pointwise) comes to ≈ 36 GiB: a 40 GB A100 is marginal,
a 48 GB A6000 or an 80 GB A100/H100 fits.
"""

from __future__ import annotations

import math

__all__ = ["ppdg_gpu_memory_gib", "ppdg_gpu_memory_mb", "ppdg_tuning_memory_gib"]

#: GiB per image at 256 px (see module doc)
SYNTHESIS_GIB_256 = 0.545
VGG_GIB_256 = 0.235
#: G's weights + gradients + Adam moments and VGG's weights, GiB
FIXED_GIB = 0.65
#: GPU overheads
ALLOCATOR_FACTOR = 1.15
CUDA_CONTEXT_GIB = 1.0
MEASURES = ("pointwise", "mmd", "ct")


def ppdg_tuning_memory_gib(resolution: int, n_points: int, measure: str = "pointwise") -> float:
    """Tensors alive at the peak of PPDG's generator tuning, GiB (module doc)."""
    if measure not in MEASURES:
        raise ValueError(f"unknown PPDG measure {measure!r} (known: {', '.join(MEASURES)})")
    if int(resolution) < 4 or int(n_points) < 1:
        raise ValueError(f"need resolution >= 4 and n_points >= 1, got {resolution}, {n_points}")
    r = int(resolution) / 256
    vgg = VGG_GIB_256 * (r * r if measure == "pointwise" else 1.0)
    return FIXED_GIB + int(n_points) * (SYNTHESIS_GIB_256 * r + vgg)


def ppdg_gpu_memory_gib(resolution: int, n_points: int, measure: str = "pointwise") -> float:
    """Estimated peak GPU memory of a PPDG job, GiB: tuning tensors × 1.15 + 1 GiB."""
    return ALLOCATOR_FACTOR * ppdg_tuning_memory_gib(resolution, n_points, measure) + \
        CUDA_CONTEXT_GIB


def ppdg_gpu_memory_mb(resolution: int, n_points: int, measure: str = "pointwise") -> int:
    """:func:`ppdg_gpu_memory_gib` in MiB, rounded up to 1000 (Snakemake's ``*_mb`` style)."""
    mib = ppdg_gpu_memory_gib(resolution, n_points, measure) * 1024
    return int(math.ceil(mib / 1000.0) * 1000)
