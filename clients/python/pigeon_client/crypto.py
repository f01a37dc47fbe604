"""End-to-end signatures and sealed payloads, byte-compatible with Go.

Signing follows docs/security.md: the signature is Ed25519 over the RFC 8785
(JCS) form of ``["pigeon-sig-v2", subject, id, time, type, intent,
idempotencyKey, replyTo, correlationId, reason, data]`` (the second form,
named by ``"v": 2`` in the signature object); signatures without ``v`` are
in the first form, ``["pigeon-sig-v1", subject, id, time, data]``, and still
verify. Sealing is
X25519 + HKDF-SHA256 + XChaCha20-Poly1305, signed with Ed25519 over the
header and ciphertext (``pigeon/seal`` version 1).

Primitives come from audited libraries only: PyNaCl (libsodium) for
Ed25519, X25519 and XChaCha20-Poly1305; ``cryptography`` for HKDF-SHA256;
``rfc8785`` for JCS. Every function here is pure and thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, TypedDict

import nacl.bindings as sodium
import nacl.exceptions
import nacl.signing
import rfc8785
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import PigeonError, new_error

__all__ = [
    "b64url",
    "b64url_decode",
    "canonical_signing_input",
    "signature_form",
    "Signature",
    "SIGNATURE_V2",
    "sign_message",
    "verify_message",
    "verify_message_with_keys",
    "select_key",
    "Keys",
    "seal",
    "open_sealed",
    "seal_data",
    "open_data",
    "SealError",
    "SealTampered",
    "SealUnsupported",
    "NotSealed",
    "new_message_id",
    "now_rfc3339",
    "SEAL_ALG",
    "seal_message",
    "open_message",
]

SIG_CONTEXT = "pigeon-sig-v1"
SIG_CONTEXT_V2 = "pigeon-sig-v2"
SIGNATURE_V2 = 2
# The envelope strings the second form covers besides subject, id and time,
# in their order in the signing input.
SIG_V2_FIELDS = ("type", "intent", "idempotencyKey", "replyTo", "correlationId", "reason")
SEAL_ALG = "X25519-HKDF-SHA256-XChaCha20Poly1305-Ed25519"
_SEAL_CONTEXT = b"pigeon-seal-v1\x00"
_HKDF_INFO = b"pigeon-seal-v1 xchacha20poly1305 key"
_SAFE_INT = 2**53
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")
_KID = re.compile(r"^[\x21-\x7e]{1,128}$")
# RFC 3339's date-time as Go's time.Parse(time.RFC3339Nano) takes it, and
# nothing else (see parse_rfc3339): ASCII digits only (``\d`` would take
# any script's), matched whole (``$`` would take a trailing newline).
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?(Z|[+-]([0-9]{2}):([0-9]{2}))"
)


# --- base64url, one spelling per value -------------------------------------


def b64url(b: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def b64url_decode(s: str) -> bytes:
    """Strict base64url without padding: refuses padding, the standard
    alphabet and non-zero trailing bits (so each value has one spelling)."""
    if not isinstance(s, str) or not _B64URL.fullmatch(s) or len(s) % 4 == 1:
        raise ValueError("not base64url without padding")
    try:
        b = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError("not base64url without padding") from e
    if b64url(b) != s:
        raise ValueError("base64url with non-zero trailing bits")
    return b


# --- ids and times -----------------------------------------------------------


def new_message_id() -> str:
    """A fresh ``msg_`` id (20 lowercase base-36 characters, as the broker's)."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "msg_" + "".join(secrets.choice(alphabet) for _ in range(20))


def now_rfc3339() -> str:
    """The current time, RFC 3339 with milliseconds, UTC (``…T12:00:00.000Z``)."""
    t = _dt.datetime.now(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _rfc3339_parts(s: Any) -> tuple[_dt.date, _dt.time, str, int]:
    """The date, the clock time, the fraction's first nine digits (padded
    with zeros) and the offset in minutes east of UTC of an RFC 3339 time
    as Go reads one (see :func:`parse_rfc3339`); ``ValueError`` otherwise."""
    m = _RFC3339.fullmatch(s) if isinstance(s, str) else None
    if not m:
        raise ValueError(f"not an RFC 3339 time: {s!r:.60}")
    y, mo, d, h, mi, sec, frac, tz, oh, om = m.groups()
    # ValueError for the year 0000, a day the month does not have, month
    # 13, hour 24, minute or second 60.
    date, clock = _dt.date(int(y), int(mo), int(d)), _dt.time(int(h), int(mi), int(sec))
    if tz == "Z":
        offset = 0
    elif int(oh) < 24 and int(om) < 60:
        offset = (1 if tz[0] == "+" else -1) * (int(oh) * 60 + int(om))
    else:
        raise ValueError(f"not an RFC 3339 time (offset {tz}): {s!r:.60}")
    return date, clock, (frac or "")[:9].ljust(9, "0"), offset


def parse_rfc3339(s: str) -> _dt.datetime:
    """Parse an RFC 3339 time as the Go client reads one (``pigeon``'s
    ``parseRFC3339``, Go's ``time.Parse(time.RFC3339Nano)`` without what
    RFC 3339 does not have): ``YYYY-MM-DDTHH:MM:SS`` with an upper-case
    ``T``, an optional ``.`` and one or more digits (any number of them,
    read to the microsecond, the rest cut off, as Go cuts past the
    nanosecond; :func:`parse_rfc3339_ns` reads the nanoseconds too), then
    ``Z`` or ``+HH:MM``/``-HH:MM`` with the hour below 24
    and the minute below 60; a real date (no 30 February, no month 13), an
    hour below 24, a minute and a second below 60 (no leap second). Digits
    are ASCII digits. ``ValueError`` for anything else: a date alone
    (``2026-12-05``), a space or a lower-case ``t`` for the ``T``, a
    lower-case ``z``, no seconds (``2026-12-05T10:00Z``), no offset, the
    basic form (``20261205T100000Z``), a comma before the fraction, an
    offset without its colon, a single-digit field, white space around it,
    and the year 0000, which Go takes but ``datetime`` cannot hold (Go's
    ``parseRFC3339`` refuses it too). ``datetime.fromisoformat`` takes most
    of these, so it never reads a time from the server."""
    date, clock, frac, offset = _rfc3339_parts(s)
    tzinfo = _dt.timezone.utc if offset == 0 else _dt.timezone(_dt.timedelta(minutes=offset))
    return _dt.datetime.combine(date, clock.replace(microsecond=int(frac[:6])), tzinfo=tzinfo)


_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def parse_rfc3339_ns(s: str) -> int:
    """The instant an RFC 3339 time names, read as :func:`parse_rfc3339`
    reads it, as nanoseconds since the Unix epoch, to the nanosecond as Go
    reads it (the first nine digits of the fraction, the rest cut off).
    Every instant RFC 3339 writes, an offset taking it into the year 0000
    or 10000 included. ``ValueError`` for what :func:`parse_rfc3339`
    refuses."""
    date, clock, frac, offset = _rfc3339_parts(s)
    days = date.toordinal() - _EPOCH_ORDINAL
    seconds = days * 86400 + clock.hour * 3600 + clock.minute * 60 + clock.second - offset * 60
    return seconds * 1_000_000_000 + int(frac)


def _ns_of(t: _dt.datetime) -> int:
    """An aware datetime as nanoseconds since the Unix epoch (``TypeError``
    for a naive one)."""
    d = t - _EPOCH
    return (d.days * 86400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000


# --- canonical signing form --------------------------------------------------


class _InexactNumber(ValueError):
    """An integer whose value the canonical form would change."""


def _as_jcs_value(v: Any) -> Any:
    """JCS reads every number as a double and writes the shortest decimal
    that reads back as it. An integer beyond 2^53 whose value that decimal
    does not spell (``9007199254740993`` is written ``9007199254740992``) is
    refused, as the Go canonicaliser refuses it: two data differing there
    would have one signing input, so one signature would verify for both.
    Integers the decimal spells exactly (``12345678901234567000``) pass as
    doubles."""
    if isinstance(v, bool) or v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, int):
        if -_SAFE_INT < v < _SAFE_INT:  # rfc8785 takes ints below 2^53 only
            return v
        f = float(v)  # OverflowError beyond the doubles: no canonical form
        if Decimal(repr(f)) != v:
            raise _InexactNumber(f"an integer has more precision than a double keeps: {str(v)[:40]}")
        return f
    if isinstance(v, dict):
        return {k: _as_jcs_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_as_jcs_value(x) for x in v]
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def _envelope_string(m: dict[str, Any], name: str, required: bool = True) -> str:
    """A signed envelope string as it is. Subject, id and time (required)
    must be non-empty; a field only the second form covers is "" when
    absent or null."""
    v = m.get(name)
    if not required and v is None:
        return ""
    if not isinstance(v, str) or (required and not v):
        raise new_error("ENVELOPE_INVALID", f"message {name} must be a {'non-empty ' if required else ''}string")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise new_error("ENVELOPE_INVALID", f"message {name} is not valid UTF-8") from e
    return v


class _SignatureRequired(TypedDict):
    kid: str
    alg: str
    sig: str


class Signature(_SignatureRequired, total=False):
    """A message's ``signature`` member: ``{"kid", "alg", "sig", "v"}``.
    ``v`` (optional) names the signing form: ``2`` (what
    :func:`sign_message` makes), or absent for the first form. Any other
    ``v`` never verifies."""

    v: int


def _is_v2(v: Any) -> bool:
    # The JSON integer 2 only: Python's == takes True for 1 and 2.0 for 2.
    return type(v) is int and v == SIGNATURE_V2


def signature_form(message: dict[str, Any]) -> int:
    """The signing form ``message``'s signature names: 2 for ``"v": 2`` and
    for a message without a signature (the form :func:`sign_message`
    makes), 1 for a signature without ``v``. Raises ``PigeonError``
    ``ENVELOPE_INVALID`` for any other ``v`` (0, 1, 3, 2.0, "2", null,
    true...) or a signature that is not an object."""
    sig = message.get("signature")
    if sig is None:
        return SIGNATURE_V2
    if not isinstance(sig, dict):
        raise new_error("ENVELOPE_INVALID", "message signature is not an object")
    if "v" not in sig:
        return 1
    if not _is_v2(sig["v"]):
        raise new_error("ENVELOPE_INVALID", "signature.v must be absent or 2")
    return SIGNATURE_V2


def canonical_signing_input(message: dict[str, Any]) -> bytes:
    """The bytes a signature covers, in the form the message's signature
    names (:func:`signature_form`): JCS of

    ``["pigeon-sig-v2", subject, id, time, type, intent, idempotencyKey,
    replyTo, correlationId, reason, data]`` for ``"v": 2`` and for a message
    without a signature (what :func:`sign_message` signs), and of
    ``["pigeon-sig-v1", subject, id, time, data]`` for a signature without
    ``v`` (the first form, which leaves the other envelope fields
    uncovered). An absent or null covered field is ``""``; absent data is
    ``{}``. Neither form covers the fields the broker fills or sets
    (source, specversion, classification, region, sequence, ...).

    Raises ``PigeonError`` ``ENVELOPE_INVALID`` for a signature naming
    another form, an empty subject, id or time, a time that is not RFC
    3339, a covered field that is not a valid string, or data without a
    canonical form, which includes an integer the canonical form would
    round (beyond 2^53 and not spelled by the shortest decimal of its
    double, such as ``9007199254740993``): send such a value as a string.
    """
    return _signing_input(message, signature_form(message))


def _signing_input(message: dict[str, Any], form: int) -> bytes:
    subject = _envelope_string(message, "subject")
    mid = _envelope_string(message, "id")
    time = _envelope_string(message, "time")
    try:
        parse_rfc3339(time)
    except ValueError as e:
        raise new_error("ENVELOPE_INVALID", "message time is not RFC 3339") from e
    head: list[Any] = [SIG_CONTEXT, subject, mid, time]
    if form == SIGNATURE_V2:
        head = [SIG_CONTEXT_V2, subject, mid, time, *(_envelope_string(message, f, required=False) for f in SIG_V2_FIELDS)]
    data = message.get("data")
    if data is None:
        data = {}
    try:
        value = _as_jcs_value(data)
    except _InexactNumber as e:
        raise new_error(
            "ENVELOPE_INVALID",
            "message data has no exact canonical form: an integer has more precision than a double keeps; "
            "send it as a string",
        ) from e
    except (TypeError, OverflowError, ValueError) as e:
        raise new_error("ENVELOPE_INVALID", "message data has no canonical form") from e
    try:
        return rfc8785.dumps([*head, value])
    except (rfc8785.CanonicalizationError, TypeError, OverflowError, ValueError) as e:
        raise new_error("ENVELOPE_INVALID", "message data has no canonical form") from e


# The encodings of the Ed25519 points of small order, without their sign
# bit (as Go's seal.WeakSigningKey): 0 (order 4), 1 (the identity), the two
# y of the points of order 8, p-1 (order 2), and the non-canonical p and p+1.
_P25519 = 2**255 - 19
_SMALL_ORDER_ED25519 = frozenset(
    y.to_bytes(32, "little")
    for y in (
        0,
        1,
        0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826,
        0x7A03AC9277FDC74EC6CC392CFA53202A0F67100D760B3CBA4FD84D3D706A17C7,
        _P25519 - 1,
        _P25519,
        _P25519 + 1,
    )
)


def _weak_signing_key(pub: bytes) -> bool:
    """Whether the 32-byte Ed25519 public key ``pub`` is a point of small
    order: under such a key some fixed bytes verify as a signature of many or
    all messages, so it proves nothing."""
    return len(pub) == 32 and bytes(pub[:31]) + bytes([pub[31] & 0x7F]) in _SMALL_ORDER_ED25519


def _canonical_x25519(u: bytes) -> bool:
    """Whether the 32-byte little-endian X25519 public key ``u`` is below
    2^255-19 (its top bit clear included): the spelling its holder's private
    key gives. X25519 ignores the top bit and reduces u, so another spelling
    names the same key, but the seal's header binds the bytes as given and
    the holder binds its own: what is sealed for another spelling never
    opens."""
    return int.from_bytes(u, "little") < _P25519


def _signing_key(key: Any) -> nacl.signing.SigningKey:
    if isinstance(key, nacl.signing.SigningKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) in (32, 64):
        return nacl.signing.SigningKey(bytes(key[:32]))
    raise new_error("INVALID_ARGUMENT", "the key is not an Ed25519 private key (SigningKey, 32-byte seed)")


def sign_message(message: dict[str, Any], kid: str, key: Any) -> dict[str, Any]:
    """Return a copy of ``message`` signed with the Ed25519 ``key``
    (a ``nacl.signing.SigningKey`` or its 32-byte seed) under ``kid``.

    The signature is in the second form, ``{"kid", "alg": "ed25519", "sig",
    "v": 2}``, over subject, id, time, type, intent, idempotencyKey,
    replyTo, correlationId, reason and data (whatever form a signature the
    message already carries names): changing any of them afterwards makes
    it fail. An empty ``id`` gets a fresh ``msg_`` id and an empty ``time``
    the current time, since both are signed.
    """
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise new_error("INVALID_ARGUMENT", "the kid is malformed")
    sk = _signing_key(key)
    m = dict(message)
    if not m.get("id"):
        m["id"] = new_message_id()
    if not m.get("time"):
        m["time"] = now_rfc3339()
    sig = sk.sign(_signing_input(m, SIGNATURE_V2)).signature
    m["signature"] = {"kid": kid, "alg": "ed25519", "sig": b64url(sig), "v": SIGNATURE_V2}
    return m


def verify_message(message: dict[str, Any], public_key: bytes) -> None:
    """Check ``message``'s signature with the raw 32-byte Ed25519 public key.

    The signature's ``v`` names the form checked: ``2`` the second, absent
    the first (signatures made before v2, which cover subject, id, time and
    data only). Raises ``PigeonError`` ``SIGNATURE_REQUIRED`` (no
    signature) or ``SIGNATURE_INVALID``, which includes any other ``v``
    (0, 1, 3, 2.0, "2", null, true...), a key of small order (anyone can
    sign under it) and data without an exact canonical form.
    """
    sig = message.get("signature")
    if not sig:
        raise new_error("SIGNATURE_REQUIRED", "the message has no signature")
    if isinstance(sig, dict) and "v" in sig and not _is_v2(sig["v"]):
        raise new_error("SIGNATURE_INVALID", "signature.v must be absent or 2")
    if not isinstance(sig, dict) or sig.get("alg") != "ed25519":
        raise new_error("SIGNATURE_INVALID", "signature alg must be ed25519")
    try:
        raw = b64url_decode(sig.get("sig", ""))
    except ValueError as e:
        raise new_error("SIGNATURE_INVALID", "signature does not decode") from e
    if len(raw) != 64:
        raise new_error("SIGNATURE_INVALID", "signature is not 64 bytes")
    if not isinstance(public_key, (bytes, bytearray)) or len(public_key) != 32:
        raise new_error("SIGNATURE_INVALID", "the key is not an Ed25519 public key")
    if _weak_signing_key(public_key):
        raise new_error("SIGNATURE_INVALID", "the key is an Ed25519 point of small order")
    try:
        data = canonical_signing_input(message)
    except PigeonError as e:
        raise new_error("SIGNATURE_INVALID", "the message has no canonical form") from e
    try:
        nacl.signing.VerifyKey(bytes(public_key)).verify(data, raw)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError) as e:
        raise new_error("SIGNATURE_INVALID", "the signature does not verify") from e


# Go's zero time.Time, 0001-01-01T00:00:00Z, in nanoseconds since the Unix
# epoch: a window edge at that instant is no bound in Go (IsZero), and Go's
# SelectKey ranks a key with no notBefore there.
_GO_ZERO_NS = -62135596800 * 1_000_000_000
# The precisions at which the clients read times (Go's clientPrecisions,
# signature.go): Go to the nanosecond, this client to the microsecond, the
# TypeScript and Rust clients to the millisecond.
_PRECISIONS_NS = (1, 1_000, 1_000_000)


def _window_edge(x: Any) -> int | None:
    """A key's ``notBefore`` or ``notAfter`` in nanoseconds since the
    epoch; None (no bound) when absent or ``null`` or at Go's zero time
    (``0001-01-01T00:00:00Z``, at any offset); ``ValueError`` when it is
    not an RFC 3339 time."""
    if x is None:
        return None
    t = parse_rfc3339_ns(x)
    return None if t == _GO_ZERO_NS else t


def is_key_entry(k: Any) -> bool:
    """Whether ``k``, an entry of a key list, is a key as the server lists
    one (Go's ``PublicKey.Validate``, the window aside): a dict whose
    ``kid`` is 1 to 128 printable ASCII characters, whose ``use`` is
    ``sig`` with ``alg`` ``ed25519`` or ``enc`` with ``alg`` ``x25519``,
    and whose ``key`` is the one base64url spelling of 32 bytes (43
    characters), neither an Ed25519 point of small order nor an X25519 key
    of low order or not in canonical form. Any other entry (one of them
    absent, ``null`` or of another type, the entry not an object, or a
    kid, use, alg or key the server never lists) is no key:
    :meth:`~pigeon_client.http.HttpClient.keys` leaves it out of the list
    it reads, and :func:`select_key` never chooses it, so that nothing
    verifies with it and nothing is sealed for it, and it costs the caller
    none of the other keys of the list (as in the TypeScript and Rust
    clients): a sound key listed beside it is chosen, whatever the entry's
    ``notBefore``. Its window is not looked at here: a key whose window
    does not read is kept, valid at no time (:func:`_valid_at`)."""
    if not isinstance(k, dict):
        return False
    kid, use, alg, key = k.get("kid"), k.get("use"), k.get("alg"), k.get("key")
    if not isinstance(kid, str) or not _KID.fullmatch(kid) or not isinstance(key, str) or len(key) != 43:
        return False
    sig = use == "sig" and alg == "ed25519"
    if not sig and not (use == "enc" and alg == "x25519"):
        return False
    try:
        b = b64url_decode(key)
    except ValueError:
        return False
    return len(b) == 32 and not (_weak_signing_key(b) if sig else _weak_encryption_key(b))


def _weak_encryption_key(u: bytes) -> bool:
    """Whether the 32-byte X25519 public key ``u`` is unusable, as Go's
    ``seal.WeakEncryptionKey`` finds it: not in canonical form
    (:func:`_canonical_x25519`), or of low order (every secret agreed with
    it is zero). Nothing sealed for such a key opens, and :func:`seal`
    refuses it."""
    if not _canonical_x25519(u):
        return True
    try:
        return sodium.crypto_scalarmult(_PROBE, u) == bytes(32)
    except Exception:  # libsodium refuses a low-order point
        return True


# The X25519 private key _weak_encryption_key agrees a secret with (Go's
# seal probe).
_PROBE = hashlib.sha256(b"pigeon-seal-v1 low-order probe").digest()


def _valid_at(k: dict[str, Any], t: int) -> bool:
    """Whether key ``k``'s window, ``notBefore`` (inclusive) to ``notAfter``
    (exclusive), holds the instant ``t`` (nanoseconds since the epoch), as
    Go's ``PublicKey.ValidAt`` finds it: at every precision the clients
    read times, each truncated, so that ``notBefore`` binds to the
    nanosecond and ``notAfter`` to the millisecond (a window closed at
    ``…00.0005Z`` does not hold ``…00.0001Z``). A bound absent, ``null``
    or at Go's zero time is open; one that is not an RFC 3339 time
    (:func:`parse_rfc3339`: ``""``, ``0``, ``false``, a date alone, …)
    makes the key valid at no time, so nothing verifies or is sealed with
    it, and the key costs the caller none of the other keys of its list.
    Go's client reads no key list: a Go program decoding one with
    ``encoding/json`` into ``[]pigeon.PublicKey`` would refuse such a
    value, and the whole list with it."""
    try:
        nb, na = _window_edge(k.get("notBefore")), _window_edge(k.get("notAfter"))
    except ValueError:
        return False
    for d in _PRECISIONS_NS:
        at = t - t % d
        if nb is not None and at < nb - nb % d:
            return False
        if na is not None and at >= na - na % d:
            return False
    return True


def select_key(
    keys: Iterable[dict[str, Any]], kid: str, use: str, at: _dt.datetime | None = None
) -> dict[str, Any] | None:
    """The published key of ``use`` (``sig``/``enc``) valid at ``at`` (a
    timezone-aware datetime, now by default), as Go's ``SelectKey`` finds
    it: the one named ``kid``, or without a kid the one with the latest
    ``notBefore`` (the last listed among equals). An entry that is no key
    (:func:`is_key_entry`) is never chosen."""
    return _select_key_at(keys, kid, use, _ns_of(at or _dt.datetime.now(_dt.timezone.utc)))


def _select_key_at(keys: Iterable[dict[str, Any]], kid: str, use: str, t: int) -> dict[str, Any] | None:
    """:func:`select_key` at the instant ``t``, nanoseconds since the epoch
    (a message's time, :func:`parse_rfc3339_ns`)."""
    best, best_nb = None, 0
    for k in keys:
        # The cheap tests first: is_key_entry agrees an X25519 secret.
        if not isinstance(k, dict) or k.get("use") != use or not _valid_at(k, t) or not is_key_entry(k):
            continue
        if kid:
            if k.get("kid") == kid:
                return k
            continue
        # Go ranks a key with no notBefore at its zero time: one opening
        # before that instant (the year 0000, at an offset) ranks earlier.
        nb = _window_edge(k.get("notBefore"))
        nb = _GO_ZERO_NS if nb is None else nb
        if best is None or nb >= best_nb:
            best, best_nb = k, nb
    return best


def verify_message_with_keys(message: dict[str, Any], keys: Iterable[dict[str, Any]]) -> None:
    """Verify with the sender's published keys: the key of the signature's
    kid, use ``sig``, valid at the message time."""
    sig = message.get("signature")
    if not sig:
        raise new_error("SIGNATURE_REQUIRED", "the message has no signature")
    if not isinstance(sig, dict):
        raise new_error("SIGNATURE_INVALID", "the signature is not an object")
    try:
        t = parse_rfc3339_ns(message.get("time", ""))
    except ValueError as e:
        raise new_error("SIGNATURE_INVALID", "message time is not RFC 3339") from e
    k = _select_key_at(keys, sig.get("kid", ""), "sig", t)
    if k is None or not sig.get("kid"):
        raise new_error("SIGNATURE_INVALID", "no published signing key of that kid is valid at the message time")
    try:
        pub = b64url_decode(k.get("key", ""))
    except ValueError as e:
        raise new_error("SIGNATURE_INVALID", "the published key does not decode") from e
    verify_message(message, pub)


# --- keys --------------------------------------------------------------------


def _kid(prefix: str, pub: bytes) -> str:
    return prefix + b64url(hashlib.sha256(pub).digest()[:12])


@dataclass(frozen=True)
class Keys:
    """A program's Ed25519 signing pair and X25519 encryption pair with
    their kids. ``repr`` shows the kids only."""

    signing_kid: str
    signing_key: nacl.signing.SigningKey
    encryption_kid: str
    encryption_private: bytes

    @classmethod
    def generate(cls) -> "Keys":
        """Fresh keys; kids derived from the public keys as Go's seal.GenerateKeys."""
        sk = nacl.signing.SigningKey.generate()
        enc = os.urandom(32)
        return cls(
            _kid("sig-", bytes(sk.verify_key)), sk, _kid("enc-", sodium.crypto_scalarmult_base(enc)), enc
        )

    @classmethod
    def from_vector(cls, k: dict[str, str]) -> "Keys":
        """Keys from a vectors file entry (``signingKid``, ``signingSeed``,
        ``encryptionKid``, ``encryptionPrivate``, base64url)."""
        return cls(
            k["signingKid"],
            nacl.signing.SigningKey(b64url_decode(k["signingSeed"])),
            k["encryptionKid"],
            b64url_decode(k["encryptionPrivate"]),
        )

    @property
    def signing_public(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @property
    def encryption_public(self) -> bytes:
        return sodium.crypto_scalarmult_base(self.encryption_private)

    def public_keys(self) -> list[dict[str, str]]:
        """The published form of both public keys (for ``PUT /v1/accounts/{id}/keys``)."""
        return [
            {"kid": self.signing_kid, "use": "sig", "alg": "ed25519", "key": b64url(self.signing_public)},
            {"kid": self.encryption_kid, "use": "enc", "alg": "x25519", "key": b64url(self.encryption_public)},
        ]

    def __repr__(self) -> str:
        return f"Keys(signing_kid={self.signing_kid!r}, encryption_kid={self.encryption_kid!r})"


# --- sealed payloads -----------------------------------------------------------


class SealError(ValueError):
    """A sealed payload could not be opened."""


class SealTampered(SealError):
    """A check failed: a changed field, a wrong key, a malformed field."""


class SealUnsupported(SealError):
    """An unknown version or algorithm."""


class NotSealed(SealError):
    """The data has no ``sealed`` member."""


_SEALED_FIELDS = {"v", "alg", "recipientKid", "senderKid", "ephemeralKey", "nonce", "ciphertext", "sig"}


def _field(b: bytes) -> bytes:
    if len(b) > 0xFFFF:
        raise SealTampered("field too long")
    return len(b).to_bytes(2, "big") + b


def _header(rkid: str, skid: str, r: bytes, spub: bytes, e: bytes, nonce: bytes) -> bytes:
    return _SEAL_CONTEXT + b"".join(
        _field(x) for x in (SEAL_ALG.encode(), rkid.encode(), skid.encode(), r, spub, e, nonce)
    )


def _derive(shared: bytes, e: bytes, r: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=e + r, info=_HKDF_INFO).derive(shared)


def _scalarmult(priv: bytes, pub: bytes) -> bytes:
    try:
        shared = sodium.crypto_scalarmult(priv, pub)
    except Exception as e:  # libsodium refuses a low-order point
        raise SealTampered("low-order public key") from e
    if shared == bytes(32):
        raise SealTampered("low-order public key")
    return shared


def seal(
    plaintext: bytes, recipient_kid: str, recipient_public: bytes, sender_kid: str, sender_key: Any
) -> dict[str, Any]:
    """Encrypt ``plaintext`` for the recipient's X25519 public key and sign it
    with the sender's Ed25519 key; returns the sealed object. A recipient key
    that is not canonical (top bit set, u >= 2^255-19) is ``INVALID_ARGUMENT``:
    nothing sealed for it would open."""
    for kid in (recipient_kid, sender_kid):
        if not isinstance(kid, str) or not 1 <= len(kid.encode()) <= 128:
            raise new_error("INVALID_ARGUMENT", "kid must be 1 to 128 bytes")
    if len(recipient_public) != 32:
        raise new_error("INVALID_ARGUMENT", "the recipient key is not an X25519 public key")
    if not _canonical_x25519(bytes(recipient_public)):
        raise new_error("INVALID_ARGUMENT", "the recipient key is not a canonical X25519 public key")
    sk = _signing_key(sender_key)
    e_priv = os.urandom(32)
    e_pub = sodium.crypto_scalarmult_base(e_priv)
    shared = _scalarmult(e_priv, bytes(recipient_public))
    key = _derive(shared, e_pub, bytes(recipient_public))
    nonce = os.urandom(24)
    h = _header(recipient_kid, sender_kid, bytes(recipient_public), bytes(sk.verify_key), e_pub, nonce)
    ct = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(bytes(plaintext), h, nonce, key)
    sig = sk.sign(h + ct).signature
    return {
        "v": 1,
        "alg": SEAL_ALG,
        "recipientKid": recipient_kid,
        "senderKid": sender_kid,
        "ephemeralKey": b64url(e_pub),
        "nonce": b64url(nonce),
        "ciphertext": b64url(ct),
        "sig": b64url(sig),
    }


def open_sealed(sealed: dict[str, Any], recipient_private: bytes, sender_public: bytes) -> bytes:
    """Check the seal's signature with the sender's Ed25519 public key, then
    decrypt with the recipient's X25519 private key. Any failed check is
    :class:`SealTampered`, without saying which; an unknown ``v`` or ``alg``
    is :class:`SealUnsupported`."""
    if not isinstance(sealed, dict):
        raise SealTampered("sealed payload is not an object")
    if type(sealed.get("v")) is not int or sealed["v"] != 1:
        # The integer 1 only: Go decodes v as an int, and refuses 1.0 (and
        # true), which Python's == would take for 1.
        raise SealUnsupported("unknown sealed version")
    if sealed.get("alg") != SEAL_ALG:
        raise SealUnsupported("unknown sealed algorithm")
    try:
        if set(sealed) != _SEALED_FIELDS:
            raise ValueError("members")
        rkid, skid = sealed["recipientKid"], sealed["senderKid"]
        if not all(isinstance(k, str) and 1 <= len(k.encode()) <= 128 for k in (rkid, skid)):
            raise ValueError("kid")
        e_pub = b64url_decode(sealed["ephemeralKey"])
        nonce = b64url_decode(sealed["nonce"])
        ct = b64url_decode(sealed["ciphertext"])
        sig = b64url_decode(sealed["sig"])
        if len(e_pub) != 32 or len(nonce) != 24 or len(sig) != 64 or len(ct) < 16:
            raise ValueError("lengths")
        if len(sender_public) != 32 or len(recipient_private) != 32:
            raise ValueError("keys")
        if _weak_signing_key(bytes(sender_public)):
            raise ValueError("sender key of small order")
        r = sodium.crypto_scalarmult_base(bytes(recipient_private))
        h = _header(rkid, skid, r, bytes(sender_public), e_pub, nonce)
        nacl.signing.VerifyKey(bytes(sender_public)).verify(h + ct, sig)
        key = _derive(_scalarmult(bytes(recipient_private), e_pub), e_pub, r)
        return sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(ct, h, nonce, key)
    except SealError:
        raise
    except Exception as e:
        raise SealTampered("sealed payload does not open") from e


def seal_data(
    clear: dict[str, Any],
    payload: bytes,
    recipient_kid: str,
    recipient_public: bytes,
    sender_kid: str,
    sender_key: Any,
) -> dict[str, Any]:
    """Message data with the routing fields in clear and the payload sealed:
    ``{...clear, "sealed": {...}}``."""
    if "sealed" in clear:
        raise new_error("INVALID_ARGUMENT", 'clear fields may not hold "sealed"')
    return {**clear, "sealed": seal(payload, recipient_kid, recipient_public, sender_kid, sender_key)}


def open_data(data: dict[str, Any], recipient_private: bytes, sender_public: bytes) -> tuple[dict[str, Any], bytes]:
    """Split sealed message data into its clear fields and opened payload.
    The sealed object holds exactly its eight members, spelled exactly
    (another case or an extra member is :class:`SealTampered`)."""
    if not isinstance(data, dict) or "sealed" not in data:
        raise NotSealed("the data has no sealed member")
    clear = {k: v for k, v in data.items() if k != "sealed"}
    return clear, open_sealed(data["sealed"], recipient_private, sender_public)


def loads_payload(b: bytes) -> Any:
    """Decode an opened JSON payload. NaN, Infinity and -Infinity (which
    json.loads takes by default, and Go's decoder refuses) are
    ``ValueError``."""
    return json.loads(b, parse_constant=_not_json_constant)


def _not_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def seal_message(
    message: dict[str, Any],
    clear: dict[str, Any],
    payload: bytes,
    recipient_keys: Iterable[dict[str, Any]],
    sender: Keys,
) -> dict[str, Any]:
    """A copy of ``message`` whose data is ``clear`` plus ``payload`` sealed
    for the recipient's published encryption key (the valid one with the
    latest notBefore, which must be an X25519 key: ``INVALID_ARGUMENT``
    otherwise, nothing sealed), signed by ``sender``."""
    k = select_key(recipient_keys, "", "enc")
    if k is None or k.get("alg") != "x25519":
        raise new_error("INVALID_ARGUMENT", "the recipient has no valid published encryption key")
    data = seal_data(clear, payload, k["kid"], b64url_decode(k["key"]), sender.signing_kid, sender.signing_key)
    return sign_message({**message, "data": data}, sender.signing_kid, sender.signing_key)


def open_message(
    message: dict[str, Any], sender_keys: Iterable[dict[str, Any]], recipient: Keys
) -> tuple[dict[str, Any], bytes]:
    """Verify ``message``'s signature with the sender's published keys, then
    open its sealed payload: ``(clear fields, payload)``. Raises
    ``PigeonError`` (``SIGNATURE_REQUIRED``/``SIGNATURE_INVALID``) or
    :class:`SealError`."""
    sender_keys = list(sender_keys)
    verify_message_with_keys(message, sender_keys)
    data = message.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("sealed"), dict):
        raise NotSealed("the data has no sealed member")
    t = parse_rfc3339_ns(message["time"])
    k = _select_key_at(sender_keys, str(data["sealed"].get("senderKid", "")), "sig", t)
    if k is None:
        raise SealTampered("no published signing key of the sealed senderKid")
    if data["sealed"].get("recipientKid") != recipient.encryption_kid:
        raise SealTampered("sealed for another recipient key")
    return open_data(data, recipient.encryption_private, b64url_decode(k["key"]))
