"""The listings of the HTTP API: subjects, audit records, quarantine records,
an account's keys, a message's receipts. Each call asks for one page and
holds that page alone, its answer read up to ``max_response_bytes`` (256 MiB
by default); the walk of receipt pages (``iter_receipts``) yields each page
before it asks for the next. So no listing of the client gathers records
across pages, and none needs a cap on the records it holds (the CLI's
``quarantine list`` walks every page, and stops at 1000 records by default).

A listing answer whose list is not a list of objects is refused,
``ProtocolError``, as the TypeScript client refuses it
(test/listings.test.mjs holds the same table): before, a string was listed
letter by letter, an object by its member names, and a number or an answer
that is not an object raised ``TypeError`` or ``AttributeError``."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, Callable

import pytest

from harness import http_answering
from pigeon_client import HttpClient, PigeonError, ProtocolError

# Each listing: its call and the member of the answer holding its list.
LISTINGS: list[Any] = [
    pytest.param(lambda c: c.subjects(), "subjects", id="subjects"),
    pytest.param(lambda c: c.audit(from_=1, max=2), "records", id="audit"),
    pytest.param(lambda c: c.quarantine(max=2), "records", id="quarantine"),
    pytest.param(lambda c: c.keys("acct"), "keys", id="keys"),
]

# Each answer: its JSON text (``M`` stands for the listing's member), and the
# list the call returns (None: refused, ProtocolError).
ANSWERS: list[tuple[str, str, list[Any] | None]] = [
    ("a list of objects", '{"M":[{"id":"r1"},{"id":"r2"}]}', [{"id": "r1"}, {"id": "r2"}]),
    ("an empty list", '{"M":[]}', []),
    ("absent", "{}", []),
    ("null", '{"M":null}', []),
    ("a string", '{"M":"abc"}', None),
    ("an object", '{"M":{"a":1}}', None),
    ("a number", '{"M":7}', None),
    ("an entry that is not an object", '{"M":[{"id":"r1"},"r2"]}', None),
    ("an answer that is not an object", '[{"id":"r1"}]', None),
]


@pytest.mark.parametrize("call,member", LISTINGS)
def test_a_listing_asks_for_one_page_and_returns_its_list_of_objects_and_refuses_any_other_shape(
        call: Callable[[HttpClient], Any], member: str) -> None:
    wrong: list[str] = []
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5)
        for name, text, want in ANSWERS:
            srv.paths.clear()
            srv.body = text.replace("M", member).encode()
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
