"""Every time the client reads from the server is RFC 3339 as the Go client
reads it, and nothing else.

The times are a contract's ``issuedAt`` and ``expiresAt``, a published
key's ``notBefore`` and ``notAfter``, and a message's ``time``, which
chooses the key that verifies its signature. The client reads them all
with :func:`pigeon_client.crypto.parse_rfc3339`. That takes what Go's
``time.Parse(time.RFC3339Nano)`` takes, without the forms RFC 3339 does
not have and the Go broker refuses in a signed message's time
(``parseRFC3339``, signature_time_test.go): a comma before the fraction, a
one-digit hour, an offset of 24 hours or of 60 minutes. It also refuses
the year 0000, which ``datetime`` cannot hold. ``datetime.fromisoformat``
is not used: it takes a date alone, a space for the ``T``, the basic form.

Before, the parser's ``\\d`` took any script's digits
(``２０２６-12-05T10:00:00Z``), its ``$`` a trailing newline, and it took a
lower-case ``t`` or ``z`` (Go refuses both) and an offset minute of 60 to
99. A key whose window was ``""``, ``0`` or ``false`` was taken as open and
verified. Go refuses such a window, and the key list with it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from harness import http_answering, raw_contract, raw_session, within
from pigeon_client import Contract, HttpClient, ProtocolError
from pigeon_client.crypto import Keys, b64url, parse_rfc3339, select_key, sign_message, verify_message_with_keys

UTC = dt.timezone.utc

# (text, the instant it reads as; None: refused). Each verdict is Go's
# time.Parse(time.RFC3339Nano), checked with Go 1.26, except those marked
# "Go takes it": pigeon's parseRFC3339 refuses them for a signed message's
# time, and so does this client wherever it reads a time.
TIMES: list[tuple[str, dt.datetime | None]] = [
    ("2026-12-05T10:00:00Z", dt.datetime(2026, 12, 5, 10, tzinfo=UTC)),
    ("2026-12-05T10:00:00.5Z", dt.datetime(2026, 12, 5, 10, 0, 0, 500000, tzinfo=UTC)),
    ("2026-12-05T10:00:00.123456789Z", dt.datetime(2026, 12, 5, 10, 0, 0, 123456, tzinfo=UTC)),
    # Go reads every digit it is given and cuts past the nanosecond; the
    # client cuts past the microsecond.
    ("2026-12-05T10:00:00.1234567891Z", dt.datetime(2026, 12, 5, 10, 0, 0, 123456, tzinfo=UTC)),
    ("2026-12-05T10:00:00.000000000000000001Z", dt.datetime(2026, 12, 5, 10, tzinfo=UTC)),
    ("2026-12-05T10:00:00+01:00", dt.datetime(2026, 12, 5, 9, tzinfo=UTC)),
    ("2026-12-05T10:00:00.5-01:30", dt.datetime(2026, 12, 5, 11, 30, 0, 500000, tzinfo=UTC)),
    ("2026-12-05T10:00:00-00:00", dt.datetime(2026, 12, 5, 10, tzinfo=UTC)),
    ("2026-12-05T10:00:00+23:59", dt.datetime(2026, 12, 4, 10, 1, tzinfo=UTC)),
    ("2024-02-29T10:00:00Z", dt.datetime(2024, 2, 29, 10, tzinfo=UTC)),
    ("0001-01-01T00:00:00Z", dt.datetime(1, 1, 1, tzinfo=UTC)),
    ("9999-12-31T23:59:59Z", dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    # What datetime.fromisoformat takes and RFC 3339 does not.
    ("2026-12-05", None),
    ("2026-12-05 10:00", None),
    ("2026-12-05 10:00:00Z", None),
    ("20261205T100000", None),
    ("20261205T100000Z", None),
    ("2026-12-05T10:00:00", None),
    ("2026-12-05T10:00Z", None),
    ("2026-12-05T10:00:00+0100", None),
    ("2026-12-05T10:00:00.5", None),
    # Lower case: RFC 3339 allows it, Go's time.Parse does not.
    ("2026-12-05t10:00:00Z", None),
    ("2026-12-05T10:00:00z", None),
    # Go takes it (time.Parse's own leniency); RFC 3339 does not have it.
    ("2026-12-05T10:00:00,5Z", None),
    ("2026-12-05T1:00:00Z", None),
    ("2026-12-05T10:00:00+24:00", None),
    ("2026-12-05T10:00:00+01:60", None),
    # Go takes it; datetime cannot hold it.
    ("0000-01-01T00:00:00Z", None),
    # Out of range.
    ("2026-12-05T10:00:00+01:99", None),
    ("2026-12-05T24:00:00Z", None),
    ("2026-12-05T23:59:60Z", None),
    ("2026-12-05T10:60:00Z", None),
    ("2026-02-29T10:00:00Z", None),
    ("2026-02-30T10:00:00Z", None),
    ("2026-13-05T10:00:00Z", None),
    ("2026-00-05T10:00:00Z", None),
    ("2026-12-00T10:00:00Z", None),
    # Other shapes.
    ("2026-12-05T10:00:00.Z", None),
    ("2026-12-05T10:00:00.-5Z", None),
    ("2026-1-05T10:00:00Z", None),
    ("2026-12-05T10:0:00Z", None),
    ("2026-12-05T10:00:00+1:00", None),
    ("2026-12-05T10:00:00+00:00:00", None),
    ("2026-12-05T10:00:00Z+01:00", None),
    ("2026-12-05T10:00:00+01:00Z", None),
    ("2026-12-05T10:00:00UTC", None),
    ("+2026-12-05T10:00:00Z", None),
    ("-001-12-05T10:00:00Z", None),
    ("12026-12-05T10:00:00Z", None),
    (" 2026-12-05T10:00:00Z", None),
    ("2026-12-05T10:00:00Z ", None),
    ("2026-12-05T10:00:00Z\n", None),
    ("", None),
    # Digits of other scripts, which Python's \d takes.
    ("\uff12\uff10\uff12\uff16-12-05T10:00:00Z", None),
    ("2026-12-05T1\uff10:00:00Z", None),
    ("2026-12-05T10:00:00.\u0665Z", None),
    ("2026-12-05T10:00:00\u066b5Z", None),
]

READ = [pytest.param(s, want, id=repr(s)) for s, want in TIMES if want is not None]
REFUSED = [pytest.param(s, id=repr(s)) for s, want in TIMES if want is None]


@pytest.mark.parametrize("text,want", READ)
def test_an_rfc3339_time_reads_as_its_instant(text: str, want: dt.datetime) -> None:
    assert parse_rfc3339(text) == want


@pytest.mark.parametrize("text", REFUSED)
def test_a_time_rfc3339_or_go_does_not_take_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(text)


@pytest.mark.parametrize("value", [None, 7, 1.5, True, ["2026-12-05T10:00:00Z"], {}])
def test_a_time_that_is_no_string_is_refused(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(value)


@pytest.mark.parametrize("text", REFUSED)
async def test_a_contract_with_a_time_go_does_not_read_is_refused(text: str) -> None:
    """A negotiate or renew answer, or an HTTP contract, whose ``expiresAt``
    or ``issuedAt`` is such a time is refused (``ProtocolError``); an empty
    one reads as none, as before."""
    if text == "":
        pytest.skip("an empty time reads as none")
    for member in ("expiresAt", "issuedAt"):
        with pytest.raises(ProtocolError) as e:
            Contract.from_wire({**raw_contract("x"), member: text})
        assert e.value.code == "BAD_REQUEST"
        assert e.value.details == {"member": member}
    bad = {**raw_contract("x"), "expiresAt": text}
    with http_answering() as srv:
        srv.body = json.dumps({"contract": bad}).encode()
        with pytest.raises(ProtocolError):
            HttpClient(srv.url, "t", timeout=5).connect(["x"])

    async def renewing(ws: Any, f: dict[str, Any]) -> None:
        if f["op"] == "renew":
            await ws.send(json.dumps({"op": "contract", "re": f["id"], "contract": bad}))

    async with raw_session(renewing, raw_contract("x")) as s:
        with pytest.raises(ProtocolError):
            await within(s.renew(), 5)


KEYS = Keys.generate()
NOW = dt.datetime(2026, 12, 5, 10, tzinfo=UTC)


def _signing_key(**window: Any) -> dict[str, Any]:
    return {"kid": "k1", "use": "sig", "alg": "ed25519", "key": b64url(KEYS.signing_public), **window}


def _signed(time: str = "2026-12-05T10:00:00Z") -> dict[str, Any]:
    m = {"id": "msg_1", "subject": "signed.events", "time": time, "data": {"n": 1}}
    return sign_message(m, "k1", KEYS.signing_key)


# A key window's bounds that no time can be read from. Go's time.Time
# refuses each (a string that is not RFC 3339, and any JSON value but a
# string or null), and with it the key list.
UNREAD_BOUNDS = ["", "2026-12-05", "2026-12-05 10:00:00Z", "2026-12-05t10:00:00Z", "2026-12-05T10:00:00+01:60",
                 0, 1, False, True, [], {}, ["2026-12-05T10:00:00Z"]]


@pytest.mark.parametrize("bound", ["notBefore", "notAfter"])
@pytest.mark.parametrize("value", UNREAD_BOUNDS, ids=repr)
def test_a_key_whose_window_cannot_be_read_verifies_nothing(bound: str, value: Any) -> None:
    key = _signing_key(**{bound: value})
    assert select_key([key], "k1", "sig", NOW) is None
    assert select_key([key], "", "sig", NOW) is None
    with pytest.raises(Exception) as e:
        verify_message_with_keys(_signed(), [key])
    assert getattr(e.value, "code", None) == "SIGNATURE_INVALID"
    # A key whose window reads is chosen beside it.
    good = _signing_key(notBefore="2026-01-01T00:00:00Z")
    verify_message_with_keys(_signed(), [key, good])


def test_a_key_window_absent_or_null_is_open() -> None:
    for window in ({}, {"notBefore": None}, {"notAfter": None}, {"notBefore": None, "notAfter": None}):
        verify_message_with_keys(_signed(), [_signing_key(**window)])
    key = _signing_key(notBefore="2026-12-05T10:00:00Z", notAfter="2026-12-05T10:00:00.001Z")
    verify_message_with_keys(_signed(), [key])
    with pytest.raises(Exception):
        verify_message_with_keys(_signed("2026-12-05T10:00:00.001Z"), [key])
    # Closed within the millisecond it opens in, a window holds nothing, as
    # Go's PublicKey.ValidAt reads it at every client's precision (see
    # test_time_vectors.py).
    with pytest.raises(Exception):
        verify_message_with_keys(_signed(), [_signing_key(notBefore="2026-12-05T10:00:00Z", notAfter="2026-12-05T10:00:00.000001Z")])


@pytest.mark.parametrize("time", ["2026-12-05t10:00:00Z", "2026-12-05T10:00:00z", "2026-12-05T10:00:00+00:60"])
def test_a_message_whose_time_go_does_not_read_does_not_verify(time: str) -> None:
    """A signed message's time chooses its key: one the Go broker does not
    read (pigeon's parseRFC3339) is not signed, nor verified."""
    with pytest.raises(Exception) as e:
        _signed(time)
    assert getattr(e.value, "code", None) == "ENVELOPE_INVALID"
    good = _signed()
    with pytest.raises(Exception) as e:
        verify_message_with_keys({**good, "time": time}, [_signing_key()])
    assert getattr(e.value, "code", None) == "SIGNATURE_INVALID"
