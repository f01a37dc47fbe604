"""How a ``subscribed`` answer is bound, against a real server: once, by the
session's reader as the answer arrives, and what happens when the
subscription ends between that moment and the return of the call that
asked (the server ends it, the session's close() begins, unsubscribe() or
close() during a reconnect's resubscription).

The races are driven without sleeps: the test wraps the session's reader
(``Session._dispatch``) and starts the racing call just before the reader
hands over the ``subscribed`` answer. asyncio runs ready callbacks in the
order they were scheduled, so the racing call's first step runs after the
reader bound the answer and before the waiting call resumes; each test
checks that it did.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

import pytest

from harness import eventually, fresh, telemetry
from pigeon_client import PigeonError, SessionClosedError, connect

TELEMETRY = ["events.telemetry"]
BOUND = 5.0


async def bounded(aw: Awaitable[Any], what: str, t: float = BOUND) -> Any:
    try:
        return await asyncio.wait_for(aw, t)
    except asyncio.TimeoutError:
        raise AssertionError(f"{what} did not finish within {t} s") from None


def on_subscribed(session: Any, before: Callable[[dict[str, Any]], None] | None = None,
                  after: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Wrap the session's reader: call before(frame) just before it handles a
    subscribed answer and after(frame) just after. Returns the frames the
    reader received (every op)."""
    frames: list[dict[str, Any]] = []
    orig = session._dispatch

    def dispatch(raw: Any, gen: int) -> None:
        f = json.loads(raw) if isinstance(raw, (str, bytes)) else {}
        frames.append(f)
        if f.get("op") == "subscribed" and before is not None:
            before(f)
        orig(raw, gen)
        if f.get("op") == "subscribed" and after is not None:
            after(f)

    session._dispatch = dispatch
    return frames


def record_calls(session: Any) -> list[dict[str, Any]]:
    """The frames the session sends through _call, with the generation of
    the connection they went to."""
    sent: list[dict[str, Any]] = []
    orig = session._call

    async def spy(frame: dict[str, Any], want: str, **kw: Any) -> dict[str, Any]:
        sent.append({"gen": session._gen, "frame": dict(frame)})
        return await orig(frame, want, **kw)

    session._call = spy
    return sent


async def cut(session: Any) -> None:
    """Close the session's connection as a network failure would; the
    session reconnects."""
    ws = session._ws
    assert ws is not None
    await ws.close()


async def test_each_subscribed_answer_is_bound_once_by_the_reader(server):
    """The answer to the subscribe and the one to the reconnect's
    resubscription are each bound exactly once, and by the reader, so the
    renumbering check of a resume (from below the sequence asked) runs once
    per answer, before any delivery of the new numbering is handled."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY, reconnect_timeout=20)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("bind")
    handled: list[float] = []
    in_reader = [False]
    binds: list[tuple[str, bool]] = []
    frames = on_subscribed(mon)
    dispatch = mon._dispatch

    def reader(raw: Any, gen: int) -> None:
        in_reader[0] = True
        try:
            dispatch(raw, gen)
        finally:
            in_reader[0] = False

    mon._dispatch = reader
    bind = mon._bind

    def counted(sub: Any, ans: dict[str, Any]) -> None:
        binds.append((ans.get("re"), in_reader[0]))
        bind(sub, ans)

    mon._bind = counted
    try:
        sub = await mon.subscribe("events.telemetry", lambda d: handled.append(d.data["value"]),
                                  selector=f"/kind=bind/site={site}")
        sid = sub.sid
        await sen.publish(telemetry("bind", site, 1))
        await eventually(lambda: handled == [1], BOUND, "the first message")
        await cut(mon)
        await eventually(lambda: mon.reconnects == 1 and mon.connected and sub.sid != sid, BOUND, "the resume")
        await sen.publish(telemetry("bind", site, 2))
        await eventually(lambda: 2 in handled, BOUND, "a message after the resume")
        answers = [f["re"] for f in frames if f.get("op") == "subscribed"]
        assert len(answers) == 2, f"the subscribe and the resubscription are answered: {answers}"
        assert sorted(binds) == sorted((re, True) for re in answers), \
            f"each answer bound once, by the reader: {binds} for answers {answers}"
    finally:
        await mon.close()
        await sen.close()


async def test_ended_by_the_server_as_its_answer_arrives(server):
    """The server ends the subscription right after answering (its
    unsubscribed frame read before subscribe() resumes): subscribe()
    returns it ended with the server's error, and the session keeps nothing
    of it: a reconnect does not resubscribe it."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY, reconnect_timeout=20, on_error=lambda e: None)
    site = fresh("bind")
    orig = mon._dispatch
    ended: list[str] = []

    def end_it(f: dict[str, Any]) -> None:
        if ended:
            return
        ended.append(f["sub"])
        # What the reader does with the server's next frame, before the
        # subscribe call resumes.
        orig(json.dumps({"op": "unsubscribed", "sub": f["sub"],
                         "error": {"code": "CONTRACT_REVOKED", "message": "the contract was revoked"}}), mon._gen)

    on_subscribed(mon, after=end_it)
    sent = record_calls(mon)
    try:
        sub = await bounded(mon.subscribe("events.telemetry", lambda d: None, selector=f"/kind=bind/site={site}"),
                            "subscribe()")
        assert ended == [sub.sid], "the subscription was ended as its answer arrived"
        assert sub.ended and sub.done
        with pytest.raises(PigeonError) as e:
            await bounded(sub.wait(), "wait()")
        assert e.value.code == "CONTRACT_REVOKED"
        assert sub not in mon._all_subs, "an ended subscription is not kept for resuming"
        assert sub.sid not in mon._subs
        gen = mon._gen
        await cut(mon)
        await eventually(lambda: mon.reconnects == 1 and mon.connected, BOUND, "the reconnect")
        assert not [s for s in sent if s["gen"] > gen and s["frame"].get("op") == "subscribe"], \
            "the ended subscription is not resubscribed"
        assert sub.ended
    finally:
        await mon.close()


