"""The fields of a pushed delivery (``deliver``, ``deliver_batch``), read as
a receive message's are (tests/test_delivery_fields.py), and as the
TypeScript and Rust clients read them.

A delivery without a ``sequence`` (absent or null) is refused as one of
sequence 0 is: the broker numbers every message it stores from 1 and writes
the number into every delivery (each comes from the log), and an ack by the
id alone settles whichever message holds the id, possibly a newer one
published under it. It was handed over and acked by its id.

A delivery whose ``attempt`` is not an integer of 1 to 2^31-1
(``MAX_ATTEMPT``, the receive rule) is refused the same way: the broker
writes an attempt into every delivery, counted from 1. Before, an absent,
null or malformed one was handed over as attempt 0, and one of up to 2^63-1
as it was.

A refused delivery is reported (``ProtocolError``: op, batch index,
messageId, the value), never handed over and never answered (the server's
ack wait gives it back), acknowledged or at most once. Each test failed
before its fix."""

from __future__ import annotations

import json
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


def entry(m: dict[str, Any], attempt: str | None) -> str:
    """A delivery's text: its attempt (JSON text; None: none) and message."""
    return "{" + ("" if attempt is None else f'"attempt":{attempt},') + '"message":' + json.dumps(m) + "}"


async def send(ep: Endpoint, entries: list[str], batch: bool) -> None:
    """Pushes the deliveries (entry texts): one deliver_batch, or a deliver
    each."""
    ws = ep.conns[-1]
    if batch:
        await ws.send('{"op":"deliver_batch","sub":"sub_1","deliveries":[' + ",".join(entries) + "]}")
        return
    for e in entries:
        await ws.send('{"op":"deliver","sub":"sub_1",' + e[1:])


class Pushing:
    """A subscription (``ack``) to a raw endpoint, its deliveries handed
    to ``handled`` as (id, attempt), its reports to ``reported``."""

    def __init__(self, ack: str) -> None:
        self.ack = ack
        self.ep = Endpoint()
        self.handled: list[tuple[str, int]] = []
        self.reported: list[Any] = []

    async def run(self, body: Any) -> None:
        async with serve(negotiating(self.ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=self.reported.append,
                                     auto_renew=False, ping_interval=None), 5)
            try:
                await within(s.subscribe("x", lambda d: self.handled.append((d.id, d.attempt)), ack=self.ack), 5)
                await body()
            finally:
                await s.close(timeout=1)


@pytest.mark.parametrize("ack", ["explicit", "none"])
@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
async def test_a_delivery_without_a_sequence_is_refused_as_one_of_sequence_0_is(batch, ack):
    p = Pushing(ack)
    ms = [message("m_a", 4), message("m_none"), message("m_null", None), message("m_zero", 0), message("m_b", 5)]
    answers = 2 if ack == "explicit" else 0

    async def body() -> None:
        await send(p.ep, [entry(m, "1") for m in ms], batch)
        await eventually(lambda: len(p.handled) == 2 and len(p.reported) == 3 and len(p.ep.answered()) == answers, 5,
                         "the deliveries and the reports")

    await p.run(body)
    assert sorted(p.handled) == [("m_a", 1), ("m_b", 1)]
    want = [("ack", "m_a", 4), ("ack", "m_b", 5)] if ack == "explicit" else []
    assert sorted(p.ep.answered()) == want, "a refused delivery is not answered"
    assert all(isinstance(e, ProtocolError) for e in p.reported), p.reported

    def where(i: int) -> dict[str, Any]:
        return {"op": "deliver_batch", "index": i} if batch else {"op": "deliver"}

    assert [e.details for e in p.reported] == [
        {**where(1), "messageId": "m_none", "sequence": "NoneType"},
        {**where(2), "messageId": "m_null", "sequence": "NoneType"},
        {**where(3), "messageId": "m_zero", "sequence": 0},
    ]


# The attempts a delivery may carry, and those it may not: the receive
# table (tests/test_delivery_fields.py, integers of 1 to 2^31-1), with an
# absent attempt as well. Each row's value is the attempt of the middle of
# three deliveries.
PUSHED: list[tuple[str, str | None, bool]] = [
    ("1", "1", True),
    ("2^31-1", str((1 << 31) - 1), True),
    ("absent", None, False),
    ("0", "0", False),
    ("negative", "-1", False),
    ("fraction", "1.5", False),
    ("integral fraction", "1.0", False),
    ("exponent", "1e0", False),
    ("2^31", str(1 << 31), False),
    ("beyond 2^53", "9007199254740993", False),
    ("2^63-1", str((1 << 63) - 1), False),
    ("a string", '"2"', False),
    ("null", "null", False),
    ("a bool", "true", False),
    ("an object", "{}", False),
]


@pytest.mark.parametrize("ack", ["explicit", "none"])
@pytest.mark.parametrize("batch", [False, True], ids=["deliver", "deliver_batch"])
async def test_a_delivery_whose_attempt_is_no_brokers_is_refused_alone(batch, ack):
    p = Pushing(ack)
    wrong: list[str] = []

    async def body() -> None:
        seq = 0
        for name, attempt, taken in PUSHED:
            p.handled.clear()
            p.reported.clear()
            p.ep.frames.clear()
            a, x, b = seq + 1, seq + 2, seq + 3
            seq += 3
            await send(p.ep, [entry(message("m_a", a), "2"), entry(message("m_x", x), attempt),
                              entry(message("m_b", b), "3")], batch)
            n = 3 if taken else 2
            answers = n if ack == "explicit" else 0
            try:
                await eventually(lambda: len(p.handled) == n and len(p.reported) == 3 - n
                                 and len(p.ep.answered()) == answers, 2, f"{name}: the deliveries")
            except AssertionError as e:
                wrong.append(f"{e}: {p.handled} {p.ep.answered()} {p.reported}")
                continue
            want_handled = [("m_a", 2), ("m_b", 3)] + ([("m_x", json.loads(attempt or "0"))] if taken else [])
            want_answered = [("ack", "m_a", a), ("ack", "m_b", b)] + ([("ack", "m_x", x)] if taken else [])
            have = (sorted(p.handled), sorted(p.ep.answered()),
                    [(type(e).__name__, e.details.get("op"), e.details.get("index"), e.details.get("messageId"))
                     for e in p.reported])
            want = (want_handled, want_answered if ack == "explicit" else [],
                    [] if taken else [("ProtocolError", "deliver_batch" if batch else "deliver", 1 if batch else None,
                                       "m_x")])
            if have != want:
                wrong.append(f"{name}: {have}")

    await p.run(body)
    assert wrong == []
