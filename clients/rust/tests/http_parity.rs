//! The typed HTTP API of `http::HttpClient` (docs/http.md), as the Python
//! and TypeScript HTTP clients offer it: health, negotiate, read and
//! revoke a contract, publish, request/reply, receive and settle, end to
//! end against a real `pigeon serve`; and the answers of a hostile server
//! (a missing field, a wrong type, a sequence that is not an exact
//! integer) refused as `BAD_FRAME` rather than read with defaults.

mod common;

use common::http_canned;
use pigeon_client::http::{AckMode, HttpClient};
use pigeon_client::{ConnectOptions, ErrorKind, Message, Session, Status, SubscribeOptions};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WORKER: &str = "spiffe://clients/ns/test/sa/http-worker";
const RESPONDER: &str = "spiffe://clients/ns/test/sa/http-responder";
const JOBS: &str = "jobs.http";
const RPC: &str = "rpc.http";

/// A catalog of jobs.http (a work queue the worker publishes to, receives
/// and acks; a `secret` in the data is refused and quarantined) and
/// rpc.http (request/reply: the worker asks, the responder answers), with
/// both tokens.
fn catalog() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pigeon-rs-http-{}", common::nonce()));
    std::fs::create_dir_all(d.join("subjects")).unwrap();
    std::fs::create_dir_all(d.join("schemas")).unwrap();
    let allow = |who: &str| json!([{"effect": "allow", "principals": [who]}]);
    let jobs = json!({
        "name": JOBS, "version": "v1", "mode": "workQueue", "intents": ["job"],
        "data": {"forbiddenFields": ["secret"]},
        "quarantine": {"onPolicyViolation": true},
        "policy": {"publish": allow(WORKER), "receive": allow(WORKER), "ack": allow(WORKER)},
    });
    let rpc = json!({
        "name": RPC, "version": "v1", "mode": "requestReply", "intents": ["ask"],
        "policy": {"publish": allow(WORKER), "receive": allow(RESPONDER), "ack": allow(RESPONDER)},
    });
    for s in [&jobs, &rpc] {
        std::fs::write(d.join("subjects").join(format!("{}.json", s["name"].as_str().unwrap())), s.to_string()).unwrap();
    }
    let tokens = format!(
        "tokens:\n  - {{ token: worker-token, principal: \"{WORKER}\" }}\n  - {{ token: responder-token, principal: \"{RESPONDER}\" }}\n"
    );
    std::fs::write(d.join("tokens.yaml"), tokens).unwrap();
    d
}

fn job(n: u64) -> Message {
    Message::new(JOBS, "job", "job").with_idempotency_key(format!("job-{}", common::nonce())).with_data(json!({"n": n}))
}

