"""The three transports -- plain HTTP(S), Google Drive, Kaggle -- each on its well-kept client,
and the temporary ``.part`` file every download goes to.

* HTTP: :class:`pooch.HTTPDownloader` (requests, streamed; urllib3 enforces Content-Length,
  so a transfer that ends early raises), with a progress object that logs one line per 10 %
  instead of a carriage-return bar.
* Google Drive: :func:`gdown.download` by file id (it follows Drive's "can't scan this file
  for viruses" confirmation page, whose format Drive changes; gdown tracks it).  No cookie
  file is read or written (``use_cookies=False``: the session keeps its cookies in memory).
* Kaggle: the official client, ``kaggle.api.kaggle_api_extended.KaggleApi``
  (``dataset_download_files(..., unzip=False)``: the archive itself, never extracted by the
  client -- the builders read it with their own safe extraction).  Credentials are whatever
  the client accepts (``KAGGLE_USERNAME``/``KAGGLE_KEY``, ``KAGGLE_API_TOKEN``, or
  ``kaggle.json`` in ``$KAGGLE_CONFIG_DIR``, ``~/.kaggle``, ``~/.config/kaggle``); this
  module never reads, logs or writes them.  (kaggle 2.2.5 imports ``six`` without declaring
  it: the project pins ``six`` itself.)  Limitation of the client: used as a library it
  refuses to run without credentials (anonymous access is only granted to its own CLI), so
  a download without credentials stops with a :class:`DownloadError` saying where to put
  the token.  That the client sends the credentials to Kaggle only (not on to the storage
  host it redirects to) is the client's behaviour and is not tested here (no network).

Testing: the HTTP transport is tested against a local server.  gdown only treats
``drive.google.com`` URLs as Drive (and HTTPS to Google cannot be imitated locally), so the
tests route its requests to the local server at the ``requests`` adapter; the Kaggle client
talks protobuf/JSON RPC to ``api.kaggle.com``, so the tests replace the client object
(:data:`kaggle_api`) and test this layer's behaviour around it.

Nothing here is called in offline mode: the callers check first, and no module imported
here opens a socket at import time (``kaggle`` authenticates at import, so it and gdown are
imported only when such a download actually starts; pooch and requests are imported with
this module, never first under a test's socket guard)."""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pooch
import requests

log = logging.getLogger(__name__)

HTTP_TIMEOUT = 60
CHUNK = 1 << 20
STALE_PART_SECONDS = 24 * 3600  # a *.part file this old is left over by a killed job
FETCHERS = ("http", "gdrive", "kaggle")


class DownloadError(RuntimeError):
    """A download failed (HTTP error, truncated transfer, unexpected web page, refused credentials)."""


class _LogProgress:
    """A progress object with the interface pooch expects of a tqdm bar (``total``,
    ``update``, ``reset``, ``close``): one log line per 10 % instead of a terminal bar."""

    def __init__(self, what: str) -> None:
        self.what, self.total, self.n, self._next = what, 0, 0, 0.1

    def update(self, n: int) -> None:
        self.n += n
        if self.total and self.n / self.total >= self._next:
            log.info("%s: %d%% of %d bytes", self.what, min(100, int(100 * self.n / self.total)), self.total)
            while self._next <= self.n / self.total:
                self._next += 0.1

    def __call__(self, done: int, total: int | None) -> None:  # gdown's progress callback
        self.total = total or 0
        self.update(done - self.n)

    def reset(self) -> None:
        self.n, self._next = 0, 2.0  # pooch fills the bar at the end: no second report

    def close(self) -> None:
        pass


def _requests_error(e: Exception, what: str) -> DownloadError:
    if isinstance(e, requests.HTTPError) and e.response is not None:
        return DownloadError(f"{what}: HTTP {e.response.status_code} {e.response.reason}")
    if isinstance(e, requests.exceptions.ChunkedEncodingError):
        return DownloadError(f"{what}: truncated download, the transfer ended before the announced "
                             f"size ({e})")
    if isinstance(e, (requests.ConnectionError, requests.Timeout)):
        return DownloadError(f"{what}: cannot connect ({type(e).__name__}: {e})")
    return DownloadError(f"{what}: transfer failed ({type(e).__name__}: {e})")


def http(url: str, tmp: Path, what: str) -> None:
    """Stream ``url`` into ``tmp`` with pooch's HTTP downloader."""
    downloader = pooch.HTTPDownloader(progressbar=_LogProgress(what), chunk_size=CHUNK,
                                      timeout=HTTP_TIMEOUT)
    try:
        with open(tmp, "wb") as fh:
            downloader(url, fh, None)
    except requests.RequestException as e:
        raise _requests_error(e, what) from None


