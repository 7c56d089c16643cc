"""`make float-paths` (atat.lab.float_paths): one training per float path in a fresh process."""

import csv

import pytest
import torch

from atat.lab import float_paths


@pytest.mark.slow  # three fresh processes, ~40 s
def test_same_path_same_weights_other_seed_other_weights(tmp_path):
    """Determinism on one float path (the property every README number rests on), and the
    digest sees a change of seed: a 1-epoch demo NoDef, three fresh processes."""
    paths = {"a": ({}, 1, 0), "a_again": ({}, 1, 0), "other_seed": ({}, 1, 1)}
    rows = {n: float_paths.run_path(n, work=tmp_path / "w", cache=tmp_path / "c", epochs=1,
                                    paths=paths) for n in paths}
    assert rows["a"]["digest"] == rows["a_again"]["digest"]
    assert rows["a"]["test_acc"] == rows["a_again"]["test_acc"]
    assert rows["other_seed"]["digest"] != rows["a"]["digest"]
    assert rows["a"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rows["a"]["env"] == "-" and rows["other_seed"]["seed"] == 1


@pytest.mark.slow
def test_environment_reaches_the_child(tmp_path):
    """The path's environment selects the child's kernels: ATen reports the capability it was
    limited to."""
    if float_paths.available("avx2") is not None:
        pytest.skip("this CPU has no AVX2")
    paths = {"avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, 1, 0)}
    row = float_paths.run_path("avx2", work=tmp_path / "w", cache=tmp_path / "c", epochs=1,
                               paths=paths)
    assert row["cpu_capability"] == "AVX2"
    assert row["env"] == "ATEN_CPU_CAPABILITY=avx2"


def test_main_writes_table_and_refuses_unknown_paths(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit):
        float_paths.main(["--only", "native,nonsense", "--out", str(tmp_path / "x.csv")])
    assert "nonsense" in capsys.readouterr().err

    calls = []

    def fake_run(name, *, work, cache, epochs=None, paths=float_paths.PATHS):
        calls.append((name, epochs))
        return {"path": name, "env": "-", "threads": 1, "seed": 0, "cpu_capability": "X",
                "test_acc": 0.5, "val_acc": 0.25, "digest": "d", "cpu_s": 1.0}

    monkeypatch.setattr(float_paths, "run_path", fake_run)
    out = tmp_path / "fp.csv"
    assert float_paths.main(["--only", "native,seed1", "--epochs", "1", "--out", str(out),
                             "--cache", str(tmp_path / "c")]) == 0
    assert calls == [("native", 1), ("seed1", 1)]
    rows = list(csv.DictReader(out.open()))
    assert [r["path"] for r in rows] == ["native", "seed1"]
    assert "| native | - | 1 | 0 | X | 0.500 | 0.250 | d | 1.0 |" in capsys.readouterr().out