/// Receives (explicit) until a message comes, at most `within`: a message
/// published is at once in the log, but this bounds a slow machine.
async fn receive_one(h: &HttpClient, subject: &str, within: Duration) -> Vec<Message> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let got = h.receive(subject, 10, AckMode::Explicit).await.unwrap();
        if !got.is_empty() || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn negotiate_publish_receive_and_ack_sequence_over_http() {
    let dir = catalog();
    let mut server = common::Server::start_catalog(&dir);
    let mut h = common::http(&server, "worker-token");

    let health = h.health().await.unwrap();
    assert!(health.ok);
    assert_eq!(health.service, "pigeon");

    assert_eq!(h.contract_id(), None);
    let k = h.negotiate(&[JOBS], Some(Duration::from_secs(600))).await.unwrap();
    assert_eq!(h.contract_id(), Some(k.id.as_str()), "the client acts under the contract negotiated");
    assert_eq!(k.principal, WORKER);
    let mut ops = k.operations(JOBS).to_vec();
    ops.sort();
    assert_eq!(ops, ["ack", "publish", "receive"]);
    let left = k.expires_at_ms().unwrap() - pigeon_client::time::now_ms();
    assert!(left > 0 && left <= 600_000, "a 10-minute contract expires in {left} ms");
    let read = h.get_contract(&k.id).await.unwrap();
    assert_eq!((read.id.as_str(), read.subjects.len()), (k.id.as_str(), 1));

    // Publish, receive explicit, settle by id and sequence.
    let m = job(1);
    let d = h.publish(&m).await.unwrap();
    assert_eq!(d.status, Status::Accepted);
    assert!(d.sequence() > 0 && !d.id().is_empty(), "{d:?}");
    assert_eq!(d.message.contract_id, k.id);
    // The same idempotency key again: the original.
    let again = h.publish(&m).await.unwrap();
    assert_eq!((again.status, again.id(), again.sequence()), (Status::Duplicate, d.id(), d.sequence()));

    let got = receive_one(&h, JOBS, Duration::from_secs(5)).await;
    assert_eq!(got.iter().map(|m| (m.id.as_str(), m.sequence)).collect::<Vec<_>>(), vec![(d.id(), d.sequence())]);
    assert_eq!(got[0].data, json!({"n": 1}));
    h.ack_sequence(JOBS, &got[0].id, got[0].sequence).await.unwrap();
    // Acked: a nack now is a no-op (one of a message still leased would
    // make it due at once, as below), and nothing comes back, here or in
    // the exact receives below.
    h.nack_sequence(JOBS, &got[0].id, got[0].sequence, Some(Duration::ZERO)).await.unwrap();
    assert!(h.receive(JOBS, 10, AckMode::Explicit).await.unwrap().is_empty(), "acked, it does not come back");

    // A nacked message comes back, with the same sequence.
    let d2 = h.publish(&job(2)).await.unwrap();
    let got = receive_one(&h, JOBS, Duration::from_secs(5)).await;
    assert_eq!((got.len(), got[0].sequence), (1, d2.sequence()));
    h.nack_sequence(JOBS, &got[0].id, got[0].sequence, Some(Duration::ZERO)).await.unwrap();
    let back = receive_one(&h, JOBS, Duration::from_secs(5)).await;
    assert_eq!(back.iter().map(|m| m.sequence).collect::<Vec<_>>(), vec![d2.sequence()]);
    h.ack_sequence(JOBS, &back[0].id, back[0].sequence).await.unwrap();

    // An automatic receive settles what it returns.
    let d3 = h.publish(&job(3)).await.unwrap();
    let got = h.receive(JOBS, 0, AckMode::Auto).await.unwrap();
    assert_eq!(got.iter().map(|m| m.sequence).collect::<Vec<_>>(), vec![d3.sequence()]);
    assert!(h.receive(JOBS, 10, AckMode::Explicit).await.unwrap().is_empty(), "settled by the receive");

    // Revoked: every later use of the contract is refused.
    h.revoke().await.unwrap();
    let e = h.publish(&job(4)).await.expect_err("revoked");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("CONTRACT_REVOKED", 403, ErrorKind::Contract), "{e}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn request_reply_over_http_with_a_websocket_responder() {
    let dir = catalog();
    let mut server = common::Server::start_catalog(&dir);
    let opts = ConnectOptions::default().keepalive(None).auto_renew(false).reconnect(false);
    let responder = Session::connect(&server.url(), "responder-token", &[RPC], opts).await.unwrap();
    let r2 = responder.clone();
    let sub = responder
        .subscribe(RPC, SubscribeOptions::default().group("responders"), move |d| {
            let r = r2.clone();
            async move {
                let reply =
                    Message::new(RPC, "answer", "ask").with_correlation_id(d.message.id.clone()).with_data(json!({"echo": d.message.data}));
                let _ = r.publish(&reply).await;
                Ok(())
            }
        })
        .await
        .unwrap();

    let mut h = common::http(&server, "worker-token");
    h.negotiate(&[RPC], None).await.unwrap();
    let mut ask = Message::new(RPC, "question", "ask").with_data(json!({"q": 42}));
    ask.id = pigeon_client::crypto::new_message_id();
    let reply = h.request(&ask, Duration::from_secs(10)).await.unwrap();
    assert_eq!(reply.correlation_id, ask.id);
    assert_eq!(reply.data, json!({"echo": {"q": 42}}));

    sub.unsubscribe().await.unwrap();
    // No responder: the server's REQUEST_TIMEOUT, typed, after the wait asked for.
    let e = h.request(&Message::new(RPC, "question", "ask"), Duration::from_millis(300)).await.expect_err("no reply");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("REQUEST_TIMEOUT", 504, ErrorKind::Timeout), "{e}");
    // The call waits for the server's wait however short the client's
    // timeout: the server's answer (kind Timeout), not the client's
    // bound (kind Transport) cutting it at 100 ms.
    let short = h.clone().with_timeout(Duration::from_millis(100));
    let e = short.request(&Message::new(RPC, "question", "ask"), Duration::from_millis(600)).await.expect_err("no reply");
    assert_eq!((e.code.as_str(), e.kind), ("REQUEST_TIMEOUT", ErrorKind::Timeout), "{e}");
    let _ = tokio::time::timeout(Duration::from_secs(3), responder.close()).await;
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn http_refusals_are_typed_with_their_code_and_status() {
    let dir = catalog();
    let mut server = common::Server::start_catalog(&dir);
    let plain = common::http(&server, "worker-token");

    // Without a contract: refused before anything is sent.
    for e in [
        plain.publish(&job(1)).await.unwrap_err(),
        plain.receive(JOBS, 1, AckMode::Auto).await.unwrap_err(),
        plain.request(&Message::new(RPC, "q", "ask"), Duration::from_secs(1)).await.unwrap_err(),
        plain.revoke().await.unwrap_err(),
    ] {
        assert_eq!((e.code.as_str(), e.kind), ("CONTRACT_REQUIRED", ErrorKind::Contract), "{e}");
    }

    // An unknown contract.
    let ghost = plain.clone().with_contract("ctr_unknown");
    let e = ghost.publish(&job(1)).await.expect_err("unknown contract");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("CONTRACT_NOT_FOUND", 403, ErrorKind::Contract), "{e}");
    let e = ghost.receive(JOBS, 1, AckMode::Explicit).await.expect_err("unknown contract");
    assert_eq!((e.code.as_str(), e.status), ("CONTRACT_NOT_FOUND", 403), "{e}");
    let e = plain.get_contract("ctr_unknown").await.expect_err("unknown contract");
    assert_eq!((e.code.as_str(), e.status), ("CONTRACT_NOT_FOUND", 403), "{e}");

    // Negotiation refusals leave the client without a contract.
    let mut h = plain.clone();
    let e = h.negotiate(&["no.such.subject"], None).await.expect_err("unknown subject");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("SUBJECT_NOT_FOUND", 404, ErrorKind::NotFound), "{e}");
    let e = h.negotiate(&[JOBS], Some(Duration::from_secs(25 * 3600))).await.expect_err("past the maximum");
    assert_eq!((e.code.as_str(), e.status), ("INVALID_ARGUMENT", 400), "{e}");
    assert_eq!(h.contract_id(), None);

    // A subject the contract does not name.
    h.negotiate(&[JOBS], None).await.unwrap();
    let e = h.publish(&Message::new(RPC, "question", "ask")).await.expect_err("not in the contract");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("SUBJECT_NOT_IN_CONTRACT", 403, ErrorKind::Contract), "{e}");
    let e = h.receive(RPC, 1, AckMode::Auto).await.expect_err("not in the contract");
    assert_eq!((e.code.as_str(), e.status), ("SUBJECT_NOT_IN_CONTRACT", 403), "{e}");

    // A message the gates deny: its code, status, gate and quarantine record.
    let e = h.publish(&job(1).with_data(json!({"n": 1, "secret": "s3cr3t"}))).await.expect_err("denied");
    assert_eq!((e.code.as_str(), e.status, e.kind), ("SENSITIVE_FIELD_DENIED", 422, ErrorKind::Quarantined), "{e}");
    assert!(e.is_denied());
    assert_eq!(e.gate(), Some("forbidden-fields"), "{e:?}");
    assert!(e.quarantine_id().is_some_and(|q| !q.is_empty()), "{e:?}");
    // An intent the subject does not declare.
    let e = h.publish(&Message::new(JOBS, "job", "other").with_data(json!({}))).await.expect_err("denied");
    assert_eq!((e.code.as_str(), e.status), ("INTENT_DENIED", 403), "{e}");
    assert!(e.is_denied(), "{e:?}");

    // Another principal's contract.
    let mut other = common::http(&server, "responder-token");
    let theirs = other.negotiate(&[RPC], None).await.unwrap();
    let e = h.get_contract(&theirs.id).await.expect_err("not the holder");
    assert_eq!((e.code.as_str(), e.status), ("CONTRACT_PRINCIPAL_MISMATCH", 403), "{e}");
    let e = h.revoke_contract(&theirs.id).await.expect_err("not the holder");
    assert_eq!((e.code.as_str(), e.status), ("CONTRACT_PRINCIPAL_MISMATCH", 403), "{e}");
    other.get_contract(&theirs.id).await.expect("still in force");

    // An id that would add a header or name another route: nothing sent.
    let e = h.get_contract("..").await.expect_err("a dot segment");
    assert_eq!(e.code, "INVALID_ARGUMENT");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- a hostile server ----

