"""FaceScrub builder (docs/sources.md#facescrub).

Kaggle ``rajnishe/facescrub-full`` (``facescrub-full.zip``).  The authors extract it with
:mod:`zipfile` and read it with two torchvision ``ImageFolder``\\ s, so the class names
here are the folder names *exactly as* :mod:`zipfile` *decodes them* (UTF-8 when the
member's UTF-8 flag is set, otherwise cp437 -- this is where the "mis-encoded" names come
from, e.g. ``Jos├⌐`` for the UTF-8 bytes of ``José``); they are kept verbatim (always
valid Unicode, so valid UTF-8 in the CSV).  Classes: ``actor_faces`` folders sorted, then
``actress_faces`` folders sorted (530 = 265 + 265); samples in ``ImageFolder`` order
(classes in label order, inside a class ``sorted(os.walk(...))`` roots and sorted file
names, files ending in a torchvision image extension).  Image files are written to
``images/<label:04d>/<k:05d>.<ext>`` (the original member names are listed in
``sources.csv``), so odd characters never reach a path; ``identity`` keeps the name.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence
import zipfile

from atat.data.builders.archives import (IMG_EXTENSIONS, RawDataError, RawFile, write_image_member,
                                         zip_infos)

KAGGLE_DATASET = "rajnishe/facescrub-full"
KAGGLE_DATASET_URL = f"https://www.kaggle.com/api/v1/datasets/download/{KAGGLE_DATASET}"


def raw_files() -> list[RawFile]:
    """The raw files FaceScrub needs (read at call time, so the constants can be patched)."""
    return [RawFile(
        "facescrub-full.zip", KAGGLE_DATASET_URL, "zip", "kaggle", KAGGLE_DATASET,
        how=(f"Kaggle dataset {KAGGLE_DATASET} (https://www.kaggle.com/datasets/{KAGGLE_DATASET}); "
             f"e.g. `kaggle datasets download {KAGGLE_DATASET}` or "
             f"`curl -L -o facescrub-full.zip {KAGGLE_DATASET_URL}` (may need a Kaggle account)"),
    )]


def _find_root(infos: Sequence[tuple[tuple[str, ...], Any]], folder: str, archive: Path) -> tuple[str, ...]:
    roots = set()
    for parts, info in infos:
        is_dir = info.is_dir() if hasattr(info, "is_dir") else info.isdir()
        comps = parts if is_dir else parts[:-1]
        if folder in comps:
            roots.add(comps[: comps.index(folder) + 1])
    if len(roots) != 1:
        raise RawDataError(f"{archive}: expected exactly one '{folder}/' folder, found "
                           f"{sorted('/'.join(r) for r in roots) or 'none'}")
    return roots.pop()


def _image_folder(infos: Sequence[tuple[tuple[str, ...], zipfile.ZipInfo]], root: tuple[str, ...],
                  archive: Path) -> list[tuple[str, list[zipfile.ZipInfo]]]:
    """torchvision ImageFolder over the extracted ``root``: [(class, [members in order])]."""
    n = len(root)
    classes: dict[str, list[tuple[str, str, zipfile.ZipInfo]]] = {}
    for parts, info in infos:
        if parts[:n] != root or len(parts) <= n:
            continue
        rel = parts[n:]
        if info.is_dir():
            classes.setdefault(rel[0], [])
            continue
        if len(rel) < 2:  # a file directly in actor_faces/: not a class, ImageFolder ignores it
            continue
        files = classes.setdefault(rel[0], [])
        if rel[-1].lower().endswith(IMG_EXTENSIONS):
            files.append(("/".join(rel[:-1]), rel[-1], info))
    out = []
    for cls in sorted(classes):  # ImageFolder.find_classes: sorted(scandir names)
        # make_dataset: for root, _, fnames in sorted(os.walk(class_dir)): for f in sorted(fnames)
        members = [info for _, _, info in sorted(classes[cls], key=lambda t: (t[0], t[1]))]
        if not members:
            raise RawDataError(f"{archive}: class folder {'/'.join(root + (cls,))!r} holds no image file "
                               f"(extensions {', '.join(IMG_EXTENSIONS)}); torchvision's ImageFolder refuses this")
        out.append((cls, members))
    return out


def build(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                    workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the FaceScrub images under ``root/images``; return (samples, class_names, info)."""
    archive = Path(raw["facescrub-full.zip"]["path"])
    with zipfile.ZipFile(archive) as zf:
        infos = zip_infos(zf, archive)
        groups = [("actor_faces", _image_folder(infos, _find_root(infos, "actor_faces", archive), archive)),
                  ("actress_faces", _image_folder(infos, _find_root(infos, "actress_faces", archive), archive))]
        class_names = [cls for _, folder in groups for cls, _ in folder]
        if n_classes is not None and len(class_names) != int(n_classes):
            raise RawDataError(f"{archive}: found {len(class_names)} classes "
                               f"({len(groups[0][1])} actors + {len(groups[1][1])} actresses), "
                               f"expected n_classes={n_classes}")
        dup = [c for c, k in Counter(class_names).items() if k > 1]
        if dup:
            raise RawDataError(f"{archive}: folder name(s) {dup} occur among both actors and actresses")
        samples: list[tuple[str, int]] = []
        sources: list[tuple[str, str]] = []
        label = 0
        for _, folder in groups:
            for _cls, members in folder:
                d = root / "images" / f"{label:04d}"
                d.mkdir(parents=True)
                for k, info in enumerate(members):
                    ext = write_image_member(lambda info=info: zf.open(info), d / f"{k:05d}", info.filename,
                                              f"{archive}:{info.filename}")
                    rel = f"images/{label:04d}/{k:05d}{ext}"
                    samples.append((rel, label))
                    sources.append((rel, info.filename))
                label += 1
    _write_sources(root, sources)
    info = {
        "origin": f"Kaggle {KAGGLE_DATASET} (docs/sources.md#facescrub)",
        "n_actors": len(groups[0][1]),
        "n_actresses": len(groups[1][1]),
        "class_order": "actor_faces folders sorted, then actress_faces folders sorted (names as zipfile decodes them)",
        "sample_order": "torchvision ImageFolder order over actor_faces, then actress_faces",
        "sources_file": "sources.csv",
    }
    return samples, class_names, info


def _write_sources(root: Path, rows: Sequence[tuple[str, str]]) -> None:
    with open(root / "sources.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["path", "source"])
        w.writerows(rows)

