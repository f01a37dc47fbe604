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
    answered ``status`` with ``body`` (bytes, sent as they are), or, when
    ``respond`` is set, with the status and body it returns for the
    request's path (and the headers, when it returns three); ``paths``
    records what reached it, ``bodies`` the request bodies."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"
        self.respond: Callable[[str], tuple[int, bytes] | tuple[int, bytes, dict[str, str]]] | None = None
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
            status, body, *more = a.respond(self.path) if a.respond else (a.status, a.body)
            self.send_response(status)
            for k, v in (more[0] if more else {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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


class SubscribingEndpoint:
    """A raw server: answers subscribe (``from`` 1), ack, nack and
    unsubscribe with ok and ping with pong, recording every frame and
    every subscribe's ``start``; :meth:`deliver` sends messages (JSON text)
    to the latest connection, as deliver frames or one deliver_batch, and
    :meth:`send` any frame."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.starts: list[Any] = []
        self.conns: list[Any] = []
        self.subscribed = asyncio.Event()

    async def on_frame(self, ws: Any, f: dict[str, Any]) -> None:
        self.frames.append(f)
        if ws not in self.conns:
            self.conns.append(ws)
        op = f["op"]
        if op == "subscribe":
            self.starts.append(f.get("start"))
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1", "from": 1}))
            self.subscribed.set()
        elif op in ("ack", "nack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif op == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async def deliver(self, messages: list[str], batch: bool) -> None:
        ws = self.conns[-1]
        if batch:
            ds = ",".join('{"attempt":1,"message":' + m + "}" for m in messages)
            await ws.send('{"op":"deliver_batch","sub":"sub_1","deliveries":[' + ds + "]}")
            return
        for m in messages:
            await ws.send('{"op":"deliver","sub":"sub_1","attempt":1,"message":' + m + "}")

    async def send(self, frame: dict[str, Any]) -> None:
        """Send ``frame`` to the latest connection."""
        await self.conns[-1].send(json.dumps(frame))

    def answered(self) -> list[tuple[str, str, int]]:
        """Every ack and nack sent: (op, message id, sequence; 0: none)."""
        out: list[tuple[str, str, int]] = []
        for f in self.frames:
            if f["op"] not in ("ack", "nack"):
                continue
            if "messageIds" in f:
                out += [(f["op"], i, q) for i, q in zip(f["messageIds"], f["sequences"])]
            else:
                out.append((f["op"], f["messageId"], f.get("sequence", 0)))
        return out

    async def resume_start(self, s: Any) -> Any:
        """Cut the connection; the ``start`` of the subscribe that resumes."""
        n = len(self.starts)
        await self.conns[-1].close()
        await eventually(lambda: len(self.starts) > n, 10, "the resumed subscribe")
        await within(s.wait_connected(5), 10)
        return self.starts[-1]
