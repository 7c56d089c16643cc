"""Tables 11-28, cost of privacy, Figures 2 and 4, and the target logic, on simulated
summaries (the real inversion columns do not exist yet)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from atat.analysis import tables
from atat.analysis.figures import accuracy_vs_privacy, observed_vs_predicted
from atat.analysis.paper import stats_targets
from atat.analysis.stats.regression import fit_all

from atat.analysis.tables import load_specs

ROOT = Path(__file__).resolve().parents[1]
EPS = [0.031, 0.0025, 0.0005, 1e-05]
ATTACKS = ["apgd-ce", "apgd-t", "fab-t", "square"]


def _eps(e):
    return format(e, "g")


def simulated_summary(seed: int = 0, causal: bool = True) -> pd.DataFrame:
    """Paper-shaped summary: generic (n = 18) and gradient samples, leakage driven by robust
    accuracy, plus 10 causal rows (5 treated)."""
    rng = np.random.default_rng(seed)
    rows = []
    cells = []
    for ds in ("facescrub", "celeba"):
        for arch in ("resnet152", "resnet18"):
            for d in ("nodef", "mid", "bido", "tldmi", "negls", "rolss", "rolss_ssf", "atat"):
                cells.append((ds, arch, d, d))
            if arch == "resnet18":
                cells.append((ds, arch, "tldmi5", "tldmi"))
    for ds, arch, d, dtype in cells:
        r = {"dataset": ds, "architecture": arch, "defense": d, "defense_type": dtype,
             "seed": 0, "replicate": np.nan, "treatment": np.nan,
             "test_acc": rng.uniform(0.6, 0.95)}
        for e in EPS:
            base = 0.0 if e == 0.031 else rng.uniform(0.05, 0.9)
            per = {a: min(1.0, base + rng.uniform(0, 0.1)) for a in ATTACKS}
            if e == 0.031:
                per = {a: 0.0 for a in ATTACKS}
            r[f"robust_acc_eps{_eps(e)}"] = min(per.values())
            for a in ATTACKS:
                r[f"robust_acc_eps{_eps(e)}_{a}"] = per[a]
            r[f"aa_clean_acc_eps{_eps(e)}"] = r["test_acc"]
            r[f"aa_n_examples_eps{_eps(e)}"] = 1024
        lin = (-1.5 + 2.0 * r["robust_acc_eps0.0025"] + 1.0 * r["robust_acc_eps0.0005"]
               + 1.5 * r["robust_acc_eps1e-05"] + 0.3 * r["test_acc"])
        for att in ("ppa", "ifgmi", "ppdg"):
            r[f"{att}_attacc1"] = float(np.clip(1 / (1 + np.exp(-lin)) + rng.normal(0, 0.03),
                                                0.01, 0.99))
            r[f"{att}_attacc5"] = min(0.999, r[f"{att}_attacc1"] + 0.05)
            r[f"{att}_dist_face"] = 1.2 - 0.5 * r[f"{att}_attacc1"]
        rows.append(r)
    if causal:
        d = [1, 0, 1, 1, 0, 0, 1, 0, 1, 0]
        for i, t in enumerate(d):
            rows.append({"dataset": "facescrub", "architecture": "resnet152",
                         "defense": "atat" if t else "nodef", "defense_type": "atat" if t else "nodef",
                         "seed": 100 + i, "replicate": i, "treatment": t,
                         "test_acc": 0.9, "robust_acc_eps0.0025": 0.1,
                         "ppa_attacc1": (0.065 if t else 0.84) + rng.normal(0, 0.01),
                         "ppa_dist_face": (1.2 if t else 0.77) + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def with_counts(summary: pd.DataFrame, n_test: int = 200, n_images: int = 100) -> pd.DataFrame:
    """``summary`` with the counts the figures' 95% intervals need, as the records write
    them: clean test accuracy and every attack's AttAcc@1/@5 rounded to counts over
    ``n_test`` / ``n_images``, with ``n_test`` and ``<attack>_n_images`` columns."""
    out = summary.copy()
    out["test_acc"] = (out["test_acc"] * n_test).round() / n_test
    out["n_test"] = n_test
    for a in ("ppa", "ifgmi", "ppdg"):
        for m in ("attacc1", "attacc5"):
            if f"{a}_{m}" in out.columns:
                out[f"{a}_{m}"] = (out[f"{a}_{m}"] * n_images).round() / n_images
        if f"{a}_attacc1" in out.columns:
            out[f"{a}_n_images"] = n_images
    return out


def outs(tmp_path: Path, name: str) -> list[Path]:
    return [tmp_path / f"{name}.{e}" for e in ("csv", "md", "tex")]


# --------------------------------------------------------------------------- Tables 11-14

@pytest.mark.parametrize("eps,number", [(0.031, 11), (0.0025, 12), (0.0005, 13), (1e-05, 14)])
def test_robustness_table_values_and_files(tmp_path, eps, number):
    summ = simulated_summary()
    path = tmp_path / "summary.csv"
    summ.to_csv(path, index=False)
    table = tables.robustness_table(path, outs(tmp_path, f"t{number}"), eps=eps)
    grid = summ[summ["treatment"].isna()]
    assert len(table) == len(grid)  # one seed per cell; causal rows left out
    assert (table["Seeds"] == 1).all()
    assert list(table.columns[:3]) == ["Dataset", "Architecture", "Defense"]
    for a, label in tables.ATTACK_LABELS.items():
        assert label in table.columns
    row = table[(table["Dataset"] == "CelebA") & (table["Architecture"] == "ResNet-18")
                & (table["Defense"] == "TL-DMI-5")].iloc[0]
    src = grid[(grid["dataset"] == "celeba") & (grid["architecture"] == "resnet18")
               & (grid["defense"] == "tldmi5")].iloc[0]
    assert row["Robust acc. (worst case)"] == pytest.approx(src[f"robust_acc_eps{_eps(eps)}"])
    assert row["FAB-T"] == pytest.approx(src[f"robust_acc_eps{_eps(eps)}_fab-t"])
    assert row["Examples"] == 1024
    # worst case is never above any single attack
    per = table[[tables.ATTACK_LABELS[a] for a in ATTACKS]].min(axis=1)
    assert (table["Robust acc. (worst case)"] <= per + 1e-12).all()
    md = (tmp_path / f"t{number}.md").read_text()
    assert md.startswith(f"Table {number}: AutoAttack robust accuracies with eps={eps:g}")
    assert "1024 validation set examples" in md
    assert "\\begin{table}" in (tmp_path / f"t{number}.tex").read_text()
    assert pd.read_csv(tmp_path / f"t{number}.csv").shape == table.shape


def test_robustness_table_means_over_seeds_and_rejects(tmp_path):
    summ = simulated_summary(causal=False)
    s2 = summ.copy()
    s2["seed"] = 1
    s2["robust_acc_eps0.0025"] = s2["robust_acc_eps0.0025"] + 0.01
    both = pd.concat([summ, s2])
    p = tmp_path / "s.csv"
    both.to_csv(p, index=False)
    t = tables.robustness_table(p, outs(tmp_path, "t12"), eps=0.0025)
    assert (t["Seeds"] == 2).all()
    expected = both.groupby(["dataset", "architecture", "defense"], sort=False)[
        "robust_acc_eps0.0025"].mean().to_numpy()
    np.testing.assert_allclose(t["Robust acc. (worst case)"].to_numpy(), expected)
    with pytest.raises(ValueError, match="no robustness table"):
        tables.robustness_table(p, outs(tmp_path, "x"), eps=0.01)
    summ.drop(columns=[c for c in summ.columns if "1e-05" in c]).to_csv(p, index=False)
    with pytest.raises(ValueError, match="has not run"):
        tables.robustness_table(p, outs(tmp_path, "x"), eps=1e-05)


def test_robustness_table_caption_states_the_attack_precision(tmp_path):
    summ = simulated_summary(causal=False)
    p = tmp_path / "s.csv"
    col = "aa_precision_eps1e-05"
    summ.assign(**{col: "fp32"}).to_csv(p, index=False)
    tables.robustness_table(p, outs(tmp_path, "a"), eps=1e-05)
    md = (tmp_path / "a.md").read_text()
    assert "float32 with TF32 off (autoattack.precision fp32)" in md
    summ.assign(**{col: "tf32"}).to_csv(p, index=False)
    tables.robustness_table(p, outs(tmp_path, "b"), eps=1e-05)
    assert "cuDNN convolutions in TF32" in (tmp_path / "b.md").read_text()
    mixed = summ.assign(**{col: ["tf32"] * 3 + ["fp32"] * (len(summ) - 3)})
    mixed.loc[0, col] = None  # a JSON written before the key existed
    mixed.to_csv(p, index=False)
    tables.robustness_table(p, outs(tmp_path, "c"), eps=1e-05)
    assert (f"Attack precision (autoattack.precision): fp32 for {len(summ) - 3} model(s), "
            "tf32 for 2 model(s), not recorded for 1 model(s).") in (tmp_path / "c.md").read_text()
    summ.to_csv(p, index=False)  # no precision column at all
    tables.robustness_table(p, outs(tmp_path, "d"), eps=1e-05)
    assert f"not recorded for {len(summ)} model(s)" in (tmp_path / "d.md").read_text()


#: results/summary.csv of the demo's run from empty at 2617f0c (2026-12-04, README): its 88
#: target models in 8 (dataset, architecture) cells, with the §3 models, the dose-response
#: variants and the causal replicates on SynthFaces / ResNet-18
DEMO_SUMMARY = ROOT / "tests" / "data" / "demo_summary.csv"


def test_robustness_table_on_demo_summary(tmp_path):
    demo = DEMO_SUMMARY
    t = tables.robustness_table(demo, outs(tmp_path, "t14"), eps=1e-05)
    s = pd.read_csv(demo)
    assert len(t) == len(s[s["treatment"].isna()].groupby(
        ["dataset", "architecture", "defense"]))


# --------------------------------------------------------------------------- regressions

@pytest.fixture(scope="module")
def tidy():
    specs = load_specs(ROOT / "config" / "regressions.yaml")
    assert len(specs) == 56
    return fit_all(simulated_summary(), specs)


def test_regression_table_15(tmp_path, tidy):
    t = tables.regression_table(tidy, "T15", outs(tmp_path, "t15"))
    assert t.shape[1] == 1 + 10  # Term + 5 regressor sets x {OLS, Beta}
    n_row = t[t["Term"] == "n"].iloc[0]
    assert set(n_row.iloc[1:]) == {"18"}  # generic sample, App. G
    joint_ols = tidy[(tidy["spec"] == "T15_ppa_generic_joint_ols")].set_index("term")
    cell = t.loc[t["Term"] == "Acc eps=0.0025", "OLS (joint)"].iloc[0]
    b = joint_ols.loc["robust_acc_eps0.0025"]
    assert cell == f"{b['estimate']:.3f} ({b['se_nonrobust']:.3f}) [{b['se_hc2']:.3f}]"
    ci = t.loc[t["Term"] == "Acc eps=0.0025 95% CI", "OLS (joint)"].iloc[0]
    assert ci == f"[{b['ci_low']:.3f}, {b['ci_high']:.3f}]"
    # Beta cells have no HC2 bracket and a phi row
    beta_cell = t.loc[t["Term"] == "Acc eps=0.0025", "BETA (joint)"].iloc[0]
    assert "[" not in beta_cell and "(" in beta_cell
    assert t.loc[t["Term"] == "phi (precision)", "BETA (joint)"].iloc[0] != ""
    assert (t.loc[t["Term"] == "Status"].iloc[0, 1:] == "ok").all()
    md = (tmp_path / "t15.md").read_text()
    assert md.startswith("Table 15:") and "HC2" in md


def test_regression_table_5_and_17(tmp_path, tidy):
    t5 = tables.regression_table(tidy, "T5", outs(tmp_path, "t5"))
    assert list(t5.columns) == ["Term", "OLS (joint)", "BETA (joint)"]
    t17 = tables.regression_table(tidy, "T17", outs(tmp_path, "t17"))
    assert t17.shape[1] == 1 + 8
    assert any("Test acc.:dataset[facescrub]" == r or "Test acc.:dataset[celeba]" == r
               for r in t17["Term"])


def test_regression_table_records_skip_reason(tmp_path):
    summ = simulated_summary()
    summ = summ[~summ["defense"].isin(["negls", "rolss", "rolss_ssf"])]
    summ = summ.drop(columns=[c for c in summ.columns if c.startswith("ifgmi")])
    td = fit_all(summ, load_specs(ROOT / "config" / "regressions.yaml"))
    t18 = tables.regression_table(td, "T18", outs(tmp_path, "t18"))
    status = t18.loc[t18["Term"] == "Status"].iloc[0, 1:]
    assert all(s.startswith("skipped: missing columns") for s in status)
    assert "ifgmi_attacc1" in status.iloc[0]
    # no number was invented for a skipped spec
    assert (t18.loc[t18["Term"] != "Status"].iloc[:, 1:] == "").all().all()
    assert "Skipped: 10 of 10" in (tmp_path / "t18.md").read_text()
    with pytest.raises(ValueError, match="unknown regression table"):
        tables.regression_table(td, "T99", outs(tmp_path, "x"))


def test_cost_of_privacy(tmp_path, tidy):
    cfg = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())["cost_of_privacy"]
    df = tables.cost_of_privacy_table(tidy, [tmp_path / "c.csv", tmp_path / "c.md"], **cfg)
    assert list(df["term"]) == cfg["terms"]
    row = tidy[(tidy["spec"] == cfg["spec"]) & (tidy["term"] == cfg["terms"][0])].iloc[0]
    mu = row["response_mean"]
    assert df["gamma"].iloc[0] == pytest.approx(1 / (row["estimate"] * mu * (1 - mu)))
    assert pd.read_csv(tmp_path / "c.csv").shape[0] == 3


# --------------------------------------------------------------------------- causal

def test_causal_tables(tmp_path):
    p = tmp_path / "s.csv"
    simulated_summary().to_csv(p, index=False)
    t21, t22 = tables.causal_tables(p, outs(tmp_path, "t21"), outs(tmp_path, "t22"),
                                    sample={"dataset": "facescrub", "architecture": "resnet152"})
    assert set(t21["Model"]) == {"OLS", "BETA"}
    ols = t21[t21["Model"] == "OLS"].iloc[0]
    assert ols["n"] == 10
    assert ols["AT-AT (Treatment)"] == pytest.approx(0.065 - 0.84, abs=0.03)
    beta = t21[t21["Model"] == "BETA"].iloc[0]
    assert beta["Odds ratio"] < 0.05 and beta["OR CI low"] < beta["Odds ratio"] < beta["OR CI high"]
    assert len(t22) == 1 and t22["Response"].iloc[0] == "ppa_dist_face"
    assert t22["AT-AT (Treatment)"].iloc[0] == pytest.approx(0.43, abs=0.05)
    assert (tmp_path / "t22.md").read_text().startswith("Table 22")
    simulated_summary(causal=False).to_csv(p, index=False)
    with pytest.raises(ValueError, match="no causal"):
        tables.causal_tables(p, outs(tmp_path, "a"), outs(tmp_path, "b"))


# --------------------------------------------------------------------------- Tables 23-28

def simulated_per_image(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for d, p in (("nodef", 0.85), ("atat", 0.07)):
        for c in range(12):
            for i in range(5):
                ok1 = int(rng.random() < p)
                rows.append({"dataset": "facescrub", "architecture": "resnet152", "defense": d,
                             "attack": "ppa", "class": c, "correct_top1": ok1,
                             "correct_top5": max(ok1, int(rng.random() < 0.5)),
                             "evalconf": rng.uniform(0, 1), "dist_face": rng.normal(1, 0.1)})
    return pd.DataFrame(rows)


def test_main_results_intervals():
    pi = simulated_per_image()
    res = tables.main_results(pi, simulated_summary()).set_index("defense")
    g = pi[pi["defense"] == "nodef"]
    k, n = int(g["correct_top1"].sum()), len(g)
    lo, hi = proportion_confint(k, n, method="wilson")
    assert res.loc["nodef", "attacc1"] == pytest.approx(k / n)
    assert (res.loc["nodef", "attacc1_ci_low"], res.loc["nodef", "attacc1_ci_high"]) == \
        pytest.approx((lo, hi))
    assert res.loc["nodef", "n_images"] == 60 and res.loc["nodef", "n_classes"] == 12
    per_class = g.groupby("class")["dist_face"].mean()
    m, s = per_class.mean(), per_class.std(ddof=1)
    half = sps.t.ppf(0.975, 11) * s / np.sqrt(12)
    assert res.loc["nodef", "dist_face_ci_low"] == pytest.approx(m - half)
    assert res.loc["nodef", "dist_face_ci_high"] == pytest.approx(m + half)
    assert "dist_eval" not in res.columns  # not measured -> not invented
    summ = simulated_summary()
    grid = summ[summ["treatment"].isna()]
    acc = grid[(grid["dataset"] == "facescrub") & (grid["architecture"] == "resnet152")
               & (grid["defense"] == "atat")]["test_acc"].iloc[0]
    assert res.loc["atat", "test_acc"] == pytest.approx(acc)


def test_main_results_table_files(tmp_path):
    pi = simulated_per_image()
    ifgmi = pi.assign(attack="ifgmi", correct_top1=0)
    both = pd.concat([ifgmi, pi], ignore_index=True)
    # Table 27 = Table 23 (ResNet-152 main results) with intervals; attacks in PPA, IF-GMI order
    t = tables.main_results_table(both, simulated_summary(), outs(tmp_path, "t27"), number=27)
    assert list(t["Attack"]) == ["PPA", "PPA", "IF-GMI", "IF-GMI"]
    assert t["AttAcc@1"].str.match(r"^\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]$").all()
    assert (t[t["Attack"] == "IF-GMI"]["AttAcc@1"].str.startswith("0.000 [0.000, ")).all()
    assert (tmp_path / "t27.md").read_text().startswith(
        "Table 27: Table 23 with 95% intervals (ResNet-152; PPA, IF-GMI, PPDG)")
    # Table 23 itself: the same point values, no intervals (the paper defers them to Table 27)
    t23 = tables.main_results_table(both, simulated_summary(), outs(tmp_path, "t23"), number=23)
    assert t23["AttAcc@1"].str.match(r"^\d\.\d{3}$").all()
    assert list(t23["AttAcc@1"]) == [v.split(" ")[0] for v in t["AttAcc@1"]]
    assert "intervals in Table 27" in (tmp_path / "t23.md").read_text().splitlines()[0]
    with pytest.raises(ValueError, match="no per-image results for Table 24"):
        tables.main_results_table(pi, None, outs(tmp_path, "t24"), number=24)
    bad = pi.drop(columns=["correct_top5"])
    with pytest.raises(ValueError, match="lacks columns"):
        tables.main_results(bad)


def test_main_results_table_selects_the_rows_of_the_mapped_roles(tmp_path):
    """``paper_roles`` (the demo's): Table 25 (the paper's ResNet-18 on FaceScrub and CelebA)
    reads the config's ResNet-10 on both populations, no other row; captions and labels show
    the config's names. Without the config the same frame has no Table 25 row."""
    pi = simulated_per_image()
    cells = [("synthfaces", "resnet10"), ("synthfaces_b", "resnet10"),
             ("synthfaces", "resnet18"), ("facescrub", "resnet18"), ("celeba", "resnet10")]
    frame = pd.concat([pi.assign(dataset=d, architecture=a) for d, a in cells],
                      ignore_index=True)
    config = {"paper_roles": {"datasets": {"facescrub": "synthfaces", "celeba": "synthfaces_b"},
                              "architectures": {"resnet152": "resnet18", "resnet18": "resnet10"}}}
    assert tables.main_table_layout(25, config)["architectures"] == ["resnet10"]
    assert tables.main_table_layout(25)["architectures"] == ["resnet18"]
    t = tables.main_results_table(frame, None, outs(tmp_path, "t25"), number=25, config=config)
    assert set(zip(t["Dataset"], t["Architecture"])) == {("SynthFaces", "ResNet-10"),
                                                         ("SynthFaces-B", "ResNet-10")}
    assert len(t) == 4 and (t["Images"] == 60).all()
    assert (tmp_path / "t25.md").read_text().startswith(
        "Table 25: model-inversion results (ResNet-10; PPA, IF-GMI, PPDG)")
    t23 = tables.main_results_table(frame, None, outs(tmp_path, "t23"), number=23, config=config)
    assert set(zip(t23["Dataset"], t23["Architecture"])) == {("SynthFaces", "ResNet-18")}
    # no config: the paper's names, i.e. the one FaceScrub ResNet-18 cell of the frame
    t0 = tables.main_results_table(frame, None, outs(tmp_path, "t25p"), number=25)
    assert set(zip(t0["Dataset"], t0["Architecture"])) == {("FaceScrub", "ResNet-18")}


