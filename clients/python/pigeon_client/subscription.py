"""Subscriptions and their deliveries (push delivery over a WebSocket session).

A subscription's handler runs on the session's event loop, at most
``max_in_flight`` at once; its return acks the delivery, an exception nacks
it. Acks that gather while an ack frame is answered leave as one frame with
``messageIds``. A pub/sub subscription remembers the position it has
settled, so a reconnect resumes from there.

An at-most-once subscription (``ack="none"``) answers nothing and keeps no
state per delivery: a reconnect resumes after the last message received.
The server does not flow-control it, so the deliveries waiting for a handler
(or for the iterator) are bounded at :data:`MAX_QUEUED`; beyond that they
are dropped, as at-most-once allows, rather than queued without limit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from .errors import PigeonError, ProtocolError, RetryAfter, SessionClosedError, error_from

if TYPE_CHECKING:
    from .ws import Session

__all__ = ["Subscription", "Delivery", "Handler", "MAX_QUEUED"]

log = logging.getLogger("pigeon_client")
_CLOSED = object()

MAX_QUEUED = 4096
"""The most deliveries of an at-most-once subscription queued on the client,
waiting for a handler or the iterator. The server sends such deliveries as
fast as the connection takes them and nothing holds them back, so beyond
this bound the client drops them (at most once allows it) rather than let
the queue grow without limit; :attr:`Subscription.dropped` counts them, and
they are reported to ``on_error`` (else the log) as ``DELIVERIES_DROPPED``
at drop counts 1, 2, 4, 8, … An acknowledged subscription is bounded by its
window, which the server keeps."""

class Delivery:
    """One message handed over by a subscription; answer it with
    :meth:`ack` or :meth:`nack` (a handler's return or exception does). On
    an at-most-once subscription (``ack="none"``) both send nothing."""

    __slots__ = ("message", "attempt", "subscription", "_gen", "settled")

    def __init__(self, message: dict[str, Any], attempt: int, subscription: "Subscription", gen: int) -> None:
        self.message = message
        self.attempt = attempt
        self.subscription = subscription
        self._gen = gen
        self.settled = False

    @property
    def data(self) -> Any:
        return self.message.get("data")

    @property
    def id(self) -> str:
        return self.message.get("id", "")

    async def ack(self) -> None:
        """Settle the delivery. Raises ``ACK_NOT_ALLOWED`` when it no longer
        waits (its ack wait passed), ``SESSION_CLOSED`` when its connection is gone."""
        await self.subscription._settle(self, True, None)

    async def nack(self, delay: float | None = None) -> None:
        """Give the delivery back, to come again after ``delay`` seconds
        (default: the subject's backoff)."""
        await self.subscription._settle(self, False, delay)

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, attempt={self.attempt})"


Handler = Callable[[Delivery], Any]


class Subscription:
    """A running subscription. Without a handler it is an async iterator of
    :class:`Delivery`; it ends (``StopAsyncIteration`` after
    :meth:`unsubscribe`, the error otherwise) when the server ends it.

    At most once (``ack="none"``), at most :data:`MAX_QUEUED` deliveries wait
    for the handler or the iterator; :attr:`dropped` counts those dropped
    beyond."""

    def __init__(self, session: "Session", subject: str, handler: Handler | None, opts: dict[str, Any]) -> None:
        self.session = session
        self.subject = subject
        self.handler = handler
        self.options = opts
        self.sid = ""
        self.error: PigeonError | None = None
        self._gen = 0
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = asyncio.get_running_loop().create_future()
        self._workers: list[asyncio.Task[None]] = []
        self._running: set[asyncio.Task[Any]] = set()
        self._ackq: list[tuple[str, int, asyncio.Future[None]]] = []
        self._ack_task: asyncio.Task[None] | None = None
        # Resumption: the sequences handed and not yet settled, the highest
        # settled (at most once: the highest received, and no set).
        self._outstanding: set[int] = set()
        self._settled_high = 0
        self._at_most_once = opts.get("ack") == "none"
        self._dropped = 0
        self.ended = False

    # --- consumer side ---

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        if self.handler is not None:
            raise TypeError("a subscription with a handler is not iterable")
        while True:
            item = await self._queue.get()
            if item is _CLOSED:
                self._queue.put_nowait(_CLOSED)
                if self.error is not None:
                    raise self.error
                raise StopAsyncIteration
            if item._gen == self._gen or self._at_most_once:
                return item
            # Handed over on a connection since lost: it comes again on this one
            # (at most once it does not: it was done when the server sent it).

    async def wait(self) -> None:
        """Wait until the subscription ends; raise the error it ended with."""
        await asyncio.shield(self._done)
        if self.error is not None:
            raise self.error

    @property
    def done(self) -> bool:
        return self._done.done()

    @property
    def dropped(self) -> int:
        """How many at-most-once deliveries were dropped because
        :data:`MAX_QUEUED` were already waiting (0 for an acknowledged
        subscription)."""
        return self._dropped

    async def unsubscribe(self) -> None:
        """End the subscription; deliveries not yet answered go back at once."""
        if self.ended:
            return
        try:
            if self.sid:
                await self.session._call({"op": "unsubscribe", "sub": self.sid}, "ok")
        finally:
            self._end(None)

    # --- internals ---

    def _subscribe_frame(self, resume: bool = False) -> dict[str, Any]:
        f: dict[str, Any] = {"op": "subscribe", "subject": self.subject, "batch": True}
        o = self.options
        for k in ("selector", "filter", "group", "ack"):
            if o.get(k) is not None:
                f[k] = o[k]
        mif = o.get("max_in_flight") or 1
        f["maxInFlight"] = mif
        f["window"] = o.get("window") or max(256, mif)
        start = o.get("start")
        if resume and o.get("_pubsub", True):
            # Resume: from the first delivery still unanswered, else after
            # the last one settled.
            if self._outstanding:
                start = {"sequence": min(self._outstanding)}
            elif self._settled_high:
                start = {"sequence": self._settled_high + 1}
        if isinstance(start, int) and not isinstance(start, bool):
            start = {"sequence": start}
        if start is not None:
            f["start"] = start
        return f

    def _push(self, message: Any, attempt: Any, gen: int) -> None:
        if self.ended or not isinstance(message, dict):
            if not isinstance(message, dict):
                self.session._report(ProtocolError("BAD_REQUEST", "deliver without a message object"))
            return
        seq = message.get("sequence")
        if self._at_most_once:
            # Nothing to settle: a reconnect resumes after the last message
            # received, dropped ones included (they were done when sent).
            if isinstance(seq, int):
                self._settled_high = max(self._settled_high, seq)
            if self._queue.qsize() >= MAX_QUEUED:
                self._drop()
                return
        elif isinstance(seq, int):
            self._outstanding.add(seq)
        self._queue.put_nowait(Delivery(message, attempt if isinstance(attempt, int) else 0, self, gen))

    def _drop(self) -> None:
        self._dropped += 1
        n = self._dropped
        if n & (n - 1) == 0:  # 1, 2, 4, …: a slow handler does not flood on_error or the log
            self.session._report(PigeonError(
                "DELIVERIES_DROPPED",
                f"at-most-once deliveries of {self.subject} dropped: the handler does not keep up "
                f"({n} so far; at most {MAX_QUEUED} wait queued)",
                details={"subject": self.subject, "dropped": n, "maxQueued": MAX_QUEUED},
            ))

    def _start_workers(self) -> None:
        if self.handler is None:
            return
        n = self.options.get("max_in_flight") or 1
        for _ in range(n):
            t = asyncio.get_running_loop().create_task(self._work())
            self._workers.append(t)

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            if item is _CLOSED:
                self._queue.put_nowait(_CLOSED)
                return
            if item._gen != self._gen and not self._at_most_once:
                continue  # handed over on a connection since lost: it comes again
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            try:
                await self._handle(item)
            finally:
                self._running.discard(task)

    async def _handle(self, d: Delivery) -> None:
        assert self.handler is not None
        try:
            r = self.handler(d)
            if inspect.isawaitable(r):
                await r
        except asyncio.CancelledError:
            raise
        except RetryAfter as e:
            await self._answer(d, False, e.delay)
            return
        except Exception as e:  # a failing handler nacks this delivery only
            log.debug("pigeon: handler failed on %s: %r", d.id, e)
            await self._answer(d, False, None)
            return
        await self._answer(d, True, None)

    async def _answer(self, d: Delivery, ok: bool, delay: float | None) -> None:
        if d.settled:
            return
        if self.options.get("ack") == "none":  # at-most-once: nothing is answered
            d.settled = True
            return
        try:
            await self._settle(d, ok, delay)
        except PigeonError as e:
            log.debug("pigeon: %s of %s failed: %r", "ack" if ok else "nack", d.id, e)

    async def _settle(self, d: Delivery, ok: bool, delay: float | None) -> None:
        if d.settled:
            return
        d.settled = True
        if self._at_most_once:
            return  # nothing is answered, nothing comes again
        if d._gen != self._gen:
            raise SessionClosedError("SESSION_CLOSED", "the delivery's connection was lost; it comes again")
        seq = d.message.get("sequence")
        if isinstance(seq, int) and ok:
            self._outstanding.discard(seq)
            self._settled_high = max(self._settled_high, seq)
        if not ok:
            f: dict[str, Any] = {"op": "nack", "sub": self.sid, "messageId": d.id}
            if delay is not None:
                f["delayMs"] = max(0, int(delay * 1000))
            await self.session._call(f, "ok")
            return
        fut = asyncio.get_running_loop().create_future()
        self._ackq.append((d.id, d._gen, fut))
        if self._ack_task is None:
            self._ack_task = asyncio.get_running_loop().create_task(self._flush_acks())
        await fut

    async def _flush_acks(self) -> None:
        try:
            while self._ackq:
                items, self._ackq = self._ackq, []
                ids = [i for i, g, _ in items if g == self._gen]
                stale = [f for _, g, f in items if g != self._gen]
                for f in stale:
                    if not f.done():
                        f.set_exception(SessionClosedError("SESSION_CLOSED", "the delivery's connection was lost"))
                if not ids:
                    continue
                frame: dict[str, Any] = {"op": "ack", "sub": self.sid}
                if len(ids) == 1:
                    frame["messageId"] = ids[0]
                else:
                    frame["messageIds"] = ids
                try:
                    ans = await self.session._call(frame, "ok")
                except PigeonError as e:
                    for _, g, f in items:
                        if not f.done():
                            f.set_exception(e)
                    continue
                not_pending = set(ans.get("notPending") or [])
                for mid, _, f in items:
                    if f.done():
                        continue
                    if mid in not_pending:
                        f.set_exception(
                            error_from({"code": "ACK_NOT_ALLOWED", "message": "no delivery of that message is waiting"})
                        )
                    else:
                        f.set_result(None)
        finally:
            self._ack_task = None

    def _end(self, err: PigeonError | None) -> None:
        if self.ended:
            return
        self.ended = True
        self.error = err
        self.session._forget(self)
        self._queue.put_nowait(_CLOSED)
        if not self._done.done():
            self._done.set_result(None)
        if err is not None:
            self.session._report(err)

    async def _drain(self, timeout: float) -> None:
        """Let running handlers and their acks finish (close)."""
        while not self._queue.empty():  # drop what was not started: it comes again
            self._queue.get_nowait()
        self._queue.put_nowait(_CLOSED)
        pending = list(self._running) + ([self._ack_task] if self._ack_task else [])
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        for w in self._workers:
            w.cancel()

    def __repr__(self) -> str:
        return f"Subscription(subject={self.subject!r}, sid={self.sid!r}, ended={self.ended})"
