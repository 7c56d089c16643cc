"""Tests of the on-disk dataset format and the split rule (atat.data.manifest)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from atat.data.manifest import (
    DatasetFormatError,
    assign_splits,
    read_dataset,
    read_meta,
    split_indices,
    write_dataset,
)


# ------------------------------------------------------------------ split rule
@pytest.mark.parametrize(
    "n, sizes",
    [(30038, (21627, 5407, 3004)), (20580, (14817, 3705, 2058))],
)
def test_split_sizes_match_spec(n, sizes):
    s = split_indices(n)
    assert (len(s["train"]), len(s["val"]), len(s["test"])) == sizes
    allidx = np.concatenate([s["train"], s["val"], s["test"]])
    assert len(allidx) == n
    assert np.array_equal(np.sort(allidx), np.arange(n))  # a partition of range(n)


def test_split_matches_reference_procedure_and_keeps_global_state():
    n = 1234
    saved = np.random.get_state()
    try:
        np.random.seed(42)
        idx = list(range(n))
        np.random.shuffle(idx)
    finally:
        np.random.set_state(saved)
    n_tr = int(0.9 * n)
    train_full, test = idx[:n_tr], idx[n_tr:]
    tr, va = torch.utils.data.random_split(
        train_full,
        [int(0.8 * len(train_full)), len(train_full) - int(0.8 * len(train_full))],
        generator=torch.Generator().manual_seed(42),
    )
    before = np.random.get_state()[1].copy()
    torch_before = torch.random.get_rng_state().clone()
    s = split_indices(n, seed=42)
    assert np.array_equal(np.random.get_state()[1], before)  # global NumPy RNG untouched
    assert torch.equal(torch.random.get_rng_state(), torch_before)
    assert s["test"].tolist() == test
    assert s["train"].tolist() == [train_full[i] for i in tr.indices]
    assert s["val"].tolist() == [train_full[i] for i in va.indices]


def test_split_seed_changes_split_and_assign_splits_agrees():
    a, b = split_indices(500, seed=42), split_indices(500, seed=43)
    assert not np.array_equal(a["test"], b["test"])
    names = assign_splits(500, seed=42)
    assert names == assign_splits(list(range(500)), seed=42)
    for k, ids in a.items():
        assert all(names[i] == k for i in ids)
    assert set(names) == {"train", "val", "test"}


# ------------------------------------------------------------------ helpers
def _make_dataset(root, n_classes=3, per_class=4, split="private"):
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    rng = np.random.RandomState(0)
    for c in range(n_classes):
        (root / "img" / f"c{c}").mkdir(parents=True, exist_ok=True)
        for j in range(per_class):
            rel = f"img/c{c}/{j}.png"
            Image.fromarray(rng.randint(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / rel)
            rows.append((rel, c, f"id{c}"))
    df = pd.DataFrame(rows, columns=["path", "label", "identity"])
    df["split"] = assign_splits(len(df)) if split == "private" else "public"
    meta = {"name": "toy", "class_names": [f"id{c}" for c in range(n_classes)], "source": "test",
            "resolution": [8, 8], "extra_key": {"a": 1}}
    return df, meta


# ------------------------------------------------------------------ round trip
def test_round_trip(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    written = write_dataset(tmp_path / "ds", df, meta)
    assert written["format_version"] == 1 and written["n_classes"] == 3
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == ["img", "manifest.csv", "meta.json"]
    header = (tmp_path / "ds" / "manifest.csv").read_text().splitlines()[0]
    assert header == "path,label,identity,split"
    back, m = read_dataset(tmp_path / "ds")
    pd.testing.assert_frame_equal(back.astype(object), df.astype(object))
    assert m == written == read_meta(tmp_path / "ds")
    assert m["extra_key"] == {"a": 1}
    assert m["counts"] == {s: int((df["split"] == s).sum()) for s in ("train", "val", "test")}
    tr, _ = read_dataset(tmp_path / "ds", "train")
    assert len(tr) == m["counts"]["train"] and set(tr["split"]) == {"train"}
    assert list(tr["path"]) == list(df[df["split"] == "train"]["path"])  # manifest order kept


def test_public_pool_round_trip(tmp_path):
    df, meta = _make_dataset(tmp_path / "pub", split="public")
    write_dataset(tmp_path / "pub", df, meta)
    back, m = read_dataset(tmp_path / "pub", "public")
    assert len(back) == len(df) and m["counts"] == {"public": len(df)}
    with pytest.raises(DatasetFormatError, match="'train' not present"):
        read_dataset(tmp_path / "pub", "train")


# ------------------------------------------------------------------ write validation
def test_write_rejects_noncontiguous_labels(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    df.loc[df["label"] == 2, "label"] = 5
    with pytest.raises(DatasetFormatError, match="contiguous"):
        write_dataset(tmp_path / "ds", df, meta)
    assert not (tmp_path / "ds" / "manifest.csv").exists()


def test_write_rejects_class_names_mismatch(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    meta["class_names"] = meta["class_names"][:2]
    with pytest.raises(DatasetFormatError, match="class_names"):
        write_dataset(tmp_path / "ds", df, meta)
    df, meta = _make_dataset(tmp_path / "ds")
    df.loc[0, "identity"] = "someone_else"
    with pytest.raises(DatasetFormatError, match="identity"):
        write_dataset(tmp_path / "ds", df, meta)


def test_write_rejects_missing_file_and_bad_split(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    (tmp_path / "ds" / df["path"][3]).unlink()
    with pytest.raises(DatasetFormatError, match=r"1 of 12 image file\(s\).*missing"):
        write_dataset(tmp_path / "ds", df, meta)
    df, meta = _make_dataset(tmp_path / "ds2")
    df.loc[0, "split"] = "holdout"
    with pytest.raises(DatasetFormatError, match="unknown split"):
        write_dataset(tmp_path / "ds2", df, meta)


def test_write_leaves_no_temp_files(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    write_dataset(tmp_path / "ds", df, meta)
    write_dataset(tmp_path / "ds", df, meta)  # overwriting is fine
    assert not [p for p in (tmp_path / "ds").iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------ read errors
@pytest.fixture
def ds(tmp_path):
    df, meta = _make_dataset(tmp_path / "ds")
    write_dataset(tmp_path / "ds", df, meta)
    return tmp_path / "ds"


def test_missing_manifest(ds):
    (ds / "manifest.csv").unlink()
    with pytest.raises(DatasetFormatError, match="manifest.csv: missing"):
        read_dataset(ds)


def test_missing_meta_and_root(ds, tmp_path):
    (ds / "meta.json").unlink()
    with pytest.raises(DatasetFormatError, match="meta.json: missing"):
        read_dataset(ds)
    with pytest.raises(DatasetFormatError, match="does not exist"):
        read_dataset(tmp_path / "nowhere")


def test_corrupt_manifest(ds):
    (ds / "manifest.csv").write_text("this is,not\na manifest\n")
    with pytest.raises(DatasetFormatError, match="manifest.csv"):
        read_dataset(ds)
    (ds / "manifest.csv").write_text("path,label,identity,split\nimg/c0/0.png,zero,id0,train\n")
    with pytest.raises(DatasetFormatError, match="label"):
        read_dataset(ds)


def test_corrupt_meta_and_version(ds):
    meta = json.loads((ds / "meta.json").read_text())
    (ds / "meta.json").write_text("{not json")
    with pytest.raises(DatasetFormatError, match="not valid JSON"):
        read_dataset(ds)
    (ds / "meta.json").write_text(json.dumps({**meta, "format_version": 2}))
    with pytest.raises(DatasetFormatError, match="format_version"):
        read_dataset(ds)
    (ds / "meta.json").write_text(json.dumps({**meta, "counts": {"train": 1}}))
    with pytest.raises(DatasetFormatError, match="counts"):
        read_dataset(ds)


def test_missing_images_reported(ds):
    df, _ = read_dataset(ds)
    for p in df["path"][:3]:
        (ds / p).unlink()
    with pytest.raises(DatasetFormatError, match=r"3 of 12 image file\(s\)") as e:
        read_dataset(ds)
    assert df["path"][0] in str(e.value)
    read_dataset(ds, check_files=False)  # can be skipped explicitly


def test_unknown_split(ds):
    with pytest.raises(DatasetFormatError, match="unknown split 'training'"):
        read_dataset(ds, "training")
