"""The broker's rules for signing inputs and keys (docs/security.md), held
by the client: no signature over a number the canonical form would round,
no verification under an Ed25519 key of small order, no sealing for an
X25519 key that is not canonical, sealed objects with exact member names.
"""

from __future__ import annotations

import pytest
import rfc8785

from harness import load_go_vectors
from pigeon_client import (
    Keys,
    PigeonError,
    SealTampered,
    canonical_signing_input,
    open_data,
    open_sealed,
    seal,
    seal_data,
    sign_message,
    verify_message,
)
from pigeon_client.crypto import SIG_CONTEXT, SIG_CONTEXT_V2, b64url, b64url_decode

GO = load_go_vectors()
KEYS = {name: Keys.from_vector(k) for name, k in GO["keys"].items()}
P = 2**255 - 19


def message(data):
    return {"subject": "chat.messages", "id": "msg_rules_1", "time": "2026-11-29T12:00:00Z", "data": data}


def sign_raw(m: dict, key, form: int = 2) -> dict:
    """Signs ``m`` as a signer following JCS alone would (every number read as
    a double), without the client's checks: what another implementation
    could send, in the second form (``"v": 2``) or the first (no ``v``)."""
    def as_double(v):
        if isinstance(v, bool) or not isinstance(v, (int, dict, list)):
            return v
        if isinstance(v, int):
            return v if abs(v) < 2**53 else float(v)
        if isinstance(v, dict):
            return {k: as_double(x) for k, x in v.items()}
        return [as_double(x) for x in v]

    if form == 2:
        head = [SIG_CONTEXT_V2, m["subject"], m["id"], m["time"], "", "", "", "", "", ""]
    else:
        head = [SIG_CONTEXT, m["subject"], m["id"], m["time"]]
    inp = rfc8785.dumps([*head, as_double(m["data"])])
    sig = {"kid": "k1", "alg": "ed25519", "sig": b64url(key.sign(inp).signature)}
    if form == 2:
        sig["v"] = 2
    return {**m, "signature": sig}


# (data, data with the same canonical form that spells its value)
ROUNDED = [
    ({"amount": 9007199254740993}, {"amount": 9007199254740992}),
    ({"amount": -9007199254740993}, {"amount": -9007199254740992}),
    ({"account": 1234567890123456789}, {"account": 1234567890123456800}),
    ({"a": [1, {"b": 12345678901234567891}]}, {"a": [1, {"b": 12345678901234567000}]}),
    # Exactly a double, but JCS writes it 12345678901234567000.
    ({"n": 12345678901234567168}, {"n": 12345678901234567000}),
]


@pytest.mark.parametrize("form", [2, 1])
@pytest.mark.parametrize("data,alt", ROUNDED)
def test_signing_refuses_numbers_the_canonical_form_rounds(data, alt, form):
    key = KEYS["alice"].signing_key
    with pytest.raises(PigeonError) as e:
        canonical_signing_input(message(data))
    assert e.value.code == "ENVELOPE_INVALID"
    with pytest.raises(PigeonError) as e:
        sign_message(message(data), "k1", key)
    assert e.value.code == "ENVELOPE_INVALID"
    # A signature made over the rounded canonical form verifies only with
    # the data that spells its values.
    signed = sign_raw(message(data), key, form)
    with pytest.raises(PigeonError) as e:
        verify_message(signed, KEYS["alice"].signing_public)
    assert e.value.code == "SIGNATURE_INVALID"
    verify_message({**signed, "data": alt}, KEYS["alice"].signing_public)


@pytest.mark.parametrize(
    "data",
    [
        {"n": 2**53},
        {"n": -(2**53)},
        {"n": 2**53 + 2},
        {"n": 12345678901234567000},
        {"n": 10**21},
        {"n": 0.1, "m": 1.0, "z": -0.0},
        {"s": "12345678901234567891"},
    ],
)
def test_signing_keeps_numbers_the_canonical_form_spells(data):
    s = sign_message(message(data), "k1", KEYS["alice"].signing_key)
    verify_message(s, KEYS["alice"].signing_public)


