"""The second signature form (v2, /work/notes/sigv2-spec.md, docs/security.md):
``sign_message`` signs subject, id, time, type, intent, idempotencyKey,
replyTo, correlationId, reason and data, and names the form with ``"v": 2``;
a signature without ``v`` is the first form, which keeps verifying but
covers subject, id, time and data only; any other ``v`` is refused."""

from __future__ import annotations

import json

import nacl.signing
import pytest

from harness import load_go_vectors
from pigeon_client import (
    Keys,
    PigeonError,
    canonical_signing_input,
    sign_message,
    verify_message,
    verify_message_with_keys,
)
from pigeon_client.crypto import SIG_CONTEXT, SIG_CONTEXT_V2, SIGNATURE_V2, Signature, b64url

GO = load_go_vectors()
ALICE = Keys.from_vector(GO["keys"]["alice"])

COVERED = ("type", "intent", "idempotencyKey", "replyTo", "correlationId", "reason")


def payment() -> dict:
    return {
        "subject": "payments.authorize",
        "id": "msg_v2_1",
        "time": "2026-11-29T12:00:00Z",
        "type": "payment.authorization.requested",
        "intent": "authorize_payment",
        "idempotencyKey": "pay-1",
        "replyTo": "inbox.checkout",
        "correlationId": "corr-7",
        "reason": "first attempt",
        "classification": "pci",
        "data": {"amount": "42.50", "currency": "GBP"},
    }


def sign_first_form(m: dict, kid: str, key) -> dict:
    """``m`` signed in the first form (a signature without v), as signers did
    before v2: the signing input of a message whose signature has no v."""
    s = {**m, "signature": {"kid": kid, "alg": "ed25519", "sig": ""}}
    s["signature"]["sig"] = b64url(key.sign(canonical_signing_input(s)).signature)
    return s


def refused(m: dict, code: str = "SIGNATURE_INVALID") -> None:
    with pytest.raises(PigeonError) as e:
        verify_message(m, ALICE.signing_public)
    assert e.value.code == code


# --- sign makes the second form ----------------------------------------------


def test_sign_makes_the_second_form():
    s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
    assert list(s["signature"]) == ["kid", "alg", "sig", "v"]
    assert type(s["signature"]["v"]) is int and s["signature"]["v"] == SIGNATURE_V2 == 2
    inp = json.loads(canonical_signing_input(s))
    assert inp == [SIG_CONTEXT_V2, "payments.authorize", "msg_v2_1", "2026-11-29T12:00:00Z",
                   "payment.authorization.requested", "authorize_payment", "pay-1", "inbox.checkout",
                   "corr-7", "first attempt", {"amount": "42.50", "currency": "GBP"}]
    verify_message(s, ALICE.signing_public)


def test_resigning_a_first_form_message_makes_the_second_form():
    old = sign_first_form(payment(), ALICE.signing_kid, ALICE.signing_key)
    s = sign_message(old, ALICE.signing_kid, ALICE.signing_key)
    assert s["signature"]["v"] == 2 and s["signature"]["sig"] != old["signature"]["sig"]
    verify_message(s, ALICE.signing_public)
    refused({**s, "intent": "refund_payment"})


