"""An integer member of what the server sends is read as the Go client reads
it, whatever its spelling.

Go's ``encoding/json`` reads an integer member with ``strconv``: an
unsigned one (``uint64``: a message's ``sequence``, a frame's ``from``,
``sequence``, ``sequences``, ``notPendingSequences``; ``uint32``: ``hops``)
takes neither ``-0`` nor a negative, and no member takes ``1.0``, ``1e0``,
a string, a bool or a value beyond its bounds. A signed one (``int``,
``int64``: an ``attempt``, a signature's ``v``, ``maxFrame``) reads ``-0``
as 0. ``data`` holds any JSON.

json.loads reads ``-0`` as the ``int`` 0, so a message whose ``hops`` or
``sequence`` was spelled ``-0`` used to be taken. The client now reads it
apart (``NEGATIVE_ZERO``), which every check of an unsigned member refuses,
and as a plain 0 where Go reads a signed integer, or in ``data``. A frame
whose own integer member Go does not read (``"from":-0``, ``"from":1.0``,
``"notPendingSequences":[-0]``) is refused whole, as Go refuses it: the
call it answers fails ``BAD_REQUEST``. The message tables (deliveries,
receive and replay answers, publish decisions) are in test_message_shapes.py
and test_publish_decisions.py.

The verdicts are Go's (``json.Unmarshal`` into each type, Go 1.26).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness import raw_contract, raw_session, within
from pigeon_client import Decision, ProtocolError
from pigeon_client.model import NEGATIVE_ZERO, _unheld_message
from pigeon_client.ws import _frame_integer_fault, _loads_frame

# spelling: (whether Go reads it into a uint64, a uint32, an int64).
SPELLINGS: dict[str, tuple[bool, bool, bool]] = {
    "0": (True, True, True),
    "1": (True, True, True),
    "-0": (False, False, True),
    "-1": (False, False, True),
    "1.0": (False, False, False),
    "1e0": (False, False, False),
    "1E0": (False, False, False),
    "0e0": (False, False, False),
    "-0.0": (False, False, False),
    "4294967295": (True, True, True),
    "4294967296": (True, False, True),
    "9223372036854775807": (True, False, True),
    "9223372036854775808": (True, False, False),
    "18446744073709551615": (True, False, False),
    "18446744073709551616": (False, False, False),
    "true": (False, False, False),
    '"1"': (False, False, False),
    "[1]": (False, False, False),
    "{}": (False, False, False),
    "null": (True, True, True),  # the member reads as absent
}
U64, U32, I64 = 0, 1, 2

# Where the integer stands: (name, the Go type, the frame text around it).
MEMBERS: list[tuple[str, int, str]] = [
    ("a decision's message's sequence", U64, '{"op":"decision","re":"1","status":"accepted","message":{"id":"m","sequence":%s}}'),
    ("a decision's message's hops", U32, '{"op":"decision","re":"1","status":"accepted","message":{"id":"m","hops":%s}}'),
    ("a decision's message's signature v", I64,
     '{"op":"decision","re":"1","status":"accepted","message":{"id":"m","signature":{"kid":"k","alg":"ed25519","sig":"s","v":%s}}}'),
    ("a subscribed answer's from", U64, '{"op":"subscribed","re":"1","sub":"s","from":%s}'),
    ("an ok answer's notPendingSequences", U64, '{"op":"ok","re":"1","notPending":["m"],"notPendingSequences":[%s]}'),
    ("a frame's hops", U32, '{"op":"ok","re":"1","hops":%s}'),
    ("a contract answer's maxFrame", I64, '{"op":"contract","re":"1","contract":{"id":"c"},"maxFrame":%s}'),
    ("a deliver_batch's fromSequence", U64, '{"op":"deliver_batch","sub":"s","deliveries":[],"fromSequence":%s}'),
]


def _read(text: str) -> bool:
    """Whether the client takes the frame ``text``: it is JSON, has no
    integer member the reader refuses (:func:`_frame_integer_fault`), and a
    decision in it is one :meth:`Decision.from_wire` takes."""
    f, dups = _loads_frame(text)
    assert dups == []
    if _frame_integer_fault(f) is not None:
        return False
    if f["op"] == "decision":
        try:
            Decision.from_wire(f)
        except ProtocolError:
            return False
    return True


CASES = [pytest.param(member, kind, frame, spelling, goes[kind], id=f"{member}: {spelling}")
         for member, kind, frame in MEMBERS for spelling, goes in SPELLINGS.items()
         if not (spelling == "null" and "notPendingSequences" in member)]


@pytest.mark.parametrize("member,kind,frame,spelling,taken", CASES)
def test_an_integer_member_is_read_as_go_reads_it(member: str, kind: int, frame: str, spelling: str,
                                                   taken: bool) -> None:
    assert _read(frame % spelling) is taken


@pytest.mark.parametrize("spelling", ["+1", "01", "-01", "1.", ".5", "0x1", "1_000", "NaN", "Infinity", "-"])
def test_a_number_json_does_not_have_makes_no_frame(spelling: str) -> None:
    with pytest.raises(ValueError):
        _loads_frame('{"op":"ok","re":"1","from":%s}' % spelling)


def test_negative_zero_reads_as_zero_where_go_reads_a_signed_integer_or_no_integer() -> None:
    f, _ = _loads_frame(
        '{"op":"deliver","sub":"s","attempt":-0,"attempts":[-0,1],"maxFrame":-0,"deliveries":[{"attempt":-0}],'
        '"message":{"id":"m","sequence":-0,"hops":-0,"signature":{"kid":"k","v":-0},'
        '"data":{"n":-0,"list":[-0,{"sequence":-0}],"signature":{"v":-0}}},"details":{"n":-0}}')
    m = f["message"]
    # Signed members and data: a plain int 0, as before.
    for v in (f["attempt"], f["attempts"][0], f["maxFrame"], f["deliveries"][0]["attempt"], m["signature"]["v"],
              m["data"]["n"], m["data"]["list"][0], m["data"]["list"][1]["sequence"], m["data"]["signature"]["v"]):
        assert type(v) is int and v == 0
    assert json.dumps(m["data"]) == '{"n": 0, "list": [0, {"sequence": 0}], "signature": {"v": 0}}'
    # Unsigned members: kept apart, refused.
    assert m["sequence"] is NEGATIVE_ZERO and m["hops"] is NEGATIVE_ZERO
    assert f["details"]["n"] is NEGATIVE_ZERO and f["details"]["n"] == 0 and json.dumps(f["details"]) == '{"n": 0}'
    err = _unheld_message({**m, "sequence": 5}, "deliver")
    assert err is not None and err.details["hops"] == "-0", err
    err = _unheld_message({**m, "hops": None}, "deliver")
    assert err is not None and err.details["sequence"] == "-0", err
    # data is data: -0 alone, or in a string, changes nothing.
    for text in ('{"op":"ok","re":"1","data":-0}', '{"op":"ok","re":"1","id":"a-0","n":-0.5,"t":"2026-01-05T00:00:00-05:00"}'):
        f, _ = _loads_frame(text)
        assert _frame_integer_fault(f) is None and all(type(v) is not type(NEGATIVE_ZERO) for v in f.values())


# Frames answering a call whose own integer member Go does not read, each
# refusing the call whole: (the call, its answer's members).
REFUSED_ANSWERS: list[Any] = [
    pytest.param("subscribe", {"op": "subscribed", "sub": '"sub_1"', "from": "-0"}, id="subscribed from -0"),
    pytest.param("subscribe", {"op": "subscribed", "sub": '"sub_1"', "from": "1.0"}, id="subscribed from 1.0"),
    pytest.param("subscribe", {"op": "subscribed", "sub": '"sub_1"', "from": '"1"'}, id="subscribed from a string"),
    pytest.param("subscribe", {"op": "subscribed", "sub": '"sub_1"', "from": "18446744073709551616"},
                 id="subscribed from beyond 2^64-1"),
    pytest.param("ack", {"op": "ok", "notPending": '["m1"]', "notPendingSequences": "[-0]"},
                 id="ok notPendingSequences [-0]"),
    pytest.param("ack", {"op": "ok", "notPending": '["m1"]', "notPendingSequences": "[1e0]"},
                 id="ok notPendingSequences [1e0]"),
    pytest.param("ack", {"op": "ok", "sequence": "-0"}, id="ok sequence -0"),
    pytest.param("ping", {"op": "pong", "hops": "4294967296"}, id="pong hops beyond 2^32-1"),
    pytest.param("ping", {"op": "pong", "maxFrame": "1.5"}, id="pong maxFrame 1.5"),
]


def _frame(members: dict[str, str], re_: str) -> str:
    """The frame of ``members`` (each value JSON text, ``op`` a bare
    string) answering ``re_``."""
    body = ",".join(f'"{k}":{v if k != "op" else json.dumps(v)}' for k, v in members.items())
    return '{"re":' + json.dumps(re_) + "," + body + "}"


async def _call(s: Any, call: str) -> Any:
    if call == "subscribe":
        return await s.subscribe("x", lambda d: None)
    if call == "ack":
        return await s.ack("x", "m1", sequence=5)
    return await s.ping()


@pytest.mark.parametrize("call,members", REFUSED_ANSWERS)
async def test_an_answer_with_an_integer_member_go_does_not_read_fails_its_call(call: str,
                                                                                members: dict[str, str]) -> None:
    good = {k: v for k, v in members.items() if k == "op" or k == "sub"}
    current = {"members": members}

    async def on_frame(ws: Any, f: dict[str, Any]) -> None:
        await ws.send(_frame(current["members"], f["id"]))

    reported: list[Any] = []
    async with raw_session(on_frame, raw_contract("x"), on_error=reported.append) as s:
        with pytest.raises(ProtocolError) as e:
            await within(_call(s, call), 5)
        assert e.value.code == "BAD_REQUEST"
        member = next(k for k in members if k not in ("op", "sub", "notPending"))
        assert e.value.details["member"] == member, e.value.details
        # The same answer without the member is taken.
        current["members"] = good
        await within(_call(s, call), 5)
        assert reported == []


async def test_a_contract_answer_whose_max_frame_is_negative_zero_is_taken() -> None:
    """``maxFrame`` is a Go int64: ``-0`` is 0, which names no bound."""
    from websockets.asyncio.server import serve

    from pigeon_client import connect

    async def endpoint(ws: Any) -> None:
        async for raw in ws:
            f = json.loads(raw)
            await ws.send('{"op":"contract","re":%s,"contract":%s,"maxFrame":-0}'
                          % (json.dumps(f["id"]), json.dumps(raw_contract("x"))))

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False, auto_renew=False), 5)
        try:
            assert s.contract.id == "ctr_raw"
        finally:
            await s.close(timeout=1)
