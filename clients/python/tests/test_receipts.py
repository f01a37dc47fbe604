"""``HttpClient.receipts`` and ``iter_receipts`` (``GET
/v1/audit/receipts/{id}``) against a server the client cannot trust: an
answer that is not a page of receipts the client can hold, in order, is
refused (``ProtocolError``), and a ``next`` that repeats or leads back ends
the walk with that error rather than asking the same pages forever. Each
refusal test failed before the checks were written."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
import urllib.parse
from typing import Any, Callable, Iterator

import pytest

from harness import Answering, http_answering
from pigeon_client import HttpClient, InvalidError, PigeonError, ProtocolError, RequestTimeoutError
from pigeon_client.http import RECEIPTS_MAX_WAIT, RECEIPTS_RETRIES

U64_MAX = (1 << 64) - 1


def receipt(audit_seq: Any, seq: Any = 1, **over: Any) -> dict[str, Any]:
    r = {
        "event": "replay.executed",
        "time": "2026-12-05T08:00:00Z",
        "principal": "spiffe://merchant-prod/ns/ops/sa/notify-replay",
        "contractId": "ctr_1",
        "ref": "audit",
        "auditSeq": audit_seq,
        "subject": "notifications.send",
        "seq": seq,
    }
    r.update(over)
    return {k: v for k, v in r.items() if v is not ...}


def body(x: Any) -> bytes:
    return (x if isinstance(x, str) else json.dumps(x)).encode()


HOSTILE = [
    ("an answer that is a list", "[]", "not an object"),
    ("receipts not a list", '{"receipts":{"0":{}}}', "not a list"),
    ("receipts a string", '{"receipts":"none"}', "not a list"),
    ("a receipt not an object", '{"receipts":[7]}', "entry 0.*not an object"),
    ("a receipt without an event", {"receipts": [receipt(1, event=...)]}, "no string event"),
    ("a principal that is not a string", {"receipts": [receipt(1, principal=7)]}, "no string principal"),
    ("a ref that is not a string", {"receipts": [receipt(1, ref=["x"])]}, "ref that is not a string"),
    ("no auditSeq", {"receipts": [receipt(...)]}, "auditSeq"),
    ("an auditSeq past 2^64-1", {"receipts": [receipt(U64_MAX + 1)]}, "auditSeq.*2\\^64-1"),
    ("a negative auditSeq", {"receipts": [receipt(-1)]}, "auditSeq"),
    ("a float auditSeq", {"receipts": [receipt(1.0)]}, "auditSeq"),
    ("an auditSeq that is true", {"receipts": [receipt(True)]}, "auditSeq"),
    ("an auditSeq in a string", {"receipts": [receipt("7")]}, "auditSeq"),
    ("a seq past 2^64-1", {"receipts": [receipt(1, U64_MAX + 1)]}, "seq.*2\\^64-1"),
    ("a negative seq", {"receipts": [receipt(1, -1)]}, "seq"),
    ("a seq that is true", {"receipts": [receipt(1, True)]}, "seq"),
    # A uint64 in Go, which takes no -0 (json.loads reads it as 0).
    ("an auditSeq spelled -0", json.dumps({"receipts": [receipt(12345)]}).replace("12345", "-0"), "auditSeq"),
    ("a seq spelled -0", json.dumps({"receipts": [receipt(1, 12345)]}).replace("12345", "-0"), "has a seq"),
    ("a second receipt before the first", {"receipts": [receipt(5), receipt(4)]}, "entry 1.*after the one before"),
    ("the same receipt twice", {"receipts": [receipt(5), receipt(5)]}, "entry 1.*after the one before"),
    ("a next that is a number", {"receipts": [receipt(5)], "next": 5}, "next that is not a cursor"),
    *[
        (f"a next of {n[:24]!r}", {"receipts": [receipt(5)], "next": n}, "next that is not a cursor")
        for n in ["x:1", "1:2:3", "1:", ":1", "-1", " 5:1", "5:1 ", "5:1\n", "+5", "0x5", "5:1e2", "١:١",
                  str(U64_MAX + 1), f"5:{U64_MAX + 1}", "", "9" * 400]
    ],
    ("a next with no receipt", {"receipts": [], "next": "5:1"}, "next and no receipt"),
    ("a next before the page's last receipt", {"receipts": [receipt(5), receipt(7, 2)], "next": "7:1"},
     "before the page's last receipt"),
]


@pytest.fixture(scope="module")
def answering() -> Iterator[Any]:
    """One raw endpoint for the module's cases (each sets its answer)."""
    with http_answering() as srv:
        yield srv


