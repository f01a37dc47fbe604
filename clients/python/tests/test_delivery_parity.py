"""A push delivery as the TypeScript and Rust clients hand it over.

``Delivery.sequence`` is the sequence of the message delivered, taken when
the delivery is handed over (as ``id`` is, and as the answer names it):
TypeScript and Rust expose it, Python did not. A delivery whose
``sequence`` is 0 is no broker's (a subject's messages are numbered from 1,
and the broker leaves 0 out): it is refused, reported and never handed
over, in all three clients. A ``deliver_batch`` entry that is an object
holding no message object is reported with its index, as the batch's
other malformed entries are (it was reported as "deliver without a
message object", naming neither the op nor the entry).

Every other report of a refused delivery (a message id that is no
non-empty string, a sequence or hops no broker's) names its op and, in a
``deliver_batch``, the entry's index the same way: the id's report had no
details, and the others named the op ``deliver`` and no index whatever
frame held the delivery.

The sequence and index tests failed before the fix; the sequence-0 test
holds the rule the other clients now follow."""

from __future__ import annotations

from typing import Any

import pytest
from websockets.asyncio.server import serve

from harness import SubscribingEndpoint as Endpoint, eventually, negotiating, raw_contract, within
from pigeon_client import ProtocolError, connect

CONTRACT = raw_contract("x")


def message(mid: str, sequence: Any = ...) -> dict[str, Any]:
    m: dict[str, Any] = {"id": mid, "subject": "x", "data": {}}
    if sequence is not ...:
        m["sequence"] = sequence
    return m


async def session(srv: Any, reported: list[Any]) -> Any:
    port = srv.sockets[0].getsockname()[1]
    return await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=reported.append,
                                auto_renew=False, ping_interval=None), 5)


def frames(ms: list[Any], batch: bool) -> list[dict[str, Any]]:
    """The frames pushing the deliveries of ms: one deliver_batch, or a
    deliver each."""
    if batch:
        return [{"op": "deliver_batch", "sub": "sub_1", "deliveries": [{"attempt": 1, "message": m} for m in ms]}]
    return [{"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m} for m in ms]


async def push(handler: Any, sent: list[dict[str, Any]], answers: int, reports: int) -> tuple[Endpoint, list[Any]]:
    """Pushes the frames sent to a subscription handled by handler, and
    waits for the server to be answered answers times and the client to
    report reports refusals; returns the server's endpoint and the
    reports."""
    ep = Endpoint()
    reported: list[Any] = []
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await session(srv, reported)
        try:
            await within(s.subscribe("x", handler), 5)
            for f in sent:
                await ep.send(f)
            await eventually(lambda: len(ep.answered()) == answers and len(reported) == reports, 5,
                             f"{answers} answers and {reports} reports")
        finally:
            await s.close(timeout=1)
    return ep, reported


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
async def test_a_delivery_tells_its_sequence_as_handed_over(batch):
    seen: list[tuple[str, int]] = []
    read_only: list[bool] = []

    def handler(d: Any) -> None:
        d.message["sequence"] = 99  # an edit changes neither the sequence told nor the one answered
        seen.append((d.id, d.sequence))
        try:
            d.sequence = 5
            read_only.append(False)
        except AttributeError:
            read_only.append(True)

    # A delivery without a sequence is refused as one of 0 is (it was
    # handed over as sequence 0 and acked by its id alone): see
    # tests/test_delivery_push.py.
    ms = [message("msg_a", 3), message("msg_b", (1 << 64) - 1)]
    ep, reported = await push(handler, frames(ms, batch), 2, 0)
    assert sorted(seen) == [("msg_a", 3), ("msg_b", (1 << 64) - 1)]
    assert sorted(ep.answered()) == [("ack", "msg_a", 3), ("ack", "msg_b", (1 << 64) - 1)]
    assert reported == []
    assert read_only == [True] * 2, "Delivery.sequence cannot be set"


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
async def test_a_delivery_of_sequence_0_is_refused_and_never_handed_over(batch):
    handled: list[Any] = []
    ep, reported = await push(handled.append, frames([message("msg_zero", 0), message("msg_ok", 4)], batch), 1, 1)
    assert [d.id for d in handled] == ["msg_ok"]
    assert ep.answered() == [("ack", "msg_ok", 4)], "the refused delivery is not answered"
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.details.get("sequence") == 0, e


@pytest.mark.parametrize("entry", [{"attempt": 1}, {"attempt": 1, "message": None}, {"attempt": 1, "message": "msg_x"},
                                   {"attempt": 1, "message": [message("msg_x", 9)]}],
                         ids=["absent", "null", "string", "list"])
async def test_a_deliver_batch_entry_without_a_message_object_is_reported_with_its_index(entry):
    handled: list[Any] = []
    _, reported = await push(handled.append, [{"op": "deliver_batch", "sub": "sub_1", "deliveries": [
        {"attempt": 1, "message": message("msg_a", 3)}, entry, {"attempt": 1, "message": message("msg_b", 4)}]}], 2, 1)
    assert [d.id for d in handled] == ["msg_a", "msg_b"]
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST", e
    assert e.details == {"op": "deliver_batch", "index": 1}, e.details
    assert "deliver_batch" in e.message and "delivery 1" in e.message, e.message


# Each way a delivery's message can be refused: (case, the message).
REFUSED_MESSAGES: list[tuple[str, Any]] = [
    ("no message object", None),
    ("an id that is a number", {"id": 5, "subject": "x", "data": {}, "sequence": 9}),
    ("an empty id", {"id": "", "subject": "x", "data": {}, "sequence": 9}),
    ("no id", {"subject": "x", "data": {}, "sequence": 9}),
    ("a sequence of 0", message("msg_x", 0)),
    ("a sequence that is a string", message("msg_x", "9")),
    ("a hops that is no broker's", {**message("msg_x", 9), "hops": -1}),
]


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
@pytest.mark.parametrize(("case", "bad"), REFUSED_MESSAGES, ids=[c for c, _ in REFUSED_MESSAGES])
async def test_every_refusal_of_a_delivery_names_its_op_and_its_batch_entry(case, bad, batch):
    # Each report of a refused delivery names the frame's op, and in a
    # deliver_batch the entry's index, as the report of an entry holding no
    # message object does: before, an id that is no string was reported
    # with no details, and a sequence or hops no broker's as a "deliver"
    # without the index, whatever frame held it.
    handled: list[Any] = []
    _, reported = await push(handled.append, frames([message("msg_a", 3), bad, message("msg_b", 4)], batch), 2, 1)
    assert [d.id for d in handled] == ["msg_a", "msg_b"]
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST", e
    want = {"op": "deliver_batch", "index": 1} if batch else {"op": "deliver"}
    assert {k: e.details[k] for k in ("op", "index") if k in e.details} == want, e.details
