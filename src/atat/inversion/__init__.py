"""Model-inversion attack components: StyleGAN2(-ADA) networks and a safe loader for
NVIDIA's network pickles (docs/sources.md#stylegan2-generator)."""

from .safe_pickle import (
    UnsafePickleError,
    load_stylegan_pickle,
    safe_load,
    save_stylegan_pickle,
)
from .stylegan2 import (
    Discriminator,
    Generator,
    MappingNetwork,
    SynthesisNetwork,
    train_small_generator,
)

__all__ = [
    "Discriminator",
    "Generator",
    "MappingNetwork",
    "SynthesisNetwork",
    "UnsafePickleError",
    "load_stylegan_pickle",
    "safe_load",
    "save_stylegan_pickle",
    "train_small_generator",
]
