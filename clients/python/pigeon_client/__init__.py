"""Python client of the Pigeon message broker.

* :func:`connect` (asyncio, WebSocket): a :class:`Session` under a
  negotiated contract - publish (pipelined), subscribe, request, receive,
  ack/nack, replay, with reconnect and typed errors.
* :class:`HttpClient` (synchronous, HTTP API): the reference clients'
  surface plus ack, nack, replay and quarantine release, and the admin and
  key routes.
* :mod:`pigeon_client.crypto`: end-to-end signatures and sealed payloads,
  byte-compatible with the Go implementation; :class:`KeyDirectory` fetches
  and caches published keys.
"""

from .crypto import (
    Keys,
    NotSealed,
    SealError,
    SealTampered,
    SealUnsupported,
    Signature,
    canonical_signing_input,
    open_data,
    open_message,
    seal_message,
    open_sealed,
    seal,
    seal_data,
    select_key,
    sign_message,
    verify_message,
    verify_message_with_keys,
)
from .errors import (
    ContractError,
    DeniedError,
    InvalidError,
    NotFoundError,
    PigeonError,
    ProgramError,
    ProtocolError,
    QuarantinedError,
    RequestTimeoutError,
    RetryAfter,
    SessionClosedError,
    StoreError,
    TransportError,
    UnauthenticatedError,
)
from .http import HttpClient, KeyDirectory, ReceiptsPage
from .model import MAX_ATTEMPT, ReceivedMessage
from .ws import Contract, Decision, Delivery, Session, Subscription, connect

__version__ = "0.1.0"

__all__ = [
    "connect",
    "Session",
    "Subscription",
    "Delivery",
    "Contract",
    "Decision",
    "ReceivedMessage",
    "MAX_ATTEMPT",
    "HttpClient",
    "KeyDirectory",
    "ReceiptsPage",
    "Keys",
    "sign_message",
    "verify_message",
    "verify_message_with_keys",
    "canonical_signing_input",
    "Signature",
    "select_key",
    "seal",
    "open_sealed",
    "seal_data",
    "open_data",
    "seal_message",
    "open_message",
    "SealError",
    "SealTampered",
    "SealUnsupported",
    "NotSealed",
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
]
