"""atat.claims: the paper's claims against a run, on simulated workflow outputs where each
claim holds (or fails) by construction, and the claims rule's inputs under the demo plan."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from atat.claims import VERDICTS, claims_table, directional, no_effect, rate_difference
from atat.config import load_config, model_runs
from atat.paper import Plan, claims_inputs, final_targets

ROOT = Path(__file__).resolve().parents[1]
PAPER, DEMO = ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml"
CELL = {"dataset": "synthfaces", "architecture": "resnet18"}   # the demo's FaceScrub/RN-152
# PPA AttAcc@1 on 100 images, test accuracy, mean delta_face, mean per-batch HSIC(X, Z)
HOLDS = {
    "nodef": (0.60, 0.70, 0.50, 1.0), "nodef_es": (0.50, 0.60, 0.52, 1.0),
    "mid": (0.40, 0.70, 0.55, 1.0), "bido": (0.30, 0.70, 0.55, 1.0),
    "bido_lx1e3": (0.50, 0.70, 0.52, 0.7), "tldmi": (0.25, 0.65, 0.56, 1.0),
    "negls": (0.30, 0.70, 0.55, 1.0), "rolss": (0.45, 0.70, 0.52, 1.0),
    "rolss_ssf": (0.50, 0.70, 0.51, 1.0), "trap_mid": (0.40, 0.70, 0.53, 1.0),
    "atat": (0.05, 0.75, 0.70, 1.0), "permuted": (0.05, 0.05, 0.90, 1.0),
    "unseen_pixels": (0.55, 0.62, 0.51, 1.0),
}


def _write(tmp: Path, cells: dict, demo: dict, *, causal_gap: float = 0.5) -> dict:
    rng = np.random.default_rng(0)
    per_image, summary = [], []
    for d, (rate, acc, dist, _) in cells.items():
        for attack in ("ppa", "ifgmi"):
            correct = np.zeros(100, int)
            correct[: int(round(rate * 100))] = 1
            rng.shuffle(correct)
            for i in range(100):
                per_image.append({**CELL, "defense": d, "seed": 0, "attack": attack,
                                  "class": i // 5, "correct_top1": correct[i],
                                  "correct_top5": correct[i],
                                  "dist_face": dist + rng.normal(0, 0.02)})
        summary.append({**CELL, "defense": d, "defense_type": demo["defenses"][d]["type"],
                        "seed": 0, "test_acc": acc, "treatment": np.nan,
                        "ppa_attacc1": rate, "ppa_n_images": 100})
    for k in range(10):     # the causal replicates: AT-AT lowers AttAcc@1 by causal_gap
        t = k % 2
        summary.append({**CELL, "defense": "atat" if t else "nodef", "defense_type":
                        "atat" if t else "nodef", "seed": 100 + k, "test_acc": 0.7,
                        "treatment": t, "replicate": k,
                        "ppa_attacc1": 0.6 - causal_gap * t + 0.01 * (k % 3),
                        "ppa_n_images": 100, "ppa_dist_face": 0.5 + 0.2 * t + 0.01 * k})
    pd.DataFrame(per_image).to_csv(tmp / "per_image.csv", index=False)
    pd.DataFrame(summary).to_csv(tmp / "summary.csv", index=False)
    hsic = {}
    for d, (*_, h) in cells.items():
        path = tmp / f"hsic_{d}.json"
        path.write_text(json.dumps({"raw": {"hsic_xz": {
            f"layer{j}": list(h + rng.normal(0, 0.05, 30)) for j in range(4)}}}))
        hsic[d] = path
    tidy = []
    for table, attack, sample, slope in (("T15", "ppa", "generic", (0.2, 0.8)),
                                         ("T18", "ifgmi", "generic", (0.1, 0.9)),
                                         ("T16", "ppa", "gradient", (-0.3, 0.6)),
                                         ("T19", "ifgmi", "gradient", (-0.2, 0.7))):
        for eps in ("0.0025", "0.0005", "1e-05"):
            tidy.append({"spec": f"{table}_{attack}_{sample}_eps{eps}_ols", "status": "ok",
                         "term": f"robust_acc_eps{eps}", "estimate": sum(slope) / 2,
                         "ci_low": slope[0], "ci_high": slope[1], "r2": 0.8, "n": 18})
        tidy.append({"spec": f"{table}_{attack}_{sample}_joint_ols", "status": "ok",
                     "term": "test_acc", "estimate": 0.1, "ci_low": -0.2, "ci_high": 0.4,
                     "r2": 0.93, "n": 18})
    pd.DataFrame(tidy).to_csv(tmp / "regressions.csv", index=False)
    pd.DataFrame({"term": ["robust_acc_eps0.0025", "robust_acc_eps0.0005",
                           "robust_acc_eps1e-05"], "gamma": [0.3, 5.0, 0.9],
                  "ci_low": [0.2, -np.inf, 0.5], "ci_high": [0.5, np.inf, 1.9]}
                 ).to_csv(tmp / "cost.csv", index=False)
    pd.DataFrame({"experiment": ["AT-AT", "permuted labels", "Unseen-Pixels"],
                  "model": [f"synthfaces/resnet18/{d}/seed0"
                            for d in ("atat", "permuted", "unseen_pixels")],
                  "check": ["a", "b", "c"],
                  "passed": [True, True, True]}).to_csv(tmp / "pre.csv", index=False)
    pd.DataFrame({"weight_adv": [0, 0.25, 0.5, 1.0], "ppa_attacc1": [0.6, 0.4, 0.2, 0.05],
                  "ppa_n_images": 100}).to_csv(tmp / "dose.csv", index=False)
    return dict(summary_csv=tmp / "summary.csv", per_image_csv=tmp / "per_image.csv",
                regressions_csv=tmp / "regressions.csv", cost_csv=tmp / "cost.csv",
                hsic_files=hsic, preconditions_csv=tmp / "pre.csv", dose_csv=tmp / "dose.csv",
                outputs=[tmp / "claims.csv", tmp / "claims.md"])


@pytest.fixture
def demo():  # with the demo's designed dose-response sweep (cut from config/demo.yaml)
    return load_config(PAPER, DEMO, ROOT / "tests" / "data" / "demo_dose_response.yaml")


def test_claims_that_hold_by_construction_are_supported_or_consistent(tmp_path, demo):
    files = _write(tmp_path, HOLDS, demo)
    t = claims_table(demo, **files).set_index("claim")
    assert set(t["verdict"]) <= set(VERDICTS)
    v = t["verdict"].to_dict()
    for claim in ("hsic_bido_star", "permuted_permuted", "tradeoff_ppa", "tradeoff_ifgmi",
                  "cost_robust_acc_eps0.0025", "cost_robust_acc_eps1e-05", "causal_atat",
                  "atat_ppa", "atat_ifgmi", "dose_response"):
        assert v[claim] == "supported", (claim, t.loc[claim, "run"], t.loc[claim, "basis"])
    # claims of no effect are never more than consistent; an unbounded gamma interval is
    # consistent, not supported
    for claim in ("hsic_bido", "hsic_tldmi", "hsic_negls", "unseen_pixels_unseen_pixels",
                  "clean_acc_ppa", "tradeoff_gradient", "cost_robust_acc_eps0.0005"):
        assert v[claim] == "consistent", (claim, t.loc[claim, "run"])
    assert "84% -> 6.5%" in t.loc["causal_atat", "paper"]
    md = files["outputs"][1].read_text()
    assert md.startswith("The paper's claims against this run") and "supported" in md


def test_claims_the_run_contradicts_say_so(tmp_path, demo):
    cells = dict(HOLDS)
    cells["bido"] = (0.30, 0.70, 0.55, 0.6)            # BiDO does lower HSIC
    cells["unseen_pixels"] = (0.10, 0.62, 0.60, 1.0)   # Unseen-Pixels far more private
    cells["rolss"] = (0.0, 0.80, 0.60, 1.0)            # a baseline dominates AT-AT
    cells["bido_lx1e3"] = (0.10, 0.70, 0.60, 1.3)      # BiDO**: higher HSIC, better defense
    files = _write(tmp_path, cells, demo, causal_gap=-0.3)   # AT-AT raises AttAcc@1
    t = claims_table(demo, **files).set_index("claim")["verdict"]
    for claim in ("hsic_bido", "unseen_pixels_unseen_pixels", "atat_ppa", "hsic_bido_star",
                  "causal_atat"):
        assert t[claim] == "contradicted", claim


def test_a_failed_precondition_makes_its_claims_not_testable(tmp_path, demo):
    files = _write(tmp_path, HOLDS, demo)
    pre = pd.read_csv(files["preconditions_csv"])
    pre.loc[pre["experiment"] == "AT-AT", "passed"] = False
    pre.to_csv(files["preconditions_csv"], index=False)
    t = claims_table(demo, **files).set_index("claim")
    assert t.loc["causal_atat", "verdict"] == "not testable"
    assert "failed: a" in t.loc["causal_atat", "basis"]
    assert t.loc["permuted_permuted", "verdict"] == "supported"    # another experiment


def _fail_atat_check(files: dict, model: str) -> None:
    """Add a failed AT-AT precondition check of ``model`` to the simulated outputs."""
    pre = pd.read_csv(files["preconditions_csv"])
    pre = pd.concat([pre, pd.DataFrame({"experiment": ["AT-AT"], "check": ["a"],
                                        "model": [model], "passed": [False]})])
    pre.to_csv(files["preconditions_csv"], index=False)


def test_another_cells_failed_precondition_leaves_the_claims_testable(tmp_path, demo):
    """The demo's DenseNet-47 AT-AT on SynthFaces-B failing its checks must not decide the
    claims about the SynthFaces / ResNet-18 cell and its causal replicates."""
    files = _write(tmp_path, HOLDS, demo)
    _fail_atat_check(files, "synthfaces_b/densenet47/atat/seed0")
    t = claims_table(demo, **files).set_index("claim")
    assert t.loc["causal_atat", "verdict"] != "not testable"
    assert "precondition passed" in t.loc["causal_atat", "basis"]
    assert all(t.loc[c, "verdict"] != "not testable" for c in t.index if c.startswith("atat_"))


def _add_cell(files: dict, demo: dict, dataset: str, architecture: str, cells: dict) -> None:
    """Append a second grid cell's models (rate, test acc.) to the simulated outputs."""
    per_image, summary = pd.read_csv(files["per_image_csv"]), pd.read_csv(files["summary_csv"])
    rows, models = [], []
    for d, (rate, acc) in cells.items():
        for attack in ("ppa", "ifgmi"):
            for i in range(100):
                rows.append({"dataset": dataset, "architecture": architecture, "defense": d,
                             "seed": 0, "attack": attack, "class": i // 5,
                             "correct_top1": int(i < rate * 100),
                             "correct_top5": int(i < rate * 100), "dist_face": 0.5})
        models.append({"dataset": dataset, "architecture": architecture, "defense": d,
                       "defense_type": demo["defenses"][d]["type"], "seed": 0, "test_acc": acc,
                       "treatment": np.nan, "ppa_attacc1": rate, "ppa_n_images": 100})
    pd.concat([per_image, pd.DataFrame(rows)]).to_csv(files["per_image_csv"], index=False)
    pd.concat([summary, pd.DataFrame(models)]).to_csv(files["summary_csv"], index=False)


