"""Pretrained weights into the shared cache through the one fetch layer (:mod:`atat.base.fetch`):
torchvision ImageNet weights (:func:`fetch`, checked against the hash prefix in their name)
and the inversion stage's StyleGAN2-ADA pickles, FaceNet and LPIPS files
(:func:`fetch_weights`, checked against the lock file and *loaded* by a content check).
Files already in place (offline clusters) are verified and used without network."""

from __future__ import annotations

import logging
from pathlib import Path

from atat.base.fetch import (DEFAULT_LOCK_FILE, ChecksumError, OfflineMissingFileError, load_lock,
                        obtain, record_first_checksum, sha256sum)

log = logging.getLogger(__name__)

__all__ = ["ChecksumError", "OfflineMissingFileError", "WeightFileError", "fetch", "fetch_weights",
           "sha256sum", "torchvision_hash_prefix"]


def fetch(url: str, dest: str | Path, *, sha256: str | None = None,
          sha256_prefix: str | None = None, size: int | None = None,
          offline: bool = False) -> Path:
    """Download ``url`` to ``dest`` unless it is already there; verify either way. With
    ``offline`` the network is never used: a missing file is an error naming where to put it."""
    dest = Path(dest)
    if offline and not dest.is_file():
        raise OfflineMissingFileError(f"offline mode: {dest} is missing; download {url} on a "
                                      f"machine with internet and place it at {dest}")
    expected = {"sha256": sha256, "sha256_prefix": sha256_prefix, "size": size}
    obtain(dest, "http", url, url=url, expected=expected)
    return dest

def torchvision_hash_prefix(url: str) -> str:
    """torchvision weight files are named <arch>-<first hex digits of sha256>.pth."""
    stem = Path(url).name.rsplit(".", 1)[0]
    return stem.rsplit("-", 1)[-1]


# --------------------------------------------------------------------------------------
# Pretrained weights of the model-inversion stage (docs/sources.md#ppdg, #evaluation-model,
# #facenet-distance, #stylegan2-pickles): StyleGAN2-ADA pickles, FaceNet (facenet-pytorch) and the
# LPIPS linear layers.  Each file is checked against its entry in the committed lock file
# ``data/checksums.lock.yaml`` (key ``weights/<kind>/<file name>``, the path below
# ``resources_dir``) and then *loaded* by a content check before it may become the output; a file
# without a recorded sha256 gets its sha256 and size recorded at its first download (or first use
# when placed by hand).
# --------------------------------------------------------------------------------------

LPIPS_VGG_URL = "https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/v0.1/vgg.pth"
# lpips 0.1.4 (lpips/lpips.py): lin<k> = NetLinLayer = Sequential(Dropout, Conv2d(C_k, 1, 1, bias=False))
LPIPS_VGG_CHANNELS = (64, 128, 256, 512, 512)


class WeightFileError(RuntimeError):
    """A weight file has the right checksum (or none recorded) but unusable content."""


def check_stylegan_pickle(path: str | Path, key: str = "G_ema", *,
                          shown_as: str | Path | None = None) -> dict:
    """The file must be a StyleGAN2-ADA network pickle readable by the project's safe
    unpickler whose ``key`` network builds :class:`atat.inversion.stylegan2.Generator`
    with a strict state-dict load. Returns the generator's constructor kwargs."""
    from atat.inversion.safe_pickle import load_stylegan_pickle
    from atat.inversion.stylegan2 import Generator

    try:
        loaded = load_stylegan_pickle(path, key=key, advice="")  # the caller says what to do
        if loaded["class_name"] != "Generator":
            raise ValueError(f"{key!r} is a {loaded['class_name']!r}, not a Generator")
        Generator.from_init_kwargs_and_state(loaded["init_kwargs"], loaded["state_dict"], strict=True)
    except Exception as e:  # UnsafePickleError, truncated pickle, wrong layout, ...
        raise WeightFileError(f"{shown_as or path}: not a usable StyleGAN2-ADA network pickle "
                              f"({type(e).__name__}: {e})") from None
    return loaded["init_kwargs"]


