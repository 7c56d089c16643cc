"""Atomic writers of `atat.io`."""

import pytest
import torch

from atat import io


def test_torch_save_gives_the_same_bytes_at_any_path(tmp_path):
    # The SLURM and local runs of one model must produce byte-identical checkpoints: torch
    # names the zip records after the file it writes to, and atomic writes use random names.
    state = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "epoch": 3}
    io.torch_save(state, tmp_path / "model.pt")
    (tmp_path / "other").mkdir()
    io.torch_save(state, tmp_path / "other" / "a_different_name.pt")
    first = (tmp_path / "model.pt").read_bytes()
    assert first == (tmp_path / "other" / "a_different_name.pt").read_bytes()
    loaded = io.torch_load(tmp_path / "model.pt")
    assert torch.equal(loaded["w"], state["w"]) and loaded["epoch"] == 3


def test_an_interrupted_write_leaves_neither_output_nor_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    io.write_json(target, {"old": 1})
    with pytest.raises(RuntimeError):
        with io.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert io.read_json(target) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
