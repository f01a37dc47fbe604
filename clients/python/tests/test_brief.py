"""Brief publish answers (docs/protocol.md, "Brief answers"): the session asks
for them and puts the data it sent back, so that a publish's decision
carries the very message a subscriber receives.

The subjects of the conformance catalog all have schemas, so the tests
against a real server start one of their own, whose catalog has one subject
without a schema, which takes any data. The frames themselves are checked
against a raw WebSocket endpoint the test runs."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import serve

from conftest import Server
from harness import eventually, fresh, raw_contract, within
from pigeon_client import PigeonError, connect

WRITER = "spiffe://clients/ns/test/sa/writer"
SUBJECT = "notes.any"

# The data shapes.
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("an object", {"data": {"text": "hi", "n": [1, 2.5, -3e-7, {"x": None}], "ok": True}}),
    ("escapes and non-ASCII",
     {"data": {"text": "café \"q\" \\ ✓ 😀 \n\t\x01 </script>", "nested": {"ключ": ["ü", {"\u2028": ""}]}}}),
    ("an empty object", {"data": {}}),
    ("no data", {}),
    ("null", {"data": None}),
    ("a string", {"data": "just text"}),
    ("a number", {"data": 1.5e300}),
    ("an array", {"data": [{}, [], ""]}),
]

# Members that name data in another case: the server refuses the message
# (member names are case-sensitive), and the client sends them as given.
OTHER_CASE: list[tuple[str, dict[str, Any]]] = [
    ("Data", {"Data": {"upper": True}}),
    ("data then DATA", {"data": {"first": 1}, "DATA": {"last": 2}}),
]


def note(**over: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"type": "note", "subject": SUBJECT, "intent": "note"}
    m.update(over)
    return m


@pytest.fixture(scope="module")
def notes_server(pigeon_bin: str):
    """A server whose catalog is notes.any (pub/sub, no schema) and the writer's token."""
    d = Path(tempfile.mkdtemp(prefix="pigeon-py-brief-"))
    (d / "subjects").mkdir()
    (d / "schemas").mkdir()
    allow = [{"effect": "allow", "principals": [WRITER]}]
    (d / "subjects" / f"{SUBJECT}.json").write_text(json.dumps({
        "name": SUBJECT, "version": "v1", "mode": "pubsub", "intents": ["note"],
        "policy": {"publish": allow, "receive": allow, "ack": allow},
    }))
    (d / "tokens.yaml").write_text(f'tokens:\n  - {{ token: writer-token, principal: "{WRITER}" }}\n')
    s = Server(pigeon_bin, catalog=str(d)).start()
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


async def _subscribe(s) -> dict[str, dict[str, Any]]:
    """Subscribes s to notes.any; returns the messages delivered, by id."""
    got: dict[str, dict[str, Any]] = {}

    def handler(d) -> None:
        got[d.id] = d.message

    await s.subscribe(SUBJECT, handler)
    return got


async def test_brief_result_is_the_delivery(notes_server):
    s = await connect(notes_server.ws, "writer-token", [SUBJECT])
    try:
        got = await _subscribe(s)
        for name, over in SHAPES:
            m = note(**over)
            sent = json.dumps(m)
            d = await within(s.publish(m))
            assert d.status == "accepted", name
            await eventually(lambda: d.id in got, 5, f"the delivery of {name}")
            assert d.message == got[d.id], name
            assert "data" in d.message, name
            assert json.dumps(m) == sent, f"{name}: the caller's message is not touched"
            v = d.message["data"]
            if isinstance(v, (dict, list)):
                assert all(v is not x for x in m.values()), f"{name}: the decision's data is its own"
        # Queued together, they leave in one publish_batch.
        futs = [await s.publish_async(note(**over)) for _, over in SHAPES]
        ds = await within(asyncio.gather(*futs))
        await eventually(lambda: all(d.id in got for d in ds), 5, "the batch's deliveries")
        for (name, _), d in zip(SHAPES, ds):
            assert d.status == "accepted", name
            assert d.message == got[d.id], f"batched: {name}"
    finally:
        await s.close()


async def test_member_naming_data_in_another_case_is_refused(notes_server):
    s = await connect(notes_server.ws, "writer-token", [SUBJECT])
    try:
        for name, over in OTHER_CASE:
            with pytest.raises(PigeonError) as e:
                await within(s.publish(note(**over)))
            assert e.value.code == "ENVELOPE_INVALID", name
            assert "only in case" in str(e.value), name
        # In a batch, that message alone.
        futs = [await s.publish_async(m) for m in (note(data={"v": 1}), note(Data={"v": 2}))]
        ok, bad = await within(asyncio.gather(*futs, return_exceptions=True))
        assert not isinstance(ok, BaseException) and ok.status == "accepted" and ok.message["data"] == {"v": 1}
        assert isinstance(bad, PigeonError) and bad.code == "ENVELOPE_INVALID"
    finally:
        await s.close()


