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
    torch.set_num_threads(1)  # small convolutions: 1 thread is faster on 2 cores
    yield


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
