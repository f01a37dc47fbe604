"""A publish's answer is read whole, as the Go client reads it, or the
publish fails saying that its message may have been accepted.

A ``decision`` (a lone publish, over the WebSocket or HTTP) and each result
of a ``decisions`` answer (a ``publish_batch``) are read as the Go client
decodes them (transport/ws ``decodeFromServer``, ``resolvePublishes``). The
``status`` is ``accepted`` or ``duplicate``. The ``message`` is an envelope:
every string member a string (or ``null``), ``sequence`` an integer of 0 to
2^64-1, ``hops`` one of 0 to 2^32-1 (neither spelled ``-0``, ``5.0`` or
``5e0``), and a ``signature`` an object of strings and an integer ``v``. A
result's ``error`` is an object whose ``code`` is a string, whose
``message`` is a string and whose ``details`` is an object (each of the last
two may be absent or ``null``).

A result no broker sends fails its own publish alone (``BAD_REQUEST``,
naming its index), and the publishes beside it take their own results. A
lone publish's decision that cannot be read fails it (``BAD_REQUEST``).
Both errors say that the message may have been accepted: the broker judged
it and may have stored it, so it is not to be taken for refused and
published again without an idempotency key. So does a ``decisions`` answer
that the reader refuses whole, or whose ``results`` do not match the batch,
for each of its publishes.

Before, only a decision's ``status``, ``id`` and ``sequence`` were checked:
a message whose ``time``, ``reason`` or ``hops`` was of another type, or
whose ``sequence`` was spelled ``-0``, was handed over as the decision; a
result's ``error`` whose ``message`` or ``details`` was of another type was
taken for the broker's refusal; and no error said the message may have been
accepted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import Contract, Decision, HttpClient, PigeonError, ProtocolError, QuarantinedError

MAYBE = "may have been accepted"

# A decision's message as the broker writes it, whose text each row spoils.
MESSAGE = ('{"specversion":"1.0","id":"msg_d","type":"job","source":"p","subject":"x","time":"2026-01-01T00:00:00Z",'
           '"intent":"i","classification":"internal","region":"uk","sequence":7,"contractId":"ctr_raw",'
           '"acceptedAt":"2026-01-01T00:00:01Z","data":{}}')


def spoiled(old: str, new: str) -> str:
    assert old in MESSAGE
    return MESSAGE.replace(old, new, 1)


def more(members: str) -> str:
    return MESSAGE[:-1] + "," + members + "}"


# (the decision's text, the member named in the error's details).
BAD: list[Any] = [
    pytest.param('{"status":"accepted","message":' + spoiled('"sequence":7', '"sequence":-0') + "}", "sequence",
                 id="sequence spelled -0"),
    pytest.param('{"status":"accepted","message":' + spoiled('"sequence":7', '"sequence":7.0') + "}", "sequence",
                 id="sequence spelled 7.0"),
    pytest.param('{"status":"accepted","message":' + spoiled('"sequence":7', '"sequence":7e0') + "}", "sequence",
                 id="sequence spelled 7e0"),
    pytest.param('{"status":"accepted","message":' + more('"hops":-0') + "}", "hops", id="hops spelled -0"),
    pytest.param('{"status":"accepted","message":' + more('"hops":-1') + "}", "hops", id="hops negative"),
    pytest.param('{"status":"accepted","message":' + more('"hops":4294967296') + "}", "hops",
                 id="hops beyond 2^32-1"),
    pytest.param('{"status":"accepted","message":' + more('"hops":1.0') + "}", "hops", id="hops spelled 1.0"),
    pytest.param('{"status":"accepted","message":' + more('"hops":"1"') + "}", "hops", id="hops a string"),
    pytest.param('{"status":"accepted","message":' + spoiled('"time":"2026-01-01T00:00:00Z"', '"time":20260101') + "}",
                 "time", id="time a number"),
    pytest.param('{"status":"accepted","message":' + more('"reason":7') + "}", "reason", id="reason a number"),
    pytest.param('{"status":"accepted","message":' + spoiled('"acceptedAt":"2026-01-01T00:00:01Z"', '"acceptedAt":[]') +
                 "}", "acceptedAt", id="acceptedAt a list"),
    pytest.param('{"status":"accepted","message":' + spoiled('"subject":"x"', '"subject":{"name":"x"}') + "}", "subject",
                 id="subject an object"),
    pytest.param('{"status":"accepted","message":' + spoiled('"contractId":"ctr_raw"', '"contractId":true') + "}",
                 "contractId", id="contractId a bool"),
    pytest.param('{"status":"accepted","message":' + more('"correlationId":["c"]') + "}", "correlationId",
                 id="correlationId a list"),
    pytest.param('{"status":"accepted","message":' + more('"signature":"sig"') + "}", "signature",
                 id="signature a string"),
    pytest.param('{"status":"accepted","message":' + more('"signature":{"kid":7,"alg":"ed25519","sig":"s"}') + "}",
                 "signature.kid", id="signature kid a number"),
    pytest.param('{"status":"accepted","message":' + more('"signature":{"kid":"k","alg":"ed25519","sig":"s","v":2.5}') +
                 "}", "signature.v", id="signature v a fraction"),
    pytest.param('{"status":"accepted","message":' + more('"signature":{"kid":"k","alg":"ed25519","sig":"s","v":"2"}') +
                 "}", "signature.v", id="signature v a string"),
    pytest.param('{"status":"pending","message":' + MESSAGE + "}", "status", id="status pending"),
    pytest.param('{"status":"","message":' + MESSAGE + "}", "status", id="status empty"),
    pytest.param('{"status":["accepted"],"message":' + MESSAGE + "}", "status", id="status a list"),
    pytest.param('{"message":' + MESSAGE + "}", "status", id="no status"),
    pytest.param('{"status":"accepted"}', "message", id="no message"),
    pytest.param('{"status":"accepted","message":null}', "message", id="message null"),
    pytest.param('{"status":"accepted","message":"msg_d"}', "message", id="message a string"),
]

# Decisions the broker does send, with members the rows above spoil.
TAKEN: list[Any] = [
    pytest.param('{"status":"accepted","message":' + MESSAGE + "}", id="as the broker writes it"),
    pytest.param('{"status":"duplicate","message":' + MESSAGE + "}", id="duplicate"),
    pytest.param('{"status":"accepted","message":' + more('"hops":4294967295,"reason":null,"signature":null') + "}",
                 id="hops 2^32-1, members null"),
    pytest.param('{"status":"accepted","message":' + spoiled('"sequence":7', '"sequence":0') + "}", id="sequence 0"),
    pytest.param('{"status":"accepted","message":' + more('"signature":{"kid":"k","alg":"ed25519","sig":"s","v":-0}') +
                 "}", id="signature v spelled -0"),
    pytest.param('{"status":"accepted","message":' + spoiled('"data":{}', '"data":{"sequence":-0,"n":1.0}') + "}",
                 id="data's own -0 and 1.0"),
    pytest.param('{"status":"accepted","message":' + more('"extra":{"n":-0}') + "}",
                 id="a member the envelope does not name"),
]


def _refusal_wrong(e: BaseException, member: str, index: int | None = None) -> str | None:
    """Why ``e`` is not the refusal of a decision whose ``member`` is no
    broker's (at ``index`` of a batch); None when it is."""
    if not isinstance(e, ProtocolError) or e.code != "BAD_REQUEST":
        return f"not a BAD_REQUEST ProtocolError: {e!r}"
    if MAYBE not in e.message:
        return f"does not say the message {MAYBE}: {e.message}"
    if e.details.get("member") != member:
        return f"names {e.details.get('member')!r}, not {member!r}: {e.details}"
    if index is not None and f"index {index} of the 3 results" not in e.message:
        return f"does not name index {index}: {e.message}"
    return None


