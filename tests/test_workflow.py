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


STATS = (ROOT / ".test" / "stats" / "config.yaml").read_text()
STATS_TARGETS = ["results/tables/table15.md", "results/tables/table21.md",
                 "results/tables/table22.md", "results/figures/figure2_observed_vs_predicted.png"]


@pytest.mark.slow
def test_trained_models_flow_into_the_statistics(tmp_path):
    """Issue 17, the first end-to-end path through the statistics: 6 trained models of the
    generic sample (NoDef, MID, TL-DMI x 2 seeds) and a causal experiment of 4 replicates (2
    AT-AT) go through AutoAttack, PPA and the summary into Table 15 (and Table 5), Figure 2
    and Tables 21/22, fitted with the n the config plans and finite numbers; ``all`` plans
    these outputs. It tests the data path, not the statistics (unit-tested on simulated
    summaries). With .test/tiny's sizes PPA AttAcc@1 came out 0 for all 10 models (a 4-step
    prior, 2 attacked images per model); .test/stats attacks 12 images with a better evaluation
    network so that it can vary, and the assertions follow the data: a response that varies is
    fitted with the planned n, a constant one is skipped naming it (never "ok" with a zero
    slope). The L2 face distance of Table 22 varies and gets a real interval.
    Measured 2026-12-01: 60 jobs, 1,317 CPU-s of jobs (AutoAttack 539, training 469, PPA 147,
    evaluation network 94; atat.lab.jobstats), 64.7 min wall on the shared 2-core machine at load
    8-11 (user+sys 25 min); roughly 12-15 min on 2 idle cores."""
    import numpy as np

    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "stats.yaml").write_text(STATS)
    overlays = ("tiny.yaml", "stats.yaml")
    plan = snakemake(tmp_path, "all", "-n", overlays=overlays)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    for target in [*STATS_TARGETS, "results/tables/table5.md", "results/stats/regressions.csv"]:
        assert target in plan.stdout, target          # a job of `all` writes it
    proc = snakemake(tmp_path, *STATS_TARGETS, overlays=overlays)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    assert len(summary) == 10 and summary["treatment"].notna().sum() == 4
    assert summary.loc[summary["treatment"] == 1, "defense"].eq("atat").all()
    # Table 15's specifications: fitted on the 6 generic models (no causal replicate)
    tidy = pd.read_csv(tmp_path / "results" / "stats" / "regressions.csv")
    generic = summary[summary["treatment"].isna()]
    varies = generic["ppa_attacc1"].nunique() > 1
    # the pre-registered fits; the sensitivity refits without MID (config/regressions.yaml
    # sensitivity.without_randomised) have fewer rows and are checked below
    sens = tidy["spec"].str.endswith("__without_randomised")
    t15 = tidy[tidy["spec"].str.startswith("T15_ppa") & ~sens]
    assert not t15.empty, tidy[["spec", "status", "reason"]].drop_duplicates().to_string()
    t15_sens = tidy[tidy["spec"].str.startswith("T15_ppa") & sens]
    n_randomised = int((generic["defense"] == "mid").sum())
    fitted = t15_sens[t15_sens["status"] == "ok"]    # too few rows for the larger ones: skipped
    assert not t15_sens.empty and (fitted["n"] == 6 - n_randomised).all(), \
        t15_sens[["spec", "n", "status"]].drop_duplicates().to_string()
    skipped = t15_sens[t15_sens["status"] != "ok"]
    assert (skipped["status"] == "skipped").all() and skipped["reason"].str.len().gt(0).all()
    fig2 = tidy[tidy["spec"] == "T15_ppa_generic_joint_ols"]
    png = (tmp_path / STATS_TARGETS[-1]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    log = (tmp_path / "logs" / "figures" / "figure2.log").read_text()
    if varies:      # fitted on the 6 generic models (no causal replicate)
        ok = t15[t15["status"] == "ok"]
        assert not ok.empty and (ok["n"] == 6).all(), t15[["spec", "status", "reason"]]
        assert np.isfinite(ok["estimate"].to_numpy()).all()
        assert (fig2["status"] == "ok").all() and (fig2["n"] == 6).all() and len(fig2) == 5, \
            fig2[["status", "reason"]].drop_duplicates().to_string()
        assert "not drawn" not in log
    else:           # every model's AttAcc@1 the same: each PPA spec skipped, naming it
        assert (t15["status"] == "skipped").all(), t15[["spec", "status", "reason"]]
        assert t15["reason"].str.contains("response ppa_attacc1 is constant").all()
        assert "not drawn" in log and "is constant" in log
    assert (tmp_path / "results" / "tables" / "table15.md").read_text().startswith("Table 15")
    # Tables 21/22: the 4 replicates, OLS and Beta of PPA AttAcc@1, OLS of the face distance
    t21 = pd.read_csv(tmp_path / "results" / "tables" / "table21.csv")
    t22 = pd.read_csv(tmp_path / "results" / "tables" / "table22.csv")
    assert sorted(t21["Model"]) == ["BETA", "OLS"] and list(t22["Response"]) == ["ppa_dist_face"]
    replicates_vary = summary.loc[summary["treatment"].notna(), "ppa_attacc1"].nunique() > 1
    for t in ([t21, t22] if replicates_vary else [t22]):
        assert (t["Status"] == "ok").all(), t.to_string()
        assert (t["n"] == 4).all()
        assert np.isfinite(t["AT-AT (Treatment)"].to_numpy(float)).all()
    if not replicates_vary:
        assert t21["Status"].str.startswith("skipped: response ppa_attacc1 is constant").all(), \
            t21.to_string()
    # the face distance varies between the replicates: a proper interval
    assert np.isfinite(t22[["Treatment SE", "CI low", "CI high"]].to_numpy(float)).all()
    assert (t22["Treatment SE"] > 0).all()
