"""Issue 14 (operations) at the library level: a corrupt resume file makes training start
over instead of failing every retry, and a training log is one plain line per epoch."""

import logging
import re

import pytest
import torch

from atat.training.train import TrainSpec, train

RECIPE = {"optimizer": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 0.0,
          "batch_size": 16, "eval_batch_size": 64, "epochs": 3, "lr_milestones": [2],
          "lr_gamma": 0.1, "eval_every": 1, "checkpoint_every": 1, "pretrained": False,
          "num_workers": 0}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, make_synthfaces):
    return str(make_synthfaces(tmp_path_factory.mktemp("synth") / "ds", n_public_identities=2,
                               images_per_identity=8, public_images_per_identity=2,
                               resolution=32))


def spec(data_root):
    return TrainSpec(model_id="rec/resnet18/nodef/seed0", dataset_root=data_root, resolution=32,
                     n_classes=4, architecture="resnet18", defense={"type": "nodef"},
                     training=dict(RECIPE), augmentation={}, seed=0)


def run(data_root, tmp, name, **kw):
    return train(spec(data_root), out_model=tmp / f"{name}.pt", out_metrics=tmp / f"{name}.json",
                 resume_path=tmp / f"{name}.resume.pt", **kw)


def test_a_truncated_resume_file_is_moved_aside_and_training_starts_over(data_root, tmp_path,
                                                                          caplog):
    full = run(data_root, tmp_path, "full", progress=False)
    assert run(data_root, tmp_path, "part", stop_after_epochs=1, progress=False) is None
    resume = tmp_path / "part.resume.pt"
    data = resume.read_bytes()
    resume.write_bytes(data[: len(data) // 3])  # the node died while copying / writing it
    with caplog.at_level("WARNING", logger="atat.base.io"):
        again = run(data_root, tmp_path, "part", progress=False)
    assert any(f"{resume}: cannot be read" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "part.resume.pt.corrupt").read_bytes() == data[: len(data) // 3]
    assert not resume.exists()  # removed at the end of a completed run, as usual
    assert len(again["history"]) == RECIPE["epochs"]  # started over from epoch 0 ...
    a = torch.load(tmp_path / "full.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "part.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # ... and ends where a clean run ends
    assert again["test_acc"] == full["test_acc"]


def test_the_training_log_is_one_plain_line_per_epoch_with_eta(data_root, tmp_path):
    log_file = tmp_path / "train.log"
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        run(data_root, tmp_path, "m", progress=True)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()
    text = log_file.read_text()
    assert "\r" not in text
    epoch_lines = [line for line in text.splitlines() if " epoch " in line and "epochs done" in line]
    assert len(epoch_lines) == RECIPE["epochs"]
    for k, line in enumerate(epoch_lines):
        assert re.search(rf"rec/resnet18/nodef/seed0 epoch {k}: \{{.*'train_loss'.*\}} \| "
                         rf"epochs done {k + 1}/3 \(\d+%\) \| \d+:\d\d:\d\d elapsed, ETA "
                         rf"\d+:\d\d:\d\d$", line), line


def test_a_truncated_inversion_batch_file_is_redone_not_fatal(tmp_path, caplog):
    from test_inversion_ppa import TinyTarget, fake_scorer, params, tiny_generator

    from atat.inversion import ppa

    G, T = tiny_generator(), TinyTarget()
    full = ppa.run_ppa(G, T, params(), fake_scorer, resume_dir=tmp_path, progress=False)
    for name in ("init_w.pt", "batch00000.pt"):  # killed while copying / a failing disk
        f = tmp_path / name
        f.write_bytes(f.read_bytes()[:100])
    with caplog.at_level("WARNING", logger="atat.base.io"):
        again = ppa.run_ppa(G, T, params(), fake_scorer, resume_dir=tmp_path, progress=False)
    assert torch.equal(again["final_w"], full["final_w"]) and again["frame"].equals(full["frame"])
    assert (tmp_path / "init_w.pt.corrupt").exists() and (tmp_path / "batch00000.pt.corrupt").exists()
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 2


def test_the_autoattack_log_is_one_line_per_attack_with_eta(caplog):
    from test_robustness import CHEAP, cnn_data, tiny_cnn

    from atat.robustness import evaluate_autoattack

    model = tiny_cnn()
    x, y = cnn_data(model)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with caplog.at_level("INFO", logger="atat.robustness"):
            evaluate_autoattack(model, x, y, epsilon=0.01, version="custom", settings=CHEAP)
    finally:
        torch.set_num_threads(n)
    done = [r.getMessage() for r in caplog.records
            if r.name == "atat.robustness" and "robust accuracy" in r.getMessage()
            and r.getMessage().startswith("[")]
    assert len(done) == 4
    for k, msg in enumerate(done, start=1):
        assert f"eps=0.01: attacks done {k}/4" in msg and "ETA" in msg and "\r" not in msg