@pytest.mark.parametrize("decision,member", BAD)
async def test_a_lone_publish_whose_decision_no_broker_sends_fails_saying_it_may_have_been_accepted(
        decision: str, member: str) -> None:
    async def deciding(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "publish":
            await ws.send('{"op":"decision","re":' + json.dumps(f["id"]) + "," + decision[1:])

    async with raw_session(deciding, raw_contract("x")) as s:
        with pytest.raises(PigeonError) as e:
            await within(s.publish({"subject": "x", "data": {}}), 5)
        assert _refusal_wrong(e.value, member) is None, _refusal_wrong(e.value, member)

    with http_answering() as srv:
        srv.body = decision.encode()
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(raw_contract("x"))
        with pytest.raises(PigeonError) as e:
            c.publish({"subject": "x", "data": {}})
        assert _refusal_wrong(e.value, member) is None, _refusal_wrong(e.value, member)


@pytest.mark.parametrize("decision", TAKEN)
async def test_a_decision_the_broker_sends_is_taken(decision: str) -> None:
    d = Decision.from_wire(json.loads(decision))
    assert d.id == "msg_d" and d.status in ("accepted", "duplicate")

    async def deciding(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "publish":
            await ws.send('{"op":"decision","re":' + json.dumps(f["id"]) + "," + decision[1:])

    async with raw_session(deciding, raw_contract("x")) as s:
        d = await within(s.publish({"subject": "x", "data": {}}), 5)
        assert d.id == "msg_d"
        sig = d.message.get("signature")
        if isinstance(sig, dict):
            assert type(sig["v"]) is int and sig["v"] == 0
        if "sequence" in d.message["data"]:
            assert type(d.message["data"]["sequence"]) is int and d.message["data"]["sequence"] == 0


def _good_result(i: int) -> str:
    """A brief answer's result for message i: without the data sent, which
    the client puts back."""
    return '{"status":"accepted","message":' + MESSAGE.replace('"msg_d"', f'"msg_{i}"').replace(',"data":{}', "") + "}"


async def _batch_of_three(results: Any, **opts: Any) -> list[Any]:
    """Three publishes that leave in one publish_batch, answered by the
    decisions frame ``results`` returns for the frame's id (text); what
    each publish resolved with."""
    frames: list[dict[str, Any]] = []

    async def deciding(ws: Any, f: dict[str, Any]) -> None:
        frames.append(f)
        if f["op"] == "publish_batch":
            await ws.send(results(json.dumps(f["id"])))

    async with raw_session(deciding, raw_contract("x"), **opts) as s:
        got = await within(s.publish_many([{"subject": "x", "data": {"n": i}} for i in range(3)]), 5)
    assert [(f["op"], len(f["messages"])) for f in frames] == [("publish_batch", 3)], frames
    return got


@pytest.mark.parametrize("decision,member", BAD)
async def test_a_batch_result_no_broker_sends_fails_its_publish_alone(decision: str, member: str) -> None:
    wrong: list[str] = []
    for at in range(3):
        slots = [decision if i == at else _good_result(i) for i in range(3)]
        got = await _batch_of_three(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":[' + ",".join(slots) + "]}")
        for i, r in enumerate(got):
            if i == at:
                why = _refusal_wrong(r, member, at)
                if why:
                    wrong.append(f"at {at}: {why}")
            elif not (isinstance(r, Decision) and r.id == f"msg_{i}" and r.message["data"] == {"n": i}):
                wrong.append(f"at {at}: slot {i} resolved with {r!r}")
    assert wrong == []


# Errors of a result no broker sends: (the error's text, why).
BAD_ERRORS: list[Any] = [
    pytest.param('"SCHEMA_INVALID"', id="a string"),
    pytest.param("7", id="a number"),
    pytest.param("[]", id="a list"),
    pytest.param('{"message":"refused"}', id="no code"),
    pytest.param('{"code":7,"message":"refused"}', id="code a number"),
    pytest.param('{"code":null,"message":"refused"}', id="code null"),
    pytest.param('{"code":"SCHEMA_INVALID","message":7}', id="message a number"),
    pytest.param('{"code":"SCHEMA_INVALID","message":{"text":"refused"}}', id="message an object"),
    pytest.param('{"code":"SCHEMA_INVALID","details":[]}', id="details a list"),
    pytest.param('{"code":"QUARANTINED","details":"qr_1"}', id="details a string"),
]


@pytest.mark.parametrize("error", BAD_ERRORS)
async def test_a_batch_result_whose_error_no_broker_sends_fails_its_publish_alone(error: str) -> None:
    slots = [_good_result(0), '{"error":' + error + "}", _good_result(2)]
    got = await _batch_of_three(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":[' + ",".join(slots) + "]}")
    assert _refusal_wrong(got[1], "error", 1) is None, _refusal_wrong(got[1], "error", 1)
    assert [isinstance(r, Decision) for r in got] == [True, False, True], got


