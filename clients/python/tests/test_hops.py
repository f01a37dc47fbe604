"""A message's ``hops`` (docs/protocol.md, "hops"): how many WebAssembly
programs deep it is, set by the broker. A delivery and a decision expose it
(``Delivery.hops``, ``Decision.hops``: 0 when absent), it enters no signing
input, and what a publisher writes there is replaced. A delivered,
received, replayed or reply message whose ``hops`` is no broker's (not an
integer of 0 to 2^32-1) is refused as the Go, TypeScript and Rust clients
refuse it: a ``ProtocolError`` (to ``on_error`` for a message left out of a
delivery or a list, failing the call for a reply), never handed over."""
from __future__ import annotations

import json

import pytest
from websockets.asyncio.server import serve

from harness import eventually, http_answering, negotiating, notification, raw_contract, raw_session, within
from pigeon_client import HttpClient, Keys, ProtocolError, connect, sign_message, verify_message_with_keys
from pigeon_client.model import Contract, Decision

NOTIFY = ["notifications.send"]


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


async def _deliveries(messages, want=None, reported=None, batch=False):
    """The deliveries of ``messages``, sent one deliver frame each (or one
    deliver_batch) by a raw endpoint to a subscription, each acked by its
    handler, once ``want`` of them (default: all) came; the errors the
    session reported go to ``reported``."""
    sock: list = []
    want = len(messages) if want is None else want
    reported = [] if reported is None else reported

    async def on_frame(ws, f):
        sock[:] = [ws]
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
        elif f["op"] == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    got: list = []
    async with serve(negotiating(on_frame, raw_contract("x")), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                 auto_renew=False, ping_interval=None, on_error=reported.append), 5)
        try:
            await within(s.subscribe("x", got.append), 5)
            if batch:
                await sock[0].send(json.dumps({"op": "deliver_batch", "sub": "sub_1",
                                               "deliveries": [{"attempt": 1, "message": m} for m in messages]}))
            for m in [] if batch else messages:
                await sock[0].send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m}))
            await within(s.ping(), 5)  # every frame sent before the pong was read
            await eventually(lambda: len(got) == want, 5, "the deliveries")
        finally:
            await s.close()
    return got


async def test_a_delivered_hops_is_exposed_and_an_absent_one_is_zero():
    got = await _deliveries([msg(1, hops=3), msg(2), msg(3, hops=0), msg(4, hops=2**32 - 1), msg(5, hops=None)])
    assert [(d.id, d.hops) for d in got] == [
        ("msg_1", 3), ("msg_2", 0), ("msg_3", 0), ("msg_4", 2**32 - 1), ("msg_5", 0)]
    assert got[0].message["hops"] == 3 and "hops" not in got[1].message


BAD_HOPS = [-1, 1.5, 1.0, 2**32, "3", True, False, [3], {"n": 3}]


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
@pytest.mark.parametrize("bad", BAD_HOPS, ids=repr)
async def test_a_delivery_whose_hops_is_no_brokers_is_refused(bad, batch):
    reported: list = []
    got = await _deliveries([msg(1, hops=bad), msg(2, hops=1)], want=1, reported=reported, batch=batch)
    assert [(d.id, d.hops) for d in got] == [("msg_2", 1)], "the other delivery goes on"
    assert len(reported) == 1 and isinstance(reported[0], ProtocolError), reported
    assert reported[0].code == "BAD_REQUEST" and "hops" in reported[0].message
    assert reported[0].details["messageId"] == "msg_1"


def _answering(answer):
    async def on_frame(ws, f):
        if f["op"] in ("receive", "replay"):
            await ws.send(json.dumps({"op": "messages", "re": f["id"], **answer}))
        elif f["op"] == "request":
            await ws.send(json.dumps({"op": "reply", "re": f["id"], "message": answer["messages"][0]}))
    return on_frame


@pytest.mark.parametrize("bad", BAD_HOPS, ids=repr)
async def test_a_received_replayed_or_reply_message_whose_hops_is_no_brokers_is_refused(bad):
    reported: list = []
    answer = {"messages": [msg(1, hops=bad), msg(2, hops=2)], "attempts": [1, 1]}
    async with raw_session(_answering(answer), raw_contract("x"), on_error=reported.append) as s:
        got = await within(s.receive("x"), 5)
        assert [(m["id"], m.attempt) for m in got] == [("msg_2", 1)], "left out, the attempts kept in step"
        assert [m["id"] for m in await within(s.replay("x"), 5)] == ["msg_2"]
        assert [(type(e), e.details.get("op"), e.details.get("index")) for e in reported] == [
            (ProtocolError, "receive", 0), (ProtocolError, "replay", 0)]
        with pytest.raises(ProtocolError) as e:
            await within(s.request({"subject": "x", "data": {}}), 5)
        assert "hops" in e.value.message


@pytest.mark.parametrize("bad", BAD_HOPS, ids=repr)
def test_over_http_a_message_whose_hops_is_no_brokers_is_refused(bad):
    reported: list = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5, on_error=reported.append)
        c.contract = Contract.from_wire(raw_contract("x"))
        srv.body = json.dumps({"messages": [msg(1, hops=bad), msg(2)], "attempts": [1, 1]}).encode()
        assert [m["id"] for m in c.receive("x", ack="explicit")] == ["msg_2"]
        assert [m["id"] for m in c.replay("x")] == ["msg_2"]
        assert [e.details.get("op") for e in reported] == ["receive", "replay"]
        srv.body = json.dumps({"status": "replied", "message": msg(1, hops=bad)}).encode()
        with pytest.raises(ProtocolError):
            c.request({"subject": "x", "data": {}})


def test_a_decisions_hops():
    for message, want in [({"id": "m", "hops": 3}, 3), ({"id": "m"}, 0), ({"id": "m", "hops": None}, 0),
                          ({"id": "m", "hops": 2**32 - 1}, 2**32 - 1)]:
        assert Decision.from_wire({"status": "accepted", "message": message}).hops == want, message
    # One no broker's refuses the decision, as the Go client refuses it
    # (test_publish_decisions.py).
    for hops in (True, -1, 2**32, 1.0, "1"):
        with pytest.raises(ProtocolError):
            Decision.from_wire({"status": "accepted", "message": {"id": "m", "hops": hops}})


async def test_a_signed_message_delivered_with_hops_verifies():
    k = Keys.generate()
    signed = sign_message({"subject": "x", "type": "t", "intent": "i", "data": {"text": "hi"}}, k.signing_kid, k.signing_key)
    (d,) = await _deliveries([{**signed, "sequence": 1, "hops": 3}])
    assert d.hops == 3
    verify_message_with_keys(d.message, k.public_keys())
    verify_message_with_keys({**d.message, "hops": 9}, k.public_keys())


async def test_a_hops_the_publisher_writes_is_replaced_by_the_broker(own_server):
    server = own_server.start()  # of its own: the work queue holds this message alone
    orders = await within(connect(server.ws, "orders-token", NOTIFY))
    n = await within(connect(server.ws, "notifier-token", NOTIFY))
    try:
        d = await within(orders.publish(notification(hops=9)))
        assert d.accepted and d.hops == 0 and "hops" not in d.message
        ms = await within(n.receive("notifications.send", max=10))
        mine = [m for m in ms if m.get("id") == d.id]
        assert mine, "the message published"
        assert "hops" not in mine[0]
        await within(n.ack("notifications.send", mine[0]))
    finally:
        await orders.close()
        await n.close()
