"""Subscriptions and their deliveries (push delivery over a WebSocket session).

A subscription's handler runs on the session's event loop, at most
``max_in_flight`` at once; its return acks the delivery, an exception nacks
it. Acks that gather while an ack frame is answered leave as one frame with
``messageIds``.

Resuming after a lost connection (an acknowledged subscription on a
pub/sub subject): the server keeps a cursor per subscription and redelivers
a nacked or unanswered delivery only on that same subscription, so whatever
the resumed subscription does not ask for again is never delivered again.
The subscription therefore keeps the set of sequences it was handed and has
not yet handled successfully. A handler's success (the ack) removes its
sequence and raises the highest-acked mark, once the ack is queued: an ack
the server refuses or never answers does not put it back (the handler
succeeded; kept, the lowest sequence would make the resume deliver again
every message after it, and a redelivery the server sends while the
connection lives adds it again); a failure (nack) keeps it in the
set (while the connection lives the server redelivers it, and a redelivery
that succeeds removes it); so does a success on a connection since lost
(it cannot be acked). On resume it starts from the lowest sequence in the
set if any, else after the highest acked, else at the ``from`` of its latest
``subscribed`` answer (the first sequence the server subscription delivers:
where its start stood when it subscribed, so that what was published while
the connection was down is not skipped), else at its original start (a
server that names no ``from``); then the set is cleared (the resumed
subscription's deliveries add again, and its ``subscribed`` answer names the
next ``from``). A ``from`` below the sequence a resume asked for means the
subject was numbered anew (the broker lost its store): the highest acked is
forgotten, so the next resume continues in the new numbering rather than ask
for the old position again. The set holds at most :data:`MAX_OUTSTANDING` sequences:
when full, the lowest quarter is forgotten.
Deliveries still queued in the client from the lost connection (for a
handler or the iterator) are dropped, not run: the resumed subscription
delivers them again. A duplicate after a resume is allowed (at least once);
a skipped one is not. A work-queue subscription resumes without a position
(its group keeps its place; its answer names no ``from``).

A delivery whose message ``sequence`` is present and not an integer of 1 to
2^64-1 (a float, a string, a bool, 0, a negative, one beyond 64 bits), or
whose ``hops`` is no broker's, is refused, as the TypeScript client refuses
it: not handed over, not answered (an answer that cannot name its sequence
could settle a newer message published under its id; the server's ack wait
gives it back), reported (``ProtocolError``, to ``on_error``), and nothing
of it moves the resume position. An ack or a nack names the delivery's
sequence, up to 2^64-1; a delivery numbered 2^64-1 is never resumed from
(nothing after it can be asked for).

An at-most-once subscription (``ack="none"``) answers nothing and keeps no
state per delivery: a reconnect resumes after the last message received,
else at ``from``, else at its original start.
The server does not flow-control it, so the deliveries waiting for a handler
(or for the iterator) are bounded at :data:`MAX_QUEUED` and at
:data:`MAX_QUEUED_BYTES` of their data; beyond either they are dropped, as
at-most-once allows, rather than queued without limit.

Ending: :meth:`Subscription.unsubscribe` stops deliveries at once (those
not yet handed over go back to the server unanswered, without an attempt
spent; at most once they are dropped), waits for the running handlers and
their acks, never for the handler that calls it, and then ends the
subscription on the server (see its docstring).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import json
import numbers
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from .errors import (
    PigeonError,
    ProtocolError,
    RetryAfter,
    SessionClosedError,
    TransportError,
    error_from,
    escaping_logger,
)
from .model import (
    _MAX_WIRE_SEQUENCE, MAX_ATTEMPT, ReceivedMessage, _attempt_held, _hops, _unheld_attempt, _unheld_message,
)

if TYPE_CHECKING:
    from .ws import Session

__all__ = ["Subscription", "Delivery", "Handler", "MAX_QUEUED", "MAX_QUEUED_BYTES"]

log = escaping_logger("pigeon_client")  # server text (ids) logged with control characters escaped
_CLOSED = object()


class _Slot:
    """One handler call of a subscription, while it runs."""

    __slots__ = ("sub", "done")

    def __init__(self, sub: "Subscription") -> None:
        self.sub = sub
        self.done = False


_HANDLING: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("pigeon_handling", default=None)
"""The handler call the current context runs in (set by the worker around
the call; tasks the handler starts copy it): an unsubscribe() or close()
made from a handler does not wait for that handler."""


def _caller_slot() -> _Slot | None:
    """The handler call, still running, that the caller runs in, if any."""
    s = _HANDLING.get()
    return s if s is not None and not s.done else None

MAX_QUEUED = 4096
"""The most deliveries of an at-most-once subscription queued on the client,
waiting for a handler or the iterator. The server sends such deliveries as
fast as the connection takes them and nothing holds them back, so beyond
this bound, or beyond :data:`MAX_QUEUED_BYTES` of their data, the client
drops them (at most once allows it) rather than let the queue grow without
limit; :attr:`Subscription.dropped` counts them, and they are reported to
``on_error`` (else the log) as ``DELIVERIES_DROPPED`` at drop counts 1, 2,
4, 8, … An acknowledged subscription is bounded by its window: deliveries
beyond it waiting in the client (a server that ignores the window) are left
unanswered, for the server's ack wait to give back."""