async def test_a_batch_result_whose_error_the_broker_sends_refuses_its_publish() -> None:
    errors = [
        '{"code":"SCHEMA_INVALID","message":"refused","details":{"gate":"schema"}}',
        '{"code":"QUARANTINED","message":"kept","details":{"quarantineId":"qr_1","gate":"pan"}}',
        '{"code":"SCHEMA_INVALID","message":null,"details":null}',
    ]
    got = await _batch_of_three(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":['
                                + ",".join('{"error":' + e + "}" for e in errors) + "]}")
    assert [(type(r).__name__, r.code, r.message, r.details) for r in got] == [
        ("DeniedError", "SCHEMA_INVALID", "refused", {"gate": "schema"}),
        ("QuarantinedError", "QUARANTINED", "kept", {"quarantineId": "qr_1", "gate": "pan"}),
        ("DeniedError", "SCHEMA_INVALID", "", {}),
    ]
    assert isinstance(got[1], QuarantinedError) and got[1].quarantine_id == "qr_1"


# decisions answers the client cannot read at all: every publish of the
# batch fails, each saying that its message may have been accepted.
UNREAD_ANSWERS: list[Any] = [
    pytest.param(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":[' + _good_result(0) + "]}",
                 id="one result for three messages"),
    pytest.param(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":{}}', id="results an object"),
    pytest.param(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":[' +
                 ",".join(_good_result(i) for i in range(3)) + '],"results":[]}', id="results twice"),
    pytest.param(lambda re_: '{"op":"decisions","re":' + re_ + ',"sequence":-0,"results":[' +
                 ",".join(_good_result(i) for i in range(3)) + "]}", id="a frame sequence spelled -0"),
    pytest.param(lambda re_: '{"op":"decision","re":' + re_ + ',"status":"accepted","message":' + MESSAGE + "}",
                 id="a decision for a batch"),
]


