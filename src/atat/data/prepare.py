"""Download, verify and convert the three real datasets into the manifest format.

``prepare_dataset(source, raw_dir=..., out_dir=...)`` turns the published archives of
FaceScrub, CelebA (HD crops) or Stanford Dogs into a dataset root in the project's single
format (:mod:`atat.data.manifest`) at ``out_dir/private``.  Everything follows spec
``defenses.md`` §3:

FaceScrub (§3.1)
    Kaggle ``rajnishe/facescrub-full`` (``facescrub-full.zip``).  The authors extract it with
    :mod:`zipfile` and read it with two torchvision ``ImageFolder``\\ s, so the class names
    here are the folder names *exactly as* :mod:`zipfile` *decodes them* (UTF-8 when the
    member's UTF-8 flag is set, otherwise cp437 -- this is where the "mis-encoded" names come
    from, e.g. ``Jos├⌐`` for the UTF-8 bytes of ``José``); they are kept verbatim (always
    valid Unicode, so valid UTF-8 in the CSV).  Classes: ``actor_faces`` folders sorted, then
    ``actress_faces`` folders sorted (530 = 265 + 265); samples in ``ImageFolder`` order
    (classes in label order, inside a class ``sorted(os.walk(...))`` roots and sorted file
    names, files ending in a torchvision image extension).  Image files are written to
    ``images/<label:04d>/<k:05d>.<ext>`` (the original member names are listed in
    ``sources.csv``), so odd characters never reach a path; ``identity`` keeps the name.
CelebA (§3.2)
    ``identity_CelebA.txt`` (torchvision MD5) and ``hdcrop.zip`` from Google Drive.  All
    202,599 rows are counted per identity; identities are sorted by count, descending, with a
    *stable* sort over the order of first appearance; the first ``n_classes`` (1000) are kept
    (class index = rank; class name = the CelebA identity number).  Samples are the rows of
    those identities in file order (30,038 for the real file).  Images are
    ``hdcrop/<filename>`` from the zip, or ``<stem>.png`` when the ``.jpg`` is absent.
Stanford Dogs (§3.3)
    ``images.tar``, ``annotation.tar``, ``lists.tar``.  Samples = ``train_list.mat`` then
    ``test_list.mat`` (``annotation_list``; label = ``labels`` - 1); classes = the sorted
    folders of ``Images/`` (the ``ImageFolder`` classes), class name = folder name after the
    first ``-``.  Every image is converted to RGB, cropped to the **first** ``<object>``'s
    ``bndbox`` (xmin, ymin, xmax, ymax; ``PIL.Image.crop``) and saved losslessly as PNG.

The split is :func:`atat.data.manifest.split_indices` over that sample order (90/10, then
80/20, seed ``split_seed``) -- the same rule for all three.

Raw files
    live in ``raw_dir`` under their upstream names (:func:`raw_files`).  Each is verified
    against the committed lock file ``data/checksums.lock.yaml`` (keys ``<source>/<name>``;
    ``size``, ``sha256`` and/or ``md5`` -- whatever is known).  A file with no recorded
    ``sha256`` has its ``sha256`` and ``size`` *recorded* into the lock file after its first
    download (or first use, if it was placed by hand) -- only once the dataset built from it is
    complete, so an archive with the wrong content is never pinned -- atomically, for the user
    to review and commit.  A mismatch (wrong or truncated file) raises :class:`atat.downloads.ChecksumError`
    naming the file and both hashes.  Downloads go to a temporary name in ``raw_dir`` and are
    renamed only once verified.  Files already in place are used without any network access;
    with ``offline=True`` the network is never touched and missing files are reported with
    the exact path to place them at and where to get them.
Kaggle credentials
    ``KAGGLE_USERNAME``/``KAGGLE_KEY`` or ``kaggle.json`` in ``$KAGGLE_CONFIG_DIR``,
    ``~/.kaggle`` or ``~/.config/kaggle``; sent as HTTP basic auth to Kaggle only (never
    forwarded on the redirect to the storage host), never logged or written anywhere.  Without
    credentials the (public) download is tried anonymously.
Safety and atomicity
    Archives with absolute or ``..`` member names are refused as a whole.  Members are never
    extracted to archive-controlled paths: the needed images are streamed straight from the
    archive to ``images/<label>/...`` inside a temporary sibling of ``out_dir`` (so there is
    no intermediate extracted tree to hard-link from and no second copy on disk), and that
    directory is renamed to ``out_dir`` only when the dataset is complete and validated.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime as _dt
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from html.parser import HTMLParser
from http.cookiejar import CookieJar
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from atat.io import install_dir
from atat.data.manifest import split_indices, write_dataset
from atat.downloads import ChecksumError

log = logging.getLogger(__name__)

__all__ = [
    "ChecksumError",
    "DEFAULT_LOCK_FILE",
    "DownloadError",
    "MissingRawFileError",
    "RawDataError",
    "RawFile",
    "SOURCES",
    "UnsafeArchiveError",
    "build_celeba",
    "build_facescrub",
    "build_stanford_dogs",
    "fetch_raw",
    "kaggle_credentials",
    "load_lock",
    "prepare_dataset",
    "raw_files",
    "select_celeba_identities",
    "verify_file",
]

SOURCES = ("facescrub", "celeba", "stanford_dogs")
REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_LOCK_FILE = REPO_ROOT / "data" / "checksums.lock.yaml"
LOCK_VERSION = 1

# Upstream locations (module constants so that tests can point them at a local server).
KAGGLE_DATASET = "rajnishe/facescrub-full"
KAGGLE_DATASET_URL = f"https://www.kaggle.com/api/v1/datasets/download/{KAGGLE_DATASET}"
GDRIVE_DOWNLOAD_URL = "https://drive.usercontent.google.com/download"
CELEBA_IDENTITY_GDRIVE_ID = "1_ee_0u7vcNLOfNLegJRHmolfH5ICW-XS"
CELEBA_HDCROP_GDRIVE_ID = "1f7RPM9iQL_3OCbcByDqjuZQ-9Qs_M_1A"
STANFORD_DOGS_BASE_URL = "http://vision.stanford.edu/aditya86/ImageNetDogs"

# torchvision.datasets.folder.IMG_EXTENSIONS (torchvision 0.16, used by ImageFolder)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
KEEP_EXTENSIONS = (".jpg", ".jpeg", ".png")  # written as they are; others become PNG

# Facts of the real files, used as cross-checks when the verified upstream file is used.
CELEBA_IDENTITY_MD5 = "32bd1bd63d3c78cd57e08160ec5ed1e2"
CELEBA_EXPECTED = {"n_rows": 202_599, "n_identities": 10_177, 1000: 30_038}
STANFORD_DOGS_LISTS_SHA256 = "34b47cacd9a98b5d150e084f24d29391c084c55272295ec65c85651bc35f4d6c"
STANFORD_DOGS_EXPECTED = {"n_samples": 20_580, "n_classes": 120}

DEFAULT_N_CLASSES = {"facescrub": 530, "celeba": 1000, "stanford_dogs": 120}
CHUNK = 1 << 20
HTTP_TIMEOUT = 60

LOCK_HEADER = """\
# Checksums of the raw dataset files used by atat.data.prepare (rule prepare_dataset).
# Keys are <source>/<file name> in <resources_dir>/raw/<source>/.  Every hash or size given
# here is enforced: a mismatch stops the workflow and names the file and both hashes.
# Files without a sha256 get one recorded (sha256 + size + 'recorded') at their first
# download, or first use when placed by hand: review such changes and commit this file.
# This file is rewritten by the workflow; keep notes in 'note:' fields, not in comments.
"""


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
class RawDataError(ValueError):
    """A raw file or archive does not have the expected content or layout."""


class UnsafeArchiveError(RawDataError):
    """An archive has a member with an absolute path or a '..' component."""


class DownloadError(RuntimeError):
    """A download failed (HTTP error, truncated transfer, unexpected web page)."""


class MissingRawFileError(FileNotFoundError):
    """Offline mode and a raw file is not in place (message: where to put it, where to get it)."""


# --------------------------------------------------------------------------------------
# raw files
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RawFile:
    """One raw file of a source: its name in ``raw_dir`` and how to obtain it."""

    name: str
    url: str  # what a person opens to get it (also the download URL for http/kaggle)
    kind: str  # "zip" | "tar" | "text": checked before a new checksum is recorded
    fetcher: str  # "http" | "kaggle" | "gdrive"
    gdrive_id: str | None = None
    how: str = ""  # hint for placing it by hand


def raw_files(source: str) -> list[RawFile]:
    """The raw files ``source`` needs (read at call time, so the URL constants can be patched)."""
    if source == "facescrub":
        return [RawFile(
            "facescrub-full.zip", KAGGLE_DATASET_URL, "zip", "kaggle",
            how=(f"Kaggle dataset {KAGGLE_DATASET} (https://www.kaggle.com/datasets/{KAGGLE_DATASET}); "
                 f"e.g. `curl -L -o facescrub-full.zip {KAGGLE_DATASET_URL}` or "
                 f"`kaggle datasets download {KAGGLE_DATASET}` (may need a Kaggle account)"),
        )]
    if source == "celeba":
        return [
            RawFile("identity_CelebA.txt", f"https://drive.google.com/file/d/{CELEBA_IDENTITY_GDRIVE_ID}/view",
                    "text", "gdrive", CELEBA_IDENTITY_GDRIVE_ID,
                    how="official CelebA Google Drive (Anno/identity_CelebA.txt); e.g. "
                        f"`gdown {CELEBA_IDENTITY_GDRIVE_ID}`"),
            RawFile("hdcrop.zip", f"https://drive.google.com/file/d/{CELEBA_HDCROP_GDRIVE_ID}/view",
                    "zip", "gdrive", CELEBA_HDCROP_GDRIVE_ID,
                    how=f"the authors' HD crops; e.g. `gdown {CELEBA_HDCROP_GDRIVE_ID}`"),
        ]
    if source == "stanford_dogs":
        return [RawFile(n, f"{STANFORD_DOGS_BASE_URL}/{n}", "tar", "http",
                        how=f"`wget {STANFORD_DOGS_BASE_URL}/{n}`")
                for n in ("images.tar", "annotation.tar", "lists.tar")]
    raise ValueError(f"unknown dataset source {source!r}; expected one of {SOURCES}")


# --------------------------------------------------------------------------------------
# lock file
# --------------------------------------------------------------------------------------
def load_lock(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The ``files`` mapping of the lock file (empty if the file does not exist)."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise RawDataError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("files", {}) or {}, dict):
        raise RawDataError(f"{path}: expected a mapping with a 'files' mapping")
    if data.get("version", LOCK_VERSION) != LOCK_VERSION:
        raise RawDataError(f"{path}: unsupported lock file version {data.get('version')!r}")
    files = data.get("files") or {}
    for key, entry in files.items():
        if entry is None:
            files[key] = {}
        elif not isinstance(entry, dict):
            raise RawDataError(f"{path}: entry {key!r} must be a mapping")
    return files


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """Exclusive advisory lock on a directory (serialises lock-file updates of parallel jobs)."""
    fd = None
    try:
        import fcntl

        fd = os.open(directory, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError) as e:  # e.g. some network file systems
        log.warning("could not lock %s (%s); updating the lock file without a lock", directory, e)
        if fd is not None:
            os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the flock


def _record_in_lock(lock_file: Path, key: str, fields: Mapping[str, Any]) -> None:
    """Add ``fields`` to entry ``key`` of the lock file (re-read under a lock, atomic replace)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with _dir_lock(lock_file.parent):
        files = load_lock(lock_file)
        entry = dict(files.get(key) or {})
        if entry.get("sha256") and entry["sha256"] != fields.get("sha256"):
            raise ChecksumError(
                f"{lock_file}: {key} was recorded meanwhile with sha256 {entry['sha256']}, "
                f"but this file has sha256 {fields.get('sha256')}")
        entry.update(fields)
        files[key] = entry
        text = LOCK_HEADER + yaml.safe_dump({"version": LOCK_VERSION, "files": files},
                                            sort_keys=True, default_flow_style=False, width=100)
        fd, tmp = tempfile.mkstemp(prefix=f".{lock_file.name}.", suffix=".tmp", dir=lock_file.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            if lock_file.exists():
                os.chmod(tmp, lock_file.stat().st_mode & 0o777)
            else:
                os.chmod(tmp, 0o644)
            os.replace(tmp, lock_file)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def record_first_checksum(lock_file, key: str, actual: dict, url: str, downloaded: bool,
                          with_url: bool = False) -> None:
    """Record the sha256/size of a file seen for the first time (no published checksum) in
    the lock file, for the user to review and commit; a read-only lock file only warns."""
    origin = f"first download from {url}" if downloaded else "first use of the file found in place"
    fields = {"sha256": actual["sha256"], "size": actual["size"],
              **({"url": url} if with_url else {}), "recorded": f"{_now()} {origin}"}
    try:
        _record_in_lock(lock_file, key, fields)
        log.warning("recorded sha256 %s, size %d for %s in %s -- please review and commit",
                    actual["sha256"], actual["size"], key, lock_file)
    except OSError as e:
        log.warning("could not record the checksum of %s in %s (%s): sha256 %s, size %d",
                    key, lock_file, e, actual["sha256"], actual["size"])


# --------------------------------------------------------------------------------------
# verification
# --------------------------------------------------------------------------------------
def _hashes(path: Path) -> dict[str, Any]:
    sha, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            sha.update(block)
            md5.update(block)
            size += len(block)
    return {"sha256": sha.hexdigest(), "md5": md5.hexdigest(), "size": size}


def verify_file(path: str | os.PathLike[str], expected: Mapping[str, Any], *, what: str | None = None,
                shown_as: str | os.PathLike[str] | None = None) -> dict:
    """Check ``path`` against ``expected`` (any of ``size``, ``sha256``, ``md5``).

    Returns the actual ``{"sha256", "md5", "size"}``.  Raises
    :class:`~atat.downloads.ChecksumError` naming the file, the expected and the actual
    hashes (and sizes) on any mismatch; ``shown_as`` names the file in the message instead
    of ``path`` (a download is verified under its temporary name).
    """
    path = Path(path)
    actual = _hashes(path)
    problems = []
    if expected.get("size") is not None and int(expected["size"]) != actual["size"]:
        short = actual["size"] < int(expected["size"])
        problems.append(f"size {actual['size']} bytes, expected {int(expected['size'])} "
                        f"({'truncated' if short else 'too long'} or wrong file)")
    hash_problem = False
    for algo in ("sha256", "md5"):
        exp = expected.get(algo)
        if exp and str(exp).lower() != actual[algo]:
            problems.append(f"{algo} {actual[algo]} does not match the expected {str(exp).lower()}")
            hash_problem = True
    if problems:
        if not hash_problem:  # name both hashes even when only the size gave it away
            known = [a for a in ("sha256", "md5") if expected.get(a)]
            problems.append("; ".join(f"{a} {actual[a]}, expected {str(expected[a]).lower()}" for a in known)
                            or f"sha256 {actual['sha256']} (no hash recorded)")
        raise ChecksumError(f"{shown_as or path}{f' ({what})' if what else ''}: " + "; ".join(problems))
    return actual


def _check_kind(path: Path, kind: str, shown_as: Path | None = None) -> None:
    """Refuse obviously wrong content (an HTML error page, a truncated archive)."""
    name = shown_as or path
    if kind == "zip":
        if not zipfile.is_zipfile(path):
            raise RawDataError(f"{name}: not a (complete) zip archive -- truncated, or an error page?")
    elif kind == "tar":
        try:
            with tarfile.open(path, "r:*") as tf:
                tf.getmembers()
        except (tarfile.TarError, EOFError, OSError) as e:
            raise RawDataError(f"{name}: not a (complete) tar archive ({e})") from None
    elif kind == "text":
        with open(path, "rb") as f:
            head = f.read(4096).lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html")):
            raise RawDataError(f"{name}: is an HTML page, not the expected text file")


# --------------------------------------------------------------------------------------
# downloads
# --------------------------------------------------------------------------------------
def kaggle_credentials() -> tuple[str, str] | None:
    """``(username, key)`` from ``KAGGLE_USERNAME``/``KAGGLE_KEY`` or a ``kaggle.json``; else None.

    Looks in ``$KAGGLE_CONFIG_DIR``, ``~/.kaggle`` and ``$XDG_CONFIG_HOME/kaggle``
    (``~/.config/kaggle``).  The values are never logged.
    """
    user, key = os.environ.get("KAGGLE_USERNAME"), os.environ.get("KAGGLE_KEY")
    if user and key:
        return user, key
    dirs = []
    if os.environ.get("KAGGLE_CONFIG_DIR"):
        dirs.append(Path(os.environ["KAGGLE_CONFIG_DIR"]))
    home = Path(os.path.expanduser("~"))
    dirs.append(home / ".kaggle")
    dirs.append(Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "kaggle")
    for d in dirs:
        f = d / "kaggle.json"
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise DownloadError(f"{f}: cannot read Kaggle credentials ({type(e).__name__})") from None
            if isinstance(data, dict) and data.get("username") and data.get("key"):
                return str(data["username"]), str(data["key"])
            raise DownloadError(f"{f}: needs the keys 'username' and 'key'")
    return None


def _stream_to(resp: Any, fh: Any, what: str) -> int:
    """Copy an HTTP response body to ``fh``; check the transfer against Content-Length."""
    total = resp.headers.get("Content-Length")
    total = int(total) if total and total.isdigit() and not resp.headers.get("Content-Encoding") else None
    n, next_report = 0, 0.1
    try:
        while True:
            block = resp.read(CHUNK)
            if not block:
                break
            fh.write(block)
            n += len(block)
            if total and n / total >= next_report:
                log.info("%s: %d%% of %d bytes", what, int(100 * n / total), total)
                next_report += 0.1
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DownloadError(f"{what}: transfer interrupted after {n} bytes ({type(e).__name__}: {e})") from None
    except Exception as e:  # http.client.IncompleteRead and friends
        raise DownloadError(f"{what}: transfer interrupted after {n} bytes ({type(e).__name__})") from None
    if total is not None and n != total:
        raise DownloadError(f"{what}: truncated download, got {n} of {total} bytes")
    return n


def _open(opener: urllib.request.OpenerDirector, req: urllib.request.Request | str, what: str) -> Any:
    try:
        return opener.open(req, timeout=HTTP_TIMEOUT)
    except urllib.error.HTTPError as e:
        e.close()
        raise DownloadError(f"{what}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DownloadError(f"{what}: cannot connect ({reason})") from None


def _download_http(url: str, fh: Any, what: str) -> None:
    opener = urllib.request.build_opener()
    with _open(opener, url, what) as resp:
        _stream_to(resp, fh, what)


def _download_kaggle(url: str, fh: Any, what: str) -> None:
    req = urllib.request.Request(url)
    creds = kaggle_credentials()
    if creds is not None:
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")
        # unredirected: the credentials go to Kaggle only, never to the storage host
        req.add_unredirected_header("Authorization", f"Basic {token}")
        del token
    else:
        log.info("no Kaggle credentials found; trying the public download anonymously")
    opener = urllib.request.build_opener()
    try:
        resp = _open(opener, req, what)
    except DownloadError as e:
        if re.search(r"HTTP (401|403)", str(e)):
            raise DownloadError(
                f"{e}. Kaggle refused the download: put an API token in ~/.kaggle/kaggle.json "
                "(or $KAGGLE_CONFIG_DIR/kaggle.json, or set KAGGLE_USERNAME and KAGGLE_KEY) and accept "
                f"the dataset's terms on https://www.kaggle.com/datasets/{KAGGLE_DATASET}") from None
        raise
    with resp:
        _stream_to(resp, fh, what)


class _DriveFormParser(HTMLParser):
    """Collects the action and hidden inputs of Google Drive's 'download anyway' form."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.inputs: list[tuple[str, str]] = []
        self._in_form = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        if tag == "form" and (a.get("id") == "download-form" or "download" in a.get("action", "")):
            self._in_form, self.action = True, a.get("action") or ""
        elif tag == "input" and self._in_form and a.get("name") and a.get("type", "hidden") == "hidden":
            self.inputs.append((a["name"], a.get("value", "")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False


def _gdrive_next_url(page: str, url: str, jar: CookieJar) -> str | None:
    """URL that confirms a large-file download, from Drive's warning page (None if none)."""
    p = _DriveFormParser()
    p.feed(page)
    if p.action is not None and p.inputs:
        action = urllib.parse.urljoin(url, p.action)
        return f"{action}?{urllib.parse.urlencode(p.inputs)}"
    token = None
    m = re.search(r"confirm=([0-9A-Za-z_-]+)", page)
    if m:
        token = m.group(1)
    else:
        for c in jar:
            if c.name.startswith("download_warning"):
                token = c.value
    if token:
        parts = urllib.parse.urlsplit(url)
        q = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "confirm"] + [("confirm", token)]
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(q)))
    return None


