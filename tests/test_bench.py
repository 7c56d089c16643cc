"""The benchmark (`make bench`): its bare loops do the project's math, and it writes its table."""

import csv
import copy

import pytest
import torch

from atat.lab import bench
from atat.plan.config import defense_params
from atat.training.defenses import ModelContext, StepContext, build_defense
from atat.training.models import build_model


@pytest.fixture(scope="module")
def cfg():
    return bench.demo_config()


@pytest.mark.parametrize("name", ["nodef", "atat", "at"])
def test_bare_step_is_the_project_step(cfg, name):
    """The reference loop must do the same work as the defense's train_step, else the ratio
    compares different things: same RNG draws, same loss, same updated weights."""
    n_classes, res = 5, 16
    variant = defense_params(cfg, name)
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


def test_quick_autoattack_lines_per_attack_and_for_the_job(tmp_path, monkeypatch):
    # the job line's reference is one direct library call per attack, each with its own attack
    # (a closure bound late would run the last attack four times)
    from pyautoattack import AutoAttack

    ran: list[list[str]] = []
    real = AutoAttack.run_standard_evaluation

    def spy(self, *a, **kw):
        ran.append(list(self.attacks_to_run))
        return real(self, *a, **kw)

    monkeypatch.setattr(AutoAttack, "run_standard_evaluation", spy)
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "autoattack", "--out", str(out),
                       "--cache", str(tmp_path / "cache")]) == 0
    rows = list(csv.DictReader(out.open()))
    attacks = bench.demo_config()["autoattack"]["attacks"]
    assert [r["variant"] for r in rows] == [*attacks, "all (one job)"]
    assert all(float(r["ratio"]) > 0 for r in rows)
    # per attack: project + direct (one attack each); the job: project's 4 + direct's 4
    assert ran[-2 * len(attacks):] == [[a] for a in attacks] * 2


def test_quick_autoattack_layout_line_runs_both_layouts_to_the_same_records(tmp_path):
    from test_robustness import untimed

    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "autoattack_layout", "--repeats", "1", "--out",
                       str(out), "--cache", str(tmp_path / "cache")]) == 0
    [row] = list(csv.DictReader(out.open()))
    assert (row["component"], row["variant"]) == ("autoattack_layout", "per_model vs per_epsilon")
    assert float(row["project_s"]) > 0 and float(row["reference_s"]) > 0
    assert "CPU s per model" in row["note"]
    # one process with every epsilon and one process per epsilon wrote the same records
    eps = bench.demo_config()["autoattack"]["epsilons"]
    [work] = (tmp_path / "cache").glob("aa-layout-*")
    jobs = sorted(work.iterdir(), key=lambda d: int(d.name))
    assert len(jobs) == 1 + len(eps)
    records: dict[str, list] = {}
    for d in jobs:
        for f in d.glob("*.json"):
            records.setdefault(f.name, []).append(untimed(f))
    assert len(records) == len(eps)
    assert all(len(v) == 2 and v[0] == v[1] for v in records.values())


def test_unknown_component_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--only", "training", "--out", str(tmp_path / "x.csv")])


class _SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        import time

        time.sleep(ctx.seconds)
        return grad * 2, None


class _Slow(torch.nn.Module):
    def __init__(self, fwd, bwd):
        super().__init__()
        self.fwd, self.bwd = fwd, bwd

    def forward(self, x):
        import time

        time.sleep(self.fwd)
        return _SlowBackward.apply(x, self.bwd)


def test_time_split_counts_forward_and_backward():
    """A network's backward counts as that network (not as whoever called backward), a
    phase takes everything inside it, and the parts add up to the clock's run time."""
    import time

    a, b = _Slow(0.02, 0.04), _Slow(0.05, 0.10)
    split = bench.TimeSplit()
    bench.time_module(a, split, "a")
    bench.time_module(b, split, "b")
    t0 = time.perf_counter()
    split.t = t0
    x = torch.ones(3, requires_grad=True)
    b(a(x)).sum().backward()
    split.push("final_selection")
    with torch.no_grad():
        b(a(x))
    split.pop()
    parts = split.stop()
    wall = time.perf_counter() - t0
    assert parts["a"] == pytest.approx(0.06, abs=0.03)
    assert parts["b"] == pytest.approx(0.15, abs=0.03)
    assert parts["final_selection"] == pytest.approx(0.07, abs=0.03)
    assert sum(parts.values()) == pytest.approx(wall, abs=1e-3)
    torch.testing.assert_close(x.grad, torch.full((3,), 4.0))  # the markers are identities


