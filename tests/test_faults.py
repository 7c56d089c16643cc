"""Faults through Snakemake (issue 14 item 10), with the README's recovery commands.

A run of the tiny config (test_workflow.TINY) up to one PPA inversion is killed twice with
SIGKILL -- the whole Snakemake process group, as a pre-empted node or a closed terminal does --
once while the target model trains and once while the inversion is between batches. Recovery
is what the README says after a killed Snakemake: ``snakemake --unlock`` with the same
arguments, then the same command again (it carries ``--rerun-incomplete``, as ``make demo``
and the SLURM profile do). The outputs must equal an uninterrupted run's byte for byte, the
jobs must have resumed (not restarted), and no temporary of an atomic write may be left.
Then a truncated model.pt must stop the job that reads it with a message naming the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_workflow import TINY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Long enough to be killed in the middle: 4 epochs with a checkpoint after each, and PPA with
# 4 batches of one latent (2 targets x 2 candidates), each saved as it finishes.
FAULTS = """
training: {epochs: 4, lr_milestones: [2], checkpoint_every: 1}
inversion:
  attacks: [ppa]
  ppa: {batch_size: 1, steps: 20}
"""

MODEL = "results/models/synthfaces/resnet18/nodef/seed0"
INV = "results/inversion/synthfaces/resnet18/nodef/seed0/ppa"
TRAIN_RESUME = "results/.resume/synthfaces/resnet18/nodef/seed0/resume.pt"
INV_RESUME = "results/.resume/inversion/synthfaces/resnet18/nodef/seed0/ppa"
TARGET = f"{INV}/metrics.json"


def command(workdir: Path, *extra: str) -> list[str]:
    """The README's run command (as `make demo`) on the tiny overlays, for one target."""
    return [sys.executable, "-m", "snakemake", TARGET, "-s", str(ROOT / "Snakefile"), "--directory",
            str(workdir), "--configfile", str(ROOT / "config" / "demo.yaml"),
            str(workdir / "tiny.yaml"), str(workdir / "faults.yaml"), "--cores", "2",
            "--keep-going", "--rerun-incomplete", "--show-failed-logs",
            *extra, "--set-threads", "train_model=1", "invert=1"]


def run(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(workdir, *extra), capture_output=True, text=True, timeout=1200)


def kill_when(workdir: Path, ready, timeout: float = 900) -> None:
    """Start the run in its own process group and SIGKILL the whole group once ``ready()``."""
    with open(workdir / "killed_run.out", "ab") as out:
        proc = subprocess.Popen(command(workdir), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not ready():
                if proc.poll() is not None:
                    pytest.fail(f"the run ended (rc {proc.returncode}) before the point to kill "
                                f"it at: {(workdir / 'killed_run.out').read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    pytest.fail("timed out waiting for the point to kill the run at")
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def recover(workdir: Path) -> subprocess.CompletedProcess:
    unlock = run(workdir, "--unlock")
    assert unlock.returncode == 0, unlock.stdout[-2000:] + unlock.stderr[-2000:]
    return run(workdir)


def without_timing(path: Path) -> dict:
    """A metrics file without its wall-clock seconds (the one value a rerun may change)."""
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "seconds"}


def leftover_temporaries(workdir: Path) -> list[Path]:
    return [p for p in workdir.rglob("*.tmp") if ".snakemake" not in p.parts]


@pytest.mark.slow
def test_sigkill_during_training_and_inversion_then_readme_recovery(tmp_path):
    ref, work = tmp_path / "reference", tmp_path / "killed"
    for d in (ref, work):
        d.mkdir()
        (d / "tiny.yaml").write_text(TINY)
        (d / "faults.yaml").write_text(FAULTS)

    done = run(ref)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # 1. killed while the target model trains (after its first checkpoint, before model.pt)
    kill_when(work, lambda: (work / TRAIN_RESUME).exists())
    assert not (work / MODEL / "model.pt").exists()
    # A temporary as a kill during an atomic write leaves it (name pattern of atat.base.io)
    stale = work / MODEL / ".model.pt.killed.tmp"
    stale.write_bytes(b"\0" * 1000)
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    # without --unlock the same command is refused (what the README's recovery is for)
    locked = run(work)
    assert locked.returncode != 0 and "unlock" in (locked.stdout + locked.stderr).lower()

    # 2. recover, and kill again while PPA is between batches
    def ppa_mid_run():
        return (work / INV_RESUME / "batch00000.pt").exists()

    unlock = run(work, "--unlock")
    assert unlock.returncode == 0, unlock.stdout[-2000:] + unlock.stderr[-2000:]
    kill_when(work, ppa_mid_run)
    assert (work / MODEL / "model.pt").exists() and not (work / TARGET).exists()
    assert not (work / INV_RESUME / "batch00003.pt").exists(), "killed too late"

    # 3. recover to the end
    final = recover(work)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]

    assert (work / MODEL / "model.pt").read_bytes() == (ref / MODEL / "model.pt").read_bytes()
    assert (work / INV / "per_image.csv").read_bytes() == (ref / INV / "per_image.csv").read_bytes()
    assert without_timing(work / INV / "metrics.json") == without_timing(ref / INV / "metrics.json")
    # both jobs continued from their saved state instead of starting over
    train_log = (work / "logs/train/synthfaces/resnet18/nodef/seed0.log").read_text()
    assert "resumed" in train_log
    inv_log = (work / "logs/inversion/synthfaces/resnet18/nodef/seed0/ppa.log").read_text()
    assert "resuming from" in inv_log
    assert leftover_temporaries(work) == []
    assert not (work / TRAIN_RESUME).exists() and not (work / INV_RESUME).exists()

    # 4. a truncated model.pt: the job that reads it names the file and what to do
    model = work / MODEL / "model.pt"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    broken = run(work)
    out = broken.stdout + broken.stderr
    assert broken.returncode != 0
    assert f"{MODEL}/model.pt: cannot be read" in out, out[-3000:]
    assert "truncated or corrupt" in out and "Delete it and run the workflow again" in out