# The fourteen encodings of Ed25519 points of small order: seven values of y,
# each with the sign bit clear and set.
SMALL_ORDER_Y = [
    0,
    1,
    0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826,
    0x7A03AC9277FDC74EC6CC392CFA53202A0F67100D760B3CBA4FD84D3D706A17C7,
    P - 1,
    P,
    P + 1,
]
SMALL_ORDER = [(y | sign << 255).to_bytes(32, "little") for y in SMALL_ORDER_Y for sign in (0, 1)]


@pytest.mark.parametrize("pub", SMALL_ORDER, ids=lambda b: b.hex()[:8] + "…" + b.hex()[-2:])
def test_verification_refuses_small_order_keys(pub):
    # Under the identity, R = identity and S = 0 satisfy the cofactorless
    # equation for every message.
    identity_sig = (1).to_bytes(32, "little") + bytes(32)
    m = {**message({"n": 1}), "signature": {"kid": "k1", "alg": "ed25519", "sig": b64url(identity_sig)}}
    with pytest.raises(PigeonError) as e:
        verify_message(m, pub)
    assert e.value.code == "SIGNATURE_INVALID"
    a, b = KEYS["alice"], KEYS["bob"]
    s = seal(b"x", b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)
    with pytest.raises(SealTampered):
        open_sealed(s, b.encryption_private, pub)


def test_sealing_refuses_non_canonical_recipient_keys():
    a, b = KEYS["alice"], KEYS["bob"]
    top = bytearray(b.encryption_public)
    top[31] |= 0x80
    for pub in (bytes(top), P.to_bytes(32, "little"), (P + 1).to_bytes(32, "little"), (2**255 - 1).to_bytes(32, "little")):
        with pytest.raises(PigeonError) as e:
            seal(b"x", b.encryption_kid, pub, a.signing_kid, a.signing_key)
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(PigeonError):
            seal_data({"room": "lobby"}, b"x", b.encryption_kid, pub, a.signing_kid, a.signing_key)
    # Low order, canonical: nothing agreed with it is secret.
    for pub in ((0).to_bytes(32, "little"), (1).to_bytes(32, "little")):
        with pytest.raises((PigeonError, SealTampered)):
            seal(b"x", b.encryption_kid, pub, a.signing_kid, a.signing_key)
    s = seal(b"x", b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)
    assert open_sealed(s, b.encryption_private, a.signing_public) == b"x"


def test_open_data_refuses_member_names_not_spelled_exactly():
    a, b = KEYS["alice"], KEYS["bob"]
    data = seal_data({"room": "lobby"}, b"pay carol", b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)
    other = seal(b"pay mallory", b.encryption_kid, b.encryption_public, a.signing_kid, a.signing_key)
    s = data["sealed"]
    upper = {("SIG" if k == "sig" else k): v for k, v in s.items()}
    second = {**s, **{k[0].upper() + k[1:]: other[k] for k in ("ephemeralKey", "nonce", "ciphertext", "sig")}}
    for sealed in (upper, second, {**s, "Sig": s["sig"]}):
        with pytest.raises(SealTampered):
            open_data({**data, "sealed": sealed}, b.encryption_private, a.signing_public)
    assert open_data(data, b.encryption_private, a.signing_public) == ({"room": "lobby"}, b"pay carol")


@pytest.mark.parametrize("kid", ["k1\n", "", "k 1", "k" * 129])
def test_signing_refuses_a_kid_go_refuses(kid):
    # "$" also matches before a final newline: "k1\n" passed the kid's
    # pattern, and the message went out signed with a kid Go refuses.
    a = KEYS["alice"]
    with pytest.raises(PigeonError) as e:
        sign_message(message({"n": 1}), kid, a.signing_key)
    assert e.value.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("text", ["AAAA\n", "AA\nAA", " AAAA", "AAAA="])
def test_base64url_has_one_spelling(text):
    # A trailing newline passed the alphabet's pattern, and the decoder
    # skipped it: a second spelling of the same bytes.
    with pytest.raises(ValueError):
        b64url_decode(text)
