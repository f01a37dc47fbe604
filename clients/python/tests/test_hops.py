"""A message's ``hops`` (docs/protocol.md, "hops"): how many WebAssembly
programs deep it is, set by the broker. A delivery and a decision expose it
(``Delivery.hops``, ``Decision.hops``: 0 when absent, or when it is no
broker's, as an unusable sequence is read as none), it enters no signing
input, and what a publisher writes there is replaced."""
from __future__ import annotations

import json

import pytest
from websockets.asyncio.server import serve

from harness import eventually, negotiating, notification, raw_contract, within
from pigeon_client import Keys, connect, sign_message, verify_message_with_keys
from pigeon_client.model import Decision

NOTIFY = ["notifications.send"]


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


async def _deliveries(messages):
    """The deliveries of ``messages``, sent one deliver frame each by a raw
    endpoint to a subscription, each acked by its handler."""
    sock: list = []

    async def on_frame(ws, f):
        sock[:] = [ws]
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    got: list = []
    async with serve(negotiating(on_frame, raw_contract("x")), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await within(s.subscribe("x", got.append), 5)
            for m in messages:
                await sock[0].send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m}))
            await eventually(lambda: len(got) == len(messages), 5, "the deliveries")
        finally:
            await s.close()
    return got


async def test_a_delivered_hops_is_exposed_and_an_absent_one_is_zero():
    got = await _deliveries([msg(1, hops=3), msg(2), msg(3, hops=0), msg(4, hops=2**32 - 1)])
    assert [(d.id, d.hops) for d in got] == [("msg_1", 3), ("msg_2", 0), ("msg_3", 0), ("msg_4", 2**32 - 1)]
    assert got[0].message["hops"] == 3 and "hops" not in got[1].message


@pytest.mark.parametrize("bad", [-1, 1.5, 1.0, 2**32, "3", True, None, [3]], ids=repr)
async def test_a_hops_that_is_no_brokers_reads_as_zero(bad):
    (d,) = await _deliveries([msg(1, hops=bad)])
    assert d.hops == 0
    assert d.message["hops"] == bad, "the message holds what the server sent"


def test_a_decisions_hops():
    for message, want in [({"id": "m", "hops": 3}, 3), ({"id": "m"}, 0), ({"id": "m", "hops": True}, 0),
                          ({"id": "m", "hops": -1}, 0), ({"id": "m", "hops": 2**32}, 0)]:
        assert Decision.from_wire({"status": "accepted", "message": message}).hops == want, message


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
