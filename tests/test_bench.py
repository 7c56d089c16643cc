"""The benchmark (`make bench`): its bare loops do the project's math, and it writes its table."""

import csv
import copy

import pytest
import torch

from atat import bench
from atat.defenses import ModelContext, StepContext, build_defense
from atat.models import build_model


@pytest.fixture(scope="module")
def cfg():
    return bench.demo_config()


@pytest.mark.parametrize("name", ["nodef", "atat", "at"])
def test_bare_step_is_the_project_step(cfg, name):
    """The reference loop must do the same work as the defense's train_step, else the ratio
    compares different things: same RNG draws, same loss, same updated weights."""
    n_classes, res = 5, 16
    variant = bench.defense_variant(cfg, name)
    defense = build_defense(variant, n_classes, context=ModelContext("resnet18", res))
    torch.manual_seed(0)
    net_p = defense.build_model(build_model("resnet18", n_classes)).train()
    net_r = copy.deepcopy(net_p)
    opt_p = bench._adam(cfg, defense.trainable_parameters(net_p))
    opt_r = bench._adam(cfg, net_r.parameters())
    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, 3, res, res, generator=g) * 2 - 1
    y = torch.randint(0, n_classes, (4,), generator=g)
    ctx = StepContext(epoch=0, step=0, n_classes=n_classes,
                      generator=torch.Generator().manual_seed(1))
    loss_p, _ = defense.train_step(net_p, opt_p, x, y, ctx)
    loss_r = bench.bare_step(variant["type"], defense.params, n_classes)(
        net_r, opt_r, x, y, torch.Generator().manual_seed(1))
    assert loss_r == pytest.approx(loss_p, rel=1e-5)
    for a, b in zip(net_p.parameters(), net_r.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_interleaved_alternates_order():
    calls = []
    tp, tr = bench.interleaved(lambda: calls.append("p"), lambda: calls.append("r"), 4)
    assert calls == ["p", "r", "r", "p", "p", "r", "r", "p"]
    assert len(tp) == len(tr) == 4


def test_goal_check():
    row = bench.Row("c", "v", 1.0, 0.9, 0.9, 0.0, ">= 0.90", "", "", 1)
    assert row.meets_goal is True
    assert dataclass_replace(row, ratio=0.89).meets_goal is False
    assert dataclass_replace(row, goal="<= 4.6", ratio=4.7).meets_goal is False
    assert dataclass_replace(row, goal="").meets_goal is None


def dataclass_replace(row, **kw):
    import dataclasses

    return dataclasses.replace(row, **kw)


def test_quick_run_writes_table(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "train_step", "--repeats", "2",
                       "--out", str(out), "--cache", str(tmp_path / "cache")]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["component"], r["variant"]) for r in rows] == [
        ("train_step", "nodef"), ("train_step", "atat"), ("train_step", "at"),
        ("step_cost", "atat_vs_nodef")]
    for r in rows:
        assert float(r["ratio"]) > 0 and r["goal"] and r["meets_goal"] in ("True", "False")
    assert "ratio" in capsys.readouterr().out


def test_unknown_component_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--only", "training", "--out", str(tmp_path / "x.csv")])
