"""Shared set-up of the thin Snakemake adapters: run the package of *this* checkout, send
logging and warnings to the rule's log file and append them to its attempts log (one header
line per attempt), pin the thread count, remove stale temporaries of the job's outputs, and
log the job's CPU time at exit (atat.base.progress; summed by atat.lab.jobstats)."""

from __future__ import annotations

import datetime
import io
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"


def use_this_checkout(src: Path = SRC) -> None:
    """Make ``import atat`` load the package under ``src`` (the checkout this workflow file
    belongs to), whatever else is on ``sys.path``: an editable install of another checkout
    (its ``.pth`` entry comes first) or Snakemake's script preamble, which *appends* the
    main process's path. ``src`` goes to the front and an ``atat`` imported from elsewhere
    (e.g. while unpickling the job's parameters) is dropped, so the next import is ours."""
    here = str(src)
    sys.path[:] = [here] + [p for p in sys.path if os.path.abspath(p or ".") != here]
    for name in [m for m in sys.modules if m == "atat" or m.startswith("atat.")]:
        origin = getattr(sys.modules[name], "__file__", None) or ""
        if not os.path.abspath(origin).startswith(here + os.sep):
            del sys.modules[name]


use_this_checkout()


def attempts_log(log_path: str | os.PathLike[str]) -> Path:
    """Where every attempt of a job is kept: ``<log>.log`` -> ``<log>.attempts.log``.
    Snakemake deletes a job's declared log each time it starts the job, so a retry would
    lose the failed attempt's log; this file is not declared, Snakemake leaves it alone."""
    path = Path(log_path)
    stem = path.name[:-4] if path.name.endswith(".log") else path.name
    return path.with_name(f"{stem}.attempts.log")


def attempt_header(history: str | os.PathLike[str]) -> str:
    """The line that starts an attempt: attempt number (1 + the headers already in the
    attempts log: retries and reruns of this job), UTC time, host and process id."""
    path = Path(history)
    earlier = 0
    if path.exists():
        with open(path, "rb") as f:
            earlier = sum(1 for line in f if line.startswith(b"===== attempt "))
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    return (f"===== attempt {earlier + 1} of this job started {now} on {socket.gethostname()} "
            f"(pid {os.getpid()}) =====")


class _Tee(io.TextIOBase):
    """stderr of a job: each write goes to the rule's log and to its attempts log."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.streams[0].encoding

    def fileno(self) -> int:  # e.g. faulthandler: the rule's log
        return self.streams[0].fileno()

    def close(self) -> None:
        super().close()  # flushes
        for s in self.streams:
            s.close()


def setup(snakemake: Any) -> None:
    """Send stderr (progress lines, warnings, logging) to the rule's log and append it to
    the attempts log under an attempt header (a retry keeps the failed attempt's output);
    set torch threads; remove temporaries that killed earlier attempts left next to the
    outputs."""
    if snakemake.log:
        Path(snakemake.log[0]).parent.mkdir(parents=True, exist_ok=True)
        history = attempts_log(snakemake.log[0])
        header = attempt_header(history)
        stream = _Tee(open(snakemake.log[0], "a", buffering=1), open(history, "a", buffering=1))
        stream.write(f"{header}\n")
        sys.stderr = stream
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)
    _CONFIG.clear()
    _CONFIG.update(getattr(snakemake, "config", None) or {})
    import torch

    import atat
    from atat.base.io import remove_stale_temporaries

    logging.getLogger("atat").info("rule %s runs the code in %s", getattr(snakemake, "rule", "?"),
                                   Path(atat.__file__).parent)
    for out in snakemake.output:
        remove_stale_temporaries(out)
    torch.set_num_threads(max(1, int(snakemake.threads)))
    from atat.base.progress import log_resources_at_exit

    log_resources_at_exit(getattr(snakemake, "rule", "?"), int(snakemake.threads))


#: the job's config (set by :func:`setup`): its ``device`` setting picks the device
_CONFIG: dict[str, Any] = {}


def device() -> str:
    """The device of a GPU rule by the config's ``device`` setting (atat.base.device): ``cuda``
    without a usable GPU stops the job here, before it reads any input, naming the driver, the
    torch build and what to do."""
    from atat.base.device import DEFAULT_DEVICE, resolve_device

    return resolve_device(str(_CONFIG.get("device", DEFAULT_DEVICE)))
