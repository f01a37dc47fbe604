"""Frames a server may not send: an object with two members of one name
(which ``json.loads`` reads as the last), and a close whose reason is a
stable code. Each test failed before its fix in pigeon_client/."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness import ROOT, http_answering, raw_contract, raw_session, within
from pigeon_client import HttpClient, PigeonError, ProtocolError
from pigeon_client.model import Contract
from pigeon_client.errors import is_server_code

CONTRACT = raw_contract("x")


def _msg(i: int, rest: str | None = None) -> str:
    return '{"id":"msg_%d","subject":"x"%s}' % (i, rest if rest is not None else ',"sequence":%d,"data":{}' % i)


HOSTILE = [
    '{"op":"deliver","sub":"sub_1","attempt":1,"message":%s}' % _msg(7, ',"sequence":7,"sequence":70,"data":{}'),
    '{"op":"deliver","sub":"sub_1","attempt":1,"message":%s}' % _msg(8, ',"sequence":8,"data":{"a":1,"a":2}'),
    '{"op":"deliver","sub":"sub_1","attempt":1,"message":%s}' % _msg(6, ',"sequence":6,"data":{"n":[{"c":1,"\\u0063":2}]}'),
    '{"op":"deliver","sub":"sub_1","attempt":1,"attempt":2,"message":%s}' % _msg(5),
    '{"op":"deliver","sub":"sub_other","sub":"sub_1","attempt":1,"message":%s}' % _msg(4),
    '{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":%s}]}' % _msg(3, ',"id":"msg_33","sequence":3,"data":{}'),
    '{"op":"error","error":{"code":"FORBIDDEN","code":"INTERNAL","message":"m"}}',
]


async def test_a_frame_holding_a_duplicate_key_is_refused_and_its_delivery_not_handed_over():
    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            for h in HOSTILE:
                await ws.send(h)
            await ws.send('{"op":"deliver","sub":"sub_1","attempt":1,"message":%s}' % _msg(9, ',"sequence":9,"data":{"a":"\\"a\\":1","b":{"a":2}}'))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    reported: list[Exception] = []
    async with raw_session(on_frame, CONTRACT, on_error=reported.append) as s:
        seen: list[str] = []
        await s.subscribe("x", lambda d: seen.append(f"{d.message['id']}@{d.message['sequence']}"))
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert seen == ["msg_9@9"], "no delivery of a frame with a duplicate key was handed over"
        bad = [e for e in reported if isinstance(e, ProtocolError) and e.code == "BAD_REQUEST" and "twice" in e.message]
        assert len(bad) == len(HOSTILE), reported
        assert not s.closed


async def test_a_call_answered_by_a_frame_holding_a_duplicate_key_fails_at_once():
    async def on_frame(ws, f):
        op, re_ = f["op"], f["id"]
        if op == "receive":
            await ws.send('{"op":"messages","re":"%s","messages":[],"messages":[%s]}' % (re_, _msg(1)))
        elif op == "ack":
            await ws.send('{"op":"error","re":"%s","error":{"code":"FORBIDDEN","code":"NOT_FOUND","message":"m"}}' % re_)
        elif op == "renew":
            await ws.send('{"op":"contract","re":"%s","contract":{"id":"ctr_2","id":"ctr_3","principal":"p","subjects":[]}}' % re_)
        elif op in ("publish", "publish_batch"):
            await ws.send('{"op":"decision","re":"%s","status":"accepted","message":%s}' % (re_, _msg(1, ',"sequence":1,"sequence":2,"data":{}')))
        else:
            await ws.send(json.dumps({"op": "ok", "re": re_}))

    async with raw_session(on_frame, CONTRACT, call_timeout=5) as s:
        calls = {
            "receive": lambda: s.receive("x"),
            "ack (an error answer)": lambda: s.ack("x", "msg_1"),
            "renew": lambda: s.renew(),
            "publish": lambda: s.publish({"subject": "x", "type": "t", "data": {}}),
        }
        for name, call in calls.items():
            with pytest.raises(ProtocolError) as ei:
                await within(call(), 2)
            assert ei.value.code == "BAD_REQUEST" and "twice" in ei.value.message, (name, ei.value)
        assert not s.closed


@pytest.mark.parametrize("status,body", [
    (200, b'{"status":"ok","status":"down"}'),
    (202, b'{"status":"accepted","message":%s}' % _msg(8, ',"sequence":8,"sequence":70,"data":{}').encode()),
    (202, b'{"status":"accepted","message":%s}' % _msg(6, ',"sequence":6,"data":{"n":[{"c":1,"\\u0063":2}]}').encode()),
    (403, b'{"error":{"code":"FORBIDDEN","code":"NOT_FOUND","message":"m"}}'),
])
def test_an_http_answer_holding_a_duplicate_key_is_refused(status, body):
    """As a frame: json.loads would keep the last of the two members."""
    with http_answering() as srv:
        srv.status, srv.body = status, body
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(raw_contract("x"))
        with pytest.raises(ProtocolError) as ei:
            c.publish({"subject": "x", "type": "t", "data": {}}) if status != 200 else c.health()
        assert ei.value.code == "BAD_REQUEST" and "twice" in ei.value.message and ei.value.status == status, ei.value
        srv.status, srv.body = 202, b'{"status":"accepted","message":%s}' % _msg(8).encode()
        assert c.publish({"subject": "x", "type": "t", "data": {}}).message["sequence"] == 8


@pytest.mark.parametrize("reason,want", [
    ("UNAUTHENTICATED", "UNAUTHENTICATED"),
    ("GRANT_REVOKED", "GRANT_REVOKED"),
    ("write stalled", "SESSION_CLOSED"),
    ("unauthenticated", "SESSION_CLOSED"),
])
async def test_a_close_1008_with_a_code_fails_the_waiting_call_and_later_ones_with_it(reason, want):
    async def on_frame(ws, f):
        if f["op"] == "receive":
            await ws.close(1008, reason)
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with raw_session(on_frame, CONTRACT) as s:
        with pytest.raises(PigeonError) as ei:
            await within(s.receive("x"), 5)
        assert ei.value.code == want and reason in ei.value.message, ei.value
        with pytest.raises(PigeonError) as ei:
            await within(s.ack("x", "msg_1"), 5)
        assert ei.value.code == want, ei.value


def test_the_codes_a_close_reason_is_taken_as_are_the_servers():
    codes = [c["code"] for c in json.loads((ROOT / "clients/conformance/codes.json").read_text())["codes"]]
    assert len(codes) > 50
    assert all(is_server_code(c) for c in codes)
    assert not any(is_server_code(c) for c in ("BAD_FRAME", "CLOSED", "", "unauthenticated", "write stalled"))