def test_every_cell_with_atat_gets_its_own_section6_claims(tmp_path, demo):
    """§6 holds "across all ... data, and attacks" (Tables 23-28): AT-AT against the
    baselines of each cell where it was attacked, judged on that cell's rows and checks; the
    claims cell's rows keep their names."""
    files = _write(tmp_path, HOLDS, demo)
    _add_cell(files, demo, "synthfaces_b", "densenet47",   # MID: more private, as accurate
              {"nodef": (0.6, 0.7), "mid": (0.1, 0.75), "bido": (0.5, 0.7), "atat": (0.4, 0.7)})
    t = claims_table(demo, **files).set_index("claim")
    assert t.loc["atat_ppa", "verdict"] == "supported"     # the claims cell, as before
    other = t.loc["atat_ppa_synthfaces_b_densenet47"]
    assert other["verdict"] == "contradicted" and "MID" in other["run"]
    assert "of 2 baselines" in other["run"] and "synthfaces_b / densenet47" in other["statement"]
    # the statement counts the baselines the cell trained, not the paper's 7
    assert "each of the 2 baselines trained in the cell (of the paper's 7)" in other["statement"]
    assert t.loc["atat_ifgmi_synthfaces_b_densenet47", "verdict"] == "contradicted"
    _fail_atat_check(files, "synthfaces_b/densenet47/atat/seed0")
    t = claims_table(demo, **files).set_index("claim")
    assert t.loc["atat_ppa_synthfaces_b_densenet47", "verdict"] == "not testable"
    assert t.loc["atat_ppa", "verdict"] == "supported"