# --------------------------------------------------------------------------- figures

def _png_pixels(path):
    import matplotlib.image as mpimg

    return mpimg.imread(path)


def test_figure2_observed_vs_predicted(tmp_path):
    specs = {s["name"]: s for s in load_specs(ROOT / "config" / "regressions.yaml")}
    out = tmp_path / "f2.png"
    info = observed_vs_predicted(with_counts(simulated_summary()),
                                 specs["T15_ppa_generic_joint_ols"], out)
    assert info["n"] == 18 and 0 < info["r2"] <= 1
    img = _png_pixels(out)
    assert img.shape[0] > 300 and img[..., :3].std() > 0.05
    info_b = observed_vs_predicted(with_counts(simulated_summary()),
                                   specs["T15_ppa_generic_joint_beta"], tmp_path / "f2b.png")
    assert info_b["n"] == 18


def test_figure2_title_names_the_regression_in_words():
    """The title names the paper's table, sample and regressors, not the spec's internal id
    (a reader of Figure 2 cannot look up ``T15_ppa_generic_joint_ols``)."""
    from atat.analysis.figures import _spec_title

    specs = {s["name"]: s for s in load_specs(ROOT / "config" / "regressions.yaml")}
    assert _spec_title(specs["T15_ppa_generic_joint_ols"]) == (
        "Table 15, generic defenses\nOLS on test acc. + robust acc. at ε 0.0025, 0.0005, 1e-05")
    assert _spec_title(specs["T17_ppa_generic_acc_x_dataset_testacc_beta"]) == (
        "Table 17, generic defenses\nBETA on test acc.; controls acc × dataset")
    assert _spec_title({"name": "my_spec", "family": "ols", "regressors": ["x"]}) == "my_spec"


