//! Brief publish answers (docs/protocol.md, "Brief answers"): the session
//! asks for them and puts the data it sent back, so that a publish's
//! decision carries the very message a subscriber receives.
//!
//! The subjects of the conformance catalog all have schemas, so the tests
//! against a real server start one of their own, whose catalog has one
//! subject without a schema, which takes any data. The frames themselves
//! are checked against a raw WebSocket endpoint the test runs.

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use pigeon_client::{ConnectOptions, Decision, Message, Session, Status, SubscribeOptions, Subscription};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WRITER: &str = "spiffe://clients/ns/test/sa/writer";
const SUBJECT: &str = "notes.any";

/// A catalog of notes.any (pub/sub, no schema) and the writer's token.
fn notes_catalog() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pigeon-rs-brief-{}", nonce()));
    std::fs::create_dir_all(dir.join("subjects")).unwrap();
    std::fs::create_dir_all(dir.join("schemas")).unwrap();
    let allow = json!([{"effect": "allow", "principals": [WRITER]}]);
    let subject = json!({
        "name": SUBJECT, "version": "v1", "mode": "pubsub", "intents": ["note"],
        "policy": {"publish": allow, "receive": allow, "ack": allow},
    });
    std::fs::write(dir.join("subjects").join(format!("{SUBJECT}.json")), subject.to_string()).unwrap();
    std::fs::write(dir.join("tokens.yaml"), format!("tokens:\n  - {{ token: writer-token, principal: \"{WRITER}\" }}\n")).unwrap();
    dir
}

fn note(data: Value) -> Message {
    Message::new(SUBJECT, "note", "note").with_data(data)
}

/// The data shapes; null is no data (Message leaves it out, and the server
/// keeps {}).
fn shapes() -> Vec<(&'static str, Value)> {
    vec![
        ("an object", json!({"text": "hi", "n": [1, 2.5, -3e-7, {"x": null}], "ok": true})),
        ("escapes and non-ASCII", json!({"text": "café \"q\" \\ ✓ 😀 \n\t\u{1} </script>", "nested": {"ключ": ["ü", {"\u{2028}": ""}]}})),
        ("an empty object", json!({})),
        ("no data", Value::Null),
        ("a string", json!("just text")),
        ("numbers", json!([1.5e300, 0.30000000000000004, 2.638344616030823e-256, -0.0, u64::MAX, i64::MIN])),
        ("an array", json!([{}, [], ""])),
    ]
}

