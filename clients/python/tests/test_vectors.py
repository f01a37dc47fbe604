"""vectors.go and vectors.own: byte-for-byte compatibility with Go's
signatures and seals.

Set PIGEON_WRITE_VECTORS=1 to write a fresh vectors/python.json (sealing is
randomized; the keys are the fixed ones of go.json) and check it in.
"""

from __future__ import annotations

import base64
import json
import os

import nacl.signing
import pytest

from harness import VECTORS_PY, load_go_vectors, scenario
from pigeon_client import (
    Keys,
    PigeonError,
    SealTampered,
    SealUnsupported,
    canonical_signing_input,
    open_data,
    open_sealed,
    seal,
    seal_data,
    sign_message,
    verify_message,
)
from pigeon_client.crypto import b64url, b64url_decode

GO = load_go_vectors()
KEYS = {name: Keys.from_vector(k) for name, k in GO["keys"].items()}


FIRST_FORM = "first-form"


def check(v: dict) -> None:
    """Every case of a vectors file verifies and opens; every tampered one is
    refused. Signed cases are in the second form (``"v": 2``) but for the
    one named "first-form" (no ``v``)."""
    assert v["signed"] and v["sealed"] and v["sealedData"]
    for c in v["signed"]:
        m = c["message"]
        assert canonical_signing_input(m).decode("utf-8") == c["signingInput"], c["name"]
        verify_message(m, KEYS[c["signer"]].signing_public)
        assert m["signature"]["kid"] == KEYS[c["signer"]].signing_kid
        if c["name"] == FIRST_FORM:
            assert "v" not in m["signature"], c["name"]
            assert c["signingInput"].startswith('["pigeon-sig-v1",'), c["name"]
        else:
            assert type(m["signature"].get("v")) is int and m["signature"]["v"] == 2, c["name"]
            assert c["signingInput"].startswith('["pigeon-sig-v2",'), c["name"]
    for c in v["sealed"]:
        got = open_sealed(c["sealed"], KEYS[c["recipient"]].encryption_private, KEYS[c["sender"]].signing_public)
        assert got == b64url_decode(c["plaintext"]), c["name"]
    for c in v["sealedData"]:
        clear, payload = open_data(c["data"], KEYS[c["recipient"]].encryption_private, KEYS[c["sender"]].signing_public)
        assert clear == c["clear"]
        assert payload == b64url_decode(c["payload"])
    for c in v.get("tampered", []):
        if c["kind"] == "signature":
            with pytest.raises(PigeonError) as e:
                verify_message(c["message"], KEYS[c["signer"]].signing_public)
            assert e.value.code == "SIGNATURE_INVALID", c["name"]
        else:
            with pytest.raises((SealTampered, SealUnsupported)):
                open_sealed(c["sealed"], KEYS[c["recipient"]].encryption_private, KEYS[c["sender"]].signing_public)


def test_go_vectors():
    scenario("vectors.go")
    for name, k in GO["keys"].items():
        assert b64url(KEYS[name].signing_public) == k["signingPublic"]
        assert b64url(KEYS[name].encryption_public) == k["encryptionPublic"]
    # The same key and input make the same signature (Ed25519 is deterministic).
    for c in GO["signed"]:
        m = c["message"]
        again = sign_message(m, m["signature"]["kid"], KEYS[c["signer"]].signing_key)
        if c["name"] == FIRST_FORM:
            # Signing anew makes the second form, another signature.
            assert again["signature"]["v"] == 2 and again["signature"]["sig"] != m["signature"]["sig"]
            verify_message(again, KEYS[c["signer"]].signing_public)
        else:
            assert again["signature"] == m["signature"], c["name"]
    check(GO)
    names = {c["name"] for c in GO["signed"]}
    assert {"plain", "envelope-fields", FIRST_FORM} <= names
    fields = next(c for c in GO["signed"] if c["name"] == "envelope-fields")["message"]
    for f in ("type", "intent", "idempotencyKey", "replyTo", "correlationId", "reason"):
        assert fields.get(f), f
    tampered = {c["name"]: c["kind"] for c in GO["tampered"]}
    assert len(GO["tampered"]) == 13
    assert sum(k == "signature" for k in tampered.values()) == 11
    assert {"signed-intent-changed", "signed-type-changed", "signed-replyTo-changed",
            "signed-idempotencyKey-removed", "signed-correlationId-changed", "signed-reason-changed",
            "signed-v-removed", "signed-v-1", "signed-v-3"} <= set(tampered)