async def test_close_begins_as_the_subscribed_answer_arrives(server):
    """close() begins after the reader bound the subscribe's answer and
    before subscribe() resumes (close() cannot know the subscription yet):
    subscribe() fails with the closed-session error, and the subscription it
    started is ended, not left running on the closed session."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY)
    site = fresh("bind")
    closing: list[asyncio.Future[None]] = []
    seen: list[tuple[bool, int, str]] = []

    async def close_in_window(sid: str) -> None:
        # Bound by the reader (its sid is known), not yet returned to the caller.
        seen.append((sid in mon._subs, len(mon._all_subs), mon._state))
        await mon.close()

    def race(f: dict[str, Any]) -> None:
        if not closing:
            closing.append(asyncio.ensure_future(close_in_window(f["sub"])))

    on_subscribed(mon, before=race)
    with pytest.raises(SessionClosedError):
        await bounded(mon.subscribe("events.telemetry", lambda d: None, selector=f"/kind=bind/site={site}"),
                      "subscribe()")
    assert seen == [(True, 0, "open")], f"close() began in the window: {seen}"
    await bounded(closing[0], "close()")
    assert mon._all_subs == [] and mon._subs == {}, "nothing of the subscription is left"
    with pytest.raises(SessionClosedError):
        await mon.subscribe("events.telemetry", lambda d: None)


@pytest.mark.parametrize("how", ["unsubscribe", "close"])
async def test_ended_as_the_resubscription_answer_arrives(server, how):
    """unsubscribe() (or the session's close()) begins after the reader bound
    the answer to a reconnect's resubscription and before the reconnect
    resumes: the server subscription that answer named is ended, once, and
    nothing more is delivered for it."""
    mon = await connect(server.ws, "monitor-token", TELEMETRY, reconnect_timeout=20, on_error=lambda e: None)
    sen = await connect(server.ws, "sensor-token", TELEMETRY)
    site = fresh("bind")
    handled: list[float] = []
    try:
        sub = await mon.subscribe("events.telemetry", lambda d: handled.append(d.data["value"]),
                                  selector=f"/kind=bind/site={site}")
        old = sub.sid
        racing: list[asyncio.Future[None]] = []
        seen: list[tuple[bool, str, bool]] = []

        async def end_in_window(sid: str) -> None:
            seen.append((sub.sid == sid, mon._state, sub._resubscribing is not None))
            if how == "unsubscribe":
                await sub.unsubscribe()
            else:
                await mon.close()

        def race(f: dict[str, Any]) -> None:
            if not racing and f["sub"] != old:
                racing.append(asyncio.ensure_future(end_in_window(f["sub"])))

        frames = on_subscribed(mon, before=race)
        sent = record_calls(mon)
        await cut(mon)
        await eventually(lambda: bool(racing), BOUND, "the resubscription's answer")
        await bounded(racing[0], how + "()")
        new = next(f["sub"] for f in frames if f.get("op") == "subscribed")
        assert seen == [(True, "negotiating", True)], f"{how}() began in the window: {seen}"
        assert sub.ended and sub.error is None
        unsubscribed = [s["frame"]["sub"] for s in sent if s["frame"].get("op") == "unsubscribe"]
        assert unsubscribed == [new], f"the resubscription's server subscription ended once: {unsubscribed}"
        assert sub not in mon._all_subs and new not in mon._subs
        await sen.publish(telemetry("bind", site, 1))
        await asyncio.sleep(0.3)  # a delivery for it would come meanwhile
        assert not [f for f in frames if f.get("op", "").startswith("deliver") and f.get("sub") == new]
        assert handled == []
    finally:
        await mon.close()
        await sen.close()
