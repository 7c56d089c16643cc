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


def test_the_docs_say_what_to_run_after_a_killed_snakemake():
    running = (ROOT / "docs" / "running.md").read_text()
    section = running[running.index("## Failures and resuming"):]
    section = section[: section.index("\n## ")]
    assert "LockException" in section and "IncompleteFilesException" in section
    assert "--unlock" in section and "--rerun-incomplete" in section
    assert "make demo" in section and "squeue --me" in section and "scancel" in section
    assert ".corrupt" in section and "===== attempt" in section and ".attempts.log" in section


# ----------------------------------------------------------------- rules files (issue 15 item 6)
def _snakemake(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_rules_files_are_snakefmt_formatted():
    """`snakefmt --check` as .ci/run runs it: a rules file that drifts from the format fails
    here (line length: [tool.snakefmt] in pyproject.toml)."""
    pytest.importorskip("snakefmt")
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the check can fail: an unformatted rule is reported
    bad = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "-"], cwd=ROOT,
                         input='rule x:\n    output: "a"\n    shell: "touch {output}"\n',
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0


def test_snakemake_lint_is_clean():
    """`snakemake --lint` as .ci/run runs it (rules files hold rules only, every rule has its
    log, no mixed functions): exit 0."""
    proc = _snakemake("--lint")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_each_table_has_a_rule_of_its_own_dry():
    """One rule per table, named after it, with fixed outputs: `--list-rules` shows them and a
    dry run of four tables of four families plans exactly those four table rules."""
    listed = _snakemake("--list-rules")
    assert listed.returncode == 0, listed.stderr[-3000:]
    names = set(listed.stdout.split())
    assert {"table1", "table8", "table9", "table5", "table11", "table14", "table15",
            "table20", "table23", "table28"} <= names
    assert not {"robustness_table", "hsic_table", "regression_table",
                "main_results_table"} & names
    wanted = ["table1", "table11", "table15", "table23"]
    # --forceall: the same plan whatever this checkout has built already
    proc = _snakemake("-n", "--forceall", *[f"results/tables/{t}.csv" for t in wanted])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stats = proc.stdout.split("Job stats:", 1)[1].split("\ntotal", 1)[0]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", stats, flags=re.M))
    tables = {r: n for r, n in jobs.items() if r.startswith("table")}
    assert tables == {t: "1" for t in wanted}, jobs


def test_main_results_read_the_grid_models_only_dry():
    """Tables 23-28 pool the attacked images of a cell: the per-image table must hold the grid's
    models only. The demo's causal replicates (NoDef/AT-AT of the main cell, seeds 100-109) and
    dose-response variants (atat_w...) would otherwise join their cell's NoDef/AT-AT rows."""
    from atat.plan.config import load_config, model_runs
    from atat.analysis.paper import Plan, grid_runs, run_attacks

    sweep = ROOT / "tests" / "data" / "demo_dose_response.yaml"    # the demo's designed sweep
    config = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml", sweep)
    runs = model_runs(config)
    assert any(r.replicate is not None for r in runs) and any(r.dose_response for r in runs)
    grid = grid_runs(Plan(config, runs))
    expected = {f"results/inversion/{r.path}/{a}/per_image.csv"
                for r in grid for a in run_attacks(config, r)}
    proc = _snakemake("-n", "--forceall", "results/inversion/per_image.csv",
                      "--configfile", "config/demo.yaml", str(sweep))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    block = proc.stdout.split("rule inversion_per_image:", 1)[1]
    inputs = set(block.split("input:", 1)[1].split("\n", 1)[0].strip().split(", "))
    assert inputs == expected
    assert not any("/seed10" in f or "_w" in f.split("/")[4] for f in inputs)


def test_report_categories_do_not_reuse_the_reports_own_link_names():
    # Snakemake's report defines docutils targets `Workflow` and `Statistics` for its own
    # panels; a category of the same name (case-insensitive) makes docutils warn "Duplicate
    # explicit target name" once per caption while the report is built (45 times in the demo)
    found = set()
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        found |= set(re.findall(r'\bcategory="([^"]+)"', smk.read_text()))
    assert found, "no report categories found"
    assert not {c.lower() for c in found} & {"workflow", "statistics"}, sorted(found)


def test_rules_are_defined_at_top_level():
    # the checks that read rules files as text (profiles, docs, GPU blocks) find `rule x:` at
    # the start of a line; a rule inside an `if` would escape all of them (layout choices go
    # into common.smk's variables instead, e.g. AUTOATTACK_OUTPUT)
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        nested = re.findall(r"^[ \t]+((?:local)?rule \w+):", smk.read_text(), re.M)
        assert not nested, (smk.name, nested)
