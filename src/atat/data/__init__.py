"""Datasets in one on-disk manifest format, the synthetic ``synthfaces`` dataset, loaders.

The names below are imported on first use (PEP 562): the workflow reads
:mod:`atat.data.manifest` while Snakemake builds the DAG, and importing the loaders here would
pull torch and torchvision (~3 s) into every dry run.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DEFAULT_AUG": "atat.data.loading",
    "ManifestDataset": "atat.data.loading",
    "build_transform": "atat.data.loading",
    "make_loader": "atat.data.loading",
    "DatasetFormatError": "atat.data.manifest",
    "assign_splits": "atat.data.manifest",
    "read_dataset": "atat.data.manifest",
    "read_meta": "atat.data.manifest",
    "split_indices": "atat.data.manifest",
    "write_dataset": "atat.data.manifest",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'atat.data' has no attribute {name!r}")
