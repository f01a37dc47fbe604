"""Every answer the client reads is of its route's shape, or refused.

An answer of another shape (a list where the route has an object, a string
or a number where it has an object or a string, a member absent or null) is
no server's: the client refuses it, ``ProtocolError`` (``BAD_REQUEST``,
the code it gives every malformed answer), rather than raising
``KeyError``, ``TypeError`` or ``AttributeError`` from inside the call, or
handing the caller a value of another type than the call returns (a
contract whose operations are a string, listed letter by letter; a
decision whose sequence is a string). The TypeScript client refuses the
same answers (test/answer_shapes.test.mjs), ``BAD_FRAME``.

Each table runs against a raw endpoint the test sets the answer of: the
HTTP client's calls against :func:`harness.http_answering`, the WebSocket
session's negotiate, renew and publish against :func:`harness.raw_session`.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Iterator

import pytest
from websockets.asyncio.server import serve

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import Contract, Decision, HttpClient, ProtocolError, connect

CONTRACT = raw_contract("x")
ACCOUNT = {"id": "acct", "roles": ["r"], "createdAt": "2026-01-01T00:00:00Z"}
DECISION = {"status": "accepted", "message": {"id": "m1", "sequence": 1, "subject": "x"}}
GRANT = {"token": "g.t", "jti": "grt_1", "expiresAt": "2026-01-01T00:00:00Z"}


def _read(v: Any) -> Any:
    """What a call returned, as the JSON it was read from: a contract's
    ``raw``, a decision's two members, anything else as it is."""
    if isinstance(v, Contract):
        return v.raw
    if isinstance(v, Decision):
        return {"status": v.status, "message": v.message}
    return v


# Each call of the HTTP client that reads its answer: the call, a
# well-formed answer, the member of the answer holding the object the call
# reads (None: the answer itself), and the members of that object that are
# strings in every answer of the route.
CALLS: list[Any] = [
    pytest.param(lambda c: c.health(), {"ok": True, "service": "pigeon"}, None, (), id="health"),
    pytest.param(lambda c: c.connect(["x"]), {"contract": CONTRACT}, "contract", ("id",), id="connect"),
    pytest.param(lambda c: c.get_contract("ctr_raw"), {"contract": CONTRACT}, "contract", ("id",), id="get_contract"),
    pytest.param(lambda c: c.subject("x"), {"subject": {"name": "x", "mode": "pubsub"}}, "subject", ("name",),
                 id="subject"),
    pytest.param(lambda c: c.quarantine_record("qr_1"), {"record": {"id": "qr_1", "code": "SCHEMA_INVALID"}},
                 "record", ("id",), id="quarantine_record"),
    pytest.param(lambda c: c.create_account("acct"), {"account": ACCOUNT}, "account", ("id",), id="create_account"),
    pytest.param(lambda c: c.add_role("acct", "r"), {"account": ACCOUNT}, "account", ("id",), id="add_role"),
    pytest.param(lambda c: c.remove_role("acct", "r"), {"account": ACCOUNT}, "account", ("id",), id="remove_role"),
    pytest.param(lambda c: c.put_keys("acct", []), {"account": ACCOUNT}, "account", ("id",), id="put_keys"),
    pytest.param(lambda c: c.put_role("r", []), {"role": {"name": "r", "permissions": []}}, "role", ("name",),
                 id="put_role"),
    pytest.param(lambda c: c.grant("acct", ["r"]), GRANT, None, ("token", "jti", "expiresAt"), id="grant"),
]


