"""Safe reading of the raw archives, shared by the dataset builders.

Archives with absolute or ``..`` member names are refused as a whole.  Members are never
extracted to archive-controlled paths: a builder streams the images it needs straight from
the archive to ``images/<label>/...`` (links are never followed: only regular members are
read).  :func:`check_kind` refuses obviously wrong content (an HTML error page, a truncated
archive) before a file's checksum may be recorded."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

# torchvision.datasets.folder.IMG_EXTENSIONS (torchvision 0.16, used by ImageFolder)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
KEEP_EXTENSIONS = (".jpg", ".jpeg", ".png")  # written as they are; others become PNG
CHUNK = 1 << 20


class RawDataError(ValueError):
    """A raw file or archive does not have the expected content or layout."""


class UnsafeArchiveError(RawDataError):
    """An archive has a member with an absolute path or a '..' component."""



@dataclass(frozen=True)
class RawFile:
    """One raw file of a source: its name in ``raw_dir`` and how to obtain it."""

    name: str
    url: str  # what a person opens to get it (also the download URL for http)
    kind: str  # "zip" | "tar" | "text": checked before a new checksum is recorded
    fetcher: str  # "http" | "kaggle" | "gdrive" (atat.base.fetch.transports)
    ref: str | None = None  # Kaggle dataset owner/slug or Google Drive file id (http: the url)
    how: str = ""  # hint for placing it by hand


def check_kind(path: Path, kind: str, shown_as: Path | None = None) -> None:
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



def expect(condition: bool, message: str) -> None:
    """Cross-check against the published facts of a verified upstream file."""
    if not condition:
        raise RawDataError(f"cross-check failed (a bug, or a different upstream file): {message}")


def member_parts(name: str, archive: Path) -> tuple[str, ...]:
    """Normalised path components of an archive member; refuse unsafe names."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: refusing archive with absolute member path {name!r}")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts or any(".." in p.split("\\") for p in parts):
        raise UnsafeArchiveError(f"{archive}: refusing archive with '..' in member path {name!r}")
    return parts


def zip_infos(zf: zipfile.ZipFile, archive: Path) -> list[tuple[tuple[str, ...], zipfile.ZipInfo]]:
    out = []
    for info in zf.infolist():
        parts = member_parts(info.filename, archive)
        if parts and parts[0] != "__MACOSX":
            out.append((parts, info))
    return out


def tar_members(tf: tarfile.TarFile, archive: Path) -> list[tuple[tuple[str, ...], tarfile.TarInfo]]:
    out = []
    for m in tf.getmembers():
        parts = member_parts(m.name, archive)  # links are never followed: only regular files are read
        if parts:
            out.append((parts, m))
    return out


def copy_member(src: io.BufferedIOBase, dest: Path) -> None:
    with open(dest, "wb") as f:
        shutil.copyfileobj(src, f, CHUNK)


def check_image(path: Path, what: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.size  # header only
    except (UnidentifiedImageError, OSError) as e:
        raise RawDataError(f"{what}: not a readable image ({e})") from None


def write_image_member(read: Callable[[], io.BufferedIOBase], dest_stem: Path, name: str, what: str) -> str:
    """Write an image member as ``dest_stem + ext`` (converted to PNG if not jpg/png); return the suffix."""
    ext = PurePosixPath(name).suffix.lower()
    if ext in KEEP_EXTENSIONS:
        dest = dest_stem.with_name(dest_stem.name + ext)
        with read() as src:
            copy_member(src, dest)
        check_image(dest, what)
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

