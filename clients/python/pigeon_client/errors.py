"""Typed errors: one base class carrying the broker's stable code.

Every failure a client reports is a :class:`PigeonError` with ``code`` (the
same stable code as the broker's audit record, HTTP API and WebSocket error
frame), ``message`` (never a payload value), ``status`` (the HTTP status of
the code) and ``details`` (always a dict: ``gate``, ``quarantineId``,
``decision`` where the broker gave them).

Its subclasses tell the kinds of failure apart, so callers can branch with
``except`` rather than listing codes:

* :class:`DeniedError` - an admission gate or policy refused; nothing stored.
* :class:`QuarantinedError` (a ``DeniedError``) - refused, and the redacted
  message kept in quarantine (``quarantine_id``).
* :class:`ContractError` - the contract is missing, unknown, expired,
  revoked, stale, out of scope, or none could be negotiated.
* :class:`TransportError` - the connection failed or the session is closed;
  :class:`SessionClosedError` and :class:`ProtocolError` (a frame the client
  cannot parse) are kinds of it.
* :class:`UnauthenticatedError`, :class:`NotFoundError`,
  :class:`InvalidError`, :class:`RequestTimeoutError`, :class:`StoreError`,
  :class:`ProgramError`.

The tables below are the server's (``wire.HTTPStatus`` and the groups of
its ``Err*`` sentinels); tests/test_codes.py holds them to
clients/conformance/codes.json.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = [
    "PigeonError",
    "DeniedError",
    "QuarantinedError",
    "ContractError",
    "TransportError",
    "SessionClosedError",
    "ProtocolError",
    "UnauthenticatedError",
    "NotFoundError",
    "InvalidError",
    "RequestTimeoutError",
    "StoreError",
    "ProgramError",
    "RetryAfter",
    "error_from",
    "new_error",
    "http_status",
]

_STATUS = {
    400: "BAD_REQUEST DUPLICATE_KEY INVALID_UTF8 SELECTOR_INVALID FILTER_INVALID POLICY_INVALID INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN POLICY_DENIED REPLAY_DENIED REGION_DENIED INTENT_DENIED CONTRACT_REQUIRED "
    "CONTRACT_NOT_FOUND CONTRACT_EXPIRED CONTRACT_PRINCIPAL_MISMATCH CONTRACT_STALE CONTRACT_REVOKED "
    "SUBJECT_NOT_IN_CONTRACT OPERATION_NOT_IN_CONTRACT NO_PERMITTED_SUBJECTS ACK_NOT_ALLOWED GRANT_REVOKED",
    404: "NOT_FOUND SUBJECT_NOT_FOUND MESSAGE_NOT_FOUND QUARANTINE_NOT_FOUND PROGRAM_NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT MESSAGE_ID_TAKEN",
    410: "PROGRAM_VERSION_PRUNED",
    413: "PAYLOAD_TOO_LARGE",
    422: "SENSITIVE_FIELD_DENIED RAW_PAN_DETECTED IDEMPOTENCY_REQUIRED CLASSIFICATION_DENIED "
    "ENVELOPE_INVALID SCHEMA_INVALID DATA_QUALITY_FAILED SIGNATURE_REQUIRED SIGNATURE_INVALID "
    "ENCRYPTION_REQUIRED DELIVERY_EXHAUSTED PROGRAM_INVALID PROGRAM_LIMIT_EXCEEDED HOPS_EXCEEDED",
    429: "RATE_LIMITED TOO_MANY_CONTRACTS TOO_MANY_SUBSCRIPTIONS TOO_MANY_GROUPS",
    503: "SHUTTING_DOWN SESSION_CLOSED STORE_UNAVAILABLE STORE_NO_QUORUM CLUSTER_UNCONFIRMED IDENTITY_UNAVAILABLE",
    504: "REQUEST_TIMEOUT PROGRAM_TIMEOUT",
    507: "STORE_FULL",
}  # anything else is 500: INTERNAL, STORE_CORRUPT, AUDIT_TAMPERED, PROGRAM_TRAPPED
_STATUS_BY_CODE = {code: status for status, codes in _STATUS.items() for code in codes.split()}

_CONTRACT = set(
    "CONTRACT_REQUIRED CONTRACT_NOT_FOUND CONTRACT_EXPIRED CONTRACT_PRINCIPAL_MISMATCH CONTRACT_STALE "
    "CONTRACT_REVOKED SUBJECT_NOT_IN_CONTRACT OPERATION_NOT_IN_CONTRACT GRANT_REVOKED NO_PERMITTED_SUBJECTS "
    "TOO_MANY_CONTRACTS".split()
)
_UNAUTHENTICATED = {"UNAUTHENTICATED", "IDENTITY_UNAVAILABLE"}
_NOT_FOUND = set(
    "SUBJECT_NOT_FOUND MESSAGE_NOT_FOUND QUARANTINE_NOT_FOUND NOT_FOUND PROGRAM_NOT_FOUND PROGRAM_VERSION_PRUNED".split()
)
_INVALID = set(
    "BAD_REQUEST ENVELOPE_INVALID SELECTOR_INVALID FILTER_INVALID POLICY_INVALID PAYLOAD_TOO_LARGE "
    "INVALID_ARGUMENT METHOD_NOT_ALLOWED CONFLICT DUPLICATE_KEY INVALID_UTF8 MESSAGE_ID_TAKEN PROGRAM_INVALID".split()
)
_TRANSPORT = {"SHUTTING_DOWN", "SESSION_CLOSED"}
_STORE = set(
    "STORE_CORRUPT AUDIT_TAMPERED STORE_UNAVAILABLE STORE_FULL STORE_NO_QUORUM CLUSTER_UNCONFIRMED INTERNAL".split()
)
_PROGRAM = {"PROGRAM_TRAPPED", "PROGRAM_TIMEOUT", "PROGRAM_LIMIT_EXCEEDED"}


# The server's stable codes (errors.go at the repository's root);
# tests/test_dupkey.py holds them to clients/conformance/codes.json.
_SERVER_CODES = frozenset((
    "ACK_NOT_ALLOWED AUDIT_TAMPERED BAD_REQUEST CLASSIFICATION_DENIED CLUSTER_UNCONFIRMED CONFLICT "
    "CONTRACT_EXPIRED CONTRACT_NOT_FOUND CONTRACT_PRINCIPAL_MISMATCH CONTRACT_REQUIRED CONTRACT_REVOKED "
    "CONTRACT_STALE DATA_QUALITY_FAILED DELIVERY_EXHAUSTED DUPLICATE_KEY ENCRYPTION_REQUIRED ENVELOPE_INVALID "
    "FILTER_INVALID FORBIDDEN GRANT_REVOKED HOPS_EXCEEDED IDEMPOTENCY_REQUIRED IDENTITY_UNAVAILABLE INTENT_DENIED INTERNAL "
    "INVALID_ARGUMENT INVALID_UTF8 MESSAGE_ID_TAKEN MESSAGE_NOT_FOUND METHOD_NOT_ALLOWED NOT_FOUND "
    "NO_PERMITTED_SUBJECTS OPERATION_NOT_IN_CONTRACT PAYLOAD_TOO_LARGE POLICY_DENIED POLICY_INVALID "
    "PROGRAM_INVALID PROGRAM_LIMIT_EXCEEDED PROGRAM_NOT_FOUND PROGRAM_TIMEOUT PROGRAM_TRAPPED "
    "PROGRAM_VERSION_PRUNED QUARANTINE_NOT_FOUND RATE_LIMITED RAW_PAN_DETECTED REGION_DENIED REPLAY_DENIED "
    "REQUEST_TIMEOUT SCHEMA_INVALID SELECTOR_INVALID SENSITIVE_FIELD_DENIED SESSION_CLOSED SHUTTING_DOWN "
    "SIGNATURE_INVALID SIGNATURE_REQUIRED STORE_CORRUPT STORE_FULL STORE_NO_QUORUM STORE_UNAVAILABLE "
    "SUBJECT_NOT_FOUND SUBJECT_NOT_IN_CONTRACT TOO_MANY_CONTRACTS TOO_MANY_GROUPS TOO_MANY_SUBSCRIPTIONS "
    "UNAUTHENTICATED"
).split())


def is_server_code(code: object) -> bool:
    """Whether ``code`` is one of the server's stable codes."""
    return isinstance(code, str) and code in _SERVER_CODES


