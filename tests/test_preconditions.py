"""The experiments' preconditions: each check passes and fails at its threshold, a missing
value fails, a permuted-label model trained one epoch is flagged, the measurement's own regime
(AutoAttack, evaluation model, determinism, PPA on NoDef) is gated, and the table is a target
of ``all`` for the paper config and the demo."""

from __future__ import annotations

import copy
import logging
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from atat.analysis import preconditions as pc
from atat.plan.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = load_config(ROOT / "config" / "config.yaml")
TH = CONFIG["preconditions"]
CELL = {"dataset": "d", "architecture": "resnet18", "seed": 0}


def _summary(**per_defense):
    """One summary row per defense of the paper config (nodef, atat, permuted, unseen_pixels)
    with the given column values."""
    rows = []
    for defense, cols in per_defense.items():
        rows.append({**CELL, "defense": defense,
                     "defense_type": CONFIG["defenses"][defense]["type"], "test_acc": 0.8,
                     "train_acc": 1.0, "kept_pixel_fraction": float("nan"),
                     "robust_acc_eps0.031": 0.0, "robust_acc_eps0.0025": 0.5,
                     "robust_acc_eps0.0005": 0.7, "robust_acc_eps1e-05": 0.8,
                     **{f"aa_clean_acc_eps{t}": 0.9 for t in EPS_TAGS},
                     **{f"aa_n_examples_eps{t}": 64 for t in EPS_TAGS}, **cols})
    return pd.DataFrame(rows)


EPS_TAGS = ["0.031", "0.0025", "0.0005", "1e-05"]


def _atat_metrics(successes):
    return {"d/resnet18/atat/seed0": {"history": [{"epoch": i, "attack_success": s}
                                                  for i, s in enumerate(successes)],
                                      "eval_agreement": 1.0},
            "d/resnet18/nodef/seed0": {"n_test": 120, "eval_agreement": 1.0},
            "d/resnet18/unseen_pixels/seed0": {"n_test": 120, "eval_agreement": 1.0},
            "d/resnet18/permuted/seed0": {"n_test": 120, "eval_agreement": 1.0}}


def _get(df, model_defense, check):
    sel = df[(df["model"] == f"d/resnet18/{model_defense}/seed0") & (df["check"] == check)]
    assert len(sel) == 1, (model_defense, check, df)
    return sel.iloc[0]


# --------------------------------------------------------------------------- AT-AT
@pytest.mark.parametrize("last3,passed", [([0.5, 0.5, 0.5], True), ([0.5, 0.5, 0.49], False),
                                          ([0.9, 0.9, 0.9], True)])
def test_atat_attack_success_at_its_threshold(last3, passed):
    assert TH["atat_attack_success"] == 0.5 and TH["atat_attack_success_epochs"] == 3
    df = pc.check_preconditions(_summary(nodef={}, atat={}),
                                _atat_metrics([0.0, 0.0] + last3), CONFIG)
    row = _get(df, "atat", "attack_success")
    assert row["value"] == pytest.approx(sum(last3) / 3)  # the first two epochs do not count
    assert bool(row["passed"]) is passed


@pytest.mark.parametrize("atat_robust,passed", [(0.4, True), (0.41, False), (0.1, True)])
def test_atat_robust_gap_at_its_threshold(atat_robust, passed):
    df = pc.check_preconditions(
        _summary(nodef={"robust_acc_eps0.0025": 0.5},
                 atat={"robust_acc_eps0.0025": atat_robust,
                       "aa_n_examples_eps1e-05": float("nan")}),
        _atat_metrics([0.9] * 3), CONFIG)
    row = _get(df, "atat", "robust_acc_gap_eps0.0025")
    assert row["value"] == pytest.approx(0.5 - atat_robust)
    assert bool(row["passed"]) is passed
    other = _get(df, "atat", "robust_acc_gap_eps0.0005")  # reported only: no verdict
    assert pd.isna(other["passed"]) and "reported only, 64 AutoAttack examples" in other["note"]
    assert "None" not in _get(df, "atat", "robust_acc_gap_eps1e-05")["note"]  # count unknown
    assert not (df["check"] == "robust_acc_gap_eps0.031").any()  # the large eps is not small


