"""The HTTP client's ``timeout`` bounds the whole call, not each socket
operation: a server (or proxy) that answers a byte at a time, each well
within the timeout, cannot hold a call past it; one that closes in the
middle of a body fails the call with a typed error, not an exception of
``http.client``'s."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from pigeon_client import HttpClient
from pigeon_client.errors import RequestTimeoutError, TransportError
from pigeon_client.http import _watchdog


def _serve(answer):
    """A TCP server that reads one request and calls answer(conn) on it."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=_one, args=(conn,), daemon=True).start()

    def _one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            buf = b""
            try:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                answer(conn, stop)
            except OSError:
                pass

    threading.Thread(target=run, daemon=True).start()
    return ls, stop


@pytest.fixture
def server():
    started = []

    def start(answer):
        ls, stop = _serve(answer)
        started.append((ls, stop))
        return f"http://127.0.0.1:{ls.getsockname()[1]}"

    yield start
    for ls, stop in started:
        stop.set()
        ls.close()


def _drip(data: bytes, every: float):
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        for b in data:
            if stop.is_set():
                return
            conn.sendall(bytes([b]))
            time.sleep(every)

    return answer


BODY = b'{"subjects":[]}' + b" " * 200
HEADERS = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
           + str(len(BODY)).encode() + b"\r\n\r\n")


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_server_dripping_its_answer_fails_the_call_at_its_timeout(server, where):
    if where == "headers":
        answer = _drip(HEADERS + BODY, 0.05)  # every byte within the timeout, the whole far beyond
    else:
        def answer(conn, stop):
            conn.sendall(HEADERS)
            _drip(BODY, 0.05)(conn, stop)
    c = HttpClient(server(answer), "t", timeout=0.5)
    start = time.monotonic()
    with pytest.raises(RequestTimeoutError) as e:
        c.subjects()
    took = time.monotonic() - start
    assert e.value.code == "REQUEST_TIMEOUT"
    assert e.value.status == 504
    assert took < 5, f"the call took {took:.1f} s with a timeout of 0.5 s"


def test_a_server_that_never_answers_fails_at_the_timeout_as_request_timeout(server):
    def answer(conn, stop):
        stop.wait(10)

    c = HttpClient(server(answer), "t", timeout=0.3)
    with pytest.raises(RequestTimeoutError) as e:
        c.subjects()
    assert e.value.code == "REQUEST_TIMEOUT"


def test_a_body_cut_short_is_a_transport_error(server):
    def answer(conn, stop):
        conn.sendall(HEADERS + BODY[:5])  # then close: fewer bytes than Content-Length

    c = HttpClient(server(answer), "t", timeout=5)
    with pytest.raises(TransportError) as e:
        c.subjects()
    assert e.value.code == "CONNECTION_FAILED"


def test_quick_answers_are_read_whole_and_leave_no_deadline_behind(server):
    def answer(conn, stop):
        conn.sendall(HEADERS + BODY)

    c = HttpClient(server(answer), "t", timeout=30)
    for _ in range(20):
        assert c.subjects() == []
    assert _watchdog.pending() == 0, "a call left its deadline behind"
    assert sum(t.name == "pigeon-http-deadlines" for t in threading.enumerate()) == 1


def test_the_socket_timeout_before_the_watchdog_is_still_request_timeout(server, monkeypatch):
    # The socket's timeout is the call's seconds too: on a loaded machine it
    # can end the call before the watchdog thread marks the deadline
    # expired. Held back here for good, the call still ends REQUEST_TIMEOUT,
    # not CONNECTION_FAILED.
    import pigeon_client.http as h

    monkeypatch.setattr(h._Deadline, "expire", lambda self: None)

    def answer(conn, stop):
        stop.wait(10)

    c = HttpClient(server(answer), "t", timeout=0.3)
    with pytest.raises(RequestTimeoutError) as e:
        c.subjects()
    assert e.value.code == "REQUEST_TIMEOUT"