def http_status(code: str) -> int:
    """The HTTP status the broker gives ``code`` (500 for unknown codes)."""
    return _STATUS_BY_CODE.get(code, 500)


class PigeonError(Exception):
    """A failure with the broker's stable ``code``.

    ``details`` is always a dict. ``status`` is the HTTP status of the code
    (the one the server answered, over HTTP).
    """

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.status = status if status is not None else http_status(code)
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{code}: {message}" if message else code)

    @property
    def gate(self) -> str | None:
        """The admission gate that refused, when one did."""
        return self.details.get("gate")

    @property
    def quarantine_id(self) -> str | None:
        """The quarantine record's id, when the message was quarantined: the
        details' ``quarantineId`` when it is a non-empty string."""
        q = self.details.get("quarantineId")
        return q if isinstance(q, str) and q else None

    @property
    def decision(self) -> dict[str, Any] | None:
        """The gate's whole decision, when a gate refused: the details'
        ``decision`` when it reads as one (see :func:`_gate_decision`),
        else ``None``."""
        d = self.details.get("decision")
        return d if _gate_decision(d) else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, status={self.status})"


class DeniedError(PigeonError):
    """Refused by policy or an admission gate; nothing was stored."""


class QuarantinedError(DeniedError):
    """Refused, with the (redacted) message kept in quarantine."""


