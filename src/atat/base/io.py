"""Atomic file output and the one checkpoint reader.

Every artefact is written to a temporary name in the same directory (``.<name>.<random>.tmp``)
and renamed into place, so an interrupted job never leaves a file that looks complete; the
temporaries a killed process left behind are removed by the next writer of that output (and
at the start of every workflow job, ``workflow/scripts/_common.py``). Every torch file of the
project is read with :func:`torch_load`, which names the file and what to do when it is
unreadable; resume checkpoints go through :func:`load_resume`, which moves a corrupt one aside
so that the work starts over instead of failing on every retry."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence


log = logging.getLogger(__name__)

#: when this process started writing (import time of this module): a temporary of an atomic
#: write that is older belongs to an earlier, killed process (no job writes another's outputs)
PROCESS_STARTED = time.time()

REBUILD_ADVICE = ("Delete it and run the workflow again: Snakemake then reruns the job that "
                  "writes it (and the jobs that read it).")
DOWNLOAD_ADVICE = ("Delete it and run the workflow again: it is downloaded and verified again "
                   "(offline: place a good copy at this path).")


class CheckpointError(RuntimeError):
    """A file a job reads (checkpoint, resume state, saved tensors, network pickle, JSON
    record) cannot be read; the message names the file and what to do."""


def unreadable(path: str | os.PathLike[str], error: BaseException,
               advice: str = REBUILD_ADVICE) -> CheckpointError:
    """The one message for a file that exists but cannot be read: the file, the reader's reason
    and ``advice`` (delete it and rerun the rule that makes it / download it again)."""
    reason = (str(error).strip().splitlines() or [""])[0][:300]
    reason = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
    return CheckpointError(f"{path}: cannot be read ({reason}). The file is truncated or "
                           f"corrupt (a job killed while writing it, an incomplete copy or "
                           f"download) or not a file of this workflow. {advice}".rstrip())


def temporaries_of(path: str | os.PathLike[str]) -> list[Path]:
    """The temporaries written for ``path`` (any process, any age): files of
    :func:`atomic_path` (``.<name>.<random>.tmp``), directories being built for a directory
    output (``.<name>.tmp-<random>``) and the old directory :func:`install_dir` moves aside
    (``.<name>.old-<pid>``)."""
    target = Path(path)
    stem = os.path.join(glob.escape(str(target.parent)), f".{glob.escape(target.name)}.")
    return [Path(p) for pattern in ("*.tmp", "tmp-*", "old-*") for p in glob.glob(stem + pattern)]


def remove_stale_temporaries(path: str | os.PathLike[str], older_than: float | None = None) -> list[Path]:
    """Delete the temporaries of ``path`` last modified before ``older_than`` (default: the
    start of this process), i.e. those of earlier attempts killed while writing. Returns
    the removed paths."""
    limit = PROCESS_STARTED if older_than is None else older_than
    removed = []
    for tmp in temporaries_of(path):
        with contextlib.suppress(OSError):
            if tmp.lstat().st_mtime < limit:
                if tmp.is_dir() and not tmp.is_symlink():
                    shutil.rmtree(tmp)
                else:
                    tmp.unlink()
                removed.append(tmp)
                log.info("removed %s, left by an interrupted write of %s", tmp, Path(path).name)
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` on success. Stale
    temporaries of ``path`` left by killed processes are removed first."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
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


def write_csv_rows(path: str | os.PathLike[str], fieldnames: Sequence[str],
                   rows: Iterable[Mapping[str, Any]]) -> None:
    """A CSV with a header row, written atomically (parent folders created)."""
    import csv

    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fieldnames))
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def read_json(path: str | os.PathLike[str], *, advice: str = REBUILD_ADVICE) -> Any:
    """A JSON file a job reads; a truncated or corrupt one raises :class:`CheckpointError`
    naming it and ``advice`` (a missing one: FileNotFoundError as usual)."""
    try:
        return json.loads(Path(path).read_text())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise unreadable(path, e, advice) from None


def torch_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Save atomically. Written through a file object, so the zip's record prefix is torch's
    fixed "archive/" rather than the (random) temporary file's name: the same object gives the
    same bytes wherever and whenever it is saved."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        import torch  # here, not at the top: the DAG imports this module (dry runs)

        torch.save(obj, handle)


def torch_load(path: str | os.PathLike[str], *, weights_only: bool = True,
               advice: str = REBUILD_ADVICE) -> Any:
    """Load a torch file of this project (default: tensors and plain containers only) onto
    the CPU. An unreadable file (truncated by a killed job or a partial copy, not a torch
    file, objects ``weights_only`` refuses) raises :class:`CheckpointError` naming the file,
    torch's reason and ``advice``; a missing file raises FileNotFoundError as usual."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except (FileNotFoundError, IsADirectoryError, PermissionError, MemoryError):
        raise
    except Exception as e:  # PytorchStreamReader errors, EOFError, UnpicklingError, ...
        raise unreadable(path, e, advice) from None


def load_resume(path: str | os.PathLike[str], *, weights_only: bool = True) -> Any | None:
    """The content of resume checkpoint ``path``, or None when there is none to resume from:
    missing, or unreadable -- then it is moved aside to ``<name>.corrupt`` (replacing an
    older one) with a warning, and the caller starts that piece of work over."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return torch_load(path, weights_only=weights_only, advice="")
    except CheckpointError as e:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        log.warning("%s -- moved it to %s and starting this part over", str(e).rstrip(" ."), aside)
        return None


#: the fingerprint file of a resume directory (:func:`prepare_resume_dir`)
RESUME_STAMP = "inputs.json"


def prepare_resume_dir(path: str | os.PathLike[str], fingerprint: Mapping[str, Any], *,
                       stale: str = "was written for other settings or inputs: starting over"
                       ) -> bool:
    """A job's directory of saved progress, kept only if its :data:`RESUME_STAMP` holds the
    same ``fingerprint`` (everything that determines the job's result); otherwise -- a changed
    config, a retrained input, an unreadable stamp -- it is emptied with the warning
    ``<path> <stale>`` and stamped anew, so stale progress is never mixed in. Returns whether
    earlier progress is kept. Used by AutoAttack (per ε) and the inversion attacks."""
    d = Path(path)
    fp = json.loads(json.dumps(dict(fingerprint), sort_keys=True))
    stamp = d / RESUME_STAMP
    if d.exists():
        try:
            if json.loads(stamp.read_text()) == fp:
                return True
        except (OSError, ValueError):
            pass
        log.warning("%s %s", d, stale)
        shutil.rmtree(d)
    d.mkdir(parents=True)
    write_json(stamp, fp)
    return False

