"""The HTTP client (synchronous, standard library only).

Concurrency contract: an :class:`HttpClient` holds its credential, region and
the id of the contract it negotiated last; each call is one HTTP request on
a fresh connection, so one client may be used from several threads (calls
that change the held contract, :meth:`HttpClient.connect`, race as plain
attribute writes do). From asyncio code, call it through
``asyncio.to_thread``.

Every refusal raises the same typed errors as the WebSocket client, with the
HTTP ``status`` the server answered; a server that cannot be reached or
closes mid-request raises :class:`~pigeon_client.errors.TransportError`.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .crypto import is_key_entry, select_key, verify_message_with_keys
from .errors import (
    InvalidError,
    PigeonError,
    ProtocolError,
    RequestTimeoutError,
    TransportError,
    error_from,
    escaping_logger,
    new_error,
)
from .model import (
    ReceivedMessage,
    _member,
    _object,
    _pulled,
    _request_of,
    _settle_negative_zeros,
    _unanswering_reply,
    _unheld_message,
)
from .subscription import _delay_ms, _settle_body
from .ws import (
    Contract,
    Decision,
    _check_header_value,
    _check_ttl,
    _dumps,
    _frame_decoder,
    _loads_frame,
    _lone_surrogate,
    _spells_negative_zero,
)

__all__ = ["HttpClient", "KeyDirectory", "ReceiptsPage", "MAX_ACCOUNT_KEYS", "MAX_PAGE_RECORDS", "RECEIPTS_MAX_WAIT",
           "RECEIPTS_RETRIES", "SEAL_MAX_AGE", "VERIFY_MAX_AGE"]

# Control characters escaped: the text logged may be a server's.
log = escaping_logger("pigeon_client")

# Headers that carry the caller's credential or contract: kept on a redirect
# only to the same origin (scheme, host and port), as browsers and Go do.
_CREDENTIAL_HEADERS = ("Authorization", "X-pigeon-contract")


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urllib.parse.urlsplit(url)
    return u.scheme.lower(), (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme.lower())


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, without the credential when the origin changes
    (urllib itself copies every header to any host, https to http included)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new._deadline = getattr(req, "_deadline", None)  # the call's, across its redirects
            if _origin(newurl) != _origin(req.full_url):
                for h in _CREDENTIAL_HEADERS:
                    new.remove_header(h)
        return new


MAX_RESPONSE_BYTES = 256 << 20
"""The largest response body an :class:`HttpClient` reads (256 MiB, the
WebSocket client's frame bound): a server or proxy that sends more (or
without end) fails the call with ``PAYLOAD_TOO_LARGE`` once the bound is
passed, rather than fill the memory. ``max_response_bytes`` changes it."""


class _TooLarge(Exception):
    pass


MAX_PAGE_RECORDS = 10_000
"""The most records one page of the audit log (:meth:`HttpClient.audit`),
the quarantine (:meth:`HttpClient.quarantine`) or a message's receipts
(:meth:`HttpClient.receipts`) holds: the server's default and cap of
``max`` (``maxRecords`` in server/routes.go). An answer listing more is no
server's: it is refused, ``ProtocolError`` (``BAD_REQUEST``), once the entry
past it is reached, before that entry or any after it is built (256 MiB of
``{}`` entries is about 89 million dicts, several GiB)."""

MAX_ACCOUNT_KEYS = 64
"""The most keys an account publishes (``pigeon.MaxAccountKeys``,
signature.go; the server loads no more): a :meth:`HttpClient.keys` answer
listing more is refused as a page past :data:`MAX_PAGE_RECORDS` is."""

_SPACE = re.compile(r"[ \t\n\r]*")


class _Longer(Exception):
    """A listing answer whose list holds more entries than the server sends."""


def _scan(scan: Callable[[str, int], tuple[Any, int]], text: str, i: int) -> tuple[Any, int]:
    """The JSON value at ``text[i]`` and where it ends, as json reads one."""
    try:
        return scan(text, i)
    except StopIteration as e:
        raise json.JSONDecodeError("Expecting value", text, e.value) from None


def _entries(text: str, i: int, scan: Callable[[str, int], tuple[Any, int]], most: int) -> tuple[list[Any], int]:
    """The entries of the JSON array whose ``[`` is just before ``text[i]``,
    and where it ends; ``_Longer`` as it comes to an entry past ``most``,
    which is not read."""
    out: list[Any] = []
    i = _SPACE.match(text, i).end()
    if text.startswith("]", i):
        return out, i + 1
    while True:
        if len(out) == most:
            raise _Longer()
        v, i = _scan(scan, text, i)
        out.append(v)
        i = _SPACE.match(text, i).end()
        if text.startswith(",", i):
            i = _SPACE.match(text, i + 1).end()
        elif text.startswith("]", i):
            return out, i + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)


def _loads_listing(text: str, member: str, most: int) -> tuple[Any, list[tuple[dict, str]]]:
    """:func:`~pigeon_client.ws._loads_frame` of a listing answer, an object
    whose member ``member`` is a list of at most ``most`` entries: json.loads
    builds every entry before the list can be counted, so the outermost
    object is read here, each of its members by json's own scanner, and the
    entries of ``member``'s list one at a time; ``_Longer`` as it comes to
    an entry past ``most``, which is not read, nor anything after it. Text
    that is not an object is read by ``_loads_frame`` (the shape check
    refuses it); text that is not JSON raises ``ValueError``, as there."""
    dups: list[tuple[dict, str]] = []
    negative_zero = _spells_negative_zero(text)
    dec = _frame_decoder(dups, negative_zero)
    scan = dec.scan_once
    i = _SPACE.match(text).end()
    if not text.startswith("{", i):
        return _loads_frame(text)
    pairs: list[tuple[str, Any]] = []
    i = _SPACE.match(text, i + 1).end()
    if not text.startswith("}", i):
        while True:
            if not text.startswith('"', i):
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            name, i = json.decoder.scanstring(text, i + 1)
            i = _SPACE.match(text, i).end()
            if not text.startswith(":", i):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _SPACE.match(text, i + 1).end()
            if name == member and text.startswith("[", i):
                value, i = _entries(text, i + 1, scan, most)
            else:
                value, i = _scan(scan, text, i)
            pairs.append((name, value))
            i = _SPACE.match(text, i).end()
            if text.startswith(",", i):
                i = _SPACE.match(text, i + 1).end()
            elif text.startswith("}", i):
                break
            else:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
    end = _SPACE.match(text, i + 1).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    v = dec.object_pairs_hook(pairs)
    if negative_zero:
        _settle_negative_zeros(v)
    return v, dups


RECEIPTS_RETRIES = 5
"""The most times :meth:`HttpClient.iter_receipts` waits out a 429 for one
page: the next 429 for that page ends the walk with it."""

RECEIPTS_MAX_WAIT = 30.0
"""The longest :meth:`HttpClient.iter_receipts` waits on one 429 (seconds):
a longer ``Retry-After`` is waited this long, then the page asked again."""

_DELAY_SECONDS = re.compile(r"\s*([0-9]{1,10})\s*")


def _retry_after(v: str | None) -> float | None:
    """A ``Retry-After`` of delay-seconds (RFC 9110); ``None`` for any other
    (absent, an HTTP date, garbage)."""
    m = _DELAY_SECONDS.fullmatch(v) if isinstance(v, str) else None
    return float(m.group(1)) if m else None


def _retry_wait(e: PigeonError) -> float:
    """How long to wait before asking again after the 429 ``e``: the
    answer's ``Retry-After`` (seconds), else the error's
    ``details.retryAfterMs`` (the broker sends both), else 1 s; at most
    :data:`RECEIPTS_MAX_WAIT`."""
    told = getattr(e, "_retry_after", None)
    if told is None:
        ms = e.details.get("retryAfterMs")
        ok = type(ms) in (int, float) and ms == ms and 0 <= ms < float("inf")
        told = ms / 1000 if ok else 1.0
    return min(told, RECEIPTS_MAX_WAIT)


def _read_bounded(resp: Any, limit: int) -> bytes:
    """The body of ``resp``, at most ``limit`` bytes (``_TooLarge`` beyond,
    without reading the rest)."""
    n = resp.length  # Content-Length, when the response names one
    if n is not None and n > limit:
        raise _TooLarge()
    raw = resp.read(limit + 1)
    if len(raw) > limit:
        raise _TooLarge()
    if n is not None and len(raw) < n:
        # The connection ended inside the body: a transport failure, not
        # a body that is not JSON.
        raise http.client.IncompleteRead(raw, n - len(raw))
    return raw


class _Deadline:
    """The end of one call: once it passes, the sockets the call opened
    (its redirects' too) are shut down, so that a server that answers a
    byte at a time, each within the socket timeout, cannot hold the call
    past it. One watchdog thread serves every call's deadline."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.expired = False
        self._socks: list[socket.socket] = []
        _watchdog.add(self)

    def expire(self) -> None:
        with _watchdog.lock:
            self.expired = True
            socks, self._socks = self._socks, []
        for sock in socks:
            _shut(sock)

    def watch(self, sock: socket.socket) -> None:
        with _watchdog.lock:
            expired = self.expired
            if not expired:
                self._socks.append(sock)
        if expired:
            _shut(sock)

    def cancel(self) -> None:
        _watchdog.remove(self)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Watchdog:
    """Expires deadlines as they pass, on one daemon thread started with
    the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._pending: dict[int, _Deadline] = {}
        self._thread: threading.Thread | None = None

    def add(self, d: _Deadline) -> None:
        with self.lock:
            self._pending[id(d)] = d
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pigeon-http-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def remove(self, d: _Deadline) -> None:
        with self.lock:
            self._pending.pop(id(d), None)

    def pending(self) -> int:
        with self.lock:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                due = [d for d in self._pending.values() if d.at <= now]
                for d in due:
                    del self._pending[id(d)]
                if not due:
                    nxt = min((d.at for d in self._pending.values()), default=None)
                    self._wake.wait(None if nxt is None else nxt - now)
                    continue
            for d in due:
                d.expire()


_watchdog = _Watchdog()


def _watched(cls: type[http.client.HTTPConnection], deadline: _Deadline | None) -> Any:
    """A connection class that puts its sockets under deadline."""
    if deadline is None:
        return cls

    def make(host: str, **kw: Any) -> http.client.HTTPConnection:
        conn = cls(host, **kw)
        connect = conn.connect

        def watched_connect() -> None:
            if deadline.expired:
                raise socket.timeout("the call's timeout passed")
            connect()
            if conn.sock is not None:
                deadline.watch(conn.sock)

        conn.connect = watched_connect  # type: ignore[method-assign]
        return conn

    return make


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):  # type: ignore[no-untyped-def]
        return self.do_open(_watched(http.client.HTTPConnection, getattr(req, "_deadline", None)), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):  # type: ignore[no-untyped-def]
        return self.do_open(_watched(http.client.HTTPSConnection, getattr(req, "_deadline", None)), req,
                            context=self._context)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}), _RedirectHandler(), _HTTPHandler(),
                                        _HTTPSHandler())


def _q(segment: str) -> str:
    """Percent-encode one path segment (principal ids hold ``/`` and ``:``).
    An empty segment, ``.`` or ``..`` is refused (``INVALID_ARGUMENT``): URL
    parsers and the server's router remove dot segments, so
    ``remove_role("..", "admin")`` would name ``/v1/roles/admin`` (the
    TypeScript client's fetch sent DELETE there)."""
    if segment in ("", ".", ".."):
        raise InvalidError("INVALID_ARGUMENT", f"{segment!r} cannot be a path segment")
    return urllib.parse.quote(segment, safe="")


_U64_MAX = (1 << 64) - 1
"""The largest number of a receipt cursor or receipt: the server's are
unsigned 64-bit."""

_CURSOR = re.compile(r"([0-9]{1,20})(?::([0-9]{1,20}))?")
"""A receipt cursor as the server writes and reads it: an audit sequence, or
one, a colon and a message sequence, in ASCII decimal."""


@dataclass(frozen=True)
class ReceiptsPage:
    """One page of a message's receipts (:meth:`HttpClient.receipts`)."""

    receipts: list[dict[str, Any]]
    """Each delivery, acknowledgement, nack, exhaustion, replay or reply of
    the message the audit log records, as the server sent it (``event``,
    ``time``, ``principal``, ``contractId``, ``ref``, ``auditSeq``,
    ``subject``, ``seq``), in order of the record (``auditSeq``), then of
    the message's sequence (``seq``)."""
    next: str | None = None
    """Present when more receipts are recorded than the page holds: ask
    again with ``after`` set to it."""


def _receipt_cursor(s: Any) -> tuple[int, int] | None:
    """The place ``s`` names in the order of receipts, ``(auditSeq, seq)``
    (an audit sequence alone is after every receipt of its record); ``None``
    unless it is a cursor the server reads."""
    m = _CURSOR.fullmatch(s) if isinstance(s, str) else None
    if m is None:
        return None
    c = (int(m[1]), _U64_MAX if m[2] is None else int(m[2]))
    return c if c[0] <= _U64_MAX and c[1] <= _U64_MAX else None


def _held_count(v: Any) -> bool:
    """An integer of 0 to 2^64-1 (a bool, which Python takes for an int, is none)."""
    return type(v) is int and 0 <= v <= _U64_MAX


def _receipt_problem(r: Any) -> str | None:
    """Why ``r`` is not a receipt of the server's, or ``None`` when it is one."""
    if not isinstance(r, dict):
        return "is not an object"
    for k in ("event", "time", "principal", "contractId"):
        if not isinstance(r.get(k), str):
            return f"has no string {k}"
    for k in ("ref", "subject"):
        if r.get(k) is not None and not isinstance(r[k], str):
            return f"has a {k} that is not a string"
    if not _held_count(r.get("auditSeq")):
        return "has an auditSeq that is not an integer of 0 to 2^64-1"
    if r.get("seq") is not None and not _held_count(r["seq"]):
        return "has a seq that is not an integer of 0 to 2^64-1"
    return None


def _listed(p: Any, member: str, what: str) -> list[dict[str, Any]]:
    """The list ``member`` of the answer ``p`` to ``what`` (``"GET
    /v1/quarantine"``): a list of objects, as the route gives it (absent or
    ``null``, which a server omitting an empty list sends: none), else
    ``ProtocolError``, as the TypeScript client refuses it. A string would
    be listed letter by letter, an object by its names, a number not at all
    (``TypeError``), rather than refused. The list's counterpart of
    :func:`~pigeon_client.model._member`, through which every other answer
    is read."""
    v = _list_of(p, member, what)
    for i, r in enumerate(v):
        if not isinstance(r, dict):
            raise ProtocolError("BAD_REQUEST", f"{what}: the answer has no {member}: entry {i} is not an object",
                                details={"index": i, "entry": type(r).__name__})
    return v


def _list_of(p: Any, member: str, what: str) -> list[Any]:
    """The list ``member`` of the answer ``p`` to ``what``, as
    :func:`_listed` reads it, its entries left for the caller to read."""
    v = _object(p, f"{what}: the answer holding {member}").get(member)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError("BAD_REQUEST", f"{what}: the answer has no {member}: it is not a list",
                            details={member: type(v).__name__})
    return v


def _contract(p: Any, what: str) -> Contract:
    """The contract of the answer ``p`` to ``what`` (``"POST
    /v1/contracts"``), or ``ProtocolError`` (see :func:`~pigeon_client.model._object` and
    :meth:`Contract.from_wire`)."""
    return Contract.from_wire(_object(p, f"{what}: the answer").get("contract"), f"{what}: the answer's contract")


def _receipts_page(p: Any, after: str | None, what: str) -> ReceiptsPage:
    """The page a receipts answer ``p`` holds (see :meth:`HttpClient.receipts`),
    or ``ProtocolError``: an answer that is no object, ``receipts`` that is
    no list, a receipt that is not the server's or out of order (not after
    ``after``, the cursor asked, or the one before it), or a ``next`` that
    is no cursor, comes with no receipt, or comes before the page's last."""

    def bad(why: str, **details: Any) -> ProtocolError:
        return ProtocolError("BAD_REQUEST", f"{what}: the answer has {why}", details=details)

    if not isinstance(p, dict):
        raise bad("no receipts: it is not an object")
    rs = p.get("receipts")
    if rs is None:
        rs = []
    if not isinstance(rs, list):
        raise bad(f"receipts that is not a list ({type(rs).__name__})")
    last = _receipt_cursor(after) if after else None
    for i, r in enumerate(rs):
        why = _receipt_problem(r)
        if why is not None:
            raise bad(f"a receipt (entry {i}) that {why}", index=i)
        c = (r["auditSeq"], r.get("seq") or 0)
        if last is not None and not last < c:
            before = "the cursor asked" if i == 0 else "the one before it"
            raise bad(f"a receipt (entry {i}) that does not come after {before}", index=i,
                      auditSeq=r["auditSeq"], seq=r.get("seq"))
        last = c
    nxt = p.get("next")
    if nxt is None:
        return ReceiptsPage(rs)
    cursor = _receipt_cursor(nxt)
    if cursor is None:
        raise bad("a next that is not a cursor (digits, or digits, a colon and digits, each at most 2^64-1)")
    if not rs or last is None:
        raise bad("a next and no receipt: the next page would ask the same again")
    if cursor < last:
        raise bad(f"a next ({nxt}) before the page's last receipt: the next page would repeat receipts")
    return ReceiptsPage(rs, nxt)


class HttpClient:
    """A client of the HTTP API at ``base_url`` (``http://127.0.0.1:8787``)."""

    def __init__(self, base_url: str, token: str | None, *, region: str | None = None, timeout: float = 30.0,
                 max_response_bytes: int = MAX_RESPONSE_BYTES,
                 on_error: Callable[[PigeonError], Any] | None = None) -> None:
        """``on_error`` gets the errors that fail no call: a received or
        replayed message left out of an answer (see :meth:`receive`); else
        they are logged."""
        u = base_url.rstrip("/")
        if u.startswith("ws://") or u.startswith("wss://"):
            u = "http" + u[2:]
        if u.endswith("/v1/ws"):
            u = u[: -len("/v1/ws")]
        self.base_url = u
        self.token = token
        self.region = region
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.contract: Contract | None = None
        self.on_error = on_error

    # --- plumbing ---

    def _do(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        contract: bool = False,
        timeout: float | None = None,
        listed: tuple[str, int] | None = None,
    ) -> tuple[int, Any]:
        """One call: its status and JSON answer, else its error. With
        ``listed`` (a member and a count), a 2xx answer whose member is a
        list of more entries is refused, ``ProtocolError``, before they are
        built (see :func:`_loads_listing`)."""
        url = self.base_url + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": "application/json"}
        if self.token:
            _check_header_value("token", self.token)
            headers["Authorization"] = "Bearer " + self.token
        if self.region:
            _check_header_value("region", self.region)
            headers["x-pigeon-region"] = self.region
        if contract and self.contract is not None:
            headers["x-pigeon-contract"] = self.contract.id
        data = None
        if body is not None:
            # A caller's NaN or Infinity: ValueError here, never sent (it is
            # not JSON); a string holding a lone surrogate: INVALID_UTF8.
            data = _dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        limit = self.max_response_bytes
        seconds = timeout or self.timeout
        deadline = _Deadline(seconds) if seconds else None  # None: no bound, as urllib's
        req._deadline = deadline  # type: ignore[attr-defined]
        try:
            return self._send(req, method, path, seconds, limit, listed)
        except TransportError:
            # The socket's own timeout (the same seconds) may end the call
            # before the watchdog thread marks the deadline: the clock
            # says whether it has passed.
            if deadline is not None and (deadline.expired or time.monotonic() >= deadline.at):
                raise RequestTimeoutError("REQUEST_TIMEOUT", f"{method} {path}: no whole answer within "
                                          f"{seconds:g} s (timeout)", status=504) from None
            raise
        finally:
            if deadline is not None:
                deadline.cancel()

    def _send(self, req: urllib.request.Request, method: str, path: str, seconds: float | None,
              limit: int, listed: tuple[str, int] | None = None) -> tuple[int, Any]:
        retry_after = None  # a 429's Retry-After, kept on its error for iter_receipts
        try:
            with _NO_PROXY.open(req, timeout=seconds) as resp:
                status, raw = resp.status, _read_bounded(resp, limit)
        except urllib.error.HTTPError as e:
            status = e.code
            retry_after = _retry_after(e.headers.get("Retry-After")) if status == 429 and e.headers else None
            try:
                raw = _read_bounded(e, limit)
            except _TooLarge:
                raw = None
            except Exception as ex:
                raise TransportError("CONNECTION_FAILED", f"{method} {path}: {ex}", status=status) from None
            if raw is None:
                raise ProtocolError("BAD_REQUEST", f"{method} {path}: HTTP {status} with a body larger than "
                                    f"{limit} bytes", status=status) from None
        except _TooLarge:
            raise error_from({"code": "PAYLOAD_TOO_LARGE",
                              "message": f"{method} {path}: the response is larger than {limit} bytes "
                                         "(max_response_bytes)"}) from None
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
            raise TransportError("CONNECTION_FAILED", f"{method} {path}: {e}", status=503) from None
        # Read as a frame is: UTF-8 (json.loads of bytes would take the
        # UTF-8 of a lone surrogate), and an object with two members of one
        # name (json.loads keeps the last) or a string holding a lone
        # surrogate refused, the server's error too.
        why = None
        try:
            text = raw.decode("utf-8") if raw else ""
            if not text:
                payload, dups = None, []
            elif listed is not None and status < 400:
                payload, dups = _loads_listing(text, *listed)
            else:
                payload, dups = _loads_frame(text)
            if dups:
                why = f"the member {dups[0][1]!r} twice in one object"
            elif _lone_surrogate(text):
                why = "a string holding a lone surrogate"
        except _Longer:
            member, most = listed or ("", 0)
            raise ProtocolError("BAD_REQUEST", f"{method} {path}: the answer lists more than {most} {member}, more "
                                "than the server sends in one answer", status=status,
                                details={"member": member, "most": most}) from None
        except (ValueError, RecursionError):
            if status >= 400:
                payload = None  # refused by something else than the broker: below
            else:
                raise ProtocolError("BAD_REQUEST", f"{method} {path}: HTTP {status} with a body that is not JSON",
                                    status=status) from None
        if why is not None:
            raise ProtocolError("BAD_REQUEST", f"{method} {path}: HTTP {status} with {why}", status=status)
        if status >= 400:
            err = error_from(payload, status)
            if isinstance(err, ProtocolError):
                # Not the broker's error body (a proxy's or load balancer's
                # page: 502, 503, 504...): the broker was not reached, as
                # the WebSocket dial reports a refused upgrade.
                err = TransportError("CONNECTION_FAILED", f"{method} {path}: HTTP {status} without an error "
                                     "of the broker's", status=status)
            err._retry_after = retry_after  # type: ignore[attr-defined]
            raise err
        return status, payload

    def _need_contract(self) -> None:
        if self.contract is None:
            raise error_from({"code": "CONTRACT_REQUIRED", "message": "call connect first"})

    # --- the reference surface ---

    def health(self) -> dict[str, Any]:
        """The server's health (public): ``{"ok": true, ...}``;
        ``ProtocolError`` for an answer that is not an object."""
        return _object(self._do("GET", "/health")[1], "GET /health: the answer")

    def connect(self, subjects: Iterable[str], *, ttl: float | None = None) -> Contract:
        """Negotiate a contract (``POST /v1/contracts``); later calls use it.
        An answer whose contract is not of the route's shape (see
        :meth:`Contract.from_wire`) is ``ProtocolError``, and the contract
        held stays."""
        _check_ttl(ttl)
        body: dict[str, Any] = {"subjects": list(subjects)}
        if ttl is not None:
            body["ttlMs"] = max(1, int(ttl * 1000))
        _, p = self._do("POST", "/v1/contracts", body)
        self.contract = _contract(p, "POST /v1/contracts")
        return self.contract

    def revoke(self, contract_id: str | None = None) -> None:
        """Revoke a contract this principal holds (default: the held one)."""
        cid = contract_id or (self.contract.id if self.contract else None)
        if not cid:
            raise ValueError("no contract to revoke")
        self._do("DELETE", "/v1/contracts/" + _q(cid))

    def get_contract(self, contract_id: str) -> Contract:
        """A contract this principal holds; ``ProtocolError`` as :meth:`connect`."""
        path = "/v1/contracts/" + _q(contract_id)
        return _contract(self._do("GET", path)[1], f"GET {path}")

    def publish(self, message: dict[str, Any]) -> Decision:
        """Publish one message: ``accepted`` (202) or ``duplicate`` (200)."""
        self._need_contract()
        _, p = self._do("POST", "/v1/messages", message, contract=True)
        return Decision.from_wire(p, "POST /v1/messages: the answer")

    def request(self, message: dict[str, Any], *, timeout: float = 30.0) -> dict[str, Any]:
        """Publish a request and return the reply message
        (``POST /v1/requests``); ``RequestTimeoutError`` (504) when none comes.
        An id is drawn for a request without one, and a reply that does not
        answer the request is refused, as
        :meth:`pigeon_client.ws.Session.request` does (``message`` itself is
        not changed)."""
        self._need_contract()
        req = _request_of(message)
        body = {"message": req, "timeoutMs": max(1, int(timeout * 1000))}
        _, p = self._do("POST", "/v1/requests", body, contract=True, timeout=max(self.timeout, timeout + 10))
        if not isinstance(p, dict) or not isinstance(p.get("message"), dict):
            raise ProtocolError("BAD_REQUEST", "reply without a message")
        unheld = _unheld_message(p["message"], "reply") or _unanswering_reply(req, p["message"])
        if unheld is not None:
            raise unheld
        return p["message"]

    def _report(self, err: PigeonError) -> None:
        """An error that fails no call: to ``on_error``, else the log."""
        if self.on_error is None:
            log.warning("pigeon: %s", err)
            return
        try:
            self.on_error(err)
        except Exception:
            log.exception("pigeon: on_error raised")

    def receive(self, subject: str, *, max: int | None = None, ack: str | None = None) -> list[ReceivedMessage]:
        """Pull messages; ``ack="explicit"`` leases them until :meth:`ack`/:meth:`nack`.
        Each is a :class:`~pigeon_client.model.ReceivedMessage`: the
        message's ``dict``, with ``attempt`` the attempt of its lease (0:
        not leased, as by an automatic receive), which :meth:`ack` and
        :meth:`nack` of it send back. An answer whose ``attempts`` is not a
        list in step with the messages is ``ProtocolError`` (nothing is
        handed out; the server's ack wait gives leased messages back); a
        message whose attempt is not an integer of 1 to 2^31-1
        (:data:`~pigeon_client.model.MAX_ATTEMPT`), whose ``sequence`` is
        absent or no broker's, or whose ``hops`` is no broker's is left out,
        its ``ProtocolError`` to ``on_error``, the others handed out."""
        self._need_contract()
        body: dict[str, Any] = {}
        if max is not None:
            body["max"] = max
        if ack is not None:
            body["ack"] = ack
        _, p = self._do("POST", f"/v1/subjects/{_q(subject)}/receive", body, contract=True)
        return _pulled(p, "receive", self._report)

    def ack(
        self, subject: str, message: str | Mapping[str, Any], *, sequence: int | None = None, attempt: int | None = None
    ) -> None:
        """Settle a message leased by an explicit receive: pass the message
        received (its id, ``sequence`` and lease ``attempt`` are sent), or
        its id with ``sequence=`` and ``attempt=``. With the sequence, a late
        ack never settles a newer message published under the id once
        retention trimmed the one received; with the attempt, never the lease
        another worker of the same principal took once this one's ran out
        (403 ``ACK_NOT_ALLOWED`` for either, and nothing is settled)."""
        self._need_contract()
        self._do("POST", f"/v1/subjects/{_q(subject)}/ack", _settle_body(message, sequence, attempt), contract=True)

    def nack(
        self,
        subject: str,
        message: str | Mapping[str, Any],
        *,
        delay: float | None = None,
        sequence: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """Give back a leased message, due again after ``delay`` seconds;
        ``message``, ``sequence`` and ``attempt`` as for :meth:`ack`."""
        self._need_contract()
        body: dict[str, Any] = _settle_body(message, sequence, attempt)
        delay_ms = _delay_ms(delay)  # NaN or not a number: raised before anything is sent
        if delay_ms is not None:
            body["delayMs"] = delay_ms
        self._do("POST", f"/v1/subjects/{_q(subject)}/nack", body, contract=True)

    def replay(
        self,
        subject: str,
        *,
        reason: str | None = None,
        from_sequence: int | None = None,
        to_sequence: int | None = None,
        max: int | None = None,
    ) -> list[dict[str, Any]]:
        self._need_contract()
        body = {
            k: v
            for k, v in (("reason", reason), ("fromSequence", from_sequence), ("toSequence", to_sequence), ("max", max))
            if v is not None
        }
        _, p = self._do("POST", f"/v1/subjects/{_q(subject)}/replay", body, contract=True)
        return _pulled(p, "replay", self._report)

    def subjects(self) -> list[dict[str, Any]]:
        """The catalog (public)."""
        return _listed(self._do("GET", "/v1/subjects")[1], "subjects", "GET /v1/subjects")

    def subject(self, name: str) -> dict[str, Any]:
        """One subject of the catalog (public); ``ProtocolError`` for an
        answer whose ``subject`` is not an object with a string ``name``."""
        path = "/v1/subjects/" + _q(name)
        return _member(self._do("GET", path)[1], "subject", f"GET {path}", ("name",))

    def audit(self, *, from_: int | None = None, max: int | None = None) -> list[dict[str, Any]]:
        """One page of the hash-chained audit records, oldest first (role
        ``auditor``): at most ``max`` from audit sequence ``from_`` on; the
        next page is ``from_`` set past the page's last ``seq``. Each call
        asks for one page and holds it alone (its answer read up to
        ``max_response_bytes``): nothing gathers records across pages.
        ``ProtocolError`` for an answer whose ``records`` is not a list of
        objects, or lists more than :data:`MAX_PAGE_RECORDS` (refused before
        the records past it are built)."""
        _, p = self._do("GET", "/v1/audit", query={"from": from_, "max": max}, listed=("records", MAX_PAGE_RECORDS))
        return _listed(p, "records", "GET /v1/audit")

    def receipts(self, message_id: str, *, after: str | None = None, max: int | None = None) -> ReceiptsPage:
        """One page of the receipts of message ``message_id`` (role
        ``auditor``; ``GET /v1/audit/receipts/{id}``, the id
        percent-encoded): who was handed it, and when, in order of the audit
        record, then of the message's sequence. At most ``max`` (the
        server's default and cap: 10 000); ``after`` is a page's ``next``
        (or an audit sequence alone), and a malformed one is the server's
        400 ``BAD_REQUEST``. ``next`` is set when more are recorded: ask
        again with ``after`` set to it, or walk every page with
        :meth:`iter_receipts`. 429 ``RATE_LIMITED`` (with its retry delay)
        while the server reads the log for two others, or for this
        principal's one before: this call does not wait it out (one
        request, the caller's to retry), :meth:`iter_receipts` does.

        An answer is refused, ``ProtocolError``, unless ``receipts`` is a
        list of receipt objects (strings where the route has strings;
        ``auditSeq`` and ``seq`` integers of 0 to 2^64-1, a bool or a float
        none), each after ``after`` and after the one before it, and
        ``next`` is absent or a cursor (digits, or digits, a colon and
        digits, each at most 2^64-1) of a page that holds a receipt, not
        before its last one: a page never repeats a receipt, and a ``next``
        never leads back. An answer listing more than
        :data:`MAX_PAGE_RECORDS` receipts is refused before the receipts past
        it are built."""
        return self._receipts(message_id, after, max, None)

    def _receipts(self, message_id: str, after: str | None, max: int | None, timeout: float | None) -> ReceiptsPage:
        path = "/v1/audit/receipts/" + _q(message_id)
        _, p = self._do("GET", path, query={"after": after, "max": max}, timeout=timeout,
                        listed=("receipts", MAX_PAGE_RECORDS))
        return _receipts_page(p, after, f"GET {path}")

    def iter_receipts(self, message_id: str, *, max: int | None = None,
                      timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Every receipt of message ``message_id`` (role ``auditor``), page
        after page of at most ``max`` (:meth:`receipts`), following each
        page's ``next`` until a page has none. Each page comes after the one
        before it (:meth:`receipts` refuses a ``next`` that repeats or goes
        back, ``ProtocolError``), so a server cannot make the walk ask the
        same page forever. Each page reads the log anew: a delivery
        recorded meanwhile comes in a later page. An id that cannot be a
        path segment is refused here, before any page is asked.

        A 429 (the server reading the log for two other walks, or for this
        principal's one before) is waited out: the walk sleeps the answer's
        ``Retry-After`` (else its ``retryAfterMs``, else 1 s; at most
        :data:`RECEIPTS_MAX_WAIT`), then asks for the same page again, up
        to :data:`RECEIPTS_RETRIES` times a page; the next 429 ends the walk
        with it, as any other error does.

        ``timeout`` (seconds, from the first page's request) bounds the
        whole walk, its waits and the caller's reading of it included: each
        page's request gets what is left of it (at most the client's
        ``timeout``), a wait that would end past it is not begun (the 429
        is raised instead), and once it has passed the next page is not
        asked (``RequestTimeoutError``, ``REQUEST_TIMEOUT``). ``None``: each
        request is bounded by the client's ``timeout`` alone."""
        _q(message_id)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")

        def walk() -> Iterator[dict[str, Any]]:
            end = None if timeout is None else time.monotonic() + timeout
            after: str | None = None
            while True:
                waited = 0
                while True:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        raise RequestTimeoutError("REQUEST_TIMEOUT", f"GET /v1/audit/receipts/{_q(message_id)}: no "
                                                  f"whole walk within {timeout:g} s (timeout)", status=504)
                    bound = left if left is None or not self.timeout else min(left, self.timeout)
                    try:
                        page = self._receipts(message_id, after, max, bound)
                        break
                    except PigeonError as e:
                        if e.status != 429 or waited >= RECEIPTS_RETRIES:
                            raise
                        wait = _retry_wait(e)
                        if end is not None and time.monotonic() + wait >= end:
                            raise
                        waited += 1
                        time.sleep(wait)
                yield from page.receipts
                if page.next is None:
                    return
                after = page.next

        return walk()

    def quarantine(self, *, since: str | None = None, after: str | None = None, max: int | None = None) -> list[dict[str, Any]]:
        """One page of the quarantined messages, redacted, oldest first
        (role ``auditor``). A page stops at ``max`` or the server's read
        budget; the next page is ``since`` and ``after`` set to the ``time``
        and ``id`` of the page's last record. Each call asks for one page
        and holds it alone (its answer read up to ``max_response_bytes``):
        walking the pages is the caller's, a page at a time, so nothing here
        gathers records across pages (the CLI's ``quarantine list``, which
        walks them, stops at 1000 records by default). ``ProtocolError``
        for an answer whose ``records`` is not a list of objects, or lists
        more than :data:`MAX_PAGE_RECORDS` (refused before the records past
        it are built)."""
        query = {"since": since, "after": after, "max": max}
        _, p = self._do("GET", "/v1/quarantine", query=query, listed=("records", MAX_PAGE_RECORDS))
        return _listed(p, "records", "GET /v1/quarantine")

    def quarantine_record(self, record_id: str) -> dict[str, Any]:
        """One quarantine record (role ``auditor``); ``ProtocolError`` for an
        answer whose ``record`` is not an object with a string ``id``."""
        path = "/v1/quarantine/" + _q(record_id)
        return _member(self._do("GET", path)[1], "record", f"GET {path}", ("id",))

    def release(self, record_id: str) -> Decision:
        """Re-publish a quarantined message through every gate under this
        client's contract (role ``auditor`` + a contract with publish)."""
        path = f"/v1/quarantine/{_q(record_id)}/release"
        _, p = self._do("POST", path, {}, contract=True)
        return Decision.from_wire(p, f"POST {path}: the answer")

    # --- accounts, roles, grants, keys ---

    def create_account(self, account_id: str, *, attributes: dict[str, Any] | None = None,
                       roles: list[str] | None = None, exist_ok: bool = False) -> dict[str, Any] | None:
        """Create an account (role ``admin``); ``exist_ok`` tolerates 409
        CONFLICT. The account answered; ``ProtocolError`` for an answer
        whose ``account`` is not an object with a string ``id`` (as for
        every call that answers an account)."""
        body: dict[str, Any] = {"id": account_id}
        if attributes is not None:
            body["attributes"] = attributes
        if roles is not None:
            body["roles"] = roles
        try:
            return _member(self._do("POST", "/v1/accounts", body)[1], "account", "POST /v1/accounts", ("id",))
        except PigeonError as e:
            if exist_ok and e.code == "CONFLICT":
                return None
            raise

    def put_role(self, name: str, permissions: list[dict[str, Any]]) -> dict[str, Any]:
        """Define a role (role ``admin``); the role answered, ``ProtocolError``
        for an answer whose ``role`` is not an object with a string ``name``."""
        path = "/v1/roles/" + _q(name)
        return _member(self._do("PUT", path, {"permissions": permissions})[1], "role", f"PUT {path}", ("name",))

    def add_role(self, account_id: str, role: str) -> dict[str, Any]:
        """Give an account a role (role ``admin``); the account, as :meth:`create_account`."""
        path = f"/v1/accounts/{_q(account_id)}/roles/{_q(role)}"
        return _member(self._do("PUT", path)[1], "account", f"PUT {path}", ("id",))

    def remove_role(self, account_id: str, role: str) -> dict[str, Any]:
        """Take a role from an account (role ``admin``); the account, as :meth:`create_account`."""
        path = f"/v1/accounts/{_q(account_id)}/roles/{_q(role)}"
        return _member(self._do("DELETE", path)[1], "account", f"DELETE {path}", ("id",))

    def grant(self, account_id: str, roles: list[str], *, ttl: float | None = None) -> dict[str, Any]:
        """Issue a grant token: ``{"token","jti","expiresAt"}``;
        ``ProtocolError`` for an answer without the three strings."""
        _check_ttl(ttl)
        body: dict[str, Any] = {"account": account_id, "roles": roles}
        if ttl is not None:
            body["ttlMs"] = int(ttl * 1000)
        _, p = self._do("POST", "/v1/grants", body)
        return _object(p, "POST /v1/grants: the answer", ("token", "jti", "expiresAt"))

    def put_keys(self, account_id: str, keys: list[dict[str, Any]]) -> dict[str, Any]:
        """Publish an account's public keys (the account itself or an
        admin); the account, as :meth:`create_account`."""
        path = f"/v1/accounts/{_q(account_id)}/keys"
        return _member(self._do("PUT", path, {"keys": keys})[1], "account", f"PUT {path}", ("id",))

    def keys(self, account_id: str) -> list[dict[str, Any]]:
        """An account's published public keys, read as every client reads
        them (docs/protocol.md, "Published keys"). The answer is the object
        the server sends, ``{"keys": [...]}`` (``[]`` for an account without
        keys, or no account): any other answer (``keys`` null, absent or not
        a list; a bare list, a number, null; an empty body) is refused,
        ``ProtocolError``, not read as no keys; so is a list of more than
        :data:`MAX_ACCOUNT_KEYS` entries (before the entries past it are
        built). The list is read entry by entry: an entry that is no key as
        the server lists one (see :func:`~pigeon_client.crypto.is_key_entry`:
        not an object; a kid, use, alg or key absent or not a string; a kid,
        use, alg or key the server never lists) is left out, and costs the
        caller none of the other keys, as in the TypeScript and Rust
        clients."""
        path = f"/v1/accounts/{_q(account_id)}/keys"
        p = self._do("GET", path, listed=("keys", MAX_ACCOUNT_KEYS))[1]
        v = _object(p, f"GET {path}: the answer holding keys").get("keys")
        if not isinstance(v, list):
            raise ProtocolError("BAD_REQUEST", f"GET {path}: the answer has no list of keys ({type(v).__name__})",
                                details={"keys": type(v).__name__})
        return [k for k in v if is_key_entry(k)]


SEAL_MAX_AGE = 10.0
"""How old (seconds) a cached key list may be when
:meth:`KeyDirectory.encryption_key` picks the key to seal for, whatever the
directory's ``ttl``: an account that removes an encryption key from its list
(its private half leaked) is sealed for under it by a directory's users for
at most this long after the change (and a fetch's round trip), not for the
``ttl``. Verification has its own bound, :data:`VERIFY_MAX_AGE`."""

VERIFY_MAX_AGE = 10.0
"""How old (seconds) a cached key list may be when
:meth:`KeyDirectory.verify` checks a signature with it, whatever the
directory's ``ttl``: an account that removes a signing key from its list
(its private half leaked) has signatures made with it accepted by a
directory's users for at most this long after the change (and a fetch's
round trip), not for the ``ttl``. :meth:`KeyDirectory.get` keeps the list
for the ``ttl``: verify through :meth:`KeyDirectory.verify`, not with the
list ``get`` returns."""


def _sealing_key(keys: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The key of ``keys`` to seal for now: the valid ``enc`` key with the
    latest notBefore, when it is an X25519 key."""
    k = select_key(keys, "", "enc")
    return k if k is not None and k.get("alg") == "x25519" else None


class KeyDirectory:
    """Fetches and caches accounts' published keys
    (``GET /v1/accounts/{id}/keys``) for ``ttl`` seconds; sealing takes
    lists at most ``seal_max_age`` old (:data:`SEAL_MAX_AGE`, see
    :meth:`encryption_key`), verification lists at most ``verify_max_age``
    old (:data:`VERIFY_MAX_AGE`, see :meth:`verify`). Thread-safe;
    :meth:`aget`, :meth:`aencryption_key` and :meth:`averify` run the fetch
    off the event loop."""

    def __init__(
        self,
        client: HttpClient,
        *,
        ttl: float = 300.0,
        seal_max_age: float = SEAL_MAX_AGE,
        verify_max_age: float = VERIFY_MAX_AGE,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.seal_max_age = seal_max_age
        self.verify_max_age = verify_max_age
        self._cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def get(self, account_id: str, *, refresh: bool = False) -> list[dict[str, Any]]:
        """The account's keys, from the cache while younger than ``ttl``.
        Not for verifying signatures: a key the account removed stays in
        the list returned for the ``ttl``; :meth:`verify` bounds that."""
        hit = None if refresh else self._cached(account_id, self.ttl)
        return hit if hit is not None else self._fetch(account_id)

    def encryption_key(self, account_id: str) -> dict[str, Any]:
        """The key to seal for ``account_id`` now: its valid X25519
        encryption key with the latest ``notBefore``
        (``select_key(keys, "", "enc")``), for :func:`seal_data` or
        ``seal_message(..., [key], ...)``. Taken from a cached list no older
        than ``seal_max_age`` (and ``ttl``), else the list is read again; so
        is a cached list in which no key is valid now (the one cached is
        past its window). ``INVALID_ARGUMENT`` when the list read holds
        none."""
        hit = self._cached(account_id, min(self.ttl, self.seal_max_age))
        k = _sealing_key(hit) if hit is not None else None
        if k is None:
            k = _sealing_key(self._fetch(account_id))
        if k is None:
            raise new_error("INVALID_ARGUMENT", "the recipient publishes no encryption key valid now")
        return k

    def verify(self, account_id: str, message: dict[str, Any]) -> None:
        """Verifies ``message``'s signature with ``account_id``'s published
        keys (:func:`verify_message_with_keys`: the key of the signature's
        kid, use ``sig``, valid at the message time), from a cached list no
        older than ``verify_max_age`` (and ``ttl``), else the list is read
        again first: a signing key the account removed (leaked) verifies
        for at most ``verify_max_age`` after its removal, not for the
        ``ttl``. A failure does not read the list again (a stream of bad
        kids costs at most one fetch per ``verify_max_age``): a key
        published less than that ago may not verify yet, so publish a new
        key ahead of its ``notBefore`` (docs/security.md, "Rotation").
        ``SIGNATURE_REQUIRED`` or ``SIGNATURE_INVALID`` as
        :func:`verify_message_with_keys`; a failed fetch raises its error."""
        hit = self._cached(account_id, min(self.ttl, self.verify_max_age))
        verify_message_with_keys(message, hit if hit is not None else self._fetch(account_id))

    async def averify(self, account_id: str, message: dict[str, Any]) -> None:
        import asyncio

        await asyncio.to_thread(self.verify, account_id, message)

    async def aget(self, account_id: str, *, refresh: bool = False) -> list[dict[str, Any]]:
        import asyncio

        return await asyncio.to_thread(self.get, account_id, refresh=refresh)

    async def aencryption_key(self, account_id: str) -> dict[str, Any]:
        import asyncio

        return await asyncio.to_thread(self.encryption_key, account_id)

    def invalidate(self, account_id: str | None = None) -> None:
        with self._lock:
            if account_id is None:
                self._cache.clear()
            else:
                self._cache.pop(account_id, None)

    def _cached(self, account_id: str, max_age: float) -> list[dict[str, Any]] | None:
        with self._lock:
            hit = self._cache.get(account_id)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < max_age else None

    def _fetch(self, account_id: str) -> list[dict[str, Any]]:
        now = time.monotonic()
        keys = self.client.keys(account_id)
        with self._lock:
            self._cache[account_id] = (now, keys)
        return keys
