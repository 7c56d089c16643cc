"""`make bench-gpu` (atat.lab.bench_gpu): the paper's shapes, the GPU speed-ups beside the paper's
setting, and the TF32 checks inside PGD and AutoAttack."""

import contextlib
import csv

import pytest
import torch

from atat.lab import bench_gpu


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_paper_shapes_come_from_the_config():
    s = bench_gpu.paper_shapes(bench_gpu.paper_config())
    assert (s.architecture, s.resolution, s.n_classes, s.batch_size) == ("resnet152", 224, 530, 128)
    assert (s.gen_resolution, s.center_crop, s.ppa_batch, s.ppa_steps) == (1024, 800, 25, 50)
    assert s.aa_examples == 128 and s.generator_kwargs["synthesis_kwargs"]["channel_base"] == 32768


def test_standard_work_counts_targets_and_iterations():
    assert bench_gpu._standard_work("apgd-ce", 530) == 100
    assert bench_gpu._standard_work("apgd-t", 530) == 900
    assert bench_gpu._standard_work("fab-t", 5) == 400       # targets clamped to n_classes - 1
    assert bench_gpu._standard_work("square", 530) == 5000


def test_quick_run_writes_every_line(tmp_path, one_thread):
    out = tmp_path / "bench_gpu.csv"
    assert bench_gpu.main(["--quick", "--device", "cpu", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    got = {(r["component"], r["variant"]) for r in rows}
    for name in ("nodef", "atat"):
        for kind in ("fp32", "channels_last", "bf16_autocast"):
            assert ("train", f"{name}/{kind}") in got
    assert ("autoattack", "eps0.031") in got and ("ppa", "optimisation") in got
    checks = {r["variant"]: r["passed"] for r in rows if r["component"] == "tf32" and r["passed"]}
    assert checks == {"pgd (AT-AT training step)": "True", "autoattack": "True",
                      "pgd under bf16 autocast (AT-AT training step)": "True"}
    assert all(float(r["value"]) > 0 for r in rows)


def test_tf32_check_fails_when_pgd_leaves_tf32_on(monkeypatch, one_thread):
    """A PGD that forgot to switch TF32 off is caught (cuDNN's TF32 flag is on by default)."""
    import atat.training.pgd

    monkeypatch.setattr(atat.training.pgd, "attack_precision", lambda precision: contextlib.nullcontext())
    torch.backends.cudnn.allow_tf32 = True
    cfg = bench_gpu.paper_config()
    lines = bench_gpu.bench_training(cfg, bench_gpu.quick_shapes(), torch.device("cpu"),
                                     variants=("fp32",), steps=1, repeats=1)
    pgd_line = next(ln for ln in lines if ln.variant == "pgd (AT-AT training step)")
    assert pgd_line.passed is False


def test_autocast_check_fails_when_pgd_runs_under_the_training_autocast(monkeypatch, one_thread):
    """A PGD that left the training step's bf16 autocast on is caught."""
    import atat.training.pgd
    from atat.base.precision import no_tf32

    monkeypatch.setattr(atat.training.pgd, "attack_precision", lambda precision: no_tf32())
    lines = bench_gpu.bench_training(bench_gpu.paper_config(), bench_gpu.quick_shapes(),
                                     torch.device("cpu"), variants=("fp32", "bf16_autocast"),
                                     steps=1, repeats=1)
    by_variant = {ln.variant: ln.passed for ln in lines if ln.component == "tf32"}
    assert by_variant["pgd (AT-AT training step)"] is True
    assert by_variant["pgd under bf16 autocast (AT-AT training step)"] is False