def test_atat_without_nodef_of_its_seed_uses_the_cells_nodef_mean_and_says_so():
    s = _summary(nodef={"robust_acc_eps0.0025": 0.6}, atat={"robust_acc_eps0.0025": 0.3})
    s.loc[s["defense"] == "atat", "seed"] = 101  # e.g. a causal replicate
    df = pc.check_preconditions(s, {"d/resnet18/atat/seed101": {"history": [
        {"attack_success": 0.9}] * 3}}, CONFIG)
    row = df[df["check"] == "robust_acc_gap_eps0.0025"].iloc[0]
    assert row["value"] == pytest.approx(0.3) and bool(row["passed"])
    assert "no NoDef of seed 101" in row["note"]


@pytest.mark.parametrize("case", ["no_history", "nan_robust", "no_nodef"])
def test_atat_missing_values_fail(case):
    s = _summary(nodef={}, atat={})
    metrics = _atat_metrics([0.9] * 3)
    if case == "no_history":
        metrics["d/resnet18/atat/seed0"] = {"history": [{"epoch": 0, "train_loss": 1.0}]}
        check = "attack_success"
    elif case == "nan_robust":
        s.loc[s["defense"] == "atat", "robust_acc_eps0.0025"] = float("nan")
        check = "robust_acc_gap_eps0.0025"
    else:
        s = s[s["defense"] == "atat"]
        check = "robust_acc_gap_eps0.0025"
    row = _get(pc.check_preconditions(s, metrics, CONFIG), "atat", check)
    assert math.isnan(row["value"]) and not bool(row["passed"])
    assert "missing" in row["note"]


# --------------------------------------------------------------------------- permuted labels
@pytest.mark.parametrize("train_acc,passed", [(0.995, True), (0.99, False), (0.39, False),
                                              (float("nan"), False)])
def test_permuted_train_acc_at_its_threshold(train_acc, passed):
    df = pc.check_preconditions(_summary(permuted={"train_acc": train_acc}), {}, CONFIG)
    row = _get(df, "permuted", "train_acc")
    assert bool(row["passed"]) is passed
    if math.isnan(train_acc):
        assert "missing" in row["note"]
    # the true-label NoDef is not checked for memorisation
    assert not df["model"].str.contains("/nodef/").any()


# --------------------------------------------------------------------------- Unseen-Pixels
@pytest.mark.parametrize("kept,passed", [(0.0166, True), (0.03, False), (0.075, False),
                                         (float("nan"), False)])
def test_unseen_pixels_kept_fraction_at_its_threshold(kept, passed):
    df = pc.check_preconditions(_summary(nodef={}, unseen_pixels={"kept_pixel_fraction": kept}),
                                _atat_metrics([]), CONFIG)
    assert bool(_get(df, "unseen_pixels", "kept_pixel_fraction")["passed"]) is passed


@pytest.mark.parametrize("test_acc,passed", [(0.75, True), (0.74, False), (0.9, True)])
def test_unseen_pixels_test_acc_at_its_threshold_with_wilson_intervals(test_acc, passed):
    df = pc.check_preconditions(
        _summary(nodef={"test_acc": 0.8},
                 unseen_pixels={"test_acc": test_acc, "kept_pixel_fraction": 0.01}),
        _atat_metrics([]), CONFIG)
    row = _get(df, "unseen_pixels", "test_acc_vs_nodef")
    assert row["value"] == pytest.approx(test_acc - 0.8)
    assert bool(row["passed"]) is passed
    assert "NoDef 0.800 [" in row["note"] and "(n=120)" in row["note"]


def test_unseen_pixels_without_nodef_fails():
    df = pc.check_preconditions(_summary(unseen_pixels={"kept_pixel_fraction": 0.01}), {},
                                CONFIG)
    row = _get(df, "unseen_pixels", "test_acc_vs_nodef")
    assert not bool(row["passed"]) and "no NoDef model" in row["note"]


def _es_metrics(val_acc, stopped, target=0.5):
    return {"d/resnet18/nodef_es/seed0": {
        "val_acc": val_acc, "stopped_early": stopped, "epochs": 10, "best_epoch": 4,
        "stop_reference": {"defense": "unseen_pixels", "val_acc": target,
                           "model_id": "d/resnet18/unseen_pixels/seed0"}}}


@pytest.mark.parametrize("val_acc,stopped,passed,how", [
    (0.52, True, True, "stopped at epoch 4 of 10"),
    (0.55, True, True, "stopped at epoch 4"),        # overshoot at the first reaching epoch
    (0.56, True, False, "stopped at epoch 4"),
    (0.45, False, True, "target never reached"),     # the full NoDef is about as accurate
    (0.44, False, False, "target never reached"),
    (None, False, False, "target never reached")])