def test_worked_example_of_security_md():
    seed = bytes(range(32))
    m = {"subject": "chat.messages", "id": "msg_01", "time": "2026-11-29T12:00:00.000Z",
         "data": json.loads('{"text": "h\\u00e9llo", "room": "lobby", "n": 1.50}')}
    m["type"], m["intent"] = "chat.posted", "chat"
    inp = canonical_signing_input(m)
    assert inp.decode("utf-8") == (
        '["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","chat.posted","chat",'
        '"","","","",{"n":1.5,"room":"lobby","text":"héllo"}]')
    s = sign_message(m, "sig-2026-11", seed)
    assert s["signature"]["v"] == 2
    assert s["signature"]["sig"] == (
        "1sCiND_553NEnKNn9yAitE7KuCCHYlZ4UpwPRJOm4k22oRsy3tBWrcn6esyaojZq9vrLMPqzFJRdJ4hBp3cgBA")
    # The first-form signature made before v2 (no v) still verifies.
    first = {**m, "signature": {"kid": "sig-2026-11", "alg": "ed25519", "sig": (
        "j5XAXnPKHq6bYc_8dPOiUfL0WPFMTsrO4Bm0QYZ5Da5zq75Jwt_37bMtGhB-04Z9eaxwM2-JNt6EstPh2GPyDg")}}
    assert len(canonical_signing_input(first)) == 110
    verify_message(first, bytes(nacl.signing.SigningKey(seed).verify_key))


def test_canonical_edges():
    m = {"subject": "s", "id": "i", "time": "2026-11-29T12:00:00Z"}
    assert canonical_signing_input(m) == b'["pigeon-sig-v2","s","i","2026-11-29T12:00:00Z","","","","","","",{}]'
    assert canonical_signing_input(m).endswith(b",{}]")
    # An integer beyond 2^53 passes as its double when the canonical form
    # spells its value, and is refused when it would be rounded.
    big = dict(m, data={"n": 12345678901234567000})
    assert canonical_signing_input(big).endswith(b'{"n":12345678901234567000}]')
    with pytest.raises(PigeonError) as e:
        canonical_signing_input(dict(m, data={"n": 12345678901234567891}))
    assert e.value.code == "ENVELOPE_INVALID"
    with pytest.raises(PigeonError) as e:
        canonical_signing_input(dict(m, time="yesterday"))
    assert e.value.code == "ENVELOPE_INVALID"
    with pytest.raises(PigeonError):
        canonical_signing_input(dict(m, data={"x": float("inf")}))
    with pytest.raises(ValueError):
        b64url_decode("YQ==")  # padding
    with pytest.raises(ValueError):
        b64url_decode("YR")  # non-zero trailing bits


def test_sealed_refusals():
    a, b = KEYS["alice"], KEYS["bob"]
    s = seal(b"x", b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)
    assert open_sealed(s, b.encryption_private, a.signing_public) == b"x"
    with pytest.raises(SealTampered):
        open_sealed(s, a.encryption_private, a.signing_public)  # wrong recipient
    with pytest.raises(SealTampered):
        open_sealed(s, b.encryption_private, b.signing_public)  # wrong sender
    with pytest.raises(SealTampered):
        open_sealed({**s, "extra": 1}, b.encryption_private, a.signing_public)
    with pytest.raises(SealUnsupported):
        open_sealed({**s, "v": 2}, b.encryption_private, a.signing_public)