def test_figure4_on_the_demo_summary():
    """The demo's real summary: per panel AT-AT, the seven baselines and NoDef of that cell
    (SynthFaces-B / ResNet-18 trains no AT-AT); PPDG only on the main cell, a note elsewhere."""
    from atat.analysis.figures import _accuracy_vs_privacy_figure

    demo = pd.read_csv(DEMO_SUMMARY)
    # the fixture predates the summary's n_test column: the figure says what it lacks rather
    # than drawing points without intervals
    with pytest.raises(ValueError, match=r"lacks the count column\(s\) \['n_test'\]"):
        _accuracy_vs_privacy_figure(demo, attacks=["ppa"], metrics=["attacc1"],
                                    architecture="resnet18")
    # that run's test split had 60 images (docs/decisions.md#the-test-split-60--1260-images):
    # every test accuracy of the fixture is a count over 60
    assert ((demo["test_acc"] * 60).round() - demo["test_acc"] * 60).abs().max() < 1e-6
    fig, n = _accuracy_vs_privacy_figure(demo.assign(n_test=60),
                                         attacks=["ppa", "ifgmi", "ppdg"],
                                         metrics=["attacc1"], architecture="resnet18")
    assert n == 3 + 2 + 1   # PPA on 3 datasets, IF-GMI on the 2 face populations, PPDG on 1
    labels = {ax.get_title() + " " + ax.get_ylabel().split("\n")[0]:
              sorted(t.get_text() for t in ax.texts) for ax in fig.axes if ax.axison}
    nine = sorted(["NoDef", "MID", "BiDO", "TL-DMI", "NegLS", "RoLSS", "RoLSS-SSF", "Trap-MID",
                   "AT-AT"])
    assert labels["SynthFaces / ResNet-18 PPA AttAcc@1"] == nine
    assert labels["SynthFaces / ResNet-18 PPDG AttAcc@1"] == nine
    assert labels["SynthFaces-B / ResNet-18 IF-GMI AttAcc@1"] == [x for x in nine
                                                                   if x not in ("AT-AT",
                                                                                "Trap-MID")]
    notes = sorted(t.get_text() for ax in fig.axes if not ax.axison for t in ax.texts)
    assert notes == ["IF-GMI not run on\nSynthDogs / ResNet-18",
                     "PPDG not run on\nSynthDogs / ResNet-18",
                     "PPDG not run on\nSynthFaces-B / ResNet-18"]


