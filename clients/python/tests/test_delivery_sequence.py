"""A push delivery whose message ``sequence`` the client cannot hold
exactly (present, and not an integer of 1 to 2^64-1: a float, a string, a
bool, 0, a negative, 2^64 or beyond) was handed to the handler all the
same, and answered: its ack or nack named the message id without a
sequence, which settles whichever message holds the id now, a newer one
published under it once retention trimmed the one delivered. Such a
delivery is now refused as the TypeScript client refuses it (and as the
Python client already refused one whose ``hops`` is no broker's): not
handed over, not answered (the server's ack wait gives it back), reported
to ``on_error`` (``ProtocolError``), and it moves no resume position; the
deliveries after it go on. A refused delivery at most once no longer moves
the resume position either: one with a forged ``hops`` and a huge
sequence made the next resume skip every real message.

A sequence of 2^64-1, which the wire holds, was answered without it (the
client kept sequences up to 2^64-2 only, for its resume arithmetic): a
push or a pull answer now names it, and ``sequence=2**64-1`` is taken.

Each refusal test failed before the fix."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.server import serve

from harness import SubscribingEndpoint as Endpoint, eventually, negotiating, raw_contract, within
from pigeon_client import ProtocolError, connect
from pigeon_client.subscription import _settle_body

CONTRACT = raw_contract("x")
MAX = 2**64 - 1


def message_text(mid: str, sequence: str | None, hops: str | None = None) -> str:
    """A message's JSON text with ``sequence`` (and ``hops``) written as the
    literal given (None: left out), so that values json.dumps cannot write
    (1e400) go on the wire as a server would send them."""
    parts = [f'"id":{json.dumps(mid)}', '"subject":"x"', '"data":{}']
    if sequence is not None:
        parts.append(f'"sequence":{sequence}')
    if hops is not None:
        parts.append(f'"hops":{hops}')
    return "{" + ",".join(parts) + "}"


async def run(messages: list[str], mode: str | None, batch: bool, want: int,
              answered: int) -> tuple[list[Any], list[Any], Endpoint, Any]:
    """A subscription (``ack=mode``) whose handler records and acks the
    deliveries of ``messages``, sent in one go after it is subscribed; once
    ``want`` are handled and ``answered`` acks sent, the connection is cut
    and the session resumes. Returns the deliveries handled, the errors
    reported, the endpoint and the resumed subscribe's ``start``."""
    ep = Endpoint()
    handled: list[Any] = []
    reported: list[Any] = []
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=reported.append,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await within(s.subscribe("x", handled.append, ack=mode), 5)
            await ep.deliver(messages, batch)
            await within(s.ping(), 5)  # every frame sent before the pong was read
            await eventually(lambda: len(handled) >= want and len(ep.answered()) >= answered, 5, "the deliveries")
            await within(s.ping(), 5)  # an ack of a delivery handled late was sent
            start = await ep.resume_start(s)
        finally:
            await s.close(timeout=1)
    return handled, reported, ep, start


# (literal on the wire, the value the error's details name)
BAD_SEQUENCES = [
    ("1.5", "float"),
    ("3.0", "float"),
    ("1e400", "float"),
    ('"3"', "str"),
    ('""', "str"),
    ("true", "bool"),
    ("false", "bool"),
    ("-1", -1),
    ("0", 0),
    ("18446744073709551616", 2**64),
    ("1000000000000000000000000", 10**24),
    ("[3]", "list"),
    ('{"n":3}', "dict"),
]

