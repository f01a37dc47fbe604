"""Every time of clients/conformance/vectors/times.json (Go's reading of
each text: ``parseRFC3339``, then ``time.Parse``) is read here as Go reads
it: to the nanosecond by :func:`~pigeon_client.crypto.parse_rfc3339_ns`,
and to the microsecond, truncated, by
:func:`~pigeon_client.crypto.parse_rfc3339` (a ``datetime`` holds no
finer). Every key window of it holds a message time as Go's
``VerifyMessageWithKeys`` finds it (``PublicKey.ValidAt``).

The client read a message's time and a key's window to the microsecond
and compared them there alone: a key opening within a microsecond held a
message time Go finds before it, and one closing within a millisecond a
message time Go (and the TypeScript and Rust clients, which read
milliseconds) finds past it, so a signature verified here that Go
refuses. A window edge at Go's zero time (``0001-01-01T00:00:00Z``, at any
offset) closed the key, where Go reads it as no bound.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Callable, Iterator

import nacl.signing
import pytest

from harness import ROOT, Answering, http_answering
from pigeon_client import PigeonError, ProtocolError
from pigeon_client import crypto
from pigeon_client.crypto import Keys, parse_rfc3339, select_key, sign_message, verify_message_with_keys
from pigeon_client.http import MAX_ACCOUNT_KEYS, HttpClient, KeyDirectory

VECTORS = json.loads((ROOT / "clients/conformance/vectors/times.json").read_text(encoding="utf-8"))

# Rows whose outcome here is documented to differ from Go's, by name, with
# the reason. None: Python's integers keep every nanosecond, and a
# ``datetime`` holds every instant of the vectors (the year 0000 and 10000
# ones as a time of the year 0001 or 9999 at its offset).
DIFFERS: dict[str, str] = {}

KEYS = Keys("sig-times", nacl.signing.SigningKey(bytes([7]) * 32), "enc-times", bytes([107]) * 32)
SIG_KEY, ENC_KEY = KEYS.public_keys()
UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
NS = 10**9


def _go_ns(case: dict[str, Any]) -> int | None:
    """Go's reading of a case, nanoseconds since the epoch; None: Go refuses it."""
    return None if case.get("refused") else int(case["unixSeconds"]) * NS + int(case["nanos"])


def _ns_of(t: dt.datetime) -> int:
    d = t - EPOCH
    return (d.days * 86400 + d.seconds) * NS + d.microseconds * 1000


def _spell(ns: int) -> str:
    """The instant ``ns`` spelled as RFC 3339 with nine digits of fraction:
    in UTC, or at the offset +23:59 or -23:59 that brings an instant of the
    year 0000 or 10000 into 0001 to 9999."""
    for off in (0, 23 * 60 + 59, -(23 * 60 + 59)):
        local = ns + off * 60 * NS
        sec, frac = divmod(local, NS)
        days, sod = divmod(sec, 86400)
        ordinal = days + EPOCH.toordinal()
        if not dt.date.min.toordinal() <= ordinal <= dt.date.max.toordinal():
            continue
        zone = "Z" if off == 0 else ("+" if off > 0 else "-") + "23:59"
        clock = f"{sod // 3600:02d}:{sod // 60 % 60:02d}:{sod % 60:02d}.{frac:09d}"
        return f"{dt.date.fromordinal(ordinal).isoformat()}T{clock}{zone}"
    raise AssertionError(f"no RFC 3339 spelling of {ns}")


def _signed_at(time: str) -> dict[str, Any]:
    m = {"subject": "x", "id": "msg_times", "time": time, "data": {"n": 1}}
    return sign_message(m, KEYS.signing_kid, KEYS.signing_key)


def _verifies(m: dict[str, Any], keys: list[dict[str, Any]]) -> bool:
    try:
        verify_message_with_keys(m, keys)
    except PigeonError as e:
        assert e.code == "SIGNATURE_INVALID", e
        return False
    return True


def _outcome(name: str, got: Any, want: Any) -> None:
    if name in DIFFERS:
        return
    assert got == want, f"{name}: {got!r}, Go: {want!r}"


