//! An auditor's receipts of a message over HTTP (`GET
//! /v1/audit/receipts/{id}`, docs/http.md): page by page through each
//! page's `next`, and every page at once, against a real `pigeon serve`;
//! and the answers of a hostile server (a `next` that repeats or goes
//! back, a malformed `next` or receipt, pages without end) refused as
//! `BAD_FRAME` rather than read, or followed for ever.

mod common;

use common::{HttpReply, Seen};
use pigeon_client::http::{HttpClient, MAX_ALL_RECEIPTS, RECEIPTS_RETRIES};
use pigeon_client::{ErrorKind, ReplayOptions};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SUBJECT: &str = "notifications.send";
const REPLAYER: &str = "spiffe://merchant-prod/ns/ops/sa/notify-replay";

#[tokio::test]
async fn an_auditor_reads_the_receipts_of_a_message_page_by_page() {
    let mut server = common::Server::start("");
    let mut orders = common::http(&server, "orders-token");
    orders.negotiate(&[SUBJECT], None).await.unwrap();
    // An id the publisher chose, with characters a path segment must
    // percent-encode.
    let mine = pigeon_client::Message { id: format!("n/1?x#y z%2F-{}", common::nonce()), ..common::notification("receipts") };
    let d = orders.publish(&mine).await.unwrap();
    assert_eq!(d.id(), mine.id);
    let (id, seq) = (d.id().to_string(), d.sequence());

    // notifications.send grants a replay with a reason only.
    let replayer = common::connect(&server, "notify-replay-token", &[SUBJECT]).await;
    let reasons: Vec<String> = (0..3).map(|i| format!("audit {i}")).collect();
    for reason in &reasons {
        let ms = replayer.replay(SUBJECT, ReplayOptions { reason: Some(reason.clone()), ..Default::default() }).await.unwrap();
        assert_eq!(ms.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), [id.as_str()]);
    }
    replayer.close().await.unwrap();

    let auditor = common::http(&server, "auditor-token");
    let first = auditor.receipts(&id, None, Some(2)).await.unwrap();
    assert_eq!(first.receipts.len(), 2, "{first:?}");
    let next = first.next.clone().expect("a next: a third receipt is recorded");
    assert_eq!(next, first.receipts[1].cursor());
    let second = auditor.receipts(&id, Some(&next), Some(2)).await.unwrap();
    assert_eq!(second.receipts.len(), 1, "{second:?}");
    assert_eq!(second.next, None, "the last page");

    let paged: Vec<_> = first.receipts.iter().chain(&second.receipts).cloned().collect();
    for (r, reason) in paged.iter().zip(&reasons) {
        assert_eq!(r.event, "replay.executed");
        assert_eq!((r.principal.as_str(), r.ref_.as_str()), (REPLAYER, reason.as_str()), "{r:?}");
        assert_eq!((r.subject.as_str(), r.seq), (SUBJECT, seq), "{r:?}");
        assert!(r.contract_id.starts_with("ctr_"), "{r:?}");
        assert!(r.time_ms().is_some(), "{r:?}");
    }
    assert!(paged.windows(2).all(|w| w[0].audit_seq < w[1].audit_seq), "in audit order: {paged:?}");

    // Every page at once, and page by page: the same three.
    assert_eq!(auditor.all_receipts(&id, Some(2)).await.unwrap(), paged);
    assert_eq!(auditor.all_receipts(&id, None).await.unwrap(), paged);
    let mut pages = auditor.receipt_pages(&id, Some(2));
    let mut sizes = Vec::new();
    while let Some(p) = pages.next_page().await.unwrap() {
        sizes.push(p.receipts.len());
    }
    assert_eq!(sizes, [2, 1]);
    assert_eq!(pages.next_page().await.unwrap(), None, "ended");

    // An id nobody received: no receipts.
    assert_eq!(auditor.all_receipts("msg_nobody", None).await.unwrap(), []);

    // Not an auditor: refused. A malformed after: sent, and refused.
    let e = common::http(&server, "orders-token").receipts(&id, None, Some(2)).await.expect_err("not an auditor");
    assert_eq!((e.code.as_str(), e.status), ("FORBIDDEN", 403), "{e}");
    let e = auditor.receipts(&id, Some("x:1"), Some(2)).await.expect_err("a malformed after");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("BAD_REQUEST", 400, ErrorKind::Invalid), "{e}");
    server.stop();
}

