"""A hostile or buggy server: a raw WebSocket endpoint of the test's own
sends what a Pigeon server never does; the client bounds what it costs."""

from __future__ import annotations

import asyncio
import json

from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, within
from pigeon_client import connect

CONTRACT = raw_contract("x")


def msg(i: int) -> dict:
    return {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}


async def test_deliveries_for_subscriptions_never_opened_cost_a_bounded_number_of_unsubscribes():
    unsubs: list[tuple] = []

    async def on_frame(ws, f):
        if f["op"] == "unsubscribe":
            unsubs.append((ws, f))  # never answered, at first
        elif f["op"] == "ping":
            for i in range(1000):
                await ws.send(json.dumps({"op": "deliver", "sub": f"sub_never_{i}", "attempt": 1, "message": msg(i)}))
            await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_never_batch",
                                      "deliveries": [{"attempt": 1, "message": msg(1)}]}))
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=lambda e: None, reconnect=False)
        try:
            await within(s.ping(), 5)
            await asyncio.sleep(0.3)
            assert 0 < len(unsubs) <= 64, f"{len(unsubs)} unsubscribes in flight for subscriptions never opened"
            # Once answered, they are forgotten: new ones may follow, as few.
            for ws, f in unsubs:
                await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
            unsubs.clear()
            await asyncio.sleep(0.1)
            await within(s.ping(), 5)
            await asyncio.sleep(0.3)
            assert 0 < len(unsubs) <= 64, f"{len(unsubs)} unsubscribes in flight"
        finally:
            for ws, f in unsubs:
                await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
            await s.close(timeout=1)


async def test_a_server_that_ignores_the_window_cannot_make_a_subscription_queue_without_end():
    acks: list[str] = []
    subscribed: list[dict] = []

    async def on_frame(ws, f):
        op = f["op"]
        if op == "subscribe":
            subscribed.append(f)
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            ds = [{"attempt": 1, "message": msg(i)} for i in range(1, 1001)]
            await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}))
        elif op == "ack":
            acks.extend(f.get("messageIds") or [f.get("messageId")])
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif op in ("nack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        reported: list[Exception] = []
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=reported.append, reconnect=False)
        try:
            gate = asyncio.Event()
            handled = 0

            async def handler(m):
                nonlocal handled
                handled += 1
                await gate.wait()

            await within(s.subscribe("x", handler, window=4), 5)
            assert subscribed[0]["window"] == 4
            await asyncio.sleep(0.3)
            gate.set()
            for _ in range(100):
                if handled and len(acks) >= handled:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            # One running and the window's four queued: the rest were left unanswered.
            assert 0 < handled <= 5, f"{handled} deliveries handled with a window of 4"
            assert any("beyond the subscription's window" in str(e) for e in reported), reported
        finally:
            await s.close(timeout=1)


def test_an_id_or_subject_of_dots_cannot_move_an_http_call_to_another_route():
    import socket

    from pigeon_client import HttpClient, PigeonError

    # A server that records what reaches it: nothing should.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    h = HttpClient(f"http://127.0.0.1:{port}", "admin-token", timeout=1)
    from pigeon_client.ws import Contract

    h.contract = Contract.from_wire(CONTRACT)  # receive and release need one
    calls = [
        lambda: h.remove_role("..", "admin"),  # /v1/roles/admin once the dots are removed
        lambda: h.remove_role("acct", ".."),  # /v1/accounts/acct
        lambda: h.add_role("..", "admin"),
        lambda: h.keys("."),
        lambda: h.keys(""),
        lambda: h.release(".."),
        lambda: h.receive(".."),
        lambda: h.get_contract(".."),
    ]
    try:
        for call in calls:
            try:
                call()
            except PigeonError as e:
                assert e.code == "INVALID_ARGUMENT", e
            else:
                raise AssertionError("no error")
        try:
            srv.accept()
        except socket.timeout:
            pass
        else:
            raise AssertionError("a call was sent")
    finally:
        srv.close()


async def test_a_server_that_upgrades_and_never_answers_negotiate_fails_connect_at_the_open_timeout():
    from pigeon_client import TransportError

    async def silent(ws):
        async for _ in ws:
            pass  # takes every frame, answers none

    async with serve(silent, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False, open_timeout=0.3), 5)
        except TransportError as e:
            assert "did not answer negotiate" in e.message, e
        else:
            raise AssertionError("connected")
        assert loop.time() - started < 3


async def test_a_contract_whose_subjects_are_not_a_list_is_a_protocol_error():
    from pigeon_client import ProtocolError

    async def ignore(ws, f):
        pass

    async with serve(negotiating(ignore, {**CONTRACT, "subjects": 5}), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        try:
            await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False), 5)
        except ProtocolError as e:
            assert "subjects" in e.message
        else:
            raise AssertionError("connected")


async def test_a_call_the_server_never_answers_fails_at_the_call_timeout_and_its_late_answer_is_dropped():
    from pigeon_client import RequestTimeoutError

    held = []

    async def on_frame(ws, f):
        if f["op"] == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))
        else:
            held.append((ws, f))  # never answered, at first

    errors = []
    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(
            connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False, ping_interval=None, call_timeout=0.3, on_error=errors.append), 5
        )
        try:
            for call in (lambda: s.publish({"subject": "x", "data": {}}), lambda: s.receive("x")):
                try:
                    await within(call(), 5)
                except RequestTimeoutError as e:
                    assert e.code == "REQUEST_TIMEOUT"
                else:
                    raise AssertionError("answered")
            assert len(held) == 2
            for ws, f in held:
                await ws.send(json.dumps({"op": "error", "re": f["id"], "error": {"code": "INTERNAL", "message": "late"}}))
            await within(s.ping(), 5)
            assert errors == []
        finally:
            await s.close()


def test_call_timeout_must_be_positive():
    for v in (0, -1, float("nan"), float("inf")):
        try:
            asyncio.run(connect("ws://127.0.0.1:1/v1/ws", "t", ["x"], reconnect=False, call_timeout=v))
        except ValueError:
            pass
        else:
            raise AssertionError(f"call_timeout={v!r} accepted")
