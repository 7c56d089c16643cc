"""Shared set-up of the thin Snakemake adapters: make the package importable without
installation, send logging and warnings to the rule's log file, pin the thread count."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


def setup(snakemake: Any) -> None:
    """Redirect stderr (tqdm, warnings, logging) to the rule's log and set torch threads."""
    if snakemake.log:
        stream = open(snakemake.log[0], "w", buffering=1)
        sys.stderr = stream
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)
    import torch

    torch.set_num_threads(max(1, int(snakemake.threads)))


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