// ---- a hostile server ----

/// An HTTP endpoint answering each request with `answer(n, head)` (`n`
/// counts from 0; Content-Length given), recording each request.
/// It answers at most 50 requests, then closes each connection: a client
/// that would follow its pages for ever fails a transport error instead.
async fn http_server(answer: impl Fn(usize, &str) -> (u16, String) + Send + Sync + 'static) -> (String, Arc<Mutex<Vec<Seen>>>) {
    http_server_with_headers(move |n, head| {
        let (status, text) = answer(n, head);
        (status, String::new(), text)
    })
    .await
}

/// [`http_server`], whose `answer` also gives header lines (each ending
/// in CRLF) to send.
async fn http_server_with_headers(
    answer: impl Fn(usize, &str) -> (u16, String, String) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    common::http_server(move |n, r| {
        (n < 50).then(|| {
            let (status, headers, body) = answer(n, &r.head);
            HttpReply { status, headers, body }
        })
    })
    .await
}

/// A server answering every request with `body`.
async fn canned(body: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let text = body.to_string();
    http_server(move |_, _| (200, text.clone())).await
}

fn receipt(audit: u64, seq: u64) -> Value {
    json!({"event": "delivery.dispatched", "time": "2026-12-05T08:00:00.5Z", "principal": "p", "contractId": "ctr_1",
           "ref": "sub_1", "auditSeq": audit, "subject": SUBJECT, "seq": seq})
}

fn with(mut r: Value, name: &str, v: Value) -> Value {
    r[name] = v;
    r
}

fn without(mut r: Value, name: &str) -> Value {
    r.as_object_mut().unwrap().remove(name);
    r
}

fn bad_frame(e: &pigeon_client::Error) -> bool {
    e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol
}

/// The request line of a request.
fn line(r: &Seen) -> &str {
    r.head.split("\r\n").next().unwrap()
}

#[tokio::test]
async fn the_id_and_the_query_are_percent_encoded() {
    let (url, heads) = canned(json!({"receipts": []})).await;
    let h = HttpClient::new(&url, "auditor-token");
    h.receipts("a/b?c#d e", Some("5:1"), Some(2)).await.unwrap();
    h.receipts("msg_1", None, None).await.unwrap();
    h.receipts("msg_1", Some("x y&max=1"), Some(0)).await.unwrap();
    let heads = heads.lock().unwrap().clone();
    assert_eq!(line(&heads[0]), "GET /v1/audit/receipts/a%2Fb%3Fc%23d%20e?max=2&after=5%3A1 HTTP/1.1");
    assert_eq!(line(&heads[1]), "GET /v1/audit/receipts/msg_1 HTTP/1.1");
    assert_eq!(line(&heads[2]), "GET /v1/audit/receipts/msg_1?after=x%20y%26max%3D1 HTTP/1.1");
    // A path segment that names another route: nothing sent.
    for id in ["", ".", ".."] {
        let e = h.receipts(id, None, None).await.expect_err(id);
        assert_eq!(e.code, "INVALID_ARGUMENT", "{id:?}: {e}");
    }
    assert_eq!(h.receipt_pages("..", None).next_page().await.expect_err("..").code, "INVALID_ARGUMENT");
}