def make_own() -> dict:
    a, b = KEYS["alice"], KEYS["bob"]
    signed = []
    inputs = [
        ("plain", "chat.messages", "2026-11-29T12:00:00.000Z", {"kind": "chat", "room": "lobby", "text": "from python"}),
        ("numbers", "events.telemetry", "2026-11-29T12:00:02.5+01:00",
         {"a": 1.5, "b": 1e30, "c": 0.002, "d": 1e-7, "e": 1e21, "f": 1e20, "h": 0.1, "i": 123456789}),
        ("unicode", "chat.messages", "2026-11-29T12:00:03Z",
         {"s": "tab\tnl\nq\"bs\\ctl\u0001 é 漢 😀 \u2028", "\ufb33": 1, "\U0001f600": 2}),
        ("empty-data", "events.telemetry", "2026-11-29T12:00:04Z", {}),
    ]
    for i, (name, subject, time, data) in enumerate(inputs, 1):
        m = {"id": f"msg_py_{i}", "type": "vector", "subject": subject, "time": time, "intent": "chat", "data": data}
        s = sign_message(m, a.signing_kid, a.signing_key)
        signed.append({"name": name, "signer": "alice", "message": s,
                       "signingInput": canonical_signing_input(s).decode("utf-8")})
    # Every field the second form covers, with escapes.
    m = {"id": "msg_py_5", "subject": "payments.authorize", "time": "2026-11-29T12:00:05Z",
         "type": "payment.authorization.requested", "intent": "authorize_payment",
         "idempotencyKey": "k-\u00e9-1 \\ 漢", "replyTo": "inbox.checkout", "correlationId": 'corr "7"\t/',
         "reason": "retry\n<after> & \U0001f600 \u2028 \x01", "data": {"amount": "42.50"}}
    s = sign_message(m, a.signing_kid, a.signing_key)
    signed.append({"name": "envelope-fields", "signer": "alice", "message": s,
                   "signingInput": canonical_signing_input(s).decode("utf-8")})
    # The first form (no v), as signatures made before v2: still verifies.
    m = {"id": "msg_py_6", "subject": "chat.messages", "time": "2026-11-29T12:00:06Z", "type": "vector",
         "intent": "chat", "data": {"form": 1},
         "signature": {"kid": b.signing_kid, "alg": "ed25519", "sig": ""}}
    m["signature"]["sig"] = b64url(b.signing_key.sign(canonical_signing_input(m)).signature)
    signed.append({"name": FIRST_FORM, "signer": "bob", "message": m,
                   "signingInput": canonical_signing_input(m).decode("utf-8")})
    sealed = []
    for name, pt in (("short", b"hello bob from python"), ("empty", b""), ("binary", bytes(range(256)))):
        sealed.append({"name": name, "sender": "alice", "recipient": "bob", "plaintext": b64url(pt),
                       "sealed": seal(pt, b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)})
    payload = b'{"text":"meet at noon, from python"}'
    clear = {"kind": "chat", "room": "lobby"}
    sealed_data = [{"name": "chat", "sender": "alice", "recipient": "bob", "clear": clear, "payload": b64url(payload),
                    "data": seal_data(clear, payload, b.encryption_kid, b.encryption_public,
                                      a.signing_kid, a.signing_key)}]
    return {
        "note": "Generated by the Python client (PIGEON_WRITE_VECTORS=1 pytest tests/test_vectors.py) "
        "with the fixed test keys of go.json; never use them elsewhere.",
        "signed": signed,
        "sealed": sealed,
        "sealedData": sealed_data,
    }


def test_own_vectors():
    scenario("vectors.own")
    if os.environ.get("PIGEON_WRITE_VECTORS") == "1":
        VECTORS_PY.write_text(json.dumps(make_own(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert VECTORS_PY.exists(), f"{VECTORS_PY} is missing: run with PIGEON_WRITE_VECTORS=1 and check it in"
    check(json.loads(VECTORS_PY.read_text(encoding="utf-8")))
    # A fresh set made now checks too.
    check(make_own())


def test_b64_roundtrip():
    for n in range(0, 40):
        b = os.urandom(n)
        assert b64url_decode(b64url(b)) == b
        assert b64url(b) == base64.urlsafe_b64encode(b).decode().rstrip("=")
