"""Weight downloads: verified before use, offline mode never touches the network."""

import hashlib
import os
import pickle
import socket
import threading
from pathlib import Path

import pytest
import torch
import yaml

from atat.downloads import (LPIPS_VGG_CHANNELS, LPIPS_VGG_URL, WeightFileError,
                            check_facenet_state_dict, check_lpips_weights, fetch, fetch_weights,
                            torchvision_hash_prefix)
from atat.base.fetch import (DEFAULT_LOCK_FILE, ChecksumError, DownloadError, OfflineMissingFileError,
                        load_lock, sha256sum)
from atat.inversion.safe_pickle import UnsafePickleError, save_stylegan_pickle
from atat.inversion.stylegan2 import Generator


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_hash_prefix_of_torchvision_names():
    assert torchvision_hash_prefix("https://x/models/resnet18-f37072fd.pth") == "f37072fd"


def test_file_in_place_is_verified_and_used_offline(tmp_path, no_network):
    f = tmp_path / "w.pth"
    f.write_bytes(b"weights")
    prefix = sha256sum(f)[:8]
    assert fetch("https://example.invalid/w.pth", f, sha256_prefix=prefix, offline=True) == f


def test_corrupt_file_in_place_is_rejected_naming_both_hashes(tmp_path, no_network):
    f = tmp_path / "w.pth"
    f.write_bytes(b"corrupt")
    with pytest.raises(ChecksumError) as info:
        fetch("https://example.invalid/w.pth", f, sha256_prefix="f37072fd", offline=True)
    assert str(f) in str(info.value) and "f37072fd" in str(info.value)
    assert sha256sum(f) in str(info.value)


def test_truncated_file_is_rejected(tmp_path, no_network):
    f = tmp_path / "w.pth"
    f.write_bytes(b"abc")
    with pytest.raises(ChecksumError, match="truncated"):
        fetch("https://example.invalid/w.pth", f, size=10, offline=True)


def test_offline_missing_file_names_the_path(tmp_path, no_network):
    with pytest.raises(OfflineMissingFileError, match="place it at"):
        fetch("https://example.invalid/w.pth", tmp_path / "w.pth", offline=True)
    assert not (tmp_path / "w.pth").exists()


# --------------------------------------------------------------------------------------
# weights of the inversion stage: fetch_weights (lock file, content checks, atomic rename)
# --------------------------------------------------------------------------------------
KEY = "weights/stylegan2/tiny.pkl"


def _tiny_stylegan(path: Path) -> bytes:
    torch.manual_seed(0)
    G = Generator(z_dim=8, w_dim=8, img_resolution=8, mapping_kwargs=dict(num_layers=1),
                  synthesis_kwargs=dict(channel_base=64, channel_max=8))
    save_stylegan_pickle(path, G.eval().requires_grad_(False))
    return path.read_bytes()


@pytest.fixture(scope="module")
def stylegan_blob(tmp_path_factory):
    return _tiny_stylegan(tmp_path_factory.mktemp("sg") / "tiny.pkl")


def _lock(tmp_path, entry=None) -> Path:
    lock = tmp_path / "checksums.lock.yaml"
    files = {KEY: {"note": "kept", **(entry or {})}}
    lock.write_text(yaml.safe_dump({"version": 1, "files": files}))
    return lock


def _leftovers(d: Path, keep=()) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name not in keep) if d.exists() else []


def test_stylegan_download_verified_renamed_and_hash_recorded(tmp_path, server, stylegan_blob,
                                                               monkeypatch):
    server.routes["/ffhq.pkl"] = (stylegan_blob, None)
    url, dest, lock = f"{server.base}/ffhq.pkl", tmp_path / "w" / "tiny.pkl", _lock(tmp_path)
    assert fetch_weights("stylegan2", url, dest, key=KEY, lock_file=lock) == dest
    assert dest.read_bytes() == stylegan_blob
    assert _leftovers(dest.parent, keep={"tiny.pkl"}) == []  # no *.part left
    entry = load_lock(lock)[KEY]
    assert entry["sha256"] == hashlib.sha256(stylegan_blob).hexdigest()
    assert entry["size"] == len(stylegan_blob) and entry["url"] == url and entry["note"] == "kept"
    assert "first download" in entry["recorded"]

    # second use: verified against the recorded hash, no request, lock file untouched
    before, hits = lock.read_text(), len(server.requests)
    fetch_weights("stylegan2", url, dest, key=KEY, lock_file=lock)
    assert len(server.requests) == hits and lock.read_text() == before


