"""Atomic file output: every artefact is written to a temporary name in the same
directory and renamed into place, so an interrupted job never leaves a file that
looks complete."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp creates 0600; give the usual umask-based mode
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def install_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Move a completely built directory ``tmp`` to ``out`` (replacing an existing one), so a
    reader never sees a half-written directory at ``out``."""
    tmp, out = Path(tmp), Path(out)
    os.chmod(tmp, 0o755)
    old = None
    if out.exists():
        if any(out.iterdir()):
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        else:
            out.rmdir()
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    return json.loads(Path(path).read_text())


def torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Save atomically. Written through a file object, so the zip's record prefix is torch's
    fixed "archive/" rather than the (random) temporary file's name: the same object gives the
    same bytes wherever and whenever it is saved."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        torch.save(obj, handle)


def torch_load(path: str | os.PathLike[str]) -> Any:
    """Load a checkpoint written by this package (tensors and plain containers only)."""
    return torch.load(path, map_location="cpu", weights_only=True)
