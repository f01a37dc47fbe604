"""The listings of the HTTP API: subjects, audit records, quarantine records,
an account's keys, a message's receipts. Each call asks for one page and
holds that page alone, its answer read up to ``max_response_bytes`` (256 MiB
by default); the walk of receipt pages (``iter_receipts``) yields each page
before it asks for the next. So no listing of the client gathers records
across pages (the CLI's ``quarantine list`` walks every page, and stops at
1000 records by default). A page holds at most the server's cap of records
(:data:`MAX_PAGE_RECORDS`, an account's keys :data:`MAX_ACCOUNT_KEYS`): an
answer listing more is refused, ``ProtocolError``, as its reading comes to
the entry past the cap, before that entry or any after it is built (256 MiB
of ``{}`` entries is about 89 million dicts). The catalog (``subjects``)
has no such cap on the server.

A listing answer whose list is not a list of objects is refused,
``ProtocolError``, as the TypeScript client refuses it
(test/listings.test.mjs holds the same table): before, a string was listed
letter by letter, an object by its member names, and a number or an answer
that is not an object raised ``TypeError`` or ``AttributeError``. An
account's keys are read by their own rule (tests/test_key_lists.py):
``keys`` must be there, and an entry that is no key is left out."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, Callable

import nacl.signing
import pytest

from harness import http_answering
from pigeon_client import HttpClient, Keys, PigeonError, ProtocolError
from pigeon_client.http import MAX_ACCOUNT_KEYS, MAX_PAGE_RECORDS, _loads_listing
from pigeon_client.ws import _loads_frame


def _record(id_: str) -> dict[str, Any]:
    return {"id": id_}


# A sound signing key: the keys listing reads only sound keys.
SIG_KEY = Keys("sig", nacl.signing.SigningKey(bytes([7]) * 32), "enc", bytes([107]) * 32).public_keys()[0]

# Each listing: its call, the member of the answer holding its list, and
# its entry of an id.
LISTINGS: list[Any] = [
    pytest.param(lambda c: c.subjects(), "subjects", _record, id="subjects"),
    pytest.param(lambda c: c.audit(from_=1, max=2), "records", _record, id="audit"),
    pytest.param(lambda c: c.quarantine(max=2), "records", _record, id="quarantine"),
]

# Each answer: its JSON text (``M`` stands for the listing's member, ``R1``
# and ``R2`` for its entries of the ids r1 and r2), and the ids of the list
# the call returns (None: refused, ProtocolError).
ANSWERS: list[tuple[Any, ...]] = [
    ("a list of objects", '{"M":[R1,R2]}', ["r1", "r2"]),
    ("an empty list", '{"M":[]}', []),
    ("absent", "{}", []),
    ("null", '{"M":null}', []),
    ("a string", '{"M":"abc"}', None),
    ("an object", '{"M":{"a":1}}', None),
    ("a number", '{"M":7}', None),
    ("an entry that is not an object", '{"M":[R1,"r2"]}', None),
    ("an answer that is not an object", "[R1]", None),
]


@pytest.mark.parametrize("call,member,entry", LISTINGS)
def test_a_listing_asks_for_one_page_and_returns_its_list_of_objects_and_refuses_any_other_shape(
        call: Callable[[HttpClient], Any], member: str, entry: Callable[[str], dict[str, Any]]) -> None:
    wrong: list[str] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5)
        for name, template, ids in ANSWERS:
            srv.paths.clear()
            text = template.replace("M", member)
            srv.body = text.replace("R1", json.dumps(entry("r1"))).replace("R2", json.dumps(entry("r2"))).encode()
            want = None if ids is None else [entry(i) for i in ids]
            got: Any
            try:
                got = call(c)
            except ProtocolError as e:
                got = None if e.code == "BAD_REQUEST" and member in e.message else repr(e)
            except Exception as e:  # noqa: BLE001 (the row names what escaped)
                got = repr(e)
            if got != want:
                wrong.append(f"{name}: {got!r}")
            if len(srv.paths) != 1:
                wrong.append(f"{name}: {len(srv.paths)} requests")
    assert wrong == []


def test_a_quarantine_page_is_one_request_bounded_by_max_response_bytes_whatever_records_it_holds() -> None:
    records = [{"id": f"qr_{i}", "time": "2026-01-01T00:00:00Z", "data": "x" * 100} for i in range(50)]
    with http_answering() as srv:
        srv.body = json.dumps({"records": records}).encode()
        assert len(HttpClient(srv.url, "t", timeout=5).quarantine(max=50)) == 50
        assert srv.paths == ["/v1/quarantine?max=50"], "the next page is the caller's to ask for"
        with pytest.raises(PigeonError) as e:
            HttpClient(srv.url, "t", timeout=5, max_response_bytes=1024).quarantine()
        assert e.value.code == "PAYLOAD_TOO_LARGE"


def _receipt(audit_seq: int) -> dict[str, Any]:
    return {"event": "delivered", "time": "2026-01-01T00:00:00Z", "principal": "p", "contractId": "c",
            "auditSeq": audit_seq}


def test_a_walk_of_receipt_pages_yields_each_page_before_it_asks_for_the_next() -> None:
    with http_answering() as srv:
        # A server whose pages never end: page n holds receipts 2n-1 and 2n.
        def respond(path: str) -> tuple[int, bytes]:
            after = int(urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("after", ["0"])[0])
            page = {"receipts": [_receipt(after + 1), _receipt(after + 2)], "next": str(after + 2)}
            return 200, json.dumps(page).encode()

        srv.respond = respond
        seen = []
        for r in HttpClient(srv.url, "t", timeout=5).iter_receipts("m_1", max=2):
            seen.append((r["auditSeq"], len(srv.paths)))
            if len(seen) == 5:
                break
    assert seen == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3)]


# Each listing the server caps: its call, the member holding its list, the
# most entries the server sends there, and entry i of a page.
CAPPED: list[Any] = [
    pytest.param(lambda c: c.audit(), "records", MAX_PAGE_RECORDS,
                 lambda i: {"seq": i + 1, "note": 'a [list], "quoted", {braced}'}, id="audit"),
    pytest.param(lambda c: c.quarantine(), "records", MAX_PAGE_RECORDS,
                 lambda i: {"id": f"qr_{i}", "message": {"data": [[1, 2], {"a": [3]}]}}, id="quarantine"),
    pytest.param(lambda c: c.receipts("m_1").receipts, "receipts", MAX_PAGE_RECORDS, lambda i: _receipt(i + 1),
                 id="receipts"),
    pytest.param(lambda c: c.keys("acct"), "keys", MAX_ACCOUNT_KEYS,
                 lambda i: {**SIG_KEY, "kid": f"k{i}"}, id="keys"),
]


@pytest.mark.parametrize("call,member,most,entry", CAPPED)
def test_a_page_of_the_servers_cap_is_read_and_one_of_more_is_refused_before_the_entries_past_it_are_built(
        call: Callable[[HttpClient], Any], member: str, most: int, entry: Callable[[int], Any]) -> None:
    def page(n: int, name: str = member, comma: str = ",") -> str:
        return '{"' + name + '":[' + comma.join(json.dumps(entry(i)) for i in range(n)) + "]}"

    escaped = member.replace(member[0], "\\u%04x" % ord(member[0]), 1)
    refused = [
        ("one more", page(most + 1)),
        ("one more, spaced out", page(most + 1, comma=" \r\n,\t ").replace(":[", " : [ \n", 1)),
        ("one more, under an escaped name", page(most + 1, escaped)),
        ("empty objects past the cap", '{"' + member + '":[' + "{}," * (most * 10) + "{}]}"),
        # The entry past the cap, and all after it, are not read: were they,
        # the answer would be refused as no JSON.
        ("one more, then no JSON", page(most)[:-2] + ",{},{@@ no JSON"),
    ]
    wrong: list[str] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=30)
        srv.body = page(most).encode()
        assert len(call(c)) == most, "a full page is read"
        for name, text in refused:
            srv.body = text.encode()
            try:
                got = call(c)
            except ProtocolError as e:
                if e.code != "BAD_REQUEST" or f"more than {most} {member}" not in e.message:
                    wrong.append(f"{name}: {e!r:.300}")
                continue
            wrong.append(f"{name}: {len(got)} entries handed over")
        # A list of that name deeper in the answer is not the page's.
        srv.body = ('{"x":' + page(most + 1) + ',"' + member + '":[]}').encode()
        assert call(c) == []
    assert wrong == []


@pytest.mark.parametrize("text", [
    '{"records":[]}', ' {} ', '{"records":null,"x":1}', '{"x":[1,2],"records":[{"a":{"b":[1,{"c":2}]}},7,"s",null]}',
    '{"\\u0072ecords":[{"a":1}], "records":[{"b":2}]}', '{"records":[{"a":1,"a":2}]}', '{"a":1,"a":2,"records":[]}',
    '{"records":[1,2,3]} \n', '[{"records":[1]}]', '"records"', "null", '{"records":[1.5e3,-0,true,false]}',
])
def test_a_listing_answer_is_read_as_a_frame_is(text: str) -> None:
    assert _loads_listing(text, "records", 5) == _loads_frame(text)


@pytest.mark.parametrize("text", [
    '{"records":[1,]}', '{"records":[1 2]}', '{"records":[1]', '{"records":[1]}}', '{"records":[1]} x', '{records:[]}',
    '{"records" [1]}', '{"records":[NaN]}', '{"records":[1],}', '{"x":1 "records":[]}', '{"records":["\x01"]}',
    '\ufeff{"records":[]}', '{', '',
])
def test_a_listing_answer_that_is_no_json_is_refused_as_a_frame_is(text: str) -> None:
    with pytest.raises(ValueError):
        _loads_frame(text)
    with pytest.raises(ValueError):
        _loads_listing(text, "records", 5)