@pytest.mark.parametrize("answer", UNREAD_ANSWERS)
async def test_a_decisions_answer_the_client_cannot_read_fails_each_publish_saying_it_may_have_been_accepted(
        answer: Any) -> None:
    got = await _batch_of_three(answer)
    for r in got:
        assert isinstance(r, ProtocolError) and r.code == "BAD_REQUEST", got
        assert "each message " + MAYBE in r.message, r.message


async def test_a_decision_the_reader_refuses_whole_fails_its_publish_saying_it_may_have_been_accepted() -> None:
    for frame in ('{"op":"decision","re":%s,"status":"accepted","message":' + more('"sequence":8') + "}",
                  '{"op":"decision","re":%s,"hops":-0,"status":"accepted","message":' + MESSAGE + "}"):
        async def deciding(ws: Any, f: dict[str, Any], frame: str = frame) -> None:
            if f["op"] == "publish":
                await ws.send(frame % json.dumps(f["id"]))

        async with raw_session(deciding, raw_contract("x")) as s:
            with pytest.raises(ProtocolError) as e:
                await within(s.publish({"subject": "x", "data": {}}), 5)
            assert e.value.code == "BAD_REQUEST" and "the message " + MAYBE in e.value.message, e.value


# A refusal's details.decision: a gate's decision (pigeon.Decision) as the
# Go client reads it (wire.Error.Err), which takes one that decodes with an
# outcome and leaves any other out. (the decision, whether it is read.)
GATE_DECISIONS: list[Any] = [
    pytest.param({"outcome": "quarantine", "code": "PAN_DETECTED", "gate": "pan", "reason": "r",
                  "quarantineId": "qr_1", "time": "2026-01-01T00:00:00.5Z"}, True, id="as the broker writes it"),
    pytest.param({"outcome": "quarantine", "reason": None, "time": None}, True, id="members null"),
    pytest.param({"outcome": "quarantine", "extra": 7}, True, id="a member it does not name"),
    pytest.param({"outcome": ""}, False, id="outcome empty"),
    pytest.param({"code": "PAN_DETECTED"}, False, id="no outcome"),
    pytest.param({"outcome": 7}, False, id="outcome a number"),
    pytest.param({"outcome": "quarantine", "code": 7}, False, id="code a number"),
    pytest.param({"outcome": "quarantine", "reason": ["r"]}, False, id="reason a list"),
    pytest.param({"outcome": "quarantine", "quarantineId": 1}, False, id="quarantineId a number"),
    pytest.param({"outcome": "quarantine", "gate": {}}, False, id="gate an object"),
    pytest.param({"outcome": "quarantine", "time": "2026-01-01"}, False, id="time a date alone"),
    pytest.param({"outcome": "quarantine", "time": 0}, False, id="time a number"),
    pytest.param("quarantine", False, id="a string"),
    pytest.param([{"outcome": "quarantine"}], False, id="a list"),
]


@pytest.mark.parametrize("decision,read", GATE_DECISIONS)
async def test_a_refusals_gate_decision_is_read_as_go_reads_it(decision: Any, read: bool) -> None:
    """A decision that reads makes a quarantine's refusal a
    ``QuarantinedError`` and is :attr:`decision`; any other is neither, as
    the Go client leaves it out (``errors.Is(err, pigeon.ErrQuarantined)``
    false)."""
    error = {"code": "PAN_DETECTED", "message": "refused", "details": {"gate": "pan", "decision": decision}}
    got = await _batch_of_three(lambda re_: '{"op":"decisions","re":' + re_ + ',"results":['
                                + ",".join(json.dumps({"error": error}) for _ in range(3)) + "]}")
    for r in got:
        assert r.code == "PAN_DETECTED" and r.details == error["details"], r
        assert isinstance(r, QuarantinedError) is read, r
        assert r.decision == (decision if read else None)


@pytest.mark.parametrize("qid,read", [("qr_1", True), ("", False), (7, False), (["qr_1"], False), ({}, False)])
def test_a_refusals_quarantine_id_is_a_string(qid: Any, read: bool) -> None:
    from pigeon_client.errors import error_from

    e = error_from({"code": "PAN_DETECTED", "message": "m", "details": {"quarantineId": qid}})
    assert isinstance(e, QuarantinedError) is read
    assert e.quarantine_id == (qid if read else None)
