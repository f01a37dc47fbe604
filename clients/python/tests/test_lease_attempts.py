"""A pull lease is the principal's, not the connection's: once worker A's
lease of a job ran out and worker B of the same principal leased it again,
A's late ack settled B's lease (the job was lost while B ran it) and A's late
nack handed it out a third time. The receive answer now names the attempt of
each lease (``attempts``, docs/protocol.md "receive", docs/http.md), and an
ack or nack naming an older attempt is refused (``ACK_NOT_ALLOWED``). The
client hands each received message out with its attempt
(``ReceivedMessage.attempt``) and sends it back; an answer whose ``attempts``
cannot be told to its messages is refused, never mis-assigned."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from harness import http_answering, notification, raw_contract, raw_session, within
from pigeon_client import HttpClient, PigeonError, ProtocolError, ReceivedMessage, connect
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")
NOTIFY = ["notifications.send"]
SUBJECT = "notifications.send"


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


def answering(answer: dict, frames: list):
    """A raw endpoint's frame handler: a receive or a replay is answered
    with ``answer`` (a messages frame's body), every other frame recorded
    and answered ok."""

    async def on_frame(ws, f):
        if f["op"] in ("receive", "replay"):
            await ws.send(json.dumps({"op": "messages", "re": f["id"], **answer}))
            return
        frames.append({k: v for k, v in f.items() if k != "id"})
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    return on_frame


async def test_a_ws_receive_hands_out_each_attempt_and_the_answers_send_it_back():
    frames: list = []
    answer = {"messages": [msg(1), msg(2)], "attempts": [2, 1]}
    async with raw_session(answering(answer, frames), CONTRACT) as s:
        got = await within(s.receive("x", 10), 5)
        assert [(m["id"], m.attempt) for m in got] == [("msg_1", 2), ("msg_2", 1)]
        assert all(isinstance(m, ReceivedMessage) and isinstance(m, dict) for m in got)
        assert got[0] == msg(1) and "attempt" not in got[0], "the envelope is as sent"
        await within(s.ack("x", got[0]), 5)
        await within(s.nack("x", got[1], 0), 5)
        await within(s.ack("x", "msg_3", sequence=3, attempt=4), 5)
        await within(s.ack("x", got[0], attempt=0), 5)  # 0: none sent, as v1
        await within(s.ack("x", dict(got[0])), 5)  # a copy keeps no attempt
        for bad, exc in [(True, TypeError), (1.0, TypeError), ("2", TypeError), (-1, ValueError), (2**31, ValueError),
                         (2**63, ValueError)]:
            with pytest.raises(exc):
                await s.ack("x", got[0], attempt=bad)
            with pytest.raises(exc):
                await s.nack("x", got[0], attempt=bad)
            with pytest.raises(exc):
                await s.ack("x", ReceivedMessage(msg(1), bad))  # one the caller made: checked alike
    assert frames == [
        {"op": "ack", "subject": "x", "messageId": "msg_1", "sequence": 1, "attempt": 2},
        {"op": "nack", "subject": "x", "messageId": "msg_2", "sequence": 2, "attempt": 1, "delayMs": 0},
        {"op": "ack", "subject": "x", "messageId": "msg_3", "sequence": 3, "attempt": 4},
        {"op": "ack", "subject": "x", "messageId": "msg_1", "sequence": 1},
        {"op": "ack", "subject": "x", "messageId": "msg_1", "sequence": 1},
    ]


async def test_a_receive_without_attempts_hands_out_attempt_zero_and_sends_none():
    frames: list = []
    async with raw_session(answering({"messages": [msg(1)]}, frames), CONTRACT) as s:
        (m,) = await within(s.receive("x"), 5)
        assert m.attempt == 0
        await within(s.ack("x", m), 5)
    assert frames == [{"op": "ack", "subject": "x", "messageId": "msg_1", "sequence": 1}]


async def test_an_entry_that_is_not_a_message_does_not_shift_the_attempts():
    reported: list = []
    async with raw_session(answering({"messages": [msg(1), 7, msg(3)], "attempts": [1, 2, 3]}, []), CONTRACT,
                           on_error=reported.append) as s:
        got = await within(s.receive("x"), 5)
        assert [(m["id"], m.attempt) for m in got] == [("msg_1", 1), ("msg_3", 3)]
    assert len(reported) == 1, "the entry left out is reported, as one whose hops is no broker's"
    assert isinstance(reported[0], ProtocolError)
    assert reported[0].details == {"op": "receive", "index": 1, "entry": "int"}


# Attempts that cannot be told to the messages. (An entry that is no
# lease's attempt refuses its message alone: test_delivery_fields.py.)
# ``null`` is no list either: no broker sends it (it writes the list, or
# leaves the member out when nothing was leased), and reading it as absent
# would hand the messages out as leased by no one, their answers naming no
# attempt. Each row: the attempts, and the error's message and details
# (the TypeScript client's, its values as Python names them).
BAD_ATTEMPTS = [
    pytest.param([1], "holding 1 attempts for 2 messages", {"attempts": 1, "messages": 2}, id="fewer"),
    pytest.param([1, 1, 1], "holding 3 attempts for 2 messages", {"attempts": 3, "messages": 2}, id="more"),
    pytest.param({"0": 1, "1": 1}, "whose attempts is not a list", {"attempts": "dict"}, id="object"),
    pytest.param(2, "whose attempts is not a list", {"attempts": "int"}, id="number"),
    pytest.param(None, "whose attempts is not a list", {"attempts": "NoneType"}, id="null"),
]


def _check_bad_attempts(e: ProtocolError, why: str, details: dict) -> None:
    assert e.code == "BAD_REQUEST"
    assert e.message == f"the server sent a receive answer {why}"
    assert e.details == {"op": "receive", **details}


@pytest.mark.parametrize("attempts,why,details", BAD_ATTEMPTS)
async def test_a_ws_receive_with_malformed_attempts_is_a_bad_frame(attempts, why, details):
    answer = {"messages": [msg(1), msg(2)], "attempts": attempts}
    async with raw_session(answering(answer, []), CONTRACT) as s:
        with pytest.raises(ProtocolError) as e:
            await within(s.receive("x"), 5)
        _check_bad_attempts(e.value, why, details)
        assert await within(s.replay("x"), 5) == [msg(1), msg(2)], "a replay leases nothing: attempts unread"


def _http(srv) -> HttpClient:
    c = HttpClient(srv.url, "t", timeout=5)
    c.contract = Contract.from_wire(CONTRACT)
    return c


def test_an_http_receive_hands_out_each_attempt_and_the_answers_send_it_back():
    with http_answering() as srv:
        c = _http(srv)
        srv.body = json.dumps({"messages": [msg(1), msg(2)], "attempts": [3, 1]}).encode()
        got = c.receive("x", ack="explicit")
        assert [(m["id"], m.attempt) for m in got] == [("msg_1", 3), ("msg_2", 1)]
        srv.body = b"{}"
        c.ack("x", got[0])
        c.nack("x", got[1], delay=0.01)
        c.nack("x", "msg_5", sequence=5, attempt=2)
        with pytest.raises(TypeError):
            c.ack("x", got[0], attempt=True)
        with pytest.raises(ValueError):
            c.nack("x", got[0], attempt=-1)
        assert [json.loads(b) for b in srv.bodies[1:]] == [
            {"messageId": "msg_1", "sequence": 1, "attempt": 3},
            {"messageId": "msg_2", "sequence": 2, "attempt": 1, "delayMs": 10},
            {"messageId": "msg_5", "sequence": 5, "attempt": 2},
        ]


@pytest.mark.parametrize("attempts,why,details", BAD_ATTEMPTS)
def test_an_http_receive_with_malformed_attempts_is_a_bad_frame(attempts, why, details):
    with http_answering() as srv:
        c = _http(srv)
        srv.body = json.dumps({"messages": [msg(1), msg(2)], "attempts": attempts}).encode()
        with pytest.raises(ProtocolError) as e:
            c.receive("x", ack="explicit")
        _check_bad_attempts(e.value, why, details)


async def _take(receive, ack, mid: str, deadline: float):
    """Receives until message ``mid`` comes (acking the others handed out:
    leftovers of other tests on the shared subject) and returns it."""
    while time.monotonic() < deadline:
        mine = None
        for m in await receive():
            if m["id"] == mid:
                mine = m
            else:
                await ack(m)
        if mine is not None:
            return mine
        await asyncio.sleep(0.05)
    raise AssertionError(f"{mid} never came")


async def test_over_http_a_late_answer_of_an_older_attempt_settles_nothing(server):
    """Two HTTP workers of one principal; A's lease runs out (the 2 s ack
    wait of notifications.send) and B leases the job again: A's late ack
    and nack are refused, B's ack is taken."""
    orders = await within(connect(server.ws, "orders-token", NOTIFY))
    a = HttpClient(server.http, "notifier-token", timeout=10)
    b = HttpClient(server.http, "notifier-token", timeout=10)
    a.connect(NOTIFY)
    b.connect(NOTIFY)

    def receiver(c):
        return (lambda: asyncio.to_thread(c.receive, SUBJECT, max=10, ack="explicit"),
                lambda m: asyncio.to_thread(c.ack, SUBJECT, m))

    try:
        mid = (await within(orders.publish(notification()))).id
        m_a = await _take(*receiver(a), mid, time.monotonic() + 10)
        assert m_a.attempt == 1
        m_b = await _take(*receiver(b), mid, time.monotonic() + 10)
        assert m_b.attempt == 2 and m_b["sequence"] == m_a["sequence"]
        for late in (lambda: a.ack(SUBJECT, m_a), lambda: a.nack(SUBJECT, m_a, delay=0)):
            with pytest.raises(PigeonError) as e:
                await asyncio.to_thread(late)
            assert e.value.code == "ACK_NOT_ALLOWED", e.value
        others = await asyncio.to_thread(a.receive, SUBJECT, max=100, ack="explicit")
        for m in others:
            await asyncio.to_thread(a.ack, SUBJECT, m)
        assert mid not in [m["id"] for m in others], "the late nack handed nothing out again"
        await asyncio.to_thread(b.ack, SUBJECT, m_b)
    finally:
        await orders.close()