@pytest.mark.parametrize("answer,why", [pytest.param(a, w, id=n) for n, a, w in HOSTILE])
def test_a_receipts_answer_the_client_cannot_hold_is_refused(answering: Any, answer: Any, why: str) -> None:
    answering.status, answering.body = 200, body(answer)
    with pytest.raises(ProtocolError, match=why):
        HttpClient(answering.url, "auditor-token").receipts("msg_1")


@pytest.mark.parametrize("after,first,kept", [
    ("5:1", (5, 1), False), ("5:1", (4, 9), False), ("5", (5, 3), False), ("5", (5, 0), False),
    ("5:1", (5, 2), True), ("5:1", (6, 0), True), ("5", (6, 1), True),
])
def test_a_receipt_not_after_the_cursor_asked_is_refused(answering: Any, after: str, first: tuple[int, int],
                                                        kept: bool) -> None:
    answering.status, answering.body = 200, body({"receipts": [receipt(*first)]})
    c = HttpClient(answering.url, "auditor-token")
    if kept:
        assert len(c.receipts("msg_1", after=after).receipts) == 1
    else:
        with pytest.raises(ProtocolError, match="entry 0.*after the cursor asked"):
            c.receipts("msg_1", after=after)


def test_a_well_formed_page_is_kept_as_sent() -> None:
    page = {"receipts": [receipt(3, ..., ref=..., subject=...), receipt(U64_MAX, U64_MAX)],
            "next": f"{U64_MAX}:{U64_MAX}"}
    with http_answering() as srv:
        c = HttpClient(srv.url, "auditor-token")
        srv.body = body(page)
        got = c.receipts("msg_1", max=2)
        assert got.receipts == page["receipts"] and got.next == page["next"]
        for nxt in [str(U64_MAX)]:
            srv.body = body({**page, "next": nxt})
            assert c.receipts("msg_1").next == nxt
        srv.body = body({"receipts": []})
        assert c.receipts("msg_1").receipts == [] and c.receipts("msg_1").next is None
        srv.body = body({})
        assert c.receipts("msg_1").receipts == []


def test_receipts_percent_encodes_the_id_and_sends_after_and_max() -> None:
    with http_answering() as srv:
        srv.body = b'{"receipts":[]}'
        c = HttpClient(srv.url, "auditor-token")
        for i in ["msg/../../v1/accounts", "a?max=1", "a#b", "a b", "msg_1:2"]:
            c.receipts(i, after="5:1", max=2)
        assert srv.paths == [f"/v1/audit/receipts/{p}?after=5%3A1&max=2"
                             for p in ["msg%2F..%2F..%2Fv1%2Faccounts", "a%3Fmax%3D1", "a%23b", "a%20b", "msg_1%3A2"]]
        c.receipts("msg_1")
        assert srv.paths[-1] == "/v1/audit/receipts/msg_1"
        for i in ["", ".", ".."]:
            with pytest.raises(InvalidError):
                c.receipts(i)
            with pytest.raises(InvalidError):
                c.iter_receipts(i)
        assert len(srv.paths) == 6, "nothing sent for an id that cannot be a path segment"


@contextlib.contextmanager
def paging(answer: Callable[[str | None], Any]) -> Iterator[Answering]:
    """A raw HTTP endpoint (harness.http_answering) whose answer to each
    request is ``answer(after)`` (the request's ``after``, ``None`` without
    one): a server that pages as it likes. Past 50 requests it answers 500
    with no error of the broker's."""
    with http_answering() as pg:

        def respond(path: str) -> tuple[int, bytes]:
            if len(pg.paths) > 50:
                # A walk that never ends fails here, not by hanging the suite.
                return 500, b"asked too many times"
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
            return 200, body(answer(q["after"][0] if "after" in q else None))

        pg.respond = respond
        yield pg


