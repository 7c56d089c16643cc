"""Download, verify and convert the three real datasets into the manifest format.

``prepare_dataset(source, raw_dir=..., out_dir=...)`` turns the published archives of
FaceScrub, CelebA (HD crops) or Stanford Dogs into a dataset root in the project's single
format (:mod:`atat.data.manifest`) at ``out_dir/private``, following
docs/sources.md#seeds-and-splits; the per-dataset rules are in :mod:`atat.data.builders`
(``facescrub``, ``celeba``, ``stanford_dogs``), the downloads, verification and lock file in
:mod:`atat.base.fetch`.

The split is :func:`atat.data.manifest.split_indices` over the builder's sample order (90/10, then
80/20, seed ``split_seed``) -- the same rule for all three.

Raw files
    live in ``raw_dir`` under their upstream names (:func:`raw_files`).  Each is verified
    against the committed lock file ``data/checksums.lock.yaml`` (keys ``<source>/<name>``;
    ``size``, ``sha256`` and/or ``md5`` -- whatever is known).  A file with no recorded
    ``sha256`` has its ``sha256`` and ``size`` *recorded* into the lock file after its first
    download (or first use, if it was placed by hand) -- only once the dataset built from it is
    complete, so an archive with the wrong content is never pinned -- atomically, for the user
    to review and commit.  A mismatch (wrong or truncated file) raises :class:`atat.base.fetch.ChecksumError`
    naming the file and both hashes.  Downloads go to a temporary name in ``raw_dir`` and are
    renamed only once verified.  Files already in place are used without any network access;
    with ``offline=True`` the network is never touched and missing files are reported with
    the exact path to place them at and where to get them.
Transports
    :mod:`atat.base.fetch` (pooch for HTTP, gdown for Google Drive, the official Kaggle client;
    Kaggle credentials are the client's: ``KAGGLE_USERNAME``/``KAGGLE_KEY``,
    ``KAGGLE_API_TOKEN`` or ``kaggle.json``, never read, logged or written here).
Safety and atomicity
    Archives with absolute or ``..`` member names are refused as a whole.  Members are never
    extracted to archive-controlled paths: the needed images are streamed straight from the
    archive to ``images/<label>/...`` inside a temporary sibling of ``out_dir`` (so there is
    no intermediate extracted tree to hard-link from and no second copy on disk), and that
    directory is renamed to ``out_dir`` only when the dataset is complete and validated.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from atat.data.builders import BUILDERS, SOURCES
from atat.data.builders.archives import RawDataError, RawFile, UnsafeArchiveError, check_kind
from atat.data.builders.celeba import (CELEBA_HDCROP_GDRIVE_ID, CELEBA_IDENTITY_GDRIVE_ID,
                                       CELEBA_IDENTITY_MD5, select_celeba_identities)
from atat.data.builders.stanford_dogs import STANFORD_DOGS_BASE_URL, STANFORD_DOGS_LISTS_SHA256
from atat.data.manifest import split_indices, write_dataset
from atat.base.fetch import (DEFAULT_LOCK_FILE, ChecksumError, DownloadError, OfflineMissingFileError,
                        load_lock, obtain, record_first_checksum)
from atat.base.io import install_dir, read_json, write_json

log = logging.getLogger(__name__)

__all__ = [
    "CELEBA_HDCROP_GDRIVE_ID",
    "CELEBA_IDENTITY_GDRIVE_ID",
    "CELEBA_IDENTITY_MD5",
    "ChecksumError",
    "DEFAULT_LOCK_FILE",
    "DownloadError",
    "OfflineMissingFileError",
    "RawDataError",
    "RawFile",
    "SOURCES",
    "STANFORD_DOGS_BASE_URL",
    "STANFORD_DOGS_LISTS_SHA256",
    "UnsafeArchiveError",
    "fetch_raw",
    "fetch_raw_record",
    "load_lock",
    "prepare_dataset",
    "raw_files",
    "select_celeba_identities",
]


def raw_files(source: str) -> list[RawFile]:
    """The raw files ``source`` needs (its builder's ``raw_files()``)."""
    if source not in BUILDERS:
        raise ValueError(f"unknown dataset source {source!r}; expected one of {SOURCES}")
    return BUILDERS[source].raw_files()


def fetch_raw(source: str, raw_dir: str | os.PathLike[str], offline: bool = False, *,
              lock_file: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Make sure every raw file of ``source`` is in ``raw_dir`` and verified.

    Files already present are verified and used without network access.  Missing files are
    downloaded (to a temporary name, verified, then renamed) unless ``offline``, in which
    case :class:`OfflineMissingFileError` lists every missing path and where to get the file.
    Returns ``{name: {"path", "sha256", "md5", "size", "unrecorded"}}``; ``unrecorded`` is
    None when the lock file has the file's sha256, else what :func:`record_first_checksum`
    needs -- nothing is written to the lock file here: :func:`prepare_dataset` records a new
    file only once the dataset built from it is complete (a complete archive with the wrong
    content must not be pinned).
    """
    raw_dir = Path(raw_dir)
    lock_file = Path(lock_file) if lock_file is not None else DEFAULT_LOCK_FILE
    files = raw_files(source)
    lock = load_lock(lock_file)
    missing = [rf for rf in files if not (raw_dir / rf.name).is_file()]
    if offline and missing:
        lines = []
        for rf in missing:
            exp = lock.get(f"{source}/{rf.name}") or {}
            known = ", ".join(f"{k} {exp[k]}" for k in ("size", "sha256", "md5") if exp.get(k))
            lines.append(f"  {raw_dir / rf.name}\n      from {rf.url}\n      ({rf.how})"
                         + (f"\n      expected {known}" if known else ""))
        raise OfflineMissingFileError(
            f"offline mode: {len(missing)} raw file(s) of {source} missing. Place them by hand at:\n"
            + "\n".join(lines)
            + f"\nThey are verified against {lock_file} before use.")
    out: dict[str, dict[str, Any]] = {}
    for rf in files:
        dest = raw_dir / rf.name
        key = f"{source}/{rf.name}"
        expected = dict(lock.get(key) or {})
        actual, downloaded = obtain(
            dest, rf.fetcher, rf.ref or rf.url, url=rf.url, expected=expected,
            what=f"lock entry {key} in {lock_file}",
            check=lambda path, shown, kind=rf.kind: check_kind(path, kind, shown_as=shown),
            content_errors=(RawDataError,))
        unrecorded = None if expected.get("sha256") else {"key": key, "url": rf.url,
                                                           "downloaded": downloaded}
        out[rf.name] = {"path": dest, **actual, "unrecorded": unrecorded}
    return out


def fetch_raw_record(source: str, raw_dir: str | os.PathLike[str],
                     record: str | os.PathLike[str], offline: bool = False, *,
                     lock_file: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The half of a dataset that needs the network (rule ``fetch_dataset``, on the login
    node): :func:`fetch_raw`, then ``record`` (JSON, written atomically) names every raw file
    with the sha256 and size it had, and for a file the lock file does not know yet whether
    it was downloaded. :func:`prepare_dataset` given ``fetched=record`` (rule
    ``prepare_dataset``, a compute job without network) builds from exactly these files."""
    files = fetch_raw(source, raw_dir, offline, lock_file=lock_file)
    rec = {"source": source, "raw_dir": str(Path(raw_dir).absolute()),
           "files": {name: {"sha256": v["sha256"], "size": v["size"],
                            "unrecorded": v["unrecorded"]} for name, v in files.items()}}
    write_json(record, rec)
    return rec


def _match_fetch_record(source: str, files: dict[str, dict[str, Any]],
                        fetched: Path) -> None:
    """Check the raw files seen now against the fetch job's ``fetched`` record (the same
    content); a file the lock file does not know keeps the record's download origin."""
    rec = read_json(fetched, advice="delete it and rerun: the fetch job writes it again")
    if rec.get("source") != source:
        raise RawDataError(f"{fetched} records source {rec.get('source')!r}, not {source!r}")
    for name, info in files.items():
        seen = (rec.get("files") or {}).get(name)
        if seen is None or (seen.get("sha256"), seen.get("size")) != (info["sha256"], info["size"]):
            was = ("no entry" if seen is None
                   else f"sha256 {seen.get('sha256')}, {seen.get('size')} bytes")
            raise RawDataError(
                f"{info['path']} is not the file the fetch job verified ({fetched}: {was}; now "
                f"sha256 {info['sha256']}, {info['size']} bytes): it changed after the download. "
                f"Delete {fetched} and rerun; the fetch job verifies the file again.")
        if info.get("unrecorded") and seen.get("unrecorded"):
            info["unrecorded"]["downloaded"] = bool(seen["unrecorded"].get("downloaded"))


def _record_new_files(lock_file: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the sha256/size of the raw files the lock file did not know (after the build)."""
    for info in files.values():
        new = info.get("unrecorded")
        if new:
            record_first_checksum(lock_file, new["key"], info, new["url"], new["downloaded"])


def prepare_dataset(
    source: str,
    *,
    raw_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    split_seed: int = 42,
    n_classes: int | None = None,
    offline: bool = False,
    lock_file: str | os.PathLike[str] | None = None,
    workers: int = 1,
    overwrite: bool = False,
    fetched: str | os.PathLike[str] | None = None,
) -> dict:
    """Fetch/verify the raw files of ``source`` and build the dataset at ``out_dir/private``.

    ``n_classes``: FaceScrub / Stanford Dogs -- the class count the archive must have (None:
    no check); CelebA -- how many most frequent identities to keep (default 1000).
    ``lock_file`` defaults to the repository's ``data/checksums.lock.yaml``.  ``out_dir`` is
    assembled in a temporary sibling directory and renamed into place only when complete;
    it must not exist (or be empty) unless ``overwrite``.  ``fetched``: the record of
    :func:`fetch_raw_record`; the raw files must be the ones it names (same sha256).
    Returns ``{"out_dir", "private": meta, "raw_files": {name: {"sha256", "size"}}}``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown dataset source {source!r}; expected one of {SOURCES}")
    out = Path(out_dir).absolute()
    raw = Path(raw_dir).absolute()
    if raw == out or out in raw.parents:
        raise ValueError(f"raw_dir {raw} must not lie inside out_dir {out}")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True)")
    lock_file = Path(lock_file) if lock_file is not None else DEFAULT_LOCK_FILE
    files = fetch_raw(source, raw, offline, lock_file=lock_file)
    if fetched is not None:
        _match_fetch_record(source, files, Path(fetched))

    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.tmp-*"):  # left by an interrupted earlier run
        log.info("removing stale temporary directory %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        private = tmp / "private"
        private.mkdir()
        log.info("building %s into %s", source, private)
        samples, class_names, info = BUILDERS[source].build(files, private, n_classes, workers=workers)
        df = pd.DataFrame(samples, columns=["path", "label"])
        df["identity"] = [class_names[i] for i in df["label"]]
        df["split"] = ""
        for name, idx in split_indices(len(df), seed=int(split_seed)).items():
            df.loc[idx, "split"] = name
        meta = {
            "name": source,
            "source": source,
            "class_names": class_names,
            "resolution": None,
            "split_seed": int(split_seed),
            "pool": "private",
            **info,
            "raw_files": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in files.items()},
        }
        meta_out = write_dataset(private, df, meta)
        install_dir(tmp, out)
    except RawDataError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        new = [str(v["path"]) for v in files.values() if v.get("unrecorded")]
        if not new:
            raise
        raise type(e)(f"{e}. Not recorded in {lock_file}: {', '.join(new)} -- if that is the "
                      "wrong file, replace or delete it (it is then downloaded again unless "
                      "offline).") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _record_new_files(lock_file, files)  # only now: the dataset built from them is complete
    log.info("%s: %d images, %d classes, counts %s", source, len(df), len(class_names), meta_out["counts"])
    return {"out_dir": str(out), "private": meta_out,
            "raw_files": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in files.items()}}
