"""The WebSocket client (asyncio): one session per connection, under a contract.

Concurrency contract
--------------------
A :class:`Session` belongs to the event loop it was connected on. Every
coroutine method may be awaited from many tasks at once: frames are matched
to their answers by id, publishes queued while a publish frame is on the
wire go out together as one ``publish_batch`` (so many publishes are in
flight on one connection and the session is not bound by round-trip
latency), and acks gathered while an ack frame is on the wire go out as one
frame with ``messageIds``. Publishes on one session are admitted in the
order they were called (one publish frame is in flight at a time; it
carries everything queued meanwhile, up to 1,000 messages).

Handlers of a subscription run on the session's loop, at most
``max_in_flight`` at once; a handler that returns acks its delivery, one
that raises nacks it (``RetryAfter(delay)`` chooses the retry delay).

When the connection drops, every call waiting on it fails at once with
:class:`~pigeon_client.errors.SessionClosedError` (``SHUTTING_DOWN`` when
the server went away with 1001), never hangs. With ``reconnect=True`` (the
default) the session then dials again with backoff, negotiates a fresh
contract for the same subjects and resumes every subscription (a pub/sub one
from the lowest sequence it received and has not yet handled successfully,
else after the highest acked, else at the ``from`` of its latest
``subscribed`` answer, else at its original start: see
:mod:`pigeon_client.subscription`; an at-most-once one after the last
message it received, else at ``from``). A contract that can no longer be
negotiated ends the session: its subscriptions end with that error and
every later call raises it. :meth:`Session.close` finishes the handlers
running and their acks, then closes the connection; afterwards every call
raises ``SessionClosedError`` at once. Neither ``close`` nor
``Subscription.unsubscribe`` waits for the handler that calls it: the end
follows that handler's return.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as _dt
import inspect
import json
import logging
import math
import numbers
import random
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as _ws_connect_base
from websockets.uri import parse_uri as _parse_ws_uri

from .errors import (
    PigeonError,
    ProtocolError,
    RequestTimeoutError,
    SessionClosedError,
    TransportError,
    _EscapingLogger,
    is_server_code,
    error_from,
    escaping_logger,
    new_error,
)
from .model import (
    Contract,
    Decision,
    ReceivedMessage,
    _pulled,
    _read_int,
    _request_of,
    _settle_negative_zeros,
    _shown,
    _unanswering_reply,
    _unheld_message,
)
from .subscription import Delivery, Handler, Subscription, _caller_slot, _delay_ms, _sequence, _settle_body

__all__ = ["connect", "Session", "Subscription", "Delivery", "Contract", "Decision", "MAX_PUBLISH_BATCH"]

# Everything logged has its control characters escaped: a server's text
# (an error's code and message, an id, a close reason) goes into these lines.
log = escaping_logger("pigeon_client")


class _RedactingLogger(_EscapingLogger):
    """The ``websockets.client`` logger, but the handshake headers that carry
    the credential (``Authorization``, the ``pigeon.bearer.<token>``
    subprotocol) are written without it: websockets logs every header at
    DEBUG. Its lines (a server's headers, close reasons) are written with
    their control characters escaped."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], str):
            name = args[0].lower()
            if name == "authorization":
                args = (args[0], args[1].split(" ", 1)[0] + " [redacted]")
            elif name == "sec-websocket-protocol" and "pigeon.bearer." in args[1]:
                args = (args[0], ", ".join(
                    "pigeon.bearer.[redacted]" if p.strip().startswith("pigeon.bearer.") else p.strip()
                    for p in args[1].split(",")))
        super().log(level, msg, *args, **kwargs)


_WS_LOG = _RedactingLogger(logging.getLogger("websockets.client"))


class _ws_connect(_ws_connect_base):
    """websockets' connect, refusing a redirect to another origin (scheme,
    host or port): websockets drops ``Authorization`` then, but not the
    ``pigeon.bearer.<token>`` subprotocol, which would reach that origin."""

    def process_redirect(self, exc: Exception) -> Exception | str:
        r = super().process_redirect(exc)
        if isinstance(r, str):
            old, new = self.ws_uri, _parse_ws_uri(r)
            if (old.secure, old.host, old.port) != (new.secure, new.host, new.port):
                return websockets.exceptions.SecurityError(f"not following a redirect to another origin: {r}")
        return r


def _not_json(name: str) -> Any:
    """Refuses NaN, Infinity and -Infinity, which json.loads takes by default
    and JSON does not have."""
    raise ValueError(f"{name} is not JSON")


def _frame_decoder(dups: list[tuple[dict, str]], negative_zero: bool = False) -> json.JSONDecoder:
    """The decoder of a frame's JSON (see :func:`_loads_frame`), which adds
    to ``dups`` each object it builds that holds a member name twice; with
    ``negative_zero``, one that reads the integer ``-0`` as
    :data:`~pigeon_client.model.NEGATIVE_ZERO` (see
    :func:`_spells_negative_zero`)."""

    def pairs(ps: list[tuple[str, Any]]) -> dict:
        d = dict(ps)
        if len(d) != len(ps):
            seen: set[str] = set()
            for k, _ in ps:
                if k in seen:
                    dups.append((d, k))
                    break
                seen.add(k)
        return d

    if negative_zero:
        return json.JSONDecoder(parse_constant=_not_json, object_pairs_hook=pairs, parse_int=_read_int)
    return json.JSONDecoder(parse_constant=_not_json, object_pairs_hook=pairs)


# Where a JSON text may spell the integer -0: a value (after ":", "[" or
# ",") "-0" not followed by a digit (no number), a fraction or an exponent
# (a float). A time's "-05:00" or a name's "shard-0" is none; inside a string
# it may still match ("a,-0"), which only costs the slower decoding.
_NEGATIVE_ZERO = re.compile(r"[:\[,][ \t\n\r]*-0(?![0-9.eE])")


def _spells_negative_zero(raw: str) -> bool:
    """Whether the JSON text ``raw`` may hold the integer ``-0``, which
    json.loads reads as 0: a frame that does is decoded keeping it apart
    (:func:`_loads_frame`), as Go refuses it for every unsigned integer."""
    return "-0" in raw and _NEGATIVE_ZERO.search(raw) is not None


def _loads_frame(raw: str) -> tuple[Any, list[tuple[dict, str]]]:
    """A frame's JSON, and each object of it (data included) that holds a
    member name twice, with that name: json.loads keeps the last of them,
    another reader the first, and the server never sends one (it refuses
    them, DUPLICATE_KEY). An integer spelled ``-0`` is read as
    :data:`~pigeon_client.model.NEGATIVE_ZERO` where Go reads an unsigned
    integer, which every check of one refuses, and as 0 elsewhere
    (:func:`~pigeon_client.model._settle_negative_zeros`)."""
    dups: list[tuple[dict, str]] = []
    if _spells_negative_zero(raw):
        dec = _frame_decoder(dups, negative_zero=True)
        v = json.loads(raw, parse_constant=dec.parse_constant, object_pairs_hook=dec.object_pairs_hook,
                       parse_int=_read_int)
        _settle_negative_zeros(v)
        return v, dups
    dec = _frame_decoder(dups)
    return json.loads(raw, parse_constant=dec.parse_constant, object_pairs_hook=dec.object_pairs_hook), dups


_I64 = (-(1 << 63), (1 << 63) - 1)
_U64 = (0, (1 << 64) - 1)
# The integer members of a frame, as the Go client's Frame types them
# (int and int64 signed, uint32 and uint64 unsigned), with the bounds of
# each; and those that hold a list of integers.
_FRAME_INTEGERS: dict[str, tuple[int, int]] = {
    "ttlMs": _I64, "maxFrame": _I64, "timeoutMs": _I64, "delayMs": _I64, "attempt": _I64, "maxInFlight": _I64,
    "window": _I64, "max": _I64, "hops": (0, (1 << 32) - 1), "sequence": _U64, "from": _U64,
    "fromSequence": _U64, "toSequence": _U64,
}
_FRAME_INTEGER_LISTS: dict[str, tuple[int, int]] = {"sequences": _U64, "notPendingSequences": _U64, "attempts": _I64}


def _bounds(lo: int, hi: int) -> str:
    """``lo`` to ``hi`` as powers of two (``0 to 2^64-1``)."""

    def power(n: int) -> str:
        if n < 0:
            return f"-2^{(-n).bit_length() - 1}"
        return f"2^{n.bit_length()}-1" if n else "0"

    return f"{power(lo)} to {power(hi)}"


def _frame_integer_fault(f: dict[str, Any]) -> tuple[str, tuple[int, int], Any] | None:
    """The first integer member of frame ``f`` (see :data:`_FRAME_INTEGERS`)
    that holds no integer the Go client reads there, as (its name, its
    bounds, what it holds: see :func:`~pigeon_client.model._shown`);
    ``None`` when there is none. ``null`` reads as absent; a list's entry
    is read as a member. Go refuses such a frame whole (``encoding/json``
    and ``strconv``: a fraction, ``5.0`` and ``5e0`` included, a string, a
    bool, a value beyond the bounds, ``-0`` for an unsigned member), but
    for a ``deliver``'s ``attempt`` and a ``messages`` answer's
    ``attempts``, which it reads entry by entry and which the session
    checks so (a delivery, a message refused alone)."""
    op = f.get("op")
    for k, v in f.items():
        if v is None:
            continue
        b = _FRAME_INTEGERS.get(k)
        if b is not None:
            if not (type(v) is int and b[0] <= v <= b[1]) and not (k == "attempt" and op == "deliver"):
                return k, b, _shown(v)
            continue
        b = _FRAME_INTEGER_LISTS.get(k)
        if b is None or (k == "attempts" and op == "messages"):
            continue
        if not isinstance(v, list):
            return k, b, type(v).__name__
        for x in v:
            if x is not None and not (type(x) is int and b[0] <= x <= b[1]):
                return k, b, _shown(x)
    return None


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _check_header_value(what: str, value: str, *, token_chars: bool = False) -> None:
    """Refuse (``INVALID_ARGUMENT``) a value that cannot travel in a header
    as it is: a control character (a token read from a file with its
    trailing newline; CR/LF that would add a header), or beyond ASCII; with
    ``token_chars``, anything but a subprotocol token's characters. The
    value is never echoed: it is the credential. Otherwise the HTTP and
    WebSocket libraries refuse it with a message that quotes it (into logs)
    and the client reported a transport failure, retried without end."""
    if not isinstance(value, str):
        raise new_error("INVALID_ARGUMENT", f"the {what} is not a string")
    bad = (lambda c: c not in _TCHAR) if token_chars else (lambda c: not (" " <= c <= "~" or c == "\t"))
    for i, c in enumerate(value):
        if bad(c):
            raise new_error(
                "INVALID_ARGUMENT",
                f"the {what} holds a character a header cannot carry (code point {ord(c)} at {i} of "
                f"{len(value)}{'; a trailing newline?' if c in chr(10) + chr(13) and i >= len(value) - 2 else ''})",
            )


MAX_PUBLISH_BATCH = 1000
MAX_FRAME_BYTES = 64 << 20
"""The default read limit (``max_frame_bytes``): the largest frame a session
reads, 64 MiB. The broker's largest frames are replay and receive answers of
its 16 MiB read budget and one message more; the bound leaves room for a
broker configured with larger reads, while a hostile server cannot make the
client buffer more. A larger frame ends the connection as a lost one (close
code 1009): calls waiting on it fail ``SESSION_CLOSED`` (``details``:
``maxFrameBytes``, ``closeCode``), it is reported, and the session
reconnects."""
MAX_BUFFERED_BYTES = 16 << 20
"""The most bytes a connection lets wait unsent in its socket (16 MiB): while
that much waits (a server or proxy that stopped reading), a call fails at
once with ``RATE_LIMITED`` (``details``: ``bufferedBytes``,
``maxBufferedBytes``) without being sent; nothing the socket took is
dropped."""
MAX_PENDING_CALLS = 1 << 16
"""The most calls a session has waiting for their answers (65,536): beyond,
a call fails at once with ``RATE_LIMITED`` without being sent, so that with
``call_timeout=None`` a server that answers nothing cannot make the client
hold calls without end."""
# The broker's bound on a subscription's max_in_flight (pigeon.MaxInFlightLimit).
MAX_IN_FLIGHT = 10000

# The most unsubscribes a connection has in flight for subscriptions that
# deliveries name and the session does not own (the Go client's bound), and
# how long each waits for its answer.
MAX_ORPHAN_ENDS = 64
ORPHAN_END_TIMEOUT = 10.0
# The bounds of the least time between two automatic renewals of one
# contract (a quarter of the lifetime the last negotiation granted; below
# MIN_RENEW_FLOOR only for a shorter ttl of the session's own): see
# Session._renew_floor.
RENEW_FLOOR = 1.0
MIN_RENEW_FLOOR = 0.1
# Reconnect backoff: 50 ms doubling to 2 s (± half, at random).
_MIN_BACKOFF, _MAX_BACKOFF = 0.05, 2.0
# allow_nan=False: a caller's NaN or Infinity is ValueError before anything
# is queued or sent. Sent, it is not JSON: the server refuses the whole
# frame, every message of a publish_batch with it.
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

# A surrogate code point in a str is a lone one: a pair read from UTF-8 or
# from JSON escapes is one code point of its own.
_SURROGATE = re.compile("[\ud800-\udfff]")
# One escape of JSON text, from its backslash: an escaped surrogate pair
# (well formed), a lone surrogate escape (group 1), or any other escape (its
# first character only: the rest holds no backslash).
_ESCAPE = re.compile(r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)", re.S)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _dumps(value: Any) -> str:
    """The JSON text of ``value`` as a frame (or an HTTP body) holds it;
    ``INVALID_UTF8`` (an :class:`InvalidError`), nothing queued or sent, when
    a string in it holds a lone surrogate ('\\ud800'): that is no Unicode
    text, the socket could not encode it as UTF-8, and the server refuses
    JSON holding one whole."""
    t = _ENCODE(value)
    if not t.isascii() and _SURROGATE.search(t):
        raise new_error("INVALID_UTF8", "a string holds a lone surrogate, which is not Unicode text: nothing was sent")
    return t


def _lone_surrogate(text: str) -> bool:
    """Whether the JSON text ``text`` has a string holding a lone surrogate:
    an escape of one (``"\\ud800"`` not followed by an escaped low surrogate,
    ``"\\udc00"`` not preceded by a high one), which json.loads takes, or the
    code point itself. The server never sends one (it refuses them,
    INVALID_UTF8), and readers differ on what it is."""
    if not text.isascii() and _SURROGATE.search(text):
        return True
    if not _SURROGATE_ESCAPE.search(text):
        return False  # no surrogate escape at all: the usual case
    return any(m.group(1) is not None for m in _ESCAPE.finditer(text))


# Refusals of a renewal that the server gives again for as long as the
# contract lives (revoked, expired, unknown, another principal's, its policy
# changed, a role it relied on taken away, the credential expired): the
# session stops renewing that contract rather than sending a renew frame,
# audited and counted toward the negotiation rate, every few seconds to no
# end. Any other failure (RATE_LIMITED, INTERNAL, a timeout, a lost
# connection...) may pass later and is tried again.
_FINAL_RENEW_CODES = frozenset({
    "CONTRACT_REVOKED", "CONTRACT_EXPIRED", "CONTRACT_NOT_FOUND", "CONTRACT_PRINCIPAL_MISMATCH",
    "CONTRACT_STALE", "GRANT_REVOKED", "UNAUTHENTICATED",
})


def _check_ttl(ttl: Any) -> None:
    """A contract lifetime is None or a positive, finite number of seconds:
    anything else raises (``TypeError``, ``ValueError``) before it is kept,
    as the session's ``ttl`` is sent again by every reconnect and renewal
    (a NaN kept there made each of them raise, and the session hang in
    ``reconnecting``)."""
    if ttl is None:
        return
    if isinstance(ttl, bool) or not isinstance(ttl, numbers.Real):
        raise TypeError(f"ttl is a number of seconds, not {type(ttl).__name__}")
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"ttl must be a positive, finite number of seconds, not {ttl!r}")