def test_worked_example_of_security_md_in_both_forms():
    seed = bytes(range(32))
    m = {"subject": "chat.messages", "id": "msg_01", "time": "2026-11-29T12:00:00.000Z",
         "type": "chat.posted", "intent": "chat",
         "data": json.loads('{"text":"h\\u00e9llo","room":"lobby","n":1.50}')}
    assert canonical_signing_input(m).decode("utf-8") == (
        '["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","chat.posted","chat",'
        '"","","","",{"n":1.5,"room":"lobby","text":"héllo"}]')
    s = sign_message(m, "sig-2026-11", seed)
    assert s["signature"] == {
        "kid": "sig-2026-11", "alg": "ed25519", "v": 2,
        "sig": "1sCiND_553NEnKNn9yAitE7KuCCHYlZ4UpwPRJOm4k22oRsy3tBWrcn6esyaojZq9vrLMPqzFJRdJ4hBp3cgBA"}
    pub = bytes(nacl.signing.SigningKey(seed).verify_key)
    verify_message(s, pub)
    first = {**m, "signature": {"kid": "sig-2026-11", "alg": "ed25519", "sig": (
        "j5XAXnPKHq6bYc_8dPOiUfL0WPFMTsrO4Bm0QYZ5Da5zq75Jwt_37bMtGhB-04Z9eaxwM2-JNt6EstPh2GPyDg")}}
    assert canonical_signing_input(first).decode("utf-8") == (
        '["pigeon-sig-v1","chat.messages","msg_01","2026-11-29T12:00:00.000Z",'
        '{"n":1.5,"room":"lobby","text":"héllo"}]')
    verify_message(first, pub)
    # The first form's signature under "v": 2 (or v2's without v) is refused.
    with pytest.raises(PigeonError):
        verify_message({**first, "signature": {**first["signature"], "v": 2}}, pub)
    with pytest.raises(PigeonError):
        verify_message({**s, "signature": {k: x for k, x in s["signature"].items() if k != "v"}}, pub)


# --- what each form covers ---------------------------------------------------


def changes(field: str):
    """The ways a relay could alter ``field`` after signing: another value,
    removed, emptied, null."""
    yield "changed", lambda m: {**m, field: m[field] + "-x"}
    yield "removed", lambda m: {k: x for k, x in m.items() if k != field}
    yield "emptied", lambda m: {**m, field: ""}
    yield "null", lambda m: {**m, field: None}


@pytest.mark.parametrize("field", COVERED)
def test_second_form_covers_each_envelope_field(field):
    s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
    verify_message(s, ALICE.signing_public)
    for how, edit in changes(field):
        with pytest.raises(PigeonError) as e:
            verify_message(edit(s), ALICE.signing_public)
        assert e.value.code == "SIGNATURE_INVALID", (field, how)


@pytest.mark.parametrize("field", COVERED)
def test_second_form_covers_a_field_added_after_signing(field):
    m = {k: x for k, x in payment().items() if k != field}
    s = sign_message(m, ALICE.signing_kid, ALICE.signing_key)
    verify_message(s, ALICE.signing_public)
    refused({**s, field: "added"})
    # Absent, null and "" are the same value ("") in the signing input.
    verify_message({**s, field: None}, ALICE.signing_public)
    verify_message({**s, field: ""}, ALICE.signing_public)


@pytest.mark.parametrize("field", COVERED)
def test_first_form_does_not_cover_envelope_fields(field):
    """The first form's known limit, kept for signatures made before v2: a
    relay may change these fields and the signature still verifies. Only
    the second form (what sign_message makes) binds them."""
    s = sign_first_form(payment(), ALICE.signing_kid, ALICE.signing_key)
    assert "v" not in s["signature"]
    verify_message(s, ALICE.signing_public)
    for _, edit in changes(field):
        verify_message(edit(s), ALICE.signing_public)
    # Subject, id, time and data stay covered.
    for name, value in (("subject", "payments.other"), ("id", "msg_other"), ("time", "2026-11-29T12:00:01Z"),
                        ("data", {"amount": "4250", "currency": "GBP"})):
        refused({**s, name: value})


@pytest.mark.parametrize("field", ["source", "specversion", "classification", "region", "sequence",
                                   "contractId", "subjectId", "schemaId", "acceptedAt"])
def test_second_form_leaves_broker_set_fields_uncovered(field):
    s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
    verify_message({**s, field: 7 if field == "sequence" else "set-by-broker"}, ALICE.signing_public)


def test_covered_fields_with_escapes_round_trip_through_json():
    m = {**payment(), "idempotencyKey": "k-\u00e9-1", "correlationId": 'corr "7"',
         "reason": "retry\n<after> \U0001f600 \u2028 \x01", "replyTo": "inbox/\\checkout"}
    s = sign_message(m, ALICE.signing_kid, ALICE.signing_key)
    for text in (json.dumps(s), json.dumps(s, ensure_ascii=False)):
        again = json.loads(text)
        assert canonical_signing_input(again) == canonical_signing_input(s)
        verify_message(again, ALICE.signing_public)


