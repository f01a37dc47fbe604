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
:attr:`~pigeon_client.subscription.Delivery.hops` read it as an ``int``."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from .crypto import parse_rfc3339
from .errors import ProtocolError

__all__ = ["Contract", "Decision"]

_MAX_HOPS = (1 << 32) - 1


def _hops(v: Any) -> int:
    """A message's ``hops`` (docs/protocol.md, "hops"): the integer of 0 to
    2^32-1 the broker sends, else 0, as the client reads a sequence it
    cannot use as none rather than refusing the message: absent, ``None``,
    a bool (which Python takes for an int), a float, a string, a negative
    or one beyond 32 bits."""
    return v if type(v) is int and 0 <= v <= _MAX_HOPS else 0


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
    def from_wire(cls, d: Any) -> "Contract":
        if not isinstance(d, dict) or not isinstance(d.get("id"), str):
            raise ProtocolError("BAD_REQUEST", "undecodable contract from server")

        def t(name: str) -> _dt.datetime | None:
            try:
                return parse_rfc3339(d[name]) if d.get(name) else None
            except ValueError:
                return None

        subjects_ = d.get("subjects")
        if subjects_ is not None and not isinstance(subjects_, list):
            # A TypeError here would escape the reconnect and renewal tasks.
            raise ProtocolError("BAD_REQUEST", "undecodable contract from server: subjects is not a list")
        subjects = [s for s in subjects_ or [] if isinstance(s, dict)]
        return cls(d["id"], d.get("principal", ""), subjects, d.get("region", ""), t("issuedAt"), t("expiresAt"), d)

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
        return self.message.get("id", "")

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
    def from_wire(cls, f: Any) -> "Decision":
        if not isinstance(f, dict) or not isinstance(f.get("status"), str) or not isinstance(f.get("message"), dict):
            raise ProtocolError("BAD_REQUEST", "undecodable decision from server")
        return cls(f["status"], f["message"])