class ContractError(PigeonError):
    """The contract is missing, unknown, expired, revoked, stale or out of
    scope, or no contract could be negotiated."""


class UnauthenticatedError(PigeonError):
    """The credential resolves to no principal (401), or cannot be judged
    now (``IDENTITY_UNAVAILABLE``, 503: its identity provider cannot be
    reached; retrying later may succeed)."""


class NotFoundError(PigeonError):
    """An unknown subject, message, quarantine record or route."""


class InvalidError(PigeonError):
    """Malformed input: envelope, selector, filter, argument."""


class RequestTimeoutError(PigeonError):
    """A request's deadline passed without a reply."""


class StoreError(PigeonError):
    """The broker's storage failed (corrupt, tampered, full, unavailable,
    no quorum of its replicas), a cluster did not confirm a change in time,
    or the broker failed otherwise (``INTERNAL``)."""


class ProgramError(PigeonError):
    """A program handling a delivery failed: it trapped, ran past its time
    or exceeded a limit (``PROGRAM_TRAPPED``, ``PROGRAM_TIMEOUT``,
    ``PROGRAM_LIMIT_EXCEEDED``)."""


class TransportError(PigeonError):
    """The connection failed, dropped, or the server is going away."""


class SessionClosedError(TransportError):
    """The session is closed (or its connection lost): the call was not made."""


class ProtocolError(TransportError):
    """The server sent something the client cannot take: a frame that is not
    JSON, not an object, or an answer of the wrong shape."""


class RetryAfter(Exception):
    """Raised by a subscription handler to nack with a retry delay
    (seconds); ``cause`` is kept for logging."""

    def __init__(self, delay: float, cause: BaseException | None = None) -> None:
        self.delay = delay
        self.cause = cause
        super().__init__(f"retry after {delay}s" + (f": {cause}" if cause else ""))


_DECISION_STRINGS = ("code", "gate", "reason", "subject", "subjectId", "contractId", "policyId", "schemaId",
                     "principal", "messageId", "quarantineId")
"""The string members of a gate's decision (``pigeon.Decision``) besides
its ``outcome``."""


