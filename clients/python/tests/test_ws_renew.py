"""Renewing a contract in place over WebSocket (the renew frame): by hand
(Session.renew) and by itself (auto_renew, the default)."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness import eventually, fresh, telemetry, within
from pigeon_client import ContractError, connect

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