@pytest.mark.parametrize("field", COVERED)
def test_covered_fields_must_be_strings(field):
    for bad in (5, True, ["x"], {"a": 1}, "lone \ud800 surrogate"):
        m = {**payment(), field: bad}
        with pytest.raises(PigeonError) as e:
            canonical_signing_input(m)
        assert e.value.code == "ENVELOPE_INVALID", (field, bad)
        with pytest.raises(PigeonError) as e:
            sign_message(m, ALICE.signing_kid, ALICE.signing_key)
        assert e.value.code == "ENVELOPE_INVALID", (field, bad)
        s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
        refused({**s, field: bad})


# --- the v member --------------------------------------------------------------

# Neither absent nor the integer 2. True and 2.0 are here on purpose: Python
# takes True for 1 and 2.0 for 2, and JSON's 2.0 is not the integer 2.
BAD_V = [0, 1, 3, -2, 2.5, 2.0, "2", None, True, False, [2], {"v": 2}, 2**64 + 2]


@pytest.mark.parametrize("v", BAD_V, ids=repr)
def test_other_v_values_are_refused(v):
    s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
    refused({**s, "signature": {**s["signature"], "v": v}})
    first = sign_first_form(payment(), ALICE.signing_kid, ALICE.signing_key)
    refused({**first, "signature": {**first["signature"], "v": v}})
    with pytest.raises(PigeonError) as e:
        canonical_signing_input({**s, "signature": {**s["signature"], "v": v}})
    assert e.value.code == "ENVELOPE_INVALID"
    keys = ALICE.public_keys()
    with pytest.raises(PigeonError) as e:
        verify_message_with_keys({**s, "signature": {**s["signature"], "v": v}}, keys)
    assert e.value.code == "SIGNATURE_INVALID"


def test_signing_input_follows_the_form_the_signature_names():
    m = {"subject": "s", "id": "i", "time": "2026-11-29T12:00:00Z", "intent": "chat", "data": {"a": 1}}
    # Without a signature: the second form, as sign_message makes it.
    assert canonical_signing_input(m) == b'["pigeon-sig-v2","s","i","2026-11-29T12:00:00Z","","chat","","","","",{"a":1}]'
    assert canonical_signing_input({**m, "signature": None}) == canonical_signing_input(m)
    assert canonical_signing_input({**m, "signature": {"v": 2}}) == canonical_signing_input(m)
    assert canonical_signing_input({**m, "signature": {"kid": "k", "alg": "ed25519", "sig": "x"}}) == (
        b'["' + SIG_CONTEXT.encode() + b'","s","i","2026-11-29T12:00:00Z",{"a":1}]')
    # A signature that is not an object names no form.
    with pytest.raises(PigeonError) as e:
        canonical_signing_input({**m, "signature": "sig"})
    assert e.value.code == "ENVELOPE_INVALID"


def test_verify_with_keys_takes_v2_and_refuses_malformed_signatures():
    keys = ALICE.public_keys()
    s = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)
    verify_message_with_keys(s, keys)
    verify_message_with_keys(sign_first_form(payment(), ALICE.signing_kid, ALICE.signing_key), keys)
    for sig in ("text", ["kid"], 2):
        with pytest.raises(PigeonError) as e:
            verify_message_with_keys({**s, "signature": sig}, keys)
        assert e.value.code == "SIGNATURE_INVALID"


def test_signature_type_names_the_optional_v():
    assert Signature.__required_keys__ == {"kid", "alg", "sig"}
    assert Signature.__optional_keys__ == {"v"}
    s: Signature = sign_message(payment(), ALICE.signing_kid, ALICE.signing_key)["signature"]
    assert set(s) == {"kid", "alg", "sig", "v"}