def _granted(c: Contract, asked: _dt.datetime) -> float:
    """The lifetime (seconds) a negotiation asked at ``asked`` granted
    contract ``c``: 0 without an expiry."""
    if c.expires_at is None:
        return 0.0
    return max(0.0, (c.expires_at - asked).total_seconds())


def _renew_lead(left: float) -> float:
    """How long before a contract's expiry a session renews it, for ``left``
    seconds of remaining life: a tenth of it, but at least 5 s (half of it
    for less than 10 s), so that a short contract leaves room for a slow
    answer."""
    return max(left / 10, min(left / 2, 5.0))


def _ws_url(url: str, region: str | None, subprotocol_auth: bool) -> str:
    u = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(u.scheme, u.scheme)
    path = u.path or "/v1/ws"
    query = u.query
    if subprotocol_auth and region:
        query = (query + "&" if query else "") + "region=" + urllib.parse.quote(region)
    return urllib.parse.urlunsplit((scheme, u.netloc, path, query, ""))


async def connect(
    url: str,
    token: str,
    subjects: Iterable[str],
    *,
    region: str | None = None,
    ttl: float | None = None,
    reconnect: bool = True,
    reconnect_timeout: float = 30.0,
    on_error: Callable[[PigeonError], Any] | None = None,
    subprotocol_auth: bool = False,
    max_pending_publishes: int = 1024,
    open_timeout: float = 10.0,
    ping_interval: float | None = 20.0,
    auto_renew: bool = True,
    call_timeout: float | None = 30.0,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> "Session":
    """Connect to ``url`` (``ws://host:port/v1/ws``; ``http://`` works, and a
    URL without a path gets ``/v1/ws``), authenticate ``token`` and negotiate
    a contract for ``subjects``.

    ``ttl`` is the contract's lifetime in seconds. ``region`` travels as
    ``x-pigeon-region``. The credential is the ``Authorization`` header (or,
    with ``subprotocol_auth``, the ``pigeon.bearer.<token>`` subprotocol).
    Refusals are typed: ``UnauthenticatedError`` (401), ``ContractError``
    (``NO_PERMITTED_SUBJECTS``…), ``NotFoundError`` (``SUBJECT_NOT_FOUND``),
    ``TransportError`` when the server cannot be reached.

    ``auto_renew`` (on by default): the session renews its contract in place
    (:meth:`Session.renew`: same id, the subscriptions go on) shortly
    before it expires (a tenth of its remaining life ahead, at least 5 s, or
    half of it for a contract of less than 10 s), after every connect,
    reconnect and :meth:`Session.negotiate`. Each failed renewal goes to
    ``on_error`` (else the log), with its code. One the server will refuse
    again for this contract (``CONTRACT_REVOKED``, ``CONTRACT_EXPIRED``,
    ``CONTRACT_NOT_FOUND``, ``CONTRACT_PRINCIPAL_MISMATCH``,
    ``CONTRACT_STALE``, ``GRANT_REVOKED``, ``UNAUTHENTICATED``) stops the
    renewal of this contract: it is reported once, never tried again (a
    reconnect or :meth:`Session.negotiate` brings a new contract, renewed
    in turn). Any other failure (``RATE_LIMITED``, ``INTERNAL``, a timeout, a
    lost connection…) is tried again (after a quarter of the life left, at
    most 5 s, at least 0.1 s) until the contract expires. Every renewal of
    one contract the session sends by itself, whatever became of the last,
    comes a floor after the last at least: a quarter of the lifetime the
    contract was negotiated for, between 100 ms and 1 s (the lower bound is
    a quarter of ``ttl`` when that is shorter); never taken from renewals.
    The first always comes; one the floor would put past the expiry is not
    sent, reported once (``CONTRACT_EXPIRED``). The server never
    takes a contract past the credential the connection was opened with:
    once a renewal no longer moves the expiry, the session stops renewing
    that contract (it then expires, ``CONTRACT_EXPIRED``; connect again with
    a fresh credential). ``auto_renew=False``: the contract is renewed only
    when :meth:`Session.renew` is called.

    ``call_timeout`` bounds, in seconds, how long a call without a bound of
    its own (publish, subscribe, ack, nack, receive, replay, renew…) waits
    for its answer: then it raises ``RequestTimeoutError``
    (``REQUEST_TIMEOUT``), and an answer that comes later is dropped.
    ``None``: no bound. A publish that timed out may still have been
    accepted: publish it again with the same idempotency key to learn its
    fate. The send of a call counts against that bound too.

    ``max_frame_bytes`` (default :data:`MAX_FRAME_BYTES`, 64 MiB; an integer,
    1 or more, else ``INVALID_ARGUMENT``) is the largest frame the session
    reads (``websockets``' ``max_size``): a larger one ends the connection as
    a lost one (``SESSION_CLOSED``, ``details.maxFrameBytes``,
    ``details.closeCode`` 1009, reported to ``on_error``), and the session
    reconnects. While :data:`MAX_BUFFERED_BYTES` wait unsent in the socket,
    or :data:`MAX_PENDING_CALLS` calls wait for their answers, a call fails at
    once with ``RATE_LIMITED``, unsent.
    """
    if isinstance(max_frame_bytes, bool) or not isinstance(max_frame_bytes, int) or max_frame_bytes < 1:
        raise new_error("INVALID_ARGUMENT", f"max_frame_bytes must be an integer of 1 or more, not {max_frame_bytes!r}")
    if call_timeout is not None and not (call_timeout > 0 and math.isfinite(call_timeout)):
        raise ValueError(f"call_timeout must be a positive number of seconds or None, not {call_timeout!r}")
    s = Session(
        url,
        token,
        list(subjects),
        region=region,
        ttl=ttl,
        reconnect=reconnect,
        reconnect_timeout=reconnect_timeout,
        on_error=on_error,
        subprotocol_auth=subprotocol_auth,
        max_pending_publishes=max_pending_publishes,
        open_timeout=open_timeout,
        ping_interval=ping_interval,
        auto_renew=auto_renew,
        call_timeout=call_timeout,
        max_frame_bytes=max_frame_bytes,
    )
    await s._open()
    return s


class Session:
    """A session over WebSocket; see the module docs for its concurrency
    contract. Create it with :func:`connect`."""

    def __init__(
        self,
        url: str,
        token: str,
        subjects: list[str],
        *,
        region: str | None,
        ttl: float | None,
        reconnect: bool,
        reconnect_timeout: float,
        on_error: Callable[[PigeonError], Any] | None,
        subprotocol_auth: bool,
        max_pending_publishes: int,
        open_timeout: float,
        ping_interval: float | None,
        auto_renew: bool = True,
        call_timeout: float | None = 30.0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:
        if not subjects:
            raise ValueError("connect needs at least one subject")
        _check_ttl(ttl)
        _check_header_value("token", token, token_chars=subprotocol_auth)
        if region is not None:
            _check_header_value("region", region)
        self.url = _ws_url(url, region, subprotocol_auth)
        self._token = token
        self.subjects = subjects
        self.region = region
        self.ttl = ttl
        self.reconnect_enabled = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.on_error = on_error
        self._subprotocol_auth = subprotocol_auth
        self._open_timeout = open_timeout
        self._call_timeout = call_timeout
        self._max_frame_bytes = max_frame_bytes
        self._ping_interval = ping_interval
        self._loop = asyncio.get_running_loop()
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        # Ids of calls that timed out (the last 1024): their answers may
        # still come, and are dropped quietly.
        self._timed_out: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._binding: dict[str, Subscription] = {}
        self._gone: collections.deque[str] = collections.deque(maxlen=1024)
        # Unsubscribes in flight for subscriptions deliveries named and no
        # subscription of this session owns (_end_orphan).
        self._orphan_ends = 0
        self._next = 0
        self._gen = 0
        self._contract: Contract | None = None
        self._max_frame = 1 << 20
        self._subs: dict[str, Subscription] = {}
        self._all_subs: list[Subscription] = []
        self._state = "connecting"  # open, reconnecting, closing, closed, failed
        self._fatal: PigeonError | None = None
        self._connected = asyncio.Event()
        self._lost_err: PigeonError | None = None
        # Each queued publish: its JSON text, its data (see _encode) and the
        # future of its decision.
        self._pubq: collections.deque[tuple[str, Any, asyncio.Future[Decision]]] = collections.deque()
        self._pub_wake = asyncio.Event()
        self._pub_slots = asyncio.Semaphore(max(1, max_pending_publishes))
        self._pub_task: asyncio.Task[None] | None = None
        self._pub_inflight: list[asyncio.Future[Decision]] = []
        self._reconnect_task: asyncio.Task[None] | None = None
        self.auto_renew = auto_renew
        self._renew_task: asyncio.Task[None] | None = None
        # The lifetime (seconds) the last negotiation granted, measured from
        # when it was asked: what the renewal floor is a quarter of.
        self._negotiated_life = 0.0
        self._closing_task: asyncio.Task[None] | None = None
        # Set once close() has finished (a second close() waits for it).
        self._closed_fut: asyncio.Future[None] | None = None
        self.errors: collections.deque[PigeonError] = collections.deque(maxlen=100)
        self.reconnects = 0
        # When the connection a reconnect made came up, and the delay that
        # reconnect had reached: a drop sooner than _MAX_BACKOFF after goes
        # on from there rather than from _MIN_BACKOFF.
        self._up_at: float | None = None
        self._resume_delay = _MIN_BACKOFF

    # --- public state ---

    @property
    def contract(self) -> Contract:
        """The contract negotiated last."""
        assert self._contract is not None
        return self._contract

    @property
    def closed(self) -> bool:
        return self._state in ("closing", "closed", "failed")

    @property
    def connected(self) -> bool:
        return self._state == "open"

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the session is connected (after a reconnect); raise the
        error that ended it when it can no longer be."""
        if self._state == "open":
            return
        self._check_usable(reconnecting_ok=True)
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except asyncio.TimeoutError:
            raise TransportError("SESSION_CLOSED", "not reconnected in time") from None
        self._check_usable()

    # --- connection ---

    async def _dial(self) -> ClientConnection:
        headers: dict[str, str] = {}
        protocols = ["pigeon.v1"]
        if self._subprotocol_auth:
            protocols.append("pigeon.bearer." + self._token)
        else:
            headers["Authorization"] = "Bearer " + self._token
            if self.region:
                headers["x-pigeon-region"] = self.region
        try:
            return await _ws_connect(
                self.url,
                additional_headers=headers,
                subprotocols=protocols,  # type: ignore[arg-type]
                compression=None,
                proxy=None,
                max_size=self._max_frame_bytes,
                max_queue=64,
                open_timeout=self._open_timeout,
                ping_interval=self._ping_interval,
                ping_timeout=self._ping_interval,
                close_timeout=5,
                write_limit=1 << 20,
                logger=_WS_LOG,
            )
        except websockets.exceptions.InvalidStatus as e:
            resp = e.response
            body: Any = None
            try:
                body = json.loads(resp.body or b"")
            except ValueError:
                pass
            err = error_from(body, resp.status_code)
            if isinstance(err, ProtocolError):
                raise TransportError("CONNECTION_FAILED", f"upgrade refused with HTTP {resp.status_code}",
                                     status=resp.status_code) from None
            raise err from None
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise TransportError("CONNECTION_FAILED", f"cannot connect to {self.url}: {e}", status=503) from None

    async def _open(self) -> None:
        ws = await self._dial()
        try:
            await self._attach(ws)
        except BaseException:
            await ws.close()
            raise

    async def _attach(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._gen += 1
        # The ids ended on the lost connection mean nothing on this one (a
        # restarted server hands them out again): kept, they would silence
        # the deliveries and the unsubscribe of a new subscription.
        self._gone.clear()
        self._state = "negotiating"
        self._reader = self._loop.create_task(self._read(ws, self._gen))
        f: dict[str, Any] = {"op": "negotiate", "subjects": self.subjects}
        if self.ttl is not None:
            f["ttlMs"] = max(1, int(self.ttl * 1000))
        asked = _dt.datetime.now(_dt.timezone.utc)
        ans = await self._attach_call(f, "contract")
        self._contract = Contract.from_wire(ans.get("contract"), "the negotiate answer's contract")
        self._negotiated_life = _granted(self._contract, asked)
        mf = ans.get("maxFrame")
        if isinstance(mf, int) and not isinstance(mf, bool) and mf > 0:
            self._max_frame = mf
        for sub in list(self._all_subs):
            if sub.ended or sub._stopping:
                # Being unsubscribed: not started again (what it had went
                # back with the lost connection).
                continue
            sub._gen = self._gen
            # An unsubscribe that begins meanwhile waits for this answer: it
            # names the server subscription to end.
            resubscribing = sub._resubscribing = self._loop.create_future()
            frame, taken = sub._resume_frame()
            try:
                # The reader binds the answer (see _dispatch): nothing is
                # left to do with it here.
                try:
                    await self._attach_call(frame, "subscribed", binding=sub)
                except PigeonError as e:
                    if e.code != "INVALID_ARGUMENT" or sub.options.get("start") is not None:
                        raise
                    # Not a pub/sub subject: it resumes without a position.
                    sub.options["_pubsub"] = False
                    await self._attach_call(sub._subscribe_frame(resume=True), "subscribed", binding=sub)
            except TransportError:
                sub._resume_failed(taken)  # the next reconnect resumes from there
                raise
            except PigeonError as e:
                sub._end(e)
                continue
            except BaseException:
                sub._resume_failed(taken)
                raise
            finally:
                sub._resubscribing = None
                resubscribing.set_result(None)
        self._state = "open"
        self._connected.set()
        if self._pub_task is None:
            self._pub_task = self._loop.create_task(self._publisher())
        self._schedule_renew()

    async def _attach_call(self, frame: dict[str, Any], want: str, binding: Subscription | None = None) -> dict[str, Any]:
        """A call of _attach, bounded by ``open_timeout`` like the handshake:
        a server that upgrades and never answers would otherwise hold
        ``connect()`` (or a reconnect, with every call waiting on it)
        forever. No answer in time is a transport failure: the connection is
        dropped, and a reconnect tries again."""
        try:
            return await self._call(frame, want, internal=True, binding=binding, timeout=self._open_timeout)
        except RequestTimeoutError:
            raise TransportError(
                "CONNECTION_FAILED", f"the server did not answer {frame['op']} within {self._open_timeout}s"
            ) from None

    def _bind(self, sub: Subscription, ans: dict[str, Any]) -> None:
        """Bind a ``subscribed`` answer to the subscription that asked for
        it. The reader does it, once per answer, as the answer arrives and
        before the next frame (its first delivery may follow at once); the
        call that sent the subscribe only waits for it."""
        sid = ans.get("sub")
        if not isinstance(sid, str) or not sid:
            raise ProtocolError("BAD_REQUEST", "subscribed without a sub id")
        other = self._subs.get(sid)
        if other is not None and other is not sub and other._sid_gen == self._gen and not other.ended:
            # The id of another live subscription on this connection: bound,
            # it would take over that one's deliveries (and end it when this
            # one ends). Refused; nothing is unsubscribed (the id is the
            # other's).
            raise ProtocolError("BAD_REQUEST", f"the server gave subscription id {sid!r} to a second subscription")
        if sub.ended:
            # Ended while this (re)subscription was on its way: end what it started.
            self._end_orphan(sid, self._gen)
            return
        if sub.sid and self._subs.get(sub.sid) is sub:
            self._subs.pop(sub.sid, None)
        sub.sid = sid
        sub._sid_gen = self._gen
        self._subs[sid] = sub
        # Where a pub/sub subscription starts: a resume handed nothing goes
        # back there. A missing from (a work queue, an older server) keeps
        # the last one.
        frm = _sequence(ans.get("from"))
        if frm is not None:
            sub._started(frm)

    async def _quiet_unsubscribe(self, sid: str, timeout: float | None = None) -> None:
        """Unsubscribe sid; a refusal or a lost connection is only logged.
        The caller adds sid to _gone first: what is still on the wire for it
        is dropped quietly."""
        try:
            await self._call({"op": "unsubscribe", "sub": sid}, "ok", internal=True, timeout=timeout)
        except PigeonError as e:
            log.debug("pigeon: unsubscribe of %s failed: %r", sid, e)

    def _end_orphan(self, sid: str, gen: int, bounded: bool = False) -> None:
        """End a server subscription on the current connection that no
        subscription of this session owns (one ended while its
        resubscription was on its way): its deliveries would never be
        answered, held until their ack wait. Once per id, as the Go client's
        endOrphan; later deliveries for it are dropped quietly."""
        if gen != self._gen or sid in self._gone:
            return
        # A server (or anything writing on the connection) may name any
        # number of subscriptions this session never opened: at most
        # MAX_ORPHAN_ENDS of their unsubscribes are in flight (as in the Go
        # client); beyond, such deliveries are left unanswered, for the
        # server's ack wait. A subscribe answered after its subscription
        # ended is always ended.
        if bounded and self._orphan_ends >= MAX_ORPHAN_ENDS:
            return
        self._gone.append(sid)
        self._orphan_ends += 1

        async def end() -> None:
            try:
                await self._quiet_unsubscribe(sid, timeout=ORPHAN_END_TIMEOUT)
            finally:
                self._orphan_ends -= 1

        self._loop.create_task(end())

    async def _read(self, ws: ClientConnection, gen: int) -> None:
        err: PigeonError
        try:
            async for raw in ws:
                try:
                    self._dispatch(raw, gen)
                except RecursionError:  # data nested too deeply to measure (_data_size)
                    self._report(ProtocolError("BAD_REQUEST", "the server sent a frame nested too deeply to handle"))
            err = self._close_error(ws)
        except websockets.exceptions.ConnectionClosed:
            err = self._close_error(ws)
        except Exception as e:  # never let the reader die silently
            log.exception("pigeon: reader failed")
            err = TransportError("SESSION_CLOSED", f"reader failed: {e!r}")
            # Nobody reads this connection any more: closed, not left open
            # beside the one a reconnect dials.
            self._loop.create_task(ws.close())
        if err.details.get("maxFrameBytes") is not None and gen == self._gen and not self.closed:
            self._report(err)  # no call may be waiting: told all the same
        self._lost(gen, err)

    def _close_error(self, ws: ClientConnection) -> PigeonError:
        code = ws.close_code
        sent = getattr(ws.protocol, "close_sent", None)
        if sent is not None and sent.code == 1009:
            # The client's own close: the server sent a frame beyond max_frame_bytes.
            return SessionClosedError(
                "SESSION_CLOSED",
                f"the server sent a frame larger than max_frame_bytes ({self._max_frame_bytes} bytes); "
                "the connection was closed",
                details={"maxFrameBytes": self._max_frame_bytes, "closeCode": 1009},
            )
        if code == 1001:
            return TransportError("SHUTTING_DOWN", "the server is shutting down")
        reason = ws.close_reason or ""
        if code == 1008 and is_server_code(reason):
            # The server's refusal, as its code (UNAUTHENTICATED: the
            # credential refused when the server checked it again): the calls
            # waiting fail with it, as an error frame would fail them.
            return new_error(reason, f"the server closed the connection (1008 {reason})", details={"closeCode": 1008})
        return SessionClosedError("SESSION_CLOSED", f"the connection was lost (close code {code}{' ' + reason if reason else ''})")

    def _dispatch(self, raw: str | bytes, gen: int) -> None:
        if isinstance(raw, bytes):
            self._report(ProtocolError("BAD_REQUEST", "the server sent a binary frame"))
            return
        try:
            f, dups = _loads_frame(raw)
        except ValueError:
            self._report(ProtocolError("BAD_REQUEST", f"the server sent a frame that is not JSON: {raw[:80]!r}"))
            return
        except RecursionError:
            # Nested deeper than the interpreter's recursion limit (about a
            # thousand levels): refused as one frame, not as the reader's
            # end (the decoder raises RecursionError, not ValueError).
            self._report(ProtocolError("BAD_REQUEST", "the server sent a frame nested too deeply to decode"))
            return
        if not isinstance(f, dict):
            self._report(ProtocolError("BAD_REQUEST", "the server sent a frame that is not a JSON object"))
            return
        lone = not dups and _lone_surrogate(raw)
        fault = None if dups or lone else _frame_integer_fault(f)
        if dups or lone or fault:
            # Refused whole, as the Rust client refuses it: no delivery in it
            # is handed over (the server's ack wait gives it back), and the
            # call it answers fails, when its "re" is there once. So is one
            # with an integer member the Go client does not read, as Go
            # refuses it whole.
            details: dict[str, Any] = {}
            if dups:
                why = f"the member {dups[0][1]!r} twice in one object"
            elif lone:
                why = "a string holding a lone surrogate"
            else:
                k, (lo, hi), found = fault  # type: ignore[misc]
                why = f"a {k} that holds no integer of {_bounds(lo, hi)} ({found})"
                details = {"op": f.get("op") if isinstance(f.get("op"), str) else None, "member": k, "found": found}
            err = ProtocolError("BAD_REQUEST", f"the server sent a frame with {why}", details=details)
            re_dup = any(d is f and k == "re" for d, k in dups)
            re_ = None if re_dup else f.get("re")
            fut = self._pending.pop(re_, None) if isinstance(re_, str) and re_ else None
            if fut is not None:
                self._binding.pop(re_, None)
                if not fut.done():
                    fut.set_exception(err)
            else:
                self._report(err)
            return
        op = f.get("op")
        if op in ("deliver", "deliver_batch", "unsubscribed") and not isinstance(f.get("sub"), str):
            self._report(ProtocolError("BAD_REQUEST", f"the server sent {op} without a subscription id"))
            return
        if op == "deliver_batch":
            sub = self._subs.get(f.get("sub"))  # type: ignore[arg-type]
            ds = f.get("deliveries")
            if not isinstance(ds, list):
                # Nothing in it can be handed over, whoever's it is (as the
                # TypeScript client reports it).
                self._report(ProtocolError(
                    "BAD_REQUEST", f"the server sent a deliver_batch whose deliveries is not a list ({type(ds).__name__})",
                    details={"op": "deliver_batch"}))
                return
            if sub is None and f.get("sub") in self._gone:
                return
            if sub is None:
                self._end_orphan(f["sub"], gen, bounded=True)
                return
            for i, d in enumerate(ds):
                if isinstance(d, dict):
                    sub._push(d.get("message"), d.get("attempt"), gen, i)
                else:
                    # Each entry that is no object is reported, and the good
                    # ones of the frame go on (its answer never comes: the
                    # server's ack wait gives back whatever it meant).
                    self._report(ProtocolError(
                        "BAD_REQUEST",
                        f"the server sent a deliver_batch whose delivery {i} is not an object ({type(d).__name__})",
                        details={"op": "deliver_batch", "index": i}))
            return
        if op == "deliver":
            sub = self._subs.get(f.get("sub"))  # type: ignore[arg-type]
            if sub is None and f.get("sub") in self._gone:
                return
            if sub is None and isinstance(f.get("sub"), str):
                self._end_orphan(f["sub"], gen, bounded=True)
                return
            if sub is None:
                self._report(ProtocolError("BAD_REQUEST", f"deliver for unknown sub {f.get('sub')!r}"))
                return
            sub._push(f.get("message"), f.get("attempt"), gen)
            return
        if op == "unsubscribed":
            sub = self._subs.get(f.get("sub"))  # type: ignore[arg-type]
            if sub is not None:
                e = f.get("error")
                sub._end(error_from(e) if e is not None else None)
            return
        re_ = f.get("re")
        if not isinstance(re_, str) or not re_:
            if op == "error":
                self._report(error_from(f.get("error")))
            else:
                self._report(ProtocolError("BAD_REQUEST", f"the server sent an unexpected frame (op {op!r})"))
            return
        fut = self._pending.pop(re_, None)
        sub = self._binding.pop(re_, None)
        if sub is not None and op == "subscribed" and fut is not None and not fut.done():
            # Bound here, and only here, before the next frame: its first
            # deliver may follow at once.
            try:
                self._bind(sub, f)
            except PigeonError as e:
                fut.set_exception(e)
                return
        if fut is None and sub is not None and op == "subscribed":
            # The subscribe gave up before its answer (timed out, cancelled):
            # the server subscription it made is ended at once, as the Go
            # client's endOrphan does, rather than at its first delivery.
            sid = f.get("sub")
            other = self._subs.get(sid) if isinstance(sid, str) else None
            if isinstance(sid, str) and sid and (other is None or other.ended or other._sid_gen != self._gen):
                self._end_orphan(sid, gen)
        if fut is None:
            if self._timed_out.pop(re_, 0) is None:
                return  # the late answer of a call that timed out
            self._report(ProtocolError("BAD_REQUEST", f"the server answered an unknown frame id {re_!r}"))
            return
        if not fut.done():
            fut.set_result(f)

    def _report(self, err: PigeonError) -> None:
        """An error that answers no call: to ``on_error``, else the log."""
        self.errors.append(err)
        if self.on_error is not None:
            try:
                r = self.on_error(err)
                if inspect.isawaitable(r):
                    t = asyncio.ensure_future(r)
                    t.add_done_callback(_log_on_error_failure)  # never "exception was never retrieved"
            except Exception:
                log.exception("pigeon: on_error raised")
        else:
            log.warning("pigeon: %s", err)

    def _lost(self, gen: int, err: PigeonError) -> None:
        if gen != self._gen:
            return
        self._lost_err = err
        self._connected.clear()
        for sub in self._all_subs:
            sub._connection_lost()
        pending, self._pending = self._pending, {}
        self._binding.clear()
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._fail_publishes(err)
        if self._state in ("closing", "closed", "failed"):
            return
        if self.reconnect_enabled and self._state == "open":
            self._state = "reconnecting"
            self._reconnect_task = self._loop.create_task(self._reconnect_loop())
        elif self._state == "open":
            self._fail(err)

    def _fail_publishes(self, err: PigeonError) -> None:
        q, self._pubq = self._pubq, collections.deque()
        for _, _, fut in q:
            if not fut.done():
                fut.set_exception(err)

    async def _reconnect_loop(self) -> None:
        deadline = self._loop.time() + self.reconnect_timeout
        delay = _MIN_BACKOFF
        if self._up_at is not None and self._loop.time() - self._up_at < _MAX_BACKOFF:
            # The last connection did not stay up: a server that accepts and
            # drops at once is not dialled every _MIN_BACKOFF forever.
            delay = self._resume_delay
        last: PigeonError = self._lost_err or SessionClosedError("SESSION_CLOSED", "connection lost")
        while self._state == "reconnecting":
            if self._loop.time() > deadline:
                self._fail(TransportError("SESSION_CLOSED", f"could not reconnect within {self.reconnect_timeout}s: {last.message}"))
                return
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, _MAX_BACKOFF)
            if self._state != "reconnecting":
                return
            try:
                ws = await self._dial()
            except TransportError as e:
                last = e
                continue
            except PigeonError as e:  # refused at the upgrade: a credential that no longer works
                self._fail(e)
                return
            except Exception as e:  # not a transport failure: as for _attach below
                log.exception("pigeon: reconnect failed")
                self._fail(TransportError("SESSION_CLOSED", f"reconnect failed: {e!r}"))
                return
            try:
                await self._attach(ws)
                self.reconnects += 1
                self._up_at, self._resume_delay = self._loop.time(), delay
                return
            except TransportError as e:
                last = e
                await ws.close()
                self._state = "reconnecting"
                continue
            except PigeonError as e:  # the contract cannot be renewed
                await ws.close()
                self._fail(e)
                return
            except Exception as e:
                # Not the server's refusal: a failure of the client's own
                # (an answer it could not handle). Trying again would fail
                # again; leaving the task dead would leave the session in
                # "reconnecting" for good, every call refused and
                # wait_connected() waiting. The session ends with it.
                log.exception("pigeon: reconnect failed")
                await ws.close()
                self._fail(TransportError("SESSION_CLOSED", f"reconnect failed: {e!r}"))
                return

    def _fail(self, err: PigeonError) -> None:
        """End the session for good with ``err``, surfaced everywhere."""
        if self._state in ("closed", "failed"):
            return
        self._state = "failed"
        self._fatal = err
        self._connected.set()
        self._stop_renewing()
        self._fail_publishes(err)
        for sub in list(self._all_subs):
            sub._end(err)
        if self._ws is not None:
            self._loop.create_task(self._ws.close())
        self._report(err)

    def _forget(self, sub: Subscription) -> None:
        # Only its own entry: its id may since name another subscription
        # (one of a later connection, whose ids a restarted server reuses).
        if self._subs.get(sub.sid) is sub and self._subs.pop(sub.sid, None) is not None:
            # Deliveries already on the wire for it are dropped quietly (they go back).
            self._gone.append(sub.sid)
        if sub in self._all_subs:
            self._all_subs.remove(sub)

    # --- calls ---

    def _check_usable(self, reconnecting_ok: bool = False) -> None:
        if self._state == "failed" and self._fatal is not None:
            raise self._fatal
        if self._state in ("closing", "closed", "failed"):
            raise SessionClosedError("SESSION_CLOSED", "the session is closed")
        if self._state == "reconnecting" and not reconnecting_ok:
            raise SessionClosedError("SESSION_CLOSED", "the connection was lost; the session is reconnecting")

    async def _call(
        self,
        frame: dict[str, Any],
        want: str,
        *,
        timeout: float | None = None,
        internal: bool = False,
        binding: Subscription | None = None,
    ) -> dict[str, Any]:
        if not internal and frame.get("op") not in ("ack", "nack", "unsubscribe"):
            self._check_usable()
        elif self._state in ("closed", "failed"):
            self._check_usable()
        ws = self._ws
        if ws is None:
            raise SessionClosedError("SESSION_CLOSED", "not connected")
        self._next += 1
        fid = str(self._next)
        frame["id"] = fid
        text = _dumps(frame)  # a caller's NaN raises here, before anything is registered
        self._admit(ws)
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[fid] = fut
        if binding is not None:
            self._binding[fid] = binding
        if timeout is None:
            timeout = self._call_timeout
        deadline = None if timeout is None else self._loop.time() + timeout
        # Given up (timed out, or the caller cancelled) before the answer:
        # the answer is dropped quietly when it comes, and a subscribe's
        # binding is kept, for the reader to end the server subscription it
        # names (_dispatch), which nothing on the client would ever answer.
        gave_up = False
        try:
            try:
                # The send counts against the bound: a server that stops
                # reading holds it in the socket's flow control.
                # Awaited in this task (asyncio.timeout, not wait_for's task):
                # the frame reaches the socket's buffer before another call
                # is admitted, so _admit sees what waits unsent.
                async with asyncio.timeout_at(deadline):
                    await ws.send(text)
            except websockets.exceptions.ConnectionClosed:
                self._binding.pop(fid, None)
                raise self._close_error(ws) from None
            left = None if deadline is None else max(0.0, deadline - self._loop.time())
            ans = await asyncio.wait_for(fut, left) if left is not None else await fut
        except asyncio.TimeoutError:
            gave_up = True
            self._time_out(fid)
            raise RequestTimeoutError("REQUEST_TIMEOUT", "no answer from the server in time") from None
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():  # wait_for cancels fut with itself
                gave_up = True
                self._time_out(fid)
            raise
        finally:
            self._pending.pop(fid, None)
            if not gave_up:
                self._binding.pop(fid, None)
        op = ans.get("op")
        if op == "error":
            raise error_from(ans.get("error"))
        if op != want:
            raise ProtocolError("BAD_REQUEST", f"the server answered {frame['op']} with {op!r}, not {want!r}")
        return ans

    async def renew(self, ttl: float | None = None) -> Contract:
        """Renew the contract in force in place (the ``renew`` frame): the
        server moves its expiry later, by ``ttl`` seconds from now (else the
        session's ``ttl``, else the server's default lifetime), and keeps its
        id: the subscriptions running under it go on, nothing is negotiated
        or subscribed again. Returns the contract, which :attr:`contract`
        then is. ``ttl``, when given, becomes the session's ``ttl``.

        The server never takes the contract past the credential the
        connection was opened with, and never shortens it: a renewal that
        cannot move it returns it with the same ``expires_at``. Refusals are
        typed errors: ``CONTRACT_EXPIRED`` (an expired contract is not brought
        back: :meth:`negotiate` a new one), ``CONTRACT_REVOKED``,
        ``GRANT_REVOKED``, ``CONTRACT_STALE``, ``UNAUTHENTICATED``,
        ``RATE_LIMITED``, ``INVALID_ARGUMENT``. With ``auto_renew`` (the
        default) the session does this by itself; see :func:`connect`."""
        _check_ttl(ttl)
        if ttl is not None:
            self.ttl = ttl
        gen, before = self._gen, self._contract
        f: dict[str, Any] = {"op": "renew"}
        if self.ttl is not None:
            f["ttlMs"] = max(1, int(self.ttl * 1000))
        ans = await self._call(f, "contract")
        c = Contract.from_wire(ans.get("contract"), "the renew answer's contract")
        # A reconnect or a negotiate meanwhile brought another contract: that
        # one stays in force.
        if gen == self._gen and self._contract is before and (before is None or before.id == c.id):
            self._contract = c
            mf = ans.get("maxFrame")
            if isinstance(mf, int) and not isinstance(mf, bool) and mf > 0:
                self._max_frame = mf
        return c

    async def negotiate(self, ttl: float | None = None) -> Contract:
        """Negotiate a new contract (a new id) for the same subjects on this
        connection, e.g. after the contract in force expired. ``ttl``, when
        given, becomes the session's ``ttl``. Subscriptions that ended with
        the old contract stay ended. Renewing starts again from the new
        contract (with ``auto_renew``)."""
        _check_ttl(ttl)
        if ttl is not None:
            self.ttl = ttl
        f: dict[str, Any] = {"op": "negotiate", "subjects": self.subjects}
        if self.ttl is not None:
            f["ttlMs"] = max(1, int(self.ttl * 1000))
        asked = _dt.datetime.now(_dt.timezone.utc)
        ans = await self._call(f, "contract")
        self._contract = Contract.from_wire(ans.get("contract"), "the negotiate answer's contract")
        self._negotiated_life = _granted(self._contract, asked)
        mf = ans.get("maxFrame")
        if isinstance(mf, int) and not isinstance(mf, bool) and mf > 0:
            self._max_frame = mf
        self._schedule_renew()
        return self._contract

    # --- automatic renewal ---

    def _schedule_renew(self) -> None:
        """(Re)start the renewal of the contract in force (auto_renew)."""
        self._stop_renewing()
        if not self.auto_renew or self.closed or self._contract is None or self._contract.expires_at is None:
            return
        self._renew_task = self._loop.create_task(self._renew_loop(self._contract.id))

    def _stop_renewing(self) -> "asyncio.Task[None] | None":
        """Cancel the renewal task; return it while it has not finished (for
        close() to wait for: no task outlives the session). It stays
        referenced until then."""
        t = self._renew_task
        if t is None or t.done() or t is asyncio.current_task():
            return None  # none, finished, or ends by itself
        t.cancel()
        return t

    def _renew_floor(self) -> float:
        """The least time between two renewals of one contract that the
        session sends by itself (retries included), as in the Go client: a
        quarter of the lifetime the last negotiation granted (connect, a
        reconnect, :meth:`negotiate`; measured from when it was asked), or of
        the session's own ``ttl`` when that is shorter, within
        [:data:`MIN_RENEW_FLOOR`, :data:`RENEW_FLOOR`] (0.1 s to 1 s). The
        lower bound is a quarter of ``ttl`` when that is shorter: the
        session's own choice. Never taken from renewals: a server granting
        ever shorter renewals, or failing them at once, cannot drive the
        session faster than one renewal per :data:`MIN_RENEW_FLOOR`."""
        life, lower = self._negotiated_life, MIN_RENEW_FLOOR
        if self.ttl is not None:
            life = min(life, self.ttl)
            lower = min(lower, self.ttl / 4)
        return min(RENEW_FLOOR, max(lower, life / 4))

    async def _renew_loop(self, cid: str) -> None:
        """Renew contract ``cid`` shortly before it expires (a tenth of its remaining life ahead, at least 5 s), until
        it is replaced (a reconnect or negotiate starts another loop), it can
        no longer be moved (the credential's end), a renewal is refused for
        good (``_FINAL_RENEW_CODES``), it expires, or the session closes.
        Another failure is tried again after a quarter of what is left (at
        most 5 s, at least 0.1 s, at least the floor). Every failure is
        reported (``_report``).
        Two renewals of one contract sent by the loop, whatever became of the
        first, are :meth:`_renew_floor` apart at least; the first always
        comes; one the floor would put at or past the expiry is not sent,
        reported once (``CONTRACT_EXPIRED``): the contract ends at its expiry
        unless a reconnect or :meth:`negotiate` replaces it."""
        retry: float | None = None
        tried: float | None = None  # loop time of the last renewal sent
        while True:
            c = self._contract
            if self.closed or c is None or c.id != cid or c.expires_at is None:
                return
            exp = c.expires_at
            left = (exp - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
            if left <= 0:
                return  # expired: a reconnect or negotiate brings a new one
            wait = left - _renew_lead(left) if retry is None else min(retry, left)
            if tried is not None:
                nxt = tried + self._renew_floor() - self._loop.time()
                if nxt >= left:
                    what = ("renewing it failed, with no time left to try again" if retry is not None
                            else "the server renews it for too short a time to renew it again")
                    self._report(new_error(
                        "CONTRACT_EXPIRED",
                        f"contract {cid} is renewed no more: {what} before it expires; it ends at its expiry "
                        "unless a reconnect or negotiate replaces it",
                        details={"contract": cid, "renewFloorMs": int(self._renew_floor() * 1000)}))
                    return
                wait = max(wait, nxt)
            retry = None
            await asyncio.sleep(wait)
            c = self._contract
            if self.closed or c is None or c.id != cid:
                return
            if c.expires_at != exp:
                continue  # renewed meanwhile (an explicit renew)
            if (exp - _dt.datetime.now(_dt.timezone.utc)).total_seconds() <= 0:
                return
            tried = self._loop.time()
            try:
                k = await self.renew()
            except Exception as e:  # PigeonError, or anything else: never dies silently
                if self.closed:
                    return
                err = e if isinstance(e, PigeonError) else TransportError("SESSION_CLOSED", repr(e))
                if err.code in _FINAL_RENEW_CODES:
                    self._report_renewal(cid, err, "renewal stopped (the server refuses it for good)")
                    return  # a reconnect or negotiate brings a new contract, renewed anew
                left = (exp - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
                retry = max(min(left / 4, 5.0), 0.1, self._renew_floor())
                self._report_renewal(cid, err, f"trying again in {retry:.1f} s")
                continue
            if k.id != cid:
                c = self._contract
                if self.closed or c is None or c.id != cid:
                    return  # replaced meanwhile: the new contract is renewed anew
                # Not an answer about this contract (a broken or hostile
                # server): a failed renewal, tried again, as the Go and
                # TypeScript clients do; stopping let the contract lapse.
                left = (exp - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
                retry = max(min(left / 4, 5.0), 0.1, self._renew_floor())
                self._report_renewal(cid, ProtocolError(
                    "BAD_REQUEST", f"the server answered the renewal with another contract ({k.id!r})"),
                    f"trying again in {retry:.1f} s")
                continue
            if k.expires_at is None or k.expires_at <= exp:
                log.info("pigeon: contract %s cannot be renewed past the connection's credential (expires %s); "
                         "connect again with a fresh one", cid, exp.isoformat())
                return

    def _report_renewal(self, cid: str, err: PigeonError, then: str) -> None:
        """Report a failed automatic renewal of ``cid``: ``err``'s code, and what follows."""
        e = new_error(err.code, f"renewing contract {cid} failed; {then}: {err.message or err}",
                      status=err.status, details=err.details)
        e.__cause__ = err
        self._report(e)

    # --- publishing ---

    async def publish_async(self, message: dict[str, Any]) -> "asyncio.Future[Decision]":
        """Queue ``message`` (encoded at once, so it may be reused) and return
        a future of its :class:`Decision`; waits only for room when
        ``max_pending_publishes`` are already in flight."""
        self._check_usable()
        enc, data = _encode(message)
        if len(enc) * 4 > self._max_frame - 256 and len(enc.encode()) > self._max_frame - 256:
            # The server would close the connection (1009) on such a frame.
            raise error_from({"code": "PAYLOAD_TOO_LARGE",
                              "message": f"the message is larger than the server's frame size ({self._max_frame} bytes)"})
        await self._pub_slots.acquire()
        fut: asyncio.Future[Decision] = self._loop.create_future()
        fut.add_done_callback(lambda _: self._pub_slots.release())
        try:
            self._check_usable()
        except PigeonError as e:
            fut.set_exception(e)
            return fut
        self._pubq.append((enc, data, fut))
        self._pub_wake.set()
        return fut

    async def publish(self, message: dict[str, Any]) -> Decision:
        """Publish one message: the :class:`Decision` (``accepted`` or
        ``duplicate``), or the typed refusal (``DeniedError``,
        ``QuarantinedError``, ``ContractError``, ``TransportError``…)."""
        return await (await self.publish_async(message))

    async def publish_many(self, messages: Iterable[dict[str, Any]]) -> list[Decision | PigeonError]:
        """Publish many messages pipelined; one result per message, in order:
        its Decision or its refusal. A message that cannot be sent as JSON
        (NaN, Infinity, a value JSON has no form for) is refused alone
        (``INVALID_ARGUMENT``); the others go on."""
        futs: list[asyncio.Future[Decision] | PigeonError] = []
        for m in messages:
            try:
                futs.append(await self.publish_async(m))
            except (ValueError, TypeError) as e:
                err = new_error("INVALID_ARGUMENT", f"the message cannot be sent as JSON: {e}")
                err.__cause__ = e
                futs.append(err)
        out: list[Decision | PigeonError] = []
        for f in futs:
            if isinstance(f, PigeonError):
                out.append(f)
                continue
            try:
                out.append(await f)
            except PigeonError as e:
                out.append(e)
        return out

    async def _publisher(self) -> None:
        while True:
            await self._pub_wake.wait()
            self._pub_wake.clear()
            while self._pubq:
                batch: list[tuple[str, Any, asyncio.Future[Decision]]] = []
                size = 64
                limit = max(1024, self._max_frame - 1024)
                while self._pubq and len(batch) < MAX_PUBLISH_BATCH:
                    item = self._pubq[0]
                    n = len(item[0].encode())
                    if batch and size + n + 1 > limit:
                        break
                    self._pubq.popleft()
                    if item[2].done():
                        continue
                    batch.append(item)
                    size += n + 1
                if not batch:
                    continue
                self._pub_inflight = [f for _, _, f in batch]
                try:
                    await self._send_publishes(batch)
                except BaseException as e:  # keep the publisher alive whatever happens
                    err = e if isinstance(e, PigeonError) else TransportError("SESSION_CLOSED", repr(e))
                    if isinstance(e, asyncio.CancelledError):  # the session's close
                        err = SessionClosedError("SESSION_CLOSED", "the session is closed")
                    for _, _, f in batch:
                        if not f.done():
                            f.set_exception(err)
                    if not isinstance(e, Exception):
                        raise
                finally:
                    self._pub_inflight = []

    async def _send_publishes(self, batch: list[tuple[str, Any, asyncio.Future[Decision]]]) -> None:
        # The frames ask for brief answers: an accepted message comes back
        # without its data, which _decided puts back.
        if len(batch) == 1:
            enc, data, fut = batch[0]
            frame = _RawFrame('{"op":"publish","brief":true,"message":' + enc)
            try:
                try:
                    ans = await self._call_raw(frame, "decision")
                except ProtocolError as e:
                    raise _unread_answer(e, 1) from e
                fut.set_result(_decided(ans, data)) if not fut.done() else None
            except PigeonError as e:
                if not fut.done():
                    fut.set_exception(e)
            return
        frame = _RawFrame('{"op":"publish_batch","brief":true,"messages":[' + ",".join(e for e, _, _ in batch) + "]")
        n = len(batch)
        try:
            ans = await self._call_raw(frame, "decisions")
        except ProtocolError as e:
            raise _unread_answer(e, n) from e
        results = ans.get("results")
        if not isinstance(results, list) or len(results) != n:
            found = f"{len(results)} results" if isinstance(results, list) else f"results of {type(results).__name__}"
            raise _unread_answer(ProtocolError("BAD_REQUEST", f"{found} for {n} messages"), n)
        for i, ((_, data, fut), r) in enumerate(zip(batch, results)):
            if fut.done():
                continue
            # A slot no broker sends fails its own publish alone, as the Go
            # client's unreadResult does; the others take their own.
            what = f"the server's answer for this message (index {i} of the {n} results of its publish_batch)"
            try:
                if isinstance(r, dict) and r.get("error") is not None:
                    fut.set_exception(_slot_error(r["error"], what))
                else:
                    fut.set_result(_decided(r, data, what))
            except PigeonError as e:
                fut.set_exception(e)

    def _admit(self, ws: ClientConnection) -> None:
        """Refuse a call (``RATE_LIMITED``, nothing sent) while
        :data:`MAX_BUFFERED_BYTES` wait unsent in the socket (a server or
        proxy that stopped reading) or :data:`MAX_PENDING_CALLS` calls wait
        for their answers: neither grows without bound."""
        if len(self._pending) >= MAX_PENDING_CALLS:
            raise new_error("RATE_LIMITED", f"{len(self._pending)} calls already wait for their answers",
                            details={"pendingCalls": len(self._pending), "maxPendingCalls": MAX_PENDING_CALLS})
        transport = ws.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        if buffered >= MAX_BUFFERED_BYTES:
            raise new_error("RATE_LIMITED", f"{buffered} bytes wait unsent: the server does not read",
                            details={"bufferedBytes": buffered, "maxBufferedBytes": MAX_BUFFERED_BYTES})

    def _time_out(self, fid: str) -> None:
        self._timed_out[fid] = None
        if len(self._timed_out) > 1024:
            old, _ = self._timed_out.popitem(last=False)
            self._binding.pop(old, None)

    async def _call_raw(self, frame: "_RawFrame", want: str) -> dict[str, Any]:
        if self._state in ("closed", "failed", "reconnecting"):
            self._check_usable()
        ws = self._ws
        if ws is None:
            raise SessionClosedError("SESSION_CLOSED", "not connected")
        self._admit(ws)
        self._next += 1
        fid = str(self._next)
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[fid] = fut
        timeout = self._call_timeout
        deadline = None if timeout is None else self._loop.time() + timeout
        try:
            text = frame.head + ',"id":"' + fid + '"}'
            try:
                # Awaited in this task (asyncio.timeout, not wait_for's task):
                # the frame reaches the socket's buffer before another call
                # is admitted, so _admit sees what waits unsent.
                async with asyncio.timeout_at(deadline):
                    await ws.send(text)
            except websockets.exceptions.ConnectionClosed:
                raise self._close_error(ws) from None
            left = None if deadline is None else max(0.0, deadline - self._loop.time())
            ans = await asyncio.wait_for(fut, left) if left is not None else await fut
        except asyncio.TimeoutError:
            self._time_out(fid)
            raise RequestTimeoutError("REQUEST_TIMEOUT", "no answer from the server in time") from None
        finally:
            self._pending.pop(fid, None)
        op = ans.get("op")
        if op == "error":
            raise error_from(ans.get("error"))
        if op != want:
            raise ProtocolError("BAD_REQUEST", f"the server answered a publish with {op!r}")
        return ans

    # --- the other operations ---

    async def request(self, message: dict[str, Any], *, timeout: float = 30.0) -> dict[str, Any]:
        """Publish ``message`` as a request and return the reply message.
        ``REQUEST_TIMEOUT`` (``RequestTimeoutError``) when no reply comes
        within ``timeout`` seconds; a lost connection fails it at once.

        A request without an ``id``, a ``signature`` or an
        ``idempotencyKey`` is sent with an id drawn here (``message``
        itself is not changed). A reply that does not answer it (no
        ``correlationId``, or one naming another id than the request's;
        with an idempotency key any non-empty one is taken), or whose
        ``sequence`` or ``hops`` is no broker's, is refused,
        ``ProtocolError`` (``BAD_REQUEST``)."""
        req = _request_of(message)
        f = {"op": "request", "message": req, "timeoutMs": max(1, int(timeout * 1000))}
        ans = await self._call(f, "reply", timeout=timeout + 5.0)
        m = ans.get("message")
        if not isinstance(m, dict):
            raise ProtocolError("BAD_REQUEST", "reply without a message")
        unheld = _unheld_message(m, "reply") or _unanswering_reply(req, m)
        if unheld is not None:
            raise unheld
        return m

    async def subscribe(
        self,
        subject: str,
        handler: Handler | None = None,
        *,
        selector: str | None = None,
        filter: str | None = None,
        group: str | None = None,
        max_in_flight: int = 1,
        window: int | None = None,
        start: str | int | dict[str, int] | None = None,
        ack: str | None = None,
    ) -> Subscription:
        """Start push delivery of ``subject``.

        With ``handler`` (sync or async, called with a :class:`Delivery`):
        a return acks, an exception nacks (``RetryAfter(seconds)`` sets the
        retry delay), at most ``max_in_flight`` at once. Without one, iterate
        the subscription (``async for d in sub``) and ack/nack each delivery.
        ``start`` (pub/sub): ``"new"``, ``"first"`` or a sequence number.

        ``ack``: ``"explicit"`` (the server's default) or ``"none"``: at most
        once, pub/sub only (``INVALID_ARGUMENT`` on a work-queue subject).
        Nothing is acked or nacked (a raising handler is not retried;
        ``Delivery.ack``/``nack`` send nothing), nothing is redelivered, and
        a reconnect resumes after the last message received. The window
        then holds nothing back, so the client bounds the deliveries waiting
        for the handler or the iterator at :data:`~pigeon_client.subscription.MAX_QUEUED`
        (4096) and at :data:`~pigeon_client.subscription.MAX_QUEUED_BYTES`
        (64 MiB) of their data, and drops those beyond: ``Subscription.dropped`` counts them,
        and ``on_error`` (else the log) gets a ``DELIVERIES_DROPPED`` error at
        drop counts 1, 2, 4, 8, …
        """
        self._check_usable()
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) \
                or not 0 <= max_in_flight <= MAX_IN_FLIGHT:
            # One worker task each: a server that does not refuse it (as the
            # broker does) must not make the client start millions.
            raise new_error("INVALID_ARGUMENT", f"max_in_flight must be an integer from 1 to {MAX_IN_FLIGHT}")
        opts: dict[str, Any] = {
            "selector": selector,
            "filter": filter,
            "group": group,
            "max_in_flight": max_in_flight,
            "window": window,
            "start": start,
            "ack": ack,
        }
        sub = Subscription(self, subject, handler, opts)
        sub._gen = self._gen
        if group is not None:
            opts["_pubsub"] = False
        # The reader binds the answer as it arrives (see _dispatch). Between
        # then and this call's return the subscription may end: the server
        # ended it (an unsubscribed frame: it is returned ended), or the
        # session's close() or failure began, which knew nothing of it.
        try:
            await self._call(sub._subscribe_frame(), "subscribed", binding=sub)
        except BaseException:
            # Cancelled (or failed) once the reader had bound the answer: the
            # caller never gets the subscription, so nothing would run or
            # answer its deliveries; it is forgotten and ended on the server.
            if sub.sid and not sub.ended:
                sid, gen = sub.sid, sub._sid_gen
                sub._end(None)
                if gen == self._gen and self._state not in ("closed", "failed"):
                    self._loop.create_task(self._quiet_unsubscribe(sid, timeout=ORPHAN_END_TIMEOUT))
            raise
        if self._state in ("closing", "closed", "failed"):
            if not sub.ended:
                sid = sub.sid
                sub._end(None)  # forgotten: what is on the wire for it is dropped quietly
                if self._state == "closing":
                    self._loop.create_task(self._quiet_unsubscribe(sid))
            self._check_usable()  # raises the closed session's error
        if not sub.ended:
            self._all_subs.append(sub)
            sub._start_workers()
        return sub

    async def receive(self, subject: str, max: int | None = None) -> list[ReceivedMessage]:
        """Pull up to ``max`` messages (leased on a work-queue subject: settle
        them with :meth:`ack` / :meth:`nack`). Each is a
        :class:`~pigeon_client.model.ReceivedMessage`: the message's
        ``dict``, with ``attempt`` the attempt of its lease (0: not leased),
        which :meth:`ack` and :meth:`nack` of it send back. An answer whose
        ``attempts`` is not a list in step with the messages fails the call
        (``ProtocolError``: nothing is handed out, and the server's ack wait
        gives the messages back); a message whose attempt is not an integer
        of 1 to 2^31-1 (:data:`~pigeon_client.model.MAX_ATTEMPT`), whose
        ``sequence`` is absent or no broker's, or whose ``hops`` is no
        broker's is left out, its ``ProtocolError`` to ``on_error``, the
        others handed out."""
        f: dict[str, Any] = {"op": "receive", "subject": subject}
        if max is not None:
            f["max"] = max
        return _pulled(await self._call(f, "messages"), "receive", self._report)

    async def ack(
        self, subject: str, message: str | Mapping[str, Any], *, sequence: int | None = None, attempt: int | None = None
    ) -> None:
        """Settle a message taken with :meth:`receive`: pass the message
        received (its id, ``sequence`` and lease ``attempt`` are sent), or its
        id with ``sequence=`` and ``attempt=`` the message's. With the
        sequence, a late ack never settles a newer message published under
        the id once retention trimmed the one received; with the attempt,
        never the lease of the message another consumer of the same
        principal took once this one's ran out: the server refuses either
        (``ACK_NOT_ALLOWED``) and settles nothing. With the id alone it
        settles whichever message holds the id now, under whichever lease
        the principal holds."""
        self._check_usable()
        await self._call({"op": "ack", "subject": subject, **_settle_body(message, sequence, attempt)}, "ok")

    async def nack(
        self,
        subject: str,
        message: str | Mapping[str, Any],
        delay: float | None = None,
        *,
        sequence: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """Give back a message taken with :meth:`receive`, to come again
        after ``delay`` seconds (at most 12 hours, the broker's bound; NaN is
        ``ValueError``, anything but a number ``TypeError``); ``message``,
        ``sequence`` and ``attempt`` as for :meth:`ack` (a late nack naming
        an older attempt does not hand the message out again)."""
        self._check_usable()
        f: dict[str, Any] = {"op": "nack", "subject": subject, **_settle_body(message, sequence, attempt)}
        delay_ms = _delay_ms(delay)  # NaN or not a number: raised before anything is sent
        if delay_ms is not None:
            f["delayMs"] = delay_ms
        await self._call(f, "ok")

    async def replay(
        self,
        subject: str,
        *,
        reason: str | None = None,
        from_sequence: int | None = None,
        to_sequence: int | None = None,
        max: int | None = None,
    ) -> list[dict[str, Any]]:
        """Retained messages of ``subject`` in sequence order (``REPLAY_DENIED``
        when the subject, contract or policy does not allow it); one whose
        ``hops`` is no broker's is left out, its ``ProtocolError`` to
        ``on_error``."""
        f: dict[str, Any] = {"op": "replay", "subject": subject}
        for k, v in (("reason", reason), ("fromSequence", from_sequence), ("toSequence", to_sequence), ("max", max)):
            if v is not None:
                f[k] = v
        return _pulled(await self._call(f, "messages"), "replay", self._report)

    async def ping(self, timeout: float = 10.0) -> None:
        """An application-level liveness check."""
        await self._call({"op": "ping"}, "pong", timeout=timeout)

    # --- closing ---

    async def close(self, timeout: float = 5.0) -> None:
        """Finish the handlers running and their acks (up to ``timeout``
        seconds), wait for publishes in flight, then close the connection.
        Deliveries not yet handed over are let go at once (iterators end):
        each subscription is unsubscribed before the connection closes, so
        they go back to the server without an attempt spent. Every later
        call raises ``SessionClosedError``. Idempotent.

        It never waits for the handler that calls it (or a task that handler
        starts): from a handler it returns once everything else is done, and
        the rest follows in the background: the handler's return answers its
        delivery, then the connection closes (at the latest ``timeout``
        seconds on)."""
        if self._state == "closed":
            return
        if self._state == "closing":
            # Another close() is under way: wait for it (bounded by this
            # one's timeout), so that a return means the connection is
            # closed. Not from a handler of this session's: the close under
            # way waits for that handler (until its own timeout).
            if self._closed_fut is not None and _caller_slot() is None:
                await _bounded(asyncio.shield(self._closed_fut), timeout)
            return
        # One deadline for every stage: close() returns within timeout (a
        # server that answers nothing cannot make each stage take its own).
        deadline = self._loop.time() + timeout
        was_failed = self._state == "failed"
        self._state = "closing"
        self._closed_fut = self._loop.create_future()
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()
        renewing = self._stop_renewing()
        if renewing is not None:
            await _bounded(renewing, self._left(deadline))
        own = _caller_slot()
        subs = list(self._all_subs)
        for s in subs:
            s._stop()
        if subs:
            await _bounded(asyncio.gather(*(s._settled_except(own) for s in subs)), self._left(deadline))
        inflight = [f for f in self._pub_inflight if not f.done()] + [f for _, _, f in self._pubq]
        if inflight and not was_failed and self._left(deadline) > 0:
            await asyncio.wait(inflight, timeout=self._left(deadline))
        if own is not None and own.sub in subs and own in own.sub._slots:
            # The caller's own delivery is answered once it returns: waiting
            # for it here would wait until the timeout, then cancel itself.
            # It gets the whole timeout again: it waits for the caller's return.
            self._closing_task = self._loop.create_task(
                self._finish_close(subs, max(deadline, self._loop.time() + timeout)))
            return
        await self._finish_close(subs, deadline)

    def _left(self, deadline: float) -> float:
        return max(0.0, deadline - self._loop.time())

    async def _finish_close(self, subs: list[Subscription], deadline: float) -> None:
        if subs:
            await _bounded(asyncio.gather(*(s._idle() for s in subs)), self._left(deadline))
        for s in subs:
            s._cancel_workers()  # past the timeout: a handler still running is cancelled
        # Unsubscribed before the connection closes: what was not handed over
        # goes back without an attempt spent (a closed connection spends one).
        live = [s for s in subs if not s.ended and s.sid and s._sid_gen == self._gen and s.sid not in self._gone]
        if live and self._ws is not None:
            self._gone.extend(s.sid for s in live)
            await _bounded(asyncio.gather(*(self._quiet_unsubscribe(s.sid) for s in live)), self._left(deadline))
        err = SessionClosedError("SESSION_CLOSED", "the session is closed")
        self._fail_publishes(err)
        # The batch on the wire, unanswered: failed too, not left pending
        # when the publisher is cancelled below.
        for f in self._pub_inflight:
            if not f.done():
                f.set_exception(err)
        for s in subs:
            s._end(None)
        if self._pub_task is not None:
            self._pub_task.cancel()
        if self._ws is not None:
            try:
                await asyncio.wait_for(self._ws.close(1000), self._left(deadline))
            except Exception:
                # Past the deadline: the socket is dropped without the closing handshake.
                if self._ws.transport is not None:
                    self._ws.transport.abort()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        if self._reader is not None:
            self._reader.cancel()
        self._state = "closed"
        self._connected.set()
        if self._closed_fut is not None and not self._closed_fut.done():
            self._closed_fut.set_result(None)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _log_on_error_failure(t: "asyncio.Future[Any]") -> None:
    if not t.cancelled() and t.exception() is not None:
        log.error("pigeon: on_error raised", exc_info=t.exception())


async def _bounded(aw: "asyncio.Future[Any]", timeout: float) -> None:
    """Wait for aw, at most timeout seconds (then it is cancelled)."""
    fut = asyncio.ensure_future(aw)
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: never logged
    _, pending = await asyncio.wait({fut}, timeout=timeout)
    if pending:
        fut.cancel()


# The data of a message that has none: the server keeps {} (a fresh one is
# made for each decision).
_NO_DATA = object()
_DECODE = json.JSONDecoder().raw_decode


def _encode(message: Any) -> tuple[str, Any]:
    """The JSON text of ``message`` for a publish frame, and a copy of the
    data the server keeps for it, which a brief answer leaves out: its data
    decoded from the text sent (a value of its own, not the caller's), or
    ``_NO_DATA`` when it has none ({}). The data is written first, so that it
    is encoded once and decoded from there. Member names are sent as given:
    the server refuses a member whose name differs from a field's only in
    case ("Data"), ENVELOPE_INVALID, for this message alone."""
    if not isinstance(message, dict) or "data" not in message:
        return _dumps(message), _NO_DATA
    m = {"data": message["data"]}
    m.update(message)  # "data" keeps its place, first
    enc = _dumps(m)
    data, _ = _DECODE(enc, 8)  # after '{"data":'
    return enc, data


def _decided(f: Any, data: Any, what: str = "the server's decision") -> Decision:
    """The decision of a brief answer: an accepted message without data gets
    the data sent (see _encode). An answer that carries data (a duplicate,
    whose data is the original's; a server that ignores brief) keeps it.
    ``ProtocolError`` for one no broker sends (:meth:`Decision.from_wire`,
    ``what`` naming it)."""
    d = Decision.from_wire(f, what)
    if d.status == "accepted" and "data" not in d.message:
        d.message["data"] = {} if data is _NO_DATA else data
    return d


def _unread_answer(e: ProtocolError, n: int) -> ProtocolError:
    """The error of the ``n`` publishes of one frame whose answer the client
    could not read (``e``: a frame refused whole, an answer of another op,
    an error it cannot decode, a ``decisions`` answer whose ``results`` is
    no list of one result per message): ``e``'s code and details, saying
    that each message may have been accepted all the same, as the Go
    client's unreadAnswer does."""
    what = "this message" if n == 1 else f"these {n} messages"
    each = "the message" if n == 1 else "each message"
    err = ProtocolError(e.code, f"the server's answer for {what} could not be read ({e.message}): {each} may have "
                        "been accepted", status=e.status, details=e.details)
    err.__cause__ = e
    return err


def _slot_error(e: Any, what: str) -> PigeonError:
    """The error a ``decisions`` result's ``error`` (``what`` names the
    result) refuses its message with, when it is one the broker sends, as
    the Go client decodes it (``wire.Error``): an object whose ``code`` is
    a string, whose ``message`` is absent, ``null`` or a string and whose
    ``details`` is absent, ``null`` or an object. Anything else fails the
    publish with ``BAD_REQUEST``, saying that the message may have been
    accepted (the Go client's unreadResult): it is not the broker's
    refusal."""
    why = None
    if not isinstance(e, dict):
        why = f"an error that is not an object ({type(e).__name__})"
    elif not isinstance(e.get("code"), str):
        why = f"an error whose code is not a string ({type(e.get('code')).__name__})"
    elif e.get("message") is not None and not isinstance(e["message"], str):
        why = f"an error whose message is not a string ({type(e['message']).__name__})"
    elif e.get("details") is not None and not isinstance(e["details"], dict):
        why = f"an error whose details is not an object ({type(e['details']).__name__})"
    if why is not None:
        return ProtocolError("BAD_REQUEST", f"{what} has {why}: the message may have been accepted",
                             details={"member": "error"})
    return error_from(e)


class _RawFrame:
    """A frame rendered as text without its closing id (publishes are
    encoded once, when queued)."""

    __slots__ = ("head",)

    def __init__(self, head: str) -> None:
        self.head = head
