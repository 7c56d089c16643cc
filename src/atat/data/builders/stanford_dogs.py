"""Stanford Dogs builder (docs/sources.md#stanford-dogs).

``images.tar``, ``annotation.tar``, ``lists.tar``.  Samples = ``train_list.mat`` then
``test_list.mat`` (``annotation_list``; label = ``labels`` - 1); classes = the sorted
folders of ``Images/`` (the ``ImageFolder`` classes), class name = folder name after the
first ``-``.  Every image is converted to RGB, cropped to the **first** ``<object>``'s
``bndbox`` (xmin, ymin, xmax, ymax; ``PIL.Image.crop``) and saved losslessly as PNG.
"""

from __future__ import annotations

import io
import re
import tarfile
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from atat.data.builders.archives import IMG_EXTENSIONS, RawDataError, RawFile, expect, tar_members

STANFORD_DOGS_BASE_URL = "http://vision.stanford.edu/aditya86/ImageNetDogs"
# Facts of the real files, used as cross-checks when the verified upstream file is used.
STANFORD_DOGS_LISTS_SHA256 = "34b47cacd9a98b5d150e084f24d29391c084c55272295ec65c85651bc35f4d6c"
STANFORD_DOGS_EXPECTED = {"n_samples": 20_580, "n_classes": 120}


def raw_files() -> list[RawFile]:
    """The raw files Stanford Dogs needs (read at call time, so the base URL can be patched)."""
    return [RawFile(n, f"{STANFORD_DOGS_BASE_URL}/{n}", "tar", "http",
                    how=f"`wget {STANFORD_DOGS_BASE_URL}/{n}`")
            for n in ("images.tar", "annotation.tar", "lists.tar")]


def _mat_strings(arr: Any) -> list[str]:
    out = []
    for item in np.asarray(arr, dtype=object).ravel():
        while isinstance(item, np.ndarray):
            if item.size != 1:
                raise RawDataError(f"unexpected cell content of shape {item.shape} in a .mat list")
            item = item.ravel()[0]
        out.append(str(item))
    return out


def _read_mat_list(data: bytes, what: str) -> tuple[list[str], list[int]]:
    import scipy.io

    try:
        mat = scipy.io.loadmat(io.BytesIO(data))
    except Exception as e:  # scipy raises a variety of errors for bad files
        raise RawDataError(f"{what}: cannot read the .mat file ({e})") from None
    for key in ("annotation_list", "labels"):
        if key not in mat:
            raise RawDataError(f"{what}: no field {key!r} (fields: {sorted(k for k in mat if not k.startswith('__'))})")
    names = _mat_strings(mat["annotation_list"])
    labels_f = np.asarray(mat["labels"], dtype=float).ravel()
    if len(labels_f) != len(names) or not np.all(labels_f == np.round(labels_f)) or labels_f.min(initial=1) < 1:
        raise RawDataError(f"{what}: 'labels' must be {len(names)} integers >= 1")
    return names, [int(v) - 1 for v in labels_f]


def _first_box(xml_bytes: bytes, what: str) -> tuple[int, int, int, int]:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as e:
        raise RawDataError(f"{what}: invalid XML ({e})") from None
    for obj in root.iter("object"):  # the first <object> in document order
        bb = obj.find("bndbox")
        try:
            box = tuple(int(bb.find(k).text) for k in ("xmin", "ymin", "xmax", "ymax"))  # type: ignore[union-attr]
        except (AttributeError, TypeError, ValueError):
            raise RawDataError(f"{what}: first <object> has no integer bndbox xmin/ymin/xmax/ymax") from None
        if box[2] <= box[0] or box[3] <= box[1]:
            raise RawDataError(f"{what}: empty bounding box {box}")
        return box  # type: ignore[return-value]
    raise RawDataError(f"{what}: no <object> bounding box")


def _crop_to_png(data: bytes, box: tuple[int, int, int, int], dest: Path, what: str) -> None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.convert("RGB").crop(box).save(dest, format="PNG")
    except OSError as e:
        raise RawDataError(f"{what}: not a readable image ({e})") from None


def _run_bounded(tasks: Iterable[Callable[[], None]], workers: int) -> None:
    """Run callables on ``workers`` threads with a bounded queue; re-raise the first error."""
    if workers <= 1:
        for t in tasks:
            t()
        return
    with ThreadPoolExecutor(max_workers=workers) as ex:
        pending: set = set()
        try:
            for t in tasks:
                pending.add(ex.submit(t))
                if len(pending) >= 4 * workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()
            for f in pending:
                f.result()
        except BaseException:
            for f in pending:
                f.cancel()
            raise


def _tar_index(members: Sequence[tuple[tuple[str, ...], tarfile.TarInfo]], folder: str,
               archive: Path) -> tuple[dict[str, tarfile.TarInfo], set[str]]:
    """Regular files below ``folder/`` keyed by their path relative to it; plus the subfolders."""
    files: dict[str, tarfile.TarInfo] = {}
    dirs: set[str] = set()
    roots = {parts[: parts.index(folder) + 1] for parts, m in members
             if folder in (parts if m.isdir() else parts[:-1])}
    if len(roots) != 1:
        raise RawDataError(f"{archive}: expected exactly one '{folder}/' folder, found "
                           f"{sorted('/'.join(r) for r in roots) or 'none'}")
    root = roots.pop()
    n = len(root)
    for parts, m in members:
        if parts[:n] != root or len(parts) <= n:
            continue
        rel = parts[n:]
        if m.isdir():
            dirs.add(rel[0])
        else:
            if len(rel) >= 2:
                dirs.add(rel[0])
            files["/".join(rel)] = m
    return files, dirs


