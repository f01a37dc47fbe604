"""A redirect must not hand the bearer token to another origin: the HTTP
client follows a redirect to the same scheme, host and port with its
headers, and to any other origin without ``Authorization`` (nor the
contract header), as browsers and Go's net/http do."""

from __future__ import annotations

import http.server
import threading

import pytest

from pigeon_client import HttpClient


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, str | None]]
    location: str = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        if self.location and self.path.startswith("/v1/"):
            self.send_response(302)
            self.send_header("Location", self.location + "/landed")
            self.end_headers()
            return
        body = b'{"subjects":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(location: str = ""):
    handler = type("Handler", (_Recorder,), {"seen": [], "location": location})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, handler


@pytest.fixture
def servers():
    started = []

    def start(location: str = ""):
        srv, h = _serve(location)
        started.append(srv)
        return srv, h

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def test_http_redirect_to_another_origin_drops_the_bearer_token(servers):
    other, other_seen = servers()
    # Same host, another port: another origin.
    first, _ = servers(f"http://127.0.0.1:{other.server_address[1]}")
    c = HttpClient(f"http://127.0.0.1:{first.server_address[1]}", "secret-token")
    c.subjects()
    assert other_seen.seen == [{"path": "/landed", "authorization": None}]


def test_http_redirect_to_the_same_origin_keeps_the_bearer_token(servers):
    srv, seen = servers()
    seen.location = f"http://127.0.0.1:{srv.server_address[1]}"
    c = HttpClient(seen.location, "secret-token")
    c.subjects()
    assert seen.seen[-1] == {"path": "/landed", "authorization": "Bearer secret-token"}