def test_figure4_highlights_atat(tmp_path):
    out = tmp_path / "f4.png"
    n = accuracy_vs_privacy(with_counts(simulated_summary()), out,
                            metrics=["attacc1", "attacc5"])
    assert n == 3 * 2 * 2  # (ppa, ifgmi, ppdg) x 2 metrics x 2 datasets
    img = _png_pixels(out)[..., :3]
    red = np.array([0xD6, 0x27, 0x28]) / 255  # tab:red
    assert (np.abs(img - red).sum(axis=-1) < 0.05).sum() > 50
    no_atat = with_counts(simulated_summary())
    no_atat = no_atat[no_atat["defense_type"] != "atat"]
    accuracy_vs_privacy(no_atat, tmp_path / "f4b.png")
    img = _png_pixels(tmp_path / "f4b.png")[..., :3]
    assert (np.abs(img - red).sum(axis=-1) < 0.05).sum() == 0
    with pytest.raises(ValueError, match="no inversion metric"):
        accuracy_vs_privacy(simulated_summary().drop(
            columns=[c for c in simulated_summary().columns if "attacc" in c]), tmp_path / "x.png")


# --------------------------------------------------------------------------- targets

def _runs(*cells):
    return [SimpleNamespace(dataset=d, architecture=a, defense=f, treatment=t)
            for d, a, f, t in cells]