def test_concurrent_downloads_of_one_file_are_safe(tmp_path, server, stylegan_blob):
    server.routes["/ffhq.pkl"] = (stylegan_blob, None)
    url, dest, lock = f"{server.base}/ffhq.pkl", tmp_path / "w" / "tiny.pkl", _lock(tmp_path)
    errors = []

    def job():
        try:
            fetch_weights("stylegan2", url, dest, key=KEY, lock_file=lock)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=job) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and dest.read_bytes() == stylegan_blob
    assert _leftovers(dest.parent, keep={"tiny.pkl"}) == []
    assert load_lock(lock)[KEY]["sha256"] == hashlib.sha256(stylegan_blob).hexdigest()


@pytest.mark.parametrize("served", ["other", "truncated"])
def test_checksum_mismatch_or_truncation_rejected_naming_both_hashes(tmp_path, server, stylegan_blob,
                                                                      served):
    good = hashlib.sha256(stylegan_blob).hexdigest()
    body = stylegan_blob[:-100] if served == "truncated" else stylegan_blob[:-1] + b"\x00"
    server.routes["/ffhq.pkl"] = (body, None)
    lock = _lock(tmp_path, {"sha256": good, "size": len(stylegan_blob)})
    before = lock.read_text()
    dest = tmp_path / "w" / "tiny.pkl"
    with pytest.raises(ChecksumError) as info:
        fetch_weights("stylegan2", f"{server.base}/ffhq.pkl", dest, key=KEY, lock_file=lock)
    msg = str(info.value)
    assert str(dest) in msg and good in msg and hashlib.sha256(body).hexdigest() in msg
    assert "nothing was kept" in msg
    assert ("truncated" in msg) == (served == "truncated")
    assert not dest.exists() and _leftovers(dest.parent) == []
    assert lock.read_text() == before


def test_transfer_shorter_than_content_length_rejected(tmp_path, server, stylegan_blob):
    server.routes["/ffhq.pkl"] = (stylegan_blob[:1000], len(stylegan_blob))
    lock, dest = _lock(tmp_path), tmp_path / "w" / "tiny.pkl"
    with pytest.raises(DownloadError):
        fetch_weights("stylegan2", f"{server.base}/ffhq.pkl", dest, key=KEY, lock_file=lock)
    assert not dest.exists() and _leftovers(dest.parent) == []
    assert "sha256" not in load_lock(lock)[KEY]


class _Reduce:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


@pytest.mark.parametrize("content", ["forbidden_global", "plain_dict", "truncated_pickle"])
def test_pickle_that_is_not_a_stylegan2_is_rejected(tmp_path, server, stylegan_blob, content):
    sentinel = tmp_path / "pwned"
    body = {
        "forbidden_global": pickle.dumps({"G_ema": _Reduce(os.system, (f"touch {sentinel}",))}),
        "plain_dict": pickle.dumps({"G_ema": {"weight": [1.0, 2.0]}}),
        "truncated_pickle": stylegan_blob[: len(stylegan_blob) // 2],  # no hash recorded yet
    }[content]
    server.routes["/ffhq.pkl"] = (body, None)
    lock, dest = _lock(tmp_path), tmp_path / "w" / "tiny.pkl"
    with pytest.raises(WeightFileError) as info:
        fetch_weights("stylegan2", f"{server.base}/ffhq.pkl", dest, key=KEY, lock_file=lock)
    assert str(dest) in str(info.value) and "StyleGAN2" in str(info.value)
    if content == "forbidden_global":
        assert UnsafePickleError.__name__ in str(info.value) and "system" in str(info.value)
    assert not sentinel.exists() and not dest.exists() and _leftovers(dest.parent) == []
    assert "sha256" not in load_lock(lock)[KEY]  # nothing recorded for a rejected file


def test_offline_missing_weight_file_names_path_and_opens_no_socket(tmp_path, no_network):
    lock, dest = _lock(tmp_path, {"sha256": "ab" * 32}), tmp_path / "w" / "tiny.pkl"
    with pytest.raises(OfflineMissingFileError) as info:
        fetch_weights("stylegan2", "https://example.invalid/ffhq.pkl", dest, key=KEY,
                      offline=True, lock_file=lock)
    msg = str(info.value)
    assert f"place it at {dest}" in msg and "https://example.invalid/ffhq.pkl" in msg
    assert "ab" * 32 in msg
    assert not dest.parent.exists()


def test_offline_file_placed_by_hand_is_checked_and_recorded(tmp_path, no_network, stylegan_blob):
    lock, dest = _lock(tmp_path), tmp_path / "w" / "tiny.pkl"
    dest.parent.mkdir()
    dest.write_bytes(stylegan_blob)
    fetch_weights("stylegan2", "https://example.invalid/ffhq.pkl", dest, key=KEY, offline=True,
                  lock_file=lock)
    entry = load_lock(lock)[KEY]
    assert entry["sha256"] == sha256sum(dest) and "first use" in entry["recorded"]

    dest.write_bytes(pickle.dumps({"not": "a generator"}))  # a wrong file placed by hand
    with pytest.raises(ChecksumError, match="Replace or delete"):
        fetch_weights("stylegan2", "https://example.invalid/ffhq.pkl", dest, key=KEY,
                      offline=True, lock_file=lock)
    assert dest.exists()  # a file placed by hand is reported, never deleted


def _lpips_state(channels=LPIPS_VGG_CHANNELS):
    return {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1) for k, c in enumerate(channels)}


