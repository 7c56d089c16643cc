import copy
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


@pytest.fixture(autouse=True)
def _threads():
    """Every test on one torch thread: the small convolutions of the tests run several times
    faster on one thread on a shared 2-core machine (two intra-op threads spin against each
    other); the previous setting is restored afterwards. A module- or session-scoped fixture
    runs before this one and sets its own (tests/test_robustness.py: ``one_thread``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: The tiny training recipe of the tests (``training`` of a TrainSpec): Adam 1e-3, one epoch of
#: batches of 8, no schedule step within it, no pretrained weights, data loaded in-process.
TINY_RECIPE = {"optimizer": "adam", "lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 0.0,
               "batch_size": 8, "eval_batch_size": 4, "epochs": 1, "lr_milestones": [75],
               "lr_gamma": 0.1, "eval_every": 1, "checkpoint_every": 1, "pretrained": False,
               "num_workers": 0}
#: The tiny synthetic dataset of the tests (atat.data.synthfaces.generate_synthfaces): 4
#: private identities of 4 images at 16 px, one public identity.
TINY_SYNTHFACES = {"n_private_identities": 4, "n_public_identities": 1,
                   "images_per_identity": 4, "public_images_per_identity": 1,
                   "resolution": 16, "seed": 3, "progress": False}


@pytest.fixture(scope="session")
def tiny_recipe():
    """``tiny_recipe(**changes)``: a fresh copy of :data:`TINY_RECIPE` with ``changes``."""
    def make(**changes):
        return {**copy.deepcopy(TINY_RECIPE), **changes}
    return make


@pytest.fixture(scope="session")
def make_synthfaces():
    """``make_synthfaces(out, **changes)``: generate the :data:`TINY_SYNTHFACES` dataset (with
    ``changes``) under ``out`` and return ``out / "private"`` (the training root)."""
    from atat.data.synthfaces import generate_synthfaces

    def make(out, **changes):
        generate_synthfaces(out, **{**TINY_SYNTHFACES, **changes})
        return Path(out) / "private"
    return make


@pytest.fixture
def server(monkeypatch):
    """An HTTP server on 127.0.0.1 for download tests (no proxy in between).

    ``routes[path]`` is either ``(body, content_length or None)`` or a callable
    ``route(handler, query)``; ``requests`` records ``(path, headers)`` of every GET.
    """
    for v in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    state = types.SimpleNamespace(routes={}, requests=[])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            parts = urlsplit(self.path)
            state.requests.append((parts.path, dict(self.headers)))
            route = state.routes.get(parts.path)
            if route is None:
                self.send_error(404)
            elif callable(route):
                route(self, {k: v[0] for k, v in parse_qs(parts.query).items()})
            else:
                body, length = route
                self.send_response(200)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield state
    srv.shutdown()
    srv.server_close()