def test_stats_targets_follow_config():
    reg = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    # the generic and gradient samples' models (a spec is planned only if its sample can fit it)
    runs = _runs(*[(d, a, f, None) for d in ("facescrub", "celeba")
                   for a in ("resnet152", "resnet18")
                   for f in ("nodef", "mid", "bido", "tldmi", "negls", "rolss", "rolss_ssf")],
                 ("facescrub", "resnet18", "tldmi5", None), ("celeba", "resnet18", "tldmi5", None))
    aa = {"epsilons": [0.031, 0.0025, 0.0005, 1e-5]}
    two = _runs(("facescrub", "resnet152", "nodef", None), ("celeba", "resnet18", "mid", None))
    assert not any("regressions" in x or "table15" in x for x in stats_targets(
        {"inversion": {"attacks": ["ppa"]}, "causal": None, "autoattack": aa}, reg, two))
    assert stats_targets({"causal": None, "autoattack": aa}, reg, runs) == []  # no inversion
    t = stats_targets({"inversion": {"attacks": ["ppa"]}, "causal": None, "autoattack": aa},
                      reg, runs)
    assert "results/stats/regressions.csv" in t
    for n in ("5", "15", "16", "17"):
        assert f"results/tables/table{n}.md" in t
    for n in ("18", "19", "20", "21", "22", "24", "26"):
        assert f"results/tables/table{n}.md" not in t
    for n in ("23", "25", "27", "28"):  # ResNet-152 / ResNet-18 on faces, with PPA alone
        assert f"results/tables/table{n}.md" in t
    assert "results/stats/cost_of_privacy.csv" in t
    assert "results/figures/figure2_observed_vs_predicted.png" in t
    t = stats_targets({"inversion": {"attacks": ["ppa", "ifgmi"]}, "causal": {"n_models": 10},
                       "autoattack": aa}, reg, runs)
    for n in ("18", "19", "20", "21", "22", "27"):
        assert f"results/tables/table{n}.csv" in t
    assert "results/tables/table24.csv" not in t  # no DenseNet-169 model
    # without the epsilons of the joint fits, Table 5 / Figure 2 / cost of privacy cannot be
    # fitted; Table 15 still has its single-epsilon and test-accuracy-only fits
    t = stats_targets({"inversion": {"attacks": ["ppa"]}, "causal": None,
                       "autoattack": {"epsilons": [0.031, 1e-5]}}, reg, runs)
    assert "results/tables/table15.md" in t and "results/tables/table5.md" not in t
    assert not any("figure2" in x or "cost_of_privacy" in x for x in t)
    # Figure 4 (AT-AT, the seven baselines and NoDef on the main architecture): planned only
    # where it has a point
    assert "results/figures/figure4_accuracy_vs_privacy.png" in t
    other = _runs(("facescrub", "resnet152", "tldmi5", None), ("celeba", "resnet18", "mid", None))
    t4 = stats_targets({"inversion": {"attacks": ["ppa"]}, "causal": None, "autoattack": aa,
                        "defenses": {"tldmi5": {"type": "tldmi"}, "mid": {"type": "mid"}}},
                       reg, other)
    assert not any("figure4" in x for x in t4)
    # models of no sample's dataset (the synthetic demo): no regression output at all
    demo = _runs(("synthfaces", "resnet18", "nodef", None), ("synthfaces", "resnet18", "mid", None))
    t = stats_targets({"inversion": {"attacks": ["ppa"]}, "causal": None, "autoattack": aa},
                      reg, demo)
    assert not any("regressions" in x or "table5" in x or "table15" in x for x in t)