def test_verdict_rules():
    assert directional(0.3, 0.1, 0.5, +1) == "supported"
    assert directional(0.3, -0.1, 0.5, +1) == "consistent"
    assert directional(-0.3, -0.5, 0.1, +1) == "inconclusive"
    assert directional(-0.3, -0.5, -0.1, +1) == "contradicted"
    assert no_effect(-0.5, -0.1, forbidden=-1) == "contradicted"
    assert no_effect(-0.5, 0.1, forbidden=-1) == "consistent"
    est, lo, hi = rate_difference(0.6, 100, 0.3, 100)
    assert est == pytest.approx(0.3) and 0.15 < lo < 0.3 < hi < 0.45


def test_the_demo_plan_builds_the_claims_from_its_own_outputs(demo):
    regressions = yaml.safe_load((ROOT / "config" / "regressions.yaml").read_text())
    demo = load_config(PAPER, DEMO)
    plan = Plan(demo, model_runs(demo), regressions)
    inputs = claims_inputs(plan)
    targets = set(final_targets(plan))
    assert {"results/tables/claims.csv", "results/tables/claims.md"} <= targets
    for key in ("regressions", "cost", "preconditions"):
        assert inputs[key] in targets, key
    assert inputs["dose"] in targets       # the demo's dose-response sweep (back 2026-12-02)
    assert {"nodef", "bido", "bido_lx1e3", "tldmi", "negls"} <= set(inputs["hsic"])
    assert all("/synthfaces/resnet18/" in f for f in inputs["hsic"].values())


