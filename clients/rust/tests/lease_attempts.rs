//! A pull answer names the lease attempt it was received under, over
//! WebSocket and HTTP (docs/protocol.md, "ack and nack"; docs/http.md): a
//! pull lease is the principal's, so a worker that answers after its lease
//! lapsed and another worker of the principal leased the job again must
//! name its attempt, or its late ack settles the other's lease. The
//! attempts a hostile server answers are taken only as the protocol gives
//! them (one positive integer per message) and sent back as given. Beside
//! them, the HTTP client's region (`x-pigeon-region`, as the session's) and
//! a request's reply checked against the request it answers, over both
//! transports.

mod common;

use common::{end, http_answering, http_canned, http_server, raw_opts, HttpReply, Seen};
use pigeon_client::http::{AckMode, HttpClient};
use pigeon_client::{ErrorKind, Message, Session, Status, MAX_ATTEMPT};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SUBJECT: &str = "notifications.send";

fn msg(i: u64) -> Value {
    json!({"id": format!("msg_{i}"), "subject": SUBJECT, "sequence": i, "data": {}})
}

/// A raw WebSocket endpoint answering every receive and request with
/// `answer` (its `re` set), every other frame `ok`, recording the frames.
async fn ws_answering(answer: Value) -> (String, Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<()>) {
    common::answering(&["receive", "request"], answer).await
}

/// The `attempts` a hostile server may answer two messages with that are
/// not one integer of 1 to 2^31-1 ([`MAX_ATTEMPT`]) per message: not an
/// array of one per message (`true`: the answer is refused whole), or one
/// whose second entry is no lease's attempt (`false`: that message alone is
/// left out, see tests/pull_refusal.rs).
fn bad_attempts() -> Vec<(&'static str, Value, bool)> {
    vec![
        ("null", json!(null), true),
        ("an object", json!({"0": 1}), true),
        ("a number", json!(1), true),
        ("one for two messages", json!([1]), true),
        ("three for two messages", json!([1, 2, 3]), true),
        ("none for two messages", json!([]), true),
        ("a zero", json!([1, 0]), false),
        ("a negative", json!([1, -1]), false),
        ("a fraction", json!([1, 1.5]), false),
        ("an integer as a float", json!([1, 2.0]), false),
        ("a string", json!([1, "2"]), false),
        ("a null", json!([1, null]), false),
        ("past 2^31-1", json!([1, 2_147_483_648u64]), false),
        ("past u32", json!([1, 4_294_967_296u64]), false),
        ("past 2^63-1", json!([1, 9_223_372_036_854_775_808u64]), false),
    ]
}

#[tokio::test]
async fn ws_receive_attempts_pairs_each_message_with_its_attempt() {
    let (url, _, task) = ws_answering(json!({"op": "messages", "messages": [msg(7), msg(9)], "attempts": [2, 1]})).await;
    let s = Session::connect(&url, "t", &[SUBJECT], raw_opts()).await.unwrap();
    let got = s.receive_attempts(SUBJECT, 10).await.unwrap();
    let got: Vec<(u64, u32)> = got.iter().map(|(m, a)| (m.sequence, *a)).collect();
    assert_eq!(got, vec![(7, 2), (9, 1)]);
    // Without attempts (a pubsub subject, a server that does not tell
    // them): 0 for each, and receive as before.
    end(s, task).await;
    let (url, _, task) = ws_answering(json!({"op": "messages", "messages": [msg(7)]})).await;
    let s = Session::connect(&url, "t", &[SUBJECT], raw_opts()).await.unwrap();
    let got = s.receive_attempts(SUBJECT, 10).await.unwrap();
    assert_eq!(got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>(), vec![(7, 0)]);
    assert_eq!(s.receive(SUBJECT, 10).await.unwrap().len(), 1);
    end(s, task).await;
}