# ----------------------------------------------------------------------- Tables 2, 3
def _section3_summary(tmp_path):
    rows = []
    for arch in ["resnet18", "resnet152"]:
        for d, tr, te, face, kept in [("nodef", 1.0, 0.9, 0.8, None),
                                      ("permuted", 0.99, 0.01, 1.6, None),
                                      ("nodef_es", 0.7, 0.6, 0.9, None),
                                      ("tldmi", 0.95, 0.85, 0.85, None),
                                      ("unseen_pixels", 0.8, 0.62, 0.95, 0.025)]:
            rows.append(dict(dataset="facescrub", architecture=arch, defense=d, seed=0,
                             train_acc=tr, test_acc=te, ppa_attacc1=te / 2,
                             ppa_attacc5=te / 1.5, ppa_dist_face=face, ppa_dist_eval=face * 100,
                             kept_pixel_fraction=kept))
    rows.append(dict(dataset="celeba", architecture="resnet18", defense="nodef", seed=0,
                     train_acc=1.0, test_acc=0.8, ppa_attacc1=0.5, ppa_attacc5=0.7,
                     ppa_dist_face=0.7, ppa_dist_eval=70.0, kept_pixel_fraction=None))
    path = tmp_path / "summary.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_table2_pairs_permuted_with_true_label_models(tmp_path):
    from atat.analysis.tables import table2
    t = table2(_section3_summary(tmp_path), outs(tmp_path, "table2"), permuted=["permuted"],
               true_labels=["nodef"])
    # only cells with a permuted model (CelebA has none), true labels first
    assert len(t) == 4 and set(t["Dataset"]) == {"FaceScrub"}
    rn18 = t[t["Architecture"] == "ResNet-18"]
    assert rn18["Model"].tolist() == ["true labels", "permuted labels"]
    assert rn18["Train acc."].tolist() == [1.0, 0.99]
    assert rn18["PPA delta_face (L2)"].tolist() == [0.8, 1.6]
    assert (tmp_path / "table2.md").read_text().startswith("Table 2")


