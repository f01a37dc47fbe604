"""Two holes of push delivery.

A ``deliver_batch`` frame whose ``deliveries`` held an entry that is no
object (a number, a string, null, a list) had that entry skipped without a
word, and one whose ``deliveries`` was no list was reported as a
``deliver_batch`` "for unknown sub", naming neither what was wrong nor
where. Each bad entry is now reported to ``on_error`` as the TypeScript
client reports it (``ProtocolError``, ``BAD_REQUEST``, details naming the
op and the entry's index), and the good entries of the same frame are
still handed over and answered; a ``deliveries`` that is no list is
reported as such.

An ack or a nack of a push delivery named the id and sequence read from
``d.message`` when it was sent, so a handler (or a middleware) that edited
its delivery's message dict changed what its answer named: it could settle
another message published under the same id, and leave its own sequence
counted as unhandled for the next resume. The id and sequence the answer
names are now taken when the delivery is handed over.

Each test failed before the fix."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from websockets.asyncio.server import serve

from harness import SubscribingEndpoint as Endpoint, eventually, negotiating, raw_contract, within
from pigeon_client import ProtocolError, RetryAfter, connect

CONTRACT = raw_contract("x")


def message(mid: str, sequence: int) -> dict[str, Any]:
    return {"id": mid, "subject": "x", "data": {}, "sequence": sequence}


async def session(ep: Endpoint, reported: list[Any], srv: Any) -> Any:
    port = srv.sockets[0].getsockname()[1]
    return await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=reported.append,
                                auto_renew=False, ping_interval=None), 5)


# --- deliver_batch entries that are no object ---

BAD_ENTRIES: list[tuple[str, Any]] = [
    ("number", 7),
    ("string", "msg_x"),
    ("null", None),
    ("list", [{"attempt": 1, "message": message("msg_x", 9)}]),
    ("bool", True),
]


@pytest.mark.parametrize("mode", [None, "none"], ids=["acked", "at-most-once"])
async def test_each_deliver_batch_entry_that_is_no_object_is_reported_and_the_good_ones_go_on(mode):
    ep = Endpoint()
    handled: list[Any] = []
    reported: list[Any] = []
    entries: list[Any] = [{"attempt": 1, "message": message("msg_a", 3)}]
    entries += [e for _, e in BAD_ENTRIES]
    entries.append({"attempt": 1, "message": message("msg_b", 4)})
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await session(ep, reported, srv)
        try:
            await within(s.subscribe("x", handled.append, ack=mode), 5)
            await ep.send({"op": "deliver_batch", "sub": "sub_1", "deliveries": entries})
            await within(s.ping(), 5)  # the batch was read
            want_answers = 0 if mode else 2
            await eventually(lambda: len(handled) == 2 and len(ep.answered()) == want_answers, 5, "the good entries")
        finally:
            await s.close(timeout=1)
    assert [d.id for d in handled] == ["msg_a", "msg_b"], "the good entries of the frame are handed over"
    if not mode:
        assert sorted(ep.answered()) == [("ack", "msg_a", 3), ("ack", "msg_b", 4)]
    assert len(reported) == len(BAD_ENTRIES), reported
    for i, e in enumerate(reported, start=1):
        assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST", e
        assert e.details == {"op": "deliver_batch", "index": i}, e.details
        assert "deliver_batch" in e.message and f"delivery {i}" in e.message, e.message


@pytest.mark.parametrize(("name", "deliveries"), [
    ("absent", ...),
    ("null", None),
    ("object", {"attempt": 1, "message": message("msg_x", 9)}),
    ("string", "msg_x"),
    ("number", 1),
])
async def test_a_deliver_batch_whose_deliveries_is_no_list_is_reported_as_such(name, deliveries):
    ep = Endpoint()
    handled: list[Any] = []
    reported: list[Any] = []
    frame: dict[str, Any] = {"op": "deliver_batch", "sub": "sub_1"}
    if deliveries is not ...:
        frame["deliveries"] = deliveries
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await session(ep, reported, srv)
        try:
            await within(s.subscribe("x", handled.append), 5)
            await ep.send(frame)
            # The session goes on: a delivery after the bad frame is handled.
            await ep.send({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": message("msg_after", 5)})
            await within(s.ping(), 5)
            await eventually(lambda: len(handled) == 1 and len(ep.answered()) == 1, 5, "the next delivery")
        finally:
            await s.close(timeout=1)
    assert [d.id for d in handled] == ["msg_after"]
    assert ep.answered() == [("ack", "msg_after", 5)]
    assert len(reported) == 1, reported
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST", e
    assert e.details == {"op": "deliver_batch"}, e.details
    assert "deliveries" in e.message and "unknown sub" not in e.message, e.message


# --- the answer names the delivery handed over, whatever its message dict says now ---


def rewrite(m: dict[str, Any]) -> None:
    m["id"], m["sequence"] = "msg_other", 99


def drop(m: dict[str, Any]) -> None:
    del m["id"], m["sequence"]


def garble(m: dict[str, Any]) -> None:
    m["id"], m["sequence"] = 7, "3"


EDITS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("rewritten", rewrite),
    ("deleted", drop),
    ("garbled", garble),
]


@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
@pytest.mark.parametrize(("how", "want_op"), [("return", "ack"), ("raise", "nack"), ("retry", "nack")])
@pytest.mark.parametrize("edit", [e for _, e in EDITS], ids=[n for n, _ in EDITS])
async def test_a_handler_that_edits_its_message_still_answers_the_delivery_it_was_given(edit, how, want_op, batch):
    ep = Endpoint()
    seen: list[tuple[str, int]] = []
    reported: list[Any] = []

    def handler(d: Any) -> None:
        edit(d.message)
        seen.append((d.id, d.attempt))
        if how == "raise":
            raise RuntimeError("failed")
        if how == "retry":
            raise RetryAfter(1)

    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await session(ep, reported, srv)
        try:
            await within(s.subscribe("x", handler), 5)
            m = message("msg_1", 3)
            if batch:
                await ep.send({"op": "deliver_batch", "sub": "sub_1", "deliveries": [{"attempt": 2, "message": m}]})
            else:
                await ep.send({"op": "deliver", "sub": "sub_1", "attempt": 2, "message": m})
            await eventually(lambda: len(ep.answered()) == 1, 5, "the answer")
            start = await ep.resume_start(s)
        finally:
            await s.close(timeout=1)
    assert ep.answered() == [(want_op, "msg_1", 3)], "the answer names the id and sequence delivered"
    assert seen == [("msg_1", 2)], "d.id and d.attempt are those handed over"
    # An ack settles sequence 3: the resume goes on after it. A nack keeps
    # it unhandled: the resume asks for it again.
    assert start == ({"sequence": 4} if want_op == "ack" else {"sequence": 3}), start
    assert reported == []


@pytest.mark.parametrize("op", ["ack", "nack"])
async def test_an_iterated_delivery_edited_before_its_answer_still_answers_what_was_delivered(op):
    ep = Endpoint()
    reported: list[Any] = []
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await session(ep, reported, srv)
        try:
            sub = await within(s.subscribe("x"), 5)
            await ep.send({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": message("msg_1", 3)})
            d = await within(sub.__anext__(), 5)
            rewrite(d.message)
            await within(d.ack() if op == "ack" else d.nack(), 5)
        finally:
            await s.close(timeout=1)
    assert ep.answered() == [(op, "msg_1", 3)]
    assert d.id == "msg_1"
    assert reported == []