#[tokio::test]
async fn a_next_that_repeats_or_goes_back_ends_the_pages() {
    let cases: Vec<(&str, Vec<Value>)> = vec![
        // The same page for ever.
        ("the same page", vec![json!({"receipts": [receipt(5, 1)], "next": "5:1"})]),
        // Every page past the last, but its next back at the start.
        (
            "a next back before the page",
            vec![json!({"receipts": [receipt(5, 1)], "next": "5:1"}), json!({"receipts": [receipt(6, 1)], "next": "4:0"})],
        ),
        // No receipts, and a next that stays.
        ("an empty page with a next", vec![json!({"receipts": [], "next": "5:1"})]),
        // The first page again, for the after of the second.
        ("a page before its after", vec![json!({"receipts": [receipt(5, 1), receipt(6, 1)], "next": "6:1"})]),
    ];
    for (name, pages) in cases {
        let (url, heads) = http_server(move |n, _| (200, pages[n.min(pages.len() - 1)].to_string())).await;
        let h = HttpClient::new(&url, "auditor-token");
        let e = tokio::time::timeout(Duration::from_secs(20), h.all_receipts("msg_1", Some(2)))
            .await
            .unwrap_or_else(|_| panic!("{name}: still reading pages"))
            .expect_err(name);
        assert!(bad_frame(&e), "{name}: {e}");
        let asked = heads.lock().unwrap().len();
        assert!(asked <= 2, "{name}: {asked} pages asked for");

        // Page by page: the error ends the pages, and stays.
        let mut pages = h.receipt_pages("msg_1", Some(2));
        let err = loop {
            match pages.next_page().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{name}: the pages ended without an error"),
                Err(e) => break e,
            }
        };
        assert!(bad_frame(&err), "{name}: {err}");
        assert!(bad_frame(&pages.next_page().await.expect_err("again")), "{name}");
        assert!(heads.lock().unwrap().len() <= asked + 2, "{name}: asked again after the error");
    }
}

/// A server whose pages of `size` receipts go on past the one before,
/// `pages` of them (`None`: for ever), each naming the next but the last.
async fn pages_of(size: u64, pages: Option<usize>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    http_server(move |n, _| {
        let base = n as u64 * size;
        let rs: Vec<Value> = (1..=size).map(|i| receipt(base + i, 1)).collect();
        let last = pages.is_some_and(|p| n + 1 >= p);
        let page = if last { json!({"receipts": rs}) } else { json!({"receipts": rs, "next": format!("{}:1", base + size)}) };
        (200, page.to_string())
    })
    .await
}

/// Whether `e` is the refusal of all_receipts past its bound `max`, naming
/// `next` the cursor to read on from.
fn truncated(e: &pigeon_client::Error, max: usize, next: Option<&str>) -> bool {
    e.code == "RECEIPTS_TRUNCATED"
        && e.kind == ErrorKind::Truncated
        && e.details.get("max") == Some(&json!(max))
        && e.details.get("next").and_then(Value::as_str) == next
}

#[tokio::test]
async fn pages_without_end_are_not_gathered_without_bound() {
    // Every page full and past the one before, for ever.
    let (url, heads) = pages_of(10_000, None).await;
    let h = HttpClient::new(&url, "auditor-token");
    let e = tokio::time::timeout(Duration::from_secs(60), h.all_receipts("msg_1", None))
        .await
        .expect("still gathering pages")
        .expect_err("pages without end");
    // The bound the caller reached, not a malformed answer.
    assert!(truncated(&e, MAX_ALL_RECEIPTS, Some("100000:1")), "{e:?}");
    assert_eq!(e.status, 413, "{e:?}");
    assert_eq!(heads.lock().unwrap().len(), MAX_ALL_RECEIPTS / 10_000 + 1);
}

