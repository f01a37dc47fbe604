"""Renewing a contract in place over WebSocket (the renew frame): by hand
(Session.renew) and by itself (auto_renew, the default)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest

from harness import eventually, fresh, telemetry, within
from pigeon_client import ContractError, HttpClient, PigeonError, connect
from pigeon_client.errors import new_error

TELEMETRY = ["events.telemetry"]
TTL = 0.6  # seconds: a contract's lifetime in these tests


def _site() -> str:
    return fresh("renew").replace("-", "")


def _renew_tasks(*sessions) -> list[asyncio.Task]:
    """The renewal tasks of ``sessions`` still pending (the suite shares one
    event loop: other tests' tasks are not counted)."""
    out = []
    for t in asyncio.all_tasks():
        coro = t.get_coro()
        if getattr(coro, "__name__", "") != "_renew_loop" or t.done():
            continue
        frame = getattr(coro, "cr_frame", None)
        if frame is not None and any(frame.f_locals.get("self") is s for s in sessions):
            out.append(t)
    return out


async def test_auto_renew_keeps_the_contract_and_the_subscription(server):
    """With a contract of 0.6 s, a session publishes and a subscription
    receives for more than three lifetimes, under the same contract ids:
    each contract was renewed in place (its expiry moved later), neither
    renegotiated nor reconnected."""
    site = _site()
    mon = await connect(server.ws, "monitor-token", TELEMETRY, ttl=TTL)
    sen = await connect(server.ws, "sensor-token", TELEMETRY, ttl=TTL)
    got: list[int] = []
    try:
        mon_c0, sen_c0 = mon.contract, sen.contract
        sub = await mon.subscribe("events.telemetry", lambda d: got.append(d.data["value"]),
                                  selector=f"/kind=renew/site={site}")
        sent: list[int] = []
        start = time.monotonic()
        while time.monotonic() - start < 3.3 * TTL:
            d = await within(sen.publish(telemetry("renew", site, len(sent))), 5)
            assert d.accepted
            sent.append(len(sent))
            await asyncio.sleep(0.05)
        # The last message went out after three lifetimes: it still arrives.
        await eventually(lambda: len(got) >= len(sent), timeout=5, what="every message")
        assert got == sent
        assert not sub.ended
        for s, c0 in ((mon, mon_c0), (sen, sen_c0)):
            assert s.contract.id == c0.id
            assert s.contract.expires_at > c0.expires_at
            assert s.reconnects == 0
        # Expiries are read from the server: the renewed ones still lie ahead.
        assert (await within(sen.publish(telemetry("renew", site, -1)), 5)).accepted
    finally:
        await mon.close()
        await sen.close()
    assert not _renew_tasks(mon, sen)


async def test_without_auto_renew_the_contract_expires(server):
    """auto_renew=False: after the first lifetime the contract has expired;
    a publish fails and the subscription ends with CONTRACT_EXPIRED."""
    site = _site()
    errors: list[Exception] = []
    mon = await connect(server.ws, "monitor-token", TELEMETRY, ttl=TTL, auto_renew=False, on_error=errors.append)
    sen = await connect(server.ws, "sensor-token", TELEMETRY, ttl=TTL, auto_renew=False)
    got: list[int] = []
    try:
        assert not _renew_tasks(mon, sen)
        c0 = sen.contract
        sub = await mon.subscribe("events.telemetry", lambda d: got.append(d.data["value"]),
                                  selector=f"/kind=renew/site={site}")
        assert (await within(sen.publish(telemetry("renew", site, 0)), 5)).accepted
        await eventually(lambda: got == [0], timeout=5, what="the first message")
        await asyncio.sleep(TTL * 1.5)
        with pytest.raises(ContractError) as e:
            await within(sen.publish(telemetry("renew", site, 1)), 5)
        assert e.value.code == "CONTRACT_EXPIRED"
        assert sen.contract is c0  # nothing renewed behind the caller's back
        with pytest.raises(ContractError) as e:
            await within(sub.wait(), 10)
        assert e.value.code == "CONTRACT_EXPIRED"
        assert got == [0]
    finally:
        await mon.close()
        await sen.close()


async def test_explicit_renew_keeps_the_id_and_moves_the_expiry(server):
    site = _site()
    mon = await connect(server.ws, "monitor-token", TELEMETRY, ttl=5, auto_renew=False)
    sen = await connect(server.ws, "sensor-token", TELEMETRY, ttl=5, auto_renew=False)
    got: list[int] = []
    try:
        c0 = mon.contract
        sub = await mon.subscribe("events.telemetry", lambda d: got.append(d.data["value"]),
                                  selector=f"/kind=renew/site={site}")
        await asyncio.sleep(0.3)
        c1 = await within(mon.renew(), 5)
        assert c1.id == c0.id
        assert c1.expires_at > c0.expires_at
        assert mon.contract is c1
        # A longer ttl moves it further, and becomes the session's.
        c2 = await within(mon.renew(ttl=30), 5)
        assert c2.id == c0.id and mon.ttl == 30
        assert (c2.expires_at - c1.expires_at).total_seconds() > 20
        # The subscription went on through both renewals.
        assert not sub.ended
        assert (await within(sen.publish(telemetry("renew", site, 7)), 5)).accepted
        await eventually(lambda: got == [7], timeout=5, what="the message after the renewals")
    finally:
        await mon.close()
        await sen.close()


async def test_auto_renew_task_ends_with_close(server):
    s = await connect(server.ws, "sensor-token", TELEMETRY, ttl=30)
    assert len(_renew_tasks(s)) == 1
    await asyncio.sleep(0.1)  # the task is waiting for its time (27 s on)
    assert len(_renew_tasks(s)) == 1
    await s.close()
    assert not _renew_tasks(s)


async def test_a_reconnect_renews_its_new_contract(own_server):
    """A reconnect brings a new contract: renewal starts again from it (the
    old one's schedule is dropped), and the session goes on past its
    lifetime."""
    own_server.start()
    s = await connect(own_server.ws, "sensor-token", TELEMETRY, ttl=TTL, reconnect_timeout=30)
    try:
        first = s.contract
        before = s._renew_task
        own_server.kill()
        await eventually(lambda: not s.connected, what="the lost connection")
        own_server.start()
        await within(s.wait_connected(20), 25)
        c0 = s.contract
        assert c0.id != first.id
        await asyncio.sleep(0.05)
        assert before.done()
        assert len(_renew_tasks(s)) == 1
        start = time.monotonic()
        while time.monotonic() - start < 2.5 * TTL:
            assert (await within(s.publish(telemetry("renew", "reconnect", 1)), 5)).accepted
            await asyncio.sleep(0.05)
        assert s.contract.id == c0.id and s.contract.expires_at > c0.expires_at
    finally:
        await s.close()
    assert not _renew_tasks(s)


def _past_expiry(s, margin: float) -> bool:
    """Whether the contract in force expired more than ``margin`` s ago."""
    exp = s.contract.expires_at
    return (dt.datetime.now(dt.timezone.utc) - exp).total_seconds() > margin


async def test_a_revoked_contract_is_not_renewed_again(own_server):
    """A renewal refused for good (the contract was revoked) is not tried
    again: the server sees one renew of the contract after the revocation
    (one contract.denied record, not one every few tenths of a second until
    it expires), and on_error hears of it once, told that renewal stopped.
    A negotiate brings a new contract, renewed in turn. (A server of the
    test's own: its audit log is short enough to read whole.)"""
    own_server.start()
    errors: list[PigeonError] = []
    s = await connect(own_server.ws, "sensor-token", TELEMETRY, ttl=2.0, on_error=errors.append)
    try:
        cid = s.contract.id
        # The first renewal is due a second from now (half of the life).
        await asyncio.to_thread(HttpClient(own_server.http, "sensor-token").revoke, cid)
        # Until the contract expires, a renewal tried again would go out
        # every 0.1 to 0.25 s.
        await eventually(lambda: _past_expiry(s, 0.5), timeout=10, what="the revoked contract's expiry")
        records = await asyncio.to_thread(HttpClient(own_server.http, "auditor-token").audit)
        denied = [r for r in records if r["type"] == "contract.denied" and r.get("contractId") == cid]
        assert [r["code"] for r in denied] == ["CONTRACT_REVOKED"], denied
        reported = [e for e in errors if cid in e.message]
        assert len(reported) == 1, reported
        assert isinstance(reported[0], ContractError) and reported[0].code == "CONTRACT_REVOKED"
        assert "renewal stopped" in reported[0].message
        assert not _renew_tasks(s)
        c = await within(s.negotiate(), 5)
        assert c.id != cid
        assert len(_renew_tasks(s)) == 1
    finally:
        await s.close()
    assert not _renew_tasks(s)


async def test_a_transient_renewal_failure_is_tried_again(server):
    """A renewal that fails with a code that may pass later (RATE_LIMITED,
    made up here for the first renew frame) is reported to on_error and
    tried again: the contract is renewed in place."""
    errors: list[PigeonError] = []
    s = await connect(server.ws, "sensor-token", TELEMETRY, ttl=2.0, on_error=errors.append)
    orig, renews = s._call, []

    async def flaky(frame: dict[str, Any], want: str, **kw: Any) -> dict[str, Any]:
        if frame.get("op") == "renew":
            renews.append(frame)
            if len(renews) == 1:
                raise new_error("RATE_LIMITED", "negotiation rate limit exceeded for this principal (renewals count)")
        return await orig(frame, want, **kw)

    s._call = flaky
    try:
        c0 = s.contract
        await eventually(lambda: s.contract.expires_at > c0.expires_at, timeout=10, what="the renewal tried again")
        assert s.contract.id == c0.id and len(renews) == 2
        assert [e.code for e in errors] == ["RATE_LIMITED"]
        assert "trying again" in errors[0].message
        assert len(_renew_tasks(s)) == 1
    finally:
        await s.close()
    assert not _renew_tasks(s)
