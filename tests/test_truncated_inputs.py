"""Every file a job reads, truncated (a killed copy, an interrupted download), stops the job with
a message naming the file and what to do -- the treatment model.pt always had (atat.base.io), now
for the generator pickle, JSON records, saved embeddings, face networks and dataset manifests."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from atat.base import io
from atat.data.manifest import DatasetFormatError, read_dataset, read_meta
from atat.data.synthfaces import generate_synthfaces
from atat.inversion.safe_pickle import UnsafePickleError, load_stylegan_pickle, save_stylegan_pickle
from atat.inversion.stylegan2 import Generator

SMALL = dict(z_dim=16, c_dim=0, w_dim=16, img_resolution=16, img_channels=3,
             mapping_kwargs=dict(num_layers=2),
             synthesis_kwargs=dict(channel_base=128, channel_max=16, conv_clamp=256))


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def assert_named_with_remedy(error: BaseException, path: Path) -> None:
    msg = str(error)
    assert str(path) in msg and "cannot be read" in msg, msg
    assert "Delete it and run the workflow again" in msg, msg


@pytest.mark.parametrize("keep", [0.5, 0.02])
def test_a_truncated_generator_pickle_is_named_with_the_remedy(tmp_path, keep):
    torch.manual_seed(0)
    path = tmp_path / "weights" / "stylegan2" / "ffhq.pkl"
    path.parent.mkdir(parents=True)
    save_stylegan_pickle(path, Generator(**SMALL).eval())
    Generator.from_pickle(path)  # whole: loads
    truncate(path, keep)
    with pytest.raises(io.CheckpointError) as info:  # was: UnpicklingError, no file named
        Generator.from_pickle(path)
    assert_named_with_remedy(info.value, path)
    with pytest.raises(io.CheckpointError):
        load_stylegan_pickle(path)


def test_a_refused_global_is_still_an_unsafe_pickle_error(tmp_path):
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(print))
    with pytest.raises(UnsafePickleError):
        load_stylegan_pickle(path)


def test_a_truncated_json_record_is_named_with_the_remedy(tmp_path):
    path = tmp_path / "metrics.json"
    io.write_json(path, {"test_acc": 0.5, "history": list(range(50))})
    truncate(path)
    with pytest.raises(io.CheckpointError) as info:
        io.read_json(path)
    assert_named_with_remedy(info.value, path)


def test_truncated_saved_tensors_and_face_networks_are_named_with_the_remedy(tmp_path):
    from atat.inversion.evaluation import load_face_network
    from atat.inversion.metrics import load_real_embeddings

    emb = tmp_path / "real_embeddings.pt"
    io.torch_save({"eval": {0: torch.zeros(3, 4)}, "face": None}, emb)
    truncate(emb)
    with pytest.raises(io.CheckpointError) as info:
        load_real_embeddings(emb)
    assert_named_with_remedy(info.value, emb)
    face = tmp_path / "model.pt"
    io.torch_save({"kind": "public_classifier", "state_dict": {"w": torch.zeros(64, 64)}}, face)
    truncate(face)
    with pytest.raises(io.CheckpointError) as info:
        load_face_network(face)
    assert_named_with_remedy(info.value, face)


@pytest.mark.parametrize("name", ["manifest.csv", "meta.json"])
def test_a_truncated_manifest_names_the_file_and_how_to_restore_the_dataset(tmp_path, name):
    folder = tmp_path / "datasets" / "synthfaces"
    generate_synthfaces(folder, n_private_identities=3, n_public_identities=2,
                        images_per_identity=4, public_images_per_identity=2, resolution=16,
                        seed=5, progress=False)
    truncate(folder / "private" / name)
    with pytest.raises(DatasetFormatError) as info:
        read_dataset(folder / "private")
    msg = str(info.value)
    assert str(folder / "private") in msg, msg
    assert f"snakemake {folder.parent / 'synthfaces.dataset.json'} --force" in msg, msg
    if name == "meta.json":
        with pytest.raises(DatasetFormatError, match="--force"):
            read_meta(folder / "private")


def test_a_truncated_stop_reference_metrics_file_is_named_with_the_remedy(tmp_path):
    from atat.training.train import TrainSpec, resolve_stop_target

    metrics = tmp_path / "metrics.json"
    io.write_json(metrics, {"val_acc": 0.5, "history": list(range(40))})
    truncate(metrics)
    spec = TrainSpec(model_id="d/resnet18/nodef_es/seed0", dataset_root=str(tmp_path),
                     resolution=32, n_classes=4, architecture="resnet18",
                     defense={"type": "nodef"}, training={"stop_at_val_acc": "unseen_pixels"},
                     augmentation={}, seed=0, stop_reference_metrics=str(metrics))
    with pytest.raises(ValueError) as info:
        resolve_stop_target(spec)
    assert str(metrics) in str(info.value)
    assert "Delete it and run the workflow again" in str(info.value)
