"""atat.data.prepare on fixture archives with the real layouts (built here, no downloads).

Network: offline tests block every socket; the download tests talk only to a local HTTP
server on 127.0.0.1 that imitates Kaggle, Google Drive and the Stanford server.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import runpy
import socket
import sys
import tarfile
import types
import urllib.parse
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
import scipy.io
import yaml
from PIL import Image

from atat.data import prepare as P
from atat.data.manifest import STAMP_SUFFIX, read_dataset, split_indices
from atat.data.builders import stanford_dogs
from atat.base.fetch import ChecksumError, transports

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _img_bytes(seed: int, fmt: str, size=(12, 10)) -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return buf.getvalue()


class _RawNameZipInfo(zipfile.ZipInfo):
    """Member name stored as raw bytes *without* the UTF-8 flag, as many zip tools write it."""

    def __init__(self, raw: bytes):
        super().__init__(raw.decode("cp437"))
        self._raw = raw

    def _encodeFilenameFlags(self):  # noqa: N802 (zipfile's private hook)
        return self._raw, self.flag_bits & ~0x800


def _tar_add(tf: tarfile.TarFile, name: str, data: bytes | None) -> None:
    ti = tarfile.TarInfo(name)
    if data is None:
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(ti)
    else:
        ti.size, ti.mode = len(data), 0o644
        tf.addfile(ti, io.BytesIO(data))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_lock(path: Path, files: dict) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "files": files}))
    return path


def _no_leftovers(out: Path) -> None:
    assert not out.exists()
    if out.parent.exists():
        assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


class NetworkBlocked(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    def guard(*args, **kwargs):
        raise NetworkBlocked("network access attempted")

    for name in ("socket", "create_connection", "getaddrinfo"):
        monkeypatch.setattr(socket, name, guard)


# --------------------------------------------------------------------------------------
# fixture archives
# --------------------------------------------------------------------------------------
MOJI_RAW = "José Ferrer".encode("utf-8")  # UTF-8 bytes, stored without the UTF-8 flag ...
MOJI = MOJI_RAW.decode("cp437")  # ... so zipfile (and the authors' extraction) read 'Jos├⌐ Ferrer'
UTF8_MOJI = "BeyoncÃ© Knowles"  # a name that is already mis-encoded, stored as proper UTF-8


def make_facescrub_zip(path: Path, extra: dict | None = None) -> dict[str, bytes]:
    members = {
        "actor_faces/Zac Efron/b.jpg": _img_bytes(1, "JPEG"),
        "actor_faces/Zac Efron/sub/0.jpg": _img_bytes(2, "JPEG"),
        "actor_faces/Zac Efron/a.png": _img_bytes(3, "PNG"),
        "actor_faces/Adam Brody/2.JPG": _img_bytes(4, "JPEG"),
        "actor_faces/Adam Brody/1.jpg": _img_bytes(5, "JPEG"),
        "actor_faces/Adam Brody/3.bmp": _img_bytes(6, "BMP"),
        "actor_faces/Adam Brody/notes.txt": b"not an image",
        "actor_faces/Jose Ferrer/x.jpg": _img_bytes(7, "JPEG"),
        "actor_faces/readme.txt": b"ignored: not inside a class folder",
        f"actress_faces/{UTF8_MOJI}/b2.png": _img_bytes(8, "PNG"),
        f"actress_faces/{UTF8_MOJI}/b1.png": _img_bytes(9, "PNG"),
        f"actress_faces/{UTF8_MOJI}/b3.png": _img_bytes(10, "PNG"),
        "actress_faces/Emma Stone/e2.jpg": _img_bytes(11, "JPEG"),
        "actress_faces/Emma Stone/e1.jpg": _img_bytes(12, "JPEG"),
    }
    members.update(extra or {})
    raw_member = (b"actor_faces/" + MOJI_RAW + b"/y.jpg", _img_bytes(13, "JPEG"))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("actor_faces/", b"")
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(_RawNameZipInfo(raw_member[0]), raw_member[1])
    members[raw_member[0].decode("cp437")] = raw_member[1]
    return members


# first appearance order 30, 50, 10, 20, 40; counts 20:4, 30:3, 50:3, 10:3, 40:2
CELEBA_IDS = [30, 50, 10, 20, 40, 20, 30, 10, 50, 20, 40, 10, 30, 50, 20]
CELEBA_PNG_ONLY = "000007.jpg"  # only a .png crop exists for this one


def make_celeba(raw: Path) -> dict[str, bytes]:
    raw.mkdir(parents=True, exist_ok=True)
    lines = [f"{i + 1:06d}.jpg {ident}" for i, ident in enumerate(CELEBA_IDS)]
    (raw / "identity_CelebA.txt").write_text("\n".join(lines) + "\n")
    crops = {}
    with zipfile.ZipFile(raw / "hdcrop.zip", "w") as zf:
        zf.writestr("data/celeba/hdcrop/", b"")
        for i in range(len(CELEBA_IDS)):
            fn = f"{i + 1:06d}.jpg"
            if fn == CELEBA_PNG_ONLY:
                fn, data = fn.replace(".jpg", ".png"), _img_bytes(100 + i, "PNG")
            else:
                data = _img_bytes(100 + i, "JPEG")
            zf.writestr(f"data/celeba/hdcrop/{fn}", data)
            crops[fn] = data
        zf.writestr("data/celeba/landmark.txt", b"not used")
    return crops


DOG_CLASSES = ["n02085620-Chihuahua", "n02085782-Japanese_spaniel", "n02086240-Shih-Tzu"]
# (annotation name, 1-based label); train list then test list, deliberately not sorted
DOG_TRAIN = [("n02086240-Shih-Tzu/n02086240_7", 3), ("n02085620-Chihuahua/n02085620_2", 1),
             ("n02085620-Chihuahua/n02085620_1", 1), ("n02085782-Japanese_spaniel/n02085782_5", 2)]
DOG_TEST = [("n02085782-Japanese_spaniel/n02085782_9", 2), ("n02086240-Shih-Tzu/n02086240_3", 3),
            ("n02085620-Chihuahua/n02085620_4", 1)]


def _dog_box(i: int) -> tuple[int, int, int, int]:
    return (2 + i, 1 + i % 3, 20 + i, 15 + i % 4)


def _dog_xml(ann: str, i: int) -> bytes:
    folder, name = ann.split("/")
    b1, b2 = _dog_box(i), (0, 0, 30, 24)
    obj = ("<object><name>{n}</name><pose>Unspecified</pose><truncated>0</truncated><difficult>0</difficult>"
           "<bndbox><xmin>{}</xmin><ymin>{}</ymin><xmax>{}</xmax><ymax>{}</ymax></bndbox></object>")
    breed = folder.split("-", 1)[1]
    return (f"<annotation><folder>{folder.split('-')[0][1:]}</folder><filename>{name}</filename>"
            "<source><database>ImageNet database</database></source>"
            "<size><width>30</width><height>24</height><depth>3</depth></size><segment>0</segment>"
            + obj.format(*b1, n=breed) + obj.format(*b2, n=breed) + "</annotation>").encode()


def _mat(entries) -> bytes:
    n = len(entries)
    files, anns = np.empty((n, 1), dtype=object), np.empty((n, 1), dtype=object)
    for k, (a, _) in enumerate(entries):
        files[k, 0], anns[k, 0] = a + ".jpg", a
    labels = np.array([[float(lab)] for _, lab in entries])
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"file_list": files, "annotation_list": anns, "labels": labels})
    return buf.getvalue()


def make_dogs(raw: Path, lists_extra: dict | None = None) -> dict[str, tuple[bytes, tuple]]:
    raw.mkdir(parents=True, exist_ok=True)
    samples = DOG_TRAIN + DOG_TEST
    info = {}
    with tarfile.open(raw / "images.tar", "w") as itf, tarfile.open(raw / "annotation.tar", "w") as atf:
        _tar_add(itf, "Images", None)
        _tar_add(atf, "Annotation", None)
        for c in DOG_CLASSES:
            _tar_add(itf, f"Images/{c}", None)
            _tar_add(atf, f"Annotation/{c}", None)
        for i, (a, _) in enumerate(sorted(samples)):
            img = _img_bytes(200 + i, "JPEG", size=(30, 24))
            _tar_add(itf, f"Images/{a}.jpg", img)
            _tar_add(atf, f"Annotation/{a}", _dog_xml(a, i))
            info[a] = (img, _dog_box(i))
    with tarfile.open(raw / "lists.tar", "w") as ltf:
        _tar_add(ltf, "file_list.mat", _mat(samples))
        _tar_add(ltf, "train_list.mat", _mat(DOG_TRAIN))
        _tar_add(ltf, "test_list.mat", _mat(DOG_TEST))
        for name, data in (lists_extra or {}).items():
            _tar_add(ltf, name, data)
    return info


def _check_split(df: pd.DataFrame, seed: int = 42) -> None:
    n = len(df)
    idx = split_indices(n, seed=seed)
    for name, ids in idx.items():
        assert sorted(np.flatnonzero(df["split"].to_numpy() == name)) == sorted(ids.tolist())
    assert (df["split"] == "test").sum() == n - int(0.9 * n)
    assert (df["split"] == "train").sum() == int(0.8 * int(0.9 * n))


# --------------------------------------------------------------------------------------
# FaceScrub
# --------------------------------------------------------------------------------------
def test_facescrub_classes_order_and_imagefolder_parity(tmp_path, no_network):
    raw = tmp_path / "raw"
    raw.mkdir()
    members = make_facescrub_zip(raw / "facescrub-full.zip")
    out = tmp_path / "ds" / "facescrub"
    res = P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, n_classes=6, offline=True,
                            lock_file=tmp_path / "lock.yaml")
    df, meta = read_dataset(out / "private")
    actors = ["Adam Brody", "Jose Ferrer", MOJI, "Zac Efron"]
    assert MOJI == "Jos├⌐ Ferrer"
    assert meta["class_names"] == actors + [UTF8_MOJI, "Emma Stone"]
    assert meta["n_classes"] == 6 and meta["source"] == "facescrub"
    assert res["private"]["counts"] == meta["counts"]
    assert len(df) == 13
    _check_split(df)

    # same classes and sample order as torchvision ImageFolder over the zipfile extraction
    from torchvision.datasets import ImageFolder

    ext = tmp_path / "extracted"
    with zipfile.ZipFile(raw / "facescrub-full.zip") as zf:
        zf.extractall(ext)
    ref = []
    offset = 0
    for group in ("actor_faces", "actress_faces"):
        d = ImageFolder(str(ext / group))
        ref += [(Path(p).relative_to(ext).as_posix(), t + offset) for p, t in d.samples]
        offset += len(d.classes)
    src = pd.read_csv(out / "private" / "sources.csv", keep_default_na=False)
    assert list(src["path"]) == list(df["path"])
    assert list(zip(src["source"], df["label"])) == ref
    # the images are the archive members, byte for byte (BMP converted to PNG, same pixels)
    for rel, member in zip(src["path"], src["source"]):
        data = (out / "private" / rel).read_bytes()
        if member.endswith(".bmp"):
            assert rel.endswith(".png")
            a = np.asarray(Image.open(io.BytesIO(members[member])).convert("RGB"))
            assert np.array_equal(np.asarray(Image.open(out / "private" / rel)), a)
        else:
            assert data == members[member]
    assert all(p.startswith("images/") for p in df["path"])


def test_unsafe_zip_member_refused(tmp_path, no_network):
    raw = tmp_path / "raw"
    raw.mkdir()
    make_facescrub_zip(raw / "facescrub-full.zip", extra={"actor_faces/x/../../../evil.jpg": b"x"})
    out = tmp_path / "ds" / "facescrub"
    with pytest.raises(P.UnsafeArchiveError, match=r"\.\."):
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, offline=True, lock_file=tmp_path / "l.yaml")
    _no_leftovers(out)
    assert not list(tmp_path.rglob("evil.jpg"))


# --------------------------------------------------------------------------------------
# CelebA
# --------------------------------------------------------------------------------------
def test_celeba_identity_selection_with_ties():
    chosen, info = P.select_celeba_identities(CELEBA_IDS, 3)
    assert chosen == [20, 30, 50]  # 10 has as many images as 30 and 50 but appears later
    assert info["cutoff_count"] == 3 and info["identities_at_cutoff"] == 3 and info["taken_at_cutoff"] == 2
    assert P.select_celeba_identities(CELEBA_IDS, 4)[0] == [20, 30, 50, 10]
    with pytest.raises(P.RawDataError):
        P.select_celeba_identities(CELEBA_IDS, 6)


def test_celeba_dataset(tmp_path, no_network):
    raw = tmp_path / "raw"
    crops = make_celeba(raw)
    md5 = hashlib.md5((raw / "identity_CelebA.txt").read_bytes()).hexdigest()
    lock = _write_lock(tmp_path / "lock.yaml", {"celeba/identity_CelebA.txt": {"md5": md5, "note": "n"}})
    out = tmp_path / "ds" / "celeba"
    P.prepare_dataset("celeba", raw_dir=raw, out_dir=out, n_classes=3, offline=True, lock_file=lock)
    df, meta = read_dataset(out / "private")
    assert meta["class_names"] == ["20", "30", "50"]
    expected = [(f"{i + 1:06d}.jpg", {20: 0, 30: 1, 50: 2}[ident])
                for i, ident in enumerate(CELEBA_IDS) if ident in (20, 30, 50)]
    assert len(df) == len(expected) == 10
    for (fn, label), (_, row) in zip(expected, df.iterrows()):
        assert row["label"] == label and row["identity"] == meta["class_names"][label]
        stored = fn.replace(".jpg", ".png") if fn == CELEBA_PNG_ONLY else fn
        assert row["path"] == f"images/{label:04d}/{stored}"
        assert (out / "private" / row["path"]).read_bytes() == crops[stored]
    _check_split(df)
    assert meta["selection"]["taken_at_cutoff"] == 2
    # the md5-only entry got its sha256 + size recorded, the note kept
    entry = P.load_lock(lock)["celeba/identity_CelebA.txt"]
    assert entry["sha256"] == _sha256(raw / "identity_CelebA.txt") and entry["md5"] == md5
    assert entry["note"] == "n" and "first use" in entry["recorded"]


# --------------------------------------------------------------------------------------
# Stanford Dogs
# --------------------------------------------------------------------------------------
def test_stanford_dogs_first_box_order_labels(tmp_path, no_network):
    raw = tmp_path / "raw"
    info = make_dogs(raw)
    out = tmp_path / "ds" / "dogs"
    # offline=False, but every file is in place: must not touch the network either
    P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=out, n_classes=3, offline=False,
                      lock_file=tmp_path / "lock.yaml", workers=2)
    df, meta = read_dataset(out / "private")
    assert meta["class_names"] == ["Chihuahua", "Japanese_spaniel", "Shih-Tzu"]
    assert meta["class_folders"] == DOG_CLASSES
    samples = DOG_TRAIN + DOG_TEST
    assert len(df) == len(samples)
    for (ann, lab), (_, row) in zip(samples, df.iterrows()):
        assert row["label"] == lab - 1
        assert row["path"] == f"images/{lab - 1:04d}/{ann.split('/')[1]}.png"
        img, box = info[ann]
        want = np.asarray(Image.open(io.BytesIO(img)).convert("RGB").crop(box))
        got = np.asarray(Image.open(out / "private" / row["path"]))
        assert got.shape == (box[3] - box[1], box[2] - box[0], 3)
        assert np.array_equal(got, want)
    _check_split(df)


def test_unsafe_tar_member_refused(tmp_path, no_network):
    raw = tmp_path / "raw"
    make_dogs(raw, lists_extra={"/abs/train_list.mat": b"x"})
    out = tmp_path / "ds" / "dogs"
    with pytest.raises(P.UnsafeArchiveError, match="absolute"):
        P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=out, offline=True, lock_file=tmp_path / "l.yaml")
    _no_leftovers(out)


# --------------------------------------------------------------------------------------
# verification, lock file, offline mode
# --------------------------------------------------------------------------------------
def test_checksum_mismatch_rejected(tmp_path, no_network):
    raw = tmp_path / "raw"
    raw.mkdir()
    make_facescrub_zip(raw / "facescrub-full.zip")
    lock = _write_lock(tmp_path / "lock.yaml", {"facescrub/facescrub-full.zip": {"sha256": "ab" * 32}})
    out = tmp_path / "ds" / "facescrub"
    with pytest.raises(ChecksumError) as e:
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, offline=True, lock_file=lock)
    msg = str(e.value)
    assert str(raw / "facescrub-full.zip") in msg and "ab" * 32 in msg
    assert _sha256(raw / "facescrub-full.zip") in msg
    _no_leftovers(out)
    assert P.load_lock(lock)["facescrub/facescrub-full.zip"] == {"sha256": "ab" * 32}  # not overwritten


def test_record_then_truncated_file_rejected(tmp_path, no_network):
    raw = tmp_path / "raw"
    make_dogs(raw)
    lock = _write_lock(tmp_path / "lock.yaml", {"stanford_dogs/images.tar": {"note": "keep me"}})
    P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=tmp_path / "a", offline=True, lock_file=lock)
    files = P.load_lock(lock)
    full = raw / "images.tar"
    good = _sha256(full)
    assert files["stanford_dogs/images.tar"]["sha256"] == good
    assert files["stanford_dogs/images.tar"]["size"] == full.stat().st_size
    assert files["stanford_dogs/images.tar"]["note"] == "keep me"
    assert set(files) == {f"stanford_dogs/{n}" for n in ("images.tar", "annotation.tar", "lists.tar")}
    assert lock.read_text().startswith("# Checksums")
    # a second run finds everything recorded and leaves the lock file alone
    before = lock.read_bytes()
    P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=tmp_path / "b", offline=True, lock_file=lock)
    assert lock.read_bytes() == before

    full.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    out = tmp_path / "c"
    with pytest.raises(ChecksumError) as e:
        P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=out, offline=True, lock_file=lock)
    msg = str(e.value)
    assert str(full) in msg and "truncated" in msg and good in msg and _sha256(full) in msg
    _no_leftovers(out)


def test_offline_missing_file_names_path_and_source(tmp_path, no_network):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "identity_CelebA.txt").write_text("000001.jpg 1\n")
    lock = ROOT / "data" / "checksums.lock.yaml"
    before = lock.read_bytes()
    with pytest.raises(P.OfflineMissingFileError) as e:
        P.prepare_dataset("celeba", raw_dir=raw, out_dir=tmp_path / "out", offline=True, lock_file=lock)
    msg = str(e.value)
    assert str(raw / "hdcrop.zip") in msg and P.CELEBA_HDCROP_GDRIVE_ID in msg
    assert "identity_CelebA.txt" not in msg.replace(str(lock), "")  # present files are not listed
    with pytest.raises(P.OfflineMissingFileError) as e:
        P.fetch_raw("stanford_dogs", tmp_path / "empty", offline=True, lock_file=lock)
    msg = str(e.value)
    for name in ("images.tar", "annotation.tar", "lists.tar"):
        assert str(tmp_path / "empty" / name) in msg and f"{P.STANFORD_DOGS_BASE_URL}/{name}" in msg
    assert "793579520" in msg  # the known size is shown
    assert lock.read_bytes() == before
    assert not (tmp_path / "out").exists()


def test_socket_guard_is_effective(tmp_path, no_network):
    # the harness of the offline tests: a download attempt really is stopped
    with pytest.raises(NetworkBlocked):
        P.fetch_raw("stanford_dogs", tmp_path / "raw", offline=False, lock_file=tmp_path / "l.yaml")


def test_committed_lock_file():
    files = P.load_lock(P.DEFAULT_LOCK_FILE)
    assert P.DEFAULT_LOCK_FILE == ROOT / "data" / "checksums.lock.yaml"
    assert files["celeba/identity_CelebA.txt"]["md5"] == P.CELEBA_IDENTITY_MD5
    assert files["stanford_dogs/lists.tar"]["sha256"] == P.STANFORD_DOGS_LISTS_SHA256
    for source in P.SOURCES:
        for rf in P.raw_files(source):
            assert f"{source}/{rf.name}" in files


# --------------------------------------------------------------------------------------
# downloads against a local server
# --------------------------------------------------------------------------------------


def _send(h, body: bytes, ctype="application/octet-stream", length: int | None = None, status=200, headers=()):
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body) if length is None else length))
    for k, v in headers:
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


class FakeKaggleApi:
    """Stands in for the official client (``kaggle.api.kaggle_api_extended.KaggleApi``) at
    the boundary ``atat.base.fetch.transports.kaggle_api``: the client talks RPC over HTTPS to
    api.kaggle.com, which cannot be imitated here.  It refuses a wrong ``KAGGLE_KEY`` the way
    the client does (``requests.HTTPError`` with the 401 response) and writes
    ``<slug>.zip`` into ``path``."""

    def __init__(self, blob, key=None):
        self.blob, self.key, self.calls = blob, key, []

    def __call__(self):  # the factory: one API object per download
        return self

    def dataset_download_files(self, dataset, path=None, force=False, quiet=True, unzip=False):
        self.calls.append({"dataset": dataset, "unzip": unzip})
        if self.key is not None and os.environ.get("KAGGLE_KEY") != self.key:
            resp = requests.Response()
            resp.status_code, resp.reason = 401, "Unauthorized"
            raise requests.HTTPError("401 Client Error: Unauthorized", response=resp)
        (Path(path) / f"{dataset.split('/')[1]}.zip").write_bytes(self.blob())


def test_kaggle_download_credentials_never_logged_or_written(tmp_path, monkeypatch, caplog):
    # Forwarding of the credentials on the client's redirect to the storage host is the
    # official client's business now (not testable without network, see atat.base.fetch.transports).
    src = tmp_path / "src"
    src.mkdir()
    make_facescrub_zip(src / "f.zip")
    blob = (src / "f.zip").read_bytes()
    user, key = "alice", "s3cr3t-kaggle-key-0123"
    good = "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()
    api = FakeKaggleApi(lambda: blob, key=key)
    monkeypatch.setattr(transports, "kaggle_api", api)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KAGGLE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("KAGGLE_USERNAME", user)
    monkeypatch.setenv("KAGGLE_KEY", "wrong-key-4567")
    raw, lock = tmp_path / "raw", tmp_path / "lock.yaml"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(P.DownloadError, match="kaggle.json") as e:
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=tmp_path / "x", lock_file=lock)
    assert "wrong-key-4567" not in str(e.value) and "401" in str(e.value)
    assert not list(raw.iterdir())  # no partial download left

    monkeypatch.setenv("KAGGLE_KEY", key)
    out = tmp_path / "ds" / "facescrub"
    P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, n_classes=6, lock_file=lock)
    assert (raw / "facescrub-full.zip").read_bytes() == blob
    assert not list(raw.glob(".*"))  # the client's temporary directory is gone
    # the archive itself: never extracted by the client (the builder's safe extraction reads it)
    assert api.calls[-1] == {"dataset": "rajnishe/facescrub-full", "unzip": False}
    entry = P.load_lock(lock)["facescrub/facescrub-full.zip"]
    assert entry["sha256"] == hashlib.sha256(blob).hexdigest() and "first download" in entry["recorded"]
    for secret in (key, good, good.split()[1]):
        assert secret not in caplog.text
        for f in [lock, *out.rglob("*"), *raw.rglob("*")]:
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f


def test_kaggle_without_credentials_stops_with_where_to_put_them(tmp_path, monkeypatch, capsys):
    # the real client: used as a library it refuses to run without credentials (exit(1));
    # that becomes one DownloadError naming kaggle.json and the dataset page; no socket opened
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("KAGGLE_CONFIG_DIR", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN",
                "KAGGLE_API_V1_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)

    def guard(*args, **kwargs):
        raise NetworkBlocked("network access attempted")

    raw = tmp_path / "raw"
    with monkeypatch.context() as m:
        for name in ("socket", "create_connection", "getaddrinfo"):
            m.setattr(socket, name, guard)
        with pytest.raises(P.DownloadError) as e:
            P.fetch_raw("facescrub", raw, lock_file=tmp_path / "lock.yaml")
    msg = str(e.value)
    assert "no Kaggle credentials" in msg and "kaggle.json" in msg
    assert str(raw / "facescrub-full.zip") in msg and "kaggle.com/datasets/rajnishe/facescrub-full" in msg
    assert not list(raw.iterdir())
    assert "Authentication required" not in capsys.readouterr().out  # the client's help is not printed


def test_a_complete_archive_with_the_wrong_layout_is_not_pinned(tmp_path, monkeypatch):
    # Issue 14.2: the first-use sha256 used to be recorded right after the integrity check,
    # so a complete zip of the wrong dataset was pinned and the right file refused forever.
    src = tmp_path / "src"
    src.mkdir()
    with zipfile.ZipFile(src / "wrong.zip", "w") as zf:  # a valid zip, not FaceScrub
        zf.writestr("images/a/1.jpg", _img_bytes(1, "JPEG"))
    make_facescrub_zip(src / "right.zip")
    served = {"blob": (src / "wrong.zip").read_bytes()}
    monkeypatch.setattr(transports, "kaggle_api", FakeKaggleApi(lambda: served["blob"]))
    raw, lock = tmp_path / "raw", tmp_path / "lock.yaml"
    _write_lock(lock, {"facescrub/facescrub-full.zip": {"note": "n"}})
    out = tmp_path / "ds" / "facescrub"
    with pytest.raises(P.RawDataError) as e:
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, n_classes=6, lock_file=lock)
    msg = str(e.value)
    assert f"Not recorded in {lock}: {raw / 'facescrub-full.zip'}" in msg and "delete it" in msg
    assert P.load_lock(lock)["facescrub/facescrub-full.zip"] == {"note": "n"}  # nothing pinned
    _no_leftovers(out)
    # the user deletes the wrong file as told; the next run downloads the right one
    (raw / "facescrub-full.zip").unlink()
    served["blob"] = (src / "right.zip").read_bytes()
    P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, n_classes=6, lock_file=lock)
    entry = P.load_lock(lock)["facescrub/facescrub-full.zip"]
    assert entry["sha256"] == hashlib.sha256(served["blob"]).hexdigest()
    assert "first download" in entry["recorded"] and entry["note"] == "n"


def test_a_wrong_file_placed_by_hand_is_not_pinned_either(tmp_path, no_network):
    raw = tmp_path / "raw"
    raw.mkdir()
    make_facescrub_zip(raw / "facescrub-full.zip")
    lock = tmp_path / "lock.yaml"
    with pytest.raises(P.RawDataError, match="n_classes|classes"):  # 6 classes, not 7
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=tmp_path / "x", n_classes=7,
                          offline=True, lock_file=lock)
    assert not lock.exists()
    P.prepare_dataset("facescrub", raw_dir=raw, out_dir=tmp_path / "x", n_classes=6,
                      offline=True, lock_file=lock)
    assert "first use" in P.load_lock(lock)["facescrub/facescrub-full.zip"]["recorded"]


GOOGLE_HOSTS = ("drive.google.com", "docs.google.com", "drive.usercontent.google.com")


@pytest.fixture
def google_at(monkeypatch):
    """Route requests for Google Drive's hosts to the local server, at the ``requests``
    adapter: gdown only treats ``drive.google.com`` URLs as Drive, and HTTPS to Google cannot
    be imitated locally.  gdown itself (page parsing, confirmation) runs unchanged."""
    import requests.adapters

    send = requests.adapters.HTTPAdapter.send

    def route(base):
        def routed(self, request, **kwargs):
            parts = urllib.parse.urlsplit(request.url)
            if parts.hostname in GOOGLE_HOSTS:
                request.url = f"{base}{parts.path}" + (f"?{parts.query}" if parts.query else "")
            return send(self, request, **kwargs)

        monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", routed)

    return route


def test_gdrive_confirm_flow_and_bad_download_deleted(tmp_path, server, google_at):
    src = tmp_path / "src"
    make_celeba(src)
    ident, hdcrop = (src / "identity_CelebA.txt").read_bytes(), (src / "hdcrop.zip").read_bytes()

    def attachment(name):
        return [("Content-Disposition", f'attachment; filename="{name}"')]

    def drive(h, q):
        if q.get("id") == P.CELEBA_IDENTITY_GDRIVE_ID:
            _send(h, ident, "text/plain", headers=attachment("identity_CelebA.txt"))
        elif q.get("id") == P.CELEBA_HDCROP_GDRIVE_ID and q.get("confirm") != "t":
            page = (f'<!DOCTYPE html><html><body><p>Google Drive can\'t scan this file for viruses.</p>'
                    f'<form id="download-form" action="https://drive.usercontent.google.com/download" method="get">'
                    f'<input type="submit" value="Download anyway"/>'
                    f'<input type="hidden" name="id" value="{q["id"]}">'
                    f'<input type="hidden" name="export" value="download">'
                    f'<input type="hidden" name="confirm" value="t">'
                    f'<input type="hidden" name="uuid" value="1234-abcd"></form></body></html>')
            _send(h, page.encode(), "text/html; charset=utf-8")
        elif q.get("id") == P.CELEBA_HDCROP_GDRIVE_ID and q.get("uuid") == "1234-abcd":
            _send(h, hdcrop, "application/zip", headers=attachment("hdcrop.zip"))
        else:
            _send(h, b"<html>no</html>", "text/html")

    server.routes = {"/uc": drive, "/download": drive}
    google_at(server.base)
    raw = tmp_path / "raw"
    lock = _write_lock(tmp_path / "lock.yaml", {"celeba/identity_CelebA.txt": {"md5": "0" * 32}})
    with pytest.raises(ChecksumError, match="0" * 32) as e:
        P.prepare_dataset("celeba", raw_dir=raw, out_dir=tmp_path / "x", n_classes=3, lock_file=lock)
    assert hashlib.md5(ident).hexdigest() in str(e.value)
    assert not (raw / "identity_CelebA.txt").exists() and not list(raw.glob(".*part"))

    _write_lock(lock, {"celeba/identity_CelebA.txt": {"md5": hashlib.md5(ident).hexdigest()}})
    out = tmp_path / "ds" / "celeba"
    server.requests.clear()
    P.prepare_dataset("celeba", raw_dir=raw, out_dir=out, n_classes=3, lock_file=lock)
    assert (raw / "hdcrop.zip").read_bytes() == hdcrop
    assert read_dataset(out / "private")[1]["counts"] == {"train": 7, "val": 2, "test": 1}
    assert len(server.requests) == 3  # identity file, hdcrop warning page, confirmed hdcrop


@pytest.mark.parametrize("page, message", [
    ('<p class="uc-error-subcaption">Too many users have viewed or downloaded this file recently.</p>',
     "quota exceeded"),
    ("<p>You need access</p>", "returned a web page instead of the file"),
])
def test_gdrive_page_instead_of_file_is_one_clear_error(tmp_path, server, google_at, page, message):
    server.routes = {"/uc": lambda h, q: _send(h, f"<html><body>\n{page}\n</body></html>".encode(),
                                              "text/html; charset=utf-8")}
    google_at(server.base)
    raw = tmp_path / "raw"
    with pytest.raises(P.DownloadError, match=message) as e:
        P.fetch_raw("celeba", raw, lock_file=tmp_path / "lock.yaml")
    assert str(raw / "identity_CelebA.txt") in str(e.value) and "by hand" in str(e.value)
    assert list(raw.iterdir()) == []


def test_http_progress_is_logged_in_lines(tmp_path, server, monkeypatch, caplog):
    src = tmp_path / "src"
    make_dogs(src)
    for name in ("images.tar", "annotation.tar", "lists.tar"):
        body = (src / name).read_bytes() + (b"\0" * (3 << 20) if name == "images.tar" else b"")
        server.routes[f"/dogs/{name}"] = (body, None)
    monkeypatch.setattr(stanford_dogs, "STANFORD_DOGS_BASE_URL", f"{server.base}/dogs")
    caplog.set_level(logging.INFO, logger="atat.base.fetch")
    P.fetch_raw("stanford_dogs", tmp_path / "raw", lock_file=tmp_path / "lock.yaml")
    lines = [r.getMessage() for r in caplog.records if "% of" in r.getMessage()]
    assert any("images.tar" in m and "100% of" in m for m in lines)
    assert len(lines) < 40 and not any("\r" in m for m in lines)  # lines, not a terminal bar


def test_truncated_download_rejected(tmp_path, server, monkeypatch):
    src = tmp_path / "src"
    make_dogs(src)
    body = (src / "images.tar").read_bytes()
    server.routes = {
        "/dogs/images.tar": lambda h, q: _send(h, body[:5000], "application/x-tar", length=len(body)),
    }
    monkeypatch.setattr(stanford_dogs, "STANFORD_DOGS_BASE_URL", f"{server.base}/dogs")
    raw, lock, out = tmp_path / "raw", tmp_path / "lock.yaml", tmp_path / "ds" / "dogs"
    with pytest.raises(P.DownloadError, match="truncated"):
        P.prepare_dataset("stanford_dogs", raw_dir=raw, out_dir=out, lock_file=lock)
    assert list(raw.iterdir()) == []
    assert not lock.exists()
    _no_leftovers(out)


# --------------------------------------------------------------------------------------
# Snakemake adapter
# --------------------------------------------------------------------------------------
def _run_adapter(script: str, sm: types.SimpleNamespace) -> None:
    root_logger = logging.getLogger()
    saved = (sys.stderr, root_logger.handlers[:], root_logger.level)
    try:
        runpy.run_path(str(ROOT / "workflow" / "scripts" / script),
                       init_globals={"snakemake": sm}, run_name="__main__")
    finally:
        if sys.stderr is not saved[0]:
            sys.stderr.close()
        sys.stderr = saved[0]
        root_logger.handlers[:] = saved[1]
        root_logger.setLevel(saved[2])


def test_adapter_script(tmp_path, no_network, monkeypatch):
    """The two adapters as the rules run them: fetch_dataset (login node) writes the record,
    prepare_dataset (compute node) builds from it and writes the dataset's stamp."""
    raw = tmp_path / "raw"
    make_dogs(raw)
    out = tmp_path / "ds" / "stanford_dogs"
    from snakemake.iocontainers import Namedlist

    lock, record = str(tmp_path / "lock.yaml"), tmp_path / "stanford_dogs.fetched.json"
    monkeypatch.syspath_prepend(str(ROOT / "workflow" / "scripts"))
    _run_adapter("fetch_dataset.py", types.SimpleNamespace(
        params=types.SimpleNamespace(source="stanford_dogs", raw_dir=str(raw), offline=True,
                                     lock_file=lock),
        output=[str(record)], log=[str(tmp_path / "fetch.log")], threads=1))
    assert json.loads(record.read_text())["source"] == "stanford_dogs"
    _run_adapter("prepare_dataset.py", types.SimpleNamespace(
        params=types.SimpleNamespace(source="stanford_dogs", raw_dir=str(raw), split_seed=42,
                                     n_classes=3, offline=True, lock_file=lock),
        input=Namedlist(fromdict={"fetched": str(record)}),
        output=Namedlist(fromdict={"folder": str(out), "stamp": str(out) + STAMP_SUFFIX}),
        log=[str(tmp_path / "prepare.log")], threads=1))
    df, meta = read_dataset(out / "private")
    assert len(df) == 7 and meta["n_classes"] == 3
    assert Path(str(out) + STAMP_SUFFIX).is_file()
    assert "verified" in (tmp_path / "fetch.log").read_text()


