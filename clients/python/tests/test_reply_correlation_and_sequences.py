"""A request/reply reply is the message a responder published with
``correlationId`` the request's id (docs/protocol.md "request", docs/http.md
``POST /v1/requests``). The client took whatever message the server
answered a request with: a reply to another request (another caller's,
with its data) or one answering none was handed over as this request's
reply. A request without an id, a signature or an idempotency key is now
sent with an id the client draws (the caller's dict is not changed), and a
reply whose correlationId is missing or names another id than the one sent
is refused (``ProtocolError``, ``BAD_REQUEST``), on both transports; with an
idempotency key any non-empty correlationId is taken.

A stored message's ``sequence`` in a receive, replay or reply answer was
not checked at all: a bool, a negative, a float or a string was handed
over (and sent back in an ack). A message whose sequence is present but
not an integer of 1 to 2^64-1 is now left out of a receive or replay
answer and reported to ``on_error`` (as one whose hops is no broker's),
and a reply with one fails its call. Each refusal test failed before the
fix."""
from __future__ import annotations

import contextlib
import copy
import http.server
import json
import re
import threading
from typing import Any, Callable, Iterator

import pytest

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import HttpClient, ProtocolError
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")
DRAWN = re.compile(r"msg_[0-9a-z]{20}")


def reply_to(req: dict[str, Any], correlation: Any) -> dict[str, Any]:
    """The reply a responder would publish to request message ``req``, with
    ``correlationId`` ``correlation`` (left out when ``...``)."""
    m: dict[str, Any] = {"id": "msg_reply", "subject": "x", "type": "reply", "data": {"for": req.get("id")},
                         "sequence": 9}
    if correlation is not ...:
        m["correlationId"] = correlation
    return m


OK = "ok"
NONE = "without a correlationId"
OTHER = "another request"
# A correlationId that is no string makes the reply no message the broker
# sends (tests/test_message_shapes.py).
MISSHAPEN = "whose correlationId is not a string"

# (name, message, correlation of the reply for the request as sent (... : none), expected)
CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], Any], str]] = [
    ("drawn-id-taken", {"subject": "x", "data": {"n": 1}}, lambda r: r["id"], OK),
    ("drawn-id-other-refused", {"subject": "x", "data": {"n": 1}}, lambda r: "msg_someone_else", OTHER),
    ("drawn-id-none-refused", {"subject": "x", "data": {"n": 1}}, lambda r: ..., NONE),
    ("drawn-id-empty-refused", {"subject": "x", "data": {"n": 1}}, lambda r: "", NONE),
    ("drawn-id-null-refused", {"subject": "x", "data": {"n": 1}}, lambda r: None, NONE),
    ("drawn-id-number-refused", {"subject": "x", "data": {"n": 1}}, lambda r: 7, MISSHAPEN),
    ("own-id-taken", {"id": "m_mine", "subject": "x", "data": {}}, lambda r: "m_mine", OK),
    ("own-id-other-refused", {"id": "m_mine", "subject": "x", "data": {}}, lambda r: "m_other", OTHER),
    ("keyed-any-taken", {"subject": "x", "data": {}, "idempotencyKey": "k1"}, lambda r: "msg_first", OK),
    ("keyed-with-id-any-taken", {"id": "m_mine", "subject": "x", "data": {}, "idempotencyKey": "k1"},
     lambda r: "msg_first", OK),
    ("keyed-none-refused", {"subject": "x", "data": {}, "idempotencyKey": "k1"}, lambda r: ..., NONE),
    ("signed-not-drawn", {"subject": "x", "data": {}, "signature": {"v": 2, "kid": "sig_k", "alg": "ed25519",
                                                                    "value": "AA"}}, lambda r: "msg_any", OK),
]


def check_case(message: dict[str, Any], before: dict[str, Any], sent: dict[str, Any], got: Any,
               expected: str) -> None:
    assert message == before, "the caller's message is not changed"
    if before.get("id"):
        assert sent["id"] == before["id"], "the caller's id is sent"
    elif before.get("idempotencyKey") or before.get("signature") is not None:
        assert "id" not in sent, "no id is drawn where one is bound"
    else:
        assert DRAWN.fullmatch(sent["id"]), sent
    assert {k: v for k, v in sent.items() if k != "id"} == {k: v for k, v in before.items() if k != "id"}
    if expected == OK:
        assert isinstance(got, dict) and got["id"] == "msg_reply", got
    else:
        assert isinstance(got, ProtocolError), got
        assert got.code == "BAD_REQUEST" and expected in got.message, got
        assert got.details["op"] == "reply"


