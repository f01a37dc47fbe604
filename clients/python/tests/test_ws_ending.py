"""Ending a subscription while deliveries wait in it, against a real server:
unsubscribe() with deliveries queued or buffered, a handler that awaits its
own subscription's unsubscribe() or the session's close(), leaving an
iterator early (``async with``, ``contextlib.aclosing``, ``aclose()``), two
tasks iterating one subscription, an unsubscribe that a reconnect overtakes,
and a server subscription no subscription owns.

Every wait is bounded (asyncio.wait_for), so a hang fails the test instead
of stalling the suite. The frames the client sends through ``Session._call``
(acks, nacks, subscribes, unsubscribes) are recorded with the connection
generation they went to, and the answers they got.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Awaitable

import pytest

from harness import eventually, fresh, notification, telemetry
from pigeon_client import RetryAfter, connect

NOTIFY = ["notifications.send"]
TELEMETRY = ["events.telemetry"]

BOUND = 5.0
"""How long an ending may take before the test calls it a hang."""


async def bounded(aw: Awaitable[Any], what: str, t: float = BOUND) -> Any:
    try:
        return await asyncio.wait_for(aw, t)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what} did not finish within {t} s") from None


def record(session: Any) -> list[dict[str, Any]]:
    """Record every frame the session sends through _call: {gen, frame, answer}."""
    sent: list[dict[str, Any]] = []
    orig = session._call

    async def spy(frame: dict[str, Any], want: str, **kw: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"gen": session._gen, "frame": dict(frame)}
        sent.append(entry)
        ans = await orig(frame, want, **kw)
        entry["answer"] = ans
        return ans

    session._call = spy
    return sent


def ops(sent: list[dict[str, Any]], op: str) -> list[dict[str, Any]]:
    return [e["frame"] for e in sent if e["frame"].get("op") == op]


def acked(sent: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for f in ops(sent, "ack"):
        out += f.get("messageIds") or [f["messageId"]]
    return out


def nacked(sent: list[dict[str, Any]]) -> list[str]:
    return [f["messageId"] for f in ops(sent, "nack")]


def index_of(sent: list[dict[str, Any]], op: str) -> int:
    return next(i for i, e in enumerate(sent) if e["frame"].get("op") == op)


def last_answer_index(sent: list[dict[str, Any]]) -> int:
    return max(i for i, e in enumerate(sent) if e["frame"].get("op") in ("ack", "nack"))


def queued(sub: Any) -> list[Any]:
    """The deliveries waiting in sub's queue (not the end marker)."""
    return [x for x in list(sub._queue._queue) if hasattr(x, "attempt")]