def test_early_stopped_nodef_is_checked_against_its_target(val_acc, stopped, passed, how):
    df = pc.check_preconditions(
        _summary(nodef={}, nodef_es={"test_acc": 0.7},
                 unseen_pixels={"kept_pixel_fraction": 0.01, "test_acc": 0.6}),
        _es_metrics(val_acc, stopped), CONFIG)
    row = _get(df, "nodef_es", "early_stop_val_acc_gap")
    assert row["experiment"] == "Unseen-Pixels"  # a precondition of Table 3's claim
    assert bool(row["passed"]) is passed
    if val_acc is not None:
        assert row["value"] == pytest.approx(val_acc - 0.5)
    assert how in row["note"] and "test acc. 0.700 vs 0.600" in row["note"]


def test_early_stopped_nodef_without_metrics_fails_with_advice(caplog):
    df = pc.check_preconditions(_summary(nodef={}, nodef_es={}), {}, CONFIG)
    row = _get(df, "nodef_es", "early_stop_val_acc_gap")
    assert not bool(row["passed"]) and "no metrics.json" in row["note"]
    with caplog.at_level(logging.WARNING, logger="atat.analysis.preconditions"):
        assert pc.warn_failed(df[df["check"] == "early_stop_val_acc_gap"]) == 1
    assert "defenses.nodef_es.training.eval_every" in caplog.records[-1].getMessage()


# --------------------------------------------------------------------------- recipe fit
@pytest.mark.parametrize("train_acc,passed", [(0.90, True), (0.899, False), (1.0, True),
                                              (float("nan"), False)])
def test_nodef_train_acc_at_its_optional_threshold(train_acc, passed):
    cfg = copy.deepcopy(CONFIG)
    cfg["preconditions"]["nodef_train_acc"] = 0.9
    summary = _summary(nodef={"train_acc": train_acc}, atat={"train_acc": 0.5})
    replicate = {**summary.iloc[0].to_dict(), "seed": 103, "replicate": 3, "train_acc": 0.1}
    summary = pd.concat([summary, pd.DataFrame([replicate])], ignore_index=True)
    df = pc.check_preconditions(summary, _atat_metrics([0.9] * 3), cfg)
    rows = df[df["check"] == "nodef_train_acc"]
    assert list(rows["model"]) == ["d/resnet18/nodef/seed0"]  # not AT-AT, not the replicate
    assert rows.iloc[0]["experiment"] == "recipe" and bool(rows.iloc[0]["passed"]) is passed


def test_nodef_train_acc_is_not_checked_without_its_threshold():
    assert "nodef_train_acc" not in CONFIG["preconditions"]      # the paper config
    df = pc.check_preconditions(_summary(nodef={"train_acc": 0.2}), {}, CONFIG)
    assert "nodef_train_acc" not in set(df["check"])
    demo = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    assert pc.thresholds(demo)["nodef_train_acc"] == 0.9


# --------------------------------------------------------------------------- inversion prior
def _prior_record(recognition=0.6, precision=0.6, coverage=0.6):
    def stat(normalised):
        return {"prior": 0.5, "ceiling": 0.9, "floor": 0.1, "normalised": normalised}
    return {"recognition": stat(recognition), "precision": stat(precision),
            "coverage": stat(coverage), "recall": stat(0.1), "identities_recognised": {"prior": 30, "ceiling": 40,
                                                              "floor": 2},
            "n_samples": 1000, "n_recall": 80, "n_heldout": 80, "n_reference": 720,
            "n_identities": 40, "k": 3, "confidence": 0.5}


@pytest.mark.parametrize("value,passed", [(0.5, True), (0.49, False), (1.3, True),
                                          (None, False)])
