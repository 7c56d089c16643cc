"""The evaluation model's pre-registered rule (atat.lab.evaluator,
docs/decisions.md#the-evaluation-models-architecture): its candidates and its choice."""

import pandas as pd

from atat.lab.evaluator import candidates, choose


def test_the_eight_candidates_in_their_fixed_order():
    cands = candidates()
    assert len(cands) == 8
    assert cands[0] == {"architecture": "densenet47", "epochs": 15, "lr": 1e-3,
                        "lr_milestones": [11, 14]}
    assert [c["architecture"] for c in cands] == ["densenet47"] * 4 + ["resnet10"] * 4
    assert cands[-1]["epochs"] == 40 and cands[-1]["lr_milestones"] == [30, 36]


def rows(vals):
    return pd.DataFrame([{**c, "val_acc": v} for c, v in zip(candidates(), vals)])


def test_the_highest_validation_accuracy_wins():
    vals = [0.70, 0.71, 0.72, 0.90, 0.60, 0.61, 0.62, 0.63]
    assert choose(rows(vals), n_val=108) == 3


def test_a_tie_within_one_validation_image_goes_to_fewer_epochs_then_the_first_family():
    one = 1 / 108
    # index 7 (resnet10, 40 ep) is best; index 4 (resnet10, 15 ep, lr 1e-3) within one image
    vals = [0.50, 0.50, 0.50, 0.50, 0.80 - one, 0.50, 0.50, 0.80]
    assert choose(rows(vals), n_val=108) == 4
    # equal at 15 epochs in both families -> DenseNet-47 (the earlier architecture)
    vals = [0.50, 0.80, 0.50, 0.50, 0.80, 0.50, 0.50, 0.50]
    assert choose(rows(vals), n_val=108) == 1
    # same family and epochs -> the larger learning rate
    vals = [0.80, 0.80, 0.50, 0.50, 0.50, 0.50, 0.50, 0.50]
    assert choose(rows(vals), n_val=108) == 0
    # two images apart is no tie
    vals = [0.80 - 2 * one - 1e-9, 0.50, 0.50, 0.80, 0.50, 0.50, 0.50, 0.50]
    assert choose(rows(vals), n_val=108) == 3
