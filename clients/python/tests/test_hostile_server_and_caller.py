"""The Python client against a hostile or broken server (raw WebSocket and
HTTP endpoints of the test's own) and a careless caller. Each test names what
was done and what the client must answer."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import threading

import pytest
from websockets.asyncio.server import serve

from harness import negotiating, raw_contract, within
from pigeon_client import HttpClient, PigeonError, ProtocolError, RetryAfter, connect
from pigeon_client import ws as ws_mod

CONTRACT = raw_contract("x")


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


class Raw:
    """A raw server: answers subscribe with sub ids from ``sids`` (default
    sub_<n>), ack/nack/unsubscribe with ok, ping with pong, and records
    every frame."""

    def __init__(self, sids=None, on_subscribe=None):
        self.frames: list[dict] = []
        self.sids = list(sids or [])
        self.n = 0
        self.on_subscribe = on_subscribe
        self.conns: list = []

    async def on_frame(self, ws, f):
        self.frames.append(f)
        if ws not in self.conns:
            self.conns.append(ws)
        op = f["op"]
        if op == "subscribe":
            if self.on_subscribe is not None:
                await self.on_subscribe(ws, f)
                return
            self.n += 1
            sid = self.sids.pop(0) if self.sids else f"sub_{self.n}"
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": sid}))
        elif op in ("ack", "nack", "unsubscribe"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))
        elif op == "ping":
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    def ops(self, op):
        return [f for f in self.frames if f["op"] == op]

    def delivering(self, *ids, batch=False):
        """Answer each subscribe with sub_1 and deliver the messages ids
        (at attempt 1): one deliver frame each, or one deliver_batch."""

        async def on_sub(ws, f):
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            if batch:
                ds = [{"attempt": 1, "message": msg(i)} for i in ids]
                await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}))
                return
            for i in ids:
                await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(i)}))

        self.on_subscribe = on_sub
        return self


@contextlib.asynccontextmanager
async def raw_session(raw, **kw):
    """A session on a raw server of ``raw``'s frames (see _session),
    closed at the end; yields the server and the session."""
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(srv.sockets[0].getsockname()[1], **kw)
        try:
            yield srv, s
        finally:
            await s.close(timeout=1)


async def _session(port, **kw):
    kw.setdefault("reconnect", False)
    kw.setdefault("auto_renew", False)
    kw.setdefault("ping_interval", None)
    return await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], **kw), 5)


# --- frames that make the decoder raise something else than ValueError ---


async def test_a_deeply_nested_frame_is_reported_and_the_connection_survives():
    async def on_frame(ws, f):
        if f["op"] == "ping":
            await ws.send('{"op":"pong","x":' + "[" * 200_000 + "]" * 200_000 + "}")
            await ws.send('{"op":"deliver","sub":"s","message":' + '{"a":' * 100_000 + "1" + "}" * 100_001)
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        s = await _session(srv.sockets[0].getsockname()[1], on_error=reported.append)
        try:
            await within(s.ping(), 5)
            await within(s.ping(), 5)
            assert not s.closed and s.connected
            assert len(reported) == 4 and all(isinstance(e, ProtocolError) for e in reported), reported
            assert all("nested" in e.message for e in reported), reported
        finally:
            await s.close(timeout=1)


# --- retry delays that are not numbers of milliseconds ---


async def test_a_handler_retry_after_nan_or_infinity_nacks_and_the_handler_goes_on():
    raw = Raw()

    async def on_sub(ws, f):
        raw.n += 1
        await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
        ds = [{"attempt": 1, "message": msg(i)} for i in (1, 2, 3)]
        await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}))

    raw.on_subscribe = on_sub
    async with raw_session(raw, on_error=lambda e: None) as (_, s):
        seen = []

        async def handler(d):
            seen.append(d.id)
            if d.id == "msg_1":
                raise RetryAfter(float("nan"))
            if d.id == "msg_2":
                raise RetryAfter(float("inf"))

        await within(s.subscribe("x", handler), 5)
        for _ in range(100):
            if raw.ops("ack"):
                break
            await asyncio.sleep(0.02)
        assert seen == ["msg_1", "msg_2", "msg_3"], seen
        nacks = {f["messageId"]: f.get("delayMs") for f in raw.ops("nack")}
        assert nacks == {"msg_1": None, "msg_2": 12 * 3600 * 1000}, nacks
        assert [f.get("messageId") for f in raw.ops("ack")] == ["msg_3"]


async def test_a_nack_with_a_delay_that_is_not_a_number_is_refused_and_leaves_the_delivery_unanswered():
    raw = Raw().delivering(1)
    async with raw_session(raw) as (_, s):
        sub = await within(s.subscribe("x"), 5)
        d = await within(sub.__anext__(), 5)
        for bad in (float("nan"), "5", True):
            with pytest.raises((ValueError, TypeError)):
                await d.nack(bad)
            assert not d.settled
        for bad in (float("nan"), "5"):
            with pytest.raises((ValueError, TypeError)):
                await s.nack("x", "msg_1", bad)
        assert raw.ops("nack") == []
        await within(d.nack(10**9), 5)  # beyond the broker's bound: its longest
        assert raw.ops("nack")[0]["delayMs"] == 12 * 3600 * 1000


# --- a handler that raises CancelledError of its own ---


async def test_a_handler_raising_cancelled_error_of_its_own_nacks_and_its_worker_goes_on():
    raw = Raw().delivering(1, 2, batch=True)
    async with raw_session(raw) as (_, s):
        seen = []

        async def handler(d):
            seen.append(d.id)
            if d.id == "msg_1":
                t = asyncio.get_running_loop().create_task(asyncio.sleep(10))
                t.cancel()
                await t  # a task of its own, cancelled: CancelledError

        await within(s.subscribe("x", handler), 5)
        for _ in range(100):
            if raw.ops("ack"):
                break
            await asyncio.sleep(0.02)
        assert seen == ["msg_1", "msg_2"], seen
        assert [f["messageId"] for f in raw.ops("nack")] == ["msg_1"]


# --- sequences and attempts beyond what the wire carries ---


async def test_sequences_out_of_range_never_go_back_on_the_wire():
    raw = Raw()
    bad = [True, -5, 0, 2**64, 2**70, 1.5, "9"]

    async def on_sub(ws, f):
        # Without a from (a from beyond 64 bits refuses the answer whole, as
        # Go refuses it: test_integer_spellings.py).
        await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
        # Refused (a sequence the client cannot hold), never handed over:
        ds = [{"attempt": 1, "message": msg(i, sequence=q)} for i, q in enumerate(bad)]
        # Refused too (an attempt no broker's: it was handed over as 0):
        # their sequences are not resumed from.
        ds.append({"attempt": True, "message": msg(96, sequence=5)})
        ds.append({"attempt": 2**70, "message": msg(97, sequence=6)})
        ds.append({"attempt": 1, "message": msg(98, sequence=8)})
        ds.append({"attempt": 2, "message": msg(99, sequence=7)})
        await ws.send(json.dumps({"op": "deliver_batch", "sub": "sub_1", "deliveries": ds}))

    raw.on_subscribe = on_sub
    async with raw_session(raw) as (_, s):
        attempts = []
        gate = asyncio.Event()

        async def handler(d):
            attempts.append(d.attempt)
            if len(attempts) == 2:
                gate.set()
            raise RuntimeError("fail: every sequence stays outstanding")

        sub = await within(s.subscribe("x", handler), 5)
        await within(gate.wait(), 5)
        await within(s.ping(), 5)  # every delivery was read: the others were refused
        assert len(attempts) == 2, attempts
        assert sorted(attempts) == [1, 2], attempts
        frame = sub._subscribe_frame(resume=True)
        assert frame["start"] == {"sequence": 7}, frame
        sub._outstanding.clear()
        assert "start" not in sub._subscribe_frame(resume=True)


# --- a subscribe that gave up before its answer ---


async def test_a_subscribe_cancelled_after_its_answer_was_bound_leaves_nothing_subscribed():
    raw = Raw().delivering(1)
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        # No call timeout: the call awaits its answer itself (Python 3.11's
        # wait_for returns an answer that came with the cancellation).
        s = await _session(srv.sockets[0].getsockname()[1], on_error=reported.append, call_timeout=None)
        try:
            task = None
            bind = s._bind

            def bind_then_cancel(sub, ans):
                bind(sub, ans)
                task.cancel()  # the caller gives up as the answer is bound

            s._bind = bind_then_cancel
            task = asyncio.get_running_loop().create_task(s.subscribe("x", lambda d: None))
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if raw.ops("unsubscribe"):
                    break
                await asyncio.sleep(0.02)
            assert [f["sub"] for f in raw.ops("unsubscribe")] == ["sub_1"]
            assert s._subs == {} and s._all_subs == []
            await within(s.ping(), 5)
            assert reported == [], reported
        finally:
            await s.close(timeout=1)


@pytest.mark.parametrize("how", ["cancel", "timeout"])
async def test_a_subscribe_that_gave_up_before_its_answer_ends_the_server_subscription_it_made(how):
    held = []
    raw = Raw()

    async def on_sub(ws, f):
        held.append((ws, f))  # answered later

    raw.on_subscribe = on_sub
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        s = await _session(srv.sockets[0].getsockname()[1], on_error=reported.append, call_timeout=0.3)
        try:
            task = asyncio.get_running_loop().create_task(s.subscribe("x", lambda d: None))
            for _ in range(100):
                if held:
                    break
                await asyncio.sleep(0.01)
            if how == "cancel":
                task.cancel()
            with pytest.raises((asyncio.CancelledError, PigeonError)):
                await task
            ws, f = held[0]
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_late"}))
            for _ in range(100):
                if raw.ops("unsubscribe"):
                    break
                await asyncio.sleep(0.02)
            # Ended at its answer, before any delivery names it.
            assert [f["sub"] for f in raw.ops("unsubscribe")] == ["sub_late"]
            await within(s.ping(), 5)
            assert reported == [], reported
        finally:
            await s.close(timeout=1)


# --- subscription ids the server hands out twice ---


async def test_a_subscription_id_given_twice_on_one_connection_does_not_take_over_the_first():
    raw = Raw(sids=["sub_1", "sub_1"])
    async with raw_session(raw, on_error=lambda e: None) as (_, s):
        first = await within(s.subscribe("x", lambda d: None), 5)
        with pytest.raises(ProtocolError):
            await within(s.subscribe("x", lambda d: None), 5)
        assert s._subs.get("sub_1") is first and not first.ended
        # The second was never bound: nothing was unsubscribed for it
        # (sub_1 is the first one's).
        assert raw.ops("unsubscribe") == []


async def test_ids_ended_on_a_lost_connection_do_not_silence_a_new_subscription_that_reuses_one():
    raw = Raw(sids=["sub_1", "sub_1"])  # a broker restarted between: its ids start again
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await _session(port, reconnect=True)
        try:
            a = await within(s.subscribe("x", lambda d: None), 5)
            await within(a.unsubscribe(), 5)
            assert "sub_1" in s._gone
            await raw.conns[0].close()
            await within(s.wait_connected(5), 6)
            for _ in range(100):
                if s.connected:
                    break
                await asyncio.sleep(0.02)
            b = await within(s.subscribe("x", lambda d: None), 5)
            assert b.sid == "sub_1"
            before = len(raw.ops("unsubscribe"))
            await within(b.unsubscribe(), 5)
            assert [f["sub"] for f in raw.ops("unsubscribe")[before:]] == ["sub_1"]
        finally:
            await s.close(timeout=1)


# --- a credential or region that cannot be a header ---


@pytest.mark.parametrize("token,region", [("secret-tok\n", None), ("secret-tok\r\nX-Evil: 1", None),
                                          ("t", "uk\r\nX-Evil: 1")])
async def test_a_token_or_region_with_control_characters_is_refused_without_echoing_it(token, region):
    from pigeon_client import InvalidError

    for kw in ({}, {"subprotocol_auth": True}):
        with pytest.raises(InvalidError) as ei:
            await connect("ws://127.0.0.1:1/v1/ws", token, ["x"], region=region, reconnect=False, **kw)
        assert ei.value.code == "INVALID_ARGUMENT"
        assert "secret-tok" not in str(ei.value) and "Evil" not in str(ei.value)
    with pytest.raises(InvalidError) as ei:
        HttpClient("http://127.0.0.1:1", token, region=region).health()
    assert "secret-tok" not in str(ei.value) and "Evil" not in str(ei.value)


async def test_a_subprotocol_token_with_characters_a_subprotocol_cannot_hold_is_refused():
    from pigeon_client import InvalidError

    with pytest.raises(InvalidError) as ei:
        await connect("ws://127.0.0.1:1/v1/ws", "secret tok,x", ["x"], reconnect=False, subprotocol_auth=True)
    assert "secret" not in str(ei.value)


# --- HTTP responses without end ---


class _Flood(http.server.BaseHTTPRequestHandler):
    size = 0
    chunked = False

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(self.size))
        self.end_headers()
        block = b" " * 65536
        sent = 0
        try:
            while sent < self.size:
                n = min(len(block), self.size - sent)
                if self.chunked:
                    self.wfile.write(b"%x\r\n" % n + block[:n] + b"\r\n")
                else:
                    self.wfile.write(block[:n])
                sent += n
        except OSError:
            pass

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("chunked", [False, True])
def test_an_http_response_larger_than_the_bound_is_refused_not_read_whole(chunked):
    handler = type("H", (_Flood,), {"size": 8 << 20, "chunked": chunked})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = HttpClient(f"http://127.0.0.1:{srv.server_address[1]}", "t", timeout=5, max_response_bytes=1 << 20)
        with pytest.raises(PigeonError) as ei:
            c.health()
        assert ei.value.code == "PAYLOAD_TOO_LARGE", ei.value
    finally:
        srv.shutdown()
        srv.server_close()


# --- sealed: a version Go refuses ---


def test_a_sealed_version_that_is_not_the_integer_1_is_unsupported():
    from pigeon_client import crypto

    with pytest.raises(crypto.SealUnsupported):
        crypto.open_sealed({"v": 1.0, "alg": crypto.SEAL_ALG}, b"\0" * 32, b"\0" * 32)
    with pytest.raises(crypto.SealUnsupported):
        crypto.open_sealed({"v": True, "alg": crypto.SEAL_ALG}, b"\0" * 32, b"\0" * 32)


def test_an_opened_payload_with_nan_is_not_json():
    from pigeon_client import crypto

    for t in (b'{"a":NaN}', b"Infinity", b"[-Infinity]"):
        with pytest.raises(ValueError):
            crypto.loads_payload(t)


# --- an ack answer whose notPending is not a list of ids ---


@pytest.mark.parametrize("not_pending", [5, "msg_1", [["msg_1"]], {"a": 1}, [{"x": 1}, "msg_2"]])
async def test_an_ack_answer_with_a_malformed_not_pending_settles_every_waiting_ack(not_pending):
    frames = []

    async def on_frame(ws, f):
        frames.append(f)
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": msg(1)}))
        elif f["op"] == "ack":
            await ws.send(json.dumps({"op": "ok", "re": f["id"], "notPending": not_pending}))
        elif f["op"] in ("unsubscribe", "nack"):
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        s = await _session(srv.sockets[0].getsockname()[1], on_error=reported.append)
        try:
            sub = await within(s.subscribe("x"), 5)
            d = await within(sub.__anext__(), 5)
            try:
                await within(d.ack(), 3)  # answered, never left waiting
            except PigeonError:
                pass
            assert sub._ack_task is None
        finally:
            await within(s.close(timeout=1), 5)


# --- a lifetime that is not a number of seconds ---


async def test_a_ttl_that_is_not_a_positive_number_is_refused_before_it_is_kept():
    async with serve(negotiating(Raw().on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        for bad in (float("nan"), float("inf"), 0, -1, "60", True):
            with pytest.raises((ValueError, TypeError)):
                await connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], ttl=bad, reconnect=False)
        s = await _session(port, ttl=60)
        try:
            for bad in (float("nan"), float("inf"), 0, "60"):
                with pytest.raises((ValueError, TypeError)):
                    await s.renew(ttl=bad)
                with pytest.raises((ValueError, TypeError)):
                    await s.negotiate(ttl=bad)
                assert s.ttl == 60
        finally:
            await s.close(timeout=1)
    for bad in (float("nan"), float("inf"), 0):
        with pytest.raises((ValueError, TypeError)):
            HttpClient("http://127.0.0.1:1", "t").connect(["x"], ttl=bad)


async def test_a_reconnect_that_fails_with_an_unexpected_error_ends_the_session_rather_than_hang():
    raw = Raw()
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        reported: list = []
        s = await _session(port, reconnect=True, on_error=reported.append)
        try:
            await within(s.ping(), 5)

            async def boom(ws):
                raise RuntimeError("a bug of the client's own")

            s._attach = boom
            await raw.conns[0].close()
            with pytest.raises(PigeonError):
                await within(s.wait_connected(), 10)
            assert s.closed
        finally:
            await s.close(timeout=1)


# --- a handler concurrency the server would refuse, accepted by a hostile one ---


async def test_max_in_flight_beyond_the_broker_bound_is_refused_before_anything_is_sent():
    from pigeon_client import InvalidError

    raw = Raw()
    async with raw_session(raw) as (_, s):
        for bad in (10_001, 10**7, -1, 2.5, True, "4"):
            with pytest.raises(InvalidError):
                await s.subscribe("x", lambda d: None, max_in_flight=bad)
        assert raw.ops("subscribe") == []
        sub = await within(s.subscribe("x", lambda d: None, max_in_flight=10_000), 5)
        assert len(sub._workers) == 10_000


# --- close() called twice at once ---


async def test_a_second_close_waits_for_the_first_to_finish():
    raw = Raw()
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(srv.sockets[0].getsockname()[1])
        gate = asyncio.Event()

        async def handler(d):
            await gate.wait()

        raw.on_subscribe = None
        sub = await within(s.subscribe("x", handler), 5)
        await raw.conns[0].send(json.dumps({"op": "deliver", "sub": sub.sid, "attempt": 1, "message": msg(1)}))
        for _ in range(100):
            if sub._slots:
                break
            await asyncio.sleep(0.01)
        first = asyncio.get_running_loop().create_task(s.close(timeout=5))
        await asyncio.sleep(0.05)
        second = asyncio.get_running_loop().create_task(s.close(timeout=5))
        await asyncio.sleep(0.1)
        assert not second.done(), "the second close returned while the first was still closing"
        gate.set()
        await within(asyncio.gather(first, second), 5)
        assert s._state == "closed"


# --- an async on_error that raises ---


async def test_an_async_on_error_that_raises_is_logged_not_left_unretrieved(caplog):
    async def on_frame(ws, f):
        if f["op"] == "ping":
            await ws.send("not json")
            await ws.send(json.dumps({"op": "pong", "re": f["id"]}))

    async def on_error(e):
        raise RuntimeError("on_error failed")

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        s = await _session(srv.sockets[0].getsockname()[1], on_error=on_error)
        try:
            with caplog.at_level("ERROR", logger="pigeon_client"):
                await within(s.ping(), 5)
                await asyncio.sleep(0.05)
            assert any("on_error raised" in r.getMessage() for r in caplog.records), caplog.records
        finally:
            await s.close(timeout=1)


async def test_a_subscribe_cancelled_while_its_frame_is_being_sent_ends_what_its_answer_names():
    held = []
    raw = Raw()

    async def on_sub(ws, f):
        held.append((ws, f))

    raw.on_subscribe = on_sub
    async with serve(negotiating(raw.on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        reported: list = []
        s = await _session(srv.sockets[0].getsockname()[1], on_error=reported.append)
        try:
            real_send = s._ws.send
            stuck = asyncio.Event()

            async def send_then_stall(text):
                await real_send(text)
                if '"op":"subscribe"' in text:
                    stuck.set()
                    await asyncio.sleep(3600)  # a send that does not return (a full write buffer)

            s._ws.send = send_then_stall
            task = asyncio.get_running_loop().create_task(s.subscribe("x", lambda d: None))
            await within(stuck.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            s._ws.send = real_send
            for _ in range(100):
                if held:
                    break
                await asyncio.sleep(0.01)
            ws, f = held[0]
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_late"}))
            for _ in range(100):
                if raw.ops("unsubscribe"):
                    break
                await asyncio.sleep(0.02)
            assert [f["sub"] for f in raw.ops("unsubscribe")] == ["sub_late"]
            assert s._pending == {} and reported == [], (s._pending, reported)
        finally:
            await s.close(timeout=1)


# --- a refusal that is not the broker's (a proxy's HTML page) ---


class _Proxy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        status, ctype, body = {
            "/health": (502, "text/html", b"<html>Bad Gateway</html>"),
            "/v1/subjects": (503, "application/json", b'{"message":"upstream down"}'),
        }.get(self.path, (200, "text/html", b"<html>ok</html>"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_an_http_refusal_that_is_not_a_pigeon_error_is_a_transport_failure_like_the_ws_dial():
    from pigeon_client import TransportError

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = HttpClient(f"http://127.0.0.1:{srv.server_address[1]}", "t", timeout=5)
        for call, status in ((c.health, 502), (c.subjects, 503)):
            with pytest.raises(TransportError) as ei:
                call()
            assert ei.value.code == "CONNECTION_FAILED" and ei.value.status == status, ei.value
        with pytest.raises(ProtocolError):  # a success whose body is not JSON: the broker's fault
            c.subject("s")
    finally:
        srv.shutdown()
        srv.server_close()


# --- a caller's NaN: never on the wire, where it poisons a whole batch ---


async def test_a_message_with_nan_is_refused_alone_and_never_sent():
    raw = Raw()
    sent = []

    async def on_frame(ws, f):
        sent.append(f)
        if f["op"] == "publish_batch":
            res = [{"status": "accepted", "message": {"id": f"m{i}", "sequence": i + 1}} for i in range(len(f["messages"]))]
            await ws.send(json.dumps({"op": "decisions", "re": f["id"], "results": res}))
        elif f["op"] == "publish":
            await ws.send(json.dumps({"op": "decision", "re": f["id"], "status": "accepted",
                                      "message": {"id": "m", "sequence": 1}}))
        else:
            await raw.on_frame(ws, f)

    async def endpoint(ws):
        async for text in ws:
            assert "NaN" not in text and "Infinity" not in text, text
            f = json.loads(text)
            if f["op"] == "negotiate":
                await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": CONTRACT}))
            else:
                await on_frame(ws, f)

    async with serve(endpoint, "127.0.0.1", 0) as srv:
        s = await _session(srv.sockets[0].getsockname()[1])
        try:
            good = {"subject": "x", "type": "t", "data": {"v": 1}}
            res = await within(s.publish_many([good, {**good, "data": {"v": float("nan")}}, good,
                                               {**good, "data": {"v": float("inf")}}]), 5)
            assert [type(r).__name__ for r in res][0] == "Decision" and res[2].accepted, res
            assert isinstance(res[1], ValueError) or isinstance(res[1], PigeonError), res
            assert isinstance(res[3], ValueError) or isinstance(res[3], PigeonError), res
            with pytest.raises((ValueError, PigeonError)):
                await s.receive("x", max=float("nan"))
            assert s._pending == {}
        finally:
            await s.close(timeout=1)
    with pytest.raises((ValueError, PigeonError)):
        c = HttpClient("http://127.0.0.1:1", "t")
        c.contract = ws_mod.Contract.from_wire(CONTRACT)
        c.publish({"subject": "x", "data": {"v": float("nan")}})