def test_prior_statistics_at_their_threshold(value, passed):
    assert TH["prior_recognition"] == TH["prior_precision"] == TH["prior_coverage"] == 0.5
    for stat in ("recognition", "precision", "coverage"):
        record = _prior_record(**{stat: value})  # None: NaN in the JSON (a missing value)
        df = pc.check_preconditions(_summary(nodef={}), {}, CONFIG, {"p": record})
        row = df[(df["model"] == "generators/p") & (df["check"] == f"prior_{stat}")].iloc[0]
        assert bool(row["passed"]) is passed and row["experiment"] == pc.PRIOR
        assert "ceiling 0.900" in row["note"] and "floor 0.100" in row["note"]
        others = df[(df["model"] == "generators/p") & (df["check"] != f"prior_{stat}")]
        assert others["passed"].all()
        if value is None:
            assert math.isnan(row["value"]) and "missing" in row["note"]
    blind = _prior_record()
    blind["recognition"].update(ceiling=0.3, floor=0.3, normalised=None)
    row = pc.check_preconditions(_summary(nodef={}), {}, CONFIG, {"p": blind}).iloc[-3]
    assert row["check"] == "prior_recognition" and not bool(row["passed"])
    assert "ceiling <= floor" in row["note"]
    old = _prior_record()
    del old["coverage"]  # a record written before coverage was measured
    row = pc.check_preconditions(_summary(nodef={}), {}, CONFIG, {"p": old}).iloc[-1]
    assert row["check"] == "prior_coverage" and not bool(row["passed"])
    assert "rerun rule prior_quality" in row["note"]


def test_the_paper_priors_are_reported_as_not_measured_and_the_demo_prior_is_measured():
    from atat.plan.config import model_runs

    paper = pc.inversion_priors(CONFIG, model_runs(CONFIG))
    assert set(paper) == {"ffhq", "afhqdog"} and all(paper.values())
    assert "downloaded prior (generators.ffhq.url)" in paper["ffhq"]
    df = pc.check_preconditions(_summary(nodef={}), {}, CONFIG, {"ffhq": None})
    row = df[df["model"] == "generators/ffhq"].iloc[0]
    assert row["check"] == "prior_quality" and pd.isna(row["passed"])  # reported, no verdict
    assert row["note"] == paper["ffhq"]
    demo = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml")
    assert pc.inversion_priors(demo, model_runs(demo)) == {"synthfaces_public": None}
    # with the dog breeds (Table 26, config/overlays/demo-dogs.yaml) both trained priors are
    # measured: the faces' and the dogs', each by the classifier of its own public pool (the
    # dogs have no face embedding, but a public pool)
    dogs = load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "demo.yaml",
                       ROOT / "config" / "overlays" / "demo-dogs.yaml")
    assert pc.inversion_priors(dogs, model_runs(dogs)) == {"synthdogs_public": None,
                                                           "synthfaces_public": None}
    assert not dogs["datasets"]["synthdogs"]["faces"]
    facenet = copy.deepcopy(demo)
    facenet["face_embedding"]["source"] = "facenet"
    assert "face_embedding.source is facenet" in pc.prior_unmeasured_reason(
        facenet, "synthfaces_public")


# --------------------------------------------------------------------------- config, outputs
def test_thresholds_come_from_the_config():
    stricter = copy.deepcopy(CONFIG)
    stricter["preconditions"]["permuted_train_acc"] = 0.999
    s = _summary(permuted={"train_acc": 0.995})
    assert bool(_get(pc.check_preconditions(s, {}, CONFIG), "permuted", "train_acc")["passed"])
    assert not bool(_get(pc.check_preconditions(s, {}, stricter), "permuted",
                         "train_acc")["passed"])
    del stricter["preconditions"]["permuted_train_acc"]
    with pytest.raises(ConfigError, match="permuted_train_acc"):
        pc.check_preconditions(s, {}, stricter)


