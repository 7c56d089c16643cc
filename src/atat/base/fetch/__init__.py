"""The one fetch layer, for raw datasets (:mod:`atat.data.prepare`) and pretrained weights
(:mod:`atat.downloads`) alike:

* :mod:`atat.base.fetch.transports` -- HTTP (pooch), Google Drive (gdown), Kaggle (the official
  client) into a temporary ``.part`` file; what each client cannot do is written there;
* :mod:`atat.base.fetch.verify` -- size / sha256 / md5 checks naming the file and both hashes;
* :mod:`atat.base.fetch.lock` -- the committed lock file ``data/checksums.lock.yaml`` (read,
  first-use pinning);
* :mod:`atat.base.fetch.core` -- one file into place (present: verified, never deleted; missing:
  downloaded, verified, content-checked, renamed) and the offline error.

Offline mode is the callers' first check: with ``offline`` a missing file raises
:class:`OfflineMissingFileError` naming the exact path to place it at, and no transport
(hence no socket) is ever touched."""

from atat.base.fetch.core import OfflineMissingFileError, obtain
from atat.base.fetch.lock import DEFAULT_LOCK_FILE, LockFileError, load_lock, record_first_checksum
from atat.base.fetch.transports import DownloadError
from atat.base.fetch.verify import ChecksumError, file_hashes, sha256sum, verify_file

__all__ = [
    "ChecksumError",
    "DEFAULT_LOCK_FILE",
    "DownloadError",
    "LockFileError",
    "OfflineMissingFileError",
    "file_hashes",
    "load_lock",
    "obtain",
    "record_first_checksum",
    "sha256sum",
    "verify_file",
]