def build(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                        workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the cropped Stanford Dogs images under ``root/images``; return (samples, class_names, info)."""
    lists_tar = Path(raw["lists.tar"]["path"])
    with tarfile.open(lists_tar, "r:*") as tf:
        members = {parts[-1]: m for parts, m in tar_members(tf, lists_tar) if m.isfile()}
        lists = {}
        for split in ("train_list.mat", "test_list.mat"):
            if split not in members:
                raise RawDataError(f"{lists_tar}: no member {split}")
            with tf.extractfile(members[split]) as f:  # type: ignore[union-attr]
                lists[split] = _read_mat_list(f.read(), f"{lists_tar}:{split}")
    names = lists["train_list.mat"][0] + lists["test_list.mat"][0]
    labels = lists["train_list.mat"][1] + lists["test_list.mat"][1]
    if len(set(names)) != len(names):
        raise RawDataError(f"{lists_tar}: an image occurs twice in train_list + test_list")

    images_tar = Path(raw["images.tar"]["path"])
    ann_tar = Path(raw["annotation.tar"]["path"])
    with tarfile.open(images_tar, "r:*") as itf, tarfile.open(ann_tar, "r:*") as atf:
        img_files, class_dirs = _tar_index(tar_members(itf, images_tar), "Images", images_tar)
        ann_files, _ = _tar_index(tar_members(atf, ann_tar), "Annotation", ann_tar)
        classes = sorted(class_dirs)  # ImageFolder(root/Images).classes
        n_img = sum(1 for k in img_files if "/" in k and k.lower().endswith(IMG_EXTENSIONS))
        if n_img != len(names):
            # the authors' split shuffles range(len(ImageFolder(Images))) over the list samples
            raise RawDataError(f"{images_tar}: {n_img} images under Images/ but {len(names)} samples in "
                               "train_list + test_list; the authors' split needs them to agree")
        if n_classes is not None and len(classes) != int(n_classes):
            raise RawDataError(f"{images_tar}: {len(classes)} class folders, expected n_classes={n_classes}")
        if raw["lists.tar"].get("sha256") == STANFORD_DOGS_LISTS_SHA256:
            expect(len(names) == STANFORD_DOGS_EXPECTED["n_samples"]
                    and len(classes) == STANFORD_DOGS_EXPECTED["n_classes"],
                    f"{lists_tar}: {len(names)} samples, {len(classes)} classes; the official "
                    f"lists give {STANFORD_DOGS_EXPECTED} (docs/sources.md#stanford-dogs)")
        for a, lab in zip(names, labels):
            folder = a.split("/", 1)[0]
            if lab >= len(classes) or folder != classes[lab]:
                raise RawDataError(f"{lists_tar}: sample {a!r} has label {lab + 1} but class folder "
                                   f"{lab + 1} is {classes[lab] if lab < len(classes) else 'missing'!r}")
        for c in range(len(classes)):
            (root / "images" / f"{c:04d}").mkdir(parents=True)

        samples: list[tuple[str, int]] = []

        def tasks() -> Iterator[Callable[[], None]]:
            for a, lab in zip(names, labels):
                ann = ann_files.get(a)
                img = img_files.get(a + ".jpg")
                if ann is None or not ann.isfile():
                    raise RawDataError(f"{ann_tar}: no annotation file Annotation/{a}")
                if img is None or not img.isfile():
                    raise RawDataError(f"{images_tar}: no image file Images/{a}.jpg")
                with atf.extractfile(ann) as f:  # type: ignore[union-attr]
                    box = _first_box(f.read(), f"{ann_tar}:{ann.name}")
                with itf.extractfile(img) as f:  # type: ignore[union-attr]
                    data = f.read()
                stem = re.sub(r"[^A-Za-z0-9._-]", "_", PurePosixPath(a).name)
                rel = f"images/{lab:04d}/{stem}.png"
                samples.append((rel, lab))
                yield (lambda data=data, box=box, rel=rel, what=f"{images_tar}:{img.name}":
                       _crop_to_png(data, box, root / rel, what))

        _run_bounded(tasks(), max(1, int(workers)))
    class_names = [c.split("-", 1)[-1] for c in classes]
    info = {
        "origin": ("Stanford Dogs images.tar, annotation.tar, lists.tar "
                   "(docs/sources.md#stanford-dogs)"),
        "cropped": "first bounding box of the XML annotation (PIL crop xmin, ymin, xmax, ymax), RGB, PNG",
        "class_folders": classes,
        "class_order": "sorted Images/ folders (labels = .mat labels - 1); name after the first '-'",
        "sample_order": "train_list.mat annotation_list, then test_list.mat annotation_list",
        "n_train_list": len(lists["train_list.mat"][0]),
        "n_test_list": len(lists["test_list.mat"][0]),
    }
    return samples, class_names, info

