"""The values a session hands back: the negotiated contract and a publish decision.

Messages are plain ``dict`` s of the wire envelope (docs/protocol.md), as
the broker sent them: the fields the broker sets on acceptance
(``sequence``, ``contractId``, ``subjectId``, ``schemaId``, ``acceptedAt``,
``hops``) are there under their wire names, absent when the broker left
them out. ``hops`` is how many WebAssembly programs deep a message is:
absent (0) for one from outside the programs, d+1 for one a program
published while it handled a message of hops d. The broker sets it
whatever a publisher writes (a ``hops`` in a message published is
replaced), and no signature covers it. :attr:`Decision.hops` and
:attr:`~pigeon_client.subscription.Delivery.hops` read it as an ``int``.
A delivered, received, replayed or reply message whose ``hops`` is not an
integer of 0 to 2^32-1 (``-0``, ``1.0`` and ``1e0`` are none, as for Go's
``strconv.ParseUint``: see :class:`_NegativeZero`) is no broker's: it is
refused (``ProtocolError``), as the Go, TypeScript and Rust clients refuse
it, never handed over. So is a delivered, received, replayed or reply
message whose ``sequence`` is present and not an integer of 1 to 2^64-1 (a
bool, a float, a string, 0, ``-0``, a negative, one beyond 64 bits), and a
delivered, received or replayed
message without one (the broker sends it with every message it reads from
the log, and every delivery is one; a reply, which never enters the log,
has none): an ack or a nack of it could not name it, and one by its id
alone could settle a newer message published under the id. So is a
delivery or a leased received message whose attempt is not an integer of 1
to 2^31-1 (:data:`MAX_ATTEMPT`; the broker counts attempts from 1). So is
a message with any other member of another type than the envelope gives it
(the Go struct ``pigeon.Message``, as the Go and Rust clients decode it: an
``id``, ``time``, ``type`` or other string member that is no string, a
``signature`` that is no object or whose ``v`` is no integer; ``null``
reads as absent): what a receiver gets is a message the broker could have
sent. A delivery so refused is not answered (the server's ack wait gives it
back) and moves no resume position.

A message a :meth:`~pigeon_client.ws.Session.receive` (or an HTTP
receive) hands out is a :class:`ReceivedMessage`: the same ``dict``, with
the ``attempt`` of its lease beside it (docs/protocol.md, "receive"), which
``ack`` and ``nack`` of it send back."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from .crypto import new_message_id, parse_rfc3339
from .errors import ProtocolError

__all__ = ["Contract", "Decision", "ReceivedMessage"]

_MAX_HOPS = (1 << 32) - 1


class _NegativeZero(int):
    """An integer a server's JSON spells ``-0``, as the frame decoder reads
    it (:func:`_read_int`): 0, but not of ``type`` ``int``, so that every
    check of an unsigned member (``type(v) is int and 0 <= v``: a message's
    ``sequence`` and ``hops``, a receipt's ``auditSeq``, a frame's
    ``from``…) refuses it, as Go's ``strconv.ParseUint`` refuses ``-0``
    (``encoding/json`` reading a ``uint64``). Where Go reads a signed
    integer (an ``attempt``, a signature's ``v``, ``maxFrame``) and in
    ``data`` it is read as a plain 0 (:func:`_settle_negative_zeros`).
    ``repr`` and ``str`` show ``-0``; ``json`` writes it ``0``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "-0"

    __str__ = __repr__


NEGATIVE_ZERO = _NegativeZero(0)


def _read_int(text: str) -> int:
    """The ``parse_int`` of the frame decoder: ``text``, an integer as JSON
    spells it, with ``-0`` kept apart (:data:`NEGATIVE_ZERO`)."""
    return NEGATIVE_ZERO if text == "-0" else int(text)


_SIGNED_FRAME_MEMBERS = ("attempt", "maxFrame", "ttlMs", "timeoutMs", "delayMs", "maxInFlight", "window", "max")
"""The members of a frame that Go's ``Frame`` reads as signed integers
(``int``, ``int64``), where ``-0`` is 0."""


def _settle_negative_zeros(v: Any) -> None:
    """Read each ``-0`` of the decoded frame (or HTTP answer) ``v`` where Go
    reads a signed integer, or no integer at all, as a plain 0: anywhere in
    a ``data`` member, a ``signature``'s ``v``, the frame's signed members
    (:data:`_SIGNED_FRAME_MEMBERS`), the entries of its ``attempts`` and
    the ``attempt`` of each of its ``deliveries``. Every other one stays
    :data:`NEGATIVE_ZERO`, which the checks of unsigned members refuse.
    Run only on a text that spells ``-0``."""
    if isinstance(v, dict):
        for k in _SIGNED_FRAME_MEMBERS:
            if isinstance(v.get(k), _NegativeZero):
                v[k] = 0
        at = v.get("attempts")
        if isinstance(at, list):
            at[:] = [0 if isinstance(a, _NegativeZero) else a for a in at]
        ds = v.get("deliveries")
        for d in ds if isinstance(ds, list) else ():
            if isinstance(d, dict) and isinstance(d.get("attempt"), _NegativeZero):
                d["attempt"] = 0
    stack: list[tuple[Any, bool]] = [(v, False)]  # (a value, whether it lies in data)
    while stack:
        x, in_data = stack.pop()
        if isinstance(x, dict):
            for k, y in x.items():
                if isinstance(y, _NegativeZero) and (in_data or k == "data"):
                    x[k] = 0
                elif isinstance(y, (dict, list)):
                    stack.append((y, in_data or k == "data"))
            sig = x.get("signature")
            if not in_data and isinstance(sig, dict) and isinstance(sig.get("v"), _NegativeZero):
                sig["v"] = 0
        elif isinstance(x, list):
            for i, y in enumerate(x):
                if isinstance(y, _NegativeZero) and in_data:
                    x[i] = 0
                elif isinstance(y, (dict, list)):
                    stack.append((y, in_data))


def _shown(v: Any) -> Any:
    """How ``details`` shows a refused value ``v`` that should have been an
    integer: the integer, ``"-0"``, or the name of its type."""
    if type(v) is int:
        return v
    return "-0" if isinstance(v, _NegativeZero) else type(v).__name__


MAX_ATTEMPT = (1 << 31) - 1
"""The highest lease attempt the client takes from a receive answer or sends
in an ack or a nack: 2^31-1, as the Go client (the reference) reads
``attempts``, and as the TypeScript and Rust clients hold it. The broker
counts attempts from 1 up to a subject's ``retry.maxAttempts``, far below."""


def _hops(v: Any) -> int:
    """A message's ``hops`` (docs/protocol.md, "hops"): the integer of 0 to
    2^32-1 the broker sends, else 0 (absent, ``None``; a message with
    another is refused before it is read: see :func:`_hops_held` and
    :meth:`Decision.from_wire`)."""
    return v if type(v) is int and 0 <= v <= _MAX_HOPS else 0


def _hops_held(m: Any) -> bool:
    """Whether the ``hops`` of message ``m`` (a dict) is one the broker
    sets: absent, ``None`` (as an absent sequence), or an integer of 0 to
    2^32-1. A bool (which Python takes for an int), a float, a string, a
    negative or one beyond 32 bits is no broker's."""
    v = m.get("hops")
    return v is None or (type(v) is int and 0 <= v <= _MAX_HOPS)


def _unheld_hops(m: dict[str, Any], what: str, index: int | None = None) -> ProtocolError:
    """The ``ProtocolError`` (the client's malformed-frame error, as for
    any frame it cannot take) of a ``what`` message (a ``deliver``, a
    ``receive``, a ``replay``, a ``reply``; entry ``index`` of a list) whose
    ``hops`` is no broker's (see :func:`_unheld_field`)."""
    return _unheld_field(m, what, index, "hops", "0 to 2^32-1")


def _unheld_field(m: dict[str, Any], what: str, index: int | None, field: str, bounds: str) -> ProtocolError:
    """The ``ProtocolError`` of a ``what`` message (entry ``index`` of a
    list) whose ``field`` is not an integer within ``bounds``: ``details``
    names the answer (``op``), the entry, the message and the value refused
    (its type when it is no int), as the TypeScript client's
    ``unheldMessage`` does."""
    v = m.get(field)
    mid = m.get("id")
    at = "" if index is None else f" (entry {index})"
    details: dict[str, Any] = {"op": what, "messageId": mid if isinstance(mid, str) else type(mid).__name__,
                               field: _shown(v)}
    if index is not None:
        details["index"] = index
    return ProtocolError("BAD_REQUEST", f"the server sent a {what} message{at} whose {field} is not an integer "
                         f"of {bounds}: not handed over", details=details)


_MAX_WIRE_SEQUENCE = (1 << 64) - 1
"""The highest sequence the wire holds: sequences are unsigned 64-bit (the
Go client refuses a frame with another)."""


def _object(v: Any, what: str, strings: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``v``, the value ``what`` names (``"GET /v1/subjects/x: the
    answer's subject"``), when it is a JSON object whose members named in
    ``strings`` are strings, and those named in ``optional`` strings or
    absent (or ``null``); else ``ProtocolError`` (``BAD_REQUEST``, the
    client's error for every malformed answer). Every answer the client
    reads goes through it (or :func:`~pigeon_client.http._listed`, which
    does the same for a list): indexed as it came, an answer of another
    shape raised ``KeyError``, ``TypeError`` or ``AttributeError`` from
    inside the call, or reached the caller as a value of another type than
    the call returns. ``details`` names the member refused and the type
    found."""
    if not isinstance(v, dict):
        raise ProtocolError("BAD_REQUEST", f"{what} is not an object ({type(v).__name__})",
                            details={"type": type(v).__name__})
    for k in strings:
        if not isinstance(v.get(k), str):
            raise ProtocolError("BAD_REQUEST", f"{what} has no string {k} ({type(v.get(k)).__name__})",
                                details={"member": k, "type": type(v.get(k)).__name__})
    for k in optional:
        if v.get(k) is not None and not isinstance(v[k], str):
            raise ProtocolError("BAD_REQUEST", f"{what} has a {k} that is not a string ({type(v[k]).__name__})",
                                details={"member": k, "type": type(v[k]).__name__})
    return v


def _member(p: Any, member: str, what: str, strings: tuple[str, ...] = ()) -> dict[str, Any]:
    """The object ``member`` of the answer ``p`` to ``what`` (``"GET
    /v1/subjects/x"``), whose members named in ``strings`` are strings;
    else ``ProtocolError`` (see :func:`_object`): an answer that is not an
    object, or whose ``member`` is absent, ``null`` or not an object."""
    return _object(_object(p, f"{what}: the answer").get(member), f"{what}: the answer's {member}", strings)


_LOGGED = ("receive", "replay", "deliver", "deliver_batch")
"""The answers and pushes whose messages are read from a subject's log:
the broker sends each with its sequence (a delivery too: a subscription
hands over the messages of the log)."""


def _sequence_held(m: Any, logged: bool = False) -> bool:
    """Whether the ``sequence`` of message ``m`` (a dict) is one the broker
    sets: an integer of 1 to 2^64-1 (the broker numbers a subject's
    messages from 1 and leaves 0 out), or absent (``None``) unless
    ``logged``: the broker sends the number with every message it reads
    from the log, so a receive or replay message without one is no
    broker's, as one of 0 is (a reply, which never enters the log, has
    none). A bool (which Python takes for an int), a float, a string, 0, a
    negative or one beyond 64 bits is no broker's: an ack or a replay
    naming it would name nothing, or another message."""
    v = m.get("sequence")
    return (v is None and not logged) or (type(v) is int and 0 < v <= _MAX_WIRE_SEQUENCE)


_STRING_MEMBERS = ("specversion", "id", "type", "source", "subject", "time", "intent", "idempotencyKey",
                   "classification", "region", "replyTo", "correlationId", "reason", "contractId", "subjectId",
                   "schemaId", "acceptedAt")
"""The envelope's members that hold a string (or ``null``) in every message
the broker sends (the Go struct ``pigeon.Message``)."""

_MIN_FORM, _MAX_FORM = -(1 << 63), (1 << 63) - 1
"""The signature forms (``v``) a message may name: what a Go ``int`` holds,
as the Go and Rust clients decode it (any but 2 never verifies)."""


def _message_fault(m: dict[str, Any]) -> tuple[str, str, Any] | None:
    """The first member of message ``m`` whose type is not the envelope's,
    as (its path, the type it must have, what it holds: its number when a
    float, else its type's name), ``None`` when there is none: a string
    member (see :data:`_STRING_MEMBERS`) that is not a ``str``; a
    ``signature`` that is not an object, or whose ``kid``, ``alg`` or
    ``sig`` is not a ``str``, or whose ``v`` is not an integer of -2^63 to
    2^63-1 (a float, ``2.0`` included, a bool, a string). As the Go and
    Rust clients decode a message: ``None`` reads as absent, as the broker
    reads ``null`` in every envelope field; a member the envelope does not
    name is left as it came; ``data`` holds any JSON value. ``sequence``
    and ``hops`` are :func:`_unheld_message`'s to check."""
    for k in _STRING_MEMBERS:
        v = m.get(k)
        if v is not None and not isinstance(v, str):
            return k, "a string", type(v).__name__
    sig = m.get("signature")
    if sig is None:
        return None
    if not isinstance(sig, dict):
        return "signature", "an object", type(sig).__name__
    for k in ("kid", "alg", "sig"):
        v = sig.get(k)
        if v is not None and not isinstance(v, str):
            return f"signature.{k}", "a string", type(v).__name__
    v = sig.get("v")
    if v is not None and not (type(v) is int and _MIN_FORM <= v <= _MAX_FORM):
        return "signature.v", "an integer", v if type(v) is float else type(v).__name__
    return None


def _misshapen(m: dict[str, Any], what: str, index: int | None, fault: tuple[str, str, Any]) -> ProtocolError:
    """The ``ProtocolError`` of a ``what`` message (entry ``index`` of a
    list) with a member of the wrong type (see :func:`_message_fault`):
    ``details`` names the answer (``op``), the entry, the message, the
    ``member`` and what it holds (``found``)."""
    member, want, found = fault
    mid = m.get("id")
    at = "" if index is None else f" (entry {index})"
    details: dict[str, Any] = {"op": what, "messageId": mid if isinstance(mid, str) else type(mid).__name__,
                               "member": member, "found": found}
    if index is not None:
        details["index"] = index
    return ProtocolError("BAD_REQUEST", f"the server sent a {what} message{at} whose {member} is not {want}: "
                         "not handed over", details=details)


def _unheld_message(m: dict[str, Any], what: str, index: int | None = None) -> ProtocolError | None:
    """The ``ProtocolError`` (the client's malformed-frame error, as for any
    frame it cannot take) of a stored ``what`` message (a ``deliver``, a
    ``receive``, a ``replay``, a ``reply``; entry ``index`` of a list)
    whose ``sequence`` (see :func:`_sequence_held`: a ``receive``,
    ``replay`` or delivered message must have one) or ``hops`` (see
    :func:`_hops_held`) is no broker's, or that has any other member of the
    wrong type (see :func:`_message_fault`: an ``id`` that is a number, a
    ``time`` that is a number, a ``signature`` of another shape); ``None``
    when it is a message the broker could have sent. ``details`` names the
    answer (``op``), the entry, the message and the value refused (its
    type when it is no int), as the TypeScript client's ``unheldMessage``
    does."""
    if not _sequence_held(m, what in _LOGGED):
        return _unheld_field(m, what, index, "sequence", "1 to 2^64-1")
    if not _hops_held(m):
        return _unheld_hops(m, what, index)
    fault = _message_fault(m)
    return None if fault is None else _misshapen(m, what, index, fault)


def _request_of(m: Any) -> Any:
    """``m`` as a request is sent: with an id, drawn here
    (:func:`~pigeon_client.crypto.new_message_id`) when it has none and
    nothing binds one (a signature covers the id; a repeated idempotency
    key stands for the first request, whose id the caller may not know),
    so that the reply can be told to answer it (:func:`_unanswering_reply`).
    ``m`` is not changed: a copy carries the drawn id."""
    if not isinstance(m, Mapping) or m.get("id") or m.get("signature") is not None or m.get("idempotencyKey"):
        return m
    c = dict(m)
    c["id"] = new_message_id()
    return c


def _unanswering_reply(req: Any, reply: dict[str, Any]) -> ProtocolError | None:
    """The ``ProtocolError`` of a ``reply`` that does not answer ``req``, the
    request as it was sent (see :func:`_request_of`); ``None`` when it
    does. A reply is the message a responder published with
    ``correlationId`` the request's id: one without a correlationId
    (absent, empty, not a string) answers no request, and one naming
    another id answers another request, another caller's. With an
    idempotency key ``req`` may repeat an earlier request of another id,
    whose reply is this one's: then any non-empty correlationId is taken."""
    c = reply.get("correlationId")
    if not isinstance(c, str) or not c:
        return ProtocolError("BAD_REQUEST", "the server sent a reply without a correlationId: it answers no request",
                             details={"op": "reply", "correlationId": c if isinstance(c, str) else type(c).__name__})
    rid = req.get("id") if isinstance(req, Mapping) else None
    if isinstance(rid, str) and rid and not req.get("idempotencyKey") and c != rid:
        return ProtocolError("BAD_REQUEST", f"the server sent a reply to another request (correlationId {c!r:.80}, "
                             f"not {rid!r:.80})", details={"op": "reply", "correlationId": c, "requestId": rid})
    return None


class ReceivedMessage(dict):  # type: ignore[type-arg]
    """A message a receive handed out: the wire envelope as a ``dict`` (as
    before), with :attr:`attempt` beside it, not in it (it is not part of
    the envelope, and no signature covers it).

    ``attempt`` is the attempt of the message's lease the receive answer
    named (``attempts``, docs/protocol.md "receive"): 1 for its first
    delivery, more when a lease of it ran out before and it was leased
    again, to this or another consumer of the same principal. 0 when
    nothing was leased (a pubsub receive, an automatic HTTP receive, a
    server of protocol v1). ``ack`` and ``nack`` of the message send it
    back, so that the server settles only the lease this receive took: a
    late answer, once the lease ran out and another consumer of the
    principal holds the message, is refused (``ACK_NOT_ALLOWED``) rather
    than settling that consumer's lease. A copy (``dict(m)``) does not keep
    it: pass ``attempt=`` then."""

    __slots__ = ("attempt",)

    def __init__(self, message: dict[str, Any], attempt: int = 0) -> None:
        super().__init__(message)
        self.attempt = attempt

    def __reduce__(self) -> Any:
        return (ReceivedMessage, (dict(self), self.attempt))


def _attempts(ans: dict[str, Any], n: int, what: str) -> list[Any] | None:
    """The ``attempts`` of a receive answer ``ans`` holding ``n`` messages,
    in step with them, as sent; ``None`` when the answer has no
    ``attempts`` member (nothing was leased: 0 each). Anything else but a
    list of ``n`` (``null`` included, which no broker sends: it writes the
    list, or leaves the member out) is a malformed answer,
    ``ProtocolError``: the attempts could not be told to their messages. As
    the TypeScript and Rust clients refuse it. An entry that is no lease's
    attempt (see :func:`_attempt_held`) refuses its message alone (see
    :func:`_pulled`)."""
    if "attempts" not in ans:
        return None
    at = ans["attempts"]
    if not isinstance(at, list):
        raise ProtocolError("BAD_REQUEST", f"the server sent a {what} answer whose attempts is not a list",
                            details={"op": what, "attempts": type(at).__name__})
    if len(at) != n:
        raise ProtocolError("BAD_REQUEST", f"the server sent a {what} answer holding {len(at)} attempts for "
                            f"{n} messages", details={"op": what, "attempts": len(at), "messages": n})
    return at


def _attempt_held(v: Any) -> bool:
    """Whether ``v`` is an attempt a receive answer (for a leased message)
    or a delivery may name: an integer of 1 to :data:`MAX_ATTEMPT` (a bool
    is no integer)."""
    return type(v) is int and 0 < v <= MAX_ATTEMPT


def _unheld_attempt(m: dict[str, Any], what: str, index: int | None, a: Any) -> ProtocolError:
    """The ``ProtocolError`` of a ``what`` message (entry ``index`` of a
    list; a receive answer's or a delivery's) whose attempt ``a`` is no
    broker's (see :func:`_attempt_held`): ``details`` names the answer
    (``op``), the entry, the message and the value refused (its type when
    it is no int)."""
    mid = m.get("id")
    at = "" if index is None else f" (entry {index})"
    details: dict[str, Any] = {"op": what, "messageId": mid if isinstance(mid, str) else type(mid).__name__,
                               "attempt": _shown(a)}
    if index is not None:
        details["index"] = index
    return ProtocolError("BAD_REQUEST", f"the server sent a {what} message{at} whose attempt is not an integer "
                         "of 1 to 2^31-1: not handed over", details=details)


def _pulled(ans: Any, what: str, report: Callable[[ProtocolError], None]) -> list[ReceivedMessage]:
    """The messages of a ``receive`` or ``replay`` answer ``ans``, each with
    its attempt (``receive``: see :func:`_attempts`; ``replay`` leases
    nothing). ``ProtocolError`` for an answer whose ``messages`` is not a
    list or whose ``attempts`` is not a list in step with it; an entry
    that is not an object, one whose ``sequence`` or ``hops`` is no
    broker's (see :func:`_unheld_message`), or one whose attempt is no
    lease's (see :func:`_attempt_held`: an ack naming a wrong one would be
    refused, or settle another lease) is left out and its error passed to
    ``report``: the others go on, each with its own attempt (a leased one
    left out is not answered, so the server's ack wait gives it back)."""
    if not isinstance(ans, dict):
        raise ProtocolError("BAD_REQUEST", f"the server's {what} answer is not an object")
    ms = ans.get("messages")
    if ms is None:
        ms = []
    if not isinstance(ms, list):
        raise ProtocolError("BAD_REQUEST", "messages is not a list")
    told = _attempts(ans, len(ms), what) if what == "receive" else None
    leased = told is not None
    attempts = told if told is not None else [0] * len(ms)
    out: list[ReceivedMessage] = []
    for i, (m, a) in enumerate(zip(ms, attempts)):
        if not isinstance(m, dict):
            report(ProtocolError("BAD_REQUEST", f"the server sent a {what} entry (entry {i}) that is not a "
                                 "message object: not handed over",
                                 details={"op": what, "index": i, "entry": type(m).__name__}))
            continue
        unheld = _unheld_message(m, what, i)
        if unheld is None and leased and not _attempt_held(a):
            unheld = _unheld_attempt(m, what, i, a)
        if unheld is not None:
            report(unheld)
            continue
        out.append(ReceivedMessage(m, a))
    return out


@dataclass(frozen=True)
class Contract:
    """A negotiated contract: what this session may do, and until when."""

    id: str
    principal: str
    subjects: list[dict[str, Any]]
    region: str
    issued_at: _dt.datetime | None
    expires_at: _dt.datetime | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_wire(cls, d: Any, what: str = "the server's contract") -> "Contract":
        """The contract ``d`` (``what`` names it in an error), or
        ``ProtocolError`` (``BAD_REQUEST``) unless it is an object with a
        string ``id``, a ``principal`` and a ``region`` that are strings
        when present, an ``issuedAt`` and an ``expiresAt`` that are RFC 3339
        times when present (absent, ``null`` or empty: ``None``), and
        ``subjects`` absent, ``null`` or a list of objects, each with a
        string ``name`` and ``operations`` absent, ``null`` or a list of
        strings: a contract of another shape would reach the caller as
        values of other types than the contract's (its operations a string,
        listed letter by letter; an ``expires_at`` of ``None`` for a time
        that does not parse, which the session never renews). A refusal in
        a reconnect or a renewal fails it as any malformed answer does (it
        is tried again), rather than a ``TypeError`` escaping its task."""
        d = _object(d, what, ("id",), ("principal", "region", "issuedAt", "expiresAt"))

        def t(name: str) -> _dt.datetime | None:
            if not d.get(name):
                return None
            try:
                return parse_rfc3339(d[name])
            except (ValueError, OverflowError):
                raise ProtocolError("BAD_REQUEST", f"{what} has a {name} that is not an RFC 3339 time "
                                    f"({d[name]!r:.64})", details={"member": name}) from None

        subjects = d.get("subjects")
        if subjects is not None and not isinstance(subjects, list):
            raise ProtocolError("BAD_REQUEST", f"{what} has subjects that is not a list ({type(subjects).__name__})",
                                details={"member": "subjects", "type": type(subjects).__name__})
        for i, s in enumerate(subjects or []):
            _object(s, f"{what} (subject {i})", ("name",))
            ops = s.get("operations")
            if ops is not None and not (isinstance(ops, list) and all(isinstance(o, str) for o in ops)):
                raise ProtocolError("BAD_REQUEST", f"{what} (subject {i}) has operations that are not a list of "
                                    "strings", details={"member": "operations", "index": i})
        return cls(d["id"], d.get("principal") or "", list(subjects or []), d.get("region") or "", t("issuedAt"),
                   t("expiresAt"), d)

    def operations(self, subject: str) -> list[str]:
        """The operations granted on ``subject`` (empty when not in the contract)."""
        for s in self.subjects:
            if s.get("name") == subject:
                return list(s.get("operations") or [])
        return []

    @property
    def subject_names(self) -> list[str]:
        return [s.get("name", "") for s in self.subjects]


@dataclass(frozen=True)
class Decision:
    """The broker's answer to a publish: ``accepted`` or ``duplicate`` (the
    original message)."""

    status: str
    message: dict[str, Any]

    @property
    def id(self) -> str:
        return self.message.get("id") or ""

    @property
    def sequence(self) -> int:
        return int(self.message.get("sequence") or 0)

    @property
    def hops(self) -> int:
        """The message's ``hops`` (see the module's documentation): 0 for a
        message published over a transport, whatever it carried there."""
        return _hops(self.message.get("hops"))

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def duplicate(self) -> bool:
        return self.status == "duplicate"

    @classmethod
    def from_wire(cls, f: Any, what: str = "the server's decision") -> "Decision":
        """The decision ``f`` (``what`` names it in an error), or
        ``ProtocolError`` (``BAD_REQUEST``) unless it is one the broker
        sends, as the Go client decodes a ``decision`` and each result of a
        ``decisions`` answer: an object whose ``status`` is ``accepted`` or
        ``duplicate``, and whose ``message`` is an object of the envelope's
        shape (``pigeon.Message``): a ``sequence`` absent, ``null`` or an
        integer of 0 to 2^64-1 (not ``-0``, ``5.0``, ``5e0``, a bool, a
        string), a ``hops`` absent, ``null`` or an integer of 0 to 2^32-1,
        every string member (``id``, ``time``, ``reason``,
        ``acceptedAt``…) a string or ``null``, a ``signature`` absent,
        ``null`` or an object of strings and an integer ``v`` (see
        :func:`_message_fault`). The error says that the message may have
        been accepted all the same, as the Go client's does: the broker
        judged it and may have stored it, so it is not to be taken for
        refused and published again without an idempotency key. A decision
        of another shape would reach the caller as values of other types
        than :attr:`id` and :attr:`sequence` (``int()`` of a string raised
        ``ValueError`` there)."""

        def unread(why: str, **details: Any) -> ProtocolError:
            return ProtocolError("BAD_REQUEST", f"{what} {why}: the message may have been accepted", details=details)

        if not isinstance(f, dict):
            raise unread(f"is not an object ({type(f).__name__})", type=type(f).__name__)
        status = f.get("status")
        if not isinstance(status, str):
            raise unread(f"has no string status ({type(status).__name__})", member="status",
                         type=type(status).__name__)
        if status not in ("accepted", "duplicate"):
            raise unread(f"has a status that is neither accepted nor duplicate ({status!r:.40})", member="status")
        m = f.get("message")
        if not isinstance(m, dict):
            raise unread(f"has a message that is not an object ({type(m).__name__})", member="message",
                         type=type(m).__name__)
        for k, most in (("sequence", _MAX_WIRE_SEQUENCE), ("hops", _MAX_HOPS)):
            v = m.get(k)
            if v is not None and not (type(v) is int and 0 <= v <= most):
                raise unread(f"has a message whose {k} is not an integer of 0 to 2^{most.bit_length()}-1 "
                             f"({_shown(v)})", member=k, found=_shown(v))
        fault = _message_fault(m)
        if fault is not None:
            k, want, found = fault
            raise unread(f"has a message whose {k} is not {want} ({found})", member=k, found=found)
        return cls(status, m)
