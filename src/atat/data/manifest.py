"""The single on-disk dataset format used by every dataset of the workflow.

A *dataset root* is a directory holding

``manifest.csv``
    One row per image, columns exactly ``path,label,identity,split``:

    * ``path``     -- POSIX path of the image file relative to the root;
    * ``label``    -- integer class index ``0..C-1``;
    * ``identity`` -- class name (``class_names[label]``);
    * ``split``    -- ``train``, ``val`` or ``test`` for a private (target) dataset,
      ``public`` for an attacker's public pool.

``meta.json``
    ``{"format_version": 1, "name", "n_classes", "class_names" (index order),
    "resolution": [H, W] or null, "counts": {split: n}, "split_seed", "source", ...}``
    plus any extra keys.

the image files (PNG/JPEG) anywhere below the root.

Downstream code only ever calls :func:`read_dataset` (or :mod:`atat.data.loading`), so
it never needs to know which dataset it reads.

Split rule (docs/sources.md#seeds-and-splits, identical for every dataset): a 90/10
train/test split with the NumPy *legacy* RNG (``seed(42)``; in-place shuffle of the index
list ``list(range(N))``; the first ``int(0.9 N)`` shuffled indices are ``train_full``,
the rest ``test``), then an 80/20 train/val split of ``train_full`` exactly as
``torch.utils.data.random_split`` does it: ``perm = randperm(len(train_full),
generator=Generator().manual_seed(42))``; ``val_size = len - int(0.8 len)``; the **last**
``val_size`` permuted positions are ``val``, the others ``train``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from atat.base.io import atomic_path

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.csv"
META_NAME = "meta.json"
COLUMNS = ("path", "label", "identity", "split")
PRIVATE_SPLITS = ("train", "val", "test")
PUBLIC_SPLIT = "public"
ALL_SPLITS = PRIVATE_SPLITS + (PUBLIC_SPLIT,)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: a split's decoded images are kept in memory when they need at most this many bytes
#: (atat.data.loading.ManifestDataset; torch-free here for the cost model, atat.plan.job_cost)
DEFAULT_CACHE_MAX_BYTES = 1 << 30
REQUIRED_META_KEYS = (
    "format_version",
    "name",
    "n_classes",
    "class_names",
    "resolution",
    "counts",
    "split_seed",
    "source",
)

__all__ = [
    "ALL_SPLITS",
    "COLUMNS",
    "DatasetFormatError",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "META_NAME",
    "PRIVATE_SPLITS",
    "PUBLIC_SPLIT",
    "STAMP_SUFFIX",
    "assign_splits",
    "check_stamp",
    "dataset_fingerprint",
    "dataset_folder",
    "read_dataset",
    "read_meta",
    "split_indices",
    "stamp_path",
    "write_dataset",
    "write_stamp",
]


class DatasetFormatError(ValueError):
    """A dataset root does not follow the manifest format (message names file and problem)."""


# --------------------------------------------------------------------------------------
# splits
# --------------------------------------------------------------------------------------
def split_indices(
    n: int,
    seed: int = 42,
    test_fraction: float = 0.1,
    val_fraction: float = 0.2,
) -> dict[str, np.ndarray]:
    """Indices of the train / val / test splits of ``range(n)`` (docs/sources.md#seeds-and-splits).

    Returned in the order the rule produces them (not sorted), as int64 arrays:
    ``test`` in shuffled order, ``train``/``val`` in ``randperm`` order.
    ``len(train) == int((1-val_fraction) * int((1-test_fraction) * n))``.
    """
    import torch  # local: only this function needs torch

    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not (0.0 <= test_fraction < 1.0 and 0.0 <= val_fraction < 1.0):
        raise ValueError("test_fraction and val_fraction must lie in [0, 1)")
    # 90/10: NumPy legacy RNG; a local RandomState(seed) yields the same stream as
    # np.random.seed(seed) and leaves the global state alone.  Shuffle a *list*, as the
    # original code does.
    idx = list(range(n))
    np.random.RandomState(seed).shuffle(idx)
    n_train_full = int((1.0 - test_fraction) * n)
    train_full = np.asarray(idx[:n_train_full], dtype=np.int64)
    test = np.asarray(idx[n_train_full:], dtype=np.int64)
    # 80/20: torch.utils.data.random_split(train_full, [train_size, val_size], generator)
    m = len(train_full)
    train_size = int((1.0 - val_fraction) * m)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(m, generator=g).numpy().astype(np.int64)
    train = train_full[perm[:train_size]]
    val = train_full[perm[train_size:]]
    return {"train": train, "val": val, "test": test}


def assign_splits(
    labels_or_n: int | Sequence[Any] | np.ndarray,
    seed: int = 42,
    test_fraction: float = 0.1,
    val_fraction: float = 0.2,
) -> list[str]:
    """Split name (``train``/``val``/``test``) of every item, by :func:`split_indices`.

    ``labels_or_n`` is either the number of items or any sequence whose length is used
    (the split is not stratified, exactly as in the paper's code).
    """
    n = int(labels_or_n) if isinstance(labels_or_n, (int, np.integer)) else len(labels_or_n)
    out = [""] * n
    for name, ids in split_indices(n, seed, test_fraction, val_fraction).items():
        for i in ids:
            out[int(i)] = name
    return out


# --------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------
def _check_columns(df: pd.DataFrame, where: str) -> None:
    if tuple(df.columns) != COLUMNS:
        raise DatasetFormatError(
            f"{where}: columns must be exactly {','.join(COLUMNS)}, got {','.join(map(str, df.columns))}"
        )


def _check_paths(paths: pd.Series, where: str) -> None:
    bad = []
    for p in paths:
        s = str(p)
        pp = PurePosixPath(s)
        if (
            not s
            or "\\" in s
            or pp.is_absolute()
            or ".." in pp.parts
            or str(pp) != s
            or pp.suffix.lower() not in IMAGE_SUFFIXES
        ):
            bad.append(s)
    if bad:
        raise DatasetFormatError(
            f"{where}: {len(bad)} invalid image path(s) (need normalised relative POSIX paths "
            f"ending in {'/'.join(IMAGE_SUFFIXES)}), e.g. {bad[:3]}"
        )
    dup = paths[paths.duplicated()]
    if len(dup):
        raise DatasetFormatError(f"{where}: {len(dup)} duplicated path(s), e.g. {list(dup[:3])}")


def _check_rows(df: pd.DataFrame, class_names: Sequence[str] | None, where: str) -> None:
    _check_columns(df, where)
    if len(df) == 0:
        raise DatasetFormatError(f"{where}: the dataset has no rows")
    if df[list(COLUMNS)].isna().any().any():
        raise DatasetFormatError(f"{where}: empty cells in the manifest")
    labels = df["label"]
    if not pd.api.types.is_integer_dtype(labels):
        raise DatasetFormatError(f"{where}: column 'label' must hold integers, got dtype {labels.dtype}")
    unknown = sorted(set(df["split"]) - set(ALL_SPLITS))
    if unknown:
        raise DatasetFormatError(f"{where}: unknown split value(s) {unknown}; allowed: {list(ALL_SPLITS)}")
    splits = set(df["split"])
    if PUBLIC_SPLIT in splits and splits != {PUBLIC_SPLIT}:
        raise DatasetFormatError(
            f"{where}: a dataset is either private (train/val/test) or public; found splits {sorted(splits)}"
        )
    present = np.unique(labels.to_numpy())
    n_classes = int(present.max()) + 1 if len(present) else 0
    if present.min() < 0 or len(present) != n_classes:
        missing = sorted(set(range(n_classes)) - set(present.tolist()))
        raise DatasetFormatError(
            f"{where}: labels must be contiguous 0..C-1; min {present.min()}, max {present.max()}, "
            f"missing {missing[:10]}"
        )
    _check_paths(df["path"], where)
    if class_names is not None:
        if len(class_names) != n_classes:
            raise DatasetFormatError(
                f"{where}: len(class_names)={len(class_names)} but labels span {n_classes} classes"
            )
        names = np.asarray(list(class_names), dtype=object)
        mismatch = df["identity"].to_numpy(dtype=object) != names[labels.to_numpy()]
        if mismatch.any():
            i = int(np.flatnonzero(mismatch)[0])
            raise DatasetFormatError(
                f"{where}: {int(mismatch.sum())} row(s) whose identity != class_names[label], e.g. row {i}: "
                f"identity={df['identity'].iloc[i]!r}, label={labels.iloc[i]} -> {names[labels.iloc[i]]!r}"
            )


def _check_files_exist(root: Path, paths: Sequence[str], where: str) -> None:
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise DatasetFormatError(
            f"{where}: {len(missing)} of {len(paths)} image file(s) listed in the manifest are missing "
            f"under {root}, e.g. {missing[:5]}"
        )


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _to_jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        raise DatasetFormatError(f"meta.json: non-finite float {obj!r}")
    return obj


# --------------------------------------------------------------------------------------
# write / read
# --------------------------------------------------------------------------------------
def write_dataset(root: str | os.PathLike[str], records: pd.DataFrame, meta: Mapping[str, Any]) -> dict:
    """Validate and write ``manifest.csv`` + ``meta.json`` of the dataset at ``root``.

    ``records`` has the columns ``path,label,identity,split`` (row order is kept); the
    image files must already exist under ``root``.  ``meta`` must give ``name``,
    ``class_names`` and ``source``; ``split_seed`` defaults to 42 and ``resolution`` to
    ``None``.  ``format_version``, ``n_classes`` and ``counts`` are filled in (and, if
    given, must agree with the records).  Both files are written atomically (temporary
    file in ``root`` + ``os.replace``); ``meta.json`` is written last.  Returns the meta
    dict as written.
    """
    root = Path(root)
    where = f"write_dataset({root})"
    if not root.is_dir():
        raise DatasetFormatError(f"{where}: dataset root does not exist or is not a directory")
    if not isinstance(records, pd.DataFrame):
        raise TypeError("records must be a pandas DataFrame")
    missing_cols = [c for c in COLUMNS if c not in records.columns]
    if missing_cols:
        raise DatasetFormatError(f"{where}: records lack column(s) {missing_cols}")
    df = records[list(COLUMNS)].reset_index(drop=True).copy()
    df["path"] = df["path"].astype(str)
    df["identity"] = df["identity"].astype(str)
    df["split"] = df["split"].astype(str)
    if pd.api.types.is_float_dtype(df["label"]) and (df["label"] % 1 == 0).all():
        df["label"] = df["label"].astype(np.int64)

    meta = dict(meta)
    for key in ("name", "class_names", "source"):
        if key not in meta:
            raise DatasetFormatError(f"{where}: meta lacks required key {key!r}")
    class_names = [str(c) for c in meta["class_names"]]
    if len(set(class_names)) != len(class_names):
        raise DatasetFormatError(f"{where}: class_names are not unique")
    _check_rows(df, class_names, where)
    _check_files_exist(root, list(df["path"]), where)

    n_classes = len(class_names)
    if "n_classes" in meta and int(meta["n_classes"]) != n_classes:
        raise DatasetFormatError(
            f"{where}: meta n_classes={meta['n_classes']} but len(class_names)={n_classes}"
        )
    order = [s for s in ALL_SPLITS if s in set(df["split"])]
    counts = {s: int((df["split"] == s).sum()) for s in order}
    if "counts" in meta and {str(k): int(v) for k, v in dict(meta["counts"]).items()} != counts:
        raise DatasetFormatError(f"{where}: meta counts {meta['counts']} disagree with the records {counts}")
    if meta.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise DatasetFormatError(f"{where}: can only write format_version {FORMAT_VERSION}")
    res = meta.get("resolution")
    if res is not None:
        if isinstance(res, (int, np.integer)):
            res = [int(res), int(res)]
        res = [int(r) for r in res]
        if len(res) != 2 or min(res) <= 0:
            raise DatasetFormatError(f"{where}: resolution must be [H, W] or null, got {meta['resolution']}")

    out = {
        "format_version": FORMAT_VERSION,
        "name": str(meta["name"]),
        "n_classes": n_classes,
        "class_names": class_names,
        "resolution": res,
        "counts": counts,
        "split_seed": int(meta.get("split_seed", 42)),
        "source": str(meta["source"]),
    }
    for k, v in meta.items():
        if k not in out:
            out[k] = v
    out = _to_jsonable(out)

    with atomic_path(root / MANIFEST_NAME) as tmp:
        df.to_csv(tmp, index=False, lineterminator="\n")
    text = json.dumps(out, indent=2, sort_keys=False, allow_nan=False, ensure_ascii=False) + "\n"
    with atomic_path(root / META_NAME) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return out


def read_meta(root: str | os.PathLike[str]) -> dict:
    """Read and check ``meta.json`` of a dataset root; a problem names the file and how to
    restore the dataset."""
    with _restore_hint(root):
        return _read_meta(root)


def _read_meta(root: str | os.PathLike[str]) -> dict:
    root = Path(root)
    path = root / META_NAME
    if not root.is_dir():
        raise DatasetFormatError(f"dataset root {root} does not exist or is not a directory")
    if not path.is_file():
        raise DatasetFormatError(f"{path}: missing (not a dataset root in the manifest format)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetFormatError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise DatasetFormatError(f"{path}: top level must be a JSON object")
    missing = [k for k in REQUIRED_META_KEYS if k not in meta]
    if missing:
        raise DatasetFormatError(f"{path}: missing key(s) {missing}")
    if meta["format_version"] != FORMAT_VERSION:
        raise DatasetFormatError(
            f"{path}: format_version {meta['format_version']!r} is not supported (expected {FORMAT_VERSION})"
        )
    if not isinstance(meta["class_names"], list) or len(meta["class_names"]) != meta["n_classes"]:
        raise DatasetFormatError(f"{path}: class_names must be a list of n_classes={meta['n_classes']} names")
    return meta


def read_dataset(
    root: str | os.PathLike[str],
    split: str | None = None,
    *,
    check_files: bool = True,
) -> tuple[pd.DataFrame, dict]:
    """Read a dataset root; return ``(records, meta)``.

    ``records`` has the columns ``path,label,identity,split`` in manifest order (index
    reset), restricted to ``split`` if given.  Raises :class:`DatasetFormatError` naming the
    file and problem for a missing/corrupt manifest or meta, a format_version mismatch, an
    unknown or absent split, or (``check_files``) missing image files, and how to restore it.
    """
    with _restore_hint(root):
        return _read_dataset(root, split, check_files=check_files)


@contextlib.contextmanager
def _restore_hint(root: str | os.PathLike[str]) -> Iterator[None]:
    """A :class:`DatasetFormatError` inside gets the remedy appended: rebuild the dataset of
    ``root`` through its stamp (a root is ``<folder>/private`` or ``<folder>/public``)."""
    try:
        yield
    except DatasetFormatError as e:
        root = Path(root)
        folder = root.parent if root.name in (PUBLIC_SPLIT, "private") else root
        raise DatasetFormatError(f"{e}. {restore_advice(stamp_path(folder))}.") from None


def _read_dataset(root: str | os.PathLike[str], split: str | None,
                  *, check_files: bool) -> tuple[pd.DataFrame, dict]:
    root = Path(root)
    meta = _read_meta(root)
    mpath = root / MANIFEST_NAME
    if not mpath.is_file():
        raise DatasetFormatError(f"{mpath}: missing (not a dataset root in the manifest format)")
    try:
        df = pd.read_csv(
            mpath,
            dtype={"path": str, "identity": str, "split": str},
            keep_default_na=False,
            na_values=[],
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        raise DatasetFormatError(f"{mpath}: cannot be parsed as CSV ({e})") from e
    if "label" in df.columns and not pd.api.types.is_integer_dtype(df["label"]):
        raise DatasetFormatError(f"{mpath}: column 'label' must hold integers")
    _check_rows(df, meta["class_names"], str(mpath))
    counts = {s: int((df["split"] == s).sum()) for s in ALL_SPLITS if (df["split"] == s).any()}
    if {str(k): int(v) for k, v in meta["counts"].items()} != counts:
        raise DatasetFormatError(
            f"{root / META_NAME}: counts {meta['counts']} disagree with {MANIFEST_NAME} {counts}"
        )
    if split is not None:
        if split not in ALL_SPLITS:
            raise DatasetFormatError(f"{root}: unknown split {split!r}; allowed: {list(ALL_SPLITS)}")
        if split not in counts:
            raise DatasetFormatError(
                f"{root}: split {split!r} not present in {MANIFEST_NAME} (available: {list(counts)})"
            )
        df = df[df["split"] == split].reset_index(drop=True)
    if check_files:
        _check_files_exist(root, list(df["path"]), str(mpath))
    return df, meta


# --------------------------------------------------------------------------------------
# the dataset's identity: a stamp file next to the dataset folder
# --------------------------------------------------------------------------------------
#: ``<resources>/datasets/<name>`` (the folder) -> ``<resources>/datasets/<name>.dataset.json``
STAMP_SUFFIX = ".dataset.json"


def stamp_path(folder: str | os.PathLike[str]) -> Path:
    """The stamp of the dataset folder ``folder`` (its sibling ``<name>.dataset.json``)."""
    folder = Path(folder)
    return folder.with_name(folder.name + STAMP_SUFFIX)


def dataset_folder(stamp: str | os.PathLike[str]) -> Path:
    """The dataset folder a stamp (:func:`stamp_path`) stands for."""
    stamp = Path(stamp)
    if not stamp.name.endswith(STAMP_SUFFIX):
        raise ValueError(f"{stamp}: not a dataset stamp (*{STAMP_SUFFIX})")
    return stamp.with_name(stamp.name[: -len(STAMP_SUFFIX)])


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _roots(folder: Path) -> list[Path]:
    """The dataset roots (folders with a manifest) of a dataset folder: ``private``, ``public``
    (synthfaces), or the folder itself."""
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and (p / MANIFEST_NAME).is_file())
    return subs or [folder]


def dataset_fingerprint(folder: str | os.PathLike[str], *, files: bool = True) -> dict:
    """What identifies the dataset in ``folder``: per root the sha256 of ``manifest.csv`` and
    ``meta.json`` and (``files``) the number and total size of the image files the manifest
    lists. Deterministic (no times): the same dataset built again gives the same fingerprint.
    A root that is not a valid dataset raises :class:`DatasetFormatError`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetFormatError(f"{folder}: the dataset folder is missing")
    out: dict[str, Any] = {"format_version": FORMAT_VERSION, "roots": {}}
    for root in _roots(folder):
        entry: dict[str, Any] = {}
        for name in (MANIFEST_NAME, META_NAME):
            if not (root / name).is_file():
                raise DatasetFormatError(f"{root / name}: missing")
            entry[name] = _sha256(root / name)
        if files:
            df, _ = _read_dataset(root, None, check_files=True)
            entry["n_files"] = int(len(df))
            entry["total_bytes"] = int(sum((root / p).stat().st_size for p in df["path"]))
        out["roots"][root.relative_to(folder).as_posix()] = entry
    return out


def write_stamp(folder: str | os.PathLike[str]) -> Path:
    """Check the dataset in ``folder`` (manifest against its files) and write its stamp
    (:func:`stamp_path`) atomically; the stamp is what jobs that read the dataset declare as
    their input, so the dataset's identity is its manifest's checksum, not a folder's mtime."""
    fingerprint = dataset_fingerprint(folder, files=True)
    path = stamp_path(folder)
    text = json.dumps(fingerprint, indent=2, sort_keys=True) + "\n"
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def restore_advice(stamp: str | os.PathLike[str]) -> str:
    """What to do when the folder of ``stamp`` no longer matches it."""
    return (f"Restore the folder without losing what was trained on it: `snakemake {stamp} "
            f"--force` rebuilds only the dataset (the build is deterministic: the same stamp, "
            f"so Snakemake, which compares the stamp's checksum, reruns none of the jobs that "
            f"read it; if the rebuilt dataset differs, they rerun, as they should)")


def check_stamp(stamp: str | os.PathLike[str], *, files: bool = True) -> None:
    """Raise :class:`DatasetFormatError` naming the folder, the stamp, what differs and how to
    restore it, unless the dataset folder of ``stamp`` is the one the stamp records
    (``files``: also every listed image file present, with the recorded total size)."""
    stamp = Path(stamp)
    folder = dataset_folder(stamp)
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DatasetFormatError(f"{stamp}: the dataset stamp cannot be read ({e}); delete it "
                                 f"and run the workflow again (the dataset is rebuilt)") from None
    try:
        found = dataset_fingerprint(folder, files=files)
    except DatasetFormatError as e:
        raise DatasetFormatError(f"dataset {folder} does not match its stamp {stamp}: {e}. "
                                 f"{restore_advice(stamp)}.") from None
    keys = ("manifest.csv", "meta.json") + (("n_files", "total_bytes") if files else ())
    want = {r: {k: e.get(k) for k in keys} for r, e in (recorded.get("roots") or {}).items()}
    have = {r: {k: e.get(k) for k in keys} for r, e in found["roots"].items()}
    if want != have:
        diff = sorted(f"{r}/{k}" for r in set(want) | set(have) for k in keys
                      if (want.get(r) or {}).get(k) != (have.get(r) or {}).get(k))
        raise DatasetFormatError(f"dataset {folder} does not match its stamp {stamp} "
                                 f"(differs: {', '.join(diff)}). {restore_advice(stamp)}.")


def stamp_problems(stamps: Sequence[str | os.PathLike[str]], *, files: bool = True) -> list[str]:
    """The :func:`check_stamp` message of every existing stamp in ``stamps`` whose folder no
    longer matches it (a stamp that does not exist yet is its dataset job's to write)."""
    problems = []
    for stamp in sorted({str(s) for s in stamps}):
        if Path(stamp).exists():
            try:
                check_stamp(stamp, files=files)
            except DatasetFormatError as e:
                problems.append(str(e))
    return problems
