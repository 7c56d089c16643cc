"""Datasets in one on-disk manifest format, the synthetic ``synthfaces`` dataset, loaders."""

from atat.data.loading import DEFAULT_AUG, ManifestDataset, build_transform, make_loader
from atat.data.manifest import (
    DatasetFormatError,
    assign_splits,
    read_dataset,
    read_meta,
    split_indices,
    write_dataset,
)

__all__ = [
    "DEFAULT_AUG",
    "DatasetFormatError",
    "ManifestDataset",
    "assign_splits",
    "build_transform",
    "make_loader",
    "read_dataset",
    "read_meta",
    "split_indices",
    "write_dataset",
]