def test_the_vectors_are_read() -> None:
    assert len(VECTORS["cases"]) >= 100
    assert len(VECTORS["windows"]) >= 15
    assert not set(DIFFERS) - {c["name"] for c in VECTORS["cases"] + VECTORS["windows"]}


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_every_time_reads_as_go_reads_it(case: dict[str, Any]) -> None:
    want = _go_ns(case)
    try:
        got: int | None = crypto.parse_rfc3339_ns(case["time"])
    except ValueError:
        got = None
    _outcome(case["name"], got, want)
    # The datetime: the same instant, truncated toward the past to the microsecond.
    try:
        micro: int | None = _ns_of(parse_rfc3339(case["time"]))
    except ValueError:
        micro = None
    _outcome(case["name"], micro, None if want is None else want // 1000 * 1000)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_a_message_time_signs_and_verifies_as_go_reads_it(case: dict[str, Any]) -> None:
    """A time Go refuses is not signed (``ENVELOPE_INVALID``) nor verified;
    a message at a time it reads verifies with a key opening at that
    instant and not with one opening a nanosecond later."""
    name, text, want = case["name"], case["time"], _go_ns(case)
    if want is None:
        if text != "":  # sign_message stamps an empty time with now, as Go's SignMessage
            try:
                _signed_at(text)
                signed = "signed"
            except PigeonError as e:
                signed = e.code
            _outcome(name, signed, "ENVELOPE_INVALID")
        _outcome(name, _verifies({**_signed_at("2026-12-05T10:20:30Z"), "time": text}, [SIG_KEY]), False)
        return
    m = _signed_at(text)
    _outcome(name, _verifies(m, [SIG_KEY]), True)
    _outcome(name, _verifies(m, [{**SIG_KEY, "notBefore": text}]), True)
    at, later = _spell(want), _spell(want + 1)
    assert crypto.parse_rfc3339_ns(at) == want, at
    _outcome(name, _verifies(m, [{**SIG_KEY, "notBefore": at}]), True)
    _outcome(name, _verifies(m, [{**SIG_KEY, "notBefore": later}]), False)


@pytest.mark.parametrize("case", [c for c in VECTORS["cases"] if c.get("refused")], ids=lambda c: c["name"])
def test_a_key_whose_window_does_not_read_is_valid_at_no_time(case: dict[str, Any]) -> None:
    m = _signed_at("2026-12-05T10:20:30Z")
    assert _verifies(m, [SIG_KEY])
    for edge in ("notBefore", "notAfter"):
        _outcome(case["name"], _verifies(m, [{**SIG_KEY, edge: case["time"]}]), False)
        for at in (dt.datetime.min.replace(tzinfo=UTC), EPOCH, dt.datetime.max.replace(tzinfo=UTC)):
            _outcome(case["name"], select_key([{**SIG_KEY, edge: case["time"]}], SIG_KEY["kid"], "sig", at), None)
            _outcome(case["name"], select_key([{**ENC_KEY, edge: case["time"]}], "", "enc", at), None)


def _key_text(k: dict[str, Any], window: dict[str, Any]) -> str:
    """The JSON text of key ``k`` with the window of a row (the JSON texts
    of its edges)."""
    text = json.dumps(k)[:-1]
    for name in ("notBefore", "notAfter"):
        if name in window:
            text += f', "{name}": {window[name]}'
    return text + "}"


def _with_window(k: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    """Key ``k`` with the window of a row, read from its JSON text as a
    published key list is."""
    return json.loads(_key_text(k, window))


@pytest.mark.parametrize("window", VECTORS["windows"], ids=lambda w: w["name"])
def test_every_key_window_holds_a_message_time_as_go_finds_it(window: dict[str, Any]) -> None:
    _outcome(window["name"], _verifies(_signed_at(window["time"]), [_with_window(SIG_KEY, window)]), window["valid"])


def test_the_windows_go_does_not_decode_are_read() -> None:
    refused = [w for w in VECTORS["windows"] if w.get("refused")]
    assert len(refused) >= 10
    assert all(not w["valid"] for w in refused)


@pytest.mark.parametrize("window", [w for w in VECTORS["windows"] if w.get("refused")], ids=lambda w: w["name"])
def test_a_key_whose_window_go_does_not_decode_is_valid_at_no_time(window: dict[str, Any]) -> None:
    """Go does not decode a key whose window edge is neither null nor an
    RFC 3339 string (the empty string, a number, ``true``, an object, a
    list): nothing verifies with it here, nothing is sealed for it, and
    beside an open key the open one is chosen."""
    name = window["name"]
    m = _signed_at("2026-12-05T10:20:30Z")
    _outcome(name, _verifies(m, [_with_window(SIG_KEY, window)]), False)
    other = {**ENC_KEY, "kid": "enc-other"}
    for at in (dt.datetime.min.replace(tzinfo=UTC), EPOCH, dt.datetime(2026, 12, 5, tzinfo=UTC), dt.datetime.max.replace(tzinfo=UTC)):
        _outcome(name, select_key([_with_window(SIG_KEY, window)], SIG_KEY["kid"], "sig", at), None)
        _outcome(name, select_key([_with_window(ENC_KEY, window)], "", "enc", at), None)
        _outcome(name, (select_key([ENC_KEY, _with_window(other, window)], "", "enc", at) or {}).get("kid"), ENC_KEY["kid"])


def _unreadable_windows() -> list[dict[str, Any]]:
    """Every window of the vectors that makes a key valid at no time: each
    refused time as the key's ``notBefore`` and as its ``notAfter``, and
    each refused window; each with its name and the JSON texts of its
    edges."""
    rows: list[dict[str, Any]] = [
        {"name": f"{c['name']}, as {edge}", edge: json.dumps(c["time"])}
        for c in VECTORS["cases"] if c.get("refused") for edge in ("notBefore", "notAfter")
    ]
    return rows + [w for w in VECTORS["windows"] if w.get("refused")]


UNREADABLE = _unreadable_windows()
OTHER = Keys("sig-other", nacl.signing.SigningKey(bytes([8]) * 32), "enc-other", bytes([108]) * 32)


@pytest.fixture(scope="module")
def key_lists() -> Iterator[tuple[Answering, dict[str, bytes]]]:
    """An HTTP endpoint answering ``GET /v1/accounts/{id}/keys`` with the
    body the test sets for the path."""
    lists: dict[str, bytes] = {}
    with http_answering() as a:
        a.respond = lambda path: (200, lists[path])
        yield a, lists


def test_the_unreadable_windows_are_read() -> None:
    assert len(UNREADABLE) >= 150


@pytest.mark.parametrize("window", UNREADABLE, ids=lambda w: w["name"])
def test_a_key_list_holding_a_key_whose_window_does_not_read_keeps_every_other_key(
    window: dict[str, Any], key_lists: tuple[Answering, dict[str, bytes]]
) -> None:
    """An account's key list is read key by key: a key whose window does
    not read is kept as listed and valid at no time, and costs the caller
    none of the other keys: they verify, and the encryption key among them
    is sealed for, though the unreadable one is listed after it (where,
    valid, it would be chosen). The TypeScript and Rust clients read the
    list alike. Go's client reads no key list: a Go program decoding the
    answer into ``[]pigeon.PublicKey`` refuses the whole list (the
    vectors' refused rows)."""
    server, lists = key_lists
    other_sig, other_enc = OTHER.public_keys()
    listed = [_key_text(SIG_KEY, window), json.dumps(other_sig), json.dumps(ENC_KEY), _key_text(other_enc, window)]
    account = f"account-{UNREADABLE.index(window)}"
    lists[f"/v1/accounts/{account}/keys"] = ('{"keys": [' + ", ".join(listed) + "]}").encode()
    directory = KeyDirectory(HttpClient(server.url, "t"))
    keys = directory.get(account)
    assert keys == [json.loads(k) for k in listed]
    assert not _verifies(_signed_at("2026-12-05T10:20:30Z"), keys)
    theirs = {"subject": "x", "id": "msg_times", "time": "2026-12-05T10:20:30Z", "data": {"n": 1}}
    directory.verify(account, sign_message(theirs, OTHER.signing_kid, OTHER.signing_key))
    assert directory.encryption_key(account)["kid"] == ENC_KEY["kid"]


def _without(k: dict[str, Any], name: str) -> dict[str, Any]:
    return {n: v for n, v in k.items() if n != name}


def _key_bytes(k: dict[str, Any], b: bytes) -> dict[str, Any]:
    """The key ``k`` with its bytes replaced by ``b``."""
    return {**k, "key": crypto.b64url(b)}


# Entries of a key list that are no key: each a name and what it makes of
# a sound key (of either use). The same rows as the TypeScript
# (test/time_vectors.test.mjs) and Rust (tests/times.rs) tables. The rows
# from "kid empty" on are of the right types but hold what the server never
# lists (``PublicKey.Validate`` refuses it) and what sealing or verifying
# with fails on.
NO_KEYS: list[Any] = [
    pytest.param(lambda k: _without(k, "kid"), id="kid absent"),
    pytest.param(lambda k: {**k, "kid": 7}, id="kid a number"),
    pytest.param(lambda k: {**k, "use": {"use": k["use"]}}, id="use an object"),
    pytest.param(lambda k: {**k, "alg": None}, id="alg null"),
    pytest.param(lambda k: _without(k, "key"), id="key absent"),
    pytest.param(lambda k: k["kid"], id="the entry a string, not an object"),
    pytest.param(lambda k: {**k, "kid": ""}, id="kid empty"),
    pytest.param(lambda k: {**k, "kid": "k" * 129}, id="kid of 129 characters"),
    pytest.param(lambda k: {**k, "kid": k["kid"] + " 2"}, id="kid holding a space"),
    pytest.param(lambda k: {**k, "kid": k["kid"] + "\n"}, id="kid ending in a line feed"),
    pytest.param(lambda k: {**k, "kid": k["kid"] + "\u00e9"}, id="kid not ASCII"),
    pytest.param(lambda k: {**k, "use": "signing"}, id="use unknown"),
    pytest.param(lambda k: {**k, "alg": "x25519" if k["use"] == "sig" else "ed25519"}, id="alg of the other use"),
    pytest.param(lambda k: {**k, "key": ""}, id="key empty"),
    pytest.param(lambda k: _key_bytes(k, crypto.b64url_decode(k["key"])[:31]), id="key of 31 bytes"),
    pytest.param(lambda k: _key_bytes(k, crypto.b64url_decode(k["key"]) + b"\x01"), id="key of 33 bytes"),
    pytest.param(lambda k: {**k, "key": k["key"] + "="}, id="key padded"),
    pytest.param(lambda k: {**k, "key": k["key"][:20] + "\n" + k["key"][20:]}, id="key holding a line feed"),
    pytest.param(lambda k: {**k, "key": "+/" + k["key"][2:]}, id="key in standard base64"),
    pytest.param(lambda k: {**k, "key": k["key"][:42] + ("C" if k["key"][42] == "B" else "B")},
                 id="key whose last character has bits past the 32 bytes"),
    pytest.param(lambda k: _key_bytes(k, bytes([1]) + bytes(31)),
                 id="key of small order (the Ed25519 identity, the X25519 u = 1)"),
    pytest.param(lambda k: _key_bytes(k, bytes([0xED]) + bytes([0xFF]) * 30 + bytes([0x7F])),
                 id="key not canonical (2^255-19)"),
]


@pytest.mark.parametrize("no_key", NO_KEYS)
def test_a_key_list_holding_an_entry_that_is_no_key_keeps_every_other_key(
    no_key: Callable[[dict[str, Any]], Any], key_lists: tuple[Answering, dict[str, bytes]]
) -> None:
    """An account's key list is read entry by entry: an entry that is no
    key (not an object; its ``kid``, ``use``, ``alg`` or ``key`` absent,
    ``null`` or not a string; or a key the server never lists: a kid not
    of 1 to 128 printable ASCII characters, a use other than ``sig`` with
    ``ed25519`` or ``enc`` with ``x25519``, a key that is not the one
    base64url spelling of 32 bytes, a key of small order or not canonical)
    is left out, so that nothing verifies with it and nothing is sealed for
    it, and costs the caller none of the other keys: they verify, and the
    encryption key among them is sealed for, though the entry is listed
    after it with a later ``notBefore`` (where, were it a key, it would be
    chosen). The TypeScript and Rust clients read the list alike. This
    client refused the whole list for an entry that is not an object
    (``ProtocolError``), and kept the other entries as listed: one without
    a kid, or with an ``alg`` null, listed last was chosen to seal for, and
    sealing failed; so, later, was one of the right types whose kid was
    empty or whose key was 31 bytes. :func:`select_key` never chooses such
    an entry of a list handed to it. The entries still count towards the
    bound of an answer (:data:`MAX_ACCOUNT_KEYS`): past it, the answer is
    refused."""
    server, lists = key_lists
    other_sig, other_enc = OTHER.public_keys()
    listed = [no_key(SIG_KEY), other_sig, ENC_KEY, no_key({**other_enc, "notBefore": "2026-01-01T00:00:00Z"})]
    mine = _signed_at("2026-12-05T10:20:30Z")
    assert (select_key(listed, "", "enc") or {}).get("kid") == ENC_KEY["kid"]
    assert not _verifies(mine, listed)
    account = f"account-no-key-{id(no_key)}"
    lists[f"/v1/accounts/{account}/keys"] = json.dumps({"keys": listed}).encode()
    directory = KeyDirectory(HttpClient(server.url, "t"))
    keys = directory.get(account)
    assert keys == [other_sig, ENC_KEY]
    with pytest.raises(PigeonError) as e:
        directory.verify(account, mine)
    assert e.value.code == "SIGNATURE_INVALID"
    theirs = {"subject": "x", "id": "msg_times", "time": "2026-12-05T10:20:30Z", "data": {"n": 1}}
    directory.verify(account, sign_message(theirs, OTHER.signing_kid, OTHER.signing_key))
    assert directory.encryption_key(account)["kid"] == ENC_KEY["kid"]
    # Listed past the bound, beside as many keys as make it up, the entry
    # is one too many: the answer is refused.
    lists[f"/v1/accounts/{account}-past-the-bound/keys"] = json.dumps(
        {"keys": [other_sig] * MAX_ACCOUNT_KEYS + [no_key(SIG_KEY)]}).encode()
    with pytest.raises(ProtocolError) as past:
        directory.get(f"{account}-past-the-bound")
    assert f"more than {MAX_ACCOUNT_KEYS}" in str(past.value), past.value


ZERO = "0001-01-01T00:00:00Z"


@pytest.mark.parametrize("zero", [ZERO, "0001-01-01T01:00:00+01:00", "0001-01-01T00:00:00.000000000-00:00"])
def test_a_window_edge_at_gos_zero_time_is_no_bound(zero: str) -> None:
    now = dt.datetime(2026, 12, 5, 10, 20, 30, tzinfo=UTC)
    assert (select_key([{**ENC_KEY, "notAfter": zero}], "", "enc", now) or {}).get("kid") == ENC_KEY["kid"]
    assert _verifies(_signed_at("2026-12-05T10:20:30Z"), [{**SIG_KEY, "notAfter": zero}])
    # A message time before the zero instant: a notBefore there is no bound either.
    assert _verifies(_signed_at("0001-01-01T00:30:00+01:00"), [{**SIG_KEY, "notBefore": zero}])
    # A notAfter a nanosecond past it does close the key.
    closed = {**SIG_KEY, "notAfter": "0001-01-01T00:00:00.000000001Z"}
    assert not _verifies(_signed_at("2026-12-05T10:20:30Z"), [closed])


def test_without_a_kid_the_latest_notbefore_is_chosen_as_go_ranks_it() -> None:
    """Go's SelectKey ranks a key with no notBefore, or one at its zero
    time, at that zero time: one opening before that instant (the year
    0000, at an offset) ranks earlier; among equals the last listed; and
    notBefore is ranked to the nanosecond."""
    now = dt.datetime(2026, 12, 5, 10, 20, 30, tzinfo=UTC)
    other_keys = Keys("sig-other", nacl.signing.SigningKey(bytes([8]) * 32), "enc-other", bytes([108]) * 32)
    other = other_keys.public_keys()[1]
    before = {**other, "notBefore": "0001-01-01T00:30:00+01:00"}
    for open_ in (ENC_KEY, {**ENC_KEY, "notBefore": None}, {**ENC_KEY, "notBefore": ZERO}):
        assert select_key([open_, before], "", "enc", now)["kid"] == ENC_KEY["kid"]
        assert select_key([before, open_], "", "enc", now)["kid"] == ENC_KEY["kid"]
    zero_other = {**other, "notBefore": ZERO}
    assert select_key([ENC_KEY, zero_other], "", "enc", now)["kid"] == other["kid"]
    assert select_key([zero_other, ENC_KEY], "", "enc", now)["kid"] == ENC_KEY["kid"]
    a = {**ENC_KEY, "notBefore": "2026-01-01T00:00:00.0000001Z"}
    b = {**other, "notBefore": "2026-01-01T00:00:00.0000002Z"}
    assert select_key([b, a], "", "enc", now)["kid"] == other["kid"]
    assert select_key([a, b], "", "enc", now)["kid"] == other["kid"]