fn message(seq: &str) -> String {
    format!(r#"{{"id":"msg_1","subject":"{JOBS}","type":"job","sequence":{seq},"data":{{}}}}"#)
}

fn contract(id: &str) -> String {
    format!(r#"{{"contract":{{"id":{id},"principal":"p","subjects":[],"expiresAt":"2099-01-01T00:00:00Z"}}}}"#)
}

#[tokio::test]
async fn sequences_are_read_exactly_as_u64() {
    for seq in ["1", "9007199254740993", "18446744073709551615"] {
        let (url, seen) = http_canned(202, &format!(r#"{{"status":"accepted","message":{}}}"#, message(seq))).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_1");
        let d = h.publish(&job(1)).await.unwrap();
        assert_eq!(d.sequence().to_string(), seq, "not rounded through a double");
        let (url, _) = http_canned(200, &format!(r#"{{"messages":[{}]}}"#, message(seq))).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_1");
        let got = h.receive(JOBS, 5, AckMode::Explicit).await.unwrap();
        assert_eq!(got[0].sequence.to_string(), seq);
        let req = &seen.lock().unwrap()[0];
        assert!(req.head.starts_with("POST /v1/messages HTTP/1.1\r\n"), "{}", req.head);
        assert!(req.head.contains("X-Pigeon-Contract: ctr_1\r\n"), "{}", req.head);
        assert_eq!(req.body["subject"], JOBS);
    }
}

#[tokio::test]
async fn the_typed_calls_send_their_routes_bodies() {
    // A receive: the ack mode, and max when one is given.
    let (url, seen) = http_canned(200, r#"{"messages":[]}"#).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    assert!(h.receive("a b", 5, AckMode::Explicit).await.unwrap().is_empty());
    assert!(h.receive("a b", 0, AckMode::Auto).await.unwrap().is_empty());
    let seen = seen.lock().unwrap().clone();
    assert!(seen[0].head.starts_with("POST /v1/subjects/a%20b/receive HTTP/1.1\r\n"), "{}", seen[0].head);
    assert!(seen[0].head.contains("X-Pigeon-Contract: ctr_1\r\n"), "{}", seen[0].head);
    assert_eq!(seen[0].body, json!({"ack": "explicit", "max": 5}));
    assert_eq!(seen[1].body, json!({"ack": "auto"}));

    // A request: timeoutMs in whole milliseconds rounded up, never past
    // what the server reads (a longer one would be INVALID_ARGUMENT).
    // (An idempotency key: the reply may answer an earlier request of
    // the key, so the canned reply's correlationId is taken.)
    let reply = r#"{"id":"msg_2","subject":"rpc.http","sequence":2,"correlationId":"msg_1"}"#;
    let (url, seen) = http_canned(200, &format!(r#"{{"status":"replied","message":{reply}}}"#)).await;
    let h = HttpClient::new(&url, "t").with_contract("ctr_1");
    for t in [Duration::from_micros(1500), Duration::from_millis(250), Duration::MAX] {
        h.request(&Message::new(RPC, "q", "ask").with_idempotency_key("k-1"), t).await.unwrap();
    }
    let ms: Vec<Value> = seen.lock().unwrap().iter().map(|r| r.body["timeoutMs"].clone()).collect();
    assert_eq!(ms, vec![json!(2), json!(250), json!(i64::MAX / 1_000_000)]);

    // A negotiation: the subjects and ttlMs, rounded up; no contract header.
    let (url, seen) = http_canned(201, &contract(r#""ctr_9""#)).await;
    let mut h = HttpClient::new(&url, "t");
    h.negotiate(&[JOBS, RPC], Some(Duration::from_micros(10))).await.unwrap();
    assert_eq!(h.contract_id(), Some("ctr_9"));
    h.negotiate(&[JOBS], None).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen[0].head.starts_with("POST /v1/contracts HTTP/1.1\r\n"), "{}", seen[0].head);
    assert!(!seen[0].head.to_ascii_lowercase().contains("x-pigeon-contract"), "{}", seen[0].head);
    assert_eq!(seen[0].body, json!({"subjects": [JOBS, RPC], "ttlMs": 1}));
    assert_eq!(seen[1].body, json!({"subjects": [JOBS]}));
    // The second negotiation named the contract of the first: not sent.
    assert!(!seen[1].head.to_ascii_lowercase().contains("x-pigeon-contract"), "{}", seen[1].head);
}

#[tokio::test]
async fn malformed_answers_are_refused_rather_than_read_with_defaults() {
    type Call = fn(HttpClient) -> std::pin::Pin<Box<dyn std::future::Future<Output = pigeon_client::Result<()>> + Send>>;
    let publish: Call = |h| Box::pin(async move { h.publish(&job(1)).await.map(drop) });
    // A message of a receive answer that is no broker's is refused alone,
    // its BAD_FRAME to on_error (see tests/pull_refusal.rs): taken as the
    // call's here; the answer itself is refused whole.
    let receive: Call = |h| {
        Box::pin(async move {
            let refused = Arc::new(Mutex::new(None));
            let r = refused.clone();
            let h = h.with_on_error(move |e| {
                r.lock().unwrap().get_or_insert(e);
            });
            h.receive(JOBS, 1, AckMode::Explicit).await?;
            let first = refused.lock().unwrap().take();
            first.map_or(Ok(()), Err)
        })
    };
    let request: Call = |h| Box::pin(async move { h.request(&Message::new(RPC, "q", "ask"), Duration::from_secs(1)).await.map(drop) });
    // Keyed: a reply naming another request's id is taken, so only its sequence refuses it.
    let request_keyed: Call = |h| {
        Box::pin(async move { h.request(&Message::new(RPC, "q", "ask").with_idempotency_key("k"), Duration::from_secs(1)).await.map(drop) })
    };
    let negotiate: Call = |mut h| Box::pin(async move { h.negotiate(&[JOBS], None).await.map(drop) });
    let get: Call = |h| Box::pin(async move { h.get_contract("ctr_1").await.map(drop) });
    let revoke: Call = |h| Box::pin(async move { h.revoke().await });
    let health: Call = |h| Box::pin(async move { h.health().await.map(drop) });
    let accepted = |m: String| format!(r#"{{"status":"accepted","message":{m}}}"#);
    let received = |m: String| format!(r#"{{"messages":[{m}]}}"#);
    let replied =
        |m: String| format!(r#"{{"status":"replied","message":{}}}"#, m.replace(r#""data""#, r#""correlationId":"msg_0","data""#));
    let cases: Vec<(&str, Call, u16, String)> = vec![
        ("publish: a fractional sequence", publish, 202, accepted(message("1.0"))),
        ("publish: an exponent", publish, 202, accepted(message("1e2"))),
        ("publish: a negative sequence", publish, 202, accepted(message("-1"))),
        ("publish: a sequence past u64", publish, 202, accepted(message("18446744073709551616"))),
        ("publish: a string sequence", publish, 202, accepted(message(r#""7""#))),
        ("publish: a null sequence", publish, 202, accepted(message("null"))),
        ("publish: a zero sequence", publish, 202, accepted(message("0"))),
        ("publish: no sequence", publish, 202, accepted(r#"{"id":"msg_1","subject":"jobs.http"}"#.into())),
        ("publish: no id", publish, 202, accepted(r#"{"subject":"jobs.http","sequence":1}"#.into())),
        ("publish: an unknown status", publish, 202, format!(r#"{{"status":"queued","message":{}}}"#, message("1"))),
        ("publish: no status", publish, 202, format!(r#"{{"message":{}}}"#, message("1"))),
        ("publish: no message", publish, 202, r#"{"status":"accepted"}"#.into()),
        ("publish: a mistyped field", publish, 202, accepted(r#"{"id":"m","sequence":1,"subject":7}"#.into())),
        ("publish: an empty body", publish, 202, String::new()),
        ("publish: an array", publish, 202, "[]".into()),
        ("receive: no messages", receive, 200, "{}".into()),
        ("receive: messages null", receive, 200, r#"{"messages":null}"#.into()),
        ("receive: messages not an array", receive, 200, r#"{"messages":{}}"#.into()),
        ("receive: a fractional sequence", receive, 200, received(message("2.5"))),
        ("receive: a zero sequence", receive, 200, received(message("0"))),
        ("receive: no sequence", receive, 200, received(r#"{"id":"msg_1"}"#.into())),
        ("receive: a message not an object", receive, 200, r#"{"messages":[1]}"#.into()),
        ("request: no status", request, 200, format!(r#"{{"message":{}}}"#, message("1"))),
        ("request: another status", request, 200, format!(r#"{{"status":"accepted","message":{}}}"#, message("1"))),
        ("request: no message", request, 200, r#"{"status":"replied"}"#.into()),
        ("request: a message not an object", request, 200, r#"{"status":"replied","message":"hi"}"#.into()),
        ("request: a zero sequence", request_keyed, 200, replied(message("0"))),
        ("negotiate: no contract", negotiate, 201, "{}".into()),
        ("negotiate: an id that adds a header", negotiate, 201, contract(r#""c\r\nX-Evil: 1""#)),
        ("negotiate: an empty id", negotiate, 201, contract(r#""""#)),
        ("negotiate: a numeric id", negotiate, 201, contract("7")),
        ("negotiate: no subjects", negotiate, 201, r#"{"contract":{"id":"c","expiresAt":"2099-01-01T00:00:00Z"}}"#.into()),
        ("negotiate: no expiry", negotiate, 201, r#"{"contract":{"id":"c","subjects":[]}}"#.into()),
        ("get_contract: no contract", get, 200, r#"{"id":"ctr_1"}"#.into()),
        ("revoke: not revoked", revoke, 200, r#"{"id":"ctr_1","revoked":false}"#.into()),
        ("revoke: another contract", revoke, 200, r#"{"id":"ctr_2","revoked":true}"#.into()),
        ("revoke: an empty body", revoke, 200, String::new()),
        ("health: no ok", health, 200, r#"{"service":"pigeon"}"#.into()),
        ("health: ok a string", health, 200, r#"{"ok":"true","service":"pigeon"}"#.into()),
    ];
    // Every case run, the ones that fail listed together.
    let mut wrong = Vec::new();
    for (name, call, status, body) in cases {
        let (url, _) = http_canned(status, &body).await;
        let h = HttpClient::new(&url, "t").with_contract("ctr_1");
        match call(h).await {
            Err(e) if e.code == "BAD_FRAME" && e.kind == ErrorKind::Protocol => {}
            Err(e) => wrong.push(format!("{name}: {e}")),
            Ok(()) => wrong.push(format!("{name}: taken")),
        }
    }
    assert!(wrong.is_empty(), "not refused as BAD_FRAME:\n{}", wrong.join("\n"));
    // The keyed reply of a sequence of 1 is taken: the zero alone refused it.
    let (url, _) = http_canned(200, &replied(message("1"))).await;
    request_keyed(HttpClient::new(&url, "t").with_contract("ctr_1")).await.unwrap();
    // So is one without a sequence, as the broker sends every reply: a
    // reply never enters the subject's log.
    let (url, _) = http_canned(200, &replied(format!(r#"{{"id":"msg_1","subject":"{JOBS}","type":"job","data":{{}}}}"#))).await;
    request_keyed(HttpClient::new(&url, "t").with_contract("ctr_1")).await.unwrap();
    // And one whose sequence is null, as the Go, TypeScript and Python
    // clients take it (it was refused as a message that does not decode).
    let (url, _) =
        http_canned(200, &replied(format!(r#"{{"id":"msg_1","subject":"{JOBS}","type":"job","sequence":null,"data":{{}}}}"#))).await;
    request_keyed(HttpClient::new(&url, "t").with_contract("ctr_1")).await.unwrap();
    // A negotiation refused as malformed leaves the contract held.
    let (url, _) = http_canned(201, &contract(r#""c\r\nX-Evil: 1""#)).await;
    let mut h = HttpClient::new(&url, "t").with_contract("ctr_1");
    h.negotiate(&[JOBS], None).await.expect_err("a bad id");
    assert_eq!(h.contract_id(), Some("ctr_1"));
    // The server's error with its code and status, whatever the route.
    let (url, _) = http_canned(422, r#"{"error":{"code":"SCHEMA_INVALID","message":"no","details":{"gate":"schema"}}}"#).await;
    let e = HttpClient::new(&url, "t").with_contract("ctr_1").publish(&job(1)).await.expect_err("refused");
    assert_eq!((e.code.as_str(), e.status, e.gate()), ("SCHEMA_INVALID", 422, Some("schema")), "{e}");
}