def test_timing_leaves_the_attack_unchanged(cfg, tmp_path):
    """The hooks, markers and patched names only observe: PPA with and without them gives the
    same latents, and the patched module attributes are restored afterwards."""
    from atat.plan.config import inversion_params
    from atat.inversion import core, ppa
    from atat.inversion.metrics import Evaluator

    nets = bench.inversion_networks(cfg)
    root = bench.bench_dataset(tmp_path, cfg)
    params = bench.quick_inversion_params(
        inversion_params(cfg, "synthfaces", "resnet18", "nodef", "ppa"))
    params["targets"] = [0]
    timed = bench.run_split_attack("ppa", params, nets, root)
    assert ppa.final_selection is core.final_selection and ppa.optimize_w is core.optimize_w
    assert not nets["target"]._forward_hooks and not nets["G"].mapping._forward_pre_hooks
    scorer = Evaluator(nets["evaluation"], nets["face"], real=root, classes=[0])
    plain = ppa.run_ppa(nets["G"], nets["target"], params, scorer, progress=False)
    torch.testing.assert_close(timed["result"]["final_w"], plain["final_w"])
    assert timed["result"]["frame"].equals(plain["frame"])


def test_quick_inversion_split(tmp_path):
    """Every attack has a total row and one row per part; the shares add up to at most 100%
    (and nearly all of it: the clock covers the job); the networks are seen."""
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "inversion", "--out", str(out),
                       "--cache", str(tmp_path / "cache")]) == 0
    rows = list(csv.DictReader(out.open()))
    cfg = bench.demo_config()
    for attack in cfg["inversion"]["attacks"]:
        total = [r for r in rows if r["variant"] == attack]
        assert len(total) == 1 and float(total[0]["project_s"]) > 0
        parts = {r["variant"].split("/", 1)[1]: float(r["ratio"]) for r in rows
                 if r["variant"].startswith(attack + "/")}
        assert {"generator", "target", "augmentation", "scorer", "final_selection",
                "other"} <= set(parts)
        assert all(v >= 0 for v in parts.values())
        assert 0.9 < sum(parts.values()) <= 1 + 1e-6
        assert parts["generator"] > 0 and parts["target"] > 0 and parts["scorer"] > 0
        assert (parts["final_selection"] > 0) == (attack != "ifgmi")  # IF-GMI has none


def test_quick_inversion_speedups(tmp_path):
    """Each exact inversion speed-up has its line, timed against the path without it, and
    the cached real-image features are the job's own."""
    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "inversion_speedups", "--out", str(out),
                       "--cache", str(tmp_path / "cache")]) == 0
    rows = {r["variant"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"ifgmi lockstep", "ppdg shared search", "ppdg lockstep", "ppdg both",
                         "real embeddings cached"}
    for r in rows.values():
        assert float(r["project_s"]) > 0 and float(r["reference_s"]) > 0
        assert float(r["ratio"]) > 0
    assert "features identical: True" in rows["real embeddings cached"]["note"]


def test_quick_prior_fir_line_times_both_paths_and_restores_the_switch(tmp_path):
    import atat.inversion.stylegan2 as sg

    out = tmp_path / "bench.csv"
    assert bench.main(["--quick", "--only", "prior_fir", "--out", str(out),
                       "--cache", str(tmp_path / "cache")]) == 0
    (row,) = list(csv.DictReader(out.open()))
    assert row["component"] == "prior_fir" and row["variant"] == "direct FIR path"
    assert float(row["project_s"]) > 0 and float(row["reference_s"]) > 0
    assert sg.DIRECT_FIR is True


@pytest.mark.slow
def test_the_dry_run_s_reference_plans_the_project_s_jobs_without_the_project(tmp_path):
    """The dry run's reference workflow (bench.reference_workflow) is the demo's DAG -- the same
    jobs, counted by a dry run of each -- and holds no project code: no atat import, no params,
    resources or logs."""
    from pathlib import Path

    root = Path(bench.ROOT)
    n = bench.reference_workflow(tmp_path / "ref", [root / "config" / "demo.yaml"])
    text = (tmp_path / "ref" / "Snakefile").read_text()
    assert "import atat" not in text and "from atat" not in text
    assert "params:" not in text and "resources:" not in text and "log:" not in text
    work = tmp_path / "work"
    work.mkdir()
    _, planned = bench._dry_run_cpu(["-s", str(root / "Snakefile"), "--configfile",
                                     str(root / "config" / "demo.yaml")], work)
    cpu, reference = bench._dry_run_cpu([], tmp_path / "ref")
    assert planned == reference == n and cpu > 0