/// The next delivery of `sub`, acknowledged.
async fn next(sub: &mut Subscription) -> Message {
    let d = tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("a delivery").expect("the subscription").unwrap();
    d.ack().await.unwrap();
    d.message
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn brief_answers_real_server() {
    let catalog = notes_catalog();
    let srv = Server::start_catalog(&catalog);
    runtime().block_on(async {
        let s = connect(&srv, "writer-token", &[SUBJECT]).await;
        let mut sub = s.subscribe_stream(SUBJECT, SubscribeOptions::default()).await.unwrap();

        // A publish's decision is the message delivered, whatever its data.
        for (name, data) in shapes() {
            let d = s.publish(&note(data.clone())).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(d.status, Status::Accepted, "{name}");
            let got = next(&mut sub).await;
            assert_eq!(d.message, got, "{name}");
            let want = if data.is_null() { json!({}) } else { data };
            assert_eq!(d.message.data, want, "{name}");
        }
        // The same for publishes queued together, which share frames.
        let mut pending = Vec::new();
        for (_, data) in shapes() {
            pending.push(s.publish_async(&note(data)).await.unwrap());
        }
        let mut ds: Vec<Decision> = Vec::new();
        for p in pending {
            ds.push(p.await.unwrap());
        }
        for ((name, _), d) in shapes().into_iter().zip(&ds) {
            assert_eq!(d.status, Status::Accepted, "{name}");
            assert_eq!(d.message, next(&mut sub).await, "queued: {name}");
        }

        // A duplicate answers with the original's data, not the data sent.
        let key = format!("dup-{}", nonce());
        let first = s.publish(&note(json!({"v": 1, "text": "ü"})).with_idempotency_key(&key)).await.unwrap();
        assert_eq!(first.status, Status::Accepted);
        assert_eq!(first.message, next(&mut sub).await);
        let again = s.publish(&note(json!({"v": 2})).with_idempotency_key(&key)).await.unwrap();
        assert_eq!(again.status, Status::Duplicate);
        assert_eq!(again.message, first.message);
        // Queued together: a duplicate, a message without data and its duplicate.
        let key2 = format!("dup-{}", nonce());
        let mut pending = Vec::new();
        for m in [
            note(json!({"v": 3})).with_idempotency_key(&key),
            note(Value::Null).with_idempotency_key(&key2),
            note(json!({"v": 4})).with_idempotency_key(&key2),
        ] {
            pending.push(s.publish_async(&m).await.unwrap());
        }
        let mut ds = Vec::new();
        for p in pending {
            ds.push(p.await.unwrap());
        }
        assert_eq!((ds[0].status, &ds[0].message), (Status::Duplicate, &first.message));
        assert_eq!((ds[1].status, &ds[1].message.data), (Status::Accepted, &json!({})));
        assert_eq!(ds[1].message, next(&mut sub).await);
        assert_eq!((ds[2].status, &ds[2].message), (Status::Duplicate, &ds[1].message));

        sub.unsubscribe().await.unwrap();
        s.close().await.unwrap();
    });
    drop(srv);
    let _ = std::fs::remove_dir_all(catalog);
}

/// A raw endpoint that plays the server: it answers negotiate, publish and
/// publish_batch and keeps the frames. As a current server (`full` false)
/// it leaves the data out of an accepted message when the frame asks for
/// it; as a server that ignores brief it answers with data of its own,
/// which the session must keep. A message whose idempotencyKey is "dup" is
/// a duplicate, with the original's data.
async fn raw_endpoint(full: bool) -> (u16, Arc<Mutex<Vec<Value>>>) {
    use tokio_tungstenite::tungstenite::Message as W;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let frames: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = frames.clone();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let mut n = 0;
        let mut decide = |f: &Value, m: &Value| {
            n += 1;
            let mut message = m.clone();
            message["id"] = json!(format!("msg_{n}"));
            message["source"] = json!("spiffe://raw");
            message["sequence"] = json!(n);
            let dup = m["idempotencyKey"] == "dup";
            let o = message.as_object_mut().unwrap();
            if dup {
                o.insert("data".into(), json!({"original": true}));
            } else if full {
                o.insert("data".into(), json!({"server": "kept"}));
            } else if f["brief"] == json!(true) {
                o.remove("data");
            } else {
                o.entry("data").or_insert(json!({}));
            }
            json!({"status": if dup { "duplicate" } else { "accepted" }, "message": message})
        };
        while let Some(Ok(W::Text(t))) = ws.next().await {
            let f: Value = serde_json::from_str(&t).unwrap();
            kept.lock().unwrap().push(f.clone());
            let id = f["id"].clone();
            let a = match f["op"].as_str().unwrap_or("") {
                "negotiate" => {
                    json!({"op": "contract", "re": id, "maxFrame": 1048576, "contract": {"id": "ctr_raw", "subjects": [], "expiresAt": "2099-01-01T00:00:00Z"}})
                }
                "publish" => {
                    let mut a = decide(&f, &f["message"]);
                    a["op"] = json!("decision");
                    a["re"] = id;
                    a
                }
                "publish_batch" => {
                    let results: Vec<Value> = f["messages"].as_array().unwrap().iter().map(|m| decide(&f, m)).collect();
                    json!({"op": "decisions", "re": id, "results": results})
                }
                op => json!({"op": "error", "re": id, "error": {"code": "BAD_REQUEST", "message": format!("no {op} here")}}),
            };
            ws.send(W::Text(a.to_string())).await.unwrap();
        }
    });
    (port, frames)
}

/// Publish frames carry "brief":true; an accepted answer without data gets
/// the data sent, one with data (an old server) and a duplicate keep theirs.
#[tokio::test]
async fn publish_frames_ask_for_brief_answers() {
    for full in [false, true] {
        let (port, frames) = raw_endpoint(full).await;
        let opts = ConnectOptions::default().reconnect(false).keepalive(None);
        let s = Session::connect(&format!("ws://127.0.0.1:{port}"), "raw-token", &[SUBJECT], opts).await.unwrap();
        let data = json!({"text": "café \"q\" ✓", "n": [1.5, null, {"x": []}]});
        let one = s.publish(&note(data.clone())).await.unwrap();
        // Queued while the writer waits its turn (this runtime has one
        // thread): they leave together, in one publish_batch.
        let mut pending = Vec::new();
        for m in [note(Value::Null), note(json!([])), note(json!({"sent": 1})).with_idempotency_key("dup")] {
            pending.push(s.publish_async(&m).await.unwrap());
        }
        let mut ds = vec![one];
        for p in pending {
            ds.push(p.await.unwrap());
        }
        let frames = frames.lock().unwrap().clone();
        let ops: Vec<&str> = frames.iter().map(|f| f["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["negotiate", "publish", "publish_batch"]);
        for f in &frames[1..] {
            assert_eq!(f["brief"], json!(true), "{} asks for a brief answer", f["op"]);
        }
        let got: Vec<(Status, &str)> = ds.iter().map(|d| (d.status, d.id())).collect();
        assert_eq!(
            got,
            [(Status::Accepted, "msg_1"), (Status::Accepted, "msg_2"), (Status::Accepted, "msg_3"), (Status::Duplicate, "msg_4")]
        );
        if full {
            for d in &ds[..3] {
                assert_eq!(d.message.data, json!({"server": "kept"}), "an answer's own data is kept");
            }
        } else {
            assert_eq!(ds[0].message.data, data);
            assert_eq!(ds[1].message.data, json!({}));
            assert_eq!(ds[2].message.data, json!([]));
        }
        assert_eq!(ds[3].message.data, json!({"original": true}), "a duplicate keeps the original's data");
        s.close().await.unwrap();
    }
}
