"""The bearer token stays out of the logs: the WebSocket library logs every
handshake header at DEBUG (``> Authorization: Bearer …``, and the
``pigeon.bearer.<token>`` subprotocol), so the session hands it a logger
that writes those headers with the credential replaced."""

from __future__ import annotations

import logging

import pytest
from websockets.asyncio.server import serve

from pigeon_client import connect

from harness import negotiating, raw_contract

TOKEN = "s3cr3t-bearer-value"
CONTRACT = raw_contract()


endpoint = negotiating(contract=CONTRACT)


@pytest.mark.parametrize("subprotocol_auth", [False, True])
async def test_debug_logging_of_the_handshake_never_shows_the_bearer_token(caplog, subprotocol_auth):
    caplog.set_level(logging.DEBUG)
    async with serve(endpoint, "127.0.0.1", 0, subprotocols=["pigeon.v1"]) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", TOKEN, ["events.telemetry"],
                          reconnect=False, auto_renew=False, subprotocol_auth=subprotocol_auth)
        await s.close()
    client_lines = [r.getMessage() for r in caplog.records if r.name.startswith("websockets.client")]
    # The handshake was logged, with the header but not its value.
    assert any(line.lower().startswith("> authorization") or "pigeon.bearer." in line for line in client_lines), client_lines
    # (The test's own server logs what it received; only the client's lines count.)
    assert not [line for line in client_lines if TOKEN in line]
