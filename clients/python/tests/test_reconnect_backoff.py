"""A server that accepts every connection and drops it at once (a broken
backend behind a proxy, a crash loop) must not be dialled at a fixed short
interval forever: the backoff goes on growing across reconnects until a
connection stays up as long as the longest backoff."""

from __future__ import annotations

import asyncio
import json

from websockets.asyncio.server import serve

from pigeon_client import connect

from harness import raw_contract

CONTRACT = raw_contract()


async def test_a_server_that_drops_every_connection_at_once_is_redialled_with_growing_backoff():
    conns = 0

    async def flapping(ws):
        nonlocal conns
        conns += 1
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] == "negotiate":
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": CONTRACT}))
                await asyncio.sleep(0.01)
                await ws.close(1011)
                return

    async with serve(flapping, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "raw-token", ["events.telemetry"],
                          auto_renew=False, reconnect_timeout=30, on_error=lambda e: None)
        try:
            await asyncio.sleep(2.0)
        finally:
            await s.close()
    # Growing backoff (50 ms doubling, ±50 % jitter) allows about 6 dials in
    # 2 s; a backoff that starts over after each reconnect allows 30 or more.
    assert conns <= 10, f"{conns} connections in 2 s"
