"""Lone surrogates: a string holding one ("\\ud800" not followed by a low
surrogate, "\\udc00" alone) is no Unicode text, and the server refuses JSON
holding one whole (INVALID_UTF8). A frame or HTTP answer holding one is
refused (``BAD_REQUEST``, a ``ProtocolError``, as every frame the client
cannot take), and a caller's string holding one (a Python str can: '\\ud800')
is refused before anything is sent (``INVALID_UTF8``). Each test failed
before its fix in pigeon_client/."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import HttpClient, InvalidError, ProtocolError
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")

# Data a server may not send (the JSON text as sent), and data it may.
LONE = [
    r'{"s":"\ud800"}',
    r'{"s":"a\udc00b"}',
    r'{"s":"\ud800\u0041"}',
    r'{"s":"\udbff\udbff\udc00"}',
    r'{"\ud800":1}',
    r'["\\\ud800"]',
]
WELL_FORMED = [
    r'{"s":"\ud83d\ude00"}',
    r'{"s":"\\ud800"}',
    r'{"s":"\\\\ud800","t":"😀"}',
    r'{"s":"\uD83D\uDE00\u0041"}',
]


def _msg(i: int, data: str) -> str:
    return '{"id":"msg_%d","subject":"x","sequence":%d,"data":%s}' % (i, i, data)


def _deliver(i: int, data: str) -> str:
    return '{"op":"deliver","sub":"sub_1","attempt":1,"message":%s}' % _msg(i, data)


async def test_a_frame_holding_a_lone_surrogate_is_refused_and_its_delivery_not_handed_over():
    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            for i, d in enumerate(LONE):
                await ws.send(_deliver(10 + i, d))
            await ws.send('{"op":"deliver_batch","sub":"sub_1","deliveries":[{"attempt":1,"message":%s}]}' % _msg(30, LONE[0]))
            for i, d in enumerate(WELL_FORMED):
                await ws.send(_deliver(20 + i, d))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    reported: list[Exception] = []
    async with raw_session(on_frame, CONTRACT, on_error=reported.append) as s:
        seen: list[str] = []
        await s.subscribe("x", lambda d: seen.append(d.message["id"]))
        for _ in range(100):
            if len(seen) >= len(WELL_FORMED):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert seen == [f"msg_{20 + i}" for i in range(len(WELL_FORMED))]
        bad = [e for e in reported if isinstance(e, ProtocolError) and e.code == "BAD_REQUEST" and "lone surrogate" in e.message]
        assert len(bad) == len(LONE) + 1, reported
        assert not s.closed


async def test_a_call_answered_by_a_frame_holding_a_lone_surrogate_fails_at_once():
    async def on_frame(ws, f):
        await ws.send('{"op":"messages","re":"%s","messages":[%s]}' % (f["id"], _msg(1, LONE[0])))

    async with raw_session(on_frame, CONTRACT, call_timeout=5) as s:
        with pytest.raises(ProtocolError) as ei:
            await within(s.receive("x"), 2)
        assert ei.value.code == "BAD_REQUEST" and "lone surrogate" in ei.value.message, ei.value


def test_an_http_answer_holding_a_lone_surrogate_is_refused():
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(CONTRACT)
        answers = [(200, '{"messages":[%s]}' % _msg(1, d)) for d in LONE]
        answers.append((403, r'{"error":{"code":"FORBIDDEN","message":"\udfff"}}'))
        for status, body in answers:
            srv.status, srv.body = status, body.encode()
            with pytest.raises(ProtocolError) as ei:
                c.receive("x")
            assert ei.value.code == "BAD_REQUEST" and "lone surrogate" in ei.value.message, (body, ei.value)
        # UTF-8 of a surrogate code point (which json.loads of bytes takes):
        # not UTF-8.
        srv.status, srv.body = 200, b'{"messages":[%s]}' % _msg(1, '{"s":"\xed\xa0\x80"}').encode("latin-1")
        with pytest.raises(ProtocolError):
            c.receive("x")
        for d in WELL_FORMED:
            srv.status, srv.body = 200, ('{"messages":[%s]}' % _msg(1, d)).encode()
            assert c.receive("x")[0]["data"] == json.loads(d), d


async def test_a_callers_string_holding_a_lone_surrogate_is_invalid_utf8_and_nothing_is_sent():
    seen: list[str] = []

    async def on_frame(ws, f):
        seen.append(f.get("messageId") or f["op"])
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with raw_session(on_frame, CONTRACT, call_timeout=5) as s:
        for mid in ("msg_\ud800", "msg_\udc00", "msg_\ude00\ud83d"):
            with pytest.raises(InvalidError) as ei:
                await within(s.ack("x", mid), 2)
            assert ei.value.code == "INVALID_UTF8", (mid, ei.value)
        with pytest.raises(InvalidError) as ei:
            await within(s.publish({"subject": "x", "type": "t", "data": {"s": "\udfff"}}), 2)
        assert ei.value.code == "INVALID_UTF8", ei.value
        await within(s.ack("x", "msg_\U0001f600"), 2)
        assert seen == ["msg_\U0001f600"]
        assert not s.closed
    with http_answering() as srv:
        srv.status, srv.body = 202, b'{"status":"accepted","message":%s}' % _msg(1, "{}").encode()
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(CONTRACT)
        with pytest.raises(InvalidError) as ei:
            c.ack("x", "msg_\ud800")
        assert ei.value.code == "INVALID_UTF8", ei.value
        with pytest.raises(InvalidError) as ei:
            c.publish({"subject": "x", "type": "t", "data": {"s": "\udc00"}})
        assert ei.value.code == "INVALID_UTF8", ei.value
        assert srv.paths == []
        c.publish({"subject": "x", "type": "t", "data": {"s": "\U0001f600"}})
        assert srv.paths == ["/v1/messages"]
