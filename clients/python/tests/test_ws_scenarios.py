"""Conformance scenarios of the WebSocket client against a real server."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest

from conftest import Server
from harness import eventually, fresh, notification, payment, scenario, telemetry, within
from pigeon_client import (
    ContractError,
    DeniedError,
    HttpClient,
    QuarantinedError,
    RequestTimeoutError,
    RetryAfter,
    SessionClosedError,
    TransportError,
    UnauthenticatedError,
    connect,
)

PAY = ["payments.authorize"]
NOTIFY = ["notifications.send"]
TELEMETRY = ["events.telemetry"]


async def test_negotiate_granted(server):
    scenario("negotiate.granted")
    s = await connect(server.ws, "checkout-token", PAY, ttl=120)
    try:
        c = s.contract
        assert c.id.startswith("ctr_")
        assert c.subject_names == PAY
        assert "publish" in c.operations("payments.authorize")
        now = dt.datetime.now(dt.timezone.utc)
        assert c.expires_at is not None and c.expires_at > now
        assert c.expires_at <= now + dt.timedelta(seconds=125)
        assert c.principal == "spiffe://merchant-prod/ns/checkout/sa/checkout-api"
    finally:
        await s.close()


async def test_negotiate_none_permitted(server):
    scenario("negotiate.none_permitted")
    with pytest.raises(ContractError) as e:
        await within(connect(server.ws, "catalog-token", PAY))
    assert e.value.code == "NO_PERMITTED_SUBJECTS"
    assert e.value.status == 403


async def test_negotiate_unknown_token(server):
    scenario("negotiate.unknown_token")
    with pytest.raises(UnauthenticatedError) as e:
        await within(connect(server.ws, "no-such-token", PAY), 10)
    assert e.value.code == "UNAUTHENTICATED"
    assert e.value.status == 401


async def test_publish_accepted_and_duplicate(server):
    async with await connect(server.ws, "checkout-token", PAY) as s:
        scenario("publish.accepted")
        m = payment()
        d = await s.publish(m)
        assert d.status == "accepted" and d.accepted
        assert d.id.startswith("msg_")
        assert d.sequence >= 1

        scenario("publish.duplicate")
        again = await s.publish(m)
        assert again.status == "duplicate" and again.duplicate
        assert again.id == d.id
        assert again.sequence == d.sequence


async def test_denials(server):
    auditor = HttpClient(server.http, "auditor-token")
    async with await connect(server.ws, "checkout-token", PAY) as s:
        scenario("deny.schema")
        m = payment()
        del m["data"]["amount"]
        with pytest.raises(QuarantinedError) as e:
            await s.publish(m)
        assert e.value.code == "SCHEMA_INVALID"
        assert e.value.quarantine_id

        scenario("deny.intent")
        with pytest.raises(DeniedError) as e:
            await s.publish(payment(intent="refund_payment"))
        assert e.value.code == "INTENT_DENIED"
        assert e.value.status == 403

        scenario("deny.region")
        with pytest.raises(DeniedError) as e:
            await s.publish(payment(region="us"))
        assert e.value.code == "REGION_DENIED"

        scenario("deny.forbidden_field")
        with pytest.raises(QuarantinedError) as e:
            await s.publish(payment(data={"card": {"pan": "4111111111111111"}}))
        assert e.value.code == "SENSITIVE_FIELD_DENIED"
        qid = e.value.quarantine_id
        assert qid
        rec = await asyncio.to_thread(auditor.quarantine_record, qid)
        assert rec["message"]["data"]["card"]["pan"] == "[REDACTED]"

        scenario("deny.raw_pan")
        with pytest.raises(QuarantinedError) as e:
            await s.publish(payment(data={"paymentToken": "4111111111111111"}))
        assert e.value.code == "RAW_PAN_DETECTED"
        assert e.value.quarantine_id
        assert isinstance(e.value, DeniedError)  # a quarantine is a kind of denial


async def test_contract_expired(server):
    scenario("contract.expired")
    # Renewed only when asked to.
    s = await connect(server.ws, "checkout-token", PAY, ttl=1, auto_renew=False)
    try:
        await asyncio.sleep(1.3)
        with pytest.raises(ContractError) as e:
            await within(s.publish(payment()))
        assert e.value.code == "CONTRACT_EXPIRED"
        # An expired contract is not renewed (an error, never a hang)...
        with pytest.raises(ContractError) as e:
            await within(s.renew(ttl=60))
        assert e.value.code == "CONTRACT_EXPIRED"
        # ... a new one is negotiated.
        old = s.contract.id
        c = await s.negotiate(ttl=60)
        assert c.id != old and s.contract is c
        assert c.expires_at is not None and c.expires_at > dt.datetime.now(dt.timezone.utc)
        assert (await s.publish(payment())).accepted
    finally:
        await s.close()


async def test_contract_revoked(server):
    scenario("contract.revoked")
    ended: list[Exception] = []
    gw = await connect(server.ws, "gateway-token", PAY, on_error=ended.append)
    co = await connect(server.ws, "checkout-token", PAY)
    try:
        sub = await gw.subscribe("payments.authorize", lambda d: None)
        await asyncio.to_thread(HttpClient(server.http, "gateway-token").revoke, gw.contract.id)
        await asyncio.to_thread(HttpClient(server.http, "checkout-token").revoke, co.contract.id)
        with pytest.raises(ContractError) as e:
            await within(co.publish(payment()))
        assert e.value.code == "CONTRACT_REVOKED"
        # The running subscription ends with the error, surfaced.
        with pytest.raises(ContractError) as e:
            await within(sub.wait(), 10)
        assert e.value.code == "CONTRACT_REVOKED"
        assert any(getattr(x, "code", "") == "CONTRACT_REVOKED" for x in ended)
    finally:
        await gw.close()
        await co.close()


async def test_subscribe_selector(server):
    scenario("subscribe.selector")
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    got: list[dict] = []
    try:
        tag = time.time_ns() % 1_000_000
        await mon.subscribe("events.telemetry", lambda d: got.append(d.message), selector="/kind=temp/site=lab")
        sent = []
        for kind, site in (("temp", "lab"), ("temp", "roof"), ("humidity", "lab"), ("temp", "lab")):
            d = await sen.publish(telemetry(kind, site, tag + len(sent)))
            sent.append((kind, site, d.id))
        want = [i for k, s, i in sent if (k, s) == ("temp", "lab")]
        await eventually(lambda: len(got) >= 2, what="two temp@lab readings")
        # A matching marker published last: once it is in, anything before it
        # that the selector let through would be too.
        want.append((await sen.publish(telemetry("temp", "lab", tag + len(sent)))).id)
        await eventually(lambda: len(got) >= 3, what="the marker")
        assert [m["id"] for m in got] == want
    finally:
        await mon.close()
        await sen.close()


async def test_workqueue_competing(server):
    scenario("workqueue.competing")
    group = fresh("mailers")
    a = await connect(server.ws, "notifier-token", NOTIFY)
    b = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def handler(name):
        async def h(d):
            seen[name].append(d.id)
            await asyncio.sleep(0.05)

        return h

    try:
        await a.subscribe("notifications.send", handler("a"), group=group, max_in_flight=2, window=2)
        await b.subscribe("notifications.send", handler("b"), group=group, max_in_flight=2, window=2)
        ids = {d.id for d in await asyncio.gather(*(pub.publish(notification()) for _ in range(20)))}
        await eventually(lambda: ids <= set(seen["a"]) | set(seen["b"]), what="20 notifications handled")
        await asyncio.sleep(0.3)
        mine_a = [i for i in seen["a"] if i in ids]
        mine_b = [i for i in seen["b"] if i in ids]
        assert sorted(mine_a + mine_b) == sorted(ids)  # each exactly once
        assert mine_a and mine_b  # both handled some
    finally:
        for s in (a, b, pub):
            await s.close()


async def test_nack_redelivery(server):
    scenario("nack.redelivery")
    group = fresh("g")
    w = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    attempts: list[int] = []
    acked = asyncio.Event()
    try:
        sub = await w.subscribe("notifications.send", group=group)
        mid = (await pub.publish(notification())).id

        async def consume():
            async for d in sub:
                if d.id != mid:
                    await d.ack()
                    continue
                attempts.append(d.attempt)
                if d.attempt == 1:
                    await d.nack(0)
                else:
                    await d.ack()
                    acked.set()
                    return

        await within(consume(), 15)
        assert attempts == [1, 2]
        assert acked.is_set()
    finally:
        await w.close()
        await pub.close()


async def test_handler_throws_nacks(server):
    scenario("handler.throws_nacks")
    group = fresh("g")
    w = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    seen: dict[str, list[int]] = {}
    try:
        bad = notification()
        bad["data"]["templateId"] = "fail-once"

        async def handler(d):
            seen.setdefault(d.id, []).append(d.attempt)
            if d.data.get("templateId") == "fail-once" and d.attempt == 1:
                raise RuntimeError("boom")

        await w.subscribe("notifications.send", handler, group=group, max_in_flight=4)
        bad_id = (await pub.publish(bad)).id
        good = [(await pub.publish(notification())).id for _ in range(3)]
        await eventually(lambda: len(seen.get(bad_id, [])) >= 2 and all(g in seen for g in good),
                         what="the failing message again and the others once")
        await asyncio.sleep(0.3)
        assert seen[bad_id] == [1, 2]
        for g in good:
            assert seen[g] == [1]
    finally:
        await w.close()
        await pub.close()


async def test_handler_retry_after_capped(server):
    scenario("handler.retry_after_capped")
    w = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    seen: dict[str, list[int]] = {}
    try:
        async def handler(d):
            seen.setdefault(d.id, []).append(d.attempt)
            raise RetryAfter(1000 * 3600, RuntimeError("much later"))

        await w.subscribe("notifications.send", handler, group=fresh("g"))
        nid = (await pub.publish(notification())).id
        await eventually(lambda: nid in seen, what="the first delivery")
        await asyncio.sleep(3)  # past the ack wait (2 s): a refused nack would let it come back
        assert seen[nid] == [1]
    finally:
        await w.close()
        await pub.close()


def reply_for(req: dict) -> dict:
    return {
        "type": "payment.authorization.result",
        "subject": "payments.authorize",
        "intent": "authorize_payment",
        "classification": "pci",
        "idempotencyKey": fresh("reply"),
        "correlationId": req["id"],
        "data": {"merchantId": req["data"]["merchantId"], "orderId": req["data"]["orderId"], "amount": req["data"]["amount"],
                 "currency": req["data"]["currency"], "paymentToken": "tok_reply", "approved": True},
    }


async def responder(server):
    gw = await connect(server.ws, "gateway-token", PAY)

    async def answer(d):
        await gw.publish(reply_for(d.message))

    await gw.subscribe("payments.authorize", answer, group=fresh("gw"))
    return gw


async def test_request_reply(server):
    scenario("request.reply")
    gw = await responder(server)
    co = await connect(server.ws, "checkout-token", PAY)
    try:
        req = payment()
        reply = await within(co.request(req, timeout=10))
        assert reply["type"] == "payment.authorization.result"
        assert reply["correlationId"].startswith("msg_")
        assert reply["data"]["orderId"] == req["data"]["orderId"]
        assert reply["source"] == "spiffe://merchant-prod/ns/payments/sa/gateway-adapter"
    finally:
        await gw.close()
        await co.close()


async def test_request_timeout(server):
    scenario("request.timeout")
    co = await connect(server.ws, "checkout-token", PAY)
    try:
        # The bound only catches a hang. The server's answer at the 0.3 s
        # asked for is told from the client's own backstop (seconds later,
        # the same code) by its message, which comes from the server.
        with pytest.raises(RequestTimeoutError) as e:
            await within(co.request(payment(), timeout=0.3), 30)
        assert e.value.code == "REQUEST_TIMEOUT"
        assert e.value.status == 504
        assert "no answer from the server" not in e.value.message, "the client's backstop, not the server's answer"
    finally:
        await co.close()


async def test_receive_pull(server):
    scenario("receive.pull")
    pub = await connect(server.ws, "orders-token", NOTIFY)
    w = await connect(server.ws, "notifier-token", NOTIFY)
    try:
        ids = {(await pub.publish(notification())).id for _ in range(3)}
        got: set[str] = set()
        deadline = time.monotonic() + 10
        while not ids <= got and time.monotonic() < deadline:
            ms = await w.receive("notifications.send", max=10)
            assert len(ms) <= 10
            for m in ms:
                await w.ack("notifications.send", m["id"])  # leftovers of other tests are settled too
                got.add(m["id"])
            if not ms:
                await asyncio.sleep(0.05)
        assert ids <= got
        again = await w.receive("notifications.send", max=10)
        assert not ids & {m["id"] for m in again}
        for m in again:
            await w.ack("notifications.send", m["id"])
    finally:
        await pub.close()
        await w.close()


async def test_receive_pull_attempt(server):
    scenario("receive.pull_attempt")
    subject = "notifications.send"
    pub = await connect(server.ws, "orders-token", NOTIFY)
    a = await connect(server.ws, "notifier-token", NOTIFY)
    b = await connect(server.ws, "notifier-token", NOTIFY)

    async def take(w, mid):
        # Until it comes, settling the others it is handed (leftovers of
        # other tests on the shared subject).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            mine = None
            for m in await w.receive(subject, max=10):
                if m["id"] == mid:
                    mine = m
                else:
                    await w.ack(subject, m)
            if mine is not None:
                return mine
            await asyncio.sleep(0.05)
        raise AssertionError(f"{mid} never came")

    try:
        mid = (await pub.publish(notification())).id
        m_a = await take(a, mid)
        assert m_a.attempt == 1
        # A does not answer; once its lease ran out (the 2 s ack wait), B
        # leases the notification again.
        m_b = await take(b, mid)
        assert m_b.attempt == 2 and m_b["sequence"] == m_a["sequence"]
        with pytest.raises(DeniedError) as e:
            await a.ack(subject, m_a)  # names attempt 1
        assert e.value.code == "ACK_NOT_ALLOWED"
        with pytest.raises(DeniedError) as e:
            await a.nack(subject, mid, 0, sequence=m_a["sequence"], attempt=1)
        assert e.value.code == "ACK_NOT_ALLOWED"
        handed = await a.receive(subject, max=10)
        for m in handed:
            await a.ack(subject, m)
        assert mid not in {m["id"] for m in handed}, "the late nack handed it out again"
        await b.ack(subject, m_b)  # names attempt 2
        await asyncio.sleep(2.5)  # past another ack wait: an unsettled lease would have run out
        again = await b.receive(subject, max=10)
        for m in again:
            await b.ack(subject, m)
        assert mid not in {m["id"] for m in again}
    finally:
        await pub.close()
        await a.close()
        await b.close()


async def test_replay_reason_required(server):
    scenario("replay.reason_required")
    pub = await connect(server.ws, "orders-token", NOTIFY)
    ops = await connect(server.ws, "notify-replay-token", NOTIFY)
    try:
        ds = [await pub.publish(notification()) for _ in range(3)]
        with pytest.raises(DeniedError) as e:
            await ops.replay("notifications.send")
        assert e.value.code == "REPLAY_DENIED"
        ms = await ops.replay("notifications.send", reason="conformance: resend after outage",
                              from_sequence=ds[0].sequence, to_sequence=ds[-1].sequence)
        assert [m["id"] for m in ms] == [d.id for d in ds]
        assert [m["sequence"] for m in ms] == sorted(m["sequence"] for m in ms)
    finally:
        await pub.close()
        await ops.close()


async def test_grant_role_removed(server):
    scenario("grant.role_removed")
    admin = HttpClient(server.http, "admin-token")
    account = f"spiffe://conformance/ns/grants/sa/{fresh('py')}"
    role = fresh("telemetry-reader")
    await asyncio.to_thread(admin.create_account, account)
    await asyncio.to_thread(admin.put_role, role,
                            [{"subject": "events.telemetry", "operations": ["receive", "ack"]}])
    await asyncio.to_thread(admin.add_role, account, role)
    token = (await asyncio.to_thread(admin.grant, account, [role]))["token"]
    s = await connect(server.ws, token, TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    got: list[str] = []
    try:
        sub = await s.subscribe("events.telemetry", lambda d: got.append(d.id))
        first = (await sen.publish(telemetry("temp", "grant", 1))).id
        await eventually(lambda: first in got, what="a delivery under the grant")
        await asyncio.to_thread(admin.remove_role, account, role)
        after = (await sen.publish(telemetry("temp", "grant", 2))).id
        with pytest.raises(ContractError) as e:
            await within(sub.wait(), 10)
        assert e.value.code == "GRANT_REVOKED"
        await asyncio.sleep(0.3)
        assert after not in got
    finally:
        await s.close()
        await sen.close()


async def test_pipelined_publish(server):
    scenario("pipelined.publish")
    s = await connect(server.ws, "sensor-token", TELEMETRY)
    try:
        futs = [await s.publish_async(telemetry("temp", "pipe", i)) for i in range(1000)]
        ds = await within(asyncio.gather(*futs), 30)
        assert len(ds) == 1000
        assert all(d.status == "accepted" for d in ds)
        assert len({d.id for d in ds}) == 1000
        seqs = [d.sequence for d in ds]
        assert all(b > a for a, b in zip(seqs, seqs[1:]))
        # The same through publish(): concurrent callers share frames too.
        ds2 = await within(asyncio.gather(*(s.publish(telemetry("temp", "pipe", i)) for i in range(200))), 30)
        seqs2 = [d.sequence for d in ds2]
        assert all(b > a for a, b in zip(seqs2, seqs2[1:])) and seqs2[0] > seqs[-1]
    finally:
        await s.close()


async def test_session_closed(server):
    scenario("session.closed")
    group = fresh("g")
    w = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    started, finished = asyncio.Event(), asyncio.Event()
    try:
        mid = (await pub.publish(notification())).id

        async def slow(d):
            if d.id == mid:
                started.set()
                await asyncio.sleep(0.4)
                finished.set()

        await w.subscribe("notifications.send", slow, group=group)
        await within(started.wait(), 10)
        await within(w.close(), 10)  # finishes the running handler and its ack
        assert finished.is_set()
        # Each fails with SESSION_CLOSED (no connection is waited for: a
        # request would otherwise end in a timeout); the bound only catches a hang.
        with pytest.raises(SessionClosedError) as e:
            await within(w.publish(notification()), 10)
        assert e.value.code == "SESSION_CLOSED"
        with pytest.raises(SessionClosedError) as e:
            await within(w.subscribe("notifications.send", lambda d: None), 10)
        assert e.value.code == "SESSION_CLOSED"
        with pytest.raises(SessionClosedError) as e:
            await within(w.request(payment(), timeout=60), 10)
        assert e.value.code == "SESSION_CLOSED"
        # The ack was taken: past the 2 s ack wait the message does not come back.
        w2 = await connect(server.ws, "notifier-token", NOTIFY)
        back: list[str] = []
        await w2.subscribe("notifications.send", lambda d: back.append(d.id), group=group)
        await asyncio.sleep(2.6)
        await w2.close()
        assert mid not in back
    finally:
        await w.close()
        await pub.close()


async def test_transport_server_closes(own_server):
    scenario("transport.server_closes")
    own_server.start()
    co = await connect(own_server.ws, "checkout-token", PAY, reconnect=False)
    try:
        # A timeout far beyond the bound below: only the server's death can
        # end the request within it, and a timeout would be a
        # RequestTimeoutError, not a TransportError. The bound only catches a hang.
        pending = asyncio.ensure_future(co.request(payment(), timeout=60))
        await asyncio.sleep(0.3)
        assert not pending.done()
        own_server.kill()
        with pytest.raises(TransportError):
            await within(pending, 30)
        with pytest.raises(TransportError):
            await co.publish(payment())
    finally:
        await co.close()


async def test_reconnect_server_restart(own_server):
    scenario("reconnect.server_restart")
    own_server.start()
    mon = await connect(own_server.ws, "monitor-token", TELEMETRY, reconnect_timeout=30)
    sen = await connect(own_server.ws, "sensor-token", TELEMETRY, reconnect_timeout=30)
    received: list[str] = []
    try:
        sub = await mon.subscribe("events.telemetry")

        async def take(n: int, ack_upto: int) -> None:
            async for d in sub:
                received.append(d.id)
                if len(received) <= ack_upto or len(received) > 4:
                    await d.ack()
                if len(received) >= n:
                    return

        before = [(await sen.publish(telemetry("temp", "restart", i))).id for i in range(4)]
        # Three handed over and acked, the fourth handed over and left unanswered.
        await within(take(4, 3), 10)
        assert received == before
        own_server.kill()
        # Started again once both sessions saw the loss: they reconnect to it.
        await eventually(lambda: not mon.connected and not sen.connected, what="the lost connections")
        own_server.start()
        await within(mon.wait_connected(20), 25)
        await within(sen.wait_connected(20), 25)
        assert mon.reconnects >= 1 and sen.reconnects >= 1
        after = [(await sen.publish(telemetry("temp", "restart", 10 + i))).id for i in range(3)]
        await within(take(8, 3), 15)
        # A marker published last: once it is in, a second copy of anything
        # before it would be too.
        marker = (await sen.publish(telemetry("temp", "restart", 99))).id
        await within(take(9, 3), 15)
        # From the last acknowledged position: the unanswered one again, then
        # everything published after the restart; nothing acked before it twice.
        assert received[4:] == [before[3]] + after + [marker]
        assert not set(received[4:]) & set(before[:3])
    finally:
        await mon.close()
        await sen.close()


async def test_reconnect_to_a_renumbered_subject(pigeon_bin):
    """A broker that lost its store (in memory, killed and started again)
    numbers the subject anew: the resume gets the new numbering from its
    first message, and the next resume continues in it (after what was
    handled of it, not after the old position, which would again be beyond
    the end and deliver the new numbering from its first)."""
    scenario("reconnect.renumbered")
    srv = Server(pigeon_bin).start()  # --data "": the store dies with the process
    try:
        mon = await connect(srv.ws, "monitor-token", TELEMETRY, reconnect_timeout=30)
        sen = await connect(srv.ws, "sensor-token", TELEMETRY, reconnect_timeout=30)
        handled: list[str] = []
        try:
            sub = await mon.subscribe("events.telemetry", lambda d: handled.append(f"{d.data['kind']}-{d.data['value']}"))

            def acks_answered() -> bool:
                return not sub._slots and sub._ack_task is None

            for i in range(1, 6):
                await sen.publish(telemetry("a", "renumbered", i))
            await eventually(lambda: len(handled) == 5 and acks_answered(), what="the first broker's messages acked")
            srv.kill()
            srv.start()
            # Resumed: the reconnect resubscribed before it counts.
            await eventually(lambda: mon.reconnects == 1 and mon.connected, 25, what="the resume")
            await eventually(lambda: sen.reconnects == 1 and sen.connected, 25, what="the sensor's reconnect")
            assert sub._from == 1, "the resume asked for 6, beyond the end: it starts at the first message"
            for i in (1, 2):
                await sen.publish(telemetry("b", "renumbered", i))
            await eventually(lambda: len(handled) >= 7 and acks_answered(), what="the new numbering's messages acked")
            assert handled[5:] == ["b-1", "b-2"]
            # Only the monitor's connection is cut, on the same store: the
            # resume asks after b-2.
            await mon._ws.close()  # type: ignore[union-attr]
            await eventually(lambda: mon.reconnects == 2 and mon.connected, what="the second resume")
            await sen.publish(telemetry("b", "renumbered", 3))
            await eventually(lambda: len(handled) >= 8, what="the next message")
            # A marker published last: anything more before it would be in by now.
            await sen.publish(telemetry("b", "renumbered", 4))
            await eventually(lambda: len(handled) >= 9, what="the marker")
            assert handled[7:] == ["b-3", "b-4"]
        finally:
            await mon.close()
            await sen.close()
    finally:
        srv.kill()


async def test_publish_too_large_is_refused_locally(server):
    from pigeon_client import InvalidError

    s = await connect(server.ws, "sensor-token", TELEMETRY)
    try:
        with pytest.raises(InvalidError) as e:
            await s.publish(telemetry("temp", "x" * (2 << 20), 1))
        assert e.value.code == "PAYLOAD_TOO_LARGE"
        assert (await s.publish(telemetry("temp", "ok", 1))).accepted  # the connection is intact
        sub = await s.renew()
        assert sub.id
    finally:
        await s.close()


async def test_subprotocol_auth_and_region(server):
    s = await connect(server.ws, "checkout-token", PAY, subprotocol_auth=True, region="eu")
    try:
        assert s.contract.region == "eu"
        d = await s.publish(payment())
        assert d.message["region"] == "eu"
        await s.ping()
    finally:
        await s.close()


async def test_at_most_once_subscription(server):
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    got: list[str] = []
    try:
        await mon.subscribe("events.telemetry", lambda d: got.append(d.id), ack="none",
                            selector="/kind=amo/site=lab")
        ids = [(await sen.publish(telemetry("amo", "lab", i))).id for i in range(5)]
        await eventually(lambda: len(got) >= 5, what="five at-most-once deliveries")
        assert got == ids
        assert not mon.errors
    finally:
        await mon.close()
        await sen.close()


async def test_at_most_once_keeps_no_state_and_resumes_after_the_last_received(server):
    # At most once the client keeps nothing per delivery, and a reconnect
    # resumes after the last message received: the deliveries queued when the
    # connection dropped still run (they were done when sent), and none comes
    # again, not even the one whose handler was running across the reconnect.
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("amo")
    seen: list[int] = []
    gate = asyncio.Event()

    async def handler(d):
        seen.append(d.data["value"])
        if d.data["value"] == 0:
            await gate.wait()

    try:
        sub = await mon.subscribe("events.telemetry", handler, ack="none", selector=f"/kind=amo/site={site}")
        decided = [await sen.publish(telemetry("amo", site, i)) for i in range(5)]
        await eventually(lambda: seen == [0] and sub._queue.qsize() == 4, what="one running, four queued")
        assert sub._outstanding == set()
        assert sub._subscribe_frame(resume=True)["start"] == {"sequence": decided[-1].sequence + 1}

        old = mon._ws
        assert old is not None
        await old.close()  # the connection drops; the session reconnects and resubscribes
        await eventually(lambda: mon.reconnects == 1 and mon.connected, what="the reconnect")
        decided += [await sen.publish(telemetry("amo", site, i)) for i in range(5, 7)]
        gate.set()
        await eventually(lambda: len(seen) >= 7, what="every message once")

        # Many more: still nothing kept per delivery, only the position.
        n = 500
        more = await sen.publish_many([telemetry("amo", site, i) for i in range(7, 7 + n)])
        await eventually(lambda: len(seen) >= 7 + n, what=f"{n} more deliveries")
        await asyncio.sleep(0.3)  # a message handed over twice would come meanwhile
        assert seen == list(range(7 + n)), "each once, in publish order"
        assert sub._outstanding == set()
        assert sub._queue.qsize() == 0
        assert sub._settled_high == more[-1].sequence
        assert sub.dropped == 0
        assert not [e for e in mon.errors if e.code != "SESSION_CLOSED"], list(mon.errors)
    finally:
        gate.set()
        await mon.close()
        await sen.close()


@pytest.mark.parametrize("form", ["handler", "iterator"])
async def test_at_most_once_queue_is_bounded(server, form):
    # A consumer that does not keep up: at most MAX_QUEUED deliveries wait on
    # the client, the rest are dropped, counted and reported (at 1, 2, 4, …),
    # the session keeps answering, and what was kept comes in order once the
    # consumer moves again.
    from pigeon_client.subscription import MAX_QUEUED

    reported: list = []
    mon = await connect(server.ws, "monitor-token", TELEMETRY, on_error=reported.append)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("amoq")
    handled: list[int] = []
    gate = asyncio.Event()
    most = 0
    polling = True

    async def handler(d):
        await gate.wait()
        handled.append(d.data["value"])

    async def poll() -> None:
        nonlocal most
        while polling:
            most = max(most, sub._queue.qsize())
            await asyncio.sleep(0.001)

    total = MAX_QUEUED + 904
    try:
        sub = await mon.subscribe("events.telemetry", handler if form == "handler" else None, ack="none",
                                  selector=f"/kind=amoq/site={site}")
        poller = asyncio.ensure_future(poll())
        for start in range(0, total, 1000):
            res = await sen.publish_many([telemetry("amoq", site, i) for i in range(start, min(total, start + 1000))])
            assert all(not isinstance(r, Exception) for r in res), res[:3]
            await within(mon.ping(), 5)  # the session answers while the consumer is stuck

        await eventually(lambda: sub._queue.qsize() + sub.dropped + len(sub._running) >= total,
                         timeout=30, what=f"{total} deliveries received")
        await within(mon.ping(), 5)
        polling = False
        await poller
        assert sub._queue.qsize() <= MAX_QUEUED and most <= MAX_QUEUED, (sub._queue.qsize(), most)
        assert sub.dropped >= total - MAX_QUEUED - 1, sub.dropped
        drops = [e for e in reported if e.code == "DELIVERIES_DROPPED"]
        assert [e.details["dropped"] for e in drops] == [1 << i for i in range(sub.dropped.bit_length())]
        assert all(e.details["subject"] == "events.telemetry" and e.details["maxQueued"] == MAX_QUEUED for e in drops)
        assert not [e for e in reported if e.code != "DELIVERIES_DROPPED"], reported
        kept = total - sub.dropped

        if form == "handler":
            assert handled == []
            gate.set()
            await eventually(lambda: len(handled) >= kept, timeout=20, what=f"{kept} kept deliveries handled")
        else:
            async for d in sub:
                handled.append(d.data["value"])
                if len(handled) >= kept:
                    break
        assert handled == list(range(kept)), "the first ones kept, in order"

        # The subscription goes on: a later message is handed over, nothing more dropped.
        dropped = sub.dropped
        await sen.publish(telemetry("amoq", site, total))
        if form == "handler":
            await eventually(lambda: len(handled) > kept, what="a message after the flood")
        else:
            d = await within(sub.__anext__(), 10)
            handled.append(d.data["value"])
        assert handled[kept:] == [total]
        assert sub.dropped == dropped
    finally:
        polling = False
        gate.set()
        await mon.close()
        await sen.close()


async def test_at_most_once_queue_is_bounded_in_size(pigeon_bin):
    # The queue is bounded in size too: messages of about 512 KiB arrive
    # while the handler is stuck on the first. MAX_QUEUED_BYTES // size of
    # them (127) are kept, the next 128 dropped (a power of two: the report
    # of the 128th drop comes with the last message), and once released the
    # handler handles exactly the first and the kept ones, in order. A
    # server of its own: the 128 MiB published stay out of the shared one.
    from pigeon_client.subscription import MAX_QUEUED, MAX_QUEUED_BYTES

    srv = Server(pigeon_bin).start()
    reported: list = []
    handled: list[str] = []
    gate = asyncio.Event()
    sessions = []
    pad = "x" * (512 << 10)
    site = fresh("amob")

    def message(i: int) -> dict:
        # Every message's data has the same length: the counter is zero-padded.
        m = telemetry("amob", site, 0)
        m["data"].update(n=f"{i:04d}", pad=pad)
        return m

    async def handler(d):
        handled.append(d.data["n"])
        if len(handled) == 1:
            await gate.wait()

    def drops() -> list:
        return [e for e in reported if e.code == "DELIVERIES_DROPPED"]

    size = len(json.dumps(message(0)["data"], separators=(",", ":")))
    kept = MAX_QUEUED_BYTES // size
    assert kept == 127
    dropped = 128
    total = 1 + kept + dropped
    assert total < MAX_QUEUED, "the count bound plays no part"
    try:
        mon = await connect(srv.ws, "monitor-token", TELEMETRY, on_error=reported.append)
        sessions.append(mon)
        sen = await connect(srv.ws, "sensor-token", TELEMETRY)
        sessions.append(sen)
        sub = await mon.subscribe("events.telemetry", handler, ack="none", selector=f"/kind=amob/site={site}")
        await within(sen.publish(message(0)), 10)
        await eventually(lambda: len(handled) == 1, what="the first delivery's handler")
        for start in range(1, total, 16):
            res = await within(sen.publish_many([message(i) for i in range(start, min(total, start + 16))]), 30)
            assert all(not isinstance(r, Exception) for r in res), res[:3]
        await eventually(lambda: any(e.details["dropped"] == dropped for e in drops()), timeout=30,
                         what=f"the report of {dropped} drops (dropped {sub.dropped}, queued {sub._queue.qsize()})")
        assert sub.dropped == dropped
        assert sub._queue.qsize() == kept
        assert sub._queued_bytes == kept * size
        assert [e.details["dropped"] for e in drops()] == [1 << i for i in range(8)], "reported at 1, 2, 4, …"
        assert all(e.details["maxQueued"] == MAX_QUEUED and e.details["maxQueuedBytes"] == MAX_QUEUED_BYTES
                   for e in drops())
        assert not [e for e in reported if e.code != "DELIVERIES_DROPPED"], reported

        gate.set()
        await eventually(lambda: len(handled) >= 1 + kept and sub._queue.qsize() == 0 and not sub._running,
                         timeout=30, what=f"{1 + kept} handled (got {len(handled)})")
        assert handled == [f"{i:04d}" for i in range(1 + kept)], "the first, then the kept ones, and nothing else"
        assert sub._queued_bytes == 0
        assert sub.dropped == dropped
    finally:
        gate.set()  # a failed check does not leave close() waiting for the handler
        for s in sessions:
            await s.close()
        srv.stop()


async def test_retry_after_sets_the_nack_delay(server):
    group = fresh("g")
    w = await connect(server.ws, "notifier-token", NOTIFY)
    pub = await connect(server.ws, "orders-token", NOTIFY)
    times: dict[int, float] = {}
    try:
        m = notification()
        m["data"]["templateId"] = "retry-after"

        def handler(d):
            if d.data.get("templateId") != "retry-after":
                return
            times[d.attempt] = time.monotonic()
            if d.attempt == 1:
                raise RetryAfter(0.15, RuntimeError("busy"))

        await w.subscribe("notifications.send", handler, group=group)
        await pub.publish(m)
        await eventually(lambda: 2 in times, what="the retried delivery")
        assert times[2] - times[1] >= 0.14
    finally:
        await w.close()
        await pub.close()


# ---------- resuming an acknowledged pub/sub subscription ----------
# The server redelivers a nacked or unanswered delivery only on the
# subscription it was sent on: the resume must ask again for every sequence
# received and not yet handled successfully.


async def test_reconnect_resume_nacked(server):
    scenario("reconnect.resume_nacked")
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("rsm")
    handled: list[int] = []  # values handled successfully
    failed = False

    def handler(d):
        nonlocal failed
        if d.data["site"] != site:
            return
        if d.data["value"] == 2 and not failed:
            failed = True
            raise RetryAfter(60)  # its redelivery cannot come on this connection
        handled.append(d.data["value"])

    try:
        sub = await mon.subscribe("events.telemetry", handler, selector="/kind=resume_nacked")
        decided = [await sen.publish(telemetry("resume_nacked", site, i)) for i in range(5)]
        # One handler at a time: once 3 and 4 are handled, the nack of 2 was answered.
        await eventually(lambda: failed and 3 in handled and 4 in handled, what="the nack of 2 and the others handled")
        sid = sub.sid
        old = mon._ws
        assert old is not None
        await old.close()  # the connection drops; the session reconnects and resubscribes
        await eventually(lambda: mon.reconnects == 1 and sub.sid != sid, what="the resumed subscription")
        await eventually(lambda: 2 in handled, what="message 2 handled after the resume")
        await asyncio.sleep(0.3)  # a second redelivery of 2 would come meanwhile
        assert handled.count(2) == 1, f"message 2 handled successfully exactly once: {handled}"
        assert set(handled) == set(range(5)), handled
        assert decided[2].sequence < decided[3].sequence
    finally:
        await mon.close()
        await sen.close()


async def test_reconnect_resume_from_start(server):
    """A subscription handed nothing before its connection dropped resumes at
    the from of its subscribed answer, not at "new" again: what was
    published during the outage is handled, what came before it subscribed
    is not."""
    scenario("reconnect.resume_from_start")
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("rsf")
    handled: list[int] = []

    def handler(d):
        if d.data["site"] == site:
            handled.append(d.data["value"])

    url = mon.url
    try:
        # 0 and 1 before the subscribe, 2 and 3 while its connection is down.
        for i in (0, 1):
            await sen.publish(telemetry("resume_from", site, i))
        sub = await mon.subscribe("events.telemetry", handler, selector="/kind=resume_from")  # start new
        sid = sub.sid
        mon.url = "ws://127.0.0.1:1/v1/ws"  # the reconnects fail until the outage's messages are in
        old = mon._ws
        assert old is not None
        await old.close()
        await eventually(lambda: not mon.connected, what="the lost connection")
        for i in (2, 3):
            await sen.publish(telemetry("resume_from", site, i))
        mon.url = url
        await eventually(lambda: mon.reconnects == 1 and sub.sid != sid, what="the resumed subscription")
        await eventually(lambda: len(handled) >= 2, what="the outage's messages handled")
        # A marker published last: anything more before it would be in by now.
        await sen.publish(telemetry("resume_from", site, 4))
        await eventually(lambda: len(handled) >= 3, what="the marker")
        assert handled == [2, 3, 4], f"exactly the outage's messages, then the marker: {handled}"
        assert sub._from > 0, "the subscribed answers name from"
    finally:
        mon.url = url
        await mon.close()
        await sen.close()


async def test_resume_redelivers_a_lower_delivery_running_when_a_higher_was_acked(server):
    """max_in_flight 2: a lower delivery's handler still runs when a higher
    one is acked; the connection drops and the handler then finishes (its
    ack cannot reach the server): after the resume the lower message is
    delivered again."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("rsm")
    calls: list[int] = []
    gate = asyncio.Event()

    async def handler(d):
        if d.data["site"] != site:
            return
        calls.append(d.data["value"])
        if d.data["value"] == 0 and calls.count(0) == 1:
            await gate.wait()  # still running across the drop

    try:
        sub = await mon.subscribe("events.telemetry", handler, selector="/kind=resume_inflight", max_in_flight=2)
        for i in range(2):
            await sen.publish(telemetry("resume_inflight", site, i))
        # 1's handler returned and its ack was answered: only 0's still runs.
        await eventually(lambda: calls == [0, 1] and len(sub._slots) == 1 and sub._ack_task is None,
                         what="1 acked while 0 runs")
        sid = sub.sid
        old = mon._ws
        assert old is not None
        await old.close()
        await eventually(lambda: not mon.connected, what="the lost connection")
        gate.set()  # the lower handler finishes once its connection is gone
        await eventually(lambda: mon.reconnects == 1 and sub.sid != sid, what="the resumed subscription")
        await eventually(lambda: calls.count(0) == 2, what="message 0 delivered again")
    finally:
        gate.set()
        await mon.close()
        await sen.close()
