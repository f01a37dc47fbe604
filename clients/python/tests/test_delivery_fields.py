"""The fields of a message a pull, a replay or a request hands over, as the
TypeScript and Rust clients read them (the Go client, transport/ws, is the
reference for the attempt's range):

- a receive or replay message without a sequence (absent, ``None``) is
  refused as one of sequence 0 is: the broker numbers every message it
  stores from 1 and always sends the number with a message of the log, and
  an ack of such a message would name none (settling whichever message
  holds the id); a reply without one is taken, as the broker sends every
  reply (a reply never enters the log);
- a receive message whose attempt is no lease's is left out and reported
  alone, the others kept (before, it failed the whole receive);
- the attempts taken and sent are integers of 1 (0 sent as none) to
  2^31-1, ``MAX_ATTEMPT``.

Each test failed before its fix."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import MAX_ATTEMPT, HttpClient, ProtocolError
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")


def msg(mid: str, sequence: Any = ...) -> dict[str, Any]:
    m: dict[str, Any] = {"id": mid, "subject": "x", "data": {}}
    if sequence is not ...:
        m["sequence"] = sequence
    return m


# A message without a sequence, and one with a null sequence, between two of
# the broker's.
NO_SEQUENCE = [msg("m_a", 4), msg("m_none"), msg("m_null", None), msg("m_b", 5)]
REFUSED_NO_SEQUENCE = [(op, i, mid, "NoneType") for op in ("receive", "replay")
                       for i, mid in ((1, "m_none"), (2, "m_null"))]


def _refused(reported: list[Any]) -> list[tuple[Any, ...]]:
    for e in reported:
        assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST", e
    return [(e.details.get("op"), e.details.get("index"), e.details.get("messageId"), e.details.get("sequence"))
            for e in reported]


def endpoint(messages: list[Any], attempts: Any = ..., frames: list[Any] | None = None):
    """A raw endpoint's frame handler: receive and replay answered with
    ``messages`` (and ``attempts``, when given), a request with a message
    of no sequence answering it, acks and nacks recorded in ``frames`` and
    answered ok."""

    async def on_frame(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] in ("receive", "replay"):
            ans: dict[str, Any] = {"op": "messages", "re": f["id"], "messages": messages}
            if attempts is not ... and f["op"] == "receive":
                ans["attempts"] = attempts
            await ws.send(json.dumps(ans))
        elif f["op"] == "request":
            reply = {**msg("m_reply"), "correlationId": f["message"]["id"]}
            await ws.send(json.dumps({"op": "reply", "re": f["id"], "message": reply}))
        else:
            if frames is not None:
                frames.append({k: v for k, v in f.items() if k != "id"})
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    return on_frame


async def test_a_ws_receive_or_replay_without_a_sequence_is_refused_as_sequence_0_is_and_a_reply_taken():
    reported: list[Any] = []
    frames: list[Any] = []
    async with raw_session(endpoint(NO_SEQUENCE, frames=frames), CONTRACT, on_error=reported.append) as s:
        assert [m["id"] for m in await within(s.receive("x"), 5)] == ["m_a", "m_b"]
        assert [m["id"] for m in await within(s.replay("x"), 5)] == ["m_a", "m_b"]
        reply = await within(s.request({"id": "req_1", "subject": "x", "data": {}}, timeout=5), 10)
    assert reply["id"] == "m_reply"
    assert _refused(reported) == REFUSED_NO_SEQUENCE
    assert frames == [], "nothing refused is answered"


def test_an_http_receive_or_replay_without_a_sequence_is_refused_as_sequence_0_is_and_a_reply_taken():
    reported: list[Any] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5, on_error=reported.append)
        c.contract = Contract.from_wire(CONTRACT)
        srv.body = json.dumps({"messages": NO_SEQUENCE}).encode()
        assert [m["id"] for m in c.receive("x")] == ["m_a", "m_b"]
        assert [m["id"] for m in c.replay("x")] == ["m_a", "m_b"]
        srv.body = json.dumps({"status": "replied", "message": {**msg("m_reply"), "correlationId": "req_1"}}).encode()
        assert c.request({"id": "req_1", "subject": "x", "data": {}})["id"] == "m_reply"
    assert _refused(reported) == REFUSED_NO_SEQUENCE


def test_max_attempt_is_the_go_clients():
    assert MAX_ATTEMPT == (1 << 31) - 1


# The attempts a receive answer may name for a message, and those it may not:
# the table the clients agree on (integers of 1 to 2^31-1, the Go client's
# range; the TypeScript client's test/delivery_fields.test.mjs holds the same
# rows). Each row's value is the JSON text of the attempt of entry 1 of
# three. An integer spelled with a fraction or an exponent (1.0, 1e0) is a
# float to json.loads, and no integer (a bool, though an int to Python,
# neither).
RECEIVED = [
    pytest.param("1", True, id="1"),
    pytest.param(str((1 << 31) - 1), True, id="2^31-1"),
    pytest.param("0", False, id="0"),
    pytest.param("-0", False, id="negative zero"),
    pytest.param("-1", False, id="negative"),
    pytest.param("1.5", False, id="fraction"),
    pytest.param("1.0", False, id="integral fraction"),
    pytest.param("1e0", False, id="exponent"),
    pytest.param("10E-1", False, id="signed exponent"),
    pytest.param(str(1 << 31), False, id="2^31"),
    pytest.param("9007199254740993", False, id="beyond 2^53"),
    pytest.param(str((1 << 63) - 1), False, id="2^63-1"),
    pytest.param(str(1 << 63), False, id="2^63"),
    pytest.param('"2"', False, id="a string"),
    pytest.param("null", False, id="null"),
    pytest.param("true", False, id="true"),
    pytest.param("false", False, id="false"),
    pytest.param("{}", False, id="an object"),
    pytest.param("[1]", False, id="an array"),
]
THREE = [msg("m_a", 4), msg("m_x", 5), msg("m_b", 6)]


def _three(attempt: str, head: dict[str, Any] | None = None) -> str:
    """The JSON text of an answer (``head``'s members first) holding THREE
    with attempts 2, ``attempt`` (JSON text, as it is sent) and 3."""
    body = json.dumps({**(head or {}), "messages": THREE})
    return f'{body[:-1]},"attempts":[2,{attempt},3]}}'


def _check_received(got: list[Any], reported: list[Any], attempt: str, taken: bool) -> None:
    if taken:
        assert [(m["id"], m.attempt) for m in got] == [("m_a", 2), ("m_x", json.loads(attempt)), ("m_b", 3)]
        assert reported == []
        return
    assert [(m["id"], m.attempt) for m in got] == [("m_a", 2), ("m_b", 3)], "the others are kept, with theirs"
    assert len(reported) == 1 and isinstance(reported[0], ProtocolError), reported
    e = reported[0]
    assert (e.code, e.details.get("op"), e.details.get("index"), e.details.get("messageId")) == (
        "BAD_REQUEST", "receive", 1, "m_x"), e.details
    assert "attempt" in e.message


@pytest.mark.parametrize("attempt,taken", RECEIVED)
async def test_a_ws_receive_refuses_alone_a_message_whose_attempt_is_no_leases(attempt, taken):
    reported: list[Any] = []

    async def on_frame(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "receive":
            await ws.send(_three(attempt, {"op": "messages", "re": f["id"]}))

    async with raw_session(on_frame, CONTRACT, on_error=reported.append) as s:
        got = await within(s.receive("x"), 5)
    _check_received(got, reported, attempt, taken)


@pytest.mark.parametrize("attempt,taken", RECEIVED)
def test_an_http_receive_refuses_alone_a_message_whose_attempt_is_no_leases(attempt, taken):
    reported: list[Any] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5, on_error=reported.append)
        c.contract = Contract.from_wire(CONTRACT)
        srv.body = _three(attempt).encode()
        got = c.receive("x", ack="explicit")
    _check_received(got, reported, attempt, taken)


# The attempts an ack or a nack sends: 0 names none, 1 to 2^31-1 are sent,
# anything else is refused before anything is sent.
SENT = [
    pytest.param(0, None, id="0"),
    pytest.param(1, 1, id="1"),
    pytest.param((1 << 31) - 1, (1 << 31) - 1, id="2^31-1"),
    pytest.param(1 << 31, ValueError, id="2^31"),
    pytest.param((1 << 63) - 1, ValueError, id="2^63-1"),
    pytest.param(-1, ValueError, id="negative"),
    pytest.param(1.5, TypeError, id="fraction"),
    pytest.param("2", TypeError, id="string"),
    pytest.param(True, TypeError, id="bool"),
]


@pytest.mark.parametrize("op", ["ack", "nack"])
@pytest.mark.parametrize("attempt,want", SENT)
async def test_an_answer_sends_an_attempt_of_1_to_2_31_minus_1_and_refuses_any_other(op, attempt, want):
    frames: list[Any] = []
    async with raw_session(endpoint([msg("m_a", 4)], [2], frames), CONTRACT) as s:
        (m,) = await within(s.receive("x"), 5)
        if isinstance(want, type):
            with pytest.raises(want):
                await getattr(s, op)("x", m, attempt=attempt)
            assert frames == []
            return
        await within(getattr(s, op)("x", m, attempt=attempt), 5)
    assert [f.get("attempt") for f in frames] == [want]