def _download_gdrive(file_id: str, fh: Any, what: str) -> None:
    """Google Drive download incl. the 'file too large to scan' confirmation page."""
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    url = f"{GDRIVE_DOWNLOAD_URL}?{urllib.parse.urlencode({'id': file_id, 'export': 'download'})}"
    for _ in range(4):
        with _open(opener, url, what) as resp:
            if resp.headers.get_content_type() != "text/html":
                _stream_to(resp, fh, what)
                return
            page = resp.read(4 << 20).decode("utf-8", "replace")
        nxt = _gdrive_next_url(page, url, jar)
        if nxt is None:
            if re.search(r"quota exceeded|too many users have viewed or downloaded", page, re.I):
                raise DownloadError(f"{what}: Google Drive download quota exceeded for this file; "
                                    "try again later or place the file by hand")
            raise DownloadError(f"{what}: Google Drive returned a web page instead of the file "
                                "(no access, or the page format changed); place the file by hand")
        url = nxt
    raise DownloadError(f"{what}: Google Drive kept asking for confirmation")


def _download(rf: RawFile, dest: Path) -> Path:
    """Download ``rf`` to a temporary file next to ``dest``; return its path (to be verified)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{dest.name}.*.part"):
        with contextlib.suppress(OSError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    what = f"{rf.url} -> {dest}"
    try:
        with os.fdopen(fd, "wb") as fh:
            log.info("downloading %s", what)
            if rf.fetcher == "kaggle":
                _download_kaggle(rf.url, fh, what)
            elif rf.fetcher == "gdrive":
                _download_gdrive(str(rf.gdrive_id), fh, what)
            else:
                _download_http(rf.url, fh, what)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def fetch_raw(source: str, raw_dir: str | os.PathLike[str], offline: bool = False, *,
              lock_file: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Make sure every raw file of ``source`` is in ``raw_dir`` and verified.

    Files already present are verified and used without network access.  Missing files are
    downloaded (to a temporary name, verified, then renamed) unless ``offline``, in which
    case :class:`MissingRawFileError` lists every missing path and where to get the file.
    Returns ``{name: {"path", "sha256", "md5", "size", "unrecorded"}}``; ``unrecorded`` is
    None when the lock file has the file's sha256, else what :func:`record_first_checksum`
    needs -- nothing is written to the lock file here: :func:`prepare_dataset` records a new
    file only once the dataset built from it is complete (a complete archive with the wrong
    content must not be pinned).
    """
    raw_dir = Path(raw_dir)
    lock_file = Path(lock_file) if lock_file is not None else DEFAULT_LOCK_FILE
    files = raw_files(source)
    lock = load_lock(lock_file)
    missing = [rf for rf in files if not (raw_dir / rf.name).is_file()]
    if offline and missing:
        lines = []
        for rf in missing:
            exp = lock.get(f"{source}/{rf.name}") or {}
            known = ", ".join(f"{k} {exp[k]}" for k in ("size", "sha256", "md5") if exp.get(k))
            lines.append(f"  {raw_dir / rf.name}\n      from {rf.url}\n      ({rf.how})"
                         + (f"\n      expected {known}" if known else ""))
        raise MissingRawFileError(
            f"offline mode: {len(missing)} raw file(s) of {source} missing. Place them by hand at:\n"
            + "\n".join(lines)
            + f"\nThey are verified against {lock_file} before use.")
    out: dict[str, dict[str, Any]] = {}
    for rf in files:
        dest = raw_dir / rf.name
        key = f"{source}/{rf.name}"
        expected = dict(lock.get(key) or {})
        downloaded = not dest.is_file()
        src = _download(rf, dest) if downloaded else dest
        try:
            actual = verify_file(src, expected, what=f"lock entry {key} in {lock_file}", shown_as=dest)
            _check_kind(src, rf.kind, shown_as=dest)
            if downloaded:  # verified under the temporary name, only now visible as dest
                os.replace(src, dest)
        except (ChecksumError, RawDataError) as e:
            if downloaded:
                raise type(e)(f"download from {rf.url} rejected: {e} (nothing was kept)") from None
            raise type(e)(f"{e}. Replace or delete the file (it is then downloaded again unless offline).") from None
        finally:
            if downloaded and src.exists():
                src.unlink()
        unrecorded = None if expected.get("sha256") else {"key": key, "url": rf.url,
                                                           "downloaded": downloaded}
        log.info("verified %s (sha256 %s, %d bytes)", dest, actual["sha256"], actual["size"])
        out[rf.name] = {"path": dest, **actual, "unrecorded": unrecorded}
    return out