MAX_QUEUED_BYTES = 64 << 20
"""The most data, in bytes, of the deliveries of an at-most-once
subscription queued on the client (64 MiB): a delivery that would take the
queued data past it is dropped as one beyond :data:`MAX_QUEUED` is, so that
a stuck handler cannot make the client hold gigabytes of large messages.
One delivery of any size is queued when none is. A delivery's size is the
UTF-8 length of its data as JSON text: the client keeps no frame text, so
it is the data encoded again (compact, non-ASCII as UTF-8), which may differ
by a few bytes from the text the server sent (escapes, number forms). It is
measured only for a delivery that waits behind another."""

MAX_OUTSTANDING = 1 << 16
"""The most sequences an acknowledged subscription remembers to resume from
(see the module's docstring), as in the Go client: when the set holds this
many, the lowest quarter is forgotten before another is added. Only
failures the server stopped redelivering (exhausted) stay that long, and
those are in its quarantine or audit already; without the bound, a handler
that keeps failing on such a subject would grow the set for as long as the
client runs."""

MAX_RETRY_DELAY = 12 * 60 * 60
"""The longest redelivery delay the broker takes, in seconds (12 hours): a
handler's longer :class:`RetryAfter` waits this long, as it does in the Go
client."""


def _retry_delay(exc: BaseException | None) -> float | None:
    """The delay a :class:`RetryAfter` asks for, at most MAX_RETRY_DELAY. One
    that is not a number of seconds (NaN, a string...) is no delay: the
    nack takes the subject's backoff (the handler failed all the same)."""
    if isinstance(exc, RetryAfter) and exc.delay is not None:
        try:
            _delay_ms(exc.delay)
        except (TypeError, ValueError):
            log.warning("pigeon: RetryAfter(%r) is not a delay in seconds; the subject's backoff applies", exc.delay)
            return None
        return min(exc.delay, MAX_RETRY_DELAY)
    return None