class WorkQueue:
    """A consumer session (recorded) and a publisher on notifications.send,
    with a group and a selector of the test's own."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.tag = fresh("end")
        self.group = fresh("g")
        self.selector = f"/recipientId={self.tag}"

    async def __aenter__(self) -> "WorkQueue":
        self.consumer = await connect(self.server.ws, "notifier-token", NOTIFY,
                                      on_error=lambda e: None)
        self.orders = await connect(self.server.ws, "orders-token", NOTIFY)
        self.sent = record(self.consumer)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(self.consumer.close(), BOUND)
        await self.orders.close()

    def options(self, **over: Any) -> dict[str, Any]:
        return {"group": self.group, "selector": self.selector, **over}

    async def publish(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            m = notification()
            m["data"]["recipientId"] = self.tag
            ids.append((await self.orders.publish(m)).id)
        return ids

    async def redelivered(self, want: list[str]) -> dict[str, list[int]]:
        """Another consumer of the group: the attempts it sees of each message
        once it has seen every one of want."""
        other = await connect(self.server.ws, "notifier-token", NOTIFY)
        seen: dict[str, list[int]] = {}
        try:
            await other.subscribe("notifications.send", lambda d: seen.setdefault(d.id, []).append(d.attempt),
                                  **self.options(max_in_flight=8))
            await eventually(lambda: all(i in seen for i in want), BOUND,
                             f"the {len(want)} messages given back to the group (got {len(seen)})")
            await asyncio.sleep(0.3)  # a second copy of any would come meanwhile
            return seen
        finally:
            await other.close()


# ---------- the handler form ----------


async def test_unsubscribe_waits_for_running_handlers_and_hands_nothing_more(server):
    """unsubscribe() with two handlers running and four deliveries queued:
    it waits for the two (both acked before the unsubscribe), the handler is
    called for nothing more, and the queued go back to the group unanswered,
    attempt 1."""
    async with WorkQueue(server) as q:
        gate = asyncio.Event()
        handled: list[str] = []

        async def handler(d):
            await gate.wait()
            handled.append(d.id)

        sub = await q.consumer.subscribe("notifications.send", handler, **q.options(max_in_flight=2))
        ids = await q.publish(6)
        await eventually(lambda: len(sub._running) == 2 and sub._queue.qsize() == 4, BOUND, "two running, four queued")
        unsub = asyncio.ensure_future(sub.unsubscribe())
        await asyncio.sleep(0.2)
        assert not unsub.done(), "unsubscribe() waits for the running handlers"
        gate.set()
        await bounded(unsub, "unsubscribe()")
        assert sub.ended
        await asyncio.sleep(0.3)  # a handler called again would run meanwhile
        assert sorted(handled) == sorted(ids[:2]), "nothing handed over after unsubscribe()"
        assert sorted(acked(q.sent)) == sorted(ids[:2])
        assert index_of(q.sent, "unsubscribe") > last_answer_index(q.sent), "answered, then unsubscribed"
        seen = await q.redelivered(ids[2:])
        for i in ids[2:]:
            assert seen[i] == [1], f"{i}: given back without an attempt spent"
        assert not set(ids[:2]) & set(seen)


@pytest.mark.parametrize("after", ["returns", "raises"])
async def test_handler_awaits_its_own_unsubscribe(server, after):
    """A handler awaits its own subscription's unsubscribe() while the other
    handler (max_in_flight 2) is at work and four deliveries wait queued: it
    waits for the other handler only and returns before the end; the end
    follows the caller's return (acked; nacked when it raises), then the
    unsubscribe; the queued go back with attempt 1."""
    async with WorkQueue(server) as q:
        gate = asyncio.Event()
        events: list[tuple[Any, ...]] = []
        first: list[str] = []
        unsubscribing = asyncio.Event()
        sub: Any = None

        async def handler(d):
            if not first:
                first.append(d.id)
                await eventually(lambda: len(sub._running) == 2 and sub._queue.qsize() == 4, BOUND,
                                 "the second handler and four queued")
                unsubscribing.set()
                try:
                    await asyncio.wait_for(sub.unsubscribe(), BOUND)
                    events.append(("unsubscribed", sub.ended))
                except asyncio.TimeoutError:
                    events.append(("hang",))
                if after == "raises":
                    raise RuntimeError("the handler fails after unsubscribing")
                return
            await gate.wait()
            events.append(("other done",))

        sub = await q.consumer.subscribe("notifications.send", handler, **q.options(max_in_flight=2))
        ids = await q.publish(6)
        await bounded(unsubscribing.wait(), "the first handler to unsubscribe")
        await asyncio.sleep(0.2)
        assert events == [], "the unsubscribe waits for the other handler"
        assert queued(sub) == [], "the queued let go at once"
        gate.set()
        await bounded(sub.wait(), "the subscription's end", 2 * BOUND)
        assert ("hang",) not in events, f"unsubscribe() awaited in a handler did not finish within {BOUND} s"
        assert events == [("other done",), ("unsubscribed", False)]
        assert first == [ids[0]]
        if after == "raises":
            assert acked(q.sent) == [ids[1]]
            assert nacked(q.sent) == [ids[0]]
        else:
            assert sorted(acked(q.sent)) == sorted(ids[:2])
            assert nacked(q.sent) == []
        assert index_of(q.sent, "unsubscribe") > last_answer_index(q.sent), "both answered before the unsubscribe"
        want = ([ids[0]] if after == "raises" else []) + ids[2:]
        seen = await q.redelivered(want)
        for i in ids[2:]:
            assert seen[i] == [1]
        if after == "raises":
            assert seen[ids[0]] == [2]
        assert ids[1] not in seen


async def test_handler_awaits_the_sessions_close(server):
    """A handler awaits the session's close(): it returns without waiting
    for the handler (nor for close's timeout), nothing more is handed over,
    the handler's delivery is acked before the connection closes, and the
    queued go back with attempt 1."""
    async with WorkQueue(server) as q:
        handled: list[str] = []
        result: dict[str, Any] = {}

        async def handler(d):
            handled.append(d.id)
            if result:
                return
            t0 = time.monotonic()
            try:
                await asyncio.wait_for(q.consumer.close(timeout=10), BOUND)
                result["r"] = "closed"
            except asyncio.TimeoutError:
                result["r"] = "hang"
            result["s"] = time.monotonic() - t0
            await asyncio.sleep(0.1)  # still at work after close() returned

        sub = await q.consumer.subscribe("notifications.send", handler, **q.options())
        ids = await q.publish(4)
        await bounded(eventually(lambda: "r" in result, 2 * BOUND, "close() in the handler"), "close()", 3 * BOUND)
        assert result["r"] == "closed", f"close() awaited in a handler did not finish within {BOUND} s"
        assert result["s"] < 2, f"close() took {result['s']:.1f} s"
        await bounded(eventually(lambda: q.consumer._state == "closed", BOUND, "the session to close"), "closing")
        assert sub.ended
        assert handled == [ids[0]], "nothing handed over after close()"
        assert acked(q.sent) == [ids[0]], "its delivery acked before the connection closed"
        seen = await q.redelivered(ids[1:])
        for i in ids[1:]:
            assert seen[i] == [1]
        assert ids[0] not in seen


# ---------- the iterator form ----------


@pytest.mark.parametrize("how", ["unsubscribe", "close"])
async def test_iterator_loop_body_ends_it_with_deliveries_buffered(server, how):
    """The loop body acks the first of six buffered deliveries and awaits
    unsubscribe() (or the session's close()): that returns at once, the loop
    ends at its next step with nothing more handed over, and the five unseen
    go back to the group with attempt 1."""
    async with WorkQueue(server) as q:
        sub = await q.consumer.subscribe("notifications.send", **q.options())
        ids = await q.publish(6)
        await eventually(lambda: sub._queue.qsize() == 6, BOUND, "six buffered")
        got: list[str] = []

        async def loop() -> None:
            async for d in sub:
                got.append(d.id)
                await d.ack()
                await bounded(sub.unsubscribe() if how == "unsubscribe" else q.consumer.close(),
                              f"{how}() awaited in the loop body")

        await bounded(loop(), "the loop")
        assert got == [ids[0]], "nothing handed over after the end"
        assert sub.ended
        with pytest.raises(StopAsyncIteration):
            await bounded(sub.__anext__(), "__anext__ after the end")
        seen = await q.redelivered(ids[1:])
        for i in ids[1:]:
            assert seen[i] == [1]
        assert ids[0] not in seen


@pytest.mark.parametrize("how", ["async with + break", "async with + RetryAfter", "aclosing + break", "aclose"])
async def test_iterator_left_early_with_deliveries_buffered(server, how):
    """Leaving the loop early through ``async with sub`` (a break, or a
    RetryAfter(0) raised in the body), ``contextlib.aclosing(sub)`` or
    ``aclose()``, with six deliveries buffered: it ends at once, the one the
    loop took is nacked (delay 0 for the RetryAfter), the five unseen go back
    unanswered, and the unsubscribe follows the nack."""
    async with WorkQueue(server) as q:
        sub = await q.consumer.subscribe("notifications.send", **q.options())
        ids = await q.publish(6)
        await eventually(lambda: sub._queue.qsize() == 6, BOUND, "six buffered")
        got: list[str] = []

        async def run() -> None:
            if how == "aclose":
                got.append((await sub.__anext__()).id)
                await sub.aclose()
            elif how == "aclosing + break":
                async with contextlib.aclosing(sub):
                    async for d in sub:
                        got.append(d.id)
                        break
            elif how == "async with + break":
                async with sub:
                    async for d in sub:
                        got.append(d.id)
                        break
            else:
                with pytest.raises(RetryAfter):
                    async with sub:
                        async for d in sub:
                            got.append(d.id)
                            raise RetryAfter(0, RuntimeError("the loop failed"))

        await bounded(run(), f"leaving the loop ({how})")
        assert got == [ids[0]]
        assert sub.ended
        with pytest.raises(StopAsyncIteration):
            await bounded(sub.__anext__(), "__anext__ after the end")
        assert acked(q.sent) == []
        assert nacked(q.sent) == [ids[0]]
        nack = ops(q.sent, "nack")[0]
        if how == "async with + RetryAfter":
            assert nack["delayMs"] == 0
        assert index_of(q.sent, "unsubscribe") > index_of(q.sent, "nack"), "the nack before the unsubscribe"
        seen = await q.redelivered(ids)
        assert seen[ids[0]] == [2]
        for i in ids[1:]:
            assert seen[i] == [1], f"{i}: given back without an attempt spent"


async def test_iterator_at_most_once_left_early_drops_the_buffered(server):
    """At most once, leaving ``async with sub`` with six deliveries buffered:
    nothing is answered, nothing more handed over, the server is told, and a
    new subscription sees only what is published next."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    sent = record(mon)
    site = fresh("amo-end")
    selector = f"/kind=end/site={site}"
    try:
        sub = await mon.subscribe("events.telemetry", ack="none", selector=selector)
        for i in range(6):
            await sen.publish(telemetry("end", site, i))
        await eventually(lambda: sub._queue.qsize() == 6, BOUND, "six buffered")
        got: list[float] = []

        async def run() -> None:
            async with sub:
                async for d in sub:
                    got.append(d.data["value"])
                    break

        await bounded(run(), "leaving the loop")
        assert got == [0]
        assert sub.ended
        assert ops(sent, "ack") == [] and ops(sent, "nack") == []
        assert ops(sent, "unsubscribe"), "the server was told"
        again: list[float] = []
        await mon.subscribe("events.telemetry", lambda d: again.append(d.data["value"]), ack="none", selector=selector)
        await sen.publish(telemetry("end", site, 6))
        await eventually(lambda: len(again) >= 1, BOUND, "the next message")
        await asyncio.sleep(0.3)
        assert again == [6]
    finally:
        await mon.close()
        await sen.close()


async def test_two_tasks_iterating_end_together(server):
    """Two tasks iterate one subscription at once, each with its own
    deliveries; one loop body unsubscribes after its first: both loops end
    at their next step, and nothing buffered is handed to either after the
    unsubscribe."""
    async with WorkQueue(server) as q:
        sub = await q.consumer.subscribe("notifications.send", **q.options())
        ids = await q.publish(8)
        await eventually(lambda: sub._queue.qsize() == 8, BOUND, "eight buffered")
        got: dict[str, list[str]] = {"a": [], "b": []}
        first_taken = asyncio.Event()

        async def loop(name: str) -> None:
            async for d in sub:
                got[name].append(d.id)
                await d.ack()
                if name == "a":
                    await first_taken.wait()
                    await sub.unsubscribe()
                else:
                    first_taken.set()
                    await asyncio.sleep(0.2)  # still at work when a unsubscribes

        await bounded(asyncio.gather(loop("a"), loop("b")), "both loops")
        assert sub.ended
        taken = got["a"] + got["b"]
        assert len(got["a"]) == 1 and len(got["b"]) == 1, got
        assert sorted(taken) == sorted(ids[:2])
        rest = [i for i in ids if i not in taken]
        seen = await q.redelivered(rest)
        for i in rest:
            assert seen[i] == [1]


# ---------- a reconnect while unsubscribing; orphans ----------


async def test_unsubscribe_waiting_on_a_handler_overtaken_by_a_reconnect(server):
    """unsubscribe() waits for a running handler; meanwhile the connection
    drops and the session reconnects. The stopping subscription is not
    resumed, nothing is left subscribed on the new connection, and later
    messages of the group go to another consumer at once, attempt 1."""
    async with WorkQueue(server) as q:
        gate = asyncio.Event()
        started = asyncio.Event()

        async def handler(d):
            started.set()
            await gate.wait()

        sub = await q.consumer.subscribe("notifications.send", handler, **q.options())
        await q.publish(1)
        await bounded(started.wait(), "the handler to start")
        unsub = asyncio.ensure_future(sub.unsubscribe())
        await asyncio.sleep(0.1)
        assert not unsub.done(), "unsubscribe() waits for the running handler"
        gen = q.consumer._gen
        old = q.consumer._ws
        assert old is not None
        await old.close()  # the connection drops; the session reconnects
        await eventually(lambda: q.consumer.reconnects == 1 and q.consumer.connected, BOUND, "the reconnect")
        await asyncio.sleep(0.3)  # a resubscription would be answered by now
        gate.set()
        await bounded(unsub, "unsubscribe()")
        assert sub.ended
        subscribed = [e["answer"]["sub"] for e in q.sent
                      if e["gen"] > gen and e["frame"].get("op") == "subscribe" and "answer" in e]
        ended = [e["frame"]["sub"] for e in q.sent if e["gen"] > gen and e["frame"].get("op") == "unsubscribe"]
        for sid in subscribed:
            assert sid in ended, f"{sid} subscribed on the new connection and never unsubscribed"
        assert sub not in q.consumer._subs.values()
        later = await q.publish(4)
        seen = await q.redelivered(later)
        for i in later:
            assert seen[i] == [1], f"{i}: straight to the other consumer"


async def test_unsubscribe_while_the_resubscription_is_on_its_way(server):
    """unsubscribe() called just as the reconnect's resubscription of the
    subscription went out: it waits for that answer and ends the server
    subscription it names (no error, no orphan on the new connection)."""
    async with WorkQueue(server) as q:
        sub = await q.consumer.subscribe("notifications.send", **q.options())
        spy = q.consumer._call
        racing: list[asyncio.Future[Any]] = []

        async def race(frame: dict[str, Any], want: str, **kw: Any) -> dict[str, Any]:
            if frame.get("op") == "subscribe" and kw.get("binding") is sub and not racing:
                racing.append(asyncio.ensure_future(sub.unsubscribe()))
            return await spy(frame, want, **kw)

        q.consumer._call = race
        gen = q.consumer._gen
        old = q.consumer._ws
        assert old is not None
        await old.close()
        await eventually(lambda: bool(racing), BOUND, "the resubscription")
        await bounded(racing[0], "unsubscribe()")  # raises what it raised
        assert sub.ended
        await eventually(lambda: q.consumer.connected, BOUND, "the reconnect")
        await asyncio.sleep(0.3)
        subscribed = [e["answer"]["sub"] for e in q.sent
                      if e["gen"] > gen and e["frame"].get("op") == "subscribe" and "answer" in e]
        ended = [e["frame"]["sub"] for e in q.sent if e["gen"] > gen and e["frame"].get("op") == "unsubscribe"]
        assert subscribed, "the resubscription was answered"
        for sid in subscribed:
            assert sid in ended, f"{sid} subscribed on the new connection and never unsubscribed"
        assert sub not in q.consumer._subs.values(), "the ended subscription is not bound again"
        later = await q.publish(4)
        seen = await q.redelivered(later)
        for i in later:
            assert seen[i] == [1], f"{i}: straight to the other consumer"


async def test_a_delivery_for_an_unknown_subscription_ends_it(server):
    """A server subscription on the session's connection that no
    subscription owns (made here behind the session's back, as a left-over
    one would be): its first delivery makes the client end it, once, and the
    delivery goes back to the group at once, attempt 1."""
    async with WorkQueue(server) as q:
        ans = await q.consumer._call({"op": "subscribe", "subject": "notifications.send", "batch": True,
                                      "window": 4, "maxInFlight": 1, **q.options()}, "subscribed")
        sid = ans["sub"]
        [mid] = await q.publish(1)
        await eventually(lambda: any(f.get("sub") == sid for f in ops(q.sent, "unsubscribe")), BOUND,
                         "the client to end the unknown subscription")
        assert ops(q.sent, "ack") == [] and ops(q.sent, "nack") == []
        seen = await q.redelivered([mid])
        assert seen[mid] == [1]
        assert len([f for f in ops(q.sent, "unsubscribe") if f.get("sub") == sid]) == 1
        assert not [e for e in q.consumer.errors if e.code == "BAD_REQUEST"], list(q.consumer.errors)
