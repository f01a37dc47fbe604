//! A message's `hops` (docs/protocol.md, "hops"): how many WebAssembly
//! programs deep it is, set by the broker. A delivery exposes it (0 when
//! absent or `null`), a malformed one is a bad frame as a malformed sequence is, it
//! enters no signing input, and what a publisher writes there is replaced.

mod common;

use common::{end, ok_to_all, raw_opts, raw_server, Behaviour, Server};
use pigeon_client::crypto::{self, Keys};
use pigeon_client::{Message, Session, Status, SubscribeOptions};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn deliver(m: &Value) -> String {
    json!({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m}).to_string()
}

async fn next(sub: &mut pigeon_client::Subscription) -> pigeon_client::Delivery {
    tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("nothing delivered").unwrap().unwrap()
}

#[tokio::test]
async fn a_delivered_hops_is_exposed_and_an_absent_one_is_zero() {
    let (url, tx, task) = raw_server(Behaviour::default(), ok_to_all("sub_1", Arc::default())).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    // None: no hops member; null reads as absent, as Go reads it.
    let cases = [(Some(json!(3)), 3u32), (None, 0), (Some(Value::Null), 0), (Some(json!(0)), 0), (Some(json!(u32::MAX)), u32::MAX)];
    for (i, (hops, _)) in cases.iter().enumerate() {
        let mut m = json!({"id": format!("msg_{i}"), "subject": "x", "sequence": i + 1, "data": {}});
        if let Some(h) = hops {
            m["hops"] = h.clone();
        }
        tx.send(deliver(&m)).unwrap();
    }
    for (i, (hops, want)) in cases.iter().enumerate() {
        let d = next(&mut sub).await;
        assert_eq!((d.message.id.as_str(), d.message.hops), (format!("msg_{i}").as_str(), *want), "hops {hops:?}");
        d.ack().await.unwrap();
    }
    end(s, task).await;
}

/// A hops that is not a JSON integer of 0 to 2^32-1 (nor `null`, read as
/// absent) makes the delivery a bad frame, as a sequence that is not an
/// integer of its range does: reported `BAD_FRAME`, never handed out, and
/// the reader goes on.
#[tokio::test]
async fn a_hops_that_is_not_an_integer_of_u32_is_a_bad_frame() {
    let (url, tx, task) = raw_server(Behaviour::default(), ok_to_all("sub_1", Arc::default())).await;
    let errs: Arc<Mutex<Vec<pigeon_client::Error>>> = Arc::default();
    let e = errs.clone();
    let s = Session::connect(&url, "t", &["x"], raw_opts().on_error(move |err| e.lock().unwrap().push(err))).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    let bad = ["-1", "-0", "-0.0", "1.5", "1.0", "1e0", "4294967296", "18446744073709551616", "\"3\"", "true", "[3]"];
    for (i, h) in bad.iter().enumerate() {
        tx.send(format!(
            r#"{{"op":"deliver","sub":"sub_1","attempt":1,"message":{{"id":"msg_bad_{i}","subject":"x","sequence":{},"hops":{h},"data":{{}}}}}}"#,
            i + 1
        ))
        .unwrap();
    }
    tx.send(deliver(&json!({"id": "msg_good", "subject": "x", "sequence": 99, "hops": 2, "data": {}}))).unwrap();
    let d = next(&mut sub).await;
    assert_eq!((d.message.id.as_str(), d.message.hops), ("msg_good", 2), "a delivery with a malformed hops was handed out");
    d.ack().await.unwrap();
    let errs = errs.lock().unwrap().clone();
    let frames: Vec<_> = errs.iter().filter(|e| e.code == "BAD_FRAME").collect();
    assert_eq!(frames.len(), bad.len(), "each malformed hops is one BAD_FRAME: {errs:#?}");
    end(s, task).await;
}

#[test]
fn hops_is_written_only_when_set() {
    let m = Message::new("x", "t", "i");
    assert!(serde_json::to_value(&m).unwrap().get("hops").is_none());
    let m = Message { hops: 7, ..m };
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v["hops"], json!(7));
    assert_eq!(serde_json::from_value::<Message>(v).unwrap().hops, 7);
}

/// hops is in no signing input: a signed message delivered with one
/// verifies, and exposes it.
#[tokio::test]
async fn a_signed_message_delivered_with_hops_verifies() {
    let k = Keys::generate();
    let mut m = Message::new("x", "t", "i").with_data(json!({"text": "hi"}));
    crypto::sign_message(&mut m, &k.signing_kid, &k.signing).unwrap();
    let mut wire = serde_json::to_value(&m).unwrap();
    wire["sequence"] = json!(1);
    wire["hops"] = json!(3);
    let (url, tx, task) = raw_server(Behaviour::default(), ok_to_all("sub_1", Arc::default())).await;
    let s = Session::connect(&url, "t", &["x"], raw_opts()).await.unwrap();
    let mut sub = s.subscribe_stream("x", SubscribeOptions::default()).await.unwrap();
    tx.send(deliver(&wire)).unwrap();
    let d = next(&mut sub).await;
    assert_eq!(d.message.hops, 3);
    crypto::verify_message_with_keys(&d.message, &k.public_keys()).unwrap();
    // Another hops, as a broker sets it, changes nothing signed.
    let moved = Message { hops: 9, ..d.message.clone() };
    crypto::verify_message_with_keys(&moved, &k.public_keys()).unwrap();
    d.ack().await.unwrap();
    end(s, task).await;
}

/// Over a real server: a hops the publisher writes is replaced (a
/// transport publisher's is 0), in the decision and in what is received.
#[tokio::test]
async fn a_hops_the_publisher_writes_is_replaced_by_the_broker() {
    let srv = Server::start("");
    let orders = common::connect(&srv, "orders-token", &["notifications.send"]).await;
    let mut m = common::notification("hops");
    m.hops = 9;
    let d = orders.publish(&m).await.unwrap();
    assert_eq!((d.status, d.message.hops), (Status::Accepted, 0));
    let n = common::connect(&srv, "notifier-token", &["notifications.send"]).await;
    let got = n.receive("notifications.send", 10).await.unwrap();
    let mine = got.iter().find(|g| g.id == d.message.id).expect("the message published");
    assert_eq!(mine.hops, 0);
    n.ack_sequence("notifications.send", &mine.id, mine.sequence).await.unwrap();
    orders.close().await.unwrap();
    n.close().await.unwrap();
}
