"""A handled delivery whose ack the server refused, or never answered, is
not asked for again by the resume, as in the Go, TypeScript and Rust
clients: the handler succeeded, and a sequence kept in the resume set would
make the resume start there, delivering again every message after it."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, within
from pigeon_client import connect


def deliver(seq: int) -> str:
    message = {"id": f"msg_{seq}", "subject": "x", "sequence": seq, "data": {}}
    return json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": message})


async def resume_after_a_failed_ack(how: str):
    """A subscription whose first connection delivers msg_5 and answers its
    ack by ``how`` ("refused": ACK_NOT_ALLOWED, then msg_6 delivered, its
    ack taken and the connection dropped; "unanswered": the connection
    dropped when the ack comes): the ``start`` of the resumed subscribe."""
    starts: list = []
    conns: list = []
    resumed = asyncio.Event()

    async def on_frame(ws, f):
        if ws not in conns:
            conns.append(ws)
        first = ws is conns[0]
        op = f["op"]
        if op == "subscribe":
            starts.append(f.get("start"))
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1", "from": 1}))
            if first:
                await ws.send(deliver(5))
            else:
                resumed.set()
        elif op == "ack" and first and f.get("messageId") == "msg_5":
            if how == "unanswered":
                await ws.close()
                return
            refused = {"code": "ACK_NOT_ALLOWED", "message": "no delivery of that message is waiting"}
            await ws.send(json.dumps({"op": "error", "re": f["id"], "error": refused}))
            await ws.send(deliver(6))
        elif op == "ack" and first:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
            await ws.close()
        elif op == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, raw_contract("x")), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=lambda e: None,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await s.subscribe("x", lambda m: None)
            await within(resumed.wait(), 10)
        finally:
            await s.close(timeout=1)
    return starts


@pytest.mark.parametrize("how, want", [("refused", {"sequence": 7}), ("unanswered", {"sequence": 6})])
async def test_a_handled_delivery_whose_ack_failed_is_not_asked_for_again(how, want):
    starts = await resume_after_a_failed_ack(how)
    assert starts[0] is None, starts
    assert starts[1] == want, starts
