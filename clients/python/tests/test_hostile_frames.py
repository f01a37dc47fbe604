"""Frames a hostile or broken server may send: each is reported (to
``on_error``) and the session goes on, on the same connection; none ends the
reader (which would drop the connection and every call on it)."""

from __future__ import annotations

import json

from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, within
from pigeon_client import ProtocolError, connect

CONTRACT = raw_contract()

HOSTILE = [
    # A subscription id that is not a string (a dict key cannot be a list).
    '{"op":"deliver","sub":["sub_1"],"message":{"id":"m"},"attempt":1}',
    '{"op":"deliver_batch","sub":{"a":1},"deliveries":[]}',
    '{"op":"unsubscribed","sub":[]}',
    # Not JSON: the literals Python's json module takes by default.
    '{"op":"deliver","sub":"sub_9","message":{"id":"m","data":{"x":NaN}},"attempt":1}',
    '{"op":"pong","re":"nope","n":Infinity}',
]


async def on_ping(ws, f):
    if f["op"] == "ping":
        for h in HOSTILE:
            await ws.send(h)
        await ws.send(json.dumps({"op": "pong", "re": f["id"]}))


endpoint = negotiating(on_ping, CONTRACT)


async def test_hostile_frames_are_reported_and_the_connection_survives():
    async with serve(endpoint, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        reported: list[Exception] = []
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "raw-token", ["events.telemetry"],
                          on_error=reported.append, reconnect=False, auto_renew=False)
        try:
            await within(s.ping(), 5)
            await within(s.ping(), 5)  # the same connection still answers
            assert not s.closed
            assert len(reported) == 2 * len(HOSTILE), reported
            assert all(isinstance(e, ProtocolError) for e in reported), reported
        finally:
            await s.close()
