"""The committed lock file ``data/checksums.lock.yaml``: what is known of every raw dataset
file (keys ``<source>/<file name>``) and pretrained weight file (keys
``weights/<kind>/<file name>``) -- ``size``, ``sha256`` and/or ``md5``, optional ``url``,
``note`` and ``recorded``.

Its YAML layout is the project's own (pooch's registry is a ``name hash`` text file with one
hash per file and no room for sizes, notes or the first-use record), so reading and
recording live here.  A file without a sha256 has its sha256 and size *recorded* at its
first download or first use (:func:`record_first_checksum`) -- by the caller, once the file
has passed every check (for a dataset: once the dataset built from it is complete) --
re-read under a directory lock and replaced atomically, for the user to review and commit."""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from atat.base.fetch.verify import ChecksumError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[4]
DEFAULT_LOCK_FILE = REPO_ROOT / "data" / "checksums.lock.yaml"
LOCK_VERSION = 1

LOCK_HEADER = """\
# Checksums of the raw dataset files used by atat.data.prepare (rule prepare_dataset).
# Keys are <source>/<file name> in <resources_dir>/raw/<source>/.  Every hash or size given
# here is enforced: a mismatch stops the workflow and names the file and both hashes.
# Files without a sha256 get one recorded (sha256 + size + 'recorded') at their first
# download, or first use when placed by hand: review such changes and commit this file.
# This file is rewritten by the workflow; keep notes in 'note:' fields, not in comments.
"""


class LockFileError(ValueError):
    """The lock file is not valid YAML or does not have the expected layout."""


def load_lock(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The ``files`` mapping of the lock file (empty if the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise LockFileError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("files", {}) or {}, dict):
        raise LockFileError(f"{path}: expected a mapping with a 'files' mapping")
    if data.get("version", LOCK_VERSION) != LOCK_VERSION:
        raise LockFileError(f"{path}: unsupported lock file version {data.get('version')!r}")
    files = data.get("files") or {}
    for key, entry in files.items():
        if entry is None:
            files[key] = {}
        elif not isinstance(entry, dict):
            raise LockFileError(f"{path}: entry {key!r} must be a mapping")
    return files


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """Exclusive advisory lock on a directory (serialises lock-file updates of parallel jobs)."""
    fd = None
    try:
        import fcntl

        fd = os.open(directory, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError) as e:  # e.g. some network file systems
        log.warning("could not lock %s (%s); updating the lock file without a lock", directory, e)
        if fd is not None:
            os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the flock


def record_in_lock(lock_file: Path, key: str, fields: Mapping[str, Any]) -> None:
    """Add ``fields`` to entry ``key`` of the lock file (re-read under a lock, atomic replace)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with _dir_lock(lock_file.parent):
        files = load_lock(lock_file)
        entry = dict(files.get(key) or {})
        if entry.get("sha256") and entry["sha256"] != fields.get("sha256"):
            raise ChecksumError(
                f"{lock_file}: {key} was recorded meanwhile with sha256 {entry['sha256']}, "
                f"but this file has sha256 {fields.get('sha256')}")
        entry.update(fields)
        files[key] = entry
        text = LOCK_HEADER + yaml.safe_dump({"version": LOCK_VERSION, "files": files},
                                            sort_keys=True, default_flow_style=False, width=100)
        fd, tmp = tempfile.mkstemp(prefix=f".{lock_file.name}.", suffix=".tmp", dir=lock_file.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            if lock_file.exists():
                os.chmod(tmp, lock_file.stat().st_mode & 0o777)
            else:
                os.chmod(tmp, 0o644)
            os.replace(tmp, lock_file)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def record_first_checksum(lock_file: str | os.PathLike[str], key: str, actual: Mapping[str, Any],
                          url: str, downloaded: bool, with_url: bool = False) -> None:
    """Record the sha256/size of a file seen for the first time (no published checksum) in
    the lock file, for the user to review and commit; a read-only lock file only warns."""
    origin = f"first download from {url}" if downloaded else "first use of the file found in place"
    fields = {"sha256": actual["sha256"], "size": actual["size"],
              **({"url": url} if with_url else {}), "recorded": f"{_now()} {origin}"}
    try:
        record_in_lock(Path(lock_file), key, fields)
        log.warning("recorded sha256 %s, size %d for %s in %s -- please review and commit",
                    actual["sha256"], actual["size"], key, lock_file)
    except OSError as e:
        log.warning("could not record the checksum of %s in %s (%s): sha256 %s, size %d",
                    key, lock_file, e, actual["sha256"], actual["size"])