def test_table3_lists_the_four_models_with_the_kept_fraction(tmp_path):
    from atat.analysis.tables import table3
    roles = {"Unseen-Pixels": ["unseen_pixels"], "NoDef": ["nodef"],
             "NoDef (early-stopped)": ["nodef_es"], "TL-DMI": ["tldmi"]}
    t = table3(_section3_summary(tmp_path), outs(tmp_path, "table3"), roles=roles)
    assert t["Model"].tolist()[:4] == list(roles)
    up = t[(t["Model"] == "Unseen-Pixels") & (t["Architecture"] == "ResNet-152")].iloc[0]
    assert up["Pixels kept"] == pytest.approx(0.025) and up["PPA AttAcc@1"] == pytest.approx(0.31)
    with pytest.raises(ValueError, match="no Unseen-Pixels"):
        table3(_section3_summary(tmp_path), outs(tmp_path, "t3b"), roles={"Unseen-Pixels": ["x"]})
    # a role holding two trained variants (TL-DMI and TL-DMI-5) names each row by its defense
    summ = pd.read_csv(_section3_summary(tmp_path))
    extra = summ[summ["defense"] == "tldmi"].assign(defense="tldmi5", test_acc=0.5)
    pd.concat([summ, extra]).to_csv(tmp_path / "s5.csv", index=False)
    t = table3(tmp_path / "s5.csv", outs(tmp_path, "t3c"),
               roles={**roles, "TL-DMI": ["tldmi", "tldmi5"]})
    rn18 = t[t["Architecture"] == "ResNet-18"]
    assert rn18["Model"].tolist()[-2:] == ["TL-DMI", "TL-DMI-5"]
    assert rn18["Test acc."].tolist()[-1] == pytest.approx(0.5)