def check_facenet_state_dict(path: str | Path, *, shown_as: str | Path | None = None) -> int | None:
    """The file must be a state dict (``torch.load(weights_only=True)``) that loads strictly
    into facenet-pytorch ``InceptionResnetV1(pretrained=None, classify=False)``.  The
    published files also hold the training head ``logits`` (vggface2: 8631 classes); as in
    facenet-pytorch's own ``load_weights`` that head is added before the strict load.
    Returns the number of classes of that head (None when absent)."""
    import torch
    from torch import nn

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ValueError("not a state dict of tensors")
        from facenet_pytorch.models.inception_resnet_v1 import InceptionResnetV1

        net = InceptionResnetV1(pretrained=None, classify=False)
        n_classes = None
        if "logits.weight" in state:
            n_classes, dim = state["logits.weight"].shape
            net.logits = nn.Linear(dim, n_classes)
        net.load_state_dict(state, strict=True)
    except Exception as e:
        raise WeightFileError(f"{shown_as or path}: not a facenet-pytorch InceptionResnetV1 state dict "
                              f"({type(e).__name__}: {e})") from None
    return n_classes


def check_lpips_weights(path: str | Path, *, shown_as: str | Path | None = None) -> None:
    """The file must be the LPIPS (v0.1, net 'vgg') linear-layer state dict: exactly
    ``lin{k}.model.1.weight`` of shape [1, C_k, 1, 1], C = 64, 128, 256, 512, 512, finite."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"a {type(state).__name__}, not a state dict")
        expected = {f"lin{k}.model.1.weight": (1, c, 1, 1) for k, c in enumerate(LPIPS_VGG_CHANNELS)}
        if set(state) != set(expected):
            raise ValueError(f"keys {sorted(state)}, expected {sorted(expected)}")
        for name, shape in expected.items():
            t = state[name]
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or not t.is_floating_point():
                raise ValueError(f"{name}: {getattr(t, 'shape', type(t).__name__)}, expected "
                                 f"a float tensor of shape {list(shape)}")
            if not torch.isfinite(t).all():
                raise ValueError(f"{name}: non-finite values")
    except Exception as e:
        raise WeightFileError(f"{shown_as or path}: not the LPIPS VGG linear-layer weights "
                              f"({type(e).__name__}: {e})") from None


WEIGHT_CHECKS = {
    "stylegan2": check_stylegan_pickle,
    "facenet": check_facenet_state_dict,
    "lpips": check_lpips_weights,
}


def fetch_weights(kind: str, url: str, dest: str | Path, *, key: str | None = None,
                  offline: bool = False, lock_file: str | Path | None = None) -> Path:
    """Make sure weight file ``dest`` of ``kind`` (``stylegan2``, ``facenet``, ``lpips``) is in
    place and verified; return its path.

    * ``dest`` present (e.g. placed by hand): checked against the lock entry ``key`` (default
      ``weights/<kind>/<file name>``) and by the content check; the network is never used.
    * missing and ``offline``: :class:`OfflineMissingFileError` naming the exact path to put
      it at, the URL and the expected hash; no socket is opened.
    * missing: downloaded to a temporary name next to ``dest``, checked there, renamed to
      ``dest`` only then (atomic, so concurrent jobs see the whole file or none).  A rejected
      download is deleted: nothing is left at ``dest``.

    A checksum mismatch raises :class:`ChecksumError` naming the file and both hashes; bad
    content :class:`WeightFileError`.  Without a sha256 in the lock file, the sha256 and size
    are recorded there (for review and commit).
    """

    if kind not in WEIGHT_CHECKS:
        raise ValueError(f"unknown weight kind {kind!r}; expected one of {sorted(WEIGHT_CHECKS)}")
    check = WEIGHT_CHECKS[kind]
    dest = Path(dest)
    key = key or f"weights/{kind}/{dest.name}"
    lock_file = Path(lock_file) if lock_file is not None else DEFAULT_LOCK_FILE
    expected = dict(load_lock(lock_file).get(key) or {})
    what = f"lock entry {key} in {lock_file}"
    if expected.get("url") and expected["url"] != url and expected.get("sha256"):
        what += f", recorded for {expected['url']} (the config now asks for {url})"
    known = ", ".join(f"{k} {expected[k]}" for k in ("size", "sha256") if expected.get(k))

    if offline and not dest.is_file():
        raise OfflineMissingFileError(
            f"offline mode: {dest} is missing. Download {url} on a machine with internet and "
            f"place it at {dest}" + (f" (expected {known})" if known else "")
            + f"; it is verified against {lock_file} before use.")
    actual, downloaded = obtain(dest, "http", url, url=url, expected=expected, what=what,
                                check=lambda path, shown: check(path, shown_as=shown),
                                content_errors=(WeightFileError,))
    if not expected.get("sha256"):
        record_first_checksum(lock_file, key, actual, url, downloaded, with_url=True)
    return dest
