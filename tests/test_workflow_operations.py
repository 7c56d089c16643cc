"""Issue 14 (operations) at the workflow level: offline failures are not retried, the
documented commands carry the recovery flags, the README says what to run after a kill."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

TINY = (ROOT / ".test" / "minimal" / "config.yaml").read_text()


@pytest.mark.slow
def test_offline_a_missing_weight_file_fails_once_at_once_with_its_message(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    target = "resources/weights/lpips/vgg_v0.1.pth"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(tmp_path), "--configfile", str(ROOT / "config" / "demo.yaml"),
           str(tmp_path / "tiny.yaml"), "--config", "offline=True", "--cores", "1",
           "--retries", "2",  # what the SLURM profile sets: the rule's own retries win
           "--show-failed-logs", target]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    log = (tmp_path / "logs" / "data" / "lpips_weights.log").read_text()
    attempts = (tmp_path / "logs" / "data" / "lpips_weights.attempts.log").read_text()
    assert len(re.findall(r"^===== attempt ", attempts, flags=re.M)) == 1, attempts  # no retry
    assert "Trying to restart job" not in out
    missing = f"offline mode: {target} is missing"
    assert missing in log and missing in out  # the reason is on the terminal (--show-failed-logs)
    assert seconds < 300


def _demo_command():
    make = (ROOT / "Makefile").read_text()
    lines = [line.strip() for line in make.splitlines() if "snakemake all --configfile config/demo.yaml" in line]
    assert len(lines) == 1
    return lines[0].split()


def test_the_demo_and_the_profiles_rerun_incomplete_jobs_and_show_failed_logs():
    demo = _demo_command()
    assert {"--rerun-incomplete", "--show-failed-logs", "--keep-going"} <= set(demo)
    assert demo[demo.index("--logger") + 1] == "rich"
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["rerun-incomplete"] is True and profile["show-failed-logs"] is True
    test_overlay = yaml.safe_load((ROOT / "profiles" / "slurm-test" / "config.yaml").read_text())
    for key in ("rerun-incomplete", "show-failed-logs"):  # stacked: must not switch them off
        assert test_overlay.get(key, True) is True


def test_the_rich_logger_plugin_is_installed_and_pinned():
    from importlib.metadata import version

    pins = [d for d in __import__("tomllib").loads((ROOT / "pyproject.toml").read_text())
            ["project"]["dependencies"] if d.startswith("snakemake-logger-plugin-rich")]
    assert pins == [f"snakemake-logger-plugin-rich=={version('snakemake-logger-plugin-rich')}"]
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    assert "rich" in LoggerPluginRegistry().plugins


def test_the_readme_says_what_to_run_after_a_killed_snakemake():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Failures and resuming"):]
    section = section[: section.index("\n## ")]
    assert "LockException" in section and "IncompleteFilesException" in section
    assert "--unlock" in section and "--rerun-incomplete" in section
    assert "make demo" in section and "squeue --me" in section and "scancel" in section
    assert ".corrupt" in section and "===== attempt" in section and ".attempts.log" in section