def _record_new_files(lock_file: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the sha256/size of the raw files the lock file did not know (after the build)."""
    for info in files.values():
        new = info.get("unrecorded")
        if new:
            record_first_checksum(lock_file, new["key"], info, new["url"], new["downloaded"])


# --------------------------------------------------------------------------------------
# archives
# --------------------------------------------------------------------------------------
def _expect(condition: bool, message: str) -> None:
    """Cross-check against the published facts of a verified upstream file."""
    if not condition:
        raise RawDataError(f"cross-check failed (a bug, or a different upstream file): {message}")


def _member_parts(name: str, archive: Path) -> tuple[str, ...]:
    """Normalised path components of an archive member; refuse unsafe names."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: refusing archive with absolute member path {name!r}")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts or any(".." in p.split("\\") for p in parts):
        raise UnsafeArchiveError(f"{archive}: refusing archive with '..' in member path {name!r}")
    return parts


def _zip_infos(zf: zipfile.ZipFile, archive: Path) -> list[tuple[tuple[str, ...], zipfile.ZipInfo]]:
    out = []
    for info in zf.infolist():
        parts = _member_parts(info.filename, archive)
        if parts and parts[0] != "__MACOSX":
            out.append((parts, info))
    return out


def _tar_members(tf: tarfile.TarFile, archive: Path) -> list[tuple[tuple[str, ...], tarfile.TarInfo]]:
    out = []
    for m in tf.getmembers():
        parts = _member_parts(m.name, archive)  # links are never followed: only regular files are read
        if parts:
            out.append((parts, m))
    return out


