"""Verification of a file against what is known of it (size, sha256, md5, a sha256 prefix).

One pass over the file computes every hash at once (the raw archives are many GB).  pooch's
``hash_matches`` is not used here: it checks one algorithm per pass and its message names
neither the lock entry nor the size, while ours names the file, the lock entry and both
hashes, and says "truncated" when the size gives it away."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

CHUNK = 1 << 20
ALGORITHMS = ("sha256", "md5")


class ChecksumError(RuntimeError):
    """A file's size or hash does not match the expected one."""


def file_hashes(path: str | os.PathLike[str], algorithms: tuple[str, ...] = ALGORITHMS) -> dict[str, Any]:
    """``{algorithm: hex digest, ..., "size": bytes}`` of ``path`` in one read."""
    hs = {a: hashlib.new(a, usedforsecurity=False) for a in algorithms}
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            for h in hs.values():
                h.update(block)
            size += len(block)
    return {**{a: h.hexdigest() for a, h in hs.items()}, "size": size}


def sha256sum(path: str | os.PathLike[str]) -> str:
    return file_hashes(path, ("sha256",))["sha256"]


def verify_file(path: str | os.PathLike[str], expected: Mapping[str, Any], *, what: str | None = None,
                shown_as: str | os.PathLike[str] | None = None) -> dict:
    """Check ``path`` against ``expected`` (any of ``size``, ``sha256``, ``md5``,
    ``sha256_prefix``).

    Returns the actual ``{"sha256", "md5", "size"}``.  Raises :class:`ChecksumError` naming
    the file, the expected and the actual hashes (and sizes) on any mismatch; ``shown_as``
    names the file in the message instead of ``path`` (a download is verified under its
    temporary name); ``what`` says where the expectation comes from (e.g. the lock entry).
    """
    actual = file_hashes(Path(path))
    problems = []
    if expected.get("size") is not None and int(expected["size"]) != actual["size"]:
        short = actual["size"] < int(expected["size"])
        problems.append(f"size {actual['size']} bytes, expected {int(expected['size'])} "
                        f"({'truncated' if short else 'too long'} or wrong file)")
    hash_problem = False
    for algo in ALGORITHMS:
        exp = expected.get(algo)
        if exp and str(exp).lower() != actual[algo]:
            problems.append(f"{algo} {actual[algo]} does not match the expected {str(exp).lower()}")
            hash_problem = True
    prefix = expected.get("sha256_prefix")
    if prefix and not actual["sha256"].startswith(str(prefix).lower()):
        problems.append(f"sha256 {actual['sha256']} does not match the expected prefix {str(prefix).lower()}")
        hash_problem = True
    if problems:
        if not hash_problem:  # name both hashes even when only the size gave it away
            known = [a for a in ALGORITHMS if expected.get(a)]
            problems.append("; ".join(f"{a} {actual[a]}, expected {str(expected[a]).lower()}" for a in known)
                            or f"sha256 {actual['sha256']} (no hash recorded)")
        raise ChecksumError(f"{shown_as or path}{f' ({what})' if what else ''}: " + "; ".join(problems))
    return actual
