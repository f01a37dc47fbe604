"""Conformance scenarios of the HTTP client against a real server."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from harness import fresh, notification, payment, scenario, within
from pigeon_client import (
    ContractError,
    DeniedError,
    HttpClient,
    NotFoundError,
    PigeonError,
    QuarantinedError,
    RequestTimeoutError,
    TransportError,
    UnauthenticatedError,
    connect,
)

PAY = ["payments.authorize"]
NOTIFY = ["notifications.send"]


def test_http_publish(server):
    scenario("http.publish")
    c = HttpClient(server.http, "checkout-token")
    k = c.connect(PAY, ttl=60)
    assert k.id.startswith("ctr_") and "publish" in k.operations("payments.authorize")
    m = payment()
    d = c.publish(m)
    assert d.status == "accepted" and d.sequence >= 1
    again = c.publish(m)
    assert again.status == "duplicate" and again.id == d.id
    with pytest.raises(QuarantinedError) as e:
        c.publish(payment(data={"paymentToken": "4111111111111111"}))
    assert e.value.code == "RAW_PAN_DETECTED"
    assert e.value.status == 422
    assert e.value.quarantine_id
    assert e.value.gate


def test_http_receive_ack(server):
    scenario("http.receive_ack")
    orders = HttpClient(server.http, "orders-token")
    orders.connect(NOTIFY)
    ds = [orders.publish(notification()) for _ in range(3)]
    ids = {d.id for d in ds}
    w = HttpClient(server.http, "notifier-token")
    w.connect(NOTIFY)
    got: set[str] = set()
    deadline = time.monotonic() + 10
    while not ids <= got and time.monotonic() < deadline:
        ms = w.receive("notifications.send", max=10, ack="explicit")
        assert len(ms) <= 10
        for m in ms:
            w.ack("notifications.send", m["id"])
            got.add(m["id"])
        if not ms:
            time.sleep(0.05)
    assert ids <= got
    # nack gives a leased message back; acking twice is a no-op.
    extra = orders.publish(notification()).id
    leased: list[str] = []
    deadline = time.monotonic() + 10
    while extra not in leased and time.monotonic() < deadline:
        ms = w.receive("notifications.send", max=10, ack="explicit")
        for m in ms:
            if m["id"] == extra:
                w.nack("notifications.send", m["id"], delay=0)
            else:
                w.ack("notifications.send", m["id"])
            leased.append(m["id"])
    assert extra in leased
    deadline = time.monotonic() + 10
    settled = False
    while not settled and time.monotonic() < deadline:
        for m in w.receive("notifications.send", max=10, ack="explicit"):
            w.ack("notifications.send", m["id"])
            settled = settled or m["id"] == extra
        time.sleep(0.05)
    assert settled
    w.ack("notifications.send", extra)

    ops = HttpClient(server.http, "notify-replay-token")
    ops.connect(NOTIFY)
    with pytest.raises(DeniedError) as e:
        ops.replay("notifications.send")
    assert e.value.code == "REPLAY_DENIED" and e.value.status == 403
    ms = ops.replay("notifications.send", reason="conformance: audit resend",
                    from_sequence=ds[0].sequence, to_sequence=ds[-1].sequence)
    assert [m["id"] for m in ms] == [d.id for d in ds]


def test_http_subjects_audit_quarantine(server):
    scenario("http.subjects_audit_quarantine")
    anon = HttpClient(server.http, None)
    names = [s["name"] for s in anon.subjects()]
    assert names == sorted(names)
    assert {"payments.authorize", "notifications.send", "events.telemetry", "chat.messages"} <= set(names)
    assert anon.subject("payments.authorize")["mode"] == "requestReply"
    with pytest.raises(NotFoundError):
        anon.subject("no.such.subject")

    co = HttpClient(server.http, "checkout-token")
    co.connect(PAY)
    with pytest.raises(QuarantinedError) as e:
        co.publish(payment(data={"paymentToken": "4111111111111111"}))
    qid = e.value.quarantine_id

    auditor = HttpClient(server.http, "auditor-token")
    records = auditor.audit()
    assert records
    for a, b in zip(records, records[1:]):
        assert b["prevHash"] == a["hash"]
        assert b["seq"] == a["seq"] + 1
    assert all(len(r["hash"]) == len(hashlib.sha256().hexdigest()) for r in records)
    with pytest.raises(PigeonError) as e:
        HttpClient(server.http, "checkout-token").audit()
    assert e.value.code == "FORBIDDEN" and e.value.status == 403

    q = [r for r in auditor.quarantine() if r["id"] == qid]
    assert len(q) == 1
    assert q[0]["code"] == "RAW_PAN_DETECTED"
    assert q[0]["message"]["data"]["paymentToken"] == "[REDACTED]"
    assert "4111111111111111" not in str(q[0])
    assert auditor.quarantine_record(qid)["id"] == qid
    # Pages follow each other by the time and id of the last record.
    everything = auditor.quarantine()
    first = auditor.quarantine(max=1)[0]
    nxt = auditor.quarantine(max=1, since=first["time"], after=first["id"])
    assert len(nxt) == (1 if len(everything) > 1 else 0)
    if nxt:
        assert nxt[0]["id"] != first["id"]
        assert nxt[0]["id"] == everything[1]["id"]

    # Releasing needs the auditor role and a contract with publish: the
    # auditor has no publish grant, and the checkout service no auditor role.
    with pytest.raises(ContractError) as e:
        auditor.release(qid)
    assert e.value.code == "CONTRACT_REQUIRED"
    with pytest.raises(PigeonError) as e:
        co.release(qid)
    assert e.value.code == "FORBIDDEN"
    with pytest.raises(QuarantinedError) as e:
        co.publish(payment(data={"card": {"pan": "4111111111111111"}}))
    qid_pan = e.value.quarantine_id

    # The admin gives the checkout service the auditor role: a released
    # record goes through every gate again under its contract. The redacted
    # token passes; the forbidden field is refused again with its code.
    admin = HttpClient(server.http, "admin-token")
    checkout = "spiffe://merchant-prod/ns/checkout/sa/checkout-api"
    admin.create_account(checkout, exist_ok=True)
    admin.add_role(checkout, "auditor")
    try:
        d = co.release(qid)
        assert d.accepted
        assert d.message["data"]["paymentToken"] == "[REDACTED]"
        with pytest.raises(QuarantinedError) as e:
            co.release(qid_pan)
        assert e.value.code == "SENSITIVE_FIELD_DENIED"
        assert auditor.quarantine_record(qid)["released"] is True
        with pytest.raises(PigeonError) as e:
            co.release(qid)  # once only
        assert e.value.code == "BAD_REQUEST"
    finally:
        admin.remove_role(checkout, "auditor")


def test_http_receipts_pages(own_server):
    scenario("http.receipts_pages")
    # A server of its own: no worker of another scenario receives the
    # message, so its receipts are the three replays alone.
    server = own_server.start()
    orders = HttpClient(server.http, "orders-token")
    orders.connect(NOTIFY)
    # An id that holds "/", "?", "#" and a space: the path must carry it whole.
    mid = fresh("rcpt") + "/a b?c#d"
    d = orders.publish(notification(id=mid))
    assert d.accepted and d.id == mid
    ops = HttpClient(server.http, "notify-replay-token")
    ops.connect(NOTIFY)
    reasons = [f"conformance receipts {i}" for i in range(3)]
    for reason in reasons:
        ms = ops.replay("notifications.send", reason=reason, from_sequence=d.sequence, to_sequence=d.sequence)
        assert [m["id"] for m in ms] == [mid]

    auditor = HttpClient(server.http, "auditor-token")
    first = auditor.receipts(mid, max=2)
    assert len(first.receipts) == 2 and isinstance(first.next, str)
    second = auditor.receipts(mid, max=2, after=first.next)
    assert len(second.receipts) == 1 and second.next is None
    every = first.receipts + second.receipts
    for r in every:
        assert r["event"] == "replay.executed"
        assert r["principal"] == "spiffe://merchant-prod/ns/ops/sa/notify-replay"
        assert r["subject"] == "notifications.send" and r["seq"] == d.sequence
    assert [r["ref"] for r in every] == reasons
    assert [r["auditSeq"] for r in every] == sorted({r["auditSeq"] for r in every}), "in auditSeq order"
    # The walk of every page gives the same three.
    assert list(auditor.iter_receipts(mid, max=2)) == every

    with pytest.raises(PigeonError) as e:
        orders.receipts(mid)
    assert e.value.code == "FORBIDDEN" and e.value.status == 403
    with pytest.raises(PigeonError) as e:
        auditor.receipts(mid, after="x:1")
    assert e.value.code == "BAD_REQUEST" and e.value.status == 400


async def test_http_request(server):
    scenario("http.request")
    c = HttpClient(server.http, "checkout-token")
    await asyncio.to_thread(c.connect, PAY)
    with pytest.raises(RequestTimeoutError) as e:
        await asyncio.to_thread(c.request, payment(), timeout=0.3)
    assert e.value.code == "REQUEST_TIMEOUT" and e.value.status == 504

    gw = await connect(server.ws, "gateway-token", PAY)

    async def answer(d):
        r = d.message
        await gw.publish({
            "type": "payment.authorization.result", "subject": "payments.authorize", "intent": "authorize_payment",
            "classification": "pci", "idempotencyKey": fresh("reply"), "correlationId": r["id"],
            "data": {**r["data"], "paymentToken": "tok_reply", "approved": True},
        })

    try:
        await gw.subscribe("payments.authorize", answer, group=fresh("gw"))
        req = payment()
        reply = await within(asyncio.to_thread(c.request, req, timeout=10), 20)
        assert reply["data"]["approved"] is True
        assert reply["data"]["orderId"] == req["data"]["orderId"]
        assert reply["correlationId"].startswith("msg_")
    finally:
        await gw.close()


def test_http_errors(server):
    with pytest.raises(UnauthenticatedError) as e:
        HttpClient(server.http, "nope").connect(PAY)
    assert e.value.status == 401
    with pytest.raises(ContractError) as e:
        HttpClient(server.http, "checkout-token").publish(payment())
    assert e.value.code == "CONTRACT_REQUIRED"
    with pytest.raises(TransportError):
        HttpClient("http://127.0.0.1:9", "t", timeout=2).subjects()
