"""One builder per real dataset.  Each module has ``raw_files()`` (the upstream files, their
names in ``raw_dir`` and how to get them) and ``build(raw, root, n_classes, workers=1)``,
which writes the images under ``root/images`` and returns ``(samples, class_names, info)``;
:func:`atat.data.prepare.prepare_dataset` fetches, splits, writes and installs."""

from __future__ import annotations

from types import ModuleType

from atat.data.builders import celeba, facescrub, stanford_dogs

BUILDERS: dict[str, ModuleType] = {
    "facescrub": facescrub,
    "celeba": celeba,
    "stanford_dogs": stanford_dogs,
}
SOURCES = tuple(BUILDERS)