#[tokio::test]
async fn ws_receive_attempts_refuses_attempts_not_one_positive_integer_per_message() {
    let mut wrong = Vec::new();
    for (name, attempts, whole) in bad_attempts() {
        let (url, _, task) = ws_answering(json!({"op": "messages", "messages": [msg(7), msg(9)], "attempts": attempts})).await;
        let s = Session::connect(&url, "t", &[SUBJECT], raw_opts()).await.unwrap();
        match s.receive_attempts(SUBJECT, 10).await {
            Err(e) if whole && e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => {}
            Ok(got) if !whole && got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>() == vec![(7, 1)] => {}
            Err(e) => wrong.push(format!("{name}: {e}")),
            Ok(got) => wrong.push(format!("{name}: taken as {:?}", got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>())),
        }
        end(s, task).await;
    }
    assert!(wrong.is_empty(), "not refused (the answer whole, or the entry alone):\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn ws_ack_and_nack_attempt_send_the_attempt() {
    let (url, frames, task) = ws_answering(json!({"op": "ok"})).await;
    let s = Session::connect(&url, "t", &[SUBJECT], raw_opts()).await.unwrap();
    s.ack_attempt(SUBJECT, "msg_7", 7, 2).await.unwrap();
    s.nack_attempt(SUBJECT, "msg_9", 9, 3, Some(Duration::from_millis(250))).await.unwrap();
    s.ack_sequence(SUBJECT, "msg_7", 7).await.unwrap();
    s.ack_attempt(SUBJECT, "msg_7", 0, 0).await.unwrap();
    let sent = common::frames_without_ids(&frames);
    assert_eq!(
        sent,
        vec![
            json!({"op": "ack", "subject": SUBJECT, "messageId": "msg_7", "sequence": 7, "attempt": 2}),
            json!({"op": "nack", "subject": SUBJECT, "messageId": "msg_9", "sequence": 9, "attempt": 3, "delayMs": 250}),
            // No attempt named: none sent (protocol v1).
            json!({"op": "ack", "subject": SUBJECT, "messageId": "msg_7", "sequence": 7}),
            json!({"op": "ack", "subject": SUBJECT, "messageId": "msg_7"}),
        ]
    );
    end(s, task).await;
}

#[tokio::test]
async fn ws_request_refuses_a_reply_to_another_request() {
    let reply = |corr: Option<&str>| {
        let mut m = json!({"id": "msg_reply", "subject": "rpc", "sequence": 3});
        if let Some(c) = corr {
            m["correlationId"] = json!(c);
        }
        json!({"op": "reply", "message": m})
    };
    let mine = Message { id: "msg_mine".into(), ..Message::new("rpc", "q", "ask") };
    for (name, corr) in [("another request's", Some("msg_other")), ("no correlationId", None)] {
        let (url, _, task) = ws_answering(reply(corr)).await;
        let s = Session::connect(&url, "t", &["rpc"], raw_opts()).await.unwrap();
        let e = s.request(&mine, Duration::from_secs(5)).await.expect_err(name);
        assert_eq!((e.code.as_str(), e.kind), ("BAD_FRAME", ErrorKind::Protocol), "{name}: {e}");
        end(s, task).await;
    }
    // The reply to the request sent is taken.
    let (url, _, task) = ws_answering(reply(Some("msg_mine"))).await;
    let s = Session::connect(&url, "t", &["rpc"], raw_opts()).await.unwrap();
    assert_eq!(s.request(&mine, Duration::from_secs(5)).await.unwrap().correlation_id, "msg_mine");
    end(s, task).await;
}

/// The attempts the three clients agree on (the Go client's range): a
/// receive answer's attempt is an integer of 1 to 2^31-1, and an ack or a
/// nack sends 0 as none and one of 1 to 2^31-1 as it is. Each row: the
/// attempt, whether a receive takes it, what an ack or a nack of it does
/// (`Some(n)`: sent as `n`; `None`: refused `INVALID_ARGUMENT`, nothing
/// sent). The Rust client leaves a message whose attempt it cannot take
/// out alone, as one it cannot take, and returns the others.
fn attempt_table() -> Vec<(u64, bool, Option<Option<u64>>)> {
    vec![
        (0, false, Some(None)),
        (1, true, Some(Some(1))),
        (2_147_483_647, true, Some(Some(2_147_483_647))),
        (2_147_483_648, false, None),
        (4_294_967_295, false, None),
    ]
}

#[tokio::test]
async fn the_attempt_limits_are_the_clients_agreed_table() {
    assert_eq!(MAX_ATTEMPT, 2_147_483_647, "2^31-1, the Go client's");
    let mut wrong = Vec::new();
    for (attempt, taken, sent) in attempt_table() {
        // A receive over WebSocket and over HTTP.
        let answer = json!({"messages": [msg(7), msg(9)], "attempts": [2, attempt]});
        let mut ws = answer.clone();
        ws["op"] = json!("messages");
        let (url, frames, task) = ws_answering(ws).await;
        let s = Session::connect(&url, "t", &[SUBJECT], raw_opts()).await.unwrap();
        let (http_url, seen) = http_answering("/receive ", answer).await;
        let h = HttpClient::new(&http_url, "t").with_contract("ctr_1");
        let got = [("ws", s.receive_attempts(SUBJECT, 10).await), ("http", h.receive_attempts(SUBJECT, 5, AckMode::Explicit).await)];
        for (t, r) in got {
            match (taken, r) {
                (true, Ok(ms)) if ms.iter().map(|(_, a)| u64::from(*a)).collect::<Vec<_>>() == vec![2, attempt] => {}
                (false, Ok(ms)) if ms.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>() == vec![(7, 2)] => {}
                (_, r) => wrong.push(format!(
                    "{t} receive of attempt {attempt}: {:?}",
                    r.map(|ms| ms.into_iter().map(|(_, a)| a).collect::<Vec<_>>())
                )),
            }
        }
        // An ack and a nack of it, over WebSocket and over HTTP.
        let a = u32::try_from(attempt).unwrap();
        frames.lock().unwrap().clear();
        seen.lock().unwrap().clear();
        let results = [
            s.ack_attempt(SUBJECT, "msg_9", 9, a).await,
            s.nack_attempt(SUBJECT, "msg_9", 9, a, None).await,
            h.ack_attempt(SUBJECT, "msg_9", 9, a).await,
            h.nack_attempt(SUBJECT, "msg_9", 9, a, None).await,
        ];
        let mut bodies: Vec<Value> = common::frames_without_ids(&frames).into_iter().filter(|f| f["op"] != "receive").collect();
        bodies.extend(seen.lock().unwrap().iter().map(|r| r.body.clone()));
        match sent {
            Some(want) => {
                let want = want.map_or(Value::Null, |n| json!(n));
                if results.iter().any(Result::is_err) || bodies.len() != 4 || bodies.iter().any(|b| b["attempt"] != want) {
                    wrong.push(format!("answer of attempt {attempt}: {results:?}, sent {bodies:?}"));
                }
            }
            None => {
                if !results.iter().all(|r| r.as_ref().is_err_and(|e| e.code == "INVALID_ARGUMENT")) || !bodies.is_empty() {
                    wrong.push(format!("answer of attempt {attempt}: {results:?}, sent {bodies:?}"));
                }
            }
        }
        end(s, task).await;
    }
    assert!(wrong.is_empty(), "not the agreed limits:\n{}", wrong.join("\n"));
}

// ---- HTTP ----

#[tokio::test]
async fn http_receive_attempts_pairs_each_message_with_its_attempt() {
    let (url, seen) = http_canned(200, json!({"messages": [msg(7), msg(9)], "attempts": [2, 1]})).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    let got = h.receive_attempts(SUBJECT, 5, AckMode::Explicit).await.unwrap();
    assert_eq!(got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>(), vec![(7, 2), (9, 1)]);
    assert_eq!(seen.lock().unwrap()[0].body, json!({"ack": "explicit", "max": 5}));
    // An automatic receive answers none: 0 for each.
    let (url, _) = http_canned(200, json!({"messages": [msg(7)]})).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    let got = h.receive_attempts(SUBJECT, 0, AckMode::Auto).await.unwrap();
    assert_eq!(got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>(), vec![(7, 0)]);
}

#[tokio::test]
async fn http_receive_attempts_refuses_attempts_not_one_positive_integer_per_message() {
    let mut wrong = Vec::new();
    for (name, attempts, whole) in bad_attempts() {
        let (url, _) = http_canned(200, json!({"messages": [msg(7), msg(9)], "attempts": attempts})).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_1");
        match h.receive_attempts(SUBJECT, 5, AckMode::Explicit).await {
            Err(e) if whole && e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => {}
            Ok(got) if !whole && got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>() == vec![(7, 1)] => {}
            Err(e) => wrong.push(format!("{name}: {e}")),
            Ok(got) => wrong.push(format!("{name}: taken as {:?}", got.iter().map(|(m, a)| (m.sequence, *a)).collect::<Vec<_>>())),
        }
    }
    assert!(wrong.is_empty(), "not refused (the answer whole, or the entry alone):\n{}", wrong.join("\n"));
}

#[tokio::test]
async fn http_ack_and_nack_attempt_send_the_attempt() {
    let (url, seen) = http_canned(200, json!({"ok": true})).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    h.ack_attempt(SUBJECT, "msg_7", 7, 2).await.unwrap();
    h.nack_attempt(SUBJECT, "msg_9", 9, 3, Some(Duration::from_millis(250))).await.unwrap();
    h.ack_sequence(SUBJECT, "msg_7", 7).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen[0].head.starts_with("POST /v1/subjects/notifications.send/ack HTTP/1.1\r\n"), "{}", seen[0].head);
    assert!(seen[1].head.starts_with("POST /v1/subjects/notifications.send/nack HTTP/1.1\r\n"), "{}", seen[1].head);
    let bodies: Vec<Value> = seen.iter().map(|r| r.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![
            json!({"messageId": "msg_7", "sequence": 7, "attempt": 2}),
            json!({"messageId": "msg_9", "sequence": 9, "attempt": 3, "delayMs": 250}),
            json!({"messageId": "msg_7", "sequence": 7}),
        ]
    );
}