def _delay_ms(delay: Any) -> int | None:
    """``delayMs`` of a nack ``delay`` seconds long: None stays None (the
    subject's backoff), below 0 is 0, beyond :data:`MAX_RETRY_DELAY` (infinity
    included) is that. NaN is ``ValueError``, anything but a number (a bool,
    a string) ``TypeError``: raised before anything is sent or settled."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, numbers.Real):
        raise TypeError(f"a delay is a number of seconds, not {type(delay).__name__}")
    if delay != delay:
        raise ValueError("a delay of NaN seconds")
    return int(max(0, min(delay, MAX_RETRY_DELAY)) * 1000)


_MAX_SEQUENCE = (1 << 64) - 2
"""The highest sequence the client keeps: the wire's sequences are unsigned
64-bit (the Go client refuses a frame with another), and a resume asks for
the one after the highest acked, which must still be one."""


def _sequence(v: Any) -> int | None:
    """A sequence to resume from, or None for what cannot be one (a bool,
    which Python takes for an int; 0, below, or beyond 64 bits; a float, a
    string; the wire's highest, 2^64-1, after which nothing can be asked
    for): kept, it would go back on the wire in a resume's ``start``, which
    the server refuses, ending the subscription."""
    return v if type(v) is int and 0 < v <= _MAX_SEQUENCE else None


def _wire_sequence(v: Any) -> int | None:
    """The sequence an answer (an ack, a nack) names for a message numbered
    ``v``: ``v`` when it is one the wire holds (an integer of 1 to 2^64-1,
    not a bool), else None (none named)."""
    return v if type(v) is int and 0 < v <= _MAX_WIRE_SEQUENCE else None


def _run_key(d: "Delivery") -> tuple[str, int | None]:
    """The message a delivery is of, for running its handler once at a
    time: its id and sequence. A message id names one message at a time
    only: a later message published under it once retention trimmed the
    first (a higher sequence) is another, whose handler need not wait for
    the old one's run (each answer names its own sequence, and the server
    settles the two apart)."""
    return d._id, d._sequence


def _not_pending(ans: Any) -> Callable[[str, int], bool]:
    """Whether an ack frame's ``ok`` answer ``ans`` refused the answer of
    message id at sequence seq (0: none sent). ``notPending`` names the
    ids refused; when ``notPendingSequences`` goes in step with it, each
    refused answer is an id at a sequence (0: the answer named none), so
    one id answered at two sequences, one settled, is told apart.
    Without it (protocol v1), every answer of a listed id was refused.
    Ids only: anything else (an id that is a list, a number for a list)
    settles nothing as refused, rather than raise and leave every ack of
    the batch waiting for good."""
    np_ = ans.get("notPending") if isinstance(ans, dict) else None
    ids = np_ if isinstance(np_, list) else []
    nps = ans.get("notPendingSequences") if isinstance(ans, dict) else None
    if isinstance(nps, list) and len(nps) == len(ids):
        pairs = {(i, q) for i, q in zip(ids, nps)
                 if isinstance(i, str) and type(q) is int and 0 <= q < (1 << 64)}
        return lambda mid, seq: (mid, seq) in pairs
    names = {i for i in ids if isinstance(i, str)}
    return lambda mid, _seq: mid in names


def _settle_body(message: Any, sequence: int | None = None, attempt: int | None = None) -> dict[str, Any]:
    """The ``messageId``, ``sequence`` and ``attempt`` of a pull ack or
    nack: of ``message``, a message received (a mapping: its ``id``, and
    its ``sequence`` when it is one; a :class:`~pigeon_client.model.ReceivedMessage`
    also its ``attempt`` when it has one) or its id; ``sequence`` and
    ``attempt``, when given, are sent instead (0: none). With the sequence,
    a late answer never settles a newer message published under the id
    once retention trimmed the one received; with the attempt, never the
    lease another consumer of the principal took once the one received ran
    out: the server refuses it (``ACK_NOT_ALLOWED``). ``TypeError`` for a
    message without a string id or a sequence or attempt that is not an
    integer, ``ValueError`` for one out of range: raised before anything is
    sent."""
    if isinstance(message, str):
        mid, seq = message, None
    elif isinstance(message, Mapping):
        mid, seq = message.get("id"), _wire_sequence(message.get("sequence"))
    else:
        raise TypeError(f"an ack or a nack names a message id or a message received, not {type(message).__name__}")
    if not isinstance(mid, str):
        raise TypeError("the message has no id to answer")
    if sequence is not None:
        if isinstance(sequence, bool) or not isinstance(sequence, int):
            raise TypeError(f"a sequence is an integer, not {type(sequence).__name__}")
        if not 0 <= sequence <= _MAX_WIRE_SEQUENCE:
            raise ValueError(f"a sequence of {sequence} is out of range")
        seq = sequence or None
    att = attempt if attempt is not None else message.attempt if isinstance(message, ReceivedMessage) else 0
    if isinstance(att, bool) or not isinstance(att, int):
        raise TypeError(f"an attempt is an integer, not {type(att).__name__}")
    if not 0 <= att <= MAX_ATTEMPT:
        raise ValueError(f"an attempt of {att} is out of range")
    body: dict[str, Any] = {"messageId": mid}
    if seq is not None:
        body["sequence"] = seq
    if att:
        body["attempt"] = att
    return body


def _ack_cost(mid: str) -> int:
    """At most what an ack of message id ``mid`` adds to an ack frame, in
    bytes: the id as the frame holds it (a printable ASCII character one
    byte, a quote or a backslash two, any other character at most six), its
    quotes and comma, and its sequence in ``sequences``."""
    plain = mid.isascii() and mid.isprintable() and '"' not in mid and "\\" not in mid
    return (len(mid) if plain else 6 * len(mid)) + 32


_ACK_FRAME_BASE = 256
"""What an ack frame takes besides its sub and ids: its op, id and field names."""


_DATA_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _data_size(message: dict[str, Any]) -> int:
    """The size of a delivery counted against :data:`MAX_QUEUED_BYTES`."""
    if "data" not in message:
        return 0
    t = _DATA_JSON(message["data"])
    return len(t) if t.isascii() else len(t.encode("utf-8", "surrogatepass"))


class Delivery:
    """One message handed over by a subscription; answer it with
    :meth:`ack` or :meth:`nack` (a handler's return or exception does). On
    an at-most-once subscription (``ack="none"``) both send nothing.

    The answer names the message id and sequence delivered, taken when the
    delivery is handed over: a handler (or a middleware) that edits
    :attr:`message` changes neither what :attr:`id` says nor which message
    its answer settles."""

    __slots__ = ("message", "attempt", "subscription", "_gen", "settled", "_size", "_id", "_sequence")

    def __init__(self, message: dict[str, Any], attempt: int, subscription: "Subscription", gen: int) -> None:
        self.message = message
        self.attempt = attempt
        # What the answer names (see _settle): the subscription hands over
        # only a message whose id is a non-empty string.
        self._id: str = message.get("id", "")
        self._sequence = _wire_sequence(message.get("sequence"))
        self.subscription = subscription
        self._gen = gen
        self.settled = False
        self._size = 0  # counted against MAX_QUEUED_BYTES while queued

    @property
    def data(self) -> Any:
        return self.message.get("data")

    @property
    def id(self) -> str:
        """The id of the message delivered, which its answer names."""
        return self._id

    @property
    def sequence(self) -> int:
        """The sequence of the message delivered, which its answer names: 1
        to 2^64-1 (a delivery without one, or with 0, is refused and never
        handed over). Taken when the delivery is handed over, as :attr:`id`
        is: a handler that edits :attr:`message` does not change it."""
        return self._sequence or 0

    @property
    def hops(self) -> int:
        """How many WebAssembly programs deep the message is (its ``hops``,
        set by the broker; see :mod:`pigeon_client.model`): 0 when absent.
        A delivery whose ``hops`` is not an integer of 0 to 2^32-1, or whose
        ``sequence`` is present and not an integer of 1 to 2^64-1, is never
        handed over (its ``ProtocolError`` goes to ``on_error``)."""
        return _hops(self.message.get("hops"))

    async def ack(self) -> None:
        """Settle the delivery. Raises ``ACK_NOT_ALLOWED`` when it no longer
        waits (its ack wait passed), ``SESSION_CLOSED`` when its connection is gone."""
        await self.subscription._settle(self, True, None)

    async def nack(self, delay: float | None = None) -> None:
        """Give the delivery back, to come again after ``delay`` seconds
        (default: the subject's backoff; at most 12 hours, the broker's
        bound). NaN is ``ValueError`` and anything but a number
        ``TypeError``, raised with the delivery still unanswered."""
        await self.subscription._settle(self, False, delay)

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, sequence={self.sequence}, attempt={self.attempt})"


Handler = Callable[[Delivery], Any]


class Subscription:
    """A running subscription. Without a handler it is an async iterator of
    :class:`Delivery`; it ends (``StopAsyncIteration`` once
    :meth:`unsubscribe` or the session's close began, the error otherwise)
    when the server ends it. Several tasks may iterate it at once.

    Leaving an ``async for`` does not end it (it may be iterated again): end
    it with :meth:`unsubscribe`, or iterate inside ``async with sub:`` (or
    ``contextlib.aclosing(sub)``), whose exit calls :meth:`aclose`.

    At most once (``ack="none"``), at most :data:`MAX_QUEUED` deliveries, and
    :data:`MAX_QUEUED_BYTES` of their data, wait for the handler or the
    iterator; :attr:`dropped` counts those dropped beyond."""

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
        # Acks not yet sent: id, sequence (0: none known), connection, waiter.
        self._ackq: list[tuple[str, int, int, asyncio.Future[None]]] = []
        self._ack_task: asyncio.Task[None] | None = None
        # Resumption (see the module's docstring): the sequences received
        # and not yet handled successfully (a nack keeps its sequence), the
        # highest acked (at most once: the highest received, and no set).
        self._outstanding: set[int] = set()
        self._settled_high = 0
        # The from of the latest subscribed answer (pub/sub); 0: not named.
        self._from = 0
        # The sequence the latest subscribe frame started at; 0: none. Its
        # answer, bound once (by the session's reader), is compared with it.
        self._asked = 0
        self._at_most_once = opts.get("ack") == "none"
        self._dropped = 0
        # Acknowledged: the deliveries of connection _waiting_gen queued (at
        # most the window), and those that came beyond it (left unanswered).
        self._waiting = 0
        self._waiting_gen = 0
        self._overflow = 0
        # At most once: the size of the data queued, but for _unsized, the
        # delivery queued when none was: measured only once another comes
        # before it is taken (see _push).
        self._queued_bytes = 0
        self._unsized: Delivery | None = None
        # The messages (id and sequence, see _run_key) whose handler runs,
        # and the deliveries of those that came meanwhile (delivered again:
        # the ack wait passed, or a resume), parked until that run returns:
        # one message's handler never runs twice at once. Parked ones still
        # count against the window (at most once, against MAX_QUEUED and
        # MAX_QUEUED_BYTES).
        self._active: set[tuple[str, int | None]] = set()
        self._parked: dict[tuple[str, int | None], collections.deque[Delivery]] = {}
        self._parked_n = 0
        self.ended = False
        # Stopping: unsubscribe() or the session's close() began; nothing
        # more is handed over.
        self._stopping = False
        # The handler calls running, and the futures of those waiting for
        # one of them to finish (or for the subscription to stop or end).
        self._slots: set[_Slot] = set()
        self._waiters: list[asyncio.Future[None]] = []
        # The end under way (started by the first unsubscribe()).
        self._ending: asyncio.Task[BaseException | None] | None = None
        # A resubscription in flight (reconnect), and the connection
        # generation the current sid belongs to.
        self._resubscribing: asyncio.Future[None] | None = None
        self._sid_gen = 0
        # The iterator's last delivery handed to each task: the one its loop
        # works on, nacked by aclose() when unanswered.
        self._taken: weakref.WeakKeyDictionary[asyncio.Task[Any], Delivery] = weakref.WeakKeyDictionary()

    # --- consumer side ---

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        if self.handler is not None:
            raise TypeError("a subscription with a handler is not iterable")
        task = asyncio.current_task()
        while True:
            item = await self._queue.get()
            if item is _CLOSED:
                self._queue.put_nowait(_CLOSED)  # for every other waiting or later call
                if self.error is not None:
                    raise self.error
                raise StopAsyncIteration
            self._took(item)
            if item._gen == self._gen or self._at_most_once:
                if task is not None:
                    self._taken[task] = item
                return item
            # Handed over on a connection since lost: it comes again on this one
            # (at most once it does not: it was done when the server sent it).

    async def __aenter__(self) -> "Subscription":
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        await self._leave(_retry_delay(exc))

    async def aclose(self) -> None:
        """End the subscription as a loop that leaves early does (the exit of
        ``async with sub:`` and of ``contextlib.aclosing(sub)`` call it): the
        delivery the calling task took last from the iterator, if it is still
        unanswered, is nacked (``async with`` passes the delay of a
        :class:`RetryAfter` that leaves the block); then :meth:`unsubscribe`.
        The deliveries not yet handed over go back unanswered, without an
        attempt spent (at most once they are dropped)."""
        await self._leave(None)

    async def _leave(self, delay: float | None) -> None:
        task = asyncio.current_task()
        d = self._taken.pop(task, None) if task is not None else None
        if d is not None and not d.settled and not self.ended and not self._at_most_once:
            try:
                await d.nack(delay)
            except PigeonError as e:
                log.debug("pigeon: nack of %s on leaving failed: %r", d.id, e)
        await self.unsubscribe()

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
        :data:`MAX_QUEUED` were already waiting, or their data would have
        taken the queue past :data:`MAX_QUEUED_BYTES` (0 for an acknowledged
        subscription)."""
        return self._dropped

    async def unsubscribe(self) -> None:
        """End the subscription. Deliveries stop at once: those not yet
        handed over (queued for the handler, or waiting for the iterator) go
        back to the server unanswered, without an attempt spent (at most once
        they are dropped), and the iterator ends. Then it waits for the
        running handlers and their acks, and sends the unsubscribe on the
        connection the subscription has then (a reconnect meanwhile does not
        resume it). Deliveries the iterator handed out and that are still
        unanswered are not waited for: the unsubscribe gives them back too.

        It never waits for the handler that calls it (or a task that handler
        starts): from one of its own handlers it waits for the other running
        handlers and their acks and returns; the subscription ends once the
        calling handler returns, its delivery answered by that return (ack)
        or exception (nack), then the unsubscribe sent (:meth:`wait` and
        :attr:`done` tell when). A lost connection is no error (the server's
        subscription ended with it); a refusal of the unsubscribe is raised
        (the subscription has ended all the same)."""
        if self.ended:
            return
        own = _caller_slot()
        first = not self._stopping
        self._stop()
        ending = self._ending
        if first:
            ending = self._ending = asyncio.get_running_loop().create_task(self._end_when_idle())
        await self._settled_except(own)
        if own is not None and own in self._slots:
            # The end follows the caller's own delivery: waiting for it here
            # would wait forever. A refusal goes to on_error.
            if first and ending is not None:
                ending.add_done_callback(self._report_ending)
            return
        if first and ending is not None:
            err = await asyncio.shield(ending)
            if err is not None:
                raise err
        else:
            # Another unsubscribe, or the session's close, ends it.
            await asyncio.shield(self._done)

    # --- internals ---

    def _subscribe_frame(self, resume: bool = False) -> dict[str, Any]:
        f: dict[str, Any] = {"op": "subscribe", "subject": self.subject, "batch": True}
        o = self.options
        for k in ("selector", "filter", "group", "ack"):
            if o.get(k) is not None:
                f[k] = o[k]
        mif = o.get("max_in_flight") or 1
        f["maxInFlight"] = mif
        f["window"] = self._window()
        start = o.get("start")
        if resume and o.get("_pubsub", True):
            # Resume: from the lowest sequence received and not yet handled
            # successfully, else after the highest acked, else at the from
            # of the latest subscribed answer, else the original start.
            if self._outstanding:
                start = {"sequence": min(self._outstanding)}
            elif self._settled_high:
                start = {"sequence": self._settled_high + 1}
            elif self._from:
                start = {"sequence": self._from}
        if isinstance(start, int) and not isinstance(start, bool):
            start = {"sequence": start}
        if start is not None:
            f["start"] = start
        seq = start.get("sequence") if isinstance(start, dict) else None
        self._asked = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
        return f

    def _started(self, frm: int) -> None:
        """Notes the ``from`` of a subscribed answer. One below the sequence
        the subscribe asked for means the subject was numbered anew (the
        broker lost its store): what this subscription handled counts for
        nothing on it, so the highest handled is forgotten and the next
        resume continues in the new numbering. The session binds each
        answer once, as it arrives, so this runs before any delivery of
        the new numbering is handled."""
        self._from = frm
        if frm < self._asked:
            self._settled_high = 0

    def _resume_frame(self) -> tuple[dict[str, Any], set[int]]:
        """The subscribe frame that resumes the subscription, and the set it
        was computed from, taken: the set starts empty before the frame
        leaves (the new deliveries may follow its answer at once). Give the
        taken set back with :meth:`_resume_failed` when the frame fails, so
        that the next resume still starts there."""
        f = self._subscribe_frame(resume=True)
        taken, self._outstanding = self._outstanding, set()
        return f, taken

    def _resume_failed(self, taken: set[int]) -> None:
        self._outstanding |= taken

    def _connection_lost(self) -> None:
        """The connection is gone: an acknowledged subscription's deliveries
        from it can no longer be answered. Those still queued are dropped
        when taken (not run), and a handler that finishes on one keeps its
        sequence in the set: the resumed subscription delivers them again.
        At most once, they were done when sent: they still run."""
        if not self._at_most_once:
            self._gen = 0  # no connection: every delivery so far is stale

    def _push(self, message: Any, attempt: Any, gen: int, index: int | None = None) -> None:
        """Hands over the delivery of ``message`` (entry ``index`` of a
        ``deliver_batch``; ``None``: a ``deliver`` frame's). Every report of
        a delivery refused names the frame's op in its ``details``, and in a
        ``deliver_batch`` the entry's ``index``, as the batch's entries that
        are no object are named."""
        op = "deliver" if index is None else "deliver_batch"
        where: dict[str, Any] = {"op": op} if index is None else {"op": op, "index": index}
        if self.ended or self._stopping or not isinstance(message, dict):
            if not isinstance(message, dict):
                if index is None:
                    self.session._report(ProtocolError(
                        "BAD_REQUEST", f"the server sent a deliver without a message object ({type(message).__name__})",
                        details=where))
                else:
                    self.session._report(ProtocolError(
                        "BAD_REQUEST", f"the server sent a deliver_batch whose delivery {index} holds no message "
                        f"object ({type(message).__name__})", details=where))
            return
        mid = message.get("id")
        if not isinstance(mid, str) or not mid:
            # It could be neither answered nor told apart from another: not
            # handed over (unanswered, the server's ack wait gives it back).
            at = "" if index is None else f" (deliver_batch entry {index})"
            self.session._report(ProtocolError(
                "BAD_REQUEST", f"a delivery of {self.subject}{at} whose message id is not a non-empty string: "
                "not handed over", details={**where, "messageId": mid if isinstance(mid, str) else type(mid).__name__}))
            return
        unheld = _unheld_message(message, op, index)
        if unheld is None and not _attempt_held(attempt):
            unheld = _unheld_attempt(message, op, index, attempt)
        if unheld is not None:
            # A sequence the client cannot hold exactly or none at all
            # (absent or null: the broker writes one into every delivery,
            # and numbers from 1), a hops that is no broker's
            # (docs/protocol.md, "hops"), or an attempt that is not an
            # integer of 1 to 2^31-1 (the broker writes one into every
            # delivery, counted from 1; the receive rule): not handed over
            # and not answered, as the TypeScript and Rust clients refuse
            # it. An answer without the sequence could settle a newer
            # message published under the id; unanswered, the server's ack
            # wait gives it back (at most once, it was done when sent). It
            # counts for nothing here: neither its sequence nor anything
            # else of it moves a resume position.
            self.session._report(unheld)
            return
        seq = _sequence(message.get("sequence"))
        if self._at_most_once:
            # Nothing to settle: a reconnect resumes after the last message
            # received, dropped ones included (they were done when sent).
            if seq is not None:
                self._settled_high = max(self._settled_high, seq)
            d = Delivery(message, attempt, self, gen)
            if self._queue.qsize() == 0:
                # Taken next whatever its size: measured only if another
                # comes before it is taken.
                self._unsized = d
            else:
                u, self._unsized = self._unsized, None
                if u is not None:  # the head, still queued
                    u._size = _data_size(u.message)
                    self._queued_bytes += u._size
                d._size = _data_size(message)
                if self._queue.qsize() + self._parked_n >= MAX_QUEUED \
                        or self._queued_bytes + d._size > MAX_QUEUED_BYTES:
                    self._drop()
                    return
                self._queued_bytes += d._size
            self._queue.put_nowait(d)
            return
        if gen != self._waiting_gen:
            self._waiting_gen, self._waiting = gen, 0
        if self._waiting >= self._window():
            # More deliveries waiting than the window the client asked for,
            # which a server that keeps the window never sends: left
            # unanswered, for the server's ack wait to give back, rather than
            # queued without end (as the Go client does).
            self._overflow += 1
            n = self._overflow
            if n & (n - 1) == 0:  # reported at 1, 2, 4, …
                self.session._report(ProtocolError(
                    "BAD_REQUEST",
                    f"deliveries of {self.subject} beyond the subscription's window ({self._window()}) "
                    f"left unanswered ({n} so far)",
                ))
            return
        self._waiting += 1
        if seq is not None:
            self._outstand(seq)
        self._queue.put_nowait(Delivery(message, attempt, self, gen))

    def _window(self) -> int:
        """The window asked of the server: deliveries it may have unanswered."""
        o = self.options
        return o.get("window") or max(256, o.get("max_in_flight") or 1)

    def _outstand(self, seq: int) -> None:
        """Notes that seq was handed over; a full set forgets its lowest
        quarter first (see :data:`MAX_OUTSTANDING`)."""
        if len(self._outstanding) >= MAX_OUTSTANDING:
            self._outstanding.difference_update(sorted(self._outstanding)[: len(self._outstanding) // 4])
        self._outstanding.add(seq)

    def _took(self, d: Delivery) -> None:
        """A delivery left the queue: its data no longer counts."""
        if not self._at_most_once and d._gen == self._waiting_gen and self._waiting > 0:
            self._waiting -= 1
        if d is self._unsized:
            self._unsized = None
        else:
            self._queued_bytes -= d._size

    def _drop(self) -> None:
        self._dropped += 1
        n = self._dropped
        if n & (n - 1) == 0:  # 1, 2, 4, …: a slow handler does not flood on_error or the log
            self.session._report(PigeonError(
                "DELIVERIES_DROPPED",
                f"at-most-once deliveries of {self.subject} dropped: the handler does not keep up "
                f"({n} so far; at most {MAX_QUEUED} deliveries and {MAX_QUEUED_BYTES >> 20} MiB of data wait queued)",
                details={"subject": self.subject, "dropped": n, "maxQueued": MAX_QUEUED,
                         "maxQueuedBytes": MAX_QUEUED_BYTES},
            ))

    def _start_workers(self) -> None:
        if self.handler is None:
            return
        n = self.options.get("max_in_flight") or 1
        for _ in range(n):
            t = asyncio.get_running_loop().create_task(self._work())
            self._workers.append(t)

    async def _work(self) -> None:
        ready: Delivery | None = None  # a parked delivery whose turn came
        while True:
            if ready is None:
                item = await self._queue.get()
                if item is _CLOSED:
                    self._queue.put_nowait(_CLOSED)
                    return
                key = _run_key(item)
                if key in self._active:
                    self._park(key, item)  # its message's handler runs: after it
                    continue
                self._active.add(key)
            else:
                item, ready = ready, None
                key = _run_key(item)  # still in _active
            try:
                self._took(item)
                if item._gen == self._gen or self._at_most_once:
                    await self._run(item)
                # else handed over on a connection since lost: it comes again
            finally:
                ready = self._unpark(key)
                if ready is None:
                    self._active.discard(key)

    async def _run(self, item: Delivery) -> None:
        task = asyncio.current_task()
        assert task is not None
        slot = _Slot(self)
        self._slots.add(slot)
        self._running.add(task)
        token = _HANDLING.set(slot)
        try:
            await self._handle(item)
        finally:
            _HANDLING.reset(token)
            slot.done = True
            self._slots.discard(slot)
            self._running.discard(task)
            self._changed()

    def _park(self, key: tuple[str, int | None], d: Delivery) -> None:
        if d is self._unsized:  # measured now: it leaves the queue, not the count
            self._unsized = None
            d._size = _data_size(d.message)
            self._queued_bytes += d._size
        self._parked.setdefault(key, collections.deque()).append(d)
        self._parked_n += 1

    def _unpark(self, key: tuple[str, int | None]) -> Delivery | None:
        q = self._parked.get(key)
        if not q or self._stopping:
            return None
        d = q.popleft()
        self._parked_n -= 1
        if not q:
            del self._parked[key]
        return d

    async def _handle(self, d: Delivery) -> None:
        assert self.handler is not None
        try:
            r = self.handler(d)
            if inspect.isawaitable(r):
                await r
        except asyncio.CancelledError as e:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # the worker is cancelled (close() past its timeout)
            # The handler's own: it awaited something cancelled (a task of
            # its own, a future another cancelled). A failure like any
            # other, not the end of this worker, which would leave the
            # subscription a handler call short for good.
            log.debug("pigeon: handler failed on %s: %r", d.id, e)
            await self._answer(d, False, None)
            return
        except RetryAfter as e:
            await self._answer(d, False, _retry_delay(e))
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
        delay_ms = None if ok else _delay_ms(delay)  # a bad delay raises before the delivery is settled
        d.settled = True
        if self._at_most_once:
            return  # nothing is answered, nothing comes again
        if d._gen != self._gen:
            raise SessionClosedError("SESSION_CLOSED", "the delivery's connection was lost; it comes again")
        if self.ended:
            raise error_from({"code": "ACK_NOT_ALLOWED",
                              "message": "the subscription has ended: the delivery went back to the server"})
        # A failure keeps its sequence: the server redelivers it on this
        # subscription only, so a resume must ask for it again.
        # Both as delivered (taken when the Delivery was made), not as the
        # message dict says now: a handler may have edited it.
        seq = d._sequence
        at = _sequence(seq)
        if at is not None and ok:
            self._outstanding.discard(at)
            self._settled_high = max(self._settled_high, at)
        # The answer names the delivery's sequence as well as its id: a late
        # answer never settles a newer message published under the id once
        # retention trimmed the one delivered (the server refuses it).
        if not ok:
            f: dict[str, Any] = {"op": "nack", "sub": self.sid, "messageId": d._id}
            if seq is not None:
                f["sequence"] = seq
            if delay_ms is not None:
                f["delayMs"] = delay_ms
            await self.session._call(f, "ok")
            return
        fut = asyncio.get_running_loop().create_future()
        self._ackq.append((d._id, seq or 0, d._gen, fut))
        if self._ack_task is None:
            self._ack_task = asyncio.get_running_loop().create_task(self._flush_acks())
        await fut

    def _ack_batch(self) -> int:
        """How many of the acks queued go in the next frame: as many as the
        server's ``maxFrame`` holds (a window of thousands of long ids is
        more than one frame: the server would close the connection)."""
        limit = self.session._max_frame
        size = _ACK_FRAME_BASE + _ack_cost(self.sid or "") + _ack_cost(self._ackq[0][0])
        n = 1
        while n < len(self._ackq):
            size += _ack_cost(self._ackq[n][0])
            if size > limit:
                break
            n += 1
        return n

    async def _flush_acks(self) -> None:
        items: list[tuple[str, int, int, asyncio.Future[None]]] = []
        try:
            while self._ackq:
                n = self._ack_batch()
                items, self._ackq = self._ackq[:n], self._ackq[n:]
                live = [(i, s) for i, s, g, _ in items if g == self._gen]
                stale = [f for _, _, g, f in items if g != self._gen]
                for f in stale:
                    if not f.done():
                        f.set_exception(SessionClosedError("SESSION_CLOSED", "the delivery's connection was lost"))
                if not live:
                    continue
                # Each id goes with the sequence of the delivery it answers.
                frame: dict[str, Any] = {"op": "ack", "sub": self.sid}
                if len(live) == 1:
                    frame["messageId"] = live[0][0]
                    if live[0][1]:
                        frame["sequence"] = live[0][1]
                else:
                    frame["messageIds"] = [i for i, _ in live]
                    frame["sequences"] = [s for _, s in live]
                try:
                    ans = await self.session._call(frame, "ok")
                except PigeonError as e:
                    for _, _, g, f in items:
                        if not f.done():
                            f.set_exception(e)
                    continue
                refused = _not_pending(ans)
                for mid, seq, _, f in items:
                    if f.done():
                        continue
                    if refused(mid, seq):
                        f.set_exception(
                            error_from({"code": "ACK_NOT_ALLOWED", "message": "no delivery of that message is waiting"})
                        )
                    else:
                        f.set_result(None)
        except BaseException as e:
            # Never leave an ack waiting on a flusher that is gone.
            err = e if isinstance(e, PigeonError) else SessionClosedError("SESSION_CLOSED", f"acks failed: {e!r}")
            for _, _, _, f in items + self._ackq:
                if not f.done():
                    f.set_exception(err)
            self._ackq = []
            if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            log.exception("pigeon: acks of %s failed", self.subject)
        finally:
            self._ack_task = None

    def _end(self, err: PigeonError | None) -> None:
        if self.ended:
            return
        self.ended = True
        self._stopping = True
        self.error = err
        self.session._forget(self)
        self._clear_queue()
        self._queue.put_nowait(_CLOSED)
        if not self._done.done():
            self._done.set_result(None)
        self._changed()
        if err is not None:
            self.session._report(err)

    def _clear_queue(self) -> None:
        # Not handed over: the unsubscribe (or the closed connection) gives
        # them back unanswered; at most once they are dropped.
        while not self._queue.empty():
            self._queue.get_nowait()
        self._parked.clear()
        self._parked_n = 0
        self._queued_bytes = 0
        self._unsized = None
        self._waiting = 0

    def _stop(self) -> None:
        """Stop deliveries: nothing more is handed to the handler or the
        iterator; the workers finish their handler calls and exit."""
        if self._stopping or self.ended:
            return
        self._stopping = True
        self._clear_queue()
        self._queue.put_nowait(_CLOSED)
        self._changed()

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def _until(self, cond: Callable[[], bool]) -> None:
        while not cond():
            f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(f)
            await f

    async def _acks_flushed(self) -> None:
        while self._ack_task is not None:
            await asyncio.shield(self._ack_task)

    async def _settled_except(self, own: _Slot | None) -> None:
        """Wait for the handler calls running, except own, and the acks."""
        await self._until(lambda: self.ended or all(s is own for s in self._slots))
        await self._acks_flushed()

    async def _idle(self) -> None:
        """Wait for every handler call running, and the acks."""
        await self._until(lambda: self.ended or not self._slots)
        await self._acks_flushed()

    async def _end_when_idle(self) -> BaseException | None:
        """End a stopping subscription once no handler runs and its acks are
        answered: the unsubscribe goes to the connection and under the id
        the subscription has then. Returns the server's refusal, if any."""
        err: BaseException | None = None
        try:
            await self._idle()
            while self._resubscribing is not None:  # its answer names the sid to end
                await asyncio.shield(self._resubscribing)
            s = self.session
            sid = self.sid
            # Not when the session's close already told the server (_gone).
            if not self.ended and sid and sid not in s._gone and self._sid_gen == s._gen \
                    and s._state not in ("closed", "failed"):
                s._gone.append(sid)  # told to end: what is still on the wire for it is dropped quietly
                try:
                    await s._call({"op": "unsubscribe", "sub": sid}, "ok")
                except TransportError:
                    pass  # the connection is gone, and the server's subscription with it
                except PigeonError as e:
                    err = e
        except Exception as e:  # never leave the subscription unended
            err = e
        finally:
            self._end(None)
        return err

    def _report_ending(self, t: "asyncio.Task[BaseException | None]") -> None:
        if t.cancelled():
            return
        e = t.result()
        if isinstance(e, PigeonError):
            self.session._report(e)

    def _cancel_workers(self) -> None:
        me = asyncio.current_task()
        for w in self._workers:
            if w is not me:
                w.cancel()

    def __repr__(self) -> str:
        return f"Subscription(subject={self.subject!r}, sid={self.sid!r}, ended={self.ended})"
