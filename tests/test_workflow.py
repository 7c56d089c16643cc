"""End to end: a tiny config runs through snakemake in a temporary directory."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

# The test configs are files under .test/ (the workflow catalog's convention), runnable by hand.
TINY = (ROOT / ".test" / "tiny" / "config.yaml").read_text()
ALL_DEFENSES = (ROOT / ".test" / "all-defenses" / "config.yaml").read_text()


def snakemake(workdir, *args, overlays=("tiny.yaml",)):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(workdir), "--configfile", str(ROOT / "config" / "demo.yaml"),
           *(str(workdir / o) for o in overlays), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_tiny_config_end_to_end(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = snakemake(tmp_path, "all")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    assert sorted(summary["defense"]) == ["atat", "nodef"]
    value_cols = [c for c in summary.columns if c.startswith(("robust_acc", "test_acc", "val_acc"))]
    assert {"robust_acc_eps0.031", "robust_acc_eps1e-05", "robust_acc_eps1e-05_square"} <= set(value_cols)
    assert summary[value_cols].notna().all().all()
    assert ((summary[value_cols] >= 0) & (summary[value_cols] <= 1)).all().all()
    table = pd.read_csv(tmp_path / "results" / "tables" / "table4.csv")
    assert len(table) == 2
    for col in [c for c in table.columns if c.startswith(("Acc", "Test"))]:
        assert table[col].between(0, 1).all()
    assert (tmp_path / "results" / "tables" / "table4.md").read_text().startswith("Table 4")
    assert (tmp_path / "results" / "tables" / "table4.tex").exists()
    png = (tmp_path / "results" / "figures" / "robust_accuracy_vs_eps.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # model inversion: three attacks per model, per-image rows, summary columns, figures
    per_image = pd.read_csv(tmp_path / "results" / "inversion" / "per_image.csv")
    assert set(per_image["attack"]) == {"ppa", "ifgmi", "ppdg"}
    assert set(per_image["defense"]) == {"atat", "nodef"}
    assert per_image["correct_top1"].isin([0, 1]).all() and per_image["dist_face"].notna().all()
    for a in ("ppa", "ifgmi", "ppdg"):
        assert summary[f"{a}_attacc1"].between(0, 1).all()
        assert (summary[f"{a}_dist_face"] >= 0).all()
    assert (tmp_path / "results" / "figures" / "reconstructions_synthfaces_resnet18_ppa.png").exists()
    assert "PPA AttAcc@1" in pd.read_csv(tmp_path / "results" / "tables" / "table4.csv").columns
    # every rule logged and benchmarked
    assert list((tmp_path / "benchmarks" / "train").rglob("*.tsv"))
    # nothing left to do: a second run is a no-op
    again = snakemake(tmp_path, "all", "-n")
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_every_defense_trains_through_the_workflow(tmp_path):
    """Issue 3: every defense of the demo grid trains and appears as a summary row."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "all.yaml").write_text(ALL_DEFENSES)
    proc = snakemake(tmp_path, "results/summary.csv", "--set-threads", "train_model=1",
                     "autoattack=1", overlays=("tiny.yaml", "all.yaml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    expected = {"nodef", "nodef_es", "mid", "bido", "bido_lx1e3", "tldmi", "tldmi5", "negls",
                "rolss", "rolss_ssf", "trap_mid", "trap_mid_star", "atat", "at", "permuted",
                "unseen_pixels_gl", "unseen_pixels_agl", "unseen_pixels"}
    assert set(summary["defense"]) == expected
    assert summary["test_acc"].between(0, 1).all()
    assert summary["robust_acc_eps0.031"].between(0, 1).all()