def test_lpips_weights_checked_by_keys_and_shapes(tmp_path, no_network):
    good = tmp_path / "vgg.pth"
    torch.save(_lpips_state(), good)
    check_lpips_weights(good)
    bad_shape = tmp_path / "bad.pth"
    torch.save(_lpips_state((64, 128, 256, 512, 256)), bad_shape)
    with pytest.raises(WeightFileError, match="lin4.model.1.weight"):
        check_lpips_weights(bad_shape)
    renamed = tmp_path / "renamed.pth"
    torch.save({k.replace(".model.1", ""): v for k, v in _lpips_state().items()}, renamed)
    with pytest.raises(WeightFileError, match="keys"):
        check_lpips_weights(renamed)


def test_committed_lock_pins_the_lpips_file():
    # sha256 of lpips/weights/v0.1/vgg.pth (git blob 47e943cf, identical in the lpips 0.1.4 wheel)
    entry = load_lock(DEFAULT_LOCK_FILE)["weights/lpips/vgg_v0.1.pth"]
    assert entry["sha256"] == "a78928a0af1e5f0fcb1f3b9e8f8c3a2a5a3de244d830ad5c1feddc79b8432868"
    assert entry["size"] == 7289 and entry["url"] == LPIPS_VGG_URL


def test_facenet_state_dict_with_logits_head_loads_strictly(tmp_path, no_network):
    from facenet_pytorch.models.inception_resnet_v1 import InceptionResnetV1

    net = InceptionResnetV1(pretrained=None, classify=False)
    net.logits = torch.nn.Linear(512, 7)  # the published vggface2 file carries an 8631-way head
    state = net.state_dict()
    good = tmp_path / "facenet.pt"
    torch.save(state, good)
    assert check_facenet_state_dict(good) == 7
    del state["last_bn.running_mean"]
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    with pytest.raises(WeightFileError, match="last_bn.running_mean"):
        check_facenet_state_dict(bad)
    pickled = tmp_path / "module.pt"
    torch.save(net, pickled)  # a whole pickled module: refused by weights_only
    with pytest.raises(WeightFileError, match="InceptionResnetV1"):
        check_facenet_state_dict(pickled)


@pytest.mark.parametrize("how", ["fetch", "fetch_weights"])
def test_partial_downloads_of_killed_jobs_are_removed_young_ones_kept(tmp_path, server,
                                                                       stylegan_blob, how):
    import time

    server.routes["/f"] = (stylegan_blob, None)
    dest = tmp_path / "w" / "tiny.pkl"
    dest.parent.mkdir()
    stale, young = dest.parent / ".tiny.pkl.k1ll3d.part", dest.parent / ".tiny.pkl.4l1ve0.part"
    for f in (stale, young):
        f.write_bytes(b"\0" * 10)
    old = time.time() - 25 * 3600  # a day old: its job is long dead
    os.utime(stale, (old, old))
    if how == "fetch":
        fetch(f"{server.base}/f", dest, sha256=hashlib.sha256(stylegan_blob).hexdigest())
    else:
        fetch_weights("stylegan2", f"{server.base}/f", dest, key=KEY, lock_file=_lock(tmp_path))
    assert dest.read_bytes() == stylegan_blob
    assert not stale.exists() and young.exists()  # young: maybe another run's download