def _gate_decision(d: Any) -> bool:
    """Whether ``d``, an error's ``details.decision``, reads as a gate's
    decision as the Go client reads it (``wire.Error.Err``: it takes one
    that decodes into ``pigeon.Decision`` with an outcome, and leaves any
    other out): an object whose ``outcome`` is a non-empty string, whose
    other string members (``code``, ``gate``, ``reason``,
    ``quarantineId``…) are strings, absent or ``null``, and whose ``time``
    is absent, ``null`` or an RFC 3339 time
    (:func:`~pigeon_client.crypto.parse_rfc3339`). Any other is not the
    error's decision: it does not make the error a
    :class:`QuarantinedError`, and :attr:`PigeonError.decision` is
    ``None``."""
    if not isinstance(d, dict) or not isinstance(d.get("outcome"), str) or not d["outcome"]:
        return False
    if any(d.get(k) is not None and not isinstance(d[k], str) for k in _DECISION_STRINGS):
        return False
    if d.get("time") is None:
        return True
    from .crypto import parse_rfc3339  # crypto imports this module

    try:
        parse_rfc3339(d["time"])
    except ValueError:
        return False
    return True


def _class_for(code: str, details: dict[str, Any]) -> type[PigeonError]:
    if code in _UNAUTHENTICATED:
        return UnauthenticatedError
    if code in _CONTRACT:
        return ContractError
    if code in _TRANSPORT:
        return SessionClosedError if code == "SESSION_CLOSED" else TransportError
    if code == "REQUEST_TIMEOUT":
        return RequestTimeoutError
    decision = details.get("decision")
    q = details.get("quarantineId")
    quarantined = (isinstance(q, str) and bool(q)) or (_gate_decision(decision) and decision["outcome"] == "quarantine")
    if quarantined or code == "DELIVERY_EXHAUSTED":
        return QuarantinedError
    if code in _NOT_FOUND:
        return NotFoundError
    if code in _INVALID:
        return InvalidError
    if code in _STORE:
        return StoreError
    if code in _PROGRAM:
        return ProgramError
    return DeniedError


def error_from(obj: Any, status: int | None = None) -> PigeonError:
    """Build the typed error of a wire error object ``{"code","message","details"}``
    (or a body ``{"error": {...}}``)."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
        obj = obj["error"]
    if not isinstance(obj, dict) or not isinstance(obj.get("code"), str):
        return ProtocolError("BAD_REQUEST", f"undecodable error from server: {obj!r:.200}", status=status)
    code = obj["code"]
    details = obj.get("details")
    details = details if isinstance(details, dict) else {}
    message = obj.get("message") if isinstance(obj.get("message"), str) else ""
    return _class_for(code, details)(code, message, status=status, details=details)


def new_error(code: str, message: str = "", *, status: int | None = None, details: dict[str, Any] | None = None) -> PigeonError:
    """The typed error of ``code`` (the subclass its kind calls for)."""
    details = dict(details or {})
    return _class_for(code, details)(code, message, status=status, details=details)


_LOG_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape_char(m: "re.Match[str]") -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape_log_text(text: str) -> str:
    """``text`` with its control characters written as escapes: C0 (tab,
    newline, ESC…), DEL and C1 as ``\\xNN``, U+2028 and U+2029 as
    ``\\uNNNN``. What the client logs passes through it, so a server's text
    (an error's code or message, a message id, a close reason) cannot forge
    log lines or drive a terminal."""
    return _LOG_CONTROL.sub(_escape_char, text)


class _EscapingLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose every line is formatted, then written with
    :func:`escape_log_text` (the traceback of ``exc_info``, formatted by the
    handler, is not)."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        try:
            text = str(msg) % args if args else str(msg)
        except Exception:  # a format that does not fit its arguments: as logging would show them
            text = f"{msg!s} {args!r}"
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        self.logger.log(level, "%s", escape_log_text(text), **kwargs)


def escaping_logger(name: str) -> logging.LoggerAdapter:  # type: ignore[type-arg]
    """The logger ``name``, writing control characters as escapes."""
    return _EscapingLogger(logging.getLogger(name))
