"""CelebA builder (docs/sources.md#celeba).

``identity_CelebA.txt`` (torchvision MD5) and ``hdcrop.zip`` from Google Drive.  All
202,599 rows are counted per identity; identities are sorted by count, descending, with a
*stable* sort over the order of first appearance; the first ``n_classes`` (1000) are kept
(class index = rank; class name = the CelebA identity number).  Samples are the rows of
those identities in file order (30,038 for the real file).  Images are
``hdcrop/<filename>`` from the zip, or ``<stem>.png`` when the ``.jpg`` is absent.
"""

from __future__ import annotations

import re
import zipfile
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from atat.data.builders.archives import RawDataError, RawFile, expect, write_image_member, zip_infos

CELEBA_IDENTITY_GDRIVE_ID = "1_ee_0u7vcNLOfNLegJRHmolfH5ICW-XS"
CELEBA_HDCROP_GDRIVE_ID = "1f7RPM9iQL_3OCbcByDqjuZQ-9Qs_M_1A"
# Facts of the real files, used as cross-checks when the verified upstream file is used.
CELEBA_IDENTITY_MD5 = "32bd1bd63d3c78cd57e08160ec5ed1e2"
CELEBA_EXPECTED = {"n_rows": 202_599, "n_identities": 10_177, 1000: 30_038}
DEFAULT_N_CLASSES = 1000


def raw_files() -> list[RawFile]:
    """The raw files CelebA needs (read at call time, so the constants can be patched)."""
    return [
        RawFile("identity_CelebA.txt", f"https://drive.google.com/file/d/{CELEBA_IDENTITY_GDRIVE_ID}/view",
                "text", "gdrive", CELEBA_IDENTITY_GDRIVE_ID,
                how="official CelebA Google Drive (Anno/identity_CelebA.txt); e.g. "
                    f"`gdown {CELEBA_IDENTITY_GDRIVE_ID}`"),
        RawFile("hdcrop.zip", f"https://drive.google.com/file/d/{CELEBA_HDCROP_GDRIVE_ID}/view",
                "zip", "gdrive", CELEBA_HDCROP_GDRIVE_ID,
                how=f"the authors' HD crops; e.g. `gdown {CELEBA_HDCROP_GDRIVE_ID}`"),
    ]


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
    """The ``n`` most frequent identities, ties broken by first appearance (docs/sources.md#celeba).

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


def build(raw: Mapping[str, Mapping[str, Any]], root: Path, n_classes: int | None,
                 workers: int = 1) -> tuple[list[tuple[str, int]], list[str], dict]:
    """Write the CelebA-N HD crops under ``root/images``; return (samples, class_names, info)."""
    n = int(n_classes) if n_classes is not None else DEFAULT_N_CLASSES
    if n < 1:
        raise ValueError(f"n_classes must be >= 1, got {n}")
    id_file = Path(raw["identity_CelebA.txt"]["path"])
    rows = _read_identity_file(id_file)
    chosen, sel = select_celeba_identities([i for _, i in rows], n)
    rank = {ident: k for k, ident in enumerate(chosen)}
    picked = [(fn, rank[i]) for fn, i in rows if i in rank]  # np.isin -> file order
    if raw["identity_CelebA.txt"].get("md5") == CELEBA_IDENTITY_MD5:
        # cross-check against the facts of the real file (docs/sources.md#celeba)
        expect(sel["n_rows"] == CELEBA_EXPECTED["n_rows"]
                and sel["n_identities"] == CELEBA_EXPECTED["n_identities"]
                and (n not in CELEBA_EXPECTED or len(picked) == CELEBA_EXPECTED[n]),
                f"{id_file}: {len(picked)} images of {n} identities, selection {sel}; the official file "
                f"gives {CELEBA_EXPECTED} (docs/sources.md#celeba)")
    archive = Path(raw["hdcrop.zip"]["path"])
    samples: list[tuple[str, int]] = []
    with zipfile.ZipFile(archive) as zf:
        index = _hdcrop_index(zip_infos(zf, archive), archive)
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
            ext = write_image_member(lambda m=member: zf.open(m), d / stem, name, f"{archive}:{member.filename}")
            samples.append((f"images/{label:04d}/{stem}{ext}", label))
        if missing:
            raise RawDataError(f"{archive}: {len(missing)} of {len(picked)} selected images are not in hdcrop/ "
                               f"(neither .jpg nor .png), e.g. {missing[:5]}")
    info = {
        "origin": "CelebA identity_CelebA.txt + HD crops hdcrop.zip (docs/sources.md#celeba)",
        "selection": sel,
        "class_order": "identities by image count, descending; ties by first appearance in identity_CelebA.txt",
        "sample_order": "identity_CelebA.txt row order, restricted to the selected identities",
    }
    return samples, [str(i) for i in chosen], info