# --------------------------------------------------------------------------------------
# fetch on the login node, build on a compute node (rules fetch_dataset, prepare_dataset)
# --------------------------------------------------------------------------------------
def test_fetch_record_then_build_from_the_recorded_files(tmp_path, no_network):
    raw, lock = tmp_path / "raw", tmp_path / "lock.yaml"
    raw.mkdir()
    make_facescrub_zip(raw / "facescrub-full.zip")
    record = tmp_path / "facescrub.fetched.json"
    rec = P.fetch_raw_record("facescrub", raw, record, offline=True, lock_file=lock)
    blob = (raw / "facescrub-full.zip").read_bytes()
    entry = rec["files"]["facescrub-full.zip"]
    assert entry["sha256"] == hashlib.sha256(blob).hexdigest() and entry["size"] == len(blob)
    assert entry["unrecorded"]["downloaded"] is False  # placed by hand
    assert json.loads(record.read_text()) == rec
    assert not P.load_lock(lock)  # nothing recorded before a dataset is built from the file
    # the fetch job downloaded it (the record says so): the lock entry names the download
    rec["files"]["facescrub-full.zip"]["unrecorded"]["downloaded"] = True
    record.write_text(json.dumps(rec))
    out = tmp_path / "ds" / "facescrub"
    P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, n_classes=6, offline=True,
                      lock_file=lock, fetched=record)
    assert (out / "private" / "manifest.csv").is_file()
    assert "first download" in P.load_lock(lock)["facescrub/facescrub-full.zip"]["recorded"]


def test_build_refuses_a_raw_file_changed_after_the_fetch(tmp_path, no_network):
    raw, lock = tmp_path / "raw", tmp_path / "lock.yaml"
    raw.mkdir()
    make_facescrub_zip(raw / "facescrub-full.zip")
    record = tmp_path / "facescrub.fetched.json"
    P.fetch_raw_record("facescrub", raw, record, offline=True, lock_file=lock)
    make_facescrub_zip(raw / "facescrub-full.zip", extra={"actor_faces/Zed Extra/z_1.jpg":
                                                          _img_bytes(99, "JPEG")})
    out = tmp_path / "ds" / "facescrub"
    with pytest.raises(P.RawDataError, match=r"facescrub-full\.zip is not the file the fetch job"):
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, offline=True, lock_file=lock,
                          fetched=record)
    assert not out.exists() and not P.load_lock(lock)
    other = tmp_path / "celeba.fetched.json"
    other.write_text(json.dumps({"source": "celeba", "files": {}}))
    with pytest.raises(P.RawDataError, match="records source 'celeba', not 'facescrub'"):
        P.prepare_dataset("facescrub", raw_dir=raw, out_dir=out, offline=True, lock_file=lock,
                          fetched=other)
