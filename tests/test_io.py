"""Atomic writers of `atat.base.io`."""

import pytest
import torch

from atat.base import io


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


# ---------------------------------------------------------------- unreadable project files
def _truncated(tmp_path, name="model.pt", keep=0.5):
    path = tmp_path / name
    io.torch_save({"w": torch.zeros(64, 64), "epoch": 3}, path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])  # what a copy or a killed writer leaves
    return path


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_a_truncated_checkpoint_names_the_file_and_what_to_do(tmp_path, keep):
    path = _truncated(tmp_path, keep=keep)
    with pytest.raises(io.CheckpointError) as err:
        io.torch_load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: cannot be read (")  # then torch's reason, on one line
    assert "truncated or corrupt" in msg and "Delete it and run the workflow again" in msg
    assert "\n" not in msg


def test_not_a_torch_file_and_a_refused_object_name_the_file(tmp_path):
    (tmp_path / "page.pt").write_text("<html>error</html>")
    with pytest.raises(io.CheckpointError, match="page.pt: cannot be read"):
        io.torch_load(tmp_path / "page.pt")
    torch.save({"f": io.CheckpointError("x")}, tmp_path / "obj.pt")  # not tensors/containers
    with pytest.raises(io.CheckpointError, match="obj.pt: cannot be read"):
        io.torch_load(tmp_path / "obj.pt")
    with pytest.raises(FileNotFoundError):
        io.torch_load(tmp_path / "missing.pt")


def test_train_load_model_names_a_truncated_model(tmp_path):
    from atat.training.train import load_model

    path = _truncated(tmp_path)
    with pytest.raises(io.CheckpointError, match=f"^{path}: cannot be read"):
        load_model(path)


def test_a_corrupt_resume_file_is_moved_aside_with_a_warning(tmp_path, caplog):
    path = _truncated(tmp_path, "resume.pt")
    with caplog.at_level("WARNING", logger="atat.base.io"):
        assert io.load_resume(path) is None
    assert not path.exists() and (tmp_path / "resume.pt.corrupt").exists()
    assert any(f"{path}: cannot be read" in r.getMessage() and "starting this part over"
               in r.getMessage() for r in caplog.records)
    assert io.load_resume(path) is None  # nothing to resume from
    io.torch_save({"epoch": 4}, path)
    assert io.load_resume(path) == {"epoch": 4}


# ---------------------------------------------------------------- stale temporaries
def test_the_next_write_removes_temporaries_of_killed_writers_only(tmp_path):
    target = tmp_path / "model.pt"
    stale = tmp_path / ".model.pt.abc123.tmp"  # left by a writer killed in an earlier process
    stale.write_bytes(b"\0" * 1000)
    old = io.PROCESS_STARTED - 3600
    import os

    os.utime(stale, (old, old))
    current = tmp_path / ".model.pt.def456.tmp"  # written since this process started
    current.write_bytes(b"\0")
    unrelated = tmp_path / ".other.pt.abc123.tmp"
    unrelated.write_bytes(b"\0")
    os.utime(unrelated, (old, old))
    assert io.temporaries_of(target) and stale in io.temporaries_of(target)
    io.torch_save({"w": torch.ones(2)}, target)
    assert not stale.exists()
    assert current.exists() and unrelated.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".model.pt.def456.tmp", ".other.pt.abc123.tmp", "model.pt"])


def test_stale_build_directories_of_a_directory_output_are_removed(tmp_path):
    import os

    out = tmp_path / "datasets" / "synthfaces"
    out.parent.mkdir()
    old = io.PROCESS_STARTED - 60
    stale = []
    for name in (".synthfaces.tmp-x1y2z3", ".synthfaces.old-4242"):  # mkdtemp / install_dir
        d = out.parent / name
        (d / "private" / "images").mkdir(parents=True)
        (d / "private" / "images" / "0.png").write_bytes(b"png")
        os.utime(d, (old, old))
        stale.append(d)
    young = out.parent / ".synthfaces.tmp-n0w000"
    young.mkdir()
    other = out.parent / ".celeba.tmp-abcdef"
    other.mkdir()
    os.utime(other, (old, old))
    assert sorted(io.remove_stale_temporaries(out)) == sorted(stale)
    assert not any(d.exists() for d in stale) and young.exists() and other.exists()