def gdrive(file_id: str, tmp: Path, what: str) -> None:
    """Google Drive file ``file_id`` into ``tmp`` with gdown."""
    import gdown
    from gdown.exceptions import DownloadError as GdownDownloadError
    from gdown.exceptions import FileURLRetrievalError

    try:
        with open(tmp, "wb") as fh:
            gdown.download(id=file_id, output=fh, quiet=True, use_cookies=False,
                           timeout=HTTP_TIMEOUT, progress=_LogProgress(what))
    except FileURLRetrievalError as e:
        text = " ".join(str(e).split())
        if re.search(r"quota exceeded|too many users have viewed or downloaded", text, re.I):
            raise DownloadError(f"{what}: Google Drive download quota exceeded for this file; "
                                "try again later or place the file by hand") from None
        raise DownloadError(f"{what}: Google Drive returned a web page instead of the file "
                            f"(no access, or the page format changed; gdown: {text}); place the "
                            "file by hand") from None
    except GdownDownloadError as e:
        raise DownloadError(f"{what}: truncated or failed download ({e})") from None
    except requests.RequestException as e:
        raise _requests_error(e, what) from None


KAGGLE_CREDENTIALS_HINT = (
    "put an API token in ~/.kaggle/kaggle.json (or $KAGGLE_CONFIG_DIR/kaggle.json), or set "
    "KAGGLE_USERNAME and KAGGLE_KEY (or KAGGLE_API_TOKEN)")


def _official_kaggle_api() -> Any:
    """An authenticated ``KaggleApi`` (raises :class:`DownloadError` without credentials).
    The client prints its sign-up help and calls ``exit(1)`` when it finds no credentials,
    also once at import: that text is kept out of the log, our error says what to do."""
    with contextlib.redirect_stdout(io.StringIO()):
        from kaggle.api.kaggle_api_extended import KaggleApi

        api = KaggleApi()
        try:
            api.authenticate()
        except SystemExit:
            raise DownloadError(f"no Kaggle credentials found: {KAGGLE_CREDENTIALS_HINT}") from None
    return api


kaggle_api: Callable[[], Any] = _official_kaggle_api  # replaced by the tests (no network)


def kaggle(dataset: str, tmp: Path, what: str) -> None:
    """The archive of Kaggle dataset ``dataset`` (``owner/slug``) into ``tmp`` with the
    official client (it writes ``<slug>.zip`` into a directory: a temporary one next to
    ``tmp``, removed afterwards)."""
    hint = (f"{KAGGLE_CREDENTIALS_HINT}, and accept the dataset's terms on "
            f"https://www.kaggle.com/datasets/{dataset}")
    work = Path(tempfile.mkdtemp(prefix=f"{tmp.name}.", suffix=".d", dir=tmp.parent))
    try:
        try:
            api = kaggle_api()
            api.dataset_download_files(dataset, path=str(work), force=True, quiet=True, unzip=False)
        except DownloadError as e:
            raise DownloadError(f"{what}: {e}; then accept the dataset's terms on "
                                f"https://www.kaggle.com/datasets/{dataset}") from None
        except requests.RequestException as e:
            err = _requests_error(e, what)
            if isinstance(e, requests.HTTPError) and e.response is not None \
                    and e.response.status_code in (401, 403):
                raise DownloadError(f"{err}. Kaggle refused the download: {hint}") from None
            raise err from None
        got = work / f"{dataset.rsplit('/', 1)[-1]}.zip"
        if not got.is_file():
            raise DownloadError(f"{what}: the Kaggle client wrote {sorted(p.name for p in work.iterdir())}, "
                                f"not {got.name}")
        os.replace(got, tmp)
    finally:
        shutil.rmtree(work, ignore_errors=True)


TRANSPORTS: dict[str, Callable[[str, Path, str], None]] = {"http": http, "gdrive": gdrive, "kaggle": kaggle}


def remove_stale_parts(dest: Path) -> None:
    """Create ``dest``'s directory; delete partial downloads of ``dest`` older than
    STALE_PART_SECONDS (left by killed jobs; a younger one may belong to a job of another run
    sharing the cache, still downloading)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for stale in dest.parent.glob(f".{glob.escape(dest.name)}.*.part*"):
        with contextlib.suppress(OSError):
            if now - stale.stat().st_mtime > STALE_PART_SECONDS:
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:
                    stale.unlink()
                log.info("removed %s, a partial download left by a killed job", stale)


def download_to_temp(fetcher: str, ref: str, dest: Path, shown_url: str | None = None) -> Path:
    """Download ``ref`` (a URL for ``http``, a file id for ``gdrive``, ``owner/slug`` for
    ``kaggle``) into a fresh temporary ``.<name>.<random>.part`` next to ``dest`` (unique per
    job, so parallel jobs never share one) and return its path, to be verified and renamed
    by the caller.  On any failure the temporary file is removed."""
    if fetcher not in TRANSPORTS:
        raise ValueError(f"unknown fetcher {fetcher!r}; expected one of {FETCHERS}")
    remove_stale_parts(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    what = f"{shown_url or ref} -> {dest}"
    try:
        log.info("downloading %s", what)
        TRANSPORTS[fetcher](ref, Path(tmp), what)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)