def _shapes(good: dict[str, Any], member: str | None, strings: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """The answers of another shape than ``good``'s, each with its name:
    the answer itself, its ``member`` and that object's ``strings``
    replaced by values of each other type, or left out."""
    yield "an answer that is a list", [good]
    yield "an answer that is null", None
    yield "an answer that is a string", "answer"
    yield "an answer that is a number", 7
    if member is not None:
        yield f"no {member}", {k: v for k, v in good.items() if k != member}
        for name, v in (("null", None), ("a string", "x"), ("a list", [good[member]]), ("a number", 7)):
            yield f"{member} {name}", {**good, member: v}
    for k in strings:
        for name, v in (("absent", ...), ("null", None), ("a number", 7), ("a list", ["x"]), ("an object", {})):
            bad = copy.deepcopy(good)
            held = bad if member is None else bad[member]
            if v is ...:
                del held[k]
            else:
                held[k] = v
            yield f"{k} {name}", bad


@pytest.mark.parametrize("call,good,member,strings", CALLS)
def test_an_http_answer_of_another_shape_than_its_routes_is_refused(
        call: Callable[[HttpClient], Any], good: dict[str, Any], member: str | None, strings: tuple[str, ...]) -> None:
    wrong: list[str] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(CONTRACT)
        srv.body = json.dumps(good).encode()
        want = good if member is None else good[member]
        assert _read(call(c)) == want, "the well-formed answer is read"
        for name, answer in _shapes(good, member, strings):
            srv.body = json.dumps(answer).encode()
            try:
                got = call(c)
            except ProtocolError as e:
                if e.code != "BAD_REQUEST":
                    wrong.append(f"{name}: {e!r}")
                continue
            except Exception as e:  # noqa: BLE001 (the row names what escaped)
                wrong.append(f"{name}: {e!r}")
                continue
            wrong.append(f"{name}: returned {_read(got)!r}")
    assert wrong == []


# Contracts of another shape than the route's, each beside the well-formed
# one: a contract whose members are of other types than the client hands
# out (Contract.principal and .region strings, .subjects a list of objects
# each with a string name and a list of string operations).
BAD_CONTRACTS: list[Any] = [
    pytest.param({**CONTRACT, "id": 7}, id="id-a-number"),
    pytest.param({k: v for k, v in CONTRACT.items() if k != "id"}, id="no-id"),
    pytest.param({**CONTRACT, "principal": ["p"]}, id="principal-a-list"),
    pytest.param({**CONTRACT, "region": 7}, id="region-a-number"),
    pytest.param({**CONTRACT, "subjects": "x"}, id="subjects-a-string"),
    pytest.param({**CONTRACT, "subjects": ["x"]}, id="a-subject-a-string"),
    pytest.param({**CONTRACT, "subjects": [{"operations": ["publish"]}]}, id="a-subject-without-a-name"),
    pytest.param({**CONTRACT, "subjects": [{"name": 7, "operations": ["publish"]}]}, id="a-subject-name-a-number"),
    pytest.param({**CONTRACT, "subjects": [{"name": "x", "operations": "publish"}]}, id="operations-a-string"),
    pytest.param({**CONTRACT, "subjects": [{"name": "x", "operations": [7]}]}, id="an-operation-a-number"),
    # A time that does not parse was read as None: a contract the session
    # never renews, as if it had no expiry.
    pytest.param({**CONTRACT, "expiresAt": "tomorrow"}, id="expiresAt-not-a-time"),
    pytest.param({**CONTRACT, "expiresAt": "2099-13-45T12:15:00Z"}, id="expiresAt-no-date"),
    pytest.param({**CONTRACT, "expiresAt": 7}, id="expiresAt-a-number"),
    pytest.param({**CONTRACT, "expiresAt": ["2099-11-29T12:15:00Z"]}, id="expiresAt-a-list"),
    pytest.param({**CONTRACT, "issuedAt": "2026-11-29"}, id="issuedAt-a-date-alone"),
    pytest.param({**CONTRACT, "issuedAt": {}}, id="issuedAt-an-object"),
]


def test_a_contract_of_the_routes_shape_is_read_whole() -> None:
    c = Contract.from_wire({**CONTRACT, "subjects": [{"name": "x", "operations": ["publish", "subscribe"]},
                                                     {"name": "y", "operations": None}, {"name": "z"}]})
    assert (c.principal, c.region) == (CONTRACT["principal"], "uk")
    assert [(n, c.operations(n)) for n in c.subject_names] == [("x", ["publish", "subscribe"]), ("y", []), ("z", [])]
    c = Contract.from_wire({"id": "ctr_1", "subjects": None})
    assert (c.principal, c.region, c.subjects) == ("", "", [])
    c = Contract.from_wire(CONTRACT)
    assert (c.issued_at.isoformat(), c.expires_at.isoformat()) == ("2026-11-29T12:00:00+00:00", "2099-11-29T12:15:00+00:00")
    for no_time in ({}, {"issuedAt": None, "expiresAt": None}, {"issuedAt": "", "expiresAt": ""}):
        c = Contract.from_wire({"id": "ctr_1", **no_time})
        assert (c.issued_at, c.expires_at) == (None, None), no_time


@pytest.mark.parametrize("contract", BAD_CONTRACTS)
def test_an_http_contract_of_another_shape_is_refused(contract: dict[str, Any]) -> None:
    with http_answering() as srv:
        srv.body = json.dumps({"contract": contract}).encode()
        c = HttpClient(srv.url, "t", timeout=5)
        for call in (lambda: c.connect(["x"]), lambda: c.get_contract("ctr_raw")):
            with pytest.raises(ProtocolError) as e:
                call()
            assert e.value.code == "BAD_REQUEST"
        assert c.contract is None, "nothing refused is held"


@pytest.mark.parametrize("contract", BAD_CONTRACTS)
async def test_a_websocket_contract_of_another_shape_is_refused(contract: dict[str, Any]) -> None:
    async def endpoint(ws: Any) -> None:
        async for raw in ws:
            f = json.loads(raw)
            await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": contract}))

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        with pytest.raises(ProtocolError) as e:
            await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False, auto_renew=False), 5)
        assert e.value.code == "BAD_REQUEST"

    async def renewing(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "renew":
            await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": contract}))

    async with raw_session(renewing, CONTRACT) as s:
        with pytest.raises(ProtocolError) as e:
            await within(s.renew(), 5)
        assert e.value.code == "BAD_REQUEST"
        assert s.contract.raw == CONTRACT, "the contract in force stays"


# Decisions of another shape than the route's: a status that is neither
# accepted nor duplicate, a message whose id or sequence is of another
# type than the decision hands out (Decision.id a string, .sequence an
# integer of 0 to 2^64-1; either may be absent).
BAD_DECISIONS: list[Any] = [
    pytest.param([DECISION], id="a-list"),
    pytest.param(None, id="null"),
    pytest.param({**DECISION, "status": "pending"}, id="status-pending"),
    pytest.param({**DECISION, "status": 7}, id="status-a-number"),
    pytest.param({"message": DECISION["message"]}, id="no-status"),
    pytest.param({**DECISION, "message": "m1"}, id="message-a-string"),
    pytest.param({**DECISION, "message": [DECISION["message"]]}, id="message-a-list"),
    pytest.param({"status": "accepted"}, id="no-message"),
    pytest.param({**DECISION, "message": {"id": 7, "sequence": 1}}, id="id-a-number"),
    pytest.param({**DECISION, "message": {"id": "m1", "sequence": "1"}}, id="sequence-a-string"),
    pytest.param({**DECISION, "message": {"id": "m1", "sequence": 1.5}}, id="sequence-a-fraction"),
    pytest.param({**DECISION, "message": {"id": "m1", "sequence": True}}, id="sequence-a-bool"),
    pytest.param({**DECISION, "message": {"id": "m1", "sequence": -1}}, id="sequence-negative"),
    pytest.param({**DECISION, "message": {"id": "m1", "sequence": 2**64}}, id="sequence-past-64-bits"),
]


def test_a_decision_of_the_routes_shape_is_read_whole() -> None:
    for f, want in [(DECISION, ("accepted", "m1", 1)),
                    ({"status": "duplicate", "message": {"id": "m2", "sequence": 2**64 - 1}},
                     ("duplicate", "m2", 2**64 - 1)),
                    ({"status": "accepted", "message": {"id": "m3"}}, ("accepted", "m3", 0)),
                    ({"status": "accepted", "message": {"sequence": None}}, ("accepted", "", 0))]:
        d = Decision.from_wire(f)
        assert (d.status, d.id, d.sequence) == want


@pytest.mark.parametrize("decision", BAD_DECISIONS)
async def test_a_decision_of_another_shape_is_refused_over_http_and_websocket(decision: Any) -> None:
    with http_answering() as srv:
        srv.body = json.dumps(decision).encode()
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(CONTRACT)
        for call in (lambda: c.publish({"subject": "x", "data": {}}), lambda: c.release("qr_1")):
            with pytest.raises(ProtocolError) as e:
                call()
            assert e.value.code == "BAD_REQUEST"

    if not isinstance(decision, dict):
        return  # a frame is an object: the reader refuses any other, answering no call

    async def deciding(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "publish":
            await ws.send(json.dumps({**decision, "op": "decision", "re": f["id"]}))

    async with raw_session(deciding, CONTRACT) as s:
        with pytest.raises(ProtocolError) as e:
            await within(s.publish({"subject": "x", "data": {}}), 5)
        assert e.value.code == "BAD_REQUEST"