def _copy_member(src: io.BufferedIOBase, dest: Path) -> None:
    with open(dest, "wb") as f:
        shutil.copyfileobj(src, f, CHUNK)


def _check_image(path: Path, what: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.size  # header only
    except (UnidentifiedImageError, OSError) as e:
        raise RawDataError(f"{what}: not a readable image ({e})") from None


def _write_image_member(read: Callable[[], io.BufferedIOBase], dest_stem: Path, name: str, what: str) -> str:
    """Write an image member as ``dest_stem + ext`` (converted to PNG if not jpg/png); return the suffix."""
    ext = PurePosixPath(name).suffix.lower()
    if ext in KEEP_EXTENSIONS:
        dest = dest_stem.with_name(dest_stem.name + ext)
        with read() as src:
            _copy_member(src, dest)
        _check_image(dest, what)
        return ext
    from PIL import Image

    dest = dest_stem.with_name(dest_stem.name + ".png")
    with read() as src:
        data = src.read()
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.convert("RGB").save(dest, format="PNG")
    except OSError as e:
        raise RawDataError(f"{what}: not a readable image ({e})") from None
    return ".png"


# --------------------------------------------------------------------------------------
# FaceScrub
# --------------------------------------------------------------------------------------
def _find_root(infos: Sequence[tuple[tuple[str, ...], Any]], folder: str, archive: Path) -> tuple[str, ...]:
    roots = set()
    for parts, info in infos:
        is_dir = info.is_dir() if hasattr(info, "is_dir") else info.isdir()
        comps = parts if is_dir else parts[:-1]
        if folder in comps:
            roots.add(comps[: comps.index(folder) + 1])
    if len(roots) != 1:
        raise RawDataError(f"{archive}: expected exactly one '{folder}/' folder, found "
                           f"{sorted('/'.join(r) for r in roots) or 'none'}")
    return roots.pop()


def _image_folder(infos: Sequence[tuple[tuple[str, ...], zipfile.ZipInfo]], root: tuple[str, ...],
                  archive: Path) -> list[tuple[str, list[zipfile.ZipInfo]]]:
    """torchvision ImageFolder over the extracted ``root``: [(class, [members in order])]."""
    n = len(root)
    classes: dict[str, list[tuple[str, str, zipfile.ZipInfo]]] = {}
    for parts, info in infos:
        if parts[:n] != root or len(parts) <= n:
            continue
        rel = parts[n:]
        if info.is_dir():
            classes.setdefault(rel[0], [])
            continue
        if len(rel) < 2:  # a file directly in actor_faces/: not a class, ImageFolder ignores it
            continue
        files = classes.setdefault(rel[0], [])
        if rel[-1].lower().endswith(IMG_EXTENSIONS):
            files.append(("/".join(rel[:-1]), rel[-1], info))
    out = []
    for cls in sorted(classes):  # ImageFolder.find_classes: sorted(scandir names)
        # make_dataset: for root, _, fnames in sorted(os.walk(class_dir)): for f in sorted(fnames)
        members = [info for _, _, info in sorted(classes[cls], key=lambda t: (t[0], t[1]))]
        if not members:
            raise RawDataError(f"{archive}: class folder {'/'.join(root + (cls,))!r} holds no image file "
                               f"(extensions {', '.join(IMG_EXTENSIONS)}); torchvision's ImageFolder refuses this")
        out.append((cls, members))
    return out


def build_facescrub(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                    workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the FaceScrub images under ``root/images``; return (samples, class_names, info)."""
    archive = Path(raw["facescrub-full.zip"]["path"])
    with zipfile.ZipFile(archive) as zf:
        infos = _zip_infos(zf, archive)
        groups = [("actor_faces", _image_folder(infos, _find_root(infos, "actor_faces", archive), archive)),
                  ("actress_faces", _image_folder(infos, _find_root(infos, "actress_faces", archive), archive))]
        class_names = [cls for _, folder in groups for cls, _ in folder]
        if n_classes is not None and len(class_names) != int(n_classes):
            raise RawDataError(f"{archive}: found {len(class_names)} classes "
                               f"({len(groups[0][1])} actors + {len(groups[1][1])} actresses), "
                               f"expected n_classes={n_classes}")
        dup = [c for c, k in Counter(class_names).items() if k > 1]
        if dup:
            raise RawDataError(f"{archive}: folder name(s) {dup} occur among both actors and actresses")
        samples: list[tuple[str, int]] = []
        sources: list[tuple[str, str]] = []
        label = 0
        for _, folder in groups:
            for _cls, members in folder:
                d = root / "images" / f"{label:04d}"
                d.mkdir(parents=True)
                for k, info in enumerate(members):
                    ext = _write_image_member(lambda info=info: zf.open(info), d / f"{k:05d}", info.filename,
                                              f"{archive}:{info.filename}")
                    rel = f"images/{label:04d}/{k:05d}{ext}"
                    samples.append((rel, label))
                    sources.append((rel, info.filename))
                label += 1
    _write_sources(root, sources)
    info = {
        "origin": f"Kaggle {KAGGLE_DATASET} (spec defenses.md §3.1)",
        "n_actors": len(groups[0][1]),
        "n_actresses": len(groups[1][1]),
        "class_order": "actor_faces folders sorted, then actress_faces folders sorted (names as zipfile decodes them)",
        "sample_order": "torchvision ImageFolder order over actor_faces, then actress_faces",
        "sources_file": "sources.csv",
    }
    return samples, class_names, info


def _write_sources(root: Path, rows: Sequence[tuple[str, str]]) -> None:
    with open(root / "sources.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["path", "source"])
        w.writerows(rows)


# --------------------------------------------------------------------------------------
# CelebA
# --------------------------------------------------------------------------------------
def _read_identity_file(path: Path) -> list[tuple[str, int]]:
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            tok = line.split()
            if not tok:
                continue
            if len(tok) != 2:
                raise RawDataError(f"{path}:{i}: expected '<filename> <identity>', got {line.strip()!r}")
            try:
                ident = int(tok[1])
            except ValueError:
                raise RawDataError(f"{path}:{i}: identity {tok[1]!r} is not an integer") from None
            if tok[0] in seen:
                raise RawDataError(f"{path}:{i}: duplicated file name {tok[0]!r}")
            if not re.fullmatch(r"[A-Za-z0-9._-]+", tok[0]) or tok[0].startswith("."):
                raise RawDataError(f"{path}:{i}: unexpected file name {tok[0]!r}")
            seen.add(tok[0])
            rows.append((tok[0], ident))
    if not rows:
        raise RawDataError(f"{path}: no rows")
    return rows


def select_celeba_identities(identities: Sequence[int], n: int) -> tuple[list[int], dict]:
    """The ``n`` most frequent identities, ties broken by first appearance (spec §3.2).

    ``collections.Counter`` keeps first-appearance order and ``sorted(..., reverse=True)``
    is stable, exactly as ``CelebA_N_most_common``.  Returns (identities in class order, info).
    """
    counts = Counter(identities)
    ordered = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
    if n > len(ordered):
        raise RawDataError(f"n_classes={n} but the identity file has only {len(ordered)} identities")
    chosen = [ident for ident, _ in ordered[:n]]
    cutoff = ordered[n - 1][1]
    at_cutoff = sum(1 for _, c in ordered if c == cutoff)
    taken = sum(1 for _, c in ordered[:n] if c == cutoff)
    info = {"n_rows": len(identities), "n_identities": len(ordered), "cutoff_count": int(cutoff),
            "identities_at_cutoff": at_cutoff, "taken_at_cutoff": taken,
            "above_cutoff": sum(1 for _, c in ordered[:n] if c > cutoff),
            "max_count": int(ordered[0][1])}
    return chosen, info


def _hdcrop_index(infos: Sequence[tuple[tuple[str, ...], zipfile.ZipInfo]], archive: Path) -> dict[str, zipfile.ZipInfo]:
    index: dict[str, zipfile.ZipInfo] = {}
    where: dict[str, str] = {}
    for parts, info in infos:
        if info.is_dir() or len(parts) < 2 or parts[-2] != "hdcrop":
            continue
        if parts[-1] in index and where[parts[-1]] != "/".join(parts[:-1]):
            raise RawDataError(f"{archive}: {parts[-1]!r} occurs in two hdcrop/ folders "
                               f"({where[parts[-1]]} and {'/'.join(parts[:-1])})")
        index[parts[-1]] = info
        where[parts[-1]] = "/".join(parts[:-1])
    if not index:
        raise RawDataError(f"{archive}: no files in an 'hdcrop/' folder (expected data/celeba/hdcrop/<file>)")
    return index


def build_celeba(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                 workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the CelebA-N HD crops under ``root/images``; return (samples, class_names, info)."""
    n = int(n_classes) if n_classes is not None else DEFAULT_N_CLASSES["celeba"]
    if n < 1:
        raise ValueError(f"n_classes must be >= 1, got {n}")
    id_file = Path(raw["identity_CelebA.txt"]["path"])
    rows = _read_identity_file(id_file)
    chosen, sel = select_celeba_identities([i for _, i in rows], n)
    rank = {ident: k for k, ident in enumerate(chosen)}
    picked = [(fn, rank[i]) for fn, i in rows if i in rank]  # np.isin -> file order
    if raw["identity_CelebA.txt"].get("md5") == CELEBA_IDENTITY_MD5:
        # cross-check against the facts of the real file (spec §3.2)
        _expect(sel["n_rows"] == CELEBA_EXPECTED["n_rows"]
                and sel["n_identities"] == CELEBA_EXPECTED["n_identities"]
                and (n not in CELEBA_EXPECTED or len(picked) == CELEBA_EXPECTED[n]),
                f"{id_file}: {len(picked)} images of {n} identities, selection {sel}; spec §3.2 expects "
                f"{CELEBA_EXPECTED}")
    archive = Path(raw["hdcrop.zip"]["path"])
    samples: list[tuple[str, int]] = []
    with zipfile.ZipFile(archive) as zf:
        index = _hdcrop_index(_zip_infos(zf, archive), archive)
        missing = []
        for fn, label in picked:
            member = index.get(fn) or index.get(str(PurePosixPath(fn).with_suffix(".png")))
            if member is None:
                missing.append(fn)
                continue
            d = root / "images" / f"{label:04d}"
            d.mkdir(parents=True, exist_ok=True)
            name = PurePosixPath(member.filename).name
            stem = PurePosixPath(name).stem
            ext = _write_image_member(lambda m=member: zf.open(m), d / stem, name, f"{archive}:{member.filename}")
            samples.append((f"images/{label:04d}/{stem}{ext}", label))
        if missing:
            raise RawDataError(f"{archive}: {len(missing)} of {len(picked)} selected images are not in hdcrop/ "
                               f"(neither .jpg nor .png), e.g. {missing[:5]}")
    info = {
        "origin": "CelebA identity_CelebA.txt + HD crops hdcrop.zip (spec defenses.md §3.2)",
        "selection": sel,
        "class_order": "identities by image count, descending; ties by first appearance in identity_CelebA.txt",
        "sample_order": "identity_CelebA.txt row order, restricted to the selected identities",
    }
    return samples, [str(i) for i in chosen], info


# --------------------------------------------------------------------------------------
# Stanford Dogs
# --------------------------------------------------------------------------------------
def _mat_strings(arr: Any) -> list[str]:
    out = []
    for item in np.asarray(arr, dtype=object).ravel():
        while isinstance(item, np.ndarray):
            if item.size != 1:
                raise RawDataError(f"unexpected cell content of shape {item.shape} in a .mat list")
            item = item.ravel()[0]
        out.append(str(item))
    return out


def _read_mat_list(data: bytes, what: str) -> tuple[list[str], list[int]]:
    import scipy.io

    try:
        mat = scipy.io.loadmat(io.BytesIO(data))
    except Exception as e:  # scipy raises a variety of errors for bad files
        raise RawDataError(f"{what}: cannot read the .mat file ({e})") from None
    for key in ("annotation_list", "labels"):
        if key not in mat:
            raise RawDataError(f"{what}: no field {key!r} (fields: {sorted(k for k in mat if not k.startswith('__'))})")
    names = _mat_strings(mat["annotation_list"])
    labels_f = np.asarray(mat["labels"], dtype=float).ravel()
    if len(labels_f) != len(names) or not np.all(labels_f == np.round(labels_f)) or labels_f.min(initial=1) < 1:
        raise RawDataError(f"{what}: 'labels' must be {len(names)} integers >= 1")
    return names, [int(v) - 1 for v in labels_f]


def _first_box(xml_bytes: bytes, what: str) -> tuple[int, int, int, int]:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as e:
        raise RawDataError(f"{what}: invalid XML ({e})") from None
    for obj in root.iter("object"):  # the first <object> in document order
        bb = obj.find("bndbox")
        try:
            box = tuple(int(bb.find(k).text) for k in ("xmin", "ymin", "xmax", "ymax"))  # type: ignore[union-attr]
        except (AttributeError, TypeError, ValueError):
            raise RawDataError(f"{what}: first <object> has no integer bndbox xmin/ymin/xmax/ymax") from None
        if box[2] <= box[0] or box[3] <= box[1]:
            raise RawDataError(f"{what}: empty bounding box {box}")
        return box  # type: ignore[return-value]
    raise RawDataError(f"{what}: no <object> bounding box")


def _crop_to_png(data: bytes, box: tuple[int, int, int, int], dest: Path, what: str) -> None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.convert("RGB").crop(box).save(dest, format="PNG")
    except OSError as e:
        raise RawDataError(f"{what}: not a readable image ({e})") from None


def _run_bounded(tasks: Iterable[Callable[[], None]], workers: int) -> None:
    """Run callables on ``workers`` threads with a bounded queue; re-raise the first error."""
    if workers <= 1:
        for t in tasks:
            t()
        return
    with ThreadPoolExecutor(max_workers=workers) as ex:
        pending: set = set()
        try:
            for t in tasks:
                pending.add(ex.submit(t))
                if len(pending) >= 4 * workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()
            for f in pending:
                f.result()
        except BaseException:
            for f in pending:
                f.cancel()
            raise


def _tar_index(members: Sequence[tuple[tuple[str, ...], tarfile.TarInfo]], folder: str,
               archive: Path) -> tuple[dict[str, tarfile.TarInfo], set[str]]:
    """Regular files below ``folder/`` keyed by their path relative to it; plus the subfolders."""
    files: dict[str, tarfile.TarInfo] = {}
    dirs: set[str] = set()
    roots = {parts[: parts.index(folder) + 1] for parts, m in members
             if folder in (parts if m.isdir() else parts[:-1])}
    if len(roots) != 1:
        raise RawDataError(f"{archive}: expected exactly one '{folder}/' folder, found "
                           f"{sorted('/'.join(r) for r in roots) or 'none'}")
    root = roots.pop()
    n = len(root)
    for parts, m in members:
        if parts[:n] != root or len(parts) <= n:
            continue
        rel = parts[n:]
        if m.isdir():
            dirs.add(rel[0])
        else:
            if len(rel) >= 2:
                dirs.add(rel[0])
            files["/".join(rel)] = m
    return files, dirs


def build_stanford_dogs(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                        workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the cropped Stanford Dogs images under ``root/images``; return (samples, class_names, info)."""
    lists_tar = Path(raw["lists.tar"]["path"])
    with tarfile.open(lists_tar, "r:*") as tf:
        members = {parts[-1]: m for parts, m in _tar_members(tf, lists_tar) if m.isfile()}
        lists = {}
        for split in ("train_list.mat", "test_list.mat"):
            if split not in members:
                raise RawDataError(f"{lists_tar}: no member {split}")
            with tf.extractfile(members[split]) as f:  # type: ignore[union-attr]
                lists[split] = _read_mat_list(f.read(), f"{lists_tar}:{split}")
    names = lists["train_list.mat"][0] + lists["test_list.mat"][0]
    labels = lists["train_list.mat"][1] + lists["test_list.mat"][1]
    if len(set(names)) != len(names):
        raise RawDataError(f"{lists_tar}: an image occurs twice in train_list + test_list")

    images_tar = Path(raw["images.tar"]["path"])
    ann_tar = Path(raw["annotation.tar"]["path"])
    with tarfile.open(images_tar, "r:*") as itf, tarfile.open(ann_tar, "r:*") as atf:
        img_files, class_dirs = _tar_index(_tar_members(itf, images_tar), "Images", images_tar)
        ann_files, _ = _tar_index(_tar_members(atf, ann_tar), "Annotation", ann_tar)
        classes = sorted(class_dirs)  # ImageFolder(root/Images).classes
        n_img = sum(1 for k in img_files if "/" in k and k.lower().endswith(IMG_EXTENSIONS))
        if n_img != len(names):
            # the authors' split shuffles range(len(ImageFolder(Images))) over the list samples
            raise RawDataError(f"{images_tar}: {n_img} images under Images/ but {len(names)} samples in "
                               "train_list + test_list; the spec's split needs them to agree")
        if n_classes is not None and len(classes) != int(n_classes):
            raise RawDataError(f"{images_tar}: {len(classes)} class folders, expected n_classes={n_classes}")
        if raw["lists.tar"].get("sha256") == STANFORD_DOGS_LISTS_SHA256:
            _expect(len(names) == STANFORD_DOGS_EXPECTED["n_samples"]
                    and len(classes) == STANFORD_DOGS_EXPECTED["n_classes"],
                    f"{lists_tar}: {len(names)} samples, {len(classes)} classes; spec §3.3 expects "
                    f"{STANFORD_DOGS_EXPECTED}")
        for a, lab in zip(names, labels):
            folder = a.split("/", 1)[0]
            if lab >= len(classes) or folder != classes[lab]:
                raise RawDataError(f"{lists_tar}: sample {a!r} has label {lab + 1} but class folder "
                                   f"{lab + 1} is {classes[lab] if lab < len(classes) else 'missing'!r}")
        for c in range(len(classes)):
            (root / "images" / f"{c:04d}").mkdir(parents=True)

        samples: list[tuple[str, int]] = []

        def tasks() -> Iterator[Callable[[], None]]:
            for a, lab in zip(names, labels):
                ann = ann_files.get(a)
                img = img_files.get(a + ".jpg")
                if ann is None or not ann.isfile():
                    raise RawDataError(f"{ann_tar}: no annotation file Annotation/{a}")
                if img is None or not img.isfile():
                    raise RawDataError(f"{images_tar}: no image file Images/{a}.jpg")
                with atf.extractfile(ann) as f:  # type: ignore[union-attr]
                    box = _first_box(f.read(), f"{ann_tar}:{ann.name}")
                with itf.extractfile(img) as f:  # type: ignore[union-attr]
                    data = f.read()
                stem = re.sub(r"[^A-Za-z0-9._-]", "_", PurePosixPath(a).name)
                rel = f"images/{lab:04d}/{stem}.png"
                samples.append((rel, lab))
                yield (lambda data=data, box=box, rel=rel, what=f"{images_tar}:{img.name}":
                       _crop_to_png(data, box, root / rel, what))

        _run_bounded(tasks(), max(1, int(workers)))
    class_names = [c.split("-", 1)[-1] for c in classes]
    info = {
        "origin": "Stanford Dogs images.tar, annotation.tar, lists.tar (spec defenses.md §3.3)",
        "cropped": "first bounding box of the XML annotation (PIL crop xmin, ymin, xmax, ymax), RGB, PNG",
        "class_folders": classes,
        "class_order": "sorted Images/ folders (labels = .mat labels - 1); name after the first '-'",
        "sample_order": "train_list.mat annotation_list, then test_list.mat annotation_list",
        "n_train_list": len(lists["train_list.mat"][0]),
        "n_test_list": len(lists["test_list.mat"][0]),
    }
    return samples, class_names, info


BUILDERS: dict[str, Callable[..., tuple[list[tuple[str, int]], list[str], dict]]] = {
    "facescrub": build_facescrub,
    "celeba": build_celeba,
    "stanford_dogs": build_stanford_dogs,
}


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------
def prepare_dataset(
    source: str,
    *,
    raw_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    split_seed: int = 42,
    n_classes: int | None = None,
    offline: bool = False,
    lock_file: str | os.PathLike[str] | None = None,
    workers: int = 1,
    overwrite: bool = False,
) -> dict:
    """Fetch/verify the raw files of ``source`` and build the dataset at ``out_dir/private``.

    ``n_classes``: FaceScrub / Stanford Dogs -- the class count the archive must have (None:
    no check); CelebA -- how many most frequent identities to keep (default 1000).
    ``lock_file`` defaults to the repository's ``data/checksums.lock.yaml``.  ``out_dir`` is
    assembled in a temporary sibling directory and renamed into place only when complete;
    it must not exist (or be empty) unless ``overwrite``.  Returns ``{"out_dir", "private":
    meta, "raw_files": {name: {"sha256", "size"}}}``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown dataset source {source!r}; expected one of {SOURCES}")
    out = Path(out_dir).absolute()
    raw = Path(raw_dir).absolute()
    if raw == out or out in raw.parents:
        raise ValueError(f"raw_dir {raw} must not lie inside out_dir {out}")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True)")
    lock_file = Path(lock_file) if lock_file is not None else DEFAULT_LOCK_FILE
    files = fetch_raw(source, raw, offline, lock_file=lock_file)

    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.tmp-*"):  # left by an interrupted earlier run
        log.info("removing stale temporary directory %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        private = tmp / "private"
        private.mkdir()
        log.info("building %s into %s", source, private)
        samples, class_names, info = BUILDERS[source](files, private, n_classes, workers=workers)
        df = pd.DataFrame(samples, columns=["path", "label"])
        df["identity"] = [class_names[i] for i in df["label"]]
        df["split"] = ""
        for name, idx in split_indices(len(df), seed=int(split_seed)).items():
            df.loc[idx, "split"] = name
        meta = {
            "name": source,
            "source": source,
            "class_names": class_names,
            "resolution": None,
            "split_seed": int(split_seed),
            "pool": "private",
            **info,
            "raw_files": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in files.items()},
        }
        meta_out = write_dataset(private, df, meta)
        install_dir(tmp, out)
    except RawDataError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        new = [str(v["path"]) for v in files.values() if v.get("unrecorded")]
        if not new:
            raise
        raise type(e)(f"{e}. Not recorded in {lock_file}: {', '.join(new)} -- if that is the "
                      "wrong file, replace or delete it (it is then downloaded again unless "
                      "offline).") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _record_new_files(lock_file, files)  # only now: the dataset built from them is complete
    log.info("%s: %d images, %d classes, counts %s", source, len(df), len(class_names), meta_out["counts"])
    return {"out_dir": str(out), "private": meta_out,
            "raw_files": {k: {"sha256": v["sha256"], "size": v["size"]} for k, v in files.items()}}
