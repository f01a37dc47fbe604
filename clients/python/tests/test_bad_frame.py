"""transport.bad_frame: a raw WebSocket endpoint the test runs sends frames
the client cannot parse; each is reported, never swallowed."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, scenario, within
from pigeon_client import ProtocolError, connect

CONTRACT = raw_contract()


async def raw_endpoint(ws):
    async for raw in ws:
        f = json.loads(raw)
        if f["op"] == "negotiate":
            await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": CONTRACT, "maxFrame": 1 << 20}))
        elif f["op"] == "publish":
            kind = f["message"]["data"]["kind"]
            if kind == "garbage":
                await ws.send("this is {not json")
                await ws.send(b"\x00\x01binary")
                await ws.send("[1,2,3]")
                await ws.send(json.dumps({"op": "decision", "re": f["id"], "status": "accepted", "message": {"id": "m1"}}))
            elif kind == "bad-answer":
                # An answer of the wrong shape: the call it answers fails.
                await ws.send(json.dumps({"op": "decision", "re": f["id"], "status": 7}))
            elif kind == "wrong-op":
                await ws.send(json.dumps({"op": "pong", "re": f["id"]}))


async def test_bad_frames_are_reported():
    scenario("transport.bad_frame")
    async with serve(raw_endpoint, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        reported: list[Exception] = []
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "raw-token", ["events.telemetry"],
                          on_error=reported.append, reconnect=False)
        try:
            assert s.contract.id == "ctr_raw"
            # Frames that answer no call go to the session's error callback.
            d = await within(s.publish({"subject": "events.telemetry", "data": {"kind": "garbage"}}), 5)
            assert d.id == "m1"
            assert len(reported) == 3, reported
            assert all(isinstance(e, ProtocolError) for e in reported)
            assert "not JSON" in reported[0].message
            assert list(s.errors)[-3:] == reported
            # An answer the client cannot take fails its call.
            with pytest.raises(ProtocolError):
                await within(s.publish({"subject": "events.telemetry", "data": {"kind": "bad-answer"}}), 5)
            with pytest.raises(ProtocolError):
                await within(s.publish({"subject": "events.telemetry", "data": {"kind": "wrong-op"}}), 5)
            # The session stays usable.
            d = await within(s.publish({"subject": "events.telemetry", "data": {"kind": "garbage"}}), 5)
            assert d.id == "m1"
        finally:
            await s.close()


async def test_server_drops_connection_mid_call_fails_it():
    async def drop(ws, f):
        await ws.close(1011)

    async with serve(negotiating(drop, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}", "t", ["events.telemetry"], reconnect=False)
        from pigeon_client import TransportError

        with pytest.raises(TransportError):
            await within(s.ping(), 5)
        await s.close()
        await asyncio.sleep(0)


async def test_contract_not_renewable_after_reconnect_is_an_error():
    """After a dropped connection the session dials again; a negotiation the
    server now refuses ends the session with that error, surfaced to the
    running subscription and every later call, never a silent hang."""
    conns = 0

    async def endpoint(ws):
        nonlocal conns
        conns += 1
        first = conns == 1
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] == "negotiate":
                if first:
                    await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": CONTRACT}))
                else:
                    await ws.send(json.dumps({"op": "error", "re": f["id"], "error": {
                        "code": "NO_PERMITTED_SUBJECTS", "message": "no requested subject is permitted", "details": {}}}))
            elif f["op"] == "subscribe":
                await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
                await ws.close(1011)  # the connection drops
                return

    from pigeon_client import ContractError

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        reported: list[Exception] = []
        s = await connect(f"ws://127.0.0.1:{port}", "t", ["events.telemetry"], on_error=reported.append)
        sub = await s.subscribe("events.telemetry")
        with pytest.raises(ContractError) as e:
            await within(sub.wait(), 10)
        assert e.value.code == "NO_PERMITTED_SUBJECTS"
        with pytest.raises(ContractError):
            await s.publish({"subject": "events.telemetry", "data": {}})
        with pytest.raises(ContractError):
            await s.wait_connected(1)
        assert any(getattr(x, "code", "") == "NO_PERMITTED_SUBJECTS" for x in reported)
        assert conns >= 2
        await s.close()


def test_http_server_closing_mid_request_is_a_transport_error():
    import socket
    import threading

    from pigeon_client import HttpClient, TransportError

    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]

    def accept_and_close():
        c, _ = lsock.accept()
        c.recv(65536)
        c.close()  # closes mid-request, no answer

    t = threading.Thread(target=accept_and_close, daemon=True)
    t.start()
    try:
        with pytest.raises(TransportError):
            HttpClient(f"http://127.0.0.1:{port}", "t", timeout=5).subjects()
    finally:
        t.join(5)
        lsock.close()


async def test_acks_gather_into_message_ids_frames():
    """Acks that gather while an ack frame is answered leave as one frame
    with messageIds; the subscription asks for batched deliveries."""
    acks: list[dict] = []
    subscribe_frames: list[dict] = []

    async def on_frame(ws, f):
        async def answer_later():
            await asyncio.sleep(0.02)
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

        if f["op"] == "subscribe":
            subscribe_frames.append(f)
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_9"}))
            ds = [{"attempt": 1, "message": {"id": f"msg_{i}", "sequence": i + 1}} for i in range(50)]
            await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_9", "deliveries": ds}))
        elif f["op"] == "ack":
            acks.append(f)
            asyncio.ensure_future(answer_later())

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}", "t", ["events.telemetry"], reconnect=False)
        try:
            await s.subscribe("events.telemetry", lambda d: None, max_in_flight=16)
            from harness import eventually

            await eventually(lambda: sum(len(a.get("messageIds") or [a.get("messageId")]) for a in acks) >= 50,
                             5, "50 acks")
            ids = [i for a in acks for i in (a.get("messageIds") or [a["messageId"]])]
            assert sorted(ids) == sorted(f"msg_{i}" for i in range(50))
            assert len(acks) < 50 and any("messageIds" in a for a in acks)
            assert subscribe_frames[0]["batch"] is True and subscribe_frames[0]["maxInFlight"] == 16
        finally:
            await s.close()