#[tokio::test]
async fn http_region_is_sent_on_every_call() {
    let (url, seen) = http_canned(200, json!({"messages": []})).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1").with_region("eu");
    h.receive(SUBJECT, 1, AckMode::Auto).await.unwrap();
    h.call("GET", "/v1/subjects", None).await.unwrap();
    // Without one, none (the server's region).
    HttpClient::new(&url, "t").with_contract("ctr_1").receive(SUBJECT, 1, AckMode::Auto).await.unwrap();
    let heads: Vec<String> = seen.lock().unwrap().iter().map(|r| r.head.clone()).collect();
    assert!(heads[0].contains("\r\nX-Pigeon-Region: eu\r\n"), "{}", heads[0]);
    assert!(heads[1].contains("\r\nX-Pigeon-Region: eu\r\n"), "{}", heads[1]);
    assert!(!heads[2].to_ascii_lowercase().contains("x-pigeon-region"), "{}", heads[2]);
    // A region that would add a header, or none at all: nothing sent.
    for bad in ["eu\r\nX-Evil: 1", "", "e u"] {
        let e = HttpClient::new(&url, "t").with_region(bad).health().await.expect_err(bad);
        assert_eq!(e.code, "INVALID_ARGUMENT", "{bad:?}: {e}");
    }
    assert_eq!(seen.lock().unwrap().len(), 3, "a bad region sent nothing");
}