def test_iter_receipts_follows_next_until_a_page_has_none() -> None:
    pages = {
        None: {"receipts": [receipt(2), receipt(3)], "next": "3:1"},
        "3:1": {"receipts": [receipt(3, 4), receipt(9)], "next": "9:1"},
        "9:1": {"receipts": [receipt(12)]},
    }
    with paging(lambda after: pages[after]) as pg:
        got = [(r["auditSeq"], r["seq"]) for r in HttpClient(pg.url, "auditor-token").iter_receipts("msg/1", max=2)]
    assert got == [(2, 1), (3, 1), (3, 4), (9, 1), (12, 1)]
    assert pg.paths == ["/v1/audit/receipts/msg%2F1?max=2", "/v1/audit/receipts/msg%2F1?after=3%3A1&max=2",
                        "/v1/audit/receipts/msg%2F1?after=9%3A1&max=2"]


WALKS = [
    # The same page whatever is asked: next names the page's own start.
    ("the same page again", lambda after: {"receipts": [receipt(5)], "next": "5:1"}),
    ("receipts again from the start", lambda after: {"receipts": [receipt(1), receipt(2)], "next": "2:1"}),
    ("a next before what was asked",
     lambda after: {"receipts": [receipt(6)], "next": "2:1"} if after else {"receipts": [receipt(5)], "next": "5:1"}),
    ("a next and no receipt",
     lambda after: {"receipts": [], "next": "9:9"} if after else {"receipts": [receipt(5)], "next": "5:1"}),
    ("an empty page that names the start again",
     lambda after: {"receipts": [], "next": "0:0"} if after else {"receipts": [receipt(5)], "next": "5:1"}),
]


@pytest.mark.parametrize("answer", [pytest.param(a, id=n) for n, a in WALKS])
def test_iter_receipts_ends_when_a_server_repeats_a_cursor_or_leads_back(answer: Callable[[str | None], Any]) -> None:
    with paging(answer) as pg:
        walk = HttpClient(pg.url, "auditor-token").iter_receipts("msg_1")
        # A walk that never ends takes 100 receipts here, or fails with the
        # endpoint's 500 past 50 pages of none: either fails the test.
        with pytest.raises(ProtocolError, match="after|next"):
            list(itertools.islice(walk, 100))
    assert len(pg.paths) <= 2