@pytest.mark.parametrize(("name", "message", "correlation", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_a_ws_request_takes_only_the_reply_that_answers_it(name, message, correlation, expected):
    sent: list = []

    async def on_frame(ws, f):
        if f["op"] == "request":
            sent.append(f["message"])
            await ws.send(json.dumps({"op": "reply", "re": f["id"], "status": "replied",
                                      "message": reply_to(f["message"], correlation(f["message"]))}))

    before = copy.deepcopy(message)
    async with raw_session(on_frame, CONTRACT) as s:
        try:
            got: Any = await within(s.request(message, timeout=5), 10)
        except ProtocolError as e:
            got = e
    check_case(message, before, sent[-1], got, expected)


async def test_each_ws_request_draws_its_own_id():
    sent: list = []

    async def on_frame(ws, f):
        if f["op"] == "request":
            sent.append(f["message"]["id"])
            reply = reply_to(f["message"], f["message"]["id"])
            await ws.send(json.dumps({"op": "reply", "re": f["id"], "message": reply}))

    async with raw_session(on_frame, CONTRACT) as s:
        m = {"subject": "x", "data": {}}
        for _ in range(3):
            await within(s.request(m, timeout=5), 10)
    assert len(set(sent)) == 3 and all(DRAWN.fullmatch(i) for i in sent)


@contextlib.contextmanager
def replying(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[tuple[str, list]]:
    """A raw HTTP endpoint answering ``POST /v1/requests`` with
    ``{"status": "replied", "message": answer(request body)}``; yields its
    URL and the request bodies it received."""
    bodies: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            bodies.append(body)
            out = json.dumps({"status": "replied", "message": answer(body)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", bodies
    finally:
        srv.shutdown()
        srv.server_close()


def _http(url: str, **opts: Any) -> HttpClient:
    c = HttpClient(url, "t", timeout=5, **opts)
    c.contract = Contract.from_wire(CONTRACT)
    return c


@pytest.mark.parametrize(("name", "message", "correlation", "expected"), CASES, ids=[c[0] for c in CASES])
def test_an_http_request_takes_only_the_reply_that_answers_it(name, message, correlation, expected):
    before = copy.deepcopy(message)
    with replying(lambda b: reply_to(b["message"], correlation(b["message"]))) as (url, bodies):
        try:
            got: Any = _http(url).request(message, timeout=5)
        except ProtocolError as e:
            got = e
    assert len(bodies) == 1
    check_case(message, before, bodies[0]["message"], got, expected)


# --- sequences of stored messages -------------------------------------------

BAD_SEQUENCES = [True, False, -1, 0, 1.5, 2.0, "3", [], {}, 2**64]
GOOD_SEQUENCES = [1, 2**64 - 1]


def msg(i: int, **over: Any) -> dict[str, Any]:
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


def _check_pulled(got: list, reported: list, what: str, bad: Any) -> None:
    assert [m["id"] for m in got] == ["msg_2", "msg_3", "msg_4"], "the others go on"
    assert len(reported) == 1, reported
    e = reported[0]
    assert isinstance(e, ProtocolError) and e.code == "BAD_REQUEST" and "sequence" in e.message
    want = bad if type(bad) is int else type(bad).__name__
    assert e.details == {"op": what, "index": 0, "messageId": "msg_1", "sequence": want}


def _answer(bad: Any) -> dict[str, Any]:
    return {"messages": [msg(1, sequence=bad), msg(2), msg(3, sequence=GOOD_SEQUENCES[1]), msg(4)],
            "attempts": [1, 1, 1, 1]}


@pytest.mark.parametrize("bad", BAD_SEQUENCES, ids=repr)
async def test_a_ws_received_replayed_or_reply_message_whose_sequence_is_no_brokers_is_refused(bad):
    reported: list = []
    reply: dict[str, Any] = {}

    async def on_frame(ws, f):
        if f["op"] in ("receive", "replay"):
            await ws.send(json.dumps({"op": "messages", "re": f["id"], **_answer(bad)}))
        elif f["op"] == "request":
            await ws.send(json.dumps({"op": "reply", "re": f["id"],
                                      "message": {**reply, "correlationId": f["message"]["id"]}}))

    async with raw_session(on_frame, CONTRACT, on_error=reported.append) as s:
        for what in ("receive", "replay"):
            reported.clear()
            got = await within(s.receive("x", 10) if what == "receive" else s.replay("x", reason="audit"), 5)
            _check_pulled(got, reported, what, bad)
        reply.update(msg(1, sequence=bad))
        with pytest.raises(ProtocolError) as e:
            await within(s.request({"subject": "x", "data": {}}, timeout=5), 10)
        assert e.value.code == "BAD_REQUEST" and "sequence" in e.value.message
        assert e.value.details["op"] == "reply"
        for good in GOOD_SEQUENCES:
            reply.update(msg(1, sequence=good))
            assert (await within(s.request({"subject": "x", "data": {}}, timeout=5), 10))["sequence"] == good


@pytest.mark.parametrize("bad", BAD_SEQUENCES, ids=repr)
def test_an_http_received_replayed_or_reply_message_whose_sequence_is_no_brokers_is_refused(bad):
    reported: list = []
    with http_answering() as srv:
        c = _http(srv.url, on_error=reported.append)
        srv.body = json.dumps(_answer(bad)).encode()
        for what in ("receive", "replay"):
            reported.clear()
            got = c.receive("x", ack="explicit") if what == "receive" else c.replay("x", reason="audit")
            _check_pulled(got, reported, what, bad)
        # A keyed request takes any correlationId: the sequence alone is refused.
        srv.body = json.dumps({"status": "replied", "message": msg(1, sequence=bad, correlationId="c")}).encode()
        with pytest.raises(ProtocolError) as e:
            c.request({"subject": "x", "data": {}, "idempotencyKey": "k"})
        assert e.value.code == "BAD_REQUEST" and "sequence" in e.value.message
        assert e.value.details["op"] == "reply"
        for good in GOOD_SEQUENCES:
            srv.body = json.dumps({"status": "replied", "message": msg(1, sequence=good, correlationId="c")}).encode()
            assert c.request({"subject": "x", "data": {}, "idempotencyKey": "k"})["sequence"] == good