#[tokio::test]
async fn http_region_is_the_contracts_and_the_default_of_a_publish() {
    let mut server = common::Server::start("");
    for (region, want) in [(None, "uk"), (Some("eu"), "eu")] {
        let mut h = common::http(&server, "orders-token");
        if let Some(r) = region {
            h = h.with_region(r);
        }
        let k = h.negotiate(&[SUBJECT], None).await.unwrap();
        assert_eq!(k.region, want);
        let d = h.publish(&common::notification("region")).await.unwrap();
        assert_eq!((d.status, d.message.region.as_str()), (Status::Accepted, want), "{region:?}");
    }
    // A message naming another region than the contract's is refused.
    let mut h = common::http(&server, "orders-token").with_region("eu");
    h.negotiate(&[SUBJECT], None).await.unwrap();
    let e = h.publish(&common::notification("region").with_region("uk")).await.expect_err("another region");
    assert_eq!((e.code.as_str(), e.status), ("REGION_DENIED", 403), "{e}");
    server.stop();
}

#[tokio::test]
async fn http_request_refuses_a_reply_to_another_request() {
    // Echoes the request's id as the reply's correlationId, or names another.
    let reply = |corr: Option<String>| {
        let mut m = json!({"id": "msg_reply", "subject": "rpc", "sequence": 3});
        if let Some(c) = corr {
            m["correlationId"] = json!(c);
        }
        json!({"status": "replied", "message": m}).to_string()
    };
    let echo = move |_, r: &Seen| Some(HttpReply::new(200, reply(r.body["message"]["id"].as_str().map(str::to_string))));
    let (url, seen) = http_server(echo).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    // A request without an id is sent with one, which its reply names.
    let got = h.request(&Message::new("rpc", "q", "ask"), Duration::from_secs(5)).await.unwrap();
    let sent = seen.lock().unwrap()[0].body["message"]["id"].as_str().unwrap().to_string();
    assert!(sent.starts_with("msg_"), "{sent}");
    assert_eq!(got.correlation_id, sent);
    let mine = Message { id: "msg_mine".into(), ..Message::new("rpc", "q", "ask") };
    assert_eq!(h.request(&mine, Duration::from_secs(5)).await.unwrap().correlation_id, "msg_mine");

    let (url, _) = http_server(move |_, _| Some(HttpReply::new(200, reply(Some("msg_other".into()))))).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    for (name, m) in [("a request of its own id", mine.clone()), ("a request without an id", Message::new("rpc", "q", "ask"))] {
        let e = h.request(&m, Duration::from_secs(5)).await.expect_err(name);
        assert_eq!((e.code.as_str(), e.kind), ("BAD_FRAME", ErrorKind::Protocol), "{name}: {e}");
    }
    let (url, _) = http_server(move |_, _| Some(HttpReply::new(200, reply(None)))).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    let e = h.request(&mine, Duration::from_secs(5)).await.expect_err("no correlationId");
    assert_eq!((e.code.as_str(), e.kind), ("BAD_FRAME", ErrorKind::Protocol), "{e}");
    // With an idempotency key the request may repeat an earlier one of
    // another id, whose reply it is: taken.
    let (url, seen) = http_server(move |_, _| Some(HttpReply::new(200, reply(Some("msg_first".into()))))).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    let keyed = Message::new("rpc", "q", "ask").with_idempotency_key("k-1");
    assert_eq!(h.request(&keyed, Duration::from_secs(5)).await.unwrap().correlation_id, "msg_first");
    assert!(seen.lock().unwrap()[0].body["message"].get("id").is_none(), "no id drawn for a keyed request");
}