def busy(retry_after: str | None = "1", retry_after_ms: Any = 1000) -> tuple[int, bytes, dict[str, str]]:
    """The broker's 429 of a receipts request that finds no walk of the log
    free (``retry_after`` None: no ``Retry-After``)."""
    err: dict[str, Any] = {"code": "RATE_LIMITED", "message": "busy"}
    if retry_after_ms is not ...:
        err["details"] = {"retryAfterMs": retry_after_ms}
    return 429, body({"error": err}), ({} if retry_after is None else {"Retry-After": retry_after})


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits iter_receipts sleeps, recorded rather than slept."""
    import pigeon_client.http as http_mod

    waits: list[float] = []
    monkeypatch.setattr(http_mod.time, "sleep", waits.append)
    return waits


def test_receipts_gives_the_servers_429_to_the_caller_at_once() -> None:
    with http_answering() as srv:
        srv.respond = lambda path: busy()
        with pytest.raises(PigeonError) as e:
            HttpClient(srv.url, "auditor-token").receipts("msg_1")
        assert e.value.code == "RATE_LIMITED" and e.value.status == 429
    assert len(srv.paths) == 1, "one request: the caller's to retry"


# Before: the walk ended at the first 429, mid-walk, with RATE_LIMITED.
def test_iter_receipts_waits_out_a_429_and_goes_on_from_the_same_cursor() -> None:
    at: list[float] = []
    with http_answering() as pg:

        def respond(path: str) -> Any:
            at.append(time.monotonic())
            if "after=" not in path:
                return 200, body({"receipts": [receipt(2), receipt(5)], "next": "5:1"})
            if sum("after=" in p for p in pg.paths) <= 2:
                return busy("1")  # the second page: refused twice, then answered
            return 200, body({"receipts": [receipt(9)]})

        pg.respond = respond
        got = [(r["auditSeq"], r["seq"]) for r in HttpClient(pg.url, "auditor-token").iter_receipts("msg_1", max=2)]
    assert got == [(2, 1), (5, 1), (9, 1)], "every receipt, none twice"
    assert pg.paths == ["/v1/audit/receipts/msg_1?max=2"] + ["/v1/audit/receipts/msg_1?after=5%3A1&max=2"] * 3
    # A lower bound only (a slow machine waits longer).
    assert all(b - a >= 0.9 for a, b in zip(at[1:], at[2:])), at


def test_iter_receipts_waits_a_bounded_number_of_times_a_page(sleeps: list[float]) -> None:
    with http_answering() as srv:
        srv.respond = lambda path: busy("0", 0)
        with pytest.raises(PigeonError) as e:
            next(HttpClient(srv.url, "auditor-token").iter_receipts("msg_1"))
        assert e.value.code == "RATE_LIMITED" and e.value.status == 429
    assert len(srv.paths) == RECEIPTS_RETRIES + 1, "one request, then one a wait"
    assert sleeps == [0.0] * RECEIPTS_RETRIES


@pytest.mark.parametrize(("refusal", "wait"), [
    (busy("3", 7000), 3.0),
    (busy("86400", 86_400_000), RECEIPTS_MAX_WAIT),
    (busy("Fri, 31 Dec 2099 23:59:59 GMT", 2000), 2.0),
    (busy(None, 4000), 4.0),
    (busy(None, ...), 1.0),
    (busy(None, "soon"), 1.0),
    (busy(None, True), 1.0),
], ids=["Retry-After", "capped", "an HTTP date: retryAfterMs", "no Retry-After: retryAfterMs", "neither",
        "a retryAfterMs that is no number", "a retryAfterMs that is a bool"])
def test_iter_receipts_waits_retry_after_else_retry_after_ms_else_a_second_at_most_the_cap(
        sleeps: list[float], refusal: Any, wait: float) -> None:
    with http_answering() as srv:
        srv.respond = lambda path: refusal if len(srv.paths) == 1 else (200, body({"receipts": [receipt(3)]}))
        got = list(HttpClient(srv.url, "auditor-token").iter_receipts("msg_1"))
    assert [r["auditSeq"] for r in got] == [3]
    assert sleeps == [wait]


def test_iter_receipts_timeout_bounds_the_walk_its_waits_included(sleeps: list[float]) -> None:
    # A wait that would end past the timeout is not begun: the 429 is raised.
    with http_answering() as srv:
        srv.respond = lambda path: busy("30")
        with pytest.raises(PigeonError) as e:
            next(HttpClient(srv.url, "auditor-token").iter_receipts("msg_1", timeout=5))
        assert e.value.code == "RATE_LIMITED"
    assert len(srv.paths) == 1 and sleeps == []
    # One that ends within it is waited.
    with http_answering() as srv:
        srv.respond = lambda path: busy("1") if len(srv.paths) == 1 else (200, body({"receipts": []}))
        assert list(HttpClient(srv.url, "auditor-token").iter_receipts("msg_1", timeout=5)) == []
    assert sleeps == [1.0]
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            HttpClient("http://127.0.0.1:9", "t").iter_receipts("msg_1", timeout=bad)


def test_iter_receipts_asks_no_page_once_its_timeout_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    import pigeon_client.http as http_mod

    now = [1000.0]
    monkeypatch.setattr(http_mod.time, "monotonic", lambda: now[0])
    with http_answering() as srv:
        srv.respond = lambda path: (200, body({"receipts": [receipt(2)], "next": "2:1"}))
        walk = HttpClient(srv.url, "auditor-token", timeout=None).iter_receipts("msg_1", timeout=10)
        assert next(walk)["auditSeq"] == 2
        now[0] += 10  # the caller read slowly
        with pytest.raises(RequestTimeoutError):
            next(walk)
    assert len(srv.paths) == 1