MODES = [None, "none"]


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
@pytest.mark.parametrize("mode", MODES, ids=["acked", "at-most-once"])
@pytest.mark.parametrize(("literal", "named"), BAD_SEQUENCES, ids=[b[0] for b in BAD_SEQUENCES])
async def test_a_delivery_whose_sequence_is_not_held_is_refused_unanswered_and_never_resumed_from(
        literal, named, mode, batch):
    good = message_text("msg_good", "3")
    handled, reported, ep, start = await run([message_text("msg_bad", literal), good], mode, batch,
                                             want=1, answered=0 if mode else 1)
    assert [d.id for d in handled] == ["msg_good"], "the refused delivery is not handed over; the next one is"
    want_answers = [] if mode else [("ack", "msg_good", 3)]
    assert ep.answered() == want_answers, "the refused delivery is neither acked nor nacked"
    assert len(reported) == 1, reported
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST" and "sequence" in e.message, e
    # A deliver_batch entry is named by its index (the bad one is the first).
    where = {"op": "deliver_batch", "index": 0} if batch else {"op": "deliver"}
    assert e.details == {**where, "messageId": "msg_bad", "sequence": named}
    assert start == {"sequence": 4}, "the resume goes on after the good delivery, whatever the bad one named"


@pytest.mark.parametrize("mode", MODES, ids=["acked", "at-most-once"])
async def test_a_refused_delivery_with_a_huge_sequence_moves_no_resume_position(mode):
    # The sequence is one the wire holds; the hops is no broker's, so the
    # delivery is refused, and a refused delivery counts for nothing. Before,
    # at most once took its sequence as received: the resume asked for
    # 2^64-1, past every real message.
    forged = message_text("msg_forged", str(2**64 - 2), hops="-1")
    handled, reported, ep, start = await run([message_text("msg_good", "3"), forged], mode, False,
                                             want=1, answered=0 if mode else 1)
    assert [d.id for d in handled] == ["msg_good"]
    assert [a[1] for a in ep.answered()] == ([] if mode else ["msg_good"])
    assert len(reported) == 1 and isinstance(reported[0], ProtocolError) and "hops" in reported[0].message
    assert start == {"sequence": 4}, start


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
async def test_held_sequences_are_handed_over_and_answered_with_their_own(batch):
    # 2^64-1 is the wire's highest and is named in the ack, never left out,
    # and it becomes no resume position past the wire's range. An absent or
    # null sequence was handed over and answered by the id alone: it is now
    # refused, unanswered, as a 0 is (tests/test_delivery_push.py).
    messages = [message_text("msg_max", str(MAX)), message_text("msg_absent", None),
                message_text("msg_null", "null"), message_text("msg_good", "3")]
    handled, reported, ep, start = await run(messages, None, batch, want=2, answered=2)
    assert sorted(d.id for d in handled) == ["msg_good", "msg_max"]
    assert sorted(ep.answered()) == [("ack", "msg_good", 3), ("ack", "msg_max", MAX)]
    assert [e.details.get("messageId") for e in reported] == ["msg_absent", "msg_null"], reported
    assert start == {"sequence": 4}, start


async def test_a_pull_answer_names_the_highest_sequence():
    frames: list[dict[str, Any]] = []

    async def on_frame(ws: Any, f: dict[str, Any]) -> None:
        frames.append(f)
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await within(s.ack("x", {"id": "m1", "sequence": MAX}), 5)
            await within(s.ack("x", "m2", sequence=MAX), 5)
            await within(s.nack("x", {"id": "m3", "sequence": MAX}), 5)
            with pytest.raises(ValueError):
                await s.ack("x", "m4", sequence=MAX + 1)
        finally:
            await s.close(timeout=1)
    assert [(f["op"], f["messageId"], f.get("sequence")) for f in frames] == [
        ("ack", "m1", MAX), ("ack", "m2", MAX), ("nack", "m3", MAX)]
    # The HTTP client's bodies are the same.
    assert _settle_body({"id": "m1", "sequence": MAX}) == {"messageId": "m1", "sequence": MAX}
    assert _settle_body("m1", MAX) == {"messageId": "m1", "sequence": MAX}
    for bad in (0.0, True, "1", MAX + 1, -1):
        assert _settle_body({"id": "m1", "sequence": bad}) == {"messageId": "m1"}, bad