def test_reconstruction_grid_puts_the_training_image_beside_each_defense(tmp_path):
    import torch

    from atat.base import io
    from atat.data.synthfaces import generate_synthfaces
    from atat.analysis.figures import reconstruction_grid
    generate_synthfaces(tmp_path / "ds", n_private_identities=3, n_public_identities=1,
                        images_per_identity=6, public_images_per_identity=1, resolution=16,
                        seed=1, progress=False)
    paths = {}
    for d, classes in [("nodef", [0, 1, 2]), ("atat", [1, 2])]:
        best = {c: {"evalconf": 0.5, "image": torch.full((3, 16, 16), 40 * c, dtype=torch.uint8)}
                for c in classes}
        paths[d] = tmp_path / f"{d}.pt"
        io.torch_save(best, paths[d])
    out = tmp_path / "grid.png"
    shown = reconstruction_grid(paths, tmp_path / "ds" / "private", out, n_classes=4)
    assert shown == [1, 2]                       # classes every defense attacked
    assert _png_pixels(out).std() > 0


def test_unseen_pixels_figure_reports_the_masks_kept_fraction(tmp_path):
    import torch

    from atat.base import io
    from atat.data.synthfaces import generate_synthfaces
    from atat.analysis.figures import unseen_pixels_figure
    generate_synthfaces(tmp_path / "ds", n_private_identities=2, n_public_identities=1,
                        images_per_identity=6, public_images_per_identity=1, resolution=16,
                        seed=1, progress=False)
    mask = torch.zeros(3, 16, 16)
    mask[:, :4, :] = 1.0                           # a quarter of the pixels kept
    torch.save({"state_dict": {"mask.weight": mask}, "defense": {"type": "pixel_mask"}},
               tmp_path / "model.pt")
    best = {c: {"evalconf": 0.9, "image": torch.full((3, 8, 8), 200, dtype=torch.uint8)}
            for c in (0, 1)}
    io.torch_save(best, tmp_path / "best.pt")
    out = unseen_pixels_figure(tmp_path / "model.pt", tmp_path / "ds" / "private",
                               tmp_path / "best.pt", tmp_path / "fig1.png")
    assert out["classes"] == [0, 1] and out["kept_pixel_fraction"] == pytest.approx(0.25)
    assert _png_pixels(tmp_path / "fig1.png").std() > 0
