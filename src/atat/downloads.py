"""Downloads into the shared cache: to a temporary name, verified, then renamed, so many
jobs starting at once never see a partial file and a corrupt download never becomes an
output. Files already in place (offline clusters) are verified and used without network."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class ChecksumError(RuntimeError):
    """A file's hash does not match the expected one."""


def sha256sum(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: str | Path, *, sha256: str | None = None, sha256_prefix: str | None = None,
           size: int | None = None) -> str:
    """Check size and (prefix of) sha256; return the full hash. Raise naming file and hashes."""
    path = Path(path)
    if size is not None and path.stat().st_size != size:
        raise ChecksumError(f"{path}: size {path.stat().st_size} bytes, expected {size} "
                            "(truncated or wrong file)")
    digest = sha256sum(path)
    expected = sha256 or sha256_prefix
    if expected and not digest.startswith(expected.lower()):
        raise ChecksumError(f"{path}: sha256 {digest} does not match expected {expected}")
    return digest


class OfflineMissingFileError(FileNotFoundError):
    """Offline mode and a required file is not in place."""


def fetch(url: str, dest: str | Path, *, sha256: str | None = None,
          sha256_prefix: str | None = None, size: int | None = None,
          offline: bool = False) -> Path:
    """Download ``url`` to ``dest`` unless it is already there; verify either way. With
    ``offline`` the network is never used: a missing file is an error naming where to put it."""
    dest = Path(dest)
    if dest.exists():
        verify(dest, sha256=sha256, sha256_prefix=sha256_prefix, size=size)
        log.info("using %s already in place", dest)
        return dest
    if offline:
        raise OfflineMissingFileError(f"offline mode: {dest} is missing; download {url} on a "
                                      f"machine with internet and place it at {dest}")
    from torch.hub import download_url_to_file

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    try:
        log.info("downloading %s -> %s", url, dest)
        download_url_to_file(url, tmp, progress=True)
        verify(tmp, sha256=sha256, sha256_prefix=sha256_prefix, size=size)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def torchvision_hash_prefix(url: str) -> str:
    """torchvision weight files are named <arch>-<first hex digits of sha256>.pth."""
    stem = Path(url).name.rsplit(".", 1)[0]
    return stem.rsplit("-", 1)[-1]
