"""A message a delivery (``deliver``, a ``deliver_batch`` entry), a receive or
a replay hands over is one the broker could have sent: each member of the
envelope of the type the Go struct ``pigeon.Message`` gives it
(docs/protocol.md), as the Go and Rust clients decode it.

One with a member of another type (a ``sequence`` that is a string,
negative, a fraction, spelled ``5.0`` or beyond 2^64-1; an ``id`` that is a
number; a ``time`` that is a number; a ``type`` that is an object; ``hops``
negative, spelled ``-0`` or beyond 2^32-1; a ``signature`` that is no
object or whose ``v`` is a fraction), or a message or an entry that is no
object, is refused alone: reported (``ProtocolError``: its op, its index in
a list, its message's id when it is a string), never handed over and never
acked, the others handed over and acked. The table is the Go client's (transport/ws,
``TestListEntryRefusedAlone``), at each position of three entries. Before,
a ``time`` that is a number, a ``type`` that is an object or a signature of
another shape was handed over as it came, and a receive or replay message
whose ``id`` is a number too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.server import serve

from harness import SubscribingEndpoint, eventually, http_answering, negotiating, raw_contract, raw_session, within
from pigeon_client import HttpClient, ProtocolError, connect
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")

# A stored message, id msg_x at sequence 5, as the broker writes it; each
# row spoils one member of it.
MESSAGE = ('{"specversion":"1.0","id":"msg_x","type":"job","source":"p","subject":"x",'
           '"time":"2026-01-01T00:00:00Z","sequence":5,"data":{}}')

DATA = '"data":{}'


def spoil(old: str, new: str) -> dict[str, Any]:
    return {"old": old, "new": new}


# Entries no broker sends: MESSAGE with old replaced by new, a "message" in
# its place, or an "entry" in the entry's place (a deliver_batch's
# delivery, a receive or replay answer's message; no deliver has one).
# "id": whether the report names the message's id (a string).
ROWS: list[tuple[str, dict[str, Any]]] = [
    ("sequence a string", {**spoil('"sequence":5', '"sequence":"5"'), "id": True}),
    ("sequence negative", {**spoil('"sequence":5', '"sequence":-5'), "id": True}),
    ("sequence a fraction", {**spoil('"sequence":5', '"sequence":5.5'), "id": True}),
    ("sequence spelled 5.0", {**spoil('"sequence":5', '"sequence":5.0'), "id": True}),
    ("sequence spelled 5e0", {**spoil('"sequence":5', '"sequence":5e0'), "id": True}),
    ("sequence beyond 2^64-1", {**spoil('"sequence":5', '"sequence":18446744073709551616'), "id": True}),
    ("sequence spelled -0", {**spoil('"sequence":5', '"sequence":-0'), "id": True}),
    ("id a number", spoil('"id":"msg_x"', '"id":7')),
    ("time a number", {**spoil('"time":"2026-01-01T00:00:00Z"', '"time":20260101'), "id": True}),
    ("type an object", {**spoil('"type":"job"', '"type":{"name":"job"}'), "id": True}),
    ("source a bool", {**spoil('"source":"p"', '"source":true'), "id": True}),
    ("correlationId a list", {**spoil(DATA, DATA + ',"correlationId":["c"]'), "id": True}),
    ("hops negative", {**spoil(DATA, DATA + ',"hops":-1'), "id": True}),
    ("hops beyond 2^32-1", {**spoil(DATA, DATA + ',"hops":4294967296'), "id": True}),
    ("hops spelled 1.0", {**spoil(DATA, DATA + ',"hops":1.0'), "id": True}),
    ("hops spelled -0", {**spoil(DATA, DATA + ',"hops":-0'), "id": True}),
    ("signature a string", {**spoil(DATA, DATA + ',"signature":"sig"'), "id": True}),
    ("signature a list", {**spoil(DATA, DATA + ',"signature":[]'), "id": True}),
    ("signature kid a number",
     {**spoil(DATA, DATA + ',"signature":{"kid":7,"alg":"ed25519","sig":"x","v":2}'), "id": True}),
    ("signature form a fraction",
     {**spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.5}'), "id": True}),
    ("signature form spelled 2.0",
     {**spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.0}'), "id": True}),
    ("signature form a string",
     {**spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":"2"}'), "id": True}),
    ("signature form beyond 2^63-1",
     {**spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":9223372036854775808}'),
      "id": True}),
    ("message a number", {"message": "7"}),
    ("message a list", {"message": "[" + MESSAGE + "]"}),
    ("message null", {"message": "null"}),
    ("entry a number", {"entry": "7"}),
    ("entry a string", {"entry": '"msg_x"'}),
    ("entry a list", {"entry": '[{"attempt":1,"message":' + MESSAGE + "}]"}),
    ("entry a bool", {"entry": "true"}),
    ("entry null", {"entry": "null"}),
]

# Messages the broker does send, with members the rows above spoil: each is
# handed over (null reads as absent, as in every envelope field; a
# signature's v of another integer names a form that never verifies, and
# is still a message).
TAKEN: list[tuple[str, dict[str, Any]]] = [
    ("members null", spoil('"type":"job"', '"type":null,"signature":null,"hops":null,"reason":null')),
    ("time null", spoil('"time":"2026-01-01T00:00:00Z"', '"time":null')),
    ("signature of every member", spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2}')),
    ("signature form 3", spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":3}')),
    ("signature form null", spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":null}')),
    ("hops 2^32-1", spoil(DATA, DATA + ',"hops":4294967295')),
    ("data's own 5.0", spoil(DATA, '"data":{"sequence":5.0,"v":2.5,"time":1}')),
    ("data's own -0", spoil(DATA, '"data":{"sequence":-0,"hops":[-0]}')),
    # A Go int: -0 is 0, the first form.
    ("signature form spelled -0", spoil(DATA, DATA + ',"signature":{"kid":"k","alg":"ed25519","sig":"x","v":-0}')),
    ("a member the envelope does not name", spoil(DATA, DATA + ',"extra":{"n":1.0}')),
]

CASES = [pytest.param(row, False, id=name) for name, row in ROWS] + \
        [pytest.param(row, True, id="taken: " + name) for name, row in TAKEN]

POSITIONS = [("first", 0), ("middle", 1), ("last", 2)]


def message_text(mid: str, seq: int, row: dict[str, Any] | None = None) -> str:
    """The message text of ``mid`` at ``seq`` (MESSAGE, spoiled by ``row``)."""
    m = MESSAGE
    if row is not None and "message" in row:
        m = row["message"]
    elif row is not None and "old" in row:
        m = m.replace(row["old"], row["new"], 1)
    return m.replace('"msg_x"', json.dumps(mid), 1).replace('"sequence":5,', f'"sequence":{seq},', 1)


def entries(tag: str, base: int, row: dict[str, Any], at: int) -> list[tuple[str, int, int, str, str | None]]:
    """Three entries, the row's at ``at`` (id ``{tag}_x``, sequence 5
    unless the row spoils it) among two the broker writes (``{tag}_a`` and
    ``{tag}_b``, at sequences base+1 and base+2, attempts 2 and 3): (id,
    attempt, sequence, message text, entry text or None)."""
    good = [(f"{tag}_a", 2, base + 1), (f"{tag}_b", 3, base + 2)]
    out = []
    for i in range(3):
        if i == at:
            out.append((f"{tag}_x", 1, 5, message_text(f"{tag}_x", 5, row), row.get("entry")))
        else:
            mid, attempt, seq = good.pop(0)
            out.append((mid, attempt, seq, message_text(mid, seq), None))
    return out


def report_wrong(e: Any, op: str, index: int | None, mid: str | None) -> str | None:
    """Why ``e`` is not the report of the refused entry (a ProtocolError
    naming its op, its index in a list and its message's id, when a
    string); None when it is."""
    if not isinstance(e, ProtocolError):
        return f"not a ProtocolError: {e!r}"
    d = e.details or {}
    if d.get("op") != op or d.get("index") != index or (mid is not None and d.get("messageId") != mid):
        return f"{e}: {d}"
    return None


@pytest.mark.parametrize("row,taken", CASES)
@pytest.mark.parametrize("op", ["deliver", "deliver_batch"])
async def test_a_delivery_of_a_message_no_broker_sends_is_refused_alone(op, row, taken):
    if op == "deliver" and "entry" in row:
        pytest.skip("no deliver holds an entry")
    ep = SubscribingEndpoint()
    reported: list[Any] = []
    handled: list[tuple[str, int, Any]] = []
    wrong: list[str] = []
    async with serve(negotiating(ep.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], on_error=reported.append,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await within(s.subscribe("x", lambda d: handled.append((d.id, d.attempt, d.message.get("sequence")))), 5)
            base = 100
            for pos, at in POSITIONS:
                handled.clear()
                reported.clear()
                ep.frames.clear()
                base += 10
                tag = f"m{base}"
                all_ = entries(tag, base, row, at)
                texts = [e if e is not None else f'{{"attempt":{a},"message":{m}}}' for _, a, _, m, e in all_]
                ws = ep.conns[-1]
                if op == "deliver_batch":
                    await ws.send('{"op":"deliver_batch","sub":"sub_1","deliveries":[' + ",".join(texts) + "]}")
                else:
                    for t in texts:
                        await ws.send('{"op":"deliver","sub":"sub_1",' + t[1:])
                # Then a delivery of its own: once it is handled and acked, those before it were read.
                end = (f"{tag}_end", 1, base + 9)
                end_text = message_text(end[0], end[2])
                await ws.send('{"op":"deliver","sub":"sub_1","attempt":1,"message":' + end_text + "}")
                kept = [(i, a, q) for i, a, q, _, _ in all_ if taken or i != f"{tag}_x"] + [end]
                want = (sorted(kept), sorted(("ack", i, q) for i, _, q in kept), 0 if taken else 1)

                def have() -> tuple[Any, ...]:
                    return sorted(handled), sorted(ep.answered()), len(reported)

                try:
                    await eventually(lambda: have() == want, 3, f"{pos}: the deliveries")
                except AssertionError:
                    wrong.append(f"{pos}: {have()} ({reported}), not {want}")
                    continue
                if not taken:
                    why = report_wrong(reported[0], op, at if op == "deliver_batch" else None,
                                       f"{tag}_x" if row.get("id") else None)
                    if why:
                        wrong.append(f"{pos}: the report {why}")
        finally:
            await s.close(timeout=1)
    assert wrong == []


def _pulled(op: str, row: dict[str, Any], taken: bool, at: int, tag: str, base: int,
            got: list[Any], reported: list[Any]) -> tuple[list[str], list[tuple[str, int, int]]]:
    """What is wrong with the messages a pull handed over (``got``) and
    its reports, and the (id, attempt, sequence) of those to be acked."""
    wrong: list[str] = []
    all_ = entries(tag, base, row, at)
    kept = [(i, a if op == "receive" else 0, q) for i, a, q, _, _ in all_ if taken or i != f"{tag}_x"]
    seen = [(m.get("id"), m.attempt, m.get("sequence")) for m in got]
    if seen != kept:
        wrong.append(f"handed over {seen}, not {kept}")
    if len(reported) != (0 if taken else 1):
        wrong.append(f"reports {reported}")
    elif not taken:
        why = report_wrong(reported[0], op, at, f"{tag}_x" if row.get("id") else None)
        if why:
            wrong.append(f"the report {why}")
    return wrong, kept


def answer(op: str, all_: list[tuple[str, int, int, str, str | None]]) -> str:
    """The members of a messages answer holding the entries (and their attempts, for a receive)."""
    text = '"messages":[' + ",".join(e if e is not None else m for _, _, _, m, e in all_) + "]"
    if op == "receive":
        text += ',"attempts":[' + ",".join(str(a) for _, a, _, _, _ in all_) + "]"
    return text


@pytest.mark.parametrize("row,taken", CASES)
@pytest.mark.parametrize("op", ["receive", "replay"])
async def test_a_pulled_message_no_broker_sends_is_left_out_alone(op, row, taken):
    reported: list[Any] = []
    acked: list[tuple[str, int, int]] = []
    current = {"answer": ""}
    wrong: list[str] = []

    async def on_frame(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == op:
            await ws.send('{"op":"messages","re":' + json.dumps(f["id"]) + "," + current["answer"] + "}")
            return
        if f["op"] == "ack":
            acked.append((f["messageId"], f.get("attempt", 0), f.get("sequence", 0)))
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    base = 100
    async with raw_session(on_frame, CONTRACT, on_error=reported.append) as s:
        for pos, at in POSITIONS:
            reported.clear()
            acked.clear()
            base += 10
            tag = f"m{base}"
            current["answer"] = answer(op, entries(tag, base, row, at))
            got = await within(s.receive("x") if op == "receive" else s.replay("x"), 5)
            why, kept = _pulled(op, row, taken, at, tag, base, got, reported)
            wrong += [f"ws {pos}: {w}" for w in why]
            if op == "receive":
                for m in got:
                    await within(s.ack("x", m), 5)
                if acked != kept:
                    wrong.append(f"ws {pos}: acked {acked}, not {kept}")
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5, on_error=reported.append)
        c.contract = Contract.from_wire(CONTRACT)
        for pos, at in POSITIONS:
            reported.clear()
            base += 10
            tag = f"m{base}"
            srv.body = ("{" + answer(op, entries(tag, base, row, at)) + "}").encode()
            got = c.receive("x", ack="explicit") if op == "receive" else c.replay("x")
            why, _ = _pulled(op, row, taken, at, tag, base, got, reported)
            wrong += [f"http {pos}: {w}" for w in why]
    assert wrong == []
