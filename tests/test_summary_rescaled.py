"""The summary's rescaled AttAcc@1: (x - floor) / (ceiling - floor) with the evaluation model's
held-out accuracy as the ceiling and the permuted-label model of the same cell (else chance) as
the floor, as extra columns of the whole grid's summary; AttAcc@1 itself unchanged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from atat.analysis.summary import build_summary


def _model(work: Path, dataset, defense, attacc1, *, seed=0, permuted=False,
           architecture="resnet18"):
    base = work / dataset / architecture / defense / f"seed{seed}"
    base.mkdir(parents=True, exist_ok=True)
    (base / "metrics.json").write_text(json.dumps(dict(
        test_acc=0.5, test_top5=0.9, val_acc=0.5, best_epoch=1, train_seconds=1.0,
        pretrained=False, train_acc=1.0, n_test=100, labels_permuted=permuted)))
    (base / "ppa.json").write_text(json.dumps({"summary": {
        "attacc1": attacc1, "attacc5": 0.9, "evalconf": 0.5, "dist_face": 1.0, "dist_eval": 1.0,
        "n_images": 100}}))
    return dict(dataset=dataset, architecture=architecture, defense=defense,
                defense_type="nodef", seed=seed, metrics=base / "metrics.json",
                inversion={"ppa": base / "ppa.json"})


@pytest.fixture()
def grid(tmp_path):
    models = [_model(tmp_path, "d", "nodef", 0.5), _model(tmp_path, "d", "permuted", 0.1,
                                                          permuted=True),
              _model(tmp_path, "d", "atat", 0.3),
              _model(tmp_path, "d", "nodef", 0.6, seed=1),          # no permuted of seed 1
              _model(tmp_path, "d", "permuted", 0.2, seed=2, permuted=True),
              _model(tmp_path, "e", "nodef", 0.4),                  # no permuted: chance
              _model(tmp_path, "f", "nodef", 0.01)]                 # ceiling below the floor
    evaluation = {}
    for d, record in {"d": {"heldout_acc": 0.9, "test_acc": 0.9, "n_classes": 20},
                      "e": {"test_acc": 0.8, "n_classes": 20},      # before heldout_acc
                      "f": {"heldout_acc": 0.04, "n_classes": 20}}.items():
        evaluation[d] = tmp_path / f"eval_{d}.json"
        evaluation[d].write_text(json.dumps(record))
    return tmp_path, models, evaluation


def _by(df, dataset, defense, seed=0):
    return df[(df["dataset"] == dataset) & (df["defense"] == defense)
              & (df["seed"] == seed)].iloc[0]


def test_rescaled_attacc_between_the_permuted_floor_and_the_evaluators_ceiling(grid):
    work, models, evaluation = grid
    df = build_summary(models, work / "summary.csv", attacks=["ppa"], evaluation=evaluation)
    nodef = _by(df, "d", "nodef")
    assert nodef["eval_heldout_acc"] == 0.9 and nodef["ppa_attacc1_floor"] == pytest.approx(0.1)
    assert nodef["ppa_attacc1_floor_source"] == "permuted"
    assert nodef["ppa_attacc1_rescaled"] == pytest.approx((0.5 - 0.1) / (0.9 - 0.1))
    assert nodef["ppa_attacc1"] == 0.5                   # AttAcc@1 itself is unchanged
    assert _by(df, "d", "permuted")["ppa_attacc1_rescaled"] == pytest.approx(0.0)
    assert _by(df, "d", "atat")["ppa_attacc1_rescaled"] == pytest.approx(0.25)
    # no permuted model of its seed: the mean of the cell's
    seed1 = _by(df, "d", "nodef", seed=1)
    assert seed1["ppa_attacc1_floor"] == pytest.approx(0.15)
    # no permuted model in the cell: chance, 1/n_classes; an older evaluation record's test_acc
    e = _by(df, "e", "nodef")
    assert e["ppa_attacc1_floor_source"] == "chance" and e["ppa_attacc1_floor"] == 0.05
    assert e["ppa_attacc1_rescaled"] == pytest.approx((0.4 - 0.05) / (0.8 - 0.05))
    # a ceiling not above the floor: no rescaled value
    assert math.isnan(_by(df, "f", "nodef")["ppa_attacc1_rescaled"])
    back = pd.read_csv(work / "summary.csv")
    assert "ppa_attacc1_rescaled" in back.columns and "eval_heldout_acc" in back.columns


def test_a_summary_without_evaluation_records_has_no_rescaled_columns(grid):
    """One output's summary (rule output_summary) is not rescaled: its rows may lack the
    cell's permuted model, and no builder reads the column."""
    work, models, _ = grid
    df = build_summary(models, work / "plain.csv", attacks=["ppa"])
    assert not [c for c in df.columns if "rescaled" in c or c == "eval_heldout_acc"]
    assert _by(df, "d", "nodef")["ppa_attacc1"] == 0.5