async def test_brief_duplicate_keeps_the_original_data(notes_server):
    s = await connect(notes_server.ws, "writer-token", [SUBJECT])
    try:
        got = await _subscribe(s)
        key = fresh("dup")
        first = await within(s.publish(note(idempotencyKey=key, data={"v": 1, "text": "ü"})))
        assert first.status == "accepted"
        await eventually(lambda: first.id in got, 5, "the original's delivery")
        assert first.message == got[first.id]
        again = await within(s.publish(note(idempotencyKey=key, data={"v": 2})))
        assert again.status == "duplicate"
        assert again.message == first.message
        # The same in a batch, beside a new message without data and its duplicate.
        key2 = fresh("dup")
        futs = [await s.publish_async(m) for m in (
            note(idempotencyKey=key, data={"v": 3}),
            note(idempotencyKey=key2),
            note(idempotencyKey=key2, data={"v": 4}),
        )]
        dup, new, new_again = await within(asyncio.gather(*futs))
        assert dup.status == "duplicate" and dup.message == first.message
        assert new.status == "accepted" and new.message["data"] == {}
        assert new_again.status == "duplicate" and new_again.message == new.message
    finally:
        await s.close()


CONTRACT = raw_contract(SUBJECT)


def raw_endpoint(mode: str, frames: list[dict[str, Any]]):
    """A server in a few lines: it answers negotiate, publish and
    publish_batch and keeps the frames. As a current server ("brief") it
    leaves the data out of an accepted message when the frame asks for it;
    as a server that ignores brief ("full") it answers with data of its own,
    which the session must keep. A message whose idempotencyKey is "dup" is
    a duplicate, with the original's data."""
    n = 0

    def decide(f: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
        nonlocal n
        n += 1
        message = {**m, "id": f"msg_{n}", "source": "spiffe://raw", "sequence": n}
        status = "duplicate" if m.get("idempotencyKey") == "dup" else "accepted"
        if status == "duplicate":
            message["data"] = {"original": True}
        elif mode == "full":
            message["data"] = {"server": "kept"}
        elif f.get("brief") is True:
            message.pop("data", None)
        else:
            message.setdefault("data", {})
        return {"status": status, "message": message}

    async def endpoint(ws):
        async for raw in ws:
            f = json.loads(raw)
            frames.append(f)
            if f["op"] == "negotiate":
                a = {"op": "contract", "re": f["id"], "contract": CONTRACT, "maxFrame": 1 << 20}
            elif f["op"] == "publish":
                a = {"op": "decision", "re": f["id"], **decide(f, f["message"])}
            elif f["op"] == "publish_batch":
                a = {"op": "decisions", "re": f["id"], "results": [decide(f, m) for m in f["messages"]]}
            else:
                a = {"op": "error", "re": f["id"], "error": {"code": "BAD_REQUEST", "message": f"no {f['op']} here"}}
            await ws.send(json.dumps(a))

    return endpoint


@pytest.mark.parametrize("mode", ["brief", "full"])
async def test_publish_frames_ask_for_brief_answers(mode):
    frames: list[dict[str, Any]] = []
    async with serve(raw_endpoint(mode, frames), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await connect(f"ws://127.0.0.1:{port}/v1/ws", "raw-token", [SUBJECT], reconnect=False)
        try:
            data = {"text": "café \"q\" ✓", "n": [1.5, None, {"x": []}]}
            one = await within(s.publish(note(data=data)), 5)
            futs = [await s.publish_async(m) for m in (
                note(), note(data=None), note(Data=[1, "two"]), note(idempotencyKey="dup", data={"sent": 1}),
            )]
            none, null, upper, dup = await within(asyncio.gather(*futs), 5)
            assert [f["op"] for f in frames] == ["negotiate", "publish", "publish_batch"]
            for f in frames[1:]:
                assert f.get("brief") is True, f"{f['op']} asks for a brief answer"
            # Member names go as given: the server refuses "Data" (names are case-sensitive).
            assert frames[2]["messages"][2] == {"type": "note", "subject": SUBJECT, "intent": "note", "Data": [1, "two"]}
            assert [(d.status, d.id) for d in (one, none, null, upper, dup)] == [
                ("accepted", "msg_1"), ("accepted", "msg_2"), ("accepted", "msg_3"), ("accepted", "msg_4"),
                ("duplicate", "msg_5"),
            ]
            if mode == "brief":
                assert one.message["data"] == data and one.message["data"] is not data
                assert none.message["data"] == {}
                assert "data" in null.message and null.message["data"] is None
            else:
                for d in (one, none, null, upper):
                    assert d.message["data"] == {"server": "kept"}, "an answer's own data is kept"
            assert dup.message["data"] == {"original": True}, "a duplicate keeps the original's data"
        finally:
            await s.close()