def test_seed_variation_of_the_causal_replicates(tmp_path, demo):
    files = _write(tmp_path, HOLDS, demo)
    files["outputs"] += [tmp_path / "seed_variation.csv", tmp_path / "seed_variation.md"]
    claims_table(demo, **files)
    sv = pd.read_csv(tmp_path / "seed_variation.csv").set_index(["arm", "metric"])
    # 5 control replicates: AttAcc@1 0.60 + 0.01 * (k % 3) for k = 0, 2, 4, 6, 8
    row = sv.loc[("control", "ppa_attacc1")]
    assert row["n_seeds"] == 5 and row["min"] == pytest.approx(0.60)
    assert row["max"] == pytest.approx(0.62) and row["grid_model"] == pytest.approx(0.60)
    assert row["sd"] == pytest.approx(np.std([0.60, 0.62, 0.61, 0.60, 0.62], ddof=1))
    assert (tmp_path / "seed_variation.md").read_text().startswith("How much the numbers move")
    no_causal = {**demo, "causal": None}
    claims_table(no_causal, **files)
    assert "no causal experiment" in (tmp_path / "seed_variation.md").read_text()


def test_a_run_of_two_models_gives_reasons_not_errors(tmp_path, demo):
    # .test/tiny's grid (NoDef and AT-AT only): every claim that needs another model says so
    files = _write(tmp_path, {d: HOLDS[d] for d in ("nodef", "atat")}, demo)
    t = claims_table(demo, **files).set_index("claim")
    assert t.loc["atat_ppa", "verdict"] == "not testable"
    assert "no baseline" in t.loc["atat_ppa", "basis"]
    for claim in ("hsic_bido", "hsic_bido_star", "unseen_pixels_unseen_pixels",
                  "permuted_permuted"):
        assert t.loc[claim, "verdict"] == "not testable" and t.loc[claim, "basis"], claim


def test_a_run_without_statistics_gives_reasons_not_errors(tmp_path, demo):
    # .test/tiny's `all`: one grid cell, so no regression, cost or dose-response input
    files = _write(tmp_path, {d: HOLDS[d] for d in ("nodef", "atat")}, demo)
    files.update(regressions_csv=None, cost_csv=None, dose_csv=None)
    t = claims_table(demo, **files).set_index("claim")
    for claim in ("tradeoff_ppa", "tradeoff_ifgmi", "clean_acc_ppa", "tradeoff_gradient",
                  "cost_robust_acc_eps0.0025"):
        assert t.loc[claim, "verdict"] == "not testable" and t.loc[claim, "basis"], claim


def test_the_caption_names_each_priors_quality_verdict():
    """Two populations, two priors (the demo's faces and dogs): the caption says which prior
    failed, so a failed dogs prior is not read as the prior of the face claims."""
    import pandas as pd

    from atat import claims as C
    from atat.preconditions import PRIOR

    def inputs(rows):
        empty = pd.DataFrame()
        return C.Inputs(config={}, summary=empty, main=empty, per_image=empty, tidy=None,
                        causal=None, cost=None, hsic={}, preconditions=pd.DataFrame(rows),
                        dose=None, dataset="synthfaces", architecture="resnet18")

    row = dict(experiment=PRIOR, value=0.0, threshold=">= 0.5", note="")
    rows = [dict(row, model="generators/synthfaces_public", check=c, passed=True)
            for c in ("prior_recognition", "prior_precision")]
    rows += [dict(row, model="generators/synthdogs_public", check="prior_recognition",
                  passed=False),
             dict(row, model="generators/synthdogs_public", check="prior_coverage", passed=True)]
    text = C._prior_sentence(inputs(rows))
    assert "synthdogs_public failed: prior_recognition" in text
    assert "synthfaces_public passed" in text and "worse attacker" in text
    ok = C._prior_sentence(inputs(rows[:2]))
    assert "synthfaces_public passed" in ok and "worse attacker" not in ok
    unmeasured = [dict(row, model="generators/ffhq", check="prior_quality", passed=None)]
    assert "ffhq not measured" in C._prior_sentence(inputs(unmeasured))
