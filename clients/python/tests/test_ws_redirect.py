"""A WebSocket redirect must not hand the bearer token to another origin.
websockets drops ``Authorization`` on a cross-origin redirect, but not the
``pigeon.bearer.<token>`` subprotocol: with ``subprotocol_auth=True`` the
session refuses to follow a redirect to another origin."""

from __future__ import annotations

import http

import pytest
from websockets.asyncio.server import serve

from pigeon_client import TransportError, connect

TOKEN = "s3cr3t-bearer-value"


async def test_a_redirect_to_another_origin_never_carries_the_subprotocol_token():
    seen: list[str] = []

    def record(conn, request):
        seen.append(request.headers.get("Sec-WebSocket-Protocol", ""))
        return conn.respond(http.HTTPStatus.FORBIDDEN, "no\n")

    async def never(ws):
        pass

    async with serve(never, "127.0.0.1", 0, process_request=record) as other:
        other_port = other.sockets[0].getsockname()[1]

        def redirect(conn, request):
            r = conn.respond(http.HTTPStatus.FOUND, "")
            r.headers["Location"] = f"ws://localhost:{other_port}/v1/ws"
            return r

        async with serve(never, "127.0.0.1", 0, process_request=redirect) as first:
            port = first.sockets[0].getsockname()[1]
            with pytest.raises(TransportError):
                await connect(f"ws://127.0.0.1:{port}/v1/ws", TOKEN, ["events.telemetry"],
                              reconnect=False, subprotocol_auth=True)
    assert not [p for p in seen if TOKEN in p], seen
