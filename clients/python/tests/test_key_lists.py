"""The answer of ``GET /v1/accounts/{id}/keys``, read as every client reads
it (docs/protocol.md, "Published keys"): the server always answers 200 with
an object whose ``keys`` is a list, ``{"keys": []}`` for an account without
keys and for an id that names no account. Any other answer is not the
server's, and is refused, ``ProtocolError``, rather than read as no keys:
``keys`` null or absent, a bare list, a number, an empty body. This client
read ``{"keys": null}`` and ``{}`` as no keys, where the Rust client refused
the first and read a bare list, a number and an empty body as no keys. The
TypeScript (test/key_lists.test.mjs) and Rust (tests/key_lists.rs) clients
hold the same table. The entries of the list are read one by one
(tests/test_time_vectors.py holds the table of entries that are no key)."""

from __future__ import annotations

import json
from typing import Iterator

import nacl.signing
import pytest

from harness import Answering, http_answering
from pigeon_client import HttpClient, Keys, ProtocolError

K1, K2 = Keys("k1", nacl.signing.SigningKey(bytes([7]) * 32), "k2", bytes([107]) * 32).public_keys()

# Each answer: its name, HTTP status, body (``K1`` and ``K2`` stand for two
# sound keys, of the kids k1 and k2), and the kids read (None: refused,
# ProtocolError).
ANSWERS = [
    ("the documented object", 200, '{"keys":[K1,K2]}', ["k1", "k2"]),
    ("an empty list", 200, '{"keys":[]}', []),
    ("a member beside keys", 200, '{"keys":[K1],"note":"x"}', ["k1"]),
    ("keys null", 200, '{"keys":null}', None),
    ("keys absent", 200, "{}", None),
    ("keys a string", 200, '{"keys":"k1"}', None),
    ("keys an object", 200, '{"keys":K1}', None),
    ("keys a number", 200, '{"keys":7}', None),
    ("keys true", 200, '{"keys":true}', None),
    ("a bare list", 200, "[K1]", None),
    ("a bare empty list", 200, "[]", None),
    ("a number", 200, "7", None),
    ("null", 200, "null", None),
    ("a string", 200, '"keys"', None),
    ("an empty body", 200, "", None),
    ("a body of white space", 200, " \r\n", None),
    ("no body, 204", 204, "", None),
    ("not JSON", 200, "<html>keys</html>", None),
]


@pytest.fixture(scope="module")
def server() -> Iterator[Answering]:
    with http_answering() as srv:
        yield srv


@pytest.mark.parametrize("name,status,template,want", ANSWERS, ids=[a[0] for a in ANSWERS])
def test_a_keys_answer_is_read_only_as_the_object_the_server_sends(
        server: Answering, name: str, status: int, template: str, want: list[str] | None) -> None:
    server.status = status
    server.body = template.replace("K1", json.dumps(K1)).replace("K2", json.dumps(K2)).encode()
    try:
        got = [k["kid"] for k in HttpClient(server.url, "t", timeout=5).keys("acct")]
    except ProtocolError as e:
        assert e.code == "BAD_REQUEST", e
        got = None
    assert got == want
