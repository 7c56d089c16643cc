"""One file into place: used as it is when present, else downloaded to a ``.part`` name,
verified and content-checked there and only then renamed (atomic: concurrent jobs see the
whole file or none, and a rejected download is never kept)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from atat.base.fetch.transports import download_to_temp
from atat.base.fetch.verify import ChecksumError, verify_file

log = logging.getLogger(__name__)


class OfflineMissingFileError(FileNotFoundError):
    """Offline mode and a required file is not in place (message: where to put it, where to get it)."""


def obtain(dest: str | os.PathLike[str], fetcher: str, ref: str, *, url: str,
           expected: Mapping[str, Any], what: str | None = None,
           check: Callable[[Path, Path], None] | None = None,
           content_errors: tuple[type[Exception], ...] = ()) -> tuple[dict[str, Any], bool]:
    """Make sure ``dest`` is in place and passes ``expected`` (:func:`verify_file`) and
    ``check(path, shown_as)``; return ``(actual hashes and size, downloaded)``.

    The caller has already refused a missing file in offline mode (its message lists what
    to place where).  A present file is never deleted: a mismatch says to replace or delete
    it; a download that fails a check is deleted and the error says nothing was kept.
    ``content_errors`` are the exception types ``check`` raises for bad content."""
    dest = Path(dest)
    downloaded = not dest.is_file()
    src = download_to_temp(fetcher, ref, dest, shown_url=url) if downloaded else dest
    try:
        actual = verify_file(src, expected, what=what, shown_as=dest)
        if check is not None:
            check(src, dest)
        if downloaded:  # verified under the temporary name; only now visible as dest
            os.replace(src, dest)
    except (ChecksumError, *content_errors) as e:
        if downloaded:
            raise type(e)(f"download from {url} rejected: {e} (nothing was kept)") from None
        raise type(e)(f"{e}. Replace or delete the file (it is then downloaded again unless "
                      "offline).") from None
    finally:
        if downloaded and src.exists():
            src.unlink()
    if not downloaded:
        log.info("using %s already in place", dest)
    log.info("verified %s (sha256 %s, %d bytes)", dest, actual["sha256"], actual["size"])
    return actual, downloaded