#[tokio::test]
async fn the_bound_of_all_receipts_is_the_callers_to_set() {
    let mut wrong = Vec::new();
    // (pages of 10 recorded, the bound, what all_receipts gives: the
    // receipts gathered, or the next of its RECEIPTS_TRUNCATED)
    for (pages, most, want) in [
        (Some(3), 30, Ok(30)),
        (Some(3), 29, Err(Some("29:1"))),
        (Some(3), 1_000, Ok(30)),
        (None, 25, Err(Some("25:1"))),
        (None, 300, Err(Some("300:1"))),
        (Some(1), 0, Err(None)),
    ] {
        let (url, heads) = pages_of(10, pages).await;
        let h = HttpClient::new(&url, "auditor-token").with_all_receipts_max(most);
        let got = tokio::time::timeout(Duration::from_secs(60), h.all_receipts("msg_1", Some(10))).await.expect("still gathering pages");
        match (&got, want) {
            (Ok(rs), Ok(n)) if rs.len() == n && rs.windows(2).all(|w| w[0].audit_seq < w[1].audit_seq) => {}
            (Err(e), Err(next)) if truncated(e, most, next) => {
                let asked = heads.lock().unwrap().len();
                if asked != most / 10 + 1 {
                    wrong.push(format!("{pages:?} pages, at most {most}: {asked} pages asked for"));
                }
            }
            _ => wrong.push(format!("{pages:?} pages, at most {most}: {:?}", got.map(|rs| rs.len()))),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn a_malformed_next_is_refused() {
    let mut wrong = Vec::new();
    for next in [
        json!("x:1"),
        json!("1:x"),
        json!(":1"),
        json!("1:"),
        json!("1:2:3"),
        json!("-1"),
        json!("+5"),
        json!(" 5:1"),
        json!("5:1 "),
        json!("5: 1"),
        json!("5.0"),
        json!("18446744073709551616"),
        json!("5:18446744073709551616"),
        json!(""),
        json!(5),
        json!(null),
        json!(["5:1"]),
    ] {
        let (url, _) = canned(json!({"receipts": [receipt(5, 1)], "next": next})).await;
        match HttpClient::new(&url, "auditor-token").receipts("msg_1", None, None).await {
            Err(e) if bad_frame(&e) => {}
            Err(e) => wrong.push(format!("{next}: {e}")),
            Ok(p) => wrong.push(format!("{next}: taken as {:?}", p.next)),
        }
    }
    assert!(wrong.is_empty(), "not refused as BAD_FRAME:\n{}", wrong.join("\n"));
    // A next as the server writes it, and an audit sequence alone (the
    // place past every receipt of that record): taken.
    for next in ["5:1", "5", "0005:01", "18446744073709551615:18446744073709551615"] {
        let (url, _) = canned(json!({"receipts": [receipt(5, 1)], "next": next})).await;
        let p = HttpClient::new(&url, "auditor-token").receipts("msg_1", None, None).await.unwrap();
        assert_eq!(p.next.as_deref(), Some(next));
    }
}

#[tokio::test]
async fn a_malformed_receipt_or_page_is_refused() {
    let r = receipt(5, 1);
    let cases: Vec<(&str, Value)> = vec![
        ("no receipts", json!({})),
        ("receipts null", json!({"receipts": null})),
        ("receipts an object", json!({"receipts": {"0": r}})),
        ("receipts a string", json!({"receipts": "[]"})),
        ("an answer that is a list", json!([r])),
        ("a receipt that is not an object", json!({"receipts": [5]})),
        ("a receipt that is null", json!({"receipts": [null]})),
        ("no event", json!({"receipts": [without(r.clone(), "event")]})),
        ("an empty event", json!({"receipts": [with(r.clone(), "event", json!(""))]})),
        ("an event not a string", json!({"receipts": [with(r.clone(), "event", json!(1))]})),
        ("no time", json!({"receipts": [without(r.clone(), "time")]})),
        ("a time not RFC 3339", json!({"receipts": [with(r.clone(), "time", json!("yesterday"))]})),
        ("a time as a number", json!({"receipts": [with(r.clone(), "time", json!(1_764_921_600_000u64))]})),
        ("no principal", json!({"receipts": [without(r.clone(), "principal")]})),
        ("a principal null", json!({"receipts": [with(r.clone(), "principal", json!(null))]})),
        ("no contractId", json!({"receipts": [without(r.clone(), "contractId")]})),
        ("a contractId not a string", json!({"receipts": [with(r.clone(), "contractId", json!(7))]})),
        ("a ref not a string", json!({"receipts": [with(r.clone(), "ref", json!(7))]})),
        ("a ref null", json!({"receipts": [with(r.clone(), "ref", json!(null))]})),
        ("a subject not a string", json!({"receipts": [with(r.clone(), "subject", json!(["s"]))]})),
        ("no auditSeq", json!({"receipts": [without(r.clone(), "auditSeq")]})),
        ("an auditSeq of 0", json!({"receipts": [with(r.clone(), "auditSeq", json!(0))]})),
        ("a negative auditSeq", json!({"receipts": [with(r.clone(), "auditSeq", json!(-5))]})),
        ("an auditSeq as a float", json!({"receipts": [with(r.clone(), "auditSeq", json!(5.0))]})),
        ("a fractional auditSeq", json!({"receipts": [with(r.clone(), "auditSeq", json!(5.5))]})),
        ("an auditSeq as a string", json!({"receipts": [with(r.clone(), "auditSeq", json!("5"))]})),
        ("an auditSeq past 2^64", json!({"receipts": [with(r.clone(), "auditSeq", json!(1.8446744073709552e19))]})),
        ("a negative seq", json!({"receipts": [with(r.clone(), "seq", json!(-1))]})),
        ("a fractional seq", json!({"receipts": [with(r.clone(), "seq", json!(1.5))]})),
        ("a seq as a string", json!({"receipts": [with(r.clone(), "seq", json!("1"))]})),
        ("a seq null", json!({"receipts": [with(r.clone(), "seq", json!(null))]})),
        ("a receipt twice", json!({"receipts": [r.clone(), r.clone()]})),
        ("receipts out of order", json!({"receipts": [receipt(6, 1), receipt(5, 1)]})),
        ("receipts of one record out of order", json!({"receipts": [receipt(5, 2), receipt(5, 1)]})),
        ("a next before the last receipt", json!({"receipts": [receipt(5, 1), receipt(6, 1)], "next": "5:1"})),
        ("more receipts than asked for", json!({"receipts": [receipt(5, 1), receipt(6, 1), receipt(7, 1)]})),
    ];
    let mut wrong = Vec::new();
    for (name, body) in cases {
        let (url, _) = canned(body).await;
        match HttpClient::new(&url, "auditor-token").receipts("msg_1", None, Some(2)).await {
            Err(e) if bad_frame(&e) => {}
            Err(e) => wrong.push(format!("{name}: {e}")),
            Ok(p) => wrong.push(format!("{name}: taken as {p:?}")),
        }
    }
    assert!(wrong.is_empty(), "not refused as BAD_FRAME:\n{}", wrong.join("\n"));

    // Receipts at or before the cursor asked after: a server ignoring it.
    let (url, _) = canned(json!({"receipts": [receipt(5, 1), receipt(6, 1)]})).await;
    let h = HttpClient::new(&url, "auditor-token");
    for after in ["5:1", "5", "6:0", "9"] {
        let e = h.receipts("msg_1", Some(after), None).await.expect_err(after);
        assert!(bad_frame(&e), "{after}: {e}");
    }
    // Past it: taken, with the members the route adds left alone.
    let page = h.receipts("msg_1", Some("5:0"), None).await.unwrap();
    assert_eq!(page.receipts.iter().map(|r| r.cursor()).collect::<Vec<_>>(), ["5:1", "6:1"]);
    let (url, _) = canned(json!({"receipts": [with(without(without(receipt(5, 1), "ref"), "seq"), "more", json!({}))], "extra": 1})).await;
    let page = HttpClient::new(&url, "auditor-token").receipts("msg_1", None, Some(1)).await.unwrap();
    assert_eq!((page.receipts[0].ref_.as_str(), page.receipts[0].seq, page.next), ("", 0, None));
}

/// The broker's 429 of a receipts request that finds no walk of the log
/// free: `Retry-After` (none when empty) and `details.retryAfterMs`.
fn busy(retry_after: &str, retry_after_ms: u64) -> (u16, String, String) {
    let headers = if retry_after.is_empty() { String::new() } else { format!("Retry-After: {retry_after}\r\n") };
    let body = json!({"error": {"code": "RATE_LIMITED", "message": "busy", "details": {"retryAfterMs": retry_after_ms}}});
    (429, headers, body.to_string())
}

fn ok(body: Value) -> (u16, String, String) {
    (200, String::new(), body.to_string())
}

#[tokio::test]
async fn receipts_gives_the_servers_429_to_the_caller_at_once() {
    let (url, heads) = http_server_with_headers(|_, _| busy("1", 1000)).await;
    let e = HttpClient::new(&url, "auditor-token").receipts("msg_1", None, None).await.expect_err("rate limited");
    assert_eq!((e.code.as_str(), e.status), ("RATE_LIMITED", 429), "{e}");
    assert_eq!(heads.lock().unwrap().len(), 1, "one request: the caller's to retry");
}

/// Before: the 429 ended the pages' reading mid-walk, `RATE_LIMITED`.
#[tokio::test]
async fn a_429_is_waited_out_and_the_pages_go_on_from_the_same_cursor() {
    // Page one, then RATE_LIMITED twice (Retry-After: 1), then page two.
    let at: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let seen = at.clone();
    let (url, heads) = http_server_with_headers(move |n, _| {
        seen.lock().unwrap().push(std::time::Instant::now());
        match n {
            0 => ok(json!({"receipts": [receipt(5, 1)], "next": "5:1"})),
            1 | 2 => busy("1", 1000),
            _ => ok(json!({"receipts": [receipt(6, 1)]})),
        }
    })
    .await;
    let h = HttpClient::new(&url, "auditor-token");
    let got = tokio::time::timeout(Duration::from_secs(30), h.all_receipts("msg_1", None)).await.expect("still reading").unwrap();
    assert_eq!(got.iter().map(|r| r.cursor()).collect::<Vec<_>>(), ["5:1", "6:1"], "every receipt, none twice");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 4);
    for h in &heads[1..] {
        assert_eq!(line(h), "GET /v1/audit/receipts/msg_1?after=5%3A1 HTTP/1.1", "the same page asked again");
    }
    // A lower bound only (a slow machine waits longer).
    let at = at.lock().unwrap().clone();
    for w in at[1..].windows(2) {
        assert!(w[1] - w[0] >= Duration::from_millis(900), "asked again {:?} after a Retry-After of 1 s", w[1] - w[0]);
    }
}

#[tokio::test]
async fn a_429_is_waited_out_a_bounded_number_of_times_then_returned_and_the_pages_stay() {
    // RATE_LIMITED (Retry-After: 0) for RECEIPTS_RETRIES + 1 requests, then
    // the page: the pages return the 429, and asked again read the page.
    let refusals = RECEIPTS_RETRIES as usize + 1;
    let (url, heads) =
        http_server_with_headers(move |n, _| if n < refusals { busy("0", 0) } else { ok(json!({"receipts": [receipt(6, 1)]})) }).await;
    let h = HttpClient::new(&url, "auditor-token");
    let mut pages = h.receipt_pages("msg_1", None);
    let e = pages.next_page().await.expect_err("rate limited");
    assert_eq!((e.code.as_str(), e.status), ("RATE_LIMITED", 429), "{e}");
    assert_eq!(heads.lock().unwrap().len(), refusals, "one request, then one a wait");
    assert_eq!(pages.next_page().await.unwrap().unwrap().receipts[0].cursor(), "6:1");
    assert_eq!(pages.next_page().await.unwrap(), None);
}

#[tokio::test]
async fn a_dropped_wait_leaves_the_pages_where_they_were() {
    // Page one, then a 429 of Retry-After: 30, then page two.
    let (url, heads) = http_server_with_headers(|n, _| match n {
        0 => ok(json!({"receipts": [receipt(5, 1)], "next": "5:1"})),
        1 => busy("30", 30_000),
        _ => ok(json!({"receipts": [receipt(6, 1)]})),
    })
    .await;
    let h = HttpClient::new(&url, "auditor-token");
    let mut pages = h.receipt_pages("msg_1", None);
    assert_eq!(pages.next_page().await.unwrap().unwrap().receipts[0].cursor(), "5:1");
    // The caller's deadline ends the wait (the future dropped).
    tokio::time::timeout(Duration::from_secs(1), pages.next_page()).await.expect_err("still waiting out 30 s");
    assert_eq!(heads.lock().unwrap().len(), 2);
    assert_eq!(pages.next_page().await.unwrap().unwrap().receipts[0].cursor(), "6:1", "the same page, asked again");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(line(&heads[2]), line(&heads[1]));
}
