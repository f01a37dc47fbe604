"""The Python WebSocket client against a hostile server (raw WebSocket
endpoints of the test's own) and a careless caller driving its timers, logs,
memory and handlers, for the classes of holes the Go and TypeScript clients
guard against too."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time

import pytest
from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, within
from pigeon_client import PigeonError, ProtocolError, SessionClosedError, connect
from pigeon_client import ws as ws_mod
from pigeon_client.crypto import canonical_signing_input

CONTRACT = raw_contract("x")


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


def expiring_in(seconds: float) -> dict:
    c = dict(CONTRACT)
    t = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds)
    c["expiresAt"] = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return c


async def _session(port, **kw):
    kw.setdefault("reconnect", False)
    kw.setdefault("auto_renew", False)
    kw.setdefault("ping_interval", None)
    return await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], **kw), 5)


def _port(srv):
    return srv.sockets[0].getsockname()[1]


# --- 1. a renewal loop driven fast ---


def renewing_server(renews: list, grant: float | None, first: float):
    """Negotiate grants ``first`` seconds; each renew ``grant`` seconds (None:
    refused INTERNAL at once)."""

    async def endpoint(ws):
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] == "negotiate":
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": expiring_in(first)}))
            elif f["op"] == "renew":
                renews.append((time.monotonic(), f))
                if grant is None:
                    await ws.send(json.dumps({"op": "error", "re": f["id"],
                                              "error": {"code": "INTERNAL", "message": "no"}}))
                else:
                    await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": expiring_in(grant)}))

    return endpoint


async def test_a_server_granting_renewals_a_few_ms_long_cannot_drive_the_renewal_loop():
    renews: list = []
    async with serve(renewing_server(renews, 0.1, 0.1), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv), auto_renew=True, on_error=lambda e: None)
        try:
            await asyncio.sleep(1.5)
        finally:
            await s.close(timeout=1)
    # The first renewal always comes; after it, the floor keeps renewals
    # 100 ms apart at least (a quarter of the 100 ms negotiated, raised to
    # the 100 ms lower bound; it was 1 s, which sent at most 2 before the
    # Go client's rule), however short the server's renewals.
    assert 1 <= len(renews) <= 16, f"{len(renews)} renewals in 1.5 s"
    gaps = [b[0] - a[0] for a, b in zip(renews, renews[1:])]
    assert all(g >= 0.09 for g in gaps), gaps


async def test_failed_renewals_are_retried_no_faster_than_the_floor():
    renews: list = []
    async with serve(renewing_server(renews, None, 3.0), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv), auto_renew=True, on_error=lambda e: None)
        try:
            await asyncio.sleep(3.2)
        finally:
            await s.close(timeout=1)
    assert 1 <= len(renews) <= 3, f"{len(renews)} renewals of a 3 s contract"
    # The floor is a quarter of the 3 s negotiated: 0.75 s (it was 1 s
    # before the Go client's rule).
    gaps = [b[0] - a[0] for a, b in zip(renews, renews[1:])]
    assert all(g >= 0.7 for g in gaps), gaps


async def test_a_session_asking_for_short_contracts_still_renews_each_in_time():
    renews: list = []

    async def endpoint(ws):
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] in ("negotiate", "renew"):
                if f["op"] == "renew":
                    renews.append(f)
                c = expiring_in(f.get("ttlMs", 60000) / 1000)
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": c}))

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        s = await _session(_port(srv), auto_renew=True, ttl=0.4, on_error=lambda e: None)
        try:
            await asyncio.sleep(1.5)
            left = (s.contract.expires_at - dt.datetime.now(dt.timezone.utc)).total_seconds()
            assert left > 0, "the contract expired: the floor held a renewal back past it"
        finally:
            await s.close(timeout=1)
    assert len(renews) >= 3, renews


async def _renew_times(first: float, grant: float, watch: float, **kw) -> tuple[list, object]:
    """Renewal times of a session (no ttl asked) on a server granting
    ``first`` seconds at negotiation and ``grant`` at each renewal, over
    ``watch`` seconds; and what was left of its contract then (seconds)."""
    renews: list = []
    async with serve(renewing_server(renews, grant, first), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv), auto_renew=True, **kw)
        try:
            await asyncio.sleep(watch)
            left = (s.contract.expires_at - dt.datetime.now(dt.timezone.utc)).total_seconds()
        finally:
            await s.close(timeout=1)
    return [t for t, _ in renews], left


# The floor was 1 s (a quarter of the session's own ttl when shorter): a
# server whose contracts live under about 4 s, with no ttl asked, had each
# lapse after one renewal. The floor is now a quarter of the lifetime the
# last negotiation granted, between 100 ms and 1 s (as in the Go client's
# TestShortServerContractsStayRenewed).
async def test_short_server_contracts_stay_renewed_400_ms():
    errors: list = []
    at, left = await _renew_times(0.4, 0.4, 2.0, on_error=errors.append)
    assert len(at) >= 5, f"the contract lapsed: {len(at)} renewals in 2 s of 400 ms contracts"
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert all(g >= 0.1 for g in gaps), gaps
    assert left > 0, "still valid"
    assert not [e for e in errors if "renewed no more" in str(e)], errors


async def test_short_server_contracts_stay_renewed_hostile_10_ms():
    at, _ = await _renew_times(0.01, 0.15, 1.0, on_error=lambda e: None)
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert all(g >= 0.08 for g in gaps), gaps
    assert len(at) <= 11, f"{len(at)} renewals in 1 s"


# --- 2. server text in logs ---

CONTROL = [chr(c) for c in range(0x20)] + [chr(0x7F)] + [chr(c) for c in range(0x80, 0xA0)] + ["\u2028", "\u2029"]
HOSTILE_TEXT = "line\nforged: ok\r\x1b[31mred\x1b[0m\x00\x7f\x85\u2028\u2029"


async def test_server_text_written_to_the_log_has_its_control_characters_escaped(caplog):
    caplog.set_level(logging.DEBUG)

    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1,
                                      "message": msg(1, id="m" + HOSTILE_TEXT)}))
        elif f["op"] in ("nack", "ack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif f["op"] == "ping":
            await ws.send(json.dumps({"op": "error", "error": {"code": "X" + HOSTILE_TEXT,
                                                               "message": HOSTILE_TEXT}}))
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))  # no on_error: reports go to the log
        try:
            failed = asyncio.Event()

            def handler(d):
                failed.set()
                raise RuntimeError("fails")

            await within(s.subscribe("x", handler), 5)
            await within(failed.wait(), 5)
            await within(s.ping(), 5)
            await asyncio.sleep(0.1)
        finally:
            await s.close(timeout=1)
    lines = [r.getMessage() for r in caplog.records if r.name in ("pigeon_client", "websockets.client")]
    assert any("forged" in line for line in lines), lines
    bad = [line for line in lines if any(c in line for c in CONTROL)]
    assert not bad, bad


def test_the_escape_writes_control_characters_as_escapes():
    from pigeon_client.errors import escape_log_text

    assert escape_log_text("a\nb\x1b[0m\x7f\x85\u2028\u2029\tc é") == "a\\x0ab\\x1b[0m\\x7f\\x85\\u2028\\u2029\\x09c é"


# --- 3. frame size ---


async def test_a_frame_larger_than_max_frame_bytes_ends_the_connection_as_a_lost_one_and_the_session_reconnects():
    async def on_frame(ws, f):
        if f["op"] == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"], "pad": "x" * (2 << 20)}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0, max_size=None) as srv:
        reported: list = []
        s = await _session(_port(srv), max_frame_bytes=1 << 20, reconnect=True, on_error=reported.append)
        try:
            with pytest.raises(SessionClosedError) as e:
                await within(s.ping(), 5)
            assert e.value.code == "SESSION_CLOSED"
            assert e.value.details.get("maxFrameBytes") == 1 << 20, e.value.details
            assert e.value.details.get("closeCode") == 1009, e.value.details
            await within(s.wait_connected(), 5)
            assert s.reconnects == 1
            assert any(isinstance(r, SessionClosedError) and r.details.get("maxFrameBytes") for r in reported), reported
        finally:
            await s.close(timeout=1)


async def test_max_frame_bytes_out_of_range_is_refused_before_dialling():
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(PigeonError) as e:
            await connect("ws://127.0.0.1:9/v1/ws", "t", ["x"], max_frame_bytes=bad)
        assert e.value.code == "INVALID_ARGUMENT"


def test_the_default_read_limit_holds_the_brokers_largest_answers():
    assert ws_mod.MAX_FRAME_BYTES == 64 << 20


# --- 4. unbounded queues ---


async def test_a_server_that_stops_reading_cannot_grow_the_send_buffer_without_bound():
    async def on_frame(ws, f):
        if f["op"] == "ping":
            ws.transport.pause_reading()  # reads no more, ever

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0, max_size=None) as srv:
        s = await _session(_port(srv), call_timeout=1.0)
        try:
            with pytest.raises(PigeonError):
                await within(s.ping(timeout=0.5), 5)
            big = "r" * 300_000
            results = await within(asyncio.gather(
                *(s.replay("x", reason=big) for _ in range(120)), return_exceptions=True), 15)
            codes = sorted({getattr(r, "code", repr(r)) for r in results})
            assert set(codes) <= {"RATE_LIMITED", "REQUEST_TIMEOUT"}, codes
            assert "RATE_LIMITED" in codes, codes
            limited = [r for r in results if getattr(r, "code", "") == "RATE_LIMITED"]
            assert limited[0].details.get("maxBufferedBytes") == ws_mod.MAX_BUFFERED_BYTES
            assert s._ws.transport.get_write_buffer_size() <= ws_mod.MAX_BUFFERED_BYTES + 400_000
        finally:
            await within(s.close(timeout=1), 10)


async def test_pending_calls_are_bounded_when_call_timeout_is_none(monkeypatch):
    monkeypatch.setattr(ws_mod, "MAX_PENDING_CALLS", 10)
    async with serve(negotiating(None, CONTRACT), "127.0.0.1", 0) as srv:  # answers nothing else
        s = await _session(_port(srv), call_timeout=None)
        try:
            tasks = [asyncio.get_running_loop().create_task(s.receive("x")) for _ in range(15)]
            await asyncio.sleep(0.3)
            done = [t for t in tasks if t.done()]
            assert len(done) == 5, len(done)
            assert all(t.exception().code == "RATE_LIMITED" for t in done)
            assert len(s._pending) == 10
        finally:
            await s.close(timeout=1)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


# --- 5. one message's handler never runs twice at once ---


async def test_a_message_delivered_again_while_its_handler_runs_waits_for_that_run():
    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}))
        elif f["op"] in ("ack", "nack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif f["op"] == "ping":  # the ack wait passed: delivered again, then another message
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 2, "message": msg(1)}))
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(2)}))
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))
        try:
            running: dict[str, int] = {}
            most = 0
            runs: list = []
            gate = asyncio.Event()

            async def handler(d):
                nonlocal most
                running[d.id] = running.get(d.id, 0) + 1
                most = max(most, running[d.id])
                runs.append((d.id, d.attempt))
                try:
                    if d.id == "msg_1" and d.attempt == 1:
                        await gate.wait()
                finally:
                    running[d.id] -= 1

            sub = await within(s.subscribe("x", handler, max_in_flight=4), 5)
            for _ in range(100):
                if runs:
                    break
                await asyncio.sleep(0.01)
            await within(s.ping(), 5)
            for _ in range(100):
                if ("msg_2", 1) in runs:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            assert runs == [("msg_1", 1), ("msg_2", 1)], runs  # the second msg_1 waits
            assert sub._waiting == 1  # the parked one counts against the window
            gate.set()
            for _ in range(100):
                if len(runs) == 3:
                    break
                await asyncio.sleep(0.01)
            assert runs == [("msg_1", 1), ("msg_2", 1), ("msg_1", 2)], runs
            assert most == 1
        finally:
            await s.close(timeout=1)


# --- 6. close() ---


async def test_a_subscribe_answered_after_close_hands_nothing_to_its_handler():
    held: list = []

    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            if f["subject"] == "x" and not held:
                await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_busy"}))
                await ws.send(json.dumps({"op": "deliver", "sub": "sub_busy", "attempt": 1, "message": msg(1)}))
                held.append(None)
            else:
                held.append((ws, f))  # answered once close() has begun
        elif f["op"] in ("ack", "nack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))
        gate = asyncio.Event()
        started = asyncio.Event()
        late_ran: list = []

        async def busy(d):
            started.set()
            await gate.wait()

        await within(s.subscribe("x", busy), 5)
        await within(started.wait(), 5)
        late = asyncio.get_running_loop().create_task(s.subscribe("x", late_ran.append))
        for _ in range(100):
            if len(held) == 2:
                break
            await asyncio.sleep(0.01)
        closing = asyncio.get_running_loop().create_task(s.close(timeout=5))
        await asyncio.sleep(0.05)
        ws, f = held[1]
        await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_late"}))
        await ws.send(json.dumps({"op": "deliver", "sub": "sub_late", "attempt": 1, "message": msg(2)}))
        with pytest.raises(SessionClosedError):
            await within(late, 5)
        await asyncio.sleep(0.1)
        gate.set()
        await within(closing, 5)
        assert late_ran == []


async def test_close_honours_its_timeout_when_nothing_answers():
    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}))
        # publish and unsubscribe: never answered

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))
        started = asyncio.Event()

        async def stuck(d):
            started.set()
            await asyncio.sleep(3600)

        await within(s.subscribe("x", stuck), 5)
        await within(started.wait(), 5)
        pub = await s.publish_async({"subject": "x", "data": {}})
        t0 = time.monotonic()
        await within(s.close(timeout=1), 10)
        took = time.monotonic() - t0
        assert took < 2.0, f"close(timeout=1) took {took:.2f} s"
        with pytest.raises(PigeonError):
            await pub


# --- 7. hostile frames ---


async def test_hostile_frames_are_reported_and_neither_kill_the_reader_nor_misnumber_the_resume():
    subscribes: list = []
    conns: list = []
    nacked: list = []

    async def on_frame(ws, f):
        if ws not in conns:
            conns.append(ws)
        if f["op"] == "subscribe":
            subscribes.append(f)
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": f"sub_{len(subscribes)}"}))
            if len(subscribes) > 1:
                return
            sid = "sub_1"
            raw_deliveries = [
                '{"attempt":1,"message":{"id":"m_inf","subject":"x","sequence":1e400,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_neg","subject":"x","sequence":-1,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_frac","subject":"x","sequence":1.5,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_2_64","subject":"x","sequence":18446744073709551617,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_true","subject":"x","sequence":true,"data":{}}}',
                '{"attempt":1,"message":{"id":["m_list"],"subject":"x","sequence":20,"data":{}}}',
                '{"attempt":1,"message":{"id":7,"subject":"x","sequence":21,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_5","subject":"x","sequence":5,"data":{}}}',
                '{"attempt":1,"message":{"id":"m_6","subject":"x","sequence":6,"data":{},'
                '"signature":{"kid":"k","alg":"ed25519","sig":"AAAA","v":2.0}}}',
            ]
            await ws.send('{"op":"deliver_batch","sub":"' + sid + '","deliveries":[' + ",".join(raw_deliveries) + "]}")
            for h in ('{"op":"pong","re":["1"]}', '{"op":"pong","re":{"a":1}}', '{"op":"pong","re":5}',
                      '{"op":"surprise"}', '{"op":"pong","re":"x","n":NaN}',
                      '{"op":"deliver","sub":"sub_1","attempt":1,"message":' + '{"a":' * 5000 + "1" + "}" * 5001):
                await ws.send(h)
        elif f["op"] == "nack":
            nacked.append(f.get("messageId"))
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif f["op"] in ("ack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif f["op"] == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        s = await _session(_port(srv), reconnect=True, on_error=reported.append)
        try:
            handled: list = []

            def handler(d):
                handled.append(d)
                if d.id == "m_5":
                    raise RuntimeError("fails: sequence 5 stays to resume from")

            await within(s.subscribe("x", handler, max_in_flight=2), 5)
            for _ in range(200):
                if len(handled) >= 1 and nacked and len(reported) >= 14:
                    break
                await asyncio.sleep(0.01)
            await within(s.ping(), 5)
            ids = [d.id for d in handled]
            # Deliveries whose sequence the client cannot hold, and those
            # whose id is not a string, cannot be answered: refused. So is
            # one whose signature's "v" is 2.0, which names no signing form:
            # no message the broker sends (tests/test_message_shapes.py).
            assert sorted(ids) == ["m_5"], ids
            with pytest.raises(PigeonError) as e:
                canonical_signing_input({"id": "m_6", "subject": "x", "data": {},
                                         "signature": {"kid": "k", "alg": "ed25519", "sig": "AAAA", "v": 2.0}})
            assert e.value.code == "ENVELOPE_INVALID"
            assert all(isinstance(r, ProtocolError) for r in reported), reported
            # 5 sequences not held, 2 bad ids, a signature's v of 2.0, 3 bad
            # re, an unknown op, NaN, nesting.
            assert len(reported) == 14, "\n".join(str(r) for r in reported)
            # The resume after a lost connection starts at the unhandled 5.
            await conns[0].close()
            for _ in range(200):
                if len(subscribes) == 2:
                    break
                await asyncio.sleep(0.02)
            assert subscribes[1].get("start") == {"sequence": 5}, subscribes[1]
        finally:
            await s.close(timeout=1)


async def test_a_renewal_answered_with_another_contract_is_tried_again():
    # A renewal answered with another contract (a broken or hostile
    # server) stopped the renewal loop, and the contract lapsed; it is now
    # a failed renewal, reported and tried again no sooner than the floor,
    # as the Go and TypeScript clients do.
    renews: list = []
    errors: list = []

    async def endpoint(ws):
        async for raw in ws:
            f = json.loads(raw)
            if f["op"] == "negotiate":
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": expiring_in(2.0)}))
            elif f["op"] == "renew":
                renews.append(time.monotonic())
                k = expiring_in(2.0)
                if len(renews) == 1:
                    k["id"] = "ctr_other"
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": k}))

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        s = await _session(_port(srv), auto_renew=True, on_error=errors.append)
        try:
            deadline = time.monotonic() + 5
            while len(renews) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert len(renews) >= 2, f"{len(renews)} renewals; errors {errors}"
            assert renews[1] - renews[0] >= 0.45, renews
            await asyncio.sleep(0.1)
            left = (s.contract.expires_at - dt.datetime.now(dt.timezone.utc)).total_seconds()
            assert left > 1.0, left
            assert s.contract.id == CONTRACT["id"]
            assert any("another contract" in str(e) for e in errors), errors
        finally:
            await s.close(timeout=1)
