"""Weight downloads: verified before use, offline mode never touches the network."""

import socket

import pytest

from atat.downloads import (ChecksumError, OfflineMissingFileError, fetch, sha256sum,
                            torchvision_hash_prefix)


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
