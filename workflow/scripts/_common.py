"""Shared set-up of the thin Snakemake adapters: run the package of *this* checkout, append
logging and warnings to the rule's log file (one header line per attempt), pin the thread
count, remove stale temporaries of the job's outputs."""

from __future__ import annotations

import datetime
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


def attempt_header(log_path: str | os.PathLike[str]) -> str:
    """The line that starts this attempt's part of an appended log: UTC time, attempt
    number (1 + the headers already in the file: retries and reruns of this job whose logs
    were kept), host and process id."""
    path = Path(log_path)
    earlier = 0
    if path.exists():
        with open(path, "rb") as f:
            earlier = sum(1 for line in f if line.startswith(b"===== attempt "))
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    return (f"===== attempt {earlier + 1} of this job started {now} on {socket.gethostname()} "
            f"(pid {os.getpid()}; earlier attempts above) =====")


def setup(snakemake: Any) -> None:
    """Append stderr (progress lines, warnings, logging) to the rule's log under an attempt
    header, so a retry keeps the failed attempt's log; set torch threads; remove temporaries
    that killed earlier attempts left next to the outputs."""
    if snakemake.log:
        Path(snakemake.log[0]).parent.mkdir(parents=True, exist_ok=True)
        header = attempt_header(snakemake.log[0])
        stream = open(snakemake.log[0], "a", buffering=1)
        stream.write(header + "\n")
        sys.stderr = stream
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)
    import torch

    import atat
    from atat.io import remove_stale_temporaries

    logging.getLogger("atat").info("rule %s runs the code in %s", getattr(snakemake, "rule", "?"),
                                   Path(atat.__file__).parent)
    for out in snakemake.output:
        remove_stale_temporaries(out)
    torch.set_num_threads(max(1, int(snakemake.threads)))


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
