"""Shared helpers of the suite: the scenario registry, fixed keys, message
builders and polling helpers."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = json.loads((ROOT / "clients/conformance/scenarios.json").read_text())["scenarios"]
VECTORS_GO = ROOT / "clients/conformance/vectors/go.json"
VECTORS_PY = ROOT / "clients/conformance/vectors/python.json"

RAN: set[str] = set()

ALICE = "spiffe://conformance/ns/chat/sa/alice"
BOB = "spiffe://conformance/ns/chat/sa/bob"


def python_scenarios() -> set[str]:
    return {s["id"] for s in SCENARIOS if "python" in s["clients"]}


def scenario(sid: str) -> None:
    """Mark scenario ``sid`` as run (the id must be listed for python)."""
    assert sid in python_scenarios(), f"{sid} is not a python scenario"
    RAN.add(sid)


def fresh(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def payment(**over: Any) -> dict[str, Any]:
    data = {"merchantId": "m-1", "orderId": fresh("o"), "amount": 42.5, "currency": "GBP", "paymentToken": "tok_abc"}
    data.update(over.pop("data", {}))
    m = {
        "type": "payment.authorization.requested",
        "subject": "payments.authorize",
        "intent": "authorize_payment",
        "idempotencyKey": fresh("pay"),
        "classification": "pci",
        "data": data,
    }
    m.update(over)
    return m


def notification(**over: Any) -> dict[str, Any]:
    m = {
        "type": "notification.requested",
        "subject": "notifications.send",
        "intent": "send_notification",
        "idempotencyKey": fresh("n"),
        "classification": "pii",
        "data": {"recipientId": fresh("u"), "channel": "email", "templateId": "welcome"},
    }
    m.update(over)
    return m


def telemetry(kind: str, site: str, value: float, **over: Any) -> dict[str, Any]:
    m = {
        "type": "telemetry.reading",
        "subject": "events.telemetry",
        "intent": "report",
        "classification": "internal",
        "data": {"kind": kind, "site": site, "value": value},
    }
    m.update(over)
    return m


def load_go_vectors() -> dict[str, Any]:
    return json.loads(VECTORS_GO.read_text())


async def eventually(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def within(aw: Awaitable[Any], timeout: float = 15.0) -> Any:
    return await asyncio.wait_for(aw, timeout)


def raw_contract(subject: str = "events.telemetry") -> dict[str, Any]:
    """The contract a raw test endpoint answers a negotiate with: publish
    on ``subject``, expiring far in the future."""
    return {
        "id": "ctr_raw",
        "principal": "spiffe://raw/ns/test/sa/raw",
        "subjects": [{"name": subject, "operations": ["publish"]}],
        "issuedAt": "2026-11-29T12:00:00Z",
        "expiresAt": "2099-11-29T12:15:00Z",
        "region": "uk",
    }


def negotiating(on_frame: Callable[[Any, dict], Awaitable[None]] | None = None,
                contract: dict[str, Any] | None = None):
    """A raw endpoint that answers negotiate with ``contract`` (by default
    ``raw_contract()``) and hands every other frame to
    ``await on_frame(ws, f)`` (none: they go unanswered)."""
    contract = contract or raw_contract()

    async def endpoint(ws):
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] == "negotiate":
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": contract}))
            elif on_frame is not None:
                await on_frame(ws, f)

    return endpoint


@contextlib.asynccontextmanager
async def raw_session(on_frame: Callable[[Any, dict], Awaitable[None]] | None = None,
                      contract: dict[str, Any] | None = None, subjects: list[str] | None = None,
                      **opts: Any):
    """A session of ``pigeon_client.connect`` to a raw endpoint
    (:func:`negotiating` with ``on_frame`` and ``contract``), asking for
    ``subjects`` (default ``["x"]``), without reconnects or renewals;
    ``opts`` go to ``connect``. Closed on the way out."""
    from websockets.asyncio.server import serve

    from pigeon_client import connect

    async with serve(negotiating(on_frame, contract), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "raw-token", subjects or ["x"],
                          reconnect=False, auto_renew=False, **opts)
        try:
            yield s
        finally:
            await s.close()


class Answering:
    """A raw HTTP endpoint (see :func:`http_answering`): every request is
    answered ``status`` with ``body`` (bytes, sent as they are); ``paths``
    records what reached it, ``bodies`` the request bodies."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"
        self.paths: list[str] = []
        self.bodies: list[bytes] = []
        self.url = ""


@contextlib.contextmanager
def http_answering() -> Iterator[Answering]:
    """A raw HTTP endpoint for the test to set the answer of: what a
    server the client cannot trust sends to the HTTP client."""
    a = Answering()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            a.paths.append(self.path)
            a.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self.send_response(a.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(a.body)))
            self.end_headers()
            self.wfile.write(a.body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    a.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield a
    finally:
        srv.shutdown()
        srv.server_close()
