"""Sealing through a KeyDirectory follows the recipient's published list: a
removed encryption key is not sealed for once the cached list is older than
the sealing bound, whatever the directory's ttl, and a cached key past its
window makes the list be read again. Both failed before
KeyDirectory.encryption_key (get kept the list for its ttl). Verification is
bounded the same way: a removed signing key stops verifying through
KeyDirectory.verify once the cached list is older than the verification
bound (failed with the list kept for the ttl)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from harness import BOB
from pigeon_client import HttpClient, InvalidError, KeyDirectory, Keys, PigeonError, sign_message
from pigeon_client.http import SEAL_MAX_AGE, VERIFY_MAX_AGE


def enc(keys: Keys, not_before: str = "", not_after: str = "") -> dict[str, str]:
    k = dict(keys.public_keys()[1])
    if not_before:
        k["notBefore"] = not_before
    if not_after:
        k["notAfter"] = not_after
    return k


def seals_for(directory: KeyDirectory, want: str, within: float = 10.0) -> str:
    """Polls the directory's sealing key until it is ``want``; returns the
    last kid it gave."""
    deadline = time.monotonic() + within
    while True:
        kid = directory.encryption_key(BOB)["kid"]
        if kid == want or time.monotonic() >= deadline:
            return kid
        time.sleep(0.05)


@pytest.fixture
def bob(own_server):
    own_server.start()
    HttpClient(own_server.http, "admin-token").create_account(BOB, exist_ok=True)
    return own_server, HttpClient(own_server.http, "bob-token")


def test_the_sealing_bound_is_documented():
    assert SEAL_MAX_AGE == 10.0
    assert KeyDirectory(HttpClient("http://127.0.0.1:9", "t")).seal_max_age == SEAL_MAX_AGE


def test_a_removed_encryption_key_is_not_sealed_for_past_the_sealing_bound(bob):
    server, client = bob
    old, new = Keys.generate(), Keys.generate()
    client.put_keys(BOB, [enc(old)])
    # A directory kept an hour, sealing from lists at most 0.2 s old.
    directory = KeyDirectory(HttpClient(server.http, "alice-token"), ttl=3600, seal_max_age=0.2)
    assert directory.encryption_key(BOB)["kid"] == old.encryption_kid
    # bob's old private key leaked: he lists only the new one.
    client.put_keys(BOB, [enc(new)])
    assert seals_for(directory, new.encryption_kid) == new.encryption_kid, "still sealing for the removed key"


def test_a_cached_key_past_its_window_makes_the_list_be_read_again(bob):
    server, client = bob
    old, new = Keys.generate(), Keys.generate()
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1.5)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    client.put_keys(BOB, [enc(old, not_after=at)])
    # Sealing bound and ttl both an hour: only the window can tell.
    directory = KeyDirectory(HttpClient(server.http, "alice-token"), ttl=3600, seal_max_age=3600)
    assert directory.encryption_key(BOB)["kid"] == old.encryption_kid
    # The rotation, published after the directory read the list.
    client.put_keys(BOB, [enc(old, not_after=at), enc(new, not_before=at)])
    got = None
    deadline = time.monotonic() + 10
    while got != new.encryption_kid and time.monotonic() < deadline:
        try:
            got = directory.encryption_key(BOB)["kid"]
        except InvalidError as e:
            got = e.code
        time.sleep(0.05)
    assert got == new.encryption_kid, "the cached key's window passed and the list was not read again"


def test_no_valid_encryption_key_is_invalid_argument(bob):
    server, client = bob
    client.put_keys(BOB, [])
    with pytest.raises(InvalidError) as e:
        KeyDirectory(HttpClient(server.http, "alice-token")).encryption_key(BOB)
    assert e.value.code == "INVALID_ARGUMENT"


def sig(keys: Keys) -> dict[str, str]:
    k = dict(keys.public_keys()[0])
    assert k["use"] == "sig"
    return k


def signed(keys: Keys) -> dict:
    return sign_message({"subject": "chat.messages", "data": {"text": "hi"}}, keys.signing_kid, keys.signing_key)


def test_a_removed_signing_key_stops_verifying_past_the_verification_bound(bob):
    assert VERIFY_MAX_AGE == 10.0
    server, client = bob
    old, new = Keys.generate(), Keys.generate()
    client.put_keys(BOB, [sig(old)])
    # A directory kept an hour, verifying with lists at most 0.2 s old.
    directory = KeyDirectory(HttpClient(server.http, "alice-token"), ttl=3600, verify_max_age=0.2)
    m = signed(old)
    directory.verify(BOB, m)
    assert directory.get(BOB)[0]["kid"] == old.signing_kid, "get keeps the list for its ttl"
    # bob's old private key leaked: he lists only the new one.
    client.put_keys(BOB, [sig(new)])
    got = "verified"
    deadline = time.monotonic() + 10
    while got == "verified" and time.monotonic() < deadline:
        try:
            directory.verify(BOB, m)
        except PigeonError as e:
            got = e.code
        time.sleep(0.05)
    assert got == "SIGNATURE_INVALID", "a signature of the removed key still verifies"
    directory.verify(BOB, signed(new))
    with pytest.raises(PigeonError) as e:
        directory.verify(BOB, {k: v for k, v in m.items() if k != "signature"})
    assert e.value.code == "SIGNATURE_REQUIRED"