def test_table_is_written_and_each_failure_is_a_warning(tmp_path, caplog):
    s = _summary(nodef={}, atat={"robust_acc_eps0.0025": 0.2}, permuted={"train_acc": 0.39},
                 unseen_pixels={"kept_pixel_fraction": 0.01})
    s.to_csv(tmp_path / "summary.csv", index=False)
    files = {}
    for name, m in _atat_metrics([0.9] * 3).items():
        files[name] = tmp_path / f"{name.replace('/', '_')}.json"
        files[name].write_text(pd.Series(m).to_json())
    outs = [tmp_path / "preconditions.csv", tmp_path / "preconditions.md"]
    with caplog.at_level(logging.WARNING, logger="atat.analysis.preconditions"):
        df = pc.preconditions_table(tmp_path / "summary.csv", files, outs, CONFIG)
    failed = df[df["passed"] == False]  # noqa: E712
    assert list(failed["model"]) == ["d/resnet18/permuted/seed0"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "d/resnet18/permuted/seed0" in warnings[0]
    assert "defenses.permuted.training.epochs" in warnings[0]
    back = pd.read_csv(outs[0])
    assert list(back.columns) == pc.COLUMNS and len(back) == len(df)
    assert "checks passed" in outs[1].read_text()


# --------------------------------------------------------------------------- a real model
def test_a_permuted_model_trained_one_epoch_is_flagged(tmp_path, make_synthfaces):
    from atat.analysis.summary import summary_row
    from atat.training.train import TrainSpec, train

    make_synthfaces(tmp_path / "ds", n_public_identities=2, images_per_identity=12,
                    public_images_per_identity=2, resolution=32)
    training = {**CONFIG["training"], **CONFIG["defenses"]["permuted"]["training"],
                "epochs": 1, "lr_milestones": [], "batch_size": 16, "eval_batch_size": 64,
                "pretrained": False, "num_workers": 0}
    spec = TrainSpec(model_id="d/resnet18/permuted/seed0", dataset_root=str(tmp_path / "ds"
                                                                             / "private"),
                     resolution=32, n_classes=4, architecture="resnet18",
                     defense={"type": "nodef"}, training=training,
                     augmentation=CONFIG["augmentation"], seed=0)
    metrics = train(spec, out_model=tmp_path / "m.pt", out_metrics=tmp_path / "metrics.json",
                    resume_path=tmp_path / "resume.pt", progress=False)
    assert metrics["labels_permuted"]
    row = summary_row({**CELL, "defense": "permuted", "defense_type": "nodef",
                       "metrics": tmp_path / "metrics.json"})
    df = pc.check_preconditions(pd.DataFrame([row]), {}, CONFIG)
    flagged = _get(df, "permuted", "train_acc")
    assert flagged["value"] == pytest.approx(metrics["train_acc"]) and flagged["value"] < 0.99
    assert not bool(flagged["passed"])


# --------------------------------------------------------------------------- the workflow
@pytest.mark.parametrize("overlay", [(), ("demo.yaml",),
                                     ("demo.yaml", "overlays/demo-dogs.yaml")])
def test_preconditions_table_is_a_target_of_all(tmp_path, overlay):
    configs = [str(ROOT / "config" / f) for f in ("config.yaml", *overlay)]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(tmp_path), "--configfile", *configs, "-n", "all", "--cores", "1"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "results/tables/preconditions.csv" in proc.stdout
    counts = dict(line.split()[:2] for line in proc.stdout.splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    assert counts.get("preconditions") == "1"
    # the prior's quality: measured for the demo's trained priors (faces; the dog breeds' with
    # their overlay), not for the paper's downloads
    priors = len(overlay)
    assert counts.get("prior_quality") == (str(priors) if overlay else None)
    # ... each judged by 5 public classifiers: the face embedding's and 4 more seeds
    assert counts.get("train_instrument_classifier") == (str(4 * priors) if overlay else None)


def test_the_config_must_have_the_preconditions_section_and_in_bounds():
    from atat.plan.config import validate_config

    bad = copy.deepcopy(CONFIG)
    del bad["preconditions"]
    with pytest.raises(ConfigError, match="preconditions"):
        validate_config(bad)
    bad = copy.deepcopy(CONFIG)
    bad["preconditions"]["permuted_train_acc"] = 1.5
    with pytest.raises(ConfigError, match="permuted_train_acc"):
        validate_config(bad)
    for classifiers in (0, 26):   # the prior-quality instrument: 1 to 25 classifiers
        bad = copy.deepcopy(CONFIG)
        bad["preconditions"]["prior_quality"]["classifiers"] = classifiers
        with pytest.raises(ConfigError, match="classifiers"):
            validate_config(bad)


def test_dose_response_variants_are_not_checked_as_the_papers_at_at():
    """The sweep's generated AT-AT variants explore other lambdas on purpose (a weak lambda
    need not reach the paper's PGD-success regime); the preconditions check the configured
    AT-AT variants, and the causal replicates through them."""
    from atat.plan.config import load_config, with_dose_response
    from atat.analysis.paper import precondition_roles

    root = Path(__file__).resolve().parents[1] / "config"
    config = with_dose_response(load_config(root / "config.yaml", root / "demo.yaml",
                                            root.parent / "tests" / "data" /
                                            "demo_dose_response.yaml"))
    assert {"atat_w0p125", "atat_w0p25", "atat_w1"} <= set(config["defenses"])
    assert precondition_roles(config)["AT-AT"] == ["atat"]


# --------------------------------------------------------------------------- the measurement
def _regime(df, check, model="d/resnet18/nodef/seed0"):
    sel = df[(df["model"] == model) & (df["check"] == check)]
    assert len(sel) == 1, (model, check, df)
    return sel.iloc[0]


@pytest.mark.parametrize("clean,robust,n,passed", [
    (0.5, 0.3, 256, True),          # d 0.2, SE 0.025
    (0.5, 0.5 - 4 / 64, 64, True),  # 4 of 64 examples broken: d 0.0625 >= 2 SE (0.0605)
    (0.5, 0.5 - 3 / 64, 64, False),  # 3 of 64: d 0.047 < 2 SE (0.053)
    (0.5, 0.5, 64, False),          # no drop (SE 0: the strict d > 0 decides)
    (0.5, 0.0, 64, False),          # nothing left robust
    (0.4, 0.5, 64, False),          # robust above clean: not a record of AutoAttack
    (float("nan"), 0.3, 64, False)])
def test_autoattack_regime_at_its_threshold(clean, robust, n, passed):
    assert TH["autoattack_regime_se"] == 2 and TH["autoattack_regime_max_eps"] == 0.0025
    s = _summary(nodef={"aa_clean_acc_eps0.0005": clean, "robust_acc_eps0.0005": robust,
                        "aa_n_examples_eps0.0005": n}, atat={})
    df = pc.check_preconditions(s, _atat_metrics([0.9] * 3), CONFIG)
    row = _regime(df, "robust_below_clean_eps0.0005")
    assert row["experiment"] == "AutoAttack regime" and bool(row["passed"]) is passed
    if not math.isnan(clean):
        d = clean - robust
        se = math.sqrt(max(d * (1 - d), 0) / n)
        assert row["value"] == pytest.approx(d) and f"SE = sqrt(d(1-d)/n) = {se:.3f}" in row["note"]
        assert f"({2 * se:.3f})" in row["threshold"]
    else:
        assert "missing" in row["note"]
    # every AutoAttack epsilon has a row, tagged as eps_tag writes it; 0.031 is reported only
    checks = set(df.loc[df["model"] == "d/resnet18/nodef/seed0", "check"])
    assert {f"robust_below_clean_eps{t}" for t in EPS_TAGS} <= checks
    large = _regime(df, "robust_below_clean_eps0.031")
    assert pd.isna(large["passed"]) and "reported only" in large["note"]
    # NoDef only: AT-AT is not a regime gate
    assert not df.loc[df["model"] == "d/resnet18/atat/seed0", "check"].str.startswith(
        "robust_below_clean").any()


def test_autoattack_regime_is_each_cells_grid_nodef_only():
    s = _summary(nodef={}, atat={})
    replicate = {**s.iloc[0].to_dict(), "seed": 103, "replicate": 3}
    other = {**s.iloc[0].to_dict(), "architecture": "resnet10"}
    s = pd.concat([s, pd.DataFrame([replicate, other])], ignore_index=True)
    df = pc.check_preconditions(s, {}, CONFIG)
    models = set(df.loc[df["experiment"] == "AutoAttack regime", "model"])
    assert models == {"d/resnet18/nodef/seed0", "d/resnet10/nodef/seed0"}


@pytest.mark.parametrize("record,passed", [
    ({"heldout_acc": 0.9, "n_heldout": 100, "test_acc": 0.9}, True),
    ({"heldout_acc": 0.899, "n_heldout": 100}, False),
    ({"test_acc": 0.95, "n_test": 100}, True),     # a record written before heldout_acc
    ({"heldout_acc": None, "n_heldout": 100}, False),
    (None, False)])
def test_evaluation_model_held_out_accuracy_at_its_threshold(record, passed):
    assert TH["evaluation_heldout_acc"] == 0.9
    df = pc.check_preconditions(_summary(nodef={}), {}, CONFIG, None, {"d": record})
    row = _regime(df, "held_out_acc", model="d")
    assert row["experiment"] == "evaluation model" and bool(row["passed"]) is passed
    if record and record.get("heldout_acc") is not None:
        assert "(n=100)" in row["note"] and "evaluation-model-accuracy" in row["note"]


@pytest.mark.parametrize("agreement,passed", [(1.0, True), (0.999, False), (None, False)])
def test_determinism_of_every_model_at_its_threshold(agreement, passed):
    assert TH["eval_agreement"] == 1.0
    metrics = _atat_metrics([0.9] * 3)
    for m in metrics.values():
        m["eval_agreement"] = agreement
    df = pc.check_preconditions(_summary(nodef={}, atat={}, mid={}), metrics, CONFIG)
    rows = df[df["check"] == "repeated_clean_predictions_agree"]
    assert list(rows["model"]) == [f"d/resnet18/{d}/seed0" for d in ("nodef", "atat", "mid")]
    assert (rows["experiment"] == "determinism").all()
    ours = rows[rows["model"] != "d/resnet18/mid/seed0"]
    assert all(bool(p) is passed for p in ours["passed"])
    mid = rows[rows["model"] == "d/resnet18/mid/seed0"].iloc[0]
    assert not bool(mid["passed"]) and "MID samples its bottleneck" in mid["note"]
    if agreement is None:
        assert "retrain" in ours.iloc[0]["note"]


@pytest.mark.parametrize("attacc,passed", [(0.6, True), (0.59, False), (0.84, True),
                                           (float("nan"), False)])
def test_attack_regime_on_the_claims_cells_nodef(attacc, passed):
    assert TH["nodef_ppa_attacc1"] == 0.6
    cell = {"dataset": "facescrub", "architecture": "resnet152"}   # the paper's claims cell
    s = _summary(nodef={**cell, "ppa_attacc1": attacc, "ppa_n_images": 100},
                 atat={**cell, "ppa_attacc1": 0.1})
    other = {**s.iloc[0].to_dict(), "architecture": "resnet18"}   # another cell's NoDef
    s = pd.concat([s, pd.DataFrame([other])], ignore_index=True)
    df = pc.check_preconditions(s, {}, CONFIG)
    rows = df[df["check"] == "ppa_attacc1"]
    assert list(rows["model"]) == ["facescrub/resnet152/nodef/seed0"]
    row = rows.iloc[0]
    assert row["experiment"] == "attack regime" and bool(row["passed"]) is passed
    assert "on 100 attacked images" in row["note"]
    # no PPA in the run: no row
    assert "ppa_attacc1" not in set(pc.check_preconditions(
        s.drop(columns=["ppa_attacc1"]), {}, CONFIG)["check"])


def test_each_failed_regime_check_is_a_warning_with_advice(caplog):
    cell = {"dataset": "facescrub", "architecture": "resnet152"}
    s = _summary(nodef={**cell, "ppa_attacc1": 0.3, "robust_acc_eps0.0025": 0.0})
    df = pc.check_preconditions(s, {}, CONFIG, None, {"facescrub": {"heldout_acc": 0.5}})
    failed = df[df["passed"] == False]  # noqa: E712
    assert {"robust_below_clean_eps0.0025", "held_out_acc", "ppa_attacc1",
            "repeated_clean_predictions_agree"} <= set(failed["check"])
    with caplog.at_level(logging.WARNING, logger="atat.analysis.preconditions"):
        assert pc.warn_failed(df) == len(failed)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "autoattack.n_examples" in text and "evaluation_model.training" in text
    assert "inversion.ppa" in text


def test_regime_thresholds_are_validated_naming_the_key():
    from atat.plan.config import validate_config

    for key, value in [("autoattack_regime_max_eps", 0), ("autoattack_regime_se", -1),
                       ("evaluation_heldout_acc", 1.5), ("eval_agreement", "all"),
                       ("nodef_ppa_attacc1", 2)]:
        bad = copy.deepcopy(CONFIG)
        bad["preconditions"][key] = value
        with pytest.raises(ConfigError, match=key):
            validate_config(bad)
        with pytest.raises(ConfigError, match=key):   # the checks' own reading, too
            pc.thresholds({"preconditions": {**bad["preconditions"], key: "x"}})
        missing = copy.deepcopy(CONFIG)
        del missing["preconditions"][key]
        with pytest.raises(ConfigError, match=key):
            validate_config(missing)


def test_the_table_caption_describes_the_regime_gates_without_issue_numbers():
    caption = pc.output("preconditions").caption
    assert "issue" not in caption.lower()
    for words in ("AutoAttack", "held-out", "two clean passes", "claims cell"):
        assert words in caption
